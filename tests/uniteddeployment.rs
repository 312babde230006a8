//! UnitedDeployment end to end (issue 13): subsets provisioned as native StatefulSets (run by the
//! real kube-controller-manager), CloneSets and Deployments, replicas split as OpenKruise splits them,
//! Pods pinned to their subset's nodes, rollouts through every subset, manual partitions, scaling,
//! removing a subset, and bad input rejected.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Context, ensure};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use kruise_api::cloneset::v1beta1::CloneSet;
use kruise_api::uniteddeployment::v1beta1::UnitedDeployment;
use kruise_core::rollout::uniteddeployment::{Existing, allocate};
use kruise_e2e::cloneset_kit::{name, restarts, uid};
use kruise_e2e::same_image;
use kruise_e2e::{V1_9_UNITEDDEPLOYMENT, container_status, is_ready, node_name};
use kruise_testkit::{TestNamespace, eventually, fleet, testbed};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kubelet_sim::NodeSpecSim;
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(180);
const SUBSET_LABEL: &str = "apps.kruise.io/subset-name";
/// The label of the UnitedDeployment revision on every Pod of its subsets.
const LABEL_UD_REVISION: &str = "apps.kruise.io/controller-revision-hash";

/// Seed 000's UnitedDeployment, exactly as the article writes it (v1alpha1, native StatefulSets).
const SEED_000: &str = r#"apiVersion: apps.kruise.io/v1alpha1
kind: UnitedDeployment
metadata:
  labels:
    app.kubernetes.io/name: guestbook-kruise
    app.kubernetes.io/instance: demo
  name: demo-guestbook-kruise
spec:
  replicas: 10
  revisionHistoryLimit: 10
  selector:
    matchLabels:
      app.kubernetes.io/name: guestbook-kruise
      app.kubernetes.io/instance: demo
  template:
    statefulSetTemplate:
      metadata:
        labels:
          app.kubernetes.io/name: guestbook-kruise
          app.kubernetes.io/instance: demo
      spec:
        template:
          metadata:
            labels:
              app.kubernetes.io/name: guestbook-kruise
              app.kubernetes.io/instance: demo
          spec:
            containers:
              - name: guestbook-kruise
                image: openkruise/guestbook:v1
                imagePullPolicy: Always
                ports:
                  - name: http-server
                    containerPort: 3000
  topology:
    subsets:
      - name: subset-a
        replicas: 2
        nodeSelectorTerm:
          matchExpressions:
            - key: az
              operator: In
              values:
                - zone-a
      - name: subset-b
        replicas: 50%
        nodeSelectorTerm:
          matchExpressions:
            - key: az
              operator: In
              values:
                - zone-b
      - name: subset-c
        nodeSelectorTerm:
          matchExpressions:
            - key: az
              operator: In
              values:
                - zone-c
"#;

/// Labels every test-bed node `az=<its zone>`, as the seed's topology expects (idempotent).
async fn label_az(ns: &TestNamespace) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(ns.client.clone());
    for node in nodes.list(&ListParams::default()).await?.items {
        let Some(zone) = node
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("topology.kubernetes.io/zone"))
            .cloned()
        else {
            continue;
        };
        let node_name = node.metadata.name.clone().unwrap_or_default();
        ns.kubectl(&[
            "label",
            "node",
            &node_name,
            &format!("az={zone}"),
            "--overwrite",
        ])
        .await?;
    }
    Ok(())
}

/// The zone of every node, by node name.
async fn node_zones(ns: &TestNamespace) -> anyhow::Result<BTreeMap<String, String>> {
    kruise_e2e::node_zones(&ns.client).await
}

async fn get_ud(ns: &TestNamespace, ud: &str) -> anyhow::Result<UnitedDeployment> {
    let api: Api<UnitedDeployment> = ns.api();
    Ok(api.get(ud).await?)
}

async fn pods(ns: &TestNamespace, selector: &str) -> anyhow::Result<Vec<Pod>> {
    kruise_e2e::cloneset_kit::active_pods(&ns.api(), selector).await
}

fn pod_label<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

fn image(pod: &Pod) -> Option<String> {
    pod.spec.as_ref()?.containers.first()?.image.clone()
}

/// Pods per subset: (count, all Ready, images).
fn by_subset(pods: &[Pod]) -> BTreeMap<String, Vec<&Pod>> {
    let mut out: BTreeMap<String, Vec<&Pod>> = BTreeMap::new();
    for pod in pods {
        out.entry(pod_label(pod, SUBSET_LABEL).unwrap_or_default().to_string())
            .or_default()
            .push(pod);
    }
    out
}

/// Waits until the UD status has observed its generation, its subsets run `want` Ready Pods each,
/// with the images `image_of(subset)`, and (if `settled`) the current revision is the updated one.
async fn wait_subsets(
    ns: &TestNamespace,
    ud: &str,
    selector: &str,
    want: &[(&str, usize)],
    image_of: impl Fn(&str) -> String,
    settled: bool,
) -> anyhow::Result<(UnitedDeployment, Vec<Pod>)> {
    // Boxed: the polling future is large, and debug builds run tests on small thread stacks.
    Box::pin(wait_subsets_inner(
        ns, ud, selector, want, &image_of, settled,
    ))
    .await
}

