//! The test bed itself, end to end: the real scheduler, controller manager and garbage collector working
//! with kubelet-sim, observed the way a user observes a cluster (kubectl and Pod/Node status).

use std::collections::HashSet;
use std::time::Duration;

use anyhow::{Context, ensure};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use kruise_e2e::same_image;
use kruise_e2e::{
    container_status, is_ready, node_name, node_ready_status, phase, pod_condition, pod_ip,
};
use kruise_testkit::{Limits, eventually, fleet, testbed, until};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kubelet_sim::NodeSpecSim;
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(60);

async fn pods_with(api: &Api<Pod>, selector: &str) -> anyhow::Result<Vec<Pod>> {
    Ok(api
        .list(&ListParams::default().labels(selector))
        .await?
        .items)
}

#[tokio::test]
async fn deployment_is_scheduled_across_simulated_nodes_and_runs() -> anyhow::Result<()> {
    let bed = testbed();
    let ns = bed.namespace("deploy").await?;
    ns.run(async {
        ns.apply(
            r#"
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: web}
    spec:
      replicas: 3
      selector: {matchLabels: {app: web}}
      template:
        metadata: {labels: {app: web}}
        spec:
          containers:
          - {name: nginx, image: "nginx:alpine"}
    "#,
        )
        .await?;
        let pods: Api<Pod> = ns.api();
        let ready = eventually("3 Ready web Pods", TIMEOUT, || async {
            let list = pods_with(&pods, "app=web").await?;
            Ok((list.len() == 3 && list.iter().all(is_ready)).then_some(list))
        })
        .await?;

        let sim_nodes: HashSet<String> = bed.nodes.iter().map(|n| n.name.clone()).collect();
        let nodes: HashSet<String> = ready.iter().filter_map(node_name).collect();
        ensure!(
            nodes.is_subset(&sim_nodes),
            "pods on unexpected nodes: {nodes:?}"
        );
        ensure!(
            nodes.len() >= 2,
            "the scheduler spread 3 replicas over only {nodes:?}"
        );
        let ips: HashSet<String> = ready.iter().filter_map(pod_ip).collect();
        ensure!(ips.len() == 3, "podIPs are not distinct: {ips:?}");
        for pod in &ready {
            let scheduled = pod_condition(pod, "PodScheduled").context("PodScheduled condition")?;
            ensure!(
                scheduled.status == "True",
                "PodScheduled is written by the real scheduler"
            );
            ensure!(phase(pod) == "Running");
            let nginx = container_status(pod, "nginx").context("nginx status")?;
            ensure!(
                same_image(&nginx.image, "nginx:alpine"),
                "image {}",
                nginx.image
            );
            ensure!(
                nginx
                    .image_id
                    .starts_with("docker.io/library/nginx@sha256:"),
                "imageID {}",
                nginx.image_id
            );
            ensure!(
                nginx
                    .container_id
                    .as_deref()
                    .is_some_and(|id| id.starts_with("containerd://"))
            );
            ensure!(nginx.ready && nginx.restart_count == 0);
        }
        // What a user sees.
        let table = ns
            .kubectl(&["get", "pods", "-l", "app=web", "-o", "wide", "--no-headers"])
            .await?;
        ensure!(table.lines().count() == 3, "kubectl get pods:\n{table}");
        ensure!(
            table
                .lines()
                .all(|l| l.contains("1/1") && l.contains("Running")),
            "kubectl get pods:\n{table}"
        );
        let rollout = ns
            .kubectl(&["rollout", "status", "deployment/web", "--timeout=60s"])
            .await?;
        ensure!(rollout.contains("successfully rolled out"), "{rollout}");
        Ok(())
    })
    .await
}

