//! Helpers shared by the end-to-end tests: reading what a user would read off Pods and Nodes, the
//! example manifests, cleaning up cluster-scoped objects, and recording the order of a rollout.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ContainerStatus, Node, Pod};
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event as WatchEvent};
use tokio::task::JoinHandle;

/// A UnitedDeployment as users of OpenKruise v1.9 write it (v1alpha1, the v1alpha1 CloneSet spec in its
/// template, every rollout setting, paused, zone-a partitioned).
pub const V1_9_UNITEDDEPLOYMENT: &str =
    include_str!("fixtures/openkruise-v1.9/uniteddeployment-v1alpha1.yaml");

pub mod broadcastjob_kit;
pub mod chart_kit;
pub mod cloneset_kit;
pub mod installed_kit;
pub mod real_node_kit;
pub mod sidecarset_kit;
pub mod statefulset_kit;
pub mod takeover_kit;
pub mod workloadspread_kit;

/// The `(status, reason, message)` of the condition of type `type_` among `conditions`, if present
/// (reason and message empty when unset). A macro because each workload's condition is its own
/// k8s-openapi type (`DaemonSetCondition`, `StatefulSetCondition`, …) with these same fields.
#[macro_export]
macro_rules! condition_of {
    ($conditions:expr, $type_:expr) => {
        $conditions.iter().find(|c| c.type_ == $type_).map(|c| {
            (
                c.status.clone(),
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
    };
}

/// What a manager's `/metrics` says it did: `kruise_controller_reconciles` summed per controller
/// (`cloneset-controller`, …) and `kruise_controller_pod_operations` summed over every controller,
/// operation and result.
#[derive(Debug, Default)]
pub struct ManagerCounts {
    pub reconciles: std::collections::BTreeMap<String, u64>,
    pub pod_operations: u64,
}

/// Reads [`ManagerCounts`] from the manager whose metrics listen on `port`.
pub async fn manager_counts(port: u16) -> anyhow::Result<ManagerCounts> {
    let (code, body) = kruise_testkit::manager::http_get(port, "/metrics").await?;
    anyhow::ensure!(code == 200, "metrics answered {code}");
    let mut counts = ManagerCounts::default();
    for line in body.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        // Counters print as integers or floats; anything else is not a sample.
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let controller = series
            .split("controller=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .unwrap_or_default();
        if series.starts_with("kruise_controller_reconciles_total") {
            *counts.reconciles.entry(controller.to_owned()).or_insert(0) += value as u64;
        } else if series.starts_with("kruise_controller_pod_operations_total") {
            counts.pod_operations += value as u64;
        }
    }
    Ok(counts)
}

/// The node label that names a node's zone.
pub const ZONE: &str = "topology.kubernetes.io/zone";

/// The labels of every node, by node name.
pub async fn node_labels(
    client: &kube::Client,
) -> anyhow::Result<std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>>
{
    let nodes: Api<Node> = Api::all(client.clone());
    Ok(nodes
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter_map(|n| Some((n.metadata.name?, n.metadata.labels.unwrap_or_default())))
        .collect())
}

/// The zone ([`ZONE`]) of every node that has one, by node name.
pub async fn node_zones(
    client: &kube::Client,
) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    Ok(node_labels(client)
        .await?
        .into_iter()
        .filter_map(|(node, mut labels)| Some((node, labels.remove(ZONE)?)))
        .collect())
}

/// The Pod condition of a type, and whether the Pod's `Ready` condition is True: read as the
/// controllers read them.
pub use kruise_core::pods::{condition as pod_condition, is_ready};

pub fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

pub fn pod_ip(pod: &Pod) -> Option<String> {
    pod.status.as_ref()?.pod_ip.clone()
}

pub fn node_name(pod: &Pod) -> Option<String> {
    pod.spec.as_ref()?.node_name.clone()
}

/// The status of container `name`, if reported.
pub fn container_status(pod: &Pod, name: &str) -> Option<ContainerStatus> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == name)
        .cloned()
}

/// The node's `Ready` condition status (`True`, `False` or `Unknown`).
pub fn node_ready_status(node: &Node) -> Option<String> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.clone())
}

/// The YAML documents of every file in `examples/`, as (file name, JSON) pairs.
pub fn example_documents() -> Vec<(String, serde_json::Value)> {
    use serde::Deserialize;
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(&dir)
        .map(|entries| entries.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|x| x == "yaml"));
    files.sort();
    let mut documents = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        for document in serde_yaml::Deserializer::from_str(&text) {
            if let Ok(value) = serde_json::Value::deserialize(document)
                && !value.is_null()
            {
                documents.push((name.clone(), value));
            }
        }
    }
    documents
}

