//! Taking one unit of a PodUnavailableBudget for a disruption (upstream
//! `PodUnavailableBudgetValidatePod`): shared by the Pod webhook (deletion, eviction, update) and
//! the in-place update engine (`PodUnavailableBudgetUpdateGate`). The decision is
//! `kruise_core::podunavailablebudget::admit`; an admitted disruption is recorded in the budget's status by a
//! patch carrying the resourceVersion the decision was made on. When another admission landed in
//! between, the patch fails with 409, the budget is read again and the decision made again (4 tries,
//! as upstream), so concurrent disruptions never take more than the budget allows.
//!
//! The hot path costs no read and one write per batch: the disruptions of one budget that arrive
//! while a write is in flight are decided together, in order, on the newest copy this process
//! knows (the watch cache's or its own last write), and recorded by the next write
//! ([`crate::ledger::commit`]). Only after a conflict (another replica, or a cache behind), or
//! before a refusal, is the budget read from the apiserver: a refusal is always made on the
//! apiserver's copy, so that a budget deleted (or raised) a moment ago never refuses. A budget the
//! cache no longer holds is not taken from the ledger either: a deleted budget decides nothing,
//! and a budget that does not exist (NotFound, on the read or on the patch) admits, as upstream.
//!
//! A refusal leaves upstream's `PubPreventPodDeletion` Warning on the Pod, whoever asked (the
//! webhook or an in-place update), with [`Disruptions::with_refusal_events`]. The process holds
//! one [`Disruptions`]: the manager hands it to the webhook and to the workload controllers.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kruise_api::policy::POD_RELATED_PUB_ANNOTATION;
use kruise_api::policy::v1alpha1::{PodUnavailableBudget, PubOperation};
use kruise_core::podunavailablebudget::{self as budget, Admission};
use kube::runtime::reflector::Store;
use kube::{Api, Client};

use crate::ledger::Key;
use crate::ledger::commit::{ApiSource, CommitError, CommitMetrics, Decide, Decided, GroupCommit};

/// One disruption waiting for its budget's batch.
pub struct Disruption {
    pub pod: Pod,
    pub operation: PubOperation,
    pub vertical_scaling: bool,
    pub now: Timestamp,
    /// The process's budget cache was checked against the apiserver after the request arrived
    /// (read-your-writes): a refusal decided on it stands.
    pub cache_current: bool,
}

/// The budget's decisions ([`budget::admit`]) for the group commit: each disruption admitted
/// takes its unit from the status the earlier ones of the batch left; a refusal is decided on
/// the apiserver's copy only. The answer is `None` (admitted) or upstream's refusal message.
pub struct BudgetDecisions;

impl BudgetDecisions {
    /// Decides `disruption` on `budget`'s `status`, taking its unit there when it is admitted.
    fn decide_one(
        budget: &PodUnavailableBudget,
        status: &mut kruise_api::policy::v1alpha1::PodUnavailableBudgetStatus,
        disruption: &Disruption,
        fresh: bool,
    ) -> Decided<Option<String>> {
        let name = budget.metadata.name.as_deref().unwrap_or_default();
        let request = budget::Request {
            pod: &disruption.pod,
            operation: disruption.operation,
            pub_name: name,
            pub_annotations: budget.metadata.annotations.as_ref(),
            vertical_scaling: disruption.vertical_scaling,
            now: disruption.now,
        };
        match budget::admit(&request, status) {
            Admission::Pass(_) => Decided::Answer(None),
            Admission::Refuse(_) if !fresh && !disruption.cache_current => Decided::Unsure,
            Admission::Refuse(message) => Decided::Answer(Some(message)),
            Admission::Take(next) => {
                *status = next;
                Decided::Written(None)
            }
        }
    }
}

impl Decide for BudgetDecisions {
    type Object = PodUnavailableBudget;
    type Request = Disruption;
    type Outcome = Option<String>;
    /// Upstream's tries of one disruption.
    const ATTEMPTS: usize = 4;

    async fn decide(
        &self,
        budget: &mut PodUnavailableBudget,
        disruptions: &[&Disruption],
        fresh: bool,
    ) -> Result<Vec<Decided<Option<String>>>, CommitError> {
        let mut status = budget.status.clone().unwrap_or_default();
        let decided = disruptions
            .iter()
            .map(|d| Self::decide_one(budget, &mut status, d, fresh))
            .collect();
        budget.status = Some(status);
        Ok(decided)
    }

    /// A budget that does not exist admits, as upstream.
    fn gone(&self, _: &Disruption) -> Option<String> {
        None
    }
}

