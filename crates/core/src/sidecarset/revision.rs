//! `injectionStrategy.revision`: which version of a SidecarSet a new Pod gets, the latest or a pinned
//! historical one restored from its ControllerRevision.

use std::borrow::Cow;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{LocalObjectReference, Pod, Volume};
use kruise_api::field::{Path, join};
use kruise_api::intstr::IntOrPercent;
use kruise_api::sidecarset::LABEL_SIDECARSET_NAME;
use kruise_api::sidecarset::hash::{ANNOTATION_HASH, ANNOTATION_HASH_WITHOUT_IMAGE};
use kruise_api::sidecarset::v1beta1::{
    INJECT_REVISION_PARTIAL, SidecarContainer, SidecarSet, SidecarSetPatchPodMetadata,
};
use kruise_api::validation::{selector_matches, validate_label_selector};
use serde::Deserialize;

use super::{InjectContext, InjectError, non_empty_annotation};

/// What a SidecarSet ControllerRevision records: the fields that replace the SidecarSet's when the
/// revision is restored, plus the revision's name and the hashes it was stored with.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RevisionTemplate {
    /// The ControllerRevision name; recorded on the Pod as `controllerRevision`.
    pub name: String,
    /// `kruise.io/sidecarset-hash` of the revision, when it carries the annotation.
    pub hash: Option<String>,
    /// `kruise.io/sidecarset-hash-without-image` of the revision, when it carries the annotation.
    pub hash_without_image: Option<String>,
    pub containers: Vec<SidecarContainer>,
    pub init_containers: Vec<SidecarContainer>,
    pub volumes: Vec<Volume>,
    pub image_pull_secrets: Vec<LocalObjectReference>,
    pub patch_pod_metadata: Vec<SidecarSetPatchPodMetadata>,
}

/// The `spec` of a revision's data. Upstream writes every field, `null` when the SidecarSet had none.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RevisionSpec {
    #[serde(default)]
    containers: Option<Vec<SidecarContainer>>,
    #[serde(default)]
    init_containers: Option<Vec<SidecarContainer>>,
    #[serde(default)]
    volumes: Option<Vec<Volume>>,
    #[serde(default)]
    image_pull_secrets: Option<Vec<LocalObjectReference>>,
    #[serde(default)]
    patch_pod_metadata: Option<Vec<SidecarSetPatchPodMetadata>>,
}

#[derive(Deserialize)]
struct RevisionData {
    spec: RevisionSpec,
}

impl RevisionTemplate {
    /// Reads a SidecarSet ControllerRevision (data `{"spec": {"$patch": "replace", "containers": …}}`).
    pub fn from_controller_revision(revision: &ControllerRevision) -> Result<Self, InjectError> {
        let name = revision.metadata.name.clone().unwrap_or_default();
        let owner = revision
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_SIDECARSET_NAME))
            .cloned()
            .unwrap_or_default();
        let invalid = |message: String| InjectError::InvalidField {
            sidecarset: owner.clone(),
            field: format!("controllerrevision {name}: data.spec"),
            message,
        };
        let raw = revision
            .data
            .as_ref()
            .ok_or_else(|| invalid("the revision holds no data".into()))?;
        let data: RevisionData =
            serde_json::from_value(raw.0.clone()).map_err(|e| invalid(e.to_string()))?;
        let annotation =
            |key: &str| non_empty_annotation(&revision.metadata, key).map(str::to_string);
        Ok(Self {
            hash: annotation(ANNOTATION_HASH),
            hash_without_image: annotation(ANNOTATION_HASH_WITHOUT_IMAGE),
            name,
            containers: data.spec.containers.unwrap_or_default(),
            init_containers: data.spec.init_containers.unwrap_or_default(),
            volumes: data.spec.volumes.unwrap_or_default(),
            image_pull_secrets: data.spec.image_pull_secrets.unwrap_or_default(),
            patch_pod_metadata: data.spec.patch_pod_metadata.unwrap_or_default(),
        })
    }
}

