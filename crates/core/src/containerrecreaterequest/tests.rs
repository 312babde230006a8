use super::*;
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStatus, PodReadinessGate, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kruise_api::containerrecreaterequest::{
    ContainerRecreateRequestContainer, ContainerRecreateRequestContainerContext,
    ContainerRecreateRequestSpec, ContainerRecreateRequestStatus, ContainerRecreateRequestStrategy,
};

fn ts(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).expect("valid")
}

fn request(names: &[&str], strategy: ContainerRecreateRequestStrategy) -> ContainerRecreateRequest {
    let mut r = ContainerRecreateRequest::new(
        "r",
        ContainerRecreateRequestSpec {
            pod_name: "p".into(),
            containers: names
                .iter()
                .map(|n| ContainerRecreateRequestContainer {
                    name: (*n).into(),
                    status_context: Some(ContainerRecreateRequestContainerContext {
                        container_id: format!("containerd://{n}-0"),
                        restart_count: 0,
                    }),
                    ..Default::default()
                })
                .collect(),
            strategy: Some(strategy),
            ..Default::default()
        },
    );
    r.metadata.namespace = Some("ns".into());
    r.metadata.creation_timestamp = Some(Time(ts(0)));
    r.metadata.labels = Some([(crr::LABEL_POD_UID.to_owned(), "uid".to_owned())].into());
    r
}

fn observed(entries: &[(&str, &str, bool, i32)]) -> BTreeMap<String, ObservedContainer> {
    entries
        .iter()
        .map(|(name, id, exited, restarts)| {
            (
                (*name).to_owned(),
                ObservedContainer {
                    id: format!("containerd://{id}"),
                    exited: *exited,
                    started_at: Some(ts(10)),
                    restart_count: *restarts,
                },
            )
        })
        .collect()
}

fn st(name: &str, phase: &str, killed: bool) -> ContainerRecreateState {
    ContainerRecreateState {
        name: name.into(),
        phase: phase.into(),
        message: String::new(),
        is_killed: killed,
    }
}

fn with_states(
    mut r: ContainerRecreateRequest,
    states: Vec<ContainerRecreateState>,
) -> ContainerRecreateRequest {
    r.status = Some(ContainerRecreateRequestStatus {
        phase: crr::PHASE_RECREATING.into(),
        container_recreate_states: states,
        ..Default::default()
    });
    r
}

fn synced(r: &mut ContainerRecreateRequest, name: &str, id: &str, ready: bool) {
    let raw = serde_json::to_string(&[SyncContainerStatus {
        name: name.into(),
        ready,
        restart_count: 1,
        container_id: format!("containerd://{id}"),
    }])
    .expect("json");
    r.metadata.annotations =
        Some([(crr::ANNOTATION_SYNC_CONTAINER_STATUSES.to_owned(), raw)].into());
}

