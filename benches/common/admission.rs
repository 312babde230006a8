//! What the admission benches share (`sidecarset-scale`, `policy-scale`): the 20-SidecarSet fleet,
//! Pod creates paced or concurrent with each request timed by the bench, a dry run that waits for
//! the webhook to see a configuration, and quantiles of a Prometheus histogram in ms.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kruise_testkit::until;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::prom::{self, Histogram};
use crate::stats::{ms, percentile, seconds_as_ms};

/// The label of the Pods that the injecting SidecarSets of [`sidecarsets`] select (`app`).
pub const APP: &str = "sidecar-bench";
/// Namespaces with this label (`inject`) are injected by the 5 injecting SidecarSets.
pub const INJECT_LABEL: &str = "sidecar-bench";
/// Paced creates allowed in flight before the pacer waits (then the achieved rate falls short).
pub const PACED_IN_FLIGHT: usize = 1000;

// The latency phase's pace, the same two arguments in both admission benches (flattened into
// their `Cli`). A `//` comment: clap would print a doc comment as the bench's `--help` text.
#[derive(clap::Args, Debug)]
pub struct PaceArgs {
    /// Paced Pod creates per second in the latency phase.
    #[arg(long, default_value_t = 200)]
    pub rate: u32,
    /// Length of the latency phase, in seconds.
    #[arg(long, default_value_t = 30)]
    pub seconds: u32,
}

impl PaceArgs {
    /// (creates per second, at least 1; seconds) of the latency phase.
    pub fn pace(&self) -> (u32, u32) {
        (self.rate.max(1), self.seconds)
    }
}

/// The 20 SidecarSets: each a single sidecar container with its own name. 5 inject Pods labelled
/// `app: `[`APP`] (and `tier: web`) in namespaces labelled [`INJECT_LABEL`]`: inject`, 8 select
/// other Pods, 7 select them but only in other teams' namespaces.
pub fn sidecarsets() -> Vec<Value> {
    let set =
        |name: String, selector: Value, namespace_selector: Option<Value>, container: Value| {
            let mut spec = json!({"selector": selector, "containers": [container]});
            if let Some(namespace_selector) = namespace_selector {
                spec["namespaceSelector"] = namespace_selector;
            }
            json!({"apiVersion": "apps.kruise.io/v1beta1", "kind": "SidecarSet",
            "metadata": {"name": name}, "spec": spec})
        };
    let sidecar = |name: String| json!({"name": name, "image": "busybox:1.36"});
    let bench_pods = json!({"matchLabels": {"app": APP}});
    let inject_namespaces = json!({"matchLabels": {INJECT_LABEL: "inject"}});
    let mut sets = vec![
        // Injecting: the app's TZ copied into the sidecar, the app's volumes shared.
        set(
            "sidecar-m0".into(),
            bench_pods.clone(),
            Some(inject_namespaces.clone()),
            json!({"name": "sidecar-m0", "image": "busybox:1.36",
                "transferEnv": [{"sourceContainerName": "app", "envName": "TZ"}],
                "shareVolumePolicy": {"type": "enabled"}}),
        ),
        // Injecting: a volume of its own.
        json!({"apiVersion": "apps.kruise.io/v1beta1", "kind": "SidecarSet",
            "metadata": {"name": "sidecar-m1"},
            "spec": {"selector": bench_pods, "namespaceSelector": inject_namespaces,
                "containers": [{"name": "sidecar-m1", "image": "busybox:1.36",
                    "volumeMounts": [{"name": "sidecar-m1-data", "mountPath": "/data"}]}],
                "volumes": [{"name": "sidecar-m1-data", "emptyDir": {}}]}}),
        // Injecting: after the app container.
        set(
            "sidecar-m2".into(),
            bench_pods.clone(),
            Some(inject_namespaces.clone()),
            json!({"name": "sidecar-m2", "image": "busybox:1.36",
                "podInjectPolicy": "AfterAppContainer"}),
        ),
    ];
    // Injecting through set-based selectors.
    for i in 3..5 {
        sets.push(set(
            format!("sidecar-m{i}"),
            json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["web", "api"]}]}),
            Some(json!({"matchExpressions": [{"key": INJECT_LABEL, "operator": "Exists"}]})),
            sidecar(format!("sidecar-m{i}")),
        ));
    }
    // Other Pods, in any namespace.
    for i in 0..8 {
        sets.push(set(
            format!("sidecar-other-{i}"),
            json!({"matchLabels": {"app": format!("other-{i}")}}),
            None,
            sidecar(format!("sidecar-other-{i}")),
        ));
    }
    // The bench's Pods, but only in other teams' namespaces.
    for i in 0..7 {
        sets.push(set(
            format!("sidecar-team-{i}"),
            bench_pods.clone(),
            Some(json!({"matchLabels": {"team": format!("elsewhere-{i}")}})),
            sidecar(format!("sidecar-team-{i}")),
        ));
    }
    sets
}

