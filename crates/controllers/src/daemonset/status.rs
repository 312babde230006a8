//! Advanced DaemonSet status (upstream's `DaemonSetStatus` counters) from the planner's [`Counts`],
//! plus kruise-rs's `Available` and `Progressing` conditions (upstream ADS writes none), so
//! `kubectl wait --for=condition=Available` works on an ADS. Pure.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kruise_api::daemonset::v1beta1::{DaemonSet, DaemonSetStatus, UPDATE_ON_DELETE};
use kruise_core::rollout::daemonset::{Counts, partition, surge_and_unavailable};

use crate::conditions::{
    self, CONDITION_AVAILABLE, REASON_MIN_AVAILABLE, REASON_MIN_UNAVAILABLE,
    REASON_PARTITION_AVAILABLE, Stage, WorkloadCondition, set_condition, set_progressing,
};

pub const REASON_AVAILABLE: &str = "DaemonSetAvailable";
pub const REASON_UPDATING: &str = "DaemonSetUpdating";
pub const REASON_PAUSED: &str = "DaemonSetPaused";
pub const REASON_ON_DELETE: &str = "DaemonSetOnDelete";

/// What the status is computed from.
pub struct Inputs<'a> {
    pub ds: &'a DaemonSet,
    pub counts: Counts,
    /// The update revision's hash (`status.updateRevision`, v1alpha1 `daemonSetHash`).
    pub hash: &'a str,
    pub collision_count: Option<i32>,
    /// Nodes waiting for a Pod that burstReplicas or partitionedScaling held back.
    pub deferred: usize,
    pub now: Timestamp,
}

/// The new status, and when to look again because of it (the progress deadline).
pub struct Computed {
    pub status: DaemonSetStatus,
    pub requeue: Option<Duration>,
}

pub fn compute(inputs: &Inputs<'_>) -> Computed {
    let ds = inputs.ds;
    let c = inputs.counts;
    let old = ds.status.clone().unwrap_or_default();
    let mut status = DaemonSetStatus {
        current_number_scheduled: c.current,
        number_misscheduled: c.misscheduled,
        desired_number_scheduled: c.desired,
        number_ready: c.ready,
        observed_generation: ds.metadata.generation.unwrap_or(0),
        updated_number_scheduled: c.updated,
        number_available: c.available,
        number_unavailable: c.unavailable,
        collision_count: inputs.collision_count,
        conditions: old.conditions,
        update_revision: inputs.hash.to_owned(),
    };
    let requeue = health(inputs, &mut status);
    Computed { status, requeue }
}

fn health(inputs: &Inputs<'_>, status: &mut DaemonSetStatus) -> Option<Duration> {
    let ds = inputs.ds;
    let c = inputs.counts;
    let now = inputs.now;
    let rolling = ds.spec.update_strategy.rolling_update.as_ref();
    let on_delete = ds.spec.update_strategy.type_ == UPDATE_ON_DELETE;
    let max_unavailable = if on_delete {
        1
    } else {
        surge_and_unavailable(rolling, c.desired).map_or(1, |(_, u)| u)
    };
    let min_available = (c.desired - i32::try_from(max_unavailable).unwrap_or(i32::MAX)).max(0);
    let (state, reason) = if c.available >= min_available {
        ("True", REASON_MIN_AVAILABLE)
    } else {
        ("False", REASON_MIN_UNAVAILABLE)
    };
    set_condition(
        &mut status.conditions,
        WorkloadCondition::build(
            CONDITION_AVAILABLE,
            state,
            reason,
            format!(
                "{} of {} nodes available (at least {min_available} required)",
                c.available, c.desired
            ),
            now,
        ),
        false,
    );

    let selector = !on_delete && rolling.is_some_and(|r| r.selector.is_some());
    let part = if on_delete {
        0
    } else {
        partition(&ds.spec, c.desired).unwrap_or(0)
    };
    let part = i32::try_from(part).unwrap_or(i32::MAX);
    let expected = c.selected.min((c.desired - part).max(0));
    let progress = if selector {
        format!(
            "{} of {} selected nodes updated, {} of {} nodes available",
            c.updated, c.selected, c.available, c.desired
        )
    } else {
        format!(
            "{} of {} nodes updated, {} available",
            c.updated, c.desired, c.available
        )
    };
    let settled = c.current == c.desired && c.available == c.desired && inputs.deferred == 0;
    let stage = if settled && c.updated >= c.desired && c.misscheduled == 0 {
        Stage::Complete {
            reason: REASON_AVAILABLE,
            message: "DaemonSet is available".into(),
        }
    } else if settled && c.updated >= expected && c.misscheduled == 0 {
        Stage::Holding {
            reason: REASON_PARTITION_AVAILABLE,
            message: format!("DaemonSet has been paused due to partition ready: {progress}"),
        }
    } else if on_delete {
        Stage::Holding {
            reason: REASON_ON_DELETE,
            message: format!("DaemonSet updates Pods as they are deleted: {progress}"),
        }
    } else if rolling.is_some_and(|r| r.paused == Some(true)) {
        Stage::Holding {
            reason: REASON_PAUSED,
            message: format!("DaemonSet is paused: {progress}"),
        }
    } else {
        Stage::Rolling {
            reason: REASON_UPDATING,
            progress,
            detail: if c.misscheduled > 0 {
                format!("; {} nodes run a Pod they should not", c.misscheduled)
            } else {
                String::new()
            },
            timed_out: format!(
                "DaemonSet revision {} has timed out progressing",
                inputs.hash
            ),
        }
    };
    set_progressing(
        &mut status.conditions,
        stage,
        conditions::progress_deadline(&ds.metadata),
        now,
    )
}

