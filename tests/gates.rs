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
    spec_image, status as status_of, uid, wait_converged,
};
use kruise_testkit::manager::{Manager, ManagerOptions};
use kruise_testkit::{TestBed, eventually, testbed, until};
use kube::ResourceExt;
use kube::api::Api;
use serde_json::json;

/// The gates this binary's manager runs with.
const GATES: &str = "--feature-gates=PreparingUpdateAsUpdate=true,CloneSetShortHash=true,\
KruisePodReadinessGate=true,SidecarSetPatchPodMetadataDefaultsAllowed=true,\
DefaultHostNetworkHostPortsInPodTemplates=true,DaemonSetPruneIneligibleNodes=true,\
RecreatePodWhenChangeVCTInCloneSetGate=true,EnhancedLivenessProbe=true,\
EnablePodProbeMarkerOnServerless=true,InPlaceUpdateEnvFromMetadata=false";

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

/// One step of [`upstream_update_with_volume_claim_template_changes`]: the merge patch, then what
/// upstream checks once the CloneSet is ready again.
struct VctStep {
    what: &'static str,
    patch: serde_json::Value,
    pods_recreated: bool,
    claims_recreated: bool,
    /// The storage every claim of `data-vol1` and of `data-vol2` asks for afterwards.
    sizes: (&'static str, &'static str),
}

