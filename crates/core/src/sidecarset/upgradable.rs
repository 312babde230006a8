//! The `SidecarSetUpgradable` Pod condition (set by upstream's SidecarSet processor when it finds a Pod
//! it cannot upgrade, and cleared once the Pod is upgraded): whether every SidecarSet
//! injected into the Pod can still upgrade it in place.
//!
//! One condition serves all SidecarSets of the Pod: its message is a JSON map from SidecarSet name to
//! whether that SidecarSet can upgrade the Pod, and the condition is True only while no entry is
//! false. Each SidecarSet's controller writes its own entry, so the patch keeps the others' entries
//! and fails if the condition changed since it was read (a concurrent writer) rather than lose one.
//!
//! As OpenKruise, a Pod a SidecarSet upgraded in place carries the condition with that SidecarSet's
//! entry `true`. The entry is level-triggered ([`wanted_entry`]): every reconcile compares it with
//! what the SidecarSet can do for the Pod now, so a write that lost a race, or a SidecarSet that
//! became upgradable again (its non-image change reverted), is put right by the next reconcile.
//! A Pod no SidecarSet ever upgraded or refused keeps no condition (absent means upgradable).

use std::collections::BTreeMap;

use json_patch::{AddOperation, Patch, PatchOperation, ReplaceOperation, TestOperation};
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kruise_api::sidecarset::CONDITION_SIDECARSET_UPGRADABLE;
use serde_json::{Value, json};

use super::upgrade::{PodFacts, UpgradeError, guard, ptr};

/// Reason of the condition when it is True.
pub const REASON_ALL_UPGRADABLE: &str = "AllSidecarsetUpgradable";
/// Reason of the condition when some SidecarSet changed more than images.
pub const REASON_UPDATE_IMMUTABLE_FIELD: &str = "UpdateImmutableField";

/// SidecarSet `sidecarset`'s entry in the Pod's `SidecarSetUpgradable` condition: `None` when the
/// Pod has no such condition, the message is not a JSON map, or it has no boolean entry for it.
pub fn upgradable_entry(pod: &Pod, sidecarset: &str) -> Option<bool> {
    let condition = crate::pods::condition(pod, CONDITION_SIDECARSET_UPGRADABLE)?;
    let entries: BTreeMap<String, Value> =
        serde_json::from_str(condition.message.as_deref()?).ok()?;
    entries.get(sidecarset)?.as_bool()
}

/// The entry the SidecarSet should write now for a Pod it does not upgrade this round, from the
/// Pod's facts and whether the upgrade plan found it not upgradable; `None` when the recorded entry
/// is already right (or absent and not needed).
///
/// - not upgradable (a non-image change is pending) → `false`;
/// - updated or upgradable in place → `true` when the entry says `false` (the SidecarSet became
///   upgradable again), or when the SidecarSet upgraded the Pod in place and the entry is not yet
///   `true` (the write after the upgrade was lost);
/// - otherwise nothing: a Pod injected with the current sidecars and never refused needs no entry.
pub fn wanted_entry(facts: &PodFacts, not_upgradable: bool) -> Option<bool> {
    if not_upgradable {
        return (facts.entry != Some(false)).then_some(false);
    }
    if !(facts.updated || facts.upgradable) {
        return None;
    }
    let flip_back = facts.entry == Some(false);
    let after_upgrade = facts.updated && facts.upgraded_in_place && facts.entry != Some(true);
    (flip_back || after_upgrade).then_some(true)
}

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
/// `None` when the condition would not change.
///
/// The patch is guarded by `test` operations on the conditions, not on the resourceVersion, so the
/// kubelet's status updates (container states, its own conditions' times) do not get in the way,
/// while another SidecarSet writing its entry at the same moment does:
/// - replacing the condition tests that it is still what was read;
/// - adding it tests the type of every condition read, appends, and tests that the appended one
///   landed right after them (so no SidecarSetUpgradable condition was added meanwhile);
/// - a Pod without any condition tests the resourceVersion (the kubelet has not reported yet).
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
    let next = next_condition(current, index, sidecarset, upgradable, now)?;
    if current == Some(&next) {
        return Ok(None);
    }
    let value = serde_json::to_value(&next).unwrap_or_default();
    let mut ops = Vec::new();
    match (status, conditions, index) {
        (None, _, _) => {
            ops.push(guard(pod)?);
            ops.push(PatchOperation::Add(AddOperation {
                path: ptr(["status"]),
                value: json!({ "conditions": [value] }),
            }));
        }
        (Some(_), None, _) => {
            ops.push(guard(pod)?);
            ops.push(PatchOperation::Add(AddOperation {
                path: ptr(["status", "conditions"]),
                value: json!([value]),
            }));
        }
        (Some(_), Some(_), Some(i)) => {
            let i = i.to_string();
            ops.extend(test_condition(&i, current));
            ops.push(PatchOperation::Replace(ReplaceOperation {
                path: ptr(["status", "conditions", &i]),
                value,
            }));
        }
        (Some(_), Some(read), None) => {
            for (i, c) in read.iter().enumerate() {
                ops.push(PatchOperation::Test(TestOperation {
                    path: ptr(["status", "conditions", &i.to_string(), "type"]),
                    value: json!(c.type_),
                }));
            }
            ops.push(PatchOperation::Add(AddOperation {
                path: ptr(["status", "conditions", "-"]),
                value,
            }));
            ops.extend(test_condition(&read.len().to_string(), Some(&next)));
        }
    }
    Ok(Some(Patch(ops)))
}

