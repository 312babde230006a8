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
use kruise_core::ratelimit::Bucket;
use tokio::time::Instant;
use tower::{Layer, Service};

/// A tower layer applying a shared [`Bucket`].
#[derive(Clone)]
pub struct ThrottleLayer {
    bucket: Arc<Mutex<Bucket>>,
}

impl ThrottleLayer {
    pub fn new(qps: f64, burst: u32) -> Self {
        Self {
            bucket: Arc::new(Mutex::new(Bucket::new(
                qps,
                burst,
                Instant::now().into_std(),
            ))),
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
            .map(|mut b| b.reserve(Instant::now().into_std()))
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
                    bucket.back_off(Instant::now().into_std(), delay);
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
}
