//! What a component process costs, read from `/proc`: CPU time (memory is
//! [`kruise_testkit::process::rss_kib`]).

use kruise_testkit::control_plane::ControlPlane;

/// Clock ticks per second of `/proc/<pid>/stat` times (`USER_HZ`: 100 on every architecture the
/// benches run on).
const USER_HZ: f64 = 100.0;

/// CPU seconds (user + system, all threads) the process has used since it started.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    parse_cpu_seconds(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// `utime + stime` from a `/proc/<pid>/stat` line. The command name (field 2) may hold spaces and
/// parentheses, so the fields are counted after its closing parenthesis: there `state` is the first,
/// `utime` the 12th and `stime` the 13th.
fn parse_cpu_seconds(stat: &str) -> Option<f64> {
    let (_, after_name) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i)?.parse::<u64>().ok();
    Some((ticks(11)? + ticks(12)?) as f64 / USER_HZ)
}

/// The pid of the process `name` that `plane` owns.
pub fn pid_of(plane: &ControlPlane, name: &str) -> Option<u32> {
    plane
        .pids()
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, pid)| pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines() {
        let cases = [
            (
                "25125 (cat) R 25122 25122 20235 0 -1 4194304 122 0 0 0 150 25 0 0 20 0 1 0 1916268",
                Some(1.75),
            ),
            (
                "7 (tokio-rt (x) y) S 1 7 7 0 -1 4194304 10 0 0 0 1000 200 0 0 20 0 9 0 1",
                Some(12.0),
            ),
            ("7 (short) S 1", None),
            ("garbage", None),
        ];
        for (line, want) in cases {
            assert_eq!(parse_cpu_seconds(line), want, "{line}");
        }
    }

    #[test]
    fn this_process_has_a_cpu_time() {
        assert!(cpu_seconds(std::process::id()).is_some());
    }
}
