//! kruise-manager: one process serving the apps.kruise.io webhooks (admission and conversion, with
//! self-managed certificates) and, on the elected leader, the workload controllers.
//!
//! Start-up order: metrics and health endpoints → webhook server and certificate sync (every replica
//! serves admission) → leader election → webhook configurations and controllers (leader only).
//!
//! Leadership comes in terms. A term runs the leader's work (webhook configurations, controllers) on a
//! runtime of its own with a client of its own whose writes pass the leader fence (`fence`). When the
//! term ends — the lease could not be renewed within the renew deadline, or another holder was seen —
//! the fence closes first, then the term's runtime is shut down, which drops every task, watch and
//! queued request it started; the process stays up, keeps serving admission and runs for the lease
//! again.

pub mod controllers;
pub use kruise_core::features;
pub mod fence;
pub mod leader;
pub mod liveness;
pub mod throttle;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::features::Gate;

use anyhow::Context;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum_server::tls_rustls::RustlsConfig;
use clap::Parser;
use kruise_webhook::certctl;
use kruise_webhook::configuration::Target;
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

/// Command-line flags.
#[derive(Parser, Debug, Clone)]
#[command(
    name = "kruise-manager",
    version,
    about = "kruise-rs manager: apps.kruise.io webhooks and controllers"
)]
pub struct Args {
    /// Kubeconfig file; without it, the in-cluster config (or $KUBECONFIG) is used.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// The manager's namespace: webhook certificate Secret and leader election Lease live here.
    #[arg(long, env = "POD_NAMESPACE", default_value = "kruise-system")]
    pub namespace: String,
    /// Elect a leader among replicas; only the leader runs controllers.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Name of the leader election Lease.
    #[arg(long, default_value = "kruise-manager")]
    pub leader_election_id: String,
    /// Namespace of the leader election Lease (default: --namespace).
    #[arg(long)]
    pub leader_election_namespace: Option<String>,
    /// Lease duration in seconds.
    #[arg(long, default_value_t = 15)]
    pub leader_election_lease_seconds: u64,
    /// Identity in the Lease (default: hostname-random).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Prometheus metrics address (/metrics). All interfaces by default, so that Prometheus can scrape
    /// it in a cluster; `:PORT` means all interfaces too.
    #[arg(long, default_value = "0.0.0.0:8080", value_parser = kruise_core::flags::parse_listen_addr)]
    pub metrics_addr: SocketAddr,
    /// Health address (/healthz, /readyz), all interfaces by default so that the kubelet's probes reach
    /// it.
    #[arg(long, alias = "health-probe-addr", default_value = "0.0.0.0:8000", value_parser = kruise_core::flags::parse_listen_addr)]
    pub health_addr: SocketAddr,
    /// Webhook HTTPS port.
    #[arg(long, env = "WEBHOOK_PORT", default_value_t = 9876)]
    pub webhook_port: u16,
    /// Address the webhook server binds.
    #[arg(long, default_value = "0.0.0.0")]
    pub webhook_bind_address: std::net::IpAddr,
    /// Host the apiserver calls the webhook at (URL form, e.g. 127.0.0.1); without it the webhook is
    /// reached through the Service <webhook-service>.<namespace>.svc. `HOST:PORT` names a port other
    /// than --webhook-port (a balancer in front of several replicas).
    #[arg(long, env = "WEBHOOK_HOST")]
    pub webhook_host: Option<String>,
    /// Requests one HTTP/2 connection of the webhook server carries at once (the apiserver opens
    /// more connections beyond it, which a Service spreads over the replicas).
    #[arg(long, default_value_t = kruise_webhook::server::DEFAULT_MAX_CONCURRENT_STREAMS)]
    pub webhook_max_concurrent_streams: u32,
    /// Service in front of the webhook (in-cluster).
    #[arg(long, env = "SERVICE_NAME", default_value = "kruise-webhook-service")]
    pub webhook_service: String,
    /// Secret holding the webhook certificates.
    #[arg(long, env = "SECRET_NAME", default_value = "kruise-webhook-certs")]
    pub webhook_secret: String,
    /// Renew certificates expiring sooner than this (d, m = 30 days, y).
    #[arg(long, env = "CERTS_RENEW_BEFORE", default_value = "6m")]
    pub certs_renew_before: String,
    /// What the apiserver does with a Pod when the SidecarSet injection webhook (mpod.kb.io) is
    /// unreachable or cannot decide: Ignore admits it without sidecars (reported later), Fail rejects
    /// it. OpenKruise hard-codes Fail; Ignore is the default so that a webhook outage never stops Pod
    /// creation.
    #[arg(long, env = "WEBHOOK_CONFIGURATION_FAILURE_POLICY_PODS", default_value = "Ignore", value_parser = ["Ignore", "Fail"])]
    pub pod_webhook_failure_policy: String,
    /// What the apiserver does with the deletion or eviction of a Pod a PodUnavailableBudget guards
    /// (labelled `policy.kruise.io/guarded`; an eviction in a namespace holding a budget) when the
    /// webhook is unreachable: Fail keeps the budget while the manager is down, Ignore admits it.
    /// Without `PodUnavailableBudgetDeleteGate`, these follow --pod-webhook-failure-policy.
    #[arg(long, env = "WEBHOOK_CONFIGURATION_FAILURE_POLICY_GUARDED_PODS", default_value = "Fail", value_parser = ["Ignore", "Fail"])]
    pub pod_webhook_guarded_failure_policy: String,
    /// The apiserver's deadline for one Pod admission call to the SidecarSet injection webhook.
    #[arg(long, default_value_t = kruise_webhook::configuration::POD_WEBHOOK_TIMEOUT_SECONDS, value_parser = clap::value_parser!(i32).range(1..=30))]
    pub pod_webhook_timeout_seconds: i32,
    /// Read-your-writes admission: before deciding, the Pod webhooks make sure (one consistent
    /// metadata list per policy kind, shared by concurrent admissions) that their caches show every
    /// SidecarSet, WorkloadSpread, PodUnavailableBudget, PersistentPodState and PodProbeMarker
    /// written before the request, waiting at most --webhook-read-your-writes-timeout. false decides
    /// on the caches as they are (a policy created an instant before a Pod may miss it).
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value_t = true, action = clap::ArgAction::Set)]
    pub webhook_read_your_writes: bool,
    /// How long after its arrival an admission may wait for the caches (a Go duration); past it, it
    /// is decided on what is cached, as with the check off. At most 40% of
    /// --pod-webhook-timeout-seconds.
    #[arg(long, default_value = "2s", value_parser = parse_go_duration)]
    pub webhook_read_your_writes_timeout: Duration,
    /// The apiserver's deadline for the apps.kruise.io defaulting and validation webhooks.
    #[arg(long, default_value_t = kruise_webhook::configuration::RESOURCE_WEBHOOK_TIMEOUT_SECONDS, value_parser = clap::value_parser!(i32).range(1..=30))]
    pub webhook_timeout_seconds: i32,
    /// Period of the webhook certificate and configuration resync, in seconds.
    #[arg(long, default_value_t = 60)]
    pub webhook_resync_seconds: u64,
    /// How long the webhook server keeps answering after SIGTERM (a Go duration), with `/readyz`
    /// failing, before it stops: the time the apiserver needs to learn that this replica's endpoint
    /// is gone (kube-apiserver's own `--shutdown-delay-duration`). Without it, admission calls sent
    /// to a replica that is stopping (a rolling upgrade, a drained node) fail, and Pods are admitted
    /// without their sidecars. The chart sets it (`webhookConfiguration.shutdownDelay`); 0 stops at
    /// once.
    #[arg(long, default_value = "0s", value_parser = parse_go_duration)]
    pub webhook_shutdown_delay: Duration,
    /// Deadline of every apiserver request other than a watch, in seconds: a request on a connection
    /// that stopped answering fails after it instead of waiting forever.
    #[arg(long, default_value_t = 30)]
    pub kube_api_timeout_seconds: u64,
    /// Longest life of one apiserver watch, in seconds: the apiserver ends each watch after it (with
    /// a bookmark just before) and the watch resumes from where it was, so a healthy watch is never
    /// silent longer, and a connection silent for longer than this or the request deadline is closed
    /// as dead (an apiserver gone behind a load balancer, an expired NAT entry).
    #[arg(long, default_value_t = 25, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub watch_timeout_seconds: u64,
    /// A leader whose watch of some resource has made no progress for this long, while it keeps
    /// trying, steps down so that a replica that can see the cluster leads; `/readyz` turns 503 when
    /// a watch of the Pod webhook is stale as long. Must exceed the watch timeout plus 5 s.
    #[arg(long, default_value_t = 60)]
    pub watch_stale_seconds: u64,
    /// Client-side limit of requests per second to the apiserver (OpenKruise: --rest-config-qps).
    /// The default lets a 1,000-Pod rollout go as fast as the apiserver serves it (docs/sizing.md);
    /// the apiserver's API Priority and Fairness, not this limit, protects it.
    #[arg(long, alias = "rest-config-qps", default_value_t = 500.0)]
    pub kube_api_qps: f64,
    /// Client-side burst of requests to the apiserver (OpenKruise: --rest-config-burst).
    #[arg(long, alias = "rest-config-burst", default_value_t = 1000)]
    pub kube_api_burst: u32,
    /// Requests the controllers have in flight to the apiserver at once, watches aside. Over HTTP/1.1
    /// each takes a connection of its own (docs/sizing.md): the bound keeps them few and shares them
    /// fairly between controllers.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..))]
    pub kube_api_max_in_flight: u16,
    /// Concurrent reconciles per workload controller.
    #[arg(long, default_value_t = 3)]
    pub cloneset_workers: u16,
    #[arg(long, default_value_t = 3)]
    pub statefulset_workers: u16,
    #[arg(long, default_value_t = 3)]
    pub sidecarset_workers: u16,
    #[arg(long, default_value_t = 3)]
    pub uniteddeployment_workers: u16,
    #[arg(long, default_value_t = 3)]
    pub broadcastjob_workers: u16,
    #[arg(long, default_value_t = 3)]
    pub advancedcronjob_workers: u16,
    #[arg(long, default_value_t = 3)]
    pub persistentpodstate_workers: u16,
    #[arg(long, default_value_t = 3)]
    pub podunavailablebudget_workers: u16,
    #[arg(long, default_value_t = 3)]
    pub resourcedistribution_workers: u16,
    /// OpenKruise v1.9 runs 10 EphemeralJob reconciles at once and has no flag for it; this one is
    /// kruise-rs's, with that default.
    #[arg(long, default_value_t = 10)]
    pub ephemeraljob_workers: u16,
    /// Bind BroadcastJob Pods to their node through required node affinity and let the scheduler
    /// place them; false sets `spec.nodeName` directly (OpenKruise: --assign-bcj-pods-by-scheduler).
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value_t = true, action = clap::ArgAction::Set)]
    pub assign_bcj_pods_by_scheduler: bool,
    #[arg(long, default_value_t = 3)]
    pub daemonset_workers: u16,
    /// Concurrent reconciles of the other controllers, OpenKruise v1.9's flags and defaults.
    #[arg(long, default_value_t = 3)]
    pub crr_workers: u16,
    #[arg(long, default_value_t = 3)]
    pub imagepulljob_workers: u16,
    #[arg(long, default_value_t = 3)]
    pub nodeimage_workers: u16,
    #[arg(long, default_value_t = 3)]
    pub nodepodprobe_workers: u16,
    #[arg(long, default_value_t = 3)]
    pub podprobemarker_workers: u16,
    #[arg(long, default_value_t = 3)]
    pub sidecarterminator_workers: u16,
    #[arg(long, default_value_t = 3)]
    pub workloadspread_workers: u16,
    /// Seconds added to the TTL of the NodeImage tags an Always ImagePullJob asks for, so that a tag
    /// outlives its job a while (OpenKruise's flag: 0 to 31 days, 300 by default).
    #[arg(long, default_value_t = kruise_core::imagepulljob::DEFAULT_TTL_SECONDS_FOR_ALWAYS, allow_hyphen_values = true)]
    pub default_ttlseconds_for_always_nodeimage: i64,
    /// Seconds a controller waits for its own write to show in its cache before it stops waiting
    /// (upstream waits 5 minutes, then, without a feature gate, forever).
    #[arg(long, default_value_t = 300)]
    pub expectation_timeout_seconds: u64,
    /// Leave Pods in PreparingDelete out of every CloneSet's scale arithmetic.
    #[arg(long, default_value_t = false)]
    pub cloneset_scaling_exclude_preparing_delete: bool,
    /// Log format: text or json (OpenKruise: --logging-format, where "" means text).
    #[arg(long, alias = "logging-format", default_value = "text", value_parser = ["text", "json", ""])]
    pub log_format: String,
    /// Log verbosity as OpenKruise's (klog) `--v`: 0–2 info, 3–5 debug for kruise-rs, 6 and more debug
    /// everywhere. `RUST_LOG` overrides it.
    #[arg(long = "v", default_value_t = 0)]
    pub verbosity: u8,

    // ---- OpenKruise's manager command line, accepted as it is written in its chart.
    /// OpenKruise's spelling of --leader-elect (`--enable-leader-election` alone means true).
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub enable_leader_election: Option<bool>,
    /// Lease duration as a Go duration (`15s`); overrides --leader-election-lease-seconds.
    #[arg(long, value_parser = parse_go_duration)]
    pub leader_election_lease_duration: Option<Duration>,
    /// How long the leader keeps trying to renew before it steps down (default 2/3 of the lease).
    /// Its writes are fenced to this deadline.
    #[arg(long, value_parser = parse_go_duration)]
    pub leader_election_renew_deadline: Option<Duration>,
    /// Interval between lease attempts (default 1/7 of the lease, at least 1 s).
    #[arg(long, value_parser = parse_go_duration)]
    pub leader_election_retry_period: Option<Duration>,
    /// OpenKruise's feature gates, with its names and defaults (`A=true,B=false`, `AllAlpha=true`);
    /// gates kruise-rs does not implement are reported at start-up, and an unknown one stops it.
    /// Parsed once, here. See README.
    #[arg(long, default_value = "", value_parser = parse_feature_gates)]
    pub feature_gates: features::FeatureGates,
    /// OpenKruise's informer resync period. kruise-rs reconciles from watches and requeues what it
    /// waits for; a non-zero period is accepted and reported as having no effect.
    #[arg(long, value_parser = parse_go_duration)]
    pub sync_period: Option<Duration>,
    /// OpenKruise's Go profiler switch; kruise-rs has no pprof endpoint (reported when true).
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub enable_pprof: Option<bool>,
    /// OpenKruise's list of workload kinds whose WorkloadSpread status is kept per version. v1.9.0
    /// reads only the flag's default (`deployment,replicaset`); kruise-rs keeps Deployments' and
    /// ReplicaSets' per version, as OpenKruise v1.9.0 does. Accepted; a value other than the
    /// default is reported as having no effect.
    #[arg(long)]
    pub ws_enabled_versioned_status: Option<String>,
    /// OpenKruise's pprof address (accepted; see --enable-pprof).
    #[arg(long)]
    pub pprof_addr: Option<String>,
    /// Directory of externally managed webhook certificates (OpenKruise's WEBHOOK_CERT_DIR, used with
    /// the EnableExternalCerts gate). kruise-rs reads external certificates from the Secret
    /// --webhook-secret instead (cert-manager's keys), so a directory has no effect.
    #[arg(long, env = "WEBHOOK_CERT_DIR")]
    pub webhook_cert_dir: Option<PathBuf>,
}

