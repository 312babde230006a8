//! The `kruise-daemon` binary.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use clap::Parser;
use kruise_core::features::{FeatureGates, Gate};
use kruise_daemon::containermeta::ContainerMeta;
use kruise_daemon::cri::{self, Runtime};
use kruise_daemon::crr::Executor;
use kruise_daemon::imagepuller::Puller;
use kruise_daemon::metrics::{Metrics, RuntimeLabels};
use kruise_daemon::podprobe::Prober;
use kube::config::{KubeConfigOptions, Kubeconfig};

#[derive(Parser, Debug)]
#[command(
    name = "kruise-daemon",
    version,
    about = "OpenKruise's node agent: CRI client and ContainerRecreateRequest executor"
)]
struct Args {
    /// The node this daemon serves (the DaemonSet passes spec.nodeName).
    #[arg(long, env = "NODE_NAME")]
    node_name: String,
    /// The CRI endpoint (`unix:///run/containerd/containerd.sock`); found under --var-run-dir when unset.
    #[arg(long, env = "KRUISE_DAEMON_RUNTIME_ENDPOINT")]
    runtime_endpoint: Option<String>,
    /// The name of the CRI socket file under --var-run-dir (upstream's --socket-file).
    #[arg(long)]
    socket_file: Option<String>,
    /// Where the host's /var/run is mounted.
    #[arg(long, default_value = "/hostvarrun")]
    var_run_dir: PathBuf,
    /// The address of /healthz, /readyz and /metrics: `HOST:PORT`, or `:PORT` as the chart (and
    /// OpenKruise's) writes it.
    #[arg(long, default_value = "0.0.0.0:10221", value_parser = kruise_core::flags::parse_listen_addr)]
    addr: SocketAddr,
    /// A kubeconfig (in-cluster config or $KUBECONFIG otherwise).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// OpenKruise feature gates (`Name=true,Other=false`), as the manager's flag. The daemon reads
    /// DaemonWatchingPod (watch the node's Pods, report their containers' meta) and
    /// InPlaceUpdateEnvFromMetadata (restart a container whose env from Pod metadata changed); an
    /// unknown gate is refused, as the manager refuses it.
    #[arg(long, env = "KRUISE_FEATURE_GATES", default_value = "")]
    feature_gates: String,
    /// Pull the images this node's NodeImage lists (ImagePullJobs).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    image_puller: bool,
    /// Log format: text or json.
    #[arg(long, default_value = "text")]
    log_format: String,
}

struct App {
    runtime: Runtime,
    executor: Arc<Executor>,
    containermeta: Option<Arc<ContainerMeta>>,
    prober: Arc<Prober>,
    puller: Option<Arc<Puller>>,
    metrics: Arc<Metrics>,
}

async fn healthz(State(app): State<Arc<App>>) -> (StatusCode, String) {
    match app.runtime.ping().await {
        Ok(()) => {
            app.metrics.runtime_up.set(1);
            (StatusCode::OK, "ok".to_owned())
        }
        Err(error) => {
            app.metrics.runtime_up.set(0);
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("container runtime: {error}"),
            )
        }
    }
}

/// Ready once every watch the daemon acts on has listed its objects: the ContainerRecreateRequests,
/// the node's NodePodProbe and NodeImage, and the node's Pods when DaemonWatchingPod is on (upstream
/// registers the same informers' sync as health checks).
async fn readyz(State(app): State<Arc<App>>) -> (StatusCode, &'static str) {
    match not_ready(&app) {
        None => (StatusCode::OK, "ok"),
        Some(what) => (StatusCode::SERVICE_UNAVAILABLE, what),
    }
}

/// The first watch that has not synced yet.
fn not_ready(app: &App) -> Option<&'static str> {
    if !app.executor.synced() {
        return Some("ContainerRecreateRequest informer not synced");
    }
    if app.containermeta.as_ref().is_some_and(|c| !c.synced()) {
        return Some("Pod informer not synced");
    }
    if !app.prober.synced() {
        return Some("NodePodProbe informer not synced");
    }
    if app.puller.as_ref().is_some_and(|p| !p.synced()) {
        return Some("NodeImage informer not synced");
    }
    None
}

