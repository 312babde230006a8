//! SidecarSet, apps.kruise.io/v1alpha1: the v1beta1 schema plus `namespace` (a single namespace, which
//! wins over `namespaceSelector`) and minus `customVersion` (carried by the label
//! `apps.kruise.io/sidecarset-custom-version`).

use k8s_openapi::api::core::v1::{LocalObjectReference, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::schema::preserve_unknown_fields_list;

pub use super::v1beta1::{
    ResourceExprs, ResourcesExpr, ResourcesPolicy, ShareVolumePolicy, SidecarContainer,
    SidecarContainerUpgradeStrategy, SidecarSetInjectRevision, SidecarSetInjectionStrategy,
    SidecarSetPatchPodMetadata, SidecarSetStatus, SidecarSetUpdateStrategy,
    SourceContainerNameSource, TransferEnvVar,
};

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "apps.kruise.io",
    version = "v1alpha1",
    kind = "SidecarSet",
    status = "SidecarSetStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "SidecarSet is the Schema for the sidecarsets API",
    printcolumn(
        name = "MATCHED",
        type_ = "integer",
        json_path = ".status.matchedPods",
        description = "The number of pods matched."
    ),
    printcolumn(
        name = "UPDATED",
        type_ = "integer",
        json_path = ".status.updatedPods",
        description = "The number of pods matched and updated."
    ),
    printcolumn(
        name = "READY",
        type_ = "integer",
        json_path = ".status.readyPods",
        description = "The number of pods matched and ready."
    ),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC."
    )
)]
#[serde(rename_all = "camelCase")]
pub struct SidecarSetSpec {
    /// Pods (by label) to inject into. Required; an empty selector matches nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// Only Pods of this namespace are injected; wins over `namespaceSelector`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Namespaces (by label) whose Pods are injected; unset = all namespaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub init_containers: Vec<SidecarContainer>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<SidecarContainer>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "preserve_unknown_fields_list")]
    pub volumes: Vec<Volume>,
    #[serde(default)]
    pub update_strategy: SidecarSetUpdateStrategy,
    #[serde(default)]
    pub injection_strategy: SidecarSetInjectionStrategy,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_history_limit: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patch_pod_metadata: Vec<SidecarSetPatchPodMetadata>,
}
