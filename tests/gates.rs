//! Behaviour behind OpenKruise feature gates that are off by default, with this binary's
//! kruise-manager started with them on ([`GATES`]). Own test binary: its manager owns the cluster's
//! webhook configurations. (`TemplateNoDefaults` excludes template defaults and has its own binary,
//! `template_no_defaults`.)

use std::time::Duration;

use anyhow::ensure;
use k8s_openapi::api::core::v1::Pod;
use kruise_api::cloneset::v1beta1::CloneSet;
use kruise_e2e::cloneset_kit::runs_image;
use kruise_e2e::cloneset_kit::{
    active_pods, apply, cloneset, label, lifecycle_state, merge_patch, name, observed, set_image,
    spec_image, uid, wait_converged,
};
use kruise_testkit::manager::{Manager, ManagerOptions};
use kruise_testkit::{TestBed, eventually, testbed};
use kube::api::Api;
use serde_json::json;

/// The gates this binary's manager runs with.
const GATES: &str = "--feature-gates=PreparingUpdateAsUpdate=true,CloneSetShortHash=true,\
KruisePodReadinessGate=true,SidecarSetPatchPodMetadataDefaultsAllowed=true,\
DefaultHostNetworkHostPortsInPodTemplates=true,DaemonSetPruneIneligibleNodes=true,\
RecreatePodWhenChangeVCTInCloneSetGate=true";

fn manager(bed: &'static TestBed) -> &'static Manager {
    bed.manager_with(&ManagerOptions {
        extra_args: vec![GATES.into()],
        ..ManagerOptions::default()
    })
}

const TIMEOUT: Duration = Duration::from_secs(60);
const IMAGE_A: &str = "nginx:alpine";
const IMAGE_B: &str = "nginx:1.19.1";
const HOOK: &str = "example.io/block-updating";

/// `PreparingUpdateAsUpdate`: a Pod held in PreparingUpdate by an inPlaceUpdate hook counts as
/// updated when scaling, so scaling in removes the old-revision Pod and keeps it.
#[tokio::test]
async fn preparing_update_counts_as_updated_when_scaling_in() -> anyhow::Result<()> {
    let bed = testbed();
    manager(bed);
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

/// `CloneSetShortHash`: Pods carry only the hash in `controller-revision-hash` (and in
/// `pod-template-hash`), while the CloneSet's status names the revisions in full; an in-place update
/// moves the label to the new hash.
#[tokio::test]
async fn short_hash_labels_pods_with_the_hash_only() -> anyhow::Result<()> {
    let bed = testbed();
    manager(bed);
    let ns = bed.namespace("gate-shorthash").await?;
    ns.run(async {
        let spec =
            json!({"updateStrategy": {"rollingUpdate": {"podUpdatePolicy": "InPlaceIfPossible"}}});
        apply(&ns, &cloneset("short", 2, IMAGE_A, spec)).await?;
        let (_, before) = wait_converged(&ns, "short", 2, TIMEOUT).await?;
        let check = |cs: &CloneSet, pods: &[Pod]| -> anyhow::Result<()> {
            let status = cs.status.clone().unwrap_or_default();
            let revision = status.update_revision;
            let hash = revision.rsplit('-').next().unwrap_or_default().to_string();
            ensure!(
                revision.starts_with("short-") && !hash.is_empty(),
                "updateRevision {revision:?} names the revision in full"
            );
            for pod in pods {
                ensure!(
                    label(pod, "controller-revision-hash") == Some(hash.as_str())
                        && label(pod, "pod-template-hash") == Some(hash.as_str()),
                    "{}: labels {:?}, expected the hash {hash}",
                    name(pod),
                    pod.metadata.labels
                );
            }
            Ok(())
        };
        check(&observed(&ns, "short").await?, &before)?;

        set_image(&ns, "short", IMAGE_B).await?;
        let pod_api: Api<Pod> = ns.api();
        let after = eventually("both Pods updated in place", TIMEOUT, || async {
            let pods = active_pods(&pod_api, "app=short").await?;
            Ok((pods.len() == 2 && pods.iter().all(|p| runs_image(p, IMAGE_B))).then_some(pods))
        })
        .await?;
        let (cs, after) = eventually("the CloneSet converged", TIMEOUT, || async {
            let cs = observed(&ns, "short").await?;
            let status = cs.status.clone().unwrap_or_default();
            Ok((status.updated_ready_replicas == 2
                && status.update_revision == status.current_revision)
                .then_some((cs, after.clone())))
        })
        .await?;
        check(&cs, &after)?;
        let mut uids: Vec<String> = after.iter().map(uid).collect();
        let mut was: Vec<String> = before.iter().map(uid).collect();
        uids.sort();
        was.sort();
        ensure!(uids == was, "Pods were recreated: {was:?} → {uids:?}");
        Ok(())
    })
    .await
}

fn has_readiness_gate(pod: &Pod, condition: &str) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .is_some_and(|g| g.iter().any(|g| g.condition_type == condition))
}

fn condition_status(pod: &Pod, condition: &str) -> Option<String> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == condition)
        .map(|c| c.status.clone())
}

