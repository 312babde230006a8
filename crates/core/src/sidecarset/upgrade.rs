//! Upgrading injected sidecars in place (inventory §3.4, §3.5), as pure functions of a SidecarSet
//! and its Pods: which Pods it manages, which are up to date and ready, which to upgrade next, and
//! the patch that upgrades one.
//!
//! Only images change in place (a Pod's container spec is otherwise immutable): a Pod whose sidecars
//! differ in anything else keeps them until it is recreated, and is reported as not upgradable.
//! Hot upgrade (the -1/-2 container pair) is not upgraded here yet: such SidecarSets are left alone.

use std::collections::BTreeMap;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, ReplaceOperation, TestOperation};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kruise_api::sidecarset::hash::{
    ANNOTATION_HASH, ANNOTATION_HASH_WITHOUT_IMAGE, sidecarset_hash, sidecarset_hash_without_image,
};
use kruise_api::sidecarset::v1beta1::SidecarSet;
use kruise_api::sidecarset::{ANNOTATION_INPLACE_UPDATE_STATE, is_native_sidecar};
use kruise_api::validation::selector_matches;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::annotations::{encode_upgrade_specs, injected_list};
use super::{UpgradeSpec, parse_upgrade_specs};
use crate::inplace::with_default_tag;
use crate::pods;
use crate::rollout::cloneset::{InvalidSetting, partition_replicas};
use crate::rollout::ordering;

/// `updateStrategy.type` that never upgrades.
pub const UPDATE_NOT_UPDATE: &str = "NotUpdate";
/// `upgradeStrategy.upgradeType` of the -1/-2 container pair.
pub const UPGRADE_HOT: &str = "HotUpgrade";

/// One SidecarSet's entry in `kruise.io/sidecarset-inplace-update-state`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SidecarUpdateState {
    #[serde(default)]
    pub revision: String,
    #[serde(rename = "updateTimestamp", default)]
    pub update_timestamp: Option<Time>,
    #[serde(rename = "lastContainerStatuses", default)]
    pub last_container_statuses: BTreeMap<String, LastContainerStatus>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LastContainerStatus {
    #[serde(rename = "imageID", default)]
    pub image_id: String,
}

/// The SidecarSet's current hashes: its annotations (written by its defaulting webhook), computed
/// when absent.
pub fn hashes(ss: &SidecarSet) -> (String, String) {
    let annotation = |key: &str| {
        ss.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .filter(|v| !v.is_empty())
            .cloned()
    };
    (
        annotation(ANNOTATION_HASH).unwrap_or_else(|| sidecarset_hash(ss)),
        annotation(ANNOTATION_HASH_WITHOUT_IMAGE)
            .unwrap_or_else(|| sidecarset_hash_without_image(ss)),
    )
}

fn ss_name(ss: &SidecarSet) -> &str {
    ss.metadata.name.as_deref().unwrap_or_default()
}

fn annotations(pod: &Pod) -> BTreeMap<String, String> {
    pod.metadata.annotations.clone().unwrap_or_default()
}

/// The containers the SidecarSet upgrades in place (native-sidecar init containers are not).
fn upgraded_containers(
    ss: &SidecarSet,
) -> impl Iterator<Item = &k8s_openapi::api::core::v1::Container> {
    ss.spec.containers.iter().map(|c| &c.container)
}

/// Whether the SidecarSet uses hot upgrade for any container.
pub fn uses_hot_upgrade(ss: &SidecarSet) -> bool {
    ss.spec
        .containers
        .iter()
        .any(|c| c.upgrade_strategy.upgrade_type == UPGRADE_HOT)
}

