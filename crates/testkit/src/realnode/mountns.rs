//! A mount namespace of a node's own, shared by its containerd and kubelet, in which the node's
//! containerd socket is where a cluster has it: `/run/containerd/containerd.sock`. Every node's socket
//! is in its own directory on this one machine; a Pod that mounts the host's `/var/run` (the chart's
//! kruise-daemon, with its default `daemon.socketLocation`) must find its own node's runtime there.
//!
//! The namespace is private: what the kubelet mounts for volumes and what containerd mounts for
//! container filesystems stay inside it (and go with it), and the host's view is unchanged. containerd
//! and the kubelet must share it: runc bind-mounts the volumes the kubelet mounted. A `sleep` holds the
//! namespace open between the two and is the handle both join (`nsenter --mount=/proc/<pid>/ns/mnt`).

use std::path::Path;
use std::time::Duration;

use std::ffi::OsStr;

use anyhow::Context;

use super::config::NodeLayout;
use super::images::which;
use crate::process::Process;

/// Where the node's containerd directory (holding `containerd.sock`) is bound inside the namespace.
pub const STANDARD_CONTAINERD_DIR: &str = "/run/containerd";

/// The node's mount namespace, held open by a process.
pub struct NodeMounts {
    holder: Process,
}

impl NodeMounts {
    /// Creates the namespace and binds the node's containerd directory at [`STANDARD_CONTAINERD_DIR`].
    pub async fn start(layout: &NodeLayout) -> anyhow::Result<Self> {
        let holder = Process::spawn(
            &format!("mount-namespace-{}", layout.name),
            &which("unshare")?,
            &[
                "--mount".into(),
                "--propagation".into(),
                "private".into(),
                "--".into(),
                "sleep".into(),
                "infinity".into(),
            ],
            &layout.path("mount-namespace.log"),
        )?;
        let mut this = Self { holder };
        let ours = namespace_of("self")?;
        let pid = this.holder.pid().to_string();
        // `unshare` makes the namespace before it runs `sleep`: wait until the holder is in another one.
        let waited = crate::wait::until(
            format!("the mount namespace of {}", layout.name),
            Duration::from_secs(10),
            || async { Ok(namespace_of(&pid).is_ok_and(|theirs| theirs != ours)) },
        )
        .await;
        if let Err(error) = waited {
            this.stop();
            return Err(error.context(crate::process::tail(&this.holder.log, 10)));
        }
        if let Err(error) = this.bind(&layout.path("containerd")) {
            this.stop();
            return Err(error);
        }
        Ok(this)
    }

    fn bind(&self, containerd_dir: &Path) -> anyhow::Result<()> {
        // The mount point is on the shared filesystem (created on the host too, empty and harmless);
        // the mount itself exists only in the node's namespace.
        std::fs::create_dir_all(STANDARD_CONTAINERD_DIR)
            .with_context(|| format!("creating {STANDARD_CONTAINERD_DIR}"))?;
        let containerd_dir = containerd_dir.as_os_str();
        crate::process::checked_output(
            which("nsenter")?,
            &[
                OsStr::new(&self.nsenter_arg()),
                OsStr::new("--"),
                OsStr::new("mount"),
                OsStr::new("--bind"),
                containerd_dir,
                OsStr::new(STANDARD_CONTAINERD_DIR),
            ],
        )
        .context("binding the node's containerd directory in its mount namespace")?;
        Ok(())
    }

    /// The `nsenter` argument that runs a program in the namespace.
    pub fn nsenter_arg(&self) -> String {
        format!("--mount=/proc/{}/ns/mnt", self.holder.pid())
    }

    /// Lets the namespace go (once containerd, its shims and the kubelet are gone, nothing else holds
    /// it, and every mount in it goes with it).
    pub fn stop(&mut self) {
        self.holder.kill();
    }
}

/// The mount namespace of a process (`self` or a PID), as `/proc/<pid>/ns/mnt` names it.
fn namespace_of(pid: &str) -> anyhow::Result<std::path::PathBuf> {
    let link = format!("/proc/{pid}/ns/mnt");
    std::fs::read_link(&link).with_context(|| format!("reading {link}"))
}
