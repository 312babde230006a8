//! Advanced StatefulSet end to end (issue 11): what a user sees with kubectl on a real control
//! plane with kubelet-sim — Pod identity, in-place updates under the rollout monitor, claims and
//! their retention, OrderedReady ordering, partition, InPlaceOnly refusal, and the same identity as
//! Kubernetes' own StatefulSet controller for the same spec.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, ensure};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kruise_api::statefulset::v1beta1::StatefulSet;
use kruise_e2e::cloneset_kit::{describe, label, name, restarts, spec_image, uid};
use kruise_e2e::statefulset_kit::*;
use kruise_e2e::{container_status, is_ready, node_name, pod_ip};
use kruise_testkit::{Limits, RolloutMonitor, eventually, managed_namespace};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(150);
const SEED_CONTAINER: &str = "guestbook-kruise";

/// Seed 000's Advanced StatefulSet, exactly as the article writes it (v1alpha1).
const SEED_000: &str = r#"apiVersion: apps.kruise.io/v1alpha1
kind: StatefulSet
metadata:
  name: demo-v1-guestbook-kruise
  labels:
    app.kubernetes.io/name: guestbook-kruise
    app.kubernetes.io/instance: demo-v1
spec:
  replicas: 20
  serviceName: demo-v1-guestbook-kruise
  selector:
    matchLabels:
      app.kubernetes.io/name: guestbook-kruise
      app.kubernetes.io/instance: demo-v1
  template:
    metadata:
      labels:
        app.kubernetes.io/name: guestbook-kruise
        app.kubernetes.io/instance: demo-v1
    spec:
      readinessGates:
        # A new condition that ensures the pod remains at NotReady state while the in-place update is happening
      - conditionType: InPlaceUpdateReady
      containers:
      - name: guestbook-kruise
        image: openkruise/guestbook:v1
        imagePullPolicy: Always
        ports:
        - name: http-server
          containerPort: 3000
  podManagementPolicy: Parallel  # allow parallel updates, works together with maxUnavailable
  updateStrategy:
    type: RollingUpdate
    rollingUpdate:
      # Do in-place update if possible, currently only image update is supported for in-place update
      podUpdatePolicy: InPlaceIfPossible
      # Allow parallel updates with max number of unavailable instances equals to 2
      maxUnavailable: 3
"#;

#[tokio::test]
async fn seed_000_statefulset_updates_twenty_pods_in_place() -> anyhow::Result<()> {
    let ns = managed_namespace("asts-seed").await?;
    ns.run(async {
        ns.apply(SEED_000).await?;
        let selector = "app.kubernetes.io/instance=demo-v1";
        let (_, before) =
            wait_complete(&ns, "demo-v1-guestbook-kruise", selector, 20, TIMEOUT).await?;
        let names: Vec<String> = before.iter().map(name).collect();
        let wanted: Vec<String> = (0..20)
            .map(|i| format!("demo-v1-guestbook-kruise-{i}"))
            .collect();
        ensure!(names == wanted, "Pod names: {names:?}");

        let limits = Limits {
            replicas: 20,
            max_unavailable: 3,
            max_surge: 0,
            min_old_revision_pods: None,
        };
        let monitor = RolloutMonitor::start(ns.client.clone(), &ns.name, selector, limits).await?;
        ns.kubectl(&[
            "patch",
            "statefulsets.apps.kruise.io",
            "demo-v1-guestbook-kruise",
            "--type=json",
            "-p",
            r#"[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"openkruise/guestbook:v2"}]"#,
        ])
        .await?;
        let (set, after) = monitor
            .eventually("all 20 Pods on v2", TIMEOUT, || async {
                let s = get_set(&ns, "demo-v1-guestbook-kruise").await?;
                let pods = set_pods(&ns, selector).await?;
                let st = s.status.clone().unwrap_or_default();
                let done = s.metadata.generation == Some(st.observed_generation)
                    && st.updated_replicas == 20
                    && st.ready_replicas == 20
                    && st.current_revision == st.update_revision
                    && pods.len() == 20
                    && pods.iter().all(|p| {
                        is_ready(p)
                            && container_status(p, SEED_CONTAINER).is_some_and(|c| kruise_e2e::same_image(&c.image, "openkruise/guestbook:v2"))
                    });
                Ok(done.then_some((s, pods)))
            })
            .await?;
        let stats = monitor.finish().await?;
        eprintln!("seed 000 ASTS rollout: {stats:?}");
        for (old, new) in before.iter().zip(&after) {
            ensure!(
                (name(old), uid(old), node_name(old), pod_ip(old))
                    == (name(new), uid(new), node_name(new), pod_ip(new)),
                "Pod {} was not updated in place: {:?} became {:?}",
                name(old),
                (name(old), uid(old), node_name(old), pod_ip(old)),
                (name(new), uid(new), node_name(new), pod_ip(new))
            );
            let restarted = container_status(new, SEED_CONTAINER).map(|c| c.restart_count);
            ensure!(restarted == Some(1), "{} restarts {restarted:?}", name(new));
        }
        let st = set.status.unwrap_or_default();
        ensure!(st.replicas == 20 && st.updated_replicas == 20, "{st:?}");
        Ok(())
    })
    .await
}

