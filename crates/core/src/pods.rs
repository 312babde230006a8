//! Pod predicates every workload shares: readiness, availability, lifecycle state, revision; and
//! the additions every builder of a kruise Pod makes the same way (readiness gates, claims).
//!
//! They read only the Pod (and `now` where time matters), so controllers and tests can call them on a
//! cached snapshot. The rules are OpenKruise's (`pkg/util/pods.go`), which in turn follow Kubernetes'
//! `podutil.IsPodReady` / `IsPodAvailable`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ContainerStatus, PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, PodCondition,
    PodReadinessGate, PodSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kruise_api::keys;

/// Pod phase `Running`.
pub const PHASE_RUNNING: &str = "Running";
/// Pod phase `Pending`.
pub const PHASE_PENDING: &str = "Pending";
/// Pod phase `Unknown`.
pub const PHASE_UNKNOWN: &str = "Unknown";
/// Pod phase `Succeeded`.
pub const PHASE_SUCCEEDED: &str = "Succeeded";
/// Pod phase `Failed`.
pub const PHASE_FAILED: &str = "Failed";
/// The Pod condition `Ready`.
pub const CONDITION_READY: &str = "Ready";
/// Annotation through which users rank Pods for deletion (lower first), as ReplicaSets do.
pub const ANNOTATION_POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";

/// The value of the `lifecycle.apps.kruise.io/state` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LifecycleState {
    /// No label, or an empty value: the Pod predates lifecycle management and counts as Normal.
    Unset,
    PreparingNormal,
    Normal,
    PreparingUpdate,
    Updating,
    Updated,
    PreparingDelete,
    /// A value OpenKruise does not define. It is neither unset nor Normal, so the Pod is not available;
    /// that is what upstream's string comparison gives, and it is the safe reading of a label we do
    /// not understand.
    Unknown,
}

impl LifecycleState {
    /// Parses a label value.
    pub fn parse(value: &str) -> Self {
        match value {
            "" => Self::Unset,
            keys::LIFECYCLE_PREPARING_NORMAL => Self::PreparingNormal,
            keys::LIFECYCLE_NORMAL => Self::Normal,
            keys::LIFECYCLE_PREPARING_UPDATE => Self::PreparingUpdate,
            keys::LIFECYCLE_UPDATING => Self::Updating,
            keys::LIFECYCLE_UPDATED => Self::Updated,
            keys::LIFECYCLE_PREPARING_DELETE => Self::PreparingDelete,
            _ => Self::Unknown,
        }
    }

    /// Whether a Pod in this state may count as available: only `""` and `Normal` do.
    pub fn allows_available(self) -> bool {
        matches!(self, Self::Unset | Self::Normal)
    }
}

/// The Pod's lifecycle state.
pub fn lifecycle_state(pod: &Pod) -> LifecycleState {
    label(pod, keys::LABEL_LIFECYCLE_STATE).map_or(LifecycleState::Unset, LifecycleState::parse)
}

/// A label value of the Pod.
pub fn label<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// An annotation value of the Pod.
pub fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// The Pod's phase, `""` when the status has none yet.
pub fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

/// The Pod condition of the given type.
pub fn condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// The `Ready` condition is True (Kubernetes' `IsPodReady`; the phase is not looked at).
pub fn is_ready(pod: &Pod) -> bool {
    condition(pod, CONDITION_READY).is_some_and(|c| c.status == "True")
}

/// Phase Running and Ready.
pub fn is_running_and_ready(pod: &Pod) -> bool {
    phase(pod) == PHASE_RUNNING && is_ready(pod)
}

/// When the Pod last became Ready, if it is Ready and the time is known.
pub fn ready_since(pod: &Pod) -> Option<Timestamp> {
    condition(pod, CONDITION_READY)
        .filter(|c| c.status == "True")
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0)
}

