//! BroadcastJob end to end (issue 13): seed 000's `download-image` as written, the example's
//! parallelism, restartLimit and failure policies on ten nodes, activeDeadlineSeconds, tainted
//! nodes, and bad input — on a real control plane with kubelet-sim.
//!
//! The shared test bed has three untainted nodes. Seven more (`bcj-0..6`) join its fleet with a
//! taint only the ten-node tests tolerate, so seed 000's job (no tolerations) still runs on exactly
//! three nodes while the others see ten; the Never test adds (and removes) a node of its own.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use anyhow::{Context, ensure};
use k8s_openapi::api::core::v1::{Pod, Taint};
use k8s_openapi::jiff::Timestamp;
use kruise_api::broadcastjob::v1beta1::BroadcastJob;
use kruise_e2e::broadcastjob_kit::*;
use kruise_e2e::cloneset_kit::{describe, label, name};
use kruise_e2e::{node_name, phase};
use kruise_testkit::{TestNamespace, eventually, fleet, managed_namespace, testbed};
use kube::api::{Api, ListParams};
use kubelet_sim::NodeSpecSim;
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(120);

/// Seed 000's BroadcastJob, exactly as the article writes it (v1alpha1).
const SEED_000: &str = r#"apiVersion: apps.kruise.io/v1alpha1
kind: BroadcastJob
metadata:
  name: download-image
spec:
  template:
    spec:
      containers:
        - name: guestbook
          image: openkruise/guestbook:v3
          command: ["echo",  "started"] # a dummy command to do nothing
      restartPolicy: Never
  completionPolicy:
    type: Always
    ttlSecondsAfterFinished: 60 # the job will be deleted after 60 seconds
"#;

/// The taint (and label) of the seven extra nodes.
const FLEET_KEY: &str = "e2e.kruise-rs.io/bcj-fleet";
/// The taint of the node the Never test adds (value: its namespace, tolerated by its job only).
const LATE_KEY: &str = "e2e.kruise-rs.io/bcj-late";
/// A taint no job tolerates.
const EVICT_KEY: &str = "e2e.kruise-rs.io/bcj-evict";
const EXTRA_NODES: u16 = 7;
const RUN_MS: &str = "sim.kruise-rs.io/run-ms";
const EXIT_CODE: &str = "sim.kruise-rs.io/exit-code";

static FLEET: tokio::sync::OnceCell<Vec<String>> = tokio::sync::OnceCell::const_new();

/// The seven extra nodes, added to the test bed's fleet (served by its kubelet-sim) by the first test
/// that asks, Ready before this returns.
async fn extra_nodes(client: &kube::Client) -> anyhow::Result<Vec<String>> {
    FLEET
        .get_or_try_init(|| async {
            let mut names = Vec::new();
            for mut node in NodeSpecSim::fleet("bcj", EXTRA_NODES, &[]) {
                node.labels.insert(FLEET_KEY.into(), "ten".into());
                node.taints = vec![private_taint(FLEET_KEY, "ten")];
                names.push(fleet::add_node(client, node).await?.name);
            }
            anyhow::Ok(names)
        })
        .await
        .cloned()
}

/// A new namespace for a test whose job runs on all ten nodes: the seven extra nodes Ready before
/// it returns.
async fn ten_node_namespace(prefix: &str) -> anyhow::Result<TestNamespace> {
    let ns = managed_namespace(prefix).await?;
    extra_nodes(&ns.client).await?;
    Ok(ns)
}

/// A NoSchedule taint `key=value`.
fn private_taint(key: &str, value: &str) -> Taint {
    Taint {
        key: key.into(),
        value: Some(value.into()),
        effect: "NoSchedule".into(),
        time_added: None,
    }
}