async fn wait_subsets_inner(
    ns: &TestNamespace,
    ud: &str,
    selector: &str,
    want: &[(&str, usize)],
    image_of: &dyn Fn(&str) -> String,
    settled: bool,
) -> anyhow::Result<(UnitedDeployment, Vec<Pod>)> {
    let total: usize = want.iter().map(|(_, n)| n).sum();
    let result = eventually(
        format!("UnitedDeployment {ud}: subsets {want:?}"),
        TIMEOUT,
        || async {
            let u = get_ud(ns, ud).await?;
            let Some(st) = u.status.clone() else {
                return Ok(None);
            };
            let list = pods(ns, selector).await?;
            let grouped = by_subset(&list);
            let subsets_ok = grouped.len() == want.len()
                && want.iter().all(|(subset, n)| {
                    grouped.get(*subset).is_some_and(|ps| {
                        ps.len() == *n
                            && ps.iter().all(|p| {
                                is_ready(p)
                                    && image(p) == Some(image_of(subset))
                                    && container_status(
                                        p,
                                        &p.spec
                                            .as_ref()
                                            .map(|s| s.containers[0].name.clone())
                                            .unwrap_or_default(),
                                    )
                                    .is_some_and(|c| same_image(&c.image, &image_of(subset)))
                            })
                    })
                });
            let status_ok = u.metadata.generation == Some(st.observed_generation)
                && st.replicas == total as i32
                && st.ready_replicas == total as i32
                && (!settled
                    || (st.current_revision == st.updated_revision
                        && st.updated_ready_replicas == total as i32));
            Ok((subsets_ok && status_ok).then_some((u, list)))
        },
    )
    .await;
    match result {
        Ok(found) => Ok(found),
        Err(error) => {
            let u = get_ud(ns, ud).await.ok().and_then(|u| u.status);
            let list = pods(ns, selector).await.unwrap_or_default();
            let seen: Vec<String> = list
                .iter()
                .map(|p| {
                    format!(
                        "{} {:?} ready={} image={:?} node={:?}",
                        name(p),
                        pod_label(p, SUBSET_LABEL),
                        is_ready(p),
                        image(p),
                        node_name(p)
                    )
                })
                .collect();
            Err(error.context(format!("status {u:?}; pods {seen:#?}")))
        }
    }
}

/// Every Pod runs on a node of its subset's zone (`zone_of(subset)`).
async fn assert_zones(
    ns: &TestNamespace,
    list: &[Pod],
    zone_of: impl Fn(&str) -> String,
) -> anyhow::Result<()> {
    let zones = node_zones(ns).await?;
    for pod in list {
        let subset = pod_label(pod, SUBSET_LABEL).unwrap_or_default();
        let node = node_name(pod).unwrap_or_default();
        ensure!(
            zones.get(&node) == Some(&zone_of(subset)),
            "Pod {} of {subset} runs on {node} ({:?})",
            name(pod),
            zones.get(&node)
        );
    }
    Ok(())
}

async fn patch_ud(ns: &TestNamespace, ud: &str, patch: serde_json::Value) -> anyhow::Result<()> {
    let api: Api<UnitedDeployment> = ns.api();
    api.patch(ud, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("patching {ud} with {patch}"))?;
    Ok(())
}

async fn json_patch_ud(ns: &TestNamespace, ud: &str, patch: &str) -> anyhow::Result<()> {
    ns.kubectl(&[
        "patch",
        "uniteddeployments.apps.kruise.io",
        ud,
        "--type=json",
        "-p",
        patch,
    ])
    .await?;
    Ok(())
}

