//! UnitedDeployment, apps.kruise.io/v1alpha1: the spec of v1beta1 (the CloneSet and Advanced StatefulSet
//! templates embed the v1beta1 specs here too); the status has `subsetReplicas` and
//! `updateStatus{updatedRevision, currentPartitions}` instead of `updatedRevision`.

use std::collections::BTreeMap;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use super::v1beta1::{
    AdaptiveUnitedDeploymentStrategy, AdvancedStatefulSetTemplateSpec, CloneSetTemplateSpec,
    DeploymentTemplateSpec, ManualUpdate, StatefulSetTemplateSpec, Subset, SubsetTemplate,
    Topology, UnitedDeploymentCondition, UnitedDeploymentScheduleStrategy,
    UnitedDeploymentSubsetCondition, UnitedDeploymentSubsetStatus, UnitedDeploymentUpdateStrategy,
};
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
pub struct UnitedDeploymentSpec {
    #[serde(flatten)]
    pub fields: super::v1beta1::UnitedDeploymentSpec,
}

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
