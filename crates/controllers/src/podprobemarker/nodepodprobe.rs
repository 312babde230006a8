//! The NodePodProbe controller (upstream `pkg/controller/nodepodprobe`; `PodProbeMarkerGate` and
//! `KruiseDaemon`).
//!
//! Keeps one NodePodProbe (named after the Node) per ready Node that is not a virtual kubelet, and
//! deletes it when its Node goes. Drops the entries of Pods that are gone, replaced (another uid) or
//! finished. Turns the probe states the node's kruise-daemon reports into the Pods' conditions (the
//! probe's `podConditionType`) and the markers' `markerPolicy` labels and annotations
//! (`kruise_core::podprobemarker::pod_update`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kruise_api::podprobemarker::{NodePodProbe, PodProbeMarker};
use kruise_core::podprobemarker as decide;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use crate::cache::{CacheEvent, PodCache};
use crate::driver::caches::{Caches, Shared};
use crate::driver::writes::{ApiWrites, Writer, Writes};
use crate::error::{Error, KubeContext, is_race};
use crate::metrics::Metrics;

pub const CONTROLLER: &str = "nodepodprobe-controller";

const RACE_RETRY: Duration = Duration::from_millis(500);

pub struct Context {
    writes: Arc<dyn Writes>,
    metrics: Arc<Metrics>,
    pods: Arc<PodCache>,
    nodes: Shared<Node>,
    markers: Store<PodProbeMarker>,
}

crate::driver::driven!(Context, CONTROLLER);

/// Runs the controller until the future is dropped.
pub async fn run(
    client: Client,
    caches: Caches,
    probes: Shared<NodePodProbe>,
    metrics: Arc<Metrics>,
    workers: u16,
) {
    let markers = caches.podprobemarkers.clone();
    let controller = Controller::for_stream(probes.replayed_stream(), probes.store().clone());
    let (wake_tx, wake_rx) = mpsc::unbounded_channel();
    wake_on_pods(caches.pods.clone(), probes.clone(), wake_tx.clone());
    let writes: Arc<dyn Writes> = ApiWrites::new(client);
    let keep = keep_one_per_node(
        writes.clone(),
        caches.nodes.clone(),
        probes.clone(),
        wake_tx,
    );
    let ctx = Arc::new(Context {
        writes,
        metrics,
        pods: caches.pods.clone(),
        nodes: caches.nodes.clone(),
        markers: markers.store().clone(),
    });
    let controller = controller.reconcile_on(crate::cache::receiver_stream(wake_rx));
    tokio::select! {
        () = crate::driver::run(controller, workers.max(1), reconcile, ctx) => {}
        () = keep => {}
    }
}

/// Wakes the NodePodProbe of a deleted Pod's node, and the one holding a changed Pod (its
/// conditions and markers follow the probe states).
fn wake_on_pods(
    pods: Arc<PodCache>,
    probes: Shared<NodePodProbe>,
    wake: mpsc::UnboundedSender<ObjectRef<NodePodProbe>>,
) {
    let mut events = pods.subscribe("nodepodprobe");
    tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            let CacheEvent::Pod(change) = event else {
                continue;
            };
            let (namespace, name) = (&change.key.0, &change.key.1);
            for npp in probes.store().state() {
                let holds = npp
                    .spec
                    .pod_probes
                    .iter()
                    .any(|p| &p.namespace == namespace && &p.name == name);
                if holds && wake.send(ObjectRef::from_obj(npp.as_ref())).is_err() {
                    return;
                }
            }
        }
    });
}

fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

/// Creates the NodePodProbe of every ready Node that is not a virtual kubelet and has none, and wakes
/// the NodePodProbes whose Node is gone or going (their reconcile deletes them), on every Node change.
async fn keep_one_per_node(
    writes: Arc<dyn Writes>,
    nodes: Shared<Node>,
    probes: Shared<NodePodProbe>,
    wake: mpsc::UnboundedSender<ObjectRef<NodePodProbe>>,
) {
    let mut changes = nodes.subscribe();
    {
        nodes.wait_listed().await;
        probes.wait_listed().await;
        let api = Writer::<NodePodProbe>::all(writes);
        loop {
            for node in nodes.store().state() {
                let name = node.name_any();
                if node.metadata.deletion_timestamp.is_some()
                    || decide::is_virtual_kubelet(node.metadata.labels.as_ref())
                    || !is_ready(&node)
                    || probes.store().get(&ObjectRef::new(&name)).is_some()
                {
                    continue;
                }
                match api
                    .create(
                        &PostParams::default(),
                        &NodePodProbe::new(&name, Default::default()),
                    )
                    .await
                {
                    Ok(_) => tracing::info!(node = name, "created NodePodProbe"),
                    Err(kube::Error::Api(status)) if status.code == 409 => {}
                    Err(error) => tracing::warn!(node = name, %error, "creating NodePodProbe"),
                }
            }
            for npp in probes.store().state() {
                let gone = nodes
                    .store()
                    .get(&ObjectRef::new(&npp.name_any()))
                    .is_none_or(|n| n.metadata.deletion_timestamp.is_some());
                if gone && wake.send(ObjectRef::from_obj(npp.as_ref())).is_err() {
                    return;
                }
            }
            // The next Node change (and all queued ones: one pass covers them).
            if changes.recv().await.is_none() {
                return;
            }
            while changes.try_recv().is_ok() {}
        }
    }
}

