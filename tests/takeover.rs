//! Taking over a cluster from OpenKruise v1.9 (issue 14, item 5). The objects an OpenKruise manager wrote
//! (`tests/fixtures/openkruise-v1.9`: CloneSets, an Advanced StatefulSet, an Advanced DaemonSet, a
//! UnitedDeployment with its subset CloneSets, a SidecarSet with injected Pods, their ControllerRevisions
//! and Pods, labels and annotations exactly as OpenKruise left them) are loaded into a cluster whose
//! CloneSet and UnitedDeployment CRDs are OpenKruise v1.9.0's (served and stored in `v1alpha1` only), with no
//! manager running. Then the switch of docs/migrating-from-openkruise.md: kruise-rs's CRDs replace them
//! (v1beta1 stored, conversion webhook) and kruise-manager starts. After every controller has reconciled
//! and a hold, every Pod is unchanged (UID, resourceVersion, labels, annotations, containers,
//! restartCount), no ControllerRevision was added, the workload statuses are equal, and the manager made
//! no Pod operation. The documented storage migration (replace every object once, then
//! `status.storedVersions: [v1beta1]`) writes no Pod either. Then an image change rolls in place as
//! usual.
//!
//! One test in its own binary: its control plane starts with OpenKruise's CRDs, not kruise-rs's.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, anyhow, ensure};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kruise_e2e::cloneset_kit::{restarts, spec_image, uid};
use kruise_e2e::{is_ready, manager_counts};
use kruise_testkit::manager::NAMESPACE as MANAGER_NAMESPACE;
use kruise_testkit::testbed::crd_dir;
use kruise_testkit::{eventually, testbed_with};
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(120);
/// After every controller reconciled once: long enough for a controller that was going to write to
/// have written (its requeues and the Pods' watch events come within it).
const HOLD: Duration = Duration::from_secs(10);
const NS: &str = "fx";
/// The Pod conditions a kubelet writes; the loader leaves them to the simulated one.
const KUBELET_CONDITIONS: [&str; 5] = [
    "PodScheduled",
    "PodReadyToStartContainers",
    "Initialized",
    "ContainersReady",
    "Ready",
];