/// OpenKruise's e2e `CloneSet Update with VolumeClaimTemplate changes` (v1.9.0
/// test/e2e/apps/v1alpha1/cloneset.go, `testUpdateVolumeClaimTemplates`), step for step, with the
/// gate on as upstream's e2e runs it (`AllAlpha=true`): a v1alpha1 CloneSet of 4 Pods with two
/// claim templates; image and claim change → every Pod and claim recreated (fresh instance ids and
/// claim names); claims only → nothing moves; image only after that → recreated with the new
/// sizes; InPlaceOnly → in place, the claims kept even when their templates change. Each step
/// waits, as upstream's `changeCloneSetAndWaitReady`, for 4 updated ready replicas at the observed
/// generation (120 s) and Progressing `CloneSetAvailable`.
#[tokio::test]
async fn upstream_update_with_volume_claim_template_changes() -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    use std::collections::BTreeSet;
    const REPLICAS: usize = 4;
    const WAIT: Duration = Duration::from_secs(120);
    const ID: &str = "apps.kruise.io/cloneset-instance-id";
    let bed = testbed();
    manager(bed);
    let ns = bed.namespace("gate-vct-up").await?;
    ns.run(async {
        let vcts = |vol1: &str, vol2: &str| {
            let claim = |name: &str, size: &str| {
                json!({"metadata": {"name": name}, "spec": {"accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": size}}}})
            };
            json!([claim("data-vol1", vol1), claim("data-vol2", vol2)])
        };
        let mut doc = cloneset(
            "vctup",
            REPLICAS as i32,
            "docker.io/library/nginx:alpine",
            json!({"updateStrategy": {"type": "ReCreate"}, "minReadySeconds": 10,
                "progressDeadlineSeconds": 600, "volumeClaimTemplates": vcts("1Gi", "1Gi")}),
        );
        doc["apiVersion"] = json!("apps.kruise.io/v1alpha1");
        apply(&ns, &doc).await?;
        let clonesets: Api<CloneSet> = ns.api();
        let pod_api: Api<Pod> = ns.api();
        let claims_api: Api<PersistentVolumeClaim> = ns.api();
        let image = |image: &str| json!({"spec": {"containers": [{"name": "nginx", "image": image}]}});
        let steps = [
            VctStep {
                what: "image and volumeClaimTemplates",
                patch: json!({"template": image("registry.k8s.io/e2e-test-images/nginx:1.15-4"),
                    "volumeClaimTemplates": vcts("2Gi", "1Gi"),
                    "updateStrategy": {"type": "InPlaceIfPossible"}}),
                pods_recreated: true,
                claims_recreated: true,
                sizes: ("2Gi", "1Gi"),
            },
            VctStep {
                what: "volumeClaimTemplates only",
                patch: json!({"volumeClaimTemplates": vcts("2Gi", "2Gi"),
                    "updateStrategy": {"type": "InPlaceIfPossible"}}),
                pods_recreated: false,
                claims_recreated: false,
                sizes: ("2Gi", "1Gi"),
            },
            VctStep {
                what: "image, after the claim change of the previous step",
                patch: json!({"template": image("registry.k8s.io/e2e-test-images/redis:5.0.5-alpine"),
                    "updateStrategy": {"type": "InPlaceIfPossible"}}),
                pods_recreated: true,
                claims_recreated: true,
                sizes: ("2Gi", "2Gi"),
            },
            VctStep {
                what: "InPlaceOnly with an image change",
                patch: json!({"template": image("registry.k8s.io/e2e-test-images/httpd:2.4.38-4"),
                    "updateStrategy": {"type": "InPlaceOnly"}}),
                pods_recreated: false,
                claims_recreated: false,
                sizes: ("2Gi", "2Gi"),
            },
            VctStep {
                what: "InPlaceOnly with image and claim changes",
                patch: json!({"template": image("registry.k8s.io/e2e-test-images/redis:5.0.5-alpine"),
                    "volumeClaimTemplates": vcts("3Gi", "3Gi"),
                    "updateStrategy": {"type": "InPlaceOnly"}}),
                pods_recreated: false,
                claims_recreated: false,
                sizes: ("2Gi", "2Gi"),
            },
        ];

        // Upstream's changeCloneSetAndWaitReady after its change: the instance ids of the Pods and
        // the names of the live claims, once the CloneSet is ready again.
        let wait_ready = |what: String| {
            let (clonesets, pod_api, claims_api) = (&clonesets, &pod_api, &claims_api);
            async move {
                until(format!("{what}: status.replicas {REPLICAS}"), TIMEOUT, || async {
                    Ok(status_of(&clonesets.get("vctup").await?).replicas == REPLICAS as i32)
                })
                .await?;
                tokio::time::sleep(Duration::from_secs(3)).await;
                until(format!("{what}: {REPLICAS} updated ready replicas"), WAIT, || async {
                    let cs = clonesets.get("vctup").await?;
                    let s = status_of(&cs);
                    Ok(cs.metadata.generation == Some(s.observed_generation)
                        && s.updated_ready_replicas == REPLICAS as i32)
                })
                .await?;
                until(format!("{what}: Progressing CloneSetAvailable"), WAIT, || async {
                    let cs = clonesets.get("vctup").await?;
                    Ok(cs.status.as_ref().is_some_and(|s| {
                        s.conditions.iter().any(|c| {
                            c.type_ == "Progressing"
                                && c.status == "True"
                                && c.reason == "CloneSetAvailable"
                                && c.message == "CloneSet is available"
                        })
                    }))
                })
                .await?;
                let pods = active_pods(pod_api, "app=vctup").await?;
                ensure!(pods.len() == REPLICAS, "{what}: {} Pods", pods.len());
                let claims: Vec<PersistentVolumeClaim> = claims_api
                    .list(&Default::default())
                    .await?
                    .items
                    .into_iter()
                    .filter(|c| c.metadata.deletion_timestamp.is_none())
                    .collect();
                anyhow::Ok((pods, claims))
            }
        };
        let claim_id = |c: &PersistentVolumeClaim| {
            c.metadata.labels.as_ref().and_then(|l| l.get(ID)).cloned().unwrap_or_default()
        };
        let claim_size = |c: &PersistentVolumeClaim| {
            c.spec.as_ref().and_then(|s| s.resources.as_ref()).and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get("storage")).map(|q| q.0.clone()).unwrap_or_default()
        };

        let (pods, claims) = wait_ready("created".into()).await?;
        let mut ids: BTreeSet<String> =
            pods.iter().filter_map(|p| label(p, ID).map(str::to_owned)).collect();
        let mut claim_names: BTreeSet<String> = claims.iter().map(|c| c.name_any()).collect();
        for step in steps {
            let what = step.what;
            merge_patch(&ns, "clonesets.v1alpha1.apps.kruise.io", "vctup", &json!({"spec": step.patch}))
                .await?;
            let (pods, claims) = wait_ready(what.to_owned()).await?;
            let new_ids: BTreeSet<String> =
                pods.iter().filter_map(|p| label(p, ID).map(str::to_owned)).collect();
            // checkPodsDoRecreate
            for pod in &pods {
                let kept = label(pod, ID).is_some_and(|id| ids.contains(id));
                ensure!(kept != step.pods_recreated, "{what}: Pod {} kept {kept} (old ids {ids:?})", name(pod));
            }
            // checkPVCsDoRecreate and the sizes
            ensure!(claims.len() == REPLICAS * 2, "{what}: {} live claims", claims.len());
            for claim in &claims {
                let (id, claim_name, size) = (claim_id(claim), claim.name_any(), claim_size(claim));
                ensure!(new_ids.contains(&id), "{what}: claim {claim_name} of no live Pod ({new_ids:?})");
                ensure!(ids.contains(&id) != step.claims_recreated, "{what}: claim {claim_name}'s id, old ids {ids:?}");
                ensure!(claim_names.contains(&claim_name) != step.claims_recreated,
                    "{what}: claim {claim_name}, old claims {claim_names:?}");
                let want = if claim_name.contains("data-vol1") { step.sizes.0 } else { step.sizes.1 };
                ensure!(size == want, "{what}: claim {claim_name} asks for {size}, not {want}");
            }
            ids = new_ids;
            claim_names = claims.iter().map(|c| c.name_any()).collect();
        }
        Ok(())
    })
    .await
}

