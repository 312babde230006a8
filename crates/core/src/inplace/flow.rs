//! The update itself, one step per call (upstream `inplace_update.go`, `Update` and `Refresh`): drain,
//! wait out the grace period,
//! resize, patch.
//!
//! Every patch that drains a Pod or restarts a container is a JSON patch whose first op tests
//! `metadata.resourceVersion`, so it applies only to the exact Pod the decision was made on. A stale
//! cache can therefore never restart a container whose Pod has meanwhile become Ready again
//! (kruise#2276): the API server rejects the patch and the caller decides again on a fresh Pod. The
//! patch that finishes an update ([`finish_patch`]) tests the fields its decision rests on instead,
//! so that the kubelet's status writes of the same moment do not void it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use json_patch::jsonptr::PointerBuf;
use json_patch::{
    AddOperation, Patch, PatchOperation, RemoveOperation, ReplaceOperation, TestOperation,
};
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kruise_api::keys;
use kruise_api::quantity::Quantity as ParsedQuantity;
use serde_json::{Value, json};

use super::batches::{container_priorities, first_batch};
use super::plan::InPlacePlan;
use super::state::{InPlaceUpdateState, annotation};
use crate::pods::{self, LifecycleState};

/// Reason on `InPlaceUpdateReady=False` (upstream's value).
pub const REASON_START_IN_PLACE_UPDATE: &str = "StartInPlaceUpdate";
/// Reason on `Ready=False` while a readiness gate is not True (the kubelet's value).
pub use kruise_api::keys::REASON_READINESS_GATES_NOT_READY;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FlowError {
    #[error("the Pod has no resourceVersion to guard the patch with")]
    NoResourceVersion,
    #[error("container {0} is not in the Pod")]
    ContainerNotInPod(String),
    #[error("cannot encode the in-place update state: {0}")]
    Encode(String),
}

/// The revision being applied and the labels that record it on the Pod (workload specific: CloneSet
/// writes `controller-revision-hash` and `pod-template-hash`).
#[derive(Clone, Debug, PartialEq)]
pub struct Target<'a> {
    pub revision: &'a str,
    pub revision_labels: &'a BTreeMap<String, String>,
}

/// What the caller does next. Each patch may fail on a resourceVersion mismatch; then the caller
/// re-reads the Pod and calls [`next_step`] again.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// JSON patch for the `status` subresource: `InPlaceUpdateReady=False` and, if it is True, `Ready=False`.
    MarkUnready(Patch),
    /// Traffic is being drained: look again after this long.
    Wait(Duration),
    /// JSON patch for the `resize` subresource; call again with the Pod it returns.
    Resize(Patch),
    /// JSON patch for the Pod: images, labels, annotations and the in-place update state.
    Apply(Patch),
}

/// Decides the next step of updating `pod` in place with `plan`.
///
/// When the plan restarts a container and the Pod has the `InPlaceUpdateReady` readiness gate, the
/// condition is set False first, and nothing that restarts a container is sent until it has been
/// False for `grace_seconds` (measured from its `lastTransitionTime`, i.e. from when traffic started
/// to drain) and the Pod is not Ready. Changes that restart nothing skip the drain.
pub fn next_step(
    pod: &Pod,
    plan: &InPlacePlan,
    target: &Target<'_>,
    grace_seconds: i32,
    now: Timestamp,
) -> Result<Step, FlowError> {
    let rv = resource_version(pod)?;
    if plan.restarts_containers && has_readiness_gate(pod) {
        let gate = condition(pod, keys::CONDITION_IN_PLACE_UPDATE_READY);
        let drained_since = gate
            .filter(|c| c.status == "False")
            .and_then(|c| c.last_transition_time.as_ref());
        let ready = condition(pod, "Ready").is_some_and(|c| c.status == "True");
        let Some(since) = drained_since.filter(|_| !ready) else {
            return Ok(Step::MarkUnready(mark_unready_patch(pod, rv, now)));
        };
        let elapsed = now.duration_since(since.0);
        let grace = k8s_openapi::jiff::SignedDuration::from_secs(i64::from(grace_seconds.max(0)));
        if elapsed < grace {
            let remaining = (grace - elapsed).as_secs_f64().ceil();
            return Ok(Step::Wait(Duration::from_secs_f64(remaining)));
        }
    }
    if let Some(patch) = resize_patch(pod, plan, rv)? {
        return Ok(Step::Resize(patch));
    }
    apply_patch(pod, plan, target, rv, now).map(Step::Apply)
}

