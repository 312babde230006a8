//! CloneSet status from its Pods (upstream `cloneset_status.go`). Pure.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kruise_api::cloneset::v1beta1::{
    CONDITION_PROGRESSING, CloneSet, CloneSetCondition, CloneSetStatus, REASON_AVAILABLE,
    REASON_PARTITION_AVAILABLE, REASON_PAUSED, REASON_PROGRESS_DEADLINE_EXCEEDED, REASON_UPDATED,
};
use kruise_core::pods;
use kruise_core::revision::pod_label_matches_revision;
use kruise_core::rollout::cloneset::partition_replicas;

/// What the status is computed from, besides the Pods.
pub struct Inputs<'a> {
    pub cs: &'a CloneSet,
    /// The CloneSet's active Pods.
    pub pods: &'a [Pod],
    pub current_revision: &'a str,
    pub update_revision: &'a str,
    pub collision_count: Option<i32>,
    pub label_selector: String,
    pub now: Timestamp,
}

/// The new status and when to look again because of it (a deadline or minReadySeconds).
pub struct Computed {
    pub status: CloneSetStatus,
    pub requeue: Option<Duration>,
}

/// Computes the status. Conditions other than Progressing (FailedScale, FailedUpdate) are kept from
/// the old status; the reconciler sets and clears them.
pub fn compute(inputs: &Inputs<'_>) -> Computed {
    let Inputs {
        cs,
        pods: all,
        current_revision,
        update_revision,
        now,
        ..
    } = *inputs;
    let min_ready = cs.spec.min_ready_seconds;
    let replicas = cs.spec.replicas.unwrap_or(1);
    let old = cs.status.clone().unwrap_or_default();

    let mut status = CloneSetStatus {
        observed_generation: cs.metadata.generation.unwrap_or(0),
        update_revision: update_revision.to_owned(),
        current_revision: current_revision.to_owned(),
        collision_count: inputs.collision_count,
        label_selector: inputs.label_selector.clone(),
        conditions: old.conditions.clone(),
        ..CloneSetStatus::default()
    };
    let mut requeue: Option<Duration> = None;
    for pod in all {
        let updated = pods::is_at_revision(pod, update_revision);
        let ready = pods::is_update_ready(pod, 0, now);
        let available = pods::is_available(pod, min_ready, now);
        status.replicas += 1;
        status.ready_replicas += i32::from(ready);
        status.available_replicas += i32::from(available);
        status.updated_replicas += i32::from(updated);
        status.updated_ready_replicas += i32::from(updated && ready);
        status.updated_available_replicas += i32::from(updated && available);
        // A ready Pod that is not yet available becomes so after minReadySeconds: look again then.
        if ready
            && !available
            && min_ready > 0
            && let Some(since) = pods::ready_since(pod)
        {
            let due = since + SignedDuration::from_secs(i64::from(min_ready) + 1);
            let wait = due.duration_since(now);
            if wait.is_positive() {
                requeue = min_duration(requeue, Duration::try_from(wait).ok());
            }
        }
    }
    status.expected_updated_replicas = match cs.spec.update_strategy.rolling_update.as_ref() {
        Some(r) => replicas - partition_replicas(r.partition.as_ref(), replicas).unwrap_or(0),
        None => replicas,
    };
    // The update becomes current once every Pod carries it (readiness not required).
    if status.updated_replicas == status.replicas && status.replicas == replicas {
        status.current_revision = update_revision.to_owned();
    }
    requeue = min_duration(requeue, progressing(cs, &mut status, now));
    Computed { status, requeue }
}

fn min_duration(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

fn find<'a>(status: &'a CloneSetStatus, type_: &str) -> Option<&'a CloneSetCondition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

/// Sets a condition: nothing changes when status and reason are the same; the transition time is
/// kept when only the reason changes.
pub fn set_condition(status: &mut CloneSetStatus, mut condition: CloneSetCondition) {
    if let Some(current) = find(status, &condition.type_) {
        if current.status == condition.status && current.reason == condition.reason {
            return;
        }
        if current.status == condition.status {
            condition.last_transition_time = current.last_transition_time.clone();
        }
    }
    status.conditions.retain(|c| c.type_ != condition.type_);
    status.conditions.push(condition);
}

