//! SidecarSet in-place sidecar upgrades, end to end (seed 001): the Pod webhook injects, the
//! controller upgrades only the sidecar's image, the app container never restarts.

use std::time::Duration;

use anyhow::{Context, ensure};
use k8s_openapi::api::core::v1::Pod;
use kruise_api::sidecarset::v1beta1::SidecarSet;
use kruise_e2e::same_image;
use kruise_e2e::sidecarset_kit::{
    LOGTAIL, apply_logtail, counts, logtail, restarts, set_image, spec_image, test_pod,
    upgradable_condition, wait_status, wait_upgradable,
};
use kruise_e2e::{container_status, is_ready, node_name, pod_ip};
use kruise_testkit::{Limits, eventually, testbed};
use kube::ResourceExt;
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
                    .is_some_and(|s| same_image(&s.image, "log-service/logtail:0.16.18"))
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

        let limits = Limits::replicas(50).max_unavailable(5);
        let monitor = ns.rollout_monitor("app=logs", limits).await?;
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
        // As OpenKruise: every Pod upgraded in place says so in its SidecarSetUpgradable condition.
        let entries = json!({ name.clone(): true });
        for pod in list().await? {
            wait_upgradable(&pods, &pod.name_any(), "True", &entries, TIMEOUT).await?;
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

/// Two SidecarSets on the Pods labelled `labels`: `s1`, seed 001's logtail, and `s2`, an `agent`
/// sidecar, both with `maxUnavailable`; returns once a dry-run Pod gets both injected.
async fn apply_two(
    ns: &kruise_testkit::TestNamespace,
    s1: &str,
    s2: &str,
    labels: &Value,
    max_unavailable: Value,
) -> anyhow::Result<()> {
    let strategy = json!({"updateStrategy": {"maxUnavailable": max_unavailable}});
    apply_logtail(ns, s1, labels, strategy.clone()).await?;
    let mut spec = json!({
        "selector": {"matchLabels": labels},
        "containers": [{"name": "agent", "image": "agent:1", "command": ["agent"]}],
        "volumes": [],
    });
    json_patch::merge(&mut spec, &strategy);
    ns.apply(&logtail(s2, &ns.name, json!({ "spec": spec }))?.to_string())
        .await?;
    kruise_e2e::wait_dry_run(
        &ns.client,
        &ns.name,
        &test_pod("dry-run", labels.clone()),
        TIMEOUT,
        "both SidecarSets injecting on a dry run".into(),
        |pod| {
            let mut names = kruise_e2e::container_names(pod);
            names.sort();
            names == ["agent", LOGTAIL, "nginx"]
        },
    )
    .await
}

/// Issue 16: `SidecarSetUpgradable` as OpenKruise writes it, with two SidecarSets on the same Pods
/// while kubelet-sim rewrites every Pod's status each 100 ms. s1's non-image change marks the Pods
/// `False` with `{"s1": false}`; s2's image upgrade meanwhile adds its own `true` entry and leaves the
/// condition False; reverting s1's change (with a new image) upgrades the Pods and turns the
/// condition back to `True` with both entries `true`.
#[tokio::test]
async fn two_sidecarsets_upgradable_condition_under_busy_status() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("ss-two").await?;
    let mut cleanup = kruise_e2e::Cleanup::new();
    ns.run(async {
        let s1 = format!("s1-{}", ns.name);
        let s2 = format!("s2-{}", ns.name);
        cleanup.sidecarset(&s1);
        cleanup.sidecarset(&s2);
        let labels = json!({"app": "two"});
        apply_two(&ns, &s1, &s2, &labels, json!("100%")).await?;
        // The Pods keep kubelet-sim writing their status every 100 ms from the start.
        let busy = |name: &str| {
            let mut pod = test_pod(name, labels.clone());
            pod["metadata"]["annotations"] = json!({"sim.kruise-rs.io/status-churn-ms": "100"});
            pod
        };
        ns.apply(&json!({"apiVersion": "v1", "kind": "List", "items": [busy("a"), busy("b")]}).to_string())
            .await?;
        let sidecarsets: Api<SidecarSet> = Api::all(ns.client.clone());
        let pods: Api<Pod> = ns.api();
        let counted = |ss: String, want: i32| {
            let sidecarsets = sidecarsets.clone();
            async move {
                eventually(&format!("{ss}: {want} Pods updated and ready"), TIMEOUT, || async {
                    let s = sidecarsets.get(&ss).await?.status.unwrap_or_default();
                    let obs = sidecarsets.get(&ss).await?.metadata.generation.unwrap_or(0);
                    Ok((s.observed_generation == obs
                        && s.matched_pods == 2
                        && s.updated_pods == want
                        && s.updated_ready_pods == want)
                        .then_some(()))
                })
                .await
            }
        };
        counted(s1.clone(), 2).await?;
        counted(s2.clone(), 2).await?;
        let before = pods.get("a").await?;
        // Injected with the current sidecars and never refused: no condition yet, as OpenKruise.
        ensure!(upgradable_condition(&before)?.is_none(), "{:?}", upgradable_condition(&before)?);
        // The status really is busy: the churn counter moves.
        let churn = |p: &Pod| {
            kruise_e2e::pod_condition(p, "sim.kruise-rs.io/StatusChurn").and_then(|c| c.message.clone())
        };
        let first = eventually("a's status churning", TIMEOUT, || async {
            Ok(churn(&pods.get("a").await?))
        })
        .await?;
        eventually("a's status written again", TIMEOUT, || async {
            let now = churn(&pods.get("a").await?);
            Ok(now.filter(|m| m != &first).map(|_| ()))
        })
        .await?;

        // s1 changes a non-image field: not upgradable.
        let command = |value: Value| -> anyhow::Result<Patch<()>> {
            Ok(Patch::Json(serde_json::from_value(json!([
                {"op": "replace", "path": "/spec/containers/0/command", "value": value}
            ]))?))
        };
        let original = json!(["sh", "-c", "/usr/local/ilogtail/run_logtail.sh 10"]);
        sidecarsets
            .patch(&s1, &PatchParams::default(), &command(json!(["sh", "-c", "run"]))?)
            .await?;
        for p in ["a", "b"] {
            wait_upgradable(&pods, p, "False", &json!({ s1.clone(): false }), TIMEOUT).await?;
        }
        // s2 upgrades its image meanwhile: its entry is true, the condition stays False.
        set_image(&sidecarsets, &s2, "agent:2").await?;
        counted(s2.clone(), 2).await?;
        for p in ["a", "b"] {
            wait_upgradable(
                &pods,
                p,
                "False",
                &json!({ s1.clone(): false, s2.clone(): true }),
                TIMEOUT,
            )
            .await?;
        }
        // s1 reverts its change and moves to a new image: upgraded in place, condition True.
        let revert: Patch<()> = Patch::Json(serde_json::from_value(json!([
            {"op": "replace", "path": "/spec/containers/0/command", "value": original},
            {"op": "replace", "path": "/spec/containers/0/image", "value": "log-service/logtail:0.16.18"},
        ]))?);
        sidecarsets.patch(&s1, &PatchParams::default(), &revert).await?;
        counted(s1.clone(), 2).await?;
        let both = json!({ s1.clone(): true, s2.clone(): true });
        for p in ["a", "b"] {
            let pod = wait_upgradable(&pods, p, "True", &both, TIMEOUT).await?;
            ensure!(spec_image(&pod, LOGTAIL) == "log-service/logtail:0.16.18", "{p}: logtail not upgraded");
            ensure!(spec_image(&pod, "agent") == "agent:2", "{p}: agent not upgraded");
            ensure!(restarts(&pod, "nginx") == 0, "{p}: nginx restarted");
        }
        let after = pods.get("a").await?;
        ensure!(after.metadata.uid == before.metadata.uid, "a was recreated");
        ensure!(churn(&after) != Some(first), "the status stopped churning");
        Ok(())
    })
    .await
}

