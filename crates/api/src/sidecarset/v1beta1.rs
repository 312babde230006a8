//! SidecarSet, apps.kruise.io/v1beta1 (storage version): sidecar containers injected into matching Pods at
//! creation and upgraded in place afterwards. Cluster-scoped.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, LocalObjectReference, ObjectFieldSelector, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::pub_types::{UpdatePriorityStrategy, UpdateScatterTerm};
use crate::schema::{is_default, preserve_unknown_fields_list};

pub const BEFORE_APP_CONTAINER: &str = "BeforeAppContainer";
pub const AFTER_APP_CONTAINER: &str = "AfterAppContainer";
pub const SHARE_VOLUME_POLICY_ENABLED: &str = "enabled";
pub const SHARE_VOLUME_POLICY_DISABLED: &str = "disabled";
pub const COLD_UPGRADE: &str = "ColdUpgrade";
pub const HOT_UPGRADE: &str = "HotUpgrade";
pub const TARGET_CONTAINERS_MODE_SUM: &str = "sum";
pub const TARGET_CONTAINERS_MODE_MAX: &str = "max";
pub const PATCH_POLICY_RETAIN: &str = "Retain";
pub const PATCH_POLICY_OVERWRITE: &str = "Overwrite";
pub const PATCH_POLICY_MERGE_PATCH_JSON: &str = "MergePatchJson";
pub const INJECT_REVISION_ALWAYS: &str = "Always";
pub const INJECT_REVISION_PARTIAL: &str = "Partial";
pub const UPDATE_ROLLING_UPDATE: &str = "RollingUpdate";
pub const UPDATE_NOT_UPDATE: &str = "NotUpdate";

sidecar_set_resource! {
    "v1beta1",
    #[serde(rename_all = "camelCase")]
    pub struct SidecarSetSpec {
        /// Pods (by label) to inject into. Required; an empty selector matches nothing.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub selector: Option<LabelSelector>,
        /// Namespaces (by label) whose Pods are injected; unset = all namespaces.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub namespace_selector: Option<LabelSelector>,
        /// Init containers injected (sorted by name) into new Pods only.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub init_containers: Vec<SidecarContainer>,
        /// Sidecar containers injected into new Pods and upgraded in place.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub containers: Vec<SidecarContainer>,
        /// Volumes the sidecars may mount.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        #[schemars(schema_with = "preserve_unknown_fields_list")]
        pub volumes: Vec<Volume>,
        /// How injected Pods are upgraded.
        #[serde(default)]
        pub update_strategy: SidecarSetUpdateStrategy,
        /// How (and which revision) new Pods are injected.
        #[serde(default)]
        pub injection_strategy: SidecarSetInjectionStrategy,
        /// Secrets for pulling the sidecar images, added to the Pod.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub image_pull_secrets: Vec<LocalObjectReference>,
        /// Revisions kept (default 10).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub revision_history_limit: Option<i32>,
        /// Annotations written on injected (and upgraded) Pods.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub patch_pod_metadata: Vec<SidecarSetPatchPodMetadata>,
        /// A user label for this version, copied to the ControllerRevision.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        pub custom_version: String,
    }
}

/// A sidecar: a core Container plus how it is injected and upgraded.
///
/// The Container part is schemaless in the CRD (as upstream), so the apiserver keeps Container fields
/// newer than this build.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct SidecarContainer {
    #[serde(flatten)]
    #[schemars(schema_with = "schemaless_container")]
    pub container: Container,
    /// `BeforeAppContainer` (default for containers) or `AfterAppContainer` (default for initContainers).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pod_inject_policy: String,
    #[serde(default)]
    pub upgrade_strategy: SidecarContainerUpgradeStrategy,
    /// With `enabled`, the sidecar also mounts every volume mount of the Pod's app containers.
    #[serde(default)]
    pub share_volume_policy: ShareVolumePolicy,
    /// With `enabled`, the sidecar also gets the app containers' volume devices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_volume_device_policy: Option<ShareVolumePolicy>,
    /// Env vars copied from app containers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub transfer_env: Vec<TransferEnvVar>,
    /// Resources computed from the app containers' at Pod creation (exclusive with `resources`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources_policy: Option<ResourcesPolicy>,
}

