//! The container images real nodes run, built on the spot from the machine's static busybox (Debian's
//! `busybox-static`) and served by a local registry (Debian's `docker-registry`) on 127.0.0.1. There is
//! no container registry on the internet here, so the names the tests and upstream's e2e suite use
//! (`nginx:alpine`, `registry.k8s.io/e2e-test-images/httpd:2.4.38-4`, `registry.k8s.io/pause:3.10`, …)
//! are pushed to the local registry under their repository paths, and every node's containerd pulls
//! `docker.io` and `registry.k8s.io` from it (containerd registry mirrors): pulls are real pulls.
//!
//! Every image is the same busybox root filesystem plus a file naming the image, so each reference has
//! its own digest, as different versions of a real image do.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, ensure};
use kruise_image::{Blobs, Layer};
use serde_json::json;

/// The static busybox the images are built from.
pub const BUSYBOX: &str = "/bin/busybox";

/// The Pod sandbox image every node's containerd uses.
pub const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10";

/// The registries whose pulls are served by the local registry.
pub const MIRRORED_REGISTRIES: [&str; 2] = ["docker.io", "registry.k8s.io"];

/// What an image runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Sleeps until told to stop (the Pod sandbox).
    Pause,
    /// An HTTP server on port 80 serving `index.html` from the directory given. Its readiness can be
    /// broken and restored by `kubectl exec … mv` of that file, as upstream's e2e suite does.
    WebServer(&'static str),
    /// A shell (`sh`), for Pods that give their own command.
    Shell,
}

const NGINX_ROOT: &str = "/usr/share/nginx/html";
const HTTPD_ROOT: &str = "/usr/local/apache2/htdocs";

/// An nginx image: it serves `index.html` from nginx's document root.
const fn nginx(reference: &'static str) -> (&'static str, Role) {
    (reference, Role::WebServer(NGINX_ROOT))
}

/// An httpd image: it serves `index.html` from Apache's document root.
const fn httpd(reference: &'static str) -> (&'static str, Role) {
    (reference, Role::WebServer(HTTPD_ROOT))
}

/// The images the test bed serves: (reference, role).
pub const IMAGES: &[(&str, Role)] = &[
    (PAUSE_IMAGE, Role::Pause),
    ("registry.k8s.io/pause:3.9", Role::Pause),
    // Upstream's `common.RedisImage`: its e2e Pods run it without a command, as a container that just
    // keeps running (the in-place update specs with container priorities).
    ("registry.k8s.io/e2e-test-images/redis:5.0.5-3", Role::Pause),
    nginx("docker.io/library/nginx:alpine"),
    nginx("docker.io/library/nginx:latest"),
    nginx("docker.io/library/nginx:mainline"),
    nginx("docker.io/library/nginx:1.14.2"),
    nginx("docker.io/library/nginx:1.15.1"),
    nginx("docker.io/library/nginx:1.19.1"),
    nginx("docker.io/library/nginx:1.19.2"),
    nginx("docker.io/library/nginx:1.23.1"),
    nginx("docker.io/library/nginx:1.25"),
    ("docker.io/library/busybox:latest", Role::Shell),
    ("docker.io/library/busybox:1.32", Role::Shell),
    ("docker.io/library/busybox:1.33", Role::Shell),
    ("docker.io/library/busybox:1.34", Role::Shell),
    ("docker.io/library/busybox:1.35", Role::Shell),
    ("docker.io/library/busybox:1.36", Role::Shell),
    // Upstream's PodProbeMarker e2e runs `sleep 999d` in it and probes it with `ps -ef`.
    ("docker.io/library/centos:7", Role::Shell),
    (
        "registry.k8s.io/e2e-test-images/busybox:1.36.1-1",
        Role::Shell,
    ),
    // Upstream's e2e sidecar (agnhost with no arguments: its default command `pause`). Its other
    // subcommands (netexec, ...) are not built.
    ("registry.k8s.io/e2e-test-images/agnhost:2.53", Role::Pause),
    httpd("registry.k8s.io/e2e-test-images/httpd:2.4.38-4"),
    httpd("registry.k8s.io/e2e-test-images/httpd:2.4.39-4"),
    nginx("registry.k8s.io/e2e-test-images/nginx:1.14-4"),
    nginx("registry.k8s.io/e2e-test-images/nginx:1.15-4"),
    // Seed 001's SidecarSet injection: the logtail sidecar, and the Pod's log writer (`/bin/mock_log`).
    ("docker.io/log-service/logtail:0.16.16", Role::Pause),
    ("docker.io/log-service/docker-log-test:latest", Role::Pause),
    // SidecarSet hot upgrade: the idle twin's empty image and two sidecar versions.
    ("docker.io/openkruise/hotupgrade-sample:empty", Role::Pause),
    (
        "docker.io/openkruise/hotupgrade-sample:sidecarv1",
        Role::Pause,
    ),
    (
        "docker.io/openkruise/hotupgrade-sample:sidecarv2",
        Role::Pause,
    ),
];

