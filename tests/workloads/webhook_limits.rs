//! The webhook server against what a real apiserver sends at the edges (issue 10): a CloneSet over
//! 1 MiB is created, updated and scaled (an UPDATE review carries it twice), and a SidecarSet whose
//! `resourcesExpr` nests 1,000 (or 400) parentheses deep is refused, naming the field, while the
//! manager lives on.

use std::time::Duration;

use anyhow::{Context, bail, ensure};
use kruise_api::cloneset::v1beta1::CloneSet;
use kruise_api::sidecarset::v1beta1::SidecarSet;
use kruise_e2e::cloneset_kit::{cloneset, merge_patch, spec_image, wait_converged};
use kruise_testkit::manager::http_get;
use kruise_testkit::{managed_namespace, testbed};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(90);

/// etcd's default request limit is 1.5 MiB; the apiserver's 3 MiB. 1.2 MiB fits both, and an UPDATE
/// review (object + oldObject) is over 2.4 MiB: above the 2 MiB that used to be refused with 413.
const PAD_BYTES: usize = 1200 * 1024;

#[tokio::test]
async fn a_cloneset_over_one_mib_is_created_updated_and_scaled() -> anyhow::Result<()> {
    let ns = managed_namespace("wh-big").await?;
    ns.run(async {
        let mut doc = cloneset("big", 1, "nginx:alpine", json!({}));
        doc["spec"]["template"]["spec"]["containers"][0]["env"] =
            json!([{"name": "PAD", "value": "x".repeat(PAD_BYTES)}]);
        let size = doc.to_string().len();
        ensure!(size > 1200 * 1024, "the CloneSet is {size} bytes");
        // Through the API, not `kubectl apply`: its last-applied annotation would exceed the 256 KiB
        // annotation limit.
        let api: Api<CloneSet> = ns.api();
        let typed: CloneSet = serde_json::from_value(doc).context("typed CloneSet")?;
        api.create(&PostParams::default(), &typed)
            .await
            .context("creating the 1.2 MiB CloneSet")?;
        wait_converged(&ns, "big", 1, TIMEOUT).await?;

        // A JSON patch of the image alone: a merge patch (`set_image`) would replace the container
        // list and drop the padding, and the update would no longer be large.
        let image = json!([{"op": "replace", "path": "/spec/template/spec/containers/0/image",
            "value": "nginx:1.19.1"}]);
        let image: json_patch::Patch = serde_json::from_value(image)?;
        api.patch("big", &PatchParams::default(), &Patch::Json::<()>(image))
            .await
            .context("patching the image of the 1.2 MiB CloneSet")?;
        merge_patch(&ns, "cloneset", "big", &json!({"spec": {"replicas": 2}}))
            .await
            .context("scaling the 1.2 MiB CloneSet")?;
        let (cs, pods) = wait_converged(&ns, "big", 2, TIMEOUT).await?;
        for pod in &pods {
            let image = spec_image(pod);
            ensure!(
                image.as_deref() == Some("nginx:1.19.1"),
                "{:?} runs {image:?}",
                pod.metadata.name
            );
        }
        let stored = serde_json::to_string(&cs)?.len();
        ensure!(stored > PAD_BYTES, "the stored CloneSet is only {stored} bytes");
        eprintln!(
            "largest object admitted: a CloneSet of {stored} bytes, updated twice (reviews of > {} bytes)",
            2 * stored
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_deeply_nested_resources_expr_is_refused_and_the_manager_lives() -> anyhow::Result<()> {
    let bed = testbed();
    let ports = bed.manager();
    let ns = bed.namespace("wh-deep").await?;
    ns.run(async {
        let api: Api<SidecarSet> = Api::all(ns.client.clone());
        // Cluster-scoped: restricted to this test's namespace, so that no other test's SidecarSet
        // with a container of the same name overlaps it (the webhook would refuse the sound one).
        let sidecarset = |name: &str, cpu: String| -> anyhow::Result<SidecarSet> {
            Ok(serde_json::from_value(json!({
                "apiVersion": "apps.kruise.io/v1beta1", "kind": "SidecarSet",
                "metadata": {"name": name},
                "spec": {
                    "selector": {"matchLabels": {"app": name}},
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns.name}},
                    "containers": [{
                        "name": "sidecar", "image": "busybox:1",
                        "resourcesPolicy": {
                            "targetContainersMode": "sum",
                            "resourcesExpr": {"limits": {"cpu": cpu}}
                        }
                    }]
                }
            }))?)
        };
        let field = "spec.containers[0].resourcesPolicy.resourcesExpr.limits.cpu";
        // 1,000 deep (2 KB): refused by the CRD schema's maxLength. 400 deep (803 bytes): within the
        // length, refused by the validating webhook's depth bound. Neither may crash the manager.
        for (depth, expect) in [(1000, "Too long"), (400, "nested deeper than 32")] {
            let name = format!("{}-deep{depth}", ns.name);
            let cpu = format!("{}cpu{}", "(".repeat(depth), ")".repeat(depth));
            let refused = api
                .create(&PostParams::default(), &sidecarset(&name, cpu)?)
                .await;
            let message = match refused {
                Err(kube::Error::Api(status)) => status.message,
                Err(other) => bail!("{depth} deep: unexpected error {other}"),
                Ok(_) => {
                    let _ = api.delete(&name, &Default::default()).await;
                    bail!("a SidecarSet with a {depth}-deep resourcesExpr was admitted")
                }
            };
            ensure!(
                message.contains(field) && message.contains(expect),
                "{depth} deep: {message}"
            );
            let (code, body) = http_get(ports.health, "/healthz").await?;
            ensure!(code == 200, "manager healthz {code}: {body}");
        }
        // And still admits a sound one (dry run: nothing to clean up).
        let dry_run = PostParams {
            dry_run: true,
            ..Default::default()
        };
        let name = format!("{}-sound", ns.name);
        api.create(&dry_run, &sidecarset(&name, "max(cpu * 50%, 50m)".into())?)
            .await
            .context("a sound SidecarSet after the deep ones")?;
        Ok(())
    })
    .await
}