#[tokio::test]
async fn seed_000_uniteddeployment_spreads_native_statefulsets_over_zones() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("ud-seed").await?;
    ns.run(Box::pin(async {
        label_az(&ns).await?;
        ns.apply(SEED_000).await?;
        let ud = "demo-guestbook-kruise";
        let selector = "app.kubernetes.io/instance=demo";
        let v = |tag: &'static str| move |_: &str| format!("openkruise/guestbook:{tag}");
        let want = [("subset-a", 2), ("subset-b", 5), ("subset-c", 3)];
        let (u, list) = wait_subsets(&ns, ud, selector, &want, v("v1"), true).await?;
        assert_zones(&ns, &list, |s| s.replace("subset", "zone")).await?;

        // Three native StatefulSets, 2 / 5 / 3, named after the subsets and owned by the UD.
        let sets: Api<StatefulSet> = ns.api();
        let mut found: Vec<(String, i32, String)> = sets
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .map(|s| {
                let subset = s.metadata.labels.as_ref().and_then(|l| l.get(SUBSET_LABEL)).cloned().unwrap_or_default();
                (subset, s.spec.as_ref().and_then(|s| s.replicas).unwrap_or(-1), s.metadata.name.unwrap_or_default())
            })
            .collect();
        found.sort();
        let counts: Vec<(String, i32)> = found.iter().map(|(s, r, _)| (s.clone(), *r)).collect();
        ensure!(
            counts == [("subset-a".into(), 2), ("subset-b".into(), 5), ("subset-c".into(), 3)],
            "StatefulSets: {found:?}"
        );
        for (subset, _, set) in &found {
            ensure!(set.starts_with(&format!("{ud}-{subset}-")), "name {set}");
        }
        // OpenKruise's Event for the provisioning.
        eventually("SuccessfulUpdateSubset Event", TIMEOUT, || async {
            let events = kruise_e2e::cloneset_kit::events_for(&ns, "UnitedDeployment", ud).await?;
            Ok(events
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some("SuccessfulUpdateSubset")
                        && e.message.as_deref() == Some("Create 3 Subset (StatefulSet)")
                })
                .map(|_| ()))
        })
        .await?;
        let st = u.status.clone().unwrap_or_default();
        let subset_replicas: Vec<(String, i32)> =
            st.subset_statuses.iter().map(|s| (s.name.clone(), s.replicas)).collect();
        ensure!(
            subset_replicas == [("subset-a".into(), 2), ("subset-b".into(), 5), ("subset-c".into(), 3)],
            "{st:?}"
        );
        // The v1alpha1 view carries subsetReplicas.
        let alpha = ns
            .kubectl(&["get", "uniteddeployments.v1alpha1.apps.kruise.io", ud, "-o", "jsonpath={.status.subsetReplicas}"])
            .await?;
        let alpha: BTreeMap<String, i32> = serde_json::from_str(alpha.trim())?;
        ensure!(alpha == [("subset-a".into(), 2), ("subset-b".into(), 5), ("subset-c".into(), 3)].into(), "{alpha:?}");

        // A new image rolls every subset.
        json_patch_ud(&ns, ud, r#"[{"op":"replace","path":"/spec/template/statefulSetTemplate/spec/template/spec/containers/0/image","value":"openkruise/guestbook:v2"}]"#).await?;
        let (u2, list) = wait_subsets(&ns, ud, selector, &want, v("v2"), true).await?;
        let st2 = u2.status.clone().unwrap_or_default();
        ensure!(st2.current_revision != st.current_revision, "a new revision: {st2:?}");
        for pod in &list {
            ensure!(
                pod_label(pod, "apps.kruise.io/controller-revision-hash") == Some(st2.updated_revision.as_str()),
                "{} at the updated revision",
                name(pod)
            );
        }

        // A partition of 5 holds all of subset-b at v2 while the others move to v3.
        patch_ud(&ns, ud, json!({"spec": {"updateStrategy": {"manualUpdate": {"partitions": {"subset-b": 5}}}}})).await?;
        json_patch_ud(&ns, ud, r#"[{"op":"replace","path":"/spec/template/statefulSetTemplate/spec/template/spec/containers/0/image","value":"openkruise/guestbook:v3"}]"#).await?;
        let held = |subset: &str| {
            if subset == "subset-b" {
                "openkruise/guestbook:v2".to_string()
            } else {
                "openkruise/guestbook:v3".to_string()
            }
        };
        let (u3, _) = wait_subsets(&ns, ud, selector, &want, held, false).await?;
        let st3 = u3.status.clone().unwrap_or_default();
        ensure!(st3.current_revision == st2.updated_revision, "still current: {st3:?}");
        ensure!(st3.updated_ready_replicas == 5, "{st3:?}");
        let b = st3.subset_statuses.iter().find(|s| s.name == "subset-b");
        ensure!(b.map(|s| s.partition) == Some(5), "{st3:?}");
        // Beyond upstream: the subset says why it is short.
        eventually("subset-b Updated=False Partitioned", TIMEOUT, || async {
            let u = get_ud(&ns, ud).await?;
            Ok(u.status.and_then(|s| {
                s.subset_statuses
                    .into_iter()
                    .find(|s| s.name == "subset-b")?
                    .conditions
                    .into_iter()
                    .find(|c| c.type_ == "Updated" && c.status == "False" && c.reason == "Partitioned")
            }))
        })
        .await?;
        let cond = st3.conditions.iter().find(|c| c.type_ == "UnitedDeploymentUpdated");
        ensure!(
            cond.is_some_and(|c| c.status == "False" && c.reason == "UnitedDeploymentRevisionUpdating"),
            "{:?}",
            st3.conditions
        );

        // Releasing the partition finishes the rollout.
        patch_ud(&ns, ud, json!({"spec": {"updateStrategy": {"manualUpdate": {"partitions": null}}}})).await?;
        let (u4, _) = wait_subsets(&ns, ud, selector, &want, v("v3"), true).await?;
        let cond = u4.status.as_ref().and_then(|s| s.conditions.iter().find(|c| c.type_ == "UnitedDeploymentUpdated").cloned());
        eventually("UnitedDeploymentUpdated True", TIMEOUT, || async {
            let u = get_ud(&ns, ud).await?;
            Ok(u.status.and_then(|s| s.conditions.into_iter().find(|c| c.type_ == "UnitedDeploymentUpdated" && c.status == "True" && c.reason == "UnitedDeploymentRevisionUpdated")))
        })
        .await
        .with_context(|| format!("{cond:?}"))?;
        // Beyond upstream: kubectl wait works on Available and Progressing.
        ns.kubectl(&["wait", "--for=condition=Available", &format!("uniteddeployments.apps.kruise.io/{ud}"), "--timeout=60s"])
            .await?;
        let progressing = ns
            .kubectl(&["get", "uniteddeployments.apps.kruise.io", ud, "-o", "jsonpath={.status.conditions[?(@.type==\"Progressing\")].reason}"])
            .await?;
        ensure!(progressing.trim() == "NewRevisionAvailable", "Progressing reason {progressing}");
        Ok(())
    }))
    .await
}

/// examples/uniteddeployment.yaml.
fn example() -> anyhow::Result<String> {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/uniteddeployment.yaml");
    std::fs::read_to_string(&path).with_context(|| path.display().to_string())
}

/// What OpenKruise's allocator gives for `ud` when the subsets currently run `current`.
fn upstream_rule(
    ud: &UnitedDeployment,
    current: &[(&str, i32)],
) -> anyhow::Result<Vec<(String, usize)>> {
    let existing: BTreeMap<String, Existing> = current
        .iter()
        .map(|(n, r)| {
            (
                n.to_string(),
                Existing {
                    spec_replicas: *r,
                    ..Existing::default()
                },
            )
        })
        .collect();
    let next = allocate(&ud.spec, &existing).map_err(anyhow::Error::msg)?;
    Ok(next.into_iter().map(|(k, v)| (k, v as usize)).collect())
}

