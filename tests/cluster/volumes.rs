//! The test bed's simulated volume provisioner working with the real kube-controller-manager (PV
//! binder, expansion admission, pvc-protection) and scheduler (volume binding): claims are bound,
//! resized and released as on a real cluster, and a Pod whose claim cannot be bound stays Pending.

use std::time::Duration;

use anyhow::{Context, ensure};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kruise_e2e::{is_ready, phase, pod_condition};
use kruise_testkit::{eventually, testbed, until};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(60);

fn storage(
    q: Option<
        &std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >,
) -> String {
    q.and_then(|m| m.get("storage"))
        .map(|q| q.0.clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn claims_are_bound_resized_and_released() -> anyhow::Result<()> {
    let bed = testbed();
    let ns = bed.namespace("volumes").await?;
    ns.run(async {
        // No storageClassName: the DefaultStorageClass admission plugin assigns `sim`.
        ns.apply(
            r#"
    apiVersion: v1
    kind: PersistentVolumeClaim
    metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 1Gi}}
    "#,
        )
        .await?;
        let claims: Api<PersistentVolumeClaim> = ns.api();
        let volumes: Api<PersistentVolume> = Api::all(ns.client.clone());
        let claim = eventually("claim data Bound", TIMEOUT, || async {
            let c = claims.get("data").await?;
            let bound = c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
            Ok(bound.then_some(c))
        })
        .await?;
        let spec = claim.spec.clone().context("claim spec")?;
        ensure!(
            spec.storage_class_name.as_deref() == Some("sim"),
            "default class not assigned: {:?}",
            spec.storage_class_name
        );
        let uid = claim.metadata.uid.clone().context("claim uid")?;
        let pv_name = spec.volume_name.clone().context("volumeName")?;
        ensure!(pv_name == format!("pvc-{uid}"), "bound to {pv_name}");
        ensure!(storage(claim.status.as_ref().and_then(|s| s.capacity.as_ref())) == "1Gi");
        let pv = volumes.get(&pv_name).await?;
        let claim_ref = pv
            .spec
            .as_ref()
            .and_then(|s| s.claim_ref.clone())
            .context("claimRef")?;
        ensure!(claim_ref.uid.as_deref() == Some(uid.as_str()));
        ensure!(pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"));

        // A Pod mounting the bound claim runs.
        ns.apply(
            r#"
    apiVersion: v1
    kind: Pod
    metadata: {name: user}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
      - name: app
        image: nginx:alpine
        volumeMounts: [{name: data, mountPath: /data}]
      volumes:
      - name: data
        persistentVolumeClaim: {claimName: data}
    "#,
        )
        .await?;
        let pods: Api<Pod> = ns.api();
        until("Pod user Ready", TIMEOUT, || async {
            Ok(is_ready(&pods.get("user").await?))
        })
        .await?;

        // Growing the request grows the volume and the claim's reported capacity.
        claims
            .patch(
                "data",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}})),
            )
            .await?;
        until("volume and claim at 2Gi", TIMEOUT, || async {
            let pv = volumes.get(&pv_name).await?;
            let c = claims.get("data").await?;
            Ok(
                storage(pv.spec.as_ref().and_then(|s| s.capacity.as_ref())) == "2Gi"
                    && storage(c.status.as_ref().and_then(|s| s.capacity.as_ref())) == "2Gi",
            )
        })
        .await?;

        // The claim goes (after its Pod: pvc-protection), and with it the volume (reclaim Delete).
        pods.delete("user", &DeleteParams::default()).await?;
        claims.delete("data", &DeleteParams::default()).await?;
        until("volume deleted", TIMEOUT, || async {
            Ok(volumes.get_opt(&pv_name).await?.is_none())
        })
        .await?;
        Ok(())
    })
    .await
}

#[tokio::test]
async fn pod_with_an_unbound_claim_stays_pending() -> anyhow::Result<()> {
    let bed = testbed();
    let ns = bed.namespace("unbound").await?;
    let class_name = format!("nobody-{}", ns.name);
    let classes: Api<StorageClass> = Api::all(ns.client.clone());
    let result = ns
        .run(async {
            let documents = [
                format!(
                    "{{apiVersion: storage.k8s.io/v1, kind: StorageClass, metadata: {{name: {class_name}}}, \
                     provisioner: example.com/nobody}}"
                ),
                format!(
                    "{{apiVersion: v1, kind: PersistentVolumeClaim, metadata: {{name: orphan}}, \
                     spec: {{storageClassName: {class_name}, accessModes: [ReadWriteOnce], \
                     resources: {{requests: {{storage: 1Gi}}}}}}}}"
                ),
                "{apiVersion: v1, kind: Pod, metadata: {name: waiting}, spec: {containers: \
                 [{name: app, image: 'nginx:alpine'}], volumes: [{name: data, \
                 persistentVolumeClaim: {claimName: orphan}}]}}"
                    .to_string(),
            ];
            for document in &documents {
                ns.apply(document).await?;
            }
            let pods: Api<Pod> = ns.api();
            // The real scheduler refuses it, naming the claim problem, like on any cluster.
            let pod = eventually("Pod waiting reported unschedulable", TIMEOUT, || async {
                let pod = pods.get("waiting").await?;
                let unschedulable = pod_condition(&pod, "PodScheduled")
                    .is_some_and(|c| c.status == "False" && c.reason.as_deref() == Some("Unschedulable"));
                Ok(unschedulable.then_some(pod))
            })
            .await?;
            let message = pod_condition(&pod, "PodScheduled")
                .and_then(|c| c.message.clone())
                .unwrap_or_default();
            ensure!(
                message.contains("PersistentVolumeClaim"),
                "unexpected scheduler message: {message}"
            );
            ensure!(phase(&pod) == "Pending", "phase {}", phase(&pod));
            ensure!(
                pod.status
                    .as_ref()
                    .and_then(|s| s.container_statuses.as_ref())
                    .is_none_or(|c| c.is_empty()),
                "containers started without their volume"
            );
            let claim: Api<PersistentVolumeClaim> = ns.api();
            let orphan = claim.get("orphan").await?;
            ensure!(
                orphan.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending"),
                "the claim of a class nobody provisions was bound"
            );
            Ok(())
        })
        .await;
    let _ = classes.delete(&class_name, &DeleteParams::default()).await;
    result
}
