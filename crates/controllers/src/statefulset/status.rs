//! Advanced StatefulSet status from its Pods and claims (upstream's `StatefulSetStatus` counters),
//! plus kruise-rs's `Progressing` and `Available` conditions (upstream ASTS has none), so `kubectl
//! wait --for=condition=Available` and GitOps health checks work. Pure.
//!
//! `Progressing` has no `lastUpdateTime` in the StatefulSet condition type, so its
//! `lastTransitionTime` is stamped whenever the rollout makes progress (its message, which counts
//! updated and available Pods, changes): the progress deadline runs from the last progress, as a
//! Deployment's does.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSetCondition;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kruise_api::statefulset::v1beta1::{
    CONDITION_FAILED_CREATE_POD, CONDITION_FAILED_UPDATE_POD, StatefulSet, StatefulSetStatus,
    UPDATE_ON_DELETE,
};
use kruise_core::revision::pod_label_matches_revision;
use kruise_core::rollout::statefulset::{
    self as plan, Blocked, complete_rolling_update, min_ready_seconds, ordinal_of, replica_status,
};

use super::newpod::volume_claim_status;

pub use crate::conditions::{
    ANNOTATION_PROGRESS_DEADLINE, CONDITION_AVAILABLE, CONDITION_PROGRESSING,
    DEFAULT_PROGRESS_DEADLINE_SECONDS, REASON_MIN_AVAILABLE, REASON_MIN_UNAVAILABLE,
    REASON_PARTITION_AVAILABLE, REASON_PROGRESS_DEADLINE_EXCEEDED,
};
pub const REASON_AVAILABLE: &str = "StatefulSetAvailable";
pub const REASON_PAUSED: &str = "StatefulSetPaused";
pub const REASON_UPDATED: &str = "StatefulSetUpdated";

/// What the status is computed from.
pub struct Inputs<'a> {
    pub set: &'a StatefulSet,
    /// Every Pod the set owns.
    pub pods: &'a [Pod],
    /// The set's claims by name.
    pub claims: &'a BTreeMap<String, &'a PersistentVolumeClaim>,
    pub current_revision: &'a str,
    pub update_revision: &'a str,
    pub collision_count: Option<i32>,
    pub label_selector: String,
    /// OrderedReady is waiting on this Pod.
    pub blocked: Option<&'a Blocked>,
    /// Why creating a Pod failed this sync (`FailedCreatePod`).
    pub failed_create: Option<String>,
    /// Why updating a Pod failed or was refused this sync (`FailedUpdatePod`).
    pub failed_update: Option<String>,
    pub now: Timestamp,
}

/// The new status, and when to look again because of it (the progress deadline).
pub struct Computed {
    pub status: StatefulSetStatus,
    pub requeue: Option<Duration>,
}

/// The progress deadline the set asks for through [`ANNOTATION_PROGRESS_DEADLINE`]; `None` when
/// it is turned off (`"0"` or a negative value).
pub fn progress_deadline(set: &StatefulSet) -> Option<i64> {
    crate::conditions::progress_deadline(&set.metadata)
}

pub fn compute(inputs: &Inputs<'_>) -> Computed {
    let set = inputs.set;
    let name = set.metadata.name.as_deref().unwrap_or_default();
    let old = set.status.clone().unwrap_or_default();
    let min_ready = min_ready_seconds(&set.spec);
    let mut counts = replica_status(
        name,
        inputs.pods,
        min_ready,
        inputs.current_revision,
        inputs.update_revision,
        inputs.now,
    );
    let current_revision = complete_rolling_update(
        &set.spec,
        &mut counts,
        inputs.current_revision,
        inputs.update_revision,
    );
    let ordinals: Vec<i32> = inputs
        .pods
        .iter()
        .filter_map(|p| ordinal_of(name, p.metadata.name.as_deref()?))
        .collect();
    let mut status = StatefulSetStatus {
        observed_generation: set.metadata.generation.unwrap_or(0),
        replicas: counts.replicas,
        ready_replicas: counts.ready_replicas,
        available_replicas: counts.available_replicas,
        current_replicas: counts.current_replicas,
        updated_replicas: counts.updated_replicas,
        updated_ready_replicas: counts.updated_ready_replicas,
        updated_available_replicas: counts.updated_available_replicas,
        current_revision,
        update_revision: inputs.update_revision.to_owned(),
        collision_count: Some(inputs.collision_count.unwrap_or(0)),
        conditions: old.conditions.clone(),
        label_selector: inputs.label_selector.clone(),
        volume_claims: volume_claim_status(set, &ordinals, inputs.claims),
    };
    for (type_, failure) in [
        (CONDITION_FAILED_CREATE_POD, &inputs.failed_create),
        (CONDITION_FAILED_UPDATE_POD, &inputs.failed_update),
    ] {
        match failure {
            Some(message) => set_condition(
                &mut status,
                condition(type_, "True", "", message.clone(), inputs.now),
                false,
            ),
            None => status.conditions.retain(|c| c.type_ != type_),
        }
    }
    let requeue = health(inputs, &mut status);
    Computed { status, requeue }
}

