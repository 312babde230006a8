//! The writes of image pre-download (gates `PreDownloadImageForInPlaceUpdate` and
//! `PreDownloadImageForDaemonSetUpdate`), shared by the CloneSet and Advanced DaemonSet controllers:
//! create a revision's ImagePullJobs (built by `kruise_core::predownload::jobs`), label the revision
//! so it is decided once, and delete a workload's jobs once its rollout is over. The ImagePullJob
//! controller and kruise-daemon do the pulling.

use std::collections::BTreeSet;
use std::sync::Mutex;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kruise_api::imagepulljob::v1beta1::ImagePullJob;
use kruise_core::predownload::{
    LABEL_IMAGE_PREDOWNLOAD_CREATED, LABEL_IMAGE_PREDOWNLOAD_IGNORED, Skip,
};
use kube::ResourceExt;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::events::EventType;
use serde_json::json;

use crate::driver::writes::list_live;
use crate::error::{Error, KubeContext};
use crate::podcontrol::PodControl;

/// The workloads (by uid) known to own no ImagePullJob, so that a settled workload does not list
/// the jobs of its namespace on every reconcile. A workload is forgotten when jobs are created for
/// it; after a restart every workload is looked at once.
#[derive(Default)]
pub struct Tracker(Mutex<BTreeSet<String>>);

impl Tracker {
    fn is_clean(&self, uid: &str) -> bool {
        self.0.lock().map(|s| s.contains(uid)).unwrap_or(false)
    }

    fn set(&self, uid: &str, clean: bool) {
        if let Ok(mut set) = self.0.lock() {
            if clean {
                set.insert(uid.to_owned());
            } else {
                set.remove(uid);
            }
        }
    }
}

/// Decides the update revision once: with a `skip`, labels it ignored; otherwise creates its jobs
/// (an existing one is left as it is; a failed one is reported by an Event and not retried, as
/// upstream) and labels it created.
pub(crate) async fn start(
    pc: &PodControl<'_>,
    tracker: &Tracker,
    uid: &str,
    revision: &ControllerRevision,
    skip: Option<Skip>,
    jobs: Vec<ImagePullJob>,
) -> Result<(), Error> {
    let revision_name = revision.name_any();
    if let Some(skip) = skip {
        tracing::debug!(owner = %pc.key, revision = %revision_name, %skip, "no image pre-download");
        return label_revision(pc, revision, LABEL_IMAGE_PREDOWNLOAD_IGNORED).await;
    }
    tracker.set(uid, false);
    let api = pc.writer::<ImagePullJob>();
    for job in jobs {
        let name = job.name_any();
        let image = job.spec.image.clone();
        match api.create(&PostParams::default(), &job).await {
            Ok(_) => {
                tracing::info!(owner = %pc.key, job = %name, %image, "created ImagePullJob");
                pc.event(
                    EventType::Normal,
                    "CreatedImagePullJob",
                    format!("created ImagePullJob {name} for image: {image}"),
                )
                .await;
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(error) => {
                tracing::warn!(owner = %pc.key, job = %name, %error, "failed to create ImagePullJob");
                pc.event(
                    EventType::Normal,
                    "FailedCreateImagePullJob",
                    format!("failed to create ImagePullJob {name}: {error}"),
                )
                .await;
            }
        }
    }
    label_revision(pc, revision, LABEL_IMAGE_PREDOWNLOAD_CREATED).await
}

async fn label_revision(
    pc: &PodControl<'_>,
    revision: &ControllerRevision,
    key: &str,
) -> Result<(), Error> {
    let name = revision.name_any();
    pc.writer::<ControllerRevision>()
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {key: "true"}}})),
        )
        .await
        .context(|| format!("labelling ControllerRevision {}/{name} {key}", pc.namespace))?;
    Ok(())
}

/// Deletes the ImagePullJobs the workload `uid` controls (those carrying its Pods' labels).
pub(crate) async fn clean_up(
    pc: &PodControl<'_>,
    tracker: &Tracker,
    uid: &str,
    selector: Option<&LabelSelector>,
) -> Result<(), Error> {
    if tracker.is_clean(uid) {
        return Ok(());
    }
    let labels = selector
        .cloned()
        .and_then(|s| kube::core::Selector::try_from(s).ok())
        .map(|s| s.to_string())
        .unwrap_or_default();
    let api = pc.writer::<ImagePullJob>();
    let jobs = list_live::<ImagePullJob>(
        pc.live.as_ref(),
        Some(pc.namespace),
        &ListParams::default().labels(&labels),
    )
    .await
    .context(|| format!("listing the ImagePullJobs of {}", pc.key))?;
    for job in jobs {
        let controlled = job
            .owner_references()
            .iter()
            .any(|o| o.controller == Some(true) && o.uid == uid);
        if !controlled {
            continue;
        }
        let name = job.name_any();
        match api.delete(&name, &DeleteParams::background()).await {
            Ok(_) => {
                tracing::info!(owner = %pc.key, job = %name, "deleted ImagePullJob after the rollout")
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => {
                return Err(Error::Kube {
                    context: format!("deleting ImagePullJob {}/{name}", pc.namespace),
                    source: error,
                });
            }
        }
    }
    tracker.set(uid, true);
    Ok(())
}
