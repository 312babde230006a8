//! One manager over a fleet (issue "Scale", item 4): `--clonesets` (10) CloneSets of `--replicas`
//! (1,000) Pods with 2 containers each on `--nodes` (50) simulated nodes, and `--sidecarsets` (20)
//! SidecarSets that inject half of them (SidecarSet j selects CloneSet j mod 5). Measured:
//!
//! 1. **Create**: every CloneSet created at once → all Pods updated and Ready; kruise-manager's RSS.
//! 2. **Start-up resync**: the manager SIGKILLed and started again over the settled fleet: from the
//!    process start until every CloneSet and SidecarSet has been reconciled at least once (the
//!    manager's `kruise_controller_reconciles_total`), and the Pod writes it made then and for 10 s
//!    after (from the audit log: nothing changed, so there should be none). Measured `--restarts`
//!    (3) times; the table gives the median and the slowest.
//! 3. **Idle CPU**: the manager's CPU over 60 s with nothing to do; then its RSS at rest, and the
//!    growth per cached Pod over the RSS it had serving an empty cluster.
//! 4. **Rollout**: every CloneSet's image patched at once (InPlaceIfPossible, maxUnavailable 100%,
//!    gracePeriodSeconds 0) → all updated and Ready: time, Pod writes per Pod (all, and the
//!    manager's), the manager's CPU, the CloneSet reconciles and the Pods decoded from the cache
//!    (`kruise_controller_pod_cache_decodes_total`) per Pod, and its RSS once at rest after it and
//!    again 30 s later.
//!
//! Before the manager starts, the apiserver's floor of that rollout ([`kruise_benches::floor`]): as
//! many bare Pods of the fleet's shape (2 containers, plus one sidecar per SidecarSet that selects
//! the CloneSet) rolled to a new image by a minimal controller, with each set of writes of
//! `--floor`; the table gives the rollout's time over each.
//!
//! Prints the figures as a table; asserts nothing about time. kubelet-sim runs as a child process (this
//! binary re-executed with `sim`); kruise-manager is the binary next to this one (`cargo build
//! --release -p kruise-manager`) or `$KRUISE_MANAGER_BIN`. With `--openkruise DIR` the same fleet and
//! figures are measured with OpenKruise's own manager instead (`make bench-openkruise`), for the
//! side-by-side figures of `docs/sizing.md`; a figure only kruise-rs exposes (Pods decoded from its
//! cache) is then left out.

use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use kruise_api::cloneset::v1beta1::CloneSet;
use kruise_api::sidecarset::v1beta1::SidecarSet;
use kruise_benches::apiserver::{PodWrites, Requests};
use kruise_benches::manager::Manager;
use kruise_benches::process::{CpuMeter, cpu_seconds, plane_and_bench};
use kruise_benches::sim::SimArgs;
use kruise_benches::{create_namespace, floor, prom, sim};
use kruise_testkit::control_plane::ControlPlane;
use kruise_testkit::process::{rss_kib, rss_split_kib};
use kruise_testkit::until;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

#[derive(Parser, Debug)]
struct Cli {
    /// CloneSets.
    #[arg(long, default_value_t = 10)]
    clonesets: usize,
    /// Replicas of each CloneSet.
    #[arg(long, default_value_t = 1000)]
    replicas: i32,
    /// SidecarSets (SidecarSet j injects the Pods of CloneSet j mod 5).
    #[arg(long, default_value_t = 20)]
    sidecarsets: usize,
    /// Start-up resyncs measured (one restart each); the table gives the median and the slowest.
    #[arg(long, default_value_t = 3)]
    restarts: usize,
    /// The apiserver floors measured before the manager starts (comma-separated).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "image-only,drain-image-finish"
    )]
    floor: Vec<floor::Writes>,
    /// Skip the apiserver floors (each takes about as long as creating and rolling the fleet).
    #[arg(long)]
    no_floor: bool,
    /// Measure OpenKruise's kruise-manager from this folder (`make openkruise`) instead of kruise-rs's.
    #[arg(long)]
    openkruise: Option<std::path::PathBuf>,
    /// `--nodes` (50) and the manager's extra arguments.
    #[command(flatten)]
    sim: SimArgs<50>,
}

