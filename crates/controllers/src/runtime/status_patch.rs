//! The body of a merge patch that writes a whole status.
//!
//! The API types leave zero counters and empty strings out of their JSON, as upstream's
//! `omitempty` does, and a JSON merge patch keeps every field it does not mention. Sending a status
//! as-is would therefore never bring `updatedReadyPods` (or `updatedAvailableReplicas`, …) back to
//! 0: every top-level field the old status had and the new one omits is sent as `null`, which
//! removes it, so the stored status ends up exactly the new one.

use serde::Serialize;
use serde_json::{Map, Value};

/// `{"status": new}` plus a `null` for every field of `old` that `new` leaves out.
pub fn whole_status<S: Serialize>(old: Option<&S>, new: &S) -> Value {
    let mut body = match serde_json::to_value(new) {
        Ok(Value::Object(map)) => map,
        // A status struct always serializes to an object.
        _ => Map::new(),
    };
    if let Some(Ok(Value::Object(old))) = old.map(serde_json::to_value) {
        for key in old.keys() {
            body.entry(key.clone()).or_insert(Value::Null);
        }
    }
    let mut patch = Map::new();
    patch.insert("status".into(), Value::Object(body));
    Value::Object(patch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Serialize)]
    struct Status {
        matched: i32,
        #[serde(skip_serializing_if = "is_zero")]
        updated_ready: i32,
        #[serde(skip_serializing_if = "Option::is_none")]
        revision: Option<String>,
    }

    fn is_zero(v: &i32) -> bool {
        *v == 0
    }

    #[test]
    fn omitted_fields_are_cleared() {
        let status = |matched, updated_ready, revision: Option<&str>| Status {
            matched,
            updated_ready,
            revision: revision.map(str::to_owned),
        };
        // (old, new, patch)
        let cases = [
            (None, status(1, 0, None), json!({"status": {"matched": 1}})),
            (
                Some(status(3, 3, Some("r1"))),
                status(3, 0, Some("r2")),
                json!({"status": {"matched": 3, "updated_ready": null, "revision": "r2"}}),
            ),
            (
                Some(status(3, 3, Some("r1"))),
                status(0, 0, None),
                json!({"status": {"matched": 0, "updated_ready": null, "revision": null}}),
            ),
            (
                Some(status(0, 0, None)),
                status(2, 2, None),
                json!({"status": {"matched": 2, "updated_ready": 2}}),
            ),
        ];
        for (old, new, want) in cases {
            assert_eq!(whole_status(old.as_ref(), &new), want);
        }
    }

    #[test]
    fn merging_the_patch_yields_exactly_the_new_status() {
        let old = Status {
            matched: 3,
            updated_ready: 3,
            revision: Some("r1".into()),
        };
        let new = Status {
            matched: 3,
            updated_ready: 0,
            revision: None,
        };
        let mut stored = json!({"status": old_value(&old), "spec": {"x": 1}});
        json_patch::merge(&mut stored, &whole_status(Some(&old), &new));
        assert_eq!(stored, json!({"status": {"matched": 3}, "spec": {"x": 1}}));
    }

    fn old_value(s: &Status) -> Value {
        serde_json::to_value(s).unwrap_or_default()
    }
}
