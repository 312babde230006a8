//! CloneSet scale figures: one CloneSet of `--replicas` Pods (1,000) on `--nodes` (20) simulated nodes,
//! rolled out twice with maxUnavailable 100%: an in-place image update (InPlaceIfPossible,
//! gracePeriodSeconds 0), then a ReCreate update. For each rollout: the time from the image patch to
//! `updatedReadyReplicas == replicas`, the apiserver writes to Pods per Pod updated (from the apiserver's
//! `apiserver_request_total`, before vs after) and kruise-manager's memory. Prints figures; asserts
//! nothing about time.
//!
//! kubelet-sim runs as a child process (this binary re-executed with `sim`); kruise-manager is the
//! binary next to this one (`cargo build --release -p kruise-manager`, as `make bench` does) or
//! `$KRUISE_MANAGER_BIN`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Parser, Subcommand};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kruise_api::cloneset::v1beta1::CloneSet;
use kruise_testkit::control_plane::{ControlPlane, Options};
use kruise_testkit::manager::{self, ManagerOptions};
use kruise_testkit::process::{Process, rss_kib};
use kruise_testkit::testbed::{crd_dir, wait_nodes_ready};
use kruise_testkit::{eventually, until};
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kubelet_sim::NodeSpecSim;
use serde_json::{Value, json};

#[derive(Parser, Debug)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Simulated nodes.
    #[arg(long, default_value_t = 20)]
    nodes: u16,
    /// CloneSet replicas.
    #[arg(long, default_value_t = 1000)]
    replicas: i32,
    /// Extra kruise-manager argument (repeatable), e.g. `--manager-arg=--kube-api-qps=200`.
    #[arg(long = "manager-arg", allow_hyphen_values = true)]
    manager_args: Vec<String>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Internal: run kubelet-sim for `--nodes` nodes against $KUBECONFIG.
    Sim,
}

const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];
const NAMESPACE: &str = "bench";
const NAME: &str = "scale";
const TIMEOUT: Duration = Duration::from_secs(1800);

fn fleet(count: u16) -> Vec<NodeSpecSim> {
    let zones: Vec<String> = ZONES.iter().map(|z| z.to_string()).collect();
    NodeSpecSim::fleet("scale", count, &zones)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Sim) => {
            let client = Client::try_default().await?;
            let mut config = kubelet_sim::Config::new(fleet(cli.nodes));
            config.heartbeat_every = Duration::from_secs(5);
            kubelet_sim::run(client, config, std::future::pending()).await?;
            Ok(())
        }
        None => {
            let plane = ControlPlane::start(Options {
                crd_dir: Some(crd_dir()),
                ..Options::default()
            })
            .await?;
            let result = bench(&cli, &plane).await;
            if result.is_err() {
                eprintln!("{}", plane.log_tails(30));
            }
            plane.stop();
            result
        }
    }
}

async fn bench(cli: &Cli, plane: &ControlPlane) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("locating this binary")?;
    let sim_log = plane.dir().join("kubelet-sim.log");
    let args = vec![
        "--nodes".to_string(),
        cli.nodes.to_string(),
        "sim".to_string(),
    ];
    let kubeconfig = plane.kubeconfig_path();
    let sim = Process::spawn_with_env(
        "kubelet-sim",
        &exe,
        &args,
        &[("KUBECONFIG", &kubeconfig)],
        &sim_log,
    )?;
    plane.adopt(sim);
    let client = plane.client().await?;
    wait_nodes_ready(&client, &fleet(cli.nodes)).await?;

    manager::ensure_namespace(plane).await?;
    let options = ManagerOptions {
        extra_args: cli.manager_args.clone(),
        ..ManagerOptions::default()
    };
    let ports = manager::spawn(plane, &options)?;
    manager::wait_serving(plane, &ports, Duration::from_secs(120)).await?;
    let manager_pid = plane
        .pids()
        .into_iter()
        .find(|(name, _)| *name == options.name)
        .map(|(_, pid)| pid)
        .context("the manager process")?;

    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut namespace = Namespace::default();
    namespace.metadata.name = Some(NAMESPACE.into());
    namespaces
        .create(&PostParams::default(), &namespace)
        .await?;
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
        cli.nodes, cli.manager_args
    );

    let began = Instant::now();
    let writes = pod_writes(&client).await?;
    clonesets.create(&PostParams::default(), &cloneset).await?;
    wait_rolled_out(&clonesets, replicas).await?;
    report(
        "create",
        replicas,
        began.elapsed(),
        &writes,
        &pod_writes(&client).await?,
        manager_pid,
    );

    let in_place = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "app", "image": "nginx:1.19.1"}
    ]}}}});
    rollout(
        "in-place update (InPlaceIfPossible, maxUnavailable 100%, gracePeriodSeconds 0)",
        &client,
        &clonesets,
        replicas,
        &in_place,
        manager_pid,
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let restarted = pods
        .list(&ListParams::default().labels("app=scale"))
        .await?
        .items
        .iter()
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.restart_count == 1))
        })
        .count();
    println!("  Pods updated in place (restartCount 1): {restarted}");

    let recreate = json!({"spec": {
        "updateStrategy": {"rollingUpdate": {"podUpdatePolicy": "ReCreate"}},
        "template": {"spec": {"containers": [{"name": "app", "image": "nginx:1.20"}]}}
    }});
    rollout(
        "ReCreate update (maxUnavailable 100%)",
        &client,
        &clonesets,
        replicas,
        &recreate,
        manager_pid,
    )
    .await?;
    for (name, pid) in plane.pids() {
        if let Some((rss, hwm)) = rss_kib(pid) {
            println!("{name} RSS: {} (peak {})", mib(rss), mib(hwm));
        }
    }
    Ok(())
}