/// The Pod is one the SidecarSet manages: active, selected, listed in
/// `kruise.io/sidecarset-injected-list`, and carrying all of its sidecar containers.
pub fn is_managed(ss: &SidecarSet, pod: &Pod) -> bool {
    let selected = ss.spec.selector.as_ref().is_some_and(|s| {
        selector_matches(s, pod.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()))
    });
    if !selected || !pods::is_active(pod) || !injected_list(&annotations(pod)).contains(ss_name(ss))
    {
        return false;
    }
    let names: Vec<&str> = pod
        .spec
        .iter()
        .flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        })
        .map(|c| c.name.as_str())
        .collect();
    let hot = |name: &str| {
        let (one, two) = super::hot_upgrade_names(name);
        names.contains(&one.as_str()) && names.contains(&two.as_str())
    };
    ss.spec.containers.iter().all(|c| {
        if c.upgrade_strategy.upgrade_type == UPGRADE_HOT {
            hot(&c.container.name)
        } else {
            names.contains(&c.container.name.as_str())
        }
    }) && ss
        .spec
        .init_containers
        .iter()
        .filter(|c| is_native_sidecar(&c.container))
        .all(|c| names.contains(&c.container.name.as_str()))
}

/// A Pod matched by the SidecarSet's selector that lacks its sidecars: created while the Pod
/// webhook was unreachable (failure policy Ignore), or before the SidecarSet existed. Such Pods are
/// reported, never changed: containers cannot be added to a running Pod.
pub fn missed_injection(ss: &SidecarSet, pod: &Pod, namespace_matches: bool) -> bool {
    let selected = ss.spec.selector.as_ref().is_some_and(|s| {
        !kruise_api::validation::selector_is_empty(s)
            && selector_matches(s, pod.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()))
    });
    selected
        && namespace_matches
        && pods::is_active(pod)
        && !ss.spec.injection_strategy.paused
        && !injected_list(&annotations(pod)).contains(ss_name(ss))
}

/// What the upgrade decisions need to know about one managed Pod.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PodFacts {
    /// The Pod records the SidecarSet's current hash.
    pub updated: bool,
    /// Only images differ from what the Pod was injected with, so it can be upgraded in place.
    pub upgradable: bool,
    /// The sidecars run what their spec says (no restart pending).
    pub consistent: bool,
    /// Running and Ready.
    pub ready: bool,
}

fn recorded(pod: &Pod, key: &str, name: &str) -> Option<UpgradeSpec> {
    parse_upgrade_specs(&annotations(pod), key)
        .ok()
        .and_then(|mut m| m.remove(name))
}

fn update_states(pod: &Pod) -> BTreeMap<String, SidecarUpdateState> {
    annotations(pod)
        .get(ANNOTATION_INPLACE_UPDATE_STATE)
        .and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or_default()
}

/// Whether the Pod's sidecars run their spec images: every container has a status, and a sidecar
/// upgraded in place has either restarted with a new imageID or reports the spec image.
pub fn is_consistent(ss: &SidecarSet, pod: &Pod) -> bool {
    let (Some(spec), Some(status)) = (pod.spec.as_ref(), pod.status.as_ref()) else {
        return false;
    };
    let statuses = status.container_statuses.as_deref().unwrap_or_default();
    if statuses.len() != spec.containers.len() {
        return false;
    }
    let state = update_states(pod).remove(ss_name(ss)).unwrap_or_default();
    upgraded_containers(ss).all(|sidecar| {
        let Some(container) = spec.containers.iter().find(|c| c.name == sidecar.name) else {
            return true;
        };
        let Some(status) = statuses.iter().find(|s| s.name == sidecar.name) else {
            return false;
        };
        let spec_image = with_default_tag(container.image.as_deref().unwrap_or_default());
        let same_image = with_default_tag(&status.image) == spec_image;
        match state.last_container_statuses.get(&sidecar.name) {
            Some(last) => last.image_id != status.image_id || same_image,
            None => true,
        }
    })
}

/// The facts of a managed Pod.
pub fn pod_facts(ss: &SidecarSet, pod: &Pod) -> PodFacts {
    let (hash, hash_without_image) = hashes(ss);
    let name = ss_name(ss);
    PodFacts {
        updated: recorded(pod, ANNOTATION_HASH, name).is_some_and(|s| s.hash == hash),
        upgradable: recorded(pod, ANNOTATION_HASH_WITHOUT_IMAGE, name)
            .is_some_and(|s| s.hash == hash_without_image),
        consistent: is_consistent(ss, pod),
        ready: pods::is_running_and_ready(pod),
    }
}

