//! A WorkloadSpread's slots, taken and given back on the Pod webhook's path (and by the
//! WorkloadSpread controller, for Pods placed after their creation): a Pod being created
//! takes a slot of the first subset with room (`creatingPods`, `missingReplicas` − 1), a Pod whose
//! deletion or eviction is admitted gives its slot back (`deletingPods`, `missingReplicas` + 1).
//! The decisions of one WorkloadSpread are committed together ([`crate::ledger::commit`]): a
//! deploy burst is recorded in a few status writes instead of one per Pod, each over the
//! resourceVersion its batch was decided on, so that two replicas of the webhook never place more
//! than a subset's `maxReplicas`.

use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::jiff::Timestamp;
use kruise_api::workloadspread::{MatchedWorkloadSpread, WorkloadSpread, WorkloadSpreadSubset};
use kruise_core::workloadspread as core;

use crate::ledger::commit::{ApiSource, CommitError, Decide, Decided, GroupCommit};

/// One Pod's claim on, or return of, a slot.
#[derive(Clone, Debug)]
pub enum SlotRequest {
    /// A Pod being created (`pod_name` `None` while it has only a generateName: it is recorded
    /// under `uid`).
    Take {
        pod_name: Option<String>,
        version: String,
        uid: String,
        now: Timestamp,
    },
    /// A Pod of subset `matched` whose deletion or eviction was admitted.
    Give {
        pod_name: String,
        matched: MatchedWorkloadSpread,
        version: String,
        now: Timestamp,
    },
}

/// The answer to a [`SlotRequest`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Slot {
    /// The subset a Pod being created goes to (`None`: no subset has room; always `None` for a
    /// slot given back).
    pub subset: Option<String>,
    /// That subset as the WorkloadSpread the decision was made on has it: what the Pod is given
    /// (a copy read later may have another spec, or no such subset).
    pub spec: Option<WorkloadSpreadSubset>,
    /// The id the Pod was recorded under when it has no name yet.
    pub uid: String,
}

/// The replicas of a WorkloadSpread's workload (percentages of `maxReplicas` need them).
pub type Replicas =
    Arc<dyn Fn(Arc<WorkloadSpread>) -> BoxFuture<'static, Result<i32, String>> + Send + Sync>;

/// The WorkloadSpread's decisions ([`core::admit_create`], [`core::admit_delete`]) for the group
/// commit.
pub struct SlotDecisions {
    replicas: Replicas,
}

impl SlotDecisions {
    pub fn new(replicas: Replicas) -> Self {
        Self { replicas }
    }
}

impl Decide for SlotDecisions {
    type Object = WorkloadSpread;
    type Request = SlotRequest;
    type Outcome = Slot;
    const ATTEMPTS: usize = 5;

    async fn decide(
        &self,
        ws: &mut WorkloadSpread,
        requests: &[&SlotRequest],
        fresh: bool,
    ) -> Result<Vec<Decided<Slot>>, CommitError> {
        // The workload's replicas, read once per batch and only when a percentage needs them.
        let mut replicas: Option<i32> = None;
        let mut decided = Vec::with_capacity(requests.len());
        for request in requests {
            let version = match request {
                SlotRequest::Take { version, .. } | SlotRequest::Give { version, .. } => version,
            };
            if replicas.is_none() && core::needs_replicas(ws, version) {
                let read = (self.replicas)(Arc::new(ws.clone()))
                    .await
                    .map_err(CommitError::Failed)?;
                replicas = Some(read);
            }
            let replicas = replicas.unwrap_or_default();
            decided.push(match request {
                SlotRequest::Take {
                    pod_name,
                    version,
                    uid,
                    now,
                } => {
                    let decision =
                        core::admit_create(ws, pod_name.as_deref(), version, replicas, *now, uid);
                    // "No subset has room" (or is schedulable) on a copy that may be behind a
                    // slot given back, by the other replica say, is decided again on the
                    // apiserver's copy: a Pod is never left unplaced on a stale count.
                    if decision.subset.is_none() && !fresh {
                        decided.push(Decided::Unsure);
                        continue;
                    }
                    let spec = decision
                        .subset
                        .as_ref()
                        .and_then(|name| ws.spec.subsets.iter().find(|s| &s.name == name))
                        .cloned();
                    let slot = Slot {
                        subset: decision.subset,
                        spec,
                        uid: decision.uid,
                    };
                    match decision.status {
                        Some(status) => {
                            ws.status = Some(status);
                            Decided::Written(slot)
                        }
                        None => Decided::Answer(slot),
                    }
                }
                SlotRequest::Give {
                    pod_name,
                    matched,
                    version,
                    now,
                } => match core::admit_delete(ws, pod_name, matched, version, replicas, *now) {
                    Some(status) => {
                        ws.status = Some(status);
                        Decided::Written(Slot::default())
                    }
                    None => Decided::Answer(Slot::default()),
                },
            });
        }
        Ok(decided)
    }