async fn rollout(
    what: &str,
    client: &Client,
    clonesets: &Api<CloneSet>,
    replicas: i32,
    patch: &Value,
    manager_pid: u32,
) -> anyhow::Result<()> {
    let writes = pod_writes(client).await?;
    let began = Instant::now();
    clonesets
        .patch(NAME, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .with_context(|| format!("patching the CloneSet for the {what}"))?;
    wait_rolled_out(clonesets, replicas).await?;
    report(
        what,
        replicas,
        began.elapsed(),
        &writes,
        &pod_writes(client).await?,
        manager_pid,
    );
    Ok(())
}

/// Until the CloneSet's status reports every Pod updated and ready at the current generation.
async fn wait_rolled_out(clonesets: &Api<CloneSet>, replicas: i32) -> anyhow::Result<()> {
    until(
        format!("{replicas} updated Ready Pods"),
        TIMEOUT,
        || async {
            let cs = clonesets.get(NAME).await?;
            let s = cs.status.unwrap_or_default();
            Ok(cs.metadata.generation == Some(s.observed_generation)
                && s.replicas == replicas
                && s.updated_replicas == replicas
                && s.updated_ready_replicas == replicas)
        },
    )
    .await
}

fn report(
    what: &str,
    replicas: i32,
    took: Duration,
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
    manager_pid: u32,
) {
    let delta: BTreeMap<&String, f64> = after
        .iter()
        .map(|(key, value)| (key, value - before.get(key).copied().unwrap_or(0.0)))
        .filter(|(_, d)| *d > 0.0)
        .collect();
    let total: f64 = delta.values().sum();
    println!(
        "{what}: {:.1} s to updatedReadyReplicas={replicas} ({:.0} Pods/s)",
        took.as_secs_f64(),
        f64::from(replicas) / took.as_secs_f64()
    );
    println!(
        "  apiserver Pod writes: {total:.0} ({:.2} per Pod)",
        total / f64::from(replicas)
    );
    for (key, count) in delta {
        println!(
            "    {key}: {count:.0} ({:.2} per Pod)",
            count / f64::from(replicas)
        );
    }
    if let Some((rss, hwm)) = rss_kib(manager_pid) {
        println!("  kruise-manager RSS {} (peak {})", mib(rss), mib(hwm));
    }
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// `apiserver_request_total` for writes to Pods, by `VERB pods[/subresource]`, from the apiserver's
/// `/metrics` (every client: kruise-manager, kubelet-sim, the scheduler, the garbage collector).
async fn pod_writes(client: &Client) -> anyhow::Result<BTreeMap<String, f64>> {
    let text = eventually(
        "the apiserver's /metrics",
        Duration::from_secs(30),
        || async {
            let request = http::Request::get("/metrics").body(Vec::new())?;
            Ok(Some(client.request_text(request).await?))
        },
    )
    .await?;
    let mut counts = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        let label = |key: &str| -> String {
            labels
                .split(',')
                .filter_map(|pair| pair.split_once('='))
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v.trim_matches('"').to_string())
                .unwrap_or_default()
        };
        if !label("group").is_empty() || label("resource") != "pods" {
            continue;
        }
        let verb = label("verb");
        // The apiserver labels a create POST and an update PUT.
        if !matches!(verb.as_str(), "POST" | "PUT" | "PATCH" | "APPLY" | "DELETE") {
            continue;
        }
        let subresource = label("subresource");
        let key = if subresource.is_empty() {
            format!("{verb} pods")
        } else {
            format!("{verb} pods/{subresource}")
        };
        *counts.entry(key).or_insert(0.0) += value.trim().parse::<f64>().unwrap_or(0.0);
    }
    Ok(counts)
}
