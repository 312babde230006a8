//! The ImagePullJob controller: finds the job's nodes (`selector.names`, `selector` labels, the nodes of
//! the Pods `podSelector` selects, or every node), adds the image's tag with the job as owner to at most
//! `parallelism` NodeImages at a time, copies its `pullSecrets` into the daemons' namespace, and writes
//! its status from what the NodeImages report (`kruise_core::imagepulljob::job_status`). A finished job is
//! deleted `ttlSecondsAfterFinished` after its completion.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, ObjectReference, Pod, Secret};
use k8s_openapi::jiff::Timestamp;
use kruise_api::imagepulljob::v1beta1::{
    ImagePullJob, NodeImage, REFERENCE_MODE_BATCH, ReferenceObject,
};
use kruise_core::imagepulljob::{self as imagepull, NodePull, TagRequest};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use rand::Rng;
use serde_json::json;

use super::Config;
use crate::driver::caches::Caches;
use crate::driver::write::write_status;
use crate::driver::writes::{ApiWrites, LiveReads, Writer, Writes, get_live, list_live};
use crate::error::{Error, KubeContext, is_race};
use crate::metrics::Metrics;

pub const CONTROLLER: &str = "imagepulljob-controller";
/// The finalizer that keeps a job until its copied pull secrets are released (upstream's).
pub const PROTECTION_FINALIZER: &str = "apps.kruise.io/deletion-protection";
/// Annotations on a copied pull secret: the jobs using it, and the Secret it was copied from.
pub const SECRET_REFERENCE_JOBS: &str = "imagepulljobs.kruise.io/references";
pub const SECRET_SOURCE: &str = "imagepulljobs.kruise.io/source-key";
pub const SECRET_MODE: &str = "imagepulljobs.kruise.io/mode";

const RACE_RETRY: Duration = Duration::from_millis(500);
/// How often a running job looks again at its nodes (new nodes, Pods moving) when nothing wakes it.
const RUNNING_RESYNC: Duration = Duration::from_secs(10);

///
/// It reads live ([`LiveReads`]): the Pods a job selects by its own selector (not by a workload's
/// ownership, which is what the Pod cache indexes), and the pull Secrets with their data and their
/// copies in the daemons' namespace (Secrets are cached as metadata only).
pub struct Context {
    writes: Arc<dyn Writes>,
    live: Arc<dyn LiveReads>,
    metrics: Arc<Metrics>,
    images: Store<NodeImage>,
    config: Config,
}

crate::driver::driven!(Context, CONTROLLER);

/// Runs the controller until the future is dropped.
pub async fn run(client: Client, caches: &Caches, metrics: Arc<Metrics>, config: Config) {
    let workers = config.workers.max(1);
    let node_images = caches.shared::<NodeImage>();
    let images = node_images.store().clone();
    // A NodeImage change wakes the jobs that own one of its tags.
    let wakes =
        crate::cache::receiver_stream(node_images.subscribe()).flat_map(|image: Arc<NodeImage>| {
            let owners: BTreeSet<(String, String)> = image
                .spec
                .images
                .values()
                .flat_map(|i| &i.tags)
                .flat_map(|t| &t.owner_references)
                .filter(|o| o.kind.as_deref() == Some("ImagePullJob"))
                .map(|o| {
                    (
                        o.namespace.clone().unwrap_or_default(),
                        o.name.clone().unwrap_or_default(),
                    )
                })
                .collect();
            futures::stream::iter(
                owners
                    .into_iter()
                    .map(|(ns, name)| ObjectRef::<ImagePullJob>::new(&name).within(&ns)),
            )
        });
    let controller = caches.shared::<ImagePullJob>().controller();
    // A changed pull secret wakes the jobs of its namespace that name it (their copies follow it).
    let jobs = controller.store();
    let secrets = caches.shared::<kube::api::PartialObjectMeta<Secret>>();
    let secret_wakes = crate::cache::receiver_stream(secrets.subscribe()).flat_map(move |secret| {
        let namespace = secret.metadata.namespace.clone().unwrap_or_default();
        let name = secret.metadata.name.clone().unwrap_or_default();
        let woken: Vec<ObjectRef<ImagePullJob>> = jobs
            .state()
            .iter()
            .filter(|job| {
                job.namespace().as_deref() == Some(namespace.as_str())
                    && job.spec.pull_secrets.contains(&name)
            })
            .map(|job| ObjectRef::from_obj(job.as_ref()))
            .collect();
        futures::stream::iter(woken)
    });
    let controller = controller.reconcile_on(wakes).reconcile_on(secret_wakes);
    let cluster = ApiWrites::new(client);
    let ctx = Arc::new(Context {
        writes: cluster.clone(),
        live: cluster,
        metrics,
        images,
        config,
    });
    crate::driver::run(controller, workers, reconcile, ctx).await;
}