/// A reference split into what a registry needs: `docker.io/library/nginx:alpine` →
/// (`library/nginx`, `alpine`). Short names (`nginx:alpine`) are Docker Hub's library images.
pub fn repository_and_tag(reference: &str) -> anyhow::Result<(String, String)> {
    let (name, tag) = match reference.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => (name, tag),
        _ => (reference, "latest"),
    };
    let mut parts: Vec<&str> = name.split('/').collect();
    let first_is_host = parts.len() > 1 && (parts[0].contains('.') || parts[0].contains(':'));
    if first_is_host {
        parts.remove(0);
    } else if parts.len() == 1 {
        parts.insert(0, "library");
    }
    ensure!(
        !parts.is_empty() && !tag.is_empty(),
        "bad image reference {reference}"
    );
    Ok((parts.join("/"), tag.to_string()))
}

/// The blobs of the image `reference` with `role`, from the busybox at `busybox`.
pub fn build(reference: &str, role: Role, busybox: &Path) -> anyhow::Result<Blobs> {
    let binary =
        std::fs::read(busybox).with_context(|| format!("reading {}", busybox.display()))?;
    let applets = applets(busybox)?;
    let mut layer = Layer::new();
    for dir in [
        "bin/",
        "sbin/",
        "usr/",
        "usr/bin/",
        "usr/sbin/",
        "etc/",
        "root/",
        "var/",
        "var/run/",
        "proc/",
        "sys/",
        "dev/",
        "usr/share/",
        "usr/share/nginx/",
        "usr/share/nginx/html/",
        "usr/local/",
        "usr/local/apache2/",
        "usr/local/apache2/htdocs/",
    ] {
        layer.dir(dir, 0o755)?;
    }
    layer.dir("tmp/", 0o1777)?;
    layer.file("bin/busybox", 0o755, &binary)?;
    // Upstream's e2e Pods run `/bin/bash -c …` in the httpd image (Debian-based upstream); busybox has
    // no bash applet, so `bash` is a script handing over to busybox's sh.
    layer.file("bin/bash", 0o755, b"#!/bin/sh\nexec /bin/sh \"$@\"\n")?;
    for applet in &applets {
        if applet != "busybox" && applet != "bash" {
            layer.symlink(&format!("bin/{applet}"), "busybox")?;
        }
    }
    // Seed 001's Pod runs `/bin/mock_log --path=<file> …` (an image of Alibaba Cloud's log service): a
    // line a second appended to the file given, until stopped.
    layer.file(
        "bin/mock_log",
        0o755,
        b"#!/bin/sh\npath=/dev/stdout\nfor arg in \"$@\"; do case \"$arg\" in --path=*) path=\"${arg#--path=}\";; esac; done\n\
trap 'exit 0' TERM INT\nwhile true; do echo \"$(date) GET / 200\" >> \"$path\"; sleep 1 & wait $!; done\n",
    )?;
    // Seed 001's logtail sidecar runs `/usr/local/ilogtail/run_logtail.sh 10` and is probed with
    // `/etc/init.d/ilogtaild status`: it runs until stopped (at once: no drain to wait for here), and
    // its status is fine while it runs.
    for dir in ["usr/local/ilogtail/", "etc/init.d/"] {
        layer.dir(dir, 0o755)?;
    }
    layer.file(
        "usr/local/ilogtail/run_logtail.sh",
        0o755,
        b"#!/bin/sh\ntrap 'exit 0' TERM INT\nwhile true; do sleep 3600 & wait $!; done\n",
    )?;
    layer.file("etc/init.d/ilogtaild", 0o755, b"#!/bin/sh\nexit 0\n")?;
    layer.file(
        "etc/passwd",
        0o644,
        b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
    )?;
    layer.file("etc/group", 0o644, b"root:x:0:\nnobody:x:65534:\n")?;
    layer.file(
        "etc/kruise-rs-image",
        0o644,
        format!("{reference}\n").as_bytes(),
    )?;
    let page = format!("<html><body>{reference}</body></html>\n");
    layer.file("usr/share/nginx/html/index.html", 0o644, page.as_bytes())?;
    layer.file(
        "usr/local/apache2/htdocs/index.html",
        0o644,
        page.as_bytes(),
    )?;
    let cmd: Vec<String> = match role {
        // A shell as PID 1 ignores SIGTERM unless it traps it: trap, so Pods stop at once, as the real
        // images do, and an in-place restart does not wait out the grace period.
        Role::Pause => vec![
            "/bin/sh".into(),
            "-c".into(),
            "trap 'exit 0' TERM INT; while true; do sleep 3600 & wait $!; done".into(),
        ],
        Role::WebServer(root) => vec![
            "/bin/sh".into(),
            "-c".into(),
            format!("trap 'exit 0' TERM INT; httpd -f -p 80 -h {root} & wait $!"),
        ],
        Role::Shell => vec!["sh".into()],
    };
    let config = json!({
        "created": "1970-01-01T00:00:00Z",
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"],
            "Cmd": cmd,
            "WorkingDir": "/",
            "Labels": {"io.kruise-rs.test-image": reference},
        },
    });
    Blobs::new(&layer.finish()?, config, 1)
}

