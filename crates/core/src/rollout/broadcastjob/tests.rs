use k8s_openapi::api::core::v1::{ContainerStatus, Node, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kruise_api::broadcastjob::v1beta1::{
    BroadcastJob, BroadcastJobSpec, BroadcastJobStatus, CompletionPolicy, FailurePolicy,
};

use super::*;
use crate::pods::testing::{ago, now, pod};
use crate::rollout::slow_start_batches;

fn node(name: &str, fit: bool) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some([("fit".to_string(), fit.to_string())].into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The test's fitness rule: a node fits unless labelled `fit=false`.
fn fits(_: &PodSpec, node: &Node) -> bool {
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("fit"))
        .is_none_or(|v| v != "false")
}

fn node_of(pod: &Pod) -> Option<String> {
    pods::node_name(pod).map(str::to_owned)
}

fn job(policy: &str, failure: &str) -> BroadcastJob {
    BroadcastJob {
        metadata: ObjectMeta {
            name: Some("bcj".into()),
            namespace: Some("ns".into()),
            uid: Some("u1".into()),
            ..Default::default()
        },
        spec: BroadcastJobSpec {
            parallelism: Some(IntOrString::Int(i32::MAX)),
            completion_policy: CompletionPolicy {
                type_: policy.into(),
                ..Default::default()
            },
            failure_policy: FailurePolicy {
                type_: failure.into(),
                restart_limit: 0,
            },
            ..Default::default()
        },
        status: None,
    }
}

fn running(name: &str, node: &str) -> Pod {
    pod(name).node(node).phase("Running").build()
}

fn done(name: &str, node: &str, phase: &str) -> Pod {
    pod(name).node(node).phase(phase).build()
}

fn on_failure(name: &str, node: &str, restarts: i32) -> Pod {
    let mut p = running(name, node);
    if let Some(spec) = p.spec.as_mut() {
        spec.restart_policy = Some("OnFailure".into());
    }
    if let Some(status) = p.status.as_mut() {
        status.init_container_statuses = Some(vec![ContainerStatus {
            name: "init".into(),
            restart_count: 1,
            ..Default::default()
        }]);
        status.container_statuses = Some(vec![ContainerStatus {
            name: "c".into(),
            restart_count: restarts - 1,
            ..Default::default()
        }]);
    }
    p
}

fn run<'a>(job: &BroadcastJob, nodes: &[Node], job_pods: &[&'a Pod]) -> Plan<'a> {
    let placement = place(&PodSpec::default(), nodes, job_pods, node_of, fits);
    plan(job, job_pods, &placement, now())
}

#[test]
fn counting_pods() {
    // (pod, restartLimit, count)
    let cases = [
        (running("a", "n"), 0, PodCount::Active),
        (done("a", "n", "Succeeded"), 0, PodCount::Succeeded),
        (done("a", "n", "Failed"), 0, PodCount::Failed),
        (
            pod("a").phase("Running").deleting().build(),
            0,
            PodCount::Ignored,
        ),
        (
            pod("a").phase("Failed").deleting().build(),
            0,
            PodCount::Failed,
        ),
        // restarts: init + app containers; more than the limit fails the Pod.
        (on_failure("a", "n", 2), 2, PodCount::Active),
        (on_failure("a", "n", 3), 2, PodCount::Failed),
        // restartPolicy Never ignores restarts (there are none to count).
        (
            pod("a").phase("Running").restarts(5).build(),
            0,
            PodCount::Active,
        ),
    ];
    for (i, (p, limit, want)) in cases.iter().enumerate() {
        assert_eq!(count_pod(p, *limit), *want, "case {i}");
    }
}

#[test]
fn parallelism_rounds_percentages_up() {
    // (value, desired, want)
    let cases = [
        (None, 10, i32::MAX),
        (Some(IntOrString::Int(3)), 10, 3),
        (Some(IntOrString::String("50%".into())), 10, 5),
        (Some(IntOrString::String("50%".into())), 3, 2),
        (Some(IntOrString::String("1%".into())), 300, 3),
        (Some(IntOrString::String("1%".into())), 1, 1),
        (Some(IntOrString::String("0%".into())), 10, 0),
        (Some(IntOrString::String("100%".into())), 300, 300),
    ];
    for (value, desired, want) in cases {
        assert_eq!(
            parallelism(value.as_ref(), desired),
            Ok(want),
            "{value:?} of {desired}"
        );
    }
    assert!(parallelism(Some(&IntOrString::String("x".into())), 3).is_err());
}

