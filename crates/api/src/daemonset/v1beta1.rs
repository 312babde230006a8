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

daemon_set_resource!("v1beta1", {
    /// How Pods are created on nodes that need one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_strategy: Option<DaemonSetScaleStrategy>,
});

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

daemon_set_status! {
    /// The controller-revision-hash of the latest revision.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub update_revision: String,
}
