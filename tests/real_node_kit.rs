//! What the real-node tests share: reading a container's run off a Pod, the template bit that keeps
//! a workload on the real nodes, and the node agents' logs attached to a failure.

use std::time::Duration;

use anyhow::Context;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kruise_testkit::realnode::REAL_NODE_LABEL;
use kruise_testkit::{TestBed, TestNamespace, eventually};
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

/// The Pod spec bit that keeps a Pod on the real nodes (merged into templates).
pub fn on_real_nodes() -> Value {
    json!({"nodeSelector": {REAL_NODE_LABEL: "true"}})
}

/// The Advanced DaemonSet `agent` (its Pods labelled `app: agent`) with Pod spec `spec`, updated in
/// place one Pod at a time; `rolling_update` is merged into its `rollingUpdate` (a partition, …).
pub fn in_place_agent_daemonset(spec: Value, rolling_update: Value) -> Value {
    let mut doc = json!({
        "apiVersion": "apps.kruise.io/v1beta1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent"},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {
                "rollingUpdateType": "InPlaceIfPossible",
                "maxUnavailable": 1,
            }},
            "template": {"metadata": {"labels": {"app": "agent"}}, "spec": spec},
        },
    });
    json_patch::merge(
        &mut doc["spec"]["updateStrategy"]["rollingUpdate"],
        &rolling_update,
    );
    doc
}

/// The status of `container` in `pod`, or an error naming both.
pub fn status_of(pod: &Pod, container: &str) -> anyhow::Result<ContainerStatus> {
    crate::container_status(pod, container).with_context(|| {
        format!(
            "Pod {} has no status for container {container}",
            pod.metadata.name.as_deref().unwrap_or_default()
        )
    })
}

/// When the runtime started the container's current run (`state.running.startedAt`).
pub fn started_at(status: &ContainerStatus) -> Option<Timestamp> {
    status
        .state
        .as_ref()?
        .running
        .as_ref()?
        .started_at
        .as_ref()
        .map(|t| t.0)
}

/// `test`, with the last `lines` of each real node's logs (kubelet, containerd) added to its error,
/// and of each kruise-daemon's when the bed runs them.
pub async fn with_node_logs(
    bed: &'static TestBed,
    lines: usize,
    test: impl Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<()> {
    test.await.map_err(|error| {
        let daemons: String = bed
            .running_daemons()
            .iter()
            .map(|d| {
                format!(
                    "----- kruise-daemon {} -----\n{}\n",
                    d.node,
                    kruise_testkit::process::tail(&d.log, lines)
                )
            })
            .collect();
        error.context(format!("{daemons}{}", bed.real_node_logs(lines)))
    })
}

/// Runs `test` in a new namespace `prefix-…` of `bed` ([`TestNamespace::run`]: its diagnostics printed
/// if it fails), with the last 30 lines of each real node's logs added to its error
/// ([`with_node_logs`]): how every real-node test runs.
pub async fn in_namespace_with_node_logs(
    bed: &'static TestBed,
    prefix: &str,
    test: impl AsyncFnOnce(&TestNamespace) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let ns = bed.namespace(prefix).await?;
    with_node_logs(bed, 30, ns.run(test(&ns))).await
}

/// Creates the Pod `doc` and waits until it is Ready (real containers start in about a second; the
/// wait allows for a loaded machine).
pub async fn create_ready_pod(
    ns: &TestNamespace,
    doc: &Value,
    timeout: Duration,
) -> anyhow::Result<Pod> {
    let api: Api<Pod> = ns.api();
    let pod: Pod = serde_json::from_value(doc.clone())?;
    let name = pod.metadata.name.clone().unwrap_or_default();
    api.create(&PostParams::default(), &pod).await?;
    eventually(&format!("Pod {name} ready"), timeout, || async {
        let pod = api.get(&name).await?;
        Ok(crate::is_ready(&pod).then_some(pod))
    })
    .await
}

/// The Pods `selector` selects, by name.
pub async fn pods_of(ns: &TestNamespace, selector: &str) -> anyhow::Result<Vec<Pod>> {
    let api: Api<Pod> = ns.api();
    let mut pods = api
        .list(&ListParams::default().labels(selector))
        .await?
        .items;
    pods.sort_by_key(crate::cloneset_kit::name);
    Ok(pods)
}

/// Waits until `count` Pods of `selector` are Ready, not terminating, each with container `nginx`
/// Ready on `image` (as the runtime reports it; compared by its last path segment).
pub async fn wait_all_ready(
    ns: &TestNamespace,
    selector: &str,
    count: usize,
    image: &str,
    timeout: Duration,
) -> anyhow::Result<Vec<Pod>> {
    let suffix = image.rsplit('/').next().unwrap_or(image).to_string();
    eventually(
        format!("{count} Pods of {selector} Ready on {image}"),
        timeout,
        || async {
            let pods = pods_of(ns, selector).await?;
            let done = pods.len() == count
                && pods.iter().all(|p| {
                    p.metadata.deletion_timestamp.is_none()
                        && crate::is_ready(p)
                        && crate::container_status(p, crate::cloneset_kit::CONTAINER)
                            .is_some_and(|s| s.ready && s.image.ends_with(suffix.as_str()))
                });
            if done {
                Ok(Some(pods))
            } else {
                Err(anyhow::anyhow!("{}", crate::cloneset_kit::describe(&pods)))
            }
        },
    )
    .await
}
