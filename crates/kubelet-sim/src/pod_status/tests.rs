use super::*;
use k8s_openapi::api::core::v1::{PodReadinessGate, PodSpec, PodStatus};
use serde_json::Value;

/// A tiny world: one Pod on one node, a clock, and the simulator's memory.
struct World {
    pod: Pod,
    memory: PodMemory,
    images: HashSet<String>,
    now: Timestamp,
    ids: u32,
    timing: Timing,
    host_ports_in_use: HashSet<(String, i32)>,
}

impl World {
    fn new(pod: Pod) -> Self {
        Self {
            pod,
            memory: PodMemory::default(),
            images: HashSet::new(),
            now: Timestamp::from_second(1_700_000_000).expect("valid"),
            ids: 0,
            timing: Timing::default(),
            host_ports_in_use: HashSet::new(),
        }
    }

    fn advance(&mut self, millis: u64) {
        self.now = after(self.now, Duration::from_millis(millis));
    }

    /// Plans, then applies the status patch the way the apiserver merges it.
    fn step(&mut self) -> Plan {
        let ids = &mut self.ids;
        let mut new_id = || {
            *ids += 1;
            format!("containerd://{:064}", *ids)
        };
        let new_ip = || "10.1.0.2".to_string();
        let mut input = PlanInput {
            now: self.now,
            timing: &self.timing,
            node_ip: "172.18.0.2",
            new_pod_ip: &new_ip,
            node_images: &mut self.images,
            new_container_id: &mut new_id,
            host_ports_in_use: &|| self.host_ports_in_use.clone(),
        };
        let plan = plan(&self.pod, &mut self.memory, &mut input);
        if let Some(patch) = &plan.status_patch {
            apply_status_patch(&mut self.pod, patch);
        }
        plan
    }

    /// Steps until nothing is left to do, advancing the clock by each requested requeue.
    fn settle(&mut self) {
        for _ in 0..50 {
            let plan = self.step();
            match plan.requeue {
                Some(wait) => self.advance(wait.as_millis() as u64),
                None if plan.status_patch.is_none() => return,
                None => {}
            }
        }
        panic!("pod did not settle");
    }

    fn status(&self) -> PodStatus {
        self.pod.status.clone().unwrap_or_default()
    }

    fn container(&self, name: &str) -> ContainerStatus {
        self.status()
            .container_statuses
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no status for container {name}"))
    }

    fn condition(&self, type_: &str) -> PodCondition {
        self.status()
            .conditions
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == type_)
            .unwrap_or_else(|| panic!("no condition {type_}"))
    }

    fn set_condition(&mut self, type_: &str, status: &str) {
        let mut pod_status = self.status();
        let mut conditions = pod_status.conditions.take().unwrap_or_default();
        conditions.retain(|c| c.type_ != type_);
        conditions.push(PodCondition {
            type_: type_.into(),
            status: status.into(),
            ..Default::default()
        });
        pod_status.conditions = Some(conditions);
        self.pod.status = Some(pod_status);
    }

    fn set_image(&mut self, container: &str, image: &str) {
        let spec = self.pod.spec.as_mut().expect("spec");
        let c = spec
            .containers
            .iter_mut()
            .find(|c| c.name == container)
            .expect("container");
        c.image = Some(image.into());
    }
}

/// Strategic merge of a `pods/status` patch: scalars and atomic lists replace; conditions merge by
/// type, field by field, as the apiserver merges them (a field left out is kept, a null removes it).
fn apply_status_patch(pod: &mut Pod, patch: &Value) {
    let mut status =
        serde_json::to_value(pod.status.clone().unwrap_or_default()).expect("serialize");
    let patch_status = patch["status"].as_object().expect("status object");
    for (key, value) in patch_status {
        if key == "conditions" {
            let mut merged: Vec<Value> =
                status["conditions"].as_array().cloned().unwrap_or_default();
            for condition in value.as_array().expect("conditions list") {
                let fields = condition.as_object().expect("condition object");
                let position = merged.iter().position(|c| c["type"] == condition["type"]);
                let target = match position {
                    Some(i) => &mut merged[i],
                    None => {
                        merged.push(Value::Object(serde_json::Map::new()));
                        merged.last_mut().expect("just pushed")
                    }
                };
                let target = target.as_object_mut().expect("condition object");
                for (field, value) in fields {
                    if value.is_null() {
                        target.remove(field);
                    } else {
                        target.insert(field.clone(), value.clone());
                    }
                }
            }
            status["conditions"] = Value::Array(merged);
        } else if value.is_null() {
            if let Some(object) = status.as_object_mut() {
                object.remove(key);
            }
        } else {
            status[key] = value.clone();
        }
    }
    pod.status = Some(serde_json::from_value(status).expect("status deserializes"));
}

