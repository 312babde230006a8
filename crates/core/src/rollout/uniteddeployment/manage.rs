//! Which subset workloads a UnitedDeployment creates, deletes and updates this reconcile, and with
//! what (upstream `pkg/controller/uniteddeployment/uniteddeployment_controller.go`
//! `manageSubsetProvision` and `manageSubsets`), decided from what the reconcile observed: the
//! controller only carries the plan out.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kruise_api::keys;
use kruise_api::uniteddeployment::v1beta1::UnitedDeployment;
use serde_json::{Map, Value, json};

use super::{TemplateKind, is_stuck_for_rolling_update, patch_annotation, subset_workload};

/// A subset workload as the reconcile observed it.
#[derive(Clone, Debug)]
pub struct SeenSubset<'a> {
    /// The workload's metadata and its JSON (`spec`, `status`) as cached.
    pub metadata: &'a ObjectMeta,
    pub data: &'a Value,
    pub spec_replicas: i32,
    pub partition: Option<i32>,
    pub status_replicas: i32,
    /// Its Pods at the update revision.
    pub updated_replicas: i32,
    /// Its Pods.
    pub pods: Vec<&'a Pod>,
    /// The maxUnavailable adaptive scheduling imposes on it (a JSON pointer into the workload and
    /// the value), if any.
    pub max_unavailable: Option<(&'static str, i32)>,
}

/// What the plan is made from.
#[derive(Clone, Copy, Debug)]
pub struct ManageInputs<'a> {
    pub ud: &'a UnitedDeployment,
    /// The kind of workload the template asks for.
    pub kind: TemplateKind,
    /// The controller reference every subset workload carries.
    pub owner: &'a OwnerReference,
    /// The workloads of `kind` by subset name (one per subset: duplicates are already gone).
    pub seen: &'a BTreeMap<String, SeenSubset<'a>>,
    pub next_replicas: &'a BTreeMap<String, i32>,
    pub next_partitions: &'a BTreeMap<String, i32>,
    /// The update revision's name.
    pub revision: &'a str,
}

/// One subset workload to update.
#[derive(Clone, Debug, PartialEq)]
pub struct SubsetUpdate {
    pub subset: String,
    pub replicas: i32,
    pub partition: i32,
    /// The JSON merge patch to send (labels and annotations merged over the workload's, the spec
    /// replaced, the resourceVersion it was computed from as a precondition); `Ok(None)` when the
    /// workload already has all of it; `Err` when the workload cannot be built from the template.
    pub patch: Result<Option<Value>, String>,
    /// Pods (name, uid) of a native StatefulSet subset stuck in its rolling update (the k8s#67250
    /// workaround: at or above the partition, at an old revision, not Ready): deleted after the
    /// patch.
    pub stuck_pods: Vec<(String, Option<String>)>,
}

/// What one reconcile does to the subset workloads, in the order it does it: creates (in slow-start
/// batches), deletes, then — only when provisioning went through — updates, one at a time, the
/// first failure stopping the rest.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SubsetPlan {
    /// Subsets of the topology with no workload, in name order, each with the workload to create
    /// (or why it cannot be built).
    pub creates: Vec<(String, Result<Value, String>)>,
    /// Subsets whose workload is no longer in the topology, in name order.
    pub deletes: Vec<String>,
    /// Subsets, in topology order, whose workload differs from what it should be or is still
    /// rolling out.
    pub updates: Vec<SubsetUpdate>,
}

