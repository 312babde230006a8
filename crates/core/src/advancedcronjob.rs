//! Which run of an AdvancedCronJob's schedule is due at `now`, as upstream's controller decides it.
//! The schedule itself (parsing, the next run after an instant, time zones) is
//! [`kruise_api::advancedcronjob::schedule`].

use std::fmt;

use k8s_openapi::jiff::tz::TimeZone;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
pub use kruise_api::advancedcronjob::schedule::{
    Schedule, ScheduleError, for_cron_job, load_location, parse,
};

/// Upstream gives up when a job missed more than this many runs since its last one (or the start of
/// its starting deadline), rather than walk through them all.
pub const MAX_MISSED: usize = 100;

/// Which run is due at `now` and when the next one is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Due {
    /// The most recent run at or before `now` that has not happened (after `earliest`), if any.
    pub missed: Option<Timestamp>,
    /// The first run after `now`.
    pub next: Option<Timestamp>,
}

/// Too many runs were missed (more than [`MAX_MISSED`]); upstream's message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TooManyMissed;

impl fmt::Display for TooManyMissed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "too many missed start times (> 100). Set or decrease .spec.startingDeadlineSeconds or check clock skew",
        )
    }
}

/// The runs of `schedule` between `last` (the last scheduled run, or the job's creation) and `now`,
/// as upstream's controller computes them: with a starting deadline, nothing before
/// `now - deadline` counts; the latest missed run is returned, and more than [`MAX_MISSED`] is an
/// error.
pub fn due(
    schedule: &Schedule,
    last: Timestamp,
    starting_deadline_seconds: Option<i64>,
    now: Timestamp,
) -> Result<Due, TooManyMissed> {
    let mut earliest = last;
    if let Some(deadline) = starting_deadline_seconds {
        let limit = now
            .checked_sub(SignedDuration::from_secs(deadline))
            .unwrap_or(Timestamp::MIN);
        if limit > earliest {
            earliest = limit;
        }
    }
    let next = schedule.next(now);
    if earliest > now {
        return Ok(Due { missed: None, next });
    }
    let mut missed = None;
    let mut count = 0usize;
    let mut at = schedule.next(earliest);
    while let Some(t) = at {
        if t > now {
            break;
        }
        missed = Some(t);
        count += 1;
        if count > MAX_MISSED {
            return Err(TooManyMissed);
        }
        at = schedule.next(t);
    }
    Ok(Due { missed, next })
}

/// Whether a run at `missed` is past its starting deadline at `now`.
pub fn too_late(missed: Timestamp, starting_deadline_seconds: Option<i64>, now: Timestamp) -> bool {
    starting_deadline_seconds.is_some_and(|deadline| {
        missed
            .checked_add(SignedDuration::from_secs(deadline))
            .is_ok_and(|limit| limit < now)
    })
}

/// How a job an AdvancedCronJob created ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finished {
    Succeeded,
    Failed,
}

/// How an ImageListPullJob of an AdvancedCronJob ended, as upstream reads it: finished once it has a
/// `completionTime`, succeeded when every image's job succeeded (`succeeded == desired`), else failed.
pub fn image_list_finished(completed: bool, desired: i32, succeeded: i32) -> Option<Finished> {
    completed.then_some(if succeeded == desired {
        Finished::Succeeded
    } else {
        Finished::Failed
    })
}

/// One job (Job, BroadcastJob or ImageListPullJob) of an AdvancedCronJob, as the planner sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Child {
    pub name: String,
    /// A `Complete` or `Failed` condition with status True; `None` while it runs.
    pub finished: Option<Finished>,
    /// The `apps.kruise.io/scheduled-at` annotation, when present and readable.
    pub scheduled_at: Option<Timestamp>,
    /// `status.startTime`.
    pub start_time: Option<Timestamp>,
}

/// The spec fields the planner reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    pub paused: bool,
    /// `Allow`, `Forbid` or `Replace` (anything else counts as `Allow`).
    pub concurrency: String,
    pub starting_deadline_seconds: Option<i64>,
    pub successful_jobs_history_limit: Option<i32>,
    pub failed_jobs_history_limit: Option<i32>,
}

/// Why nothing can be scheduled until the spec changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    InvalidSchedule(String),
    TooManyMissed,
}

/// A run to start now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Run {
    /// Its scheduled time: the job's name suffix (Unix seconds) and `scheduled-at` annotation.
    pub scheduled: Timestamp,
    /// Running jobs (indexes into the children) to delete first (`Replace`).
    pub replace: Vec<usize>,
}

