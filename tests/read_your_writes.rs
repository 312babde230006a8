//! Read-your-writes admission with the manager CPU-starved (issue 54): a Pod created the instant a
//! SidecarSet's create returned gets its sidecar, and an eviction asked the instant a
//! PodUnavailableBudget's create returned is refused by it — every time, while kruise-manager is
//! stopped (SIGSTOP) 200 ms out of every 300 ms, so its watch caches lag.
//!
//! Seed 001's walkthrough, its two steps back to back: its SidecarSet (`examples/
//! sidecarset-logtail.yaml`, v1alpha1 as the article writes it) then its Pod
//! (`examples/sidecarset-test-pod.yaml`), no wait in between. Before the webhook checked its caches
//! against the apiserver, such a Pod came without the sidecar 4 times in 4.
//!
//! Own test binary: it starves its manager. `KRUISE_E2E_READ_YOUR_WRITES=false` starts the manager
//! with the check off (`--webhook-read-your-writes=false`), to see the tests fail without it.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use k8s_openapi::api::core::v1::Pod;
use kruise_api::policy::v1alpha1::PodUnavailableBudget;
use kruise_e2e::cloneset_kit::{active_pods, apply, cloneset, name, wait_converged};
use kruise_e2e::sidecarset_kit::logtail;
use kruise_e2e::{Cleanup, container_names, example};
use kruise_testkit::manager::{ManagerOptions, http_get};
use kruise_testkit::starve::Starver;
use kruise_testkit::{TestBed, eventually, testbed};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, EvictParams, GroupVersionKind, PostParams,
};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);
const REPETITIONS: usize = 10;
const PAUSED: Duration = Duration::from_millis(200);
const RUNNING: Duration = Duration::from_millis(100);
const REFUSAL: &str = "is forbidden: pub unavailable allowed is negative";

/// The binary's test bed, its manager, and the starver of that manager.
fn bed() -> anyhow::Result<(&'static TestBed, &'static Starver, u16)> {
    static STARVER: OnceLock<Starver> = OnceLock::new();
    let bed = testbed();
    let check = std::env::var("KRUISE_E2E_READ_YOUR_WRITES").unwrap_or_else(|_| "true".into());
    let manager = bed.manager_with(&ManagerOptions {
        extra_args: vec![format!("--webhook-read-your-writes={check}")],
        ..ManagerOptions::default()
    });
    let pid = manager
        .pid(&bed.plane)
        .context("the manager has no process")?;
    if STARVER.get().is_none() {
        let _ = STARVER.set(Starver::start(pid, PAUSED, RUNNING)?);
    }
    let starver = STARVER.get().context("the starver")?;
    Ok((bed, starver, manager.ports.metrics))
}

/// The manager's `kruise_webhook_freshness_*` lines (what the check did), for the log.
async fn freshness_metrics(port: u16) -> String {
    match http_get(port, "/metrics").await {
        Ok((_, body)) => body
            .lines()
            .filter(|l| l.starts_with("kruise_webhook_freshness_") && !l.contains("_bucket"))
            .collect::<Vec<_>>()
            .join("\n"),
        Err(error) => format!("cannot read /metrics: {error:#}"),
    }
}

/// Deletes `name` and waits until the apiserver no longer has it.
async fn delete_and_wait_gone<K>(api: &Api<K>, name: &str) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.delete(name, &DeleteParams::default())
        .await
        .with_context(|| format!("deleting {name}"))?;
    eventually(format!("{name} gone"), TIMEOUT, || async {
        Ok(api.get_opt(name).await?.is_none().then_some(()))
    })
    .await
}