/// Which manager the bench measures, and how its `/metrics` counts reconciles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flavor {
    KruiseRs,
    OpenKruise,
}

impl Flavor {
    /// Successful and failed reconciles of `controller` so far (both name their controllers
    /// `cloneset-controller` and `sidecarset-controller`).
    fn reconciles(self, metrics: &str, controller: &str) -> f64 {
        let name = match self {
            Flavor::KruiseRs => "kruise_controller_reconciles_total",
            Flavor::OpenKruise => "controller_runtime_reconcile_total",
        };
        prom::sum(metrics, name, |s| s.label("controller") == controller)
    }
}

const NAMESPACE: &str = "fleet";
const TIMEOUT: Duration = Duration::from_secs(3600);
/// CloneSets the SidecarSets select (half of the default 10).
const INJECTED: usize = 5;

fn main() -> anyhow::Result<()> {
    let options = |cli: &Cli| kruise_testkit::control_plane::Options {
        // OpenKruise's run starts on its own CRDs.
        crd_dir: cli.openkruise.as_ref().map(|dir| dir.join("crd")),
        ..sim::bench_options()
    };
    sim::main_with(|cli: &Cli| &cli.sim, options, bench)
}

/// The figures of the closing table.
#[derive(Default)]
struct Figures {
    /// The manager serving, with nothing to cache yet: the baseline of the growth per Pod.
    rss_empty_mib: f64,
    /// After the restart, the resync and the idle minute: the fleet cached, nothing in flight.
    rss_at_rest_mib: f64,
    create: Duration,
    rss_after_create_mib: f64,
    /// Every measured start-up resync, in the order measured.
    resyncs: Vec<Duration>,
    resync_writes: f64,
    idle_cpu_percent: f64,
    rollout: Duration,
    /// When the first CloneSet of the fleet was rolled out (the last one: `rollout`).
    rollout_first_done: Duration,
    rollout_writes_per_pod: f64,
    rollout_manager_writes_per_pod: f64,
    rollout_manager_cpu: f64,
    rss_after_rollout_mib: f64,
    /// Once the manager is at rest after the rollout ([`Manager::rss_at_rest_kib`]).
    rss_after_rollout_at_rest_mib: f64,
    /// The apiserver floors of the rollout, with the writes each was measured with.
    floors: Vec<(floor::Writes, Duration)>,
}

impl Figures {
    /// RSS at rest above the empty manager's, per cached Pod.
    fn growth_per_pod_kib(&self, pods: usize) -> f64 {
        (self.rss_at_rest_mib - self.rss_empty_mib) * 1024.0 / pods.max(1) as f64
    }

    /// The median and the slowest of the measured start-up resyncs.
    fn resync_median_and_max(&self) -> (Duration, Duration) {
        let mut sorted = self.resyncs.clone();
        sorted.sort();
        let median = sorted.get(sorted.len() / 2).copied().unwrap_or_default();
        (median, sorted.last().copied().unwrap_or_default())
    }
}

/// Kinds of apiserver request listed after a rollout.
const REQUESTS_SHOWN: usize = 12;

/// The CloneSet SidecarSet `j` selects (and injects a sidecar into the Pods of).
fn selected_by(sidecarset: usize) -> usize {
    sidecarset % INJECTED
}

/// How many SidecarSets select CloneSet `cloneset`.
fn sidecars_of(cli: &Cli, cloneset: usize) -> usize {
    (0..cli.sidecarsets)
        .filter(|&j| selected_by(j) == cloneset)
        .count()
}

