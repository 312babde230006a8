//! SidecarSet scale figures, with 20 SidecarSets in the cluster (5 inject the bench's Pods, 8 select
//! other Pods, 7 select them but are scoped by namespaceSelector to other namespaces):
//!
//! 1. **Webhook latency**: Pods created at a paced `--rate` (200/s) for `--seconds` (30); the
//!    `/mutate-pod` handler's p50/p99 from kruise-manager's `kruise_webhook_request_duration_seconds`
//!    (bucket deltas, interpolated), the apiserver's mean time calling the webhook, and the Pod CREATE
//!    latency the bench itself measures per request.
//! 2. **Create throughput**: `--pods` (2,000) Pods created as fast as `--concurrency` (32) requests in
//!    flight allow, with the webhook, then without it (a namespace labelled `control-plane`, which
//!    the webhook's namespaceSelector excludes: the apiserver never calls it).
//! 3. **Sidecar upgrade**: a Deployment of `--replicas` (1,000) Pods on `--nodes` (20) simulated nodes,
//!    all injected with one sidecar; the SidecarSet's image is patched with maxUnavailable 100% and
//!    timed until `updatedPods == updatedReadyPods == replicas` at the current generation, with the
//!    apiserver's Pod writes per Pod and kruise-manager's memory.
//!
//! Pods of phases 1 and 2 name a scheduler that does not exist, so they stay Pending without scheduler
//! or kubelet work; their namespaces are deleted after each run. Prints figures; asserts nothing about
//! time. kubelet-sim runs as a child process (this binary re-executed with `sim`); kruise-manager is
//! the binary next to this one (`cargo build --release -p kruise-manager`) or `$KRUISE_MANAGER_BIN`.

use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Parser, ValueEnum};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kruise_api::sidecarset::v1beta1::SidecarSet;
use kruise_benches::admission::{
    APP, INJECT_LABEL, PaceArgs, count_injected, create_concurrently, create_paced,
    injecting_names, print_freshness, quantile_ms, sidecarsets, wait_dry_run,
};
use kruise_benches::apiserver::{self, PodWrites};
use kruise_benches::create_namespace;
use kruise_benches::manager::{Manager, print_all_rss};
use kruise_benches::process::{cpu_seconds, pid_of};
use kruise_benches::prom::{self, Histogram};
use kruise_benches::sim::{self, SimArgs};
use kruise_benches::stats::seconds_as_ms;
use kruise_testkit::control_plane::ControlPlane;
use kruise_testkit::until;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

#[derive(Parser, Debug)]
struct Cli {
    /// `--rate` (200) and `--seconds` (30) of the latency phase.
    #[command(flatten)]
    pace: PaceArgs,
    /// Pods per throughput run.
    #[arg(long, default_value_t = 2000)]
    pods: u32,
    /// Pod creates in flight in the throughput runs.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Pods of the upgrade phase's Deployment.
    #[arg(long, default_value_t = 1000)]
    replicas: i32,
    /// Phases to run, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "latency,throughput,upgrade"
    )]
    phases: Vec<Phase>,
    /// `--nodes` (20, for the upgrade phase) and the manager's extra arguments.
    #[command(flatten)]
    sim: SimArgs<20>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Phase {
    Latency,
    Throughput,
    Upgrade,
}

const TIMEOUT: Duration = Duration::from_secs(1800);
/// A scheduler nobody runs: the phases 1 and 2 Pods stay Pending and unbound.
const NO_SCHEDULER: &str = "sidecar-bench-no-scheduler";
const UPGRADE_NAMESPACE: &str = "ss-upgrade";
const UPGRADE_SET: &str = "bench-upgrade";

fn main() -> anyhow::Result<()> {
    sim::main(|cli: &Cli| &cli.sim, bench)
}