#[tokio::test]
async fn example_cloneset_subsets_split_update_in_place_scale_and_shrink() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("ud-example").await?;
    ns.run(Box::pin(async {
        ns.apply(&example()?).await?;
        let ud = "sample-ud";
        let selector = "app=sample-ud";
        let img = |tag: &'static str| move |_: &str| format!("nginx:{tag}");
        let u = get_ud(&ns, ud).await?;
        // 6 replicas, zone-a 50% = 3; zone-b and zone-c share 3: the remainder goes to the subset
        // last in (current replicas, name) order — zone-c on creation.
        let rule = upstream_rule(&u, &[])?;
        ensure!(rule == [("zone-a".into(), 3), ("zone-b".into(), 1), ("zone-c".into(), 2)], "{rule:?}");
        let want: Vec<(&str, usize)> = rule.iter().map(|(s, n)| (s.as_str(), *n)).collect();
        let (_, before) = wait_subsets(&ns, ud, selector, &want, img("1.25"), true).await?;
        assert_zones(&ns, &before, |s| s.to_string()).await?;
        ns.kubectl(&["wait", "--for=condition=Available", "uniteddeployments.apps.kruise.io/sample-ud", "--timeout=60s"])
            .await?;
        let clonesets: Api<CloneSet> = ns.api();
        let list = clonesets.list(&ListParams::default()).await?.items;
        ensure!(list.len() == 3, "three CloneSets: {}", list.len());
        for cs in &list {
            let ann = cs.metadata.annotations.clone().unwrap_or_default();
            ensure!(ann.get("apps.kruise.io/subset-patch") == Some(&String::new()), "{ann:?}");
            let owner = cs.metadata.owner_references.clone().unwrap_or_default();
            ensure!(
                owner.len() == 1 && owner[0].kind == "UnitedDeployment" && owner[0].name == ud && owner[0].controller == Some(true),
                "{owner:?}"
            );
        }

        // In-place update through the CloneSets: same Pods, one restart each.
        json_patch_ud(&ns, ud, r#"[{"op":"replace","path":"/spec/template/cloneSetTemplate/spec/template/spec/containers/0/image","value":"nginx:1.26"}]"#).await?;
        let (_, after) = wait_subsets(&ns, ud, selector, &want, img("1.26"), true).await?;
        let uids = |ps: &[Pod]| ps.iter().map(|p| (name(p), uid(p))).collect::<Vec<_>>();
        ensure!(uids(&before) == uids(&after), "in place: {:?} vs {:?}", uids(&before), uids(&after));
        for pod in &after {
            ensure!(restarts(pod) == 1, "{} restarts {}", name(pod), restarts(pod));
        }

        // Scaling the UD rescales the subsets by the same rule.
        let current: Vec<(&str, i32)> = want.iter().map(|(s, n)| (*s, *n as i32)).collect();
        patch_ud(&ns, ud, json!({"spec": {"replicas": 8}})).await?;
        let u = get_ud(&ns, ud).await?;
        let rule = upstream_rule(&u, &current)?;
        ensure!(rule == [("zone-a".into(), 4), ("zone-b".into(), 2), ("zone-c".into(), 2)], "{rule:?}");
        let want8: Vec<(&str, usize)> = rule.iter().map(|(s, n)| (s.as_str(), *n)).collect();
        wait_subsets(&ns, ud, selector, &want8, img("1.26"), true).await?;
        // The scale subresource reports it.
        let scale = ns
            .kubectl(&["get", "--raw", &format!("/apis/apps.kruise.io/v1beta1/namespaces/{}/uniteddeployments/{ud}/scale", ns.name)])
            .await?;
        let scale: serde_json::Value = serde_json::from_str(&scale)?;
        ensure!(scale["status"]["replicas"] == json!(8) && scale["status"]["selector"] == json!("app=sample-ud"), "{scale}");

        // Removing zone-c deletes its CloneSet; its replicas go to zone-b.
        json_patch_ud(&ns, ud, r#"[{"op":"remove","path":"/spec/topology/subsets/2"}]"#).await?;
        wait_subsets(&ns, ud, selector, &[("zone-a", 4), ("zone-b", 4)], img("1.26"), true).await?;
        eventually("zone-c CloneSet deleted", TIMEOUT, || async {
            let list = clonesets.list(&ListParams::default().labels(&format!("{SUBSET_LABEL}=zone-c"))).await?;
            Ok(list.items.iter().all(|c| c.metadata.deletion_timestamp.is_some()).then_some(()))
        })
        .await?;
        let u = get_ud(&ns, ud).await?;
        let names: Vec<String> = u.status.unwrap_or_default().subset_statuses.into_iter().map(|s| s.name).collect();
        ensure!(names == ["zone-a", "zone-b"], "{names:?}");
        Ok(())
    }))
    .await
}

#[tokio::test]
async fn deployment_template_with_min_max_replicas() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("ud-deploy").await?;
    ns.run(Box::pin(async {
        ns.apply(
            r#"apiVersion: apps.kruise.io/v1beta1
kind: UnitedDeployment
metadata:
  name: web
spec:
  replicas: 5
  selector:
    matchLabels: {app: web}
  template:
    deploymentTemplate:
      metadata:
        labels: {app: web}
      spec:
        selector:
          matchLabels: {app: web}
        template:
          metadata:
            labels: {app: web}
          spec:
            containers:
              - name: web
                image: nginx:1.25
  topology:
    subsets:
      - name: a
        minReplicas: 2
        maxReplicas: 3
        nodeSelectorTerm:
          matchExpressions:
            - {key: topology.kubernetes.io/zone, operator: In, values: [zone-a]}
      - name: b
        minReplicas: 1
        nodeSelectorTerm:
          matchExpressions:
            - {key: topology.kubernetes.io/zone, operator: In, values: [zone-b]}
        patch:
          metadata:
            labels: {tier: b}
"#,
        )
        .await?;
        let img = |_: &str| "nginx:1.25".to_string();
        // min first in order (a 2, b 1), then up to max in order (a +1 to 3, b the rest 1).
        let (_, list) =
            wait_subsets(&ns, "web", "app=web", &[("a", 3), ("b", 2)], img, true).await?;
        assert_zones(&ns, &list, |s| format!("zone-{s}")).await?;
        for pod in &list {
            let tier = pod_label(pod, "tier");
            let subset = pod_label(pod, SUBSET_LABEL);
            ensure!(
                (subset == Some("b")) == (tier == Some("b")),
                "patch only on b: {}",
                name(pod)
            );
        }
        let deployments: Api<Deployment> = ns.api();
        let list = deployments.list(&ListParams::default()).await?.items;
        let b = list
            .iter()
            .find(|d| {
                d.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(SUBSET_LABEL))
                    .map(String::as_str)
                    == Some("b")
            })
            .context("subset b's Deployment")?;
        let ann = b.metadata.annotations.clone().unwrap_or_default();
        ensure!(
            ann.get("apps.kruise.io/subset-patch").map(String::as_str)
                == Some(r#"{"metadata":{"labels":{"tier":"b"}}}"#),
            "{ann:?}"
        );
        // Scaling to 8: a stays at its max 3, b takes 5.
        patch_ud(&ns, "web", json!({"spec": {"replicas": 8}})).await?;
        wait_subsets(&ns, "web", "app=web", &[("a", 3), ("b", 5)], img, true).await?;
        Ok(())
    }))
    .await
}