/// examples/advanced-statefulset.yaml with `namespace: default` left out (the test's namespace).
fn example() -> anyhow::Result<String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/advanced-statefulset.yaml");
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    Ok(text
        .lines()
        .filter(|l| l.trim() != "namespace: default")
        .collect::<Vec<_>>()
        .join("\n"))
}

#[tokio::test]
async fn example_reserves_ordinals_keeps_claims_and_honours_the_pre_delete_hook()
-> anyhow::Result<()> {
    let ns = managed_namespace("asts-example").await?;
    ns.run(async {
        ns.apply(&example()?).await?;
        let (_, pods) = wait_complete(&ns, "web", "app=web", 5, TIMEOUT).await?;
        let names: Vec<String> = pods.iter().map(name).collect();
        ensure!(
            names == ["web-0", "web-2", "web-3", "web-4", "web-5"],
            "reserved ordinal 1 is skipped: {names:?}"
        );
        let claims = claim_uids(&ns).await?;
        let wanted = [
            "data-web-0",
            "data-web-2",
            "data-web-3",
            "data-web-4",
            "data-web-5",
        ];
        ensure!(
            claims.keys().map(String::as_str).collect::<Vec<_>>() == wanted,
            "claims: {claims:?}"
        );
        let pvcs: Api<PersistentVolumeClaim> = ns.api();
        for claim in wanted {
            let c = pvcs.get(claim).await?;
            let phase = c.status.and_then(|s| s.phase).unwrap_or_default();
            ensure!(phase == "Bound", "{claim} is {phase}");
        }

        // whenScaled Retain: scaling down keeps the claims; scaling up reuses them.
        scale(&ns, "web", 3).await?;
        wait_complete(&ns, "web", "app=web", 3, TIMEOUT).await?;
        ensure!(
            claim_uids(&ns).await? == claims,
            "claims kept on scale-down"
        );
        scale(&ns, "web", 5).await?;
        wait_complete(&ns, "web", "app=web", 5, TIMEOUT).await?;
        ensure!(
            claim_uids(&ns).await? == claims,
            "claims reused on scale-up"
        );

        // The preDelete hook holds a Pod that carries its label.
        let pods: Api<Pod> = ns.api();
        pods.patch(
            "web-5",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {"example.com/drain": "true"}}})),
        )
        .await?;
        scale(&ns, "web", 4).await?;
        eventually("web-5 held in PreparingDelete", TIMEOUT, || async {
            let p = pods.get("web-5").await?;
            Ok(
                (label(&p, "lifecycle.apps.kruise.io/state") == Some("PreparingDelete")
                    && p.metadata.deletion_timestamp.is_none())
                .then_some(()),
            )
        })
        .await?;
        pods.patch(
            "web-5",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"labels": {"example.com/drain": null}}})),
        )
        .await?;
        wait_complete(&ns, "web", "app=web", 4, TIMEOUT).await?;

        // whenDeleted Delete: the claims go with the set.
        let sets: Api<StatefulSet> = ns.api();
        sets.delete("web", &DeleteParams::background()).await?;
        eventually("the set's claims deleted", TIMEOUT, || async {
            Ok(claim_uids(&ns).await?.is_empty().then_some(()))
        })
        .await?;
        Ok(())
    })
    .await
}

