//! policy.kruise.io end to end: PodUnavailableBudget (eviction and deletion refused past the budget,
//! allowed again as Pods recover, parallel evictions, dry-run, in-place updates gated) and deletion
//! protection of a Namespace and a CloneSet. Own test binary: its manager runs with the gates that
//! are off by default on (`ResourcesDeletionProtection`, `PodUnavailableBudgetUpdateGate`).

use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kruise_api::policy::v1alpha1::PodUnavailableBudget;
use kruise_e2e::cloneset_kit::{
    CONTAINER, active_pods, apply, cloneset, merge_patch, name, set_image, spec_image, terminating,
    wait_converged,
};
use kruise_testkit::manager::ManagerOptions;
use kruise_testkit::{TestBed, TestNamespace};
use kruise_testkit::{eventually, testbed};
use kube::api::{Api, EvictParams, ListParams};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);
const IMAGE_A: &str = "nginx:alpine";
const IMAGE_B: &str = "nginx:1.19.1";
const REFUSAL: &str = "is forbidden: pub unavailable allowed is negative";

fn bed() -> &'static TestBed {
    let bed = testbed();
    bed.manager_with(&ManagerOptions {
        extra_args: vec![
            "--feature-gates=ResourcesDeletionProtection=true,PodUnavailableBudgetUpdateGate=true"
                .into(),
        ],
        ..ManagerOptions::default()
    });
    bed
}

fn budget_yaml(name: &str, target: &str, max_unavailable: i32) -> String {
    format!(
        "apiVersion: policy.kruise.io/v1alpha1
kind: PodUnavailableBudget
metadata:
  name: {name}
spec:
  targetRef:
    apiVersion: apps.kruise.io/v1alpha1
    kind: CloneSet
    name: {target}
  maxUnavailable: {max_unavailable}
"
    )
}

/// Waits until the budget counts `total` Pods, all available, and allows `allowed` more
/// disruptions, with nothing recorded; every Pod of `app=<app>` names the budget and is labelled
/// `policy.kruise.io/guarded`.
async fn wait_budget(
    ns: &TestNamespace,
    budget: &str,
    app: &str,
    total: i32,
    allowed: i32,
) -> anyhow::Result<PodUnavailableBudget> {
    let api: Api<PodUnavailableBudget> = ns.api();
    let pods: Api<Pod> = ns.api();
    eventually(
        format!("PodUnavailableBudget {budget}: {total} available, {allowed} allowed"),
        TIMEOUT,
        || async {
            let pub_ = api.get(budget).await?;
            let Some(status) = pub_.status.clone() else {
                return Ok(None);
            };
            let annotated = active_pods(&pods, &format!("app={app}"))
                .await?
                .iter()
                .all(|p| {
                    p.metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get("kruise.io/related-pub"))
                        .map(String::as_str)
                        == Some(budget)
                        && p.metadata
                            .labels
                            .as_ref()
                            .and_then(|l| l.get("policy.kruise.io/guarded"))
                            .map(String::as_str)
                            == Some("true")
                });
            let recorded = status.disrupted_pods.as_ref().map_or(0, |m| m.len())
                + status.unavailable_pods.as_ref().map_or(0, |m| m.len());
            Ok((status.total_replicas == total
                && status.current_available == total
                && status.unavailable_allowed == allowed
                && recorded == 0
                && annotated)
                .then_some(pub_))
        },
    )
    .await
}

