//! A SidecarSet's whole loop against the in-memory cluster: each round reconciles on caches that
//! show everything written so far (a perfect informer, relisted before the round), and a minimal
//! kubelet runs what the Pods' specs say. A new sidecar image is rolled out in place, one Pod at a
//! time (maxUnavailable 1): the same Pods (names and UIDs), the sidecar restarted onto the new image,
//! the status counting them. A pause or a partition stops the rollout. A Pod or SidecarSet read
//! from a stale cache writes nothing over the newer object; a refused Pod patch is a race (409) or
//! a failure (422, 500).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use kruise_api::sidecarset::CONDITION_SIDECARSET_UPGRADABLE;
use kruise_api::sidecarset::hash::set_hash_annotations;
use kruise_api::sidecarset::set_defaults;
use kruise_api::sidecarset::v1beta1::{SidecarSet, SidecarSetStatus};
use kruise_core::expectations::Expectations;
use kruise_core::sidecarset::{InjectContext, inject};
use kube::api::Patch;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{self, ObjectRef, store::Writer as StoreWriter};
use kube::runtime::watcher;
use serde_json::{Value, json};

use super::{CONTROLLER, Config, Context, Error, RACE_RETRY, reconcile_inner};
use crate::cache::PodCache;
use crate::driver::scripted;
use crate::driver::writes::fake::{FakeCluster, Record, Verb, listed, run_pods};
use crate::driver::writes::{Part, Writer};
use crate::metrics::{Metrics, OperationLabels};

/// The SidecarSet's name (it is cluster-scoped).
const SS: &str = "log-agent";
/// The namespace of the Pods.
const NS: &str = "ns";
/// The manager's namespace, where the SidecarSet's ControllerRevisions live.
const MANAGER_NS: &str = "kruise-system";
/// The sidecar container the SidecarSet injects.
const SIDECAR: &str = "log-agent";
const PODS: [&str; 3] = ["web-0", "web-1", "web-2"];

/// The controller's context over `cluster`, with caches it keeps across reconciles (the expectations
/// and verdicts too); [`Bench::sync`] relists them from the cluster. Events go to a scripted client.
struct Bench {
    cluster: Arc<FakeCluster>,
    ctx: Context,
    sidecarsets: StoreWriter<SidecarSet>,
    revisions: StoreWriter<ControllerRevision>,
    log: scripted::Log,
}

impl Bench {
    fn new(cluster: &Arc<FakeCluster>) -> Self {
        let (client, log) = scripted::client(Vec::new());
        let (sidecarsets_store, sidecarsets) = reflector::store();
        let (revisions_store, revisions) = reflector::store();
        let mut registry = prometheus_client::registry::Registry::default();
        let ctx = Context {
            writes: cluster.clone(),
            live: cluster.clone(),
            pods: PodCache::new(),
            namespaces: listed(Vec::new()),
            revisions: revisions_store,
            expectations: Mutex::new(Expectations::new(Duration::from_secs(300))),
            recorder: crate::driver::recorder(client, CONTROLLER),
            metrics: Metrics::register(&mut registry),
            sidecarsets: sidecarsets_store,
            verdicts: Mutex::new(HashMap::new()),
            reported: Mutex::new(BTreeSet::new()),
            marks_waiting: Mutex::new(HashMap::new()),
            config: Config {
                workers: 1,
                expectation_timeout: Duration::from_secs(300),
                excluded_namespaces: vec![MANAGER_NS.to_owned()],
                namespace: MANAGER_NS.to_owned(),
            },
        };
        let mut bench = Self {
            cluster: cluster.clone(),
            ctx,
            sidecarsets,
            revisions,
            log,
        };
        bench.sync();
        bench
    }