/// Plans the subset workloads' creates, deletes and updates.
pub fn plan_subsets(inputs: &ManageInputs<'_>) -> SubsetPlan {
    let ManageInputs {
        ud,
        kind,
        owner,
        seen,
        next_replicas,
        next_partitions,
        revision,
    } = *inputs;
    let replicas_of = |subset: &str| next_replicas.get(subset).copied().unwrap_or(0);
    let partition_of = |subset: &str| next_partitions.get(subset).copied().unwrap_or(0);
    let expected: BTreeSet<&str> = ud
        .spec
        .topology
        .subsets
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    let creates = expected
        .iter()
        .filter(|subset| !seen.contains_key(**subset))
        .map(|subset| {
            let body = subset_workload(
                ud,
                subset,
                revision,
                replicas_of(subset),
                partition_of(subset),
                owner,
            );
            (subset.to_string(), body)
        })
        .collect();
    let deletes = seen
        .keys()
        .filter(|subset| !expected.contains(subset.as_str()))
        .cloned()
        .collect();
    let mut updates = Vec::new();
    for subset in &ud.spec.topology.subsets {
        let Some(workload) = seen.get(&subset.name) else {
            continue;
        };
        let replicas = replicas_of(&subset.name);
        let partition = partition_of(&subset.name);
        let labels = workload.metadata.labels.as_ref();
        let annotations = workload.metadata.annotations.as_ref();
        let needs_update = labels
            .and_then(|l| l.get(keys::LABEL_CONTROLLER_REVISION_HASH))
            .map(String::as_str)
            != Some(revision)
            || workload.spec_replicas != replicas
            || workload.partition.unwrap_or(0) != partition && kind != TemplateKind::Deployment
            || annotations
                .and_then(|a| a.get(keys::ANNOTATION_SUBSET_PATCH))
                .cloned()
                .unwrap_or_default()
                != patch_annotation(subset)
            || workload.updated_replicas < workload.status_replicas
            || workload.max_unavailable.is_some_and(|(pointer, value)| {
                workload.data.pointer(pointer) != Some(&json!(value))
            });
        if !needs_update {
            continue;
        }
        let patch = subset_workload(ud, &subset.name, revision, replicas, partition, owner).map(
            |mut desired| {
                if let Some((pointer, value)) = workload.max_unavailable {
                    set_at(&mut desired, pointer, json!(value));
                }
                update_patch(workload, &desired)
            },
        );
        let stuck_pods = if kind == TemplateKind::StatefulSet && !on_delete(workload.data) {
            workload
                .pods
                .iter()
                .filter(|pod| {
                    !crate::pods::is_terminating(pod)
                        && is_stuck_for_rolling_update(pod, revision, partition)
                })
                .map(|pod| {
                    (
                        pod.metadata.name.clone().unwrap_or_default(),
                        pod.metadata.uid.clone(),
                    )
                })
                .collect()
        } else {
            Vec::new()
        };
        updates.push(SubsetUpdate {
            subset: subset.name.clone(),
            replicas,
            partition,
            patch,
            stuck_pods,
        });
    }
    SubsetPlan {
        creates,
        deletes,
        updates,
    }
}

/// Whether a native StatefulSet updates only on delete (no rolling update to get stuck).
fn on_delete(data: &Value) -> bool {
    data.pointer("/spec/updateStrategy/type")
        .and_then(Value::as_str)
        == Some("OnDelete")
}

/// The merge patch from the workload as seen to `desired`: labels and annotations merged over what
/// the workload has (others may add their own), the spec replaced; `None` when nothing differs.
fn update_patch(workload: &SeenSubset<'_>, desired: &Value) -> Option<Value> {
    let mut patch = Map::new();
    let mut metadata = Map::new();
    for (field, have) in [
        ("labels", &workload.metadata.labels),
        ("annotations", &workload.metadata.annotations),
    ] {
        let want = desired
            .pointer(&format!("/metadata/{field}"))
            .cloned()
            .unwrap_or(json!({}));
        let have = serde_json::to_value(have.clone().unwrap_or_default()).unwrap_or(json!({}));
        if !contains(&have, &want) {
            metadata.insert(field.into(), want);
        }
    }
    let have_spec = workload.data.get("spec").cloned().unwrap_or(json!({}));
    let want_spec = desired.get("spec").cloned().unwrap_or(json!({}));
    if !contains(&have_spec, &want_spec) {
        patch.insert("spec".into(), merge_diff(&have_spec, &want_spec));
    }
    if metadata.is_empty() && !patch.contains_key("spec") {
        return None;
    }
    if let Some(rv) = &workload.metadata.resource_version {
        metadata.insert("resourceVersion".into(), json!(rv));
    }
    patch.insert("metadata".into(), Value::Object(metadata));
    Some(Value::Object(patch))
}

/// Sets the value at a JSON pointer, creating the objects on the way.
pub fn set_at(target: &mut Value, pointer: &str, value: Value) {
    let mut at = target;
    for part in pointer.split('/').skip(1) {
        if !at.is_object() {
            *at = json!({});
        }
        let Value::Object(map) = at else {
            return;
        };
        at = map.entry(part.to_owned()).or_insert(Value::Null);
    }
    *at = value;
}

