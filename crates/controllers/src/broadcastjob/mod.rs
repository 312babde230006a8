//! The BroadcastJob controller (upstream `pkg/controller/broadcastjob`), on the shared driver: one
//! Pod to completion on every node the job fits. Observe the job, its Pods and the Nodes (all from the
//! shared caches); decide with `kruise_core::rollout::broadcastjob`; act through the shared
//! [`crate::podcontrol`].

pub mod newpod;
mod reconcile;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kruise_api::broadcastjob::v1beta1::BroadcastJob;
use kube::Client;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::Store;
use tokio::sync::mpsc;

use crate::driver::caches::Caches;
use crate::metrics::Metrics;

pub use crate::error::Error;

/// The controller's name in metrics, logs and Events.
pub const CONTROLLER: &str = "broadcastjob-controller";

/// How the controller runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// Concurrent reconciles (`--broadcastjob-workers`).
    pub workers: u16,
    /// How long a write may stay unobserved before the controller stops waiting for it.
    pub expectation_timeout: Duration,
    /// Bind Pods to their node through required node affinity and let the scheduler place them
    /// (`--assign-bcj-pods-by-scheduler`, default true); otherwise set `spec.nodeName`.
    pub assign_by_scheduler: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            workers: 3,
            expectation_timeout: Duration::from_secs(300),
            assign_by_scheduler: true,
        }
    }
}

/// What every reconcile shares.
pub struct Context {
    /// What every Pod-owning kind's context holds.
    pub(crate) base: crate::driver::head::PodOwnerBase,
    pub(crate) nodes: Store<Node>,
    pub(crate) config: Config,
}

/// Runs the BroadcastJob controller on the shared `caches` until the future is dropped.
pub async fn run(client: Client, caches: Caches, metrics: Arc<Metrics>, config: Config) {
    let (all_tx, all_rx) = mpsc::unbounded_channel();
    let owner_rx = caches
        .pods
        .subscribe("broadcastjob")
        .forward_owners::<BroadcastJob>(all_tx.clone());
    crate::nodes::trigger(&caches.nodes, all_tx, "BroadcastJob");
    caches.pods.wait_synced().await;
    let ctx = Arc::new(Context {
        base: crate::driver::head::PodOwnerBase::new(
            &client,
            CONTROLLER,
            &caches,
            metrics,
            config.expectation_timeout,
        )
        .without_revisions(),
        nodes: caches.nodes.store().clone(),
        config: config.clone(),
    });
    // The manager's one BroadcastJob watch (AdvancedCronJobs read it too): every job once it is
    // listed, then every change.
    let controller = Controller::for_stream(
        caches.broadcastjobs.replayed_stream(),
        caches.broadcastjobs.store().clone(),
    )
    .reconcile_on(crate::cache::receiver_stream(owner_rx))
    .reconcile_all_on(crate::cache::receiver_stream(all_rx));
    crate::driver::run(controller, config.workers, reconcile::reconcile, ctx).await;
}

impl crate::driver::head::OwnsPods for Context {
    fn base(&self) -> &crate::driver::head::PodOwnerBase {
        &self.base
    }
}
