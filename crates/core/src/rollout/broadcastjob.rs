//! BroadcastJob's decisions (upstream `broadcastjob_controller.go`): which nodes
//! want a Pod, which Pods sit on nodes that no longer fit, how many Pods to start under
//! `parallelism`, how the Pods count (active, succeeded, failed with `restartLimit`), and the phase
//! machine running → paused → completed | failed with `completionPolicy`, `failurePolicy`,
//! `activeDeadlineSeconds` and `ttlSecondsAfterFinished`.
//!
//! Everything here is a pure function of a snapshot (the job, the nodes, the job's Pods, `now`);
//! whether a Pod fits a node is asked of the caller (`fits`), which uses [`crate::nodefit`].

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kruise_api::broadcastjob::v1beta1::{
    BroadcastJob, BroadcastJobStatus, COMPLETION_NEVER, CONDITION_COMPLETE, CONDITION_FAILED,
    FAILURE_CONTINUE, FAILURE_FAIL_FAST, FAILURE_PAUSE, JobCondition, PHASE_COMPLETED,
    PHASE_FAILED, PHASE_PAUSED, PHASE_RUNNING,
};
use kruise_api::intstr::{IntOrPercent, Round};

use crate::pods;

/// How one of the job's Pods counts (upstream `filterPods`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodCount {
    Active,
    Succeeded,
    /// Phase Failed, or restartPolicy OnFailure with more container restarts than `restartLimit`.
    Failed,
    /// Being deleted and not finished: counted nowhere.
    Ignored,
}

/// Upstream `filterPods`/`isPodFailed`: a finished Pod counts by its phase; a live Pod with
/// restartPolicy OnFailure whose init and app containers restarted more than `restart_limit` times
/// in total counts as failed; a deleting unfinished Pod counts nowhere.
pub fn count_pod(pod: &Pod, restart_limit: i32) -> PodCount {
    match pods::phase(pod) {
        pods::PHASE_SUCCEEDED => PodCount::Succeeded,
        pods::PHASE_FAILED => PodCount::Failed,
        _ if pods::is_terminating(pod) => PodCount::Ignored,
        _ if restarts_exceed(pod, restart_limit) => PodCount::Failed,
        _ => PodCount::Active,
    }
}

fn restarts_exceed(pod: &Pod, restart_limit: i32) -> bool {
    let on_failure =
        pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) == Some("OnFailure");
    if !on_failure {
        return false;
    }
    let status = pod.status.as_ref();
    let restarts: i64 = status
        .and_then(|s| s.init_container_statuses.as_ref())
        .into_iter()
        .chain(status.and_then(|s| s.container_statuses.as_ref()))
        .flatten()
        .map(|c| i64::from(c.restart_count))
        .sum();
    restarts > i64::from(restart_limit)
}

/// The Pod counts of a job.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub active: i32,
    pub succeeded: i32,
    pub failed: i32,
}

/// Counts `pods` as upstream does.
pub fn count(pods: &[&Pod], restart_limit: i32) -> Counts {
    let mut counts = Counts::default();
    for pod in pods {
        match count_pod(pod, restart_limit) {
            PodCount::Active => counts.active += 1,
            PodCount::Succeeded => counts.succeeded += 1,
            PodCount::Failed => counts.failed += 1,
            PodCount::Ignored => {}
        }
    }
    counts
}

/// Where the job's Pods go (upstream `getNodesToRunPod`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Placement<'a> {
    /// Every node that fits the job, with its Pod if it has one (upstream `desiredNodes`).
    pub desired: BTreeMap<String, Option<&'a Pod>>,
    /// Fitting nodes without a Pod, in the order of the node list.
    pub needs_pod: Vec<String>,
    /// Pods (not being deleted) on nodes that no longer fit.
    pub misplaced: Vec<&'a Pod>,
    /// A second Pod of the job on a node that already had one: (Pod name, node).
    pub duplicates: Vec<(String, String)>,
}

