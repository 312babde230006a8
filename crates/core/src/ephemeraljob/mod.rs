//! EphemeralJob's decisions, as pure functions (upstream `pkg/controller/ephemeraljob`): which Pods
//! a job works on, which of them get its ephemeral containers now, the state of each Pod, and the
//! job's status.
//!
//! - Targets: the active Pods of the job's namespace its selector matches, oldest first (then by
//!   name); a Pod that has an ephemeral container of one of the template's names which this job did
//!   not create is skipped; at most `replicas` of them.
//! - A job's containers carry the env `KRUISE_EJOB_ID=<job uid>`: that is how it knows its own.
//! - Injection: targets without the job's containers, at most `parallelism` (default 1) minus the
//!   Pods whose containers are in progress.
//! - A Pod's state from its ephemeral container statuses of the template's names: Failed when one
//!   failed (non-zero exit, or `RunContainerError`), Succeeded when all exited 0, else Running when
//!   one runs, Waiting when one waits.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kruise_api::ephemeraljob::{
    self as ej, EphemeralJob, EphemeralJobCondition, EphemeralJobStatus, container_name,
};
use kruise_api::validation::{selector_is_empty, selector_matches};
use serde_json::{Value, json};

/// The state of one target Pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodState {
    Succeeded,
    Failed,
    Running,
    Waiting,
    Unknown,
}

fn template_names(job: &EphemeralJob) -> Vec<&str> {
    job.spec
        .template
        .ephemeral_containers
        .iter()
        .map(container_name)
        .collect()
}

fn uid(job: &EphemeralJob) -> &str {
    job.metadata.uid.as_deref().unwrap_or_default()
}

/// Whether an ephemeral container (JSON of a core `EphemeralContainer`) was created by `job`.
pub fn created_by(job: &EphemeralJob, container: &Value) -> bool {
    container
        .get("env")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|env| {
            env.get("name").and_then(Value::as_str) == Some(ej::ENV_JOB_ID)
                && env.get("value").and_then(Value::as_str) == Some(uid(job))
        })
}

/// The Pod's ephemeral containers as JSON.
fn pod_ephemeral(pod: &Pod) -> Vec<Value> {
    pod.spec
        .as_ref()
        .and_then(|s| s.ephemeral_containers.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| serde_json::to_value(c).ok())
        .collect()
}

/// Whether the Pod has an ephemeral container of a template name (`exists`), and whether the first
/// such one is the job's (`owned`).
pub fn contains(job: &EphemeralJob, pod: &Pod) -> (bool, bool) {
    let names = template_names(job);
    let existing = pod_ephemeral(pod);
    match existing.iter().find(|c| names.contains(&container_name(c))) {
        Some(found) => (true, created_by(job, found)),
        None => (false, false),
    }
}

/// Whether a Pod is active (Kubernetes' `IsPodActive`): not Succeeded or Failed, not being deleted.
pub fn active(pod: &Pod) -> bool {
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default();
    phase != "Succeeded" && phase != "Failed" && pod.metadata.deletion_timestamp.is_none()
}

/// Whether the job's selector selects `pod` (an empty or missing selector selects nothing, as
/// upstream's).
pub fn selects(job: &EphemeralJob, pod: &Pod) -> bool {
    let Some(selector) = job.spec.selector.as_ref() else {
        return false;
    };
    if selector_is_empty(selector) || pod.metadata.namespace != job.metadata.namespace {
        return false;
    }
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    selector_matches(selector, &labels)
}

/// The Pods the job works on, from the Pods of its namespace.
pub fn targets<'a>(job: &EphemeralJob, pods: &[&'a Pod]) -> Vec<&'a Pod> {
    let mut matching: Vec<&Pod> = pods
        .iter()
        .copied()
        .filter(|p| selects(job, p) && active(p))
        .collect();
    matching.sort_by(|a, b| {
        let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
        created(a)
            .cmp(&created(b))
            .then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
    let names = template_names(job);
    let limit = job
        .spec
        .replicas
        .map_or(usize::MAX, |r| usize::try_from(r).unwrap_or(0));
    matching
        .into_iter()
        .filter(|pod| {
            !pod_ephemeral(pod)
                .iter()
                .any(|c| names.contains(&container_name(c)) && !created_by(job, c))
        })
        .take(limit)
        .collect()
}

/// The Pods among `targets` to inject into now: those without the job's containers, at most
/// `parallelism` minus the Pods whose containers are in progress (injected and not finished:
/// running, waiting, or not reported yet). Upstream subtracts only the running ones, so a container
/// the kubelet has not started yet frees its slot; here it holds it.
pub fn to_inject<'a>(job: &EphemeralJob, targets: &[&'a Pod]) -> Vec<&'a Pod> {
    if job.spec.template.ephemeral_containers.is_empty() {
        return Vec::new();
    }
    let running = targets
        .iter()
        .filter(|pod| {
            contains(job, pod).0
                && !matches!(pod_state(job, pod), PodState::Succeeded | PodState::Failed)
        })
        .count();
    let running = i32::try_from(running).unwrap_or(i32::MAX);
    let missing: Vec<&Pod> = targets
        .iter()
        .copied()
        .filter(|pod| !contains(job, pod).0)
        .collect();
    let parallelism = job.spec.parallelism.unwrap_or(ej::DEFAULT_PARALLELISM);
    let slots = parallelism
        .min(i32::try_from(missing.len()).unwrap_or(i32::MAX))
        .saturating_sub(running);
    missing
        .into_iter()
        .take(usize::try_from(slots).unwrap_or(0))
        .collect()
}