#[tokio::test]
async fn ordered_ready_matches_the_native_statefulset_side_by_side() -> anyhow::Result<()> {
    let ns = managed_namespace("asts-native").await?;
    ns.run(async {
        let mut histories = Vec::new();
        let mut identities = Vec::new();
        for (api_version, set) in [("apps/v1", "same"), ("apps.kruise.io/v1beta1", "same")] {
            let doc = stateful_set(api_version, set, 3, "nginx:1.25", json!({}));
            ns.apply(&serde_json::to_string(&doc)?).await?;
            let (created, _) = ordered_history(&ns, "app=same", TIMEOUT, |pods| {
                pods.len() == 3 && pods.iter().all(is_ready)
            })
            .await?;
            identities.push(identity(&set_pods(&ns, "app=same").await?));
            let kind = if api_version == "apps/v1" {
                "statefulsets.apps"
            } else {
                "statefulsets.apps.kruise.io"
            };
            ns.kubectl(&["scale", kind, set, "--replicas=1"]).await?;
            let (_, deleted) =
                ordered_history(&ns, "app=same", TIMEOUT, |pods| pods.len() == 1).await?;
            histories.push((api_version, created, deleted));
            // Delete the set, keep nothing of it but its claims (retained by default).
            ns.kubectl(&["delete", kind, set, "--wait=true"]).await?;
            eventually("the set's Pods gone", TIMEOUT, || async {
                Ok(set_pods(&ns, "app=same").await?.is_empty().then_some(()))
            })
            .await?;
        }
        ensure!(
            identities[0] == identities[1],
            "identity differs:\nnative {:?}\nkruise {:?}",
            identities[0],
            identities[1]
        );
        for (api_version, created, deleted) in &histories {
            ensure!(
                created == &["same-0", "same-1", "same-2"],
                "{api_version} created {created:?}"
            );
            ensure!(
                deleted == &["same-2", "same-1"],
                "{api_version} deleted {deleted:?}"
            );
        }
        let claims = claim_uids(&ns).await?;
        ensure!(
            claims.keys().map(String::as_str).collect::<Vec<_>>()
                == ["data-same-0", "data-same-1", "data-same-2"],
            "both controllers use the same claims: {claims:?}"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn a_never_ready_pod_stops_ordered_ready_creation_and_is_named() -> anyhow::Result<()> {
    let ns = managed_namespace("asts-stuck").await?;
    ns.run(async {
        let doc = stateful_set(
            "apps.kruise.io/v1beta1",
            "stuck",
            3,
            "nginx:never-ready",
            json!({"metadata": {"annotations": {"kruise-rs.io/progress-deadline-seconds": "5"}}}),
        );
        ns.apply(&serde_json::to_string(&doc)?).await?;
        let set = eventually("Progressing names stuck-0", TIMEOUT, || async {
            let s = get_set(&ns, "stuck").await?;
            let named = condition(&s, "Progressing").is_some_and(|(status, reason, message)| {
                status == "False"
                    && reason == "ProgressDeadlineExceeded"
                    && message.contains("waiting for stuck-0 to be Running and Ready")
            });
            Ok(named.then_some(s))
        })
        .await?;
        let pods = set_pods(&ns, "app=stuck").await?;
        ensure!(
            pods.iter().map(name).collect::<Vec<_>>() == ["stuck-0"],
            "creation stops at the never-ready Pod:\n{}",
            describe(&pods)
        );
        let available = condition(&set, "Available");
        ensure!(
            available.as_ref().is_some_and(|(s, _, _)| s == "False"),
            "Available: {available:?}"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn ordered_partition_updates_the_highest_ordinals_and_in_place_only_refuses_env()
-> anyhow::Result<()> {
    let ns = managed_namespace("asts-partition").await?;
    ns.run(async {
        let doc = stateful_set(
            "apps.kruise.io/v1beta1",
            "part",
            5,
            "nginx:1.25",
            json!({"spec": {
                "podManagementPolicy": "Parallel",
                "template": {"spec": {"readinessGates": [{"conditionType": "InPlaceUpdateReady"}]}},
                "updateStrategy": {"rollingUpdate": {
                    "partition": 3, "podUpdatePolicy": "InPlaceOnly"
                }}
            }}),
        );
        ns.apply(&serde_json::to_string(&doc)?).await?;
        let (_, before) = wait_complete(&ns, "part", "app=part", 5, TIMEOUT).await?;
        let sets: Api<StatefulSet> = ns.api();
        let image = |image: &str| {
            json!({"spec": {"template": {"spec": {"containers": [{"name": "nginx", "image": image}]}}}})
        };
        sets.patch("part", &PatchParams::default(), &Patch::Merge(&image("nginx:1.26")))
            .await?;
        let updated = |pods: &[Pod]| -> Vec<String> {
            pods.iter()
                .filter(|p| spec_image(p).as_deref() == Some("nginx:1.26") && is_ready(p))
                .map(name)
                .collect()
        };
        eventually("ordinals 4 and 3 updated", TIMEOUT, || async {
            let pods = set_pods(&ns, "app=part").await?;
            let s = get_set(&ns, "part").await?;
            let st = s.status.unwrap_or_default();
            Ok((updated(&pods) == ["part-3", "part-4"]
                && st.updated_replicas == 2
                && st.updated_ready_replicas == 2)
                .then_some(()))
        })
        .await?;
        // Lowering the partition continues the rollout, in place.
        sets.patch(
            "part",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"updateStrategy": {"rollingUpdate": {"partition": 0}}}})),
        )
        .await?;
        let (_, after) = wait_complete(&ns, "part", "app=part", 5, TIMEOUT).await?;
        for (old, new) in before.iter().zip(&after) {
            ensure!(uid(old) == uid(new), "{} recreated", name(old));
            ensure!(restarts(new) == 1, "{} restarts {}", name(new), restarts(new));
        }

        // InPlaceOnly: only image changes are allowed; an env change is refused by the webhook,
        // naming the field, as upstream does, and no Pod is touched.
        let refused = sets
            .patch(
                "part",
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": {"template": {"spec": {"containers": [
                    {"name": "nginx", "image": "nginx:1.26", "env": [{"name": "MODE", "value": "x"}]}
                ]}}}})),
            )
            .await;
        let message = match refused {
            Ok(_) => anyhow::bail!("an env change under InPlaceOnly was accepted"),
            Err(e) => e.to_string(),
        };
        ensure!(
            message.contains("spec.template") && message.contains("InPlaceOnly"),
            "{message}"
        );
        let now = set_pods(&ns, "app=part").await?;
        for (old, new) in after.iter().zip(&now) {
            ensure!(
                uid(old) == uid(new) && new.metadata.deletion_timestamp.is_none(),
                "{} touched",
                name(old)
            );
        }
        Ok(())
    })
    .await
}

