//! ResourceDistribution's decisions, as pure functions: which namespaces a distribution's targets
//! select, what to do with the copy in each namespace, the copy to write, and the status.
//!
//! Upstream (`pkg/controller/resourcedistribution`): the matched namespaces are the union of every
//! namespace (`allNamespaces`) or the included list (named namespaces count even when they do not
//! exist: they are reported as `NamespaceNotExists`) and, unless `allNamespaces`, those a non-empty
//! label selector selects; the excluded list is then taken out. Every other existing namespace is
//! unmatched: a copy the distribution controls there is deleted.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::ByteString;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kruise_api::resourcedistribution::{
    self as rd, ResourceDistributionCondition, ResourceDistributionStatus,
    ResourceDistributionTargets,
};
use kruise_api::validation::{selector_is_empty, selector_matches};
use serde_json::{Map, Value, json};

/// The namespaces a distribution selects, and the existing ones it does not.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Targeting {
    pub matched: BTreeSet<String>,
    pub unmatched: BTreeSet<String>,
}

/// Splits the namespaces (`name → labels`, every namespace of the cluster) by `targets`.
pub fn target<'a>(
    targets: &ResourceDistributionTargets,
    namespaces: impl IntoIterator<Item = (&'a str, &'a BTreeMap<String, String>)>,
) -> Targeting {
    let selector = &targets.namespace_label_selector;
    let use_selector = !targets.all_namespaces && !selector_is_empty(selector);
    let mut matched: BTreeSet<String> = if targets.all_namespaces {
        BTreeSet::new()
    } else {
        targets
            .included_namespaces
            .names()
            .map(str::to_owned)
            .collect()
    };
    let mut existing = BTreeSet::new();
    for (name, labels) in namespaces {
        existing.insert(name.to_owned());
        if targets.all_namespaces || (use_selector && selector_matches(selector, labels)) {
            matched.insert(name.to_owned());
        }
    }
    for name in targets.excluded_namespaces.names() {
        matched.remove(name);
    }
    let unmatched = existing.difference(&matched).cloned().collect();
    Targeting { matched, unmatched }
}

/// Whether a distribution named `name` would select the namespace `namespace` with `labels` (which
/// exists): the test that wakes distributions when a namespace appears or changes.
pub fn selects(
    targets: &ResourceDistributionTargets,
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> bool {
    target(targets, [(namespace, labels)])
        .matched
        .contains(namespace)
}

/// What is in a namespace where a copy belongs (or used to).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Existing {
    /// The namespace does not exist or is terminating.
    NoNamespace,
    /// No object of the resource's kind and name.
    Absent,
    /// A copy this distribution controls; `current`: content and hash as desired.
    Owned { current: bool },
    /// An object of the same kind and name that this distribution does not control.
    Foreign,
}

/// What to do in a namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Create,
    Update,
    Delete,
    Nothing,
    /// Matched, but the namespace does not exist: reported (`NamespaceNotExists`).
    ReportNoNamespace,
    /// Matched, but an object not controlled by the distribution is there: reported
    /// (`ConflictOccurred`), left alone.
    ReportConflict,
}

/// The step for a namespace the targets select.
pub fn distribute(existing: Existing) -> Step {
    match existing {
        Existing::NoNamespace => Step::ReportNoNamespace,
        Existing::Absent => Step::Create,
        Existing::Owned { current: true } => Step::Nothing,
        Existing::Owned { current: false } => Step::Update,
        Existing::Foreign => Step::ReportConflict,
    }
}

/// The step for an existing namespace the targets do not select: only a copy the distribution
/// controls is deleted.
pub fn clean(existing: Existing) -> Step {
    match existing {
        Existing::Owned { .. } => Step::Delete,
        _ => Step::Nothing,
    }
}

/// Whether `owners` name the distribution `name` as controller (upstream compares apiVersion, kind
/// and name of the controller reference).
pub fn controlled_by(owners: &[OwnerReference], name: &str) -> bool {
    owners.iter().any(|o| {
        o.controller == Some(true)
            && o.api_version == rd::API_VERSION
            && o.kind == rd::KIND
            && o.name == name
    })
}

