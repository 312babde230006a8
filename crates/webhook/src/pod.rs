//! The Pod mutating webhook (`mpod.kb.io`, `/mutate-pod`): SidecarSet injection into Pods being
//! created.
//!
//! SidecarSets and Namespaces are read from reflector stores (the manager's one watch of each, which
//! the SidecarSet controller reads too), so answering a Pod costs no apiserver round trip in the
//! common case. The apiserver is called only for a Namespace the store has not seen yet and for the
//! ControllerRevision of a SidecarSet that pins one (`injectionStrategy.revision`). The decision
//! itself is `kruise_core::sidecarset::{matches, inject}`.
//!
//! The webhook must never stop the cluster: when it cannot decide (SidecarSets not loaded yet, the
//! apiserver unreachable) it answers as its registration's failure policy would if it were down —
//! `Ignore` admits the Pod unchanged with a warning, `Fail` rejects it. Pods in `kube-system` and in the
//! manager's namespace are never injected (nor, by the registration's namespaceSelector, even sent).

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::FutureExt;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::jiff::Timestamp;
use kruise_api::podprobemarker::PodProbeMarker;
use kruise_api::policy::v1alpha1::PodUnavailableBudget;
use kruise_api::sidecarset::v1beta1::SidecarSet;
use kruise_api::sidecarset::{LABEL_CUSTOM_VERSION, LABEL_SIDECARSET_NAME};
use kruise_core::sidecarset::{
    ALWAYS_EXCLUDED_NAMESPACE, InjectContext, RevisionTemplate, inject, matches,
};
use kube::Client;
use kube::api::{Api, ListParams};
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::{DynamicObject, PartialObjectMeta};
use kube::runtime::reflector::{self, ObjectRef, Store};

use crate::admission::{Answer, allow, deny, request_of};
use crate::configuration::FailurePolicy;
use crate::freshness::{Freshness, Late, PolicyKind};
use crate::relatedpub::RelatedPub;

/// How the Pod webhook behaves.
#[derive(Clone, Debug)]
pub struct PodSettings {
    /// The manager's namespace: SidecarSet ControllerRevisions live there, and its Pods are never
    /// injected.
    pub namespace: String,
    /// The registration's failure policy, also applied when the webhook cannot decide.
    pub failure_policy: FailurePolicy,
    /// Feature gate `EnableSortSidecarContainerByName`.
    pub sort_sidecars_by_name: bool,
    /// Feature gate `KruisePodReadinessGate`: every Pod created gets the `KruisePodReady` readiness
    /// gate (the pod-readiness controller sets the condition).
    pub kruise_pod_readiness_gate: bool,
    /// Feature gate `EnhancedLivenessProbe`: a Pod of an OpenKruise workload annotated
    /// `apps.kruise.io/using-enhanced-liveness: "true"` has its liveness probes moved into
    /// `apps.kruise.io/container-probe-context`.
    pub enhanced_liveness_probe: bool,
}

impl PodSettings {
    /// Every feature gate off and the failure policy `Ignore`, with the manager in `namespace`:
    /// how the Pod webhook runs when nothing configures it (no caches yet), and what tests start
    /// from.
    pub fn gates_off(namespace: &str) -> Self {
        Self {
            namespace: namespace.to_owned(),
            failure_policy: FailurePolicy::Ignore,
            sort_sidecars_by_name: false,
            kruise_pod_readiness_gate: false,
            enhanced_liveness_probe: false,
        }
    }
}

/// What WorkloadSpread placement did to a Pod being created.
#[derive(Debug, Default)]
struct Placement {
    /// The Pod was changed: placed in a subset, or held behind the placement gate.
    moved: bool,
    /// A warning for the response.
    warning: Option<String>,
    /// The WorkloadSpread the Pod goes without a subset of, when it is admitted.
    unplaced_in: Option<Arc<kruise_api::workloadspread::WorkloadSpread>>,
}

/// The result label of a Pod admission in `kruise_webhook_requests_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Sidecars (or patchPodMetadata annotations) were added.
    Injected,
    /// Nothing applies: admitted without a patch.
    Unchanged,
    /// The webhook could not decide and the failure policy is Ignore: admitted without injection.
    Skipped,
    Denied,
}

impl Outcome {
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Injected => "injected",
            Outcome::Unchanged => "allowed",
            Outcome::Skipped => "skipped",
            Outcome::Denied => "denied",
        }
    }
}

/// The Pod webhook's state: caches of SidecarSets and Namespaces, and a client for the rest.
#[derive(Clone)]
pub struct PodInjector {
    sidecarsets: Store<SidecarSet>,
    namespaces: Store<PartialObjectMeta<Namespace>>,
    client: Option<Client>,
    settings: Arc<PodSettings>,
    /// PodUnavailableBudgets, to name a new Pod's in `kruise.io/related-pub` (with the budget
    /// gates on).
    related_pub: Option<RelatedPub>,
    /// PersistentPodState: recorded topology injected into the Pods of the workloads it keeps.
    persistent: Option<crate::persistentpodstate::PodHook>,
    /// WorkloadSpread placement (gate `WorkloadSpread`), before SidecarSet injection as upstream.
    workloadspreads: Option<crate::workloadspread::WorkloadSpreads>,
    /// PodProbeMarkers whose probes a Pod on a virtual kubelet runs itself (gate
    /// `EnablePodProbeMarkerOnServerless`).
    probe_markers: Option<Store<PodProbeMarker>>,
    /// Read-your-writes: the policy caches are caught up with the apiserver before a Pod is
    /// decided ([`crate::freshness`]); `None` decides on the caches as they are.
    freshness: Option<Freshness>,
    /// The controllers of new Pods' ReplicaSets, read once for the Pods of a ReplicaSet arriving
    /// together, shared by the steps that need a Deployment's Pods' Deployment.
    owners: Arc<crate::replicaset_owners::ReplicaSetOwners>,
}

/// Why the webhook could not decide, or why the Pod is rejected.
enum Problem {
    /// The cluster state needed is not readable now: answered by the failure policy.
    Unavailable(String),
    /// The Pod or a SidecarSet is at fault: rejected with this message.
    Invalid(String),
}

impl PodInjector {
    /// An injector over given stores (tests fill them through their writers). Without a client, a
    /// Namespace missing from its store has only its name label, and pinned revisions cannot be read.
    pub fn from_stores(
        sidecarsets: Store<SidecarSet>,
        namespaces: Store<PartialObjectMeta<Namespace>>,
        client: Option<Client>,
        settings: PodSettings,
    ) -> Self {
        Self {
            sidecarsets,
            namespaces,
            owners: Arc::new(crate::replicaset_owners::ReplicaSetOwners::new(
                client.clone(),
            )),
            client,
            settings: Arc::new(settings),
            related_pub: None,
            persistent: None,
            workloadspreads: None,
            probe_markers: None,
            freshness: None,
        }
    }

