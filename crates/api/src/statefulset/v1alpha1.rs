//! Advanced StatefulSet, apps.kruise.io/v1alpha1: the native fields plus the Kruise update strategy; no
//! reserveOrdinals, lifecycle, scaleStrategy, PVC retention, ordinals or volumeClaimUpdateStrategy, and no
//! updated-ready/available counts or volume claim status.

use k8s_openapi::api::apps::v1::StatefulSetCondition;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use super::v1beta1::{
    RollingUpdateStatefulSetStrategy, StatefulSetUpdateStrategy, UnorderedUpdateStrategy,
};
use crate::schema::{is_default, preserve_unknown_fields_untyped};

stateful_set_resource! {
    "v1alpha1",
    #[serde(rename_all = "camelCase")]
    pub struct StatefulSetSpec {
        /// Desired number of Pods (1 when unset).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub replicas: Option<i32>,
        /// Label query over the Pods of the set; must match the template's labels.
        #[schemars(required)]
        #[serde(skip_serializing_if = "Option::is_none")]
        pub selector: Option<LabelSelector>,
        /// The Pod every ordinal runs.
        #[schemars(schema_with = "preserve_unknown_fields_untyped")]
        pub template: PodTemplateSpec,
        /// Claims each Pod gets its own PersistentVolumeClaim of, named `<claim>-<set>-<ordinal>`.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        #[schemars(schema_with = "preserve_unknown_fields_untyped")]
        pub volume_claim_templates: Vec<PersistentVolumeClaim>,
        /// The governing Service: Pods get `<pod>.<serviceName>` DNS names.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        pub service_name: String,
        /// `OrderedReady` (default) or `Parallel`.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        pub pod_management_policy: String,
        /// How Pods are replaced when the template changes.
        #[serde(default)]
        pub update_strategy: StatefulSetUpdateStrategy,
        /// Old revisions kept (10 when unset).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub revision_history_limit: Option<i32>,
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatefulSetStatus {
    #[serde(default, skip_serializing_if = "is_default")]
    pub observed_generation: i64,
    pub replicas: i32,
    pub ready_replicas: i32,
    pub available_replicas: i32,
    pub current_replicas: i32,
    pub updated_replicas: i32,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub current_revision: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub update_revision: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collision_count: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<StatefulSetCondition>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub label_selector: String,
}