/// The fleet's Pods, for the apiserver floor: each CloneSet's Pods have its 2 containers, which the
/// rollout updates, and the sidecars its SidecarSets inject, which it leaves alone.
fn floor_shapes(cli: &Cli) -> Vec<floor::Shape> {
    let replicas = usize::try_from(cli.replicas).unwrap_or_default();
    (0..cli.clonesets)
        .flat_map(|cs| {
            let shape = floor::Shape {
                updated: 2,
                sidecars: sidecars_of(cli, cs),
            };
            std::iter::repeat_n(shape, replicas)
        })
        .collect()
}

async fn bench(cli: &Cli, plane: &ControlPlane) -> anyhow::Result<()> {
    sim::spawn(plane, cli.sim.nodes).await?;
    let client = plane.client().await?;
    let pods_total = cli.clonesets * usize::try_from(cli.replicas).unwrap_or_default();
    let mut figures = Figures::default();
    if !cli.no_floor {
        figures.floors = floor::measure_each(
            &client,
            &floor_shapes(cli),
            &cli.floor,
            &plane_and_bench(plane),
        )
        .await?;
    }
    let (mut manager, flavor) = match &cli.openkruise {
        None => (
            Manager::start(plane, &cli.sim.manager_args).await?,
            Flavor::KruiseRs,
        ),
        Some(dir) => (
            Manager::start_openkruise(plane, dir, &cli.sim.manager_args).await?,
            Flavor::OpenKruise,
        ),
    };
    create_namespace(&client, NAMESPACE, Value::Null).await?;
    let which = match &cli.openkruise {
        None => "kruise-rs".to_owned(),
        Some(dir) => format!("OpenKruise from {}", dir.display()),
    };
    println!(
        "{} CloneSets × {} Pods (2 containers) on {} simulated nodes, {} SidecarSets; kruise-manager ({which}) {:?}",
        cli.clonesets, cli.replicas, cli.sim.nodes, cli.sidecarsets, cli.sim.manager_args
    );
    // A measurement window for the empty manager's start-up allocations to settle and be purged.
    tokio::time::sleep(Duration::from_secs(5)).await;
    figures.rss_empty_mib = rss_mib(manager.pid);
    println!(
        "kruise-manager RSS with nothing cached: {:.1} MiB",
        figures.rss_empty_mib
    );
    print_rss_split(manager.pid);

    // SidecarSets first: they inject at Pod creation.
    let sidecarsets: Api<SidecarSet> = Api::all(client.clone());
    for j in 0..cli.sidecarsets {
        let ss: SidecarSet = serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1beta1",
            "kind": "SidecarSet",
            "metadata": {"name": format!("side-{j}")},
            "spec": {
                "selector": {"matchLabels": {"app": format!("cs-{}", selected_by(j))}},
                "containers": [{"name": format!("side-{j}"), "image": format!("sidecar:{j}")}]
            }
        }))?;
        sidecarsets.create(&PostParams::default(), &ss).await?;
    }

    let clonesets: Api<CloneSet> = Api::namespaced(client.clone(), NAMESPACE);
    let began = Instant::now();
    for i in 0..cli.clonesets {
        let cs: CloneSet = serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1beta1",
            "kind": "CloneSet",
            "metadata": {"name": format!("cs-{i}")},
            "spec": {
                "replicas": cli.replicas,
                "selector": {"matchLabels": {"app": format!("cs-{i}")}},
                "template": {
                    "metadata": {"labels": {"app": format!("cs-{i}")}},
                    "spec": {"containers": [
                        {"name": "app", "image": "nginx:alpine"},
                        {"name": "log", "image": "fluent-bit:3"}
                    ]}
                },
                "updateStrategy": {"rollingUpdate": {
                    "podUpdatePolicy": "InPlaceIfPossible",
                    "maxUnavailable": "100%",
                    "inPlaceUpdateStrategy": {"gracePeriodSeconds": 0}
                }}
            }
        }))?;
        clonesets.create(&PostParams::default(), &cs).await?;
    }
    wait_rolled_out(&clonesets, cli.clonesets, cli.replicas).await?;
    figures.create = began.elapsed();
    figures.rss_after_create_mib = rss_mib(manager.pid);
    println!(
        "create: {:.1} s; kruise-manager RSS {:.1} MiB",
        figures.create.as_secs_f64(),
        figures.rss_after_create_mib
    );

    // Start-up resync over the settled fleet, measured over several restarts: one alone can hide a
    // start-up path that waits only sometimes.
    let writes_before = PodWrites::read_manager(plane);
    for round in 1..=cli.restarts.max(1) {
        manager.restart(plane)?;
        let started = Instant::now();
        // When /metrics first answered, and when each controller had reconciled its workloads.
        let marks = std::sync::Mutex::new([None::<Duration>; 3]);
        until(
            "every workload reconciled once after the restart",
            Duration::from_secs(300),
            || async {
                // Not serving yet reads as not reconciled yet.
                let Ok(text) = manager.metrics_text().await else {
                    return Ok(false);
                };
                let done = [
                    true,
                    flavor.reconciles(&text, "cloneset-controller") >= cli.clonesets as f64,
                    flavor.reconciles(&text, "sidecarset-controller") >= cli.sidecarsets as f64,
                ];
                let mut marks = marks.lock().unwrap_or_else(|e| e.into_inner());
                for (mark, done) in marks.iter_mut().zip(done) {
                    if done && mark.is_none() {
                        *mark = Some(started.elapsed());
                    }
                }
                Ok(done.iter().all(|d| *d))
            },
        )
        .await?;
        let took = started.elapsed();
        let marks = marks.into_inner().unwrap_or_else(|e| e.into_inner());
        let at =
            |m: Option<Duration>| m.map_or("-".to_owned(), |d| format!("{:.2} s", d.as_secs_f64()));
        println!(
            "start-up resync {round}: {:.2} s (serving after {}, CloneSets reconciled after {}, SidecarSets after {})",
            took.as_secs_f64(),
            at(marks[0]),
            at(marks[1]),
            at(marks[2])
        );
        figures.resyncs.push(took);
    }
    // Whatever the last resync would write has been sent 10 s later.
    tokio::time::sleep(Duration::from_secs(10)).await;
    figures.resync_writes = PodWrites::read_manager(plane).since(&writes_before).total();
    let (median, slowest) = figures.resync_median_and_max();
    println!(
        "start-up resync: median {:.2} s, slowest {:.2} s of {}; kruise-manager Pod writes {:.0}",
        median.as_secs_f64(),
        slowest.as_secs_f64(),
        figures.resyncs.len(),
        figures.resync_writes
    );

    // Idle: a measurement window, not a wait for anything.
    let cpu = cpu_seconds(manager.pid).unwrap_or(0.0);
    let window = Duration::from_secs(60);
    tokio::time::sleep(window).await;
    figures.idle_cpu_percent =
        (cpu_seconds(manager.pid).unwrap_or(0.0) - cpu) * 100.0 / window.as_secs_f64();
    println!("idle CPU: {:.2}% of a core", figures.idle_cpu_percent);
    figures.rss_at_rest_mib = rss_mib(manager.pid);
    println!(
        "kruise-manager RSS at rest: {:.1} MiB, {:.2} KiB per cached Pod above the empty manager",
        figures.rss_at_rest_mib,
        figures.growth_per_pod_kib(pods_total)
    );
    print_rss_split(manager.pid);

    // Every CloneSet rolled in place at once.
    let writes = PodWrites::read(&client).await?;
    let requests = Requests::read(&client).await?;
    let manager_writes = PodWrites::read_manager(plane);
    let cpu = cpu_seconds(manager.pid).unwrap_or(0.0);
    let (reconciles_before, decodes_before) =
        manager.metrics_text().await.map_or((0.0, 0.0), |text| {
            (
                flavor.reconciles(&text, "cloneset-controller"),
                decodes(&text),
            )
        });
    let cpu_of_all = CpuMeter::start(plane_and_bench(plane));
    let began = Instant::now();
    let patch = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "app", "image": "nginx:1.19.1"},
        {"name": "log", "image": "fluent-bit:3"}
    ]}}}});
    for i in 0..cli.clonesets {
        clonesets
            .patch(
                &format!("cs-{i}"),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .with_context(|| format!("patching cs-{i}"))?;
    }
    let finished = wait_rolled_out(&clonesets, cli.clonesets, cli.replicas).await?;
    figures.rollout = began.elapsed();
    let cpu_of_all = cpu_of_all.read();
    figures.rollout_first_done = finished.first().copied().unwrap_or_default();
    let pods = pods_total as f64;
    let all = PodWrites::read(&client).await?.since(&writes);
    let requests = Requests::read(&client).await?.since(&requests);
    let mine = PodWrites::read_manager(plane).since(&manager_writes);
    figures.rollout_writes_per_pod = all.total() / pods;
    figures.rollout_manager_writes_per_pod = mine.total() / pods;
    figures.rollout_manager_cpu = cpu_seconds(manager.pid).unwrap_or(0.0) - cpu;
    figures.rss_after_rollout_mib = rss_mib(manager.pid);
    println!(
        "rollout: {:.1} s (first CloneSet done after {:.1} s)",
        figures.rollout.as_secs_f64(),
        figures.rollout_first_done.as_secs_f64()
    );
    all.print(pods);
    mine.print_as("of which kruise-manager's", pods);
    println!("CPU in the rollout: {}", cpu_of_all.describe());
    if let Ok(text) = manager.metrics_text().await {
        let in_rollout = flavor.reconciles(&text, "cloneset-controller") - reconciles_before;
        println!(
            "CloneSet reconciles in the rollout: {in_rollout:.0} ({:.1} per CloneSet)",
            in_rollout / cli.clonesets as f64
        );
        if flavor == Flavor::KruiseRs {
            println!(
                "Pods decoded from the cache in the rollout: {:.1} per Pod",
                (decodes(&text) - decodes_before) / pods
            );
        }
    }
    println!(
        "apiserver requests in the rollout, the most made: {}",
        requests.describe_top(REQUESTS_SHOWN)
    );
    figures.rss_after_rollout_at_rest_mib = manager
        .rss_at_rest_kib()
        .await
        .map_or(0.0, |kib| kib as f64 / 1024.0);
    println!(
        "kruise-manager RSS after the rollout: {:.1} MiB when it was seen done, {:.1} MiB at rest",
        figures.rss_after_rollout_mib, figures.rss_after_rollout_at_rest_mib
    );
    print_rss_split(manager.pid);
    // What the manager lets go of only a while after it came to rest (what a build keeps for some
    // seconds after its last use) shows here.
    tokio::time::sleep(LATER).await;
    println!(
        "kruise-manager RSS {} s later: {:.1} MiB",
        LATER.as_secs(),
        rss_mib(manager.pid)
    );
    print_rss_split(manager.pid);

    println!();
    println!("| {pods_total} Pods, {} nodes | figure |", cli.sim.nodes);
    println!("|---|---|");
    println!(
        "| create → all Ready | {:.1} s |",
        figures.create.as_secs_f64()
    );
    println!(
        "| kruise-manager RSS after the create | {:.1} MiB |",
        figures.rss_after_create_mib
    );
    println!(
        "| kruise-manager RSS at rest after the restart (growth per cached Pod) | {:.1} MiB ({:.2} KiB/Pod over {:.1} MiB empty) |",
        figures.rss_at_rest_mib,
        figures.growth_per_pod_kib(pods_total),
        figures.rss_empty_mib
    );
    let (median, slowest) = figures.resync_median_and_max();
    println!(
        "| start-up resync (process start → every workload reconciled), median (slowest) of {} | {:.2} s ({:.2} s), {:.0} Pod writes |",
        figures.resyncs.len(),
        median.as_secs_f64(),
        slowest.as_secs_f64(),
        figures.resync_writes
    );
    println!(
        "| idle CPU over 60 s | {:.2}% of a core |",
        figures.idle_cpu_percent
    );
    println!(
        "| in-place rollout of all at once (first CloneSet done after) | {:.1} s ({:.1} s), {:.2} Pod writes/Pod ({:.2} by the manager), manager CPU {:.1} s |",
        figures.rollout.as_secs_f64(),
        figures.rollout_first_done.as_secs_f64(),
        figures.rollout_writes_per_pod,
        figures.rollout_manager_writes_per_pod,
        figures.rollout_manager_cpu
    );
    for (writes, floor) in &figures.floors {
        println!(
            "| apiserver floor: {} | {:.1} s; the rollout took {:.2}× |",
            writes.describe(),
            floor.as_secs_f64(),
            figures.rollout.as_secs_f64() / floor.as_secs_f64().max(f64::EPSILON)
        );
    }
    println!(
        "| kruise-manager RSS after the rollout: when seen done / at rest | {:.1} / {:.1} MiB |",
        figures.rss_after_rollout_mib, figures.rss_after_rollout_at_rest_mib
    );
    Ok(())
}

