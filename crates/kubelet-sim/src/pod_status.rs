//! The kubelet's decisions for one Pod, as a pure function of the Pod, the time and what the simulator
//! remembers about the Pod's containers.
//!
//! The planner only produces the status fields and conditions a kubelet owns (as the kubelet's `generateAPIPodStatus` does): `phase`,
//! `startTime`, host and Pod IPs, `initContainerStatuses`, `containerStatuses` and the conditions
//! `PodReadyToStartContainers`, `Initialized`, `ContainersReady` and `Ready`. Readiness-gate conditions such as
//! Kruise's `InPlaceUpdateReady` are read, never written.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, Pod, PodCondition, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;

use crate::image;
use crate::steer::{ContainerSteer, PodSteer};

pub const PHASE_PENDING: &str = "Pending";
pub const PHASE_RUNNING: &str = "Running";
pub const PHASE_SUCCEEDED: &str = "Succeeded";
pub const PHASE_FAILED: &str = "Failed";

const COND_SANDBOX: &str = "PodReadyToStartContainers";
const COND_INITIALIZED: &str = "Initialized";
const COND_CONTAINERS_READY: &str = "ContainersReady";
const COND_READY: &str = "Ready";
/// The conditions this simulator owns, in the order a kubelet lists them.
pub const OWNED_CONDITIONS: [&str; 4] = [
    COND_SANDBOX,
    COND_INITIALIZED,
    COND_CONTAINERS_READY,
    COND_READY,
];

/// Exit code of a container killed at the end of its grace period.
const KILLED_EXIT_CODE: i32 = 137;

/// Simulator-wide timing. Per-Pod steering overrides some of it.
#[derive(Clone, Debug)]
pub struct Timing {
    /// From a container start to its readiness.
    pub ready_delay: Duration,
    /// Run time of a container in a `Never`/`OnFailure` Pod when nothing steers it.
    pub job_run: Duration,
    /// Upper bound of the graceful shutdown, whatever the Pod's grace period says.
    pub shutdown_delay: Duration,
    /// First CrashLoopBackOff delay; it doubles per restart up to `crash_backoff_cap`.
    pub crash_backoff_base: Duration,
    pub crash_backoff_cap: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            ready_delay: Duration::from_millis(300),
            job_run: Duration::from_millis(500),
            shutdown_delay: Duration::from_millis(100),
            crash_backoff_base: Duration::from_millis(500),
            crash_backoff_cap: Duration::from_secs(10),
        }
    }
}

/// What the simulator remembers of a Pod between two decisions. Losing it (a simulator restart) is safe:
/// the status in the API holds everything needed, only with second precision.
#[derive(Clone, Debug, Default)]
pub struct PodMemory {
    /// Precise start time of each container, by containerID.
    started: HashMap<String, Timestamp>,
    /// Since when a container's liveness (or startup) probe has been failing, by containerID.
    probe_failing_since: HashMap<String, Timestamp>,
    /// When the current wait (image pull, slow start, back-off) of a container ends, by container name.
    waiting_until: HashMap<String, Timestamp>,
    /// When the simulator first saw the Pod's deletionTimestamp.
    deletion_seen: Option<Timestamp>,
    /// Failed pulls of a container whose image cannot be pulled, by container name: how many, and when
    /// the kubelet tries again (the ImagePullBackOff ends).
    pull_backoff: HashMap<String, (u32, Timestamp)>,
}

/// The kubelet's image pull back-off: 10 s, doubling, at most 300 s.
fn pull_backoff(failures: u32) -> Duration {
    let seconds = 10u64.saturating_mul(1u64 << failures.saturating_sub(1).min(5));
    Duration::from_secs(seconds.min(300))
}

/// A failed pull: the `ErrImagePull` waiting state, as the kubelet reports it, and when to try again.
fn failed_pull(
    spec: &Container,
    last_state: Option<ContainerState>,
    restart_count: i32,
    memory: &mut PodMemory,
    now: Timestamp,
    wake: &mut Wake,
) -> ContainerStatus {
    let image = image::normalize(spec.image.as_deref().unwrap_or_default());
    let host = image::registry_host(&image).unwrap_or_default().to_string();
    let failures = memory
        .pull_backoff
        .get(&spec.name)
        .map_or(1, |(n, _)| n.saturating_add(1));
    let retry = after(now, pull_backoff(failures));
    memory
        .pull_backoff
        .insert(spec.name.clone(), (failures, retry));
    // Show ErrImagePull for a moment, then ImagePullBackOff until the retry.
    wake.at(after(now, Duration::from_secs(1)));
    let message = format!(
        "failed to pull and unpack image \"{image}\": failed to resolve reference \"{image}\": \
         dial tcp: lookup {host}: no such host"
    );
    waiting(
        spec,
        last_state,
        restart_count,
        "ErrImagePull",
        Some(message),
    )
}

