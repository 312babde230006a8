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
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::mpsc;

use crate::cache::{CacheEvent, PodCache};
use crate::driver::writes::{ApiWrites, LiveReads, Writer, Writes, get_live};
use crate::events::EventRecorder;

/// What a reconcile works with. A candidate Pod, its Node and its request are read live
/// ([`LiveReads`]): the Pod cache keeps neither container env nor container states.
struct Terminator {
    writes: Arc<dyn Writes>,
    live: Arc<dyn LiveReads>,
    recorder: EventRecorder,
}

pub const CONTROLLER: &str = "sidecarterminator-controller";
const RETRY: Duration = Duration::from_secs(2);

/// Runs the controller until the future is dropped, reconciling up to `workers` Pods at once
/// (`--sidecarterminator-workers`, 3 as OpenKruise's).
pub async fn run(client: Client, pods: Arc<PodCache>, workers: u16) {
    let mut events = pods.subscribe("sidecarterminator");
    let (tx, mut rx) = mpsc::unbounded_channel::<(String, String)>();
    let cluster = ApiWrites::new(client.clone());
    let terminator = Terminator {
        writes: cluster.clone(),
        live: cluster,
        recorder: crate::driver::recorder(client, CONTROLLER),
    };
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
                let (terminator, tx) = (&terminator, &tx);
                async move {
                    if let Err(error) = terminator.reconcile(&namespace, &name).await {
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

impl Terminator {
    async fn reconcile(&self, namespace: &str, name: &str) -> anyhow::Result<()> {
        let live = self.live.as_ref();
        let Some(pod) = get_live::<Pod>(live, Some(namespace), name).await? else {
            return Ok(());
        };
        if !decide::is_interesting(&pod) {
            return Ok(());
        }
        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            let virtual_kubelet = get_live::<Node>(live, None, node).await?.is_some_and(|n| {
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
        self.stop(&pod, &plan.stop).await?;
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
            Writer::<Pod>::namespaced(self.writes.clone(), namespace)
                .patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch))
                .await?;
        }
        self.stop(&pod, &plan.then_stop).await
    }

    /// Creates the Pod's ContainerRecreateRequest for `sidecars` unless it exists.
    async fn stop(
        &self,
        pod: &Pod,
        sidecars: &std::collections::BTreeSet<String>,
    ) -> anyhow::Result<()> {
        if sidecars.is_empty() {
            return Ok(());
        }
        let namespace = pod.namespace().unwrap_or_default();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let name = decide::request_name(&uid);
        let api = Writer::<ContainerRecreateRequest>::namespaced(self.writes.clone(), &namespace);
        let existing =
            get_live::<ContainerRecreateRequest>(self.live.as_ref(), Some(&namespace), &name);
        if existing.await?.is_some() {
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
        if let Err(error) = self.recorder.publish(&event, &regarding).await {
            tracing::debug!(%error, "could not record the SidecarTerminator event");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::driver::scripted;
    use crate::driver::writes::fake::{FakeCluster, Verb};

    fn terminator(cluster: &Arc<FakeCluster>) -> (Terminator, scripted::Log) {
        let (client, log) = scripted::client(Vec::new());
        let terminator = Terminator {
            writes: cluster.clone(),
            live: cluster.clone(),
            recorder: crate::driver::recorder(client, CONTROLLER),
        };
        (terminator, log)
    }

    /// Job Pod `p` on node `n`: `main` exited with `main_exit`, the sidecar (marked by env, with
    /// `sidecar_env` besides) still running.
    fn job_pod(main_exit: i32, sidecar_env: Value) -> Pod {
        let mut env = vec![json!({"name": decide::ENV_TERMINATE, "value": "true"})];
        if let Value::Array(more) = sidecar_env {
            env.extend(more);
        }
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "p-uid"},
            "spec": {"restartPolicy": "Never", "nodeName": "n", "containers": [
                {"name": "main", "image": "i"},
                {"name": "sidecar", "image": "s", "env": env},
            ]},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": "main", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                 "state": {"terminated": {"exitCode": main_exit}}},
                {"name": "sidecar", "image": "s", "imageID": "", "ready": true, "restartCount": 0,
                 "state": {"running": {}}},
            ]},
        }))
        .expect("a Pod")
    }

    fn node(labels: Value) -> Node {
        serde_json::from_value(json!({"metadata": {"name": "n", "labels": labels}}))
            .expect("a Node")
    }

    fn request(cluster: &FakeCluster) -> Option<ContainerRecreateRequest> {
        cluster.get(Some("ns"), &decide::request_name("p-uid"))
    }

    #[tokio::test]
    async fn a_finished_job_pod_gets_one_request_for_its_sidecars() {
        let cluster = FakeCluster::new();
        cluster.insert(&node(json!({})));
        cluster.insert(&job_pod(0, json!([])));
        let (terminator, log) = terminator(&cluster);
        terminator.reconcile("ns", "p").await.expect("reconciled");
        let made = request(&cluster).expect("a ContainerRecreateRequest");
        let names: Vec<_> = made
            .spec
            .containers
            .iter()
            .map(|c| c.name.clone())
            .collect();
        assert_eq!(names, ["sidecar"]);
        assert_eq!(made.spec.pod_name, "p");
        assert_eq!(
            made.owner_references().first().map(|o| o.uid.as_str()),
            Some("p-uid")
        );
        assert_eq!(log.events().len(), 1);
        // Again: the request exists, nothing more is written.
        terminator.reconcile("ns", "p").await.expect("reconciled");
        assert_eq!(cluster.done().len(), 1);
        assert_eq!(log.events().len(), 1);
    }

    #[tokio::test]
    async fn an_ignored_exit_code_marks_the_pod_before_its_sidecar_stops() {
        let cluster = FakeCluster::new();
        cluster.insert(&node(json!({})));
        let ignoring = json!([{"name": decide::ENV_IGNORE_EXIT_CODE, "value": "true"}]);
        cluster.insert(&job_pod(0, ignoring));
        let (terminator, _) = terminator(&cluster);
        terminator.reconcile("ns", "p").await.expect("reconciled");
        let verbs: Vec<_> = cluster.done().into_iter().map(|(v, _)| v).collect();
        assert_eq!(verbs, [Verb::PatchStatus, Verb::Create]);
        let pod: Pod = cluster.get(Some("ns"), "p").expect("the Pod");
        let status = pod.status.expect("a status");
        assert_eq!(status.phase.as_deref(), Some("Succeeded"));
        assert!(
            status
                .conditions
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == decide::CONDITION_SIDECAR_TERMINATED)
        );
    }

    /// Nothing is written for a Pod on a virtual kubelet, a Pod gone, or a request another
    /// worker created first (409 is no failure); a refused create fails the reconcile.
    #[tokio::test]
    async fn left_alone_or_failed_as_the_cluster_answers() {
        let cluster = FakeCluster::new();
        cluster.insert(&node(
            json!({crr::LABEL_VIRTUAL_KUBELET: crr::VIRTUAL_KUBELET_VALUE}),
        ));
        cluster.insert(&job_pod(0, json!([])));
        let (terminator, _) = terminator(&cluster);
        terminator.reconcile("ns", "p").await.expect("reconciled");
        terminator
            .reconcile("ns", "gone")
            .await
            .expect("reconciled");
        assert!(cluster.records().is_empty());

        cluster.insert(&node(json!({})));
        cluster.fail_next(Verb::Create, "", 409);
        terminator.reconcile("ns", "p").await.expect("a lost race");
        cluster.fail_next(Verb::Create, "", 422);
        assert!(terminator.reconcile("ns", "p").await.is_err());
        assert!(request(&cluster).is_none());
    }
}