/// Removes a condition.
pub fn remove_condition(status: &mut CloneSetStatus, type_: &str) {
    status.conditions.retain(|c| c.type_ != type_);
}

/// A condition stamped `now`.
pub fn condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    now: Timestamp,
) -> CloneSetCondition {
    CloneSetCondition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        last_update_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
        reason: reason.to_owned(),
        message,
    }
}

/// The Progressing condition (only with a progress deadline); returns when to look again for the
/// deadline.
fn progressing(cs: &CloneSet, status: &mut CloneSetStatus, now: Timestamp) -> Option<Duration> {
    let deadline = match cs.spec.progress_deadline_seconds {
        Some(d) if d != i32::MAX => d,
        _ => {
            remove_condition(status, CONDITION_PROGRESSING);
            return None;
        }
    };
    let replicas = cs.spec.replicas.unwrap_or(1);
    let available = pod_label_matches_revision(&status.current_revision, &status.update_revision)
        && status.replicas == replicas
        && status.updated_replicas == replicas
        && status.updated_available_replicas == replicas;
    let paused = cs
        .spec
        .update_strategy
        .rolling_update
        .as_ref()
        .is_some_and(|r| r.paused);
    let partition_available = status.expected_updated_replicas < replicas
        && status.expected_updated_replicas <= status.updated_available_replicas;
    let exceeded = find(status, CONDITION_PROGRESSING).is_some_and(|c| {
        c.reason == REASON_PROGRESS_DEADLINE_EXCEEDED
            || c.last_update_time
                .as_ref()
                .is_some_and(|t| t.0 + SignedDuration::from_secs(i64::from(deadline)) < now)
    });
    let (state, reason, message) = if available {
        ("True", REASON_AVAILABLE, "CloneSet is available".to_owned())
    } else if paused {
        ("True", REASON_PAUSED, "CloneSet is paused".to_owned())
    } else if partition_available {
        (
            "True",
            REASON_PARTITION_AVAILABLE,
            "CloneSet has been paused due to partition ready".to_owned(),
        )
    } else if exceeded {
        (
            "False",
            REASON_PROGRESS_DEADLINE_EXCEEDED,
            format!(
                "CloneSet revision {} has timed out progressing",
                status.update_revision
            ),
        )
    } else {
        ("True", REASON_UPDATED, "CloneSet is progressing".to_owned())
    };
    set_condition(
        status,
        condition(CONDITION_PROGRESSING, state, reason, message, now),
    );
    if reason != REASON_UPDATED {
        return None;
    }
    let since = find(status, CONDITION_PROGRESSING)?
        .last_update_time
        .as_ref()?
        .0;
    let due = since + SignedDuration::from_secs(i64::from(deadline) + 1);
    Duration::try_from(due.duration_since(now))
        .ok()
        .or(Some(Duration::from_secs(1)))
}

/// Whether the new status differs from the stored one in anything upstream writes for: the
/// counters, revisions, selector, generation, collision count, or a condition's status or reason.
pub fn changed(old: Option<&CloneSetStatus>, new: &CloneSetStatus) -> bool {
    let Some(old) = old else {
        return true;
    };
    let key = |s: &CloneSetStatus| {
        (
            s.observed_generation,
            s.replicas,
            s.ready_replicas,
            s.available_replicas,
            s.updated_replicas,
            s.updated_ready_replicas,
            s.updated_available_replicas,
            s.expected_updated_replicas,
            s.update_revision.clone(),
            s.current_revision.clone(),
            s.collision_count,
            s.label_selector.clone(),
        )
    };
    let conditions = |s: &CloneSetStatus| {
        let mut c: Vec<(String, String, String, String)> = s
            .conditions
            .iter()
            .map(|c| {
                (
                    c.type_.clone(),
                    c.status.clone(),
                    c.reason.clone(),
                    c.message.clone(),
                )
            })
            .collect();
        c.sort();
        c
    };
    key(old) != key(new) || conditions(old) != conditions(new)
}

#[cfg(test)]
mod tests;