#[tokio::test]
async fn image_patch_restarts_only_that_container() -> anyhow::Result<()> {
    let bed = testbed();
    let ns = bed.namespace("inplace").await?;
    ns.run(async {
        ns.apply(
            r#"
    apiVersion: v1
    kind: Pod
    metadata: {name: two}
    spec:
      containers:
      - {name: nginx, image: "nginx:alpine"}
      - {name: sidecar, image: "busybox:1.36"}
    "#,
        )
        .await?;
        let pods: Api<Pod> = ns.api();
        let before = eventually("Pod two Ready", TIMEOUT, || async {
            let pod = pods.get("two").await?;
            Ok(is_ready(&pod).then_some(pod))
        })
        .await?;
        let nginx_before = container_status(&before, "nginx").context("nginx")?;
        let sidecar_before = container_status(&before, "sidecar").context("sidecar")?;

        ns.kubectl(&[
            "patch",
            "pod",
            "two",
            "--type=strategic",
            "-p",
            r#"{"spec":{"containers":[{"name":"nginx","image":"nginx:1.19.1"}]}}"#,
        ])
        .await?;
        let after = eventually(
            "nginx restarted with the new image and Ready",
            TIMEOUT,
            || async {
                let pod = pods.get("two").await?;
                let nginx = container_status(&pod, "nginx").context("nginx")?;
                Ok(
                    (same_image(&nginx.image, "nginx:1.19.1") && nginx.ready && is_ready(&pod))
                        .then_some(pod),
                )
            },
        )
        .await?;
        let nginx = container_status(&after, "nginx").context("nginx")?;
        let sidecar = container_status(&after, "sidecar").context("sidecar")?;
        ensure!(
            nginx.restart_count == 1,
            "nginx restartCount {}",
            nginx.restart_count
        );
        ensure!(nginx.image_id != nginx_before.image_id, "imageID unchanged");
        ensure!(
            nginx.container_id != nginx_before.container_id,
            "containerID unchanged"
        );
        let last = nginx
            .last_state
            .and_then(|s| s.terminated)
            .context("nginx lastState.terminated")?;
        ensure!(last.container_id == nginx_before.container_id);
        ensure!(sidecar.restart_count == 0, "sidecar restarted");
        ensure!(
            sidecar.container_id == sidecar_before.container_id,
            "sidecar containerID changed"
        );
        ensure!(after.metadata.uid == before.metadata.uid, "Pod UID changed");
        ensure!(node_name(&after) == node_name(&before), "node changed");
        ensure!(pod_ip(&after) == pod_ip(&before), "podIP changed");
        let restarts = ns
            .kubectl(&[
                "get",
                "pod",
                "two",
                "-o",
                "jsonpath={.status.containerStatuses[*].restartCount}",
            ])
            .await?;
        ensure!(
            restarts.trim() == "1 0",
            "kubectl restart counts: {restarts}"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn readiness_gate_decides_pod_readiness() -> anyhow::Result<()> {
    let bed = testbed();
    let ns = bed.namespace("gate").await?;
    ns.run(async {
        ns.apply(
            r#"
    apiVersion: v1
    kind: Pod
    metadata: {name: gated}
    spec:
      readinessGates:
      - conditionType: InPlaceUpdateReady
      containers:
      - {name: app, image: "nginx:alpine"}
    "#,
        )
        .await?;
        let pods: Api<Pod> = ns.api();
        let pod = eventually(
            "containers ready, Pod held by the gate",
            TIMEOUT,
            || async {
                let pod = pods.get("gated").await?;
                let containers_ready =
                    pod_condition(&pod, "ContainersReady").is_some_and(|c| c.status == "True");
                Ok(containers_ready.then_some(pod))
            },
        )
        .await?;
        let ready = pod_condition(&pod, "Ready").context("Ready")?;
        ensure!(ready.status == "False", "Ready before the gate: {ready:?}");
        ensure!(
            ready.reason.as_deref() == Some("ReadinessGatesNotReady"),
            "{ready:?}"
        );

        let set_gate = |status: &'static str| {
            let pods = pods.clone();
            async move {
                let patch = json!({"status": {"conditions": [{"type": "InPlaceUpdateReady", "status": status}]}});
                pods.patch_status("gated", &PatchParams::default(), &Patch::Strategic(patch))
                    .await
            }
        };
        set_gate("True").await?;
        until("Pod Ready once the gate is True", TIMEOUT, || async {
            Ok(is_ready(&pods.get("gated").await?))
        })
        .await?;
        set_gate("False").await?;
        until("Pod NotReady once the gate is False", TIMEOUT, || async {
            Ok(!is_ready(&pods.get("gated").await?))
        })
        .await?;
        let pod = pods.get("gated").await?;
        let gate = pod_condition(&pod, "InPlaceUpdateReady").context("gate condition")?;
        ensure!(
            gate.status == "False",
            "the simulator must not touch the gate condition"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn deleting_a_deployment_garbage_collects_its_pods() -> anyhow::Result<()> {
    let bed = testbed();
    let ns = bed.namespace("gc").await?;
    ns.run(async {
        ns.apply(
            r#"
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: doomed}
    spec:
      replicas: 2
      selector: {matchLabels: {app: doomed}}
      template:
        metadata: {labels: {app: doomed}}
        spec:
          terminationGracePeriodSeconds: 5
          containers:
          - {name: app, image: "nginx:alpine"}
    "#,
        )
        .await?;
        let pods: Api<Pod> = ns.api();
        until("2 doomed Pods Ready", TIMEOUT, || async {
            let list = pods_with(&pods, "app=doomed").await?;
            Ok(list.len() == 2 && list.iter().all(is_ready))
        })
        .await?;
        ns.kubectl(&["delete", "deployment", "doomed", "--wait=false"])
            .await?;
        until("no doomed Pods left", TIMEOUT, || async {
            Ok(pods_with(&pods, "app=doomed").await?.is_empty())
        })
        .await?;
        let left = ns
            .kubectl(&[
                "get",
                "replicasets,pods",
                "-l",
                "app=doomed",
                "--no-headers",
            ])
            .await?;
        ensure!(left.trim().is_empty(), "left behind: {left}");
        Ok(())
    })
    .await
}

async fn job_condition(jobs: &Api<Job>, name: &str) -> anyhow::Result<Option<String>> {
    let job = jobs.get(name).await?;
    let conditions = job.status.and_then(|s| s.conditions).unwrap_or_default();
    Ok(conditions
        .iter()
        .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        .map(|c| c.type_.clone()))
}

#[tokio::test]
async fn jobs_complete_or_fail_by_exit_code() -> anyhow::Result<()> {
    let bed = testbed();
    let ns = bed.namespace("job").await?;
    ns.run(async {
        ns.apply(
            r#"
    apiVersion: batch/v1
    kind: Job
    metadata: {name: ok}
    spec:
      backoffLimit: 0
      template:
        spec:
          restartPolicy: Never
          containers:
          - {name: work, image: "busybox:1.36"}
---
    apiVersion: batch/v1
    kind: Job
    metadata: {name: broken}
    spec:
      backoffLimit: 0
      template:
        metadata:
          annotations: {sim.kruise-rs.io/exit-code: "1"}
        spec:
          restartPolicy: Never
          containers:
          - {name: work, image: "busybox:1.36"}
    "#,
        )
        .await?;
        let jobs: Api<Job> = ns.api();
        let ok = eventually("Job ok finished", TIMEOUT, || job_condition(&jobs, "ok")).await?;
        ensure!(ok == "Complete", "Job ok ended {ok}");
        let broken = eventually("Job broken finished", TIMEOUT, || {
            job_condition(&jobs, "broken")
        })
        .await?;
        ensure!(broken == "Failed", "Job broken ended {broken}");

        let pods: Api<Pod> = ns.api();
        let ok_pods = pods_with(&pods, "job-name=ok").await?;
        ensure!(
            ok_pods.iter().any(|p| phase(p) == "Succeeded"),
            "no Succeeded Pod for Job ok"
        );
        let broken_pods = pods_with(&pods, "job-name=broken").await?;
        let failed = broken_pods
            .iter()
            .find(|p| phase(p) == "Failed")
            .context("no Failed Pod for Job broken")?;
        let work = container_status(failed, "work").context("work status")?;
        let exit = work.state.and_then(|s| s.terminated).map(|t| t.exit_code);
        ensure!(exit == Some(1), "exit code {exit:?}");
        let succeeded = ns
            .kubectl(&["get", "job", "ok", "-o", "jsonpath={.status.succeeded}"])
            .await?;
        ensure!(
            succeeded.trim() == "1",
            "job ok .status.succeeded = {succeeded}"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn never_ready_container_keeps_pod_not_ready() -> anyhow::Result<()> {
    let bed = testbed();
    let ns = bed.namespace("unready").await?;
    ns.run(async {
        ns.apply(
            r#"
    apiVersion: v1
    kind: Pod
    metadata:
      name: half
      annotations: {sim.kruise-rs.io/never-ready: "probe"}
    spec:
      containers:
      - {name: app, image: "nginx:alpine"}
      - {name: probe, image: "busybox:1.36"}
    "#,
        )
        .await?;
        let pods: Api<Pod> = ns.api();
        let pod = eventually("app container ready", TIMEOUT, || async {
            let pod = pods.get("half").await?;
            Ok(container_status(&pod, "app")
                .is_some_and(|c| c.ready)
                .then_some(pod))
        })
        .await?;
        let probe = container_status(&pod, "probe").context("probe status")?;
        ensure!(!probe.ready, "the steered container became ready");
        ensure!(phase(&pod) == "Running");
        let ready = pod_condition(&pod, "Ready").context("Ready")?;
        ensure!(
            ready.status == "False" && ready.reason.as_deref() == Some("ContainersNotReady"),
            "{ready:?}"
        );
        let table = ns.kubectl(&["get", "pod", "half", "--no-headers"]).await?;
        ensure!(
            table.contains("1/2") && table.contains("Running"),
            "kubectl get pod: {table}"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn stopped_heartbeats_make_the_node_not_ready() -> anyhow::Result<()> {
    let bed = testbed();
    let ns = bed.namespace("heartbeat").await?;
    ns.run(async {
        let client = bed.plane.client().await?;
        // A node of its own, added to the running fleet and tainted so no other test's Pods land on it.
        let name = format!("heartbeat-{}", std::process::id());
        let mut node = NodeSpecSim::named(&name, 0);
        node.zone = Some("zone-a".into());
        node.taints = vec![Taint {
            key: "kruise-rs.io/test".into(),
            value: Some("heartbeat".into()),
            effect: "NoSchedule".into(),
            ..Default::default()
        }];
        fleet::register_node(&client, node).await?;
        let nodes: Api<Node> = Api::all(client);
        let node_status = |wanted: &'static str| {
            let nodes = nodes.clone();
            let name = name.clone();
            async move { Ok(node_ready_status(&nodes.get(&name).await?).as_deref() == Some(wanted)) }
        };
        until("the new node Ready", TIMEOUT, || node_status("True")).await?;

        bed.plane
            .kubectl(&[
                "annotate",
                "node",
                &name,
                "sim.kruise-rs.io/heartbeat=stopped",
            ])
            .await?;
        until("the node NotReady after missed heartbeats", TIMEOUT, || {
            node_status("Unknown")
        })
        .await?;
        let table = bed
            .plane
            .kubectl(&["get", "node", &name, "--no-headers"])
            .await?;
        ensure!(table.contains("NotReady"), "kubectl get node: {table}");

        bed.plane
            .kubectl(&["annotate", "node", &name, "sim.kruise-rs.io/heartbeat-"])
            .await?;
        until(
            "the node Ready again once heartbeats resume",
            TIMEOUT,
            || node_status("True"),
        )
        .await?;
        nodes.delete(&name, &DeleteParams::default()).await?;
        Ok(())
    })
    .await
}

#[tokio::test]
async fn resize_is_reflected_in_status_without_restart() -> anyhow::Result<()> {
    let bed = testbed();
    let ns = bed.namespace("resize").await?;
    ns.run(async {
        ns.apply(
            r#"
    apiVersion: v1
    kind: Pod
    metadata: {name: sized}
    spec:
      containers:
      - name: app
        image: "nginx:alpine"
        resources:
          requests: {cpu: 100m, memory: 64Mi}
          limits: {cpu: 100m, memory: 64Mi}
    "#,
        )
        .await?;
        let pods: Api<Pod> = ns.api();
        let before = eventually("Pod sized Ready", TIMEOUT, || async {
            let pod = pods.get("sized").await?;
            Ok(is_ready(&pod).then_some(pod))
        })
        .await?;
        let app_before = container_status(&before, "app").context("app status")?;

        ns.kubectl(&[
            "patch",
            "pod",
            "sized",
            "--subresource=resize",
            "-p",
            r#"{"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"200m"},"limits":{"cpu":"200m"}}}]}}"#,
        ])
        .await?;
        let app = eventually("status resources follow the resize", TIMEOUT, || async {
            let pod = pods.get("sized").await?;
            let app = container_status(&pod, "app").context("app status")?;
            let cpu = app
                .resources
                .as_ref()
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get("cpu").cloned());
            Ok((cpu.map(|q| q.0).as_deref() == Some("200m")).then_some(app))
        })
        .await?;
        ensure!(
            app.restart_count == 0,
            "a resize must not restart the container"
        );
        ensure!(
            app.container_id == app_before.container_id,
            "containerID changed"
        );
        Ok(())
    })
    .await
}

/// Returns (Pods of `selector` Ready, not terminating and running `image`; all Pods of `selector`).
async fn updated_ready(
    pods: &Api<Pod>,
    selector: &str,
    image: &str,
) -> anyhow::Result<(usize, usize)> {
    let list = pods_with(pods, selector).await?;
    let updated = list
        .iter()
        .filter(|p| {
            is_ready(p)
                && p.metadata.deletion_timestamp.is_none()
                && container_status(p, "nginx").is_some_and(|c| same_image(&c.image, image))
        })
        .count();
    Ok((updated, list.len()))
}

#[tokio::test]
async fn rolling_update_stays_within_the_monitor_limits() -> anyhow::Result<()> {
    let bed = testbed();
    let ns = bed.namespace("monitor-roll").await?;
    ns.run(async {
        ns.apply(
            r#"
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: roll}
    spec:
      replicas: 4
      selector: {matchLabels: {app: roll}}
      strategy:
        type: RollingUpdate
        rollingUpdate: {maxUnavailable: 1, maxSurge: 1}
      template:
        metadata: {labels: {app: roll}}
        spec:
          terminationGracePeriodSeconds: 0
          containers:
          - {name: nginx, image: "nginx:alpine"}
    "#,
        )
        .await?;
        let pods: Api<Pod> = ns.api();
        until("4 Ready roll Pods", TIMEOUT, || async {
            Ok(updated_ready(&pods, "app=roll", "nginx:alpine").await? == (4, 4))
        })
        .await?;
        // A native Deployment enforces maxSurge (1) on ReplicaSet replicas, not on Pods: it may
        // scale the new ReplicaSet up once the old one's replicas dropped, before the old Pod's
        // deletion is observed. One such Pod in flight is allowed; kruise workloads will be
        // held to the exact bound.
        let limits = Limits::replicas(4).max_unavailable(1).max_surge(2);
        let monitor = ns.rollout_monitor("app=roll", limits).await?;
        monitor.check()?;

        ns.kubectl(&["set", "image", "deployment/roll", "nginx=nginx:1.19.1"])
            .await?;
        monitor
            .until("4 updated Ready roll Pods", TIMEOUT, || async {
                Ok(updated_ready(&pods, "app=roll", "nginx:1.19.1").await? == (4, 4))
            })
            .await?;
        let stats = monitor.finish().await?;
        eprintln!("rollout monitor: {stats:?}");
        ensure!(stats.max_pods_seen <= 6, "{stats:?}");
        ensure!(
            stats.events_seen > 1,
            "the monitor saw no change: {stats:?}"
        );
        ensure!(stats.max_unavailable_seen <= 1, "{stats:?}");
        Ok(())
    })
    .await
}

#[tokio::test]
async fn monitor_catches_a_recreate_rollout_taking_every_pod_down() -> anyhow::Result<()> {
    let bed = testbed();
    let ns = bed.namespace("monitor-recreate").await?;
    ns.run(async {
        ns.apply(
            r#"
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: recreate}
    spec:
      replicas: 3
      selector: {matchLabels: {app: recreate}}
      strategy: {type: Recreate}
      template:
        metadata: {labels: {app: recreate}}
        spec:
          containers:
          - {name: nginx, image: "nginx:alpine"}
    "#,
        )
        .await?;
        let pods: Api<Pod> = ns.api();
        until("3 Ready recreate Pods", TIMEOUT, || async {
            Ok(updated_ready(&pods, "app=recreate", "nginx:alpine").await? == (3, 3))
        })
        .await?;
        let monitor = ns
            .rollout_monitor("app=recreate", Limits::replicas(3))
            .await?;
        monitor.check()?;

        ns.kubectl(&["set", "image", "deployment/recreate", "nginx=nginx:1.19.1"])
            .await?;
        // The wait must fail on the violation, long before the rollout (or the timeout) ends.
        let started = std::time::Instant::now();
        let waited = monitor
            .until("3 updated Ready recreate Pods", TIMEOUT, || async {
                Ok(updated_ready(&pods, "app=recreate", "nginx:1.19.1").await? == (3, 3))
            })
            .await;
        let error = match waited {
            Ok(()) => anyhow::bail!("the wait succeeded although Recreate took the Pods down"),
            Err(error) => format!("{error:#}"),
        };
        ensure!(
            error.contains("rollout invariant violated") && error.contains("unavailable"),
            "{error}"
        );
        ensure!(started.elapsed() < TIMEOUT, "the wait ran to its timeout");
        ensure!(monitor.violation().is_some());
        match monitor.finish().await {
            Ok(stats) => anyhow::bail!("finish() passed a violated rollout: {stats:?}"),
            Err(error) => {
                let error = format!("{error:#}");
                ensure!(
                    error.contains("unavailable 1 > maxUnavailable 0"),
                    "the first violation is one Pod going down: {error}"
                );
            }
        }
        Ok(())
    })
    .await
}

#[tokio::test]
async fn nodes_join_change_and_leave_while_the_cluster_runs() -> anyhow::Result<()> {
    let bed = testbed();
    let ns = bed.namespace("fleet").await?;
    ns.run(async {
        let client = bed.plane.client().await?;
        let name = format!("{}-joined", ns.name);
        // Tainted so that only this test's Pod runs there.
        let mut spec = NodeSpecSim::named(&name, 0);
        spec.labels.insert("node-pool".into(), "canary".into());
        spec.cpu = "2".into();
        spec.memory = "4Gi".into();
        spec.max_pods = 20;
        spec.taints = vec![fleet::parse_taint("kruise-rs.io/test=fleet:NoSchedule")?];
        let spec = fleet::add_node(&client, spec).await?;
        let nodes: Api<Node> = Api::all(client.clone());
        let node = nodes.get(&name).await?;
        let labels = node.metadata.labels.clone().unwrap_or_default();
        ensure!(
            labels.get("node-pool").map(String::as_str) == Some("canary"),
            "{labels:?}"
        );
        let allocatable = node
            .status
            .as_ref()
            .and_then(|s| s.allocatable.clone())
            .unwrap_or_default();
        ensure!(
            allocatable.get("cpu").map(|q| q.0.as_str()) == Some("2"),
            "{allocatable:?}"
        );

        // The running kubelet-sim serves the node: the scheduler binds a tolerating Pod, which runs.
        ns.apply(&format!(
            r#"
    apiVersion: v1
    kind: Pod
    metadata: {{name: on-joined}}
    spec:
      nodeSelector: {{node-pool: canary, kubernetes.io/hostname: {name}}}
      tolerations: [{{key: kruise-rs.io/test, operator: Exists}}]
      containers:
      - {{name: app, image: "nginx:alpine"}}
    "#
        ))
        .await?;
        let pods: Api<Pod> = ns.api();
        let pod = eventually("the Pod Ready on the joined node", TIMEOUT, || async {
            let pod = pods.get("on-joined").await?;
            Ok(is_ready(&pod).then_some(pod))
        })
        .await?;
        ensure!(node_name(&pod).as_deref() == Some(name.as_str()));
        let expected_ip = spec.node_ip().to_string();
        ensure!(
            pod.status.as_ref().and_then(|s| s.host_ip.as_deref()) == Some(expected_ip.as_str()),
            "hostIP of {:?}",
            pod.status
        );

        // Relabel, taint, cordon, resize: the live Node changes.
        fleet::label_node(&client, &name, &[("node-pool", None), ("tier", Some("b"))]).await?;
        fleet::taint_node(
            &client,
            &name,
            fleet::parse_taint("maintenance=soon:NoSchedule")?,
        )
        .await?;
        fleet::set_unschedulable(&client, &name, true).await?;
        fleet::set_allocatable(
            &client,
            &name,
            &[("cpu", "4"), ("memory", "8Gi"), ("pods", "20")],
        )
        .await?;
        let node = nodes.get(&name).await?;
        let labels = node.metadata.labels.clone().unwrap_or_default();
        ensure!(
            !labels.contains_key("node-pool")
                && labels.get("tier").map(String::as_str) == Some("b")
        );
        let spec_now = node.spec.clone().unwrap_or_default();
        ensure!(spec_now.unschedulable == Some(true));
        let taints = spec_now.taints.unwrap_or_default();
        ensure!(taints.iter().any(|t| t.key == "maintenance"), "{taints:?}");
        ensure!(
            taints.iter().any(|t| t.key == "kruise-rs.io/test"),
            "{taints:?}"
        );
        let allocatable = node.status.and_then(|s| s.allocatable).unwrap_or_default();
        ensure!(
            allocatable.get("cpu").map(|q| q.0.as_str()) == Some("4"),
            "{allocatable:?}"
        );
        fleet::untaint_node(&client, &name, "maintenance").await?;
        fleet::set_unschedulable(&client, &name, false).await?;
        let node = nodes.get(&name).await?;
        ensure!(node.spec.as_ref().and_then(|s| s.unschedulable).is_none());
        // Heartbeats keep it Ready after the changes.
        fleet::wait_node_ready(&client, &name).await?;

        // Removing the node deletes the Node object; the simulator stops serving it.
        fleet::remove_node(&client, &name).await?;
        ensure!(nodes.get_opt(&name).await?.is_none());
        Ok(())
    })
    .await
}

/// A Pod bound to a node where another Pod already holds a host port it asks for is rejected by the
/// node, as the kubelet's admission does: phase Failed, reason `NodePorts`, no container started. The
/// same Pod on another node runs. (Bound with `nodeName`: the scheduler would have avoided the node.)
#[tokio::test]
async fn a_taken_host_port_gets_the_pod_rejected_by_the_node() -> anyhow::Result<()> {
    let bed = testbed();
    let ns = bed.namespace("hostport").await?;
    ns.run(async {
        let pod = |name: &str, node: &str| {
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "labels": {"app": "hostport"}},
                "spec": {"nodeName": node, "containers": [{
                    "name": "web", "image": "nginx:alpine",
                    "ports": [{"containerPort": 80, "hostPort": 31917}],
                }]},
            })
            .to_string()
        };
        let api: Api<Pod> = ns.api();
        ns.apply(&pod("first", "sim-0")).await?;
        eventually("first Ready", TIMEOUT, || async {
            Ok(is_ready(&api.get("first").await?).then_some(()))
        })
        .await?;
        ns.apply(&pod("second", "sim-0")).await?;
        ns.apply(&pod("elsewhere", "sim-1")).await?;
        let second = eventually("second rejected by sim-0", TIMEOUT, || async {
            let p = api.get("second").await?;
            Ok((phase(&p) == "Failed").then_some(p))
        })
        .await?;
        let status = second.status.clone().unwrap_or_default();
        ensure!(status.reason.as_deref() == Some("NodePorts"), "{status:?}");
        ensure!(
            status
                .message
                .as_deref()
                .is_some_and(|m| m.contains("31917/TCP")),
            "{status:?}"
        );
        ensure!(
            status.container_statuses.unwrap_or_default().is_empty(),
            "a container of the rejected Pod started"
        );
        eventually("elsewhere Ready on sim-1", TIMEOUT, || async {
            Ok(is_ready(&api.get("elsewhere").await?).then_some(()))
        })
        .await?;
        ensure!(is_ready(&api.get("first").await?), "first lost its port");
        Ok(())
    })
    .await
}

/// kubelet-sim's lifecycle hooks: a container whose postStart hook runs `sleep 2` holds the start of
/// the containers after it, so "start B only after A is running" orderings can be observed.
#[tokio::test]
async fn post_start_sleep_holds_the_next_container() -> anyhow::Result<()> {
    let bed = testbed();
    let ns = bed.namespace("poststart").await?;
    ns.run(async {
        ns.apply(
            &json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "ordered"},
                "spec": {"containers": [
                    {"name": "a", "image": "nginx:alpine",
                     "lifecycle": {"postStart": {"exec": {"command": ["sh", "-c", "sleep 2"]}}}},
                    {"name": "b", "image": "busybox:1.36"},
                ]},
            })
            .to_string(),
        )
        .await?;
        let api: Api<Pod> = ns.api();
        let pod = eventually("ordered Ready", TIMEOUT, || async {
            let p = api.get("ordered").await?;
            Ok(is_ready(&p).then_some(p))
        })
        .await?;
        let started = |c: &str| {
            container_status(&pod, c)
                .and_then(|s| s.state)
                .and_then(|s| s.running)
                .and_then(|r| r.started_at)
                .map(|t| t.0)
                .with_context(|| format!("{c} running"))
        };
        let gap = started("b")?.duration_since(started("a")?);
        // startedAt has second precision: 2 s after, give or take the rounding.
        ensure!(
            gap >= k8s_openapi::jiff::SignedDuration::from_secs(1),
            "b started {gap:?} after a"
        );
        Ok(())
    })
    .await
}
