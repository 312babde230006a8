//! CloneSet, apps.kruise.io/v1alpha1: the v1beta1 schema with a flat `updateStrategy` (its `type` doubles
//! as the Pod update policy), `scaleStrategy.disablePVCReuse` instead of `enablePVCReuse`, and labels and
//! annotations for the excludePreparingDelete and image pre-download settings.

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
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

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "apps.kruise.io",
    version = "v1alpha1",
    kind = "CloneSet",
    namespaced,
    status = "CloneSetStatus",
    shortname = "clone",
    derive = "PartialEq",
    derive = "Default",
    doc = "CloneSet is the Schema for the clonesets API",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.labelSelector"
    ),
    printcolumn(
        name = "DESIRED",
        type_ = "integer",
        json_path = ".spec.replicas",
        description = "The desired number of pods."
    ),
    printcolumn(
        name = "UPDATED",
        type_ = "integer",
        json_path = ".status.updatedReplicas",
        description = "The number of pods updated."
    ),
    printcolumn(
        name = "UPDATED_READY",
        type_ = "integer",
        json_path = ".status.updatedReadyReplicas",
        description = "The number of pods updated and ready."
    ),
    printcolumn(
        name = "UPDATED_AVAILABLE",
        type_ = "integer",
        json_path = ".status.updatedAvailableReplicas",
        description = "The number of pods updated and available."
    ),
    printcolumn(
        name = "READY",
        type_ = "integer",
        json_path = ".status.readyReplicas",
        description = "The number of pods ready."
    ),
    printcolumn(
        name = "TOTAL",
        type_ = "integer",
        json_path = ".status.replicas",
        description = "The number of currently all pods."
    ),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC."
    ),
    printcolumn(
        name = "CONTAINERS",
        type_ = "string",
        priority = 1,
        json_path = ".spec.template.spec.containers[*].name",
        description = "The containers of currently cloneset."
    ),
    printcolumn(
        name = "IMAGES",
        type_ = "string",
        priority = 1,
        json_path = ".spec.template.spec.containers[*].image",
        description = "The images of currently cloneset."
    ),
    printcolumn(
        name = "SELECTOR",
        type_ = "string",
        priority = 1,
        json_path = ".status.labelSelector",
        description = "The selector of currently cloneset."
    )
)]
#[serde(rename_all = "camelCase")]
pub struct CloneSetSpec {
    /// Desired number of Pods (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Selects the Pods counted as replicas; must match the template's labels.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(required)]
    pub selector: Option<LabelSelector>,
    /// The Pods created.
    #[schemars(schema_with = "preserve_unknown_fields_untyped")]
    pub template: PodTemplateSpec,
    /// One PVC per template per Pod, named `<template>-<cloneset>-<instance id>`; deleted with its Pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "preserve_unknown_fields_untyped")]
    pub volume_claim_templates: Vec<PersistentVolumeClaim>,
    /// How Pods are created and deleted.
    #[serde(default)]
    pub scale_strategy: CloneSetScaleStrategy,
    /// How Pods are updated when the template changes.
    #[serde(default)]
    pub update_strategy: CloneSetUpdateStrategy,
    /// Revisions kept in the history (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_history_limit: Option<i32>,
    /// Seconds a new Pod must be ready before it counts as available.
    #[serde(default, skip_serializing_if = "is_default")]
    pub min_ready_seconds: i32,
    /// Hooks before a Pod becomes Normal, before deletion and around an in-place update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<Lifecycle>,
    /// Seconds to reach the available (or partition-available) state before the Progressing condition
    /// turns False with ProgressDeadlineExceeded; unset: no Progressing condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_deadline_seconds: Option<i32>,
}

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