/// Leader election timing resolved from either spelling of the flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseTiming {
    pub lease: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl Args {
    /// Whether to run leader election (either spelling).
    pub fn leader_election(&self) -> bool {
        self.enable_leader_election.unwrap_or(self.leader_elect)
    }

    /// The lease timing; the renew deadline must be shorter than the lease and the retry period
    /// shorter than the renew deadline, or the fence could outlive the lease.
    pub fn lease_timing(&self) -> anyhow::Result<LeaseTiming> {
        let lease = self
            .leader_election_lease_duration
            .unwrap_or(Duration::from_secs(self.leader_election_lease_seconds));
        let renew_deadline = self.leader_election_renew_deadline.unwrap_or(lease * 2 / 3);
        let retry_period = self
            .leader_election_retry_period
            .unwrap_or(Duration::from_secs((lease.as_secs() / 7).max(1)));
        anyhow::ensure!(
            renew_deadline < lease,
            "--leader-election-renew-deadline ({renew_deadline:?}) must be shorter than the lease duration ({lease:?})"
        );
        anyhow::ensure!(
            retry_period < renew_deadline,
            "--leader-election-retry-period ({retry_period:?}) must be shorter than the renew deadline ({renew_deadline:?})"
        );
        Ok(LeaseTiming {
            lease,
            renew_deadline,
            retry_period,
        })
    }

    /// How long an admission may wait for its caches: --webhook-read-your-writes-timeout, at most
    /// 40% of the Pod webhook's deadline (the rest is the decision's, WorkloadSpread placement
    /// included).
    pub fn read_your_writes_wait(&self) -> Duration {
        let deadline =
            Duration::from_secs(u64::try_from(self.pod_webhook_timeout_seconds).unwrap_or(5));
        self.webhook_read_your_writes_timeout.min(deadline * 2 / 5)
    }

    /// How long a Pod admission's decision may take once its caches are read: the Pod webhook's
    /// deadline less the longest wait for the caches ([`Args::read_your_writes_wait`]).
    pub fn decision_deadline(&self) -> Duration {
        let deadline =
            Duration::from_secs(u64::try_from(self.pod_webhook_timeout_seconds).unwrap_or(5));
        deadline.saturating_sub(self.read_your_writes_wait())
    }

    /// The watch lifetimes, and the bound past which a watch is stale; the bound must outlast a
    /// healthy watch's longest silence, or healthy watches would be called stale.
    pub fn watch_timing(&self) -> anyhow::Result<(liveness::WatchTiming, Duration)> {
        let timing = liveness::WatchTiming::new(Duration::from_secs(self.watch_timeout_seconds));
        let stale = Duration::from_secs(self.watch_stale_seconds);
        anyhow::ensure!(
            stale > timing.idle,
            "--watch-stale-seconds ({}) must be longer than --watch-timeout-seconds plus 5 s ({:?})",
            self.watch_stale_seconds,
            timing.idle
        );
        Ok((timing, stale))
    }

    /// `--default-ttlseconds-for-always-nodeimage`, refused out of its range as OpenKruise refuses it.
    pub fn default_ttl_for_always_nodeimage(&self) -> anyhow::Result<i32> {
        kruise_core::imagepulljob::default_ttl_for_always(
            self.default_ttlseconds_for_always_nodeimage,
        )
        .map_err(anyhow::Error::msg)
    }

    /// The feature gates (parsed with the command line: a bad one stopped the manager).
    pub fn gates(&self) -> &features::FeatureGates {
        &self.feature_gates
    }

    /// What on this command line kruise-rs accepts but cannot honour, one line each.
    pub fn ineffective(&self) -> anyhow::Result<Vec<String>> {
        let mut lines = self.gates().unsupported();
        if self.sync_period.is_some_and(|p| !p.is_zero()) {
            lines.push(
                "--sync-period has no effect: kruise-rs reconciles from watches and requeues what it waits for"
                    .into(),
            );
        }
        if self.enable_pprof == Some(true) {
            lines
                .push("--enable-pprof has no effect: kruise-rs has no Go profiler endpoint".into());
        }
        if let Some(kinds) = &self.ws_enabled_versioned_status {
            let mut named: Vec<String> = kinds
                .split(',')
                .map(|k| k.trim().to_lowercase())
                .filter(|k| !k.is_empty())
                .collect();
            named.sort();
            named.dedup();
            if named != ["deployment", "replicaset"] && named != ["deployment"] {
                lines.push(format!(
                    "--ws-enabled-versioned-status={kinds} has no effect: kruise-rs keeps WorkloadSpread status per version for Deployments and ReplicaSets only, as OpenKruise v1.9.0 does (it reads only the flag's default)"
                ));
            }
        }
        if let Some(dir) = &self.webhook_cert_dir {
            lines.push(format!(
                "WEBHOOK_CERT_DIR={} has no effect: kruise-rs reads its webhook certificates from the Secret --webhook-secret (cert-manager's, with EnableExternalCerts=true)",
                dir.display()
            ));
        }
        Ok(lines)
    }
}

