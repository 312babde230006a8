//! SidecarSet history end to end: ControllerRevisions in kruise-manager's namespace, `latestRevision`
//! and `collisionCount` in the status, the revision a Pod records, injection pinned to an older
//! revision, roll back, history truncation and garbage collection with the SidecarSet.

use std::time::Duration;

use anyhow::{Context, ensure};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kruise_api::sidecarset::v1beta1::SidecarSet;
use kruise_e2e::sidecarset_kit::spec_image;
use kruise_e2e::{is_ready, wait_injected_on_dry_run};
use kruise_testkit::manager::NAMESPACE as MANAGER_NAMESPACE;
use kruise_testkit::{TestNamespace, eventually, testbed};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(60);

fn sidecarset(name: &str, ns: &str, app: &str, image: &str, extra: Value) -> Value {
    let mut doc = json!({
        "apiVersion": "apps.kruise.io/v1beta1",
        "kind": "SidecarSet",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": app}},
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
            "containers": [{"name": "logtail", "image": image}],
        },
    });
    json_patch::merge(&mut doc, &extra);
    doc
}

fn pod(name: &str, app: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {"containers": [{"name": "nginx", "image": "nginx:1.25"}]},
    })
}

/// The revisions of SidecarSet `name`, oldest first.
async fn revisions(
    api: &Api<ControllerRevision>,
    name: &str,
) -> anyhow::Result<Vec<ControllerRevision>> {
    let mut list = api
        .list(&ListParams::default().labels(&format!("kruise.io/sidecarset-name={name}")))
        .await?
        .items;
    list.sort_by_key(|r| r.revision);
    Ok(list)
}

/// The `controllerRevision` the Pod records for SidecarSet `name`.
fn recorded_revision(pod: &Pod, name: &str) -> Option<String> {
    let text = pod
        .metadata
        .annotations
        .as_ref()?
        .get("kruise.io/sidecarset-hash")?;
    let map: Value = serde_json::from_str(text).ok()?;
    map.get(name)?
        .get("controllerRevision")?
        .as_str()
        .map(str::to_owned)
}

/// Waits until `status.latestRevision` differs from `previous` and the generation is observed.
async fn next_latest(api: &Api<SidecarSet>, name: &str, previous: &str) -> anyhow::Result<String> {
    eventually("a new latestRevision", TIMEOUT, || async {
        let ss = api.get(name).await?;
        let status = ss.status.unwrap_or_default();
        let current = Some(status.observed_generation) == ss.metadata.generation;
        Ok(
            (current && !status.latest_revision.is_empty() && status.latest_revision != previous)
                .then_some(status.latest_revision),
        )
    })
    .await
}

/// Creates Pod `name` once a dry run shows the webhook injecting what SidecarSet `ss` records as its
/// latest revision (the webhook reads SidecarSets from a watch).
async fn create_injected(
    ns: &TestNamespace,
    ss: &str,
    pod_doc: &Value,
    want_revision: &str,
) -> anyhow::Result<Pod> {
    let pods: Api<Pod> = ns.api();
    let mut pod: Pod = serde_json::from_value(pod_doc.clone())?;
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    eventually(
        "the webhook injecting the expected revision",
        TIMEOUT,
        || async {
            let created = pods.create(&dry, &pod).await?;
            Ok((recorded_revision(&created, ss).as_deref() == Some(want_revision)).then_some(()))
        },
    )
    .await?;
    pod.metadata.namespace = Some(ns.name.clone());
    Ok(pods.create(&PostParams::default(), &pod).await?)
}

