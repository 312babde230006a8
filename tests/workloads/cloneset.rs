//! CloneSet end to end, as a user sees it through kubectl and the API: the seed 000 in-place walkthrough,
//! scaling and its deletion order, specified deletion, partition, maxUnavailable/maxSurge, update
//! policies, priority and scatter, pause and rollback, lifecycle hooks, a failing image, in-place
//! resize. Every rollout runs under a [`RolloutMonitor`], which fails the test the moment an invariant
//! breaks. (Killing the manager mid-rollout is in `cloneset_failover.rs`: it needs its own manager.)

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use k8s_openapi::api::core::v1::Pod;
use kruise_api::cloneset::v1beta1::CloneSet;
use kruise_e2e::cloneset_kit::*;
use kruise_e2e::same_image;
use kruise_e2e::{container_status, is_ready, node_name, pod_condition, pod_ip};
use kruise_testkit::{Limits, RolloutMonitor, TestNamespace, eventually, managed_namespace, until};
use kube::api::Api;
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(60);
/// Long enough for a controller that was going to act wrongly to have done so.
const HOLD: Duration = Duration::from_secs(3);

const IMAGE_A: &str = "nginx:alpine";
const IMAGE_B: &str = "nginx:1.19.1";

fn selector(app: &str) -> String {
    format!("app={app}")
}

async fn start_monitor(
    ns: &TestNamespace,
    app: &str,
    replicas: i32,
    max_unavailable: i32,
    max_surge: i32,
) -> anyhow::Result<RolloutMonitor> {
    let limits = Limits::replicas(replicas)
        .max_unavailable(max_unavailable)
        .max_surge(max_surge);
    ns.rollout_monitor(&selector(app), limits).await
}

/// A monitor that also requires `partition` Pods to stay at `old_revision`.
async fn monitor_partition(
    ns: &TestNamespace,
    app: &str,
    replicas: i32,
    max_unavailable: i32,
    old_revision: &str,
    partition: i32,
) -> anyhow::Result<RolloutMonitor> {
    let limits = Limits {
        min_old_revision_pods: Some((REVISION.into(), old_revision.into(), partition)),
        ..Limits::replicas(replicas).max_unavailable(max_unavailable)
    };
    ns.rollout_monitor(&selector(app), limits).await
}

/// `rollingUpdate` settings of an in-place CloneSet.
fn in_place(max_unavailable: Value, grace_seconds: i32) -> Value {
    json!({"updateStrategy": {"rollingUpdate": {
        "podUpdatePolicy": "InPlaceIfPossible",
        "maxUnavailable": max_unavailable,
        "inPlaceUpdateStrategy": {"gracePeriodSeconds": grace_seconds}
    }}})
}

fn merged(mut a: Value, b: Value) -> Value {
    json_patch::merge(&mut a, &b);
    a
}

/// What must not change across an in-place update: name → (UID, node, IP).
fn identities(pods: &[Pod]) -> BTreeMap<String, (String, Option<String>, Option<String>)> {
    pods.iter()
        .map(|p| (name(p), (uid(p), node_name(p), pod_ip(p))))
        .collect()
}

fn uids(pods: &[Pod]) -> BTreeSet<String> {
    pods.iter().map(uid).collect()
}

/// Every Pod of `after` is the Pod of the same name in `before` (same UID, node and IP), updated in place
/// to `image`, its container restarted `restarts` times in all.
fn ensure_updated_in_place(
    before: &[Pod],
    after: &[Pod],
    image: &str,
    restarts_expected: i32,
) -> anyhow::Result<()> {
    ensure!(
        identities(before) == identities(after),
        "Pods were not updated in place: before {:?}, after {:?}",
        identities(before),
        identities(after)
    );
    for pod in after {
        ensure!(
            spec_image(pod).as_deref() == Some(image) && runs_image(pod, image),
            "{} runs {:?} (spec {:?}), expected {image}",
            name(pod),
            running_image(pod),
            spec_image(pod)
        );
        ensure!(
            restarts(pod) == restarts_expected,
            "{}: restartCount {} != {restarts_expected}",
            name(pod),
            restarts(pod)
        );
    }
    Ok(())
}

/// The Pods of `app` (active), once `check` holds for them.
async fn wait_pods(
    ns: &TestNamespace,
    app: &str,
    what: impl Into<String>,
    check: impl Fn(&[Pod]) -> bool,
) -> anyhow::Result<Vec<Pod>> {
    let api: Api<Pod> = ns.api();
    let check = &check;
    eventually(what.into(), TIMEOUT, || {
        let api = api.clone();
        async move {
            let list = active_pods(&api, &selector(app)).await?;
            if check(&list) {
                Ok(Some(list))
            } else {
                Err(anyhow::anyhow!("Pods: {}", describe(&list)))
            }
        }
    })
    .await
}

async fn get_pod(ns: &TestNamespace, pod_name: &str) -> anyhow::Result<Pod> {
    let api: Api<Pod> = ns.api();
    api.get(pod_name)
        .await
        .with_context(|| format!("reading Pod {pod_name}"))
}

async fn get_cloneset(ns: &TestNamespace, cs_name: &str) -> anyhow::Result<CloneSet> {
    let api: Api<CloneSet> = ns.api();
    api.get(cs_name)
        .await
        .with_context(|| format!("reading CloneSet {cs_name}"))
}

/// A table printed by kubectl: column name → value of the first row.
fn table_row(table: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let mut lines = table.lines();
    let header: Vec<&str> = lines
        .next()
        .context("no header")?
        .split_whitespace()
        .collect();
    let row: Vec<&str> = lines.next().context("no row")?.split_whitespace().collect();
    ensure!(header.len() == row.len(), "ragged table:\n{table}");
    Ok(header
        .into_iter()
        .zip(row)
        .map(|(h, v)| (h.to_string(), v.to_string()))
        .collect())
}

/// `name hostIP podIP image` per Pod, as the seed prints them with jsonpath.
async fn seed_listing(ns: &TestNamespace, app: &str) -> anyhow::Result<String> {
    ns.kubectl(&[
        "get",
        "pods",
        "-l",
        &selector(app),
        "-o",
        r#"jsonpath={range .items[*]}{.metadata.name} {.status.hostIP} {.status.podIP} {.spec.containers[*].image}{"\n"}{end}"#,
    ])
    .await
}

// ------------------------------------------------------------------------------------------------------
// 1. Seed 000: the in-place update walkthrough.

