//! CloneSet volumeClaimTemplates, end to end: one PVC per template per Pod, named
//! `<template>-<cloneset>-<instance-id>`, mounted by that Pod, and deleted with the Pod on scale-in;
//! a deleted Pod replaced under its instance id with its PVCs, unless `disablePVCReuse`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::ensure;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kruise_api::cloneset::v1beta1::CloneSet;
use kruise_testkit::{TestNamespace, eventually, managed_namespace};
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(60);
const INSTANCE_ID: &str = "apps.kruise.io/cloneset-instance-id";

fn id(labels: Option<&std::collections::BTreeMap<String, String>>) -> Option<String> {
    labels.and_then(|l| l.get(INSTANCE_ID)).cloned()
}

#[tokio::test]
async fn claims_follow_their_pods() -> anyhow::Result<()> {
    let ns = managed_namespace("cs-pvc").await?;
    ns.run(async {
        ns.apply(
            r#"
apiVersion: apps.kruise.io/v1beta1
kind: CloneSet
metadata: {name: db}
spec:
  replicas: 2
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers:
      - name: main
        image: "nginx:alpine"
        volumeMounts: [{name: data, mountPath: /data}]
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 1Gi}}
"#,
        )
        .await?;
        let pods: Api<Pod> = ns.api();
        let pvcs: Api<PersistentVolumeClaim> = ns.api();
        let (pod_list, claim_list) = eventually("2 Pods with 2 claims", TIMEOUT, || async {
            let p = pods
                .list(&ListParams::default().labels("app=db"))
                .await?
                .items;
            let c = pvcs.list(&ListParams::default()).await?.items;
            Ok((p.len() == 2 && c.len() == 2).then_some((p, c)))
        })
        .await?;

        let pod_ids: BTreeSet<String> = pod_list
            .iter()
            .filter_map(|p| id(p.metadata.labels.as_ref()))
            .collect();
        let claim_ids: BTreeSet<String> = claim_list
            .iter()
            .filter_map(|c| id(c.metadata.labels.as_ref()))
            .collect();
        ensure!(
            pod_ids.len() == 2 && pod_ids == claim_ids,
            "{pod_ids:?} vs {claim_ids:?}"
        );
        for pod in &pod_list {
            let pod_id = id(pod.metadata.labels.as_ref()).unwrap_or_default();
            let name = pod.metadata.name.clone().unwrap_or_default();
            ensure!(name == format!("db-{pod_id}"), "Pod name {name}");
            let claim = pod
                .spec
                .as_ref()
                .and_then(|s| s.volumes.as_ref())
                .and_then(|v| v.iter().find(|v| v.name == "data"))
                .and_then(|v| v.persistent_volume_claim.as_ref())
                .map(|c| c.claim_name.clone());
            ensure!(
                claim.as_deref() == Some(format!("data-db-{pod_id}").as_str()),
                "{name} mounts {claim:?}"
            );
        }
        for claim in &claim_list {
            let labels = claim.metadata.labels.clone().unwrap_or_default();
            ensure!(
                labels.get("app").map(String::as_str) == Some("db"),
                "{labels:?}"
            );
            let owner = claim
                .metadata
                .owner_references
                .as_ref()
                .and_then(|o| o.first())
                .map(|o| (o.kind.clone(), o.name.clone()));
            ensure!(
                owner == Some(("CloneSet".into(), "db".into())),
                "claim owner {owner:?}"
            );
        }

        // Scale in: the deleted Pod's claim goes with it; the other stays.
        ns.kubectl(&["scale", "cloneset", "db", "--replicas=1"])
            .await?;
        let (kept_pod, kept_claims) = eventually("1 Pod and its claim", TIMEOUT, || async {
            let p = pods
                .list(&ListParams::default().labels("app=db"))
                .await?
                .items;
            let c: Vec<PersistentVolumeClaim> = pvcs
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .filter(|c| c.metadata.deletion_timestamp.is_none())
                .collect();
            let live: Vec<Pod> = p
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .collect();
            Ok((live.len() == 1 && c.len() == 1).then_some((live, c)))
        })
        .await?;
        ensure!(
            id(kept_pod[0].metadata.labels.as_ref()) == id(kept_claims[0].metadata.labels.as_ref()),
            "the remaining claim belongs to the remaining Pod"
        );
        Ok(())
    })
    .await
}

/// The live (not terminating) Pods of `app`, Ready, by name → (uid, instance id).
async fn live_pods(
    ns: &TestNamespace,
    app: &str,
) -> anyhow::Result<BTreeMap<String, (String, String)>> {
    let pods: Api<Pod> = ns.api();
    Ok(pods
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && kruise_e2e::is_ready(p))
        .map(|p| {
            (
                p.metadata.name.clone().unwrap_or_default(),
                (
                    p.metadata.uid.clone().unwrap_or_default(),
                    id(p.metadata.labels.as_ref()).unwrap_or_default(),
                ),
            )
        })
        .collect())
}

