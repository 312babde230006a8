//! The real-node lane: what only a real kubelet can judge, on real kubelets (v1.34.10) with containerd
//! and runc (see `kruise_testkit::realnode`). An in-place update is, in the end, done by the kubelet: it
//! sees the container spec change, stops that container and starts the new image. These tests check, on
//! the real thing, what kubelet-sim claims everywhere else: same Pod (UID, IP, node), restartCount 1, a
//! new imageID and a later container start time from the runtime, the kubelet's own events, hooks that
//! really run, readiness from real probes, a pull that really fails.
//!
//! Every Pod here selects the real nodes (`kruise-rs.io/real-node=true`); the binary's simulated nodes
//! stay idle. The images are the test bed's local busybox builds, pulled from its local registry.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ContainerStatus, Event, Pod};
use kruise_e2e::cloneset_kit::{self, wait_converged};
use kruise_e2e::real_node_kit::{
    in_namespace_with_node_logs, in_place_agent_daemonset, on_real_nodes, pods_of, started_at,
    status_of, wait_all_ready,
};
use kruise_e2e::{container_status, is_ready, node_name, pod_condition, pod_ip};
use kruise_testkit::{TestBed, TestNamespace, eventually, testbed_with_real_nodes};
use kube::api::{Api, ListParams};
use serde_json::{Value, json};

/// Two real nodes: enough for a DaemonSet rollout and for Pods to spread.
const REAL_NODES: usize = 2;
/// Real containers start in about a second; pulls come from 127.0.0.1. Generous for a loaded machine.
const TIMEOUT: Duration = Duration::from_secs(120);

fn bed() -> &'static TestBed {
    let bed = testbed_with_real_nodes(REAL_NODES);
    bed.manager();
    bed
}

/// What a user compares before and after an in-place update, per Pod name.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Identity {
    uid: String,
    ip: Option<String>,
    node: Option<String>,
}

fn identities(pods: &[Pod]) -> BTreeMap<String, Identity> {
    pods.iter()
        .map(|p| {
            (
                cloneset_kit::name(p),
                Identity {
                    uid: cloneset_kit::uid(p),
                    ip: pod_ip(p),
                    node: node_name(p),
                },
            )
        })
        .collect()
}

/// Events the kubelet (source component `kubelet`) recorded about Pod `pod`.
async fn kubelet_events(ns: &TestNamespace, pod: &str) -> anyhow::Result<Vec<Event>> {
    let api: Api<Event> = ns.api();
    let events = api
        .list(&ListParams::default().fields(&format!("involvedObject.name={pod}")))
        .await?
        .items;
    Ok(events
        .into_iter()
        .filter(|e| {
            e.source
                .as_ref()
                .and_then(|s| s.component.as_deref())
                .is_some_and(|c| c == "kubelet")
                || e.reporting_component.as_deref() == Some("kubelet")
        })
        .collect())
}

/// Checks that every Pod of `after` is the Pod of `before` with the same name (UID, IP, node), with
/// `container` restarted exactly once by the runtime into `image`: restartCount 1, a new imageID, a
/// later start time, the last run ended, and the kubelet's "definition changed" event.
async fn updated_in_place_by_the_kubelet(
    ns: &TestNamespace,
    before: &[Pod],
    after: &[Pod],
    container: &str,
    image: &str,
) -> anyhow::Result<()> {
    ensure!(
        identities(before) == identities(after),
        "the Pods changed identity: before {:?}, after {:?}",
        identities(before),
        identities(after)
    );
    let old: BTreeMap<String, ContainerStatus> = before
        .iter()
        .map(|p| Ok((cloneset_kit::name(p), status_of(p, container)?)))
        .collect::<anyhow::Result<_>>()?;
    for pod in after {
        let pod_name = cloneset_kit::name(pod);
        let now = status_of(pod, container)?;
        let was = old
            .get(&pod_name)
            .with_context(|| format!("{pod_name} was not there before"))?;
        ensure!(
            now.restart_count == was.restart_count + 1,
            "{pod_name}/{container}: restartCount {} → {}",
            was.restart_count,
            now.restart_count
        );
        ensure!(
            now.image_id != was.image_id && !now.image_id.is_empty(),
            "{pod_name}/{container}: imageID {} → {}",
            was.image_id,
            now.image_id
        );
        // The runtime reports the fully qualified reference (docker.io/library/…).
        ensure!(
            now.image
                .ends_with(image.rsplit('/').next().unwrap_or(image)),
            "{pod_name}/{container}: runs {}, wanted {image}",
            now.image
        );
        let (Some(then), Some(later)) = (started_at(was), started_at(&now)) else {
            bail!("{pod_name}/{container}: no start times: {was:?} / {now:?}");
        };
        ensure!(
            later > then,
            "{pod_name}/{container}: started at {then} and again at {later}"
        );
        let ended = now
            .last_state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .with_context(|| format!("{pod_name}/{container}: no lastState.terminated"))?;
        ensure!(
            ended.container_id.as_deref() == was.container_id.as_deref(),
            "{pod_name}/{container}: the last run was {:?}, not {:?}",
            ended.container_id,
            was.container_id
        );
        let events = kubelet_events(ns, &pod_name).await?;
        let wanted = format!("Container {container} definition changed, will be restarted");
        ensure!(
            events.iter().any(|e| e.reason.as_deref() == Some("Killing")
                && e.message.as_deref() == Some(wanted.as_str())),
            "{pod_name}: no kubelet event {wanted:?} in {:?}",
            events
                .iter()
                .map(|e| format!("{:?}: {:?}", e.reason, e.message))
                .collect::<Vec<_>>()
        );
    }
    Ok(())
}

