//! PodProbeMarker end to end on real nodes: real kubelets with containerd, one kruise-daemon per node
//! (on that node's containerd socket), the manager's PodProbeMarker and NodePodProbe controllers and the
//! validating webhook. A user creates a PodProbeMarker whose exec probe succeeds once a file exists in
//! the container, and sees the Pod's condition and the marker's labels/annotations follow the probe as
//! the file comes and goes; deleting the marker removes its probes from the node's NodePodProbe.

use kruise_e2e::real_node_kit::{create_ready_pod, in_namespace_with_node_logs};
use std::time::Duration;

use anyhow::{Context, ensure};
use k8s_openapi::api::core::v1::Pod;
use kruise_api::podprobemarker::{self as ppm, NodePodProbe, PodProbeMarker};
use kruise_e2e::{node_name, pod_condition};
use kruise_testkit::realnode::REAL_NODE_LABEL;
use kruise_testkit::{TestBed, TestNamespace, eventually, testbed_with_real_nodes};
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

const REAL_NODES: usize = 2;
const TIMEOUT: Duration = Duration::from_secs(120);
const CONDITION: &str = "game.kruise.io/healthy";
const COST: &str = "controller.kubernetes.io/pod-deletion-cost";

fn bed() -> &'static TestBed {
    let bed = testbed_with_real_nodes(REAL_NODES);
    bed.manager();
    bed.daemons();
    bed
}

/// A bare Pod on a real node whose container `main` is a shell that sleeps.
fn pod_doc(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "probed"}},
        "spec": {
            "nodeSelector": {REAL_NODE_LABEL: "true"},
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main",
                "image": "busybox:1.36",
                "command": ["/bin/sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"],
            }],
        }
    })
}

/// The marker: an exec probe `cat /tmp/healthy` every second; Succeeded sets label `healthy=true` and
/// deletion cost 10, Failed sets deletion cost -10.
fn marker_doc(name: &str) -> Value {
    json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "PodProbeMarker",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": "probed"}},
            "probes": [{
                "name": "healthy",
                "containerName": "main",
                "probe": {"exec": {"command": ["cat", "/tmp/healthy"]}, "periodSeconds": 1},
                "podConditionType": CONDITION,
                "markerPolicy": [
                    {"state": "Succeeded", "labels": {"healthy": "true"}, "annotations": {COST: "10"}},
                    {"state": "Failed", "annotations": {COST: "-10"}},
                ],
            }],
        }
    })
}

async fn exec(ns: &TestNamespace, pod: &str, command: &[&str]) -> anyhow::Result<String> {
    let mut args = vec!["exec", pod, "-c", "main", "--"];
    args.extend_from_slice(command);
    ns.kubectl(&args).await
}

fn label<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// Waits until the Pod's probe condition has `status` and `check` accepts the Pod.
async fn wait_pod(
    ns: &TestNamespace,
    name: &str,
    status: &str,
    what: &str,
    check: impl Fn(&Pod) -> bool,
) -> anyhow::Result<Pod> {
    let api: Api<Pod> = ns.api();
    eventually(&format!("Pod {name}: {what}"), TIMEOUT, || async {
        let pod = api.get(name).await?;
        let condition = pod_condition(&pod, CONDITION).map(|c| c.status.clone());
        Ok((condition.as_deref() == Some(status) && check(&pod)).then_some(pod))
    })
    .await
}

