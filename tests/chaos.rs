//! Rollouts while the manager is SIGKILLed every 2–5 s (random, seeded and printed; replay a run with
//! `KRUISE_CHAOS_SEED=<seed>`) and started again at once with the same arguments: a CloneSet in-place
//! rollout and a SidecarSet in-place sidecar upgrade finish under the RolloutMonitor (never more than
//! maxUnavailable Pods unavailable) with every Pod updated exactly once, in place.
//!
//! The two tests run concurrently, each in its own namespace, and share this binary's manager and its
//! killer: each holds a calm guard while it creates its objects through the webhooks (and while the
//! CloneSet test measures its baseline rollout without kills), and a kill guard during its rollout.
//! Own test binary: the killer kills the binary's only manager.

use std::ops::RangeInclusive;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use k8s_openapi::api::core::v1::Pod;
use kruise_api::sidecarset::v1beta1::SidecarSet;
use kruise_e2e::cloneset_kit::{
    apply, cloneset, monitor_converged, set_image as set_cloneset_image, status,
    updated_once_in_place, wait_converged,
};
use kruise_e2e::same_image;
use kruise_e2e::sidecarset_kit::{
    LOGTAIL, apply_logtail, counts, restarts, set_image, test_pod, wait_status,
};
use kruise_e2e::{Cleanup, container_status};
use kruise_testkit::chaos::{ManagerKiller, seed_from_env};
use kruise_testkit::manager::ManagerOptions;
use kruise_testkit::{Limits, TestNamespace, eventually, testbed};
use kube::api::{Api, ListParams};
use serde_json::json;

/// Time between kills.
const KILL_EVERY: RangeInclusive<Duration> = Duration::from_secs(2)..=Duration::from_secs(5);
/// Short, as in a failover test; a manager restarted under its own identity renews its Lease at once.
const LEASE_SECONDS: u64 = 4;
const REPLICAS: i32 = 20;
const TIMEOUT: Duration = Duration::from_secs(120);

/// Every (re)started container takes this long to become ready (kubelet-sim steering), so that a
/// rollout lasts long enough for several kills.
const READY_DELAY: (&str, &str) = ("sim.kruise-rs.io/ready-delay-ms", "2000");

/// The manager of this binary and its killer, started on first use.
fn killer() -> &'static ManagerKiller {
    static KILLER: OnceLock<Result<ManagerKiller, String>> = OnceLock::new();
    let killer = KILLER.get_or_init(|| {
        let bed = testbed();
        let manager = bed.manager_with(&ManagerOptions {
            name: "chaos-manager".into(),
            leader_election_id: "kruise-manager-chaos".into(),
            lease_seconds: LEASE_SECONDS,
            ..ManagerOptions::default()
        });
        let start = || {
            let seed = seed_from_env()?;
            println!(
                "chaos: the manager is SIGKILLed every {:?}–{:?} (random), seed {seed} \
                 (replay with KRUISE_CHAOS_SEED={seed})",
                KILL_EVERY.start(),
                KILL_EVERY.end()
            );
            ManagerKiller::start(&bed.plane, manager.clone(), KILL_EVERY, seed)
        };
        start().map_err(|error| format!("{error:#}"))
    });
    match killer {
        Ok(killer) => killer,
        Err(error) => panic!("the manager killer could not start: {error}"),
    }
}

