//! WorkloadSpread admission: the Pod hooks (placement of a Pod being created, the slot of a Pod
//! being deleted or evicted) and the validating webhook of WorkloadSpread objects
//! (`vworkloadspread.kb.io`, upstream's path).
//!
//! A Pod being created whose controller is a WorkloadSpread's target (directly, or a Deployment
//! through its ReplicaSet) and which its `targetFilter` selects is given the first subset with
//! room ([`kruise_core::workloadspread::admit_create`]); the slot is recorded in the
//! WorkloadSpread's status over the resourceVersion it was read at, again on a conflict, as
//! upstream does, so that two replicas of the webhook never give the same slot twice. The Pods
//! of one WorkloadSpread that arrive together are recorded together, by one write
//! ([`kruise_controllers::workloadspread::slots`]), decided on the newer of the watch cache's copy
//! and this process's last write.
//!
//! The whole placement has a deadline below the Pod webhook's timeout: with a slow apiserver the
//! Pod is answered by the failure policy (Ignore: admitted without placement, with a warning)
//! instead of the apiserver giving up on the webhook.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kruise_api::field;
use kruise_api::validation::selector_matches;
use kruise_api::workloadspread::{
    self as api, MatchedWorkloadSpread, WorkloadSpread, group_of, is_target_kind, same_workload,
};
use kruise_controllers::ledger::commit::{Decide, Decided};
use kruise_controllers::workloadspread::slots::{self, Slot, SlotDecisions, SlotRequest, Slots};
use kruise_controllers::workloadspread::workload;
use kruise_core::workloadspread as core;
use kube::api::ListParams;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionReview, Operation};
use kube::runtime::reflector::Store;
use kube::{Api, Client, ResourceExt};

use crate::admission::{Answer, Change, allow, decode_change, deny, kinds_decode};
use crate::replicaset_owners::ReplicaSetOwners;

/// Path and webhook name of the WorkloadSpread validating webhook, upstream's.
pub const VALIDATE_PATH: &str = "/validate-apps-kruise-io-v1alpha1-workloadspread";
pub const WEBHOOK_NAME: &str = "vworkloadspread.kb.io";
pub const GATE: &str = "WorkloadSpread";

/// The WorkloadSpread part of the Pod webhooks.
#[derive(Clone)]
pub struct WorkloadSpreads {
    client: Option<Client>,
    /// The process's watch cache of WorkloadSpreads, when there is one.
    store: Option<Store<WorkloadSpread>>,
    /// The group commit of the slots taken and given back (with a client).
    slots: Option<Arc<Slots>>,
    /// How long after its admission arrived a placement is done or given up.
    pub budget: Duration,
    /// The namespace of kruise-configuration (its custom workload whitelist).
    configuration_namespace: String,
    /// The controllers of the ReplicaSets a Deployment's Pods are matched through.
    owners: Arc<ReplicaSetOwners>,
    /// The Pods admitted without a subset, reported on their WorkloadSpread.
    unplaced: Arc<UnplacedReport>,
}

/// How long kruise-configuration may take to read (only where a custom workload kind is met).
const CONFIGURATION_DEADLINE: Duration = Duration::from_secs(2);
/// How many owners up from a Pod a whitelisted workload is looked for (its sub-resources).
const OWNER_DEPTH: usize = 3;

/// Why a Pod was not placed.
#[derive(Debug)]
pub enum Unplaced {
    /// What is needed could not be read or written in time: answered by the failure policy.
    /// `spread` is the WorkloadSpread the Pod belongs to, when known: if the Pod is admitted, it
    /// is admitted without a subset of it ([`WorkloadSpreads::admitted_unplaced`]).
    Unavailable {
        reason: String,
        spread: Option<Arc<WorkloadSpread>>,
    },
    /// Its WorkloadSpread is known but its slot could not be recorded in time: the Pod (here)
    /// waits behind the placement gate, for the controller to place it
    /// ([`kruise_core::workloadspread::gate`]).
    Gated { pod: Box<Pod>, reason: String },
}

