//! The Advanced DaemonSet controller, on the shared driver: observe the set, its Pods (shared
//! cache), the cluster's Nodes and its ControllerRevisions; decide with
//! `kruise_core::rollout::daemonset::plan` on each node's `kruise_core::nodefit::daemon_fit`
//! verdict; act through the shared [`crate::podcontrol`]; write the status of [`status`].

pub mod newpod;
mod predownload;
mod reconcile;
pub mod status;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kruise_api::daemonset::v1beta1::DaemonSet;
use kube::Client;
use kube::runtime::reflector::Store;
use tokio::sync::mpsc;

use crate::driver::caches::Caches;
use crate::metrics::Metrics;

pub use crate::error::Error;

/// The controller's name in metrics, logs and Events.
pub const CONTROLLER: &str = "daemonset-controller";

/// How the controller runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// Concurrent reconciles.
    pub workers: u16,
    /// How long a write may stay unobserved before the controller stops waiting for it.
    pub expectation_timeout: Duration,
    /// Resize cpu/memory in place through `pods/resize`.
    pub resize: bool,
    /// Gate `InPlaceUpdateEnvFromMetadata`: restart the containers whose env reads a changed
    /// label/annotation through kruise-daemon instead of recreating the Pod.
    pub env_from_metadata: bool,
    /// Gate `DaemonSetPruneIneligibleNodes`.
    pub prune_ineligible_nodes: bool,
    /// Gate `PreDownloadImageForDaemonSetUpdate`: pull a rollout's new images ahead through
    /// ImagePullJobs.
    pub pre_download: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            workers: 3,
            expectation_timeout: Duration::from_secs(300),
            resize: true,
            env_from_metadata: true,
            prune_ineligible_nodes: false,
            pre_download: false,
        }
    }
}

/// What every reconcile shares.
pub struct Context {
    /// What every Pod-owning kind's context holds.
    pub(crate) base: crate::driver::head::PodOwnerBase,
    pub(crate) nodes: Store<Node>,
    pub(crate) config: Config,
    /// Sets known to own no ImagePullJob.
    pub(crate) predownload: crate::predownload::Tracker,
}

/// Runs the Advanced DaemonSet controller on the shared `caches` until the future is dropped.
pub async fn run(client: Client, caches: Caches, metrics: Arc<Metrics>, config: Config) {
    let (all_tx, all_rx) = mpsc::unbounded_channel();
    let owner_rx = caches
        .pods
        .subscribe("daemonset")
        .forward_owners::<DaemonSet>(all_tx.clone());
    let revision_events = caches.revisions.owned_stream();
    crate::nodes::trigger(&caches.nodes, all_tx, "DaemonSet");
    caches.pods.wait_synced().await;
    let watched = caches.shared::<DaemonSet>();
    let ctx = Arc::new(Context {
        base: crate::driver::head::PodOwnerBase::new(
            &client,
            CONTROLLER,
            &caches,
            metrics,
            config.expectation_timeout,
        ),
        nodes: caches.nodes.store().clone(),
        config: config.clone(),
        predownload: crate::predownload::Tracker::default(),
    });
    let controller = watched
        .controller()
        .owns_stream(revision_events)
        .reconcile_on(crate::cache::receiver_stream(owner_rx))
        .reconcile_all_on(crate::cache::receiver_stream(all_rx));
    crate::driver::run(controller, config.workers, reconcile::reconcile, ctx).await;
}

impl crate::driver::head::OwnsPods for Context {
    fn base(&self) -> &crate::driver::head::PodOwnerBase {
        &self.base
    }
}

/// Node labels by name, for the rollout selector.
pub(crate) fn node_labels(node: &Node) -> BTreeMap<String, String> {
    node.metadata.labels.clone().unwrap_or_default()
}
