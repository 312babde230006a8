//! A changing fleet: simulated nodes added, changed and removed while the cluster runs.
//!
//! A node is added by registering its Node object (labelled `node.kruise-rs.io/simulated=true`, with
//! capacity, allocatable, labels, taints and `unschedulable`); the running kubelet-sim adopts it and
//! serves it from then on (heartbeats, Pods). Removing a node deletes the Node, as when a machine leaves
//! a real cluster: kube-controller-manager's Pod garbage collector and taint manager then act on its Pods.
//! Labels, taints, `unschedulable` and capacity are changed with patches on the live Node.

use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::{Node, Taint};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kubelet_sim::NodeSpecSim;
use kubelet_sim::node::SIMULATED_LABEL;
use serde_json::json;

use crate::wait::until;

/// Field manager of the fleet's writes.
const MANAGER: &str = "kruise-testkit-fleet";
/// How long a new node may take to become Ready and lose the not-ready taint.
const READY_TIMEOUT: Duration = Duration::from_secs(90);

/// Indexes handed out by this process; kept above every index seen in the cluster so that concurrent
/// tests adding nodes never share an IP range.
static NEXT_INDEX: AtomicU16 = AtomicU16::new(0);

/// A fleet index (node IP and Pod CIDR) no simulated node of the cluster uses.
pub async fn free_index(client: &Client) -> anyhow::Result<u16> {
    let api: Api<Node> = Api::all(client.clone());
    let listed = api
        .list(&ListParams::default().labels(&format!("{SIMULATED_LABEL}=true")))
        .await
        .context("listing simulated nodes")?;
    let floor = listed
        .items
        .iter()
        .filter_map(NodeSpecSim::from_node)
        .map(|n| n.index.saturating_add(1))
        .max()
        .unwrap_or(0);
    NEXT_INDEX.fetch_max(floor, Ordering::SeqCst);
    Ok(NEXT_INDEX.fetch_add(1, Ordering::SeqCst))
}

/// Registers `spec` (its `index` replaced by a free one) and waits until the node is Ready and the
/// controller manager has lifted the `not-ready` taint. Returns the spec as registered.
pub async fn add_node(client: &Client, spec: NodeSpecSim) -> anyhow::Result<NodeSpecSim> {
    let spec = register_node(client, spec).await?;
    wait_node_ready(client, &spec.name).await?;
    Ok(spec)
}

/// Registers `spec` (its `index` replaced by a free one) without waiting for it to become Ready.
pub async fn register_node(client: &Client, mut spec: NodeSpecSim) -> anyhow::Result<NodeSpecSim> {
    spec.index = free_index(client).await?;
    let api: Api<Node> = Api::all(client.clone());
    api.create(
        &PostParams {
            field_manager: Some(MANAGER.into()),
            ..PostParams::default()
        },
        &spec.build(jiff::Timestamp::now()),
    )
    .await
    .with_context(|| format!("registering node {}", spec.name))?;
    Ok(spec)
}

/// Waits until node `name` is Ready and carries no `node.kubernetes.io/not-ready` or
/// `node.kubernetes.io/unreachable` taint (other taints, e.g. `unschedulable`'s, are the test's).
pub async fn wait_node_ready(client: &Client, name: &str) -> anyhow::Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    until(&format!("node {name} Ready"), READY_TIMEOUT, || async {
        let Some(node) = api.get_opt(name).await? else {
            return Ok(false);
        };
        Ok(node_is_ready(&node))
    })
    .await
}

/// Ready=True and not tainted not-ready/unreachable.
pub fn node_is_ready(node: &Node) -> bool {
    let ready = reports_ready(node);
    let tainted = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| {
            t.iter().any(|t| {
                t.key == "node.kubernetes.io/not-ready" || t.key == "node.kubernetes.io/unreachable"
            })
        });
    ready && !tainted
}

/// The node's condition Ready is True (what its kubelet last reported, whatever its taints).
pub fn reports_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Deletes node `name` and waits until it is gone. Its Pods stay until the control plane acts on
/// them (the Pod garbage collector deletes Pods bound to a missing node after its quarantine).
pub async fn remove_node(client: &Client, name: &str) -> anyhow::Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
        Err(error) => return Err(error).with_context(|| format!("deleting node {name}")),
    }
    until(&format!("node {name} deleted"), READY_TIMEOUT, || async {
        Ok(api.get_opt(name).await?.is_none())
    })
    .await
}

/// Sets (`Some`) or removes (`None`) labels of node `name`.
pub async fn label_node(
    client: &Client,
    name: &str,
    labels: &[(&str, Option<&str>)],
) -> anyhow::Result<()> {
    let labels: serde_json::Map<String, serde_json::Value> = labels
        .iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                v.map_or(serde_json::Value::Null, |v| json!(v)),
            )
        })
        .collect();
    let api: Api<Node> = Api::all(client.clone());
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "metadata": { "labels": labels } })),
    )
    .await
    .with_context(|| format!("labelling node {name}"))?;
    Ok(())
}

