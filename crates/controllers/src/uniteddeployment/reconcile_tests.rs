//! A UnitedDeployment's reconcile against the in-memory cluster: its subset CloneSets created once
//! (even while the caches lag), patched in place when the replicas, the template or the partitions
//! change, deleted when they leave the topology; its status read from the subsets; refusals by
//! code. Each round reconciles on caches that show the cluster as it is (a perfect informer)
//! unless a test keeps an older context to make them lag; the expectations carry from round to
//! round, as the controller keeps them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use kruise_api::keys;
use kruise_api::uniteddeployment::v1beta1::{UnitedDeployment, UnitedDeploymentStatus};
use kruise_core::expectations::Expectations;
use kruise_core::rollout::uniteddeployment::TemplateKind;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::watcher;
use serde_json::{Value, json};

use super::reconcile::reconcile;
use super::{CONTROLLER, Context, Error, Subsets, api_resource, is_subset};
use crate::cache::PodCache;
use crate::driver::scripted;
use crate::driver::writes::fake::{FakeCluster, Record, Verb, listed};
use crate::driver::writes::{At, LiveReads, Writer};
use crate::metrics::Metrics;

const NS: &str = "ns";
const UD: &str = "ud";
const TIMEOUT: Duration = Duration::from_secs(300);

/// A node selector requirement on the zone.
fn zone(value: &str) -> Value {
    json!({"key": "zone", "operator": "In", "values": [value]})
}

/// The template's own required node affinity, which every subset's term is merged into.
fn disk() -> Value {
    json!({"key": "disk", "operator": "In", "values": ["ssd"]})
}

/// The two subsets: subset-a with `a` replicas (shared evenly when `None`), subset-b the rest.
fn topology(a: Option<i32>) -> Value {
    let mut subset_a =
        json!({"name": "subset-a", "nodeSelectorTerm": {"matchExpressions": [zone("a")]}});
    if let Some(replicas) = a {
        subset_a["replicas"] = json!(replicas);
    }
    json!([subset_a,
           {"name": "subset-b", "nodeSelectorTerm": {"matchExpressions": [zone("b")]}}])
}

/// 5 replicas of a CloneSet template, image `app:1`, over subset-a (2) and subset-b (the rest).
fn united_deployment() -> UnitedDeployment {
    serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1", "kind": "UnitedDeployment",
        "metadata": {"name": UD, "namespace": NS, "uid": "ud-uid", "generation": 1},
        "spec": {
            "replicas": 5,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"cloneSetTemplate": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": {
                        "metadata": {"labels": {"app": "web"}},
                        "spec": {
                            "containers": [{"name": "app", "image": "app:1"}],
                            "affinity": {"nodeAffinity": {
                                "requiredDuringSchedulingIgnoredDuringExecution": {
                                    "nodeSelectorTerms": [{"matchExpressions": [disk()]}]}}},
                        },
                    },
                },
            }},
            "topology": {"subsets": topology(Some(2))},
            "revisionHistoryLimit": 10,
        },
    }))
    .expect("a UnitedDeployment")
}

/// The cluster, the expectations the controller carries from one reconcile to the next, and
/// where its Events go.
struct Bench {
    cluster: Arc<FakeCluster>,
    client: kube::Client,
    log: scripted::Log,
    metrics: Arc<Metrics>,
    /// The context of the last round: the next one takes its expectations over.
    last: Option<Arc<Context>>,
}

impl Bench {
    fn new() -> Self {
        Self::with(&united_deployment())
    }

    fn with(ud: &UnitedDeployment) -> Self {
        let cluster = FakeCluster::new();
        cluster.insert(ud);
        let (client, log) = scripted::client(Vec::new());
        let mut registry = prometheus_client::registry::Registry::default();
        Self {
            cluster,
            client,
            log,
            metrics: Metrics::register(&mut registry),
            last: None,
        }
    }

    /// A context whose caches show the cluster as it is now, with the expectations of the last
    /// round.
    async fn mirror(&mut self) -> Arc<Context> {
        let expectations = match self.last.take() {
            Some(last) => {
                let mut held = last.expectations.lock().expect("the expectations");
                std::mem::replace(&mut *held, Expectations::new(TIMEOUT))
            }
            None => Expectations::new(TIMEOUT),
        };
        let pods = PodCache::new();
        pods.apply(watcher::Event::Init);
        for pod in self.cluster.all::<Pod>(Some(NS)) {
            pods.apply(watcher::Event::InitApply(pod));
        }
        pods.apply(watcher::Event::InitDone);
        let mut workloads = Vec::new();
        for kind in TemplateKind::ALL {
            let resource = api_resource(kind);
            // What the manager's cache of that kind holds: the labelled objects, as they are.
            let cached: Vec<Arc<DynamicObject>> = self
                .raw(kind)
                .await
                .into_iter()
                .map(|o| serde_json::from_value::<DynamicObject>(o).expect("a workload"))
                .filter(|o| is_subset(&o.metadata))
                .map(Arc::new)
                .collect();
            let subsets = Subsets {
                read: Box::new(move |namespace| {
                    cached
                        .iter()
                        .filter(|o| o.metadata.namespace.as_deref() == Some(namespace))
                        .cloned()
                        .collect()
                }),
                listed: Box::new(|| true),
            };
            workloads.push((kind, resource, subsets));
        }
        let ctx = Arc::new(Context {
            writes: self.cluster.clone(),
            live: self.cluster.clone(),
            pods,
            revisions: listed(self.cluster.all::<ControllerRevision>(Some(NS))),
            workloads,
            expectations: Mutex::new(expectations),
            recorder: crate::driver::recorder(self.client.clone(), CONTROLLER),
            metrics: self.metrics.clone(),
        });
        self.last = Some(ctx.clone());
        ctx
    }

