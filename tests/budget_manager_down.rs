//! A PodUnavailableBudget that holds while kruise-manager is down, and nothing else blocked.
//!
//! The Pods a budget guards are labelled `policy.kruise.io/guarded`; their deletions go to a webhook
//! that fails closed, and so do the evictions in a namespace holding a budget (an eviction carries no
//! Pod labels to select on). Every other Pod request goes to webhooks that fail open.
//!
//! With the manager killed: a burst of evictions and deletions of guarded Pods is refused (never more
//! than the budget unavailable), while a Pod no budget guards is deleted, and one in a namespace
//! without budgets is evicted and deleted. Once a manager is back the budget admits again, up to what
//! it allows.
//!
//! Its own test binary: it kills and restarts the manager of its control plane.

use std::time::Duration;

use anyhow::{Context, ensure};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Pod;
use kruise_api::policy::v1alpha1::PodUnavailableBudget;
use kruise_e2e::cloneset_kit::{active_pods, apply, cloneset, name, wait_converged};
use kruise_testkit::manager::{self, Manager, ManagerOptions};
use kruise_testkit::{eventually, testbed};
use kube::api::{Api, EvictParams};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);
const IMAGE: &str = "nginx:alpine";
const GUARDED_LABEL: &str = "policy.kruise.io/guarded";

fn labelled_guarded(pod: &Pod) -> bool {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(GUARDED_LABEL))
        .is_some_and(|v| v == "true")
}

