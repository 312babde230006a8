//! Gate `PreDownloadImageForDaemonSetUpdate`: while an Advanced DaemonSet rolls to a new revision
//! in batches, its new images are pulled ahead on the nodes of the Pods still to be updated (one
//! ImagePullJob per changed image, decided by `kruise_core::predownload`); once every node runs the
//! update revision the jobs are deleted.

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use kruise_api::daemonset::v1beta1::DaemonSet;
use kruise_core::predownload::{
    JobSource, changed_images, daemonset_rolling, daemonset_skip, decided, jobs,
};
use kube::ResourceExt;

use super::{Context, Error, newpod};
use crate::podcontrol::PodControl;

/// Creates or deletes the set's ImagePullJobs; failures are logged and retried on the next
/// reconcile, never stopping the rollout. `templates` are every revision's (name, template).
pub(super) async fn sync(
    pc: &PodControl<'_>,
    ctx: &Context,
    ds: &DaemonSet,
    revisions: &[ControllerRevision],
    templates: &[(String, PodTemplateSpec)],
    update: &str,
    hash: &str,
) {
    if let Err(error) = try_sync(pc, ctx, ds, revisions, templates, update, hash).await {
        tracing::warn!(daemonset = %pc.key, %error, "image pre-download");
    }
}

async fn try_sync(
    pc: &PodControl<'_>,
    ctx: &Context,
    ds: &DaemonSet,
    revisions: &[ControllerRevision],
    templates: &[(String, PodTemplateSpec)],
    update: &str,
    hash: &str,
) -> Result<(), Error> {
    let uid = ds.metadata.uid.clone().unwrap_or_default();
    if !daemonset_rolling(ds, hash) {
        return crate::predownload::clean_up(pc, &ctx.predownload, &uid, ds.spec.selector.as_ref())
            .await;
    }
    let Some(revision) = revisions
        .iter()
        .find(|r| r.metadata.name.as_deref() == Some(update))
    else {
        return Ok(());
    };
    if decided(revision.labels()) {
        return Ok(());
    }
    let Some((_, update_template)) = templates.iter().find(|(name, _)| name == update) else {
        return Ok(());
    };
    let skip = daemonset_skip(ds).map_err(Error::Invalid)?;
    let built = if skip.is_some() {
        Vec::new()
    } else {
        let owner = newpod::owner_reference(ds).map_err(|e| Error::Invalid(e.to_string()))?;
        let olds: Vec<&PodTemplateSpec> = templates
            .iter()
            .filter(|(name, _)| name != update)
            .map(|(_, t)| t)
            .collect();
        let images = changed_images(&olds, update_template);
        let annotations = ds.annotations().clone();
        let selector = ds.spec.selector.clone().unwrap_or_default();
        jobs(&JobSource {
            namespace: pc.namespace,
            owner,
            owner_annotations: &annotations,
            selector: &selector,
            revision_name: update,
            revision_labels: revision.labels(),
            template: update_template,
            images: &images,
        })
    };
    crate::predownload::start(pc, &ctx.predownload, &uid, revision, skip, built).await
}
