//! Liveness of the manager's apiserver connections and watches.
//!
//! A connection can die without a reset: an apiserver replica gone behind a load balancer, a NAT entry
//! that expired. The kernel keeps such a connection open and nothing ever arrives on it. kube's client
//! speaks HTTP/1.1, which has no PING to probe the peer with, so silence itself has to be the signal,
//! and silence has to be impossible on a healthy connection:
//! - every watch is asked to end after [`WatchTiming::timeout`] (`timeoutSeconds`; the apiserver sends
//!   a bookmark two seconds before it ends a watch that asked for bookmarks, as all of ours do), so a
//!   healthy watch brings bytes, or its clean end, at least that often;
//! - every other request is answered within its deadline (`fence::TimeoutLayer`) or fails;
//! - so a connection silent for longer than both ([`WatchTiming::read_timeout`], set on the client's
//!   configuration) is dead: the read fails, the connection is closed, and what it carried is retried
//!   on a new one. Idle pooled connections are read too, so a dead one is closed before it is reused.
//!
//! [`WatchLayer`] applies the first rule, gives each watch an idle deadline of its own (headers and
//! then every frame) and records every watch's progress in a [`WatchHealth`]. The leader steps down,
//! and `/readyz` reports unready, when some watch has made no progress past a bound while it is still
//! being tried: a replica that cannot see the cluster must neither act on it nor admit Pods for it.
//!
//! A streaming list (`sendInitialEvents=true`) keeps the timeout it asked for: its initial events may
//! take longer than a capped watch lives at a large scale. Bytes flow while it lists; once it is only
//! watching, the idle deadline ends it when it falls quiet, and the watcher goes on from the last
//! resourceVersion with an ordinary (capped) watch.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use http::{Request, Response, Uri};
use tower::{BoxError, Layer, Service};

use crate::fence::is_watch;

/// How long a healthy watch may go without bytes beyond its requested lifetime: the apiserver ends
/// it on time, but a busy one may take a moment to flush the end.
const IDLE_MARGIN: Duration = Duration::from_secs(5);
/// How much longer than any healthy silence a connection may be silent before it is declared dead.
const READ_MARGIN: Duration = Duration::from_secs(2);

/// The lifetimes and deadlines derived from `--watch-timeout-seconds`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WatchTiming {
    /// The `timeoutSeconds` every watch asks for (at most).
    pub timeout: Duration,
    /// How long a watch may wait for its headers or its next frame before it is abandoned.
    pub idle: Duration,
}

impl WatchTiming {
    pub fn new(timeout: Duration) -> Self {
        let timeout = timeout.max(Duration::from_secs(1));
        Self {
            timeout,
            idle: timeout + IDLE_MARGIN,
        }
    }

    /// The longest a connection may be silent while a read is pending: past every healthy silence,
    /// that of a watch (`idle`) and that of a request (`request_timeout`, after which the request
    /// has failed anyway).
    pub fn read_timeout(&self, request_timeout: Duration) -> Duration {
        self.idle.max(request_timeout) + READ_MARGIN
    }
}

/// The query of a watch request as it should be sent: `timeoutSeconds` at most `cap` (added when
/// missing), except for a streaming list, which keeps what it asked for.
pub fn capped_query(query: &str, cap: Duration) -> String {
    let streaming = query
        .split('&')
        .any(|pair| pair == "sendInitialEvents=true");
    if streaming {
        return query.to_string();
    }
    let cap = cap.as_secs().max(1);
    let mut pairs: Vec<String> = Vec::new();
    let mut seen = false;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.strip_prefix("timeoutSeconds=") {
            Some(value) => {
                seen = true;
                let asked = value.parse::<u64>().ok().filter(|v| *v > 0);
                let secs = asked.map_or(cap, |asked| asked.min(cap));
                pairs.push(format!("timeoutSeconds={secs}"));
            }
            None => pairs.push(pair.to_string()),
        }
    }
    if !seen {
        pairs.push(format!("timeoutSeconds={cap}"));
    }
    pairs.join("&")
}

/// What identifies one watch across its restarts: the path and the selectors, without the
/// resourceVersion and timeouts that change from one request to the next.
pub fn watch_key(uri: &Uri) -> String {
    let mut key = uri.path().to_string();
    for pair in uri.query().unwrap_or_default().split('&') {
        if pair.starts_with("labelSelector=") || pair.starts_with("fieldSelector=") {
            key.push(if key.contains('?') { '&' } else { '?' });
            key.push_str(pair);
        }
    }
    key
}

