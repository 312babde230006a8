//! `kubectl kruise takeover`: switch a cluster from OpenKruise v1.9 to kruise-rs, keeping every CRD and
//! every object whatever OpenKruise was installed with.
//!
//! 1. Preflight (read only): OpenKruise's version (its Helm release's app version, else its manager's
//!    image tag), how it was installed (a Helm release with or without the CRDs in its manifest, or plain
//!    manifests), which of OpenKruise's CRDs hold objects and which of those kinds kruise-rs serves. It
//!    refuses while objects of a kind kruise-rs does not serve exist, unless `--allow-unserved` names
//!    the kind: nothing acts on them after the switch.
//! 2. OpenKruise's release gives up its CRDs and its Namespace before it is removed. `helm uninstall`
//!    decides what to keep from the manifest stored in the release, not from the live objects, so the
//!    live objects are annotated `helm.sh/resource-policy: keep` and the release is upgraded to its own
//!    stored manifest without them (Helm's upgrade reads the keep policy of the live object it would
//!    delete); only once the release owns none of them is it uninstalled, without hooks (OpenKruise's
//!    chart has a pre-delete hook that refuses while workloads exist). A plain install's manager,
//!    daemon, webhook configurations, webhook Service and Secret are deleted.
//! 3. kruise-rs's CRDs (the copies built into this binary, or `--crds DIR`) replace the ones it serves,
//!    by server-side apply with forced conflicts; the other CRDs stay as they are.
//! 4. Verification: every CRD and object still there (same UIDs), every Pod of a Kruise workload with the
//!    same UID and resourceVersion, no ControllerRevision added or removed, the workloads' statuses
//!    unchanged. `--record FILE` keeps the state so that `--verify FILE` compares again once kruise-rs's
//!    manager has run.
//!
//! Installing kruise-rs's own chart stays with the user (`helm install kruise-rs charts/kruise-rs`): its
//! CRDs are already in place then, and Helm leaves existing CRDs alone.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, anyhow, bail, ensure};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::{Client, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::cluster::{FIELD_MANAGER, Flags};
use crate::output::{Output, print_value};

/// The API groups of OpenKruise's CRDs.
pub const OPENKRUISE_GROUPS: [&str; 2] = ["apps.kruise.io", "policy.kruise.io"];
/// The annotation that makes Helm leave an object in place when a release stops rendering it.
const RESOURCE_POLICY: &str = "helm.sh/resource-policy";
/// Helm's ownership annotations on every object of a release.
const HELM_RELEASE_NAME: &str = "meta.helm.sh/release-name";
const HELM_RELEASE_NAMESPACE: &str = "meta.helm.sh/release-namespace";
/// OpenKruise's manager Deployment and daemon DaemonSet.
const MANAGER: &str = "kruise-controller-manager";
const DAEMON: &str = "kruise-daemon";
/// What a SidecarSet writes on a Pod it injected.
const SIDECARSET_HASH: &str = "kruise.io/sidecarset-hash";

#[derive(clap::Args, Debug)]
pub struct Options {
    /// The Helm release OpenKruise was installed with (none: plain manifests).
    #[arg(long)]
    pub helm_release: Option<String>,
    /// The namespace of that release.
    #[arg(long, default_value = "default")]
    pub helm_namespace: String,
    /// The namespace of OpenKruise's manager.
    #[arg(long, default_value = "kruise-system")]
    pub kruise_namespace: String,
    /// Kinds kruise-rs does not serve whose objects may stay without a controller (comma separated:
    /// kind, plural or plural.group).
    #[arg(long, value_delimiter = ',')]
    pub allow_unserved: Vec<String>,
    /// kruise-rs's CRDs to install (default: the copies built into this binary).
    #[arg(long)]
    pub crds: Option<PathBuf>,
    /// The helm binary.
    #[arg(long, default_value = "helm")]
    pub helm: PathBuf,
    /// Check and print the steps, change nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[arg(short = 'o', long)]
    pub output: Option<Output>,
    /// Write the state before the switch (objects, Pods, ControllerRevisions) to this file.
    #[arg(long)]
    pub record: Option<PathBuf>,
    /// Only compare the cluster with a state written by --record.
    #[arg(long, conflicts_with_all = ["dry_run", "record", "helm_release"])]
    pub verify: Option<PathBuf>,
    /// Give up when a wait takes longer than this.
    #[arg(long, default_value = "5m", value_parser = crate::status::parse_duration)]
    pub timeout: Duration,
}

/// One object, as the refusal lists it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ObjectRef {
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
}

impl std::fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// One of OpenKruise's CRDs and the objects it holds.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KindInventory {
    pub kind: String,
    pub group: String,
    pub plural: String,
    /// The version objects are read in: the CRD's storage version before the switch.
    pub version: String,
    pub namespaced: bool,
    pub served_by_kruise_rs: bool,
    #[serde(skip)]
    pub objects: Vec<ObjectRef>,
    #[serde(rename = "objects")]
    pub count: usize,
}

/// Whether kruise-rs serves objects of `group`/`kind` (a line of `kruise_api::crd::SERVED`).
pub fn served(group: &str, kind: &str) -> bool {
    kruise_api::crd::served(group, kind)
}

/// Whether an `--allow-unserved` entry names `kind`: its kind, plural, or `plural.group`, in any case.
fn names_kind(entry: &str, kind: &KindInventory) -> bool {
    let entry = entry.trim().to_ascii_lowercase();
    entry == kind.kind.to_ascii_lowercase()
        || entry == kind.plural
        || entry == format!("{}.{}", kind.plural, kind.group)
}

/// The objects the switch refuses to leave without a controller: those of unserved kinds that no
/// `--allow-unserved` entry names. Entries that name none of OpenKruise's kinds are an error (a typo
/// would otherwise let the switch go on silently).
pub fn refused(inventory: &[KindInventory], allow: &[String]) -> anyhow::Result<Vec<ObjectRef>> {
    let unknown: Vec<&String> = allow
        .iter()
        .filter(|entry| !inventory.iter().any(|k| names_kind(entry, k)))
        .collect();
    ensure!(
        unknown.is_empty(),
        "--allow-unserved names no OpenKruise kind installed here: {unknown:?}"
    );
    Ok(inventory
        .iter()
        .filter(|k| !k.served_by_kruise_rs && !allow.iter().any(|e| names_kind(e, k)))
        .flat_map(|k| k.objects.iter().cloned())
        .collect())
}

