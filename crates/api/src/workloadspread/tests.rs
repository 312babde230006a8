use super::*;
use serde_json::json;

fn ws(value: serde_json::Value) -> WorkloadSpread {
    serde_json::from_value(value).expect("a WorkloadSpread")
}

fn spread(subsets: serde_json::Value, strategy: serde_json::Value) -> WorkloadSpread {
    ws(json!({
        "apiVersion": API_VERSION, "kind": KIND,
        "metadata": {"name": "ws", "namespace": "ns"},
        "spec": {
            "targetRef": {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": "app"},
            "subsets": subsets,
            "scheduleStrategy": strategy,
        }
    }))
}

fn messages(errors: &[FieldError]) -> Vec<String> {
    errors.iter().map(|e| e.to_string()).collect()
}

#[test]
fn validation_table() {
    let zone = |z: &str| json!({"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": [z]}]});
    let cases: Vec<(&str, WorkloadSpread, Option<&str>)> = vec![
        (
            "three subsets: 2, 50%, rest is refused (types differ)",
            spread(
                json!([{"name": "a", "maxReplicas": 2}, {"name": "b", "maxReplicas": "50%"}, {"name": "c"}]),
                json!({}),
            ),
            Some("the maxReplicas type of all subsets must be the same"),
        ),
        (
            "ints and an unlimited last subset",
            spread(
                json!([{"name": "a", "requiredNodeSelectorTerm": zone("zone-a"), "maxReplicas": 2}, {"name": "b", "maxReplicas": 3}, {"name": "c"}]),
                json!({}),
            ),
            None,
        ),
        (
            "percentages summing to 100",
            spread(
                json!([{"name": "a", "maxReplicas": "40%"}, {"name": "b", "maxReplicas": "60%"}]),
                json!({}),
            ),
            None,
        ),
        (
            "percentages under 100 with a bounded last subset",
            spread(
                json!([{"name": "a", "maxReplicas": "40%"}, {"name": "b", "maxReplicas": "50%"}]),
                json!({}),
            ),
            Some("must equal 100%"),
        ),
        (
            "percentages over 100",
            spread(
                json!([{"name": "a", "maxReplicas": "60%"}, {"name": "b", "maxReplicas": "50%"}]),
                json!({}),
            ),
            Some("exceeds 100%"),
        ),
        (
            "duplicate names",
            spread(json!([{"name": "a"}, {"name": "a"}]), json!({})),
            Some("duplicated subset name a"),
        ),
        (
            "no subsets",
            spread(json!([]), json!({})),
            Some("subsets number must >= 1"),
        ),
        (
            "bad operator",
            spread(
                json!([{"name": "a", "requiredNodeSelectorTerm": {"matchExpressions": [{"key": "k", "operator": "Is", "values": ["v"]}]}}]),
                json!({}),
            ),
            Some("spec.subsets[0].requiredNodeSelectorTerm.matchExpressions[0].operator"),
        ),
        (
            "adaptive needs type Adaptive",
            spread(
                json!([{"name": "a", "maxReplicas": 1}, {"name": "b"}]),
                json!({"type": "Fixed", "adaptive": {"rescheduleCriticalSeconds": 10}}),
            ),
            Some("must be adaptive"),
        ),
        (
            "adaptive with a bounded last subset",
            spread(
                json!([{"name": "a", "maxReplicas": 1}, {"name": "b", "maxReplicas": 1}]),
                json!({"type": "Adaptive", "adaptive": {"rescheduleCriticalSeconds": 10}}),
            ),
            Some("the last subset's maxReplicas must be not specified"),
        ),
        (
            "rescheduleCriticalSeconds over (300-5)/(n-1)",
            spread(
                json!([{"name": "a", "maxReplicas": 1}, {"name": "b", "maxReplicas": 1}, {"name": "c"}]),
                json!({"type": "Adaptive", "adaptive": {"rescheduleCriticalSeconds": 148}}),
            ),
            Some("rescheduleCriticalSeconds > 147"),
        ),
        (
            "adaptive within bounds",
            spread(
                json!([{"name": "a", "maxReplicas": 1}, {"name": "b"}]),
                json!({"type": "Adaptive", "adaptive": {"rescheduleCriticalSeconds": 10}}),
            ),
            None,
        ),
        (
            "unknown strategy type is refused by the schema's enum and by validation",
            spread(json!([{"name": "a"}]), json!({"type": "Spread"})),
            Some("ScheduleStrategy's type is not valid"),
        ),
        (
            "toleration with an empty key needs Exists",
            spread(
                json!([{"name": "a", "tolerations": [{"operator": "Equal", "value": "x"}]}]),
                json!({}),
            ),
            Some("operator must be Exists"),
        ),
        (
            "a patch must be an object",
            spread(json!([{"name": "a", "patch": [1]}]), json!({})),
            Some("spec.subsets[0].patch"),
        ),
    ];
    for (name, object, want) in cases {
        let got = messages(&validate(
            &object,
            &[],
            None,
            &CustomWorkloadWhitelist::default(),
        ));
        match want {
            None => assert!(got.is_empty(), "{name}: {got:?}"),
            Some(want) => assert!(
                got.iter().any(|m| m.contains(want)),
                "{name}: {got:?} lacks {want:?}"
            ),
        }
    }
}