#[tokio::test]
async fn seed_000_download_image_runs_once_per_node_and_is_deleted_after_its_ttl()
-> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("bcj-seed").await?;
    let extra = extra_nodes(&ns.client).await?;
    ns.run(async {
        ns.apply(SEED_000).await?;
        let job = wait_job(&ns, "download-image", "completed", |j| {
            job_status(j).phase == "completed" && condition_true(j, "Complete")
        })
        .await?;
        let st = job_status(&job);
        ensure!(
            (st.desired, st.succeeded, st.failed, st.active) == (3, 3, 0, 0),
            "{st:?}"
        );
        let complete = condition(&st, "Complete")?;
        ensure!(
            complete.reason == "Complete"
                && complete.message == "Job completed, 3 pods succeeded, 0 pods failed",
            "{complete:?}"
        );
        ensure!(st.start_time.is_some(), "{st:?}");
        let completed_at = st.completion_time.clone().context("completionTime")?.0;

        // 3 Pods, one per untainted node, all Succeeded; the tainted nodes got none.
        let pods = job_pods(&ns, "download-image").await?;
        let nodes: BTreeSet<String> = pods.iter().filter_map(node_name).collect();
        let wanted: BTreeSet<String> = bed.nodes.iter().map(|n| n.name.clone()).collect();
        ensure!(
            pods.len() == 3 && nodes == wanted,
            "Pods: {}",
            describe(&pods)
        );
        ensure!(
            !nodes.iter().any(|n| extra.contains(n)),
            "a tainted node got a Pod"
        );
        let uid = job.metadata.uid.clone().unwrap_or_default();
        for pod in &pods {
            ensure!(phase(pod) == "Succeeded", "{}", describe(&pods));
            ensure!(name(pod).starts_with("download-image-"), "{}", name(pod));
            ensure!(
                label(pod, "broadcastjob-controller-uid") == Some(uid.as_str()),
                "{}",
                name(pod)
            );
            let terms = pod
                .spec
                .as_ref()
                .and_then(|s| s.affinity.as_ref())
                .and_then(|a| a.node_affinity.as_ref())
                .and_then(|a| {
                    a.required_during_scheduling_ignored_during_execution
                        .as_ref()
                })
                .map(|r| serde_json::to_value(&r.node_selector_terms))
                .transpose()?;
            ensure!(
                terms
                    == Some(json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name(pod)]}]}])),
                "{} affinity {terms:?}",
                name(pod)
            );
        }
        let created = wait_event(&ns, "download-image", "SuccessfulCreate").await?;
        ensure!(
            created
                .message
                .as_deref()
                .is_some_and(|m| m.starts_with("Created pod: download-image-")),
            "{created:?}"
        );
        wait_event(&ns, "download-image", "JobComplete").await?;
        // kubectl wait works as for a Job.
        ns.kubectl(&[
            "wait",
            "--for=condition=Complete",
            "bcj/download-image",
            "--timeout=5s",
        ])
        .await?;
        let printed = ns.kubectl(&["get", "bcj", "download-image"]).await?;
        ensure!(
            printed.contains("DESIRED") && printed.contains("SUCCEEDED"),
            "{printed}"
        );

        // Deleted by its TTL: after completionTime + 60 s and before + 90 s.
        let gone_at = eventually("download-image deleted by its TTL", Duration::from_secs(100), || async {
            Ok(get_job(&ns, "download-image")
                .await?
                .is_none()
                .then(Timestamp::now))
        })
        .await?;
        let after = gone_at.duration_since(completed_at).as_secs_f64();
        ensure!(
            (60.0..=90.0).contains(&after),
            "deleted {after:.1} s after completion"
        );
        eprintln!("seed 000 BroadcastJob deleted {after:.1} s after completionTime");
        Ok(())
    })
    .await
}

/// `examples/broadcastjob.yaml` tolerating the extra nodes, its Pods running until a test lets
/// them finish, with `failurePolicy.type` set to `failure`.
fn example_job(failure: &str) -> anyhow::Result<Value> {
    let mut doc = kruise_e2e::example("broadcastjob.yaml")?;
    doc["spec"]["failurePolicy"]["type"] = json!(failure);
    doc["spec"]["template"]["metadata"] = json!({"annotations": {RUN_MS: "600000"}});
    doc["spec"]["template"]["spec"]["tolerations"] =
        json!([{"key": FLEET_KEY, "operator": "Exists", "effect": "NoSchedule"}]);
    Ok(doc)
}

/// Container restarts of the Pod, all containers together.
fn restarts(pod: &Pod) -> i32 {
    kruise_core::pods::container_statuses(pod)
        .iter()
        .map(|c| c.restart_count)
        .sum()
}

/// The job's Pods that count as active: not finished, not being deleted, within the restart limit.
fn active(pods: &[Pod], restart_limit: i32) -> usize {
    pods.iter()
        .filter(|p| {
            !matches!(phase(p), "Succeeded" | "Failed")
                && p.metadata.deletion_timestamp.is_none()
                && restarts(p) <= restart_limit
        })
        .count()
}