    /// Decides each Pod only once the policy caches it reads show every write that returned
    /// before the Pod's admission arrived (waiting at most `freshness.wait()`).
    pub fn with_freshness(mut self, freshness: Freshness) -> Self {
        self.freshness = Some(freshness);
        self
    }

    /// Also writes the probes of the PodProbeMarkers that match a new Pod into it
    /// (`kruise.io/podprobe`, `kruise.io/podprobemarker-list`), for a virtual kubelet to run.
    pub fn with_probe_markers(mut self, markers: Store<PodProbeMarker>) -> Self {
        self.probe_markers = Some(markers);
        self
    }

    /// Also names the PodUnavailableBudget that guards each new Pod (`kruise.io/related-pub`).
    pub fn with_budgets(mut self, budgets: Store<PodUnavailableBudget>) -> Self {
        self.related_pub =
            Some(RelatedPub::new(budgets, self.client.clone()).with_owners(self.owners.clone()));
        self
    }

    /// This injector, also injecting the topology PersistentPodStates recorded ([`crate::persistentpodstate`]).
    pub fn with_persistent_pod_states(mut self, hook: crate::persistentpodstate::PodHook) -> Self {
        self.persistent = Some(hook);
        self
    }

    /// The PersistentPodState step, when the injector has one.
    pub fn persistent_pod_states(&self) -> Option<&crate::persistentpodstate::PodHook> {
        self.persistent.as_ref()
    }

    /// The injector that also places Pods of WorkloadSpread targets into their subsets.
    pub fn with_workloadspreads(mut self, hooks: crate::workloadspread::WorkloadSpreads) -> Self {
        self.workloadspreads = Some(hooks.with_owners(self.owners.clone()));
        self
    }

    /// The WorkloadSpread hooks, when the gate is on.
    pub fn workloadspreads(&self) -> Option<&crate::workloadspread::WorkloadSpreads> {
        self.workloadspreads.as_ref()
    }

    /// The manager's namespace (where `kruise-configuration` lives).
    pub fn namespace(&self) -> &str {
        &self.settings.namespace
    }

    /// An injector with no caches, which never decides (every Pod is answered by the failure policy).
    pub fn without_caches(settings: PodSettings) -> Self {
        let (sidecarsets, _) = reflector::store();
        let (namespaces, _) = reflector::store();
        Self::from_stores(sidecarsets, namespaces, None, settings)
    }

    /// Whether the SidecarSet cache has been filled once. Checked, never awaited: kube-runtime 5
    /// wakes only the last of several tasks awaiting `wait_until_ready` (admission requests are
    /// tasks of their own), and a waker registered there could be lost to this check.
    pub fn synced(&self) -> bool {
        matches!(
            self.sidecarsets.wait_until_ready().now_or_never(),
            Some(Ok(()))
        )
    }

    /// Whether both caches, SidecarSets and Namespaces, have been filled once: until then the
    /// webhook cannot decide every Pod alone, and the replica must not be ready (a Pod sent to it
    /// would be answered by the failure policy, admitted without its sidecars under `Ignore`).
    pub fn caches_loaded(&self) -> bool {
        self.synced()
            && self.persistent.as_ref().is_none_or(|p| p.loaded())
            && self
                .probe_markers
                .as_ref()
                .is_none_or(|m| matches!(m.wait_until_ready().now_or_never(), Some(Ok(()))))
            && matches!(
                self.namespaces.wait_until_ready().now_or_never(),
                Some(Ok(()))
            )
    }

    /// Every SidecarSet of the watch cache, once it has been filled; `None` before.
    pub fn cached_sidecarsets(&self) -> Option<Vec<SidecarSet>> {
        self.synced().then(|| {
            self.sidecarsets
                .state()
                .iter()
                .map(|s| SidecarSet::clone(s))
                .collect()
        })
    }

    /// Answers one AdmissionReview for a Pod.
    pub async fn review(&self, review: AdmissionReview<DynamicObject>) -> (Answer, Outcome) {
        let arrived = tokio::time::Instant::now();
        let request = match request_of(review) {
            Ok(request) => request,
            Err(answer) => return (*answer, Outcome::Denied),
        };
        let unchanged = (allow(&request), Outcome::Unchanged);
        let is_pod_create = request.operation == Operation::Create
            && request.resource.resource == "pods"
            && request
                .sub_resource
                .as_deref()
                .unwrap_or_default()
                .is_empty();
        let Some(object) = request.object.as_ref().filter(|_| is_pod_create) else {
            return unchanged;
        };
        let mut pod: Pod = match serde_json::to_value(object)
            .map_err(|e| e.to_string())
            .and_then(|v| kruise_api::kinds::decode(v).map_err(|e| e.to_string()))
        {
            Ok(pod) => pod,
            Err(error) => {
                return (
                    deny(&request, format!("cannot read the Pod: {error}")),
                    Outcome::Denied,
                );
            }
        };
        // A Pod posted without a namespace is created in the request's.
        if pod
            .metadata
            .namespace
            .as_deref()
            .unwrap_or_default()
            .is_empty()
        {
            pod.metadata.namespace = request.namespace.clone().filter(|ns| !ns.is_empty());
        }
        let namespace = kruise_core::sidecarset::pod_namespace(&pod).to_string();
        if namespace == ALWAYS_EXCLUDED_NAMESPACE || namespace == self.settings.namespace {
            return unchanged;
        }
        let late = if self.synced() {
            self.catch_up(&pod, &namespace, request.dry_run, arrived)
                .await
        } else {
            Late::default()
        };
        if !late.is_empty() {
            tracing::warn!(namespace, name = %pod_name(&pod, &request), %late, "Pod webhook decides on policy caches not known to show every earlier write");
        }
        let received = pod.clone();
        let mut changed =
            self.settings.kruise_pod_readiness_gate && add_kruise_pod_ready_gate(&mut pod);
        if let Some(related_pub) = &self.related_pub {
            changed |= related_pub.annotate(&mut pod, &namespace).await;
        }
        if !self.synced() {
            return self.cannot_decide(&request, "the SidecarSets are not loaded yet");
        }
        let placement = match self
            .place_in_workloadspread(&mut pod, &namespace, &request, arrived)
            .await
        {
            Ok(placement) => placement,
            Err(refused) => return refused,
        };
        changed |= placement.moved;
        let answered = self
            .complete(
                &request,
                &received,
                pod,
                &namespace,
                changed,
                placement.warning,
            )
            .await;
        let answered = if late.is_empty() {
            answered
        } else {
            with_warning(
                answered,
                format!(
                    "kruise: decided on policy caches not known to show every earlier write ({late}); a policy created just before this Pod may not apply to it"
                ),
            )
        };
        // Said on the WorkloadSpread only of a Pod admitted: one refused is created again.
        if let (Some(spread), Some(hooks)) = (&placement.unplaced_in, &self.workloadspreads)
            && answered.1 != Outcome::Denied
        {
            hooks.admitted_unplaced(spread);
        }
        answered
    }

