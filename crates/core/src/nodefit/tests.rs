use super::*;
use k8s_openapi::api::core::v1::{
    Affinity, NodeAffinity, NodeSelector, NodeSpec, NodeStatus, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

fn node(name: &str, labels: &[(&str, &str)], taints: &[(&str, &str, &str)]) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            taints: Some(
                taints
                    .iter()
                    .map(|(k, v, e)| Taint {
                        key: k.to_string(),
                        value: (!v.is_empty()).then(|| v.to_string()),
                        effect: e.to_string(),
                        ..Taint::default()
                    })
                    .collect(),
            ),
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            allocatable: Some(
                [("cpu", "2"), ("memory", "4Gi"), ("pods", "110")]
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), K8sQuantity(v.to_string())))
                    .collect(),
            ),
            ..NodeStatus::default()
        }),
    }
}

fn req(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.to_string(),
        operator: op.to_string(),
        values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
    }
}

fn with_terms(terms: Vec<NodeSelectorTerm>) -> PodSpec {
    PodSpec {
        affinity: Some(Affinity {
            node_affinity: Some(NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                    node_selector_terms: terms,
                }),
                ..NodeAffinity::default()
            }),
            ..Affinity::default()
        }),
        ..PodSpec::default()
    }
}

fn exprs(reqs: Vec<NodeSelectorRequirement>) -> NodeSelectorTerm {
    NodeSelectorTerm {
        match_expressions: Some(reqs),
        ..NodeSelectorTerm::default()
    }
}

fn toleration(key: &str, op: &str, value: &str, effect: &str) -> Toleration {
    Toleration {
        key: (!key.is_empty()).then(|| key.to_string()),
        operator: (!op.is_empty()).then(|| op.to_string()),
        value: (!value.is_empty()).then(|| value.to_string()),
        effect: (!effect.is_empty()).then(|| effect.to_string()),
        ..Toleration::default()
    }
}

#[test]
fn node_affinity_operators() {
    let n = node("n1", &[("zone", "a"), ("cores", "8")], &[]);
    let cases: Vec<(&str, Vec<NodeSelectorTerm>, bool)> = vec![
        (
            "In matches",
            vec![exprs(vec![req("zone", "In", &["a", "b"])])],
            true,
        ),
        (
            "In misses",
            vec![exprs(vec![req("zone", "In", &["b"])])],
            false,
        ),
        (
            "NotIn of another value",
            vec![exprs(vec![req("zone", "NotIn", &["b"])])],
            true,
        ),
        (
            "NotIn on a missing label",
            vec![exprs(vec![req("gpu", "NotIn", &["x"])])],
            true,
        ),
        (
            "Exists",
            vec![exprs(vec![req("zone", "Exists", &[])])],
            true,
        ),
        (
            "DoesNotExist",
            vec![exprs(vec![req("zone", "DoesNotExist", &[])])],
            false,
        ),
        ("Gt", vec![exprs(vec![req("cores", "Gt", &["4"])])], true),
        ("Lt", vec![exprs(vec![req("cores", "Lt", &["4"])])], false),
        (
            "Gt on a non-integer",
            vec![exprs(vec![req("zone", "Gt", &["4"])])],
            false,
        ),
        (
            "expressions are ANDed",
            vec![exprs(vec![
                req("zone", "In", &["a"]),
                req("cores", "Lt", &["4"]),
            ])],
            false,
        ),
        (
            "terms are ORed",
            vec![
                exprs(vec![req("zone", "In", &["b"])]),
                exprs(vec![req("zone", "In", &["a"])]),
            ],
            true,
        ),
        (
            "an empty term selects nothing",
            vec![NodeSelectorTerm::default()],
            false,
        ),
        ("no terms select nothing", vec![], false),
        (
            "matchFields metadata.name",
            vec![NodeSelectorTerm {
                match_fields: Some(vec![req("metadata.name", "In", &["n1"])]),
                ..NodeSelectorTerm::default()
            }],
            true,
        ),
        (
            "matchFields another name",
            vec![NodeSelectorTerm {
                match_fields: Some(vec![req("metadata.name", "In", &["n2"])]),
                ..NodeSelectorTerm::default()
            }],
            false,
        ),
    ];
    for (name, terms, want) in cases {
        assert_eq!(selects_node(&with_terms(terms), &n), want, "{name}");
    }
}