/// What OpenKruise was installed with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InstallMethod {
    /// A Helm release; `taken_out` are the objects of its manifest that must outlive it (CRDs and
    /// Namespaces), as `Kind/name`.
    Helm {
        release: String,
        namespace: String,
        chart: String,
        taken_out: Vec<String>,
    },
    Plain,
}

impl InstallMethod {
    fn describe(&self) -> String {
        match self {
            InstallMethod::Helm {
                release,
                namespace,
                chart,
                taken_out,
            } => {
                let crds = taken_out
                    .iter()
                    .filter(|o| o.starts_with("CustomResourceDefinition/"))
                    .count();
                let where_crds = if crds > 0 {
                    format!("{crds} CRDs rendered as templates of the release")
                } else {
                    "the CRDs outside the release".into()
                };
                format!("Helm release {namespace}/{release} (chart {chart}), {where_crds}")
            }
            InstallMethod::Plain => "plain manifests".into(),
        }
    }
}

/// The documents of a release manifest split into those the release keeps rendering and those it
/// must give up (CRDs and Namespaces, as `Kind/name`): deleting a CRD deletes every object of it, and
/// deleting a Namespace everything in it (OpenKruise keeps SidecarSet revisions in its own).
pub fn split_release(documents: Vec<Value>) -> (Vec<Value>, Vec<String>) {
    let mut kept = Vec::new();
    let mut taken_out = Vec::new();
    for document in documents {
        let kind = document["kind"].as_str().unwrap_or_default();
        if kind == "CustomResourceDefinition" || kind == "Namespace" {
            taken_out.push(format!(
                "{kind}/{}",
                document["metadata"]["name"].as_str().unwrap_or_default()
            ));
        } else {
            kept.push(document);
        }
    }
    (kept, taken_out)
}

/// The Helm releases among `owners` (named by the ownership annotations of OpenKruise's CRDs and
/// manager) other than `given`: each must no longer exist, or it would delete what it owns later.
pub fn other_releases(
    owners: &BTreeSet<(String, String)>,
    given: Option<&(String, String)>,
) -> Vec<(String, String)> {
    owners
        .iter()
        .filter(|owner| Some(*owner) != given)
        .cloned()
        .collect()
}

/// `kruise-1.9.0` → (`kruise`, `1.9.0`): Helm lists a release's chart as name-version.
fn chart_name_version(chart: &str) -> (String, String) {
    let split = chart
        .match_indices('-')
        .map(|(i, _)| i)
        .find(|&i| chart[i + 1..].starts_with(|c: char| c.is_ascii_digit()));
    match split {
        Some(i) => (chart[..i].to_owned(), chart[i + 1..].to_owned()),
        None => ("openkruise".into(), "0.0.0".into()),
    }
}

/// What the switch must leave as it was: per object, Pod and ControllerRevision its UID and
/// resourceVersion, per workload kruise-rs serves its status (conditions aside: kruise-rs adds its
/// rollout-health conditions).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct State {
    pub crds: BTreeSet<String>,
    /// CRD name → the version its objects are read in.
    pub versions: BTreeMap<String, String>,
    pub objects: BTreeMap<String, Tracked>,
    pub pods: BTreeMap<String, Tracked>,
    #[serde(rename = "controllerRevisions")]
    pub revisions: BTreeMap<String, Tracked>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Tracked {
    pub uid: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Value>,
}

/// Kept / written / deleted / added, per sort of object.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Tally {
    pub kept: usize,
    pub written: Vec<String>,
    pub deleted: Vec<String>,
    pub added: Vec<String>,
}

impl Tally {
    fn clean(&self) -> bool {
        self.written.is_empty() && self.deleted.is_empty() && self.added.is_empty()
    }

    fn line(&self, what: &str) -> String {
        format!(
            "{what}: {} kept, {} written, {} deleted, {} added",
            self.kept,
            self.written.len(),
            self.deleted.len(),
            self.added.len()
        )
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Comparison {
    pub crds: Tally,
    /// `written`: a workload whose status changed.
    pub objects: Tally,
    /// `written`: a Pod whose resourceVersion changed.
    pub pods: Tally,
    pub controller_revisions: Tally,
    /// Per workload whose status changed: the status before and after (conditions aside).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub status_changes: BTreeMap<String, Value>,
}

impl Comparison {
    pub fn clean(&self) -> bool {
        self.crds.clean()
            && self.objects.clean()
            && self.pods.clean()
            && self.controller_revisions.clean()
    }
}

/// `before` against `after`: an entry is kept when its UID is the same and, where recorded, its
/// resourceVersion and status too; written when only those differ; deleted when it is gone or has
/// another UID; added when it is new.
fn tally(before: &BTreeMap<String, Tracked>, after: &BTreeMap<String, Tracked>) -> Tally {
    let mut tally = Tally::default();
    for (key, old) in before {
        match after.get(key) {
            Some(new) if new.uid == old.uid => {
                if new.resource_version == old.resource_version && new.status == old.status {
                    tally.kept += 1;
                } else {
                    tally.written.push(key.clone());
                }
            }
            _ => tally.deleted.push(key.clone()),
        }
    }
    tally.added = after
        .keys()
        .filter(|k| !before.contains_key(*k))
        .cloned()
        .collect();
    tally
}

/// `state` without the objects' resourceVersions (their UIDs and statuses still compared).
fn without_object_versions(mut state: State) -> State {
    for object in state.objects.values_mut() {
        object.resource_version = None;
    }
    state
}

/// The kinds whose objects the manager keeps one per Node (OpenKruise's manager as well): they come
/// and go with the Nodes, so a new one is not a change made to what was there.
const PER_NODE_KINDS: &[&str] = &["NodePodProbe", "NodeImage"];

fn per_node(key: &str) -> bool {
    key.split_once(' ')
        .is_some_and(|(kind, _)| PER_NODE_KINDS.contains(&kind))
}

pub fn compare(before: &State, after: &State) -> Comparison {
    let crds = |s: &State| -> BTreeMap<String, Tracked> {
        s.crds
            .iter()
            .map(|name| (name.clone(), Tracked::default()))
            .collect()
    };
    let mut crd_tally = tally(&crds(before), &crds(after));
    // A CRD installed by the switch (none of OpenKruise's) is not a change of what was there.
    crd_tally.added.clear();
    let mut objects = tally(&before.objects, &after.objects);
    objects.added.retain(|key| !per_node(key));
    let status_changes = objects
        .written
        .iter()
        .map(|key| {
            let status = |s: &State| s.objects.get(key).and_then(|o| o.status.clone());
            (
                key.clone(),
                json!({"before": status(before), "after": status(after)}),
            )
        })
        .collect();
    Comparison {
        crds: crd_tally,
        objects,
        status_changes,
        pods: tally(&before.pods, &after.pods),
        controller_revisions: tally(&before.revisions, &after.revisions),
    }
}

/// Status fields left out of the comparison, at any depth: `conditions` (kruise-rs adds its
/// rollout-health conditions) and `lastProbeTime` (a NodePodProbe's heartbeat: a node agent that
/// starts, OpenKruise's after an upgrade as kruise-rs's after a takeover, writes its first result of
/// each probe with a new time even when the state is the same, and again every ten minutes).
const UNCOMPARED_STATUS_FIELDS: [&str; 2] = ["conditions", "lastProbeTime"];

/// `status` as compared: without [`UNCOMPARED_STATUS_FIELDS`] and without zero values (0, false, "",
/// empty lists and maps), at any depth: Go's `omitempty` leaves out a zero that kruise-rs may write,
/// and both read the same.
fn comparable_status(status: Value) -> Value {
    match status {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(k, _)| !UNCOMPARED_STATUS_FIELDS.contains(&k.as_str()))
                .map(|(k, v)| (k, comparable_status(v)))
                .filter(|(_, v)| !is_zero(v))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(comparable_status).collect()),
        other => other,
    }
}

