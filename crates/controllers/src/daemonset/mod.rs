//! The Advanced DaemonSet controller (inventory §6): observe the set, its Pods (shared cache), the
//! cluster's Nodes and its ControllerRevisions; decide with `kruise_core::rollout::daemonset::plan`
//! on each node's `kruise_core::nodefit::daemon_fit` verdict; act through the shared
//! [`crate::podcontrol`]; write the status of [`status`].

pub mod newpod;
mod reconcile;
pub mod status;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Node;
use kruise_api::daemonset::v1beta1::DaemonSet;
use kruise_core::expectations::Expectations;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::Reporter;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Api, Client};
use tokio::sync::mpsc;

use crate::cache::PodCache;
use crate::events::EventRecorder;
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
}

impl Default for Config {
    fn default() -> Self {
        Self {
            workers: 3,
            expectation_timeout: Duration::from_secs(300),
            resize: true,
        }
    }
}

/// What every reconcile shares.
pub struct Context {
    pub(crate) client: Client,
    pub(crate) pods: Arc<PodCache>,
    pub(crate) nodes: Store<Node>,
    pub(crate) revisions: Store<ControllerRevision>,
    pub(crate) expectations: Mutex<Expectations>,
    pub(crate) recorder: EventRecorder,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) config: Config,
}

/// Runs the Advanced DaemonSet controller until the future is dropped.
pub async fn run(client: Client, pods: Arc<PodCache>, metrics: Arc<Metrics>, config: Config) {
    let (all_tx, all_rx) = mpsc::unbounded_channel();
    let owner_rx = pods
        .subscribe("daemonset")
        .forward_owners::<DaemonSet>(all_tx.clone());
    pods.wait_synced().await;
    let nodes = crate::nodes::watch(client.clone(), all_tx, "DaemonSet");
    let (revisions, revision_events) =
        crate::cache::reflected(Api::<ControllerRevision>::all(client.clone()), None);

    let ctx = Arc::new(Context {
        client: client.clone(),
        pods,
        nodes,
        revisions,
        expectations: Mutex::new(Expectations::new(config.expectation_timeout)),
        recorder: EventRecorder::new(
            client.clone(),
            Reporter {
                controller: CONTROLLER.into(),
                instance: None,
            },
        ),
        metrics,
        config: config.clone(),
    });
    tracing::info!(workers = config.workers, "daemonset controller started");
    Controller::new(
        Api::<DaemonSet>::all(client),
        watcher::Config::default().any_semantic(),
    )
    .owns_stream(revision_events)
    .reconcile_on(crate::cache::receiver_stream(owner_rx))
    .reconcile_all_on(crate::cache::receiver_stream(all_rx))
    .with_config(kube::runtime::controller::Config::default().concurrency(config.workers))
    .run(
        crate::parallel::on_own_task(reconcile::reconcile),
        error_policy,
        ctx,
    )
    .for_each(|_| futures::future::ready(()))
    .await;
}

fn error_policy(ds: Arc<DaemonSet>, error: &Error, ctx: Arc<Context>) -> Action {
    tracing::warn!(
        daemonset = %format!("{}/{}", ds.metadata.namespace.as_deref().unwrap_or_default(), ds.metadata.name.as_deref().unwrap_or_default()),
        %error,
        "reconcile failed"
    );
    ctx.metrics.reconciled(CONTROLLER, false, 0.0);
    Action::requeue(Duration::from_secs(2))
}

/// Node labels by name, for the rollout selector.
pub(crate) fn node_labels(node: &Node) -> BTreeMap<String, String> {
    node.metadata.labels.clone().unwrap_or_default()
}
