//! Adaptive scheduling with `reserveUnschedulablePods` (OpenKruise's reservation mode of the Adaptive
//! subset strategy).
//!
//! Instead of deleting Pods a subset cannot start, the subset keeps them — labelled
//! `apps.kruise.io/united-deployment-reserved-pod=true` — and the allocator gives the replicas they were
//! meant to serve to other subsets, where temporary substitutes run. Once the reserved Pods are Ready
//! for `unschedulableDuration`, they leave the reserved state, the allocator hands their work back and
//! the substitutes are scaled away. Nothing is deleted to make room: a reserved Pod that later fits
//! starts where it is.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kruise_api::keys;
use kruise_api::uniteddeployment::v1beta1::{Subset, UnitedDeploymentSubsetCondition};

use super::{Existing, duration_between, jiff_span, pending_timeout};
use crate::pods;

/// Whether one Pod is reserved, and when its state may change.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PodReservation {
    pub reserved: bool,
    /// Look at the Pod again after this long (a deadline or the Ready window ends).
    pub check_after: Option<Duration>,
    /// A Pod at an old revision whose update has taken longer than rescheduleCriticalSeconds.
    pub update_timed_out: bool,
}

/// The reserved label as written on the Pod: `Some(true|false)`, or `None` when it has none.
pub fn reserved_label(pod: &Pod) -> Option<bool> {
    pods::label(pod, keys::LABEL_UNITED_DEPLOYMENT_RESERVED_POD).map(|v| v == "true")
}

/// Upstream's `CheckPodReallyInReservedStatus`.
///
/// - A Pod labelled reserved stays reserved until it runs the update revision and has been Ready for
///   `ready_for` (upstream passes unschedulableDuration).
/// - Otherwise a Pod at the update revision becomes reserved when the scheduler has rejected it for
///   longer than `pending_timeout` (rescheduleCriticalSeconds).
/// - A Pod at an old revision becomes reserved when the update (`updating_since`, the transition time
///   of the UnitedDeployment's `Updated=False` condition) has lasted longer than `pending_timeout` and
///   the Pod is not Ready. Upstream reserves every old-revision Pod then, Ready or not, so a partition
///   that holds Ready Pods at the old revision would get substitutes for Pods that serve; kruise-rs
///   substitutes only Pods that do not serve.
pub fn pod_reservation(
    pod: &Pod,
    update_revision: &str,
    updating_since: Option<Timestamp>,
    pending: Duration,
    ready_for: Duration,
    now: Timestamp,
) -> PodReservation {
    let revision = pods::label(pod, keys::LABEL_CONTROLLER_REVISION_HASH).unwrap_or_default();
    if reserved_label(pod) == Some(true) {
        if pods::phase(pod) == pods::PHASE_RUNNING
            && revision == update_revision
            && let Some(since) = pods::ready_since(pod)
        {
            let until = since
                .checked_add(jiff_span(ready_for))
                .unwrap_or(Timestamp::MAX);
            if until < now {
                return PodReservation::default();
            }
            return PodReservation {
                reserved: true,
                check_after: Some(duration_between(now, until)),
                update_timed_out: false,
            };
        }
        return PodReservation {
            reserved: true,
            check_after: Some(ready_for),
            update_timed_out: false,
        };
    }
    let (timed_out, after, update_timed_out) = if revision == update_revision {
        let (timed_out, after) = pending_timeout(pod, pending, now);
        (timed_out, after, false)
    } else {
        match updating_since {
            Some(since) if !pods::is_terminating(pod) && !pods::is_ready(pod) => {
                let deadline = since
                    .checked_add(jiff_span(pending))
                    .unwrap_or(Timestamp::MAX);
                if deadline < now {
                    (true, None, true)
                } else {
                    (false, Some(duration_between(now, deadline)), false)
                }
            }
            _ => (false, None, false),
        }
    };
    if timed_out {
        PodReservation {
            reserved: true,
            check_after: Some(ready_for),
            update_timed_out,
        }
    } else {
        PodReservation {
            reserved: false,
            check_after: after.filter(|a| !a.is_zero()),
            update_timed_out: false,
        }
    }
}

/// What the reservation mode concludes about one subset this reconcile.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SubsetReservation {
    /// Pods reserved in the subset.
    pub reserved_pods: i32,
    /// Old-revision Pods reserved because the update timed out (they widen the subset's
    /// maxUnavailable so its rolling update is not blocked by them).
    pub update_timeout_pods: i32,
    /// The subset has reserved Pods: the allocator holds it at what it can run.
    pub unschedulable: bool,
    /// Its `Schedulable` condition was False when this reconcile began.
    pub marked_unschedulable: bool,
    /// Pods whose reserved label must be written (pod name, value).
    pub labels: Vec<(String, bool)>,
    /// The `Schedulable` condition to write: (status, reason, message).
    pub condition: (String, String, String),
    pub requeue_after: Option<Duration>,
}