#[tokio::test]
async fn seed_001_back_to_back_injects_every_time_while_the_manager_is_starved()
-> anyhow::Result<()> {
    let (bed, starver, metrics_port) = bed()?;
    let ns = bed.namespace("ryw-seed").await?;
    let mut cleanup = Cleanup::new();
    ns.run(async {
        let sidecarsets: Api<DynamicObject> = Api::all_with(
            ns.client.clone(),
            &ApiResource::from_gvk(&GroupVersionKind::gvk(
                "apps.kruise.io",
                "v1alpha1",
                "SidecarSet",
            )),
        );
        let pods: Api<Pod> = ns.api();
        let mut missed = Vec::new();
        let mut took = Vec::new();
        let starved = starver.starve();
        for i in 0..REPETITIONS {
            let set_name = format!("logtail-{}-{i}", ns.name);
            cleanup.sidecarset(&set_name);
            let set: DynamicObject =
                serde_json::from_value(logtail(&set_name, &ns.name, json!({}))?)?;
            let mut pod: Pod = serde_json::from_value(example("sidecarset-test-pod.yaml")?)?;
            let pod_name = format!("test-pod-{i}");
            pod.metadata.name = Some(pod_name.clone());

            // The walkthrough's two steps, back to back.
            sidecarsets
                .create(&PostParams::default(), &set)
                .await
                .with_context(|| format!("creating SidecarSet {set_name}"))?;
            let began = Instant::now();
            let created = pods
                .create(&PostParams::default(), &pod)
                .await
                .with_context(|| format!("creating Pod {pod_name}"))?;
            took.push(began.elapsed());

            let containers = container_names(&created);
            let injected = created
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("kruise.io/sidecarset-injected-list"))
                .cloned()
                .unwrap_or_default();
            if containers != ["logtail", "nginx"] || injected != set_name {
                missed.push(format!(
                    "{pod_name}: containers {containers:?}, injected by {injected:?}"
                ));
            }
            // The next repetition's SidecarSet is the only one: this one goes first, and the
            // next Pod must not be injected by it either.
            delete_and_wait_gone(&sidecarsets, &set_name).await?;
        }
        let bursts = starver.bursts();
        drop(starved);
        eprintln!(
            "{REPETITIONS} SidecarSet + Pod pairs back to back, manager stopped {PAUSED:?} of every \
             {:?} ({bursts} stops in all); Pod create took {took:?}; missed: {missed:?}\n{}",
            PAUSED + RUNNING,
            freshness_metrics(metrics_port).await
        );
        ensure!(
            missed.is_empty(),
            "{} of {REPETITIONS} Pods created right after their SidecarSet were not injected by it: {missed:?}",
            missed.len()
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_budget_created_just_before_an_eviction_refuses_it_while_the_manager_is_starved()
-> anyhow::Result<()> {
    let (bed, starver, metrics_port) = bed()?;
    let ns = bed.namespace("ryw-pub").await?;
    ns.run(async {
        apply(&ns, &cloneset("web", 2, "nginx:alpine", json!({}))).await?;
        wait_converged(&ns, "web", 2, TIMEOUT).await?;
        let pods: Api<Pod> = ns.api();
        let budgets: Api<PodUnavailableBudget> = ns.api();
        let mut admitted = Vec::new();
        let mut took = Vec::new();
        let starved = starver.starve();
        for i in 0..REPETITIONS {
            let victim = active_pods(&pods, "app=web")
                .await?
                .iter()
                .map(name)
                .next()
                .context("no Pod of the CloneSet")?;
            let budget_name = format!("web-pub-{i}");
            let budget: PodUnavailableBudget = serde_json::from_value(json!({
                "apiVersion": "policy.kruise.io/v1alpha1", "kind": "PodUnavailableBudget",
                "metadata": {"name": budget_name},
                "spec": {
                    "targetRef": {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": "web"},
                    "maxUnavailable": 0,
                },
            }))?;
            budgets
                .create(&PostParams::default(), &budget)
                .await
                .with_context(|| format!("creating {budget_name}"))?;
            // `kubectl drain` right after `kubectl apply` of the budget.
            let began = Instant::now();
            let evicted = pods.evict(&victim, &EvictParams::default()).await;
            took.push(began.elapsed());
            match evicted {
                Ok(_) => admitted.push(format!("{victim} evicted past {budget_name}")),
                Err(error) => {
                    let message = error.to_string();
                    ensure!(
                        message.contains(REFUSAL) && message.contains(&budget_name),
                        "the eviction of {victim} failed otherwise: {message}"
                    );
                }
            }
            delete_and_wait_gone(&budgets, &budget_name).await?;
            if !admitted.is_empty() {
                // A Pod went: let the CloneSet replace it before the next repetition.
                wait_converged(&ns, "web", 2, TIMEOUT).await?;
            }
        }
        let bursts = starver.bursts();
        drop(starved);
        eprintln!(
            "{REPETITIONS} budgets each followed at once by an eviction, manager stopped {PAUSED:?} \
             of every {:?} ({bursts} stops in all); eviction took {took:?}; admitted: {admitted:?}\n{}",
            PAUSED + RUNNING,
            freshness_metrics(metrics_port).await
        );
        ensure!(
            admitted.is_empty(),
            "{} of {REPETITIONS} evictions right after a budget were admitted past it: {admitted:?}",
            admitted.len()
        );
        Ok(())
    })
    .await
}
