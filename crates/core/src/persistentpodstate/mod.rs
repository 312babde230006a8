//! PersistentPodState decisions, pure: what to record of a ready Pod and its Node, which records a
//! scaled-down or deleted workload drops, the node affinity a recreated Pod gets from its record,
//! and the PersistentPodState a workload's `kruise.io/*-persistent-*` annotations ask for.
//!
//! Semantics of OpenKruise v1.9.0 (`pkg/controller/persistentpodstate`,
//! `pkg/webhook/pod/mutating/persistent_pod_state.go`):
//! - a Pod is recorded once it is ready and bound; its record is rewritten only when it moved to
//!   another node or the keys to record changed;
//! - with retention `WhenScaled` (the default), the record of a Pod whose ordinal is no longer one
//!   of the workload's replicas is dropped once that Pod is gone; `WhenDeleted` keeps it;
//! - a workload gone or being deleted leaves no record;
//! - a Pod created with a record gets the recorded required labels as `nodeSelector` entries and
//!   one preferred node-affinity term per preferred term (weight kept).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    Affinity, NodeAffinity, NodeSelectorRequirement, NodeSelectorTerm, Pod, PreferredSchedulingTerm,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kruise_api::persistentpodstate::{
    self as api, NodeTopologyTerm, PersistentPodAnnotation, PersistentPodState,
    PersistentPodStateSpec, PersistentPodStateStatus, PodState, PreferredTopologyTerm,
    TargetReference,
};
use serde_json::{Map, Value};

use crate::rollout::statefulset::{Reserved, slot_ordinals};

/// The node label keys a spec records: the required ones and every preferred term's.
pub fn topology_keys(spec: &PersistentPodStateSpec) -> BTreeSet<String> {
    spec.required_persistent_topology
        .iter()
        .flat_map(|t| t.node_topology_keys.iter())
        .chain(
            spec.preferred_persistent_topology
                .iter()
                .flat_map(|t| t.preference.node_topology_keys.iter()),
        )
        .cloned()
        .collect()
}

/// The Pod annotation keys a spec records.
pub fn annotation_keys(spec: &PersistentPodStateSpec) -> BTreeSet<String> {
    spec.persistent_pod_annotations
        .iter()
        .map(|a| a.key.clone())
        .collect()
}

/// What the controller sees of one Pod of the workload (active Pods only).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ObservedPod {
    pub name: String,
    pub ready: bool,
    /// `spec.nodeName`, empty when unbound.
    pub node_name: String,
    pub annotations: BTreeMap<String, String>,
}

/// What the controller sees of the target workload.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ObservedWorkload {
    /// `spec.replicas` (or the scale).
    pub replicas: i32,
    /// The first ordinal (`spec.ordinals.start`, 0 when unset).
    pub start: i32,
    /// `spec.reserveOrdinals` (Advanced StatefulSet).
    pub reserved: Reserved,
    /// The workload has a deletionTimestamp.
    pub deleting: bool,
}

/// The record of `pod` on a node labelled `node_labels`: the node's value of each topology key it
/// has, the Pod's value of each annotation key it has.
pub fn record(
    pod: &ObservedPod,
    node_labels: &BTreeMap<String, String>,
    topology: &BTreeSet<String>,
    annotations: &BTreeSet<String>,
) -> PodState {
    PodState {
        node_name: pod.node_name.clone(),
        node_topology_labels: topology
            .iter()
            .filter_map(|k| node_labels.get(k).map(|v| (k.clone(), v.clone())))
            .collect(),
        annotations: annotations
            .iter()
            .filter_map(|k| pod.annotations.get(k).map(|v| (k.clone(), v.clone())))
            .collect(),
    }
}

/// Whether the record `old` of a Pod now on `node_name` must be written again: the Pod moved, or
/// the keys recorded are not the keys asked for.
pub fn stale(
    old: &PodState,
    node_name: &str,
    topology: &BTreeSet<String>,
    annotations: &BTreeSet<String>,
) -> bool {
    old.node_name != node_name
        || !old.node_topology_labels.keys().eq(topology.iter())
        || !old.annotations.keys().eq(annotations.iter())
}