#[test]
fn current_states_follow_the_runtime() {
    let plain = ContainerRecreateRequestStrategy::default();
    let force = ContainerRecreateRequestStrategy {
        force_recreate: true,
        ..Default::default()
    };
    let min_started = ContainerRecreateRequestStrategy {
        min_started_seconds: 30,
        ..Default::default()
    };
    type Case<'a> = (
        &'a str,
        ContainerRecreateRequestStrategy,
        Vec<ContainerRecreateState>,
        &'a [(&'a str, &'a str, bool, i32)],
        Option<(&'a str, bool)>,
        &'a str,
    );
    let cases: Vec<Case> = vec![
        (
            "unchanged container is Pending",
            plain.clone(),
            vec![],
            &[("a", "a-0", false, 0)],
            None,
            crr::PHASE_PENDING,
        ),
        (
            "absent container is Pending",
            plain.clone(),
            vec![],
            &[],
            None,
            crr::PHASE_PENDING,
        ),
        (
            "exited container is Recreating",
            plain.clone(),
            vec![],
            &[("a", "a-0", true, 0)],
            None,
            crr::PHASE_RECREATING,
        ),
        (
            "new container, not synced yet",
            plain.clone(),
            vec![],
            &[("a", "a-1", false, 1)],
            None,
            crr::PHASE_RECREATING,
        ),
        (
            "new container synced ready",
            plain.clone(),
            vec![],
            &[("a", "a-1", false, 1)],
            Some(("a-1", true)),
            crr::PHASE_SUCCEEDED,
        ),
        (
            "new container synced not ready",
            plain.clone(),
            vec![],
            &[("a", "a-1", false, 1)],
            Some(("a-1", false)),
            crr::PHASE_RECREATING,
        ),
        (
            "synced status of another container",
            plain.clone(),
            vec![],
            &[("a", "a-2", false, 2)],
            Some(("a-1", true)),
            crr::PHASE_RECREATING,
        ),
        (
            "ready but not started long enough",
            min_started,
            vec![],
            &[("a", "a-1", false, 1)],
            Some(("a-1", true)),
            crr::PHASE_RECREATING,
        ),
        (
            "force: restarted by someone else is still Pending",
            force.clone(),
            vec![],
            &[("a", "a-1", false, 1)],
            Some(("a-1", true)),
            crr::PHASE_PENDING,
        ),
        (
            "force: killed by the request counts",
            force,
            vec![st("a", crr::PHASE_RECREATING, true)],
            &[("a", "a-1", false, 1)],
            Some(("a-1", true)),
            crr::PHASE_SUCCEEDED,
        ),
        (
            "Failed is kept",
            plain.clone(),
            vec![st("a", crr::PHASE_FAILED, false)],
            &[("a", "a-0", false, 0)],
            None,
            crr::PHASE_FAILED,
        ),
        (
            "Succeeded is kept",
            plain,
            vec![st("a", crr::PHASE_SUCCEEDED, true)],
            &[("a", "a-0", false, 0)],
            None,
            crr::PHASE_SUCCEEDED,
        ),
    ];
    for (name, strategy, previous, runtime, sync, want) in cases {
        let mut r = with_states(request(&["a"], strategy), previous);
        if let Some((id, ready)) = sync {
            synced(&mut r, "a", id, ready);
        }
        let got = current_states(&r, &observed(runtime), ts(20));
        assert_eq!(got[0].phase, want, "{name}");
    }
}

#[test]
fn daemon_kills_one_container_at_a_time_and_honours_order() {
    let ordered = ContainerRecreateRequestStrategy {
        ordered_recreate: true,
        ..Default::default()
    };
    let runtime = observed(&[("a", "a-1", false, 1), ("b", "b-0", false, 0)]);
    // Unordered: a is Recreating, b is killed next.
    let states = vec![
        st("a", crr::PHASE_RECREATING, true),
        st("b", crr::PHASE_PENDING, false),
    ];
    let r = with_states(request(&["a", "b"], Default::default()), states.clone());
    assert!(matches!(
        daemon_step(&r, states.clone(), &runtime),
        DaemonStep::Kill { index: 1, .. }
    ));
    // Ordered: b waits for a.
    let r = with_states(request(&["a", "b"], ordered), states.clone());
    assert_eq!(
        daemon_step(&r, states.clone(), &runtime),
        DaemonStep::Wait(None)
    );
    // States that differ from the status are written first.
    let r = with_states(request(&["a", "b"], Default::default()), vec![]);
    assert_eq!(
        daemon_step(&r, states, &runtime),
        DaemonStep::Patch(vec![
            st("a", crr::PHASE_RECREATING, true),
            st("b", crr::PHASE_PENDING, false)
        ])
    );
    // A Pending container missing on the node is not killed.
    let states = vec![st("a", crr::PHASE_PENDING, false)];
    let r = with_states(request(&["a"], Default::default()), states.clone());
    assert_eq!(
        daemon_step(&r, states, &BTreeMap::new()),
        DaemonStep::Wait(None)
    );
}

