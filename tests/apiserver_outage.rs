//! kube-apiserver down 30 s in the middle of a CloneSet in-place rollout: it is SIGKILLed, kept down
//! 30 s and started again with the same arguments and port. The manager either survives (back to
//! candidate, then leader again) or exits and is started again by the test kit's supervisor, as
//! `kruise-local` does; either way it holds the Lease again and the rollout finishes with no invariant
//! broken and every Pod updated exactly once. The test prints which of the two happened.
//!
//! Then etcd is SIGKILLed and started again on the same data: the apiserver is ready again and the
//! rolled-out state is intact.
//!
//! Own test binary: it takes its control plane's apiserver and etcd down.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::ensure;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kruise_e2e::cloneset_kit::{
    active_pods, apply, cloneset, describe, monitor_converged, revision, same_revision, set_image,
    updated_once_in_place, wait_converged,
};
use kruise_e2e::is_ready;
use kruise_testkit::manager::{self, ManagerOptions};
use kruise_testkit::{Limits, TestBed, eventually, testbed_with};
use kube::api::Api;
use serde_json::json;

const OUTAGE: Duration = Duration::from_secs(30);
const LEASE_ID: &str = "kruise-manager-outage";
const LEASE_SECONDS: u64 = 4;
const REPLICAS: i32 = 12;
const MAX_UNAVAILABLE: i32 = 2;
const NEW_IMAGE: &str = "nginx:1.19.1";
const TIMEOUT: Duration = Duration::from_secs(120);

/// kube-controller-manager's node-monitor grace period here: longer than the outage, as in a real
/// cluster (the default is 50 s). With the test bed's 20 s, the node lifecycle controller, seeing no
/// node heartbeat during the outage, marks every node NotReady and every Pod not Ready the moment the
/// apiserver is back: a real outage of the whole cluster, not a rollout fault.
const NODE_MONITOR_GRACE: Duration = Duration::from_secs(60);

fn bed() -> &'static TestBed {
    testbed_with(|options| options.node_monitor_grace = NODE_MONITOR_GRACE)
}