    /// The informers relist: every cache shows the cluster as it is now.
    fn sync(&mut self) {
        let pods = &self.ctx.pods;
        pods.apply(watcher::Event::Init);
        for pod in self.cluster.all::<Pod>(None) {
            pods.apply(watcher::Event::InitApply(pod));
        }
        pods.apply(watcher::Event::InitDone);
        relist(&mut self.sidecarsets, self.cluster.all::<SidecarSet>(None));
        relist(
            &mut self.revisions,
            self.cluster.all::<ControllerRevision>(None),
        );
    }

    /// The SidecarSet as the controller's cache holds it (what the driver hands the reconcile).
    fn cached(&self) -> SidecarSet {
        self.ctx
            .sidecarsets
            .get(&ObjectRef::new(SS))
            .map(|ss| (*ss).clone())
            .expect("the SidecarSet in the cache")
    }

    /// One reconcile of the cached SidecarSet.
    async fn reconcile(&self) -> Result<Action, Error> {
        reconcile_inner(&self.cached(), &self.ctx).await
    }

    /// The reasons of the Events published.
    fn event_reasons(&self) -> Vec<String> {
        self.log.reasons()
    }

    /// How many in-place upgrades the metrics counted with `result` (`success` or `error`).
    fn upgrades_counted(&self, result: &str) -> u64 {
        self.ctx
            .metrics
            .pod_operations
            .get_or_create(&OperationLabels {
                controller: CONTROLLER.to_owned(),
                operation: "update_in_place".to_owned(),
                result: result.to_owned(),
            })
            .get()
    }
}

fn relist<K>(writer: &mut StoreWriter<K>, objects: Vec<K>)
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    writer.apply_watcher_event(&watcher::Event::Init);
    for object in objects {
        writer.apply_watcher_event(&watcher::Event::InitApply(object));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
}

/// What the SidecarSet's defaulting webhook writes on create and update: the defaults and the two
/// hash annotations the Pods record.
fn admitted(mut ss: SidecarSet) -> SidecarSet {
    set_defaults(&mut ss);
    set_hash_annotations(&mut ss);
    ss
}

/// The SidecarSet `log-agent` (sidecar image `agent:1`) for Pods labelled `app: web`, with
/// `strategy` as its update strategy.
fn sidecarset(strategy: Value) -> SidecarSet {
    let ss: SidecarSet = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "SidecarSet",
        "metadata": {"name": SS, "uid": "ss-uid", "generation": 1,
                     "creationTimestamp": "2026-11-30T08:00:00Z"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "containers": [{"name": SIDECAR, "image": "agent:1"}],
                 "updateStrategy": strategy},
    }))
    .expect("a SidecarSet");
    admitted(ss)
}

/// A Pod of the app as its owner creates it, through the Pod webhook, which injects the sidecar.
fn injected_pod(name: &str, ss: &SidecarSet) -> Pod {
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "uid": format!("{name}-uid"),
                     "labels": {"app": "web"}, "creationTimestamp": "2026-11-30T09:00:00Z"},
        "spec": {"nodeName": "node-0", "containers": [{"name": "app", "image": "app:1"}]},
    }))
    .expect("a Pod");
    let revisions = BTreeMap::new();
    let ctx = InjectContext {
        now: "2026-11-30T09:00:00Z".parse().expect("a timestamp"),
        revisions: &revisions,
        random: &|| 0.0,
        sort_sidecars_by_name: false,
    };
    inject(&pod, &[ss], &ctx).expect("injected").pod
}

/// `kubectl edit sidecarset`: `change` applied to the SidecarSet's spec, admitted by the webhook,
/// written whole (an update: the generation moves with the spec). A JSON patch replacing the spec
/// and the annotations, since a merge patch would keep what the edit leaves out (`paused: false` is
/// not serialised).
async fn edit(cluster: &Arc<FakeCluster>, change: impl FnOnce(&mut SidecarSet)) {
    let mut ss: SidecarSet = cluster.get(None, SS).expect("the SidecarSet");
    change(&mut ss);
    let ss = admitted(ss);
    let update: json_patch::Patch = serde_json::from_value(json!([
        {"op": "add", "path": "/metadata/annotations", "value": ss.metadata.annotations},
        {"op": "replace", "path": "/spec", "value": ss.spec},
    ]))
    .expect("a JSON patch");
    Writer::<SidecarSet>::all(cluster.clone())
        .patch_part(SS, Part::Object, &Patch::<()>::Json(update))
        .await
        .expect("the SidecarSet edited");
    let edited: SidecarSet = cluster.get(None, SS).expect("the SidecarSet");
    assert_eq!(edited.spec, ss.spec, "the edit is written whole");
}