/// Sets a condition. The transition time is kept while the status stays, unless `restamp`
/// (progress was made).
fn set_condition(status: &mut StatefulSetStatus, new: StatefulSetCondition, restamp: bool) {
    crate::conditions::set_condition(&mut status.conditions, new, restamp);
}

fn condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    now: Timestamp,
) -> StatefulSetCondition {
    crate::conditions::WorkloadCondition::build(type_, status, reason, message, now)
}

/// The `Available` and `Progressing` conditions; returns when the progress deadline falls due.
fn health(inputs: &Inputs<'_>, status: &mut StatefulSetStatus) -> Option<Duration> {
    let set = inputs.set;
    let now = inputs.now;
    let desired = set.spec.replicas.unwrap_or(1).max(0);
    let max_unavailable = plan::max_unavailable(&set.spec).unwrap_or(1);
    let min_available = (i64::from(desired) - max_unavailable).max(0);
    let (state, reason) = if i64::from(status.available_replicas) >= min_available {
        ("True", REASON_MIN_AVAILABLE)
    } else {
        ("False", REASON_MIN_UNAVAILABLE)
    };
    set_condition(
        status,
        condition(
            CONDITION_AVAILABLE,
            state,
            reason,
            format!(
                "{} of {desired} replicas available (at least {min_available} required)",
                status.available_replicas
            ),
            now,
        ),
        false,
    );

    let Some(deadline) = progress_deadline(set) else {
        status
            .conditions
            .retain(|c| c.type_ != CONDITION_PROGRESSING);
        return None;
    };
    let rolling = set.spec.update_strategy.rolling_update.as_ref();
    let on_delete = set.spec.update_strategy.type_ == UPDATE_ON_DELETE;
    let paused = rolling.is_some_and(|r| r.paused);
    let partition = if on_delete {
        0
    } else {
        rolling
            .and_then(|r| r.partition)
            .unwrap_or(0)
            .clamp(0, desired)
    };
    let expected_updated = desired - partition;
    let complete = pod_label_matches_revision(&status.current_revision, &status.update_revision)
        && status.replicas == desired
        && status.updated_available_replicas == desired
        && status.available_replicas == desired;
    let partition_done = partition > 0
        && status.replicas == desired
        && status.updated_available_replicas >= expected_updated
        && status.available_replicas == desired;
    let progress = format!(
        "{} of {desired} replicas updated, {} updated and available",
        status.updated_replicas, status.updated_available_replicas
    );
    let prior = status
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_PROGRESSING)
        .cloned();
    let exceeded = prior.as_ref().is_some_and(|c| {
        c.reason.as_deref() == Some(REASON_PROGRESS_DEADLINE_EXCEEDED)
            && c.message.as_deref().is_some_and(|m| m.contains(&progress))
            || c.reason.as_deref() == Some(REASON_UPDATED)
                && c.message
                    .as_deref()
                    .is_some_and(|m| m.starts_with(&progress))
                && c.last_transition_time
                    .as_ref()
                    .is_some_and(|t| t.0 + SignedDuration::from_secs(deadline) < now)
    });
    let waiting = inputs.blocked.map(|b| format!("; {b}")).unwrap_or_default();
    let (state, reason, message) = if complete {
        (
            "True",
            REASON_AVAILABLE,
            "StatefulSet is available".to_owned(),
        )
    } else if paused {
        (
            "True",
            REASON_PAUSED,
            format!("StatefulSet is paused: {progress}"),
        )
    } else if partition_done {
        (
            "True",
            REASON_PARTITION_AVAILABLE,
            format!("StatefulSet has been paused due to partition ready: {progress}"),
        )
    } else if exceeded {
        (
            "False",
            REASON_PROGRESS_DEADLINE_EXCEEDED,
            format!(
                "StatefulSet revision {} has timed out progressing: {progress}{waiting}",
                status.update_revision
            ),
        )
    } else {
        ("True", REASON_UPDATED, format!("{progress}{waiting}"))
    };
    // Progress restamps the condition: its counts changed while still progressing.
    let restamp = reason == REASON_UPDATED
        && prior.as_ref().is_some_and(|c| {
            c.reason.as_deref() == Some(REASON_UPDATED)
                && !c
                    .message
                    .as_deref()
                    .is_some_and(|m| m.starts_with(&progress))
        });
    set_condition(
        status,
        condition(CONDITION_PROGRESSING, state, reason, message, now),
        restamp,
    );
    if reason != REASON_UPDATED {
        return None;
    }
    let since = status
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_PROGRESSING)?
        .last_transition_time
        .as_ref()?
        .0;
    let due = since + SignedDuration::from_secs(deadline + 1);
    Duration::try_from(due.duration_since(now))
        .ok()
        .or(Some(Duration::from_secs(1)))
}

/// Whether the new status differs from the stored one (conditions compared without times).
pub fn changed(old: Option<&StatefulSetStatus>, new: &StatefulSetStatus) -> bool {
    let Some(old) = old else {
        return true;
    };
    let strip = |s: &StatefulSetStatus| {
        let mut s = s.clone();
        let conditions = crate::conditions::timeless(&s.conditions);
        s.conditions.clear();
        (serde_json::to_value(&s).unwrap_or_default(), conditions)
    };
    strip(old) != strip(new)
}

#[cfg(test)]
mod tests;
