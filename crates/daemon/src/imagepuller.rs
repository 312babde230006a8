//! The image puller (upstream `pkg/daemon/imagepuller`): watches only this node's NodeImage, pulls each
//! tag its spec lists through the CRI ImageService (with the credentials of the pull secrets it names,
//! the sandbox config it gives), one attempt at most `timeoutSeconds` long, `backoffLimit` retries with
//! a doubling back-off, stopped at `activeDeadlineSeconds`; and reports every tag's phase, progress,
//! times, version and imageID in the NodeImage's status, as upstream does; each finished pull is told in
//! upstream's Events (`PullImageSucceed` on the NodeImage; `PullImageFailed` on the tag's ImagePullJobs
//! and the NodeImage).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ObjectReference, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kruise_api::imagepulljob::v1beta1::{
    ImageSpec as NodeImageSpecEntry, ImageStatus, ImageTagSpec, ImageTagStatus, NodeImage,
    PHASE_FAILED, PHASE_PULLING, PHASE_SUCCEEDED, PHASE_WAITING, PULL_IF_NOT_PRESENT,
    ReferenceObject, SandboxConfig,
};
use kruise_core::imagepulljob::{self as imagepull, DaemonWork};
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use serde_json::json;
use tokio::sync::Notify;
use tonic::transport::Channel;

use crate::cri::api::image_service_client::ImageServiceClient;
use crate::cri::api::{
    AuthConfig, ImageSpec, ImageStatusRequest, PodSandboxConfig, PodSandboxMetadata,
    PullImageRequest,
};
use crate::cri::{CriError, unix_channel};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PullResult {
    result: String,
}

/// The puller's Prometheus metrics.
#[derive(Clone)]
pub struct PullMetrics {
    pulls: Family<PullResult, Counter>,
    pull_seconds: Histogram,
    pulling: Gauge,
}

impl PullMetrics {
    /// Registers the puller's metrics (`kruise_daemon_image_pulls_total{result}`,
    /// `kruise_daemon_image_pull_duration_seconds`, `kruise_daemon_image_pulling`).
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            pulls: Family::default(),
            pull_seconds: Histogram::new(exponential_buckets(0.1, 2.0, 14)),
            pulling: Gauge::default(),
        };
        registry.register(
            "image_pulls",
            "Image pulls asked by the node's NodeImage, by result (succeeded, failed)",
            metrics.pulls.clone(),
        );
        registry.register(
            "image_pull_duration_seconds",
            "How long an image pull took, retries included",
            metrics.pull_seconds.clone(),
        );
        registry.register(
            "image_pulling",
            "Image pulls in progress",
            metrics.pulling.clone(),
        );
        metrics
    }
}

/// A connection to the runtime's ImageService.
#[derive(Clone)]
pub struct Images {
    client: ImageServiceClient<Channel>,
}

impl Images {
    /// Connects to `endpoint` (`unix:///run/containerd/containerd.sock`). Pulls may take long: the
    /// channel has no request deadline of its own (each pull is bounded by its `timeoutSeconds`).
    pub async fn connect(endpoint: &str) -> Result<Self, CriError> {
        let channel = unix_channel(endpoint, None).await?;
        Ok(Self {
            client: ImageServiceClient::new(channel),
        })
    }

    /// The runtime's ID of `reference`, if the node has it.
    pub async fn image_id(&self, reference: &str) -> Result<Option<String>, CriError> {
        let response = self
            .client
            .clone()
            .image_status(ImageStatusRequest {
                image: Some(ImageSpec {
                    image: reference.to_owned(),
                    ..Default::default()
                }),
                verbose: false,
            })
            .await
            .map_err(|status| CriError::Call {
                call: "ImageStatus",
                status,
            })?
            .into_inner();
        Ok(response.image.map(|i| i.id).filter(|id| !id.is_empty()))
    }

