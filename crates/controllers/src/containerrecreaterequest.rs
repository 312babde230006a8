//! The ContainerRecreateRequest controller (upstream `pkg/controller/containerrecreaterequest`), the
//! manager's half of a request (the node's kruise-daemon stops the containers):
//!
//! Observe: the request and its Pod (read from the apiserver: the shared cache does not keep container
//! IDs and start times). Decide: `kruise_core::containerrecreate::manager_step`. Act: complete a request
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
use kruise_core::containerrecreate::{self as decide, ManagerStep, NotReadyMessage};
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::Action;
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::sync::mpsc;

use crate::cache::PodChange;
use crate::driver::caches::Caches;
use crate::error::{Error, KubeContext, is_race};
use crate::metrics::Metrics;

/// The controller's name in metrics, logs and Events (upstream's).
pub const CONTROLLER: &str = "containerrecreaterequest-controller";

/// How soon a request is looked at again after a write raced another.
const RACE_RETRY: Duration = Duration::from_millis(500);
/// How often a Recreating request is looked at while nothing wakes it (its Pod's container statuses
/// are read from the apiserver).
const RECREATING_RESYNC: Duration = Duration::from_secs(3);

pub struct Context {
    client: Client,
    metrics: Arc<Metrics>,
}

impl crate::driver::Driven for Context {
    fn controller(&self) -> &'static str {
        CONTROLLER
    }

    fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}

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
    let ctx = Arc::new(Context { client, metrics });
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
    let api: Api<ContainerRecreateRequest> = Api::namespaced(ctx.client.clone(), &namespace);
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let pod = pods
        .get_opt(&request.spec.pod_name)
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
    api: &Api<ContainerRecreateRequest>,
    pods: &Api<Pod>,
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
    pods: &Api<Pod>,
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
