//! The NodePodProbe controller's reconcile on the in-memory cluster: the probe of a Node that is
//! gone is deleted, entries of Pods gone or replaced are dropped, the probe states the node's
//! kruise-daemon reports become the Pods' conditions and markers (once), and a refused Pod write
//! is decided again or fails by its code.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use kruise_api::podprobemarker::{NodePodProbe, PodProbeMarker};
use kube::runtime::controller::Action;
use kube::runtime::watcher;
use serde_json::{Value, json};

use super::{Context, RACE_RETRY, reconcile};
use crate::cache::PodCache;
use crate::driver::caches::Shared;
use crate::driver::writes::fake::{FakeCluster, Verb, listed};
use crate::metrics::Metrics;

fn pod(name: &str, uid: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "uid": uid, "labels": {"app": "a"}},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": "Running", "podIP": "10.0.0.5"},
    }))
    .expect("a Pod")
}

fn ready_node(name: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }))
    .expect("a Node")
}

/// Marker `m`: probe `healthy` reported in condition `game.io/healthy`, label `healthy=true` when
/// it succeeds.
fn marker() -> PodProbeMarker {
    serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "PodProbeMarker",
        "metadata": {"name": "m", "namespace": "ns", "uid": "m-uid"},
        "spec": {"selector": {"matchLabels": {"app": "a"}}, "probes": [{
            "name": "healthy", "containerName": "c",
            "probe": {"exec": {"command": ["true"]}},
            "podConditionType": "game.io/healthy",
            "markerPolicy": [{"state": "Succeeded", "labels": {"healthy": "true"}}],
        }]},
    }))
    .expect("a PodProbeMarker")
}

/// NodePodProbe `node` holding an entry for each (name, uid), with `statuses` as its status.
fn node_probe(node: &str, entries: &[(&str, &str)], statuses: Value) -> NodePodProbe {
    let probes: Vec<Value> = entries
        .iter()
        .map(|(name, uid)| {
            json!({"name": name, "namespace": "ns", "uid": uid, "IP": "10.0.0.5",
                   "probes": [{"name": "m#healthy", "containerName": "c",
                               "probe": {"exec": {"command": ["true"]}}}]})
        })
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "NodePodProbe",
        "metadata": {"name": node, "uid": format!("{node}-uid")},
        "spec": {"podProbes": probes},
        "status": {"podProbeStatuses": statuses},
    }))
    .expect("a NodePodProbe")
}

/// A context whose caches show `pods` (as the cache holds them), `nodes` and marker `m`.
fn context(cluster: &Arc<FakeCluster>, pods: &[Pod], nodes: Vec<Node>) -> Arc<Context> {
    let cache = PodCache::new();
    cache.apply(watcher::Event::Init);
    for pod in pods {
        cache.apply(watcher::Event::InitApply(pod.clone()));
    }
    cache.apply(watcher::Event::InitDone);
    let mut registry = prometheus_client::registry::Registry::default();
    Arc::new(Context {
        writes: cluster.clone(),
        metrics: Metrics::register(&mut registry),
        pods: cache,
        nodes: Shared::from_store(listed(nodes)),
        markers: listed(vec![marker()]),
    })
}

fn succeeded(name: &str, uid: &str) -> Value {
    json!([{"name": name, "namespace": "ns", "uid": uid,
            "probeStates": [{"name": "m#healthy", "state": "Succeeded"}]}])
}

#[tokio::test]
async fn the_probe_of_a_node_that_is_gone_is_deleted() {
    let cluster = FakeCluster::new();
    let npp = cluster.insert(&node_probe("gone", &[], json!([])));
    let ctx = context(&cluster, &[], vec![ready_node("n1")]);

    let action = reconcile(Arc::new(npp), ctx).await.expect("reconciled");

    assert_eq!(action, Action::await_change());
    assert!(cluster.get::<NodePodProbe>(None, "gone").is_none());
    let deletes: Vec<_> = cluster
        .records()
        .into_iter()
        .filter(|r| r.verb == Verb::Delete)
        .map(|r| r.name)
        .collect();
    assert_eq!(deletes, ["gone"]);
}

#[tokio::test]
async fn entries_of_pods_gone_or_replaced_are_dropped() {
    let cluster = FakeCluster::new();
    let live = cluster.insert(&pod("p", "p-uid"));
    // `r` was replaced: a Pod of that name with another uid.
    let replaced = cluster.insert(&pod("r", "r-new"));
    let npp = cluster.insert(&node_probe(
        "n1",
        &[("p", "p-uid"), ("q", "q-uid"), ("r", "r-old")],
        json!([]),
    ));
    let ctx = context(&cluster, &[live, replaced], vec![ready_node("n1")]);

    reconcile(Arc::new(npp), ctx).await.expect("reconciled");

    let kept: Vec<String> = cluster
        .get::<NodePodProbe>(None, "n1")
        .expect("the NodePodProbe")
        .spec
        .pod_probes
        .into_iter()
        .map(|p| p.name)
        .collect();
    assert_eq!(kept, ["p"]);
}

#[tokio::test]
async fn probe_states_become_the_pods_condition_and_markers_once() {
    let cluster = FakeCluster::new();
    let live = cluster.insert(&pod("p", "p-uid"));
    let npp = cluster.insert(&node_probe(
        "n1",
        &[("p", "p-uid")],
        succeeded("p", "p-uid"),
    ));
    let ctx = context(
        &cluster,
        std::slice::from_ref(&live),
        vec![ready_node("n1")],
    );

    reconcile(Arc::new(npp.clone()), ctx)
        .await
        .expect("reconciled");

    let written: Pod = cluster.get(Some("ns"), "p").expect("the Pod");
    assert_eq!(written.metadata.uid.as_deref(), Some("p-uid"));
    assert_eq!(
        written
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("healthy"))
            .map(String::as_str),
        Some("true")
    );
    let condition = written
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "game.io/healthy"))
        .expect("the probe's condition");
    assert_eq!(condition.status, "True");

    // Once the cache shows the Pod as written, nothing is written again.
    let before = cluster.records().len();
    let ctx = context(&cluster, &[written], vec![ready_node("n1")]);
    reconcile(Arc::new(npp), ctx).await.expect("reconciled");
    assert_eq!(cluster.records().len(), before, "nothing written again");
}

/// A Pod that moved or went since the cache showed it is decided again (no failure); a write the
/// apiserver refuses otherwise fails the reconcile.
#[tokio::test]
async fn a_refused_pod_write_is_a_race_or_a_failure_by_its_code() {
    for (code, race) in [(409, true), (404, true), (422, false), (500, false)] {
        let cluster = FakeCluster::new();
        let live = cluster.insert(&pod("p", "p-uid"));
        let npp = cluster.insert(&node_probe(
            "n1",
            &[("p", "p-uid")],
            succeeded("p", "p-uid"),
        ));
        let ctx = context(
            &cluster,
            std::slice::from_ref(&live),
            vec![ready_node("n1")],
        );
        cluster.fail_next(Verb::Patch, "p", code);

        let result = reconcile(Arc::new(npp), ctx).await;

        if race {
            assert_eq!(result.ok(), Some(Action::requeue(RACE_RETRY)), "{code}");
        } else {
            let error = result.expect_err("a refused write fails");
            assert!(!error.is_race(), "{code}: {error}");
        }
        let pod: Pod = cluster.get(Some("ns"), "p").expect("the Pod");
        assert!(
            pod.metadata
                .labels
                .as_ref()
                .is_none_or(|l| !l.contains_key("healthy")),
            "{code}: nothing written"
        );
    }
}
