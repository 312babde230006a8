//! The ContainerRecreateRequest controller (upstream `pkg/controller/containerrecreaterequest`), the
//! manager's half of a request (the node's kruise-daemon stops the containers):
//!
//! Observe: the request and its Pod (read from the apiserver: the shared cache does not keep container
//! IDs and start times). Decide: `kruise_core::containerrecreaterequest::manager_step`. Act: complete a request
//! whose Pod has gone, whose daemon never answered, or whose `activeDeadlineSeconds` passed; while
//! Recreating, copy the recreated containers' statuses into the `sync-container-statuses` annotation
//! (how the daemon tells Succeeded) and, with `unreadyGracePeriodSeconds`, set the Pod not-ready
//! (`KruisePodReady`, when the Pod has that readiness gate) and stamp `unready-acquired`; once finished,
//! give the Pod its readiness back, remove the `active` label, and delete the request
//! `ttlSecondsAfterFinished` after its completion.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kruise_api::containerrecreaterequest::{self as crr, ContainerRecreateRequest};
use kruise_api::keys;
use kruise_core::containerrecreaterequest::{self as decide, ManagerStep, NotReadyMessage};
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::Action;
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::mpsc;

use crate::cache::PodChange;
use crate::driver::caches::Caches;
use crate::driver::writes::{ApiWrites, LiveReads, Writer, Writes, get_live};
use crate::error::{Error, KubeContext, is_race};
use crate::metrics::Metrics;

/// The controller's name in metrics, logs and Events (upstream's).
pub const CONTROLLER: &str = "containerrecreaterequest-controller";

/// How soon a request is looked at again after a write raced another.
const RACE_RETRY: Duration = Duration::from_millis(500);
/// How often a Recreating request is looked at while nothing wakes it (its Pod's container statuses
/// are read from the apiserver).
const RECREATING_RESYNC: Duration = Duration::from_secs(3);

/// The controller's context. Its Pod is read live ([`LiveReads`]): the shared Pod cache does not
/// keep container IDs and start times, which the status sync copies.
pub struct Context {
    writes: Arc<dyn Writes>,
    live: Arc<dyn LiveReads>,
    metrics: Arc<Metrics>,
}

crate::driver::driven!(Context, CONTROLLER);

/// Runs the controller until the future is dropped.
/// `workers`: concurrent reconciles (`--crr-workers`).
pub async fn run(client: Client, caches: Caches, metrics: Arc<Metrics>, workers: u16) {
    let watched = caches.shared::<ContainerRecreateRequest>();
    let controller = watched.controller();
    let requests = controller.store();
    let (wake_tx, wake_rx) = mpsc::unbounded_channel();
    crate::driver::wake::wake_on_pod_changes(
        caches.pods.subscribe("containerrecreaterequest"),
        requests,
        wake_tx,
        None,
        concerns,
    );
    let cluster = ApiWrites::new(client);
    let ctx = Arc::new(Context {
        writes: cluster.clone(),
        live: cluster,
        metrics,
    });
    let controller = controller.reconcile_on(crate::cache::receiver_stream(wake_rx));
    crate::driver::run(controller, workers.max(1), reconcile, ctx).await;
}

/// Whether a Pod change concerns a request of its namespace: an unfinished one for that Pod (by
/// the Pod's uid label).
fn concerns(request: &ContainerRecreateRequest, change: &PodChange) -> bool {
    !request.is_finished()
        && change.uid.as_deref().is_some_and(|uid| {
            request.labels().get(crr::LABEL_POD_UID).map(String::as_str) == Some(uid)
        })
}

fn raced<T>(
    result: Result<T, kube::Error>,
    what: impl FnOnce() -> String,
) -> Result<Action, Error> {
    match result {
        Ok(_) => Ok(Action::await_change()),
        Err(error) if is_race(&error) => Ok(Action::requeue(RACE_RETRY)),
        Err(source) => Err(source).context(what),
    }
}

