//! Read-your-writes admission with the manager CPU-starved (issue 54): a Pod created the instant a
//! SidecarSet's create returned gets its sidecar, and an eviction asked the instant a
//! PodUnavailableBudget's create returned is refused by it — every time, while kruise-manager is
//! stopped (SIGSTOP) 200 ms out of every 300 ms.
//!
//! Seed 001's walkthrough, its two steps back to back: its SidecarSet (`examples/
//! sidecarset-logtail.yaml`, v1alpha1 as the article writes it) then its Pod
//! (`examples/sidecarset-test-pod.yaml`), no wait in between. Before the webhook checked its caches
//! against the apiserver, such a Pod came without the sidecar 4 times in 4 (watch events 0.35–1.48 s
//! late). Starving the manager alone does not make its watches lag reliably here, so during the
//! pairs its apiserver connections also deliver 250 ms late (a [`LagProxy`] in front of the
//! apiserver; the apiserver calls the webhook directly): without the check every such Pod misses
//! its sidecar.
//!
//! Own test binary: it starves its manager and slows its connections; its two tests run one at a
//! time. `KRUISE_E2E_READ_YOUR_WRITES=false` starts the manager with the check off
//! (`--webhook-read-your-writes=false`), to see the tests fail without it.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use k8s_openapi::api::core::v1::Pod;
use kruise_api::policy::v1alpha1::PodUnavailableBudget;
use kruise_e2e::cloneset_kit::{active_pods, apply, cloneset, name, wait_converged};
use kruise_e2e::sidecarset_kit::logtail;
use kruise_e2e::{Cleanup, container_names, example, wait_injected_on_dry_run};
use kruise_testkit::lag::LagProxy;
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
/// How late the manager's connections to the apiserver deliver during the seed's pairs.
const LAG: Duration = Duration::from_millis(250);
const REFUSAL: &str = "is forbidden: pub unavailable allowed is negative";

/// What the tests of this binary share: its test bed, its manager (which reaches the apiserver
/// through a [`LagProxy`]), the starver of that manager, and the manager's metrics port.
struct Bed {
    bed: &'static TestBed,
    starver: &'static Starver,
    lag: &'static LagProxy,
    metrics_port: u16,
}

/// The tests run one at a time: the seed's sets the lag of the shared manager.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn bed() -> anyhow::Result<Bed> {
    static STARVER: OnceLock<Starver> = OnceLock::new();
    static LAG_PROXY: OnceLock<LagProxy> = OnceLock::new();
    let bed = testbed();
    if LAG_PROXY.get().is_none() {
        let upstream = format!("127.0.0.1:{}", bed.plane.ports().apiserver).parse()?;
        let _ = LAG_PROXY.set(LagProxy::start(upstream)?);
    }
    let lag = LAG_PROXY.get().context("the lag proxy")?;
    let kubeconfig = bed.plane.dir().join("lagged.kubeconfig");
    if !kubeconfig.exists() {
        std::fs::write(&kubeconfig, bed.plane.kubeconfig_as(0, &lag.server_url())?)
            .with_context(|| format!("writing {}", kubeconfig.display()))?;
    }
    let check = std::env::var("KRUISE_E2E_READ_YOUR_WRITES").unwrap_or_else(|_| "true".into());
    let manager = bed.manager_with(&ManagerOptions {
        extra_args: vec![format!("--webhook-read-your-writes={check}")],
        kubeconfig: Some(kubeconfig),
        ..ManagerOptions::default()
    });
    let pid = manager
        .pid(&bed.plane)
        .context("the manager has no process")?;
    if STARVER.get().is_none() {
        let _ = STARVER.set(Starver::start(pid, PAUSED, RUNNING)?);
    }
    Ok(Bed {
        bed,
        starver: STARVER.get().context("the starver")?,
        lag,
        metrics_port: manager.ports.metrics,
    })
}