async fn evict(pods: &Api<Pod>, pod: &str) -> Result<(), String> {
    pods.evict(pod, &EvictParams::default())
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Eviction and `kubectl delete pod` are refused once the budget is used up, with upstream's
/// message; a server-side dry run takes nothing; both are allowed again once the Pods recover.
#[tokio::test]
async fn budget_refuses_eviction_and_deletion_until_pods_recover() -> anyhow::Result<()> {
    let ns = bed().namespace("pub-evict").await?;
    ns.run(async {
        // A replacement Pod is Ready only 6 s after it starts: until then the budget has nothing
        // to allow, however slow the machine is to run the next `kubectl` (a replacement Ready
        // within a second, under load, made the refused delete below an allowed one).
        let slow_to_recover = json!({"template": {"metadata": {"annotations":
            {"sim.kruise-rs.io/ready-delay-ms": "6000"}}}});
        apply(&ns, &cloneset("web", 3, IMAGE_A, slow_to_recover)).await?;
        wait_converged(&ns, "web", 3, TIMEOUT).await?;
        ns.apply(&budget_yaml("web-pub", "web", 1)).await?;
        let first = wait_budget(&ns, "web-pub", "web", 3, 1).await?;
        let status = first.status.clone().unwrap_or_default();
        ensure!(status.desired_available == 2, "{status:?}");

        let pods: Api<Pod> = ns.api();
        let names: Vec<String> = active_pods(&pods, "app=web")
            .await?
            .iter()
            .map(name)
            .collect();
        ensure!(names.len() == 3, "{names:?}");

        // A dry run is admitted and records nothing.
        ns.kubectl(&["delete", "pod", &names[0], "--dry-run=server"])
            .await?;
        let after_dry = ns.api::<PodUnavailableBudget>().get("web-pub").await?;
        let dry_status = after_dry.status.clone().unwrap_or_default();
        ensure!(
            dry_status.unavailable_allowed == 1
                && dry_status
                    .disrupted_pods
                    .as_ref()
                    .is_none_or(|m| m.is_empty()),
            "a dry run changed the budget: {dry_status:?}"
        );

        // One eviction takes the budget; the next one and a delete are refused.
        evict(&pods, &names[0])
            .await
            .map_err(anyhow::Error::msg)
            .context("the first eviction")?;
        let refused = evict(&pods, &names[1])
            .await
            .err()
            .context("a second eviction was admitted past the budget")?;
        ensure!(refused.contains(REFUSAL), "{refused}");
        ensure!(
            refused.contains("podunavailablebudgets.policy.kruise.io \"web-pub\""),
            "{refused}"
        );
        let deleted = ns
            .kubectl(&["delete", "pod", &names[1], "--wait=false"])
            .await;
        let message = deleted
            .err()
            .context("kubectl delete pod was admitted past the budget")?
            .to_string();
        ensure!(message.contains(REFUSAL), "{message}");
        ensure!(
            pods.get(&names[1])
                .await?
                .metadata
                .deletion_timestamp
                .is_none(),
            "the refused Pod is being deleted"
        );
        // `kubectl describe pod` shows why, as upstream words it.
        let events: Api<k8s_openapi::api::core::v1::Event> = ns.api();
        let selector = format!("involvedObject.name={}", names[1]);
        eventually("the PubPreventPodDeletion Warning", TIMEOUT, || async {
            let list = events
                .list(&ListParams::default().fields(&selector))
                .await?;
            Ok(list
                .items
                .iter()
                .any(|e| {
                    e.reason.as_deref() == Some("PubPreventPodDeletion")
                        && e.type_.as_deref() == Some("Warning")
                        && e.message.as_deref() == Some("openkruise pub prevents pod deletion")
                        && e.reporting_component.as_deref() == Some("pub-controller")
                })
                .then_some(()))
        })
        .await?;

        // The CloneSet replaces the evicted Pod; once it is available the budget allows one again.
        wait_converged(&ns, "web", 3, TIMEOUT).await?;
        wait_budget(&ns, "web-pub", "web", 3, 1).await?;
        ns.kubectl(&["delete", "pod", &names[1], "--wait=false"])
            .await
            .context("deleting once the Pods recovered")?;
        Ok(())
    })
    .await
}

/// Six evictions at once against a budget allowing two: never more than two admitted.
#[tokio::test]
async fn parallel_evictions_never_take_more_than_allowed() -> anyhow::Result<()> {
    let ns = bed().namespace("pub-parallel").await?;
    ns.run(async {
        apply(&ns, &cloneset("par", 6, IMAGE_A, json!({}))).await?;
        wait_converged(&ns, "par", 6, TIMEOUT).await?;
        ns.apply(
            "apiVersion: policy.kruise.io/v1alpha1
kind: PodUnavailableBudget
metadata:
  name: par-pub
spec:
  selector:
    matchLabels:
      app: par
  maxUnavailable: 2
",
        )
        .await?;
        wait_budget(&ns, "par-pub", "par", 6, 2).await?;
        let pods: Api<Pod> = ns.api();
        let names: Vec<String> = active_pods(&pods, "app=par")
            .await?
            .iter()
            .map(name)
            .collect();
        let results = futures::future::join_all(names.iter().map(|n| {
            let pods = pods.clone();
            async move { evict(&pods, n).await }
        }))
        .await;
        let admitted = results.iter().filter(|r| r.is_ok()).count();
        for refusal in results.iter().filter_map(|r| r.as_ref().err()) {
            ensure!(
                refusal.contains(REFUSAL) || refusal.contains("due to conflicts"),
                "an eviction failed otherwise: {refusal}"
            );
        }
        ensure!(
            (1..=2).contains(&admitted),
            "{admitted} of 6 parallel evictions admitted with 2 allowed: {results:?}"
        );
        let terminating = pods
            .list(&Default::default())
            .await?
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_some())
            .count();
        ensure!(terminating <= 2, "{terminating} Pods being deleted");
        Ok(())
    })
    .await
}