/// The SidecarSet as it was at `template`: the recorded fields replace the current ones, the hashes are
/// the revision's (computed from the restored containers when it lacks them, as upstream does), and `status.latestRevision` names the
/// revision so that the Pod records which one it got.
fn restore(sidecarset: &SidecarSet, template: &RevisionTemplate) -> SidecarSet {
    let mut restored = sidecarset.clone();
    let spec = &mut restored.spec;
    spec.containers = template.containers.clone();
    spec.init_containers = template.init_containers.clone();
    spec.volumes = template.volumes.clone();
    spec.image_pull_secrets = template.image_pull_secrets.clone();
    spec.patch_pod_metadata = template.patch_pod_metadata.clone();
    let annotations = restored
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    for (key, recorded) in [
        (ANNOTATION_HASH, &template.hash),
        (ANNOTATION_HASH_WITHOUT_IMAGE, &template.hash_without_image),
    ] {
        // The current hashes describe the latest containers; without recorded ones the injection
        // computes them from the restored containers.
        match recorded {
            Some(hash) => annotations.insert(key.to_string(), hash.clone()),
            None => annotations.remove(key),
        };
    }
    restored
        .status
        .get_or_insert_with(Default::default)
        .latest_revision = template.name.clone();
    restored
}

/// The version of `sidecarset` a new Pod gets (upstream `getSuitableRevisionSidecarSet` on CREATE).
///
/// Without a pinned revision: the latest. With one: the restored revision when the upgrade is paused
/// or the policy is `Always`; under `Partial`, Pods outside `updateStrategy.selector` get the revision
/// and the others get it with probability `partition` (a percentage; an integer partition means the
/// latest), so that new Pods follow the canary split the upgrade controller maintains.
pub(super) fn choose<'a>(
    sidecarset: &'a SidecarSet,
    pod: &Pod,
    ctx: &InjectContext<'_>,
) -> Result<Cow<'a, SidecarSet>, InjectError> {
    let name = sidecarset.metadata.name.clone().unwrap_or_default();
    let Some(info) = &sidecarset.spec.injection_strategy.revision else {
        return Ok(Cow::Borrowed(sidecarset));
    };
    if info.revision_name.is_none() && info.custom_version.is_none() {
        return Ok(Cow::Borrowed(sidecarset));
    }
    let template = ctx
        .revisions
        .get(&name)
        .ok_or_else(|| InjectError::RevisionNotFound {
            sidecarset: name.clone(),
        })?;
    let historic = || Ok(Cow::Owned(restore(sidecarset, template)));
    let strategy = &sidecarset.spec.update_strategy;
    if strategy.paused || info.policy != INJECT_REVISION_PARTIAL {
        return historic();
    }
    if let Some(selector) = &strategy.selector {
        let path = Path::new("spec.updateStrategy.selector");
        let mut errors = Vec::new();
        validate_label_selector(selector, &path, &mut errors);
        if !errors.is_empty() {
            return Err(InjectError::InvalidField {
                sidecarset: name,
                field: path.to_string(),
                message: join(&errors),
            });
        }
        let no_labels = Default::default();
        if !selector_matches(selector, pod.metadata.labels.as_ref().unwrap_or(&no_labels)) {
            return historic();
        }
    }
    let Some(partition) = &strategy.partition else {
        return Ok(Cow::Borrowed(sidecarset));
    };
    match IntOrPercent::parse(partition) {
        Ok(IntOrPercent::Int(_)) => Ok(Cow::Borrowed(sidecarset)),
        Ok(IntOrPercent::Percent(percent)) => {
            if (ctx.random)() < f64::from(percent) / 100.0 {
                historic()
            } else {
                Ok(Cow::Borrowed(sidecarset))
            }
        }
        Err(message) => Err(InjectError::InvalidField {
            sidecarset: name,
            field: "spec.updateStrategy.partition".into(),
            message,
        }),
    }
}
