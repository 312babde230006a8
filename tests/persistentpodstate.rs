//! PersistentPodState end to end, on a real control plane with simulated nodes (three, one per
//! zone, `topology.kubernetes.io/zone` and `kubernetes.io/hostname` labelled): a user annotates a
//! StatefulSet (kruise's or Kubernetes') for auto-generation, the PersistentPodState appears with
//! the topology of every ready Pod, and Pods deleted and recreated come back to their zone
//! (required) and node (preferred). Scale-down, the retention policy, annotation removal, the
//! validating webhook and the workload's deletion behave as OpenKruise v1.9.0's.
//!
//! Own test binary: its manager owns the cluster's webhook configurations; one test cordons a
//! node, so the other schedules nothing it requires to be there.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, ensure};
use k8s_openapi::api::core::v1::{Node, Pod};
use kruise_api::persistentpodstate::{self as api, PersistentPodState};
use kruise_testkit::{TestNamespace, eventually, testbed, until};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);
const ZONE: &str = "topology.kubernetes.io/zone";
const HOST: &str = "kubernetes.io/hostname";

async fn namespace(prefix: &str) -> anyhow::Result<TestNamespace> {
    let bed = testbed();
    bed.manager();
    bed.namespace(prefix).await
}

/// The labels of every node, by name.
async fn node_labels(
    ns: &TestNamespace,
) -> anyhow::Result<BTreeMap<String, BTreeMap<String, String>>> {
    kruise_e2e::node_labels(&ns.client).await
}

/// The active Pods labelled `app=<app>`, by name.
async fn pods(ns: &TestNamespace, app: &str) -> anyhow::Result<BTreeMap<String, Pod>> {
    let api: Api<Pod> = Api::namespaced(ns.client.clone(), &ns.name);
    Ok(api
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| (p.name_any(), p))
        .collect())
}

fn ready(pod: &Pod) -> bool {
    kruise_core::pods::is_ready(pod)
}

fn node_of(pod: &Pod) -> String {
    kruise_core::pods::node_name(pod)
        .unwrap_or_default()
        .to_string()
}

async fn pps(ns: &TestNamespace, name: &str) -> anyhow::Result<Option<PersistentPodState>> {
    let api: Api<PersistentPodState> = Api::namespaced(ns.client.clone(), &ns.name);
    Ok(api.get_opt(name).await?)
}

/// Waits until the PersistentPodState `name` records exactly the ready Pods of `app` (`count` of
/// them), each with its node and that node's labels for `keys`; returns the records.
async fn recorded(
    ns: &TestNamespace,
    name: &str,
    app: &str,
    count: usize,
    keys: &[&str],
) -> anyhow::Result<BTreeMap<String, api::PodState>> {
    let nodes = node_labels(ns).await?;
    eventually(
        format!("PersistentPodState {name} recording the {count} ready Pods of {app}"),
        TIMEOUT,
        || async {
            let Some(object) = pps(ns, name).await? else {
                return Ok(None);
            };
            let states = object.status.map(|s| s.pod_states).unwrap_or_default();
            let pods = pods(ns, app).await?;
            if pods.len() != count || !pods.values().all(ready) || states.len() != count {
                return Ok(None);
            }
            for (pod_name, pod) in &pods {
                let Some(state) = states.get(pod_name) else {
                    return Ok(None);
                };
                let node = node_of(pod);
                let want: BTreeMap<String, String> = keys
                    .iter()
                    .filter_map(|k| {
                        nodes
                            .get(&node)
                            .and_then(|l| l.get(*k))
                            .map(|v| (k.to_string(), v.clone()))
                    })
                    .collect();
                if state.node_name != node || state.node_topology_labels != want {
                    return Ok(None);
                }
            }
            Ok(Some(states))
        },
    )
    .await
}

fn preferred_hosts(pod: &Pod) -> Vec<(i32, String, Vec<String>)> {
    pod.spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.preferred_during_scheduling_ignored_during_execution
                .clone()
        })
        .unwrap_or_default()
        .into_iter()
        .flat_map(|term| {
            term.preference
                .match_expressions
                .unwrap_or_default()
                .into_iter()
                .map(move |e| (term.weight, e.key, e.values.unwrap_or_default()))
        })
        .collect()
}