/// A container waiting on an image that cannot be pulled: `ImagePullBackOff` until the next try, then
/// another failed pull.
fn pulling_unpullable(
    spec: &Container,
    cur: &ContainerStatus,
    memory: &mut PodMemory,
    now: Timestamp,
    wake: &mut Wake,
) -> ContainerStatus {
    let retry = memory.pull_backoff.get(&spec.name).map(|(_, at)| *at);
    match retry {
        Some(at) if at > now => {
            wake.at(at);
            let image = image::normalize(spec.image.as_deref().unwrap_or_default());
            waiting(
                spec,
                cur.last_state.clone(),
                cur.restart_count,
                "ImagePullBackOff",
                Some(format!("Back-off pulling image \"{image}\"")),
            )
        }
        _ => failed_pull(
            spec,
            cur.last_state.clone(),
            cur.restart_count,
            memory,
            now,
            wake,
        ),
    }
}

/// Everything about the node and the moment that a decision needs.
pub struct PlanInput<'a> {
    pub now: Timestamp,
    pub timing: &'a Timing,
    pub node_ip: &'a str,
    /// The IP given to the Pod if it has none yet (ignored with hostNetwork).
    pub new_pod_ip: &'a dyn Fn() -> String,
    /// Images already pulled on the node; a start with another image pays the pull delay.
    pub node_images: &'a mut HashSet<String>,
    /// Generates container IDs (random in production, predictable in tests).
    pub new_container_id: &'a mut dyn FnMut() -> String,
    /// The host ports (protocol, port) held by the other Pods the node has admitted, asked only
    /// when admitting a Pod that requests some.
    pub host_ports_in_use: &'a dyn Fn() -> HashSet<(String, i32)>,
}

/// Reason of a Pod the node rejects because a host port it asks for is taken, as the kubelet's
/// admission (`NodePorts` predicate) reports it.
pub const REASON_NODE_PORTS: &str = "NodePorts";

/// The host ports (protocol, port) a Pod's containers ask for (`hostNetwork` Pods use their container
/// ports on the host).
pub fn host_ports(pod: &Pod) -> HashSet<(String, i32)> {
    let Some(spec) = &pod.spec else {
        return HashSet::new();
    };
    let host_network = spec.host_network == Some(true);
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            let port = p
                .host_port
                .or(host_network.then_some(p.container_port))
                .filter(|&port| port > 0)?;
            Some((p.protocol.clone().unwrap_or_else(|| "TCP".into()), port))
        })
        .collect()
}

/// The decision for one Pod.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    /// A strategic-merge patch for `pods/status`, when the status must change.
    pub status_patch: Option<serde_json::Value>,
    /// Delete the Pod now with grace period 0 (the end of a graceful deletion).
    pub delete: bool,
    /// Look at the Pod again after this long even if nothing changes.
    pub requeue: Option<Duration>,
}

/// The kubelet status fields the simulator writes.
#[derive(Clone, Debug, Default, PartialEq)]
struct KubeletStatus {
    phase: String,
    start_time: Option<Time>,
    host_ip: Option<String>,
    pod_ip: Option<String>,
    init_containers: Vec<ContainerStatus>,
    containers: Vec<ContainerStatus>,
    /// Ephemeral containers (added through `pods/ephemeralcontainers`): started once, never
    /// restarted, as the kubelet runs them.
    ephemeral_containers: Vec<ContainerStatus>,
    conditions: Vec<PodCondition>,
    /// The Pod's `metadata.generation` this status reflects: the v1.34 kubelet writes it to
    /// `status.observedGeneration` and to each condition it owns.
    observed_generation: Option<i64>,
    /// Why the node rejected the Pod (only then).
    reason: Option<String>,
    message: Option<String>,
}

impl KubeletStatus {
    fn from_pod(pod: &Pod) -> Self {
        let status = pod.status.clone().unwrap_or_default();
        let conditions = status
            .conditions
            .unwrap_or_default()
            .into_iter()
            .filter(|c| OWNED_CONDITIONS.contains(&c.type_.as_str()))
            .collect();
        Self {
            phase: status.phase.unwrap_or_default(),
            start_time: status.start_time,
            host_ip: status.host_ip,
            pod_ip: status.pod_ip,
            init_containers: status.init_container_statuses.unwrap_or_default(),
            containers: status.container_statuses.unwrap_or_default(),
            ephemeral_containers: status.ephemeral_container_statuses.unwrap_or_default(),
            conditions: sort_conditions(conditions),
            observed_generation: status.observed_generation,
            reason: status.reason,
            message: status.message,
        }
    }

