use serde_json::{Value, json};

use super::*;

fn budget(name: &str, spec: Value) -> PodUnavailableBudget {
    budget_with(name, json!({}), spec)
}

fn budget_with(name: &str, annotations: Value, spec: Value) -> PodUnavailableBudget {
    let object = json!({
        "apiVersion": "policy.kruise.io/v1alpha1", "kind": "PodUnavailableBudget",
        "metadata": {"name": name, "namespace": "ns", "annotations": annotations},
        "spec": spec,
    });
    match serde_json::from_value(object) {
        Ok(budget) => budget,
        Err(e) => panic!("test budget {name}: {e}"),
    }
}

fn messages(errors: &[FieldError]) -> Vec<String> {
    errors.iter().map(ToString::to_string).collect()
}

/// Each case: a spec, and the fields its errors name (none: valid).
#[test]
fn spec_table() {
    let web = json!({"matchLabels": {"app": "web"}});
    let target =
        json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": "web"});
    let cases: Vec<(&str, Value, &[&str])> = vec![
        (
            "selector, maxUnavailable 1",
            json!({"selector": web, "maxUnavailable": 1}),
            &[],
        ),
        (
            "targetRef, minAvailable 50%",
            json!({"targetRef": target, "minAvailable": "50%"}),
            &[],
        ),
        (
            "maxUnavailable 0",
            json!({"selector": web, "maxUnavailable": 0}),
            &[],
        ),
        (
            "maxUnavailable 100%",
            json!({"selector": web, "maxUnavailable": "100%"}),
            &[],
        ),
        (
            "neither selector nor targetRef",
            json!({"maxUnavailable": 1}),
            &["spec.selector, targetRef: Required value"],
        ),
        (
            "both selector and targetRef",
            json!({"selector": web, "targetRef": target, "maxUnavailable": 1}),
            &["spec.selector, targetRef: Forbidden"],
        ),
        (
            "neither maxUnavailable nor minAvailable",
            json!({"selector": web}),
            &["spec.maxUnavailable, minAvailable: Required value"],
        ),
        (
            "both maxUnavailable and minAvailable",
            json!({"selector": web, "maxUnavailable": 1, "minAvailable": 1}),
            &["spec.maxUnavailable, minAvailable: Forbidden"],
        ),
        (
            "maxUnavailable -1",
            json!({"selector": web, "maxUnavailable": -1}),
            &[r#"spec.maxUnavailable: Invalid value: "-1""#],
        ),
        (
            "maxUnavailable \"-1\"",
            json!({"selector": web, "maxUnavailable": "-1"}),
            &[r#"spec.maxUnavailable: Invalid value: "-1""#],
        ),
        (
            "maxUnavailable \"1\"",
            json!({"selector": web, "maxUnavailable": "1"}),
            &[r#"spec.maxUnavailable: Invalid value: "1""#],
        ),
        (
            "maxUnavailable 150%",
            json!({"selector": web, "maxUnavailable": "150%"}),
            &[r#"spec.maxUnavailable: Invalid value: "150%""#],
        ),
        (
            "maxUnavailable -1%",
            json!({"selector": web, "maxUnavailable": "-1%"}),
            &[r#"spec.maxUnavailable: Invalid value: "-1%""#],
        ),
        (
            "minAvailable abc%",
            json!({"selector": web, "minAvailable": "abc%"}),
            &[r#"spec.minAvailable: Invalid value: "abc%""#],
        ),
        (
            "minAvailable -3",
            json!({"selector": web, "minAvailable": -3}),
            &[r#"spec.minAvailable: Invalid value: "-3""#],
        ),
        (
            "minAvailable 101%",
            json!({"selector": web, "minAvailable": "101%"}),
            &[r#"spec.minAvailable: Invalid value: "101%""#],
        ),
        (
            "operator Bogus",
            json!({"selector": {"matchExpressions": [{"key": "app", "operator": "Bogus", "values": ["a"]}]}, "maxUnavailable": 1}),
            &[r#"spec.selector.matchExpressions[0].operator: Unsupported value: "Bogus""#],
        ),
        (
            "label value with a space",
            json!({"selector": {"matchLabels": {"app": "has space!"}}, "maxUnavailable": 1}),
            &[r#"spec.selector.matchLabels[app]: Invalid value: "has space!""#],
        ),
        (
            "label key invalid",
            json!({"selector": {"matchLabels": {"-app": "web"}}, "maxUnavailable": 1}),
            &[r#"spec.selector.matchLabels[-app]: Invalid value: "-app""#],
        ),
        (
            "In without values",
            json!({"selector": {"matchExpressions": [{"key": "app", "operator": "In"}]}, "maxUnavailable": 1}),
            &["spec.selector.matchExpressions[0].values: Required value"],
        ),
        (
            "empty selector",
            json!({"selector": {}, "maxUnavailable": 1}),
            &["spec.selector: Invalid value"],
        ),
        (
            "targetRef without name",
            json!({"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment"}, "maxUnavailable": 1}),
            &["spec.targetRef.name: Required value"],
        ),
        (
            "targetRef without apiVersion and kind",
            json!({"targetRef": {"name": "web"}, "maxUnavailable": 1}),
            &[
                "spec.targetRef.apiVersion: Required value",
                "spec.targetRef.kind: Required value",
            ],
        ),
        (
            "targetRef apiVersion a/b/c",
            json!({"targetRef": {"apiVersion": "a/b/c", "kind": "CloneSet", "name": "web"}, "maxUnavailable": 1}),
            &[
                r#"spec.targetRef.apiVersion: Invalid value: "a/b/c": unexpected GroupVersion string"#,
            ],
        ),
    ];
    for (name, spec, want) in cases {
        let errors = messages(&validate(&budget("pub", spec), None, &[]));
        assert_eq!(errors.len(), want.len(), "{name}: {errors:?}");
        for (error, want) in errors.iter().zip(want) {
            assert!(
                error.starts_with(want),
                "{name}: {error:?} does not start with {want:?}"
            );
        }
    }
}

#[test]
fn annotation_table() {
    let spec = json!({"selector": {"matchLabels": {"app": "web"}}, "maxUnavailable": 1});
    let operations = PUB_PROTECT_OPERATIONS_ANNOTATION;
    let total = PUB_PROTECT_TOTAL_REPLICAS_ANNOTATION;
    // (annotations, the annotation refused)
    let cases = [
        (json!({operations: "DELETE"}), None),
        (json!({operations: "UPDATE,DELETE,EVICT,RESIZE"}), None),
        (json!({operations: "DELETE,BOGUS"}), Some(operations)),
        (json!({operations: "DELETE, EVICT"}), Some(operations)),
        (json!({operations: ""}), Some(operations)),
        (json!({total: "10"}), None),
        (json!({total: "-1"}), None),
        (json!({total: "ten"}), Some(total)),
        (json!({total: "99999999999"}), Some(total)),
    ];
    for (annotations, refused) in cases {
        let errors = messages(&validate(
            &budget_with("pub", annotations.clone(), spec.clone()),
            None,
            &[],
        ));
        match refused {
            None => assert!(errors.is_empty(), "{annotations}: {errors:?}"),
            Some(key) => {
                assert_eq!(errors.len(), 1, "{annotations}: {errors:?}");
                assert!(
                    errors[0].starts_with(&format!("metadata.annotations[{key}]: Invalid value")),
                    "{annotations}: {errors:?}"
                );
            }
        }
    }
}

#[test]
fn what_a_budget_selects_never_changes() {
    let web = json!({"selector": {"matchLabels": {"app": "web"}}, "maxUnavailable": 1});
    let old = budget("pub", web.clone());
    // Its limit may change.
    let raised = budget(
        "pub",
        json!({"selector": {"matchLabels": {"app": "web"}}, "maxUnavailable": 3}),
    );
    assert!(validate(&raised, Some(&old), &[]).is_empty());
    let moved = budget(
        "pub",
        json!({"selector": {"matchLabels": {"app": "db"}}, "maxUnavailable": 1}),
    );
    assert_eq!(
        messages(&validate(&moved, Some(&old), &[])),
        ["spec.selector, targetRef: Forbidden: selector and targetRef cannot be modified"]
    );
    let retargeted = budget(
        "pub",
        json!({"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "maxUnavailable": 1}),
    );
    assert_eq!(validate(&retargeted, Some(&old), &[]).len(), 1);
}

#[test]
fn two_budgets_never_guard_the_same_pods() {
    let spec = |selector: Value| json!({"selector": selector, "maxUnavailable": 1});
    let target = |api_version: &str, kind: &str, name: &str| json!({"targetRef": {"apiVersion": api_version, "kind": kind, "name": name}, "maxUnavailable": 1});
    let others = [
        budget("by-selector", spec(json!({"matchLabels": {"app": "web"}}))),
        budget(
            "by-target",
            target("apps.kruise.io/v1alpha1", "CloneSet", "web"),
        ),
    ];
    // (candidate, the field refused)
    let cases = [
        (
            budget("new", spec(json!({"matchLabels": {"app": "web"}}))),
            Some("spec.selector"),
        ),
        (
            budget(
                "new",
                spec(
                    json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "x"]}]}),
                ),
            ),
            Some("spec.selector"),
        ),
        (
            budget("new", spec(json!({"matchLabels": {"app": "db"}}))),
            None,
        ),
        (
            budget(
                "new",
                spec(json!({"matchLabels": {"app": "web", "tier": "fe"}})),
            ),
            None,
        ),
        // The same budget again (an update): no conflict with itself.
        (
            budget("by-selector", spec(json!({"matchLabels": {"app": "web"}}))),
            None,
        ),
        (
            budget("new", target("apps.kruise.io/v1beta1", "CloneSet", "web")),
            Some("spec.targetRef"),
        ),
        (budget("new", target("apps/v1", "CloneSet", "web")), None),
        (
            budget("new", target("apps.kruise.io/v1alpha1", "CloneSet", "db")),
            None,
        ),
        (
            budget(
                "new",
                target("apps.kruise.io/v1alpha1", "StatefulSet", "web"),
            ),
            None,
        ),
    ];
    for (i, (candidate, refused)) in cases.iter().enumerate() {
        let errors = messages(&validate(candidate, None, &others));
        match refused {
            None => assert!(errors.is_empty(), "case {i}: {errors:?}"),
            Some(path) => {
                assert_eq!(errors.len(), 1, "case {i}: {errors:?}");
                assert!(
                    errors[0].starts_with(&format!("{path}: Forbidden")),
                    "case {i}: {errors:?}"
                );
                assert!(
                    errors[0].contains("in conflict with other PodUnavailableBudget by-"),
                    "case {i}: {errors:?}"
                );
            }
        }
    }
}