#[tokio::test]
async fn bad_input_is_rejected_naming_the_field() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("ud-bad").await?;
    ns.run(Box::pin(async {
        let base = |topology: &str, strategy: &str, extra_spec: &str| {
            format!(
                r#"apiVersion: apps.kruise.io/v1alpha1
kind: UnitedDeployment
metadata:
  name: bad
spec:
  replicas: 4
  selector:
    matchLabels: {{app: bad}}
  template:
    statefulSetTemplate:
      metadata:
        labels: {{app: bad}}
      spec:
{extra_spec}        selector:
          matchLabels: {{app: bad}}
        template:
          metadata:
            labels: {{app: bad}}
          spec:
            containers:
              - name: c
                image: nginx:1.25
  topology:
    subsets:
{topology}{strategy}"#
            )
        };
        let two = "      - name: a\n        replicas: 3\n      - name: b\n        replicas: 2\n";
        let fine = "      - name: a\n        replicas: 2\n      - name: b\n";
        let cases = [
            (base(two, "", ""), "spec.topology.subsets"),
            (
                base(
                    fine,
                    "  updateStrategy:\n    manualUpdate:\n      partitions:\n        zz: 1\n",
                    "",
                ),
                "spec.updateStrategy.manualUpdate.partitions",
            ),
            (
                base(fine, "", "        replicas: 3\n"),
                "spec.template.statefulSetTemplate.spec.replicas",
            ),
        ];
        for (yaml, field) in cases {
            let result = ns.apply(&yaml).await;
            let error = match result {
                Ok(out) => anyhow::bail!("accepted ({out}):\n{yaml}"),
                Err(error) => format!("{error:#}"),
            };
            ensure!(error.contains(field), "error names {field}: {error}");
        }
        let uds: Api<UnitedDeployment> = ns.api();
        ensure!(
            uds.list(&ListParams::default()).await?.items.is_empty(),
            "nothing created"
        );
        let sets: Api<StatefulSet> = ns.api();
        ensure!(
            sets.list(&ListParams::default()).await?.items.is_empty(),
            "no subsets"
        );
        Ok(())
    }))
    .await
}

/// examples/uniteddeployment-v1alpha1.yaml: Advanced StatefulSet subsets on labelled node pools, with
/// a toleration and a patched label on the "spare" subset, updated in place through our Advanced
/// StatefulSet controller.
#[tokio::test]
async fn example_advanced_statefulset_subsets_on_node_pools() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("ud-asts").await?;
    ns.run(Box::pin(async {
        // sim-0 is the "primary" pool; the others are spare (NotIn primary).
        ns.kubectl(&["label", "node", "sim-0", "node-pool=primary", "--overwrite"]).await?;
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../examples/uniteddeployment-v1alpha1.yaml");
        ns.apply(&std::fs::read_to_string(&path)?).await?;
        let ud = "sample-ud-sts";
        let selector = "app=sample-ud-sts";
        let img = |tag: &'static str| move |_: &str| format!("redis:{tag}");
        let want = [("primary", 2), ("spare", 2)];
        let (_, before) = wait_subsets(&ns, ud, selector, &want, img("7.2"), true).await?;
        for pod in &before {
            let subset = pod_label(pod, SUBSET_LABEL).unwrap_or_default();
            let node = node_name(pod).unwrap_or_default();
            ensure!((subset == "primary") == (node == "sim-0"), "{} on {node}", name(pod));
            ensure!(
                (subset == "spare") == (pod_label(pod, "node-pool") == Some("spare")),
                "patched label on {}",
                name(pod)
            );
            let tolerates = pod
                .spec
                .as_ref()
                .and_then(|s| s.tolerations.as_ref())
                .is_some_and(|t| t.iter().any(|t| t.key.as_deref() == Some("node-pool")));
            ensure!((subset == "spare") == tolerates, "toleration on {}", name(pod));
        }
        let sets: Api<kruise_api::statefulset::v1beta1::StatefulSet> = ns.api();
        ensure!(sets.list(&ListParams::default()).await?.items.len() == 2, "two Advanced StatefulSets");

        json_patch_ud(&ns, ud, r#"[{"op":"replace","path":"/spec/template/advancedStatefulSetTemplate/spec/template/spec/containers/0/image","value":"redis:7.4"}]"#).await?;
        let (_, after) = wait_subsets(&ns, ud, selector, &want, img("7.4"), true).await?;
        let uids = |ps: &[Pod]| ps.iter().map(|p| (name(p), uid(p))).collect::<Vec<_>>();
        ensure!(uids(&before) == uids(&after), "in place through the Advanced StatefulSets");
        Ok(())
    }))
    .await
}

/// Adaptive scheduling: a subset whose nodes cannot take its Pods becomes unschedulable after
/// rescheduleCriticalSeconds and its replicas move to the next subset; once a node fits and
/// unschedulableDuration has passed it is schedulable again and takes new replicas first, while the
/// running Pods elsewhere stay (OpenKruise never deletes healthy Pods to move them back).
/// A node of the test's own, in pool `pool`, with a NoSchedule taint no Pod of the test tolerates
/// (other tests' Pods do not select it: the pool label is the namespace's).
fn pool_node(ns: &TestNamespace, pool: &str) -> NodeSpecSim {
    let mut spec = NodeSpecSim::named(&format!("{}-pool", ns.name), 0);
    spec.labels.insert(POOL_LABEL.into(), pool.into());
    spec.taints = vec![pool_taint(ns)];
    spec
}

const POOL_LABEL: &str = "kruise-rs.io/ud-pool";
const POOL_TAINT: &str = "kruise-rs.io/ud-full";

fn pool_taint(ns: &TestNamespace) -> Taint {
    Taint {
        key: POOL_TAINT.into(),
        value: Some(ns.name.clone()),
        effect: "NoSchedule".into(),
        ..Default::default()
    }
}