/// What else changes on a Pod when its in-place update is found complete, written in the same
/// `pods/status` patch as `InPlaceUpdateReady=True` (the status subresource keeps labels and
/// annotations; it resets only the spec, `deletionTimestamp` and owner references).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Finish {
    /// Move the lifecycle state label (and its timestamp annotation) to this state.
    pub lifecycle: Option<LifecycleState>,
    /// Also set `KruisePodReady=True`: a `markPodNotReady` hook took the Pod out of service for
    /// the update, and the state it moves to lets it back.
    pub kruise_pod_ready: bool,
}

/// The one JSON patch for the `status` subresource that finishes a completed update:
/// `InPlaceUpdateReady=True` plus what `finish` asks for. `None` when the Pod has no gate or the
/// condition is already True.
///
/// The patch tests what the decision rests on, not the resourceVersion: the kubelet writes the
/// restarted container's readiness at the very moment the update is found complete, and a
/// resourceVersion test would void the write for that. It tests the state annotation (the same
/// update, which every new update rewrites), each replaced condition's type and status at its index,
/// and the lifecycle label it moves from. Where one of those is absent (a new Pod: no state, no
/// condition, no label), it tests the resourceVersion as well.
pub fn finish_patch(
    pod: &Pod,
    finish: &Finish,
    now: Timestamp,
) -> Result<Option<Patch>, FlowError> {
    if !has_readiness_gate(pod)
        || condition(pod, keys::CONDITION_IN_PLACE_UPDATE_READY).is_some_and(|c| c.status == "True")
    {
        return Ok(None);
    }
    let rv = resource_version(pod)?;
    let mut ops = Vec::new();
    let mut rv_needed = condition(pod, keys::CONDITION_IN_PLACE_UPDATE_READY).is_none();
    match annotation(pod, keys::ANNOTATION_IN_PLACE_UPDATE_STATE) {
        Some(state) => ops.push(test_value(
            ptr([
                "metadata",
                "annotations",
                keys::ANNOTATION_IN_PLACE_UPDATE_STATE,
            ]),
            state,
        )),
        None => rv_needed = true,
    }
    set_condition(
        pod,
        &mut ops,
        keys::CONDITION_IN_PLACE_UPDATE_READY,
        "True",
        "",
        "",
        now,
    );
    if finish.kruise_pod_ready
        && condition(pod, keys::CONDITION_KRUISE_POD_READY).is_none_or(|c| c.status != "True")
    {
        rv_needed |= condition(pod, keys::CONDITION_KRUISE_POD_READY).is_none();
        set_condition(
            pod,
            &mut ops,
            keys::CONDITION_KRUISE_POD_READY,
            "True",
            "",
            "",
            now,
        );
    }
    let current = pods::lifecycle_state(pod);
    if let Some(value) = finish
        .lifecycle
        .filter(|s| *s != current)
        .and_then(crate::lifecycle::state_value)
    {
        let label = ptr(["metadata", "labels", keys::LABEL_LIFECYCLE_STATE]);
        match pods::label(pod, keys::LABEL_LIFECYCLE_STATE) {
            Some(from) => ops.push(test_value(label, from)),
            None => rv_needed = true,
        }
        let stamp = crate::lifecycle::timestamp_value(now);
        let changes = |k: &str, v: String| BTreeMap::from([(k.to_owned(), Some(v))]);
        metadata_ops(
            &mut ops,
            "labels",
            pod.metadata.labels.as_ref(),
            &changes(keys::LABEL_LIFECYCLE_STATE, value.to_owned()),
        );
        metadata_ops(
            &mut ops,
            "annotations",
            pod.metadata.annotations.as_ref(),
            &changes(keys::ANNOTATION_LIFECYCLE_TIMESTAMP, stamp),
        );
    }
    if rv_needed {
        ops.insert(0, test_rv(rv));
    }
    Ok(Some(Patch(ops)))
}

