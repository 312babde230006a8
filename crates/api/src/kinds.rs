//! The six workload kinds behind one interface, so that the webhook (defaulting, validation, conversion)
//! and the CRD generator treat them alike. Each kind module implements [`KindApi`]; [`Kind`] dispatches on
//! the kind name of an object in JSON form.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::field::FieldError;

pub const GROUP: &str = "apps.kruise.io";
pub const V1ALPHA1: &str = "apps.kruise.io/v1alpha1";
pub const V1BETA1: &str = "apps.kruise.io/v1beta1";

/// How defaulting treats the Pod templates a workload embeds. OpenKruise's workload webhooks give a
/// template Kubernetes' Pod defaults on create and on an update that changes the template, never
/// with the `TemplateNoDefaults` gate; `DefaultHostNetworkHostPortsInPodTemplates` also defaults
/// `hostPort` to `containerPort` in hostNetwork templates, as Kubernetes did before v1.28.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Defaults {
    pub pod_templates: bool,
    pub host_network_host_ports: bool,
}

impl Default for Defaults {
    fn default() -> Self {
        Self {
            pod_templates: true,
            host_network_host_ports: false,
        }
    }
}

/// What one kind provides. Defaulting and validation work on v1beta1, the storage version; admission
/// webhooks are registered for v1beta1 with `matchPolicy: Equivalent`, so the apiserver converts a v1alpha1
/// request before it reaches them.
pub trait KindApi {
    const KIND: &'static str;
    const PLURAL: &'static str;
    /// JSON pointers (same in both versions) whose content is copied verbatim through conversion, so that
    /// fields newer than this build (in Pod templates, say) survive it.
    const RAW_PATHS: &'static [&'static str];
    /// JSON pointers (same in both versions) of embedded object metadata whose labels and annotations the
    /// conversion may change: everything else there (fields such as Go's `creationTimestamp: null`) is
    /// copied verbatim.
    const RAW_METADATA_PATHS: &'static [&'static str] = &[];
    type V1alpha1: Serialize + DeserializeOwned + CustomResourceExt;
    type V1beta1: Serialize + DeserializeOwned + CustomResourceExt;

    fn to_v1beta1(object: Self::V1alpha1) -> Self::V1beta1;
    fn to_v1alpha1(object: Self::V1beta1) -> Self::V1alpha1;
    /// OpenKruise's defaults (`apis/apps/defaults`); `defaults` says whether embedded Pod templates
    /// get Kubernetes' Pod defaults, and which.
    fn default_with(object: &mut Self::V1beta1, defaults: &Defaults);
    /// OpenKruise's defaults, Pod template defaults included (a create with the default gates).
    fn default(object: &mut Self::V1beta1) {
        Self::default_with(object, &Defaults::default());
    }
    /// Create (`old` = None) or update validation; every error names its field.
    fn validate(object: &Self::V1beta1, old: Option<&Self::V1beta1>) -> Vec<FieldError>;
    /// The CRD with both versions, v1beta1 stored, conversion by webhook: every kind merges the CRDs
    /// kube derives for its two version types the same way, so this is written once here.
    fn crd() -> CustomResourceDefinition {
        crate::crd::assemble(Self::V1alpha1::crd(), Self::V1beta1::crd())
    }
}

/// `to_v1beta1` and `to_v1alpha1` of a kind whose two versions have the same schema and differ only in
/// how the Rust types wrap it: metadata and status move as they are, and the spec's fields move from one
/// wrapper to the other. Written once here for the kinds that are so (BroadcastJob, ImagePullJob,
/// ImageListPullJob, NodeImage). `same_schema_conversion!(Kind, AlphaSpec)`: the v1alpha1 spec
/// `AlphaSpec` holds the v1beta1 spec as `fields`; `same_schema_conversion!(Kind, AlphaSpec, BetaSpec)`:
/// both versions' specs hold the same fields as `fields`. To be used inside `impl KindApi`, with the
/// kind's `v1alpha1` and `v1beta1` modules in scope.
macro_rules! same_schema_conversion {
    ($kind:ident, $alpha_spec:ident) => {
        fn to_v1beta1(object: v1alpha1::$kind) -> v1beta1::$kind {
            v1beta1::$kind {
                metadata: object.metadata,
                spec: object.spec.fields,
                status: object.status,
            }
        }

        fn to_v1alpha1(object: v1beta1::$kind) -> v1alpha1::$kind {
            v1alpha1::$kind {
                metadata: object.metadata,
                spec: v1alpha1::$alpha_spec {
                    fields: object.spec,
                },
                status: object.status,
            }
        }
    };
    ($kind:ident, $alpha_spec:ident, $beta_spec:ident) => {
        fn to_v1beta1(object: v1alpha1::$kind) -> v1beta1::$kind {
            v1beta1::$kind {
                metadata: object.metadata,
                spec: v1beta1::$beta_spec {
                    fields: object.spec.fields,
                },
                status: object.status,
            }
        }

        fn to_v1alpha1(object: v1beta1::$kind) -> v1alpha1::$kind {
            v1alpha1::$kind {
                metadata: object.metadata,
                spec: v1alpha1::$alpha_spec {
                    fields: object.spec.fields,
                },
                status: object.status,
            }
        }
    };
}
pub(crate) use same_schema_conversion;

