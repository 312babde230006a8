//! The daemon's prober (upstream `pkg/daemon/podprobe`, `PodProbeMarkerGate`): watches only its own
//! node's NodePodProbe, runs one worker per (Pod, container, probe) it lists, and reports the results
//! in the NodePodProbe's status.
//!
//! A worker probes every `periodSeconds` (at least 1; the first attempt is spread over the first
//! period after start-up), once the container has run `initialDelaySeconds` (at least 1): `exec`
//! through the CRI's ExecSync in the container (exit code 0 succeeds), `tcpSocket` by connecting to
//! the Pod's IP (a TCP connection succeeds), `httpGet` by a GET to the Pod's IP (a status in
//! 200..400 succeeds; HTTPS without certificate verification, as the kubelet's prober), each within
//! `timeoutSeconds` (at least 1). A result is reported once seen `successThreshold` /
//! `failureThreshold` times in a row; a new container starts as `Unknown` (not one whose state the
//! status already reports when this worker first sees it: a restarted daemon keeps that state until
//! its first result), a stopped one is `Failed`. The status is written when a result changes (and at least every 10 minutes per probe),
//! with an Event (`KruiseProbeSucceeded`, `KruiseProbeFailed`) on the Pod.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{HTTPGetAction, ObjectReference, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kruise_api::podprobemarker::{self as ppm, NodePodProbe};
use kruise_core::podprobemarker::{self as decide, Outcome, ProbeResult, ProbeRun};
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Notify, watch};

use crate::cri::Runtime;

/// The Event source of the prober (upstream's component name).
pub const COMPONENT: &str = "kruise-daemon-podprobe";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProbeLabels {
    /// exec, tcpSocket, httpGet.
    pub kind: String,
    /// Succeeded, Failed.
    pub result: String,
}

/// The prober's metrics, in the daemon's registry.
#[derive(Clone)]
pub struct ProbeMetrics {
    attempts: Family<ProbeLabels, Counter>,
    seconds: Histogram,
    workers: Gauge,
    status_writes: Counter,
}

impl ProbeMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let attempts = Family::<ProbeLabels, Counter>::default();
        registry.register(
            "pod_probe_attempts",
            "PodProbeMarker probe attempts, by kind and result",
            attempts.clone(),
        );
        let seconds = Histogram::new(exponential_buckets(0.001, 2.0, 14));
        registry.register(
            "pod_probe_duration_seconds",
            "How long one PodProbeMarker probe attempt took",
            seconds.clone(),
        );
        let workers = Gauge::default();
        registry.register(
            "pod_probe_workers",
            "Probe workers running (one per Pod, container and probe of the node's NodePodProbe)",
            workers.clone(),
        );
        let status_writes = Counter::default();
        registry.register(
            "node_pod_probe_status_writes",
            "Writes of the node's NodePodProbe status",
            status_writes.clone(),
        );
        Self {
            attempts,
            seconds,
            workers,
            status_writes,
        }
    }
}

/// One probe of one container of one Pod (upstream's `probeKey`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
struct ProbeKey {
    namespace: String,
    pod: String,
    uid: String,
    ip: String,
    container: String,
    /// `<marker>#<probe>`.
    probe: String,
}

struct Worker {
    spec: watch::Sender<Probe>,
    task: tokio::task::JoinHandle<()>,
}

