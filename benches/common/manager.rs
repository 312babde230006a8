//! kruise-manager as the benches run it: the binary next to the bench (`cargo build --release -p
//! kruise-manager`, as `make bench` does) or `$KRUISE_MANAGER_BIN`, owned by the control plane.

use std::time::Duration;

use anyhow::{Context, ensure};
use kruise_testkit::control_plane::ControlPlane;
use kruise_testkit::manager::{self, ManagerOptions, ManagerPorts};
use kruise_testkit::process::rss_kib;

use crate::process::pid_of;
use crate::stats::mib;

/// One running manager.
#[derive(Clone, Debug)]
pub struct Manager {
    pub ports: ManagerPorts,
    pub pid: u32,
}

impl Manager {
    /// Starts the manager with `extra_args` and waits until it serves and the apiserver calls it.
    pub async fn start(plane: &ControlPlane, extra_args: &[String]) -> anyhow::Result<Self> {
        manager::ensure_namespace(plane).await?;
        let options = ManagerOptions {
            extra_args: extra_args.to_vec(),
            ..ManagerOptions::default()
        };
        let ports = manager::spawn(plane, &options)?;
        manager::wait_serving(plane, &ports, Duration::from_secs(120)).await?;
        let pid = pid_of(plane, &options.name).context("the manager process")?;
        Ok(Self { ports, pid })
    }

    /// The manager's `/metrics` text.
    pub async fn metrics_text(&self) -> anyhow::Result<String> {
        let (code, body) = manager::http_get(self.ports.metrics, "/metrics").await?;
        ensure!(
            code == 200,
            "kruise-manager /metrics answered {code}: {body}"
        );
        Ok(body)
    }

    /// Prints `  kruise-manager RSS <now> (peak <peak>)`; the peak is the process's high-water mark
    /// since it started, not since the last print.
    pub fn print_rss(&self) {
        if let Some((rss, hwm)) = rss_kib(self.pid) {
            println!("  kruise-manager RSS {} (peak {})", mib(rss), mib(hwm));
        }
    }
}

/// Prints the RSS of every process `plane` owns.
pub fn print_all_rss(plane: &ControlPlane) {
    for (name, pid) in plane.pids() {
        if let Some((rss, hwm)) = rss_kib(pid) {
            println!("{name} RSS: {} (peak {})", mib(rss), mib(hwm));
        }
    }
}