/// Every PVC of the namespace by name → (uid, instance id, kind of its controlling owner).
async fn claims(
    ns: &TestNamespace,
) -> anyhow::Result<BTreeMap<String, (String, String, Option<String>)>> {
    let pvcs: Api<PersistentVolumeClaim> = ns.api();
    Ok(pvcs
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|c| {
            let owner = c
                .metadata
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.controller == Some(true))
                .map(|o| o.kind.clone());
            (
                c.metadata.name.clone().unwrap_or_default(),
                (
                    c.metadata.uid.clone().unwrap_or_default(),
                    id(c.metadata.labels.as_ref()).unwrap_or_default(),
                    owner,
                ),
            )
        })
        .collect())
}

/// Deletes the Pods (gracefully, as `kubectl delete pod`) and waits until the CloneSet has 4 Ready
/// replacements (none of the deleted uids) and reports them available.
async fn delete_and_wait_replaced(
    ns: &TestNamespace,
    deleted: &BTreeMap<String, (String, String)>,
) -> anyhow::Result<BTreeMap<String, (String, String)>> {
    let pods: Api<Pod> = ns.api();
    for name in deleted.keys() {
        pods.delete(name, &DeleteParams::default()).await?;
    }
    let old_uids: BTreeSet<&String> = deleted.values().map(|(uid, _)| uid).collect();
    let sets: Api<CloneSet> = ns.api();
    eventually("4 Ready replacements, available", TIMEOUT * 2, || async {
        let live = live_pods(ns, "reuse").await?;
        let status = sets.get("reuse").await?.status.unwrap_or_default();
        let replaced = live.len() == 4 && live.values().all(|(uid, _)| !old_uids.contains(uid));
        Ok(
            (replaced && status.updated_available_replicas == 4 && status.replicas == 4)
                .then_some(live),
        )
    })
    .await
}

/// OpenKruise v1.9.0's `CloneSet Update with DisablePVCReuse=true` (test/e2e/apps/v1alpha1/cloneset.go):
/// 4 Pods with 2 claim templates have 8 PVCs. Deleted, the Pods come back under the same instance
/// ids (so the same names) and mount the same 8 PVCs (same uids). With `disablePVCReuse: true`,
/// deleted Pods are replaced under new ids with new PVCs, and the old PVCs go with the old Pods:
/// 8 PVCs again, none of the old ones.
#[tokio::test]
async fn deleted_pods_come_back_with_their_claims_unless_reuse_is_disabled() -> anyhow::Result<()> {
    let ns = managed_namespace("cs-reuse").await?;
    ns.run(async {
        ns.apply(
            r#"
apiVersion: apps.kruise.io/v1alpha1
kind: CloneSet
metadata: {name: reuse}
spec:
  replicas: 4
  selector: {matchLabels: {app: reuse}}
  updateStrategy: {type: ReCreate}
  template:
    metadata: {labels: {app: reuse}}
    spec:
      containers:
      - name: main
        image: "nginx:alpine"
        volumeMounts: [{name: data-vol1, mountPath: /data1}, {name: data-vol2, mountPath: /data2}]
  volumeClaimTemplates:
  - metadata: {name: data-vol1}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 1Gi}}
  - metadata: {name: data-vol2}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 1Gi}}
