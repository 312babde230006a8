//! Client-side rate limiting (`--kube-api-qps`, `--kube-api-burst`): a token bucket in front of every
//! request to the apiserver, so a manager catching up on thousands of objects cannot flood it.

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

impl<S, R> Service<R> for Throttle<S>
where
    S: Service<R>,
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
        Box::pin(async move {
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            future.await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