async fn bench(cli: &Cli, plane: &ControlPlane) -> anyhow::Result<()> {
    let (client, manager) = cli.sim.start_nodes_and_manager(plane).await?;
    let sets = sidecarsets();
    let sidecarsets: Api<SidecarSet> = Api::all(client.clone());
    for set in &sets {
        let set: SidecarSet = serde_json::from_value(set.clone())?;
        sidecarsets.create(&PostParams::default(), &set).await?;
    }
    println!(
        "{} SidecarSets ({} inject the bench's Pods), kruise-manager {:?}",
        sets.len(),
        injecting_names().len(),
        cli.sim.manager_args
    );
    let bench = Bench {
        client,
        manager,
        apiserver_pid: pid_of(plane, "kube-apiserver"),
        cli,
    };
    if cli.phases.contains(&Phase::Latency) {
        bench.latency().await?;
    }
    if cli.phases.contains(&Phase::Throughput) {
        bench.throughput().await?;
    }
    if cli.phases.contains(&Phase::Upgrade) {
        bench.upgrade().await?;
    }
    print_all_rss(plane);
    Ok(())
}

struct Bench<'a> {
    client: Client,
    manager: Manager,
    apiserver_pid: Option<u32>,
    cli: &'a Cli,
}

/// What the components had used at one instant, to tell what a run cost them.
struct Load {
    manager_cpu: f64,
    apiserver_cpu: f64,
    /// The SidecarSet controller's reconcile durations.
    reconciles: Histogram,
}

