use super::*;
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, ExecAction, HTTPGetAction, PodSpec, PodStatus, Probe, TCPSocketAction,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kruise_api::podprobemarker::{PodProbeMarkerSpec, ProbeMarkerPolicy};

fn ts(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).expect("valid")
}

fn exec(cmd: &str) -> Probe {
    Probe {
        exec: Some(ExecAction {
            command: Some(vec!["/bin/sh".into(), "-c".into(), cmd.into()]),
        }),
        ..Probe::default()
    }
}

fn policy(state: &str, labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> ProbeMarkerPolicy {
    ProbeMarkerPolicy {
        state: state.into(),
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect(),
        annotations: annotations
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect(),
    }
}

fn marker(name: &str, probes: Vec<PodContainerProbe>) -> PodProbeMarker {
    let mut m = PodProbeMarker::new(
        name,
        PodProbeMarkerSpec {
            selector: LabelSelector {
                match_labels: Some([("app".to_owned(), "web".to_owned())].into()),
                ..LabelSelector::default()
            },
            probes,
        },
    );
    m.metadata.namespace = Some("ns".into());
    m
}

fn healthy_probe(name: &str, condition: &str) -> PodContainerProbe {
    PodContainerProbe {
        name: name.into(),
        container_name: "main".into(),
        probe: exec("true"),
        marker_policy: vec![
            policy(
                ppm::PROBE_SUCCEEDED,
                &[("healthy", "yes")],
                &[("cost", "10")],
            ),
            policy(
                ppm::PROBE_FAILED,
                &[("unhealthy", "yes")],
                &[("cost2", "-10")],
            ),
        ],
        pod_condition_type: condition.into(),
    }
}

fn pod(phase: &str, initialized: Option<&str>, node: Option<&str>) -> Pod {
    Pod {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some("p".into()),
            namespace: Some("ns".into()),
            uid: Some("uid-1".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: node.map(Into::into),
            containers: vec![Container {
                name: "main".into(),
                ports: Some(vec![ContainerPort {
                    name: Some("http".into()),
                    container_port: 8080,
                    ..ContainerPort::default()
                }]),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            phase: Some(phase.into()),
            conditions: initialized.map(|s| {
                vec![PodCondition {
                    type_: "Initialized".into(),
                    status: s.into(),
                    ..PodCondition::default()
                }]
            }),
            ..PodStatus::default()
        }),
    }
}

#[test]
fn candidates_are_active_initialized_and_bound() {
    let cases = [
        (
            "running, initialized, bound",
            pod("Running", Some("True"), Some("n1")),
            true,
        ),
        (
            "pending, initialized, bound",
            pod("Pending", Some("True"), Some("n1")),
            true,
        ),
        (
            "not initialized",
            pod("Running", Some("False"), Some("n1")),
            false,
        ),
        (
            "no Initialized condition",
            pod("Running", None, Some("n1")),
            false,
        ),
        ("not bound", pod("Pending", Some("True"), None), false),
        (
            "succeeded",
            pod("Succeeded", Some("True"), Some("n1")),
            false,
        ),
        ("failed", pod("Failed", Some("True"), Some("n1")), false),
    ];
    for (name, pod, want) in cases {
        assert_eq!(is_probe_candidate(&pod), want, "{name}");
    }
    let mut deleting = pod("Running", Some("True"), Some("n1"));
    deleting.metadata.deletion_timestamp = Some(Time(ts(0)));
    assert!(!is_probe_candidate(&deleting));
}

#[test]
fn named_ports_resolve_to_the_container_port() {
    let tcp = |port: IntOrString, container: &str| PodContainerProbe {
        name: "t".into(),
        container_name: container.into(),
        probe: Probe {
            tcp_socket: Some(TCPSocketAction { port, host: None }),
            ..Probe::default()
        },
        ..PodContainerProbe::default()
    };
    let http = |port: IntOrString| PodContainerProbe {
        name: "h".into(),
        container_name: "main".into(),
        probe: Probe {
            http_get: Some(HTTPGetAction {
                port,
                path: Some("/".into()),
                ..HTTPGetAction::default()
            }),
            ..Probe::default()
        },
        ..PodContainerProbe::default()
    };
    let p = pod("Running", Some("True"), Some("n1"));
    let port_of = |spec: Result<ContainerProbeSpec, String>| {
        spec.map(|s| {
            s.tcp_socket
                .map(|t| t.port)
                .or(s.http_get.map(|h| h.port))
                .expect("a port")
        })
    };
    let cases: [(&str, PodContainerProbe, Result<IntOrString, &str>); 6] = [
        (
            "tcp number",
            tcp(IntOrString::Int(80), "main"),
            Ok(IntOrString::Int(80)),
        ),
        (
            "tcp name",
            tcp(IntOrString::String("http".into()), "main"),
            Ok(IntOrString::Int(8080)),
        ),
        (
            "tcp numeric string",
            tcp(IntOrString::String("81".into()), "main"),
            Ok(IntOrString::Int(81)),
        ),
        (
            "http name",
            http(IntOrString::String("http".into())),
            Ok(IntOrString::Int(8080)),
        ),
        (
            "unknown name",
            tcp(IntOrString::String("grpc".into()), "main"),
            Err("Failed to extract port for container: main in pod: ns/p"),
        ),
        (
            "unknown container",
            tcp(IntOrString::String("http".into()), "side"),
            Err("Failed to get container by name: side in pod: ns/p"),
        ),
    ];
    for (name, probe, want) in cases {
        assert_eq!(
            port_of(resolve_ports(&probe, &p)),
            want.map_err(str::to_owned),
            "{name}"
        );
    }
    // Exec probes are untouched.
    let e = healthy_probe("e", "c");
    assert_eq!(resolve_ports(&e, &p), Ok(e.probe.clone()));
}

fn entry(name: &str, uid: &str, ip: &str, probes: &[&str]) -> PodProbe {
    PodProbe {
        name: name.into(),
        namespace: "ns".into(),
        uid: uid.into(),
        ip: ip.into(),
        probes: probes.iter().map(|p| cprobe(p, "true")).collect(),
    }
}

fn cprobe(name: &str, cmd: &str) -> ContainerProbe {
    ContainerProbe {
        name: name.into(),
        container_name: "main".into(),
        probe: exec(cmd),
    }
}

fn wanted(name: &str, uid: &str, ip: &str, probes: Vec<ContainerProbe>) -> PodProbes {
    PodProbes {
        name: name.into(),
        namespace: "ns".into(),
        uid: uid.into(),
        ip: ip.into(),
        probes,
    }
}

#[test]
fn a_marker_adds_updates_and_prunes_its_probes() {
    struct Case {
        name: &'static str,
        have: Vec<PodProbe>,
        pods: Vec<PodProbes>,
        want: Vec<PodProbe>,
    }
    let cases = vec![
        Case {
            name: "new pod gets an entry",
            have: vec![],
            pods: vec![wanted("a", "u1", "10.0.0.1", vec![cprobe("m#x", "true")])],
            want: vec![entry("a", "u1", "10.0.0.1", &["m#x"])],
        },
        Case {
            name: "existing entry gets the probe beside another marker's",
            have: vec![entry("a", "u1", "10.0.0.1", &["o#y"])],
            pods: vec![wanted("a", "u1", "10.0.0.1", vec![cprobe("m#x", "true")])],
            want: vec![entry("a", "u1", "10.0.0.1", &["o#y", "m#x"])],
        },
        Case {
            name: "empty IP is filled in",
            have: vec![entry("a", "u1", "", &["m#x"])],
            pods: vec![wanted("a", "u1", "10.0.0.2", vec![cprobe("m#x", "true")])],
            want: vec![entry("a", "u1", "10.0.0.2", &["m#x"])],
        },
        Case {
            name: "a recreated pod (new uid) gets its own entry",
            have: vec![entry("a", "u1", "10.0.0.1", &["m#x"])],
            pods: vec![wanted("a", "u2", "10.0.0.3", vec![cprobe("m#x", "true")])],
            want: vec![
                entry("a", "u1", "10.0.0.1", &["m#x"]),
                entry("a", "u2", "10.0.0.3", &["m#x"]),
            ],
        },
        Case {
            name: "a probe the marker dropped goes; other markers' stay",
            have: vec![entry("a", "u1", "ip", &["m#x", "m#old", "o#y"])],
            pods: vec![wanted("a", "u1", "ip", vec![cprobe("m#x", "true")])],
            want: vec![entry("a", "u1", "ip", &["m#x", "o#y"])],
        },
        Case {
            name: "a marker with a similar name keeps its probes",
            have: vec![entry("a", "u1", "ip", &["mm#x"])],
            pods: vec![wanted("a", "u1", "ip", vec![cprobe("m#x", "true")])],
            want: vec![entry("a", "u1", "ip", &["mm#x", "m#x"])],
        },
    ];
    for case in cases {
        let spec = NodePodProbeSpec {
            pod_probes: case.have,
        };
        assert_eq!(
            apply_marker(&spec, "m", &case.pods).pod_probes,
            case.want,
            "{}",
            case.name
        );
    }
    // A changed probe replaces the old one.
    let spec = NodePodProbeSpec {
        pod_probes: vec![entry("a", "u1", "ip", &["m#x"])],
    };
    let out = apply_marker(
        &spec,
        "m",
        &[wanted("a", "u1", "ip", vec![cprobe("m#x", "ls")])],
    );
    assert_eq!(out.pod_probes[0].probes, vec![cprobe("m#x", "ls")]);
}

#[test]
fn removing_a_marker_removes_only_its_probes() {
    let spec = NodePodProbeSpec {
        pod_probes: vec![
            entry("a", "u1", "ip", &["m#x", "o#y"]),
            entry("b", "u2", "ip", &["m#x"]),
            entry("c", "u3", "ip", &["mm#x"]),
            PodProbe {
                namespace: "other".into(),
                ..entry("d", "u4", "ip", &["m#x"])
            },
        ],
    };
    let out = remove_marker(&spec, "ns", "m");
    assert_eq!(
        out.pod_probes,
        vec![
            entry("a", "u1", "ip", &["o#y"]),
            entry("c", "u3", "ip", &["mm#x"]),
            PodProbe {
                namespace: "other".into(),
                ..entry("d", "u4", "ip", &["m#x"])
            },
        ]
    );
    let kept = keep_pods(&spec, |p| p.uid != "u2");
    assert_eq!(kept.pod_probes.len(), 3);
    assert!(kept.pod_probes.iter().all(|p| p.uid != "u2"));
}

fn state(name: &str, st: &str, message: &str) -> ContainerProbeState {
    ContainerProbeState {
        name: name.into(),
        state: st.into(),
        last_probe_time: Some(Time(ts(5))),
        last_transition_time: Some(Time(ts(1))),
        message: message.into(),
    }
}

fn with_meta(
    mut p: Pod,
    labels: &[(&str, &str)],
    annotations: &[(&str, &str)],
    conditions: &[(&str, &str)],
) -> Pod {
    p.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect(),
    );
    p.metadata.annotations = Some(
        annotations
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect(),
    );
    if let Some(status) = p.status.as_mut() {
        status
            .conditions
            .get_or_insert_with(Vec::new)
            .extend(conditions.iter().map(|(t, s)| PodCondition {
                type_: (*t).into(),
                status: (*s).into(),
                ..PodCondition::default()
            }));
    }
    p
}

#[test]
fn probe_states_become_conditions_and_markers() {
    let m = marker(
        "m",
        vec![
            healthy_probe("healthy", "game.io/healthy"),
            PodContainerProbe {
                pod_condition_type: "game.io/healthy".into(),
                ..healthy_probe("dup", "")
            },
            PodContainerProbe {
                marker_policy: vec![],
                ..healthy_probe("bare", "game.io/bare")
            },
        ],
    );
    let lookup = |name: &str| (name == "m").then_some(&m);
    let base = pod("Running", Some("True"), Some("n1"));
    let status = |states: Vec<ContainerProbeState>| PodProbeStatus {
        name: "p".into(),
        namespace: "ns".into(),
        uid: "uid-1".into(),
        probe_states: states,
    };
    let cond = |t: &str, s: &str, message: &str| PodCondition {
        type_: t.into(),
        status: s.into(),
        last_probe_time: Some(Time(ts(5))),
        last_transition_time: Some(Time(ts(1))),
        message: Some(message.to_owned()).filter(|m| !m.is_empty()),
        ..PodCondition::default()
    };
    let set = |pairs: &[(&str, Option<&str>)]| {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.map(str::to_owned)))
            .collect::<BTreeMap<_, _>>()
    };
    struct Case {
        name: &'static str,
        pod: Pod,
        states: Vec<ContainerProbeState>,
        want: PodUpdate,
    }
    let cases = vec![
        Case {
            name: "succeeded: condition True, success markers set, failure markers removed",
            pod: with_meta(base.clone(), &[("unhealthy", "yes")], &[], &[]),
            states: vec![state("m#healthy", "Succeeded", "")],
            want: PodUpdate {
                conditions: vec![cond("game.io/healthy", "True", "")],
                labels: set(&[("healthy", Some("yes")), ("unhealthy", None)]),
                annotations: set(&[("cost", Some("10"))]),
            },
        },
        Case {
            name: "failed: condition False with the message",
            pod: with_meta(base.clone(), &[("healthy", "yes")], &[("cost", "10")], &[]),
            states: vec![state("m#healthy", "Failed", "exit 1")],
            want: PodUpdate {
                conditions: vec![cond("game.io/healthy", "False", "exit 1")],
                labels: set(&[("healthy", None), ("unhealthy", Some("yes"))]),
                annotations: set(&[("cost", None), ("cost2", Some("-10"))]),
            },
        },
        Case {
            // As upstream: with no policy of its own state, the last policy listed counts as the
            // opposite one, and only its markers are removed.
            name: "unknown: condition False, the last policy's markers removed",
            pod: with_meta(
                base.clone(),
                &[("healthy", "yes"), ("unhealthy", "yes")],
                &[],
                &[],
            ),
            states: vec![state("m#healthy", "Unknown", "")],
            want: PodUpdate {
                conditions: vec![cond("game.io/healthy", "False", "")],
                labels: set(&[("unhealthy", None)]),
                annotations: set(&[]),
            },
        },
        Case {
            name: "already as wanted: nothing",
            pod: with_meta(
                base.clone(),
                &[("healthy", "yes")],
                &[("cost", "10")],
                &[("game.io/healthy", "True")],
            ),
            states: vec![state("m#healthy", "Succeeded", "")],
            want: PodUpdate::default(),
        },
        Case {
            name: "a condition type set by an earlier probe is not overwritten",
            pod: with_meta(
                base.clone(),
                &[("healthy", "yes"), ("unhealthy", "yes")],
                &[("cost", "10"), ("cost2", "-10")],
                &[],
            ),
            states: vec![
                state("m#healthy", "Succeeded", ""),
                state("m#dup", "Failed", ""),
            ],
            want: PodUpdate {
                conditions: vec![cond("game.io/healthy", "True", "")],
                labels: set(&[("healthy", None)]),
                annotations: set(&[("cost", None)]),
            },
        },
        Case {
            name: "empty states, unknown markers and unknown probes are skipped",
            pod: base.clone(),
            states: vec![
                state("m#healthy", "", ""),
                state("gone#healthy", "Succeeded", ""),
                state("m#nope", "Succeeded", ""),
                state("nohash", "Succeeded", ""),
            ],
            want: PodUpdate::default(),
        },
        Case {
            name: "a probe without markers only sets its condition",
            pod: base.clone(),
            states: vec![state("m#bare", "Succeeded", "")],
            want: PodUpdate {
                conditions: vec![cond("game.io/bare", "True", "")],
                ..PodUpdate::default()
            },
        },
    ];
    for case in cases {
        assert_eq!(
            pod_update(&case.pod, &status(case.states), lookup),
            case.want,
            "{}",
            case.name
        );
    }
}