fn raced(result: Result<(), kube::Error>, what: impl FnOnce() -> String) -> Result<Action, Error> {
    match result {
        Ok(()) => Ok(Action::requeue(RACE_RETRY)),
        Err(error) if is_race(&error) => Ok(Action::requeue(RACE_RETRY)),
        Err(source) => Err(source).context(what),
    }
}

fn owner_ref(job: &ImagePullJob) -> ObjectReference {
    ObjectReference {
        api_version: Some(ImagePullJob::api_version(&()).into_owned()),
        kind: Some(ImagePullJob::kind(&()).into_owned()),
        name: job.metadata.name.clone(),
        namespace: job.metadata.namespace.clone(),
        uid: job.metadata.uid.clone(),
        ..Default::default()
    }
}

/// A job being deleted or finished: its pull-secret copies released and its finalizer removed,
/// then (finished) deleted once `ttlSecondsAfterFinished` has passed.
async fn wind_down(
    ctx: &Context,
    api: &Writer<ImagePullJob>,
    job: &ImagePullJob,
    key: &str,
    finished: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
) -> Result<Action, Error> {
    let name = job.name_any();
    if job.finalizers().iter().any(|f| f == PROTECTION_FINALIZER) {
        release_secrets(ctx, job).await?;
        let kept: Vec<&String> = job
            .finalizers()
            .iter()
            .filter(|f| *f != PROTECTION_FINALIZER)
            .collect();
        let patch =
            json!({"metadata": {"finalizers": kept, "resourceVersion": job.resource_version()}});
        return raced(
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(drop),
            || format!("removing the finalizer of ImagePullJob {key}"),
        );
    }
    if job.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let left = imagepull::ttl_left(
        finished,
        job.spec.completion_policy.ttl_seconds_after_finished,
        Timestamp::now(),
    );
    match left {
        None => Ok(Action::await_change()),
        Some(left) if left.is_positive() => Ok(Action::requeue(
            Duration::try_from(left).unwrap_or(Duration::from_secs(1)),
        )),
        Some(_) => {
            tracing::info!(
                job = key,
                "deleting ImagePullJob for ttlSecondsAfterFinished"
            );
            let params = DeleteParams {
                preconditions: job.metadata.uid.clone().map(|uid| Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            raced(api.delete(&name, &params).await.map(drop), || {
                format!("deleting ImagePullJob {key} after its TTL")
            })
        }
    }
}

async fn reconcile(job: Arc<ImagePullJob>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = job.namespace().unwrap_or_default();
    let name = job.name_any();
    let key = format!("{namespace}/{name}");
    let api = Writer::<ImagePullJob>::namespaced(ctx.writes.clone(), &namespace);
    let finished = job.status.as_ref().and_then(|s| s.completion_time.as_ref());
    if job.metadata.deletion_timestamp.is_some() || finished.is_some() {
        return wind_down(&ctx, &api, &job, &key, finished).await;
    }
    if !job.spec.pull_secrets.is_empty()
        && !job.finalizers().iter().any(|f| f == PROTECTION_FINALIZER)
    {
        let mut finalizers = job.finalizers().to_vec();
        finalizers.push(PROTECTION_FINALIZER.into());
        let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": job.resource_version()}});
        return raced(
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(drop),
            || format!("adding the finalizer of ImagePullJob {key}"),
        );
    }
    let Some((image_name, tag)) = imagepull::name_tag(&job.spec.image) else {
        return Err(Error::Invalid(format!(
            "ImagePullJob {key}: invalid image {:?}",
            job.spec.image
        )));
    };
    if ctx.images.wait_until_ready().await.is_err() {
        return Ok(Action::requeue(RACE_RETRY));
    }
    let nodes = target_nodes(&ctx, &job, &namespace).await?;
    let secrets = claim_secrets(&ctx, &job).await?;
    let uid = job.metadata.uid.clone().unwrap_or_default();
    let pulls: Vec<(String, NodePull)> = nodes
        .iter()
        .map(|image| {
            (
                image.name_any(),
                imagepull::node_pull(image, &image_name, &tag, &uid, &secrets),
            )
        })
        .collect();
    let now = Timestamp::now();
    let (status, not_synced) = imagepull::job_status(&job.spec, job.status.as_ref(), &pulls, now);
    // Ask the next NodeImages for the image.
    let parallelism = kruise_api::imagepulljob::parallelism(job.spec.parallelism.as_ref());
    let owner = owner_ref(&job);
    let policy = imagepull::tag_pull_policy(
        &job.spec,
        ctx.config.default_ttl_always,
        rand::rng().random_range(-600..=600),
    );
    let images_api = Writer::<NodeImage>::all(ctx.writes.clone());
    for node in imagepull::nodes_to_sync(&not_synced, status.active, parallelism) {
        let Some(mut image) = nodes
            .iter()
            .find(|image| image.metadata.name.as_deref() == Some(node.as_ref()))
            .map(|i| i.as_ref().clone())
        else {
            continue;
        };
        let request = TagRequest {
            name: &image_name,
            tag: &tag,
            owner: &owner,
            policy: &policy,
            image_pull_policy: &job.spec.image_pull_policy,
            sandbox: job.spec.sandbox_config.as_ref(),
            secrets: &secrets,
            now,
        };
        if !imagepull::add_tag(&mut image, &request) {
            continue;
        }
        let patch = json!({
            "metadata": {"resourceVersion": image.resource_version()},
            "spec": {"images": {&image_name: image.spec.images.get(&image_name)}},
        });
        match images_api
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => tracing::info!(
                job = key,
                node,
                image = job.spec.image,
                "asked NodeImage to pull"
            ),
            Err(error) if is_race(&error) => return Ok(Action::requeue(RACE_RETRY)),
            Err(source) => {
                return Err(source)
                    .context(|| format!("adding {} to NodeImage {node}", job.spec.image));
            }
        }
    }
    if job.status.as_ref() != Some(&status) {
        // Guarded by the resourceVersion it was computed on; a stale copy's status is dropped and
        // computed again on the newer one.
        write_status(&api, &*job, job.status.as_ref(), &status, true).await?;
        return Ok(Action::requeue(RACE_RETRY));
    }
    let mut next = RUNNING_RESYNC;
    if job.spec.completion_policy.type_ != kruise_api::broadcastjob::v1beta1::COMPLETION_NEVER
        && let (Some(deadline), Some(start)) = (
            job.spec.completion_policy.active_deadline_seconds,
            status.start_time.as_ref(),
        )
    {
        let left =
            k8s_openapi::jiff::SignedDuration::from_secs(deadline) - now.duration_since(start.0);
        if let Ok(left) = Duration::try_from(left) {
            next = next.min(left.max(Duration::from_secs(1)));
        }
    }
    Ok(Action::requeue(next))
}

/// The NodeImages of the job's nodes, in a stable order (by name; by the Pods' order for podSelector).
/// From the cache; when it holds none of them, from the apiserver: a job is never decided (and
/// completed) on no node because the cache has not shown NodeImages just created or labelled yet.
async fn target_nodes(
    ctx: &Context,
    job: &ImagePullJob,
    namespace: &str,
) -> Result<Vec<Arc<NodeImage>>, Error> {
    let cached = select_nodes(ctx, job, namespace, ctx.images.state()).await?;
    if !cached.is_empty() {
        return Ok(cached);
    }
    let live = list_live::<NodeImage>(ctx.live.as_ref(), None, &ListParams::default())
        .await
        .context(|| "listing NodeImages".to_owned())?;
    select_nodes(
        ctx,
        job,
        namespace,
        live.into_iter().map(Arc::new).collect(),
    )
    .await
}

/// The NodeImages of `all` that the job selects, in a stable order.
async fn select_nodes(
    ctx: &Context,
    job: &ImagePullJob,
    namespace: &str,
    all: Vec<Arc<NodeImage>>,
) -> Result<Vec<Arc<NodeImage>>, Error> {
    let by_name: BTreeMap<String, Arc<NodeImage>> =
        all.into_iter().map(|i| (i.name_any(), i)).collect();
    if let Some(pods) = &job.spec.pod_selector {
        let selector = selector_string(&pods.label_selector)
            .ok_or_else(|| Error::Invalid("invalid podSelector".into()))?;
        let params = ListParams::default().labels(&selector);
        let list = list_live::<Pod>(ctx.live.as_ref(), Some(namespace), &params)
            .await
            .context(|| {
                format!(
                    "listing the Pods of ImagePullJob {namespace}/{}",
                    job.name_any()
                )
            })?;
        let mut seen = BTreeSet::new();
        return Ok(list
            .iter()
            .filter(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && !matches!(
                        p.status.as_ref().and_then(|s| s.phase.as_deref()),
                        Some("Succeeded" | "Failed")
                    )
            })
            .filter_map(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()))
            .filter(|node| seen.insert(node.clone()))
            .filter_map(|node| by_name.get(&node).cloned())
            .collect());
    }
    let Some(selector) = &job.spec.selector else {
        return Ok(by_name.into_values().collect());
    };
    if !selector.names.is_empty() {
        return Ok(selector
            .names
            .iter()
            .filter_map(|n| by_name.get(n).cloned())
            .collect());
    }
    let labels = &selector.label_selector;
    Ok(by_name
        .into_values()
        .filter(|image| kruise_api::validation::selector_matches(labels, image.labels()))
        .collect())
}

