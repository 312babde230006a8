//! Group commit of the decisions that share one object's status (a WorkloadSpread's placements, a
//! PodUnavailableBudget's disruptions).
//!
//! Each decision reads the object's status and writes it back over the resourceVersion it read,
//! so that two replicas of the webhook never hand out the same slot twice. Written one at a time,
//! the decisions of one object go at the apiserver's pace (one round trip each, about 20 a
//! second): a deploy burst of 200 Pods a second queues behind them and times out. Here the
//! decisions that arrive while a write is in flight wait for it, and the next write carries all of
//! them: the batch is decided in order on the newest copy known (the cache's or this process's
//! last write, see [`Ledger`]), written once over its resourceVersion, and each decision answered
//! when that write returns. A conflict (another replica wrote, or the cache was behind) reads the
//! object afresh and decides the whole batch again; an object that is gone answers every decision
//! with [`Decide::gone`]. The write stays guarded by the resourceVersion: batching saves round
//! trips, it never replaces the guard.
//!
//! The batches of one object run in a task of their own, not in the caller's future: a caller
//! that gives up (its admission deadline) leaves the others' batch running, and a decision whose
//! caller is gone before its batch is decided is dropped unrecorded.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::Resource;
use kube::core::Status;
use serde::Serialize;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::{Key, Ledger};

/// Where the object lives: the process's watch cache and the apiserver.
pub trait Source<K>: Send + Sync + 'static {
    /// The cache's copy (`None`: the cache holds no such object, or there is no cache).
    fn cached(&self, key: &Key) -> Option<Arc<K>>;
    /// The apiserver's copy (`None`: not found).
    fn read(&self, key: &Key) -> impl Future<Output = Result<Option<K>, Status>> + Send;
    /// Writes `next`'s status over `base`'s resourceVersion and returns what the apiserver
    /// stored; a 409 when the object changed since `base`, a 404 when it is gone.
    fn write_status(
        &self,
        key: &Key,
        base: &K,
        next: &K,
    ) -> impl Future<Output = Result<K, Status>> + Send;
}

/// What one decision of a batch came to.
#[derive(Clone, Debug, PartialEq)]
pub enum Decided<O> {
    /// Answered as it is: the decision changed nothing in the object.
    Answer(O),
    /// Answered once the batch's write has landed: the decision changed the object.
    Written(O),
    /// Not decidable on a copy that may be behind (for example a refusal, which a budget raised or
    /// deleted a moment ago must not make): the batch is decided again on the apiserver's copy.
    Unsure,
}

/// The decisions of one kind of object.
pub trait Decide: Send + Sync + 'static {
    type Object: Resource<DynamicType = ()> + Clone + Serialize + Send + Sync + 'static;
    type Request: Send + Sync + 'static;
    type Outcome: Send + 'static;
    /// Writes of one batch tried before it is answered with [`CommitError::Conflicts`].
    const ATTEMPTS: usize;

    /// Decides `requests` in order on `object`, changing it as each decision takes its part (the
    /// second decision sees the first one's slot taken). `fresh`: `object` is the apiserver's copy
    /// (never answer [`Decided::Unsure`] then). One answer per request, in order.
    fn decide(
        &self,
        object: &mut Self::Object,
        requests: &[&Self::Request],
        fresh: bool,
    ) -> impl Future<Output = Result<Vec<Decided<Self::Outcome>>, CommitError>> + Send;

    /// The answer when the object does not exist.
    fn gone(&self, request: &Self::Request) -> Self::Outcome;
}

/// Why a decision got no answer of its own.
#[derive(Clone, Debug, thiserror::Error)]
pub enum CommitError {
    /// The apiserver refused a read or a write.
    #[error("{}", .0.message)]
    Api(Box<Status>),
    /// The object kept changing under [`Decide::ATTEMPTS`] writes of the batch.
    #[error("the object kept changing: {0} writes conflicted")]
    Conflicts(usize),
    /// Something the decision needed could not be had.
    #[error("{0}")]
    Failed(String),
    /// The batch's task ended without answering (the runtime is shutting down).
    #[error("the decision was dropped unanswered")]
    Dropped,
    /// The deadline its caller gave passed before the decision was made: nothing was recorded.
    #[error("the decision was not made before its deadline")]
    Late,
}