/// Upstream's `calculateSubsetsStatusForReservedAdaptiveStrategy` for one subset: while the subset is
/// marked unschedulable, every Pod created in it starts reserved (so substitutes are removed only
/// once the new Pods really run); otherwise each Pod goes through [`pod_reservation`].
pub fn subset_reservation(
    schedulable: Option<&UnitedDeploymentSubsetCondition>,
    subset_pods: &[&Pod],
    update_revision: &str,
    updating_since: Option<Timestamp>,
    pending: Duration,
    unschedulable_duration: Duration,
    now: Timestamp,
) -> SubsetReservation {
    let mut out = SubsetReservation {
        marked_unschedulable: schedulable.is_some_and(|c| c.status == "False"),
        ..SubsetReservation::default()
    };
    let requeue = |after: Duration, out: &mut SubsetReservation| {
        out.requeue_after = Some(out.requeue_after.map_or(after, |a| a.min(after)));
    };
    for pod in subset_pods {
        let Some(name) = pod.metadata.name.clone() else {
            continue;
        };
        let label = reserved_label(pod);
        if out.marked_unschedulable && label.is_none() {
            out.reserved_pods += 1;
            out.labels.push((name, true));
            requeue(unschedulable_duration, &mut out);
            continue;
        }
        let verdict = pod_reservation(
            pod,
            update_revision,
            updating_since,
            pending,
            unschedulable_duration,
            now,
        );
        if verdict.reserved {
            out.reserved_pods += 1;
        }
        if verdict.update_timed_out {
            out.update_timeout_pods += 1;
        }
        if let Some(after) = verdict.check_after {
            requeue(after, &mut out);
        }
        if label != Some(verdict.reserved) {
            out.labels.push((name, verdict.reserved));
        }
    }
    out.unschedulable = out.reserved_pods > 0;
    out.condition = if out.unschedulable {
        (
            "False".into(),
            "reschedule".into(),
            "reserved pods found".into(),
        )
    } else {
        (
            "True".into(),
            "reschedule".into(),
            "no reserved pods".into(),
        )
    };
    out
}

/// After allocation: a subset that just recovered (no reserved Pods, but marked unschedulable) and is
/// given more replicas stays marked, so the Pods about to be created start reserved and the
/// substitutes elsewhere go only once those Pods really run.
pub fn recovered_and_scaled_up(
    reservation: &SubsetReservation,
    spec_replicas: i32,
    next_replicas: i32,
) -> Option<(String, String, String)> {
    (!reservation.unschedulable
        && reservation.marked_unschedulable
        && next_replicas > spec_replicas)
        .then(|| {
            (
                "False".into(),
                "reschedule".into(),
                "subset just recovered scaled up".into(),
            )
        })
}

/// The selector term appended to `status.labelSelector` in reservation mode, so that what scales
/// on it (an HPA) does not count reserved Pods.
pub const STATUS_SELECTOR_SUFFIX: &str = ",apps.kruise.io/united-deployment-reserved-pod=false";

/// The allocator of the reservation mode (min/max with reservation): each subset is filled to its
/// minimum, then to its maximum (a subset with reserved Pods: to its current replicas), in subset
/// order. Replicas given to a subset beyond what it can run (its replicas less its reserved Pods)
/// are not taken from the total, so other subsets get them too: those are the substitutes.
pub(super) fn allocate_with_reservation(
    replicas: i32,
    mins: &BTreeMap<String, i32>,
    maxs: &BTreeMap<String, i32>,
    subsets: &[Subset],
    existing: &BTreeMap<String, Existing>,
) -> BTreeMap<String, i32> {
    struct Record {
        /// How many more replicas the subset can be expected to run (negative: that many are
        /// expected to stay reserved).
        room: i64,
        allocated: i64,
    }
    impl Record {
        /// Raise the allocation towards `to` with at most `rest` replicas; returns how many of them
        /// count as running (the total decreases by that much).
        fn allocate(&mut self, to: i64, rest: i64) -> i64 {
            let add = (to - self.allocated).min(rest).max(0);
            self.allocated += add;
            self.room -= add;
            if self.room < 0 {
                (add + self.room).max(0)
            } else {
                add
            }
        }
    }
    let mut records: BTreeMap<&str, Record> = subsets
        .iter()
        .map(|s| {
            let room = match existing.get(&s.name) {
                Some(e) if e.unschedulable || e.marked_unschedulable => {
                    i64::from(e.spec_replicas) - i64::from(e.reserved_pods)
                }
                _ => i64::MAX / 4,
            };
            (s.name.as_str(), Record { room, allocated: 0 })
        })
        .collect();
    let mut rest = i64::from(replicas);
    let bound = |map: &BTreeMap<String, i32>, name: &str, unset: i32| {
        i64::from(map.get(name).copied().unwrap_or(unset))
    };
    'fill: {
        for s in subsets {
            if rest <= 0 {
                break 'fill;
            }
            if let Some(record) = records.get_mut(s.name.as_str()) {
                rest -= record.allocate(bound(mins, &s.name, 0), rest);
            }
        }
        for s in subsets {
            if rest <= 0 {
                break 'fill;
            }
            let to = match existing.get(&s.name) {
                Some(e) if e.unschedulable => i64::from(e.spec_replicas),
                _ => bound(maxs, &s.name, i32::MAX),
            };
            if let Some(record) = records.get_mut(s.name.as_str()) {
                rest -= record.allocate(to, rest);
            }
        }
    }
    subsets
        .iter()
        .map(|s| {
            let allocated = records.get(s.name.as_str()).map_or(0, |r| r.allocated);
            (s.name.clone(), super::clamp_i32(allocated))
        })
        .collect()
}
