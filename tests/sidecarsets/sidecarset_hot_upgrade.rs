//! SidecarSet hot upgrade end to end: a `HotUpgrade` sidecar runs as `<name>-1` (working) and
//! `<name>-2` (idle on the empty image); a new image starts in the idle container, becomes the working
//! one, and the old one is then reset to the empty image — the app container never restarts and the
//! Pod keeps its UID, IP and node.

use std::time::Duration;

use anyhow::ensure;
use k8s_openapi::api::core::v1::{Event, Pod};
use kruise_api::sidecarset::v1beta1::SidecarSet;
use kruise_e2e::same_image;
use kruise_e2e::sidecarset_kit::{restarts, spec_image, wait_upgradable};
use kruise_e2e::{container_status, is_ready, node_name, pod_ip, wait_injected_on_dry_run};
use kruise_testkit::{eventually, testbed};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(90);
const EMPTY: &str = "openkruise/hotupgrade-sample:empty";
const V1: &str = "openkruise/hotupgrade-sample:sidecarv1";
const V2: &str = "openkruise/hotupgrade-sample:sidecarv2";

fn sidecarset(name: &str, ns: &str) -> Value {
    json!({
        "apiVersion": "apps.kruise.io/v1beta1",
        "kind": "SidecarSet",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": "hot"}},
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
            "containers": [{
                "name": "sidecar",
                "image": V1,
                "upgradeStrategy": {"upgradeType": "HotUpgrade", "hotUpgradeEmptyImage": EMPTY},
            }],
        },
    })
}

fn pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "hot"}},
        "spec": {"containers": [{"name": "main", "image": "nginx:1.25"}]},
    })
}

fn annotation(pod: &Pod, key: &str) -> Option<String> {
    pod.metadata.annotations.as_ref()?.get(key).cloned()
}

/// The container that serves: `kruise.io/sidecarset-working-hotupgrade-container` for `sidecar`.
fn working(pod: &Pod) -> Option<String> {
    let map: Value = serde_json::from_str(&annotation(
        pod,
        "kruise.io/sidecarset-working-hotupgrade-container",
    )?)
    .ok()?;
    map.get("sidecar")?.as_str().map(str::to_owned)
}

fn running_image(pod: &Pod, container: &str) -> String {
    container_status(pod, container)
        .map(|s| s.image)
        .unwrap_or_default()
}

#[tokio::test]
async fn hot_upgrade_hands_over_to_the_idle_container() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("ss-hot").await?;
    let name = format!("hot-{}", ns.name);
    ns.run(async {
        let sidecarsets: Api<SidecarSet> = Api::all(ns.client.clone());
        let pods: Api<Pod> = ns.api();
        ns.apply(&sidecarset(&name, &ns.name).to_string()).await?;
        wait_injected_on_dry_run(
            &ns.client,
            &ns.name,
            &pod("dry"),
            TIMEOUT,
            &["sidecar-1", "sidecar-2", "main"],
        )
        .await?;
        ns.apply(&pod("app").to_string()).await?;

        // Injected: -1 works on v1, -2 idles on the empty image; versions "1" and "0".
        let before = eventually("app 3/3 Ready", TIMEOUT, || async {
            let p = pods.get("app").await?;
            Ok(is_ready(&p).then_some(p))
        })
        .await?;
        ensure!(spec_image(&before, "sidecar-1") == V1);
        ensure!(spec_image(&before, "sidecar-2") == EMPTY);
        ensure!(
            working(&before).as_deref() == Some("sidecar-1"),
            "{:?}",
            working(&before)
        );
        for (container, version) in [("sidecar-1", "1"), ("sidecar-2", "0")] {
            let key = format!("version.sidecarset.kruise.io/{container}");
            ensure!(
                annotation(&before, &key).as_deref() == Some(version),
                "{key}"
            );
        }
        eventually("status matched 1, ready 1", TIMEOUT, || async {
            let s = sidecarsets.get(&name).await?.status.unwrap_or_default();
            Ok((s.matched_pods == 1 && s.updated_pods == 1 && s.ready_pods == 1).then_some(()))
        })
        .await?;

        // New image: it starts in -2, -2 becomes the working one, then -1 is reset to empty.
        sidecarsets
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"containers": [{
                    "name": "sidecar", "image": V2,
                    "upgradeStrategy": {"upgradeType": "HotUpgrade", "hotUpgradeEmptyImage": EMPTY},
                }]}})),
            )
            .await?;
        let after = eventually(
            "v2 working in sidecar-2 and sidecar-1 reset",
            TIMEOUT,
            || async {
                let p = pods.get("app").await?;
                let done = spec_image(&p, "sidecar-2") == V2
                    && same_image(&running_image(&p, "sidecar-2"), V2)
                    && spec_image(&p, "sidecar-1") == EMPTY
                    && same_image(&running_image(&p, "sidecar-1"), EMPTY)
                    && working(&p).as_deref() == Some("sidecar-2")
                    && is_ready(&p);
                Ok(done.then_some(p))
            },
        )
        .await?;
        ensure!(restarts(&after, "main") == 0, "the app container restarted");
        ensure!(
            restarts(&after, "sidecar-2") == 1,
            "sidecar-2 restarts {}",
            restarts(&after, "sidecar-2")
        );
        ensure!(
            restarts(&after, "sidecar-1") == 1,
            "sidecar-1 restarts {}",
            restarts(&after, "sidecar-1")
        );
        ensure!(
            after.metadata.uid == before.metadata.uid,
            "the Pod was recreated"
        );
        ensure!(pod_ip(&after) == pod_ip(&before) && node_name(&after) == node_name(&before));
        let key = |c: &str| format!("version.sidecarset.kruise.io/{c}");
        ensure!(
            annotation(&after, &key("sidecar-1")).as_deref() == Some("0"),
            "sidecar-1 version {:?}",
            annotation(&after, &key("sidecar-1"))
        );
        let v2_version = annotation(&after, &key("sidecar-2")).unwrap_or_default();
        ensure!(
            !["", "0", "1"].contains(&v2_version.as_str()),
            "sidecar-2 version {v2_version:?}"
        );

        eventually("status updated 1, ready 1", TIMEOUT, || async {
            let s = sidecarsets.get(&name).await?.status.unwrap_or_default();
            Ok(
                (s.updated_pods == 1 && s.updated_ready_pods == 1 && s.ready_pods == 1)
                    .then_some(()),
            )
        })
        .await?;
        // As OpenKruise: the upgraded Pod says it stays upgradable.
        wait_upgradable(
            &pods,
            "app",
            "True",
            &json!({ name.clone(): true }),
            TIMEOUT,
        )
        .await?;
        let events: Api<Event> = ns.api();
        eventually(
            "a ResetContainerSucceed event on the Pod",
            TIMEOUT,
            || async {
                let list = events
                    .list(&ListParams::default().fields("involvedObject.name=app"))
                    .await?;
                Ok(list
                    .items
                    .iter()
                    .any(|e| e.reason.as_deref() == Some("ResetContainerSucceed"))
                    .then_some(()))
            },
        )
        .await?;
        sidecarsets.delete(&name, &DeleteParams::default()).await?;
        Ok(())
    })
    .await
}