impl std::ops::Deref for SidecarContainer {
    type Target = Container;
    fn deref(&self) -> &Container {
        &self.container
    }
}

impl std::ops::DerefMut for SidecarContainer {
    fn deref_mut(&mut self) -> &mut Container {
        &mut self.container
    }
}

/// The flattened Container contributes no described properties (upstream marks it schemaless).
fn schemaless_container(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "object" })
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ShareVolumePolicy {
    /// `enabled` or `disabled` (default).
    #[serde(default, rename = "type", skip_serializing_if = "String::is_empty")]
    pub type_: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TransferEnvVar {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub source_container_name: String,
    /// The source container's name read from a Pod label or annotation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_container_name_from: Option<SourceContainerNameSource>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub env_name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_names: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceContainerNameSource {
    /// `metadata.labels['<key>']` or `metadata.annotations['<key>']`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_ref: Option<ObjectFieldSelector>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourcesPolicy {
    /// `sum` or `max` of the target containers' resources.
    #[schemars(extend("enum" = ["sum", "max"]))]
    pub target_containers_mode: String,
    /// Target containers by name (default `.*`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub target_containers_name_regex: String,
    pub resources_expr: ResourcesExpr,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ResourcesExpr {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ResourceExprs>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<ResourceExprs>,
}

/// Expressions (`+ - * /`, `max()`, `min()`, the variable `cpu` or `memory`) for one resource list.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ResourceExprs {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = super::resources_expr::MAX_EXPRESSION_LENGTH))]
    pub cpu: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = super::resources_expr::MAX_EXPRESSION_LENGTH))]
    pub memory: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SidecarContainerUpgradeStrategy {
    /// `ColdUpgrade` (default) or `HotUpgrade`. Immutable.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub upgrade_type: String,
    /// The image of the idle twin of a HotUpgrade sidecar.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hot_upgrade_empty_image: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SidecarSetPatchPodMetadata {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// `Retain` (default), `Overwrite` or `MergePatchJson`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub patch_policy: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SidecarSetInjectionStrategy {
    /// Do not inject into new Pods.
    #[serde(default, skip_serializing_if = "is_default")]
    pub paused: bool,
    /// Inject a given revision instead of the latest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<SidecarSetInjectRevision>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SidecarSetInjectRevision {
    /// The newest revision with this custom version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_version: Option<String>,
    /// A ControllerRevision name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision_name: Option<String>,
    /// `Always` (default) or `Partial`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(extend("enum" = ["Always", "Partial"]))]
    pub policy: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SidecarSetUpdateStrategy {
    /// `RollingUpdate` (default) or `NotUpdate`.
    #[serde(default, rename = "type", skip_serializing_if = "String::is_empty")]
    pub type_: String,
    #[serde(default, skip_serializing_if = "is_default")]
    pub paused: bool,
    /// Only Pods matching this selector are upgraded (canary).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// Pods (number or percentage of matched Pods) left at old revisions. Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<IntOrString>,
    /// Pods unavailable at once during the upgrade (percentages round up). Default 1; cannot be 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_strategy: Option<UpdatePriorityStrategy>,
    /// Spread Pods with these labels over the upgrade order (value `*` = every value of the key).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scatter_strategy: Vec<UpdateScatterTerm>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SidecarSetStatus {
    #[serde(default, skip_serializing_if = "is_default")]
    pub observed_generation: i64,
    /// Matched Pods that carry this SidecarSet's sidecars.
    pub matched_pods: i32,
    /// Matched Pods at the latest sidecar hash.
    pub updated_pods: i32,
    /// Matched Pods that are ready and whose sidecars are consistent.
    pub ready_pods: i32,
    #[serde(default, skip_serializing_if = "is_default")]
    pub updated_ready_pods: i32,
    /// Name of the latest ControllerRevision.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub latest_revision: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collision_count: Option<i32>,
    /// kruise-rs: Pods the selector matches that were created without this SidecarSet's sidecars
    /// (the Pod webhook was unreachable and its failure policy is Ignore, or the Pod predates the
    /// SidecarSet). They are reported with a `SidecarMissing` Warning Event; recreate them to inject.
    #[serde(default, skip_serializing_if = "is_default")]
    pub missed_injection_pods: i32,
}
