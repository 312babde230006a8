//! kruise-rs's container images (kruise-manager's, and kruise-daemon's, the DaemonSet's own) as OCI image
//! layout archives, written without a container
//! daemon: one gzip layer holding the static binary at `/<name>` and a `nonroot` user (UID/GID
//! 65532, as distroless), a config whose entrypoint is the binary and whose user is that UID, a manifest
//! and an index, every blob named by its sha256. The archive also carries Docker's `manifest.json`, so
//! `docker load`, `podman load` and `skopeo copy oci-archive:…` all read it.
//!
//! Layers are reproducible: every tar header has mtime 0 and owner root, and the config's `created` is
//! the epoch, so the same binary always gives the same digests.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;

use anyhow::{Context, bail, ensure};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// Path of the manager's binary inside its image (and the entrypoint).
pub const ENTRYPOINT: &str = "/kruise-manager";
/// The manager image's binary name and exposed ports (metrics/health, webhook, leader health).
pub const MANAGER: &str = "kruise-manager";
pub const MANAGER_PORTS: &[u16] = &[8000, 8080, 9876];
/// The daemon image's binary name and exposed port (health and metrics).
pub const DAEMON: &str = "kruise-daemon";
pub const DAEMON_PORTS: &[u16] = &[10221];
/// The non-root user and group the image runs as (distroless's `nonroot`).
pub const NONROOT: u32 = 65532;

const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
const CONFIG_TYPE: &str = "application/vnd.oci.image.config.v1+json";
const LAYER_TYPE: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

/// What goes into the image.
#[derive(Clone, Debug)]
pub struct Spec<'a> {
    /// The executable (static, for a scratch image).
    pub binary: &'a Path,
    /// Its name: the image holds it at `/<name>`, its entrypoint (e.g. [`MANAGER`], [`DAEMON`]).
    pub name: &'a str,
    /// The TCP ports the image exposes.
    pub ports: &'a [u16],
    /// Image reference recorded in the index and in `manifest.json`, e.g. `kruise-rs/kruise-manager:0.1.0`.
    pub reference: String,
    /// OCI architecture name: `amd64`, `arm64`.
    pub architecture: String,
    /// `org.opencontainers.image.version`.
    pub version: String,
    /// Gzip level 0–9 (the test uses a low one on a debug binary).
    pub compression: u32,
    /// Files copied into the image beside the binary, each (absolute path in the image, file on this
    /// machine): for a dynamically linked binary, its program interpreter and shared libraries (the test
    /// bed runs its debug build this way). Empty for `make image`'s static binaries.
    pub libraries: &'a [(String, std::path::PathBuf)],
}

/// What [`build`] wrote.
#[derive(Clone, Debug)]
pub struct Written {
    pub manifest_digest: String,
    /// Sum of the compressed blobs (what a registry stores and a node pulls).
    pub compressed_size: u64,
    pub archive_size: u64,
}

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

fn header(path: &str, mode: u32, size: u64, kind: tar::EntryType) -> anyhow::Result<tar::Header> {
    let mut header = tar::Header::new_ustar();
    header
        .set_path(path)
        .with_context(|| format!("tar path {path}"))?;
    header.set_entry_type(kind);
    header.set_mode(mode);
    header.set_size(size);
    header.set_mtime(0);
    header.set_uid(0);
    header.set_gid(0);
    header.set_cksum();
    Ok(header)
}

fn append_file<W: Write>(
    builder: &mut tar::Builder<W>,
    path: &str,
    mode: u32,
    bytes: &[u8],
) -> anyhow::Result<()> {
    let mut head = header(path, mode, bytes.len() as u64, tar::EntryType::Regular)?;
    builder
        .append_data(&mut head, path, bytes)
        .with_context(|| format!("writing {path} into a tar"))
}

fn append_dir<W: Write>(builder: &mut tar::Builder<W>, path: &str) -> anyhow::Result<()> {
    let mut head = header(path, 0o755, 0, tar::EntryType::Directory)?;
    builder
        .append_data(&mut head, path, std::io::empty())
        .with_context(|| format!("writing {path} into a tar"))
}

