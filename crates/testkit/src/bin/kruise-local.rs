//! `kruise-local`: a local Kubernetes cluster for kruise-rs on 127.0.0.1.
//!
//! `kruise-local up [--nodes N] [--real-nodes M]` starts etcd, kube-apiserver (with the apps.kruise.io
//! CRDs), kube-controller-manager, kube-scheduler, N simulated nodes (kubelet-sim) spread over zones, M
//! real nodes (a kubelet with containerd each, labelled `kruise-rs.io/real-node=true`; needs root and
//! `make real-node`) and
//! kruise-manager (webhooks at https://127.0.0.1:<port>), writes an admin kubeconfig, prints
//! `kruise-local: ready`, and runs until SIGINT/SIGTERM, then stops everything and removes its files.
//! A kruise-manager that exits unexpectedly is logged and started again with the same arguments, after
//! 1 s doubling to 30 s (back to 1 s once it ran 60 s).
//!
//! `kruise-local up --nodes 0 --real-nodes M --chart` instead installs kruise-rs as users do: the real
//! nodes get their in-cluster network, kruise-manager's and kruise-daemon's images are pushed under the
//! chart's default names and `helm install` of charts/kruise-rs runs with its default values (CRDs
//! included); `kruise-local: ready` once both manager replicas and a daemon per node are Ready.
//!
//! While it runs, `kruise-local node add NAME [--labels k=v,..] [--taints k=v:NoSchedule,..]` adds a
//! simulated node (the running kubelet-sim serves it) and `kruise-local node remove NAME` deletes one.

use std::path::PathBuf;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use kruise_core::features::FeatureGates;
use kruise_testkit::control_plane::{ControlPlane, Options, default_bin_dir};
use kruise_testkit::fleet;
use kruise_testkit::manager::{self, Manager};
use kruise_testkit::realnode::{RealNodeOptions, RealNodes};
use kruise_testkit::testbed::wait_nodes_ready;
use kubelet_sim::NodeSpecSim;

/// Default log filter. The client logs each refused or not-yet-ready probe of a starting component as an
/// error, and each probe of a component's self-signed health port as a warning; neither is news.
const QUIET_CLIENT_LOGS: &str =
    "info,kube_runtime=warn,kube_client::client::builder=off,kube_client::client::tls=error";

#[derive(Parser, Debug)]
#[command(
    version,
    about = "A local Kubernetes cluster for kruise-rs (real control plane, simulated nodes)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Start the cluster and keep it running until interrupted.
    Up(UpArgs),
    /// Add or remove simulated nodes of a running cluster.
    #[command(subcommand)]
    Node(NodeCommand),
}

#[derive(Subcommand, Debug)]
enum NodeCommand {
    /// Register a simulated node; the cluster's kubelet-sim serves it from then on.
    Add(NodeAddArgs),
    /// Delete a node, as when a machine leaves: the control plane garbage-collects its Pods.
    Remove(NodeRemoveArgs),
}

#[derive(Parser, Debug)]
struct NodeAddArgs {
    /// Node name.
    name: String,
    /// Labels, `k=v,k2=v2`.
    #[arg(long, default_value = "")]
    labels: String,
    /// Taints, `key=value:Effect,key:Effect` (Effect: NoSchedule, PreferNoSchedule, NoExecute).
    #[arg(long, value_delimiter = ',')]
    taints: Vec<String>,
    /// Zone (label topology.kubernetes.io/zone).
    #[arg(long)]
    zone: Option<String>,
    /// CPU capacity and allocatable.
    #[arg(long, default_value = "32")]
    cpu: String,
    /// Memory capacity and allocatable.
    #[arg(long, default_value = "128Gi")]
    memory: String,
    /// Maximum Pods.
    #[arg(long, default_value_t = 250)]
    max_pods: u32,
    /// Register the node cordoned (`spec.unschedulable: true`).
    #[arg(long)]
    unschedulable: bool,
    /// Return once registered, without waiting for Ready.
    #[arg(long)]
    no_wait: bool,
    /// The cluster's kubeconfig.
    #[arg(long, default_value = ".local/kubeconfig")]
    kubeconfig: PathBuf,
}

#[derive(Parser, Debug)]
struct NodeRemoveArgs {
    /// Node name.
    name: String,
    /// The cluster's kubeconfig.
    #[arg(long, default_value = ".local/kubeconfig")]
    kubeconfig: PathBuf,
}

