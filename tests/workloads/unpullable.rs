//! Rollouts to an image that cannot be pulled (a registry host that does not resolve; kubelet-sim
//! reports `ErrImagePull`, then `ImagePullBackOff`, as a kubelet does): a CloneSet stops at
//! maxUnavailable and reports ProgressDeadlineExceeded; a SidecarSet upgrades only maxUnavailable Pods
//! and stops.

use std::time::Duration;

use anyhow::ensure;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kruise_api::cloneset::v1beta1::CloneSet;
use kruise_api::sidecarset::v1beta1::SidecarSet;
use kruise_e2e::cloneset_kit::{
    active_pods, apply, cloneset, condition, holds, set_image, spec_image, status, wait_converged,
};
use kruise_e2e::container_status;
use kruise_e2e::sidecarset_kit::{self, LOGTAIL, logtail_over_ready_pods};
use kruise_testkit::{Limits, eventually, managed_namespace};
use kube::api::{Api, ListParams};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);
const GOOD: &str = "nginx:alpine";
const UNPULLABLE: &str = "invalid.registry.k8s.io/nginx:1.19.1";

fn pull_failure(status: Option<ContainerStatus>) -> Option<String> {
    let reason = status?.state?.waiting?.reason?;
    matches!(reason.as_str(), "ErrImagePull" | "ImagePullBackOff").then_some(reason)
}

#[tokio::test]
async fn cloneset_rollout_to_an_unpullable_image_stops_at_max_unavailable() -> anyhow::Result<()> {
    let ns = managed_namespace("cs-unpullable").await?;
    ns.run(async {
        let spec = json!({
            "progressDeadlineSeconds": 10,
            "updateStrategy": {"rollingUpdate": {
                "podUpdatePolicy": "InPlaceIfPossible",
                "maxUnavailable": 2
            }},
        });
        apply(&ns, &cloneset("pull", 5, GOOD, spec)).await?;
        wait_converged(&ns, "pull", 5, TIMEOUT).await?;
        let limits = Limits::replicas(5).max_unavailable(2);
        let monitor = ns.rollout_monitor("app=pull", limits).await?;
        set_image(&ns, "pull", UNPULLABLE).await?;

        let clonesets: Api<CloneSet> = ns.api();
        let cs = monitor
            .eventually(
                "Progressing False ProgressDeadlineExceeded",
                Duration::from_secs(60),
                || async {
                    let cs = clonesets.get("pull").await?;
                    let progressing =
                        condition(&cs, "Progressing").map(|c| (c.status.clone(), c.reason.clone()));
                    Ok(
                        (progressing == Some(("False".into(), "ProgressDeadlineExceeded".into())))
                            .then_some(cs),
                    )
                },
            )
            .await?;
        let s = status(&cs);
        ensure!(
            s.updated_replicas == 2 && s.updated_ready_replicas == 0 && s.ready_replicas == 3,
            "the rollout must stop at maxUnavailable (2) Pods that cannot pull: {s:?}"
        );
        let pods: Api<Pod> = ns.api();
        holds(
            "exactly 2 Pods stuck pulling, 3 untouched",
            Duration::from_secs(6),
            || async {
                monitor.check()?;
                let list = active_pods(&pods, "app=pull").await?;
                let stuck: Vec<String> = list
                    .iter()
                    .filter(|p| spec_image(p).as_deref() == Some(UNPULLABLE))
                    .filter_map(|p| pull_failure(container_status(p, "nginx")))
                    .collect();
                let untouched = list
                    .iter()
                    .filter(|p| spec_image(p).as_deref() == Some(GOOD))
                    .count();
                Ok(list.len() == 5 && stuck.len() == 2 && untouched == 3)
            },
        )
        .await?;
        monitor.finish().await?;
        Ok(())
    })
    .await
}

#[tokio::test]
async fn sidecarset_upgrade_to_an_unpullable_image_stops_at_max_unavailable() -> anyhow::Result<()>
{
    let ns = managed_namespace("ss-unpullable").await?;
    let name = format!("logtail-{}", ns.name);
    ns.run(async {
        logtail_over_ready_pods(&ns, &name, "pull-sidecar", 3).await?;
        let pods: Api<Pod> = ns.api();
        let selector = ListParams::default().labels("app=pull-sidecar");

        let sidecarsets: Api<SidecarSet> = Api::all(ns.client.clone());
        sidecarset_kit::set_image(&sidecarsets, &name, UNPULLABLE).await?;
        eventually("one Pod's sidecar stuck pulling", TIMEOUT, || async {
            let list = pods.list(&selector).await?.items;
            let stuck = list
                .iter()
                .filter(|p| pull_failure(container_status(p, LOGTAIL)).is_some())
                .count();
            Ok((stuck == 1).then_some(()))
        })
        .await?;
        holds(
            "only maxUnavailable (1) Pod upgraded",
            Duration::from_secs(8),
            || async {
                let list = pods.list(&selector).await?.items;
                let upgraded = list
                    .iter()
                    .filter(|p| sidecarset_kit::spec_image(p, LOGTAIL) == UNPULLABLE)
                    .count();
                let ready = list.iter().filter(|p| kruise_e2e::is_ready(p)).count();
                Ok(list.len() == 3 && upgraded == 1 && ready == 2)
            },
        )
        .await?;
        let ss = sidecarsets.get(&name).await?;
        let s = sidecarset_kit::status(&ss);
        ensure!(
            s.matched_pods == 3 && s.updated_pods == 1 && s.updated_ready_pods == 0,
            "status: {s:?}"
        );
        Ok(())
    })
    .await
}
