//! Placement after admission. A Pod whose placement the webhook could not finish within its
//! deadline is admitted behind a scheduling gate (`spec.schedulingGates`), so that the scheduler
//! leaves it alone until the WorkloadSpread controller has taken a slot for it and written the
//! subset's scheduling directives: Kubernetes lets a gated Pod's node affinity be narrowed and its
//! tolerations, labels and annotations be added to, and nothing else of its spec changed. A subset
//! whose patch changes anything else cannot be applied after creation: its Pods are let go
//! unplaced (as when the webhook is unreachable), and the controller records them in the subset of
//! the node they land on.

use k8s_openapi::api::core::v1::{Pod, PodSchedulingGate};
use kruise_api::workloadspread::{LABEL_PLACEMENT_PENDING, SCHEDULING_GATE, WorkloadSpread};
use serde_json::{Value, json};

use super::inject;

/// The label value beside the gate, for a Pod whose slot was asked under its name.
pub const PENDING: &str = "pending";

/// `pod` behind the placement gate (and its label). `asked_as` is the id a Pod without a name yet
/// asked its slot under (a generateName Pod): kept as the label's value, so that when that slot
/// was recorded after all (the write landed past the webhook's deadline), the controller places
/// the Pod in it instead of taking a second one ([`pending_slot`]).
pub fn gated(pod: &Pod, asked_as: Option<&str>) -> Pod {
    let mut pod = pod.clone();
    let gates = pod
        .spec
        .get_or_insert_with(Default::default)
        .scheduling_gates
        .get_or_insert_with(Vec::new);
    if !gates.iter().any(|g| g.name == SCHEDULING_GATE) {
        gates.push(PodSchedulingGate {
            name: SCHEDULING_GATE.into(),
        });
    }
    pod.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(
            LABEL_PLACEMENT_PENDING.into(),
            asked_as
                .filter(|id| !id.is_empty())
                .unwrap_or(PENDING)
                .into(),
        );
    pod
}

/// The id a gated Pod asked its slot under before it had a name ([`gated`]), if any.
pub fn pending_slot(pod: &Pod) -> Option<&str> {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_PLACEMENT_PENDING))
        .map(String::as_str)
        .filter(|v| !v.is_empty() && *v != PENDING)
}

/// Whether `pod` waits behind the placement gate.
pub fn is_gated(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| g.iter().any(|g| g.name == SCHEDULING_GATE))
}

/// Whether `pod` carries the label beside the gate: how a gated Pod is found where the gates
/// themselves are not kept (the manager's Pod cache projection).
pub fn is_pending(pod: &Pod) -> bool {
    pod.metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(LABEL_PLACEMENT_PENDING))
}

/// The spec fields of a gated Pod that placement may change.
const MUTABLE_WHILE_GATED: [&str; 3] = ["affinity", "tolerations", "schedulingGates"];

/// The spec without the fields placement may change.
fn fixed_spec(pod: &Pod) -> Value {
    let mut spec = serde_json::to_value(pod.spec.as_ref()).unwrap_or(Value::Null);
    if let Some(spec) = spec.as_object_mut() {
        for field in MUTABLE_WHILE_GATED {
            spec.remove(field);
        }
    }
    spec
}

/// Whether every subset of `ws` can be applied to `pod` after its creation: injecting it changes
/// no spec field but the node affinity (narrowed) and the tolerations (added to).
pub fn placeable_after_creation(ws: &WorkloadSpread, pod: &Pod) -> bool {
    let before = fixed_spec(pod);
    ws.spec.subsets.iter().all(|subset| {
        inject(
            &ws.metadata.name.clone().unwrap_or_default(),
            subset,
            pod,
            "",
        )
        .is_ok_and(|placed| fixed_spec(&placed) == before)
    })
}

/// The gates left once the placement gate is lifted.
fn other_gates(pod: &Pod) -> Vec<PodSchedulingGate> {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|g| g.name != SCHEDULING_GATE)
        .collect()
}

/// The merge patch that places gated `pod` as `placed` (its injection into a subset): labels and
/// annotations, node affinity and tolerations, the gate and its label lifted; over the
/// resourceVersion `pod` was read at.
pub fn placement_patch(pod: &Pod, placed: &Pod) -> Value {
    let mut labels = serde_json::to_value(&placed.metadata.labels).unwrap_or(Value::Null);
    if let Some(labels) = labels.as_object_mut() {
        labels.insert(LABEL_PLACEMENT_PENDING.into(), Value::Null);
    }
    let spec = placed.spec.as_ref();
    json!({
        "metadata": {
            "resourceVersion": pod.metadata.resource_version,
            "labels": labels,
            "annotations": placed.metadata.annotations,
        },
        "spec": {
            "affinity": spec.and_then(|s| s.affinity.as_ref()),
            "tolerations": spec.and_then(|s| s.tolerations.as_ref()),
            "schedulingGates": other_gates(pod),
        }
    })
}