/// A CloneSet-template UnitedDeployment of 4 replicas: subset `pool` (at most 2, on the test's pool
/// node) and subset `rest` (zone-a), Adaptive with short windows.
fn adaptive_yaml(name: &str, pool: &str, reserve: bool) -> String {
    format!(
        r#"apiVersion: apps.kruise.io/v1beta1
kind: UnitedDeployment
metadata:
  name: {name}
spec:
  replicas: 4
  selector:
    matchLabels: {{app: {name}}}
  template:
    cloneSetTemplate:
      metadata:
        labels: {{app: {name}}}
      spec:
        selector:
          matchLabels: {{app: {name}}}
        template:
          metadata:
            labels: {{app: {name}}}
          spec:
            containers:
              - name: c
                image: nginx:1.25
  topology:
    scheduleStrategy:
      type: Adaptive
      adaptive:
        rescheduleCriticalSeconds: 5
        unschedulableDuration: 15
        reserveUnschedulablePods: {reserve}
    subsets:
      - name: pool
        maxReplicas: 2
        nodeSelectorTerm:
          matchExpressions:
            - {{key: {POOL_LABEL}, operator: In, values: ["{pool}"]}}
      - name: rest
        nodeSelectorTerm:
          matchExpressions:
            - {{key: topology.kubernetes.io/zone, operator: In, values: [zone-a]}}
"#
    )
}

fn subset_condition(
    u: &UnitedDeployment,
    subset: &str,
) -> Option<kruise_api::uniteddeployment::v1beta1::UnitedDeploymentSubsetCondition> {
    u.status
        .as_ref()?
        .subset_statuses
        .iter()
        .find(|s| s.name == subset)?
        .conditions
        .iter()
        .find(|c| c.type_ == "Schedulable")
        .cloned()
}

#[tokio::test]
async fn adaptive_subset_becomes_unschedulable_then_recovers() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("ud-adaptive").await?;
    ns.run(Box::pin(async {
        let client = bed.plane.client().await?;
        let pool = format!("adaptive-{}", ns.name);
        let node = fleet::add_node(&client, pool_node(&ns, &pool)).await?.name;
        let result = async {
            ns.apply(&adaptive_yaml("ada", &pool, false)).await?;
            let img = |_: &str| "nginx:1.25".to_string();
            // The pool's node is tainted: its 2 Pods are rejected by the scheduler, after 5 s the
            // subset turns unschedulable and all 4 replicas run in "rest".
            let (u, _) = wait_subsets(&ns, "ada", "app=ada", &[("rest", 4)], img, true).await?;
            let schedulable = subset_condition(&u, "pool");
            ensure!(
                schedulable
                    .as_ref()
                    .is_some_and(|c| c.status == "False" && c.reason == "reschedule"),
                "{:?}",
                u.status
            );
            // The taint goes; after the 15 s window the subset recovers.
            fleet::untaint_node(&client, &node, POOL_TAINT).await?;
            let recovered = eventually(
                "pool Schedulable again",
                Duration::from_secs(90),
                || async {
                    let u = get_ud(&ns, "ada").await?;
                    Ok(subset_condition(&u, "pool")
                        .filter(|c| c.status == "True" && c.reason == "recover"))
                },
            )
            .await?;
            ensure!(
                recovered
                    .message
                    .starts_with("unschedulable subset recovered after 15"),
                "{recovered:?}"
            );
            // Without reservation the allocator never deletes running Pods to move them back:
            // "rest" keeps its 4 Ready Pods (its min is raised to its ready count).
            wait_subsets(&ns, "ada", "app=ada", &[("rest", 4)], img, true).await?;
            Ok(())
        }
        .await;
        fleet::remove_node(&client, &node).await.ok();
        result
    }))
    .await
}

/// `reserveUnschedulablePods`: the Pods the pool cannot start stay there, labelled reserved, while
/// substitutes run in "rest"; once the taint goes and the reserved Pods have been Ready for the
/// window, they leave the reserved state (same Pods, same UIDs) and the substitutes are removed.
#[tokio::test]
async fn adaptive_reservation_substitutes_then_hands_back() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("ud-reserve").await?;
    ns.run(Box::pin(async {
        let client = bed.plane.client().await?;
        let pool = format!("reserve-{}", ns.name);
        let node = fleet::add_node(&client, pool_node(&ns, &pool)).await?.name;
        let result = async {
            ns.apply(&adaptive_yaml("res", &pool, true)).await?;
            let reserved_label = "apps.kruise.io/united-deployment-reserved-pod";
            // Reserved: 2 Pending Pods in the pool labelled true, 4 Ready substitutes-and-more in rest.
            let (u, reserved_uids) = eventually(
                "2 reserved Pods in pool, 4 Ready Pods in rest",
                TIMEOUT,
                || async {
                    let u = get_ud(&ns, "res").await?;
                    let list = pods(&ns, "app=res").await?;
                    let grouped = by_subset(&list);
                    let pool_pods = grouped.get("pool").cloned().unwrap_or_default();
                    let rest = grouped.get("rest").cloned().unwrap_or_default();
                    let pool_reserved = pool_pods.len() == 2
                        && pool_pods.iter().all(|p| {
                            pod_label(p, reserved_label) == Some("true") && node_name(p).is_none()
                        });
                    let rest_ready = rest.len() == 4
                        && rest
                            .iter()
                            .all(|p| is_ready(p) && pod_label(p, reserved_label) == Some("false"));
                    let st = u.status.clone().unwrap_or_default();
                    let status_ok = st.replicas == 4 && st.reserved_pods == 2;
                    Ok((pool_reserved && rest_ready && status_ok).then(|| {
                        let uids: BTreeSet<String> = pool_pods.iter().map(|p| uid(p)).collect();
                        (u, uids)
                    }))
                },
            )
            .await?;
            let st = u.status.clone().unwrap_or_default();
            let pool_status = st.subset_statuses.iter().find(|s| s.name == "pool");
            ensure!(
                pool_status.is_some_and(|s| s.reserved_pods == 2 && s.replicas == 2),
                "{st:?}"
            );
            ensure!(
                st.label_selector
                    .ends_with(",apps.kruise.io/united-deployment-reserved-pod=false"),
                "{}",
                st.label_selector
            );
            ensure!(
                subset_condition(&u, "pool").is_some_and(|c| c.status == "False"
                    && c.reason == "reschedule"
                    && c.message == "reserved pods found"),
                "{st:?}"
            );
            // The scale subresource's selector counts only Pods that serve.
            let scale = ns
                .kubectl(&[
                    "get",
                    "uniteddeployment",
                    "res",
                    "-o",
                    "jsonpath={.status.labelSelector}",
                ])
                .await?;
            let serving = ns
                .kubectl(&["get", "pods", "-l", scale.trim(), "-o", "name"])
                .await?;
            ensure!(serving.lines().count() == 4, "{serving}");

            // The taint goes: the reserved Pods start where they are; after 15 s Ready they are
            // released and the 2 substitutes leave "rest".
            fleet::untaint_node(&client, &node, POOL_TAINT).await?;
            let (u, list) = wait_subsets(
                &ns,
                "res",
                "app=res",
                &[("pool", 2), ("rest", 2)],
                |_| "nginx:1.25".to_string(),
                true,
            )
            .await?;
            let pool_uids: BTreeSet<String> = list
                .iter()
                .filter(|p| pod_label(p, SUBSET_LABEL) == Some("pool"))
                .map(uid)
                .collect();
            ensure!(
                pool_uids == reserved_uids,
                "{pool_uids:?} vs {reserved_uids:?}"
            );
            ensure!(
                list.iter()
                    .all(|p| pod_label(p, reserved_label) == Some("false")),
                "reserved labels left"
            );
            let st = u.status.clone().unwrap_or_default();
            ensure!(st.reserved_pods == 0 && st.replicas == 4, "{st:?}");
            ensure!(
                subset_condition(&u, "pool").is_some_and(|c| c.status == "True"),
                "{st:?}"
            );
            Ok(())
        }
        .await;
        fleet::remove_node(&client, &node).await.ok();
        result
    }))
    .await
}