async fn evict(pods: &Api<Pod>, pod: &str) -> Result<(), String> {
    pods.evict(pod, &EvictParams::default())
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

async fn delete(pods: &Api<Pod>, pod: &str) -> Result<(), String> {
    pods.delete(pod, &Default::default())
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// How many of the `replicas` Pods of `app` are unavailable, as the budget counts: the replicas
/// less the Pods Ready and not being deleted (a replacement still starting is not one more).
async fn unavailable(pods: &Api<Pod>, app: &str, replicas: usize) -> anyhow::Result<usize> {
    let list = pods
        .list(&kube::api::ListParams::default().labels(&format!("app={app}")))
        .await?;
    let available = list
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && kruise_core::pods::is_ready(p))
        .count();
    Ok(replicas.saturating_sub(available))
}

#[tokio::test]
async fn a_budget_holds_while_the_manager_is_down() -> anyhow::Result<()> {
    let bed = testbed();
    let ns = bed.namespace("pub-down").await?;
    let free = bed.namespace("pub-down-free").await?;
    manager::ensure_namespace(&bed.plane).await?;
    let options = ManagerOptions {
        name: "manager-pub-down".into(),
        leader_election_id: "kruise-manager-pub-down".into(),
        lease_seconds: 4,
        ..Default::default()
    };
    let kruise = Manager::spawn(&bed.plane, &options)?;
    manager::wait_serving(&bed.plane, &kruise.ports, TIMEOUT).await?;
    let outcome = ns
        .run(async {
            apply(&ns, &cloneset("web", 10, IMAGE, json!({}))).await?;
            apply(&ns, &cloneset("loose", 1, IMAGE, json!({}))).await?;
            apply(&free, &cloneset("free", 2, IMAGE, json!({}))).await?;
            wait_converged(&ns, "web", 10, TIMEOUT).await?;
            wait_converged(&ns, "loose", 1, TIMEOUT).await?;
            wait_converged(&free, "free", 2, TIMEOUT).await?;
            ns.apply(
                "apiVersion: policy.kruise.io/v1alpha1
kind: PodUnavailableBudget
metadata:
  name: web-pub
spec:
  selector:
    matchLabels:
      app: web
  maxUnavailable: 2
",
            )
            .await?;
            let pods: Api<Pod> = ns.api();
            let budgets: Api<PodUnavailableBudget> = ns.api();
            // The budget has counted its Pods and every one is labelled; the Pod no budget
            // guards is not.
            eventually(
                "web-pub: 10 available, 2 allowed, Pods labelled",
                TIMEOUT,
                || async {
                    let status = budgets.get("web-pub").await?.status.unwrap_or_default();
                    let web = active_pods(&pods, "app=web").await?;
                    let loose = active_pods(&pods, "app=loose").await?;
                    Ok((status.current_available == 10
                        && status.unavailable_allowed == 2
                        && web.len() == 10
                        && web.iter().all(labelled_guarded)
                        && !loose.iter().any(labelled_guarded))
                    .then_some(()))
                },
            )
            .await?;
            // The webhook configuration sends this namespace's evictions to the closed webhook.
            let configurations: Api<ValidatingWebhookConfiguration> = Api::all(ns.client.clone());
            eventually(
                "vpodevictionguarded.kb.io selects the namespace",
                TIMEOUT,
                || async {
                    let configuration = configurations
                        .get("kruise-validating-webhook-configuration")
                        .await?;
                    let selects = configuration.webhooks.unwrap_or_default().iter().any(|h| {
                        h.name == "vpodevictionguarded.kb.io"
                            && h.failure_policy.as_deref() == Some("Fail")
                            && h.namespace_selector
                                .as_ref()
                                .and_then(|s| s.match_expressions.as_ref())
                                .is_some_and(|e| {
                                    e.iter().any(|r| {
                                        r.operator == "In"
                                            && r.values.iter().flatten().any(|v| *v == ns.name)
                                    })
                                })
                    });
                    Ok(selects.then_some(()))
                },
            )
            .await?;

            let web: Vec<String> = active_pods(&pods, "app=web")
                .await?
                .iter()
                .map(name)
                .collect();
            // One eviction while the manager is up: admitted, one of the two allowed.
            evict(&pods, &web[0])
                .await
                .map_err(anyhow::Error::msg)
                .context("the first eviction, manager up")?;

            // The manager dies. A burst of 8 evictions and 2 deletions of guarded Pods, each
            // tried again for 10 s as `kubectl drain` does: none gets through.
            kruise.kill(&bed.plane)?;
            let burst = futures::future::join_all(web[1..].iter().enumerate().map(|(i, pod)| {
                let pods = pods.clone();
                async move {
                    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
                    loop {
                        let result = if i < 8 {
                            evict(&pods, pod).await
                        } else {
                            delete(&pods, pod).await
                        };
                        match result {
                            Ok(()) => return Ok(pod.clone()),
                            Err(error) if tokio::time::Instant::now() >= deadline => {
                                return Err(error);
                            }
                            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
                        }
                    }
                }
            }))
            .await;
            let admitted: Vec<&String> = burst.iter().filter_map(|r| r.as_ref().ok()).collect();
            ensure!(
                admitted.is_empty(),
                "guarded Pods removed with the manager down: {admitted:?}"
            );
            let refusal = burst
                .iter()
                .find_map(|r| r.as_ref().err())
                .context("no refusal")?;
            ensure!(
                refusal.contains("vpodguarded.kb.io")
                    || refusal.contains("vpodevictionguarded.kb.io"),
                "refused otherwise than by the closed webhooks: {refusal}"
            );
            let down = unavailable(&pods, "web", 10).await?;
            ensure!(down <= 2, "{down} of 10 Pods unavailable with 2 allowed");

            // Nothing else is blocked: a Pod no budget guards is deleted, and in a namespace
            // without budgets Pods are evicted and deleted.
            let loose = active_pods(&pods, "app=loose").await?;
            delete(&pods, &name(&loose[0]))
                .await
                .map_err(anyhow::Error::msg)
                .context("deleting an unguarded Pod with the manager down")?;
            let free_pods: Api<Pod> = free.api();
            let elsewhere: Vec<String> = active_pods(&free_pods, "app=free")
                .await?
                .iter()
                .map(name)
                .collect();
            evict(&free_pods, &elsewhere[0])
                .await
                .map_err(anyhow::Error::msg)
                .context("evicting a Pod of a namespace without budgets, manager down")?;
            delete(&free_pods, &elsewhere[1])
                .await
                .map_err(anyhow::Error::msg)
                .context("deleting a Pod of a namespace without budgets, manager down")?;

            // A manager is back: the budget decides again and admits what it allows.
            kruise.restart(&bed.plane)?;
            manager::wait_serving(&bed.plane, &kruise.ports, TIMEOUT).await?;
            let admitted = eventually("an eviction admitted again", TIMEOUT, || async {
                for pod in &web[1..] {
                    if evict(&pods, pod).await.is_ok() {
                        return Ok(Some(pod.clone()));
                    }
                }
                Ok(None)
            })
            .await?;
            let down = unavailable(&pods, "web", 10).await?;
            ensure!(
                down <= 2,
                "{down} of 10 Pods unavailable with 2 allowed after evicting {admitted}"
            );
            Ok(())
        })
        .await;
    // The manager is up again (or the test failed before killing it) so that the namespaces'
    // guarded Pods can be deleted.
    if kruise.exited(&bed.plane)?.is_some() {
        kruise.restart(&bed.plane)?;
        manager::wait_serving(&bed.plane, &kruise.ports, TIMEOUT).await?;
    }
    outcome
}