impl CommitError {
    /// The error as the client's error type, for callers that speak `kube::Error`.
    pub fn into_kube(self) -> kube::Error {
        match self {
            CommitError::Api(status) => kube::Error::Api(status),
            other => kube::Error::Service(other.to_string().into()),
        }
    }
}

/// How long a batch waits after a conflict before it reads again: a little, at random, so that
/// two replicas that conflicted do not meet again on the next write.
const CONFLICT_JITTER_MS: u64 = 30;
/// Decisions written by one batch at most; the rest wait for the next (keeps a patch and the
/// work redone on a conflict bounded).
const BATCH_LIMIT: usize = 256;

struct Pending<R, O> {
    request: R,
    answer: oneshot::Sender<Result<O, CommitError>>,
    /// Past it the decision is answered [`CommitError::Late`] instead of being made.
    deadline: Option<Instant>,
}

/// Takes out of `pending` the decisions nobody waits for any more (dropped), and those past their
/// deadline (answered [`CommitError::Late`]), before a batch is decided on them: a write records
/// only decisions someone will act on.
fn settle<R, O>(
    pending: &mut Vec<Pending<R, O>>,
    late: &prometheus_client::metrics::counter::Counter,
) {
    let now = Instant::now();
    for p in std::mem::take(pending) {
        if p.answer.is_closed() {
            continue;
        }
        if p.deadline.is_some_and(|deadline| deadline <= now) {
            late.inc();
            let _ = p.answer.send(Err(CommitError::Late));
            continue;
        }
        pending.push(p);
    }
}

/// The decisions of one object waiting for a batch; `running` while its task lives.
struct Queue<R, O> {
    waiting: Vec<Pending<R, O>>,
    running: bool,
}

impl<R, O> Default for Queue<R, O> {
    fn default() -> Self {
        Self {
            waiting: Vec::new(),
            running: false,
        }
    }
}

/// Each object's queue.
type Queues<D> = HashMap<Key, Queue<<D as Decide>::Request, <D as Decide>::Outcome>>;

/// The group commit of one kind of object (see the module's doc).
pub struct GroupCommit<D: Decide, S> {
    decide: D,
    source: S,
    ledger: Ledger<D::Object>,
    queues: Mutex<Queues<D>>,
    metrics: CommitMetrics,
}

/// A histogram of how many decisions a batch carried: 1 to 256 by powers of 2.
fn batch_histogram() -> prometheus_client::metrics::histogram::Histogram {
    prometheus_client::metrics::histogram::Histogram::new(
        prometheus_client::metrics::histogram::exponential_buckets(1.0, 2.0, 9),
    )
}

/// What a group commit did, for the process's metrics: how well batching works (decisions per
/// write) and what it cost beyond one write per batch (conflicts, reads of the apiserver's copy,
/// decisions that came too late). Cheap to clone: clones count into the same series.
#[derive(Clone, Debug)]
pub struct CommitMetrics {
    /// Decisions per batch.
    pub batches: prometheus_client::metrics::histogram::Histogram,
    /// Status writes refused with 409 (another writer was first, or the copy was behind).
    pub conflicts: prometheus_client::metrics::counter::Counter,
    /// Reads of the apiserver's copy (nothing known, a refusal to confirm, after a conflict).
    pub reads: prometheus_client::metrics::counter::Counter,
    /// Decisions answered [`CommitError::Late`]: their deadline passed before a batch made them.
    pub late: prometheus_client::metrics::counter::Counter,
}