pub struct Prober {
    client: Client,
    runtime: Runtime,
    node: String,
    store: Store<NodePodProbe>,
    workers: Mutex<HashMap<ProbeKey, Worker>>,
    results: Mutex<BTreeMap<ProbeKey, ProbeResult>>,
    dirty: Notify,
    recorder: Recorder,
    metrics: ProbeMetrics,
    started: Instant,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl Prober {
    /// Starts the watch of the node's NodePodProbe; returns the prober (for its readiness) and the
    /// future that runs it.
    pub fn start(
        client: Client,
        runtime: Runtime,
        node: &str,
        metrics: ProbeMetrics,
    ) -> (Arc<Self>, impl Future<Output = ()> + Send + 'static) {
        let (store, writer) = reflector::store();
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: COMPONENT.into(),
                instance: Some(node.to_owned()),
            },
        );
        let prober = Arc::new(Self {
            client: client.clone(),
            runtime,
            node: node.to_owned(),
            store,
            workers: Mutex::new(HashMap::new()),
            results: Mutex::new(BTreeMap::new()),
            dirty: Notify::new(),
            recorder,
            metrics,
            started: Instant::now(),
        });
        let api: Api<NodePodProbe> = Api::all(client);
        let config = watcher::Config::default().fields(&format!("metadata.name={node}"));
        let watched = prober.clone();
        let writer_side = prober.clone();
        let run = async move {
            let events = watcher(api, config).default_backoff().reflect(writer);
            let drive_watch = async move {
                futures::pin_mut!(events);
                while let Some(event) = events.next().await {
                    match event {
                        Ok(watcher::Event::Apply(npp) | watcher::Event::InitApply(npp)) => {
                            watched.sync_workers(&npp);
                        }
                        Ok(watcher::Event::Delete(_)) => {
                            watched.sync_workers(&NodePodProbe::default());
                        }
                        Ok(_) => {}
                        Err(error) => tracing::warn!(%error, "watch of the node's NodePodProbe"),
                    }
                }
            };
            tokio::join!(drive_watch, writer_side.write_statuses());
        };
        (prober, run)
    }

    /// Whether the watch has listed the node's NodePodProbe once.
    pub fn synced(&self) -> bool {
        futures::FutureExt::now_or_never(self.store.wait_until_ready()).is_some()
    }

    /// Starts a worker for every probe the spec lists, hands a changed probe to its worker, stops the
    /// workers of probes no longer listed (and forgets their results).
    fn sync_workers(self: &Arc<Self>, npp: &NodePodProbe) {
        let mut wanted: HashMap<ProbeKey, Probe> = HashMap::new();
        for pod in &npp.spec.pod_probes {
            for probe in &pod.probes {
                let key = ProbeKey {
                    namespace: pod.namespace.clone(),
                    pod: pod.name.clone(),
                    uid: pod.uid.clone(),
                    ip: pod.ip.clone(),
                    container: probe.container_name.clone(),
                    probe: probe.name.clone(),
                };
                wanted.insert(key, probe.probe.clone());
            }
        }
        let mut workers = lock(&self.workers);
        workers.retain(|key, worker| {
            let keep = wanted.contains_key(key);
            if !keep {
                tracing::info!(pod = %format!("{}/{}", key.namespace, key.pod), container = key.container, probe = key.probe, "stopping probe worker");
                worker.task.abort();
            }
            keep
        });
        for (key, spec) in wanted {
            match workers.get(&key) {
                Some(worker) => {
                    worker.spec.send_if_modified(|have| {
                        let changed = *have != spec;
                        if changed {
                            *have = spec.clone();
                        }
                        changed
                    });
                }
                None => {
                    tracing::info!(pod = %format!("{}/{}", key.namespace, key.pod), container = key.container, probe = key.probe, "starting probe worker");
                    let (tx, rx) = watch::channel(spec);
                    let task = tokio::spawn(self.clone().run_worker(key.clone(), rx));
                    workers.insert(key, Worker { spec: tx, task });
                }
            }
        }
        self.metrics
            .workers
            .set(i64::try_from(workers.len()).unwrap_or(i64::MAX));
        lock(&self.results).retain(|key, _| workers.contains_key(key));
        drop(workers);
        self.dirty.notify_one();
    }

    async fn run_worker(self: Arc<Self>, key: ProbeKey, mut spec: watch::Receiver<Probe>) {
        let period = Duration::from_secs(decide::period_seconds(&spec.borrow()));
        // Right after start-up, spread the workers' first attempts over one period.
        if self.started.elapsed() < period {
            let spread = u64::from(Timestamp::now().subsec_nanosecond().unsigned_abs())
                % u64::try_from(period.as_millis()).unwrap_or(1).max(1);
            tokio::time::sleep(Duration::from_millis(spread)).await;
        }
        let mut state = WorkerState::default();
        loop {
            let current = spec.borrow_and_update().clone();
            self.probe_once(&key, &current, &mut state).await;
            let period = Duration::from_secs(decide::period_seconds(&current));
            tokio::select! {
                () = tokio::time::sleep(period) => {}
                changed = spec.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let new = spec.borrow().clone();
                    if handler_changed(&current, &new) && state.container_id.is_some() {
                        tracing::info!(pod = %format!("{}/{}", key.namespace, key.pod), container = key.container, "probe spec changed");
                        self.set_result(&key, ppm::PROBE_UNKNOWN, "");
                    }
                }
            }
        }
    }

    /// One attempt (upstream's `doProbe`).
    async fn probe_once(&self, key: &ProbeKey, spec: &Probe, state: &mut WorkerState) {
        let containers = match self.runtime.pod_containers(&key.uid).await {
            Ok(containers) => containers,
            Err(error) => {
                tracing::debug!(%error, pod = key.uid, "listing the Pod's containers");
                return;
            }
        };
        let Some(container) = containers.get(&key.container) else {
            return;
        };
        if state.container_id.as_deref() != Some(container.id.as_str()) {
            let first_sight = state.container_id.is_none();
            state.container_id = Some(container.id.clone());
            state.run = ProbeRun::default();
            if decide::reports_unknown_on_new_container(
                first_sight,
                self.reported_state(key).as_deref(),
            ) {
                self.set_result(key, ppm::PROBE_UNKNOWN, "");
            }
        }
        let Some(started_at) = container.started_at.filter(|_| !container.exited) else {
            self.set_result(
                key,
                ppm::PROBE_FAILED,
                &format!("Container({}) is Non-running", key.container),
            );
            return;
        };
        if !decide::initial_delay_passed(
            started_at,
            Timestamp::now(),
            spec.initial_delay_seconds.unwrap_or(0),
        ) {
            return;
        }
        let raw_id = container
            .id
            .split_once("://")
            .map_or(container.id.as_str(), |(_, id)| id);
        let began = Instant::now();
        let (kind, outcome, message) = self.run_probe(spec, key, raw_id).await;
        self.metrics.seconds.observe(began.elapsed().as_secs_f64());
        self.metrics
            .attempts
            .get_or_create(&ProbeLabels {
                kind: kind.to_owned(),
                result: outcome.state().to_owned(),
            })
            .inc();
        if let Some(reported) = state.run.observe(
            outcome,
            spec.success_threshold.unwrap_or(0),
            spec.failure_threshold.unwrap_or(0),
        ) {
            self.set_result(key, reported.state(), &decide::trim_message(&message));
        }
    }

    async fn run_probe(
        &self,
        spec: &Probe,
        key: &ProbeKey,
        container_id: &str,
    ) -> (&'static str, Outcome, String) {
        let timeout = Duration::from_secs(decide::timeout_seconds(spec));
        if let Some(exec) = &spec.exec {
            let command = exec.command.clone().unwrap_or_default();
            let (outcome, message) =
                match self.runtime.exec_sync(container_id, command, timeout).await {
                    Ok((0, output)) => (Outcome::Succeeded, output),
                    Ok((_, output)) => (Outcome::Failed, output),
                    Err(error) => (Outcome::Failed, error.to_string()),
                };
            return ("exec", outcome, message);
        }
        if let Some(tcp) = &spec.tcp_socket {
            let host = tcp
                .host
                .clone()
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| key.ip.clone());
            let (outcome, message) = match port_number(&tcp.port) {
                Ok(port) => tcp_probe(&host, port, timeout).await,
                Err(message) => (Outcome::Failed, message),
            };
            return ("tcpSocket", outcome, message);
        }
        if let Some(get) = &spec.http_get {
            let (outcome, message) = http_probe(get, &key.ip, timeout).await;
            return ("httpGet", outcome, message);
        }
        (
            "none",
            Outcome::Failed,
            format!("missing probe handler for {}", key.container),
        )
    }

    /// Stores a result; a new one (state or message changed, or refreshed after 10 minutes) wakes
    /// the status writer and is recorded as an Event on the Pod.
    /// The state this node's NodePodProbe status reports for `key` (the watch's copy).
    fn reported_state(&self, key: &ProbeKey) -> Option<String> {
        let npp = self.store.get(&ObjectRef::new(&self.node))?;
        decide::reported_state(npp.status.as_ref(), &key.uid, &key.probe).map(str::to_owned)
    }

    fn set_result(&self, key: &ProbeKey, state: &str, message: &str) {
        let now = Timestamp::now();
        {
            let mut results = lock(&self.results);
            if !decide::result_is_news(results.get(key), state, message, now) {
                return;
            }
            results.insert(
                key.clone(),
                ProbeResult {
                    pod_namespace: key.namespace.clone(),
                    pod_name: key.pod.clone(),
                    pod_uid: key.uid.clone(),
                    probe: key.probe.clone(),
                    state: state.to_owned(),
                    message: message.to_owned(),
                    probed_at: now,
                },
            );
        }
        self.dirty.notify_one();
        if state == ppm::PROBE_UNKNOWN {
            return;
        }
        let reason = if state == ppm::PROBE_SUCCEEDED {
            ppm::EVENT_PROBE_SUCCEEDED
        } else {
            ppm::EVENT_PROBE_FAILED
        };
        let event = Event {
            type_: EventType::Normal,
            reason: reason.into(),
            note: Some(if message.is_empty() {
                format!(
                    "probe {} of container {}: {state}",
                    key.probe, key.container
                )
            } else {
                decide::trim_message(message)
            }),
            action: "Probe".into(),
            secondary: None,
        };
        let regarding = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(key.namespace.clone()),
            name: Some(key.pod.clone()),
            uid: Some(key.uid.clone()),
            ..ObjectReference::default()
        };
        let recorder = self.recorder.clone();
        tokio::spawn(async move {
            if let Err(error) = recorder.publish(&event, &regarding).await {
                tracing::debug!(%error, "publishing a probe Event");
            }
        });
    }

    /// Writes the NodePodProbe status whenever a result changes (upstream's
    /// `syncUpdateNodePodProbeStatus`), over the object's resourceVersion; a conflict tries again.
    async fn write_statuses(self: Arc<Self>) {
        let api: Api<NodePodProbe> = Api::all(self.client.clone());
        let mut failures = 0u32;
        loop {
            self.dirty.notified().await;
            // Results often come in bursts (every worker of a new Pod): write them together.
            tokio::time::sleep(Duration::from_millis(100)).await;
            let Some(npp) = self.store.get(&ObjectRef::new(&self.node)) else {
                continue;
            };
            let results: Vec<ProbeResult> = lock(&self.results).values().cloned().collect();
            let status = decide::merge_status(&npp, &results, Timestamp::now());
            if npp.status.clone().unwrap_or_default() == status {
                continue;
            }
            let statuses = if status.pod_probe_statuses.is_empty() {
                serde_json::Value::Null
            } else {
                serde_json::to_value(&status.pod_probe_statuses).unwrap_or(serde_json::Value::Null)
            };
            let patch = json!({
                "metadata": {"resourceVersion": npp.resource_version()},
                "status": {"podProbeStatuses": statuses},
            });
            match api
                .patch_status(&self.node, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {
                    failures = 0;
                    self.metrics.status_writes.inc();
                    tracing::debug!(node = self.node, "NodePodProbe status written");
                }
                Err(error) => {
                    failures = failures.saturating_add(1);
                    tracing::warn!(node = self.node, %error, "writing the NodePodProbe status; trying again");
                    tokio::time::sleep(crate::queue::backoff(failures)).await;
                    self.dirty.notify_one();
                }
            }
        }
    }
}

