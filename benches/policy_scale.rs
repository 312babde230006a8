//! The policy webhooks' figures (WorkloadSpread, PodUnavailableBudget, SidecarSet in the one Pod
//! webhook), for kruise-rs or, with `--openkruise DIR`, OpenKruise v1.9.0's own manager on the same
//! test bed (`make bench-policy` runs both):
//!
//! 1. **Pod webhook latency**: Pods created at a paced `--rate` (200/s) for `--seconds` (30) into a
//!    namespace with 20 SidecarSets (5 inject each Pod), 10 WorkloadSpreads and 10
//!    PodUnavailableBudgets: Pod `i` belongs to workload `web-{i % 10}` (a Deployment and its
//!    ReplicaSet), which one WorkloadSpread spreads over three zones (25% / 25% / the rest, as ints)
//!    and one budget guards. Printed: the Pod CREATE latency the bench measures per request (the
//!    same for both managers), the `/mutate-pod` handler's p50/p99 from the manager's own histogram
//!    (`kruise_webhook_request_duration_seconds` for kruise-rs, controller-runtime's
//!    `controller_runtime_webhook_latency_seconds` for OpenKruise), the apiserver's time calling
//!    `mpod.kb.io`, and what the webhook did: Pods placed by a WorkloadSpread, naming their budget
//!    (`kruise.io/related-pub`), carrying the 5 sidecars; and the apiserver's Pod writes (all, and
//!    the manager's from the audit log), per Pod.
//! 2. **Eviction latency under a drain**: `--evictions` (100) running Pods of 10 workloads, each
//!    guarded by a budget of `maxUnavailable: 50%`, all evicted at once (`pods/eviction`, as
//!    `kubectl drain` asks): the client-observed eviction latency p50/p99, the `vpodeviction.kb.io`
//!    handler's and the apiserver's p99, how many evictions the budgets allowed (never more
//!    than half of each workload), and the Pod writes as in phase 1.
//!
//! The bench's workloads are inert: kube-controller-manager runs without its ReplicaSet and
//! Deployment controllers, so the Pods the bench creates with a ReplicaSet as their owner stay as
//! created (the webhooks only need the owner chain to exist). Phase 1 Pods name a scheduler nobody
//! runs and stay Pending; phase 2 Pods run on kubelet-sim's nodes. Prints figures; asserts nothing
//! about time.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Parser, ValueEnum};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kruise_api::sidecarset::v1beta1::SidecarSet;
use kruise_benches::admission::{
    APP, INJECT_LABEL, PaceArgs, count_injected, create_paced, injecting_names, print_freshness,
    quantile_ms, sidecarsets, wait_dry_run,
};
use kruise_benches::apiserver::{self, PodWrites, ResourceRequests};
use kruise_benches::create_namespace;
use kruise_benches::manager::{Manager, print_all_rss};
use kruise_benches::process::{cpu_seconds, pid_of};
use kruise_benches::prom::Histogram;
use kruise_benches::sim::{self, SimArgs};
use kruise_benches::stats::{ms, percentile, seconds_as_ms};
use kruise_testkit::control_plane::{ControlPlane, Options};
use kruise_testkit::until;
use kube::api::{Api, DynamicObject, EvictParams, ListParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

#[derive(Parser, Debug)]
struct Cli {
    /// `--rate` (200) and `--seconds` (30) of the latency phase.
    #[command(flatten)]
    pace: PaceArgs,
    /// Running Pods evicted at once in the drain phase (a multiple of 10).
    #[arg(long, default_value_t = 100)]
    evictions: u32,
    /// Measure OpenKruise's kruise-manager from this folder (`make openkruise`) instead of kruise-rs's.
    #[arg(long)]
    openkruise: Option<PathBuf>,
    /// Phases to run, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "latency,eviction")]
    phases: Vec<Phase>,
    /// `--nodes` (10: phase 2's Pods run there, over three zones) and the manager's extra arguments.
    #[command(flatten)]
    sim: SimArgs<10>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Phase {
    Latency,
    Eviction,
}

/// Workloads (each with its WorkloadSpread and budget) per phase.
const WORKLOADS: u32 = 10;
const TIMEOUT: Duration = Duration::from_secs(600);
/// A scheduler nobody runs: phase 1 Pods stay Pending and unbound.
const NO_SCHEDULER: &str = "policy-bench-no-scheduler";
const LATENCY_NAMESPACE: &str = "policy-latency";
const EVICTION_NAMESPACE: &str = "policy-eviction";
/// The ReplicaSets' `pod-template-hash` (their Pods carry it, as a Deployment's do).
const TEMPLATE_HASH: &str = "bench";
const MATCHED_WORKLOADSPREAD: &str = "apps.kruise.io/matched-workloadspread";
const RELATED_PUB: &str = "kruise.io/related-pub";
/// The policies whose status the webhook's decisions write.
const POLICY_RESOURCES: &[&str] = &["workloadspreads", "podunavailablebudgets"];
/// The apiserver requests whose time the bench prints: the policies' status writes (kruise-rs
/// patches, OpenKruise updates) and the consistent lists of kruise-rs's read-your-writes.
const TIMED_REQUESTS: &[(&str, &str, &str)] = &[
    ("PATCH", "workloadspreads", "status"),
    ("PUT", "workloadspreads", "status"),
    ("PATCH", "podunavailablebudgets", "status"),
    ("PUT", "podunavailablebudgets", "status"),
    ("LIST", "sidecarsets", ""),
    ("LIST", "workloadspreads", ""),
    ("LIST", "podunavailablebudgets", ""),
    ("LIST", "persistentpodstates", ""),
    // A new Pod's ReplicaSet, for its Deployment (WorkloadSpread matching, related-pub).
    ("GET", "replicasets", ""),
];

fn main() -> anyhow::Result<()> {
    let options = |cli: &Cli| Options {
        // The bench's ReplicaSets and Deployments only give Pods an owner chain.
        controller_manager_controllers: vec![
            "-replicaset-controller".into(),
            "-deployment-controller".into(),
        ],
        // OpenKruise's run starts on its own CRDs.
        crd_dir: cli.openkruise.as_ref().map(|dir| dir.join("crd")),
        ..sim::bench_options()
    };
    sim::main_with(|cli: &Cli| &cli.sim, options, bench)
}

async fn bench(cli: &Cli, plane: &ControlPlane) -> anyhow::Result<()> {
    sim::spawn(plane, cli.sim.nodes).await?;
    let client = plane.client().await?;
    let (manager, which) = match &cli.openkruise {
        None => (
            Manager::start(plane, &cli.sim.manager_args).await?,
            "kruise-rs".to_owned(),
        ),
        Some(dir) => (
            Manager::start_openkruise(plane, dir, &cli.sim.manager_args).await?,
            format!("OpenKruise from {}", dir.display()),
        ),
    };
    let sidecarsets_api: Api<SidecarSet> = Api::all(client.clone());
    for set in sidecarsets() {
        let set: SidecarSet = serde_json::from_value(set)?;
        sidecarsets_api.create(&PostParams::default(), &set).await?;
    }
    println!(
        "policy webhooks: {which} {:?}; 20 SidecarSets (5 inject), {WORKLOADS} WorkloadSpreads, \
         {WORKLOADS} PodUnavailableBudgets per namespace; {} simulated nodes",
        cli.sim.manager_args, cli.sim.nodes
    );
    let bench = Bench {
        client,
        manager,
        openkruise: cli.openkruise.is_some(),
        apiserver_pid: pid_of(plane, "kube-apiserver"),
        audit_log: plane.audit_log_path(),
    };
    if cli.phases.contains(&Phase::Latency) {
        let (rate, seconds) = cli.pace.pace();
        bench.latency(rate, seconds).await?;
    }
    if cli.phases.contains(&Phase::Eviction) {
        bench.eviction(cli.evictions.max(WORKLOADS)).await?;
    }
    print_all_rss(plane);
    Ok(())
}

struct Bench {
    client: Client,
    manager: Manager,
    openkruise: bool,
    apiserver_pid: Option<u32>,
    /// The control plane's audit log, where the manager's own writes are told apart.
    audit_log: PathBuf,
}

impl Bench {
    /// Phase 1: paced creates through the Pod webhook with every policy matching.
    async fn latency(&self, rate: u32, seconds: u32) -> anyhow::Result<()> {
        let namespace = LATENCY_NAMESPACE;
        let total = rate * seconds;
        let per_workload = total.div_ceil(WORKLOADS);
        self.namespace(namespace, json!({INJECT_LABEL: "inject"}))
            .await?;
        let owners = self
            .workloads(namespace, "web", per_workload, Some(NO_SCHEDULER))
            .await?;
        for w in 0..WORKLOADS {
            self.create(namespace, workloadspread(&format!("web-{w}"), per_workload))
                .await?;
            self.create(namespace, budget(&format!("web-{w}"), "25%"))
                .await?;
        }
        self.wait_policies_observed(namespace).await?;
        wait_dry_run(
            &self.client,
            namespace,
            &pod_doc("dry-run", "web-0", &owners[0], Some(NO_SCHEDULER)),
            Some(&injecting_names().join(",")),
        )
        .await?;

        let handler_before = self.handler_histogram("/mutate-pod").await?;
        let apiserver_before = self.apiserver_histogram("mpod.kb.io", "CREATE").await?;
        let cpu_before = self.cpu();
        let metrics_before = self.manager.metrics_text().await?;
        let writes_before = self.pod_writes().await?;
        let policy_before = self.policy_requests().await?;
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        println!(
            "Pod webhook latency: {total} Pod creates paced at {rate}/s for {seconds} s \
             (each Pod: 5 SidecarSets, 1 WorkloadSpread, 1 budget)"
        );
        let creates = create_paced(&pods, total, rate, |i| {
            let w = (i % WORKLOADS) as usize;
            Ok(serde_json::from_value(pod_doc(
                &format!("p-{i}"),
                &format!("web-{w}"),
                &owners[w],
                Some(NO_SCHEDULER),
            ))?)
        })
        .await?;
        let handler = self
            .handler_histogram("/mutate-pod")
            .await?
            .since(&handler_before);
        let apiserver = self
            .apiserver_histogram("mpod.kb.io", "CREATE")
            .await?
            .since(&apiserver_before);
        creates.print("  created");
        self.print_handler("  /mutate-pod handler", &handler);
        println!(
            "  apiserver calling mpod.kb.io ({:.0} calls): mean {} p99 {}",
            apiserver.count,
            apiserver.mean().map_or("-".into(), seconds_as_ms),
            quantile_ms(&apiserver, 0.99),
        );
        self.print_cpu("  ", cpu_before, total);
        self.print_pod_writes(&writes_before, f64::from(total))
            .await?;
        self.print_policy_requests(&policy_before).await?;
        if !self.openkruise {
            let metrics_after = self.manager.metrics_text().await?;
            print_freshness("  ", &metrics_before, &metrics_after, f64::from(total));
        }
        let listed = pods.list(&ListParams::default()).await?.items;
        let annotated = |key: &str| {
            listed
                .iter()
                .filter(|p| p.annotations().get(key).is_some_and(|v| !v.is_empty()))
                .count()
        };
        let injected = count_injected(&listed);
        println!(
            "  of {} Pods: placed by their WorkloadSpread {}, naming their budget {}, \
             carrying the 5 sidecars {injected}",
            listed.len(),
            annotated(MATCHED_WORKLOADSPREAD),
            annotated(RELATED_PUB),
        );
        let quarter = (per_workload / 4).max(1);
        let (as_asked, over) = placed_as_asked(&listed, quarter);
        let gated = listed
            .iter()
            .filter(|p| kruise_core::workloadspread::gate::is_pending(p))
            .count();
        println!(
            "  placed as their WorkloadSpread asks at admission: {as_asked} of {} ({:.1}%); \
             beyond a subset's maxReplicas: {over}; deferred behind the placement gate: {gated}",
            listed.len(),
            100.0 * as_asked as f64 / listed.len().max(1) as f64,
        );
        if gated > 0 {
            // kruise-rs places deferred Pods from its controller: wait for them (at most 2 min).
            let settled = Instant::now();
            let mut listed = listed;
            while listed
                .iter()
                .any(kruise_core::workloadspread::gate::is_pending)
                && settled.elapsed() < Duration::from_secs(120)
            {
                tokio::time::sleep(Duration::from_secs(1)).await;
                listed = pods.list(&ListParams::default()).await?.items;
            }
            let (as_asked, over) = placed_as_asked(&listed, quarter);
            println!(
                "  placed as asked after convergence ({:.0} s): {as_asked} of {} ({:.1}%); \
                 beyond a subset's maxReplicas: {over}; still gated: {}",
                settled.elapsed().as_secs_f64(),
                listed.len(),
                100.0 * as_asked as f64 / listed.len().max(1) as f64,
                listed
                    .iter()
                    .filter(|p| kruise_core::workloadspread::gate::is_pending(p))
                    .count(),
            );
        }
        self.manager.print_rss();
        Ok(())
    }

    /// Phase 2: `count` running Pods evicted at once, each workload's budget allowing half.
    async fn eviction(&self, count: u32) -> anyhow::Result<()> {
        let namespace = EVICTION_NAMESPACE;
        let per_workload = count / WORKLOADS;
        let count = per_workload * WORKLOADS;
        self.namespace(namespace, json!({})).await?;
        let owners = self
            .workloads(namespace, "drain", per_workload, None)
            .await?;
        for w in 0..WORKLOADS {
            self.create(namespace, budget(&format!("drain-{w}"), "50%"))
                .await?;
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let made = futures::stream::iter(0..count)
            .map(|i| {
                let w = (i % WORKLOADS) as usize;
                let doc = pod_doc(&format!("d-{i}"), &format!("drain-{w}"), &owners[w], None);
                let pods = pods.clone();
                async move {
                    let pod: Pod = serde_json::from_value(doc)?;
                    pods.create(&PostParams::default(), &pod).await?;
                    anyhow::Ok(())
                }
            })
            .buffer_unordered(16)
            .collect::<Vec<_>>()
            .await;
        made.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
        until(format!("{count} Pods Ready"), TIMEOUT, || async {
            let ready = pods
                .list(&ListParams::default())
                .await?
                .items
                .iter()
                .filter(|p| is_ready(p))
                .count();
            Ok(ready == count as usize)
        })
        .await?;
        let allowed_each = (per_workload / 2) as i64;
        self.wait_budgets_allow(namespace, allowed_each).await?;

        let handler_before = self.handler_histogram("/validate-pod").await?;
        let apiserver_before = self.apiserver_histogram("vpodeviction", "CREATE").await?;
        let cpu_before = self.cpu();
        let writes_before = self.pod_writes().await?;
        let policy_before = self.policy_requests().await?;
        println!(
            "Eviction latency: {count} running Pods of {WORKLOADS} workloads evicted at once, \
             each workload's budget allowing {allowed_each} of {per_workload}"
        );
        let began = Instant::now();
        let results = futures::future::join_all((0..count).map(|i| {
            let pods = pods.clone();
            async move {
                let name = format!("d-{i}");
                let start = Instant::now();
                let answer = pods.evict(&name, &EvictParams::default()).await;
                (start.elapsed(), answer)
            }
        }))
        .await;
        let took = began.elapsed();
        let (mut allowed, mut refused, mut failed) = (Vec::new(), Vec::new(), Vec::new());
        for (latency, answer) in results {
            match answer {
                Ok(_) => allowed.push(latency),
                // A budget's refusal: the webhook's 403 (both managers), or the apiserver's own
                // 429 where a Kubernetes PodDisruptionBudget would have refused.
                Err(kube::Error::Api(status)) if matches!(status.code, 403 | 429) => {
                    refused.push(latency)
                }
                Err(error) => failed.push(error.to_string()),
            }
        }
        let all: Vec<Duration> = allowed.iter().chain(&refused).copied().collect();
        let pct = |d: &[Duration], q| percentile(d, q).map_or("-".into(), ms);
        println!(
            "  {} evictions answered in {:.2} s: allowed {} (budgets allow {}), refused {}, \
             failed {}; client-observed latency p50 {} p99 {} max {} (allowed p99 {}, refused p99 {})",
            all.len(),
            took.as_secs_f64(),
            allowed.len(),
            allowed_each * i64::from(WORKLOADS),
            refused.len(),
            failed.len(),
            pct(&all, 0.5),
            pct(&all, 0.99),
            pct(&all, 1.0),
            pct(&allowed, 0.99),
            pct(&refused, 0.99),
        );
        if let Some(first) = failed.first() {
            println!("  first failure: {first}");
        }
        let handler = self
            .handler_histogram("/validate-pod")
            .await?
            .since(&handler_before);
        self.print_handler("  /validate-pod handler", &handler);
        let apiserver = self
            .apiserver_histogram("vpodeviction", "CREATE")
            .await?
            .since(&apiserver_before);
        println!(
            "  apiserver calling vpodeviction*.kb.io ({:.0} calls): mean {} p99 {}",
            apiserver.count,
            apiserver.mean().map_or("-".into(), seconds_as_ms),
            quantile_ms(&apiserver, 0.99),
        );
        self.print_cpu("  ", cpu_before, count);
        self.print_pod_writes(&writes_before, f64::from(count))
            .await?;
        self.print_policy_requests(&policy_before).await?;
        self.manager.print_rss();
        Ok(())
    }

    /// The apiserver's `/metrics` now, for [`Bench::print_policy_requests`].
    async fn policy_requests(&self) -> anyhow::Result<String> {
        apiserver::metrics_text(&self.client).await
    }

    /// Prints the policies' requests since `before` (the apiserver's `/metrics` then): how many
    /// status writes the placements and disruptions took, how many conflicted (409), how many
    /// reads they needed; and how long the apiserver took to serve the status writes and the
    /// consistent lists of read-your-writes.
    async fn print_policy_requests(&self, before: &str) -> anyhow::Result<()> {
        let now = self.policy_requests().await?;
        let counts = ResourceRequests::parse(&now, POLICY_RESOURCES)
            .since(&ResourceRequests::parse(before, POLICY_RESOURCES));
        println!(
            "  apiserver requests for the policies (not WATCH): {}",
            counts.describe()
        );
        for (verb, resource, subresource) in TIMED_REQUESTS {
            let keep = |s: &kruise_benches::prom::Sample| {
                s.label("verb") == *verb
                    && s.label("resource") == *resource
                    && s.label("subresource") == *subresource
            };
            let name = "apiserver_request_duration_seconds";
            let served =
                Histogram::read(&now, name, keep).since(&Histogram::read(before, name, keep));
            if served.count < 1.0 {
                continue;
            }
            let path = match *subresource {
                "" => resource.to_string(),
                sub => format!("{resource}/{sub}"),
            };
            println!(
                "  apiserver serving {verb} {path} ({:.0}): p50 {} p99 {}",
                served.count,
                quantile_ms(&served, 0.5),
                quantile_ms(&served, 0.99),
            );
        }
        Ok(())
    }

    /// The apiserver's Pod writes so far: all of them, and the manager's (from the audit log).
    async fn pod_writes(&self) -> anyhow::Result<(PodWrites, PodWrites)> {
        let all = PodWrites::read(&self.client).await?;
        let text = std::fs::read_to_string(&self.audit_log).unwrap_or_default();
        Ok((all, PodWrites::parse_audit(&text)))
    }

    /// Prints the Pod writes made since `before` (all, and the manager's), per Pod of `pods`.
    async fn print_pod_writes(
        &self,
        before: &(PodWrites, PodWrites),
        pods: f64,
    ) -> anyhow::Result<()> {
        let (all, mine) = self.pod_writes().await?;
        all.since(&before.0).print_as("apiserver Pod writes", pods);
        mine.since(&before.1)
            .print_as("of which the manager's", pods);
        Ok(())
    }

    async fn namespace(&self, name: &str, labels: Value) -> anyhow::Result<()> {
        create_namespace(&self.client, name, labels).await
    }

    /// `WORKLOADS` Deployments `{prefix}-{w}` of `replicas`, each with the ReplicaSet its Pods will
    /// name as their owner; returns each ReplicaSet's (name, uid).
    async fn workloads(
        &self,
        namespace: &str,
        prefix: &str,
        replicas: u32,
        scheduler: Option<&str>,
    ) -> anyhow::Result<Vec<(String, String)>> {
        let deployments: Api<Deployment> = Api::namespaced(self.client.clone(), namespace);
        let replicasets: Api<ReplicaSet> = Api::namespaced(self.client.clone(), namespace);
        let mut owners = Vec::new();
        for w in 0..WORKLOADS {
            let name = format!("{prefix}-{w}");
            let template = pod_doc("", &name, &(String::new(), String::new()), scheduler);
            let deployment: Deployment = serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": {"workload": name}},
                    "template": {"metadata": {"labels": template["metadata"]["labels"]},
                                 "spec": template["spec"]},
                }
            }))?;
            let deployment = deployments
                .create(&PostParams::default(), &deployment)
                .await
                .with_context(|| format!("creating Deployment {name}"))?;
            let rs_name = format!("{name}-{TEMPLATE_HASH}");
            let replicaset: ReplicaSet = serde_json::from_value(json!({
                "metadata": {
                    "name": rs_name,
                    "labels": {"workload": name, "pod-template-hash": TEMPLATE_HASH},
                    "annotations": {"deployment.kubernetes.io/revision": "1"},
                    "ownerReferences": [{
                        "apiVersion": "apps/v1", "kind": "Deployment", "name": name,
                        "uid": deployment.uid().unwrap_or_default(),
                        "controller": true, "blockOwnerDeletion": true,
                    }],
                },
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": {"workload": name, "pod-template-hash": TEMPLATE_HASH}},
                    "template": {"metadata": {"labels": template["metadata"]["labels"]},
                                 "spec": template["spec"]},
                }
            }))?;
            let replicaset = replicasets
                .create(&PostParams::default(), &replicaset)
                .await
                .with_context(|| format!("creating ReplicaSet {rs_name}"))?;
            owners.push((rs_name, replicaset.uid().unwrap_or_default()));
        }
        Ok(owners)
    }

    /// Creates a namespaced apps.kruise.io or policy.kruise.io object from its document.
    async fn create(&self, namespace: &str, doc: Value) -> anyhow::Result<()> {
        let object: DynamicObject = serde_json::from_value(doc)?;
        let api = self.dynamic(namespace, &object)?;
        api.create(&PostParams::default(), &object)
            .await
            .with_context(|| format!("creating {}", object.name_any()))?;
        Ok(())
    }

    fn dynamic(
        &self,
        namespace: &str,
        object: &DynamicObject,
    ) -> anyhow::Result<Api<DynamicObject>> {
        let types = object.types.as_ref().context("an object without a kind")?;
        let gvk = GroupVersionKind::try_from(types)?;
        let plural = format!("{}s", gvk.kind.to_lowercase());
        let resource = ApiResource::from_gvk_with_plural(&gvk, &plural);
        Ok(Api::namespaced_with(
            self.client.clone(),
            namespace,
            &resource,
        ))
    }

    /// Waits until every WorkloadSpread and budget of `namespace` has a status for its generation
    /// (a WorkloadSpread places Pods only then).
    async fn wait_policies_observed(&self, namespace: &str) -> anyhow::Result<()> {
        for doc in [workloadspread("web-0", 1), budget("web-0", "25%")] {
            let object: DynamicObject = serde_json::from_value(doc)?;
            let api = self.dynamic(namespace, &object)?;
            let kind = object.types.map(|t| t.kind).unwrap_or_default();
            until(format!("every {kind} observed"), TIMEOUT, || async {
                let items = api.list(&ListParams::default()).await?.items;
                Ok(items.len() == WORKLOADS as usize
                    && items.iter().all(|o| {
                        o.data["status"]["observedGeneration"].as_i64() == o.metadata.generation
                    }))
            })
            .await?;
        }
        Ok(())
    }

    /// Waits until every budget of `namespace` allows `allowed` disruptions.
    async fn wait_budgets_allow(&self, namespace: &str, allowed: i64) -> anyhow::Result<()> {
        let object: DynamicObject = serde_json::from_value(budget("drain-0", "50%"))?;
        let api = self.dynamic(namespace, &object)?;
        until(
            format!("every budget allowing {allowed} disruptions"),
            TIMEOUT,
            || async {
                let items = api.list(&ListParams::default()).await?.items;
                Ok(items.len() == WORKLOADS as usize
                    && items
                        .iter()
                        .all(|o| o.data["status"]["unavailableAllowed"].as_i64() == Some(allowed)))
            },
        )
        .await
    }

    /// The manager's own handler durations for `path`.
    async fn handler_histogram(&self, path: &str) -> anyhow::Result<Histogram> {
        let text = self.manager.metrics_text().await?;
        Ok(if self.openkruise {
            Histogram::read(&text, "controller_runtime_webhook_latency_seconds", |s| {
                s.label("webhook") == path
            })
        } else {
            Histogram::read(&text, "kruise_webhook_request_duration_seconds", |s| {
                s.label("path") == path
            })
        })
    }

    fn print_handler(&self, what: &str, handler: &Histogram) {
        let metric = if self.openkruise {
            "controller_runtime_webhook_latency_seconds"
        } else {
            "kruise_webhook_request_duration_seconds"
        };
        println!(
            "{what} ({metric}, {:.0} requests): p50 {} p99 {} mean {}",
            handler.count,
            quantile_ms(handler, 0.5),
            quantile_ms(handler, 0.99),
            handler.mean().map_or("-".into(), seconds_as_ms),
        );
    }

    /// The apiserver's time calling the webhook `name` for `operation`, TLS and HTTP included.
    /// The apiserver's time calling the webhooks whose name starts with `name` (kruise-rs sends
    /// the evictions of a namespace with a budget to `vpodevictionguarded.kb.io`, the rest to
    /// `vpodeviction.kb.io`).
    async fn apiserver_histogram(&self, name: &str, operation: &str) -> anyhow::Result<Histogram> {
        let text = apiserver::metrics_text(&self.client).await?;
        Ok(Histogram::read(
            &text,
            "apiserver_admission_webhook_admission_duration_seconds",
            |s| s.label("name").starts_with(name) && s.label("operation") == operation,
        ))
    }

    fn cpu(&self) -> (f64, f64) {
        (
            cpu_seconds(self.manager.pid).unwrap_or(0.0),
            self.apiserver_pid.and_then(cpu_seconds).unwrap_or(0.0),
        )
    }

    fn print_cpu(&self, indent: &str, (manager, apiserver): (f64, f64), requests: u32) {
        let (manager_now, apiserver_now) = self.cpu();
        let manager = manager_now - manager;
        println!(
            "{indent}CPU: kruise-manager {manager:.1} s ({:.2} ms per request), kube-apiserver {:.1} s",
            manager * 1000.0 / f64::from(requests.max(1)),
            apiserver_now - apiserver,
        );
    }
}

