//! Loading the objects an OpenKruise v1.9 manager wrote (`tests/fixtures/openkruise-v1.9`) into a cluster
//! under OpenKruise's CRDs, as the takeover tests start from them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, anyhow, ensure};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kruise_testkit::eventually;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::is_ready;

/// The namespace the fixtures' namespaced objects were exported from.
pub const FIXTURE_NS: &str = "fx";

/// The Pod conditions a kubelet writes; the loader leaves them to the simulated one.
const KUBELET_CONDITIONS: [&str; 5] = [
    "PodScheduled",
    "PodReadyToStartContainers",
    "Initialized",
    "ContainersReady",
    "Ready",
];

/// The items of a fixture List file.
pub fn fixture(file: &str) -> anyhow::Result<Vec<Value>> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/openkruise-v1.9")
        .join(file);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let list: Value = serde_json::from_str(&text)?;
    list["items"]
        .as_array()
        .cloned()
        .ok_or_else(|| anyhow!("{file} holds no List"))
}

pub fn resource(api_version: &str, kind: &str) -> ApiResource {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
}

/// Loads fixture objects as OpenKruise left them, re-pointing owner references at the new UIDs.
pub struct Loader {
    pub client: Client,
    /// Fixture UID → UID in this cluster.
    pub uids: BTreeMap<String, String>,
}

impl Loader {
    pub fn new(client: Client) -> Self {
        Self {
            client,
            uids: BTreeMap::new(),
        }
    }

    /// Creates `object` (without its server-set metadata) and then writes `status`: for a Pod only the
    /// conditions OpenKruise wrote (`InPlaceUpdateReady`, `KruisePodReady`, `SidecarSetUpgradable`; the
    /// simulated kubelet owns the rest), for a workload its status with `observedGeneration` the new
    /// object's generation.
    pub async fn load(&mut self, object: &Value, namespace: Option<&str>) -> anyhow::Result<()> {
        let kind = object["kind"].as_str().unwrap_or_default().to_owned();
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let ar = resource(object["apiVersion"].as_str().unwrap_or_default(), &kind);
        let api: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &ar),
            None => Api::all_with(self.client.clone(), &ar),
        };
        let mut body = object.clone();
        let status = body
            .as_object_mut()
            .and_then(|o| o.remove("status"))
            .unwrap_or(Value::Null);
        let old_uid = body["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if let Some(meta) = body["metadata"].as_object_mut() {
            for field in [
                "uid",
                "resourceVersion",
                "creationTimestamp",
                "generation",
                "managedFields",
            ] {
                meta.remove(field);
            }
            match namespace {
                Some(ns) => meta.insert("namespace".into(), json!(ns)),
                None => meta.remove("namespace"),
            };
        }
        for owner in body["metadata"]["ownerReferences"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            let old = owner["uid"].as_str().unwrap_or_default();
            let new = self
                .uids
                .get(old)
                .ok_or_else(|| anyhow!("{kind} {name}: owner {} not loaded yet", owner["name"]))?;
            owner["uid"] = json!(new);
        }
        let created = api
            .create(&PostParams::default(), &serde_json::from_value(body)?)
            .await
            .with_context(|| format!("creating {kind} {name}"))?;
        self.uids.insert(old_uid, created.uid().unwrap_or_default());
        let status = if kind == "Pod" {
            let conditions: Vec<Value> = status["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|c| !KUBELET_CONDITIONS.contains(&c["type"].as_str().unwrap_or_default()))
                .cloned()
                .collect();
            if conditions.is_empty() {
                return Ok(());
            }
            json!({"conditions": conditions})
        } else {
            let mut status = status;
            if status.get("observedGeneration").is_some() {
                status["observedGeneration"] = json!(created.metadata.generation);
            }
            status
        };
        if status.is_null() {
            return Ok(());
        }
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await
        .with_context(|| format!("writing the status of {kind} {name}"))?;
        Ok(())
    }
}