/// JSON patch for the `status` subresource setting a Pod condition (e.g. `KruisePodReady` for a
/// lifecycle hook's markPodNotReady); `None` when it already has that status.
pub fn condition_patch(
    pod: &Pod,
    type_: &str,
    status: &str,
    reason: &str,
    now: Timestamp,
) -> Result<Option<Patch>, FlowError> {
    if condition(pod, type_).is_some_and(|c| c.status == status) {
        return Ok(None);
    }
    let mut ops = vec![test_rv(resource_version(pod)?)];
    set_condition(pod, &mut ops, type_, status, reason, "", now);
    Ok(Some(Patch(ops)))
}

fn resource_version(pod: &Pod) -> Result<&str, FlowError> {
    pod.metadata
        .resource_version
        .as_deref()
        .filter(|rv| !rv.is_empty())
        .ok_or(FlowError::NoResourceVersion)
}

/// Whether the Pod was taken out of service for an in-place update whose spec patch is still to
/// come (it is waiting out its grace period): `InPlaceUpdateReady` False with the reason the drain
/// writes, and no update in flight. A refresh must continue such an update rather than restore the
/// gate, or the Pod goes back into service and the grace period starts over on every reconcile.
pub fn drained_for_update(pod: &Pod) -> bool {
    has_readiness_gate(pod)
        && condition(pod, keys::CONDITION_IN_PLACE_UPDATE_READY).is_some_and(|c| {
            c.status == "False" && c.reason.as_deref() == Some(REASON_START_IN_PLACE_UPDATE)
        })
        && super::check_completed(pod) == super::Completion::Done
}

/// Whether the Pod has the `InPlaceUpdateReady` readiness gate.
pub fn has_readiness_gate(pod: &Pod) -> bool {
    crate::pods::has_readiness_gate(pod, keys::CONDITION_IN_PLACE_UPDATE_READY)
}

fn conditions(pod: &Pod) -> &[PodCondition] {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or(&[])
}

pub(crate) fn condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a PodCondition> {
    conditions(pod).iter().find(|c| c.type_ == type_)
}

fn ptr<'t>(tokens: impl IntoIterator<Item = &'t str>) -> PointerBuf {
    PointerBuf::from_tokens(tokens)
}

fn test_rv(rv: &str) -> PatchOperation {
    test_value(ptr(["metadata", "resourceVersion"]), rv)
}

fn test_value(path: PointerBuf, value: &str) -> PatchOperation {
    PatchOperation::Test(TestOperation {
        path,
        value: Value::String(value.to_owned()),
    })
}

fn add(path: PointerBuf, value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation { path, value })
}

/// Sets a condition, keeping `lastTransitionTime` when the status does not change.
fn set_condition(
    pod: &Pod,
    ops: &mut Vec<PatchOperation>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) {
    let existing = conditions(pod).iter().position(|c| c.type_ == type_);
    let mut new = PodCondition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: (!reason.is_empty()).then(|| reason.to_owned()),
        message: (!message.is_empty()).then(|| message.to_owned()),
        last_transition_time: Some(Time(now)),
        ..PodCondition::default()
    };
    if let Some(old) = existing.map(|i| &conditions(pod)[i]) {
        new.last_probe_time = old.last_probe_time.clone();
        if old.status == status && old.last_transition_time.is_some() {
            new.last_transition_time = old.last_transition_time.clone();
        }
    }
    let value = serde_json::to_value(&new).unwrap_or(Value::Null);
    if let Some(i) = existing {
        // The replace goes by index: it must still be the condition this decision read.
        let index = i.to_string();
        let old = &conditions(pod)[i];
        ops.push(test_value(
            ptr(["status", "conditions", &index, "type"]),
            type_,
        ));
        ops.push(test_value(
            ptr(["status", "conditions", &index, "status"]),
            &old.status,
        ));
    }
    ops.push(match existing {
        Some(i) => PatchOperation::Replace(ReplaceOperation {
            path: ptr(["status", "conditions", &i.to_string()]),
            value,
        }),
        None if pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some() =>
        {
            add(ptr(["status", "conditions", "-"]), value)
        }
        None => add(ptr(["status", "conditions"]), Value::Array(vec![value])),
    });
}

