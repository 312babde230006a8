//! Fencing of the leader's writes, and a deadline on every request that is not a watch.
//!
//! A leader may write only while its lease is certainly still its own. The elector grants the fence
//! until `start of the last successful renewal + renew deadline`; the renew deadline is shorter than the
//! lease duration, so the fence closes before any other candidate can see the lease as expired. Every
//! mutating request of the leader's client checks the fence *when it leaves* (after the client-side rate
//! limiter, where a backlog of writes may wait), so a process that was frozen (SIGSTOP), cut off from the
//! apiserver, or slow to notice that it lost the lease sends nothing once its time is up. The clock is
//! monotonic: a frozen process finds the deadline passed when it resumes, whatever its tasks do first.
//!
//! Requests other than watches also get a deadline ([`TimeoutLayer`]): without one, a request on a
//! black-holed connection waits forever and the write it carries may be delivered long after the
//! network heals.

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use http::{Method, Request};
use tokio::sync::watch;
use tower::{BoxError, Layer, Service};

/// Until when the holder of this fence may write. Shared by the elector (which grants and revokes it)
/// and the leader's client (which checks it). A watch channel, so that a write in flight learns of a
/// revocation the moment it happens (see [`Fence`]).
#[derive(Clone, Debug)]
pub struct LeaderFence {
    until: Arc<watch::Sender<Option<Instant>>>,
}

impl Default for LeaderFence {
    /// A closed fence.
    fn default() -> Self {
        Self {
            until: Arc::new(watch::Sender::new(None)),
        }
    }
}

impl LeaderFence {
    /// A fence that is always open: for a manager that runs without leader election.
    pub fn open() -> Self {
        let fence = Self::default();
        fence.grant_until(None);
        fence
    }

    /// Opens the fence until `deadline` (`None`: forever), replacing the previous grant: the elector
    /// grants from each renewal in turn.
    pub fn grant_until(&self, deadline: Option<Instant>) {
        self.until
            .send_replace(Some(deadline.unwrap_or_else(far_future)));
    }

    /// Closes the fence at once (lease lost, released or stepping down).
    pub fn revoke(&self) {
        self.until.send_replace(None);
    }

    /// The instant the fence closes, when it is open now.
    pub fn deadline(&self) -> Option<Instant> {
        let until = (*self.until.borrow())?;
        (Instant::now() < until).then_some(until)
    }

    pub fn is_open(&self) -> bool {
        self.deadline().is_some()
    }

    /// Resolves once the fence is closed: at its deadline, or when it is revoked before it.
    pub async fn closed(&self) {
        let mut changes = self.until.subscribe();
        loop {
            let Some(deadline) = *changes.borrow_and_update() else {
                return;
            };
            if Instant::now() >= deadline {
                return;
            }
            tokio::select! {
                () = tokio::time::sleep_until(deadline.into()) => {}
                changed = changes.changed() => {
                    if changed.is_err() {
                        // Every sender is gone: nobody can grant it again, and `self` holds one.
                        return;
                    }
                }
            }
        }
    }
}

fn far_future() -> Instant {
    // About 30 years: "never" for a process, without overflowing Instant arithmetic.
    Instant::now() + Duration::from_secs(60 * 60 * 24 * 365 * 30)
}

/// Whether a request changes state on the server (and so must be fenced).
pub fn is_write(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Whether a request is a watch, which streams for minutes and must not get a request deadline.
pub fn is_watch<B>(request: &Request<B>) -> bool {
    request.uri().query().is_some_and(|query| {
        query
            .split('&')
            .any(|pair| pair == "watch=true" || pair == "watch=1")
    })
}

/// The error a fenced write fails with (the controllers' driver tells it apart from a failure).
pub use kruise_controllers::error::Fenced;

/// Refuses writes while the fence is closed.
#[derive(Clone)]
pub struct FenceLayer {
    fence: LeaderFence,
}

impl FenceLayer {
    pub fn new(fence: LeaderFence) -> Self {
        Self { fence }
    }
}

impl<S> Layer<S> for FenceLayer {
    type Service = Fence<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Fence {
            inner,
            fence: self.fence.clone(),
        }
    }
}

pub struct Fence<S> {
    inner: S,
    fence: LeaderFence,
}

