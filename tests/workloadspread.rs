//! WorkloadSpread end to end, on a real control plane with three simulated nodes, one per zone
//! (`topology.kubernetes.io/zone` = zone-a, zone-b, zone-c), and this binary's kruise-manager with
//! its default gates (WorkloadSpread is on by default, as in OpenKruise v1.9.0). A user applies a
//! WorkloadSpread and a workload with kubectl, rolls the workload out, scales it, and looks at where
//! the Pods run, their annotations and the WorkloadSpread's status. Every test has its own
//! namespace; the nodes are shared.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, ensure};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kruise_api::workloadspread::{
    ANNOTATION_DELETION_COST, ANNOTATION_MATCHED, MatchedWorkloadSpread, WorkloadSpread,
};
use kruise_e2e::workloadspread_kit::cloneset_spread;
use kruise_testkit::wait::eventually;
use kruise_testkit::{TestNamespace, testbed};
use kube::api::{Api, DeleteParams, ListParams, PostParams};

const TIMEOUT: Duration = Duration::from_secs(120);

async fn namespace(prefix: &str) -> anyhow::Result<TestNamespace> {
    let bed = testbed();
    bed.manager();
    bed.namespace(prefix).await
}

/// Where the live Pods labelled `app=<app>` run: `(zone, subset of the annotation, deletion cost,
/// pod-template-hash or revision)` per Pod.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Placed {
    zone: String,
    subset: String,
    cost: String,
    version: String,
    ready: bool,
}

async fn placement(ns: &TestNamespace, app: &str) -> anyhow::Result<Vec<Placed>> {
    let zones = kruise_e2e::node_zones(&ns.client).await?;
    let pods: Api<Pod> = ns.api();
    let list = pods
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await?;
    let mut out: Vec<Placed> = list
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let annotations = p.metadata.annotations.clone().unwrap_or_default();
            let labels = p.metadata.labels.clone().unwrap_or_default();
            let node = p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default();
            Placed {
                zone: zones
                    .get(&node)
                    .cloned()
                    .unwrap_or_else(|| "unscheduled".into()),
                subset: annotations
                    .get(ANNOTATION_MATCHED)
                    .and_then(|v| MatchedWorkloadSpread::parse(v))
                    .map(|m| m.subset)
                    .unwrap_or_default(),
                cost: annotations
                    .get(ANNOTATION_DELETION_COST)
                    .cloned()
                    .unwrap_or_default(),
                version: labels
                    .get("pod-template-hash")
                    .or_else(|| labels.get("controller-revision-hash"))
                    .cloned()
                    .unwrap_or_default(),
                ready: p
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True")),
            }
        })
        .collect();
    out.sort();
    Ok(out)
}

/// Pods per zone.
fn per_zone(placed: &[Placed]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for p in placed {
        *counts.entry(p.zone.clone()).or_default() += 1;
    }
    counts
}

fn counts(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs.iter().map(|(z, n)| (z.to_string(), *n)).collect()
}

/// Waits until the live Pods of `app` number `want` per zone, all ready, all of one version (not
/// `old`), each in the subset of its zone, and returns them.
async fn spread_as(
    ns: &TestNamespace,
    app: &str,
    want: &BTreeMap<String, usize>,
    old: Option<&str>,
    what: &str,
) -> anyhow::Result<Vec<Placed>> {
    eventually(format!("{what}: {want:?}"), TIMEOUT, || async {
        let placed = placement(ns, app).await?;
        let versions: std::collections::BTreeSet<&String> =
            placed.iter().map(|p| &p.version).collect();
        let ok = per_zone(&placed) == *want
            && placed.iter().all(|p| p.ready && p.subset == p.zone)
            && versions.len() == 1
            && placed.iter().all(|p| Some(p.version.as_str()) != old);
        Ok(ok.then_some(placed))
    })
    .await
}

async fn spread_status(ns: &TestNamespace, name: &str) -> anyhow::Result<WorkloadSpread> {
    let api: Api<WorkloadSpread> = ns.api();
    api.get(name).await.context("reading the WorkloadSpread")
}

fn subset_counts(ws: &WorkloadSpread) -> Vec<(String, i32, i32)> {
    ws.status
        .iter()
        .flat_map(|s| s.subset_statuses.iter())
        .map(|s| (s.name.clone(), s.replicas, s.missing_replicas))
        .collect()
}