#[test]
fn creations_under_parallelism() {
    // (parallelism, active, needing, want)
    let cases = [
        (5, 0, 10, 5),
        (5, 3, 10, 2),
        (5, 5, 10, 0),
        (5, 7, 10, 0),
        (i32::MAX, 0, 10, 10),
        (5, 0, 2, 2),
    ];
    for (p, active, needing, want) in cases {
        assert_eq!(to_create(p, active, needing), want);
    }
    assert_eq!(slow_start_batches(10), vec![1, 2, 4, 3]);
}

#[test]
fn placement_of_nodes_and_pods() {
    let nodes = [
        node("n1", true),
        node("n2", true),
        node("n3", false),
        node("n4", false),
    ];
    let on_n1 = running("p1", "n1");
    let on_n3 = running("p3", "n3");
    let deleting_on_n4 = pod("p4").node("n4").deleting().build();
    let dup = running("p1b", "n1");
    let gone_node = running("p9", "n9");
    let pods = [&on_n1, &on_n3, &deleting_on_n4, &dup, &gone_node];
    let placement = place(&PodSpec::default(), &nodes, &pods, node_of, fits);
    assert_eq!(placement.desired.len(), 2);
    assert!(placement.desired["n1"].is_some());
    assert!(placement.desired["n2"].is_none());
    assert_eq!(placement.needs_pod, vec!["n2".to_string()]);
    let misplaced: Vec<_> = placement
        .misplaced
        .iter()
        .map(|p| p.metadata.name.clone().unwrap_or_default())
        .collect();
    assert_eq!(misplaced, vec!["p3".to_string()]);
    assert_eq!(
        placement.duplicates,
        vec![("p1b".to_string(), "n1".to_string())]
    );
}

#[test]
fn the_mock_pod_is_the_template_bound_to_the_node() {
    let template = PodSpec {
        node_name: Some("elsewhere".into()),
        ..Default::default()
    };
    let seen = std::cell::RefCell::new(Vec::new());
    place(&template, &[node("n1", true)], &[], node_of, |spec, _| {
        seen.borrow_mut().push(spec.node_name.clone());
        true
    });
    assert_eq!(seen.into_inner(), vec![Some("n1".to_string())]);
}

#[test]
fn a_new_job_starts_running_and_creates_pods() {
    let mut j = job("Always", "FailFast");
    j.spec.parallelism = Some(IntOrString::String("50%".into()));
    let nodes: Vec<Node> = (0..10).map(|i| node(&format!("n{i}"), true)).collect();
    let p = run(&j, &nodes, &[]);
    assert_eq!(p.create_on, vec!["n0", "n1", "n2", "n3", "n4"]);
    let status = p.status.expect("status");
    assert_eq!(status.phase, "running");
    assert_eq!(status.start_time, Some(Time(now())));
    assert_eq!((status.desired, status.active), (10, 5));
    assert!(status.conditions.is_empty());
}

#[test]
fn completes_when_every_desired_node_ran_its_pod() {
    let mut j = job("Always", "FailFast");
    j.spec.completion_policy.ttl_seconds_after_finished = Some(60);
    let nodes = [node("n1", true), node("n2", true), node("n3", false)];
    let (a, b) = (done("a", "n1", "Succeeded"), done("b", "n2", "Succeeded"));
    let p = run(&j, &nodes, &[&a, &b]);
    let status = p.status.expect("status");
    assert_eq!(status.phase, "completed");
    assert_eq!((status.desired, status.succeeded, status.active), (2, 2, 0));
    assert_eq!(status.completion_time, Some(Time(now())));
    let c = &status.conditions[0];
    assert_eq!(
        (
            c.type_.as_str(),
            c.status.as_str(),
            c.reason.as_str(),
            c.message.as_str()
        ),
        (
            "Complete",
            "True",
            "Complete",
            "Job completed, 2 pods succeeded, 0 pods failed"
        )
    );
    assert_eq!(p.requeue_after, Some(Duration::from_secs(61)));
    assert_eq!(
        p.events,
        vec![JobEvent::normal(
            "JobComplete",
            "Job ns/bcj is completed, 2 pods succeeded, 0 pods failed".into()
        )]
    );
}

#[test]
fn not_complete_while_a_node_lacks_a_pod_or_one_is_active_or_no_node_fits() {
    let j = job("Always", "FailFast");
    let a = done("a", "n1", "Succeeded");
    let b = running("b", "n2");
    for (nodes, pods) in [
        (vec![node("n1", true), node("n2", true)], vec![&a]),
        (vec![node("n1", true), node("n2", true)], vec![&a, &b]),
        (vec![node("n1", false)], vec![]),
    ] {
        let status = run(&j, &nodes, &pods).status.expect("status");
        assert_eq!(status.phase, "running");
        assert!(status.conditions.is_empty());
    }
}

#[test]
fn never_jobs_never_complete() {
    let j = job("Never", "FailFast");
    let a = done("a", "n1", "Succeeded");
    let status = run(&j, &[node("n1", true)], &[&a]).status.expect("status");
    assert_eq!(status.phase, "running");
    assert!(status.completion_time.is_none());
}