impl<S, B> Service<Request<B>> for Fence<S>
where
    S: Service<Request<B>>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<S::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let write = is_write(request.method());
        let refused = || Fenced {
            method: request.method().clone(),
            path: request.uri().path().to_string(),
        };
        if write && !self.fence.is_open() {
            let refused = refused();
            return Box::pin(async move { Err(Box::new(refused) as BoxError) });
        }
        let refused_later = write.then(refused);
        // kube's service stack sends nothing until its future is polled (hyper's client connects and
        // writes from inside the future), so checking the fence again when this future is first polled
        // stops a write that waited (in the rate limiter above, or in a frozen process) past the fence.
        let future = self.inner.call(request);
        let fence = self.fence.clone();
        Box::pin(async move {
            let Some(refused) = refused_later else {
                return future.await.map_err(Into::into);
            };
            if !fence.is_open() {
                return Err(Box::new(refused) as BoxError);
            }
            // A write in flight when the fence closes is abandoned: dropping it closes its
            // connection, so a write held by a partition is cancelled by the apiserver when the
            // partition heals instead of landing after another replica took the lease (the term's
            // drain would otherwise keep it, and its connection, alive).
            tokio::select! {
                answer = future => answer.map_err(Into::into),
                () = fence.closed() => Err(Box::new(refused) as BoxError),
            }
        })
    }
}

/// A deadline on every request except watches.
#[derive(Clone)]
pub struct TimeoutLayer {
    timeout: Duration,
}

impl TimeoutLayer {
    pub fn new(timeout: Duration) -> Self {
        Self { timeout }
    }
}

impl<S> Layer<S> for TimeoutLayer {
    type Service = Timeout<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Timeout {
            inner,
            timeout: self.timeout,
        }
    }
}

#[derive(Clone)]
pub struct Timeout<S> {
    inner: S,
    timeout: Duration,
}

/// The error of a request that ran past its deadline.
#[derive(Debug, thiserror::Error)]
#[error("{method} {path}: no answer from the apiserver within {timeout:?}")]
pub struct TimedOut {
    pub method: Method,
    pub path: String,
    pub timeout: Duration,
}

