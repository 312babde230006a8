//! What the real apiserver answers a write decided on a view the cluster has left behind, and how
//! the controllers read it (`kruise_controllers::error::is_race`): a JSON patch whose `test` fails
//! or whose path is gone, a stale resourceVersion and a deleted object are races (decide again on a
//! fresh view, quietly); a write the apiserver finds invalid is not.

use anyhow::ensure;
use k8s_openapi::api::core::v1::Pod;
use kruise_controllers::error::is_race;
use kruise_testkit::testbed;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

#[tokio::test]
async fn a_write_on_a_moved_object_is_a_race_and_an_invalid_write_is_not() -> anyhow::Result<()> {
    let bed = testbed();
    let ns = bed.namespace("refusals").await?;
    ns.run(async {
        let pods: Api<Pod> = ns.api();
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "a", "labels": {"app": "a"}},
            "spec": {"containers": [{"name": "c", "image": "nginx:alpine"}]},
        }))?;
        let created = pods.create(&PostParams::default(), &pod).await?;
        let stale = created
            .metadata
            .resource_version
            .clone()
            .unwrap_or_default();
        // The Pod moves on (a label, as another writer would).
        pods.patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {"moved": "yes"}}})),
        )
        .await?;
        let json_patch = |ops: serde_json::Value| -> anyhow::Result<Patch<()>> {
            Ok(Patch::Json(serde_json::from_value(ops)?))
        };
        // (what, the write, a race)
        let cases = [
            (
                "a failed resourceVersion test",
                json_patch(json!([
                    {"op": "test", "path": "/metadata/resourceVersion", "value": stale},
                    {"op": "add", "path": "/metadata/labels/x", "value": "1"},
                ]))?,
                "a",
                true,
            ),
            (
                "a replace of a path that is gone",
                json_patch(json!([
                    {"op": "replace", "path": "/metadata/annotations/gone", "value": "1"},
                ]))?,
                "a",
                true,
            ),
            (
                "an object deleted",
                json_patch(json!([{"op": "add", "path": "/metadata/labels/x", "value": "1"}]))?,
                "never-created",
                true,
            ),
            (
                "a forbidden change of the Pod spec",
                json_patch(json!([
                    {"op": "replace", "path": "/spec/containers/0/name", "value": "renamed"},
                ]))?,
                "a",
                false,
            ),
        ];
        for (what, patch, name, race) in cases {
            let error = match pods.patch(name, &PatchParams::default(), &patch).await {
                Ok(_) => anyhow::bail!("{what}: the write was accepted"),
                Err(error) => error,
            };
            println!("{what}: {error:?}");
            ensure!(
                is_race(&error) == race,
                "{what}: is_race should be {race}: {error:?}"
            );
        }
        // A merge patch carrying a resourceVersion the object has left: 409.
        let conflict = pods
            .patch(
                "a",
                &PatchParams::default(),
                &Patch::Merge(
                    &json!({"metadata": {"resourceVersion": stale, "labels": {"x": "1"}}}),
                ),
            )
            .await;
        ensure!(
            conflict.as_ref().is_err_and(is_race),
            "a stale resourceVersion is a race: {conflict:?}"
        );
        Ok(())
    })
    .await
}
