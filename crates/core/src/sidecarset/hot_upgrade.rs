//! Hot upgrade: a sidecar with `upgradeType: HotUpgrade` runs as two containers, `<name>-1` and
//! `<name>-2`, so that the upgrade controller can start the new version beside the old one and hand
//! over before stopping it. At injection `-1` works and `-2` idles on `hotUpgradeEmptyImage`.
//!
//! One upgrade round of such a sidecar (upstream `pkg/control/sidecarcontrol/hotupgrade_control.go`):
//! 1. the upgrade writes the new image into one twin (the idle one as a rule, see [`twin_to_upgrade`])
//!    and names it the working container in `kruise.io/sidecarset-working-hotupgrade-container`; the
//!    sidecar's processes hand over between themselves, reading the version annotations;
//! 2. once the working containers run their spec images and are ready, the flip
//!    ([`flip_patch`]) resets the other twin to the empty image, so that the old version stops.

use std::collections::{BTreeMap, BTreeSet};

use json_patch::{Patch, PatchOperation, ReplaceOperation};
use k8s_openapi::api::core::v1::{Container, EnvVar, EnvVarSource, ObjectFieldSelector, Pod};
use k8s_openapi::jiff::Timestamp;
use kruise_api::sidecarset::ANNOTATION_WORKING_HOT_UPGRADE_CONTAINER;
use kruise_api::sidecarset::v1beta1::{HOT_UPGRADE, SidecarContainer, SidecarSet};
use serde_json::json;

use super::upgrade::{Observed, UpgradeError, annotation_ops, guard, ptr, record_restarts};

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

/// Whether the sidecar runs as a -1/-2 pair.
pub(super) fn is_hot(sidecar: &SidecarContainer) -> bool {
    sidecar.upgrade_strategy.upgrade_type == HOT_UPGRADE
}

/// The SidecarSet's hot-upgrade sidecars (native-sidecar init containers are never upgraded in place,
/// so only `spec.containers` count).
pub(super) fn hot_sidecars(ss: &SidecarSet) -> impl Iterator<Item = &SidecarContainer> {
    ss.spec.containers.iter().filter(|c| is_hot(c))
}

/// The working container of each hot-upgrade sidecar, as the Pod records it in
/// `kruise.io/sidecarset-working-hotupgrade-container` (absent or unreadable: nothing recorded).
pub fn working_containers(pod: &Pod) -> BTreeMap<String, String> {
    crate::pods::annotation(pod, ANNOTATION_WORKING_HOT_UPGRADE_CONTAINER)
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default()
}

/// The (working, idle) twins of hot sidecar `sidecar` in the Pod. The idle one holds the empty image,
/// or during an upgrade the older version.
///
/// When the annotation names neither twin, `-1` is taken as working, which is what injection records.
/// OpenKruise takes `-2` then, which would flip the live twin of a Pod that lost the annotation.
pub fn working_and_idle(pod: &Pod, sidecar: &str) -> (String, String) {
    let (one, two) = hot_upgrade_names(sidecar);
    if working_containers(pod).get(sidecar) == Some(&two) {
        (two, one)
    } else {
        (one, two)
    }
}

/// The spec image of the Pod's container `name`.
fn spec_image<'p>(pod: &'p Pod, name: &str) -> Option<&'p str> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == name)?
        .image
        .as_deref()
}

/// Which twin of hot sidecar `sidecar` an upgrade writes to, and the other one (whose image tells
/// whether there is anything to upgrade): the twin holding the empty image; else, when exactly one
/// twin is settled (ready and running its spec image), the other, unsettled one; else the idle one.
pub(super) fn twin_to_upgrade(
    pod: &Pod,
    sidecar: &SidecarContainer,
    settled: impl Fn(&str) -> bool,
) -> (String, String) {
    let (one, two) = hot_upgrade_names(&sidecar.container.name);
    let empty = sidecar.upgrade_strategy.hot_upgrade_empty_image.as_str();
    if spec_image(pod, &one) == Some(empty) {
        return (one, two);
    }
    if spec_image(pod, &two) == Some(empty) {
        return (two, one);
    }
    match (settled(&one), settled(&two)) {
        (true, false) => (two, one),
        (false, true) => (one, two),
        _ => {
            let (working, idle) = working_and_idle(pod, &sidecar.container.name);
            (idle, working)
        }
    }
}

