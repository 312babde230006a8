//! Helpers for the SidecarSet end-to-end tests: seed 001's SidecarSet and test Pod made unique to a
//! test, reading sidecars off Pods, changing a SidecarSet the way a user does, and reading its status
//! and Events.

use std::time::Duration;

use anyhow::{Context, anyhow};
use k8s_openapi::api::core::v1::{Container, Event, Pod};
use kruise_api::sidecarset::v1beta1::{SidecarSet, SidecarSetStatus};
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::container_status;

/// The seed's sidecar container.
pub const LOGTAIL: &str = "logtail";

/// Seed 001's logtail SidecarSet (v1alpha1, as in the article) named `name` and restricted to
/// `namespace` through v1alpha1's `spec.namespace` (SidecarSets are cluster-scoped and the test bed is
/// shared); `extra` is merged over it (JSON merge patch).
pub fn logtail(name: &str, namespace: &str, extra: Value) -> anyhow::Result<Value> {
    let mut doc = crate::example("sidecarset-logtail.yaml")?;
    doc["metadata"]["name"] = json!(name);
    doc["spec"]["namespace"] = json!(namespace);
    json_patch::merge(&mut doc, &extra);
    Ok(doc)
}

/// The seed's test Pod (an nginx container writing logs to the `nginx-log` volume, with a `TZ` env
/// var) named `name` with `labels`.
pub fn test_pod(name: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "containers": [{
                "name": "nginx", "image": "log-service/docker-log-test:latest",
                "volumeMounts": [{"name": "nginx-log", "mountPath": "/var/log/nginx"}],
                "env": [{"name": "TZ", "value": "Asia/Shanghai"}],
            }],
            "volumes": [{"name": "nginx-log", "emptyDir": {}}],
        }
    })
}

/// Container `name` of the Pod spec (not the init containers).
pub fn container<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == name)
}

/// The image the Pod spec gives container `name` (empty when there is none).
pub fn spec_image(pod: &Pod, name: &str) -> String {
    container(pod, name)
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}

/// restartCount of container `name` (-1 when not reported).
pub fn restarts(pod: &Pod, name: &str) -> i32 {
    container_status(pod, name).map_or(-1, |s| s.restart_count)
}

/// Replaces the image of the SidecarSet's first container (a JSON patch, as
/// `kubectl patch --type json` sends).
pub async fn set_image(api: &Api<SidecarSet>, name: &str, image: &str) -> anyhow::Result<()> {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Json::<()>(serde_json::from_value(json!([
            {"op": "replace", "path": "/spec/containers/0/image", "value": image}
        ]))?),
    )
    .await
    .with_context(|| format!("setting the image of SidecarSet {name}"))?;
    Ok(())
}

/// The SidecarSet's status, default when not written yet.
pub fn status(ss: &SidecarSet) -> SidecarSetStatus {
    ss.status.clone().unwrap_or_default()
}

fn status_line(ss: &SidecarSet) -> String {
    let s = status(ss);
    format!(
        "generation {:?} observed {} matched {} updated {} ready {} updatedReady {} missedInjection {}",
        ss.metadata.generation,
        s.observed_generation,
        s.matched_pods,
        s.updated_pods,
        s.ready_pods,
        s.updated_ready_pods,
        s.missed_injection_pods
    )
}

/// Waits until the SidecarSet's status has observed its current generation and `done` holds for it;
/// on timeout the error shows the last status.
pub async fn wait_status(
    api: &Api<SidecarSet>,
    name: &str,
    what: &str,
    timeout: Duration,
    done: impl Fn(&SidecarSetStatus) -> bool,
) -> anyhow::Result<SidecarSet> {
    let done = &done;
    kruise_testkit::eventually(
        format!("SidecarSet {name} status: {what}"),
        timeout,
        || async move {
            let ss = api.get(name).await?;
            let observed = ss.metadata.generation == Some(status(&ss).observed_generation);
            if observed && done(&status(&ss)) {
                Ok(Some(ss))
            } else {
                Err(anyhow!("{}", status_line(&ss)))
            }
        },
    )
    .await
}

/// The status counters `(matched, updated, ready, updatedReady)`.
pub fn counts(s: &SidecarSetStatus) -> (i32, i32, i32, i32) {
    (
        s.matched_pods,
        s.updated_pods,
        s.ready_pods,
        s.updated_ready_pods,
    )
}

