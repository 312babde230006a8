//! The EphemeralJob controller (upstream `pkg/controller/ephemeraljob`), on the shared driver:
//! ephemeral containers injected into the Pods a job's selector matches.
//!
//! Observe: the job and the Pods of its namespace (shared Pod cache, which keeps each Pod's
//! ephemeral containers' names, job ids and states). Decide: targets, Pods to inject into now, status
//! (`kruise_core::ephemeraljob`). Act: a strategic-merge patch of `pods/ephemeralcontainers` per Pod
//! (ephemeral containers are added by name; an existing one is never changed), expected in the cache
//! before the next decision; the job's finalizer; the status when it changed; the job deleted
//! `ttlSecondsAfterFinished` after it finished. Nothing else is deleted: a Pod is never touched but
//! to add the job's containers (the API cannot remove ephemeral containers; upstream's clean-up is a
//! no-op on the Kubernetes versions kruise-rs serves).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kruise_api::ephemeraljob::{self as ej, EphemeralJob};
use kruise_core::ephemeraljob as decide;
use kruise_core::expectations::{Expectation, Expectations};
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::mpsc;

use crate::cache::{PodCache, PodChange};
use crate::driver::caches::Caches;
use crate::driver::write::write_status;
use crate::driver::writes::{ApiWrites, Part, Writer, Writes};
use crate::error::{Error, KubeContext, is_race};
use crate::events::EventRecorder;
use crate::metrics::Metrics;

/// The controller's name in metrics, logs and Events (upstream's).
pub const CONTROLLER: &str = "ephemeraljob-controller";

/// How soon a job is looked at again after a write raced another.
const RACE_RETRY: Duration = Duration::from_millis(500);

/// How the controller runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// Concurrent reconciles.
    pub workers: u16,
    /// How long an injection may stay unobserved in the Pod cache before the controller stops waiting.
    pub expectation_timeout: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            workers: 3,
            expectation_timeout: Duration::from_secs(300),
        }
    }
}

/// What every reconcile shares.
pub struct Context {
    writes: Arc<dyn Writes>,
    pods: Arc<PodCache>,
    /// EphemeralJob keeps no ControllerRevisions: an empty store for the shared expectation check.
    no_revisions: Store<ControllerRevision>,
    expectations: Mutex<Expectations>,
    metrics: Arc<Metrics>,
    /// Publishes upstream's `CreateFailed` Warning on the job.
    recorder: EventRecorder,
}

/// The Warning a job gets when the apiserver refuses its ephemeral containers (upstream's reason).
pub const REASON_CREATE_FAILED: &str = "CreateFailed";

crate::driver::driven!(Context, CONTROLLER);

/// Runs the controller on the shared Pod cache until the future is dropped.
pub async fn run(client: Client, caches: Caches, metrics: Arc<Metrics>, config: Config) {
    let watched = caches.shared::<EphemeralJob>();
    let controller = watched.controller();
    let jobs = controller.store();
    let (wake_tx, wake_rx) = mpsc::unbounded_channel();
    let (all_tx, all_rx) = mpsc::unbounded_channel();
    crate::driver::wake::wake_on_pod_changes(
        caches.pods.subscribe("ephemeraljob"),
        jobs,
        wake_tx,
        Some(all_tx),
        concerns,
    );
    caches.pods.wait_synced().await;
    let ctx = Arc::new(Context {
        recorder: crate::driver::recorder(client.clone(), CONTROLLER),
        writes: ApiWrites::new(client),
        pods: caches.pods,
        no_revisions: kube::runtime::reflector::store().0,
        expectations: Mutex::new(Expectations::new(config.expectation_timeout)),
        metrics,
    });
    let controller = controller
        .reconcile_on(crate::cache::receiver_stream(wake_rx))
        .reconcile_all_on(crate::cache::receiver_stream(all_rx));
    crate::driver::run(controller, config.workers, reconcile, ctx).await;
}

