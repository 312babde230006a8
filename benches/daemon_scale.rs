//! The node agent's figures on one real node (a real kubelet v1.34.10 with its own containerd, in a
//! network namespace of its own; images from the local registry: see docs/real-nodes.md), for
//! kruise-rs's kruise-daemon or, with `--openkruise DIR`, OpenKruise v1.9.0's own kruise-daemon
//! (`make openkruise`) run the same way: in the node's network namespace, on the node's containerd
//! socket, with the node's kubeconfig. The manager is kruise-rs's for both (the same CRDs, the same
//! NodeImage, NodePodProbe and ContainerRecreateRequest objects for the daemon to act on), or
//! OpenKruise's with `--openkruise-manager`. For the daemon's process (`/proc/<pid>`):
//!
//! 1. **idle**: once it settled (under 2% of a core over 2 s), CPU and RSS over `--idle-seconds` (60);
//! 2. **pulling**: `--images` (10) distinct images pushed to the local registry (busybox root
//!    filesystems, each with its own file, ~1 MiB each), one ImagePullJob each selecting the node, from
//!    the first job created until the node's NodeImage reports every tag Succeeded: RSS peak, CPU;
//! 3. **probing**: `--probe-pods` (20) Pods on the node (busybox `httpd` on port 80), one
//!    PodProbeMarker with 5 probes each (1 exec `cat /etc/hostname`, 2 tcpSocket :80, 2 httpGet / :80,
//!    every 5 s): once the NodePodProbe reports every probe Succeeded, CPU and RSS over
//!    `--probe-seconds` (60);
//! 4. **CRR latency**: the marker deleted, one ContainerRecreateRequest per Pod (20), one after the
//!    other: request created → the kubelet reports the container running again with its
//!    restartCount one higher (Pod status, polled every 50 ms); p50/p99/max, and the daemon's CPU and
//!    RSS over the phase.
//!
//! Prints a table; asserts nothing about time. Needs root and what `make real-node` installs.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kruise_api::imagepulljob::v1beta1::NodeImage;
use kruise_api::podprobemarker::NodePodProbe;
use kruise_benches::daemon::{Cost, NodeAgent};
use kruise_benches::manager::Manager;
use kruise_benches::sim;
use kruise_benches::stats::{mib, ms, percentile};
use kruise_testkit::control_plane::ControlPlane;
use kruise_testkit::realnode::images::{self, BUSYBOX, Role};
use kruise_testkit::realnode::{RealNodeOptions, RealNodes};
use kruise_testkit::until;
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

#[derive(Parser, Debug)]
struct Cli {
    /// Measure OpenKruise's kruise-daemon from this folder (`make openkruise`) instead of kruise-rs's.
    #[arg(long)]
    openkruise: Option<PathBuf>,
    /// With `--openkruise`: run OpenKruise's kruise-manager from that folder too (else kruise-rs's).
    #[arg(long, requires = "openkruise")]
    openkruise_manager: bool,
    /// Length of the idle window, in seconds.
    #[arg(long, default_value_t = 60)]
    idle_seconds: u64,
    /// Distinct images pulled.
    #[arg(long, default_value_t = 10)]
    images: usize,
    /// Pods probed (5 probes each); also the number of ContainerRecreateRequests.
    #[arg(long, default_value_t = 20)]
    probe_pods: usize,
    /// Length of the probing window, in seconds.
    #[arg(long, default_value_t = 60)]
    probe_seconds: u64,
}

const NAMESPACE: &str = "daemon-bench";
const PROBES_PER_POD: usize = 5;
const TIMEOUT: Duration = Duration::from_secs(300);
/// The manager's feature gates: ImagePullJob is Alpha (off) in v1.9.0.
const MANAGER_GATES: &str = "--feature-gates=ImagePullJobGate=true";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    kruise_benches::on_control_plane_with(sim::bench_options(), async |plane| {
        bench(&cli, plane).await
    })
    .await
}

