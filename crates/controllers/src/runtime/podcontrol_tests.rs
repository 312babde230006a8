//! Pod control against the in-memory cluster: what each write sends, and what a conflict, a Pod
//! gone, a refusal or a server error does to the owner's reconcile (decided again, told in an
//! Event, or failed), without a cluster.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolumeClaim, Pod};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kruise_api::keys;
use kruise_core::expectations::Expectations;
use kruise_core::inplace::InPlacePlan;
use serde_json::{Value, json};

use super::{Outcome, PodControl, Wording};
use crate::driver::scripted;
use crate::driver::writes::fake::{FakeCluster, Verb};
use crate::driver::writes::{LiveReads, Writes};
use crate::error::Error;
use crate::events::EventRecorder;
use crate::metrics::Metrics;

const OWNER: &str = "web";

/// What one reconcile's Pod control needs, over `cluster`; Events go to a scripted client.
struct Bench {
    writes: Arc<dyn Writes>,
    live: Arc<dyn LiveReads>,
    expectations: Mutex<Expectations>,
    recorder: EventRecorder,
    metrics: Arc<Metrics>,
    log: scripted::Log,
}

impl Bench {
    fn new(cluster: &Arc<FakeCluster>) -> Self {
        let (client, log) = scripted::client(Vec::new());
        let mut registry = prometheus_client::registry::Registry::default();
        Self {
            writes: cluster.clone(),
            live: cluster.clone(),
            expectations: Mutex::new(Expectations::new(Duration::from_secs(300))),
            recorder: crate::driver::recorder(client, "test-controller"),
            metrics: Metrics::register(&mut registry),
            log,
        }
    }

    fn control(&self, now: Timestamp) -> PodControl<'_> {
        PodControl {
            writes: &self.writes,
            live: &self.live,
            namespace: "ns",
            owner: ObjectReference {
                api_version: Some("apps.kruise.io/v1alpha1".into()),
                kind: Some("CloneSet".into()),
                name: Some(OWNER.into()),
                namespace: Some("ns".into()),
                uid: Some("owner-uid".into()),
                ..ObjectReference::default()
            },
            key: format!("ns/{OWNER}"),
            expectations: &self.expectations,
            recorder: &self.recorder,
            metrics: &self.metrics,
            controller: "test-controller",
            now,
            wording: Wording::Kruise,
            budgets: None,
        }
    }

    /// The reasons and notes of the Events published, in order.
    fn events(&self) -> Vec<(String, String)> {
        self.log.reasons_and_notes()
    }

    fn pending_expectations(&self) -> usize {
        self.expectations.lock().map(|e| e.len()).unwrap_or(0)
    }
}

fn start() -> Timestamp {
    "2026-11-30T10:00:00Z".parse().expect("a timestamp")
}

/// A running Pod of the owner, image `app:1`; with `gated`, it has the `InPlaceUpdateReady`
/// readiness gate (set True) and is Ready.
fn pod(name: &str, gated: bool) -> Pod {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns",
                     "labels": {"app": "web", "controller-revision-hash": "web-1"}},
        "spec": {"containers": [{"name": "app", "image": "app:1"}]},
        "status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-30T09:00:00Z"}]},
    });
    if gated {
        pod["spec"]["readinessGates"] =
            json!([{"conditionType": keys::CONDITION_IN_PLACE_UPDATE_READY}]);
        pod["status"]["conditions"]
            .as_array_mut()
            .expect("conditions")
            .push(
                json!({"type": keys::CONDITION_IN_PLACE_UPDATE_READY, "status": "True",
                         "lastTransitionTime": "2026-11-30T09:00:00Z"}),
            );
    }
    serde_json::from_value(pod).expect("a Pod")
}

fn new_image() -> InPlacePlan {
    InPlacePlan {
        images: BTreeMap::from([("app".to_owned(), "app:2".to_owned())]),
        restarts_containers: true,
        ..InPlacePlan::default()
    }
}

fn revision_labels() -> BTreeMap<String, String> {
    BTreeMap::from([("controller-revision-hash".to_owned(), "web-2".to_owned())])
}

fn image_of(cluster: &FakeCluster, name: &str) -> String {
    let pod: Pod = cluster.get(Some("ns"), name).expect("the Pod");
    pod.spec
        .and_then(|s| s.containers.into_iter().next())
        .and_then(|c| c.image)
        .unwrap_or_default()
}

fn condition(pod: &Pod, type_: &str) -> Option<String> {
    kruise_core::pods::condition(pod, type_).map(|c| c.status.clone())
}

