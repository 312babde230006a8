//! Helpers shared by the end-to-end tests: reading what a user would read off Pods and Nodes.

use k8s_openapi::api::core::v1::{ContainerStatus, Node, Pod, PodCondition};

pub mod cloneset_kit;

/// The status of the Pod condition `type_`, if present.
pub fn pod_condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// Whether the Pod's `Ready` condition is True.
pub fn is_ready(pod: &Pod) -> bool {
    pod_condition(pod, "Ready").is_some_and(|c| c.status == "True")
}

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
    use kube::api::{Api, PostParams};
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let mut pod: Pod = serde_json::from_value(pod.clone())?;
    pod.metadata.namespace = Some(namespace.into());
    let params = PostParams {
        dry_run: true,
        ..Default::default()
    };
    kruise_testkit::until(
        format!("the webhook injecting {want:?} on a dry run in {namespace}"),
        timeout,
        || {
            let (api, pod, params) = (api.clone(), pod.clone(), params.clone());
            async move {
                let created = api.create(&params, &pod).await?;
                Ok(container_names(&created) == want)
            }
        },
    )
    .await
}
