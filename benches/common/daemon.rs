//! Node agents as the benches run them, on a real node of [`kruise_testkit::realnode`]: kruise-rs's
//! kruise-daemon as the test bed starts it ([`kruise_testkit::daemon::spawn_on`]), or OpenKruise's own
//! (`make openkruise`: `bin/kruise-daemon`) the same way, in the node's network namespace on the
//! node's containerd; and what a daemon process costs over a phase (CPU from `/proc/<pid>/stat`, RSS
//! sampled from `/proc/<pid>/status`).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use kruise_testkit::control_plane::ControlPlane;
use kruise_testkit::daemon::{Daemon, DaemonHost, http_get};
use kruise_testkit::process::{Process, free_port, rss_kib};

use crate::process::{cpu_seconds, pid_of};

/// Where upstream's daemon looks for the CRI socket: `/hostvarrun/<--socket-file>` (its chart mounts
/// the host's /var/run there). Not configurable.
const UPSTREAM_VAR_RUN: &str = "/hostvarrun";

/// One running node agent.
pub struct NodeAgent {
    /// "kruise-rs" or "OpenKruise v1.9.0".
    pub which: String,
    pub pid: u32,
    pub daemon: Daemon,
}

impl NodeAgent {
    /// kruise-rs's kruise-daemon for `host` (`$KRUISE_DAEMON_BIN`, else next to the bench), ready
    /// (`/readyz`) when this returns.
    pub async fn start_kruise_rs(plane: &ControlPlane, host: &DaemonHost) -> anyhow::Result<Self> {
        let daemon = kruise_testkit::daemon::spawn_on(plane, host)?;
        kruise_testkit::daemon::wait_ready(std::slice::from_ref(&daemon), Duration::from_secs(90))
            .await?;
        let pid = pid_of(plane, &format!("kruise-daemon-{}", host.node))
            .context("the kruise-daemon process")?;
        Ok(Self {
            which: format!("kruise-rs {}", env!("CARGO_PKG_VERSION")),
            pid,
            daemon,
        })
    }

    /// OpenKruise's kruise-daemon from `dir` for `host`, started the way its chart's DaemonSet runs
    /// it, out of a Pod: `NODE_NAME` and `KUBECONFIG` (the node's kubeconfig) in its environment, in
    /// the node's network namespace, `--addr` on the node's address, no pprof listener, and the
    /// node's containerd socket where upstream looks for it: `/hostvarrun/<--socket-file>`. The
    /// socket's folder is bind-mounted on `/hostvarrun` inside the mount namespace `ip netns exec`
    /// makes (private to the daemon); the empty `/hostvarrun` mount point is created on the host if
    /// missing. Ready (`/healthz`) when this returns.
    pub async fn start_openkruise(
        plane: &ControlPlane,
        dir: &Path,
        host: &DaemonHost,
    ) -> anyhow::Result<Self> {
        let binary = dir.join("bin/kruise-daemon");
        ensure!(
            binary.is_file(),
            "no OpenKruise daemon at {} (run `make openkruise`)",
            binary.display()
        );
        let socket_dir = host
            .socket
            .parent()
            .context("the containerd socket has no folder")?;
        let socket_file = host
            .socket
            .file_name()
            .and_then(|name| name.to_str())
            .context("the containerd socket has no file name")?;
        std::fs::create_dir_all(UPSTREAM_VAR_RUN)
            .with_context(|| format!("creating the mount point {UPSTREAM_VAR_RUN}"))?;
        let port = free_port()?;
        let name = format!("openkruise-daemon-{}", host.node);
        let log = plane.dir().join(format!("{name}.log"));
        // `sh` mounts and then becomes the daemon (exec): the process the bench measures is the
        // daemon itself.
        let script = format!(
            "mount --bind '{}' {UPSTREAM_VAR_RUN} && exec '{}' --addr={}:{port} --enable-pprof=false --socket-file={socket_file}",
            socket_dir.display(),
            binary.display(),
            host.ip,
        );
        let args = vec![
            "netns".to_owned(),
            "exec".to_owned(),
            host.netns.clone(),
            "/bin/sh".to_owned(),
            "-c".to_owned(),
            script,
        ];
        let env = [
            ("NODE_NAME", Path::new(&host.node)),
            ("KUBECONFIG", host.kubeconfig.as_path()),
        ];
        plane.adopt(Process::spawn_with_env(
            &name,
            Path::new("ip"),
            &args,
            &env,
            &log,
        )?);
        let daemon = Daemon {
            node: host.node.clone(),
            port,
            host: host.ip.clone(),
            log: log.clone(),
        };
        kruise_testkit::until(
            "OpenKruise's kruise-daemon /healthz",
            Duration::from_secs(90),
            || async {
                Ok(http_get(&daemon, "/healthz")
                    .await
                    .is_ok_and(|(code, _)| code == 200))
            },
        )
        .await
        .with_context(|| kruise_testkit::process::tail(&log, 40))?;
        let pid = pid_of(plane, &name).context("the OpenKruise daemon process")?;
        Ok(Self {
            which: "OpenKruise v1.9.0".to_owned(),
            pid,
            daemon,
        })
    }