/// Events about the object `name` of `kind` in any namespace (a cluster-scoped object's Events are
/// recorded in `default`), as `kubectl get events -A --field-selector` lists them.
pub async fn events_about(
    client: &kube::Client,
    kind: &str,
    name: &str,
) -> anyhow::Result<Vec<Event>> {
    let api: Api<Event> = Api::all(client.clone());
    Ok(api
        .list(&ListParams::default().fields(&format!(
            "involvedObject.kind={kind},involvedObject.name={name}"
        )))
        .await
        .context("listing Events")?
        .items)
}

/// Waits until Pod `name` is Running and Ready and returns it.
pub async fn wait_ready(api: &Api<Pod>, name: &str, timeout: Duration) -> anyhow::Result<Pod> {
    kruise_testkit::eventually(
        format!("Pod {name} Running and Ready"),
        timeout,
        || async move { Ok(api.get_opt(name).await?.filter(crate::is_ready)) },
    )
    .await
}

/// Applies seed 001's logtail SidecarSet named `name` (see [`logtail`]) selecting `labels`, with
/// `spec` merged over its spec, and waits until the Pod webhook injects it into a dry-run
/// [`test_pod`] with those labels.
pub async fn apply_logtail(
    ns: &kruise_testkit::TestNamespace,
    name: &str,
    labels: &Value,
    spec: Value,
) -> anyhow::Result<()> {
    let mut extra = json!({"spec": {"selector": {"matchLabels": labels}}});
    json_patch::merge(&mut extra, &json!({ "spec": spec }));
    ns.apply(&logtail(name, &ns.name, extra)?.to_string())
        .await?;
    crate::wait_injected_on_dry_run(
        &ns.client,
        &ns.name,
        &test_pod("dry-run", labels.clone()),
        Duration::from_secs(60),
        &[LOGTAIL, "nginx"],
    )
    .await
}

/// Applies the logtail SidecarSet `name` upgrading one Pod at a time (`maxUnavailable: 1`) to the Pods
/// labelled `app=<app>`, creates `count` [`test_pod`]s `pod-0`, `pod-1`, … with that label, and waits
/// until every one of them runs Ready with the sidecar injected.
pub async fn logtail_over_ready_pods(
    ns: &kruise_testkit::TestNamespace,
    name: &str,
    app: &str,
    count: usize,
) -> anyhow::Result<()> {
    let labels = json!({ "app": app });
    let one_at_a_time = json!({"updateStrategy": {"maxUnavailable": 1}});
    apply_logtail(ns, name, &labels, one_at_a_time).await?;
    for i in 0..count {
        ns.apply(&test_pod(&format!("pod-{i}"), labels.clone()).to_string())
            .await?;
    }
    let pods: Api<Pod> = ns.api();
    let selector = format!("app={app}");
    kruise_testkit::eventually(
        format!("{count} injected Pods Ready"),
        Duration::from_secs(90),
        || async {
            let list = crate::cloneset_kit::active_pods(&pods, &selector).await?;
            let ready = list
                .iter()
                .filter(|p| crate::is_ready(p) && container(p, LOGTAIL).is_some())
                .count();
            Ok((ready == count).then_some(()))
        },
    )
    .await
}

/// The Pod's `SidecarSetUpgradable` condition as OpenKruise clients read it: its status, reason and
/// the message's map of SidecarSet name to bool (`None` when the Pod has no such condition).
pub fn upgradable_condition(pod: &Pod) -> anyhow::Result<Option<(String, String, Value)>> {
    let Some(c) = crate::pod_condition(pod, "SidecarSetUpgradable") else {
        return Ok(None);
    };
    let entries: Value = serde_json::from_str(c.message.as_deref().unwrap_or("{}"))
        .with_context(|| format!("SidecarSetUpgradable message {:?}", c.message))?;
    Ok(Some((
        c.status.clone(),
        c.reason.clone().unwrap_or_default(),
        entries,
    )))
}

/// Waits until Pod `name`'s `SidecarSetUpgradable` condition has `status` and exactly `entries`, with
/// OpenKruise's reason for that status.
pub async fn wait_upgradable(
    api: &Api<Pod>,
    name: &str,
    status: &str,
    entries: &Value,
    timeout: Duration,
) -> anyhow::Result<Pod> {
    let reason = if status == "True" {
        "AllSidecarsetUpgradable"
    } else {
        "UpdateImmutableField"
    };
    kruise_testkit::eventually(
        &format!("Pod {name}: SidecarSetUpgradable={status} {entries}"),
        timeout,
        || async {
            let pod = api.get(name).await?;
            let found = upgradable_condition(&pod)?;
            match &found {
                Some((s, r, e)) if s == status && r == reason && e == entries => Ok(Some(pod)),
                _ => Err(anyhow!("condition {found:?}")),
            }
        },
    )
    .await
}