async fn update(bench: &Bench, pod: &Pod, now: Timestamp, grace: i32) -> Result<Outcome, Error> {
    bench
        .control(now)
        .update_in_place(pod, &new_image(), &revision_labels(), "web-2", grace)
        .await
}

#[tokio::test]
async fn an_in_place_update_changes_the_image_and_keeps_the_pod() {
    let cluster = FakeCluster::new();
    let seen = cluster.insert(&pod("web-0", false));
    let bench = Bench::new(&cluster);

    let outcome = update(&bench, &seen, start(), 0).await.expect("updated");

    assert_eq!(outcome, Outcome::MODIFIED);
    let after: Pod = cluster.get(Some("ns"), "web-0").expect("the Pod");
    assert_eq!(after.metadata.uid, seen.metadata.uid, "the same Pod");
    assert_eq!(image_of(&cluster, "web-0"), "app:2");
    let labels = after.metadata.labels.unwrap_or_default();
    assert_eq!(labels["controller-revision-hash"], "web-2");
    let annotations = after.metadata.annotations.unwrap_or_default();
    assert!(
        annotations.contains_key(keys::ANNOTATION_IN_PLACE_UPDATE_STATE),
        "the update's state is recorded for the Pod's completion check: {annotations:?}"
    );
    // No readiness gate: nothing to drain, one write of the Pod.
    assert_eq!(cluster.done(), vec![(Verb::Patch, "web-0".to_owned())]);
    assert_eq!(
        bench.events(),
        vec![(
            "SuccessfulUpdatePodInPlace".to_owned(),
            "successfully update pod web-0 in-place(revision web-2)".to_owned()
        )]
    );
    assert_eq!(
        bench.pending_expectations(),
        1,
        "the cache is to show the write"
    );
}

#[tokio::test]
async fn a_gated_pod_is_drained_and_keeps_its_image_through_the_grace_period() {
    let cluster = FakeCluster::new();
    let seen = cluster.insert(&pod("web-0", true));
    let bench = Bench::new(&cluster);

    // First the drain: InPlaceUpdateReady and Ready False, then wait out the grace period.
    let outcome = update(&bench, &seen, start(), 10).await.expect("drained");
    assert!(outcome.modified);
    assert_eq!(outcome.after, Some(Duration::from_secs(10)));
    let drained: Pod = cluster.get(Some("ns"), "web-0").expect("the Pod");
    assert_eq!(
        condition(&drained, keys::CONDITION_IN_PLACE_UPDATE_READY).as_deref(),
        Some("False")
    );
    assert_eq!(condition(&drained, "Ready").as_deref(), Some("False"));
    assert_eq!(
        image_of(&cluster, "web-0"),
        "app:1",
        "nothing restarts while draining"
    );
    assert_eq!(
        cluster.done(),
        vec![(Verb::PatchStatus, "web-0".to_owned())]
    );

    // Early: only a wait.
    let early = start() + SignedDuration::from_secs(4);
    let outcome = update(&bench, &drained, early, 10).await.expect("waiting");
    assert_eq!(outcome.after, Some(Duration::from_secs(6)));
    assert!(!outcome.modified);

    // Once the grace period is over, the image.
    let later = start() + SignedDuration::from_secs(11);
    let outcome = update(&bench, &drained, later, 10).await.expect("updated");
    assert!(outcome.modified);
    assert_eq!(image_of(&cluster, "web-0"), "app:2");
    assert_eq!(
        cluster.done(),
        vec![
            (Verb::PatchStatus, "web-0".to_owned()),
            (Verb::Patch, "web-0".to_owned())
        ]
    );
}

#[tokio::test]
async fn a_pod_changed_since_it_was_read_is_decided_again_not_overwritten() {
    let cluster = FakeCluster::new();
    let seen = cluster.insert(&pod("web-0", false));
    // Someone else writes the Pod after the reconcile read it.
    cluster.touch::<Pod>(Some("ns"), "web-0");
    let bench = Bench::new(&cluster);

    let outcome = update(&bench, &seen, start(), 0)
        .await
        .expect("a race is no failure");

    assert_eq!(
        outcome,
        Outcome {
            modified: false,
            after: Some(Duration::from_secs(1)),
        }
    );
    assert_eq!(image_of(&cluster, "web-0"), "app:1");
    let refused: Vec<Option<u16>> = cluster.records().iter().map(|r| r.refused).collect();
    assert_eq!(refused, vec![Some(422)], "the resourceVersion test failed");
    assert!(
        bench.events().is_empty(),
        "a race is not told: {:?}",
        bench.events()
    );
    assert_eq!(bench.pending_expectations(), 0);
}