/// Whether every field of `want` is in `have` with the same value (lists item by item).
fn holds_fields(have: &serde_json::Value, want: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (have, want) {
        (Value::Object(h), Value::Object(w)) => w
            .iter()
            .all(|(k, wv)| h.get(k).is_some_and(|hv| holds_fields(hv, wv))),
        (Value::Array(h), Value::Array(w)) => {
            h.len() == w.len() && h.iter().zip(w).all(|(hv, wv)| holds_fields(hv, wv))
        }
        (h, w) => h == w,
    }
}

/// The subset CloneSet of `subset`, read through v1alpha1 as OpenKruise v1.9 clients read it.
async fn subset_cloneset_v1alpha1(
    ns: &TestNamespace,
    subset: &str,
) -> anyhow::Result<serde_json::Value> {
    let out = ns
        .kubectl(&[
            "get",
            "clonesets.v1alpha1.apps.kruise.io",
            "-l",
            &format!("{SUBSET_LABEL}={subset}"),
            "-o",
            "json",
        ])
        .await?;
    let list: serde_json::Value = serde_json::from_str(&out)?;
    let items = list["items"].as_array().cloned().unwrap_or_default();
    ensure!(items.len() == 1, "one CloneSet for {subset}: {items:?}");
    Ok(items[0].clone())
}

