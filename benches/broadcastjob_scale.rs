//! BroadcastJob scale figures: one BroadcastJob with parallelism 100% on `--nodes` (300) simulated
//! nodes, its Pods `restartPolicy: Never` (kubelet-sim completes them after 500 ms). Prints the time
//! from create to `phase: completed`, the apiserver writes to Pods per Pod, and kruise-manager's
//! memory. Asserts nothing about time.
//!
//! kubelet-sim runs as a child process (this binary re-executed with `sim`); kruise-manager is the
//! binary next to this one (`cargo build --release -p kruise-manager`, as `make bench` does) or
//! `$KRUISE_MANAGER_BIN`.

use kruise_api::broadcastjob::v1beta1::BroadcastJob;
use kruise_benches::apiserver::TimedWrites;
use kruise_benches::manager::print_all_rss;
use kruise_benches::sim::{self, SimArgs};
use kruise_benches::stats::print_rate;
use kruise_benches::{NAMESPACE, TIMEOUT, create_namespace};
use kruise_testkit::control_plane::ControlPlane;
use kruise_testkit::until;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

/// `--nodes` (300) and the manager's extra arguments.
type Cli = SimArgs<300>;

const NAME: &str = "broadcast";

fn main() -> anyhow::Result<()> {
    sim::main(|cli: &Cli| cli, bench)
}

async fn bench(cli: &Cli, plane: &ControlPlane) -> anyhow::Result<()> {
    let (client, manager) = cli.start_nodes_and_manager(plane).await?;
    create_namespace(&client, NAMESPACE, Value::Null).await?;
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

    let phase = TimedWrites::start(&client).await?;
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
    print_rate("create → completed", phase.took(), f64::from(nodes));
    phase.print_writes(&client, f64::from(nodes)).await?;
    manager.print_rss();
    print_all_rss(plane);
    Ok(())
}