#[derive(Parser, Debug)]
struct UpArgs {
    /// Number of simulated nodes.
    #[arg(long, default_value_t = 3)]
    nodes: u16,
    /// Number of real nodes: a real kubelet (v1.34.10) with its own containerd and runc each, in its own
    /// network namespace, pulling locally built images from a local registry (`make real-node` first;
    /// needs root). They carry the label `kruise-rs.io/real-node=true`.
    #[arg(long, default_value_t = 0)]
    real_nodes: usize,
    /// Zones assigned round-robin to the nodes (label topology.kubernetes.io/zone).
    #[arg(long, value_delimiter = ',', default_value = "zone-a,zone-b,zone-c")]
    zones: Vec<String>,
    /// Where to write the admin kubeconfig.
    #[arg(long, default_value = ".local/kubeconfig")]
    kubeconfig: PathBuf,
    /// Folder of the control-plane binaries (default: the `make control-plane` cache).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// CRD manifests to install before the controllers start.
    #[arg(long, default_value = "config/crd")]
    crds: PathBuf,
    /// Do not start kruise-manager (a bare Kubernetes cluster).
    #[arg(long)]
    no_manager: bool,
    /// Extra kruise-manager argument (repeatable), e.g.
    /// `--manager-arg=--feature-gates=PodUnavailableBudgetUpdateGate=true`.
    #[arg(long = "manager-arg", allow_hyphen_values = true)]
    manager_args: Vec<String>,
    /// Do not start a kruise-daemon per real node (by default each real node gets one, on its own
    /// containerd socket, as the chart's DaemonSet gives every node one).
    #[arg(long)]
    no_daemon: bool,
    /// In-cluster networking on the real nodes (docs/real-nodes.md): a kube-proxy per node, Pod ranges
    /// routed from the host, `10.0.0.1:443` served on every node, the ServiceAccount admission plugin on
    /// and the apiserver routing to Service endpoints. Needs `--nodes 0` (a simulated node's Pod IPs
    /// would be routed off the machine).
    #[arg(long)]
    in_cluster_network: bool,
    /// kruise-rs installed as users install it (turns on --in-cluster-network; needs --nodes 0 and
    /// --real-nodes N, and `make helm`): kruise-manager's and kruise-daemon's images pushed to the
    /// nodes' registry under the chart's default names (the debug build, or `make image`'s archives
    /// with KRUISE_RS_IMAGE_DIR=target), then `helm install` of charts/kruise-rs with its default
    /// values; ready once both manager replicas and a daemon per node are Ready. kruise-local runs no
    /// manager or daemon process of its own.
    #[arg(long)]
    chart: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(QUIET_CLIENT_LOGS)),
        )
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Up(args) => up(args).await,
        Command::Node(NodeCommand::Add(args)) => node_add(args).await,
        Command::Node(NodeCommand::Remove(args)) => node_remove(args).await,
    }
}

async fn client_from(kubeconfig: &std::path::Path) -> anyhow::Result<kube::Client> {
    let config = kube::config::Kubeconfig::read_from(kubeconfig).with_context(|| {
        format!(
            "reading {} (is `kruise-local up` running?)",
            kubeconfig.display()
        )
    })?;
    let config = kube::Config::from_custom_kubeconfig(config, &Default::default())
        .await
        .context("loading the kubeconfig")?;
    Ok(kube::Client::try_from(config)?)
}

async fn node_add(args: NodeAddArgs) -> anyhow::Result<()> {
    let client = client_from(&args.kubeconfig).await?;
    let mut spec = NodeSpecSim::named(&args.name, 0);
    spec.zone = args.zone;
    spec.labels = fleet::parse_labels(&args.labels)?.into_iter().collect();
    spec.taints = args
        .taints
        .iter()
        .filter(|t| !t.trim().is_empty())
        .map(|t| fleet::parse_taint(t.trim()))
        .collect::<anyhow::Result<_>>()?;
    spec.cpu = args.cpu;
    spec.memory = args.memory;
    spec.max_pods = args.max_pods;
    spec.unschedulable = args.unschedulable;
    let spec = if args.no_wait {
        fleet::register_node(&client, spec).await?
    } else {
        fleet::add_node(&client, spec).await?
    };
    println!("node/{} added (InternalIP {})", spec.name, spec.node_ip());
    Ok(())
}

