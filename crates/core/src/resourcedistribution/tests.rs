use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;
use proptest::prelude::*;
use serde_json::json;

use super::*;

fn targets(value: Value) -> ResourceDistributionTargets {
    serde_json::from_value(value).expect("targets")
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn names(set: &BTreeSet<String>) -> Vec<&str> {
    set.iter().map(String::as_str).collect()
}

#[test]
fn targeting_table() {
    let cluster = [
        ("default", labels(&[])),
        ("kube-system", labels(&[])),
        ("team-a", labels(&[("team", "a"), ("env", "prod")])),
        ("team-b", labels(&[("team", "b"), ("env", "prod")])),
        ("sandbox", labels(&[("env", "dev")])),
    ];
    let cases: Vec<(&str, Value, Vec<&str>, Vec<&str>)> = vec![
        (
            "all namespaces but the excluded",
            json!({"allNamespaces": true, "excludedNamespaces": {"list": [{"name": "kube-system"}]}}),
            vec!["default", "sandbox", "team-a", "team-b"],
            vec!["kube-system"],
        ),
        (
            "all namespaces ignores the selector",
            json!({"allNamespaces": true, "namespaceLabelSelector": {"matchLabels": {"team": "a"}}}),
            vec!["default", "kube-system", "sandbox", "team-a", "team-b"],
            vec![],
        ),
        (
            "a list, one of them missing",
            json!({"includedNamespaces": {"list": [{"name": "team-a"}, {"name": "ghost"}]}}),
            vec!["ghost", "team-a"],
            vec!["default", "kube-system", "sandbox", "team-b"],
        ),
        (
            "a selector",
            json!({"namespaceLabelSelector": {"matchLabels": {"env": "prod"}}}),
            vec!["team-a", "team-b"],
            vec!["default", "kube-system", "sandbox"],
        ),
        (
            "a selector with expressions, united with a list, minus exclusions",
            json!({
                "includedNamespaces": {"list": [{"name": "default"}]},
                "namespaceLabelSelector": {"matchExpressions": [{"key": "team", "operator": "Exists"}]},
                "excludedNamespaces": {"list": [{"name": "team-b"}]}
            }),
            vec!["default", "team-a"],
            vec!["kube-system", "sandbox", "team-b"],
        ),
        (
            "no target at all: nothing (an empty selector selects nothing here)",
            json!({}),
            vec![],
            vec!["default", "kube-system", "sandbox", "team-a", "team-b"],
        ),
    ];
    for (name, spec, matched, unmatched) in cases {
        let result = target(&targets(spec), cluster.iter().map(|(n, l)| (*n, l)));
        assert_eq!(names(&result.matched), matched, "{name}: matched");
        assert_eq!(names(&result.unmatched), unmatched, "{name}: unmatched");
    }
}

#[test]
fn steps_table() {
    use Existing::*;
    let cases = [
        (NoNamespace, Step::ReportNoNamespace, Step::Nothing),
        (Absent, Step::Create, Step::Nothing),
        (Owned { current: true }, Step::Nothing, Step::Delete),
        (Owned { current: false }, Step::Update, Step::Delete),
        (Foreign, Step::ReportConflict, Step::Nothing),
    ];
    for (existing, matched, unmatched) in cases {
        assert_eq!(distribute(existing), matched, "{existing:?} matched");
        assert_eq!(clean(existing), unmatched, "{existing:?} unmatched");
    }
}

fn source() -> Source<'static> {
    Source {
        name: "rd",
        uid: "uid-1",
        hash: "h1",
    }
}

#[test]
fn a_copy_is_owned_annotated_and_current() {
    let resource = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "s", "namespace": "elsewhere", "labels": {"app": "x"}, "resourceVersion": "9"},
        "stringData": {"user": "admin"}
    });
    let copy = new_copy(&resource, "team-a", &source());
    assert_eq!(copy["metadata"]["namespace"], "team-a");
    assert!(copy["metadata"].get("resourceVersion").is_none());
    assert_eq!(copy["metadata"]["labels"]["app"], "x");
    assert_eq!(copy["metadata"]["annotations"][rd::ANNOTATION_HASH], "h1");
    assert_eq!(copy["metadata"]["annotations"][rd::ANNOTATION_FROM], "rd");
    assert_eq!(
        copy["metadata"]["ownerReferences"][0]["kind"],
        "ResourceDistribution"
    );
    assert_eq!(copy["metadata"]["ownerReferences"][0]["controller"], true);
    assert_eq!(
        copy["data"]["user"], "YWRtaW4=",
        "stringData folded into data"
    );
    assert!(copy.get("stringData").is_none());
    assert_eq!(copy["type"], "Opaque");
    // What the apiserver hands back is current; a changed value or hash is not.
    let mut stored = copy.clone();
    stored["metadata"]["resourceVersion"] = json!("12");
    assert!(current(&stored, &resource, "h1"));
    assert!(!current(&stored, &resource, "h2"));
    let mut changed = resource.clone();
    changed["stringData"]["user"] = json!("root");
    assert!(!current(&stored, &changed, "h1"));
    let owners: Vec<OwnerReference> =
        serde_json::from_value(stored["metadata"]["ownerReferences"].clone()).expect("owners");
    assert!(controlled_by(&owners, "rd"));
    assert!(!controlled_by(&owners, "other"));
}