/// Starts the example with `failure`; waits for its first 5 Pods (50% of 10 nodes) and steers the
/// first to exit 1 right away, every run. Returns that Pod's name.
async fn start_example_with_a_failing_pod(
    ns: &TestNamespace,
    failure: &str,
) -> anyhow::Result<String> {
    ns.apply(&serde_json::to_string(&example_job(failure)?)?)
        .await?;
    let pods = eventually("5 Pods of broadcastjob-pi", TIMEOUT, || async {
        let pods = job_pods(ns, "broadcastjob-pi").await?;
        Ok((pods.len() >= 5).then_some(pods))
    })
    .await?;
    ensure!(pods.len() == 5, "parallelism 50%: {}", describe(&pods));
    let failing = name(&pods[0]);
    annotate(ns, &failing, json!({RUN_MS: "100", EXIT_CODE: "1"})).await?;
    Ok(failing)
}

#[tokio::test]
async fn example_parallelism_restart_limit_and_continue() -> anyhow::Result<()> {
    let ns = ten_node_namespace("bcj-continue").await?;
    ns.run(async {
        let failing = start_example_with_a_failing_pod(&ns, "Continue").await?;
        // Let every other Pod finish as it appears, and watch that at most 5 are active at once.
        let most = AtomicI32::new(0);
        let job = eventually("broadcastjob-pi completed", TIMEOUT, || async {
            let pods = job_pods(&ns, "broadcastjob-pi").await?;
            most.fetch_max(active(&pods, 2) as i32, Ordering::SeqCst);
            for pod in &pods {
                let released = pod
                    .metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.get(RUN_MS).map(String::as_str) == Some("100"));
                if !released && phase(pod) == "Running" {
                    annotate(&ns, &name(pod), json!({RUN_MS: "100"})).await?;
                }
            }
            let job = get_job(&ns, "broadcastjob-pi").await?;
            if let Some(j) = &job {
                most.fetch_max(job_status(j).active, Ordering::SeqCst);
            }
            Ok(job.filter(|j| job_status(j).phase == "completed"))
        })
        .await?;
        ensure!(
            most.load(Ordering::SeqCst) <= 5,
            "{} active at once",
            most.load(Ordering::SeqCst)
        );
        let st = job_status(&job);
        ensure!(
            (st.desired, st.succeeded, st.failed, st.active) == (10, 9, 1, 0),
            "{st:?}"
        );
        ensure!(condition_true(&job, "Complete"), "{st:?}");
        let pods = job_pods(&ns, "broadcastjob-pi").await?;
        let failed = pods
            .iter()
            .find(|p| name(p) == failing)
            .context("the failing Pod")?;
        // OnFailure: restarted in place up to the limit and past it (3 > restartLimit 2).
        ensure!(restarts(failed) >= 3, "{}", describe(&pods));
        let nodes: BTreeSet<String> = pods.iter().filter_map(node_name).collect();
        ensure!(nodes.len() == 10, "{}", describe(&pods));
        Ok(())
    })
    .await
}

#[tokio::test]
async fn example_fail_fast_fails_the_job_and_deletes_active_pods() -> anyhow::Result<()> {
    let ns = ten_node_namespace("bcj-failfast").await?;
    ns.run(async {
        let failing = start_example_with_a_failing_pod(&ns, "FailFast").await?;
        let job = wait_job(&ns, "broadcastjob-pi", "failed", |j| {
            job_status(j).phase == "failed"
        })
        .await?;
        ensure!(condition_true(&job, "Failed"), "{:?}", job.status);
        let st = job_status(&job);
        let failed = condition(&st, "Failed")?;
        ensure!(
            failed.message == "failure policy is FailurePolicyTypeFailFast and failed pod is found",
            "{failed:?}"
        );
        // The 4 other (active) Pods are deleted and counted failed, with the failing one.
        ensure!((st.failed, st.active) == (5, 0), "{st:?}");
        eventually("the active Pods deleted", TIMEOUT, || async {
            let pods = job_pods(&ns, "broadcastjob-pi").await?;
            Ok((pods.iter().map(name).collect::<Vec<_>>() == vec![failing.clone()]).then_some(()))
        })
        .await?;
        let event = wait_event(&ns, "broadcastjob-pi", "failed pod is found").await?;
        ensure!(event.type_.as_deref() == Some("Warning"), "{event:?}");
        wait_event(&ns, "broadcastjob-pi", "SuccessfulDelete").await?;
        Ok(())
    })
    .await
}

