//! Leader election between two kruise-manager replicas: only one leads (holds the Lease, reports
//! `kruise_manager_leader 1` and runs controllers); when it is killed, the other takes over within the
//! lease duration. (Own test binary: the managers here own the webhook configurations of this cluster.)

use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use kruise_testkit::manager::{self, ManagerOptions, ManagerPorts, http_get};
use kruise_testkit::{eventually, testbed};
use kube::api::Api;

const LEASE_SECONDS: u64 = 6;

async fn leads(ports: &ManagerPorts) -> anyhow::Result<bool> {
    let (_, body) = http_get(ports.metrics, "/metrics").await?;
    Ok(body.lines().any(|l| l == "kruise_manager_leader 1"))
}

#[tokio::test]
async fn only_the_leader_leads_and_a_standby_takes_over() -> anyhow::Result<()> {
    let bed = testbed();
    let ns = bed.namespace("leader").await?;
    ns.run(async {
        manager::ensure_namespace(&bed.plane).await?;
        let options = |name: &str| ManagerOptions {
            name: name.into(),
            leader_election_id: "kruise-manager-e2e".into(),
            lease_seconds: LEASE_SECONDS,
            extra_args: Vec::new(),
            ..Default::default()
        };
        let a = manager::spawn(&bed.plane, &options("manager-a"))?;
        manager::wait_serving(&bed.plane, &a, Duration::from_secs(90)).await?;
        let b = manager::spawn(&bed.plane, &options("manager-b"))?;
        eventually("manager-b ready", Duration::from_secs(60), || async {
            Ok((http_get(b.health, "/readyz")
                .await
                .ok()
                .map(|(code, _)| code)
                == Some(200))
            .then_some(()))
        })
        .await?;

        let leases: Api<Lease> = Api::namespaced(ns.client.clone(), manager::NAMESPACE);
        let holder = || async {
            let lease = leases.get("kruise-manager-e2e").await?;
            Ok::<_, anyhow::Error>(
                lease
                    .spec
                    .and_then(|s| s.holder_identity)
                    .unwrap_or_default(),
            )
        };
        ensure!(
            holder().await? == "manager-a",
            "the first manager holds the lease"
        );
        ensure!(leads(&a).await?, "manager-a reports leadership");
        ensure!(
            !leads(&b).await?,
            "manager-b must not lead while manager-a does"
        );

        // Kill the leader without a chance to release its lease.
        let killed = Instant::now();
        bed.plane.stop_process("manager-a", true);
        eventually(
            "manager-b takes over",
            Duration::from_secs(LEASE_SECONDS * 4),
            || async { Ok((holder().await? == "manager-b" && leads(&b).await?).then_some(())) },
        )
        .await
        .context("failover")?;
        let takeover = killed.elapsed();
        println!(
            "leader failover after SIGKILL: {:.1} s (lease duration {LEASE_SECONDS} s)",
            takeover.as_secs_f64()
        );
        ensure!(
            takeover < Duration::from_secs(LEASE_SECONDS * 2 + 2),
            "takeover took {takeover:?}, more than the lease duration plus a retry"
        );
        // The new leader points the webhooks at itself: admission works through it.
        manager::wait_serving(&bed.plane, &b, Duration::from_secs(60)).await?;
        Ok(())
    })
    .await
}
