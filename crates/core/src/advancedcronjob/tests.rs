use super::*;
use proptest::prelude::*;

fn ts(text: &str) -> Timestamp {
    text.parse().expect("timestamp")
}

fn utc() -> TimeZone {
    TimeZone::UTC
}

/// (schedule, last, deadline, now, missed, next)
type Case<'a> = (
    &'a Schedule,
    &'a str,
    Option<i64>,
    &'a str,
    Result<Option<&'a str>, TooManyMissed>,
    &'a str,
);

#[test]
fn due_runs_and_deadlines() {
    let every_minute = parse("* * * * *", &utc()).expect("parses");
    let hourly = parse("0 * * * *", &utc()).expect("parses");
    // (schedule, last, deadline, now, missed, next)
    let cases: &[Case] = &[
        // Created 10:00:30, now 10:00:40: nothing due yet.
        (
            &every_minute,
            "2024-05-01T10:00:30Z",
            None,
            "2024-05-01T10:00:40Z",
            Ok(None),
            "2024-05-01T10:01:00Z",
        ),
        // Now 10:01:05: the 10:01 run is due.
        (
            &every_minute,
            "2024-05-01T10:00:30Z",
            None,
            "2024-05-01T10:01:05Z",
            Ok(Some("2024-05-01T10:01:00Z")),
            "2024-05-01T10:02:00Z",
        ),
        // Several missed: the latest counts.
        (
            &every_minute,
            "2024-05-01T10:00:30Z",
            None,
            "2024-05-01T10:05:05Z",
            Ok(Some("2024-05-01T10:05:00Z")),
            "2024-05-01T10:06:00Z",
        ),
        // The last run was 10:05: nothing more due at 10:05:30.
        (
            &every_minute,
            "2024-05-01T10:05:00Z",
            None,
            "2024-05-01T10:05:30Z",
            Ok(None),
            "2024-05-01T10:06:00Z",
        ),
        // Exactly 100 missed is fine, 101 is not.
        (
            &every_minute,
            "2024-05-01T10:00:00Z",
            None,
            "2024-05-01T11:40:00Z",
            Ok(Some("2024-05-01T11:40:00Z")),
            "2024-05-01T11:41:00Z",
        ),
        (
            &every_minute,
            "2024-05-01T10:00:00Z",
            None,
            "2024-05-01T11:41:00Z",
            Err(TooManyMissed),
            "",
        ),
        // A starting deadline bounds the search: days of missed minutes, but only the last 200 s count.
        (
            &every_minute,
            "2024-04-01T10:00:00Z",
            Some(200),
            "2024-05-01T10:00:10Z",
            Ok(Some("2024-05-01T10:00:00Z")),
            "2024-05-01T10:01:00Z",
        ),
        // Deadline shorter than the time since the only missed run: nothing in the window.
        (
            &hourly,
            "2024-05-01T09:30:00Z",
            Some(60),
            "2024-05-01T10:05:00Z",
            Ok(None),
            "2024-05-01T11:00:00Z",
        ),
        // Within the deadline: due.
        (
            &hourly,
            "2024-05-01T09:30:00Z",
            Some(600),
            "2024-05-01T10:05:00Z",
            Ok(Some("2024-05-01T10:00:00Z")),
            "2024-05-01T11:00:00Z",
        ),
        // A creation time in the future (clock skew): nothing due, next after now.
        (
            &hourly,
            "2024-05-01T12:00:00Z",
            None,
            "2024-05-01T10:05:00Z",
            Ok(None),
            "2024-05-01T11:00:00Z",
        ),
    ];
    for (schedule, last, deadline, now, missed, next) in cases {
        let got = due(schedule, ts(last), *deadline, ts(now));
        let want = missed.clone().map(|missed| Due {
            missed: missed.map(ts),
            next: Some(ts(next)),
        });
        assert_eq!(got, want, "last {last} deadline {deadline:?} now {now}");
    }
}

#[test]
fn too_late_runs() {
    let run = ts("2024-05-01T10:00:00Z");
    assert!(!too_late(run, None, ts("2030-01-01T00:00:00Z")));
    assert!(!too_late(run, Some(60), ts("2024-05-01T10:01:00Z")));
    assert!(too_late(run, Some(60), ts("2024-05-01T10:01:01Z")));
    assert!(too_late(run, Some(0), ts("2024-05-01T10:00:00.001Z")));
}

fn child(name: &str, finished: Option<Finished>, scheduled: &str, start: Option<&str>) -> Child {
    Child {
        name: name.into(),
        finished,
        scheduled_at: Some(ts(scheduled)),
        start_time: start.map(ts),
    }
}

fn policy(concurrency: &str) -> Policy {
    Policy {
        paused: false,
        concurrency: concurrency.into(),
        starting_deadline_seconds: None,
        successful_jobs_history_limit: Some(3),
        failed_jobs_history_limit: Some(1),
    }
}