/// Creates `name` unless it exists.
pub async fn ensure_namespace(client: &Client, name: &str) -> anyhow::Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    match api.create(&PostParams::default(), &namespace).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(e) => Err(e).context(format!("creating namespace {name}")),
    }
}

/// The controllers of the kinds [`load_openkruise_objects`] loads (the BroadcastJob's only with
/// `broadcast_job`): what a takeover test waits to have reconciled before it compares.
pub fn fixture_controllers(broadcast_job: bool) -> Vec<&'static str> {
    let mut controllers = vec![
        "cloneset-controller",
        "statefulset-controller",
        "daemonset-controller",
        "uniteddeployment-controller",
        "sidecarset-controller",
    ];
    if broadcast_job {
        controllers.push("broadcastjob-controller");
    }
    controllers
}

/// Loads every fixture of OpenKruise's workloads into `ns` (SidecarSet revisions into `manager_ns`),
/// parents before what they own, and waits until the simulated kubelets run every Pod Ready. The
/// BroadcastJob's Pods are left out (they ran to completion); the BroadcastJob itself only when
/// `broadcast_job`. Returns how many Pods were loaded.
pub async fn load_openkruise_objects(
    client: &Client,
    ns: &str,
    manager_ns: &str,
    broadcast_job: bool,
    timeout: Duration,
) -> anyhow::Result<usize> {
    for namespace in [ns, manager_ns] {
        ensure_namespace(client, namespace).await?;
    }
    // The ServiceAccount the Pods name (created by the controller manager).
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    eventually(format!("ServiceAccount {ns}/default"), timeout, || async {
        accounts
            .get("default")
            .await
            .map(|_| Some(()))
            .map_err(Into::into)
    })
    .await?;
    let mut loader = Loader::new(client.clone());
    for ud in fixture("fx-uniteddeployments.apps.kruise.io.json")? {
        loader.load(&ud, Some(ns)).await?;
    }
    let clonesets = fixture("fx-clonesets.apps.kruise.io.json")?;
    // Top-level CloneSets first, then the UnitedDeployment's subsets.
    let (top, subsets): (Vec<&Value>, Vec<&Value>) = clonesets
        .iter()
        .partition(|c| c["metadata"]["ownerReferences"].is_null());
    for cs in top.into_iter().chain(subsets) {
        loader.load(cs, Some(ns)).await?;
    }
    let mut files = vec![
        "fx-statefulsets.apps.kruise.io.json",
        "fx-daemonsets.apps.kruise.io.json",
    ];
    if broadcast_job {
        files.push("fx-broadcastjobs.apps.kruise.io.json");
    }
    for file in files {
        for set in fixture(file)? {
            loader.load(&set, Some(ns)).await?;
        }
    }
    for ss in fixture("sidecarsets.json")? {
        loader.load(&ss, None).await?;
    }
    for rev in fixture("fx-controllerrevisions.json")? {
        loader.load(&rev, Some(ns)).await?;
    }
    for rev in fixture("kruise-system-controllerrevisions.json")? {
        loader.load(&rev, Some(manager_ns)).await?;
    }
    let fixture_pods: Vec<Value> = fixture("fx-pods.json")?
        .into_iter()
        .filter(|p| p["metadata"]["labels"]["broadcastjob-name"].is_null())
        .collect();
    for pod in &fixture_pods {
        loader.load(pod, Some(ns)).await?;
    }

    // The simulated kubelets run them; every Pod Ready (its readiness gates as OpenKruise set them).
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    eventually("the fixture Pods Ready", timeout, || async {
        let list = pods.list(&ListParams::default()).await?;
        let waiting: Vec<String> = list
            .iter()
            .filter(|p| !is_ready(p))
            .map(|p| p.name_any())
            .collect();
        ensure!(
            list.items.len() == fixture_pods.len() && waiting.is_empty(),
            "{} of {} Pods, not Ready: {waiting:?}",
            list.items.len(),
            fixture_pods.len()
        );
        Ok(Some(()))
    })
    .await?;
    Ok(fixture_pods.len())
}

