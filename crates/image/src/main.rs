//! `oci-image`: writes kruise-rs's images (kruise-manager's, kruise-daemon's) as OCI image layout
//! archives without a container daemon (`oci-image build`), and opens one to check it
//! (`oci-image check`). `make image` runs both for each image.

use std::path::PathBuf;

use anyhow::{Context, ensure};
use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "oci-image",
    version,
    about = "kruise-rs OCI image archives (kruise-manager, kruise-daemon): build and check"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Writes the archive: the binary at /<name>, user 65532, entrypoint the binary.
    Build {
        /// The (static) executable.
        #[arg(long)]
        binary: PathBuf,
        /// Which binary: kruise-manager or kruise-daemon (its path in the image and exposed ports).
        #[arg(long, default_value = kruise_image::MANAGER)]
        name: String,
        /// Output archive (`.tar`).
        #[arg(long)]
        out: PathBuf,
        /// Image reference recorded in the archive.
        #[arg(long, default_value = concat!("kruise-rs/kruise-manager:", env!("CARGO_PKG_VERSION")))]
        reference: String,
        /// OCI architecture of the binary.
        #[arg(long, default_value = "amd64")]
        architecture: String,
        /// Gzip level (0–9).
        #[arg(long, default_value_t = 9)]
        compression: u32,
    },
    /// Opens an archive, verifies every digest, checks the entrypoint and the non-root user, runs the
    /// binary inside with `--version` and prints the image's size.
    Check {
        archive: PathBuf,
        /// The binary the entrypoint must be: kruise-manager or kruise-daemon.
        #[arg(long, default_value = kruise_image::MANAGER)]
        name: String,
        /// Fail unless the entrypoint is a static executable (no ELF interpreter).
        #[arg(long)]
        require_static: bool,
        /// Fail when the compressed image is larger than this many MiB.
        #[arg(long)]
        max_mib: Option<f64>,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Build {
            binary,
            name,
            out,
            reference,
            architecture,
            compression,
        } => {
            let written = kruise_image::build(
                &kruise_image::Spec {
                    binary: &binary,
                    name: &name,
                    ports: if name == kruise_image::DAEMON {
                        kruise_image::DAEMON_PORTS
                    } else {
                        kruise_image::MANAGER_PORTS
                    },
                    reference: reference.clone(),
                    architecture,
                    version: env!("CARGO_PKG_VERSION").into(),
                    compression,
                    libraries: &[],
                },
                &out,
            )?;
            println!(
                "oci-image: wrote {} ({reference}, manifest {}, {:.1} MiB compressed)",
                out.display(),
                written.manifest_digest,
                written.compressed_size as f64 / 1048576.0
            );
        }
        Command::Check {
            archive,
            name,
            require_static,
            max_mib,
        } => {
            let image = kruise_image::open(&archive)?;
            let entrypoint = image.entrypoint();
            let expected = format!("/{name}");
            ensure!(
                entrypoint == [expected.as_str()],
                "entrypoint is {entrypoint:?}, expected [{expected}]"
            );
            let uid = image
                .uid()
                .with_context(|| format!("user {:?} does not resolve to a UID", image.user()))?;
            ensure!(uid != 0, "the image runs as root");
            let binary = &image
                .files
                .get(&expected)
                .with_context(|| format!("{expected} is not a file of the image"))?
                .bytes;
            let is_static = kruise_image::is_static_elf(binary)?;
            ensure!(
                is_static || !require_static,
                "{expected} is dynamically linked"
            );
            let dir = tempfile::tempdir().context("creating a temporary directory")?;
            let version = kruise_image::run_entrypoint(&image, dir.path(), &["--version"])?;
            let mib = image.compressed_size as f64 / 1048576.0;
            println!(
                "oci-image: {} {}: entrypoint {entrypoint:?}, user {uid}, {}, `--version`: {}, size {mib:.1} MiB compressed",
                archive.display(),
                image.reference.as_deref().unwrap_or("(no reference)"),
                if is_static { "static" } else { "dynamic" },
                version.trim(),
            );
            if let Some(max) = max_mib {
                ensure!(mib <= max, "the image is {mib:.1} MiB, more than {max} MiB");
            }
        }
    }
    Ok(())
}
