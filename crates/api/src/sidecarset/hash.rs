//! The two SidecarSet hashes OpenKruise writes on every SidecarSet (and records on every injected Pod), so
//! that kruise-rs and OpenKruise agree on which Pods run the latest sidecars:
//! - `kruise.io/sidecarset-hash` = SafeEncodeString(hex(sha256(json))) where json is Go's
//!   `json.Marshal(map{"containers": spec.containers})`, plus `"initContainers": spec.initContainers` (all
//!   of them) when any init container has `restartPolicy: Always`;
//! - `kruise.io/sidecarset-hash-without-image` = the same with every image blanked.
//!
//! The bytes must be Go's: map keys sorted, struct fields in Go declaration order with Go's `omitempty`
//! rules (a struct value is never omitted; a non-omitempty zero is written), quantities in Go's form,
//! strings escaped as Go escapes them (`<`, `>`, `&`, U+2028, U+2029 as `\u` escapes). The layout of the
//! Go structs is in `gotypes.rs`.

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::gotypes::SIDECAR_CONTAINER;
use super::v1beta1::{SidecarContainer, SidecarSet};
use crate::quantity::Quantity;

/// Annotation: hash of the sidecar containers.
pub const ANNOTATION_HASH: &str = "kruise.io/sidecarset-hash";
/// Annotation: hash of the sidecar containers with images blanked.
pub const ANNOTATION_HASH_WITHOUT_IMAGE: &str = "kruise.io/sidecarset-hash-without-image";

/// A Go struct field: JSON name, kind, `omitempty`.
#[derive(Clone, Copy, Debug)]
pub(super) struct F(pub &'static str, pub K, pub bool);

/// The kind of a Go value, as far as JSON encoding cares.
#[derive(Clone, Copy, Debug)]
pub(super) enum K {
    Str,
    Int,
    Bool,
    /// `resource.Quantity` (a struct: never omitted, zero value `"0"`).
    Quantity,
    /// `intstr.IntOrString` (a struct: never omitted, zero value `0`).
    IntOrString,
    Ptr(&'static K),
    Slice(&'static K),
    /// `map[string]T`, keys sorted.
    Map(&'static K),
    Struct(&'static [F]),
}

/// `kruise.io/sidecarset-hash` of a SidecarSet.
pub fn sidecarset_hash(object: &SidecarSet) -> String {
    hash_of(&object.spec.containers, &object.spec.init_containers, false)
}

/// `kruise.io/sidecarset-hash-without-image` of a SidecarSet.
pub fn sidecarset_hash_without_image(object: &SidecarSet) -> String {
    hash_of(&object.spec.containers, &object.spec.init_containers, true)
}

/// Writes both hash annotations.
pub fn set_hash_annotations(object: &mut SidecarSet) {
    let hash = sidecarset_hash(object);
    let without_image = sidecarset_hash_without_image(object);
    let annotations = object
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    annotations.insert(ANNOTATION_HASH.into(), hash);
    annotations.insert(ANNOTATION_HASH_WITHOUT_IMAGE.into(), without_image);
}

fn hash_of(
    containers: &[SidecarContainer],
    init_containers: &[SidecarContainer],
    blank_images: bool,
) -> String {
    let text = encode(containers, init_containers, blank_images);
    safe_encode(&hex(&Sha256::digest(text.as_bytes())))
}

/// The exact JSON text OpenKruise hashes.
pub fn encode(
    containers: &[SidecarContainer],
    init_containers: &[SidecarContainer],
    blank_images: bool,
) -> String {
    let mut out = String::from("{\"containers\":");
    encode_list(containers, blank_images, &mut out);
    if init_containers
        .iter()
        .any(|c| c.restart_policy.as_deref() == Some("Always"))
    {
        out.push_str(",\"initContainers\":");
        encode_list(init_containers, blank_images, &mut out);
    }
    out.push('}');
    out
}

fn encode_list(containers: &[SidecarContainer], blank_images: bool, out: &mut String) {
    if containers.is_empty() {
        // A nil slice in Go.
        out.push_str("null");
        return;
    }
    out.push('[');
    for (i, container) in containers.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let mut value = serde_json::to_value(container).unwrap_or(Value::Null);
        if blank_images && let Some(map) = value.as_object_mut() {
            map.remove("image");
        }
        encode_struct(&value, SIDECAR_CONTAINER, out);
    }
    out.push(']');
}

fn encode_struct(value: &Value, fields: &[F], out: &mut String) {
    let empty = serde_json::Map::new();
    let map = value.as_object().unwrap_or(&empty);
    out.push('{');
    let mut first = true;
    for F(name, kind, omit_empty) in fields {
        let field = map.get(*name).filter(|v| !v.is_null());
        if *omit_empty && is_empty(field, kind) {
            continue;
        }
        if !first {
            out.push(',');
        }
        first = false;
        crate::gojson::write_string(name, out);
        out.push(':');
        encode_value(field, kind, out);
    }
    out.push('}');
}

/// Go's `omitempty` test: false, 0, "", nil pointer, empty slice or map. Structs are never empty.
fn is_empty(value: Option<&Value>, kind: &K) -> bool {
    let Some(value) = value else {
        return !matches!(kind, K::Struct(_) | K::Quantity | K::IntOrString);
    };
    match kind {
        K::Str => value.as_str().is_none_or(str::is_empty),
        K::Int => value.as_i64() == Some(0),
        K::Bool => value.as_bool() != Some(true),
        K::Slice(_) => value.as_array().is_none_or(Vec::is_empty),
        K::Map(_) => value.as_object().is_none_or(serde_json::Map::is_empty),
        K::Ptr(_) | K::Struct(_) | K::Quantity | K::IntOrString => false,
    }
}

/// Encodes a value (`None` = absent: Go's zero value of the kind).
fn encode_value(value: Option<&Value>, kind: &K, out: &mut String) {
    match kind {
        K::Str => {
            crate::gojson::write_string(value.and_then(Value::as_str).unwrap_or_default(), out)
        }
        K::Int => out.push_str(
            &value
                .and_then(Value::as_i64)
                .unwrap_or_default()
                .to_string(),
        ),
        K::Bool => out.push_str(if value.and_then(Value::as_bool).unwrap_or_default() {
            "true"
        } else {
            "false"
        }),
        K::Quantity => {
            let text = match value {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => "0".into(),
            };
            match Quantity::parse(&text) {
                Ok(q) => crate::gojson::write_string(&q.go_string(), out),
                // Go could not have decoded it; write it as given.
                Err(_) => crate::gojson::write_string(&text, out),
            }
        }
        K::IntOrString => match value {
            Some(Value::String(s)) => crate::gojson::write_string(s, out),
            Some(Value::Number(n)) => out.push_str(&n.to_string()),
            _ => out.push('0'),
        },
        K::Ptr(inner) => match value {
            None => out.push_str("null"),
            Some(v) => encode_value(Some(v), inner, out),
        },
        K::Slice(inner) => match value.and_then(Value::as_array) {
            None => out.push_str("null"),
            Some(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    encode_value(Some(item).filter(|v| !v.is_null()), inner, out);
                }
                out.push(']');
            }
        },
        K::Map(inner) => match value.and_then(Value::as_object) {
            None => out.push_str("null"),
            Some(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                out.push('{');
                for (i, key) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    crate::gojson::write_string(key, out);
                    out.push(':');
                    encode_value(map.get(key).filter(|v| !v.is_null()), inner, out);
                }
                out.push('}');
            }
        },
        K::Struct(fields) => encode_struct(value.unwrap_or(&Value::Null), fields, out),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub use crate::gojson::safe_encode;
