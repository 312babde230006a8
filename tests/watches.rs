//! The leader opens one watch stream per resource it needs, counted where it counts: at the
//! apiserver (`apiserver_longrunning_requests{verb="WATCH"}`), with every feature gate on as
//! upstream's e2e runs them. The cluster's own components' watches are measured before the manager
//! starts and subtracted. (Own test binary: no other manager may watch this cluster.)

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::coordination::v1::Lease;
use kruise_testkit::manager::{self, ManagerOptions};
use kruise_testkit::{eventually, testbed};
use kube::api::Api;

/// Upstream CI's gates (docs/real-nodes.md): every alpha and beta gate, external certificates off.
const ALL_GATES: &str =
    "--feature-gates=AllAlpha=true,AllBeta=true,EnableExternalCerts=false,TemplateNoDefaults=false";

/// The resources kruise-rs's leader may watch with every gate on: one stream each.
const MOST_TYPES: usize = 29;

/// Watch streams open at the apiserver, by `group/resource`.
async fn watches(client: &kube::Client) -> anyhow::Result<BTreeMap<String, i64>> {
    let request = http::Request::get("/metrics")
        .body(Vec::new())
        .context("building the metrics request")?;
    let text = client
        .request_text(request)
        .await
        .context("reading the apiserver's metrics")?;
    let mut open = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_longrunning_requests{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{name}=\"")))
                .map(|v| v.trim_end_matches('"').to_owned())
                .unwrap_or_default()
        };
        if label("verb") != "WATCH" {
            continue;
        }
        let count = value.trim().parse::<f64>().unwrap_or_default() as i64;
        *open
            .entry(format!("{}/{}", label("group"), label("resource")))
            .or_default() += count;
    }
    Ok(open)
}

/// The same reading twice, `apart`: the count has settled.
async fn settled(client: &kube::Client, apart: Duration) -> anyhow::Result<BTreeMap<String, i64>> {
    let mut last = watches(client).await?;
    loop {
        tokio::time::sleep(apart).await;
        let now = watches(client).await?;
        if now == last {
            return Ok(now);
        }
        last = now;
    }
}

#[tokio::test]
async fn the_leader_opens_one_watch_per_resource_with_every_gate_on() -> anyhow::Result<()> {
    let bed = testbed();
    manager::ensure_namespace(&bed.plane).await?;
    let client = bed.plane.client().await?;
    let before = tokio::time::timeout(
        Duration::from_secs(60),
        settled(&client, Duration::from_secs(3)),
    )
    .await
    .context("the cluster's own watches never settled")??;

    let options = ManagerOptions {
        name: "manager-watches".into(),
        leader_election_id: "kruise-manager-watches".into(),
        extra_args: vec![ALL_GATES.into()],
        ..Default::default()
    };
    let ports = manager::spawn(&bed.plane, &options)?;
    manager::wait_serving(&bed.plane, &ports, Duration::from_secs(90)).await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), manager::NAMESPACE);
    eventually("the manager leads", Duration::from_secs(60), || async {
        let lease = leases.get_opt("kruise-manager-watches").await?;
        Ok(lease
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .filter(|h| h == "manager-watches")
            .map(|_| ()))
    })
    .await?;

    // Every controller opens its caches when it starts; wait until the count stops moving.
    let after = eventually(
        "the manager's watches settle",
        Duration::from_secs(90),
        || async {
            let now = settled(&client, Duration::from_secs(5)).await?;
            let opened: usize = now
                .iter()
                .filter(|(r, n)| **n > before.get(*r).copied().unwrap_or(0))
                .count();
            Ok((opened >= 20).then_some(now))
        },
    )
    .await?;

    let mut by_manager = BTreeMap::new();
    for (resource, count) in &after {
        let opened = count - before.get(resource).copied().unwrap_or(0);
        if opened > 0 {
            by_manager.insert(resource.clone(), opened);
        }
    }
    println!("watch streams the manager opened, by group/resource:");
    for (resource, count) in &by_manager {
        println!("  {resource:50} {count}");
    }
    println!("  {} resources", by_manager.len());
    let doubled: Vec<_> = by_manager.iter().filter(|(_, n)| **n > 1).collect();
    anyhow::ensure!(
        doubled.is_empty(),
        "resources watched more than once: {doubled:?}"
    );
    anyhow::ensure!(
        by_manager.len() <= MOST_TYPES,
        "{} resources watched, at most {MOST_TYPES} expected: {:?}",
        by_manager.len(),
        by_manager.keys()
    );
    bed.plane.stop_process("manager-watches", true);
    Ok(())
}