fn set_image(image: &str) -> impl FnOnce(&mut SidecarSet) {
    move |ss| ss.spec.containers[0].container.image = Some(image.to_owned())
}

/// The sidecar image of each Pod, and its UID, by name.
fn sidecars(cluster: &FakeCluster) -> BTreeMap<String, (String, String)> {
    cluster
        .all::<Pod>(Some(NS))
        .into_iter()
        .map(|p| {
            let image = sidecar_spec_image(&p);
            (
                p.metadata.name.unwrap_or_default(),
                (p.metadata.uid.unwrap_or_default(), image),
            )
        })
        .collect()
}

fn sidecar_spec_image(pod: &Pod) -> String {
    pod.spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .find(|c| c.name == SIDECAR)
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}

/// The image the kubelet reports the sidecar running, and its restarts.
fn sidecar_running(pod: &Pod) -> Option<(String, i32)> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == SIDECAR)
        .map(|c| (c.image.clone(), c.restart_count))
}

/// Pods whose sidecar is not available: changed in place and not yet restarted onto its spec image,
/// or the Pod not Ready.
fn unavailable(cluster: &FakeCluster) -> usize {
    cluster
        .all::<Pod>(Some(NS))
        .iter()
        .filter(|p| {
            !kruise_core::pods::is_running_and_ready(p)
                || sidecar_running(p).map(|(image, _)| image) != Some(sidecar_spec_image(p))
        })
        .count()
}

fn status_of(cluster: &FakeCluster) -> Option<SidecarSetStatus> {
    cluster
        .get::<SidecarSet>(None, SS)
        .expect("the SidecarSet")
        .status
}

/// (matchedPods, updatedPods, readyPods, updatedReadyPods, observedGeneration)
fn counts(status: &SidecarSetStatus) -> (i32, i32, i32, i32, i64) {
    (
        status.matched_pods,
        status.updated_pods,
        status.ready_pods,
        status.updated_ready_pods,
        status.observed_generation,
    )
}

/// The Pod writes recorded from `from` on: (verb, Pod, refused).
fn pod_writes(cluster: &FakeCluster, from: usize) -> Vec<(Verb, String, Option<u16>)> {
    pods_written(&cluster.records()[from..])
}

/// The Pod writes among `records`: (verb, Pod, refused).
fn pods_written(records: &[Record]) -> Vec<(Verb, String, Option<u16>)> {
    records
        .iter()
        .filter(|r| r.kind == "Pod")
        .map(|r| (r.verb, r.name.clone(), r.refused))
        .collect()
}

/// Pod spec patches done (not refused) from `from` on: the in-place upgrades.
fn upgrades(cluster: &FakeCluster, from: usize) -> Vec<String> {
    pod_writes(cluster, from)
        .into_iter()
        .filter(|(verb, _, refused)| *verb == Verb::Patch && refused.is_none())
        .map(|(_, name, _)| name)
        .collect()
}

/// What a run of rounds showed.
#[derive(Debug, Default)]
struct Run {
    /// Rounds in which the controller wrote something.
    rounds: usize,
    /// What the controller wrote (not the kubelet), in order.
    writes: Vec<Record>,
    /// The Pods upgraded in place, per round that upgraded any.
    upgraded: Vec<Vec<String>>,
    /// The most Pods unavailable after any reconcile (before the kubelet caught up).
    most_unavailable: usize,
    /// The status counters after each round that wrote one.
    statuses: Vec<(i32, i32, i32, i32, i64)>,
}

