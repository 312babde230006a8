use super::*;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::json;

const ZONE: &str = "topology.kubernetes.io/zone";
const HOST: &str = "kubernetes.io/hostname";

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A recorded Pod: its name, node and node labels.
type Record<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);
/// A record as read back: Pod, node, labels.
type ReadRecord = (String, String, Vec<(String, String)>);

/// A PersistentPodState of StatefulSet `web`: required zone, preferred hostname.
fn pps(retention: &str, states: &[Record]) -> PersistentPodState {
    let mut object: PersistentPodState = serde_json::from_value(json!({
        "apiVersion": api::API_VERSION, "kind": api::KIND,
        "metadata": {"name": "web", "namespace": "ns", "generation": 3},
        "spec": {
            "targetRef": {"apiVersion": "apps.kruise.io/v1beta1", "kind": "StatefulSet", "name": "web"},
            "requiredPersistentTopology": {"nodeTopologyKeys": [ZONE]},
            "preferredPersistentTopology": [{"weight": 80, "preference": {"nodeTopologyKeys": [HOST]}}],
            "persistentPodStateRetentionPolicy": retention,
        },
    }))
    .expect("a PersistentPodState");
    if !states.is_empty() {
        object.status = Some(PersistentPodStateStatus {
            observed_generation: 2,
            pod_states: states
                .iter()
                .map(|(pod, node, l)| {
                    (
                        pod.to_string(),
                        PodState {
                            node_name: node.to_string(),
                            node_topology_labels: labels(l),
                            annotations: BTreeMap::new(),
                        },
                    )
                })
                .collect(),
        });
    }
    object
}

fn pod(name: &str, ready: bool, node: &str) -> ObservedPod {
    ObservedPod {
        name: name.into(),
        ready,
        node_name: node.into(),
        annotations: BTreeMap::new(),
    }
}

fn workload(replicas: i32) -> ObservedWorkload {
    ObservedWorkload {
        replicas,
        ..ObservedWorkload::default()
    }
}

fn nodes() -> BTreeMap<String, BTreeMap<String, String>> {
    [
        ("n1", labels(&[(ZONE, "a"), (HOST, "n1"), ("other", "x")])),
        ("n2", labels(&[(ZONE, "b"), (HOST, "n2")])),
        ("n3", labels(&[(HOST, "n3")])),
    ]
    .into_iter()
    .map(|(n, l)| (n.to_string(), l))
    .collect()
}

fn states(status: &PersistentPodStateStatus) -> Vec<ReadRecord> {
    status
        .pod_states
        .iter()
        .map(|(pod, s)| {
            (
                pod.clone(),
                s.node_name.clone(),
                s.node_topology_labels
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            )
        })
        .collect()
}

type Case<'a> = (
    &'a str,
    PersistentPodState,
    Option<ObservedWorkload>,
    Vec<ObservedPod>,
    &'a [(&'a str, &'a str)],
);

