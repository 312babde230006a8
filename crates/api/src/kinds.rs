//! The six workload kinds behind one interface, so that the webhook (defaulting, validation, conversion)
//! and the CRD generator treat them alike. Each kind module implements [`KindApi`]; [`Kind`] dispatches on
//! the kind name of an object in JSON form.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::field::FieldError;

pub const GROUP: &str = "apps.kruise.io";
pub const V1ALPHA1: &str = "apps.kruise.io/v1alpha1";
pub const V1BETA1: &str = "apps.kruise.io/v1beta1";

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
    type V1alpha1: Serialize + DeserializeOwned;
    type V1beta1: Serialize + DeserializeOwned;

    fn to_v1beta1(object: Self::V1alpha1) -> Self::V1beta1;
    fn to_v1alpha1(object: Self::V1beta1) -> Self::V1alpha1;
    /// OpenKruise's defaults (`apis/apps/defaults`), including Pod template defaults.
    fn default(object: &mut Self::V1beta1);
    /// Create (`old` = None) or update validation; every error names its field.
    fn validate(object: &Self::V1beta1, old: Option<&Self::V1beta1>) -> Vec<FieldError>;
    /// The CRD with both versions, v1beta1 stored, conversion by webhook.
    fn crd() -> CustomResourceDefinition;
}

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

fn default_as<K: KindApi>(object: Value) -> Result<Value, Error> {
    let mut typed: K::V1beta1 = decode(object)?;
    K::default(&mut typed);
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
                match self { $(Kind::$variant => default_as::<$api>(object)),* }
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
}

/// Converts any apps.kruise.io object, dispatching on its `kind`.
pub fn convert(object: Value, to: &str) -> Result<Value, Error> {
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    Kind::from_kind(kind)?.convert(object, to)
}
