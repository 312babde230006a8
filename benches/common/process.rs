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

/// CPU time of a set of processes over one phase of a bench: where the machine's cores went.
pub struct CpuMeter {
    began: std::time::Instant,
    start: Vec<(String, u32, f64)>,
}

impl CpuMeter {
    /// Starts measuring `processes` (name, pid); one that cannot be read counts nothing.
    pub fn start(processes: Vec<(String, u32)>) -> Self {
        let start = processes
            .into_iter()
            .map(|(name, pid)| {
                let cpu = cpu_seconds(pid).unwrap_or(0.0);
                (name, pid, cpu)
            })
            .collect();
        Self {
            began: std::time::Instant::now(),
            start,
        }
    }

    /// The CPU each process used since [`CpuMeter::start`].
    pub fn read(&self) -> CpuUse {
        let elapsed = self.began.elapsed().as_secs_f64();
        let used = self
            .start
            .iter()
            .map(|(name, pid, before)| {
                let now = cpu_seconds(*pid).unwrap_or(*before);
                (name.clone(), (now - before).max(0.0))
            })
            .collect();
        CpuUse { elapsed, used }
    }
}

/// CPU seconds per process over a phase of `elapsed` seconds.
pub struct CpuUse {
    pub elapsed: f64,
    pub used: Vec<(String, f64)>,
}

impl CpuUse {
    /// "kube-apiserver 120.1 s, etcd 20.3 s, …; 180.0 s of the 2 cores' 200.0 s (90%)", the
    /// largest first.
    pub fn describe(&self) -> String {
        let mut used = self.used.clone();
        used.sort_by(|a, b| b.1.total_cmp(&a.1));
        let total: f64 = used.iter().map(|(_, s)| s).sum();
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        let available = self.elapsed * cores as f64;
        let each: Vec<String> = used
            .iter()
            .map(|(name, s)| format!("{name} {s:.1} s"))
            .collect();
        format!(
            "{}; {total:.1} s of the {cores} cores' {available:.1} s ({:.0}%)",
            each.join(", "),
            if available > 0.0 {
                total * 100.0 / available
            } else {
                0.0
            }
        )
    }
}

/// The processes of `plane` (kubelet-sim included) and this bench process, named.
pub fn plane_and_bench(plane: &ControlPlane) -> Vec<(String, u32)> {
    let mut processes = plane.pids();
    processes.push(("bench".to_string(), std::process::id()));
    processes
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
    fn cpu_use_is_described_largest_first() {
        let used = CpuUse {
            elapsed: 10.0,
            used: vec![("etcd".into(), 2.0), ("kube-apiserver".into(), 8.0)],
        };
        let text = used.describe();
        assert!(
            text.starts_with("kube-apiserver 8.0 s, etcd 2.0 s; 10.0 s of the "),
            "{text}"
        );
    }

    #[test]
    fn this_process_has_a_cpu_time() {
        assert!(cpu_seconds(std::process::id()).is_some());
    }
}