/// Decides where the job's Pods go. `node_of` names the node a Pod is bound to; `fits` says whether
/// a Pod spec fits a node. A node without a Pod is tried with the template's spec with `nodeName`
/// set to it (upstream `NewMockPod`; a template without a nodeName is tried as it is, since an unset
/// nodeName fits every node); a node with a Pod is tried with that Pod's own spec. Pods
/// whose node is not in `nodes` are left alone (upstream leaves them to Pod GC).
pub fn place<'a, 'n>(
    template: &PodSpec,
    nodes: impl IntoIterator<Item = &'n Node>,
    job_pods: &[&'a Pod],
    node_of: impl Fn(&Pod) -> Option<String>,
    fits: impl Fn(&PodSpec, &Node) -> bool,
) -> Placement<'a> {
    let mut placement = Placement::default();
    let no_spec = PodSpec::default();
    let mut on_node: BTreeMap<String, &'a Pod> = BTreeMap::new();
    for pod in job_pods {
        let node = node_of(pod).unwrap_or_default();
        if on_node.insert(node.clone(), pod).is_some() {
            placement
                .duplicates
                .push((pod.metadata.name.clone().unwrap_or_default(), node));
        }
    }
    for node in nodes {
        let Some(name) = node.metadata.name.clone() else {
            continue;
        };
        match on_node.get(&name) {
            Some(pod) => {
                // The Pod's own spec, borrowed: a job over thousands of nodes would otherwise copy
                // every Pod's spec on every reconcile.
                if fits(pod.spec.as_ref().unwrap_or(&no_spec), node) {
                    placement.desired.insert(name, Some(*pod));
                } else if !pods::is_terminating(pod) {
                    placement.misplaced.push(pod);
                }
            }
            None => {
                // An unset nodeName places the Pod on any node: the template is tried as it is.
                let fitting = if template
                    .node_name
                    .as_deref()
                    .is_none_or(|n| n.is_empty() || n == name)
                {
                    fits(template, node)
                } else {
                    let mut spec = template.clone();
                    spec.node_name = Some(name.clone());
                    fits(&spec, node)
                };
                if fitting {
                    placement.desired.insert(name.clone(), None);
                    placement.needs_pod.push(name);
                }
            }
        }
    }
    placement
}

/// Whether a Pod spec fits a node as upstream's `checkNodeFitness` decides: placement, taints,
/// cordon, and requests against the node's allocatable with no other Pod counted. The `fits` that
/// the controller gives [`place`].
pub fn node_fits(spec: &PodSpec, node: &Node) -> bool {
    crate::nodefit::pod_fits(spec, node).is_ok()
        && crate::nodefit::requests_fit(spec, node, &BTreeMap::new()).is_ok()
}

/// The node a job's Pod is bound to: its `nodeName`, or while it is Pending the node its required
/// affinity names. The `node_of` that the controller gives [`place`].
pub fn pod_node(pod: &Pod) -> Option<String> {
    pod.spec
        .as_ref()
        .and_then(crate::nodefit::bound_node)
        .map(str::to_owned)
}

/// `parallelism` of `desired` nodes: an integer, or a percentage rounded up; unset is unlimited.
pub fn parallelism(value: Option<&IntOrString>, desired: i32) -> Result<i32, String> {
    match value {
        None => Ok(i32::MAX),
        Some(value) => IntOrPercent::parse(value).map(|v| v.scaled(desired, Round::Up).max(0)),
    }
}

/// How many Pods to create now: up to `parallelism − active`, at most one per node needing one.
pub fn to_create(parallelism: i32, active: i32, needing: usize) -> usize {
    if active >= parallelism {
        return 0;
    }
    usize::try_from(parallelism - active).map_or(needing, |room| room.min(needing))
}

/// An Event the controller publishes on the job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobEvent {
    pub warning: bool,
    pub reason: String,
    pub message: String,
}

impl JobEvent {
    fn normal(reason: &str, message: String) -> Self {
        Self {
            warning: false,
            reason: reason.into(),
            message,
        }
    }

    fn warning(reason: &str, message: String) -> Self {
        Self {
            warning: true,
            reason: reason.into(),
            message,
        }
    }
}

/// What one reconcile of a job does.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan<'a> {
    /// The job finished and its TTL has passed: delete it (and nothing else).
    pub delete_job: bool,
    /// Create a Pod on each of these nodes, in this order, in slow-start batches.
    pub create_on: Vec<String>,
    /// Delete these Pods: the active ones of a failed job, or Pods on nodes that no longer fit.
    pub delete: Vec<&'a Pod>,
    /// Events to publish, in order, before the status is written.
    pub events: Vec<JobEvent>,
    /// The status to write, assuming every create and delete succeeds (the caller takes a failed
    /// create back out of `active`). `None` leaves the status alone.
    pub status: Option<BroadcastJobStatus>,
    /// Reconcile again after this long (deadline, TTL).
    pub requeue_after: Option<Duration>,
}

/// Whether a Complete or Failed condition is True and the job is not `Never` (upstream
/// `IsJobFinished`).
pub fn is_finished(job: &BroadcastJob) -> bool {
    if job.spec.completion_policy.type_ == COMPLETION_NEVER {
        return false;
    }
    job.status.as_ref().is_some_and(|s| {
        s.conditions.iter().any(|c| {
            (c.type_ == CONDITION_COMPLETE || c.type_ == CONDITION_FAILED) && c.status == "True"
        })
    })
}

