//! CloneSet, apps.kruise.io/v1beta1 (storage version): a set of interchangeable Pods with in-place update,
//! partition, surge, priority and scatter ordering, specified deletion, lifecycle hooks and PVC templates.

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
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

clone_set_resource!("v1beta1");

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

crate::pub_types::condition! {
    pub struct CloneSetCondition {
        /// `FailedScale`, `FailedUpdate` or `Progressing`.
        #[serde(rename = "type")]
        pub type_: String,
        /// `True`, `False` or `Unknown`.
        pub status: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub last_update_time: Option<Time>,
    }
}
