//! Client-side rate limiting (`--kube-api-qps`, `--kube-api-burst`): a token bucket in front of every
//! request to the apiserver, so a manager catching up on thousands of objects cannot flood it.
//!
//! The bucket also honours the apiserver's own limit: a `429 Too Many Requests` (API Priority and
//! Fairness rejecting a request, or a max-in-flight limit) holds every further request of the client
//! for its `Retry-After` seconds (1 s when absent, at most 60 s), instead of letting the workers retry
//! into a server that has just said it is full. The refused request itself fails with the 429 and is
//! requeued by its controller, as any failed write is.

use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::time::Instant;
use tower::{Layer, Service};

/// Token bucket arithmetic, pure: `reserve` returns how long the caller must wait for its token.
#[derive(Debug)]
pub struct Bucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    pub fn new(qps: f64, burst: u32, now: Instant) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            qps: qps.max(0.001),
            burst,
            tokens: burst,
            last: now,
        }
    }

    /// The apiserver asked for a pause of `delay`: no request leaves before `now + delay`, and the
    /// queue behind resumes at the steady rate after it (no burst right after a 429).
    pub fn back_off(&mut self, now: Instant, delay: Duration) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        let tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        self.tokens = tokens.min(-delay.as_secs_f64() * self.qps + 1.0);
    }

    /// Takes one token; tokens may go negative (queued requests), each waiting its turn.
    pub fn reserve(&mut self, now: Instant) -> Duration {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst) - 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.qps)
        }
    }
}

/// A tower layer applying a shared [`Bucket`].
#[derive(Clone)]
pub struct ThrottleLayer {
    bucket: Arc<Mutex<Bucket>>,
}

impl ThrottleLayer {
    pub fn new(qps: f64, burst: u32) -> Self {
        Self {
            bucket: Arc::new(Mutex::new(Bucket::new(qps, burst, Instant::now()))),
        }
    }
}

impl<S> Layer<S> for ThrottleLayer {
    type Service = Throttle<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Throttle {
            inner,
            bucket: self.bucket.clone(),
        }
    }
}

pub struct Throttle<S> {
    inner: S,
    bucket: Arc<Mutex<Bucket>>,
}

/// How long a 429 asks the client to wait: its `Retry-After` in seconds (the apiserver sends whole
/// seconds), 1 s when absent or unreadable, at most 60 s.
pub fn retry_after(headers: &http::HeaderMap) -> Duration {
    let seconds = headers
        .get(http::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(1);
    Duration::from_secs(seconds.clamp(1, 60))
}

impl<S, R, B> Service<R> for Throttle<S>
where
    S: Service<R, Response = http::Response<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        let wait = self
            .bucket
            .lock()
            .map(|mut b| b.reserve(Instant::now()))
            .unwrap_or(Duration::ZERO);
        // The inner future does nothing until polled, so the request leaves only after the wait.
        let future = self.inner.call(request);
        let bucket = self.bucket.clone();
        Box::pin(async move {
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            let response = future.await?;
            if response.status() == http::StatusCode::TOO_MANY_REQUESTS {
                let delay = retry_after(response.headers());
                tracing::warn!(
                    delay_seconds = delay.as_secs(),
                    "the apiserver answered 429 Too Many Requests: holding this client's requests"
                );
                if let Ok(mut bucket) = bucket.lock() {
                    bucket.back_off(Instant::now(), delay);
                }
            }
            Ok(response)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_cases() {
        let cases = [
            (None, 1),
            (Some("3"), 3),
            (Some(" 7 "), 7),
            (Some("0"), 1),
            (Some("3600"), 60),
            (Some("Wed, 21 Oct 2015 07:28:00 GMT"), 1),
        ];
        for (header, want) in cases {
            let mut headers = http::HeaderMap::new();
            if let Some(value) = header {
                headers.insert(
                    http::header::RETRY_AFTER,
                    http::HeaderValue::from_static(value),
                );
            }
            assert_eq!(
                retry_after(&headers),
                Duration::from_secs(want),
                "{header:?}"
            );
        }
    }

    #[test]
    fn a_back_off_holds_the_next_requests_then_the_steady_rate_resumes() {
        let start = Instant::now();
        let mut bucket = Bucket::new(10.0, 5, start);
        // A full burst is available, but the apiserver said "wait 2 s".
        bucket.back_off(start, Duration::from_secs(2));
        let waits: Vec<Duration> = (0..3).map(|_| bucket.reserve(start)).collect();
        assert_eq!(
            waits,
            [
                Duration::from_secs(2),
                Duration::from_millis(2100),
                Duration::from_millis(2200)
            ]
        );
        // A shorter back-off never shortens a wait already owed.
        let mut bucket = Bucket::new(10.0, 5, start);
        bucket.back_off(start, Duration::from_secs(5));
        bucket.back_off(start, Duration::from_secs(1));
        assert_eq!(bucket.reserve(start), Duration::from_secs(5));
    }

    /// The layer end to end over a service that answers 429 once: the next request waits the
    /// Retry-After, the refused one is returned to its caller as it came.
    #[tokio::test(start_paused = true)]
    async fn a_429_holds_the_client_for_its_retry_after() {
        let calls = Arc::new(Mutex::new(0_u32));
        let counter = calls.clone();
        let inner = tower::service_fn(move |_request: ()| {
            let counter = counter.clone();
            async move {
                let n = {
                    let mut calls = counter.lock().map_err(|_| "poisoned")?;
                    *calls += 1;
                    *calls
                };
                let status = if n == 1 { 429 } else { 200 };
                http::Response::builder()
                    .status(status)
                    .header(http::header::RETRY_AFTER, "3")
                    .body(())
                    .map_err(|_| "response")
            }
        });
        let mut service = ThrottleLayer::new(100.0, 10).layer(inner);
        let first = service.call(()).await.expect("answered");
        assert_eq!(first.status(), http::StatusCode::TOO_MANY_REQUESTS);
        let sent = Instant::now();
        let second = service.call(()).await.expect("answered");
        assert_eq!(second.status(), http::StatusCode::OK);
        assert!(
            Instant::now() - sent >= Duration::from_secs(3),
            "the next request waited {:?}",
            Instant::now() - sent
        );
    }

    #[test]
    fn burst_then_steady_rate() {
        let start = Instant::now();
        let mut bucket = Bucket::new(10.0, 3, start);
        let waits: Vec<Duration> = (0..5).map(|_| bucket.reserve(start)).collect();
        assert_eq!(
            &waits[..3],
            &[Duration::ZERO; 3],
            "the burst passes at once"
        );
        assert_eq!(waits[3], Duration::from_millis(100));
        assert_eq!(waits[4], Duration::from_millis(200));
        // After a quiet second the bucket is full again (capped at the burst).
        let later = start + Duration::from_secs(2);
        assert_eq!(bucket.reserve(later), Duration::ZERO);
    }
}