#[test]
fn the_update_patch_replaces_content_keeps_foreign_metadata_and_is_preconditioned() {
    let existing = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "a", "resourceVersion": "5",
            "labels": {"local": "1"},
            "annotations": {"note": "mine", rd::ANNOTATION_HASH: "old"},
            "ownerReferences": [{"apiVersion": rd::API_VERSION, "kind": rd::KIND, "name": "rd",
                "uid": "uid-1", "controller": true}]},
        "data": {"a": "1", "gone": "x"}
    });
    let resource = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "2"}});
    let patch = update_patch(&existing, &resource, &source());
    assert_eq!(patch["data"], json!({"a": "2", "gone": null}));
    assert_eq!(patch["metadata"]["resourceVersion"], "5");
    assert_eq!(patch["metadata"]["annotations"][rd::ANNOTATION_HASH], "h1");
    assert!(
        patch["metadata"]["annotations"].get("note").is_none(),
        "merge keeps it"
    );
    assert!(
        patch["metadata"].get("ownerReferences").is_none(),
        "already owned"
    );
    let mut merged = existing.clone();
    json_patch::merge(&mut merged, &patch);
    assert!(current(&merged, &resource, "h1"));
    assert_eq!(merged["metadata"]["annotations"]["note"], "mine");
    assert_eq!(merged["metadata"]["labels"]["local"], "1");
}

#[test]
fn status_counts_and_conditions() {
    let now = Time(Timestamp::from_second(1_000).expect("time"));
    let earlier = Time(Timestamp::from_second(10).expect("time"));
    let failures = vec![
        Failure {
            condition: rd::CONDITION_CONFLICT,
            namespace: "b".into(),
            reason: REASON_CONFLICT.into(),
        },
        Failure {
            condition: rd::CONDITION_NAMESPACE_NOT_EXISTS,
            namespace: "ghost".into(),
            reason: REASON_NO_NAMESPACE.into(),
        },
    ];
    let old = vec![ResourceDistributionCondition {
        type_: rd::CONDITION_GET_FAILED.into(),
        status: "False".into(),
        last_transition_time: Some(earlier.clone()),
        reason: rd::REASON_SUCCEEDED.into(),
        failed_namespaces: vec![],
    }];
    let status = status(3, 4, 2, &failures, &old, &now);
    assert_eq!((status.desired, status.succeeded, status.failed), (4, 2, 2));
    assert_eq!(status.observed_generation, 3);
    let types: Vec<&str> = status.conditions.iter().map(|c| c.type_.as_str()).collect();
    assert_eq!(types, rd::CONDITION_TYPES);
    let by_type = |t: &str| {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == t)
            .expect("condition")
    };
    assert_eq!(
        by_type(rd::CONDITION_GET_FAILED).last_transition_time,
        Some(earlier)
    );
    let conflict = by_type(rd::CONDITION_CONFLICT);
    assert_eq!(
        (conflict.status.as_str(), conflict.reason.as_str()),
        ("True", REASON_CONFLICT)
    );
    assert_eq!(conflict.failed_namespaces, ["b"]);
    assert_eq!(conflict.last_transition_time, Some(now.clone()));
    let create = by_type(rd::CONDITION_CREATE_FAILED);
    assert_eq!(
        (create.status.as_str(), create.reason.as_str()),
        ("False", rd::REASON_SUCCEEDED)
    );
}

fn namespace_name() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["a", "b", "c", "d", "e", "f"]).prop_map(str::to_owned)
}

prop_compose! {
    fn arbitrary_targets()(
        all in any::<bool>(),
        included in prop::collection::btree_set(namespace_name(), 0..4),
        excluded in prop::collection::btree_set(namespace_name(), 0..3),
        team in prop::option::of(prop::sample::select(vec!["x", "y"])),
    ) -> ResourceDistributionTargets {
        targets(json!({
            "allNamespaces": all,
            "includedNamespaces": {"list": included.iter().map(|n| json!({"name": n})).collect::<Vec<_>>()},
            "excludedNamespaces": {"list": excluded.iter().map(|n| json!({"name": n})).collect::<Vec<_>>()},
            "namespaceLabelSelector": team.map_or(json!({}), |t| json!({"matchLabels": {"team": t}})),
        }))
    }
}

proptest! {
    /// Matched and unmatched never overlap, every existing namespace is in one of them, an excluded
    /// namespace is never matched, an included one always is unless excluded, and the targeting of
    /// the whole cluster agrees with the per-namespace test the namespace watch uses.
    #[test]
    fn targeting_invariants(
        spec in arbitrary_targets(),
        cluster in prop::collection::btree_map(namespace_name(), prop::option::of(prop::sample::select(vec!["x", "y"])), 0..6),
    ) {
        let cluster: Vec<(String, BTreeMap<String, String>)> = cluster
            .into_iter()
            .map(|(name, team)| (name, team.map(|t| labels(&[("team", t)])).unwrap_or_default()))
            .collect();
        let result = target(&spec, cluster.iter().map(|(n, l)| (n.as_str(), l)));
        prop_assert!(result.matched.is_disjoint(&result.unmatched));
        for (name, labels) in &cluster {
            prop_assert!(result.matched.contains(name) || result.unmatched.contains(name));
            prop_assert_eq!(result.matched.contains(name), selects(&spec, name, labels));
        }
        for name in spec.excluded_namespaces.names() {
            prop_assert!(!result.matched.contains(name));
        }
        for name in spec.included_namespaces.names().filter(|_| !spec.all_namespaces) {
            let excluded = spec.excluded_namespaces.names().any(|n| n == name);
            prop_assert_eq!(result.matched.contains(name), !excluded);
        }
        if spec.all_namespaces {
            let excluded: BTreeSet<String> = spec.excluded_namespaces.names().map(str::to_owned).collect();
            let unmatched_existing: BTreeSet<String> = cluster.iter().map(|(n, _)| n.clone()).filter(|n| excluded.contains(n)).collect();
            prop_assert_eq!(&result.unmatched, &unmatched_existing);
        }
    }
}