/// A label selector as a list query (`a=b,c in (d)`); `None` when it cannot be written.
fn selector_string(
    selector: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
) -> Option<String> {
    let mut parts: Vec<String> = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for requirement in selector.match_expressions.iter().flatten() {
        let values = requirement.values.clone().unwrap_or_default().join(",");
        parts.push(match requirement.operator.as_str() {
            "In" => format!("{} in ({values})", requirement.key),
            "NotIn" => format!("{} notin ({values})", requirement.key),
            "Exists" => requirement.key.clone(),
            "DoesNotExist" => format!("!{}", requirement.key),
            _ => return None,
        });
    }
    Some(parts.join(","))
}

fn job_key(job: &ImagePullJob) -> String {
    format!("{}/{}", job.namespace().unwrap_or_default(), job.name_any())
}

fn referencing_jobs(secret: &Secret) -> BTreeSet<String> {
    secret
        .annotations()
        .get(SECRET_REFERENCE_JOBS)
        .map(|v| {
            v.split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Copies the job's pull secrets into the daemons' namespace (one copy per source Secret, shared by
/// the jobs that use it, listed in an annotation) and returns their references for the NodeImages. A
/// job in that namespace uses its secrets directly.
async fn claim_secrets(ctx: &Context, job: &ImagePullJob) -> Result<Vec<ReferenceObject>, Error> {
    if job.spec.pull_secrets.is_empty() {
        return Ok(Vec::new());
    }
    let namespace = job.namespace().unwrap_or_default();
    let target = &ctx.config.daemon_config_namespace;
    if &namespace == target {
        return Ok(job
            .spec
            .pull_secrets
            .iter()
            .map(|name| ReferenceObject {
                namespace: namespace.clone(),
                name: name.clone(),
                mode: String::new(),
            })
            .collect());
    }
    let namespaces = Writer::<Namespace>::all(ctx.writes.clone());
    if get_live::<Namespace>(ctx.live.as_ref(), None, target)
        .await
        .context(|| format!("reading namespace {target}"))?
        .is_none()
    {
        let ns = Namespace {
            metadata: kube::api::ObjectMeta {
                name: Some(target.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        match namespaces.create(&PostParams::default(), &ns).await {
            Ok(_) | Err(kube::Error::Api(_)) => {}
            Err(source) => return Err(source).context(|| format!("creating namespace {target}")),
        }
    }
    let copies = Writer::<Secret>::namespaced(ctx.writes.clone(), target);
    let existing = list_live::<Secret>(ctx.live.as_ref(), Some(target), &ListParams::default())
        .await
        .context(|| format!("listing the Secrets of {target}"))?;
    let me = job_key(job);
    let mut refs = Vec::new();
    for name in &job.spec.pull_secrets {
        let Some(source) = get_live::<Secret>(ctx.live.as_ref(), Some(&namespace), name)
            .await
            .context(|| format!("reading Secret {namespace}/{name}"))?
        else {
            tracing::warn!(job = me, secret = name, "pull secret not found");
            continue;
        };
        let source_key = format!("{namespace}/{name}");
        let mut copies_of: Vec<&Secret> = existing
            .iter()
            .filter(|s| s.annotations().get(SECRET_SOURCE) == Some(&source_key))
            .collect();
        copies_of.sort_by_key(|s| s.name_any());
        let copy = copies_of
            .iter()
            .find(|s| referencing_jobs(s).contains(&me))
            .or(copies_of.first())
            .copied();
        match copy {
            Some(copy) => {
                let mut jobs = referencing_jobs(copy);
                jobs.insert(me.clone());
                let joined = jobs.into_iter().collect::<Vec<_>>().join(",");
                if copy.data != source.data
                    || copy.annotations().get(SECRET_REFERENCE_JOBS) != Some(&joined)
                {
                    let patch = json!({
                        "metadata": {"annotations": {SECRET_REFERENCE_JOBS: joined}, "resourceVersion": copy.resource_version()},
                        "data": source.data.clone().unwrap_or_default(),
                    });
                    copies
                        .patch(
                            &copy.name_any(),
                            &PatchParams::default(),
                            &Patch::Merge(&patch),
                        )
                        .await
                        .context(|| format!("updating the copy of Secret {source_key}"))?;
                }
                refs.push(ReferenceObject {
                    namespace: target.clone(),
                    name: copy.name_any(),
                    mode: copy
                        .annotations()
                        .get(SECRET_MODE)
                        .cloned()
                        .unwrap_or_default(),
                });
            }
            None => {
                let suffix: String = (0..5)
                    .map(|_| char::from(b'a' + rand::rng().random_range(0..26u8)))
                    .collect();
                let copy = Secret {
                    metadata: kube::api::ObjectMeta {
                        name: Some(format!("{name}-{suffix}")),
                        namespace: Some(target.clone()),
                        annotations: Some(BTreeMap::from([
                            (SECRET_REFERENCE_JOBS.to_owned(), me.clone()),
                            (SECRET_SOURCE.to_owned(), source_key.clone()),
                            (SECRET_MODE.to_owned(), REFERENCE_MODE_BATCH.to_owned()),
                        ])),
                        ..Default::default()
                    },
                    data: source.data.clone(),
                    type_: source.type_.clone(),
                    ..Default::default()
                };
                let created = copies
                    .create(&PostParams::default(), &copy)
                    .await
                    .context(|| format!("copying Secret {source_key} to {target}"))?;
                refs.push(ReferenceObject {
                    namespace: target.clone(),
                    name: created.name_any(),
                    mode: REFERENCE_MODE_BATCH.into(),
                });
            }
        }
    }
    Ok(refs)
}

/// Removes the job from the copies it used; a copy no job uses any more is deleted.
async fn release_secrets(ctx: &Context, job: &ImagePullJob) -> Result<(), Error> {
    let target = &ctx.config.daemon_config_namespace;
    let copies = Writer::<Secret>::namespaced(ctx.writes.clone(), target);
    let every = ListParams::default();
    let listed = list_live::<Secret>(ctx.live.as_ref(), Some(target), &every);
    let existing = match listed.await {
        Ok(list) => list,
        Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
        Err(source) => return Err(source).context(|| format!("listing the Secrets of {target}")),
    };
    let me = job_key(job);
    for copy in existing
        .iter()
        .filter(|s| referencing_jobs(s).contains(&me))
    {
        let mut jobs = referencing_jobs(copy);
        jobs.remove(&me);
        let result = if jobs.is_empty() {
            copies
                .delete(&copy.name_any(), &DeleteParams::default())
                .await
                .map(drop)
        } else {
            let joined = jobs.into_iter().collect::<Vec<_>>().join(",");
            let patch = json!({"metadata": {"annotations": {SECRET_REFERENCE_JOBS: joined}, "resourceVersion": copy.resource_version()}});
            copies
                .patch(
                    &copy.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
                .map(drop)
        };
        match result {
            Ok(()) => {}
            Err(error) if is_race(&error) => {}
            Err(source) => {
                return Err(source).context(|| format!("releasing Secret {}", copy.name_any()));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use kruise_api::imagepulljob::v1beta1::NodeImageSpec;
    use serde_json::Value;

    use super::*;
    use crate::driver::writes::fake::{FakeCluster, Verb, listed};

    /// NodeImages `n1` and `n2` in the cluster and (listed) in the cache.
    fn context(cluster: &Arc<FakeCluster>) -> Arc<Context> {
        let images = listed(
            ["n1", "n2"]
                .into_iter()
                .map(|node| cluster.insert(&NodeImage::new(node, NodeImageSpec::default())))
                .collect(),
        );
        let mut registry = prometheus_client::registry::Registry::default();
        Arc::new(Context {
            writes: cluster.clone(),
            live: cluster.clone(),
            metrics: Metrics::register(&mut registry),
            images,
            config: Config::default(),
        })
    }

    /// Job `j` in `app` pulling `nginx:1.25` on node `n1`, with `extra` merged in.
    fn job(cluster: &FakeCluster, extra: Value) -> ImagePullJob {
        let mut job = json!({
            "apiVersion": "apps.kruise.io/v1beta1", "kind": "ImagePullJob",
            "metadata": {"name": "j", "namespace": "app", "uid": "j-uid"},
            "spec": {"image": "nginx:1.25", "selector": {"names": ["n1"]},
                     "completionPolicy": {"type": "Always"}},
        });
        json_patch::merge(&mut job, &extra);
        let job: ImagePullJob = serde_json::from_value(job).expect("an ImagePullJob");
        cluster.insert(&job)
    }

    /// The job owners of `nginx:1.25` on NodeImage `node`.
    fn asked(cluster: &FakeCluster, node: &str) -> Vec<String> {
        let image: NodeImage = cluster.get(None, node).expect("the NodeImage");
        image
            .spec
            .images
            .get("nginx")
            .into_iter()
            .flat_map(|i| &i.tags)
            .filter(|t| t.tag == "1.25")
            .flat_map(|t| &t.owner_references)
            .filter_map(|o| o.uid.clone())
            .collect()
    }

    #[tokio::test]
    async fn the_selected_node_is_asked_for_the_image_and_no_other() {
        let cluster = FakeCluster::new();
        let ctx = context(&cluster);
        let cached = job(&cluster, json!({}));
        reconcile(Arc::new(cached), ctx).await.expect("reconciled");
        assert_eq!(asked(&cluster, "n1"), ["j-uid"]);
        assert!(asked(&cluster, "n2").is_empty());
        let status = cluster
            .get::<ImagePullJob>(Some("app"), "j")
            .and_then(|j| j.status)
            .expect("a status");
        // Computed from the view the pass started on: one node wanted, its pull just asked for.
        assert_eq!(status.desired, 1);
    }

    /// NodeImages the cache has not shown yet (just created): the job is decided on the apiserver's,
    /// not completed at once on no node.
    #[tokio::test]
    async fn nodes_the_cache_does_not_show_yet_are_read_from_the_apiserver() {
        let cluster = FakeCluster::new();
        let ctx = context(&cluster);
        let ctx = Arc::new(Context {
            writes: ctx.writes.clone(),
            live: ctx.live.clone(),
            metrics: ctx.metrics.clone(),
            images: listed(Vec::new()),
            config: Config::default(),
        });
        let cached = job(&cluster, json!({}));
        reconcile(Arc::new(cached), ctx).await.expect("reconciled");
        assert_eq!(asked(&cluster, "n1"), ["j-uid"]);
        let status = cluster
            .get::<ImagePullJob>(Some("app"), "j")
            .and_then(|j| j.status)
            .expect("a status");
        assert_eq!((status.desired, status.completion_time), (1, None));
    }

    /// A NodeImage that moved under the job is asked again on a fresh view (no failure, no status
    /// from the stale one); a refused patch fails the pass.
    #[tokio::test]
    async fn a_refused_node_image_patch_by_code() {
        for (code, race) in [(409, true), (404, true), (422, false)] {
            let cluster = FakeCluster::new();
            let ctx = context(&cluster);
            let cached = job(&cluster, json!({}));
            cluster.fail_next(Verb::Patch, "n1", code);
            let outcome = reconcile(Arc::new(cached), ctx).await;
            match race {
                true => assert_eq!(outcome.ok(), Some(Action::requeue(RACE_RETRY)), "{code}"),
                false => assert!(outcome.is_err(), "{code}"),
            }
            assert!(asked(&cluster, "n1").is_empty(), "{code}");
            let job: ImagePullJob = cluster.get(Some("app"), "j").expect("the job");
            assert!(job.status.is_none(), "{code}");
        }
    }

    #[tokio::test]
    async fn pull_secrets_are_copied_for_the_daemons_and_released_with_the_job() {
        let cluster = FakeCluster::new();
        let ctx = context(&cluster);
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "reg", "namespace": "app"},
            "type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": "e30="},
        }))
        .expect("a Secret");
        cluster.insert(&secret);
        let cached = job(&cluster, json!({"spec": {"pullSecrets": ["reg"]}}));
        // First the finalizer, then the copy.
        reconcile(Arc::new(cached), ctx.clone())
            .await
            .expect("reconciled");
        let cached: ImagePullJob = cluster.get(Some("app"), "j").expect("the job");
        assert_eq!(cached.finalizers(), [PROTECTION_FINALIZER]);
        reconcile(Arc::new(cached), ctx.clone())
            .await
            .expect("reconciled");
        let target = DAEMON_NAMESPACE;
        assert!(cluster.get::<Namespace>(None, target).is_some());
        let copies: Vec<Secret> = cluster.all(Some(target));
        assert_eq!(copies.len(), 1);
        let copy = &copies[0];
        assert_eq!(copy.data, secret.data);
        assert_eq!(
            copy.annotations()
                .get(SECRET_REFERENCE_JOBS)
                .map(String::as_str),
            Some("app/j")
        );
        // Deleted: the copy no other job uses goes, then the finalizer.
        let mut gone: ImagePullJob = cluster.get(Some("app"), "j").expect("the job");
        gone.metadata.deletion_timestamp =
            serde_json::from_value(json!("2026-01-01T00:00:00Z")).ok();
        let gone = cluster.insert(&gone);
        reconcile(Arc::new(gone), ctx).await.expect("reconciled");
        assert!(cluster.all::<Secret>(Some(target)).is_empty());
        assert!(cluster.get::<ImagePullJob>(Some("app"), "j").is_none());
    }

    const DAEMON_NAMESPACE: &str = super::super::DAEMON_CONFIG_NAMESPACE;
}
