//! The PersistentPodState controller (upstream `pkg/controller/persistentpodstate`), on the shared
//! driver: records the node topology of the ready Pods of a StatefulSet (Kubernetes' or kruise's)
//! in the status of its PersistentPodState, and keeps the PersistentPodStates that workloads ask
//! for through their `kruise.io/auto-generate-persistent-pod-state` annotations.
//!
//! Observe: the PersistentPodState (process-wide cache, shared with the Pod webhook), its target
//! workload (read from the apiserver: replicas, reserved ordinals, deletion), the workload's Pods
//! (shared Pod cache, by controlling owner) and their Nodes' labels (shared Node cache). Decide:
//! `kruise_core::persistentpodstate::next_status`. Act: the status, as a merge patch that removes
//! what went (`merge_diff`) over the resourceVersion it was computed from ([`write_status`]).
//!
//! Woken by: a change of a PersistentPodState's spec; a change of a Pod whose controller is a
//! PersistentPodState's target; a change or deletion of a StatefulSet (metadata watches of both
//! kinds, which also drive the auto-generation: [`generate`]).

mod generate;
mod workload;

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kruise_api::persistentpodstate::{PersistentPodState, TargetReference};
use kruise_core::persistentpodstate::{self as decide, ObservedPod};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{PredicateConfig, WatchStreamExt, predicates};
use kube::{Client, ResourceExt};
use tokio::sync::mpsc;

use crate::cache::{CacheEvent, PodCache};
use crate::driver::caches::Caches;
use crate::driver::write::{StatusWrite, write_status};
use crate::driver::writes::{ApiWrites, Writer, Writes};
use crate::error::Error;
use crate::metrics::Metrics;

/// The controller's name in metrics, logs and Events (upstream's).
pub const CONTROLLER: &str = "persistentpodstate-controller";

/// How the controller runs: its number of concurrent reconciles only.
pub type Config = crate::driver::WorkersOnly;

/// What every reconcile shares.
pub struct Context {
    /// The target workload is read live ([`workload::read`]: discovery and the scale subresource
    /// for a whitelisted custom workload).
    client: Client,
    writes: Arc<dyn Writes>,
    pods: Arc<PodCache>,
    nodes: Store<Node>,
    metrics: Arc<Metrics>,
}

// Its watch trigger is filtered to spec changes (its status writes must not wake it).
crate::driver::driven!(Context, CONTROLLER, spec_changes_only = true);

/// Runs the controller (and the auto-generation beside it) until the future is dropped.
pub async fn run(client: Client, caches: Caches, metrics: Arc<Metrics>, config: Config) {
    let states = caches.persistentpodstates.clone();
    let store = states.store().clone();
    let (wake_tx, wake_rx) = mpsc::unbounded_channel();
    let (all_tx, all_rx) = mpsc::unbounded_channel();
    wake_on_pods(&caches.pods, store.clone(), wake_tx.clone(), all_tx);
    let generation = generate::run(
        client.clone(),
        &caches,
        wake_tx,
        metrics.clone(),
        config.workers,
    );
    let changes = states
        .replayed_stream()
        .predicate_filter(predicates::generation, PredicateConfig::default());
    let controller = Controller::for_stream(changes, store)
        .reconcile_on(crate::cache::receiver_stream(wake_rx))
        .reconcile_all_on(crate::cache::receiver_stream(all_rx));
    caches.pods.wait_synced().await;
    caches.nodes.wait_listed().await;
    let ctx = Arc::new(Context {
        writes: ApiWrites::new(client.clone()),
        client,
        pods: caches.pods.clone(),
        nodes: caches.nodes.store().clone(),
        metrics,
    });
    tokio::join!(
        crate::driver::run(controller, config.workers, reconcile, ctx),
        generation
    );
}

/// The PersistentPodStates of `namespace` whose target is the workload `owner`.
fn targeting(
    store: &Store<PersistentPodState>,
    namespace: &str,
    owner: &TargetReference,
) -> Vec<ObjectRef<PersistentPodState>> {
    store
        .state()
        .iter()
        .filter(|pps| pps.namespace().as_deref() == Some(namespace))
        .filter(|pps| {
            kruise_api::persistentpodstate::same_workload(&pps.spec.target_reference, owner)
        })
        .map(|pps| ObjectRef::from_obj(pps.as_ref()))
        .collect()
}