/// Whether a Pod change concerns a job of its namespace: its selector matches the Pod's labels.
fn concerns(job: &EphemeralJob, change: &PodChange) -> bool {
    job.spec
        .selector
        .as_ref()
        .is_some_and(|s| !kruise_api::validation::selector_is_empty(s) && change.labels.matches(s))
}

async fn reconcile(job: Arc<EphemeralJob>, ctx: Arc<Context>) -> Result<Action, Error> {
    let job = job.as_ref();
    let namespace = job.namespace().unwrap_or_default();
    let name = job.name_any();
    let key = format!("{namespace}/{name}");
    let api = Writer::<EphemeralJob>::namespaced(ctx.writes.clone(), &namespace);
    if job.metadata.uid.is_none() {
        return Ok(Action::await_change());
    }
    let finalizers = job.metadata.finalizers.clone().unwrap_or_default();
    let has_finalizer = finalizers.iter().any(|f| f == ej::FINALIZER);
    if job.metadata.deletion_timestamp.is_some() {
        if let Ok(mut ex) = ctx.expectations.lock() {
            ex.forget(&key);
        }
        if has_finalizer {
            let kept: Vec<&String> = finalizers.iter().filter(|f| *f != ej::FINALIZER).collect();
            return set_finalizers(&api, job, &kept).await;
        }
        return Ok(Action::await_change());
    }
    if !has_finalizer {
        let mut all: Vec<&String> = finalizers.iter().collect();
        let ours = ej::FINALIZER.to_string();
        all.push(&ours);
        return set_finalizers(&api, job, &all).await;
    }

    let now = Timestamp::now();
    let previous = job.status.clone().unwrap_or_default();
    // Finished: only the TTL is left.
    if let Some(completed) = &previous.completion_time {
        let left = decide::ttl_left(job, completed, now);
        if !left.is_zero() {
            return Ok(Action::requeue(left));
        }
        let params = DeleteParams {
            preconditions: job.metadata.uid.clone().map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        tracing::info!(job = %key, "deleting EphemeralJob for ttlSecondsAfterFinished");
        return match api.delete(&name, &params).await {
            Ok(_) => Ok(Action::await_change()),
            Err(error) if is_race(&error) => Ok(Action::await_change()),
            Err(source) => Err(Error::Kube {
                context: format!("deleting EphemeralJob {key} after its TTL"),
                source,
            }),
        };
    }
    if let Err(wait) = crate::podcontrol::expectations_met(
        &ctx.expectations,
        &key,
        &namespace,
        &ctx.pods,
        &ctx.no_revisions,
        &ctx.metrics,
        CONTROLLER,
    ) {
        return Ok(Action::requeue(wait));
    }

    // Observe and decide.
    let pods: Vec<Arc<Pod>> = match job.spec.selector.as_ref() {
        Some(selector) if !kruise_api::validation::selector_is_empty(selector) => ctx
            .pods
            .select(Some(&namespace), |labels| labels.matches(selector)),
        _ => Vec::new(),
    };
    let refs: Vec<&Pod> = pods.iter().map(AsRef::as_ref).collect();
    let targets = decide::targets(job, &refs);
    let status = decide::status(job, &targets, &previous, now);

    // Act: inject, unless paused or finished by this pass.
    if status.phase != ej::PHASE_PAUSED && status.completion_time.is_none() {
        let containers = decide::injected_containers(job);
        for pod in decide::to_inject(job, &targets) {
            let pod_name = pod.name_any();
            let pods = Writer::<Pod>::namespaced(ctx.writes.clone(), &namespace);
            let patch = json!({"spec": {"ephemeralContainers": containers}});
            match pods
                .patch_part(
                    &pod_name,
                    Part::EphemeralContainers,
                    &Patch::Strategic(&patch),
                )
                .await
            {
                Ok(patched) => {
                    tracing::info!(job = %key, pod = %pod_name, "created ephemeral containers");
                    if let (Ok(mut ex), Some(version)) =
                        (ctx.expectations.lock(), patched.metadata.resource_version)
                    {
                        ex.expect(
                            &key,
                            Expectation::observed("Pod", pod_name, version),
                            Instant::now(),
                        );
                    }
                }
                // Gone or changed under us: the next pass decides on the new Pod. A 422 is not
                // a race here: the apiserver refused the containers (a name taken by one of the
                // Pod's own containers, say), which upstream reports as CreateFailed.
                Err(error) if matches!(&error, kube::Error::Api(s) if matches!(s.code, 404 | 409)) =>
                {
                    tracing::info!(job = %key, pod = %pod_name, %error, "the Pod changed or went away before its ephemeral containers were added");
                }
                Err(source) => {
                    // Upstream's wording, as one Event per failed pass (the first failure stops
                    // the pass, as upstream's batches do).
                    let message = format!(
                        "failed to create ephemeral container in pod {namespace}/{pod_name}: {source}"
                    );
                    ctx.recorder
                        .record(
                            &kube::Resource::object_ref(job, &()),
                            kube::runtime::events::EventType::Warning,
                            REASON_CREATE_FAILED,
                            message,
                        )
                        .await;
                    return Err(Error::Kube {
                        context: format!(
                            "creating ephemeral containers in pod {namespace}/{pod_name}"
                        ),
                        source,
                    });
                }
            }
        }
    }

    // Status.
    write_status(&api, job, job.status.as_ref(), &status, status != previous).await?;
    let wake = match (&status.completion_time, &status.start_time) {
        (Some(completed), _) => Some(decide::ttl_left(job, completed, now)),
        (None, Some(start)) => decide::deadline_left(job, start, now),
        _ => None,
    };
    Ok(wake.map_or_else(Action::await_change, |left| {
        Action::requeue(left.max(Duration::from_millis(100)))
    }))
}

/// Sets the job's finalizers to `finalizers` (a merge patch over the resourceVersion read).
async fn set_finalizers(
    api: &Writer<EphemeralJob>,
    job: &EphemeralJob,
    finalizers: &[&String],
) -> Result<Action, Error> {
    let name = job.name_any();
    let patch = json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": job.metadata.resource_version,
    }});
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(Action::await_change()),
        Err(error) if is_race(&error) => Ok(Action::requeue(RACE_RETRY)),
        Err(source) => {
            Err(source).context(|| format!("setting the finalizers of EphemeralJob {name}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::watcher;
    use serde_json::Value;

    use super::*;
    use crate::driver::scripted;
    use crate::driver::writes::fake::{FakeCluster, Verb};

    /// The context over `cluster`; Events go to a scripted client whose log is returned.
    fn context(cluster: &Arc<FakeCluster>, pods: &[Pod]) -> (Arc<Context>, scripted::Log) {
        let (client, log) = scripted::client(Vec::new());
        let cache = PodCache::new();
        for pod in pods {
            cache.apply(watcher::Event::Apply(pod.clone()));
        }
        let mut registry = prometheus_client::registry::Registry::default();
        let ctx = Arc::new(Context {
            writes: cluster.clone(),
            pods: cache,
            no_revisions: kube::runtime::reflector::store().0,
            expectations: Mutex::new(Expectations::new(Duration::from_secs(300))),
            metrics: Metrics::register(&mut registry),
            recorder: crate::driver::recorder(client, CONTROLLER),
        });
        (ctx, log)
    }

    fn job(extra: Value) -> EphemeralJob {
        let mut job = json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "EphemeralJob",
            "metadata": {"name": "ej", "namespace": "ns", "uid": "ej-uid",
                         "finalizers": [ej::FINALIZER]},
            "spec": {"selector": {"matchLabels": {"app": "a"}}, "replicas": 1, "parallelism": 1,
                     "template": {"ephemeralContainers": [{"name": "debug", "image": "busybox"}]}},
        });
        json_patch::merge(&mut job, &extra);
        serde_json::from_value(job).expect("an EphemeralJob")
    }

    fn pod(cluster: &FakeCluster) -> Pod {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "p-uid", "labels": {"app": "a"},
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running"},
        }))
        .expect("a Pod");
        cluster.insert(&pod)
    }

    fn injected(cluster: &FakeCluster) -> Vec<String> {
        cluster
            .get::<Pod>(Some("ns"), "p")
            .and_then(|p| p.spec)
            .and_then(|s| s.ephemeral_containers)
            .unwrap_or_default()
            .into_iter()
            .map(|c| c.name)
            .collect()
    }

    #[tokio::test]
    async fn a_selected_pod_gets_the_containers_and_the_job_its_status() {
        let cluster = FakeCluster::new();
        let pod = pod(&cluster);
        let (ctx, log) = context(&cluster, &[pod]);
        let cached = cluster.insert(&job(json!({})));
        reconcile(Arc::new(cached), ctx).await.expect("reconciled");
        assert_eq!(injected(&cluster), ["debug"]);
        let status = cluster
            .get::<EphemeralJob>(Some("ns"), "ej")
            .and_then(|j| j.status)
            .expect("a status");
        assert!(status.start_time.is_some());
        assert!(log.events().is_empty());
        // Only the containers were written to the Pod: nothing else of it.
        let pod_writes: Vec<_> = cluster
            .records()
            .into_iter()
            .filter(|r| r.kind == "Pod")
            .map(|r| r.verb)
            .collect();
        assert_eq!(pod_writes, [Verb::PatchEphemeralContainers]);
    }

    /// A Pod that moved or went is decided again quietly; containers the apiserver refuses fail
    /// the pass with upstream's `CreateFailed` Warning.
    #[tokio::test]
    async fn a_refused_injection_is_a_race_or_a_create_failed_by_its_code() {
        // (code, the pass fails, Events published)
        let cases = [(409, false, 0), (404, false, 0), (422, true, 1)];
        for (code, fails, events) in cases {
            let cluster = FakeCluster::new();
            let pod = pod(&cluster);
            let (ctx, log) = context(&cluster, &[pod]);
            let cached = cluster.insert(&job(json!({})));
            cluster.fail_next(Verb::PatchEphemeralContainers, "p", code);
            let outcome = reconcile(Arc::new(cached), ctx).await;
            assert_eq!(outcome.is_err(), fails, "refused with {code}");
            assert!(injected(&cluster).is_empty(), "refused with {code}");
            let reasons: Vec<Value> = log.events().iter().map(|e| e["reason"].clone()).collect();
            assert_eq!(reasons.len(), events, "refused with {code}: {reasons:?}");
            if events > 0 {
                assert_eq!(reasons[0], json!(REASON_CREATE_FAILED));
            }
        }
    }

    #[tokio::test]
    async fn the_finalizer_is_added_over_the_version_read() {
        let cluster = FakeCluster::new();
        let (ctx, _) = context(&cluster, &[]);
        let cached = cluster.insert(&job(json!({"metadata": {"finalizers": null}})));
        cluster.touch::<EphemeralJob>(Some("ns"), "ej");
        let action = reconcile(Arc::new(cached), ctx.clone()).await;
        assert_eq!(action.ok(), Some(Action::requeue(RACE_RETRY)));
        let fresh = cluster
            .get::<EphemeralJob>(Some("ns"), "ej")
            .expect("the job");
        assert!(fresh.finalizers().is_empty());
        reconcile(Arc::new(fresh), ctx).await.expect("reconciled");
        let fresh = cluster
            .get::<EphemeralJob>(Some("ns"), "ej")
            .expect("the job");
        assert_eq!(fresh.finalizers(), [ej::FINALIZER]);
    }
}