async fn reconcile(
    request: Arc<ContainerRecreateRequest>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let request = request.as_ref();
    let namespace = request.namespace().unwrap_or_default();
    let name = request.name_any();
    let api = Writer::<ContainerRecreateRequest>::namespaced(ctx.writes.clone(), &namespace);
    let pods = Writer::<Pod>::namespaced(ctx.writes.clone(), &namespace);
    let pod = get_live::<Pod>(ctx.live.as_ref(), Some(&namespace), &request.spec.pod_name)
        .await
        .context(|| format!("reading Pod {namespace}/{}", request.spec.pod_name))?;
    let now = Timestamp::now();
    let step = decide::manager_step(request, pod.as_ref(), now);
    let message = NotReadyMessage::for_request(&namespace, &name);
    match step {
        ManagerStep::ReleaseNotReady => {
            if let Some(pod) = pod
                .as_ref()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                && let Some((status, text)) = decide::remove_not_ready(pod, &message)
            {
                write_readiness(&pods, pod, status, &text).await?;
            }
            let kept: Vec<String> = request
                .finalizers()
                .iter()
                .filter(|f| *f != crr::UNREADY_ACQUIRED)
                .cloned()
                .collect();
            let patch = json!({"metadata": {
                "finalizers": kept,
                "resourceVersion": request.resource_version(),
            }});
            raced(
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await,
                || format!("removing the finalizer of ContainerRecreateRequest {namespace}/{name}"),
            )
        }
        ManagerStep::Deactivate => {
            let patch = json!({"metadata": {"labels": {crr::LABEL_ACTIVE: null}}});
            raced(
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await,
                || {
                    format!(
                        "removing the active label of ContainerRecreateRequest {namespace}/{name}"
                    )
                },
            )
        }
        ManagerStep::Delete => {
            tracing::info!(request = %format!("{namespace}/{name}"), "deleting ContainerRecreateRequest for ttlSecondsAfterFinished");
            let params = DeleteParams {
                preconditions: request.metadata.uid.clone().map(|uid| Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            raced(api.delete(&name, &params).await, || {
                format!("deleting ContainerRecreateRequest {namespace}/{name} after its TTL")
            })
        }
        ManagerStep::Complete(reason) => {
            tracing::info!(request = %format!("{namespace}/{name}"), reason, "completed ContainerRecreateRequest as failure");
            let patch = json!({
                "metadata": {"resourceVersion": request.resource_version()},
                "status": {
                    "phase": crr::PHASE_COMPLETED,
                    "completionTime": now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
                    "message": reason,
                },
            });
            raced(
                api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await,
                || format!("completing ContainerRecreateRequest {namespace}/{name}"),
            )
        }
        ManagerStep::SyncStatuses(raw) => {
            let patch = json!({"metadata": {"annotations": {crr::ANNOTATION_SYNC_CONTAINER_STATUSES: raw}}});
            raced(
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await,
                || {
                    format!(
                        "syncing container statuses into ContainerRecreateRequest {namespace}/{name}"
                    )
                },
            )
        }
        ManagerStep::AcquireNotReady => {
            acquire_not_ready(&api, &pods, request, pod.as_ref(), &message, now).await
        }
        ManagerStep::Requeue(after) => {
            let after = if request.phase() == crr::PHASE_RECREATING {
                Some(after.map_or(RECREATING_RESYNC, |a| a.min(RECREATING_RESYNC)))
            } else {
                after
            };
            Ok(after.map_or_else(Action::await_change, |d| {
                Action::requeue(d.max(Duration::from_millis(100)))
            }))
        }
    }
}

/// Takes the Pod out of service before its containers are recreated (`unreadyGracePeriodSeconds`):
/// the request's finalizer first, then `KruisePodReady` False, then the stamp the daemon waits for.
async fn acquire_not_ready(
    api: &Writer<ContainerRecreateRequest>,
    pods: &Writer<Pod>,
    request: &ContainerRecreateRequest,
    pod: Option<&Pod>,
    message: &NotReadyMessage,
    now: Timestamp,
) -> Result<Action, Error> {
    let namespace = request.namespace().unwrap_or_default();
    let name = request.name_any();
    if let Some(pod) = pod {
        if decide::has_readiness_gate(pod) {
            if !request
                .finalizers()
                .iter()
                .any(|f| f == crr::UNREADY_ACQUIRED)
            {
                let mut all = request.finalizers().to_vec();
                all.push(crr::UNREADY_ACQUIRED.to_owned());
                let patch = json!({"metadata": {
                    "finalizers": all,
                    "resourceVersion": request.resource_version(),
                }});
                return raced(
                    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await,
                    || {
                        format!(
                            "adding the finalizer of ContainerRecreateRequest {namespace}/{name}"
                        )
                    },
                );
            }
            if let Some((status, text)) = decide::add_not_ready(pod, message) {
                write_readiness(pods, pod, status, &text).await?;
            }
        } else {
            tracing::info!(
                request = %format!("{namespace}/{name}"),
                "could not set the Pod not-ready: it has no {} readiness gate",
                keys::CONDITION_KRUISE_POD_READY
            );
        }
    }
    let stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let patch = json!({"metadata": {"annotations": {crr::UNREADY_ACQUIRED: stamp}}});
    raced(
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await,
        || format!("stamping unready-acquired on ContainerRecreateRequest {namespace}/{name}"),
    )
}

/// Sets the Pod's `KruisePodReady` condition (and `Ready` False with it when it goes False), over the
/// Pod's resourceVersion.
async fn write_readiness(
    pods: &Writer<Pod>,
    pod: &Pod,
    status: &str,
    message: &str,
) -> Result<(), Error> {
    let now = Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let mut conditions = vec![json!({
        "type": keys::CONDITION_KRUISE_POD_READY,
        "status": status,
        "message": message,
        "lastTransitionTime": now,
    })];
    if status == "False" {
        conditions.push(json!({
            "type": "Ready",
            "status": "False",
            "lastTransitionTime": now,
        }));
    }
    let patch = json!({
        "metadata": {"resourceVersion": pod.resource_version()},
        "status": {"conditions": conditions},
    });
    let name = pod.name_any();
    match pods
        .patch_status(&name, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(error) if is_race(&error) => Err(Error::Kube {
            context: format!("Pod {name} changed while its readiness was written; retrying"),
            source: error,
        }),
        Err(source) => Err(source).context(|| format!("writing the readiness of Pod {name}")),
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::controller::Action;
    use serde_json::Value;

    use super::*;
    use crate::driver::writes::fake::{FakeCluster, Verb};

    fn context(cluster: &Arc<FakeCluster>) -> Arc<Context> {
        let mut registry = prometheus_client::registry::Registry::default();
        Arc::new(Context {
            writes: cluster.clone(),
            live: cluster.clone(),
            metrics: Metrics::register(&mut registry),
        })
    }

    /// Request `r` for Pod `p` (uid `p-uid`), with `extra` merged in.
    fn request(extra: Value) -> ContainerRecreateRequest {
        let mut request = json!({
            "apiVersion": "apps.kruise.io/v1alpha1",
            "kind": "ContainerRecreateRequest",
            "metadata": {"name": "r", "namespace": "ns", "uid": "r-uid",
                         "creationTimestamp": "2026-01-01T00:00:00Z",
                         "labels": {crr::LABEL_POD_UID: "p-uid"}},
            "spec": {"podName": "p", "containers": [{"name": "c"}]},
        });
        json_patch::merge(&mut request, &extra);
        serde_json::from_value(request).expect("a ContainerRecreateRequest")
    }

    fn pod(extra: Value) -> Pod {
        let mut pod = json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "p-uid"},
            "spec": {"containers": [{"name": "c", "image": "i"}],
                     "readinessGates": [{"conditionType": keys::CONDITION_KRUISE_POD_READY}]},
            "status": {"phase": "Running"},
        });
        json_patch::merge(&mut pod, &extra);
        serde_json::from_value(pod).expect("a Pod")
    }

    fn stored(cluster: &FakeCluster) -> Option<ContainerRecreateRequest> {
        cluster.get(Some("ns"), "r")
    }

    fn finished(extra: Value) -> ContainerRecreateRequest {
        let mut base = json!({"status": {"phase": crr::PHASE_COMPLETED,
                                         "completionTime": "2026-01-01T00:00:00Z"}});
        json_patch::merge(&mut base, &extra);
        request(base)
    }

    #[tokio::test]
    async fn a_request_whose_pod_is_gone_is_completed_over_its_version() {
        let cluster = FakeCluster::new();
        let cached = cluster.insert(&request(json!({})));
        let action = reconcile(Arc::new(cached), context(&cluster))
            .await
            .expect("reconciled");
        assert_eq!(action, Action::await_change());
        let status = stored(&cluster).and_then(|r| r.status).expect("a status");
        assert_eq!(
            (status.phase.as_str(), status.message.as_str()),
            (crr::PHASE_COMPLETED, "pod has gone")
        );
        assert!(status.completion_time.is_some());
    }

    /// What each refusal of the completing write makes of the reconcile: a moved or deleted
    /// request is decided again soon (no failure), a refused write fails it. The request as the
    /// cluster holds it is never completed from a stale copy.
    #[tokio::test]
    async fn a_refused_write_is_a_race_or_a_failure_by_its_code() {
        // (code of the refusal, the reconcile's outcome: Some(action) or None for an error)
        let cases = [
            (409, Some(Action::requeue(RACE_RETRY))),
            (404, Some(Action::requeue(RACE_RETRY))),
            (422, None),
            (500, None),
        ];
        for (code, expected) in cases {
            let cluster = FakeCluster::new();
            let cached = cluster.insert(&request(json!({})));
            cluster.fail_next(Verb::PatchStatus, "r", code);
            let outcome = reconcile(Arc::new(cached), context(&cluster)).await.ok();
            assert_eq!(outcome, expected, "refused with {code}");
            assert!(
                stored(&cluster).is_some_and(|r| r.status.is_none()),
                "refused with {code}: nothing written"
            );
        }
        // A copy older than the cluster's: the resourceVersion precondition refuses it.
        let cluster = FakeCluster::new();
        let cached = cluster.insert(&request(json!({})));
        cluster.touch::<ContainerRecreateRequest>(Some("ns"), "r");
        let action = reconcile(Arc::new(cached), context(&cluster)).await;
        assert_eq!(action.ok(), Some(Action::requeue(RACE_RETRY)));
        assert!(stored(&cluster).is_some_and(|r| r.status.is_none()));
    }

    #[tokio::test]
    async fn a_finished_request_is_deleted_after_its_ttl_only_if_it_is_still_the_same_one() {
        let cluster = FakeCluster::new();
        let cached = cluster.insert(&finished(json!({"spec": {"ttlSecondsAfterFinished": 1}})));
        reconcile(Arc::new(cached.clone()), context(&cluster))
            .await
            .expect("reconciled");
        assert!(stored(&cluster).is_none(), "deleted after its TTL");
        // Re-created under the same name since it was read: the uid precondition keeps it.
        let again = finished(json!({"metadata": {"uid": "another"},
                                    "spec": {"ttlSecondsAfterFinished": 1}}));
        cluster.insert(&again);
        let action = reconcile(Arc::new(cached), context(&cluster)).await;
        assert_eq!(action.ok(), Some(Action::requeue(RACE_RETRY)));
        assert_eq!(
            stored(&cluster).and_then(|r| r.metadata.uid).as_deref(),
            Some("another")
        );
    }

    #[tokio::test]
    async fn a_finished_request_gives_the_pod_its_readiness_back_then_its_finalizer() {
        let cluster = FakeCluster::new();
        let message =
            serde_json::to_string(&[NotReadyMessage::for_request("ns", "r")]).expect("a message");
        cluster.insert(&pod(json!({"status": {"conditions": [
            {"type": keys::CONDITION_KRUISE_POD_READY, "status": "False", "message": message},
        ]}})));
        let cached = cluster.insert(&finished(json!({"metadata": {
            "finalizers": [crr::UNREADY_ACQUIRED],
            "labels": {crr::LABEL_ACTIVE: "true"},
        }})));
        reconcile(Arc::new(cached), context(&cluster))
            .await
            .expect("reconciled");
        let pod: Pod = cluster.get(Some("ns"), "p").expect("the Pod");
        let ready = pod
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == keys::CONDITION_KRUISE_POD_READY)
            .expect("KruisePodReady");
        assert_eq!(ready.status, "True");
        let request = stored(&cluster).expect("the request");
        assert!(request.finalizers().is_empty());
        // The next step, on the request as it now is, drops the active label.
        reconcile(Arc::new(request), context(&cluster))
            .await
            .expect("reconciled");
        let request = stored(&cluster).expect("the request");
        assert!(!request.labels().contains_key(crr::LABEL_ACTIVE));
        assert_eq!(
            cluster.done().iter().map(|(v, _)| *v).collect::<Vec<_>>(),
            [Verb::PatchStatus, Verb::Patch, Verb::Patch]
        );
    }

    #[tokio::test]
    async fn a_recreating_request_takes_its_pod_out_of_service_first() {
        let cluster = FakeCluster::new();
        cluster.insert(&pod(json!({})));
        let recreating = request(json!({
            "metadata": {"creationTimestamp": k8s_openapi::jiff::Timestamp::now()
                             .strftime("%Y-%m-%dT%H:%M:%SZ").to_string()},
            "spec": {"strategy": {"unreadyGracePeriodSeconds": 5}},
            "status": {"phase": crr::PHASE_RECREATING},
        }));
        let cached = cluster.insert(&recreating);
        // A sync of the container statuses comes first, then the finalizer, then the Pod.
        let mut cached = cached;
        for _ in 0..4 {
            reconcile(Arc::new(cached), context(&cluster))
                .await
                .expect("reconciled");
            cached = stored(&cluster).expect("the request");
        }
        assert!(
            cached
                .finalizers()
                .iter()
                .any(|f| f == crr::UNREADY_ACQUIRED)
        );
        assert!(cached.annotations().contains_key(crr::UNREADY_ACQUIRED));
        let pod: Pod = cluster.get(Some("ns"), "p").expect("the Pod");
        let conditions = pod.status.and_then(|s| s.conditions).unwrap_or_default();
        let status_of = |t: &str| {
            conditions
                .iter()
                .find(|c| c.type_ == t)
                .map(|c| c.status.clone())
        };
        assert_eq!(
            status_of(keys::CONDITION_KRUISE_POD_READY).as_deref(),
            Some("False")
        );
        assert_eq!(status_of("Ready").as_deref(), Some("False"));
    }
}
