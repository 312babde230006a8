//! SidecarSet, apps.kruise.io/v1alpha1: the v1beta1 schema plus `namespace` (a single namespace, which
//! wins over `namespaceSelector`) and minus `customVersion` (carried by the label
//! `apps.kruise.io/sidecarset-custom-version`).

use k8s_openapi::api::core::v1::{LocalObjectReference, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::schema::preserve_unknown_fields_list;

pub use super::v1beta1::{
    ResourceExprs, ResourcesExpr, ResourcesPolicy, ShareVolumePolicy, SidecarContainer,
    SidecarContainerUpgradeStrategy, SidecarSetInjectRevision, SidecarSetInjectionStrategy,
    SidecarSetPatchPodMetadata, SidecarSetStatus, SidecarSetUpdateStrategy,
    SourceContainerNameSource, TransferEnvVar,
};

sidecar_set_resource! {
    "v1alpha1",
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
}
