//! Each real node's kubelet manages its own cgroup subtree, `/kruise-rs/<node>` in every hierarchy, with
//! per-QoS and per-Pod cgroups below it, as on a real node. Two kubelets sharing the default root would
//! each treat the other's Pod cgroups as orphans; and without per-Pod cgroups (cgroupsPerQOS off) the
//! kubelet cannot resize a Pod in place (v1.34.10 dereferences the missing Pod cgroup manager and dies).
//! The kubelet requires the root to exist in every hierarchy, so the test bed makes it.

use std::path::{Path, PathBuf};

use anyhow::Context;

const CGROUP_FS: &str = "/sys/fs/cgroup";

/// The kubelet's `cgroupRoot` for node `name` of the cluster tagged `tag` (two clusters on one machine
/// both have a `real-0`; a shared root would make each kubelet remove the other's Pod cgroups as
/// orphans).
pub fn root_for(tag: &str, name: &str) -> String {
    format!("/kruise-rs/{tag}-{name}")
}

/// The hierarchies mounted under /sys/fs/cgroup (cgroup v1 controllers, and the unified one when the
/// machine runs the hybrid layout).
fn hierarchies() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(CGROUP_FS) else {
        return Vec::new();
    };
    let mut dirs: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("cgroup.procs").exists())
        .collect();
    dirs.sort();
    dirs
}

/// Creates `root` (from [`root_for`]) in every hierarchy. cpuset cgroups start with no CPUs and no memory
/// nodes, so each new cpuset level gets its parent's.
pub fn create(root: &str) -> anyhow::Result<()> {
    for hierarchy in hierarchies() {
        let mut dir = hierarchy.clone();
        for part in root.trim_start_matches('/').split('/') {
            let parent = dir.clone();
            dir = dir.join(part);
            if !dir.exists() {
                std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
            }
            for file in ["cpuset.cpus", "cpuset.mems"] {
                let own = dir.join(file);
                if own.exists() && read_trimmed(&own).is_empty() {
                    let inherited = read_trimmed(&parent.join(file));
                    std::fs::write(&own, &inherited)
                        .with_context(|| format!("writing {} = {inherited}", own.display()))?;
                }
            }
        }
    }
    Ok(())
}

fn read_trimmed(path: &Path) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Removes `root` and everything below it from every hierarchy, deepest first (a cgroup directory
/// can be removed once it has no processes and no children). Best effort: what is still busy stays.
pub fn remove(root: &str) {
    for hierarchy in hierarchies() {
        remove_tree(&hierarchy.join(root.trim_start_matches('/')));
    }
}

/// Removes the parent of every node's root (`/kruise-rs`) where it is empty: another cluster's nodes
/// may still use it.
pub fn remove_parent() {
    for hierarchy in hierarchies() {
        let _ = std::fs::remove_dir(hierarchy.join("kruise-rs"));
    }
}

fn remove_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&entry.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_node_has_its_own_root() {
        assert_eq!(root_for("123", "real-0"), "/kruise-rs/123-real-0");
        assert_ne!(root_for("123", "real-0"), root_for("123", "real-1"));
        assert_ne!(root_for("123", "real-0"), root_for("456", "real-0"));
    }
}