    /// The UnitedDeployment as the cluster has it now.
    fn ud(&self) -> UnitedDeployment {
        self.cluster
            .get(Some(NS), UD)
            .expect("the UnitedDeployment")
    }

    fn status(&self) -> UnitedDeploymentStatus {
        self.ud().status.expect("a status")
    }

    /// Reconciles `ud` on `ctx`; the result and the writes it sent.
    async fn reconcile_copy(
        &self,
        ud: UnitedDeployment,
        ctx: &Arc<Context>,
    ) -> (Result<Action, Error>, Vec<Record>) {
        let before = self.cluster.records().len();
        let result = reconcile(Arc::new(ud), ctx.clone()).await;
        (result, self.cluster.records()[before..].to_vec())
    }

    /// Reconciles the UnitedDeployment as it is now on `ctx`.
    async fn reconcile(&self, ctx: &Arc<Context>) -> (Result<Action, Error>, Vec<Record>) {
        self.reconcile_copy(self.ud(), ctx).await
    }

    /// Reconciles on mirrored caches until a round writes nothing; every write of the rounds.
    async fn converge(&mut self) -> Vec<Record> {
        let mut writes = Vec::new();
        for _ in 0..10 {
            let ctx = self.mirror().await;
            let (result, written) = self.reconcile(&ctx).await;
            result.expect("a reconcile");
            if written.is_empty() {
                return writes;
            }
            writes.extend(written);
        }
        panic!("no convergence in 10 rounds: {:#?}", self.cluster.records());
    }

    /// Another client (`kubectl`) changes the UnitedDeployment's spec.
    async fn edit(&self, patch: Value) {
        Writer::<UnitedDeployment>::namespaced(self.cluster.clone(), NS)
            .patch(UD, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("the edit");
    }

    /// The objects of `kind`'s resource in the namespace, as stored.
    async fn raw(&self, kind: TemplateKind) -> Vec<Value> {
        let at = At {
            resource: api_resource(kind),
            namespace: Some(NS.into()),
        };
        self.cluster
            .select(&at, &ListParams::default())
            .await
            .expect("a list")
    }

    /// The subset CloneSets by their subset label.
    async fn clonesets(&self) -> BTreeMap<String, Value> {
        self.raw(TemplateKind::CloneSet)
            .await
            .into_iter()
            .map(|o| (label(&o, keys::LABEL_SUBSET_NAME).to_owned(), o))
            .collect()
    }

    /// Another controller (the CloneSet's) writes a subset workload's status.
    async fn set_status(&self, kind: TemplateKind, name: &str, status: Value) {
        Writer::<DynamicObject>::namespaced_with(self.cluster.clone(), NS, &api_resource(kind))
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": status})),
            )
            .await
            .expect("the workload's status");
    }

    /// The CloneSets' controller and the kubelet have run: each subset's CloneSet has `replicas`
    /// Pods at the UnitedDeployment revision `revision`, `ready` of them Ready (its Pods of
    /// before are gone), and its status says so.
    async fn run_pods(&self, revision: &str, subsets: &[(&str, i32, i32)]) {
        let sets = self.clonesets().await;
        for &(subset, replicas, ready) in subsets {
            let set = &sets[subset];
            for old in self.cluster.all::<Pod>(Some(NS)) {
                if old
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(keys::LABEL_SUBSET_NAME))
                    == Some(&subset.to_owned())
                {
                    let name = old.metadata.name.unwrap_or_default();
                    self.cluster.forget::<Pod>(Some(NS), &name);
                }
            }
            for i in 0..replicas {
                let name = format!("{subset}-{revision}-{i}");
                self.cluster.insert(&pod(&name, set, revision, i < ready));
            }
            self.set_status(
                TemplateKind::CloneSet,
                &name_of(set),
                json!({"replicas": replicas, "readyReplicas": ready}),
            )
            .await;
        }
    }

    /// The reasons and notes of the Events published, in order.
    fn events(&self) -> Vec<(String, String)> {
        self.log.reasons_and_notes()
    }
}

fn label<'a>(object: &'a Value, key: &str) -> &'a str {
    object["metadata"]["labels"][key]
        .as_str()
        .unwrap_or_default()
}

