//! CloneSet scale figures: one CloneSet of `--replicas` Pods (1,000) on `--nodes` (20) simulated nodes,
//! rolled out twice with maxUnavailable 100%: an in-place image update (InPlaceIfPossible,
//! gracePeriodSeconds 0), then a ReCreate update. For each rollout: the time from the image patch to
//! `updatedReadyReplicas == replicas`, the time until a watch on the Pods first sees every one Ready at
//! the new image (the status lag is the difference), the apiserver writes to Pods per Pod updated
//! (from the apiserver's `apiserver_request_total`, before vs after; kruise-manager's own from the
//! audit log), kruise-manager's CPU, its CloneSet reconcile durations (p50, p99) and its memory.
//! Prints figures; asserts nothing about time.
//!
//! Before the manager starts, the apiserver's floor ([`kruise_benches::floor`]): the same in-place
//! rollout of as many bare Pods by a minimal controller (the image patch alone, then the drain, the
//! image and the finish), and after the CloneSet's in-place rollout its time over each floor.
//!
//! kubelet-sim runs as a child process (this binary re-executed with `sim`); kruise-manager is the
//! binary next to this one (`cargo build --release -p kruise-manager`, as `make bench` does) or
//! `$KRUISE_MANAGER_BIN`.

use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use kruise_api::cloneset::v1beta1::CloneSet;
use kruise_benches::apiserver::PodWrites;
use kruise_benches::manager::{Manager, print_all_rss};
use kruise_benches::process::{cpu_seconds, plane_and_bench};
use kruise_benches::prom::Histogram;
use kruise_benches::sim::SimArgs;
use kruise_benches::stats::mib;
use kruise_benches::{NAMESPACE, TIMEOUT, create_namespace, floor, print_updated_in_place, sim};
use kruise_testkit::control_plane::ControlPlane;
use kruise_testkit::until;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};

#[derive(Parser, Debug)]
struct Cli {
    /// CloneSet replicas.
    #[arg(long, default_value_t = 1000)]
    replicas: i32,
    /// Skip the apiserver's floor (the same in-place rollout on bare Pods by a minimal controller,
    /// measured before the manager starts).
    #[arg(long)]
    no_floor: bool,
    /// `--nodes` (20) and the manager's extra arguments.
    #[command(flatten)]
    sim: SimArgs<20>,
}

const NAME: &str = "scale";

fn main() -> anyhow::Result<()> {
    sim::main(|cli: &Cli| &cli.sim, bench)
}

async fn bench(cli: &Cli, plane: &ControlPlane) -> anyhow::Result<()> {
    sim::spawn(plane, cli.sim.nodes).await?;
    let client = plane.client().await?;
    let pod_count = usize::try_from(cli.replicas).unwrap_or_default();
    let floors = if cli.no_floor {
        Vec::new()
    } else {
        let writes = [floor::Writes::ImageOnly, floor::Writes::DrainImageFinish];
        floor::measure_each(
            &client,
            &floor::Shape::uniform(pod_count, 1),
            &writes,
            &plane_and_bench(plane),
        )
        .await?
    };
    let manager = Manager::start(plane, &cli.sim.manager_args).await?;
    create_namespace(&client, NAMESPACE, Value::Null).await?;
    let clonesets: Api<CloneSet> = Api::namespaced(client.clone(), NAMESPACE);
    let replicas = cli.replicas;
    let cloneset: CloneSet = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1",
        "kind": "CloneSet",
        "metadata": {"name": NAME},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": NAME}},
            "template": {
                "metadata": {"labels": {"app": NAME}},
                "spec": {"containers": [{"name": "app", "image": "nginx:alpine"}]}
            },
            "updateStrategy": {"rollingUpdate": {
                "podUpdatePolicy": "InPlaceIfPossible",
                "maxUnavailable": "100%",
                "inPlaceUpdateStrategy": {"gracePeriodSeconds": 0}
            }}
        }
    }))?;
    println!(
        "CloneSet of {replicas} Pods on {} simulated nodes, kruise-manager {:?}",
        cli.sim.nodes, cli.sim.manager_args
    );

    let phase = Phase::start(plane, &client, &manager, replicas, "nginx:alpine").await?;
    clonesets.create(&PostParams::default(), &cloneset).await?;
    wait_rolled_out(&clonesets, replicas).await?;
    phase.report("create", plane, &client, &manager).await?;

    let in_place = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "app", "image": "nginx:1.19.1"}
    ]}}}});
    let in_place_took = rollout(
        "in-place update (InPlaceIfPossible, maxUnavailable 100%, gracePeriodSeconds 0)",
        plane,
        &client,
        &clonesets,
        replicas,
        (&in_place, "nginx:1.19.1"),
        &manager,
    )
    .await?;
    print_updated_in_place(&client, NAMESPACE, "app=scale").await?;
    for (writes, floor) in &floors {
        println!(
            "  in-place rollout over the apiserver floor ({}): {:.2}x",
            writes.describe(),
            in_place_took.as_secs_f64() / floor.as_secs_f64().max(f64::EPSILON)
        );
    }

    let recreate = json!({"spec": {
        "updateStrategy": {"rollingUpdate": {"podUpdatePolicy": "ReCreate"}},
        "template": {"spec": {"containers": [{"name": "app", "image": "nginx:1.20"}]}}
    }});
    rollout(
        "ReCreate update (maxUnavailable 100%)",
        plane,
        &client,
        &clonesets,
        replicas,
        (&recreate, "nginx:1.20"),
        &manager,
    )
    .await?;
    print_all_rss(plane);
    Ok(())
}