async fn serve_metrics(State(app): State<Arc<App>>) -> ([(&'static str, &'static str); 1], String) {
    (
        [(
            "content-type",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        app.metrics.encode(),
    )
}

async fn kube_client(args: &Args) -> anyhow::Result<kube::Client> {
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("reading {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?
        }
        None => kube::Config::infer()
            .await
            .context("no kubeconfig and not in a cluster")?,
    };
    kube::Client::try_from(config).context("kube client")
}

async fn connect_runtime(args: &Args) -> anyhow::Result<Runtime> {
    let endpoint = cri::detect_endpoint(
        args.runtime_endpoint.as_deref(),
        args.socket_file.as_deref(),
        &args.var_run_dir,
        |p| p.exists(),
    )
    .with_context(|| {
        format!(
            "not found container runtime sock under {} (set --runtime-endpoint or --socket-file)",
            args.var_run_dir.display()
        )
    })?;
    // The runtime may start after the daemon: keep trying for a while.
    let mut last = None;
    for _ in 0..30 {
        match Runtime::connect(&endpoint).await {
            Ok(runtime) => return Ok(runtime),
            Err(error) => {
                tracing::warn!(endpoint, %error, "container runtime not reachable yet");
                last = Some(error);
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    }
    Err(anyhow::anyhow!("container runtime at {endpoint}: {last:?}"))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube_runtime=warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    let _ = if args.log_format == "json" {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
    // The manager's flag, parsed by the same rules (OpenKruise's coupling: KruiseDaemon=false
    // turns the daemon's gates off; an unknown gate is refused, as the manager refuses it).
    let gates = FeatureGates::parse(&args.feature_gates).map_err(anyhow::Error::msg)?;
    let watch_pods = gates.enabled(Gate::DaemonWatchingPod);
    let env_from_metadata = gates.enabled(Gate::InPlaceUpdateEnvFromMetadata);
    let client = kube_client(&args).await?;
    let runtime = connect_runtime(&args).await?;
    tracing::info!(
        node = args.node_name,
        endpoint = runtime.endpoint,
        runtime = runtime.name,
        version = runtime.version,
        "connected to the container runtime"
    );
    let mut registry_owner = Metrics::new();
    let probe_metrics =
        kruise_daemon::podprobe::ProbeMetrics::register(&mut registry_owner.registry);
    let pull_metrics =
        kruise_daemon::imagepuller::PullMetrics::register(&mut registry_owner.registry);
    let metrics = Arc::new(registry_owner);
    metrics.runtime_up.set(1);
    metrics
        .runtime_info
        .get_or_create(&RuntimeLabels {
            runtime: runtime.name.clone(),
            version: runtime.version.clone(),
            endpoint: runtime.endpoint.clone(),
        })
        .set(1);
    let puller = if args.image_puller {
        let images = kruise_daemon::imagepuller::Images::connect(&runtime.endpoint).await?;
        let puller = Puller::new(client.clone(), &args.node_name, images, pull_metrics);
        Some((puller.clone(), tokio::spawn(puller.run())))
    } else {
        None
    };
    // PodProbeMarker probes of the node's NodePodProbe (empty unless the manager's
    // PodProbeMarkerGate is on).
    let (prober, run_prober) = Prober::start(
        client.clone(),
        runtime.clone(),
        &args.node_name,
        probe_metrics,
    );
    let (executor, run_executor) = Executor::start(
        client.clone(),
        runtime.clone(),
        &args.node_name,
        metrics.clone(),
    );
    let (containermeta, run_containermeta) = if watch_pods {
        let (reporter, run) = ContainerMeta::start(
            client,
            runtime.clone(),
            &args.node_name,
            env_from_metadata,
            metrics.clone(),
        );
        (Some(reporter), futures::future::Either::Left(run))
    } else {
        (None, futures::future::Either::Right(std::future::pending()))
    };
    let app = Arc::new(App {
        runtime,
        executor,
        containermeta,
        prober,
        puller: puller.as_ref().map(|(p, _)| p.clone()),
        metrics,
    });
    let router = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(serve_metrics))
        .with_state(app);
    let listener = tokio::net::TcpListener::bind(args.addr)
        .await
        .with_context(|| format!("bind {}", args.addr))?;
    tracing::info!(addr = %args.addr, "serving /healthz, /readyz, /metrics");
    let serve = async move { axum::serve(listener, router).await };
    tokio::select! {
        result = serve => result.context("health server")?,
        () = run_executor => {}
        () = run_containermeta => {}
        () = run_prober => {}
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupted"),
        () = terminated() => tracing::info!("terminated"),
    }
    if let Some((_, task)) = puller {
        task.abort();
    }
    Ok(())
}

#[cfg(unix)]
async fn terminated() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut signal) => {
            signal.recv().await;
        }
        Err(_) => std::future::pending().await,
    }
}