/// Every non-empty document of a multi-document YAML text (helm's output, a manifest file).
pub fn yaml_documents(yaml: &str) -> anyhow::Result<Vec<serde_json::Value>> {
    use serde::Deserialize;
    let mut out = Vec::new();
    for document in serde_yaml::Deserializer::from_str(yaml) {
        let value = serde_json::Value::deserialize(document).context("parsing a YAML document")?;
        if !value.is_null() {
            out.push(value);
        }
    }
    Ok(out)
}

/// The first document of the example file `file` (as [`example_documents`] reads it).
pub fn example(file: &str) -> anyhow::Result<serde_json::Value> {
    example_named(file, None)
}

/// The document of example file `file` whose `metadata.name` is `name` (the first one when `None`).
pub fn example_named(file: &str, name: Option<&str>) -> anyhow::Result<serde_json::Value> {
    example_documents()
        .into_iter()
        .find(|(f, doc)| f == file && name.is_none_or(|n| doc["metadata"]["name"] == n))
        .map(|(_, doc)| doc)
        .with_context(|| format!("examples/{file} (document {name:?})"))
}

/// The names of the Pod's containers, in order.
pub fn container_names(pod: &Pod) -> Vec<String> {
    pod.spec
        .iter()
        .flat_map(|s| s.containers.iter().map(|c| c.name.clone()))
        .collect()
}

/// Waits until the webhook's cache has caught up with the SidecarSets just created: a server-side
/// dry run of `pod` in `namespace` comes back with `want` containers. (The webhook reads SidecarSets
/// from a watch, as upstream reads them from an informer, so a Pod created in the same instant as its
/// SidecarSet may miss it.)
pub async fn wait_injected_on_dry_run(
    client: &kube::Client,
    namespace: &str,
    pod: &serde_json::Value,
    timeout: std::time::Duration,
    want: &[&str],
) -> anyhow::Result<()> {
    wait_dry_run(
        client,
        namespace,
        pod,
        timeout,
        format!("the webhook injecting {want:?} on a dry run in {namespace}"),
        |created| container_names(created) == want,
    )
    .await
}

/// Waits until a server-side dry run of `pod` in `namespace` comes back as `done` says (what the
/// admission webhooks would make of it now).
pub async fn wait_dry_run(
    client: &kube::Client,
    namespace: &str,
    pod: &serde_json::Value,
    timeout: std::time::Duration,
    what: String,
    done: impl Fn(&Pod) -> bool,
) -> anyhow::Result<()> {
    use kube::api::PostParams;
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let mut pod: Pod = serde_json::from_value(pod.clone())?;
    pod.metadata.namespace = Some(namespace.into());
    let params = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let done = &done;
    kruise_testkit::until(what, timeout, || {
        let (api, pod, params) = (api.clone(), pod.clone(), params.clone());
        async move {
            let created = api.create(&params, &pod).await?;
            Ok(done(&created))
        }
    })
    .await
}

/// Deletes what a test created outside its namespace (cluster-scoped SidecarSets, Pods in system
/// namespaces) when it ends, pass or fail: the test bed is shared by the tests of one binary.
pub struct Cleanup {
    kubectl: Vec<Vec<String>>,
}

impl Cleanup {
    pub fn new() -> Self {
        Self {
            kubectl: Vec::new(),
        }
    }

    pub fn sidecarset(&mut self, name: &str) {
        self.kubectl.push(vec![
            "delete".into(),
            "sidecarsets.apps.kruise.io".into(),
            name.into(),
            "--ignore-not-found".into(),
            "--wait=false".into(),
        ]);
    }

    pub fn pod(&mut self, namespace: &str, name: &str) {
        self.kubectl.push(vec![
            "delete".into(),
            "pod".into(),
            name.into(),
            "-n".into(),
            namespace.into(),
            "--ignore-not-found".into(),
            "--wait=false".into(),
        ]);
    }
}