async fn bench(cli: &Cli, plane: &ControlPlane) -> anyhow::Result<()> {
    let mut real = RealNodes::start(
        plane,
        &RealNodeOptions::new(1, &["zone-a"], plane.bin_dir()),
    )
    .await
    .context("starting the real node")?;
    let result = on_node(cli, plane, &real).await;
    if result.is_err() {
        eprintln!("{}", real.log_tails(30));
    }
    real.stop();
    result
}

async fn on_node(cli: &Cli, plane: &ControlPlane, real: &RealNodes) -> anyhow::Result<()> {
    let host = real
        .daemon_hosts()
        .into_iter()
        .next()
        .context("no real node")?;
    let node = host.node.clone();
    let pushed = tokio::task::block_in_place(|| push_images(real, cli.images))?;

    let manager_args = vec![MANAGER_GATES.to_owned()];
    let (_manager, manager_name) = match (&cli.openkruise, cli.openkruise_manager) {
        (Some(dir), true) => (
            Manager::start_openkruise(plane, dir, &manager_args).await?,
            "OpenKruise v1.9.0",
        ),
        _ => (Manager::start(plane, &manager_args).await?, "kruise-rs"),
    };
    let agent = match &cli.openkruise {
        Some(dir) => NodeAgent::start_openkruise(plane, dir, &host).await?,
        None => NodeAgent::start_kruise_rs(plane, &host).await?,
    };
    let binary_size = daemon_binary_size(cli)?;
    println!(
        "daemon-scale: {} kruise-daemon (pid {}, binary {}) on real node {node}; {manager_name} \
         kruise-manager; {} cores",
        agent.which,
        agent.pid,
        mib(binary_size / 1024),
        std::thread::available_parallelism().map_or(1, usize::from),
    );
    let client = plane.client().await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?,
        )
        .await?;

    // 1. Idle.
    agent.settle(Duration::from_secs(120)).await;
    let meter = agent.meter();
    tokio::time::sleep(Duration::from_secs(cli.idle_seconds)).await;
    let idle = meter.stop().await;
    print_cost("idle", &idle);

    // 2. Pulling.
    let meter = agent.meter();
    for (index, reference) in pushed.iter().enumerate() {
        plane
            .kubectl_apply(
                NAMESPACE,
                &format!(
                    r#"
apiVersion: apps.kruise.io/v1alpha1
kind: ImagePullJob
metadata:
  name: pull-{index}
spec:
  image: {reference}
  parallelism: 1
  selector:
    names: [{node}]
  pullPolicy:
    timeoutSeconds: 120
    backoffLimit: 1
  completionPolicy:
    type: Always
    ttlSecondsAfterFinished: 600
"#
                ),
            )
            .await?;
    }
    let images_api: Api<NodeImage> = Api::all(client.clone());
    until(
        &format!(
            "{node}'s NodeImage reports the {} images pulled",
            pushed.len()
        ),
        TIMEOUT,
        || async {
            let object = images_api.get(&node).await?;
            Ok(pushed.iter().all(|reference| pulled(&object, reference)))
        },
    )
    .await?;
    let pulling = meter.stop().await;
    print_cost("pulling", &pulling);

    // 3. Probing.
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    for index in 0..cli.probe_pods {
        pods.create(
            &PostParams::default(),
            &serde_json::from_value(pod_doc(index, &node))?,
        )
        .await?;
    }
    until(
        &format!("{} Pods running and ready on {node}", cli.probe_pods),
        TIMEOUT,
        || async {
            let list = pods.list(&Default::default()).await?;
            Ok(list.items.len() == cli.probe_pods && list.items.iter().all(pod_ready))
        },
    )
    .await?;
    let probes = cli.probe_pods * PROBES_PER_POD;
    plane.kubectl_apply(NAMESPACE, &marker_yaml()).await?;
    let ramp = Instant::now();
    let probes_api: Api<NodePodProbe> = Api::all(client.clone());
    until(
        &format!("{node}'s NodePodProbe reports {probes} probes Succeeded"),
        TIMEOUT,
        || async {
            let object = probes_api.get(&node).await?;
            Ok(succeeded_probes(&object) == probes)
        },
    )
    .await?;
    let ramp = ramp.elapsed();
    let meter = agent.meter();
    tokio::time::sleep(Duration::from_secs(cli.probe_seconds)).await;
    let probing = meter.stop().await;
    print_cost(&format!("probing ({probes} probes)"), &probing);
    println!(
        "  marker created → every probe Succeeded in the NodePodProbe: {}",
        ms(ramp)
    );

    // 4. ContainerRecreateRequests.
    plane
        .kubectl(&["delete", "-n", NAMESPACE, "podprobemarker", "bench"])
        .await?;
    until(&format!("{node}'s NodePodProbe empty"), TIMEOUT, || async {
        let object = probes_api.get(&node).await?;
        Ok(object.spec.pod_probes.is_empty())
    })
    .await?;
    let meter = agent.meter();
    let mut latencies = Vec::new();
    for index in 0..cli.probe_pods {
        latencies.push(recreate(&client, &pods, index).await?);
    }
    let recreating = meter.stop().await;
    print_cost(
        &format!("recreating ({} CRRs, one at a time)", latencies.len()),
        &recreating,
    );
    let quantile = |q| percentile(&latencies, q).map_or("-".to_owned(), ms);
    println!(
        "  CRR created → container running again (kubelet's status): p50 {}, p99 {}, max {}",
        quantile(0.5),
        quantile(0.99),
        quantile(1.0),
    );

    println!(
        "\n| {} | idle | pulling {} images | {probes} probes | {} CRRs |",
        agent.which,
        pushed.len(),
        latencies.len()
    );
    println!("| --- | --- | --- | --- | --- |");
    let row = |name: &str, value: &dyn Fn(&Cost) -> String| {
        println!(
            "| {name} | {} | {} | {} | {} |",
            value(&idle),
            value(&pulling),
            value(&probing),
            value(&recreating)
        );
    };
    row("RSS mean", &|c| mib(c.rss_mean_kib));
    row("RSS peak", &|c| mib(c.rss_peak_kib));
    row("CPU (% of a core)", &|c| format!("{:.2}%", c.cpu_percent()));
    row("CPU seconds / window", &|c| {
        format!("{:.2} s / {:.0} s", c.cpu, c.seconds)
    });
    println!(
        "| CRR latency p50 / p99 | | | | {} / {} |",
        quantile(0.5),
        quantile(0.99)
    );

    let _ = namespaces.delete(NAMESPACE, &DeleteParams::default()).await;
    Ok(())
}