impl Default for CommitMetrics {
    fn default() -> Self {
        Self {
            batches: batch_histogram(),
            conflicts: Default::default(),
            reads: Default::default(),
            late: Default::default(),
        }
    }
}

impl CommitMetrics {
    /// Registers the series as `{prefix}_batch_size`, `{prefix}_commit_conflicts`,
    /// `{prefix}_commit_reads` and `{prefix}_commit_late` (`what`: the decisions, for the help).
    pub fn register(
        &self,
        registry: &mut prometheus_client::registry::Registry,
        prefix: &str,
        what: &str,
    ) {
        registry.register(
            format!("{prefix}_batch_size"),
            format!("{what} recorded by one status write (the ones that arrived while the previous write was in flight)"),
            self.batches.clone(),
        );
        registry.register(
            format!("{prefix}_commit_conflicts"),
            format!(
                "Status writes of {what} refused with a conflict (decided again on a fresh read)"
            ),
            self.conflicts.clone(),
        );
        registry.register(
            format!("{prefix}_commit_reads"),
            format!("Reads of the object from the apiserver before deciding {what} (no copy known, a refusal to confirm, after a conflict)"),
            self.reads.clone(),
        );
        registry.register(
            format!("{prefix}_commit_late"),
            format!("{what} not decided before their caller's deadline (nothing recorded)"),
            self.late.clone(),
        );
    }
}

impl<D: Decide, S: Source<D::Object>> GroupCommit<D, S> {
    pub fn new(decide: D, source: S) -> Arc<Self> {
        Self::counted(decide, source, CommitMetrics::default())
    }

    /// A group commit that counts what it does in `metrics` (registered with the process's).
    pub fn counted(decide: D, source: S, metrics: CommitMetrics) -> Arc<Self> {
        Arc::new(Self {
            decide,
            source,
            ledger: Ledger::default(),
            queues: Mutex::default(),
            metrics,
        })
    }

    pub fn source(&self) -> &S {
        &self.source
    }

    /// The newest copy this process knows without a read: the cache's, or its own last write
    /// when that is newer (`None`: the cache holds no such object).
    pub fn known(&self, key: &Key) -> Option<Arc<D::Object>> {
        self.ledger.newest(key, self.source.cached(key))
    }

    /// Records a write of the object's status made outside the batches (its controller's), so
    /// that the next batch is decided over it instead of over a cache that has not shown it yet
    /// (which would cost a conflict and a read).
    pub fn observe(&self, key: Key, written: D::Object) {
        self.ledger.remember(key, written);
    }

    /// How many objects have a queue or a remembered write (for tests).
    pub fn tracked(&self) -> usize {
        let queues = self.queues.lock().unwrap_or_else(|e| e.into_inner()).len();
        queues.max(self.ledger.len())
    }

    /// Decides `request` on `key`'s object in the next batch, and answers once its write landed.
    pub async fn submit(
        self: &Arc<Self>,
        key: Key,
        request: D::Request,
    ) -> Result<D::Outcome, CommitError> {
        self.submit_by(key, request, None).await
    }

    /// [`GroupCommit::submit`], answered [`CommitError::Late`] (nothing recorded) if no batch has
    /// decided it by `deadline`: the caller's own deadline, so that a decision it can no longer use
    /// takes nothing. A decision written before the deadline stands even if its answer arrives after.
    pub async fn submit_by(
        self: &Arc<Self>,
        key: Key,
        request: D::Request,
        deadline: Option<Instant>,
    ) -> Result<D::Outcome, CommitError> {
        self.enqueue(key, request, deadline).await
    }