#[test]
fn thresholds_report_runs() {
    use Outcome::{Failed, Succeeded};
    struct Case {
        name: &'static str,
        success: i32,
        failure: i32,
        attempts: Vec<Outcome>,
        reported: Vec<Option<Outcome>>,
    }
    let cases = vec![
        Case {
            name: "defaults (0) count as 1",
            success: 0,
            failure: 0,
            attempts: vec![Succeeded, Failed, Succeeded],
            reported: vec![Some(Succeeded), Some(Failed), Some(Succeeded)],
        },
        Case {
            name: "failureThreshold 3",
            success: 1,
            failure: 3,
            attempts: vec![Failed, Failed, Succeeded, Failed, Failed, Failed, Failed],
            reported: vec![
                None,
                None,
                Some(Succeeded),
                None,
                None,
                Some(Failed),
                Some(Failed),
            ],
        },
        Case {
            name: "successThreshold 2",
            success: 2,
            failure: 1,
            attempts: vec![Succeeded, Failed, Succeeded, Succeeded],
            reported: vec![None, Some(Failed), None, Some(Succeeded)],
        },
    ];
    for case in cases {
        let mut run = ProbeRun::default();
        let got: Vec<_> = case
            .attempts
            .iter()
            .map(|o| run.observe(*o, case.success, case.failure))
            .collect();
        assert_eq!(got, case.reported, "{}", case.name);
    }
}