/// The probe flips the Pod's condition and the marker's labels/annotations follow it both ways; the
/// node's NodePodProbe carries the probe (with the Pod's IP) and its state; deleting the marker takes
/// its probes out of the NodePodProbe and lets the marker go.
#[tokio::test]
async fn exec_probe_flips_the_condition_and_the_markers_follow() -> anyhow::Result<()> {
    in_namespace_with_node_logs(bed(), "ppm-exec", async |ns| {
        let pod = create_ready_pod(ns, &pod_doc("probed"), TIMEOUT).await?;
        let node = node_name(&pod).context("Pod not bound")?;
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let markers: Api<PodProbeMarker> = ns.api();
        let created: PodProbeMarker = serde_json::from_value(marker_doc("ppm"))?;
        markers.create(&PostParams::default(), &created).await?;

        // The marker gets its finalizer and counts the Pod; the node's NodePodProbe lists the
        // probe for the Pod, with its IP.
        eventually("PodProbeMarker processed", TIMEOUT, || async {
            let m = markers.get("ppm").await?;
            let processed = m.finalizers().iter().any(|f| f == ppm::FINALIZER)
                && m.status.as_ref().is_some_and(|s| {
                    s.matched_pods == 1
                        && s.observed_generation == m.metadata.generation.unwrap_or(0)
                });
            Ok(processed.then_some(()))
        })
        .await?;
        let npps: Api<NodePodProbe> = Api::all(ns.client.clone());
        let npp = eventually("NodePodProbe lists the probe", TIMEOUT, || async {
            let npp = npps.get(&node).await?;
            let listed = npp.spec.pod_probes.iter().any(|p| {
                p.uid == uid
                    && !p.ip.is_empty()
                    && p.probes
                        .iter()
                        .any(|c| c.name == "ppm#healthy" && c.container_name == "main")
            });
            Ok(listed.then_some(npp))
        })
        .await?;
        ensure!(
            npp.spec
                .pod_probes
                .iter()
                .all(|p| p.namespace != ns.name || p.uid == uid),
            "only the probed Pod: {:?}",
            npp.spec
        );

        // No file yet: the probe fails.
        let failed = wait_pod(ns, "probed", "False", "Failed markers", |p| {
            annotation(p, COST) == Some("-10") && label(p, "healthy").is_none()
        })
        .await?;
        ensure!(
            failed.metadata.uid.as_deref() == Some(uid.as_str()),
            "the Pod was not replaced"
        );

        // The file appears: the probe succeeds, the Succeeded markers replace the Failed ones.
        exec(ns, "probed", &["touch", "/tmp/healthy"]).await?;
        wait_pod(ns, "probed", "True", "Succeeded markers", |p| {
            annotation(p, COST) == Some("10") && label(p, "healthy") == Some("true")
        })
        .await?;
        let npp = npps.get(&node).await?;
        let state = npp
            .status
            .iter()
            .flat_map(|s| &s.pod_probe_statuses)
            .filter(|s| s.uid == uid)
            .flat_map(|s| &s.probe_states)
            .find(|s| s.name == "ppm#healthy")
            .context("no probe state in the NodePodProbe status")?;
        ensure!(
            state.state == ppm::PROBE_SUCCEEDED
                && state.last_probe_time.is_some()
                && state.last_transition_time.is_some(),
            "probe state {state:?}"
        );

        // The file goes: back to Failed; the Succeeded label is removed.
        exec(ns, "probed", &["rm", "/tmp/healthy"]).await?;
        wait_pod(ns, "probed", "False", "Failed markers again", |p| {
            annotation(p, COST) == Some("-10") && label(p, "healthy").is_none()
        })
        .await?;

        // Deleting the marker removes its probe from the NodePodProbe, then the marker.
        markers.delete("ppm", &Default::default()).await?;
        eventually("PodProbeMarker deleted", TIMEOUT, || async {
            Ok(markers.get_opt("ppm").await?.is_none().then_some(()))
        })
        .await?;
        let npp = npps.get(&node).await?;
        ensure!(
            npp.spec.pod_probes.iter().all(|p| p.uid != uid),
            "probe left in the NodePodProbe: {:?}",
            npp.spec
        );
        Ok(())
    })
    .await
}

/// Every ready real node gets a NodePodProbe; the webhook refuses a marker upstream refuses, with
/// upstream's message.
#[tokio::test]
async fn one_node_pod_probe_per_node_and_invalid_markers_refused() -> anyhow::Result<()> {
    in_namespace_with_node_logs(bed(), "ppm-nodes", async |ns| {
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(ns.client.clone());
        let npps: Api<NodePodProbe> = Api::all(ns.client.clone());
        eventually("a NodePodProbe per ready node", TIMEOUT, || async {
            let ready: Vec<String> = nodes
                .list(&Default::default())
                .await?
                .items
                .iter()
                .filter(|n| kruise_e2e::node_ready_status(n).as_deref() == Some("True"))
                .filter_map(|n| n.metadata.name.clone())
                .collect();
            let have: Vec<String> = npps
                .list(&Default::default())
                .await?
                .items
                .iter()
                .filter_map(|n| n.metadata.name.clone())
                .collect();
            Ok(ready.iter().all(|n| have.contains(n)).then_some(()))
        })
        .await?;

        let markers: Api<PodProbeMarker> = ns.api();
        let mut bad = marker_doc("bad");
        bad["spec"]["probes"][0]["name"] = json!("a#b");
        let bad: PodProbeMarker = serde_json::from_value(bad)?;
        let refused = markers
            .create(&PostParams::default(), &bad)
            .await
            .err()
            .context("a probe name with '#' was accepted")?;
        ensure!(
            refused
                .to_string()
                .contains("probe name can't contains '#'."),
            "refusal: {refused}"
        );
        Ok(())
    })
    .await
}