    fn to_patch(&self, uid: &str) -> serde_json::Value {
        let ips = |ip: &Option<String>| ip.iter().map(|ip| json!({ "ip": ip })).collect::<Vec<_>>();
        let mut patch = json!({
            // The UID makes the patch fail if the Pod was replaced by a namesake (kubelet does the same).
            "metadata": { "uid": uid },
            "status": {
                "phase": self.phase,
                "startTime": self.start_time,
                "hostIP": self.host_ip,
                "hostIPs": ips(&self.host_ip),
                "podIP": self.pod_ip,
                "podIPs": ips(&self.pod_ip),
                "initContainerStatuses": self.init_containers,
                "containerStatuses": self.containers,
                "conditions": self.conditions,
            }
        });
        if let Some(generation) = self.observed_generation {
            patch["status"]["observedGeneration"] = json!(generation);
        }
        if !self.ephemeral_containers.is_empty() {
            patch["status"]["ephemeralContainerStatuses"] = json!(self.ephemeral_containers);
        }
        for (key, value) in [("reason", &self.reason), ("message", &self.message)] {
            if let Some(value) = value {
                patch["status"][key] = json!(value);
            }
        }
        // A strategic merge patch merges each condition into the one of its type and keeps the fields
        // it leaves out: a condition turning True must remove its reason and message with explicit
        // nulls, or Ready=True keeps "ReadinessGatesNotReady" and its message, and every later decision
        // sees a difference to write that the apiserver then finds nothing to change in (the kubelet's
        // status manager sends the same nulls: its patch is the two-way diff of the whole status).
        if let Some(conditions) = patch["status"]["conditions"].as_array_mut() {
            for condition in conditions.iter_mut().filter_map(|c| c.as_object_mut()) {
                for key in ["reason", "message"] {
                    condition.entry(key).or_insert(serde_json::Value::Null);
                }
            }
        }
        patch
    }
}

fn sort_conditions(mut conditions: Vec<PodCondition>) -> Vec<PodCondition> {
    conditions.sort_by_key(|c| OWNED_CONDITIONS.iter().position(|t| *t == c.type_));
    conditions
}

/// Truncates to seconds, the precision in which the API stores `Time`, so that a status read back
/// compares equal to the one written.
fn k8s_time(ts: Timestamp) -> Time {
    Time(Timestamp::from_second(ts.as_second()).unwrap_or(ts))
}

fn after(ts: Timestamp, d: Duration) -> Timestamp {
    ts.checked_add(d).unwrap_or(Timestamp::MAX)
}

fn until(now: Timestamp, then: Timestamp) -> Duration {
    Duration::try_from(then.duration_since(now)).unwrap_or(Duration::ZERO)
}

/// Tracks the earliest moment the Pod must be looked at again.
#[derive(Default)]
struct Wake(Option<Timestamp>);

impl Wake {
    fn at(&mut self, when: Timestamp) {
        self.0 = Some(self.0.map_or(when, |current| current.min(when)));
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// A regular init container: runs to completion before the app containers.
    Init,
    /// An init container with `restartPolicy: Always` (native sidecar): keeps running.
    Sidecar,
    App,
}

/// Whether a container restarts after it exits with `exit_code`.
fn restarts(kind: Kind, pod_restart_policy: &str, exit_code: i32) -> bool {
    match kind {
        Kind::Sidecar => true,
        Kind::Init | Kind::App => match pod_restart_policy {
            "Never" => false,
            "OnFailure" => exit_code != 0,
            _ => true,
        },
    }
}

/// Admission: a host port another Pod on the node holds rejects the Pod for good (Failed,
/// `NodePorts`), as a kubelet does.
fn reject_for_ports(
    pod: &Pod,
    current: &KubeletStatus,
    uid: &str,
    input: &mut PlanInput<'_>,
) -> Option<Plan> {
    let wanted = host_ports(pod);
    if !wanted.is_empty() {
        let used = (input.host_ports_in_use)();
        let mut taken: Vec<String> = wanted
            .intersection(&used)
            .map(|(protocol, port)| format!("{port}/{protocol}"))
            .collect();
        if !taken.is_empty() {
            taken.sort();
            let mut next = current.clone();
            next.phase = PHASE_FAILED.into();
            next.reason = Some(REASON_NODE_PORTS.into());
            next.message = Some(format!(
                "Pod was rejected: node(s) didn't have free ports for the requested pod ports ({} in use)",
                taken.join(", ")
            ));
            next.start_time = Some(k8s_time(input.now));
            return Some(Plan {
                status_patch: Some(next.to_patch(uid)),
                delete: false,
                requeue: None,
            });
        }
    }
    None
}

/// Decides what the kubelet would write now for `pod`, which is bound to this simulator's node.
pub fn plan(pod: &Pod, memory: &mut PodMemory, input: &mut PlanInput<'_>) -> Plan {
    let current = KubeletStatus::from_pod(pod);
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let terminal = matches!(current.phase.as_str(), PHASE_SUCCEEDED | PHASE_FAILED);

    if pod.metadata.deletion_timestamp.is_some() {
        return plan_deletion(pod, &current, &uid, memory, input);
    }
    if terminal {
        // Terminal phases never change again.
        return Plan::default();
    }
    if current.start_time.is_none()
        && let Some(rejected) = reject_for_ports(pod, &current, &uid, input)
    {
        return rejected;
    }

    let spec = pod.spec.clone().unwrap_or_default();
    let steer = PodSteer::from_pod(pod);
    let restart_policy = spec
        .restart_policy
        .clone()
        .unwrap_or_else(|| "Always".into());
    let default_run = (restart_policy != "Always").then_some(input.timing.job_run);
    let mut wake = Wake::default();
    let now = input.now;

    let mut next = current.clone();
    next.start_time = Some(current.start_time.clone().unwrap_or_else(|| k8s_time(now)));
    next.host_ip = Some(input.node_ip.to_string());
    next.pod_ip = if spec.host_network == Some(true) {
        Some(input.node_ip.to_string())
    } else {
        current
            .pod_ip
            .clone()
            .or_else(|| Some((input.new_pod_ip)()))
    };

    // Init containers: regular ones complete in order at once; native sidecars keep running.
    next.init_containers = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| {
            let kind = if c.restart_policy.as_deref() == Some("Always") {
                Kind::Sidecar
            } else {
                Kind::Init
            };
            let cur = current.init_containers.iter().find(|s| s.name == c.name);
            let steer = steer.container(c, None);
            match (kind, cur) {
                (Kind::Init, Some(done)) => done.clone(),
                (Kind::Init, None) => completed_init(c, now, input),
                _ => step_container(
                    c,
                    kind,
                    cur,
                    &steer,
                    &restart_policy,
                    memory,
                    input,
                    &mut wake,
                ),
            }
        })
        .collect();