/// `KruisePodReadinessGate`: every Pod created, a plain one as well as a CloneSet's, gets the
/// `KruisePodReady` readiness gate, and the pod-readiness controller sets the condition True, so the
/// Pods become Ready.
#[tokio::test]
async fn every_new_pod_gets_the_kruise_pod_ready_gate_and_becomes_ready() -> anyhow::Result<()> {
    let bed = testbed();
    manager(bed);
    let ns = bed.namespace("gate-readiness").await?;
    ns.run(async {
        let plain = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "plain", "labels": {"app": "plain"}},
            "spec": {"containers": [{"name": "c", "image": IMAGE_A}]}});
        apply(&ns, &plain).await?;
        apply(&ns, &cloneset("ready", 1, IMAGE_A, json!({}))).await?;
        let pod_api: Api<Pod> = ns.api();
        for selector in ["app=plain", "app=ready"] {
            let pod = eventually(
                &format!("the Pod of {selector} Ready with KruisePodReady=True"),
                TIMEOUT,
                || async {
                    let pods = active_pods(&pod_api, selector).await?;
                    Ok(pods.into_iter().find(|p| {
                        condition_status(p, "KruisePodReady").as_deref() == Some("True")
                            && condition_status(p, "Ready").as_deref() == Some("True")
                    }))
                },
            )
            .await?;
            ensure!(
                has_readiness_gate(&pod, "KruisePodReady"),
                "{}: no KruisePodReady readiness gate in {:?}",
                name(&pod),
                pod.spec.as_ref().map(|s| &s.readiness_gates)
            );
        }
        Ok(())
    })
    .await
}

/// `SidecarSetPatchPodMetadataDefaultsAllowed`: without a `kruise-configuration` whitelist, a
/// SidecarSet whose patchPodMetadata writes an annotation is admitted and the annotation reaches
/// the Pods it injects (with the gate off it is refused, see the `sidecarsets` binary).
#[tokio::test]
async fn patch_pod_metadata_needs_no_whitelist() -> anyhow::Result<()> {
    let bed = testbed();
    manager(bed);
    let ns = bed.namespace("gate-patchmeta").await?;
    ns.run(async {
        let sidecarset = json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "SidecarSet",
            "metadata": {"name": "gate-patchmeta"},
            "spec": {
                "selector": {"matchLabels": {"app": "patched"}},
                "namespace": ns.name,
                "containers": [{"name": "sidecar", "image": IMAGE_A}],
                "patchPodMetadata": [{"annotations": {"example.io/patched": "yes"}}]}});
        apply(&ns, &sidecarset).await?;
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "patched", "labels": {"app": "patched"}},
            "spec": {"containers": [{"name": "c", "image": IMAGE_A}]}});
        // Once the webhook's cache holds the new SidecarSet.
        kruise_e2e::wait_injected_on_dry_run(
            &ns.client,
            &ns.name,
            &pod,
            TIMEOUT,
            &["sidecar", "c"],
        )
        .await?;
        apply(&ns, &pod).await?;
        let pod: Pod = ns.api().get("patched").await?;
        ensure!(
            pod.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("example.io/patched"))
                .map(String::as_str)
                == Some("yes"),
            "annotations {:?}",
            pod.metadata.annotations
        );
        ns.kubectl(&["delete", "sidecarset", "gate-patchmeta"])
            .await?;
        Ok(())
    })
    .await
}