/// Issue 45: a v1.9 UnitedDeployment whose CloneSet template uses the v1alpha1 CloneSet spec is accepted
/// under strict field validation, reads back unchanged through v1alpha1, its subset CloneSets carry every
/// setting (the partition being the subset's manual one, as OpenKruise v1.9.0 writes it), `paused` holds
/// the rollout, and once resumed the image change rolls every subset one Pod at a time (maxUnavailable 1,
/// maxSurge 0) while zone-a's partition keeps one Pod at the old revision.
#[tokio::test]
async fn v1_9_cloneset_template_settings_reach_the_subsets_and_steer_the_rollout()
-> anyhow::Result<()> {
    use kruise_e2e::cloneset_kit::holds;
    use kruise_testkit::{Limits, RolloutMonitor};

    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("ud-v19").await?;
    ns.run(Box::pin(async {
        let ud = "v19-ud";
        let selector = "app=v19-ud";
        let applied: serde_json::Value = serde_yaml::from_str(V1_9_UNITEDDEPLOYMENT)?;
        // kubectl validates strictly: an unknown field is refused ...
        let bogus = V1_9_UNITEDDEPLOYMENT.replace("maxSurge: 0", "maxSurge: 0\n          bogusField: 1");
        let dir = std::env::temp_dir().join(format!("ud-v19-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let (bogus_path, path) = (dir.join("bogus.yaml"), dir.join("ud.yaml"));
        std::fs::write(&bogus_path, &bogus)?;
        std::fs::write(&path, V1_9_UNITEDDEPLOYMENT)?;
        let file = |p: &std::path::Path| p.display().to_string();
        let refused = ns
            .kubectl(&["apply", "--validate=strict", "--dry-run=server", "-f", &file(&bogus_path)])
            .await;
        ensure!(
            refused.as_ref().is_err_and(|e| format!("{e:#}").contains("bogusField")),
            "an unknown field must be refused: {refused:?}"
        );
        // ... and every v1.9 field is known.
        ns.kubectl(&["apply", "--validate=strict", "-f", &file(&path)]).await?;
        std::fs::remove_dir_all(&dir)?;

        // Read back through v1alpha1: every field as written.
        let read: serde_json::Value = serde_json::from_str(
            &ns.kubectl(&["get", "uniteddeployments.v1alpha1.apps.kruise.io", ud, "-o", "json"])
                .await?,
        )?;
        ensure!(
            holds_fields(&read["spec"], &applied["spec"]),
            "read back through v1alpha1: {}\nwritten: {}",
            read["spec"],
            applied["spec"]
        );
        let clone_spec = |v: &serde_json::Value| v["spec"]["template"]["cloneSetTemplate"]["spec"].clone();
        ensure!(
            clone_spec(&read)["updateStrategy"] == clone_spec(&applied)["updateStrategy"]
                && clone_spec(&read)["scaleStrategy"] == clone_spec(&applied)["scaleStrategy"],
            "the strategies are exactly the written ones: {}",
            clone_spec(&read)
        );
        // Every v1.9 field has its v1beta1 counterpart: the stored (v1beta1) object carries nothing in a
        // conversion annotation, and neither does the object read in v1alpha1.
        let stored: serde_json::Value = serde_json::from_str(
            &ns.kubectl(&["get", "uniteddeployments.v1beta1.apps.kruise.io", ud, "-o", "json"])
                .await?,
        )?;
        for object in [&read, &stored] {
            let annotations = &object["metadata"]["annotations"];
            ensure!(
                [
                    kruise_api::keys::ANNOTATION_CONVERSION_V1ALPHA1_FIELDS,
                    kruise_api::keys::ANNOTATION_CONVERSION_V1BETA1_FIELDS
                ]
                .iter()
                .all(|key| annotations.get(key).is_none()),
                "nothing stashed: {annotations}"
            );
        }
        ensure!(
            stored["spec"]["template"]["cloneSetTemplate"]["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"]
                == json!(1),
            "stored in v1beta1: {}",
            stored["spec"]["template"]["cloneSetTemplate"]["spec"]
        );

        let old = |_: &str| "nginx:1.25".to_string();
        let (u, _) = wait_subsets(&ns, ud, selector, &[("zone-a", 3), ("zone-b", 3)], old, true).await?;
        let old_revision = u.status.clone().unwrap_or_default().current_revision;

        // The subset CloneSets carry every setting; the partition is the subset's.
        let mut want_update = clone_spec(&applied)["updateStrategy"].clone();
        for (subset, partition) in [("zone-a", 1), ("zone-b", 0)] {
            let cs = subset_cloneset_v1alpha1(&ns, subset).await?;
            want_update["partition"] = json!(partition);
            ensure!(
                cs["spec"]["updateStrategy"] == want_update,
                "{subset}: {} (want {want_update})",
                cs["spec"]["updateStrategy"]
            );
            ensure!(
                cs["spec"]["scaleStrategy"] == clone_spec(&applied)["scaleStrategy"],
                "{subset}: {}",
                cs["spec"]["scaleStrategy"]
            );
        }

        // Paused: the new template reaches the subsets, no Pod is updated.
        ns.kubectl(&["patch", "uniteddeployments.v1alpha1.apps.kruise.io", ud, "--type=json", "-p",
            r#"[{"op":"replace","path":"/spec/template/cloneSetTemplate/spec/template/spec/containers/0/image","value":"nginx:1.26"}]"#])
            .await?;
        let clonesets: Api<CloneSet> = ns.api();
        eventually("the subset CloneSets observe the new template", TIMEOUT, || async {
            let list = clonesets.list(&ListParams::default().labels(selector)).await?.items;
            Ok((list.len() == 2
                && list.iter().all(|cs| {
                    let s = cs.status.clone().unwrap_or_default();
                    cs.metadata.generation == Some(s.observed_generation)
                        && s.update_revision != s.current_revision
                        && cs.spec.template.spec.as_ref().is_some_and(|p| p.containers[0].image.as_deref() == Some("nginx:1.26"))
                }))
            .then_some(list))
        })
        .await?;
        holds("paused subsets update no Pod", Duration::from_secs(3), || async {
            let list = pods(&ns, selector).await?;
            Ok(list.len() == 6 && list.iter().all(|p| image(p).as_deref() == Some("nginx:1.25")))
        })
        .await?;

        // Resumed: each subset rolls one Pod at a time; zone-a keeps one at the old revision.
        let limits = |partition: i32| Limits {
            replicas: 3,
            max_unavailable: 1,
            max_surge: 0,
            min_old_revision_pods: (partition > 0).then(|| {
                (LABEL_UD_REVISION.to_string(), old_revision.clone(), partition)
            }),
        };
        let selector_a = format!("{selector},{SUBSET_LABEL}=zone-a");
        let selector_b = format!("{selector},{SUBSET_LABEL}=zone-b");
        let monitor_a = RolloutMonitor::start(ns.client.clone(), &ns.name, &selector_a, limits(1)).await?;
        let monitor_b = RolloutMonitor::start(ns.client.clone(), &ns.name, &selector_b, limits(0)).await?;
        ns.kubectl(&["patch", "uniteddeployments.v1alpha1.apps.kruise.io", ud, "--type=json", "-p",
            r#"[{"op":"replace","path":"/spec/template/cloneSetTemplate/spec/updateStrategy/paused","value":false}]"#])
            .await?;
        monitor_a
            .eventually("zone-a keeps 1 old Pod, zone-b all new", TIMEOUT, || async {
                let list = pods(&ns, selector).await?;
                let grouped = by_subset(&list);
                let count = |subset: &str, tag: &str| {
                    grouped.get(subset).map_or(0, |ps| {
                        ps.iter().filter(|p| is_ready(p) && image(p).as_deref() == Some(tag)).count()
                    })
                };
                let done = list.len() == 6
                    && count("zone-a", "nginx:1.25") == 1
                    && count("zone-a", "nginx:1.26") == 2
                    && count("zone-b", "nginx:1.26") == 3;
                if done {
                    Ok(Some(()))
                } else {
                    let seen: Vec<_> = list
                        .iter()
                        .map(|p| (name(p), pod_label(p, SUBSET_LABEL).map(str::to_owned), image(p), is_ready(p)))
                        .collect();
                    Err(anyhow::anyhow!("pods: {seen:?}"))
                }
            })
            .await?;
        let stats_a = monitor_a.finish().await?;
        let stats_b = monitor_b.finish().await?;
        eprintln!("zone-a (partition 1): {stats_a:?}\nzone-b: {stats_b:?}");
        ensure!(stats_a.max_unavailable_seen == 1 && stats_b.max_unavailable_seen == 1,
            "ReCreate with maxUnavailable 1 takes exactly one Pod out at a time: {stats_a:?} {stats_b:?}");
        let u = get_ud(&ns, ud).await?;
        let status = u.status.unwrap_or_default();
        ensure!(status.current_revision == old_revision && status.updated_replicas == 5, "{status:?}");

        // Lifting the partition finishes the rollout.
        patch_ud(&ns, ud, json!({"spec": {"updateStrategy": {"manualUpdate": {"partitions": {"zone-a": 0}}}}})).await?;
        let new = |_: &str| "nginx:1.26".to_string();
        wait_subsets(&ns, ud, selector, &[("zone-a", 3), ("zone-b", 3)], new, true).await?;
        let cs = subset_cloneset_v1alpha1(&ns, "zone-a").await?;
        ensure!(cs["spec"]["updateStrategy"]["partition"] == json!(0), "{}", cs["spec"]["updateStrategy"]);
        Ok(())
    }))
    .await
}
