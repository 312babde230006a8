//! The caches every controller reads: one watch per resource kind for the whole manager.
//!
//! Before, each controller opened its own watches, so ControllerRevisions were watched by five
//! controllers, Nodes and PVCs by two, and Namespaces and SidecarSets by the SidecarSet controller
//! beside the Pod webhook's. Here each kind is watched once ([`Caches::start`], and
//! [`ProcessCaches::start`] for what the webhooks read too); a controller reads the store and, to be
//! woken by changes, subscribes ([`Shared::subscribe`]) to a fan-out of the watch's events.

use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolumeClaim};
use kruise_api::persistentpodstate::PersistentPodState;
use kruise_api::sidecarset::v1beta1::SidecarSet;
use kube::api::PartialObjectMeta;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, watch};

use kruise_api::broadcastjob::v1beta1::BroadcastJob;
use kruise_api::cloneset::v1beta1::CloneSet;
use kruise_api::policy::v1alpha1::PodUnavailableBudget;
use kruise_api::statefulset::v1beta1::StatefulSet as AdvancedStatefulSet;

use super::registry::{Cacheable, Registry};
use crate::cache::PodCache;
use crate::disruptions::Disruptions;

/// A store of every `K` of the cluster, filled by one watch, and the subscribers to its changes.
pub struct Shared<K: Resource<DynamicType = ()> + Clone + 'static> {
    store: Store<K>,
    subscribers: Arc<Mutex<Vec<mpsc::UnboundedSender<Arc<K>>>>>,
    /// Whether the watch's first list has filled the store.
    listed: watch::Receiver<bool>,
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Clone for Shared<K> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            subscribers: self.subscribers.clone(),
            listed: self.listed.clone(),
        }
    }
}

impl<K> Shared<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    /// The store and the future that fills it from a watch of `api` (poll it on a task of its own).
    /// Objects are stored without their managed fields.
    pub fn watch(api: Api<K>) -> (Self, impl Future<Output = ()> + Send + 'static) {
        Self::from_events(
            watcher(api, watcher::Config::default().any_semantic())
                .default_backoff()
                .modify(|object: &mut K| object.meta_mut().managed_fields = None),
        )
    }

    /// The store and the future that fills it from `events`, a watcher's stream (a real watch, or a
    /// scripted one in tests): each event is applied to the store, then handed to the subscribers
    /// ([`FanOut`]).
    pub fn from_events(
        events: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let (store, writer) = reflector::store();
        let subscribers: Arc<Mutex<Vec<mpsc::UnboundedSender<Arc<K>>>>> = Arc::default();
        let (listed_tx, listed) = watch::channel(false);
        let events = reflector::reflector(writer, events);
        let fan_out = subscribers.clone();
        let reader = store.clone();
        let driver = async move {
            let mut events = std::pin::pin!(events);
            let mut relist = FanOut::default();
            while let Some(event) = events.next().await {
                let event = match event {
                    Ok(event) => event,
                    Err(error) => {
                        tracing::warn!(%error, kind = %K::kind(&()), "shared watch");
                        continue;
                    }
                };
                let changed = relist.changed(&event, &reader);
                if matches!(event, watcher::Event::InitDone) {
                    listed_tx.send_replace(true);
                }
                if changed.is_empty() {
                    continue;
                }
                if let Ok(mut subscribers) = fan_out.lock() {
                    subscribers.retain(|tx| changed.iter().all(|o| tx.send(o.clone()).is_ok()));
                }
            }
        };
        (
            Self {
                store,
                subscribers,
                listed,
            },
            driver,
        )
    }

    /// A store that no watch fills, for tests: fill it through the writer returned beside it.
    pub fn from_store(store: Store<K>) -> Self {
        Self {
            store,
            subscribers: Arc::default(),
            listed: watch::channel(true).1,
        }
    }

    pub fn store(&self) -> &Store<K> {
        &self.store
    }

    /// Every object the watch adds, changes or deletes from now on (the store already shows the
    /// change when it arrives).
    pub fn subscribe(&self) -> mpsc::UnboundedReceiver<Arc<K>> {
        let (tx, rx) = mpsc::unbounded_channel();
        if let Ok(mut subscribers) = self.subscribers.lock() {
            subscribers.push(tx);
        }
        rx
    }

    /// Waits until the watch's first list has filled the store (at once for a store of
    /// [`Shared::from_store`]).
    pub async fn wait_listed(&self) {
        let mut listed = self.listed.clone();
        let _ = listed.wait_for(|listed| *listed).await;
    }

    /// The triggers of a controller of `K` on this cache: every object the store holds once it is
    /// listed — the watch may have run before the controller started (a later leadership term, a
    /// process-wide cache) — then every change ([`Shared::owned_stream`]; subscribed at once, so
    /// nothing between the two is missed; an object may come twice).
    pub fn replayed_stream(
        &self,
    ) -> impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static {
        let changes = self.owned_stream();
        let this = self.clone();
        let listed = async move {
            this.wait_listed().await;
            futures::stream::iter(
                this.store
                    .state()
                    .into_iter()
                    .map(|object| Ok(Arc::unwrap_or_clone(object))),
            )
        };
        futures::stream::once(listed).flatten().chain(changes)
    }

    /// A `Controller` of `K` reconciling the objects of this cache: every object once listed, then
    /// every change, each told only once the store shows it ([`FanOut`]). kube's `Controller::new`
    /// opens a watch of its own and hands the objects of a relist on before its store shows them (an
    /// object created while it relists is never reconciled); every controller is built here instead.
    pub fn controller(&self) -> kube::runtime::Controller<K> {
        kube::runtime::Controller::for_stream(self.replayed_stream(), self.store.clone())
    }

    /// [`Shared::subscribe`] as the stream of `Ok` items a `Controller`'s `owns_stream` takes.
    pub fn owned_stream(
        &self,
    ) -> impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static {
        crate::cache::receiver_stream(self.subscribe()).map(|k| Ok(Arc::unwrap_or_clone(k)))
    }
}

