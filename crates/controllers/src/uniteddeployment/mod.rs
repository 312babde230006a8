//! The UnitedDeployment controller, on the shared driver: one workload per topology subset — a
//! CloneSet, an Advanced StatefulSet, a native StatefulSet or a Deployment — created, adopted,
//! updated and deleted from the template; the replicas split by
//! `kruise_core::rollout::uniteddeployment::allocate`. The subset workloads' own controllers (ours
//! for CloneSet and Advanced StatefulSet, the kube-controller-manager's for the native kinds) run
//! the Pods.

mod observe;
mod reconcile;
#[cfg(test)]
mod reconcile_tests;
mod reservation;
mod status;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ControllerRevision, Deployment};
use kruise_api::keys;
use kruise_api::uniteddeployment::v1beta1::UnitedDeployment;
use kruise_core::expectations::Expectations;
use kruise_core::rollout::uniteddeployment::TemplateKind;
use kube::Client;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::{ObjectRef, Store};

use crate::cache::PodCache;
use crate::driver::caches::{Caches, Shared};
use crate::events::EventRecorder;
use crate::metrics::Metrics;

pub use crate::error::Error;

/// The controller's name in metrics, logs and Events.
pub const CONTROLLER: &str = "uniteddeployment-controller";

/// How the controller runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// Concurrent reconciles (`--uniteddeployment-workers`).
    pub workers: u16,
    /// How long a write may stay unobserved before the controller stops waiting for it.
    pub expectation_timeout: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            workers: 3,
            expectation_timeout: Duration::from_secs(300),
        }
    }
}

/// The expectation kind (`kruise_core::expectations::Expectation::kind`) of a subset workload of
/// `kind`: the name of an expected workload is its subset's name when created, its own name when
/// patched or deleted.
pub(crate) fn expectation_kind(kind: TemplateKind) -> &'static str {
    match kind {
        TemplateKind::StatefulSet => "StatefulSet",
        TemplateKind::AdvancedStatefulSet => "AdvancedStatefulSet",
        TemplateKind::CloneSet => "CloneSet",
        TemplateKind::Deployment => "Deployment",
    }
}

/// The expectation kind of a created subset workload, named by its subset (its name is generated).
pub(crate) const CREATED_SUBSET: &str = "CreatedSubset";

/// What every reconcile shares.
pub struct Context {
    /// The act step's writes (the apiserver; a `FakeCluster` in unit tests).
    pub(crate) writes: Arc<dyn crate::driver::writes::Writes>,
    /// The live reads of a reconcile: the owner re-read before an adoption, a taken revision name.
    pub(crate) live: Arc<dyn crate::driver::writes::LiveReads>,
    pub(crate) pods: Arc<PodCache>,
    pub(crate) revisions: Store<ControllerRevision>,
    /// The subset workloads of each kind (only objects labelled `apps.kruise.io/subset-name`).
    pub(crate) workloads: Vec<(TemplateKind, ApiResource, Subsets)>,
    /// The writes not yet shown by the caches, by UnitedDeployment key; each expires after
    /// `config.expectation_timeout`, as every other kind's.
    pub(crate) expectations: Mutex<Expectations>,
    pub(crate) recorder: EventRecorder,
    pub(crate) metrics: Arc<Metrics>,
}

impl Context {
    pub(crate) fn workloads_of(
        &self,
        kind: TemplateKind,
    ) -> Option<&(TemplateKind, ApiResource, Subsets)> {
        self.workloads.iter().find(|(k, _, _)| *k == kind)
    }
}

/// The API resource of a subset workload kind.
pub(crate) fn api_resource(kind: TemplateKind) -> ApiResource {
    let (group, version) = match kind.api_version().split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", kind.api_version()),
    };
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind.kind()))
}

/// Reads one namespace's subset workloads.
type ReadNamespace = dyn Fn(&str) -> Vec<Arc<DynamicObject>> + Send + Sync;

/// The subset workloads of one kind, read from the manager's one cache of that kind: the objects
/// labelled `apps.kruise.io/subset-name`, as dynamic objects (the reconcile handles the four kinds
/// alike).
pub(crate) struct Subsets {
    read: Box<ReadNamespace>,
    listed: Box<dyn Fn() -> bool + Send + Sync>,
}

