//! Image references as a container runtime reports them.
//!
//! Kruise decides that an in-place update finished by comparing `status.containerStatuses[].imageID`
//! before and after, and compares spec images with status images after normalising a missing tag to
//! `:latest`. So the simulator reports a normalised `image` and an `imageID` that is a pure function of the
//! image: the same image always has the same ID, and a different image has a different ID.

use sha2::{Digest, Sha256};

/// The image string a runtime reports for a spec image, as containerd does: fully qualified (Docker
/// Hub's host `docker.io` and, for a one-segment name, its `library/` namespace written out) and with
/// `:latest` appended when the reference has neither a tag nor a digest. `nginx:1.19.1` is reported as
/// `docker.io/library/nginx:1.19.1`.
pub fn normalize(image: &str) -> String {
    let qualified = qualify(image);
    if has_tag_or_digest(&qualified) {
        qualified
    } else {
        format!("{qualified}:latest")
    }
}

/// Writes out Docker Hub's implied host and `library/` namespace.
fn qualify(image: &str) -> String {
    if registry_host(image).is_some() {
        image.to_string()
    } else if image.contains('/') {
        format!("docker.io/{image}")
    } else {
        format!("docker.io/library/{image}")
    }
}

/// A stable image ID (`docker.io/library/nginx@sha256:...`, qualified like [`normalize`]). A digest
/// reference keeps its own digest, as Kruise compares digest references with imageIDs directly.
pub fn image_id(image: &str) -> String {
    if let Some((repo, digest)) = image.split_once('@') {
        return format!("{}@{digest}", repository(&qualify(repo)));
    }
    let normalized = normalize(image);
    let digest = hex::encode(Sha256::digest(normalized.as_bytes()));
    format!("{}@sha256:{digest}", repository(&normalized))
}

/// [`image_id`], unless the registry is told that the image is `digest` (`sha256:…`): then the image's
/// repository at that digest, so that two tags of one digest report the same imageID.
pub fn image_id_at(image: &str, digest: Option<&str>) -> String {
    match digest {
        Some(digest) => format!("{}@{digest}", repository(&normalize(image))),
        None => image_id(image),
    }
}

/// The registry host of a reference, when it names one (`registry.k8s.io/pause` → `registry.k8s.io`;
/// `nginx` and `team/app` are Docker Hub's, with no host written).
pub fn registry_host(image: &str) -> Option<&str> {
    let (first, _) = image.split_once('/')?;
    (first.contains('.') || first.contains(':') || first == "localhost").then_some(first)
}

/// Whether a pull of `image` fails because its registry host does not resolve: a host under the
/// reserved `.invalid` top-level domain (RFC 6761) or starting with `invalid.`, e.g.
/// `invalid.registry.k8s.io/app:v1`. Tests use such images for rollouts to an image that cannot be
/// pulled.
pub fn unpullable(image: &str) -> bool {
    registry_host(image).is_some_and(|host| {
        let host = host.split(':').next().unwrap_or(host);
        host.starts_with("invalid.") || host.ends_with(".invalid")
    })
}

/// The tag of a reference, if any (`nginx:1.19` → `1.19`; a registry port is not a tag).
pub fn tag(image: &str) -> Option<&str> {
    let without_digest = image.split('@').next().unwrap_or(image);
    let last_segment = without_digest.rsplit('/').next().unwrap_or(without_digest);
    last_segment.split_once(':').map(|(_, tag)| tag)
}

fn has_tag_or_digest(image: &str) -> bool {
    image.contains('@') || tag(image).is_some()
}

/// The reference without tag and digest.
fn repository(image: &str) -> &str {
    let without_digest = image.split('@').next().unwrap_or(image);
    match tag(without_digest) {
        Some(tag) => &without_digest[..without_digest.len() - tag.len() - 1],
        None => without_digest,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpullable_cases() {
        let cases = [
            ("nginx:alpine", false),
            ("team/app:v1", false),
            ("registry.k8s.io/pause:3.10", false),
            ("invalid.registry.k8s.io/app:v1", true),
            ("registry.invalid/app", true),
            ("registry.invalid:5000/app@sha256:abc", true),
            ("invalid/app:v1", false),
            ("localhost:5000/app", false),
        ];
        for (image, want) in cases {
            assert_eq!(unpullable(image), want, "{image}");
        }
    }

    #[test]
    fn normalize_cases() {
        let cases = [
            ("nginx", "docker.io/library/nginx:latest"),
            ("nginx:alpine", "docker.io/library/nginx:alpine"),
            ("team/app:v1", "docker.io/team/app:v1"),
            (
                "docker.io/library/nginx:alpine",
                "docker.io/library/nginx:alpine",
            ),
            ("registry:5000/team/app", "registry:5000/team/app:latest"),
            ("registry:5000/team/app:v2", "registry:5000/team/app:v2"),
            ("nginx@sha256:abc", "docker.io/library/nginx@sha256:abc"),
        ];
        for (input, want) in cases {
            assert_eq!(normalize(input), want, "normalize({input})");
        }
    }

    #[test]
    fn image_id_is_stable_and_distinct() {
        assert_eq!(image_id("nginx:alpine"), image_id("nginx:alpine"));
        assert_eq!(image_id("nginx"), image_id("nginx:latest"));
        assert_ne!(image_id("nginx:alpine"), image_id("nginx:1.19.1"));
        assert!(image_id("nginx:alpine").starts_with("docker.io/library/nginx@sha256:"));
        assert_eq!(
            image_id("nginx:alpine"),
            image_id("docker.io/library/nginx:alpine")
        );
        assert_eq!(
            image_id("registry:5000/app:v1").split('@').next(),
            Some("registry:5000/app")
        );
    }

    #[test]
    fn digest_reference_keeps_its_digest() {
        assert_eq!(
            image_id("nginx:1.2@sha256:abc"),
            "docker.io/library/nginx@sha256:abc"
        );
    }

    #[test]
    fn tag_cases() {
        assert_eq!(tag("nginx:1.19-never-ready"), Some("1.19-never-ready"));
        assert_eq!(tag("localhost:5000/nginx"), None);
        assert_eq!(tag("nginx@sha256:abc"), None);
    }
}
