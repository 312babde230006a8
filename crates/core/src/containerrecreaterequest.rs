//! ContainerRecreateRequest decisions, pure: what the node's kruise-daemon does next for a request
//! given what the container runtime reports ([`daemon_step`]), and what the manager does with a request
//! given its Pod ([`manager_step`]), plus the `KruisePodReady` message list a request adds to and
//! removes from while it holds a Pod not-ready.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::jiff::Timestamp;
use kruise_api::containerrecreaterequest::{
    self as crr, ContainerRecreateRequest, ContainerRecreateState, SyncContainerStatus,
};
use kruise_api::keys;
use serde::{Deserialize, Serialize};

/// The newest container of one name in the Pod's sandbox, as the runtime reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObservedContainer {
    /// `<runtime>://<id>`, as the Pod status writes it.
    pub id: String,
    pub exited: bool,
    pub started_at: Option<Timestamp>,
    pub restart_count: i32,
}

fn seconds_between(earlier: Timestamp, later: Timestamp) -> f64 {
    later.duration_since(earlier).as_secs_f64()
}

/// The recreation state of every container of `request`, from the runtime's `observed` containers (by
/// name) at `now`. A container already Succeeded or Failed keeps its state. Otherwise it is Recreating
/// while stopped, or once its ID or restart count moved past the request's `statusContext`
/// (Succeeded once the Pod reports that very container ready and it has been started for
/// `minStartedSeconds`), and Pending while it still is the container the request was made for. With
/// `forceRecreate`, a container not yet killed by the request is Pending whatever it is doing.
pub fn current_states(
    request: &ContainerRecreateRequest,
    observed: &BTreeMap<String, ObservedContainer>,
    now: Timestamp,
) -> Vec<ContainerRecreateState> {
    let strategy = request.strategy();
    let min_started = f64::from(strategy.min_started_seconds);
    let synced = request.sync_container_statuses();
    let previous: BTreeMap<&str, &ContainerRecreateState> = request
        .status
        .iter()
        .flat_map(|s| s.container_recreate_states.iter())
        .map(|s| (s.name.as_str(), s))
        .collect();
    request
        .spec
        .containers
        .iter()
        .map(|c| {
            let before = previous.get(c.name.as_str()).copied();
            if let Some(done) =
                before.filter(|s| s.phase == crr::PHASE_SUCCEEDED || s.phase == crr::PHASE_FAILED)
            {
                return done.clone();
            }
            let killed = before.is_some_and(|s| s.is_killed);
            let state = |phase: &str, is_killed: bool, message: &str| ContainerRecreateState {
                name: c.name.clone(),
                phase: phase.to_owned(),
                message: message.to_owned(),
                is_killed,
            };
            let Some(container) = observed.get(&c.name) else {
                return state(crr::PHASE_PENDING, killed, "not found container on Node");
            };
            if container.exited {
                return state(crr::PHASE_RECREATING, killed, "");
            }
            if strategy.force_recreate && !killed {
                return state(crr::PHASE_PENDING, false, "");
            }
            let moved = c.status_context.as_ref().is_some_and(|ctx| {
                container.id != ctx.container_id || container.restart_count > ctx.restart_count
            });
            if !moved {
                return state(crr::PHASE_PENDING, killed, "");
            }
            let settled = synced.get(&c.name).is_some_and(|s| {
                s.ready
                    && s.container_id == container.id
                    && container
                        .started_at
                        .is_some_and(|at| seconds_between(at, now) > min_started)
            });
            let phase = if settled {
                crr::PHASE_SUCCEEDED
            } else {
                crr::PHASE_RECREATING
            };
            state(phase, killed, "")
        })
        .collect()
}

/// What the daemon does next for a request whose runtime view gave `states` (from [`current_states`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DaemonStep {
    /// Write these container states to the status.
    Patch(Vec<ContainerRecreateState>),
    /// Stop this container (index into the states), then write `states` with it Recreating and killed
    /// (or Failed with the error).
    Kill {
        index: usize,
        states: Vec<ContainerRecreateState>,
    },
    /// Complete the request (phase Completed, completionTime now).
    Complete,
    /// Nothing to do until something changes; look again after this long if set (minStartedSeconds).
    Wait(Option<Duration>),
}