impl Subsets {
    /// The labelled objects of `cache`, and the stream of the UnitedDeployments their changes
    /// concern (their owners).
    fn of<K>(
        cache: &Shared<K>,
    ) -> (
        Self,
        futures::stream::BoxStream<'static, ObjectRef<UnitedDeployment>>,
    )
    where
        K: crate::driver::registry::Cacheable + serde::Serialize,
    {
        let store = cache.store().clone();
        let listed = store.clone();
        let subsets = Self {
            read: Box::new(move |namespace| {
                store
                    .state()
                    .iter()
                    // Only what a reconcile reads is converted: one namespace's subsets.
                    .filter(|o| o.meta().namespace.as_deref() == Some(namespace))
                    .filter(|o| is_subset(o.meta()))
                    .filter_map(|o| match to_dynamic(o.as_ref()) {
                        Ok(object) => Some(Arc::new(object)),
                        Err(error) => {
                            tracing::warn!(%error, name = ?o.meta().name, "reading a subset workload");
                            None
                        }
                    })
                    .collect()
            }),
            listed: Box::new(move || crate::cache::listed(&listed)),
        };
        let triggers = crate::cache::receiver_stream(cache.subscribe())
            .flat_map(|o| futures::stream::iter(owners_of(o.meta())))
            .boxed();
        (subsets, triggers)
    }

    /// The labelled objects of `namespace`, as the cache holds them now.
    pub(crate) fn in_namespace(&self, namespace: &str) -> Vec<Arc<DynamicObject>> {
        (self.read)(namespace)
    }

    /// Whether the cache has been filled by its first list.
    pub(crate) fn listed(&self) -> bool {
        (self.listed)()
    }
}

/// Whether an object is a UnitedDeployment's subset workload (it carries the subset label).
fn is_subset(meta: &kube::api::ObjectMeta) -> bool {
    meta.labels
        .as_ref()
        .is_some_and(|l| l.contains_key(keys::LABEL_SUBSET_NAME))
}

fn to_dynamic(object: &impl serde::Serialize) -> Result<DynamicObject, serde_json::Error> {
    serde_json::from_value(serde_json::to_value(object)?)
}

/// The UnitedDeployments that control a workload (by owner reference, any served version).
fn owners_of(metadata: &kube::api::ObjectMeta) -> Vec<ObjectRef<UnitedDeployment>> {
    let namespace = metadata.namespace.clone().unwrap_or_default();
    metadata
        .owner_references
        .iter()
        .flatten()
        .filter(|o| {
            o.controller == Some(true)
                && o.kind == "UnitedDeployment"
                && o.api_version.starts_with("apps.kruise.io/")
        })
        .map(|o| ObjectRef::new(&o.name).within(&namespace))
        .collect()
}

/// Runs the UnitedDeployment controller on the shared `caches` until the future is dropped.
pub async fn run(client: Client, caches: Caches, metrics: Arc<Metrics>, config: Config) {
    let pods = caches.pods.clone();
    pods.wait_synced().await;
    let revisions = caches.revisions.store().clone();

    let mut workloads = Vec::new();
    let mut streams = Vec::new();
    for kind in TemplateKind::ALL {
        let (subsets, triggers) = match kind {
            TemplateKind::CloneSet => Subsets::of(&caches.clonesets),
            TemplateKind::AdvancedStatefulSet => Subsets::of(&caches.advanced_statefulsets),
            TemplateKind::StatefulSet => Subsets::of(&caches.statefulsets),
            TemplateKind::Deployment => Subsets::of(&caches.shared::<Deployment>()),
        };
        streams.push(triggers);
        workloads.push((kind, api_resource(kind), subsets));
    }
    let triggers = futures::stream::select_all(streams);

    let ctx = Arc::new(Context {
        writes: crate::driver::writes::ApiWrites::new(client.clone()),
        live: crate::driver::writes::ApiWrites::new(client.clone()),
        pods,
        revisions,
        workloads,
        expectations: Mutex::new(Expectations::new(config.expectation_timeout)),
        recorder: crate::driver::recorder(client.clone(), CONTROLLER),
        metrics,
    });
    let controller = caches
        .shared::<UnitedDeployment>()
        .controller()
        .reconcile_on(triggers);
    // Boxed so that the manager's join of every controller stays small on the stack.
    Box::pin(crate::driver::run(
        controller,
        config.workers,
        reconcile::reconcile,
        ctx,
    ))
    .await;
}

impl crate::driver::Driven for Context {
    fn controller(&self) -> &'static str {
        CONTROLLER
    }

    fn metrics(&self) -> &Metrics {
        &self.metrics
    }
}