/// Whether every field of `want` is in `have` with the same value (lists element by element):
/// fields the API server or a webhook defaulted on `have` do not count as a difference.
pub fn contains(have: &Value, want: &Value) -> bool {
    match (have, want) {
        (Value::Object(h), Value::Object(w)) => w
            .iter()
            .all(|(k, wv)| wv.is_null() || h.get(k).is_some_and(|hv| contains(hv, wv))),
        (Value::Array(h), Value::Array(w)) => {
            h.len() == w.len() && h.iter().zip(w).all(|(hv, wv)| contains(hv, wv))
        }
        (h, w) => h == w,
    }
}

/// The JSON merge patch that turns `have` into `want` (RFC 7386): removed keys become `null`, lists
/// are replaced.
pub fn merge_diff(have: &Value, want: &Value) -> Value {
    match (have, want) {
        (Value::Object(h), Value::Object(w)) => {
            let mut out = Map::new();
            for (k, hv) in h {
                match w.get(k) {
                    None => {
                        out.insert(k.clone(), Value::Null);
                    }
                    Some(wv) if wv != hv => {
                        out.insert(k.clone(), merge_diff(hv, wv));
                    }
                    Some(_) => {}
                }
            }
            for (k, wv) in w {
                if !h.contains_key(k) {
                    out.insert(k.clone(), wv.clone());
                }
            }
            Value::Object(out)
        }
        (_, w) => w.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pods::testing::pod;
    use crate::rollout::uniteddeployment::tests::{owner, ud_over};

    /// A UnitedDeployment of `template` over subsets `a` and `b`.
    fn ud(template: Value) -> UnitedDeployment {
        ud_over(template, json!([{"name": "a"}, {"name": "b"}]))
    }

    fn template(kind: TemplateKind) -> Value {
        let field = match kind {
            TemplateKind::StatefulSet => "statefulSetTemplate",
            TemplateKind::AdvancedStatefulSet => "advancedStatefulSetTemplate",
            TemplateKind::CloneSet => "cloneSetTemplate",
            TemplateKind::Deployment => "deploymentTemplate",
        };
        json!({field: {
            "metadata": {"labels": {"app": "ud"}},
            "spec": {
                "selector": {"matchLabels": {"app": "ud"}},
                "template": {
                    "metadata": {"labels": {"app": "ud"}},
                    "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}
                }
            }
        }})
    }

    /// A subset workload as created for `subset` at `revision` with `replicas` and `partition`
    /// (so up to date), as (metadata, data).
    fn workload(
        ud: &UnitedDeployment,
        subset: &str,
        revision: &str,
        replicas: i32,
        partition: i32,
    ) -> (ObjectMeta, Value) {
        let mut body =
            subset_workload(ud, subset, revision, replicas, partition, &owner()).expect("built");
        let mut metadata: ObjectMeta =
            serde_json::from_value(body["metadata"].take()).expect("metadata");
        metadata.name = Some(format!("ud-{subset}-x"));
        metadata.resource_version = Some("7".into());
        (metadata, body)
    }

    fn seen<'a>(
        (metadata, data): &'a (ObjectMeta, Value),
        replicas: i32,
        partition: i32,
        pods: Vec<&'a Pod>,
    ) -> SeenSubset<'a> {
        SeenSubset {
            metadata,
            data,
            spec_replicas: replicas,
            partition: Some(partition),
            status_replicas: replicas,
            updated_replicas: replicas,
            pods,
            max_unavailable: None,
        }
    }

    fn plan(
        ud: &UnitedDeployment,
        kind: TemplateKind,
        seen: &BTreeMap<String, SeenSubset<'_>>,
        replicas: (i32, i32),
        partitions: (i32, i32),
    ) -> SubsetPlan {
        let owner = owner();
        let next_replicas = BTreeMap::from([("a".into(), replicas.0), ("b".into(), replicas.1)]);
        let next_partitions =
            BTreeMap::from([("a".into(), partitions.0), ("b".into(), partitions.1)]);
        plan_subsets(&ManageInputs {
            ud,
            kind,
            owner: &owner,
            seen,
            next_replicas: &next_replicas,
            next_partitions: &next_partitions,
            revision: "rev-2",
        })
    }

    /// The subsets planned: (created, deleted, updated with whether a patch is sent).
    fn shape(plan: &SubsetPlan) -> (Vec<&str>, Vec<&str>, Vec<(&str, bool)>) {
        (
            plan.creates.iter().map(|(s, _)| s.as_str()).collect(),
            plan.deletes.iter().map(String::as_str).collect(),
            plan.updates
                .iter()
                .map(|u| {
                    let patched = u.patch.as_ref().is_ok_and(Option::is_some);
                    (u.subset.as_str(), patched)
                })
                .collect(),
        )
    }

    #[test]
    fn provisions_and_updates_only_what_differs() {
        let ud = ud(template(TemplateKind::CloneSet));
        let kind = TemplateKind::CloneSet;
        let current_a = workload(&ud, "a", "rev-2", 2, 0);
        let old_a = workload(&ud, "a", "rev-1", 2, 0);
        let current_b = workload(&ud, "b", "rev-2", 2, 0);
        let small_a = workload(&ud, "a", "rev-2", 1, 0);
        let gone = workload(&ud, "a", "rev-2", 1, 0);
        type Case<'a> = (
            &'a str,
            Vec<(&'a str, SeenSubset<'a>)>,
            (Vec<&'a str>, Vec<&'a str>, Vec<(&'a str, bool)>),
        );
        let rolling = SeenSubset {
            updated_replicas: 1,
            ..seen(&current_a, 2, 0, vec![])
        };
        let squeezed = SeenSubset {
            max_unavailable: Some((kind.max_unavailable_pointer(), 3)),
            ..seen(&current_a, 2, 0, vec![])
        };
        let cases: Vec<Case<'_>> = vec![
            (
                "nothing yet: both created",
                vec![],
                (vec!["a", "b"], vec![], vec![]),
            ),
            (
                "settled: nothing to do",
                vec![
                    ("a", seen(&current_a, 2, 0, vec![])),
                    ("b", seen(&current_b, 2, 0, vec![])),
                ],
                (vec![], vec![], vec![]),
            ),
            (
                "b missing, z left the topology",
                vec![
                    ("a", seen(&current_a, 2, 0, vec![])),
                    ("z", seen(&gone, 1, 0, vec![])),
                ],
                (vec!["b"], vec!["z"], vec![]),
            ),
            (
                "a at an old revision: patched",
                vec![
                    ("a", seen(&old_a, 2, 0, vec![])),
                    ("b", seen(&current_b, 2, 0, vec![])),
                ],
                (vec![], vec![], vec![("a", true)]),
            ),
            (
                "a to scale: patched",
                vec![
                    ("a", seen(&small_a, 1, 0, vec![])),
                    ("b", seen(&current_b, 2, 0, vec![])),
                ],
                (vec![], vec![], vec![("a", true)]),
            ),
            (
                "a still rolling, its spec as wanted: looked at, nothing sent",
                vec![("a", rolling), ("b", seen(&current_b, 2, 0, vec![]))],
                (vec![], vec![], vec![("a", false)]),
            ),
            (
                "adaptive scheduling raises a's maxUnavailable: patched",
                vec![("a", squeezed), ("b", seen(&current_b, 2, 0, vec![]))],
                (vec![], vec![], vec![("a", true)]),
            ),
        ];
        for (case, list, want) in cases {
            let seen: BTreeMap<String, SeenSubset<'_>> =
                list.into_iter().map(|(s, w)| (s.to_string(), w)).collect();
            let got = plan(&ud, kind, &seen, (2, 2), (0, 0));
            assert_eq!(shape(&got), want, "{case}");
            for (subset, body) in &got.creates {
                let body = body.as_ref().expect("buildable");
                assert_eq!(body["spec"]["replicas"], json!(2), "{case}: {subset}");
            }
        }
    }

    #[test]
    fn update_patches_carry_the_difference_and_a_precondition() {
        let ud = ud(template(TemplateKind::CloneSet));
        let old_a = workload(&ud, "a", "rev-1", 2, 0);
        let seen = BTreeMap::from([("a".to_string(), seen(&old_a, 2, 0, vec![]))]);
        let got = plan(&ud, TemplateKind::CloneSet, &seen, (3, 0), (1, 0));
        let [update] = got.updates.as_slice() else {
            panic!("one update: {got:?}");
        };
        assert_eq!((update.replicas, update.partition), (3, 1));
        let patch = update.patch.clone().expect("buildable").expect("a patch");
        assert_eq!(patch["metadata"]["resourceVersion"], json!("7"));
        assert_eq!(
            patch["metadata"]["labels"][keys::LABEL_CONTROLLER_REVISION_HASH],
            json!("rev-2")
        );
        assert_eq!(patch["spec"]["replicas"], json!(3));
        // Applied to the workload, it gives what a new one would be.
        let mut merged = old_a.1.clone();
        json_patch::merge(&mut merged, &json!({"spec": patch["spec"].clone()}));
        let want = subset_workload(&ud, "a", "rev-2", 3, 1, &owner()).expect("built");
        assert!(contains(&merged["spec"], &want["spec"]), "{merged:#}");
    }

    #[test]
    fn stuck_pods_of_native_statefulsets_only() {
        let ready = |p: crate::pods::testing::PodBuilder| p.running_ready(60);
        // (case, kind, update strategy, expected stuck Pods)
        let cases = [
            (
                "native StatefulSet",
                TemplateKind::StatefulSet,
                None,
                vec!["ud-a-x-1"],
            ),
            (
                "native StatefulSet updated on delete",
                TemplateKind::StatefulSet,
                Some("OnDelete"),
                vec![],
            ),
            (
                "Advanced StatefulSet",
                TemplateKind::AdvancedStatefulSet,
                None,
                vec![],
            ),
        ];
        for (case, kind, strategy, want) in cases {
            let ud = ud(template(kind));
            let mut old_a = workload(&ud, "a", "rev-1", 2, 1);
            if let Some(strategy) = strategy {
                old_a.1["spec"]["updateStrategy"] = json!({"type": strategy});
            }
            let pods = [
                // Below the partition: left alone.
                pod("ud-a-x-0")
                    .label(keys::LABEL_CONTROLLER_REVISION_HASH, "rev-1")
                    .build(),
                // At the partition, old and not Ready: stuck.
                pod("ud-a-x-1")
                    .label(keys::LABEL_CONTROLLER_REVISION_HASH, "rev-1")
                    .build(),
                // Old but Ready: the rolling update gets to it.
                ready(pod("ud-a-x-2").label(keys::LABEL_CONTROLLER_REVISION_HASH, "rev-1")).build(),
                // Updated already.
                pod("ud-a-x-3")
                    .label(keys::LABEL_CONTROLLER_REVISION_HASH, "rev-2")
                    .build(),
            ];
            let seen =
                BTreeMap::from([("a".to_string(), seen(&old_a, 2, 1, pods.iter().collect()))]);
            let got = plan(&ud, kind, &seen, (2, 0), (1, 0));
            let stuck: Vec<&str> = got
                .updates
                .iter()
                .flat_map(|u| u.stuck_pods.iter().map(|(name, _)| name.as_str()))
                .collect();
            assert_eq!(stuck, want, "{case}");
        }
    }

    #[test]
    fn deployment_partitions_do_not_count() {
        let ud = ud(template(TemplateKind::Deployment));
        let a = workload(&ud, "a", "rev-2", 2, 0);
        let b = workload(&ud, "b", "rev-2", 2, 0);
        let seen = BTreeMap::from([
            (
                "a".to_string(),
                SeenSubset {
                    partition: None,
                    ..seen(&a, 2, 0, vec![])
                },
            ),
            (
                "b".to_string(),
                SeenSubset {
                    partition: None,
                    ..seen(&b, 2, 0, vec![])
                },
            ),
        ]);
        let got = plan(&ud, TemplateKind::Deployment, &seen, (2, 2), (1, 1));
        assert_eq!(shape(&got), (vec![], vec![], vec![]));
    }

    #[test]
    fn contains_ignores_defaulted_fields() {
        let have = json!({"replicas": 2, "template": {"spec": {"containers": [{"name": "c", "image": "a", "terminationMessagePath": "/dev/termination-log"}], "dnsPolicy": "ClusterFirst"}}});
        assert!(contains(
            &have,
            &json!({"replicas": 2, "template": {"spec": {"containers": [{"name": "c", "image": "a"}]}}})
        ));
        assert!(!contains(&have, &json!({"replicas": 3})));
        assert!(!contains(
            &have,
            &json!({"template": {"spec": {"containers": [{"name": "c", "image": "b"}]}}})
        ));
        assert!(!contains(
            &have,
            &json!({"template": {"spec": {"containers": []}}})
        ));
    }

    #[test]
    fn merge_diff_removes_and_replaces() {
        let have = json!({"a": 1, "b": {"x": 1, "y": 2}, "c": [1, 2]});
        let want = json!({"b": {"x": 1, "z": 3}, "c": [3]});
        assert_eq!(
            merge_diff(&have, &want),
            json!({"a": null, "b": {"y": null, "z": 3}, "c": [3]})
        );
        let mut merged = have.clone();
        json_patch::merge(&mut merged, &merge_diff(&have, &want));
        assert_eq!(merged, want);
    }
}