#[derive(Default)]
struct WorkerState {
    container_id: Option<String>,
    run: ProbeRun,
}

fn handler_changed(a: &Probe, b: &Probe) -> bool {
    a.exec != b.exec || a.http_get != b.http_get || a.tcp_socket != b.tcp_socket || a.grpc != b.grpc
}

/// The port of a probe: a number (the manager resolves named ports), or a number as a string.
fn port_number(port: &IntOrString) -> Result<u16, String> {
    let n = match port {
        IntOrString::Int(n) => *n,
        IntOrString::String(s) => s.parse().map_err(|_| format!("invalid port number: {s}"))?,
    };
    u16::try_from(n)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("invalid port number: {n}"))
}

async fn tcp_probe(host: &str, port: u16, timeout: Duration) -> (Outcome, String) {
    match tokio::time::timeout(timeout, TcpStream::connect((host, port))).await {
        Ok(Ok(_)) => (Outcome::Succeeded, String::new()),
        Ok(Err(error)) => (Outcome::Failed, format!("dial tcp {host}:{port}: {error}")),
        Err(_) => (
            Outcome::Failed,
            format!("dial tcp {host}:{port}: i/o timeout"),
        ),
    }
}

async fn http_probe(get: &HTTPGetAction, pod_ip: &str, timeout: Duration) -> (Outcome, String) {
    let host = get
        .host
        .clone()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| pod_ip.to_owned());
    let port = match port_number(&get.port) {
        Ok(port) => port,
        Err(message) => return (Outcome::Failed, message),
    };
    let https = get
        .scheme
        .as_deref()
        .is_some_and(|s| s.eq_ignore_ascii_case("HTTPS"));
    let path = get
        .path
        .clone()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "/".to_owned());
    let path = if path.starts_with('/') {
        path
    } else {
        format!("/{path}")
    };
    let mut headers: Vec<(String, String)> = get
        .http_headers
        .iter()
        .flatten()
        .map(|h| (h.name.clone(), h.value.clone()))
        .collect();
    let has = |headers: &[(String, String)], name: &str| {
        headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name))
    };
    if !has(&headers, "User-Agent") {
        headers.push(("User-Agent".into(), "kube-probe".into()));
    }
    if !has(&headers, "Accept") {
        headers.push(("Accept".into(), "*/*".into()));
    }
    headers.retain(|(n, v)| !(n.eq_ignore_ascii_case("Accept") && v.is_empty()));
    if !has(&headers, "Host") {
        let authority = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        headers.push(("Host".into(), authority));
    }
    let mut request = format!("GET {path} HTTP/1.1\r\n");
    for (name, value) in &headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("Connection: close\r\n\r\n");
    let attempt = async {
        let stream = TcpStream::connect((host.as_str(), port))
            .await
            .map_err(|e| {
                format!(
                    "Get \"{}://{host}:{port}{path}\": dial tcp {host}:{port}: {e}",
                    if https { "https" } else { "http" }
                )
            })?;
        if https {
            let connector = tls_connector();
            let name = rustls::pki_types::ServerName::try_from(host.clone())
                .map_err(|e| format!("invalid host {host}: {e}"))?;
            let tls = connector
                .connect(name, stream)
                .await
                .map_err(|e| format!("TLS handshake with {host}:{port}: {e}"))?;
            exchange(tls, &request).await
        } else {
            exchange(stream, &request).await
        }
    };
    match tokio::time::timeout(timeout, attempt).await {
        Ok(Ok(code)) if (200..400).contains(&code) => (Outcome::Succeeded, String::new()),
        Ok(Ok(code)) => (
            Outcome::Failed,
            format!("HTTP probe failed with statuscode: {code}"),
        ),
        Ok(Err(message)) => (Outcome::Failed, message),
        Err(_) => (
            Outcome::Failed,
            format!(
                "Get \"{host}:{port}{path}\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
            ),
        ),
    }
}

