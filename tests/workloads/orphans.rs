//! Ownership end to end: `kubectl delete --cascade=orphan` and re-applying the same CloneSet or
//! SidecarSet keeps every Pod (the new object adopts the orphaned Pods *and* ControllerRevisions, so
//! the unchanged template finds its old revision and no Pod moves), and a Pod relabelled out of a
//! CloneSet's selector is released — it keeps running, orphaned — and replaced.
//!
//! The tests share one control plane and manager and run concurrently, each in its own namespace.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{anyhow, ensure};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kruise_api::cloneset::v1beta1::CloneSet;
use kruise_api::sidecarset::v1beta1::SidecarSet;
use kruise_e2e::cloneset_kit::{
    self, apply, describe, holds, identities, merge_patch, name, restarts, same_revision, uid,
    wait_converged,
};
use kruise_e2e::sidecarset_kit::{self, LOGTAIL, apply_logtail, spec_image, test_pod};
use kruise_e2e::{Cleanup, is_ready};
use kruise_testkit::manager::NAMESPACE as MANAGER_NAMESPACE;
use kruise_testkit::{eventually, managed_namespace, testbed};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(60);
/// Long enough for a controller that was going to act wrongly to have done so.
const HOLD: Duration = Duration::from_secs(3);
const IMAGE: &str = "nginx:alpine";

/// The uid of the object's controlling owner, if any.
fn controller_uid(meta: &ObjectMeta) -> Option<String> {
    meta.owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.clone())
}

/// Revision name → (number, controlling owner uid).
fn revision_table(revisions: &[ControllerRevision]) -> BTreeMap<String, (i64, Option<String>)> {
    revisions
        .iter()
        .map(|r| {
            (
                r.metadata.name.clone().unwrap_or_default(),
                (r.revision, controller_uid(&r.metadata)),
            )
        })
        .collect()
}

/// Whether `uid` controls every revision of `table`.
fn all_owned_by(table: &BTreeMap<String, (i64, Option<String>)>, uid: &str) -> bool {
    table
        .values()
        .all(|(_, owner)| owner.as_deref() == Some(uid))
}

fn numbers(table: &BTreeMap<String, (i64, Option<String>)>) -> BTreeMap<String, i64> {
    table.iter().map(|(n, (r, _))| (n.clone(), *r)).collect()
}

async fn list<K>(api: &Api<K>, selector: &str) -> anyhow::Result<Vec<K>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    Ok(api
        .list(&ListParams::default().labels(selector))
        .await?
        .items)
}

/// Waits until `name` is back as a new object (`kind`, for the message): not the one of `old_uid`.
/// Returns its uid.
async fn wait_recreated<K>(
    api: &Api<K>,
    name: &str,
    old_uid: &str,
    kind: &str,
) -> anyhow::Result<String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    eventually(format!("the new {kind}"), TIMEOUT, || async {
        Ok(api
            .get_opt(name)
            .await?
            .and_then(|o| o.meta().uid.clone())
            .filter(|u| u != old_uid))
    })
    .await
}

/// Waits until the garbage collector has taken every controller reference off `pods` and
/// `revisions` (what `--cascade=orphan` does before the owner goes).
async fn wait_orphaned(
    pods: &Api<Pod>,
    pod_selector: &str,
    revisions: &Api<ControllerRevision>,
    revision_selector: &str,
) -> anyhow::Result<()> {
    eventually("Pods and revisions orphaned", TIMEOUT, || async {
        let pods = list(pods, pod_selector).await?;
        let revisions = list(revisions, revision_selector).await?;
        let owned: Vec<String> = pods
            .iter()
            .map(|p| &p.metadata)
            .chain(revisions.iter().map(|r| &r.metadata))
            .filter(|m| controller_uid(m).is_some())
            .map(|m| m.name.clone().unwrap_or_default())
            .collect();
        if owned.is_empty() && !pods.is_empty() {
            Ok(Some(()))
        } else {
            Err(anyhow!("still controlled: {owned:?}"))
        }
    })
    .await
}

