//! The container-meta reporter (upstream `pkg/daemon/containermeta`, gate `DaemonWatchingPod`): watches
//! the Pods of its own node (`spec.nodeName=<node>`), and for each Pod of a Kruise workload writes the
//! `apps.kruise.io/runtime-containers-meta` annotation — per container: its runtime ID, restart
//! count, the kubelet's spec hash and (gate `InPlaceUpdateEnvFromMetadata`) the hash of the env vars
//! it reads from Pod labels/annotations, as the running process has them (`env` run in it).
//!
//! While a Pod is updated in place (`InPlaceUpdateReady` False), a container whose reported env hash no
//! longer matches the Pod's metadata is restarted: its preStop hook is run and it is stopped through
//! the CRI; the kubelet starts it again with the new values. The manager's in-place engine waits for
//! the report to show the new container. The decisions are `kruise_core::inplace::envmeta`'s.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kruise_api::containerrecreaterequest::ProbeHandler;
use kruise_api::keys;
use kruise_core::inplace::envmeta::{self, RuntimeContainer, RuntimeContainerMetaSet};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use crate::cri::{Runtime, api};
use crate::hooks;
use crate::metrics::Metrics;
use crate::queue::{Outcome, Queue};

/// How long a Pod read from the watch may lag behind the reporter's own last write before it stops
/// waiting for it (upstream `maxExpectationWaitDuration`).
const MAX_EXPECTATION_WAIT: Duration = Duration::from_secs(30);
/// Upstream's timeout of the `env` exec.
const ENV_EXEC_TIMEOUT: Duration = Duration::from_secs(3);
/// A Pod event is handled after this long, so that a burst of status writes is one sync (upstream).
const REPORT_DELAY: Duration = Duration::from_secs(1);
/// The kubelet's minimum grace period when it stops a container.
const MIN_GRACE: Duration = Duration::from_secs(2);
/// The kubelet's container annotation holding its spec hash (hex).
const ANNOTATION_CONTAINER_HASH: &str = "io.kubernetes.container.hash";
const ANNOTATION_RESTART_COUNT: &str = "io.kubernetes.container.restartCount";
const LABEL_POD_UID: &str = "io.kubernetes.pod.uid";

/// What the reporter shares with its restarter.
struct Shared {
    client: Client,
    runtime: Runtime,
    env_gate: bool,
    /// The node's Pods, by `namespace/name`, as last seen on the watch.
    pods: Mutex<HashMap<String, Arc<Pod>>>,
    /// `namespace/name` → (resourceVersion the reporter wrote, when).
    expectations: Mutex<HashMap<String, (u64, Instant)>>,
    recorder: Recorder,
    metrics: Arc<Metrics>,
    synced: AtomicBool,
}

pub struct ContainerMeta {
    shared: Arc<Shared>,
}

fn key_of(pod: &Pod) -> String {
    format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
}

fn resource_version(pod: &Pod) -> u64 {
    pod.resource_version()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

impl ContainerMeta {
    /// Starts the watch of the node's Pods, the report queue and the restart queue; returns the
    /// reporter (for its readiness) and the future that runs it.
    pub fn start(
        client: Client,
        runtime: Runtime,
        node: &str,
        env_gate: bool,
        metrics: Arc<Metrics>,
    ) -> (Arc<Self>, impl Future<Output = ()> + Send + 'static) {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: "kruise-daemon-containermeta".into(),
                instance: Some(node.to_owned()),
            },
        );
        let shared = Arc::new(Shared {
            client: client.clone(),
            runtime,
            env_gate,
            pods: Mutex::new(HashMap::new()),
            expectations: Mutex::new(HashMap::new()),
            recorder,
            metrics,
            synced: AtomicBool::new(false),
        });
        let restarter = shared.clone();
        let (restarts, drive_restarts) = Queue::start(move |key| {
            let shared = restarter.clone();
            async move { shared.restart(&key).await }
        });
        let reporter = shared.clone();
        let (reports, drive_reports) = Queue::start(move |key| {
            let shared = reporter.clone();
            let restarts = restarts.clone();
            async move { shared.sync(&key, &restarts).await }
        });
        let api: Api<Pod> = Api::all(client);
        let config = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
        let watched = shared.clone();
        let run = async move {
            let events = watcher(api, config).default_backoff();
            let drive_watch = async move {
                futures::pin_mut!(events);
                // Pods listed before the watch was ready the first time are not reported unless
                // already reported (upstream: no burst of writes when the daemon starts).
                let mut initial = true;
                while let Some(event) = events.next().await {
                    match event {
                        Ok(watcher::Event::Init) => {}
                        Ok(watcher::Event::InitApply(pod)) => {
                            watched.observe(pod, initial, &reports);
                        }
                        Ok(watcher::Event::InitDone) => {
                            initial = false;
                            watched.synced.store(true, Ordering::Relaxed);
                        }
                        Ok(watcher::Event::Apply(pod)) => watched.observe(pod, false, &reports),
                        Ok(watcher::Event::Delete(pod)) => watched.forget(&pod),
                        Err(error) => tracing::warn!(%error, "watch of the node's Pods"),
                    }
                }
            };
            tokio::join!(drive_watch, drive_reports, drive_restarts);
        };
        (Arc::new(Self { shared }), run)
    }

    /// Whether the watch has listed the node's Pods once.
    pub fn synced(&self) -> bool {
        self.shared.synced.load(Ordering::Relaxed)
    }
}