/// `--feature-gates`, parsed by OpenKruise's rules (an unknown gate or a value that is not a
/// boolean is refused, naming it).
fn parse_feature_gates(flag: &str) -> Result<features::FeatureGates, String> {
    features::FeatureGates::parse(flag)
}

/// A Go `time.Duration` string: `0`, `300ms`, `15s`, `1m30s`, `2h`.
fn parse_go_duration(value: &str) -> Result<Duration, String> {
    let bad = || format!("{value:?} is not a duration such as 15s, 1m30s or 500ms");
    if value == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = Duration::ZERO;
    let mut rest = value;
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let number: f64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        total += Duration::try_from_secs_f64(number * seconds).map_err(|_| bad())?;
        rest = &rest[unit_len..];
    }
    Ok(total)
}

impl Args {
    fn identity(&self) -> String {
        self.identity.clone().unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .unwrap_or_else(|_| "kruise-manager".into());
            let mut suffix = [0u8; 4];
            rand::RngCore::fill_bytes(&mut rand::rng(), &mut suffix);
            format!("{}_{}", host.trim(), hex::encode(suffix))
        })
    }

    fn target(&self) -> Target {
        match &self.webhook_host {
            Some(host) => {
                let (host, port) = split_host_port(host, self.webhook_port);
                Target::Url { host, port }
            }
            None => Target::Service {
                namespace: self.namespace.clone(),
                name: self.webhook_service.clone(),
            },
        }
    }
}

/// `HOST:PORT` (or `[IPv6]:PORT`) into its parts; a bare host (an IPv6 address included) gets
/// `default_port`.
fn split_host_port(value: &str, default_port: u16) -> (String, u16) {
    if let Some(rest) = value.strip_prefix('[')
        && let Some((host, port)) = rest.split_once("]:")
        && let Ok(port) = port.parse()
    {
        return (host.to_owned(), port);
    }
    match value.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => match port.parse() {
            Ok(port) => (host.to_owned(), port),
            Err(_) => (value.to_owned(), default_port),
        },
        _ => (
            value
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            default_port,
        ),
    }
}

/// The log filter for a klog-style verbosity (`--v`).
fn log_filter(verbosity: u8) -> &'static str {
    match verbosity {
        0..=2 => "info,kube_runtime=warn",
        3..=5 => {
            "info,kube_runtime=warn,kruise_manager=debug,kruise_controllers=debug,kruise_webhook=debug,kruise_core=debug"
        }
        _ => "debug",
    }
}

pub fn init_logs(format: &str, verbosity: u8) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(log_filter(verbosity)));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    let _ = if format == "json" {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

async fn kube_config(args: &Args) -> anyhow::Result<kube::Config> {
    match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("reading {}", path.display()))?;
            Ok(
                kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                    .await?,
            )
        }
        None => kube::Config::infer()
            .await
            .context("no kubeconfig and not in a cluster"),
    }
}

/// The clients of one manager. Each has its own connection pool: a client belongs to the runtime
/// whose tasks drive its connections. Every one closes a connection that has gone silent and bounds
/// its watches (`liveness`).
#[derive(Clone)]
struct Clients {
    config: kube::Config,
    throttle: throttle::ThrottleLayer,
    in_flight: throttle::InFlightLayer,
    timeout: fence::TimeoutLayer,
    watch_timing: liveness::WatchTiming,
}

impl Clients {
    fn new(mut config: kube::Config, args: &Args) -> anyhow::Result<Self> {
        let request_timeout = Duration::from_secs(args.kube_api_timeout_seconds.max(1));
        let (watch_timing, _) = args.watch_timing()?;
        // A read pending for longer than any healthy silence means the peer is gone; a write (a new
        // request on a pooled connection) starts the wait afresh.
        config.read_timeout = Some(watch_timing.read_timeout(request_timeout));
        config.reset_reader_on_write = true;
        Ok(Self {
            config,
            throttle: throttle::ThrottleLayer::new(args.kube_api_qps, args.kube_api_burst),
            in_flight: throttle::InFlightLayer::new(usize::from(args.kube_api_max_in_flight)),
            timeout: fence::TimeoutLayer::new(request_timeout),
            watch_timing,
        })
    }

    /// Rate-limited, with request deadlines: webhooks and certificates on every replica. Its watches
    /// (the Pod webhook's caches) report to `health`.
    fn shared(&self, health: &liveness::WatchHealth) -> anyhow::Result<Client> {
        Ok(kube::client::ClientBuilder::try_from(self.config.clone())
            .context("building the client")?
            .with_layer(&liveness::WatchLayer::new(
                self.watch_timing,
                health.clone(),
            ))
            .with_layer(&self.timeout)
            .with_layer(&self.throttle)
            .build())
    }