#[test]
fn targets_conflicts_and_immutability() {
    let with_target = |name: &str, api_version: &str, kind: &str, target: &str| {
        let mut w = spread(json!([{"name": "a"}]), json!({}));
        w.metadata.name = Some(name.into());
        w.spec.target_reference = Some(TargetReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: target.into(),
        });
        w
    };
    for (api_version, kind, ok) in [
        ("apps/v1", "Deployment", true),
        ("apps/v1", "ReplicaSet", true),
        ("batch/v1", "Job", true),
        ("apps/v1", "StatefulSet", true),
        ("apps.kruise.io/v1beta1", "StatefulSet", true),
        ("apps.kruise.io/v1alpha1", "CloneSet", true),
        ("apps/v1", "CloneSet", false),
        ("apps/v1", "DaemonSet", false),
    ] {
        let errors = validate(
            &with_target("w", api_version, kind, "x"),
            &[],
            None,
            &CustomWorkloadWhitelist::default(),
        );
        assert_eq!(errors.is_empty(), ok, "{api_version} {kind}: {errors:?}");
    }
    let mine = with_target("w1", "apps/v1", "Deployment", "web");
    let other = with_target("w2", "apps/v2", "Deployment", "web");
    let errors = messages(&validate(
        &mine,
        std::slice::from_ref(&other),
        None,
        &CustomWorkloadWhitelist::default(),
    ));
    assert!(
        errors
            .iter()
            .any(|m| m.contains("in conflict with other WorkloadSpread w2")),
        "{errors:?}"
    );
    // Itself (same name) is no conflict.
    assert!(
        validate(
            &mine,
            std::slice::from_ref(&mine),
            None,
            &CustomWorkloadWhitelist::default()
        )
        .is_empty()
    );
    let moved = with_target("w1", "apps/v1", "Deployment", "api");
    let errors = messages(&validate(
        &moved,
        &[],
        Some(&mine),
        &CustomWorkloadWhitelist::default(),
    ));
    assert!(
        errors
            .iter()
            .any(|m| m.contains("change TargetReference is not permitted")),
        "{errors:?}"
    );
    // A StatefulSet takes integers only.
    let mut sts = with_target("s", "apps/v1", "StatefulSet", "db");
    sts.spec.subsets = serde_json::from_value(
        json!([{"name": "a", "maxReplicas": "50%"}, {"name": "b", "maxReplicas": "50%"}]),
    )
    .expect("subsets");
    assert!(
        messages(&validate(
            &sts,
            &[],
            None,
            &CustomWorkloadWhitelist::default()
        ))
        .iter()
        .any(|m| m.contains("must be Int for StatefulSet"))
    );
}

