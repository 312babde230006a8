//! Helpers for the CloneSet end-to-end tests: building CloneSets, reading what a user reads off Pods,
//! CloneSets, ControllerRevisions and Events, waiting for a CloneSet to converge, and recording the order
//! in which Pods reach a new revision.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Event, Pod};
use kruise_api::cloneset::v1beta1::{CloneSet, CloneSetCondition};
use kruise_testkit::{RolloutMonitor, TestNamespace};
use kube::api::{Api, ListParams};
use serde_json::{Value, json};

use crate::{container_status, is_ready};
/// A Pod's label and annotation values, read as the controllers read them.
pub use kruise_core::pods::{annotation, label};

/// The Pod label holding the full revision name (`<cloneset>-<hash>`).
pub const REVISION: &str = "controller-revision-hash";
pub const INSTANCE_ID: &str = "apps.kruise.io/cloneset-instance-id";
pub const LIFECYCLE_STATE: &str = "lifecycle.apps.kruise.io/state";
pub const SPECIFIED_DELETE: &str = "apps.kruise.io/specified-delete";
pub const IN_PLACE_UPDATE_READY: &str = "InPlaceUpdateReady";
pub const IN_PLACE_UPDATE_STATE: &str = "apps.kruise.io/inplace-update-state";
pub const DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";
pub const SIM_NEVER_READY: &str = "sim.kruise-rs.io/never-ready";

/// The container every test CloneSet runs.
pub const CONTAINER: &str = "nginx";

/// A v1beta1 CloneSet `name` with `replicas` Pods of one container `nginx` running `image`, selected by
/// `app=<name>`; `spec` is merged (JSON merge patch) over that spec.
pub fn cloneset(name: &str, replicas: i32, image: &str, spec: Value) -> Value {
    let mut doc = json!({
        "apiVersion": "apps.kruise.io/v1beta1",
        "kind": "CloneSet",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": CONTAINER, "image": image}]}
            }
        }
    });
    json_patch::merge(&mut doc["spec"], &spec);
    doc
}

/// `kubectl apply` of a JSON document (JSON is YAML).
pub async fn apply(ns: &TestNamespace, doc: &Value) -> anyhow::Result<String> {
    ns.apply(&doc.to_string()).await
}

/// `kubectl patch <resource> <name> --type=merge -p <patch>`.
pub async fn merge_patch(
    ns: &TestNamespace,
    resource: &str,
    name: &str,
    patch: &Value,
) -> anyhow::Result<String> {
    ns.kubectl(&[
        "patch",
        resource,
        name,
        "--type=merge",
        "-p",
        &patch.to_string(),
    ])
    .await
}

/// A merge patch of the CloneSet's first container image (the seed's `kubectl patch`).
pub async fn set_image(ns: &TestNamespace, name: &str, image: &str) -> anyhow::Result<String> {
    set_template_image(ns, "cloneset", name, image).await
}

/// Sets the image of container [`CONTAINER`] in the Pod template of `resource` `name`, as
/// `kubectl patch --type=merge` does.
pub async fn set_template_image(
    ns: &TestNamespace,
    resource: &str,
    name: &str,
    image: &str,
) -> anyhow::Result<String> {
    let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": CONTAINER, "image": image}]}}}});
    merge_patch(ns, resource, name, &patch).await
}

/// Sets the image of the first container of a UnitedDeployment's CloneSet template, as
/// `kubectl patch --type=json` does.
pub async fn set_uniteddeployment_image(
    ns: &TestNamespace,
    name: &str,
    image: &str,
) -> anyhow::Result<String> {
    let path = "/spec/template/cloneSetTemplate/spec/template/spec/containers/0/image";
    let patch = json!([{"op": "replace", "path": path, "value": image}]);
    ns.kubectl(&[
        "patch",
        "uniteddeployments.apps.kruise.io",
        name,
        "--type=json",
        "-p",
        &patch.to_string(),
    ])
    .await
}

pub fn name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

pub fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

pub fn revision(pod: &Pod) -> Option<&str> {
    label(pod, REVISION)
}