fn applets(busybox: &Path) -> anyhow::Result<Vec<String>> {
    let out = std::process::Command::new(busybox)
        .arg("--list")
        .output()
        .with_context(|| format!("running {} --list", busybox.display()))?;
    ensure!(out.status.success(), "{} --list failed", busybox.display());
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|name| !name.is_empty() && !name.contains('/'))
        .map(String::from)
        .collect())
}

/// A `docker-registry` process on 127.0.0.1 with its storage under `dir`.
pub struct Registry {
    pub port: u16,
    pub process: crate::process::Process,
}

impl Registry {
    /// Starts the registry and waits until it answers `/v2/` (on a multi-threaded runtime: the
    /// probe is a blocking request).
    pub async fn start(dir: &Path, port: u16) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir.join("storage"))
            .with_context(|| format!("creating {}", dir.display()))?;
        let config = dir.join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n",
                dir.join("storage").display()
            ),
        )
        .with_context(|| format!("writing {}", config.display()))?;
        let program = which("docker-registry")?;
        let process = crate::process::Process::spawn(
            "docker-registry",
            &program,
            &["serve".into(), config.display().to_string()],
            &dir.join("registry.log"),
        )?;
        let log = dir.join("registry.log");
        crate::wait::until(
            format!("docker-registry to answer on 127.0.0.1:{port}"),
            Duration::from_secs(30),
            || async {
                // A refused connection fails at once: blocking here is brief.
                let answer = tokio::task::block_in_place(|| request(port, "GET", "/v2/", &[], &[]));
                Ok(answer.is_ok_and(|response| response.status == 200))
            },
        )
        .await
        .with_context(|| crate::process::tail(&log, 20))?;
        Ok(Self { port, process })
    }

    /// Pushes one image (its blobs, then its manifest under `tag`).
    pub fn push(&self, repository: &str, tag: &str, blobs: &Blobs) -> anyhow::Result<()> {
        for (digest, bytes) in [
            (&blobs.layer_digest, &blobs.layer_gz),
            (&blobs.config_digest, &blobs.config),
        ] {
            let head = request(
                self.port,
                "HEAD",
                &format!("/v2/{repository}/blobs/{digest}"),
                &[],
                &[],
            )?;
            if head.status == 200 {
                continue;
            }
            let start = request(
                self.port,
                "POST",
                &format!("/v2/{repository}/blobs/uploads/"),
                &[],
                &[],
            )?;
            ensure!(
                start.status == 202,
                "starting a blob upload to {repository}: HTTP {}",
                start.status
            );
            let location = start
                .header("location")
                .context("the registry gave no upload location")?;
            let path = location
                .strip_prefix(&format!("http://127.0.0.1:{}", self.port))
                .unwrap_or(&location)
                .to_string();
            let separator = if path.contains('?') { '&' } else { '?' };
            let put = request(
                self.port,
                "PUT",
                &format!("{path}{separator}digest={digest}"),
                &[("Content-Type", "application/octet-stream")],
                bytes,
            )?;
            ensure!(
                put.status == 201,
                "uploading {digest} to {repository}: HTTP {}",
                put.status
            );
        }
        let put = request(
            self.port,
            "PUT",
            &format!("/v2/{repository}/manifests/{tag}"),
            &[("Content-Type", Blobs::MANIFEST_MEDIA_TYPE)],
            &blobs.manifest,
        )?;
        ensure!(
            put.status == 201,
            "pushing {repository}:{tag}: HTTP {}",
            put.status
        );
        Ok(())
    }

    /// Builds and pushes every image of [`IMAGES`]; returns (reference, manifest digest).
    pub fn push_test_images(&self) -> anyhow::Result<Vec<(String, String)>> {
        let busybox = PathBuf::from(BUSYBOX);
        let mut pushed = Vec::new();
        for (reference, role) in IMAGES {
            let blobs = build(reference, *role, &busybox)?;
            let (repository, tag) = repository_and_tag(reference)?;
            self.push(&repository, &tag, &blobs)
                .with_context(|| format!("pushing {reference}"))?;
            pushed.push((reference.to_string(), blobs.manifest_digest.clone()));
        }
        Ok(pushed)
    }
}