#[tokio::test]
async fn seed000_walkthrough() -> anyhow::Result<()> {
    let ns = managed_namespace("cs-seed").await?;
    ns.run(async {
        let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../examples/cloneset-sample.yaml");
        let yaml = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        ns.apply(&yaml).await?;
        let (cs, before) = wait_converged(&ns, "sample", 2, TIMEOUT).await?;
        let rev1 = status(&cs).update_revision;
        ensure!(rev1.starts_with("sample-"), "updateRevision {rev1}");
        for pod in &before {
            let pod_name = name(pod);
            let id = pod_name
                .strip_prefix("sample-")
                .with_context(|| format!("Pod name {pod_name}"))?;
            ensure!(
                id.len() == 5
                    && id
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()),
                "Pod name {pod_name} is not sample-<5 chars>"
            );
            ensure!(
                label(pod, INSTANCE_ID) == Some(id),
                "{pod_name}: instance-id label {:?}",
                label(pod, INSTANCE_ID)
            );
            ensure!(
                revision(pod) == Some(rev1.as_str()),
                "{pod_name}: controller-revision-hash {:?}, updateRevision {rev1}",
                revision(pod)
            );
            ensure!(
                lifecycle_state(pod) == Some("Normal"),
                "{pod_name}: lifecycle state {:?}",
                lifecycle_state(pod)
            );
            let gates = pod
                .spec
                .as_ref()
                .and_then(|s| s.readiness_gates.clone())
                .unwrap_or_default();
            ensure!(
                gates
                    .iter()
                    .any(|g| g.condition_type == IN_PLACE_UPDATE_READY),
                "{pod_name}: readiness gates {gates:?}"
            );
            ensure!(
                pod_condition(pod, IN_PLACE_UPDATE_READY).is_some_and(|c| c.status == "True"),
                "{pod_name}: InPlaceUpdateReady condition {:?}",
                pod_condition(pod, IN_PLACE_UPDATE_READY)
            );
            let owner = pod
                .metadata
                .owner_references
                .as_ref()
                .and_then(|o| o.iter().find(|o| o.controller == Some(true)))
                .with_context(|| format!("{pod_name} has no controller"))?;
            ensure!(
                owner.kind == "CloneSet" && owner.name == "sample",
                "{pod_name} controlled by {} {}",
                owner.kind,
                owner.name
            );
        }
        wait_events(&ns, "sample", "SuccessfulCreate", &names(&before)).await?;
        let listing_before = seed_listing(&ns, "sample").await?;
        let statuses_before: BTreeMap<String, _> = before
            .iter()
            .map(|p| (name(p), container_status(p, CONTAINER)))
            .collect();

        // maxUnavailable 20% of 2 rounds up to 1: one Pod at a time.
        let monitor = start_monitor(&ns, "sample", 2, 1, 0).await?;
        let patched = Instant::now();
        merge_patch(
            &ns,
            "cloneset",
            "sample",
            &json!({"spec":{"template":{"spec":{"containers":[{"name":"nginx","image":"nginx:1.19.1"}]}}}}),
        )
        .await?;
        let (cs, after) = monitor_converged(&monitor, &ns, "sample", 2, TIMEOUT).await?;
        let took = patched.elapsed();
        let stats = monitor.finish().await?;
        eprintln!("seed000: rollout in {took:?}, monitor {stats:?}");
        ensure!(
            stats.max_unavailable_seen == 1,
            "each Pod must be taken out of service (InPlaceUpdateReady False) while it is updated: {stats:?}"
        );
        // gracePeriodSeconds 5, one Pod after the other (second-resolution timestamps allowed for).
        ensure!(
            took >= Duration::from_secs(8),
            "two Pods with a 5 s grace period each were updated in {took:?}"
        );

        let s = status(&cs);
        let rev2 = s.update_revision.clone();
        ensure!(rev2 != rev1, "updateRevision did not change");
        ensure!(
            (s.replicas, s.ready_replicas, s.updated_replicas, s.updated_ready_replicas)
                == (2, 2, 2, 2)
                && s.available_replicas == 2
                && s.current_revision == rev2,
            "status {s:?}"
        );
        ensure_updated_in_place(&before, &after, IMAGE_B, 1)?;
        for pod in &after {
            let pod_name = name(pod);
            let old = statuses_before
                .get(&pod_name)
                .cloned()
                .flatten()
                .with_context(|| format!("{pod_name} had no container status"))?;
            let new = container_status(pod, CONTAINER).context("nginx status")?;
            ensure!(
                new.image_id != old.image_id,
                "{pod_name}: imageID unchanged"
            );
            ensure!(same_image(&new.image, IMAGE_B), "{pod_name}: image {}", new.image);
            ensure!(revision(pod) == Some(rev2.as_str()));
            let state: Value = serde_json::from_str(
                annotation(pod, IN_PLACE_UPDATE_STATE)
                    .with_context(|| format!("{pod_name} lacks {IN_PLACE_UPDATE_STATE}"))?,
            )?;
            ensure!(
                state["revision"].as_str() == Some(rev2.as_str()),
                "{pod_name}: in-place state {state}"
            );
            ensure!(
                pod_condition(pod, IN_PLACE_UPDATE_READY).is_some_and(|c| c.status == "True"),
                "{pod_name}: InPlaceUpdateReady after the update"
            );
        }
        // What the seed shows: same names, hosts and IPs, new image.
        let listing_after = seed_listing(&ns, "sample").await?;
        let strip_image = |listing: &str| -> Vec<String> {
            listing
                .lines()
                .map(|l| l.rsplit_once(' ').map_or(l, |(head, _)| head).to_string())
                .collect()
        };
        ensure!(
            strip_image(&listing_before) == strip_image(&listing_after)
                && listing_after.lines().all(|l| l.ends_with(" nginx:1.19.1"))
                && listing_before.lines().all(|l| l.ends_with(" nginx:alpine")),
            "before:\n{listing_before}after:\n{listing_after}"
        );
        let restarts = ns
            .kubectl(&[
                "get",
                "pods",
                "-l",
                "app=sample",
                "-o",
                "jsonpath={.items[*].status.containerStatuses[0].restartCount}",
            ])
            .await?;
        ensure!(restarts.trim() == "1 1", "restart counts {restarts}");

        let events = wait_events(
            &ns,
            "sample",
            "SuccessfulUpdatePodInPlace",
            &names(&after),
        )
        .await?;
        ensure!(
            events
                .iter()
                .all(|e| e.message.as_deref().is_some_and(|m| m.contains(&rev2))),
            "events do not name revision {rev2}: {}",
            describe_events(&events)
        );

        let table = ns.kubectl(&["get", "cloneset", "sample"]).await?;
        let row = table_row(&table)?;
        let header: Vec<&str> = table
            .lines()
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .collect();
        let wanted = [
            "NAME",
            "DESIRED",
            "UPDATED",
            "UPDATED_READY",
            "READY",
            "TOTAL",
            "AGE",
        ];
        let mut at = header.iter();
        ensure!(
            wanted.iter().all(|w| at.any(|h| h == w)),
            "kubectl get cloneset columns {header:?} lack {wanted:?} in order"
        );
        for column in ["DESIRED", "UPDATED", "UPDATED_READY", "READY", "TOTAL"] {
            ensure!(
                row.get(column).map(String::as_str) == Some("2"),
                "{column} in\n{table}"
            );
        }
        // The same columns through v1alpha1, the version of the seed.
        let table = ns
            .kubectl(&["get", "clonesets.v1alpha1.apps.kruise.io", "sample"])
            .await?;
        let row = table_row(&table)?;
        for column in ["DESIRED", "UPDATED", "UPDATED_READY", "READY", "TOTAL"] {
            ensure!(
                row.get(column).map(String::as_str) == Some("2"),
                "{column} in\n{table}"
            );
        }
        Ok(())
    })
    .await
}

// ------------------------------------------------------------------------------------------------------
// 2. Scaling.

