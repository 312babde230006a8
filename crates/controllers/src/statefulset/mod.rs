//! The Advanced StatefulSet controller (inventory §2): observe the set, its Pods (shared cache),
//! claims and ControllerRevisions; decide with `kruise_core::rollout::statefulset::plan` and
//! [`status`]; act through the shared [`crate::podcontrol`].

pub mod newpod;
mod reconcile;
pub mod status;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kruise_api::statefulset::v1beta1::StatefulSet;
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
    pub(crate) revisions: Store<ControllerRevision>,
    pub(crate) pvcs: Store<PersistentVolumeClaim>,
    pub(crate) expectations: Mutex<Expectations>,
    pub(crate) recorder: EventRecorder,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) config: Config,
}

/// Runs the Advanced StatefulSet controller until the future is dropped.
pub async fn run(client: Client, pods: Arc<PodCache>, metrics: Arc<Metrics>, config: Config) {
    let (all_tx, all_rx) = mpsc::unbounded_channel();
    let owner_rx = pods
        .subscribe("statefulset")
        .forward_owners::<StatefulSet>(all_tx);
    pods.wait_synced().await;

    let (revisions, revision_events) =
        crate::cache::reflected(Api::<ControllerRevision>::all(client.clone()), None);
    // Claims carry the set's selector labels, not a label of ours: watch them all (claims are few
    // next to Pods), and reconcile a set when a claim it owns changes (a resize catching up).
    let (pvcs, pvc_events) =
        crate::cache::reflected(Api::<PersistentVolumeClaim>::all(client.clone()), None);

    let ctx = Arc::new(Context {
        client: client.clone(),
        pods,
        revisions,
        pvcs,
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
    tracing::info!(workers = config.workers, "statefulset controller started");
    Controller::new(
        Api::<StatefulSet>::all(client),
        watcher::Config::default().any_semantic(),
    )
    .owns_stream(revision_events)
    .owns_stream(pvc_events)
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

fn error_policy(set: Arc<StatefulSet>, error: &Error, ctx: Arc<Context>) -> Action {
    tracing::warn!(
        statefulset = %format!("{}/{}", set.metadata.namespace.as_deref().unwrap_or_default(), set.metadata.name.as_deref().unwrap_or_default()),
        %error,
        "reconcile failed"
    );
    ctx.metrics.reconciled(CONTROLLER, false, 0.0);
    Action::requeue(Duration::from_secs(2))
}
