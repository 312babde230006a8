//! Lifecycle hooks (upstream `pkg/util/lifecycle`): a workload moves its Pods through the
//! `lifecycle.apps.kruise.io/state` states, and holds a Pod in `PreparingDelete` or `PreparingUpdate`
//! while a hook (a label or finalizer some other controller owns) is still on it.
//!
//! Everything here decides; the caller writes the patches.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kruise_api::keys;
use kruise_api::pub_types::{Lifecycle, LifecycleHook};
use serde_json::{Value, json};

use crate::pods::{self, LifecycleState};

/// The label value of a state (`Unset` and `Unknown` have none and are never written).
pub fn state_value(state: LifecycleState) -> Option<&'static str> {
    Some(match state {
        LifecycleState::PreparingNormal => keys::LIFECYCLE_PREPARING_NORMAL,
        LifecycleState::Normal => keys::LIFECYCLE_NORMAL,
        LifecycleState::PreparingUpdate => keys::LIFECYCLE_PREPARING_UPDATE,
        LifecycleState::Updating => keys::LIFECYCLE_UPDATING,
        LifecycleState::Updated => keys::LIFECYCLE_UPDATED,
        LifecycleState::PreparingDelete => keys::LIFECYCLE_PREPARING_DELETE,
        LifecycleState::Unset | LifecycleState::Unknown => return None,
    })
}

fn has_finalizer(pod: &Pod, finalizer: &str) -> bool {
    pod.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|x| x == finalizer))
}

/// Some part of the hook is on the Pod: one of its finalizers, or one of its labels with the hook's
/// value. Such a Pod is held by whoever owns the hook.
pub fn is_hooked(hook: Option<&LifecycleHook>, pod: &Pod) -> bool {
    let Some(hook) = hook else {
        return false;
    };
    hook.finalizers_handler
        .iter()
        .any(|f| has_finalizer(pod, f))
        || hook
            .labels_handler
            .iter()
            .any(|(k, v)| pods::label(pod, k) == Some(v.as_str()))
}

/// Every part of the hook is on the Pod (a hook with no labels or finalizers is trivially all
/// hooked). `None` is never hooked.
pub fn is_all_hooked(hook: Option<&LifecycleHook>, pod: &Pod) -> bool {
    let Some(hook) = hook else {
        return false;
    };
    hook.finalizers_handler
        .iter()
        .all(|f| has_finalizer(pod, f))
        && hook
            .labels_handler
            .iter()
            .all(|(k, v)| pods::label(pod, k) == Some(v.as_str()))
}

/// Whether any hook asks for the Pod to be marked NotReady (`markPodNotReady`).
pub fn marks_pod_not_ready(lifecycle: Option<&Lifecycle>) -> bool {
    lifecycle.is_some_and(|l| {
        [&l.pre_delete, &l.in_place_update, &l.pre_normal]
            .into_iter()
            .flatten()
            .any(|h| h.mark_pod_not_ready)
    })
}

/// Whether moving a Pod to `state` also sets `KruisePodReady` back to True: the state leaves the
/// hooked states and some hook marks Pods not ready while it holds them.
pub fn releases_pod_ready(state: LifecycleState, lifecycle: Option<&Lifecycle>) -> bool {
    matches!(state, LifecycleState::Normal | LifecycleState::Updated)
        && marks_pod_not_ready(lifecycle)
}

/// The merge patch that moves a Pod to `state`, stamping `lifecycle.apps.kruise.io/timestamp`
/// (RFC 3339, seconds) as upstream does. `None` for states that have no label value.
pub fn state_patch(state: LifecycleState, now: Timestamp) -> Option<Value> {
    let value = state_value(state)?;
    Some(json!({
        "metadata": {
            "labels": { keys::LABEL_LIFECYCLE_STATE: value },
            "annotations": { keys::ANNOTATION_LIFECYCLE_TIMESTAMP: timestamp_value(now) },
        }
    }))
}

