//! The UnitedDeployment status (upstream `uniteddeployment_controller.go` `updateStatus`), computed
//! from what the reconcile observed and did.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kruise_api::uniteddeployment::v1beta1::{
    CONDITION_SUBSET_FAILURE, CONDITION_SUBSET_PROVISIONED, CONDITION_SUBSET_UPDATED,
    CONDITION_UNITED_DEPLOYMENT_UPDATED, UnitedDeployment, UnitedDeploymentCondition,
    UnitedDeploymentStatus, UnitedDeploymentSubsetStatus,
};

use k8s_openapi::api::core::v1::Pod;
use kruise_api::uniteddeployment::v1beta1::UnitedDeploymentSubsetCondition;
use kruise_core::rollout::uniteddeployment::{
    self as planner, SUBSET_CONDITION_UPDATED, SubsetProgress, SubsetReservation,
};

use super::observe::Observed;

/// Condition types beyond OpenKruise, so that `kubectl wait` and GitOps health checks work.
pub(crate) const CONDITION_PROGRESSING: &str = "Progressing";
pub(crate) const CONDITION_AVAILABLE: &str = "Available";

/// What provisioning and updating the subsets came to.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    /// Subsets created.
    pub(crate) created: usize,
    /// Some subset was created or deleted.
    pub(crate) provisioned: bool,
    /// Creating or deleting failed.
    pub(crate) provision_error: Option<String>,
    /// Updating a subset failed.
    pub(crate) update_error: Option<String>,
    /// Every failure, for the reconcile's error.
    pub(crate) errors: Vec<String>,
    /// A subset workload moved since it was read (its update refused on the resourceVersion): no
    /// failure, its update is decided again on a fresh view, soon.
    pub(crate) raced: bool,
}

/// Adds a status for every subset of the topology that has none and drops the statuses of subsets
/// that left it.
pub(crate) fn init(status: &mut UnitedDeploymentStatus, ud: &UnitedDeployment) {
    let subsets = &ud.spec.topology.subsets;
    status
        .subset_statuses
        .retain(|s| subsets.iter().any(|t| t.name == s.name));
    for subset in subsets {
        if status.subset_status(&subset.name).is_none() {
            status.subset_statuses.push(UnitedDeploymentSubsetStatus {
                name: subset.name.clone(),
                ..Default::default()
            });
        }
    }
}

/// OpenKruise's `SetUnitedDeploymentCondition`: nothing changes when status and reason are the same;
/// with the same status the transition time is kept; the condition moves to the end of the list.
pub(crate) fn set_condition(
    status: &mut UnitedDeploymentStatus,
    type_: &str,
    value: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) {
    let current = status.conditions.iter().find(|c| c.type_ == type_).cloned();
    if let Some(c) = &current
        && c.status == value
        && c.reason == reason
    {
        return;
    }
    let last_transition_time = match &current {
        Some(c) if c.status == value => c.last_transition_time.clone(),
        _ => Some(Time(now)),
    };
    status.conditions.retain(|c| c.type_ != type_);
    status.conditions.push(UnitedDeploymentCondition {
        type_: type_.into(),
        status: value.into(),
        last_transition_time,
        reason: reason.into(),
        message: message.into(),
    });
}

/// `UnitedDeploymentUpdated`: False (`UnitedDeploymentRevisionUpdating`) while the current revision
/// is not the update revision, True (`UnitedDeploymentRevisionUpdated`) once it is; rewritten only when
/// its status flips.
pub(crate) fn set_updated_condition(
    status: &mut UnitedDeploymentStatus,
    current: &str,
    update: &str,
    now: Timestamp,
) {
    let value = if current == update { "True" } else { "False" };
    let old = status
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_UNITED_DEPLOYMENT_UPDATED);
    if old.is_some_and(|c| c.status == value) {
        return;
    }
    let (reason, message) = if value == "False" {
        (
            "UnitedDeploymentRevisionUpdating",
            format!("updating to revision {update}"),
        )
    } else {
        (
            "UnitedDeploymentRevisionUpdated",
            format!("updated to revision {update}"),
        )
    };
    status
        .conditions
        .retain(|c| c.type_ != CONDITION_UNITED_DEPLOYMENT_UPDATED);
    status.conditions.push(UnitedDeploymentCondition {
        type_: CONDITION_UNITED_DEPLOYMENT_UPDATED.into(),
        status: value.into(),
        last_transition_time: Some(Time(now)),
        reason: reason.into(),
        message,
    });
}

pub(crate) struct Inputs<'a> {
    pub(crate) ud: &'a UnitedDeployment,
    /// The status so far (subset statuses initialised, Schedulable and Updated conditions set).
    pub(crate) status: UnitedDeploymentStatus,
    pub(crate) observed: &'a BTreeMap<String, Observed>,
    pub(crate) next_replicas: &'a BTreeMap<String, i32>,
    pub(crate) next_partitions: &'a BTreeMap<String, i32>,
    pub(crate) current_revision: &'a str,
    pub(crate) update_revision: &'a str,
    pub(crate) outcome: &'a Outcome,
    /// Reservation mode: each subset's reserved Pods (empty otherwise).
    pub(crate) reservations: &'a BTreeMap<String, SubsetReservation>,
    pub(crate) now: Timestamp,
}

