//! An Advanced StatefulSet's whole loop against the in-memory cluster. One context lives through
//! the test, so its expectations do; before each reconcile its caches are relisted from the cluster
//! (a perfect informer) unless a test makes them lag, and a minimal scheduler/kubelet runs what is
//! created. OrderedReady creation (claims first, one Pod at a time, nothing twice while the caches
//! lag), in-place rolling updates from the highest ordinal (and a partition), scale-down from the
//! highest ordinal with `reserveOrdinals`, refused creates and a stale copy of the set.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kruise_api::keys;
use kruise_api::statefulset::v1beta1::{
    CONDITION_FAILED_CREATE_POD, StatefulSet, StatefulSetStatus,
};
use kruise_core::inplace::{Completion, check_completed};
use kruise_core::rollout::statefulset::is_healthy;
use kube::api::Patch;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{self, store::Writer as StoreWriter};
use kube::runtime::watcher::Event;
use serde_json::{Value, json};

use super::reconcile::reconcile;
use super::{CONTROLLER, Config, Context};
use crate::driver::head::PodOwnerBase;
use crate::driver::scripted;
use crate::driver::writes::fake::{FakeCluster, Record, Verb, run_pods};
use crate::driver::writes::{Part, Writer};

/// One controller context over the cluster, with the writers of its caches.
struct Bench {
    cluster: Arc<FakeCluster>,
    ctx: Arc<Context>,
    revisions: StoreWriter<ControllerRevision>,
    claims: StoreWriter<PersistentVolumeClaim>,
    /// Where the Events go.
    log: scripted::Log,
}

fn relist<K>(writer: &mut StoreWriter<K>, objects: Vec<K>)
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    writer.apply_watcher_event(&Event::Init);
    for object in objects {
        writer.apply_watcher_event(&Event::InitApply(object));
    }
    writer.apply_watcher_event(&Event::InitDone);
}

impl Bench {
    /// A fresh controller (no expectations) whose caches show the cluster as it is now.
    fn new(cluster: &Arc<FakeCluster>) -> Self {
        let (mut base, log) = PodOwnerBase::over_cluster(CONTROLLER, cluster);
        let (revision_store, revisions) = reflector::store();
        let (claim_store, claims) = reflector::store();
        base.revisions = revision_store;
        let ctx = Context {
            base,
            pvcs: claim_store,
            config: Config::default(),
        };
        let mut bench = Self {
            cluster: cluster.clone(),
            ctx: Arc::new(ctx),
            revisions,
            claims,
            log,
        };
        bench.sync();
        bench
    }

    /// Every cache shows the cluster as it is now.
    fn sync(&mut self) {
        self.sync_pods();
        self.sync_all_but_pods();
    }

    fn sync_pods(&self) {
        let pods = &self.ctx.base.pods;
        pods.apply(Event::Init);
        for pod in self.cluster.all::<Pod>(Some("ns")) {
            pods.apply(Event::InitApply(pod));
        }
        pods.apply(Event::InitDone);
    }

    /// The Pod cache is relisted empty, as a new process's that has not seen the Pods yet.
    fn forget_pods(&self) {
        let pods = &self.ctx.base.pods;
        pods.apply(Event::Init);
        pods.apply(Event::InitDone);
    }

    /// The revision and claim caches catch up; the Pod cache lags.
    fn sync_all_but_pods(&mut self) {
        relist(&mut self.revisions, self.cluster.all(Some("ns")));
        relist(&mut self.claims, self.cluster.all(Some("ns")));
    }

    /// One reconcile of `set` (a copy the test chose): its answer and every write it sent.
    async fn reconcile_copy(&self, set: StatefulSet) -> (Action, Vec<Record>) {
        let before = self.cluster.records().len();
        let action = reconcile(Arc::new(set), self.ctx.clone())
            .await
            .expect("a reconcile");
        (action, self.cluster.records()[before..].to_vec())
    }

