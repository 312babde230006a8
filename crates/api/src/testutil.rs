//! Helpers shared by the unit tests of several kinds.

use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::field::FieldError;

/// Merges `patch` into `base` (objects recursively, anything else replaced; null removes).
pub(crate) fn merge(base: &mut Value, patch: &Value) {
    match (base, patch) {
        (Value::Object(base), Value::Object(patch)) => {
            for (key, value) in patch {
                if value.is_null() {
                    base.remove(key);
                } else {
                    merge(base.entry(key.clone()).or_insert(Value::Null), value);
                }
            }
        }
        (base, patch) => *base = patch.clone(),
    }
}

/// The first of `errors` as text, empty when there is none.
pub(crate) fn first_error(errors: &[FieldError]) -> String {
    errors.first().map(ToString::to_string).unwrap_or_default()
}

/// An apps.kruise.io/v1beta1 object of `kind`, named `name` in namespace `default`, with `spec`.
pub(crate) fn decode_v1beta1<T: DeserializeOwned>(kind: &str, name: &str, spec: Value) -> T {
    let object = json!({
        "apiVersion": "apps.kruise.io/v1beta1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    });
    crate::kinds::decode(object).expect("test object decodes")
}

/// `spec` with the top-level fields of `extra` set over it (replaced whole, not merged).
pub(crate) fn with_top_level(mut spec: Value, extra: &Value) -> Value {
    if let (Some(map), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        map.extend(extra.clone());
    }
    spec
}

/// For each `(extra, want)`, asserts that `first_error_of(extra)` (the first validation error of a
/// valid object with `extra` in its spec) starts with `want`.
pub(crate) fn assert_first_errors(
    cases: &[(Value, &str)],
    first_error_of: impl Fn(Value) -> String,
) {
    for (extra, want) in cases {
        let first = first_error_of(extra.clone());
        assert!(
            first.starts_with(want),
            "spec {extra}: got {first:?}, want {want:?}"
        );
    }
}