/// How long after the RSS at rest after the rollout it is read again.
const LATER: Duration = Duration::from_secs(30);

/// Pods the manager decoded from its Pod cache so far.
fn decodes(metrics: &str) -> f64 {
    prom::sum(metrics, "kruise_controller_pod_cache_decodes_total", |_| {
        true
    })
}

fn rss_mib(pid: u32) -> f64 {
    rss_kib(pid).map_or(0.0, |(rss, _)| rss as f64 / 1024.0)
}

/// Prints what the manager's RSS is made of now ([`rss_split_kib`]).
fn print_rss_split(pid: u32) {
    if let Some((anon, file)) = rss_split_kib(pid) {
        println!(
            "  of which anonymous {:.1} MiB, file-backed (mostly the binary's code run so far) {:.1} MiB",
            anon as f64 / 1024.0,
            file as f64 / 1024.0
        );
    }
    if let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
        let sockets = fds
            .filter_map(Result::ok)
            .filter_map(|fd| std::fs::read_link(fd.path()).ok())
            .filter(|target| target.to_string_lossy().starts_with("socket:"))
            .count();
        println!(
            "  open sockets (connections to the apiserver, watches included, and listeners): {sockets}"
        );
    }
}

/// Until every CloneSet's status reports all its Pods updated and ready at the current generation;
/// returns when each CloneSet was first seen so (since the call), earliest first: how evenly the
/// manager's workers share the fleet.
async fn wait_rolled_out(
    clonesets: &Api<CloneSet>,
    count: usize,
    replicas: i32,
) -> anyhow::Result<Vec<Duration>> {
    let began = Instant::now();
    let done: std::sync::Mutex<std::collections::BTreeMap<String, Duration>> = Default::default();
    until(
        format!("{count} CloneSets with {replicas} updated Ready Pods each"),
        TIMEOUT,
        || async {
            let list = clonesets.list(&ListParams::default()).await?;
            let mut done = done.lock().unwrap_or_else(|e| e.into_inner());
            for cs in &list.items {
                if kruise_benches::cloneset_rolled_out(cs, replicas) {
                    done.entry(cs.metadata.name.clone().unwrap_or_default())
                        .or_insert_with(|| began.elapsed());
                }
            }
            Ok(done.len() >= count)
        },
    )
    .await?;
    let mut times: Vec<Duration> = done
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .into_values()
        .collect();
    times.sort();
    Ok(times)
}
