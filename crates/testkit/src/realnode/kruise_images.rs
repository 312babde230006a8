//! kruise-rs's own images on real nodes: kruise-manager's and kruise-daemon's, pushed to the test bed's
//! registry under the chart's default names (`kruise-rs/kruise-manager:<appVersion>`, which containerd
//! reads as `docker.io/kruise-rs/...` and pulls from the local registry), so that `helm install` of the
//! chart with its default values runs them: the chart's manifests, unchanged, are what runs.
//!
//! Two sources, the same image layout (`kruise_image`: the binary at `/<name>`, its entrypoint, user
//! 65532, exposed ports):
//! - [`Source::Archives`]: `make image`'s static release archives (`KRUISE_RS_IMAGE_DIR`; `make
//!   test-install` builds them, about 23 minutes on 2 cores);
//! - [`Source::DebugBuild`], the default: the debug binaries `make test` has built, stripped,
//!   with their program interpreter and shared libraries beside them (a glibc build is not static), so
//!   the lane costs seconds, not a release build.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use anyhow::{Context, ensure};

use super::images::Registry;

/// The chart's `manager.image.repository` (values.yaml).
pub const MANAGER_REPOSITORY: &str = "kruise-rs/kruise-manager";
/// The chart's `daemon.image.repository` (values.yaml).
pub const DAEMON_REPOSITORY: &str = "kruise-rs/kruise-daemon";
/// The chart's default tag: its appVersion, the workspace version.
pub const TAG: &str = env!("CARGO_PKG_VERSION");

/// Where the images come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// The workspace's debug binaries, with their shared libraries.
    DebugBuild,
    /// A directory holding `kruise-manager-image.tar` and `kruise-daemon-image.tar` (`make image`).
    Archives(PathBuf),
}

impl Source {
    /// `KRUISE_RS_IMAGE_DIR` names the archives' directory; unset, the debug build.
    pub fn from_env() -> Self {
        match std::env::var_os("KRUISE_RS_IMAGE_DIR") {
            Some(dir) if !dir.is_empty() => Self::Archives(PathBuf::from(dir)),
            _ => Self::DebugBuild,
        }
    }
}

/// One image pushed.
#[derive(Clone, Debug)]
pub struct Pushed {
    /// As the chart names it: `kruise-rs/kruise-manager:0.1.0`.
    pub reference: String,
    pub manifest_digest: String,
    pub compressed_bytes: usize,
}

/// Builds (or reads) both images and pushes them, the manager's then the daemon's (blocking: a registry
/// upload); `work` holds the stripped binaries.
pub fn push(registry: &Registry, source: &Source, work: &Path) -> anyhow::Result<[Pushed; 2]> {
    type Binary = fn() -> anyhow::Result<PathBuf>;
    let images: [(&str, &str, &[u16], Binary); 2] = [
        (
            MANAGER_REPOSITORY,
            kruise_image::MANAGER,
            kruise_image::MANAGER_PORTS,
            crate::manager::binary,
        ),
        (
            DAEMON_REPOSITORY,
            kruise_image::DAEMON,
            kruise_image::DAEMON_PORTS,
            crate::daemon::binary,
        ),
    ];
    let mut pushed = Vec::new();
    for (repository, name, ports, binary) in images {
        let reference = format!("{repository}:{TAG}");
        let blobs = match source {
            Source::Archives(dir) => {
                let archive = dir.join(format!("{name}-image.tar"));
                kruise_image::read_blobs(&archive)
                    .with_context(|| format!("reading {} (`make image`)", archive.display()))?
            }
            Source::DebugBuild => {
                let stripped = strip_symbols(&binary()?, work)?;
                let libraries = shared_libraries(&stripped)?;
                kruise_image::blobs(&kruise_image::Spec {
                    binary: &stripped,
                    name,
                    ports,
                    reference: reference.clone(),
                    architecture: "amd64".into(),
                    version: TAG.into(),
                    compression: 1,
                    libraries: &libraries,
                })?
            }
        };
        registry
            .push(repository, TAG, &blobs)
            .with_context(|| format!("pushing {reference}"))?;
        pushed.push(Pushed {
            reference,
            manifest_digest: blobs.manifest_digest.clone(),
            compressed_bytes: blobs.layer_gz.len() + blobs.config.len() + blobs.manifest.len(),
        });
    }
    pushed
        .try_into()
        .map_err(|pushed| anyhow::anyhow!("two images expected, pushed {pushed:?}"))
}

/// A copy of `binary` in `work` without its debug information and symbols, as `make image` strips
/// (a debug manager goes from about 250 MB to 95).
fn strip_symbols(binary: &Path, work: &Path) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(work).with_context(|| format!("creating {}", work.display()))?;
    let name = binary.file_name().context("a binary without a file name")?;
    let out = work.join(name);
    crate::process::checked_output(
        "objcopy",
        &[
            OsStr::new("--strip-all"),
            binary.as_os_str(),
            out.as_os_str(),
        ],
    )?;
    Ok(out)
}

/// The program interpreter and shared libraries `binary` loads, each at the path the loader finds it
/// (`ldd`'s answer), to be copied into the image at that same path.
fn shared_libraries(binary: &Path) -> anyhow::Result<Vec<(String, PathBuf)>> {
    let out = crate::process::checked_output("ldd", &[binary])?;
    parse_ldd(&out).with_context(|| format!("the libraries of {}", binary.display()))
}

/// `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)` and `/lib64/ld-linux-x86-64.so.2 (0x…)` give
/// their absolute paths; the vDSO (no file) is skipped; a library not found is an error (the image
/// would not start).
fn parse_ldd(output: &str) -> anyhow::Result<Vec<(String, PathBuf)>> {
    let mut libraries = Vec::new();
    for line in output.lines().map(str::trim) {
        let path = match line.split_once("=>") {
            Some((name, resolved)) => {
                let resolved = resolved.trim();
                ensure!(
                    !resolved.starts_with("not found"),
                    "{} is not found",
                    name.trim()
                );
                resolved
            }
            None => line,
        };
        if let Some(path) = path
            .split_whitespace()
            .next()
            .filter(|p| p.starts_with('/'))
        {
            libraries.push((path.to_string(), PathBuf::from(path)));
        }
    }
    Ok(libraries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_output_gives_the_loader_and_the_libraries_by_absolute_path() {
        let output = "\tlinux-vdso.so.1 (0x00007ffd)\n\
            \tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f85)\n\
            \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f85)\n\
            \t/lib64/ld-linux-x86-64.so.2 (0x00007f85)\n";
        let paths: Vec<String> = parse_ldd(output)
            .expect("parses")
            .into_iter()
            .map(|(p, _)| p)
            .collect();
        assert_eq!(
            paths,
            [
                "/lib/x86_64-linux-gnu/libgcc_s.so.1",
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib64/ld-linux-x86-64.so.2",
            ]
        );
    }

    #[test]
    fn a_library_not_found_is_an_error() {
        let error = parse_ldd("\tlibmissing.so => not found\n").expect_err("refused");
        assert!(format!("{error}").contains("libmissing.so"), "{error}");
    }
}