/// With `PodUnavailableBudgetUpdateGate`, a CloneSet that may update both of its Pods at once
/// (maxUnavailable 100%) updates them one at a time under a budget allowing one.
#[tokio::test]
async fn in_place_updates_wait_for_the_budget() -> anyhow::Result<()> {
    let ns = bed().namespace("pub-inplace").await?;
    ns.run(async {
        let spec = json!({"updateStrategy": {"rollingUpdate": {"podUpdatePolicy": "InPlaceIfPossible",
            "maxUnavailable": "100%", "inPlaceUpdateStrategy": {"gracePeriodSeconds": 0}}}});
        apply(&ns, &cloneset("ip", 2, IMAGE_A, spec)).await?;
        wait_converged(&ns, "ip", 2, TIMEOUT).await?;
        ns.apply(&budget_yaml("ip-pub", "ip", 1)).await?;
        wait_budget(&ns, "ip-pub", "ip", 2, 1).await?;
        set_image(&ns, "ip", IMAGE_B).await?;
        let pods: Api<Pod> = ns.api();
        let deadline = Instant::now() + TIMEOUT;
        // Until the first updated Pod is Ready again, the other keeps the old image.
        let mut first: Option<String> = None;
        loop {
            ensure!(Instant::now() < deadline, "the rollout did not progress");
            let list = active_pods(&pods, "app=ip").await?;
            let updated: Vec<&Pod> = list
                .iter()
                .filter(|p| spec_image(p).as_deref() == Some(IMAGE_B))
                .collect();
            match (&first, updated.len()) {
                (None, 0) => {}
                (None, 1) => first = Some(name(updated[0])),
                (None, _) => anyhow::bail!("both Pods were updated at once"),
                (Some(pod), n) => {
                    let ready = list
                        .iter()
                        .find(|p| &name(p) == pod)
                        .is_some_and(kruise_e2e::is_ready);
                    if ready {
                        break;
                    }
                    ensure!(
                        n == 1,
                        "the second Pod was updated while {pod} was unavailable"
                    );
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        wait_converged(&ns, "ip", 2, TIMEOUT).await?;
        // The held update was refused by the budget check of the in-place update engine, which
        // says so on the Pod as upstream's (one recorder for it and the webhook).
        let events: Api<k8s_openapi::api::core::v1::Event> = ns.api();
        let selector = "involvedObject.kind=Pod,reason=PubPreventPodDeletion";
        let list = events.list(&ListParams::default().fields(selector)).await?;
        ensure!(
            list.items
                .iter()
                .any(|e| e.reporting_component.as_deref() == Some("pub-controller")),
            "no PubPreventPodDeletion Event from the held in-place update: {:?}",
            list.items
        );
        Ok(())
    })
    .await
}

/// `policy.kruise.io/delete-protection`: a Namespace labelled Always cannot be deleted until the
/// label goes; Cascading refuses while it has active Pods. A CloneSet labelled Cascading cannot be
/// deleted while it has replicas.
#[tokio::test]
async fn deletion_protection_of_a_namespace_and_a_cloneset() -> anyhow::Result<()> {
    let ns = bed().namespace("del-protect").await?;
    ns.run(async {
        apply(
            &ns,
            &cloneset(
                "kept",
                2,
                IMAGE_A,
                json!({}),
            ),
        )
        .await?;
        ns.kubectl(&["label", "cloneset", "kept", "policy.kruise.io/delete-protection=Cascading"])
            .await?;
        wait_converged(&ns, "kept", 2, TIMEOUT).await?;
        let refused = ns
            .kubectl(&["delete", "cloneset", "kept", "--wait=false"])
            .await
            .err()
            .context("a Cascading CloneSet with replicas was deleted")?
            .to_string();
        ensure!(
            refused.contains("forbidden by ResourcesProtectionDeletion for policy.kruise.io/delete-protection=Cascading and replicas 2>0"),
            "{refused}"
        );
        merge_patch(&ns, "cloneset", "kept", &json!({"spec": {"replicas": 0}})).await?;
        ns.kubectl(&["delete", "cloneset", "kept", "--wait=false"])
            .await
            .context("deleting the CloneSet at 0 replicas")?;

        // A Namespace of its own (the test's namespace must stay for the diagnostics).
        let guarded = bed().namespace("del-ns").await?;
        let nss: Api<Namespace> = Api::all(guarded.client.clone());
        let name = guarded.name.clone();
        ns.kubectl(&["label", "namespace", &name, "policy.kruise.io/delete-protection=Always"])
            .await?;
        let refused = ns
            .kubectl(&["delete", "namespace", &name, "--wait=false"])
            .await
            .err()
            .context("a namespace labelled Always was deleted")?
            .to_string();
        ensure!(
            refused.contains("forbidden by ResourcesProtectionDeletion for policy.kruise.io/delete-protection=Always"),
            "{refused}"
        );
        apply(&guarded, &cloneset("inside", 1, IMAGE_A, json!({}))).await?;
        wait_converged(&guarded, "inside", 1, TIMEOUT).await?;
        ns.kubectl(&["label", "--overwrite", "namespace", &name, "policy.kruise.io/delete-protection=Cascading"])
            .await?;
        let refused = ns
            .kubectl(&["delete", "namespace", &name, "--wait=false"])
            .await
            .err()
            .context("a Cascading namespace with an active Pod was deleted")?
            .to_string();
        ensure!(refused.contains("and active pods 1>0"), "{refused}");
        ns.kubectl(&["label", "namespace", &name, "policy.kruise.io/delete-protection-"])
            .await?;
        ns.kubectl(&["delete", "namespace", &name, "--wait=false"])
            .await
            .context("deleting the namespace once unlabelled")?;
        eventually("the namespace terminating", TIMEOUT, || async {
            Ok(nss
                .get_opt(&name)
                .await?
                .is_none_or(|n| n.metadata.deletion_timestamp.is_some())
                .then_some(()))
        })
        .await?;
        Ok(())
    })
    .await
}

/// What a server-side dry run of a Pod with `labels` and `owner` (an ownerReference, controller)
/// comes back with in `kruise.io/related-pub`: the Pod webhook's doing alone, since the budget
/// controller never sees a dry-run Pod.
async fn related_pub_at_creation(
    ns: &TestNamespace,
    labels: serde_json::Value,
    owner: Option<serde_json::Value>,
) -> anyhow::Result<Option<String>> {
    let mut metadata = json!({"name": "dry-run", "labels": labels});
    if let Some(owner) = owner {
        metadata["ownerReferences"] = json!([owner]);
    }
    let pod: Pod = serde_json::from_value(json!({
        "metadata": metadata,
        "spec": {"containers": [{"name": "app", "image": IMAGE_A}]},
    }))?;
    let params = kube::api::PostParams {
        dry_run: true,
        ..Default::default()
    };
    let created = ns.api::<Pod>().create(&params, &pod).await?;
    Ok(created
        .metadata
        .annotations
        .and_then(|a| a.get("kruise.io/related-pub").cloned()))
}

/// A Pod names its budget in `kruise.io/related-pub` as it is created (before the controller sees
/// it): by selector, by the CloneSet that owns it, and by the Deployment of its ReplicaSet.
#[tokio::test]
async fn a_new_pod_names_its_budget_as_it_is_created() -> anyhow::Result<()> {
    let ns = bed().namespace("pub-create").await?;
    ns.run(async {
        apply(&ns, &cloneset("web", 1, IMAGE_A, json!({}))).await?;
        ns.apply(&budget_yaml("web-pub", "web", 1)).await?;
        ns.apply(
            "apiVersion: policy.kruise.io/v1alpha1
kind: PodUnavailableBudget
metadata:
  name: batch-pub
spec:
  selector:
    matchLabels:
      tier: batch
  maxUnavailable: 1
---
apiVersion: policy.kruise.io/v1alpha1
kind: PodUnavailableBudget
metadata:
  name: api-pub
spec:
  targetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: api
  minAvailable: 1
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: api
spec:
  replicas: 1
  selector:
    matchLabels:
      app: api
  template:
    metadata:
      labels:
        app: api
    spec:
      containers:
      - name: app
        image: nginx:alpine
",
        )
        .await?;
        let cloneset_uid = ns
            .api::<kruise_api::cloneset::v1beta1::CloneSet>()
            .get("web")
            .await?
            .metadata
            .uid;
        let replicaset = eventually("the Deployment's ReplicaSet", TIMEOUT, || async {
            let sets = ns
                .api::<k8s_openapi::api::apps::v1::ReplicaSet>()
                .list(&kube::api::ListParams::default().labels("app=api"))
                .await?;
            Ok(sets.items.into_iter().next())
        })
        .await?;

        // By selector: the webhook may lag the budget's creation by a watch event.
        eventually("a batch Pod naming batch-pub", TIMEOUT, || async {
            let named = related_pub_at_creation(&ns, json!({"tier": "batch"}), None).await?;
            Ok((named.as_deref() == Some("batch-pub")).then_some(()))
        })
        .await?;
        // By the CloneSet that owns it (its labels match no selector).
        let owned = related_pub_at_creation(
            &ns,
            json!({"app": "other"}),
            Some(
                json!({"apiVersion": "apps.kruise.io/v1beta1", "kind": "CloneSet", "name": "web",
                        "uid": cloneset_uid, "controller": true}),
            ),
        )
        .await?;
        ensure!(owned.as_deref() == Some("web-pub"), "{owned:?}");
        // By its ReplicaSet's Deployment.
        let via_replicaset = related_pub_at_creation(
            &ns,
            json!({"app": "api"}),
            Some(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                        "name": replicaset.metadata.name, "uid": replicaset.metadata.uid,
                        "controller": true})),
        )
        .await?;
        ensure!(
            via_replicaset.as_deref() == Some("api-pub"),
            "{via_replicaset:?}"
        );
        // Nothing guards a Pod no budget selects.
        let unguarded = related_pub_at_creation(&ns, json!({"app": "lonely"}), None).await?;
        ensure!(unguarded.is_none(), "{unguarded:?}");
        Ok(())
    })
    .await
}

/// A deleted budget decides nothing (issue 55): after `zero-pub` (maxUnavailable 0, never written
/// by an admission) and `one-pub` (maxUnavailable 1, used up by an eviction, so that this
/// process's last write of it is what it decides on) are deleted, every Pod they guarded is
/// deleted at once, as OpenKruise (which reads NotFound) admits.
#[tokio::test]
async fn a_deleted_budget_refuses_nothing() -> anyhow::Result<()> {
    let ns = bed().namespace("pub-deleted").await?;
    ns.run(async {
        apply(&ns, &cloneset("zero", 3, IMAGE_A, json!({}))).await?;
        apply(&ns, &cloneset("one", 3, IMAGE_A, json!({}))).await?;
        wait_converged(&ns, "zero", 3, TIMEOUT).await?;
        wait_converged(&ns, "one", 3, TIMEOUT).await?;
        ns.apply(&budget_yaml("zero-pub", "zero", 0)).await?;
        ns.apply(&budget_yaml("one-pub", "one", 1)).await?;
        wait_budget(&ns, "zero-pub", "zero", 3, 0).await?;
        wait_budget(&ns, "one-pub", "one", 3, 1).await?;

        let pods: Api<Pod> = ns.api();
        let zero: Vec<String> = active_pods(&pods, "app=zero")
            .await?
            .iter()
            .map(name)
            .collect();
        let one: Vec<String> = active_pods(&pods, "app=one")
            .await?
            .iter()
            .map(name)
            .collect();
        let refused = evict(&pods, &zero[0])
            .await
            .err()
            .context("zero-pub admitted an eviction")?;
        ensure!(refused.contains(REFUSAL), "{refused}");
        evict(&pods, &one[0])
            .await
            .map_err(anyhow::Error::msg)
            .context("one-pub's first eviction")?;
        let refused = evict(&pods, &one[1])
            .await
            .err()
            .context("one-pub admitted a second eviction")?;
        ensure!(refused.contains(REFUSAL), "{refused}");

        let budgets: Api<PodUnavailableBudget> = ns.api();
        for budget in ["zero-pub", "one-pub"] {
            budgets
                .delete(budget, &Default::default())
                .await
                .with_context(|| format!("deleting {budget}"))?;
        }
        // Every guarded Pod (the one-pub Pod already evicted aside), at once and each on its first
        // try: none may be refused.
        let guarded: Vec<&String> = zero.iter().chain(&one[1..]).collect();
        let results = futures::future::join_all(guarded.iter().map(|pod| {
            let pods = pods.clone();
            async move {
                pods.delete(pod, &Default::default())
                    .await
                    .map(|_| ())
                    .map_err(|e| format!("{pod}: {e}"))
            }
        }))
        .await;
        let refusals: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
        ensure!(
            refusals.is_empty(),
            "deletes refused after the budgets were deleted: {refusals:?}"
        );
        Ok(())
    })
    .await
}

/// Waits until budget `name` reads `allowed` / `desired` / `current` / `total`
/// (unavailableAllowed, desiredAvailable, currentAvailable, totalReplicas), as upstream's specs
/// compare the status with its Pod records left out.
async fn wait_budget_status(
    ns: &TestNamespace,
    name: &str,
    [allowed, desired, current, total]: [i32; 4],
) -> anyhow::Result<()> {
    let api: Api<PodUnavailableBudget> = ns.api();
    eventually(
        format!("PodUnavailableBudget {name}: allowed {allowed}, desired {desired}, current {current}, total {total}"),
        TIMEOUT,
        || async {
            let status = api.get(name).await?.status.unwrap_or_default();
            Ok((status.unavailable_allowed == allowed
                && status.desired_available == desired
                && status.current_available == current
                && status.total_replicas == total)
                .then_some(()))
        },
    )
    .await
}

/// Upstream's `PodUnavailableBudget selector cloneSet, strategy.type=recreate, update failed image
/// and block` (test/e2e/policy/v1alpha1/podunavailablebudget.go:733 at v1.9.0), same numbers: a
/// budget selecting `pub-controller=true` with maxUnavailable 1 over a v1alpha1 CloneSet of 2
/// (ReCreate, maxUnavailable 100%, maxSurge 0; the container is named as the kit reads it). An update to an image that never becomes ready
/// recreates one Pod and the budget refuses the other's deletion; the next update (to a good image)
/// replaces the unready Pod first, and once it is available the refused one goes too.
#[tokio::test]
async fn recreate_update_to_a_failing_image_is_blocked_by_the_budget() -> anyhow::Result<()> {
    const GOOD: &str = "nginx:1.19.2";
    const FAILING: &str = "nginx:1.19-never-ready";
    let ns = bed().namespace("pub-recreate").await?;
    ns.run(async {
        ns.apply(
            &json!({
                "apiVersion": "policy.kruise.io/v1alpha1",
                "kind": "PodUnavailableBudget",
                "metadata": {"name": "webserver-pub"},
                "spec": {"selector": {"matchLabels": {"pub-controller": "true"}}, "maxUnavailable": 1}
            })
            .to_string(),
        )
        .await?;
        let labels = json!({"app": "webserver", "pub-controller": "true"});
        let cloneset = |image: &str| {
            json!({
                "apiVersion": "apps.kruise.io/v1alpha1",
                "kind": "CloneSet",
                "metadata": {"name": "webserver"},
                "spec": {
                    "replicas": 2,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {"containers": [{"name": CONTAINER, "image": image,
                            "imagePullPolicy": "IfNotPresent"}]}
                    },
                    "updateStrategy": {"type": "ReCreate", "maxUnavailable": "100%", "maxSurge": 0}
                }
            })
        };
        apply(&ns, &cloneset(IMAGE_A)).await?;
        wait_budget_status(&ns, "webserver-pub", [1, 1, 2, 2]).await?;

        // The failing image: one Pod is recreated on it, the budget refuses the other's deletion.
        apply(&ns, &cloneset(FAILING)).await?;
        wait_budget_status(&ns, "webserver-pub", [0, 1, 1, 2]).await?;
        let pods: Api<Pod> = ns.api();
        let selector = "app=webserver";
        // As upstream counts: Pods neither on the failing image nor being deleted.
        let kept = || async {
            Ok::<_, anyhow::Error>(
                active_pods(&pods, selector)
                    .await?
                    .into_iter()
                    .filter(|p| !terminating(p) && spec_image(p).as_deref() != Some(FAILING))
                    .collect::<Vec<Pod>>(),
            )
        };
        let not_updated = kept().await?;
        ensure!(
            not_updated.len() == 1,
            "{} Pods kept the old image",
            not_updated.len()
        );
        let refused = name(&not_updated[0]);
        // The refusal is said on the CloneSet (upstream's FailedDelete) and on the Pod.
        kruise_e2e::cloneset_kit::wait_events(
            &ns,
            "webserver",
            "FailedDelete",
            &[refused.clone(), REFUSAL.to_string()],
        )
        .await?;
        let events: Api<k8s_openapi::api::core::v1::Event> = ns.api();
        let on_pod = format!("involvedObject.name={refused},reason=PubPreventPodDeletion");
        eventually("PubPreventPodDeletion on the refused Pod", TIMEOUT, || async {
            Ok((!events
                .list(&ListParams::default().fields(&on_pod))
                .await?
                .items
                .is_empty())
            .then_some(()))
        })
        .await?;

        // A good image: the unready Pod is replaced first, then the refused one.
        apply(&ns, &cloneset(GOOD)).await?;
        wait_converged(&ns, "webserver", 2, TIMEOUT).await?;
        wait_budget_status(&ns, "webserver-pub", [1, 1, 2, 2]).await?;
        let updated = active_pods(&pods, selector)
            .await?
            .iter()
            .filter(|p| spec_image(p).as_deref() == Some(GOOD))
            .count();
        ensure!(updated == 2, "{updated} Pods run {GOOD}");
        Ok(())
    })
    .await
}

