//! The ImageListPullJob controller: one ImagePullJob per image of the list (named `<list>-<random>`,
//! controlled by the list, with the list's template and its hash in `controller-revision-hash`), jobs
//! of images removed from the list deleted, a job made from an older template replaced by a new one
//! (`kruise_core::imagepulljob::list_actions`), and the list's status from its jobs
//! (`kruise_core::imagepulljob::list_status`). A finished list is deleted `ttlSecondsAfterFinished` after
//! its completion.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use kruise_api::broadcastjob::v1beta1::COMPLETION_NEVER;
use kruise_api::imagepulljob::v1beta1::{ImageListPullJob, ImagePullJob};
use kruise_core::imagepulljob::{self as imagepull, ChildJob, ListJob};
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::Store;
use kube::{Client, Resource, ResourceExt};

use kruise_core::expectations::{CachedState, Expectation, Expectations};

use crate::driver::caches::Caches;
use crate::driver::write::write_status;
use crate::driver::writes::{ApiWrites, Writer, Writes};
use crate::error::{Error, KubeContext, is_race};
use crate::events::EventRecorder;
use crate::metrics::Metrics;

pub const CONTROLLER: &str = "imagelistpulljob-controller";
const RACE_RETRY: Duration = Duration::from_millis(500);

pub struct Context {
    writes: Arc<dyn Writes>,
    metrics: Arc<Metrics>,
    jobs: Store<ImagePullJob>,
    recorder: EventRecorder,
    /// Jobs created and not yet seen in the cache, or deleted and still seen there, by list uid (a
    /// list re-created under its name waits for nothing of the old one): every kind's
    /// expectations, which expire, so a lost watch event never stalls the list.
    expectations: std::sync::Mutex<Expectations>,
}

/// The expectation kind of a job a list wrote.
const JOB: &str = "ImagePullJob";

/// How long a created job is waited for in the cache before the list may create it again.
const EXPECTATION_TIMEOUT: Duration = Duration::from_secs(30);

crate::driver::driven!(Context, CONTROLLER);

/// Runs the controller until the future is dropped.
pub async fn run(client: Client, caches: &Caches, metrics: Arc<Metrics>) {
    let controller = caches.shared::<ImageListPullJob>().controller();
    let pull_jobs = caches.shared::<ImagePullJob>();
    let jobs = pull_jobs.store().clone();
    let controller = controller.owns_stream(pull_jobs.owned_stream());
    let ctx = Arc::new(Context {
        recorder: crate::driver::recorder(client.clone(), CONTROLLER),
        writes: ApiWrites::new(client),
        metrics,
        jobs,
        expectations: std::sync::Mutex::new(Expectations::new(EXPECTATION_TIMEOUT)),
    });
    crate::driver::run(controller, 2, reconcile, ctx).await;
}

impl Context {
    fn expect(&self, list_uid: &str, expectation: Expectation) {
        self.expectations
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .expect(list_uid, expectation, std::time::Instant::now());
    }
}