#[tokio::test]
async fn bad_input_is_rejected_naming_the_field_and_nothing_is_created() -> anyhow::Result<()> {
    let ns = managed_namespace("asts-bad").await?;
    ns.run(async {
        let cases = [
            (
                json!({"spec": {"selector": {"matchLabels": {"app": "other"}}}}),
                "spec.template.metadata.labels",
            ),
            (
                json!({"spec": {"podManagementPolicy": "Parallel", "updateStrategy": {"rollingUpdate": {"podUpdatePolicy": "InPlaceIfPossible"}}}}),
                "readinessGates",
            ),
            (
                json!({"spec": {"updateStrategy": {"rollingUpdate": {"maxUnavailable": 2}}}}),
                "maxUnavailable",
            ),
        ];
        for (extra, field) in cases {
            let doc = stateful_set("apps.kruise.io/v1beta1", "bad", 2, "nginx:1.25", extra);
            let result = ns.apply(&serde_json::to_string(&doc)?).await;
            let error = match result {
                Ok(out) => anyhow::bail!("accepted ({field}): {out}"),
                Err(e) => format!("{e:#}"),
            };
            ensure!(error.contains(field), "error does not name {field}: {error}");
        }
        let pods: Api<Pod> = ns.api();
        ensure!(pods.list(&ListParams::default()).await?.items.is_empty());
        Ok(())
    })
    .await
}