    /// The rest of a Pod create's review once placed: sidecars, launch priority, persistent
    /// state and probes, then the answer with placement's warning.
    async fn complete(
        &self,
        request: &AdmissionRequest<DynamicObject>,
        received: &Pod,
        pod: Pod,
        namespace: &str,
        changed: bool,
        warning: Option<String>,
    ) -> (Answer, Outcome) {
        let unchanged = (allow(request), Outcome::Unchanged);
        let (mut pod, mut changed) = match self.decide(&pod, namespace).await {
            Ok(None) => (pod, changed),
            Ok(Some(injected)) => (injected, true),
            Err(Problem::Invalid(message)) => return (deny(request, message), Outcome::Denied),
            Err(Problem::Unavailable(message)) => return self.cannot_decide(request, &message),
        };
        // After injection, as upstream: injected sidecars take part in the launch order.
        match hold_for_launch_priority(&mut pod) {
            Ok(held) => changed |= held,
            Err(invalid) => return (deny(request, invalid.to_string()), Outcome::Denied),
        }
        let persisted = match crate::persistentpodstate::apply(
            self.persistent.as_ref(),
            &mut pod,
            self.settings.failure_policy,
        )
        .await
        {
            Ok(persisted) => persisted,
            Err(message) => return (deny(request, message), Outcome::Denied),
        };
        if self.settings.enhanced_liveness_probe {
            changed |= kruise_core::podprobemarker::move_liveness_probes(&mut pod);
        }
        if let Some(markers) = &self.probe_markers {
            changed |= annotate_serverless_probes(&mut pod, namespace, markers);
        }
        let answer = if changed || persisted {
            patch_answer(request, received, &pod)
        } else {
            unchanged
        };
        match warning {
            Some(text) => with_warning(answer, text),
            None => answer,
        }
    }

    /// Read-your-writes for the SidecarSet conflict check: waits (bounded) until the SidecarSet
    /// cache shows every SidecarSet written or deleted before `arrived`; whether it did not.
    pub async fn catch_up_sidecarsets(&self, arrived: tokio::time::Instant) -> Late {
        match &self.freshness {
            Some(freshness) if self.synced() => {
                freshness
                    .catch_up(&[(PolicyKind::SidecarSet, None)], arrived)
                    .await
            }
            _ => Late::default(),
        }
    }

    /// Read-your-writes: waits (bounded) until the caches of the policy kinds this Pod's
    /// admission reads show every write that returned before it arrived; the kinds that did not.
    /// WorkloadSpreads and PersistentPodStates apply only to Pods that have a controller.
    /// PodUnavailableBudgets are not waited for: `kruise.io/related-pub` is only a hint (the
    /// controller marks the Pod too), and a disruption finds the Pod's budget itself, with
    /// read-your-writes of its own ([`crate::policy::Policy::with_freshness`]).
    async fn catch_up(
        &self,
        pod: &Pod,
        namespace: &str,
        dry_run: bool,
        arrived: tokio::time::Instant,
    ) -> Late {
        let Some(freshness) = &self.freshness else {
            return Late::default();
        };
        let mut kinds = vec![(PolicyKind::SidecarSet, None)];
        let scoped = Some(namespace);
        let controlled = kruise_core::ownership::controller_of(&pod.metadata).is_some();
        if self.workloadspreads.is_some() && !dry_run && controlled {
            kinds.push((PolicyKind::WorkloadSpread, scoped));
        }
        if self.persistent.is_some() && controlled {
            kinds.push((PolicyKind::PersistentPodState, scoped));
        }
        if self.probe_markers.is_some() {
            kinds.push((PolicyKind::PodProbeMarker, scoped));
        }
        freshness.catch_up(&kinds, arrived).await
    }

    /// WorkloadSpread placement of a Pod being created (not for dry runs): the answer when the Pod
    /// must be refused (placement undecidable under failure policy `Fail`), else what placement
    /// did (placed or gated; under `Ignore`, an undecidable placement admits the Pod where the
    /// scheduler puts it, and the controller records it in the subset its node belongs to).
    async fn place_in_workloadspread(
        &self,
        pod: &mut Pod,
        namespace: &str,
        request: &AdmissionRequest<DynamicObject>,
        arrived: tokio::time::Instant,
    ) -> Result<Placement, (Answer, Outcome)> {
        let Some(hooks) = self.workloadspreads.as_ref().filter(|_| !request.dry_run) else {
            return Ok(Placement::default());
        };
        match hooks.place(pod, namespace, arrived).await {
            Ok(Some(placed)) => {
                *pod = placed;
                Ok(Placement {
                    moved: true,
                    ..Placement::default()
                })
            }
            Ok(None) => Ok(Placement::default()),
            // Admitted behind the placement gate under either failure policy: the Pod is
            // decided, its placement only comes later.
            Err(crate::workloadspread::Unplaced::Gated { pod: gated, reason }) => {
                tracing::warn!(namespace, name = %request.name, %reason, "WorkloadSpread placement left to the controller: the Pod waits behind its scheduling gate");
                *pod = *gated;
                Ok(Placement {
                    moved: true,
                    warning: Some(format!(
                        "kruise: WorkloadSpread placement deferred ({reason}); the Pod waits behind scheduling gate {} until the controller places it",
                        kruise_api::workloadspread::SCHEDULING_GATE
                    )),
                    unplaced_in: None,
                })
            }
            Err(crate::workloadspread::Unplaced::Unavailable { reason, spread }) => {
                tracing::warn!(namespace, name = %request.name, %reason, policy = %self.settings.failure_policy, "Pod webhook cannot decide on WorkloadSpread placement");
                match self.settings.failure_policy {
                    FailurePolicy::Ignore => Ok(Placement {
                        moved: false,
                        warning: Some(format!(
                            "kruise: WorkloadSpread placement skipped ({reason}); the Pod is admitted without a subset"
                        )),
                        unplaced_in: spread,
                    }),
                    FailurePolicy::Fail => Err((
                        deny(
                            request,
                            format!("WorkloadSpread placement cannot be decided now: {reason}"),
                        ),
                        Outcome::Denied,
                    )),
                }
            }
        }
    }