#[tokio::test]
async fn example_pause_pauses_the_job() -> anyhow::Result<()> {
    let ns = ten_node_namespace("bcj-pause").await?;
    ns.run(async {
        start_example_with_a_failing_pod(&ns, "Pause").await?;
        wait_job(&ns, "broadcastjob-pi", "paused", |j| {
            job_status(j).phase == "paused" && job_status(j).failed == 1
        })
        .await?;
        wait_event(&ns, "broadcastjob-pi", "Paused").await?;
        // Paused: the other Pods may finish, but no new Pod is created.
        let pods = job_pods(&ns, "broadcastjob-pi").await?;
        for pod in pods.iter().filter(|p| phase(p) == "Running") {
            annotate(&ns, &name(pod), json!({RUN_MS: "100"})).await?;
        }
        let job = wait_job(&ns, "broadcastjob-pi", "4 succeeded, still paused", |j| {
            job_status(j).succeeded == 4
        })
        .await?;
        let st = job_status(&job);
        ensure!(
            st.phase == "paused"
                && st.desired == 10
                && job_pods(&ns, "broadcastjob-pi").await?.len() == 5,
            "{st:?}"
        );
        ensure!(!condition_true(&job, "Complete") && !condition_true(&job, "Failed"));
        Ok(())
    })
    .await
}

#[tokio::test]
async fn active_deadline_fails_a_job_whose_pods_never_finish() -> anyhow::Result<()> {
    let ns = managed_namespace("bcj-deadline").await?;
    ns.run(async {
        let doc = json!({
            "apiVersion": "apps.kruise.io/v1beta1",
            "kind": "BroadcastJob",
            "metadata": {"name": "slow"},
            "spec": {
                "completionPolicy": {"type": "Always", "activeDeadlineSeconds": 5},
                "template": {
                    "metadata": {"annotations": {RUN_MS: "600000"}},
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "c", "image": "busybox:1.36"}]
                    }
                }
            }
        });
        ns.apply(&serde_json::to_string(&doc)?).await?;
        let job = wait_job(&ns, "slow", "failed", |j| job_status(j).phase == "failed").await?;
        let st = job_status(&job);
        let failed = condition(&st, "Failed")?;
        ensure!(
            failed.message
                == format!(
                    "Job {}/slow was active longer than specified deadline",
                    ns.name
                ),
            "{failed:?}"
        );
        let elapsed = st
            .completion_time
            .context("completionTime")?
            .0
            .duration_since(st.start_time.context("startTime")?.0)
            .as_secs_f64();
        ensure!(
            (5.0..15.0).contains(&elapsed),
            "failed after {elapsed:.1} s"
        );
        let event = wait_event(&ns, "slow", "DeadlineExceeded").await?;
        ensure!(event.type_.as_deref() == Some("Warning"), "{event:?}");
        eventually("the job's Pods deleted", TIMEOUT, || async {
            Ok(job_pods(&ns, "slow").await?.is_empty().then_some(()))
        })
        .await?;
        Ok(())
    })
    .await
}

#[tokio::test]
async fn bad_input_is_rejected_naming_the_field_and_nothing_is_created() -> anyhow::Result<()> {
    let ns = managed_namespace("bcj-bad").await?;
    ns.run(async {
        let job = |spec: Value| {
            let mut doc = json!({
                "apiVersion": "apps.kruise.io/v1alpha1",
                "kind": "BroadcastJob",
                "metadata": {"name": "bad"},
                "spec": {
                    "template": {"spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "c", "image": "busybox:1.36"}]
                    }}
                }
            });
            json_patch::merge(&mut doc, &json!({"spec": spec}));
            doc
        };
        let cases = [
            (
                json!({"template": {"spec": {"restartPolicy": "Always"}}}),
                "spec.template.spec.restartPolicy",
            ),
            (
                json!({"completionPolicy": {"type": "Never", "ttlSecondsAfterFinished": 5}}),
                "spec.completionPolicy.ttlSecondsAfterFinished",
            ),
            (
                json!({"failurePolicy": {"type": "Sometimes"}}),
                "spec.failurePolicy.type",
            ),
            (json!({"parallelism": "half"}), "spec.parallelism"),
        ];
        for (spec, field) in cases {
            let result = ns.apply(&serde_json::to_string(&job(spec))?).await;
            let error = match result {
                Ok(out) => anyhow::bail!("accepted ({field}): {out}"),
                Err(e) => format!("{e:#}"),
            };
            ensure!(
                error.contains(field),
                "error does not name {field}: {error}"
            );
        }
        let jobs: Api<BroadcastJob> = ns.api();
        ensure!(jobs.list(&ListParams::default()).await?.items.is_empty());
        let pods: Api<Pod> = ns.api();
        ensure!(pods.list(&ListParams::default()).await?.items.is_empty());
        Ok(())
    })
    .await
}

