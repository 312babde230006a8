//! Two kruise-manager replicas serving the Pod webhooks together, as the chart's two replicas do
//! behind their Service: a balancer hands the apiserver's connections to each in turn (each
//! replica's HTTP/2 connections carry few requests at once, so a burst opens many). Both record
//! their decisions in the same objects' status, each over the resourceVersion it read, batched by
//! the group commit; neither may give away what the other gave.
//!
//! - 400 Pods created at once against a WorkloadSpread whose subsets hold 120 and 100: no subset
//!   gets more Pods than its `maxReplicas`, the rest go to the subset without a limit.
//! - 100 parallel evictions against a budget allowing 20: exactly 20 admitted.
//!
//! Its own test binary: its managers own the webhook configurations of its control plane.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use anyhow::ensure;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Pod;
use kruise_api::policy::v1alpha1::PodUnavailableBudget;
use kruise_e2e::cloneset_kit::{active_pods, apply, cloneset, merge_patch, name};
use kruise_e2e::workloadspread_kit::{cloneset_spread, matched_subset, zone_subset};
use kruise_testkit::balancer::Balancer;
use kruise_testkit::manager::{self, Manager, ManagerOptions, http_get};
use kruise_testkit::{eventually, testbed};
use kube::api::{Api, EvictParams, Patch, PatchParams};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(180);
const IMAGE: &str = "nginx:alpine";
const SERVING_GATE: &str = "e2e.kruise.io/serving";
/// The label of a Pod whose placement waits behind the WorkloadSpread placement gate.
const PENDING: &str = "apps.kruise.io/workloadspread-placement";