    /// For the lease alone: never rate-limited (a renewal must not queue behind a backlog of
    /// controller writes), with request deadlines; it never watches. The read-your-writes probes
    /// use one too: an admission must not queue behind a rollout's writes, and coalescing bounds
    /// them to one list per policy kind in flight.
    fn election(&self) -> anyhow::Result<Client> {
        Ok(kube::client::ClientBuilder::try_from(self.config.clone())
            .context("building the client")?
            .with_layer(&self.timeout)
            .build())
    }

    /// The leader's: rate-limited (the same bucket as `shared`), at most `--kube-api-max-in-flight`
    /// requests at once, every write checked against the fence after both waits, request deadlines;
    /// its watches (the controllers') report to `health`.
    /// The webhooks' client (`shared`) is not bounded: an admission lookup must not queue behind a
    /// rollout's writes.
    fn leader(
        &self,
        fence: &fence::LeaderFence,
        health: &liveness::WatchHealth,
    ) -> anyhow::Result<Client> {
        Ok(kube::client::ClientBuilder::try_from(self.config.clone())
            .context("building the client")?
            .with_layer(&liveness::WatchLayer::new(
                self.watch_timing,
                health.clone(),
            ))
            .with_layer(&self.timeout)
            .with_layer(&fence::FenceLayer::new(fence.clone()))
            .with_layer(&self.in_flight)
            .with_layer(&self.throttle)
            .build())
    }
}

/// What `/readyz` checks: the webhook server listens, the Pod webhook's caches have loaded, and its
/// watches are current.
#[derive(Clone)]
struct Readiness {
    webhook_serving: Arc<AtomicBool>,
    /// Set once the injector has started (after the health endpoint, so a slow start is observable).
    pods: Arc<std::sync::OnceLock<kruise_webhook::pod::PodInjector>>,
    watches: liveness::WatchHealth,
    stale_after: Duration,
}

impl Readiness {
    /// `None` when ready, else why not.
    fn problem(&self) -> Option<String> {
        if !self.webhook_serving.load(Ordering::SeqCst) {
            return Some("webhook server not serving yet".into());
        }
        if !self.pods.get().is_some_and(|pods| pods.caches_loaded()) {
            return Some(
                "the Pod webhook's SidecarSet and Namespace caches are not loaded yet".into(),
            );
        }
        let stale = self
            .watches
            .stale(std::time::Instant::now(), self.stale_after);
        if let Some((watch, quiet)) = stale.first() {
            return Some(format!(
                "the Pod webhook's watch {watch} has made no progress for {}s",
                quiet.as_secs()
            ));
        }
        None
    }
}

/// Runs the manager until SIGTERM/SIGINT. Losing leadership ends the leader's term, not the process.
pub async fn run(args: Args) -> anyhow::Result<()> {
    kruise_webhook::server::install_crypto_provider();
    let gates = args.gates();
    args.lease_timing()?;
    args.default_ttl_for_always_nodeimage()?;
    for line in args.ineffective()? {
        tracing::warn!("{line}");
    }
    let (_, stale_after) = args.watch_timing()?;
    let clients = Clients::new(kube_config(&args).await?, &args)?;
    let metrics = ManagerMetrics::register();
    let webhook_watches = liveness::WatchHealth::counting(metrics.watch_idle_restarts.clone());
    let client = clients.shared(&webhook_watches)?;
    let readiness = Readiness {
        webhook_serving: Arc::new(AtomicBool::new(false)),
        pods: Arc::new(std::sync::OnceLock::new()),
        watches: webhook_watches.clone(),
        stale_after,
    };
    // Metrics and health first, so a slow start is observable.
    serve_observability(&args, &metrics, &readiness).await?;

    // The webhook server and its certificates, on every replica.
    let settings = certificate_settings(&args, gates)?;
    // One watch of each kind the webhooks read, for the whole process: the Pod webhook (every
    // replica) and the controllers (the leader) read them.
    let mut process_caches =
        kruise_controllers::driver::caches::ProcessCaches::start(client.clone());
    // Disruptions are decided on the process's budget cache (and its own last writes), for the
    // webhook and, with PodUnavailableBudgetUpdateGate, the in-place update engine of every
    // workload alike; a refusal leaves upstream's PubPreventPodDeletion Warning on the Pod.
    let disruptions = kruise_controllers::disruptions::Disruptions::counted(
        client.clone(),
        metrics.webhook.budget_commit.clone(),
    )
    .with_cache(process_caches.budgets.store().clone())
    .with_refusal_events()
    .with_deadline(args.decision_deadline());
    process_caches.update_budgets = gates
        .enabled(Gate::PodUnavailableBudgetUpdateGate)
        .then(|| disruptions.clone());
    process_caches.disruptions = Some(disruptions.clone());
    // One commit of the WorkloadSpreads' slots, for the Pod webhook's placements and the
    // controller's (of Pods placed after their creation) alike: they queue behind one write.
    process_caches.workloadspread_slots = gates.enabled(Gate::WorkloadSpread).then(|| {
        kruise_controllers::workloadspread::slots::on_apiserver(
            &client,
            &args.namespace,
            Some(process_caches.workloadspreads.store().clone()),
            metrics.webhook.workloadspread_commit.clone(),
        )
    });
    let (pods, policy) = admission(
        &args,
        gates,
        &clients,
        &client,
        &process_caches,
        &metrics.webhook,
        settings.pod_webhook.failure_policy,
    )?;
    let policy = policy.with_disruptions(disruptions);
    let _ = readiness.pods.set(pods.clone());
    let first = ensure_first_certificate(&client, &settings, &metrics.webhook).await?;
    let tls = RustlsConfig::from_pem(
        first.cert.clone().into_bytes(),
        first.key.clone().into_bytes(),
    )
    .await
    .context("loading the webhook certificate")?;
    let handle =
        serve_webhooks(&args, gates, &client, &tls, &metrics.webhook, pods, policy).await?;
    readiness.webhook_serving.store(true, Ordering::SeqCst);
    let shutdown: Shutdown = futures::FutureExt::shared(Box::pin(shutdown_signal()));
    let lame_duck = spawn_lame_duck(
        shutdown.clone(),
        readiness.webhook_serving.clone(),
        args.webhook_shutdown_delay,
    );

    let outcome = lead(Leading {
        args: &args,
        clients: &clients,
        client: &client,
        settings: &settings,
        tls: &tls,
        first_certificate: first,
        metrics: &metrics,
        webhook_watches: &webhook_watches,
        stale_after,
        process_caches: &process_caches,
        shutdown: shutdown.clone(),
    })
    .await;
    // Stopping on a signal: the webhooks keep answering until the lame-duck delay since the signal
    // is over (the controllers' stop and the lease's release ran meanwhile).
    lame_duck.finish().await;
    handle.graceful_shutdown(Some(WEBHOOK_DRAIN));
    drain_webhook_connections(&handle).await;
    outcome
}

/// How long the webhook server's connections get to finish after the lame-duck delay.
const WEBHOOK_DRAIN: Duration = Duration::from_secs(5);