/// Names of the SidecarSets that inject the bench's Pods, sorted (as the injected-list annotation).
pub fn injecting_names() -> Vec<String> {
    (0..5).map(|i| format!("sidecar-m{i}")).collect()
}

/// How many of `pods` carry the container of every injecting SidecarSet ([`injecting_names`]):
/// what both admission benches report of the webhook's injection, counted one way.
pub fn count_injected(pods: &[Pod]) -> usize {
    let want = injecting_names();
    pods.iter()
        .filter(|pod| {
            let names: Vec<&str> = pod
                .spec
                .iter()
                .flat_map(|s| s.containers.iter().map(|c| c.name.as_str()))
                .collect();
            want.iter().all(|w| names.contains(&w.as_str()))
        })
        .count()
}

/// Waits until a server-side dry run of `pod` in `namespace` comes back with the injected-list
/// annotation `want` (comma-separated SidecarSet names).
pub async fn wait_dry_run(
    client: &Client,
    namespace: &str,
    pod: &Value,
    want: Option<&str>,
) -> anyhow::Result<()> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod: Pod = serde_json::from_value(pod.clone())?;
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    until(
        format!("the webhook injecting {want:?} on a dry run in {namespace}"),
        Duration::from_secs(60),
        || async {
            let created = api.create(&params, &pod).await?;
            let injected = created
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("kruise.io/sidecarset-injected-list"))
                .map(String::as_str);
            Ok(injected == want)
        },
    )
    .await
}

/// Quantile `q` of a histogram of seconds, in ms; `≥` the highest bound when it lies beyond it.
pub fn quantile_ms(histogram: &Histogram, q: f64) -> String {
    match histogram.quantile(q) {
        None => "-".into(),
        Some(seconds) if histogram.beyond_buckets(q) => format!("≥{}", seconds_as_ms(seconds)),
        Some(seconds) => seconds_as_ms(seconds),
    }
}

/// The outcome of a batch of Pod creates: the latency of each successful one, the failures, the time
/// from the first request to the last answer.
pub struct Creates {
    pub latencies: Vec<Duration>,
    pub errors: Vec<String>,
    pub took: Duration,
}

impl Creates {
    pub fn ok(&self) -> usize {
        self.latencies.len()
    }

    pub fn print(&self, prefix: &str) {
        let pct = |q| percentile(&self.latencies, q).map_or("-".into(), ms);
        println!(
            "{prefix} {} Pods in {:.1} s: {:.0} Pods/s; client-observed CREATE latency p50 {} p99 {} \
             max {}; failed: {}",
            self.ok(),
            self.took.as_secs_f64(),
            self.ok() as f64 / self.took.as_secs_f64(),
            pct(0.5),
            pct(0.99),
            pct(1.0),
            self.errors.len()
        );
        if let Some(first) = self.errors.first() {
            println!("{prefix} first failure: {first}");
        }
    }
}

/// Creates `pod` and measures how long the apiserver took to answer.
pub async fn timed_create(api: &Api<Pod>, pod: Pod) -> Result<Duration, String> {
    let began = Instant::now();
    match api.create(&PostParams::default(), &pod).await {
        Ok(_) => Ok(began.elapsed()),
        Err(error) => Err(error.to_string()),
    }
}