impl Shared {
    fn observe(&self, mut pod: Pod, initial: bool, reports: &Queue) {
        pod.metadata.managed_fields = None;
        let key = key_of(&pod);
        let pod = Arc::new(pod);
        let old = match self.pods.lock() {
            Ok(mut pods) => pods.insert(key.clone(), pod.clone()),
            Err(_) => return,
        };
        let unreported = envmeta::read_meta_set(&pod).is_none();
        if initial && old.is_none() && unreported {
            return;
        }
        let live = pod.metadata.deletion_timestamp.is_none()
            && pod
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .is_some_and(|s| !s.is_empty());
        if live && envmeta::needs_report(old.as_deref(), &pod, self.env_gate) {
            reports.add_after(key, REPORT_DELAY);
        }
    }

    fn forget(&self, pod: &Pod) {
        let key = key_of(pod);
        if let Ok(mut pods) = self.pods.lock() {
            pods.remove(&key);
        }
        if let Ok(mut expectations) = self.expectations.lock() {
            expectations.remove(&key);
        }
    }

    fn pod(&self, key: &str) -> Option<Arc<Pod>> {
        self.pods.lock().ok().and_then(|p| p.get(key).cloned())
    }

    /// Whether the watched Pod is at least as new as the reporter's own last write of it.
    fn observed_own_write(&self, key: &str, pod: &Pod) -> bool {
        let Ok(mut map) = self.expectations.lock() else {
            return true;
        };
        match map.get(key) {
            Some((rv, at))
                if resource_version(pod) < *rv && at.elapsed() < MAX_EXPECTATION_WAIT =>
            {
                false
            }
            Some(_) => {
                map.remove(key);
                true
            }
            None => true,
        }
    }

    async fn sync(&self, key: &str, restarts: &Queue) -> Outcome {
        match self.sync_pod(key, restarts).await {
            Ok(outcome) => {
                self.metrics.containermeta_sync("ok");
                outcome
            }
            Err(error) => {
                self.metrics.containermeta_sync("error");
                tracing::warn!(
                    key,
                    error = format!("{error:#}"),
                    "container meta sync failed"
                );
                Outcome::Failed
            }
        }
    }