#[tokio::test]
async fn unordered_update_follows_priority_weights_pauses_and_keeps_half_available()
-> anyhow::Result<()> {
    let ns = managed_namespace("asts-unordered").await?;
    ns.run(async {
        let doc = stateful_set(
            "apps.kruise.io/v1beta1",
            "prio",
            6,
            "nginx:1.25",
            in_place(json!({
                "maxUnavailable": 1,
                "unorderedUpdate": {"priorityStrategy": {"weightPriority": [
                    {"weight": 100, "matchSelector": {"matchLabels": {"tier": "front"}}},
                    {"weight": 50, "matchSelector": {"matchLabels": {"tier": "mid"}}}
                ]}}
            })),
        );
        ns.apply(&serde_json::to_string(&doc)?).await?;
        let (_, before) = wait_complete(&ns, "prio", "app=prio", 6, TIMEOUT).await?;
        ns.kubectl(&["label", "pod", "prio-4", "tier=front"])
            .await?;
        ns.kubectl(&["label", "pod", "prio-1", "tier=mid"]).await?;

        // One at a time, by weight: prio-4 (100), then prio-1 (50), then the rest.
        let order = kruise_e2e::cloneset_kit::RevisionOrder::start(
            &ns,
            "app=prio",
            &revision_label(&before[0]),
        )
        .await?;
        let one = Limits {
            replicas: 6,
            max_unavailable: 1,
            max_surge: 0,
            min_old_revision_pods: None,
        };
        let monitor = RolloutMonitor::start(ns.client.clone(), &ns.name, "app=prio", one).await?;
        let sets: Api<StatefulSet> = ns.api();
        sets.patch(
            "prio",
            &PatchParams::default(),
            &Patch::Merge(&set_image_patch("nginx:1.26")),
        )
        .await?;
        let done = |image: &'static str| {
            let ns = &ns;
            move || async move {
                let s = get_set(ns, "prio").await?;
                let st = s.status.clone().unwrap_or_default();
                let pods = set_pods(ns, "app=prio").await?;
                let ok = s.metadata.generation == Some(st.observed_generation)
                    && st.updated_ready_replicas == 6
                    && st.current_revision == st.update_revision
                    && pods.len() == 6
                    && pods
                        .iter()
                        .all(|p| is_ready(p) && spec_image(p).as_deref() == Some(image));
                Ok(ok.then_some(pods))
            }
        };
        monitor
            .eventually("6 Pods on nginx:1.26", TIMEOUT, done("nginx:1.26"))
            .await?;
        monitor.finish().await?;
        let picked = order.order();
        ensure!(
            picked.len() == 6 && picked[..2] == ["prio-4", "prio-1"],
            "update order does not follow the weights: {picked:?}"
        );

        // Paused: the new revision is observed, no Pod moves to it.
        let generation = sets
            .patch(
                "prio",
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": {
                    "updateStrategy": {"rollingUpdate": {"paused": true, "maxUnavailable": "50%"}},
                    "template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]}}
                }})),
            )
            .await?
            .metadata
            .generation;
        eventually("the paused revision observed", TIMEOUT, || async {
            let s = get_set(&ns, "prio").await?;
            let st = s.status.unwrap_or_default();
            Ok((Some(st.observed_generation) == generation
                && st.update_revision != st.current_revision
                && st.updated_replicas == 0)
                .then_some(()))
        })
        .await?;
        kruise_e2e::cloneset_kit::holds(
            "paused: no Pod updated",
            Duration::from_secs(4),
            || async {
                let pods = set_pods(&ns, "app=prio").await?;
                Ok(pods.len() == 6
                    && pods
                        .iter()
                        .all(|p| spec_image(p).as_deref() == Some("nginx:1.26")))
            },
        )
        .await?;

        // Resumed with maxUnavailable 50%: three at a time, never more.
        let half = Limits {
            replicas: 6,
            max_unavailable: 3,
            max_surge: 0,
            min_old_revision_pods: None,
        };
        let monitor = RolloutMonitor::start(ns.client.clone(), &ns.name, "app=prio", half).await?;
        sets.patch(
            "prio",
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"spec": {"updateStrategy": {"rollingUpdate": {"paused": false}}}}),
            ),
        )
        .await?;
        let after = monitor
            .eventually("6 Pods on nginx:1.27", TIMEOUT, done("nginx:1.27"))
            .await?;
        let stats = monitor.finish().await?;
        eprintln!("ASTS 50% rollout: {stats:?}");
        for (old, new) in before.iter().zip(&after) {
            ensure!(uid(old) == uid(new), "{} recreated", name(old));
            ensure!(
                restarts(new) == 2,
                "{} restarts {}",
                name(new),
                restarts(new)
            );
        }
        Ok(())
    })
    .await
}