type Commit = GroupCommit<BudgetDecisions, ApiSource<PodUnavailableBudget>>;

/// The reporter of the Events a refusal publishes (upstream's one recorder for the webhook and the
/// workload controllers' budget checks).
pub const EVENT_REPORTER: &str = "pub-controller";
/// The Warning a refused disruption leaves on its Pod (upstream's reason; its note is
/// [`PREVENTED_NOTE`] whatever the operation).
pub const REASON_PREVENTED: &str = "PubPreventPodDeletion";
pub const PREVENTED_NOTE: &str = "openkruise pub prevents pod deletion";
/// Refusal Events published at once; past it one is dropped (the refusal itself is still
/// answered and logged), so a storm of refused evictions (a node drain against a budget) or a
/// slow apiserver never piles up tasks.
const PREVENTED_IN_FLIGHT: usize = 64;
/// How long publishing one refusal Event may take.
const PREVENTED_TIMEOUT: Duration = Duration::from_secs(10);

/// Where refusals are reported ([`Disruptions::with_refusal_events`]).
struct Refusals {
    recorder: crate::events::EventRecorder,
    seats: Arc<tokio::sync::Semaphore>,
}

/// The disruptions of one process against its PodUnavailableBudgets: one group commit per budget
/// (shared by the Pod webhook and the in-place update engine, so that their decisions on one
/// budget are batched and ordered together), over the process's budget cache. Cheap to clone.
#[derive(Clone)]
pub struct Disruptions {
    client: Client,
    cache: Arc<OnceLock<Store<PodUnavailableBudget>>>,
    commit: Arc<Commit>,
    refusals: Option<Arc<Refusals>>,
    /// How long a decision may wait for its batch before it is refused unrecorded (see
    /// [`Disruptions::with_deadline`]); `None`: as long as the batches take.
    deadline: Option<Duration>,
}

impl Disruptions {
    /// Decides on budgets read from the apiserver (and this handle's own last writes), recording no
    /// Event.
    pub fn new(client: Client) -> Self {
        Self::counted(client, CommitMetrics::default())
    }

    /// [`Disruptions::new`], counting what its group commit does in `metrics`.
    pub fn counted(client: Client, metrics: CommitMetrics) -> Self {
        let cache = Arc::new(OnceLock::new());
        let commit = GroupCommit::counted(
            BudgetDecisions,
            ApiSource::new(client.clone(), cache.clone()),
            metrics,
        );
        Self {
            client,
            cache,
            commit,
            refusals: None,
            deadline: None,
        }
    }