/// `DefaultHostNetworkHostPortsInPodTemplates`: a hostNetwork Pod template's ports without a
/// hostPort get their containerPort, as Kubernetes defaulted templates before v1.28.
#[tokio::test]
async fn host_network_templates_get_host_ports() -> anyhow::Result<()> {
    let bed = testbed();
    manager(bed);
    let ns = bed.namespace("gate-hostports").await?;
    ns.run(async {
        let spec = json!({"template": {"spec": {"hostNetwork": true,
            "containers": [{"name": "nginx", "image": IMAGE_A,
                            "ports": [{"name": "http", "containerPort": 8080}]}]}}});
        apply(&ns, &cloneset("hostports", 0, IMAGE_A, spec)).await?;
        let cs: CloneSet = ns.api().get("hostports").await?;
        let ports = cs
            .spec
            .template
            .spec
            .as_ref()
            .and_then(|s| s.containers.first())
            .and_then(|c| c.ports.clone())
            .unwrap_or_default();
        ensure!(
            ports.len() == 1 && ports[0].host_port == Some(8080),
            "ports of the stored template: {ports:?}"
        );
        Ok(())
    })
    .await
}

fn node_affinity(nodes: &[&str]) -> serde_json::Value {
    json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}]}]}}})
}

/// `DaemonSetPruneIneligibleNodes`: when the set's node selection narrows during a rollout, a node
/// it left (its Pod still terminating, held here by a finalizer) uses none of maxUnavailable, so the
/// rolling update of the remaining node goes on (without the gate that node would use the whole
/// budget of 1 and the rollout would wait for the Pod to be gone).
#[tokio::test]
async fn nodes_the_daemonset_left_use_no_rollout_budget() -> anyhow::Result<()> {
    const HOLD: &str = "example.io/hold";
    let bed = testbed();
    manager(bed);
    let ns = bed.namespace("gate-prune").await?;
    ns.run(async {
        let ds = json!({"apiVersion": "apps.kruise.io/v1beta1", "kind": "DaemonSet",
            "metadata": {"name": "prune"},
            "spec": {"selector": {"matchLabels": {"app": "prune"}},
                "updateStrategy": {"type": "RollingUpdate",
                    "rollingUpdate": {"rollingUpdateType": "Standard", "maxUnavailable": 1}},
                "template": {"metadata": {"labels": {"app": "prune"}},
                    "spec": {"affinity": node_affinity(&["sim-0", "sim-1"]),
                        "containers": [{"name": "nginx", "image": IMAGE_A}]}}}});
        apply(&ns, &ds).await?;
        let pod_api: Api<Pod> = ns.api();
        let node_of = |p: &Pod| p.spec.as_ref().and_then(|s| s.node_name.clone());
        let ready_on_both = eventually("a Ready Pod on sim-0 and sim-1", TIMEOUT, || async {
            let pods = active_pods(&pod_api, "app=prune").await?;
            let ready = pods
                .iter()
                .filter(|p| condition_status(p, "Ready").as_deref() == Some("True"))
                .count();
            Ok((pods.len() == 2 && ready == 2).then_some(pods))
        })
        .await?;
        let leaving = ready_on_both
            .iter()
            .find(|p| node_of(p).as_deref() == Some("sim-1"))
            .map(name)
            .ok_or_else(|| anyhow::anyhow!("no Pod on sim-1"))?;
        let finalizer = json!({"metadata": {"finalizers": [HOLD]}});
        merge_patch(&ns, "pod", &leaving, &finalizer).await?;

        // sim-1 leaves the selection and the image changes at once.
        let change = json!({"spec": {"template": {"spec": {
            "affinity": node_affinity(&["sim-0"]),
            "containers": [{"name": "nginx", "image": IMAGE_B}]}}}});
        merge_patch(&ns, "daemonset.apps.kruise.io", "prune", &change).await?;
        let outcome = eventually(
            "the Pod on sim-0 replaced by one of the new image while sim-1's still terminates",
            TIMEOUT,
            || async {
                let pods = active_pods(&pod_api, "app=prune").await?;
                Ok(pods
                    .iter()
                    .any(|p| {
                        node_of(p).as_deref() == Some("sim-0")
                            && spec_image(p).as_deref() == Some(IMAGE_B)
                    })
                    .then_some(()))
            },
        )
        .await;
        let held: Pod = pod_api.get(&leaving).await?;
        let release = json!({"metadata": {"finalizers": null}});
        merge_patch(&ns, "pod", &leaving, &release).await?;
        outcome?;
        ensure!(
            held.metadata.deletion_timestamp.is_some(),
            "{leaving} on sim-1 was not being deleted"
        );
        Ok(())
    })
    .await
}