impl Default for Cleanup {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let bed = kruise_testkit::testbed();
        for args in &self.kubectl {
            let _ = std::process::Command::new(bed.plane.bin_dir().join("kubectl"))
                .arg("--kubeconfig")
                .arg(bed.plane.kubeconfig_path())
                .args(args)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

/// Records, from a watch, the order in which Pods first satisfy a condition (for example "runs the
/// new revision"): the order a rollout picks them. Start it before the change.
pub struct PodOrder {
    task: JoinHandle<()>,
    order: Arc<Mutex<Vec<String>>>,
}

impl PodOrder {
    /// Watches the Pods of `api` matching `selector`; a Pod enters the order the first time
    /// `reached(pod)` holds. Returns once the initial list is in, so no later change is missed.
    pub async fn start(
        api: Api<Pod>,
        selector: &str,
        reached: impl Fn(&Pod) -> bool + Send + 'static,
    ) -> anyhow::Result<PodOrder> {
        let order = Arc::new(Mutex::new(Vec::new()));
        let (synced_tx, synced) = tokio::sync::oneshot::channel();
        let config = watcher::Config::default().labels(selector);
        let recorded = order.clone();
        let task = tokio::spawn(async move {
            let mut synced_tx = Some(synced_tx);
            let mut stream = watcher::watcher(api, config).default_backoff().boxed();
            while let Some(item) = stream.next().await {
                let pod = match item {
                    Ok(WatchEvent::Apply(pod)) | Ok(WatchEvent::InitApply(pod)) => pod,
                    Ok(WatchEvent::InitDone) => {
                        if let Some(tx) = synced_tx.take() {
                            let _ = tx.send(());
                        }
                        continue;
                    }
                    _ => continue,
                };
                if reached(&pod) {
                    let mut order = recorded.lock().unwrap_or_else(|e| e.into_inner());
                    let pod_name = pod.metadata.name.clone().unwrap_or_default();
                    if !order.contains(&pod_name) {
                        order.push(pod_name);
                    }
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(30), synced)
            .await
            .context("the Pod-order watch did not list Pods in 30 s")?
            .context("the Pod-order watch stopped")?;
        Ok(PodOrder { task, order })
    }

    /// The Pods that have reached the condition so far, first come first.
    pub fn order(&self) -> Vec<String> {
        self.order.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for PodOrder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One write of a `manager-N` identity, as the apiserver's audit log recorded it.
#[derive(Clone, Debug)]
pub struct AuditedWrite {
    /// `<received> <verb> <requestURI> -> <code>`, for messages.
    pub line: String,
    pub code: i64,
    pub resource: String,
    /// `status`, `resize`, … or empty for the object itself.
    pub subresource: String,
    pub namespace: String,
    pub name: String,
}

impl AuditedWrite {
    pub fn took_effect(&self) -> bool {
        (200..300).contains(&self.code)
    }
}

/// The writes of `user` (other than to Leases) the test bed's apiserver received at or after `since`
/// (see the audit policy of `kruise_testkit::control_plane`).
pub fn audited_writes(user: &str, since: jiff::Timestamp) -> anyhow::Result<Vec<AuditedWrite>> {
    let path = kruise_testkit::testbed().plane.audit_log_path();
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut found = Vec::new();
    for line in text.lines() {
        let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let object = &event["objectRef"];
        if event["user"]["username"] != user || object["resource"] == "leases" {
            continue;
        }
        let received: Option<jiff::Timestamp> = event["requestReceivedTimestamp"]
            .as_str()
            .and_then(|t| t.parse().ok());
        if received.is_none_or(|r| r < since) {
            continue;
        }
        let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
        let code = event["responseStatus"]["code"].as_i64().unwrap_or_default();
        found.push(AuditedWrite {
            line: format!(
                "{} {} {} -> {code}",
                text(&event["requestReceivedTimestamp"]),
                text(&event["verb"]),
                text(&event["requestURI"]),
            ),
            code,
            resource: text(&object["resource"]),
            subresource: text(&object["subresource"]),
            namespace: text(&object["namespace"]),
            name: text(&object["name"]),
        });
    }
    Ok(found)
}

/// Whether `reported`, an image as a container runtime reports it in `status.containerStatuses[].image`,
/// is the spec image `spec`. Runtimes (containerd, and kubelet-sim like it) write references out in full:
/// `nginx:1.19.1` is reported as `docker.io/library/nginx:1.19.1`, `team/app` as
/// `docker.io/team/app:latest`.
pub fn same_image(reported: &str, spec: &str) -> bool {
    reported == qualified_image(spec)
}

/// `spec` written out as a runtime reports it (Docker Hub's host and `library/` namespace, `:latest`).
pub fn qualified_image(spec: &str) -> String {
    let first = spec.split('/').next().unwrap_or(spec);
    let has_host =
        spec.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    let mut full = if has_host {
        spec.to_string()
    } else if spec.contains('/') {
        format!("docker.io/{spec}")
    } else {
        format!("docker.io/library/{spec}")
    };
    let last = full.rsplit('/').next().unwrap_or(&full);
    if !full.contains('@') && !last.contains(':') {
        full.push_str(":latest");
    }
    full
}

#[cfg(test)]
mod image_tests {
    #[test]
    fn spec_images_are_qualified_as_runtimes_report_them() {
        for (spec, reported) in [
            ("nginx:1.19.1", "docker.io/library/nginx:1.19.1"),
            ("nginx", "docker.io/library/nginx:latest"),
            (
                "log-service/logtail:0.16.18",
                "docker.io/log-service/logtail:0.16.18",
            ),
            ("registry.k8s.io/pause:3.10", "registry.k8s.io/pause:3.10"),
            ("localhost:5000/app", "localhost:5000/app:latest"),
        ] {
            assert_eq!(super::qualified_image(spec), reported, "{spec}");
            assert!(super::same_image(reported, spec));
        }
    }
}
