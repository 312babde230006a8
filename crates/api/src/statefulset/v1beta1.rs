//! Advanced StatefulSet, apps.kruise.io/v1beta1 (storage version): the native StatefulSet plus in-place
//! update, maxUnavailable, unordered update, paused, reserved ordinals, lifecycle hooks and scale limits.

use k8s_openapi::api::apps::v1::StatefulSetCondition;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::pub_types::{InPlaceUpdateStrategy, Lifecycle, UpdatePriorityStrategy};
use crate::schema::{is_default, preserve_unknown_fields_untyped};

pub const POD_MANAGEMENT_ORDERED_READY: &str = "OrderedReady";
pub const POD_MANAGEMENT_PARALLEL: &str = "Parallel";
pub const UPDATE_ROLLING_UPDATE: &str = "RollingUpdate";
pub const UPDATE_ON_DELETE: &str = "OnDelete";
pub const POD_UPDATE_RECREATE: &str = "ReCreate";
pub const POD_UPDATE_IN_PLACE_IF_POSSIBLE: &str = "InPlaceIfPossible";
pub const POD_UPDATE_IN_PLACE_ONLY: &str = "InPlaceOnly";
pub const PVC_RETENTION_RETAIN: &str = "Retain";
pub const PVC_RETENTION_DELETE: &str = "Delete";
pub const VOLUME_CLAIM_UPDATE_ON_POD_ROLLING_UPDATE: &str = "OnPodRollingUpdate";
pub const VOLUME_CLAIM_UPDATE_ON_DELETE: &str = "OnDelete";
/// Upper bound of `updateStrategy.rollingUpdate.minReadySeconds`.
pub const MAX_MIN_READY_SECONDS: i32 = 300;
pub const CONDITION_FAILED_CREATE_POD: &str = "FailedCreatePod";
pub const CONDITION_FAILED_UPDATE_POD: &str = "FailedUpdatePod";

stateful_set_resource!(
    "v1beta1",
    {
        /// How changes to volumeClaimTemplates reach existing claims (gate StatefulSetAutoResizePVCGate).
        #[serde(default)]
        pub volume_claim_update_strategy: VolumeClaimUpdateStrategy,
    },
    {
        /// Ordinals to skip: integers, or `"a-b"` ranges. Pods at these ordinals are deleted and the set
        /// runs `replicas` Pods at the other ordinals.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub reserve_ordinals: Vec<IntOrString>,
        /// Hooks around Pod deletion, in-place update and creation.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub lifecycle: Option<Lifecycle>,
        /// Limits while scaling.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub scale_strategy: Option<StatefulSetScaleStrategy>,
        /// What happens to the claims when the set is deleted or scaled down.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub persistent_volume_claim_retention_policy:
            Option<StatefulSetPersistentVolumeClaimRetentionPolicy>,
        /// The first ordinal (gate StatefulSetStartOrdinal).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub ordinals: Option<StatefulSetOrdinals>,
    }
);

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatefulSetUpdateStrategy {
    /// `RollingUpdate` (default) or `OnDelete`.
    #[serde(default, rename = "type", skip_serializing_if = "String::is_empty")]
    pub type_: String,
    /// Parameters of RollingUpdate; must be unset for OnDelete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_update: Option<RollingUpdateStatefulSetStrategy>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollingUpdateStatefulSetStrategy {
    /// Ordered update: Pods with an ordinal below it keep the old revision. Unordered update: the number
    /// of Pods that keep it. 0 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<i32>,
    /// Pods that may be unavailable during the update: a number, or a percentage of replicas rounded
    /// down (at least 1). Anything but 1 needs podManagementPolicy Parallel. 1 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
    /// `ReCreate` (default), `InPlaceIfPossible` or `InPlaceOnly`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pod_update_policy: String,
    /// Stop the rolling update (scaling goes on).
    #[serde(default, skip_serializing_if = "is_default")]
    pub paused: bool,
    /// Update Pods in priority order rather than by ordinal (Parallel only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unordered_update: Option<UnorderedUpdateStrategy>,
    /// Parameters of in-place update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_place_update_strategy: Option<InPlaceUpdateStrategy>,
    /// Seconds an updated Pod must be ready before it counts as available (0 to 300, 0 when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_ready_seconds: Option<i32>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnorderedUpdateStrategy {
    /// The order in which Pods update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_strategy: Option<UpdatePriorityStrategy>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeClaimUpdateStrategy {
    /// `OnDelete` or `OnPodRollingUpdate`.
    #[serde(default, rename = "type", skip_serializing_if = "String::is_empty")]
    pub type_: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatefulSetScaleStrategy {
    /// Pods that may be unavailable while scaling: a number, or a percentage rounded down (at least 1).
    /// Parallel only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatefulSetPersistentVolumeClaimRetentionPolicy {
    /// `Retain` (default) or `Delete`: the claims when the set is deleted.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub when_deleted: String,
    /// `Retain` (default) or `Delete`: the claims of ordinals removed by a scale-down.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub when_scaled: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatefulSetOrdinals {
    /// Ordinal of the first replica.
    #[serde(default)]
    pub start: i32,
}

stateful_set_status!(
    {
        /// Ready Pods at updateRevision.
        #[serde(default, skip_serializing_if = "is_default")]
        pub updated_ready_replicas: i32,
        /// Available Pods at updateRevision.
        #[serde(default, skip_serializing_if = "is_default")]
        pub updated_available_replicas: i32,
    },
    {
        /// How many Pods have claims compatible with each volume claim template.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub volume_claims: Vec<VolumeClaimStatus>,
    }
);

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeClaimStatus {
    pub volume_claim_name: String,
    /// Replicas whose claim requests at least the template's storage.
    pub compatible_replicas: i32,
    /// Of those, the ones whose claim capacity has caught up.
    pub compatible_ready_replicas: i32,
}