    /// The injected Pod, or `None` when nothing applies or changes.
    async fn decide(&self, pod: &Pod, namespace: &str) -> Result<Option<Pod>, Problem> {
        let mut candidates: Vec<Arc<SidecarSet>> = self
            .sidecarsets
            .state()
            .into_iter()
            .filter(|s| !s.spec.injection_strategy.paused)
            .collect();
        if candidates.is_empty() {
            return Ok(None);
        }
        // The Namespace's labels are needed only when a SidecarSet has a namespaceSelector.
        let labels = if candidates
            .iter()
            .any(|s| s.spec.namespace_selector.is_some())
        {
            self.namespace_labels(namespace).await?
        } else {
            BTreeMap::new()
        };
        let excluded = [self.settings.namespace.clone()];
        candidates.retain(|s| matches(s, pod, &labels, &excluded));
        if candidates.is_empty() {
            return Ok(None);
        }
        // A stable order, whatever the cache's: by name.
        candidates.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let mut revisions = BTreeMap::new();
        for sidecarset in &candidates {
            if let Some(template) = self.pinned_revision(sidecarset).await? {
                let name = sidecarset.metadata.name.clone().unwrap_or_default();
                revisions.insert(name, template);
            }
        }
        let refs: Vec<&SidecarSet> = candidates.iter().map(|s| s.as_ref()).collect();
        let random = || rand::random::<f64>();
        let ctx = InjectContext {
            now: Timestamp::now(),
            revisions: &revisions,
            random: &random,
            sort_sidecars_by_name: self.settings.sort_sidecars_by_name,
        };
        let injection = inject(pod, &refs, &ctx).map_err(|e| Problem::Invalid(e.to_string()))?;
        Ok(injection.changed.then_some(injection.pod))
    }

    /// The labels of Namespace `name`: from the cache, else from the apiserver.
    async fn namespace_labels(&self, name: &str) -> Result<BTreeMap<String, String>, Problem> {
        if let Some(cached) = self.namespaces.get(&ObjectRef::new(name)) {
            return Ok(cached.metadata.labels.clone().unwrap_or_default());
        }
        let Some(client) = &self.client else {
            // `matches` adds the name label itself.
            return Ok(BTreeMap::new());
        };
        let api: Api<Namespace> = Api::all(client.clone());
        match api.get_metadata_opt(name).await {
            Ok(Some(found)) => Ok(found.metadata.labels.unwrap_or_default()),
            Ok(None) => Ok(BTreeMap::new()),
            Err(error) => Err(Problem::Unavailable(format!(
                "cannot read Namespace {name}: {error}"
            ))),
        }
    }

    /// The revision `sidecarset` pins through `injectionStrategy.revision`, read from the manager's
    /// namespace. A revision that does not exist rejects the Pod, as upstream does: injecting another
    /// version than the one asked for would be worse than a visible error.
    async fn pinned_revision(
        &self,
        sidecarset: &SidecarSet,
    ) -> Result<Option<RevisionTemplate>, Problem> {
        let Some(info) = &sidecarset.spec.injection_strategy.revision else {
            return Ok(None);
        };
        let name = sidecarset.metadata.name.clone().unwrap_or_default();
        let (field, wanted) = match (&info.revision_name, &info.custom_version) {
            (Some(revision), _) => ("revisionName", revision.clone()),
            (None, Some(version)) => ("customVersion", version.clone()),
            (None, None) => return Ok(None),
        };
        let field = format!("sidecarset {name}: spec.injectionStrategy.revision.{field}");
        let Some(client) = &self.client else {
            return Err(Problem::Unavailable(format!(
                "{field}: no apiserver client to read ControllerRevision {wanted:?}"
            )));
        };
        let namespace = &self.settings.namespace;
        let api: Api<ControllerRevision> = Api::namespaced(client.clone(), namespace);
        let classify = |error: kube::Error| match &error {
            kube::Error::Api(status) if (400..500).contains(&status.code) && status.code != 429 => {
                Problem::Invalid(format!("{field}: reading ControllerRevisions: {error}"))
            }
            _ => Problem::Unavailable(format!("{field}: reading ControllerRevisions: {error}")),
        };
        let revision = match (&info.revision_name, &info.custom_version) {
            (Some(revision), _) => api.get_opt(revision).await.map_err(classify)?,
            _ => {
                let selector =
                    format!("{LABEL_SIDECARSET_NAME}={name},{LABEL_CUSTOM_VERSION}={wanted}");
                let list = api
                    .list(&ListParams::default().labels(&selector))
                    .await
                    .map_err(classify)?;
                newest(list.items)
            }
        };
        let Some(revision) = revision else {
            return Err(Problem::Invalid(format!(
                "{field}: ControllerRevision for {wanted:?} not found in namespace {namespace}"
            )));
        };
        RevisionTemplate::from_controller_revision(&revision)
            .map(Some)
            .map_err(|e| Problem::Invalid(e.to_string()))
    }

    /// The answer when the webhook cannot decide: what the apiserver would do were the webhook down.
    fn cannot_decide(
        &self,
        request: &AdmissionRequest<DynamicObject>,
        reason: &str,
    ) -> (Answer, Outcome) {
        tracing::warn!(
            namespace = request.namespace.as_deref().unwrap_or_default(),
            name = %request.name,
            %reason,
            policy = %self.settings.failure_policy,
            "Pod webhook cannot decide on SidecarSet injection"
        );
        match self.settings.failure_policy {
            FailurePolicy::Ignore => {
                let mut response = AdmissionResponse::from(request);
                response.warnings = Some(vec![format!(
                    "kruise: SidecarSet injection skipped ({reason}); the Pod is admitted without sidecars"
                )]);
                (
                    Answer {
                        review: response.into_review(),
                        allowed: true,
                    },
                    Outcome::Skipped,
                )
            }
            FailurePolicy::Fail => (
                deny(
                    request,
                    format!("SidecarSet injection cannot be decided now: {reason}"),
                ),
                Outcome::Denied,
            ),
        }
    }
}