impl WorkloadSpreads {
    pub fn new(
        client: Option<Client>,
        store: Option<Store<WorkloadSpread>>,
        budget: Duration,
    ) -> Self {
        let mut hooks = Self {
            unplaced: Arc::new(UnplacedReport::new(client.clone())),
            owners: Arc::new(ReplicaSetOwners::new(client.clone())),
            client,
            store,
            slots: None,
            budget,
            configuration_namespace: "kruise-system".into(),
        };
        hooks.slots = hooks.new_slots();
        hooks
    }

    /// These hooks, reading the custom workload whitelist from the kruise-configuration of
    /// `namespace` (the manager's; `kruise-system` by default).
    pub fn with_configuration_namespace(mut self, namespace: &str) -> Self {
        self.configuration_namespace = namespace.to_owned();
        self.slots = self.new_slots();
        self
    }

    /// These hooks, committing their slots with `slots` (the process's, which the WorkloadSpread
    /// controller shares); `None` keeps their own.
    /// Reads ReplicaSets through `owners` (the one the Pod webhook's other steps share).
    pub fn with_owners(mut self, owners: Arc<ReplicaSetOwners>) -> Self {
        self.owners = owners;
        self
    }

    pub fn with_slots(mut self, slots: Option<Arc<Slots>>) -> Self {
        if slots.is_some() {
            self.slots = slots;
        }
        self
    }

    /// The group commit of the slots (with a client).
    fn new_slots(&self) -> Option<Arc<Slots>> {
        let client = self.client.as_ref()?;
        Some(slots::on_apiserver(
            client,
            &self.configuration_namespace,
            self.store.clone(),
            kruise_controllers::ledger::commit::CommitMetrics::default(),
        ))
    }

    /// The custom workload whitelist (empty without a client), read within
    /// [`CONFIGURATION_DEADLINE`].
    async fn whitelist(&self) -> Result<api::CustomWorkloadWhitelist, String> {
        let Some(client) = &self.client else {
            return Ok(api::CustomWorkloadWhitelist::default());
        };
        whitelist(client, &self.configuration_namespace).await
    }

    /// The watch cache, once it is loaded.
    fn loaded(&self) -> Option<&Store<WorkloadSpread>> {
        self.store.as_ref().filter(|store| {
            matches!(
                futures::FutureExt::now_or_never(store.wait_until_ready()),
                Some(Ok(()))
            )
        })
    }

    /// The WorkloadSpreads of `namespace`: from the cache once it is loaded, else listed.
    async fn in_namespace(&self, namespace: &str) -> Result<Vec<Arc<WorkloadSpread>>, String> {
        if let Some(store) = self.loaded() {
            return Ok(store
                .state()
                .into_iter()
                .filter(|w| w.namespace().as_deref() == Some(namespace))
                .collect());
        }
        let Some(client) = &self.client else {
            return Ok(Vec::new());
        };
        let api: Api<WorkloadSpread> = Api::namespaced(client.clone(), namespace);
        api.list(&ListParams::default())
            .await
            .map(|l| l.items.into_iter().map(Arc::new).collect())
            .map_err(|e| format!("listing WorkloadSpreads of namespace {namespace}: {e}"))
    }