fn is_zero(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

fn owned_by_kruise(
    refs: Option<&Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>>,
) -> bool {
    refs.into_iter()
        .flatten()
        .any(|o| o.api_version.starts_with("apps.kruise.io/"))
}

/// Lists OpenKruise's CRDs, their objects and the Pods and ControllerRevisions of Kruise workloads.
/// `versions` fixes the version each CRD's objects are read in (the recorded state's), else the CRD's
/// storage version.
async fn survey(
    client: &Client,
    versions: Option<&BTreeMap<String, String>>,
) -> anyhow::Result<(Vec<KindInventory>, State, BTreeSet<(String, String)>)> {
    let mut state = State::default();
    // The Helm releases (name, namespace) the CRDs' ownership annotations name.
    let mut owners = BTreeSet::new();
    let mut inventory = Vec::new();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in crds
        .list(&ListParams::default())
        .await
        .context("listing CRDs")?
    {
        let spec = &crd.spec;
        if !OPENKRUISE_GROUPS.contains(&spec.group.as_str()) {
            continue;
        }
        let name = crd.name_any();
        let annotations = crd.annotations();
        if let (Some(release), Some(namespace)) = (
            annotations.get(HELM_RELEASE_NAME),
            annotations.get(HELM_RELEASE_NAMESPACE),
        ) {
            owners.insert((release.clone(), namespace.clone()));
        }
        let version = match versions.and_then(|v| v.get(&name)) {
            Some(v) => v.clone(),
            None => spec
                .versions
                .iter()
                .find(|v| v.storage)
                .map(|v| v.name.clone())
                .ok_or_else(|| anyhow!("CRD {name} has no storage version"))?,
        };
        let kind = spec.names.kind.clone();
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(&spec.group, &version, &kind),
            &spec.names.plural,
        );
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let listed = api
            .list(&ListParams::default())
            .await
            .with_context(|| format!("listing {}.{} ({version})", spec.names.plural, spec.group))?;
        let is_served = served(&spec.group, &kind);
        let mut objects = Vec::new();
        for object in listed {
            let reference = ObjectRef {
                kind: kind.clone(),
                namespace: object.namespace(),
                name: object.name_any(),
            };
            let status = is_served.then(|| {
                comparable_status(object.data.get("status").cloned().unwrap_or(Value::Null))
            });
            state.objects.insert(
                reference.to_string(),
                Tracked {
                    uid: object.uid().unwrap_or_default(),
                    resource_version: object.resource_version(),
                    status,
                },
            );
            objects.push(reference);
        }
        objects.sort();
        state.crds.insert(name.clone());
        state.versions.insert(name, version.clone());
        inventory.push(KindInventory {
            kind,
            group: spec.group.clone(),
            plural: spec.names.plural.clone(),
            version,
            namespaced: spec.scope == "Namespaced",
            served_by_kruise_rs: is_served,
            count: objects.len(),
            objects,
        });
    }
    inventory.sort_by(|a, b| (&a.group, &a.kind).cmp(&(&b.group, &b.kind)));

    let pods: Api<Pod> = Api::all(client.clone());
    for pod in pods
        .list(&ListParams::default())
        .await
        .context("listing Pods")?
    {
        let injected = pod.annotations().contains_key(SIDECARSET_HASH);
        if !injected && !owned_by_kruise(pod.metadata.owner_references.as_ref()) {
            continue;
        }
        // Compared by content, not resourceVersion: kruise-rs labels the Pods a
        // PodUnavailableBudget guards `policy.kruise.io/guarded` (so the budget holds while the
        // manager is down), the one write a takeover makes to a Pod; every other field counts.
        let mut labels = pod.metadata.labels.clone().unwrap_or_default();
        labels.remove(kruise_api::policy::POD_GUARDED_LABEL);
        let content = serde_json::json!({
            "labels": labels,
            "annotations": pod.metadata.annotations,
            "ownerReferences": pod.metadata.owner_references,
            "spec": pod.spec,
            "status": pod.status,
        });
        state.pods.insert(
            format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any()),
            Tracked {
                uid: pod.uid().unwrap_or_default(),
                resource_version: None,
                status: Some(content),
            },
        );
    }
    let revisions: Api<ControllerRevision> = Api::all(client.clone());
    for revision in revisions
        .list(&ListParams::default())
        .await
        .context("listing ControllerRevisions")?
    {
        if !owned_by_kruise(revision.metadata.owner_references.as_ref()) {
            continue;
        }
        state.revisions.insert(
            format!(
                "{}/{}",
                revision.namespace().unwrap_or_default(),
                revision.name_any()
            ),
            Tracked {
                uid: revision.uid().unwrap_or_default(),
                resource_version: revision.resource_version(),
                status: None,
            },
        );
    }
    Ok((inventory, state, owners))
}