async fn node_remove(args: NodeRemoveArgs) -> anyhow::Result<()> {
    let client = client_from(&args.kubeconfig).await?;
    fleet::remove_node(&client, &args.name).await?;
    println!("node/{} removed", args.name);
    Ok(())
}

async fn up(mut args: UpArgs) -> anyhow::Result<()> {
    args.in_cluster_network |= args.chart;
    anyhow::ensure!(
        !args.in_cluster_network || (args.nodes == 0 && args.real_nodes > 0),
        "--in-cluster-network and --chart need --nodes 0 and --real-nodes N"
    );
    let mut options = Options {
        bin_dir: args.bin_dir.clone().unwrap_or_else(default_bin_dir),
        // The chart installs the CRDs itself, as it does for users.
        crd_dir: (!args.chart).then(|| args.crds.clone()),
        ..Options::default()
    };
    if args.in_cluster_network {
        options.service_account_admission = true;
        options
            .apiserver_args
            .push("--enable-aggregator-routing=true".into());
    }
    let plane = ControlPlane::start(options).await?;
    eprintln!(
        "kruise-local: control plane ready in {:.1}s ({})",
        plane.started_in().as_secs_f64(),
        plane.dir().display()
    );

    if let Some(parent) = args
        .kubeconfig
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
    {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::write(&args.kubeconfig, plane.kubeconfig_yaml())
        .with_context(|| format!("writing {}", args.kubeconfig.display()))?;

    let nodes = NodeSpecSim::fleet("sim", args.nodes, &args.zones);
    let sim_config = {
        let mut config = kubelet_sim::Config::new(nodes.clone());
        config.heartbeat_every = Duration::from_secs(5);
        config
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let sim = tokio::spawn(kubelet_sim::run(
        plane.client().await?,
        sim_config,
        async move {
            let _ = stop_rx.await;
        },
    ));
    kubelet_sim::volumes::spawn(plane.client().await?, std::future::pending());
    wait_nodes_ready(&plane.client().await?, &nodes).await?;
    let mut real_nodes = if args.real_nodes > 0 {
        let zones: Vec<&str> = args.zones.iter().map(String::as_str).collect();
        let mut options = RealNodeOptions::new(args.real_nodes, &zones, plane.bin_dir());
        if args.in_cluster_network {
            options.kube_proxy = Some(plane.bin_dir().join("kube-proxy"));
            options.standard_runtime_socket = true;
        }
        let real = match RealNodes::start(&plane, &options).await {
            Ok(real) => real,
            Err(error) => {
                plane.stop();
                return Err(error.context("starting the real nodes"));
            }
        };
        eprintln!(
            "kruise-local: real nodes {} Ready (images served by 127.0.0.1:{}, logs in {})",
            real.names().join(", "),
            real.registry.port,
            real.dir().display()
        );
        Some(real)
    } else {
        None
    };

    if let Some(real) = real_nodes.as_ref().filter(|_| args.chart)
        && let Err(error) = install_chart(&plane, real).await
    {
        if let Some(real) = real_nodes.as_mut() {
            real.stop();
        }
        plane.stop();
        return Err(error.context("installing the chart"));
    }
    let manager = if args.no_manager || args.chart {
        None
    } else {
        Some(start_manager(&plane, &args.manager_args).await?)
    };
    if let Some(real) = real_nodes
        .as_ref()
        .filter(|_| !args.no_daemon && !args.chart)
    {
        start_daemons(&plane, real).await?;
    }
    let kubeconfig = std::fs::canonicalize(&args.kubeconfig).unwrap_or(args.kubeconfig.clone());
    println!("kubeconfig: {}", kubeconfig.display());
    println!("  export KUBECONFIG={}", kubeconfig.display());
    println!("  {}/kubectl get nodes", plane.bin_dir().display());
    println!("kruise-local: ready");

    // A manager that dies is started again (with back-off) until we are told to stop.
    let restarts = AtomicU32::new(0);
    match &manager {
        Some(manager) => {
            tokio::select! {
                () = wait_for_signal() => {}
                () = manager::supervise(&plane, manager, &restarts) => {}
            }
        }
        None => wait_for_signal().await,
    }
    eprintln!(
        "kruise-local: stopping (kruise-manager restarted {} times)",
        restarts.load(std::sync::atomic::Ordering::SeqCst)
    );
    let _ = stop_tx.send(());
    let _ = tokio::time::timeout(Duration::from_secs(5), sim).await;
    if let Some(real) = real_nodes.as_mut() {
        real.stop();
    }
    plane.stop();
    let _ = std::fs::remove_file(&args.kubeconfig);
    eprintln!("kruise-local: stopped");
    Ok(())
}

/// kruise-manager as a process of kruise-local's own, with `manager_args`; serving when this returns.
async fn start_manager(plane: &ControlPlane, manager_args: &[String]) -> anyhow::Result<Manager> {
    manager::ensure_namespace(plane).await?;
    let options = manager::ManagerOptions {
        extra_args: manager_args.to_vec(),
        ..manager::ManagerOptions::default()
    };
    let gates = manager_gates(manager_args)?;
    let manager = Manager::spawn(plane, &options)?;
    manager::wait_serving(plane, &manager.ports, Duration::from_secs(90)).await?;
    eprintln!(
        "kruise-local: kruise-manager serving (webhook https://127.0.0.1:{}, metrics http://127.0.0.1:{}/metrics, \
         health http://127.0.0.1:{}/readyz, log {})",
        manager.ports.webhook,
        manager.ports.metrics,
        manager.ports.health,
        manager.log(plane).display()
    );
    eprintln!(
        "kruise-local: kruise-manager feature gates on: {} (change with \
         --manager-arg=--feature-gates=NAME=true|false)",
        gates.enabled_names().join(", ")
    );
    Ok(manager)
}

/// A kruise-daemon process per real node, on its own containerd socket; ready when this returns.
async fn start_daemons(plane: &ControlPlane, real: &RealNodes) -> anyhow::Result<()> {
    let daemons = real
        .daemon_hosts()
        .iter()
        .map(|host| kruise_testkit::daemon::spawn_on(plane, host))
        .collect::<anyhow::Result<Vec<_>>>()?;
    kruise_testkit::daemon::wait_ready(&daemons, Duration::from_secs(90)).await?;
    for daemon in &daemons {
        eprintln!(
            "kruise-local: kruise-daemon of {} ready (http://{}:{}/metrics, log {})",
            daemon.node,
            daemon.host,
            daemon.port,
            daemon.log.display()
        );
    }
    Ok(())
}

/// `--chart`: kruise-rs's images pushed, the chart installed with its default values, its Pods Ready.
async fn install_chart(plane: &ControlPlane, real: &RealNodes) -> anyhow::Result<()> {
    use kruise_testkit::installed;
    use kruise_testkit::realnode::kruise_images::Source;
    let source = Source::from_env();
    let started = std::time::Instant::now();
    let images = kruise_testkit::realnode::kruise_images::push(
        &real.registry,
        &source,
        &real.dir().join("kruise-images"),
    )?;
    for image in &images {
        eprintln!(
            "kruise-local: pushed {} ({source:?}, {:.1} MiB compressed) in {:.1}s",
            image.reference,
            image.compressed_bytes as f64 / 1048576.0,
            started.elapsed().as_secs_f64()
        );
    }
    let chart =
        installed::install(plane, images, real.nodes.len(), Duration::from_secs(300)).await?;
    let names = |pods: &[k8s_openapi::api::core::v1::Pod]| -> String {
        pods.iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect::<Vec<_>>()
            .join(", ")
    };
    eprintln!(
        "kruise-local: helm release {} of {} installed in {}; Ready {:.1}s later: {} and {}",
        installed::RELEASE,
        installed::CHART,
        installed::SYSTEM,
        chart.ready_in.as_secs_f64(),
        names(&chart.managers),
        names(&chart.daemons),
    );
    Ok(())
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(error) => {
            tracing::warn!(%error, "cannot listen for SIGTERM; stopping on SIGINT only");
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// The feature gates kruise-manager runs with: its `--feature-gates` among `manager_args` (the last
/// one, as the flag is read), parsed as the manager parses it, so a bad one stops here with the
/// manager's own message.
fn manager_gates(manager_args: &[String]) -> anyhow::Result<FeatureGates> {
    let mut flag = "";
    let mut args = manager_args.iter();
    while let Some(arg) = args.next() {
        if let Some(value) = arg.strip_prefix("--feature-gates=") {
            flag = value;
        } else if arg == "--feature-gates" {
            flag = args.next().map_or("", String::as_str);
        }
    }
    FeatureGates::parse(flag).map_err(|error| anyhow::anyhow!(error))
}
