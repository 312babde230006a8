//! The fields Go's `encoding/json` writes although they hold nothing, added to revision data so that
//! the bytes hashed here are the bytes OpenKruise hashes.
//!
//! OpenKruise builds a revision by marshalling its typed object with Go's `json.Marshal`. Two kinds of
//! field survive there even when empty, while k8s-openapi (whose optional fields are `Option`s)
//! leaves them out:
//! - a struct-valued field: `omitempty` never omits a struct, so `metadata.creationTimestamp` becomes
//!   `null` (a zero `metav1.Time`), a container's `resources` `{}`, a CloneSet's `scaleStrategy` `{}`;
//! - a field without `omitempty`: a nil pointer or slice becomes `null` (`selector`, `containers`),
//!   an empty string `""` (a native StatefulSet's `serviceName`), a zero `resource.Quantity` `"0"`
//!   (`resourceFieldRef.divisor`).
//!
//! Without them a template hashes to another name than OpenKruise's (`examples/cloneset-sample.yaml`'s `sample-7b66b966b7`
//! would be `sample-7d99fc468f`), and a cluster taken over from OpenKruise would get a second revision
//! for every workload. The functions below add exactly those fields, where absent, at the places the
//! Go types have them (k8s.io/api v0.32 as OpenKruise v1.9 builds with, OpenKruise's own API types);
//! a field already present is never changed.

use serde_json::{Map, Value};

/// `value` with Go's empty fields taken out again: nulls and empty objects (also objects left empty
/// once theirs are gone), at any depth. Two values that differ only in what Go writes and Rust omits
/// compare equal after it (a revision OpenKruise wrote and one kruise-rs wrote; the templates an
/// in-place plan compares).
pub fn without_empty_fields(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| (k, without_empty_fields(v)))
                .filter(|(_, v)| !v.is_null() && v.as_object().is_none_or(|m| !m.is_empty()))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(without_empty_fields).collect()),
        other => other,
    }
}

/// A `PodTemplateSpec`: `metadata` (an `ObjectMeta`) and `spec` (a `PodSpec`) are structs.
pub fn pod_template(template: &mut Value) {
    let Some(map) = template.as_object_mut() else {
        return;
    };
    object_meta(struct_field(map, "metadata"));
    pod_spec(struct_field(map, "spec"));
}

/// An `ObjectMeta` inside a template: its zero `creationTimestamp` marshals as `null`.
pub fn object_meta(meta: &mut Value) {
    if let Some(map) = meta.as_object_mut() {
        map.entry("creationTimestamp").or_insert(Value::Null);
    }
}

/// A `PodSpec`: `containers` has no `omitempty`; every container's `resources` is a struct; the
/// zero divisor of a `resourceFieldRef` is the quantity `"0"`; an ephemeral volume's claim template
/// carries an `ObjectMeta` and a claim spec.
pub fn pod_spec(spec: &mut Value) {
    let Some(map) = spec.as_object_mut() else {
        return;
    };
    map.entry("containers").or_insert(Value::Null);
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for container in items(map, list) {
            self::container(container);
        }
    }
    for item in items(map, "volumes") {
        volume(item);
    }
}

/// A `Container` (also the inlined one of an `EphemeralContainer` or a SidecarSet's container).
pub fn container(container: &mut Value) {
    let Some(map) = container.as_object_mut() else {
        return;
    };
    struct_field(map, "resources");
    for env in items(map, "env") {
        if let Some(selector) = env.pointer_mut("/valueFrom/resourceFieldRef") {
            resource_field_selector(selector);
        }
    }
}

/// A `Volume`: downward API divisors and an ephemeral volume's claim template.
pub fn volume(volume: &mut Value) {
    if let Some(files) = volume.pointer_mut("/downwardAPI/items") {
        downward_api_files(files);
    }
    if let Some(sources) = volume
        .pointer_mut("/projected/sources")
        .and_then(Value::as_array_mut)
    {
        for source in sources {
            if let Some(files) = source.pointer_mut("/downwardAPI/items") {
                downward_api_files(files);
            }
        }
    }
    if let Some(claim) = volume.pointer_mut("/ephemeral/volumeClaimTemplate")
        && let Some(map) = claim.as_object_mut()
    {
        object_meta(struct_field(map, "metadata"));
        claim_spec(struct_field(map, "spec"));
    }
}

fn downward_api_files(files: &mut Value) {
    for file in files.as_array_mut().into_iter().flatten() {
        if let Some(selector) = file.get_mut("resourceFieldRef") {
            resource_field_selector(selector);
        }
    }
}

/// `divisor` is a `resource.Quantity`, a struct whose zero value marshals as `"0"`.
fn resource_field_selector(selector: &mut Value) {
    if let Some(map) = selector.as_object_mut() {
        map.entry("divisor").or_insert_with(|| Value::from("0"));
    }
}