/// What is known of one watch (by [`watch_key`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// When it last showed life: a successful answer, a frame, its clean end.
    pub last_progress: Instant,
    /// When a request for it was last sent.
    pub last_attempt: Instant,
    /// Requests for it in flight (waiting for headers or streaming).
    pub open: usize,
    /// Whether its last request failed (refused, broken, silent) with no progress since.
    pub failing: bool,
}

/// How a watch stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Current,
    /// Still tried (a request open, or failed requests being retried) without progress for this long.
    Stale(Duration),
    /// Nobody has asked for it for [`FORGET_AFTER`] past the bound: forgotten.
    Abandoned,
}

/// How long past the bound a watch with nothing open is remembered. A watcher retrying a failed
/// watch tries again within its backoff (kube-runtime's caps at 30 s), so one not tried for longer is
/// no longer wanted.
pub const FORGET_AFTER: Duration = Duration::from_secs(60);

/// The verdict on one watch at `now`. Pure.
pub fn verdict(progress: &Progress, now: Instant, bound: Duration) -> Verdict {
    let quiet = now.saturating_duration_since(progress.last_progress);
    let untried = now.saturating_duration_since(progress.last_attempt);
    if progress.open > 0 {
        // A request hung without progress: stale however old.
        return match quiet > bound {
            true => Verdict::Stale(quiet),
            false => Verdict::Current,
        };
    }
    if untried > bound + FORGET_AFTER {
        return Verdict::Abandoned;
    }
    match progress.failing && quiet > bound {
        true => Verdict::Stale(quiet),
        // Ended well and not asked for again (yet): nothing is stale.
        false => Verdict::Current,
    }
}

/// The progress of every watch one client makes. Cheap to clone (shared).
#[derive(Clone, Default, Debug)]
pub struct WatchHealth {
    watches: Arc<Mutex<HashMap<String, Progress>>>,
    /// Watches abandoned because nothing came within their idle deadline (restarted by their
    /// watcher): `kruise_manager_watch_idle_restarts`.
    idle_restarts: prometheus_client::metrics::counter::Counter,
}

impl WatchHealth {
    /// Progress records that count their idle restarts on `idle_restarts` (one counter shared by
    /// every client of the process).
    pub fn counting(idle_restarts: prometheus_client::metrics::counter::Counter) -> Self {
        Self {
            watches: Arc::default(),
            idle_restarts,
        }
    }

    /// How many watches were abandoned for silence.
    pub fn idle_restarts(&self) -> u64 {
        self.idle_restarts.get()
    }

    fn update(&self, key: &str, change: impl FnOnce(&mut Progress)) {
        let mut watches = self
            .watches
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(progress) = watches.get_mut(key) {
            change(progress);
        }
    }

    /// A request for watch `key` is sent.
    fn attempt(&self, key: &str, now: Instant) {
        let mut watches = self
            .watches
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let progress = watches.entry(key.to_string()).or_insert(Progress {
            last_progress: now,
            last_attempt: now,
            open: 0,
            failing: false,
        });
        progress.last_attempt = now;
        progress.open += 1;
    }

    fn progress(&self, key: &str, now: Instant) {
        self.update(key, |p| {
            p.last_progress = now;
            p.failing = false;
        });
    }

    fn failed(&self, key: &str) {
        self.update(key, |p| p.failing = true);
    }

    fn closed(&self, key: &str) {
        self.update(key, |p| p.open = p.open.saturating_sub(1));
    }

    /// The watches tried but without progress for longer than `bound`, with how long; forgets the
    /// abandoned ones.
    pub fn stale(&self, now: Instant, bound: Duration) -> Vec<(String, Duration)> {
        let mut watches = self
            .watches
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut stale = Vec::new();
        watches.retain(|key, progress| match verdict(progress, now, bound) {
            Verdict::Abandoned => false,
            Verdict::Stale(quiet) => {
                stale.push((key.clone(), quiet));
                true
            }
            Verdict::Current => true,
        });
        stale.sort();
        stale
    }

    /// Resolves with the stale watches once there are any, checking every `every`.
    pub async fn until_stale(&self, bound: Duration, every: Duration) -> Vec<(String, Duration)> {
        Self::until_any_stale(&[self], bound, every).await
    }

    /// [`Self::until_stale`] over several sets of watches (a leader's own, and the process-wide
    /// caches its controllers read too).
    pub async fn until_any_stale(
        healths: &[&WatchHealth],
        bound: Duration,
        every: Duration,
    ) -> Vec<(String, Duration)> {
        loop {
            tokio::time::sleep(every).await;
            let now = Instant::now();
            let mut stale: Vec<(String, Duration)> =
                healths.iter().flat_map(|h| h.stale(now, bound)).collect();
            if !stale.is_empty() {
                stale.sort();
                return stale;
            }
        }
    }
}