fn name_of(object: &Value) -> String {
    object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn uid_of(object: &Value) -> String {
    object["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// What each write was: its verb, resource kind and name, and its refusal.
fn summary(records: &[Record]) -> Vec<(Verb, String, String, Option<u16>)> {
    records
        .iter()
        .map(|r| (r.verb, r.kind.clone(), r.name.clone(), r.refused))
        .collect()
}

/// `(replicas, partition, image)` of each subset CloneSet, by subset.
fn shapes(clonesets: &BTreeMap<String, Value>) -> BTreeMap<String, (i64, i64, String)> {
    clonesets
        .iter()
        .map(|(subset, o)| {
            let spec = &o["spec"];
            (
                subset.clone(),
                (
                    spec["replicas"].as_i64().unwrap_or(-1),
                    spec["updateStrategy"]["rollingUpdate"]["partition"]
                        .as_i64()
                        .unwrap_or(-1),
                    spec["template"]["spec"]["containers"][0]["image"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                ),
            )
        })
        .collect()
}

fn uids(clonesets: &BTreeMap<String, Value>) -> BTreeMap<String, String> {
    clonesets
        .iter()
        .map(|(subset, o)| (subset.clone(), uid_of(o)))
        .collect()
}

/// The status of condition `type_`: (status, reason).
fn condition(status: &UnitedDeploymentStatus, type_: &str) -> Option<(String, String)> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

/// A Running Pod of a subset workload at the UnitedDeployment revision `revision`.
fn pod(name: &str, owner: &Value, revision: &str, ready: bool) -> Pod {
    let ready = if ready { "True" } else { "False" };
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "uid": format!("{name}-uid"),
                     "labels": {"app": "web",
                                keys::LABEL_SUBSET_NAME: label(owner, keys::LABEL_SUBSET_NAME),
                                keys::LABEL_CONTROLLER_REVISION_HASH: revision},
                     "ownerReferences": [{"apiVersion": "apps.kruise.io/v1beta1",
                                          "kind": "CloneSet", "name": name_of(owner),
                                          "uid": uid_of(owner), "controller": true}]},
        "spec": {"nodeName": "node-0", "containers": [{"name": "app", "image": "app:1"}]},
        "status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": ready, "lastTransitionTime": "2026-11-30T09:00:00Z"}]},
    }))
    .expect("a Pod")
}