/// The idle twins, each with its working twin and the empty image it should hold.
fn idle_twins<'s>(ss: &'s SidecarSet, pod: &Pod) -> Vec<(String, String, &'s str)> {
    hot_sidecars(ss)
        .map(|sidecar| {
            let (working, idle) = working_and_idle(pod, &sidecar.container.name);
            let empty = sidecar.upgrade_strategy.hot_upgrade_empty_image.as_str();
            (idle, working, empty)
        })
        .collect()
}

/// Every idle twin's spec holds the empty image (part of the Pod being "ready" for the SidecarSet;
/// that the kubelet runs it is the consistency check's part).
pub(super) fn idle_twins_empty(ss: &SidecarSet, pod: &Pod) -> bool {
    idle_twins(ss, pod)
        .iter()
        .all(|(idle, _, empty)| spec_image(pod, idle) == Some(*empty))
}

/// The Pod is due for a flip: an idle twin still holds a real image, while every other sidecar
/// container runs its spec image, and every container but the idle twins is ready (or the Pod is).
pub(super) fn flip_due(ss: &SidecarSet, pod: &Pod, observed: &Observed<'_>) -> bool {
    let idle: BTreeSet<String> = idle_twins(ss, pod)
        .into_iter()
        .map(|(idle, _, _)| idle)
        .collect();
    if idle_twins_empty(ss, pod) {
        return false;
    }
    let others = super::upgrade::sidecar_container_names(ss)
        .into_iter()
        .filter(|c| !idle.contains(c));
    if !observed.consistent(others) {
        return false;
    }
    crate::pods::is_running_and_ready(pod)
        || crate::pods::container_statuses(pod)
            .iter()
            .filter(|s| !idle.contains(&s.name))
            .all(|s| s.ready)
}