    /// Refuses, recording nothing, a disruption not decided within `deadline` of its request (the
    /// Pod webhook's share of the apiserver's deadline): past it the apiserver has given up on the
    /// call, and a disruption recorded for nobody would hold one of the budget's units until it
    /// expires.
    pub fn with_deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Decides on the process's watch cache of budgets (the manager's `ProcessCaches`).
    pub fn with_cache(self, store: Store<PodUnavailableBudget>) -> Self {
        let _ = self.cache.set(store);
        self
    }

    /// Leaves [`REASON_PREVENTED`] on each Pod whose disruption a budget refuses, as upstream does
    /// for the webhook and the in-place update engine alike.
    pub fn with_refusal_events(mut self) -> Self {
        self.refusals = Some(Arc::new(Refusals {
            recorder: crate::driver::recorder(self.client.clone(), EVENT_REPORTER),
            seats: Arc::new(tokio::sync::Semaphore::new(PREVENTED_IN_FLIGHT)),
        }));
        self
    }

    /// The newest copy of a budget this process knows without a read (its cache's, or the last
    /// write of its status from this process when newer; `None`: not cached).
    pub fn known(&self, namespace: &str, name: &str) -> Option<Arc<PodUnavailableBudget>> {
        self.commit.known(&(namespace.to_owned(), name.to_owned()))
    }

    /// Records a write of a budget's status made outside the disruptions (its controller's), so
    /// that the next disruption is decided over it rather than over a cache not showing it yet.
    pub fn observe(&self, written: PodUnavailableBudget) {
        let key = (
            written.metadata.namespace.clone().unwrap_or_default(),
            written.metadata.name.clone().unwrap_or_default(),
        );
        self.commit.observe(key, written);
    }

    /// Publishes [`REASON_PREVENTED`] on `pod` off the caller's path, as upstream does whenever a
    /// budget refuses (dry runs included): the admission answer never waits for it.
    fn record_refusal(&self, pod: &Pod) {
        let Some(refusals) = self.refusals.clone() else {
            return;
        };
        let regarding = kube::Resource::object_ref(pod, &());
        let pod_name = regarding.name.clone().unwrap_or_default();
        let Ok(seat) = refusals.seats.clone().try_acquire_owned() else {
            tracing::debug!(pod = %pod_name, "{PREVENTED_IN_FLIGHT} {REASON_PREVENTED} Events in flight; this one is dropped");
            return;
        };
        tokio::spawn(async move {
            let _seat = seat;
            let record = refusals.recorder.record(
                &regarding,
                kube::runtime::events::EventType::Warning,
                REASON_PREVENTED,
                PREVENTED_NOTE.into(),
            );
            if tokio::time::timeout(PREVENTED_TIMEOUT, record)
                .await
                .is_err()
            {
                tracing::debug!(pod = %pod_name, "publishing {REASON_PREVENTED} timed out");
            }
        });
    }

    /// Decides `operation` of `pod` against the budget it names, recording it unless `dry_run`:
    /// `Ok(None)` admits, `Ok(Some(message))` refuses with upstream's message. `cache_current`: the
    /// budget cache is known to show every write made before the request (read-your-writes), so a
    /// refusal on it needs no read of the budget.
    pub async fn take(
        &self,
        pod: &Pod,
        operation: PubOperation,
        dry_run: bool,
        vertical_scaling: bool,
        cache_current: bool,
    ) -> Result<Option<String>, kube::Error> {
        let Some(name) = related_pub(pod) else {
            return Ok(None);
        };
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let key: Key = (namespace.to_owned(), name.to_owned());
        let commit = &self.commit;
        let disruption = Disruption {
            pod: pod.clone(),
            operation,
            vertical_scaling,
            now: Timestamp::now(),
            cache_current,
        };
        let refusal = if dry_run {
            dry_run_decision(&self.client, commit, &key, &disruption).await?
        } else {
            let deadline = self.deadline.map(|d| tokio::time::Instant::now() + d);
            match commit.submit_by(key, disruption, deadline).await {
                Ok(answer) => answer,
                // Upstream's refusal when the budget cannot be updated in time.
                Err(CommitError::Conflicts(_) | CommitError::Late) => Some(format!(
                    "Timeout: couldn't update PodUnavailableBudget {name} due to conflicts"
                )),
                Err(error) => return Err(error.into_kube()),
            }
        };
        if refusal.is_some() {
            self.record_refusal(pod);
        }
        Ok(refusal)
    }
}

/// The budget named by the Pod's `kruise.io/related-pub` annotation.
pub fn related_pub(pod: &Pod) -> Option<&str> {
    kruise_core::pods::annotation(pod, POD_RELATED_PUB_ANNOTATION).filter(|v| !v.is_empty())
}