/// A Pod of workload `workload`, owned by its ReplicaSet `owner` (name, uid; none when empty): the
/// app container with an env var and a volume the injecting sidecars take.
fn pod_doc(name: &str, workload: &str, owner: &(String, String), scheduler: Option<&str>) -> Value {
    let mut pod = json!({
        "metadata": {
            "name": name,
            "labels": {"app": APP, "tier": "web", "workload": workload,
                       "pod-template-hash": TEMPLATE_HASH},
        },
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [{
                "name": "app", "image": "nginx:alpine",
                "env": [{"name": "TZ", "value": "UTC"}],
                "volumeMounts": [{"name": "logs", "mountPath": "/var/log/app"}],
            }],
            "volumes": [{"name": "logs", "emptyDir": {}}],
        }
    });
    if let Some(scheduler) = scheduler {
        pod["spec"]["schedulerName"] = json!(scheduler);
    }
    if !owner.0.is_empty() {
        pod["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner.0, "uid": owner.1,
            "controller": true, "blockOwnerDeletion": true,
        }]);
    }
    pod
}

/// Of `pods`, how many carry a subset of their WorkloadSpread within its `maxReplicas` (zone-a and
/// zone-b hold `quarter` each per workload, zone-c the rest), and how many went beyond it.
fn placed_as_asked(pods: &[Pod], quarter: u32) -> (usize, usize) {
    let mut per_subset: std::collections::BTreeMap<(String, String), usize> = Default::default();
    for pod in pods {
        let Some(subset) = pod
            .annotations()
            .get(MATCHED_WORKLOADSPREAD)
            .and_then(|m| serde_json::from_str::<Value>(m).ok())
            .and_then(|m| m["subset"].as_str().map(str::to_owned))
        else {
            continue;
        };
        let workload = pod.labels().get("workload").cloned().unwrap_or_default();
        *per_subset.entry((workload, subset)).or_default() += 1;
    }
    let mut as_asked = 0;
    let mut over = 0;
    for ((_, subset), count) in per_subset {
        let cap = match subset.as_str() {
            "zone-a" | "zone-b" => quarter as usize,
            _ => usize::MAX,
        };
        as_asked += count.min(cap);
        over += count.saturating_sub(cap);
    }
    (as_asked, over)
}