#[test]
fn failure_policies() {
    let nodes = [node("n1", true), node("n2", true), node("n3", true)];
    let failed = done("f", "n1", "Failed");
    let active = running("r", "n2");
    let pods = [&failed, &active];

    // FailFast: the active Pods are deleted (and counted failed), the job fails.
    let p = run(&job("Always", "FailFast"), &nodes, &pods);
    assert_eq!(p.delete.len(), 1);
    assert!(p.create_on.is_empty());
    let status = p.status.expect("status");
    assert_eq!(
        (status.phase.as_str(), status.failed, status.active),
        ("failed", 2, 0)
    );
    assert_eq!(status.conditions[0].type_, "Failed");
    assert_eq!(
        status.conditions[0].message,
        "failure policy is FailurePolicyTypeFailFast and failed pod is found"
    );
    assert_eq!(
        p.events,
        vec![JobEvent::warning(
            "failed pod is found",
            "failure policy is FailurePolicyTypeFailFast and failed pod is found: 0 pods succeeded, 2 pods failed".into()
        )]
    );

    // Continue: carry on, create the missing Pod.
    let p = run(&job("Always", "Continue"), &nodes, &pods);
    assert_eq!(p.create_on, vec!["n3"]);
    assert_eq!(p.status.expect("status").phase, "running");

    // Pause: paused, nothing created, the Event once.
    let p = run(&job("Always", "Pause"), &nodes, &pods);
    assert!(p.create_on.is_empty());
    assert_eq!(p.status.as_ref().map(|s| s.phase.as_str()), Some("paused"));
    assert_eq!(
        p.events,
        vec![JobEvent::warning(
            "Paused",
            "job is paused, due to failed pod".into()
        )]
    );
    let mut paused = job("Always", "Pause");
    paused.status = p.status;
    let again = run(&paused, &nodes, &pods);
    assert!(again.events.is_empty());
    assert_eq!(again.status.map(|s| s.phase), Some("paused".into()));
}

#[test]
fn continue_completes_with_pods_failed_by_restart_limit() {
    let mut j = job("Always", "Continue");
    j.spec.failure_policy.restart_limit = 2;
    let nodes = [node("n1", true), node("n2", true)];
    let looping = on_failure("a", "n1", 3);
    let ok = done("b", "n2", "Succeeded");
    let status = run(&j, &nodes, &[&looping, &ok]).status.expect("status");
    assert_eq!((status.failed, status.succeeded, status.active), (1, 1, 0));
    assert_eq!(status.phase, "completed");
    assert_eq!(
        status.conditions[0].message,
        "Job completed, 1 pods succeeded, 1 pods failed"
    );
}

#[test]
fn spec_paused_and_resume() {
    let nodes = [node("n1", true)];
    let mut j = job("Always", "FailFast");
    j.spec.paused = true;
    let p = run(&j, &nodes, &[]);
    assert!(p.create_on.is_empty());
    assert_eq!(p.status.as_ref().map(|s| s.phase.as_str()), Some("paused"));
    j.spec.paused = false;
    j.status = p.status;
    let p = run(&j, &nodes, &[]);
    assert_eq!(p.create_on, vec!["n1"]);
    assert_eq!(p.status.map(|s| s.phase), Some("running".into()));
    assert_eq!(
        p.events,
        vec![JobEvent::normal(
            "Continue",
            "continue to process job".into()
        )]
    );
}

#[test]
fn active_deadline() {
    let nodes = [node("n1", true), node("n2", true)];
    let r = running("r", "n1");
    let mut j = job("Always", "FailFast");
    j.spec.completion_policy.active_deadline_seconds = Some(30);
    j.status = Some(BroadcastJobStatus {
        start_time: Some(Time(ago(10))),
        phase: "running".into(),
        ..Default::default()
    });
    let p = run(&j, &nodes, &[&r]);
    assert_eq!(p.requeue_after, Some(Duration::from_secs(20)));
    assert_eq!(p.create_on, vec!["n2"]);

    j.status = Some(BroadcastJobStatus {
        start_time: Some(Time(ago(30))),
        phase: "running".into(),
        ..Default::default()
    });
    let p = run(&j, &nodes, &[&r]);
    assert!(p.create_on.is_empty());
    assert_eq!(p.delete.len(), 1);
    let status = p.status.expect("status");
    assert_eq!(status.phase, "failed");
    assert_eq!(
        status.conditions[0].message,
        "Job ns/bcj was active longer than specified deadline"
    );
    assert_eq!(p.events[0].reason, "DeadlineExceeded");
    assert!(p.events[0].warning);

    // Never jobs have no deadline (validation forbids it; the controller ignores it anyway).
    j.spec.completion_policy.type_ = "Never".into();
    assert_eq!(
        run(&j, &nodes, &[&r]).status.map(|s| s.phase),
        Some("running".into())
    );
}

