//! WorkloadSpread placement that does not finish within the Pod webhook's deadline is not dropped:
//! the Pod is admitted behind the scheduling gate `apps.kruise.io/workloadspread-placement`, and
//! the WorkloadSpread controller takes its slot, writes its subset's node affinity and metadata and
//! lifts the gate, so the Pods still end where the spread asks.
//!
//! The manager's connections to the apiserver deliver 1.5 s late (a [`LagProxy`]) while a CloneSet
//! (named Pods) and then a ReplicaSet (Pods with only a generateName at admission) scale up, with
//! the Pod webhook's deadline at 2 s (placement gets 70% of it): every slot write outlasts the
//! placement's deadline, and lands after it. A Pod without a name asked its slot under an id it
//! keeps behind the gate, so the controller places it in that slot instead of taking a second one:
//! the spread is exact for both.
//!
//! Own test binary: its manager reaches the apiserver through the lag proxy.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, ensure};
use k8s_openapi::api::core::v1::Pod;
use kruise_e2e::cloneset_kit::{active_pods, annotation, apply, cloneset, merge_patch};
use kruise_e2e::workloadspread_kit::{
    MATCHED, cloneset_spread, matched_subset, workload_spread, zone_subset,
};
use kruise_testkit::lag::LagProxy;
use kruise_testkit::manager::ManagerOptions;
use kruise_testkit::{TestNamespace, eventually, testbed};
use kube::api::{Api, ListParams};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(120);
const IMAGE: &str = "nginx:alpine";
const GATE: &str = "apps.kruise.io/workloadspread-placement";
const LAG: Duration = Duration::from_millis(1500);

fn gated(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| g.iter().any(|g| g.name == GATE))
}

/// The workloads scaled up under the lag: their Pods are named at admission, or not.
#[derive(Clone, Copy, Debug)]
enum Workload {
    CloneSet,
    ReplicaSet,
}

#[tokio::test]
async fn pods_placed_late_still_go_where_the_spread_asks() -> anyhow::Result<()> {
    let bed = testbed();
    let upstream = format!("127.0.0.1:{}", bed.plane.ports().apiserver).parse()?;
    let lag = LagProxy::start(upstream)?;
    let kubeconfig = bed.plane.dir().join("lagged.kubeconfig");
    std::fs::write(&kubeconfig, bed.plane.kubeconfig_as(0, &lag.server_url())?)
        .with_context(|| format!("writing {}", kubeconfig.display()))?;
    bed.manager_with(&ManagerOptions {
        extra_args: vec![
            "--webhook-read-your-writes=false".into(),
            "--pod-webhook-timeout-seconds=2".into(),
        ],
        kubeconfig: Some(kubeconfig),
        ..ManagerOptions::default()
    });
    for (workload, namespace) in [
        (Workload::CloneSet, "ws-gate"),
        (Workload::ReplicaSet, "ws-gate-rs"),
    ] {
        let ns = bed.namespace(namespace).await?;
        ns.run(async { placed_late(&ns, &lag, workload).await })
            .await
            .with_context(|| format!("{workload:?}"))?;
    }
    Ok(())
}

/// Scales `workload` (named `late`, spread 2 / 2 / rest) to 6 while the manager's connections lag,
/// then checks that every Pod ends placed, ungated, in its subset's zone, 2 / 2 / 2.
async fn placed_late(ns: &TestNamespace, lag: &LagProxy, workload: Workload) -> anyhow::Result<()> {
    let subsets = [
        zone_subset("zone-a", Some("2"), Some("subset")),
        zone_subset("zone-b", Some("2"), None),
        zone_subset("zone-c", None, None),
    ];
    let (resource, spread) = match workload {
        Workload::CloneSet => {
            apply(ns, &cloneset("late", 0, IMAGE, json!({}))).await?;
            ("cloneset", cloneset_spread("late", "late", &subsets))
        }
        // Its Pods name it as their owner (a Deployment's would be matched through their
        // ReplicaSet, a read that the lag makes outlast the deadline before any slot is asked).
        Workload::ReplicaSet => {
            let mut set = cloneset("late", 0, IMAGE, json!({}));
            set["apiVersion"] = json!("apps/v1");
            set["kind"] = json!("ReplicaSet");
            apply(ns, &set).await?;
            let spread = workload_spread("late", "apps/v1", "ReplicaSet", "late", &subsets);
            ("replicaset", spread)
        }
    };
    ns.apply(&spread).await?;
    let spreads: Api<kruise_api::workloadspread::WorkloadSpread> = ns.api();
    eventually("the WorkloadSpread has a status", TIMEOUT, || async {
        Ok(spreads.get("late").await?.status.map(|_| ()))
    })
    .await?;

    lag.set_lag(LAG);
    let scaled = merge_patch(ns, resource, "late", &json!({"spec": {"replicas": 6}})).await;
    let pods: Api<Pod> = ns.api();
    let seen_gated = eventually(
        "Pods admitted behind the placement gate",
        TIMEOUT,
        || async {
            let list = pods.list(&ListParams::default().labels("app=late")).await?;
            Ok(list
                .items
                .iter()
                .any(gated)
                .then_some(list.items.iter().filter(|p| gated(p)).count()))
        },
    )
    .await;
    lag.set_lag(Duration::ZERO);
    scaled?;
    let seen_gated = seen_gated?;

    let zones = kruise_e2e::node_zones(&ns.client).await?;
    let placed = eventually("6 Pods placed, ungated and running", TIMEOUT, || async {
        let list = active_pods(&pods, "app=late").await?;
        let done = list.len() == 6
            && list.iter().all(|p| {
                !gated(p)
                    && annotation(p, MATCHED).is_some()
                    && p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
            });
        Ok(done.then_some(list))
    })
    .await?;
    let mut per_subset: BTreeMap<String, usize> = BTreeMap::new();
    for pod in &placed {
        let subset = matched_subset(pod).context("matched annotation")?;
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        ensure!(
            zones.get(&node) == Some(&subset),
            "Pod {:?} of subset {subset} runs on {node} in {:?}",
            pod.metadata.name,
            zones.get(&node)
        );
        if subset == "zone-a" {
            ensure!(
                pod.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("subset"))
                    .map(String::as_str)
                    == Some("zone-a"),
                "the subset's patch labels the Pod"
            );
        }
        ensure!(
            !pod.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(GATE)),
            "the pending label is lifted with the gate"
        );
        *per_subset.entry(subset).or_default() += 1;
    }
    println!("{workload:?}: {seen_gated} Pods seen behind the gate; placed {per_subset:?}");
    ensure!(
        per_subset.get("zone-a") == Some(&2)
            && per_subset.get("zone-b") == Some(&2)
            && per_subset.get("zone-c") == Some(&2),
        "the spread asked 2 / 2 / rest: {per_subset:?}"
    );
    Ok(())
}