/// The root filesystem layer, uncompressed.
fn layer_tar(
    binary: &[u8],
    name: &str,
    libraries: &[(String, std::path::PathBuf)],
) -> anyhow::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    append_dir(&mut builder, "etc/")?;
    // Every directory above a library, once, parents first (`etc/` is already there).
    let mut dirs = std::collections::BTreeSet::from(["etc/".to_string()]);
    for (path, _) in libraries {
        let relative = path.trim_start_matches('/');
        ensure!(
            path.starts_with('/') && !relative.is_empty() && !relative.contains(".."),
            "library path {path:?} must be absolute and plain"
        );
        let parents: Vec<&Path> = Path::new(relative)
            .ancestors()
            .skip(1)
            .filter(|parent| !parent.as_os_str().is_empty())
            .collect();
        for parent in parents.into_iter().rev() {
            let dir = format!("{}/", parent.display());
            if dirs.insert(dir.clone()) {
                append_dir(&mut builder, &dir)?;
            }
        }
    }
    for (path, source) in libraries {
        let bytes =
            std::fs::read(source).with_context(|| format!("reading {}", source.display()))?;
        append_file(&mut builder, path.trim_start_matches('/'), 0o755, &bytes)?;
    }
    let passwd = format!(
        "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:{NONROOT}:{NONROOT}:nonroot:/home/nonroot:/sbin/nologin\n"
    );
    append_file(&mut builder, "etc/passwd", 0o644, passwd.as_bytes())?;
    let group = format!("root:x:0:\nnonroot:x:{NONROOT}:\n");
    append_file(&mut builder, "etc/group", 0o644, group.as_bytes())?;
    append_file(&mut builder, name, 0o755, binary)?;
    builder.into_inner().context("finishing the layer tar")
}

/// A root-filesystem layer under construction: entries in the order they are added, every header with
/// mtime 0 and owner root, so the same entries always give the same digest.
pub struct Layer {
    builder: tar::Builder<Vec<u8>>,
}

impl Default for Layer {
    fn default() -> Self {
        Self::new()
    }
}

impl Layer {
    pub fn new() -> Self {
        Self {
            builder: tar::Builder::new(Vec::new()),
        }
    }

    /// A directory (`path` relative, ending in `/`).
    pub fn dir(&mut self, path: &str, mode: u32) -> anyhow::Result<&mut Self> {
        let mut head = header(path, mode, 0, tar::EntryType::Directory)?;
        self.builder
            .append_data(&mut head, path, std::io::empty())
            .with_context(|| format!("writing {path} into a tar"))?;
        Ok(self)
    }

    /// A regular file.
    pub fn file(&mut self, path: &str, mode: u32, bytes: &[u8]) -> anyhow::Result<&mut Self> {
        append_file(&mut self.builder, path, mode, bytes)?;
        Ok(self)
    }

    /// A symbolic link at `path` pointing to `target`.
    pub fn symlink(&mut self, path: &str, target: &str) -> anyhow::Result<&mut Self> {
        let mut head = header(path, 0o777, 0, tar::EntryType::Symlink)?;
        self.builder
            .append_link(&mut head, path, target)
            .with_context(|| format!("writing the link {path} into a tar"))?;
        Ok(self)
    }

    /// The uncompressed layer tar.
    pub fn finish(self) -> anyhow::Result<Vec<u8>> {
        self.builder.into_inner().context("finishing the layer tar")
    }
}

/// The blobs of a one-layer image, each with its digest: what an OCI layout or a registry stores.
#[derive(Clone, Debug)]
pub struct Blobs {
    pub layer_gz: Vec<u8>,
    pub layer_digest: String,
    pub config: Vec<u8>,
    pub config_digest: String,
    pub manifest: Vec<u8>,
    pub manifest_digest: String,
}

