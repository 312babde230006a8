//! Clean-up of a real node: its containers, containerd's shims (which outlive containerd on purpose),
//! the Pod network namespaces containerd made, and every mount under the node's directory. Best effort:
//! each step logs what it could not do and the next step still runs.

#![allow(unsafe_code)]

use std::path::Path;
use std::process::Command;

use super::config::NodeLayout;

/// SIGKILLs and deletes every container in the node's runc root, and removes the network namespaces
/// of its Pods (read from the bundles' config.json before the bundles go).
pub fn stop_containers(node: &NodeLayout) {
    let runc_root = node.runc_root();
    let pod_netns = pod_network_namespaces(&node.path("containerd/state"));
    let ids = match Command::new("runc")
        .arg("--root")
        .arg(&runc_root)
        .args(["list", "-q"])
        .output()
    {
        Ok(out) => String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect::<Vec<_>>(),
        Err(error) => {
            tracing::warn!(%error, node = %node.name, "listing containers for clean-up");
            Vec::new()
        }
    };
    for id in ids.iter().filter(|id| !id.is_empty()) {
        let _ = Command::new("runc")
            .arg("--root")
            .arg(&runc_root)
            .args(["kill", id, "KILL"])
            .output();
        let _ = Command::new("runc")
            .arg("--root")
            .arg(&runc_root)
            .args(["delete", "--force", id])
            .output();
    }
    for path in pod_netns {
        let _ = nix_umount(&path);
        let _ = std::fs::remove_file(&path);
    }
}

/// Network namespace paths named by the containers' OCI bundles under containerd's state directory.
fn pod_network_namespaces(state: &Path) -> Vec<String> {
    let tasks = state.join("io.containerd.runtime.v2.task/k8s.io");
    let Ok(entries) = std::fs::read_dir(&tasks) else {
        return Vec::new();
    };
    let mut paths = Vec::new();
    for entry in entries.flatten() {
        let Ok(text) = std::fs::read_to_string(entry.path().join("config.json")) else {
            continue;
        };
        let Ok(spec) = serde_json::from_str::<serde_json::Value>(&text) else {
            continue;
        };
        for namespace in spec["linux"]["namespaces"].as_array().into_iter().flatten() {
            if namespace["type"] == "network"
                && let Some(path) = namespace["path"].as_str()
                && (path.starts_with("/var/run/netns/") || path.starts_with("/run/netns/"))
            {
                paths.push(path.to_string());
            }
        }
    }
    paths.sort();
    paths.dedup();
    paths
}

/// SIGKILLs every containerd shim serving this node's containerd (their command line names its socket).
pub fn kill_shims(node: &NodeLayout) {
    let socket = node.containerd_socket().display().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let is_shim = args.first().is_some_and(|a| a.contains("containerd-shim"));
        if is_shim && args.iter().any(|a| a == &socket) {
            crate::process::signal(pid, libc::SIGKILL);
        }
    }
}

/// Detaches every mount point at or under `dir`, deepest first.
pub fn unmount_under(dir: &Path) {
    let Ok(mountinfo) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let prefix = dir.display().to_string();
    let mut points: Vec<String> = mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(unescape)
        .filter(|point| point == &prefix || point.starts_with(&format!("{prefix}/")))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    points.dedup();
    for point in points {
        if let Err(error) = nix_umount(&point) {
            tracing::warn!(%error, mount = %point, "unmounting for clean-up");
        }
    }
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape(field: &str) -> String {
    field
        .replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

fn nix_umount(path: &str) -> std::io::Result<()> {
    let c_path = std::ffi::CString::new(path)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    // SAFETY: a valid NUL-terminated path; MNT_DETACH has no other preconditions.
    let rc = unsafe { libc::umount2(c_path.as_ptr(), libc::MNT_DETACH) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_are_unescaped() {
        assert_eq!(unescape("/a\\040b"), "/a b");
    }

    #[test]
    fn pod_namespaces_are_read_from_bundles() {
        let dir = std::env::temp_dir().join(format!("krs-cleanup-{}", std::process::id()));
        let bundle = dir.join("io.containerd.runtime.v2.task/k8s.io/abc");
        std::fs::create_dir_all(&bundle).expect("dirs");
        std::fs::write(
            bundle.join("config.json"),
            r#"{"linux":{"namespaces":[{"type":"pid"},{"type":"network","path":"/var/run/netns/cni-1"}]}}"#,
        )
        .expect("write");
        assert_eq!(
            pod_network_namespaces(&dir),
            vec!["/var/run/netns/cni-1".to_string()]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