#[test]
fn next_status_records_and_drops_as_upstream() {
    let zone_a: &[(&str, &str)] = &[(ZONE, "a"), (HOST, "n1")];
    let zone_b: &[(&str, &str)] = &[(ZONE, "b"), (HOST, "n2")];
    let mut reserved = workload(2);
    reserved.reserved = Reserved::parse(&[IntOrString::Int(0)]);
    // (case, object, workload, pods, pod → node of each record expected)
    let cases: Vec<Case> = vec![
        (
            "ready bound Pods are recorded; unready and unbound ones are not",
            pps("", &[]),
            Some(workload(3)),
            vec![
                pod("web-0", true, "n1"),
                pod("web-1", false, "n2"),
                pod("web-2", true, ""),
            ],
            &[("web-0", "n1")],
        ),
        (
            "a record of a Pod that stayed is kept as it was",
            pps("", &[("web-0", "n1", &[(ZONE, "old"), (HOST, "n1")])]),
            Some(workload(1)),
            vec![pod("web-0", true, "n1")],
            &[("web-0", "n1")],
        ),
        (
            "a Pod that moved is recorded again",
            pps("", &[("web-0", "n1", zone_a)]),
            Some(workload(1)),
            vec![pod("web-0", true, "n2")],
            &[("web-0", "n2")],
        ),
        (
            "a Pod on a node the cache does not know is not recorded yet",
            pps("", &[]),
            Some(workload(1)),
            vec![pod("web-0", true, "gone")],
            &[],
        ),
        (
            "scaled down: a record beyond the replicas goes once its Pod is gone",
            pps(
                "",
                &[
                    ("web-0", "n1", zone_a),
                    ("web-1", "n2", zone_b),
                    ("web-2", "n2", zone_b),
                ],
            ),
            Some(workload(1)),
            vec![pod("web-0", true, "n1"), pod("web-2", true, "n2")],
            &[("web-0", "n1"), ("web-2", "n2")],
        ),
        (
            "WhenDeleted keeps the records of a scaled-down set",
            pps(
                api::RETENTION_WHEN_DELETED,
                &[("web-0", "n1", zone_a), ("web-1", "n2", zone_b)],
            ),
            Some(workload(1)),
            vec![pod("web-0", true, "n1")],
            &[("web-0", "n1"), ("web-1", "n2")],
        ),
        (
            "reserved ordinals are no replicas",
            pps("", &[("web-0", "n1", zone_a), ("web-2", "n2", zone_b)]),
            Some(reserved),
            vec![],
            &[("web-2", "n2")],
        ),
        (
            "a name without an ordinal is kept",
            pps("", &[("weird", "n1", zone_a)]),
            Some(workload(0)),
            vec![],
            &[("weird", "n1")],
        ),
        (
            "the workload gone: no records",
            pps(api::RETENTION_WHEN_DELETED, &[("web-0", "n1", zone_a)]),
            None,
            vec![pod("web-0", true, "n1")],
            &[],
        ),
        (
            "the workload being deleted: no records",
            pps("", &[("web-0", "n1", zone_a)]),
            Some(ObservedWorkload {
                deleting: true,
                ..workload(1)
            }),
            vec![pod("web-0", true, "n1")],
            &[],
        ),
    ];
    let nodes = nodes();
    for (case, object, observed, pods, want) in cases {
        let status = next_status(&object, observed.as_ref(), &pods, |n| nodes.get(n));
        assert_eq!(status.observed_generation, 3, "{case}");
        let got: Vec<(String, String)> = states(&status)
            .into_iter()
            .map(|(p, n, _)| (p, n))
            .collect();
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(p, n)| (p.to_string(), n.to_string()))
            .collect();
        assert_eq!(got, want, "{case}");
    }
}

#[test]
fn a_record_holds_the_asked_keys_the_node_has() {
    let nodes = nodes();
    let object = pps("", &[]);
    let status = next_status(
        &object,
        Some(&workload(2)),
        &[pod("web-0", true, "n1"), pod("web-1", true, "n3")],
        |n| nodes.get(n),
    );
    let recorded = states(&status);
    assert_eq!(
        recorded[0].2,
        vec![
            (HOST.to_string(), "n1".to_string()),
            (ZONE.to_string(), "a".to_string())
        ]
    );
    // n3 has no zone label: only its hostname is recorded.
    assert_eq!(recorded[1].2, vec![(HOST.to_string(), "n3".to_string())]);
}

#[test]
fn keys_changed_means_recorded_again() {
    let nodes = nodes();
    // The spec no longer asks for the zone (the required annotation was removed).
    let mut object = pps("", &[("web-0", "n1", &[(ZONE, "a"), (HOST, "n1")])]);
    object.spec.required_persistent_topology = None;
    let status = next_status(
        &object,
        Some(&workload(1)),
        &[pod("web-0", true, "n1")],
        |n| nodes.get(n),
    );
    assert_eq!(
        states(&status)[0].2,
        vec![(HOST.to_string(), "n1".to_string())]
    );
    // Annotations asked for are recorded with the Pod's value.
    let mut object = pps("", &[]);
    object.spec.persistent_pod_annotations = vec![PersistentPodAnnotation { key: "ip".into() }];
    let mut annotated = pod("web-0", true, "n2");
    annotated.annotations = labels(&[("ip", "10.0.0.1"), ("other", "y")]);
    let status = next_status(&object, Some(&workload(1)), &[annotated], |n| nodes.get(n));
    assert_eq!(
        status.pod_states["web-0"].annotations,
        labels(&[("ip", "10.0.0.1")])
    );
}