/// `EnhancedLivenessProbe`: the Pod of a CloneSet whose template asks for it
/// (`apps.kruise.io/using-enhanced-liveness: "true"`) is created without its liveness probe, which
/// is kept in `apps.kruise.io/container-probe-context`; a Pod no OpenKruise workload owns keeps its
/// probe even when annotated.
#[tokio::test]
async fn enhanced_liveness_moves_the_probe_into_the_pod_annotation() -> anyhow::Result<()> {
    let bed = testbed();
    manager(bed);
    let ns = bed.namespace("gate-liveness").await?;
    ns.run(async {
        let asked = json!({"apps.kruise.io/using-enhanced-liveness": "true"});
        let probe = json!({"tcpSocket": {"port": 80}, "periodSeconds": 7});
        let container = json!([{"name": "nginx", "image": IMAGE_A, "livenessProbe": probe}]);
        apply(
            &ns,
            &cloneset(
                "liveness",
                1,
                IMAGE_A,
                json!({"template": {"metadata": {"annotations": asked}, "spec": {"containers": container}}}),
            ),
        )
        .await?;
        let plain = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "plain", "annotations": asked},
            "spec": {"containers": container}});
        apply(&ns, &plain).await?;
        let pod_api: Api<Pod> = ns.api();
        let pod = eventually("the CloneSet's Pod", TIMEOUT, || async {
            Ok(active_pods(&pod_api, "app=liveness").await?.into_iter().next())
        })
        .await?;
        let containers = &pod.spec.as_ref().map(|s| s.containers.clone()).unwrap_or_default();
        ensure!(
            containers.iter().all(|c| c.liveness_probe.is_none()),
            "{}: the kubelet still has a liveness probe",
            name(&pod)
        );
        let context = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("apps.kruise.io/container-probe-context"))
            .map(|v| serde_json::from_str::<serde_json::Value>(v))
            .transpose()?;
        // The probe as the apiserver defaulted it in the template.
        let moved = context.as_ref().and_then(|c| c.as_array()).map(|list| {
            list.iter()
                .map(|c| {
                    (
                        c["name"].clone(),
                        c["livenessProbe"]["tcpSocket"]["port"].clone(),
                        c["livenessProbe"]["periodSeconds"].clone(),
                        c["livenessProbe"]["failureThreshold"].clone(),
                    )
                })
                .collect::<Vec<_>>()
        });
        ensure!(
            moved == Some(vec![(json!("nginx"), json!(80), json!(7), json!(3))]),
            "probe context {context:?}"
        );
        let plain: Pod = pod_api.get("plain").await?;
        ensure!(
            plain.spec.as_ref().is_some_and(|s| s.containers[0].liveness_probe.is_some()),
            "a Pod no OpenKruise workload owns lost its liveness probe"
        );
        Ok(())
    })
    .await
}

