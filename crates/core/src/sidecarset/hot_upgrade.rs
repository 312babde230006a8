//! Hot upgrade: a sidecar with `upgradeType: HotUpgrade` runs as two containers, `<name>-1` and
//! `<name>-2`, so that the upgrade controller can start the new version beside the old one and hand
//! over before stopping it. At injection `-1` works and `-2` idles on `hotUpgradeEmptyImage`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, EnvVar, EnvVarSource, ObjectFieldSelector};

/// Pod annotation prefix: `version.sidecarset.kruise.io/<container>` is the version a hot-upgrade
/// container runs ("0" = the empty image).
pub const ANNOTATION_VERSION_PREFIX: &str = "version.sidecarset.kruise.io/";
/// Pod annotation prefix: `versionalt.sidecarset.kruise.io/<container>` is the twin's version.
pub const ANNOTATION_VERSION_ALT_PREFIX: &str = "versionalt.sidecarset.kruise.io/";
/// Env var of a hot-upgrade container: its own version (a downward-API reference to the annotation).
pub const ENV_SIDECARSET_VERSION: &str = "SIDECARSET_VERSION";
/// Env var of a hot-upgrade container: its twin's version.
pub const ENV_SIDECARSET_VERSION_ALT: &str = "SIDECARSET_VERSION_ALT";

/// The two container names of a hot-upgrade sidecar: (`<name>-1`, `<name>-2`).
pub fn hot_upgrade_names(name: &str) -> (String, String) {
    (format!("{name}-1"), format!("{name}-2"))
}

/// Splits a built sidecar into its working and idle twins, and records on the Pod (in `annotations`)
/// their versions and, in `working`, that `-1` is the working one.
pub(super) fn split(
    sidecar: &Container,
    empty_image: &str,
    annotations: &mut BTreeMap<String, String>,
    working: &mut BTreeMap<String, String>,
) -> [Container; 2] {
    let (name1, name2) = hot_upgrade_names(&sidecar.name);
    let mut first = sidecar.clone();
    first.name = name1.clone();
    let mut second = sidecar.clone();
    second.name = name2.clone();
    second.image = Some(empty_image.to_string());
    for container in [&mut first, &mut second] {
        add_version_env(container);
    }
    // "1": injected and never upgraded; "0": the empty image.
    for (name, version, alt) in [(&name1, "1", "0"), (&name2, "0", "1")] {
        annotations.insert(format!("{ANNOTATION_VERSION_PREFIX}{name}"), version.into());
        annotations.insert(format!("{ANNOTATION_VERSION_ALT_PREFIX}{name}"), alt.into());
    }
    working.insert(sidecar.name.clone(), name1);
    [first, second]
}

/// The two version vars, read from the Pod's annotations through the downward API so that the process
/// sees the upgrade controller's later changes without a restart.
fn add_version_env(container: &mut Container) {
    let env = container.env.get_or_insert_with(Vec::new);
    for (var, prefix) in [
        (ENV_SIDECARSET_VERSION, ANNOTATION_VERSION_PREFIX),
        (ENV_SIDECARSET_VERSION_ALT, ANNOTATION_VERSION_ALT_PREFIX),
    ] {
        env.push(EnvVar {
            name: var.into(),
            value: None,
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    api_version: None,
                    field_path: format!("metadata.annotations['{prefix}{}']", container.name),
                }),
                ..EnvVarSource::default()
            }),
        });
    }
}
