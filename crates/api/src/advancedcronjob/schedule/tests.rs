use super::*;
use proptest::prelude::*;

fn ts(text: &str) -> Timestamp {
    text.parse().expect("timestamp")
}

fn utc() -> TimeZone {
    TimeZone::UTC
}

fn next_of(spec: &str, after: &str) -> Option<String> {
    parse(spec, &utc())
        .expect("parses")
        .next(ts(after))
        .map(|t| t.to_string())
}

#[test]
fn next_runs() {
    let cases: &[(&str, &str, Option<&str>)] = &[
        (
            "*/5 * * * *",
            "2024-05-01T10:02:30Z",
            Some("2024-05-01T10:05:00Z"),
        ),
        (
            "*/5 * * * *",
            "2024-05-01T10:05:00Z",
            Some("2024-05-01T10:10:00Z"),
        ),
        (
            "* * * * *",
            "2024-05-01T10:05:00.5Z",
            Some("2024-05-01T10:06:00Z"),
        ),
        (
            "*/1 * * * *",
            "2024-05-01T23:59:59Z",
            Some("2024-05-02T00:00:00Z"),
        ),
        (
            "0 9 * * 1-5",
            "2024-05-03T09:00:00Z",
            Some("2024-05-06T09:00:00Z"),
        ),
        (
            "0 9 * * MON-fri",
            "2024-05-04T00:00:00Z",
            Some("2024-05-06T09:00:00Z"),
        ),
        (
            "15,45 */6 * * *",
            "2024-05-01T06:20:00Z",
            Some("2024-05-01T06:45:00Z"),
        ),
        (
            "5/20 * * * *",
            "2024-05-01T10:26:00Z",
            Some("2024-05-01T10:45:00Z"),
        ),
        (
            "10-40/15 1 * * *",
            "2024-05-01T01:26:00Z",
            Some("2024-05-01T01:40:00Z"),
        ),
        (
            "0 0 1 jan *",
            "2024-05-01T00:00:00Z",
            Some("2025-01-01T00:00:00Z"),
        ),
        (
            "0 0 29 2 *",
            "2024-03-01T00:00:00Z",
            Some("2028-02-29T00:00:00Z"),
        ),
        (
            "0 0 31 * *",
            "2024-04-01T00:00:00Z",
            Some("2024-05-31T00:00:00Z"),
        ),
        // Day of month OR day of week when neither is `*`: the 13th, or a Friday.
        (
            "0 0 13 * 5",
            "2024-09-01T00:00:00Z",
            Some("2024-09-06T00:00:00Z"),
        ),
        (
            "0 0 13 * 5",
            "2024-09-12T00:00:00Z",
            Some("2024-09-13T00:00:00Z"),
        ),
        // `*` in one of them: both must match (the 13th that is a Friday).
        (
            "0 0 13 * *",
            "2024-09-01T00:00:00Z",
            Some("2024-09-13T00:00:00Z"),
        ),
        (
            "0 0 * * 5",
            "2024-09-07T00:00:00Z",
            Some("2024-09-13T00:00:00Z"),
        ),
        (
            "0 0 ? * 5",
            "2024-09-07T00:00:00Z",
            Some("2024-09-13T00:00:00Z"),
        ),
        (
            "@hourly",
            "2024-05-01T10:00:00Z",
            Some("2024-05-01T11:00:00Z"),
        ),
        (
            "@daily",
            "2024-05-01T10:00:00Z",
            Some("2024-05-02T00:00:00Z"),
        ),
        (
            "@midnight",
            "2024-05-01T10:00:00Z",
            Some("2024-05-02T00:00:00Z"),
        ),
        (
            "@weekly",
            "2024-05-01T10:00:00Z",
            Some("2024-05-05T00:00:00Z"),
        ),
        (
            "@monthly",
            "2024-05-01T10:00:00Z",
            Some("2024-06-01T00:00:00Z"),
        ),
        (
            "@yearly",
            "2024-05-01T10:00:00Z",
            Some("2025-01-01T00:00:00Z"),
        ),
        (
            "@annually",
            "2024-05-01T10:00:00Z",
            Some("2025-01-01T00:00:00Z"),
        ),
        // `@every`: from the whole second, at one-second granularity.
        (
            "@every 10s",
            "2024-05-01T10:00:03.5Z",
            Some("2024-05-01T10:00:13Z"),
        ),
        (
            "@every 1m30s",
            "2024-05-01T10:00:00Z",
            Some("2024-05-01T10:01:30Z"),
        ),
        (
            "@every 1.5h",
            "2024-05-01T10:00:00Z",
            Some("2024-05-01T11:30:00Z"),
        ),
        (
            "@every 300ms",
            "2024-05-01T10:00:00Z",
            Some("2024-05-01T10:00:01Z"),
        ),
        (
            "@every 2500ms",
            "2024-05-01T10:00:00Z",
            Some("2024-05-01T10:00:02Z"),
        ),
        // Never within five years.
        ("0 0 30 2 *", "2024-01-01T00:00:00Z", None),
    ];
    for (spec, after, want) in cases {
        assert_eq!(
            next_of(spec, after).as_deref(),
            *want,
            "{spec} after {after}"
        );
    }
}