/// `EnablePodProbeMarkerOnServerless`: a Pod bound to a virtual-kubelet node (`type:
/// virtual-kubelet`, which runs no kruise-daemon) is created carrying the matching PodProbeMarker's
/// probes for its kubelet to run; when that kubelet reports the probe's condition, the controller puts
/// the marker policy's labels and annotations on the Pod. The test plays the virtual kubelet: a Node
/// object with its label (tainted, so that nothing else is scheduled there) and the Pod's status.
#[tokio::test]
async fn serverless_pods_carry_their_probes_and_are_marked_from_their_conditions()
-> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::Node;
    use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
    let bed = testbed();
    manager(bed);
    let ns = bed.namespace("gate-serverless").await?;
    let nodes: Api<Node> = Api::all(ns.client.clone());
    let node = format!("vk-{}", ns.name);
    let result = ns
        .run(async {
            nodes
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(json!({
                        "apiVersion": "v1", "kind": "Node",
                        "metadata": {"name": node, "labels": {"type": "virtual-kubelet"}},
                        "spec": {"taints": [{"key": "virtual-kubelet.io/provider", "value": "test", "effect": "NoSchedule"}]},
                    }))?,
                )
                .await?;
            let marker = json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "PodProbeMarker",
                "metadata": {"name": "game"},
                "spec": {
                    "selector": {"matchLabels": {"app": "vk"}},
                    "probes": [{
                        "name": "healthy", "containerName": "main",
                        "probe": {"exec": {"command": ["cat", "/tmp/healthy"]}, "periodSeconds": 3},
                        "podConditionType": "game.kruise.io/healthy",
                        "markerPolicy": [
                            {"state": "Succeeded", "labels": {"healthy": "true"},
                             "annotations": {"controller.kubernetes.io/pod-deletion-cost": "10"}},
                            {"state": "Failed", "labels": {"healthy": "false"}},
                        ],
                    }],
                }});
            apply(&ns, &marker).await?;
            let pod_doc = json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "vk", "labels": {"app": "vk"}},
                "spec": {"nodeName": node, "containers": [{"name": "main", "image": IMAGE_A}]}});
            let pod: Pod = serde_json::from_value(pod_doc)?;
            let pod_api: Api<Pod> = ns.api();
            // Once the webhook's cache holds the marker (a dry run shows it).
            let dry = PostParams {
                dry_run: true,
                ..PostParams::default()
            };
            eventually("a dry-run Pod carries the marker's probes", TIMEOUT, || async {
                let created = pod_api.create(&dry, &pod).await?;
                Ok(created
                    .metadata
                    .annotations
                    .is_some_and(|a| a.contains_key("kruise.io/podprobe"))
                    .then_some(()))
            })
            .await?;
            let created = pod_api.create(&PostParams::default(), &pod).await?;
            let annotations = created.metadata.annotations.unwrap_or_default();
            ensure!(
                annotations.get("kruise.io/podprobemarker-list").map(String::as_str) == Some("game"),
                "podprobemarker-list: {annotations:?}"
            );
            let probes: serde_json::Value = serde_json::from_str(
                annotations.get("kruise.io/podprobe").map(String::as_str).unwrap_or("null"),
            )?;
            ensure!(
                probes
                    == json!([{"name": "healthy", "containerName": "main",
                        "probe": {"exec": {"command": ["cat", "/tmp/healthy"]}, "periodSeconds": 3},
                        "podConditionType": "game.kruise.io/healthy"}]),
                "kruise.io/podprobe: {probes}"
            );
            // The virtual kubelet reports the Pod running and the probe's condition.
            let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
            let status = |healthy: &str| {
                json!({"status": {"phase": "Running", "conditions": [
                    {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                    {"type": "game.kruise.io/healthy", "status": healthy, "lastTransitionTime": now},
                ]}})
            };
            pod_api
                .patch_status("vk", &PatchParams::default(), &Patch::Strategic(status("True")))
                .await?;
            let marked = |label: &'static str, cost: Option<&'static str>| {
                let pod_api = pod_api.clone();
                async move {
                    eventually(&format!("the Pod marked healthy={label}"), TIMEOUT, || async {
                        let pod = pod_api.get("vk").await?;
                        let labels = pod.metadata.labels.unwrap_or_default();
                        let annotations = pod.metadata.annotations.unwrap_or_default();
                        let done = labels.get("healthy").map(String::as_str) == Some(label)
                            && (cost.is_none()
                                || annotations
                                    .get("controller.kubernetes.io/pod-deletion-cost")
                                    .map(String::as_str)
                                    == cost);
                        Ok(done.then_some(()))
                    })
                    .await
                }
            };
            marked("true", Some("10")).await?;
            pod_api
                .patch_status("vk", &PatchParams::default(), &Patch::Strategic(status("False")))
                .await?;
            marked("false", None).await?;
            let markers: Api<kruise_api::podprobemarker::PodProbeMarker> = ns.api();
            eventually("the marker counts the Pod", TIMEOUT, || async {
                let marker = markers.get("game").await?;
                Ok((marker.status.unwrap_or_default().matched_pods == 1).then_some(()))
            })
            .await?;
            Ok(())
        })
        .await;
    // No kubelet will confirm the Pod's deletion: it goes at once, then its Node.
    let pods: Api<Pod> = ns.api();
    let _ = pods
        .delete("vk", &DeleteParams::default().grace_period(0))
        .await;
    let _ = nodes.delete(&node, &DeleteParams::default()).await;
    result
}

