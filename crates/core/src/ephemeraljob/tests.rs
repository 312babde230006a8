use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
};
use serde_json::json;

use super::*;

const UID: &str = "job-uid";

fn job(spec: Value) -> EphemeralJob {
    let mut base = json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "EphemeralJob",
        "metadata": {"name": "ej", "namespace": "ns", "uid": UID},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"ephemeralContainers": [{"name": "debug", "image": "busybox"}]}
        }
    });
    json_patch::merge(&mut base["spec"], &spec);
    serde_json::from_value(base).expect("job")
}

fn at(second: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + second).expect("time")
}

/// A Pod `name` created at `created`, labelled `app=<app>`, phase `phase`, with ephemeral containers
/// `(name, job uid)` and their statuses.
fn pod(name: &str, app: &str, created: i64, phase: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "ns", "labels": {"app": app},
            "creationTimestamp": Time(at(created))},
        "spec": {"containers": [{"name": "app", "image": "nginx"}]},
        "status": {"phase": phase}
    }))
    .expect("pod")
}

fn with_ephemeral(mut pod: Pod, name: &str, job_uid: &str, state: Option<ContainerState>) -> Pod {
    let container = serde_json::from_value(json!({"name": name, "image": "busybox",
        "env": [{"name": ej::ENV_JOB_ID, "value": job_uid}]}))
    .expect("container");
    pod.spec
        .get_or_insert_default()
        .ephemeral_containers
        .get_or_insert_default()
        .push(container);
    if let Some(state) = state {
        pod.status
            .get_or_insert_default()
            .ephemeral_container_statuses
            .get_or_insert_default()
            .push(ContainerStatus {
                name: name.into(),
                state: Some(state),
                ..Default::default()
            });
    }
    pod
}

fn running() -> ContainerState {
    ContainerState {
        running: Some(ContainerStateRunning::default()),
        ..Default::default()
    }
}

