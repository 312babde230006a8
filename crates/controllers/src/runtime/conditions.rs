//! Workload status conditions shared by the controllers that write kruise-rs's `Progressing` and
//! `Available` (upstream OpenKruise writes none on ASTS or ADS): setting a condition without
//! churning its transition time, and the progress-deadline rule a Deployment follows.
//!
//! The condition types of `apps/v1` (StatefulSetCondition, DaemonSetCondition, …) have the same
//! fields; [`WorkloadCondition`] lets one implementation serve them all.

use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSetCondition, StatefulSetCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

pub const CONDITION_PROGRESSING: &str = "Progressing";
pub const CONDITION_AVAILABLE: &str = "Available";
pub const REASON_PROGRESS_DEADLINE_EXCEEDED: &str = "ProgressDeadlineExceeded";
pub const REASON_PARTITION_AVAILABLE: &str = "ProgressPartitionAvailable";
pub const REASON_MIN_AVAILABLE: &str = "MinimumReplicasAvailable";
pub const REASON_MIN_UNAVAILABLE: &str = "MinimumReplicasUnavailable";
/// The progress deadline of a workload without the field (seconds), as a Deployment's.
pub const ANNOTATION_PROGRESS_DEADLINE: &str = "kruise-rs.io/progress-deadline-seconds";
pub const DEFAULT_PROGRESS_DEADLINE_SECONDS: i64 = 600;

/// A status condition of an `apps/v1`-shaped workload.
pub trait WorkloadCondition: Clone {
    fn build(type_: &str, status: &str, reason: &str, message: String, now: Timestamp) -> Self;
    fn type_(&self) -> &str;
    fn status(&self) -> &str;
    fn reason(&self) -> Option<&str>;
    fn message(&self) -> Option<&str>;
    fn transition(&self) -> Option<&Time>;
    fn set_transition(&mut self, at: Option<Time>);
}

macro_rules! workload_condition {
    ($t:ty) => {
        impl WorkloadCondition for $t {
            fn build(
                type_: &str,
                status: &str,
                reason: &str,
                message: String,
                now: Timestamp,
            ) -> Self {
                Self {
                    type_: type_.to_owned(),
                    status: status.to_owned(),
                    last_transition_time: Some(Time(now)),
                    reason: (!reason.is_empty()).then(|| reason.to_owned()),
                    message: (!message.is_empty()).then_some(message),
                }
            }
            fn type_(&self) -> &str {
                &self.type_
            }
            fn status(&self) -> &str {
                &self.status
            }
            fn reason(&self) -> Option<&str> {
                self.reason.as_deref()
            }
            fn message(&self) -> Option<&str> {
                self.message.as_deref()
            }
            fn transition(&self) -> Option<&Time> {
                self.last_transition_time.as_ref()
            }
            fn set_transition(&mut self, at: Option<Time>) {
                self.last_transition_time = at;
            }
        }
    };
}

workload_condition!(StatefulSetCondition);
workload_condition!(DaemonSetCondition);

/// Sets a condition. The transition time is kept while the status and reason stay, unless
/// `restamp` (progress was made); an identical condition is left untouched.
pub fn set_condition<C: WorkloadCondition>(conditions: &mut Vec<C>, mut new: C, restamp: bool) {
    if let Some(old) = conditions.iter().find(|c| c.type_() == new.type_()) {
        let same = old.status() == new.status() && old.reason() == new.reason();
        if same && old.message() == new.message() {
            return;
        }
        if same && !restamp {
            new.set_transition(old.transition().cloned());
        }
    }
    conditions.retain(|c| c.type_() != new.type_());
    conditions.push(new);
}

/// The progress deadline a workload asks for through [`ANNOTATION_PROGRESS_DEADLINE`]; `None` when
/// it is turned off (`"0"` or a negative value).
pub fn progress_deadline(meta: &ObjectMeta) -> Option<i64> {
    let value = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_PROGRESS_DEADLINE))
        .and_then(|v| v.trim().parse::<i64>().ok())
        .unwrap_or(DEFAULT_PROGRESS_DEADLINE_SECONDS);
    (value > 0).then_some(value)
}

/// Where a rollout stands, for `Progressing`.
pub enum Stage {
    /// Every Pod updated and available: True with this reason and message.
    Complete {
        reason: &'static str,
        message: String,
    },
    /// Nothing to wait for now (paused, partition reached, OnDelete): True with this reason.
    Holding {
        reason: &'static str,
        message: String,
    },
    /// Still rolling: True with `reason` while `progress` keeps changing within the deadline; False
    /// `ProgressDeadlineExceeded` with `timed_out` once it has not for the deadline.
    Rolling {
        reason: &'static str,
        /// Counts that change when the rollout makes progress (the message starts with them).
        progress: String,
        /// Appended to the message (what it waits for).
        detail: String,
        timed_out: String,
    },
}