/// `kubectl patch <resource> <name> --type=json` replacing the image of the template's first container
/// only (a merge patch of `containers` would replace the whole list, probes and hooks included).
async fn set_template_image(
    ns: &TestNamespace,
    resource: &str,
    name: &str,
    image: &str,
) -> anyhow::Result<String> {
    let patch = json!([{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": image}]);
    ns.kubectl(&[
        "patch",
        resource,
        name,
        "--type=json",
        "-p",
        &patch.to_string(),
    ])
    .await
}

/// `kubectl exec <pod> -c <container> -- <command…>`; stdout.
async fn exec(
    ns: &TestNamespace,
    pod: &str,
    container: &str,
    command: &[&str],
) -> anyhow::Result<String> {
    let mut args = vec!["exec", pod, "-c", container, "--"];
    args.extend_from_slice(command);
    ns.kubectl(&args).await
}

// ------------------------------------------------------------------------------------------------------
// CloneSet: seed 000 on a real kubelet.

const OLD_IMAGE: &str = "nginx:alpine";
const NEW_IMAGE: &str = "nginx:1.19.1";

/// Seed 000's CloneSet (2 replicas, InPlaceIfPossible, gracePeriodSeconds 5, maxUnavailable 20%) with a
/// tcpSocket readiness probe, on the real nodes.
fn seed_cloneset(name: &str, extra_template: Value) -> Value {
    let mut template = on_real_nodes();
    json_patch::merge(&mut template, &extra_template);
    cloneset_kit::cloneset(
        name,
        2,
        OLD_IMAGE,
        json!({
            "updateStrategy": {"rollingUpdate": {
                "podUpdatePolicy": "InPlaceIfPossible",
                "inPlaceUpdateStrategy": {"gracePeriodSeconds": 5},
                "maxUnavailable": "20%",
                "maxSurge": 0,
            }},
            "template": {"spec": template},
        }),
    )
}

fn probed_container() -> Value {
    json!({"containers": [{
        "name": cloneset_kit::CONTAINER,
        "image": OLD_IMAGE,
        "readinessProbe": {"tcpSocket": {"port": 80}, "periodSeconds": 1},
    }]})
}

#[tokio::test]
async fn seed000_cloneset_updates_in_place_on_a_real_kubelet() -> anyhow::Result<()> {
    in_namespace_with_node_logs(bed(), "rn-seed", async |ns| {
        cloneset_kit::apply(ns, &seed_cloneset("sample", probed_container())).await?;
        let (_, before) = wait_converged(ns, "sample", 2, TIMEOUT).await?;
        for pod in &before {
            let status = status_of(pod, cloneset_kit::CONTAINER)?;
            ensure!(status.restart_count == 0 && status.ready, "{status:?}");
            ensure!(
                status.image == "docker.io/library/nginx:alpine",
                "the runtime reports {}",
                status.image
            );
            ensure!(
                status
                    .image_id
                    .starts_with("docker.io/library/nginx@sha256:"),
                "imageID {}",
                status.image_id
            );
        }
        let names: Vec<String> = before.iter().map(cloneset_kit::name).collect();
        let monitor = kruise_testkit::RolloutMonitor::start(
            ns.client.clone(),
            &ns.name,
            "app=sample",
            kruise_testkit::Limits {
                replicas: 2,
                max_unavailable: 1,
                max_surge: 0,
                min_old_revision_pods: None,
            },
        )
        .await?;
        set_template_image(ns, "cloneset", "sample", NEW_IMAGE).await?;
        let (cs, after) =
            cloneset_kit::monitor_converged(&monitor, ns, "sample", 2, TIMEOUT).await?;
        monitor.finish().await?;
        updated_in_place_by_the_kubelet(ns, &before, &after, cloneset_kit::CONTAINER, NEW_IMAGE)
            .await?;
        // One Pod at a time: the second restart began after the first Pod was Ready again.
        let mut restarted: Vec<(Timestamp, String)> = after
            .iter()
            .map(|p| {
                let status = status_of(p, cloneset_kit::CONTAINER)?;
                Ok((
                    started_at(&status).context("no start time")?,
                    cloneset_kit::name(p),
                ))
            })
            .collect::<anyhow::Result<_>>()?;
        restarted.sort();
        ensure!(restarted.len() == 2 && restarted[0].0 < restarted[1].0, "{restarted:?}");
        // gracePeriodSeconds 5: the kubelet stopped the old container at least 5 s after kruise marked
        // the Pod not ready for the update (InPlaceUpdateReady False; second resolution).
        for pod in &after {
            let pod_name = cloneset_kit::name(pod);
            let status = status_of(pod, cloneset_kit::CONTAINER)?;
            let ended = status
                .last_state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .and_then(|t| t.finished_at.as_ref())
                .map(|t| t.0)
                .with_context(|| format!("{pod_name}: no finishedAt"))?;
            let gate = pod_condition(pod, cloneset_kit::IN_PLACE_UPDATE_READY)
                .with_context(|| format!("{pod_name}: no InPlaceUpdateReady"))?;
            ensure!(gate.status == "True", "{pod_name}: {gate:?}");
            let ready_again = gate
                .last_transition_time
                .as_ref()
                .map(|t| t.0)
                .context("no lastTransitionTime")?;
            ensure!(
                ready_again >= ended,
                "{pod_name}: InPlaceUpdateReady True at {ready_again}, before the old container ended at {ended}"
            );
        }
        let events = cloneset_kit::events_for(ns, "CloneSet", "sample").await?;
        ensure!(
            names.iter().all(|n| events.iter().any(|e| e.reason.as_deref()
                == Some("SuccessfulUpdatePodInPlace")
                && e.message.as_deref().is_some_and(|m| m.contains(n.as_str())))),
            "CloneSet events {}",
            cloneset_kit::describe_events(&events)
        );
        let s = cloneset_kit::status(&cs);
        ensure!(
            s.updated_ready_replicas == 2 && s.ready_replicas == 2,
            "status {s:?}"
        );
        Ok(())
    })
    .await
}

/// The readiness of a real HTTP probe follows the file it serves: `kubectl exec mv index.html` away
/// makes the Pod unready, moving it back makes it Ready (what upstream's e2e suite does to pause a
/// rollout).
#[tokio::test]
async fn breaking_the_http_probe_by_exec_makes_the_pod_unready() -> anyhow::Result<()> {
    in_namespace_with_node_logs(bed(), "rn-probe", async |ns| {
        let template = json!({"containers": [{
            "name": cloneset_kit::CONTAINER,
            "image": OLD_IMAGE,
            "readinessProbe": {"httpGet": {"path": "/index.html", "port": 80}, "periodSeconds": 1, "failureThreshold": 1},
        }]});
        let mut doc = seed_cloneset("probe", template);
        doc["spec"]["replicas"] = json!(1);
        cloneset_kit::apply(ns, &doc).await?;
        let (_, pods) = wait_converged(ns, "probe", 1, TIMEOUT).await?;
        let pod = cloneset_kit::name(&pods[0]);
        let api: Api<Pod> = ns.api();
        exec(ns, &pod, "nginx", &["mv", "/usr/share/nginx/html/index.html", "/tmp/"]).await?;
        eventually("the Pod unready", TIMEOUT, || async {
            Ok((!is_ready(&api.get(&pod).await?)).then_some(()))
        })
        .await?;
        let cs = cloneset_kit::observed(ns, "probe").await?;
        eventually("CloneSet readyReplicas 0", TIMEOUT, || async {
            let cs = cloneset_kit::observed(ns, "probe").await?;
            Ok((cloneset_kit::status(&cs).ready_replicas == 0).then_some(()))
        })
        .await?;
        drop(cs);
        exec(ns, &pod, "nginx", &["mv", "/tmp/index.html", "/usr/share/nginx/html/"]).await?;
        eventually("the Pod Ready again", TIMEOUT, || async {
            Ok(is_ready(&api.get(&pod).await?).then_some(()))
        })
        .await?;
        let logs = ns.kubectl(&["logs", &pod, "-c", "nginx", "--tail=5"]).await;
        ensure!(logs.is_ok(), "kubectl logs failed: {logs:?}");
        Ok(())
    })
    .await
}

/// postStart and preStop really run, around an in-place restart: the hooks append to a file on an
/// emptyDir (which survives the container's restart), read back with `kubectl exec`.
#[tokio::test]
async fn lifecycle_hooks_run_around_an_in_place_restart() -> anyhow::Result<()> {
    in_namespace_with_node_logs(bed(), "rn-hooks", async |ns| {
        let hook = |what: &str| {
            json!({"exec": {"command": ["/bin/sh", "-c", format!("echo {what} >> /data/hooks")]}})
        };
        let template = json!({
            "containers": [{
                "name": cloneset_kit::CONTAINER,
                "image": OLD_IMAGE,
                "readinessProbe": {"tcpSocket": {"port": 80}, "periodSeconds": 1},
                "lifecycle": {"postStart": hook("postStart"), "preStop": hook("preStop")},
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }],
            "volumes": [{"name": "data", "emptyDir": {}}],
        });
        let mut doc = seed_cloneset("hooks", template);
        doc["spec"]["replicas"] = json!(1);
        cloneset_kit::apply(ns, &doc).await?;
        let (_, before) = wait_converged(ns, "hooks", 1, TIMEOUT).await?;
        let pod = cloneset_kit::name(&before[0]);
        let read = || exec(ns, &pod, "nginx", &["cat", "/data/hooks"]);
        ensure!(read().await?.trim() == "postStart", "after start: {:?}", read().await?);
        set_template_image(ns, "cloneset", "hooks", NEW_IMAGE).await?;
        let (_, after) = wait_converged(ns, "hooks", 1, TIMEOUT).await?;
        updated_in_place_by_the_kubelet(ns, &before, &after, "nginx", NEW_IMAGE).await?;
        let lines: Vec<String> = read().await?.lines().map(str::to_string).collect();
        ensure!(
            lines == ["postStart", "preStop", "postStart"],
            "hooks ran as {lines:?}"
        );
        Ok(())
    })
    .await
}

/// An image that cannot be pulled: the kubelet reports ErrImagePull / ImagePullBackOff on the one Pod
/// the rollout touched (maxUnavailable 1), and the rollout goes no further.
#[tokio::test]
async fn an_image_that_cannot_be_pulled_stops_the_rollout() -> anyhow::Result<()> {
    in_namespace_with_node_logs(bed(), "rn-pull", async |ns| {
        cloneset_kit::apply(ns, &seed_cloneset("pull", probed_container())).await?;
        let (_, before) = wait_converged(ns, "pull", 2, TIMEOUT).await?;
        let missing = "nginx:no-such-tag";
        set_template_image(ns, "cloneset", "pull", missing).await?;
        let stuck = eventually("one Pod waiting on its image", TIMEOUT, || async {
            let pods = pods_of(ns, "app=pull").await?;
            let waiting: Vec<(String, String)> = pods
                .iter()
                .filter_map(|p| {
                    let status = container_status(p, "nginx")?;
                    let reason = status.state?.waiting?.reason?;
                    Some((cloneset_kit::name(p), reason))
                })
                .collect();
            Ok((waiting.len() == 1
                && matches!(waiting[0].1.as_str(), "ErrImagePull" | "ImagePullBackOff"))
            .then_some(waiting))
        })
        .await?;
        // The other Pod keeps its image and stays Ready while the first cannot pull.
        cloneset_kit::holds(
            "the rollout stops at one Pod",
            Duration::from_secs(5),
            || async {
                let pods = pods_of(ns, "app=pull").await?;
                Ok(pods
                    .iter()
                    .filter(|p| cloneset_kit::name(p) != stuck[0].0)
                    .all(|p| {
                        is_ready(p) && cloneset_kit::spec_image(p).as_deref() == Some(OLD_IMAGE)
                    }))
            },
        )
        .await?;
        let events = kubelet_events(ns, &stuck[0].0).await?;
        ensure!(
            events.iter().any(|e| e.reason.as_deref() == Some("Failed")
                && e.message.as_deref().is_some_and(|m| m.contains(missing))),
            "no kubelet Failed event naming {missing}"
        );
        ensure!(identities(&before) == identities(&pods_of(ns, "app=pull").await?));
        Ok(())
    })
    .await
}

// ------------------------------------------------------------------------------------------------------
// Advanced StatefulSet and Advanced DaemonSet.

#[tokio::test]
async fn advanced_statefulset_updates_in_place_on_a_real_kubelet() -> anyhow::Result<()> {
    in_namespace_with_node_logs(bed(), "rn-asts", async |ns| {
        let mut template = on_real_nodes();
        json_patch::merge(&mut template, &probed_container());
        template["readinessGates"] =
            json!([{"conditionType": cloneset_kit::IN_PLACE_UPDATE_READY}]);
        let doc = json!({
            "apiVersion": "apps.kruise.io/v1beta1",
            "kind": "StatefulSet",
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 2,
                "serviceName": "web",
                "podManagementPolicy": "Parallel",
                "selector": {"matchLabels": {"app": "web"}},
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {
                    "podUpdatePolicy": "InPlaceIfPossible",
                    "inPlaceUpdateStrategy": {"gracePeriodSeconds": 1},
                    "maxUnavailable": 1,
                }},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": template},
            },
        });
        ns.apply(&doc.to_string()).await?;
        let before = wait_all_ready(ns, "app=web", 2, OLD_IMAGE, TIMEOUT).await?;
        set_template_image(ns, "statefulsets.apps.kruise.io", "web", NEW_IMAGE).await?;
        let after = wait_all_ready(ns, "app=web", 2, NEW_IMAGE, TIMEOUT).await?;
        updated_in_place_by_the_kubelet(ns, &before, &after, "nginx", NEW_IMAGE).await?;
        // Highest ordinal first.
        let start = |name: &str| -> anyhow::Result<Timestamp> {
            let pod = after
                .iter()
                .find(|p| cloneset_kit::name(p) == name)
                .with_context(|| format!("no Pod {name}"))?;
            started_at(&status_of(pod, "nginx")?).context("no start time")
        };
        ensure!(
            start("web-1")? < start("web-0")?,
            "web-0 restarted before web-1"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn advanced_daemonset_updates_in_place_on_every_real_node() -> anyhow::Result<()> {
    in_namespace_with_node_logs(bed(), "rn-ads", async |ns| {
        let mut template = on_real_nodes();
        json_patch::merge(&mut template, &probed_container());
        let doc = in_place_agent_daemonset(template, json!({}));
        ns.apply(&doc.to_string()).await?;
        let before = wait_all_ready(ns, "app=agent", REAL_NODES, OLD_IMAGE, TIMEOUT).await?;
        let nodes: std::collections::BTreeSet<Option<String>> =
            before.iter().map(node_name).collect();
        ensure!(
            nodes.len() == REAL_NODES,
            "one Pod per real node: {nodes:?}"
        );
        set_template_image(ns, "daemonsets.apps.kruise.io", "agent", NEW_IMAGE).await?;
        let after = wait_all_ready(ns, "app=agent", REAL_NODES, NEW_IMAGE, TIMEOUT).await?;
        updated_in_place_by_the_kubelet(ns, &before, &after, "nginx", NEW_IMAGE).await?;
        Ok(())
    })
    .await
}

// ------------------------------------------------------------------------------------------------------
// SidecarSet: an in-place sidecar upgrade and a hot upgrade.

const SIDECAR_COMMAND: &str = "trap 'exit 0' TERM; while true; do sleep 3600 & wait $!; done";

/// A Pod (from a CloneSet, so it is owned like a real workload's) labelled for SidecarSet `app`.
fn app_cloneset(app: &str) -> Value {
    let mut template = on_real_nodes();
    json_patch::merge(&mut template, &probed_container());
    let mut doc =
        cloneset_kit::cloneset(app, 1, OLD_IMAGE, json!({"template": {"spec": template}}));
    doc["spec"]["template"]["metadata"]["labels"]["sidecar-for"] = json!(app);
    doc
}

/// Applies `sidecarset` (selecting `sidecar-for: <app>`), waits until the Pod webhook injects it
/// (a dry-run Pod gets `containers`, in that order), then starts the app's CloneSet.
async fn start_sidecar_app(
    ns: &TestNamespace,
    sidecarset: &Value,
    app: &str,
    containers: &[&str],
) -> anyhow::Result<()> {
    ns.apply(&sidecarset.to_string()).await?;
    kruise_e2e::wait_injected_on_dry_run(
        &ns.client,
        &ns.name,
        &kruise_e2e::sidecarset_kit::test_pod("dry", json!({ "sidecar-for": app })),
        TIMEOUT,
        containers,
    )
    .await?;
    cloneset_kit::apply(ns, &app_cloneset(app)).await?;
    Ok(())
}

#[tokio::test]
async fn sidecarset_upgrades_its_sidecar_in_place_on_a_real_kubelet() -> anyhow::Result<()> {
    in_namespace_with_node_logs(bed(), "rn-sidecar", async |ns| {
        let name = format!("logger-{}", ns.name);
        let sidecarset = json!({
            "apiVersion": "apps.kruise.io/v1beta1",
            "kind": "SidecarSet",
            "metadata": {"name": name},
            "spec": {
                "selector": {"matchLabels": {"sidecar-for": "app"}},
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns.name}},
                "updateStrategy": {"type": "RollingUpdate", "maxUnavailable": 1},
                "containers": [{
                    "name": "logger",
                    "image": "busybox:1.34",
                    "command": ["/bin/sh", "-c", SIDECAR_COMMAND],
                }],
            },
        });
        start_sidecar_app(ns, &sidecarset, "app", &["logger", "nginx"]).await?;
        let before = eventually("the app Pod Ready with its sidecar", TIMEOUT, || async {
            let pods = pods_of(ns, "app=app").await?;
            let ok = pods.len() == 1
                && is_ready(&pods[0])
                && container_status(&pods[0], "logger").is_some_and(|s| s.ready);
            Ok(ok.then_some(pods))
        })
        .await?;
        let sidecarsets: Api<kruise_api::sidecarset::v1beta1::SidecarSet> =
            Api::all(ns.client.clone());
        kruise_e2e::sidecarset_kit::set_image(&sidecarsets, &name, "busybox:1.35").await?;
        let after = eventually("the sidecar on busybox:1.35", TIMEOUT, || async {
            let pods = pods_of(ns, "app=app").await?;
            let ok = pods.len() == 1
                && is_ready(&pods[0])
                && container_status(&pods[0], "logger")
                    .is_some_and(|s| s.ready && s.image.ends_with("busybox:1.35"));
            Ok(ok.then_some(pods))
        })
        .await?;
        updated_in_place_by_the_kubelet(ns, &before, &after, "logger", "busybox:1.35").await?;
        let app = status_of(&after[0], "nginx")?;
        ensure!(
            app.restart_count == 0,
            "the app container restarted: {app:?}"
        );
        Ok(())
    })
    .await
}

#[tokio::test]
async fn sidecarset_hot_upgrade_hands_over_on_a_real_kubelet() -> anyhow::Result<()> {
    const EMPTY: &str = "openkruise/hotupgrade-sample:empty";
    const V1: &str = "openkruise/hotupgrade-sample:sidecarv1";
    const V2: &str = "openkruise/hotupgrade-sample:sidecarv2";
    in_namespace_with_node_logs(bed(), "rn-hot", async |ns| {
        let name = format!("hot-{}", ns.name);
        let container = |image: &str| {
            json!([{
                "name": "sidecar",
                "image": image,
                "command": ["/bin/sh", "-c", SIDECAR_COMMAND],
                "upgradeStrategy": {"upgradeType": "HotUpgrade", "hotUpgradeEmptyImage": EMPTY},
            }])
        };
        let sidecarset = json!({
            "apiVersion": "apps.kruise.io/v1beta1",
            "kind": "SidecarSet",
            "metadata": {"name": name},
            "spec": {
                "selector": {"matchLabels": {"sidecar-for": "hot"}},
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns.name}},
                "containers": container(V1),
            },
        });
        start_sidecar_app(ns, &sidecarset, "hot", &["sidecar-1", "sidecar-2", "nginx"]).await?;
        let ready_on = |working_image: &'static str, idle_image: &'static str| {
            let ns = &ns;
            async move {
                let pods = pods_of(ns, "app=hot").await?;
                let Some(pod) = pods.first() else {
                    return Ok(None);
                };
                let runs = |c: &str, image: &str| {
                    container_status(pod, c).is_some_and(|s| {
                        s.image.ends_with(image.rsplit('/').next().unwrap_or(image))
                            && s.state.as_ref().is_some_and(|st| st.running.is_some())
                    })
                };
                let ok = pods.len() == 1
                    && is_ready(pod)
                    && ((runs("sidecar-1", working_image) && runs("sidecar-2", idle_image))
                        || (runs("sidecar-2", working_image) && runs("sidecar-1", idle_image)));
                Ok(ok.then(|| pod.clone()))
            }
        };
        let before = eventually("sidecarv1 working, the twin idle on empty", TIMEOUT, || {
            ready_on(V1, EMPTY)
        })
        .await?;
        let sidecarsets: Api<kruise_api::sidecarset::v1beta1::SidecarSet> =
            Api::all(ns.client.clone());
        sidecarsets
            .patch(
                &name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({"spec": {"containers": container(V2)}})),
            )
            .await?;
        let after = eventually(
            "sidecarv2 working, the old one reset to empty",
            TIMEOUT,
            || ready_on(V2, EMPTY),
        )
        .await?;
        ensure!(
            identities(std::slice::from_ref(&before)) == identities(std::slice::from_ref(&after)),
            "the Pod changed identity"
        );
        // Each twin restarted exactly once on the runtime: -2 into v2, -1 into empty.
        for twin in ["sidecar-1", "sidecar-2"] {
            let was = status_of(&before, twin)?;
            let now = status_of(&after, twin)?;
            ensure!(
                now.restart_count == was.restart_count + 1 && now.image_id != was.image_id,
                "{twin}: {was:?} → {now:?}"
            );
        }
        ensure!(
            status_of(&after, "nginx")?.restart_count == 0,
            "the app container restarted"
        );
        Ok(())
    })
    .await
}