#[tokio::test]
async fn recreate_replaces_pods_resources_resize_without_restart_and_claims_grow()
-> anyhow::Result<()> {
    let ns = managed_namespace("asts-modes").await?;
    ns.run(async {
        let sets: Api<StatefulSet> = ns.api();
        let claims: Api<PersistentVolumeClaim> = ns.api();
        // ReCreate (the default): same names and claims, new Pods.
        let recreate = stateful_set(
            "apps.kruise.io/v1beta1",
            "recreate",
            2,
            "nginx:1.25",
            json!({"spec": {"podManagementPolicy": "Parallel"}}),
        );
        // InPlaceIfPossible with a resources-only change, and claims that grow on the roll.
        let resources = |cpu: &str, storage: &str| {
            json!({"spec": {
                "template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.25",
                    "resources": {"requests": {"cpu": cpu, "memory": "64Mi"},
                                  "limits": {"cpu": cpu, "memory": "64Mi"}}}]}},
                "volumeClaimTemplates": [{
                    "metadata": {"name": "data"},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}}}
                }]
            }})
        };
        let mut resize = stateful_set(
            "apps.kruise.io/v1beta1",
            "resize",
            2,
            "nginx:1.25",
            in_place(json!({})),
        );
        json_patch::merge(
            &mut resize,
            &json!({"spec": {"volumeClaimUpdateStrategy": {"type": "OnPodRollingUpdate"}}}),
        );
        json_patch::merge(&mut resize, &resources("100m", "1Gi"));
        ns.apply(&serde_json::to_string(&recreate)?).await?;
        ns.apply(&serde_json::to_string(&resize)?).await?;
        let (_, old_recreate) = wait_complete(&ns, "recreate", "app=recreate", 2, TIMEOUT).await?;
        let (_, old_resize) = wait_complete(&ns, "resize", "app=resize", 2, TIMEOUT).await?;
        let claims_before = claim_uids(&ns).await?;

        sets.patch("recreate", &PatchParams::default(), &Patch::Merge(&set_image_patch("nginx:1.26")))
            .await?;
        // Storage and resources change together: the claims grow as their Pods roll, and the Pods
        // are resized in place.
        let change = resources("200m", "2Gi");
        sets.patch("resize", &PatchParams::default(), &Patch::Merge(&change))
            .await?;

        let (_, new_recreate) = wait_complete(&ns, "recreate", "app=recreate", 2, TIMEOUT).await?;
        for (old, new) in old_recreate.iter().zip(&new_recreate) {
            ensure!(
                name(old) == name(new) && uid(old) != uid(new),
                "ReCreate keeps the name and replaces the Pod: {} {} -> {}",
                name(old),
                uid(old),
                uid(new)
            );
            ensure!(spec_image(new).as_deref() == Some("nginx:1.26"), "{}", name(new));
        }

        let new_resize = eventually("resize Pods resized in place", TIMEOUT, || async {
            let pods = set_pods(&ns, "app=resize").await?;
            let resized = pods.len() == 2
                && pods.iter().all(|p| {
                    is_ready(p)
                        && container_status(p, "nginx")
                            .and_then(|s| s.resources)
                            .and_then(|r| r.requests)
                            .and_then(|r| r.get("cpu").map(|q| q.0.clone()))
                            .as_deref()
                            == Some("200m")
                });
            Ok(resized.then_some(pods))
        })
        .await?;
        for (old, new) in old_resize.iter().zip(&new_resize) {
            ensure!(uid(old) == uid(new), "{} recreated for a resize", name(old));
            ensure!(
                restarts(new) == 0,
                "{} restarted for a resize ({})",
                name(new),
                restarts(new)
            );
        }
        for claim in ["data-resize-0", "data-resize-1"] {
            let grown = eventually(format!("{claim} grown to 2Gi"), TIMEOUT, || async {
                let c = claims.get(claim).await?;
                let requested = c
                    .spec
                    .as_ref()
                    .and_then(|s| s.resources.as_ref())
                    .and_then(|r| r.requests.as_ref())
                    .and_then(|r| r.get("storage"))
                    .map(|q| q.0.clone());
                let capacity = storage_capacity(&c);
                Ok((requested.as_deref() == Some("2Gi") && capacity.as_deref() == Some("2Gi"))
                    .then_some(c))
            })
            .await?;
            ensure!(
                claims_before.get(claim).map(String::as_str) == grown.metadata.uid.as_deref(),
                "{claim} was replaced instead of grown"
            );
        }
        // The ReCreate set's claims were reused, not replaced.
        let claims_after = claim_uids(&ns).await?;
        for claim in ["data-recreate-0", "data-recreate-1"] {
            ensure!(
                claims_before.get(claim) == claims_after.get(claim),
                "{claim} replaced: {claims_before:?} -> {claims_after:?}"
            );
        }
        Ok(())
    })
    .await
}

