//! Which run of an AdvancedCronJob's schedule is due at `now`, as upstream's controller decides it.
//! The schedule itself (parsing, the next run after an instant, time zones) is
//! [`kruise_api::advancedcronjob::schedule`].

use std::fmt;

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

#[cfg(test)]
mod tests;