/// Errors of the JSON-level operations.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("unknown kind {0:?} in group apps.kruise.io")]
    UnknownKind(String),
    #[error(
        "unsupported apiVersion {0:?} (expected apps.kruise.io/v1alpha1 or apps.kruise.io/v1beta1)"
    )]
    UnsupportedVersion(String),
    /// The object does not fit the schema; the message names the field.
    #[error("{0}")]
    Decode(String),
    #[error("encoding {kind}: {source}")]
    Encode {
        kind: &'static str,
        source: serde_json::Error,
    },
}

/// Decodes JSON into a typed object; a mismatch names the field (`spec.replicas: invalid type ...`).
pub fn decode<T: DeserializeOwned>(value: Value) -> Result<T, Error> {
    serde_path_to_error::deserialize(value).map_err(|error| {
        let path = error.path().to_string();
        Error::Decode(format!("{path}: {}", error.into_inner()))
    })
}

fn encode<K: KindApi, T: Serialize>(object: &T) -> Result<Value, Error> {
    serde_json::to_value(object).map_err(|source| Error::Encode {
        kind: K::KIND,
        source,
    })
}

/// The JSON operations for kind `K`.
fn convert_as<K: KindApi>(object: Value, to: &str) -> Result<Value, Error> {
    let from = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if from == to {
        return Ok(object);
    }
    let mut converted = match (from.as_str(), to) {
        (V1ALPHA1, V1BETA1) => encode::<K, _>(&K::to_v1beta1(decode(object.clone())?))?,
        (V1BETA1, V1ALPHA1) => encode::<K, _>(&K::to_v1alpha1(decode(object.clone())?))?,
        (V1ALPHA1 | V1BETA1, other) => return Err(Error::UnsupportedVersion(other.to_string())),
        (other, _) => return Err(Error::UnsupportedVersion(other.to_string())),
    };
    for pointer in K::RAW_PATHS {
        if let (Some(raw), Some(slot)) = (object.pointer(pointer), converted.pointer_mut(pointer)) {
            *slot = raw.clone();
        }
    }
    for pointer in K::RAW_METADATA_PATHS {
        if let (Some(Value::Object(raw)), Some(Value::Object(slot))) =
            (object.pointer(pointer), converted.pointer_mut(pointer))
        {
            let mut merged = raw.clone();
            for key in ["labels", "annotations"] {
                match slot.remove(key) {
                    Some(value) => merged.insert(key.to_string(), value),
                    None => merged.remove(key),
                };
            }
            *slot = merged;
        }
    }
    if let Some(map) = converted.as_object_mut() {
        map.insert("apiVersion".into(), Value::String(to.to_string()));
        map.insert("kind".into(), Value::String(K::KIND.to_string()));
    }
    Ok(converted)
}

fn default_as<K: KindApi>(object: Value, defaults: &Defaults) -> Result<Value, Error> {
    let mut typed: K::V1beta1 = decode(object)?;
    K::default_with(&mut typed, defaults);
    encode::<K, _>(&typed)
}

fn validate_as<K: KindApi>(object: Value, old: Option<Value>) -> Result<Vec<FieldError>, Error> {
    let typed: K::V1beta1 = decode(object)?;
    let old: Option<K::V1beta1> = old.map(decode).transpose()?;
    Ok(K::validate(&typed, old.as_ref()))
}

macro_rules! kinds {
    ($($variant:ident => $api:path),* $(,)?) => {
        /// The apps.kruise.io workload kinds kruise-rs serves.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Kind { $($variant),* }

        impl Kind {
            pub const ALL: &'static [Kind] = &[$(Kind::$variant),*];

            pub fn from_kind(kind: &str) -> Result<Self, Error> {
                match kind {
                    $(<$api as KindApi>::KIND => Ok(Kind::$variant),)*
                    other => Err(Error::UnknownKind(other.to_string())),
                }
            }

            pub fn name(self) -> &'static str {
                match self { $(Kind::$variant => <$api as KindApi>::KIND),* }
            }

            /// Lowercase plural, as in the resource path and webhook paths.
            pub fn plural(self) -> &'static str {
                match self { $(Kind::$variant => <$api as KindApi>::PLURAL),* }
            }

            /// Converts an object (any served version) to `to` (`apps.kruise.io/v1alpha1|v1beta1`).
            pub fn convert(self, object: Value, to: &str) -> Result<Value, Error> {
                match self { $(Kind::$variant => convert_as::<$api>(object, to)),* }
            }

            /// The defaulted form of a v1beta1 object.
            pub fn default_object(self, object: Value) -> Result<Value, Error> {
                self.default_object_with(object, &Defaults::default())
            }

            /// [`Self::default_object`] with the given treatment of Pod templates.
            pub fn default_object_with(self, object: Value, defaults: &Defaults) -> Result<Value, Error> {
                match self { $(Kind::$variant => default_as::<$api>(object, defaults)),* }
            }

            /// Validation errors of a v1beta1 object (and its previous version on update).
            pub fn validate(self, object: Value, old: Option<Value>) -> Result<Vec<FieldError>, Error> {
                match self { $(Kind::$variant => validate_as::<$api>(object, old)),* }
            }

            /// Whether objects of the kind live in a namespace (SidecarSet does not).
            pub fn namespaced(self) -> bool {
                self.crd().spec.scope == "Namespaced"
            }

            pub fn crd(self) -> CustomResourceDefinition {
                match self { $(Kind::$variant => <$api as KindApi>::crd()),* }
            }
        }
    };
}

