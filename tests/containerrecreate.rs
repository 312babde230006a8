//! ContainerRecreateRequest end to end on real nodes: real kubelets with containerd, one kruise-daemon
//! per node (on that node's containerd socket, as the chart's DaemonSet), the manager's controller and
//! webhook. A user creates a request for a Pod's containers and sees exactly those containers restarted
//! by the kubelet (new container ID, restartCount + 1), the Pod itself (UID, IP) and its other
//! containers untouched, the preStop hook run before the stop, the order honoured, the deadline and the
//! TTL applied.

use std::time::Duration;

use anyhow::{Context, ensure};
use k8s_openapi::api::core::v1::Pod;
use kruise_api::containerrecreaterequest::{self as crr, ContainerRecreateRequest};
use kruise_e2e::real_node_kit::{
    create_ready_pod, in_namespace_with_node_logs, on_real_nodes, started_at, status_of,
};
use kruise_e2e::{is_ready, pod_ip};
use kruise_testkit::{TestBed, TestNamespace, eventually, testbed_with_real_nodes};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const REAL_NODES: usize = 2;
const TIMEOUT: Duration = Duration::from_secs(120);

fn bed() -> &'static TestBed {
    let bed = testbed_with_real_nodes(REAL_NODES);
    bed.manager_with(&kruise_testkit::manager::ManagerOptions {
        extra_args: vec!["--feature-gates=SidecarTerminator=true".into()],
        ..Default::default()
    });
    bed.daemons();
    bed
}

/// A bare Pod on a real node: `app` (nginx, ready on port 80, a preStop hook writing to a shared
/// emptyDir) and `sidecar` (a shell sleeping).
fn two_container_pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": on_real_nodes()["nodeSelector"],
            "terminationGracePeriodSeconds": 5,
            "containers": [
                {
                    "name": "app",
                    "image": "nginx:alpine",
                    "readinessProbe": {"tcpSocket": {"port": 80}, "periodSeconds": 1},
                    "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", "echo preStop >> /data/hooks"]}}},
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                },
                {
                    "name": "sidecar",
                    "image": "busybox:1.36",
                    "command": ["/bin/sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                },
            ],
            "volumes": [{"name": "data", "emptyDir": {}}],
        }
    })
}

async fn create_crr(ns: &TestNamespace, doc: Value) -> anyhow::Result<ContainerRecreateRequest> {
    let api: Api<ContainerRecreateRequest> = ns.api();
    let request: ContainerRecreateRequest = serde_json::from_value(doc)?;
    Ok(api.create(&PostParams::default(), &request).await?)
}

fn crr_doc(name: &str, pod: &str, containers: &[&str], rest: Value) -> Value {
    let mut doc = json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "ContainerRecreateRequest",
        "metadata": {"name": name},
        "spec": {
            "podName": pod,
            "containers": containers.iter().map(|c| json!({"name": c})).collect::<Vec<_>>(),
        }
    });
    if let (Some(spec), Some(rest)) = (doc["spec"].as_object_mut(), rest.as_object()) {
        for (k, v) in rest {
            spec.insert(k.clone(), v.clone());
        }
    }
    doc
}

async fn wait_completed(
    ns: &TestNamespace,
    name: &str,
) -> anyhow::Result<ContainerRecreateRequest> {
    let api: Api<ContainerRecreateRequest> = ns.api();
    eventually(
        &format!("ContainerRecreateRequest {name} Completed"),
        TIMEOUT,
        || async {
            let request = api.get(name).await?;
            Ok((request.phase() == crr::PHASE_COMPLETED).then_some(request))
        },
    )
    .await
}

/// Pod `web` read again, checked to be the same Pod as `before` (its containers were recreated in
/// place, not the Pod).
async fn same_web_pod(ns: &TestNamespace, before: &Pod) -> anyhow::Result<Pod> {
    let after = ns.api::<Pod>().get("web").await?;
    ensure!(
        after.metadata.uid == before.metadata.uid,
        "the Pod was recreated"
    );
    Ok(after)
}