    /// One reconcile of the set as the cluster has it now, on the caches as they are.
    async fn reconcile(&self) -> (Action, Vec<Record>) {
        self.reconcile_copy(set_of(&self.cluster)).await
    }

    /// Rounds of caches synced, a reconcile, and the kubelet, until a reconcile writes nothing;
    /// what each round's reconcile wrote, and the Pods just after it.
    async fn converge(&mut self) -> Vec<Round> {
        let mut rounds = Vec::new();
        for _ in 0..40 {
            self.sync();
            let (_, sent) = self.reconcile().await;
            if sent.is_empty() {
                return rounds;
            }
            rounds.push(Round {
                sent,
                pods: pods(&self.cluster),
                unavailable: unavailable(&self.cluster),
                status: set_status(&self.cluster),
            });
            run_pods(&self.cluster, "ns", true).await;
        }
        panic!("no convergence in 40 rounds: {:#?}", self.cluster.records());
    }

    /// The reasons and notes of the Events published so far.
    fn events(&self) -> Vec<(String, String)> {
        self.log.reasons_and_notes()
    }
}

/// What one round of [`Bench::converge`] saw.
struct Round {
    sent: Vec<Record>,
    pods: BTreeMap<String, PodView>,
    unavailable: usize,
    status: StatefulSetStatus,
}

/// A Pod as the tests compare it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PodView {
    uid: String,
    image: String,
    revision: String,
}

/// The set `web`: 3 replicas, OrderedReady, a `data` claim template, in-place updates one Pod at a
/// time (what the defaulting webhook would have written, plus InPlaceIfPossible); `extra` is
/// merged in.
fn statefulset(cluster: &FakeCluster, extra: Value) -> StatefulSet {
    let mut set = json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "StatefulSet",
        "metadata": {"name": "web", "namespace": "ns", "uid": "set-uid", "generation": 1},
        "spec": {
            "replicas": 3, "serviceName": "web", "podManagementPolicy": "OrderedReady",
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                         "spec": {"containers": [{"name": "app", "image": "app:1"}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"},
                                      "spec": {"accessModes": ["ReadWriteOnce"],
                                               "resources": {"requests": {"storage": "1Gi"}}}}],
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {
                "podUpdatePolicy": "InPlaceIfPossible", "partition": 0, "maxUnavailable": 1}},
            "revisionHistoryLimit": 10,
        },
    });
    json_patch::merge(&mut set, &extra);
    let set: StatefulSet = serde_json::from_value(set).expect("a StatefulSet");
    cluster.insert(&set)
}

fn set_of(cluster: &FakeCluster) -> StatefulSet {
    cluster.get(Some("ns"), "web").expect("the StatefulSet")
}

fn set_status(cluster: &FakeCluster) -> StatefulSetStatus {
    set_of(cluster).status.unwrap_or_default()
}

/// A user's change to the set's spec (`kubectl patch`): its generation moves on.
async fn change_spec(cluster: &Arc<FakeCluster>, spec: Value) {
    Writer::<StatefulSet>::namespaced(cluster.clone(), "ns")
        .patch_part("web", Part::Object, &Patch::Merge(json!({"spec": spec})))
        .await
        .expect("the spec changed");
}

fn pods(cluster: &FakeCluster) -> BTreeMap<String, PodView> {
    cluster
        .all::<Pod>(Some("ns"))
        .into_iter()
        .map(|p| {
            let image = p
                .spec
                .as_ref()
                .and_then(|s| s.containers[0].image.clone())
                .unwrap_or_default();
            let revision = kruise_core::pods::revision_of(&p)
                .unwrap_or_default()
                .to_owned();
            let view = PodView {
                uid: p.metadata.uid.clone().unwrap_or_default(),
                image,
                revision,
            };
            (p.metadata.name.unwrap_or_default(), view)
        })
        .collect()
}

/// Pods not healthy (Running, Ready, lifecycle Normal) or whose in-place update is unfinished.
fn unavailable(cluster: &FakeCluster) -> usize {
    cluster
        .all::<Pod>(Some("ns"))
        .iter()
        .filter(|p| !is_healthy(p) || check_completed(p) != Completion::Done)
        .count()
}

