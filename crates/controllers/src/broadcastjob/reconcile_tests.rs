//! A BroadcastJob's reconcile against the in-memory cluster: a Pod per node, none again while the
//! cache has not shown them, slow start stopped by a refused create, and a stale copy of the job
//! writing no status.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kruise_api::broadcastjob::v1beta1::BroadcastJob;
use serde_json::json;

use super::reconcile_inner;
use crate::broadcastjob::{Config, Context};
use crate::driver::head::PodOwnerBase;
use crate::driver::scripted;
use crate::driver::writes::fake::{FakeCluster, Verb, listed, ready_node};

/// The context over `cluster` with `nodes` and empty, listed caches; Events go to a
/// scripted client.
fn context(cluster: &Arc<FakeCluster>, nodes: usize) -> (Context, scripted::Log) {
    let (base, log) = PodOwnerBase::over_cluster(super::super::CONTROLLER, cluster);
    let ctx = Context {
        base,
        nodes: listed(
            (0..nodes)
                .map(|i| ready_node(&format!("node-{i}"), &[]))
                .collect(),
        ),
        config: Config::default(),
    };
    (ctx, log)
}

fn job(cluster: &FakeCluster) -> BroadcastJob {
    let job: BroadcastJob = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "BroadcastJob",
        "metadata": {"name": "pull", "namespace": "ns", "uid": "job-uid"},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
                 "containers": [{"name": "c", "image": "busybox"}]}}},
    }))
    .expect("a BroadcastJob");
    cluster.insert(&job)
}

#[tokio::test]
async fn a_pod_per_node_and_none_again_while_the_cache_lags() {
    let cluster = FakeCluster::new();
    let job = job(&cluster);
    let (ctx, log) = context(&cluster, 3);

    reconcile_inner(&job, &ctx).await.expect("reconciled");

    assert_eq!(cluster.pod_nodes("ns"), vec!["node-0", "node-1", "node-2"]);
    let pod = &cluster.all::<Pod>(Some("ns"))[0];
    let owner = &pod.metadata.owner_references.as_ref().expect("an owner")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("BroadcastJob", "job-uid")
    );
    let stored: BroadcastJob = cluster.get(Some("ns"), "pull").expect("the job");
    assert_eq!(stored.status.map(|s| s.active), Some(3));
    assert_eq!(
        log.reasons(),
        vec!["SuccessfulCreate".to_owned(); 3],
        "one Event per Pod"
    );

    // The Pod cache has not shown them yet: the expectations hold the next reconcile back.
    let writes = cluster.records().len();
    let job: BroadcastJob = cluster.get(Some("ns"), "pull").expect("the job");
    reconcile_inner(&job, &ctx).await.expect("waiting");
    assert_eq!(cluster.records().len(), writes, "nothing written");
}

#[tokio::test]
async fn slow_start_stops_at_a_refused_create() {
    let cluster = FakeCluster::new();
    let job = job(&cluster);
    let (ctx, log) = context(&cluster, 5);
    // The first create (a batch of one) is refused: the batches after it are not tried.
    cluster.fail_next(Verb::Create, "", 422);

    reconcile_inner(&job, &ctx).await.expect("reconciled");

    let creates = cluster
        .records()
        .iter()
        .filter(|r| r.verb == Verb::Create)
        .count();
    assert_eq!(creates, 1, "one batch of one, refused");
    assert!(cluster.pod_nodes("ns").is_empty());
    let stored: BroadcastJob = cluster.get(Some("ns"), "pull").expect("the job");
    assert_eq!(
        stored.status.map(|s| s.active),
        Some(0),
        "nothing counted active"
    );
    assert_eq!(log.reasons(), vec!["FailedCreate".to_owned()]);
}

#[tokio::test]
async fn a_stale_copy_of_the_job_does_not_write_its_status() {
    let cluster = FakeCluster::new();
    let stale = job(&cluster);
    cluster.touch::<BroadcastJob>(Some("ns"), "pull");
    let (ctx, _log) = context(&cluster, 1);

    reconcile_inner(&stale, &ctx).await.expect("a stale copy");

    // Its status write is refused (the job's Events, published after it, are not repeated).
    let refused: Vec<(Verb, Option<u16>)> = cluster
        .records()
        .iter()
        .filter(|r| r.verb == Verb::PatchStatus)
        .map(|r| (r.verb, r.refused))
        .collect();
    assert_eq!(refused, vec![(Verb::PatchStatus, Some(409))]);
    let stored: BroadcastJob = cluster.get(Some("ns"), "pull").expect("the job");
    assert!(stored.status.is_none());
}
