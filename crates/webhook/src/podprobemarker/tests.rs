use super::*;
use crate::testreview::{Review, outcome};
use serde_json::{Value, json};

fn review(operation: &str, object: Value, old: Option<Value>) -> AdmissionReview<DynamicObject> {
    Review::of(
        "apps.kruise.io",
        "v1alpha1",
        "PodProbeMarker",
        "podprobemarkers",
    )
    .operation(operation)
    .object(object)
    .old(old)
    .build()
}

fn marker(probes: Value) -> Value {
    json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "PodProbeMarker",
        "metadata": {"name": "ppm", "namespace": "ns"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "probes": probes}
    })
}

fn healthy() -> Value {
    json!({
        "name": "healthy", "containerName": "main",
        "probe": {"exec": {"command": ["/bin/sh", "-c", "ls /"]}, "periodSeconds": 2},
        "podConditionType": "game.kruise.io/healthy",
        "markerPolicy": [
            {"state": "Succeeded", "labels": {"nginx": "healthy"}, "annotations": {"controller.kubernetes.io/pod-deletion-cost": "10"}},
            {"state": "Failed", "annotations": {"controller.kubernetes.io/pod-deletion-cost": "-10"}}
        ]
    })
}

fn with(mut probe: Value, key: &str, value: Value) -> Value {
    probe[key] = value;
    probe
}

#[test]
fn gates_off_refuse_with_403() {
    for (probe_gate, daemon_gate, name) in [
        (false, true, "PodProbeMarkerGate"),
        (true, false, "KruiseDaemon"),
    ] {
        let (allowed, message, code) = outcome(&validate(
            review("CREATE", marker(json!([healthy()])), None),
            probe_gate,
            daemon_gate,
        ));
        assert!(!allowed);
        assert_eq!(code, 403);
        assert_eq!(message, format!("feature-gate {name} is not enabled"));
    }
}