fn exited(code: i32) -> ContainerState {
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code: code,
            finished_at: Some(Time(at(5))),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn waiting(reason: &str) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.into()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn names(pods: &[&Pod]) -> Vec<String> {
    pods.iter()
        .map(|p| p.metadata.name.clone().unwrap_or_default())
        .collect()
}

#[test]
fn targets_table() {
    let young = pod("young", "web", 30, "Running");
    let old = pod("old", "web", 10, "Running");
    let same_age = pod("a-same", "web", 10, "Running");
    let other_app = pod("other", "db", 1, "Running");
    let done = pod("done", "web", 1, "Succeeded");
    let foreign = with_ephemeral(
        pod("foreign", "web", 2, "Running"),
        "debug",
        "someone-else",
        None,
    );
    let mine = with_ephemeral(pod("mine", "web", 3, "Running"), "debug", UID, None);
    let mut elsewhere = pod("elsewhere", "web", 1, "Running");
    elsewhere.metadata.namespace = Some("other-ns".into());
    let all = [
        &young, &old, &same_age, &other_app, &done, &foreign, &mine, &elsewhere,
    ];
    let cases = [
        (
            "every matching active Pod, oldest first, foreign containers skipped",
            json!({}),
            vec!["mine", "a-same", "old", "young"],
        ),
        (
            "replicas takes the oldest",
            json!({"replicas": 2}),
            vec!["mine", "a-same"],
        ),
        (
            "replicas above the matches",
            json!({"replicas": 9}),
            vec!["mine", "a-same", "old", "young"],
        ),
        (
            "an empty selector selects nothing",
            json!({"selector": {"matchLabels": null}}),
            vec![],
        ),
    ];
    for (name, spec, want) in cases {
        let job = job(spec);
        assert_eq!(names(&targets(&job, &all)), want, "{name}");
    }
}

#[test]
fn injection_respects_parallelism_and_running_pods() {
    let a = pod("a", "web", 1, "Running");
    let b = pod("b", "web", 2, "Running");
    let c = pod("c", "web", 3, "Running");
    let done = with_ephemeral(
        pod("done", "web", 0, "Running"),
        "debug",
        UID,
        Some(exited(0)),
    );
    let busy = with_ephemeral(
        pod("busy", "web", 0, "Running"),
        "debug",
        UID,
        Some(running()),
    );
    let fresh = with_ephemeral(pod("fresh", "web", 0, "Running"), "debug", UID, None);
    let cases = [
        (json!({}), vec![&done, &a, &b, &c], vec!["a"]),
        (
            json!({"parallelism": 2}),
            vec![&done, &a, &b, &c],
            vec!["a", "b"],
        ),
        (
            json!({"parallelism": 2}),
            vec![&busy, &a, &b, &c],
            vec!["a"],
        ),
        (
            json!({"parallelism": 2}),
            vec![&busy, &fresh, &a, &b],
            vec![],
        ),
        (json!({}), vec![&fresh, &a], vec![]),
        (
            json!({"parallelism": 10}),
            vec![&done, &a, &b, &c],
            vec!["a", "b", "c"],
        ),
        (
            json!({"template": {"ephemeralContainers": []}}),
            vec![&a],
            vec![],
        ),
    ];
    for (spec, pods, want) in cases {
        let job = job(spec.clone());
        let targets = targets(&job, &pods);
        assert_eq!(
            names(&to_inject(&job, &targets)),
            want,
            "{spec} {:?}",
            names(&pods)
        );
    }
    let injected = injected_containers(&job(json!({})));
    assert_eq!(injected[0]["name"], "debug");
    assert_eq!(
        injected[0]["env"][0],
        json!({"name": ej::ENV_JOB_ID, "value": UID})
    );
    assert!(created_by(&job(json!({})), &injected[0]));
}

#[test]
fn pod_states_table() {
    let job =
        job(json!({"template": {"ephemeralContainers": [{"name": "debug"}, {"name": "trace"}]}}));
    let base = || pod("p", "web", 0, "Running");
    let two = |first: ContainerState, second: Option<ContainerState>| {
        with_ephemeral(
            with_ephemeral(base(), "debug", UID, Some(first)),
            "trace",
            UID,
            second,
        )
    };
    let cases = [
        (
            "both exited 0",
            two(exited(0), Some(exited(0))),
            PodState::Succeeded,
        ),
        (
            "one exited 0, one running",
            two(exited(0), Some(running())),
            PodState::Running,
        ),
        (
            "one failed",
            two(exited(3), Some(running())),
            PodState::Failed,
        ),
        (
            "RunContainerError",
            two(waiting("RunContainerError"), None),
            PodState::Failed,
        ),
        (
            "waiting",
            two(waiting("ContainerCreating"), None),
            PodState::Waiting,
        ),
        (
            "no status yet",
            with_ephemeral(base(), "debug", UID, None),
            PodState::Unknown,
        ),
        (
            "half done, half without status",
            two(exited(0), None),
            PodState::Unknown,
        ),
    ];
    for (name, pod, want) in cases {
        assert_eq!(pod_state(&job, &pod), want, "{name}");
    }
}

fn condition<'a>(status: &'a EphemeralJobStatus, type_: &str) -> Option<&'a EphemeralJobCondition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

