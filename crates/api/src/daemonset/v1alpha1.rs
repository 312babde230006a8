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

daemon_set_resource!("v1alpha1", {});

daemon_set_status! {
    /// The controller-revision-hash of the latest revision (v1beta1 `updateRevision`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub daemon_set_hash: String,
}
