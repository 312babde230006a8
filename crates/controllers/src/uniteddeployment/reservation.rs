//! Adaptive scheduling with `reserveUnschedulablePods`: applies what
//! `kruise_core::rollout::uniteddeployment::subset_reservation` decides — each subset's `Schedulable`
//! condition, and the reserved label on the Pods whose state changed.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kruise_api::keys;
use kruise_api::uniteddeployment::v1beta1::{
    CONDITION_UNITED_DEPLOYMENT_UPDATED, SUBSET_CONDITION_SCHEDULABLE, UnitedDeploymentSpec,
    UnitedDeploymentStatus,
};
use kruise_core::rollout::uniteddeployment::{self as planner, SubsetReservation, TemplateKind};
use kube::ResourceExt;
use serde_json::{Value, json};

use super::observe::Observed;
use super::{Context, Error};
use crate::driver::writes::Writer;

/// Each observed subset's reservation (pure: nothing is written); its `Schedulable` condition is
/// set in `status`. Returns the reservations and when to look again; the Pods whose reserved label
/// must change are written by [`label_reserved`].
pub(crate) fn reserve(
    spec: &UnitedDeploymentSpec,
    observed: &BTreeMap<String, Observed>,
    status: &mut UnitedDeploymentStatus,
    update_revision: &str,
    now: Timestamp,
) -> (BTreeMap<String, SubsetReservation>, Option<Duration>) {
    let strategy = &spec.topology.schedule_strategy;
    let seconds = |s: i32| Duration::from_secs(u64::try_from(s).unwrap_or(0));
    let pending = seconds(strategy.reschedule_critical_seconds());
    let window = seconds(strategy.unschedulable_duration_seconds());
    let updating_since = status
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_UNITED_DEPLOYMENT_UPDATED && c.status == "False")
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0);
    let mut reservations = BTreeMap::new();
    let mut requeue: Option<Duration> = None;
    for (subset, seen) in observed {
        let Some(subset_status) = status
            .subset_statuses
            .iter_mut()
            .find(|s| &s.name == subset)
        else {
            continue;
        };
        let schedulable = subset_status
            .conditions
            .iter()
            .find(|c| c.type_ == SUBSET_CONDITION_SCHEDULABLE)
            .cloned();
        let pods: Vec<&Pod> = seen.pods.iter().map(|p| p.as_ref()).collect();
        let reservation = planner::subset_reservation(
            schedulable.as_ref(),
            &pods,
            update_revision,
            updating_since,
            pending,
            window,
            now,
        );
        planner::set_subset_condition(
            &mut subset_status.conditions,
            SUBSET_CONDITION_SCHEDULABLE,
            reservation.condition.clone(),
            now,
        );
        if let Some(after) = reservation.requeue_after {
            requeue = Some(requeue.map_or(after, |r| r.min(after)));
        }
        reservations.insert(subset.clone(), reservation);
    }
    (reservations, requeue)
}

/// Writes the reserved label each reservation decided on its subset's Pods.
pub(crate) async fn label_reserved(
    ctx: &Context,
    key: &str,
    observed: &BTreeMap<String, Observed>,
    reservations: &BTreeMap<String, SubsetReservation>,
) -> Result<(), Error> {
    for (subset, reservation) in reservations {
        if let Some(seen) = observed.get(subset) {
            label_pods(ctx, key, subset, &seen.pods, &reservation.labels).await?;
        }
    }
    Ok(())
}

/// After allocation: a subset that recovered and is given more replicas stays marked unschedulable.
pub(crate) fn mark_recovered(
    status: &mut UnitedDeploymentStatus,
    reservations: &BTreeMap<String, SubsetReservation>,
    observed: &BTreeMap<String, Observed>,
    next_replicas: &BTreeMap<String, i32>,
    now: Timestamp,
) {
    for (subset, reservation) in reservations {
        let (Some(seen), Some(next)) = (observed.get(subset), next_replicas.get(subset)) else {
            continue;
        };
        let Some(condition) =
            planner::recovered_and_scaled_up(reservation, seen.spec_replicas, *next)
        else {
            continue;
        };
        if let Some(subset_status) = status
            .subset_statuses
            .iter_mut()
            .find(|s| &s.name == subset)
        {
            planner::set_subset_condition(
                &mut subset_status.conditions,
                SUBSET_CONDITION_SCHEDULABLE,
                condition,
                now,
            );
        }
    }
}

/// The maxUnavailable a subset with reserved Pods rolls with (upstream's override): its Pods that are
/// not Ready plus its old Pods whose update timed out may all be unavailable, so they never block
/// the rolling update. `None` when the workload's own value stands.
pub(crate) fn max_unavailable_override(
    kind: TemplateKind,
    reservation: Option<&SubsetReservation>,
    seen: &Observed,
) -> Option<(&'static str, i32)> {
    let reservation = reservation.filter(|r| r.unschedulable)?;
    // The subset CloneSets are v1beta1 objects: their maxUnavailable is under `rollingUpdate`.
    let pointer = match kind {
        TemplateKind::CloneSet | TemplateKind::Deployment => kind.max_unavailable_pointer(),
        TemplateKind::StatefulSet | TemplateKind::AdvancedStatefulSet => return None,
    };
    let value = seen.spec_replicas - seen.ready_replicas + reservation.update_timeout_pods;
    // 0 would forbid any update (and with maxSurge 0 is invalid): keep the workload's own value.
    (value > 0).then_some((pointer, value))
}

/// Writes `apps.kruise.io/united-deployment-reserved-pod` on each Pod of `labels`.
async fn label_pods(
    ctx: &Context,
    key: &str,
    subset: &str,
    pods: &[std::sync::Arc<Pod>],
    labels: &[(String, bool)],
) -> Result<(), Error> {
    for (name, reserved) in labels {
        let Some(pod) = pods
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
        else {
            continue;
        };
        let namespace = pod.namespace().unwrap_or_default();
        let api = Writer::<Pod>::namespaced(ctx.writes.clone(), &namespace);
        let value = if *reserved { "true" } else { "false" };
        let mut patch =
            json!({"metadata": {"labels": {keys::LABEL_UNITED_DEPLOYMENT_RESERVED_POD: value}}});
        if let Some(uid) = &pod.metadata.uid {
            patch["metadata"]["uid"] = Value::String(uid.clone());
        }
        let labelled = api
            .merge_patch_unless_raced(name, &patch)
            .await
            .map_err(|source| Error::Kube {
                context: format!("labelling Pod {name} reserved={value}"),
                source,
            })?;
        if labelled {
            tracing::info!(uniteddeployment = key, subset, pod = %name, reserved, "labelled reserved Pod");
        }
    }
    Ok(())
}