/// A CloneSet whose container reads label `tier` through the downward API; `policy` is its
/// podUpdatePolicy.
fn tier_reader(name: &str, policy: &str) -> serde_json::Value {
    let spec = json!({"updateStrategy": {"rollingUpdate": {
        "podUpdatePolicy": policy, "maxUnavailable": 2,
        "inPlaceUpdateStrategy": {"gracePeriodSeconds": 0}
    }}});
    let mut doc = cloneset(name, 2, IMAGE_A, spec);
    doc["spec"]["template"]["metadata"]["labels"]["tier"] = json!("gold");
    doc["spec"]["template"]["spec"]["containers"][0]["env"] = json!([{
        "name": "TIER",
        "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['tier']"}}
    }]);
    doc
}

const TIER_WHY: &str = "env from metadata changed (container nginx reads metadata.labels['tier']) \
and InPlaceUpdateEnvFromMetadata is off";

fn uid_set(pods: &[Pod]) -> std::collections::BTreeSet<String> {
    pods.iter().map(uid).collect()
}

/// `InPlaceUpdateEnvFromMetadata` off, InPlaceOnly: a label a container reads changes; only a new
/// container process sees it and nothing restarts it, and InPlaceOnly forbids recreating, so the
/// Pods are left as they are, each with a `RefusePodNotInPlace` Warning Event saying why, and the
/// CloneSet's FailedUpdate condition carries the reason.
#[tokio::test]
async fn env_label_change_under_in_place_only_is_refused_and_says_why() -> anyhow::Result<()> {
    let bed = testbed();
    manager(bed);
    let ns = bed.namespace("gate-envonly").await?;
    ns.run(async {
        apply(&ns, &tier_reader("envonly", "InPlaceOnly")).await?;
        let (_, before) = wait_converged(&ns, "envonly", 2, TIMEOUT).await?;
        merge_patch(
            &ns,
            "cloneset",
            "envonly",
            &json!({"spec": {"template": {"metadata": {"labels": {"tier": "silver"}}}}}),
        )
        .await?;
        let names: Vec<String> = before.iter().map(name).collect();
        kruise_e2e::cloneset_kit::wait_events(
            &ns,
            "envonly",
            "RefusePodNotInPlace",
            &names
                .iter()
                .cloned()
                .chain([
                    TIER_WHY.to_string(),
                    "InPlaceOnly does not recreate it".to_string(),
                ])
                .collect::<Vec<_>>(),
        )
        .await?;
        eventually("FailedUpdate=True saying why", TIMEOUT, || async {
            let cs: CloneSet = ns.api().get("envonly").await?;
            let found = cs
                .status
                .iter()
                .flat_map(|s| s.conditions.iter())
                .find(|c| c.type_ == "FailedUpdate")
                .cloned();
            match found {
                Some(c) if c.status == "True" && c.message.contains(TIER_WHY) => Ok(Some(())),
                other => Err(anyhow::anyhow!("FailedUpdate: {other:?}")),
            }
        })
        .await?;
        let pod_api: Api<Pod> = ns.api();
        kruise_e2e::cloneset_kit::holds("no Pod touched", Duration::from_secs(3), || async {
            let pods = active_pods(&pod_api, "app=envonly").await?;
            Ok(uid_set(&pods) == uid_set(&before)
                && pods.iter().all(|p| {
                    kruise_e2e::cloneset_kit::restarts(p) == 0 && label(p, "tier") == Some("gold")
                }))
        })
        .await?;
        Ok(())
    })
    .await
}