/// The request's `status.message` (empty without a status).
fn status_message(request: &ContainerRecreateRequest) -> String {
    request
        .status
        .as_ref()
        .map(|s| s.message.clone())
        .unwrap_or_default()
}

fn states(request: &ContainerRecreateRequest) -> Vec<(String, String, bool)> {
    request
        .status
        .iter()
        .flat_map(|s| s.container_recreate_states.iter())
        .map(|s| (s.name.clone(), s.phase.clone(), s.is_killed))
        .collect()
}

/// A request for `app` restarts exactly `app`: new container ID, restartCount 1, the preStop hook ran
/// first; the Pod (UID, IP) and `sidecar` are untouched; the request is deactivated and removed by its
/// TTL.
#[tokio::test]
async fn recreates_only_the_named_container() -> anyhow::Result<()> {
    let bed = bed();
    in_namespace_with_node_logs(bed, "crr-one", async |ns| {
        let before = create_ready_pod(ns, &two_container_pod("web"), TIMEOUT).await?;
        let app = status_of(&before, "app")?;
        let sidecar = status_of(&before, "sidecar")?;
        let created = create_crr(
            ns,
            crr_doc(
                "restart-app",
                "web",
                &["app"],
                json!({
                    "strategy": {"minStartedSeconds": 2},
                    "ttlSecondsAfterFinished": 5,
                }),
            ),
        )
        .await?;
        // What the webhook wrote.
        let labels = created.labels();
        ensure!(
            labels.get(crr::LABEL_POD_UID) == before.metadata.uid.as_ref(),
            "pod-uid label: {labels:?}"
        );
        ensure!(
            labels.get(crr::LABEL_NODE_NAME)
                == before.spec.as_ref().and_then(|s| s.node_name.as_ref()),
            "node-name label"
        );
        ensure!(
            labels.get(crr::LABEL_ACTIVE).map(String::as_str) == Some("true"),
            "active label"
        );
        ensure!(created.strategy().failure_policy == "Fail");
        ensure!(created.strategy().termination_grace_period_seconds == Some(5));
        let context = created.spec.containers[0]
            .status_context
            .clone()
            .context("statusContext")?;
        ensure!(
            Some(&context.container_id) == app.container_id.as_ref(),
            "statusContext {context:?}"
        );
        ensure!(
            created.spec.containers[0]
                .pre_stop
                .as_ref()
                .is_some_and(|p| p.exec.is_some()),
            "preStop copied"
        );

        let done = wait_completed(ns, "restart-app").await?;
        ensure!(
            done.status
                .as_ref()
                .is_some_and(|s| s.completion_time.is_some() && s.message.is_empty()),
            "status {:?}",
            done.status
        );
        ensure!(
            states(&done) == [("app".to_owned(), crr::PHASE_SUCCEEDED.to_owned(), true)],
            "states {:?}",
            states(&done)
        );

        let after = same_web_pod(ns, &before).await?;
        ensure!(pod_ip(&after) == pod_ip(&before), "the Pod IP changed");
        ensure!(is_ready(&after), "the Pod is not ready");
        let new_app = status_of(&after, "app")?;
        ensure!(
            new_app.container_id != app.container_id,
            "app keeps its container {:?}",
            app.container_id
        );
        ensure!(
            new_app.restart_count == app.restart_count + 1,
            "app restartCount {}",
            new_app.restart_count
        );
        let completed = done
            .status
            .as_ref()
            .and_then(|s| s.completion_time.as_ref())
            .map(|t| t.0);
        if let (Some(completed), Some(started)) = (completed, started_at(&new_app)) {
            ensure!(
                completed.duration_since(started).as_secs_f64() >= 1.0,
                "completed {completed} before minStartedSeconds after {started}"
            );
        }
        let new_sidecar = status_of(&after, "sidecar")?;
        ensure!(
            new_sidecar.container_id == sidecar.container_id
                && new_sidecar.restart_count == sidecar.restart_count,
            "sidecar was touched"
        );
        let hooks = ns
            .kubectl(&["exec", "web", "-c", "sidecar", "--", "cat", "/data/hooks"])
            .await?;
        ensure!(hooks.trim() == "preStop", "preStop hook output {hooks:?}");
        // The daemon of the Pod's node did it, and says so in its metrics.
        let node = after
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        let daemon = bed
            .daemons()
            .iter()
            .find(|d| d.node == node)
            .context("the node's daemon")?;
        let (code, metrics) = kruise_testkit::daemon::http_get(daemon, "/metrics").await?;
        let recreated = metrics
            .lines()
            .find_map(|l| l.strip_prefix("kruise_daemon_containers_recreated_total "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0);
        ensure!(
            code == 200 && recreated >= 1.0,
            "daemon metrics ({code}): {metrics}"
        );

        let requests: Api<ContainerRecreateRequest> = ns.api();
        eventually("active label removed", TIMEOUT, || async {
            let r = requests.get("restart-app").await?;
            Ok((!r.labels().contains_key(crr::LABEL_ACTIVE)).then_some(()))
        })
        .await?;
        eventually("deleted by ttlSecondsAfterFinished", TIMEOUT, || async {
            Ok(requests
                .get_opt("restart-app")
                .await?
                .is_none()
                .then_some(()))
        })
        .await?;
        Ok(())
    })
    .await
}

/// orderedRecreate: `sidecar` is stopped only once `app`'s new container has run for
/// minStartedSeconds and is ready, so it starts at least that much later.
#[tokio::test]
async fn ordered_recreate_waits_for_the_previous_container() -> anyhow::Result<()> {
    in_namespace_with_node_logs(bed(), "crr-order", async |ns| {
        let before = create_ready_pod(ns, &two_container_pod("web"), TIMEOUT).await?;
        create_crr(
            ns,
            crr_doc(
                "ordered",
                "web",
                &["app", "sidecar"],
                json!({
                    "strategy": {"orderedRecreate": true, "minStartedSeconds": 3},
                }),
            ),
        )
        .await?;
        let done = wait_completed(ns, "ordered").await?;
        ensure!(
            states(&done)
                == [
                    ("app".to_owned(), crr::PHASE_SUCCEEDED.to_owned(), true),
                    ("sidecar".to_owned(), crr::PHASE_SUCCEEDED.to_owned(), true),
                ],
            "states {:?}",
            states(&done)
        );
        let after = same_web_pod(ns, &before).await?;
        let app = status_of(&after, "app")?;
        let sidecar = status_of(&after, "sidecar")?;
        ensure!(
            app.restart_count == 1 && sidecar.restart_count == 1,
            "restart counts {} {}",
            app.restart_count,
            sidecar.restart_count
        );
        let (a, s) = (
            started_at(&app).context("app start")?,
            started_at(&sidecar).context("sidecar start")?,
        );
        ensure!(
            s.duration_since(a).as_secs_f64() >= 3.0,
            "sidecar started at {s}, app at {a}: not in order"
        );
        Ok(())
    })
    .await
}

/// The webhook refuses what upstream's refuses; a request still held by its unready grace period past
/// its activeDeadlineSeconds is completed by the manager with upstream's message, the containers
/// untouched; a request whose Pod goes away completes as "pod has gone".
#[tokio::test]
async fn webhook_checks_deadline_and_pod_gone() -> anyhow::Result<()> {
    in_namespace_with_node_logs(bed(), "crr-deadline", async |ns| {
        let before = create_ready_pod(ns, &two_container_pod("web"), TIMEOUT).await?;
        let refused = |doc: Value, want: &'static str| async move {
            match create_crr(ns, doc).await {
                Ok(_) => anyhow::bail!("admitted; expected {want:?}"),
                Err(error) => {
                    ensure!(
                        error.to_string().contains(want),
                        "{error} does not say {want:?}"
                    );
                    Ok(())
                }
            }
        };
        refused(
            crr_doc(
                "bad",
                "web",
                &["app"],
                json!({"strategy": {"failurePolicy": "Retry"}}),
            ),
            "unknown failurePolicy Retry",
        )
        .await?;
        refused(
            crr_doc("bad", "nope", &["app"], json!({})),
            "no found Pod named nope",
        )
        .await?;
        refused(
            crr_doc("bad", "web", &["nope"], json!({})),
            "container nope not found in Pod",
        )
        .await?;
        refused(
            crr_doc("bad", "web", &["app"], json!({"activeDeadlineSeconds": 1})),
            "activeDeadlineSeconds can not be less than 3s",
        )
        .await?;

        let held = create_crr(
            ns,
            crr_doc(
                "held",
                "web",
                &["app"],
                json!({
                    "activeDeadlineSeconds": 4,
                    "strategy": {"unreadyGracePeriodSeconds": 600},
                }),
            ),
        )
        .await?;
        let requests: Api<ContainerRecreateRequest> = ns.api();
        let spec_change = json!({"spec": {"activeDeadlineSeconds": 100}});
        let changed = requests
            .patch(
                &held.metadata.name.clone().unwrap_or_default(),
                &PatchParams::default(),
                &Patch::Merge(&spec_change),
            )
            .await;
        ensure!(
            changed.as_ref().is_err_and(|e| e
                .to_string()
                .contains("spec of ContainerRecreateRequest is immutable")),
            "spec update: {changed:?}"
        );
        let done = wait_completed(ns, "held").await?;
        let message = status_message(&done);
        ensure!(
            message == "recreating has exceeded the activeDeadlineSeconds",
            "message {message:?}"
        );
        ensure!(
            done.annotation(crr::UNREADY_ACQUIRED).is_some(),
            "unready-acquired not stamped"
        );
        let api: Api<Pod> = ns.api();
        let after = api.get("web").await?;
        ensure!(
            status_of(&after, "app")?.container_id == status_of(&before, "app")?.container_id,
            "app was stopped"
        );

        create_crr(
            ns,
            crr_doc(
                "orphan",
                "web",
                &["app"],
                json!({"strategy": {"unreadyGracePeriodSeconds": 600}}),
            ),
        )
        .await?;
        api.delete("web", &Default::default()).await?;
        let gone = wait_completed(ns, "orphan").await?;
        let message = status_message(&gone);
        ensure!(message == "pod has gone", "message {message:?}");
        Ok(())
    })
    .await
}