impl Bench<'_> {
    /// Phase 1: paced creates; server-side and client-side latency.
    async fn latency(&self) -> anyhow::Result<()> {
        let (rate, seconds) = self.cli.pace.pace();
        let total = rate * seconds;
        let namespace = "ss-latency";
        self.namespace(namespace, json!({INJECT_LABEL: "inject"}))
            .await?;
        self.wait_injecting(namespace).await?;
        let handler_before = self.handler_histogram().await?;
        let apiserver_before = self.apiserver_webhook_histogram().await?;
        let load = self.load().await?;
        let metrics_before = self.manager.metrics_text().await?;
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        println!(
            "webhook latency: {total} Pod creates paced at {rate}/s for {seconds} s (Pods stay Pending)"
        );
        let creates = create_paced(&pods, total, rate, numbered_pod).await?;
        let metrics_after = self.manager.metrics_text().await?;
        let handler = self.handler_histogram().await?.since(&handler_before);
        let apiserver = self
            .apiserver_webhook_histogram()
            .await?
            .since(&apiserver_before);
        creates.print("  created");
        println!(
            "  /mutate-pod handler (kruise_webhook_request_duration_seconds, {:.0} requests): \
             p50 {} p99 {} mean {}",
            handler.count,
            quantile_ms(&handler, 0.5),
            quantile_ms(&handler, 0.99),
            handler.mean().map_or("-".into(), seconds_as_ms),
        );
        println!(
            "  apiserver calling mpod.kb.io (apiserver_admission_webhook_admission_duration_seconds, \
             {:.0} calls): mean {}",
            apiserver.count,
            apiserver.mean().map_or("-".into(), seconds_as_ms),
        );
        self.print_load("  ", &load, total as f64).await?;
        print_freshness("  ", &metrics_before, &metrics_after, total as f64);
        let injected = self.pods_injected(namespace).await?;
        println!(
            "  Pods carrying all {} injected sidecars: {injected} of {}",
            injecting_names().len(),
            creates.ok()
        );
        self.manager.print_rss();
        self.delete_namespace(namespace).await
    }

    /// Phase 2: creates as fast as a fixed concurrency allows, with and without the webhook.
    async fn throughput(&self) -> anyhow::Result<()> {
        let (count, concurrency) = (self.cli.pods, self.cli.concurrency.max(1));
        println!("create throughput: {count} Pods, {concurrency} creates in flight");
        let runs = [
            (
                "ss-tput-webhook",
                json!({INJECT_LABEL: "inject"}),
                "  with the Pod webhook (5 of the 20 SidecarSets inject):",
                true,
            ),
            (
                "ss-tput-plain",
                json!({"control-plane": "sidecar-bench"}),
                "  without the webhook (namespace labelled control-plane: the webhook's \
                 namespaceSelector excludes it, the apiserver never calls it; manager and SidecarSets \
                 unchanged, none applies to these Pods: their namespaceSelectors exclude the namespace):",
                false,
            ),
        ];
        for (namespace, labels, title, injecting) in runs {
            self.namespace(namespace, labels).await?;
            if injecting {
                self.wait_injecting(namespace).await?;
            }
            let calls_before = self.mutate_pod_requests().await?;
            let load = self.load().await?;
            let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
            let creates = create_concurrently(&pods, count, concurrency, numbered_pod).await;
            let calls = self.mutate_pod_requests().await? - calls_before;
            println!("{title}");
            creates.print("    created");
            println!("    webhook requests during the run: {calls:.0}");
            self.print_load("    ", &load, count as f64).await?;
            if injecting {
                let injected = self.pods_injected(namespace).await?;
                println!(
                    "    Pods carrying all {} injected sidecars: {injected} of {}",
                    injecting_names().len(),
                    creates.ok()
                );
            }
            self.delete_namespace(namespace).await?;
        }
        Ok(())
    }

    /// Phase 3: time to upgrade the sidecar of `--replicas` running Pods in place.
    async fn upgrade(&self) -> anyhow::Result<()> {
        let replicas = self.cli.replicas;
        self.namespace(UPGRADE_NAMESPACE, json!({})).await?;
        let sidecarsets: Api<SidecarSet> = Api::all(self.client.clone());
        let set: SidecarSet = serde_json::from_value(upgrade_sidecarset())?;
        sidecarsets.create(&PostParams::default(), &set).await?;
        let template = json!({"metadata": {"labels": {"app": "sidecar-upgrade"}},
            "spec": {"containers": [{"name": "app", "image": "nginx:alpine"}]}});
        let mut probe = template.clone();
        probe["metadata"]["name"] = json!("dry-run");
        wait_dry_run(&self.client, UPGRADE_NAMESPACE, &probe, Some(UPGRADE_SET)).await?;
        let deployment: Deployment = serde_json::from_value(json!({
            "metadata": {"name": "sidecar-upgrade"},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "sidecar-upgrade"}},
                "template": template,
            }
        }))?;
        println!(
            "sidecar upgrade: Deployment of {replicas} Pods on {} simulated nodes, one SidecarSet \
             (maxUnavailable 100%)",
            self.cli.sim.nodes
        );
        let began = Instant::now();
        let load = self.load().await?;
        Api::<Deployment>::namespaced(self.client.clone(), UPGRADE_NAMESPACE)
            .create(&PostParams::default(), &deployment)
            .await?;
        until(
            format!("{replicas} injected Pods Ready"),
            TIMEOUT,
            || async {
                let set = sidecarsets.get(UPGRADE_SET).await?;
                let s = set.status.unwrap_or_default();
                Ok(s.matched_pods == replicas
                    && s.updated_pods == replicas
                    && s.ready_pods == replicas
                    && s.missed_injection_pods == 0)
            },
        )
        .await?;
        println!(
            "  {replicas} injected Pods Running and Ready in {:.1} s",
            began.elapsed().as_secs_f64()
        );
        self.print_load("  ", &load, f64::from(replicas)).await?;
        self.manager.print_rss();

        let writes = PodWrites::read(&self.client).await?;
        let load = self.load().await?;
        let began = Instant::now();
        sidecarsets
            .patch(
                UPGRADE_SET,
                &PatchParams::default(),
                &Patch::Json::<()>(serde_json::from_value(json!([
                    {"op": "replace", "path": "/spec/containers/0/image", "value": "logtail:2.0"}
                ]))?),
            )
            .await
            .context("patching the SidecarSet's image")?;
        until(
            format!("updatedPods == updatedReadyPods == {replicas}"),
            TIMEOUT,
            || async {
                let set = sidecarsets.get(UPGRADE_SET).await?;
                let s = set.status.unwrap_or_default();
                Ok(set.metadata.generation == Some(s.observed_generation)
                    && s.matched_pods == replicas
                    && s.updated_pods == replicas
                    && s.updated_ready_pods == replicas)
            },
        )
        .await?;
        let took = began.elapsed();
        let writes = PodWrites::read(&self.client).await?.since(&writes);
        println!(
            "  sidecar image patch to updatedPods=updatedReadyPods={replicas}: {:.1} s ({:.0} Pods/s)",
            took.as_secs_f64(),
            f64::from(replicas) / took.as_secs_f64()
        );
        writes.print(f64::from(replicas));
        self.print_load("  ", &load, f64::from(replicas)).await?;
        self.manager.print_rss();
        // OpenKruise's SidecarSetUpgradable=True on every upgraded Pod: written after the rollout,
        // off its path (the writes share the manager's client rate limit).
        let pod_api = Api::<Pod>::namespaced(self.client.clone(), UPGRADE_NAMESPACE);
        until(
            format!("SidecarSetUpgradable=True on all {replicas} Pods"),
            TIMEOUT,
            || async {
                let pods = pod_api
                    .list(&ListParams::default().labels("app=sidecar-upgrade"))
                    .await?
                    .items;
                Ok(pods.iter().all(|p| {
                    p.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| {
                            c.iter()
                                .any(|c| c.type_ == "SidecarSetUpgradable" && c.status == "True")
                        })
                }))
            },
        )
        .await?;
        println!(
            "  ... and to SidecarSetUpgradable=True on every Pod: {:.1} s",
            began.elapsed().as_secs_f64()
        );
        let pods = Api::<Pod>::namespaced(self.client.clone(), UPGRADE_NAMESPACE)
            .list(&ListParams::default().labels("app=sidecar-upgrade"))
            .await?
            .items;
        let restarted = |container: &str| {
            pods.iter()
                .filter(|p| restart_count(p, container) > 0)
                .count()
        };
        println!(
            "  Pods whose sidecar restarted in place: {}, whose app container restarted: {}",
            restarted("logtail"),
            restarted("app")
        );
        Ok(())
    }

    async fn namespace(&self, name: &str, labels: Value) -> anyhow::Result<()> {
        create_namespace(&self.client, name, labels).await
    }

    /// Deletes a namespace and waits until it is gone, so that its Pods' deletion does not load the
    /// next measurement.
    async fn delete_namespace(&self, name: &str) -> anyhow::Result<()> {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        let began = Instant::now();
        namespaces.delete(name, &DeleteParams::default()).await?;
        until(format!("namespace {name} deleted"), TIMEOUT, || async {
            Ok(namespaces.get_opt(name).await?.is_none())
        })
        .await?;
        println!(
            "  (namespace {name} deleted in {:.1} s)",
            began.elapsed().as_secs_f64()
        );
        Ok(())
    }

    /// Waits until the webhook injects the 5 matching SidecarSets into a dry-run Pod in `namespace`
    /// (it reads SidecarSets and Namespace labels from watches, so it may lag just behind).
    async fn wait_injecting(&self, namespace: &str) -> anyhow::Result<()> {
        let injected = injecting_names().join(",");
        wait_dry_run(
            &self.client,
            namespace,
            &bench_pod("dry-run"),
            Some(&injected),
        )
        .await
    }

    /// How many Pods in `namespace` carry every injecting SidecarSet's container.
    async fn pods_injected(&self, namespace: &str) -> anyhow::Result<usize> {
        let pods = Api::<Pod>::namespaced(self.client.clone(), namespace)
            .list(&ListParams::default())
            .await?
            .items;
        Ok(count_injected(&pods))
    }

    async fn load(&self) -> anyhow::Result<Load> {
        let text = self.manager.metrics_text().await?;
        Ok(Load {
            manager_cpu: cpu_seconds(self.manager.pid).unwrap_or(0.0),
            apiserver_cpu: self.apiserver_pid.and_then(cpu_seconds).unwrap_or(0.0),
            reconciles: Histogram::read(
                &text,
                "kruise_controller_reconcile_duration_seconds",
                |s| s.label("controller") == "sidecarset-controller",
            ),
        })
    }

    /// Prints the CPU the manager and the apiserver used since `before`, per Pod of the run, and the
    /// SidecarSet reconciles the manager ran meanwhile (it reconciles every SidecarSet whose selector
    /// matches a Pod that changed).
    async fn print_load(&self, indent: &str, before: &Load, pods: f64) -> anyhow::Result<()> {
        let now = self.load().await?;
        let manager = now.manager_cpu - before.manager_cpu;
        let reconciles = now.reconciles.since(&before.reconciles);
        println!(
            "{indent}CPU: kruise-manager {manager:.1} s ({:.2} ms per Pod), kube-apiserver {:.1} s; \
             SidecarSet reconciles {:.0} (mean {}, p99 {})",
            manager * 1000.0 / pods.max(1.0),
            now.apiserver_cpu - before.apiserver_cpu,
            reconciles.count,
            reconciles.mean().map_or("-".into(), seconds_as_ms),
            quantile_ms(&reconciles, 0.99),
        );
        Ok(())
    }

    /// kruise-manager's `/mutate-pod` handler durations.
    async fn handler_histogram(&self) -> anyhow::Result<Histogram> {
        let text = self.manager.metrics_text().await?;
        Ok(Histogram::read(
            &text,
            "kruise_webhook_request_duration_seconds",
            |s| s.label("path") == "/mutate-pod",
        ))
    }

    /// `/mutate-pod` requests the manager answered (any result).
    async fn mutate_pod_requests(&self) -> anyhow::Result<f64> {
        let text = self.manager.metrics_text().await?;
        Ok(prom::sum(&text, "kruise_webhook_requests_total", |s| {
            s.label("path") == "/mutate-pod"
        }))
    }

    /// The apiserver's time calling the Pod webhook, TLS and HTTP included.
    async fn apiserver_webhook_histogram(&self) -> anyhow::Result<Histogram> {
        let text = apiserver::metrics_text(&self.client).await?;
        Ok(Histogram::read(
            &text,
            "apiserver_admission_webhook_admission_duration_seconds",
            |s| s.label("name") == "mpod.kb.io" && s.label("operation") == "CREATE",
        ))
    }
}

