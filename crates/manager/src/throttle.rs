//! Client-side rate limiting (`--kube-api-qps`, `--kube-api-burst`): a token bucket in front of every
//! request to the apiserver, so a manager catching up on thousands of objects cannot flood it.
//!
//! The bucket also honours the apiserver's own limit: a `429 Too Many Requests` (API Priority and
//! Fairness rejecting a request, or a max-in-flight limit) holds every further request of the client
//! for its `Retry-After` seconds (1 s when absent, at most 60 s), instead of letting the workers retry
//! into a server that has just said it is full. The refused request itself fails with the 429 and is
//! requeued by its controller, as any failed write is.
//!
//! [`InFlightLayer`] bounds the requests a client has in flight at once (`--kube-api-max-in-flight`).
//! The token bucket bounds requests per second, not how many wait on the apiserver together: each
//! reconcile has up to 16 writes in flight, and over HTTP/1.1 each request in flight takes a
//! connection of its own (TLS session and hyper's buffers, about 50 KiB, kept 90 s once idle). With the
//! bound, a create of 3,000 Pods held half the memory at its peak, and every controller's requests take
//! the apiserver's seats in the order they asked for them (docs/sizing.md).

use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use kruise_core::ratelimit::Bucket;
use tokio::sync::Semaphore;
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

/// A tower layer bounding the requests in flight through it; watches are not counted (they stream
/// for minutes on a connection of their own).
#[derive(Clone)]
pub struct InFlightLayer {
    seats: Arc<Semaphore>,
}

impl InFlightLayer {
    /// At most `max` requests at once (at least 1).
    pub fn new(max: usize) -> Self {
        Self {
            seats: Arc::new(Semaphore::new(max.max(1))),
        }
    }
}

impl<S> Layer<S> for InFlightLayer {
    type Service = InFlight<S>;

    fn layer(&self, inner: S) -> Self::Service {
        InFlight {
            inner,
            seats: self.seats.clone(),
        }
    }
}

pub struct InFlight<S> {
    inner: S,
    seats: Arc<Semaphore>,
}

impl<S, B, R> Service<http::Request<B>> for InFlight<S>
where
    S: Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Seated<R>>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let watch = crate::fence::is_watch(&request);
        // As in the throttle: the inner future sends nothing until it is polled, after the wait.
        let future = self.inner.call(request);
        let seats = self.seats.clone();
        Box::pin(async move {
            // The semaphore is never closed; should it be, the request goes unbounded, not lost.
            let seat = if watch {
                None
            } else {
                seats.acquire_owned().await.ok()
            };
            let response = future.await?;
            Ok(response.map(|body| Seated { body, seat }))
        })
    }
}

pin_project_lite::pin_project! {
    /// A response body that holds its request's seat until it has been read to the end (or
    /// dropped): the connection it comes on is busy until then, and a seat given back earlier lets
    /// the next request open another connection.
    pub struct Seated<B> {
        #[pin]
        body: B,
        seat: Option<tokio::sync::OwnedSemaphorePermit>,
    }
}

impl<B: http_body::Body> http_body::Body for Seated<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let frame = this.body.poll_frame(cx);
        if matches!(frame, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            this.seat.take();
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
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

    /// No more requests reach the inner service at once than the bound, and a watch is not held
    /// back by requests that fill it.
    #[tokio::test(start_paused = true)]
    async fn requests_in_flight_never_exceed_the_bound() {
        use http_body_util::BodyExt;
        use std::sync::atomic::{AtomicUsize, Ordering};
        let now = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let (n, p) = (now.clone(), peak.clone());
        let inner = tower::service_fn(move |request: http::Request<()>| {
            let (n, p) = (n.clone(), p.clone());
            async move {
                let watch = crate::fence::is_watch(&request);
                if !watch {
                    let current = n.fetch_add(1, Ordering::SeqCst) + 1;
                    p.fetch_max(current, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    n.fetch_sub(1, Ordering::SeqCst);
                }
                http::Response::builder()
                    .status(200)
                    .body(String::from("{}"))
                    .map_err(|_| "response")
            }
        });
        let layer = InFlightLayer::new(3);
        let mut calls = Vec::new();
        for _ in 0..10 {
            let mut service = layer.layer(inner.clone());
            calls.push(async move {
                let response = service.call(request("/api/v1/pods")).await?;
                response.into_body().collect().await.map_err(|_| "body")?;
                Ok::<_, &str>(())
            });
        }
        let mut watch_service = layer.layer(inner.clone());
        let watch = watch_service.call(request("/api/v1/pods?watch=true"));
        let started = Instant::now();
        let all = tokio::spawn(futures::future::join_all(calls));
        watch.await.expect("the watch answered");
        assert_eq!(
            Instant::now(),
            started,
            "the watch waited behind the bounded requests"
        );
        let answers = all.await.expect("joined");
        assert!(answers.iter().all(|a| a.is_ok()));
        assert_eq!(peak.load(Ordering::SeqCst), 3, "requests in flight at once");
        // 10 requests of 100 ms, 3 at a time: 4 rounds.
        assert_eq!(Instant::now() - started, Duration::from_millis(400));
    }

    /// A request keeps its seat until its answer's body has been read: the connection is busy
    /// until then.
    #[tokio::test(start_paused = true)]
    async fn a_seat_is_held_until_the_body_is_read() {
        use http_body_util::BodyExt;
        let inner = tower::service_fn(|_request: http::Request<()>| async {
            http::Response::builder()
                .status(200)
                .body(String::from("{}"))
                .map_err(|_| "response")
        });
        let layer = InFlightLayer::new(1);
        let first = layer
            .layer(inner)
            .call(request("/api/v1/pods"))
            .await
            .expect("answered");
        let mut second = layer.layer(inner).call(request("/api/v1/nodes"));
        assert!(
            futures::poll!(&mut second).is_pending(),
            "the second request went while the first one's body was unread"
        );
        first.into_body().collect().await.expect("body");
        second
            .await
            .expect("the second request goes once the body was read");
    }

    fn request(uri: &str) -> http::Request<()> {
        http::Request::builder().uri(uri).body(()).expect("request")
    }
}
