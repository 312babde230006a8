//! Cross-SidecarSet validation: SidecarSets that can inject into the same Pod (overlapping namespace scope
//! and overlapping selectors) must not inject two containers of one name, must agree on volumes of one
//! name, and must not both write (non-Retain) one annotation where either overwrites.
//!
//! Overlap is decided soundly: two selectors are disjoint only when no label set can satisfy both.
//! (Upstream's check also calls `k Exists` disjoint from a selector that does not mention `k`, which lets
//! clashing SidecarSets through; kruise-rs does not.)

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::canary_base;
use super::v1beta1::{self as api, SidecarSet};
use crate::field::{FieldError, Path};

/// The conflicts of `new` (being created or updated) with the other SidecarSets of the cluster. `others`
/// may contain `new`'s stored version (same name), which is ignored, as is the base of a canary.
pub fn conflicts(new: &SidecarSet, others: &[SidecarSet]) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let name = new.metadata.name.as_deref().unwrap_or_default();
    let base = canary_base(&new.metadata);
    let overlapping: Vec<&SidecarSet> = others
        .iter()
        .filter(|other| {
            let other_name = other.metadata.name.as_deref().unwrap_or_default();
            other_name != name && Some(other_name) != base && may_inject_same_pod(new, other)
        })
        .collect();
    let spec = Path::new("spec");

    for (field, mine, theirs) in [
        (
            "initContainers",
            &new.spec.init_containers,
            (|s: &SidecarSet| &s.spec.init_containers)
                as fn(&SidecarSet) -> &Vec<api::SidecarContainer>,
        ),
        ("containers", &new.spec.containers, |s: &SidecarSet| {
            &s.spec.containers
        }),
    ] {
        for (i, container) in mine.iter().enumerate() {
            if let Some(other) = overlapping
                .iter()
                .find(|o| theirs(o).iter().any(|c| c.name == container.name))
            {
                errors.push(FieldError::invalid(
                    &spec.child(field).index(i).child("name"),
                    &container.name,
                    format!(
                        "container {} already exist in {}",
                        container.name,
                        other_name(other)
                    ),
                ));
            }
        }
    }

    for (i, volume) in new.spec.volumes.iter().enumerate() {
        let clash = overlapping.iter().find(|o| {
            o.spec
                .volumes
                .iter()
                .any(|v| v.name == volume.name && v != volume)
        });
        if let Some(other) = clash {
            errors.push(FieldError::invalid(
                &spec.child("volumes").index(i).child("name"),
                &volume.name,
                format!(
                    "volume {} is in conflict with sidecarset {}",
                    volume.name,
                    other_name(other)
                ),
            ));
        }
    }

    for (i, patch) in new.spec.patch_pod_metadata.iter().enumerate() {
        if is_retain(&patch.patch_policy) {
            continue;
        }
        for key in patch.annotations.keys() {
            let clash = overlapping.iter().find(|o| {
                o.spec.patch_pod_metadata.iter().any(|theirs| {
                    !is_retain(&theirs.patch_policy)
                        && theirs.annotations.contains_key(key)
                        && (patch.patch_policy == api::PATCH_POLICY_OVERWRITE
                            || theirs.patch_policy == api::PATCH_POLICY_OVERWRITE)
                })
            });
            if let Some(other) = clash {
                errors.push(FieldError::invalid(
                    &spec
                        .child("patchPodMetadata")
                        .index(i)
                        .child("annotations")
                        .key(key),
                    key,
                    format!(
                        "annotation {key} is in conflict with sidecarset {}",
                        other_name(other)
                    ),
                ));
            }
        }
    }
    errors
}

fn is_retain(policy: &str) -> bool {
    policy.is_empty() || policy == api::PATCH_POLICY_RETAIN
}

fn other_name(other: &SidecarSet) -> &str {
    other.metadata.name.as_deref().unwrap_or_default()
}

/// Whether some Pod can be matched by both: namespace scopes overlap (an unset namespaceSelector is every
/// namespace) and Pod selectors overlap (an unset selector matches nothing).
fn may_inject_same_pod(a: &SidecarSet, b: &SidecarSet) -> bool {
    let namespaces = match (&a.spec.namespace_selector, &b.spec.namespace_selector) {
        (Some(x), Some(y)) => selectors_overlap(x, y),
        _ => true,
    };
    let pods = match (&a.spec.selector, &b.spec.selector) {
        (Some(x), Some(y)) => selectors_overlap(x, y),
        _ => false,
    };
    namespaces && pods
}

/// What the requirements of both selectors demand of one label key.
#[derive(Default)]
struct KeyConstraint {
    must_exist: bool,
    must_not_exist: bool,
    /// The value must be in each of these sets.
    allowed: Vec<BTreeSet<String>>,
    forbidden: BTreeSet<String>,
}

/// Whether some label set satisfies both selectors.
pub(super) fn selectors_overlap(a: &LabelSelector, b: &LabelSelector) -> bool {
    let mut keys: BTreeMap<&str, KeyConstraint> = BTreeMap::new();
    for selector in [a, b] {
        for (key, value) in selector.match_labels.iter().flatten() {
            let c = keys.entry(key).or_default();
            c.must_exist = true;
            c.allowed.push(BTreeSet::from([value.clone()]));
        }
        for req in selector.match_expressions.iter().flatten() {
            let c = keys.entry(req.key.as_str()).or_default();
            let values: BTreeSet<String> = req.values.iter().flatten().cloned().collect();
            match req.operator.as_str() {
                "In" => {
                    c.must_exist = true;
                    c.allowed.push(values);
                }
                "NotIn" => c.forbidden.extend(values),
                "Exists" => c.must_exist = true,
                "DoesNotExist" => c.must_not_exist = true,
                // An unknown operator matches nothing; it cannot be satisfied.
                _ => return false,
            }
        }
    }
    keys.values().all(|c| {
        if c.must_exist && c.must_not_exist {
            return false;
        }
        let mut candidates = c.allowed.iter();
        match candidates.next() {
            // Only NotIn / Exists / DoesNotExist: some value outside `forbidden` (or absence) works.
            None => true,
            Some(first) => first
                .iter()
                .any(|v| !c.forbidden.contains(v) && c.allowed.iter().all(|set| set.contains(v))),
        }
    })
}