impl Blobs {
    /// Compresses `layer` (an uncompressed tar) and completes `config` (an OCI image config without
    /// `rootfs`) with the layer's diff_id, then writes the manifest naming both.
    pub fn new(layer: &[u8], mut config: Value, compression: u32) -> anyhow::Result<Self> {
        let diff_id = sha256(layer);
        let mut gz =
            flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(compression.min(9)));
        gz.write_all(layer).context("compressing the layer")?;
        let layer_gz = gz.finish().context("compressing the layer")?;
        let layer_digest = sha256(&layer_gz);
        config["rootfs"] = json!({"type": "layers", "diff_ids": [diff_id]});
        let config = serde_json::to_vec(&config).context("serializing the image config")?;
        let config_digest = sha256(&config);
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": MANIFEST_TYPE,
            "config": {"mediaType": CONFIG_TYPE, "digest": config_digest, "size": config.len()},
            "layers": [{"mediaType": LAYER_TYPE, "digest": layer_digest, "size": layer_gz.len()}],
        });
        let manifest = serde_json::to_vec(&manifest).context("serializing the manifest")?;
        let manifest_digest = sha256(&manifest);
        Ok(Self {
            layer_gz,
            layer_digest,
            config,
            config_digest,
            manifest,
            manifest_digest,
        })
    }

    /// The manifest's media type (for a registry's `Content-Type`).
    pub const MANIFEST_MEDIA_TYPE: &'static str = MANIFEST_TYPE;
}

/// The image's blobs (layer, config, manifest), as a registry stores them.
pub fn blobs(spec: &Spec<'_>) -> anyhow::Result<Blobs> {
    let binary =
        std::fs::read(spec.binary).with_context(|| format!("reading {}", spec.binary.display()))?;
    anyhow::ensure!(
        !spec.name.is_empty() && !spec.name.contains('/'),
        "binary name {:?} must be a plain file name",
        spec.name
    );
    let layer = layer_tar(&binary, spec.name, spec.libraries)?;
    let entrypoint = format!("/{}", spec.name);
    let ports: serde_json::Map<String, Value> = spec
        .ports
        .iter()
        .map(|p| (format!("{p}/tcp"), json!({})))
        .collect();
    let user = format!("{NONROOT}:{NONROOT}");
    let config = json!({
        "created": "1970-01-01T00:00:00Z",
        "architecture": spec.architecture,
        "os": "linux",
        "config": {
            "User": user,
            "Entrypoint": [entrypoint],
            "Env": ["PATH=/"],
            "WorkingDir": "/",
            "ExposedPorts": ports,
            "Labels": {
                "org.opencontainers.image.title": spec.name,
                "org.opencontainers.image.version": spec.version,
                "org.opencontainers.image.licenses": "Apache-2.0",
            },
        },
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "oci-image build (kruise-rs make image)"}],
    });
    Blobs::new(&layer, config, spec.compression)
}

/// Writes the image archive to `out`.
pub fn build(spec: &Spec<'_>, out: &Path) -> anyhow::Result<Written> {
    let Blobs {
        layer_gz,
        layer_digest,
        config,
        config_digest,
        manifest,
        manifest_digest,
    } = blobs(spec)?;

    let index = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": MANIFEST_TYPE,
            "digest": manifest_digest,
            "size": manifest.len(),
            "platform": {"architecture": spec.architecture, "os": "linux"},
            "annotations": {"org.opencontainers.image.ref.name": spec.reference},
        }],
    });
    let blob = |digest: &str| format!("blobs/sha256/{}", digest.trim_start_matches("sha256:"));
    let docker = json!([{
        "Config": blob(&config_digest),
        "RepoTags": [spec.reference],
        "Layers": [blob(&layer_digest)],
    }]);

    let file = std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let mut archive = tar::Builder::new(std::io::BufWriter::new(file));
    append_file(
        &mut archive,
        "oci-layout",
        0o644,
        br#"{"imageLayoutVersion":"1.0.0"}"#,
    )?;
    append_file(
        &mut archive,
        "index.json",
        0o644,
        &serde_json::to_vec(&index).context("serializing the index")?,
    )?;
    append_file(
        &mut archive,
        "manifest.json",
        0o644,
        &serde_json::to_vec(&docker).context("serializing manifest.json")?,
    )?;
    append_dir(&mut archive, "blobs/")?;
    append_dir(&mut archive, "blobs/sha256/")?;
    append_file(&mut archive, &blob(&config_digest), 0o644, &config)?;
    append_file(&mut archive, &blob(&manifest_digest), 0o644, &manifest)?;
    append_file(&mut archive, &blob(&layer_digest), 0o644, &layer_gz)?;
    archive
        .into_inner()
        .context("finishing the archive")?
        .flush()
        .with_context(|| format!("writing {}", out.display()))?;
    Ok(Written {
        manifest_digest,
        compressed_size: (config.len() + manifest.len() + layer_gz.len()) as u64,
        archive_size: std::fs::metadata(out)
            .with_context(|| format!("reading {}", out.display()))?
            .len(),
    })
}