/// The JSON patch that flips the Pod: every idle twin that holds a real image gets the empty image
/// back, its version annotation and its working twin's alt version become "0" (no version), and the
/// in-place state records the flipped twins' imageIDs so that their restart can be told. The first op
/// tests the resourceVersion, as [`super::upgrade::upgrade_patch`] does; the hash annotations are not
/// touched, the SidecarSet version being unchanged. A Pod with nothing to flip gets a patch that only
/// tests.
pub fn flip_patch(ss: &SidecarSet, pod: &Pod, now: Timestamp) -> Result<Patch, UpgradeError> {
    let mut ops = vec![guard(pod)?];
    let spec = pod.spec.as_ref().ok_or(UpgradeError::NoSpec)?;
    let mut flipped = Vec::new();
    let mut notes = BTreeMap::new();
    for (idle, working, empty) in idle_twins(ss, pod) {
        let Some(index) = spec.containers.iter().position(|c| c.name == idle) else {
            continue;
        };
        if spec.containers[index].image.as_deref() == Some(empty) {
            continue;
        }
        ops.push(PatchOperation::Replace(ReplaceOperation {
            path: ptr(["spec", "containers", &index.to_string(), "image"]),
            value: json!(empty),
        }));
        notes.insert(format!("{ANNOTATION_VERSION_PREFIX}{idle}"), "0".to_owned());
        notes.insert(
            format!("{ANNOTATION_VERSION_ALT_PREFIX}{working}"),
            "0".to_owned(),
        );
        flipped.push(idle);
    }
    if !flipped.is_empty() {
        notes.insert(
            kruise_api::sidecarset::ANNOTATION_INPLACE_UPDATE_STATE.to_owned(),
            record_restarts(ss, pod, &flipped, now, false),
        );
        ops.extend(annotation_ops(pod, notes));
    }
    Ok(Patch(ops))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::PodSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kruise_api::sidecarset::v1beta1::SidecarContainerUpgradeStrategy;

    use super::*;

    fn mesh() -> SidecarContainer {
        SidecarContainer {
            container: Container {
                name: "mesh".into(),
                image: Some("mesh:3".into()),
                ..Container::default()
            },
            upgrade_strategy: SidecarContainerUpgradeStrategy {
                upgrade_type: HOT_UPGRADE.into(),
                hot_upgrade_empty_image: "empty".into(),
            },
            ..SidecarContainer::default()
        }
    }

    /// A Pod whose twins hold `images` and whose working annotation is `working` (verbatim).
    fn pod(images: [&str; 2], working: Option<&str>) -> Pod {
        let container = |name: &str, image: &str| Container {
            name: name.into(),
            image: Some(image.into()),
            ..Container::default()
        };
        Pod {
            metadata: ObjectMeta {
                annotations: working.map(|w| {
                    BTreeMap::from([(ANNOTATION_WORKING_HOT_UPGRADE_CONTAINER.into(), w.into())])
                }),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                containers: vec![
                    container("mesh-1", images[0]),
                    container("mesh-2", images[1]),
                ],
                ..PodSpec::default()
            }),
            status: None,
        }
    }

    #[test]
    fn working_and_idle_table() {
        let cases = [
            (None, "mesh-1"),
            (Some(r#"{"mesh":"mesh-1"}"#), "mesh-1"),
            (Some(r#"{"mesh":"mesh-2"}"#), "mesh-2"),
            (Some(r#"{"envoy":"envoy-2"}"#), "mesh-1"),
            (Some(r#"{"mesh":"bogus"}"#), "mesh-1"),
            (Some("not json"), "mesh-1"),
        ];
        for (annotation, working) in cases {
            let (w, idle) = working_and_idle(&pod(["a", "b"], annotation), "mesh");
            assert_eq!(w, working, "{annotation:?}");
            assert_ne!(w, idle, "{annotation:?}");
        }
    }

    /// (case, twin images, working annotation, settled twins, the twin written)
    type Case = (
        &'static str,
        [&'static str; 2],
        Option<&'static str>,
        [bool; 2],
        &'static str,
    );

    #[test]
    fn twin_to_upgrade_table() {
        let on_2 = Some(r#"{"mesh":"mesh-2"}"#);
        let cases: Vec<Case> = vec![
            (
                "-2 holds the empty image",
                ["mesh:2", "empty"],
                None,
                [true, true],
                "mesh-2",
            ),
            (
                "-1 holds the empty image",
                ["empty", "mesh:2"],
                on_2,
                [false, true],
                "mesh-1",
            ),
            (
                "both empty: -1 first",
                ["empty", "empty"],
                on_2,
                [false, false],
                "mesh-1",
            ),
            (
                "-2 not settled",
                ["mesh:1", "mesh:2"],
                on_2,
                [true, false],
                "mesh-2",
            ),
            (
                "-1 not settled",
                ["mesh:1", "mesh:2"],
                None,
                [false, true],
                "mesh-1",
            ),
            (
                "both settled, -2 working",
                ["mesh:1", "mesh:2"],
                on_2,
                [true, true],
                "mesh-1",
            ),
            (
                "both settled, -1 working",
                ["mesh:1", "mesh:2"],
                None,
                [true, true],
                "mesh-2",
            ),
            (
                "neither settled, -2 working",
                ["mesh:1", "mesh:2"],
                on_2,
                [false, false],
                "mesh-1",
            ),
        ];
        for (name, images, working, settled, want) in cases {
            let p = pod(images, working);
            let (target, other) =
                twin_to_upgrade(&p, &mesh(), |c| settled[usize::from(c == "mesh-2")]);
            assert_eq!(target, want, "{name}");
            assert_ne!(target, other, "{name}");
        }
    }

    #[test]
    fn idle_twin_is_read_from_the_working_annotation() {
        let ss = SidecarSet::new(
            "s",
            kruise_api::sidecarset::v1beta1::SidecarSetSpec {
                containers: vec![mesh()],
                ..Default::default()
            },
        );
        assert!(idle_twins_empty(&ss, &pod(["mesh:1", "empty"], None)));
        assert!(!idle_twins_empty(
            &ss,
            &pod(["mesh:1", "empty"], Some(r#"{"mesh":"mesh-2"}"#))
        ));
        assert!(idle_twins_empty(
            &ss,
            &pod(["empty", "mesh:2"], Some(r#"{"mesh":"mesh-2"}"#))
        ));
    }

    #[test]
    fn flip_patch_needs_a_resource_version() {
        let ss = SidecarSet::new("s", Default::default());
        assert_eq!(
            flip_patch(&ss, &pod(["a", "b"], None), Timestamp::UNIX_EPOCH),
            Err(UpgradeError::NoResourceVersion)
        );
    }
}