/// The merge patch that lets gated `pod` go unplaced: the gate and its label lifted, over the
/// resourceVersion it was read at.
pub fn release_patch(pod: &Pod) -> Value {
    json!({
        "metadata": {
            "resourceVersion": pod.metadata.resource_version,
            "labels": {LABEL_PLACEMENT_PENDING: null},
        },
        "spec": {"schedulingGates": other_gates(pod)},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "resourceVersion": "7", "labels": {"app": "web"}},
            "spec": {
                "containers": [{"name": "c", "image": "i"}],
                "schedulingGates": [{"name": "other.example/gate"}]
            }
        }))
        .expect("pod")
    }

    fn spread(subsets: Value) -> WorkloadSpread {
        serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "WorkloadSpread",
            "metadata": {"name": "ws", "namespace": "ns"},
            "spec": {"subsets": subsets}
        }))
        .expect("ws")
    }

    #[test]
    fn a_gated_pod_carries_the_gate_once_and_its_label() {
        let once = gated(&pod(), None);
        let twice = gated(&once, None);
        assert!(is_gated(&twice) && is_pending(&twice));
        assert!(!is_gated(&pod()) && !is_pending(&pod()));
        let gates = twice
            .spec
            .clone()
            .and_then(|s| s.scheduling_gates)
            .unwrap_or_default();
        assert_eq!(gates.len(), 2, "the other gate kept, ours once");
        assert_eq!(
            twice
                .metadata
                .labels
                .clone()
                .unwrap_or_default()
                .get(LABEL_PLACEMENT_PENDING)
                .map(String::as_str),
            Some(PENDING)
        );
        assert_eq!(pending_slot(&twice), None, "asked under its name");
        let unnamed = gated(&pod(), Some("0f1e2d3c-0000-4000-8000-00000000abcd"));
        assert_eq!(
            pending_slot(&unnamed),
            Some("0f1e2d3c-0000-4000-8000-00000000abcd"),
            "the id a Pod without a name asked its slot under"
        );
        assert_eq!(pending_slot(&gated(&pod(), Some(""))), None);
    }

    #[test]
    fn which_subsets_can_be_applied_after_creation() {
        let zone =
            json!({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]});
        // (subsets, placeable)
        let cases = [
            (
                json!([{"name": "a", "requiredNodeSelectorTerm": zone}]),
                true,
            ),
            (
                json!([{"name": "a", "tolerations": [{"key": "k", "operator": "Exists"}]}]),
                true,
            ),
            (
                json!([{"name": "a", "patch": {"metadata": {"labels": {"zone": "a"}}}}]),
                true,
            ),
            (
                json!([{"name": "a"}, {"name": "b", "patch": {"spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "1"}}}]}}}]),
                false,
            ),
            (
                json!([{"name": "a", "patch": {"spec": {"priorityClassName": "high"}}}]),
                false,
            ),
        ];
        for (i, (subsets, placeable)) in cases.into_iter().enumerate() {
            assert_eq!(
                placeable_after_creation(&spread(subsets), &gated(&pod(), None)),
                placeable,
                "case {i}"
            );
        }
    }

    #[test]
    fn placing_lifts_only_our_gate_over_the_version_read() {
        let ws = spread(
            json!([{"name": "a", "requiredNodeSelectorTerm": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}, "patch": {"metadata": {"labels": {"zone": "a"}}}}]),
        );
        let gated = gated(&pod(), None);
        let placed = inject("ws", &ws.spec.subsets[0], &gated, "").expect("placed");
        let patch = placement_patch(&gated, &placed);
        assert_eq!(patch["metadata"]["resourceVersion"], "7");
        assert_eq!(patch["metadata"]["labels"]["zone"], "a");
        assert_eq!(
            patch["metadata"]["labels"][LABEL_PLACEMENT_PENDING],
            Value::Null
        );
        assert!(
            patch["metadata"]["annotations"][kruise_api::workloadspread::ANNOTATION_MATCHED]
                .is_string()
        );
        assert_eq!(
            patch["spec"]["schedulingGates"],
            json!([{"name": "other.example/gate"}])
        );
        assert_eq!(
            patch["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                ["nodeSelectorTerms"][0]["matchExpressions"][0]["key"],
            "zone"
        );
        let release = release_patch(&gated);
        assert_eq!(
            release["spec"]["schedulingGates"],
            json!([{"name": "other.example/gate"}])
        );
        assert_eq!(
            release["metadata"]["labels"][LABEL_PLACEMENT_PENDING],
            Value::Null
        );
    }
}