/// Ready for longer than `min_ready_seconds` at `now` (Kubernetes' `IsPodAvailable`). With 0 any Ready
/// Pod qualifies; otherwise the Ready transition time must be known and strictly more than
/// `min_ready_seconds` in the past, as upstream compares with `Before`.
pub fn is_ready_for(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> bool {
    if !is_ready(pod) {
        return false;
    }
    if min_ready_seconds <= 0 {
        return true;
    }
    ready_since(pod).is_some_and(|since| {
        since
            .checked_add(SignedDuration::from_secs(i64::from(min_ready_seconds)))
            .is_ok_and(|ready_enough| ready_enough < now)
    })
}

/// The `InPlaceUpdateReady` condition is absent or True. Anything else (False, Unknown) means an
/// in-place update is under way and the Pod must not receive traffic.
pub fn in_place_update_ready(pod: &Pod) -> bool {
    condition(pod, keys::CONDITION_IN_PLACE_UPDATE_READY).is_none_or(|c| c.status == "True")
}

/// The `readyReplicas` test (`IsPodUpdateReady`): Running, Ready for `min_ready_seconds`, and not in
/// the middle of an in-place update. The lifecycle state is deliberately not checked, so `readyReplicas`
/// counts Pods that hooks hold back.
pub fn is_update_ready(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> bool {
    phase(pod) == PHASE_RUNNING
        && is_ready_for(pod, min_ready_seconds, now)
        && in_place_update_ready(pod)
}

/// The `availableReplicas` test (`IsPodAvailable` of CloneSet): [`is_update_ready`] and the lifecycle
/// state is unset or Normal, so a Pod a hook is preparing for update or deletion is unavailable.
pub fn is_available(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> bool {
    lifecycle_state(pod).allows_available() && is_update_ready(pod, min_ready_seconds, now)
}

/// The Pod has a deletion timestamp.
pub fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// Not finished (Succeeded/Failed) and not being deleted: the Pods a workload counts as replicas.
pub fn is_active(pod: &Pod) -> bool {
    !matches!(phase(pod), PHASE_SUCCEEDED | PHASE_FAILED) && !is_terminating(pod)
}

/// The Pod is bound to a node.
pub fn is_assigned(pod: &Pod) -> bool {
    node_name(pod).is_some()
}

/// The node the Pod is bound to.
pub fn node_name(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// The Pod carries the specified-delete label (any value).
pub fn is_specified_delete(pod: &Pod) -> bool {
    label(pod, keys::LABEL_SPECIFIED_DELETE).is_some()
}

/// The revision label (`controller-revision-hash`) of the Pod.
pub fn revision_of(pod: &Pod) -> Option<&str> {
    label(pod, keys::LABEL_NATIVE_CONTROLLER_REVISION_HASH)
}

/// The Pod is at `revision` (the short-hash rule of [`crate::revision::pod_label_matches_revision`]). A Pod without the label is
/// at no revision. (Upstream compares the empty string, which only differs for a revision name ending
/// in `-`, which the history helpers never produce.)
pub fn is_at_revision(pod: &Pod, revision: &str) -> bool {
    revision_of(pod).is_some_and(|own| crate::revision::pod_label_matches_revision(own, revision))
}

/// The container statuses the kubelet reports (none before it reports any): what every reader of
/// a container's image, ID, readiness or restarts starts from.
pub fn container_statuses(pod: &Pod) -> &[ContainerStatus] {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_deref())
        .unwrap_or_default()
}

/// The highest restart count among the Pod's containers.
pub fn max_container_restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .map(|c| c.restart_count)
        .max()
        .unwrap_or(0)
        .max(0)
}

/// The `controller.kubernetes.io/pod-deletion-cost` annotation; 0 when absent or invalid. Like
/// Kubernetes, a leading `+` or leading zeros make the value invalid.
pub fn deletion_cost(pod: &Pod) -> i32 {
    let Some(value) = annotation(pod, ANNOTATION_POD_DELETION_COST) else {
        return 0;
    };
    let digits = value.strip_prefix('-').unwrap_or(value);
    let canonical = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'));
    if !canonical {
        return 0;
    }
    value.parse::<i32>().unwrap_or(0)
}

/// The in-place update grace annotation (current or legacy key) is present: the Pod is waiting out its
/// grace period and must not be picked for another update.
pub fn in_place_update_grace_pending(pod: &Pod) -> bool {
    [
        keys::ANNOTATION_IN_PLACE_UPDATE_GRACE,
        keys::ANNOTATION_IN_PLACE_UPDATE_GRACE_OLD,
    ]
    .iter()
    .any(|key| annotation(pod, key).is_some_and(|v| !v.is_empty()))
}

/// Whether the Pod's spec lists the readiness gate `condition`. In-place updates
/// (`InPlaceUpdateReady`) and container recreation (`KruisePodReady`) each act on the condition
/// only when the Pod carries its gate, and look for it this one way.
pub fn has_readiness_gate(pod: &Pod, condition: &str) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .is_some_and(|g| g.iter().any(|g| g.condition_type == condition))
}

/// Adds the readiness gate `condition` to `spec` unless it has it already; whether it was added.
/// Every builder of a kruise Pod (CloneSet, Advanced DaemonSet, the Pod webhook) adds its gates
/// this one way: once, after the template's own.
pub fn add_readiness_gate(spec: &mut PodSpec, condition: &str) -> bool {
    let gates = spec.readiness_gates.get_or_insert_with(Vec::new);
    if gates.iter().any(|g| g.condition_type == condition) {
        return false;
    }
    gates.push(PodReadinessGate {
        condition_type: condition.to_owned(),
    });
    true
}

/// Mounts the claim of each of `claim_templates` in `spec` as the volume of the template's name
/// (replacing a template volume of that name), the claim named by `claim_name(template)`. How
/// CloneSet and Advanced StatefulSet give a Pod its own claims: only the claim names differ.
pub fn mount_claims(
    spec: &mut PodSpec,
    claim_templates: &[PersistentVolumeClaim],
    claim_name: impl Fn(&str) -> String,
) {
    let claim_volumes: Vec<Volume> = claim_templates
        .iter()
        .filter_map(|vct| vct.metadata.name.as_deref())
        .map(|vct| Volume {
            name: vct.to_owned(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim_name(vct),
                read_only: None,
            }),
            ..Volume::default()
        })
        .collect();
    if !claim_volumes.is_empty() {
        let volumes = spec.volumes.get_or_insert_with(Vec::new);
        volumes.retain(|v| !claim_volumes.iter().any(|c| c.name == v.name));
        volumes.extend(claim_volumes);
    }
}