/// Builds and pushes `count` distinct images (`docker.io/library/daemon-bench-<i>:v1`, which every
/// node's containerd pulls from the local registry); returns their references.
fn push_images(real: &RealNodes, count: usize) -> anyhow::Result<Vec<String>> {
    (0..count)
        .map(|index| {
            let reference = format!("docker.io/library/daemon-bench-{index}:v1");
            let blobs = images::build(&reference, Role::Shell, Path::new(BUSYBOX))?;
            let (repository, tag) = images::repository_and_tag(&reference)?;
            real.registry
                .push(&repository, &tag, &blobs)
                .with_context(|| format!("pushing {reference}"))?;
            Ok(reference)
        })
        .collect()
}

fn daemon_binary_size(cli: &Cli) -> anyhow::Result<u64> {
    let binary = match &cli.openkruise {
        Some(dir) => dir.join("bin/kruise-daemon"),
        None => kruise_testkit::daemon::binary()?,
    };
    Ok(std::fs::metadata(&binary)
        .with_context(|| format!("reading {}", binary.display()))?
        .len())
}

/// Whether the NodeImage status reports `reference`'s tag Succeeded (keyed by the image's name, as
/// given or fully qualified).
fn pulled(object: &NodeImage, reference: &str) -> bool {
    let Some((name, tag)) = reference.rsplit_once(':') else {
        return false;
    };
    let short = name.rsplit('/').next().unwrap_or(name);
    object.status.as_ref().is_some_and(|status| {
        status.image_statuses.iter().any(|(image, state)| {
            (image == name || image.rsplit('/').next() == Some(short))
                && state
                    .tags
                    .iter()
                    .any(|t| t.tag == tag && t.phase == "Succeeded")
        })
    })
}

