//! The injection itself: from the matched SidecarSets to the Pod with their sidecars in.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use k8s_openapi::api::core::v1::{Container, LocalObjectReference, Pod, Volume};
use kruise_api::sidecarset::hash::{ANNOTATION_HASH, ANNOTATION_HASH_WITHOUT_IMAGE};
use kruise_api::sidecarset::v1beta1::{HOT_UPGRADE, SidecarContainer, SidecarSet};
use kruise_api::sidecarset::{
    ANNOTATION_INJECTED_LIST, ANNOTATION_WORKING_HOT_UPGRADE_CONTAINER, canary_base,
    is_native_sidecar,
};

use super::annotations::{encode_upgrade_specs, injected_list, parse_upgrade_specs, record_hashes};
use super::placement::{Position, merge_containers, merge_secrets, merge_volumes};
use super::{
    InjectContext, InjectError, Injection, hot_upgrade, metadata, resources, revision, sidecar,
};

/// Injects `sidecarsets` (already [`super::matches`]ed, in a stable order such as by name) into `pod`,
/// which is being created.
///
/// In order: paused SidecarSets are skipped; each remaining one is taken at the version the Pod gets
/// (`injectionStrategy.revision`); a canary SidecarSet shadows its base; `patchPodMetadata` is applied;
/// then every SidecarSet's init containers (new Pods only — this is the only path), pull secrets,
/// containers (sized by their `resourcesPolicy`) and the volumes those reference are merged in, and
/// the Pod records what it got in its annotations. When no container is injected, only the
/// `patchPodMetadata` changes are kept.
pub fn inject(
    pod: &Pod,
    sidecarsets: &[&SidecarSet],
    ctx: &InjectContext<'_>,
) -> Result<Injection, InjectError> {
    if pod.spec.is_none() {
        return Err(InjectError::NoPodSpec);
    }
    let mut chosen = Vec::new();
    for sidecarset in sidecarsets {
        if !sidecarset.spec.injection_strategy.paused {
            chosen.push(revision::choose(sidecarset, pod, ctx)?);
        }
    }
    // A canary stands in for its base on the Pods it matches, so the base's sidecars are not doubled.
    let shadowed: HashSet<String> = chosen
        .iter()
        .filter_map(|s| canary_base(&s.metadata).map(str::to_string))
        .collect();
    chosen.retain(|s| !shadowed.contains(name_of(s)));
    let applied = chosen.iter().map(|s| name_of(s).to_string()).collect();

    let mut out = pod.clone();
    let mut annotations = out.metadata.annotations.take().unwrap_or_default();
    let mut changed = false;
    for sidecarset in &chosen {
        changed |=
            metadata::patch_annotations(&mut annotations, &sidecarset.spec.patch_pod_metadata)
                .map_err(|(index, key, message)| InjectError::InvalidField {
                    sidecarset: name_of(sidecarset).to_string(),
                    field: format!("spec.patchPodMetadata[{index}].annotations[{key}]"),
                    message,
                })?;
    }
    // Everything below reads the Pod as patched (transferEnv may name its source in an annotation).
    // An absent map stays absent unless something was written, so that an untouched Pod diffs empty.
    out.metadata.annotations =
        (!annotations.is_empty() || pod.metadata.annotations.is_some()).then_some(annotations);

    let built = build(&out, &chosen, ctx)?;
    if built.containers.is_empty() && built.init_containers.is_empty() {
        return Ok(Injection {
            pod: out,
            changed,
            applied,
        });
    }
    apply(&mut out, built, ctx)?;
    Ok(Injection {
        pod: out,
        changed: true,
        applied,
    })
}

fn name_of(sidecarset: &SidecarSet) -> &str {
    sidecarset.metadata.name.as_deref().unwrap_or_default()
}

/// An injected container and where it came from, for error messages.
struct Placed {
    container: Container,
    position: Position,
    sidecarset: String,
    field: String,
}

/// A volume a sidecar mounts by name, which the merged Pod must define.
struct VolumeUse {
    sidecarset: String,
    field: String,
    volume: String,
}

/// Everything the SidecarSets add, before it is merged into the Pod.
#[derive(Default)]
struct Built {
    containers: Vec<Placed>,
    init_containers: Vec<Placed>,
    volumes: Vec<Volume>,
    volume_uses: Vec<VolumeUse>,
    secrets: Vec<LocalObjectReference>,
    annotations: BTreeMap<String, String>,
}