/// The ordinal of a Pod name: the number after its last `-` (upstream's parse; `None` when that is
/// not a number).
pub fn ordinal(pod_name: &str) -> Option<i64> {
    let (_, digits) = pod_name.rsplit_once('-')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The status the controller writes: `workload` `None` when the target is gone (no records);
/// `node_labels` gives the labels of a cached Node (`None`: not known, the Pod is not recorded
/// this time).
pub fn next_status<'a>(
    pps: &PersistentPodState,
    workload: Option<&ObservedWorkload>,
    pods: &[ObservedPod],
    node_labels: impl Fn(&str) -> Option<&'a BTreeMap<String, String>>,
) -> PersistentPodStateStatus {
    let generation = pps.metadata.generation.unwrap_or_default();
    let Some(workload) = workload.filter(|w| !w.deleting) else {
        return PersistentPodStateStatus {
            observed_generation: generation,
            pod_states: BTreeMap::new(),
        };
    };
    let mut states = pps
        .status
        .as_ref()
        .map(|s| s.pod_states.clone())
        .unwrap_or_default();
    let topology = topology_keys(&pps.spec);
    let annotations = annotation_keys(&pps.spec);
    for pod in pods {
        if !pod.ready || pod.node_name.is_empty() {
            continue;
        }
        if states
            .get(&pod.name)
            .is_some_and(|old| !stale(old, &pod.node_name, &topology, &annotations))
        {
            continue;
        }
        let Some(labels) = node_labels(&pod.node_name) else {
            continue;
        };
        states.insert(
            pod.name.clone(),
            record(pod, labels, &topology, &annotations),
        );
    }
    if pps.spec.persistent_pod_state_retention_policy != api::RETENTION_WHEN_DELETED {
        let slots: BTreeSet<i64> =
            slot_ordinals(workload.start, workload.replicas, &workload.reserved)
                .into_iter()
                .map(i64::from)
                .collect();
        let present: BTreeSet<&str> = pods.iter().map(|p| p.name.as_str()).collect();
        states.retain(|name, _| match ordinal(name) {
            // A name that is no ordinal is kept, as upstream does.
            None => true,
            Some(index) => slots.contains(&index) || present.contains(name.as_str()),
        });
    }
    PersistentPodStateStatus {
        observed_generation: generation,
        pod_states: states,
    }
}

/// The body of a JSON merge patch (RFC 7386) turning `old` into `new`: changed values, and `null`
/// for every key `old` has and `new` lacks, at every depth (a record that lost a label loses it on
/// the server too). `None` when they are equal.
pub fn merge_diff(old: &Value, new: &Value) -> Option<Value> {
    match (old, new) {
        (Value::Object(old), Value::Object(new)) => {
            let mut patch = Map::new();
            for (key, value) in new {
                match old.get(key) {
                    Some(before) => {
                        if let Some(change) = merge_diff(before, value) {
                            patch.insert(key.clone(), change);
                        }
                    }
                    None => {
                        patch.insert(key.clone(), value.clone());
                    }
                }
            }
            for key in old.keys() {
                if !new.contains_key(key) {
                    patch.insert(key.clone(), Value::Null);
                }
            }
            (!patch.is_empty()).then_some(Value::Object(patch))
        }
        _ if old == new => None,
        _ => Some(new.clone()),
    }
}