#[test]
fn status_table() {
    let ok = with_ephemeral(pod("a", "web", 0, "Running"), "debug", UID, Some(exited(0)));
    let ok2 = with_ephemeral(pod("b", "web", 1, "Running"), "debug", UID, Some(exited(0)));
    let bad = with_ephemeral(pod("c", "web", 2, "Running"), "debug", UID, Some(exited(1)));
    let run = with_ephemeral(pod("d", "web", 3, "Running"), "debug", UID, Some(running()));
    let wait = with_ephemeral(
        pod("e", "web", 4, "Running"),
        "debug",
        UID,
        Some(waiting("ContainerCreating")),
    );
    let plain = pod("f", "web", 5, "Running");
    /// Name, spec, target Pods, phase, a condition (type, reason), completed.
    type Case<'a> = (
        &'a str,
        Value,
        Vec<&'a Pod>,
        &'a str,
        Option<(&'a str, &'a str)>,
        bool,
    );
    let cases: Vec<Case<'_>> = vec![
        (
            "no Pods",
            json!({}),
            vec![],
            ej::PHASE_WAITING,
            Some((ej::CONDITION_MATCHED_EMPTY, "MatchEmpty")),
            false,
        ),
        (
            "all succeeded",
            json!({}),
            vec![&ok, &ok2],
            ej::PHASE_SUCCEEDED,
            Some((ej::CONDITION_SUCCEEDED, "JobSucceeded")),
            true,
        ),
        (
            "replicas above matches still completes",
            json!({"replicas": 5}),
            vec![&ok, &ok2],
            ej::PHASE_SUCCEEDED,
            None,
            true,
        ),
        (
            "one running",
            json!({}),
            vec![&ok, &run],
            ej::PHASE_RUNNING,
            None,
            false,
        ),
        (
            "all failed",
            json!({}),
            vec![&bad],
            ej::PHASE_FAILED,
            Some((ej::CONDITION_FAILED, "CreateFailed")),
            true,
        ),
        (
            "some failed, rest done: unknown",
            json!({}),
            vec![&ok, &bad],
            ej::PHASE_UNKNOWN,
            Some((ej::CONDITION_FAILED, "CreateFailed")),
            false,
        ),
        (
            "all waiting",
            json!({}),
            vec![&wait],
            ej::PHASE_WAITING,
            None,
            false,
        ),
        (
            "not injected yet",
            json!({}),
            vec![&plain],
            ej::PHASE_UNKNOWN,
            None,
            false,
        ),
        (
            "paused",
            json!({"paused": true}),
            vec![&run],
            ej::PHASE_PAUSED,
            None,
            false,
        ),
        (
            "past the deadline",
            json!({"activeDeadlineSeconds": 10}),
            vec![&run],
            ej::PHASE_FAILED,
            Some((ej::CONDITION_FAILED, "DeadlineExceeded")),
            true,
        ),
        (
            "no containers",
            json!({"template": {"ephemeralContainers": []}}),
            vec![&plain],
            ej::PHASE_ERROR,
            Some((ej::CONDITION_ERROR, "Error")),
            false,
        ),
    ];
    let previous = EphemeralJobStatus {
        start_time: Some(Time(at(0))),
        ..Default::default()
    };
    for (name, spec, pods, phase, want_condition, completed) in cases {
        let job = job(spec);
        let status = status(&job, &pods, &previous, at(20));
        assert_eq!(status.phase, phase, "{name}");
        assert_eq!(status.matches as usize, pods.len(), "{name}");
        assert_eq!(status.completion_time.is_some(), completed, "{name}");
        assert_eq!(
            condition(&status, ej::CONDITION_INITIALIZED).map(|c| c.status.as_str()),
            Some("True"),
            "{name}"
        );
        if let Some((type_, reason)) = want_condition {
            let found = condition(&status, type_).unwrap_or_else(|| panic!("{name}: no {type_}"));
            assert_eq!(found.reason, reason, "{name}");
        }
    }
    // Counts.
    let job = job(json!({}));
    let status_now = status(&job, &[&ok, &bad, &run, &wait], &previous, at(20));
    assert_eq!(
        (
            status_now.succeeded,
            status_now.failed,
            status_now.running,
            status_now.waiting
        ),
        (1, 1, 1, 1)
    );
    // A pass that changes nothing changes no condition time.
    let again = status(&job, &[&ok, &bad, &run, &wait], &status_now, at(40));
    assert_eq!(again, status_now);
}

#[test]
fn ttl_and_deadline() {
    let done = Time(at(100));
    assert_eq!(
        ttl_left(&job(json!({})), &done, at(100)),
        Duration::from_secs(1800)
    );
    assert_eq!(
        ttl_left(&job(json!({"ttlSecondsAfterFinished": 5})), &done, at(103)),
        Duration::from_secs(2)
    );
    assert_eq!(
        ttl_left(&job(json!({"ttlSecondsAfterFinished": 5})), &done, at(200)),
        Duration::ZERO
    );
    let start = Time(at(0));
    assert_eq!(deadline_left(&job(json!({})), &start, at(5)), None);
    assert_eq!(
        deadline_left(&job(json!({"activeDeadlineSeconds": 30})), &start, at(5)),
        Some(Duration::from_secs(25))
    );
    assert!(past_deadline(
        &job(json!({"activeDeadlineSeconds": 30})),
        Some(&start),
        at(30)
    ));
    assert!(!past_deadline(
        &job(json!({"activeDeadlineSeconds": 30})),
        Some(&start),
        at(29)
    ));
}
