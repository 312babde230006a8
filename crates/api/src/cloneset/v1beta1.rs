//! CloneSet, apps.kruise.io/v1beta1 (storage version): a set of interchangeable Pods with in-place update,
//! partition, surge, priority and scatter ordering, specified deletion, lifecycle hooks and PVC templates.

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::pub_types::{
    InPlaceUpdateStrategy, Lifecycle, UpdatePriorityStrategy, UpdateScatterStrategy,
};
use crate::schema::{is_default, preserve_unknown_fields_untyped};

/// `updateStrategy.type`: update Pods in rolling batches (default).
pub const UPDATE_ROLLING_UPDATE: &str = "RollingUpdate";
/// `updateStrategy.type`: update a Pod only when it is deleted.
pub const UPDATE_ON_DELETE: &str = "OnDelete";
/// `podUpdatePolicy`: always recreate (default).
pub const POD_UPDATE_RECREATE: &str = "ReCreate";
/// `podUpdatePolicy`: update in place when only in-place-updatable fields changed, else recreate.
pub const POD_UPDATE_IN_PLACE_IF_POSSIBLE: &str = "InPlaceIfPossible";
/// `podUpdatePolicy`: always update in place; other template changes are rejected.
pub const POD_UPDATE_IN_PLACE_ONLY: &str = "InPlaceOnly";
/// The default `rollingUpdate.maxUnavailable`.
pub const DEFAULT_MAX_UNAVAILABLE: &str = "20%";

/// Condition types.
pub const CONDITION_FAILED_SCALE: &str = "FailedScale";
pub const CONDITION_FAILED_UPDATE: &str = "FailedUpdate";
pub const CONDITION_PROGRESSING: &str = "Progressing";
/// Reasons of the Progressing condition.
pub const REASON_PROGRESS_DEADLINE_EXCEEDED: &str = "ProgressDeadlineExceeded";
pub const REASON_PAUSED: &str = "CloneSetPaused";
pub const REASON_UPDATED: &str = "CloneSetUpdated";
pub const REASON_PARTITION_AVAILABLE: &str = "ProgressPartitionAvailable";
pub const REASON_AVAILABLE: &str = "CloneSetAvailable";

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "apps.kruise.io",
    version = "v1beta1",
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
    /// Reuse the existing PVCs of a deleted Pod for its replacement (default false).
    #[serde(default, rename = "enablePVCReuse", skip_serializing_if = "is_default")]
    pub enable_pvc_reuse: bool,
    /// Do not count Pods in the PreparingDelete lifecycle state when scaling.
    #[serde(default, skip_serializing_if = "is_default")]
    pub exclude_preparing_delete: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloneSetUpdateStrategy {
    /// `RollingUpdate` (default) or `OnDelete`.
    #[serde(default, rename = "type", skip_serializing_if = "String::is_empty")]
    pub type_: String,
    /// Parameters of a rolling update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_update: Option<RollingUpdateCloneSetStrategy>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollingUpdateCloneSetStrategy {
    /// Pods to keep at old revisions: an integer or a percentage of replicas, rounded up (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<IntOrString>,
    /// Most Pods unavailable during update or scale (default 20%; percentages round up, or down when
    /// maxSurge > 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
    /// Most Pods above replicas during update or specified delete (default 0; percentages round up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_surge: Option<IntOrString>,
    /// `ReCreate` (default), `InPlaceIfPossible` or `InPlaceOnly`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pod_update_policy: String,
    /// Stop updating Pods (scaling continues).
    #[serde(default, skip_serializing_if = "is_default")]
    pub paused: bool,
    /// Which Pods update first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_strategy: Option<UpdatePriorityStrategy>,
    /// Label terms whose Pods are spread over the update order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scatter_strategy: UpdateScatterStrategy,
    /// In-place update settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_place_update_strategy: Option<InPlaceUpdateStrategy>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloneSetStatus {
    /// The most recent generation observed by the controller.
    #[serde(default, skip_serializing_if = "is_default")]
    pub observed_generation: i64,
    /// Pods created by the controller.
    pub replicas: i32,
    /// Pods that are ready.
    pub ready_replicas: i32,
    /// Pods that have been ready for at least minReadySeconds.
    pub available_replicas: i32,
    /// Pods at updateRevision.
    pub updated_replicas: i32,
    /// Pods at updateRevision that are ready.
    pub updated_ready_replicas: i32,
    /// Pods at updateRevision that are available.
    #[serde(default, skip_serializing_if = "is_default")]
    pub updated_available_replicas: i32,
    /// Pods that should be updated: replicas − partition.
    #[serde(default, skip_serializing_if = "is_default")]
    pub expected_updated_replicas: i32,
    /// The newest revision.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub update_revision: String,
    /// The revision all Pods were at when they last converged.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub current_revision: String,
    /// Hash collisions met when naming the newest ControllerRevision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collision_count: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<CloneSetCondition>,
    /// The selector as a string, for the scale subresource (HPA).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub label_selector: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloneSetCondition {
    /// `FailedScale`, `FailedUpdate` or `Progressing`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}