/// Reconciles round after round until neither the controller nor the kubelet has anything left
/// to do. The kubelet is slow when `slow`: it runs only every other round, so the controller sees
/// upgraded Pods that have not restarted yet.
async fn converge(bench: &mut Bench, slow: bool) -> Run {
    let mut run = Run::default();
    for round in 0..40 {
        bench.sync();
        let before = bench.cluster.records().len();
        bench.reconcile().await.expect("a reconcile");
        let records = bench.cluster.records();
        let wrote = records.len() > before;
        if wrote {
            run.rounds += 1;
        }
        run.writes.extend_from_slice(&records[before..]);
        let upgraded = upgrades(&bench.cluster, before);
        if !upgraded.is_empty() {
            run.upgraded.push(upgraded);
        }
        let wrote_status = records[before..]
            .iter()
            .any(|r| r.kind == "SidecarSet" && r.verb == Verb::PatchStatus);
        if wrote_status && let Some(status) = status_of(&bench.cluster) {
            run.statuses.push(counts(&status));
        }
        run.most_unavailable = run.most_unavailable.max(unavailable(&bench.cluster));
        if slow && round % 2 == 0 {
            continue;
        }
        let kubelet_ran = run_pods(&bench.cluster, NS, true).await;
        if !wrote && !kubelet_ran {
            return run;
        }
    }
    panic!(
        "no convergence in 40 rounds: {:#?}",
        bench.cluster.records()
    );
}

/// A cluster with the SidecarSet (`strategy`) and three Pods it was injected into, running and
/// Ready, and a controller that has settled them: revision recorded, status written.
async fn settled(strategy: Value) -> Bench {
    let cluster = FakeCluster::new();
    let ss = cluster.insert(&sidecarset(strategy));
    for name in PODS {
        cluster.insert(&injected_pod(name, &ss));
    }
    run_pods(&cluster, NS, true).await;
    let mut bench = Bench::new(&cluster);
    converge(&mut bench, false).await;
    let status = status_of(&cluster).expect("a status");
    assert_eq!(counts(&status), (3, 3, 3, 3, 1), "settled at agent:1");
    assert!(
        sidecars(&cluster)
            .values()
            .all(|(_, image)| image == "agent:1"),
        "injected with agent:1"
    );
    bench
}

fn rolling(max_unavailable: i32) -> Value {
    json!({"type": "RollingUpdate", "maxUnavailable": max_unavailable})
}

/// The SidecarSet's entry in the Pod's `SidecarSetUpgradable` condition, and the condition's status.
fn upgradable(pod: &Pod) -> Option<(String, Value)> {
    let condition = kruise_core::pods::condition(pod, CONDITION_SIDECARSET_UPGRADABLE)?;
    let entries: Value = serde_json::from_str(condition.message.as_deref()?).ok()?;
    Some((condition.status.clone(), entries[SS].clone()))
}

