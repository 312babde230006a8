//! kruise-daemon processes for real nodes: one per node, on the host, talking to that node's own
//! containerd socket, watching the ContainerRecreateRequests of that node (as the chart's DaemonSet
//! runs one per node in a cluster).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

use crate::control_plane::ControlPlane;
use crate::process::{Process, free_port};

/// Where the `kruise-daemon` binary is: `$KRUISE_DAEMON_BIN`, else next to the running executable or
/// one level up.
pub fn binary() -> anyhow::Result<PathBuf> {
    crate::manager::workspace_binary("kruise-daemon", "KRUISE_DAEMON_BIN", "kruise-daemon")
}

/// One running daemon.
#[derive(Clone, Debug)]
pub struct Daemon {
    pub node: String,
    /// Port of /healthz, /readyz, /metrics on 127.0.0.1.
    pub port: u16,
    pub log: PathBuf,
}

/// Starts the daemon of `node` (its containerd at `socket`), owned by `plane`. Does not wait.
pub fn spawn(plane: &ControlPlane, node: &str, socket: &Path) -> anyhow::Result<Daemon> {
    let port = free_port()?;
    let name = format!("kruise-daemon-{node}");
    let log = plane.dir().join(format!("{name}.log"));
    let args = vec![
        format!("--node-name={node}"),
        format!("--runtime-endpoint=unix://{}", socket.display()),
        format!("--kubeconfig={}", plane.kubeconfig_path().display()),
        format!("--addr=127.0.0.1:{port}"),
    ];
    let process = Process::spawn(&name, &binary()?, &args, &log)?;
    plane.adopt(process);
    Ok(Daemon {
        node: node.to_owned(),
        port,
        log,
    })
}

/// Waits until every daemon answers /readyz (runtime connected, its watch listed).
pub async fn wait_ready(daemons: &[Daemon], timeout: Duration) -> anyhow::Result<()> {
    for daemon in daemons {
        crate::wait::until(
            &format!("kruise-daemon of {} ready", daemon.node),
            timeout,
            || async {
                Ok(crate::manager::http_get(daemon.port, "/readyz")
                    .await
                    .is_ok_and(|(code, _)| code == 200))
            },
        )
        .await
        .with_context(|| crate::process::tail(&daemon.log, 30))?;
    }
    Ok(())
}
