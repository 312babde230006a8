//! The image archive as `make image` writes it, built here from the debug kruise-manager that
//! `make test` has already built (the release, static build is `make image`'s: it runs the same checks
//! with `--require-static` and the 30 MiB limit). Set KRUISE_IMAGE_ARCHIVE to check a built archive too.

use std::time::Instant;

use anyhow::Context;

fn version_line(output: &str) -> bool {
    output.trim() == concat!("kruise-manager ", env!("CARGO_PKG_VERSION"))
}

#[test]
fn archive_has_entrypoint_nonroot_user_and_a_binary_that_runs() -> anyhow::Result<()> {
    let binary = kruise_testkit::manager::binary()?;
    let dir = tempfile::tempdir()?;
    let started = Instant::now();
    let spec = kruise_image::Spec {
        binary: &binary,
        name: kruise_image::MANAGER,
        ports: kruise_image::MANAGER_PORTS,
        reference: "kruise-rs/kruise-manager:test".into(),
        architecture: "amd64".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        compression: 1,
        libraries: &[],
    };
    let first = kruise_image::build(&spec, &dir.path().join("a.tar"))?;
    let second = kruise_image::build(&spec, &dir.path().join("b.tar"))?;
    assert_eq!(
        first.manifest_digest, second.manifest_digest,
        "the same binary must give the same image digest"
    );

    let image = kruise_image::open(&dir.path().join("a.tar"))?;
    assert_eq!(image.manifest_digest, first.manifest_digest);
    assert_eq!(
        image.reference.as_deref(),
        Some("kruise-rs/kruise-manager:test")
    );
    assert_eq!(image.entrypoint(), [kruise_image::ENTRYPOINT]);
    assert_eq!(image.user(), Some("65532:65532"));
    assert_eq!(image.uid(), Some(65532));
    let passwd = String::from_utf8_lossy(&image.files["/etc/passwd"].bytes).into_owned();
    assert!(passwd.contains("nonroot:x:65532:65532:"), "{passwd}");
    let inside = &image.files[kruise_image::ENTRYPOINT];
    assert_eq!(inside.mode & 0o777, 0o755);
    assert_eq!(
        inside.bytes,
        std::fs::read(&binary).with_context(|| format!("reading {}", binary.display()))?
    );
    assert_eq!(image.config["os"], "linux");
    assert_eq!(image.config["architecture"], "amd64");

    let version = kruise_image::run_entrypoint(&image, dir.path(), &["--version"])?;
    assert!(version_line(&version), "--version printed {version:?}");
    println!(
        "image (debug binary {}): {:.1} MiB compressed, archive {:.1} MiB, built twice, opened and run in {:.1?}",
        if kruise_image::is_static_elf(&inside.bytes)? {
            "static"
        } else {
            "dynamic"
        },
        image.compressed_size as f64 / 1048576.0,
        first.archive_size as f64 / 1048576.0,
        started.elapsed()
    );

    if let Some(archive) = std::env::var_os("KRUISE_IMAGE_ARCHIVE") {
        let image = kruise_image::open(archive.as_ref())?;
        let inside = &image.files[kruise_image::ENTRYPOINT].bytes;
        assert!(
            kruise_image::is_static_elf(inside)?,
            "the release image's binary is not static"
        );
        assert_ne!(image.uid(), Some(0));
        let version = kruise_image::run_entrypoint(&image, dir.path(), &["--version"])?;
        assert!(version_line(&version), "--version printed {version:?}");
        let mib = image.compressed_size as f64 / 1048576.0;
        println!("{}: {mib:.1} MiB compressed", archive.to_string_lossy());
        assert!(mib < 30.0, "the image is {mib:.1} MiB");
    }
    Ok(())
}

/// kruise-daemon's image of the debug build, quickly compressed, with `libraries` beside it.
fn daemon_spec<'a>(
    binary: &'a std::path::Path,
    libraries: &'a [(String, std::path::PathBuf)],
) -> kruise_image::Spec<'a> {
    kruise_image::Spec {
        binary,
        name: kruise_image::DAEMON,
        ports: kruise_image::DAEMON_PORTS,
        reference: "kruise-rs/kruise-daemon:test".into(),
        architecture: "amd64".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        compression: 1,
        libraries,
    }
}

