//! The CloneSet controller (inventory §1): observe the CloneSet, its Pods (shared cache) and its
//! ControllerRevisions; decide with [`decide`] and [`status`]; act with patches ([`act`]).

mod act;
pub use kruise_core::rollout::cloneset::decide;
pub mod newpod;
mod reconcile;
pub mod status;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kruise_api::cloneset::v1beta1::CloneSet;
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
}

impl Default for Config {
    fn default() -> Self {
        Self {
            workers: 3,
            expectation_timeout: Duration::from_secs(300),
            settings: Settings::default(),
        }
    }
}

/// What every reconcile shares.
pub struct Context {
    pub(crate) client: Client,
    pub(crate) pods: Arc<PodCache>,
    pub(crate) revisions: Store<ControllerRevision>,
    /// Claims labelled with a CloneSet instance id.
    pub(crate) pvcs: Store<PersistentVolumeClaim>,
    pub(crate) expectations: Mutex<Expectations>,
    pub(crate) recorder: EventRecorder,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) config: Config,
}

pub use crate::error::{Error, KubeContext};

/// Runs the CloneSet controller until the future is dropped.
pub async fn run(client: Client, pods: Arc<PodCache>, metrics: Arc<Metrics>, config: Config) {
    let (all_tx, all_rx) = mpsc::unbounded_channel();
    let owner_rx = pods
        .subscribe("cloneset")
        .forward_owners::<CloneSet>(all_tx);
    pods.wait_synced().await;

    let (revisions, revision_events) =
        crate::cache::reflected(Api::<ControllerRevision>::all(client.clone()), None);

    // Only PVCs carrying an instance id: the claims of CloneSet Pods, not every claim in the cluster.
    let (pvcs, pvc_events) = crate::cache::reflected(
        Api::<PersistentVolumeClaim>::all(client.clone()),
        Some(kruise_api::cloneset::LABEL_INSTANCE_ID),
    );
    tokio::spawn(pvc_events.for_each(|_| futures::future::ready(())));

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
    tracing::info!(workers = config.workers, "cloneset controller started");
    Controller::new(
        Api::<CloneSet>::all(client),
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

fn error_policy(cs: Arc<CloneSet>, error: &Error, ctx: Arc<Context>) -> Action {
    tracing::warn!(
        cloneset = %format!("{}/{}", cs.metadata.namespace.as_deref().unwrap_or_default(), cs.metadata.name.as_deref().unwrap_or_default()),
        %error,
        "reconcile failed"
    );
    ctx.metrics.reconciled(CONTROLLER, false, 0.0);
    Action::requeue(Duration::from_secs(2))
}
