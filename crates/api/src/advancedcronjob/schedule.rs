//! Cron schedules as OpenKruise's AdvancedCronJob reads them, and the next run after an instant.
//!
//! Upstream parses `spec.schedule` with the "standard" parser of its cron library: five fields (minute,
//! hour, day of month, month, day of week), with `*`, `?`, lists (`1,5`), ranges (`1-5`), steps (`*/5`,
//! `10-40/10`, `5/15` = `5-max/15`), month and weekday names (`jan`, `MON`), the descriptors `@yearly`
//! (`@annually`), `@monthly`, `@weekly`, `@daily` (`@midnight`), `@hourly` and `@every <duration>`
//! (a fixed interval in Go's duration syntax, at one-second granularity), and a leading `TZ=<zone>` or
//! `CRON_TZ=<zone>`. Day of month and day of week combine as in Vixie cron: when either field is `*`
//! (or `?`, or `*/1`) both must match, otherwise either may. Ranges are checked (minute 0-59, hour 0-23,
//! day 1-31, month 1-12, weekday 0-6).
//!
//! The next run is searched in the schedule's time zone the way upstream's library does it: months and
//! days advance in civil time, hours and minutes in absolute time, so a wall-clock time that a
//! daylight-saving change skips does not run that day, and one it repeats runs once per instant it
//! matches. A schedule that matches nothing within five years (`0 0 30 2 *`) has no next run.
//!
//! Everything here is pure: the caller passes the instant to search from and the process's own time
//! zone (used when the schedule names none). It lives in kruise-api because the validating webhook
//! parses schedules; which runs are due (`kruise_core::advancedcronjob`) builds on it.

use std::fmt;

use k8s_openapi::jiff::civil::{Date, DateTime};
use k8s_openapi::jiff::tz::TimeZone;
use k8s_openapi::jiff::{SignedDuration, Timestamp, ToSpan, Zoned};

/// A schedule that does not parse, in words close to upstream's library.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduleError(pub String);

impl fmt::Display for ScheduleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ScheduleError {}

fn error(message: impl Into<String>) -> ScheduleError {
    ScheduleError(message.into())
}

/// Set in a field's bits when it was written as `*` or `?` (with no step above 1).
const STAR: u64 = 1 << 63;

#[derive(Clone, Copy, Debug)]
struct Bounds {
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const MINUTE: Bounds = Bounds {
    min: 0,
    max: 59,
    names: &[],
};
const HOUR: Bounds = Bounds {
    min: 0,
    max: 23,
    names: &[],
};
const DOM: Bounds = Bounds {
    min: 1,
    max: 31,
    names: &[],
};
const MONTH: Bounds = Bounds {
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
};
const DOW: Bounds = Bounds {
    min: 0,
    max: 6,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
};

#[derive(Clone, Debug, PartialEq, Eq)]
struct Fields {
    minute: u64,
    hour: u64,
    dom: u64,
    month: u64,
    dow: u64,
}

#[derive(Clone, Debug, PartialEq)]
enum Spec {
    Fields(Fields),
    /// `@every`: whole seconds, at least one.
    Every(i64),
}

/// A parsed schedule and the time zone it runs in.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    spec: Spec,
    tz: TimeZone,
}

/// Go's `time.LoadLocation`: `""` and `UTC` are UTC, `Local` is the process's zone, anything else an
/// IANA name from the time zone database.
pub fn load_location(name: &str, local: &TimeZone) -> Result<TimeZone, ScheduleError> {
    match name {
        "" | "UTC" => Ok(TimeZone::UTC),
        "Local" => Ok(local.clone()),
        _ => TimeZone::get(name).map_err(|_| error(format!("unknown time zone {name}"))),
    }
}

/// Parses a schedule as upstream's standard parser does (`TZ=` prefix, descriptors, five fields);
/// `local` is the zone of a schedule that names none.
pub fn parse(spec: &str, local: &TimeZone) -> Result<Schedule, ScheduleError> {
    if spec.is_empty() {
        return Err(error("empty spec string"));
    }
    let mut rest = spec;
    let mut tz = local.clone();
    if rest.starts_with("TZ=") || rest.starts_with("CRON_TZ=") {
        let Some(space) = rest.find(' ') else {
            return Err(error(format!(
                "time zone prefix without a schedule: {spec:?}"
            )));
        };
        let eq = rest.find('=').unwrap_or(0);
        let name = &rest[eq + 1..space];
        tz = load_location(name, local)
            .map_err(|e| error(format!("provided bad location {name}: {e}")))?;
        rest = rest[space..].trim();
    }
    if rest.starts_with('@') {
        return Ok(Schedule {
            spec: descriptor(rest)?,
            tz,
        });
    }
    let fields: Vec<&str> = rest.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(error(format!(
            "expected exactly 5 fields, found {}: {rest}",
            fields.len()
        )));
    }
    Ok(Schedule {
        spec: Spec::Fields(Fields {
            minute: field(fields[0], MINUTE)?,
            hour: field(fields[1], HOUR)?,
            dom: field(fields[2], DOM)?,
            month: field(fields[3], MONTH)?,
            dow: field(fields[4], DOW)?,
        }),
        tz,
    })
}