/// Waits (at most [`WEBHOOK_DRAIN`] and a little) until the webhook server's connections are closed:
/// the graceful shutdown tells each one to finish (an HTTP/2 GOAWAY, which the apiserver answers by
/// moving to a new connection and retrying the requests the server did not take) and closes it once
/// its requests are answered. Returning before that ends the process under them, and the apiserver
/// reads EOF on a request it had just sent: a Pod admitted without its sidecar (`failurePolicy:
/// Ignore`) or refused (`Fail`).
async fn drain_webhook_connections(handle: &axum_server::Handle<std::net::SocketAddr>) {
    let drained = async {
        while handle.connection_count() > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    if tokio::time::timeout(WEBHOOK_DRAIN + Duration::from_millis(500), drained)
        .await
        .is_err()
    {
        tracing::warn!(
            connections = handle.connection_count(),
            "webhook connections still open after the drain; stopping anyway"
        );
    }
}

/// The webhook server's last stretch after SIGTERM/SIGINT (`--webhook-shutdown-delay`).
struct LameDuck {
    shutdown: Shutdown,
    task: tokio::task::JoinHandle<()>,
}

impl LameDuck {
    /// Waits out the delay if the signal came (the one future `lead` stopped on); otherwise (the
    /// manager ends for another reason) there is nothing to wait for.
    async fn finish(self) {
        if self.shutdown.peek().is_some() {
            let _ = self.task.await;
        } else {
            self.task.abort();
        }
    }
}

/// On SIGTERM/SIGINT, makes `/readyz` fail (`webhook_serving` false: the replica's endpoint turns
/// not ready) and then waits `delay`, while the webhook server goes on answering.
fn spawn_lame_duck(
    shutdown: Shutdown,
    webhook_serving: Arc<AtomicBool>,
    delay: Duration,
) -> LameDuck {
    let task = tokio::spawn({
        let shutdown = shutdown.clone();
        async move {
            shutdown.await;
            webhook_serving.store(false, Ordering::SeqCst);
            if !delay.is_zero() {
                tracing::info!(
                    delay_seconds = delay.as_secs_f64(),
                    "stopping: the webhooks answer for the shutdown delay while this replica's endpoint goes"
                );
                tokio::time::sleep(delay).await;
            }
        }
    });
    LameDuck { shutdown, task }
}

/// The manager's metrics, registered once, and the handles that move them.
struct ManagerMetrics {
    registry: Arc<Registry>,
    watch_idle_restarts: Counter<u64, std::sync::atomic::AtomicU64>,
    webhook: kruise_webhook::metrics::Metrics,
    leader: Gauge<i64, std::sync::atomic::AtomicI64>,
    controllers: Arc<kruise_controllers::metrics::Metrics>,
    stepdowns: Counter<u64, std::sync::atomic::AtomicU64>,
    stale_watches: Gauge<i64, std::sync::atomic::AtomicI64>,
}

impl ManagerMetrics {
    fn register() -> Self {
        let mut registry = Registry::default();
        let watch_idle_restarts = registered(
            &mut registry,
            "kruise_manager_watch_idle_restarts",
            "Watches abandoned and restarted because nothing (not even a bookmark) came within their idle deadline",
        );
        let webhook = kruise_webhook::metrics::Metrics::register(&mut registry);
        let leader = registered(
            &mut registry,
            "kruise_manager_leader",
            "1 while this replica holds the leader lease",
        );
        let controllers = kruise_controllers::metrics::Metrics::register(&mut registry);
        let stepdowns = registered(
            &mut registry,
            "kruise_manager_stale_watch_stepdowns",
            "Leadership terms ended because a watch of the leader made no progress for --watch-stale-seconds",
        );
        let stale_watches = registered(
            &mut registry,
            "kruise_manager_stale_watches",
            "Watches of the current leader term without progress for --watch-stale-seconds while still tried",
        );
        Self {
            registry: Arc::new(registry),
            watch_idle_restarts,
            webhook,
            leader,
            controllers,
            stepdowns,
            stale_watches,
        }
    }
}

/// A new metric of the manager's own, registered in `registry` as `name` with `help`.
fn registered<M>(registry: &mut Registry, name: &str, help: &str) -> M
where
    M: prometheus_client::registry::Metric + Clone + Default,
{
    let metric = M::default();
    registry.register(name, help, metric.clone());
    metric
}

/// Serves `/metrics` and `/healthz` + `/readyz` on their addresses (on tasks of their own).
async fn serve_observability(
    args: &Args,
    metrics: &ManagerMetrics,
    readiness: &Readiness,
) -> anyhow::Result<()> {
    let metrics_app = Router::new()
        .route("/metrics", get(metrics_handler))
        .with_state(metrics.registry.clone());
    let metrics_listener = tokio::net::TcpListener::bind(args.metrics_addr)
        .await
        .with_context(|| format!("binding metrics address {}", args.metrics_addr))?;
    tokio::spawn(async move { axum::serve(metrics_listener, metrics_app).await });
    let health_app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(readiness.clone());
    let health_listener = tokio::net::TcpListener::bind(args.health_addr)
        .await
        .with_context(|| format!("binding health address {}", args.health_addr))?;
    tokio::spawn(async move { axum::serve(health_listener, health_app).await });
    Ok(())
}

/// What the certificate controller keeps written: the Secret, the webhook configurations and the
/// CRDs' conversion, from the command line.
fn certificate_settings(
    args: &Args,
    gates: &features::FeatureGates,
) -> anyhow::Result<certctl::Settings> {
    let failure_policy: kruise_webhook::configuration::FailurePolicy = args
        .pod_webhook_failure_policy
        .parse()
        .map_err(anyhow::Error::msg)
        .context("--pod-webhook-failure-policy")?;
    let guarded_failure_policy = if gates.enabled(Gate::PodUnavailableBudgetDeleteGate) {
        args.pod_webhook_guarded_failure_policy
            .parse()
            .map_err(anyhow::Error::msg)
            .context("--pod-webhook-guarded-failure-policy")?
    } else {
        failure_policy
    };
    Ok(certctl::Settings {
        namespace: args.namespace.clone(),
        secret_name: args.webhook_secret.clone(),
        target: args.target(),
        renew_before: kruise_webhook::certs::parse_renew_before(&args.certs_renew_before)
            .map_err(anyhow::Error::msg)
            .context("--certs-renew-before")?,
        resync: Duration::from_secs(args.webhook_resync_seconds.max(1)),
        pod_webhook: kruise_webhook::configuration::PodWebhook {
            failure_policy,
            excluded_namespaces: vec![args.namespace.clone()],
            timeout_seconds: args.pod_webhook_timeout_seconds,
            guarded_failure_policy,
            // Filled from the budget cache before each write (certctl).
            budget_namespaces: Vec::new(),
        },
        resource_timeout_seconds: args.webhook_timeout_seconds,
        external: gates.enabled(Gate::EnableExternalCerts),
    })
}

/// The Pod webhook and the policy webhooks, on the process's caches, with what the gates turn on.
fn admission(
    args: &Args,
    gates: &features::FeatureGates,
    clients: &Clients,
    client: &Client,
    process_caches: &kruise_controllers::driver::caches::ProcessCaches,
    webhook_metrics: &kruise_webhook::metrics::Metrics,
    failure_policy: kruise_webhook::configuration::FailurePolicy,
) -> anyhow::Result<(
    kruise_webhook::pod::PodInjector,
    kruise_webhook::policy::Policy,
)> {
    let pods = kruise_webhook::pod::PodInjector::from_stores(
        process_caches.sidecarsets.store().clone(),
        process_caches.namespaces.store().clone(),
        Some(client.clone()),
        kruise_webhook::pod::PodSettings {
            namespace: args.namespace.clone(),
            failure_policy,
            sort_sidecars_by_name: gates.enabled(Gate::EnableSortSidecarContainerByName),
            kruise_pod_readiness_gate: gates.enabled(Gate::KruisePodReadinessGate),
            enhanced_liveness_probe: gates.enabled(Gate::EnhancedLivenessProbe),
        },
    )
    .with_persistent_pod_states(kruise_webhook::persistentpodstate::PodHook::new(
        process_caches.persistentpodstates.store().clone(),
        Some(client.clone()),
        args.namespace.clone(),
    ));
    let budget_gates = policy_gates(gates);
    let pods = if budget_gates.budget_delete || budget_gates.budget_update {
        pods.with_budgets(process_caches.budgets.store().clone())
    } else {
        pods
    };
    let pods = if gates.enabled(Gate::EnablePodProbeMarkerOnServerless) {
        pods.with_probe_markers(process_caches.podprobemarkers.store().clone())
    } else {
        pods
    };
    // WorkloadSpread placement done or given up by 70% of the Pod webhook's deadline after the
    // request arrived (read-your-writes, at most 40%, included): the rest is left to the SidecarSet
    // injection and the answer, so that a slow apiserver never makes the apiserver give up on the
    // webhook (the Pod would be admitted by the failure policy, without its sidecars).
    let pods = if gates.enabled(Gate::WorkloadSpread) {
        pods.with_workloadspreads(
            kruise_webhook::workloadspread::WorkloadSpreads::new(
                Some(client.clone()),
                Some(process_caches.workloadspreads.store().clone()),
                Duration::from_millis(
                    u64::try_from(args.pod_webhook_timeout_seconds).unwrap_or(5) * 700,
                ),
            )
            .with_configuration_namespace(&args.namespace)
            .with_slots(process_caches.workloadspread_slots.clone()),
        )
    } else {
        pods
    };
    let freshness = if args.webhook_read_your_writes {
        Some(kruise_webhook::freshness::Freshness::for_process(
            &clients.election()?,
            process_caches,
            args.read_your_writes_wait(),
            webhook_metrics.freshness.clone(),
        ))
    } else {
        None
    };
    let pods = match &freshness {
        Some(freshness) => pods.with_freshness(freshness.clone()),
        None => pods,
    };
    let policy = kruise_webhook::policy::Policy::new(client.clone(), policy_gates(gates));
    let policy = match &freshness {
        Some(freshness) => policy.with_freshness(freshness.clone(), process_caches.budgets.clone()),
        None => policy,
    };
    Ok((pods, policy))
}

/// Starts the webhook server on `--webhook-bind-address`:`--webhook-port` and waits until it
/// listens; the handle shuts it down.
async fn serve_webhooks(
    args: &Args,
    gates: &features::FeatureGates,
    client: &Client,
    tls: &RustlsConfig,
    webhook_metrics: &kruise_webhook::metrics::Metrics,
    pods: kruise_webhook::pod::PodInjector,
    policy: kruise_webhook::policy::Policy,
) -> anyhow::Result<axum_server::Handle<SocketAddr>> {
    let webhook_addr = SocketAddr::new(args.webhook_bind_address, args.webhook_port);
    let handle = axum_server::Handle::new();
    let limits = kruise_webhook::server::Limits {
        max_concurrent_streams: args.webhook_max_concurrent_streams,
        ..Default::default()
    };
    let serving = kruise_webhook::server::serve_with_limits(
        webhook_addr,
        tls.clone(),
        kruise_webhook::server::router_with(
            webhook_metrics.clone(),
            Some(client.clone()),
            Some(pods),
            &limits,
            kruise_webhook::admission::Gates {
                template_no_defaults: gates.enabled(Gate::TemplateNoDefaults),
                host_network_host_ports: gates
                    .enabled(Gate::DefaultHostNetworkHostPortsInPodTemplates),
                patch_pod_metadata_defaults_allowed: gates
                    .enabled(Gate::SidecarSetPatchPodMetadataDefaultsAllowed),
                resource_distribution: gates.enabled(Gate::ResourceDistributionGate),
                kruise_daemon: gates.enabled(Gate::KruiseDaemon),
                pod_probe_marker: gates.enabled(Gate::PodProbeMarkerGate),
                workload_spread: gates.enabled(Gate::WorkloadSpread),
                image_pull_job: gates.enabled(Gate::ImagePullJobGate),
            },
            policy,
        ),
        handle.clone(),
        limits,
    );
    let server = tokio::spawn(serving);
    if handle.listening().await.is_none() {
        let outcome = server.await;
        anyhow::bail!("the webhook server did not start on {webhook_addr}: {outcome:?}");
    }
    Ok(handle)
}

/// What [`lead`] runs on.
struct Leading<'a> {
    args: &'a Args,
    clients: &'a Clients,
    client: &'a Client,
    settings: &'a certctl::Settings,
    tls: &'a RustlsConfig,
    first_certificate: kruise_webhook::certs::CertBundle,
    metrics: &'a ManagerMetrics,
    webhook_watches: &'a liveness::WatchHealth,
    stale_after: Duration,
    process_caches: &'a kruise_controllers::driver::caches::ProcessCaches,
    shutdown: Shutdown,
}