    async fn sync_pod(&self, key: &str, restarts: &Queue) -> anyhow::Result<Outcome> {
        let Some(pod) = self.pod(key) else {
            return Ok(Outcome::Done);
        };
        let statuses = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_deref())
            .unwrap_or(&[]);
        if pod.metadata.deletion_timestamp.is_some() || statuses.is_empty() {
            return Ok(Outcome::Done);
        }
        if !self.observed_own_write(key, &pod) {
            // The watch has not caught up with the last report: its event comes.
            return Ok(Outcome::Done);
        }
        let Some(existing) = statuses
            .iter()
            .filter_map(|s| s.container_id.as_deref())
            .find(|id| !id.is_empty())
        else {
            return Ok(Outcome::Done);
        };
        match existing.split_once("://") {
            Some((kind, _)) if kind == self.runtime.name => {}
            _ => {
                tracing::info!(
                    key,
                    container = existing,
                    runtime = self.runtime.name,
                    "not a container of this runtime"
                );
                return Ok(Outcome::Done);
            }
        }
        let uid = pod.uid().unwrap_or_default();
        let runtime = self.runtime_containers(&uid).await?;
        let old = match envmeta::read_meta_set(&pod) {
            Some(Ok(set)) => Some(set),
            Some(Err(error)) => {
                tracing::warn!(key, %error, "unreadable runtime-containers-meta; reporting anew");
                None
            }
            None => None,
        };
        let (mut set, to_hash) =
            envmeta::next_meta_set(&pod, &runtime, old.as_ref(), self.env_gate);
        let mut outcome = Outcome::Done;
        for name in to_hash {
            match self.env_hash(&pod, &runtime, &name).await {
                Ok(hash) => {
                    if let Some(meta) = set.containers.iter_mut().find(|m| m.name == name) {
                        meta.hashes.extracted_env_from_metadata_hash = hash;
                    }
                }
                Err(error) => {
                    tracing::warn!(
                        key,
                        container = name,
                        error = format!("{error:#}"),
                        "failed to hash the container's env"
                    );
                    outcome = Outcome::After(Duration::from_secs(3));
                }
            }
        }
        if self.env_gate {
            for id in envmeta::containers_to_restart(&pod, &set) {
                tracing::info!(
                    key,
                    container = id,
                    "restarting the container: its env from metadata changed"
                );
                restarts.add(format!("{key}/{id}"));
            }
        }
        if old.as_ref() != Some(&set) {
            self.report(key, &pod, &set).await?;
        }
        Ok(outcome)
    }

    /// The newest container of each name of the Pod, as the runtime shows it.
    async fn runtime_containers(&self, pod_uid: &str) -> anyhow::Result<Vec<RuntimeContainer>> {
        let listed = self
            .runtime
            .service()
            .list_containers(api::ListContainersRequest {
                filter: Some(api::ContainerFilter {
                    label_selector: [(LABEL_POD_UID.to_owned(), pod_uid.to_owned())].into(),
                    ..Default::default()
                }),
            })
            .await
            .map_err(|status| anyhow::anyhow!("ListContainers: {status}"))?
            .into_inner()
            .containers;
        let mut newest: BTreeMap<String, api::Container> = BTreeMap::new();
        for container in listed {
            let Some(name) = container.metadata.as_ref().map(|m| m.name.clone()) else {
                continue;
            };
            if newest
                .get(&name)
                .is_none_or(|have| container.created_at > have.created_at)
            {
                newest.insert(name, container);
            }
        }
        Ok(newest
            .into_iter()
            .map(|(name, c)| RuntimeContainer {
                name,
                id: self.runtime.typed_id(&c.id),
                restart_count: c
                    .annotations
                    .get(ANNOTATION_RESTART_COUNT)
                    .and_then(|r| r.parse().ok())
                    .unwrap_or(0),
                plain_hash: c
                    .annotations
                    .get(ANNOTATION_CONTAINER_HASH)
                    .and_then(|h| u64::from_str_radix(h, 16).ok())
                    .unwrap_or(0),
                running: c.state == api::ContainerState::ContainerRunning as i32,
            })
            .collect())
    }

    /// The env hash of the running container `name`: `env` run in it.
    async fn env_hash(
        &self,
        pod: &Pod,
        runtime: &[RuntimeContainer],
        name: &str,
    ) -> anyhow::Result<u64> {
        let spec = pod
            .spec
            .as_ref()
            .and_then(|s| s.containers.iter().find(|c| c.name == name))
            .ok_or_else(|| anyhow::anyhow!("container {name} not in the Pod spec"))?;
        if !envmeta::has_metadata_env(spec) {
            // Nothing to read from the process: the hash of no env (upstream execs all the same).
            return Ok(envmeta::current_hash(spec, &BTreeMap::new()));
        }
        let id = runtime
            .iter()
            .find(|r| r.name == name)
            .map(|r| raw_id(&r.id).to_owned())
            .ok_or_else(|| anyhow::anyhow!("container {name} not in the runtime"))?;
        let (code, output) = self
            .runtime
            .exec_sync(&id, vec!["env".to_owned()], ENV_EXEC_TIMEOUT)
            .await?;
        anyhow::ensure!(code == 0, "env exited {code}: {}", output.trim());
        Ok(envmeta::current_hash(spec, &envmeta::parse_env(&output)))
    }

    /// Writes the report into the Pod's annotations through `pods/status` (upstream's channel: the
    /// daemon needs no write access to Pods themselves).
    async fn report(
        &self,
        key: &str,
        pod: &Pod,
        set: &RuntimeContainerMetaSet,
    ) -> anyhow::Result<()> {
        let value = set.to_annotation()?;
        tracing::info!(key, meta = value, "reporting container meta");
        let namespace = pod.namespace().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        let patch =
            json!({"metadata": {"annotations": {keys::ANNOTATION_RUNTIME_CONTAINERS_META: value}}});
        let written = api
            .patch_status(
                &pod.name_any(),
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await
            .map_err(|e| anyhow::anyhow!("patch status of Pod {key}: {e}"))?;
        if let Ok(mut map) = self.expectations.lock() {
            map.insert(key.to_owned(), (resource_version(&written), Instant::now()));
        }
        Ok(())
    }

    /// Stops the container `<namespace>/<name>/<runtime>://<id>` as the kubelet would: its preStop
    /// hook first, within the Pod's termination grace period.
    async fn restart(&self, key: &str) -> Outcome {
        match self.restart_container(key).await {
            Ok(()) => Outcome::Done,
            Err(error) => {
                tracing::warn!(
                    key,
                    error = format!("{error:#}"),
                    "failed to restart container"
                );
                Outcome::Failed
            }
        }
    }

    async fn restart_container(&self, key: &str) -> anyhow::Result<()> {
        let mut parts = key.splitn(3, '/');
        let (Some(namespace), Some(name), Some(typed)) = (parts.next(), parts.next(), parts.next())
        else {
            return Ok(());
        };
        let id = raw_id(typed);
        let found = self
            .runtime
            .service()
            .list_containers(api::ListContainersRequest {
                filter: Some(api::ContainerFilter {
                    id: id.to_owned(),
                    ..Default::default()
                }),
            })
            .await
            .map_err(|status| anyhow::anyhow!("ListContainers: {status}"))?
            .into_inner()
            .containers;
        let Some(container) = found
            .into_iter()
            .find(|c| c.state == api::ContainerState::ContainerRunning as i32)
        else {
            tracing::debug!(key, "not running any more: nothing to stop");
            return Ok(());
        };
        let container_name = container.metadata.map(|m| m.name).unwrap_or_default();
        let pod = self.pod(&format!("{namespace}/{name}"));
        let spec = pod.as_deref().and_then(|p| p.spec.as_ref());
        let grace = Duration::from_secs(
            spec.and_then(|s| s.termination_grace_period_seconds)
                .unwrap_or(30)
                .max(0)
                .unsigned_abs(),
        );
        let container_spec =
            spec.and_then(|s| s.containers.iter().find(|c| c.name == container_name));
        let message = format!("Stopping containerID {typed} by container meta restarter");
        if let Some(pod) = pod.as_deref() {
            let event = Event {
                type_: EventType::Normal,
                reason: "Killing".into(),
                note: Some(message.clone()),
                action: "Killing".into(),
                secondary: None,
            };
            if let Err(error) = self.recorder.publish(&event, &pod.object_ref(&())).await {
                tracing::warn!(key, %error, "failed to record the Killing event");
            }
        }
        let started = Instant::now();
        let pre_stop = container_spec
            .and_then(|c| c.lifecycle.as_ref())
            .and_then(|l| l.pre_stop.as_ref())
            .and_then(|h| serde_json::to_value(h).ok())
            .and_then(|v| serde_json::from_value::<ProbeHandler>(v).ok());
        if let Some(hook) = pre_stop.filter(|_| !grace.is_zero()) {
            let ports = container_spec
                .and_then(|c| c.ports.clone())
                .unwrap_or_default();
            let uid = pod.as_deref().and_then(|p| p.uid()).unwrap_or_default();
            if let Err(error) =
                hooks::run_pre_stop(&self.runtime, id, &uid, &hook, &ports, grace).await
            {
                tracing::warn!(key, error = format!("{error:#}"), "preStop hook failed");
            }
        }
        let left = grace.saturating_sub(started.elapsed()).max(MIN_GRACE);
        tracing::info!(key, container = container_name, "{message}");
        self.runtime.stop_container(id, left).await?;
        self.metrics.containermeta_restarted();
        Ok(())
    }
}

/// `containerd://abc` → `abc`.
fn raw_id(typed: &str) -> &str {
    typed.split_once("://").map_or(typed, |(_, id)| id)
}