/// The schedule an AdvancedCronJob runs on (upstream's controller): `spec.schedule` as written when it
/// names a zone itself (contains `TZ`), otherwise in `spec.timeZone` when that loads, otherwise in the
/// process's zone.
pub fn for_cron_job(
    schedule: &str,
    time_zone: Option<&str>,
    local: &TimeZone,
) -> Result<Schedule, ScheduleError> {
    if schedule.contains("TZ") {
        return parse(schedule, local);
    }
    match time_zone.map(|name| load_location(name, local)) {
        Some(Ok(tz)) => parse(schedule, &tz),
        _ => parse(schedule, local),
    }
}

fn descriptor(spec: &str) -> Result<Spec, ScheduleError> {
    let standard = match spec {
        "@yearly" | "@annually" => "0 0 1 1 *",
        "@monthly" => "0 0 1 * *",
        "@weekly" => "0 0 * * 0",
        "@daily" | "@midnight" => "0 0 * * *",
        "@hourly" => "0 * * * *",
        _ => {
            if let Some(duration) = spec.strip_prefix("@every ") {
                let nanos = go_duration(duration)
                    .map_err(|e| error(format!("failed to parse duration {spec}: {e}")))?;
                // Below one second runs every second; otherwise whole seconds (truncated).
                let seconds = (nanos / 1_000_000_000).max(1);
                let seconds = i64::try_from(seconds).map_err(|_| error("duration too long"))?;
                return Ok(Spec::Every(seconds));
            }
            return Err(error(format!("unrecognized descriptor: {spec}")));
        }
    };
    let fields: Vec<&str> = standard.split(' ').collect();
    Ok(Spec::Fields(Fields {
        minute: field(fields[0], MINUTE)?,
        hour: field(fields[1], HOUR)?,
        dom: field(fields[2], DOM)?,
        month: field(fields[3], MONTH)?,
        dow: field(fields[4], DOW)?,
    }))
}

/// Go's `time.ParseDuration`, in nanoseconds (negative durations refused: a schedule cannot use them).
fn go_duration(text: &str) -> Result<u128, String> {
    let invalid = || format!("time: invalid duration {text:?}");
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest.starts_with('-') {
        return Err(invalid());
    }
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number = &rest[..number_len];
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(invalid());
        }
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit: u128 = match &rest[..unit_len] {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(format!("time: missing unit in duration {text:?}")),
            other => return Err(format!("time: unknown unit {other:?} in duration {text:?}")),
        };
        rest = &rest[unit_len..];
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| invalid())?
        };
        let mut value = whole.checked_mul(unit).ok_or_else(invalid)?;
        let mut scale = unit;
        for digit in fraction.bytes() {
            scale /= 10;
            value += u128::from(digit - b'0') * scale;
        }
        total = total.checked_add(value).ok_or_else(invalid)?;
        if total > i64::MAX as u128 {
            return Err(invalid());
        }
    }
    Ok(total)
}

fn field(text: &str, bounds: Bounds) -> Result<u64, ScheduleError> {
    let mut bits = 0;
    for part in text.split(',') {
        bits |= range(part, bounds)?;
    }
    Ok(bits)
}

fn range(text: &str, bounds: Bounds) -> Result<u64, ScheduleError> {
    let range_and_step: Vec<&str> = text.split('/').collect();
    let low_and_high: Vec<&str> = range_and_step[0].split('-').collect();
    let single = low_and_high.len() == 1;
    let (start, mut end, mut extra);
    if low_and_high[0] == "*" || low_and_high[0] == "?" {
        start = bounds.min;
        end = bounds.max;
        extra = STAR;
    } else {
        start = value(low_and_high[0], bounds)?;
        end = match low_and_high.len() {
            1 => start,
            2 => value(low_and_high[1], bounds)?,
            _ => return Err(error(format!("too many hyphens: {text}"))),
        };
        extra = 0;
    }
    let step = match range_and_step.len() {
        1 => 1,
        2 => {
            let step = number(range_and_step[1])?;
            // `N/step` means `N-max/step`.
            if single {
                end = bounds.max;
            }
            if step > 1 {
                extra = 0;
            }
            step
        }
        _ => return Err(error(format!("too many slashes: {text}"))),
    };
    if start < bounds.min {
        return Err(error(format!(
            "beginning of range ({start}) below minimum ({}): {text}",
            bounds.min
        )));
    }
    if end > bounds.max {
        return Err(error(format!(
            "end of range ({end}) above maximum ({}): {text}",
            bounds.max
        )));
    }
    if start > end {
        return Err(error(format!(
            "beginning of range ({start}) beyond end of range ({end}): {text}"
        )));
    }
    if step == 0 {
        return Err(error(format!(
            "step of range should be a positive number: {text}"
        )));
    }
    let mut bits = 0u64;
    let mut at = start;
    while at <= end {
        bits |= 1 << at;
        at += step;
    }
    Ok(bits | extra)
}