/// kruise-daemon's own image (the chart's `daemon.image`): the daemon at `/kruise-daemon`, its entrypoint,
/// its health/metrics port, the same non-root user, and it runs.
#[test]
fn the_daemon_image_holds_the_daemon() -> anyhow::Result<()> {
    let binary = kruise_testkit::daemon::binary()?;
    let dir = tempfile::tempdir()?;
    let archive = dir.path().join("daemon.tar");
    kruise_image::build(&daemon_spec(&binary, &[]), &archive)?;
    let image = kruise_image::open(&archive)?;
    assert_eq!(image.entrypoint(), ["/kruise-daemon"]);
    assert_eq!(image.uid(), Some(65532));
    assert!(
        !image.files.contains_key(kruise_image::ENTRYPOINT),
        "no manager inside"
    );
    assert_eq!(
        image.config["config"]["ExposedPorts"],
        serde_json::json!({"10221/tcp": {}})
    );
    assert_eq!(
        image.config["config"]["Labels"]["org.opencontainers.image.title"],
        "kruise-daemon"
    );
    let version = kruise_image::run_entrypoint(&image, dir.path(), &["--version"])?;
    assert_eq!(
        version.trim(),
        concat!("kruise-daemon ", env!("CARGO_PKG_VERSION"))
    );
    Ok(())
}

#[test]
fn a_tampered_blob_is_refused() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let fake = dir.path().join("kruise-manager");
    std::fs::write(&fake, b"#!/bin/true\n")?;
    let archive = dir.path().join("image.tar");
    kruise_image::build(
        &kruise_image::Spec {
            binary: &fake,
            name: kruise_image::MANAGER,
            ports: kruise_image::MANAGER_PORTS,
            reference: "kruise-rs/kruise-manager:test".into(),
            architecture: "amd64".into(),
            version: "0".into(),
            compression: 6,
            libraries: &[],
        },
        &archive,
    )?;
    kruise_image::open(&archive)?;
    // Change the config blob (the first place the archive spells the UID) without renaming it.
    let mut bytes = std::fs::read(&archive)?;
    let at = bytes
        .windows(5)
        .position(|w| w == b"65532")
        .context("the archive holds no 65532")?;
    bytes[at] = b'0';
    std::fs::write(&archive, &bytes)?;
    let error = kruise_image::open(&archive).expect_err("a tampered archive must be refused");
    assert!(
        format!("{error:#}").contains("does not hash to its name"),
        "{error:#}"
    );
    Ok(())
}

#[test]
fn static_executables_are_told_from_dynamic_ones() -> anyhow::Result<()> {
    // This test executable is dynamically linked on the gnu target, static on musl.
    let own = std::fs::read(std::env::current_exe()?)?;
    assert_eq!(
        kruise_image::is_static_elf(&own)?,
        cfg!(target_env = "musl") || cfg!(target_feature = "crt-static")
    );
    assert!(kruise_image::is_static_elf(b"#!/bin/sh\n").is_err());
    Ok(())
}

/// What the test bed pushes to its registry: the blobs read back from an archive are the ones `blobs`
/// builds, and a dynamically linked binary carries the files it is given (its loader) at their paths.
#[test]
fn archive_blobs_read_back_as_built_with_the_libraries_given() -> anyhow::Result<()> {
    let binary = kruise_testkit::daemon::binary()?;
    let dir = tempfile::tempdir()?;
    let loader = std::path::PathBuf::from("/lib64/ld-linux-x86-64.so.2");
    let libraries = [(loader.display().to_string(), loader.clone())];
    let spec = daemon_spec(&binary, &libraries);
    let archive = dir.path().join("daemon.tar");
    let written = kruise_image::build(&spec, &archive)?;
    let built = kruise_image::blobs(&spec)?;
    let read = kruise_image::read_blobs(&archive)?;
    assert_eq!(read.manifest_digest, written.manifest_digest);
    assert_eq!(read.manifest_digest, built.manifest_digest);
    assert_eq!(read.layer_digest, built.layer_digest);
    assert_eq!(read.config_digest, built.config_digest);
    assert_eq!(read.layer_gz, built.layer_gz);

    let image = kruise_image::open(&archive)?;
    let inside = image
        .files
        .get("/lib64/ld-linux-x86-64.so.2")
        .context("the loader is not in the image")?;
    assert_eq!(inside.bytes, std::fs::read(&loader)?);
    assert_eq!(image.entrypoint(), ["/kruise-daemon"]);

    let bad = [("lib/relative.so".to_string(), loader)];
    let refused = kruise_image::blobs(&kruise_image::Spec {
        libraries: &bad,
        ..spec
    });
    assert!(refused.is_err(), "a relative library path must be refused");
    Ok(())
}