/// SIGTERM or Ctrl-C, one future shared by everything that stops on it.
type Shutdown =
    futures::future::Shared<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>>;

/// Runs for leadership (alone: leads at once) and, each time it leads, a [`LeaderTerm`], until
/// SIGTERM or Ctrl-C. Only the leader writes the webhook configurations and runs controllers.
async fn lead(leading: Leading<'_>) -> anyhow::Result<()> {
    let Leading {
        args,
        clients,
        client,
        settings,
        tls,
        first_certificate: first,
        metrics,
        webhook_watches,
        stale_after,
        process_caches,
        shutdown,
    } = leading;
    let identity = args.identity();
    let timing = args.lease_timing()?;
    let elector = match args.leader_election() {
        true => Some(leader::Elector::new(
            clients.election()?,
            leader::Config {
                namespace: args
                    .leader_election_namespace
                    .clone()
                    .unwrap_or_else(|| args.namespace.clone()),
                name: args.leader_election_id.clone(),
                identity: identity.clone(),
                lease_duration: timing.lease,
                renew_deadline: timing.renew_deadline,
                retry_period: timing.retry_period,
            },
        )),
        false => None,
    };

    // SIGTERM or Ctrl-C, seen by the wait for leadership and by the term alike: a term is stopped
    // (its controllers finish their reconciles in flight) before the process exits.
    let terms = async {
        loop {
            let fence = fence::LeaderFence::default();
            match &elector {
                Some(elector) => {
                    tracing::info!(%identity, "waiting for leadership");
                    // A standby serves admission too: keep its certificate current (the leader may
                    // rotate it) until it leads, when the certificate controller takes over.
                    tokio::select! {
                        () = elector.acquire(&fence) => {}
                        () = refresh_standby_certificate(client, settings, tls, first.clone(), &metrics.webhook) => {}
                        () = shutdown.clone() => {
                            tracing::info!("shutting down");
                            return Ok::<(), anyhow::Error>(());
                        }
                    }
                }
                None => fence.grant_until(None),
            }
            tracing::info!(%identity, "leading: configuring webhooks and starting controllers");
            metrics.leader.set(1);
            let watches = liveness::WatchHealth::counting(metrics.watch_idle_restarts.clone());
            let mut term = LeaderTerm::start(TermInputs {
                args: args.clone(),
                client: clients.leader(&fence, &watches)?,
                settings: settings.clone(),
                tls: tls.clone(),
                webhook_metrics: metrics.webhook.clone(),
                controller_metrics: metrics.controllers.clone(),
                process_caches: process_caches.clone(),
            })?;
            // A leader that cannot keep its watches current acts on a past it cannot see: it ends
            // its term (with leader election, it also gives the lease up for a replica that can see).
            // Its watches are the term's own and the process-wide caches its controllers read too
            // (SidecarSets, Namespaces), which the webhooks' client opens.
            let stale = async {
                let stale = liveness::WatchHealth::until_any_stale(
                    &[&watches, webhook_watches],
                    stale_after,
                    STALE_CHECK_PERIOD,
                )
                .await;
                metrics
                    .stale_watches
                    .set(i64::try_from(stale.len()).unwrap_or(i64::MAX));
                stale
            };
            let mut stepped_down = false;
            let mut shutting_down = false;
            tokio::select! {
                () = shutdown.clone() => {
                    tracing::info!("shutting down: stopping the controllers");
                    shutting_down = true;
                }
                () = async {
                    match &elector {
                        Some(elector) => elector.hold(&fence).await,
                        None => std::future::pending().await,
                    }
                } => {}
                () = term.ended() => tracing::error!("the leader's work ended unexpectedly"),
                stale = stale => {
                    let watches: Vec<String> = stale
                        .iter()
                        .map(|(watch, quiet)| format!("{watch} ({}s)", quiet.as_secs()))
                        .collect();
                    tracing::error!(
                        ?watches,
                        stale_after_seconds = stale_after.as_secs(),
                        "the leader's watches made no progress for too long; stepping down"
                    );
                    metrics.stepdowns.inc();
                    stepped_down = true;
                }
            }
            // Writes stop before anything else: the fence first, then every task of the term. This
            // replica stops reporting itself leader at once: draining the term's reconciles (up to
            // STOP_GRACE) writes nothing past the fence.
            fence.revoke();
            metrics.leader.set(0);
            term.stop().await;
            metrics.stale_watches.set(0);
            if shutting_down {
                // The lease is released below, once.
                return Ok(());
            }
            let Some(elector) = &elector else {
                if stepped_down {
                    // Alone: lead again at once, on new connections.
                    continue;
                }
                return Ok(());
            };
            elector.release().await;
            if stepped_down {
                // Let a standby (which polls every retry period) take the lease first.
                tokio::time::sleep(timing.retry_period * 2).await;
            }
            tracing::warn!(%identity, "lost leadership; running for the lease again");
        }
    };
    let outcome = terms.await;
    metrics.leader.set(0);
    if let Some(elector) = &elector {
        elector.release().await;
    }
    outcome
}

/// The feature gates the policy.kruise.io webhooks honour.
fn policy_gates(gates: &features::FeatureGates) -> kruise_webhook::policy::PolicyGates {
    kruise_webhook::policy::PolicyGates {
        budget_delete: gates.enabled(Gate::PodUnavailableBudgetDeleteGate),
        budget_update: gates.enabled(Gate::PodUnavailableBudgetUpdateGate),
        vertical_scaling: gates.enabled(Gate::InPlacePodVerticalScaling),
        deletion_protection: gates.enabled(Gate::ResourcesDeletionProtection),
        crd_cascading: gates.enabled(Gate::DeletionProtectionForCRDCascadingGate),
    }
}

/// How often the leader checks that its watches are current.
const STALE_CHECK_PERIOD: Duration = Duration::from_secs(2);