async fn rollout(
    what: &str,
    plane: &ControlPlane,
    client: &Client,
    clonesets: &Api<CloneSet>,
    replicas: i32,
    (patch, image): (&Value, &str),
    manager: &Manager,
) -> anyhow::Result<Duration> {
    let phase = Phase::start(plane, client, manager, replicas, image).await?;
    clonesets
        .patch(NAME, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .with_context(|| format!("patching the CloneSet for the {what}"))?;
    wait_rolled_out(clonesets, replicas).await?;
    phase.report(what, plane, client, manager).await
}

/// Until the CloneSet's status reports every Pod updated and ready at the current generation.
async fn wait_rolled_out(clonesets: &Api<CloneSet>, replicas: i32) -> anyhow::Result<()> {
    until(
        format!("{replicas} updated Ready Pods"),
        TIMEOUT,
        || async {
            Ok(kruise_benches::cloneset_rolled_out(
                &clonesets.get(NAME).await?,
                replicas,
            ))
        },
    )
    .await
}

/// When a watch on the CloneSet's Pods first sees `replicas` of them Ready with every container
/// running `image`: what the Pods show, as opposed to what the CloneSet's status says.
fn pods_ready_at(
    client: &Client,
    replicas: i32,
    image: &str,
) -> tokio::task::JoinHandle<Option<Instant>> {
    floor::spawn_ready_watch(
        Api::namespaced(client.clone(), NAMESPACE),
        watcher::Config::default().labels("app=scale"),
        usize::try_from(replicas).unwrap_or_default(),
        image,
    )
}

/// What a phase (create or rollout) is measured against.
struct Phase {
    replicas: i32,
    began: Instant,
    pods_ready: tokio::task::JoinHandle<Option<Instant>>,
    writes: PodWrites,
    manager_writes: PodWrites,
    manager_cpu: f64,
    reconciles: Histogram,
}

impl Phase {
    async fn start(
        plane: &ControlPlane,
        client: &Client,
        manager: &Manager,
        replicas: i32,
        image: &str,
    ) -> anyhow::Result<Self> {
        Ok(Self {
            replicas,
            writes: PodWrites::read(client).await?,
            manager_writes: PodWrites::read_manager(plane),
            manager_cpu: cpu_seconds(manager.pid).unwrap_or(0.0),
            reconciles: reconciles(manager).await?,
            pods_ready: pods_ready_at(client, replicas, image),
            began: Instant::now(),
        })
    }

    /// Prints the phase's figures: time to the status, time to what a watch on the Pods saw, Pod
    /// writes (all, and kruise-manager's alone), the manager's CPU, CloneSet reconcile durations and
    /// memory.
    async fn report(
        self,
        what: &str,
        plane: &ControlPlane,
        client: &Client,
        manager: &Manager,
    ) -> anyhow::Result<Duration> {
        let took = self.began.elapsed();
        let replicas = self.replicas;
        println!(
            "{what}: {:.1} s to updatedReadyReplicas={replicas} ({:.0} Pods/s)",
            took.as_secs_f64(),
            f64::from(replicas) / took.as_secs_f64()
        );
        // The watch has seen them all by now, or is about to.
        match tokio::time::timeout(Duration::from_secs(10), self.pods_ready).await {
            Ok(Ok(Some(at))) => {
                let seen = at.saturating_duration_since(self.began);
                println!(
                    "  Pods Ready (watch): {:.1} s; status lag {:.1} s",
                    seen.as_secs_f64(),
                    took.saturating_sub(seen).as_secs_f64()
                );
            }
            _ => println!("  Pods Ready (watch): not seen"),
        }
        let pods = f64::from(replicas);
        PodWrites::read(client)
            .await?
            .since(&self.writes)
            .print(pods);
        PodWrites::read_manager(plane)
            .since(&self.manager_writes)
            .print_as("of which kruise-manager's", pods);
        let reconciles = reconciles(manager).await?.since(&self.reconciles);
        let ms = |q: f64| {
            reconciles
                .quantile(q)
                .map_or("-".to_owned(), |s| format!("{:.0} ms", s * 1e3))
        };
        println!(
            "  kruise-manager CPU {:.1} s; CloneSet reconciles {:.0} (p50 {}, p99 {})",
            cpu_seconds(manager.pid).unwrap_or(0.0) - self.manager_cpu,
            reconciles.count,
            ms(0.5),
            ms(0.99)
        );
        manager.print_rss();
        if let Some(rss) = manager.rss_at_rest_kib().await {
            println!("  kruise-manager RSS at rest after it: {}", mib(rss));
        }
        Ok(took)
    }
}

/// The CloneSet controller's reconcile durations so far.
async fn reconciles(manager: &Manager) -> anyhow::Result<Histogram> {
    let text = manager.metrics_text().await?;
    Ok(Histogram::read(
        &text,
        "kruise_controller_reconcile_duration_seconds",
        |s| s.label("controller") == "cloneset-controller",
    ))
}
