//! The ContainerRecreateRequest executor: watches the active requests of its own node
//! (`crr.apps.kruise.io/node-name=<node>,crr.apps.kruise.io/active=true`), takes the requests of one
//! Pod one at a time, runs each container's preStop hook and stops it through the CRI, and records the
//! per-container states and the request's phase. The kubelet starts the stopped containers again; the
//! manager tells the daemon when a new container is ready (the `sync-container-statuses` annotation).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use kruise_api::containerrecreaterequest::{
    self as crr, ContainerRecreateRequest, ContainerRecreateState,
};
use kruise_core::containerrecreaterequest::{self as decide, DaemonStep, ObservedContainer};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::cri::Runtime;
use crate::hooks;
use crate::metrics::Metrics;
use crate::queue::{Outcome, Queue};

/// How long a request read from the cache may lag behind the daemon's own last write before the daemon
/// stops waiting for it.
const MAX_EXPECTATION_WAIT: Duration = Duration::from_secs(30);

/// Whether a status write holds only over the resourceVersion read.
#[derive(Clone, Copy)]
enum Guard {
    ResourceVersion,
    None,
}

pub struct Executor {
    client: Client,
    runtime: Runtime,
    store: Store<ContainerRecreateRequest>,
    /// uid -> (resourceVersion the daemon wrote, when).
    expectations: Mutex<HashMap<String, (u64, Instant)>>,
    metrics: Arc<Metrics>,
}

fn key_of(request: &ContainerRecreateRequest) -> String {
    format!(
        "{}/{}",
        request.namespace().unwrap_or_default(),
        request.spec.pod_name
    )
}

