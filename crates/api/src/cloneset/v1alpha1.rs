//! CloneSet, apps.kruise.io/v1alpha1: the v1beta1 schema with a flat `updateStrategy` (its `type` doubles
//! as the Pod update policy), `scaleStrategy.disablePVCReuse` instead of `enablePVCReuse`, and labels and
//! annotations for the excludePreparingDelete and image pre-download settings.

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use super::v1beta1::{CloneSetCondition, CloneSetStatus};
use crate::pub_types::{
    InPlaceUpdateStrategy, Lifecycle, UpdatePriorityStrategy, UpdateScatterStrategy,
};
use crate::schema::{is_default, preserve_unknown_fields_untyped};

/// `updateStrategy.type` values.
pub const UPDATE_RECREATE: &str = "ReCreate";
pub const UPDATE_IN_PLACE_IF_POSSIBLE: &str = "InPlaceIfPossible";
pub const UPDATE_IN_PLACE_ONLY: &str = "InPlaceOnly";
pub const UPDATE_ON_DELETE: &str = "OnDelete";

clone_set_resource!("v1alpha1");

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloneSetScaleStrategy {
    /// Names of Pods to delete; names of Pods that no longer exist are removed after the sync.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods_to_delete: Vec<String>,
    /// Most Pods unavailable while scaling up (an integer or a percentage, rounded up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
    /// Do not reuse the existing PVCs of a deleted Pod for its replacement (default false: reuse).
    #[serde(
        default,
        rename = "disablePVCReuse",
        skip_serializing_if = "is_default"
    )]
    pub disable_pvc_reuse: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloneSetUpdateStrategy {
    /// `ReCreate` (default), `InPlaceIfPossible`, `InPlaceOnly` or `OnDelete`.
    #[serde(default, rename = "type", skip_serializing_if = "String::is_empty")]
    pub type_: String,
    /// Pods to keep at old revisions: an integer or a percentage of replicas, rounded up (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<IntOrString>,
    /// Most Pods unavailable during update or scale (default 20%).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
    /// Most Pods above replicas during update or specified delete (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_surge: Option<IntOrString>,
    /// Stop updating Pods (scaling continues).
    #[serde(default, skip_serializing_if = "is_default")]
    pub paused: bool,
    /// Which Pods update first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_strategy: Option<UpdatePriorityStrategy>,
    /// Label terms whose Pods are spread over the update order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scatter_strategy: UpdateScatterStrategy,
    /// In-place update settings (the image pre-download settings live in annotations in this version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_place_update_strategy: Option<InPlaceUpdateStrategy>,
}