/// A dry run's answer: decided as a real disruption would be, recording nothing.
async fn dry_run_decision(
    client: &Client,
    commit: &Commit,
    key: &Key,
    disruption: &Disruption,
) -> Result<Option<String>, kube::Error> {
    if let Some(known) = commit.known(key) {
        let mut status = known.status.clone().unwrap_or_default();
        match BudgetDecisions::decide_one(&known, &mut status, disruption, false) {
            Decided::Answer(answer) | Decided::Written(answer) => return Ok(answer),
            Decided::Unsure => {}
        }
    }
    let budgets: Api<PodUnavailableBudget> = Api::namespaced(client.clone(), &key.0);
    let Some(budget) = budgets.get_opt(&key.1).await? else {
        return Ok(None);
    };
    let mut status = budget.status.clone().unwrap_or_default();
    match BudgetDecisions::decide_one(&budget, &mut status, disruption, true) {
        Decided::Answer(answer) | Decided::Written(answer) => Ok(answer),
        Decided::Unsure => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::fake::{FakeSource, FakeStore};
    use proptest::prelude::*;

    fn ready_pod(name: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns", "annotations": {POD_RELATED_PUB_ANNOTATION: "pub"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .expect("pod")
    }

    fn budget(allowed: i32) -> PodUnavailableBudget {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "policy.kruise.io/v1alpha1", "kind": "PodUnavailableBudget",
            "metadata": {"name": "pub", "namespace": "ns"},
            "spec": {"maxUnavailable": allowed},
            "status": {"unavailableAllowed": allowed, "desiredAvailable": 100, "currentAvailable": 100, "totalReplicas": 100}
        }))
        .expect("budget")
    }

    fn key() -> Key {
        ("ns".into(), "pub".into())
    }

    fn disruption(name: &str) -> Disruption {
        Disruption {
            pod: ready_pod(name),
            operation: PubOperation::Delete,
            vertical_scaling: false,
            now: Timestamp::now(),
            cache_current: false,
        }
    }

    /// Evictions spread over `replicas` manager replicas, while the controller writes the status
    /// `controller_writes` times: never more admitted than the budget allows, and what was
    /// admitted is what the budget records.
    async fn evictions(
        allowed: i32,
        pods: usize,
        replicas: usize,
        latency_ms: u64,
        controller_writes: usize,
    ) -> (usize, PodUnavailableBudget) {
        let store = FakeStore::new(Duration::from_millis(latency_ms));
        store.put(&key(), budget(allowed), "u1");
        let commits: Vec<_> = (0..replicas)
            .map(|_| GroupCommit::new(BudgetDecisions, FakeSource::new(store.clone())))
            .collect();
        let asks = (0..pods).map(|i| {
            let commit = commits[i % replicas].clone();
            async move { commit.submit(key(), disruption(&format!("p{i}"))).await }
        });
        // The controller's writes bump the resourceVersion (a status recomputed with the same
        // counts), so the webhook's writes conflict and decide again.
        let controller = async {
            for _ in 0..controller_writes {
                tokio::time::sleep(Duration::from_millis(latency_ms + 1)).await;
                store.update(&key(), |b| {
                    b.status.get_or_insert_default().observed_generation += 1
                });
            }
        };
        let (answers, ()) = tokio::join!(futures::future::join_all(asks), controller);
        let admitted = answers.iter().filter(|a| matches!(a, Ok(None))).count();
        (admitted, store.get(&key()).expect("stored"))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(40))]
        #[test]
        fn concurrent_disruptions_never_exceed_the_budget(
            allowed in 0i32..12,
            pods in 1usize..40,
            replicas in 1usize..=2,
            latency_ms in 0u64..4,
            controller_writes in 0usize..4,
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("runtime");
            let (admitted, stored) = runtime.block_on(evictions(allowed, pods, replicas, latency_ms, controller_writes));
            let status = stored.status.unwrap_or_default();
            let recorded = status.disrupted_pods.as_ref().map_or(0, |m| m.len());
            prop_assert!(admitted <= allowed as usize, "{admitted} admitted of {allowed}");
            prop_assert_eq!(admitted, recorded);
            prop_assert_eq!(status.unavailable_allowed, allowed - admitted as i32);
        }
    }

    #[tokio::test]
    async fn a_burst_on_one_replica_takes_exactly_the_budget_in_few_writes() {
        let store = FakeStore::new(Duration::from_millis(10));
        store.put(&key(), budget(10), "u1");
        let commit = GroupCommit::new(BudgetDecisions, FakeSource::new(store.clone()));
        let asks = (0..100).map(|i| {
            let commit = commit.clone();
            async move { commit.submit(key(), disruption(&format!("p{i}"))).await }
        });
        let answers = futures::future::join_all(asks).await;
        let admitted = answers.iter().filter(|a| matches!(a, Ok(None))).count();
        let refused = answers
            .iter()
            .filter(
                |a| matches!(a, Ok(Some(m)) if m.contains("pub unavailable allowed is negative")),
            )
            .count();
        assert_eq!((admitted, refused), (10, 90));
        let (written, _) = *store.writes.lock().expect("writes");
        assert!(written <= 3, "{written} writes");
    }

    /// A refusal on the cache's copy is decided again on the apiserver's, unless read-your-writes
    /// vouched for the cache (it showed every write made before the request).
    #[tokio::test]
    async fn a_refusal_stands_on_the_cache_only_when_it_is_known_current() {
        for (cache_current, admitted) in [(false, true), (true, false)] {
            let store = FakeStore::new(Duration::from_millis(1));
            store.put(&key(), budget(0), "u1");
            let source = FakeSource::new(store.clone());
            // Raised after the cache saw it (a write made after the request arrived).
            store.update(&key(), |b| {
                b.status.get_or_insert_default().unavailable_allowed = 1
            });
            let commit = GroupCommit::new(BudgetDecisions, source);
            let mut asked = disruption("p");
            asked.cache_current = cache_current;
            let answer = commit.submit(key(), asked).await.expect("answered");
            assert_eq!(answer.is_none(), admitted, "cache_current {cache_current}");
        }
    }

    #[tokio::test]
    async fn a_deleted_budget_admits_even_while_the_cache_holds_it() {
        let store = FakeStore::new(Duration::from_millis(1));
        store.put(&key(), budget(0), "u1");
        let source = FakeSource::new(store.clone());
        store.delete(&key());
        let commit = GroupCommit::new(BudgetDecisions, source);
        let answer = commit
            .submit(key(), disruption("p"))
            .await
            .expect("answered");
        assert_eq!(answer, None);
    }
}