#[tokio::test]
async fn refusals_of_an_in_place_update_by_code() {
    // (code, the reconcile fails, an Event says so)
    let cases = [
        (404, false, false),
        (409, false, false),
        (422, true, true),
        (500, true, true),
    ];
    for (code, fails, told) in cases {
        let cluster = FakeCluster::new();
        let seen = cluster.insert(&pod("web-0", false));
        cluster.fail_next(Verb::Patch, "web-0", code);
        let bench = Bench::new(&cluster);

        let result = update(&bench, &seen, start(), 0).await;

        assert_eq!(result.is_err(), fails, "{code}: {result:?}");
        if let Ok(outcome) = result {
            assert_eq!(
                outcome.after,
                Some(Duration::from_secs(1)),
                "{code}: looked at again"
            );
        }
        let reasons: Vec<String> = bench.events().into_iter().map(|(r, _)| r).collect();
        let expected = if told {
            vec!["FailedUpdatePodInPlace".to_owned()]
        } else {
            Vec::new()
        };
        assert_eq!(reasons, expected, "{code}");
        assert_eq!(image_of(&cluster, "web-0"), "app:1", "{code}");
    }
}

#[tokio::test]
async fn a_resize_goes_through_its_subresource_and_changes_only_resources() {
    let cluster = FakeCluster::new();
    let mut sized = pod("web-0", false);
    if let Some(spec) = sized.spec.as_mut() {
        spec.containers[0].resources = Some(
            serde_json::from_value(json!({"requests": {"cpu": "100m"}, "limits": {"cpu": "200m"}}))
                .expect("resources"),
        );
    }
    let seen = cluster.insert(&sized);
    let bench = Bench::new(&cluster);
    let plan = InPlacePlan {
        resources: BTreeMap::from([(
            "app".to_owned(),
            kruise_core::inplace::ResourceChange {
                requests: BTreeMap::from([("cpu".to_owned(), quantity("150m"))]),
                limits: BTreeMap::from([("cpu".to_owned(), quantity("300m"))]),
            },
        )]),
        ..InPlacePlan::default()
    };

    let outcome = bench
        .control(start())
        .update_in_place(&seen, &plan, &revision_labels(), "web-2", 0)
        .await
        .expect("resized");

    assert!(outcome.modified);
    let verbs: Vec<Verb> = cluster.done().into_iter().map(|(verb, _)| verb).collect();
    assert_eq!(verbs, vec![Verb::PatchResize, Verb::Patch]);
    let after: Value =
        serde_json::to_value(cluster.get::<Pod>(Some("ns"), "web-0").expect("the Pod"))
            .expect("JSON");
    assert_eq!(
        after["spec"]["containers"][0]["resources"]["limits"]["cpu"],
        "300m"
    );
    assert_eq!(
        after["spec"]["containers"][0]["resources"]["requests"]["cpu"],
        "150m"
    );
    assert_eq!(after["spec"]["containers"][0]["image"], "app:1");
    assert_eq!(
        after["metadata"]["labels"]["controller-revision-hash"],
        "web-2"
    );
}

fn quantity(value: &str) -> k8s_openapi::apimachinery::pkg::api::resource::Quantity {
    k8s_openapi::apimachinery::pkg::api::resource::Quantity(value.to_owned())
}

#[tokio::test]
async fn a_pod_is_deleted_only_as_it_was_seen() {
    // The Pod seen was replaced by another of the same name: nothing is deleted, no failure.
    let with_uid = |uid: &str| {
        let mut pod = pod("web-0", false);
        pod.metadata.uid = Some(uid.to_owned());
        pod
    };
    let cluster = FakeCluster::new();
    let seen = cluster.insert(&with_uid("first"));
    cluster.forget::<Pod>(Some("ns"), "web-0");
    let successor = cluster.insert(&with_uid("second"));
    let bench = Bench::new(&cluster);
    bench
        .control(start())
        .delete_pod(&seen)
        .await
        .expect("a race");
    let kept: Pod = cluster
        .get(Some("ns"), "web-0")
        .expect("the successor stays");
    assert_eq!(kept.metadata.uid, successor.metadata.uid);
    assert!(bench.events().is_empty());
    assert_eq!(bench.pending_expectations(), 0, "no deletion to wait for");

    // The Pod seen: deleted, told.
    bench
        .control(start())
        .delete_pod(&successor)
        .await
        .expect("deleted");
    assert!(cluster.get::<Pod>(Some("ns"), "web-0").is_none());
    assert_eq!(
        bench.events(),
        vec![(
            "SuccessfulDelete".to_owned(),
            "succeed to delete pod web-0".to_owned()
        )]
    );
    assert_eq!(bench.pending_expectations(), 1);

    // A server error: the reconcile fails and says so.
    let cluster = FakeCluster::new();
    let seen = cluster.insert(&pod("web-1", false));
    cluster.fail_next(Verb::Delete, "web-1", 500);
    let bench = Bench::new(&cluster);
    let result = bench.control(start()).delete_pod(&seen).await;
    assert!(result.is_err());
    let reasons: Vec<String> = bench.events().into_iter().map(|(r, _)| r).collect();
    assert_eq!(reasons, vec!["FailedDelete".to_owned()]);
    assert!(cluster.get::<Pod>(Some("ns"), "web-1").is_some());
}