/// The value of `lifecycle.apps.kruise.io/timestamp` for a move at `now` (RFC 3339, seconds).
pub fn timestamp_value(now: Timestamp) -> String {
    now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The state after an update has finished (or was found unnecessary): `Updated` while an
/// `inPlaceUpdate` hook exists and is not fully back on the Pod (its owner still has to act after the
/// update), else `Normal`.
fn after_update(lifecycle: Option<&Lifecycle>, pod: &Pod) -> LifecycleState {
    let hook = lifecycle.and_then(|l| l.in_place_update.as_ref());
    if hook.is_some() && !is_all_hooked(hook, pod) {
        LifecycleState::Updated
    } else {
        LifecycleState::Normal
    }
}

/// What the refresh of a Pod (the first step of every update, before any Pod is chosen) does to its
/// lifecycle state, if anything.
///
/// - `PreparingNormal` → `Normal` once the Pod is scheduled and, with a `preNormal` hook, once the
///   hook is all on the Pod;
/// - `PreparingUpdate` of a Pod already at the update revision (the update was rolled back) →
///   `Updated`/`Normal` by the rule of [`after_update`];
/// - `Updating` → the same, once the in-place update has completed;
/// - `Updated` → `Normal` once there is no in-place hook or it is all back on the Pod.
pub fn refresh_transition(
    lifecycle: Option<&Lifecycle>,
    pod: &Pod,
    at_update_revision: bool,
    in_place_completed: bool,
) -> Option<LifecycleState> {
    refresh_transition_with(
        RefreshRules::default(),
        lifecycle,
        pod,
        at_update_revision,
        in_place_completed,
    )
}

/// Where workloads differ in [`refresh_transition`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RefreshRules {
    /// `PreparingNormal` → `Normal` waits for the Pod to be scheduled (CloneSet: yes; Advanced
    /// StatefulSet: no).
    pub normal_needs_scheduling: bool,
}

impl Default for RefreshRules {
    fn default() -> Self {
        Self {
            normal_needs_scheduling: true,
        }
    }
}

/// [`refresh_transition`] under a workload's [`RefreshRules`].
pub fn refresh_transition_with(
    rules: RefreshRules,
    lifecycle: Option<&Lifecycle>,
    pod: &Pod,
    at_update_revision: bool,
    in_place_completed: bool,
) -> Option<LifecycleState> {
    let next = match pods::lifecycle_state(pod) {
        LifecycleState::PreparingNormal => {
            let pre_normal = lifecycle.and_then(|l| l.pre_normal.as_ref());
            let hooks_ready = pre_normal.is_none() || is_all_hooked(pre_normal, pod);
            let scheduled = !rules.normal_needs_scheduling || pods::is_assigned(pod);
            (scheduled && hooks_ready).then_some(LifecycleState::Normal)
        }
        LifecycleState::PreparingUpdate if at_update_revision => Some(after_update(lifecycle, pod)),
        LifecycleState::Updating if in_place_completed => Some(after_update(lifecycle, pod)),
        LifecycleState::Updated => {
            let hook = lifecycle.and_then(|l| l.in_place_update.as_ref());
            (hook.is_none() || is_all_hooked(hook, pod)).then_some(LifecycleState::Normal)
        }
        _ => None,
    };
    next.filter(|n| *n != pods::lifecycle_state(pod))
}

/// Whether a Pod whose update can be made in place may be updated now, by its lifecycle state and
/// the `inPlaceUpdate` hook (the same for every workload).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InPlaceGate {
    /// Update it now (moving it to `Updating`).
    Proceed,
    /// Move it to `PreparingUpdate` first so the hook's owner can act; `readd_hook` puts the hook's
    /// labels and finalizers back (a Pod updated before, now in `Updated`).
    Prepare {
        mark_not_ready: bool,
        readd_hook: bool,
    },
    /// The hook still holds it (`PreparingUpdate`), or the refresh must first move it on
    /// (`Updated` without a hook).
    Wait,
    /// Its state forbids an update (`PreparingDelete` or a state we do not know).
    NotAllowed,
}