async fn set_unschedulable(ns: &TestNamespace, node: &str, on: bool) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(ns.client.clone());
    nodes
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": on}})),
        )
        .await
        .with_context(|| format!("cordoning {node}: {on}"))?;
    Ok(())
}

/// An Advanced StatefulSet annotated for auto-generation (zone required, hostname preferred): its
/// PersistentPodState appears with every Pod's zone and node. Every Pod deleted comes back
/// recreated with the recorded zone as nodeSelector and the recorded node as preferred affinity,
/// on the same zone and node. With the zone's only node cordoned, a deleted Pod waits unscheduled
/// rather than going to another zone, and lands back once the node is schedulable again.
#[tokio::test]
async fn recreated_pods_return_to_their_zone_and_node() -> anyhow::Result<()> {
    let ns = namespace("pps-zone").await?;
    ns.run(async {
        let name = "web";
        let yaml = format!(
            r#"apiVersion: apps.kruise.io/v1beta1
kind: StatefulSet
metadata:
  name: {name}
  annotations:
    kruise.io/auto-generate-persistent-pod-state: "true"
    kruise.io/required-persistent-topology: {ZONE}
    kruise.io/preferred-persistent-topology: {HOST}
spec:
  replicas: 3
  serviceName: {name}
  podManagementPolicy: Parallel
  selector:
    matchLabels:
      app: {name}
  template:
    metadata:
      labels:
        app: {name}
    spec:
      terminationGracePeriodSeconds: 1
      topologySpreadConstraints:
      - maxSkew: 1
        topologyKey: {ZONE}
        whenUnsatisfiable: ScheduleAnyway
        labelSelector:
          matchLabels:
            app: {name}
      containers:
      - name: main
        image: busybox:1.36
"#
        );
        ns.apply(&yaml).await?;
        let before = recorded(&ns, name, name, 3, &[ZONE, HOST]).await?;
        let generated = pps(&ns, name).await?.context("generated")?;
        let owner = generated
            .owner_references()
            .first()
            .context("an owner reference")?;
        ensure!(
            owner.kind == "StatefulSet" && owner.name == name && owner.controller == Some(true),
            "the StatefulSet controls its PersistentPodState: {owner:?}"
        );
        let old_uids: Vec<String> = pods(&ns, name)
            .await?
            .values()
            .filter_map(|p| p.uid())
            .collect();

        // Every Pod deleted: each comes back where it was recorded.
        ns.kubectl(&[
            "delete",
            "pods",
            "-l",
            &format!("app={name}"),
            "--wait=false",
        ])
        .await?;
        let back = eventually("the three Pods recreated and ready", TIMEOUT, || async {
            let now = pods(&ns, name).await?;
            let fresh = now.len() == 3
                && now
                    .values()
                    .all(|p| ready(p) && !old_uids.contains(&p.uid().unwrap_or_default()));
            Ok(fresh.then_some(now))
        })
        .await?;
        for (pod_name, pod) in &back {
            let state = &before[pod_name];
            let selector = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_selector.clone())
                .unwrap_or_default();
            ensure!(
                selector.get(ZONE) == state.node_topology_labels.get(ZONE),
                "{pod_name}: nodeSelector {selector:?} keeps the recorded zone {:?}",
                state.node_topology_labels
            );
            ensure!(
                preferred_hosts(pod)
                    == vec![(100, HOST.to_string(), vec![state.node_name.clone()])],
                "{pod_name}: preferred affinity to its recorded node: {:?}",
                preferred_hosts(pod)
            );
            ensure!(
                pod.annotations()
                    .get(api::ANNOTATION_INJECTED)
                    .map(String::as_str)
                    == Some(name),
                "{pod_name}: annotated with its PersistentPodState"
            );
            ensure!(
                node_of(pod) == state.node_name,
                "{pod_name} back on {} (recorded {})",
                node_of(pod),
                state.node_name
            );
        }

        // Required means required: the zone's only node cordoned, web-0 waits for it.
        let target = before["web-0"].node_name.clone();
        set_unschedulable(&ns, &target, true).await?;
        let waited = async {
            let uid = back["web-0"].uid();
            ns.kubectl(&["delete", "pod", "web-0", "--wait=false"])
                .await?;
            until(
                "web-0 recreated and refused by the scheduler",
                TIMEOUT,
                || async {
                    let Some(pod) = pods(&ns, name).await?.remove("web-0") else {
                        return Ok(false);
                    };
                    let unschedulable = kruise_core::pods::condition(&pod, "PodScheduled")
                        .is_some_and(|c| {
                            c.status == "False" && c.reason.as_deref() == Some("Unschedulable")
                        });
                    Ok(pod.uid() != uid && node_of(&pod).is_empty() && unschedulable)
                },
            )
            .await
        }
        .await;
        set_unschedulable(&ns, &target, false).await?;
        waited?;
        until("web-0 scheduled back on its node", TIMEOUT, || async {
            let pod = pods(&ns, name).await?.remove("web-0");
            Ok(pod.is_some_and(|p| node_of(&p) == target && ready(&p)))
        })
        .await?;
        Ok(())
    })
    .await
}