/// The daemon's step for `request` once its Phase is Recreating (and the unready grace period, if
/// any, has passed), as OpenKruise's daemon: refresh the states first; a Failed container completes
/// the request unless the failure policy is Ignore; a Recreating one is marked killed and, with
/// `orderedRecreate`, holds back the ones after it; the first Pending container found on the node is
/// stopped, one per step; the request completes when every container has Succeeded or Failed.
pub fn daemon_step(
    request: &ContainerRecreateRequest,
    mut states: Vec<ContainerRecreateState>,
    observed: &BTreeMap<String, ObservedContainer>,
) -> DaemonStep {
    let strategy = request.strategy();
    let recorded = request
        .status
        .as_ref()
        .map(|s| s.container_recreate_states.as_slice())
        .unwrap_or_default();
    if recorded != states.as_slice() {
        return DaemonStep::Patch(states);
    }
    let mut completed = 0;
    let mut kill = None;
    for (index, state) in states.iter_mut().enumerate() {
        match state.phase.as_str() {
            crr::PHASE_SUCCEEDED => {
                completed += 1;
                continue;
            }
            crr::PHASE_FAILED => {
                completed += 1;
                if strategy.ignores_failures() {
                    continue;
                }
                return DaemonStep::Complete;
            }
            crr::PHASE_RECREATING => {
                state.is_killed = true;
                if strategy.ordered_recreate {
                    break;
                }
                continue;
            }
            _ => {}
        }
        if observed.contains_key(&state.name) {
            kill = Some(index);
        }
        break;
    }
    if let Some(index) = kill {
        return DaemonStep::Kill { index, states };
    }
    if recorded != states.as_slice() {
        return DaemonStep::Patch(states);
    }
    if completed == states.len() {
        return DaemonStep::Complete;
    }
    let min_started = strategy.min_started_seconds;
    DaemonStep::Wait(
        (min_started > 0).then(|| Duration::from_secs(min_started.unsigned_abs().into())),
    )
}

/// The order in which a daemon takes the requests of one Pod: Completed, then Recreating, then
/// Pending, then new ones; oldest first within a phase. Only the first unfinished one runs.
pub fn phase_weight(phase: &str) -> u8 {
    match phase {
        crr::PHASE_COMPLETED => 1,
        crr::PHASE_RECREATING => 2,
        crr::PHASE_PENDING => 3,
        _ => 4,
    }
}

/// What the manager does with a request.
#[derive(Clone, Debug, PartialEq)]
pub enum ManagerStep {
    /// Give the Pod its readiness back (remove this request's not-ready message) and drop the
    /// `unready-acquired` finalizer.
    ReleaseNotReady,
    /// Remove the `active` label of a finished request.
    Deactivate,
    /// Delete the request (ttlSecondsAfterFinished passed).
    Delete,
    /// Complete the request as failed with this message.
    Complete(&'static str),
    /// Write the containers' statuses annotation (JSON), then go on.
    SyncStatuses(String),
    /// Make the Pod not-ready for `unreadyGracePeriodSeconds` (then stamp the annotation).
    AcquireNotReady,
    /// Nothing now; look again after this long (if set).
    Requeue(Option<Duration>),
}

fn elapsed(since: Option<Timestamp>, now: Timestamp) -> Duration {
    since.map_or(Duration::ZERO, |t| {
        Duration::try_from(now.duration_since(t)).unwrap_or(Duration::ZERO)
    })
}

fn left(limit_seconds: i64, spent: Duration) -> Option<Duration> {
    let limit = Duration::from_secs(limit_seconds.max(0).unsigned_abs());
    limit.checked_sub(spent).filter(|d| !d.is_zero())
}

fn shorter(a: Option<Duration>, b: Duration) -> Option<Duration> {
    Some(a.map_or(b, |a| a.min(b)))
}

/// The statuses of the request's containers that run since the request was made (what the daemon
/// needs to tell Succeeded), as the annotation's JSON.
pub fn sync_statuses(request: &ContainerRecreateRequest, pod: &Pod) -> String {
    let created = request.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref());
    let synced: Vec<SyncContainerStatus> = request
        .spec
        .containers
        .iter()
        .filter_map(|c| statuses?.iter().find(|s| s.name == c.name))
        .filter(|s| {
            let started = s
                .state
                .as_ref()
                .and_then(|st| st.running.as_ref())
                .and_then(|r| r.started_at.as_ref())
                .map(|t| t.0);
            match (started, created) {
                (Some(started), Some(created)) => started >= created,
                (Some(_), None) => true,
                (None, _) => false,
            }
        })
        .map(|s| SyncContainerStatus {
            name: s.name.clone(),
            ready: s.ready,
            restart_count: s.restart_count,
            container_id: s.container_id.clone().unwrap_or_default(),
        })
        .collect();
    serde_json::to_string(&synced).unwrap_or_else(|_| "[]".to_owned())
}

