//! CloneSet volumeClaimTemplates, end to end: one PVC per template per Pod, named
//! `<template>-<cloneset>-<instance-id>`, mounted by that Pod, and deleted with the Pod on scale-in.
//!
//! The test bed has no volume provisioner, so the claims stay Pending and the Pods unscheduled; what is
//! checked here is what the controller owns: names, labels, owners, the Pod's volume and the cleanup.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::ensure;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kruise_testkit::{eventually, testbed};
use kube::api::{Api, ListParams};

const TIMEOUT: Duration = Duration::from_secs(60);
const INSTANCE_ID: &str = "apps.kruise.io/cloneset-instance-id";

fn id(labels: Option<&std::collections::BTreeMap<String, String>>) -> Option<String> {
    labels.and_then(|l| l.get(INSTANCE_ID)).cloned()
}

#[tokio::test]
async fn claims_follow_their_pods() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("cs-pvc").await?;
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
