use super::*;
use serde_json::json;

fn pps(name: &str, spec: serde_json::Value) -> PersistentPodState {
    serde_json::from_value(json!({
        "apiVersion": API_VERSION, "kind": KIND,
        "metadata": {"name": name, "namespace": "ns"},
        "spec": spec,
    }))
    .expect("a PersistentPodState")
}

fn sts_spec(api_version: &str, kind: &str, name: &str) -> serde_json::Value {
    json!({
        "targetRef": {"apiVersion": api_version, "kind": kind, "name": name},
        "requiredPersistentTopology": {"nodeTopologyKeys": ["topology.kubernetes.io/zone"]},
    })
}

#[test]
fn json_names_are_upstreams() {
    let object = pps(
        "web",
        json!({
            "targetRef": {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web"},
            "persistentPodAnnotations": [{"key": "cni/ip"}],
            "requiredPersistentTopology": {"nodeTopologyKeys": ["zone"]},
            "preferredPersistentTopology": [{"weight": 100, "preference": {"nodeTopologyKeys": ["host"]}}],
            "persistentPodStateRetentionPolicy": "WhenDeleted",
        }),
    );
    assert_eq!(object.spec.target_reference.name, "web");
    assert_eq!(object.spec.persistent_pod_annotations[0].key, "cni/ip");
    assert_eq!(object.spec.preferred_persistent_topology[0].weight, 100);
    assert_eq!(
        object.spec.persistent_pod_state_retention_policy,
        RETENTION_WHEN_DELETED
    );
    let status: PersistentPodStateStatus = serde_json::from_value(json!({
        "observedGeneration": 2,
        "podStates": {"web-0": {"nodeName": "n1", "nodeTopologyLabels": {"zone": "a"}, "annotations": {"k": "v"}}},
    }))
    .expect("status");
    assert_eq!(status.pod_states["web-0"].node_topology_labels["zone"], "a");
    let back = serde_json::to_value(&status).expect("encodes");
    assert_eq!(back["podStates"]["web-0"]["nodeName"], "n1");
}

#[test]
fn crd_is_namespaced_v1alpha1_only_with_status() {
    let crd = crd();
    assert_eq!(
        crd.metadata.name.as_deref(),
        Some("persistentpodstates.apps.kruise.io")
    );
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(crd.spec.versions.len(), 1);
    assert!(crd.spec.versions[0].storage && crd.spec.versions[0].served);
    assert!(crd.spec.names.short_names.is_none());
}

#[test]
fn whitelist_allows_statefulsets_and_listed_kinds() {
    let list = Whitelist::parse(
        r#"{"workloads":[{"Group":"apps.kruise.io","Version":"v1beta1","Kind":"StatefulSetLikeTest"}]}"#,
    )
    .expect("parses");
    // (apiVersion, kind, allowed)
    let cases = [
        ("apps/v1", "StatefulSet", true),
        ("apps.kruise.io/v1beta1", "StatefulSet", true),
        ("apps.kruise.io/v1alpha1", "StatefulSet", true),
        ("apps.kruise.io/v1beta1", "StatefulSetLikeTest", true),
        ("apps.kruise.io/v1alpha1", "StatefulSetLikeTest", true),
        ("apps/v1", "Deployment", false),
        ("example.com/v1", "StatefulSet", false),
        ("", "StatefulSet", false),
        // Not a group/version (upstream's ParseGroupVersion fails).
        ("apps/v1/x", "StatefulSet", false),
    ];
    for (api_version, kind, allowed) in cases {
        assert_eq!(
            list.allows(api_version, kind),
            allowed,
            "{api_version} {kind}"
        );
    }
    assert!(!Whitelist::default().allows("apps.kruise.io/v1beta1", "StatefulSetLikeTest"));
    assert!(Whitelist::parse("not json").is_err());
}

/// (case, object, old, others, error field)
type Case<'a> = (
    &'a str,
    &'a PersistentPodState,
    Option<&'a PersistentPodState>,
    Vec<PersistentPodState>,
    &'a str,
);

#[test]
fn validation_as_upstreams_webhook() {
    let ok = pps("web", sts_spec("apps/v1", "StatefulSet", "web"));
    let none: &[PersistentPodState] = &[];
    let list = Whitelist::default();
    assert!(validate(&ok, None, none, &list).is_empty());

    // (case, object, old, others, error field)
    let no_topology = pps(
        "web",
        json!({"targetRef": {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web"}}),
    );
    let empty_ref = pps("web", sts_spec("", "StatefulSet", ""));
    let deployment = pps("web", sts_spec("apps/v1", "Deployment", "web"));
    let moved = pps("web", sts_spec("apps/v1", "StatefulSet", "other"));
    let conflicting = pps("pps-test", sts_spec("apps/v1beta1", "StatefulSet", "web"));
    let cases: Vec<Case> = vec![
        ("no topology", &no_topology, None, vec![], "spec"),
        (
            "empty targetRef",
            &empty_ref,
            None,
            vec![],
            "spec.targetRef",
        ),
        (
            "not a StatefulSet",
            &deployment,
            None,
            vec![],
            "spec.targetRef",
        ),
        (
            "targetRef changed",
            &moved,
            Some(&ok),
            vec![],
            "spec.targetRef",
        ),
        (
            "same workload, other group version",
            &conflicting,
            None,
            vec![ok.clone()],
            "spec.targetReference",
        ),
    ];
    for (case, object, old, others, field) in cases {
        let errors = validate(object, old, &others, &list);
        assert!(
            errors
                .iter()
                .any(|e| e.to_string().starts_with(&format!("{field}:"))),
            "{case}: {errors:?}"
        );
    }
    // Itself among the others (an update) is no conflict.
    assert!(validate(&ok, Some(&ok), std::slice::from_ref(&ok), &list).is_empty());
}