/// Retries a change until the apiserver admits it: its webhooks fail while the manager is down.
async fn admitted<F, Fut, T>(what: &str, mut change: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<T>>,
{
    eventually(what, Duration::from_secs(60), || {
        let fut = change();
        async move { fut.await.map(Some) }
    })
    .await
}

/// What one rollout took.
struct Rollout {
    took: Duration,
    kills: u64,
}

impl Rollout {
    fn line(&self) -> String {
        format!(
            "{:.1} s, {} kills (one every {})",
            self.took.as_secs_f64(),
            self.kills,
            if self.kills == 0 {
                "-".to_string()
            } else {
                format!("{:.1} s", self.took.as_secs_f64() / self.kills as f64)
            }
        )
    }
}

const CLONESET_OLD: &str = "nginx:alpine";
const CLONESET_NEW: &str = "nginx:1.19.1";
const CLONESET_MAX_UNAVAILABLE: i32 = 3;

/// Rolls CloneSet `name` (converged on [`CLONESET_OLD`]) out to [`CLONESET_NEW`] under the rollout
/// monitor and checks that every Pod was updated exactly once, in place.
async fn cloneset_rollout(
    ns: &TestNamespace,
    name: &str,
    killer: &ManagerKiller,
) -> anyhow::Result<Rollout> {
    let (_, before) = wait_converged(ns, name, REPLICAS, TIMEOUT).await?;
    let limits = Limits::replicas(REPLICAS).max_unavailable(CLONESET_MAX_UNAVAILABLE);
    let monitor = ns.rollout_monitor(&format!("app={name}"), limits).await?;
    let kills = killer.kill_count();
    let began = Instant::now();
    admitted(&format!("the image change of CloneSet {name}"), || {
        set_cloneset_image(ns, name, CLONESET_NEW)
    })
    .await?;
    let (cs, after) = monitor_converged(&monitor, ns, name, REPLICAS, TIMEOUT).await?;
    let rollout = Rollout {
        took: began.elapsed(),
        kills: killer.kill_count() - kills,
    };
    let stats = monitor.finish().await?;
    println!("chaos: CloneSet {name} monitor: {stats:?}");
    updated_once_in_place(&before, &after, CLONESET_NEW)?;
    ensure!(
        status(&cs).updated_ready_replicas == REPLICAS,
        "updatedReadyReplicas {} != {REPLICAS}",
        status(&cs).updated_ready_replicas
    );
    Ok(rollout)
}

#[tokio::test]
async fn cloneset_in_place_rollout_while_the_manager_is_killed() -> anyhow::Result<()> {
    let began = Instant::now();
    let bed = testbed();
    let killer = killer();
    let ns = bed.namespace("chaos-cs").await?;
    let result = ns
        .run(async {
            let calm = killer.calm();
            let spec = json!({
                "updateStrategy": {"rollingUpdate": {
                    "podUpdatePolicy": "InPlaceIfPossible",
                    "maxUnavailable": CLONESET_MAX_UNAVAILABLE,
                }},
                "template": {"metadata": {"annotations": {READY_DELAY.0: READY_DELAY.1}}},
            });
            // Two identical CloneSets: one rolled out without kills (the baseline), one with.
            for name in ["baseline", "chaos"] {
                apply(&ns, &cloneset(name, REPLICAS, CLONESET_OLD, spec.clone())).await?;
            }
            let baseline = cloneset_rollout(&ns, "baseline", killer).await?;
            ensure!(baseline.kills == 0, "the manager was killed during the baseline");
            drop(calm);

            let _kills = killer.kills();
            killer.wait_active(TIMEOUT).await?;
            let chaos = cloneset_rollout(&ns, "chaos", killer).await?;
            ensure!(
                chaos.kills >= 2,
                "the rollout finished before the first kill: {}",
                chaos.line()
            );
            println!(
                "chaos: CloneSet in-place rollout of {REPLICAS} Pods (maxUnavailable {CLONESET_MAX_UNAVAILABLE}): \
                 without kills {}; with kills {}; ratio {:.2}",
                baseline.line(),
                chaos.line(),
                chaos.took.as_secs_f64() / baseline.took.as_secs_f64()
            );
            Ok(())
        })
        .await;
    println!(
        "chaos: CloneSet test took {:.1} s",
        began.elapsed().as_secs_f64()
    );
    result
}

const SIDECAR_OLD: &str = "log-service/logtail:0.16.16";
const SIDECAR_NEW: &str = "log-service/logtail:0.16.18";
const SIDECAR_MAX_UNAVAILABLE: i32 = 3;

#[tokio::test]
async fn sidecarset_upgrade_while_the_manager_is_killed() -> anyhow::Result<()> {
    let began = Instant::now();
    let bed = testbed();
    let killer = killer();
    let ns = bed.namespace("chaos-ss").await?;
    let name = format!("logtail-{}", ns.name);
    let mut cleanup = Cleanup::new();
    cleanup.sidecarset(&name);
    let result = ns
        .run(async {
            let calm = killer.calm();
            let labels = json!({"app": "chaos-ss"});
            apply_logtail(
                &ns,
                &name,
                &labels,
                json!({"updateStrategy": {"maxUnavailable": SIDECAR_MAX_UNAVAILABLE}}),
            )
            .await?;
            let items: Vec<_> = (0..REPLICAS)
                .map(|i| {
                    let mut pod = test_pod(&format!("pod-{i:02}"), labels.clone());
                    pod["metadata"]["annotations"] = json!({READY_DELAY.0: READY_DELAY.1});
                    pod
                })
                .collect();
            ns.apply(&json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string())
                .await?;
            let sidecarsets: Api<SidecarSet> = Api::all(ns.client.clone());
            wait_status(
                &sidecarsets,
                &name,
                &format!("{REPLICAS} Pods injected and ready"),
                TIMEOUT,
                |s| counts(s) == (REPLICAS, REPLICAS, REPLICAS, REPLICAS),
            )
            .await?;
            let pods: Api<Pod> = ns.api();
            let selector = ListParams::default().labels("app=chaos-ss");
            let before = pods.list(&selector).await?.items;
            ensure!(before.len() == REPLICAS as usize, "{} Pods", before.len());
            for pod in &before {
                ensure!(
                    container_status(pod, LOGTAIL).is_some_and(|s| same_image(&s.image, SIDECAR_OLD)),
                    "{:?} runs no {SIDECAR_OLD}",
                    pod.metadata.name
                );
            }
            drop(calm);

            let _kills = killer.kills();
            killer.wait_active(TIMEOUT).await?;
            let limits = Limits::replicas(REPLICAS).max_unavailable(SIDECAR_MAX_UNAVAILABLE);
            let monitor = ns.rollout_monitor("app=chaos-ss", limits).await?;
            let kills = killer.kill_count();
            let rollout_began = Instant::now();
            admitted("the image change of the SidecarSet", || {
                set_image(&sidecarsets, &name, SIDECAR_NEW)
            })
            .await?;
            let after = monitor
                .eventually(
                    format!("every Pod running {SIDECAR_NEW} and the status counting them"),
                    TIMEOUT,
                    || async {
                        let list = pods.list(&selector).await?.items;
                        let upgraded = list.len() == REPLICAS as usize
                            && list.iter().all(|p| {
                                kruise_e2e::is_ready(p)
                                    && container_status(p, LOGTAIL)
                                        .is_some_and(|s| same_image(&s.image, SIDECAR_NEW))
                            });
                        let ss = sidecarsets.get(&name).await?;
                        let s = ss.status.clone().unwrap_or_default();
                        let counted = ss.metadata.generation == Some(s.observed_generation)
                            && counts(&s) == (REPLICAS, REPLICAS, REPLICAS, REPLICAS);
                        Ok((upgraded && counted).then_some(list))
                    },
                )
                .await?;
            let rollout = Rollout {
                took: rollout_began.elapsed(),
                kills: killer.kill_count() - kills,
            };
            let stats = monitor.finish().await?;
            println!("chaos: SidecarSet monitor: {stats:?}");
            let uids = |pods: &[Pod]| {
                pods.iter()
                    .map(|p| p.metadata.uid.clone().unwrap_or_default())
                    .collect::<std::collections::BTreeSet<_>>()
            };
            ensure!(uids(&before) == uids(&after), "Pods were recreated");
            for pod in &after {
                let pod_name = pod.metadata.name.as_deref().unwrap_or("?");
                ensure!(
                    restarts(pod, LOGTAIL) == 1 && restarts(pod, "nginx") == 0,
                    "{pod_name}: the sidecar must restart exactly once and the app never \
                     (logtail {}, nginx {})",
                    restarts(pod, LOGTAIL),
                    restarts(pod, "nginx")
                );
            }
            ensure!(
                rollout.kills >= 2,
                "the upgrade finished before the first kill: {}",
                rollout.line()
            );
            println!(
                "chaos: SidecarSet upgrade of {REPLICAS} Pods (maxUnavailable {SIDECAR_MAX_UNAVAILABLE}) with kills: {}",
                rollout.line()
            );
            sidecarsets
                .delete(&name, &Default::default())
                .await
                .context("deleting the SidecarSet")?;
            Ok(())
        })
        .await;
    println!(
        "chaos: SidecarSet test took {:.1} s",
        began.elapsed().as_secs_f64()
    );
    result
}