/// The lag of the manager's connections while held; none once dropped.
struct Lagging(&'static LagProxy);

impl Lagging {
    fn start(proxy: &'static LagProxy, lag: Duration) -> Self {
        proxy.set_lag(lag);
        Self(proxy)
    }
}

impl Drop for Lagging {
    fn drop(&mut self) {
        self.0.set_lag(Duration::ZERO);
    }
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

/// A budget that allows no disruption of CloneSet `web`'s Pods.
fn budget(name: &str) -> anyhow::Result<PodUnavailableBudget> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "policy.kruise.io/v1alpha1", "kind": "PodUnavailableBudget",
        "metadata": {"name": name},
        "spec": {
            "targetRef": {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": "web"},
            "maxUnavailable": 0,
        },
    }))?)
}

/// The name of a running Pod of CloneSet `web`, to evict.
async fn pod_to_evict(pods: &Api<Pod>) -> anyhow::Result<String> {
    active_pods(pods, "app=web")
        .await?
        .iter()
        .map(name)
        .next()
        .context("no Pod of the CloneSet")
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
    let _alone = ONE_AT_A_TIME.lock().await;
    let Bed {
        bed,
        starver,
        lag,
        metrics_port,
    } = bed()?;
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
        // Set-up, not the scenario: the apiserver calls the manager's Pod webhook (the leader has
        // patched its configuration in), as a dry run injected by a warm-up SidecarSet shows.
        let warm_up = format!("warm-up-{}", ns.name);
        cleanup.sidecarset(&warm_up);
        let set: DynamicObject = serde_json::from_value(logtail(&warm_up, &ns.name, json!({}))?)?;
        sidecarsets.create(&PostParams::default(), &set).await?;
        let pod = example("sidecarset-test-pod.yaml")?;
        wait_injected_on_dry_run(&ns.client, &ns.name, &pod, TIMEOUT, &["logtail", "nginx"])
            .await?;
        delete_and_wait_gone(&sidecarsets, &warm_up).await?;
        let mut missed = Vec::new();
        let mut took = Vec::new();
        let lagging = Lagging::start(lag, LAG);
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
            match sidecarsets.create(&PostParams::default(), &set).await {
                Ok(_) => {}
                // The conflict check read a cache still holding the previous SidecarSet (deleted
                // before): read-your-writes missed too.
                Err(error) if error.to_string().contains("already exist") => {
                    missed.push(format!("{set_name} refused: {error}"));
                    continue;
                }
                Err(error) => {
                    return Err(error).with_context(|| format!("creating SidecarSet {set_name}"));
                }
            }
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
        drop((starved, lagging));
        eprintln!(
            "{REPETITIONS} SidecarSet + Pod pairs back to back, manager stopped {PAUSED:?} of every \
             {:?} ({bursts} stops in all), its apiserver connections {LAG:?} late; Pod create took \
             {took:?}; missed: {missed:?}\n{}",
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
    let _alone = ONE_AT_A_TIME.lock().await;
    let Bed {
        bed,
        starver,
        metrics_port,
        ..
    } = bed()?;
    let ns = bed.namespace("ryw-pub").await?;
    ns.run(async {
        apply(&ns, &cloneset("web", 2, "nginx:alpine", json!({}))).await?;
        wait_converged(&ns, "web", 2, TIMEOUT).await?;
        let pods: Api<Pod> = ns.api();
        let budgets: Api<PodUnavailableBudget> = ns.api();
        // Set-up, not the scenario: the apiserver calls the manager's eviction webhook, as a dry
        // run refused by a warm-up budget shows.
        budgets
            .create(&PostParams::default(), &budget("warm-up")?)
            .await?;
        let victim = pod_to_evict(&pods).await?;
        let dry_run = EvictParams {
            delete_options: Some(DeleteParams {
                dry_run: true,
                ..DeleteParams::default()
            }),
            post_options: PostParams {
                dry_run: true,
                ..PostParams::default()
            },
        };
        eventually("a dry-run eviction refused by the warm-up budget", TIMEOUT, || async {
            Ok(pods
                .evict(&victim, &dry_run)
                .await
                .err()
                .filter(|e| e.to_string().contains(REFUSAL)))
        })
        .await?;
        delete_and_wait_gone(&budgets, "warm-up").await?;

        let mut admitted = Vec::new();
        let mut took = Vec::new();
        let starved = starver.starve();
        for i in 0..REPETITIONS {
            let victim = pod_to_evict(&pods).await?;
            let budget_name = format!("web-pub-{i}");
            budgets
                .create(&PostParams::default(), &budget(&budget_name)?)
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
