//! CloneSet behaviour behind OpenKruise feature gates that are off by default, with this binary's
//! kruise-manager started with them on (`--feature-gates=PreparingUpdateAsUpdate=true`). Own test
//! binary: its manager owns the cluster's webhook configurations.

use std::time::Duration;

use anyhow::ensure;
use k8s_openapi::api::core::v1::Pod;
use kruise_e2e::cloneset_kit::runs_image;
use kruise_e2e::cloneset_kit::{
    active_pods, apply, cloneset, lifecycle_state, merge_patch, name, set_image, spec_image, uid,
    wait_converged,
};
use kruise_testkit::manager::ManagerOptions;
use kruise_testkit::{eventually, testbed};
use kube::api::Api;
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(60);
const IMAGE_A: &str = "nginx:alpine";
const IMAGE_B: &str = "nginx:1.19.1";
const HOOK: &str = "example.io/block-updating";

/// `PreparingUpdateAsUpdate`: a Pod held in PreparingUpdate by an inPlaceUpdate hook counts as
/// updated when scaling, so scaling in removes the old-revision Pod and keeps it.
#[tokio::test]
async fn preparing_update_counts_as_updated_when_scaling_in() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager_with(&ManagerOptions {
        extra_args: vec!["--feature-gates=PreparingUpdateAsUpdate=true".into()],
        ..ManagerOptions::default()
    });
    let ns = bed.namespace("cs-prepupd").await?;
    ns.run(async {
        let spec = json!({
            "updateStrategy": {"rollingUpdate": {"podUpdatePolicy": "InPlaceIfPossible",
                "partition": 1, "maxUnavailable": 1,
                "inPlaceUpdateStrategy": {"gracePeriodSeconds": 0}}},
            "lifecycle": {"inPlaceUpdate": {"labelsHandler": {HOOK: "true"}}},
            "template": {"metadata": {"labels": {HOOK: "true"}}},
        });
        apply(&ns, &cloneset("prep", 2, IMAGE_A, spec)).await?;
        wait_converged(&ns, "prep", 2, TIMEOUT).await?;
        set_image(&ns, "prep", IMAGE_B).await?;
        let pod_api: Api<Pod> = ns.api();
        let held = |p: &Pod| {
            lifecycle_state(p) == Some("PreparingUpdate")
                && spec_image(p).as_deref() == Some(IMAGE_A)
        };
        // partition 1: one Pod moves to PreparingUpdate, where the hook holds it.
        let (held_pod, old_pod) =
            eventually("one Pod held in PreparingUpdate", TIMEOUT, || async {
                let pods = active_pods(&pod_api, "app=prep").await?;
                let (h, o): (Vec<Pod>, Vec<Pod>) = pods.into_iter().partition(|p| held(p));
                Ok((h.len() == 1 && o.len() == 1).then(|| (h[0].clone(), o[0].clone())))
            })
            .await?;
        ensure!(
            lifecycle_state(&old_pod) != Some("PreparingUpdate"),
            "{} left Normal under partition 1",
            name(&old_pod)
        );

        // Scale in to 1 with every Pod due for the update: the held Pod counts as updated, so the
        // old-revision Pod is the one removed.
        merge_patch(
            &ns,
            "cloneset",
            "prep",
            &json!({"spec": {"replicas": 1, "updateStrategy": {"rollingUpdate": {"partition": 0}}}}),
        )
        .await?;
        eventually(
            &format!("{} removed, {} kept", name(&old_pod), name(&held_pod)),
            TIMEOUT,
            || async {
                let pods = active_pods(&pod_api, "app=prep").await?;
                let uids: Vec<String> = pods.iter().map(uid).collect();
                if uids.contains(&uid(&old_pod)) {
                    return Ok(None);
                }
                ensure!(
                    uids == [uid(&held_pod)],
                    "the held Pod was removed: Pods now {uids:?}"
                );
                Ok(Some(()))
            },
        )
        .await?;

        // Releasing the hook lets it finish its update in place.
        let held_name = name(&held_pod);
        ns.kubectl(&["label", "pod", &held_name, &format!("{HOOK}-")])
            .await?;
        let (_, after) = wait_converged(&ns, "prep", 1, TIMEOUT).await?;
        ensure!(
            after.iter().map(uid).collect::<Vec<_>>() == [uid(&held_pod)]
                && after
                    .iter()
                    .all(|p| runs_image(p, IMAGE_B)),
            "{:?}",
            after.iter().map(name).collect::<Vec<_>>()
        );
        Ok(())
    })
    .await
}