/// The names of the objects of `kind` a write of `verb` was done to (refusals left out).
fn done(sent: &[Record], verb: Verb, kind: &str) -> Vec<String> {
    sent.iter()
        .filter(|r| r.verb == verb && r.kind == kind && r.refused.is_none())
        .map(|r| r.name.clone())
        .collect()
}

/// The names and refusal codes of the writes of `verb` to objects of `kind`.
fn tried(sent: &[Record], verb: Verb, kind: &str) -> Vec<(String, Option<u16>)> {
    sent.iter()
        .filter(|r| r.verb == verb && r.kind == kind)
        .map(|r| (r.name.clone(), r.refused))
        .collect()
}

fn condition<'a>(
    status: &'a StatefulSetStatus,
    type_: &str,
) -> Option<&'a k8s_openapi::api::apps::v1::StatefulSetCondition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

/// Every round's Pod names whose image changed in it, from `start`, with the round's index.
fn image_changes(start: &BTreeMap<String, PodView>, rounds: &[Round]) -> Vec<(usize, String)> {
    let mut before = start.clone();
    let mut changes = Vec::new();
    for (i, round) in rounds.iter().enumerate() {
        for (name, pod) in &round.pods {
            if before.get(name).is_some_and(|b| b.image != pod.image) {
                changes.push((i, name.clone()));
            }
        }
        before = round.pods.clone();
    }
    changes
}

#[tokio::test]
async fn ordered_ready_creates_each_pod_after_its_claim_once_the_one_before_is_ready() {
    let cluster = FakeCluster::new();
    statefulset(&cluster, json!({}));
    let mut bench = Bench::new(&cluster);

    // The first sync: the revision, then web-0's claim, then web-0, and nothing more.
    let (_, sent) = bench.reconcile().await;
    assert_eq!(done(&sent, Verb::Create, "ControllerRevision").len(), 1);
    assert_eq!(done(&sent, Verb::Create, "Pod"), ["web-0"]);
    assert_eq!(
        done(&sent, Verb::Create, "PersistentVolumeClaim"),
        ["data-web-0"]
    );
    let at = |kind: &str, name: &str| {
        sent.iter()
            .position(|r| r.verb == Verb::Create && r.kind == kind && r.name == name)
            .expect("created")
    };
    assert!(
        at("PersistentVolumeClaim", "data-web-0") < at("Pod", "web-0"),
        "the claim first"
    );
    let status = set_status(&cluster);
    let web0: Pod = cluster.get(Some("ns"), "web-0").expect("web-0");
    let labels = web0.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels[keys::LABEL_NATIVE_CONTROLLER_REVISION_HASH],
        status.update_revision
    );
    assert_eq!(labels["statefulset.kubernetes.io/pod-name"], "web-0");
    let spec = web0.spec.expect("a spec");
    assert_eq!(
        (spec.hostname.as_deref(), spec.subdomain.as_deref()),
        (Some("web-0"), Some("web"))
    );
    let claim = spec
        .volumes
        .unwrap_or_default()
        .into_iter()
        .find(|v| v.name == "data")
        .and_then(|v| v.persistent_volume_claim)
        .expect("the claim's volume");
    assert_eq!(claim.claim_name, "data-web-0");
    let data: PersistentVolumeClaim = cluster.get(Some("ns"), "data-web-0").expect("the claim");
    assert_eq!(
        data.metadata.labels.unwrap_or_default().get("app"),
        Some(&"web".to_owned()),
        "the claim carries the selector's labels"
    );

    // The Pod cache does not show web-0 yet (the others caught up): the controller waits for its
    // own create instead of sending it again.
    bench.sync_all_but_pods();
    let (_, sent) = bench.reconcile().await;
    assert!(sent.is_empty(), "nothing while the cache lags: {sent:#?}");

    // Shown, but not running yet; then running but not Ready: web-1 waits both times.
    bench.sync();
    let (_, sent) = bench.reconcile().await;
    assert!(done(&sent, Verb::Create, "Pod").is_empty(), "{sent:#?}");
    run_pods(&cluster, "ns", false).await;
    bench.sync();
    let (_, sent) = bench.reconcile().await;
    assert!(done(&sent, Verb::Create, "Pod").is_empty(), "{sent:#?}");
    let progressing = super::status::CONDITION_PROGRESSING;
    let message = condition(&set_status(&cluster), progressing)
        .and_then(|c| c.message.clone())
        .unwrap_or_default();
    assert!(
        message.contains("waiting for web-0 to be Running and Ready"),
        "{message}"
    );

    // Ready: web-1 (its claim first), and again only it.
    run_pods(&cluster, "ns", true).await;
    bench.sync();
    let (_, sent) = bench.reconcile().await;
    assert_eq!(done(&sent, Verb::Create, "Pod"), ["web-1"]);
    assert_eq!(
        done(&sent, Verb::Create, "PersistentVolumeClaim"),
        ["data-web-1"]
    );
    bench.sync();
    let (_, sent) = bench.reconcile().await;
    assert!(done(&sent, Verb::Create, "Pod").is_empty(), "{sent:#?}");

    run_pods(&cluster, "ns", true).await;
    let rounds = bench.converge().await;
    let created: Vec<String> = rounds
        .iter()
        .flat_map(|r| done(&r.sent, Verb::Create, "Pod"))
        .collect();
    assert_eq!(created, ["web-2"]);

    // Each Pod was asked for once.
    let asked: Vec<(String, Option<u16>)> = tried(&cluster.records(), Verb::Create, "Pod");
    assert_eq!(
        asked,
        ["web-0", "web-1", "web-2"].map(|n| (n.to_owned(), None))
    );
    let claims: Vec<String> = cluster
        .all::<PersistentVolumeClaim>(Some("ns"))
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    assert_eq!(claims, ["data-web-0", "data-web-1", "data-web-2"]);
    let status = set_status(&cluster);
    assert_eq!(
        (
            status.replicas,
            status.ready_replicas,
            status.updated_replicas
        ),
        (3, 3, 3),
        "{status:?}"
    );
    assert_eq!(status.current_revision, status.update_revision);
}