impl<S, B> Service<Request<B>> for Timeout<S>
where
    S: Service<Request<B>>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<S::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let deadline = (!is_watch(&request)).then_some(self.timeout);
        let (method, path) = (request.method().clone(), request.uri().path().to_string());
        let future = self.inner.call(request);
        Box::pin(async move {
            match deadline {
                None => future.await.map_err(Into::into),
                Some(timeout) => match tokio::time::timeout(timeout, future).await {
                    Ok(result) => result.map_err(Into::into),
                    Err(_) => Err(Box::new(TimedOut {
                        method,
                        path,
                        timeout,
                    }) as BoxError),
                },
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tower::ServiceExt;

    #[test]
    fn fence_opens_and_closes() {
        let fence = LeaderFence::default();
        assert!(!fence.is_open(), "closed until granted");
        fence.grant_until(Some(Instant::now() + Duration::from_secs(10)));
        assert!(fence.is_open());
        fence.revoke();
        assert!(!fence.is_open());
        fence.grant_until(Some(Instant::now() - Duration::from_millis(1)));
        assert!(!fence.is_open(), "a deadline in the past is closed");
        assert!(LeaderFence::open().is_open());
    }

    #[test]
    fn writes_and_watches() {
        let cases = [
            ("GET", "/api/v1/pods", false, false),
            (
                "GET",
                "/api/v1/pods?watch=true&resourceVersion=1",
                false,
                true,
            ),
            (
                "GET",
                "/api/v1/pods?allowWatchBookmarks=true&watch=1",
                false,
                true,
            ),
            ("GET", "/api/v1/pods?watchy=true", false, false),
            ("POST", "/api/v1/namespaces/a/pods", true, false),
            ("PATCH", "/api/v1/namespaces/a/pods/p", true, false),
            ("PUT", "/api/v1/namespaces/a/pods/p/status", true, false),
            ("DELETE", "/api/v1/namespaces/a/pods/p", true, false),
        ];
        for (method, uri, write, watch) in cases {
            let request = Request::builder()
                .method(method)
                .uri(uri)
                .body(())
                .expect("valid request");
            assert_eq!(is_write(request.method()), write, "{method} {uri}");
            assert_eq!(is_watch(&request), watch, "{method} {uri}");
        }
    }

    fn counting() -> (
        Arc<AtomicUsize>,
        impl Service<Request<()>, Response = (), Error = Infallible, Future: Send>,
    ) {
        let sent = Arc::new(AtomicUsize::new(0));
        let counter = sent.clone();
        // Like kube's stack, it sends when its future is polled, not when it is called.
        let service = tower::service_fn(move |_: Request<()>| {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                Ok::<_, Infallible>(())
            }
        });
        (sent, service)
    }

    async fn send<S>(service: &mut S, request: Request<()>) -> Result<(), BoxError>
    where
        S: Service<Request<()>, Response = (), Error = BoxError>,
    {
        ServiceExt::<Request<()>>::ready(service)
            .await?
            .call(request)
            .await
    }

    #[tokio::test]
    async fn closed_fence_refuses_writes_but_not_reads() {
        let fence = LeaderFence::default();
        let (sent, service) = counting();
        let mut service = FenceLayer::new(fence.clone()).layer(service);
        let write = || {
            Request::builder()
                .method("POST")
                .uri("/api/v1/namespaces/a/pods")
                .body(())
                .expect("valid")
        };
        let read = Request::builder()
            .uri("/api/v1/pods")
            .body(())
            .expect("valid");
        let refused = send(&mut service, write()).await;
        assert!(refused.is_err_and(|e| e.is::<Fenced>()));
        assert!(send(&mut service, read).await.is_ok());
        assert_eq!(sent.load(Ordering::SeqCst), 1, "only the read was sent");
        fence.grant_until(Some(Instant::now() + Duration::from_secs(5)));
        assert!(send(&mut service, write()).await.is_ok());
        assert_eq!(sent.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn the_fence_is_checked_when_the_request_leaves_not_when_it_is_queued() {
        let fence = LeaderFence::default();
        fence.grant_until(Some(Instant::now() + Duration::from_secs(5)));
        let (sent, service) = counting();
        let mut service = FenceLayer::new(fence.clone()).layer(service);
        let request = Request::builder()
            .method("PATCH")
            .uri("/api/v1/namespaces/a/pods/p")
            .body(())
            .expect("valid");
        // Queued (built) while leading, polled after the lease was lost.
        let queued = ServiceExt::<Request<()>>::ready(&mut service)
            .await
            .expect("ready")
            .call(request);
        fence.revoke();
        assert!(queued.await.is_err_and(|e| e.is::<Fenced>()));
        assert_eq!(sent.load(Ordering::SeqCst), 0);
    }

    /// A write sent while leading and still unanswered when the fence closes (held by a partition)
    /// is abandoned, its connection with it; a read is left to finish.
    #[tokio::test(start_paused = true)]
    async fn a_write_in_flight_is_abandoned_when_the_fence_closes() {
        let fence = LeaderFence::default();
        fence.grant_until(Some(Instant::now() + Duration::from_secs(60)));
        let answered = Arc::new(AtomicUsize::new(0));
        let counter = answered.clone();
        let held = tower::service_fn(move |_: Request<()>| {
            let counter = counter.clone();
            async move {
                tokio::time::sleep(Duration::from_secs(10)).await;
                counter.fetch_add(1, Ordering::SeqCst);
                Ok::<_, Infallible>(())
            }
        });
        let mut service = FenceLayer::new(fence.clone()).layer(held);
        let patch = Request::builder()
            .method("PATCH")
            .uri("/api/v1/namespaces/a/pods/p/status")
            .body(())
            .expect("valid");
        let write = ServiceExt::<Request<()>>::ready(&mut service)
            .await
            .expect("ready")
            .call(patch);
        let write = tokio::spawn(async move {
            let answer = write.await;
            (answer, tokio::time::Instant::now())
        });
        let read = ServiceExt::<Request<()>>::ready(&mut service)
            .await
            .expect("ready")
            .call(
                Request::builder()
                    .uri("/api/v1/pods")
                    .body(())
                    .expect("valid"),
            );
        tokio::time::sleep(Duration::from_secs(1)).await;
        fence.revoke();
        let revoked = tokio::time::Instant::now();
        let (write, ended) = write.await.expect("the write's task");
        assert!(write.is_err_and(|e| e.is::<Fenced>()));
        assert_eq!(
            ended, revoked,
            "abandoned when revoked, not at a later look"
        );
        assert!(read.await.is_ok(), "a read is not fenced");
        assert_eq!(
            answered.load(Ordering::SeqCst),
            1,
            "only the read was answered"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn requests_time_out_but_watches_do_not() {
        let slow = tower::service_fn(|_: Request<()>| async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok::<_, Infallible>(())
        });
        let mut service = TimeoutLayer::new(Duration::from_secs(5)).layer(slow);
        let get = Request::builder()
            .uri("/api/v1/pods")
            .body(())
            .expect("valid");
        let outcome = send(&mut service, get).await;
        assert!(outcome.is_err_and(|e| e.is::<TimedOut>()));
        let watch = Request::builder()
            .uri("/api/v1/pods?watch=true")
            .body(())
            .expect("valid");
        assert!(send(&mut service, watch).await.is_ok());
    }
}