fn container(name: &str, image: &str) -> Container {
    Container {
        name: name.into(),
        image: Some(image.into()),
        ..Default::default()
    }
}

fn pod_with(containers: Vec<Container>, annotations: &[(&str, &str)]) -> Pod {
    let mut pod = Pod {
        spec: Some(PodSpec {
            containers,
            node_name: Some("sim-0".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    pod.metadata.name = Some("p".into());
    pod.metadata.uid = Some("uid-1".into());
    pod.metadata.annotations = Some(
        annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    pod
}

#[test]
fn new_pod_starts_then_becomes_ready() {
    let mut world = World::new(pod_with(vec![container("app", "nginx")], &[]));
    let plan = world.step();
    assert!(plan.status_patch.is_some());
    assert_eq!(
        plan.requeue,
        Some(Duration::from_millis(300)),
        "ready delay"
    );
    let status = world.status();
    assert_eq!(status.phase.as_deref(), Some("Running"));
    assert_eq!(status.pod_ip.as_deref(), Some("10.1.0.2"));
    assert_eq!(status.host_ip.as_deref(), Some("172.18.0.2"));
    let app = world.container("app");
    assert_eq!(app.image, "docker.io/library/nginx:latest");
    assert_eq!(app.image_id, image::image_id("nginx"));
    assert!(
        app.container_id
            .as_deref()
            .is_some_and(|id| id.starts_with("containerd://"))
    );
    assert!(!app.ready);
    assert_eq!(
        world.condition("Ready").reason.as_deref(),
        Some("ContainersNotReady")
    );

    world.advance(300);
    world.step();
    assert!(world.container("app").ready);
    assert_eq!(world.condition("Ready").status, "True");
    assert_eq!(world.condition("ContainersReady").status, "True");
    assert_eq!(world.condition("Initialized").status, "True");
    assert_eq!(world.condition("PodReadyToStartContainers").status, "True");
}

#[test]
fn a_settled_pod_needs_no_write() {
    let mut world = World::new(pod_with(vec![container("app", "nginx")], &[]));
    world.settle();
    world.advance(60_000);
    let plan = world.step();
    assert_eq!(plan, Plan::default(), "a steady Pod is not written again");
}

#[test]
fn readiness_gate_rule() {
    let mut pod = pod_with(vec![container("app", "nginx")], &[]);
    pod.spec.as_mut().expect("spec").readiness_gates = Some(vec![PodReadinessGate {
        condition_type: "InPlaceUpdateReady".into(),
    }]);
    let mut world = World::new(pod);
    world.settle();
    let ready = world.condition("Ready");
    assert_eq!(ready.status, "False");
    assert_eq!(ready.reason.as_deref(), Some("ReadinessGatesNotReady"));
    assert_eq!(
        ready.message.as_deref(),
        Some(
            "corresponding condition of pod readiness gate \"InPlaceUpdateReady\" does not exist."
        )
    );
    assert_eq!(world.condition("ContainersReady").status, "True");

    world.set_condition("InPlaceUpdateReady", "True");
    world.step();
    let ready = world.condition("Ready");
    assert_eq!(ready.status, "True");
    // Merged into the False condition, the True one removes its reason and message...
    assert_eq!((ready.reason, ready.message), (None, None));
    // ... so the simulator has nothing left to write.
    assert_eq!(world.step(), Plan::default());

    world.set_condition("InPlaceUpdateReady", "False");
    let plan = world.step();
    let patch = plan.status_patch.expect("a flip is written");
    let written: Vec<&str> = patch["status"]["conditions"]
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|c| c["type"].as_str())
        .collect();
    assert!(
        !written.contains(&"InPlaceUpdateReady"),
        "gate conditions are never written"
    );
    let ready = world.condition("Ready");
    assert_eq!(ready.status, "False");
    assert_eq!(
        ready.message.as_deref(),
        Some("the status of pod readiness gate \"InPlaceUpdateReady\" is not \"True\", but False")
    );
}

#[test]
fn image_change_restarts_only_that_container() {
    let mut world = World::new(pod_with(
        vec![
            container("app", "nginx:alpine"),
            container("side", "busybox:1"),
        ],
        &[],
    ));
    world.settle();
    let before_app = world.container("app");
    let before_side = world.container("side");

    world.set_image("app", "nginx:1.19.1");
    world.settle();
    let app = world.container("app");
    let side = world.container("side");
    assert_eq!(app.restart_count, 1);
    assert_eq!(app.image, "docker.io/library/nginx:1.19.1");
    assert_ne!(app.image_id, before_app.image_id);
    assert_ne!(app.container_id, before_app.container_id);
    let last = app
        .last_state
        .and_then(|s| s.terminated)
        .expect("lastState.terminated");
    assert_eq!(last.container_id, before_app.container_id);
    assert!(app.ready);
    assert_eq!(side, before_side, "the other container is untouched");
    assert_eq!(world.status().pod_ip.as_deref(), Some("10.1.0.2"));
}

#[test]
fn restart_is_not_ready_until_ready_delay() {
    let mut world = World::new(pod_with(vec![container("app", "nginx:1")], &[]));
    world.settle();
    world.set_image("app", "nginx:2");
    let plan = world.step();
    assert!(!world.container("app").ready);
    assert_eq!(world.condition("Ready").status, "False");
    assert_eq!(plan.requeue, Some(Duration::from_millis(300)));
}

#[test]
fn never_ready_container_keeps_pod_not_ready() {
    let mut world = World::new(pod_with(
        vec![container("app", "nginx"), container("side", "busybox")],
        &[(crate::steer::NEVER_READY, "side")],
    ));
    world.settle();
    assert!(world.container("app").ready);
    assert!(!world.container("side").ready);
    let ready = world.condition("Ready");
    assert_eq!(ready.status, "False");
    assert_eq!(
        ready.message.as_deref(),
        Some("containers with unready status: [side]")
    );
}

#[test]
fn completion_by_restart_policy() {
    // (restartPolicy, exit code annotation, expected phase, expected restarts)
    let cases = [
        ("Never", "0", Some("Succeeded"), 0),
        ("Never", "1", Some("Failed"), 0),
        ("OnFailure", "0", Some("Succeeded"), 0),
        ("OnFailure", "2", None, 1),
        ("Always", "0", None, 1),
    ];
    for (policy, code, phase, min_restarts) in cases {
        let mut pod = pod_with(
            vec![container("job", "busybox")],
            &[(crate::steer::EXIT_CODE, code)],
        );
        pod.spec.as_mut().expect("spec").restart_policy = Some(policy.into());
        if policy == "Always" {
            pod.metadata
                .annotations
                .as_mut()
                .expect("annotations")
                .insert(crate::steer::RUN_MS.into(), "500".into());
        }
        let mut world = World::new(pod);
        world.step();
        world.advance(600);
        world.step();
        let status = world.status();
        match phase {
            Some(phase) => {
                assert_eq!(status.phase.as_deref(), Some(phase), "{policy} exit {code}");
                let terminated = world.container("job").state.and_then(|s| s.terminated);
                assert_eq!(
                    terminated.map(|t| t.exit_code.to_string()),
                    Some(code.to_string())
                );
                assert_eq!(
                    world.condition("Ready").reason.as_deref(),
                    Some("PodCompleted")
                );
                world.advance(10_000);
                assert_eq!(
                    world.step(),
                    Plan::default(),
                    "terminal phases never change"
                );
            }
            None => {
                assert_eq!(
                    status.phase.as_deref(),
                    Some("Running"),
                    "{policy} exit {code}"
                );
                assert!(
                    world.container("job").restart_count >= min_restarts,
                    "{policy} exit {code}"
                );
            }
        }
    }
}

#[test]
fn crash_loops_with_backoff() {
    let mut world = World::new(pod_with(vec![container("app", "nginx:crash")], &[]));
    world.step();
    world.step();
    let app = world.container("app");
    assert_eq!(app.restart_count, 1);
    let waiting = app.state.and_then(|s| s.waiting).expect("waiting");
    assert_eq!(waiting.reason.as_deref(), Some("CrashLoopBackOff"));
    let last = app
        .last_state
        .and_then(|s| s.terminated)
        .expect("last terminated");
    assert_eq!(last.exit_code, 1);
    world.advance(500);
    world.step();
    world.step();
    assert_eq!(world.container("app").restart_count, 2);
    assert_eq!(world.status().phase.as_deref(), Some("Running"));
}

#[test]
fn graceful_deletion_then_zero_grace_delete() {
    let mut world = World::new(pod_with(vec![container("app", "nginx")], &[]));
    world.settle();
    world.pod.metadata.deletion_timestamp = Some(k8s_time(world.now));
    world.pod.metadata.deletion_grace_period_seconds = Some(30);
    let plan = world.step();
    assert_eq!(plan.status_patch, None);
    assert!(!plan.delete);
    assert_eq!(plan.requeue, Some(world.timing.shutdown_delay));
    world.advance(100);
    let plan = world.step();
    assert!(plan.delete);
    let terminated = world
        .container("app")
        .state
        .and_then(|s| s.terminated)
        .expect("terminated");
    assert_eq!(terminated.exit_code, 137);
    assert_eq!(world.status().phase.as_deref(), Some("Failed"));

    world.pod.metadata.deletion_grace_period_seconds = Some(0);
    assert_eq!(world.step(), Plan::default(), "held only by finalizers");
}

#[test]
fn resources_follow_spec_without_restart() {
    let mut app = container("app", "nginx");
    let cpu = |v: &str| {
        Some(
            [(
                "cpu".to_string(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity(v.into()),
            )]
            .into_iter()
            .collect(),
        )
    };
    app.resources = Some(ResourceRequirements {
        requests: cpu("100m"),
        ..Default::default()
    });
    let mut world = World::new(pod_with(vec![app], &[]));
    world.settle();
    let before = world.container("app");
    assert_eq!(
        before.resources.as_ref().and_then(|r| r.requests.clone()),
        cpu("100m")
    );

    world.pod.spec.as_mut().expect("spec").containers[0].resources = Some(ResourceRequirements {
        requests: cpu("200m"),
        ..Default::default()
    });
    world.settle();
    let after = world.container("app");
    assert_eq!(
        after.resources.as_ref().and_then(|r| r.requests.clone()),
        cpu("200m")
    );
    assert_eq!(after.restart_count, 0);
    assert_eq!(after.container_id, before.container_id);
}

#[test]
fn native_sidecar_runs_and_init_completes() {
    let mut pod = pod_with(vec![container("app", "nginx")], &[]);
    let mut sidecar = container("log", "logtail:1");
    sidecar.restart_policy = Some("Always".into());
    pod.spec.as_mut().expect("spec").init_containers =
        Some(vec![container("setup", "busybox"), sidecar]);
    let mut world = World::new(pod);
    world.settle();
    let inits = world.status().init_container_statuses.unwrap_or_default();
    let setup = inits.iter().find(|c| c.name == "setup").expect("setup");
    assert_eq!(
        setup
            .state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .map(|t| t.exit_code),
        Some(0)
    );
    let log = inits.iter().find(|c| c.name == "log").expect("log");
    assert!(log.ready && log.started == Some(true));
    assert_eq!(world.condition("Ready").status, "True");
}

#[test]
fn slow_start_and_slow_pull() {
    let mut world = World::new(pod_with(
        vec![container("app", "nginx:1")],
        &[(crate::steer::PULL_DELAY_MS, "1000")],
    ));
    let plan = world.step();
    assert_eq!(world.status().phase.as_deref(), Some("Pending"));
    let waiting = world
        .container("app")
        .state
        .and_then(|s| s.waiting)
        .expect("waiting");
    assert_eq!(waiting.reason.as_deref(), Some("ContainerCreating"));
    assert_eq!(plan.requeue, Some(Duration::from_millis(1000)));
    world.advance(1000);
    world.settle();
    assert!(world.container("app").ready);
    // The image is now on the node: a second Pod with it starts without the pull delay.
    let mut second = World::new(pod_with(
        vec![container("app", "nginx:1")],
        &[(crate::steer::PULL_DELAY_MS, "1000")],
    ));
    second.images = world.images.clone();
    second.step();
    assert!(
        second
            .container("app")
            .state
            .and_then(|s| s.running)
            .is_some()
    );
}

#[test]
fn host_network_uses_node_ip() {
    let mut pod = pod_with(vec![container("app", "nginx")], &[]);
    pod.spec.as_mut().expect("spec").host_network = Some(true);
    let mut world = World::new(pod);
    world.step();
    assert_eq!(world.status().pod_ip.as_deref(), Some("172.18.0.2"));
}

fn waiting_reason(status: &ContainerStatus) -> Option<String> {
    status
        .state
        .as_ref()
        .and_then(|s| s.waiting.as_ref())
        .and_then(|w| w.reason.clone())
}

#[test]
fn unpullable_image_err_image_pull_then_back_off() {
    let mut world = World::new(pod_with(vec![container("app", "nginx:alpine")], &[]));
    world.settle();
    let before = world.container("app");
    world.set_image("app", "invalid.registry.k8s.io/app:v2");

    // The in-place update stops the old container and fails to pull the new image.
    let plan = world.step();
    let app = world.container("app");
    assert_eq!(waiting_reason(&app).as_deref(), Some("ErrImagePull"));
    assert!(
        app.state
            .as_ref()
            .and_then(|s| s.waiting.as_ref())
            .and_then(|w| w.message.as_deref())
            .is_some_and(|m| m.contains("lookup invalid.registry.k8s.io: no such host"))
    );
    assert_eq!(app.restart_count, before.restart_count + 1);
    assert!(!app.ready);
    assert_eq!(app.image_id, "", "nothing runs: no imageID");
    assert_eq!(world.condition("Ready").status, "False");

    // Then ImagePullBackOff until the next try, 10 s after the first failure, then 20 s, …
    world.advance(plan.requeue.expect("requeued").as_millis() as u64);
    let plan = world.step();
    assert_eq!(
        waiting_reason(&world.container("app")).as_deref(),
        Some("ImagePullBackOff")
    );
    let mut reasons = Vec::new();
    let mut waited = Duration::ZERO;
    let mut next = plan.requeue;
    while let Some(wait) = next
        && waited < Duration::from_secs(40)
    {
        world.advance(wait.as_millis() as u64);
        waited += wait;
        next = world.step().requeue;
        reasons.push(waiting_reason(&world.container("app")).unwrap_or_default());
    }
    assert!(reasons.iter().any(|r| r == "ErrImagePull"), "{reasons:?}");
    assert!(
        reasons
            .iter()
            .all(|r| r == "ErrImagePull" || r == "ImagePullBackOff")
    );
    assert_eq!(
        world.container("app").restart_count,
        before.restart_count + 1
    );

    // A pullable image again: the container runs.
    world.set_image("app", "nginx:1.19.1");
    world.settle();
    let app = world.container("app");
    assert!(app.ready);
    assert_eq!(app.image, "docker.io/library/nginx:1.19.1");
}

#[test]
fn pull_back_off_doubles_to_five_minutes() {
    let waits: Vec<u64> = (1..=7).map(|n| pull_backoff(n).as_secs()).collect();
    assert_eq!(waits, [10, 20, 40, 80, 160, 300, 300]);
}

fn with_hooks(mut c: Container, post_start: Option<&str>, pre_stop: Option<&str>) -> Container {
    use k8s_openapi::api::core::v1::{ExecAction, Lifecycle, LifecycleHandler};
    let exec = |cmd: &str| LifecycleHandler {
        exec: Some(ExecAction {
            command: Some(vec!["sh".into(), "-c".into(), cmd.into()]),
        }),
        ..Default::default()
    };
    c.lifecycle = Some(Lifecycle {
        post_start: post_start.map(exec),
        pre_stop: pre_stop.map(exec),
        ..Default::default()
    });
    c
}

fn running(status: &ContainerStatus) -> bool {
    status.state.as_ref().is_some_and(|s| s.running.is_some())
}

#[test]
fn post_start_sleep_delays_readiness_and_the_next_containers() {
    let a = with_hooks(container("a", "nginx"), Some("sleep 2"), None);
    let mut world = World::new(pod_with(vec![a, container("b", "busybox")], &[]));
    world.step();
    assert!(running(&world.container("a")));
    assert_eq!(
        waiting_reason(&world.container("b")).as_deref(),
        Some("ContainerCreating"),
        "b waits for a's postStart"
    );
    world.advance(1_000);
    world.step();
    assert!(!world.container("a").ready, "not ready during postStart");
    assert!(!running(&world.container("b")));
    world.advance(1_000);
    world.step();
    assert!(
        running(&world.container("b")),
        "b starts once a's hook ended"
    );
    assert!(!world.container("a").ready);
    world.advance(300);
    world.step();
    assert!(world.container("a").ready && world.container("b").ready);

    // An in-place update of both: b restarts only after a runs its new image and its hook ended.
    world.set_image("a", "nginx:2");
    world.set_image("b", "busybox:2");
    world.step();
    assert_eq!(world.container("a").image, "docker.io/library/nginx:2");
    assert_eq!(
        world.container("b").image,
        "docker.io/library/busybox:latest",
        "b waits"
    );
    world.advance(1_500);
    world.step();
    assert_eq!(
        world.container("b").image,
        "docker.io/library/busybox:latest",
        "b still waits"
    );
    world.advance(500);
    world.step();
    assert_eq!(world.container("b").image, "docker.io/library/busybox:2");
    assert_eq!(world.container("b").restart_count, 1);
}

#[test]
fn pre_stop_sleep_delays_the_stop_within_the_grace_period() {
    for (grace, want_ms) in [(30, 5_000), (2, 2_000)] {
        let app = with_hooks(container("app", "nginx"), None, Some("sleep 5"));
        let mut world = World::new(pod_with(vec![app], &[]));
        world.settle();
        world.pod.metadata.deletion_timestamp = Some(k8s_time(world.now));
        world.pod.metadata.deletion_grace_period_seconds = Some(grace);
        let plan = world.step();
        assert!(!plan.delete);
        assert_eq!(
            plan.requeue,
            Some(Duration::from_millis(want_ms)),
            "grace {grace}"
        );
        world.advance(want_ms - 1);
        assert!(!world.step().delete, "grace {grace}: stopped early");
        world.advance(1);
        assert!(world.step().delete, "grace {grace}");
    }
}

#[test]
fn two_tags_of_one_digest_report_one_image_id() {
    let digests = "nginx:1.19=sha256:1111,nginx:stable=sha256:1111";
    let mut world = World::new(pod_with(
        vec![container("app", "nginx:1.19")],
        &[(crate::steer::IMAGE_DIGESTS, digests)],
    ));
    world.settle();
    let before = world.container("app");
    assert_eq!(before.image_id, "docker.io/library/nginx@sha256:1111");
    // The new tag is the same image: the container restarts onto it with the same imageID.
    world.set_image("app", "nginx:stable");
    world.settle();
    let after = world.container("app");
    assert_eq!(after.image, "docker.io/library/nginx:stable");
    assert_eq!(after.image_id, before.image_id);
    assert_eq!(after.restart_count, 1);
    // A tag the mapping does not name keeps an imageID of its own.
    world.set_image("app", "nginx:1.20");
    world.settle();
    assert_ne!(world.container("app").image_id, before.image_id);
}

#[test]
fn a_taken_host_port_rejects_the_pod() {
    use k8s_openapi::api::core::v1::ContainerPort;
    let mut app = container("app", "nginx");
    app.ports = Some(vec![ContainerPort {
        container_port: 80,
        host_port: Some(8080),
        ..Default::default()
    }]);
    // Free: admitted and started.
    let mut world = World::new(pod_with(vec![app.clone()], &[]));
    world.host_ports_in_use = [("UDP".to_string(), 8080)].into();
    world.settle();
    assert_eq!(world.status().phase.as_deref(), Some("Running"));
    // Taken: rejected for good, no container started.
    let mut world = World::new(pod_with(vec![app], &[]));
    world.host_ports_in_use = [("TCP".to_string(), 8080)].into();
    world.step();
    let status = world.status();
    assert_eq!(status.phase.as_deref(), Some("Failed"));
    assert_eq!(status.reason.as_deref(), Some(REASON_NODE_PORTS));
    assert!(
        status
            .message
            .as_deref()
            .is_some_and(|m| m.contains("8080/TCP")),
        "{:?}",
        status.message
    );
    assert!(status.container_statuses.unwrap_or_default().is_empty());
    // Freeing the port later changes nothing: the kubelet does not admit a rejected Pod again.
    world.host_ports_in_use.clear();
    assert_eq!(world.step(), Plan::default());
}

fn annotate(world: &mut World, key: &str, value: Option<&str>) {
    let annotations = world
        .pod
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    match value {
        Some(v) => annotations.insert(key.into(), v.into()),
        None => annotations.remove(key),
    };
}

fn probe(period: i32, threshold: i32) -> Option<k8s_openapi::api::core::v1::Probe> {
    Some(k8s_openapi::api::core::v1::Probe {
        period_seconds: Some(period),
        failure_threshold: Some(threshold),
        ..Default::default()
    })
}

#[test]
fn readiness_probe_fails_while_steered_then_recovers() {
    let mut world = World::new(pod_with(vec![container("app", "nginx")], &[]));
    world.settle();
    assert!(world.container("app").ready);
    annotate(&mut world, crate::steer::READINESS_FAIL, Some("app"));
    world.step();
    assert!(!world.container("app").ready);
    assert_eq!(world.condition("Ready").status, "False");
    assert_eq!(
        world.container("app").restart_count,
        0,
        "readiness never restarts"
    );
    annotate(&mut world, crate::steer::READINESS_FAIL, None);
    world.step();
    assert!(world.container("app").ready);
}

#[test]
fn liveness_failures_restart_the_container_after_threshold_times_period() {
    let mut app = container("app", "nginx");
    app.liveness_probe = probe(1, 2);
    let mut world = World::new(pod_with(vec![app], &[]));
    world.settle();
    let first_id = world.container("app").container_id;
    annotate(&mut world, crate::steer::LIVENESS_FAIL, Some("app"));
    let plan = world.step();
    assert_eq!(plan.requeue, Some(Duration::from_secs(2)));
    world.advance(1_999);
    world.step();
    assert_eq!(world.container("app").restart_count, 0);
    world.advance(1);
    world.step();
    let restarted = world.container("app");
    assert_eq!(restarted.restart_count, 1);
    assert_ne!(restarted.container_id, first_id);
    let last = restarted
        .last_state
        .and_then(|s| s.terminated)
        .expect("lastState");
    assert_eq!((last.exit_code, last.container_id), (137, first_id));
    // Still failing: killed again after another 2 s; recovered: left running.
    world.advance(2_000);
    world.step();
    assert_eq!(world.container("app").restart_count, 2);
    annotate(&mut world, crate::steer::LIVENESS_FAIL, None);
    world.settle();
    assert_eq!(world.container("app").restart_count, 2);
    assert!(world.container("app").ready);
}

#[test]
fn startup_probe_failing_keeps_the_container_unstarted_then_restarts_it() {
    let mut app = container("app", "nginx");
    app.startup_probe = probe(1, 3);
    let mut world = World::new(pod_with(
        vec![app, container("plain", "busybox")],
        &[(crate::steer::STARTUP_FAIL, "*")],
    ));
    world.step();
    world.advance(500);
    world.step();
    let app = world.container("app");
    assert_eq!((app.started, app.ready), (Some(false), false));
    assert_eq!(
        world.container("plain").started,
        Some(true),
        "no startupProbe: unaffected"
    );
    world.advance(2_500);
    world.step();
    assert_eq!(world.container("app").restart_count, 1);
    annotate(&mut world, crate::steer::STARTUP_FAIL, None);
    world.settle();
    let app = world.container("app");
    assert_eq!(
        (app.started, app.ready, app.restart_count),
        (Some(true), true, 1)
    );
}

#[test]
fn kubelet_crash_backoff_restarts_at_once_then_waits_10s_doubling() {
    let mut world = World::new(pod_with(
        vec![container("app", "nginx:crash")],
        &[(crate::steer::CRASH_BACKOFF, "kubelet")],
    ));
    world.step();
    world.step();
    let app = world.container("app");
    assert_eq!(app.restart_count, 1, "the first restart goes at once");
    assert!(running(&app));
    let plan = world.step();
    let app = world.container("app");
    assert_eq!(app.restart_count, 2);
    assert_eq!(waiting_reason(&app).as_deref(), Some("CrashLoopBackOff"));
    assert_eq!(plan.requeue, Some(Duration::from_secs(10)));
    world.advance(10_000);
    world.step();
    let plan = world.step();
    assert_eq!(world.container("app").restart_count, 3);
    assert_eq!(plan.requeue, Some(Duration::from_secs(20)));
}

/// An ephemeral container added to a running Pod (`pods/ephemeralcontainers`) is started, runs its
/// time, and ends for good with its exit code in `ephemeralContainerStatuses`; the Pod's phase,
/// conditions and app containers are untouched, whatever its restartPolicy.
#[test]
fn ephemeral_containers_run_once_and_report_their_status() {
    use k8s_openapi::api::core::v1::{EnvVar, EphemeralContainer};
    let mut world = World::new(pod_with(vec![container("app", "nginx:alpine")], &[]));
    world.settle();
    assert_eq!(world.status().phase.as_deref(), Some("Running"));
    let app_id = world.container("app").container_id;
    let ephemeral = |name: &str, env: Vec<EnvVar>| EphemeralContainer {
        name: name.into(),
        image: Some("busybox:1.34".into()),
        env: Some(env),
        ..Default::default()
    };
    let env = |name: &str, value: &str| EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..Default::default()
    };
    world.pod.spec.as_mut().expect("spec").ephemeral_containers = Some(vec![
        ephemeral("debug", vec![env("SIM_RUN_MS", "1000")]),
        ephemeral("broken", vec![env("SIM_EXIT_CODE", "2")]),
    ]);
    world.step();
    let statuses = |world: &World| {
        world
            .status()
            .ephemeral_container_statuses
            .unwrap_or_default()
    };
    let debug = statuses(&world)
        .into_iter()
        .find(|s| s.name == "debug")
        .expect("debug status");
    assert!(
        debug
            .state
            .as_ref()
            .and_then(|s| s.running.as_ref())
            .is_some(),
        "{debug:?}"
    );
    world.settle();
    let all = statuses(&world);
    let exit = |name: &str| {
        all.iter()
            .find(|s| s.name == name)
            .and_then(|s| s.state.as_ref()?.terminated.as_ref())
            .map(|t| (t.exit_code, t.finished_at.is_some()))
    };
    assert_eq!(exit("debug"), Some((0, true)));
    assert_eq!(exit("broken"), Some((2, true)));
    assert!(all.iter().all(|s| s.restart_count == 0), "{all:?}");
    assert_eq!(world.status().phase.as_deref(), Some("Running"));
    assert_eq!(
        world.container("app").container_id,
        app_id,
        "the app container kept running"
    );
    assert_eq!(world.condition("Ready").status, "True");
}