    // As a kubelet, containers start in spec order and a postStart hook blocks the ones after it
    // until it ends (the way "start B only after A runs" orderings are built).
    let mut hook_until: Option<Timestamp> = None;
    next.containers = Vec::with_capacity(spec.containers.len());
    for c in &spec.containers {
        let cur = current.containers.iter().find(|s| s.name == c.name);
        let steer = steer.container(c, default_run);
        let needs_start = cur.is_none_or(|cur| {
            cur.image != image::normalize(c.image.as_deref().unwrap_or_default())
                || cur.state.as_ref().is_some_and(|s| s.waiting.is_some())
        });
        let status = if needs_start && hook_until.is_some_and(|t| t > now) {
            cur.cloned()
                .unwrap_or_else(|| waiting(c, None, 0, "ContainerCreating", None))
        } else {
            step_container(
                c,
                Kind::App,
                cur,
                &steer,
                &restart_policy,
                memory,
                input,
                &mut wake,
            )
        };
        if let Some(started) = running_since(&status, memory) {
            let hook_ends = after(started, steer.post_start);
            if hook_ends > now {
                wake.at(hook_ends);
                hook_until = Some(hook_until.map_or(hook_ends, |t| t.max(hook_ends)));
            }
        }
        next.containers.push(status);
    }

    // Ephemeral containers: each started once (in the order they were added), never restarted
    // whatever the Pod's restartPolicy; steered like the others (`SIM_RUN_MS`, `SIM_EXIT_CODE`), and
    // like a Job's container they exit 0 after the default run time. They change no phase or condition.
    next.ephemeral_containers = spec
        .ephemeral_containers
        .iter()
        .flatten()
        .filter_map(|e| serde_json::to_value(e).ok())
        .filter_map(|e| serde_json::from_value::<Container>(e).ok())
        .map(|c| {
            let cur = current
                .ephemeral_containers
                .iter()
                .find(|s| s.name == c.name);
            let steer = steer.container(&c, Some(input.timing.job_run));
            step_container(
                &c,
                Kind::App,
                cur,
                &steer,
                "Never",
                memory,
                input,
                &mut wake,
            )
        })
        .collect();

    next.phase = phase(&next.containers);
    next.observed_generation = pod.metadata.generation;
    next.conditions = conditions(pod, &current.conditions, &next, now);

    Plan {
        status_patch: (next != current).then(|| next.to_patch(&uid)),
        delete: false,
        requeue: wake.0.map(|when| until(now, when)),
    }
}

/// When a running container started (precisely, if the simulator started it).
fn running_since(status: &ContainerStatus, memory: &PodMemory) -> Option<Timestamp> {
    let running = status.state.as_ref()?.running.as_ref()?;
    status
        .container_id
        .as_ref()
        .and_then(|id| memory.started.get(id).copied())
        .or_else(|| running.started_at.as_ref().map(|t| t.0))
}

