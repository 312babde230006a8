//! Advanced DaemonSet, apps.kruise.io/v1alpha1: no scaleStrategy (the annotation
//! `daemonset.kruise.io/progressive-create-pod: "true"` stands for partitionedScaling), the deprecated
//! rollingUpdateType `Surging`, and `status.daemonSetHash` for `status.updateRevision`.

use k8s_openapi::api::apps::v1::DaemonSetCondition;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use super::v1beta1::{DaemonSetUpdateStrategy, RollingUpdateDaemonSet};
use crate::pub_types::Lifecycle;
use crate::schema::{is_default, preserve_unknown_fields_untyped};

/// Deprecated rollingUpdateType: defaulted to Standard with maxSurge 1 and maxUnavailable 0.
pub const ROLLING_UPDATE_SURGING: &str = "Surging";
/// `"true"` on a v1alpha1 DaemonSet is v1beta1's `scaleStrategy.partitionedScaling: true`.
pub const ANNOTATION_PROGRESSIVE_CREATE_POD: &str = "daemonset.kruise.io/progressive-create-pod";

daemon_set_resource! {
    "v1alpha1",
    #[serde(rename_all = "camelCase")]
    pub struct DaemonSetSpec {
        /// Label query over the daemon Pods; must match the template's labels.
        #[schemars(required)]
        #[serde(skip_serializing_if = "Option::is_none")]
        pub selector: Option<LabelSelector>,
        /// The Pod run on every eligible node.
        #[schemars(schema_with = "preserve_unknown_fields_untyped")]
        pub template: PodTemplateSpec,
        /// How Pods are replaced when the template changes (rollingUpdateType may also be `Surging`).
        #[serde(default)]
        pub update_strategy: DaemonSetUpdateStrategy,
        /// Seconds a new Pod must be ready before it counts as available.
        #[serde(default, skip_serializing_if = "is_default")]
        pub min_ready_seconds: i32,
        /// Creates, deletes and in-place updates per sync (250 when unset).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub burst_replicas: Option<IntOrString>,
        /// Old revisions kept (10 when unset).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub revision_history_limit: Option<i32>,
        /// Hooks around Pod lifecycle; only preDelete is supported.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub lifecycle: Option<Lifecycle>,
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DaemonSetStatus {
    pub current_number_scheduled: i32,
    pub number_misscheduled: i32,
    pub desired_number_scheduled: i32,
    pub number_ready: i32,
    #[serde(default, skip_serializing_if = "is_default")]
    pub observed_generation: i64,
    pub updated_number_scheduled: i32,
    #[serde(default, skip_serializing_if = "is_default")]
    pub number_available: i32,
    #[serde(default, skip_serializing_if = "is_default")]
    pub number_unavailable: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collision_count: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<DaemonSetCondition>,
    /// The controller-revision-hash of the latest revision (v1beta1 `updateRevision`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub daemon_set_hash: String,
}