    /// Pulls `reference` with `auth` (the first that works, anonymous when there is none).
    pub async fn pull(
        &self,
        reference: &str,
        auths: &[AuthConfig],
        sandbox: Option<&SandboxConfig>,
    ) -> Result<String, CriError> {
        let sandbox_config = sandbox.map(|s| PodSandboxConfig {
            metadata: Some(PodSandboxMetadata::default()),
            labels: s.labels.clone().into_iter().collect(),
            annotations: s.annotations.clone().into_iter().collect(),
            ..Default::default()
        });
        let mut candidates: Vec<Option<AuthConfig>> = auths.iter().cloned().map(Some).collect();
        if candidates.is_empty() {
            candidates.push(None);
        }
        let mut last = None;
        for auth in candidates {
            let request = PullImageRequest {
                image: Some(ImageSpec {
                    image: reference.to_owned(),
                    ..Default::default()
                }),
                auth,
                sandbox_config: sandbox_config.clone(),
            };
            match self.client.clone().pull_image(request).await {
                Ok(response) => return Ok(response.into_inner().image_ref),
                Err(status) => {
                    last = Some(CriError::Call {
                        call: "PullImage",
                        status,
                    });
                }
            }
        }
        Err(last.unwrap_or(CriError::Endpoint(reference.to_owned())))
    }
}

/// The registry host of a reference as Docker config files key it (`docker.io` for Docker Hub's).
fn registry_of(reference: &str) -> String {
    match reference.split_once('/') {
        Some((first, _)) if first.contains(['.', ':']) || first == "localhost" => first.to_owned(),
        _ => "docker.io".to_owned(),
    }
}

/// The credentials a `kubernetes.io/dockerconfigjson` (or `.dockercfg`) Secret holds for `registry`.
pub fn auths_for(secret: &Secret, registry: &str) -> Vec<AuthConfig> {
    let data = secret.data.clone().unwrap_or_default();
    let parsed: Option<serde_json::Value> = data
        .get(".dockerconfigjson")
        .and_then(|raw| serde_json::from_slice::<serde_json::Value>(&raw.0).ok())
        .and_then(|v| v.get("auths").cloned())
        .or_else(|| {
            data.get(".dockercfg")
                .and_then(|raw| serde_json::from_slice(&raw.0).ok())
        });
    let Some(serde_json::Value::Object(entries)) = parsed else {
        return Vec::new();
    };
    let host_of = |key: &str| -> String {
        let key = key
            .trim_start_matches("https://")
            .trim_start_matches("http://");
        let host = key.split('/').next().unwrap_or_default();
        match host {
            "index.docker.io" | "registry-1.docker.io" => "docker.io".to_owned(),
            other => other.to_owned(),
        }
    };
    entries
        .iter()
        .filter(|(key, _)| host_of(key) == registry)
        .map(|(key, entry)| {
            let text = |name: &str| {
                entry
                    .get(name)
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            };
            AuthConfig {
                username: text("username"),
                password: text("password"),
                auth: text("auth"),
                server_address: key.clone(),
                identity_token: text("identitytoken"),
                registry_token: text("registrytoken"),
            }
        })
        .collect()
}

type TagKey = (String, String);

/// The shortest time between two status writes of the puller.
pub const STATUS_INTERVAL: Duration = Duration::from_secs(3);

/// One running pull.
struct Worker {
    version: i64,
    task: tokio::task::JoinHandle<()>,
}

struct State {
    /// The statuses this daemon knows (from its workers, or read back from the NodeImage).
    statuses: BTreeMap<TagKey, ImageTagStatus>,
    workers: HashMap<TagKey, Worker>,
    spec: BTreeMap<String, NodeImageSpecEntry>,
    /// The node's NodeImage, which the pull Events are about.
    node_image: Option<ObjectReference>,
}

/// The Events' source, as upstream's puller reports them.
pub const COMPONENT: &str = "kruise-daemon-imagepuller";
/// Upstream's Event reasons of a finished pull.
pub const REASON_SUCCEEDED: &str = "PullImageSucceed";
pub const REASON_FAILED: &str = "PullImageFailed";

/// The puller of one node.
pub struct Puller {
    client: Client,
    node: String,
    images: Images,
    metrics: PullMetrics,
    recorder: Recorder,
    state: Mutex<State>,
    changed: Notify,
    synced: std::sync::atomic::AtomicBool,
}