#[tokio::test]
async fn creates_one_cloneset_per_subset_once_even_while_the_caches_lag() {
    let mut bench = Bench::new();
    let ctx = bench.mirror().await;

    let (result, writes) = bench.reconcile(&ctx).await;

    result.expect("reconciled");
    let revisions = bench.cluster.all::<ControllerRevision>(Some(NS));
    assert_eq!(revisions.len(), 1, "one revision of the template");
    let revision = revisions[0].metadata.name.clone().expect("a name");
    let created: Vec<(String, String, Option<u16>)> = writes
        .iter()
        .filter(|r| r.verb == Verb::Create)
        .map(|r| (r.kind.clone(), r.name.clone(), r.refused))
        .collect();
    assert_eq!(
        created,
        vec![
            ("ControllerRevision".to_owned(), revision.clone(), None),
            // The server names them: the generateName prefix is what was asked for.
            ("CloneSet".to_owned(), "ud-subset-a-".to_owned(), None),
            ("CloneSet".to_owned(), "ud-subset-b-".to_owned(), None),
        ]
    );
    let sets = bench.clonesets().await;
    assert_eq!(
        sets.keys().collect::<Vec<_>>(),
        ["subset-a", "subset-b"],
        "{sets:#?}"
    );
    for (subset, set) in &sets {
        let name = name_of(set);
        let suffix = name
            .strip_prefix(&format!("ud-{subset}-"))
            .unwrap_or_default();
        assert!(!suffix.is_empty(), "{name}: <ud>-<subset>-<generated>");
        assert_eq!(set["apiVersion"], "apps.kruise.io/v1beta1", "{name}");
        let labels = &set["metadata"]["labels"];
        assert_eq!(
            labels,
            &json!({"app": "web", keys::LABEL_SUBSET_NAME: subset,
                    keys::LABEL_CONTROLLER_REVISION_HASH: revision}),
            "{name}"
        );
        assert_eq!(
            set["metadata"]["ownerReferences"],
            json!([{"apiVersion": "apps.kruise.io/v1alpha1", "kind": "UnitedDeployment",
                    "name": UD, "uid": "ud-uid", "controller": true,
                    "blockOwnerDeletion": true}]),
            "{name}"
        );
        // The subset's selector and Pods carry the subset name; the Pods the revision too.
        assert_eq!(
            set["spec"]["selector"],
            json!({"matchLabels": {"app": "web", keys::LABEL_SUBSET_NAME: subset}}),
            "{name}"
        );
        assert_eq!(
            set["spec"]["template"]["metadata"]["labels"],
            json!({"app": "web", keys::LABEL_SUBSET_NAME: subset,
                   keys::LABEL_CONTROLLER_REVISION_HASH: revision}),
            "{name}"
        );
        // The subset's term is merged into the template's required node affinity.
        let zone_value = subset.trim_start_matches("subset-");
        assert_eq!(
            set["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
                ["nodeSelectorTerms"],
            json!([{"matchExpressions": [disk(), zone(zone_value)]}]),
            "{name}"
        );
    }
    assert_eq!(
        shapes(&sets),
        BTreeMap::from([
            ("subset-a".to_owned(), (2, 0, "app:1".to_owned())),
            ("subset-b".to_owned(), (3, 0, "app:1".to_owned())),
        ])
    );
    assert_eq!(
        bench.events(),
        vec![(
            "SuccessfulUpdateSubset".to_owned(),
            "Create 2 Subset (CloneSet)".to_owned()
        )]
    );
    let status = bench.status();
    assert_eq!(status.updated_revision, revision);
    assert_eq!(status.current_revision, revision);
    assert_eq!(
        condition(&status, "SubsetProvisioned"),
        Some(("True".into(), String::new()))
    );

    // Again on the same caches, which do not show the CloneSets yet: nothing is written, the
    // reconcile waits for its creates to show.
    let (result, writes) = bench.reconcile(&ctx).await;
    assert_eq!(
        result.expect("a wait"),
        Action::requeue(Duration::from_millis(300))
    );
    assert_eq!(summary(&writes), vec![]);
    assert_eq!(bench.clonesets().await.len(), 2);

    // Once the caches show them, nothing more is created and nothing is patched.
    let writes = bench.converge().await;
    assert!(
        writes.iter().all(|r| r.kind == "UnitedDeployment"),
        "{:#?}",
        summary(&writes)
    );
    assert_eq!(uids(&bench.clonesets().await), uids(&sets));
    assert_eq!(bench.events().len(), 1, "{:?}", bench.events());
}

#[tokio::test]
async fn replicas_template_and_partitions_are_patched_into_the_same_subsets() {
    let mut bench = Bench::new();
    bench.converge().await;
    let first = bench.clonesets().await;
    let first_revision = bench.status().updated_revision;

    // spec.replicas: 5 → 7. subset-a keeps its 2, subset-b gets the rest.
    bench.edit(json!({"spec": {"replicas": 7}})).await;
    let writes = bench.converge().await;
    let sets = bench.clonesets().await;
    assert_eq!(
        shapes(&sets),
        BTreeMap::from([
            ("subset-a".to_owned(), (2, 0, "app:1".to_owned())),
            ("subset-b".to_owned(), (5, 0, "app:1".to_owned())),
        ])
    );
    let workload_writes: Vec<(Verb, String)> = writes
        .iter()
        .filter(|r| r.kind == "CloneSet")
        .map(|r| (r.verb, r.name.clone()))
        .collect();
    assert_eq!(
        workload_writes,
        vec![(Verb::Patch, name_of(&first["subset-b"]))],
        "only subset-b changes, in place"
    );
    assert_eq!(uids(&sets), uids(&first));

    // subset-a's replicas: 2 → 4 (subset-b: 3).
    bench
        .edit(json!({"spec": {"topology": {"subsets": topology(Some(4))}}}))
        .await;
    let writes = bench.converge().await;
    let sets = bench.clonesets().await;
    assert_eq!(
        shapes(&sets),
        BTreeMap::from([
            ("subset-a".to_owned(), (4, 0, "app:1".to_owned())),
            ("subset-b".to_owned(), (3, 0, "app:1".to_owned())),
        ])
    );
    assert!(
        writes
            .iter()
            .filter(|r| r.kind == "CloneSet")
            .all(|r| r.verb == Verb::Patch && r.refused.is_none()),
        "{:#?}",
        summary(&writes)
    );
    assert_eq!(uids(&sets), uids(&first));

    // A new image: both subsets' templates, and a new revision.
    bench
        .edit(
            json!({"spec": {"template": {"cloneSetTemplate": {"spec": {"template": {"spec": {
            "containers": [{"name": "app", "image": "app:2"}]}}}}}}}),
        )
        .await;
    let writes = bench.converge().await;
    let sets = bench.clonesets().await;
    let status = bench.status();
    assert_ne!(status.updated_revision, first_revision);
    assert_eq!(
        bench.cluster.all::<ControllerRevision>(Some(NS)).len(),
        2,
        "the old revision is kept in the history"
    );
    assert_eq!(
        shapes(&sets),
        BTreeMap::from([
            ("subset-a".to_owned(), (4, 0, "app:2".to_owned())),
            ("subset-b".to_owned(), (3, 0, "app:2".to_owned())),
        ])
    );
    for (subset, set) in &sets {
        assert_eq!(
            label(set, keys::LABEL_CONTROLLER_REVISION_HASH),
            status.updated_revision,
            "{subset}"
        );
        assert_eq!(
            set["spec"]["template"]["metadata"]["labels"][keys::LABEL_CONTROLLER_REVISION_HASH],
            json!(status.updated_revision),
            "{subset}"
        );
        // The subset's affinity survives the update.
        let terms = &set["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            ["nodeSelectorTerms"];
        assert_eq!(
            terms,
            &json!([{"matchExpressions": [disk(), zone(subset.trim_start_matches("subset-"))]}]),
            "{subset}"
        );
    }
    assert!(
        writes
            .iter()
            .filter(|r| r.kind == "CloneSet")
            .all(|r| r.verb == Verb::Patch),
        "{:#?}",
        summary(&writes)
    );
    assert_eq!(uids(&sets), uids(&first));

    // Partitions per subset; one above its subset's replicas is capped at them.
    bench
        .edit(json!({"spec": {"updateStrategy": {"type": "Manual",
            "manualUpdate": {"partitions": {"subset-a": 1, "subset-b": 9}}}}}))
        .await;
    bench.converge().await;
    let sets = bench.clonesets().await;
    assert_eq!(
        shapes(&sets),
        BTreeMap::from([
            ("subset-a".to_owned(), (4, 1, "app:2".to_owned())),
            ("subset-b".to_owned(), (3, 3, "app:2".to_owned())),
        ])
    );
    let partitions: Vec<(String, i32)> = bench
        .status()
        .subset_statuses
        .iter()
        .map(|s| (s.name.clone(), s.partition))
        .collect();
    assert_eq!(
        partitions,
        vec![("subset-a".to_owned(), 1), ("subset-b".to_owned(), 3)]
    );
    assert_eq!(uids(&sets), uids(&first));
}

#[tokio::test]
async fn subsets_out_of_the_topology_are_deleted() {
    let mut bench = Bench::new();
    bench.converge().await;
    let first = bench.clonesets().await;

    // subset-b leaves the topology; subset-a takes all 5.
    bench
        .edit(json!({"spec": {"topology": {"subsets": [
            {"name": "subset-a", "nodeSelectorTerm": {"matchExpressions": [zone("a")]}}]}}}))
        .await;
    let writes = bench.converge().await;
    let workload_writes: Vec<(Verb, String, Option<u16>)> = writes
        .iter()
        .filter(|r| r.kind == "CloneSet")
        .map(|r| (r.verb, r.name.clone(), r.refused))
        .collect();
    assert_eq!(
        workload_writes,
        vec![
            (Verb::Delete, name_of(&first["subset-b"]), None),
            (Verb::Patch, name_of(&first["subset-a"]), None),
        ]
    );
    let sets = bench.clonesets().await;
    assert_eq!(shapes(&sets).keys().collect::<Vec<_>>(), ["subset-a"]);
    assert_eq!(sets["subset-a"]["spec"]["replicas"], 5);
    assert_eq!(uid_of(&sets["subset-a"]), uid_of(&first["subset-a"]));
    assert!(
        bench.events().contains(&(
            "SuccessfulUpdateSubset".into(),
            "Delete 1 Subset (CloneSet)".into()
        )),
        "{:?}",
        bench.events()
    );
    let names: Vec<String> = bench
        .status()
        .subset_statuses
        .iter()
        .map(|s| s.name.clone())
        .collect();
    assert_eq!(names, ["subset-a"], "the status forgets subset-b");

    // Workloads of the UnitedDeployment that match no subset: one of a subset name the topology
    // does not have, a second one of subset-a (newer: the duplicate), a Deployment (another kind
    // than the template's), and an orphan its selector matches (adopted first). All four are
    // deleted; subset-a's CloneSet stays.
    let owned = |kind: &str, api_version: &str, name: &str, subset: &str| -> Value {
        json!({
            "apiVersion": api_version, "kind": kind,
            "metadata": {"name": name, "namespace": NS, "uid": format!("{name}-uid"),
                         "creationTimestamp": "2099-01-01T00:00:00Z",
                         "labels": {"app": "web", keys::LABEL_SUBSET_NAME: subset},
                         "ownerReferences": [{"apiVersion": "apps.kruise.io/v1alpha1",
                                              "kind": "UnitedDeployment", "name": UD,
                                              "uid": "ud-uid", "controller": true}]},
            "spec": {"replicas": 1,
                     "selector": {"matchLabels": {"app": "web", keys::LABEL_SUBSET_NAME: subset}},
                     "template": {"metadata": {"labels": {"app": "web",
                                                          keys::LABEL_SUBSET_NAME: subset}},
                                  "spec": {"containers": [{"name": "app", "image": "app:1"}]}}},
        })
    };
    let stray: kruise_api::cloneset::v1beta1::CloneSet = serde_json::from_value(owned(
        "CloneSet",
        "apps.kruise.io/v1beta1",
        "ud-subset-z-x",
        "subset-z",
    ))
    .expect("a CloneSet");
    let duplicate: kruise_api::cloneset::v1beta1::CloneSet = serde_json::from_value(owned(
        "CloneSet",
        "apps.kruise.io/v1beta1",
        "ud-subset-a-dup",
        "subset-a",
    ))
    .expect("a CloneSet");
    let deployment: k8s_openapi::api::apps::v1::Deployment = serde_json::from_value(owned(
        "Deployment",
        "apps/v1",
        "ud-subset-a-dep",
        "subset-a",
    ))
    .expect("a Deployment");
    let mut orphan = owned(
        "CloneSet",
        "apps.kruise.io/v1beta1",
        "ud-subset-y-o",
        "subset-y",
    );
    orphan["metadata"]["ownerReferences"] = json!([]);
    let orphan: kruise_api::cloneset::v1beta1::CloneSet =
        serde_json::from_value(orphan).expect("a CloneSet");
    bench.cluster.insert(&stray);
    bench.cluster.insert(&duplicate);
    bench.cluster.insert(&deployment);
    bench.cluster.insert(&orphan);

    let writes = bench.converge().await;
    let mut deleted: Vec<(String, String)> = writes
        .iter()
        .filter(|r| r.verb == Verb::Delete && r.refused.is_none())
        .map(|r| (r.kind.clone(), r.name.clone()))
        .collect();
    deleted.sort();
    assert_eq!(
        deleted,
        vec![
            ("CloneSet".to_owned(), "ud-subset-a-dup".to_owned()),
            ("CloneSet".to_owned(), "ud-subset-y-o".to_owned()),
            ("CloneSet".to_owned(), "ud-subset-z-x".to_owned()),
            ("Deployment".to_owned(), "ud-subset-a-dep".to_owned()),
        ],
        "{:#?}",
        summary(&writes)
    );
    // The orphan was adopted (a controller reference to the UnitedDeployment) before its delete.
    let adoption = writes
        .iter()
        .find(|r| r.verb == Verb::Patch && r.name == "ud-subset-y-o")
        .expect("the orphan adopted");
    assert!(
        adoption.body.to_string().contains("\"uid\":\"ud-uid\""),
        "{}",
        adoption.body
    );
    let sets = bench.clonesets().await;
    assert_eq!(
        sets.values().map(name_of).collect::<Vec<_>>(),
        [name_of(&first["subset-a"])]
    );
    assert!(bench.raw(TemplateKind::Deployment).await.is_empty());
}

#[tokio::test]
async fn the_status_reflects_the_subsets_and_a_stale_copy_writes_none() {
    let mut bench = Bench::new();
    bench.converge().await;
    let revision = bench.status().updated_revision;
    let sets = bench.clonesets().await;

    // The CloneSets' controller has run: subset-a 2 Pods, both Ready; subset-b 3 Pods, 1 Ready.
    bench
        .run_pods(&revision, &[("subset-a", 2, 2), ("subset-b", 3, 1)])
        .await;
    bench.converge().await;

    let status = bench.status();
    assert_eq!(
        (
            status.replicas,
            status.ready_replicas,
            status.updated_replicas,
            status.updated_ready_replicas
        ),
        (5, 3, 5, 3),
        "{status:#?}"
    );
    let subsets: Vec<(String, i32, i32, i32)> = status
        .subset_statuses
        .iter()
        .map(|s| (s.name.clone(), s.replicas, s.ready_replicas, s.partition))
        .collect();
    assert_eq!(
        subsets,
        vec![
            ("subset-a".to_owned(), 2, 2, 0),
            ("subset-b".to_owned(), 3, 1, 0)
        ]
    );
    assert_eq!(status.observed_generation, 1);
    assert_eq!(status.label_selector, "app=web");
    assert_eq!(
        (
            status.current_revision.as_str(),
            status.updated_revision.as_str()
        ),
        (revision.as_str(), revision.as_str())
    );
    for (type_, expected) in [
        ("SubsetProvisioned", ("True", "")),
        ("SubsetUpdated", ("True", "")),
        (
            "UnitedDeploymentUpdated",
            ("True", "UnitedDeploymentRevisionUpdated"),
        ),
        ("Available", ("False", "MinimumReplicasUnavailable")),
        ("Progressing", ("True", "RevisionUpdating")),
    ] {
        assert_eq!(
            condition(&status, type_),
            Some((expected.0.to_owned(), expected.1.to_owned())),
            "{type_}"
        );
    }

    // All Ready: Available, and the revision complete.
    bench.run_pods(&revision, &[("subset-b", 3, 3)]).await;
    bench.converge().await;
    let status = bench.status();
    assert_eq!(
        (status.ready_replicas, status.updated_ready_replicas),
        (5, 5)
    );
    assert_eq!(
        condition(&status, "Available"),
        Some(("True".into(), "MinimumReplicasAvailable".into()))
    );
    assert_eq!(
        condition(&status, "Progressing"),
        Some(("True".into(), "NewRevisionAvailable".into()))
    );

    // A copy another writer has moved past: its status write is refused, nothing else is sent,
    // and the cluster's status stays as it was.
    let stale = bench.ud();
    bench.cluster.touch::<UnitedDeployment>(Some(NS), UD);
    bench
        .set_status(
            TemplateKind::CloneSet,
            &name_of(&sets["subset-b"]),
            json!({"replicas": 3, "readyReplicas": 2}),
        )
        .await;
    let ctx = bench.mirror().await;
    let (result, writes) = bench.reconcile_copy(stale, &ctx).await;
    result.expect("a stale copy is no failure");
    assert_eq!(
        summary(&writes),
        vec![(
            Verb::PatchStatus,
            "UnitedDeployment".to_owned(),
            UD.to_owned(),
            Some(409)
        )]
    );
    assert_eq!(bench.status(), status);
}

#[tokio::test]
async fn a_refused_subset_create_is_told_and_fails_the_reconcile() {
    for code in [409, 422, 500] {
        let mut bench = Bench::new();
        bench.cluster.fail_next(Verb::Create, "ud-subset-a-", code);
        let ctx = bench.mirror().await;

        let (result, writes) = bench.reconcile(&ctx).await;

        let error = result.expect_err("a refused create fails the reconcile");
        assert!(
            matches!(&error, Error::Invalid(m)
                if m.starts_with("fail to create Subset (CloneSet) subset-a: ")),
            "{code}: {error}"
        );
        // Every refusal is a failure, a 409 too (no race): retried after the error backoff.
        assert!(!error.is_race(), "{code}");
        assert_eq!(
            crate::driver::error_policy(Arc::new(bench.ud()), &error, ctx.clone()),
            Action::requeue(crate::driver::ERROR_REQUEUE),
            "{code}"
        );
        // Slow start: the first batch (subset-a alone) failed, subset-b was not tried.
        let creates: Vec<(String, String, Option<u16>)> = writes
            .iter()
            .filter(|r| r.verb == Verb::Create)
            .map(|r| (r.kind.clone(), r.name.clone(), r.refused))
            .collect();
        assert_eq!(
            creates[1..],
            [("CloneSet".to_owned(), "ud-subset-a-".to_owned(), Some(code))],
            "{code}"
        );
        assert!(bench.clonesets().await.is_empty(), "{code}");
        let events = bench.events();
        assert_eq!(events.len(), 1, "{code}: {events:?}");
        assert_eq!(events[0].0, "FailedUpdateSubset", "{code}");
        assert!(
            events[0].1.starts_with(
                "fail to manage Subset provision: fail to create Subset (CloneSet) subset-a: "
            ),
            "{code}: {events:?}"
        );
        // The status says so.
        let status = bench.status();
        assert_eq!(
            condition(&status, "SubsetProvisioned"),
            Some(("False".into(), "Error".into())),
            "{code}"
        );
        assert_eq!(condition(&status, "SubsetUpdated"), None, "{code}");

        // The next reconcile (nothing was expected of the refused create) creates both.
        let (result, _) = bench.reconcile(&ctx).await;
        result.expect("created");
        assert_eq!(
            bench.clonesets().await.keys().collect::<Vec<_>>(),
            ["subset-a", "subset-b"],
            "{code}"
        );
        bench.converge().await;
        assert_eq!(
            condition(&bench.status(), "SubsetProvisioned"),
            Some(("True".into(), String::new())),
            "{code}"
        );
    }
}

#[tokio::test]
async fn a_subset_moved_under_its_update_is_decided_again_and_the_others_go_on() {
    let mut bench = Bench::new();
    bench.converge().await;
    let sets = bench.clonesets().await;
    bench
        .edit(
            json!({"spec": {"template": {"cloneSetTemplate": {"spec": {"template": {
            "spec": {"containers": [{"name": "app", "image": "app:2"}]}}}}}}}),
        )
        .await;
    bench
        .cluster
        .fail_next(Verb::Patch, &name_of(&sets["subset-a"]), 409);
    let ctx = bench.mirror().await;

    let (result, writes) = bench.reconcile(&ctx).await;

    // No failure: decided again soon, on a fresh view; subset-b is updated meanwhile.
    let action = result.expect("a race is no failure");
    assert_eq!(action, Action::requeue(crate::driver::RACE_RETRY));
    let patches: Vec<(String, Option<u16>)> = writes
        .iter()
        .filter(|r| r.kind == "CloneSet")
        .map(|r| (r.name.clone(), r.refused))
        .collect();
    assert_eq!(
        patches,
        vec![
            (name_of(&sets["subset-a"]), Some(409)),
            (name_of(&sets["subset-b"]), None)
        ]
    );
    assert!(
        !bench.events().iter().any(|e| e.0 == "FailedUpdateSubset"),
        "no Warning for a race: {:?}",
        bench.events()
    );
    assert_ne!(
        condition(&bench.status(), "SubsetUpdated").map(|c| c.0),
        Some("False".to_owned())
    );

    bench.converge().await;
    let images: Vec<String> = shapes(&bench.clonesets().await)
        .into_values()
        .map(|(_, _, image)| image)
        .collect();
    assert_eq!(images, ["app:2", "app:2"]);
}

#[tokio::test]
async fn a_refused_subset_update_is_told_and_stops_the_other_updates() {
    for code in [422, 500] {
        let mut bench = Bench::new();
        bench.converge().await;
        let sets = bench.clonesets().await;
        bench
            .edit(
                json!({"spec": {"template": {"cloneSetTemplate": {"spec": {"template": {
                "spec": {"containers": [{"name": "app", "image": "app:2"}]}}}}}}}),
            )
            .await;
        bench
            .cluster
            .fail_next(Verb::Patch, &name_of(&sets["subset-a"]), code);
        let ctx = bench.mirror().await;

        let (result, writes) = bench.reconcile(&ctx).await;

        let error = result.expect_err("a refused update fails the reconcile");
        assert!(!error.is_race(), "{code}: {error}");
        // One at a time: the first refusal stops the others.
        let patches: Vec<(String, Option<u16>)> = writes
            .iter()
            .filter(|r| r.kind == "CloneSet")
            .map(|r| (r.name.clone(), r.refused))
            .collect();
        assert_eq!(
            patches,
            vec![(name_of(&sets["subset-a"]), Some(code))],
            "{code}"
        );
        let events = bench.events();
        let last = events.last().cloned().unwrap_or_default();
        assert_eq!(last.0, "FailedUpdateSubset", "{code}");
        assert!(
            last.1.starts_with(&format!(
                "Error updating PodSet (CloneSet) {} when updating: ",
                name_of(&sets["subset-a"])
            )),
            "{code}: {last:?}"
        );
        let status = bench.status();
        assert_eq!(
            condition(&status, "SubsetUpdated").map(|c| c.0),
            Some("False".to_owned()),
            "{code}"
        );

        // Tried again, both are updated.
        bench.converge().await;
        let images: Vec<String> = shapes(&bench.clonesets().await)
            .into_values()
            .map(|(_, _, image)| image)
            .collect();
        assert_eq!(images, ["app:2", "app:2"], "{code}");
        assert_eq!(
            condition(&bench.status(), "SubsetUpdated"),
            Some(("True".into(), String::new())),
            "{code}"
        );
    }
}

#[tokio::test]
async fn a_new_revision_becomes_current_once_its_pods_are_updated_and_ready() {
    let mut bench = Bench::new();
    bench.converge().await;
    let old = bench.status().updated_revision;
    bench
        .run_pods(&old, &[("subset-a", 2, 2), ("subset-b", 3, 3)])
        .await;
    bench.converge().await;

    // A new image: the subsets are updated, their Pods still run the old revision.
    bench
        .edit(
            json!({"spec": {"template": {"cloneSetTemplate": {"spec": {"template": {"spec": {
            "containers": [{"name": "app", "image": "app:2"}]}}}}}}}),
        )
        .await;
    bench.converge().await;
    let status = bench.status();
    let new = status.updated_revision.clone();
    assert_ne!(new, old);
    assert_eq!(status.current_revision, old, "no Pod runs {new} yet");
    assert_eq!(
        (status.updated_replicas, status.updated_ready_replicas),
        (0, 0)
    );
    assert_eq!(status.observed_generation, 2);
    assert_eq!(
        condition(&status, "UnitedDeploymentUpdated"),
        Some(("False".into(), "UnitedDeploymentRevisionUpdating".into()))
    );
    assert_eq!(
        condition(&status, "Progressing"),
        Some(("True".into(), "RevisionUpdating".into()))
    );

    // Part of the Pods updated: still not current.
    bench.run_pods(&new, &[("subset-a", 2, 2)]).await;
    bench.converge().await;
    let status = bench.status();
    assert_eq!(
        (status.updated_replicas, status.updated_ready_replicas),
        (2, 2)
    );
    assert_eq!(status.current_revision, old);

    // Every Pod updated and Ready: the new revision is current.
    bench.run_pods(&new, &[("subset-b", 3, 3)]).await;
    bench.converge().await;
    let status = bench.status();
    assert_eq!(
        (
            status.current_revision.as_str(),
            status.updated_revision.as_str()
        ),
        (new.as_str(), new.as_str())
    );
    assert_eq!(
        condition(&status, "UnitedDeploymentUpdated"),
        Some(("True".into(), "UnitedDeploymentRevisionUpdated".into()))
    );
    assert_eq!(
        condition(&status, "Progressing"),
        Some(("True".into(), "NewRevisionAvailable".into()))
    );
}

/// Three subsets, the update of the second refused: the code updates one subset at a time and
/// stops at the first refusal, so the third waits for the next reconcile. (OpenKruise v1.9.0's
/// `SlowStartBatch(…, 1, …)` updates in batches of 1, 2, 4, … in parallel: the second and the
/// third would be tried together.)
#[tokio::test]
async fn an_update_refused_on_the_second_subset_leaves_the_third_for_the_next_reconcile() {
    let mut ud = serde_json::to_value(united_deployment()).expect("JSON");
    ud["spec"]["replicas"] = json!(6);
    ud["spec"]["topology"]["subsets"] = json!([
        {"name": "subset-a", "nodeSelectorTerm": {"matchExpressions": [zone("a")]}},
        {"name": "subset-b", "nodeSelectorTerm": {"matchExpressions": [zone("b")]}},
        {"name": "subset-c", "nodeSelectorTerm": {"matchExpressions": [zone("c")]}},
    ]);
    let mut bench = Bench::with(&serde_json::from_value(ud).expect("a UnitedDeployment"));
    bench.converge().await;
    let sets = bench.clonesets().await;
    assert_eq!(sets.len(), 3);
    bench
        .edit(
            json!({"spec": {"template": {"cloneSetTemplate": {"spec": {"template": {"spec": {
            "containers": [{"name": "app", "image": "app:2"}]}}}}}}}),
        )
        .await;
    bench
        .cluster
        .fail_next(Verb::Patch, &name_of(&sets["subset-b"]), 500);
    let ctx = bench.mirror().await;

    let (result, writes) = bench.reconcile(&ctx).await;

    result.expect_err("a refused update fails the reconcile");
    let patches: Vec<(String, Option<u16>)> = writes
        .iter()
        .filter(|r| r.kind == "CloneSet")
        .map(|r| (r.name.clone(), r.refused))
        .collect();
    assert_eq!(
        patches,
        vec![
            (name_of(&sets["subset-a"]), None),
            (name_of(&sets["subset-b"]), Some(500)),
        ]
    );
    let images: Vec<String> = shapes(&bench.clonesets().await)
        .into_values()
        .map(|(_, _, image)| image)
        .collect();
    assert_eq!(images, ["app:2", "app:1", "app:1"]);
}