/// What one `kubectl-kruise` run printed.
#[derive(Debug)]
pub struct Run {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Runs the `kubectl-kruise` binary of this workspace with `args` against the cluster of `kubeconfig`.
pub async fn kubectl_kruise(kubeconfig: &std::path::Path, args: &[&str]) -> anyhow::Result<Run> {
    let binary = kruise_testkit::manager::workspace_binary(
        "kubectl-kruise",
        "KUBECTL_KRUISE_BIN",
        "kubectl-kruise",
    )?;
    // The helm it runs keeps its caches out of the user's home, as the test kit's does.
    let home = std::env::temp_dir().join("kruise-rs-helm-home");
    let output = tokio::process::Command::new(&binary)
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .kill_on_drop(true)
        .output()
        .await
        .with_context(|| format!("running {}", binary.display()))?;
    Ok(Run {
        ok: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
}

/// The `result` of `kubectl kruise takeover -o json`, checked clean: nothing written, deleted or
/// added. Returns (CRDs, objects, Pods, ControllerRevisions) kept.
pub fn clean_result(report: &Value) -> anyhow::Result<(u64, u64, u64, u64)> {
    let result = &report["result"];
    let mut kept = Vec::new();
    for part in ["crds", "objects", "pods", "controllerRevisions"] {
        for how in ["written", "deleted", "added"] {
            let list = result[part][how]
                .as_array()
                .ok_or_else(|| anyhow!("no result.{part}.{how} in {report}"))?;
            ensure!(list.is_empty(), "{part} {how}: {list:?}");
        }
        kept.push(result[part]["kept"].as_u64().unwrap_or_default());
    }
    Ok((kept[0], kept[1], kept[2], kept[3]))
}

/// The last JSON document of `text` (`kubectl kruise takeover -o json` prints the preflight report,
/// then the result).
pub fn last_json(text: &str) -> anyhow::Result<Value> {
    let mut last = None;
    for value in serde_json::Deserializer::from_str(text).into_iter::<Value>() {
        last = Some(value.context("parsing kubectl-kruise's JSON output")?);
    }
    last.ok_or_else(|| anyhow!("no JSON in {text:?}"))
}

/// The first JSON document of `text`: the preflight report `kubectl kruise takeover -o json` prints
/// before its result.
pub fn preflight_report(text: &str) -> anyhow::Result<Value> {
    serde_json::Deserializer::from_str(text)
        .into_iter::<Value>()
        .next()
        .transpose()?
        .context("no preflight report")
}

/// The storage migration of docs/migrating-from-openkruise.md for CloneSet and UnitedDeployment:
/// `version` made their storage version when `switch_storage` (kruise-rs's CRDs store v1beta1), every
/// object rewritten once when `rewrite` (through kruise-rs's conversion webhook where the stored
/// version differs, so its manager must run), then only `version` recorded as stored.
pub async fn migrate_storage(
    plane: &kruise_testkit::control_plane::ControlPlane,
    version: &str,
    switch_storage: bool,
    rewrite: bool,
    timeout: Duration,
) -> anyhow::Result<()> {
    for (resource, crd) in [
        ("clonesets", "clonesets.apps.kruise.io"),
        ("uniteddeployments", "uniteddeployments.apps.kruise.io"),
    ] {
        if switch_storage {
            let storage = |name: &str| name == version;
            let patch = json!([
                {"op": "replace", "path": "/spec/versions/0/storage", "value": storage("v1alpha1")},
                {"op": "replace", "path": "/spec/versions/1/storage", "value": storage("v1beta1")},
            ]);
            plane
                .kubectl(&["patch", "crd", crd, "--type=json", "-p", &patch.to_string()])
                .await?;
        }
        if rewrite {
            // A conflict means a controller wrote the object in between, which stored it anew as
            // well; read and replace again, as a storage migrator does.
            let path = plane.dir().join(format!("{resource}.json"));
            eventually(format!("every {resource} rewritten"), timeout, || async {
                let objects = plane
                    .kubectl(&["get", resource, "-A", "-o", "json"])
                    .await?;
                std::fs::write(&path, objects)?;
                plane
                    .kubectl(&["replace", "-f", &path.display().to_string()])
                    .await?;
                Ok(Some(()))
            })
            .await?;
        }
        let stored = json!({"status": {"storedVersions": [version]}});
        plane
            .kubectl(&[
                "patch",
                "crd",
                crd,
                "--subresource=status",
                "--type=merge",
                "-p",
                &stored.to_string(),
            ])
            .await?;
    }
    Ok(())
}

/// Waits until every one of `controllers` of the manager whose metrics listen on `metrics_port` has
/// reconciled at least once.
pub async fn wait_reconciled(
    metrics_port: u16,
    controllers: &[&str],
    timeout: Duration,
) -> anyhow::Result<()> {
    eventually("every controller reconciled", timeout, || async {
        let reconciles = crate::manager_counts(metrics_port).await?.reconciles;
        let idle: Vec<&str> = controllers
            .iter()
            .copied()
            .filter(|c| reconciles.get(*c).copied().unwrap_or(0) == 0)
            .collect();
        ensure!(
            idle.is_empty(),
            "not reconciled yet: {idle:?} ({reconciles:?})"
        );
        Ok(Some(()))
    })
    .await
}

/// Every CRD and object of OpenKruise's groups by UID; every Pod and ControllerRevision of Kruise
/// workloads by UID and resourceVersion. Objects are read in the version OpenKruise stores them in
/// (`versions`, filled in from the CRDs of the first call), which needs no conversion webhook.
async fn snapshot(
    client: &Client,
    namespace: &str,
    versions: &mut BTreeMap<String, String>,
) -> anyhow::Result<BTreeMap<String, String>> {
    let mut state = BTreeMap::new();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in crds.list(&ListParams::default()).await? {
        let spec = &crd.spec;
        if spec.group != "apps.kruise.io" && spec.group != "policy.kruise.io" {
            continue;
        }
        state.insert(
            format!("crd {}", crd.name_any()),
            crd.uid().unwrap_or_default(),
        );
        let storage = spec
            .versions
            .iter()
            .find(|v| v.storage)
            .map(|v| v.name.clone())
            .unwrap_or_default();
        let version = versions.entry(crd.name_any()).or_insert(storage).clone();
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(&spec.group, &version, &spec.names.kind),
            &spec.names.plural,
        );
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        for object in api.list(&ListParams::default()).await? {
            state.insert(
                format!(
                    "{} {}/{}",
                    spec.names.kind,
                    object.namespace().unwrap_or_default(),
                    object.name_any()
                ),
                object.uid().unwrap_or_default(),
            );
        }
    }
    let kruise_owned =
        |refs: &Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>>| {
            refs.iter()
                .flatten()
                .any(|o| o.api_version.starts_with("apps.kruise.io/"))
        };
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    for mut pod in pods.list(&ListParams::default()).await? {
        // kruise-rs labels the Pods a budget guards `policy.kruise.io/guarded` (once, so that the
        // budget holds while the manager is down): the one write to a Pod a takeover makes. Every
        // other field is compared.
        if let Some(labels) = pod.metadata.labels.as_mut() {
            labels.remove("policy.kruise.io/guarded");
        }
        let kept = serde_json::json!({
            "labels": pod.metadata.labels,
            "annotations": pod.metadata.annotations,
            "ownerReferences": pod.metadata.owner_references,
            "spec": pod.spec,
            "status": pod.status,
        });
        state.insert(
            format!("Pod {namespace}/{}", pod.name_any()),
            format!("{} {kept}", pod.uid().unwrap_or_default()),
        );
    }
    let revisions: Api<ControllerRevision> = Api::all(client.clone());
    for revision in revisions.list(&ListParams::default()).await? {
        if kruise_owned(&revision.metadata.owner_references) {
            state.insert(
                format!(
                    "ControllerRevision {}/{}",
                    revision.namespace().unwrap_or_default(),
                    revision.name_any()
                ),
                format!(
                    "{} {}",
                    revision.uid().unwrap_or_default(),
                    revision.resource_version().unwrap_or_default()
                ),
            );
        }
    }
    Ok(state)
}

/// What differs between two snapshots: (written, deleted, added).
fn differences(
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
) -> (Vec<String>, Vec<String>, Vec<String>) {
    let mut written = Vec::new();
    let mut deleted = Vec::new();
    for (key, value) in before {
        match after.get(key) {
            Some(v) if v == value => {}
            Some(v) if v.split(' ').next() == value.split(' ').next() => written.push(key.clone()),
            _ => deleted.push(key.clone()),
        }
    }
    // The manager keeps one NodePodProbe and NodeImage per Node (as OpenKruise's does): new ones are
    // not a change to what was there.
    let per_node = |k: &str| k.starts_with("NodePodProbe ") || k.starts_with("NodeImage ");
    let added = after
        .keys()
        .filter(|k| !before.contains_key(*k) && !per_node(k))
        .cloned()
        .collect();
    (written, deleted, added)
}

/// What a takeover must keep: recorded once, compared at every stage after.
pub struct Kept {
    namespace: String,
    state: BTreeMap<String, String>,
    /// The version each CRD's objects are read in: the one stored when recorded.
    versions: BTreeMap<String, String>,
}

impl Kept {
    /// Every CRD and object of OpenKruise's groups, every Pod of `namespace` and every
    /// ControllerRevision of Kruise workloads, as they are now.
    pub async fn record(client: &Client, namespace: &str) -> anyhow::Result<Self> {
        let mut versions = BTreeMap::new();
        let state = snapshot(client, namespace, &mut versions).await?;
        Ok(Self {
            namespace: namespace.to_string(),
            state,
            versions,
        })
    }

    /// Records one more object (`"<Kind> <namespace>/<name>"` → its UID) created after [`Kept::record`].
    pub fn keep(&mut self, key: String, uid: String) {
        self.state.insert(key, uid);
    }

    /// How many objects were recorded.
    pub fn len(&self) -> usize {
        self.state.len()
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.state.is_empty()
    }

    /// Fails, naming them, if any object recorded was written or deleted or any was added since.
    pub async fn ensure_unchanged(&mut self, client: &Client, stage: &str) -> anyhow::Result<()> {
        let after = snapshot(client, &self.namespace, &mut self.versions).await?;
        let before = &self.state;
        let (written, deleted, added) = differences(before, &after);
        let count = |prefix: &str| before.keys().filter(|k| k.starts_with(prefix)).count();
        eprintln!(
            "{stage}: kept {} of {} (CRDs {}, Pods {}, ControllerRevisions {}); written {}, deleted {}, added {}",
            before.len() - written.len() - deleted.len(),
            before.len(),
            count("crd "),
            count("Pod "),
            count("ControllerRevision "),
            written.len(),
            deleted.len(),
            added.len()
        );
        let contents: Vec<String> = written
            .iter()
            .map(|key| {
                let show =
                    |state: &BTreeMap<String, String>| state.get(key).cloned().unwrap_or_default();
                format!(
                    "{key}\n  before {}\n  after  {}",
                    show(before),
                    show(&after)
                )
            })
            .collect();
        ensure!(
            written.is_empty() && deleted.is_empty() && added.is_empty(),
            "{stage}: written {written:?}, deleted {deleted:?}, added {added:?}\n{}",
            contents.join("\n")
        );
        Ok(())
    }
}