    /// The WorkloadSpread that spreads `pod`, if any.
    async fn matching(
        &self,
        pod: &Pod,
        namespace: &str,
    ) -> Result<Option<Arc<WorkloadSpread>>, String> {
        if !kruise_core::pods::is_active(pod) {
            return Ok(None);
        }
        let Some(owner) = pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
        else {
            return Ok(None);
        };
        let candidates: Vec<Arc<WorkloadSpread>> = self
            .in_namespace(namespace)
            .await?
            .into_iter()
            .filter(|w| {
                w.metadata.deletion_timestamp.is_none() && w.spec.target_reference.is_some()
            })
            .collect();
        if candidates.is_empty() {
            return Ok(None);
        }
        // A Pod of a kind no WorkloadSpread targets out of the box belongs to a custom workload
        // only if kruise-configuration whitelists its owner's kind, and some WorkloadSpread here
        // targets a custom kind (only then is the whitelist read).
        let custom_targets = candidates.iter().any(|w| {
            w.spec
                .target_reference
                .as_ref()
                .is_some_and(|t| !is_target_kind(&t.api_version, &t.kind))
        });
        let whitelist = if is_target_kind(&owner.api_version, &owner.kind) {
            api::CustomWorkloadWhitelist::default()
        } else if custom_targets {
            let whitelist = self.whitelist().await?;
            if !whitelist.allows_owner(&owner.api_version, &owner.kind) {
                return Ok(None);
            }
            whitelist
        } else {
            return Ok(None);
        };
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        let selected = |ws: &WorkloadSpread| {
            ws.spec
                .target_filter
                .as_ref()
                .and_then(|f| f.selector.as_ref())
                .is_none_or(|s| selector_matches(s, &labels))
        };
        for ws in &candidates {
            if let Some(target) = &ws.spec.target_reference
                && same_workload(target, &owner.api_version, &owner.kind, &owner.name)
                && selected(ws)
            {
                return Ok(Some(ws.clone()));
            }
        }
        if !whitelist.workloads.is_empty() {
            return self
                .matching_through_owners(owner, namespace, &whitelist, &candidates, &selected)
                .await;
        }
        // A ReplicaSet's Pods belong to its Deployment: read the ReplicaSet only when some
        // WorkloadSpread targets a Deployment it may belong to (its name starts with the
        // Deployment's).
        let deployment_targets: Vec<&Arc<WorkloadSpread>> = candidates
            .iter()
            .filter(|w| {
                w.spec.target_reference.as_ref().is_some_and(|t| {
                    t.kind == "Deployment"
                        && t.group() == "apps"
                        && owner.name.starts_with(&format!("{}-", t.name))
                })
            })
            .collect();
        if owner.kind != "ReplicaSet"
            || group_of(&owner.api_version) != "apps"
            || deployment_targets.is_empty()
        {
            return Ok(None);
        }
        let Some(parent) = self.owners.controller_of(namespace, owner).await? else {
            return Ok(None);
        };
        Ok(deployment_targets
            .into_iter()
            .find(|w| {
                w.spec.target_reference.as_ref().is_some_and(|t| {
                    same_workload(t, &parent.api_version, &parent.kind, &parent.name)
                }) && selected(w)
            })
            .cloned())
    }