fn mark_unready_patch(pod: &Pod, rv: &str, now: Timestamp) -> Patch {
    let mut ops = vec![test_rv(rv)];
    set_condition(
        pod,
        &mut ops,
        keys::CONDITION_IN_PLACE_UPDATE_READY,
        "False",
        REASON_START_IN_PLACE_UPDATE,
        "",
        now,
    );
    // Ready=False takes the Pod out of Service endpoints now, instead of at the kubelet's next sync,
    // with the kubelet's own reason and message: its next sync then finds Ready as it would write it
    // and has nothing to write.
    if condition(pod, "Ready").is_some_and(|c| c.status == "True") {
        let message =
            keys::readiness_gate_not_true_message(keys::CONDITION_IN_PLACE_UPDATE_READY, "False");
        set_condition(
            pod,
            &mut ops,
            "Ready",
            "False",
            REASON_READINESS_GATES_NOT_READY,
            &message,
            now,
        );
    }
    Patch(ops)
}

fn container_index(pod: &Pod, name: &str) -> Result<usize, FlowError> {
    pod.spec
        .as_ref()
        .and_then(|s| s.containers.iter().position(|c| c.name == name))
        .ok_or_else(|| FlowError::ContainerNotInPod(name.to_owned()))
}

/// The resize patch for the cpu/memory values that still differ on the Pod; `None` once none do.
fn resize_patch(pod: &Pod, plan: &InPlacePlan, rv: &str) -> Result<Option<Patch>, FlowError> {
    let mut ops = Vec::new();
    for (name, change) in &plan.resources {
        let i = container_index(pod, name)?;
        let index = i.to_string();
        let current = pod
            .spec
            .as_ref()
            .and_then(|s| s.containers[i].resources.as_ref());
        for (kind, wanted) in [("limits", &change.limits), ("requests", &change.requests)] {
            let have = current.and_then(|r| {
                if kind == "limits" {
                    r.limits.as_ref()
                } else {
                    r.requests.as_ref()
                }
            });
            let differs: BTreeMap<&String, &_> = wanted
                .iter()
                .filter(|(k, v)| {
                    !have
                        .and_then(|h| h.get(*k))
                        .is_some_and(|h| same_quantity(&h.0, &v.0))
                })
                .collect();
            if differs.is_empty() {
                continue;
            }
            // The API server always serializes `resources` (Go has no omitempty on it), so the
            // container's `resources` object exists even when the typed Pod says None.
            match have {
                Some(_) => {
                    for (k, v) in differs {
                        ops.push(add(
                            ptr(["spec", "containers", &index, "resources", kind, k]),
                            json!(v),
                        ));
                    }
                }
                None => ops.push(add(
                    ptr(["spec", "containers", &index, "resources", kind]),
                    json!(differs),
                )),
            }
        }
    }
    if ops.is_empty() {
        return Ok(None);
    }
    ops.insert(0, test_rv(rv));
    Ok(Some(Patch(ops)))
}

pub(crate) fn same_quantity(a: &str, b: &str) -> bool {
    match (ParsedQuantity::parse(a), ParsedQuantity::parse(b)) {
        (Ok(a), Ok(b)) => a.cmp_value(&b).is_eq(),
        _ => a == b,
    }
}