/// The Pods' `SidecarSetUpgradable` conditions read the moment a SidecarSet's status settles: every
/// Pod of `names` carries the condition with `status` (never missing), and OpenKruise's reason.
async fn upgradable_now(
    pods: &Api<Pod>,
    names: &[&str],
    status: &str,
) -> anyhow::Result<Vec<(String, Value)>> {
    let mut entries = Vec::new();
    for p in names {
        let pod = pods.get(p).await?;
        let found = upgradable_condition(&pod)?;
        let Some((s, reason, e)) = found else {
            anyhow::bail!("{p}: no SidecarSetUpgradable condition when the status settled");
        };
        let wanted_reason = if status == "True" {
            "AllSidecarsetUpgradable"
        } else {
            "UpdateImmutableField"
        };
        ensure!(
            s == status && reason == wanted_reason,
            "{p}: SidecarSetUpgradable {s} ({reason}) {e} when the status settled, not {status}"
        );
        entries.push((p.to_string(), e));
    }
    Ok(entries)
}

/// OpenKruise v1.9.0's `sidecarSet upgrade sidecar container (more than image field), no pod should be
/// updated` (test/e2e/apps/v1beta1/sidecarset.go): a change of more than the image is not applied to
/// the Pod, and the moment the status says so (1 matched, 0 updated) the Pod's condition is already
/// `SidecarSetUpgradable=False`; a Pod created afterwards gets the change at injection and takes the
/// next image change in place, the old one does not.
#[tokio::test]
async fn more_than_image_changed_the_condition_is_false_when_the_status_settles()
-> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("ss-immutable").await?;
    let name = format!("logtail-{}", ns.name);
    let mut cleanup = kruise_e2e::Cleanup::new();
    cleanup.sidecarset(&name);
    ns.run(async {
        let labels = json!({"app": "immutable"});
        apply_logtail(&ns, &name, &labels, json!({"updateStrategy": {"type": "RollingUpdate"}}))
            .await?;
        let sidecarsets: Api<SidecarSet> = Api::all(ns.client.clone());
        let pods: Api<Pod> = ns.api();
        ns.apply(&test_pod("a", labels.clone()).to_string()).await?;
        wait_status(&sidecarsets, &name, "1 Pod updated and ready", TIMEOUT, |s| {
            counts(s) == (1, 1, 1, 1)
        })
        .await?;

        // An env var: more than the image.
        let env: Patch<()> = Patch::Json(serde_json::from_value(json!([
            {"op": "add", "path": "/spec/containers/0/env", "value": [{"name": "version", "value": "v2"}]}
        ]))?);
        sidecarsets.patch(&name, &PatchParams::default(), &env).await?;
        wait_status(&sidecarsets, &name, "matched 1, updated 0, ready 1", TIMEOUT, |s| {
            counts(s) == (1, 0, 1, 0)
        })
        .await?;
        let entries = upgradable_now(&pods, &["a"], "False").await?;
        ensure!(entries[0].1 == json!({ name.clone(): false }), "{entries:?}");
        ensure!(
            spec_image(&pods.get("a").await?, LOGTAIL) == "log-service/logtail:0.16.16",
            "a was changed"
        );

        // A second Pod is injected with the env var; the next image change reaches it only.
        ns.apply(&test_pod("b", labels.clone()).to_string()).await?;
        wait_status(&sidecarsets, &name, "b injected with the current sidecars", TIMEOUT, |s| {
            counts(s) == (2, 1, 2, 1)
        })
        .await?;
        set_image(&sidecarsets, &name, "log-service/logtail:0.16.18").await?;
        wait_status(&sidecarsets, &name, "matched 2, updated 1, ready 2", TIMEOUT, |s| {
            counts(s) == (2, 1, 2, 1)
        })
        .await?;
        ensure!(
            spec_image(&pods.get("b").await?, LOGTAIL) == "log-service/logtail:0.16.18",
            "b not upgraded"
        );
        let a = pods.get("a").await?;
        ensure!(spec_image(&a, LOGTAIL) == "log-service/logtail:0.16.16", "a upgraded");
        ensure!(restarts(&a, LOGTAIL) == 0, "a's sidecar restarted");
        Ok(())
    })
    .await
}