/// The [`InPlaceGate`] of `pod`.
pub fn in_place_gate(lifecycle: Option<&Lifecycle>, pod: &Pod) -> InPlaceGate {
    let hook = lifecycle.and_then(|l| l.in_place_update.as_ref());
    let mark_not_ready = hook.is_some_and(|h| h.mark_pod_not_ready);
    match pods::lifecycle_state(pod) {
        LifecycleState::Unset | LifecycleState::PreparingNormal | LifecycleState::Normal => {
            if is_hooked(hook, pod) {
                InPlaceGate::Prepare {
                    mark_not_ready,
                    readd_hook: false,
                }
            } else {
                InPlaceGate::Proceed
            }
        }
        LifecycleState::Updated if hook.is_some() => InPlaceGate::Prepare {
            mark_not_ready,
            readd_hook: true,
        },
        LifecycleState::Updated => InPlaceGate::Wait,
        LifecycleState::PreparingUpdate if is_hooked(hook, pod) => InPlaceGate::Wait,
        LifecycleState::PreparingUpdate | LifecycleState::Updating => InPlaceGate::Proceed,
        LifecycleState::PreparingDelete | LifecycleState::Unknown => InPlaceGate::NotAllowed,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::pods::testing::pod;

    fn hook(labels: &[(&str, &str)], finalizers: &[&str]) -> LifecycleHook {
        LifecycleHook {
            labels_handler: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
            finalizers_handler: finalizers.iter().map(|f| f.to_string()).collect(),
            mark_pod_not_ready: false,
        }
    }

    #[test]
    fn hooked_and_all_hooked() {
        let h = hook(&[("a", "x"), ("b", "y")], &["f/1"]);
        let cases: Vec<(Pod, bool, bool)> = vec![
            (pod("none").0, false, false),
            (pod("one-label").label("a", "x").0, true, false),
            (pod("wrong-value").label("a", "z").0, false, false),
            (pod("finalizer").finalizer("f/1").0, true, false),
            (
                pod("all")
                    .label("a", "x")
                    .label("b", "y")
                    .finalizer("f/1")
                    .0,
                true,
                true,
            ),
        ];
        for (p, hooked, all) in cases {
            let name = p.metadata.name.clone().unwrap_or_default();
            assert_eq!(is_hooked(Some(&h), &p), hooked, "{name} hooked");
            assert_eq!(is_all_hooked(Some(&h), &p), all, "{name} all hooked");
            assert!(!is_hooked(None, &p) && !is_all_hooked(None, &p));
        }
        // An empty hook is all hooked on any Pod but never holds one.
        let empty = hook(&[], &[]);
        assert!(is_all_hooked(Some(&empty), &pod("x").0));
        assert!(!is_hooked(Some(&empty), &pod("x").0));
    }

    #[test]
    #[allow(clippy::type_complexity)]
    fn refresh_transitions() {
        let in_place = Lifecycle {
            in_place_update: Some(hook(&[("upd", "true")], &[])),
            ..Lifecycle::default()
        };
        let pre_normal = Lifecycle {
            pre_normal: Some(hook(&[("ok", "true")], &[])),
            ..Lifecycle::default()
        };
        use LifecycleState::*;
        let state = |s: &str| pod("p").label(keys::LABEL_LIFECYCLE_STATE, s);
        // (lifecycle, pod, at update revision, completed, expected)
        let cases: Vec<(
            &str,
            Option<&Lifecycle>,
            Pod,
            bool,
            bool,
            Option<LifecycleState>,
        )> = vec![
            (
                "unscheduled stays",
                None,
                state("PreparingNormal").0,
                true,
                true,
                None,
            ),
            (
                "scheduled becomes Normal",
                None,
                state("PreparingNormal").node("n1").0,
                true,
                true,
                Some(Normal),
            ),
            (
                "preNormal hook missing",
                Some(&pre_normal),
                state("PreparingNormal").node("n1").0,
                true,
                true,
                None,
            ),
            (
                "preNormal hook present",
                Some(&pre_normal),
                state("PreparingNormal").node("n1").label("ok", "true").0,
                true,
                true,
                Some(Normal),
            ),
            (
                "rolled back while preparing, no hook",
                None,
                state("PreparingUpdate").0,
                true,
                false,
                Some(Normal),
            ),
            (
                "preparing, not yet updated",
                None,
                state("PreparingUpdate").0,
                false,
                false,
                None,
            ),
            (
                "updating, not complete",
                None,
                state("Updating").0,
                true,
                false,
                None,
            ),
            (
                "updating, complete",
                None,
                state("Updating").0,
                true,
                true,
                Some(Normal),
            ),
            (
                "updating, complete, hook still off",
                Some(&in_place),
                state("Updating").0,
                true,
                true,
                Some(Updated),
            ),
            (
                "updated, hook back",
                Some(&in_place),
                state("Updated").label("upd", "true").0,
                true,
                true,
                Some(Normal),
            ),
            (
                "updated, hook off",
                Some(&in_place),
                state("Updated").0,
                true,
                true,
                None,
            ),
            ("normal stays", None, state("Normal").0, true, true, None),
        ];
        for (name, lc, p, at_rev, done, want) in cases {
            assert_eq!(refresh_transition(lc, &p, at_rev, done), want, "{name}");
        }
    }

    #[test]
    fn state_patch_writes_label_and_timestamp() {
        let now: Timestamp = "2026-11-22T10:00:00Z".parse().unwrap_or_default();
        let patch = state_patch(LifecycleState::PreparingDelete, now);
        assert_eq!(
            patch,
            Some(json!({"metadata": {
                "labels": {"lifecycle.apps.kruise.io/state": "PreparingDelete"},
                "annotations": {"lifecycle.apps.kruise.io/timestamp": "2026-11-22T10:00:00Z"},
            }}))
        );
        assert_eq!(state_patch(LifecycleState::Unset, now), None);
    }

    #[test]
    fn in_place_gates() {
        let lc = Lifecycle {
            in_place_update: Some(LifecycleHook {
                mark_pod_not_ready: true,
                ..hook(&[("upd", "true")], &[])
            }),
            ..Lifecycle::default()
        };
        let state = |s: &str| pod("p").label(keys::LABEL_LIFECYCLE_STATE, s);
        let prepare = |readd_hook| InPlaceGate::Prepare {
            mark_not_ready: true,
            readd_hook,
        };
        let cases = [
            (
                Some(&lc),
                state("Normal").label("upd", "true").0,
                prepare(false),
            ),
            (Some(&lc), state("Normal").0, InPlaceGate::Proceed),
            (None, pod("p").0, InPlaceGate::Proceed),
            (Some(&lc), state("Updated").0, prepare(true)),
            (None, state("Updated").0, InPlaceGate::Wait),
            (
                Some(&lc),
                state("PreparingUpdate").label("upd", "true").0,
                InPlaceGate::Wait,
            ),
            (Some(&lc), state("PreparingUpdate").0, InPlaceGate::Proceed),
            (Some(&lc), state("Updating").0, InPlaceGate::Proceed),
            (
                Some(&lc),
                state("PreparingDelete").0,
                InPlaceGate::NotAllowed,
            ),
            (Some(&lc), state("Bogus").0, InPlaceGate::NotAllowed),
        ];
        for (lifecycle, p, want) in cases {
            assert_eq!(
                in_place_gate(lifecycle, &p),
                want,
                "{:?}",
                p.metadata.labels
            );
        }
        // PreparingNormal → Normal: CloneSet waits for scheduling, ASTS does not.
        let unscheduled = state("PreparingNormal").0;
        assert_eq!(refresh_transition(None, &unscheduled, false, false), None);
        let asts = RefreshRules {
            normal_needs_scheduling: false,
        };
        assert_eq!(
            refresh_transition_with(asts, None, &unscheduled, false, false),
            Some(LifecycleState::Normal)
        );
    }
}