/// The newest revision: highest `revision`, then latest creation, then name (Kubernetes' history
/// order).
fn newest(mut revisions: Vec<ControllerRevision>) -> Option<ControllerRevision> {
    revisions.sort_by(|a, b| {
        a.revision
            .cmp(&b.revision)
            .then_with(|| {
                let at =
                    |r: &ControllerRevision| r.metadata.creation_timestamp.clone().map(|t| t.0);
                at(a).cmp(&at(b))
            })
            .then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
    revisions.pop()
}

/// Allows with the JSON patch from `original` to `injected`. Both sides go through the typed Pod, so
/// the diff touches only what the injection changed (a full diff: injection inserts into lists).
fn patch_answer(
    request: &AdmissionRequest<DynamicObject>,
    original: &Pod,
    injected: &Pod,
) -> (Answer, Outcome) {
    let values =
        serde_json::to_value(original).and_then(|o| Ok((o, serde_json::to_value(injected)?)));
    let (before, after) = match values {
        Ok(values) => values,
        Err(error) => {
            return (
                deny(request, format!("cannot encode the injected Pod: {error}")),
                Outcome::Denied,
            );
        }
    };
    let patch = json_patch::diff(&before, &after);
    if patch.0.is_empty() {
        return (allow(request), Outcome::Unchanged);
    }
    match AdmissionResponse::from(request).with_patch(patch) {
        Ok(response) => (
            Answer {
                review: response.into_review(),
                allowed: true,
            },
            Outcome::Injected,
        ),
        Err(error) => (
            deny(
                request,
                format!("cannot encode the injection patch: {error}"),
            ),
            Outcome::Denied,
        ),
    }
}

/// The Pod's name for logs: its own, else its generateName, else the request's.
fn pod_name(pod: &Pod, request: &AdmissionRequest<DynamicObject>) -> String {
    pod.metadata
        .name
        .clone()
        .or_else(|| pod.metadata.generate_name.clone())
        .unwrap_or_else(|| request.name.clone())
}

/// `answer` with a warning for the client.
fn with_warning((mut answer, outcome): (Answer, Outcome), warning: String) -> (Answer, Outcome) {
    if let Some(response) = answer.review.response.as_mut() {
        response.warnings.get_or_insert_with(Vec::new).push(warning);
    }
    (answer, outcome)
}

/// Adds the `KruisePodReady` readiness gate to `pod` unless it has it; whether it was added.
/// `EnablePodProbeMarkerOnServerless`: the probes of the namespace's PodProbeMarkers that match the
/// Pod, written into it for its virtual kubelet. Whether the Pod changed.
fn annotate_serverless_probes(
    pod: &mut Pod,
    namespace: &str,
    markers: &Store<PodProbeMarker>,
) -> bool {
    let cached = markers.state();
    let in_namespace: Vec<&PodProbeMarker> = cached
        .iter()
        .filter(|m| m.metadata.namespace.as_deref() == Some(namespace))
        .map(|m| m.as_ref())
        .collect();
    let Some((probes, names)) = kruise_core::podprobemarker::serverless_probes(&in_namespace, pod)
    else {
        return false;
    };
    let annotations = pod.metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(
        kruise_api::podprobemarker::ANNOTATION_POD_PROBE.to_owned(),
        probes,
    );
    annotations.insert(
        kruise_api::podprobemarker::ANNOTATION_POD_PROBE_MARKER_LIST.to_owned(),
        names,
    );
    true
}

/// Container launch priority (`kruise_core::launchpriority`): a Pod that asks for its containers to
/// start in order gets each container's barrier env, and a name if it came with only `generateName`
/// (the barrier ConfigMap is named after the Pod). Whether anything changed; a
/// `KRUISE_CONTAINER_PRIORITY` that is not an integer refuses the Pod.
fn hold_for_launch_priority(
    pod: &mut Pod,
) -> Result<bool, kruise_core::launchpriority::InvalidPriority> {
    use kruise_core::launchpriority::{add_barriers, creation_priorities, generated_name};
    let Some(priorities) = creation_priorities(pod)? else {
        return Ok(false);
    };
    let name = match pod.metadata.name.as_deref().filter(|n| !n.is_empty()) {
        Some(name) => name.to_string(),
        None => {
            let prefix = pod.metadata.generate_name.clone().unwrap_or_default();
            let mut rng = rand::rng();
            let suffix = kruise_controllers::cloneset::newpod::random_id(|n| {
                rand::Rng::random_range(&mut rng, 0..n)
            });
            let name = generated_name(&prefix, &suffix);
            pod.metadata.name = Some(name.clone());
            name
        }
    };
    add_barriers(pod, &name, &priorities);
    Ok(true)
}

fn add_kruise_pod_ready_gate(pod: &mut Pod) -> bool {
    let spec = pod.spec.get_or_insert_with(Default::default);
    kruise_core::pods::add_readiness_gate(spec, kruise_api::keys::CONDITION_KRUISE_POD_READY)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testreview::{Review, response};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kruise_api::kinds::{Kind, V1BETA1};
    use kube::core::PartialObjectMetaExt;
    use kube::runtime::watcher::Event;
    use serde_json::{Value, json};
    use std::time::Duration;

    const MANAGER_NS: &str = "kruise-system";

    fn example(file: &str) -> Value {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../examples")
            .join(file);
        let text = std::fs::read_to_string(&path).expect("example readable");
        serde_yaml::from_str(&text).expect("example is YAML")
    }

    /// A SidecarSet as the cache holds it: v1beta1, defaulted (with its hash annotations).
    fn sidecarset(mut value: Value, name: &str) -> SidecarSet {
        value["metadata"]["name"] = json!(name);
        let value = Kind::SidecarSet
            .convert(value, V1BETA1)
            .expect("converts to v1beta1");
        let value = Kind::SidecarSet.default_object(value).expect("defaults");
        serde_json::from_value(value).expect("typed SidecarSet")
    }

    fn logtail(name: &str) -> SidecarSet {
        sidecarset(example("sidecarset-logtail.yaml"), name)
    }

    /// A second SidecarSet for app=nginx Pods, with its own container.
    fn metrics_set(name: &str) -> SidecarSet {
        sidecarset(
            json!({
                "apiVersion": "apps.kruise.io/v1beta1", "kind": "SidecarSet",
                "metadata": {"name": name},
                "spec": {
                    "selector": {"matchLabels": {"app": "nginx"}},
                    "containers": [{"name": "metrics", "image": "metrics:1", "podInjectPolicy": "AfterAppContainer"}],
                },
            }),
            name,
        )
    }

    fn test_pod() -> Value {
        example("sidecarset-test-pod.yaml")
    }

    fn injector(sets: Vec<SidecarSet>, namespaces: &[(&str, &[(&str, &str)])]) -> PodInjector {
        injector_with(sets, namespaces, FailurePolicy::Ignore)
    }

    fn injector_with(
        sets: Vec<SidecarSet>,
        namespaces: &[(&str, &[(&str, &str)])],
        failure_policy: FailurePolicy,
    ) -> PodInjector {
        let (sidecarsets, mut writer) = reflector::store();
        writer.apply_watcher_event(&Event::Init);
        for set in sets {
            writer.apply_watcher_event(&Event::InitApply(set));
        }
        writer.apply_watcher_event(&Event::InitDone);
        let (namespace_store, mut ns_writer) = reflector::store();
        ns_writer.apply_watcher_event(&Event::Init);
        for (name, labels) in namespaces {
            let meta = ObjectMeta {
                name: Some(name.to_string()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            };
            ns_writer
                .apply_watcher_event(&Event::InitApply(meta.into_request_partial::<Namespace>()));
        }
        ns_writer.apply_watcher_event(&Event::InitDone);
        // The writers must outlive the test for the stores to stay "ready".
        std::mem::forget(writer);
        std::mem::forget(ns_writer);
        PodInjector::from_stores(
            sidecarsets,
            namespace_store,
            None,
            PodSettings {
                failure_policy,
                ..PodSettings::gates_off(MANAGER_NS)
            },
        )
    }

    fn review(operation: &str, namespace: &str, pod: Value) -> AdmissionReview<DynamicObject> {
        Review::pod()
            .operation(operation)
            .namespace(namespace)
            .object(pod)
            .build()
    }

    /// The Pod as the apiserver stores it after applying the answer's patch.
    fn patched(original: &Value, answer: &Answer) -> Value {
        let response = response(answer);
        assert!(response.allowed, "{:?}", response.result);
        let mut pod = original.clone();
        if let Some(patch) = &response.patch {
            let patch: json_patch::Patch = serde_json::from_slice(patch).expect("patch json");
            json_patch::patch(&mut pod, &patch).expect("patch applies to the original");
        }
        pod
    }

    fn container_names(pod: &Value) -> Vec<&str> {
        pod["spec"]["containers"]
            .as_array()
            .expect("containers")
            .iter()
            .filter_map(|c| c["name"].as_str())
            .collect()
    }

    /// An injector whose SidecarSet cache (empty) lags an apiserver that lists `logtail` at
    /// resourceVersion 7, waiting at most `wait`; and the cache's writer.
    fn lagging_injector(wait: Duration) -> (PodInjector, reflector::store::Writer<SidecarSet>) {
        use crate::freshness::{Lister, Listing, WatchedCache};
        let (sidecarsets, writer) = crate::testreview::listed_store();
        let (namespaces, ns_writer) = crate::testreview::listed_store();
        std::mem::forget(ns_writer);
        let lister: Lister = Arc::new(|| {
            async {
                Ok(Listing {
                    resource_version: "10".into(),
                    items: vec![(
                        (None, "logtail".into()),
                        crate::freshness::Version {
                            resource_version: "7".into(),
                            ..Default::default()
                        },
                    )],
                })
            }
            .boxed()
        });
        let shared = kruise_controllers::driver::caches::Shared::from_store(sidecarsets.clone());
        let freshness = Freshness::new(wait, crate::metrics::FreshnessMetrics::default()).track(
            PolicyKind::SidecarSet,
            WatchedCache::start(shared),
            lister,
        );
        let pods = PodInjector::from_stores(
            sidecarsets,
            namespaces,
            None,
            PodSettings::gates_off(MANAGER_NS),
        )
        .with_freshness(freshness);
        (pods, writer)
    }

    #[tokio::test]
    async fn a_sidecarset_created_before_the_pod_is_waited_for_until_the_cache_shows_it() {
        let (pods, mut writer) = lagging_injector(Duration::from_secs(5));
        let original = test_pod();
        let review_task = {
            let (pods, original) = (pods.clone(), original.clone());
            tokio::spawn(async move { pods.review(review("CREATE", "web", original)).await })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !review_task.is_finished(),
            "decided before the cache saw the SidecarSet"
        );
        let mut set = logtail("logtail");
        set.metadata.resource_version = Some("7".into());
        writer.apply_watcher_event(&Event::Apply(set));
        let (answer, outcome) = review_task.await.expect("join");
        assert_eq!(outcome, Outcome::Injected);
        assert_eq!(
            container_names(&patched(&original, &answer)),
            ["logtail", "nginx"]
        );
        assert!(
            response(&answer).warnings.is_none(),
            "{:?}",
            response(&answer)
        );
    }

    #[tokio::test]
    async fn past_the_wait_a_pod_is_decided_on_the_cache_with_a_warning() {
        let (pods, _writer) = lagging_injector(Duration::from_millis(200));
        let began = std::time::Instant::now();
        let (answer, outcome) = pods.review(review("CREATE", "web", test_pod())).await;
        assert!(
            began.elapsed() < Duration::from_secs(1),
            "{:?}",
            began.elapsed()
        );
        assert_eq!(outcome, Outcome::Unchanged);
        let warnings = response(&answer).warnings.clone().unwrap_or_default();
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("not known to show every earlier write")
                    && w.contains("SidecarSet: logtail")),
            "{warnings:?}"
        );
    }

    #[tokio::test]
    async fn injects_logtail_into_the_seed_pod() {
        let pods = injector(vec![logtail("logtail")], &[]);
        let original = test_pod();
        let (answer, outcome) = pods.review(review("CREATE", "web", original.clone())).await;
        assert_eq!(outcome, Outcome::Injected);
        let pod = patched(&original, &answer);
        assert_eq!(container_names(&pod), ["logtail", "nginx"]);
        let logtail = &pod["spec"]["containers"][0];
        assert_eq!(logtail["volumeMounts"][0]["name"], "nginx-log");
        let env: Vec<(&str, &str)> = logtail["env"]
            .as_array()
            .expect("env")
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap_or(""),
                    e["value"].as_str().unwrap_or(""),
                )
            })
            .collect();
        assert!(env.contains(&("TZ", "Asia/Shanghai")), "{env:?}");
        assert!(env.contains(&("IS_INJECTED", "true")), "{env:?}");
        // The Pod's own nginx-log volume is kept, not doubled.
        assert_eq!(pod["spec"]["volumes"].as_array().map(Vec::len), Some(1));
        let annotations = &pod["metadata"]["annotations"];
        assert_eq!(annotations["kruise.io/sidecarset-injected-list"], "logtail");
        let hashes: Value = serde_json::from_str(
            annotations["kruise.io/sidecarset-hash"]
                .as_str()
                .expect("hash annotation"),
        )
        .expect("hash json");
        assert_eq!(hashes["logtail"]["sidecarList"], json!(["logtail"]));
        // The app container is untouched.
        assert_eq!(
            pod["spec"]["containers"][1],
            original["spec"]["containers"][0]
        );
    }

    fn barrier_keys(pod: &Value) -> Vec<(String, String)> {
        pod["spec"]["containers"]
            .as_array()
            .expect("containers")
            .iter()
            .flat_map(|c| c["env"].as_array().cloned().unwrap_or_default())
            .filter(|e| e["name"] == "KRUISE_CONTAINER_BARRIER")
            .map(|e| {
                let r = &e["valueFrom"]["configMapKeyRef"];
                (
                    r["name"].as_str().unwrap_or_default().to_string(),
                    r["key"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }

    #[tokio::test]
    async fn ordered_launch_holds_injected_and_app_containers_in_order() {
        let pods = injector(vec![logtail("logtail")], &[]);
        let mut original = test_pod();
        if let Some(meta) = original["metadata"].as_object_mut() {
            meta.remove("name");
        }
        original["metadata"]["generateName"] = json!("web-");
        original["metadata"]["annotations"] =
            json!({"apps.kruise.io/container-launch-priority": "Ordered"});
        let (answer, outcome) = pods.review(review("CREATE", "web", original.clone())).await;
        assert_eq!(outcome, Outcome::Injected);
        let pod = patched(&original, &answer);
        let name = pod["metadata"]["name"].as_str().expect("a generated name");
        assert!(name.starts_with("web-") && name.len() == 9, "{name}");
        let barrier = format!("{name}-barrier");
        // The injected sidecar (before the app) starts first.
        assert_eq!(container_names(&pod), ["logtail", "nginx"]);
        assert_eq!(
            barrier_keys(&pod),
            [
                (barrier.clone(), "p_0".to_string()),
                (barrier, "p_-1".to_string())
            ]
        );
    }

    #[tokio::test]
    async fn a_priority_that_is_not_an_integer_refuses_the_pod() {
        let pods = injector(vec![], &[]);
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "web"},
            "spec": {"containers": [
                {"name": "a", "image": "a"},
                {"name": "b", "image": "b", "env": [{"name": "KRUISE_CONTAINER_PRIORITY", "value": "high"}]},
            ]},
        });
        let (answer, outcome) = pods.review(review("CREATE", "web", pod.clone())).await;
        assert_eq!(outcome, Outcome::Denied);
        let message = response(&answer).result.message.clone();
        assert!(
            message.contains("spec.containers[1].env[KRUISE_CONTAINER_PRIORITY]"),
            "{message}"
        );
        // Equal priorities ask for no order: no patch.
        let mut equal = pod;
        equal["spec"]["containers"][1]["env"][0]["value"] = json!("0");
        let (answer, outcome) = pods.review(review("CREATE", "web", equal)).await;
        assert_eq!(outcome, Outcome::Unchanged);
        assert!(response(&answer).patch.is_none());
    }

    #[tokio::test]
    async fn kube_system_and_the_manager_namespace_are_never_injected() {
        let pods = injector(vec![logtail("logtail")], &[]);
        for namespace in ["kube-system", MANAGER_NS] {
            let mut pod = test_pod();
            pod["metadata"]["namespace"] = json!(namespace);
            let (answer, outcome) = pods.review(review("CREATE", namespace, pod)).await;
            assert_eq!(outcome, Outcome::Unchanged, "{namespace}");
            assert!(response(&answer).allowed);
            assert!(response(&answer).patch.is_none(), "{namespace}");
        }
        // A Pod posted without a namespace is in the request's.
        let (_, outcome) = pods
            .review(review("CREATE", "kube-system", test_pod()))
            .await;
        assert_eq!(outcome, Outcome::Unchanged);
    }

    #[tokio::test]
    async fn no_match_means_no_patch() {
        let pods = injector(vec![logtail("logtail")], &[]);
        let mut pod = test_pod();
        pod["metadata"]["labels"] = json!({"app": "other"});
        let (answer, outcome) = pods.review(review("CREATE", "web", pod)).await;
        assert_eq!(outcome, Outcome::Unchanged);
        let unchanged = response(&answer);
        assert!(unchanged.allowed && unchanged.patch.is_none());
        assert!(unchanged.warnings.is_none());
        let empty = injector(vec![], &[]);
        let (_, outcome) = empty.review(review("CREATE", "web", test_pod())).await;
        assert_eq!(outcome, Outcome::Unchanged);
    }

    #[tokio::test]
    async fn not_synced_admits_unchanged_or_fails_by_policy() {
        let settings = |failure_policy| PodSettings {
            failure_policy,
            ..PodSettings::gates_off(MANAGER_NS)
        };
        let ignore = PodInjector::without_caches(settings(FailurePolicy::Ignore));
        assert!(!ignore.synced());
        let began = std::time::Instant::now();
        let (answer, outcome) = ignore.review(review("CREATE", "web", test_pod())).await;
        assert!(began.elapsed() < Duration::from_secs(1), "answered at once");
        assert_eq!(outcome, Outcome::Skipped);
        let skipped = response(&answer);
        assert!(skipped.allowed && skipped.patch.is_none());
        let warnings = skipped.warnings.clone().unwrap_or_default();
        assert!(warnings[0].contains("not loaded yet"), "{warnings:?}");

        let fail = PodInjector::without_caches(settings(FailurePolicy::Fail));
        let (answer, outcome) = fail.review(review("CREATE", "web", test_pod())).await;
        assert_eq!(outcome, Outcome::Denied);
        assert!(!response(&answer).allowed);
        // Excluded namespaces are answered even before the caches are loaded.
        let (_, outcome) = fail
            .review(review("CREATE", "kube-system", test_pod()))
            .await;
        assert_eq!(outcome, Outcome::Unchanged);
    }

    /// A Pod whose WorkloadSpread placement cannot be decided is counted for the WorkloadSpread's
    /// `PodsAdmittedUnplaced` Event only when it is admitted (failure policy `Ignore`); refused under
    /// `Fail`, it is created again and placed then, so it is not counted.
    #[tokio::test]
    async fn only_pods_admitted_unplaced_are_counted() {
        for (policy, admitted) in [(FailurePolicy::Ignore, true), (FailurePolicy::Fail, false)] {
            let (store, mut writer) = reflector::store();
            // A patch no Pod can take: placement fails, and it cannot be applied after creation
            // either (no gate), so the failure policy answers.
            let ws: kruise_api::workloadspread::WorkloadSpread = serde_json::from_value(json!({
                "apiVersion": "apps.kruise.io/v1alpha1", "kind": "WorkloadSpread",
                "metadata": {"name": "ws", "namespace": "web", "resourceVersion": "1", "uid": "w1"},
                "spec": {
                    "targetRef": {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": "web"},
                    "subsets": [{"name": "a", "patch": {"spec": {"containers": "not a list"}}}]
                }
            }))
            .expect("ws");
            for event in [Event::Init, Event::InitApply(ws), Event::InitDone] {
                writer.apply_watcher_event(&event);
            }
            std::mem::forget(writer);
            let spreads = crate::workloadspread::WorkloadSpreads::new(
                None,
                Some(store),
                Duration::from_secs(3),
            );
            let pods = injector_with(vec![], &[], policy).with_workloadspreads(spreads);
            let pod = json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "web-1", "namespace": "web", "ownerReferences": [
                    {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": "web", "uid": "u", "controller": true}
                ]},
                "spec": {"containers": [{"name": "c", "image": "i"}]}
            });
            let (answer, outcome) = pods.review(review("CREATE", "web", pod)).await;
            assert_eq!(response(&answer).allowed, admitted, "{policy}");
            assert_eq!(outcome == Outcome::Denied, !admitted, "{policy}");
            let counted = pods.workloadspreads().expect("hooks").unplaced_counts();
            let expected = if admitted {
                vec![("web/ws".to_string(), 1)]
            } else {
                vec![]
            };
            assert_eq!(counted, expected, "{policy}");
        }
    }

    #[tokio::test]
    async fn two_sidecarsets_on_one_pod() {
        let pods = injector(vec![metrics_set("b-metrics"), logtail("a-logtail")], &[]);
        let original = test_pod();
        let (answer, outcome) = pods.review(review("CREATE", "web", original.clone())).await;
        assert_eq!(outcome, Outcome::Injected);
        let pod = patched(&original, &answer);
        assert_eq!(container_names(&pod), ["logtail", "nginx", "metrics"]);
        assert_eq!(
            pod["metadata"]["annotations"]["kruise.io/sidecarset-injected-list"],
            "a-logtail,b-metrics"
        );
    }

    #[tokio::test]
    async fn namespace_selector_reads_the_namespace_labels() {
        let mut team_a = logtail("team-a");
        team_a.spec.namespace_selector =
            Some(serde_json::from_value(json!({"matchLabels": {"team": "a"}})).expect("selector"));
        let mut only_other = metrics_set("only-other");
        only_other.spec.namespace_selector = Some(
            serde_json::from_value(
                json!({"matchLabels": {"kubernetes.io/metadata.name": "other"}}),
            )
            .expect("selector"),
        );
        let pods = injector(
            vec![team_a, only_other],
            &[("web", &[("team", "a")]), ("plain", &[])],
        );
        let original = test_pod();
        let (answer, _) = pods.review(review("CREATE", "web", original.clone())).await;
        assert_eq!(
            container_names(&patched(&original, &answer)),
            ["logtail", "nginx"]
        );
        let (_, outcome) = pods.review(review("CREATE", "plain", test_pod())).await;
        assert_eq!(outcome, Outcome::Unchanged);
        let (answer, _) = pods
            .review(review("CREATE", "other", original.clone()))
            .await;
        assert_eq!(
            container_names(&patched(&original, &answer)),
            ["nginx", "metrics"]
        );
    }

    #[tokio::test]
    async fn paused_injection_and_updates_are_left_alone() {
        let mut paused = logtail("paused");
        paused.spec.injection_strategy.paused = true;
        let pods = injector(vec![paused], &[]);
        let (_, outcome) = pods.review(review("CREATE", "web", test_pod())).await;
        assert_eq!(outcome, Outcome::Unchanged);
        let pods = injector(vec![logtail("logtail")], &[]);
        let (answer, outcome) = pods.review(review("UPDATE", "web", test_pod())).await;
        assert_eq!(outcome, Outcome::Unchanged);
        assert!(response(&answer).patch.is_none());
    }

    #[tokio::test]
    async fn a_broken_sidecarset_rejects_the_pod_naming_the_field() {
        let mut broken = logtail("broken");
        broken.spec.volumes.clear();
        let pods = injector(vec![broken], &[]);
        let mut pod = test_pod();
        pod["spec"]["volumes"] = json!([]);
        pod["spec"]["containers"][0]["volumeMounts"] = json!([]);
        let (answer, outcome) = pods.review(review("CREATE", "web", pod)).await;
        assert_eq!(outcome, Outcome::Denied);
        let message = &response(&answer).result.message;
        assert!(
            message.contains("sidecarset broken")
                && message.contains("spec.containers[0].volumeMounts[0].name"),
            "{message}"
        );
    }

    #[tokio::test]
    async fn an_unreadable_pinned_revision_follows_the_failure_policy() {
        let mut pinned = logtail("pinned");
        pinned.spec.injection_strategy.revision = Some(
            serde_json::from_value(json!({"revisionName": "pinned-abc", "policy": "Always"}))
                .expect("revision"),
        );
        let pods = injector(vec![pinned.clone()], &[]);
        let (_, outcome) = pods.review(review("CREATE", "web", test_pod())).await;
        assert_eq!(outcome, Outcome::Skipped);
        let pods = injector_with(vec![pinned], &[], FailurePolicy::Fail);
        let (answer, outcome) = pods.review(review("CREATE", "web", test_pod())).await;
        assert_eq!(outcome, Outcome::Denied);
        let message = &response(&answer).result.message;
        assert!(
            message.contains("spec.injectionStrategy.revision.revisionName"),
            "{message}"
        );
    }

    #[test]
    fn newest_revision_by_number_then_time() {
        let revision = |name: &str, number: i64| {
            let mut r = ControllerRevision {
                revision: number,
                ..Default::default()
            };
            r.metadata.name = Some(name.into());
            r
        };
        let picked = newest(vec![revision("b", 2), revision("c", 3), revision("a", 1)]);
        assert_eq!(picked.and_then(|r| r.metadata.name).as_deref(), Some("c"));
        assert!(newest(vec![]).is_none());
    }
}
