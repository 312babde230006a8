//! PersistentPodState, apps.kruise.io/v1alpha1 (the only version OpenKruise v1.9.0 serves, and
//! stores): the node topology (and chosen annotations) of each Pod of a StatefulSet, recorded when
//! the Pod is ready, so that a Pod recreated under the same name is steered back to the same
//! topology (required: a nodeSelector; preferred: weighted node affinity). Namespaced; upstream
//! gives it no short name and no printer columns. Validation is upstream's validating webhook
//! (`pkg/webhook/persistentpodstate/validating`) as pure functions.

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::field::{FieldError, Path};

pub const KIND: &str = "PersistentPodState";
pub const PLURAL: &str = "persistentpodstates";
pub const API_VERSION: &str = "apps.kruise.io/v1alpha1";

/// On a workload: `"true"` makes kruise generate (and keep) a PersistentPodState of the same
/// name from the two topology annotations below; removing it deletes that object.
pub const ANNOTATION_AUTO_GENERATE: &str = "kruise.io/auto-generate-persistent-pod-state";
/// On a workload: comma-separated node label keys a recreated Pod must land on again.
pub const ANNOTATION_REQUIRED_TOPOLOGY: &str = "kruise.io/required-persistent-topology";
/// On a workload: comma-separated node label keys a recreated Pod prefers (weight 100).
pub const ANNOTATION_PREFERRED_TOPOLOGY: &str = "kruise.io/preferred-persistent-topology";
/// On a workload: comma-separated Pod annotation keys whose values are recorded.
pub const ANNOTATION_PERSISTENT_POD_ANNOTATIONS: &str = "kruise.io/persistent-pod-annotations";
/// On a Pod: the PersistentPodState whose record the Pod webhook injected.
pub const ANNOTATION_INJECTED: &str = "kruise.io/injected-persistent-pod-state";
/// The weight of the preferred term generated from [`ANNOTATION_PREFERRED_TOPOLOGY`].
pub const GENERATED_PREFERRED_WEIGHT: i32 = 100;

/// `persistentPodStateRetentionPolicy`: records of Pods beyond the replicas are dropped (the
/// default, also for an empty value).
pub const RETENTION_WHEN_SCALED: &str = "WhenScaled";
/// `persistentPodStateRetentionPolicy`: records are kept until the workload is deleted.
pub const RETENTION_WHEN_DELETED: &str = "WhenDeleted";

crate::crd::resource! {
    #[kube(
        version = "v1alpha1",
        kind = "PersistentPodState",
        namespaced,
        status = "PersistentPodStateStatus",
        doc = "PersistentPodState is the Schema for the PersistentPodState API"
    )]
    #[serde(rename_all = "camelCase")]
    pub struct PersistentPodStateSpec {
        /// The workload whose Pods are recorded (StatefulSet of apps or apps.kruise.io, or a kind of
        /// the `PPS_Watch_Custom_Workload_WhiteList` of kruise-configuration).
        #[serde(rename = "targetRef")]
        pub target_reference: TargetReference,
        /// Annotations of the Pods whose values are recorded.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub persistent_pod_annotations: Vec<PersistentPodAnnotation>,
        /// Node label keys a recreated Pod must land on again (a nodeSelector).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub required_persistent_topology: Option<NodeTopologyTerm>,
        /// Node label keys a recreated Pod prefers, with a weight (preferred node affinity).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub preferred_persistent_topology: Vec<PreferredTopologyTerm>,
        /// `WhenScaled` (default): a Pod's record goes when the workload scales below it;
        /// `WhenDeleted`: records go only with the workload.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        pub persistent_pod_state_retention_policy: String,
    }
}