/// Whether the new status differs from the stored one (conditions compared without times).
pub fn changed(old: Option<&DaemonSetStatus>, new: &DaemonSetStatus) -> bool {
    let Some(old) = old else {
        return true;
    };
    let strip = |s: &DaemonSetStatus| {
        let mut s = s.clone();
        let conditions = conditions::timeless(&s.conditions);
        s.conditions.clear();
        (serde_json::to_value(&s).unwrap_or_default(), conditions)
    };
    strip(old) != strip(new)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ds(yaml: &str) -> DaemonSet {
        serde_yaml::from_str(yaml).expect("yaml")
    }

    fn now() -> Timestamp {
        Timestamp::from_second(1_800_000_000).expect("valid")
    }

    fn reasons(s: &DaemonSetStatus) -> Vec<(String, String, String)> {
        s.conditions
            .iter()
            .map(|c| {
                (
                    c.type_.clone(),
                    c.status.clone(),
                    c.message.clone().unwrap_or_default(),
                )
            })
            .collect()
    }

    const BASE: &str = r#"
apiVersion: apps.kruise.io/v1beta1
kind: DaemonSet
metadata: {name: d, generation: 4}
spec:
  selector: {matchLabels: {app: d}}
  template: {}
  updateStrategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: 1}}
"#;

    #[test]
    fn a_complete_rollout_is_available() {
        let set = ds(BASE);
        let counts = Counts {
            desired: 3,
            current: 3,
            ready: 3,
            available: 3,
            updated: 3,
            selected: 3,
            ..Counts::default()
        };
        let c = compute(&Inputs {
            ds: &set,
            counts,
            hash: "abc",
            collision_count: Some(0),
            deferred: 0,
            now: now(),
        });
        assert_eq!(c.status.observed_generation, 4);
        assert_eq!(c.status.update_revision, "abc");
        assert_eq!(
            reasons(&c.status),
            [
                (
                    "Available".to_owned(),
                    "True".to_owned(),
                    "3 of 3 nodes available (at least 2 required)".to_owned()
                ),
                (
                    "Progressing".to_owned(),
                    "True".to_owned(),
                    "DaemonSet is available".to_owned()
                )
            ]
        );
        assert_eq!(c.requeue, None);
    }

    #[test]
    fn a_selector_rollout_counts_selected_nodes() {
        let set = ds(&BASE.replace(
            "maxUnavailable: 1}",
            "maxUnavailable: 1, selector: {matchLabels: {node-pool: canary}}}",
        ));
        let counts = Counts {
            desired: 10,
            current: 10,
            ready: 10,
            available: 9,
            updated: 2,
            selected: 4,
            unavailable: 1,
            ..Counts::default()
        };
        let c = compute(&Inputs {
            ds: &set,
            counts,
            hash: "abc",
            collision_count: None,
            deferred: 0,
            now: now(),
        });
        let progressing = &reasons(&c.status)[1];
        assert_eq!(
            progressing.2,
            "2 of 4 selected nodes updated, 9 of 10 nodes available"
        );
        assert!(c.requeue.is_some(), "the deadline is watched");
        // All selected nodes updated: the rollout holds there.
        let done = Counts {
            available: 10,
            updated: 4,
            unavailable: 0,
            ..counts
        };
        let c = compute(&Inputs {
            ds: &set,
            counts: done,
            hash: "abc",
            collision_count: None,
            deferred: 0,
            now: now(),
        });
        assert_eq!(
            c.status.conditions[1].reason.as_deref(),
            Some(REASON_PARTITION_AVAILABLE)
        );
        assert!(
            c.status.conditions[1]
                .message
                .as_deref()
                .is_some_and(|m| m.contains("4 of 4 selected nodes updated"))
        );
    }

    #[test]
    fn too_few_available_nodes_make_it_unavailable() {
        let set = ds(BASE);
        let counts = Counts {
            desired: 3,
            current: 3,
            ready: 1,
            available: 1,
            updated: 1,
            selected: 3,
            unavailable: 2,
            ..Counts::default()
        };
        let c = compute(&Inputs {
            ds: &set,
            counts,
            hash: "abc",
            collision_count: None,
            deferred: 0,
            now: now(),
        });
        assert_eq!(c.status.conditions[0].status, "False");
        assert_eq!(
            c.status.conditions[0].reason.as_deref(),
            Some(REASON_MIN_UNAVAILABLE)
        );
        assert!(!changed(Some(&c.status), &c.status.clone()));
    }
}
