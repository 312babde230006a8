//! OpenKruise v1.9.0's own image on real nodes, for the takeover lane (`make test-takeover`): the two
//! binaries `make openkruise` built from the tag's source with no change (`image/manager` and
//! `image/kruise-daemon` of its cache), laid out as the tag's Dockerfile lays them out, and pushed as
//! `openkruise/kruise-manager:v1.9.0`, the repository and tag OpenKruise's chart pulls by default (its
//! manager's Deployment and its daemon's DaemonSet share the image).
//!
//! The layout: `/manager` (the entrypoint) and `/kruise-daemon`, both static (CGO off); `/tmp` and
//! `/log` writable by `nobody`, the user the chart runs the manager as (it writes its webhook
//! certificates under `/tmp`); an `/etc/passwd` and `/etc/group` with root and nobody only; no `USER`, so
//! the daemon, which the chart does not give a user, runs as root as upstream's does. What the
//! Dockerfile's alpine base adds beyond that is left out because neither binary reads it here:
//! ca-certificates (in-cluster configuration trusts the ServiceAccount's CA file), tzdata, apk.

use std::path::{Path, PathBuf};

use anyhow::{Context, ensure};
use kruise_image::{Blobs, Layer};
use serde_json::json;

use super::images::Registry;
use super::kruise_images::Pushed;

/// OpenKruise's chart's `manager.image.repository` (values.yaml of 1.9.0).
pub const REPOSITORY: &str = "openkruise/kruise-manager";
/// Its `manager.image.tag`.
pub const TAG: &str = "v1.9.0";
/// Where the image's files sit in `make openkruise`'s output.
const IMAGE_FILES: &str = "image";
/// `nobody` in the image's `/etc/passwd` (the chart's `runAsUser`).
const NOBODY: u32 = 65534;

/// `make openkruise`'s output: `$KRUISE_OPENKRUISE_DIR`, else `openkruise-v1.9.0` in the tool cache.
pub fn build_dir() -> PathBuf {
    match std::env::var_os("KRUISE_OPENKRUISE_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => crate::control_plane::cache_dir().join(format!("openkruise-{TAG}")),
    }
}

/// The image's blobs from the binaries under `dir/image` (see the module's documentation).
pub fn blobs(dir: &Path) -> anyhow::Result<Blobs> {
    let files = dir.join(IMAGE_FILES);
    let read = |name: &str| {
        let path = files.join(name);
        std::fs::read(&path).with_context(|| {
            format!(
                "reading {} (OpenKruise {TAG} built from its tag: `make openkruise`)",
                path.display()
            )
        })
    };
    let manager = read("manager")?;
    let daemon = read("kruise-daemon")?;
    let mut layer = Layer::new();
    layer.dir("etc/", 0o755)?;
    // Owned by root here (every header is), but writable by nobody as the Dockerfile's `chown` makes them.
    layer.dir("tmp/", 0o1777)?;
    layer.dir("log/", 0o777)?;
    let passwd = format!(
        "root:x:0:0:root:/root:/bin/ash\nnobody:x:{NOBODY}:{NOBODY}:nobody:/:/sbin/nologin\n"
    );
    layer.file("etc/passwd", 0o644, passwd.as_bytes())?;
    layer.file(
        "etc/group",
        0o644,
        format!("root:x:0:root\nnobody:x:{NOBODY}:\n").as_bytes(),
    )?;
    layer.file("manager", 0o755, &manager)?;
    layer.file("kruise-daemon", 0o755, &daemon)?;
    let config = json!({
        "created": "1970-01-01T00:00:00Z",
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "Entrypoint": ["/manager"],
            "WorkingDir": "/",
        },
    });
    Blobs::new(&layer.finish()?, config, 1)
}

/// Builds the image from `dir` (`make openkruise`'s output) and pushes it (blocking: a registry
/// upload).
pub fn push(registry: &Registry, dir: &Path) -> anyhow::Result<Pushed> {
    let reference = format!("{REPOSITORY}:{TAG}");
    let blobs = blobs(dir)?;
    ensure!(
        !blobs.layer_gz.is_empty(),
        "the image of {reference} is empty"
    );
    registry
        .push(REPOSITORY, TAG, &blobs)
        .with_context(|| format!("pushing {reference}"))?;
    Ok(Pushed {
        reference,
        manifest_digest: blobs.manifest_digest.clone(),
        compressed_bytes: blobs.layer_gz.len() + blobs.config.len() + blobs.manifest.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// The layer's entries (path, mode, uid) of an image built from two stand-in binaries.
    #[test]
    fn the_layout_is_the_tag_dockerfiles() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        std::fs::create_dir_all(dir.path().join(IMAGE_FILES))?;
        for name in ["manager", "kruise-daemon"] {
            std::fs::write(dir.path().join(IMAGE_FILES).join(name), name)?;
        }
        let blobs = blobs(dir.path())?;
        let mut tar = Vec::new();
        flate2::read::GzDecoder::new(&blobs.layer_gz[..]).read_to_end(&mut tar)?;
        let mut archive = tar::Archive::new(&tar[..]);
        let mut entries = Vec::new();
        for entry in archive.entries()? {
            let entry = entry?;
            let path = entry.path()?.display().to_string();
            entries.push((path, entry.header().mode()? & 0o7777));
        }
        for (path, mode) in [
            ("manager", 0o755),
            ("kruise-daemon", 0o755),
            ("tmp/", 0o1777),
            ("log/", 0o777),
            ("etc/passwd", 0o644),
        ] {
            ensure!(
                entries.contains(&(path.to_string(), mode)),
                "{path} {mode:o} missing from {entries:?}"
            );
        }
        let config: serde_json::Value = serde_json::from_slice(&blobs.config)?;
        ensure!(
            config["config"]["Entrypoint"] == json!(["/manager"])
                && config["config"].get("User").is_none(),
            "{config}"
        );
        Ok(())
    }

    #[test]
    fn a_missing_build_names_the_make_target() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let error = blobs(dir.path()).expect_err("no binaries");
        assert!(
            format!("{error:#}").contains("make openkruise"),
            "{error:#}"
        );
    }
}