/// The ephemeral containers to add to a Pod: the template's, each with `KRUISE_EJOB_ID`.
pub fn injected_containers(job: &EphemeralJob) -> Vec<Value> {
    job.spec
        .template
        .ephemeral_containers
        .iter()
        .map(|container| {
            let mut container = container.clone();
            if let Some(object) = container.as_object_mut() {
                let env = object.entry("env").or_insert_with(|| json!([]));
                if let Some(list) = env.as_array_mut() {
                    list.push(json!({"name": ej::ENV_JOB_ID, "value": uid(job)}));
                }
            }
            container
        })
        .collect()
}

/// The state of one ephemeral container (upstream's `parseEphemeralContainerStatus`).
fn container_state(status: &ContainerStatus) -> PodState {
    let state = status.state.clone().unwrap_or_default();
    if let Some(terminated) = &state.terminated {
        if terminated.exit_code != 0 {
            return PodState::Failed;
        }
        if terminated.finished_at.is_some() {
            return PodState::Succeeded;
        }
    }
    if state.running.is_some() {
        return PodState::Running;
    }
    if let Some(waiting) = &state.waiting {
        if waiting.reason.as_deref() == Some("RunContainerError") {
            return PodState::Failed;
        }
        return PodState::Waiting;
    }
    PodState::Unknown
}

/// The state of a target Pod from its ephemeral container statuses.
pub fn pod_state(job: &EphemeralJob, pod: &Pod) -> PodState {
    let names = template_names(job);
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.ephemeral_container_statuses.as_ref())
        .map(Vec::as_slice)
        .unwrap_or_default();
    let (mut succeeded, mut running, mut waiting) = (0usize, 0usize, 0usize);
    for status in statuses.iter().filter(|s| names.contains(&s.name.as_str())) {
        match container_state(status) {
            PodState::Failed => return PodState::Failed,
            PodState::Succeeded => succeeded += 1,
            PodState::Running => running += 1,
            PodState::Waiting => waiting += 1,
            PodState::Unknown => {}
        }
    }
    let wanted = {
        let mut unique = names.clone();
        unique.sort_unstable();
        unique.dedup();
        unique.len()
    };
    if succeeded > 0 && succeeded == wanted {
        PodState::Succeeded
    } else if running > 0 {
        PodState::Running
    } else if waiting > 0 {
        PodState::Waiting
    } else {
        PodState::Unknown
    }
}

/// Sets the True condition `type_`, keeping its times when reason and message are unchanged (so a
/// pass that changes nothing writes nothing; upstream rewrites the times on every pass).
fn set_condition(
    conditions: &mut Vec<EphemeralJobCondition>,
    type_: &str,
    reason: &str,
    message: &str,
    now: &Time,
) {
    let fresh = EphemeralJobCondition {
        type_: type_.into(),
        status: "True".into(),
        last_probe_time: Some(now.clone()),
        last_transition_time: Some(now.clone()),
        reason: reason.into(),
        message: message.into(),
    };
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(existing)
            if existing.status == "True"
                && existing.reason == reason
                && existing.message == message => {}
        Some(existing) => *existing = fresh,
        None => conditions.push(fresh),
    }
}

/// Whether the job ran longer than `activeDeadlineSeconds` since `startTime`.
pub fn past_deadline(job: &EphemeralJob, start: Option<&Time>, now: Timestamp) -> bool {
    match (job.spec.active_deadline_seconds, start) {
        (Some(seconds), Some(start)) => now.as_second() - start.0.as_second() >= seconds,
        _ => false,
    }
}