// ------------------------------------------------------------------------------------------------------
// In-place resize.

/// A CloneSet's resources change is applied in place by the real kubelet: the Pod's cgroup gets the new
/// CPU quota, the container keeps running (restartCount 0), the Pod keeps its UID and IP.
#[tokio::test]
async fn cloneset_resources_change_is_resized_in_place_by_the_kubelet() -> anyhow::Result<()> {
    in_namespace_with_node_logs(bed(), "rn-resize", async |ns| {
        let template = json!({"containers": [{
            "name": cloneset_kit::CONTAINER,
            "image": OLD_IMAGE,
            "readinessProbe": {"tcpSocket": {"port": 80}, "periodSeconds": 1},
            "resources": {
                "requests": {"cpu": "100m", "memory": "64Mi"},
                "limits": {"cpu": "200m", "memory": "128Mi"},
            },
        }]});
        let mut doc = seed_cloneset("resize", template);
        doc["spec"]["replicas"] = json!(1);
        cloneset_kit::apply(ns, &doc).await?;
        let (_, before) = wait_converged(ns, "resize", 1, TIMEOUT).await?;
        let pod = cloneset_kit::name(&before[0]);
        let patch = json!([
            {"op": "replace", "path": "/spec/template/spec/containers/0/resources/requests/cpu", "value": "150m"},
            {"op": "replace", "path": "/spec/template/spec/containers/0/resources/limits/cpu", "value": "300m"},
        ]);
        ns.kubectl(&["patch", "cloneset", "resize", "--type=json", "-p", &patch.to_string()])
            .await?;
        let api: Api<Pod> = ns.api();
        let after = eventually("the kubelet reports the resized limits", TIMEOUT, || async {
            let p = api.get(&pod).await?;
            let limit = container_status(&p, "nginx")
                .and_then(|s| s.resources)
                .and_then(|r| r.limits)
                .and_then(|l| l.get("cpu").map(|q| q.0.clone()));
            Ok((limit.as_deref() == Some("300m") && is_ready(&p)).then_some(p))
        })
        .await?;
        ensure!(
            identities(&before) == identities(std::slice::from_ref(&after)),
            "the Pod was replaced"
        );
        let status = status_of(&after, "nginx")?;
        ensure!(status.restart_count == 0, "the container restarted: {status:?}");
        let allocated = status
            .allocated_resources
            .as_ref()
            .and_then(|a| a.get("cpu"))
            .map(|q| q.0.clone());
        ensure!(allocated.as_deref() == Some("150m"), "allocatedResources cpu {allocated:?}");
        // The runtime's truth: the container's CFS quota is 300m of a 100 ms period.
        let container_id = status
            .container_id
            .as_deref()
            .and_then(|id| id.strip_prefix("containerd://"))
            .context("no containerd container ID")?
            .to_string();
        let quota = find_cfs_quota(&container_id).context("no cgroup for the container")?;
        ensure!(quota == 30_000, "cpu.cfs_quota_us {quota}, wanted 30000");
        Ok(())
    })
    .await
}