#[test]
fn delays_periods_and_messages() {
    assert!(
        !initial_delay_passed(ts(0), ts(0), 0),
        "at least one second"
    );
    assert!(initial_delay_passed(ts(0), ts(1), 0));
    assert!(!initial_delay_passed(ts(0), ts(4), 5));
    assert!(initial_delay_passed(ts(0), ts(5), 5));
    let p = Probe {
        period_seconds: Some(0),
        timeout_seconds: Some(7),
        ..Probe::default()
    };
    assert_eq!((period_seconds(&p), timeout_seconds(&p)), (1, 7));
    assert_eq!(period_seconds(&Probe::default()), 1);
    assert_eq!(trim_message(&"é".repeat(2000)).chars().count(), 1024);
}

fn result(uid: &str, probe: &str, st: &str, at: i64) -> ProbeResult {
    ProbeResult {
        pod_namespace: "ns".into(),
        pod_name: format!("pod-{uid}"),
        pod_uid: uid.into(),
        probe: probe.into(),
        state: st.into(),
        message: String::new(),
        probed_at: ts(at),
    }
}

#[test]
fn results_are_news_when_they_change_or_age() {
    let prev = result("u", "m#x", "Succeeded", 0);
    assert!(result_is_news(None, "Succeeded", "", ts(1)));
    assert!(!result_is_news(Some(&prev), "Succeeded", "", ts(599)));
    assert!(result_is_news(Some(&prev), "Succeeded", "", ts(600)));
    assert!(result_is_news(Some(&prev), "Failed", "", ts(1)));
    assert!(result_is_news(Some(&prev), "Succeeded", "other", ts(1)));
}