    /// The WorkloadSpread whose custom workload owns `owner` through its sub-resources (each
    /// whitelisted, at most [`OWNER_DEPTH`] levels up): each owner's metadata is read for its own
    /// controller, as upstream walks up the chain.
    async fn matching_through_owners(
        &self,
        owner: &k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
        namespace: &str,
        whitelist: &api::CustomWorkloadWhitelist,
        candidates: &[Arc<WorkloadSpread>],
        selected: &(dyn Fn(&WorkloadSpread) -> bool + Sync),
    ) -> Result<Option<Arc<WorkloadSpread>>, String> {
        let Some(client) = &self.client else {
            return Ok(None);
        };
        let mut current = owner.clone();
        for _ in 0..OWNER_DEPTH {
            if !whitelist.allows_owner(&current.api_version, &current.kind) {
                return Ok(None);
            }
            let resource = workload::resource(&api::TargetReference {
                api_version: current.api_version.clone(),
                kind: current.kind.clone(),
                name: current.name.clone(),
            });
            let objects: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), namespace, &resource);
            let object = objects.get_metadata_opt(&current.name).await.map_err(|e| {
                format!("reading {} {namespace}/{}: {e}", current.kind, current.name)
            })?;
            let Some(parent) = object.and_then(|o| {
                o.metadata
                    .owner_references
                    .into_iter()
                    .flatten()
                    .find(|o| o.controller == Some(true))
            }) else {
                return Ok(None);
            };
            if let Some(ws) = candidates.iter().find(|w| {
                w.spec.target_reference.as_ref().is_some_and(|t| {
                    same_workload(t, &parent.api_version, &parent.kind, &parent.name)
                }) && selected(w)
            }) {
                return Ok(Some(ws.clone()));
            }
            current = parent;
        }
        Ok(None)
    }

    /// Places a Pod being created whose admission arrived at `arrived`: `Ok(Some(pod))` with its
    /// subset injected, `Ok(None)` when no WorkloadSpread spreads it (or no subset has room). Done
    /// or given up by `arrived` + the placement's budget, whatever came before it (read-your-writes),
    /// so that the admission is answered before the apiserver gives up on it.
    pub async fn place(
        &self,
        pod: &Pod,
        namespace: &str,
        arrived: tokio::time::Instant,
    ) -> Result<Option<Pod>, Unplaced> {
        let deadline = arrived + self.budget;
        let late = || {
            format!(
                "WorkloadSpread placement took longer than {:?}",
                self.budget
            )
        };
        let unknown = |reason| Unplaced::Unavailable {
            reason,
            spread: None,
        };
        let matched = match tokio::time::timeout_at(deadline, self.matching(pod, namespace)).await {
            Ok(Ok(Some(matched))) => matched,
            Ok(Ok(None)) => return Ok(None),
            Ok(Err(error)) => return Err(unknown(error)),
            Err(_) => return Err(unknown(late())),
        };
        // A Pod without a name yet asks its slot under an id of its own, which it keeps (in the
        // gate's label) when placement is left to the controller.
        let asked_as = pod
            .metadata
            .name
            .as_deref()
            .is_none_or(str::is_empty)
            .then(generated_uid);
        let placed = tokio::time::timeout_at(
            deadline,
            self.place_in(&matched, pod, namespace, asked_as.clone()),
        );
        let reason = match placed.await {
            Ok(Ok(placed)) => return Ok(placed),
            Ok(Err(error)) => error,
            Err(_) => late(),
        };
        // The controller places it once its slot is recorded, when every subset can be applied
        // after creation; otherwise answered by the failure policy without a subset (said on the
        // WorkloadSpread once admitted).
        if core::gate::placeable_after_creation(&matched, pod) {
            return Err(Unplaced::Gated {
                pod: Box::new(core::gate::gated(pod, asked_as.as_deref())),
                reason,
            });
        }
        Err(Unplaced::Unavailable {
            reason,
            spread: Some(matched),
        })
    }

    /// Counts a Pod of `spread` admitted without a subset (its placement could not be decided and
    /// the failure policy admitted it) for the WorkloadSpread's `PodsAdmittedUnplaced` Event. Only
    /// Pods actually admitted are counted: one refused under `Fail` is created again by its
    /// workload and placed then.
    pub fn admitted_unplaced(&self, spread: &WorkloadSpread) {
        self.unplaced.count(spread);
    }

    /// The Pods counted admitted without a subset so far, per WorkloadSpread `namespace/name`.
    #[cfg(test)]
    pub(crate) fn unplaced_counts(&self) -> Vec<(String, usize)> {
        self.unplaced
            .take()
            .into_iter()
            .map(|(count, of)| {
                let name = format!(
                    "{}/{}",
                    of.namespace.unwrap_or_default(),
                    of.name.unwrap_or_default()
                );
                (name, count)
            })
            .collect()
    }

    async fn place_in(
        &self,
        matched: &Arc<WorkloadSpread>,
        pod: &Pod,
        namespace: &str,
        asked_as: Option<String>,
    ) -> Result<Option<Pod>, String> {
        let ws_name = matched.name_any();
        let key = format!("{namespace}/{ws_name}");
        let pod_name = pod.metadata.name.as_deref().filter(|n| !n.is_empty());
        let request = SlotRequest::Take {
            pod_name: pod_name.map(str::to_owned),
            version: core::pod_version(pod),
            uid: asked_as.unwrap_or_default(),
            now: Timestamp::now(),
        };
        let slot = self.decide(matched, request).await?;
        let (Some(subset_name), Some(subset)) = (slot.subset, slot.spec) else {
            tracing::info!(workloadspread = %key, pod = pod_name.unwrap_or("(generated)"), "no subset has room for the Pod");
            return Ok(None);
        };
        let placed = core::inject(&ws_name, &subset, pod, &slot.uid)?;
        tracing::debug!(workloadspread = %key, subset = %subset_name, pod = pod_name.unwrap_or("(generated)"), "placed a Pod");
        Ok(Some(placed))
    }

    /// Decides `request` on `matched`: committed with the others of its WorkloadSpread, or
    /// (without a client, in tests) decided on the copy at hand and written nowhere.
    async fn decide(
        &self,
        matched: &Arc<WorkloadSpread>,
        request: SlotRequest,
    ) -> Result<Slot, String> {
        let namespace = matched.namespace().unwrap_or_default();
        let key = (namespace, matched.name_any());
        let Some(slots) = &self.slots else {
            let mut ws = WorkloadSpread::clone(matched);
            let decisions = SlotDecisions::new(Arc::new(|_| Box::pin(async { Ok(0) })));
            let decided = decisions
                .decide(&mut ws, &[&request], true)
                .await
                .map_err(|e| e.to_string())?;
            let slot = match decided.into_iter().next() {
                Some(Decided::Answer(slot) | Decided::Written(slot)) => slot,
                _ => Slot::default(),
            };
            return Ok(slot);
        };
        slots
            .submit(key.clone(), request)
            .await
            .map_err(|e| format!("recording a Pod in WorkloadSpread {}/{}: {e}", key.0, key.1))
    }

    /// Records a Pod whose deletion or eviction was admitted: its slot is free at once. The release
    /// is queued before the deletion is answered (a Pod created after it, in this process, is
    /// placed after it) and written in the background: the deletion does not wait for a second
    /// status write (its budget's is the first). Failures are logged, never refused: the
    /// controller frees the slot when the Pod is gone anyway.
    pub fn record_deletion(&self, pod: &Pod, namespace: &str) {
        let Some(matched) = kruise_core::pods::annotation(pod, api::ANNOTATION_MATCHED)
            .and_then(MatchedWorkloadSpread::parse)
        else {
            return;
        };
        let controlled = kruise_core::ownership::controller_of(&pod.metadata).is_some();
        let Some(slots) = self.slots.as_ref().filter(|_| controlled) else {
            return;
        };
        if !kruise_core::pods::is_active(pod) {
            return;
        }
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        let request = SlotRequest::Give {
            pod_name: pod_name.clone(),
            version: core::pod_version(pod),
            now: Timestamp::now(),
            matched: matched.clone(),
        };
        let key = (namespace.to_owned(), matched.name.clone());
        let deadline = tokio::time::Instant::now() + self.budget;
        let answer = slots.enqueue(key, request, Some(deadline));
        let workloadspread = format!("{namespace}/{}", matched.name);
        tokio::spawn(async move {
            if let Err(error) = answer.await {
                tracing::warn!(%error, %workloadspread, pod = %pod_name, "WorkloadSpread: recording a deletion failed; the controller frees the slot when the Pod is gone");
            }
        });
    }

    /// The WorkloadSpread part of `/validate-pod`, once the deletion or eviction is allowed:
    /// frees the Pod's slot. Dry runs change nothing.
    pub async fn review_pod_deletion(
        &self,
        review: &AdmissionReview<DynamicObject>,
        evicted: Option<&Pod>,
    ) {
        let Some(request) = review.request.as_ref() else {
            return;
        };
        if request.dry_run {
            return;
        }
        let namespace = request.namespace.clone().unwrap_or_default();
        let sub_resource = request.sub_resource.as_deref().unwrap_or_default();
        let pod: Pod = match request.operation {
            Operation::Delete if sub_resource.is_empty() => {
                let Some(old) = &request.old_object else {
                    return;
                };
                match serde_json::to_value(old).and_then(serde_json::from_value) {
                    Ok(pod) => pod,
                    Err(_) => return,
                }
            }
            Operation::Create if sub_resource == "eviction" => {
                let dry_run = request
                    .object
                    .as_ref()
                    .and_then(|o| o.data.pointer("/deleteOptions/dryRun"))
                    .and_then(serde_json::Value::as_array)
                    .is_some_and(|d| !d.is_empty());
                let Some(client) = self.client.as_ref().filter(|_| !dry_run) else {
                    return;
                };
                if let Some(pod) = evicted {
                    pod.clone()
                } else {
                    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
                    match tokio::time::timeout(self.budget, pods.get_opt(&request.name)).await {
                        Ok(Ok(Some(pod))) => pod,
                        _ => return,
                    }
                }
            }
            _ => return,
        };
        if kruise_core::pods::annotation(&pod, api::ANNOTATION_MATCHED).is_none() {
            return;
        }
        self.record_deletion(&pod, &namespace);
    }

    /// The validating webhook of WorkloadSpread objects; `enabled` is the `WorkloadSpread` gate.
    pub async fn validate(&self, review: AdmissionReview<DynamicObject>, enabled: bool) -> Answer {
        let disabled_gate = (!enabled).then_some(GATE);
        let Change {
            request,
            mut new,
            old,
        } = match decode_change::<WorkloadSpread>(review, disabled_gate, kinds_decode, deny) {
            Ok(change) => change,
            Err(answer) => return *answer,
        };
        if new.metadata.namespace.is_none() {
            new.metadata.namespace = request.namespace.clone();
        }
        let namespace = new.namespace().unwrap_or_default();
        let others = match self.in_namespace(&namespace).await {
            Ok(others) => others
                .iter()
                .map(|w| WorkloadSpread::clone(w))
                .collect::<Vec<_>>(),
            Err(error) => {
                return deny(
                    &request,
                    format!("query other WorkloadSpread failed, err: {error}"),
                );
            }
        };
        let custom_target = new
            .spec
            .target_reference
            .as_ref()
            .is_some_and(|t| !is_target_kind(&t.api_version, &t.kind));
        let whitelist = if custom_target {
            match self.whitelist().await {
                Ok(whitelist) => whitelist,
                Err(error) => {
                    return deny(&request, format!("spec.targetRef: Internal error: {error}"));
                }
            }
        } else {
            api::CustomWorkloadWhitelist::default()
        };
        let mut errors = api::validate(&new, &others, old.as_ref(), &whitelist);
        if let Some(client) = &self.client
            && new.spec.subsets.iter().any(|s| s.patch.is_some())
            && new
                .spec
                .target_reference
                .as_ref()
                .is_some_and(|t| is_target_kind(&t.api_version, &t.kind))
            && let Ok(Some(object)) = workload::get(client, &new).await
            && let Some(template) = workload::pod_template(&object)
        {
            for (i, subset) in new.spec.subsets.iter().enumerate() {
                if let Some(patch) = &subset.patch {
                    let merged = kruise_core::rollout::uniteddeployment::strategic::strategic_merge(
                        &template, patch,
                    );
                    errors.extend(api::validate_patched_template(i, merged));
                }
            }
        }
        if errors.is_empty() {
            allow(&request)
        } else {
            deny(&request, field::join(&errors))
        }
    }
}

