//! SidecarSet history (upstream `pkg/controller/sidecarset/sidecarset_history.go`): one ControllerRevision per distinct set of sidecars, kept in
//! the manager's namespace (a SidecarSet is cluster-scoped), labelled `kruise.io/sidecarset-name`.
//!
//! A revision records only what injection restores from it — `volumes`, `containers`,
//! `initContainers`, `imagePullSecrets` and `patchPodMetadata`, under `"$patch": "replace"` — and
//! carries the SidecarSet's annotations, so that its hash annotations travel with it: a Pod injected
//! from a pinned revision (`injectionStrategy.revision`) records the hashes of that revision.
//!
//! Numbering, hashing, naming and the choice between re-using and creating a revision are the
//! generic ones of [`crate::revision`]; what differs from a CloneSet is the data, the namespace, the
//! labels and how history is truncated: the limit counts every revision (minimum 1), the newest is
//! never deleted, nor any revision a Pod records or `injectionStrategy.revision` pins.

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use kruise_api::sidecarset::hash::ANNOTATION_HASH;
use kruise_api::sidecarset::v1beta1::SidecarSet;
use kruise_api::sidecarset::{LABEL_CUSTOM_VERSION, LABEL_SIDECARSET_NAME};
use serde_json::{Map, Value};

use super::parse_upgrade_specs;
use crate::revision::go_fields;
use crate::revision::{
    DEFAULT_REVISION_HISTORY_LIMIT, Parent, RevisionError, build_revision, sort_revisions,
};

/// The SidecarSet spec fields a revision records; injection restores exactly these.
const RECORDED_FIELDS: [&str; 5] = [
    "volumes",
    "containers",
    "initContainers",
    "imagePullSecrets",
    "patchPodMetadata",
];

/// The revision data: `{"spec": {"$patch": "replace", <recorded fields>}}`. A field the SidecarSet
/// leaves empty is recorded as `null`, so that restoring the revision clears it.
pub fn revision_data(ss: &SidecarSet) -> Result<Value, RevisionError> {
    let spec = match serde_json::to_value(&ss.spec)? {
        Value::Object(map) => map,
        // A struct always serializes to an object.
        _ => Map::new(),
    };
    let mut recorded = Map::new();
    recorded.insert("$patch".into(), Value::String("replace".into()));
    for field in RECORDED_FIELDS {
        let mut value = spec.get(field).cloned().unwrap_or(Value::Null);
        // The empty fields Go writes, so that the revision hashes as OpenKruise's does.
        for item in value.as_array_mut().into_iter().flatten() {
            match field {
                "containers" | "initContainers" => go_fields::sidecar_container(item),
                "volumes" => go_fields::volume(item),
                _ => {}
            }
        }
        recorded.insert(field.into(), value);
    }
    let mut data = Map::new();
    data.insert("spec".into(), Value::Object(recorded));
    Ok(Value::Object(data))
}

/// A new ControllerRevision of the SidecarSet in `namespace`, numbered `number`: named
/// `<sidecarset>-<hash>`, labelled with the SidecarSet's labels, `kruise.io/sidecarset-name` and the
/// custom version, annotated with the SidecarSet's annotations, and owned by the SidecarSet so that the
/// garbage collector removes the history with it.
pub fn new_revision(
    ss: &SidecarSet,
    namespace: &str,
    number: i64,
    collision_count: Option<i32>,
) -> Result<ControllerRevision, RevisionError> {
    let name = ss.metadata.name.as_deref().ok_or(RevisionError::NoName)?;
    let mut labels = ss.metadata.labels.clone().unwrap_or_default();
    labels.insert(LABEL_SIDECARSET_NAME.into(), name.into());
    if !ss.spec.custom_version.is_empty() {
        labels.insert(LABEL_CUSTOM_VERSION.into(), ss.spec.custom_version.clone());
    }
    build_revision(
        Parent {
            kind: "SidecarSet",
            meta: &ss.metadata,
        },
        Some(namespace.into()),
        labels,
        revision_data(ss)?,
        number,
        collision_count,
    )
}

/// The custom-version label the revision should carry when it differs from what it has (a revision
/// re-used for a SidecarSet whose `customVersion` changed), as a merge patch of its labels.
pub fn custom_version_patch(ss: &SidecarSet, revision: &ControllerRevision) -> Option<Value> {
    let want = ss.spec.custom_version.as_str();
    let have = revision
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_CUSTOM_VERSION))
        .map(String::as_str)
        .unwrap_or_default();
    if want.is_empty() || want == have {
        return None;
    }
    Some(serde_json::json!({"metadata": {"labels": {LABEL_CUSTOM_VERSION: want}}}))
}