/// The claims of one Pod, one per `claim_templates`: each named `claim_name(template's name)`, in
/// `namespace`, labelled with the template's labels and then `labels` (which win), with the
/// template's annotations and spec, owned by `owners` (no owner references when empty). How
/// CloneSet and Advanced StatefulSet build a Pod's claims: only the names, labels and owners
/// differ. `None` when a template has no name (no claim can be named after it).
pub fn claims_from_templates(
    claim_templates: &[PersistentVolumeClaim],
    namespace: Option<&str>,
    labels: &BTreeMap<String, String>,
    owners: &[OwnerReference],
    claim_name: impl Fn(&str) -> String,
) -> Option<Vec<PersistentVolumeClaim>> {
    claim_templates
        .iter()
        .map(|vct| {
            let vct_name = vct.metadata.name.as_deref()?;
            let mut claim_labels = vct.metadata.labels.clone().unwrap_or_default();
            claim_labels.extend(labels.clone());
            Some(PersistentVolumeClaim {
                metadata: ObjectMeta {
                    name: Some(claim_name(vct_name)),
                    namespace: namespace.map(str::to_owned),
                    labels: Some(claim_labels),
                    annotations: vct.metadata.annotations.clone(),
                    owner_references: (!owners.is_empty()).then(|| owners.to_vec()),
                    ..ObjectMeta::default()
                },
                spec: vct.spec.clone(),
                status: None,
            })
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod testing {
    //! A small builder for test Pods.

    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodCondition, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use k8s_openapi::jiff::{SignedDuration, Timestamp};

    /// A fixed "now" for tests.
    pub fn now() -> Timestamp {
        Timestamp::from_second(1_800_000_000).expect("valid timestamp")
    }

    /// `secs` seconds before [`now`].
    pub fn ago(secs: i64) -> Timestamp {
        now() - SignedDuration::from_secs(secs)
    }

    #[derive(Clone)]
    pub struct PodBuilder(pub Pod);

    pub fn pod(name: &str) -> PodBuilder {
        PodBuilder(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(PodSpec::default()),
            status: Some(PodStatus::default()),
        })
    }

    impl PodBuilder {
        pub fn label(mut self, k: &str, v: &str) -> Self {
            self.0
                .metadata
                .labels
                .get_or_insert_with(BTreeMap::new)
                .insert(k.into(), v.into());
            self
        }
        pub fn annotation(mut self, k: &str, v: &str) -> Self {
            self.0
                .metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(k.into(), v.into());
            self
        }
        pub fn finalizer(mut self, f: &str) -> Self {
            self.0
                .metadata
                .finalizers
                .get_or_insert_with(Vec::new)
                .push(f.into());
            self
        }
        pub fn phase(mut self, phase: &str) -> Self {
            self.status().phase = Some(phase.into());
            self
        }
        pub fn node(mut self, node: &str) -> Self {
            self.0.spec.get_or_insert_with(Default::default).node_name = Some(node.into());
            self
        }
        pub fn condition(mut self, type_: &str, status: &str, since: Option<Timestamp>) -> Self {
            let conditions = self.status().conditions.get_or_insert_with(Vec::new);
            conditions.retain(|c| c.type_ != type_);
            conditions.push(PodCondition {
                type_: type_.into(),
                status: status.into(),
                last_transition_time: since.map(Time),
                ..Default::default()
            });
            self
        }
        /// Running, scheduled on `node-a`, Ready since `ready_secs_ago`.
        pub fn running_ready(self, ready_secs_ago: i64) -> Self {
            self.phase("Running").node("node-a").condition(
                "Ready",
                "True",
                Some(ago(ready_secs_ago)),
            )
        }
        pub fn restarts(mut self, n: i32) -> Self {
            self.status()
                .container_statuses
                .get_or_insert_with(Vec::new)
                .push(ContainerStatus {
                    name: "c".into(),
                    restart_count: n,
                    ..Default::default()
                });
            self
        }
        pub fn created(mut self, at: Timestamp) -> Self {
            self.0.metadata.creation_timestamp = Some(Time(at));
            self
        }
        pub fn deleting(mut self) -> Self {
            self.0.metadata.deletion_timestamp = Some(Time(now()));
            self
        }
        pub fn revision(self, rev: &str) -> Self {
            self.label("controller-revision-hash", rev)
        }
        pub fn lifecycle(self, state: &str) -> Self {
            self.label("lifecycle.apps.kruise.io/state", state)
        }
        pub fn build(self) -> Pod {
            self.0
        }
        fn status(&mut self) -> &mut PodStatus {
            self.0.status.get_or_insert_with(Default::default)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{ago, now, pod};
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn lifecycle_states() {
        let cases = [
            (None, LifecycleState::Unset, true),
            (Some(""), LifecycleState::Unset, true),
            (Some("Normal"), LifecycleState::Normal, true),
            (
                Some("PreparingNormal"),
                LifecycleState::PreparingNormal,
                false,
            ),
            (
                Some("PreparingUpdate"),
                LifecycleState::PreparingUpdate,
                false,
            ),
            (Some("Updating"), LifecycleState::Updating, false),
            (Some("Updated"), LifecycleState::Updated, false),
            (
                Some("PreparingDelete"),
                LifecycleState::PreparingDelete,
                false,
            ),
            (Some("Bogus"), LifecycleState::Unknown, false),
        ];
        for (value, want, available) in cases {
            let mut b = pod("p");
            if let Some(v) = value {
                b = b.lifecycle(v);
            }
            let p = b.build();
            assert_eq!(lifecycle_state(&p), want, "{value:?}");
            assert_eq!(want.allows_available(), available, "{value:?}");
        }
    }

    #[test]
    fn readiness_and_availability_table() {
        // (name, pod, minReadySeconds, running_and_ready, update_ready, available)
        let cases = [
            ("no status", pod("p").build(), 0, false, false, false),
            (
                "running ready",
                pod("p").running_ready(5).build(),
                0,
                true,
                true,
                true,
            ),
            (
                "pending but Ready condition",
                pod("p")
                    .phase("Pending")
                    .condition("Ready", "True", Some(ago(5)))
                    .build(),
                0,
                false,
                false,
                false,
            ),
            (
                "ready too briefly",
                pod("p").running_ready(5).build(),
                10,
                true,
                false,
                false,
            ),
            (
                "ready exactly minReadySeconds is not enough",
                pod("p").running_ready(10).build(),
                10,
                true,
                false,
                false,
            ),
            (
                "ready long enough",
                pod("p").running_ready(11).build(),
                10,
                true,
                true,
                true,
            ),
            (
                "ready with unknown transition time and minReadySeconds",
                pod("p")
                    .phase("Running")
                    .condition("Ready", "True", None)
                    .build(),
                10,
                true,
                false,
                false,
            ),
            (
                "in-place update in progress",
                pod("p")
                    .running_ready(60)
                    .condition("InPlaceUpdateReady", "False", None)
                    .build(),
                0,
                true,
                false,
                false,
            ),
            (
                "in-place update condition unknown",
                pod("p")
                    .running_ready(60)
                    .condition("InPlaceUpdateReady", "Unknown", None)
                    .build(),
                0,
                true,
                false,
                false,
            ),
            (
                "in-place update done",
                pod("p")
                    .running_ready(60)
                    .condition("InPlaceUpdateReady", "True", None)
                    .build(),
                0,
                true,
                true,
                true,
            ),
            (
                "hook holds it in PreparingUpdate: ready but not available",
                pod("p")
                    .running_ready(60)
                    .lifecycle("PreparingUpdate")
                    .build(),
                0,
                true,
                true,
                false,
            ),
            (
                "Normal",
                pod("p").running_ready(60).lifecycle("Normal").build(),
                0,
                true,
                true,
                true,
            ),
            (
                "not ready",
                pod("p")
                    .phase("Running")
                    .condition("Ready", "False", Some(ago(5)))
                    .build(),
                0,
                false,
                false,
                false,
            ),
        ];
        for (name, p, min_ready, rr, ur, av) in cases {
            assert_eq!(is_running_and_ready(&p), rr, "{name}: running and ready");
            assert_eq!(
                is_update_ready(&p, min_ready, now()),
                ur,
                "{name}: update ready"
            );
            assert_eq!(is_available(&p, min_ready, now()), av, "{name}: available");
        }
    }

    #[test]
    fn activity() {
        assert!(is_active(&pod("p").running_ready(1).build()));
        assert!(is_active(&pod("p").build()));
        assert!(!is_active(&pod("p").phase("Succeeded").build()));
        assert!(!is_active(&pod("p").phase("Failed").build()));
        let deleting = pod("p").running_ready(1).deleting().build();
        assert!(is_terminating(&deleting));
        assert!(!is_active(&deleting));
    }

    #[test]
    fn revisions() {
        let cases = [
            // (pod label, revision, at revision)
            (Some("web-5d8f7c"), "web-5d8f7c", true),
            (Some("5d8f7c"), "web-5d8f7c", true),
            (Some("web-5d8f7c"), "5d8f7c", true),
            (Some("other-5d8f7c"), "web-5d8f7c", true),
            (Some("web-5d8f7c"), "web-aaaaaa", false),
            (Some("web"), "web-5d8f7c", false),
            (None, "web-5d8f7c", false),
            (None, "", false),
        ];
        for (own, rev, want) in cases {
            let mut b = pod("p");
            if let Some(own) = own {
                b = b.revision(own);
            }
            assert_eq!(is_at_revision(&b.build(), rev), want, "{own:?} vs {rev}");
        }
        assert_eq!(crate::revision::short_hash("a-b-c"), "c");
        assert_eq!(crate::revision::short_hash("abc"), "abc");
        assert_eq!(crate::revision::short_hash(""), "");
    }

    #[test]
    fn deletion_costs() {
        let cases = [
            (None, 0),
            (Some("10"), 10),
            (Some("-5"), -5),
            (Some("0"), 0),
            (Some("+10"), 0),
            (Some("008"), 0),
            (Some("-"), 0),
            (Some(""), 0),
            (Some("abc"), 0),
            (Some("99999999999"), 0),
            (Some("2147483647"), i32::MAX),
        ];
        for (value, want) in cases {
            let mut b = pod("p");
            if let Some(v) = value {
                b = b.annotation(ANNOTATION_POD_DELETION_COST, v);
            }
            assert_eq!(deletion_cost(&b.build()), want, "{value:?}");
        }
    }

    #[test]
    fn misc_predicates() {
        let p = pod("p")
            .restarts(3)
            .restarts(7)
            .label("apps.kruise.io/specified-delete", "")
            .build();
        assert_eq!(max_container_restarts(&p), 7);
        assert!(is_specified_delete(&p));
        assert!(!is_assigned(&p));
        assert!(is_assigned(&pod("p").node("n").build()));
        assert!(!is_assigned(&pod("p").node("").build()));
        assert!(in_place_update_grace_pending(
            &pod("p").annotation("inplace-update-grace", "{}").build()
        ));
        assert!(!in_place_update_grace_pending(&pod("p").build()));
    }

    proptest! {
        /// available ⇒ update-ready ⇒ running-and-ready, whatever the Pod looks like.
        #[test]
        fn availability_implies_readiness(
            phase_i in 0usize..4,
            ready in proptest::option::of(any::<bool>()),
            ready_ago in 0i64..100,
            ipu in proptest::option::of(0usize..3),
            state_i in 0usize..8,
            min_ready in 0i32..50,
        ) {
            let phases = ["Running", "Pending", "Unknown", "Succeeded"];
            let states = ["", "Normal", "PreparingNormal", "PreparingUpdate", "Updating", "Updated", "PreparingDelete", "x"];
            let mut b = pod("p").phase(phases[phase_i]).lifecycle(states[state_i]);
            if let Some(r) = ready {
                b = b.condition("Ready", if r { "True" } else { "False" }, Some(ago(ready_ago)));
            }
            if let Some(i) = ipu {
                b = b.condition("InPlaceUpdateReady", ["True", "False", "Unknown"][i], None);
            }
            let p = b.build();
            let available = is_available(&p, min_ready, now());
            let update_ready = is_update_ready(&p, min_ready, now());
            prop_assert!(!available || update_ready);
            prop_assert!(!update_ready || is_running_and_ready(&p));
            // A longer minReadySeconds never makes a Pod available that was not.
            prop_assert!(!is_available(&p, min_ready + 1, now()) || available);
        }

        #[test]
        fn revision_equality_is_symmetric(a in "[a-c]{0,2}(-[a-c]{0,2}){0,2}", b in "[a-c]{0,2}(-[a-c]{0,2}){0,2}") {
            prop_assert_eq!(crate::revision::pod_label_matches_revision(&a, &b), crate::revision::pod_label_matches_revision(&b, &a));
            prop_assert!(crate::revision::pod_label_matches_revision(&a, &a));
        }
    }
}