/// Runs helm with the plugin's connection flags.
struct Helm<'a> {
    binary: &'a Path,
    flags: &'a Flags,
}

impl Helm<'_> {
    fn run(&self, args: &[&str]) -> anyhow::Result<String> {
        let mut command = Command::new(self.binary);
        command.args(args);
        if let Some(kubeconfig) = &self.flags.kubeconfig {
            command.arg("--kubeconfig").arg(kubeconfig);
        }
        if let Some(context) = &self.flags.context {
            command.args(["--kube-context", context]);
        }
        let output = command
            .output()
            .with_context(|| format!("running {} (set --helm)", self.binary.display()))?;
        ensure!(
            output.status.success(),
            "helm {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        );
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    fn manifest(&self, release: &str, namespace: &str) -> anyhow::Result<Vec<Value>> {
        let text = self.run(&["get", "manifest", release, "--namespace", namespace])?;
        yaml_documents(&text)
    }

    /// The release's entry of `helm list` (in any state), if it is installed.
    fn release(&self, release: &str, namespace: &str) -> anyhow::Result<Option<Value>> {
        let filter = format!("^{release}$");
        let text = self.run(&[
            "list",
            "--namespace",
            namespace,
            "--filter",
            &filter,
            "--all",
            "-o",
            "json",
        ])?;
        let list: Value = serde_json::from_str(&text).context("reading helm list")?;
        Ok(list.as_array().and_then(|l| l.first()).cloned())
    }

    /// Whether the release is installed (in any state).
    fn release_exists(&self, release: &str, namespace: &str) -> anyhow::Result<bool> {
        Ok(self.release(release, namespace)?.is_some())
    }

    /// The release's chart as `name-version` and its app version.
    fn chart(&self, release: &str, namespace: &str) -> anyhow::Result<(String, String)> {
        let entry = self
            .release(release, namespace)?
            .ok_or_else(|| anyhow!("no Helm release {namespace}/{release}"))?;
        Ok((
            entry["chart"].as_str().unwrap_or_default().to_owned(),
            entry["app_version"].as_str().unwrap_or_default().to_owned(),
        ))
    }
}

/// The documents of a multi-document YAML stream (empty ones dropped).
pub fn yaml_documents(text: &str) -> anyhow::Result<Vec<Value>> {
    let mut documents = Vec::new();
    for document in serde_yaml::Deserializer::from_str(text) {
        let value = Value::deserialize(document).context("parsing YAML")?;
        if !value.is_null() {
            documents.push(value);
        }
    }
    Ok(documents)
}

/// kruise-rs's CRDs: the copies built into this binary, or those of `dir`.
fn kruise_rs_crds(dir: Option<&Path>) -> anyhow::Result<Vec<Value>> {
    let Some(dir) = dir else {
        return kruise_api::crd::all()
            .into_iter()
            .map(|crd| serde_json::to_value(crd).context("encoding a CRD"))
            .collect();
    };
    let mut crds = Vec::new();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.extension()
                .is_some_and(|x| x == "yaml" || x == "yml" || x == "json")
        })
        .collect();
    paths.sort();
    for path in paths {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        for document in yaml_documents(&text)? {
            if document["kind"] == "CustomResourceDefinition" {
                crds.push(document);
            }
        }
    }
    ensure!(
        !crds.is_empty(),
        "no CustomResourceDefinition in {}",
        dir.display()
    );
    Ok(crds)
}

/// A Helm chart whose only template is `documents` verbatim (read as a file, so nothing in them is
/// taken for template syntax).
fn write_chart(dir: &Path, chart: &str, documents: &[Value]) -> anyhow::Result<()> {
    let (name, version) = chart_name_version(chart);
    std::fs::create_dir_all(dir.join("templates"))?;
    std::fs::write(
        dir.join("Chart.yaml"),
        serde_yaml::to_string(&json!({
            "apiVersion": "v2",
            "name": name,
            "version": version,
            "description": "OpenKruise's release without its CRDs and Namespaces (kubectl kruise takeover)",
        }))?,
    )?;
    let mut manifest = String::new();
    for document in documents {
        manifest.push_str("---\n");
        manifest.push_str(&serde_yaml::to_string(document)?);
    }
    std::fs::write(dir.join("release-manifest.yaml"), manifest)?;
    std::fs::write(
        dir.join("templates/manifest.yaml"),
        "{{ .Files.Get \"release-manifest.yaml\" }}\n",
    )?;
    Ok(())
}

/// What preflight found.
struct Preflight {
    version: Option<String>,
    method: InstallMethod,
    inventory: Vec<KindInventory>,
    refused: Vec<ObjectRef>,
    before: State,
}