/// The status counters: matched, updated, ready (consistent and ready), updated and ready.
pub fn counts(facts: &[PodFacts]) -> (i32, i32, i32, i32) {
    let mut c = (0, 0, 0, 0);
    for f in facts {
        let ready = f.consistent && f.ready;
        c.0 += 1;
        c.1 += i32::from(f.updated);
        c.2 += i32::from(ready);
        c.3 += i32::from(f.updated && ready);
    }
    c
}

/// The Pods to upgrade now and the Pods that can never be upgraded in place.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UpgradePlan {
    pub upgrade: Vec<usize>,
    pub not_upgradable: Vec<usize>,
}

const FIELD_PARTITION: &str = "spec.updateStrategy.partition";
const FIELD_MAX_UNAVAILABLE: &str = "spec.updateStrategy.maxUnavailable";

/// The next Pods to upgrade (`GetNextUpgradePods`) among the managed `pods` with their `facts`:
/// not updated, selected by `updateStrategy.selector`, upgradable and consistent; in the ActivePods
/// order, then priority, then scatter; the last `partition` of them kept back; then cut so that
/// updated-but-unready Pods plus ready Pods taken stay within maxUnavailable (a Pod that is not ready
/// is always taken: upgrading it costs no availability).
pub fn plan_upgrade(
    ss: &SidecarSet,
    pods: &[Pod],
    facts: &[PodFacts],
) -> Result<UpgradePlan, InvalidSetting> {
    let strategy = &ss.spec.update_strategy;
    let mut plan = UpgradePlan::default();
    if strategy.type_ == UPDATE_NOT_UPDATE || strategy.paused || uses_hot_upgrade(ss) {
        return Ok(plan);
    }
    let selected = |pod: &Pod| match &strategy.selector {
        None => true,
        Some(s) => selector_matches(s, pod.metadata.labels.as_ref().unwrap_or(&BTreeMap::new())),
    };
    let mut waiting = Vec::new();
    for (i, (pod, f)) in pods.iter().zip(facts).enumerate() {
        if f.updated || !selected(pod) {
            continue;
        }
        if !f.upgradable {
            plan.not_upgradable.push(i);
        } else if f.consistent {
            waiting.push(i);
        }
    }
    waiting.sort_by(|&a, &b| ordering::active_pods_cmp(&pods[a], &pods[b]));
    if let Some(priority) = &strategy.priority_strategy {
        ordering::sort_by_priority(pods, &mut waiting, priority);
    }
    let terms = expand_scatter(pods, &strategy.scatter_strategy);
    let mut waiting = ordering::scatter(pods, waiting, &terms);

    let total = i32::try_from(pods.len()).unwrap_or(i32::MAX);
    let partition =
        usize::try_from(partition_replicas(strategy.partition.as_ref(), total)?).unwrap_or(0);
    waiting.truncate(waiting.len().saturating_sub(partition));

    let max_unavailable = match &strategy.max_unavailable {
        None => 1,
        Some(v) => kruise_api::intstr::IntOrPercent::parse(v)
            .map_err(|message| InvalidSetting {
                field: FIELD_MAX_UNAVAILABLE,
                message,
            })?
            .scaled(total, kruise_api::intstr::Round::Up),
    };
    let mut unavailable = facts
        .iter()
        .filter(|f| f.updated && (!f.consistent || !f.ready))
        .count() as i64;
    for i in waiting {
        if !facts[i].ready {
            plan.upgrade.push(i);
            continue;
        }
        if unavailable >= i64::from(max_unavailable) {
            break;
        }
        unavailable += 1;
        plan.upgrade.push(i);
    }
    let _ = FIELD_PARTITION;
    Ok(plan)
}

/// Scatter terms with `"*"` expanded to every value of that label on the Pods.
fn expand_scatter(
    pods: &[Pod],
    terms: &[kruise_api::pub_types::UpdateScatterTerm],
) -> Vec<kruise_api::pub_types::UpdateScatterTerm> {
    let mut out = Vec::new();
    for term in terms {
        if term.value != "*" {
            out.push(term.clone());
            continue;
        }
        let mut values: Vec<String> = pods
            .iter()
            .filter_map(|p| pods::label(p, &term.key).map(str::to_owned))
            .collect();
        values.sort();
        values.dedup();
        out.extend(
            values
                .into_iter()
                .map(|value| kruise_api::pub_types::UpdateScatterTerm {
                    key: term.key.clone(),
                    value,
                }),
        );
    }
    out
}