#[test]
fn node_selector_and_node_name() {
    let n = node("n1", &[("zone", "a")], &[]);
    let mut spec = PodSpec {
        node_selector: Some([("zone".to_string(), "a".to_string())].into()),
        ..PodSpec::default()
    };
    assert_eq!(pod_fits(&spec, &n), Ok(()));
    spec.node_selector = Some([("zone".to_string(), "b".to_string())].into());
    assert_eq!(pod_fits(&spec, &n), Err(Misfit::NodeAffinity));
    let spec = PodSpec {
        node_name: Some("n2".to_string()),
        ..PodSpec::default()
    };
    assert_eq!(pod_fits(&spec, &n), Err(Misfit::NodeName("n2".to_string())));
}

#[test]
fn tolerations_against_taints() {
    let taint = Taint {
        key: "dedicated".to_string(),
        value: Some("gpu".to_string()),
        effect: "NoSchedule".to_string(),
        ..Taint::default()
    };
    let cases = [
        (
            "Equal with the value",
            toleration("dedicated", "Equal", "gpu", "NoSchedule"),
            true,
        ),
        (
            "operator defaults to Equal",
            toleration("dedicated", "", "gpu", ""),
            true,
        ),
        (
            "Equal with another value",
            toleration("dedicated", "Equal", "cpu", "NoSchedule"),
            false,
        ),
        (
            "Exists ignores the value",
            toleration("dedicated", "Exists", "", "NoSchedule"),
            true,
        ),
        (
            "another effect",
            toleration("dedicated", "Exists", "", "NoExecute"),
            false,
        ),
        ("another key", toleration("other", "Exists", "", ""), false),
        (
            "empty key with Exists tolerates all",
            toleration("", "Exists", "", ""),
            true,
        ),
    ];
    for (name, tol, want) in cases {
        assert_eq!(tolerates(&tol, &taint), want, "{name}");
    }
}

#[test]
fn taints_and_cordons_in_pod_fits() {
    let tainted = node("n1", &[], &[("dedicated", "gpu", "NoSchedule")]);
    let spec = PodSpec::default();
    assert_eq!(
        pod_fits(&spec, &tainted),
        Err(Misfit::Taint {
            key: "dedicated".to_string(),
            effect: "NoSchedule".to_string()
        })
    );
    // PreferNoSchedule never keeps a Pod away.
    let soft = node("n1", &[], &[("dedicated", "gpu", "PreferNoSchedule")]);
    assert_eq!(pod_fits(&spec, &soft), Ok(()));

    let mut cordoned = node("n1", &[], &[]);
    if let Some(s) = cordoned.spec.as_mut() {
        s.unschedulable = Some(true);
    }
    assert_eq!(pod_fits(&spec, &cordoned), Err(Misfit::Unschedulable));
    let tolerant = PodSpec {
        tolerations: Some(vec![toleration(
            TAINT_UNSCHEDULABLE,
            "Exists",
            "",
            "NoSchedule",
        )]),
        ..PodSpec::default()
    };
    assert_eq!(pod_fits(&tolerant, &cordoned), Ok(()));
}

fn container(cpu: &str, memory: &str) -> Container {
    Container {
        name: "c".to_string(),
        resources: Some(ResourceRequirements {
            requests: Some(
                [("cpu", cpu), ("memory", memory)]
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), K8sQuantity(v.to_string())))
                    .collect(),
            ),
            ..ResourceRequirements::default()
        }),
        ..Container::default()
    }
}