/// One file of the image's root filesystem.
#[derive(Clone, Debug)]
pub struct File {
    pub mode: u32,
    pub uid: u64,
    pub gid: u64,
    pub bytes: Vec<u8>,
}

/// An image read back from an archive, every digest and size checked.
#[derive(Clone, Debug)]
pub struct Image {
    pub reference: Option<String>,
    pub manifest_digest: String,
    pub config: Value,
    /// Regular files of the root filesystem by absolute path.
    pub files: BTreeMap<String, File>,
    /// Compressed config + manifest + layers.
    pub compressed_size: u64,
}

impl Image {
    /// `config.Entrypoint`.
    pub fn entrypoint(&self) -> Vec<String> {
        self.config["config"]["Entrypoint"]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter_map(|item| item.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `config.User`.
    pub fn user(&self) -> Option<&str> {
        self.config["config"]["User"].as_str()
    }

    /// The numeric UID the image runs as, when `User` is numeric (`65532` or `65532:65532`); a name is
    /// resolved through the image's `/etc/passwd`.
    pub fn uid(&self) -> Option<u32> {
        let user = self.user()?.split(':').next()?;
        if let Ok(uid) = user.parse() {
            return Some(uid);
        }
        let passwd = String::from_utf8_lossy(&self.files.get("/etc/passwd")?.bytes).into_owned();
        passwd.lines().find_map(|line| {
            let mut fields = line.split(':');
            (fields.next() == Some(user))
                .then(|| fields.nth(1)?.parse().ok())
                .flatten()
        })
    }
}

fn read_entries(reader: impl Read) -> anyhow::Result<BTreeMap<String, (tar::EntryType, File)>> {
    let mut archive = tar::Archive::new(reader);
    let mut entries = BTreeMap::new();
    for entry in archive.entries().context("reading a tar")? {
        let mut entry = entry.context("reading a tar entry")?;
        let path = entry
            .path()
            .context("a tar entry's path")?
            .to_string_lossy()
            .trim_start_matches("./")
            .trim_end_matches('/')
            .to_string();
        let head = entry.header().clone();
        let mut bytes = Vec::new();
        entry
            .read_to_end(&mut bytes)
            .with_context(|| format!("reading {path}"))?;
        let file = File {
            mode: head.mode().with_context(|| format!("mode of {path}"))?,
            uid: head.uid().with_context(|| format!("uid of {path}"))?,
            gid: head.gid().with_context(|| format!("gid of {path}"))?,
            bytes,
        };
        entries.insert(path, (head.entry_type(), file));
    }
    Ok(entries)
}

/// The files of an OCI layout archive, and its one manifest's descriptor.
struct Layout<'a> {
    archive: &'a Path,
    entries: BTreeMap<String, (tar::EntryType, File)>,
    descriptor: Value,
}

impl<'a> Layout<'a> {
    fn read(archive: &'a Path) -> anyhow::Result<Self> {
        let file = std::fs::File::open(archive)
            .with_context(|| format!("opening {}", archive.display()))?;
        let mut layout = Self {
            archive,
            entries: read_entries(std::io::BufReader::new(file))?,
            descriptor: Value::Null,
        };
        let version: Value =
            serde_json::from_slice(layout.get("oci-layout")?).context("parsing oci-layout")?;
        ensure!(
            version["imageLayoutVersion"] == "1.0.0",
            "oci-layout: unknown version {version}"
        );
        let index: Value =
            serde_json::from_slice(layout.get("index.json")?).context("parsing index.json")?;
        let descriptors = index["manifests"]
            .as_array()
            .context("index.json has no manifests")?;
        ensure!(
            descriptors.len() == 1,
            "index.json lists {} manifests, expected one",
            descriptors.len()
        );
        layout.descriptor = descriptors[0].clone();
        Ok(layout)
    }