async fn reconcile(npp: Arc<NodePodProbe>, ctx: Arc<Context>) -> Result<Action, Error> {
    if !crate::cache::listed(ctx.nodes.store()) || !crate::cache::listed(&ctx.markers) {
        return Ok(Action::requeue(crate::cache::NOT_LISTED_RETRY));
    }
    match sync(&npp, &ctx).await {
        Ok(()) => Ok(Action::await_change()),
        Err(Error::Kube { source, .. }) if is_race(&source) => Ok(Action::requeue(RACE_RETRY)),
        Err(error) => Err(error),
    }
}

async fn sync(npp: &NodePodProbe, ctx: &Context) -> Result<(), Error> {
    let name = npp.name_any();
    let node = ctx.nodes.store().get(&ObjectRef::new(&name));
    if node.is_none_or(|n| n.metadata.deletion_timestamp.is_some()) {
        let api = Writer::<NodePodProbe>::all(ctx.writes.clone());
        let params = DeleteParams {
            preconditions: npp.metadata.uid.clone().map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        api.delete(&name, &params)
            .await
            .context(|| format!("deleting NodePodProbe {name} of a Node that is gone"))?;
        tracing::info!(
            node = name,
            "deleted the NodePodProbe of a Node that is gone"
        );
        return Ok(());
    }
    let live = |namespace: &str, pod_name: &str, uid: &str| -> Option<Arc<Pod>> {
        ctx.pods
            .get(namespace, pod_name)
            .filter(|p| p.metadata.uid.as_deref() == Some(uid) && kruise_core::pods::is_active(p))
    };
    let spec = decide::keep_pods(&npp.spec, |p| live(&p.namespace, &p.name, &p.uid).is_some());
    super::write_spec(ctx.writes.as_ref(), npp, &spec).await?;
    for status in npp.status.iter().flat_map(|s| &s.pod_probe_statuses) {
        if !spec.pod_probes.iter().any(|p| p.uid == status.uid) {
            continue;
        }
        let Some(pod) = live(&status.namespace, &status.name, &status.uid) else {
            continue;
        };
        let markers: BTreeMap<String, Arc<PodProbeMarker>> = ctx
            .markers
            .state()
            .into_iter()
            .filter(|m| {
                m.metadata.namespace.as_deref() == Some(status.namespace.as_str())
                    && m.metadata.deletion_timestamp.is_none()
            })
            .map(|m| (m.name_any(), m))
            .collect();
        let update =
            decide::pod_update(&pod, status, |marker| markers.get(marker).map(Arc::as_ref));
        if update.is_empty() {
            continue;
        }
        write_pod(ctx, &pod, &update).await?;
    }
    Ok(())
}

/// Writes the Pod's markers (metadata patch) and probe conditions (status patch, merged by type).
async fn write_pod(ctx: &Context, pod: &Pod, update: &decide::PodUpdate) -> Result<(), Error> {
    let namespace = pod.namespace().unwrap_or_default();
    let name = pod.name_any();
    let api = Writer::<Pod>::namespaced(ctx.writes.clone(), &namespace);
    let uid = pod.metadata.uid.clone();
    if !update.labels.is_empty() || !update.annotations.is_empty() {
        let as_map = |m: &std::collections::BTreeMap<String, Option<String>>| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.clone().map_or(Value::Null, Value::String)))
                .collect::<Map<String, Value>>()
        };
        let patch = json!({"metadata": {
            "uid": uid,
            "labels": as_map(&update.labels),
            "annotations": as_map(&update.annotations),
        }});
        api.patch(&name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
            .context(|| format!("writing the probe markers of Pod {namespace}/{name}"))?;
    }
    if !update.conditions.is_empty() {
        let patch = json!({
            "metadata": {"uid": uid},
            "status": {"conditions": update.conditions},
        });
        api.patch_status(&name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
            .context(|| format!("writing the probe conditions of Pod {namespace}/{name}"))?;
    }
    tracing::info!(
        pod = %format!("{namespace}/{name}"),
        conditions = update.conditions.len(),
        labels = update.labels.len(),
        annotations = update.annotations.len(),
        "updated the Pod from its probe states"
    );
    Ok(())
}

#[cfg(test)]
#[path = "nodepodprobe_tests.rs"]
mod tests;