/// Sets `Progressing` from `stage` under `deadline` seconds (`None`: no condition); returns when the
/// deadline falls due. `lastTransitionTime` is restamped whenever the progress counts change, so the
/// deadline runs from the last progress, as a Deployment's does.
pub fn set_progressing<C: WorkloadCondition>(
    conditions: &mut Vec<C>,
    stage: Stage,
    deadline: Option<i64>,
    now: Timestamp,
) -> Option<Duration> {
    let Some(deadline) = deadline else {
        conditions.retain(|c| c.type_() != CONDITION_PROGRESSING);
        return None;
    };
    let prior = conditions
        .iter()
        .find(|c| c.type_() == CONDITION_PROGRESSING)
        .cloned();
    let (status, reason, message, rolling_reason, progress) = match stage {
        Stage::Complete { reason, message } | Stage::Holding { reason, message } => {
            ("True", reason, message, None, String::new())
        }
        Stage::Rolling {
            reason,
            progress,
            detail,
            timed_out,
        } => {
            let exceeded = prior.as_ref().is_some_and(|c| {
                c.reason() == Some(REASON_PROGRESS_DEADLINE_EXCEEDED)
                    && c.message().is_some_and(|m| m.contains(&progress))
                    || c.reason() == Some(reason)
                        && c.message().is_some_and(|m| m.starts_with(&progress))
                        && c.transition()
                            .is_some_and(|t| t.0 + SignedDuration::from_secs(deadline) < now)
            });
            if exceeded {
                (
                    "False",
                    REASON_PROGRESS_DEADLINE_EXCEEDED,
                    format!("{timed_out}: {progress}{detail}"),
                    None,
                    progress,
                )
            } else {
                (
                    "True",
                    reason,
                    format!("{progress}{detail}"),
                    Some(reason),
                    progress,
                )
            }
        }
    };
    let restamp = rolling_reason.is_some_and(|r| {
        prior.as_ref().is_some_and(|c| {
            c.reason() == Some(r) && !c.message().is_some_and(|m| m.starts_with(&progress))
        })
    });
    set_condition(
        conditions,
        C::build(CONDITION_PROGRESSING, status, reason, message, now),
        restamp,
    );
    rolling_reason?;
    let since = conditions
        .iter()
        .find(|c| c.type_() == CONDITION_PROGRESSING)?
        .transition()?
        .0;
    let due = since + SignedDuration::from_secs(deadline + 1);
    Duration::try_from(due.duration_since(now))
        .ok()
        .or(Some(Duration::from_secs(1)))
}

/// Conditions compared without their times, sorted by type.
pub fn timeless<C: WorkloadCondition>(
    conditions: &[C],
) -> Vec<(String, String, Option<String>, Option<String>)> {
    let mut out: Vec<_> = conditions
        .iter()
        .map(|c| {
            (
                c.type_().to_owned(),
                c.status().to_owned(),
                c.reason().map(str::to_owned),
                c.message().map(str::to_owned),
            )
        })
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).expect("valid")
    }

    fn rolling(progress: &str) -> Stage {
        Stage::Rolling {
            reason: "Updating",
            progress: progress.into(),
            detail: String::new(),
            timed_out: "timed out".into(),
        }
    }

    #[test]
    fn progress_restamps_and_a_stall_exceeds_the_deadline() {
        let mut c: Vec<DaemonSetCondition> = Vec::new();
        let due = set_progressing(&mut c, rolling("1 of 3"), Some(10), at(0));
        assert_eq!(due, Some(Duration::from_secs(11)));
        // Same counts later: the transition time stays.
        set_progressing(&mut c, rolling("1 of 3"), Some(10), at(5));
        assert_eq!(c[0].last_transition_time, Some(Time(at(0))));
        // Progress: restamped.
        set_progressing(&mut c, rolling("2 of 3"), Some(10), at(8));
        assert_eq!(c[0].last_transition_time, Some(Time(at(8))));
        // Stalled past the deadline.
        set_progressing(&mut c, rolling("2 of 3"), Some(10), at(19));
        assert_eq!(c[0].status, "False");
        assert_eq!(
            c[0].reason.as_deref(),
            Some(REASON_PROGRESS_DEADLINE_EXCEEDED)
        );
        assert_eq!(c[0].message.as_deref(), Some("timed out: 2 of 3"));
        // It stays exceeded while nothing moves, and recovers on progress.
        set_progressing(&mut c, rolling("2 of 3"), Some(10), at(30));
        assert_eq!(c[0].status, "False");
        set_progressing(&mut c, rolling("3 of 3"), Some(10), at(31));
        assert_eq!(c[0].status, "True");
        let done = Stage::Complete {
            reason: "Done",
            message: "done".into(),
        };
        assert_eq!(set_progressing(&mut c, done, Some(10), at(32)), None);
        assert_eq!(c[0].reason.as_deref(), Some("Done"));
        set_progressing(&mut c, rolling("x"), None, at(33));
        assert!(c.is_empty(), "deadline off: no condition");
    }

    #[test]
    fn deadline_from_the_annotation() {
        let mut meta = ObjectMeta::default();
        assert_eq!(progress_deadline(&meta), Some(600));
        meta.annotations =
            Some([(ANNOTATION_PROGRESS_DEADLINE.to_owned(), "30".to_owned())].into());
        assert_eq!(progress_deadline(&meta), Some(30));
        meta.annotations = Some([(ANNOTATION_PROGRESS_DEADLINE.to_owned(), "0".to_owned())].into());
        assert_eq!(progress_deadline(&meta), None);
    }
}
