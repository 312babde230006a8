//! Pod control shared by every workload controller (Kubernetes' "pod control" beside each
//! controller's own logic): create, delete, lifecycle moves, in-place updates. Every Pod change is a
//! patch, guarded by the Pod's resourceVersion or uid where a race would be unsafe; every write
//! raises an expectation that the owner's next reconcile waits for, is counted in the metrics, and
//! is told in an Event on the owner with OpenKruise's reasons.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolumeClaim, Pod};
use k8s_openapi::jiff::Timestamp;
use kruise_api::keys;
use kruise_api::pub_types::LifecycleHook;
use kruise_core::expectations::{Expectation, Expectations};
use kruise_core::inplace::{self, InPlacePlan, Step, Target};
use kruise_core::lifecycle;
use kruise_core::pods::LifecycleState;
use kube::api::{DeleteParams, Patch, PostParams, Preconditions};
use kube::runtime::events::{Event, EventType};
use serde_json::json;

use crate::cache::WirePod;
use crate::driver::writes::{LiveReads, Part, Writer, Writes};
use crate::error::{Error, KubeContext, is_race};
use crate::events::EventRecorder;
use crate::metrics::Metrics;

/// What a write did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Something was written.
    pub modified: bool,
    /// Look again after this long (a grace period is running).
    pub after: Option<Duration>,
}

impl Outcome {
    pub const MODIFIED: Outcome = Outcome {
        modified: true,
        after: None,
    };

    pub fn merge(&mut self, other: Outcome) {
        self.modified |= other.modified;
        self.after = match (self.after, other.after) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    /// Runs one round of Pod `writes` ([`crate::parallel::in_parallel`]) and merges what they did:
    /// a write that lost a race to a change of its Pod asks to look again after a second, and
    /// `more` (writes left for the next round, [`crate::parallel::this_round`]) asks at once. The
    /// first other failure is returned, once every write of the round has run. How CloneSet,
    /// Advanced StatefulSet and Advanced DaemonSet carry out a round of their plan: written once.
    pub async fn run_round<F>(&mut self, writes: Vec<F>, more: bool) -> Option<Error>
    where
        F: std::future::Future<Output = Result<Outcome, Error>>,
    {
        let mut first_error = None;
        for result in crate::parallel::in_parallel(writes).await {
            match result {
                Ok(o) => self.merge(o),
                Err(Error::Kube { source, .. }) if is_race(&source) => {
                    self.after = Some(Duration::from_secs(1));
                }
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        if more {
            self.after = Some(Duration::ZERO);
        }
        first_error
    }
}

/// One Pod write of a reconcile, to be run with others in [`crate::parallel::in_parallel`].
pub type Write<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Outcome, Error>> + Send + 'a>>;

/// The writes of one reconcile of one owner (a CloneSet, a StatefulSet, …) to its Pods.
/// How soon an in-place update its PodUnavailableBudget refused is tried again.
const BUDGET_RETRY: Duration = Duration::from_secs(2);

pub struct PodControl<'a> {
    /// Where the writes go: the apiserver, or a unit test's `FakeCluster`.
    pub writes: &'a Arc<dyn Writes>,
    /// The live reads the owner's reconcile makes (re-reading the owner before an adoption, a
    /// revision whose name is taken).
    pub live: &'a Arc<dyn LiveReads>,
    /// The owner's namespace: its Pods live there.
    pub namespace: &'a str,
    /// The owner, for Events.
    pub owner: ObjectReference,
    /// The owner's key in `expectations`.
    pub key: String,
    pub expectations: &'a Mutex<Expectations>,
    pub recorder: &'a EventRecorder,
    pub metrics: &'a Metrics,
    /// The controller's name in metrics.
    pub controller: &'static str,
    pub now: Timestamp,
    /// How create and delete Events are worded.
    pub wording: Wording,
    /// With `PodUnavailableBudgetUpdateGate`, the process's budget decisions an in-place update
    /// takes one unit of before it starts; `None`, updates consult no budget.
    pub budgets: Option<&'a crate::disruptions::Disruptions>,
}

/// The wording of create/delete Events: CloneSet's, or the StatefulSet controller's (which
/// OpenKruise's Advanced StatefulSet inherits from Kubernetes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wording {
    /// `succeed to create pod P`.
    Kruise,
    /// `create Pod P in StatefulSet S successful`.
    StatefulSet,
    /// Kubernetes' pod control, which the DaemonSet controller uses: `Created pod: P`,
    /// `Error creating: E`, `Deleted pod: P`, `Error deleting: E`.
    PodControl,
    /// Kubernetes' job-style pod control, which OpenKruise's BroadcastJob uses: `Created pod: P`,
    /// `Error creating: E`, `Delete pod: P`.
    Job,
}

impl PodControl<'_> {
    fn said(&self, verb: &str, pod: &str, error: Option<&kube::Error>) -> String {
        let owner = self.owner.name.as_deref().unwrap_or_default();
        match (self.wording, error) {
            (Wording::Kruise, None) => format!("succeed to {verb} pod {pod}"),
            (Wording::Kruise, Some(e)) => format!("failed to {verb} pod {pod}: {e}"),
            (Wording::StatefulSet, None) => {
                format!("{verb} Pod {pod} in StatefulSet {owner} successful")
            }
            (Wording::StatefulSet, Some(e)) => {
                format!("{verb} Pod {pod} in StatefulSet {owner} failed error: {e}")
            }
            (Wording::PodControl, None) => format!("{}d pod: {pod}", capitalized(verb)),
            (Wording::PodControl, Some(e)) => format!("Error {}ing: {e}", &verb[..verb.len() - 1]),
            (Wording::Job, None) if verb == "create" => format!("Created pod: {pod}"),
            (Wording::Job, None) => format!("Delete pod: {pod}"),
            (Wording::Job, Some(e)) if verb == "create" => format!("Error creating: {e}"),
            (Wording::Job, Some(e)) => format!("Error deleting: {e}"),
        }
    }
}