pub fn lifecycle_state(pod: &Pod) -> Option<&str> {
    label(pod, LIFECYCLE_STATE)
}

pub fn terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// The image in the Pod spec of container `nginx`.
pub fn spec_image(pod: &Pod) -> Option<String> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == CONTAINER)?
        .image
        .clone()
}

/// restartCount of container `nginx` (-1 when not reported).
pub fn restarts(pod: &Pod) -> i32 {
    container_status(pod, CONTAINER).map_or(-1, |s| s.restart_count)
}

/// The image the kubelet reports running in container `nginx`.
pub fn running_image(pod: &Pod) -> Option<String> {
    container_status(pod, CONTAINER).map(|s| s.image)
}

/// Whether container `nginx` runs the spec image `image` (the runtime reports it written out in full).
pub fn runs_image(pod: &Pod, image: &str) -> bool {
    running_image(pod).is_some_and(|running| crate::same_image(&running, image))
}

/// What must not change about a Pod: name → (uid, restarts of every container).
pub fn identities(pods: &[Pod]) -> BTreeMap<String, (String, Vec<i32>)> {
    pods.iter()
        .map(|p| {
            let restarts = p
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .map(|cs| cs.iter().map(|c| c.restart_count).collect())
                .unwrap_or_default();
            (name(p), (uid(p), restarts))
        })
        .collect()
}

/// Whether two revision names are the same revision (the last `-` segment, as CloneSet compares them).
pub fn same_revision(a: &str, b: &str) -> bool {
    let short = |s: &str| s.rsplit('-').next().unwrap_or(s).to_string();
    !a.is_empty() && !b.is_empty() && short(a) == short(b)
}

/// Pods of `selector`, sorted by name.
pub async fn pods(api: &Api<Pod>, selector: &str) -> anyhow::Result<Vec<Pod>> {
    let mut list = api
        .list(&ListParams::default().labels(selector))
        .await
        .context("listing Pods")?
        .items;
    list.sort_by_key(name);
    Ok(list)
}

/// Pods of `selector` without a deletionTimestamp, sorted by name.
pub async fn active_pods(api: &Api<Pod>, selector: &str) -> anyhow::Result<Vec<Pod>> {
    let mut list = pods(api, selector).await?;
    list.retain(|p| !terminating(p));
    Ok(list)
}

pub fn names(pods: &[Pod]) -> Vec<String> {
    pods.iter().map(name).collect()
}