fn claim(name: &str) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "1Gi"}}},
    }))
    .expect("a claim")
}

#[tokio::test]
async fn a_pod_is_created_after_its_claims_and_a_refusal_is_told() {
    // A claim that already exists is no failure: the Pod is created.
    let cluster = FakeCluster::new();
    cluster.insert(&claim("data-web-0"));
    let bench = Bench::new(&cluster);
    let created = bench
        .control(start())
        .create_pod(
            pod("web-0", false),
            vec![claim("data-web-0"), claim("logs-web-0")],
        )
        .await;
    assert!(created);
    assert!(cluster.get::<Pod>(Some("ns"), "web-0").is_some());
    assert!(
        cluster
            .get::<PersistentVolumeClaim>(Some("ns"), "logs-web-0")
            .is_some()
    );
    assert_eq!(
        bench.events(),
        vec![(
            "SuccessfulCreate".to_owned(),
            "succeed to create pod web-0".to_owned()
        )]
    );
    assert_eq!(bench.pending_expectations(), 1, "the new Pod is expected");

    // The Pod refused (a field the apiserver rejects): told, not expected, no Pod.
    let cluster = FakeCluster::new();
    cluster.fail_next(Verb::Create, "web-1", 422);
    let bench = Bench::new(&cluster);
    let created = bench
        .control(start())
        .create_pod(pod("web-1", false), Vec::new())
        .await;
    assert!(!created);
    let events = bench.events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].0, "FailedCreate");
    assert!(
        events[0].1.starts_with("failed to create pod web-1:"),
        "{events:?}"
    );
    assert_eq!(bench.pending_expectations(), 0);

    // A claim that cannot be created: no Pod.
    let cluster = FakeCluster::new();
    cluster.fail_next(Verb::Create, "data-web-2", 500);
    let bench = Bench::new(&cluster);
    let created = bench
        .control(start())
        .create_pod(pod("web-2", false), vec![claim("data-web-2")])
        .await;
    assert!(!created);
    assert!(cluster.get::<Pod>(Some("ns"), "web-2").is_none());
    let reasons: Vec<String> = bench.events().into_iter().map(|(r, _)| r).collect();
    assert_eq!(reasons, vec!["FailedCreate".to_owned()]);
}

#[tokio::test]
async fn finishing_an_update_writes_its_condition_and_lifecycle_in_one_status_write() {
    let cluster = FakeCluster::new();
    let mut updated = pod("web-0", true);
    if let Some(conditions) = updated.status.as_mut().and_then(|s| s.conditions.as_mut()) {
        for c in conditions.iter_mut() {
            c.status = "False".into();
        }
    }
    let seen = cluster.insert(&updated);
    let bench = Bench::new(&cluster);
    let outcome = bench
        .control(start())
        .finish_in_place(
            &seen,
            kruise_core::inplace::Finish {
                lifecycle: Some(kruise_core::pods::LifecycleState::Updated),
                kruise_pod_ready: false,
            },
        )
        .await
        .expect("finished");
    assert_eq!(outcome, Outcome::MODIFIED);
    assert_eq!(
        cluster.done(),
        vec![(Verb::PatchStatus, "web-0".to_owned())]
    );
    let after: Pod = cluster.get(Some("ns"), "web-0").expect("the Pod");
    assert_eq!(
        condition(&after, keys::CONDITION_IN_PLACE_UPDATE_READY).as_deref(),
        Some("True")
    );
    assert_eq!(
        kruise_core::pods::lifecycle_state(&after),
        kruise_core::pods::LifecycleState::Updated
    );

    // Finishing from a stale copy writes nothing and is no failure.
    let outcome = bench
        .control(start())
        .finish_in_place(
            &seen,
            kruise_core::inplace::Finish {
                lifecycle: None,
                kruise_pod_ready: false,
            },
        )
        .await
        .expect("a race");
    assert_eq!(outcome, Outcome::default());
}
