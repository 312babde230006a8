//! kruise-daemon processes for real nodes: one per node, in that node's network namespace (as the
//! chart's host-network DaemonSet runs one per node in a cluster), talking to that node's own
//! containerd socket, watching what concerns that node (ContainerRecreateRequests, its NodePodProbe).

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
    /// Port of /healthz, /readyz, /metrics on [`Daemon::host`].
    pub port: u16,
    /// The address the daemon serves on: `127.0.0.1`, or the node's address when it runs in the
    /// node's network namespace (reachable from the host over the node's veth).
    pub host: String,
    pub log: PathBuf,
}

/// Where a daemon runs: its node, the node's containerd socket, network namespace, address, and a
/// kubeconfig that reaches the apiserver from inside that namespace.
#[derive(Clone, Debug)]
pub struct DaemonHost {
    pub node: String,
    pub socket: PathBuf,
    pub netns: String,
    pub ip: String,
    pub kubeconfig: PathBuf,
}

/// Starts the daemon of a node inside the node's network namespace (`ip netns exec`), owned by
/// `plane`. Does not wait.
pub fn spawn_on(plane: &ControlPlane, host: &DaemonHost) -> anyhow::Result<Daemon> {
    let port = free_port()?;
    let name = format!("kruise-daemon-{}", host.node);
    let log = plane.dir().join(format!("{name}.log"));
    let binary = binary()?;
    let args = vec![
        "netns".to_owned(),
        "exec".to_owned(),
        host.netns.clone(),
        binary.display().to_string(),
        format!("--node-name={}", host.node),
        format!("--runtime-endpoint=unix://{}", host.socket.display()),
        format!("--kubeconfig={}", host.kubeconfig.display()),
        format!("--addr={}:{port}", host.ip),
    ];
    let process = Process::spawn(&name, Path::new("ip"), &args, &log)?;
    plane.adopt(process);
    Ok(Daemon {
        node: host.node.clone(),
        port,
        host: host.ip.clone(),
        log,
    })
}

/// `GET path` on the daemon's health server: (status code, body).
pub async fn http_get(daemon: &Daemon, path: &str) -> anyhow::Result<(u16, String)> {
    let response = crate::control_plane::plain_http_get_at(&daemon.host, daemon.port, path).await?;
    crate::control_plane::status_and_body(&response)
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
        host: "127.0.0.1".to_owned(),
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
                Ok(http_get(daemon, "/readyz")
                    .await
                    .is_ok_and(|(code, _)| code == 200))
            },
        )
        .await
        .with_context(|| crate::process::tail(&daemon.log, 30))?;
    }
    Ok(())
}
