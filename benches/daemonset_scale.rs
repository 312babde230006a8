//! Advanced DaemonSet scale figures on `--nodes` (300) simulated nodes: create → a Ready Pod on every
//! node; an in-place image rollout (InPlaceIfPossible, maxUnavailable 100%) → every node updated and
//! Ready; then Kubernetes' own DaemonSet on the same fleet, created and rolled (RollingUpdate,
//! maxUnavailable 100%, recreate). Prints the times, the apiserver writes to Pods per Pod and the
//! memory of kruise-manager. Asserts nothing about time.
//!
//! kubelet-sim runs as a child process (this binary re-executed with `sim`); kruise-manager is the
//! binary next to this one (`cargo build --release -p kruise-manager`, as `make bench` does) or
//! `$KRUISE_MANAGER_BIN`.

use k8s_openapi::api::apps::v1::DaemonSet as NativeDaemonSet;
use kruise_api::daemonset::v1beta1::DaemonSet;
use kruise_benches::apiserver::TimedWrites;
use kruise_benches::manager::print_all_rss;
use kruise_benches::sim::{self, SimArgs};
use kruise_benches::stats::print_rate;
use kruise_benches::{NAMESPACE, TIMEOUT, create_namespace};
use kruise_testkit::control_plane::ControlPlane;
use kruise_testkit::until;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// `--nodes` (300) and the manager's extra arguments.
type Cli = SimArgs<300>;

fn main() -> anyhow::Result<()> {
    sim::main(|cli: &Cli| cli, bench)
}

fn spec(api_version: &str, name: &str, strategy: serde_json::Value) -> serde_json::Value {
    json!({
        "apiVersion": api_version,
        "kind": "DaemonSet",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "agent", "image": "agent:v1"}]}
            },
            "updateStrategy": strategy,
        }
    })
}

/// The image change both rollouts make (a merge patch: the template has one container).
fn v2() -> Patch<serde_json::Value> {
    Patch::Merge(
        json!({"spec": {"template": {"spec": {"containers": [{"name": "agent", "image": "agent:v2"}]}}}}),
    )
}

async fn bench(cli: &Cli, plane: &ControlPlane) -> anyhow::Result<()> {
    let (client, manager) = cli.start_nodes_and_manager(plane).await?;
    create_namespace(&client, NAMESPACE, Value::Null).await?;
    let nodes = i32::from(cli.nodes);
    println!(
        "Advanced DaemonSet on {nodes} simulated nodes, kruise-manager {:?}",
        cli.manager_args
    );

    // Advanced DaemonSet: create, then roll in place.
    let sets: Api<DaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let ads: DaemonSet = serde_json::from_value(spec(
        "apps.kruise.io/v1beta1",
        "ads",
        json!({"type": "RollingUpdate", "rollingUpdate": {"rollingUpdateType": "InPlaceIfPossible", "maxUnavailable": "100%"}}),
    ))?;
    let phase = TimedWrites::start(&client).await?;
    sets.create(&PostParams::default(), &ads).await?;
    let ads_ready = |updated: bool| {
        let sets = sets.clone();
        async move {
            let ds = sets.get("ads").await?;
            let s = ds.status.unwrap_or_default();
            Ok(ds.metadata.generation == Some(s.observed_generation)
                && s.desired_number_scheduled == nodes
                && s.number_available == nodes
                && (!updated || s.updated_number_scheduled == nodes))
        }
    };
    until("ADS Ready on every node", TIMEOUT, || ads_ready(false)).await?;
    print_rate("ADS create → all Ready", phase.took(), f64::from(nodes));
    phase.print_writes(&client, f64::from(nodes)).await?;
    let phase = TimedWrites::start(&client).await?;
    sets.patch("ads", &PatchParams::default(), &v2()).await?;
    // The status keeps the old counts until the new generation is observed.
    until("ADS updated in place on every node", TIMEOUT, || {
        ads_ready(true)
    })
    .await?;
    println!(
        "ADS in-place rollout (maxUnavailable 100%) → all updated and Ready: {:.1} s",
        phase.took().as_secs_f64()
    );
    phase.print_writes(&client, f64::from(nodes)).await?;
    manager.print_rss();

    // Kubernetes' DaemonSet on the same fleet: create, then roll (recreate).
    let natives: Api<NativeDaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let native: NativeDaemonSet = serde_json::from_value(spec(
        "apps/v1",
        "native",
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}}),
    ))?;
    let native_ready = |updated: bool| {
        let natives = natives.clone();
        async move {
            let ds = natives.get("native").await?;
            let s = ds.status.unwrap_or_default();
            Ok(ds.metadata.generation == s.observed_generation
                && s.desired_number_scheduled == nodes
                && s.number_available == Some(nodes)
                && (!updated || s.updated_number_scheduled == Some(nodes)))
        }
    };
    let phase = TimedWrites::start(&client).await?;
    natives.create(&PostParams::default(), &native).await?;
    until("native DaemonSet Ready on every node", TIMEOUT, || {
        native_ready(false)
    })
    .await?;
    println!(
        "native DaemonSet create → all Ready: {:.1} s",
        phase.took().as_secs_f64()
    );
    phase.print_writes(&client, f64::from(nodes)).await?;
    let phase = TimedWrites::start(&client).await?;
    natives
        .patch("native", &PatchParams::default(), &v2())
        .await?;
    until("native DaemonSet rolled on every node", TIMEOUT, || {
        native_ready(true)
    })
    .await?;
    println!(
        "native DaemonSet rollout (maxUnavailable 100%, recreate) → all updated and Ready: {:.1} s",
        phase.took().as_secs_f64()
    );
    phase.print_writes(&client, f64::from(nodes)).await?;
    print_all_rss(plane);
    Ok(())
}
