//! ResourceDistribution, apps.kruise.io/v1alpha1 (the only version OpenKruise v1.9.0 serves, and
//! stores): a Secret or ConfigMap copied into every namespace its targets select. Cluster-scoped,
//! short name `distributor`. Validation is upstream's validating webhook
//! (`pkg/webhook/resourcedistribution/validating`), as a pure function.

use std::collections::BTreeSet;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::CustomResourceExt;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::field::{FieldError, Path};
use crate::schema::is_default;
use crate::validation::containers::check_config_key;
use crate::validation::{check_dns1123_label, check_dns1123_subdomain, validate_label_selector};

pub const KIND: &str = "ResourceDistribution";
pub const PLURAL: &str = "resourcedistributions";
pub const API_VERSION: &str = "apps.kruise.io/v1alpha1";

/// Annotation on every copy: the SHA-256 (hex) of the source's `spec.resource`.
pub const ANNOTATION_HASH: &str = "kruise.io/resourcedistribution.resource.hashcode";
/// Annotation on every copy: the name of the ResourceDistribution it comes from.
pub const ANNOTATION_FROM: &str = "kruise.io/resourcedistribution.resource.from";

/// The kinds a ResourceDistribution may distribute (core group only).
pub const SUPPORTED_KINDS: &[&str] = &["Secret", "ConfigMap"];

/// Condition types, in upstream's order (the status lists all six, every time).
pub const CONDITION_GET_FAILED: &str = "GetResourceFailed";
pub const CONDITION_CREATE_FAILED: &str = "CreateResourceFailed";
pub const CONDITION_UPDATE_FAILED: &str = "UpdateResourceFailed";
pub const CONDITION_DELETE_FAILED: &str = "DeleteResourceFailed";
pub const CONDITION_CONFLICT: &str = "ConflictOccurred";
pub const CONDITION_NAMESPACE_NOT_EXISTS: &str = "NamespaceNotExists";
pub const CONDITION_TYPES: [&str; 6] = [
    CONDITION_GET_FAILED,
    CONDITION_CREATE_FAILED,
    CONDITION_UPDATE_FAILED,
    CONDITION_DELETE_FAILED,
    CONDITION_CONFLICT,
    CONDITION_NAMESPACE_NOT_EXISTS,
];
/// The reason of a condition without failures.
pub const REASON_SUCCEEDED: &str = "Succeeded";

crate::crd::resource! {
    #[kube(
        version = "v1alpha1",
        kind = "ResourceDistribution",
        status = "ResourceDistributionStatus",
        shortname = "distributor",
        doc = "ResourceDistribution is the Schema for the resourcedistributions API.",
        printcolumn(
            name = "TOTAL",
            type_ = "integer",
            json_path = ".status.desired",
            description = "The desired number of desired distribution and syncs."
        ),
        printcolumn(
            name = "SUCCEED",
            type_ = "integer",
            json_path = ".status.succeeded",
            description = "The number of successful distribution and syncs."
        ),
        printcolumn(
            name = "FAILED",
            type_ = "integer",
            json_path = ".status.failed",
            description = "The number of failed distributions and syncs."
        )
    )]
    pub struct ResourceDistributionSpec {
        /// The complete object to distribute (a Secret or a ConfigMap; its namespace is ignored).
        #[schemars(schema_with = "embedded_resource")]
        pub resource: Value,
        /// The namespaces to distribute to.
        #[serde(default)]
        pub targets: ResourceDistributionTargets,
    }
}

/// An embedded object whose fields are not described: controller-gen's `RawExtension` with
/// `+kubebuilder:pruning:PreserveUnknownFields` and `EmbeddedResource`.
fn embedded_resource(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-embedded-resource": true,
        "x-kubernetes-preserve-unknown-fields": true
    })
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceDistributionTargets {
    /// Every namespace but the excluded ones (and kube-system, kube-public: upstream leaves them
    /// to the excluded list; so does kruise-rs).
    #[serde(default, skip_serializing_if = "is_default")]
    pub all_namespaces: bool,
    #[serde(default, skip_serializing_if = "is_default")]
    pub excluded_namespaces: ResourceDistributionTargetNamespaces,
    #[serde(default, skip_serializing_if = "is_default")]
    pub included_namespaces: ResourceDistributionTargetNamespaces,
    #[serde(default, skip_serializing_if = "selector_is_unset")]
    pub namespace_label_selector: LabelSelector,
}