/// The resource as the apiserver stores it, for comparison and writing: a Secret's `stringData`
/// folded into `data` (base64) and its `type` defaulted to `Opaque`, as the apiserver does, so a
/// copy of a source with `stringData` is not rewritten on every pass.
pub fn normalized(resource: &Value) -> Value {
    let mut resource = resource.clone();
    let Some(object) = resource.as_object_mut() else {
        return resource;
    };
    if object.get("kind").and_then(Value::as_str) == Some("Secret") {
        if let Some(Value::Object(strings)) = object.remove("stringData") {
            let data = object
                .entry("data")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Some(data) = data.as_object_mut() {
                for (key, value) in strings {
                    let text = value.as_str().unwrap_or_default().as_bytes().to_vec();
                    let encoded = serde_json::to_value(ByteString(text)).unwrap_or(Value::Null);
                    data.insert(key, encoded);
                }
            }
        }
        object
            .entry("type")
            .or_insert_with(|| Value::String("Opaque".into()));
    }
    resource
}

/// The fields compared between a copy and its source: all but `metadata` and `status` (and the
/// type fields, the same by construction).
fn content(object: &Value) -> BTreeMap<&str, &Value> {
    object
        .as_object()
        .map(|o| {
            o.iter()
                .filter(|(k, _)| {
                    !matches!(k.as_str(), "metadata" | "status" | "apiVersion" | "kind")
                })
                .map(|(k, v)| (k.as_str(), v))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether the copy `existing` has the content of `resource` (normalized) and the hash `hash`.
pub fn current(existing: &Value, resource: &Value, hash: &str) -> bool {
    let desired = normalized(resource);
    let hash_ok = existing
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(rd::ANNOTATION_HASH))
        .and_then(Value::as_str)
        == Some(hash);
    hash_ok && content(existing) == content(&desired)
}

/// The distribution a copy comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source<'a> {
    pub name: &'a str,
    pub uid: &'a str,
    /// [`rd::resource_hash`] of the resource.
    pub hash: &'a str,
}

fn controller_reference(source: &Source<'_>) -> Value {
    json!({
        "apiVersion": rd::API_VERSION,
        "kind": rd::KIND,
        "name": source.name,
        "uid": source.uid,
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// The copy to create in `namespace`: the resource with that namespace, the distribution as its
/// controller (the garbage collector deletes it with the distribution), and the hash and source
/// annotations.
pub fn new_copy(resource: &Value, namespace: &str, source: &Source<'_>) -> Value {
    let mut copy = normalized(resource);
    let mut metadata = copy
        .get("metadata")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    for server_set in [
        "resourceVersion",
        "uid",
        "creationTimestamp",
        "generation",
        "managedFields",
        "selfLink",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generateName",
    ] {
        metadata.remove(server_set);
    }
    metadata.insert("namespace".into(), json!(namespace));
    let mut owners: Vec<Value> = metadata
        .get("ownerReferences")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    owners.retain(|o| o.get("uid").and_then(Value::as_str) != Some(source.uid));
    owners.push(controller_reference(source));
    metadata.insert("ownerReferences".into(), Value::Array(owners));
    let annotations = metadata
        .entry("annotations")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(annotations) = annotations.as_object_mut() {
        annotations.insert(rd::ANNOTATION_HASH.into(), json!(source.hash));
        annotations.insert(rd::ANNOTATION_FROM.into(), json!(source.name));
    }
    if let Some(object) = copy.as_object_mut() {
        object.remove("status");
        object.insert("metadata".into(), Value::Object(metadata));
    }
    copy
}

/// The merge patch bringing the controlled copy `existing` up to date: the content replaced (a
/// field the source no longer has removed), the source's labels and annotations set over the copy's
/// (the copy's own kept, as upstream merges them), the hash and source annotations, and the
/// copy's resourceVersion as a precondition.
pub fn update_patch(existing: &Value, resource: &Value, source: &Source<'_>) -> Value {
    let desired = new_copy(resource, "", source);
    let mut patch = Map::new();
    let have = content(existing);
    let want = content(&desired);
    for key in have.keys() {
        if !want.contains_key(key) {
            patch.insert((*key).to_owned(), Value::Null);
        }
    }
    for (key, value) in &want {
        let diff = match have.get(key) {
            Some(old) => merge_diff(old, value),
            None => Some((*value).clone()),
        };
        if let Some(diff) = diff {
            patch.insert((*key).to_owned(), diff);
        }
    }
    let mut metadata = Map::new();
    for field in ["labels", "annotations"] {
        if let Some(values) = desired.pointer(&format!("/metadata/{field}")) {
            metadata.insert(field.into(), values.clone());
        }
    }
    let has_ours = existing
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|owners| {
            owners
                .iter()
                .any(|o| o.get("uid").and_then(Value::as_str) == Some(source.uid))
        });
    if !has_ours {
        let mut owners = existing
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        owners.push(controller_reference(source));
        metadata.insert("ownerReferences".into(), Value::Array(owners));
    }
    if let Some(version) = existing.pointer("/metadata/resourceVersion") {
        metadata.insert("resourceVersion".into(), version.clone());
    }
    patch.insert("metadata".into(), Value::Object(metadata));
    Value::Object(patch)
}

/// The JSON merge patch from `old` to `new` (`None`: equal): objects key by key, a key `new` lacks
/// set to null; anything else replaced whole.
fn merge_diff(old: &Value, new: &Value) -> Option<Value> {
    if old == new {
        return None;
    }
    match (old, new) {
        (Value::Object(old), Value::Object(new)) => {
            let mut patch = Map::new();
            for key in old.keys().filter(|k| !new.contains_key(*k)) {
                patch.insert(key.clone(), Value::Null);
            }
            for (key, value) in new {
                let diff = match old.get(key) {
                    Some(previous) => merge_diff(previous, value),
                    None => Some(value.clone()),
                };
                if let Some(diff) = diff {
                    patch.insert(key.clone(), diff);
                }
            }
            Some(Value::Object(patch))
        }
        _ => Some(new.clone()),
    }
}

/// A namespace where the distribution failed, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// One of [`rd::CONDITION_TYPES`].
    pub condition: &'static str,
    pub namespace: String,
    /// Upstream's reason text: the error's message.
    pub reason: String,
}

/// Upstream's reasons for the two failures that are not API errors.
pub const REASON_NO_NAMESPACE: &str = "namespace not found or is terminating";
pub const REASON_CONFLICT: &str =
    "conflict with existing resources because of the same namespace, group, version, kind and name";

/// The condition type a step reports, if any.
pub fn reported(step: Step) -> Option<(&'static str, &'static str)> {
    match step {
        Step::ReportNoNamespace => Some((rd::CONDITION_NAMESPACE_NOT_EXISTS, REASON_NO_NAMESPACE)),
        Step::ReportConflict => Some((rd::CONDITION_CONFLICT, REASON_CONFLICT)),
        _ => None,
    }
}

/// The status after a pass: `desired` matched namespaces, `succeeded` of them with a current copy;
/// the six conditions in upstream's order, `True` with the failed namespaces (sorted) and the last
/// failure's reason where something failed, `False` / `Succeeded` elsewhere, each keeping its
/// transition time while its status stays.
pub fn status(
    generation: i64,
    desired: usize,
    succeeded: usize,
    failures: &[Failure],
    old: &[ResourceDistributionCondition],
    now: &Time,
) -> ResourceDistributionStatus {
    let conditions = rd::CONDITION_TYPES
        .iter()
        .map(|&type_| {
            let mut namespaces: Vec<String> = failures
                .iter()
                .filter(|f| f.condition == type_)
                .map(|f| f.namespace.clone())
                .collect();
            namespaces.sort();
            namespaces.dedup();
            let (status, reason) = match failures.iter().rev().find(|f| f.condition == type_) {
                Some(failure) => ("True", failure.reason.clone()),
                None => ("False", rd::REASON_SUCCEEDED.to_owned()),
            };
            let previous = old.iter().find(|c| c.type_ == type_);
            let last_transition_time = match previous {
                Some(previous) if previous.status == status => {
                    previous.last_transition_time.clone()
                }
                _ => Some(now.clone()),
            };
            ResourceDistributionCondition {
                type_: type_.to_owned(),
                status: status.to_owned(),
                last_transition_time,
                reason,
                failed_namespaces: namespaces,
            }
        })
        .collect();
    let desired = i32::try_from(desired).unwrap_or(i32::MAX);
    let succeeded = i32::try_from(succeeded).unwrap_or(i32::MAX);
    ResourceDistributionStatus {
        desired,
        succeeded,
        failed: desired - succeeded,
        observed_generation: generation,
        conditions,
    }
}

#[cfg(test)]
mod tests;