#[test]
fn status_merges_results_and_drops_stale_states() {
    let mut npp = NodePodProbe::new(
        "node-1",
        NodePodProbeSpec {
            pod_probes: vec![
                entry("pod-u1", "u1", "ip", &["m#x", "m#y"]),
                entry("pod-u2", "u2", "ip", &["m#x"]),
            ],
        },
    );
    npp.status = Some(NodePodProbeStatus {
        pod_probe_statuses: vec![
            PodProbeStatus {
                name: "pod-u1".into(),
                namespace: "ns".into(),
                uid: "u1".into(),
                probe_states: vec![state("m#x", "Failed", ""), state("m#gone", "Failed", "")],
            },
            PodProbeStatus {
                name: "pod-old".into(),
                namespace: "ns".into(),
                uid: "old".into(),
                probe_states: vec![state("m#x", "Failed", "")],
            },
        ],
    });
    let now = ts(100);
    let out = merge_status(
        &npp,
        &[
            result("u1", "m#x", "Succeeded", 90),
            result("u1", "m#y", "Failed", 91),
            result("u2", "m#x", "Succeeded", 92),
            result("u3", "m#x", "Succeeded", 93),
        ],
        now,
    );
    assert_eq!(out.pod_probe_statuses.len(), 2);
    let u1 = &out.pod_probe_statuses[0];
    assert_eq!(u1.uid, "u1");
    assert_eq!(
        u1.probe_states,
        vec![
            ContainerProbeState {
                name: "m#x".into(),
                state: "Succeeded".into(),
                last_probe_time: Some(Time(ts(90))),
                last_transition_time: Some(Time(now)),
                message: String::new(),
            },
            ContainerProbeState {
                name: "m#y".into(),
                state: "Failed".into(),
                last_probe_time: Some(Time(ts(91))),
                last_transition_time: Some(Time(now)),
                message: String::new(),
            },
        ]
    );
    assert_eq!(out.pod_probe_statuses[1].uid, "u2");
    assert_eq!(out.pod_probe_statuses[1].name, "pod-u2");
    // The same state again keeps its transition time.
    npp.status = Some(out);
    let again = merge_status(&npp, &[result("u1", "m#x", "Succeeded", 99)], ts(200));
    let x = &again.pod_probe_statuses[0].probe_states[0];
    assert_eq!(x.last_transition_time, Some(Time(now)));
    assert_eq!(x.last_probe_time, Some(Time(ts(99))));
}

