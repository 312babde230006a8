//! Taking over a cluster from OpenKruise v1.9 (issue 14, item 5). The objects an OpenKruise manager wrote
//! (`tests/fixtures/openkruise-v1.9`: CloneSets, an Advanced StatefulSet, an Advanced DaemonSet, a
//! UnitedDeployment with its subset CloneSets, a SidecarSet with injected Pods, their ControllerRevisions
//! and Pods, labels and annotations exactly as OpenKruise left them) are loaded into a cluster whose
//! CloneSet and UnitedDeployment CRDs are OpenKruise v1.9.0's (served and stored in `v1alpha1` only), with no
//! manager running. Then the switch of docs/migrating-from-openkruise.md: `kubectl kruise takeover` (no
//! OpenKruise manager or release here, so as from plain manifests) replaces them with kruise-rs's CRDs
//! (v1beta1 stored, conversion webhook) and finds nothing changed, and kruise-manager starts. After every
//! controller has reconciled and a hold, every Pod is unchanged (UID, resourceVersion, labels,
//! annotations, containers, restartCount), no ControllerRevision was added, the workload statuses are
//! equal, the manager made no Pod operation, and `takeover --verify` agrees. The documented storage
//! migration (replace every object once, then `status.storedVersions: [v1beta1]`) writes no Pod either.
//! Then an image change rolls in place as usual. (`tests/takeover_command.rs` takes over from Helm
//! releases and plain manifests of OpenKruise's chart and goes back.)
//!
//! One test in its own binary: its control plane starts with OpenKruise's CRDs, not kruise-rs's.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, ensure};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kruise_e2e::cloneset_kit::{restarts, spec_image, uid};
use kruise_e2e::takeover_kit::{
    FIXTURE_NS, clean_result, fixture, fixture_controllers, kubectl_kruise, last_json,
    load_openkruise_objects, migrate_storage, resource, wait_reconciled,
};
use kruise_e2e::{is_ready, manager_counts};
use kruise_testkit::manager::NAMESPACE as MANAGER_NAMESPACE;
use kruise_testkit::testbed::crd_dir;
use kruise_testkit::{eventually, testbed_with};
use kube::api::{Api, DynamicObject, ListParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(120);
/// After every controller reconciled once: long enough for a controller that was going to write to
/// have written (its requeues and the Pods' watch events come within it).
const HOLD: Duration = Duration::from_secs(10);
const NS: &str = FIXTURE_NS;

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

    // OpenKruise's objects. The BroadcastJob is left out: it had completed, and its TTL would delete it.
    load_openkruise_objects(&client, NS, MANAGER_NAMESPACE, false, TIMEOUT).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pods_before = pod_state(&pods).await?;
    let revisions_before = revision_state(&client).await?;
    let fixture_revisions = fixture("fx-controllerrevisions.json")?.len()
        + fixture("kruise-system-controllerrevisions.json")?.len();
    ensure!(revisions_before.len() == fixture_revisions);

    // The switch: `kubectl kruise takeover` (no OpenKruise manager or release here: a plain install)
    // replaces OpenKruise's CRDs with kruise-rs's and verifies; then the manager starts on the objects.
    let record = bed.plane.dir().join("takeover-state.json");
    let record = record.display().to_string();
    let kubeconfig = bed.plane.kubeconfig_path();
    let run = kubectl_kruise(
        &kubeconfig,
        &["takeover", "--record", &record, "-o", "json"],
    )
    .await?;
    ensure!(run.ok, "takeover failed: {run:?}");
    let report = last_json(&run.stdout)?;
    let (crds, _, pods_kept, revisions_kept) = clean_result(&report)?;
    ensure!(
        crds as usize == kruise_api::crd::all().len()
            && pods_kept as usize == pods_before.len()
            && revisions_kept as usize == fixture_revisions,
        "takeover kept {crds} CRDs, {pods_kept} Pods, {revisions_kept} revisions: {report}"
    );
    let ports = bed.manager();
    let workloads_before = workload_state(&client).await?;
    wait_reconciled(ports.metrics, &fixture_controllers(false), TIMEOUT).await?;
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
    // The command's own check, against the state it recorded, once the manager has run.
    let run = kubectl_kruise(
        &kubeconfig,
        &["takeover", "--verify", &record, "-o", "json"],
    )
    .await?;
    ensure!(run.ok, "takeover --verify failed: {run:?}");
    clean_result(&last_json(&run.stdout)?)?;

    // The storage migration of docs/migrating-from-openkruise.md: every CloneSet and UnitedDeployment
    // written once (now stored as v1beta1), then only v1beta1 recorded as stored.
    migrate_storage(&bed.plane, "v1beta1", false, true, TIMEOUT).await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in [
        "clonesets.apps.kruise.io",
        "uniteddeployments.apps.kruise.io",
    ] {
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
