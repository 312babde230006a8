//! Advanced StatefulSet, apps.kruise.io/v1alpha1: the native fields plus the Kruise update strategy; no
//! reserveOrdinals, lifecycle, scaleStrategy, PVC retention, ordinals or volumeClaimUpdateStrategy, and no
//! updated-ready/available counts or volume claim status.

use k8s_openapi::api::apps::v1::StatefulSetCondition;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use super::v1beta1::{
    RollingUpdateStatefulSetStrategy, StatefulSetUpdateStrategy, UnorderedUpdateStrategy,
};
use crate::schema::{is_default, preserve_unknown_fields_untyped};

// The column attributes repeat `type_`/`priority` values by design.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "apps.kruise.io",
    version = "v1alpha1",
    kind = "StatefulSet",
    namespaced,
    status = "StatefulSetStatus",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.labelSelector"
    ),
    shortname = "sts",
    shortname = "asts",
    derive = "PartialEq",
    derive = "Default",
    doc = "StatefulSet is the Schema for the statefulsets API",
    printcolumn(
        name = "DESIRED",
        type_ = "integer",
        json_path = ".spec.replicas",
        description = "The desired number of pods."
    ),
    printcolumn(
        name = "CURRENT",
        type_ = "integer",
        json_path = ".status.replicas",
        description = "The number of currently all pods."
    ),
    printcolumn(
        name = "UPDATED",
        type_ = "integer",
        json_path = ".status.updatedReplicas",
        description = "The number of pods updated."
    ),
    printcolumn(
        name = "READY",
        type_ = "integer",
        json_path = ".status.readyReplicas",
        description = "The number of pods ready."
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
        description = "The containers of currently advanced statefulset."
    ),
    printcolumn(
        name = "IMAGES",
        type_ = "string",
        priority = 1,
        json_path = ".spec.template.spec.containers[*].image",
        description = "The images of currently advanced statefulset."
    )
)]
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