#[tokio::test]
async fn a_new_sidecar_image_is_rolled_out_in_place_one_pod_at_a_time() {
    let mut bench = settled(rolling(1)).await;
    let cluster = bench.cluster.clone();
    let before = sidecars(&cluster);
    let revisions_before = cluster.all::<ControllerRevision>(Some(MANAGER_NS)).len();

    edit(&cluster, set_image("agent:2")).await;
    let run = converge(&mut bench, true).await;

    // In place: the same Pods, names and UIDs, now running agent:2 (each sidecar restarted once,
    // the app container never).
    let after = sidecars(&cluster);
    let same: Vec<(&String, &String)> = before.iter().map(|(n, (uid, _))| (n, uid)).collect();
    let kept: Vec<(&String, &String)> = after.iter().map(|(n, (uid, _))| (n, uid)).collect();
    assert_eq!(same, kept, "the same Pods, names and UIDs");
    assert!(
        after.values().all(|(_, image)| image == "agent:2"),
        "{after:?}"
    );
    for pod in cluster.all::<Pod>(Some(NS)) {
        let name = pod.metadata.name.clone().unwrap_or_default();
        assert_eq!(
            sidecar_running(&pod),
            Some(("agent:2".to_owned(), 1)),
            "{name}: the sidecar restarted once onto agent:2"
        );
        let app = pod
            .status
            .iter()
            .flat_map(|s| s.container_statuses.iter().flatten())
            .find(|c| c.name == "app")
            .map(|c| (c.image.clone(), c.restart_count));
        assert_eq!(
            app,
            Some(("app:1".to_owned(), 0)),
            "{name}: the app untouched"
        );
        // As OpenKruise, a Pod upgraded in place says the SidecarSet can upgrade it.
        assert_eq!(
            upgradable(&pod),
            Some(("True".to_owned(), json!(true))),
            "{name}: {:?}",
            pod.status.as_ref().map(|s| &s.conditions)
        );
    }

    // maxUnavailable 1: one Pod per round, and never a second while the first has not restarted.
    assert_eq!(run.upgraded.len(), 3, "three rounds upgraded: {run:?}");
    assert!(run.upgraded.iter().all(|round| round.len() == 1), "{run:?}");
    let mut upgraded: Vec<String> = run.upgraded.concat();
    upgraded.sort();
    assert_eq!(upgraded, PODS, "each Pod upgraded once: {run:?}");
    assert_eq!(run.most_unavailable, 1, "maxUnavailable 1 is kept: {run:?}");

    // The status follows the rollout, one round behind the writes (it is computed from the Pods
    // the round read): an upgraded Pod whose sidecar has not restarted yet is updated but not
    // ready; it ends with every Pod updated and ready, at generation 2.
    assert_eq!(
        run.statuses,
        vec![
            (3, 0, 3, 0, 2),
            (3, 1, 2, 0, 2),
            (3, 1, 3, 1, 2),
            (3, 2, 2, 1, 2),
            (3, 2, 3, 2, 2),
            (3, 3, 2, 2, 2),
            (3, 3, 3, 3, 2),
        ],
        "(matched, updated, ready, updatedReady, observedGeneration) per round: {run:?}"
    );
    let status = status_of(&cluster).expect("a status");
    assert_eq!(counts(&status), (3, 3, 3, 3, 2), "{status:?}");
    // A new revision records agent:2 and is the latest.
    let revisions = cluster.all::<ControllerRevision>(Some(MANAGER_NS));
    assert_eq!(revisions.len(), revisions_before + 1);
    assert!(
        revisions.iter().any(|r| r.metadata.name.as_deref()
            == Some(status.latest_revision.as_str())
            && r.data
                .as_ref()
                .is_some_and(|d| serde_json::to_string(d).is_ok_and(|d| d.contains("agent:2")))),
        "latestRevision {} records agent:2",
        status.latest_revision
    );
    assert_eq!(
        bench.event_reasons(),
        Vec::<String>::new(),
        "nothing to warn of"
    );
}

#[tokio::test]
async fn nothing_is_upgraded_again_while_the_caches_lag() {
    let mut bench = settled(rolling(1)).await;
    let cluster = bench.cluster.clone();
    edit(&cluster, set_image("agent:2")).await;
    bench.sync();
    let start = cluster.records().len();
    bench.reconcile().await.expect("a reconcile");
    let first = upgrades(&cluster, start);
    assert_eq!(first.len(), 1, "one Pod upgraded");

    // The Pod's new version is not in the cache yet, and the kubelet restarted it meanwhile: the
    // controller waits for its own write rather than decide on the old copy.
    run_pods(&cluster, NS, true).await;
    let writes = cluster.records().len();
    let action = bench.reconcile().await.expect("waiting");
    assert_eq!(cluster.records().len(), writes, "nothing written");
    assert_eq!(action, Action::requeue(Duration::from_secs(1)));

    // Once the cache shows it, the next Pod is upgraded.
    bench.sync();
    let writes = cluster.records().len();
    bench.reconcile().await.expect("a reconcile");
    let second = upgrades(&cluster, writes);
    assert_eq!(second.len(), 1, "the next Pod");
    assert_ne!(first, second);
}

