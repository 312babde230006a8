//! A Pod webhook that cannot block the cluster: with kruise-manager down and the default failure
//! policy (Ignore), Pods are still created (without their sidecars); once a manager is back, the
//! missed injections are reported — SidecarSet `status.missedInjectionPods`, a `SidecarMissing`
//! Warning Event on the Pod, and the `kruise_sidecarset_missed_injection_pods` metric.
//!
//! Its own test binary: it kills and restarts the manager of its control plane.

use std::time::Duration;

use anyhow::ensure;
use k8s_openapi::api::core::v1::Pod;
use kruise_api::sidecarset::v1beta1::SidecarSet;
use kruise_e2e::{container_names, wait_injected_on_dry_run};
use kruise_testkit::manager::{self, ManagerOptions, http_get};
use kruise_testkit::{eventually, testbed};
use kube::api::{Api, PostParams};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);

#[tokio::test]
async fn pods_created_while_the_webhook_is_down_are_reported() -> anyhow::Result<()> {
    let bed = testbed();
    let ns = bed.namespace("ss-down").await?;
    ns.run(async {
        manager::ensure_namespace(&bed.plane).await?;
        let options = |name: &str| ManagerOptions {
            name: name.into(),
            leader_election_id: "kruise-manager-down".into(),
            lease_seconds: 4,
            extra_args: Vec::new(),
            ..Default::default()
        };
        let first = manager::spawn(&bed.plane, &options("manager-1"))?;
        manager::wait_serving(&bed.plane, &first, TIMEOUT).await?;

        let name = format!("probe-{}", ns.name);
        ns.apply(
            &json!({
                "apiVersion": "apps.kruise.io/v1beta1", "kind": "SidecarSet",
                "metadata": {"name": name},
                "spec": {
                    "selector": {"matchLabels": {"app": "web"}},
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns.name}},
                    "containers": [{"name": "probe", "image": "probe:1"}],
                }
            })
            .to_string(),
        )
        .await?;
        let pod = |n: &str| {
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": n, "labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app", "image": "nginx:alpine"}]},
            })
        };
        wait_injected_on_dry_run(
            &ns.client,
            &ns.name,
            &pod("dry"),
            TIMEOUT,
            &["probe", "app"],
        )
        .await?;

        // The manager dies; the webhook is unreachable; the Pod is still created.
        bed.plane.stop_process("manager-1", true);
        let pods: Api<Pod> = ns.api();
        let created = eventually(
            "the Pod is admitted without the webhook",
            TIMEOUT,
            || async {
                let p: Pod = serde_json::from_value(pod("lonely"))?;
                match pods.create(&PostParams::default(), &p).await {
                    Ok(p) => Ok(Some(p)),
                    // The apiserver may still route to the dying webhook for a moment.
                    Err(kube::Error::Api(status)) if status.code >= 500 => Ok(None),
                    Err(e) => Err(e.into()),
                }
            },
        )
        .await?;
        ensure!(
            container_names(&created) == ["app"],
            "created without the sidecar: {:?}",
            container_names(&created)
        );

        // A manager comes back and reports what was missed.
        let second = manager::spawn(&bed.plane, &options("manager-2"))?;
        manager::wait_serving(&bed.plane, &second, TIMEOUT).await?;
        let sidecarsets: Api<SidecarSet> = Api::all(ns.client.clone());
        eventually("status.missedInjectionPods 1", TIMEOUT, || async {
            let status = sidecarsets.get(&name).await?.status.unwrap_or_default();
            Ok((status.missed_injection_pods == 1 && status.matched_pods == 0).then_some(()))
        })
        .await?;
        let events = eventually("a SidecarMissing event on the Pod", TIMEOUT, || async {
            let out = ns
                .kubectl(&[
                    "get",
                    "events",
                    "--field-selector",
                    "involvedObject.name=lonely,reason=SidecarMissing",
                ])
                .await?;
            Ok(out.contains("SidecarMissing").then_some(out))
        })
        .await?;
        ensure!(events.contains(&name), "{events}");
        let (_, metrics) = http_get(second.metrics, "/metrics").await?;
        let line = format!("kruise_sidecarset_missed_injection_pods{{sidecarset=\"{name}\"}} 1");
        ensure!(metrics.contains(&line), "no {line} in /metrics");
        sidecarsets.delete(&name, &Default::default()).await?;
        Ok(())
    })
    .await
}
