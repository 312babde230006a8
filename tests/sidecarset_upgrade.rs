//! SidecarSet in-place sidecar upgrades, end to end (seed 001): the Pod webhook injects, the
//! controller upgrades only the sidecar's image, the app container never restarts.

use std::time::Duration;

use anyhow::{Context, ensure};
use k8s_openapi::api::core::v1::Pod;
use kruise_api::sidecarset::v1beta1::SidecarSet;
use kruise_e2e::sidecarset_kit::{
    LOGTAIL, apply_logtail, restarts, set_image, spec_image, test_pod,
};
use kruise_e2e::{container_status, is_ready, node_name, pod_ip};
use kruise_testkit::{Limits, RolloutMonitor, eventually, testbed};
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(90);

#[tokio::test]
async fn seed001_sidecar_upgrade_in_place() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("ss-seed").await?;
    let name = format!("logtail-{}", ns.name);
    ns.run(async {
        let sidecarsets: Api<SidecarSet> = Api::all(ns.client.clone());
        apply_logtail(&ns, &name, &json!({"app": "nginx"}), json!({})).await?;
        ns.apply(&test_pod("test-pod", json!({"app": "nginx"})).to_string())
            .await?;
        let pods: Api<Pod> = ns.api();
        let before = eventually("test-pod 2/2 Ready", TIMEOUT, || async {
            let pod = pods.get("test-pod").await?;
            let two = pod.spec.as_ref().is_some_and(|s| s.containers.len() == 2);
            Ok((two && is_ready(&pod)).then_some(pod))
        })
        .await?;
        let spec = before.spec.clone().context("spec")?;
        let logtail = spec
            .containers
            .iter()
            .find(|c| c.name == "logtail")
            .context("logtail injected")?;
        let mounts: Vec<String> = logtail
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| format!("{}:{}", m.name, m.mount_path))
            .collect();
        ensure!(
            mounts.contains(&"nginx-log:/var/log/nginx".to_string()),
            "{mounts:?}"
        );
        let tz = logtail
            .env
            .iter()
            .flatten()
            .find(|e| e.name == "TZ")
            .and_then(|e| e.value.clone());
        ensure!(tz.as_deref() == Some("Asia/Shanghai"), "TZ {tz:?}");
        eventually("status 1/1/1", TIMEOUT, || async {
            let s = sidecarsets.get(&name).await?.status.unwrap_or_default();
            Ok((s.matched_pods == 1 && s.updated_pods == 1 && s.ready_pods == 1).then_some(()))
        })
        .await?;

        set_image(&sidecarsets, &name, "log-service/logtail:0.16.18").await?;
        let after = eventually("logtail restarted on the new image", TIMEOUT, || async {
            let pod = pods.get("test-pod").await?;
            let done = restarts(&pod, "logtail") == 1
                && container_status(&pod, "logtail")
                    .is_some_and(|s| s.image == "log-service/logtail:0.16.18")
                && is_ready(&pod);
            Ok(done.then_some(pod))
        })
        .await?;
        ensure!(restarts(&after, "nginx") == 0, "nginx restarted");
        ensure!(
            after.metadata.uid == before.metadata.uid,
            "the Pod was recreated"
        );
        ensure!(pod_ip(&after) == pod_ip(&before) && node_name(&after) == node_name(&before));
        eventually("status updated 1, ready 1", TIMEOUT, || async {
            let s = sidecarsets.get(&name).await?.status.unwrap_or_default();
            Ok(
                (s.matched_pods == 1 && s.updated_pods == 1 && s.updated_ready_pods == 1)
                    .then_some(()),
            )
        })
        .await?;
        let listing = ns.kubectl(&["get", "pod", "test-pod"]).await?;
        ensure!(listing.contains("2/2"), "{listing}");
        sidecarsets.delete(&name, &Default::default()).await?;
        Ok(())
    })
    .await
}

/// The seed's partition example, scaled down as issue 5 states it: 50 Pods, partition 40 → exactly 10
/// upgraded; then no partition and maxUnavailable 10% → the rest, never more than 5 Pods unready at once.
#[tokio::test]
async fn partition_then_max_unavailable() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("ss-part").await?;
    let name = format!("logtail-{}", ns.name);
    ns.run(async {
        let sidecarsets: Api<SidecarSet> = Api::all(ns.client.clone());
        apply_logtail(
            &ns,
            &name,
            &json!({"app": "logs"}),
            json!({"updateStrategy": {"partition": 40, "maxUnavailable": "100%"}}),
        )
        .await?;
        ns.apply(
            &json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "logs"},
                "spec": {"replicas": 50, "selector": {"matchLabels": {"app": "logs"}},
                    "template": test_pod("x", json!({"app": "logs"}))
                        .as_object().map(|o| json!({"metadata": {"labels": {"app": "logs"}}, "spec": o["spec"].clone()}))
                        .context("template")?}
            })
            .to_string(),
        )
        .await?;
        let pods: Api<Pod> = ns.api();
        let list = || async {
            Ok::<_, anyhow::Error>(pods.list(&ListParams::default().labels("app=logs")).await?.items)
        };
        eventually("50 injected Pods Ready", TIMEOUT, || async {
            let l = list().await?;
            let ok = l.len() == 50
                && l.iter().all(|p| is_ready(p) && container_status(p, "logtail").is_some());
            Ok(ok.then_some(()))
        })
        .await?;
        set_image(&sidecarsets, &name, "log-service/logtail:0.16.18").await?;
        eventually("exactly 10 Pods upgraded", TIMEOUT, || async {
            let s = sidecarsets.get(&name).await?.status.unwrap_or_default();
            let upgraded = list()
                .await?
                .iter()
                .filter(|p| spec_image(p, LOGTAIL).ends_with("0.16.18"))
                .count();
            Ok((s.updated_pods == 10 && upgraded == 10 && s.updated_ready_pods == 10).then_some(()))
        })
        .await?;
        // Hold: nothing more is upgraded while the partition stands.
        let still = list()
            .await?
            .iter()
            .filter(|p| spec_image(p, LOGTAIL).ends_with("0.16.18"))
            .count();
        ensure!(still == 10, "partition crossed: {still}");

        let monitor = RolloutMonitor::start(
            ns.client.clone(),
            &ns.name,
            "app=logs",
            Limits {
                replicas: 50,
                max_unavailable: 5,
                max_surge: 0,
                min_old_revision_pods: None,
            },
        )
        .await?;
        sidecarsets
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"updateStrategy": {"partition": null, "maxUnavailable": "10%"}}})),
            )
            .await?;
        monitor
            .eventually("all 50 upgraded", TIMEOUT, || async {
                let s = sidecarsets.get(&name).await?.status.unwrap_or_default();
                Ok((s.updated_pods == 50 && s.updated_ready_pods == 50).then_some(()))
            })
            .await?;
        let stats = monitor.finish().await?;
        println!("partition rollout: {stats:?}");
        for pod in list().await? {
            ensure!(restarts(&pod, "nginx") == 0, "{:?} nginx restarted", pod.metadata.name);
        }
        sidecarsets.delete(&name, &Default::default()).await?;
        Ok(())
    })
    .await
}