/// What one leadership term runs with.
struct TermInputs {
    args: Args,
    client: Client,
    settings: certctl::Settings,
    tls: RustlsConfig,
    webhook_metrics: kruise_webhook::metrics::Metrics,
    controller_metrics: Arc<kruise_controllers::metrics::Metrics>,
    /// The process's caches, shared with the Pod webhook.
    process_caches: kruise_controllers::driver::caches::ProcessCaches,
}

/// How long a term's controllers get to finish the reconciles they have in flight when the term
/// ends. Their writes are already fenced off then, so this is mostly their reads; whatever is
/// still running after it is cancelled.
pub(crate) const STOP_GRACE: Duration = Duration::from_secs(5);

/// The leader's work during one term, on a runtime of its own so that ending the term stops every
/// task it spawned (watches, workers, writes in flight or queued) at once.
struct LeaderTerm {
    runtime: Option<tokio::runtime::Runtime>,
    /// Until the term's controllers have returned (`None` once seen).
    done: Option<tokio::sync::oneshot::Receiver<()>>,
    stop: kruise_controllers::driver::stop::Stop,
}

impl LeaderTerm {
    fn start(inputs: TermInputs) -> anyhow::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("leader-term")
            // Unoptimised builds poll the controllers' deep reconcile futures with large frames.
            .thread_stack_size(8 << 20)
            .enable_all()
            .build()
            .context("building the leader's runtime")?;
        let (tx, done) = tokio::sync::oneshot::channel();
        let stop = kruise_controllers::driver::stop::Stop::default();
        let TermInputs {
            args,
            client,
            settings,
            tls,
            webhook_metrics,
            controller_metrics,
            process_caches,
        } = inputs;
        let (ready_tx, mut webhooks_ready) = watch::channel(false);
        // The term's caches, on the term's runtime: their watches end with it.
        let registry = {
            let _on_term = runtime.enter();
            kruise_controllers::driver::registry::Registry::term(
                client.clone(),
                &process_caches.registry,
            )
        };
        // The certificate's Secret comes from the term's one cache of Secrets when the gates that
        // read Secrets cluster-wide (and that the chart grants then) are on; else certctl watches
        // that one Secret by name.
        let gates = args.gates();
        let secrets = (gates.enabled(Gate::ResourceDistributionGate)
            || gates.enabled(Gate::ImagePullJobGate))
        .then(|| registry.shared());
        // The certificate controller holds nothing kube can panic on: it stops with the runtime.
        runtime.spawn(certctl::run(
            client.clone(),
            settings,
            tls,
            ready_tx,
            webhook_metrics,
            Some(process_caches.budgets.clone()),
            secrets,
        ));
        let term = stop.clone();
        runtime.spawn(async move {
            // As OpenKruise's manager (`webhook.WaitReady` before its controllers are set up): the
            // controllers start once the first certificate sync has put the serving CA into the
            // webhook configurations. Before that the apiserver cannot call the webhooks, and the
            // controllers' first writes of kinds they default or validate (a NodeImage per Node, ...)
            // would all be refused and retried.
            let waited = tokio::select! {
                ready = webhooks_ready.wait_for(|ready| *ready) => ready.is_ok(),
                () = term.requested() => false,
            };
            if !waited {
                let _ = tx.send(());
                return;
            }
            tracing::info!("webhook configurations carry the serving CA: starting the controllers");
            controllers::run(
                &args,
                client,
                controller_metrics,
                registry,
                process_caches,
                term,
            )
            .await;
            let _ = tx.send(());
        });
        Ok(Self {
            runtime: Some(runtime),
            done: Some(done),
            stop,
        })
    }

    /// Resolves when the term's controllers returned by themselves (they normally run until
    /// stopped).
    async fn ended(&mut self) {
        match &mut self.done {
            Some(done) => {
                let _ = done.await;
                self.done = None;
            }
            None => std::future::pending().await,
        }
    }

    /// Ends the term: its controllers stop (no new reconciles, those in flight finish, within
    /// [`STOP_GRACE`]; [`controllers::run`] logs what was stopped), then its runtime is shut down,
    /// dropping every task it spawned. Shutting the runtime down under controllers still running
    /// would cancel their reconciles under kube's feet, which panics.
    async fn stop(mut self) {
        self.stop.request();
        if let Some(done) = self.done.take() {
            // `controllers::run` bounds its own wait; the margin covers its cancelling the rest.
            if tokio::time::timeout(STOP_GRACE + Duration::from_secs(5), done)
                .await
                .is_err()
            {
                tracing::warn!(
                    running = ?self.stop.running(),
                    "the leader's controllers did not stop in time; shutting their runtime down"
                );
            }
        }
    }
}