    /// [`GroupCommit::submit_by`], queued at the call rather than when the answer is first awaited:
    /// a decision enqueued before another is decided before it, whoever awaits first. Dropping the
    /// answer before its batch is decided drops the decision.
    pub fn enqueue(
        self: &Arc<Self>,
        key: Key,
        request: D::Request,
        deadline: Option<Instant>,
    ) -> impl Future<Output = Result<D::Outcome, CommitError>> + Send + 'static {
        let (answer, answered) = oneshot::channel();
        let start = {
            let mut queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
            let queue = queues.entry(key.clone()).or_default();
            queue.waiting.push(Pending {
                request,
                answer,
                deadline,
            });
            !std::mem::replace(&mut queue.running, true)
        };
        if start {
            let this = self.clone();
            tokio::spawn(async move { this.run(key).await });
        }
        async move { answered.await.unwrap_or(Err(CommitError::Dropped)) }
    }

    /// Runs the batches of `key` until nobody waits.
    async fn run(self: Arc<Self>, key: Key) {
        // Should a batch panic, the decisions waiting are answered (dropped) and the next one
        // starts a new task, instead of waiting behind a task that is gone.
        struct Unwinding<'a, D: Decide, S> {
            commit: &'a GroupCommit<D, S>,
            key: &'a Key,
        }
        impl<D: Decide, S> Drop for Unwinding<'_, D, S> {
            fn drop(&mut self) {
                if std::thread::panicking() {
                    self.commit
                        .queues
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(self.key);
                }
            }
        }
        let _unwinding = Unwinding {
            commit: &self,
            key: &key,
        };
        loop {
            let batch: Vec<Pending<D::Request, D::Outcome>> = {
                let mut queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
                let Some(queue) = queues.get_mut(&key) else {
                    return;
                };
                // A decision whose caller gave up, or whose deadline passed, takes nothing.
                settle(&mut queue.waiting, &self.metrics.late);
                if queue.waiting.is_empty() {
                    queues.remove(&key);
                    return;
                }
                let n = queue.waiting.len().min(BATCH_LIMIT);
                queue.waiting.drain(..n).collect()
            };
            self.metrics.batches.observe(batch.len() as f64);
            let mut batch = batch;
            let answers = self.commit(&key, &mut batch).await;
            for (pending, answer) in batch.into_iter().zip(answers) {
                let _ = pending.answer.send(answer);
            }
        }
    }

    /// Decides and writes one batch; one answer per decision left in `batch`. A decision whose
    /// caller gave up, or whose deadline passed, while the batch read (after a conflict, say) is
    /// taken out of `batch` before the batch is decided, so that no write records it (a write once
    /// sent stands).
    async fn commit(
        &self,
        key: &Key,
        batch: &mut Vec<Pending<D::Request, D::Outcome>>,
    ) -> Vec<Result<D::Outcome, CommitError>> {
        let mut fresh = false;
        let mut writes = 0;
        loop {
            let base = if fresh { None } else { self.known(key) };
            let read = match base {
                Some(base) => Ok(Some(base)),
                None => {
                    self.metrics.reads.inc();
                    match self.source.read(key).await {
                        Ok(Some(read)) => {
                            fresh = true;
                            Ok(Some(Arc::new(read)))
                        }
                        Ok(None) => Ok(None),
                        Err(status) => Err(status),
                    }
                }
            };
            settle(batch, &self.metrics.late);
            if batch.is_empty() {
                return Vec::new();
            }
            let requests: Vec<&D::Request> = batch.iter().map(|p| &p.request).collect();
            let all = |error: CommitError| requests.iter().map(|_| Err(error.clone())).collect();
            let gone = || requests.iter().map(|r| Ok(self.decide.gone(r))).collect();
            let base = match read {
                Ok(Some(base)) => base,
                Ok(None) => {
                    self.ledger.gone(key);
                    return gone();
                }
                Err(status) => return all(CommitError::Api(Box::new(status))),
            };
            let mut next = (*base).clone();
            let decided = match self.decide.decide(&mut next, &requests, fresh).await {
                Ok(decided) => decided,
                Err(error) => return all(error),
            };
            debug_assert_eq!(decided.len(), requests.len());
            if decided.iter().any(|d| matches!(d, Decided::Unsure)) {
                if fresh {
                    return all(CommitError::Failed(
                        "undecidable on the apiserver's copy".into(),
                    ));
                }
                fresh = true;
                continue;
            }
            let answers = |decided: Vec<Decided<D::Outcome>>| {
                decided
                    .into_iter()
                    .map(|d| match d {
                        Decided::Answer(o) | Decided::Written(o) => Ok(o),
                        Decided::Unsure => Err(CommitError::Dropped),
                    })
                    .collect()
            };
            if !decided.iter().any(|d| matches!(d, Decided::Written(_))) {
                return answers(decided);
            }
            writes += 1;
            match self.source.write_status(key, &base, &next).await {
                Ok(written) => {
                    self.ledger.remember(key.clone(), written);
                    return answers(decided);
                }
                Err(status) if status.code == 409 => {
                    self.metrics.conflicts.inc();
                    self.ledger.forget(key);
                    if writes >= D::ATTEMPTS {
                        return all(CommitError::Conflicts(writes));
                    }
                    fresh = true;
                    let jitter = rand::random::<u64>() % CONFLICT_JITTER_MS;
                    tokio::time::sleep(Duration::from_millis(jitter)).await;
                }
                Err(status) if status.code == 404 => {
                    self.ledger.gone(key);
                    return gone();
                }
                Err(status) => return all(CommitError::Api(Box::new(status))),
            }
        }
    }
}