#[test]
fn ordinals_are_the_number_after_the_last_dash() {
    let cases = [
        ("web-0", Some(0)),
        ("my-web-12", Some(12)),
        ("web", None),
        ("web-", None),
        ("web-x1", None),
    ];
    for (name, want) in cases {
        assert_eq!(ordinal(name), want, "{name}");
    }
}

#[test]
fn merge_diff_nulls_what_went_at_every_depth() {
    // (old, new, patch)
    let cases = [
        (json!({"a": 1}), json!({"a": 1}), None),
        (json!({"a": 1}), json!({"a": 2}), Some(json!({"a": 2}))),
        (
            json!({"g": 1, "podStates": {"p0": {"l": {"z": "a", "h": "n1"}}, "p1": {"l": {}}}}),
            json!({"g": 2, "podStates": {"p0": {"l": {"h": "n1"}}}}),
            Some(json!({"g": 2, "podStates": {"p0": {"l": {"z": null}}, "p1": null}})),
        ),
        (
            json!({"podStates": {"p0": {}}}),
            json!({}),
            Some(json!({"podStates": null})),
        ),
    ];
    for (old, new, want) in cases {
        assert_eq!(merge_diff(&old, &new), want, "{old} -> {new}");
    }
}

#[test]
fn affinity_from_a_record() {
    let object = pps("", &[]);
    let state = PodState {
        node_name: "n1".into(),
        node_topology_labels: labels(&[(ZONE, "a"), (HOST, "n1")]),
        annotations: BTreeMap::new(),
    };
    let (required, preferred) = affinity(&object.spec, &state);
    assert_eq!(required, labels(&[(ZONE, "a")]));
    assert_eq!(preferred.len(), 1);
    assert_eq!(preferred[0].weight, 80);
    let expression = &preferred[0]
        .preference
        .match_expressions
        .as_ref()
        .expect("terms")[0];
    assert_eq!(
        (expression.key.as_str(), expression.operator.as_str()),
        (HOST, "In")
    );
    assert_eq!(expression.values, Some(vec!["n1".to_string()]));
}

fn new_pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "ownerReferences": [
            {"apiVersion": "apps.kruise.io/v1beta1", "kind": "StatefulSet", "name": "web", "uid": "u1", "controller": true}
        ]},
        "spec": {"containers": [{"name": "main", "image": "busybox"}], "nodeSelector": {"disk": "ssd"}},
    }))
    .expect("a Pod")
}

#[test]
fn inject_a_recorded_pod() {
    let object = pps("", &[("web-0", "n1", &[(ZONE, "a"), (HOST, "n1")])]);
    let mut recorded = new_pod("web-0");
    assert!(inject(&mut recorded, &object));
    let spec = recorded.spec.as_ref().expect("spec");
    assert_eq!(
        spec.node_selector.clone().unwrap_or_default(),
        labels(&[("disk", "ssd"), (ZONE, "a")])
    );
    let preferred = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.preferred_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .expect("preferred affinity");
    assert_eq!(preferred.len(), 1);
    assert_eq!(
        recorded.metadata.annotations.unwrap_or_default()[api::ANNOTATION_INJECTED],
        "web"
    );

    // (case, record of web-0, spec edit, Pod name): nothing injected.
    let mut unrecorded = new_pod("web-1");
    assert!(!inject(&mut unrecorded, &object), "no record");
    assert_eq!(unrecorded, new_pod("web-1"));
    let no_labels = pps("", &[("web-0", "n1", &[])]);
    assert!(
        !inject(&mut new_pod("web-0"), &no_labels),
        "a record without labels"
    );
    let mut no_terms = pps("", &[("web-0", "n1", &[("other", "x")])]);
    no_terms.spec.preferred_persistent_topology.clear();
    let mut only_required = new_pod("web-0");
    // Required asked, but the record lacks the zone: an empty selector adds nothing.
    assert!(!inject(&mut only_required, &no_terms));
}