/// Tests that condition `index` has the type, status and message of `condition`. Fields, not the
/// whole condition: the API serves fields the client omits (`lastProbeTime: null`), which would
/// make a whole-object test fail on every Pod.
fn test_condition(index: &str, condition: Option<&PodCondition>) -> Vec<PatchOperation> {
    let Some(c) = condition else {
        return Vec::new();
    };
    let mut fields = vec![("type", json!(c.type_)), ("status", json!(c.status))];
    if let Some(message) = &c.message {
        fields.push(("message", json!(message)));
    }
    fields
        .into_iter()
        .map(|(field, value)| {
            PatchOperation::Test(TestOperation {
                path: ptr(["status", "conditions", index, field]),
                value,
            })
        })
        .collect()
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
                "no condition, upgraded: True with its entry, as OpenKruise",
                Some(vec![ready()]),
                "a",
                true,
                true,
                t("True", r#"{"a":true}"#, 100),
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
        // Replacing tests the condition as read (type, status, message), not the resourceVersion.
        assert_eq!(
            ops,
            json!([
                {"op": "test", "path": "/status/conditions/1/type", "value": "SidecarSetUpgradable"},
                {"op": "test", "path": "/status/conditions/1/status", "value": "True"},
                {"op": "test", "path": "/status/conditions/1/message", "value": r#"{"a":true}"#},
                {"op": "replace", "path": "/status/conditions/1", "value": ops[3]["value"]},
            ])
        );
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
        // Adding the condition tests the types read and where it landed, not the resourceVersion:
        // the kubelet's updates pass ...
        let fresh = pod(Some(vec![ready()]));
        let add = upgradable_condition_patch(&fresh, "a", false, at(100))?.unwrap_or_default();
        let ops = serde_json::to_value(&add).unwrap_or_default();
        assert_eq!(
            ops[0],
            json!({"op": "test", "path": "/status/conditions/0/type", "value": "Ready"})
        );
        assert_eq!(ops[1]["op"], "add");
        assert_eq!(ops[1]["path"], "/status/conditions/-");
        assert_eq!(ops[2]["path"], "/status/conditions/1/type");
        let mut moved = serde_json::to_value(&fresh).unwrap_or_default();
        moved["metadata"]["resourceVersion"] = json!("8");
        moved["status"]["conditions"][0]["status"] = json!("False");
        assert!(json_patch::patch(&mut moved, &add).is_ok());
        // ... another SidecarSet's condition added meanwhile does not (no second condition) ...
        let mut raced = serde_json::to_value(&fresh).unwrap_or_default();
        if let Some(c) = raced["status"]["conditions"].as_array_mut() {
            c.push(serde_json::to_value(condition("True", r#"{"b":true}"#, 5)).unwrap_or_default());
        }
        assert!(json_patch::patch(&mut raced, &add).is_err());
        // ... nor a condition of another type added by someone else.
        let mut other = serde_json::to_value(&fresh).unwrap_or_default();
        if let Some(c) = other["status"]["conditions"].as_array_mut() {
            c.insert(0, json!({"type": "PodScheduled", "status": "True"}));
        }
        assert!(json_patch::patch(&mut other, &add).is_err());
        Ok(())
    }

    #[test]
    fn wanted_entries() {
        let facts = |updated, upgradable, entry, upgraded_in_place| PodFacts {
            updated,
            upgradable,
            entry,
            upgraded_in_place,
            ..PodFacts::default()
        };
        // (case, facts, found not upgradable by the plan, entry to write)
        let cases = [
            (
                "refused, no entry yet",
                facts(false, false, None, false),
                true,
                Some(false),
            ),
            (
                "refused, was true",
                facts(false, false, Some(true), true),
                true,
                Some(false),
            ),
            (
                "refused and recorded",
                facts(false, false, Some(false), false),
                true,
                None,
            ),
            (
                "non-image change reverted: updated again, flips back",
                facts(true, true, Some(false), false),
                false,
                Some(true),
            ),
            (
                "upgradable again (an image change pending): flips back",
                facts(false, true, Some(false), true),
                false,
                Some(true),
            ),
            (
                "upgraded in place, the write after it lost",
                facts(true, true, None, true),
                false,
                Some(true),
            ),
            (
                "upgraded in place and recorded",
                facts(true, true, Some(true), true),
                false,
                None,
            ),
            (
                "injected with the current sidecars, never refused: no condition",
                facts(true, true, None, false),
                false,
                None,
            ),
            (
                "waiting for its upgrade, never refused",
                facts(false, true, None, true),
                false,
                None,
            ),
            (
                "not upgradable but outside the plan (paused, canary selector): left alone",
                facts(false, false, Some(true), true),
                false,
                None,
            ),
        ];
        for (name, f, refused, want) in cases {
            assert_eq!(wanted_entry(&f, refused), want, "{name}");
        }
    }

    #[test]
    fn entry_read_back() {
        let p = pod(Some(vec![
            ready(),
            condition("False", r#"{"a":true,"b":false}"#, 5),
        ]));
        assert_eq!(upgradable_entry(&p, "a"), Some(true));
        assert_eq!(upgradable_entry(&p, "b"), Some(false));
        assert_eq!(upgradable_entry(&p, "c"), None);
        assert_eq!(upgradable_entry(&pod(Some(vec![ready()])), "a"), None);
        let garbled = pod(Some(vec![condition("False", "not json", 5)]));
        assert_eq!(upgradable_entry(&garbled, "a"), None);
    }

    #[test]
    fn bad_input() {
        let p = pod(Some(vec![ready(), condition("False", "not json", 5)]));
        assert!(matches!(
            upgradable_condition_patch(&p, "a", true, at(1)),
            Err(UpgradeError::InvalidField { field, .. }) if field == "status.conditions[1].message"
        ));
        let mut fresh = pod(None);
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
