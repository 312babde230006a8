//! The BroadcastJob controller (upstream `pkg/controller/broadcastjob`), on the shared driver: one
//! Pod to completion on every node the job fits. Observe the job, its Pods and the Nodes (all from the
//! shared caches); decide with `kruise_core::rollout::broadcastjob`; act through the shared
//! [`crate::podcontrol`].

pub mod newpod;
mod reconcile;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Node;
use kruise_api::broadcastjob::v1beta1::BroadcastJob;
use kruise_core::expectations::Expectations;
use kube::Client;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::Store;
use tokio::sync::mpsc;

use crate::cache::PodCache;
use crate::driver::caches::Caches;
use crate::events::EventRecorder;
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
    /// The act step's writes (the apiserver; a `FakeCluster` in unit tests).
    pub(crate) writes: Arc<dyn crate::driver::writes::Writes>,
    /// The live reads of a reconcile: the owner re-read before an adoption, a taken revision name.
    pub(crate) live: Arc<dyn crate::driver::writes::LiveReads>,
    pub(crate) pods: Arc<PodCache>,
    pub(crate) nodes: Store<Node>,
    /// BroadcastJob keeps no ControllerRevisions: an empty store for the shared expectation check.
    pub(crate) no_revisions: Store<ControllerRevision>,
    pub(crate) expectations: Mutex<Expectations>,
    pub(crate) recorder: EventRecorder,
    pub(crate) metrics: Arc<Metrics>,
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
        writes: crate::driver::writes::ApiWrites::new(client.clone()),
        live: crate::driver::writes::ApiWrites::new(client.clone()),
        pods: caches.pods,
        nodes: caches.nodes.store().clone(),
        no_revisions: kube::runtime::reflector::store().0,
        expectations: Mutex::new(Expectations::new(config.expectation_timeout)),
        recorder: crate::driver::recorder(client.clone(), CONTROLLER),
        metrics,
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

impl crate::driver::Driven for Context {
    fn controller(&self) -> &'static str {
        CONTROLLER
    }

    fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}