#[test]
fn requests_against_allocatable() {
    let n = node("n1", &[], &[]);
    let none = BTreeMap::new();
    let spec = |containers: Vec<Container>, init: Vec<Container>| PodSpec {
        containers,
        init_containers: Some(init),
        ..PodSpec::default()
    };
    let cases = [
        ("fits", spec(vec![container("1", "1Gi")], vec![]), Ok(())),
        (
            "app containers add up",
            spec(
                vec![container("1500m", "1Gi"), container("600m", "1Gi")],
                vec![],
            ),
            Err(Misfit::Resources("cpu".to_string())),
        ),
        (
            "an init container counts alone",
            spec(vec![container("1", "1Gi")], vec![container("1", "5Gi")]),
            Err(Misfit::Resources("memory".to_string())),
        ),
        (
            "init containers do not add to app containers",
            spec(
                vec![container("1500m", "1Gi")],
                vec![container("1500m", "1Gi")],
            ),
            Ok(()),
        ),
    ];
    for (name, spec, want) in cases {
        assert_eq!(requests_fit(&spec, &n, &none), want, "{name}");
    }
    // What other Pods use counts.
    let used: BTreeMap<String, Quantity> = [(
        "cpu".to_string(),
        Quantity::parse("1500m").unwrap_or_else(|e| panic!("{e}")),
    )]
    .into();
    let one = spec(vec![container("1", "1Gi")], vec![]);
    assert_eq!(
        requests_fit(&one, &n, &used),
        Err(Misfit::Resources("cpu".to_string()))
    );
    // An extended resource the node lacks.
    let mut gpu = container("100m", "1Mi");
    if let Some(r) = gpu.resources.as_mut().and_then(|r| r.requests.as_mut()) {
        r.insert("example.com/gpu".to_string(), K8sQuantity("1".to_string()));
    }
    assert_eq!(
        requests_fit(&spec(vec![gpu], vec![]), &n, &none),
        Err(Misfit::Resources("example.com/gpu".to_string()))
    );
}

#[test]
fn daemon_tolerations_are_added_once() {
    let mut spec = PodSpec {
        host_network: Some(true),
        tolerations: Some(vec![toleration(TAINT_NOT_READY, "Exists", "", "NoExecute")]),
        ..PodSpec::default()
    };
    add_daemon_tolerations(&mut spec);
    add_daemon_tolerations(&mut spec);
    let keys: Vec<(String, String)> = spec
        .tolerations
        .iter()
        .flatten()
        .map(|t| {
            (
                t.key.clone().unwrap_or_default(),
                t.effect.clone().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(keys.len(), 7, "{keys:?}");
    assert!(keys.contains(&(
        TAINT_NETWORK_UNAVAILABLE.to_string(),
        "NoSchedule".to_string()
    )));
    assert!(keys.contains(&(TAINT_UNREACHABLE.to_string(), "NoExecute".to_string())));
}

#[test]
fn daemon_verdicts() {
    let plain = PodSpec::default();
    let cases = [
        ("a plain node", node("n", &[], &[]), true, true),
        // A cordon and node conditions are tolerated by default.
        (
            "not ready",
            node("n", &[], &[(TAINT_NOT_READY, "", "NoExecute")]),
            true,
            true,
        ),
        (
            "cordoned",
            node("n", &[], &[(TAINT_UNSCHEDULABLE, "", "NoSchedule")]),
            true,
            true,
        ),
        // A NoSchedule taint keeps new Pods away but lets the running one stay.
        (
            "NoSchedule",
            node("n", &[], &[("dedicated", "x", "NoSchedule")]),
            false,
            true,
        ),
        // A NoExecute taint evicts.
        (
            "NoExecute",
            node("n", &[], &[("dedicated", "x", "NoExecute")]),
            false,
            false,
        ),
    ];
    for (name, n, run, stay) in cases {
        let fit = daemon_fit(&plain, &n);
        assert_eq!(
            (fit.should_run, fit.should_continue_running),
            (run, stay),
            "{name}"
        );
    }
    let picky = PodSpec {
        node_selector: Some([("pool".to_string(), "canary".to_string())].into()),
        ..PodSpec::default()
    };
    let fit = daemon_fit(&picky, &node("n", &[("pool", "main")], &[]));
    assert_eq!(
        fit,
        DaemonFit {
            should_run: false,
            should_continue_running: false,
            misfit: Some(Misfit::NodeAffinity)
        }
    );
}

#[test]
fn binding_to_a_node_and_reading_it_back() {
    let mut spec = with_terms(vec![exprs(vec![req("zone", "In", &["a"])])]);
    assert_eq!(bound_node(&spec), None);
    bind_to_node(&mut spec, "n7");
    assert_eq!(bound_node(&spec), Some("n7"));
    let terms = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|r| r.node_selector_terms.len());
    assert_eq!(terms, Some(1));
    assert!(selects_node(&spec, &node("n7", &[], &[])));
    assert!(!selects_node(&spec, &node("n8", &[("zone", "a")], &[])));
    spec.node_name = Some("n9".to_string());
    assert_eq!(bound_node(&spec), Some("n9"));
}
