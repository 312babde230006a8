//! `kubelet-sim`: runs simulated nodes against the cluster of the current kubeconfig until SIGINT/SIGTERM.

use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use kubelet_sim::{Config, NodeSpecSim};

#[derive(Parser, Debug)]
#[command(
    version,
    about = "Simulated kubelet: fake Nodes and real Pod status transitions"
)]
struct Args {
    /// Number of nodes to simulate.
    #[arg(long, default_value_t = 3)]
    nodes: u16,
    /// Node name prefix; nodes are named <prefix>-0, <prefix>-1, ...
    #[arg(long, default_value = "sim")]
    prefix: String,
    /// Zones, assigned round-robin through the topology.kubernetes.io/zone label.
    #[arg(long, value_delimiter = ',', default_value = "zone-a,zone-b,zone-c")]
    zones: Vec<String>,
    /// Maximum Pods per node.
    #[arg(long, default_value_t = 250)]
    max_pods: u32,
    /// Time from a container start to its readiness, in milliseconds.
    #[arg(long, default_value_t = 300)]
    ready_delay_ms: u64,
    /// Lease renewal period in seconds.
    #[arg(long, default_value_t = 10)]
    heartbeat_seconds: u64,
    /// Log as JSON lines instead of text.
    #[arg(long)]
    log_json: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    init_logs(args.log_json);
    let client = kube::Client::try_default()
        .await
        .context("connecting with the current kubeconfig")?;
    let mut nodes = NodeSpecSim::fleet(&args.prefix, args.nodes, &args.zones);
    for node in &mut nodes {
        node.max_pods = args.max_pods;
    }
    let mut config = Config::new(nodes);
    config.timing.ready_delay = Duration::from_millis(args.ready_delay_ms);
    config.heartbeat_every = Duration::from_secs(args.heartbeat_seconds);
    kubelet_sim::volumes::spawn(client.clone(), std::future::pending());
    kubelet_sim::run(client, config, shutdown_signal()).await?;
    Ok(())
}

async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(error) => {
            tracing::warn!(%error, "cannot listen for SIGTERM; stopping on SIGINT only");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

fn init_logs(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}