/// The CFS quota of the container whose cgroup directory is named `container_id`, searched under the
/// real nodes' cgroup roots.
fn find_cfs_quota(container_id: &str) -> Option<i64> {
    fn search(dir: &std::path::Path, id: &str, depth: usize) -> Option<i64> {
        if dir.file_name().and_then(|n| n.to_str()) == Some(id) {
            return std::fs::read_to_string(dir.join("cpu.cfs_quota_us"))
                .ok()?
                .trim()
                .parse()
                .ok();
        }
        if depth == 0 {
            return None;
        }
        std::fs::read_dir(dir)
            .ok()?
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .find_map(|e| search(&e.path(), id, depth - 1))
    }
    search(
        std::path::Path::new("/sys/fs/cgroup/cpu/kruise-rs"),
        container_id,
        6,
    )
}

// ------------------------------------------------------------------------------------------------------
// Container launch priority: the kubelet holds a container whose barrier key is missing.

/// A CloneSet Pod whose second container declares `KRUISE_CONTAINER_PRIORITY=10` starts it first;
/// the app container (priority 0) is held by the kubelet until the first is Ready, 3 s after its
/// start by its readiness probe. The barrier ConfigMap is the Pod's, and the Pod is marked completed.
#[tokio::test]
async fn container_launch_priority_starts_the_higher_priority_container_first() -> anyhow::Result<()>
{
    in_namespace_with_node_logs(bed(), "rn-launch", async |ns| {
        let mut template = on_real_nodes();
        json_patch::merge(
            &mut template,
            &json!({"containers": [
                {"name": "nginx", "image": OLD_IMAGE,
                 "readinessProbe": {"tcpSocket": {"port": 80}, "periodSeconds": 1}},
                {"name": "proxy", "image": "busybox:1.36",
                 "command": ["sh", "-c", SIDECAR_COMMAND],
                 "env": [{"name": "KRUISE_CONTAINER_PRIORITY", "value": "10"}],
                 "readinessProbe": {"exec": {"command": ["true"]}, "initialDelaySeconds": 3, "periodSeconds": 1}},
            ]}),
        );
        let doc = cloneset_kit::cloneset("launch", 1, OLD_IMAGE, json!({"template": {"spec": template}}));
        cloneset_kit::apply(ns, &doc).await?;
        let (_, pods) = wait_converged(ns, "launch", 1, TIMEOUT).await?;
        let pod = &pods[0];
        let name = cloneset_kit::name(pod);
        let barrier = format!("{name}-barrier");
        let keys: Vec<(String, String)> = pod
            .spec
            .iter()
            .flat_map(|s| &s.containers)
            .flat_map(|c| {
                c.env.iter().flatten().filter(|e| e.name == "KRUISE_CONTAINER_BARRIER").filter_map(|e| {
                    let r = e.value_from.as_ref()?.config_map_key_ref.as_ref()?;
                    Some((c.name.clone(), format!("{}/{}", r.name, r.key)))
                })
            })
            .collect();
        ensure!(
            keys == [("nginx".to_string(), format!("{barrier}/p_0")), ("proxy".to_string(), format!("{barrier}/p_10"))],
            "barrier env of {name}: {keys:?}"
        );
        let proxy = started_at(&status_of(pod, "proxy")?).context("proxy running")?;
        let nginx = started_at(&status_of(pod, "nginx")?).context("nginx running")?;
        ensure!(
            nginx.duration_since(proxy) >= jiff::SignedDuration::from_secs(3),
            "nginx started at {nginx}, only {} after proxy ({proxy}), before proxy was Ready",
            nginx.duration_since(proxy)
        );
        let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> = ns.api();
        let held = configmaps.get(&barrier).await?;
        let data: Vec<String> = held.data.unwrap_or_default().into_keys().collect();
        ensure!(data == ["p_0", "p_10"], "barrier keys {data:?}");
        let owner = held.metadata.owner_references.unwrap_or_default();
        ensure!(
            owner.len() == 1 && owner[0].kind == "Pod" && owner[0].uid == cloneset_kit::uid(pod),
            "barrier owners {owner:?}"
        );
        let api: Api<Pod> = ns.api();
        eventually("the Pod marked launch-priority completed", TIMEOUT, || async {
            let pod = api.get(&name).await?;
            let done = pod.metadata.annotations.as_ref().and_then(|a| a.get("apps.kruise.io/container-launch-priority-completed")).is_some_and(|v| v == "true");
            Ok(done.then_some(()))
        })
        .await?;
        Ok(())
    })
    .await
}
