//! What the workloads that place one Pod per node (Advanced DaemonSet, BroadcastJob) make of the
//! shared Node cache: a trigger that wakes every object of the workload when a node joins, leaves,
//! or changes in a way that can change where its Pods run. Heartbeats wake nothing (Kubernetes'
//! `shouldIgnoreNodeUpdate`: an update matters unless only the resourceVersion and conditions
//! changed with the same set of True conditions).

use std::collections::{BTreeSet, HashMap};

use k8s_openapi::api::core::v1::Node;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::mpsc;

use crate::driver::caches::Shared;

/// What of a Node decides whether a Pod fits it: labels, taints, cordon, allocatable, and which
/// conditions are True.
pub fn placement_fingerprint(node: &Node) -> String {
    let spec = node.spec.as_ref();
    let true_conditions: BTreeSet<&str> = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| c.status == "True")
        .map(|c| c.type_.as_str())
        .collect();
    serde_json::json!({
        "labels": node.metadata.labels,
        "taints": spec.and_then(|s| s.taints.as_ref()).map(|t| {
            t.iter().map(|t| (t.key.clone(), t.value.clone(), t.effect.clone())).collect::<Vec<_>>()
        }),
        "unschedulable": spec.and_then(|s| s.unschedulable),
        "allocatable": node.status.as_ref().and_then(|s| s.allocatable.as_ref()),
        "trueConditions": true_conditions,
    })
    .to_string()
}

/// Wakes every object of `workload` (a send on `all_tx`) when a node of the shared Node cache
/// joins, leaves, or its [`placement_fingerprint`] changes (no relist: the watch's own events).
pub fn trigger(nodes: &Shared<Node>, all_tx: mpsc::UnboundedSender<()>, workload: &'static str) {
    let mut events = nodes.subscribe();
    let reader = nodes.store().clone();
    tokio::spawn(async move {
        let mut seen: HashMap<String, String> = HashMap::new();
        while let Some(node) = events.recv().await {
            let Some(name) = node.metadata.name.clone() else {
                continue;
            };
            let present = reader.get(&ObjectRef::new(&name)).is_some();
            let changed = if present {
                let print = placement_fingerprint(&node);
                seen.insert(name.clone(), print.clone()).as_ref() != Some(&print)
            } else {
                seen.remove(&name).is_some()
            };
            if changed {
                tracing::debug!(node = %name, present, workload, "node placement changed; reconciling");
                if all_tx.send(()).is_err() {
                    return;
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{NodeCondition, NodeSpec, NodeStatus, Taint};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    fn node(heartbeat: i64, ready: &str) -> Node {
        let mut node = Node::default();
        node.metadata.name = Some("n".into());
        node.metadata.resource_version = Some(heartbeat.to_string());
        node.metadata.labels = Some([("zone".to_string(), "a".to_string())].into());
        node.spec = Some(NodeSpec::default());
        node.status = Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: ready.into(),
                last_heartbeat_time: Timestamp::from_second(heartbeat).ok().map(Time),
                ..Default::default()
            }]),
            ..Default::default()
        });
        node
    }

    #[test]
    fn heartbeats_do_not_change_the_fingerprint_but_fitness_inputs_do() {
        let base = placement_fingerprint(&node(1, "True"));
        assert_eq!(placement_fingerprint(&node(2, "True")), base);
        assert_ne!(placement_fingerprint(&node(2, "False")), base);
        let mut labelled = node(2, "True");
        labelled.metadata.labels = Some([("zone".to_string(), "b".to_string())].into());
        assert_ne!(placement_fingerprint(&labelled), base);
        let mut tainted = node(2, "True");
        tainted.spec = Some(NodeSpec {
            taints: Some(vec![Taint {
                key: "k".into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        assert_ne!(placement_fingerprint(&tainted), base);
        let mut cordoned = node(2, "True");
        cordoned.spec = Some(NodeSpec {
            unschedulable: Some(true),
            ..Default::default()
        });
        assert_ne!(placement_fingerprint(&cordoned), base);
    }
}