fn succeeded_probes(object: &NodePodProbe) -> usize {
    object.status.as_ref().map_or(0, |status| {
        status
            .pod_probe_statuses
            .iter()
            .flat_map(|p| &p.probe_states)
            .filter(|s| s.state == "Succeeded")
            .count()
    })
}

fn pod_doc(index: usize, node: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": format!("probed-{index}"), "labels": {"app": "daemon-bench"}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 5,
            "containers": [{
                "name": "main",
                "image": "nginx:alpine",
                "ports": [{"name": "http", "containerPort": 80}],
                "readinessProbe": {"tcpSocket": {"port": 80}, "periodSeconds": 2},
            }],
        }
    })
}

/// One PodProbeMarker: 5 probes per Pod, every 5 s, each with its own Pod condition.
fn marker_yaml() -> String {
    let probe = |name: &str, body: &str| {
        format!(
            "  - name: {name}\n    containerName: main\n    podConditionType: bench.kruise.io/{name}\n    probe:\n      periodSeconds: 5\n      timeoutSeconds: 2\n{body}"
        )
    };
    let exec = "      exec:\n        command: [cat, /etc/hostname]\n";
    let tcp = "      tcpSocket:\n        port: 80\n";
    let http = "      httpGet:\n        path: /\n        port: 80\n        scheme: HTTP\n";
    let probes = [
        probe("exec", exec),
        probe("tcp-a", tcp),
        probe("tcp-b", tcp),
        probe("http-a", http),
        probe("http-b", http),
    ];
    format!(
        "apiVersion: apps.kruise.io/v1alpha1\nkind: PodProbeMarker\nmetadata:\n  name: bench\nspec:\n  selector:\n    matchLabels:\n      app: daemon-bench\n  probes:\n{}",
        probes.concat()
    )
}

fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// `main`'s restart count and whether it runs, as the kubelet reports them.
fn main_container(pod: &Pod) -> Option<(i32, bool)> {
    let status = pod
        .status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|s| s.name == "main")?;
    let running = status
        .state
        .as_ref()
        .is_some_and(|state| state.running.is_some());
    Some((status.restart_count, running))
}

/// Creates a ContainerRecreateRequest for `probed-<index>`'s `main` and returns how long until the
/// kubelet reports the container running again with its restart count one higher.
async fn recreate(client: &Client, pods: &Api<Pod>, index: usize) -> anyhow::Result<Duration> {
    let name = format!("probed-{index}");
    let before = pods.get(&name).await?;
    let (count, _) = main_container(&before).context("no status for main")?;
    let requests: Api<kruise_api::containerrecreaterequest::ContainerRecreateRequest> =
        Api::namespaced(client.clone(), NAMESPACE);
    let request = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "ContainerRecreateRequest",
        "metadata": {"name": format!("restart-{index}")},
        "spec": {"podName": name, "containers": [{"name": "main"}]},
    }))?;
    let began = Instant::now();
    let created = requests.create(&PostParams::default(), &request).await?;
    loop {
        let pod = pods.get(&name).await?;
        if main_container(&pod).is_some_and(|(now, running)| now > count && running) {
            return Ok(began.elapsed());
        }
        anyhow::ensure!(
            began.elapsed() < TIMEOUT,
            "{name}'s main not restarted {TIMEOUT:?} after {} was created",
            created.name_any()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn print_cost(phase: &str, cost: &Cost) {
    println!(
        "{phase}: {:.1} s, CPU {:.2} s ({:.2}% of a core), RSS mean {}, peak {}, end {}",
        cost.seconds,
        cost.cpu,
        cost.cpu_percent(),
        mib(cost.rss_mean_kib),
        mib(cost.rss_peak_kib),
        mib(cost.rss_end_kib),
    );
}