/// Canary by selector, then NotUpdate and a non-image change: nothing is upgraded in place.
#[tokio::test]
async fn canary_selector_and_not_update() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("ss-canary").await?;
    let name = format!("logtail-{}", ns.name);
    ns.run(async {
        let sidecarsets: Api<SidecarSet> = Api::all(ns.client.clone());
        apply_logtail(
            &ns,
            &name,
            &json!({"app": "canary"}),
            json!({"updateStrategy": {"maxUnavailable": "100%",
                "selector": {"matchLabels": {"canary.release": "true"}}}}),
        )
        .await?;
        for (pod, canary) in [("a", true), ("b", false), ("c", false)] {
            ns.apply(&test_pod(
                pod,
                json!({"app": "canary", "canary.release": canary.to_string()}),
            )
            .to_string())
            .await?;
        }
        let pods: Api<Pod> = ns.api();
        eventually("3 injected Pods Ready", TIMEOUT, || async {
            let l = pods.list(&ListParams::default().labels("app=canary")).await?.items;
            Ok((l.len() == 3 && l.iter().all(is_ready)).then_some(()))
        })
        .await?;
        set_image(&sidecarsets, &name, "log-service/logtail:0.16.18").await?;
        eventually("the canary Pod upgraded", TIMEOUT, || async {
            let s = sidecarsets.get(&name).await?.status.unwrap_or_default();
            Ok((s.updated_pods == 1 && spec_image(&pods.get("a").await?, LOGTAIL).ends_with("0.16.18"))
                .then_some(()))
        })
        .await?;
        ensure!(spec_image(&pods.get("b").await?, LOGTAIL).ends_with("0.16.16"), "b upgraded outside the canary");

        // Remove the canary selector but set NotUpdate: still nothing more.
        sidecarsets
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"updateStrategy": {"selector": null, "type": "NotUpdate"}}})),
            )
            .await?;
        let gen_seen = eventually("status observes the change", TIMEOUT, || async {
            let ss = sidecarsets.get(&name).await?;
            let observed = ss.status.as_ref().map(|s| s.observed_generation);
            Ok((observed == ss.metadata.generation).then_some(()))
        })
        .await;
        gen_seen?;
        ensure!(spec_image(&pods.get("b").await?, LOGTAIL).ends_with("0.16.16"), "NotUpdate upgraded b");

        // RollingUpdate again: the rest follow.
        sidecarsets
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"updateStrategy": {"type": "RollingUpdate"}}})),
            )
            .await?;
        eventually("all upgraded", TIMEOUT, || async {
            let s = sidecarsets.get(&name).await?.status.unwrap_or_default();
            Ok((s.updated_pods == 3).then_some(()))
        })
        .await?;

        // A non-image change (command) cannot be made in place: no Pod changes.
        sidecarsets
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Json::<()>(serde_json::from_value(json!([
                    {"op": "replace", "path": "/spec/containers/0/command", "value": ["sh", "-c", "run"]}
                ]))?),
            )
            .await?;
        eventually("updatedPods drops to 0 (not upgradable)", TIMEOUT, || async {
            let s = sidecarsets.get(&name).await?.status.unwrap_or_default();
            Ok((s.updated_pods == 0 && s.matched_pods == 3).then_some(()))
        })
        .await?;
        // Each Pod says so in its SidecarSetUpgradable condition.
        for p in ["a", "b", "c"] {
            let pod = eventually("SidecarSetUpgradable False", TIMEOUT, || async {
                let pod = pods.get(p).await?;
                let falsy = kruise_e2e::pod_condition(&pod, "SidecarSetUpgradable")
                    .is_some_and(|c| c.status == "False");
                Ok(falsy.then_some(pod))
            })
            .await?;
            let condition = kruise_e2e::pod_condition(&pod, "SidecarSetUpgradable")
                .cloned()
                .unwrap_or_default();
            ensure!(condition.reason.as_deref() == Some("UpdateImmutableField"), "{condition:?}");
            let entries: Value = serde_json::from_str(condition.message.as_deref().unwrap_or("{}"))?;
            ensure!(entries == json!({name.clone(): false}), "{entries}");
            ensure!(restarts(&pod, "logtail") <= 1, "{p} restarted for a non-image change");
        }
        sidecarsets.delete(&name, &Default::default()).await?;
        Ok(())
    })
    .await
}
