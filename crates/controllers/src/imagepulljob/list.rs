//! The ImageListPullJob controller: one ImagePullJob per image of the list (named `<list>-<random>`,
//! controlled by the list, with the list's template), jobs of images removed from the list deleted, and
//! the list's status from its jobs (`kruise_core::imagepull::list_status`). A finished list is deleted
//! `ttlSecondsAfterFinished` after its completion.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use kruise_api::broadcastjob::v1beta1::COMPLETION_NEVER;
use kruise_api::imagepulljob::v1beta1::{ImageListPullJob, ImagePullJob, ImagePullJobSpec};
use kruise_core::imagepull::{self, ChildJob};
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};

use crate::error::{Error, KubeContext, is_race};
use crate::metrics::Metrics;

pub const CONTROLLER: &str = "imagelistpulljob-controller";
const RACE_RETRY: Duration = Duration::from_millis(500);

pub struct Context {
    client: Client,
    metrics: Arc<Metrics>,
    jobs: Store<ImagePullJob>,
    /// Jobs created and not yet seen in the cache: (list uid, image) → when (an expectation that
    /// expires, so a lost watch event never stalls the list).
    expected: std::sync::Mutex<std::collections::HashMap<(String, String), std::time::Instant>>,
}

/// How long a created job is waited for in the cache before the list may create it again.
const EXPECTATION_TIMEOUT: Duration = Duration::from_secs(30);

impl crate::driver::Driven for Context {
    fn controller(&self) -> &'static str {
        CONTROLLER
    }

    fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

/// Runs the controller until the future is dropped.
pub async fn run(client: Client, metrics: Arc<Metrics>) {
    let jobs_api = Api::<ImagePullJob>::all(client.clone());
    let controller = Controller::new(
        Api::<ImageListPullJob>::all(client.clone()),
        watcher::Config::default().any_semantic(),
    );
    let (jobs, writer) = kube::runtime::reflector::store();
    let stream = kube::runtime::reflector(
        writer,
        kube::runtime::WatchStreamExt::default_backoff(watcher(
            jobs_api,
            watcher::Config::default(),
        )),
    );
    let controller = controller.owns_stream(kube::runtime::WatchStreamExt::touched_objects(stream));
    let ctx = Arc::new(Context {
        client,
        metrics,
        jobs,
        expected: std::sync::Mutex::default(),
    });
    crate::driver::run(controller, 2, reconcile, ctx).await;
}

fn raced<T>(
    result: Result<T, kube::Error>,
    what: impl FnOnce() -> String,
) -> Result<Action, Error> {
    match result {
        Ok(_) => Ok(Action::requeue(RACE_RETRY)),
        Err(error) if is_race(&error) => Ok(Action::requeue(RACE_RETRY)),
        Err(source) => Err(source).context(what),
    }
}