fn zone_subset(name: &str, max: Option<&str>) -> String {
    kruise_e2e::workloadspread_kit::zone_subset(name, max, Some("spread-zone"))
}

/// A CloneSet of 6 spread 2 / 2 / rest over zone-a, zone-b, zone-c; rolled out one Pod at a time
/// (maxUnavailable 1, no surge): a CloneSet's Pods are counted as one version (`versionIgnored`, as
/// OpenKruise v1.9.0 counts them), so each new Pod takes the slot its old one freed and the spread
/// stays 2 / 2 / 2; then scaled down to 4 (the deletion cost per subset makes the CloneSet remove
/// zone-c's Pods first, as the WorkloadSpread's order says).
#[tokio::test]
async fn cloneset_spread_through_rolling_update_and_scale_down() -> anyhow::Result<()> {
    let ns = namespace("ws-cloneset").await?;
    ns.run(async {
        let subsets = [
            zone_subset("zone-a", Some("2")),
            zone_subset("zone-b", Some("2")),
            zone_subset("zone-c", None),
        ];
        ns.apply(&cloneset_spread("spread", "web", &subsets))
            .await?;
        let cloneset = |image: &str, replicas: i32| {
            format!(
                r#"apiVersion: apps.kruise.io/v1alpha1
kind: CloneSet
metadata:
  name: web
spec:
  replicas: {replicas}
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: main
        image: {image}
  updateStrategy:
    type: ReCreate
    maxSurge: 0
    maxUnavailable: 1
"#
            )
        };
        ns.apply(&cloneset("nginx:1.25", 6)).await?;
        let placed = spread_as(
            &ns,
            "web",
            &counts(&[("zone-a", 2), ("zone-b", 2), ("zone-c", 2)]),
            None,
            "first rollout",
        )
        .await?;
        let costs: BTreeMap<&str, std::collections::BTreeSet<&str>> =
            placed.iter().fold(BTreeMap::new(), |mut m, p| {
                m.entry(p.zone.as_str())
                    .or_default()
                    .insert(p.cost.as_str());
                m
            });
        eventually("deletion costs 300 / 200 / 100", TIMEOUT, || async {
            let placed = placement(&ns, "web").await?;
            let ok = placed.iter().all(|p| {
                p.cost
                    == match p.zone.as_str() {
                        "zone-a" => "300",
                        "zone-b" => "200",
                        _ => "100",
                    }
            });
            Ok(ok.then_some(()))
        })
        .await
        .with_context(|| format!("costs were {costs:?}"))?;
        eventually("status counts 2 / 2 / 2", TIMEOUT, || async {
            let ws = spread_status(&ns, "spread").await?;
            let got = subset_counts(&ws);
            let want = vec![
                ("zone-a".to_string(), 2, 0),
                ("zone-b".to_string(), 2, 0),
                ("zone-c".to_string(), 2, -1),
            ];
            Ok((got == want).then_some(()))
        })
        .await?;
        // The patch of the subset is in every Pod.
        let pods: Api<Pod> = ns.api();
        for pod in pods
            .list(&ListParams::default().labels("app=web"))
            .await?
            .items
        {
            let labels = pod.metadata.labels.unwrap_or_default();
            ensure!(
                labels.contains_key("spread-zone"),
                "a Pod lacks its subset's patch: {labels:?}"
            );
        }

        // Rolling update, one Pod at a time.
        let first_version = placed[0].version.clone();
        ns.apply(&cloneset("nginx:1.26", 6)).await?;
        spread_as(
            &ns,
            "web",
            &counts(&[("zone-a", 2), ("zone-b", 2), ("zone-c", 2)]),
            Some(&first_version),
            "after the rolling update",
        )
        .await?;
        let ws = spread_status(&ns, "spread").await?;
        let versions: Vec<&String> = ws
            .status
            .iter()
            .flat_map(|s| s.versioned_subset_statuses.keys())
            .collect();
        ensure!(
            versions == ["versionIgnored"],
            "a CloneSet's Pods are counted as one version: {ws:?}"
        );

        // Scale down: zone-c (lowest cost) goes first.
        ns.apply(&cloneset("nginx:1.26", 4)).await?;
        spread_as(
            &ns,
            "web",
            &counts(&[("zone-a", 2), ("zone-b", 2)]),
            None,
            "after scaling down to 4",
        )
        .await?;
        Ok(())
    })
    .await
}

