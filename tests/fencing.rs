//! Leadership is fenced: once a standby has acquired the lease, the replica that led before makes no
//! write, whether it was frozen (SIGSTOP past the lease, then resumed) or cut off from the apiserver
//! without a reset (a black-holed connection, healed later). Every write of every replica is read from
//! the apiserver's audit log, where each replica has its own identity (`manager-N`).
//!
//! Own test binary: it runs its own managers, which own this cluster's webhook configurations. The two
//! scenarios run one after the other in one test, because every leader points the webhooks at itself.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kruise_e2e::cloneset_kit::{apply, cloneset};
use kruise_e2e::{AuditedWrite, audited_writes};
use kruise_testkit::blackhole::BlackHoleProxy;
use kruise_testkit::manager::{self, ManagerOptions, ManagerPorts, http_get};
use kruise_testkit::{TestNamespace, eventually, testbed};
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::json;

const LEASE_ID: &str = "kruise-manager-fencing";
const LEASE_SECONDS: u64 = 6;

struct Replica {
    /// Process name, and identity in the Lease.
    name: String,
    /// The apiserver user it writes as (audit log).
    user: String,
    ports: ManagerPorts,
}

fn spawn_replica(ns: &TestNamespace, index: usize, server: &str) -> anyhow::Result<Replica> {
    let bed = testbed();
    let name = format!("fencing-{index}");
    let kubeconfig = bed.plane.dir().join(format!("{name}.kubeconfig"));
    std::fs::write(&kubeconfig, bed.plane.kubeconfig_as(index, server)?)
        .with_context(|| format!("writing {}", kubeconfig.display()))?;
    let ports = manager::spawn(
        &bed.plane,
        &ManagerOptions {
            name: name.clone(),
            leader_election_id: LEASE_ID.into(),
            lease_seconds: LEASE_SECONDS,
            kubeconfig: Some(kubeconfig),
            ..Default::default()
        },
    )?;
    let _ = ns;
    Ok(Replica {
        name,
        user: format!("manager-{index}"),
        ports,
    })
}

async fn leads(replica: &Replica) -> bool {
    match http_get(replica.ports.metrics, "/metrics").await {
        Ok((_, body)) => body.lines().any(|l| l == "kruise_manager_leader 1"),
        Err(_) => false,
    }
}

fn pid(name: &str) -> anyhow::Result<u32> {
    testbed()
        .plane
        .pids()
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, pid)| pid)
        .with_context(|| format!("no process {name}"))
}

/// The Lease's holder and the time it was acquired (the holder's clock: this machine's).
async fn holder(ns: &TestNamespace) -> anyhow::Result<(String, Option<jiff::Timestamp>)> {
    let leases: Api<Lease> = Api::namespaced(ns.client.clone(), manager::NAMESPACE);
    let spec = leases.get(LEASE_ID).await?.spec.unwrap_or_default();
    Ok((
        spec.holder_identity.unwrap_or_default(),
        spec.acquire_time.map(|t| t.0),
    ))
}

async fn wait_holder(
    ns: &TestNamespace,
    replica: &Replica,
    timeout: Duration,
) -> anyhow::Result<jiff::Timestamp> {
    eventually(
        &format!("{} holds the lease and leads", replica.name),
        timeout,
        || async {
            let (name, acquired) = holder(ns).await?;
            Ok((name == replica.name && leads(replica).await)
                .then_some(acquired)
                .flatten())
        },
    )
    .await
}

/// Writes of `user` (other than to Leases) the apiserver received at or after `since`.
fn writes_since(user: &str, since: jiff::Timestamp) -> anyhow::Result<Vec<String>> {
    Ok(audited_writes(user, since)?
        .into_iter()
        .map(|w| w.line)
        .collect())
}

/// The writes of `user` received at or after `since` that took effect (2xx), and those the apiserver
/// refused. A request the old leader sent *before* it stepped down can reach the apiserver after the
/// partition heals, as unacknowledged TCP segments do; the step-down closed its connection meanwhile,
/// so the apiserver cancels it (504) — it must never succeed.
fn effective_and_refused(
    user: &str,
    since: jiff::Timestamp,
) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let (effective, refused): (Vec<_>, Vec<_>) = audited_writes(user, since)?
        .into_iter()
        .partition(AuditedWrite::took_effect);
    Ok((
        effective.into_iter().map(|w| w.line).collect(),
        refused.into_iter().map(|w| w.line).collect(),
    ))
}