/// Wakes the PersistentPodState of the controller of a Pod that changed.
fn wake_on_pods(
    pods: &PodCache,
    store: Store<PersistentPodState>,
    wake: mpsc::UnboundedSender<ObjectRef<PersistentPodState>>,
    all: mpsc::UnboundedSender<()>,
) {
    let mut events = pods.subscribe("persistentpodstate");
    tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            match event {
                CacheEvent::Owner(owner) => {
                    let target = TargetReference {
                        api_version: owner.api_version.clone(),
                        kind: owner.kind.clone(),
                        name: owner.name.clone(),
                    };
                    for pps in targeting(&store, &owner.namespace, &target) {
                        if wake.send(pps).is_err() {
                            return;
                        }
                    }
                }
                CacheEvent::Resync => {
                    if all.send(()).is_err() {
                        return;
                    }
                }
                CacheEvent::Pod(_) => {}
            }
        }
    });
}

async fn reconcile(pps: Arc<PersistentPodState>, ctx: Arc<Context>) -> Result<Action, Error> {
    let pps = pps.as_ref();
    if pps.metadata.uid.is_none() || pps.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let namespace = pps.namespace().unwrap_or_default();
    let target = &pps.spec.target_reference;

    // Observe: the workload live, then the caches.
    let found = workload::read(&ctx.client, &namespace, target).await?;
    settle(pps, found.as_ref(), &ctx).await
}