/// A Kubernetes StatefulSet (hostname preferred, as upstream's e2e): scaled down, the records of
/// the Pods gone go; the auto-generation annotation removed, the PersistentPodState goes, and
/// comes back with it; with `WhenDeleted` a scale-down keeps every record; a second
/// PersistentPodState for the same StatefulSet is refused; deleting the StatefulSet deletes it.
#[tokio::test]
async fn records_follow_scale_annotations_and_deletion() -> anyhow::Result<()> {
    let ns = namespace("pps-scale").await?;
    ns.run(async {
        let name = "db";
        let sts = |replicas: i32, auto: bool| {
            format!(
                r#"apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: {name}
  annotations:
    kruise.io/auto-generate-persistent-pod-state: "{auto}"
    kruise.io/preferred-persistent-topology: {HOST}
spec:
  replicas: {replicas}
  serviceName: {name}
  podManagementPolicy: Parallel
  selector:
    matchLabels:
      app: {name}
  template:
    metadata:
      labels:
        app: {name}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: main
        image: busybox:1.36
"#
            )
        };
        ns.apply(&sts(3, true)).await?;
        recorded(&ns, name, name, 3, &[HOST]).await?;

        ns.apply(&sts(1, true)).await?;
        recorded(&ns, name, name, 1, &[HOST]).await?;

        ns.apply(&sts(1, false)).await?;
        until(
            "the generated PersistentPodState deleted",
            TIMEOUT,
            || async { Ok(pps(&ns, name).await?.is_none()) },
        )
        .await?;
        ns.apply(&sts(1, true)).await?;
        recorded(&ns, name, name, 1, &[HOST]).await?;

        ns.kubectl(&[
            "patch",
            "persistentpodstate",
            name,
            "--type=merge",
            "-p",
            r#"{"spec":{"persistentPodStateRetentionPolicy":"WhenDeleted"}}"#,
        ])
        .await?;
        ns.apply(&sts(3, true)).await?;
        let three = recorded(&ns, name, name, 3, &[HOST]).await?;
        ns.apply(&sts(1, true)).await?;
        until(
            "the StatefulSet scaled down to one Pod",
            TIMEOUT,
            || async { Ok(pods(&ns, name).await?.len() == 1) },
        )
        .await?;
        let kept = pps(&ns, name).await?.context("kept")?;
        ensure!(
            kept.spec.persistent_pod_state_retention_policy == api::RETENTION_WHEN_DELETED,
            "the retention chosen survives the StatefulSet's changes"
        );
        ensure!(
            kept.status.map(|s| s.pod_states).unwrap_or_default() == three,
            "WhenDeleted keeps the records of the Pods scaled away"
        );

        // A second PersistentPodState for the same StatefulSet is refused.
        let other = format!(
            r#"apiVersion: apps.kruise.io/v1alpha1
kind: PersistentPodState
metadata:
  name: other
spec:
  targetRef:
    apiVersion: apps/v1
    kind: StatefulSet
    name: {name}
  requiredPersistentTopology:
    nodeTopologyKeys: [{HOST}]
"#
        );
        let refused = ns.apply(&other).await;
        let message = format!(
            "{:#}",
            refused
                .err()
                .context("a conflicting PersistentPodState is refused")?
        );
        ensure!(
            message.contains("in conflict with other PersistentPodState"),
            "{message}"
        );

        ns.kubectl(&["delete", "statefulset", name]).await?;
        until(
            "the PersistentPodState deleted with its StatefulSet",
            TIMEOUT,
            || async { Ok(pps(&ns, name).await?.is_none()) },
        )
        .await?;
        Ok(())
    })
    .await
}