    /// Waits until the daemon used under 2% of a core over 2 s (at most `timeout`).
    pub async fn settle(&self, timeout: Duration) {
        let began = Instant::now();
        let mut cpu = cpu_seconds(self.pid).unwrap_or(0.0);
        while began.elapsed() < timeout {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let now = cpu_seconds(self.pid).unwrap_or(cpu);
            let busy = (now - cpu) / 2.0;
            cpu = now;
            if busy < 0.02 {
                return;
            }
        }
    }

    /// Starts measuring the daemon: CPU from now, RSS every 100 ms.
    pub fn meter(&self) -> Meter {
        Meter::start(self.pid)
    }
}

/// What a process cost over one phase.
#[derive(Clone, Copy, Debug, Default)]
pub struct Cost {
    pub seconds: f64,
    /// CPU seconds over the phase.
    pub cpu: f64,
    pub rss_mean_kib: u64,
    pub rss_peak_kib: u64,
    pub rss_end_kib: u64,
}

impl Cost {
    /// CPU as a percentage of one core.
    pub fn cpu_percent(&self) -> f64 {
        if self.seconds > 0.0 {
            self.cpu * 100.0 / self.seconds
        } else {
            0.0
        }
    }
}

/// A phase being measured: CPU since [`Meter::start`], and RSS sampled every 100 ms by a task (the
/// kernel's high-water mark `VmHWM` is reset at the start, `clear_refs` 5, and read at the end too:
/// a peak between two samples is not missed).
pub struct Meter {
    pid: u32,
    began: Instant,
    cpu: f64,
    stop: Arc<AtomicBool>,
    sampler: tokio::task::JoinHandle<(u64, u64, u64)>,
}

impl Meter {
    pub fn start(pid: u32) -> Self {
        let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let sampler = tokio::spawn(async move {
            let (mut sum, mut count, mut peak) = (0u64, 0u64, 0u64);
            while !flag.load(Ordering::Relaxed) {
                if let Some((rss, _)) = rss_kib(pid) {
                    sum += rss;
                    count += 1;
                    peak = peak.max(rss);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            (sum, count, peak)
        });
        Self {
            pid,
            began: Instant::now(),
            cpu: cpu_seconds(pid).unwrap_or(0.0),
            stop,
            sampler,
        }
    }

    /// Ends the phase.
    pub async fn stop(self) -> Cost {
        let seconds = self.began.elapsed().as_secs_f64();
        let cpu = (cpu_seconds(self.pid).unwrap_or(self.cpu) - self.cpu).max(0.0);
        self.stop.store(true, Ordering::Relaxed);
        let (sum, count, sampled_peak) = self.sampler.await.unwrap_or((0, 0, 0));
        let (end, hwm) = rss_kib(self.pid).unwrap_or((0, 0));
        Cost {
            seconds,
            cpu,
            rss_mean_kib: sum.checked_div(count).unwrap_or(end),
            rss_peak_kib: sampled_peak.max(hwm),
            rss_end_kib: end,
        }
    }
}