/// Records the Pods of the workload `found` (from the caches) in the status of `pps`: written
/// when it changed, over the resourceVersion read.
async fn settle(
    pps: &PersistentPodState,
    found: Option<&workload::Found>,
    ctx: &Context,
) -> Result<Action, Error> {
    let namespace = pps.namespace().unwrap_or_default();
    let name = pps.name_any();
    let pods: Vec<ObservedPod> = found
        .as_ref()
        .map(|w| {
            ctx.pods
                .owned_by(&w.uid)
                .iter()
                .filter(|p| kruise_core::pods::is_active(p))
                .map(|p| ObservedPod {
                    name: p.name_any(),
                    ready: kruise_core::pods::is_ready(p),
                    node_name: kruise_core::pods::node_name(p).unwrap_or_default().into(),
                    annotations: p.metadata.annotations.clone().unwrap_or_default(),
                })
                .collect()
        })
        .unwrap_or_default();
    let nodes: BTreeMap<String, Arc<Node>> = pods
        .iter()
        .filter(|p| p.ready && !p.node_name.is_empty())
        .filter_map(|p| {
            ctx.nodes
                .get(&ObjectRef::new(&p.node_name))
                .map(|n| (p.node_name.clone(), n))
        })
        .collect();
    let status = decide::next_status(pps, found.map(|w| &w.observed), &pods, |node| {
        nodes.get(node).and_then(|n| n.metadata.labels.as_ref())
    });

    // Status.
    let old = pps.status.clone().unwrap_or_default();
    if status != old || pps.status.is_none() {
        let before = serde_json::to_value(&old).unwrap_or_default();
        let after = serde_json::to_value(&status).unwrap_or_default();
        let patch = match pps.status {
            Some(_) => decide::merge_diff(&before, &after).unwrap_or_default(),
            None => after,
        };
        let api = Writer::<PersistentPodState>::namespaced(ctx.writes.clone(), &namespace);
        let written = write_status::<_, serde_json::Value>(&api, pps, None, &patch, true).await?;
        tracing::debug!(
            persistentpodstate = %format!("{namespace}/{name}"),
            records = status.pod_states.len(),
            ?written,
            "status"
        );
        // Computed from a copy older than the server's: decide again on the newer one (its
        // event may carry no spec change, which alone would not wake this controller).
        if written == StatusWrite::Stale {
            return Ok(Action::requeue(crate::driver::ERROR_REQUEUE));
        }
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;
    use kube::runtime::watcher;
    use serde_json::json;

    use super::*;
    use crate::driver::scripted;
    use crate::driver::writes::fake::{FakeCluster, Verb};

    fn context(cluster: &Arc<FakeCluster>) -> Context {
        let pods = PodCache::new();
        for ordinal in 0..2 {
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": format!("web-{ordinal}"), "namespace": "ns",
                             "uid": format!("web-{ordinal}-uid"),
                             "ownerReferences": [{"apiVersion": "apps.kruise.io/v1beta1",
                                 "kind": "StatefulSet", "name": "web", "uid": "web-uid",
                                 "controller": true}]},
                "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
                "status": {"phase": "Running",
                           "conditions": [{"type": "Ready", "status": "True"}]},
            }))
            .expect("a Pod");
            pods.apply(watcher::Event::Apply(pod));
        }
        let (nodes, mut writer) = kube::runtime::reflector::store();
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1", "labels": {"zone": "a"}},
        }))
        .expect("a Node");
        writer.apply_watcher_event(&watcher::Event::Apply(node));
        let mut registry = prometheus_client::registry::Registry::default();
        Context {
            client: scripted::client(Vec::new()).0,
            writes: cluster.clone(),
            pods,
            nodes,
            metrics: Metrics::register(&mut registry),
        }
    }

    fn state(cluster: &FakeCluster) -> PersistentPodState {
        let pps: PersistentPodState = serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "PersistentPodState",
            "metadata": {"name": "web", "namespace": "ns", "uid": "pps-uid", "generation": 1},
            "spec": {
                "targetRef": {"apiVersion": "apps.kruise.io/v1beta1", "kind": "StatefulSet",
                              "name": "web"},
                "requiredPersistentTopology": {"nodeTopologyKeys": ["zone"]},
            },
        }))
        .expect("a PersistentPodState");
        cluster.insert(&pps)
    }

    fn web() -> workload::Found {
        workload::Found {
            uid: "web-uid".into(),
            observed: kruise_core::persistentpodstate::ObservedWorkload {
                replicas: 2,
                ..Default::default()
            },
        }
    }

    fn zones(cluster: &FakeCluster) -> Option<BTreeMap<String, String>> {
        let pps: PersistentPodState = cluster.get(Some("ns"), "web")?;
        Some(
            pps.status?
                .pod_states
                .into_iter()
                .map(|(pod, state)| {
                    let zone = state.node_topology_labels.get("zone").cloned();
                    (pod, zone.unwrap_or_default())
                })
                .collect(),
        )
    }

    #[tokio::test]
    async fn each_ready_pod_is_recorded_with_its_node_topology() {
        let cluster = FakeCluster::new();
        let ctx = context(&cluster);
        let pps = state(&cluster);
        settle(&pps, Some(&web()), &ctx).await.expect("settled");
        let recorded = zones(&cluster).expect("a status");
        assert_eq!(
            recorded,
            BTreeMap::from([
                ("web-0".to_owned(), "a".to_owned()),
                ("web-1".to_owned(), "a".to_owned()),
            ])
        );
        // Settled again on the copy written: nothing changes, nothing is sent.
        let written: PersistentPodState = cluster.get(Some("ns"), "web").expect("the state");
        settle(&written, Some(&web()), &ctx).await.expect("settled");
        assert_eq!(cluster.done().len(), 1);
    }

    /// A status computed from a stale copy is dropped and decided again; a refused write fails.
    #[tokio::test]
    async fn a_stale_copy_is_decided_again_and_a_refused_status_fails() {
        let cluster = FakeCluster::new();
        let ctx = context(&cluster);
        let pps = state(&cluster);
        cluster.touch::<PersistentPodState>(Some("ns"), "web");
        let action = settle(&pps, Some(&web()), &ctx).await.expect("settled");
        assert_eq!(action, Action::requeue(crate::driver::ERROR_REQUEUE));
        assert_eq!(zones(&cluster), None);

        let pps = state(&cluster);
        cluster.fail_next(Verb::PatchStatus, "web", 422);
        assert!(settle(&pps, Some(&web()), &ctx).await.is_err());
        assert_eq!(zones(&cluster), None);
    }
}
