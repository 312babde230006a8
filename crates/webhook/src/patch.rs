//! The JSON patch a mutating webhook returns: from the object as received to the defaulted object.
//!
//! Only `add` and `replace` operations are produced. Defaulting never removes anything, and a field absent
//! from the defaulted form is a field the typed model does not know (a newer API field) — which must be
//! kept, not deleted.

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation, ReplaceOperation};
use serde_json::Value;

/// Operations turning `original` into `mutated`, ignoring what `mutated` lacks.
pub fn additive_diff(original: &Value, mutated: &Value) -> Patch {
    let mut operations = Vec::new();
    walk(original, mutated, &mut PointerBuf::new(), &mut operations);
    Patch(operations)
}

fn walk(original: &Value, mutated: &Value, at: &mut PointerBuf, out: &mut Vec<PatchOperation>) {
    match (original, mutated) {
        (Value::Object(before), Value::Object(after)) => {
            for (key, value) in after {
                at.push_back(key.as_str());
                match before.get(key) {
                    Some(previous) => walk(previous, value, at, out),
                    None => out.push(PatchOperation::Add(AddOperation {
                        path: at.clone(),
                        value: value.clone(),
                    })),
                }
                at.pop_back();
            }
        }
        (Value::Array(before), Value::Array(after)) if before.len() == after.len() => {
            for (index, (previous, value)) in before.iter().zip(after).enumerate() {
                at.push_back(index);
                walk(previous, value, at, out);
                at.pop_back();
            }
        }
        (before, after) if before != after => {
            out.push(PatchOperation::Replace(ReplaceOperation {
                path: at.clone(),
                value: after.clone(),
            }));
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn apply(mut doc: Value, patch: &Patch) -> Value {
        json_patch::patch(&mut doc, patch).expect("patch applies");
        doc
    }

    #[test]
    fn adds_and_replaces_but_never_removes() {
        let original = json!({
            "spec": {"replicas": 2, "unknownField": "keep", "list": [{"a": 1}, {"b": 2}]},
            "metadata": {"name": "x"}
        });
        let mutated = json!({
            "spec": {"replicas": 3, "partition": 0, "list": [{"a": 1, "c": 3}, {"b": 2}]},
            "metadata": {"name": "x"}
        });
        let patch = additive_diff(&original, &mutated);
        let result = apply(original, &patch);
        assert_eq!(result["spec"]["replicas"], 3);
        assert_eq!(result["spec"]["partition"], 0);
        assert_eq!(result["spec"]["unknownField"], "keep");
        assert_eq!(result["spec"]["list"][0]["c"], 3);
        assert_eq!(patch.0.len(), 3, "{patch:?}");
    }

    #[test]
    fn keys_with_slashes_are_escaped() {
        let original = json!({"metadata": {"annotations": {}}});
        let mutated = json!({"metadata": {"annotations": {"kruise.io/sidecarset-hash": "h"}}});
        let patch = additive_diff(&original, &mutated);
        assert_eq!(apply(original, &patch), mutated);
    }

    #[test]
    fn identical_objects_need_no_patch() {
        let doc = json!({"a": [1, 2], "b": {"c": null}});
        assert!(additive_diff(&doc, &doc).0.is_empty());
    }
}
