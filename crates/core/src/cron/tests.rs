use super::*;
use k8s_openapi::jiff::tz::TimeZone;
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