#[test]
fn virtual_kubelet_nodes() {
    let labels: BTreeMap<String, String> =
        [("type".to_owned(), "virtual-kubelet".to_owned())].into();
    assert!(is_virtual_kubelet(Some(&labels)));
    assert!(!is_virtual_kubelet(None));
    assert!(!is_virtual_kubelet(Some(&BTreeMap::new())));
}

fn labelled(mut pod: Pod, labels: &[(&str, &str)]) -> Pod {
    pod.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect(),
    );
    pod
}

#[test]
fn serverless_probes_at_creation() {
    let web = labelled(pod("Pending", None, None), &[("app", "web")]);
    let a = marker("b-second", vec![healthy_probe("alive", "game.io/healthy")]);
    let mut b = marker(
        "a-first",
        vec![
            healthy_probe("ready", "game.io/ready"),
            // Same condition type as the first probe: left to it.
            healthy_probe("again", "game.io/ready"),
            // No condition type: not for serverless.
            healthy_probe("nocond", ""),
        ],
    );
    let mut other_container = healthy_probe("side", "game.io/side");
    other_container.container_name = "sidecar".into();
    b.spec.probes.push(other_container);
    let mut empty_selector = marker("c-empty", vec![healthy_probe("x", "game.io/x")]);
    empty_selector.spec.selector = LabelSelector::default();
    let (body, names) = serverless_probes(&[&a, &b, &empty_selector], &web).expect("probes apply");
    assert_eq!(names, "a-first,b-second");
    let probes: Vec<serde_json::Value> = serde_json::from_str(&body).expect("json list");
    let listed: Vec<(&str, &str)> = probes
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap_or_default(),
                p["podConditionType"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        [("ready", "game.io/ready"), ("alive", "game.io/healthy")]
    );
    assert!(
        probes.iter().all(|p| p.get("markerPolicy").is_none()),
        "{body}"
    );
    assert_eq!(probes[0]["containerName"], "main");
    assert_eq!(probes[0]["probe"]["exec"]["command"][2], "true");
    // A Pod the selectors miss gets nothing.
    let other = labelled(pod("Pending", None, None), &[("app", "db")]);
    assert_eq!(serverless_probes(&[&a, &b], &other), None);
}

