//! The budget controller's Pod writes against the in-memory cluster: marking the Pods a budget
//! guards, and dropping the guard label only from Pods that still name a budget that is gone.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kruise_api::policy::v1alpha1::PodUnavailableBudget;
use kruise_api::policy::{POD_GUARDED_LABEL, POD_RELATED_PUB_ANNOTATION};
use kube::runtime::watcher;
use serde_json::json;

use super::{mark_related, sweep_stale_guards};
use crate::cache::PodCache;
use crate::driver::writes::Writes;
use crate::driver::writes::fake::{FakeCluster, Verb};

fn pod(name: &str, related: Option<&str>, guarded: bool) -> Pod {
    let mut pod = json!({
        "metadata": {"name": name, "namespace": "ns", "uid": format!("{name}-uid"),
                     "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": "Running"},
    });
    if let Some(budget) = related {
        pod["metadata"]["annotations"] = json!({POD_RELATED_PUB_ANNOTATION: budget});
    }
    if guarded {
        pod["metadata"]["labels"][POD_GUARDED_LABEL] = json!("true");
    }
    serde_json::from_value(pod).expect("a Pod")
}

fn budget() -> PodUnavailableBudget {
    serde_json::from_value(json!({
        "apiVersion": "policy.kruise.io/v1alpha1", "kind": "PodUnavailableBudget",
        "metadata": {"name": "web", "namespace": "ns", "uid": "pub-uid"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "maxUnavailable": 1},
    }))
    .expect("a budget")
}

fn labels_and_related(cluster: &FakeCluster, name: &str) -> (Option<String>, Option<String>) {
    let pod: Pod = cluster.get(Some("ns"), name).expect("the Pod");
    (
        pod.metadata
            .labels
            .and_then(|l| l.get(POD_GUARDED_LABEL).cloned()),
        pod.metadata
            .annotations
            .and_then(|a| a.get(POD_RELATED_PUB_ANNOTATION).cloned()),
    )
}

#[tokio::test]
async fn a_budget_marks_its_pods_once_and_tells_failures_by_code() {
    let cluster = FakeCluster::new();
    let marked = cluster.insert(&pod("marked", Some("web"), true));
    let bare = cluster.insert(&pod("bare", None, false));
    let writes: Arc<dyn Writes> = cluster.clone();

    mark_related(
        &writes,
        &budget(),
        &[Arc::new(marked), Arc::new(bare.clone())],
    )
    .await
    .expect("marked");

    assert_eq!(
        cluster.done(),
        vec![(Verb::Patch, "bare".to_owned())],
        "a Pod already marked is not written"
    );
    assert_eq!(
        labels_and_related(&cluster, "bare"),
        (Some("true".into()), Some("web".into()))
    );

    // (code, the reconcile fails)
    for (code, fails) in [(404, false), (409, false), (500, true)] {
        let cluster = FakeCluster::new();
        let bare = cluster.insert(&pod("bare", None, false));
        cluster.fail_next(Verb::Patch, "bare", code);
        let writes: Arc<dyn Writes> = cluster.clone();
        let result = mark_related(&writes, &budget(), &[Arc::new(bare)]).await;
        assert_eq!(result.is_err(), fails, "{code}: {result:?}");
    }
}

#[tokio::test]
async fn a_guard_is_dropped_only_from_pods_still_naming_the_budget_that_is_gone() {
    let cluster = FakeCluster::new();
    let orphaned = cluster.insert(&pod("orphaned", Some("gone"), true));
    let taken = cluster.insert(&pod("taken", Some("gone"), true));
    let kept = cluster.insert(&pod("kept", Some("web"), true));
    let cache = PodCache::new();
    for pod in [&orphaned, &taken, &kept] {
        cache.apply(watcher::Event::Apply(pod.clone()));
    }
    // Since the cache saw it, another budget took this Pod: it keeps its label.
    let mut retaken = taken.clone();
    retaken
        .metadata
        .annotations
        .get_or_insert_default()
        .insert(POD_RELATED_PUB_ANNOTATION.into(), "web".into());
    retaken.metadata.resource_version = None;
    cluster.forget::<Pod>(Some("ns"), "taken");
    cluster.insert(&retaken);
    let writes: Arc<dyn Writes> = cluster.clone();

    let dropped = sweep_stale_guards(&writes, &cache, &[Arc::new(budget())]).await;

    assert_eq!(dropped, vec!["ns/orphaned".to_owned()]);
    assert_eq!(labels_and_related(&cluster, "orphaned").0, None);
    assert_eq!(labels_and_related(&cluster, "taken").0, Some("true".into()));
    assert_eq!(labels_and_related(&cluster, "kept").0, Some("true".into()));
    let refused: Vec<(String, Option<u16>)> = cluster
        .records()
        .iter()
        .map(|r| (r.name.clone(), r.refused))
        .collect();
    assert!(
        refused.contains(&("taken".to_owned(), Some(422))),
        "the precondition refused it: {refused:?}"
    );
    assert!(
        !refused.iter().any(|(name, _)| name == "kept"),
        "a Pod its budget still guards is not written: {refused:?}"
    );
}