/// Creates `total` Pods at `rate` per second, each request on its own task so that a slow answer does
/// not delay the next request (at most [`PACED_IN_FLIGHT`] in flight); `pod(i)` is the `i`th.
pub async fn create_paced(
    api: &Api<Pod>,
    total: u32,
    rate: u32,
    pod: impl Fn(u32) -> anyhow::Result<Pod>,
) -> anyhow::Result<Creates> {
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(rate)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let permits = Arc::new(Semaphore::new(PACED_IN_FLIGHT));
    let mut tasks = JoinSet::new();
    let began = Instant::now();
    for i in 0..total {
        ticker.tick().await;
        let permit = permits.clone().acquire_owned().await?;
        let (api, pod) = (api.clone(), pod(i)?);
        tasks.spawn(async move {
            let result = timed_create(&api, pod).await;
            drop(permit);
            result
        });
    }
    let mut results = Vec::with_capacity(total as usize);
    while let Some(result) = tasks.join_next().await {
        results.push(result.context("a create task")?);
    }
    Ok(collect(results, began.elapsed()))
}

/// Creates `total` Pods with `concurrency` requests in flight; `pod(i)` is the `i`th.
pub async fn create_concurrently(
    api: &Api<Pod>,
    total: u32,
    concurrency: usize,
    pod: impl Fn(u32) -> anyhow::Result<Pod>,
) -> Creates {
    let began = Instant::now();
    let results: Vec<Result<Duration, String>> = futures::stream::iter(0..total)
        .map(|i| {
            let pod = pod(i);
            async move { timed_create(api, pod.map_err(|e| format!("{e:#}"))?).await }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    collect(results, began.elapsed())
}

pub fn collect(results: Vec<Result<Duration, String>>, took: Duration) -> Creates {
    let (mut latencies, mut errors) = (Vec::new(), Vec::new());
    for result in results {
        match result {
            Ok(latency) => latencies.push(latency),
            Err(error) => errors.push(error),
        }
    }
    Creates {
        latencies,
        errors,
        took,
    }
}

/// Prints what kruise-manager's read-your-writes check did between two `/metrics` texts
/// (`kruise_webhook_freshness_*`): per policy kind, the lists it sent (and per create of `creates`),
/// its checks by result, and the p50/p99 of the time admissions spent in it. Nothing when the check
/// is off.
pub fn print_freshness(indent: &str, before: &str, after: &str, creates: f64) {
    let mut kinds: Vec<String> = prom::samples(after, "kruise_webhook_freshness_checks_total")
        .iter()
        .map(|s| s.label("kind").to_owned())
        .collect();
    kinds.sort();
    kinds.dedup();
    if kinds.is_empty() {
        println!("{indent}read-your-writes check: off (no kruise_webhook_freshness_* metrics)");
    }
    let delta = |name: &str, keep: &dyn Fn(&prom::Sample) -> bool| {
        prom::sum(after, name, keep) - prom::sum(before, name, keep)
    };
    for kind in kinds {
        let of_kind = |s: &prom::Sample| s.label("kind") == kind;
        let lists = delta("kruise_webhook_freshness_probes_total", &of_kind);
        let results: Vec<String> = ["fresh", "waited", "timeout", "error"]
            .iter()
            .map(|result| {
                let n = delta("kruise_webhook_freshness_checks_total", &|s| {
                    of_kind(s) && s.label("result") == *result
                });
                format!("{result} {n:.0}")
            })
            .collect();
        let name = "kruise_webhook_freshness_wait_seconds";
        let wait =
            Histogram::read(after, name, of_kind).since(&Histogram::read(before, name, of_kind));
        println!(
            "{indent}read-your-writes {kind}: {lists:.0} lists ({:.2} per create), checks {}, \
             time in the check p50 {} p99 {}",
            lists / creates.max(1.0),
            results.join(", "),
            quantile_ms(&wait, 0.5),
            quantile_ms(&wait, 0.99),
        );
    }
}