/// One reconcile's decision.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Indexes of the running children, in the order given (`status.active`).
    pub active: Vec<usize>,
    /// `status.lastScheduleTime`.
    pub last_schedule_time: Option<Timestamp>,
    /// Finished children beyond the history limits, oldest first.
    pub prune: Vec<usize>,
    pub run: Option<Run>,
    /// When to look again (the next scheduled time), if ever.
    pub requeue_after: Option<SignedDuration>,
    pub problem: Option<Problem>,
}

/// The oldest (by start time, unstarted first) of `indexes` beyond the newest `limit`.
fn beyond_limit(children: &[Child], mut indexes: Vec<usize>, limit: Option<i32>) -> Vec<usize> {
    let Some(limit) = limit else {
        return Vec::new();
    };
    indexes.sort_by_key(|&i| children[i].start_time);
    let keep = usize::try_from(limit.max(0)).unwrap_or(0);
    let excess = indexes.len().saturating_sub(keep);
    indexes.truncate(excess);
    indexes
}

/// Decides one reconcile of an AdvancedCronJob as upstream's controller does: the status (running
/// jobs, the latest scheduled time), the finished jobs past the history limits, and — unless paused —
/// whether the latest missed run starts now (within the starting deadline, as the concurrency policy
/// allows), and when to look again.
///
/// One difference: upstream takes `lastScheduleTime` from the jobs that still exist only, so once a
/// history limit of 0 deletes the last job, it counts the runs since the object's creation again and
/// repeats the latest one. Here the status's own `lastScheduleTime` (`recorded`) is kept when it is
/// later than every job's.
pub fn plan(
    policy: &Policy,
    schedule: Result<&Schedule, &ScheduleError>,
    children: &[Child],
    recorded: Option<Timestamp>,
    created: Timestamp,
    now: Timestamp,
) -> Plan {
    let mut plan = Plan::default();
    let (mut succeeded, mut failed) = (Vec::new(), Vec::new());
    for (i, child) in children.iter().enumerate() {
        match child.finished {
            None => plan.active.push(i),
            Some(Finished::Succeeded) => succeeded.push(i),
            Some(Finished::Failed) => failed.push(i),
        }
    }
    let latest_child = children.iter().filter_map(|c| c.scheduled_at).max();
    plan.last_schedule_time = latest_child.max(recorded);
    plan.prune = beyond_limit(children, failed, policy.failed_jobs_history_limit);
    plan.prune.extend(beyond_limit(
        children,
        succeeded,
        policy.successful_jobs_history_limit,
    ));
    if policy.paused {
        return plan;
    }
    let schedule = match schedule {
        Ok(schedule) => schedule,
        Err(error) => {
            plan.problem = Some(Problem::InvalidSchedule(error.0.clone()));
            return plan;
        }
    };
    let last = plan.last_schedule_time.unwrap_or(created);
    let due = match due(schedule, last, policy.starting_deadline_seconds, now) {
        Ok(due) => due,
        Err(TooManyMissed) => {
            plan.problem = Some(Problem::TooManyMissed);
            return plan;
        }
    };
    plan.requeue_after = due.next.map(|next| now.duration_until(next));
    let Some(missed) = due.missed else {
        return plan;
    };
    if too_late(missed, policy.starting_deadline_seconds, now) {
        return plan;
    }
    match policy.concurrency.as_str() {
        "Forbid" if !plan.active.is_empty() => {}
        "Replace" => {
            plan.run = Some(Run {
                scheduled: missed,
                replace: plan.active.clone(),
            })
        }
        _ => {
            plan.run = Some(Run {
                scheduled: missed,
                replace: Vec::new(),
            })
        }
    }
    plan
}

/// The name of the job of the run scheduled at `scheduled`: `<owner>-<Unix seconds>`, the same for
/// every attempt, so a run is never created twice.
pub fn job_name(owner: &str, scheduled: Timestamp) -> String {
    format!("{owner}-{}", scheduled.as_second())
}

/// The `scheduled-at` annotation's value: RFC 3339 in the schedule's time zone, whole seconds, `Z`
/// for UTC (Go's `time.RFC3339` of the time upstream's cron library returns).
pub fn scheduled_at(scheduled: Timestamp, tz: &TimeZone) -> String {
    let whole = Timestamp::from_second(scheduled.as_second()).unwrap_or(scheduled);
    let zoned = whole.to_zoned(tz.clone());
    if zoned.offset().seconds() == 0 {
        zoned.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
    } else {
        zoned.strftime("%Y-%m-%dT%H:%M:%S%:z").to_string()
    }
}

/// Reads a `scheduled-at` annotation (any RFC 3339 offset).
pub fn parse_scheduled_at(value: &str) -> Option<Timestamp> {
    value.parse().ok()
}

#[cfg(test)]
mod tests;
