//! Advanced DaemonSet, apps.kruise.io/v1beta1 (storage version): the native DaemonSet plus in-place update,
//! partition, a node selector for the rollout, paused, burstReplicas, preDelete hooks and partitioned
//! initial creation.

use k8s_openapi::api::apps::v1::DaemonSetCondition;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::pub_types::Lifecycle;
use crate::schema::{is_default, preserve_unknown_fields_untyped};

pub const UPDATE_ROLLING_UPDATE: &str = "RollingUpdate";
pub const UPDATE_ON_DELETE: &str = "OnDelete";
pub const ROLLING_UPDATE_STANDARD: &str = "Standard";
pub const ROLLING_UPDATE_IN_PLACE_IF_POSSIBLE: &str = "InPlaceIfPossible";

daemon_set_resource! {
    "v1beta1",
    #[serde(rename_all = "camelCase")]
    pub struct DaemonSetSpec {
        /// Label query over the daemon Pods; must match the template's labels.
        #[schemars(required)]
        #[serde(skip_serializing_if = "Option::is_none")]
        pub selector: Option<LabelSelector>,
        /// The Pod run on every eligible node.
        #[schemars(schema_with = "preserve_unknown_fields_untyped")]
        pub template: PodTemplateSpec,
        /// How Pods are replaced when the template changes.
        #[serde(default)]
        pub update_strategy: DaemonSetUpdateStrategy,
        /// Seconds a new Pod must be ready before it counts as available.
        #[serde(default, skip_serializing_if = "is_default")]
        pub min_ready_seconds: i32,
        /// Creates, deletes and in-place updates per sync: a number, or a percentage of the desired node count
        /// rounded down (250 when unset).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub burst_replicas: Option<IntOrString>,
        /// Old revisions kept (10 when unset).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub revision_history_limit: Option<i32>,
        /// Hooks around Pod lifecycle; only preDelete is supported.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub lifecycle: Option<Lifecycle>,
        /// How Pods are created on nodes that need one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub scale_strategy: Option<DaemonSetScaleStrategy>,
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DaemonSetUpdateStrategy {
    /// `RollingUpdate` (default) or `OnDelete`.
    #[serde(default, rename = "type", skip_serializing_if = "String::is_empty")]
    pub type_: String,
    /// Parameters of RollingUpdate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_update: Option<RollingUpdateDaemonSet>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollingUpdateDaemonSet {
    /// `Standard` (default: recreate) or `InPlaceIfPossible`.
    #[serde(
        default,
        rename = "rollingUpdateType",
        skip_serializing_if = "String::is_empty"
    )]
    pub type_: String,
    /// Nodes whose Pod may be unavailable during the update: a number, or a percentage of the desired
    /// node count rounded up. Exactly one of maxUnavailable and maxSurge is non-zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
    /// Nodes that may run a new Pod next to the old one during the update: a number, or a percentage
    /// rounded up. Must be 0 for InPlaceIfPossible.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_surge: Option<IntOrString>,
    /// Only nodes matching this label query are updated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// Nodes whose Pod keeps the old revision: a number, or a percentage rounded down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<IntOrString>,
    /// Stop the rolling update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DaemonSetScaleStrategy {
    /// With a partition, create Pods on only `desired - partition` nodes at first.
    #[serde(default, skip_serializing_if = "is_default")]
    pub partitioned_scaling: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DaemonSetStatus {
    /// Nodes that should run the daemon Pod and run at least one.
    pub current_number_scheduled: i32,
    /// Nodes that run the daemon Pod but should not.
    pub number_misscheduled: i32,
    /// Nodes that should run the daemon Pod.
    pub desired_number_scheduled: i32,
    /// Nodes that should run the daemon Pod and have one ready.
    pub number_ready: i32,
    #[serde(default, skip_serializing_if = "is_default")]
    pub observed_generation: i64,
    /// Nodes that run an updated daemon Pod.
    pub updated_number_scheduled: i32,
    /// Nodes that should run the daemon Pod and have one available.
    #[serde(default, skip_serializing_if = "is_default")]
    pub number_available: i32,
    /// Nodes that should run the daemon Pod and have none available.
    #[serde(default, skip_serializing_if = "is_default")]
    pub number_unavailable: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collision_count: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<DaemonSetCondition>,
    /// The controller-revision-hash of the latest revision.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub update_revision: String,
}
