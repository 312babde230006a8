//! kubelet-sim as a child process: the bench binary re-executes itself with a `sim` subcommand, so the
//! simulator's CPU and memory are its own and not the bench's.

use std::time::Duration;

use anyhow::Context;
use kruise_testkit::control_plane::{ControlPlane, Options};
use kruise_testkit::process::Process;
use kruise_testkit::testbed::wait_nodes_ready;
use kube::Client;
use kubelet_sim::NodeSpecSim;

/// Zones the simulated nodes are spread over (label `topology.kubernetes.io/zone`).
pub const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];

/// The subcommand that [`spawn`] passes to the re-executed bench binary.
pub const SUBCOMMAND: &str = "sim";

/// `count` simulated nodes `scale-<i>`, round-robin over [`ZONES`].
pub fn fleet(count: u16) -> Vec<NodeSpecSim> {
    let zones: Vec<String> = ZONES.iter().map(|z| z.to_string()).collect();
    NodeSpecSim::fleet("scale", count, &zones)
}

/// The body of the `sim` subcommand: runs kubelet-sim for `nodes` nodes against `$KUBECONFIG` until
/// the process is stopped.
pub async fn run(nodes: u16) -> anyhow::Result<()> {
    // Warnings (failed writes, retries) to `kubelet-sim.log`; `RUST_LOG` for more.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
    let client = kube::Client::try_default().await?;
    let mut config = kubelet_sim::Config::new(fleet(nodes));
    config.heartbeat_every = Duration::from_secs(5);
    kubelet_sim::run(client, config, std::future::pending()).await?;
    Ok(())
}

/// Starts this binary again as `--nodes <nodes> sim` against `plane`, owned by the plane (stopped
/// with the other components; named `kubelet-sim` in [`ControlPlane::pids`], logging to
/// `kubelet-sim.log` in the plane's directory), and waits until its nodes are Ready.
pub async fn spawn(plane: &ControlPlane, nodes: u16) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("locating this binary")?;
    let log = plane.dir().join("kubelet-sim.log");
    let args = vec![
        "--nodes".to_string(),
        nodes.to_string(),
        SUBCOMMAND.to_string(),
    ];
    let kubeconfig = plane.kubeconfig_path();
    let sim = Process::spawn_with_env(
        "kubelet-sim",
        &exe,
        &args,
        &[("KUBECONFIG", &kubeconfig)],
        &log,
    )?;
    plane.adopt(sim);
    let client = plane.client().await?;
    wait_nodes_ready(&client, &fleet(nodes)).await
}

/// The subcommand of every bench with simulated nodes: the bench starts itself again with it (see
/// [`spawn`]) to run kubelet-sim as a child process.
#[derive(clap::Subcommand, Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimCommand {
    /// Internal: run kubelet-sim for `--nodes` nodes against $KUBECONFIG.
    Sim,
}

/// kube-controller-manager's own default `--node-monitor-grace-period` (50 s since v1.32).
const NODE_MONITOR_GRACE: Duration = Duration::from_secs(50);

/// The control plane of a bench: the test bed's, with nodes allowed the grace of a real cluster.
/// The test bed's 20 s lets node-failure e2e tests finish sooner; under a 10,000-Pod rollout on 2
/// cores a node heartbeat can take longer than that to be served, and kube-controller-manager then
/// marked every Pod of the node NotReady (`PUT pods/status`, 0.2 per Pod in `fleet-scale`),
/// which kubelet-sim and the manager then undid: work a real cluster would not do.
pub fn bench_options() -> Options {
    Options {
        node_monitor_grace: NODE_MONITOR_GRACE,
        ..Options::default()
    }
}

/// A bench's `main`: runs kubelet-sim for `nodes` nodes when started as the simulator, else `bench`
/// on a new control plane ([`bench_options`]).
pub async fn sim_or_bench(
    command: Option<SimCommand>,
    nodes: u16,
    bench: impl AsyncFnOnce(&ControlPlane) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    sim_or_bench_with(command, nodes, bench_options(), bench).await
}

/// [`sim_or_bench`] with the control plane's `options`.
pub async fn sim_or_bench_with(
    command: Option<SimCommand>,
    nodes: u16,
    options: Options,
    bench: impl AsyncFnOnce(&ControlPlane) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    match command {
        Some(SimCommand::Sim) => run(nodes).await,
        None => crate::on_control_plane_with(options, bench).await,
    }
}

// The arguments every bench with simulated nodes and a kruise-manager takes, flattened into its
// `Cli` (or its `Cli` itself): the internal `sim` subcommand, the node count (`NODES` by default)
// and the manager's extra arguments. Declared once so that every bench reads them the same way.
// (A `//` comment: clap would print a doc comment as every bench's `--help` text.)
#[derive(clap::Parser, Debug)]
pub struct SimArgs<const NODES: u16> {
    #[command(subcommand)]
    pub command: Option<SimCommand>,
    /// Simulated nodes.
    #[arg(long, default_value_t = NODES)]
    pub nodes: u16,
    /// Extra kruise-manager argument (repeatable), e.g. `--manager-arg=--kube-api-qps=200`.
    #[arg(long = "manager-arg", allow_hyphen_values = true)]
    pub manager_args: Vec<String>,
}

impl<const NODES: u16> SimArgs<NODES> {
    /// What a bench runs against before its workload: starts kubelet-sim's nodes and kruise-manager
    /// with the extra arguments; returns a client and the manager.
    pub async fn start_nodes_and_manager(
        &self,
        plane: &ControlPlane,
    ) -> anyhow::Result<(Client, crate::manager::Manager)> {
        spawn(plane, self.nodes).await?;
        let client = plane.client().await?;
        let manager = crate::manager::Manager::start(plane, &self.manager_args).await?;
        Ok((client, manager))
    }
}

/// A bench binary's `main` (as `#[tokio::main]` would run it): parses the bench's `Cli`, finds its
/// [`SimArgs`] with `sim_args`, and runs kubelet-sim or `bench` ([`sim_or_bench`]).
pub fn main<C: clap::Parser, const NODES: u16>(
    sim_args: impl FnOnce(&C) -> &SimArgs<NODES>,
    bench: impl AsyncFnOnce(&C, &ControlPlane) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    main_with(sim_args, |_| bench_options(), bench)
}

/// [`main`] with the control plane's options made from the bench's `Cli` by `options`.
pub fn main_with<C: clap::Parser, const NODES: u16>(
    sim_args: impl FnOnce(&C) -> &SimArgs<NODES>,
    options: impl FnOnce(&C) -> Options,
    bench: impl AsyncFnOnce(&C, &ControlPlane) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let cli = C::parse();
    let (command, nodes) = {
        let args = sim_args(&cli);
        (args.command, args.nodes)
    };
    let options = options(&cli);
    tokio::runtime::Runtime::new()?.block_on(sim_or_bench_with(
        command,
        nodes,
        options,
        async |plane| bench(&cli, plane).await,
    ))
}
