//! Gate `PreDownloadImageForInPlaceUpdate`: while a CloneSet rolls to a new revision in place, its
//! new images are pulled ahead on the nodes of the Pods still to be updated (one ImagePullJob per
//! changed image, decided by `kruise_core::predownload`); once every Pod is at the update revision
//! the jobs are deleted.

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use kruise_core::inplace::PlanOptions;
use kruise_core::predownload::{
    JobSource, changed_images, cloneset_ready_to_start, cloneset_settings, cloneset_skip, decided,
    jobs,
};
use kube::ResourceExt;

use super::act::Actor;
use super::newpod;

/// The two revisions of the rollout, by name and template.
pub(super) struct Rollout<'a> {
    pub revisions: &'a [ControllerRevision],
    pub current: &'a str,
    pub update: &'a str,
    pub current_template: &'a PodTemplateSpec,
    pub update_template: &'a PodTemplateSpec,
}

/// Creates or deletes the CloneSet's ImagePullJobs; failures are logged and retried on the next
/// reconcile, never stopping the rollout.
pub(super) async fn sync(actor: &Actor<'_>, rollout: &Rollout<'_>) {
    if let Err(error) = try_sync(actor, rollout).await {
        tracing::warn!(cloneset = %actor.key, %error, "image pre-download");
    }
}

async fn try_sync(actor: &Actor<'_>, rollout: &Rollout<'_>) -> Result<(), super::Error> {
    let cs = actor.cs;
    let ctx = actor.ctx;
    let uid = cs.metadata.uid.clone().unwrap_or_default();
    if rollout.current == rollout.update {
        return crate::predownload::clean_up(
            &actor.pc,
            &ctx.predownload,
            &uid,
            cs.spec.selector.as_ref(),
        )
        .await;
    }
    if !cloneset_ready_to_start(cs, rollout.update) {
        return Ok(());
    }
    let Some(revision) = rollout
        .revisions
        .iter()
        .find(|r| r.metadata.name.as_deref() == Some(rollout.update))
    else {
        return Ok(());
    };
    if decided(revision.labels()) {
        return Ok(());
    }
    let settings = ctx.config.settings;
    let opts = PlanOptions {
        resize: settings.resize,
        env_from_metadata: settings.env_from_metadata,
    };
    let skip = cloneset_skip(cs, rollout.current_template, rollout.update_template, &opts)
        .map_err(super::Error::Invalid)?;
    let built = if skip.is_some() {
        Vec::new()
    } else {
        let owner =
            newpod::owner_reference(cs).map_err(|e| super::Error::Invalid(e.to_string()))?;
        let images = changed_images(&[rollout.current_template], rollout.update_template);
        let annotations = cloneset_settings(cs);
        let selector = cs.spec.selector.clone().unwrap_or_default();
        jobs(&JobSource {
            namespace: actor.pc.namespace,
            owner,
            owner_annotations: &annotations,
            selector: &selector,
            revision_name: rollout.update,
            revision_labels: revision.labels(),
            template: rollout.update_template,
            images: &images,
        })
    };
    crate::predownload::start(&actor.pc, &ctx.predownload, &uid, revision, skip, built).await
}