#[tokio::test]
async fn a_paused_rollout_writes_no_pod_until_resumed() {
    let mut bench = settled(rolling(1)).await;
    let cluster = bench.cluster.clone();
    edit(&cluster, |ss| {
        ss.spec.containers[0].container.image = Some("agent:2".into());
        ss.spec.update_strategy.paused = true;
    })
    .await;
    let run = converge(&mut bench, false).await;

    assert_eq!(pods_written(&run.writes), vec![], "no Pod written");
    assert!(sidecars(&cluster).values().all(|(_, i)| i == "agent:1"));
    // The status still says where the rollout stands (OpenKruise writes it before the pause).
    let status = status_of(&cluster).expect("a status");
    assert_eq!(counts(&status), (3, 0, 3, 0, 2), "{status:?}");

    // Resumed, the rollout proceeds: it was the pause that held it.
    edit(&cluster, |ss| ss.spec.update_strategy.paused = false).await;
    let run = converge(&mut bench, false).await;
    assert!(
        sidecars(&cluster).values().all(|(_, i)| i == "agent:2"),
        "{run:?}"
    );
    let status = status_of(&cluster).expect("a status");
    assert_eq!(counts(&status), (3, 3, 3, 3, 3), "{status:?}");
}

#[tokio::test]
async fn a_partition_keeps_that_many_pods_on_the_old_sidecar() {
    let mut bench = settled(json!({"type": "RollingUpdate", "maxUnavailable": 3,
                                   "partition": 2}))
    .await;
    let cluster = bench.cluster.clone();
    edit(&cluster, set_image("agent:2")).await;
    let start = cluster.records().len();
    let run = converge(&mut bench, false).await;

    assert_eq!(
        upgrades(&cluster, start).len(),
        1,
        "3 Pods, partition 2: one upgraded: {run:?}"
    );
    let images: Vec<String> = sidecars(&cluster).into_values().map(|(_, i)| i).collect();
    assert_eq!(
        images.iter().filter(|i| *i == "agent:1").count(),
        2,
        "{images:?}"
    );
    let status = status_of(&cluster).expect("a status");
    assert_eq!(counts(&status), (3, 1, 3, 1, 2), "{status:?}");

    // Partition 0 releases the rest.
    edit(&cluster, |ss| {
        ss.spec.update_strategy.partition =
            Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(0));
    })
    .await;
    converge(&mut bench, false).await;
    assert!(sidecars(&cluster).values().all(|(_, i)| i == "agent:2"));
}

#[tokio::test]
async fn a_pod_read_from_a_stale_cache_is_not_patched_and_is_decided_again() {
    let mut bench = settled(rolling(1)).await;
    let cluster = bench.cluster.clone();
    edit(&cluster, set_image("agent:2")).await;
    bench.sync();
    // Another client writes every Pod after the cache was filled: the cached copies are older than
    // the cluster's.
    for name in PODS {
        cluster.touch::<Pod>(Some(NS), name);
    }
    let start = cluster.records().len();

    let action = bench.reconcile().await.expect("a race is no failure");

    let writes = pod_writes(&cluster, start);
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert_eq!(
        (writes[0].0, writes[0].2),
        (Verb::Patch, Some(422)),
        "the patch's resourceVersion test failed: {writes:?}"
    );
    assert!(
        sidecars(&cluster).values().all(|(_, i)| i == "agent:1"),
        "nothing written over the newer Pods"
    );
    assert_eq!(action, Action::requeue(RACE_RETRY), "decided again soon");
    assert_eq!(bench.event_reasons(), Vec::<String>::new());
    assert_eq!(
        (
            bench.upgrades_counted("success"),
            bench.upgrades_counted("error")
        ),
        (0, 0)
    );

    // On the fresh copies the upgrade goes through.
    bench.sync();
    let start = cluster.records().len();
    bench.reconcile().await.expect("a reconcile");
    assert_eq!(upgrades(&cluster, start).len(), 1);
}

