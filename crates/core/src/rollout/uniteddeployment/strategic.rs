//! A strategic-merge patch of a Pod template (`apimachinery/pkg/util/strategicpatch` with the patch
//! metadata of `corev1.PodTemplateSpec`), as a UnitedDeployment subset `patch` is applied.
//!
//! Maps merge recursively and `null` deletes a key; the lists Kubernetes declares with
//! `patchStrategy:"merge"` merge element by element on their merge key (containers by `name`, ports by
//! `containerPort`, …); every other list is replaced. The `$patch` directive (`replace` on a map or in a
//! list, `delete` on a map or a list element) is honoured; other directives (`$retainKeys`,
//! `$setElementOrder/…`, `$deleteFromPrimitiveList/…`) only order or prune lists we replace anyway and are
//! dropped.

use serde_json::{Map, Value};

/// The merge key of a Pod template list that merges instead of being replaced, by field name. Within a Pod
/// template every such field name has one meaning, so the name alone decides.
fn merge_key(field: &str) -> Option<&'static str> {
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "resourceClaims"
        | "schedulingGates" => Some("name"),
        "ports" => Some("containerPort"),
        "volumeMounts" => Some("mountPath"),
        "volumeDevices" => Some("devicePath"),
        "hostAliases" => Some("ip"),
        "topologySpreadConstraints" => Some("topologyKey"),
        _ => None,
    }
}

const DIRECTIVE: &str = "$patch";

/// `original` with `patch` applied. An error names what could not be applied (an unknown directive, a
/// patch that is not an object).
pub fn strategic_merge(original: &Value, patch: &Value) -> Result<Value, String> {
    let Value::Object(patch) = patch else {
        return Err(format!("the patch must be a JSON object, not {patch}"));
    };
    let mut merged = match original {
        Value::Object(map) => map.clone(),
        _ => Map::new(),
    };
    merge_map(&mut merged, patch)?;
    Ok(Value::Object(merged))
}

fn merge_map(original: &mut Map<String, Value>, patch: &Map<String, Value>) -> Result<(), String> {
    match patch.get(DIRECTIVE).map(|d| d.as_str()) {
        None => {}
        Some(Some("replace")) => {
            original.clear();
            return merge_map(original, &without_directive(patch));
        }
        Some(Some("delete")) => {
            original.clear();
            return Ok(());
        }
        Some(other) => return Err(format!("unknown patch directive {other:?}")),
    }
    for (key, value) in patch {
        if key.starts_with('$') {
            continue;
        }
        match value {
            Value::Null => {
                original.remove(key);
            }
            Value::Object(inner) => {
                let slot = original
                    .entry(key.clone())
                    .or_insert_with(|| Value::Object(Map::new()));
                if !slot.is_object() {
                    *slot = Value::Object(Map::new());
                }
                if let Value::Object(target) = slot {
                    merge_map(target, inner)?;
                }
            }
            Value::Array(items) => match merge_key(key) {
                Some(merge_on) => {
                    let slot = original
                        .entry(key.clone())
                        .or_insert_with(|| Value::Array(Vec::new()));
                    if !slot.is_array() {
                        *slot = Value::Array(Vec::new());
                    }
                    if let Value::Array(target) = slot {
                        merge_list(target, items, merge_on)?;
                    }
                }
                None => {
                    original.insert(key.clone(), Value::Array(clean_list(items)?));
                }
            },
            other => {
                original.insert(key.clone(), other.clone());
            }
        }
    }
    Ok(())
}