/// The node affinity of a record: the recorded value of each required key (as `nodeSelector`
/// entries) and, per preferred term, a term of the same weight requiring each recorded key's
/// value (`In`).
pub fn affinity(
    spec: &PersistentPodStateSpec,
    state: &PodState,
) -> (BTreeMap<String, String>, Vec<PreferredSchedulingTerm>) {
    let required = spec
        .required_persistent_topology
        .iter()
        .flat_map(|t| t.node_topology_keys.iter())
        .filter_map(|k| {
            state
                .node_topology_labels
                .get(k)
                .map(|v| (k.clone(), v.clone()))
        })
        .collect();
    let preferred = spec
        .preferred_persistent_topology
        .iter()
        .map(|term| {
            let expressions: Vec<NodeSelectorRequirement> = term
                .preference
                .node_topology_keys
                .iter()
                .filter_map(|k| {
                    state
                        .node_topology_labels
                        .get(k)
                        .map(|v| NodeSelectorRequirement {
                            key: k.clone(),
                            operator: "In".into(),
                            values: Some(vec![v.clone()]),
                        })
                })
                .collect();
            PreferredSchedulingTerm {
                weight: term.weight,
                preference: NodeSelectorTerm {
                    match_expressions: (!expressions.is_empty()).then_some(expressions),
                    match_fields: None,
                },
            }
        })
        .collect();
    (required, preferred)
}

/// The controlling owner of a Pod as a target reference.
pub fn controller_ref(pod: &Pod) -> Option<TargetReference> {
    pod.metadata
        .owner_references
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| TargetReference {
            api_version: o.api_version.clone(),
            kind: o.kind.clone(),
            name: o.name.clone(),
        })
}

/// The PersistentPodState of `pod`'s controller among `candidates` (those of its namespace): the
/// first one not being deleted whose target is the same workload.
pub fn select<'a>(
    candidates: impl IntoIterator<Item = &'a PersistentPodState>,
    owner: &TargetReference,
) -> Option<&'a PersistentPodState> {
    candidates.into_iter().find(|pps| {
        pps.metadata.deletion_timestamp.is_none()
            && api::same_workload(&pps.spec.target_reference, owner)
    })
}

/// Injects the record of `pod` kept by `pps` (the Pod webhook, at creation): the required
/// topology into `nodeSelector`, the preferred terms appended to the preferred node affinity, and
/// the annotation naming `pps`. Whether the Pod changed (nothing is done without a record with
/// topology labels, or when the spec asks for no term the record can fill).
pub fn inject(pod: &mut Pod, pps: &PersistentPodState) -> bool {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let Some(state) = pps
        .status
        .as_ref()
        .and_then(|s| s.pod_states.get(name))
        .filter(|s| !s.node_topology_labels.is_empty())
    else {
        return false;
    };
    let (required, preferred) = affinity(&pps.spec, state);
    if required.is_empty() && preferred.is_empty() {
        return false;
    }
    pod.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(
            api::ANNOTATION_INJECTED.into(),
            pps.metadata.name.clone().unwrap_or_default(),
        );
    let spec = pod.spec.get_or_insert_with(Default::default);
    if !required.is_empty() {
        spec.node_selector
            .get_or_insert_with(BTreeMap::new)
            .extend(required);
    }
    if !preferred.is_empty() {
        spec.affinity
            .get_or_insert_with(Affinity::default)
            .node_affinity
            .get_or_insert_with(NodeAffinity::default)
            .preferred_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .extend(preferred);
    }
    true
}

/// A workload as the auto-generation sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload<'a> {
    pub api_version: &'a str,
    pub kind: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
    pub annotations: &'a BTreeMap<String, String>,
}

/// What the workload's annotations ask of its generated PersistentPodState.
#[derive(Clone, Debug, PartialEq)]
pub enum Generation {
    /// The PersistentPodState of this name and spec must exist (created, or its spec replaced).
    Keep(Box<PersistentPodState>),
    /// Auto-generation is on but neither topology annotation is set: nothing is done.
    Incomplete,
    /// Auto-generation is off: the generated PersistentPodState, if any, is deleted.
    Remove,
}

/// Whether annotations ask for generation with at least one topology (upstream's create filter).
pub fn wants_generation(annotations: &BTreeMap<String, String>) -> bool {
    let set = |k: &str| annotations.get(k).is_some_and(|v| !v.is_empty());
    annotations
        .get(api::ANNOTATION_AUTO_GENERATE)
        .map(String::as_str)
        == Some("true")
        && (set(api::ANNOTATION_REQUIRED_TOPOLOGY) || set(api::ANNOTATION_PREFERRED_TOPOLOGY))
}