/// A `PersistentVolumeClaimSpec`: `resources` is a struct.
fn claim_spec(spec: &mut Value) {
    if let Some(map) = spec.as_object_mut() {
        struct_field(map, "resources");
    }
}

/// A `PersistentVolumeClaim` of `volumeClaimTemplates`: metadata, spec and status are structs.
pub fn persistent_volume_claim(claim: &mut Value) {
    let Some(map) = claim.as_object_mut() else {
        return;
    };
    object_meta(struct_field(map, "metadata"));
    claim_spec(struct_field(map, "spec"));
    struct_field(map, "status");
}

/// The workload kinds whose specs a UnitedDeployment's revision records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkloadSpec {
    /// `apps.kruise.io` CloneSetSpec: `scaleStrategy` and `updateStrategy` are structs.
    CloneSet,
    /// `apps.kruise.io` StatefulSetSpec (v1beta1): `updateStrategy` and `volumeClaimUpdateStrategy`
    /// are structs.
    AdvancedStatefulSet,
    /// apps/v1 StatefulSetSpec: `updateStrategy` is a struct, `serviceName` has no `omitempty`.
    StatefulSet,
    /// apps/v1 DeploymentSpec: `strategy` is a struct.
    Deployment,
}

/// A workload template of a UnitedDeployment (`{metadata, spec}`): its `ObjectMeta`, and in its spec
/// `selector` (a pointer without `omitempty`), the Pod template, the claim templates and the
/// kind's struct fields.
pub fn workload_template(template: &mut Value, kind: WorkloadSpec) {
    let Some(map) = template.as_object_mut() else {
        return;
    };
    object_meta(struct_field(map, "metadata"));
    let Some(spec) = struct_field(map, "spec").as_object_mut() else {
        return;
    };
    spec.entry("selector").or_insert(Value::Null);
    pod_template(struct_field(spec, "template"));
    for claim in items(spec, "volumeClaimTemplates") {
        persistent_volume_claim(claim);
    }
    let structs: &[&str] = match kind {
        WorkloadSpec::CloneSet => &["scaleStrategy", "updateStrategy"],
        WorkloadSpec::AdvancedStatefulSet => &["updateStrategy", "volumeClaimUpdateStrategy"],
        WorkloadSpec::StatefulSet => &["updateStrategy"],
        WorkloadSpec::Deployment => &["strategy"],
    };
    for field in structs {
        struct_field(spec, field);
    }
    if kind == WorkloadSpec::StatefulSet {
        spec.entry("serviceName").or_insert_with(|| Value::from(""));
    }
}

/// A SidecarSet's container (`SidecarContainer`): the inlined `Container`, and `upgradeStrategy` and
/// `shareVolumePolicy` are structs; a `resourcesPolicy`, when given, has two fields without
/// `omitempty`.
pub fn sidecar_container(sidecar: &mut Value) {
    container(sidecar);
    let Some(map) = sidecar.as_object_mut() else {
        return;
    };
    struct_field(map, "upgradeStrategy");
    struct_field(map, "shareVolumePolicy");
    if let Some(policy) = map
        .get_mut("resourcesPolicy")
        .and_then(Value::as_object_mut)
    {
        policy
            .entry("targetContainersMode")
            .or_insert_with(|| Value::from(""));
        struct_field(policy, "resourcesExpr");
    }
}

/// The struct-valued field `key` of `map`: inserted as `{}` when absent (or `null`, which a Go struct
/// cannot hold), then returned for filling.
fn struct_field<'a>(map: &'a mut Map<String, Value>, key: &str) -> &'a mut Value {
    let field = map.entry(key).or_insert_with(|| Value::Object(Map::new()));
    if field.is_null() {
        *field = Value::Object(Map::new());
    }
    field
}

