//! Waiting on conditions with a deadline: tests never sleep a fixed time and hope.

use std::fmt::Display;
use std::time::{Duration, Instant};

use anyhow::bail;

/// How often a condition is re-checked.
pub const POLL: Duration = Duration::from_millis(200);

/// Polls `check` until it returns `Ok(Some(value))` and returns that value. An `Err` from `check` does not
/// stop the wait (the cluster may be catching up) but is reported if the deadline passes; `Ok(None)` means
/// "not yet". `what` names the condition in the timeout error.
pub async fn eventually<T, F, Fut>(
    what: impl Display,
    timeout: Duration,
    mut check: F,
) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    let mut last_error = None;
    loop {
        match check().await {
            Ok(Some(value)) => return Ok(value),
            Ok(None) => {}
            Err(error) => last_error = Some(error),
        }
        if Instant::now() >= deadline {
            match last_error {
                Some(error) => {
                    bail!("timed out after {timeout:?} waiting for {what}; last error: {error:#}")
                }
                None => bail!("timed out after {timeout:?} waiting for {what}"),
            }
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Like [`eventually`] for a yes/no condition.
pub async fn until<F, Fut>(
    what: impl Display,
    timeout: Duration,
    mut check: F,
) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<bool>>,
{
    eventually(what, timeout, || {
        let fut = check();
        async move { Ok(fut.await?.then_some(())) }
    })
    .await
}

/// Reads `read` every `hold` until two reads in a row are equal, and returns that value: a state that
/// went a whole `hold` without changing (nothing written to what `read` looks at). Fails when it still
/// changes after `timeout`, or when `read` fails.
pub async fn settled<T, F, Fut>(
    what: impl Display,
    timeout: Duration,
    hold: Duration,
    mut read: F,
) -> anyhow::Result<T>
where
    T: PartialEq,
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<T>>,
{
    let deadline = Instant::now() + timeout;
    let mut before = read().await?;
    loop {
        tokio::time::sleep(hold).await;
        let now = read().await?;
        if now == before {
            return Ok(now);
        }
        if Instant::now() >= deadline {
            bail!("{what} did not settle within {timeout:?}: it kept changing");
        }
        before = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test]
    async fn returns_when_condition_holds() -> anyhow::Result<()> {
        let calls = AtomicU32::new(0);
        let value = eventually("third call", Duration::from_secs(5), || async {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            Ok((n >= 3).then_some(n))
        })
        .await?;
        assert_eq!(value, 3);
        Ok(())
    }

    #[tokio::test]
    async fn settles_once_two_reads_agree() -> anyhow::Result<()> {
        // The value changes on the first three reads, then stays.
        let calls = AtomicU32::new(0);
        let value = settled(
            "the counter",
            Duration::from_secs(5),
            Duration::from_millis(10),
            || async { Ok(calls.fetch_add(1, Ordering::SeqCst).min(3)) },
        )
        .await?;
        assert_eq!(value, 3);
        let never: anyhow::Result<u32> = settled(
            "a clock",
            Duration::from_millis(100),
            Duration::from_millis(10),
            || async { Ok(calls.fetch_add(1, Ordering::SeqCst)) },
        )
        .await;
        assert!(never.is_err());
        Ok(())
    }

    #[tokio::test]
    async fn times_out_with_last_error() {
        let result: anyhow::Result<()> =
            eventually("never", Duration::from_millis(300), || async {
                Err(anyhow::anyhow!("still broken"))
            })
            .await;
        let message = format!("{:#}", result.expect_err("must time out"));
        assert!(
            message.contains("waiting for never") && message.contains("still broken"),
            "{message}"
        );
    }
}