/// The custom workload whitelist of kruise-configuration in `namespace`, read within
/// [`CONFIGURATION_DEADLINE`].
async fn whitelist(
    client: &Client,
    namespace: &str,
) -> Result<api::CustomWorkloadWhitelist, String> {
    let read =
        kruise_controllers::kruise_configuration::workloadspread_whitelist(client, namespace);
    tokio::time::timeout(CONFIGURATION_DEADLINE, read)
        .await
        .map_err(|_| {
            format!(
                "reading ConfigMap {namespace}/{}: timed out",
                kruise_controllers::kruise_configuration::CONFIGMAP
            )
        })?
}

/// How often the Pods admitted without a subset are reported (one Event per WorkloadSpread at
/// most per period).
const UNPLACED_REPORT_EVERY: std::time::Duration = std::time::Duration::from_secs(10);
/// The reason of that Event.
pub const REASON_ADMITTED_UNPLACED: &str = "PodsAdmittedUnplaced";

/// The Pods of each WorkloadSpread admitted without a subset (placement did not finish within its
/// deadline), gathered and published as one Warning Event per WorkloadSpread every
/// [`UNPLACED_REPORT_EVERY`], so that a burst is one Event saying how many, not one per Pod.
#[derive(Default)]
pub struct UnplacedReport {
    recorder: Option<kruise_controllers::events::EventRecorder>,
    counts: std::sync::Mutex<
        std::collections::BTreeMap<
            (String, String),
            (usize, k8s_openapi::api::core::v1::ObjectReference),
        >,
    >,
    publishing: std::sync::atomic::AtomicBool,
}