/// The SidecarSet of the upgrade phase.
fn upgrade_sidecarset() -> Value {
    json!({"apiVersion": "apps.kruise.io/v1beta1", "kind": "SidecarSet",
    "metadata": {"name": UPGRADE_SET},
    "spec": {
        "selector": {"matchLabels": {"app": "sidecar-upgrade"}},
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": UPGRADE_NAMESPACE}},
        "updateStrategy": {"type": "RollingUpdate", "maxUnavailable": "100%"},
        "containers": [{"name": "logtail", "image": "logtail:1.0"}],
    }})
}

/// A Pod of phases 1 and 2: never scheduled, with an env var and a volume for the sidecars to take.
fn bench_pod(name: &str) -> Value {
    json!({
        "metadata": {"name": name, "labels": {"app": APP, "tier": "web"}},
        "spec": {
            "schedulerName": NO_SCHEDULER,
            "containers": [{
                "name": "app", "image": "nginx:alpine",
                "env": [{"name": "TZ", "value": "UTC"}],
                "volumeMounts": [{"name": "logs", "mountPath": "/var/log/app"}],
            }],
            "volumes": [{"name": "logs", "emptyDir": {}}],
        }
    })
}

fn numbered_pod(i: u32) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(bench_pod(&format!("p-{i}")))?)
}

fn restart_count(pod: &Pod, container: &str) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.iter().find(|c| c.name == container))
        .map_or(0, |c| c.restart_count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn twenty_sidecarsets_with_unique_container_names() -> anyhow::Result<()> {
        let sets = sidecarsets();
        assert_eq!(sets.len(), 20);
        let mut containers = Vec::new();
        for set in &sets {
            let typed: SidecarSet = serde_json::from_value(set.clone())?;
            containers.extend(
                typed
                    .spec
                    .containers
                    .iter()
                    .map(|c| c.container.name.clone()),
            );
        }
        let unique: std::collections::BTreeSet<&String> = containers.iter().collect();
        assert_eq!(unique.len(), 20);
        let mut names = injecting_names();
        names.sort();
        assert_eq!(names, injecting_names());
        serde_json::from_value::<SidecarSet>(upgrade_sidecarset())?;
        Ok(())
    }
}