kinds! {
    CloneSet => crate::cloneset::Api,
    StatefulSet => crate::statefulset::Api,
    SidecarSet => crate::sidecarset::Api,
    UnitedDeployment => crate::uniteddeployment::Api,
    BroadcastJob => crate::broadcastjob::Api,
    DaemonSet => crate::daemonset::Api,
    AdvancedCronJob => crate::advancedcronjob::Api,
    ImagePullJob => crate::imagepulljob::ImagePullJobApi,
    ImageListPullJob => crate::imagepulljob::ImageListPullJobApi,
    NodeImage => crate::imagepulljob::NodeImageApi,
}

/// Converts any apps.kruise.io object, dispatching on its `kind`.
pub fn convert(object: Value, to: &str) -> Result<Value, Error> {
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    Kind::from_kind(kind)?.convert(object, to)
}

impl Kind {
    /// Where the kind keeps the Pod template whose Kubernetes defaults OpenKruise's webhook applies
    /// only on create and on an update that changes it (`None`: the kind has no such rule).
    pub fn defaulted_template(self) -> Option<&'static str> {
        match self {
            Kind::CloneSet
            | Kind::StatefulSet
            | Kind::UnitedDeployment
            | Kind::BroadcastJob
            | Kind::AdvancedCronJob => Some("/spec/template"),
            Kind::SidecarSet
            | Kind::DaemonSet
            | Kind::ImagePullJob
            | Kind::ImageListPullJob
            | Kind::NodeImage => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn template(host_network: bool) -> Value {
        json!({"metadata": {"labels": {"app": "a"}}, "spec": {
            "hostNetwork": host_network,
            "containers": [{"name": "c", "image": "nginx:1.25", "ports": [{"containerPort": 80}]}]}})
    }

    /// Which Pod template defaults each gate combination gives, for every kind with a template.
    #[test]
    fn template_defaults_follow_the_gates() {
        let objects = [
            (
                Kind::CloneSet,
                json!({"spec": {"selector": {"matchLabels": {"app": "a"}}, "template": template(true)}}),
            ),
            (
                Kind::StatefulSet,
                json!({"spec": {"selector": {"matchLabels": {"app": "a"}}, "template": template(true)}}),
            ),
            (
                Kind::BroadcastJob,
                json!({"spec": {"template": template(true)}}),
            ),
            (
                Kind::UnitedDeployment,
                json!({"spec": {"selector": {"matchLabels": {"app": "a"}},
                "template": {"statefulSetTemplate": {"metadata": {"labels": {"app": "a"}},
                    "spec": {"selector": {"matchLabels": {"app": "a"}}, "template": template(true)}}},
                "topology": {"subsets": [{"name": "s"}]}}}),
            ),
        ];
        // (pod_templates, host_network_host_ports) → (restartPolicy defaulted, hostPort)
        let cases = [
            ((true, false), (true, None)),
            ((true, true), (true, Some(80))),
            ((false, false), (false, None)),
            ((false, true), (false, None)),
        ];
        for (kind, spec) in objects {
            let mut object = spec.clone();
            object["apiVersion"] = json!(V1BETA1);
            object["kind"] = json!(kind.name());
            object["metadata"] = json!({"name": "x", "namespace": "ns"});
            for ((pod_templates, host_ports), (defaulted, host_port)) in cases {
                let defaults = Defaults {
                    pod_templates,
                    host_network_host_ports: host_ports,
                };
                let out = kind
                    .default_object_with(object.clone(), &defaults)
                    .expect("defaults");
                let pod = if kind == Kind::UnitedDeployment {
                    &out["spec"]["template"]["statefulSetTemplate"]["spec"]["template"]["spec"]
                } else {
                    &out["spec"]["template"]["spec"]
                };
                let case = format!("{kind:?} {defaults:?}");
                assert_eq!(pod["restartPolicy"].is_string(), defaulted, "{case}");
                assert_eq!(
                    pod["containers"][0]["ports"][0]["hostPort"].as_i64(),
                    host_port,
                    "{case}"
                );
            }
        }
    }
}