/// Adds `taint` to node `name`, replacing a taint with the same key and effect.
pub async fn taint_node(client: &Client, name: &str, taint: Taint) -> anyhow::Result<()> {
    edit_taints(client, name, |taints| {
        taints.retain(|t| !(t.key == taint.key && t.effect == taint.effect));
        taints.push(taint.clone());
    })
    .await
}

/// Removes every taint with key `key` from node `name`.
pub async fn untaint_node(client: &Client, name: &str, key: &str) -> anyhow::Result<()> {
    edit_taints(client, name, |taints| taints.retain(|t| t.key != key)).await
}

/// Rewrites the taint list with the Node's resourceVersion as precondition (taints is an atomic list the
/// controller manager writes too), retrying on conflict.
async fn edit_taints(
    client: &Client,
    name: &str,
    edit: impl Fn(&mut Vec<Taint>),
) -> anyhow::Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    for _ in 0..10 {
        let node = api
            .get(name)
            .await
            .with_context(|| format!("reading node {name}"))?;
        let mut taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        edit(&mut taints);
        let patch = json!({
            "metadata": { "resourceVersion": node.metadata.resource_version },
            "spec": { "taints": taints },
        });
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => continue,
            Err(error) => return Err(error).with_context(|| format!("tainting node {name}")),
        }
    }
    bail!("node {name}: taints kept changing under us")
}

/// Cordons (`true`) or uncordons node `name`.
pub async fn set_unschedulable(
    client: &Client,
    name: &str,
    unschedulable: bool,
) -> anyhow::Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": { "unschedulable": unschedulable.then_some(true) } })),
    )
    .await
    .with_context(|| format!("cordoning node {name}"))?;
    Ok(())
}

/// Sets the capacity and allocatable of node `name` (e.g. `cpu` `"2"`, `memory` `"4Gi"`, `pods` `"10"`).
pub async fn set_allocatable(
    client: &Client,
    name: &str,
    resources: &[(&str, &str)],
) -> anyhow::Result<()> {
    let resources: serde_json::Map<String, serde_json::Value> = resources
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    let api: Api<Node> = Api::all(client.clone());
    api.patch_status(
        name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(json!({
            "apiVersion": "v1",
            "kind": "Node",
            "status": { "capacity": resources, "allocatable": resources },
        })),
    )
    .await
    .with_context(|| format!("resizing node {name}"))?;
    Ok(())
}

/// Parses `key=value` pairs (`k=v,k2=v2`, as kubectl writes labels).
pub fn parse_labels(text: &str) -> anyhow::Result<Vec<(String, String)>> {
    text.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|pair| {
            let (k, v) = pair
                .split_once('=')
                .with_context(|| format!("label {pair:?}: expected key=value"))?;
            if k.trim().is_empty() {
                bail!("label {pair:?}: empty key");
            }
            Ok((k.trim().to_string(), v.trim().to_string()))
        })
        .collect()
}

/// Parses a taint as kubectl writes it: `key=value:Effect` or `key:Effect`, the effect one of
/// `NoSchedule`, `PreferNoSchedule`, `NoExecute`.
pub fn parse_taint(text: &str) -> anyhow::Result<Taint> {
    let (key_value, effect) = text
        .rsplit_once(':')
        .with_context(|| format!("taint {text:?}: expected key[=value]:Effect"))?;
    if !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect) {
        bail!("taint {text:?}: effect must be NoSchedule, PreferNoSchedule or NoExecute");
    }
    let (key, value) = match key_value.split_once('=') {
        Some((k, v)) => (k, Some(v.to_string())),
        None => (key_value, None),
    };
    if key.is_empty() {
        bail!("taint {text:?}: empty key");
    }
    Ok(Taint {
        key: key.to_string(),
        value,
        effect: effect.to_string(),
        time_added: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taints_parse_as_kubectl_writes_them() {
        let taint = parse_taint("dedicated=gpu:NoSchedule").expect("valid");
        assert_eq!(
            (
                taint.key.as_str(),
                taint.value.as_deref(),
                taint.effect.as_str()
            ),
            ("dedicated", Some("gpu"), "NoSchedule")
        );
        let taint = parse_taint("example.com/drain:NoExecute").expect("valid");
        assert_eq!(
            (taint.key.as_str(), taint.value, taint.effect.as_str()),
            ("example.com/drain", None, "NoExecute")
        );
        assert!(parse_taint("k=v").is_err());
        assert!(parse_taint("k=v:Sometimes").is_err());
        assert!(parse_taint("=v:NoSchedule").is_err());
    }

    #[test]
    fn labels_parse_as_pairs() {
        assert_eq!(
            parse_labels("node-pool=canary, tier=a").expect("valid"),
            vec![
                ("node-pool".to_string(), "canary".to_string()),
                ("tier".to_string(), "a".to_string())
            ]
        );
        assert!(parse_labels("").expect("valid").is_empty());
        assert!(parse_labels("novalue").is_err());
    }
}