#[tokio::test]
async fn apiserver_down_30s_mid_rollout() -> anyhow::Result<()> {
    let began = Instant::now();
    let bed = bed();
    let manager = bed.manager_with(&ManagerOptions {
        name: "kruise-manager".into(),
        leader_election_id: LEASE_ID.into(),
        lease_seconds: LEASE_SECONDS,
        ..ManagerOptions::default()
    });
    let restarts = Arc::new(AtomicU32::new(0));
    let supervisor = tokio::spawn({
        let restarts = restarts.clone();
        async move { manager::supervise(&bed.plane, manager, &restarts).await }
    });
    let ns = bed.namespace("apiserver-outage").await?;
    let result = ns
        .run(async {
            // gracePeriodSeconds keeps each Pod out of service a while, so the rollout is still
            // under way when the apiserver goes down.
            let spec = json!({"updateStrategy": {"rollingUpdate": {
                "podUpdatePolicy": "InPlaceIfPossible",
                "maxUnavailable": MAX_UNAVAILABLE,
                "inPlaceUpdateStrategy": {"gracePeriodSeconds": 3}
            }}});
            apply(&ns, &cloneset("outage", REPLICAS, "nginx:alpine", spec)).await?;
            let (_, before) = wait_converged(&ns, "outage", REPLICAS, TIMEOUT).await?;
            let old_revision = revision(&before[0]).unwrap_or_default().to_string();
            let limits = Limits::replicas(REPLICAS).max_unavailable(MAX_UNAVAILABLE);
            let monitor = ns.rollout_monitor("app=outage", limits).await?;
            let pid_before = manager.pid(&bed.plane);
            let rollout_began = Instant::now();
            set_image(&ns, "outage", NEW_IMAGE).await?;

            let pod_api: Api<Pod> = ns.api();
            monitor
                .until(
                    "two Pods updated, the rollout under way",
                    TIMEOUT,
                    || async {
                        let pods = active_pods(&pod_api, "app=outage").await?;
                        let updated = pods
                            .iter()
                            .filter(|p| {
                                revision(p).is_some_and(|r| !same_revision(r, &old_revision))
                                    && is_ready(p)
                            })
                            .count();
                        Ok(updated >= 2)
                    },
                )
                .await?;
            let snapshot = active_pods(&pod_api, "app=outage").await?;
            println!("outage: killing kube-apiserver at: {}", describe(&snapshot));
            bed.plane.kill_process("kube-apiserver")?;
            let down_at = Instant::now();
            // The fault itself lasts a fixed time; no condition to wait for.
            tokio::time::sleep(OUTAGE).await;
            let alive_at_end_of_outage = manager.exited(&bed.plane)?.is_none();
            bed.plane
                .start_component("kube-apiserver", Duration::from_secs(90))
                .await?;
            let back = down_at.elapsed();
            println!(
                "outage: kube-apiserver down {:.1} s (ready again); manager process alive at the end of the \
                 outage: {alive_at_end_of_outage}",
                back.as_secs_f64()
            );
            let seen_before_restart = monitor.stats().events_seen;

            // The manager (the same process, or a restarted one) holds the Lease and renews it.
            let leases: Api<Lease> = Api::namespaced(ns.client.clone(), manager::NAMESPACE);
            let renewal = |lease: &Lease| {
                let spec = lease.spec.clone().unwrap_or_default();
                (
                    spec.holder_identity.unwrap_or_default(),
                    spec.renew_time.map(|t| format!("{:?}", t.0)),
                )
            };
            let first = renewal(&leases.get(LEASE_ID).await?);
            let reacquired_at = eventually(
                format!("{} holding and renewing Lease {LEASE_ID}", manager.name),
                TIMEOUT,
                || async {
                    let now = renewal(&leases.get(LEASE_ID).await?);
                    Ok((now.0 == manager.name && now.1 != first.1).then(|| down_at.elapsed()))
                },
            )
            .await?;
            manager::wait_serving(&bed.plane, &manager.ports, TIMEOUT).await?;
            let (_, after) =
                monitor_converged(&monitor, &ns, "outage", REPLICAS, TIMEOUT).await?;
            let took = rollout_began.elapsed();
            let stats = monitor.finish().await?;
            updated_once_in_place(&before, &after, NEW_IMAGE)?;
            // Pods were updated after the outage: the monitor saw (and checked) that.
            ensure!(
                stats.events_seen > seen_before_restart,
                "the rollout monitor saw nothing after the outage: {stats:?}"
            );

            let restarted = restarts.load(Ordering::SeqCst);
            let survived = restarted == 0 && manager.pid(&bed.plane) == pid_before;
            println!(
                "outage: manager process {}; Lease renewed again {:.1} s after the apiserver went down; \
                 rollout of {REPLICAS} Pods took {:.1} s including the {:.0} s outage; monitor: {stats:?}",
                if survived {
                    "stayed up".to_string()
                } else {
                    format!("exited and was started again by the supervisor ({restarted} restarts)")
                },
                reacquired_at.as_secs_f64(),
                took.as_secs_f64(),
                OUTAGE.as_secs_f64(),
            );

            // etcd too: SIGKILLed and started again on the same data directory and ports, the
            // apiserver ready again, the rolled-out state intact.
            let etcd_took = bed
                .plane
                .restart_component("etcd", Duration::from_secs(90))
                .await?;
            let (_, kept) = wait_converged(&ns, "outage", REPLICAS, TIMEOUT).await?;
            updated_once_in_place(&before, &kept, NEW_IMAGE)?;
            println!(
                "outage: etcd killed and restarted, apiserver ready again in {:.1} s; the CloneSet and its Pods \
                 unchanged",
                etcd_took.as_secs_f64()
            );
            Ok(())
        })
        .await;
    supervisor.abort();
    println!("outage: test took {:.1} s", began.elapsed().as_secs_f64());
    result
}