fn count_writes(user: &str) -> anyhow::Result<usize> {
    writes_since(user, jiff::Timestamp::UNIX_EPOCH).map(|w| w.len())
}

/// Keeps the leader busy: deletes a Pod of the CloneSet every 700 ms, so that it creates Pods all
/// the time. Stops when `stop` is set.
fn churn(ns: &TestNamespace, selector: &'static str, stop: Arc<AtomicBool>) {
    let pods: Api<Pod> = ns.api();
    tokio::spawn(async move {
        while !stop.load(Ordering::SeqCst) {
            if let Ok(list) = pods.list(&ListParams::default().labels(selector)).await
                && let Some(pod) = list
                    .items
                    .iter()
                    .find(|p| p.metadata.deletion_timestamp.is_none())
                && let Some(name) = &pod.metadata.name
            {
                let _ = pods.delete(name, &DeleteParams::default()).await;
            }
            tokio::time::sleep(Duration::from_millis(700)).await;
        }
    });
}

/// Samples both replicas' leader gauge every 100 ms; returns the longest time both said they led.
fn watch_overlap(
    a: ManagerPorts,
    b: ManagerPorts,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Duration> {
    tokio::spawn(async move {
        let leads = |ports: ManagerPorts| async move {
            match http_get(ports.metrics, "/metrics").await {
                Ok((_, body)) => body.lines().any(|l| l == "kruise_manager_leader 1"),
                Err(_) => false,
            }
        };
        let (mut longest, mut since) = (Duration::ZERO, None::<Instant>);
        while !stop.load(Ordering::SeqCst) {
            let both = leads(a.clone()).await && leads(b.clone()).await;
            match (both, since) {
                (true, None) => since = Some(Instant::now()),
                (true, Some(start)) => longest = longest.max(start.elapsed()),
                (false, _) => since = None,
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        longest
    })
}

#[tokio::test]
async fn a_replaced_leader_writes_nothing() -> anyhow::Result<()> {
    let bed = testbed();
    let ns = bed.namespace("fencing").await?;
    ns.run(async {
        manager::ensure_namespace(&bed.plane).await?;
        let direct = bed.plane.server_url();
        let mut figures = BTreeMap::new();

        // ---- Scenario 1: the leader is frozen past its lease, then resumed.
        let a = spawn_replica(&ns, 0, &direct)?;
        manager::wait_serving(&bed.plane, &a.ports, Duration::from_secs(90)).await?;
        wait_holder(&ns, &a, Duration::from_secs(60)).await?;
        let b = spawn_replica(&ns, 1, &direct)?;
        apply(&ns, &cloneset("fenced", 4, "nginx:alpine", json!({}))).await?;
        let stop = Arc::new(AtomicBool::new(false));
        churn(&ns, "app=fenced", stop.clone());
        eventually("manager-0 writing Pods", Duration::from_secs(60), || async {
            Ok((count_writes(&a.user)? >= 3).then_some(()))
        })
        .await?;

        testkit_signal(&a.name, libc::SIGSTOP)?;
        let acquired = wait_holder(&ns, &b, Duration::from_secs(60)).await?;
        eventually("manager-1 writing Pods", Duration::from_secs(60), || async {
            Ok((!writes_since(&b.user, acquired)?.is_empty()).then_some(()))
        })
        .await?;
        testkit_signal(&a.name, libc::SIGCONT)?;
        // The resumed replica must notice at once that its time is up, and write nothing.
        eventually("manager-0 no longer leads", Duration::from_secs(30), || async {
            Ok((!leads(&a).await).then_some(()))
        })
        .await?;
        // Give any write it still had queued the time to reach the apiserver.
        let b_writes = writes_since(&b.user, acquired)?.len();
        eventually("manager-1 keeps writing", Duration::from_secs(30), || async {
            Ok((writes_since(&b.user, acquired)?.len() >= b_writes + 3).then_some(()))
        })
        .await?;
        let (stale, refused) = effective_and_refused(&a.user, acquired)?;
        println!("frozen leader: requests refused after the new leader acquired: {refused:?}");
        ensure!(
            stale.is_empty(),
            "after manager-1 acquired the lease at {acquired}, the frozen manager-0 wrote:\n{}",
            stale.join("\n")
        );
        bed.plane.stop_process(&a.name, true);

        // ---- Scenario 2: the leader's apiserver connection is black-holed, later healed.
        let proxy = BlackHoleProxy::start(
            format!("127.0.0.1:{}", bed.plane.ports().apiserver).parse()?,
        )
        .await?;
        let c = spawn_replica(&ns, 2, &proxy.server_url())?;
        eventually("manager-2 ready", Duration::from_secs(90), || async {
            Ok((http_get(c.ports.health, "/readyz").await.ok().map(|(code, _)| code) == Some(200))
                .then_some(()))
        })
        .await?;
        bed.plane.stop_process(&b.name, true);
        let c_acquired = wait_holder(&ns, &c, Duration::from_secs(60)).await?;
        eventually("manager-2 writing Pods", Duration::from_secs(60), || async {
            Ok((writes_since(&c.user, c_acquired)?.len() >= 3).then_some(()))
        })
        .await?;
        let d = spawn_replica(&ns, 3, &direct)?;
        eventually("manager-3 ready", Duration::from_secs(90), || async {
            Ok((http_get(d.ports.health, "/readyz").await.ok().map(|(code, _)| code) == Some(200))
                .then_some(()))
        })
        .await?;
        let overlap_stop = Arc::new(AtomicBool::new(false));
        let overlap = watch_overlap(c.ports.clone(), d.ports.clone(), overlap_stop.clone());

        let cut = Instant::now();
        proxy.black_hole();
        let c_metrics = c.ports.clone();
        let stepped_down = tokio::spawn(async move {
            let old = Replica {
                name: String::new(),
                user: String::new(),
                ports: c_metrics,
            };
            while leads(&old).await && cut.elapsed() < Duration::from_secs(60) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            cut.elapsed()
        });
        let d_acquired = wait_holder(&ns, &d, Duration::from_secs(60)).await?;
        figures.insert("black hole → new leader", cut.elapsed());
        figures.insert("black hole → old leader steps down", stepped_down.await?);
        eventually("manager-3 writing Pods", Duration::from_secs(60), || async {
            Ok((writes_since(&d.user, d_acquired)?.len() >= 3).then_some(()))
        })
        .await?;
        proxy.heal();
        // After healing, the old leader runs for the lease again and finds it taken; whatever it had in
        // flight reaches the apiserver now. Wait until the new leader has made more writes since.
        let d_writes = writes_since(&d.user, d_acquired)?.len();
        eventually("manager-3 keeps writing after the heal", Duration::from_secs(30), || async {
            Ok((writes_since(&d.user, d_acquired)?.len() >= d_writes + 5).then_some(()))
        })
        .await?;
        overlap_stop.store(true, Ordering::SeqCst);
        stop.store(true, Ordering::SeqCst);
        let both_led = overlap.await?;
        figures.insert("longest time both replicas reported leading", both_led);
        let (stale, refused) = effective_and_refused(&c.user, d_acquired)?;
        println!("black-holed leader: requests delivered after the heal and refused: {refused:?}");
        println!("fencing figures: {figures:#?}");
        ensure!(
            stale.is_empty(),
            "after manager-3 acquired the lease at {d_acquired}, the black-holed manager-2 wrote:\n{}",
            stale.join("\n")
        );
        ensure!(both_led.is_zero(), "both replicas reported leading for {both_led:?}");
        bed.plane.stop_process(&c.name, true);
        bed.plane.stop_process(&d.name, true);
        Ok(())
    })
    .await
}

fn testkit_signal(name: &str, signal: libc::c_int) -> anyhow::Result<()> {
    kruise_testkit::process::signal(pid(name)?, signal);
    Ok(())
}