#[test]
fn daemon_completes_on_failure_or_when_all_done() {
    let ignore = ContainerRecreateRequestStrategy {
        failure_policy: crr::FAILURE_POLICY_IGNORE.into(),
        ..Default::default()
    };
    let runtime = observed(&[("a", "a-1", false, 1), ("b", "b-0", false, 0)]);
    let failed = vec![
        st("a", crr::PHASE_FAILED, false),
        st("b", crr::PHASE_PENDING, false),
    ];
    let r = with_states(request(&["a", "b"], Default::default()), failed.clone());
    assert_eq!(
        daemon_step(&r, failed.clone(), &runtime),
        DaemonStep::Complete
    );
    let r = with_states(request(&["a", "b"], ignore), failed.clone());
    assert!(matches!(
        daemon_step(&r, failed, &runtime),
        DaemonStep::Kill { index: 1, .. }
    ));
    let done = vec![
        st("a", crr::PHASE_SUCCEEDED, true),
        st("b", crr::PHASE_SUCCEEDED, true),
    ];
    let r = with_states(request(&["a", "b"], Default::default()), done.clone());
    assert_eq!(daemon_step(&r, done, &runtime), DaemonStep::Complete);
    let min = ContainerRecreateRequestStrategy {
        min_started_seconds: 5,
        ..Default::default()
    };
    let waiting = vec![st("a", crr::PHASE_RECREATING, true)];
    let r = with_states(request(&["a"], min), waiting.clone());
    assert_eq!(
        daemon_step(&r, waiting, &runtime),
        DaemonStep::Wait(Some(Duration::from_secs(5)))
    );
}

