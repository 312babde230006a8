//! A CloneSet's whole loop against the in-memory cluster: each round reconciles on caches that show
//! everything written so far (a perfect informer), and a minimal kubelet runs what is scheduled.
//! Scaling up names and creates the Pods once; an image change is rolled out in place, the same
//! Pods (names and UIDs) running the new image.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kruise_api::cloneset::v1beta1::CloneSet;
use kube::api::Patch;
use kube::runtime::watcher;
use serde_json::json;

use super::reconcile;
use crate::cache::PodCache;
use crate::cloneset::{CONTROLLER, Config, Context};
use crate::driver::head::PodOwnerBase;
use crate::driver::scripted;
use crate::driver::writes::fake::{FakeCluster, listed, run_pods};
use crate::driver::writes::{Part, Writer};

/// A context whose caches show the cluster as it is now.
fn mirror(cluster: &Arc<FakeCluster>) -> (Context, scripted::Log) {
    let (mut base, log) = PodOwnerBase::over_cluster(CONTROLLER, cluster);
    let pods = PodCache::new();
    pods.apply(watcher::Event::Init);
    for pod in cluster.all::<Pod>(Some("ns")) {
        pods.apply(watcher::Event::InitApply(pod));
    }
    pods.apply(watcher::Event::InitDone);
    base.pods = pods;
    base.revisions = listed(cluster.all::<ControllerRevision>(Some("ns")));
    let ctx = Context {
        base,
        pvcs: listed(cluster.all::<PersistentVolumeClaim>(Some("ns"))),
        nodes: listed(Vec::new()),
        config: Config::default(),
        predownload: crate::predownload::Tracker::default(),
    };
    (ctx, log)
}

/// Reconciles round after round (the kubelet running between) until a round writes nothing;
/// returns how many rounds wrote, and the most Pods unavailable after any of them (not Ready, or
/// an in-place update under way).
async fn converge(cluster: &Arc<FakeCluster>) -> (usize, usize) {
    let mut most_unavailable = 0;
    for round in 0..30 {
        let cs: CloneSet = cluster.get(Some("ns"), "web").expect("the CloneSet");
        let (ctx, _log) = mirror(cluster);
        let before = cluster.records().len();
        reconcile(Arc::new(cs), Arc::new(ctx))
            .await
            .expect("a reconcile");
        if cluster.records().len() == before {
            return (round, most_unavailable);
        }
        let now = k8s_openapi::jiff::Timestamp::now();
        let unavailable = cluster
            .all::<Pod>(Some("ns"))
            .iter()
            .filter(|p| !kruise_core::pods::is_update_ready(p, 0, now))
            .count();
        most_unavailable = most_unavailable.max(unavailable);
        run_pods(cluster, "ns", true).await;
    }
    panic!("no convergence in 30 rounds: {:#?}", cluster.records());
}

fn pods(cluster: &FakeCluster) -> BTreeMap<String, (String, String)> {
    cluster
        .all::<Pod>(Some("ns"))
        .into_iter()
        .map(|p| {
            let image = p
                .spec
                .as_ref()
                .and_then(|s| s.containers[0].image.clone())
                .unwrap_or_default();
            (
                p.metadata.name.unwrap_or_default(),
                (p.metadata.uid.unwrap_or_default(), image),
            )
        })
        .collect()
}

#[tokio::test]
async fn scaled_up_once_then_updated_in_place_keeping_every_pod() {
    let cluster = FakeCluster::new();
    let cs: CloneSet = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "CloneSet",
        "metadata": {"name": "web", "namespace": "ns", "uid": "cs-uid", "generation": 1},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "app", "image": "app:1"}]}},
                 // What the defaulting webhook would have written, with one Pod at a time.
                 "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {
                     "podUpdatePolicy": "InPlaceIfPossible", "partition": 0,
                     "maxUnavailable": 1, "maxSurge": 0}},
                 "scaleStrategy": {"maxUnavailable": 1}, "revisionHistoryLimit": 10},
    }))
    .expect("a CloneSet");
    cluster.insert(&cs);

    converge(&cluster).await;
    let before = pods(&cluster);
    assert_eq!(before.len(), 3, "{before:?}");
    assert!(before.keys().all(|name| name.starts_with("web-")));
    assert!(before.values().all(|(_, image)| image == "app:1"));
    let status = cluster
        .get::<CloneSet>(Some("ns"), "web")
        .and_then(|cs| cs.status)
        .expect("a status");
    assert_eq!((status.replicas, status.ready_replicas), (3, 3));

    // `kubectl set image`: the spec moves, the generation with it.
    let sets = Writer::<CloneSet>::namespaced(cluster.clone(), "ns");
    sets.patch_part(
        "web",
        Part::Object,
        &Patch::Merge(json!({"spec": {"template": {"spec": {"containers":
            [{"name": "app", "image": "app:2"}]}}}})),
    )
    .await
    .expect("the new image");
    let (rounds, most_unavailable) = converge(&cluster).await;
    assert!(rounds >= 3, "one Pod at a time: {rounds} rounds");
    assert_eq!(most_unavailable, 1, "maxUnavailable 1 is kept");

    let after = pods(&cluster);
    let same: Vec<(&String, &String)> = before.iter().map(|(n, (uid, _))| (n, uid)).collect();
    let kept: Vec<(&String, &String)> = after.iter().map(|(n, (uid, _))| (n, uid)).collect();
    assert_eq!(same, kept, "the same Pods, names and UIDs");
    assert!(
        after.values().all(|(_, image)| image == "app:2"),
        "{after:?}"
    );
    let status = cluster
        .get::<CloneSet>(Some("ns"), "web")
        .and_then(|cs| cs.status)
        .expect("a status");
    assert_eq!(
        (status.updated_replicas, status.updated_ready_replicas),
        (3, 3),
        "{status:?}"
    );
    let restarts: Vec<i32> = cluster
        .all::<Pod>(Some("ns"))
        .iter()
        .filter_map(|p| {
            p.status
                .as_ref()?
                .container_statuses
                .as_ref()?
                .first()
                .map(|c| c.restart_count)
        })
        .collect();
    assert_eq!(
        restarts,
        vec![1, 1, 1],
        "each container restarted once, in place"
    );
}
