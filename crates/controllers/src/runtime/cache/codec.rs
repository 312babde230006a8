//! How the Pod cache stores one projection: its JSON, LZ4-compressed against a dictionary of what
//! the JSON of every Pod repeats (field names, condition types and timestamps, the well-known
//! labels, annotations, tolerations and owner kinds). Most of a projection is that repetition, so
//! most of it becomes back-references into the dictionary and a Pod costs the cache a third of its
//! JSON. Decoding is a decompression (microseconds) before the JSON parse it replaces nothing of.
//!
//! The encoding lives only in this process's memory, so the dictionary may change from one build
//! to the next.

use std::sync::LazyLock;

use k8s_openapi::api::core::v1::Pod;
use serde::de::DeserializeOwned;
use serde_json::json;

/// Why a cached entry did not decode (only for bytes [`encode`] did not make).
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("decompressing: {0}")]
    Lz4(#[from] lz4_flex::block::DecompressError),
    #[error("parsing the JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// Compressed JSON of `pod`.
pub fn encode(pod: &Pod) -> Result<Vec<u8>, serde_json::Error> {
    let json = serde_json::to_vec(pod)?;
    Ok(lz4_flex::block::compress_prepend_size_with_dict(
        &json,
        &DICTIONARY,
    ))
}

/// The value [`encode`] compressed, parsed as `T` (the Pod, or only a part of it).
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, DecodeError> {
    let json = lz4_flex::block::decompress_size_prepended_with_dict(bytes, &DICTIONARY)?;
    Ok(serde_json::from_slice(&json)?)
}

static DICTIONARY: LazyLock<Vec<u8>> = LazyLock::new(dictionary);

/// Typical Pods of each workload, serialized exactly as the cache serializes a projection, so that
/// their field order and spelling match byte for byte.
fn dictionary() -> Vec<u8> {
    let time = "2026-01-01T00:00:00Z";
    let condition = |type_: &str, status: &str| json!({"type": type_, "status": status, "lastTransitionTime": time, "lastProbeTime": null});
    let conditions: Vec<_> = [
        "KruisePodReady",
        "InPlaceUpdateReady",
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ]
    .iter()
    .flat_map(|t| [condition(t, "False"), condition(t, "True")])
    .collect();
    let container = |name: &str| {
        json!({"name": name, "image": format!("registry.example.com/{name}:1.0"),
               "resources": {"limits": {"cpu": "100m", "memory": "128Mi"},
                             "requests": {"cpu": "100m", "memory": "128Mi"}}})
    };
    let status = |name: &str| {
        json!({"name": name, "image": format!("docker.io/library/{name}:1.0"),
               "imageID": format!("docker.io/library/{name}@sha256:0123456789abcdef"),
               "ready": true, "restartCount": 0, "started": true})
    };
    let owner = |kind: &str, api_version: &str| {
        json!([{"apiVersion": api_version, "kind": kind, "name": "name",
                "uid": "00000000-0000-4000-8000-000000000000",
                "controller": true, "blockOwnerDeletion": true}])
    };
    let pod = |owner: serde_json::Value, labels: serde_json::Value| {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "name-abcde",
                "namespace": "default",
                "uid": "00000000-0000-4000-8000-000000000000",
                "resourceVersion": "1000",
                "creationTimestamp": time,
                "labels": labels,
                "annotations": {
                    "apps.kruise.io/inplace-update-state": "{\"revision\":\"\",\"updateTimestamp\":\"\",\"lastContainerStatuses\":{\"\":{\"imageID\":\"\"}},\"updateImages\":true,\"containerBatchesRecord\":[{\"timestamp\":\"\",\"containers\":[\"\"]}]}",
                    "kruise.io/sidecarset-injected-list": "",
                    "lifecycle.apps.kruise.io/timestamp": time,
                },
                "finalizers": ["apps.kruise.io/"],
                "ownerReferences": owner,
            },
            "spec": {
                "containers": [container("main"), container("sidecar")],
                "nodeName": "node-1",
                "readinessGates": [{"conditionType": "InPlaceUpdateReady"},
                                   {"conditionType": "KruisePodReady"}],
                "restartPolicy": "Always",
                "tolerations": [
                    {"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                     "effect": "NoExecute", "tolerationSeconds": 300},
                    {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                     "effect": "NoExecute", "tolerationSeconds": 300},
                ],
            },
            "status": {
                "phase": "Running",
                "conditions": conditions,
                "containerStatuses": [status("main"), status("sidecar")],
            }
        })
    };
    let pods = [
        pod(
            owner("CloneSet", "apps.kruise.io/v1beta1"),
            json!({"app": "name", "apps.kruise.io/cloneset-instance-id": "abcde",
                   "controller-revision-hash": "name-0123456789",
                   "lifecycle.apps.kruise.io/state": "Normal",
                   "pod-template-hash": "0123456789"}),
        ),
        pod(
            owner("StatefulSet", "apps.kruise.io/v1beta1"),
            json!({"app": "name", "apps.kubernetes.io/pod-index": "0",
                   "controller-revision-hash": "name-0123456789",
                   "statefulset.kubernetes.io/pod-name": "name-0"}),
        ),
        pod(
            owner("DaemonSet", "apps.kruise.io/v1alpha1"),
            json!({"app": "name", "controller-revision-hash": "0123456789",
                   "pod-template-generation": "1"}),
        ),
        pod(
            owner("ReplicaSet", "apps/v1"),
            json!({"app": "name", "pod-template-hash": "0123456789"}),
        ),
    ];
    let mut bytes = Vec::new();
    for value in pods {
        // Through the typed Pod and the cache's projection, so the bytes are what `encode` is given.
        let Ok(pod) = serde_json::from_value::<Pod>(value) else {
            continue;
        };
        let mut projected = super::project(pod);
        super::take_shared_annotations(&mut projected);
        if let Ok(json) = serde_json::to_vec(&projected) {
            bytes.extend(json);
        }
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_round_trips_and_shrinks() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web-x1y2z", "namespace": "shop",
                         "labels": {"app": "web", "controller-revision-hash": "web-5d4f"}},
            "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}], "nodeName": "n-7"},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-25T10:00:00Z"}]}
        }))
        .unwrap_or_default();
        let bytes = encode(&pod).unwrap_or_default();
        let back: Pod = decode(&bytes).unwrap_or_default();
        assert_eq!(back, pod);
        let json = serde_json::to_vec(&pod).unwrap_or_default();
        assert!(
            bytes.len() * 2 < json.len(),
            "{} bytes compressed from {}",
            bytes.len(),
            json.len()
        );
    }

    #[test]
    fn the_dictionary_is_the_typical_pods() {
        assert!(DICTIONARY.len() > 4_000, "{} bytes", DICTIONARY.len());
    }

    #[test]
    fn foreign_bytes_are_an_error_not_a_panic() {
        assert!(decode::<Pod>(b"\x10\x00\x00\x00garbage").is_err());
        assert!(decode::<Pod>(b"").is_err());
    }
}