async fn preflight(client: &Client, flags: &Flags, opts: &Options) -> anyhow::Result<Preflight> {
    let deployments: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &opts.kruise_namespace,
        &ApiResource::from_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment")),
    );
    let manager = deployments
        .get_opt(MANAGER)
        .await
        .context("reading OpenKruise's manager Deployment")?;
    let image_tag = manager.as_ref().and_then(|d| {
        d.data
            .pointer("/spec/template/spec/containers/0/image")
            .and_then(Value::as_str)
            .and_then(|image| image.rsplit_once(':'))
            .map(|(_, tag)| tag.to_owned())
    });
    let manager_release = manager.as_ref().and_then(|d| {
        let annotations = d.annotations();
        Some((
            annotations.get(HELM_RELEASE_NAME)?.clone(),
            annotations.get(HELM_RELEASE_NAMESPACE)?.clone(),
        ))
    });
    let helm = Helm {
        binary: &opts.helm,
        flags,
    };
    let (method, version) = match &opts.helm_release {
        Some(release) => {
            let namespace = opts.helm_namespace.clone();
            let (chart, app_version) = helm.chart(release, &namespace)?;
            let (_, taken_out) = split_release(helm.manifest(release, &namespace)?);
            let version = if app_version.is_empty() {
                image_tag
            } else {
                Some(app_version)
            };
            (
                InstallMethod::Helm {
                    release: release.clone(),
                    namespace,
                    chart,
                    taken_out,
                },
                version,
            )
        }
        None => (InstallMethod::Plain, image_tag),
    };
    let (inventory, before, mut owners) = survey(client, None).await?;
    owners.extend(manager_release);
    let given = opts
        .helm_release
        .as_ref()
        .map(|r| (r.clone(), opts.helm_namespace.clone()));
    for (release, namespace) in other_releases(&owners, given.as_ref()) {
        let exists = helm.release_exists(&release, &namespace).with_context(|| {
            format!(
                "OpenKruise's CRDs or manager name the Helm release {namespace}/{release}; helm is needed \
                 to check whether it still exists (set --helm)"
            )
        })?;
        ensure!(
            !exists,
            "OpenKruise's CRDs or manager belong to the Helm release {namespace}/{release}: pass \
             --helm-release {release} --helm-namespace {namespace} (left installed, that release would \
             delete them when it is removed)"
        );
    }
    let refused = refused(&inventory, &opts.allow_unserved)?;
    Ok(Preflight {
        version,
        method,
        inventory,
        refused,
        before,
    })
}

fn steps(pre: &Preflight, opts: &Options) -> Vec<String> {
    let ns = &opts.kruise_namespace;
    let mut steps = vec![format!(
        "record the state: {} CRDs, {} objects, {} Pods, {} ControllerRevisions{}",
        pre.before.crds.len(),
        pre.before.objects.len(),
        pre.before.pods.len(),
        pre.before.revisions.len(),
        opts.record
            .as_ref()
            .map(|p| format!(" (written to {})", p.display()))
            .unwrap_or_default()
    )];
    match &pre.method {
        InstallMethod::Helm {
            release,
            namespace,
            taken_out,
            ..
        } => {
            if !taken_out.is_empty() {
                steps.push(format!(
                    "annotate {RESOURCE_POLICY}=keep on the release's {}",
                    taken_out.join(", ")
                ));
                steps.push(format!(
                    "helm upgrade {release} (namespace {namespace}) to its stored manifest without them, without \
                     hooks: Helm keeps the live objects marked keep, and the release owns them no longer"
                ));
            }
            steps.push(format!(
                "helm uninstall {release} (namespace {namespace}) --no-hooks: OpenKruise's manager, daemon, \
                 webhooks and RBAC go"
            ));
        }
        InstallMethod::Plain => steps.push(format!(
            "delete OpenKruise's Deployment {ns}/{MANAGER}, DaemonSet {ns}/{DAEMON}, Service \
             {ns}/kruise-webhook-service, Secret {ns}/kruise-webhook-certs and the webhook configurations \
             kruise-mutating-webhook-configuration and kruise-validating-webhook-configuration"
        )),
    }
    steps.push(format!(
        "wait until no Pod of OpenKruise's manager or daemon runs in {ns}"
    ));
    steps.push(format!(
        "server-side apply kruise-rs's CRDs ({}) with forced conflicts; the other CRDs stay",
        opts.crds
            .as_ref()
            .map(|p| format!("from {}", p.display()))
            .unwrap_or_else(|| "built into this binary".into())
    ));
    steps.push(
        "verify: every CRD and object kept, no Pod written, no ControllerRevision added, statuses unchanged"
            .into(),
    );
    steps
}

fn report(pre: &Preflight, opts: &Options, comparison: Option<&Comparison>) -> Value {
    let mut report = json!({
        "openKruise": {
            "version": pre.version,
            "installedWith": pre.method.describe(),
            "namespace": opts.kruise_namespace,
        },
        "kinds": pre.inventory,
        "refused": pre.refused,
        "steps": steps(pre, opts),
        "dryRun": opts.dry_run,
    });
    if let Some(comparison) = comparison {
        report["result"] = json!(comparison);
    }
    report
}

fn print_text(pre: &Preflight, opts: &Options) {
    println!(
        "OpenKruise {} installed with {}",
        pre.version.as_deref().unwrap_or("(version unknown)"),
        pre.method.describe()
    );
    for kind in &pre.inventory {
        println!(
            "  {:<28} {:>5} objects  {}",
            format!("{}.{}", kind.plural, kind.group),
            kind.count,
            if kind.served_by_kruise_rs {
                "served by kruise-rs"
            } else {
                "NOT served by kruise-rs"
            }
        );
    }
    let verb = if opts.dry_run { "Would" } else { "Steps" };
    println!("{verb}:");
    for (i, step) in steps(pre, opts).iter().enumerate() {
        println!("  {}. {step}", i + 1);
    }
}

fn print_comparison(comparison: &Comparison) {
    println!("{}", comparison.crds.line("CRDs"));
    println!("{}", comparison.objects.line("objects"));
    println!("{}", comparison.pods.line("Pods"));
    println!(
        "{}",
        comparison.controller_revisions.line("ControllerRevisions")
    );
}

fn problems(comparison: &Comparison) -> String {
    let mut lines = Vec::new();
    for (what, tally) in [
        ("CRD", &comparison.crds),
        ("object", &comparison.objects),
        ("Pod", &comparison.pods),
        ("ControllerRevision", &comparison.controller_revisions),
    ] {
        for (how, list) in [
            ("written", &tally.written),
            ("deleted", &tally.deleted),
            ("added", &tally.added),
        ] {
            lines.extend(
                list.iter()
                    .map(|key| match comparison.status_changes.get(key) {
                        Some(change) => format!("  {what} {how}: {key}: status {change}"),
                        None => format!("  {what} {how}: {key}"),
                    }),
            );
        }
    }
    lines.join("\n")
}

fn dynamic(
    client: &Client,
    namespace: Option<&str>,
    gvk: (&str, &str, &str),
) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(gvk.0, gvk.1, gvk.2));
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    }
}

async fn delete_if_present(api: &Api<DynamicObject>, name: &str) -> anyhow::Result<()> {
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("deleting {name}")),
    }
}