    fn get(&self, path: &str) -> anyhow::Result<&Vec<u8>> {
        self.entries
            .get(path)
            .map(|(_, file)| &file.bytes)
            .with_context(|| format!("{} has no {path}", self.archive.display()))
    }

    /// The blob a descriptor names, its sha256 and size checked.
    fn blob(&self, descriptor: &Value) -> anyhow::Result<&Vec<u8>> {
        let digest = descriptor["digest"]
            .as_str()
            .with_context(|| format!("descriptor without digest: {descriptor}"))?;
        let hex = digest
            .strip_prefix("sha256:")
            .with_context(|| format!("{digest} is not a sha256 digest"))?;
        let bytes = self.get(&format!("blobs/sha256/{hex}"))?;
        ensure!(
            sha256(bytes) == digest,
            "blob {digest} does not hash to its name"
        );
        ensure!(
            descriptor["size"].as_u64() == Some(bytes.len() as u64),
            "blob {digest} is {} bytes, its descriptor says {}",
            bytes.len(),
            descriptor["size"]
        );
        Ok(bytes)
    }

    /// The manifest, raw and parsed.
    fn manifest(&self) -> anyhow::Result<(&Vec<u8>, Value)> {
        let bytes = self.blob(&self.descriptor)?;
        let manifest: Value = serde_json::from_slice(bytes).context("parsing the manifest")?;
        ensure!(
            manifest["mediaType"] == MANIFEST_TYPE,
            "manifest media type {}",
            manifest["mediaType"]
        );
        Ok((bytes, manifest))
    }
}

/// The blobs of a one-layer archive written by [`build`], every digest checked: what a registry push
/// needs (the test bed pushes `make image`'s archives this way).
pub fn read_blobs(archive: &Path) -> anyhow::Result<Blobs> {
    let layout = Layout::read(archive)?;
    let (manifest, parsed) = layout.manifest()?;
    let layers = parsed["layers"]
        .as_array()
        .context("manifest has no layers")?;
    ensure!(
        layers.len() == 1,
        "{} has {} layers, expected one",
        archive.display(),
        layers.len()
    );
    let digest = |descriptor: &Value| {
        descriptor["digest"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    Ok(Blobs {
        layer_gz: layout.blob(&layers[0])?.clone(),
        layer_digest: digest(&layers[0]),
        config: layout.blob(&parsed["config"])?.clone(),
        config_digest: digest(&parsed["config"]),
        manifest: manifest.clone(),
        manifest_digest: digest(&layout.descriptor),
    })
}

/// Opens an archive written by [`build`] (or any single-manifest OCI layout tar): follows index →
/// manifest → config and layers, checks every blob's sha256 and size against its descriptor and every
/// layer's diff_id, and unpacks the layers in order into a file map.
pub fn open(archive: &Path) -> anyhow::Result<Image> {
    let layout = Layout::read(archive)?;
    let (manifest_bytes, manifest) = layout.manifest()?;
    let blob = |descriptor: &Value| layout.blob(descriptor);
    let config_bytes = blob(&manifest["config"])?;
    let config: Value = serde_json::from_slice(config_bytes).context("parsing the config")?;
    let diff_ids = config["rootfs"]["diff_ids"]
        .as_array()
        .context("config has no rootfs.diff_ids")?;
    let layers = manifest["layers"]
        .as_array()
        .context("manifest has no layers")?;
    ensure!(
        layers.len() == diff_ids.len(),
        "{} layers but {} diff_ids",
        layers.len(),
        diff_ids.len()
    );
    let mut compressed_size = (manifest_bytes.len() + config_bytes.len()) as u64;
    let mut files = BTreeMap::new();
    for (layer, diff_id) in layers.iter().zip(diff_ids) {
        let bytes = blob(layer)?;
        compressed_size += bytes.len() as u64;
        let mut tar = Vec::new();
        match layer["mediaType"].as_str() {
            Some(LAYER_TYPE) => {
                flate2::read::GzDecoder::new(bytes.as_slice())
                    .read_to_end(&mut tar)
                    .context("decompressing a layer")?;
            }
            other => bail!("layer media type {other:?} is not {LAYER_TYPE}"),
        }
        ensure!(
            Some(sha256(&tar).as_str()) == diff_id.as_str(),
            "layer {} does not match its diff_id {diff_id}",
            layer["digest"]
        );
        for (path, (kind, file)) in read_entries(tar.as_slice())? {
            if kind == tar::EntryType::Regular {
                files.insert(format!("/{path}"), file);
            }
        }
    }
    Ok(Image {
        reference: layout.descriptor["annotations"]["org.opencontainers.image.ref.name"]
            .as_str()
            .map(String::from),
        manifest_digest: layout.descriptor["digest"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        config,
        files,
        compressed_size,
    })
}

/// Whether an ELF executable is static: it has no program interpreter (`PT_INTERP`), so it runs in an
/// image without a libc or a dynamic loader. Static-PIE (musl's default) counts as static.
pub fn is_static_elf(bytes: &[u8]) -> anyhow::Result<bool> {
    ensure!(bytes.get(..4) == Some(b"\x7fELF"), "not an ELF file");
    ensure!(
        bytes.get(4) == Some(&2) && bytes.get(5) == Some(&1),
        "not a 64-bit little-endian ELF file"
    );
    let u16_at = |at: usize| -> anyhow::Result<usize> {
        let raw = bytes.get(at..at + 2).context("truncated ELF header")?;
        Ok(u16::from_le_bytes([raw[0], raw[1]]) as usize)
    };
    let u64_at = |at: usize| -> anyhow::Result<usize> {
        let raw: [u8; 8] = bytes
            .get(at..at + 8)
            .context("truncated ELF header")?
            .try_into()
            .context("truncated ELF header")?;
        usize::try_from(u64::from_le_bytes(raw)).context("ELF offset out of range")
    };
    let (phoff, phentsize, phnum) = (u64_at(0x20)?, u16_at(0x36)?, u16_at(0x38)?);
    const PT_INTERP: u32 = 3;
    for n in 0..phnum {
        let at = phoff + n * phentsize;
        let raw: [u8; 4] = bytes
            .get(at..at + 4)
            .context("truncated ELF program headers")?
            .try_into()
            .context("truncated ELF program headers")?;
        if u32::from_le_bytes(raw) == PT_INTERP {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Copies the image's entrypoint out to `dir` and runs it with `args`; returns its stdout.
pub fn run_entrypoint(image: &Image, dir: &Path, args: &[&str]) -> anyhow::Result<String> {
    let entrypoint = image.entrypoint();
    let path = entrypoint.first().context("the image has no entrypoint")?;
    let file = image
        .files
        .get(path)
        .with_context(|| format!("the entrypoint {path} is not a file of the image"))?;
    ensure!(
        file.mode & 0o111 != 0,
        "the entrypoint {path} is not executable (mode {:o})",
        file.mode
    );
    let out = dir.join("entrypoint");
    std::fs::write(&out, &file.bytes).with_context(|| format!("writing {}", out.display()))?;
    std::fs::set_permissions(&out, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .with_context(|| format!("chmod {}", out.display()))?;
    let output = std::process::Command::new(&out)
        .args(
            entrypoint
                .iter()
                .skip(1)
                .map(String::as_str)
                .chain(args.iter().copied()),
        )
        .env_clear()
        .output()
        .with_context(|| format!("running the image's entrypoint {path}"))?;
    ensure!(
        output.status.success(),
        "{path} {args:?} exited with {}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}
