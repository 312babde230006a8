//! The CloneSet controller, on the shared driver ([`crate::driver`]): observe the CloneSet, its Pods
//! and ControllerRevisions (shared caches); decide with [`decide`] and [`status`]; act with patches ([`act`]).

mod act;
use kruise_core::rollout::cloneset::decide;
pub mod newpod;
mod predownload;
mod reconcile;
pub mod status;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim};
use kruise_api::cloneset::v1beta1::CloneSet;
use kube::Client;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::Store;
use tokio::sync::mpsc;

use crate::driver::caches::Caches;
use crate::metrics::Metrics;

pub use decide::Settings;

/// The controller's name in metrics, logs and Events.
pub const CONTROLLER: &str = "cloneset-controller";

/// How the controller runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// Concurrent reconciles.
    pub workers: u16,
    /// How long a write may stay unobserved before the controller stops waiting for it.
    pub expectation_timeout: Duration,
    pub settings: Settings,
    /// Gate `PreDownloadImageForInPlaceUpdate`: pull an in-place rollout's new images ahead through
    /// ImagePullJobs.
    pub pre_download: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            workers: 3,
            expectation_timeout: Duration::from_secs(300),
            settings: Settings::default(),
            pre_download: false,
        }
    }
}

/// What every reconcile shares.
pub struct Context {
    /// What every Pod-owning kind's context holds.
    pub(crate) base: crate::driver::head::PodOwnerBase,
    /// Every claim of the cluster; a CloneSet looks only at those labelled with an instance id.
    pub(crate) pvcs: Store<PersistentVolumeClaim>,
    /// Every Node (the spread ranker reads their labels).
    pub(crate) nodes: Store<Node>,
    pub(crate) config: Config,
    /// CloneSets known to own no ImagePullJob.
    pub(crate) predownload: crate::predownload::Tracker,
}

pub use crate::error::{Error, KubeContext};

/// Runs the CloneSet controller on the shared `caches` until the future is dropped.
pub async fn run(client: Client, caches: Caches, metrics: Arc<Metrics>, config: Config) {
    let (all_tx, all_rx) = mpsc::unbounded_channel();
    let owner_rx = caches
        .pods
        .subscribe("cloneset")
        .forward_owners::<CloneSet>(all_tx);
    let revision_events = caches.revisions.owned_stream();
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
        nodes: caches.nodes.store().clone(),
        config: config.clone(),
        predownload: crate::predownload::Tracker::default(),
    });
    // The manager's one CloneSet watch (PodUnavailableBudgets read it too): every object once
    // it is listed, then every change.
    let controller = Controller::for_stream(
        caches.clonesets.replayed_stream(),
        caches.clonesets.store().clone(),
    )
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