#[tokio::test]
async fn revisions_are_recorded_pinned_and_rolled_back() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("ss-hist").await?;
    let name = format!("hist-{}", ns.name);
    ns.run(async {
        let sidecarsets: Api<SidecarSet> = Api::all(ns.client.clone());
        let crs: Api<ControllerRevision> = Api::namespaced(ns.client.clone(), MANAGER_NAMESPACE);
        ns.apply(&sidecarset(&name, &ns.name, "hist", "logtail:1", json!({})).to_string())
            .await?;
        let r1 = next_latest(&sidecarsets, &name, "").await?;
        let history = revisions(&crs, &name).await?;
        ensure!(history.len() == 1, "{} revisions", history.len());
        let first = &history[0];
        ensure!(
            first.metadata.name.as_deref() == Some(r1.as_str()),
            "{r1} vs {:?}",
            first.metadata.name
        );
        ensure!(first.revision == 1);
        ensure!(r1.starts_with(&format!("{name}-")), "{r1}");
        let owner = first.metadata.owner_references.clone().unwrap_or_default();
        ensure!(
            owner
                .iter()
                .any(|o| o.kind == "SidecarSet" && o.name == name && o.controller == Some(true)),
            "{owner:?}"
        );
        let status = sidecarsets.get(&name).await?.status.unwrap_or_default();
        ensure!(
            status.collision_count == Some(0),
            "{:?}",
            status.collision_count
        );

        // A Pod records the revision it was injected with; an upgrade records the new one.
        wait_injected_on_dry_run(
            &ns.client,
            &ns.name,
            &pod("dry", "hist"),
            TIMEOUT,
            &["logtail", "nginx"],
        )
        .await?;
        create_injected(&ns, &name, &pod("one", "hist"), &r1).await?;
        let pods: Api<Pod> = ns.api();
        sidecarsets
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"spec": {"containers": [{"name": "logtail", "image": "logtail:2"}]}}),
                ),
            )
            .await?;
        let r2 = next_latest(&sidecarsets, &name, &r1).await?;
        eventually(
            "Pod one upgraded and recording the new revision",
            TIMEOUT,
            || async {
                let p = pods.get("one").await?;
                Ok((spec_image(&p, "logtail") == "logtail:2"
                    && recorded_revision(&p, &name).as_deref() == Some(r2.as_str())
                    && is_ready(&p))
                .then_some(()))
            },
        )
        .await?;
        let numbers: Vec<i64> = revisions(&crs, &name)
            .await?
            .iter()
            .map(|r| r.revision)
            .collect();
        ensure!(numbers == [1, 2], "{numbers:?}");

        // Pin injection to the first revision (and pause upgrades): a new Pod gets logtail:1.
        sidecarsets
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {
                    "updateStrategy": {"paused": true},
                    "injectionStrategy": {"revision": {"revisionName": r1, "policy": "Always"}},
                }})),
            )
            .await?;
        let two = create_injected(&ns, &name, &pod("two", "hist"), &r1).await?;
        ensure!(
            spec_image(&two, "logtail") == "logtail:1",
            "{:?}",
            spec_image(&two, "logtail")
        );
        eventually("Pod two Ready on logtail:1", TIMEOUT, || async {
            let p = pods.get("two").await?;
            Ok((is_ready(&p) && spec_image(&p, "logtail") == "logtail:1").then_some(()))
        })
        .await?;

        // Roll back to logtail:1: the first revision is renumbered, nothing new is created.
        sidecarsets
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {
                    "containers": [{"name": "logtail", "image": "logtail:1"}],
                    "injectionStrategy": {"revision": null},
                    "updateStrategy": {"paused": false},
                }})),
            )
            .await?;
        let back = next_latest(&sidecarsets, &name, &r2).await?;
        ensure!(back == r1, "rolled back to {back}, not {r1}");
        let history: Vec<(String, i64)> = revisions(&crs, &name)
            .await?
            .iter()
            .map(|r| (r.metadata.name.clone().unwrap_or_default(), r.revision))
            .collect();
        ensure!(history == [(r2.clone(), 2), (r1.clone(), 3)], "{history:?}");
        eventually("Pod one back on logtail:1", TIMEOUT, || async {
            let p = pods.get("one").await?;
            Ok((spec_image(&p, "logtail") == "logtail:1"
                && recorded_revision(&p, &name).as_deref() == Some(r1.as_str()))
            .then_some(()))
        })
        .await?;
        sidecarsets.delete(&name, &DeleteParams::default()).await?;
        Ok(())
    })
    .await
}

#[tokio::test]
async fn history_is_truncated_collisions_counted_and_revisions_collected() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("ss-trunc").await?;
    let name = format!("trunc-{}", ns.name);
    ns.run(async {
        let sidecarsets: Api<SidecarSet> = Api::all(ns.client.clone());
        let crs: Api<ControllerRevision> = Api::namespaced(ns.client.clone(), MANAGER_NAMESPACE);
        let doc = sidecarset(&name, &ns.name, "nobody", "logtail:1", json!({"spec": {"revisionHistoryLimit": 2}}));

        // Squat on the name the first revision would get: the controller must count a collision and
        // name its revision differently. The defaulted SidecarSet comes from a server-side dry run.
        let typed: SidecarSet = serde_json::from_value(doc.clone())?;
        let dry = PostParams { dry_run: true, ..PostParams::default() };
        let mut defaulted = sidecarsets.create(&dry, &typed).await?;
        defaulted.metadata.uid = Some("dry-run".into());
        let wanted = kruise_core::sidecarset::history::new_revision(&defaulted, MANAGER_NAMESPACE, 1, Some(0))?;
        let squatter = ControllerRevision {
            metadata: ObjectMeta {
                name: wanted.metadata.name.clone(),
                namespace: Some(MANAGER_NAMESPACE.into()),
                ..ObjectMeta::default()
            },
            data: Some(RawExtension(json!({"squatter": true}))),
            revision: 1,
        };
        let squatter_name = squatter.metadata.name.clone().context("name")?;
        crs.create(&PostParams::default(), &squatter).await?;

        ns.apply(&doc.to_string()).await?;
        let mut latest = next_latest(&sidecarsets, &name, "").await?;
        ensure!(latest != squatter_name, "the controller took the squatted name");
        let status = sidecarsets.get(&name).await?.status.unwrap_or_default();
        ensure!(status.collision_count == Some(1), "collisionCount {:?}", status.collision_count);
        ensure!(crs.get(&squatter_name).await?.data == squatter.data, "the squatter was overwritten");

        for version in 2..=5 {
            sidecarsets
                .patch(&name, &PatchParams::default(), &Patch::Merge(json!({"spec": {"containers": [{"name": "logtail", "image": format!("logtail:{version}")}]}})))
                .await?;
            latest = next_latest(&sidecarsets, &name, &latest).await?;
        }
        let kept = eventually("history truncated to 2", TIMEOUT, || async {
            let history = revisions(&crs, &name).await?;
            Ok((history.len() == 2).then_some(history))
        })
        .await?;
        let numbers: Vec<i64> = kept.iter().map(|r| r.revision).collect();
        ensure!(numbers == [4, 5], "{numbers:?}");
        ensure!(kept[1].metadata.name.as_deref() == Some(latest.as_str()));

        // The garbage collector removes the history with the SidecarSet.
        sidecarsets.delete(&name, &DeleteParams::default()).await?;
        eventually("revisions collected", TIMEOUT, || async {
            Ok(revisions(&crs, &name).await?.is_empty().then_some(()))
        })
        .await?;
        crs.delete(&squatter_name, &DeleteParams::default()).await?;
        Ok(())
    })
    .await
}