/// A Deployment of 4 spread 25% / 50% / rest (1 / 2 / 1), rolled out with the default RollingUpdate
/// (maxSurge 25%): each ReplicaSet's Pods are counted under their own version, so the new one ends
/// spread 1 / 2 / 1 too; then scaled down to 2 (the ReplicaSet controller honours the deletion
/// cost: zone-c's Pod goes first, then zone-b's surplus).
#[tokio::test]
async fn deployment_percent_spread_through_rolling_update_and_scale_down() -> anyhow::Result<()> {
    let ns = namespace("ws-deploy").await?;
    ns.run(async {
        let subsets = [
            zone_subset("zone-a", Some("25%")),
            zone_subset("zone-b", Some("50%")),
            zone_subset("zone-c", None),
        ]
        .concat();
        ns.apply(&format!(
            r#"apiVersion: apps.kruise.io/v1alpha1
kind: WorkloadSpread
metadata:
  name: spread
spec:
  targetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: api
  subsets:{subsets}
"#
        ))
        .await?;
        let deployment = |image: &str, replicas: i32| {
            format!(
                r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: api
spec:
  replicas: {replicas}
  selector:
    matchLabels:
      app: api
  template:
    metadata:
      labels:
        app: api
    spec:
      containers:
      - name: main
        image: {image}
"#
            )
        };
        ns.apply(&deployment("nginx:1.25", 4)).await?;
        let first = spread_as(
            &ns,
            "api",
            &counts(&[("zone-a", 1), ("zone-b", 2), ("zone-c", 1)]),
            None,
            "first rollout",
        )
        .await?;
        ns.apply(&deployment("nginx:1.26", 4)).await?;
        let placed = eventually("the new ReplicaSet spread 1 / 2 / 1", TIMEOUT, || async {
            let placed = placement(&ns, "api").await?;
            let ok = placed.len() == 4
                && placed
                    .iter()
                    .all(|p| p.version != first[0].version && p.ready && p.subset == p.zone)
                && per_zone(&placed) == counts(&[("zone-a", 1), ("zone-b", 2), ("zone-c", 1)]);
            Ok(ok.then_some(placed))
        })
        .await?;
        let version = placed[0].version.clone();
        eventually(
            "a versioned status for the new ReplicaSet",
            TIMEOUT,
            || async {
                let ws = spread_status(&ns, "spread").await?;
                let got: Vec<(String, i32)> = ws
                    .status
                    .iter()
                    .flat_map(|s| s.versioned_subset_statuses.get(&version))
                    .flatten()
                    .map(|s| (s.name.clone(), s.replicas))
                    .collect();
                let want = vec![
                    ("zone-a".to_string(), 1),
                    ("zone-b".to_string(), 2),
                    ("zone-c".to_string(), 1),
                ];
                Ok((got == want).then_some(()))
            },
        )
        .await?;
        ns.apply(&deployment("nginx:1.26", 2)).await?;
        spread_as(
            &ns,
            "api",
            &counts(&[("zone-a", 1), ("zone-b", 1)]),
            None,
            "after scaling down to 2",
        )
        .await?;
        Ok(())
    })
    .await
}

/// Adaptive: the first subset's zone has no node, so its Pods stay Pending; after
/// rescheduleCriticalSeconds the controller deletes them and marks the subset unschedulable, and
/// their replacements go to the next subset.
#[tokio::test]
async fn adaptive_reschedules_pods_that_cannot_be_placed() -> anyhow::Result<()> {
    let ns = namespace("ws-adaptive").await?;
    ns.run(async {
        let subsets = [
            zone_subset("zone-x", Some("2")),
            zone_subset("zone-a", None),
        ]
        .concat();
        ns.apply(&format!(
            r#"apiVersion: apps.kruise.io/v1alpha1
kind: WorkloadSpread
metadata:
  name: spread
spec:
  targetRef:
    apiVersion: apps.kruise.io/v1alpha1
    kind: CloneSet
    name: batch
  scheduleStrategy:
    type: Adaptive
    adaptive:
      rescheduleCriticalSeconds: 5
  subsets:{subsets}
"#
        ))
        .await?;
        ns.apply(
            r#"apiVersion: apps.kruise.io/v1alpha1
kind: CloneSet
metadata:
  name: batch
spec:
  replicas: 3
  selector:
    matchLabels:
      app: batch
  template:
    metadata:
      labels:
        app: batch
    spec:
      containers:
      - name: main
        image: nginx:1.25
"#,
        )
        .await?;
        spread_as(
            &ns,
            "batch",
            &counts(&[("zone-a", 3)]),
            None,
            "all Pods rescheduled to zone-a",
        )
        .await?;
        let ws = spread_status(&ns, "spread").await?;
        let condition = ws
            .status
            .iter()
            .flat_map(|s| s.subset_statuses.first())
            .flat_map(|s| s.conditions.iter())
            .find(|c| c.type_ == "Schedulable")
            .map(|c| c.status.clone());
        ensure!(
            condition.as_deref() == Some("False"),
            "zone-x not marked unschedulable: {ws:?}"
        );
        Ok(())
    })
    .await
}

