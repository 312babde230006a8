//! Advanced StatefulSet scale figures (issue 11).
//!
//! 1. One Parallel Advanced StatefulSet of `--replicas` Pods (1,000) on `--nodes` (20) simulated nodes:
//!    create → all Ready, then an in-place image rollout (InPlaceIfPossible, maxUnavailable 100%,
//!    gracePeriodSeconds 0) → updatedReadyReplicas = replicas.
//! 2. Kubernetes' own StatefulSet against ours on `--compare-replicas` Pods (500), one after the other
//!    on the same cluster, with the same settings: Parallel, RollingUpdate with maxUnavailable 100%
//!    (kube-controller-manager runs with `MaxUnavailableStatefulSet=true`, alpha in v1.34), ours in
//!    ReCreate mode, so both delete and recreate every Pod.
//!
//! For each phase: the time, the apiserver writes to Pods per Pod (from `apiserver_request_total`) and
//! kruise-manager's memory. Prints figures; asserts nothing about time.
//!
//! kubelet-sim runs as a child process (this binary re-executed with `sim`); kruise-manager is the
//! binary next to this one (`cargo build --release -p kruise-manager`, as `make bench` does) or
//! `$KRUISE_MANAGER_BIN`.

use anyhow::Context;
use clap::Parser;
use k8s_openapi::api::apps::v1::StatefulSet as NativeStatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kruise_api::statefulset::v1beta1::StatefulSet;
use kruise_benches::apiserver::TimedWrites;
use kruise_benches::manager::{Manager, print_all_rss};
use kruise_benches::sim::{self, SimArgs};
use kruise_benches::stats::print_rate;
use kruise_benches::{NAMESPACE, TIMEOUT, create_namespace, print_updated_in_place};
use kruise_testkit::control_plane::{ControlPlane, Options};
use kruise_testkit::until;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

#[derive(Parser, Debug)]
struct Cli {
    /// Replicas of the in-place Advanced StatefulSet.
    #[arg(long, default_value_t = 1000)]
    replicas: i32,
    /// Replicas of the native vs. Advanced StatefulSet comparison.
    #[arg(long, default_value_t = 500)]
    compare_replicas: i32,
    /// `--nodes` (20) and the manager's extra arguments.
    #[command(flatten)]
    sim: SimArgs<20>,
}

fn main() -> anyhow::Result<()> {
    let options = |_: &Cli| Options {
        controller_manager_feature_gates: vec!["MaxUnavailableStatefulSet=true".into()],
        ..sim::bench_options()
    };
    sim::main_with(|cli: &Cli| &cli.sim, options, bench)
}

/// The set in either API group: the same spec, kruise-only fields added for ours.
fn stateful_set(api_version: &str, name: &str, replicas: i32, rolling: Value) -> Value {
    let mut template_spec = json!({"containers": [{"name": "app", "image": "nginx:alpine"}]});
    if api_version != "apps/v1" {
        template_spec["readinessGates"] = json!([{"conditionType": "InPlaceUpdateReady"}]);
    }
    json!({
        "apiVersion": api_version,
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": template_spec},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": rolling}
        }
    })
}

/// The status counters both kinds share, read as JSON so one wait serves both.
async fn rolled_out(
    client: &Client,
    api_version: &str,
    name: &str,
    replicas: i32,
) -> anyhow::Result<bool> {
    let status: Value = if api_version == "apps/v1" {
        let api: Api<NativeStatefulSet> = Api::namespaced(client.clone(), NAMESPACE);
        let s = api.get(name).await?;
        json!({"generation": s.metadata.generation, "status": s.status})
    } else {
        let api: Api<StatefulSet> = Api::namespaced(client.clone(), NAMESPACE);
        let s = api.get(name).await?;
        json!({"generation": s.metadata.generation, "status": s.status})
    };
    let st = &status["status"];
    let n = |key: &str| st[key].as_i64().unwrap_or(0);
    Ok(
        status["generation"].as_i64() == st["observedGeneration"].as_i64()
            && n("replicas") == i64::from(replicas)
            && n("updatedReplicas") == i64::from(replicas)
            && n("readyReplicas") == i64::from(replicas)
            && st["currentRevision"] == st["updateRevision"],
    )
}