/// OpenKruise v1.9.0's `multi sidecarSet upgrade sidecar container, check pod condition`
/// (test/e2e/apps/v1beta1/sidecarset.go): with s1's non-image change pending, s2's image upgrade
/// settles with the Pods' condition False; once s1 reverts it and moves to a new image, the moment s1's
/// status says both Pods are updated and ready their condition is already True.
#[tokio::test]
async fn multi_sidecarset_condition_is_true_when_the_status_settles() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("ss-multi").await?;
    let s1 = format!("s1-{}", ns.name);
    let s2 = format!("s2-{}", ns.name);
    let mut cleanup = kruise_e2e::Cleanup::new();
    cleanup.sidecarset(&s1);
    cleanup.sidecarset(&s2);
    ns.run(async {
        let labels = json!({"app": "multi"});
        apply_two(&ns, &s1, &s2, &labels, json!(1)).await?;
        ns.apply(
            &json!({"apiVersion": "v1", "kind": "List",
                    "items": [test_pod("a", labels.clone()), test_pod("b", labels.clone())]})
            .to_string(),
        )
        .await?;
        let sidecarsets: Api<SidecarSet> = Api::all(ns.client.clone());
        let pods: Api<Pod> = ns.api();
        for ss in [&s1, &s2] {
            wait_status(&sidecarsets, ss, "2 Pods updated and ready", TIMEOUT, |s| {
                counts(s) == (2, 2, 2, 2)
            })
            .await?;
        }

        // s1 changes its command: nothing is updated.
        let command = |value: Value| -> anyhow::Result<Patch<()>> {
            Ok(Patch::Json(serde_json::from_value(json!([
                {"op": "replace", "path": "/spec/containers/0/command", "value": value}
            ]))?))
        };
        sidecarsets
            .patch(&s1, &PatchParams::default(), &command(json!(["sleep", "1000"]))?)
            .await?;
        wait_status(&sidecarsets, &s1, "matched 2, updated 0", TIMEOUT, |s| {
            counts(s) == (2, 0, 2, 0)
        })
        .await?;

        // s2 changes its image only: both Pods are upgraded; s1 still cannot, so the condition is
        // False when s2's status settles.
        set_image(&sidecarsets, &s2, "agent:2").await?;
        wait_status(&sidecarsets, &s2, "2 Pods upgraded and ready", TIMEOUT, |s| {
            counts(s) == (2, 2, 2, 2)
        })
        .await?;
        upgradable_now(&pods, &["a", "b"], "False").await?;

        // s1 goes back to its command with a new image: upgraded in place, and the condition is
        // True when s1's status settles.
        let revert: Patch<()> = Patch::Json(serde_json::from_value(json!([
            {"op": "replace", "path": "/spec/containers/0/command",
             "value": ["sh", "-c", "/usr/local/ilogtail/run_logtail.sh 10"]},
            {"op": "replace", "path": "/spec/containers/0/image", "value": "log-service/logtail:0.16.18"},
        ]))?);
        sidecarsets.patch(&s1, &PatchParams::default(), &revert).await?;
        wait_status(&sidecarsets, &s1, "2 Pods upgraded and ready", TIMEOUT, |s| {
            counts(s) == (2, 2, 2, 2)
        })
        .await?;
        for (p, entries) in upgradable_now(&pods, &["a", "b"], "True").await? {
            ensure!(
                entries == json!({ s1.clone(): true, s2.clone(): true }),
                "{p}: {entries}"
            );
        }
        for p in ["a", "b"] {
            let pod = pods.get(p).await?;
            ensure!(spec_image(&pod, LOGTAIL) == "log-service/logtail:0.16.18", "{p}: logtail");
            ensure!(spec_image(&pod, "agent") == "agent:2", "{p}: agent");
            ensure!(restarts(&pod, "nginx") == 0, "{p}: nginx restarted");
        }
        Ok(())
    })
    .await
}