/// The #2276 precondition on an Advanced StatefulSet: a Pod is taken out of service
/// (InPlaceUpdateReady False) and its container is restarted only after the whole
/// `gracePeriodSeconds`, never earlier.
#[tokio::test]
async fn in_place_update_restarts_only_after_the_whole_grace_period() -> anyhow::Result<()> {
    const GRACE: i64 = 3;
    let ns = managed_namespace("asts-grace").await?;
    ns.run(async {
        let doc = stateful_set(
            "apps.kruise.io/v1beta1",
            "grace",
            2,
            "nginx:1.25",
            in_place(json!({"inPlaceUpdateStrategy": {"gracePeriodSeconds": GRACE}})),
        );
        ns.apply(&serde_json::to_string(&doc)?).await?;
        wait_complete(&ns, "grace", "app=grace", 2, TIMEOUT).await?;
        let sets: Api<StatefulSet> = ns.api();
        sets.patch("grace", &PatchParams::default(), &Patch::Merge(&set_image_patch("nginx:1.26")))
            .await?;
        // When each Pod was taken out of service, as the condition's own transition time says.
        let out_of_service: std::sync::Mutex<BTreeMap<String, jiff::Timestamp>> =
            std::sync::Mutex::new(BTreeMap::new());
        let after = eventually("both Pods updated in place", TIMEOUT, || {
            let out_of_service = &out_of_service;
            let ns = &ns;
            async move {
                let pods = set_pods(ns, "app=grace").await?;
                for p in &pods {
                    if let Some(c) = kruise_e2e::pod_condition(p, "InPlaceUpdateReady")
                        && c.status == "False"
                        && let Some(t) = &c.last_transition_time
                        && let Ok(mut seen) = out_of_service.lock()
                    {
                        seen.entry(name(p)).or_insert(t.0);
                    }
                }
                let done = pods.len() == 2
                    && pods.iter().all(|p| {
                        is_ready(p)
                            && container_status(p, "nginx").is_some_and(|c| kruise_e2e::same_image(&c.image, "nginx:1.26"))
                    });
                Ok(done.then_some(pods))
            }
        })
        .await
        .map_err(|e| {
            let seen = futures_status(&ns, "grace");
            anyhow::anyhow!("{e:#}; last status: {seen}")
        })?;
        let out_of_service = out_of_service
            .into_inner()
            .map_err(|_| anyhow::anyhow!("poisoned"))?;
        for pod in &after {
            let pod_name = name(pod);
            let since = out_of_service
                .get(&pod_name)
                .with_context(|| format!("{pod_name} was never seen out of service"))?;
            let started = container_status(pod, "nginx")
                .and_then(|c| c.state)
                .and_then(|s| s.running)
                .and_then(|r| r.started_at)
                .with_context(|| format!("{pod_name} has no running container"))?;
            // Timestamps have second resolution: allow one second of truncation.
            let waited = started.0.as_second() - since.as_second();
            ensure!(
                waited >= GRACE - 1,
                "{pod_name} restarted {waited} s after leaving service, before the {GRACE} s grace period"
            );
            ensure!(restarts(pod) == 1, "{pod_name} restarts {}", restarts(pod));
        }
        Ok(())
    })
    .await
}