/// The revisions in use: the ones Pods record for this SidecarSet (`controllerRevision` in their
/// `kruise.io/sidecarset-hash` entry), and the one `injectionStrategy.revision` pins — by name, or the
/// newest with the pinned custom version.
pub fn live_revisions<'p>(
    ss: &SidecarSet,
    pods: impl IntoIterator<Item = &'p Pod>,
    revisions: &[ControllerRevision],
) -> BTreeSet<String> {
    let name = ss.metadata.name.as_deref().unwrap_or_default();
    let mut live: BTreeSet<String> = pods
        .into_iter()
        .filter_map(|pod| {
            let annotations = pod.metadata.annotations.as_ref()?;
            parse_upgrade_specs(annotations, ANNOTATION_HASH)
                .ok()?
                .remove(name)
                .map(|spec| spec.controller_revision)
        })
        .filter(|r| !r.is_empty())
        .collect();
    if let Some(pinned) = &ss.spec.injection_strategy.revision {
        if let Some(revision_name) = &pinned.revision_name {
            live.insert(revision_name.clone());
        }
        if let Some(version) = &pinned.custom_version {
            let mut versioned: Vec<&ControllerRevision> = revisions
                .iter()
                .filter(|r| {
                    r.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(LABEL_CUSTOM_VERSION))
                        == Some(version)
                })
                .collect();
            sort_revisions(&mut versioned);
            if let Some(newest) = versioned.last().and_then(|r| r.metadata.name.clone()) {
                live.insert(newest);
            }
        }
    }
    live
}

/// How many revisions the SidecarSet keeps (`revisionHistoryLimit`, at least 1): with no more than
/// this, nothing is deleted and no Pod need be read to know which revisions are live.
pub fn history_limit(ss: &SidecarSet) -> usize {
    let limit = ss
        .spec
        .revision_history_limit
        .unwrap_or(DEFAULT_REVISION_HISTORY_LIMIT)
        .max(1);
    usize::try_from(limit).unwrap_or(1)
}