/// Runs the set at three Ready Pods, then changes the image; the Pods before, and the rounds
/// of the rollout.
async fn roll_out_new_image(
    extra: Value,
) -> (
    Arc<FakeCluster>,
    BTreeMap<String, PodView>,
    String,
    Vec<Round>,
) {
    let cluster = FakeCluster::new();
    statefulset(&cluster, extra);
    let mut bench = Bench::new(&cluster);
    bench.converge().await;
    let before = pods(&cluster);
    assert_eq!(before.len(), 3, "{before:?}");
    let old_revision = set_status(&cluster).update_revision;
    assert!(before.values().all(|p| p.revision == old_revision));

    change_spec(
        &cluster,
        json!({"template": {"spec": {"containers": [{"name": "app", "image": "app:2"}]}}}),
    )
    .await;
    let rounds = bench.converge().await;
    for round in &rounds {
        assert!(
            done(&round.sent, Verb::Create, "Pod").is_empty()
                && done(&round.sent, Verb::Delete, "Pod").is_empty(),
            "in place: no Pod created or deleted: {:#?}",
            round.sent
        );
    }
    (cluster, before, old_revision, rounds)
}

#[tokio::test]
async fn an_image_change_rolls_out_in_place_from_the_highest_ordinal_one_pod_at_a_time() {
    let (cluster, before, old_revision, rounds) = roll_out_new_image(json!({})).await;

    let changes = image_changes(&before, &rounds);
    let mut seen_rounds: Vec<usize> = changes.iter().map(|(i, _)| *i).collect();
    seen_rounds.dedup();
    assert_eq!(seen_rounds.len(), 3, "one Pod a round: {changes:?}");
    let order: Vec<&str> = changes.iter().map(|(_, n)| n.as_str()).collect();
    assert_eq!(order, ["web-2", "web-1", "web-0"], "highest ordinal first");
    let most = rounds.iter().map(|r| r.unavailable).max().unwrap_or(0);
    assert_eq!(most, 1, "maxUnavailable 1 is kept");

    // The same Pods, every one on the new image and revision.
    let after = pods(&cluster);
    let uids = |pods: &BTreeMap<String, PodView>| -> Vec<(String, String)> {
        pods.iter()
            .map(|(n, p)| (n.clone(), p.uid.clone()))
            .collect()
    };
    assert_eq!(uids(&before), uids(&after), "the same names and UIDs");
    let new_revision = set_status(&cluster).update_revision;
    assert_ne!(new_revision, old_revision);
    assert!(
        after
            .values()
            .all(|p| p.image == "app:2" && p.revision == new_revision),
        "{after:?}"
    );

    // The status converges: the update revision from the first round, the current one moving only
    // once every Pod is updated and Ready; updatedReplicas never goes back.
    let first = &rounds[0].status;
    assert_eq!(first.update_revision, new_revision);
    assert_eq!(first.current_revision, old_revision);
    let updated: Vec<i32> = rounds.iter().map(|r| r.status.updated_replicas).collect();
    assert!(updated.windows(2).all(|w| w[0] <= w[1]), "{updated:?}");
    for round in &rounds {
        if round.status.updated_ready_replicas < 3 {
            assert_eq!(round.status.current_revision, old_revision, "too soon");
        }
    }
    let last = set_status(&cluster);
    assert_eq!(
        (
            last.replicas,
            last.updated_replicas,
            last.updated_ready_replicas,
            last.current_replicas
        ),
        (3, 3, 3, 3),
        "{last:?}"
    );
    assert_eq!(last.current_revision, new_revision);
    assert_eq!(last.update_revision, new_revision);
}