#[tokio::test]
async fn cloneset_recreated_after_orphan_delete_keeps_pods_and_revisions() -> anyhow::Result<()> {
    let ns = managed_namespace("orphan-cs").await?;
    ns.run(async {
        let cs_name = "keep";
        let selector = format!("app={cs_name}");
        let doc = cloneset_kit::cloneset(cs_name, 3, IMAGE, json!({}));
        apply(&ns, &doc).await?;
        let (before_cs, before_pods) = wait_converged(&ns, cs_name, 3, TIMEOUT).await?;
        let old_revision = cloneset_kit::status(&before_cs).update_revision;
        let old_uid = before_cs.metadata.uid.clone().unwrap_or_default();
        let revisions: Api<ControllerRevision> = ns.api();
        let pods: Api<Pod> = ns.api();
        let before_revisions = revision_table(&list(&revisions, &selector).await?);
        ensure!(
            before_revisions.len() == 1,
            "revisions before: {before_revisions:?}"
        );
        let before = identities(&before_pods);

        ns.kubectl(&["delete", "cloneset", cs_name, "--cascade=orphan"])
            .await?;
        let clonesets: Api<CloneSet> = ns.api();
        eventually("the CloneSet gone", TIMEOUT, || async {
            Ok(clonesets.get_opt(cs_name).await?.is_none().then_some(()))
        })
        .await?;
        wait_orphaned(&pods, &selector, &revisions, &selector).await?;

        // The identical CloneSet again: it adopts the Pods and the revision; nothing moves.
        apply(&ns, &doc).await?;
        let new_uid = wait_recreated(&clonesets, cs_name, &old_uid, "CloneSet").await?;
        let adopted = eventually(
            "Pods and revision adopted, status on the old revision",
            TIMEOUT,
            || async {
                let cs = clonesets.get(cs_name).await?;
                let status = cloneset_kit::status(&cs);
                let now = list(&pods, &selector).await?;
                let table = revision_table(&list(&revisions, &selector).await?);
                let pods_adopted = now
                    .iter()
                    .all(|p| controller_uid(&p.metadata).as_deref() == Some(new_uid.as_str()));
                let revisions_adopted = all_owned_by(&table, &new_uid);
                let observed = cs.metadata.generation == Some(status.observed_generation);
                if pods_adopted
                    && revisions_adopted
                    && observed
                    && status.update_revision == old_revision
                    && status.current_revision == old_revision
                    && status.updated_ready_replicas == 3
                {
                    Ok(Some(now))
                } else {
                    Err(anyhow!(
                        "status update {} current {} updatedReady {}; revisions {table:?}; Pods {}",
                        status.update_revision,
                        status.current_revision,
                        status.updated_ready_replicas,
                        describe(&now)
                    ))
                }
            },
        )
        .await?;
        ensure!(
            identities(&adopted) == before,
            "Pods changed: {:?} vs {before:?}",
            identities(&adopted)
        );
        holds("Pods, revisions and status unchanged", HOLD, || async {
            let now = list(&pods, &selector).await?;
            let table = revision_table(&list(&revisions, &selector).await?);
            let status = cloneset_kit::status(&clonesets.get(cs_name).await?);
            Ok(identities(&now) == before
                && numbers(&table) == numbers(&before_revisions)
                && now.iter().all(|p| {
                    cloneset_kit::revision(p).is_some_and(|r| same_revision(r, &old_revision))
                        && restarts(p) == 0
                })
                && status.update_revision == old_revision
                && status.current_revision == old_revision)
        })
        .await
    })
    .await
}

/// What must not change about an injected Pod: name → (uid, logtail image, restarts of logtail,
/// the SidecarSet hash annotation).
fn injected(pods: &[Pod]) -> BTreeMap<String, (String, String, i32, Option<String>)> {
    pods.iter()
        .map(|p| {
            let hash = p
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("kruise.io/sidecarset-hash"))
                .cloned();
            (
                name(p),
                (
                    uid(p),
                    spec_image(p, LOGTAIL),
                    sidecarset_kit::restarts(p, LOGTAIL),
                    hash,
                ),
            )
        })
        .collect()
}