/// Takes OpenKruise's Helm release apart keeping its CRDs and Namespaces, then removes it.
async fn leave_helm(
    client: &Client,
    helm: &Helm<'_>,
    release: &str,
    namespace: &str,
    chart: &str,
) -> anyhow::Result<()> {
    let (kept, taken_out) = split_release(helm.manifest(release, namespace)?);
    if !taken_out.is_empty() {
        let keep = json!({"metadata": {"annotations": {RESOURCE_POLICY: "keep"}}});
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        for object in &taken_out {
            let (kind, name) = object.split_once('/').unwrap_or_default();
            let api = if kind == "Namespace" {
                dynamic(client, None, ("", "v1", "Namespace"))
            } else {
                dynamic(
                    client,
                    None,
                    ("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
                )
            };
            api.patch(name, &params, &Patch::Merge(&keep))
                .await
                .with_context(|| format!("annotating {object} {RESOURCE_POLICY}=keep"))?;
        }
        let dir = std::env::temp_dir().join(format!(
            "kubectl-kruise-takeover-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default()
        ));
        write_chart(&dir, chart, &kept)?;
        let upgraded = helm.run(&[
            "upgrade",
            release,
            &dir.display().to_string(),
            "--namespace",
            namespace,
            "--no-hooks",
        ]);
        let _ = std::fs::remove_dir_all(&dir);
        upgraded?;
        let (_, still) = split_release(helm.manifest(release, namespace)?);
        ensure!(
            still.is_empty(),
            "after the upgrade the release still holds {still:?}; it is left installed"
        );
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for object in &taken_out {
            if let Some(name) = object.strip_prefix("CustomResourceDefinition/") {
                ensure!(
                    crds.get_opt(name).await?.is_some(),
                    "CRD {name} is gone after the upgrade"
                );
            }
        }
    }
    helm.run(&["uninstall", release, "--namespace", namespace, "--no-hooks"])?;
    Ok(())
}

/// Deletes a plain install's manager, daemon and the objects kruise-rs's chart installs under the same
/// names.
async fn leave_plain(client: &Client, ns: &str) -> anyhow::Result<()> {
    delete_if_present(
        &dynamic(client, Some(ns), ("apps", "v1", "Deployment")),
        MANAGER,
    )
    .await?;
    delete_if_present(
        &dynamic(client, Some(ns), ("apps", "v1", "DaemonSet")),
        DAEMON,
    )
    .await?;
    delete_if_present(
        &dynamic(client, Some(ns), ("", "v1", "Service")),
        "kruise-webhook-service",
    )
    .await?;
    delete_if_present(
        &dynamic(client, Some(ns), ("", "v1", "Secret")),
        "kruise-webhook-certs",
    )
    .await?;
    for (kind, name) in [
        (
            "MutatingWebhookConfiguration",
            "kruise-mutating-webhook-configuration",
        ),
        (
            "ValidatingWebhookConfiguration",
            "kruise-validating-webhook-configuration",
        ),
    ] {
        delete_if_present(
            &dynamic(client, None, ("admissionregistration.k8s.io", "v1", kind)),
            name,
        )
        .await?;
    }
    Ok(())
}

async fn replace_crds(client: &Client, crds: Vec<Value>, timeout: Duration) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mut names = Vec::new();
    for crd in crds {
        let name = crd["metadata"]["name"]
            .as_str()
            .ok_or_else(|| anyhow!("a CRD without a name"))?
            .to_owned();
        api.patch(&name, &params, &Patch::Apply(&crd))
            .await
            .with_context(|| format!("applying CRD {name}"))?;
        names.push(name);
    }
    crate::cluster::wait("kruise-rs's CRDs Established", timeout, || async {
        for name in &names {
            let crd = api.get(name).await?;
            let established = crd
                .status
                .and_then(|s| s.conditions)
                .into_iter()
                .flatten()
                .any(|c| c.type_ == "Established" && c.status == "True");
            if !established {
                return Ok(false);
            }
        }
        Ok(true)
    })
    .await
}