impl Puller {
    pub fn new(client: Client, node: &str, images: Images, metrics: PullMetrics) -> Arc<Self> {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: COMPONENT.into(),
                instance: Some(node.to_owned()),
            },
        );
        Arc::new(Self {
            client,
            node: node.to_owned(),
            images,
            metrics,
            recorder,
            state: Mutex::new(State {
                statuses: BTreeMap::new(),
                workers: HashMap::new(),
                spec: BTreeMap::new(),
                node_image: None,
            }),
            changed: Notify::new(),
            synced: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Whether the NodeImage watch has delivered its first state.
    pub fn synced(&self) -> bool {
        self.synced.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs the watch of the node's NodeImage and the status writer until the future is dropped.
    pub async fn run(self: Arc<Self>) {
        let writer = tokio::spawn(self.clone().write_statuses());
        let api: Api<NodeImage> = Api::all(self.client.clone());
        let config = watcher::Config::default().fields(&format!("metadata.name={}", self.node));
        let mut events = watcher(api, config).default_backoff().boxed();
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Apply(image) | watcher::Event::InitApply(image)) => {
                    self.sync(&image);
                }
                Ok(watcher::Event::Delete(_)) => self.sync(&NodeImage::default()),
                Ok(watcher::Event::InitDone) => {
                    self.synced
                        .store(true, std::sync::atomic::Ordering::Relaxed);
                }
                Ok(watcher::Event::Init) => {}
                Err(error) => tracing::warn!(%error, "watching the node's NodeImage"),
            }
        }
        writer.abort();
    }

    /// Starts, keeps or stops the pull of every tag the spec lists (a new version restarts a pull).
    fn sync(self: &Arc<Self>, image: &NodeImage) {
        let reported = image.status.clone().unwrap_or_default().image_statuses;
        let mut state = self.state();
        state.spec = image.spec.images.clone();
        state.node_image = image.metadata.uid.is_some().then(|| image.object_ref(&()));
        let mut wanted: HashMap<TagKey, (ImageTagSpec, NodeImageSpecEntry)> = HashMap::new();
        for (name, entry) in &image.spec.images {
            for tag in &entry.tags {
                wanted.insert(
                    (name.clone(), tag.tag.clone()),
                    (tag.clone(), entry.clone()),
                );
            }
        }
        // Stop the pulls no longer wanted, or of an older version.
        let stale: Vec<TagKey> = state
            .workers
            .iter()
            .filter(|(key, worker)| {
                wanted
                    .get(*key)
                    .is_none_or(|(tag, _)| tag.version != worker.version)
            })
            .map(|(key, _)| key.clone())
            .collect();
        for key in stale {
            if let Some(worker) = state.workers.remove(&key) {
                worker.task.abort();
                self.metrics.pulling.dec();
            }
        }
        state.statuses.retain(|key, _| wanted.contains_key(key));
        for (key, (tag, entry)) in wanted {
            let known = reported
                .get(&key.0)
                .and_then(|s| s.tags.iter().find(|t| t.tag == key.1))
                .or_else(|| state.statuses.get(&key))
                .cloned();
            match imagepull::daemon_work(&tag, known.as_ref()) {
                DaemonWork::Done => {
                    if let Some(known) = known {
                        state.statuses.entry(key).or_insert(known);
                    }
                }
                DaemonWork::Pull { version } => {
                    if state
                        .workers
                        .get(&key)
                        .is_some_and(|w| w.version == version)
                    {
                        continue;
                    }
                    state.statuses.insert(
                        key.clone(),
                        ImageTagStatus {
                            tag: key.1.clone(),
                            phase: PHASE_WAITING.into(),
                            version,
                            ..Default::default()
                        },
                    );
                    let task = tokio::spawn(self.clone().pull(
                        key.clone(),
                        tag,
                        entry.pull_secrets.clone(),
                        entry.sandbox_config.clone(),
                    ));
                    self.metrics.pulling.inc();
                    state.workers.insert(key, Worker { version, task });
                }
            }
        }
        drop(state);
        self.changed.notify_one();
    }

    fn update(&self, key: &TagKey, status: ImageTagStatus) {
        let mut state = self.state();
        if state
            .workers
            .get(key)
            .is_some_and(|w| w.version == status.version)
        {
            state.statuses.insert(key.clone(), status);
        }
        drop(state);
        self.changed.notify_one();
    }

    async fn credentials(&self, secrets: &[ReferenceObject], registry: &str) -> Vec<AuthConfig> {
        let mut auths = Vec::new();
        for secret in secrets {
            let api: Api<Secret> = Api::namespaced(self.client.clone(), &secret.namespace);
            match api.get_opt(&secret.name).await {
                Ok(Some(found)) => auths.extend(auths_for(&found, registry)),
                Ok(None) => {
                    tracing::warn!(secret = %format!("{}/{}", secret.namespace, secret.name), "pull secret not found")
                }
                Err(error) => {
                    tracing::warn!(secret = %format!("{}/{}", secret.namespace, secret.name), %error, "reading pull secret")
                }
            }
        }
        auths
    }

    /// One tag's pull, attempts and back-off included; the status is updated as it goes.
    async fn pull(
        self: Arc<Self>,
        key: TagKey,
        tag: ImageTagSpec,
        secrets: Vec<ReferenceObject>,
        sandbox: Option<SandboxConfig>,
    ) {
        let reference = imagepull::pull_reference(&key.0, &key.1);
        let began = Instant::now();
        let start = Timestamp::now();
        let mut status = ImageTagStatus {
            tag: key.1.clone(),
            phase: PHASE_PULLING.into(),
            start_time: Some(Time(start)),
            version: tag.version,
            ..Default::default()
        };
        self.update(&key, status.clone());
        let policy = tag.pull_policy.as_ref();
        let (timeout, retries) = imagepull::attempts(policy);
        let deadline = policy
            .and_then(|p| p.active_deadline_seconds)
            .and_then(|s| u64::try_from(s).ok())
            .map(|s| began + Duration::from_secs(s));
        let auths = self.credentials(&secrets, &registry_of(&reference)).await;
        let mut last_error = String::new();
        let mut pulled = None;
        for attempt in 0..=retries {
            let mut budget = Duration::from_secs(timeout);
            if let Some(deadline) = deadline {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    last_error = "pulling exceeds the activeDeadlineSeconds".into();
                    break;
                }
                budget = budget.min(left);
            }
            let present = if tag.image_pull_policy == PULL_IF_NOT_PRESENT
                || tag.image_pull_policy.is_empty()
            {
                self.images.image_id(&reference).await.ok().flatten()
            } else {
                None
            };
            if let Some(id) = present {
                pulled = Some(id);
                break;
            }
            match tokio::time::timeout(
                budget,
                self.images.pull(&reference, &auths, sandbox.as_ref()),
            )
            .await
            {
                Ok(Ok(_)) => {
                    pulled = Some(
                        self.images
                            .image_id(&reference)
                            .await
                            .ok()
                            .flatten()
                            .unwrap_or_default(),
                    );
                    break;
                }
                Ok(Err(error)) => {
                    last_error = format!("pulling image {reference} error {error}");
                }
                Err(_) => last_error = format!("pulling image {reference} is canceled"),
            }
            tracing::warn!(
                image = reference,
                attempt,
                error = last_error,
                "image pull failed"
            );
            if attempt < retries {
                tokio::time::sleep(imagepull::retry_delay(attempt)).await;
            }
        }
        let now = Time(Timestamp::now());
        status.completion_time = Some(now);
        match pulled {
            Some(id) => {
                status.phase = PHASE_SUCCEEDED.into();
                status.progress = 100;
                if !id.is_empty() {
                    status.image_id = format!("{}@{id}", key.0);
                }
                tracing::info!(image = reference, took = ?began.elapsed(), "image pulled");
                self.metrics
                    .pulls
                    .get_or_create(&PullResult {
                        result: "succeeded".into(),
                    })
                    .inc();
            }
            None => {
                status.phase = PHASE_FAILED.into();
                status.message = last_error.clone();
                self.metrics
                    .pulls
                    .get_or_create(&PullResult {
                        result: "failed".into(),
                    })
                    .inc();
            }
        }
        self.metrics
            .pull_seconds
            .observe(began.elapsed().as_secs_f64());
        let succeeded = status.phase == PHASE_SUCCEEDED;
        self.update(&key, status);
        self.report(&key, &tag, succeeded, &last_error, began.elapsed())
            .await;
        let mut state = self.state();
        if state
            .workers
            .get(&key)
            .is_some_and(|w| w.version == tag.version)
        {
            state.workers.remove(&key);
            self.metrics.pulling.dec();
        }
    }

    /// Upstream's Events of a finished pull: `PullImageSucceed` on the NodeImage, or `PullImageFailed`
    /// on each of the tag's owners (its ImagePullJobs) and on the NodeImage.
    async fn report(
        &self,
        key: &TagKey,
        tag: &ImageTagSpec,
        succeeded: bool,
        error: &str,
        took: Duration,
    ) {
        let node_image = self.state().node_image.clone();
        let (event, regarding): (Event, Vec<ObjectReference>) = if succeeded {
            (
                Event {
                    type_: EventType::Normal,
                    reason: REASON_SUCCEEDED.into(),
                    note: Some(format!("Image {}:{}, ecalpsedTime {took:?}", key.0, key.1)),
                    action: "PullImage".into(),
                    secondary: None,
                },
                node_image.into_iter().collect(),
            )
        } else {
            (
                Event {
                    type_: EventType::Warning,
                    reason: REASON_FAILED.into(),
                    note: Some(format!("Image {}:{} {error}", key.0, key.1)),
                    action: "PullImage".into(),
                    secondary: None,
                },
                tag.owner_references
                    .iter()
                    .cloned()
                    .chain(node_image)
                    .collect(),
            )
        };
        for object in regarding {
            if let Err(error) = self.recorder.publish(&event, &object).await {
                tracing::debug!(%error, "publishing an image pull Event");
            }
        }
    }

    /// The status as this daemon knows it: per image, the tags of the spec it has a status for.
    fn status(&self) -> serde_json::Value {
        let state = self.state();
        let mut images: BTreeMap<String, ImageStatus> = BTreeMap::new();
        for (name, entry) in &state.spec {
            let tags: Vec<ImageTagStatus> = entry
                .tags
                .iter()
                .filter_map(|t| state.statuses.get(&(name.clone(), t.tag.clone())).cloned())
                .collect();
            if !tags.is_empty() {
                images.insert(name.clone(), ImageStatus { tags });
            }
        }
        let count = |phase: &str| {
            images
                .values()
                .flat_map(|i| &i.tags)
                .filter(|t| t.phase == phase)
                .count()
        };
        let desired: usize = state.spec.values().map(|e| e.tags.len()).sum();
        json!({
            "desired": desired,
            "succeeded": count(PHASE_SUCCEEDED),
            "failed": count(PHASE_FAILED),
            "pulling": count(PHASE_PULLING),
            "waiting": count(PHASE_WAITING),
            "imageStatuses": images,
        })
    }

    /// Writes the status whenever it changes (at most every [`STATUS_INTERVAL`]); a failed write is
    /// retried.
    async fn write_statuses(self: Arc<Self>) {
        let api: Api<NodeImage> = Api::all(self.client.clone());
        let mut written: Option<serde_json::Value> = None;
        loop {
            let _ = tokio::time::timeout(Duration::from_secs(30), self.changed.notified()).await;
            if !self.synced() {
                continue;
            }
            let status = self.status();
            if written.as_ref() == Some(&status) {
                continue;
            }
            // Replace the image statuses map: null out the images it no longer lists.
            let mut patch_status = status.clone();
            if let Ok(Some(current)) = api.get_opt(&self.node).await {
                let old = current.status.unwrap_or_default().image_statuses;
                for name in old.keys() {
                    if patch_status["imageStatuses"].get(name).is_none() {
                        patch_status["imageStatuses"][name] = serde_json::Value::Null;
                    }
                }
                if current.metadata.deletion_timestamp.is_some() {
                    continue;
                }
            } else {
                continue;
            }
            let patch = json!({ "status": patch_status });
            match api
                .patch_status(&self.node, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(image) => {
                    tracing::debug!(node = image.name_any(), "NodeImage status written");
                    written = Some(status);
                }
                Err(error) => {
                    tracing::warn!(%error, "writing the NodeImage status");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    self.changed.notify_one();
                }
            }
            // As upstream's puller, which re-reads its workers' statuses every 3 s while pulling:
            // status writes are at most that frequent.
            tokio::time::sleep(STATUS_INTERVAL).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    #[test]
    fn registry_and_credentials_of_a_dockerconfigjson_secret() {
        assert_eq!(registry_of("nginx:1"), "docker.io");
        assert_eq!(registry_of("team/app:1"), "docker.io");
        assert_eq!(registry_of("127.0.0.1:5000/app:1"), "127.0.0.1:5000");
        let config = json!({"auths": {
            "127.0.0.1:5000": {"username": "u", "password": "p", "auth": "dTpw"},
            "https://index.docker.io/v1/": {"auth": "aHViOng="},
        }});
        let secret = Secret {
            data: Some(BTreeMap::from([(
                ".dockerconfigjson".to_owned(),
                ByteString(config.to_string().into_bytes()),
            )])),
            ..Default::default()
        };
        let local = auths_for(&secret, "127.0.0.1:5000");
        assert_eq!(local.len(), 1);
        assert_eq!(
            (local[0].username.as_str(), local[0].password.as_str()),
            ("u", "p")
        );
        let hub = auths_for(&secret, "docker.io");
        assert_eq!(hub[0].auth, "aHViOng=");
        assert!(auths_for(&secret, "quay.io").is_empty());
    }
}