fn build(
    pod: &Pod,
    sidecarsets: &[Cow<'_, SidecarSet>],
    ctx: &InjectContext<'_>,
) -> Result<Built, InjectError> {
    let pod_annotations = pod.metadata.annotations.clone().unwrap_or_default();
    let mut hashes = parse_upgrade_specs(&pod_annotations, ANNOTATION_HASH)?;
    let mut hashes_without_image =
        parse_upgrade_specs(&pod_annotations, ANNOTATION_HASH_WITHOUT_IMAGE)?;
    // Upstream ignores an unreadable value here and starts afresh; so do we.
    let mut working: BTreeMap<String, String> = pod_annotations
        .get(ANNOTATION_WORKING_HOT_UPGRADE_CONTAINER)
        .and_then(|v| serde_json::from_str(v).ok())
        .unwrap_or_default();
    let mut names = injected_list(&pod_annotations);
    let mut built = Built::default();
    let mut any_hot = false;
    // resourcesPolicy sizes a sidecar after the Pod's own containers, never after another sidecar.
    let kruise_sidecars: HashSet<&str> = sidecarsets
        .iter()
        .flat_map(|s| s.spec.init_containers.iter().chain(&s.spec.containers))
        .map(|c| c.name.as_str())
        .collect();

    for sidecarset in sidecarsets {
        let name = name_of(sidecarset).to_string();
        names.insert(name.clone());
        let volumes: HashMap<&str, &Volume> = sidecarset
            .spec
            .volumes
            .iter()
            .map(|v| (v.name.as_str(), v))
            .collect();
        let mut sidecar_list = BTreeSet::new();
        let mut injecting = false;

        let lists = [
            (
                "spec.initContainers",
                &sidecarset.spec.init_containers,
                true,
            ),
            ("spec.containers", &sidecarset.spec.containers, false),
        ];
        for (list_field, sidecars, init) in lists {
            for (i, sidecar_container) in sidecars.iter().enumerate() {
                // Of the init containers only native sidecars keep running, so only they are
                // upgraded (hot or in place) and listed for the upgrade controller.
                let running = !init || is_native_sidecar(&sidecar_container.container);
                if running {
                    sidecar_list.insert(sidecar_container.name.clone());
                }
                let hot = running && sidecar_container.upgrade_strategy.upgrade_type == HOT_UPGRADE;
                let field = format!("{list_field}[{i}]");
                let mut placed =
                    prepare(sidecar_container, pod, &name, &field, &volumes, &mut built)?;
                // Before a hot-upgrade split, so that both twins get the computed resources.
                if let Some(computed) = resources::compute(
                    sidecar_container,
                    init,
                    pod,
                    &kruise_sidecars,
                    &name,
                    &field,
                )? {
                    placed.container.resources = Some(computed);
                }
                injecting = true;
                any_hot |= hot;
                let target = if init {
                    &mut built.init_containers
                } else {
                    &mut built.containers
                };
                push(
                    target,
                    placed,
                    sidecar_container,
                    hot,
                    &mut built.annotations,
                    &mut working,
                );
            }
        }
        built
            .secrets
            .extend(sidecarset.spec.image_pull_secrets.iter().cloned());

        if injecting {
            let controller_revision = sidecarset
                .status
                .as_ref()
                .map(|s| s.latest_revision.as_str())
                .unwrap_or_default();
            record_hashes(
                &mut hashes,
                &mut hashes_without_image,
                &name,
                super::annotations::hashes(sidecarset),
                Some(sidecar_list.into_iter().collect()),
                controller_revision,
                ctx.now,
            );
        }
    }

    let annotations = &mut built.annotations;
    annotations.insert(ANNOTATION_HASH.into(), encode_upgrade_specs(&hashes));
    annotations.insert(
        ANNOTATION_HASH_WITHOUT_IMAGE.into(),
        encode_upgrade_specs(&hashes_without_image),
    );
    annotations.insert(
        ANNOTATION_INJECTED_LIST.into(),
        names.into_iter().collect::<Vec<_>>().join(","),
    );
    if any_hot {
        annotations.insert(
            ANNOTATION_WORKING_HOT_UPGRADE_CONTAINER.into(),
            serde_json::to_string(&working).unwrap_or_default(),
        );
    }
    Ok(built)
}

/// Builds one sidecar and notes the SidecarSet volumes it mounts.
fn prepare(
    sidecar_container: &SidecarContainer,
    pod: &Pod,
    sidecarset: &str,
    field: &str,
    volumes: &HashMap<&str, &Volume>,
    built: &mut Built,
) -> Result<Placed, InjectError> {
    // Only the volumes the sidecar itself names come from the SidecarSet; the shared mounts name the
    // Pod's own volumes.
    let mounts = sidecar_container
        .volume_mounts
        .iter()
        .flatten()
        .enumerate()
        .map(|(j, m)| (format!("{field}.volumeMounts[{j}].name"), &m.name));
    let devices = sidecar_container
        .volume_devices
        .iter()
        .flatten()
        .enumerate()
        .map(|(j, d)| (format!("{field}.volumeDevices[{j}].name"), &d.name));
    for (use_field, volume) in mounts.chain(devices) {
        if let Some(v) = volumes.get(volume.as_str()) {
            built.volumes.push((*v).clone());
        }
        built.volume_uses.push(VolumeUse {
            sidecarset: sidecarset.to_string(),
            field: use_field,
            volume: volume.clone(),
        });
    }
    Ok(Placed {
        container: sidecar::build(sidecar_container, pod),
        position: Position::of(&sidecar_container.pod_inject_policy),
        sidecarset: sidecarset.to_string(),
        field: field.to_string(),
    })
}

/// Adds a built sidecar to its list, as the two hot-upgrade twins when it is hot-upgraded.
fn push(
    list: &mut Vec<Placed>,
    placed: Placed,
    sidecar_container: &SidecarContainer,
    hot: bool,
    annotations: &mut BTreeMap<String, String>,
    working: &mut BTreeMap<String, String>,
) {
    if !hot {
        list.push(placed);
        return;
    }
    let empty_image = &sidecar_container.upgrade_strategy.hot_upgrade_empty_image;
    for container in hot_upgrade::split(&placed.container, empty_image, annotations, working) {
        list.push(Placed {
            container,
            position: placed.position,
            sidecarset: placed.sidecarset.clone(),
            field: placed.field.clone(),
        });
    }
}

/// Merges what was built into the Pod.
fn apply(pod: &mut Pod, mut built: Built, ctx: &InjectContext<'_>) -> Result<(), InjectError> {
    check_unique_names(&built)?;
    // Init containers always go in name order: their start order must not depend on the order in
    // which SidecarSets were listed.
    built
        .init_containers
        .sort_by(|a, b| a.container.name.cmp(&b.container.name));
    if ctx.sort_sidecars_by_name {
        built
            .containers
            .sort_by(|a, b| a.container.name.cmp(&b.container.name));
    }
    let unplace = |list: Vec<Placed>| -> Vec<(Container, Position)> {
        list.into_iter()
            .map(|p| (p.container, p.position))
            .collect()
    };

    let Some(spec) = pod.spec.as_mut() else {
        return Err(InjectError::NoPodSpec);
    };
    spec.containers = merge_containers(
        std::mem::take(&mut spec.containers),
        unplace(built.containers),
    );
    let init = merge_containers(
        spec.init_containers.take().unwrap_or_default(),
        unplace(built.init_containers),
    );
    spec.init_containers = (!init.is_empty()).then_some(init);
    let volumes = merge_volumes(spec.volumes.take().unwrap_or_default(), built.volumes);
    let known: HashSet<&str> = volumes.iter().map(|v| v.name.as_str()).collect();
    if let Some(missing) = built
        .volume_uses
        .into_iter()
        .find(|u| !known.contains(u.volume.as_str()))
    {
        // The apiserver would reject the Pod too, but naming the SidecarSet tells the user whom to fix.
        return Err(InjectError::UnknownVolume {
            sidecarset: missing.sidecarset,
            field: missing.field,
            volume: missing.volume,
        });
    }
    spec.volumes = (!volumes.is_empty()).then_some(volumes);
    let secrets = merge_secrets(
        spec.image_pull_secrets.take().unwrap_or_default(),
        built.secrets,
    );
    spec.image_pull_secrets = (!secrets.is_empty()).then_some(secrets);

    pod.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .extend(built.annotations);
    Ok(())
}

/// Two SidecarSets injecting the same container name would give the Pod two containers of that name;
/// say which two (the SidecarSet validation should have caught it, unless their selectors were
/// disjoint on paper).
fn check_unique_names(built: &Built) -> Result<(), InjectError> {
    let mut seen: HashMap<&str, &Placed> = HashMap::new();
    for placed in built.init_containers.iter().chain(&built.containers) {
        if let Some(first) = seen.insert(placed.container.name.as_str(), placed) {
            return Err(InjectError::DuplicateContainer {
                sidecarset: placed.sidecarset.clone(),
                field: placed.field.clone(),
                container: placed.container.name.clone(),
                other: first.sidecarset.clone(),
            });
        }
    }
    Ok(())
}