fn completed_init(c: &Container, now: Timestamp, input: &mut PlanInput<'_>) -> ContainerStatus {
    let image = c.image.clone().unwrap_or_default();
    input.node_images.insert(image::normalize(&image));
    ContainerStatus {
        name: c.name.clone(),
        image: image::normalize(&image),
        image_id: image::image_id(&image),
        container_id: Some((input.new_container_id)()),
        state: Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 0,
                reason: Some("Completed".into()),
                started_at: Some(k8s_time(now)),
                finished_at: Some(k8s_time(now)),
                ..Default::default()
            }),
            ..Default::default()
        }),
        started: Some(false),
        ready: false,
        restart_count: 0,
        resources: resources(c),
        allocated_resources: allocated(c),
        ..Default::default()
    }
}

/// `status.containerStatuses[].resources`: what the runtime applied. The v1.34 kubelet reports it for
/// every container, `{}` when the container asks for nothing.
fn resources(c: &Container) -> Option<ResourceRequirements> {
    let r = c.resources.clone().unwrap_or_default();
    Some(ResourceRequirements { claims: None, ..r })
}

/// `status.containerStatuses[].allocatedResources`: the requests the node admitted the container with
/// (after an in-place resize, the resized ones); absent when it requests nothing, as the kubelet
/// reports it.
fn allocated(c: &Container) -> Option<BTreeMap<String, Quantity>> {
    c.resources
        .as_ref()
        .and_then(|r| r.requests.clone())
        .filter(|requests| !requests.is_empty())
}

/// The container's image changed in place: the kubelet kills exactly this container (its last
/// state the run that ends now) and starts the new image.
fn replace_image(
    spec: &Container,
    cur: &ContainerStatus,
    state: &ContainerState,
    steer: &ContainerSteer,
    memory: &mut PodMemory,
    input: &mut PlanInput<'_>,
    wake: &mut Wake,
) -> ContainerStatus {
    let now = input.now;
    let restart_count = if cur.container_id.is_some() {
        cur.restart_count + 1
    } else {
        cur.restart_count
    };
    let last = state.running.as_ref().map(|running| ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code: 0,
            reason: Some("Completed".into()),
            container_id: cur.container_id.clone(),
            started_at: running.started_at.clone(),
            finished_at: Some(k8s_time(now)),
            ..Default::default()
        }),
        ..Default::default()
    });
    memory.waiting_until.remove(&spec.name);
    start(
        spec,
        last.or(cur.last_state.clone()),
        restart_count,
        steer,
        memory,
        input,
        wake,
    )
}

/// A container waiting to start (its image pulling, a slow start): still waiting until its delay
/// has passed, then running.
fn wait_to_run(
    spec: &Container,
    cur: &ContainerStatus,
    steer: &ContainerSteer,
    memory: &mut PodMemory,
    input: &mut PlanInput<'_>,
    wake: &mut Wake,
) -> ContainerStatus {
    let now = input.now;
    let ends = *memory
        .waiting_until
        .entry(spec.name.clone())
        .or_insert_with(|| after(now, steer.start_delay.max(steer.pull_delay)));
    if ends > now {
        wake.at(ends);
        return ContainerStatus {
            resources: resources(spec),
            allocated_resources: allocated(spec),
            ..cur.clone()
        };
    }
    memory.waiting_until.remove(&spec.name);
    run(
        spec,
        cur.last_state.clone(),
        cur.restart_count,
        steer,
        memory,
        input,
        wake,
    )
}