fn fixture(file: &str) -> anyhow::Result<Vec<Value>> {
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

/// kruise-rs's CRDs as OpenKruise v1.9.0 ships CloneSet and UnitedDeployment: only `v1alpha1`, stored,
/// no conversion. The other four kinds are the same in both (v1beta1 stored).
fn openkruise_crd_dir() -> PathBuf {
    std::env::temp_dir().join(format!("kruise-takeover-crds-{}", std::process::id()))
}

fn write_openkruise_crds() -> anyhow::Result<()> {
    let dir = openkruise_crd_dir();
    std::fs::create_dir_all(&dir)?;
    for entry in std::fs::read_dir(crd_dir())? {
        let path = entry?.path();
        let text = std::fs::read_to_string(&path)?;
        let mut crd: Value = serde_yaml::from_str(&text)?;
        let kind = crd["spec"]["names"]["kind"].as_str().unwrap_or_default();
        if kind == "CloneSet" || kind == "UnitedDeployment" {
            let versions = crd["spec"]["versions"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|v| v["name"] == "v1alpha1")
                .map(|mut v| {
                    v["storage"] = json!(true);
                    v
                })
                .collect::<Vec<_>>();
            ensure!(versions.len() == 1, "{kind} CRD serves no v1alpha1");
            crd["spec"]["versions"] = Value::Array(versions);
            if let Some(spec) = crd["spec"].as_object_mut() {
                spec.remove("conversion");
            }
        }
        let name = path
            .file_name()
            .ok_or_else(|| anyhow!("CRD file without a name"))?;
        std::fs::write(dir.join(name), serde_yaml::to_string(&crd)?)?;
    }
    Ok(())
}

fn resource(api_version: &str, kind: &str) -> ApiResource {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
}

/// Loads fixture objects as OpenKruise left them, re-pointing owner references at the new UIDs.
struct Loader {
    client: Client,
    /// Fixture UID → UID in this cluster.
    uids: BTreeMap<String, String>,
}

impl Loader {
    /// Creates `object` (without its server-set metadata) and then writes `status`: for a Pod only the
    /// conditions OpenKruise wrote (`InPlaceUpdateReady`, `KruisePodReady`, `SidecarSetUpgradable`; the
    /// simulated kubelet owns the rest), for a workload its status with `observedGeneration` the new
    /// object's generation.
    async fn load(&mut self, object: &Value, namespace: Option<&str>) -> anyhow::Result<()> {
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

/// What a takeover must leave alone, per Pod: UID, resourceVersion, labels, annotations, containers
/// (name → image) and restart counts.
async fn pod_state(pods: &Api<Pod>) -> anyhow::Result<BTreeMap<String, Value>> {
    let mut state = BTreeMap::new();
    for pod in pods.list(&ListParams::default()).await? {
        let spec = pod.spec.as_ref();
        state.insert(
            pod.name_any(),
            json!({
                "uid": pod.metadata.uid,
                "resourceVersion": pod.metadata.resource_version,
                "labels": pod.metadata.labels,
                "annotations": pod.metadata.annotations,
                "containers": spec.map(|s| s.containers.iter()
                    .map(|c| (c.name.clone(), c.image.clone())).collect::<BTreeMap<_, _>>()),
                "restarts": pod.status.as_ref().and_then(|s| s.container_statuses.as_ref()).map(|list| list.iter()
                    .map(|c| (c.name.clone(), c.restart_count)).collect::<BTreeMap<_, _>>()),
            }),
        );
    }
    Ok(state)
}

/// Every ControllerRevision in the namespaces the fixtures use: name → revision number.
async fn revision_state(client: &Client) -> anyhow::Result<BTreeMap<String, i64>> {
    let mut state = BTreeMap::new();
    for ns in [NS, MANAGER_NAMESPACE] {
        let api: Api<ControllerRevision> = Api::namespaced(client.clone(), ns);
        for rev in api.list(&ListParams::default()).await? {
            state.insert(format!("{ns}/{}", rev.name_any()), rev.revision);
        }
    }
    Ok(state)
}

/// `status` without its `conditions`, at any depth.
fn without_conditions(status: Value) -> Value {
    match status {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(k, _)| k != "conditions")
                .map(|(k, v)| (k, without_conditions(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(without_conditions).collect()),
        other => other,
    }
}

/// The workloads' statuses, read in `v1beta1`, conditions aside: OpenKruise left stale `FailedUpdate`
/// conditions behind (see the fixtures' README), and kruise-rs adds its rollout-health conditions
/// (a UnitedDeployment's `Available`/`Progressing` and its subsets' `Updated`, README) — the only
/// status it writes on taking over.
async fn workload_state(client: &Client) -> anyhow::Result<BTreeMap<String, Value>> {
    let mut state = BTreeMap::new();
    for kind in [
        "CloneSet",
        "StatefulSet",
        "DaemonSet",
        "UnitedDeployment",
        "SidecarSet",
    ] {
        let ar = resource("apps.kruise.io/v1beta1", kind);
        let api: Api<DynamicObject> = if kind == "SidecarSet" {
            Api::all_with(client.clone(), &ar)
        } else {
            Api::namespaced_with(client.clone(), NS, &ar)
        };
        for object in api.list(&ListParams::default()).await? {
            state.insert(
                format!("{kind}/{}", object.name_any()),
                without_conditions(object.data["status"].clone()),
            );
        }
    }
    Ok(state)
}

fn diff(before: &BTreeMap<String, Value>, after: &BTreeMap<String, Value>) -> Vec<String> {
    let keys: std::collections::BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    keys.into_iter()
        .filter(|k| before.get(*k) != after.get(*k))
        .map(|k| {
            format!(
                "{k}:\n  before {:?}\n  after  {:?}",
                before.get(k),
                after.get(k)
            )
        })
        .collect()
}

#[tokio::test]
async fn openkruise_objects_are_taken_over_without_touching_a_pod() -> anyhow::Result<()> {
    write_openkruise_crds()?;
    let bed = testbed_with(|options| options.crd_dir = Some(openkruise_crd_dir()));
    let client = bed.plane.client().await?;

    // The namespaces, and the ServiceAccount the Pods name (created by the controller manager).
    for ns in [NS, MANAGER_NAMESPACE] {
        let api: Api<Namespace> = Api::all(client.clone());
        let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
        match api.create(&PostParams::default(), &namespace).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(e) => return Err(e).context(format!("creating namespace {ns}")),
        }
    }
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), NS);
    eventually("ServiceAccount fx/default", TIMEOUT, || async {
        accounts
            .get("default")
            .await
            .map(|_| Some(()))
            .map_err(Into::into)
    })
    .await?;

    // OpenKruise's objects, parents before what they own. The BroadcastJob is left out: it had
    // completed, and its TTL would delete it.
    let mut loader = Loader {
        client: client.clone(),
        uids: BTreeMap::new(),
    };
    for ud in fixture("fx-uniteddeployments.apps.kruise.io.json")? {
        loader.load(&ud, Some(NS)).await?;
    }
    let clonesets = fixture("fx-clonesets.apps.kruise.io.json")?;
    // Top-level CloneSets first, then the UnitedDeployment's subsets.
    for cs in clonesets
        .iter()
        .filter(|c| c["metadata"]["ownerReferences"].is_null())
    {
        loader.load(cs, Some(NS)).await?;
    }
    for cs in clonesets
        .iter()
        .filter(|c| !c["metadata"]["ownerReferences"].is_null())
    {
        loader.load(cs, Some(NS)).await?;
    }
    for file in [
        "fx-statefulsets.apps.kruise.io.json",
        "fx-daemonsets.apps.kruise.io.json",
    ] {
        for set in fixture(file)? {
            loader.load(&set, Some(NS)).await?;
        }
    }
    for ss in fixture("sidecarsets.json")? {
        loader.load(&ss, None).await?;
    }
    for rev in fixture("fx-controllerrevisions.json")? {
        loader.load(&rev, Some(NS)).await?;
    }
    for rev in fixture("kruise-system-controllerrevisions.json")? {
        loader.load(&rev, Some(MANAGER_NAMESPACE)).await?;
    }
    let fixture_pods: Vec<Value> = fixture("fx-pods.json")?
        .into_iter()
        .filter(|p| p["metadata"]["labels"]["broadcastjob-name"].is_null())
        .collect();
    for pod in &fixture_pods {
        loader.load(pod, Some(NS)).await?;
    }

    // The simulated kubelets run them; every Pod Ready (its readiness gates as OpenKruise set them).
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    eventually("the fixture Pods Ready", TIMEOUT, || async {
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
    let pods_before = pod_state(&pods).await?;
    let revisions_before = revision_state(&client).await?;
    let fixture_revisions = fixture("fx-controllerrevisions.json")?.len()
        + fixture("kruise-system-controllerrevisions.json")?.len();
    ensure!(revisions_before.len() == fixture_revisions);

    // The switch: kruise-rs's CRDs replace OpenKruise's, then the manager starts on the objects.
    bed.plane
        .kubectl(&[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            &crd_dir().display().to_string(),
        ])
        .await?;
    let ports = bed.manager();
    let workloads_before = workload_state(&client).await?;
    let controllers = [
        "cloneset-controller",
        "statefulset-controller",
        "daemonset-controller",
        "uniteddeployment-controller",
        "sidecarset-controller",
    ];
    eventually("every controller reconciled", TIMEOUT, || async {
        let reconciles = manager_counts(ports.metrics).await?.reconciles;
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
    .await?;
    tokio::time::sleep(HOLD).await;

    let check = |stage: &'static str| {
        let client = client.clone();
        let pods = pods.clone();
        let pods_before = pods_before.clone();
        let revisions_before = revisions_before.clone();
        let workloads_before = workloads_before.clone();
        async move {
            let changed = diff(&pods_before, &pod_state(&pods).await?);
            ensure!(
                changed.is_empty(),
                "{stage}: Pods changed:\n{}",
                changed.join("\n")
            );
            let revisions = revision_state(&client).await?;
            ensure!(
                revisions == revisions_before,
                "{stage}: ControllerRevisions changed: before {revisions_before:?}, after {revisions:?}"
            );
            let changed = diff(&workloads_before, &workload_state(&client).await?);
            ensure!(
                changed.is_empty(),
                "{stage}: statuses changed:\n{}",
                changed.join("\n")
            );
            let operations = manager_counts(ports.metrics).await?.pod_operations;
            ensure!(
                operations == 0,
                "{stage}: the manager made {operations} Pod operations"
            );
            anyhow::Ok(())
        }
    };
    check("after the takeover").await?;

    // The storage migration of docs/migrating-from-openkruise.md: every CloneSet and UnitedDeployment
    // written once (now stored as v1beta1), then only v1beta1 recorded as stored.
    for (resource, crd) in [
        ("clonesets", "clonesets.apps.kruise.io"),
        ("uniteddeployments", "uniteddeployments.apps.kruise.io"),
    ] {
        // A conflict means a controller wrote the object in between, which stored it anew as well;
        // read and replace again, as a storage migrator does.
        let path = bed.plane.dir().join(format!("{resource}.json"));
        eventually(format!("every {resource} replaced"), TIMEOUT, || async {
            let objects = bed
                .plane
                .kubectl(&["get", resource, "-n", NS, "-o", "json"])
                .await?;
            std::fs::write(&path, objects)?;
            bed.plane
                .kubectl(&["replace", "-f", &path.display().to_string()])
                .await?;
            Ok(Some(()))
        })
        .await?;
        bed.plane
            .kubectl(&[
                "patch",
                "crd",
                crd,
                "--subresource=status",
                "--type=merge",
                "-p",
                r#"{"status":{"storedVersions":["v1beta1"]}}"#,
            ])
            .await?;
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        let stored = crds
            .get(crd)
            .await?
            .status
            .and_then(|s| s.stored_versions)
            .unwrap_or_default();
        ensure!(stored == ["v1beta1"], "{crd} stored versions {stored:?}");
    }
    tokio::time::sleep(HOLD).await;
    check("after the storage migration").await?;

    // And the taken-over CloneSet rolls in place as usual: same Pods, each container restarted once.
    let before: BTreeMap<String, (String, i32)> = pods
        .list(&ListParams::default().labels("app=sample"))
        .await?
        .iter()
        .map(|p| (p.name_any(), (uid(p), restarts(p))))
        .collect();
    ensure!(before.len() == 2, "sample has {} Pods", before.len());
    bed.plane
        .kubectl(&[
            "-n",
            NS,
            "patch",
            "cloneset",
            "sample",
            "--type=json",
            "-p",
            r#"[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"nginx:1.20"}]"#,
        ])
        .await?;
    eventually("sample updated in place", TIMEOUT, || async {
        let now = pods
            .list(&ListParams::default().labels("app=sample"))
            .await?;
        for pod in &now {
            let (old_uid, old_restarts) = before
                .get(&pod.name_any())
                .ok_or_else(|| anyhow!("new Pod {}", pod.name_any()))?;
            ensure!(&uid(pod) == old_uid, "{} was recreated", pod.name_any());
            ensure!(
                spec_image(pod).as_deref() == Some("nginx:1.20")
                    && is_ready(pod)
                    && restarts(pod) == old_restarts + 1,
                "{} not updated yet",
                pod.name_any()
            );
        }
        ensure!(now.items.len() == 2);
        Ok(Some(()))
    })
    .await?;
    Ok(())
}