#[test]
fn plans() {
    let minutely = parse("* * * * *", &utc()).expect("parses");
    let created = ts("2024-05-01T10:00:00Z");
    let running = child(
        "a-1",
        None,
        "2024-05-01T10:01:00Z",
        Some("2024-05-01T10:01:01Z"),
    );
    let done = |name: &str, at: &str, start: Option<&str>| {
        child(name, Some(Finished::Succeeded), at, start)
    };
    let failed =
        |name: &str, at: &str, start: Option<&str>| child(name, Some(Finished::Failed), at, start);

    // Nothing yet, first run due at 10:01.
    let p = plan(
        &policy("Allow"),
        Ok(&minutely),
        &[],
        None,
        created,
        ts("2024-05-01T10:01:02Z"),
    );
    assert_eq!(
        p.run,
        Some(Run {
            scheduled: ts("2024-05-01T10:01:00Z"),
            replace: vec![]
        })
    );
    assert_eq!(p.requeue_after, Some(SignedDuration::from_secs(58)));
    assert_eq!(p.last_schedule_time, None);

    // A run in flight at 10:01:30: status only, next look at 10:02.
    let p = plan(
        &policy("Allow"),
        Ok(&minutely),
        std::slice::from_ref(&running),
        None,
        created,
        ts("2024-05-01T10:01:30Z"),
    );
    assert_eq!((p.active.clone(), p.run.clone()), (vec![0], None));
    assert_eq!(p.last_schedule_time, Some(ts("2024-05-01T10:01:00Z")));
    assert_eq!(p.requeue_after, Some(SignedDuration::from_secs(30)));

    // 10:02:05 with the 10:01 job still running: Allow runs beside it, Forbid skips, Replace deletes it first.
    let now = ts("2024-05-01T10:02:05Z");
    let children = [running.clone(), done("a-0", "2024-05-01T10:00:00Z", None)];
    // The plans at 10:02:05 differ only in the policy and the children.
    let plan_now = |concurrency: &str, children: &[_]| {
        plan(
            &policy(concurrency),
            Ok(&minutely),
            children,
            None,
            created,
            now,
        )
    };
    let allow = plan_now("Allow", &children);
    assert_eq!(
        allow.run,
        Some(Run {
            scheduled: ts("2024-05-01T10:02:00Z"),
            replace: vec![]
        })
    );
    let forbid = plan_now("Forbid", &children);
    assert_eq!(forbid.run, None);
    assert_eq!(forbid.requeue_after, Some(SignedDuration::from_secs(55)));
    let forbid_idle = plan_now("Forbid", &children[1..]);
    assert!(forbid_idle.run.is_some());
    let replace = plan_now("Replace", &children);
    assert_eq!(
        replace.run,
        Some(Run {
            scheduled: ts("2024-05-01T10:02:00Z"),
            replace: vec![0]
        })
    );

    // Paused: status and pruning only, no run, no requeue.
    let paused = Policy {
        paused: true,
        ..policy("Allow")
    };
    let p = plan(&paused, Ok(&minutely), &children, None, created, now);
    assert_eq!((p.run, p.requeue_after, p.active), (None, None, vec![0]));

    // Starting deadline: 10:02 missed by 65 s with a 60 s deadline: skipped, wait for 10:03.
    let strict = Policy {
        starting_deadline_seconds: Some(60),
        ..policy("Allow")
    };
    let p = plan(
        &strict,
        Ok(&minutely),
        &[],
        Some(ts("2024-05-01T10:01:00Z")),
        created,
        ts("2024-05-01T10:03:05Z"),
    );
    assert_eq!(
        p.run,
        Some(Run {
            scheduled: ts("2024-05-01T10:03:00Z"),
            replace: vec![]
        })
    );
    let p = plan(
        &Policy {
            starting_deadline_seconds: Some(3),
            ..policy("Allow")
        },
        Ok(&minutely),
        &[],
        Some(ts("2024-05-01T10:01:00Z")),
        created,
        ts("2024-05-01T10:03:05Z"),
    );
    assert_eq!(p.run, None);
    assert_eq!(p.requeue_after, Some(SignedDuration::from_secs(55)));

    // A missed run long ago with a deadline that still covers it (created in the past).
    let p = plan(
        &Policy {
            starting_deadline_seconds: Some(300),
            ..policy("Allow")
        },
        Ok(&minutely),
        &[],
        None,
        ts("2020-01-01T00:00:00Z"),
        ts("2024-05-01T10:03:05Z"),
    );
    assert_eq!(p.run.map(|r| r.scheduled), Some(ts("2024-05-01T10:03:00Z")));

    // Too many missed without a deadline: a problem, no requeue.
    let p = plan(
        &policy("Allow"),
        Ok(&minutely),
        &[],
        None,
        ts("2024-05-01T00:00:00Z"),
        ts("2024-05-01T10:00:00Z"),
    );
    assert_eq!(
        (p.problem, p.requeue_after, p.run),
        (Some(Problem::TooManyMissed), None, None)
    );

    // An invalid schedule: a problem; status still computed.
    let bad = ScheduleError("expected exactly 5 fields, found 1: x".into());
    let p = plan(
        &policy("Allow"),
        Err(&bad),
        std::slice::from_ref(&running),
        None,
        created,
        now,
    );
    assert_eq!(p.problem, Some(Problem::InvalidSchedule(bad.0.clone())));
    assert_eq!(p.active, vec![0]);

    // History: 1 failed and 3 succeeded kept; the oldest go first, unstarted before started.
    let history = [
        done("s1", "2024-05-01T10:01:00Z", Some("2024-05-01T10:01:01Z")),
        failed("f1", "2024-05-01T10:02:00Z", Some("2024-05-01T10:02:01Z")),
        done("s2", "2024-05-01T10:03:00Z", None),
        done("s3", "2024-05-01T10:04:00Z", Some("2024-05-01T10:04:01Z")),
        failed("f2", "2024-05-01T10:05:00Z", Some("2024-05-01T10:05:01Z")),
        done("s4", "2024-05-01T10:06:00Z", Some("2024-05-01T10:06:01Z")),
        done("s5", "2024-05-01T10:07:00Z", Some("2024-05-01T10:07:01Z")),
    ];
    // The history plans at 10:07:30 differ only in the policy's limits.
    let prune_now = |policy: &Policy| {
        plan(
            policy,
            Ok(&minutely),
            &history,
            None,
            created,
            ts("2024-05-01T10:07:30Z"),
        )
    };
    let p = prune_now(&policy("Allow"));
    let pruned: Vec<&str> = p.prune.iter().map(|&i| history[i].name.as_str()).collect();
    assert_eq!(pruned, ["f1", "s2", "s1"]);
    assert_eq!(p.last_schedule_time, Some(ts("2024-05-01T10:07:00Z")));
    let none_kept = Policy {
        successful_jobs_history_limit: Some(0),
        failed_jobs_history_limit: Some(0),
        ..policy("Allow")
    };
    assert_eq!(prune_now(&none_kept).prune.len(), 7);
    let unlimited = Policy {
        successful_jobs_history_limit: None,
        failed_jobs_history_limit: None,
        ..policy("Allow")
    };
    assert!(prune_now(&unlimited).prune.is_empty());

    // All jobs pruned (limit 0): the recorded lastScheduleTime keeps the last run from repeating.
    let p = plan(
        &none_kept,
        Ok(&minutely),
        &[],
        Some(ts("2024-05-01T10:07:00Z")),
        created,
        ts("2024-05-01T10:07:30Z"),
    );
    assert_eq!(
        (p.run, p.last_schedule_time),
        (None, Some(ts("2024-05-01T10:07:00Z")))
    );
}

