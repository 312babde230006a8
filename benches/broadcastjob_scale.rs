//! BroadcastJob scale figures: one BroadcastJob with parallelism 100% on `--nodes` (300) simulated
//! nodes, its Pods `restartPolicy: Never` (kubelet-sim completes them after 500 ms). Prints the time
//! from create to `phase: completed`, the apiserver writes to Pods per Pod, and kruise-manager's
//! memory. Asserts nothing about time.
//!
//! kubelet-sim runs as a child process (this binary re-executed with `sim`); kruise-manager is the
//! binary next to this one (`cargo build --release -p kruise-manager`, as `make bench` does) or
//! `$KRUISE_MANAGER_BIN`.

use std::time::{Duration, Instant};

use clap::Parser;
use k8s_openapi::api::core::v1::Namespace;
use kruise_api::broadcastjob::v1beta1::BroadcastJob;
use kruise_benches::apiserver::PodWrites;
use kruise_benches::manager::{Manager, print_all_rss};
use kruise_benches::sim;
use kruise_benches::sim::SimCommand;
use kruise_testkit::control_plane::ControlPlane;
use kruise_testkit::until;
use kube::api::{Api, PostParams};
use serde_json::json;

#[derive(Parser, Debug)]
struct Cli {
    #[command(subcommand)]
    command: Option<SimCommand>,
    /// Simulated nodes.
    #[arg(long, default_value_t = 300)]
    nodes: u16,
    /// Extra kruise-manager argument (repeatable), e.g. `--manager-arg=--kube-api-qps=200`.
    #[arg(long = "manager-arg", allow_hyphen_values = true)]
    manager_args: Vec<String>,
}

const NAMESPACE: &str = "bench";
const NAME: &str = "broadcast";
const TIMEOUT: Duration = Duration::from_secs(1800);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let (command, nodes) = (cli.command, cli.nodes);
    sim::sim_or_bench(command, nodes, move |plane| {
        Box::pin(async move { bench(&cli, plane).await })
    })
    .await
}

async fn bench(cli: &Cli, plane: &ControlPlane) -> anyhow::Result<()> {
    sim::spawn(plane, cli.nodes).await?;
    let client = plane.client().await?;
    let manager = Manager::start(plane, &cli.manager_args).await?;

    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut namespace = Namespace::default();
    namespace.metadata.name = Some(NAMESPACE.into());
    namespaces
        .create(&PostParams::default(), &namespace)
        .await?;
    let jobs: Api<BroadcastJob> = Api::namespaced(client.clone(), NAMESPACE);
    let job: BroadcastJob = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1",
        "kind": "BroadcastJob",
        "metadata": {"name": NAME},
        "spec": {
            "parallelism": "100%",
            "completionPolicy": {"type": "Always"},
            "template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "c", "image": "busybox:1.36", "command": ["echo", "started"]}]
            }}
        }
    }))?;
    let nodes = i32::from(cli.nodes);
    println!(
        "BroadcastJob (parallelism 100%) on {nodes} simulated nodes, kruise-manager {:?}",
        cli.manager_args
    );

    let writes = PodWrites::read(&client).await?;
    let began = Instant::now();
    jobs.create(&PostParams::default(), &job).await?;
    until(
        format!("{NAME} completed on {nodes} nodes"),
        TIMEOUT,
        || async {
            let job = jobs.get(NAME).await?;
            let s = job.status.unwrap_or_default();
            Ok(s.phase == "completed" && s.desired == nodes && s.succeeded == nodes)
        },
    )
    .await?;
    let took = began.elapsed();
    println!(
        "create → completed: {:.1} s ({:.0} Pods/s)",
        took.as_secs_f64(),
        f64::from(nodes) / took.as_secs_f64()
    );
    PodWrites::read(&client)
        .await?
        .since(&writes)
        .print(f64::from(nodes));
    manager.print_rss();
    print_all_rss(plane);
    Ok(())
}