/// tcpSocket (by the container port's name, resolved by the manager) and httpGet probes, run by the
/// node's daemon against the Pod's IP: both succeed against a web server; moving its `index.html` away
/// fails the HTTP probe only, and putting it back makes it succeed again.
#[tokio::test]
async fn tcp_and_http_probes_reach_the_pod() -> anyhow::Result<()> {
    in_namespace_with_node_logs(bed(), "ppm-net", async |ns| {
        let web = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {
                "nodeSelector": {REAL_NODE_LABEL: "true"},
                "terminationGracePeriodSeconds": 1,
                "containers": [{
                    "name": "main",
                    "image": "nginx:1.15.1",
                    "ports": [{"name": "http", "containerPort": 80}],
                }],
            }
        });
        let pod = create_ready_pod(ns, &web, TIMEOUT).await?;
        let node = node_name(&pod).context("Pod not bound")?;
        let marker = json!({
            "apiVersion": "apps.kruise.io/v1alpha1",
            "kind": "PodProbeMarker",
            "metadata": {"name": "net"},
            "spec": {
                "selector": {"matchLabels": {"app": "web"}},
                "probes": [
                    {
                        "name": "tcp",
                        "containerName": "main",
                        "probe": {"tcpSocket": {"port": "http"}, "periodSeconds": 1},
                        "podConditionType": "game.kruise.io/tcp",
                    },
                    {
                        "name": "http",
                        "containerName": "main",
                        "probe": {
                            "httpGet": {"path": "/index.html", "port": 80, "scheme": "HTTP"},
                            "periodSeconds": 1,
                        },
                        "podConditionType": "game.kruise.io/http",
                        "markerPolicy": [{"state": "Succeeded", "labels": {"web": "serving"}}],
                    },
                ],
            }
        });
        let markers: Api<PodProbeMarker> = ns.api();
        markers
            .create(&PostParams::default(), &serde_json::from_value(marker)?)
            .await?;
        let npps: Api<NodePodProbe> = Api::all(ns.client.clone());
        let npp = eventually("both probes in the NodePodProbe", TIMEOUT, || async {
            let npp = npps.get(&node).await?;
            Ok((npp
                .spec
                .pod_probes
                .iter()
                .filter(|p| p.namespace == ns.name)
                .flat_map(|p| &p.probes)
                .count()
                == 2)
                .then_some(npp))
        })
        .await?;
        let tcp = npp
            .spec
            .pod_probes
            .iter()
            .flat_map(|p| &p.probes)
            .find(|p| p.name == "net#tcp")
            .and_then(|p| p.probe.tcp_socket.clone())
            .context("tcp probe")?;
        ensure!(
            tcp.port == k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(80),
            "the named port is resolved: {tcp:?}"
        );

        let api: Api<Pod> = ns.api();
        let both = |tcp: &'static str, http: &'static str| {
            let api = api.clone();
            move || {
                let api = api.clone();
                async move {
                    let pod = api.get("web").await?;
                    let status = |t: &str| pod_condition(&pod, t).map(|c| c.status.clone());
                    Ok((status("game.kruise.io/tcp").as_deref() == Some(tcp)
                        && status("game.kruise.io/http").as_deref() == Some(http))
                    .then_some(pod))
                }
            }
        };
        let pod = eventually("tcp and http probes succeed", TIMEOUT, both("True", "True")).await?;
        ensure!(
            label(&pod, "web") == Some("serving"),
            "label {:?}",
            pod.metadata.labels
        );

        exec(
            ns,
            "web",
            &["mv", "/usr/share/nginx/html/index.html", "/tmp/"],
        )
        .await?;
        let pod = eventually("the http probe fails", TIMEOUT, both("True", "False")).await?;
        ensure!(
            label(&pod, "web").is_none(),
            "label {:?}",
            pod.metadata.labels
        );
        let message = pod_condition(&pod, "game.kruise.io/http")
            .and_then(|c| c.message.clone())
            .unwrap_or_default();
        ensure!(message.contains("statuscode: 404"), "message {message:?}");

        exec(
            ns,
            "web",
            &["mv", "/tmp/index.html", "/usr/share/nginx/html/"],
        )
        .await?;
        let pod = eventually(
            "the http probe succeeds again",
            TIMEOUT,
            both("True", "True"),
        )
        .await?;
        ensure!(
            label(&pod, "web") == Some("serving"),
            "label {:?}",
            pod.metadata.labels
        );
        Ok(())
    })
    .await
}