#[tokio::test]
async fn sidecarset_recreated_after_orphan_delete_keeps_its_history() -> anyhow::Result<()> {
    let ns = managed_namespace("orphan-ss").await?;
    let ss_name = format!("orphan-{}", ns.name);
    let mut cleanup = Cleanup::new();
    cleanup.sidecarset(&ss_name);
    ns.run(async {
        let labels = json!({"app": "orphan-ss"});
        let sidecarsets: Api<SidecarSet> = Api::all(ns.client.clone());
        let revisions: Api<ControllerRevision> =
            Api::namespaced(ns.client.clone(), MANAGER_NAMESPACE);
        let revision_selector = format!("kruise.io/sidecarset-name={ss_name}");
        let pods: Api<Pod> = ns.api();
        let pod_selector = "app=orphan-ss";
        apply_logtail(&ns, &ss_name, &labels, json!({})).await?;
        for pod_name in ["one", "two"] {
            let mut pod: Pod = serde_json::from_value(test_pod(pod_name, labels.clone()))?;
            pod.metadata.namespace = Some(ns.name.clone());
            pods.create(&PostParams::default(), &pod).await?;
        }
        let first = sidecarset_kit::wait_status(
            &sidecarsets,
            &ss_name,
            "2 Pods matched, updated and ready",
            TIMEOUT,
            |s| sidecarset_kit::counts(s) == (2, 2, 2, 2) && !s.latest_revision.is_empty(),
        )
        .await?;
        let latest = sidecarset_kit::status(&first).latest_revision;
        let old_uid = first.metadata.uid.clone().unwrap_or_default();
        let before_revisions = revision_table(&list(&revisions, &revision_selector).await?);
        ensure!(
            before_revisions.len() == 1,
            "revisions before: {before_revisions:?}"
        );
        let before_pods = list(&pods, pod_selector).await?;
        ensure!(
            before_pods.iter().all(is_ready),
            "{}",
            describe(&before_pods)
        );
        let before = injected(&before_pods);

        ns.kubectl(&["delete", "sidecarset", &ss_name, "--cascade=orphan"])
            .await?;
        eventually("the SidecarSet gone", TIMEOUT, || async {
            Ok(sidecarsets.get_opt(&ss_name).await?.is_none().then_some(()))
        })
        .await?;
        // Its Pods were never owned by it; its revisions were.
        eventually("revisions orphaned", TIMEOUT, || async {
            let table = revision_table(&list(&revisions, &revision_selector).await?);
            Ok(
                (!table.is_empty() && table.values().all(|(_, owner)| owner.is_none()))
                    .then_some(()),
            )
        })
        .await?;

        apply_logtail(&ns, &ss_name, &labels, json!({})).await?;
        let new_uid = wait_recreated(&sidecarsets, &ss_name, &old_uid, "SidecarSet").await?;
        eventually(
            "the revision adopted and latestRevision the old one",
            TIMEOUT,
            || async {
                let ss = sidecarsets.get(&ss_name).await?;
                let status = sidecarset_kit::status(&ss);
                let table = revision_table(&list(&revisions, &revision_selector).await?);
                let adopted = all_owned_by(&table, &new_uid);
                let observed = ss.metadata.generation == Some(status.observed_generation);
                if adopted
                    && observed
                    && status.latest_revision == latest
                    && sidecarset_kit::counts(&status) == (2, 2, 2, 2)
                {
                    Ok(Some(()))
                } else {
                    Err(anyhow!(
                        "latestRevision {} (want {latest}), counts {:?}, revisions {table:?}",
                        status.latest_revision,
                        sidecarset_kit::counts(&status)
                    ))
                }
            },
        )
        .await?;
        holds("Pods and revisions unchanged", HOLD, || async {
            let now = list(&pods, pod_selector).await?;
            let table = revision_table(&list(&revisions, &revision_selector).await?);
            Ok(injected(&now) == before && numbers(&table) == numbers(&before_revisions))
        })
        .await
    })
    .await
}

#[tokio::test]
async fn pod_relabelled_out_of_the_selector_is_released_and_replaced() -> anyhow::Result<()> {
    let ns = managed_namespace("orphan-rl").await?;
    ns.run(async {
        let cs_name = "relabel";
        apply(&ns, &cloneset_kit::cloneset(cs_name, 3, IMAGE, json!({}))).await?;
        let (cs, before) = wait_converged(&ns, cs_name, 3, TIMEOUT).await?;
        let cs_uid = cs.metadata.uid.clone().unwrap_or_default();
        let moved = before[0].clone();
        let moved_name = name(&moved);
        let moved_uid = uid(&moved);
        merge_patch(
            &ns,
            "pod",
            &moved_name,
            &json!({"metadata": {"labels": {"app": "elsewhere"}}}),
        )
        .await?;

        let pods: Api<Pod> = ns.api();
        eventually("the relabelled Pod released", TIMEOUT, || async {
            let pod = pods.get(&moved_name).await?;
            Ok(controller_uid(&pod.metadata).is_none().then_some(pod))
        })
        .await?;
        // A replacement brings the CloneSet back to 3 Pods of its own.
        let (_, after) = wait_converged(&ns, cs_name, 3, TIMEOUT).await?;
        ensure!(
            after
                .iter()
                .all(|p| controller_uid(&p.metadata).as_deref() == Some(cs_uid.as_str())),
            "{}",
            describe(&after)
        );
        ensure!(
            !after.iter().any(|p| name(p) == moved_name),
            "{}",
            describe(&after)
        );
        let kept: Vec<String> = before[1..].iter().map(uid).collect();
        ensure!(
            kept.iter().all(|u| after.iter().any(|p| uid(p) == *u)),
            "the other Pods were replaced: {}",
            describe(&after)
        );
        holds("the released Pod keeps running, orphaned", HOLD, || async {
            let pod = pods.get(&moved_name).await?;
            Ok(uid(&pod) == moved_uid
                && pod.metadata.deletion_timestamp.is_none()
                && is_ready(&pod)
                && controller_uid(&pod.metadata).is_none())
        })
        .await
    })
    .await
}

