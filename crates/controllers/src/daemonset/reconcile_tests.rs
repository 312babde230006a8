//! An Advanced DaemonSet's reconcile against the in-memory cluster: its revision registered and a
//! Pod on every node its selector picks, nothing again while the caches lag, and a refused create
//! told and retried.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use kruise_api::daemonset::v1beta1::DaemonSet;
use serde_json::{Value, json};

use super::reconcile_inner;
use crate::daemonset::{Config, Context};
use crate::driver::head::PodOwnerBase;
use crate::driver::scripted;
use crate::driver::writes::fake::{FakeCluster, Verb, listed, ready_node};

/// The context over `cluster`: three nodes (two in zone `a`), empty listed caches; Events go to
/// a scripted client.
fn context(cluster: &Arc<FakeCluster>) -> (Context, scripted::Log) {
    let (base, log) = PodOwnerBase::over_cluster(super::super::CONTROLLER, cluster);
    let ctx = Context {
        base,
        nodes: listed(
            [("n0", "a"), ("n1", "a"), ("n2", "b")]
                .map(|(name, zone)| ready_node(name, &[("zone", zone)]))
                .to_vec(),
        ),
        config: Config::default(),
        predownload: crate::predownload::Tracker::default(),
    };
    (ctx, log)
}

fn daemonset(cluster: &FakeCluster, extra: Value) -> DaemonSet {
    let mut ds = json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": "ns", "uid": "ds-uid", "generation": 1},
        "spec": {"selector": {"matchLabels": {"app": "agent"}},
                 "template": {"metadata": {"labels": {"app": "agent"}},
                              "spec": {"containers": [{"name": "c", "image": "agent:1"}]}}},
    });
    json_patch::merge(&mut ds, &extra);
    let ds: DaemonSet = serde_json::from_value(ds).expect("a DaemonSet");
    cluster.insert(&ds)
}

#[tokio::test]
async fn a_pod_on_every_selected_node_and_nothing_again_while_the_caches_lag() {
    let cluster = FakeCluster::new();
    let ds = daemonset(
        &cluster,
        json!({"spec": {"template": {"spec": {"nodeSelector": {"zone": "a"}}}}}),
    );
    let (ctx, log) = context(&cluster);

    reconcile_inner(&ds, &ctx).await.expect("reconciled");

    let revisions = cluster.all::<ControllerRevision>(Some("ns"));
    assert_eq!(revisions.len(), 1, "the template's revision is registered");
    assert_eq!(cluster.pod_nodes("ns"), vec!["n0", "n1"], "zone a only");
    let pod = &cluster.all::<Pod>(Some("ns"))[0];
    let owner = &pod.metadata.owner_references.as_ref().expect("an owner")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("DaemonSet", "ds-uid")
    );
    let stored: DaemonSet = cluster.get(Some("ns"), "agent").expect("the DaemonSet");
    let status = stored.status.expect("a status");
    assert_eq!(status.desired_number_scheduled, 2);
    let reasons = log.reasons();
    assert_eq!(reasons, vec!["SuccessfulCreate".to_owned(); 2]);

    // Neither the revision nor the Pods are in the caches yet: the next reconcile waits.
    let writes = cluster.records().len();
    let ds: DaemonSet = cluster.get(Some("ns"), "agent").expect("the DaemonSet");
    reconcile_inner(&ds, &ctx).await.expect("waiting");
    assert_eq!(cluster.records().len(), writes, "nothing written");
}

#[tokio::test]
async fn a_refused_create_is_told_and_the_rest_wait() {
    let cluster = FakeCluster::new();
    let ds = daemonset(&cluster, json!({}));
    let (ctx, log) = context(&cluster);
    // The first Pod (named by the server from `agent-`) is refused.
    cluster.fail_next(Verb::Create, "agent-", 422);

    let action = reconcile_inner(&ds, &ctx).await.expect("reconciled");

    let creates: Vec<(String, Option<u16>)> = cluster
        .records()
        .iter()
        .filter(|r| r.verb == Verb::Create && r.kind == "Pod")
        .map(|r| (r.name.clone(), r.refused))
        .collect();
    assert_eq!(
        creates,
        vec![("agent-".to_owned(), Some(422))],
        "slow start: a refused batch of one stops the rest"
    );
    assert!(cluster.pod_nodes("ns").is_empty());
    let reasons = log.reasons();
    assert_eq!(reasons, vec!["FailedCreate".to_owned()]);
    assert!(
        action == kube::runtime::controller::Action::requeue(std::time::Duration::from_secs(2)),
        "tried again soon: {action:?}"
    );
}