/// (condition status, labels the Pod has, labels wanted, annotations wanted)
type MarksCase = (
    Option<&'static str>,
    Vec<(&'static str, &'static str)>,
    Vec<(&'static str, &'static str)>,
    Vec<(&'static str, &'static str)>,
);

#[test]
fn serverless_marks_follow_the_conditions() {
    let m = marker("m", vec![healthy_probe("alive", "game.io/healthy")]);
    let with = |status: Option<&str>, labels: &[(&str, &str)]| {
        let mut p = labelled(pod("Running", Some("True"), Some("vk")), labels);
        if let (Some(status), Some(s)) = (status, p.status.as_mut()) {
            s.conditions
                .get_or_insert_with(Vec::new)
                .push(PodCondition {
                    type_: "game.io/healthy".into(),
                    status: status.into(),
                    ..PodCondition::default()
                });
        }
        p
    };
    let set = |pairs: &[(&str, &str)]| -> BTreeMap<String, Option<String>> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).into(), Some((*v).into())))
            .collect()
    };
    let cases: Vec<MarksCase> = vec![
        (None, vec![], vec![], vec![]),
        (
            Some("True"),
            vec![],
            vec![("healthy", "yes")],
            vec![("cost", "10")],
        ),
        (
            Some("False"),
            vec![],
            vec![("unhealthy", "yes")],
            vec![("cost2", "-10")],
        ),
        (Some("Unknown"), vec![], vec![], vec![]),
        // Already marked: nothing to write; and nothing is removed.
        (
            Some("True"),
            vec![("healthy", "yes"), ("unhealthy", "yes")],
            vec![],
            vec![("cost", "10")],
        ),
    ];
    for (status, have, labels, annotations) in cases {
        let update = serverless_marks(&m, &with(status, &have));
        assert_eq!(update.labels, set(&labels), "{status:?} {have:?}");
        assert_eq!(update.annotations, set(&annotations), "{status:?} {have:?}");
        assert!(update.conditions.is_empty());
    }
}