#[tokio::test]
async fn scale_up_and_down_in_upstream_order() -> anyhow::Result<()> {
    let ns = managed_namespace("cs-scale").await?;
    ns.run(async {
        apply(&ns, &cloneset("scale", 3, IMAGE_A, json!({}))).await?;
        let (_, three) = wait_converged(&ns, "scale", 3, TIMEOUT).await?;
        ns.kubectl(&["scale", "cloneset", "scale", "--replicas=5"])
            .await?;
        let (cs, five) = wait_converged(&ns, "scale", 5, TIMEOUT).await?;
        ensure!(
            uids(&three).is_subset(&uids(&five)),
            "scaling up replaced Pods: {:?} → {:?}",
            names(&three),
            names(&five)
        );
        let ids: BTreeSet<&str> = five.iter().filter_map(|p| label(p, INSTANCE_ID)).collect();
        ensure!(ids.len() == 5, "instance ids {ids:?}");
        for pod in &five {
            let id = label(pod, INSTANCE_ID).unwrap_or_default();
            ensure!(name(pod) == format!("scale-{id}"), "{} / {id}", name(pod));
        }
        ensure!(status(&cs).label_selector == "app=scale", "status.labelSelector");

        // Deletion order: a not-ready Pod first (even with a high deletion cost), then the lowest
        // pod-deletion-cost.
        let unready = name(&five[4]);
        let cheap = name(&five[1]);
        ns.kubectl(&[
            "annotate",
            "pod",
            &unready,
            &format!("{SIM_NEVER_READY}=*"),
            &format!("{DELETION_COST}=1000"),
        ])
        .await?;
        ns.kubectl(&["annotate", "pod", &cheap, &format!("{DELETION_COST}=-100")])
            .await?;
        until(
            format!("{unready} not ready and counted so"),
            TIMEOUT,
            || async {
                let pod = get_pod(&ns, &unready).await?;
                let cs = get_cloneset(&ns, "scale").await?;
                Ok(!is_ready(&pod) && status(&cs).ready_replicas == 4)
            },
        )
        .await?;
        ns.kubectl(&["scale", "cloneset", "scale", "--replicas=3"])
            .await?;
        let (_, kept) = wait_converged(&ns, "scale", 3, TIMEOUT).await?;
        let expected: BTreeSet<String> = five
            .iter()
            .map(name)
            .filter(|n| *n != unready && *n != cheap)
            .collect();
        let kept_names: BTreeSet<String> = kept.iter().map(name).collect();
        ensure!(
            kept_names == expected,
            "scale-in kept {kept_names:?}, expected {expected:?} (deleted first: not-ready {unready}, then cost -100 {cheap})"
        );
        ensure!(
            uids(&kept).is_subset(&uids(&five)),
            "scale-in created Pods"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn pods_to_delete_and_specified_delete_replace_exactly_that_pod() -> anyhow::Result<()> {
    let ns = managed_namespace("cs-delete").await?;
    ns.run(async {
        apply(&ns, &cloneset("del", 3, IMAGE_A, json!({}))).await?;
        let (_, before) = wait_converged(&ns, "del", 3, TIMEOUT).await?;

        // scaleStrategy.podsToDelete. The replacement is created once the victim is terminating (a
        // terminating Pod does not count towards the surge), so the set never exceeds replicas.
        let victim = name(&before[0]);
        let monitor = start_monitor(&ns, "del", 3, 1, 0).await?;
        merge_patch(
            &ns,
            "cloneset",
            "del",
            &json!({"spec": {"scaleStrategy": {"podsToDelete": [victim]}}}),
        )
        .await?;
        let (_, after) = monitor_converged(&monitor, &ns, "del", 3, TIMEOUT).await?;
        monitor.finish().await?;
        let replaced = |before: &[Pod], after: &[Pod], victim: &str| -> anyhow::Result<String> {
            let before_names: BTreeSet<String> = before.iter().map(name).collect();
            let after_names: BTreeSet<String> = after.iter().map(name).collect();
            ensure!(
                !after_names.contains(victim),
                "{victim} still there: {after_names:?}"
            );
            let kept: BTreeSet<String> = before
                .iter()
                .filter(|p| name(p) != victim)
                .map(uid)
                .collect();
            ensure!(
                kept.is_subset(&uids(after)),
                "other Pods were touched: {before_names:?} → {after_names:?}"
            );
            let new: Vec<&String> = after_names.difference(&before_names).collect();
            ensure!(new.len() == 1, "replacements {new:?}");
            Ok(new[0].clone())
        };
        let replacement = replaced(&before, &after, &victim)?;
        eprintln!("podsToDelete: {victim} replaced by {replacement}");
        until(
            "podsToDelete emptied of Pods that no longer exist",
            TIMEOUT,
            || async {
                let cs = get_cloneset(&ns, "del").await?;
                Ok(cs.spec.scale_strategy.pods_to_delete.is_empty())
            },
        )
        .await?;
        wait_events(
            &ns,
            "del",
            "SuccessfulDelete",
            std::slice::from_ref(&victim),
        )
        .await?;

        // The apps.kruise.io/specified-delete label.
        let victim = name(&after[0]);
        let monitor = start_monitor(&ns, "del", 3, 1, 1).await?;
        ns.kubectl(&["label", "pod", &victim, &format!("{SPECIFIED_DELETE}=true")])
            .await?;
        // A label changes no generation: the status reads converged until the controller acts, so
        // wait for the victim to go first.
        let pod_api: Api<Pod> = ns.api();
        monitor
            .eventually(format!("{victim} being deleted"), TIMEOUT, || async {
                Ok(match pod_api.get_opt(&victim).await? {
                    None => Some(()),
                    Some(pod) => pod.metadata.deletion_timestamp.is_some().then_some(()),
                })
            })
            .await?;
        let (_, last) = monitor_converged(&monitor, &ns, "del", 3, TIMEOUT).await?;
        monitor.finish().await?;
        let replacement = replaced(&after, &last, &victim)?;
        eprintln!("specified-delete: {victim} replaced by {replacement}");
        Ok(())
    })
    .await
}

#[tokio::test]
async fn scale_strategy_max_unavailable_limits_creation() -> anyhow::Result<()> {
    let ns = managed_namespace("cs-scalelimit").await?;
    ns.run(async {
        // Every new Pod starts never-ready (template annotation); the test lifts it Pod by Pod.
        let doc = cloneset(
            "limited",
            5,
            IMAGE_A,
            json!({
                "scaleStrategy": {"maxUnavailable": 2},
                "template": {"metadata": {"annotations": {SIM_NEVER_READY: "*"}}}
            }),
        );
        apply(&ns, &doc).await?;
        let most_not_ready = AtomicUsize::new(0);
        let stage = |total: usize| {
            let most_not_ready = &most_not_ready;
            wait_pods(
                &ns,
                "limited",
                format!("{total} Pods"),
                move |pods: &[Pod]| {
                    let not_ready = pods.iter().filter(|p| !is_ready(p)).count();
                    most_not_ready.fetch_max(not_ready, Ordering::SeqCst);
                    pods.len() == total
                },
            )
        };
        let api: Api<Pod> = ns.api();
        let count_holds = |total: usize| {
            let api = api.clone();
            let most_not_ready = &most_not_ready;
            async move {
                holds(&format!("{total} Pods"), HOLD, || {
                    let api = api.clone();
                    async move {
                        let pods = active_pods(&api, "app=limited").await?;
                        let not_ready = pods.iter().filter(|p| !is_ready(p)).count();
                        most_not_ready.fetch_max(not_ready, Ordering::SeqCst);
                        ensure!(
                            pods.len() == total,
                            "{} Pods: {}",
                            pods.len(),
                            describe(&pods)
                        );
                        Ok(true)
                    }
                })
                .await
            }
        };
        let release = |pods: Vec<Pod>| {
            let ns = &ns;
            async move {
                for pod in pods
                    .iter()
                    .filter(|p| annotation(p, SIM_NEVER_READY).is_some())
                {
                    ns.kubectl(&[
                        "annotate",
                        "pod",
                        &name(pod),
                        &format!("{SIM_NEVER_READY}-"),
                    ])
                    .await?;
                }
                anyhow::Ok(())
            }
        };

        let first = stage(2).await?;
        wait_events(&ns, "limited", "ScaleUpLimited", &[]).await?;
        count_holds(2).await?;
        release(first).await?;
        let second = stage(4).await?;
        count_holds(4).await?;
        release(second).await?;
        let third = stage(5).await?;
        release(third).await?;
        wait_converged(&ns, "limited", 5, TIMEOUT).await?;
        let most = most_not_ready.load(Ordering::SeqCst);
        ensure!(
            most <= 2,
            "{most} Pods were unavailable at once (scaleStrategy.maxUnavailable 2)"
        );
        Ok(())
    })
    .await
}

// ------------------------------------------------------------------------------------------------------
// 3. Partition.

#[tokio::test]
async fn partition_holds_old_pods() -> anyhow::Result<()> {
    let ns = managed_namespace("cs-partition").await?;
    ns.run(async {
        let spec = merged(
            in_place(json!(1), 0),
            json!({"updateStrategy": {"rollingUpdate": {"partition": "99%"}}}),
        );
        apply(&ns, &cloneset("part", 4, IMAGE_A, spec)).await?;
        let (_, before) = wait_converged(&ns, "part", 4, TIMEOUT).await?;
        let rev1 = revision(&before[0]).unwrap_or_default().to_string();
        let pod_api: Api<Pod> = ns.api();

        // partition "99%" of 4 = ceil(3.96) = 4 = replicas, reduced to 3: exactly one Pod updates.
        let step = |expected_updated: i32, old_floor: i32| {
            let ns = &ns;
            let rev1 = rev1.clone();
            let pod_api = pod_api.clone();
            async move {
                let monitor = monitor_partition(ns, "part", 4, 1, &rev1, old_floor).await?;
                let check = || async {
                    let cs = get_cloneset(ns, "part").await?;
                    let s = status(&cs);
                    let pods = active_pods(&pod_api, "app=part").await?;
                    let new = pods
                        .iter()
                        .filter(|p| revision(p).is_some_and(|r| !same_revision(r, &rev1)))
                        .count();
                    let ok = cs.metadata.generation == Some(s.observed_generation)
                        && s.updated_replicas == expected_updated
                        && s.updated_ready_replicas == expected_updated
                        && s.ready_replicas == 4
                        && s.expected_updated_replicas == expected_updated
                        && pods.len() == 4
                        && pods.iter().all(is_ready)
                        && new == expected_updated as usize;
                    if ok {
                        Ok(Some(s))
                    } else {
                        Err(anyhow::anyhow!("status {s:?}; Pods {}", describe(&pods)))
                    }
                };
                let s = monitor
                    .eventually(
                        format!("{expected_updated} of 4 Pods updated"),
                        TIMEOUT,
                        check,
                    )
                    .await?;
                ensure!(
                    same_revision(&s.current_revision, &rev1)
                        && !same_revision(&s.update_revision, &rev1),
                    "revisions while partitioned: {s:?}"
                );
                // And no further.
                holds("the partition", HOLD, || async {
                    monitor.check()?;
                    Ok(check().await.is_ok())
                })
                .await?;
                monitor.finish().await?;
                anyhow::Ok(())
            }
        };
        set_image(&ns, "part", IMAGE_B).await?;
        step(1, 3).await?;
        merge_patch(
            &ns,
            "cloneset",
            "part",
            &json!({"spec": {"updateStrategy": {"rollingUpdate": {"partition": 2}}}}),
        )
        .await?;
        step(2, 2).await?;

        let monitor = start_monitor(&ns, "part", 4, 1, 0).await?;
        merge_patch(
            &ns,
            "cloneset",
            "part",
            &json!({"spec": {"updateStrategy": {"rollingUpdate": {"partition": 0}}}}),
        )
        .await?;
        let (cs, after) = monitor_converged(&monitor, &ns, "part", 4, TIMEOUT).await?;
        monitor.finish().await?;
        ensure!(
            status(&cs).expected_updated_replicas == 4,
            "{:?}",
            status(&cs)
        );
        ensure_updated_in_place(&before, &after, IMAGE_B, 1)?;
        Ok(())
    })
    .await
}

// ------------------------------------------------------------------------------------------------------
// 4. maxUnavailable and maxSurge.

#[tokio::test]
async fn recreate_rollout_respects_max_unavailable_and_max_surge() -> anyhow::Result<()> {
    let ns = managed_namespace("cs-surge").await?;
    ns.run(async {
        let spec = json!({"updateStrategy": {"rollingUpdate": {
            "podUpdatePolicy": "ReCreate", "maxUnavailable": 2, "maxSurge": 1
        }}});
        apply(&ns, &cloneset("surge", 6, IMAGE_A, spec)).await?;
        let (_, before) = wait_converged(&ns, "surge", 6, TIMEOUT).await?;
        let monitor = start_monitor(&ns, "surge", 6, 2, 1).await?;
        set_image(&ns, "surge", IMAGE_B).await?;
        let (_, after) =
            monitor_converged(&monitor, &ns, "surge", 6, Duration::from_secs(90)).await?;
        let stats = monitor.finish().await?;
        eprintln!("ReCreate 6 Pods maxUnavailable 2 maxSurge 1: {stats:?}");
        let old: BTreeSet<String> = before.iter().map(name).collect();
        let new: BTreeSet<String> = after.iter().map(name).collect();
        ensure!(
            old.is_disjoint(&new),
            "ReCreate kept Pods: {old:?} → {new:?}"
        );
        for pod in &after {
            ensure!(
                runs_image(pod, IMAGE_B) && restarts(pod) == 0,
                "{}",
                describe(std::slice::from_ref(pod))
            );
        }
        wait_events(&ns, "surge", "SuccessfulUpdatePodReCreate", &[]).await?;
        Ok(())
    })
    .await
}

#[tokio::test]
async fn in_place_rollout_respects_max_unavailable_and_max_surge() -> anyhow::Result<()> {
    let ns = managed_namespace("cs-inplace-surge").await?;
    ns.run(async {
        let spec = merged(
            in_place(json!(2), 1),
            json!({"updateStrategy": {"rollingUpdate": {"maxSurge": 1}}}),
        );
        apply(&ns, &cloneset("ipsurge", 6, IMAGE_A, spec)).await?;
        let (_, before) = wait_converged(&ns, "ipsurge", 6, TIMEOUT).await?;
        let monitor = start_monitor(&ns, "ipsurge", 6, 2, 1).await?;
        set_image(&ns, "ipsurge", IMAGE_B).await?;
        let (_, after) =
            monitor_converged(&monitor, &ns, "ipsurge", 6, Duration::from_secs(90)).await?;
        let stats = monitor.finish().await?;
        eprintln!("InPlaceIfPossible 6 Pods maxUnavailable 2 maxSurge 1: {stats:?}");
        ensure!(
            stats.max_unavailable_seen >= 1,
            "no Pod was ever taken out of service: {stats:?}"
        );
        // Upstream may add one surge Pod at the new revision and remove one Pod at the end; every
        // original Pod that survives was updated in place.
        let before_ids = identities(&before);
        let survivors: Vec<&Pod> = after
            .iter()
            .filter(|p| {
                before_ids
                    .get(&name(p))
                    .is_some_and(|(u, _, _)| *u == uid(p))
            })
            .collect();
        ensure!(
            survivors.len() >= 5,
            "only {} of 6 Pods updated in place: {:?} → {}",
            survivors.len(),
            names(&before),
            describe(&after)
        );
        for pod in survivors {
            let (_, node, ip) = &before_ids[&name(pod)];
            ensure!(
                node_name(pod) == *node && pod_ip(pod) == *ip && restarts(pod) == 1,
                "{} not updated in place",
                describe(std::slice::from_ref(pod))
            );
        }
        for pod in &after {
            ensure!(runs_image(pod, IMAGE_B));
        }
        Ok(())
    })
    .await
}

// ------------------------------------------------------------------------------------------------------
// 5. Update policies.

#[tokio::test]
async fn in_place_only_refuses_a_change_that_cannot_be_done_in_place() -> anyhow::Result<()> {
    let ns = managed_namespace("cs-inplaceonly").await?;
    ns.run(async {
        let spec = json!({"updateStrategy": {"rollingUpdate": {
            "podUpdatePolicy": "InPlaceOnly", "maxUnavailable": 1,
            "inPlaceUpdateStrategy": {"gracePeriodSeconds": 0}
        }}});
        apply(&ns, &cloneset("only", 2, IMAGE_A, spec)).await?;
        let (cs, before) = wait_converged(&ns, "only", 2, TIMEOUT).await?;
        let generation = cs.metadata.generation;

        let refused = merge_patch(
            &ns,
            "cloneset",
            "only",
            &json!({"spec": {"template": {"spec": {"containers": [
                {"name": CONTAINER, "image": IMAGE_A, "env": [{"name": "FOO", "value": "bar"}]}
            ]}}}}),
        )
        .await;
        let message = match refused {
            Ok(out) => bail!("an env change was accepted under InPlaceOnly: {out}"),
            Err(error) => format!("{error:#}"),
        };
        ensure!(
            message.contains("spec.template")
                && message.contains("InPlaceOnly")
                && message.contains("env"),
            "the denial does not name the field and the policy: {message}"
        );
        let cs = get_cloneset(&ns, "only").await?;
        ensure!(cs.metadata.generation == generation, "the CloneSet changed");
        let pod_api: Api<Pod> = ns.api();
        holds("no Pod touched", HOLD, || async {
            let pods = pods(&pod_api, "app=only").await?;
            Ok(uids(&pods) == uids(&before)
                && pods.iter().all(|p| !terminating(p) && restarts(p) == 0))
        })
        .await?;

        // An image change is what InPlaceOnly is for.
        let monitor = start_monitor(&ns, "only", 2, 1, 0).await?;
        set_image(&ns, "only", IMAGE_B).await?;
        let (_, after) = monitor_converged(&monitor, &ns, "only", 2, TIMEOUT).await?;
        monitor.finish().await?;
        ensure_updated_in_place(&before, &after, IMAGE_B, 1)?;
        Ok(())
    })
    .await
}

#[tokio::test]
async fn in_place_if_possible_recreates_for_an_env_change() -> anyhow::Result<()> {
    let ns = managed_namespace("cs-envchange").await?;
    ns.run(async {
        apply(
            &ns,
            &cloneset("envchange", 3, IMAGE_A, in_place(json!(1), 0)),
        )
        .await?;
        let (_, before) = wait_converged(&ns, "envchange", 3, TIMEOUT).await?;
        // A recreated Pod's replacement is created once the old one is terminating: no surge.
        let monitor = start_monitor(&ns, "envchange", 3, 1, 0).await?;
        merge_patch(
            &ns,
            "cloneset",
            "envchange",
            &json!({"spec": {"template": {"spec": {"containers": [
                {"name": CONTAINER, "image": IMAGE_A, "env": [{"name": "FOO", "value": "bar"}]}
            ]}}}}),
        )
        .await?;
        let (_, after) = monitor_converged(&monitor, &ns, "envchange", 3, TIMEOUT).await?;
        monitor.finish().await?;
        let old: BTreeSet<String> = before.iter().map(name).collect();
        let new: BTreeSet<String> = after.iter().map(name).collect();
        ensure!(
            old.is_disjoint(&new),
            "Pods kept across an env change: {old:?} → {new:?}"
        );
        for pod in &after {
            let env = pod
                .spec
                .as_ref()
                .and_then(|s| s.containers.first())
                .and_then(|c| c.env.clone())
                .unwrap_or_default();
            ensure!(
                env.iter()
                    .any(|e| e.name == "FOO" && e.value.as_deref() == Some("bar")),
                "{}: env {env:?}",
                name(pod)
            );
        }
        Ok(())
    })
    .await
}

#[tokio::test]
async fn on_delete_updates_only_deleted_pods() -> anyhow::Result<()> {
    let ns = managed_namespace("cs-ondelete").await?;
    ns.run(async {
        apply(
            &ns,
            &cloneset(
                "ondelete",
                3,
                IMAGE_A,
                json!({"updateStrategy": {"type": "OnDelete"}}),
            ),
        )
        .await?;
        let (_, before) = wait_converged(&ns, "ondelete", 3, TIMEOUT).await?;
        let rev1 = revision(&before[0]).unwrap_or_default().to_string();
        set_image(&ns, "ondelete", IMAGE_B).await?;
        let cs = observed(&ns, "ondelete").await?;
        let rev2 = status(&cs).update_revision;
        ensure!(
            !same_revision(&rev1, &rev2),
            "no new revision: {:?}",
            status(&cs)
        );
        let pod_api: Api<Pod> = ns.api();
        holds("OnDelete updates nothing by itself", HOLD, || async {
            let pods = pods(&pod_api, "app=ondelete").await?;
            Ok(uids(&pods) == uids(&before)
                && pods.iter().all(|p| {
                    !terminating(p)
                        && spec_image(p).as_deref() == Some(IMAGE_A)
                        && revision(p) == Some(rev1.as_str())
                }))
        })
        .await?;

        let victim = name(&before[1]);
        ns.kubectl(&["delete", "pod", &victim, "--wait=false"])
            .await?;
        let after = wait_pods(
            &ns,
            "ondelete",
            "a replacement at the new revision",
            |pods| {
                pods.len() == 3
                    && pods.iter().all(is_ready)
                    && pods.iter().all(|p| name(p) != victim)
            },
        )
        .await?;
        for pod in &after {
            let was = before.iter().find(|b| name(b) == name(pod));
            match was {
                Some(old) => ensure!(
                    uid(old) == uid(pod)
                        && spec_image(pod).as_deref() == Some(IMAGE_A)
                        && revision(pod) == Some(rev1.as_str()),
                    "an untouched Pod changed: {}",
                    describe(std::slice::from_ref(pod))
                ),
                None => ensure!(
                    runs_image(pod, IMAGE_B)
                        && revision(pod).is_some_and(|r| same_revision(r, &rev2)),
                    "the replacement is not at the new revision: {}",
                    describe(std::slice::from_ref(pod))
                ),
            }
        }
        until("status.updatedReplicas 1", TIMEOUT, || async {
            let s = status(&get_cloneset(&ns, "ondelete").await?);
            Ok(s.updated_replicas == 1 && s.updated_ready_replicas == 1 && s.ready_replicas == 3)
        })
        .await?;
        Ok(())
    })
    .await
}

// ------------------------------------------------------------------------------------------------------
// 6. Priority and scatter.

#[tokio::test]
async fn weight_priority_orders_the_update() -> anyhow::Result<()> {
    let ns = managed_namespace("cs-priority").await?;
    ns.run(async {
        let spec = merged(
            in_place(json!(1), 0),
            json!({"updateStrategy": {"rollingUpdate": {"priorityStrategy": {"weightPriority": [
                {"weight": 100, "matchSelector": {"matchLabels": {"prio": "high"}}},
                {"weight": 50, "matchSelector": {"matchLabels": {"prio": "mid"}}}
            ]}}}}),
        );
        apply(&ns, &cloneset("prio", 4, IMAGE_A, spec)).await?;
        let (_, before) = wait_converged(&ns, "prio", 4, TIMEOUT).await?;
        let rev1 = revision(&before[0]).unwrap_or_default().to_string();
        let high = name(&before[2]);
        let mid = name(&before[0]);
        ns.kubectl(&["label", "pod", &high, "prio=high"]).await?;
        ns.kubectl(&["label", "pod", &mid, "prio=mid"]).await?;

        let order = RevisionOrder::start(&ns, "app=prio", &rev1).await?;
        let monitor = start_monitor(&ns, "prio", 4, 1, 0).await?;
        set_image(&ns, "prio", IMAGE_B).await?;
        let (_, after) = monitor_converged(&monitor, &ns, "prio", 4, TIMEOUT).await?;
        monitor.finish().await?;
        ensure_updated_in_place(&before, &after, IMAGE_B, 1)?;
        let order = order.order();
        eprintln!("update order: {order:?} (high {high}, mid {mid})");
        ensure!(order.len() == 4, "order {order:?}");
        ensure!(
            order[0] == high && order[1] == mid,
            "weight 100 then weight 50 first: {order:?} (high {high}, mid {mid})"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn scatter_spreads_matching_pods_over_the_update() -> anyhow::Result<()> {
    let ns = managed_namespace("cs-scatter").await?;
    ns.run(async {
        // The four group=a Pods have the highest priority, so without scatter they would update first;
        // scatter interleaves them with the others.
        let spec = merged(
            in_place(json!(1), 0),
            json!({"updateStrategy": {"rollingUpdate": {
                "priorityStrategy": {"weightPriority": [
                    {"weight": 100, "matchSelector": {"matchLabels": {"group": "a"}}}
                ]},
                "scatterStrategy": [{"key": "group", "value": "a"}]
            }}}),
        );
        apply(&ns, &cloneset("scatter", 8, IMAGE_A, spec)).await?;
        let (_, before) = wait_converged(&ns, "scatter", 8, Duration::from_secs(90)).await?;
        let rev1 = revision(&before[0]).unwrap_or_default().to_string();
        let group_a: BTreeSet<String> = before.iter().take(4).map(name).collect();
        for pod in &group_a {
            ns.kubectl(&["label", "pod", pod, "group=a"]).await?;
        }
        let order = RevisionOrder::start(&ns, "app=scatter", &rev1).await?;
        let monitor = start_monitor(&ns, "scatter", 8, 1, 0).await?;
        set_image(&ns, "scatter", IMAGE_B).await?;
        let (_, after) =
            monitor_converged(&monitor, &ns, "scatter", 8, Duration::from_secs(90)).await?;
        monitor.finish().await?;
        ensure_updated_in_place(&before, &after, IMAGE_B, 1)?;
        let order = order.order();
        let sequence: String = order
            .iter()
            .map(|n| if group_a.contains(n) { 'a' } else { 'b' })
            .collect();
        eprintln!("scatter update order: {order:?} = {sequence}");
        ensure!(order.len() == 8, "order {order:?}");
        // Upstream's scatter sort, re-applied before each update over the Pods still waiting
        // (priority first, then the last matching Pod moved to the end and the rest interleaved by
        // density): a b b a b a a b. Priority alone would give a a a a b b b b.
        ensure!(
            sequence == "abbabaab",
            "scatter order {sequence} (a = group=a), upstream gives abbabaab: {order:?}"
        );
        Ok(())
    })
    .await
}

// ------------------------------------------------------------------------------------------------------
// 7. Paused and rollback.

#[tokio::test]
async fn paused_stops_updates_but_not_scaling() -> anyhow::Result<()> {
    let ns = managed_namespace("cs-paused").await?;
    ns.run(async {
        apply(&ns, &cloneset("paused", 3, IMAGE_A, in_place(json!(1), 0))).await?;
        let (_, before) = wait_converged(&ns, "paused", 3, TIMEOUT).await?;
        let rev1 = revision(&before[0]).unwrap_or_default().to_string();
        merge_patch(
            &ns,
            "cloneset",
            "paused",
            &json!({"spec": {
                "updateStrategy": {"rollingUpdate": {"paused": true}},
                "template": {"spec": {"containers": [{"name": CONTAINER, "image": IMAGE_B}]}}
            }}),
        )
        .await?;
        let cs = observed(&ns, "paused").await?;
        let rev2 = status(&cs).update_revision;
        ensure!(!same_revision(&rev1, &rev2), "no new revision");
        let pod_api: Api<Pod> = ns.api();
        let untouched = |pods: &[Pod]| {
            before.iter().all(|b| {
                pods.iter().any(|p| {
                    uid(p) == uid(b)
                        && !terminating(p)
                        && is_ready(p)
                        && spec_image(p).as_deref() == Some(IMAGE_A)
                        && revision(p) == Some(rev1.as_str())
                })
            })
        };
        holds("paused: no Pod updated", HOLD, || async {
            Ok(untouched(&pods(&pod_api, "app=paused").await?))
        })
        .await?;

        ns.kubectl(&["scale", "cloneset", "paused", "--replicas=5"])
            .await?;
        let five = wait_pods(&ns, "paused", "5 Ready Pods while paused", |pods| {
            pods.len() == 5 && pods.iter().all(is_ready)
        })
        .await?;
        ensure!(
            untouched(&five),
            "paused CloneSet updated Pods: {}",
            describe(&five)
        );
        for pod in five.iter().filter(|p| !uids(&before).contains(&uid(p))) {
            ensure!(
                revision(pod).is_some_and(|r| same_revision(r, &rev2)) && runs_image(pod, IMAGE_B),
                "a Pod created while paused is not at the update revision: {}",
                describe(std::slice::from_ref(pod))
            );
        }
        until("status while paused", TIMEOUT, || async {
            let s = status(&get_cloneset(&ns, "paused").await?);
            Ok(s.replicas == 5 && s.updated_replicas == 2 && s.ready_replicas == 5)
        })
        .await?;

        let monitor = start_monitor(&ns, "paused", 5, 1, 0).await?;
        merge_patch(
            &ns,
            "cloneset",
            "paused",
            &json!({"spec": {"updateStrategy": {"rollingUpdate": {"paused": false}}}}),
        )
        .await?;
        let (_, after) = monitor_converged(&monitor, &ns, "paused", 5, TIMEOUT).await?;
        monitor.finish().await?;
        let originals: Vec<Pod> = after
            .iter()
            .filter(|p| uids(&before).contains(&uid(p)))
            .cloned()
            .collect();
        ensure_updated_in_place(&before, &originals, IMAGE_B, 1)?;
        Ok(())
    })
    .await
}

#[tokio::test]
async fn rollback_reuses_the_earlier_revision_in_place() -> anyhow::Result<()> {
    let ns = managed_namespace("cs-rollback").await?;
    ns.run(async {
        apply(
            &ns,
            &cloneset("rollback", 3, IMAGE_A, in_place(json!(1), 0)),
        )
        .await?;
        let (cs, before) = wait_converged(&ns, "rollback", 3, TIMEOUT).await?;
        let rev_a = status(&cs).update_revision;

        let monitor = start_monitor(&ns, "rollback", 3, 1, 0).await?;
        set_image(&ns, "rollback", IMAGE_B).await?;
        let (cs, at_b) = monitor_converged(&monitor, &ns, "rollback", 3, TIMEOUT).await?;
        monitor.finish().await?;
        let rev_b = status(&cs).update_revision;
        ensure_updated_in_place(&before, &at_b, IMAGE_B, 1)?;
        let history = revisions(&ns).await?;
        ensure!(
            history.len() == 2
                && history.get(&rev_a) == Some(&1)
                && history.get(&rev_b) == Some(&2),
            "ControllerRevisions after one update: {history:?}"
        );

        let monitor = start_monitor(&ns, "rollback", 3, 1, 0).await?;
        set_image(&ns, "rollback", IMAGE_A).await?;
        let (cs, back) = monitor_converged(&monitor, &ns, "rollback", 3, TIMEOUT).await?;
        monitor.finish().await?;
        ensure!(
            status(&cs).update_revision == rev_a,
            "rollback to {} instead of the earlier revision {rev_a}",
            status(&cs).update_revision
        );
        ensure_updated_in_place(&before, &back, IMAGE_A, 2)?;
        let history = revisions(&ns).await?;
        ensure!(
            history.keys().cloned().collect::<BTreeSet<_>>()
                == BTreeSet::from([rev_a.clone(), rev_b.clone()]),
            "a new ControllerRevision was created for the rollback: {history:?}"
        );
        ensure!(
            history.get(&rev_a) == Some(&3),
            "the re-used revision is renumbered 3 (upstream): {history:?}"
        );
        Ok(())
    })
    .await
}

// ------------------------------------------------------------------------------------------------------
// 8. Lifecycle hooks.

#[tokio::test]
async fn pre_delete_hook_holds_a_pod_until_its_label_goes() -> anyhow::Result<()> {
    let ns = managed_namespace("cs-predelete").await?;
    ns.run(async {
        // markPodNotReady: the Pods carry the KruisePodReady gate (set True once they are Normal),
        // and the held Pod leaves endpoints (Ready False) while it waits in PreparingDelete.
        let spec = json!({"lifecycle": {"preDelete": {
            "labelsHandler": {"example.io/block-deleting": "true"}, "markPodNotReady": true
        }}});
        apply(&ns, &cloneset("predelete", 3, IMAGE_A, spec)).await?;
        let (_, before) = wait_converged(&ns, "predelete", 3, TIMEOUT).await?;
        let victim = name(&before[0]);
        ns.kubectl(&["label", "pod", &victim, "example.io/block-deleting=true"])
            .await?;
        ns.kubectl(&["annotate", "pod", &victim, &format!("{DELETION_COST}=-100")])
            .await?;
        ns.kubectl(&["scale", "cloneset", "predelete", "--replicas=2"])
            .await?;
        let preparing =
            |pod: &Pod| !terminating(pod) && lifecycle_state(pod) == Some("PreparingDelete");
        eventually(
            format!("{victim} PreparingDelete and not Ready"),
            TIMEOUT,
            || async {
                let pod = get_pod(&ns, &victim).await?;
                let kruise_ready = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .and_then(|c| c.iter().find(|c| c.type_ == "KruisePodReady"))
                    .map(|c| c.status.clone());
                Ok(
                    (preparing(&pod)
                        && !is_ready(&pod)
                        && kruise_ready.as_deref() == Some("False"))
                    .then_some(()),
                )
            },
        )
        .await?;
        eventually(format!("{victim} PreparingDelete"), TIMEOUT, || async {
            let pod = get_pod(&ns, &victim).await?;
            Ok(preparing(&pod).then_some(()))
        })
        .await?;
        let pod_api: Api<Pod> = ns.api();
        holds("the preDelete hook", HOLD, || async {
            let pods = pods(&pod_api, "app=predelete").await?;
            Ok(uids(&pods) == uids(&before)
                && pods.iter().all(|p| {
                    if name(p) == victim {
                        preparing(p)
                    } else {
                        !terminating(p)
                    }
                }))
        })
        .await?;
        let s = status(&get_cloneset(&ns, "predelete").await?);
        ensure!(
            s.replicas == 3 && s.available_replicas == 2,
            "a PreparingDelete Pod is counted in replicas but not available: {s:?}"
        );

        ns.kubectl(&["label", "pod", &victim, "example.io/block-deleting-"])
            .await?;
        let (_, after) = wait_converged(&ns, "predelete", 2, TIMEOUT).await?;
        let expected: BTreeSet<String> = before[1..].iter().map(uid).collect();
        ensure!(uids(&after) == expected, "kept {}", describe(&after));
        Ok(())
    })
    .await
}

#[tokio::test]
async fn in_place_update_hook_holds_a_pod_in_preparing_update() -> anyhow::Result<()> {
    let ns = managed_namespace("cs-updatehook").await?;
    ns.run(async {
        const HOOK: &str = "example.io/block-updating";
        let spec = merged(
            in_place(json!(2), 0),
            json!({
                "lifecycle": {"inPlaceUpdate": {"labelsHandler": {HOOK: "true"}}},
                "template": {"metadata": {"labels": {HOOK: "true"}}}
            }),
        );
        apply(&ns, &cloneset("hooked", 2, IMAGE_A, spec)).await?;
        let (_, before) = wait_converged(&ns, "hooked", 2, TIMEOUT).await?;
        let monitor = start_monitor(&ns, "hooked", 2, 2, 0).await?;
        set_image(&ns, "hooked", IMAGE_B).await?;
        let pod_api: Api<Pod> = ns.api();
        let held = |pod: &Pod| {
            lifecycle_state(pod) == Some("PreparingUpdate")
                && spec_image(pod).as_deref() == Some(IMAGE_A)
                && restarts(pod) == 0
        };
        monitor
            .until("both Pods PreparingUpdate", TIMEOUT, || async {
                let pods = active_pods(&pod_api, "app=hooked").await?;
                Ok(pods.len() == 2 && pods.iter().all(held))
            })
            .await?;
        holds("the inPlaceUpdate hook", HOLD, || async {
            monitor.check()?;
            let pods = active_pods(&pod_api, "app=hooked").await?;
            Ok(uids(&pods) == uids(&before) && pods.iter().all(held))
        })
        .await?;

        let first = name(&before[0]);
        let second = name(&before[1]);
        ns.kubectl(&["label", "pod", &first, &format!("{HOOK}-")])
            .await?;
        monitor
            .until(format!("{first} updated in place"), TIMEOUT, || async {
                let pod = get_pod(&ns, &first).await?;
                Ok(runs_image(&pod, IMAGE_B)
                    && is_ready(&pod)
                    && lifecycle_state(&pod) == Some("Updated"))
            })
            .await?;
        ensure!(
            held(&get_pod(&ns, &second).await?),
            "{second} was updated while its hook held it"
        );
        // Putting the hook label back lets the updated Pod return to Normal.
        ns.kubectl(&["label", "pod", &first, &format!("{HOOK}=true")])
            .await?;
        monitor
            .until(format!("{first} Normal"), TIMEOUT, || async {
                Ok(lifecycle_state(&get_pod(&ns, &first).await?) == Some("Normal"))
            })
            .await?;
        ns.kubectl(&["label", "pod", &second, &format!("{HOOK}-")])
            .await?;
        monitor
            .until(format!("{second} Updated"), TIMEOUT, || async {
                let pod = get_pod(&ns, &second).await?;
                Ok(runs_image(&pod, IMAGE_B) && lifecycle_state(&pod) == Some("Updated"))
            })
            .await?;
        ns.kubectl(&["label", "pod", &second, &format!("{HOOK}=true")])
            .await?;
        let (_, after) = monitor_converged(&monitor, &ns, "hooked", 2, TIMEOUT).await?;
        monitor.finish().await?;
        ensure_updated_in_place(&before, &after, IMAGE_B, 1)?;
        until("both Pods Normal", TIMEOUT, || async {
            let pods = active_pods(&pod_api, "app=hooked").await?;
            Ok(pods.iter().all(|p| lifecycle_state(p) == Some("Normal")))
        })
        .await?;
        Ok(())
    })
    .await
}

// ------------------------------------------------------------------------------------------------------
// 9. A failing image.

#[tokio::test]
async fn failing_image_stops_the_rollout_and_exceeds_the_progress_deadline() -> anyhow::Result<()> {
    let ns = managed_namespace("cs-failing").await?;
    ns.run(async {
        let spec = merged(
            in_place(json!(1), 0),
            json!({"progressDeadlineSeconds": 10}),
        );
        apply(&ns, &cloneset("failing", 4, IMAGE_A, spec)).await?;
        let (cs, before) = wait_converged(&ns, "failing", 4, TIMEOUT).await?;
        let rev_a = status(&cs).update_revision;
        let progressing = |cs: &CloneSet| {
            condition(cs, "Progressing").map(|c| (c.status.clone(), c.reason.clone()))
        };
        until("Progressing True CloneSetAvailable", TIMEOUT, || async {
            let cs = get_cloneset(&ns, "failing").await?;
            Ok(progressing(&cs) == Some(("True".into(), "CloneSetAvailable".into())))
        })
        .await?;

        let monitor = start_monitor(&ns, "failing", 4, 1, 0).await?;
        set_image(&ns, "failing", "nginx:1.19-never-ready").await?;
        let cs = monitor
            .eventually(
                "Progressing False ProgressDeadlineExceeded",
                Duration::from_secs(45),
                || async {
                    let cs = get_cloneset(&ns, "failing").await?;
                    Ok((progressing(&cs)
                        == Some(("False".into(), "ProgressDeadlineExceeded".into())))
                    .then_some(cs))
                },
            )
            .await?;
        let s = status(&cs);
        ensure!(
            s.updated_replicas == 1 && s.updated_ready_replicas == 0 && s.ready_replicas == 3,
            "the rollout must stop at the first bad Pod: {s:?}"
        );
        let pod_api: Api<Pod> = ns.api();
        holds("the rollout stopped", HOLD, || async {
            monitor.check()?;
            let pods = active_pods(&pod_api, "app=failing").await?;
            let bad = pods
                .iter()
                .filter(|p| spec_image(p).as_deref() != Some(IMAGE_A))
                .count();
            Ok(pods.len() == 4 && bad == 1)
        })
        .await?;
        let kubectl_view = ns
            .kubectl(&[
                "get",
                "cloneset",
                "failing",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Progressing\")].reason}",
            ])
            .await?;
        ensure!(
            kubectl_view.trim() == "ProgressDeadlineExceeded",
            "{kubectl_view}"
        );

        // Fixing the image back recovers every Pod, in place.
        set_image(&ns, "failing", IMAGE_A).await?;
        let (cs, after) = monitor_converged(&monitor, &ns, "failing", 4, TIMEOUT).await?;
        monitor.finish().await?;
        ensure!(status(&cs).update_revision == rev_a, "{:?}", status(&cs));
        ensure!(
            uids(&after) == uids(&before),
            "Pods were recreated: {}",
            describe(&after)
        );
        until(
            "Progressing True CloneSetAvailable again",
            TIMEOUT,
            || async {
                let cs = get_cloneset(&ns, "failing").await?;
                Ok(progressing(&cs) == Some(("True".into(), "CloneSetAvailable".into())))
            },
        )
        .await?;
        Ok(())
    })
    .await
}

// ------------------------------------------------------------------------------------------------------
// 10. In-place resize.

#[tokio::test]
async fn resources_change_resizes_pods_in_place() -> anyhow::Result<()> {
    let ns = managed_namespace("cs-resize").await?;
    ns.run(async {
        let container = |cpu_request: &str, cpu_limit: &str| {
            json!({"name": CONTAINER, "image": IMAGE_A, "resources": {
                "requests": {"cpu": cpu_request, "memory": "64Mi"},
                "limits": {"cpu": cpu_limit, "memory": "128Mi"}
            }})
        };
        let spec = merged(
            in_place(json!(1), 0),
            json!({"template": {"spec": {"containers": [container("100m", "200m")]}}}),
        );
        apply(&ns, &cloneset("resize", 2, IMAGE_A, spec)).await?;
        let (_, before) = wait_converged(&ns, "resize", 2, TIMEOUT).await?;
        let monitor = start_monitor(&ns, "resize", 2, 1, 0).await?;
        merge_patch(
            &ns,
            "cloneset",
            "resize",
            &json!({"spec": {"template": {"spec": {"containers": [container("150m", "300m")]}}}}),
        )
        .await?;
        let (_, after) = monitor_converged(&monitor, &ns, "resize", 2, TIMEOUT).await?;
        monitor.finish().await?;
        ensure_updated_in_place(&before, &after, IMAGE_A, 0)?;
        let quantity =
            |map: Option<
                &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
            >,
             key: &str| { map.and_then(|m| m.get(key)).map(|q| q.0.clone()) };
        for pod in &after {
            let pod_name = name(pod);
            let spec = pod
                .spec
                .as_ref()
                .and_then(|s| s.containers.first())
                .and_then(|c| c.resources.clone())
                .unwrap_or_default();
            ensure!(
                quantity(spec.requests.as_ref(), "cpu").as_deref() == Some("150m")
                    && quantity(spec.limits.as_ref(), "cpu").as_deref() == Some("300m")
                    && quantity(spec.requests.as_ref(), "memory").as_deref() == Some("64Mi"),
                "{pod_name}: spec resources {spec:?}"
            );
            let reported = container_status(pod, CONTAINER)
                .and_then(|s| s.resources)
                .unwrap_or_default();
            ensure!(
                quantity(reported.requests.as_ref(), "cpu").as_deref() == Some("150m")
                    && quantity(reported.limits.as_ref(), "cpu").as_deref() == Some("300m"),
                "{pod_name}: status resources {reported:?}"
            );
            let qos = pod.status.as_ref().and_then(|s| s.qos_class.clone());
            ensure!(
                qos.as_deref() == Some("Burstable"),
                "{pod_name}: QoS {qos:?}"
            );
            let resized = pod
                .metadata
                .managed_fields
                .iter()
                .flatten()
                .any(|m| m.subresource.as_deref() == Some("resize"));
            ensure!(
                resized,
                "{pod_name}: no write through pods/resize in managedFields {:?}",
                pod.metadata
                    .managed_fields
                    .iter()
                    .flatten()
                    .map(|m| (m.manager.clone(), m.subresource.clone()))
                    .collect::<Vec<_>>()
            );
        }
        Ok(())
    })
    .await
}

/// A label read by a downward-API env var is removed, under InPlaceOnly: as OpenKruise does, the
/// label leaves the Pods in place and no container restarts (kruise-daemon restarts a container for
/// a changed value, tests/containermeta.rs; a removed key is plain metadata).
#[tokio::test]
async fn removed_env_label_leaves_the_pods_in_place() -> anyhow::Result<()> {
    let ns = managed_namespace("cs-envrm").await?;
    ns.run(async {
        let spec = json!({"updateStrategy": {"rollingUpdate": {
            "podUpdatePolicy": "InPlaceOnly", "maxUnavailable": 2,
            "inPlaceUpdateStrategy": {"gracePeriodSeconds": 0}
        }}});
        let mut doc = cloneset("envrm", 2, IMAGE_A, spec);
        doc["spec"]["template"]["metadata"]["labels"]["tier"] = json!("gold");
        doc["spec"]["template"]["spec"]["containers"][0]["env"] = json!([{
            "name": "TIER",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['tier']"}}
        }]);
        apply(&ns, &doc).await?;
        let (_, before) = wait_converged(&ns, "envrm", 2, TIMEOUT).await?;
        merge_patch(
            &ns,
            "cloneset",
            "envrm",
            &json!({"spec": {"template": {"metadata": {"labels": {"tier": null}}}}}),
        )
        .await?;
        let pod_api: Api<Pod> = ns.api();
        let after = eventually("the label gone from both Pods", TIMEOUT, || async {
            let pods = pods(&pod_api, "app=envrm").await?;
            Ok(
                (pods.len() == 2 && pods.iter().all(|p| label(p, "tier").is_none()))
                    .then_some(pods),
            )
        })
        .await?;
        ensure!(
            uids(&after) == uids(&before),
            "the Pods must be kept: {}",
            describe(&after)
        );
        ensure!(
            after.iter().all(|p| restarts(p) == 0),
            "{}",
            describe(&after)
        );
        wait_converged(&ns, "envrm", 2, TIMEOUT).await?;
        Ok(())
    })
    .await
}

/// One observed version of a Pod during a prioritized in-place update: (app image in the spec,
/// proxy image in the status, proxy Ready).
type BatchView = (String, String, bool);

/// Container launch priority in an in-place update (`KRUISE_CONTAINER_PRIORITY`): the proxy (priority
/// 10, a 3 s postStart) is updated first; the app (priority 1) gets its new image only once the proxy
/// runs its new image and is Ready again, so it restarts after the proxy's postStart. A watch records
/// every Pod version; UIDs are kept and each container restarts once.
#[tokio::test]
async fn containers_update_in_place_in_launch_priority_order() -> anyhow::Result<()> {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let ns = managed_namespace("cs-priority").await?;
    ns.run(async {
        let containers = |proxy: &str, app: &str| {
            json!([
                {"name": "proxy", "image": proxy,
                 "env": [{"name": "KRUISE_CONTAINER_PRIORITY", "value": "10"}],
                 "lifecycle": {"postStart": {"exec": {"command": ["sleep", "3"]}}}},
                {"name": "app", "image": app,
                 "env": [{"name": "KRUISE_CONTAINER_PRIORITY", "value": "1"}]}
            ])
        };
        let spec = json!({
            "template": {"spec": {
                "containers": containers("envoy:v1", "app:v1"),
                "readinessGates": [{"conditionType": "InPlaceUpdateReady"}]
            }},
            "updateStrategy": {"rollingUpdate": {"podUpdatePolicy": "InPlaceIfPossible", "maxUnavailable": 2}}
        });
        apply(&ns, &cloneset("prio", 2, "unused", spec)).await?;
        let (_, before) = wait_converged(&ns, "prio", 2, Duration::from_secs(120)).await?;
        let uids: BTreeMap<String, String> = before.iter().map(|p| (name(p), uid(p))).collect();

        let pods: Api<Pod> = ns.api();
        let seen: std::sync::Arc<std::sync::Mutex<BTreeMap<String, Vec<BatchView>>>> =
            std::sync::Arc::default();
        let recorder = {
            let seen = seen.clone();
            let stream = watcher(pods.clone(), watcher::Config::default().labels("app=prio"))
                .applied_objects();
            tokio::spawn(async move {
                let mut stream = std::pin::pin!(stream);
                while let Some(Ok(pod)) = stream.next().await {
                    let app_spec = pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.containers.iter().find(|c| c.name == "app"))
                        .and_then(|c| c.image.clone())
                        .unwrap_or_default();
                    let proxy = container_status(&pod, "proxy");
                    let row = (
                        app_spec,
                        proxy.as_ref().map(|s| s.image.clone()).unwrap_or_default(),
                        proxy.is_some_and(|s| s.ready),
                    );
                    if let Ok(mut seen) = seen.lock() {
                        seen.entry(name(&pod)).or_default().push(row);
                    }
                }
            })
        };
        eventually("the watch has listed the Pods", Duration::from_secs(30), || {
            let seen = seen.clone();
            async move { Ok(seen.lock().is_ok_and(|s| s.len() == 2).then_some(())) }
        })
        .await?;
        merge_patch(
            &ns,
            "clonesets.apps.kruise.io",
            "prio",
            &json!({"spec": {"template": {"spec": {"containers": containers("envoy:v2", "app:v2")}}}}),
        )
        .await?;
        let (_, after) = wait_converged(&ns, "prio", 2, Duration::from_secs(120)).await?;
        recorder.abort();
        let seen = seen.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.clone();
        for pod in &after {
            let pod_name = name(pod);
            ensure!(uids.get(&pod_name) == Some(&uid(pod)), "{pod_name} was recreated");
            for c in ["proxy", "app"] {
                let status = container_status(pod, c).with_context(|| format!("{pod_name}/{c}"))?;
                ensure!(status.restart_count == 1, "{pod_name}/{c} restarts {}", status.restart_count);
            }
            // The first version whose spec names app:v2: the proxy already runs envoy:v2 and is Ready.
            let versions = seen.get(&pod_name).cloned().unwrap_or_default();
            let first = versions
                .iter()
                .find(|(app, ..)| app == "app:v2")
                .with_context(|| format!("{pod_name}: app:v2 never seen: {versions:?}"))?;
            ensure!(
                same_image(&first.1, "envoy:v2") && first.2,
                "{pod_name}: the app was updated before the proxy was Ready again: {versions:?}"
            );
            // And the proxy's postStart delay shows between the two restarts.
            let started = |c: &str| {
                container_status(pod, c)
                    .and_then(|s| s.state)
                    .and_then(|s| s.running)
                    .and_then(|r| r.started_at)
                    .map(|t| t.0.as_second())
                    .with_context(|| format!("{pod_name}/{c} running"))
            };
            let gap = started("app")? - started("proxy")?;
            ensure!(gap >= 2, "{pod_name}: app restarted {gap} s after the proxy, within its 3 s postStart");
        }
        Ok(())
    })
    .await
}