#[tokio::test]
async fn a_refused_pod_patch_is_a_race_on_409_and_a_failure_on_422_or_500() {
    // (code, a race)
    for (code, race) in [(409, true), (422, false), (500, false)] {
        let mut bench = settled(rolling(1)).await;
        let cluster = bench.cluster.clone();
        edit(&cluster, set_image("agent:2")).await;
        bench.sync();
        cluster.fail_next(Verb::Patch, "", code);
        let start = cluster.records().len();

        let result = bench.reconcile().await;

        let writes = pod_writes(&cluster, start);
        assert_eq!(writes.len(), 1, "{code}: {writes:?}");
        assert_eq!(
            (writes[0].0, writes[0].2),
            (Verb::Patch, Some(code)),
            "{code}"
        );
        assert!(
            sidecars(&cluster).values().all(|(_, i)| i == "agent:1"),
            "{code}: no Pod changed"
        );
        // No Event either way (OpenKruise logs a failed Pod update and returns the error).
        assert_eq!(bench.event_reasons(), Vec::<String>::new(), "{code}");
        if race {
            assert_eq!(
                result.expect("a race is no failure"),
                Action::requeue(RACE_RETRY),
                "{code}: decided again soon"
            );
            assert_eq!(bench.upgrades_counted("error"), 0, "{code}");
        } else {
            let error = result.expect_err("a refusal fails the reconcile");
            assert!(!error.is_race(), "{code}: {error}");
            assert!(
                matches!(&error, Error::Kube { context, source: kube::Error::Api(s) }
                    if context.starts_with("update_in_place: Pod ns/web-") && s.code == code),
                "{code}: {error:?}"
            );
            assert_eq!(bench.upgrades_counted("error"), 1, "{code}");
        }
        // The status is written all the same (OpenKruise writes it before upgrading).
        let status = status_of(&cluster).expect("a status");
        assert_eq!(counts(&status), (3, 0, 3, 0, 2), "{code}: {status:?}");

        // The next reconcile upgrades the Pod.
        bench.sync();
        let start = cluster.records().len();
        bench.reconcile().await.expect("a reconcile");
        assert_eq!(upgrades(&cluster, start).len(), 1, "{code}");
    }
}

#[tokio::test]
async fn a_status_from_a_stale_sidecarset_copy_is_not_written() {
    let mut bench = settled(rolling(1)).await;
    let cluster = bench.cluster.clone();
    // A Pod goes: the status to write changes (matchedPods 3 → 2).
    cluster.forget::<Pod>(Some(NS), "web-2");
    bench.sync();
    // Another client writes the SidecarSet after the cache was filled.
    cluster.touch::<SidecarSet>(None, SS);
    let written = status_of(&cluster);
    let start = cluster.records().len();

    let action = bench.reconcile().await.expect("a race is no failure");

    let status_writes: Vec<Option<u16>> = cluster.records()[start..]
        .iter()
        .filter(|r| r.kind == "SidecarSet" && r.verb == Verb::PatchStatus)
        .map(|r| r.refused)
        .collect();
    assert_eq!(
        status_writes,
        vec![Some(409)],
        "the write is guarded by the copy's resourceVersion"
    );
    assert_eq!(
        status_of(&cluster),
        written,
        "the cluster's status untouched"
    );
    assert_eq!(action, Action::requeue(RACE_RETRY), "decided again soon");

    // On the fresh copy, the status is computed again and written.
    bench.sync();
    bench.reconcile().await.expect("a reconcile");
    let status = status_of(&cluster).expect("a status");
    assert_eq!(counts(&status), (2, 2, 2, 2, 1), "{status:?}");
}