/// A Normal Event on the list, with upstream's reason.
async fn publish(ctx: &Context, list: &ImageListPullJob, reason: &str, note: String) {
    ctx.recorder
        .record(&list.object_ref(&()), EventType::Normal, reason, note)
        .await;
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

/// A finished list: deleted once `ttlSecondsAfterFinished` has passed since `done`.
async fn after_completion(
    api: &Writer<ImageListPullJob>,
    list: &ImageListPullJob,
    key: &str,
    done: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) -> Result<Action, Error> {
    let name = list.name_any();
    match imagepull::ttl_left(
        Some(done),
        list.spec().completion_policy.ttl_seconds_after_finished,
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
    }
}

/// Creates an ImagePullJob for each of `images`, from the list's template (labelled with its
/// `hash`), expecting each in the cache; how many were created.
async fn create_jobs(
    ctx: &Context,
    list: &ImageListPullJob,
    jobs_api: &Writer<ImagePullJob>,
    images: &[String],
    hash: &str,
) -> Result<usize, Error> {
    let namespace = list.namespace().unwrap_or_default();
    let name = list.name_any();
    let key = format!("{namespace}/{name}");
    let uid = list.metadata.uid.clone().unwrap_or_default();
    let spec = list.spec();
    let mut created = 0;
    for image in images {
        let job = ImagePullJob {
            metadata: ObjectMeta {
                generate_name: Some(format!("{name}-")),
                namespace: Some(namespace.clone()),
                labels: Some(BTreeMap::from([(
                    imagepull::LABEL_TEMPLATE_HASH.to_owned(),
                    hash.to_owned(),
                )])),
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
            spec: imagepull::job_spec_for(spec, image),
            status: None,
        };
        let made = jobs_api
            .create(&PostParams::default(), &job)
            .await
            .context(|| {
                format!("creating the ImagePullJob of {image} for ImageListPullJob {key}")
            })?;
        tracing::info!(
            list = key,
            job = made.name_any(),
            image,
            "created ImagePullJob"
        );
        ctx.expect(&uid, Expectation::exists(JOB, made.name_any()));
        created += 1;
    }
    Ok(created)
}

async fn reconcile(list: Arc<ImageListPullJob>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = list.namespace().unwrap_or_default();
    let name = list.name_any();
    let key = format!("{namespace}/{name}");
    let api = Writer::<ImageListPullJob>::namespaced(ctx.writes.clone(), &namespace);
    let jobs_api = Writer::<ImagePullJob>::namespaced(ctx.writes.clone(), &namespace);
    if list.metadata.deletion_timestamp.is_some() {
        if let Some(uid) = &list.metadata.uid {
            ctx.expectations
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .forget(uid);
        }
        return Ok(Action::await_change());
    }
    let spec = list.spec();
    // The template's hash on the list, as upstream labels it (before anything else).
    let hash = imagepull::list_template_hash(spec);
    if list.labels().get(imagepull::LABEL_TEMPLATE_HASH) != Some(&hash) {
        let labels = BTreeMap::from([(imagepull::LABEL_TEMPLATE_HASH, &hash)]);
        let patch = serde_json::json!({ "metadata": { "labels": labels } });
        return raced(
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await,
            || format!("labelling ImageListPullJob {key} with its template hash"),
        );
    }
    let status = list.status.as_ref();
    if let Some(done) = status.and_then(|s| s.completion_time.as_ref()) {
        return after_completion(&api, &list, &key, done).await;
    }
    if ctx.jobs.wait_until_ready().await.is_err() {
        return Ok(Action::requeue(RACE_RETRY));
    }
    let uid = list.metadata.uid.clone().unwrap_or_default();
    let controlled: Vec<Arc<ImagePullJob>> = ctx
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
    // Wait until the cache shows the jobs this list created, and no longer the ones it deleted.
    let check = ctx
        .expectations
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .check(&uid, std::time::Instant::now(), |expected| {
            let cached = controlled
                .iter()
                .find(|j| j.metadata.name.as_deref() == Some(expected.name.as_str()));
            expected.satisfied_by(cached.map(|j| CachedState::of(&j.metadata)))
        });
    if !check.expired.is_empty() {
        ctx.metrics.expired(CONTROLLER, check.expired.len());
        tracing::info!(list = key, expired = ?check.expired, "expectations expired unobserved; carrying on");
    }
    if !check.satisfied() {
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    let owned: Vec<Arc<ImagePullJob>> = controlled
        .into_iter()
        .filter(|j| j.metadata.deletion_timestamp.is_none())
        .collect();
    let names: Vec<String> = owned.iter().map(|j| j.name_any()).collect();
    let current: Vec<ListJob<'_>> = owned
        .iter()
        .zip(&names)
        .map(|(j, name)| ListJob {
            name,
            hash: j
                .labels()
                .get(imagepull::LABEL_TEMPLATE_HASH)
                .map(String::as_str),
            spec: &j.spec,
        })
        .collect();
    let actions = imagepull::list_actions(spec, &hash, &current);
    let created = create_jobs(&ctx, &list, &jobs_api, &actions.create, &hash).await?;
    if created > 0 {
        publish(
            &ctx,
            &list,
            "Successful create ImagePullJob",
            format!("Create {created} ImagePullJob"),
        )
        .await;
    }
    for job in &actions.delete {
        match jobs_api.delete(job, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(error) if is_race(&error) => {}
            Err(error) => {
                return Err(error).context(|| format!("deleting ImagePullJob {namespace}/{job}"));
            }
        }
        tracing::info!(list = key, job, "deleted ImagePullJob");
        ctx.expect(&uid, Expectation::gone(JOB, job.clone(), None));
    }
    if !actions.delete.is_empty() {
        publish(
            &ctx,
            &list,
            "Successful delete ImagePullJob",
            format!("Delete {} ImagePullJob", actions.delete.len()),
        )
        .await;
    }
    if created > 0 || !actions.delete.is_empty() {
        // The cache shows the new and deleted jobs through the watch; wait for it rather than act twice.
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
        // Guarded by the resourceVersion it was computed on ([`write_status`]).
        write_status(&api, &*list, status, &new, true).await?;
        return Ok(Action::requeue(RACE_RETRY));
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::driver::scripted;
    use crate::driver::writes::fake::{FakeCluster, Verb, listed};

    fn context(cluster: &Arc<FakeCluster>) -> (Arc<Context>, scripted::Log) {
        let jobs = listed(Vec::new());
        let (client, log) = scripted::client(Vec::new());
        let mut registry = prometheus_client::registry::Registry::default();
        let ctx = Arc::new(Context {
            writes: cluster.clone(),
            metrics: Metrics::register(&mut registry),
            jobs,
            recorder: crate::driver::recorder(client, CONTROLLER),
            expectations: std::sync::Mutex::new(Expectations::new(EXPECTATION_TIMEOUT)),
        });
        (ctx, log)
    }

    /// List `l` of two images, labelled with its template's hash unless `unlabelled`.
    fn list(cluster: &FakeCluster, unlabelled: bool) -> ImageListPullJob {
        let mut list: ImageListPullJob = serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1beta1", "kind": "ImageListPullJob",
            "metadata": {"name": "l", "namespace": "ns", "uid": "l-uid"},
            "spec": {"images": ["nginx:1.25", "busybox:1.36"],
                     "completionPolicy": {"type": "Always"}},
        }))
        .expect("an ImageListPullJob");
        if !unlabelled {
            let hash = imagepull::list_template_hash(list.spec());
            list.metadata.labels = Some(BTreeMap::from([(
                imagepull::LABEL_TEMPLATE_HASH.to_owned(),
                hash,
            )]));
        }
        cluster.insert(&list)
    }

    fn jobs(cluster: &FakeCluster) -> Vec<ImagePullJob> {
        cluster.all(Some("ns"))
    }

    #[tokio::test]
    async fn a_list_is_labelled_with_its_hash_first() {
        let cluster = FakeCluster::new();
        let (ctx, _) = context(&cluster);
        let cached = list(&cluster, true);
        reconcile(Arc::new(cached), ctx).await.expect("reconciled");
        let labelled: ImageListPullJob = cluster.get(Some("ns"), "l").expect("the list");
        assert!(
            labelled
                .labels()
                .contains_key(imagepull::LABEL_TEMPLATE_HASH)
        );
        assert_eq!(cluster.done().len(), 1);
    }

    #[tokio::test]
    async fn one_job_per_image_owned_by_the_list_and_expected_in_the_cache() {
        let cluster = FakeCluster::new();
        let (ctx, log) = context(&cluster);
        let cached = list(&cluster, false);
        let action = reconcile(Arc::new(cached.clone()), ctx.clone())
            .await
            .expect("reconciled");
        assert_eq!(action, Action::requeue(Duration::from_secs(1)));
        let mut images: Vec<String> = jobs(&cluster).into_iter().map(|j| j.spec.image).collect();
        images.sort();
        assert_eq!(images, ["busybox:1.36", "nginx:1.25"]);
        for job in jobs(&cluster) {
            let owner = job.owner_references().first().cloned().expect("an owner");
            assert_eq!(
                (owner.uid.as_str(), owner.controller),
                ("l-uid", Some(true))
            );
        }
        let reasons: Vec<_> = log.events().iter().map(|e| e["reason"].clone()).collect();
        assert_eq!(reasons, [json!("Successful create ImagePullJob")]);
        // The cache does not show them yet: the next pass waits, it does not create them again.
        let action = reconcile(Arc::new(cached), ctx).await.expect("reconciled");
        assert_eq!(action, Action::requeue(Duration::from_secs(1)));
        assert_eq!(jobs(&cluster).len(), 2);
    }

    #[tokio::test]
    async fn a_refused_create_fails_the_pass_and_creates_nothing_more() {
        let cluster = FakeCluster::new();
        let (ctx, log) = context(&cluster);
        let cached = list(&cluster, false);
        cluster.fail_next(Verb::Create, "", 422);
        assert!(reconcile(Arc::new(cached), ctx).await.is_err());
        assert!(jobs(&cluster).is_empty());
        assert!(log.events().is_empty());
    }
}