/// What a [`Shared`] tells its subscribers of each watch event, the store having applied it.
///
/// A relist (the first list, and every list after the watch lost its place: a 410 Gone, a failed
/// start) is not applied object by object: the reflector gathers the listed objects and swaps them
/// into the store at once, at `InitDone`. Handing each listed object on as it arrived told a
/// controller of an object its store did not show yet: kube's `Controller` looks the object up when
/// the reconcile is due, finds nothing (or the version before the gap) and drops the request, and
/// nothing told it again. A CloneSet created while its watch relisted was never reconciled (the
/// stall of issue 54). So listed objects are held back, and at `InitDone`, with the store swapped,
/// the subscribers are told of every object the gap changed: each one new or at another version, and
/// each one that vanished (its last copy; looked up, it is gone), and nothing else, so a relist after
/// a quiet gap wakes nobody.
pub struct FanOut<K> {
    /// The store as it was when the relist began (it does not change until `InitDone`).
    before: Option<Vec<Arc<K>>>,
}

impl<K> Default for FanOut<K> {
    fn default() -> Self {
        Self { before: None }
    }
}

impl<K> FanOut<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: std::hash::Hash + Eq + Clone,
{
    /// The objects to tell the subscribers of, for `event`, which `store` has applied.
    pub fn changed(&mut self, event: &watcher::Event<K>, store: &Store<K>) -> Vec<Arc<K>> {
        match event {
            watcher::Event::Apply(object) | watcher::Event::Delete(object) => {
                vec![Arc::new(object.clone())]
            }
            watcher::Event::Init => {
                // A relist that failed part way starts again from the same store.
                if self.before.is_none() {
                    self.before = Some(store.state());
                }
                Vec::new()
            }
            watcher::Event::InitApply(_) => Vec::new(),
            watcher::Event::InitDone => {
                let before = self.before.take().unwrap_or_default();
                relisted(&before, &store.state())
            }
        }
    }
}