/// `/mutate-pod` requests a replica answered, from its metrics.
async fn mutate_pod_requests(metrics_port: u16) -> anyhow::Result<u64> {
    let (_, body) = http_get(metrics_port, "/metrics").await?;
    Ok(body
        .lines()
        .filter(|l| l.starts_with("kruise_webhook_requests_total{") && l.contains("/mutate-pod\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum())
}

#[tokio::test]
async fn two_replicas_never_place_or_evict_more_than_allowed() -> anyhow::Result<()> {
    let bed = testbed();
    let ns = bed.namespace("replicas").await?;
    manager::ensure_namespace(&bed.plane).await?;
    let balancer = Balancer::start()?;
    let options = |name: &str| ManagerOptions {
        name: name.into(),
        leader_election_id: "kruise-manager-replicas".into(),
        lease_seconds: 6,
        extra_args: vec![
            format!("--webhook-host=127.0.0.1:{}", balancer.port()),
            "--webhook-max-concurrent-streams=4".into(),
        ],
        kubeconfig: None,
    };
    // One at a time, so that the second finds the first's certificates.
    let a = Manager::spawn(&bed.plane, &options("manager-replica-a"))?;
    balancer.set_upstreams(vec![SocketAddr::from((
        Ipv4Addr::LOCALHOST,
        a.ports.webhook,
    ))]);
    let ready = |port: u16| async move {
        Ok::<_, anyhow::Error>(
            http_get(port, "/readyz").await.ok().map(|(code, _)| code) == Some(200),
        )
    };
    let configurations: Api<MutatingWebhookConfiguration> = Api::all(ns.client.clone());
    let balanced = format!("127.0.0.1:{}", balancer.port());
    eventually("replica a serves behind the balancer", TIMEOUT, || async {
        let wired = configurations
            .get_opt("kruise-mutating-webhook-configuration")
            .await?
            .and_then(|c| c.webhooks)
            .is_some_and(|hooks| {
                hooks.iter().all(|h| {
                    h.client_config
                        .url
                        .as_deref()
                        .is_some_and(|u| u.contains(&balanced))
                })
            });
        Ok((wired && ready(a.ports.health).await?).then_some(()))
    })
    .await?;
    let b = Manager::spawn(&bed.plane, &options("manager-replica-b"))?;
    eventually("replica b ready", TIMEOUT, || async {
        Ok(ready(b.ports.health).await?.then_some(()))
    })
    .await?;
    balancer.set_upstreams(vec![
        SocketAddr::from((Ipv4Addr::LOCALHOST, a.ports.webhook)),
        SocketAddr::from((Ipv4Addr::LOCALHOST, b.ports.webhook)),
    ]);

    ns.run(async {
        // --- WorkloadSpread: 400 Pods at once.
        apply(&ns, &cloneset("spread", 0, IMAGE, json!({}))).await?;
        let subsets = [
            zone_subset("zone-a", Some("120"), None),
            zone_subset("zone-b", Some("100"), None),
            zone_subset("zone-c", None, None),
        ];
        ns.apply(&cloneset_spread("spread", "spread", &subsets))
            .await?;
        let before = (
            mutate_pod_requests(a.ports.metrics).await?,
            mutate_pod_requests(b.ports.metrics).await?,
        );
        merge_patch(&ns, "cloneset", "spread", &json!({"spec": {"replicas": 400}})).await?;
        let pods: Api<Pod> = ns.api();
        // A placement that missed the webhook's deadline is finished by the controller behind the
        // placement gate: counted once it is.
        let placed = eventually("400 Pods created and placed", TIMEOUT, || async {
            let list = active_pods(&pods, "app=spread").await?;
            let deferred = list
                .iter()
                .any(|p| p.metadata.labels.as_ref().is_some_and(|l| l.contains_key(PENDING)));
            Ok((list.len() == 400 && !deferred).then_some(list))
        })
        .await?;
        let mut per_subset: BTreeMap<String, usize> = BTreeMap::new();
        for pod in &placed {
            let subset = matched_subset(pod).unwrap_or_else(|| "(unplaced)".into());
            *per_subset.entry(subset).or_default() += 1;
        }
        let after = (
            mutate_pod_requests(a.ports.metrics).await?,
            mutate_pod_requests(b.ports.metrics).await?,
        );
        let served = (after.0 - before.0, after.1 - before.1);
        println!(
            "400 creates: placed {per_subset:?}; /mutate-pod answered by replica a {}, b {}; balancer connections {:?}",
            served.0,
            served.1,
            balancer.connections()
        );
        ensure!(
            served.0 > 0 && served.1 > 0,
            "both replicas must answer the burst (a {}, b {})",
            served.0,
            served.1
        );
        let count = |subset: &str| per_subset.get(subset).copied().unwrap_or(0);
        ensure!(count("zone-a") <= 120, "zone-a over-placed: {per_subset:?}");
        ensure!(count("zone-b") <= 100, "zone-b over-placed: {per_subset:?}");
        ensure!(
            count("zone-a") + count("zone-b") + count("zone-c") == 400,
            "every Pod placed: {per_subset:?}"
        );
        merge_patch(&ns, "cloneset", "spread", &json!({"spec": {"replicas": 0}})).await?;
        eventually("the spread CloneSet scaled to 0", TIMEOUT, || async {
            Ok(active_pods(&pods, "app=spread")
                .await?
                .is_empty()
                .then_some(()))
        })
        .await?;

        // --- PodUnavailableBudget: 100 parallel evictions, 20 allowed. The Pods are Ready only
        // once the test says so (a readiness gate), so that the replacements of evicted Pods
        // stay unready and the budget allows exactly 20 however long the burst takes.
        let mut guarded = cloneset("guarded", 100, IMAGE, json!({}));
        guarded["spec"]["template"]["spec"]["readinessGates"] =
            json!([{"conditionType": SERVING_GATE}]);
        apply(&ns, &guarded).await?;
        let first = eventually("100 guarded Pods", TIMEOUT, || async {
            let list = active_pods(&pods, "app=guarded").await?;
            Ok((list.len() == 100).then_some(list))
        })
        .await?;
        let serving = json!({"status": {"conditions": [{"type": SERVING_GATE, "status": "True"}]}});
        for pod in &first {
            pods.patch_status(
                &name(pod),
                &PatchParams::default(),
                &Patch::Strategic(&serving),
            )
            .await?;
        }
        ns.apply(
            "apiVersion: policy.kruise.io/v1alpha1
kind: PodUnavailableBudget
metadata:
  name: guarded
spec:
  selector:
    matchLabels:
      app: guarded
  maxUnavailable: 20
",
        )
        .await?;
        let budgets: Api<PodUnavailableBudget> = ns.api();
        eventually("100 available, 20 allowed", TIMEOUT, || async {
            let status = budgets.get("guarded").await?.status.unwrap_or_default();
            Ok((status.current_available == 100 && status.unavailable_allowed == 20)
                .then_some(()))
        })
        .await?;
        let targets: Vec<String> = active_pods(&pods, "app=guarded")
            .await?
            .iter()
            .map(name)
            .collect();
        ensure!(targets.len() == 100, "{} guarded Pods", targets.len());
        let answers = futures::future::join_all(targets.iter().map(|pod| {
            let pods = pods.clone();
            async move { pods.evict(pod, &EvictParams::default()).await }
        }))
        .await;
        let admitted = answers.iter().filter(|a| a.is_ok()).count();
        let refusals: BTreeMap<String, usize> =
            answers
                .iter()
                .filter_map(|a| a.as_ref().err())
                .fold(BTreeMap::new(), |mut m, e| {
                    let text = e.to_string();
                    let kind = if text.contains("pub unavailable allowed is negative") {
                        "budget exhausted"
                    } else if text.contains("due to conflicts") {
                        "conflicts"
                    } else {
                        "other"
                    };
                    *m.entry(kind.to_owned()).or_default() += 1;
                    m
                });
        println!("100 evictions: {admitted} admitted, refused {refusals:?}");
        ensure!(
            admitted == 20,
            "exactly the 20 the budget allows must be admitted: {admitted}, refused {refusals:?}"
        );
        Ok(())
    })
    .await
}