fn without_directive(patch: &Map<String, Value>) -> Map<String, Value> {
    patch
        .iter()
        .filter(|(k, _)| k.as_str() != DIRECTIVE)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// A list element or value as it lands in the result: objects lose their directives and nulls.
fn clean(value: &Value) -> Result<Value, String> {
    match value {
        Value::Object(map) => {
            let mut out = Map::new();
            merge_map(&mut out, &without_directive(map))?;
            Ok(Value::Object(out))
        }
        other => Ok(other.clone()),
    }
}

fn clean_list(items: &[Value]) -> Result<Vec<Value>, String> {
    items.iter().map(clean).collect()
}

fn directive_of(item: &Value) -> Option<&str> {
    item.get(DIRECTIVE).and_then(Value::as_str)
}

fn merge_list(original: &mut Vec<Value>, patch: &[Value], key: &str) -> Result<(), String> {
    if patch
        .iter()
        .any(|item| directive_of(item) == Some("replace"))
    {
        *original = patch
            .iter()
            .filter(|item| directive_of(item) != Some("replace"))
            .map(clean)
            .collect::<Result<_, _>>()?;
        return Ok(());
    }
    for item in patch {
        let Value::Object(fields) = item else {
            original.push(item.clone());
            continue;
        };
        let id = fields.get(key);
        if directive_of(item) == Some("delete") {
            original.retain(|o| id.is_none() || o.get(key) != id);
            continue;
        }
        let existing = original
            .iter_mut()
            .find(|o| id.is_some() && o.get(key) == id);
        match existing {
            Some(Value::Object(target)) => merge_map(target, fields)?,
            _ => original.push(clean(item)?),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn table() {
        let template = json!({
            "metadata": {"labels": {"app": "web", "tier": "x"}},
            "spec": {
                "containers": [
                    {"name": "main", "image": "nginx:1", "env": [{"name": "A", "value": "1"}],
                     "ports": [{"containerPort": 80}]},
                    {"name": "side", "image": "busybox"}
                ],
                "tolerations": [{"key": "a", "operator": "Exists"}],
                "nodeSelector": {"disk": "ssd"}
            }
        });
        // (patch, expected result)
        let cases = [
            (
                json!({"metadata": {"labels": {"zone": "a", "tier": null}}}),
                json!({"metadata": {"labels": {"app": "web", "zone": "a"}}, "spec": template["spec"]}),
            ),
            (
                json!({"spec": {"containers": [{"name": "main", "image": "nginx:2",
                    "env": [{"name": "B", "value": "2"}]}]}}),
                json!({"metadata": template["metadata"], "spec": {
                    "containers": [
                        {"name": "main", "image": "nginx:2",
                         "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                         "ports": [{"containerPort": 80}]},
                        {"name": "side", "image": "busybox"}
                    ],
                    "tolerations": [{"key": "a", "operator": "Exists"}],
                    "nodeSelector": {"disk": "ssd"}
                }}),
            ),
            (
                json!({"spec": {"containers": [{"name": "side", "$patch": "delete"},
                                               {"name": "new", "image": "redis"}],
                                "tolerations": [{"key": "b", "operator": "Exists"}],
                                "nodeSelector": {"$patch": "replace", "zone": "b"}}}),
                json!({"metadata": template["metadata"], "spec": {
                    "containers": [
                        {"name": "main", "image": "nginx:1", "env": [{"name": "A", "value": "1"}],
                         "ports": [{"containerPort": 80}]},
                        {"name": "new", "image": "redis"}
                    ],
                    "tolerations": [{"key": "b", "operator": "Exists"}],
                    "nodeSelector": {"zone": "b"}
                }}),
            ),
            (
                json!({"spec": {"containers": [{"$patch": "replace"}, {"name": "only", "image": "x"}]}}),
                json!({"metadata": template["metadata"], "spec": {
                    "containers": [{"name": "only", "image": "x"}],
                    "tolerations": [{"key": "a", "operator": "Exists"}],
                    "nodeSelector": {"disk": "ssd"}
                }}),
            ),
        ];
        for (patch, want) in cases {
            assert_eq!(
                strategic_merge(&template, &patch),
                Ok(want),
                "patch {patch}"
            );
        }
    }

    #[test]
    fn bad_patches_are_errors() {
        assert!(strategic_merge(&json!({}), &json!([1])).is_err());
        assert!(strategic_merge(&json!({}), &json!({"spec": {"$patch": "merge-ish"}})).is_err());
    }
}