/// The status of `object` as a merge patch over its resourceVersion: the maps of the status are
/// merged key by key (decisions only add keys), everything else replaced, and the write refused
/// with 409 if the object changed since it was read.
pub fn status_patch<K: Resource + Serialize>(base: &K, next: &K) -> serde_json::Value {
    let status = serde_json::to_value(next)
        .ok()
        .and_then(|mut v| v.get_mut("status").map(serde_json::Value::take))
        .unwrap_or(serde_json::Value::Null);
    serde_json::json!({
        "metadata": {"resourceVersion": base.meta().resource_version},
        "status": status,
    })
}

/// A [`Source`] on the apiserver through `kube`, with the process's watch cache when it has one.
pub struct ApiSource<K: Resource<DynamicType = ()> + Clone + 'static> {
    client: kube::Client,
    cache: Arc<std::sync::OnceLock<kube::runtime::reflector::Store<K>>>,
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> ApiSource<K> {
    /// `cache` is read once it is set and loaded; until then every batch reads the apiserver.
    pub fn new(
        client: kube::Client,
        cache: Arc<std::sync::OnceLock<kube::runtime::reflector::Store<K>>>,
    ) -> Self {
        Self { client, cache }
    }
}

fn status_of(error: kube::Error) -> Status {
    match error {
        kube::Error::Api(status) => *status,
        other => Status::failure(&other.to_string(), "InternalError").with_code(500),
    }
}

impl<K> Source<K> for ApiSource<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    fn cached(&self, key: &Key) -> Option<Arc<K>> {
        let store = self.cache.get()?;
        let loaded = matches!(
            futures::FutureExt::now_or_never(store.wait_until_ready()),
            Some(Ok(()))
        );
        if !loaded {
            return None;
        }
        store.get(&kube::runtime::reflector::ObjectRef::new(&key.1).within(&key.0))
    }

    async fn read(&self, key: &Key) -> Result<Option<K>, Status> {
        let api: kube::Api<K> = kube::Api::namespaced(self.client.clone(), &key.0);
        api.get_opt(&key.1).await.map_err(status_of)
    }

    async fn write_status(&self, key: &Key, base: &K, next: &K) -> Result<K, Status> {
        let api: kube::Api<K> = kube::Api::namespaced(self.client.clone(), &key.0);
        let patch = status_patch(base, next);
        api.patch_status(
            &key.1,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .map_err(status_of)
    }
}

#[cfg(test)]
#[path = "commit_tests.rs"]
mod tests;
