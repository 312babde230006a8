use serde_json::{Value, json};

use super::*;

fn job(selector: Value, containers: Value) -> EphemeralJob {
    let object = json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "EphemeralJob",
        "metadata": {"name": "ejob", "namespace": "ns"},
        "spec": {"selector": selector, "template": {"ephemeralContainers": containers}},
    });
    match serde_json::from_value(object) {
        Ok(job) => job,
        Err(e) => panic!("test job: {e}"),
    }
}

/// An ephemeral container as upstream's e2e writes one, with `extra` merged in.
fn container(extra: Value) -> Value {
    let mut base = json!({
        "name": "debugger", "image": "busybox:1.36", "imagePullPolicy": "IfNotPresent",
        "terminationMessagePolicy": "File", "targetContainerName": "main",
    });
    if let (Some(base), Some(extra)) = (base.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            base.insert(k.clone(), v.clone());
        }
    }
    base
}

/// (case, selector, containers, the errors' beginnings)
#[test]
fn validation_table() {
    let web = json!({"matchLabels": {"app": "web"}});
    let cases: Vec<(&str, Value, Value, &[&str])> = vec![
        ("valid", web.clone(), json!([container(json!({}))]), &[]),
        ("no containers", web.clone(), json!([]), &[]),
        (
            "securityContext capabilities",
            web.clone(),
            json!([container(
                json!({"securityContext": {"capabilities": {"add": ["SYS_ADMIN", "NET_ADMIN"]}}})
            )]),
            &[],
        ),
        (
            "env and volumeMounts",
            web.clone(),
            json!([container(json!({
                "env": [{"name": "A", "value": "1"}, {"name": "POD", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}]
            }))]),
            &[],
        ),
        (
            "selector operator Bogus",
            json!({"matchExpressions": [{"key": "app", "operator": "Bogus"}]}),
            json!([container(json!({}))]),
            &[r#"spec.selector.matchExpressions[0].operator: Unsupported value: "Bogus""#],
        ),
        (
            "selector label value with a space",
            json!({"matchLabels": {"app": "has space!"}}),
            json!([container(json!({}))]),
            &[r#"spec.selector.matchLabels[app]: Invalid value: "has space!""#],
        ),
        (
            "no name",
            web.clone(),
            json!([container(json!({"name": ""}))]),
            &["spec.template.ephemeralContainers[0].name: Required value"],
        ),
        (
            "invalid name",
            web.clone(),
            json!([container(json!({"name": "Debugger"}))]),
            &[r#"spec.template.ephemeralContainers[0].name: Invalid value: "Debugger""#],
        ),
        (
            "duplicate names",
            web.clone(),
            json!([container(json!({})), container(json!({}))]),
            &[r#"spec.template.ephemeralContainers[1].name: Duplicate value: "debugger""#],
        ),
        (
            "no image",
            web.clone(),
            json!([container(json!({"image": ""}))]),
            &["spec.template.ephemeralContainers[0].image: Required value"],
        ),
        (
            "image with spaces",
            web.clone(),
            json!([container(json!({"image": " busybox"}))]),
            &[
                r#"spec.template.ephemeralContainers[0].image: Invalid value: " busybox": must not have leading or trailing whitespace"#,
            ],
        ),
        (
            "no imagePullPolicy",
            web.clone(),
            json!([container(json!({"imagePullPolicy": null}))]),
            &["spec.template.ephemeralContainers[0].imagePullPolicy: Required value"],
        ),
        (
            "imagePullPolicy Sometimes",
            web.clone(),
            json!([container(json!({"imagePullPolicy": "Sometimes"}))]),
            &[
                r#"spec.template.ephemeralContainers[0].imagePullPolicy: Unsupported value: "Sometimes""#,
            ],
        ),
        (
            "no terminationMessagePolicy",
            web.clone(),
            json!([container(json!({"terminationMessagePolicy": null}))]),
            &["spec.template.ephemeralContainers[0].terminationMessagePolicy: Required value"],
        ),
        (
            "ports",
            web.clone(),
            json!([container(
                json!({"ports": [{"containerPort": 80, "protocol": "TCP"}]})
            )]),
            &[
                "spec.template.ephemeralContainers[0].ports: Forbidden: cannot be set for an Ephemeral Container",
            ],
        ),
        (
            "resources, probes and lifecycle",
            web.clone(),
            json!([container(json!({
                "resources": {"limits": {"cpu": "1"}},
                "readinessProbe": {"exec": {"command": ["true"]}},
                "lifecycle": {"preStop": {"exec": {"command": ["true"]}}}
            }))]),
            &[
                "spec.template.ephemeralContainers[0].resources: Forbidden",
                "spec.template.ephemeralContainers[0].readinessProbe: Forbidden",
                "spec.template.ephemeralContainers[0].lifecycle: Forbidden",
            ],
        ),
        (
            "empty resources",
            web.clone(),
            json!([container(json!({"resources": {}}))]),
            &[],
        ),
        (
            "volume subPath",
            web.clone(),
            json!([container(
                json!({"volumeMounts": [{"name": "data", "mountPath": "/data", "subPath": "x"}]})
            )]),
            &["spec.template.ephemeralContainers[0].volumeMounts[0].subPath: Forbidden"],
        ),
        (
            "env name starting with a digit",
            web.clone(),
            json!([container(json!({"env": [{"name": "1A", "value": "x"}]}))]),
            &[r#"spec.template.ephemeralContainers[0].env[0].name: Invalid value: "1A""#],
        ),
        (
            "env value and valueFrom",
            web.clone(),
            json!([container(
                json!({"env": [{"name": "A", "value": "x", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]})
            )]),
            &["spec.template.ephemeralContainers[0].env[0].valueFrom: Invalid value"],
        ),
        (
            "env fieldRef unsupported",
            web.clone(),
            json!([container(
                json!({"env": [{"name": "A", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec.bogus"}}}]})
            )]),
            &[
                r#"spec.template.ephemeralContainers[0].env[0].valueFrom.fieldRef.fieldPath: Unsupported value: "spec.bogus""#,
            ],
        ),
        (
            "envFrom without a source",
            web.clone(),
            json!([container(json!({"envFrom": [{"prefix": "P_"}]}))]),
            &["spec.template.ephemeralContainers[0].envFrom[0]: Invalid value"],
        ),
        (
            "runAsUser negative",
            web.clone(),
            json!([container(json!({"securityContext": {"runAsUser": -1}}))]),
            &[
                r#"spec.template.ephemeralContainers[0].securityContext.runAsUser: Invalid value: "-1""#,
            ],
        ),
        (
            "no privilege escalation but privileged",
            web.clone(),
            json!([container(
                json!({"securityContext": {"allowPrivilegeEscalation": false, "privileged": true}})
            )]),
            &["spec.template.ephemeralContainers[0].securityContext: Invalid value"],
        ),
        (
            "seccomp Localhost without a profile",
            web.clone(),
            json!([container(
                json!({"securityContext": {"seccompProfile": {"type": "Localhost"}}})
            )]),
            &[
                "spec.template.ephemeralContainers[0].securityContext.seccompProfile.localhostProfile: Required value",
            ],
        ),
        (
            "not a container",
            web.clone(),
            json!([{"name": "x", "image": 5}]),
            &["spec.template.ephemeralContainers[0]: Invalid value"],
        ),
    ];
    for (name, selector, containers, want) in cases {
        let errors: Vec<String> = validate(&job(selector, containers))
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(errors.len(), want.len(), "{name}: {errors:?}");
        for (error, want) in errors.iter().zip(want) {
            assert!(
                error.starts_with(want),
                "{name}: {error:?} does not start with {want:?}"
            );
        }
    }
}