fn selector_is_unset(selector: &LabelSelector) -> bool {
    *selector == LabelSelector::default()
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ResourceDistributionTargetNamespaces {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub list: Vec<ResourceDistributionNamespace>,
}

impl ResourceDistributionTargetNamespaces {
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.list.iter().map(|n| n.name.as_str())
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ResourceDistributionNamespace {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceDistributionStatus {
    /// Namespaces the resource should be in.
    #[serde(default, skip_serializing_if = "is_default")]
    pub desired: i32,
    /// Of those, the ones where it is, up to date.
    #[serde(default, skip_serializing_if = "is_default")]
    pub succeeded: i32,
    /// `desired - succeeded`.
    #[serde(default, skip_serializing_if = "is_default")]
    pub failed: i32,
    #[serde(default, skip_serializing_if = "is_default")]
    pub observed_generation: i64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<ResourceDistributionCondition>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceDistributionCondition {
    #[serde(rename = "type")]
    pub type_: String,
    /// `True` when the failure happened in some namespace, `False` otherwise.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// The namespaces where it happened (upstream's JSON name, singular).
    #[serde(
        default,
        rename = "failedNamespace",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub failed_namespaces: Vec<String>,
}

/// The CRD, served and stored in v1alpha1 only, as upstream's.
pub fn crd() -> CustomResourceDefinition {
    crate::crd::single_version(ResourceDistribution::crd())
}

/// The `(apiVersion, kind, name)` of an embedded resource, each empty when absent.
pub fn identity(resource: &Value) -> (&str, &str, &str) {
    let text = |pointer: &str| resource.pointer(pointer).and_then(Value::as_str);
    (
        text("/apiVersion").unwrap_or_default(),
        text("/kind").unwrap_or_default(),
        text("/metadata/name").unwrap_or_default(),
    )
}

/// Whether `resource` is an object of a kind ResourceDistribution distributes (`v1` Secret or
/// ConfigMap; upstream compares group and kind).
pub fn supported(resource: &Value) -> bool {
    let (api_version, kind, _) = identity(resource);
    let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
    !api_version.is_empty() && group.is_empty() && SUPPORTED_KINDS.contains(&kind)
}

/// Upstream's message for a kind it does not distribute (`supportedGKList` printed by Go).
const UNSUPPORTED: &str =
    "unknown or unsupported resource GroupKind, only support [/, Kind=Secret /, Kind=ConfigMap]";

/// Create (`old` = None) and update validation of the spec, as upstream's webhook: the resource is
/// present, a Secret or ConfigMap, named, with valid keys; its apiVersion, kind and name never
/// change; the target namespace names are valid and none is both included and excluded; the label
/// selector is valid. (Upstream also dry-runs the resource's creation; the checks here are those
/// of the apiserver that matter for a Secret or ConfigMap: its name and its keys.)
pub fn validate(new: &ResourceDistribution, old: Option<&ResourceDistribution>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let spec = Path::new("spec");
    let resource_path = spec.child("resource");
    let resource = &new.spec.resource;
    if resource.as_object().is_none_or(|o| o.is_empty()) {
        errors.push(FieldError::invalid(
            &resource_path,
            "null",
            "empty resource is not allowed",
        ));
    } else if !supported(resource) {
        let (api_version, kind, _) = identity(resource);
        errors.push(FieldError::invalid(
            &resource_path,
            format!("{api_version}, Kind={kind}"),
            UNSUPPORTED,
        ));
    } else if let Some(old) = old
        && supported(&old.spec.resource)
        && identity(resource) != identity(&old.spec.resource)
    {
        errors.push(FieldError::invalid(
            &resource_path,
            "null",
            "resource apiVersion, kind, and name are immutable",
        ));
    } else {
        validate_resource(resource, &resource_path, &mut errors);
    }
    validate_targets(&new.spec.targets, &spec.child("targets"), &mut errors);
    errors
}

/// What the apiserver would refuse in the Secret or ConfigMap itself: a missing or invalid name,
/// invalid data keys.
fn validate_resource(resource: &Value, path: &Path, errors: &mut Vec<FieldError>) {
    let (_, _, name) = identity(resource);
    let name_path = path.child("metadata").child("name");
    if name.is_empty() {
        errors.push(FieldError::required(
            &name_path,
            "name or generateName is required",
        ));
    } else if let Err(message) = check_dns1123_subdomain(name) {
        errors.push(FieldError::invalid(&name_path, name, message));
    }
    for field in ["data", "stringData", "binaryData"] {
        let Some(map) = resource.get(field).and_then(Value::as_object) else {
            continue;
        };
        for key in map.keys() {
            if let Err(message) = check_config_key(key) {
                errors.push(FieldError::invalid(&path.child(field), key, message));
            }
        }
    }
}

fn validate_targets(
    targets: &ResourceDistributionTargets,
    path: &Path,
    errors: &mut Vec<FieldError>,
) {
    let mut included = BTreeSet::new();
    for name in targets.included_namespaces.names() {
        included.insert(name);
        if let Err(message) = check_dns1123_label(name) {
            errors.push(FieldError::invalid(
                &path.child("includedNamespaces"),
                name,
                message,
            ));
        }
    }
    let mut conflicted = Vec::new();
    for name in targets.excluded_namespaces.names() {
        if let Err(message) = check_dns1123_label(name) {
            errors.push(FieldError::invalid(
                &path.child("excludedNamespaces"),
                name,
                message,
            ));
        }
        if included.contains(name) {
            conflicted.push(name);
        }
    }
    if !conflicted.is_empty() {
        errors.push(FieldError::invalid(
            path,
            format!("{conflicted:?}"),
            format!(
                "ambiguous targets because namespace {conflicted:?} is in both IncludedNamespaces.List and ExcludedNamespaces.List"
            ),
        ));
    }
    validate_label_selector(
        &targets.namespace_label_selector,
        &path.child("namespaceLabelSelector"),
        errors,
    );
}

#[cfg(test)]
mod tests;

/// The value of [`ANNOTATION_HASH`]: SHA-256, in hex, of the resource's JSON (upstream hashes the
/// raw bytes the apiserver stored; kruise-rs hashes the JSON with its keys sorted, so the value
/// does not depend on how a client ordered them).
pub fn resource_hash(resource: &Value) -> String {
    use sha2::{Digest, Sha256};
    let bytes = serde_json::to_vec(resource).unwrap_or_default();
    Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