/// SidecarTerminator: a Pod with restartPolicy Never whose main container exits finishes, because its
/// sidecar (`KRUISE_TERMINATE_SIDECAR_WHEN_JOB_EXIT=true`) is stopped by a ContainerRecreateRequest the
/// manager creates and the node's daemon executes.
#[tokio::test]
async fn sidecar_terminator_lets_a_job_pod_finish() -> anyhow::Result<()> {
    in_namespace_with_node_logs(bed(), "crr-sidecar", async |ns| {
        let doc = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "job"},
            "spec": {
                "nodeSelector": on_real_nodes()["nodeSelector"],
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 5,
                "containers": [
                    {"name": "main", "image": "busybox:1.36", "command": ["/bin/sh", "-c", "sleep 2; exit 0"]},
                    {
                        "name": "sidecar",
                        "image": "busybox:1.36",
                        "command": ["/bin/sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"],
                        "env": [{"name": "KRUISE_TERMINATE_SIDECAR_WHEN_JOB_EXIT", "value": "true"}],
                    },
                ],
            }
        });
        let api: Api<Pod> = ns.api();
        api.create(&PostParams::default(), &serde_json::from_value(doc)?)
            .await?;
        let pod = eventually("the job Pod Succeeded", TIMEOUT, || async {
            let pod = api.get("job").await?;
            let phase = pod.status.as_ref().and_then(|s| s.phase.clone());
            Ok((phase.as_deref() == Some("Succeeded")).then_some(pod))
        })
        .await?;
        let sidecar = status_of(&pod, "sidecar")?;
        let exit = sidecar.state.and_then(|s| s.terminated).map(|t| t.exit_code);
        ensure!(exit == Some(0), "sidecar exit {exit:?}");
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let requests: Api<ContainerRecreateRequest> = ns.api();
        let request = requests
            .get_opt(&format!("sidecar-termination-{uid}"))
            .await?
            .context("the SidecarTerminator's ContainerRecreateRequest")?;
        ensure!(request.strategy().force_recreate && request.strategy().failure_policy == "Ignore");
        Ok(())
    })
    .await
}