fn resource_version(request: &ContainerRecreateRequest) -> u64 {
    request
        .resource_version()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

impl Executor {
    /// Starts the watch of the node's active requests and the queue; returns the executor (for its
    /// readiness) and the future that runs it.
    pub fn start(
        client: Client,
        runtime: Runtime,
        node: &str,
        metrics: Arc<Metrics>,
    ) -> (Arc<Self>, impl Future<Output = ()> + Send + 'static) {
        let (store, writer) = reflector::store();
        let executor = Arc::new(Self {
            client: client.clone(),
            runtime,
            store,
            expectations: Mutex::new(HashMap::new()),
            metrics,
        });
        let worker = executor.clone();
        let (queue, driver) = Queue::start(move |key| {
            let worker = worker.clone();
            async move { worker.sync(&key).await }
        });
        let selector = format!("{}={node},{}=true", crr::LABEL_NODE_NAME, crr::LABEL_ACTIVE);
        let api: Api<ContainerRecreateRequest> = Api::all(client);
        let watched = executor.clone();
        let run = async move {
            let events = watcher(api, watcher::Config::default().labels(&selector))
                .default_backoff()
                .reflect(writer)
                .applied_objects();
            let drive_watch = async move {
                futures::pin_mut!(events);
                while let Some(event) = events.next().await {
                    match event {
                        Ok(request) => {
                            if request.is_finished() {
                                watched.forget(&request);
                            } else {
                                queue.add(key_of(&request));
                            }
                        }
                        Err(error) => tracing::warn!(%error, "watch of ContainerRecreateRequests"),
                    }
                }
            };
            tokio::join!(drive_watch, driver);
        };
        (executor, run)
    }

    /// Whether the watch has listed the node's requests once.
    pub fn synced(&self) -> bool {
        futures::FutureExt::now_or_never(self.store.wait_until_ready()).is_some()
    }

    fn forget(&self, request: &ContainerRecreateRequest) {
        if let (Ok(mut map), Some(uid)) = (self.expectations.lock(), request.uid()) {
            map.remove(&uid);
        }
    }

    fn expect(&self, written: &ContainerRecreateRequest) {
        if let (Ok(mut map), Some(uid)) = (self.expectations.lock(), written.uid()) {
            map.insert(uid, (resource_version(written), Instant::now()));
        }
    }

    /// Whether the cached `request` is at least as new as the daemon's own last write of it.
    fn observed_own_write(&self, request: &ContainerRecreateRequest) -> bool {
        let Ok(mut map) = self.expectations.lock() else {
            return true;
        };
        let Some(uid) = request.uid() else {
            return true;
        };
        match map.get(&uid) {
            Some((rv, at)) if resource_version(request) < *rv => {
                if at.elapsed() < MAX_EXPECTATION_WAIT {
                    return false;
                }
                map.remove(&uid);
                true
            }
            Some(_) => {
                map.remove(&uid);
                true
            }
            None => true,
        }
    }

    async fn sync(&self, key: &str) -> Outcome {
        let started = Instant::now();
        match self.sync_pod(key).await {
            Ok(outcome) => {
                self.metrics.sync("ok", started.elapsed());
                outcome
            }
            Err(error) => {
                self.metrics.sync("error", started.elapsed());
                tracing::warn!(
                    key,
                    error = format!("{error:#}"),
                    "ContainerRecreateRequest sync failed"
                );
                Outcome::Failed
            }
        }
    }

    async fn sync_pod(&self, key: &str) -> anyhow::Result<Outcome> {
        let Some((namespace, pod_name)) = key.split_once('/') else {
            return Ok(Outcome::Done);
        };
        let mut requests: Vec<Arc<ContainerRecreateRequest>> = self
            .store
            .state()
            .into_iter()
            .filter(|r| r.namespace().as_deref() == Some(namespace) && r.spec.pod_name == pod_name)
            .collect();
        requests.sort_by(|a, b| {
            (decide::phase_weight(a.phase()), a.creation_timestamp())
                .cmp(&(decide::phase_weight(b.phase()), b.creation_timestamp()))
        });
        let mut picked = None;
        for request in requests {
            if request.is_finished() {
                self.forget(&request);
                continue;
            }
            if !self.observed_own_write(&request) {
                // The cache has not caught up with this daemon's last write: its watch event comes.
                break;
            }
            if picked.is_none() {
                picked = Some(request);
            } else if request.phase().is_empty() {
                self.write_status(&request, json!({"phase": crr::PHASE_PENDING}))
                    .await?;
            }
        }
        let Some(request) = picked else {
            return Ok(Outcome::Done);
        };
        if request.phase() != crr::PHASE_RECREATING {
            self.write_status(&request, json!({"phase": crr::PHASE_RECREATING}))
                .await?;
            return Ok(Outcome::Done);
        }
        if let Some(grace) = request.strategy().unready_grace_period_seconds {
            let Some(acquired) = request
                .annotation(crr::UNREADY_ACQUIRED)
                .filter(|a| !a.is_empty())
            else {
                tracing::info!(
                    key,
                    name = request.name_any(),
                    "waiting for the Pod to be made not-ready"
                );
                return Ok(Outcome::Done);
            };
            match decide::unready_wait(acquired, grace, Timestamp::now()) {
                Err(message) => {
                    self.complete(&request, &message).await?;
                    return Ok(Outcome::Done);
                }
                Ok(wait) if !wait.is_zero() => {
                    return Ok(Outcome::After(wait + Duration::from_millis(100)));
                }
                Ok(_) => {}
            }
        }
        self.manage(&request).await
    }

    async fn manage(&self, request: &ContainerRecreateRequest) -> anyhow::Result<Outcome> {
        if let Err(message) = self.runtime_matches(request) {
            self.complete(request, &message).await?;
            return Ok(Outcome::Done);
        }
        let pod_uid = request
            .labels()
            .get(crr::LABEL_POD_UID)
            .cloned()
            .unwrap_or_default();
        let observed = self.runtime.pod_containers(&pod_uid).await?;
        let states = decide::current_states(request, &observed, Timestamp::now());
        match decide::daemon_step(request, states, &observed) {
            DaemonStep::Patch(states) => {
                self.write_states(request, &states).await?;
                Ok(Outcome::Done)
            }
            DaemonStep::Complete => {
                self.complete(request, "").await?;
                Ok(Outcome::Done)
            }
            DaemonStep::Wait(after) => Ok(after.map_or(Outcome::Done, Outcome::After)),
            DaemonStep::Kill { index, mut states } => {
                let name = states[index].name.clone();
                match self.kill(request, &name, &observed, &pod_uid).await {
                    Ok(()) => {
                        self.metrics.recreated();
                        states[index].phase = crr::PHASE_RECREATING.to_owned();
                        states[index].is_killed = true;
                    }
                    Err(error) => {
                        tracing::warn!(
                            container = name,
                            request = request.name_any(),
                            error = format!("{error:#}"),
                            "failed to stop container"
                        );
                        states[index].phase = crr::PHASE_FAILED.to_owned();
                        states[index].message = format!("kill container error: {error:#}");
                    }
                }
                // Written whatever changed meanwhile (the manager's annotations): the stop happened, and a
                // lost write could make a forceRecreate request stop the new container again.
                self.write_status_as(
                    request,
                    json!({"containerRecreateStates": states}),
                    Guard::None,
                )
                .await?;
                Ok(Outcome::Done)
            }
        }
    }

    /// Every container ID of the request names the runtime this daemon talks to.
    fn runtime_matches(&self, request: &ContainerRecreateRequest) -> Result<(), String> {
        for c in &request.spec.containers {
            let id = c
                .status_context
                .as_ref()
                .map(|s| s.container_id.as_str())
                .unwrap_or_default();
            if id.is_empty() {
                return Err(format!(
                    "failed to find runtime service: no statusContext or empty containerID in {} container",
                    c.name
                ));
            }
            let Some((kind, _)) = id.split_once("://") else {
                return Err(format!(
                    "failed to find runtime service: failed to parse containerID {id} in {} container",
                    c.name
                ));
            };
            if kind != self.runtime.name {
                return Err(format!(
                    "failed to find runtime service: not found runtime service for {kind} in daemon"
                ));
            }
        }
        Ok(())
    }

    /// Runs the container's preStop hook (within the grace period) and stops it with what is left of
    /// the grace period (at least 2 seconds, as the kubelet).
    async fn kill(
        &self,
        request: &ContainerRecreateRequest,
        name: &str,
        observed: &BTreeMap<String, ObservedContainer>,
        pod_uid: &str,
    ) -> anyhow::Result<()> {
        let Some(container) = observed.get(name) else {
            anyhow::bail!("container {name} not found on the node");
        };
        let raw_id = container
            .id
            .split_once("://")
            .map_or(container.id.as_str(), |(_, id)| id);
        let grace = Duration::from_secs(
            request
                .strategy()
                .termination_grace_period_seconds
                .unwrap_or(crr::DEFAULT_TERMINATION_GRACE_SECONDS)
                .max(0)
                .unsigned_abs(),
        );
        let started = Instant::now();
        let spec = request.spec.containers.iter().find(|c| c.name == name);
        if let Some(pre_stop) = spec.and_then(|c| c.pre_stop.as_ref())
            && !grace.is_zero()
        {
            let ports = spec.and_then(|c| c.ports.clone()).unwrap_or_default();
            let outcome =
                hooks::run_pre_stop(&self.runtime, raw_id, pod_uid, pre_stop, &ports, grace).await;
            if let Err(error) = outcome {
                // The kubelet stops a container whose preStop failed all the same.
                tracing::warn!(
                    container = name,
                    error = format!("{error:#}"),
                    "preStop hook failed"
                );
            }
        }
        let left = grace
            .saturating_sub(started.elapsed())
            .max(Duration::from_secs(2));
        tracing::info!(
            container = name,
            request = request.name_any(),
            namespace = request.namespace().unwrap_or_default(),
            "Stopping container {name} by ContainerRecreateRequest {}",
            request.name_any()
        );
        self.runtime.stop_container(raw_id, left).await?;
        Ok(())
    }

    async fn write_states(
        &self,
        request: &ContainerRecreateRequest,
        states: &[ContainerRecreateState],
    ) -> anyhow::Result<()> {
        self.write_status(request, json!({"containerRecreateStates": states}))
            .await
    }

    async fn complete(
        &self,
        request: &ContainerRecreateRequest,
        message: &str,
    ) -> anyhow::Result<()> {
        let mut status = json!({
            "phase": crr::PHASE_COMPLETED,
            "completionTime": Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        });
        if !message.is_empty() {
            status["message"] = json!(message);
        }
        self.write_status(request, status).await
    }

    /// A merge patch of the status, valid only over the resourceVersion the decision was made on.
    async fn write_status(
        &self,
        request: &ContainerRecreateRequest,
        status: serde_json::Value,
    ) -> anyhow::Result<()> {
        self.write_status_as(request, status, Guard::ResourceVersion)
            .await
    }

    async fn write_status_as(
        &self,
        request: &ContainerRecreateRequest,
        status: serde_json::Value,
        guard: Guard,
    ) -> anyhow::Result<()> {
        let namespace = request.namespace().unwrap_or_default();
        let api: Api<ContainerRecreateRequest> = Api::namespaced(self.client.clone(), &namespace);
        let patch = match guard {
            Guard::ResourceVersion => json!({
                "metadata": {"resourceVersion": request.resource_version()},
                "status": status,
            }),
            Guard::None => json!({"status": status}),
        };
        let written = api
            .patch_status(
                &request.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map_err(|e| {
                anyhow::anyhow!("patch status of {namespace}/{}: {e}", request.name_any())
            })?;
        self.expect(&written);
        Ok(())
    }
}