#[test]
fn enhanced_liveness_moves_the_probes_of_kruise_pods_that_ask() {
    let make = |owner: Option<&str>, asked: Option<&str>| -> Pod {
        let mut value = serde_json::json!({
            "metadata": {"name": "p", "annotations": {}},
            "spec": {"containers": [
                {"name": "app", "livenessProbe": {"tcpSocket": {"port": 80}, "periodSeconds": 5}},
                {"name": "side"},
            ]},
        });
        if let Some(api_version) = owner {
            value["metadata"]["ownerReferences"] = serde_json::json!([{
                "apiVersion": api_version, "kind": "CloneSet", "name": "web", "uid": "u", "controller": true
            }]);
        }
        if let Some(asked) = asked {
            value["metadata"]["annotations"][ANNOTATION_USING_ENHANCED_LIVENESS] =
                serde_json::json!(asked);
        }
        serde_json::from_value(value).expect("pod")
    };
    // (owner apiVersion, annotation, moved)
    let cases = [
        (Some("apps.kruise.io/v1alpha1"), Some("true"), true),
        (Some("apps.kruise.io/v1beta1"), Some("true"), true),
        (Some("apps/v1"), Some("true"), false),
        (None, Some("true"), false),
        (Some("apps.kruise.io/v1alpha1"), Some("false"), false),
        (Some("apps.kruise.io/v1alpha1"), None, false),
    ];
    for (owner, asked, want) in cases {
        let mut pod = make(owner, asked);
        assert_eq!(move_liveness_probes(&mut pod), want, "{owner:?} {asked:?}");
        let containers = &pod.spec.as_ref().expect("spec").containers;
        assert_eq!(containers[0].liveness_probe.is_none(), want);
        let context = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_CONTAINER_PROBE_CONTEXT));
        if want {
            let context: serde_json::Value =
                serde_json::from_str(context.expect("context")).expect("json");
            assert_eq!(
                context,
                serde_json::json!([{"name": "app", "livenessProbe": {"tcpSocket": {"port": 80}, "periodSeconds": 5}}])
            );
        } else {
            assert!(context.is_none());
        }
    }
}

#[test]
fn a_restarted_agent_keeps_the_reported_state_until_its_first_result() {
    let status: NodePodProbeStatus = serde_json::from_value(serde_json::json!({
        "podProbeStatuses": [
            {"name": "a", "namespace": "ns", "uid": "u1",
             "probeStates": [{"name": "ppm#healthy", "state": "Succeeded"}, {"name": "ppm#empty", "state": ""}]},
        ]
    }))
    .expect("status");
    assert_eq!(
        reported_state(Some(&status), "u1", "ppm#healthy"),
        Some("Succeeded")
    );
    assert_eq!(reported_state(Some(&status), "u1", "ppm#empty"), None);
    assert_eq!(reported_state(Some(&status), "u2", "ppm#healthy"), None);
    assert_eq!(reported_state(None, "u1", "ppm#healthy"), None);
    // (first sight of the container by this worker, state reported) → Unknown reported
    for (first_sight, reported, unknown) in [
        (true, Some("Succeeded"), false),
        (true, Some("Failed"), false),
        (true, None, true),
        (false, Some("Succeeded"), true),
        (false, None, true),
    ] {
        assert_eq!(
            reports_unknown_on_new_container(first_sight, reported),
            unknown,
            "{first_sight} {reported:?}"
        );
    }
}
