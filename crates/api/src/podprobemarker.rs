//! PodProbeMarker and NodePodProbe, apps.kruise.io/v1alpha1 (the only version OpenKruise v1.9.0 serves
//! and stores for either).
//!
//! A PodProbeMarker (namespaced) names probes to run against the containers of the Pods its selector
//! matches; for each probe it names a Pod condition to report the result in and the labels/annotations
//! to put on the Pod per result (`markerPolicy`). The manager copies the probes into the NodePodProbe
//! (cluster-scoped, one per Node, named after it) of each matched Pod's node; the node's kruise-daemon
//! runs them and reports each probe's state in the NodePodProbe's status, which the manager turns into
//! the Pod's condition and markers.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Probe;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::CustomResourceExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::schema::is_default;

pub const KIND: &str = "PodProbeMarker";
pub const PLURAL: &str = "podprobemarkers";
pub const NODE_KIND: &str = "NodePodProbe";
pub const NODE_PLURAL: &str = "nodepodprobes";

/// The finalizer a PodProbeMarker carries until its probes are removed from the NodePodProbes.
pub const FINALIZER: &str = "kruise.io/node-pod-probe-cleanup";
/// Pod annotations of the serverless (virtual-kubelet) mode, `EnablePodProbeMarkerOnServerless`.
pub const ANNOTATION_POD_PROBE: &str = "kruise.io/podprobe";
pub const ANNOTATION_POD_PROBE_MARKER_LIST: &str = "kruise.io/podprobemarker-list";

/// Probe states (`ContainerProbeState.state`, `ProbeMarkerPolicy.state`).
pub const PROBE_SUCCEEDED: &str = "Succeeded";
pub const PROBE_FAILED: &str = "Failed";
pub const PROBE_UNKNOWN: &str = "Unknown";

/// Events the daemon records on the probed Pod.
pub const EVENT_PROBE_SUCCEEDED: &str = "KruiseProbeSucceeded";
pub const EVENT_PROBE_FAILED: &str = "KruiseProbeFailed";

/// The name of a probe in a NodePodProbe: `<PodProbeMarker name>#<probe name>`.
pub fn node_probe_name(marker: &str, probe: &str) -> String {
    format!("{marker}#{probe}")
}

/// The (PodProbeMarker, probe) names of a NodePodProbe probe name; `None` without a `#`.
pub fn split_node_probe_name(name: &str) -> Option<(&str, &str)> {
    name.split_once('#')
}

/// A probe's container probe: Kubernetes' `Probe` inline (handler, delays, thresholds).
pub type ContainerProbeSpec = Probe;

crate::crd::resource! {
    #[kube(
        version = "v1alpha1",
        kind = "PodProbeMarker",
        namespaced,
        status = "PodProbeMarkerStatus",
        doc = "PodProbeMarker is the Schema for the PodProbeMarker API"
    )]
    #[serde(rename_all = "camelCase")]
    pub struct PodProbeMarkerSpec {
        /// Selects the Pods to probe (required, not empty, immutable).
        pub selector: LabelSelector,
        /// The probes to run in each selected Pod.
        pub probes: Vec<PodContainerProbe>,
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodContainerProbe {
    /// Probe name, unique within the PodProbeMarker.
    pub name: String,
    /// The container to probe.
    pub container_name: String,
    /// The container probe.
    pub probe: ContainerProbeSpec,
    /// Labels and annotations to put on the Pod per probe result.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub marker_policy: Vec<ProbeMarkerPolicy>,
    /// The Pod condition the probe's result is reported in.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pod_condition_type: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProbeMarkerPolicy {
    /// `Succeeded` or `Failed`.
    pub state: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodProbeMarkerStatus {
    /// The generation the controller last acted on.
    #[serde(default)]
    pub observed_generation: i64,
    /// How many Pods the selector matches.
    #[serde(default, skip_serializing_if = "is_default")]
    pub matched_pods: i64,
}

crate::crd::resource! {
    #[kube(
        version = "v1alpha1",
        kind = "NodePodProbe",
        status = "NodePodProbeStatus",
        doc = "NodePodProbe is the Schema for the NodePodProbe API"
    )]
    #[serde(rename_all = "camelCase")]
    pub struct NodePodProbeSpec {
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub pod_probes: Vec<PodProbe>,
    }
}

/// The probes of one Pod on the node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PodProbe {
    /// pod name
    pub name: String,
    /// pod namespace
    pub namespace: String,
    /// pod uid
    pub uid: String,
    /// pod ip
    #[serde(rename = "IP")]
    pub ip: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub probes: Vec<ContainerProbe>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerProbe {
    /// Name is podProbeMarker.Name#probe.Name
    pub name: String,
    /// container name
    pub container_name: String,
    /// container probe spec
    pub probe: ContainerProbeSpec,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodePodProbeStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pod_probe_statuses: Vec<PodProbeStatus>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PodProbeStatus {
    /// pod name
    pub name: String,
    /// pod namespace
    pub namespace: String,
    /// pod uid
    pub uid: String,
    #[serde(default, rename = "probeStates", skip_serializing_if = "Vec::is_empty")]
    pub probe_states: Vec<ContainerProbeState>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerProbeState {
    /// Name is podProbeMarker.Name#probe.Name
    pub name: String,
    /// `Succeeded`, `Failed` or `Unknown`.
    pub state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_probe_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// Whether a probe state corresponds to a Pod condition status (`True` ↔ Succeeded, `False` ↔
/// Failed, anything else ↔ Unknown), as upstream's `IsEqualPodConditionStatus`.
pub fn state_matches_condition_status(state: &str, status: &str) -> bool {
    match status {
        "True" => state == PROBE_SUCCEEDED,
        "False" => state == PROBE_FAILED,
        _ => state == PROBE_UNKNOWN,
    }
}

/// The PodProbeMarker CRD, served and stored in v1alpha1 only.
pub fn crd() -> CustomResourceDefinition {
    crate::crd::single_version(PodProbeMarker::crd())
}

/// The NodePodProbe CRD (cluster-scoped), served and stored in v1alpha1 only.
pub fn node_crd() -> CustomResourceDefinition {
    crate::crd::single_version(NodePodProbe::crd())
}