#[tokio::test]
async fn a_partition_keeps_the_lowest_ordinal_on_the_current_revision() {
    let (cluster, before, old_revision, rounds) = roll_out_new_image(
        json!({"spec": {"updateStrategy": {"rollingUpdate": {"partition": 1}}}}),
    )
    .await;

    let order: Vec<String> = image_changes(&before, &rounds)
        .into_iter()
        .map(|(_, n)| n)
        .collect();
    assert_eq!(order, ["web-2", "web-1"]);
    let after = pods(&cluster);
    let new_revision = set_status(&cluster).update_revision;
    assert_ne!(new_revision, old_revision);
    assert_eq!(
        after["web-0"], before["web-0"],
        "below the partition: untouched"
    );
    assert_eq!(after["web-0"].revision, old_revision);
    let last = set_status(&cluster);
    assert_eq!(
        (
            last.updated_replicas,
            last.updated_ready_replicas,
            last.current_replicas
        ),
        (2, 2, 1),
        "{last:?}"
    );
    assert_eq!(
        last.current_revision, old_revision,
        "a partitioned rollout is not complete"
    );
    assert_eq!(last.update_revision, new_revision);
}

/// The Pods deleted, a list per round that deleted any.
fn deletions(rounds: &[Round]) -> Vec<Vec<String>> {
    rounds
        .iter()
        .map(|r| done(&r.sent, Verb::Delete, "Pod"))
        .filter(|d| !d.is_empty())
        .collect()
}

fn names(cluster: &FakeCluster) -> Vec<String> {
    pods(cluster).into_keys().collect()
}