#[tokio::test]
async fn completion_policy_never_follows_nodes_that_join_and_stop_fitting() -> anyhow::Result<()> {
    let ns = managed_namespace("bcj-never").await?;
    ns.run(async {
        // examples/broadcastjob-v1alpha1.yaml, tolerating the node this test adds (and no other).
        let mut doc = kruise_e2e::example("broadcastjob-v1alpha1.yaml")?;
        doc["spec"]["template"]["spec"]["tolerations"] =
            json!([{"key": LATE_KEY, "operator": "Equal", "value": ns.name, "effect": "NoSchedule"}]);
        ns.apply(&serde_json::to_string(&doc)?).await?;
        let job = wait_job(&ns, "broadcastjob-never", "3 succeeded", |j| {
            job_status(j).succeeded == 3
        })
        .await?;
        let st = job_status(&job);
        ensure!(
            st.phase == "running" && st.desired == 3 && st.completion_time.is_none(),
            "a Never job does not complete: {st:?}"
        );

        let mut spec = NodeSpecSim::fleet(&format!("late-{}", ns.name), 1, &[]).remove(0);
        spec.taints = vec![private_taint(LATE_KEY, &ns.name)];
        let late = fleet::add_node(&ns.client, spec).await?;
        let result = async {
            let job = wait_job(&ns, "broadcastjob-never", "a Pod on the new node", |j| {
                job_status(j).desired == 4 && job_status(j).succeeded == 4
            })
            .await?;
            ensure!(job_status(&job).phase == "running", "{:?}", job.status);
            let pods = job_pods(&ns, "broadcastjob-never").await?;
            ensure!(
                pods.iter().any(|p| node_name(p).as_deref() == Some(late.name.as_str())),
                "{}",
                describe(&pods)
            );
            // The node stops fitting (a taint the job does not tolerate): its Pod is deleted.
            fleet::taint_node(&ns.client, &late.name, private_taint(EVICT_KEY, "x")).await?;
            wait_job(&ns, "broadcastjob-never", "back to 3 desired", |j| {
                job_status(j).desired == 3
            })
            .await?;
            eventually("the Pod on the tainted node deleted", TIMEOUT, || async {
                let pods = job_pods(&ns, "broadcastjob-never").await?;
                Ok((!pods
                    .iter()
                    .any(|p| node_name(p).as_deref() == Some(late.name.as_str())))
                .then_some(()))
            })
            .await?;
            Ok(())
        }
        .await;
        fleet::remove_node(&ns.client, &late.name).await?;
        result
    })
    .await
}

#[tokio::test]
async fn only_nodes_the_template_fits_get_a_pod() -> anyhow::Result<()> {
    let bed = testbed();
    bed.manager();
    let ns = bed.namespace("bcj-fit").await?;
    ns.run(async {
        let job = |name: &str, spec: Value| {
            let mut doc = json!({
                "apiVersion": "apps.kruise.io/v1beta1",
                "kind": "BroadcastJob",
                "metadata": {"name": name},
                "spec": {"template": {"spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox:1.36"}]
                }}}
            });
            json_patch::merge(&mut doc, &json!({"spec": {"template": {"spec": spec}}}));
            doc
        };
        // A nodeSelector: the zone-a node only.
        let zoned = job(
            "zoned",
            json!({"nodeSelector": {"topology.kubernetes.io/zone": "zone-a"}}),
        );
        // More cpu than any node can allocate (32): no node.
        let huge = job(
            "huge",
            json!({"containers": [{"name": "c", "image": "busybox:1.36", "resources": {"requests": {"cpu": "64"}}}]}),
        );
        ns.apply(&serde_json::to_string(&zoned)?).await?;
        ns.apply(&serde_json::to_string(&huge)?).await?;
        let done = wait_job(&ns, "zoned", "completed on one node", |j| {
            job_status(j).phase == "completed"
        })
        .await?;
        let st = job_status(&done);
        ensure!((st.desired, st.succeeded) == (1, 1), "{st:?}");
        let pods = job_pods(&ns, "zoned").await?;
        let zone_a = bed
            .nodes
            .iter()
            .find(|n| n.zone.as_deref() == Some("zone-a"))
            .map(|n| n.name.clone());
        ensure!(
            pods.len() == 1 && node_name(&pods[0]) == zone_a,
            "{}",
            describe(&pods)
        );
        let huge = wait_job(&ns, "huge", "running with no desired node", |j| {
            let s = job_status(j);
            s.phase == "running" && s.start_time.is_some()
        })
        .await?;
        let st = job_status(&huge);
        ensure!(st.desired == 0 && !condition_true(&huge, "Complete"), "{st:?}");
        ensure!(job_pods(&ns, "huge").await?.is_empty());
        Ok(())
    })
    .await
}
