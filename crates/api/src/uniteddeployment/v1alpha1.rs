//! UnitedDeployment, apps.kruise.io/v1alpha1, as OpenKruise v1.9.0 serves it (its only version there):
//! the spec of v1beta1 except that `cloneSetTemplate.spec` is the **v1alpha1** CloneSet spec (flat
//! `updateStrategy.{type, partition, maxUnavailable, maxSurge, paused, priorityStrategy, scatterStrategy,
//! inPlaceUpdateStrategy}`, `scaleStrategy.disablePVCReuse`); the Advanced StatefulSet template embeds the
//! v1beta1 Advanced StatefulSet spec and the native StatefulSet and Deployment templates are schemaless,
//! as in v1beta1. The status has `subsetReplicas` and `updateStatus{updatedRevision, currentPartitions}`
//! instead of `updatedRevision`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use super::v1beta1::{
    AdaptiveUnitedDeploymentStrategy, AdvancedStatefulSetTemplateSpec, DeploymentTemplateSpec,
    ManualUpdate, StatefulSetTemplateSpec, Subset, Topology, UnitedDeploymentCondition,
    UnitedDeploymentScheduleStrategy, UnitedDeploymentSubsetCondition,
    UnitedDeploymentSubsetStatus, UnitedDeploymentUpdateStrategy,
};
use crate::cloneset::v1alpha1::CloneSetSpec;
use crate::schema::is_default;

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "apps.kruise.io",
    version = "v1alpha1",
    kind = "UnitedDeployment",
    namespaced,
    status = "UnitedDeploymentStatus",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.labelSelector"
    ),
    shortname = "ud",
    derive = "PartialEq",
    derive = "Default",
    doc = "UnitedDeployment is the Schema for the uniteddeployments API",
    printcolumn(
        name = "DESIRED",
        type_ = "integer",
        json_path = ".spec.replicas",
        description = "The desired number of pods."
    ),
    printcolumn(
        name = "CURRENT",
        type_ = "integer",
        json_path = ".status.replicas",
        description = "The number of currently all pods."
    ),
    printcolumn(
        name = "UPDATED",
        type_ = "integer",
        json_path = ".status.updatedReplicas",
        description = "The number of pods updated."
    ),
    printcolumn(
        name = "READY",
        type_ = "integer",
        json_path = ".status.readyReplicas",
        description = "The number of pods ready."
    ),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC."
    )
)]
#[serde(rename_all = "camelCase")]
pub struct UnitedDeploymentSpec {
    /// Total desired replicas over all subsets (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Label query over the Pods; must match the template's labels.
    #[schemars(required)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// The workload every subset runs: exactly one of the four templates.
    #[serde(default)]
    pub template: SubsetTemplate,
    /// The subsets and how Pods are spread over them.
    #[serde(default)]
    pub topology: Topology,
    /// How subsets move to a new template revision.
    #[serde(default)]
    pub update_strategy: UnitedDeploymentUpdateStrategy,
    /// Revisions kept in the history (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_history_limit: Option<i32>,
}

/// The workload template of the subsets; exactly one is set. A CloneSet template holds the v1alpha1
/// CloneSet spec.
pub type SubsetTemplate = super::v1beta1::SubsetTemplate<CloneSetSpec>;

/// The CloneSet template of v1alpha1: the v1alpha1 CloneSet spec.
pub type CloneSetTemplateSpec = super::v1beta1::CloneSetTemplateSpec<CloneSetSpec>;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnitedDeploymentStatus {
    #[serde(default, skip_serializing_if = "is_default")]
    pub observed_generation: i64,
    #[serde(default, skip_serializing_if = "is_default")]
    pub ready_replicas: i32,
    pub replicas: i32,
    pub updated_replicas: i32,
    #[serde(default, skip_serializing_if = "is_default")]
    pub reserved_pods: i32,
    #[serde(default, skip_serializing_if = "is_default")]
    pub updated_ready_replicas: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collision_count: Option<i32>,
    pub current_revision: String,
    /// Per subset name: its target replicas.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub subset_replicas: BTreeMap<String, i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subset_statuses: Vec<UnitedDeploymentSubsetStatus>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<UnitedDeploymentCondition>,
    /// The newest revision and the partition of each subset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_status: Option<UpdateStatus>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub label_selector: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdateStatus {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub updated_revision: String,
    /// Per subset name: its current partition.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub current_partitions: BTreeMap<String, i32>,
}