#[tokio::test]
async fn scaling_down_removes_the_highest_ordinal_first_one_at_a_time() {
    let cluster = FakeCluster::new();
    statefulset(&cluster, json!({}));
    let mut bench = Bench::new(&cluster);
    bench.converge().await;
    assert_eq!(names(&cluster), ["web-0", "web-1", "web-2"]);

    change_spec(&cluster, json!({"replicas": 1})).await;
    let rounds = bench.converge().await;

    assert_eq!(
        deletions(&rounds),
        [vec!["web-2".to_owned()], vec!["web-1".to_owned()]]
    );
    assert_eq!(names(&cluster), ["web-0"]);
    // whenScaled defaults to Retain: the claims stay for a scale-up.
    let claims: Vec<String> = cluster
        .all::<PersistentVolumeClaim>(Some("ns"))
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    assert_eq!(claims, ["data-web-0", "data-web-1", "data-web-2"]);
    let status = set_status(&cluster);
    assert_eq!((status.replicas, status.ready_replicas), (1, 1));
}

#[tokio::test]
async fn reserved_ordinals_are_removed_and_skipped() {
    let cluster = FakeCluster::new();
    statefulset(&cluster, json!({}));
    let mut bench = Bench::new(&cluster);
    bench.converge().await;

    // Reserving ordinal 1 at two replicas removes web-1, not the highest.
    change_spec(&cluster, json!({"replicas": 2, "reserveOrdinals": [1]})).await;
    let rounds = bench.converge().await;
    assert_eq!(deletions(&rounds), [vec!["web-1".to_owned()]]);
    assert_eq!(names(&cluster), ["web-0", "web-2"]);

    // Scaling up skips the reserved ordinal: web-3, with its own claim.
    change_spec(&cluster, json!({"replicas": 3})).await;
    let rounds = bench.converge().await;
    let created: Vec<String> = rounds
        .iter()
        .flat_map(|r| done(&r.sent, Verb::Create, "Pod"))
        .collect();
    assert_eq!(created, ["web-3"]);
    assert!(
        cluster
            .get::<PersistentVolumeClaim>(Some("ns"), "data-web-3")
            .is_some()
    );
    assert_eq!(names(&cluster), ["web-0", "web-2", "web-3"]);

    // Scaling down removes the highest ordinal; the reserved one stays empty.
    change_spec(&cluster, json!({"replicas": 2})).await;
    let rounds = bench.converge().await;
    assert_eq!(deletions(&rounds), [vec!["web-3".to_owned()]]);
    assert_eq!(names(&cluster), ["web-0", "web-2"]);
    let status = set_status(&cluster);
    assert_eq!((status.replicas, status.ready_replicas), (2, 2));
}

#[tokio::test]
async fn a_create_refused_as_invalid_is_told_and_tried_again_soon() {
    let cluster = FakeCluster::new();
    statefulset(&cluster, json!({}));
    let mut bench = Bench::new(&cluster);
    cluster.fail_next(Verb::Create, "web-0", 422);

    let (action, sent) = bench.reconcile().await;

    assert_eq!(
        tried(&sent, Verb::Create, "Pod"),
        [("web-0".to_owned(), Some(422))]
    );
    assert_eq!(
        done(&sent, Verb::Create, "PersistentVolumeClaim"),
        ["data-web-0"],
        "the claim went first"
    );
    assert!(names(&cluster).is_empty());
    let events = bench.events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].0, "FailedCreate");
    assert!(
        events[0]
            .1
            .starts_with("create Pod web-0 in StatefulSet web failed error:"),
        "{events:?}"
    );
    let failed = condition(&set_status(&cluster), CONDITION_FAILED_CREATE_POD)
        .cloned()
        .expect("the FailedCreatePod condition");
    assert_eq!(failed.status, "True");
    assert_eq!(
        failed.message.as_deref(),
        Some("failed to create Pod web-0")
    );
    assert_eq!(action, Action::requeue(Duration::from_secs(5)));

    // The refused create is no expectation: the next sync creates web-0 (its claim is there).
    bench.sync();
    let (_, sent) = bench.reconcile().await;
    assert_eq!(done(&sent, Verb::Create, "Pod"), ["web-0"]);
    assert!(done(&sent, Verb::Create, "PersistentVolumeClaim").is_empty());
    assert!(condition(&set_status(&cluster), CONDITION_FAILED_CREATE_POD).is_none());
    assert_eq!(
        bench.events().last().map(|e| e.0.as_str()),
        Some("SuccessfulCreate")
    );
}