"#,
        )
        .await?;
        let sets: Api<CloneSet> = ns.api();
        let first = eventually("4 Ready Pods", TIMEOUT * 2, || async {
            let live = live_pods(&ns, "reuse").await?;
            let status = sets.get("reuse").await?.status.unwrap_or_default();
            Ok((live.len() == 4 && status.updated_available_replicas == 4).then_some(live))
        })
        .await?;
        let ids: BTreeSet<String> = first.values().map(|(_, id)| id.clone()).collect();
        let original = claims(&ns).await?;
        ensure!(original.len() == 8, "{original:?}");
        for (name, (_, claim_id, owner)) in &original {
            ensure!(ids.contains(claim_id), "{name} of no Pod");
            ensure!(
                owner.as_deref() == Some("CloneSet"),
                "{name} owned by {owner:?}"
            );
        }

        // Deleted Pods come back under their ids, with their claims.
        let second = delete_and_wait_replaced(&ns, &first).await?;
        let second_ids: BTreeSet<String> = second.values().map(|(_, id)| id.clone()).collect();
        ensure!(
            second_ids == ids,
            "instance ids {ids:?} became {second_ids:?}"
        );
        ensure!(
            second.keys().collect::<Vec<_>>() == first.keys().collect::<Vec<_>>(),
            "Pod names changed"
        );
        let reused = claims(&ns).await?;
        ensure!(
            reused == original,
            "PVCs not reused: {original:?} became {reused:?}"
        );

        // Without reuse, the replacements get new ids and new claims; the old claims go.
        ns.kubectl(&[
            "patch",
            "clonesets.v1alpha1.apps.kruise.io",
            "reuse",
            "--type=merge",
            "-p",
            &json!({"spec": {"scaleStrategy": {"disablePVCReuse": true}}}).to_string(),
        ])
        .await?;
        let reuse = sets
            .get("reuse")
            .await?
            .spec
            .scale_strategy
            .enable_pvc_reuse;
        ensure!(
            !reuse,
            "disablePVCReuse: true did not turn enablePVCReuse off"
        );
        let third = delete_and_wait_replaced(&ns, &second).await?;
        let third_ids: BTreeSet<String> = third.values().map(|(_, id)| id.clone()).collect();
        ensure!(
            third_ids.is_disjoint(&ids),
            "instance ids reused without PVC reuse: {ids:?} -> {third_ids:?}"
        );
        let fresh = eventually("8 PVCs, all of the new Pods", TIMEOUT * 2, || async {
            let now = claims(&ns).await?;
            let settled = now.len() == 8
                && now.iter().all(|(name, (_, claim_id, owner))| {
                    third_ids.contains(claim_id)
                        && !original.contains_key(name)
                        && owner.as_deref() == Some("CloneSet")
                });
            Ok(settled.then_some(now))
        })
        .await?;
        let live = live_pods(&ns, "reuse").await?;
        ensure!(
            live.keys().collect::<Vec<_>>() == third.keys().collect::<Vec<_>>(),
            "Pods changed after the replacement: {live:?}"
        );
        eprintln!(
            "PVCs: {} original kept across a delete; {} new after a delete without reuse",
            reused.len(),
            fresh.len()
        );
        Ok(())
    })
    .await
}

/// A ReCreate update (no feature gate): each Pod is deleted with its PVCs, and its replacement comes
/// up Ready under a new instance id with new PVCs, never with the old claims still being deleted
/// (v1.9.0 deletes the claims with the Pod and lists only claims without a deletionTimestamp).
#[tokio::test]
async fn recreated_pods_come_back_with_new_claims() -> anyhow::Result<()> {
    let ns = managed_namespace("cs-recreate-pvc").await?;
    ns.run(async {
        let manifest = |image: &str| {
            format!(
                r#"
apiVersion: apps.kruise.io/v1alpha1
kind: CloneSet
metadata: {{name: recreate}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: recreate}}}}
  updateStrategy: {{type: ReCreate, maxUnavailable: 2}}
  template:
    metadata: {{labels: {{app: recreate}}}}
    spec:
      containers:
      - name: main
        image: "{image}"
        volumeMounts: [{{name: data, mountPath: /data}}]
  volumeClaimTemplates:
  - metadata: {{name: data}}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {{requests: {{storage: 1Gi}}}}
"#
            )
        };
        ns.apply(&manifest("nginx:alpine")).await?;
        let first = eventually("2 Ready Pods", TIMEOUT, || async {
            let live = live_pods(&ns, "recreate").await?;
            Ok((live.len() == 2).then_some(live))
        })
        .await?;
        let old_ids: BTreeSet<String> = first.values().map(|(_, id)| id.clone()).collect();
        let old_claims = claims(&ns).await?;
        ns.apply(&manifest("nginx:1.19.1")).await?;
        let second = eventually("2 new Ready Pods", TIMEOUT * 2, || async {
            let live = live_pods(&ns, "recreate").await?;
            let replaced = live.len() == 2
                && live
                    .values()
                    .all(|(uid, _)| first.values().all(|(old, _)| old != uid));
            Ok(replaced.then_some(live))
        })
        .await?;
        let new_ids: BTreeSet<String> = second.values().map(|(_, id)| id.clone()).collect();
        ensure!(
            new_ids.is_disjoint(&old_ids),
            "recreated Pods took old ids: {old_ids:?} -> {new_ids:?}"
        );
        eventually("2 PVCs, both of the new Pods", TIMEOUT, || async {
            let now = claims(&ns).await?;
            Ok((now.len() == 2
                && now.iter().all(|(name, (_, claim_id, _))| {
                    new_ids.contains(claim_id) && !old_claims.contains_key(name)
                }))
            .then_some(()))
        })
        .await
    })
    .await
}
