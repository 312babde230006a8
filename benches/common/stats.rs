//! Small figures: percentiles of measured durations, memory in MiB.

use std::time::Duration;

/// Percentile `q` (0..=1) of `durations` by nearest rank (the smallest value with at least `q` of the
/// values at or below it). `None` when empty.
pub fn percentile(durations: &[Duration], q: f64) -> Option<Duration> {
    if durations.is_empty() {
        return None;
    }
    let mut sorted = durations.to_vec();
    sorted.sort_unstable();
    let rank = (q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// A duration in milliseconds with two decimals, e.g. `1.25 ms`.
pub fn ms(duration: Duration) -> String {
    format!("{:.2} ms", duration.as_secs_f64() * 1000.0)
}

/// Seconds (as Prometheus reports them) in milliseconds with three decimals, e.g. `0.412 ms`.
pub fn seconds_as_ms(seconds: f64) -> String {
    format!("{:.3} ms", seconds * 1000.0)
}

/// Prints `{what}: <seconds> s (<pods per second> Pods/s)`: how the benches report a create or a
/// rollout of `pods` Pods that took `took`, in one wording.
pub fn print_rate(what: &str, took: Duration, pods: f64) {
    println!(
        "{what}: {:.1} s ({:.0} Pods/s)",
        took.as_secs_f64(),
        pods / took.as_secs_f64()
    );
}

/// KiB (as /proc reports them) in MiB, e.g. `41.3 MiB`.
pub fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let ms = |v: u64| Duration::from_millis(v);
        let hundred: Vec<Duration> = (1..=100).rev().map(ms).collect();
        let cases: &[(&[Duration], f64, Option<Duration>)] = &[
            (&[], 0.5, None),
            (&[ms(7)], 0.99, Some(ms(7))),
            (&hundred, 0.5, Some(ms(50))),
            (&hundred, 0.99, Some(ms(99))),
            (&hundred, 1.0, Some(ms(100))),
            (&hundred, 0.0, Some(ms(1))),
            (&[ms(3), ms(1), ms(2)], 0.5, Some(ms(2))),
        ];
        for (values, q, want) in cases {
            assert_eq!(percentile(values, *q), *want, "q {q} of {values:?}");
        }
    }

    #[test]
    fn units() {
        assert_eq!(ms(Duration::from_micros(1250)), "1.25 ms");
        assert_eq!(seconds_as_ms(0.000_412), "0.412 ms");
        assert_eq!(mib(42_291), "41.3 MiB");
    }
}