/// OpenKruise v1.9.0's `VolumeExpansion … *cannot*` specs (test/e2e/apps/v1beta1/statefulset.go):
/// with `volumeClaimUpdateStrategy: OnPodRollingUpdate`, an update that changes the image and grows a
/// claim template whose StorageClass has `allowVolumeExpansion: false` is refused by the webhook,
/// naming the field, through either API version, and nothing changes; with a class that allows
/// expansion the same update is admitted and the claims grow.
#[tokio::test]
async fn volume_expansion_is_refused_when_the_storage_class_does_not_allow_it() -> anyhow::Result<()>
{
    use k8s_openapi::api::storage::v1::StorageClass;
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};

    let ns = managed_namespace("asts-expand").await?;
    let classes: Api<StorageClass> = Api::all(ns.client.clone());
    let deny = format!("no-expansion-{}", ns.name);
    let allow = format!("expansion-{}", ns.name);
    let result = ns
        .run(async {
            for (class, allowed) in [(&deny, false), (&allow, true)] {
                let sc: StorageClass = serde_json::from_value(json!({
                    "metadata": {"name": class},
                    // kubelet-sim provisions claims of any class with its provisioner.
                    "provisioner": "sim.kruise-rs.io/volume",
                    "reclaimPolicy": "Delete",
                    "allowVolumeExpansion": allowed,
                }))?;
                classes.create(&PostParams::default(), &sc).await?;
            }
            let set_of = |set: &str, class: &str| {
                stateful_set(
                    "apps.kruise.io/v1beta1",
                    set,
                    2,
                    "nginx:1.25",
                    json!({"spec": {
                        "podManagementPolicy": "Parallel",
                        "volumeClaimUpdateStrategy": {"type": "OnPodRollingUpdate"},
                        "volumeClaimTemplates": [{
                            "metadata": {"name": "data"},
                            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                                     "resources": {"requests": {"storage": "1Gi"}}}
                        }]
                    }}),
                )
            };
            ns.apply(&serde_json::to_string(&set_of("refused", &deny))?).await?;
            ns.apply(&serde_json::to_string(&set_of("admitted", &allow))?).await?;
            wait_complete(&ns, "refused", "app=refused", 2, TIMEOUT).await?;
            wait_complete(&ns, "admitted", "app=admitted", 2, TIMEOUT).await?;

            // The image and the claim template's storage together, as upstream's spec does. The
            // templates list is replaced whole by a merge patch.
            let grow = |class: &str| {
                json!({"spec": {
                    "template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.26"}]}},
                    "volumeClaimTemplates": [{
                        "metadata": {"name": "data"},
                        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                                 "resources": {"requests": {"storage": "2Gi"}}}
                    }]
                }})
            };
            let sets: Api<StatefulSet> = ns.api();
            let v1alpha1 = ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("apps.kruise.io", "v1alpha1", "StatefulSet"),
                "statefulsets",
            );
            let sets_v1alpha1: Api<DynamicObject> =
                Api::namespaced_with(ns.client.clone(), &ns.name, &v1alpha1);
            let before = sets.get("refused").await?;
            let refusals = [
                (
                    "v1beta1",
                    sets.patch("refused", &PatchParams::default(), &Patch::Merge(&grow(&deny)))
                        .await
                        .map(|_| ()),
                ),
                (
                    "v1alpha1",
                    sets_v1alpha1
                        .patch("refused", &PatchParams::default(), &Patch::Merge(&grow(&deny)))
                        .await
                        .map(|_| ()),
                ),
            ];
            for (version, refused) in refusals {
                let message = match refused {
                    Ok(()) => anyhow::bail!(
                        "growing a claim template of StorageClass {deny} was admitted ({version})"
                    ),
                    Err(e) => e.to_string(),
                };
                ensure!(
                    message.contains("spec.volumeClaimTemplates[data].spec.resources.requests.storage")
                        && message.contains(&format!(
                            "storage class {deny} does not support volume expansion"
                        )),
                    "{version}: {message}"
                );
            }
            let after = sets.get("refused").await?;
            ensure!(
                after.metadata.generation == before.metadata.generation
                    && after.spec == before.spec,
                "a refused update changed the set"
            );

            sets.patch("admitted", &PatchParams::default(), &Patch::Merge(&grow(&allow)))
                .await
                .context("growing a claim template of a class that allows expansion")?;
            wait_complete(&ns, "admitted", "app=admitted", 2, TIMEOUT).await?;
            let claims: Api<PersistentVolumeClaim> = ns.api();
            for claim in ["data-admitted-0", "data-admitted-1"] {
                eventually(format!("{claim} grown to 2Gi"), TIMEOUT, || async {
                    let c = claims.get(claim).await?;
                    Ok((storage_capacity(&c).as_deref() == Some("2Gi")).then_some(()))
                })
                .await?;
            }
            Ok(())
        })
        .await;
    for class in [&deny, &allow] {
        let _ = classes.delete(class, &DeleteParams::default()).await;
    }
    result
}