/// The status to write.
pub(crate) fn compute(inputs: Inputs<'_>) -> UnitedDeploymentStatus {
    let Inputs {
        ud,
        mut status,
        observed,
        next_replicas,
        next_partitions,
        current_revision,
        update_revision,
        outcome,
        reservations,
        now,
    } = inputs;
    match &outcome.provision_error {
        Some(error) => set_condition(
            &mut status,
            CONDITION_SUBSET_PROVISIONED,
            "False",
            "Error",
            &format!("fail to manage Subset provision: {error}"),
            now,
        ),
        None if outcome.provisioned => set_condition(
            &mut status,
            CONDITION_SUBSET_PROVISIONED,
            "True",
            "",
            "",
            now,
        ),
        None => {}
    }
    if outcome.provision_error.is_none() {
        match &outcome.update_error {
            Some(error) => set_condition(
                &mut status,
                CONDITION_SUBSET_UPDATED,
                "False",
                "Error",
                error,
                now,
            ),
            None => set_condition(&mut status, CONDITION_SUBSET_UPDATED, "True", "", "", now),
        }
    }

    status.replicas = 0;
    status.ready_replicas = 0;
    status.updated_replicas = 0;
    status.updated_ready_replicas = 0;
    status.reserved_pods = 0;
    for (name, seen) in observed {
        let reserved = reservations.get(name).map_or(0, |r| r.reserved_pods);
        // Reserved Pods are not counted: their substitutes are.
        status.replicas += seen.status_replicas - reserved;
        status.reserved_pods += reserved;
        status.ready_replicas += seen.ready_replicas;
        status.updated_replicas += seen.updated_replicas;
        status.updated_ready_replicas += seen.updated_ready_replicas;
        if let Some(subset) = status.subset_statuses.iter_mut().find(|s| &s.name == name) {
            subset.replicas = next_replicas.get(name).copied().unwrap_or(0);
            subset.ready_replicas = seen.ready_replicas;
            subset.partition = next_partitions.get(name).copied().unwrap_or(0);
            subset.reserved_pods = reserved;
            let pods: Vec<&Pod> = seen.pods.iter().map(|p| p.as_ref()).collect();
            let updated = planner::subset_updated_condition(&SubsetProgress {
                target: subset.replicas,
                partition: subset.partition,
                ready: seen.ready_replicas,
                updated: seen.updated_replicas,
                updated_ready: seen.updated_ready_replicas,
                pods: &pods,
                workload_failure: planner::workload_failure(&seen.object.data),
            });
            set_subset_updated(&mut subset.conditions, updated, now);
        }
    }
    if status.current_revision.is_empty() {
        status.current_revision = current_revision.to_string();
    }
    status.updated_revision = update_revision.to_string();
    if status.updated_revision != status.current_revision
        && status.updated_ready_replicas >= status.replicas
    {
        status.current_revision = status.updated_revision.clone();
    }
    // None of the four workload kinds reports a subset failure (as upstream's adapters).
    status
        .conditions
        .retain(|c| c.type_ != CONDITION_SUBSET_FAILURE);
    set_readiness_conditions(&mut status, ud.spec.replicas.unwrap_or(1), now);
    status.label_selector = ud
        .spec
        .selector
        .clone()
        .and_then(|s| kube::core::Selector::try_from(s).ok())
        .map(|s| s.to_string())
        .unwrap_or_default();
    if ud
        .spec
        .topology
        .schedule_strategy
        .should_reserve_unschedulable_pods()
    {
        status
            .label_selector
            .push_str(planner::STATUS_SELECTOR_SUFFIX);
    }
    status.observed_generation = ud.metadata.generation.unwrap_or(0);
    status
}

/// The subset's `Updated` condition: rewritten (with a new transition time) when status or reason
/// change, its message kept current otherwise.
fn set_subset_updated(
    conditions: &mut Vec<UnitedDeploymentSubsetCondition>,
    (value, reason, message): (String, String, String),
    now: Timestamp,
) {
    match conditions
        .iter_mut()
        .find(|c| c.type_ == SUBSET_CONDITION_UPDATED)
    {
        Some(c) if c.status == value && c.reason == reason => c.message = message,
        _ => planner::set_subset_condition(
            conditions,
            SUBSET_CONDITION_UPDATED,
            (value, reason, message),
            now,
        ),
    }
}

