//! `sidecarterminator-controller` (gate `SidecarTerminator`, off by default as in OpenKruise v1.9.0):
//! stops the sidecar containers of a Pod that runs to completion once its main containers are done, so
//! that a Job's Pod can finish (`kruise_core::sidecarterminator`). It stops them with a
//! ContainerRecreateRequest (`sidecar-termination-<pod uid>`, forceRecreate, failurePolicy Ignore,
//! owned by the Pod) that the node's kruise-daemon executes; sidecars whose exit code is ignored are
//! stopped after the Pod was given its final phase and the `SidecarTerminated` condition.
//!
//! It reads the shared Pod cache to find candidates (restartPolicy Never or OnFailure) and reads a
//! candidate afresh from the apiserver (the cache keeps neither container env nor container states).
//! Pods on virtual kubelets (replacing a sidecar's image) are not handled: they are logged and left.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use kruise_api::containerrecreaterequest::{
    self as crr, ContainerRecreateRequest, ContainerRecreateRequestContainer,
    ContainerRecreateRequestSpec, ContainerRecreateRequestStrategy,
};
use kruise_core::sidecarterminator as decide;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::sync::mpsc;

use crate::cache::{CacheEvent, PodCache};
use crate::events::EventRecorder;

pub const CONTROLLER: &str = "sidecarterminator-controller";
const RETRY: Duration = Duration::from_secs(2);

/// Runs the controller until the future is dropped, reconciling up to `workers` Pods at once
/// (`--sidecarterminator-workers`, 3 as OpenKruise's).
pub async fn run(client: Client, pods: Arc<PodCache>, workers: u16) {
    let mut events = pods.subscribe("sidecarterminator");
    let (tx, mut rx) = mpsc::unbounded_channel::<(String, String)>();
    let recorder = Arc::new(crate::driver::recorder(client.clone(), CONTROLLER));
    pods.wait_synced().await;
    let watch_pods = pods.clone();
    let feed = tx.clone();
    tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            let CacheEvent::Pod(change) = event else {
                continue;
            };
            if change.deleted {
                continue;
            }
            let (namespace, name) = (change.key.0.clone(), change.key.1.clone());
            let candidate = watch_pods.get(&namespace, &name).is_some_and(|pod| {
                matches!(
                    pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()),
                    Some("Never" | "OnFailure")
                )
            });
            if candidate && feed.send((namespace, name)).is_err() {
                return;
            }
        }
    });
    tracing::info!(controller = CONTROLLER, "controller started");
    let mut queued: HashSet<(String, String)> = HashSet::new();
    while let Some(key) = rx.recv().await {
        queued.insert(key);
        while let Ok(more) = rx.try_recv() {
            queued.insert(more);
        }
        let batch = std::mem::take(&mut queued);
        futures::stream::iter(batch)
            .for_each_concurrent(usize::from(workers.max(1)), |(namespace, name)| {
                let (client, recorder, tx) = (&client, &recorder, &tx);
                async move {
                    if let Err(error) = reconcile(client, recorder, &namespace, &name).await {
                        tracing::warn!(controller = CONTROLLER, pod = %format!("{namespace}/{name}"), error = %format!("{error:#}"), "reconcile failed");
                        let tx = tx.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(RETRY).await;
                            let _ = tx.send((namespace, name));
                        });
                    }
                }
            })
            .await;
    }
}

async fn reconcile(
    client: &Client,
    recorder: &EventRecorder,
    namespace: &str,
    name: &str,
) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let Some(pod) = pods.get_opt(name).await? else {
        return Ok(());
    };
    if !decide::is_interesting(&pod) {
        return Ok(());
    }
    if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
        let nodes: Api<Node> = Api::all(client.clone());
        let virtual_kubelet = nodes.get_opt(node).await?.is_some_and(|n| {
            n.labels()
                .get(crr::LABEL_VIRTUAL_KUBELET)
                .map(String::as_str)
                == Some(crr::VIRTUAL_KUBELET_VALUE)
        });
        if virtual_kubelet {
            tracing::info!(pod = %format!("{namespace}/{name}"), "SidecarTerminator: Pods on virtual kubelets are not handled");
            return Ok(());
        }
    }
    let plan = decide::plan(&pod);
    stop(client, recorder, &pod, &plan.stop).await?;
    if let Some(phase) = plan.mark {
        tracing::info!(pod = %format!("{namespace}/{name}"), phase, "all main containers completed: terminating the job Pod");
        let patch = json!({"status": {
            "phase": phase,
            "conditions": [{
                "type": decide::CONDITION_SIDECAR_TERMINATED,
                "status": "True",
                "lastTransitionTime": Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
                "message": "Terminated by Sidecar Terminator",
            }],
        }});
        pods.patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await?;
    }
    stop(client, recorder, &pod, &plan.then_stop).await
}

/// Creates the Pod's ContainerRecreateRequest for `sidecars` unless it exists.
async fn stop(
    client: &Client,
    recorder: &EventRecorder,
    pod: &Pod,
    sidecars: &std::collections::BTreeSet<String>,
) -> anyhow::Result<()> {
    if sidecars.is_empty() {
        return Ok(());
    }
    let namespace = pod.namespace().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let name = decide::request_name(&uid);
    let api: Api<ContainerRecreateRequest> = Api::namespaced(client.clone(), &namespace);
    if api.get_opt(&name).await?.is_some() {
        return Ok(());
    }
    let mut request = ContainerRecreateRequest::new(
        &name,
        ContainerRecreateRequestSpec {
            pod_name: pod.name_any(),
            containers: sidecars
                .iter()
                .map(|n| ContainerRecreateRequestContainer {
                    name: n.clone(),
                    ..Default::default()
                })
                .collect(),
            strategy: Some(ContainerRecreateRequestStrategy {
                force_recreate: true,
                failure_policy: crr::FAILURE_POLICY_IGNORE.to_owned(),
                ..Default::default()
            }),
            ..Default::default()
        },
    );
    request.metadata.namespace = Some(namespace.clone());
    request.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "Pod".into(),
        name: pod.name_any(),
        uid: uid.clone(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]);
    match api.create(&PostParams::default(), &request).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => return Ok(()),
        Err(error) => return Err(error.into()),
    }
    let names: Vec<&String> = sidecars.iter().collect();
    let event = Event {
        type_: EventType::Normal,
        reason: "SidecarTerminator".into(),
        note: Some(format!(
            "Kruise SidecarTerminator is trying to terminate sidecar {names:?} using crr"
        )),
        action: "Terminate".into(),
        secondary: None,
    };
    let regarding = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(pod.name_any()),
        namespace: Some(namespace),
        uid: Some(uid),
        ..Default::default()
    };
    if let Err(error) = recorder.publish(&event, &regarding).await {
        tracing::debug!(%error, "could not record the SidecarTerminator event");
    }
    Ok(())
}