fn value(text: &str, bounds: Bounds) -> Result<u32, ScheduleError> {
    let lower = text.to_ascii_lowercase();
    if let Some(at) = bounds.names.iter().position(|name| *name == lower) {
        let at = u32::try_from(at).unwrap_or(0);
        return Ok(at + if bounds.min == 1 { 1 } else { 0 });
    }
    number(text)
}

fn number(text: &str) -> Result<u32, ScheduleError> {
    let parsed: i64 = text
        .parse()
        .map_err(|_| error(format!("failed to parse int from {text}")))?;
    if parsed < 0 {
        return Err(error(format!(
            "negative number ({parsed}) not allowed: {text}"
        )));
    }
    // Anything past 63 is out of every field's range; the range check names it.
    Ok(u32::try_from(parsed.min(64)).unwrap_or(64))
}

fn has(bits: u64, at: i8) -> bool {
    (0..63).contains(&at) && bits & (1 << at) != 0
}

impl Fields {
    fn day_matches(&self, z: &Zoned) -> bool {
        let dom = has(self.dom, z.day());
        let dow = has(self.dow, z.weekday().to_sunday_zero_offset());
        if self.dom & STAR != 0 || self.dow & STAR != 0 {
            dom && dow
        } else {
            dom || dow
        }
    }
}

/// Midnight (or the first instant) of a civil date in `tz`.
fn at(tz: &TimeZone, date: Date, hour: i8, minute: i8) -> Option<Zoned> {
    DateTime::from_parts(date, k8s_openapi::jiff::civil::time(hour, minute, 0, 0))
        .to_zoned(tz.clone())
        .ok()
}

impl Schedule {
    /// The time zone the schedule runs in.
    pub fn time_zone(&self) -> &TimeZone {
        &self.tz
    }

    /// The first run strictly after `after`, or `None` when none falls within five years.
    pub fn next(&self, after: Timestamp) -> Option<Timestamp> {
        match &self.spec {
            Spec::Every(seconds) => {
                let whole = Timestamp::from_second(after.as_second()).ok()?;
                whole.checked_add(SignedDuration::from_secs(*seconds)).ok()
            }
            Spec::Fields(fields) => self.next_fields(fields, after),
        }
    }

    fn next_fields(&self, f: &Fields, after: Timestamp) -> Option<Timestamp> {
        // The next whole second (minute granularity follows from the loops below).
        let start = Timestamp::from_second(after.as_second().checked_add(1)?).ok()?;
        let mut t = start.to_zoned(self.tz.clone());
        let year_limit = t.year().checked_add(5)?;
        let mut added = false;
        'wrap: loop {
            if t.year() > year_limit {
                return None;
            }
            while !has(f.month, t.month()) {
                if !added {
                    added = true;
                    t = at(&self.tz, Date::new(t.year(), t.month(), 1).ok()?, 0, 0)?;
                }
                t = t.checked_add(1.month()).ok()?;
                if t.month() == 1 {
                    continue 'wrap;
                }
            }
            while !f.day_matches(&t) {
                if !added {
                    added = true;
                    t = at(&self.tz, t.date(), 0, 0)?;
                }
                t = t.checked_add(1.day()).ok()?;
                // A daylight-saving change at midnight moves the hour: back to the day's start.
                if t.hour() != 0 {
                    let shift = if t.hour() > 12 {
                        24 - i64::from(t.hour())
                    } else {
                        -i64::from(t.hour())
                    };
                    t = t.checked_add(SignedDuration::from_hours(shift)).ok()?;
                }
                if t.day() == 1 {
                    continue 'wrap;
                }
            }
            while !has(f.hour, t.hour()) {
                if !added {
                    added = true;
                    t = at(&self.tz, t.date(), t.hour(), 0)?;
                }
                t = t.checked_add(SignedDuration::from_hours(1)).ok()?;
                if t.hour() == 0 {
                    continue 'wrap;
                }
            }
            while !has(f.minute, t.minute()) {
                if !added {
                    added = true;
                    t = t
                        .checked_sub(SignedDuration::from_secs(i64::from(t.second())))
                        .ok()?;
                }
                t = t.checked_add(SignedDuration::from_mins(1)).ok()?;
                if t.minute() == 0 {
                    continue 'wrap;
                }
            }
            // Seconds: always 0 in a five-field schedule; move to the next minute and check again.
            if t.second() != 0 {
                added = true;
                let to_next_minute = 60 - i64::from(t.second());
                t = t
                    .checked_add(SignedDuration::from_secs(to_next_minute))
                    .ok()?;
                continue 'wrap;
            }
            return Some(t.timestamp());
        }
    }
}

#[cfg(test)]
mod tests;
