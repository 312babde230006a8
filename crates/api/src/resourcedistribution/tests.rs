use serde_json::json;

use super::*;

fn distribution(resource: Value, targets: Value) -> ResourceDistribution {
    serde_json::from_value(json!({
        "apiVersion": API_VERSION, "kind": KIND,
        "metadata": {"name": "rd"},
        "spec": {"resource": resource, "targets": targets}
    }))
    .expect("a ResourceDistribution")
}

fn secret(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": {"a.b": "eA=="}})
}

fn messages(errors: &[FieldError]) -> Vec<String> {
    errors.iter().map(ToString::to_string).collect()
}

#[test]
fn validation_table() {
    let all = json!({"allNamespaces": true});
    let cases: Vec<(
        &str,
        ResourceDistribution,
        Option<ResourceDistribution>,
        Option<&str>,
    )> = vec![
        (
            "a Secret to all namespaces",
            distribution(secret("s"), all.clone()),
            None,
            None,
        ),
        (
            "a ConfigMap to a list",
            distribution(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}}),
                json!({"includedNamespaces": {"list": [{"name": "a"}, {"name": "b"}]}}),
            ),
            None,
            None,
        ),
        (
            "no resource",
            distribution(json!({}), all.clone()),
            None,
            Some("spec.resource"),
        ),
        (
            "a Deployment",
            distribution(
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}}),
                all.clone(),
            ),
            None,
            Some("only support"),
        ),
        (
            "a Secret of another group",
            distribution(
                json!({"apiVersion": "example.com/v1", "kind": "Secret", "metadata": {"name": "d"}}),
                all.clone(),
            ),
            None,
            Some("only support"),
        ),
        (
            "a renamed resource",
            distribution(secret("s2"), all.clone()),
            Some(distribution(secret("s"), all.clone())),
            Some("immutable"),
        ),
        (
            "a Secret made a ConfigMap",
            distribution(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "s"}}),
                all.clone(),
            ),
            Some(distribution(secret("s"), all.clone())),
            Some("immutable"),
        ),
        (
            "the data changes",
            distribution(
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"x": "eQ=="}}),
                all.clone(),
            ),
            Some(distribution(secret("s"), all.clone())),
            None,
        ),
        (
            "no name",
            distribution(
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {}}),
                all.clone(),
            ),
            None,
            Some("spec.resource.metadata.name"),
        ),
        (
            "a bad key",
            distribution(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a/b": "v"}}),
                all.clone(),
            ),
            None,
            Some("spec.resource.data"),
        ),
        (
            "a bad included namespace",
            distribution(
                secret("s"),
                json!({"includedNamespaces": {"list": [{"name": "Bad_NS"}]}}),
            ),
            None,
            Some("spec.targets.includedNamespaces"),
        ),
        (
            "a bad excluded namespace",
            distribution(
                secret("s"),
                json!({"allNamespaces": true, "excludedNamespaces": {"list": [{"name": "-x"}]}}),
            ),
            None,
            Some("spec.targets.excludedNamespaces"),
        ),
        (
            "included and excluded",
            distribution(
                secret("s"),
                json!({"includedNamespaces": {"list": [{"name": "a"}]}, "excludedNamespaces": {"list": [{"name": "a"}]}}),
            ),
            None,
            Some("ambiguous targets"),
        ),
        (
            "a bad selector",
            distribution(
                secret("s"),
                json!({"namespaceLabelSelector": {"matchExpressions": [{"key": "k", "operator": "Near"}]}}),
            ),
            None,
            Some("spec.targets.namespaceLabelSelector.matchExpressions[0].operator"),
        ),
    ];
    for (name, new, old, want) in cases {
        let errors = messages(&validate(&new, old.as_ref()));
        match want {
            None => assert!(errors.is_empty(), "{name}: {errors:?}"),
            Some(text) => assert!(
                errors.iter().any(|e| e.contains(text)),
                "{name}: want {text:?} in {errors:?}"
            ),
        }
    }
}

#[test]
fn targets_round_trip_with_upstream_json_names() {
    let rd = distribution(
        secret("s"),
        json!({
            "allNamespaces": true,
            "excludedNamespaces": {"list": [{"name": "kube-system"}]},
            "namespaceLabelSelector": {"matchLabels": {"team": "a"}}
        }),
    );
    let value = serde_json::to_value(&rd).expect("json");
    assert_eq!(
        value["spec"]["targets"]["excludedNamespaces"]["list"][0]["name"],
        "kube-system"
    );
    assert_eq!(
        value["spec"]["targets"]["namespaceLabelSelector"]["matchLabels"]["team"],
        "a"
    );
    assert!(value["spec"]["targets"].get("includedNamespaces").is_none());
    let status = ResourceDistributionStatus {
        conditions: vec![ResourceDistributionCondition {
            type_: CONDITION_CONFLICT.into(),
            status: "True".into(),
            failed_namespaces: vec!["a".into()],
            ..Default::default()
        }],
        ..Default::default()
    };
    let json = serde_json::to_value(&status).expect("json");
    assert_eq!(json["conditions"][0]["failedNamespace"][0], "a");
}

#[test]
fn the_crd_is_cluster_scoped_v1alpha1_only() {
    let crd = crd();
    assert_eq!(crd.spec.scope, "Cluster");
    assert_eq!(
        crd.spec.names.short_names,
        Some(vec!["distributor".to_string()])
    );
    let versions: Vec<(&str, bool, bool)> = crd
        .spec
        .versions
        .iter()
        .map(|v| (v.name.as_str(), v.served, v.storage))
        .collect();
    assert_eq!(versions, [("v1alpha1", true, true)]);
    assert!(crd.spec.conversion.is_none());
    let schema = serde_json::to_value(&crd.spec.versions[0].schema).expect("schema");
    let resource = &schema["openAPIV3Schema"]["properties"]["spec"]["properties"]["resource"];
    assert_eq!(resource["x-kubernetes-embedded-resource"], true);
    assert_eq!(resource["x-kubernetes-preserve-unknown-fields"], true);
}