/// Sets (Some) or removes (None) keys of `metadata.<field>`; a remove is emitted only for a key the
/// Pod has, since removing a missing path fails the whole patch.
fn metadata_ops(
    ops: &mut Vec<PatchOperation>,
    field: &str,
    existing: Option<&BTreeMap<String, String>>,
    changes: &BTreeMap<String, Option<String>>,
) {
    if existing.is_none() && changes.values().any(Option::is_some) {
        ops.push(add(ptr(["metadata", field]), json!({})));
    }
    for (key, value) in changes {
        match value {
            Some(v) => ops.push(add(ptr(["metadata", field, key]), json!(v))),
            None if existing.is_some_and(|m| m.contains_key(key)) => {
                ops.push(PatchOperation::Remove(RemoveOperation {
                    path: ptr(["metadata", field, key]),
                }));
            }
            None => {}
        }
    }
}

fn apply_patch(
    pod: &Pod,
    plan: &InPlacePlan,
    target: &Target<'_>,
    rv: &str,
    now: Timestamp,
) -> Result<Patch, FlowError> {
    let mut ops = vec![test_rv(rv)];
    // Container launch priority: the lower-priority containers (new image or env from metadata) wait
    // for a later batch; one that reads a key a container of this batch changes goes now.
    let changing: BTreeSet<String> = plan
        .images
        .keys()
        .chain(plan.env_from_metadata.keys())
        .cloned()
        .collect();
    let (_, mut later) = first_batch(&changing, &container_priorities(pod));
    pull_shared_metadata(&plan.env_from_metadata, &mut later);
    let later_images: BTreeMap<String, String> = plan
        .images
        .iter()
        .filter(|(name, _)| later.contains(*name))
        .map(|(n, i)| (n.clone(), i.clone()))
        .collect();
    let later_metadata: BTreeMap<String, ObjectMeta> = plan
        .env_from_metadata
        .iter()
        .filter(|(name, _)| later.contains(*name))
        .map(|(n, m)| (n.clone(), m.clone()))
        .collect();
    for (name, image) in plan.images.iter().filter(|(n, _)| !later.contains(*n)) {
        let index = container_index(pod, name)?.to_string();
        ops.push(PatchOperation::Replace(ReplaceOperation {
            path: ptr(["spec", "containers", &index, "image"]),
            value: json!(image),
        }));
    }
    let (now_labels, now_annotations) = batch_metadata(
        plan.env_from_metadata
            .iter()
            .filter(|(name, _)| !later.contains(*name)),
    );

    // Template labels first, then the revision labels, so the revision record always wins.
    let mut labels = plan.labels.clone();
    labels.extend(now_labels);
    labels.extend(
        target
            .revision_labels
            .iter()
            .map(|(k, v)| (k.clone(), Some(v.clone()))),
    );
    metadata_ops(&mut ops, "labels", pod.metadata.labels.as_ref(), &labels);

    let mut state = InPlaceUpdateState::new(target.revision, plan, pod, now);
    state.defer_images(&later_images);
    state.defer_ref_metadata(&later_metadata);
    let state = state
        .to_annotation()
        .map_err(|e| FlowError::Encode(e.to_string()))?;
    let mut annotations = plan.annotations.clone();
    annotations.extend(now_annotations);
    annotations.insert(keys::ANNOTATION_IN_PLACE_UPDATE_STATE.into(), Some(state));
    // An unapplied OpenKruise grace spec and the legacy state key are superseded by this update.
    for key in [
        keys::ANNOTATION_IN_PLACE_UPDATE_STATE_OLD,
        keys::ANNOTATION_IN_PLACE_UPDATE_GRACE,
        keys::ANNOTATION_IN_PLACE_UPDATE_GRACE_OLD,
    ] {
        if annotation(pod, key).is_some() {
            annotations.insert(key.into(), None);
        }
    }
    metadata_ops(
        &mut ops,
        "annotations",
        pod.metadata.annotations.as_ref(),
        &annotations,
    );
    Ok(Patch(ops))
}