/// A WorkloadSpread that mixes an integer and a percentage, or targets a workload another one
/// targets, is refused with a message naming the field.
#[tokio::test]
async fn invalid_workloadspreads_are_refused() -> anyhow::Result<()> {
    let ns = namespace("ws-invalid").await?;
    ns.run(async {
        let mixed = format!(
            r#"apiVersion: apps.kruise.io/v1alpha1
kind: WorkloadSpread
metadata:
  name: mixed
spec:
  targetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: api
  subsets:{}
"#,
            [
                zone_subset("zone-a", Some("2")),
                zone_subset("zone-b", Some("50%")),
                zone_subset("zone-c", None)
            ]
            .concat()
        );
        let refused = ns
            .apply(&mixed)
            .await
            .err()
            .map(|e| format!("{e:#}"))
            .unwrap_or_default();
        ensure!(
            refused.contains("spec.subsets[1].maxReplicas"),
            "not refused by field: {refused:?}"
        );
        let one = mixed
            .replace("name: mixed", "name: first")
            .replace("maxReplicas: 50%", "maxReplicas: 3");
        ns.apply(&one).await?;
        let second = one.replace("name: first", "name: second");
        let refused = ns
            .apply(&second)
            .await
            .err()
            .map(|e| format!("{e:#}"))
            .unwrap_or_default();
        ensure!(
            refused.contains("in conflict with other WorkloadSpread first"),
            "conflict not refused: {refused:?}"
        );
        Ok(())
    })
    .await
}

/// A custom workload kind listed in kruise-configuration's
/// `WorkloadSpread_Watch_Custom_Workload_WhiteList` may be targeted, and its Pods are spread (here
/// an Advanced DaemonSet, as upstream's spec uses: one Pod per node, 2 then 5 per subset); a kind
/// not listed is refused.
#[tokio::test]
async fn a_whitelisted_custom_workload_is_spread() -> anyhow::Result<()> {
    let ns = namespace("ws-custom").await?;
    let configmaps: Api<ConfigMap> =
        Api::namespaced(ns.client.clone(), kruise_testkit::manager::NAMESPACE);
    let result = ns
        .run(async {
            let refused = ns
                .apply(
                    r#"apiVersion: apps.kruise.io/v1alpha1
kind: WorkloadSpread
metadata:
  name: refused
spec:
  targetRef: {apiVersion: apps/v1, kind: DaemonSet, name: agents}
  subsets: [{name: a, maxReplicas: 2}, {name: b, maxReplicas: 5}]
"#,
                )
                .await;
            let message = format!(
                "{:#}",
                refused.err().context("a DaemonSet of apps accepted")?
            );
            ensure!(
                message.contains("spec.targetRef")
                    && message.contains("GroupKind is not permitted"),
                "{message}"
            );
            let config: ConfigMap = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "kruise-configuration"},
                "data": {"WorkloadSpread_Watch_Custom_Workload_WhiteList":
                    r#"{"workloads": [{"Group": "apps.kruise.io", "Version": "v1alpha1", "Kind": "DaemonSet"}]}"#},
            }))?;
            configmaps.create(&PostParams::default(), &config).await?;
            ns.apply(
                r#"apiVersion: apps.kruise.io/v1alpha1
kind: WorkloadSpread
metadata:
  name: agents
spec:
  targetRef: {apiVersion: apps.kruise.io/v1alpha1, kind: DaemonSet, name: agents}
  subsets: [{name: a, maxReplicas: 2}, {name: b, maxReplicas: 5}]
"#,
            )
            .await?;
            ns.apply(
                r#"apiVersion: apps.kruise.io/v1alpha1
kind: DaemonSet
metadata:
  name: agents
spec:
  selector:
    matchLabels: {app: agents}
  template:
    metadata:
      labels: {app: agents}
    spec:
      containers:
      - name: main
        image: nginx:1.25
"#,
            )
            .await?;
            let pods: Api<Pod> = ns.api();
            eventually("3 agents spread 2 / 1", TIMEOUT, || async {
                let mut subsets = BTreeMap::new();
                for pod in pods
                    .list(&ListParams::default().labels("app=agents"))
                    .await?
                    .items
                {
                    let matched = pod
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(ANNOTATION_MATCHED))
                        .and_then(|v| MatchedWorkloadSpread::parse(v))
                        .map(|m| m.subset)
                        .unwrap_or_default();
                    *subsets.entry(matched).or_insert(0usize) += 1;
                }
                let status = subset_counts(&spread_status(&ns, "agents").await?);
                let want = vec![("a".to_owned(), 2, 0), ("b".to_owned(), 1, 4)];
                Ok((status == want && subsets == counts(&[("a", 2), ("b", 1)])).then_some(()))
            })
            .await
        })
        .await;
    // The whitelist is the cluster's: gone for the other tests whatever happened.
    // (Absent when the test failed before creating it.)
    configmaps
        .delete("kruise-configuration", &DeleteParams::default())
        .await
        .ok();
    result
}