/// The absolute path of `program` on PATH (also searching the sbin directories).
pub fn which(program: &str) -> anyhow::Result<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"])
        .map(|dir| Path::new(dir).join(program))
        .find(|candidate| candidate.is_file())
        .with_context(|| {
            format!("{program} is not installed (`make real-node` installs the Debian packages)")
        })
}

struct Response {
    status: u16,
    headers: Vec<(String, String)>,
}

impl Response {
    fn header(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.clone())
    }
}

/// One HTTP/1.1 request to the registry on its own connection (the registry API needs nothing more).
fn request(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> anyhow::Result<Response> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))
        .with_context(|| format!("connecting to the registry on 127.0.0.1:{port}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .with_context(|| format!("reading the registry's answer to {method} {path}"))?;
    let text = String::from_utf8_lossy(&raw);
    let header_end = text.find("\r\n\r\n").unwrap_or(text.len());
    let mut lines = text[..header_end].split("\r\n");
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .with_context(|| format!("a malformed answer to {method} {path}"))?;
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    Ok(Response { status, headers })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_map_to_registry_paths() {
        let cases = [
            ("nginx:alpine", ("library/nginx", "alpine")),
            (
                "docker.io/library/nginx:1.19.1",
                ("library/nginx", "1.19.1"),
            ),
            ("busybox", ("library/busybox", "latest")),
            ("registry.k8s.io/pause:3.10", ("pause", "3.10")),
            (
                "registry.k8s.io/e2e-test-images/httpd:2.4.38-4",
                ("e2e-test-images/httpd", "2.4.38-4"),
            ),
            ("127.0.0.1:5000/x/y", ("x/y", "latest")),
        ];
        for (reference, (repository, tag)) in cases {
            let got = repository_and_tag(reference).expect("parses");
            assert_eq!(
                (got.0.as_str(), got.1.as_str()),
                (repository, tag),
                "{reference}"
            );
        }
    }

    #[test]
    fn every_reference_has_its_own_digest() {
        let mut digests = std::collections::BTreeSet::new();
        for (reference, role) in IMAGES.iter().take(4) {
            let blobs = build(reference, *role, Path::new(BUSYBOX)).expect("builds");
            assert!(
                digests.insert(blobs.manifest_digest),
                "{reference} repeats a digest"
            );
        }
    }
}