impl UnplacedReport {
    fn new(client: Option<Client>) -> Self {
        Self {
            recorder: client
                .map(|c| kruise_controllers::driver::recorder(c, "workloadspread-webhook")),
            ..Default::default()
        }
    }

    /// Counts one Pod of `ws` admitted without a subset; the first of a period starts its report.
    fn count(self: &Arc<Self>, ws: &WorkloadSpread) {
        let key = (ws.namespace().unwrap_or_default(), ws.name_any());
        {
            let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
            counts
                .entry(key)
                .or_insert_with(|| (0, kube::Resource::object_ref(ws, &())))
                .0 += 1;
        }
        if self.recorder.is_some()
            && !self
                .publishing
                .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            let this = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(UNPLACED_REPORT_EVERY).await;
                this.publishing
                    .store(false, std::sync::atomic::Ordering::SeqCst);
                this.publish().await;
            });
        }
    }

    /// Takes the counts gathered so far.
    fn take(&self) -> Vec<(usize, k8s_openapi::api::core::v1::ObjectReference)> {
        std::mem::take(&mut *self.counts.lock().unwrap_or_else(|e| e.into_inner()))
            .into_values()
            .collect()
    }

    async fn publish(&self) {
        let Some(recorder) = &self.recorder else {
            return;
        };
        for (count, regarding) in self.take() {
            recorder
                .record(
                    &regarding,
                    kube::runtime::events::EventType::Warning,
                    REASON_ADMITTED_UNPLACED,
                    unplaced_note(count),
                )
                .await;
        }
    }
}