/// JSON patch starting the next batch of an in-place update (container launch priority): the images
/// of the highest-priority containers left in `nextContainerImages`, and the state recording them;
/// `None` until [`super::next_batch_due`] says the batch in flight is done and Ready.
pub fn next_batch_patch(pod: &Pod, now: Timestamp) -> Result<Option<Patch>, FlowError> {
    if !super::next_batch_due(pod) {
        return Ok(None);
    }
    let Some(Ok(mut state)) = super::read_state(pod) else {
        return Ok(None);
    };
    let rv = resource_version(pod)?;
    let waiting: BTreeSet<String> = state
        .next_container_images
        .keys()
        .chain(state.next_container_ref_metadata.keys())
        .cloned()
        .collect();
    let (batch, _) = first_batch(&waiting, &container_priorities(pod));
    let mut later: BTreeSet<String> = waiting.difference(&batch).cloned().collect();
    pull_shared_metadata(&state.next_container_ref_metadata, &mut later);
    let batch: BTreeSet<String> = waiting.difference(&later).cloned().collect();
    let mut ops = vec![test_rv(rv)];
    for name in batch
        .iter()
        .filter(|n| state.next_container_images.contains_key(*n))
    {
        let index = container_index(pod, name)?.to_string();
        ops.push(PatchOperation::Replace(ReplaceOperation {
            path: ptr(["spec", "containers", &index, "image"]),
            value: json!(state.next_container_images[name]),
        }));
    }
    let (labels, mut annotations) = batch_metadata(
        state
            .next_container_ref_metadata
            .iter()
            .filter(|(name, _)| batch.contains(*name)),
    );
    metadata_ops(&mut ops, "labels", pod.metadata.labels.as_ref(), &labels);
    state.start_next_batch(&batch, pod, now);
    let encoded = state
        .to_annotation()
        .map_err(|e| FlowError::Encode(e.to_string()))?;
    annotations.insert(
        keys::ANNOTATION_IN_PLACE_UPDATE_STATE.to_string(),
        Some(encoded),
    );
    metadata_ops(
        &mut ops,
        "annotations",
        pod.metadata.annotations.as_ref(),
        &annotations,
    );
    Ok(Some(Patch(ops)))
}

/// Moves out of `later` every container whose env reads a key that a container updated now changes
/// (upstream `addMetadataSharedContainersToUpdate`): a Pod label has one value, so all its readers
/// restart together.
fn pull_shared_metadata(refs: &BTreeMap<String, ObjectMeta>, later: &mut BTreeSet<String>) {
    loop {
        let now_keys: BTreeSet<(bool, &String)> = refs
            .iter()
            .filter(|(name, _)| !later.contains(*name))
            .flat_map(|(_, m)| meta_keys(m))
            .collect();
        let shared: Vec<String> = later
            .iter()
            .filter(|name| {
                refs.get(*name)
                    .is_some_and(|m| meta_keys(m).any(|k| now_keys.contains(&k)))
            })
            .cloned()
            .collect();
        if shared.is_empty() {
            return;
        }
        for name in shared {
            later.remove(&name);
        }
    }
}

/// The (is-label, key) pairs of a container's env-from-metadata change.
fn meta_keys(m: &ObjectMeta) -> impl Iterator<Item = (bool, &String)> {
    let labels = m.labels.iter().flatten().map(|(k, _)| (true, k));
    let annotations = m.annotations.iter().flatten().map(|(k, _)| (false, k));
    labels.chain(annotations)
}

type MetadataChanges = BTreeMap<String, Option<String>>;

/// The labels and annotations the given containers' env-from-metadata changes set.
fn batch_metadata<'a>(
    refs: impl Iterator<Item = (&'a String, &'a ObjectMeta)>,
) -> (MetadataChanges, MetadataChanges) {
    let (mut labels, mut annotations) = (BTreeMap::new(), BTreeMap::new());
    for (_, m) in refs {
        for (k, v) in m.labels.iter().flatten() {
            labels.insert(k.clone(), Some(v.clone()));
        }
        for (k, v) in m.annotations.iter().flatten() {
            annotations.insert(k.clone(), Some(v.clone()));
        }
    }
    (labels, annotations)
}