/// `InPlaceUpdateEnvFromMetadata` off, InPlaceIfPossible: the label change recreates the Pods
/// (OpenKruise's `SuccessfulUpdatePodReCreate` Event) and a `RecreatePodNotInPlace` Event says why.
#[tokio::test]
async fn env_label_change_recreates_and_says_why() -> anyhow::Result<()> {
    let bed = testbed();
    manager(bed);
    let ns = bed.namespace("gate-envmeta").await?;
    ns.run(async {
        apply(&ns, &tier_reader("envmeta", "InPlaceIfPossible")).await?;
        let (_, before) = wait_converged(&ns, "envmeta", 2, TIMEOUT).await?;
        merge_patch(
            &ns,
            "cloneset",
            "envmeta",
            &json!({"spec": {"template": {"metadata": {"labels": {"tier": "silver"}}}}}),
        )
        .await?;
        let pod_api: Api<Pod> = ns.api();
        let after = eventually("both Pods recreated with tier=silver", TIMEOUT, || async {
            let pods = active_pods(&pod_api, "app=envmeta").await?;
            Ok((pods.len() == 2
                && uid_set(&pods).is_disjoint(&uid_set(&before))
                && pods.iter().all(|p| label(p, "tier") == Some("silver")))
            .then_some(pods))
        })
        .await?;
        ensure!(after.len() == 2);
        let recreated: Vec<String> = before.iter().map(name).collect();
        kruise_e2e::cloneset_kit::wait_events(
            &ns,
            "envmeta",
            "SuccessfulUpdatePodReCreate",
            &recreated,
        )
        .await?;
        kruise_e2e::cloneset_kit::wait_events(
            &ns,
            "envmeta",
            "RecreatePodNotInPlace",
            &recreated
                .iter()
                .cloned()
                .chain([TIER_WHY.to_string()])
                .collect::<Vec<_>>(),
        )
        .await?;
        Ok(())
    })
    .await
}