/// What a relist changed, from the objects `before` it to those `after`: every object of `after`
/// that is new or at another resourceVersion, and the last copy of every object of `before` that
/// is gone or was replaced by another of the same name (another uid).
pub fn relisted<K: Resource>(before: &[Arc<K>], after: &[Arc<K>]) -> Vec<Arc<K>> {
    use std::collections::HashMap;
    type Key = (Option<String>, Option<String>);
    let key = |o: &K| (o.meta().namespace.clone(), o.meta().name.clone());
    let version = |o: &K| (o.meta().uid.clone(), o.meta().resource_version.clone());
    let old: HashMap<Key, &Arc<K>> = before.iter().map(|o| (key(o), o)).collect();
    let mut changed = Vec::new();
    let mut kept = std::collections::HashSet::new();
    for object in after {
        let k = key(object);
        match old.get(&k) {
            Some(previous) if version(previous) == version(object) => {}
            Some(previous) => {
                if previous.meta().uid != object.meta().uid {
                    changed.push(Arc::clone(previous));
                }
                changed.push(Arc::clone(object));
            }
            None => changed.push(Arc::clone(object)),
        }
        kept.insert(k);
    }
    changed.extend(
        before
            .iter()
            .filter(|o| !kept.contains(&key(o)))
            .map(Arc::clone),
    );
    changed
}

/// The caches of the whole manager, handed to every controller: the named ones every term opens,
/// and any other type through [`Caches::shared`].
#[derive(Clone)]
pub struct Caches {
    /// The leader's typed caches ([`Registry`]); the named fields below were taken from it.
    pub registry: Registry,
    /// Every Pod, projected and indexed by owner ([`PodCache`]).
    pub pods: Arc<PodCache>,
    pub revisions: Shared<ControllerRevision>,
    pub nodes: Shared<Node>,
    pub pvcs: Shared<PersistentVolumeClaim>,
    /// Namespaces' metadata (SidecarSets select Pods by their namespace's labels).
    pub namespaces: Shared<PartialObjectMeta<Namespace>>,
    /// Every SidecarSet: the Pod webhook injects from it, the SidecarSet controller reconciles it.
    pub sidecarsets: Shared<SidecarSet>,
    /// Every PodUnavailableBudget (the process's watch: the Pod webhook reads it too).
    pub budgets: Shared<PodUnavailableBudget>,
    /// `batch/v1` Jobs (AdvancedCronJobs create them).
    pub jobs: Shared<Job>,
    /// BroadcastJobs: the BroadcastJob controller reconciles them, AdvancedCronJobs own them.
    pub broadcastjobs: Shared<BroadcastJob>,
    /// CloneSets: their controller reconciles them, PodUnavailableBudgets read their scale.
    pub clonesets: Shared<CloneSet>,
    /// Advanced StatefulSets: their controller reconciles them, PodUnavailableBudgets read their
    /// scale.
    pub advanced_statefulsets: Shared<AdvancedStatefulSet>,
    /// Kubernetes' StatefulSets: PodUnavailableBudgets and PersistentPodStates are woken by their
    /// changes, PersistentPodStates generated from their annotations, UnitedDeployments read the
    /// subsets they own.
    pub statefulsets: Shared<StatefulSet>,
    /// PersistentPodStates (the process-wide watch, [`ProcessCaches`]).
    pub persistentpodstates: Shared<PersistentPodState>,
    /// WorkloadSpreads (the process-wide watch, [`ProcessCaches`]).
    pub workloadspreads: Shared<kruise_api::workloadspread::WorkloadSpread>,
    /// PodProbeMarkers (the process-wide watch, [`ProcessCaches`]).
    pub podprobemarkers: Shared<kruise_api::podprobemarker::PodProbeMarker>,
    /// With `PodUnavailableBudgetUpdateGate`, the process's budget decisions, which in-place updates
    /// consult ([`ProcessCaches::update_budgets`]).
    pub update_budgets: Option<Disruptions>,
    /// The process's WorkloadSpread slots ([`ProcessCaches::workloadspread_slots`]).
    pub workloadspread_slots: Option<Arc<crate::placements::Slots>>,
    /// The process's budget decisions ([`ProcessCaches::disruptions`]).
    pub disruptions: Option<Disruptions>,
}