/// The elements of the array `key` of `map` (none when absent or not an array).
fn items<'a>(map: &'a mut Map<String, Value>, key: &str) -> impl Iterator<Item = &'a mut Value> {
    map.get_mut(key)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn pod_template_cases() {
        let cases = [
            (
                "an empty template gets Go's zero metadata and spec",
                json!({}),
                json!({"metadata": {"creationTimestamp": null}, "spec": {"containers": null}}),
            ),
            (
                "every container kind gets resources; present values are kept",
                json!({"metadata": {"labels": {"a": "b"}, "creationTimestamp": "2020-01-01T00:00:00Z"},
                       "spec": {"initContainers": [{"name": "i"}],
                                "containers": [{"name": "c", "resources": {"limits": {"cpu": "1"}}}],
                                "ephemeralContainers": [{"name": "e"}]}}),
                json!({"metadata": {"labels": {"a": "b"}, "creationTimestamp": "2020-01-01T00:00:00Z"},
                       "spec": {"initContainers": [{"name": "i", "resources": {}}],
                                "containers": [{"name": "c", "resources": {"limits": {"cpu": "1"}}}],
                                "ephemeralContainers": [{"name": "e", "resources": {}}]}}),
            ),
            (
                "resourceFieldRef divisors in env and volumes, an ephemeral claim template",
                json!({"spec": {"containers": [{"name": "c", "env": [
                           {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
                           {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
                           {"name": "PLAIN", "value": "x"}]}],
                       "volumes": [
                           {"name": "d", "downwardAPI": {"items": [{"path": "cpu", "resourceFieldRef": {"resource": "limits.cpu"}}]}},
                           {"name": "p", "projected": {"sources": [{"downwardAPI": {"items": [{"path": "m", "resourceFieldRef": {"resource": "limits.memory"}}]}}]}},
                           {"name": "e", "ephemeral": {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"]}}}},
                           {"name": "x", "emptyDir": {}}]}}),
                json!({"metadata": {"creationTimestamp": null},
                       "spec": {"containers": [{"name": "c", "resources": {}, "env": [
                           {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "0"}}},
                           {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
                           {"name": "PLAIN", "value": "x"}]}],
                       "volumes": [
                           {"name": "d", "downwardAPI": {"items": [{"path": "cpu", "resourceFieldRef": {"resource": "limits.cpu", "divisor": "0"}}]}},
                           {"name": "p", "projected": {"sources": [{"downwardAPI": {"items": [{"path": "m", "resourceFieldRef": {"resource": "limits.memory", "divisor": "0"}}]}}]}},
                           {"name": "e", "ephemeral": {"volumeClaimTemplate": {"metadata": {"creationTimestamp": null},
                                                                              "spec": {"accessModes": ["ReadWriteOnce"], "resources": {}}}}},
                           {"name": "x", "emptyDir": {}}]}}),
            ),
        ];
        for (what, mut input, want) in cases {
            pod_template(&mut input);
            assert_eq!(input, want, "{what}");
        }
    }

    #[test]
    fn workload_template_cases() {
        let template = || {
            json!({"metadata": {"labels": {"app": "a"}},
                   "spec": {"selector": {"matchLabels": {"app": "a"}},
                            "template": {"spec": {"containers": [{"name": "c"}]}},
                            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {}}]}})
        };
        let filled = |extra: Value| {
            let mut want = json!({"metadata": {"labels": {"app": "a"}, "creationTimestamp": null},
                   "spec": {"selector": {"matchLabels": {"app": "a"}},
                            "template": {"metadata": {"creationTimestamp": null},
                                         "spec": {"containers": [{"name": "c", "resources": {}}]}},
                            "volumeClaimTemplates": [{"metadata": {"name": "data", "creationTimestamp": null},
                                                      "spec": {"resources": {}}, "status": {}}]}});
            for (k, v) in extra.as_object().cloned().unwrap_or_default() {
                want["spec"][k] = v;
            }
            want
        };
        let cases = [
            (
                WorkloadSpec::CloneSet,
                json!({"scaleStrategy": {}, "updateStrategy": {}}),
            ),
            (
                WorkloadSpec::AdvancedStatefulSet,
                json!({"updateStrategy": {}, "volumeClaimUpdateStrategy": {}}),
            ),
            (
                WorkloadSpec::StatefulSet,
                json!({"updateStrategy": {}, "serviceName": ""}),
            ),
            (WorkloadSpec::Deployment, json!({"strategy": {}})),
        ];
        for (kind, extra) in cases {
            let mut input = template();
            workload_template(&mut input, kind);
            assert_eq!(input, filled(extra), "{kind:?}");
        }
        // No spec at all: Go still writes the struct with a null selector and a zero template.
        let mut bare = json!({});
        workload_template(&mut bare, WorkloadSpec::Deployment);
        assert_eq!(
            bare,
            json!({"metadata": {"creationTimestamp": null},
                   "spec": {"selector": null, "strategy": {},
                            "template": {"metadata": {"creationTimestamp": null}, "spec": {"containers": null}}}})
        );
    }

    #[test]
    fn sidecar_container_cases() {
        let mut plain = json!({"name": "s"});
        sidecar_container(&mut plain);
        assert_eq!(
            plain,
            json!({"name": "s", "resources": {}, "upgradeStrategy": {}, "shareVolumePolicy": {}})
        );
        let mut set = json!({"name": "s", "upgradeStrategy": {"upgradeType": "HotUpgrade"},
                             "shareVolumePolicy": {"type": "disabled"}, "resourcesPolicy": {}});
        sidecar_container(&mut set);
        assert_eq!(
            set,
            json!({"name": "s", "resources": {}, "upgradeStrategy": {"upgradeType": "HotUpgrade"},
                   "shareVolumePolicy": {"type": "disabled"},
                   "resourcesPolicy": {"targetContainersMode": "", "resourcesExpr": {}}})
        );
    }

    #[test]
    fn filling_twice_changes_nothing() {
        let mut once = json!({"spec": {"containers": [{"name": "c"}]}});
        pod_template(&mut once);
        let mut twice = once.clone();
        pod_template(&mut twice);
        assert_eq!(once, twice);
    }
}