#[test]
fn upstream_rules_and_messages() {
    let tcp = |port: Value| {
        json!({"name": "tcp", "containerName": "main", "probe": {"tcpSocket": {"port": port}},
               "podConditionType": "game.kruise.io/tcp"})
    };
    let http = |get: Value| {
        json!({"name": "http", "containerName": "main", "probe": {"httpGet": get},
               "podConditionType": "game.kruise.io/http"})
    };
    let cases: Vec<(&str, Value, Option<&str>)> = vec![
        ("valid exec", marker(json!([healthy()])), None),
        ("valid tcp by number", marker(json!([tcp(json!(80))])), None),
        (
            "valid tcp by name",
            marker(json!([tcp(json!("http"))])),
            None,
        ),
        (
            "valid http",
            marker(json!([http(
                json!({"path": "/", "port": 80, "scheme": "HTTP"})
            )])),
            None,
        ),
        (
            "empty selector",
            {
                let mut m = marker(json!([healthy()]));
                m["spec"]["selector"] = json!({});
                m
            },
            Some(
                "spec.selector: Invalid value: \"{}\": empty selector is not valid for podProbeMarker.",
            ),
        ),
        (
            "no probes",
            marker(json!([])),
            Some(
                "spec.probes: Invalid value: \"null\": empty probes is not valid for PodProbeMarker.",
            ),
        ),
        (
            "name with #",
            marker(json!([with(healthy(), "name", json!("a#b"))])),
            Some("spec.probes: Invalid value: \"a#b\": probe name can't contains '#'."),
        ),
        (
            "empty name",
            marker(json!([with(healthy(), "name", json!(""))])),
            Some("spec.probes: Invalid value: \"\": probe name can't be empty in PodProbeMarker."),
        ),
        (
            "empty container",
            marker(json!([with(healthy(), "containerName", json!(""))])),
            Some(
                "spec.probes: Invalid value: \"\": probe containerName can't be empty in PodProbeMarker.",
            ),
        ),
        (
            "native condition name",
            marker(json!([with(healthy(), "name", json!("Ready"))])),
            Some("spec.probes: Invalid value: \"Ready\": probe name can't be Ready"),
        ),
        (
            "duplicate name",
            marker(json!([
                healthy(),
                with(healthy(), "podConditionType", json!("other"))
            ])),
            Some(
                "spec.probes: Invalid value: \"healthy\": probe name must be unique in PodProbeMarker.",
            ),
        ),
        (
            "no handler",
            marker(json!([with(healthy(), "probe", json!({}))])),
            Some("spec.probe: Required value: must specify a handler type"),
        ),
        (
            "two handlers",
            marker(json!([with(
                healthy(),
                "probe",
                json!({"exec": {"command": ["true"]}, "tcpSocket": {"port": 80}})
            )])),
            Some("spec.probe.tcpSocket: Forbidden: may not specify more than 1 handler type"),
        ),
        (
            "exec without command",
            marker(json!([with(healthy(), "probe", json!({"exec": {}}))])),
            Some("spec.probe.exec.command: Required value"),
        ),
        (
            "negative period",
            marker(json!([with(
                healthy(),
                "probe",
                json!({"exec": {"command": ["true"]}, "periodSeconds": -1})
            )])),
            Some(
                "spec.probe.periodSeconds: Invalid value: \"-1\": must be greater than or equal to 0",
            ),
        ),
        (
            "tcp host",
            marker(json!([with(
                tcp(json!(80)),
                "probe",
                json!({"tcpSocket": {"port": 80, "host": "1.2.3.4"}})
            )])),
            Some(
                "spec.probe.tcpSocket.host: Invalid value: \"1.2.3.4\": host field in probes is not allowed",
            ),
        ),
        (
            "tcp port out of range",
            marker(json!([tcp(json!(0))])),
            Some(
                "spec.probe.tcpSocket.port: Invalid value: \"0\": must be between 1 and 65535, inclusive",
            ),
        ),
        (
            "http without scheme",
            marker(json!([http(json!({"path": "/", "port": 80}))])),
            Some(
                "spec.probe.httpGet.scheme: Unsupported value: \"\": supported values: \"HTTP\", \"HTTPS\"",
            ),
        ),
        (
            "http without path",
            marker(json!([http(json!({"port": 80, "scheme": "HTTP"}))])),
            Some("spec.probe.httpGet.path: Required value"),
        ),
        (
            "neither condition nor policy",
            marker(
                json!([{"name": "p", "containerName": "main", "probe": {"exec": {"command": ["true"]}}}]),
            ),
            Some(
                "spec.probes: Invalid value: \"p\": podConditionType and markerPolicy cannot be empty at the same time",
            ),
        ),
        (
            "duplicate condition type",
            marker(json!([healthy(), with(healthy(), "name", json!("other"))])),
            Some(
                "spec.probes: Invalid value: \"game.kruise.io/healthy\": podConditionType game.kruise.io/healthy must be unique in podProbeMarker",
            ),
        ),
        (
            "duplicate policy state",
            marker(json!([with(
                healthy(),
                "markerPolicy",
                json!([
                    {"state": "Succeeded", "labels": {"a": "b"}}, {"state": "Succeeded", "labels": {"a": "c"}}
                ])
            )])),
            Some(
                "spec.markerPolicy: Invalid value: \"Succeeded\": marker policy state must be unique.",
            ),
        ),
        (
            "policy state Unknown",
            marker(json!([with(
                healthy(),
                "markerPolicy",
                json!([{"state": "Unknown", "labels": {"a": "b"}}])
            )])),
            Some(
                "spec.markerPolicy.state: Required value: marker policy state must be 'True' or 'False'",
            ),
        ),
        (
            "empty policy",
            marker(json!([with(
                healthy(),
                "markerPolicy",
                json!([{"state": "Failed"}])
            )])),
            Some(
                "spec.markerPolicy: Required value: marker policy annotations or labels can't be both empty",
            ),
        ),
        (
            "bad label value",
            marker(json!([with(
                healthy(),
                "markerPolicy",
                json!([{"state": "Failed", "labels": {"a": "b c"}}])
            )])),
            Some("spec.markerPolicy.labels[a]: Invalid value: \"b c\""),
        ),
    ];
    for (name, object, want) in cases {
        let (allowed, message, _) = outcome(&validate(review("CREATE", object, None), true, true));
        match want {
            None => assert!(allowed, "{name}: {message}"),
            Some(want) => {
                assert!(!allowed, "{name}");
                assert!(message.starts_with(want), "{name}: {message}");
            }
        }
    }
}

#[test]
fn the_selector_is_immutable_and_deletes_pass() {
    let old = marker(json!([healthy()]));
    let mut new = old.clone();
    new["spec"]["selector"] = json!({"matchLabels": {"app": "other"}});
    let (allowed, message, _) = outcome(&validate(
        review("UPDATE", new, Some(old.clone())),
        true,
        true,
    ));
    assert!(!allowed);
    assert!(
        message.contains("selector: Invalid value")
            && message.contains("selector must be immutable"),
        "{message}"
    );
    let mut probes_changed = old.clone();
    probes_changed["spec"]["probes"][0]["probe"]["exec"]["command"] = json!(["ps", "-ef"]);
    assert!(
        validate(
            review("UPDATE", probes_changed, Some(old.clone())),
            true,
            true
        )
        .allowed
    );
    assert!(validate(review("DELETE", old, None), false, false).allowed);
}