#[test]
fn time_zones_and_daylight_saving() {
    let local = utc();
    let cases: &[(&str, Option<&str>, &str, &str)] = &[
        // 09:00 in Shanghai (UTC+8).
        (
            "0 9 * * *",
            Some("Asia/Shanghai"),
            "2024-05-01T02:00:00Z",
            "2024-05-02T01:00:00Z",
        ),
        (
            "TZ=Asia/Shanghai 0 9 * * *",
            None,
            "2024-05-01T00:00:00Z",
            "2024-05-01T01:00:00Z",
        ),
        (
            "CRON_TZ=Asia/Shanghai 0 9 * * *",
            None,
            "2024-05-01T00:00:00Z",
            "2024-05-01T01:00:00Z",
        ),
        // A `TZ=` in the schedule wins over `timeZone`.
        (
            "TZ=Asia/Shanghai 0 9 * * *",
            Some("America/New_York"),
            "2024-05-01T00:00:00Z",
            "2024-05-01T01:00:00Z",
        ),
        // A `timeZone` that does not load is ignored (the webhook refuses it on create).
        (
            "0 9 * * *",
            Some("Mars/Olympus"),
            "2024-05-01T00:00:00Z",
            "2024-05-01T09:00:00Z",
        ),
        // New York springs forward on 2024-03-10 at 02:00 EST: 02:30 does not exist that day.
        (
            "30 2 * * *",
            Some("America/New_York"),
            "2024-03-10T05:00:00Z",
            "2024-03-11T06:30:00Z",
        ),
        // 03:30 the same day exists (EDT, UTC-4).
        (
            "30 3 * * *",
            Some("America/New_York"),
            "2024-03-10T05:00:00Z",
            "2024-03-10T07:30:00Z",
        ),
        // Falls back on 2024-11-03 at 02:00 EDT: 01:30 happens twice, once per offset.
        (
            "30 1 * * *",
            Some("America/New_York"),
            "2024-11-03T04:00:00Z",
            "2024-11-03T05:30:00Z",
        ),
        (
            "30 1 * * *",
            Some("America/New_York"),
            "2024-11-03T05:30:00Z",
            "2024-11-03T06:30:00Z",
        ),
        (
            "30 1 * * *",
            Some("America/New_York"),
            "2024-11-03T06:30:00Z",
            "2024-11-04T06:30:00Z",
        ),
        // Daily at midnight across the change keeps local midnight.
        (
            "@daily",
            Some("America/New_York"),
            "2024-03-10T05:00:00Z",
            "2024-03-11T04:00:00Z",
        ),
        (
            "0 0 * * *",
            Some("Europe/Berlin"),
            "2024-10-26T22:00:00Z",
            "2024-10-27T23:00:00Z",
        ),
        // `@every` is a fixed interval whatever the zone.
        (
            "@every 1h",
            Some("America/New_York"),
            "2024-03-10T06:30:00Z",
            "2024-03-10T07:30:00Z",
        ),
    ];
    for (spec, zone, after, want) in cases {
        let schedule = for_cron_job(spec, *zone, &local).expect("parses");
        assert_eq!(
            schedule.next(ts(after)).map(|t| t.to_string()).as_deref(),
            Some(*want),
            "{spec} in {zone:?} after {after}"
        );
    }
    // The process's own zone when the schedule names none.
    let berlin = TimeZone::get("Europe/Berlin").expect("zone");
    let schedule = for_cron_job("0 12 * * *", None, &berlin).expect("parses");
    assert_eq!(
        schedule.next(ts("2024-07-01T00:00:00Z")),
        Some(ts("2024-07-01T10:00:00Z"))
    );
}

