//! UnitedDeployment scale figures: one UnitedDeployment of `--replicas` Pods (1,000) over three CloneSet
//! subsets (one per zone) on `--nodes` (21) simulated nodes, then an in-place image rollout through the
//! subsets (InPlaceIfPossible, maxUnavailable 100%, gracePeriodSeconds 0). For each step: the time to
//! `updatedReadyReplicas == replicas` with the current revision caught up, the apiserver writes to Pods
//! per Pod, and kruise-manager's memory (peak RSS at the end). Prints figures; asserts nothing about time.
//!
//! kubelet-sim runs as a child process (this binary re-executed with `sim`); kruise-manager is the
//! binary next to this one (`cargo build --release -p kruise-manager`, as `make bench` does) or
//! `$KRUISE_MANAGER_BIN`.

use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use kruise_api::uniteddeployment::v1beta1::UnitedDeployment;
use kruise_benches::apiserver::PodWrites;
use kruise_benches::manager::{Manager, print_all_rss};
use kruise_benches::sim::{self, SimArgs};
use kruise_benches::{NAMESPACE, TIMEOUT, create_namespace, print_updated_in_place};
use kruise_testkit::control_plane::ControlPlane;
use kruise_testkit::until;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

#[derive(Parser, Debug)]
struct Cli {
    /// UnitedDeployment replicas.
    #[arg(long, default_value_t = 1000)]
    replicas: i32,
    /// `--nodes` (21, spread over three zones) and the manager's extra arguments.
    #[command(flatten)]
    sim: SimArgs<21>,
}

const NAME: &str = "scale";

fn main() -> anyhow::Result<()> {
    sim::main(|cli: &Cli| &cli.sim, bench)
}

fn united_deployment(replicas: i32) -> anyhow::Result<UnitedDeployment> {
    let subsets: Vec<_> = sim::ZONES
        .iter()
        .map(|zone| {
            json!({"name": zone, "nodeSelectorTerm": {"matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}
            ]}})
        })
        .collect();
    Ok(serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1beta1",
        "kind": "UnitedDeployment",
        "metadata": {"name": NAME},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": NAME}},
            "template": {"cloneSetTemplate": {
                "metadata": {"labels": {"app": NAME}},
                "spec": {
                    "selector": {"matchLabels": {"app": NAME}},
                    "template": {
                        "metadata": {"labels": {"app": NAME}},
                        "spec": {
                            "readinessGates": [{"conditionType": "InPlaceUpdateReady"}],
                            "containers": [{"name": "app", "image": "nginx:alpine"}]
                        }
                    },
                    "updateStrategy": {"rollingUpdate": {
                        "podUpdatePolicy": "InPlaceIfPossible",
                        "maxUnavailable": "100%",
                        "inPlaceUpdateStrategy": {"gracePeriodSeconds": 0}
                    }}
                }
            }},
            "topology": {"subsets": subsets}
        }
    }))?)
}

async fn bench(cli: &Cli, plane: &ControlPlane) -> anyhow::Result<()> {
    let (client, manager) = cli.sim.start_nodes_and_manager(plane).await?;
    create_namespace(&client, NAMESPACE, Value::Null).await?;
    let uds: Api<UnitedDeployment> = Api::namespaced(client.clone(), NAMESPACE);
    let replicas = cli.replicas;
    println!(
        "UnitedDeployment of {replicas} Pods over 3 CloneSet subsets on {} simulated nodes, kruise-manager {:?}",
        cli.sim.nodes, cli.sim.manager_args
    );

    let began = Instant::now();
    let writes = PodWrites::read(&client).await?;
    uds.create(&PostParams::default(), &united_deployment(replicas)?)
        .await?;
    wait_rolled_out(&uds, replicas).await?;
    report(
        "create",
        replicas,
        began.elapsed(),
        &PodWrites::read(&client).await?.since(&writes),
        &manager,
    );

    let writes = PodWrites::read(&client).await?;
    let began = Instant::now();
    let patch = json!([{"op": "replace",
        "path": "/spec/template/cloneSetTemplate/spec/template/spec/containers/0/image",
        "value": "nginx:1.19.1"}]);
    uds.patch(
        NAME,
        &PatchParams::default(),
        &Patch::<()>::Json(serde_json::from_value(patch)?),
    )
    .await
    .context("patching the UnitedDeployment image")?;
    wait_rolled_out(&uds, replicas).await?;
    report(
        "in-place update through the CloneSet subsets (maxUnavailable 100%, gracePeriodSeconds 0)",
        replicas,
        began.elapsed(),
        &PodWrites::read(&client).await?.since(&writes),
        &manager,
    );
    print_updated_in_place(&client, NAMESPACE, "app=scale").await?;
    print_all_rss(plane);
    Ok(())
}

/// Until the UnitedDeployment reports every Pod updated and Ready and its current revision caught up.
async fn wait_rolled_out(uds: &Api<UnitedDeployment>, replicas: i32) -> anyhow::Result<()> {
    until(
        format!("{replicas} updated Ready Pods"),
        TIMEOUT,
        || async {
            let ud = uds.get(NAME).await?;
            let s = ud.status.unwrap_or_default();
            Ok(ud.metadata.generation == Some(s.observed_generation)
                && s.replicas == replicas
                && s.updated_ready_replicas == replicas
                && s.current_revision == s.updated_revision)
        },
    )
    .await
}

fn report(what: &str, replicas: i32, took: Duration, writes: &PodWrites, manager: &Manager) {
    println!(
        "{what}: {:.1} s to updatedReadyReplicas={replicas} ({:.0} Pods/s)",
        took.as_secs_f64(),
        f64::from(replicas) / took.as_secs_f64()
    );
    writes.print(f64::from(replicas));
    manager.print_rss();
}