/// The annotations auto-generation reads, for change detection.
pub fn generation_annotations(annotations: &BTreeMap<String, String>) -> [Option<&String>; 4] {
    [
        annotations.get(api::ANNOTATION_AUTO_GENERATE),
        annotations.get(api::ANNOTATION_REQUIRED_TOPOLOGY),
        annotations.get(api::ANNOTATION_PREFERRED_TOPOLOGY),
        annotations.get(api::ANNOTATION_PERSISTENT_POD_ANNOTATIONS),
    ]
}

fn split(value: &str) -> Vec<String> {
    value.split(',').map(str::to_owned).collect()
}

/// The PersistentPodState the annotations of `workload` ask for: named as the workload,
/// controlled by it (so it goes with it), its target the workload; required topology from
/// `kruise.io/required-persistent-topology`, one preferred term of weight 100 from
/// `kruise.io/preferred-persistent-topology`, recorded annotations from
/// `kruise.io/persistent-pod-annotations` (each comma-separated).
pub fn generation(workload: &Workload) -> Generation {
    let annotations = workload.annotations;
    if annotations
        .get(api::ANNOTATION_AUTO_GENERATE)
        .map(String::as_str)
        != Some("true")
    {
        return Generation::Remove;
    }
    if !wants_generation(annotations) {
        return Generation::Incomplete;
    }
    let value = |k: &str| annotations.get(k).filter(|v| !v.is_empty());
    let spec = PersistentPodStateSpec {
        target_reference: TargetReference {
            api_version: workload.api_version.into(),
            kind: workload.kind.into(),
            name: workload.name.into(),
        },
        persistent_pod_annotations: value(api::ANNOTATION_PERSISTENT_POD_ANNOTATIONS)
            .map(|v| {
                split(v)
                    .into_iter()
                    .map(|key| PersistentPodAnnotation { key })
                    .collect()
            })
            .unwrap_or_default(),
        required_persistent_topology: value(api::ANNOTATION_REQUIRED_TOPOLOGY).map(|v| {
            NodeTopologyTerm {
                node_topology_keys: split(v),
            }
        }),
        preferred_persistent_topology: value(api::ANNOTATION_PREFERRED_TOPOLOGY)
            .map(|v| {
                vec![PreferredTopologyTerm {
                    weight: api::GENERATED_PREFERRED_WEIGHT,
                    preference: NodeTopologyTerm {
                        node_topology_keys: split(v),
                    },
                }]
            })
            .unwrap_or_default(),
        persistent_pod_state_retention_policy: String::new(),
    };
    Generation::Keep(Box::new(PersistentPodState {
        metadata: ObjectMeta {
            name: Some(workload.name.into()),
            namespace: Some(workload.namespace.into()),
            owner_references: Some(vec![OwnerReference {
                api_version: workload.api_version.into(),
                kind: workload.kind.into(),
                name: workload.name.into(),
                uid: workload.uid.into(),
                controller: Some(true),
                block_owner_deletion: None,
            }]),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    }))
}

/// The spec to write over `existing`, the PersistentPodState of the workload's name, so that it is
/// what `wanted` (from [`generation`]) asks; `None` when it already is. The retention policy is
/// the existing one's: the annotations cannot express it, and a user who set it keeps it.
pub fn spec_update(
    existing: &PersistentPodState,
    wanted: &PersistentPodState,
) -> Option<PersistentPodStateSpec> {
    let mut spec = wanted.spec.clone();
    spec.persistent_pod_state_retention_policy
        .clone_from(&existing.spec.persistent_pod_state_retention_policy);
    (spec != existing.spec).then_some(spec)
}

/// Whether `pps` is controlled by the workload of uid `uid` (the only PersistentPodState
/// auto-generation deletes: one a user made under the same name stays).
pub fn controlled_by(pps: &PersistentPodState, uid: &str) -> bool {
    pps.metadata
        .owner_references
        .as_deref()
        .unwrap_or_default()
        .iter()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

#[cfg(test)]
mod tests;
