//! The `SidecarSetUpgradable` Pod condition (inventory §3.4 steps 7 and 8): whether every SidecarSet
//! injected into the Pod can still upgrade it in place.
//!
//! One condition serves all SidecarSets of the Pod: its message is a JSON map from SidecarSet name to
//! whether that SidecarSet can upgrade the Pod, and the condition is True only while no entry is
//! false. Each SidecarSet's controller writes its own entry, so the patch keeps the others' entries
//! and fails if the condition changed since it was read (a concurrent writer) rather than lose one.
//!
//! Unlike OpenKruise, a Pod that every SidecarSet can upgrade is not given the condition after each
//! upgrade: absent means upgradable, and a rollout costs one Pod write less per Pod.

use std::collections::BTreeMap;

use json_patch::{AddOperation, Patch, PatchOperation, ReplaceOperation, TestOperation};
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kruise_api::sidecarset::CONDITION_SIDECARSET_UPGRADABLE;
use serde_json::{Value, json};

use super::upgrade::{UpgradeError, guard, ptr};

/// Reason of the condition when it is True.
pub const REASON_ALL_UPGRADABLE: &str = "AllSidecarsetUpgradable";
/// Reason of the condition when some SidecarSet changed more than images.
pub const REASON_UPDATE_IMMUTABLE_FIELD: &str = "UpdateImmutableField";

/// The condition the Pod should carry once SidecarSet `sidecarset` records `upgradable`, given what
/// it carries now (`current`). The transition time moves only when the status flips.
fn next_condition(
    current: Option<&PodCondition>,
    index: Option<usize>,
    sidecarset: &str,
    upgradable: bool,
    now: Timestamp,
) -> Result<PodCondition, UpgradeError> {
    let mut entries: BTreeMap<String, Value> = match current
        .and_then(|c| c.message.as_deref())
        .filter(|m| !m.is_empty())
    {
        None => BTreeMap::new(),
        Some(text) => serde_json::from_str(text).map_err(|e| UpgradeError::InvalidField {
            field: format!("status.conditions[{}].message", index.unwrap_or_default()),
            message: format!("not a JSON map of SidecarSet name to bool: {e}"),
        })?,
    };
    entries.insert(sidecarset.to_owned(), Value::Bool(upgradable));
    // Like OpenKruise, only an explicit `false` counts against the Pod.
    let all = entries.values().all(|v| v != &Value::Bool(false));
    let (status, reason) = if all {
        ("True", REASON_ALL_UPGRADABLE)
    } else {
        ("False", REASON_UPDATE_IMMUTABLE_FIELD)
    };
    let mut next = current.cloned().unwrap_or_else(|| PodCondition {
        type_: CONDITION_SIDECARSET_UPGRADABLE.to_owned(),
        ..PodCondition::default()
    });
    if current.is_none_or(|c| c.status != status) {
        next.last_transition_time = Some(Time(now));
    }
    next.status = status.to_owned();
    next.reason = Some(reason.to_owned());
    // Serialising a sorted map of strings and JSON values cannot fail.
    next.message = Some(serde_json::to_string(&entries).unwrap_or_default());
    Ok(next)
}