/// The workload of a PersistentPodState (all three fields required).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetReference {
    /// API version of the referent.
    pub api_version: String,
    /// Kind of the referent.
    pub kind: String,
    /// Name of the referent.
    pub name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreferredTopologyTerm {
    pub weight: i32,
    pub preference: NodeTopologyTerm,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeTopologyTerm {
    /// A list of node selector requirements by node's labels.
    pub node_topology_keys: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PersistentPodAnnotation {
    pub key: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PersistentPodStateStatus {
    /// The most recent generation observed for this PersistentPodState.
    #[serde(default)]
    pub observed_generation: i64,
    /// The recorded state of each Pod, by Pod name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pod_states: BTreeMap<String, PodState>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodState {
    /// pod.spec.nodeName
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub node_name: String,
    /// Node topology labels key=value, for example kubernetes.io/hostname=node-1.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_topology_labels: BTreeMap<String, String>,
    /// Pod persistent annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// The CRD, served and stored in v1alpha1 only, as upstream's.
pub fn crd() -> CustomResourceDefinition {
    crate::crd::single_version(PersistentPodState::crd())
}

pub use crate::validation::group_of;

/// Whether two references name the same workload: same group, kind and name (the version may
/// differ), as upstream's `IsReferenceEqual`.
pub fn same_workload(a: &TargetReference, b: &TargetReference) -> bool {
    group_of(&a.api_version) == group_of(&b.api_version) && a.kind == b.kind && a.name == b.name
}

/// A custom workload kind (`PPS_Watch_Custom_Workload_WhiteList` in kruise-configuration:
/// `{"workloads": [{"Group": ..., "Version": ..., "Kind": ...}]}`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WhitelistedWorkload {
    #[serde(rename = "Group", default)]
    pub group: String,
    #[serde(rename = "Version", default)]
    pub version: String,
    #[serde(rename = "Kind", default)]
    pub kind: String,
}

/// The key of kruise-configuration holding the custom workload whitelist.
pub const WHITELIST_KEY: &str = "PPS_Watch_Custom_Workload_WhiteList";

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Whitelist {
    #[serde(default)]
    pub workloads: Vec<WhitelistedWorkload>,
}

impl Whitelist {
    /// Parses the whitelist value of kruise-configuration.
    pub fn parse(value: &str) -> Result<Self, String> {
        serde_json::from_str(value).map_err(|e| format!("{WHITELIST_KEY}: {e}"))
    }

    /// Whether a workload of `api_version`/`kind` may be the target of a PersistentPodState:
    /// StatefulSets of apps and apps.kruise.io always, other kinds when whitelisted (by group).
    pub fn allows(&self, api_version: &str, kind: &str) -> bool {
        if api_version.is_empty() || crate::validation::check_group_version(api_version).is_err() {
            return false;
        }
        let group = group_of(api_version);
        if kind == "StatefulSet" && (group == "apps" || group == "apps.kruise.io") {
            return true;
        }
        self.workloads
            .iter()
            .any(|w| w.group == group && w.kind == kind)
    }
}

/// Create (`old` = None) and update validation, as upstream's webhook: a complete targetRef of an
/// allowed kind, at least one topology term, an unchanged targetRef on update, and no other
/// PersistentPodState of the namespace (`others`, this one included or not) on the same workload.
pub fn validate(
    new: &PersistentPodState,
    old: Option<&PersistentPodState>,
    others: &[PersistentPodState],
    whitelist: &Whitelist,
) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let spec_path = Path::new("spec");
    let spec = &new.spec;
    let target = &spec.target_reference;
    let shown = format!(
        "{{apiVersion: {:?}, kind: {:?}, name: {:?}}}",
        target.api_version, target.kind, target.name
    );
    if target.api_version.is_empty() || target.kind.is_empty() || target.name.is_empty() {
        errors.push(FieldError::invalid(
            &spec_path.child("targetRef"),
            &shown,
            "empty TargetReference is not valid for PersistentPodState.",
        ));
    }
    if !whitelist.allows(&target.api_version, &target.kind) {
        errors.push(FieldError::invalid(
            &spec_path.child("targetRef"),
            &shown,
            "TargetReference.Kind must be StatefulSet or in PPS_Watch_Custom_Workload_WhiteList",
        ));
    }
    if spec.required_persistent_topology.is_none() && spec.preferred_persistent_topology.is_empty()
    {
        errors.push(FieldError::invalid(
            &spec_path,
            "{}",
            "TopologyConstraint and TopologyPreference cannot be empty at the same time",
        ));
    }
    if let Some(old) = old
        && old.spec.target_reference != *target
    {
        errors.push(FieldError::required(
            &spec_path.child("targetRef"),
            "targetRef cannot be modified",
        ));
    }
    let name = new.metadata.name.as_deref().unwrap_or_default();
    if let Some(other) = others.iter().find(|other| {
        other.metadata.name.as_deref().unwrap_or_default() != name
            && same_workload(&other.spec.target_reference, target)
    }) {
        errors.push(FieldError::invalid(
            &spec_path.child("targetReference"),
            &shown,
            format!(
                "targetReference is in conflict with other PersistentPodState {}",
                other.metadata.name.as_deref().unwrap_or_default()
            ),
        ));
    }
    errors
}

#[cfg(test)]
mod tests;
