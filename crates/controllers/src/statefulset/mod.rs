//! The Advanced StatefulSet controller, on the shared driver: observe the set, its Pods (shared
//! cache), claims and ControllerRevisions; decide with `kruise_core::rollout::statefulset::plan`
//! and [`status`]; act through the shared [`crate::podcontrol`].

pub mod newpod;
mod reconcile;
#[cfg(test)]
mod reconcile_tests;
pub mod status;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kruise_api::statefulset::v1beta1::StatefulSet;
use kube::Client;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::Store;
use tokio::sync::mpsc;

use crate::driver::caches::Caches;
use crate::metrics::Metrics;

pub use crate::error::Error;

/// The controller's name in metrics, logs and Events.
pub const CONTROLLER: &str = "statefulset-controller";

/// How the controller runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// Concurrent reconciles.
    pub workers: u16,
    /// How long a write may stay unobserved before the controller stops waiting for it.
    pub expectation_timeout: Duration,
    /// Resize cpu/memory in place through `pods/resize` (gate InPlaceWorkloadVerticalScaling).
    pub resize: bool,
    /// Gate `InPlaceUpdateEnvFromMetadata`: restart the containers whose env reads a changed
    /// label/annotation through kruise-daemon instead of recreating the Pod.
    pub env_from_metadata: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            workers: 3,
            expectation_timeout: Duration::from_secs(300),
            resize: true,
            env_from_metadata: true,
        }
    }
}

/// What every reconcile shares.
pub struct Context {
    /// What every Pod-owning kind's context holds.
    pub(crate) base: crate::driver::head::PodOwnerBase,
    pub(crate) pvcs: Store<PersistentVolumeClaim>,
    pub(crate) config: Config,
}

/// Runs the Advanced StatefulSet controller on the shared `caches` until the future is dropped.
pub async fn run(client: Client, caches: Caches, metrics: Arc<Metrics>, config: Config) {
    let (all_tx, all_rx) = mpsc::unbounded_channel();
    let owner_rx = caches
        .pods
        .subscribe("statefulset")
        .forward_owners::<StatefulSet>(all_tx);
    let revision_events = caches.revisions.owned_stream();
    // Claims carry the set's selector labels, not a label of ours: a set is reconciled when a
    // claim it owns changes (a resize catching up).
    let pvc_events = caches.pvcs.owned_stream();
    caches.pods.wait_synced().await;
    let ctx = Arc::new(Context {
        base: crate::driver::head::PodOwnerBase::new(
            &client,
            CONTROLLER,
            &caches,
            metrics,
            config.expectation_timeout,
        ),
        pvcs: caches.pvcs.store().clone(),
        config: config.clone(),
    });
    // The manager's one Advanced StatefulSet watch (PodUnavailableBudgets read it too): every object once
    // it is listed, then every change.
    let controller = Controller::for_stream(
        caches.advanced_statefulsets.replayed_stream(),
        caches.advanced_statefulsets.store().clone(),
    )
    .owns_stream(revision_events)
    .owns_stream(pvc_events)
    .reconcile_on(crate::cache::receiver_stream(owner_rx))
    .reconcile_all_on(crate::cache::receiver_stream(all_rx));
    crate::driver::run(controller, config.workers, reconcile::reconcile, ctx).await;
}

impl crate::driver::head::OwnsPods for Context {
    fn base(&self) -> &crate::driver::head::PodOwnerBase {
        &self.base
    }
}
