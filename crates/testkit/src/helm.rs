//! The Helm CLI the chart tests use: built from its Go module by `tools/build-helm.sh` (`make helm`)
//! into the cache beside the control-plane binaries, once per machine.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, bail};

/// The Helm version `tools/build-helm.sh` builds.
pub const HELM_VERSION: &str = "v3.22.0";

/// The repository's root (the test kit lives in `crates/testkit`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// `$KRUISE_HELM_BIN`, else the cached build (`$KRUISE_RS_CACHE/helm-<version>/bin/helm`), built by
/// `tools/build-helm.sh` first when missing (a few minutes, once; concurrent callers wait for one build).
pub fn binary() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os("KRUISE_HELM_BIN") {
        return Ok(path.into());
    }
    static BUILD: Mutex<()> = Mutex::new(());
    let _one_build = BUILD
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let cache = crate::control_plane::cache_dir();
    let helm = cache.join(format!("helm-{HELM_VERSION}/bin/helm"));
    let script = repo_root().join("tools/build-helm.sh");
    let output = std::process::Command::new("bash")
        .arg(&script)
        .env("KRUISE_RS_CACHE", &cache)
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !output.status.success() {
        bail!(
            "{} failed ({}): {}{}",
            script.display(),
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(helm)
}

/// Runs helm with `args` in the repository root; returns stdout, or an error with stderr.
pub fn run(args: &[&str]) -> anyhow::Result<String> {
    let output = try_run(args)?;
    if !output.status.success() {
        bail!(
            "helm {} failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Runs helm with `args` in the repository root and returns its whole output, whatever the status.
pub fn try_run(args: &[&str]) -> anyhow::Result<std::process::Output> {
    let helm = binary()?;
    let home = std::env::temp_dir().join("kruise-rs-helm-home");
    std::process::Command::new(&helm)
        .args(args)
        .current_dir(repo_root())
        // Keep helm's caches and config out of the user's home.
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()
        .with_context(|| format!("running {} {}", helm.display(), args.join(" ")))
}