    /// A WorkloadSpread deleted since the Pod was matched places nothing.
    fn gone(&self, _: &SlotRequest) -> Slot {
        Slot::default()
    }
}

/// The group commit of the WorkloadSpreads' slots on the apiserver (one per process: the
/// manager's `ProcessCaches::workloadspread_slots`; built by `workloadspread::slots::on_apiserver`).
pub type Slots = GroupCommit<SlotDecisions, ApiSource<WorkloadSpread>>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::Key;
    use crate::ledger::fake::{FakeSource, FakeStore};
    use proptest::prelude::*;
    use std::time::Duration;

    fn spread(limits: &[i32]) -> WorkloadSpread {
        let subsets: Vec<_> = limits
            .iter()
            .enumerate()
            .map(|(i, n)| serde_json::json!({"name": format!("s{i}"), "maxReplicas": n}))
            .collect();
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "WorkloadSpread",
            "metadata": {"name": "ws", "namespace": "ns"},
            "spec": {
                "targetRef": {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": "web"},
                "subsets": subsets
            }
        }))
        .expect("ws")
    }

    fn key() -> Key {
        ("ns".into(), "ws".into())
    }

    fn no_replicas() -> Replicas {
        Arc::new(|_| Box::pin(async { Ok(0) }))
    }

    fn take(name: &str) -> SlotRequest {
        SlotRequest::Take {
            pod_name: Some(name.to_owned()),
            version: core::pod_version(&Default::default()),
            uid: String::new(),
            now: Timestamp::now(),
        }
    }

    /// The release of `name`'s slot in subset `s0` (its deletion admitted).
    fn give(name: &str) -> SlotRequest {
        SlotRequest::Give {
            pod_name: name.to_owned(),
            matched: MatchedWorkloadSpread {
                name: "ws".into(),
                subset: "s0".into(),
                uid: String::new(),
            },
            version: core::pod_version(&Default::default()),
            now: Timestamp::now(),
        }
    }

    /// Creates spread over `replicas` webhook replicas: how many each subset got, and the stored
    /// WorkloadSpread.
    async fn burst(
        limits: &[i32],
        pods: usize,
        replicas: usize,
        latency_ms: u64,
    ) -> (Vec<usize>, usize, WorkloadSpread) {
        let store = FakeStore::new(Duration::from_millis(latency_ms));
        store.put(&key(), spread(limits), "u1");
        let commits: Vec<_> = (0..replicas)
            .map(|_| {
                GroupCommit::new(
                    SlotDecisions::new(no_replicas()),
                    FakeSource::new(store.clone()),
                )
            })
            .collect();
        let asks = (0..pods).map(|i| {
            let commit = commits[i % replicas].clone();
            async move { commit.submit(key(), take(&format!("p{i}"))).await }
        });
        let answers = futures::future::join_all(asks).await;
        let mut per_subset = vec![0; limits.len()];
        let mut unplaced = 0;
        for answer in answers {
            match answer.expect("answered").subset {
                Some(name) => {
                    let i: usize = name[1..].parse().expect("subset index");
                    per_subset[i] += 1;
                }
                None => unplaced += 1,
            }
        }
        (per_subset, unplaced, store.get(&key()).expect("stored"))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(40))]
        #[test]
        fn no_subset_gets_more_than_its_max_replicas(
            limits in proptest::collection::vec(0i32..8, 1..4),
            pods in 1usize..40,
            replicas in 1usize..=2,
            latency_ms in 0u64..4,
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("runtime");
            let (per_subset, unplaced, stored) = runtime.block_on(burst(&limits, pods, replicas, latency_ms));
            let capacity: usize = limits.iter().map(|n| *n as usize).sum();
            for (i, got) in per_subset.iter().enumerate() {
                prop_assert!(*got <= limits[i] as usize, "subset {i}: {got} of {}", limits[i]);
            }
            // Every Pod is placed while there is room, and the status records each placement.
            prop_assert_eq!(per_subset.iter().sum::<usize>(), pods.min(capacity));
            prop_assert_eq!(unplaced, pods.saturating_sub(capacity));
            let status = stored.status.unwrap_or_default();
            let recorded: usize = status
                .versioned_subset_statuses
                .values()
                .flatten()
                .map(|s| s.creating_pods.len())
                .sum();
            prop_assert_eq!(recorded, pods.min(capacity));
        }
    }

    #[tokio::test]
    async fn a_burst_is_placed_in_a_few_writes() {
        let store = FakeStore::new(Duration::from_millis(10));
        store.put(&key(), spread(&[50, 100]), "u1");
        let commit = GroupCommit::new(
            SlotDecisions::new(no_replicas()),
            FakeSource::new(store.clone()),
        );
        let asks = (0..120).map(|i| {
            let commit = commit.clone();
            async move { commit.submit(key(), take(&format!("p{i}"))).await }
        });
        let answers = futures::future::join_all(asks).await;
        let first = answers
            .iter()
            .filter(|a| matches!(a, Ok(Slot { subset: Some(s), .. }) if s == "s0"))
            .count();
        assert_eq!(first, 50);
        let (written, _) = *store.writes.lock().expect("writes");
        assert!(written <= 3, "{written} writes");
    }

    #[tokio::test]
    async fn a_slot_given_back_is_taken_again_in_the_same_batch() {
        let store = FakeStore::new(Duration::from_millis(1));
        store.put(&key(), spread(&[1]), "u1");
        let commit = GroupCommit::new(
            SlotDecisions::new(no_replicas()),
            FakeSource::new(store.clone()),
        );
        let first = commit.submit(key(), take("a")).await.expect("answered");
        assert_eq!(first.subset.as_deref(), Some("s0"));
        let release = give("old");
        let (given, taken) = tokio::join!(
            commit.submit(key(), release),
            commit.submit(key(), take("b"))
        );
        assert_eq!(given.expect("answered"), Slot::default());
        assert_eq!(taken.expect("answered").subset.as_deref(), Some("s0"));
    }

    #[tokio::test]
    async fn no_room_on_a_copy_behind_is_decided_again_on_the_apiservers() {
        let store = FakeStore::new(Duration::from_millis(1));
        store.put(&key(), spread(&[1]), "u1");
        let replica = |store: &Arc<FakeStore<WorkloadSpread>>| {
            GroupCommit::new(
                SlotDecisions::new(no_replicas()),
                FakeSource::new(store.clone()),
            )
        };
        let (a, b) = (replica(&store), replica(&store));
        let first = a.submit(key(), take("a")).await.expect("answered");
        assert_eq!(first.subset.as_deref(), Some("s0"));
        // The other replica admits the deletion of a running Pod of the subset: its slot is free
        // again, which this replica's copy (its own last write: full) does not show.
        let release = give("running");
        b.source().catch_up();
        b.submit(key(), release).await.expect("answered");
        let second = a.submit(key(), take("b")).await.expect("answered");
        assert_eq!(
            second.subset.as_deref(),
            Some("s0"),
            "placed on the apiserver's count"
        );
    }

    #[tokio::test]
    async fn a_slot_carries_the_subset_it_was_decided_on() {
        let store = FakeStore::new(Duration::from_millis(1));
        store.put(&key(), spread(&[1, 1]), "u1");
        let commit = GroupCommit::new(
            SlotDecisions::new(no_replicas()),
            FakeSource::new(store.clone()),
        );
        let decided = spread(&[1, 1]).spec.subsets;
        let first = commit.submit(key(), take("a")).await.expect("answered");
        assert_eq!(first.spec.as_ref(), decided.first());
        let second = commit.submit(key(), take("b")).await.expect("answered");
        assert_eq!(second.spec.as_ref(), decided.get(1));
        let none = commit.submit(key(), take("c")).await.expect("answered");
        assert_eq!((none.subset, none.spec), (None, None));
    }
}