/// As OpenKruise v1.9.0's e2e `only one subset, zone-a=2`: a CloneSet scaled from 2 to 6 under a
/// WorkloadSpread whose only subset holds 2. The 4 new Pods fit no subset; a Pod that names no
/// WorkloadSpread does not wake one, so they carry no deletion cost until the spread reconciles
/// for another reason (here: it is annotated), and then -200 (beyond every subset), as upstream.
#[tokio::test]
async fn pods_beyond_every_subset_are_costed_when_the_spread_reconciles() -> anyhow::Result<()> {
    let ns = namespace("ws-lazy").await?;
    ns.run(async {
        let subset = zone_subset("zone-a", Some("2"));
        ns.apply(&cloneset_spread("spread", "lazy", &[subset]))
            .await?;
        let cloneset = |replicas: i32| {
            format!(
                r#"apiVersion: apps.kruise.io/v1alpha1
kind: CloneSet
metadata:
  name: lazy
spec:
  replicas: {replicas}
  selector:
    matchLabels:
      app: lazy
  template:
    metadata:
      labels:
        app: lazy
    spec:
      containers:
      - name: main
        image: nginx:alpine
"#
            )
        };
        ns.apply(&cloneset(2)).await?;
        eventually("2 Pods in zone-a", TIMEOUT, || async {
            let placed = placement(&ns, "lazy").await?;
            Ok((placed.len() == 2
                && placed
                    .iter()
                    .all(|p| p.ready && p.subset == "zone-a" && p.zone == "zone-a"))
            .then_some(()))
        })
        .await?;
        // A reconcile now: the next periodic one is 30 s away.
        ns.kubectl(&[
            "annotate",
            "workloadspread",
            "spread",
            "e2e/touch=1",
            "--overwrite",
        ])
        .await?;
        ns.apply(&cloneset(6)).await?;
        let scaled = eventually("6 Pods scheduled", TIMEOUT, || async {
            let placed = placement(&ns, "lazy").await?;
            Ok(
                (placed.len() == 6 && placed.iter().all(|p| p.zone != "unscheduled"))
                    .then_some(placed),
            )
        })
        .await?;
        let beyond: Vec<&Placed> = scaled.iter().filter(|p| p.subset.is_empty()).collect();
        ensure!(beyond.len() == 4, "4 Pods fit no subset: {scaled:?}");
        // For 5 s: no cost on them (upstream's spec checks this at once).
        for _ in 0..10 {
            let placed = placement(&ns, "lazy").await?;
            ensure!(
                placed
                    .iter()
                    .filter(|p| p.subset.is_empty())
                    .all(|p| p.cost.is_empty()),
                "Pods beyond every subset costed before the spread reconciled: {placed:?}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        ns.kubectl(&[
            "annotate",
            "workloadspread",
            "spread",
            "e2e/touch=2",
            "--overwrite",
        ])
        .await?;
        eventually(
            "the 4 Pods beyond every subset costed -200",
            TIMEOUT,
            || async {
                let placed = placement(&ns, "lazy").await?;
                let beyond: Vec<&Placed> = placed.iter().filter(|p| p.subset.is_empty()).collect();
                Ok((beyond.len() == 4 && beyond.iter().all(|p| p.cost == "-200")).then_some(()))
            },
        )
        .await?;
        Ok(())
    })
    .await
}