#[tokio::test]
async fn a_create_raced_by_an_existing_pod_or_claim_makes_no_second_one() {
    // A claim already there that the claim cache does not show yet (kept from an earlier web-0):
    // its create answers 409 AlreadyExists, which is no failure; the Pod is created over it.
    let cluster = FakeCluster::new();
    statefulset(&cluster, json!({}));
    let bench = Bench::new(&cluster);
    let kept: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "data-web-0", "namespace": "ns", "labels": {"app": "web"}},
        "spec": {"accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "1Gi"}}},
    }))
    .expect("a claim");
    cluster.insert(&kept);
    let (_, sent) = bench.reconcile().await;
    assert_eq!(
        tried(&sent, Verb::Create, "PersistentVolumeClaim"),
        [("data-web-0".to_owned(), Some(409))]
    );
    assert_eq!(done(&sent, Verb::Create, "Pod"), ["web-0"]);
    assert!(condition(&set_status(&cluster), CONDITION_FAILED_CREATE_POD).is_none());
    let uid = pods(&cluster)["web-0"].uid.clone();

    // A new controller (its expectations lost, say a restart) whose Pod cache does not show web-0
    // yet: it creates web-0 again, and the apiserver answers 409 AlreadyExists.
    let mut restarted = Bench::new(&cluster);
    restarted.forget_pods();
    let (action, sent) = restarted.reconcile().await;
    assert_eq!(
        tried(&sent, Verb::Create, "Pod"),
        [("web-0".to_owned(), Some(409))]
    );
    assert!(
        tried(&sent, Verb::Create, "PersistentVolumeClaim").is_empty(),
        "the claim cache shows the claim"
    );
    assert_eq!(names(&cluster), ["web-0"]);
    assert_eq!(pods(&cluster)["web-0"].uid, uid, "the same web-0");
    // As upstream v1.9.0: a failed create (the condition, a retry soon), but no Warning Event
    // for AlreadyExists.
    let failed = condition(&set_status(&cluster), CONDITION_FAILED_CREATE_POD)
        .cloned()
        .expect("the FailedCreatePod condition");
    assert_eq!(
        failed.message.as_deref(),
        Some("failed to create Pod web-0")
    );
    let reasons: Vec<String> = restarted.events().into_iter().map(|e| e.0).collect();
    assert!(reasons.is_empty(), "no Event for a name taken: {reasons:?}");
    assert_eq!(action, Action::requeue(Duration::from_secs(5)));

    // Once the cache shows web-0, the condition goes and nothing is created.
    restarted.sync();
    let (_, sent) = restarted.reconcile().await;
    assert!(tried(&sent, Verb::Create, "Pod").is_empty());
    assert!(condition(&set_status(&cluster), CONDITION_FAILED_CREATE_POD).is_none());
}

#[tokio::test]
async fn a_stale_copy_of_the_set_writes_no_status() {
    let cluster = FakeCluster::new();
    let stale = statefulset(&cluster, json!({}));
    // Someone else writes the set after the copy was read.
    cluster.touch::<StatefulSet>(Some("ns"), "web");
    let mut bench = Bench::new(&cluster);

    let (_, sent) = bench.reconcile_copy(stale).await;

    assert_eq!(
        tried(&sent, Verb::PatchStatus, "StatefulSet"),
        [("web".to_owned(), Some(409))],
        "the status patch is preconditioned on the copy's resourceVersion"
    );
    assert!(set_of(&cluster).status.is_none(), "no status written");

    // The next sync, on the newer copy, writes it.
    bench.sync();
    let (_, sent) = bench.reconcile().await;
    assert_eq!(
        tried(&sent, Verb::PatchStatus, "StatefulSet"),
        [("web".to_owned(), None)]
    );
    let status = set_status(&cluster);
    assert_eq!(status.observed_generation, 1);
    assert!(!status.update_revision.is_empty());
}