async fn wait_rolled_out(
    client: &Client,
    api_version: &str,
    name: &str,
    replicas: i32,
) -> anyhow::Result<()> {
    until(
        format!("{api_version} StatefulSet {name}: {replicas} updated Ready Pods"),
        TIMEOUT,
        || rolled_out(client, api_version, name, replicas),
    )
    .await
}

/// Applies `doc` (server-side) and reports the time until it is rolled out.
async fn phase(
    what: &str,
    client: &Client,
    doc: &Value,
    replicas: i32,
    manager: &Manager,
) -> anyhow::Result<()> {
    let api_version = doc["apiVersion"].as_str().unwrap_or_default();
    let name = doc["metadata"]["name"].as_str().unwrap_or_default();
    let phase = TimedWrites::start(client).await?;
    let params = PatchParams::apply("statefulset-scale").force();
    if api_version == "apps/v1" {
        let api: Api<NativeStatefulSet> = Api::namespaced(client.clone(), NAMESPACE);
        api.patch(name, &params, &Patch::Apply(doc))
            .await
            .with_context(|| format!("applying {what}"))?;
    } else {
        let api: Api<StatefulSet> = Api::namespaced(client.clone(), NAMESPACE);
        api.patch(name, &params, &Patch::Apply(doc))
            .await
            .with_context(|| format!("applying {what}"))?;
    }
    wait_rolled_out(client, api_version, name, replicas).await?;
    print_rate(what, phase.took(), f64::from(replicas));
    phase.print_writes(client, f64::from(replicas)).await?;
    manager.print_rss();
    Ok(())
}

fn with_image(mut doc: Value, image: &str) -> Value {
    doc["spec"]["template"]["spec"]["containers"][0]["image"] = json!(image);
    doc
}

async fn bench(cli: &Cli, plane: &ControlPlane) -> anyhow::Result<()> {
    let (client, manager) = cli.sim.start_nodes_and_manager(plane).await?;
    create_namespace(&client, NAMESPACE, Value::Null).await?;
    println!(
        "Advanced StatefulSet on {} simulated nodes, kruise-manager {:?}",
        cli.sim.nodes, cli.sim.manager_args
    );

    // 1. In place, 1,000 Pods.
    let replicas = cli.replicas;
    let in_place = stateful_set(
        "apps.kruise.io/v1beta1",
        "scale",
        replicas,
        json!({"podUpdatePolicy": "InPlaceIfPossible", "maxUnavailable": "100%",
               "inPlaceUpdateStrategy": {"gracePeriodSeconds": 0}}),
    );
    phase(
        &format!("ASTS create {replicas} Pods"),
        &client,
        &in_place,
        replicas,
        &manager,
    )
    .await?;
    phase(
        "ASTS in-place image rollout (InPlaceIfPossible, maxUnavailable 100%, gracePeriodSeconds 0)",
        &client,
        &with_image(in_place, "nginx:1.19.1"),
        replicas,
        &manager,
    )
    .await?;
    print_updated_in_place(&client, NAMESPACE, "app=scale").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let asts: Api<StatefulSet> = Api::namespaced(client.clone(), NAMESPACE);
    asts.delete("scale", &DeleteParams::foreground()).await?;
    until("the 1,000 Pods gone", TIMEOUT, || async {
        Ok(pods
            .list(&ListParams::default().labels("app=scale"))
            .await?
            .items
            .is_empty())
    })
    .await?;

    // 2. Native vs. ours, recreating every Pod.
    let compare = cli.compare_replicas;
    for (api_version, rolling, label) in [
        (
            "apps/v1",
            json!({"maxUnavailable": "100%"}),
            "Kubernetes StatefulSet",
        ),
        (
            "apps.kruise.io/v1beta1",
            json!({"maxUnavailable": "100%", "podUpdatePolicy": "ReCreate"}),
            "Advanced StatefulSet (ReCreate)",
        ),
    ] {
        let name = if api_version == "apps/v1" {
            "native"
        } else {
            "kruise"
        };
        let doc = stateful_set(api_version, name, compare, rolling);
        phase(
            &format!("{label}: create {compare} Pods"),
            &client,
            &doc,
            compare,
            &manager,
        )
        .await?;
        phase(
            &format!("{label}: image rollout, Parallel, maxUnavailable 100%"),
            &client,
            &with_image(doc, "nginx:1.19.1"),
            compare,
            &manager,
        )
        .await?;
    }
    print_all_rss(plane);
    Ok(())
}
