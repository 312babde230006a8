//! WorkloadSpread placement that does not finish within the Pod webhook's deadline is not dropped:
//! the Pod is admitted behind the scheduling gate `apps.kruise.io/workloadspread-placement`, and
//! the WorkloadSpread controller takes its slot, writes its subset's node affinity and metadata and
//! lifts the gate, so the Pods still end where the spread asks.
//!
//! The manager's connections to the apiserver deliver 1.5 s late (a [`LagProxy`]) while a CloneSet
//! scales up, with the Pod webhook's deadline at 2 s (placement gets 60% of it): every slot write
//! outlasts the placement's deadline.
//!
//! Own test binary: its manager reaches the apiserver through the lag proxy.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, ensure};
use k8s_openapi::api::core::v1::Pod;
use kruise_e2e::cloneset_kit::{active_pods, annotation, apply, cloneset, merge_patch};
use kruise_e2e::workloadspread_kit::{MATCHED, cloneset_spread, matched_subset, zone_subset};
use kruise_testkit::lag::LagProxy;
use kruise_testkit::manager::ManagerOptions;
use kruise_testkit::{eventually, testbed};
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
    let ns = bed.namespace("ws-gate").await?;
    ns.run(async {
        apply(&ns, &cloneset("late", 0, IMAGE, json!({}))).await?;
        let subsets = [
            zone_subset("zone-a", Some("2"), Some("subset")),
            zone_subset("zone-b", Some("2"), None),
            zone_subset("zone-c", None, None),
        ];
        ns.apply(&cloneset_spread("late", "late", &subsets)).await?;
        let spreads: Api<kruise_api::workloadspread::WorkloadSpread> = ns.api();
        eventually("the WorkloadSpread has a status", TIMEOUT, || async {
            Ok(spreads.get("late").await?.status.map(|_| ()))
        })
        .await?;

        lag.set_lag(LAG);
        let scaled = merge_patch(&ns, "cloneset", "late", &json!({"spec": {"replicas": 6}})).await;
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
        println!("{seen_gated} Pods seen behind the gate; placed {per_subset:?}");
        ensure!(
            per_subset.get("zone-a") == Some(&2)
                && per_subset.get("zone-b") == Some(&2)
                && per_subset.get("zone-c") == Some(&2),
            "the spread asked 2 / 2 / rest: {per_subset:?}"
        );
        Ok(())
    })
    .await
}
