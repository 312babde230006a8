//! A CloneSet rollout survives its manager being killed (SIGKILL) mid-update: a new manager takes the
//! lease, picks the rollout up where it stood and finishes it without breaking an invariant or updating a
//! Pod twice. (Own test binary: it runs and kills its own managers, which own the webhook configurations
//! of this cluster.)

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kruise_e2e::cloneset_kit::*;
use kruise_e2e::is_ready;
use kruise_testkit::manager::{self, ManagerOptions};
use kruise_testkit::{Limits, RolloutMonitor, testbed};
use kube::api::Api;
use serde_json::json;

const LEASE_SECONDS: u64 = 4;

fn options(name: &str) -> ManagerOptions {
    ManagerOptions {
        name: name.into(),
        leader_election_id: "kruise-manager-failover".into(),
        lease_seconds: LEASE_SECONDS,
        extra_args: Vec::new(),
        ..Default::default()
    }
}

#[tokio::test]
async fn manager_killed_mid_rollout() -> anyhow::Result<()> {
    let bed = testbed();
    let ns = bed.namespace("cs-failover").await?;
    ns.run(async {
        manager::ensure_namespace(&bed.plane).await?;
        let first = manager::spawn(&bed.plane, &options("manager-a"))?;
        manager::wait_serving(&bed.plane, &first, Duration::from_secs(90)).await?;

        let spec = json!({"updateStrategy": {"rollingUpdate": {
            "podUpdatePolicy": "InPlaceIfPossible",
            "maxUnavailable": 1,
            "inPlaceUpdateStrategy": {"gracePeriodSeconds": 2}
        }}});
        apply(&ns, &cloneset("failover", 6, "nginx:alpine", spec)).await?;
        let (_, before) = wait_converged(&ns, "failover", 6, Duration::from_secs(60)).await?;
        let limits = Limits {
            replicas: 6,
            max_unavailable: 1,
            max_surge: 0,
            min_old_revision_pods: None,
        };
        let monitor =
            RolloutMonitor::start(ns.client.clone(), &ns.name, "app=failover", limits).await?;
        set_image(&ns, "failover", "nginx:1.19.1").await?;

        // Mid-update: one Pod done and the next one taken out of service.
        let pod_api: Api<Pod> = ns.api();
        let rev1 = revision(&before[0]).unwrap_or_default().to_string();
        monitor
            .until(
                "one Pod updated and another being updated",
                Duration::from_secs(60),
                || async {
                    let pods = active_pods(&pod_api, "app=failover").await?;
                    let updated = pods
                        .iter()
                        .filter(|p| {
                            revision(p).is_some_and(|r| !same_revision(r, &rev1)) && is_ready(p)
                        })
                        .count();
                    let in_flight = pods.iter().filter(|p| !is_ready(p)).count();
                    Ok(updated >= 1 && in_flight == 1)
                },
            )
            .await?;
        let snapshot = active_pods(&pod_api, "app=failover").await?;
        eprintln!("killing manager-a at: {}", describe(&snapshot));
        bed.plane.stop_process("manager-a", true);

        let second = manager::spawn(&bed.plane, &options("manager-b"))?;
        manager::wait_serving(&bed.plane, &second, Duration::from_secs(90)).await?;
        let (_, after) =
            monitor_converged(&monitor, &ns, "failover", 6, Duration::from_secs(90)).await?;
        let stats = monitor.finish().await?;
        eprintln!("failover rollout: {stats:?}");
        updated_once_in_place(&before, &after, "nginx:1.19.1")?;
        bed.plane.stop_process("manager-b", false);
        Ok(())
    })
    .await
}