#[test]
fn invalid_schedules() {
    let cases: &[(&str, &str)] = &[
        ("", "empty spec string"),
        ("* * * *", "expected exactly 5 fields, found 4: * * * *"),
        ("* * * * * *", "expected exactly 5 fields, found 6"),
        ("60 * * * *", "end of range (60) above maximum (59): 60"),
        ("* 24 * * *", "above maximum (23)"),
        ("* * 0 * *", "beginning of range (0) below minimum (1): 0"),
        ("* * * 13 *", "above maximum (12)"),
        ("* * * * 7", "end of range (7) above maximum (6): 7"),
        (
            "5-1 * * * *",
            "beginning of range (5) beyond end of range (1): 5-1",
        ),
        ("1-2-3 * * * *", "too many hyphens: 1-2-3"),
        ("*/2/3 * * * *", "too many slashes: */2/3"),
        (
            "*/0 * * * *",
            "step of range should be a positive number: */0",
        ),
        ("a * * * *", "failed to parse int from a"),
        ("-1 * * * *", "failed to parse int from "),
        ("* * * foo *", "failed to parse int from foo"),
        ("@fortnightly", "unrecognized descriptor: @fortnightly"),
        ("@every", "unrecognized descriptor: @every"),
        (
            "@every 10",
            "failed to parse duration @every 10: time: missing unit",
        ),
        ("@every 10x", "unknown unit \"x\""),
        ("@every -10s", "invalid duration"),
        (
            "TZ=Nowhere/City * * * * *",
            "provided bad location Nowhere/City",
        ),
        ("TZ=UTC", "time zone prefix without a schedule"),
    ];
    for (spec, want) in cases {
        match parse(spec, &utc()) {
            Ok(schedule) => panic!("{spec:?} parsed as {schedule:?}"),
            Err(ScheduleError(message)) => {
                assert!(
                    message.contains(want),
                    "{spec:?}: {message:?} lacks {want:?}"
                )
            }
        }
    }
}

#[test]
fn locations() {
    let local = TimeZone::get("Asia/Tokyo").expect("zone");
    assert_eq!(load_location("", &local), Ok(TimeZone::UTC));
    assert_eq!(load_location("UTC", &local), Ok(TimeZone::UTC));
    assert_eq!(load_location("Local", &local), Ok(local.clone()));
    assert!(load_location("Europe/Paris", &local).is_ok());
    assert_eq!(
        load_location("Europe/Nowhere", &local),
        Err(ScheduleError("unknown time zone Europe/Nowhere".into()))
    );
}

fn matches_utc(minutes: &[i8], hours: &[i8], t: Timestamp) -> bool {
    let z = t.to_zoned(TimeZone::UTC);
    z.second() == 0
        && z.subsec_nanosecond() == 0
        && minutes.contains(&z.minute())
        && hours.contains(&z.hour())
}

proptest! {
    /// `next` returns the first matching minute after `after`: later, matching, and no matching
    /// minute in between.
    #[test]
    fn next_is_the_first_match(
        minutes in proptest::collection::btree_set(0i8..60, 1..4),
        hours in proptest::collection::btree_set(0i8..24, 1..4),
        after in 1_700_000_000i64..1_800_000_000,
    ) {
        let minutes: Vec<i8> = minutes.into_iter().collect();
        let hours: Vec<i8> = hours.into_iter().collect();
        let spec = format!(
            "{} {} * * *",
            minutes.iter().map(i8::to_string).collect::<Vec<_>>().join(","),
            hours.iter().map(i8::to_string).collect::<Vec<_>>().join(","),
        );
        let schedule = parse(&spec, &utc()).expect("parses");
        let after = Timestamp::from_second(after).expect("in range");
        let next = schedule.next(after).expect("a daily schedule always has a next run");
        prop_assert!(next > after);
        prop_assert!(matches_utc(&minutes, &hours, next), "{spec}: {next}");
        let mut probe = Timestamp::from_second(after.as_second() - after.as_second().rem_euclid(60) + 60)
            .expect("in range");
        while probe < next {
            prop_assert!(!matches_utc(&minutes, &hours, probe), "{spec}: {probe} skipped before {next}");
            probe = probe.checked_add(SignedDuration::from_mins(1)).expect("in range");
        }
    }
}
