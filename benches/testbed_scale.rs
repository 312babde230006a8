//! Test bed scale figures: control plane start-to-ready time, time for N Pods (Deployments × replicas) to
//! become Ready on simulated nodes, and kubelet-sim's memory at that scale. Prints figures; asserts nothing
//! about time.
//!
//! kubelet-sim runs as a child process (this binary re-executed with `sim`), so its RSS is its own.

use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kruise_benches::process::pid_of;
use kruise_benches::sim;
use kruise_benches::sim::SimCommand;
use kruise_testkit::control_plane::{ControlPlane, Options};
use kruise_testkit::eventually;
use kruise_testkit::process::rss_kib;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

#[derive(Parser, Debug)]
struct Cli {
    #[command(subcommand)]
    command: Option<SimCommand>,
    /// Simulated nodes.
    #[arg(long, default_value_t = 10)]
    nodes: u16,
    /// Deployments to create.
    #[arg(long, default_value_t = 10)]
    deployments: u32,
    /// Replicas per Deployment.
    #[arg(long, default_value_t = 100)]
    replicas: u32,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Some(SimCommand::Sim) => sim::run(cli.nodes).await,
        None => bench(cli).await,
    }
}

async fn bench(cli: Cli) -> anyhow::Result<()> {
    let total = cli.deployments * cli.replicas;
    let plane = ControlPlane::start(Options::default()).await?;
    println!(
        "control plane start-to-ready: {:.2} s",
        plane.started_in().as_secs_f64()
    );

    sim::spawn(&plane, cli.nodes).await?;
    let sim_pid = pid_of(&plane, "kubelet-sim").context("the kubelet-sim process")?;
    let client = plane.client().await?;

    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut namespace = Namespace::default();
    namespace.metadata.name = Some("scale".into());
    namespaces
        .create(&PostParams::default(), &namespace)
        .await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "scale");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "scale");

    let began = Instant::now();
    for i in 0..cli.deployments {
        let deployment: Deployment = serde_json::from_value(json!({
            "metadata": {"name": format!("scale-{i}")},
            "spec": {
                "replicas": cli.replicas,
                "selector": {"matchLabels": {"app": format!("scale-{i}")}},
                "template": {
                    "metadata": {"labels": {"app": format!("scale-{i}"), "bench": "scale"}},
                    "spec": {"containers": [{"name": "app", "image": "nginx:alpine"}]}
                }
            }
        }))?;
        deployments
            .create(&PostParams::default(), &deployment)
            .await?;
    }
    eventually(
        format!("{total} Pods Ready"),
        Duration::from_secs(900),
        || {
            let pods = pods.clone();
            async move {
                let list = pods
                    .list(&ListParams::default().labels("bench=scale"))
                    .await?;
                let ready = list.items.iter().filter(|p| is_ready(p)).count() as u32;
                Ok((ready >= total).then_some(()))
            }
        },
    )
    .await?;
    let elapsed = began.elapsed();
    let (rss, hwm) = rss_kib(sim_pid).unwrap_or_default();
    println!(
        "{total} Pods ({} Deployments x {}) Ready on {} simulated nodes: {:.1} s ({:.0} Pods/s)",
        cli.deployments,
        cli.replicas,
        cli.nodes,
        elapsed.as_secs_f64(),
        f64::from(total) / elapsed.as_secs_f64()
    );
    println!(
        "kubelet-sim RSS at {total} Pods: {:.1} MiB (peak {:.1} MiB)",
        rss as f64 / 1024.0,
        hwm as f64 / 1024.0
    );
    for (name, pid) in plane.pids() {
        if let Some((rss, hwm)) = rss_kib(pid) {
            println!(
                "{name} RSS: {:.0} MiB (peak {:.0} MiB)",
                rss as f64 / 1024.0,
                hwm as f64 / 1024.0
            );
        }
    }
    plane.stop();
    Ok(())
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}