pub async fn run(client: &Client, flags: &Flags, opts: Options) -> anyhow::Result<()> {
    if let Some(path) = &opts.verify {
        return verify(client, path, opts.output).await;
    }
    let pre = preflight(client, flags, &opts).await?;
    let refusal = (!pre.refused.is_empty()).then(|| {
        let mut kinds: Vec<&str> = pre.refused.iter().map(|o| o.kind.as_str()).collect();
        kinds.dedup();
        format!(
            "refusing to switch: objects of kinds kruise-rs does not serve exist, and nothing would act on \
             them afterwards:\n{}\nName their kinds in --allow-unserved ({}) to switch anyway; they are kept.",
            pre.refused
                .iter()
                .map(|o| format!("  {o}"))
                .collect::<Vec<_>>()
                .join("\n"),
            kinds.join(",")
        )
    });
    match opts.output {
        Some(output) => print_value(&report(&pre, &opts, None), output)?,
        None => print_text(&pre, &opts),
    }
    if let Some(refusal) = refusal {
        bail!(refusal);
    }
    if opts.dry_run {
        return Ok(());
    }
    if let Some(path) = &opts.record {
        std::fs::write(path, serde_json::to_string_pretty(&pre.before)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }

    let helm = Helm {
        binary: &opts.helm,
        flags,
    };
    match &pre.method {
        InstallMethod::Helm {
            release,
            namespace,
            chart,
            ..
        } => leave_helm(client, &helm, release, namespace, chart).await?,
        InstallMethod::Plain => leave_plain(client, &opts.kruise_namespace).await?,
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &opts.kruise_namespace);
    crate::cluster::wait(
        "OpenKruise's manager and daemon stopped",
        opts.timeout,
        || async {
            let running = pods
                .list(&ListParams::default().labels("control-plane in (controller-manager,daemon)"))
                .await?;
            Ok(running.items.is_empty())
        },
    )
    .await?;
    replace_crds(client, kruise_rs_crds(opts.crds.as_deref())?, opts.timeout).await?;

    let (_, after, _) = survey(client, Some(&pre.before.versions)).await?;
    let comparison = compare(&pre.before, &after);
    match opts.output {
        Some(output) => print_value(&json!({"result": comparison}), output)?,
        None => {
            println!("Switched; compared with the state before:");
            print_comparison(&comparison);
            println!(
                "Next: install kruise-rs's chart (helm install kruise-rs charts/kruise-rs --namespace {}), \
                 then `kubectl kruise takeover --verify FILE` with the state recorded by --record.",
                opts.kruise_namespace
            );
        }
    }
    ensure!(
        comparison.clean(),
        "the switch changed what it must keep:\n{}",
        problems(&comparison)
    );
    Ok(())
}

async fn verify(client: &Client, path: &Path, output: Option<Output>) -> anyhow::Result<()> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let before: State = serde_json::from_str(&text)
        .with_context(|| format!("{} holds no recorded takeover state", path.display()))?;
    let (_, after, _) = survey(client, Some(&before.versions)).await?;
    // kruise-rs writes its rollout-health conditions once it runs: the objects' resourceVersions
    // move, their statuses as compared do not.
    let comparison = compare(
        &without_object_versions(before),
        &without_object_versions(after),
    );
    match output {
        Some(output) => print_value(&json!({"result": comparison}), output)?,
        None => print_comparison(&comparison),
    }
    ensure!(
        comparison.clean(),
        "changed since the takeover:\n{}",
        problems(&comparison)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(kind: &str, group: &str, plural: &str, objects: &[&str]) -> KindInventory {
        let objects: Vec<ObjectRef> = objects
            .iter()
            .map(|n| ObjectRef {
                kind: kind.into(),
                namespace: Some("ns".into()),
                name: (*n).into(),
            })
            .collect();
        KindInventory {
            kind: kind.into(),
            group: group.into(),
            plural: plural.into(),
            version: "v1beta1".into(),
            namespaced: true,
            served_by_kruise_rs: served(group, kind),
            count: objects.len(),
            objects,
        }
    }

    #[test]
    fn served_kinds() {
        let cases = [
            ("apps.kruise.io", "CloneSet", true),
            ("apps.kruise.io", "StatefulSet", true),
            ("apps.kruise.io", "DaemonSet", true),
            ("apps.kruise.io", "SidecarSet", true),
            ("apps.kruise.io", "UnitedDeployment", true),
            ("apps.kruise.io", "BroadcastJob", true),
            ("apps.kruise.io", "ResourceDistribution", true),
            ("apps.kruise.io", "EphemeralJob", true),
            ("apps.kruise.io", "PersistentPodState", true),
            ("apps.kruise.io", "ContainerRecreateRequest", true),
            ("apps.kruise.io", "WorkloadSpread", true),
            ("apps.kruise.io", "PodProbeMarker", true),
            ("apps.kruise.io", "NodePodProbe", true),
            ("apps.kruise.io", "ImagePullJob", true),
            ("apps.kruise.io", "ImageListPullJob", true),
            ("apps.kruise.io", "NodeImage", true),
            ("apps.kruise.io", "AdvancedCronJob", true),
            ("policy.kruise.io", "PodUnavailableBudget", true),
            ("policy.kruise.io", "Other", false),
            ("apps", "StatefulSet", false),
        ];
        for (group, k, want) in cases {
            assert_eq!(served(group, k), want, "{group}/{k}");
        }
    }

    #[test]
    fn refusals() {
        let inventory = vec![
            kind("CloneSet", "apps.kruise.io", "clonesets", &["web"]),
            // Every kind of v1.9.0 is served: a kind of a newer OpenKruise stands for the unserved.
            kind("NewerKind", "apps.kruise.io", "newerkinds", &["nk"]),
            kind(
                "PodUnavailableBudget",
                "policy.kruise.io",
                "podunavailablebudgets",
                &["pub"],
            ),
            kind("ImagePullJob", "apps.kruise.io", "imagepulljobs", &[]),
        ];
        let names = |allow: &[&str]| -> Result<Vec<String>, String> {
            let allow: Vec<String> = allow.iter().map(|s| s.to_string()).collect();
            refused(&inventory, &allow)
                .map(|r| r.iter().map(ToString::to_string).collect())
                .map_err(|e| e.to_string())
        };
        type Case<'a> = (&'a [&'a str], Result<&'a [&'a str], &'a str>);
        let cases: &[Case] = &[
            // PodUnavailableBudget is served: never refused.
            (&[], Ok(&["NewerKind ns/nk"])),
            (&["NewerKind"], Ok(&[])),
            (&["newerkind", "pub"], Err("[\"pub\"]")),
            (
                &["newerkinds", "podunavailablebudgets.policy.kruise.io"],
                Ok(&[]),
            ),
            (&["NewerKind", "PodUnavailableBudget"], Ok(&[])),
            (&["ImagePullJob"], Ok(&["NewerKind ns/nk"])),
            (&["NewerKnd"], Err("NewerKnd")),
        ];
        for (allow, want) in cases {
            match (names(allow), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, *want, "{allow:?}"),
                (Err(got), Err(want)) => assert!(got.contains(want), "{allow:?}: {got}"),
                (got, want) => panic!("{allow:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn releases_give_up_crds_and_namespaces() {
        let docs = vec![
            json!({"kind": "CustomResourceDefinition", "metadata": {"name": "clonesets.apps.kruise.io"}}),
            json!({"kind": "Namespace", "metadata": {"name": "kruise-system"}}),
            json!({"kind": "Deployment", "metadata": {"name": "kruise-controller-manager"}}),
            json!({"kind": "MutatingWebhookConfiguration", "metadata": {"name": "m"}}),
        ];
        let (kept, taken_out) = split_release(docs);
        assert_eq!(
            taken_out,
            [
                "CustomResourceDefinition/clonesets.apps.kruise.io",
                "Namespace/kruise-system"
            ]
        );
        let kept: Vec<&str> = kept.iter().filter_map(|d| d["kind"].as_str()).collect();
        assert_eq!(kept, ["Deployment", "MutatingWebhookConfiguration"]);
        let (kept, taken_out) = split_release(vec![]);
        assert!(kept.is_empty() && taken_out.is_empty());
    }

    #[test]
    fn other_releases_must_be_gone() {
        let pair = |r: &str, n: &str| (r.to_string(), n.to_string());
        let owners: BTreeSet<(String, String)> =
            [pair("kruise", "default"), pair("kruise-crds", "infra")].into();
        let cases = [
            (
                None,
                vec![pair("kruise", "default"), pair("kruise-crds", "infra")],
            ),
            (
                Some(pair("kruise", "default")),
                vec![pair("kruise-crds", "infra")],
            ),
            (
                Some(pair("kruise", "other")),
                vec![pair("kruise", "default"), pair("kruise-crds", "infra")],
            ),
        ];
        for (given, want) in cases {
            assert_eq!(other_releases(&owners, given.as_ref()), want, "{given:?}");
        }
        assert!(other_releases(&BTreeSet::new(), None).is_empty());
    }

    #[test]
    fn chart_names() {
        let cases = [
            ("kruise-1.9.0", ("kruise", "1.9.0")),
            ("kruise-1.9.0-alpha.3", ("kruise", "1.9.0-alpha.3")),
            ("my-kruise-chart-2.0.1", ("my-kruise-chart", "2.0.1")),
            ("kruise", ("openkruise", "0.0.0")),
        ];
        for (chart, (name, version)) in cases {
            assert_eq!(
                chart_name_version(chart),
                (name.to_string(), version.to_string()),
                "{chart}"
            );
        }
    }

    fn tracked(uid: &str, rv: Option<&str>, status: Option<Value>) -> Tracked {
        Tracked {
            uid: uid.into(),
            resource_version: rv.map(Into::into),
            status,
        }
    }

    #[test]
    fn comparisons() {
        let mut before = State {
            crds: ["a".to_string(), "b".to_string()].into(),
            ..State::default()
        };
        before
            .pods
            .insert("ns/p1".into(), tracked("u1", Some("10"), None));
        before
            .pods
            .insert("ns/p2".into(), tracked("u2", Some("11"), None));
        before
            .pods
            .insert("ns/p3".into(), tracked("u3", Some("12"), None));
        before.objects.insert(
            "CloneSet ns/web".into(),
            tracked("c1", None, Some(json!({"replicas": 2}))),
        );
        before.objects.insert(
            "CloneSet ns/api".into(),
            tracked("c2", None, Some(json!({"replicas": 1}))),
        );
        before
            .revisions
            .insert("ns/web-1".into(), tracked("r1", Some("5"), None));

        let same = compare(&before, &before);
        assert!(same.clean());
        assert_eq!(
            (
                same.crds.kept,
                same.objects.kept,
                same.pods.kept,
                same.controller_revisions.kept
            ),
            (2, 2, 3, 1)
        );

        let mut after = before.clone();
        after.crds.remove("b");
        after.crds.insert("c".into());
        after
            .pods
            .insert("ns/p1".into(), tracked("u1", Some("13"), None)); // written
        after
            .pods
            .insert("ns/p2".into(), tracked("u9", Some("14"), None)); // recreated
        after.pods.remove("ns/p3");
        after
            .pods
            .insert("ns/p4".into(), tracked("u4", Some("15"), None));
        after.objects.insert(
            "CloneSet ns/web".into(),
            tracked("c1", None, Some(json!({"replicas": 3}))),
        );
        after
            .revisions
            .insert("ns/web-2".into(), tracked("r2", Some("16"), None));
        // The manager's per-node objects are not changes; another new object is.
        after
            .objects
            .insert("NodePodProbe node-1".into(), tracked("n1", None, None));
        after
            .objects
            .insert("PodProbeMarker ns/ppm".into(), tracked("m1", None, None));
        let changed = compare(&before, &after);
        assert!(!changed.clean());
        assert_eq!(changed.crds.deleted, ["b"]);
        assert!(changed.crds.added.is_empty());
        assert_eq!(changed.pods.written, ["ns/p1"]);
        assert_eq!(changed.pods.deleted, ["ns/p2", "ns/p3"]);
        assert_eq!(changed.pods.added, ["ns/p4"]);
        assert_eq!(changed.objects.written, ["CloneSet ns/web"]);
        assert_eq!(changed.objects.added, ["PodProbeMarker ns/ppm"]);
        assert_eq!(changed.objects.kept, 1);
        assert_eq!(changed.controller_revisions.added, ["ns/web-2"]);
        assert_eq!(changed.controller_revisions.kept, 1);
    }

    #[test]
    fn statuses_compare_without_conditions_probe_times_and_zeros() {
        let cases = [
            (
                json!({"replicas": 2, "conditions": [{"type": "Available"}],
                    "subsets": [{"name": "a", "conditions": [{"type": "Updated"}]}]}),
                json!({"replicas": 2, "subsets": [{"name": "a"}]}),
            ),
            (
                json!({"collisionCount": 0, "numberReady": 3, "paused": false, "labelSelector": "",
                    "updateRevision": "r1", "extra": {"a": 0}, "list": []}),
                json!({"numberReady": 3, "updateRevision": "r1"}),
            ),
            (
                json!({"podProbeStatuses": [{"name": "p", "probeStates": [{"name": "ppm#healthy",
                    "state": "Succeeded", "lastProbeTime": "2026-11-30T16:48:05Z",
                    "lastTransitionTime": "2026-11-30T16:47:25Z"}]}]}),
                json!({"podProbeStatuses": [{"name": "p", "probeStates": [{"name": "ppm#healthy",
                    "state": "Succeeded", "lastTransitionTime": "2026-11-30T16:47:25Z"}]}]}),
            ),
            (Value::Null, Value::Null),
        ];
        for (status, want) in cases {
            assert_eq!(comparable_status(status.clone()), want, "{status}");
        }
    }

    #[test]
    fn the_built_in_crds_are_kruise_rs_s() -> anyhow::Result<()> {
        let crds = kruise_rs_crds(None)?;
        assert_eq!(crds.len(), kruise_api::crd::all().len());
        for crd in &crds {
            assert_eq!(crd["kind"], "CustomResourceDefinition");
            assert_eq!(crd["apiVersion"], "apiextensions.k8s.io/v1");
            let kind = crd["spec"]["names"]["kind"].as_str().unwrap_or_default();
            let group = crd["spec"]["group"].as_str().unwrap_or_default();
            assert!(served(group, kind), "{group}/{kind}");
        }
        Ok(())
    }
}