/// The JSON patch, for the Pod's **status** subresource, that records whether SidecarSet
/// `sidecarset` can upgrade the Pod in place: its entry in the `SidecarSetUpgradable` condition's
/// message is set (the other SidecarSets' entries are kept), and the condition becomes True
/// (`AllSidecarsetUpgradable`) when no entry is false, else False (`UpdateImmutableField`).
///
/// `None` when the condition would not change, and when the Pod has no such condition and the
/// SidecarSet can upgrade it: an absent condition already means "upgradable", and writing it after
/// every upgrade (as OpenKruise does) would double the writes of a rollout.
///
/// Build the patch from the Pod as last seen (after an upgrade, the Pod that upgrade's patch
/// returned). Replacing the condition tests that it is still what was read — the guard against
/// another SidecarSet writing its entry at the same moment — without failing on the kubelet's
/// unrelated status updates; adding it tests the resourceVersion.
pub fn upgradable_condition_patch(
    pod: &Pod,
    sidecarset: &str,
    upgradable: bool,
    now: Timestamp,
) -> Result<Option<Patch>, UpgradeError> {
    let status = pod.status.as_ref();
    let conditions = status.and_then(|s| s.conditions.as_deref());
    let index = conditions
        .unwrap_or_default()
        .iter()
        .position(|c| c.type_ == CONDITION_SIDECARSET_UPGRADABLE);
    let current = index.and_then(|i| conditions.and_then(|c| c.get(i)));
    if current.is_none() && upgradable {
        return Ok(None);
    }
    let next = next_condition(current, index, sidecarset, upgradable, now)?;
    if current == Some(&next) {
        return Ok(None);
    }
    let value = serde_json::to_value(&next).unwrap_or_default();
    let mut ops = Vec::new();
    if current.is_none() {
        ops.push(guard(pod)?);
    }
    match (status, conditions, index) {
        (None, _, _) => ops.push(PatchOperation::Add(AddOperation {
            path: ptr(["status"]),
            value: json!({ "conditions": [value] }),
        })),
        (Some(_), None, _) => ops.push(PatchOperation::Add(AddOperation {
            path: ptr(["status", "conditions"]),
            value: json!([value]),
        })),
        (Some(_), Some(_), Some(i)) => {
            let i = i.to_string();
            ops.push(PatchOperation::Test(TestOperation {
                path: ptr(["status", "conditions", &i]),
                value: serde_json::to_value(current).unwrap_or_default(),
            }));
            ops.push(PatchOperation::Replace(ReplaceOperation {
                path: ptr(["status", "conditions", &i]),
                value,
            }));
        }
        (Some(_), Some(_), None) => ops.push(PatchOperation::Add(AddOperation {
            path: ptr(["status", "conditions", "-"]),
            value,
        })),
    }
    Ok(Some(Patch(ops)))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::PodStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn condition(status: &str, message: &str, since: i64) -> PodCondition {
        PodCondition {
            type_: CONDITION_SIDECARSET_UPGRADABLE.into(),
            status: status.into(),
            reason: Some(
                if status == "True" {
                    REASON_ALL_UPGRADABLE
                } else {
                    REASON_UPDATE_IMMUTABLE_FIELD
                }
                .into(),
            ),
            message: Some(message.into()),
            last_transition_time: Some(Time(at(since))),
            ..PodCondition::default()
        }
    }

    fn ready() -> PodCondition {
        PodCondition {
            type_: "Ready".into(),
            status: "True".into(),
            ..PodCondition::default()
        }
    }

    fn pod(conditions: Option<Vec<PodCondition>>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                resource_version: Some("7".into()),
                ..ObjectMeta::default()
            },
            spec: None,
            status: Some(PodStatus {
                conditions,
                ..PodStatus::default()
            }),
        }
    }

    /// The Pod's SidecarSetUpgradable condition once the patch (if any) is applied.
    fn applied(p: &Pod, name: &str, upgradable: bool) -> (bool, Option<PodCondition>) {
        let patch = upgradable_condition_patch(p, name, upgradable, at(100)).unwrap_or_default();
        let mut doc = serde_json::to_value(p).unwrap_or_default();
        if let Some(patch) = &patch {
            assert!(json_patch::patch(&mut doc, patch).is_ok(), "{patch:?}");
        }
        let after: Pod = serde_json::from_value(doc).unwrap_or_default();
        let found = after
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == CONDITION_SIDECARSET_UPGRADABLE);
        (patch.is_some(), found)
    }

    /// (case, the Pod's conditions, SidecarSet, upgradable, whether a patch is due, the condition after)
    type Case = (
        &'static str,
        Option<Vec<PodCondition>>,
        &'static str,
        bool,
        bool,
        Option<PodCondition>,
    );

    #[test]
    fn transitions() {
        let t = |status: &str, message: &str, since: i64| Some(condition(status, message, since));
        let cases: Vec<Case> = vec![
            (
                "no conditions, not upgradable",
                None,
                "a",
                false,
                true,
                t("False", r#"{"a":false}"#, 100),
            ),
            (
                "no condition, upgraded: absent already means upgradable",
                Some(vec![ready()]),
                "a",
                true,
                false,
                None,
            ),
            (
                "same entry again: nothing to write",
                Some(vec![ready(), condition("False", r#"{"a":false}"#, 5)]),
                "a",
                false,
                false,
                t("False", r#"{"a":false}"#, 5),
            ),
            (
                "another SidecarSet's false entry keeps it False, time kept",
                Some(vec![condition("False", r#"{"b":false}"#, 5)]),
                "a",
                true,
                true,
                t("False", r#"{"a":true,"b":false}"#, 5),
            ),
            (
                "the last false entry turns true: True from now",
                Some(vec![condition("False", r#"{"a":false,"b":true}"#, 5)]),
                "a",
                true,
                true,
                t("True", r#"{"a":true,"b":true}"#, 100),
            ),
            (
                "True turns False",
                Some(vec![ready(), condition("True", r#"{"b":true}"#, 5)]),
                "a",
                false,
                true,
                t("False", r#"{"a":false,"b":true}"#, 100),
            ),
            (
                "an empty message starts the map",
                Some(vec![condition("True", "", 5)]),
                "a",
                true,
                true,
                t("True", r#"{"a":true}"#, 5),
            ),
        ];
        for (name, conditions, ss, upgradable, writes, want) in cases {
            let (wrote, got) = applied(&pod(conditions), ss, upgradable);
            assert_eq!(wrote, writes, "{name}");
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn guarded_and_in_place() -> Result<(), UpgradeError> {
        let p = pod(Some(vec![ready(), condition("True", r#"{"a":true}"#, 5)]));
        let patch = upgradable_condition_patch(&p, "a", false, at(100))?.unwrap_or_default();
        let ops = serde_json::to_value(&patch).unwrap_or_default();
        // Replacing tests the condition as read, not the resourceVersion.
        assert_eq!(ops[0]["op"], "test");
        assert_eq!(ops[0]["path"], "/status/conditions/1");
        assert_eq!(ops[0]["value"]["message"], r#"{"a":true}"#);
        assert_eq!(ops[1]["op"], "replace");
        assert_eq!(ops[1]["path"], "/status/conditions/1");
        // The Ready condition is left alone.
        let mut doc = serde_json::to_value(&p).unwrap_or_default();
        assert!(json_patch::patch(&mut doc, &patch).is_ok());
        assert_eq!(doc["status"]["conditions"][0]["type"], "Ready");
        // The kubelet's updates (another resourceVersion, Ready flipping) do not get in the way ...
        let mut moved = serde_json::to_value(&p).unwrap_or_default();
        moved["metadata"]["resourceVersion"] = json!("8");
        moved["status"]["conditions"][0]["status"] = json!("False");
        assert!(json_patch::patch(&mut moved, &patch).is_ok());
        // ... another SidecarSet's entry written meanwhile does.
        let mut raced = serde_json::to_value(&p).unwrap_or_default();
        raced["status"]["conditions"][1]["message"] = json!(r#"{"a":true,"b":false}"#);
        assert!(json_patch::patch(&mut raced, &patch).is_err());
        // Adding the condition tests the resourceVersion.
        let fresh = pod(Some(vec![ready()]));
        let add = upgradable_condition_patch(&fresh, "a", false, at(100))?.unwrap_or_default();
        let ops = serde_json::to_value(&add).unwrap_or_default();
        assert_eq!(
            ops[0],
            json!({"op": "test", "path": "/metadata/resourceVersion", "value": "7"})
        );
        Ok(())
    }

    #[test]
    fn bad_input() {
        let p = pod(Some(vec![ready(), condition("False", "not json", 5)]));
        assert!(matches!(
            upgradable_condition_patch(&p, "a", true, at(1)),
            Err(UpgradeError::InvalidField { field, .. }) if field == "status.conditions[1].message"
        ));
        let mut fresh = pod(Some(vec![ready()]));
        fresh.metadata.resource_version = None;
        assert_eq!(
            upgradable_condition_patch(&fresh, "a", false, at(1)),
            Err(UpgradeError::NoResourceVersion)
        );
        // A Pod without status gets one.
        let mut bare = pod(None);
        bare.status = None;
        let (wrote, got) = applied(&bare, "a", false);
        assert!(wrote);
        assert_eq!(got.map(|c| c.status), Some("False".into()));
    }
}