/// `Available` (all of spec.replicas Ready) and `Progressing` (True while the Pods move to the update
/// revision, reason `NewRevisionAvailable` once they all run it Ready), as a Deployment has them.
fn set_readiness_conditions(status: &mut UnitedDeploymentStatus, replicas: i32, now: Timestamp) {
    let counts = format!(
        "{} of {} Pods Ready, {} updated and Ready",
        status.ready_replicas, replicas, status.updated_ready_replicas
    );
    let available = status.ready_replicas >= replicas;
    let (value, reason) = if available {
        ("True", "MinimumReplicasAvailable")
    } else {
        ("False", "MinimumReplicasUnavailable")
    };
    set_condition(status, CONDITION_AVAILABLE, value, reason, &counts, now);
    let complete = status.current_revision == status.updated_revision
        && status.updated_ready_replicas >= replicas
        && status.replicas == replicas;
    let (reason, message) = if complete {
        (
            "NewRevisionAvailable",
            format!(
                "revision {} is available: {counts}",
                status.updated_revision
            ),
        )
    } else {
        (
            "RevisionUpdating",
            format!("updating to revision {}: {counts}", status.updated_revision),
        )
    };
    set_condition(status, CONDITION_PROGRESSING, "True", reason, &message, now);
    // Counts change on every step: keep the messages current without a new transition time.
    for c in status.conditions.iter_mut() {
        if c.type_ == CONDITION_AVAILABLE {
            c.message = counts.clone();
        } else if c.type_ == CONDITION_PROGRESSING {
            c.message = message.clone();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::SignedDuration;

    fn later(t: Timestamp, secs: i64) -> Timestamp {
        t.checked_add(SignedDuration::from_secs(secs)).unwrap_or(t)
    }

    #[test]
    fn conditions_follow_upstream_transition_rules() {
        let t0 = Timestamp::now();
        let mut status = UnitedDeploymentStatus::default();
        set_updated_condition(&mut status, "ud-1", "ud-1", t0);
        set_condition(
            &mut status,
            CONDITION_SUBSET_PROVISIONED,
            "True",
            "",
            "",
            t0,
        );
        // A new revision: Updated flips to False with the upstream reason and message.
        set_updated_condition(&mut status, "ud-1", "ud-2", later(t0, 5));
        let updated = status
            .conditions
            .iter()
            .find(|c| c.type_ == CONDITION_UNITED_DEPLOYMENT_UPDATED)
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            (
                updated.status.as_str(),
                updated.reason.as_str(),
                updated.message.as_str()
            ),
            (
                "False",
                "UnitedDeploymentRevisionUpdating",
                "updating to revision ud-2"
            )
        );
        assert_eq!(updated.last_transition_time, Some(Time(later(t0, 5))));
        // The same status and reason again changes nothing.
        set_condition(
            &mut status,
            CONDITION_SUBSET_PROVISIONED,
            "True",
            "",
            "",
            later(t0, 9),
        );
        let provisioned = status
            .conditions
            .iter()
            .find(|c| c.type_ == CONDITION_SUBSET_PROVISIONED)
            .cloned()
            .unwrap_or_default();
        assert_eq!(provisioned.last_transition_time, Some(Time(t0)));
        // Same status, other reason: rewritten, transition time kept, moved to the end.
        set_condition(
            &mut status,
            CONDITION_SUBSET_PROVISIONED,
            "True",
            "Again",
            "m",
            later(t0, 9),
        );
        let last = status.conditions.last().cloned().unwrap_or_default();
        assert_eq!(
            (last.type_.as_str(), last.reason.as_str()),
            (CONDITION_SUBSET_PROVISIONED, "Again")
        );
        assert_eq!(last.last_transition_time, Some(Time(t0)));
    }

    #[test]
    fn readiness_conditions() {
        let t0 = Timestamp::now();
        let mut status = UnitedDeploymentStatus {
            replicas: 4,
            ready_replicas: 3,
            updated_ready_replicas: 2,
            current_revision: "ud-1".into(),
            updated_revision: "ud-2".into(),
            ..Default::default()
        };
        set_readiness_conditions(&mut status, 4, t0);
        let get = |s: &UnitedDeploymentStatus, t: &str| {
            s.conditions
                .iter()
                .find(|c| c.type_ == t)
                .map(|c| (c.status.clone(), c.reason.clone()))
        };
        assert_eq!(
            get(&status, CONDITION_AVAILABLE),
            Some(("False".into(), "MinimumReplicasUnavailable".into()))
        );
        assert_eq!(
            get(&status, CONDITION_PROGRESSING),
            Some(("True".into(), "RevisionUpdating".into()))
        );
        status.ready_replicas = 4;
        status.updated_ready_replicas = 4;
        status.current_revision = "ud-2".into();
        set_readiness_conditions(&mut status, 4, later(t0, 3));
        assert_eq!(
            get(&status, CONDITION_AVAILABLE),
            Some(("True".into(), "MinimumReplicasAvailable".into()))
        );
        assert_eq!(
            get(&status, CONDITION_PROGRESSING),
            Some(("True".into(), "NewRevisionAvailable".into()))
        );
    }
}