/// The manager's step for `request`, whose Pod (same namespace, `spec.podName`) is `pod`, at `now`.
pub fn manager_step(
    request: &ContainerRecreateRequest,
    pod: Option<&Pod>,
    now: Timestamp,
) -> ManagerStep {
    let finalizers = request.metadata.finalizers.as_deref().unwrap_or_default();
    if request.is_finished() {
        if finalizers.iter().any(|f| f == crr::UNREADY_ACQUIRED) {
            return ManagerStep::ReleaseNotReady;
        }
        if request.metadata.deletion_timestamp.is_some() {
            return ManagerStep::Requeue(None);
        }
        if request.labels().contains_key(crr::LABEL_ACTIVE) {
            return ManagerStep::Deactivate;
        }
        let Some(ttl) = request.spec.ttl_seconds_after_finished else {
            return ManagerStep::Requeue(None);
        };
        let completed = request
            .status
            .as_ref()
            .and_then(|s| s.completion_time.as_ref())
            .map(|t| t.0);
        return match left(i64::from(ttl), elapsed(completed, now)) {
            None => ManagerStep::Delete,
            remaining => ManagerStep::Requeue(remaining),
        };
    }
    let pod_uid = request.labels().get(crr::LABEL_POD_UID);
    let live = pod
        .filter(|p| p.metadata.deletion_timestamp.is_none() && p.metadata.uid.as_ref() == pod_uid);
    let Some(pod) = live else {
        return ManagerStep::Complete("pod has gone");
    };
    let age = elapsed(
        request.metadata.creation_timestamp.as_ref().map(|t| t.0),
        now,
    );
    let mut requeue = None;
    if request.phase().is_empty() {
        match left(crr::RESPONSE_TIMEOUT_SECONDS, age) {
            None => return ManagerStep::Complete("daemon has not responded for a long time"),
            Some(d) => requeue = shorter(requeue, d),
        }
    }
    if let Some(deadline) = request.spec.active_deadline_seconds {
        match left(deadline, age) {
            None => {
                return ManagerStep::Complete("recreating has exceeded the activeDeadlineSeconds");
            }
            Some(d) => requeue = shorter(requeue, d),
        }
    }
    if request.phase() != crr::PHASE_RECREATING {
        return ManagerStep::Requeue(requeue);
    }
    let synced = sync_statuses(request, pod);
    if request.annotation(crr::ANNOTATION_SYNC_CONTAINER_STATUSES) != Some(synced.as_str()) {
        return ManagerStep::SyncStatuses(synced);
    }
    if request.strategy().unready_grace_period_seconds.is_some()
        && request
            .annotation(crr::UNREADY_ACQUIRED)
            .is_none_or(str::is_empty)
    {
        return ManagerStep::AcquireNotReady;
    }
    ManagerStep::Requeue(requeue)
}

/// How long the daemon still waits, after the Pod was made not-ready at `acquired` (RFC 3339), before
/// it stops containers; `Err` when the annotation cannot be read.
pub fn unready_wait(
    acquired: &str,
    grace_seconds: i64,
    now: Timestamp,
) -> Result<Duration, String> {
    let at: Timestamp = acquired
        .parse()
        .map_err(|e| format!("failed to parse unready time {acquired}: {e}"))?;
    Ok(left(grace_seconds, elapsed(Some(at), now)).unwrap_or(Duration::ZERO))
}

/// One entry of the `KruisePodReady` condition's message: who holds the Pod not-ready.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NotReadyMessage {
    pub user_agent: String,
    pub key: String,
}

impl NotReadyMessage {
    /// The message a ContainerRecreateRequest holds.
    pub fn for_request(namespace: &str, name: &str) -> Self {
        Self {
            user_agent: "ContainerRecreateRequest".to_owned(),
            key: format!("{namespace}/{name}"),
        }
    }
}

fn parse_messages(raw: Option<&str>) -> Vec<NotReadyMessage> {
    raw.filter(|r| !r.is_empty())
        .and_then(|r| serde_json::from_str(r).ok())
        .unwrap_or_default()
}

fn dump_messages(mut messages: Vec<NotReadyMessage>) -> String {
    messages.sort();
    serde_json::to_string(&messages).unwrap_or_else(|_| "[]".to_owned())
}

/// Whether the Pod has the `KruisePodReady` readiness gate.
pub fn has_readiness_gate(pod: &Pod) -> bool {
    crate::pods::has_readiness_gate(pod, keys::CONDITION_KRUISE_POD_READY)
}

fn readiness_condition(pod: &Pod) -> Option<&PodCondition> {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())?
        .iter()
        .find(|c| c.type_ == keys::CONDITION_KRUISE_POD_READY)
}

/// The `KruisePodReady` condition (status, message) with `message` added: status False. `None`
/// when the Pod has no readiness gate or already holds that message.
pub fn add_not_ready(pod: &Pod, message: &NotReadyMessage) -> Option<(&'static str, String)> {
    if !has_readiness_gate(pod) {
        return None;
    }
    let condition = readiness_condition(pod);
    let mut messages = parse_messages(condition.and_then(|c| c.message.as_deref()));
    if condition.is_some_and(|c| c.status == "False") && messages.contains(message) {
        return None;
    }
    if !messages.contains(message) {
        messages.push(message.clone());
    }
    Some(("False", dump_messages(messages)))
}

/// The `KruisePodReady` condition (status, message) with `message` removed: True once nobody holds
/// the Pod. `None` when there is nothing to remove.
pub fn remove_not_ready(pod: &Pod, message: &NotReadyMessage) -> Option<(&'static str, String)> {
    if !has_readiness_gate(pod) {
        return None;
    }
    let condition = readiness_condition(pod)?;
    let mut messages = parse_messages(condition.message.as_deref());
    let before = messages.len();
    messages.retain(|m| m != message);
    if messages.len() == before {
        return None;
    }
    let status = if messages.is_empty() { "True" } else { "False" };
    Some((status, dump_messages(messages)))
}

#[cfg(test)]
mod tests;