/// Sends the request and reads the status code of the response.
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    request: &str,
) -> Result<u16, String> {
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("sending the request: {e}"))?;
    let mut head = Vec::with_capacity(256);
    let mut buf = [0u8; 256];
    while !head.windows(2).any(|w| w == b"\r\n") && head.len() < 8192 {
        let read = stream
            .read(&mut buf)
            .await
            .map_err(|e| format!("reading the response: {e}"))?;
        if read == 0 {
            break;
        }
        head.extend_from_slice(&buf[..read]);
    }
    parse_status(&head)
}

fn parse_status(head: &[u8]) -> Result<u16, String> {
    let line = String::from_utf8_lossy(head);
    let line = line.lines().next().unwrap_or_default();
    let mut parts = line.split_whitespace();
    match (
        parts.next(),
        parts.next().and_then(|c| c.parse::<u16>().ok()),
    ) {
        (Some(version), Some(code)) if version.starts_with("HTTP/") => Ok(code),
        _ => Err(format!("malformed HTTP response: {line:?}")),
    }
}

/// A TLS client that accepts any certificate (the kubelet's HTTPS probes skip verification too).
fn tls_connector() -> tokio_rustls::TlsConnector {
    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use rustls::{DigitallySignedStruct, SignatureScheme};

    #[derive(Debug)]
    struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

    impl ServerCertVerifier for AnyCertificate {
        fn verify_server_cert(
            &self,
            _: &CertificateDer<'_>,
            _: &[CertificateDer<'_>],
            _: &ServerName<'_>,
            _: &[u8],
            _: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            Ok(ServerCertVerified::assertion())
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls12_signature(
                message,
                cert,
                dss,
                &self.0.signature_verification_algorithms,
            )
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls13_signature(
                message,
                cert,
                dss,
                &self.0.signature_verification_algorithms,
            )
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.0.signature_verification_algorithms.supported_schemes()
        }
    }

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map(|builder| {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
                .with_no_client_auth()
        });
    let config = match config {
        Ok(config) => config,
        // The ring provider supports the default versions; fall back to TLS 1.3 defaults otherwise.
        Err(_) => rustls::ClientConfig::builder_with_protocol_versions(&[&rustls::version::TLS13])
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))))
            .with_no_client_auth(),
    };
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines() {
        assert_eq!(parse_status(b"HTTP/1.1 200 OK\r\n"), Ok(200));
        assert_eq!(
            parse_status(b"HTTP/1.0 404 Not Found\r\nServer: x\r\n"),
            Ok(404)
        );
        assert!(parse_status(b"SSH-2.0-OpenSSH\r\n").is_err());
        assert!(parse_status(b"").is_err());
    }

    #[test]
    fn ports() {
        assert_eq!(port_number(&IntOrString::Int(80)), Ok(80));
        assert_eq!(port_number(&IntOrString::String("8080".into())), Ok(8080));
        assert!(port_number(&IntOrString::String("http".into())).is_err());
        assert!(port_number(&IntOrString::Int(0)).is_err());
        assert!(port_number(&IntOrString::Int(70000)).is_err());
    }

    #[tokio::test]
    async fn tcp_and_http_probes_against_a_local_server() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut buf = [0u8; 1024];
                let read = socket.read(&mut buf).await.unwrap_or(0);
                let request = String::from_utf8_lossy(&buf[..read]).to_string();
                let answer = if request.starts_with("GET /healthy ") {
                    "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
                } else {
                    "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n"
                };
                let _ = socket.write_all(answer.as_bytes()).await;
            }
        });
        let second = Duration::from_secs(1);
        assert_eq!(
            tcp_probe("127.0.0.1", port, second).await.0,
            Outcome::Succeeded
        );
        let get = |path: &str| HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::Int(i32::from(port)),
            scheme: Some("HTTP".into()),
            ..HTTPGetAction::default()
        };
        assert_eq!(
            http_probe(&get("/healthy"), "127.0.0.1", second).await,
            (Outcome::Succeeded, String::new())
        );
        assert_eq!(
            http_probe(&get("/sick"), "127.0.0.1", second).await,
            (
                Outcome::Failed,
                "HTTP probe failed with statuscode: 503".to_owned()
            )
        );
        // Nothing listens there any more once the listener's port is reused by nobody: bind and drop.
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            l.local_addr().expect("addr").port()
        };
        assert_eq!(
            tcp_probe("127.0.0.1", closed, second).await.0,
            Outcome::Failed
        );
    }
}