#[test]
fn select_by_group_kind_and_name() {
    let object = pps("", &[]);
    let mut deleting = pps("", &[]);
    deleting.metadata.deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
    let owner = controller_ref(&new_pod("web-0")).expect("owner");
    assert!(select([&object], &owner).is_some());
    let other_version = TargetReference {
        api_version: "apps.kruise.io/v1alpha1".into(),
        ..owner.clone()
    };
    assert!(
        select([&object], &other_version).is_some(),
        "versions differ"
    );
    let native = TargetReference {
        api_version: "apps/v1".into(),
        ..owner.clone()
    };
    assert!(select([&object], &native).is_none(), "another group");
    assert!(select([&deleting], &owner).is_none(), "being deleted");
}

fn annotated(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    labels(pairs)
}

#[test]
fn generation_from_annotations() {
    let on = annotated(&[
        (api::ANNOTATION_AUTO_GENERATE, "true"),
        (api::ANNOTATION_REQUIRED_TOPOLOGY, ZONE),
        (
            api::ANNOTATION_PREFERRED_TOPOLOGY,
            "kubernetes.io/hostname,rack",
        ),
        (api::ANNOTATION_PERSISTENT_POD_ANNOTATIONS, "ip"),
    ]);
    fn workload(annotations: &BTreeMap<String, String>) -> Workload<'_> {
        Workload {
            api_version: "apps.kruise.io/v1beta1",
            kind: "StatefulSet",
            namespace: "ns",
            name: "web",
            uid: "u1",
            annotations,
        }
    }
    let Generation::Keep(generated) = generation(&workload(&on)) else {
        panic!("generated");
    };
    assert_eq!(generated.metadata.name.as_deref(), Some("web"));
    assert!(controlled_by(&generated, "u1"));
    let spec = &generated.spec;
    assert_eq!(spec.target_reference.kind, "StatefulSet");
    assert_eq!(
        spec.required_persistent_topology
            .as_ref()
            .map(|t| t.node_topology_keys.clone()),
        Some(vec![ZONE.to_string()])
    );
    assert_eq!(spec.preferred_persistent_topology[0].weight, 100);
    assert_eq!(
        spec.preferred_persistent_topology[0]
            .preference
            .node_topology_keys,
        vec![HOST.to_string(), "rack".to_string()]
    );
    assert_eq!(spec.persistent_pod_annotations[0].key, "ip");

    // (annotations, outcome)
    let cases = [
        (annotated(&[]), Generation::Remove),
        (
            annotated(&[
                (api::ANNOTATION_AUTO_GENERATE, "false"),
                (api::ANNOTATION_REQUIRED_TOPOLOGY, ZONE),
            ]),
            Generation::Remove,
        ),
        (
            annotated(&[(api::ANNOTATION_AUTO_GENERATE, "true")]),
            Generation::Incomplete,
        ),
        (
            annotated(&[
                (api::ANNOTATION_AUTO_GENERATE, "true"),
                (api::ANNOTATION_REQUIRED_TOPOLOGY, ""),
            ]),
            Generation::Incomplete,
        ),
    ];
    for (annotations, want) in cases {
        assert_eq!(generation(&workload(&annotations)), want, "{annotations:?}");
    }
    assert!(wants_generation(&on));
}

#[test]
fn spec_update_keeps_the_retention_chosen() {
    let on = annotated(&[
        (api::ANNOTATION_AUTO_GENERATE, "true"),
        (api::ANNOTATION_PREFERRED_TOPOLOGY, HOST),
    ]);
    let Generation::Keep(wanted) = generation(&Workload {
        api_version: "apps/v1",
        kind: "StatefulSet",
        namespace: "ns",
        name: "web",
        uid: "u1",
        annotations: &on,
    }) else {
        panic!("generated");
    };
    let mut existing = (*wanted).clone();
    existing.spec.persistent_pod_state_retention_policy = api::RETENTION_WHEN_DELETED.into();
    assert_eq!(spec_update(&existing, &wanted), None);
    existing.spec.required_persistent_topology = Some(NodeTopologyTerm {
        node_topology_keys: vec![ZONE.into()],
    });
    let update = spec_update(&existing, &wanted).expect("the required term goes");
    assert!(update.required_persistent_topology.is_none());
    assert_eq!(
        update.persistent_pod_state_retention_policy,
        api::RETENTION_WHEN_DELETED
    );
}