impl Drop for LeaderTerm {
    fn drop(&mut self) {
        // A term dropped without `stop` (the process is exiting) still asks its controllers to stop.
        self.stop.request();
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Reloads the serving certificate whenever the Secret holds a new one. Runs until dropped.
async fn refresh_standby_certificate(
    client: &Client,
    settings: &certctl::Settings,
    tls: &RustlsConfig,
    mut current: kruise_webhook::certs::CertBundle,
    metrics: &kruise_webhook::metrics::Metrics,
) {
    loop {
        tokio::time::sleep(settings.resync).await;
        let Ok(bundle) = certctl::ensure_secret(client, settings, metrics).await else {
            continue;
        };
        if bundle == current {
            continue;
        }
        let (cert, key) = (
            bundle.cert.clone().into_bytes(),
            bundle.key.clone().into_bytes(),
        );
        match tls.reload_from_pem(cert, key).await {
            Ok(()) => current = bundle,
            Err(error) => tracing::warn!(%error, "reloading the webhook certificate"),
        }
    }
}

async fn ensure_first_certificate(
    client: &Client,
    settings: &certctl::Settings,
    metrics: &kruise_webhook::metrics::Metrics,
) -> anyhow::Result<kruise_webhook::certs::CertBundle> {
    let mut attempts = 0;
    loop {
        match certctl::ensure_secret(client, settings, metrics).await {
            Ok(bundle) => return Ok(bundle),
            Err(error) if attempts < 30 => {
                attempts += 1;
                tracing::warn!(%error, "webhook certificate not ready; retrying");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            Err(error) => return Err(error).context("ensuring the webhook certificate"),
        }
    }
}

async fn metrics_handler(State(registry): State<Arc<Registry>>) -> Result<String, StatusCode> {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)
        .map_err(|_| StatusCode::INTERNAL_SERVER_ERROR)?;
    Ok(text)
}

async fn readyz(State(readiness): State<Readiness>) -> (StatusCode, String) {
    match readiness.problem() {
        None => (StatusCode::OK, "ok".into()),
        Some(problem) => (StatusCode::SERVICE_UNAVAILABLE, problem),
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The container image has no zoneinfo: the time zone database is built into the binary (jiff's
    /// bundled copy, used when no system copy is found) so AdvancedCronJob time zones work there.
    #[test]
    fn time_zone_database_is_bundled() {
        let db = k8s_openapi::jiff::tz::TimeZoneDatabase::bundled();
        for zone in ["Asia/Shanghai", "America/New_York", "Europe/Berlin"] {
            assert!(db.get(zone).is_ok(), "{zone} not bundled");
        }
    }

    #[test]
    fn webhook_hosts_with_and_without_a_port() {
        let cases = [
            ("127.0.0.1", ("127.0.0.1", 9876)),
            ("127.0.0.1:8443", ("127.0.0.1", 8443)),
            ("kruise.example.com", ("kruise.example.com", 9876)),
            ("kruise.example.com:443", ("kruise.example.com", 443)),
            ("::1", ("::1", 9876)),
            ("[::1]:8443", ("::1", 8443)),
            ("[::1]", ("::1", 9876)),
            ("host:notaport", ("host:notaport", 9876)),
        ];
        for (value, (host, port)) in cases {
            assert_eq!(
                split_host_port(value, 9876),
                (host.to_owned(), port),
                "{value}"
            );
        }
    }

    #[test]
    fn go_durations() {
        let cases = [
            ("0", Some(Duration::ZERO)),
            ("15s", Some(Duration::from_secs(15))),
            ("1m30s", Some(Duration::from_secs(90))),
            ("500ms", Some(Duration::from_millis(500))),
            ("1.5h", Some(Duration::from_secs(5400))),
            ("2", None),
            ("", None),
            ("10 s", None),
            ("s", None),
        ];
        for (value, want) in cases {
            assert_eq!(parse_go_duration(value).ok(), want, "{value:?}");
        }
    }

    #[test]
    fn read_your_writes_is_on_by_default_and_bounded_by_the_pod_webhook_deadline() {
        let parse = |args: &[&str]| {
            Args::try_parse_from(std::iter::once("kruise-manager").chain(args.iter().copied()))
                .expect("accepted")
        };
        let default = parse(&[]);
        assert!(default.webhook_read_your_writes);
        assert_eq!(default.read_your_writes_wait(), Duration::from_secs(2));
        assert!(!parse(&["--webhook-read-your-writes=false"]).webhook_read_your_writes);
        assert!(parse(&["--webhook-read-your-writes"]).webhook_read_your_writes);
        let short = parse(&["--webhook-read-your-writes-timeout=500ms"]);
        assert_eq!(short.read_your_writes_wait(), Duration::from_millis(500));
        let capped = parse(&[
            "--webhook-read-your-writes-timeout=10s",
            "--pod-webhook-timeout-seconds=10",
        ]);
        assert_eq!(capped.read_your_writes_wait(), Duration::from_secs(4));
        // The decision has the rest of the Pod webhook's deadline.
        assert_eq!(default.decision_deadline(), Duration::from_secs(3));
        assert_eq!(capped.decision_deadline(), Duration::from_secs(6));
        assert_eq!(short.decision_deadline(), Duration::from_millis(4500));
    }

    #[test]
    fn the_webhook_shutdown_delay_is_off_unless_given() {
        let parse = |args: &[&str]| {
            Args::try_parse_from(std::iter::once("kruise-manager").chain(args.iter().copied()))
        };
        let delay = |args: &[&str]| parse(args).ok().map(|a| a.webhook_shutdown_delay);
        assert_eq!(delay(&[]), Some(Duration::ZERO));
        assert_eq!(
            delay(&["--webhook-shutdown-delay=10s"]),
            Some(Duration::from_secs(10))
        );
        assert_eq!(delay(&["--webhook-shutdown-delay=10"]), None);
    }

    #[test]
    fn openkruise_chart_command_line_is_accepted() {
        // The argument list of OpenKruise v1.9's chart (templates/manager.yaml).
        let args = Args::try_parse_from([
            "kruise-manager",
            "--enable-leader-election",
            "--metrics-addr=:8080",
            "--health-probe-addr=:8000",
            "--logging-format=json",
            "--v=4",
            "--feature-gates=ImagePullJobGate=true,PreparingUpdateAsUpdate=true",
            "--sync-period=0",
        ])
        .expect("accepted");
        assert!(args.leader_election());
        assert_eq!(args.metrics_addr, "0.0.0.0:8080".parse().expect("addr"));
        assert_eq!(args.health_addr, "0.0.0.0:8000".parse().expect("addr"));
        assert_eq!((args.log_format.as_str(), args.verbosity), ("json", 4));
        let gates = args.gates();
        assert!(gates.enabled(Gate::PreparingUpdateAsUpdate));
        assert!(gates.enabled(Gate::ImagePullJobGate));
        let ineffective = args.ineffective().expect("valid");
        assert!(
            !ineffective.iter().any(|l| l.contains("ImagePullJobGate")),
            "ImagePullJobGate is implemented: {ineffective:?}"
        );
        assert!(!ineffective.iter().any(|l| l.contains("sync-period")));

        for (value, reported) in [
            ("deployment,replicaset", false),
            ("Deployment", false),
            ("deployment,cloneset", true),
        ] {
            let args = Args::try_parse_from([
                "kruise-manager".to_string(),
                format!("--ws-enabled-versioned-status={value}"),
            ])
            .expect("accepted");
            let lines = args.ineffective().expect("valid");
            assert_eq!(
                lines
                    .iter()
                    .any(|l| l.contains("--ws-enabled-versioned-status")),
                reported,
                "{value}: {lines:?}"
            );
        }

        let off = Args::try_parse_from(["kruise-manager", "--enable-leader-election=false"])
            .expect("accepted");
        assert!(!off.leader_election());
        let qps = Args::try_parse_from([
            "kruise-manager",
            "--rest-config-qps=30",
            "--rest-config-burst=50",
        ])
        .expect("accepted");
        assert_eq!((qps.kube_api_qps, qps.kube_api_burst), (30.0, 50));
    }

    #[test]
    fn worker_flags_default_to_openkruise_counts() {
        let parse = |args: &[&str]| {
            let args =
                Args::try_parse_from(std::iter::once("kruise-manager").chain(args.iter().copied()))
                    .expect("accepted");
            (
                args.podunavailablebudget_workers,
                args.resourcedistribution_workers,
                args.ephemeraljob_workers,
            )
        };
        // (arguments, PUB, ResourceDistribution, EphemeralJob workers)
        type Workers = (u16, u16, u16);
        let cases: [(&[&str], Workers); 2] = [
            (&[], (3, 3, 10)),
            (
                &[
                    "--podunavailablebudget-workers=5",
                    "--resourcedistribution-workers=2",
                    "--ephemeraljob-workers=1",
                ],
                (5, 2, 1),
            ),
        ];
        for (args, want) in cases {
            assert_eq!(parse(args), want, "{args:?}");
        }
        // Every `--*-workers` flag of OpenKruise v1.9's manager is accepted (3 by default), so its
        // manifests start kruise-manager unchanged.
        let names = [
            "advancedcronjob",
            "broadcastjob",
            "cloneset",
            "crr",
            "daemonset",
            "imagepulljob",
            "nodeimage",
            "nodepodprobe",
            "persistentpodstate",
            "podprobemarker",
            "podunavailablebudget",
            "resourcedistribution",
            "sidecarset",
            "sidecarterminator",
            "statefulset",
            "uniteddeployment",
            "workloadspread",
        ];
        let flags: Vec<String> = names.iter().map(|n| format!("--{n}-workers=7")).collect();
        let args = Args::try_parse_from(
            std::iter::once("kruise-manager").chain(flags.iter().map(String::as_str)),
        )
        .expect("OpenKruise's worker flags accepted");
        let set = [
            args.crr_workers,
            args.imagepulljob_workers,
            args.nodeimage_workers,
            args.nodepodprobe_workers,
            args.podprobemarker_workers,
            args.sidecarterminator_workers,
            args.workloadspread_workers,
        ];
        assert_eq!(set, [7; 7]);
        let defaults = Args::try_parse_from(["kruise-manager"]).expect("defaults");
        assert_eq!(
            [
                defaults.crr_workers,
                defaults.imagepulljob_workers,
                defaults.nodeimage_workers,
                defaults.nodepodprobe_workers,
                defaults.podprobemarker_workers,
                defaults.sidecarterminator_workers,
                defaults.workloadspread_workers,
            ],
            [3; 7]
        );
    }

    #[test]
    fn default_ttl_for_always_nodeimage_is_checked_as_openkruise() {
        let ttl = |extra: &[&str]| {
            let mut argv = vec!["kruise-manager"];
            argv.extend_from_slice(extra);
            Args::try_parse_from(argv)
                .expect("accepted")
                .default_ttl_for_always_nodeimage()
                .map_err(|e| e.to_string())
        };
        assert_eq!(ttl(&[]), Ok(300));
        assert_eq!(ttl(&["--default-ttlseconds-for-always-nodeimage=0"]), Ok(0));
        assert_eq!(
            ttl(&["--default-ttlseconds-for-always-nodeimage", "-5"]),
            Err("default-ttlseconds-for-always-nodeimage must be positive and less than 2678400, current value is -5".into())
        );
        assert!(ttl(&["--default-ttlseconds-for-always-nodeimage=2678401"]).is_err());
    }

    #[test]
    fn lease_timing() {
        let parse = |extra: &[&str]| {
            let mut argv = vec!["kruise-manager"];
            argv.extend_from_slice(extra);
            Args::try_parse_from(argv).expect("accepted").lease_timing()
        };
        let default = parse(&[]).expect("valid");
        assert_eq!(
            (default.lease, default.renew_deadline, default.retry_period),
            (
                Duration::from_secs(15),
                Duration::from_secs(10),
                Duration::from_secs(2)
            )
        );
        let go = parse(&[
            "--leader-election-lease-duration=30s",
            "--leader-election-renew-deadline=20s",
            "--leader-election-retry-period=5s",
        ])
        .expect("valid");
        assert_eq!(go.renew_deadline, Duration::from_secs(20));
        let error = parse(&["--leader-election-renew-deadline=15s"]).expect_err("renew ≥ lease");
        assert!(
            error
                .to_string()
                .contains("--leader-election-renew-deadline")
        );
        assert!(parse(&["--leader-election-retry-period=12s"]).is_err());
    }
}