/// The revisions to delete so that at most `revisionHistoryLimit` (default 10, at least 1) remain:
/// the oldest first, never the newest and never a live one (so more may remain when many are live).
pub fn revisions_to_delete<'a>(
    ss: &SidecarSet,
    revisions: &'a [ControllerRevision],
    live: &BTreeSet<String>,
) -> Vec<&'a ControllerRevision> {
    let limit = history_limit(ss);
    let mut sorted: Vec<&ControllerRevision> = revisions.iter().collect();
    sort_revisions(&mut sorted);
    let mut excess = sorted.len().saturating_sub(limit);
    let Some((_newest, older)) = sorted.split_last() else {
        return Vec::new();
    };
    let mut doomed = Vec::new();
    for revision in older {
        if excess == 0 {
            break;
        }
        let name = revision.metadata.name.as_deref().unwrap_or_default();
        if live.contains(name) {
            continue;
        }
        doomed.push(*revision);
        excess -= 1;
    }
    doomed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::revision::{UpdateRevision, choose_update_revision, next_revision_number};
    use k8s_openapi::api::core::v1::Container;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kruise_api::sidecarset::v1beta1::{
        SidecarContainer, SidecarSetInjectRevision, SidecarSetSpec,
    };
    use serde_json::json;

    fn sidecarset(image: &str) -> SidecarSet {
        SidecarSet {
            metadata: ObjectMeta {
                name: Some("logtail".into()),
                uid: Some("uid-1".into()),
                labels: Some([("team".to_string(), "infra".to_string())].into()),
                annotations: Some([(ANNOTATION_HASH.to_string(), format!("h-{image}"))].into()),
                ..ObjectMeta::default()
            },
            spec: SidecarSetSpec {
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
            status: None,
        }
    }

    fn numbered(ss: &SidecarSet, number: i64) -> ControllerRevision {
        let mut r = new_revision(ss, "kruise-system", number, None).expect("revision");
        r.revision = number;
        r
    }

    fn pod_recording(revision: &str) -> Pod {
        let spec = json!({"logtail": {"hash": "h", "sidecarSetName": "logtail", "controllerRevision": revision}});
        Pod {
            metadata: ObjectMeta {
                annotations: Some([(ANNOTATION_HASH.to_string(), spec.to_string())].into()),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
    }

    #[test]
    fn data_records_only_the_injected_fields() -> Result<(), RevisionError> {
        let data = revision_data(&sidecarset("logtail:1"))?;
        assert_eq!(
            data,
            json!({"spec": {
                "$patch": "replace",
                "volumes": null,
                "containers": [{"name": "logtail", "image": "logtail:1", "resources": {}, "upgradeStrategy": {}, "shareVolumePolicy": {}}],
                "initContainers": null,
                "imagePullSecrets": null,
                "patchPodMetadata": null,
            }})
        );
        Ok(())
    }

    #[test]
    fn revision_metadata() -> Result<(), RevisionError> {
        let mut ss = sidecarset("logtail:1");
        ss.spec.custom_version = "v1".into();
        let r = new_revision(&ss, "kruise-system", 3, None)?;
        let name = r.metadata.name.clone().unwrap_or_default();
        assert!(name.starts_with("logtail-"), "{name}");
        assert_eq!(r.metadata.namespace.as_deref(), Some("kruise-system"));
        assert_eq!(r.revision, 3);
        let labels = r.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels.get(LABEL_SIDECARSET_NAME).map(String::as_str),
            Some("logtail")
        );
        assert_eq!(
            labels.get(LABEL_CUSTOM_VERSION).map(String::as_str),
            Some("v1")
        );
        assert_eq!(labels.get("team").map(String::as_str), Some("infra"));
        assert_eq!(
            r.metadata
                .annotations
                .unwrap_or_default()
                .get(ANNOTATION_HASH)
                .map(String::as_str),
            Some("h-logtail:1")
        );
        let owner = &r.metadata.owner_references.unwrap_or_default()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
            ("SidecarSet", "uid-1", Some(true))
        );
        // A collision count changes the name; another image changes it too.
        let other = new_revision(&ss, "kruise-system", 3, Some(1))?;
        assert_ne!(other.metadata.name, Some(name.clone()));
        let image = new_revision(&sidecarset("logtail:2"), "kruise-system", 3, None)?;
        assert_ne!(image.metadata.name, Some(name));
        Ok(())
    }

    #[test]
    fn an_unchanged_sidecarset_reuses_its_newest_revision_and_a_rollback_renumbers() {
        let v1 = numbered(&sidecarset("logtail:1"), 1);
        let v2 = numbered(&sidecarset("logtail:2"), 2);
        let history = vec![v1.clone(), v2.clone()];
        let again = numbered(&sidecarset("logtail:2"), next_revision_number(&history));
        assert_eq!(
            choose_update_revision(&history, again),
            UpdateRevision::Latest(&history[1])
        );
        let back = numbered(&sidecarset("logtail:1"), next_revision_number(&history));
        assert_eq!(
            choose_update_revision(&history, back),
            UpdateRevision::Renumber {
                revision: &history[0],
                number: 3
            }
        );
    }

    #[test]
    fn custom_version_label_follows_the_spec() {
        let mut ss = sidecarset("logtail:1");
        let r = numbered(&ss, 1);
        assert_eq!(custom_version_patch(&ss, &r), None);
        ss.spec.custom_version = "v2".into();
        assert_eq!(
            custom_version_patch(&ss, &r),
            Some(json!({"metadata": {"labels": {LABEL_CUSTOM_VERSION: "v2"}}}))
        );
        let r = numbered(&ss, 1);
        assert_eq!(custom_version_patch(&ss, &r), None);
    }

    #[test]
    fn live_revisions_are_pod_records_and_pins() {
        let mut ss = sidecarset("logtail:3");
        let mut old = sidecarset("logtail:1");
        old.spec.custom_version = "stable".into();
        let mut older = sidecarset("logtail:0");
        older.spec.custom_version = "stable".into();
        let revisions = vec![numbered(&older, 1), numbered(&old, 2), numbered(&ss, 3)];
        let name = |i: usize| revisions[i].metadata.name.clone().unwrap_or_default();
        let pods = [pod_recording(&name(2)), pod_recording(""), Pod::default()];
        assert_eq!(
            live_revisions(&ss, &pods, &revisions),
            BTreeSet::from([name(2)])
        );
        ss.spec.injection_strategy.revision = Some(SidecarSetInjectRevision {
            custom_version: Some("stable".into()),
            ..SidecarSetInjectRevision::default()
        });
        assert_eq!(
            live_revisions(&ss, &pods, &revisions),
            BTreeSet::from([name(1), name(2)])
        );
        ss.spec.injection_strategy.revision = Some(SidecarSetInjectRevision {
            revision_name: Some("pinned".into()),
            ..SidecarSetInjectRevision::default()
        });
        assert_eq!(
            live_revisions(&ss, &pods, &revisions),
            BTreeSet::from(["pinned".to_string(), name(2)])
        );
    }

    #[test]
    fn truncation_table() {
        let revisions: Vec<ControllerRevision> = (1..=5)
            .map(|n| numbered(&sidecarset(&format!("logtail:{n}")), n))
            .collect();
        let name = |i: usize| revisions[i].metadata.name.clone().unwrap_or_default();
        let names = |doomed: Vec<&ControllerRevision>| -> Vec<i64> {
            doomed.iter().map(|r| r.revision).collect()
        };
        // (limit, live revision indexes, revisions deleted by number)
        let cases: Vec<(Option<i32>, Vec<usize>, Vec<i64>)> = vec![
            (None, vec![], vec![]),
            (Some(5), vec![], vec![]),
            (Some(3), vec![], vec![1, 2]),
            (Some(3), vec![0], vec![2, 3]),
            (Some(1), vec![], vec![1, 2, 3, 4]),
            // The limit is at least 1: the newest always stays.
            (Some(0), vec![], vec![1, 2, 3, 4]),
            (Some(-3), vec![1, 2], vec![1, 4]),
            // Everything older is live: nothing can go.
            (Some(1), vec![0, 1, 2, 3], vec![]),
        ];
        for (limit, live, want) in cases {
            let mut ss = sidecarset("logtail:5");
            ss.spec.revision_history_limit = limit;
            let live: BTreeSet<String> = live.into_iter().map(name).collect();
            assert_eq!(
                names(revisions_to_delete(&ss, &revisions, &live)),
                want,
                "limit {limit:?} live {live:?}"
            );
        }
    }
}