#[test]
fn patched_template_must_stay_a_pod() {
    assert!(
        validate_patched_template(
            0,
            Ok(json!({"spec": {"containers": [{"name": "c", "image": "i"}]}}))
        )
        .is_empty()
    );
    let errors = validate_patched_template(
        1,
        Ok(json!({"spec": {"containers": [{"name": "c", "image": ""}]}})),
    );
    assert!(
        messages(&errors)
            .iter()
            .any(|m| m.contains("spec.subsets[1].patch.spec.containers[0].image")),
        "{errors:?}"
    );
    assert!(!validate_patched_template(0, Err("bad".into())).is_empty());
}

#[test]
fn status_serializes_replicas_and_missing_replicas_even_when_zero() {
    let status = WorkloadSpreadSubsetStatus {
        name: "a".into(),
        ..Default::default()
    };
    assert_eq!(
        serde_json::to_value(&status).expect("json"),
        json!({"name": "a", "replicas": 0, "missingReplicas": 0})
    );
    let matched = MatchedWorkloadSpread {
        name: "ws".into(),
        subset: "a".into(),
        uid: String::new(),
    };
    assert_eq!(matched.to_annotation(), r#"{"name":"ws","subset":"a"}"#);
    assert_eq!(
        MatchedWorkloadSpread::parse(r#"{"name":"ws","subset":"a","uid":"u"}"#).map(|m| m.uid),
        Some("u".into())
    );
}

/// The whitelist as upstream's e2e configuration writes it (Go's field names, `ReplicasPath`
/// capitalised: Go reads keys case-insensitively).
const E2E_WHITELIST: &str = r#"{
  "workloads": [
    {"Group": "kubeflow.org", "Version": "v1", "Kind": "TFJob",
     "ReplicasPath": "spec.tfReplicaSpecs.MASTER.replicas"},
    {"Group": "apps.kruise.io", "Version": "v1alpha1", "Kind": "DaemonSet",
     "subResources": [{"Group": "apps.kruise.io", "Version": "v1alpha1", "Kind": "Shard"}]}
  ]
}"#;

#[test]
fn a_whitelisted_custom_kind_may_be_targeted_and_owns_pods() {
    let whitelist = CustomWorkloadWhitelist::parse(E2E_WHITELIST).expect("whitelist");
    let cases = [
        // (apiVersion, kind, target allowed, owner allowed, replicas path)
        (
            "kubeflow.org/v1",
            "TFJob",
            true,
            true,
            Some("spec.tfReplicaSpecs.MASTER.replicas"),
        ),
        // Another version of the same group and kind: targetable, but the path is per version.
        ("kubeflow.org/v2", "TFJob", true, true, None),
        ("apps.kruise.io/v1alpha1", "DaemonSet", true, true, None),
        ("apps.kruise.io/v1alpha1", "Shard", false, true, None),
        ("apps/v1", "DaemonSet", false, false, None),
        ("kubeflow.org/v1", "PyTorchJob", false, false, None),
    ];
    for (api_version, kind, target, owner, path) in cases {
        assert_eq!(
            whitelist.allows_target(api_version, kind),
            target,
            "{api_version} {kind}"
        );
        assert_eq!(
            whitelist.allows_owner(api_version, kind),
            owner,
            "{api_version} {kind}"
        );
        assert_eq!(
            whitelist.replicas_path(api_version, kind),
            path,
            "{api_version} {kind}"
        );
    }
    let mut tfjob = spread(json!([{"name": "a"}]), json!({}));
    tfjob.spec.target_reference = Some(TargetReference {
        api_version: "kubeflow.org/v1".into(),
        kind: "TFJob".into(),
        name: "x".into(),
    });
    assert!(validate(&tfjob, &[], None, &whitelist).is_empty());
    let refused = messages(&validate(
        &tfjob,
        &[],
        None,
        &CustomWorkloadWhitelist::default(),
    ));
    assert!(
        refused
            .iter()
            .any(|m| m.contains("GroupKind is not permitted")),
        "{refused:?}"
    );
    assert!(CustomWorkloadWhitelist::parse("{").is_err());
}