#[tokio::test]
async fn cloneset_recreated_after_orphan_delete_adopts_its_claims() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("orphan-pvc").await?;
    ns.run(async {
        // No volume provisioner in the test bed: the claims stay Pending and the Pods unscheduled,
        // which is enough to see who owns what.
        let cs_name = "db";
        let selector = format!("app={cs_name}");
        let doc = cloneset_kit::cloneset(
            cs_name,
            2,
            IMAGE,
            json!({
                "template": {"spec": {"containers": [{
                    "name": cloneset_kit::CONTAINER, "image": IMAGE,
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }]}},
                "volumeClaimTemplates": [{
                    "metadata": {"name": "data"},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
                }],
            }),
        );
        apply(&ns, &doc).await?;
        let pods: Api<Pod> = ns.api();
        let claims: Api<PersistentVolumeClaim> = ns.api();
        let revisions: Api<ControllerRevision> = ns.api();
        let clonesets: Api<CloneSet> = ns.api();
        let owned_by = |uid: String| {
            let (pods, claims) = (&pods, &claims);
            let selector = selector.clone();
            async move {
                let p = list(pods, &selector).await?;
                let c = list(claims, &selector).await?;
                let all_ours = p
                    .iter()
                    .map(|p| &p.metadata)
                    .chain(c.iter().map(|c| &c.metadata))
                    .all(|m| controller_uid(m).as_deref() == Some(uid.as_str()));
                anyhow::Ok((p.len() == 2 && c.len() == 2 && all_ours).then_some((p, c)))
            }
        };
        let old_uid = eventually("the CloneSet", TIMEOUT, || async {
            Ok(clonesets.get_opt(cs_name).await?.and_then(|c| c.metadata.uid))
        })
        .await?;
        let (before_pods, before_claims) =
            eventually("2 Pods with 2 claims", TIMEOUT, || owned_by(old_uid.clone())).await?;

        ns.kubectl(&["delete", "cloneset", cs_name, "--cascade=orphan"])
            .await?;
        wait_orphaned(&pods, &selector, &revisions, &selector).await?;
        eventually("claims orphaned", TIMEOUT, || async {
            let c = list(&claims, &selector).await?;
            Ok(c.iter()
                .all(|c| controller_uid(&c.metadata).is_none())
                .then_some(()))
        })
        .await?;

        apply(&ns, &doc).await?;
        let new_uid = wait_recreated(&clonesets, cs_name, &old_uid, "CloneSet").await?;
        let (after_pods, after_claims) =
            eventually("Pods and claims adopted", TIMEOUT, || owned_by(new_uid.clone())).await?;
        let claim_uids = |c: &[PersistentVolumeClaim]| -> Vec<Option<String>> {
            c.iter().map(|c| c.metadata.uid.clone()).collect()
        };
        ensure!(
            after_pods.iter().map(uid).eq(before_pods.iter().map(uid)),
            "Pods replaced: {}",
            describe(&after_pods)
        );
        ensure!(
            claim_uids(&after_claims) == claim_uids(&before_claims),
            "claims replaced"
        );

        // The adopted claims are the CloneSet's to clean up: scaling in deletes a Pod with its claim.
        merge_patch(&ns, "cloneset", cs_name, &json!({"spec": {"replicas": 1}})).await?;
        eventually("1 Pod with 1 claim", TIMEOUT, || async {
            let p = cloneset_kit::active_pods(&pods, &selector).await?;
            let c: Vec<PersistentVolumeClaim> = list(&claims, &selector)
                .await?
                .into_iter()
                .filter(|c| c.metadata.deletion_timestamp.is_none())
                .collect();
            Ok((p.len() == 1 && c.len() == 1).then_some(()))
        })
        .await
    })
    .await
}