/// The next status of one long-running container (app container or native sidecar).
#[allow(clippy::too_many_arguments)]
fn step_container(
    spec: &Container,
    kind: Kind,
    cur: Option<&ContainerStatus>,
    steer: &ContainerSteer,
    restart_policy: &str,
    memory: &mut PodMemory,
    input: &mut PlanInput<'_>,
    wake: &mut Wake,
) -> ContainerStatus {
    let now = input.now;
    let spec_image = spec.image.clone().unwrap_or_default();
    let want_image = image::normalize(&spec_image);
    let Some(cur) = cur else {
        return start(spec, None, 0, steer, memory, input, wake);
    };
    let state = cur.state.clone().unwrap_or_default();

    if state.terminated.is_some() {
        // Exited for good (Never, or OnFailure with exit 0): a kubelet does not start it again.
        return ContainerStatus {
            resources: resources(spec),
            allocated_resources: allocated(spec),
            ..cur.clone()
        };
    }

    if cur.image != want_image {
        // In-place image update: the kubelet kills exactly this container and starts the new image.
        return replace_image(spec, cur, &state, steer, memory, input, wake);
    }

    if state.waiting.is_some() && image::unpullable(&spec_image) {
        return pulling_unpullable(spec, cur, memory, now, wake);
    }

    if state.waiting.is_some() {
        return wait_to_run(spec, cur, steer, memory, input, wake);
    }

    // Running with the wanted image.
    let container_id = cur.container_id.clone().unwrap_or_default();
    let started = memory
        .started
        .get(&container_id)
        .copied()
        .unwrap_or_else(|| {
            state
                .running
                .as_ref()
                .and_then(|r| r.started_at.as_ref())
                .map_or(now, |t| t.0)
        });
    if let Some(run_for) = steer.run {
        let exits_at = after(started, run_for);
        if exits_at <= now {
            memory.started.remove(&container_id);
            return exit(
                spec,
                kind,
                cur,
                steer,
                restart_policy,
                started,
                memory,
                input,
                wake,
            );
        }
        wake.at(exits_at);
    }
    // Probes: a failing liveness (or startup) probe restarts the container once it has failed for
    // failureThreshold × periodSeconds, as the kubelet does.
    match steer.liveness_restart_after {
        Some(threshold) => {
            // A startup probe fails from the container's start; a liveness probe from when it
            // was first seen failing (or from its start, for the container started to replace
            // one it killed).
            let first = if steer.startup_fails { started } else { now };
            let since = *memory
                .probe_failing_since
                .entry(container_id.clone())
                .or_insert(first);
            let kill_at = after(since, threshold);
            if kill_at <= now {
                memory.probe_failing_since.remove(&container_id);
                memory.started.remove(&container_id);
                let last = ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        exit_code: KILLED_EXIT_CODE,
                        reason: Some("Error".into()),
                        container_id: cur.container_id.clone(),
                        started_at: state.running.as_ref().and_then(|r| r.started_at.clone()),
                        finished_at: Some(k8s_time(now)),
                        ..Default::default()
                    }),
                    ..Default::default()
                };
                let next = start(
                    spec,
                    Some(last),
                    cur.restart_count + 1,
                    steer,
                    memory,
                    input,
                    wake,
                );
                if let Some(id) = &next.container_id {
                    memory.probe_failing_since.insert(id.clone(), now);
                    wake.at(after(now, threshold));
                }
                return next;
            }
            wake.at(kill_at);
        }
        None => {
            memory.probe_failing_since.remove(&container_id);
        }
    }
    let ready_at = after(
        started,
        steer.post_start + steer.ready_delay.unwrap_or(input.timing.ready_delay),
    );
    let probes_pass = !steer.never_ready && !steer.readiness_fails && !steer.startup_fails;
    let ready = probes_pass && ready_at <= now;
    if probes_pass && !ready {
        wake.at(ready_at);
    }
    ContainerStatus {
        ready,
        started: Some(!steer.startup_fails),
        resources: resources(spec),
        allocated_resources: allocated(spec),
        ..cur.clone()
    }
}

/// Starts (or restarts) a container: it waits while the image is pulled or the start is slow, then runs.
fn start(
    spec: &Container,
    last_state: Option<ContainerState>,
    restart_count: i32,
    steer: &ContainerSteer,
    memory: &mut PodMemory,
    input: &mut PlanInput<'_>,
    wake: &mut Wake,
) -> ContainerStatus {
    let image = image::normalize(spec.image.as_deref().unwrap_or_default());
    memory.pull_backoff.remove(&spec.name);
    if image::unpullable(&image) {
        return failed_pull(spec, last_state, restart_count, memory, input.now, wake);
    }
    let pull = if input.node_images.contains(&image) {
        Duration::ZERO
    } else {
        steer.pull_delay
    };
    let delay = steer.start_delay.max(pull);
    if delay.is_zero() {
        return run(spec, last_state, restart_count, steer, memory, input, wake);
    }
    let ends = after(input.now, delay);
    memory.waiting_until.insert(spec.name.clone(), ends);
    wake.at(ends);
    waiting(spec, last_state, restart_count, "ContainerCreating", None)
}

fn waiting(
    spec: &Container,
    last_state: Option<ContainerState>,
    restart_count: i32,
    reason: &str,
    message: Option<String>,
) -> ContainerStatus {
    let image = spec.image.as_deref().unwrap_or_default();
    ContainerStatus {
        name: spec.name.clone(),
        image: image::normalize(image),
        image_id: String::new(),
        state: Some(ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.into()),
                message,
            }),
            ..Default::default()
        }),
        last_state,
        started: Some(false),
        ready: false,
        restart_count,
        resources: resources(spec),
        allocated_resources: allocated(spec),
        ..Default::default()
    }
}