/// A one-line summary per Pod for error messages.
pub fn describe(pods: &[Pod]) -> String {
    pods.iter()
        .map(|p| {
            format!(
                "{} [{}{} rev {} state {} image {} restarts {}]",
                name(p),
                if is_ready(p) { "ready" } else { "not ready" },
                if terminating(p) { ", terminating" } else { "" },
                revision(p).unwrap_or("-"),
                lifecycle_state(p).unwrap_or("-"),
                spec_image(p).unwrap_or_default(),
                restarts(p)
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The status of `cloneset`, default when not yet written.
pub fn status(cloneset: &CloneSet) -> kruise_api::cloneset::v1beta1::CloneSetStatus {
    cloneset.status.clone().unwrap_or_default()
}

pub fn condition<'a>(cloneset: &'a CloneSet, type_: &str) -> Option<&'a CloneSetCondition> {
    cloneset
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
}

fn status_line(cloneset: &CloneSet) -> String {
    let s = status(cloneset);
    format!(
        "generation {:?} observed {} replicas {} ready {} available {} updated {} updatedReady {} \
         expectedUpdated {} updateRevision {} currentRevision {} conditions {:?}",
        cloneset.metadata.generation,
        s.observed_generation,
        s.replicas,
        s.ready_replicas,
        s.available_replicas,
        s.updated_replicas,
        s.updated_ready_replicas,
        s.expected_updated_replicas,
        s.update_revision,
        s.current_revision,
        s.conditions
            .iter()
            .map(|c| format!("{}={}/{}", c.type_, c.status, c.reason))
            .collect::<Vec<_>>()
    )
}

/// The CloneSet and its Pods once the CloneSet has converged on `replicas`: its status observed the
/// current generation, counts `replicas` Pods all ready and updated, `currentRevision ==
/// updateRevision`; exactly `replicas` Pods exist, none terminating, all Ready at the update revision.
/// `Err` (with the current state) while not converged.
pub async fn converged(
    ns: &TestNamespace,
    cloneset_name: &str,
    replicas: i32,
) -> anyhow::Result<Option<(CloneSet, Vec<Pod>)>> {
    let clonesets: Api<CloneSet> = ns.api();
    let cs = clonesets.get(cloneset_name).await?;
    let s = status(&cs);
    let pod_api: Api<Pod> = ns.api();
    let list = pods(&pod_api, &format!("app={cloneset_name}")).await?;
    let status_ok = cs.metadata.generation == Some(s.observed_generation)
        && s.replicas == replicas
        && s.ready_replicas == replicas
        && s.updated_replicas == replicas
        && s.updated_ready_replicas == replicas
        && !s.update_revision.is_empty()
        && s.update_revision == s.current_revision;
    let pods_ok = list.len() == replicas as usize
        && list.iter().all(|p| {
            !terminating(p)
                && is_ready(p)
                && revision(p).is_some_and(|r| same_revision(r, &s.update_revision))
        });
    if status_ok && pods_ok {
        Ok(Some((cs, list)))
    } else {
        Err(anyhow!(
            "CloneSet {cloneset_name} not converged on {replicas}: {}; Pods: {}",
            status_line(&cs),
            describe(&list)
        ))
    }
}

/// Checks that a rollout updated every Pod exactly once, in place: `after` holds the same Pods (UIDs)
/// as `before`, each running `image` with container `nginx` restarted exactly once.
pub fn updated_once_in_place(before: &[Pod], after: &[Pod], image: &str) -> anyhow::Result<()> {
    let uids = |pods: &[Pod]| {
        pods.iter()
            .map(uid)
            .collect::<std::collections::BTreeSet<_>>()
    };
    if uids(before) != uids(after) {
        bail!(
            "Pods were recreated: before {}; after {}",
            describe(before),
            describe(after)
        );
    }
    for pod in after {
        if !runs_image(pod, image) || restarts(pod) != 1 {
            bail!(
                "each Pod is updated exactly once, to {image}: {}",
                describe(std::slice::from_ref(pod))
            );
        }
    }
    Ok(())
}

/// Waits for [`converged`].
pub async fn wait_converged(
    ns: &TestNamespace,
    cloneset_name: &str,
    replicas: i32,
    timeout: Duration,
) -> anyhow::Result<(CloneSet, Vec<Pod>)> {
    kruise_testkit::eventually(
        format!("CloneSet {cloneset_name} converged on {replicas} Ready updated Pods"),
        timeout,
        || converged(ns, cloneset_name, replicas),
    )
    .await
}

/// Waits for [`converged`] under a rollout monitor (fails at the first violation).
pub async fn monitor_converged(
    monitor: &RolloutMonitor,
    ns: &TestNamespace,
    cloneset_name: &str,
    replicas: i32,
    timeout: Duration,
) -> anyhow::Result<(CloneSet, Vec<Pod>)> {
    monitor
        .eventually(
            format!("CloneSet {cloneset_name} converged on {replicas} Ready updated Pods"),
            timeout,
            || converged(ns, cloneset_name, replicas),
        )
        .await
}

/// The status (and the CloneSet) once the controller has observed the current generation.
pub async fn observed(ns: &TestNamespace, cloneset_name: &str) -> anyhow::Result<CloneSet> {
    let clonesets: Api<CloneSet> = ns.api();
    kruise_testkit::eventually(
        format!("CloneSet {cloneset_name} status observing its generation"),
        Duration::from_secs(30),
        || async {
            let cs = clonesets.get(cloneset_name).await?;
            Ok((cs.metadata.generation == Some(status(&cs).observed_generation)).then_some(cs))
        },
    )
    .await
}

/// Events about object `name` of `kind`, oldest first.
pub async fn events_for(ns: &TestNamespace, kind: &str, name: &str) -> anyhow::Result<Vec<Event>> {
    let api: Api<Event> = ns.api();
    let mut list = api
        .list(&ListParams::default().fields(&format!(
            "involvedObject.kind={kind},involvedObject.name={name}"
        )))
        .await
        .context("listing Events")?
        .items;
    list.sort_by_key(|e| {
        e.last_timestamp
            .as_ref()
            .map(|t| t.0)
            .or_else(|| e.event_time.as_ref().map(|t| t.0))
    });
    Ok(list)
}

/// `reason: message` of each Event, for error messages.
pub fn describe_events(events: &[Event]) -> String {
    events
        .iter()
        .map(|e| {
            format!(
                "{}: {}",
                e.reason.as_deref().unwrap_or(""),
                e.message.as_deref().unwrap_or("")
            )
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

/// Waits until the CloneSet has an Event with `reason` whose message mentions every one of `mentions`
/// (each in some Event); returns the matching Events.
pub async fn wait_events(
    ns: &TestNamespace,
    cloneset_name: &str,
    reason: &str,
    mentions: &[String],
) -> anyhow::Result<Vec<Event>> {
    kruise_testkit::eventually(
        format!("Events {reason} on CloneSet {cloneset_name} for {mentions:?}"),
        Duration::from_secs(30),
        || async {
            let events = events_for(ns, "CloneSet", cloneset_name).await?;
            let matching: Vec<Event> = events
                .iter()
                .filter(|e| e.reason.as_deref() == Some(reason))
                .cloned()
                .collect();
            let all = mentions.iter().all(|m| {
                matching
                    .iter()
                    .any(|e| e.message.as_deref().is_some_and(|msg| msg.contains(m)))
            });
            if all {
                Ok(Some(matching))
            } else {
                Err(anyhow!("Events so far: {}", describe_events(&events)))
            }
        },
    )
    .await
}

/// ControllerRevisions in the namespace, by name.
pub async fn revisions(ns: &TestNamespace) -> anyhow::Result<BTreeMap<String, i64>> {
    let api: Api<ControllerRevision> = ns.api();
    Ok(api
        .list(&ListParams::default())
        .await
        .context("listing ControllerRevisions")?
        .items
        .into_iter()
        .map(|r| (r.metadata.name.clone().unwrap_or_default(), r.revision))
        .collect())
}

/// Checks `check` repeatedly for `duration`: for asserting that something does *not* happen (a Pod
/// held by a hook stays, a paused CloneSet updates nothing). Fails at the first `Err` or `false`.
pub async fn holds<F, Fut>(what: &str, duration: Duration, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<bool>>,
{
    let end = Instant::now() + duration;
    loop {
        match check().await {
            Ok(true) => {}
            Ok(false) => bail!("{what} stopped holding"),
            Err(error) => return Err(error.context(format!("{what} stopped holding"))),
        }
        if Instant::now() >= end {
            return Ok(());
        }
        tokio::time::sleep(kruise_testkit::wait::POLL).await;
    }
}

/// Records, from a watch, the order in which Pods first leave their initial revision (the order a
/// rollout picks them). Start it before the change.
pub struct RevisionOrder(crate::PodOrder);

impl RevisionOrder {
    /// Watches the Pods of `selector`; a Pod enters the order the first time its revision label differs
    /// from `old_revision`.
    pub async fn start(
        ns: &TestNamespace,
        selector: &str,
        old_revision: &str,
    ) -> anyhow::Result<RevisionOrder> {
        let old = old_revision.to_string();
        let left = move |pod: &Pod| revision(pod).is_some_and(|r| !same_revision(r, &old));
        Ok(RevisionOrder(
            crate::PodOrder::start(ns.api(), selector, left).await?,
        ))
    }

    pub fn order(&self) -> Vec<String> {
        self.0.order()
    }
}