#[test]
fn names_and_annotations() {
    let at = ts("2024-05-01T10:02:00Z");
    assert_eq!(job_name("acj", at), "acj-1714557720");
    assert_eq!(scheduled_at(at, &utc()), "2024-05-01T10:02:00Z");
    let shanghai = TimeZone::get("Asia/Shanghai").expect("zone");
    assert_eq!(scheduled_at(at, &shanghai), "2024-05-01T18:02:00+08:00");
    assert_eq!(parse_scheduled_at("2024-05-01T18:02:00+08:00"), Some(at));
    assert_eq!(parse_scheduled_at("yesterday"), None);
}

proptest! {
    /// A missed run is never in the future, never before the window, and the next run is after now.
    #[test]
    fn due_stays_in_its_window(
        step in 1u32..30,
        last in 1_700_000_000i64..1_700_100_000,
        elapsed in 0i64..6_000,
        deadline in proptest::option::of(0i64..4_000),
    ) {
        let schedule = parse(&format!("*/{step} * * * *"), &utc()).expect("parses");
        let last = Timestamp::from_second(last).expect("in range");
        let now = Timestamp::from_second(last.as_second() + elapsed).expect("in range");
        if let Ok(due) = due(&schedule, last, deadline, now) {
            prop_assert!(due.next.is_some_and(|next| next > now));
            if let Some(missed) = due.missed {
                prop_assert!(missed <= now && missed > last);
                if let Some(deadline) = deadline {
                    prop_assert!(missed.as_second() > now.as_second() - deadline);
                }
                prop_assert!(schedule.next(missed).is_some_and(|after| after > now));
            }
        }
    }
}

#[test]
fn image_list_finished_table() {
    // (has completionTime, desired, succeeded) → finished
    let cases = [
        (false, 2, 2, None),
        (false, 2, 0, None),
        (true, 2, 2, Some(Finished::Succeeded)),
        (true, 2, 1, Some(Finished::Failed)),
        (true, 0, 0, Some(Finished::Succeeded)),
    ];
    for (completed, desired, succeeded, want) in cases {
        assert_eq!(
            image_list_finished(completed, desired, succeeded),
            want,
            "{completed} {desired} {succeeded}"
        );
    }
}