/// One open watch request: counted open until dropped.
struct OpenWatch {
    health: WatchHealth,
    key: String,
}

impl OpenWatch {
    fn progress(&self) {
        self.health.progress(&self.key, Instant::now());
    }

    fn failed(&self) {
        self.health.failed(&self.key);
    }

    /// Abandoned: nothing came within the idle deadline.
    fn idle(&self) {
        self.health.idle_restarts.inc();
        self.failed();
    }
}

impl Drop for OpenWatch {
    fn drop(&mut self) {
        self.health.closed(&self.key);
    }
}

/// A watch that made no progress within its idle deadline.
#[derive(Debug, thiserror::Error)]
#[error("watch {key}: nothing from the apiserver for {idle:?}; the connection is presumed dead")]
pub struct WatchIdle {
    pub key: String,
    pub idle: Duration,
}

/// Caps every watch's lifetime, gives it an idle deadline and records its progress.
#[derive(Clone, Debug)]
pub struct WatchLayer {
    timing: WatchTiming,
    health: WatchHealth,
}

impl WatchLayer {
    pub fn new(timing: WatchTiming, health: WatchHealth) -> Self {
        Self { timing, health }
    }
}

impl<S> Layer<S> for WatchLayer {
    type Service = Watches<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Watches {
            inner,
            timing: self.timing,
            health: self.health.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Watches<S> {
    inner: S,
    timing: WatchTiming,
    health: WatchHealth,
}

impl<S, B, RB> Service<Request<B>> for Watches<S>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    RB: http_body::Body,
{
    type Response = Response<Watched<RB>>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Self::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        if !is_watch(&request) {
            let future = self.inner.call(request);
            return Box::pin(async move {
                let response = future.await.map_err(Into::into)?;
                Ok(response.map(Watched::plain))
            });
        }
        let key = watch_key(request.uri());
        if let Some(uri) = with_query(
            request.uri(),
            &capped_query(
                request.uri().query().unwrap_or_default(),
                self.timing.timeout,
            ),
        ) {
            *request.uri_mut() = uri;
        }
        self.health.attempt(&key, Instant::now());
        let open = OpenWatch {
            health: self.health.clone(),
            key,
        };
        let idle = self.timing.idle;
        let future = self.inner.call(request);
        Box::pin(async move {
            match tokio::time::timeout(idle, future).await {
                Ok(Ok(response)) if response.status().is_success() => {
                    open.progress();
                    Ok(response.map(|body| Watched::with_deadline(body, idle, open)))
                }
                // Refused (403, 410, 5xx…): an answer, but no progress; the caller reads why.
                Ok(Ok(response)) => {
                    open.failed();
                    Ok(response.map(Watched::plain))
                }
                Ok(Err(error)) => {
                    open.failed();
                    Err(error.into())
                }
                Err(_) => {
                    open.idle();
                    Err(Box::new(WatchIdle {
                        key: open.key.clone(),
                        idle,
                    }) as BoxError)
                }
            }
        })
    }
}

/// `uri` with its query replaced; `None` if that does not make a URI (left unchanged then).
fn with_query(uri: &Uri, query: &str) -> Option<Uri> {
    let path_and_query = format!("{}?{query}", uri.path());
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(path_and_query.parse().ok()?);
    Uri::from_parts(parts).ok()
}

/// The deadline of a watch's body and what it reports progress to.
struct Deadline {
    idle: Duration,
    sleep: Pin<Box<tokio::time::Sleep>>,
    open: Option<OpenWatch>,
    /// The deadline passed: the body has failed once and ends now.
    expired: bool,
}

pin_project_lite::pin_project! {
    /// A response body; for a watch, one that fails when no frame comes within its idle deadline and
    /// reports every frame as progress.
    pub struct Watched<B> {
        #[pin]
        body: B,
        deadline: Option<Deadline>,
    }
}

impl<B> Watched<B> {
    fn plain(body: B) -> Self {
        Self {
            body,
            deadline: None,
        }
    }