/// The status after a pass over `targets` (upstream's `calculateStatus`), from the previous one.
pub fn status(
    job: &EphemeralJob,
    targets: &[&Pod],
    previous: &EphemeralJobStatus,
    now: Timestamp,
) -> EphemeralJobStatus {
    let now_time = Time(now);
    let mut status = previous.clone();
    if status.start_time.is_none() {
        status.start_time = Some(now_time.clone());
    }
    if status.conditions.is_empty() {
        status.conditions.push(EphemeralJobCondition {
            type_: ej::CONDITION_INITIALIZED.into(),
            status: "True".into(),
            last_probe_time: Some(now_time.clone()),
            last_transition_time: Some(now_time.clone()),
            reason: ej::CONDITION_INITIALIZED.into(),
            message: String::new(),
        });
    }
    status.matches = i32::try_from(targets.len()).unwrap_or(i32::MAX);
    let (mut succeeded, mut failed, mut running, mut waiting) = (0, 0, 0, 0);
    for pod in targets {
        match pod_state(job, pod) {
            PodState::Succeeded => succeeded += 1,
            PodState::Failed => failed += 1,
            PodState::Running => running += 1,
            PodState::Waiting => waiting += 1,
            PodState::Unknown => {}
        }
    }
    status.succeeded = succeeded;
    status.failed = failed;
    status.running = running;
    status.waiting = waiting;
    // `replicas` above the number of matching Pods does not apply (upstream's documented rule).
    let replicas = job
        .spec
        .replicas
        .map_or(status.matches, |r| r.min(status.matches));
    let namespaced = format!(
        "{}/{}",
        job.metadata.namespace.as_deref().unwrap_or_default(),
        job.metadata.name.as_deref().unwrap_or_default()
    );
    if status.matches == 0 {
        status.phase = ej::PHASE_WAITING.into();
        set_condition(
            &mut status.conditions,
            ej::CONDITION_MATCHED_EMPTY,
            "MatchEmpty",
            "job match no pods",
            &now_time,
        );
    } else if succeeded == replicas && succeeded > 0 {
        status.completion_time = Some(now_time.clone());
        status.phase = ej::PHASE_SUCCEEDED.into();
        set_condition(
            &mut status.conditions,
            ej::CONDITION_SUCCEEDED,
            "JobSucceeded",
            "job success to run all tasks",
            &now_time,
        );
    } else if running > 0 {
        status.phase = ej::PHASE_RUNNING.into();
    } else if failed == replicas {
        status.completion_time = Some(now_time.clone());
        status.phase = ej::PHASE_FAILED.into();
        set_condition(
            &mut status.conditions,
            ej::CONDITION_FAILED,
            "JobFailed",
            "job failed to run all tasks",
            &now_time,
        );
    } else if waiting == replicas {
        status.phase = ej::PHASE_WAITING.into();
    } else {
        status.phase = ej::PHASE_UNKNOWN.into();
    }
    if job.spec.paused {
        status.phase = ej::PHASE_PAUSED.into();
    }
    if failed > 0 {
        set_condition(
            &mut status.conditions,
            ej::CONDITION_FAILED,
            "CreateFailed",
            &format!("EphemeralJob {namespaced} failed to create ephemeral container"),
            &now_time,
        );
    }
    let unfinished =
        [ej::PHASE_WAITING, ej::PHASE_UNKNOWN, ej::PHASE_RUNNING].contains(&status.phase.as_str());
    if unfinished && past_deadline(job, status.start_time.as_ref(), now) {
        status.completion_time = Some(now_time.clone());
        status.phase = ej::PHASE_FAILED.into();
        set_condition(
            &mut status.conditions,
            ej::CONDITION_FAILED,
            "DeadlineExceeded",
            &format!("EphemeralJob {namespaced} was active longer than specified deadline"),
            &now_time,
        );
    }
    if job.spec.template.ephemeral_containers.is_empty() {
        status.phase = ej::PHASE_ERROR.into();
        set_condition(
            &mut status.conditions,
            ej::CONDITION_ERROR,
            "Error",
            "job spec invalid fields.",
            &now_time,
        );
    }
    status
}

/// How long until a finished job (with a completion time) is deleted: `ttlSecondsAfterFinished`
/// (default 1800) after it finished; zero when due.
pub fn ttl_left(job: &EphemeralJob, completed: &Time, now: Timestamp) -> Duration {
    let ttl = job
        .spec
        .ttl_seconds_after_finished
        .map_or(ej::DEFAULT_TTL_SECONDS, i64::from);
    let left = completed.0.as_second() + ttl - now.as_second();
    Duration::from_secs(u64::try_from(left).unwrap_or(0))
}

/// When an unfinished job with a deadline must be looked at again.
pub fn deadline_left(job: &EphemeralJob, start: &Time, now: Timestamp) -> Option<Duration> {
    let seconds = job.spec.active_deadline_seconds?;
    let left = start.0.as_second() + seconds - now.as_second();
    Some(Duration::from_secs(u64::try_from(left).unwrap_or(0)))
}

#[cfg(test)]
mod tests;