fn run(
    spec: &Container,
    last_state: Option<ContainerState>,
    restart_count: i32,
    steer: &ContainerSteer,
    memory: &mut PodMemory,
    input: &mut PlanInput<'_>,
    wake: &mut Wake,
) -> ContainerStatus {
    let now = input.now;
    let image = spec.image.as_deref().unwrap_or_default();
    input.node_images.insert(image::normalize(image));
    let container_id = (input.new_container_id)();
    memory.started.insert(container_id.clone(), now);
    let ready_delay = steer.post_start + steer.ready_delay.unwrap_or(input.timing.ready_delay);
    let ready = !steer.never_ready && ready_delay.is_zero();
    if !steer.never_ready && !ready {
        wake.at(after(now, ready_delay));
    }
    if let Some(run_for) = steer.run {
        wake.at(after(now, run_for));
    }
    ContainerStatus {
        name: spec.name.clone(),
        image: image::normalize(image),
        image_id: image::image_id_at(image, steer.image_digest.as_deref()),
        container_id: Some(container_id),
        state: Some(ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(k8s_time(now)),
            }),
            ..Default::default()
        }),
        last_state,
        started: Some(true),
        ready,
        restart_count,
        resources: resources(spec),
        allocated_resources: allocated(spec),
        ..Default::default()
    }
}

/// A running container's run time ended with its steered exit code.
#[allow(clippy::too_many_arguments)]
fn exit(
    spec: &Container,
    kind: Kind,
    cur: &ContainerStatus,
    steer: &ContainerSteer,
    restart_policy: &str,
    started: Timestamp,
    memory: &mut PodMemory,
    input: &mut PlanInput<'_>,
    wake: &mut Wake,
) -> ContainerStatus {
    let now = input.now;
    let terminated = ContainerStateTerminated {
        exit_code: steer.exit_code,
        reason: Some(
            if steer.exit_code == 0 {
                "Completed"
            } else {
                "Error"
            }
            .into(),
        ),
        container_id: cur.container_id.clone(),
        started_at: Some(k8s_time(started)),
        finished_at: Some(k8s_time(now)),
        ..Default::default()
    };
    if !restarts(kind, restart_policy, steer.exit_code) {
        return ContainerStatus {
            state: Some(ContainerState {
                terminated: Some(terminated),
                ..Default::default()
            }),
            started: Some(false),
            ready: false,
            resources: resources(spec),
            allocated_resources: allocated(spec),
            ..cur.clone()
        };
    }
    let last = Some(ContainerState {
        terminated: Some(terminated),
        ..Default::default()
    });
    let restart_count = cur.restart_count + 1;
    if steer.exit_code == 0 {
        return run(spec, last, restart_count, steer, memory, input, wake);
    }
    // A failing container restarts after an exponential back-off, as CrashLoopBackOff.
    let timing = input.timing;
    let schedule = steer.crash_backoff.unwrap_or(crate::steer::Backoff {
        base: timing.crash_backoff_base,
        cap: timing.crash_backoff_cap,
        kubelet: false,
    });
    let backoff = schedule.delay(cur.restart_count, until(started, now));
    if backoff.is_zero() {
        return run(spec, last, restart_count, steer, memory, input, wake);
    }
    let ends = after(now, backoff);
    memory.waiting_until.insert(spec.name.clone(), ends);
    wake.at(ends);
    let message = format!(
        "back-off {}ms restarting failed container={} pod",
        backoff.as_millis(),
        spec.name
    );
    let mut status = waiting(spec, last, restart_count, "CrashLoopBackOff", Some(message));
    status.image_id = cur.image_id.clone();
    status.container_id = cur.container_id.clone();
    status
}

fn is_terminated(status: &ContainerStatus) -> Option<i32> {
    status
        .state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .map(|t| t.exit_code)
}

/// Pod phase from the app containers: terminal when all of them exited for good, Running once any has
/// been started, Pending before.
fn phase(containers: &[ContainerStatus]) -> String {
    let exits: Vec<Option<i32>> = containers.iter().map(is_terminated).collect();
    if !exits.is_empty() && exits.iter().all(Option::is_some) {
        return if exits.iter().all(|code| *code == Some(0)) {
            PHASE_SUCCEEDED
        } else {
            PHASE_FAILED
        }
        .into();
    }
    if containers.iter().any(|c| c.container_id.is_some()) {
        PHASE_RUNNING.into()
    } else {
        PHASE_PENDING.into()
    }
}

