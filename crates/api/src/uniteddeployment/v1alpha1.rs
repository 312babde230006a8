//! UnitedDeployment, apps.kruise.io/v1alpha1, as OpenKruise v1.9.0 serves it (its only version there):
//! the spec of v1beta1 except that `cloneSetTemplate.spec` is the **v1alpha1** CloneSet spec (flat
//! `updateStrategy.{type, partition, maxUnavailable, maxSurge, paused, priorityStrategy, scatterStrategy,
//! inPlaceUpdateStrategy}`, `scaleStrategy.disablePVCReuse`); the Advanced StatefulSet template embeds the
//! v1beta1 Advanced StatefulSet spec and the native StatefulSet and Deployment templates are schemaless,
//! as in v1beta1. The status has `subsetReplicas` and `updateStatus{updatedRevision, currentPartitions}`
//! instead of `updatedRevision`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
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

united_deployment_resource!("v1alpha1");

/// The workload template of the subsets; exactly one is set. A CloneSet template holds the v1alpha1
/// CloneSet spec.
pub type SubsetTemplate = super::v1beta1::SubsetTemplate<CloneSetSpec>;

/// The CloneSet template of v1alpha1: the v1alpha1 CloneSet spec.
pub type CloneSetTemplateSpec = super::v1beta1::CloneSetTemplateSpec<CloneSetSpec>;

united_deployment_status!(
    {
        /// Per subset name: its target replicas.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        pub subset_replicas: BTreeMap<String, i32>,
    },
    {
        /// The newest revision and the partition of each subset.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub update_status: Option<UpdateStatus>,
    }
);

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdateStatus {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub updated_revision: String,
    /// Per subset name: its current partition.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub current_partitions: BTreeMap<String, i32>,
}