async fn reconcile(list: Arc<ImageListPullJob>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = list.namespace().unwrap_or_default();
    let name = list.name_any();
    let key = format!("{namespace}/{name}");
    let api: Api<ImageListPullJob> = Api::namespaced(ctx.client.clone(), &namespace);
    let jobs_api: Api<ImagePullJob> = Api::namespaced(ctx.client.clone(), &namespace);
    if list.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let spec = list.spec();
    let status = list.status.as_ref();
    if let Some(done) = status.and_then(|s| s.completion_time.as_ref()) {
        return match imagepull::ttl_left(
            Some(done),
            spec.completion_policy.ttl_seconds_after_finished,
            Timestamp::now(),
        ) {
            None => Ok(Action::await_change()),
            Some(left) if left.is_positive() => Ok(Action::requeue(
                Duration::try_from(left).unwrap_or(Duration::from_secs(1)),
            )),
            Some(_) => {
                let params = DeleteParams {
                    preconditions: list.metadata.uid.clone().map(|uid| Preconditions {
                        uid: Some(uid),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                tracing::info!(
                    list = key,
                    "deleting ImageListPullJob for ttlSecondsAfterFinished"
                );
                raced(api.delete(&name, &params).await, || {
                    format!("deleting ImageListPullJob {key} after its TTL")
                })
            }
        };
    }
    if ctx.jobs.wait_until_ready().await.is_err() {
        return Ok(Action::requeue(RACE_RETRY));
    }
    let uid = list.metadata.uid.clone().unwrap_or_default();
    let owned: Vec<Arc<ImagePullJob>> = ctx
        .jobs
        .state()
        .into_iter()
        .filter(|j| j.namespace().as_deref() == Some(namespace.as_str()))
        .filter(|j| {
            j.owner_references()
                .iter()
                .any(|o| o.uid == uid && o.controller == Some(true))
        })
        .collect();
    // Jobs of images no longer listed go.
    for job in owned
        .iter()
        .filter(|j| !spec.images.contains(&j.spec.image))
    {
        if job.metadata.deletion_timestamp.is_none() {
            let result = jobs_api
                .delete(&job.name_any(), &DeleteParams::background())
                .await;
            if let Err(error) = result
                && !is_race(&error)
            {
                return Err(error).context(|| format!("deleting ImagePullJob {}", job.name_any()));
            }
        }
    }
    // Missing images get a job (unless one was just created and is not in the cache yet).
    let waiting = {
        let mut expected = ctx
            .expected
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        expected.retain(|(list_uid, image), at| {
            at.elapsed() < EXPECTATION_TIMEOUT
                && !(list_uid == &uid && owned.iter().any(|j| &j.spec.image == image))
        });
        spec.images
            .iter()
            .any(|image| expected.contains_key(&(uid.clone(), image.clone())))
    };
    if waiting {
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    let mut created_any = false;
    for image in &spec.images {
        if owned.iter().any(|j| &j.spec.image == image) {
            continue;
        }
        let job = ImagePullJob {
            metadata: ObjectMeta {
                generate_name: Some(format!("{name}-")),
                namespace: Some(namespace.clone()),
                owner_references: Some(vec![OwnerReference {
                    api_version: ImageListPullJob::api_version(&()).into_owned(),
                    kind: ImageListPullJob::kind(&()).into_owned(),
                    name: name.clone(),
                    uid: uid.clone(),
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                }]),
                ..Default::default()
            },
            spec: ImagePullJobSpec {
                image: image.clone(),
                pull_secrets: spec.pull_secrets.clone(),
                selector: spec.selector.clone(),
                pod_selector: spec.pod_selector.clone(),
                parallelism: spec.parallelism.clone(),
                pull_policy: spec.pull_policy.clone(),
                completion_policy: spec.completion_policy.clone(),
                sandbox_config: spec.sandbox_config.clone(),
                image_pull_policy: spec.image_pull_policy.clone(),
            },
            status: None,
        };
        let created = jobs_api
            .create(&PostParams::default(), &job)
            .await
            .context(|| {
                format!("creating the ImagePullJob of {image} for ImageListPullJob {key}")
            })?;
        tracing::info!(
            list = key,
            job = created.name_any(),
            image,
            "created ImagePullJob"
        );
        ctx.expected
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert((uid.clone(), image.clone()), std::time::Instant::now());
        created_any = true;
    }
    if created_any {
        // The new jobs reach the cache through the watch; wait for them rather than create twice.
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    let children: Vec<ChildJob> = owned
        .iter()
        .map(|j| {
            let s = j.status.clone().unwrap_or_default();
            ChildJob {
                name: j.name_any(),
                image: j.spec.image.clone(),
                started: s.start_time.is_some(),
                desired: s.desired,
                active: s.active,
                succeeded: s.succeeded,
                failed: s.failed,
            }
        })
        .collect();
    let never = spec.completion_policy.type_ == COMPLETION_NEVER;
    let new = imagepull::list_status(&spec.images, &children, never, status, Timestamp::now());
    if status != Some(&new) {
        let patch = super::status_patch(&new, &["completionTime", "failedImageStatuses"]);
        return raced(
            api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await,
            || format!("writing the status of ImageListPullJob {key}"),
        );
    }
    Ok(Action::await_change())
}