fn capitalized(word: &str) -> String {
    let mut chars = word.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// The expectation kind for a Pod the API server names (`generateName`), whose name is unknown
/// until it is created: a Pod of one owner on one node (DaemonSet, BroadcastJob). See [`pod_on_node`].
pub const POD_ON_NODE: &str = "PodOnNode";

/// Expects a Pod of the owner with `owner_uid` bound to `node` (by `spec.nodeName` or by the
/// `matchFields` affinity it was created with) to appear in the Pod cache.
pub fn pod_on_node(owner_uid: &str, node: &str) -> Expectation {
    Expectation::exists(POD_ON_NODE, format!("{owner_uid}/{node}"))
}

/// Checks the expectations of `key` against the caches: `Err(wait)` while a write is still
/// unobserved (look again after `wait`). Expired expectations are counted and logged, not waited on.
pub fn expectations_met(
    expectations: &Mutex<Expectations>,
    key: &str,
    namespace: &str,
    pods: &crate::cache::PodCache,
    revisions: &kube::runtime::reflector::Store<k8s_openapi::api::apps::v1::ControllerRevision>,
    metrics: &Metrics,
    controller: &str,
) -> Result<(), Duration> {
    expectations_met_with(
        expectations,
        key,
        namespace,
        pods,
        revisions,
        metrics,
        controller,
        |_| true,
    )
}

/// [`expectations_met`], with `other` judging the expectations of kinds other than Pods and
/// ControllerRevisions against the caller's own caches (a CloneSet's PVCs).
#[allow(clippy::too_many_arguments)]
pub fn expectations_met_with(
    expectations: &Mutex<Expectations>,
    key: &str,
    namespace: &str,
    pods: &crate::cache::PodCache,
    revisions: &kube::runtime::reflector::Store<k8s_openapi::api::apps::v1::ControllerRevision>,
    metrics: &Metrics,
    controller: &str,
    other: impl Fn(&Expectation) -> bool,
) -> Result<(), Duration> {
    use kruise_core::expectations::CachedState;
    use kube::runtime::reflector::ObjectRef;
    let now = Instant::now();
    let check = {
        let Ok(mut ex) = expectations.lock() else {
            return Ok(());
        };
        ex.check(key, now, |e| match e.kind {
            "Pod" => {
                let meta = pods.metadata(namespace, &e.name);
                e.satisfied_by(meta.as_ref().map(CachedState::of))
            }
            POD_ON_NODE => e
                .name
                .split_once('/')
                .is_some_and(|(owner, node)| pods.owns_pod_on(owner, node)),
            "ControllerRevision" => {
                let rev = revisions.get(&ObjectRef::new(&e.name).within(namespace));
                e.satisfied_by(rev.as_deref().map(|r| CachedState::of(&r.metadata)))
            }
            _ => other(e),
        })
    };
    if !check.expired.is_empty() {
        metrics.expired(controller, check.expired.len());
        tracing::warn!(owner = key, controller, expired = ?check.expired, "expectations expired unobserved; carrying on");
    }
    if check.satisfied() {
        return Ok(());
    }
    let wait = check
        .next_deadline
        .map_or(Duration::from_secs(1), |d| d.saturating_duration_since(now))
        .min(Duration::from_secs(5));
    Err(wait)
}

pub fn name_of(pod: &Pod) -> &str {
    pod.metadata.name.as_deref().unwrap_or_default()
}

impl PodControl<'_> {
    /// The writer of objects of `K` in the owner's namespace.
    pub fn writer<K>(&self) -> Writer<K>
    where
        K: kube::Resource<DynamicType = ()>,
    {
        Writer::namespaced(self.writes.clone(), self.namespace)
    }

    pub fn pods(&self) -> Writer<Pod> {
        self.writer()
    }

    pub fn pvcs(&self) -> Writer<PersistentVolumeClaim> {
        self.writer()
    }

    /// A patch of `part` of the Pod, its answer read without its managed fields ([`WirePod`]).
    async fn patch_pod(
        &self,
        name: &str,
        part: Part,
        patch: &Patch<serde_json::Value>,
    ) -> Result<Pod, kube::Error> {
        self.pods()
            .patch_part_as::<WirePod, _>(name, part, patch)
            .await
            .map(WirePod::into_pod)
    }

    /// Remembers a write until the cache shows it.
    pub fn expect(&self, expectation: Expectation) {
        if let Ok(mut ex) = self.expectations.lock() {
            ex.expect(&self.key, expectation, Instant::now());
        }
    }

    pub fn withdraw(&self, expectation: &Expectation) {
        if let Ok(mut ex) = self.expectations.lock() {
            ex.withdraw(&self.key, expectation);
        }
    }

    /// Expects the cache to show this Pod at least at this resourceVersion.
    pub fn observe(&self, pod: &Pod) {
        if let (Some(name), Some(rv)) = (&pod.metadata.name, &pod.metadata.resource_version) {
            self.expect(Expectation::observed("Pod", name.clone(), rv.clone()));
        }
    }

    /// Publishes an Event on the owner; failures are logged, never fatal.
    pub async fn event(&self, type_: EventType, reason: &str, note: String) {
        self.pod_event(type_, reason, note, None).await;
    }

    /// An Event on the owner about one of its Pods. The Pod is the event's related object, which
    /// also keeps the recorder from folding events about different Pods into one series.
    pub async fn pod_event(&self, type_: EventType, reason: &str, note: String, pod: Option<&str>) {
        let secondary = pod.map(|name| ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(name.to_owned()),
            namespace: Some(self.namespace.to_owned()),
            ..Default::default()
        });
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: reason.into(),
            secondary,
        };
        if let Err(error) = self.recorder.publish(&event, &self.owner).await {
            tracing::warn!(%error, reason, "publishing an event");
        }
    }

    pub fn count(&self, operation: &str, ok: bool) {
        self.metrics.pod_operation(self.controller, operation, ok);
    }

    /// A JSON merge patch of the Pod.
    pub async fn merge_patch(
        &self,
        pod: &Pod,
        patch: serde_json::Value,
    ) -> Result<Pod, kube::Error> {
        let patched = self
            .patch_pod(name_of(pod), Part::Object, &Patch::Merge(patch))
            .await?;
        self.observe(&patched);
        Ok(patched)
    }

    /// A JSON patch of the Pod's status (its ops carry their own resourceVersion test).
    pub async fn status_patch(
        &self,
        pod: &Pod,
        patch: json_patch::Patch,
    ) -> Result<Pod, kube::Error> {
        let patched = self
            .patch_pod(name_of(pod), Part::Status, &Patch::Json(patch))
            .await?;
        self.observe(&patched);
        Ok(patched)
    }

    /// Moves a Pod to a lifecycle state; with `mark_not_ready` also sets `KruisePodReady` False
    /// (or True when leaving the hooked states), so the Pod leaves Service endpoints while a hook
    /// works on it.
    pub async fn set_lifecycle(
        &self,
        pod: &Pod,
        state: LifecycleState,
        mark_not_ready: bool,
    ) -> Result<Outcome, Error> {
        let mut pod = pod.clone();
        let mut outcome = Outcome::default();
        if mark_not_ready {
            let (status, reason) = match state {
                LifecycleState::PreparingDelete | LifecycleState::PreparingUpdate => {
                    ("False", "LifecycleHook")
                }
                _ => ("True", ""),
            };
            let patch = inplace::condition_patch(
                &pod,
                keys::CONDITION_KRUISE_POD_READY,
                status,
                reason,
                self.now,
            )
            .map_err(|e| Error::Invalid(e.to_string()))?;
            if let Some(patch) = patch {
                pod = self
                    .status_patch(&pod, patch)
                    .await
                    .context(|| format!("marking Pod {} not ready", name_of(&pod)))?;
                outcome.modified = true;
            }
        }
        if kruise_core::pods::lifecycle_state(&pod) == state {
            return Ok(outcome);
        }
        let Some(patch) = lifecycle::state_patch(state, self.now) else {
            return Ok(outcome);
        };
        self.merge_patch(&pod, patch)
            .await
            .context(|| format!("moving Pod {} to {state:?}", name_of(&pod)))?;
        outcome.modified = true;
        Ok(outcome)
    }

    /// PreparingUpdate again for a Pod updated before: the inPlaceUpdate `hook`'s labels and
    /// finalizers go back on, guarded by the resourceVersion.
    pub async fn readd_hook(
        &self,
        pod: &Pod,
        hook: Option<&LifecycleHook>,
        mark_not_ready: bool,
    ) -> Result<Outcome, Error> {
        let Some(hook) = hook else {
            return self
                .set_lifecycle(pod, LifecycleState::PreparingUpdate, mark_not_ready)
                .await;
        };
        let mut finalizers = pod.metadata.finalizers.clone().unwrap_or_default();
        for f in &hook.finalizers_handler {
            if !finalizers.contains(f) {
                finalizers.push(f.clone());
            }
        }
        let patch = json!({
            "metadata": {
                "resourceVersion": pod.metadata.resource_version,
                "labels": hook.labels_handler,
                "finalizers": finalizers,
            }
        });
        let patched = self
            .merge_patch(pod, patch)
            .await
            .context(|| format!("re-adding the inPlaceUpdate hook to Pod {}", name_of(pod)))?;
        let mut outcome = self
            .set_lifecycle(&patched, LifecycleState::PreparingUpdate, mark_not_ready)
            .await?;
        outcome.modified = true;
        Ok(outcome)
    }

    /// Creates the claims that do not exist yet (a 409 is a claim that does); on a failure, a
    /// `FailedCreate` Event and false.
    pub async fn create_claims(&self, pvcs: Vec<PersistentVolumeClaim>) -> bool {
        for pvc in pvcs {
            let name = pvc.metadata.name.clone().unwrap_or_default();
            match self.pvcs().create(&PostParams::default(), &pvc).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 409 => {}
                Err(error) => {
                    self.event(
                        EventType::Warning,
                        "FailedCreate",
                        format!("failed to create pvc {name}: {error}"),
                    )
                    .await;
                    return false;
                }
            }
        }
        true
    }

    /// Creates the Pod (its PVCs first). Returns whether it was created.
    pub async fn create_pod(&self, pod: Pod, pvcs: Vec<PersistentVolumeClaim>) -> bool {
        if !self.create_claims(pvcs).await {
            return false;
        }
        let expectation = Expectation::exists("Pod", name_of(&pod).to_owned());
        self.create_generated(pod, expectation).await.is_some()
    }

    /// Creates a Pod, expecting `expectation` until the cache shows it; for a Pod whose name the
    /// server generates (`generateName`), which is unknown until then, the caller says what to
    /// expect instead (e.g. a Pod of the owner on a node). Returns the created Pod's name.
    pub async fn create_generated(&self, pod: Pod, expectation: Expectation) -> Option<String> {
        self.expect(expectation.clone());
        match self.pods().create_as::<WirePod>(&pod).await {
            Ok(created) => {
                let name = name_of(&created.0).to_owned();
                self.count("create", true);
                self.pod_event(
                    EventType::Normal,
                    "SuccessfulCreate",
                    self.said("create", &name, None),
                    Some(&name),
                )
                .await;
                Some(name)
            }
            Err(error) => {
                self.withdraw(&expectation);
                self.count("create", false);
                let named = pod.metadata.name.as_deref().filter(|n| !n.is_empty());
                let shown = named
                    .or(pod.metadata.generate_name.as_deref())
                    .unwrap_or_default();
                // A name taken is the cache behind, not a failure worth a Warning (upstream's
                // stateful Pod control records no Event for AlreadyExists either); the caller
                // still sees no Pod created and waits for the cache.
                if crate::error::is_already_exists(&error) {
                    tracing::debug!(pod = shown, "Pod create raced: the name is taken");
                    return None;
                }
                self.pod_event(
                    EventType::Warning,
                    "FailedCreate",
                    self.said("create", shown, Some(&error)),
                    named,
                )
                .await;
                None
            }
        }
    }

    /// Deletes the Pod (only the exact Pod seen: a uid precondition). A Pod already gone is not an
    /// error.
    pub async fn delete_pod(&self, pod: &Pod) -> Result<(), Error> {
        let name = name_of(pod).to_owned();
        let expectation = Expectation::gone("Pod", name.clone(), pod.metadata.uid.clone());
        self.expect(expectation.clone());
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: pod.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        if let Err(error) = self.pods().delete(&name, &params).await {
            self.withdraw(&expectation);
            if is_race(&error) {
                return Ok(());
            }
            self.count("delete", false);
            self.pod_event(
                EventType::Warning,
                "FailedDelete",
                self.said("delete", &name, Some(&error)),
                Some(&name),
            )
            .await;
            return Err(Error::Kube {
                context: format!("deleting Pod {name}"),
                source: error,
            });
        }
        self.count("delete", true);
        self.pod_event(
            EventType::Normal,
            "SuccessfulDelete",
            self.said("delete", &name, None),
            Some(&name),
        )
        .await;
        Ok(())
    }

    /// Advances the in-place update of one Pod by as many steps as can be taken now: drain
    /// (`InPlaceUpdateReady=False`), wait out `grace` seconds, resize, then patch images and
    /// metadata. Each patch is guarded by the resourceVersion it was decided on; a conflict ends
    /// this attempt without error and the next reconcile decides again on the fresh Pod.
    pub async fn update_in_place(
        &self,
        pod: &Pod,
        plan: &InPlacePlan,
        revision_labels: &BTreeMap<String, String>,
        revision: &str,
        grace: i32,
    ) -> Result<Outcome, Error> {
        let name = name_of(pod).to_owned();
        let target = Target {
            revision,
            revision_labels,
        };
        let mut pod = pod.clone();
        let mut outcome = Outcome::default();
        // At most: drain, resize, apply.
        for _ in 0..4 {
            let step = inplace::next_step(&pod, plan, &target, grace, self.now)
                .map_err(|e| Error::Invalid(format!("Pod {name}: {e}")))?;
            let result = match step {
                Step::Wait(after) => {
                    outcome.after = Some(after);
                    return Ok(outcome);
                }
                Step::MarkUnready(patch) => {
                    // PodUnavailableBudgetUpdateGate: the Pod is still available; its update
                    // starts only if its budget allows one more unavailable Pod (upstream checks
                    // the budget before an in-place update the same way). Refused: retried later.
                    if let Some(budgets) = self.budgets
                        && let Some(refusal) = budgets
                            .take(
                                &pod,
                                kruise_api::policy::v1alpha1::PubOperation::Update,
                                false,
                                true,
                                false,
                            )
                            .await
                            .context(|| {
                                format!("checking the PodUnavailableBudget of Pod {name}")
                            })?
                    {
                        tracing::debug!(pod = %name, %refusal, "in-place update waits for its PodUnavailableBudget");
                        outcome.after = Some(BUDGET_RETRY);
                        return Ok(outcome);
                    }
                    let result = self.status_patch(&pod, patch).await;
                    if result.is_ok() {
                        outcome.modified = true;
                        // The grace period runs from now; with none, go straight on.
                        if grace > 0 {
                            outcome.after = Some(Duration::from_secs(grace.max(0) as u64));
                            return Ok(outcome);
                        }
                    }
                    result
                }
                Step::Resize(patch) => {
                    let result = self
                        .patch_pod(&name, Part::Resize, &Patch::Json(patch))
                        .await;
                    self.count("resize", result.is_ok());
                    if let Ok(p) = &result {
                        self.observe(p);
                        outcome.modified = true;
                    }
                    result
                }
                Step::Apply(patch) => {
                    let result = self
                        .patch_pod(&name, Part::Object, &Patch::Json(patch))
                        .await;
                    self.count("update_in_place", result.is_ok());
                    match &result {
                        Ok(p) => {
                            self.observe(p);
                            self.pod_event(
                                EventType::Normal,
                                "SuccessfulUpdatePodInPlace",
                                format!(
                                    "successfully update pod {name} in-place(revision {revision})"
                                ),
                                Some(&name),
                            )
                            .await;
                            outcome.modified = true;
                            return Ok(outcome);
                        }
                        Err(error) if !is_race(error) => {
                            self.pod_event(
                                EventType::Warning,
                                "FailedUpdatePodInPlace",
                                format!("failed to update pod {name} in-place(revision {revision}): {error}"),
                                Some(&name),
                            )
                            .await;
                        }
                        Err(_) => {}
                    }
                    result
                }
            };
            match result {
                Ok(p) => pod = p,
                Err(error) if is_race(&error) => {
                    tracing::debug!(pod = %name, %error, "pod changed under an in-place update; deciding again");
                    outcome.after = Some(Duration::from_secs(1));
                    return Ok(outcome);
                }
                Err(error) => {
                    return Err(Error::Kube {
                        context: format!("updating Pod {name} in place"),
                        source: error,
                    });
                }
            }
        }
        Ok(outcome)
    }

    /// Starts the next batch of containers of an in-place update held back by container launch
    /// priority, once the batch before it runs its new images and is Ready.
    pub async fn update_next_batch(&self, pod: &Pod) -> Result<Outcome, Error> {
        let Some(patch) = inplace::next_batch_patch(pod, self.now)
            .map_err(|e| Error::Invalid(format!("Pod {}: {e}", name_of(pod))))?
        else {
            return Ok(Outcome::default());
        };
        let result = self
            .patch_pod(name_of(pod), Part::Object, &Patch::Json(patch))
            .await;
        self.count("update_in_place", result.is_ok());
        match result {
            Ok(patched) => {
                self.observe(&patched);
                Ok(Outcome::MODIFIED)
            }
            Err(error) if is_race(&error) => Ok(Outcome::default()),
            Err(error) => Err(Error::Kube {
                context: format!(
                    "updating the next containers of Pod {} in place",
                    name_of(pod)
                ),
                source: error,
            }),
        }
    }

    /// Sets `InPlaceUpdateReady=True` on a Pod whose update has completed, with what `finish`
    /// adds, in one write.
    pub async fn finish_in_place(
        &self,
        pod: &Pod,
        finish: inplace::Finish,
    ) -> Result<Outcome, Error> {
        let Some(patch) = inplace::finish_patch(pod, &finish, self.now)
            .map_err(|e| Error::Invalid(format!("Pod {}: {e}", name_of(pod))))?
        else {
            return Ok(Outcome::default());
        };
        match self.status_patch(pod, patch).await {
            Ok(_) => Ok(Outcome::MODIFIED),
            Err(error) if is_race(&error) => Ok(Outcome::default()),
            Err(error) => Err(Error::Kube {
                context: format!("marking Pod {} InPlaceUpdateReady", name_of(pod)),
                source: error,
            }),
        }
    }

    /// Merges labels into a Pod (a missing template hash, a revision label); a Pod changed or gone
    /// meanwhile is left for the next reconcile.
    pub async fn add_labels(
        &self,
        pod: &Pod,
        labels: &BTreeMap<String, String>,
    ) -> Result<Outcome, Error> {
        let patch = json!({"metadata": {"labels": labels}});
        match self.merge_patch(pod, patch).await {
            Ok(_) => Ok(Outcome::MODIFIED),
            Err(error) if is_race(&error) => Ok(Outcome::default()),
            Err(error) => Err(Error::Kube {
                context: format!("labelling Pod {}", name_of(pod)),
                source: error,
            }),
        }
    }
}

#[cfg(test)]
#[path = "podcontrol_tests.rs"]
mod tests;
