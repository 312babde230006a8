//! Schema helpers for CRD generation. Pod templates, PVC templates and similar embedded Kubernetes objects
//! are schemaless in OpenKruise's CRDs (`x-kubernetes-preserve-unknown-fields`): the apiserver keeps every
//! field, including fields newer than this build knows, and the CRDs stay small.

use schemars::{Schema, SchemaGenerator, json_schema};

/// An object whose fields are not described (and not pruned).
pub fn preserve_unknown_fields(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true })
}

/// A list of such objects.
pub fn preserve_unknown_fields_list(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": { "type": "object", "x-kubernetes-preserve-unknown-fields": true }
    })
}

/// A field whose value is not described at all (no `type`), as controller-gen emits for
/// `+kubebuilder:validation:Schemaless` on a list such as StatefulSet `volumeClaimTemplates`.
pub fn preserve_unknown_fields_untyped(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "x-kubernetes-preserve-unknown-fields": true })
}

/// `serde(skip_serializing_if)` for zero values, mirroring Go's `omitempty`.
pub fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}
