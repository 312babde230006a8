//! The group commit on an in-memory apiserver ([`super::super::fake`]): a ConfigMap whose `taken`
//! lists the names that took one of `limit` slots stands for a budget or a subset.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;

use super::*;
use crate::ledger::fake::{FakeSource, FakeStore};

struct Slots;

fn taken(object: &ConfigMap) -> BTreeSet<String> {
    object
        .data
        .as_ref()
        .and_then(|d| d.get("taken"))
        .map(|t| {
            t.split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn limit(object: &ConfigMap) -> usize {
    object
        .data
        .as_ref()
        .and_then(|d| d.get("limit"))
        .and_then(|l| l.parse().ok())
        .unwrap_or(0)
}

impl Decide for Slots {
    type Object = ConfigMap;
    type Request = String;
    /// Whether the name got a slot.
    type Outcome = bool;
    const ATTEMPTS: usize = 8;

    async fn decide(
        &self,
        object: &mut ConfigMap,
        requests: &[&String],
        fresh: bool,
    ) -> Result<Vec<Decided<bool>>, CommitError> {
        let mut set = taken(object);
        let limit = limit(object);
        let decided = requests
            .iter()
            .map(|name| {
                if set.contains(*name) {
                    Decided::Answer(true)
                } else if set.len() < limit {
                    set.insert((*name).clone());
                    Decided::Written(true)
                } else if fresh {
                    Decided::Answer(false)
                } else {
                    Decided::Unsure
                }
            })
            .collect();
        let data = object.data.get_or_insert_default();
        data.insert(
            "taken".into(),
            set.into_iter().collect::<Vec<_>>().join(","),
        );
        Ok(decided)
    }

    fn gone(&self, _: &String) -> bool {
        true
    }
}

fn key() -> Key {
    ("ns".into(), "slots".into())
}

fn slots(limit: usize) -> ConfigMap {
    ConfigMap {
        data: Some([("limit".to_owned(), limit.to_string())].into()),
        ..Default::default()
    }
}

type Commit = GroupCommit<Slots, FakeSource<ConfigMap>>;

/// `name` submitted on a task of its own (its batch then holds the object's queue).
fn submit_in_background(
    commit: &Arc<Commit>,
    name: &str,
) -> tokio::task::JoinHandle<Result<bool, CommitError>> {
    let (commit, name) = (commit.clone(), name.to_owned());
    tokio::spawn(async move { commit.submit(key(), name).await })
}

/// Waits (at most 5 s) until no batch of `commit` runs or waits.
async fn drained(commit: &Commit) {
    let idle = async {
        while !commit.queues.lock().map(|q| q.is_empty()).unwrap_or(true) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), idle)
        .await
        .expect("queue drained");
}

async fn burst(replicas: &[Arc<Commit>], names: usize) -> Vec<(String, bool)> {
    let asks = (0..names).map(|i| {
        let commit = replicas[i % replicas.len()].clone();
        async move {
            let name = format!("p{i}");
            let got = commit.submit(key(), name.clone()).await.expect("answered");
            (name, got)
        }
    });
    futures::future::join_all(asks).await
}

#[tokio::test]
async fn a_burst_is_written_in_a_few_batches_and_never_over_the_limit() {
    let store = FakeStore::new(Duration::from_millis(20));
    store.put(&key(), slots(30), "u1");
    let commit = GroupCommit::new(Slots, FakeSource::new(store.clone()));
    let answers = burst(std::slice::from_ref(&commit), 100).await;
    let granted: BTreeSet<String> = answers
        .iter()
        .filter(|(_, got)| *got)
        .map(|(n, _)| n.clone())
        .collect();
    assert_eq!(granted.len(), 30);
    assert_eq!(taken(&store.get(&key()).expect("stored")), granted);
    let (written, conflicts) = *store.writes.lock().expect("writes");
    assert!(written <= 3, "{written} writes for one burst");
    assert_eq!(conflicts, 0);
    assert_eq!(commit.tracked(), 1, "only the remembered write is left");
}

#[tokio::test]
async fn two_replicas_never_grant_more_than_the_limit() {
    let store = FakeStore::new(Duration::from_millis(5));
    store.put(&key(), slots(40), "u1");
    let replicas = [
        GroupCommit::new(Slots, FakeSource::new(store.clone())),
        GroupCommit::new(Slots, FakeSource::new(store.clone())),
    ];
    let answers = burst(&replicas, 120).await;
    let granted: BTreeSet<String> = answers
        .iter()
        .filter(|(_, got)| *got)
        .map(|(n, _)| n.clone())
        .collect();
    assert_eq!(granted.len(), 40);
    assert_eq!(taken(&store.get(&key()).expect("stored")), granted);
}

#[tokio::test]
async fn a_refusal_on_a_copy_behind_is_decided_again_on_the_apiservers() {
    let store = FakeStore::new(Duration::from_millis(1));
    store.put(&key(), slots(0), "u1");
    let source = FakeSource::new(store.clone());
    // The limit is raised; the cache has not seen it.
    store.update(&key(), |o| {
        o.data
            .get_or_insert_default()
            .insert("limit".into(), "1".into());
    });
    let commit = GroupCommit::new(Slots, source);
    assert!(commit.submit(key(), "a".into()).await.expect("answered"));
    assert!(!commit.submit(key(), "b".into()).await.expect("answered"));
}

#[tokio::test]
async fn a_deleted_object_answers_gone_and_is_forgotten() {
    let store = FakeStore::new(Duration::from_millis(1));
    store.put(&key(), slots(0), "u1");
    let source = FakeSource::new(store.clone());
    store.delete(&key());
    // The cache still holds it (and says full): the fresh read says it is gone.
    let commit = GroupCommit::new(Slots, source);
    assert!(commit.submit(key(), "a".into()).await.expect("answered"));
    commit.source().catch_up();
    assert!(commit.known(&key()).is_none());
    assert_eq!(commit.tracked(), 0);
}

#[tokio::test]
async fn a_decision_whose_caller_gave_up_takes_nothing() {
    let store = FakeStore::new(Duration::from_millis(200));
    store.put(&key(), slots(5), "u1");
    let commit = GroupCommit::new(Slots, FakeSource::new(store.clone()));
    let first = submit_in_background(&commit, "first");
    // Queued behind the first batch's write, then given up.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let gave_up = tokio::time::timeout(
        Duration::from_millis(20),
        commit.submit(key(), "late".into()),
    )
    .await;
    assert!(gave_up.is_err());
    assert!(first.await.expect("joined").expect("answered"));
    // The queue drains; "late" was never written.
    drained(&commit).await;
    assert_eq!(
        taken(&store.get(&key()).expect("stored")),
        ["first".to_owned()].into()
    );
}

#[tokio::test]
async fn a_caller_that_gives_up_during_a_conflicts_re_read_is_not_written() {
    let store = FakeStore::new(Duration::from_millis(300));
    store.put(&key(), slots(5), "u1");
    let commit = GroupCommit::new(Slots, FakeSource::new(store.clone()));
    // Another writer changes the object: the first write (on the cache's copy, 300 ms) gets a 409,
    // and the re-read (another 300 ms after up to 30 of jitter) outlasts the caller's patience.
    store.update(&key(), |_| {});
    let gave_up = tokio::time::timeout(
        Duration::from_millis(450),
        commit.submit(key(), "late".into()),
    )
    .await;
    assert!(gave_up.is_err(), "answered within 450 ms: {gave_up:?}");
    drained(&commit).await;
    assert_eq!(
        *store.writes.lock().expect("writes"),
        (0, 1),
        "one refused write, none made"
    );
    assert!(taken(&store.get(&key()).expect("stored")).is_empty());
}

#[tokio::test]
async fn a_decision_past_its_deadline_is_answered_late_and_takes_nothing() {
    let store = FakeStore::new(Duration::from_millis(300));
    store.put(&key(), slots(5), "u1");
    let commit = GroupCommit::new(Slots, FakeSource::new(store.clone()));
    let first = submit_in_background(&commit, "first");
    // Queued behind the first batch's write (300 ms), with a deadline before that write ends.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let deadline = tokio::time::Instant::now() + Duration::from_millis(100);
    let late = commit.submit_by(key(), "late".into(), Some(deadline)).await;
    assert!(matches!(late, Err(CommitError::Late)), "{late:?}");
    assert!(first.await.expect("joined").expect("answered"));
    // Within its deadline, the same request is decided.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let on_time = commit
        .submit_by(key(), "on-time".into(), Some(deadline))
        .await;
    assert!(matches!(on_time, Ok(true)), "{on_time:?}");
    assert_eq!(
        taken(&store.get(&key()).expect("stored")),
        ["first".to_owned(), "on-time".to_owned()].into()
    );
}

#[tokio::test]
async fn a_write_told_by_another_writer_is_decided_over_without_a_conflict() {
    for told in [false, true] {
        let store = FakeStore::new(Duration::from_millis(1));
        store.put(&key(), slots(5), "u1");
        let metrics = CommitMetrics::default();
        let commit = GroupCommit::counted(Slots, FakeSource::new(store.clone()), metrics.clone());
        // The controller writes the status; the cache has not shown it yet.
        store.update(&key(), |_| {});
        if told {
            commit.observe(key(), store.get(&key()).expect("stored"));
        }
        assert!(commit.submit(key(), "a".into()).await.expect("answered"));
        let conflicts = usize::from(!told);
        assert_eq!(
            *store.writes.lock().expect("writes"),
            (1, conflicts),
            "told: {told}"
        );
        assert_eq!(metrics.conflicts.get(), conflicts as u64, "told: {told}");
        assert_eq!(metrics.reads.get(), conflicts as u64, "told: {told}");
    }
}

#[tokio::test]
async fn an_older_answer_arriving_late_does_not_replace_a_newer_one() {
    let store = FakeStore::new(Duration::from_millis(1));
    store.put(&key(), slots(5), "u1");
    let commit = GroupCommit::new(Slots, FakeSource::new(store.clone()));
    let older = store.get(&key()).expect("stored");
    store.update(&key(), |_| {});
    let newer = store.get(&key()).expect("stored");
    commit.observe(key(), newer.clone());
    commit.observe(key(), older);
    assert_eq!(
        commit
            .known(&key())
            .and_then(|k| k.metadata.resource_version.clone()),
        newer.metadata.resource_version
    );
}

#[tokio::test]
async fn conflicts_past_the_attempts_answer_an_error() {
    struct Always;
    impl Source<ConfigMap> for Always {
        fn cached(&self, _: &Key) -> Option<Arc<ConfigMap>> {
            None
        }
        async fn read(&self, _: &Key) -> Result<Option<ConfigMap>, Status> {
            Ok(Some(slots(3)))
        }
        async fn write_status(
            &self,
            _: &Key,
            _: &ConfigMap,
            _: &ConfigMap,
        ) -> Result<ConfigMap, Status> {
            Err(Status::failure("modified", "Conflict").with_code(409))
        }
    }
    let commit = GroupCommit::new(Slots, Always);
    let answer = commit.submit(key(), "a".into()).await;
    assert!(
        matches!(answer, Err(CommitError::Conflicts(n)) if n == Slots::ATTEMPTS),
        "{answer:?}"
    );
}

#[test]
fn the_patch_carries_the_status_over_the_version_read() {
    let budget: kruise_api::policy::v1alpha1::PodUnavailableBudget =
        serde_json::from_value(serde_json::json!({
            "apiVersion": "policy.kruise.io/v1alpha1", "kind": "PodUnavailableBudget",
            "metadata": {"name": "b", "resourceVersion": "7"},
            "spec": {},
            "status": {"unavailableAllowed": 1, "desiredAvailable": 2, "currentAvailable": 3, "totalReplicas": 3, "disruptedPods": {"p": "2026-01-01T00:00:00Z"}}
        }))
        .expect("budget");
    let patch = status_patch(&budget, &budget);
    assert_eq!(patch["metadata"]["resourceVersion"], "7");
    assert_eq!(patch["status"]["unavailableAllowed"], 1);
    assert_eq!(
        patch["status"]["disruptedPods"]["p"],
        "2026-01-01T00:00:00Z"
    );
    assert!(
        !patch.to_string().contains("null"),
        "no field is cleared: {patch}"
    );
}

#[tokio::test]
async fn a_batch_that_panics_answers_its_decisions_and_the_next_one_runs() {
    struct Panicky;
    impl Decide for Panicky {
        type Object = ConfigMap;
        type Request = String;
        type Outcome = bool;
        const ATTEMPTS: usize = 1;
        async fn decide(
            &self,
            object: &mut ConfigMap,
            requests: &[&String],
            fresh: bool,
        ) -> Result<Vec<Decided<bool>>, CommitError> {
            assert!(
                !requests.iter().any(|r| *r == "boom"),
                "a bug in a decision"
            );
            Slots.decide(object, requests, fresh).await
        }
        fn gone(&self, _: &String) -> bool {
            true
        }
    }
    let store = FakeStore::new(Duration::from_millis(1));
    store.put(&key(), slots(5), "u1");
    let commit = GroupCommit::new(Panicky, FakeSource::new(store.clone()));
    let boom = commit.submit(key(), "boom".into()).await;
    assert!(matches!(boom, Err(CommitError::Dropped)), "{boom:?}");
    assert!(commit.submit(key(), "fine".into()).await.expect("answered"));
}