fn seconds(d: SignedDuration) -> Duration {
    Duration::try_from(d).unwrap_or_default()
}

fn condition(type_: &str, message: String, now: Timestamp) -> JobCondition {
    JobCondition {
        type_: type_.into(),
        status: "True".into(),
        last_probe_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
        reason: type_.into(),
        message,
    }
}

/// The plan of a finished job: deleted once `ttlSecondsAfterFinished` has passed.
fn finished_plan<'a>(job: &BroadcastJob, now: Timestamp) -> Plan<'a> {
    let mut plan = Plan::default();
    let spec = &job.spec;
    let old = job.status.clone().unwrap_or_default();
    if let (Some(ttl), Some(done)) = (
        spec.completion_policy.ttl_seconds_after_finished,
        old.completion_time.as_ref(),
    ) {
        let expires = done.0 + SignedDuration::from_secs(i64::from(ttl));
        if now >= expires {
            plan.delete_job = true;
        } else {
            plan.requeue_after = Some(seconds(expires.duration_since(now)));
        }
    }
    plan
}

/// Fails the job for `reason`: its active Pods deleted (each counted as failed), the Failed
/// condition and completion time set, and a Warning.
fn fail<'a>(
    job: &BroadcastJob,
    job_pods: &[&'a Pod],
    mut status: BroadcastJobStatus,
    (reason, message): (&str, String),
    now: Timestamp,
    plan: &mut Plan<'a>,
) {
    let spec = &job.spec;
    // Upstream counts each active Pod it deletes as failed.
    let active: Vec<&'a Pod> = job_pods
        .iter()
        .copied()
        .filter(|p| count_pod(p, spec.failure_policy.restart_limit) == PodCount::Active)
        .collect();
    let deleted = i32::try_from(active.len()).unwrap_or(i32::MAX);
    status.failed += deleted;
    status.active -= deleted;
    plan.delete = active;
    status.phase = PHASE_FAILED.into();
    status
        .conditions
        .push(condition(CONDITION_FAILED, message.clone(), now));
    status.completion_time = Some(Time(now));
    plan.requeue_after = ttl_requeue(job);
    plan.events.push(JobEvent::warning(
        reason,
        format!(
            "{message}: {} pods succeeded, {} pods failed",
            status.succeeded, status.failed
        ),
    ));
    plan.status = Some(status);
}

/// Creates Pods on the nodes that need one, as many as `spec.parallelism` leaves room for.
fn create_within_parallelism<'a>(
    job: &BroadcastJob,
    desired: i32,
    placement: &Placement<'a>,
    status: &mut BroadcastJobStatus,
    plan: &mut Plan<'a>,
) {
    let spec = &job.spec;
    match parallelism(spec.parallelism.as_ref(), desired) {
        Ok(limit) => {
            if status.active > limit {
                plan.events.push(JobEvent::warning(
                    "TooManyActivePods",
                    "Number of active pods exceed parallelism limit".into(),
                ));
            }
            let n = to_create(limit, status.active, placement.needs_pod.len());
            plan.create_on = placement.needs_pod[..n].to_vec();
            status.active += i32::try_from(n).unwrap_or(i32::MAX);
        }
        Err(message) => plan.events.push(JobEvent::warning(
            "InvalidParallelism",
            format!("spec.parallelism: {message}"),
        )),
    }
}