fn pod(uid: &str) -> Pod {
    Pod {
        metadata: kube_meta(uid),
        spec: Some(PodSpec {
            readiness_gates: Some(vec![PodReadinessGate {
                condition_type: keys::CONDITION_KRUISE_POD_READY.into(),
            }]),
            ..Default::default()
        }),
        status: Some(PodStatus {
            container_statuses: Some(vec![ContainerStatus {
                name: "a".into(),
                ready: true,
                restart_count: 1,
                container_id: Some("containerd://a-1".into()),
                state: Some(ContainerState {
                    running: Some(ContainerStateRunning {
                        started_at: Some(Time(ts(5))),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

fn kube_meta(uid: &str) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        name: Some("p".into()),
        namespace: Some("ns".into()),
        uid: Some(uid.into()),
        ..Default::default()
    }
}

#[test]
fn manager_steps() {
    let base = request(&["a"], Default::default());
    let live = pod("uid");
    assert_eq!(
        manager_step(&base, None, ts(1)),
        ManagerStep::Complete("pod has gone")
    );
    assert_eq!(
        manager_step(&base, Some(&pod("other")), ts(1)),
        ManagerStep::Complete("pod has gone")
    );
    assert_eq!(
        manager_step(&base, Some(&live), ts(61)),
        ManagerStep::Complete("daemon has not responded for a long time")
    );
    assert_eq!(
        manager_step(&base, Some(&live), ts(1)),
        ManagerStep::Requeue(Some(Duration::from_secs(59)))
    );
    let mut deadline = with_states(base.clone(), vec![]);
    deadline.spec.active_deadline_seconds = Some(10);
    assert_eq!(
        manager_step(&deadline, Some(&live), ts(10)),
        ManagerStep::Complete("recreating has exceeded the activeDeadlineSeconds")
    );
    // Recreating: the statuses of containers started since the request are synchronised.
    let recreating = with_states(base.clone(), vec![]);
    let ManagerStep::SyncStatuses(raw) = manager_step(&recreating, Some(&live), ts(10)) else {
        panic!("expected a status sync");
    };
    assert!(raw.contains("containerd://a-1"), "{raw}");
    let mut synced = recreating.clone();
    synced.metadata.annotations =
        Some([(crr::ANNOTATION_SYNC_CONTAINER_STATUSES.to_owned(), raw)].into());
    assert_eq!(
        manager_step(&synced, Some(&live), ts(10)),
        ManagerStep::Requeue(None)
    );
    let mut unready = synced.clone();
    unready.spec.strategy = Some(ContainerRecreateRequestStrategy {
        unready_grace_period_seconds: Some(3),
        ..Default::default()
    });
    assert_eq!(
        manager_step(&unready, Some(&live), ts(10)),
        ManagerStep::AcquireNotReady
    );
    // Finished: release, deactivate, TTL.
    let mut done = synced;
    if let Some(s) = done.status.as_mut() {
        s.phase = crr::PHASE_COMPLETED.into();
        s.completion_time = Some(Time(ts(20)));
    }
    done.metadata.finalizers = Some(vec![crr::UNREADY_ACQUIRED.into()]);
    assert_eq!(
        manager_step(&done, Some(&live), ts(21)),
        ManagerStep::ReleaseNotReady
    );
    done.metadata.finalizers = None;
    done.metadata
        .labels
        .get_or_insert_default()
        .insert(crr::LABEL_ACTIVE.into(), "true".into());
    assert_eq!(
        manager_step(&done, Some(&live), ts(21)),
        ManagerStep::Deactivate
    );
    done.metadata
        .labels
        .get_or_insert_default()
        .remove(crr::LABEL_ACTIVE);
    assert_eq!(
        manager_step(&done, Some(&live), ts(21)),
        ManagerStep::Requeue(None)
    );
    done.spec.ttl_seconds_after_finished = Some(5);
    assert_eq!(
        manager_step(&done, Some(&live), ts(21)),
        ManagerStep::Requeue(Some(Duration::from_secs(4)))
    );
    assert_eq!(manager_step(&done, None, ts(25)), ManagerStep::Delete);
}

#[test]
fn not_ready_messages_add_and_remove() {
    let mut p = pod("uid");
    let mine = NotReadyMessage::for_request("ns", "r");
    let other = NotReadyMessage::for_request("ns", "s");
    let (status, message) = add_not_ready(&p, &mine).expect("added");
    assert_eq!(status, "False");
    assert_eq!(
        message,
        r#"[{"userAgent":"ContainerRecreateRequest","key":"ns/r"}]"#
    );
    let set = |p: &mut Pod, status: &str, message: String| {
        p.status.get_or_insert_default().conditions = Some(vec![PodCondition {
            type_: keys::CONDITION_KRUISE_POD_READY.into(),
            status: status.into(),
            message: Some(message),
            ..Default::default()
        }]);
    };
    set(&mut p, status, message);
    assert_eq!(add_not_ready(&p, &mine), None);
    let (status, message) = add_not_ready(&p, &other).expect("added");
    set(&mut p, status, message);
    assert_eq!(remove_not_ready(&p, &mine).map(|(s, _)| s), Some("False"));
    let (status, message) = remove_not_ready(&p, &mine).expect("removed");
    set(&mut p, status, message);
    let (status, message) = remove_not_ready(&p, &other).expect("removed");
    assert_eq!((status, message.as_str()), ("True", "[]"));
    let mut ungated = pod("uid");
    if let Some(spec) = ungated.spec.as_mut() {
        spec.readiness_gates = None;
    }
    assert_eq!(add_not_ready(&ungated, &mine), None);
}

#[test]
fn unready_wait_counts_down() {
    let at = ts(0).to_string();
    assert_eq!(unready_wait(&at, 10, ts(4)), Ok(Duration::from_secs(6)));
    assert_eq!(unready_wait(&at, 10, ts(11)), Ok(Duration::ZERO));
    assert!(unready_wait("nope", 10, ts(0)).is_err());
}