#[test]
fn ttl_after_finishing() {
    let mut j = job("Always", "FailFast");
    j.spec.completion_policy.ttl_seconds_after_finished = Some(60);
    let finished = |secs_ago: i64| BroadcastJobStatus {
        completion_time: Some(Time(ago(secs_ago))),
        phase: "completed".into(),
        conditions: vec![condition("Complete", String::new(), ago(secs_ago))],
        ..Default::default()
    };
    j.status = Some(finished(10));
    let p = run(&j, &[node("n1", true)], &[]);
    assert!(!p.delete_job && p.status.is_none() && p.create_on.is_empty());
    assert_eq!(p.requeue_after, Some(Duration::from_secs(50)));
    j.status = Some(finished(60));
    assert!(run(&j, &[node("n1", true)], &[]).delete_job);
    // Without a TTL a finished job is left alone.
    j.spec.completion_policy.ttl_seconds_after_finished = None;
    assert_eq!(run(&j, &[node("n1", true)], &[]), Plan::default());
}

#[test]
fn a_failed_never_job_only_updates_counts() {
    let mut j = job("Never", "FailFast");
    j.status = Some(BroadcastJobStatus {
        phase: "failed".into(),
        start_time: Some(Time(ago(100))),
        ..Default::default()
    });
    let p = run(&j, &[node("n1", true)], &[]);
    assert!(p.create_on.is_empty() && p.delete.is_empty());
    assert_eq!(
        p.status.map(|s| (s.phase, s.desired)),
        Some(("failed".into(), 1))
    );
}

#[test]
fn pods_on_nodes_that_no_longer_fit_are_deleted() {
    let j = job("Never", "FailFast");
    let r = running("r", "n1");
    let p = run(&j, &[node("n1", false), node("n2", true)], &[&r]);
    assert_eq!(p.delete.len(), 1);
    assert_eq!(p.create_on, vec!["n2"]);
    let status = p.status.expect("status");
    assert_eq!((status.desired, status.active, status.failed), (1, 1, 1));
}

#[test]
fn too_many_active_pods_is_reported() {
    let mut j = job("Always", "FailFast");
    j.spec.parallelism = Some(IntOrString::Int(1));
    let (a, b) = (running("a", "n1"), running("b", "n2"));
    let p = run(
        &j,
        &[node("n1", true), node("n2", true), node("n3", true)],
        &[&a, &b],
    );
    assert!(p.create_on.is_empty());
    assert_eq!(p.events[0].reason, "TooManyActivePods");
}

#[test]
fn deadline_requeue_is_relative_to_start() {
    let mut j = job("Always", "FailFast");
    j.spec.completion_policy.active_deadline_seconds = Some(100);
    let p = run(&j, &[node("n1", true)], &[]);
    assert_eq!(p.requeue_after, Some(Duration::from_secs(100)));
}

#[test]
fn the_controllers_fit_places_a_template_without_a_node_on_every_node_it_selects() {
    let template: PodSpec = serde_json::from_value(serde_json::json!({
        "nodeSelector": {"zone": "a"},
        "containers": [{"name": "c", "image": "busybox",
            "resources": {"requests": {"cpu": "2"}}}]
    }))
    .expect("a valid Pod spec");
    let node = |name: &str, zone: &str, cpu: &str| -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"zone": zone}},
            "status": {"allocatable": {"cpu": cpu, "pods": "110"}}
        }))
        .expect("a valid Node")
    };
    let nodes = [
        node("a-big", "a", "4"),
        node("a-small", "a", "1"),
        node("b-big", "b", "4"),
    ];
    // One fitting node already runs its Pod; it keeps it and needs none.
    let ran = pod("ran").node("a-big").phase("Running").build();
    let mut ran_spec = template.clone();
    ran_spec.node_name = Some("a-big".into());
    let ran = Pod {
        spec: Some(ran_spec),
        ..ran
    };
    let placement = place(&template, &nodes, &[&ran], pod_node, node_fits);
    assert_eq!(placement.desired.keys().collect::<Vec<_>>(), vec!["a-big"]);
    assert!(placement.needs_pod.is_empty());

    let another = node("a-other", "a", "8");
    let placement = place(
        &template,
        [&nodes[0], &another],
        &[&ran],
        pod_node,
        node_fits,
    );
    assert_eq!(
        placement.desired.keys().collect::<Vec<_>>(),
        vec!["a-big", "a-other"]
    );
    assert_eq!(placement.needs_pod, vec!["a-other".to_string()]);
    assert!(placement.misplaced.is_empty());
}