/// Decides one reconcile of `job` (its template already carrying the job labels or not: labels do
/// not affect the decision). `placement` comes from [`place`], `pods` are the job's Pods.
pub fn plan<'a>(
    job: &BroadcastJob,
    job_pods: &[&'a Pod],
    placement: &Placement<'a>,
    now: Timestamp,
) -> Plan<'a> {
    let mut plan = Plan::default();
    let spec = &job.spec;
    let old = job.status.clone().unwrap_or_default();
    let namespace = job.metadata.namespace.as_deref().unwrap_or_default();
    let name = job.metadata.name.as_deref().unwrap_or_default();
    let never = spec.completion_policy.type_ == COMPLETION_NEVER;

    if is_finished(job) {
        return finished_plan(job, now);
    }

    let mut status = old.clone();
    let start = status.start_time.get_or_insert(Time(now)).0;
    // Upstream requeues at the deadline only when it sets startTime; asking every time also
    // survives a manager restart in between.
    let deadline = (!never)
        .then_some(spec.completion_policy.active_deadline_seconds)
        .flatten()
        .map(|secs| start + SignedDuration::from_secs(secs));
    if let Some(deadline) = deadline
        && now < deadline
    {
        plan.requeue_after = Some(seconds(deadline.duration_since(now)));
    }
    if status.phase.is_empty() {
        status.phase = PHASE_RUNNING.into();
    }

    let counts = count(job_pods, spec.failure_policy.restart_limit);
    let desired = i32::try_from(placement.desired.len()).unwrap_or(i32::MAX);
    status.active = counts.active;
    status.succeeded = counts.succeeded;
    status.failed = counts.failed;
    status.desired = desired;
    for (pod, node) in &placement.duplicates {
        plan.events.push(JobEvent::warning(
            "DuplicatePodCreatedOnSameNode",
            format!("Duplicated pod {pod} found on same node {node}"),
        ));
    }

    if status.phase == PHASE_FAILED {
        plan.status = Some(status);
        return plan;
    }
    if spec.paused && (status.phase == PHASE_RUNNING || status.phase == PHASE_PAUSED) {
        status.phase = PHASE_PAUSED.into();
        plan.status = Some(status);
        return plan;
    }
    let pause_on_failure = spec.failure_policy.type_ == FAILURE_PAUSE && counts.failed > 0;
    if !spec.paused && status.phase == PHASE_PAUSED && !pause_on_failure {
        status.phase = PHASE_RUNNING.into();
        plan.events.push(JobEvent::normal(
            "Continue",
            "continue to process job".into(),
        ));
    }

    let mut failure: Option<(String, String)> = None;
    if counts.failed > 0 {
        match spec.failure_policy.type_.as_str() {
            FAILURE_PAUSE => {
                // Upstream pauses in memory only (the write is a status update); the job stays
                // paused for as long as a failed Pod is there. The Event is told once, on entry.
                if status.phase != PHASE_PAUSED {
                    plan.events.push(JobEvent::warning(
                        "Paused",
                        "job is paused, due to failed pod".into(),
                    ));
                }
                status.phase = PHASE_PAUSED.into();
                plan.status = Some(status);
                return plan;
            }
            FAILURE_CONTINUE => {}
            // FailFast, the default.
            _ => {
                failure = Some((
                    "failed pod is found".into(),
                    format!(
                        "failure policy is FailurePolicyType{FAILURE_FAIL_FAST} and failed pod is found"
                    ),
                ));
            }
        }
    }
    if failure.is_none()
        && let Some(deadline) = deadline
        && now >= deadline
    {
        failure = Some((
            "DeadlineExceeded".into(),
            format!("Job {namespace}/{name} was active longer than specified deadline"),
        ));
    }

    if let Some((reason, message)) = failure {
        fail(job, job_pods, status, (&reason, message), now, &mut plan);
        return plan;
    }

    for pod in &placement.misplaced {
        if count_pod(pod, spec.failure_policy.restart_limit) == PodCount::Active {
            status.failed += 1;
            status.active -= 1;
        }
        plan.delete.push(pod);
    }
    if job.metadata.deletion_timestamp.is_none() && !placement.needs_pod.is_empty() {
        create_within_parallelism(job, desired, placement, &mut status, &mut plan);
    }

    if !never && is_complete(placement, spec.failure_policy.restart_limit) {
        let message = format!(
            "Job completed, {} pods succeeded, {} pods failed",
            status.succeeded, status.failed
        );
        status.phase = PHASE_COMPLETED.into();
        status
            .conditions
            .push(condition(CONDITION_COMPLETE, message, now));
        status.completion_time = Some(Time(now));
        plan.requeue_after = ttl_requeue(job);
        plan.events.push(JobEvent::normal(
            "JobComplete",
            format!(
                "Job {namespace}/{name} is completed, {} pods succeeded, {} pods failed",
                status.succeeded, status.failed
            ),
        ));
    }
    plan.status = Some(status);
    plan
}

/// Upstream `isJobComplete`: some node fits, and every fitting node has a Pod that is no longer
/// active. Unlike upstream, a Pod counted failed by `restartLimit` is finished too: an OnFailure
/// Pod restarting forever would otherwise keep a `Continue` job from ever completing.
fn is_complete(placement: &Placement<'_>, restart_limit: i32) -> bool {
    !placement.desired.is_empty()
        && placement.desired.values().all(|pod| {
            pod.is_some_and(|p| {
                pods::is_terminating(p) || count_pod(p, restart_limit) != PodCount::Active
            })
        })
}

/// TTL + 1 s, so the next reconcile is past it (upstream `finishJob`).
fn ttl_requeue(job: &BroadcastJob) -> Option<Duration> {
    job.spec
        .completion_policy
        .ttl_seconds_after_finished
        .map(|ttl| Duration::from_secs(u64::try_from(ttl).unwrap_or_default() + 1))
}

#[cfg(test)]
mod tests;