    fn with_deadline(body: B, idle: Duration, open: OpenWatch) -> Self {
        Self {
            body,
            deadline: Some(Deadline {
                idle,
                sleep: Box::pin(tokio::time::sleep(idle)),
                open: Some(open),
                expired: false,
            }),
        }
    }
}

impl<B> http_body::Body for Watched<B>
where
    B: http_body::Body,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        if this.deadline.as_ref().is_some_and(|d| d.expired) {
            return Poll::Ready(None);
        }
        let frame = this.body.poll_frame(cx);
        let Some(deadline) = this.deadline.as_mut() else {
            return frame.map(|f| f.map(|r| r.map_err(Into::into)));
        };
        match frame {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(open) = &deadline.open {
                    open.progress();
                }
                let next = tokio::time::Instant::now() + deadline.idle;
                deadline.sleep.as_mut().reset(next);
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(None) => {
                // The apiserver ended the watch on time: a sign of life.
                if let Some(open) = deadline.open.take() {
                    open.progress();
                }
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(error))) => {
                if let Some(open) = deadline.open.take() {
                    open.failed();
                }
                Poll::Ready(Some(Err(error.into())))
            }
            Poll::Pending => match deadline.sleep.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    deadline.expired = true;
                    let key = match deadline.open.take() {
                        Some(open) => {
                            open.idle();
                            open.key.clone()
                        }
                        None => String::new(),
                    };
                    Poll::Ready(Some(Err(Box::new(WatchIdle {
                        key,
                        idle: deadline.idle,
                    }))))
                }
                Poll::Pending => Poll::Pending,
            },
        }
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
    use http_body_util::BodyExt;

    #[test]
    fn watch_queries_are_capped_except_streaming_lists() {
        let cap = Duration::from_secs(25);
        // (query as sent by the watcher, as sent to the apiserver)
        let cases = [
            (
                "watch=true&timeoutSeconds=290&allowWatchBookmarks=true&resourceVersion=7",
                "watch=true&timeoutSeconds=25&allowWatchBookmarks=true&resourceVersion=7",
            ),
            (
                "watch=true&timeoutSeconds=10",
                "watch=true&timeoutSeconds=10",
            ),
            ("watch=true", "watch=true&timeoutSeconds=25"),
            (
                "watch=true&timeoutSeconds=0",
                "watch=true&timeoutSeconds=25",
            ),
            (
                "watch=true&timeoutSeconds=x",
                "watch=true&timeoutSeconds=25",
            ),
            (
                "watch=true&sendInitialEvents=true&timeoutSeconds=290",
                "watch=true&sendInitialEvents=true&timeoutSeconds=290",
            ),
            (
                "labelSelector=a%3Db&watch=1",
                "labelSelector=a%3Db&watch=1&timeoutSeconds=25",
            ),
        ];
        for (query, want) in cases {
            assert_eq!(capped_query(query, cap), want, "query {query}");
        }
    }

    #[test]
    fn a_watch_is_known_by_its_path_and_selectors() {
        let cases = [
            ("/api/v1/pods?watch=true&resourceVersion=5", "/api/v1/pods"),
            (
                "/api/v1/namespaces/a/secrets?fieldSelector=metadata.name%3Dx&watch=true&timeoutSeconds=3",
                "/api/v1/namespaces/a/secrets?fieldSelector=metadata.name%3Dx",
            ),
            (
                "/api/v1/pods?labelSelector=app%3Dx&fieldSelector=spec.nodeName%21%3D&watch=true",
                "/api/v1/pods?labelSelector=app%3Dx&fieldSelector=spec.nodeName%21%3D",
            ),
        ];
        for (uri, want) in cases {
            let uri: Uri = uri.parse().expect("uri");
            assert_eq!(watch_key(&uri), want);
        }
    }

    #[test]
    fn verdicts() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let bound = s(60);
        // (last progress, last attempt, open, failing, now, verdict)
        let cases = [
            (0, 0, 1, false, 30, Verdict::Current),
            (0, 0, 1, false, 60, Verdict::Current),
            (0, 0, 1, false, 61, Verdict::Stale(s(61))),
            // A watch hung on one request for long: stale however old its attempt.
            (0, 0, 1, false, 300, Verdict::Stale(s(300))),
            // Failing restarts, none open between them (backing off): stale.
            (0, 50, 0, true, 100, Verdict::Stale(s(100))),
            (0, 80, 0, true, 200, Verdict::Stale(s(200))),
            (90, 95, 0, true, 100, Verdict::Current),
            // It ended well and is not asked for again: not stale, then forgotten.
            (0, 0, 0, false, 100, Verdict::Current),
            (0, 0, 0, false, 121, Verdict::Abandoned),
            // Failing, but not tried for longer than the bound plus FORGET_AFTER: forgotten.
            (0, 10, 0, true, 131, Verdict::Abandoned),
        ];
        for (i, (progress, attempt, open, failing, now, want)) in cases.into_iter().enumerate() {
            let p = Progress {
                last_progress: t0 + s(progress),
                last_attempt: t0 + s(attempt),
                open,
                failing,
            };
            assert_eq!(verdict(&p, t0 + s(now), bound), want, "case {i}");
        }
    }

    #[test]
    fn read_timeout_outlasts_every_healthy_silence() {
        let timing = WatchTiming::new(Duration::from_secs(25));
        assert_eq!(timing.idle, Duration::from_secs(30));
        assert_eq!(
            timing.read_timeout(Duration::from_secs(30)),
            Duration::from_secs(32)
        );
        assert_eq!(
            timing.read_timeout(Duration::from_secs(60)),
            Duration::from_secs(62)
        );
    }

    /// A body whose frames come from a channel: silent until the test sends one.
    fn scripted_body() -> (
        tokio::sync::mpsc::Sender<bytes::Bytes>,
        impl http_body::Body<Data = bytes::Bytes, Error = std::convert::Infallible>,
    ) {
        let (tx, rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(4);
        let stream = futures::stream::unfold(rx, |mut rx| async move {
            let next = rx.recv().await?;
            Some((
                Ok::<_, std::convert::Infallible>(http_body::Frame::data(next)),
                rx,
            ))
        });
        (tx, http_body_util::StreamBody::new(Box::pin(stream)))
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_watch_fails_at_its_idle_deadline_and_is_stale_after_the_bound() {
        let health = WatchHealth::default();
        let timing = WatchTiming::new(Duration::from_secs(25));
        let (tx, body) = scripted_body();
        let mut body = Some(body);
        let mut service = WatchLayer::new(timing, health.clone()).layer(tower::service_fn(
            move |_request: Request<()>| {
                let body = body.take().expect("one request");
                async move { Ok::<_, std::convert::Infallible>(Response::new(body)) }
            },
        ));
        let request = Request::builder()
            .uri("/api/v1/pods?watch=true&timeoutSeconds=290")
            .body(())
            .expect("request");
        let response = service.call(request).await.expect("headers");
        let mut body = response.into_body();

        // Frames keep it alive past the idle deadline.
        for _ in 0..3 {
            tokio::time::advance(Duration::from_secs(20)).await;
            tx.send(bytes::Bytes::from_static(b"{}"))
                .await
                .expect("send");
            let frame = body.frame().await.expect("a frame").expect("data");
            assert!(frame.is_data());
        }
        assert!(
            health
                .stale(Instant::now(), Duration::from_secs(60))
                .is_empty()
        );

        // Then silence: it fails once the idle deadline passes.
        let started = tokio::time::Instant::now();
        let error = body
            .frame()
            .await
            .expect("an outcome")
            .expect_err("idle deadline");
        assert!(error.is::<WatchIdle>(), "{error}");
        assert_eq!(started.elapsed(), timing.idle);
        assert_eq!(health.idle_restarts(), 1, "counted");
        // It fails once, then ends: the watcher starts a new watch.
        assert!(body.frame().await.is_none());
        let stale = health.stale(Instant::now(), Duration::from_secs(1));
        assert_eq!(
            stale.len(),
            0,
            "nothing open, and it ended as a failure only just now"
        );
    }

    #[test]
    fn open_or_failing_watches_without_progress_are_stale_and_ended_ones_are_forgotten() {
        let health = WatchHealth::default();
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let bound = s(60);
        let pods = "/api/v1/pods";
        let clonesets = "/apis/apps.kruise.io/v1beta1/clonesets";
        let sidecarsets = "/apis/apps.kruise.io/v1beta1/sidecarsets";
        health.attempt(pods, t0);
        health.attempt(clonesets, t0);
        health.progress(clonesets, t0 + bound);
        // Refused, then retried with a growing backoff, never answered well.
        health.attempt(sidecarsets, t0);
        health.failed(sidecarsets);
        health.closed(sidecarsets);
        health.attempt(sidecarsets, t0 + s(40));
        health.failed(sidecarsets);
        health.closed(sidecarsets);
        let stale = health.stale(t0 + bound + s(1), bound);
        assert_eq!(
            stale,
            vec![(pods.to_string(), s(61)), (sidecarsets.to_string(), s(61))]
        );
        // They end well: nothing stale, and once not asked for, forgotten.
        for key in [pods, clonesets, sidecarsets] {
            health.progress(key, t0 + bound * 2);
        }
        health.closed(pods);
        health.closed(clonesets);
        assert!(health.stale(t0 + bound * 3, bound).is_empty());
        assert!(health.stale(t0 + bound * 5, bound).is_empty());
        assert!(
            health.watches.lock().expect("not poisoned").is_empty(),
            "abandoned watches are forgotten"
        );
    }
}