/// The four kubelet conditions, keeping each `lastTransitionTime` unless the status flips.
fn conditions(
    pod: &Pod,
    current: &[PodCondition],
    next: &KubeletStatus,
    now: Timestamp,
) -> Vec<PodCondition> {
    let terminal = matches!(next.phase.as_str(), PHASE_SUCCEEDED | PHASE_FAILED);
    let sidecars = next
        .init_containers
        .iter()
        .filter(|s| s.state.as_ref().is_some_and(|st| st.terminated.is_none()));
    let unready: Vec<&str> = sidecars
        .chain(next.containers.iter())
        .filter(|s| !s.ready)
        .map(|s| s.name.as_str())
        .collect();

    let containers_ready = if terminal {
        (false, Some("PodCompleted".to_string()), None)
    } else if unready.is_empty() {
        (true, None, None)
    } else {
        let message = format!("containers with unready status: [{}]", unready.join(" "));
        (false, Some("ContainersNotReady".to_string()), Some(message))
    };

    let all_conditions = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let gate_problems: Vec<String> = pod
        .spec
        .as_ref()
        .and_then(|s| s.readiness_gates.clone())
        .unwrap_or_default()
        .iter()
        .filter_map(|gate| {
            let condition = all_conditions
                .iter()
                .find(|c| c.type_ == gate.condition_type);
            match condition {
                None => Some(format!(
                    "corresponding condition of pod readiness gate \"{}\" does not exist.",
                    gate.condition_type
                )),
                Some(c) if c.status != "True" => {
                    Some(kruise_api::keys::readiness_gate_not_true_message(
                        &gate.condition_type,
                        &c.status,
                    ))
                }
                Some(_) => None,
            }
        })
        .collect();

    let ready = if !containers_ready.0 {
        containers_ready.clone()
    } else if !gate_problems.is_empty() {
        (
            false,
            Some(kruise_api::keys::REASON_READINESS_GATES_NOT_READY.to_string()),
            Some(gate_problems.join(", ")),
        )
    } else {
        (true, None, None)
    };

    let wanted: BTreeMap<&str, (bool, Option<String>, Option<String>)> = [
        (COND_SANDBOX, (true, None, None)),
        (COND_INITIALIZED, (true, None, None)),
        (COND_CONTAINERS_READY, containers_ready),
        (COND_READY, ready),
    ]
    .into_iter()
    .collect();

    let built = OWNED_CONDITIONS
        .iter()
        .map(|type_| {
            let (status, reason, message) = wanted[type_].clone();
            let status = if status { "True" } else { "False" }.to_string();
            let previous = current.iter().find(|c| c.type_ == *type_);
            let last_transition_time = match previous {
                Some(p) if p.status == status => p.last_transition_time.clone(),
                _ => Some(k8s_time(now)),
            };
            PodCondition {
                type_: type_.to_string(),
                status,
                reason,
                message,
                last_transition_time,
                last_probe_time: previous.and_then(|p| p.last_probe_time.clone()),
                observed_generation: pod.metadata.generation,
            }
        })
        .collect();
    sort_conditions(built)
}

/// Graceful deletion: after min(grace period, shutdown delay) the containers are stopped, the Pod gets a
/// terminal phase, and the kubelet deletes it with grace period 0.
fn plan_deletion(
    pod: &Pod,
    current: &KubeletStatus,
    uid: &str,
    memory: &mut PodMemory,
    input: &mut PlanInput<'_>,
) -> Plan {
    if pod.metadata.deletion_grace_period_seconds == Some(0) {
        // Already deleted with grace 0; only finalizers keep it. Nothing left for a kubelet to do.
        return Plan::default();
    }
    let now = input.now;
    let seen = *memory.deletion_seen.get_or_insert(now);
    let grace = pod
        .metadata
        .deletion_grace_period_seconds
        .map_or(Duration::ZERO, |s| Duration::from_secs(s.max(0) as u64));
    // The containers stop once their preStop hooks ran (a `sleep N` takes N s), within the grace
    // period (the Pod's terminationGracePeriodSeconds unless the delete said otherwise).
    let pre_stop = pod
        .spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .map(|c| crate::steer::lifecycle_hooks(c).1)
        .max()
        .unwrap_or_default();
    let stop_at = after(seen, grace.min(input.timing.shutdown_delay.max(pre_stop)));
    if stop_at > now {
        return Plan {
            requeue: Some(until(now, stop_at)),
            ..Plan::default()
        };
    }

    let mut next = current.clone();
    let stop = |status: &ContainerStatus| {
        if is_terminated(status).is_some() {
            return status.clone();
        }
        let started_at = status
            .state
            .as_ref()
            .and_then(|s| s.running.as_ref())
            .and_then(|r| r.started_at.clone());
        ContainerStatus {
            state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: KILLED_EXIT_CODE,
                    reason: Some("Error".into()),
                    container_id: status.container_id.clone(),
                    started_at,
                    finished_at: Some(k8s_time(now)),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ready: false,
            started: Some(false),
            ..status.clone()
        }
    };
    next.containers = current.containers.iter().map(stop).collect();
    next.init_containers = current.init_containers.iter().map(stop).collect();
    if !matches!(next.phase.as_str(), PHASE_SUCCEEDED | PHASE_FAILED) {
        let all_zero = next.containers.iter().all(|c| is_terminated(c) == Some(0));
        next.phase = if all_zero && !next.containers.is_empty() {
            PHASE_SUCCEEDED
        } else {
            PHASE_FAILED
        }
        .into();
    }
    next.conditions = conditions(pod, &current.conditions, &next, now);
    Plan {
        status_patch: (next != *current).then(|| next.to_patch(uid)),
        delete: true,
        requeue: None,
    }
}

#[cfg(test)]
mod tests;
