//! Env from Pod metadata on real nodes (gate `InPlaceUpdateEnvFromMetadata`, on by default): a
//! CloneSet whose container reads a Pod label through the downward API. Changing that label in the
//! template updates the Pod in place, and kruise-daemon restarts exactly the container that reads it:
//! its restartCount goes to 1 and its env shows the new value, while the other container, the Pod's UID,
//! IP and node stay as they were. The daemon's `apps.kruise.io/runtime-containers-meta` report shows the
//! new container.

use kruise_e2e::real_node_kit::in_namespace_with_node_logs;
use std::time::Duration;

use anyhow::{Context, ensure};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kruise_e2e::cloneset_kit::{self, wait_converged};
use kruise_e2e::{container_status, node_name, pod_ip};
use kruise_testkit::realnode::REAL_NODE_LABEL;
use kruise_testkit::{TestBed, TestNamespace, eventually, testbed_with_real_nodes};
use kube::api::{Api, ListParams};
use serde_json::{Value, json};

const REAL_NODES: usize = 1;
const TIMEOUT: Duration = Duration::from_secs(120);
const META: &str = "apps.kruise.io/runtime-containers-meta";

fn bed() -> &'static TestBed {
    let bed = testbed_with_real_nodes(REAL_NODES);
    bed.manager();
    bed.daemons();
    bed
}

/// A CloneSet on the real nodes: `app` prints the label `test-env` it reads through the downward API
/// and sleeps; `sidecar` only sleeps.
fn cloneset(name: &str) -> Value {
    let sleep = "trap 'exit 0' TERM; while true; do sleep 1; done";
    cloneset_kit::cloneset(
        name,
        1,
        "busybox:1.36",
        json!({
            "updateStrategy": {"rollingUpdate": {"podUpdatePolicy": "InPlaceIfPossible"}},
            "template": {
                "metadata": {"labels": {"test-env": "foo"}},
                "spec": {
                    "nodeSelector": {REAL_NODE_LABEL: "true"},
                    "terminationGracePeriodSeconds": 3,
                    "containers": [
                        {
                            "name": "app",
                            "image": "busybox:1.36",
                            "command": ["/bin/sh", "-c", format!("echo TEST_ENV=$TEST_ENV; {sleep}")],
                            "env": [{
                                "name": "TEST_ENV",
                                "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['test-env']"}},
                            }],
                        },
                        {
                            "name": "sidecar",
                            "image": "busybox:1.36",
                            "command": ["/bin/sh", "-c", sleep],
                        },
                    ],
                },
            },
        }),
    )
}

fn status_of(pod: &Pod, container: &str) -> anyhow::Result<ContainerStatus> {
    container_status(pod, container).with_context(|| format!("no status for container {container}"))
}

async fn only_pod(ns: &TestNamespace, name: &str) -> anyhow::Result<Pod> {
    let api: Api<Pod> = ns.api();
    let pods = api
        .list(&ListParams::default().labels(&format!("app={name}")))
        .await?;
    let mut pods = pods.items;
    ensure!(pods.len() == 1, "{} Pods", pods.len());
    Ok(pods.remove(0))
}

/// The container ID the daemon reports for `container`.
fn reported_id(pod: &Pod, container: &str) -> Option<String> {
    let meta: Value = serde_json::from_str(cloneset_kit::annotation(pod, META)?).ok()?;
    meta["containers"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == container)
        .and_then(|c| c["containerID"].as_str())
        .map(str::to_owned)
}

#[tokio::test]
async fn a_changed_label_restarts_only_the_container_that_reads_it() -> anyhow::Result<()> {
    in_namespace_with_node_logs(bed(), "envmeta", async |ns| {
        cloneset_kit::apply(ns, &cloneset("web")).await?;
        wait_converged(ns, "web", 1, TIMEOUT).await?;
        // The daemon reports the Pod's containers before anything changes.
        let before = eventually("runtime-containers-meta reported", TIMEOUT, || async {
            let pod = only_pod(ns, "web").await?;
            let app = status_of(&pod, "app")?;
            Ok((reported_id(&pod, "app") == app.container_id).then_some(pod))
        })
        .await?;
        let app = status_of(&before, "app")?;
        let sidecar = status_of(&before, "sidecar")?;
        let log = ns
            .kubectl(&["logs", &cloneset_kit::name(&before), "-c", "app"])
            .await?;
        ensure!(log.contains("TEST_ENV=foo"), "app's log: {log}");

        cloneset_kit::merge_patch(
            ns,
            "cloneset",
            "web",
            &json!({"spec": {"template": {"metadata": {"labels": {"test-env": "bar"}}}}}),
        )
        .await?;
        let after = eventually("app restarted with test-env=bar", TIMEOUT, || async {
            let pod = only_pod(ns, "web").await?;
            let app = status_of(&pod, "app")?;
            let label = cloneset_kit::label(&pod, "test-env");
            Ok((label == Some("bar") && app.restart_count == 1 && app.ready).then_some(pod))
        })
        .await?;
        wait_converged(ns, "web", 1, TIMEOUT).await?;

        let new_app = status_of(&after, "app")?;
        let new_sidecar = status_of(&after, "sidecar")?;
        ensure!(
            cloneset_kit::uid(&after) == cloneset_kit::uid(&before),
            "same Pod"
        );
        ensure!(pod_ip(&after) == pod_ip(&before), "same IP");
        ensure!(node_name(&after) == node_name(&before), "same node");
        ensure!(
            new_app.container_id != app.container_id,
            "app is a new container"
        );
        ensure!(new_sidecar.restart_count == 0, "sidecar not restarted");
        ensure!(
            new_sidecar.container_id == sidecar.container_id,
            "sidecar is the same container"
        );
        let log = ns
            .kubectl(&["logs", &cloneset_kit::name(&after), "-c", "app"])
            .await?;
        ensure!(
            log.contains("TEST_ENV=bar"),
            "app's log after the update: {log}"
        );
        let env = ns
            .kubectl(&[
                "exec",
                &cloneset_kit::name(&after),
                "-c",
                "app",
                "--",
                "env",
            ])
            .await?;
        ensure!(env.contains("TEST_ENV=bar"), "env: {env}");
        // The update is complete: the state says env from metadata, the report shows the new app.
        let pod = eventually("report of the new container", TIMEOUT, || async {
            let pod = only_pod(ns, "web").await?;
            Ok((reported_id(&pod, "app") == new_app.container_id).then_some(pod))
        })
        .await?;
        let state = cloneset_kit::annotation(&pod, cloneset_kit::IN_PLACE_UPDATE_STATE)
            .context("in-place update state")?;
        ensure!(
            state.contains("\"updateEnvFromMetadata\":true"),
            "state: {state}"
        );
        Ok(())
    })
    .await
}