fn ptr<'t>(tokens: impl IntoIterator<Item = &'t str>) -> PointerBuf {
    PointerBuf::from_tokens(tokens)
}

/// Why a Pod cannot be patched.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UpgradeError {
    #[error("the Pod has no resourceVersion to guard the patch with")]
    NoResourceVersion,
    #[error("the Pod has no spec")]
    NoSpec,
}

/// The JSON patch that upgrades the Pod's sidecars of `ss` in place: each sidecar whose image
/// differs gets the new image (nothing else of the container changes), and the Pod's records are
/// refreshed — the `kruise.io/sidecarset-hash` and `-without-image` entries, and the in-place state
/// with the imageIDs before the upgrade (to tell when the restart happened). The first op tests the
/// resourceVersion, so the patch applies only to the Pod the decision was made on.
pub fn upgrade_patch(
    ss: &SidecarSet,
    pod: &Pod,
    latest_revision: &str,
    now: Timestamp,
) -> Result<Patch, UpgradeError> {
    let rv = pod
        .metadata
        .resource_version
        .as_deref()
        .filter(|v| !v.is_empty())
        .ok_or(UpgradeError::NoResourceVersion)?;
    let spec = pod.spec.as_ref().ok_or(UpgradeError::NoSpec)?;
    let name = ss_name(ss);
    let mut ops = vec![PatchOperation::Test(TestOperation {
        path: ptr(["metadata", "resourceVersion"]),
        value: Value::String(rv.to_owned()),
    })];
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_deref())
        .unwrap_or_default();
    let mut last = BTreeMap::new();
    for sidecar in upgraded_containers(ss) {
        let Some(index) = spec.containers.iter().position(|c| c.name == sidecar.name) else {
            continue;
        };
        let want = sidecar.image.clone().unwrap_or_default();
        if spec.containers[index].image.as_deref() == Some(want.as_str()) {
            continue;
        }
        if let Some(status) = statuses.iter().find(|s| s.name == sidecar.name) {
            last.insert(
                sidecar.name.clone(),
                LastContainerStatus {
                    image_id: status.image_id.clone(),
                },
            );
        }
        ops.push(PatchOperation::Replace(ReplaceOperation {
            path: ptr(["spec", "containers", &index.to_string(), "image"]),
            value: json!(want),
        }));
    }

    let (hash, hash_without_image) = hashes(ss);
    let existing = annotations(pod);
    let mut with_image = parse_upgrade_specs(&existing, ANNOTATION_HASH).unwrap_or_default();
    let mut without_image =
        parse_upgrade_specs(&existing, ANNOTATION_HASH_WITHOUT_IMAGE).unwrap_or_default();
    let sidecar_list = with_image.get(name).and_then(|s| s.sidecar_list.clone());
    with_image.insert(
        name.to_owned(),
        UpgradeSpec {
            update_timestamp: Some(Time(now)),
            hash: hash.clone(),
            sidecar_set_name: name.to_owned(),
            sidecar_list: sidecar_list.clone(),
            controller_revision: latest_revision.to_owned(),
        },
    );
    without_image.insert(
        name.to_owned(),
        UpgradeSpec {
            update_timestamp: Some(Time(now)),
            hash: hash_without_image,
            sidecar_set_name: name.to_owned(),
            sidecar_list,
            controller_revision: String::new(),
        },
    );
    let mut states = update_states(pod);
    states.insert(
        name.to_owned(),
        SidecarUpdateState {
            revision: hash,
            update_timestamp: Some(Time(now)),
            last_container_statuses: last,
        },
    );
    if pod.metadata.annotations.is_none() {
        ops.push(PatchOperation::Add(AddOperation {
            path: ptr(["metadata", "annotations"]),
            value: json!({}),
        }));
    }
    for (key, value) in [
        (ANNOTATION_HASH, encode_upgrade_specs(&with_image)),
        (
            ANNOTATION_HASH_WITHOUT_IMAGE,
            encode_upgrade_specs(&without_image),
        ),
        (
            ANNOTATION_INPLACE_UPDATE_STATE,
            serde_json::to_string(&states).unwrap_or_default(),
        ),
    ] {
        ops.push(PatchOperation::Add(AddOperation {
            path: ptr(["metadata", "annotations", key]),
            value: Value::String(value),
        }));
    }
    Ok(Patch(ops))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Container, ContainerStatus, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use kruise_api::sidecarset::v1beta1::{SidecarContainer, SidecarSetSpec};

    use super::*;

    fn sidecarset(image: &str) -> SidecarSet {
        let mut ss = SidecarSet::new(
            "logtail",
            SidecarSetSpec {
                selector: Some(LabelSelector {
                    match_labels: Some(BTreeMap::from([("app".into(), "web".into())])),
                    ..LabelSelector::default()
                }),
                containers: vec![SidecarContainer {
                    container: Container {
                        name: "logtail".into(),
                        image: Some(image.into()),
                        ..Container::default()
                    },
                    ..SidecarContainer::default()
                }],
                ..SidecarSetSpec::default()
            },
        );
        kruise_api::sidecarset::hash::set_hash_annotations(&mut ss);
        ss
    }

    /// A Pod injected with `injected_with`, running `running` for its sidecar.
    fn pod(name: &str, injected_with: &SidecarSet, ready: bool) -> Pod {
        let (hash, without) = hashes(injected_with);
        let image = injected_with.spec.containers[0]
            .container
            .image
            .clone()
            .unwrap_or_default();
        let spec = |h: &str, rev: bool| {
            let mut v = json!({"logtail": {"updateTimestamp": null, "hash": h, "sidecarSetName": "logtail", "sidecarList": ["logtail"]}});
            if rev {
                v["logtail"]["controllerRevision"] = json!("");
            }
            v.to_string()
        };
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                resource_version: Some("5".into()),
                labels: Some(BTreeMap::from([("app".into(), "web".into())])),
                annotations: Some(BTreeMap::from([
                    (
                        "kruise.io/sidecarset-injected-list".into(),
                        "logtail".into(),
                    ),
                    (ANNOTATION_HASH.into(), spec(&hash, false)),
                    (ANNOTATION_HASH_WITHOUT_IMAGE.into(), spec(&without, false)),
                ])),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                node_name: Some("n".into()),
                containers: vec![
                    Container {
                        name: "logtail".into(),
                        image: Some(image.clone()),
                        ..Container::default()
                    },
                    Container {
                        name: "nginx".into(),
                        image: Some("nginx".into()),
                        ..Container::default()
                    },
                ],
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                conditions: Some(vec![k8s_openapi::api::core::v1::PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..Default::default()
                }]),
                container_statuses: Some(vec![
                    ContainerStatus {
                        name: "logtail".into(),
                        image: image.clone(),
                        image_id: format!("{image}@sha256:1"),
                        ..ContainerStatus::default()
                    },
                    ContainerStatus {
                        name: "nginx".into(),
                        image: "nginx".into(),
                        ..ContainerStatus::default()
                    },
                ]),
                ..PodStatus::default()
            }),
        }
    }

    fn plan_for(ss: &SidecarSet, pods: &[Pod]) -> UpgradePlan {
        let facts: Vec<PodFacts> = pods.iter().map(|p| pod_facts(ss, p)).collect();
        plan_upgrade(ss, pods, &facts).unwrap_or_default()
    }

    #[test]
    fn managed_updated_and_counts() {
        let v1 = sidecarset("logtail:0.16.16");
        let v2 = sidecarset("logtail:0.16.18");
        let p = pod("a", &v1, true);
        assert!(is_managed(&v2, &p));
        let f = pod_facts(&v2, &p);
        assert_eq!(
            f,
            PodFacts {
                updated: false,
                upgradable: true,
                consistent: true,
                ready: true
            }
        );
        assert!(pod_facts(&v1, &p).updated);
        assert_eq!(counts(&[f, pod_facts(&v1, &p)]), (2, 1, 2, 1));
        let mut other = p.clone();
        other.metadata.annotations = None;
        assert!(!is_managed(&v2, &other));
        assert!(missed_injection(&v2, &other, true));
        assert!(!missed_injection(&v2, &p, true));
    }

    #[test]
    fn plan_table() {
        let v1 = sidecarset("logtail:1");
        let pods: Vec<Pod> = (0..50)
            .map(|i| pod(&format!("p{i:02}"), &v1, true))
            .collect();
        let with = |f: &dyn Fn(&mut SidecarSet)| {
            let mut ss = sidecarset("logtail:2");
            f(&mut ss);
            ss
        };
        let cases: Vec<(&str, SidecarSet, usize)> = vec![
            ("default maxUnavailable 1", with(&|_| {}), 1),
            (
                "partition 40, maxUnavailable 100%",
                with(&|s| {
                    s.spec.update_strategy.partition = Some(IntOrString::Int(40));
                    s.spec.update_strategy.max_unavailable =
                        Some(IntOrString::String("100%".into()));
                }),
                10,
            ),
            (
                "maxUnavailable 10% of 50",
                with(&|s| {
                    s.spec.update_strategy.max_unavailable = Some(IntOrString::String("10%".into()))
                }),
                5,
            ),
            ("paused", with(&|s| s.spec.update_strategy.paused = true), 0),
            (
                "NotUpdate",
                with(&|s| s.spec.update_strategy.type_ = UPDATE_NOT_UPDATE.into()),
                0,
            ),
            (
                "canary selector matches nothing",
                with(&|s| {
                    s.spec.update_strategy.selector = Some(LabelSelector {
                        match_labels: Some(BTreeMap::from([(
                            "canary.release".into(),
                            "true".into(),
                        )])),
                        ..LabelSelector::default()
                    });
                    s.spec.update_strategy.max_unavailable =
                        Some(IntOrString::String("100%".into()));
                }),
                0,
            ),
        ];
        for (name, ss, want) in cases {
            assert_eq!(plan_for(&ss, &pods).upgrade.len(), want, "{name}");
        }
    }

    #[test]
    fn unready_pods_first_and_free() {
        let v1 = sidecarset("logtail:1");
        let v2 = sidecarset("logtail:2");
        let pods = vec![
            pod("a", &v1, true),
            pod("b", &v1, false),
            pod("c", &v1, true),
        ];
        assert_eq!(plan_for(&v2, &pods).upgrade, vec![1, 0]);
    }

    #[test]
    fn a_non_image_change_is_not_upgradable() {
        let v1 = sidecarset("logtail:1");
        let mut v2 = sidecarset("logtail:1");
        v2.spec.containers[0].container.command = Some(vec!["run".into()]);
        kruise_api::sidecarset::hash::set_hash_annotations(&mut v2);
        let plan = plan_for(&v2, &[pod("a", &v1, true)]);
        assert_eq!(plan.upgrade, Vec::<usize>::new());
        assert_eq!(plan.not_upgradable, vec![0]);
    }

    #[test]
    fn patch_changes_only_the_image_and_records() -> Result<(), UpgradeError> {
        let v1 = sidecarset("logtail:1");
        let v2 = sidecarset("logtail:2");
        let p = pod("a", &v1, true);
        let patch = upgrade_patch(&v2, &p, "rev-2", Timestamp::UNIX_EPOCH)?;
        let mut doc = serde_json::to_value(&p).unwrap_or_default();
        json_patch::patch(&mut doc, &patch).map_err(|_| UpgradeError::NoSpec)?;
        let upgraded: Pod = serde_json::from_value(doc).map_err(|_| UpgradeError::NoSpec)?;
        let spec = upgraded.spec.clone().unwrap_or_default();
        assert_eq!(spec.containers[0].image.as_deref(), Some("logtail:2"));
        assert_eq!(spec.containers[1].image.as_deref(), Some("nginx"));
        let f = pod_facts(&v2, &upgraded);
        assert!(f.updated && f.upgradable);
        // The kubelet has not restarted the sidecar yet: old imageID and image in status.
        assert!(!f.consistent);
        let mut restarted = upgraded.clone();
        if let Some(s) = restarted
            .status
            .as_mut()
            .and_then(|s| s.container_statuses.as_mut())
        {
            s[0].image = "logtail:2".into();
            s[0].image_id = "logtail:2@sha256:2".into();
        }
        assert!(pod_facts(&v2, &restarted).consistent);
        Ok(())
    }
}