/// What the Event says of `count` Pods admitted without a subset.
fn unplaced_note(count: usize) -> String {
    let pods = if count == 1 { "Pod was" } else { "Pods were" };
    format!(
        "{count} {pods} admitted without a subset: placement did not finish within the Pod webhook's deadline; the controller records each in the subset of the node it runs on"
    )
}

/// A random id in the UUID text form, for a Pod that has no name yet.
fn generated_uid() -> String {
    let n: u128 = rand::random();
    let hex = format!("{n:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testreview::Review;
    use serde_json::{Value, json};

    fn review(operation: &str, object: Value) -> AdmissionReview<DynamicObject> {
        Review::of(
            "apps.kruise.io",
            "v1alpha1",
            "WorkloadSpread",
            "workloadspreads",
        )
        .operation(operation)
        .namespace("ns")
        .object(object)
        .name("ws")
        .build()
    }

    fn spread(subsets: Value) -> Value {
        json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "WorkloadSpread",
            "metadata": {"name": "ws", "namespace": "ns"},
            "spec": {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "subsets": subsets}
        })
    }

    #[tokio::test]
    async fn validation_answers() {
        let hooks = WorkloadSpreads::new(None, None, Duration::from_secs(3));
        let ok = hooks
            .validate(
                review(
                    "CREATE",
                    spread(json!([{"name": "a", "maxReplicas": 2}, {"name": "b"}])),
                ),
                true,
            )
            .await;
        assert!(ok.allowed);
        let bad = hooks
            .validate(review("CREATE", spread(json!([{"name": "a", "maxReplicas": 2}, {"name": "b", "maxReplicas": "50%"}]))), true)
            .await;
        assert!(!bad.allowed);
        let message =
            serde_json::to_value(&bad.review).expect("json")["response"]["status"]["message"]
                .clone();
        assert!(
            message
                .as_str()
                .is_some_and(|m| m.contains("spec.subsets[1].maxReplicas")),
            "{message}"
        );
        let off = hooks
            .validate(review("CREATE", spread(json!([{"name": "a"}]))), false)
            .await;
        assert!(!off.allowed);
    }

    #[tokio::test]
    async fn pods_admitted_unplaced_are_counted_per_workloadspread() {
        let report = Arc::new(UnplacedReport::new(None));
        let ws = |name: &str| -> WorkloadSpread {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "apps.kruise.io/v1alpha1", "kind": "WorkloadSpread",
                "metadata": {"name": name, "namespace": "ns", "uid": format!("u-{name}")},
                "spec": {"subsets": [{"name": "a"}]}
            }))
            .expect("ws")
        };
        report.count(&ws("a"));
        report.count(&ws("b"));
        report.count(&ws("a"));
        let counts: Vec<(usize, Option<String>)> = report
            .take()
            .into_iter()
            .map(|(n, r)| (n, r.name))
            .collect();
        assert_eq!(counts, [(2, Some("a".into())), (1, Some("b".into()))]);
        assert!(report.take().is_empty(), "taken once");
        assert!(unplaced_note(2).starts_with("2 Pods were admitted without a subset"));
        assert!(unplaced_note(1).starts_with("1 Pod was admitted"));
    }

    #[test]
    fn generated_uids_look_like_uuids() {
        let uid = generated_uid();
        assert_eq!(uid.len(), 36);
        assert_eq!(uid.matches('-').count(), 4);
        assert_ne!(uid, generated_uid());
    }

    /// A Pod of the target CloneSet is placed in the first subset with room (from the watch cache,
    /// no apiserver): affinity, patch and annotation; a Pod the target filter leaves out is not.
    #[tokio::test]
    async fn pods_of_the_target_are_placed_from_the_cache() {
        let (store, mut writer) = kube::runtime::reflector::store::<WorkloadSpread>();
        let mut ws: WorkloadSpread = serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "WorkloadSpread",
            "metadata": {"name": "ws", "namespace": "ns", "resourceVersion": "7", "uid": "w1"},
            "spec": {
                "targetRef": {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": "web"},
                "targetFilter": {"selector": {"matchLabels": {"role": "worker"}}},
                "subsets": [
                    {"name": "a", "maxReplicas": 1, "requiredNodeSelectorTerm": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}},
                    {"name": "b", "patch": {"metadata": {"labels": {"zone": "b"}}}}
                ]
            }
        }))
        .expect("ws");
        let mut status = api::WorkloadSpreadStatus::default();
        status.versioned_subset_statuses.insert(
            api::VERSION_IGNORED.into(),
            vec![
                api::WorkloadSpreadSubsetStatus {
                    name: "a".into(),
                    missing_replicas: 0,
                    ..Default::default()
                },
                api::WorkloadSpreadSubsetStatus {
                    name: "b".into(),
                    missing_replicas: -1,
                    ..Default::default()
                },
            ],
        );
        ws.status = Some(status);
        use kube::runtime::watcher::Event;
        for event in [Event::Init, Event::InitApply(ws), Event::InitDone] {
            writer.apply_watcher_event(&event);
        }
        let hooks = WorkloadSpreads::new(None, Some(store), Duration::from_secs(3));
        let pod = |role: &str| -> Pod {
            serde_json::from_value(json!({
                "metadata": {"name": "web-1", "namespace": "ns", "labels": {"role": role}, "ownerReferences": [
                    {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": "web", "uid": "u", "controller": true}
                ]},
                "spec": {"containers": [{"name": "c", "image": "i"}]}
            }))
            .expect("pod")
        };
        let placed = hooks
            .place(&pod("worker"), "ns", tokio::time::Instant::now())
            .await
            .expect("decided")
            .expect("placed");
        let v = serde_json::to_value(&placed).expect("json");
        assert_eq!(
            v["metadata"]["labels"]["zone"], "b",
            "subset a is full: b's patch"
        );
        assert_eq!(
            v["metadata"]["annotations"][api::ANNOTATION_MATCHED],
            r#"{"name":"ws","subset":"b"}"#
        );
        assert!(
            matches!(
                hooks
                    .place(&pod("ps"), "ns", tokio::time::Instant::now())
                    .await,
                Ok(None)
            ),
            "filtered out"
        );
    }

    #[tokio::test]
    async fn pods_of_other_workloads_are_left_alone() {
        let hooks = WorkloadSpreads::new(None, None, Duration::from_secs(3));
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u", "controller": true}
            ]},
            "spec": {"containers": [{"name": "c", "image": "i"}]}
        }))
        .expect("pod");
        assert!(matches!(
            hooks.place(&pod, "ns", tokio::time::Instant::now()).await,
            Ok(None)
        ));
    }
}