/// `RecreatePodWhenChangeVCTInCloneSetGate`: changing the image and the volumeClaimTemplates together
/// recreates the Pods of an InPlaceIfPossible CloneSet (an image change alone would be made in place),
/// and the new Pods get claims of the new size (v1beta1 does not reuse a deleted Pod's claims).
#[tokio::test]
async fn changed_claim_templates_recreate_pods() -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    let bed = testbed();
    manager(bed);
    let ns = bed.namespace("gate-vct").await?;
    ns.run(async {
        let claims = |size: &str| {
            json!([{"metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}}])
        };
        let spec = json!({
            "updateStrategy": {"rollingUpdate": {"podUpdatePolicy": "InPlaceIfPossible", "maxUnavailable": 2}},
            "volumeClaimTemplates": claims("1Gi"),
        });
        apply(&ns, &cloneset("vct", 2, IMAGE_A, spec)).await?;
        let (_, before) = wait_converged(&ns, "vct", 2, TIMEOUT).await?;
        let change = json!({"spec": {"volumeClaimTemplates": claims("2Gi"),
            "template": {"spec": {"containers": [{"name": "nginx", "image": IMAGE_B}]}}}});
        merge_patch(&ns, "cloneset.apps.kruise.io", "vct", &change).await?;
        let pod_api: Api<Pod> = ns.api();
        let was: Vec<String> = before.iter().map(uid).collect();
        let after = eventually("two new Pods of the new image", TIMEOUT, || async {
            let pods = active_pods(&pod_api, "app=vct").await?;
            Ok((pods.len() == 2
                && pods.iter().all(|p| runs_image(p, IMAGE_B) && !was.contains(&uid(p))))
            .then_some(pods))
        })
        .await?;
        let claims_api: Api<PersistentVolumeClaim> = ns.api();
        for pod in &after {
            let claim = format!(
                "data-vct-{}",
                label(pod, "apps.kruise.io/cloneset-instance-id").unwrap_or_default()
            );
            let size = eventually(&format!("claim {claim}"), TIMEOUT, || async {
                Ok(claims_api.get_opt(&claim).await?.and_then(|c| {
                    c.spec?.resources?.requests?.get("storage").map(|q| q.0.clone())
                }))
            })
            .await?;
            ensure!(size == "2Gi", "{claim} asks for {size}");
        }
        Ok(())
    })
    .await
}