/// The WorkloadSpread of Deployment `name` of `replicas`: a quarter in zone-a, a quarter in
/// zone-b, the rest in zone-c (ints: v1.9.0 refuses a mix of ints and percents).
fn workloadspread(name: &str, replicas: u32) -> Value {
    let zone = |zone: &str| {
        json!({"matchExpressions": [
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]}]})
    };
    let quarter = (replicas / 4).max(1);
    json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "WorkloadSpread",
        "metadata": {"name": name},
        "spec": {
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "subsets": [
                {"name": "zone-a", "requiredNodeSelectorTerm": zone("zone-a"), "maxReplicas": quarter},
                {"name": "zone-b", "requiredNodeSelectorTerm": zone("zone-b"), "maxReplicas": quarter},
                {"name": "zone-c", "requiredNodeSelectorTerm": zone("zone-c")},
            ],
        }
    })
}

/// The budget of the Pods of workload `name` (by selector).
fn budget(name: &str, max_unavailable: &str) -> Value {
    json!({
        "apiVersion": "policy.kruise.io/v1alpha1", "kind": "PodUnavailableBudget",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"workload": name}},
            "maxUnavailable": max_unavailable,
        }
    })
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bench_objects_parse_as_their_kinds() -> anyhow::Result<()> {
        let spread: kruise_api::workloadspread::WorkloadSpread =
            serde_json::from_value(workloadspread("web-0", 600))?;
        assert_eq!(spread.spec.subsets.len(), 3);
        let _: kruise_api::policy::v1alpha1::PodUnavailableBudget =
            serde_json::from_value(budget("web-0", "25%"))?;
        let pod: Pod = serde_json::from_value(pod_doc(
            "p-0",
            "web-0",
            &("web-0-bench".into(), "uid".into()),
            Some(NO_SCHEDULER),
        ))?;
        assert_eq!(
            pod.owner_references()[0].name,
            "web-0-bench",
            "a Pod names its ReplicaSet"
        );
        Ok(())
    }
}