/// The caches of the whole process, on every replica (the webhooks read them), started before
/// leadership; the leader's [`Caches`] include them.
#[derive(Clone)]
pub struct ProcessCaches {
    /// The process's typed caches ([`Registry`]); the leader's registry asks it first.
    pub registry: Registry,
    pub namespaces: Shared<PartialObjectMeta<Namespace>>,
    pub sidecarsets: Shared<SidecarSet>,
    /// PodUnavailableBudgets: the Pod webhook names a new Pod's, the controller reconciles them.
    pub budgets: Shared<PodUnavailableBudget>,
    /// Every PersistentPodState: the Pod webhook injects from their records, their controller
    /// reconciles them.
    pub persistentpodstates: Shared<PersistentPodState>,
    /// Every WorkloadSpread: the Pod webhook places Pods by them.
    pub workloadspreads: Shared<kruise_api::workloadspread::WorkloadSpread>,
    /// Every PodProbeMarker: their controller reconciles them; on serverless nodes
    /// (`EnablePodProbeMarkerOnServerless`) the Pod webhook writes their probes into new Pods.
    pub podprobemarkers: Shared<kruise_api::podprobemarker::PodProbeMarker>,
    /// With `PodUnavailableBudgetUpdateGate`, the process's budget decisions (over `budgets`, shared
    /// with the Pod webhook), which the workload controllers' in-place updates consult; `None`,
    /// they consult no budget. Set by the manager.
    pub update_budgets: Option<Disruptions>,
    /// The process's WorkloadSpread slots (over `workloadspreads`), shared by the Pod webhook's
    /// placements and the WorkloadSpread controller's, so that the two queue behind one write
    /// instead of conflicting; `None`: the controller makes its own. Set by the manager.
    pub workloadspread_slots: Option<Arc<crate::placements::Slots>>,
    /// The process's budget decisions (the Pod webhook's), whatever the update gate: the budget
    /// controller bases its status writes on the newest copy they know and tells them of its
    /// writes, so that the two do not conflict. Set by the manager.
    pub disruptions: Option<Disruptions>,
}

impl ProcessCaches {
    /// Opens, on the current runtime, the Namespace metadata watch and the SidecarSet,
    /// PodUnavailableBudget, PersistentPodState, WorkloadSpread and PodProbeMarker watches; they
    /// run until the last clone of the registry is dropped.
    pub fn start(client: Client) -> Self {
        let registry = Registry::new(client);
        Self {
            namespaces: registry.shared(),
            sidecarsets: registry.shared(),
            budgets: registry.shared(),
            persistentpodstates: registry.shared(),
            workloadspreads: registry.shared(),
            podprobemarkers: registry.shared(),
            update_budgets: None,
            workloadspread_slots: None,
            disruptions: None,
            registry,
        }
    }
}

impl Caches {
    /// The leader's caches for one term, from the term's `registry` (made over `process`'s with
    /// [`Registry::term`]): the Pod cache's watch and each named cache's. The returned future
    /// drives the Pod cache and never ends while it lasts; the other watches run until the registry
    /// is dropped.
    pub fn start(
        client: Client,
        registry: Registry,
        process: ProcessCaches,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let pods = PodCache::new();
        let pods_run = pods.clone().run(client);
        let caches = Self {
            pods,
            revisions: registry.shared(),
            nodes: registry.shared(),
            pvcs: registry.shared(),
            namespaces: process.namespaces,
            sidecarsets: process.sidecarsets,
            budgets: process.budgets,
            jobs: registry.shared(),
            broadcastjobs: registry.shared(),
            clonesets: registry.shared(),
            advanced_statefulsets: registry.shared(),
            statefulsets: registry.shared(),
            persistentpodstates: process.persistentpodstates,
            workloadspreads: process.workloadspreads,
            podprobemarkers: process.podprobemarkers,
            update_budgets: process.update_budgets,
            workloadspread_slots: process.workloadspread_slots,
            disruptions: process.disruptions,
            registry,
        };
        (caches, pods_run)
    }

    /// The cache of every `K` ([`Registry::shared`]): opened on first request, shared after.
    pub fn shared<K: Cacheable>(&self) -> Shared<K> {
        self.registry.shared()
    }
}