/// Budgets OpenKruise's `vpodunavailablebudget.kb.io` refuses are refused, the field named.
#[tokio::test]
async fn invalid_budgets_are_refused_with_the_field_named() -> anyhow::Result<()> {
    let ns = bed().namespace("pub-invalid").await?;
    ns.run(async {
        let budgets: Api<PodUnavailableBudget> = ns.api();
        let create = |name: &'static str, spec: serde_json::Value| {
            let budgets = budgets.clone();
            async move {
                let budget: PodUnavailableBudget = serde_json::from_value(json!({
                    "apiVersion": "policy.kruise.io/v1alpha1", "kind": "PodUnavailableBudget",
                    "metadata": {"name": name}, "spec": spec,
                }))?;
                anyhow::Ok(
                    budgets
                        .create(&Default::default(), &budget)
                        .await
                        .map(|_| ())
                        .map_err(|e| e.to_string()),
                )
            }
        };
        let web = json!({"matchLabels": {"app": "web"}});
        // (name, spec, the field the refusal names)
        let cases = [
            ("pct", json!({"selector": web, "maxUnavailable": "150%"}), "spec.maxUnavailable"),
            ("neg", json!({"selector": web, "maxUnavailable": -1}), "spec.maxUnavailable"),
            ("negstr", json!({"selector": web, "maxUnavailable": "-1"}), "spec.maxUnavailable"),
            (
                "bogus",
                json!({"selector": {"matchExpressions": [{"key": "app", "operator": "Bogus", "values": ["a"]}]},
                       "maxUnavailable": 1}),
                "spec.selector.matchExpressions[0].operator",
            ),
            (
                "space",
                json!({"selector": {"matchLabels": {"app": "has space!"}}, "maxUnavailable": 1}),
                "spec.selector.matchLabels[app]",
            ),
            ("neither", json!({"maxUnavailable": 1}), "spec.selector, targetRef"),
            (
                "both",
                json!({"selector": web, "maxUnavailable": 1, "minAvailable": 1}),
                "spec.maxUnavailable, minAvailable",
            ),
        ];
        for (name, spec, field) in cases {
            let refusal = create(name, spec)
                .await?
                .err()
                .with_context(|| format!("budget {name} was stored"))?;
            ensure!(
                refusal.contains("vpodunavailablebudget.kb.io") && refusal.contains(field),
                "budget {name}: {refusal}"
            );
        }
        // A valid budget is stored; a second over the same Pods is refused, and the first may
        // change its limit but not what it selects.
        create("web", json!({"selector": web, "maxUnavailable": 1}))
            .await?
            .map_err(anyhow::Error::msg)?;
        let conflict = create("web-again", json!({"selector": web, "maxUnavailable": 2}))
            .await?
            .err()
            .context("a second budget over the same Pods was stored")?;
        ensure!(
            conflict.contains("in conflict with other PodUnavailableBudget web"),
            "{conflict}"
        );
        let resource = "podunavailablebudgets.policy.kruise.io";
        merge_patch(&ns, resource, "web", &json!({"spec": {"maxUnavailable": 2}})).await?;
        let moved = merge_patch(
            &ns,
            resource,
            "web",
            &json!({"spec": {"selector": {"matchLabels": {"app": "db"}}}}),
        )
        .await
        .err()
        .context("a budget's selector changed")?;
        ensure!(moved.to_string().contains("cannot be modified"), "{moved}");
        Ok(())
    })
    .await
}
