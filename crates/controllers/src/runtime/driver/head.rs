//! What every Pod-owning kind's context holds ([`PodOwnerBase`]), and the start its reconcile
//! shares (Advanced StatefulSet, Advanced DaemonSet):
//! wait for our own writes to show in the caches, then claim the Pods and the ControllerRevisions
//! (Kubernetes' `ClaimPods` and `ClaimControllerRevisions`), and register the update revision of
//! the Pod template ([`template_revision`]). What follows — the plan, the act, the status — is
//! the kind's.

use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kruise_api::keys;
use kruise_core::expectations::Expectations;
use kruise_core::ownership::Claimant;
use kruise_core::revision::{
    LABEL_REVISION_HASH, Parent, build_revision, next_revision_number, revision_data,
    revisions_to_delete,
};
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use super::caches::Caches;
use super::writes::{ApiWrites, LiveReads, Writes};
use super::{Driven, Owner, begin};
use crate::cache::{NOT_LISTED_RETRY, PodCache, listed};
use crate::claim::{Recheck, claim_pods, claim_revisions, selector_match};
use crate::disruptions::Disruptions;
use crate::error::Error;
use crate::events::EventRecorder;
use crate::metrics::Metrics;
use crate::podcontrol::{PodControl, Wording, expectations_met};

/// How soon a reconcile that adopted Pods looks again (on the adopted Pods as the cache shows them).
pub const ADOPTED_RETRY: std::time::Duration = std::time::Duration::from_millis(500);

/// What every Pod-owning kind's context holds (CloneSet, Advanced StatefulSet, Advanced DaemonSet,
/// BroadcastJob), besides the caches and settings of its own: declared once, so that a fix to how a
/// Pod-owning kind writes, reads or waits lives in one place.
pub struct PodOwnerBase {
    /// The controller's name in metrics, logs and Events (upstream's, e.g. `cloneset-controller`).
    pub controller: &'static str,
    /// The act step's writes (the apiserver; a `FakeCluster` in unit tests).
    pub writes: Arc<dyn Writes>,
    /// The live reads of a reconcile: the owner re-read before an adoption, a taken revision name.
    pub live: Arc<dyn LiveReads>,
    /// The shared Pod cache.
    pub pods: Arc<PodCache>,
    /// The shared ControllerRevision cache (an empty one for a kind that keeps none).
    pub revisions: Store<ControllerRevision>,
    /// The writes of this controller not yet shown by the caches.
    pub expectations: Mutex<Expectations>,
    pub recorder: EventRecorder,
    pub metrics: Arc<Metrics>,
    /// The budget decisions in-place updates consult (`PodUnavailableBudgetUpdateGate`).
    pub budgets: Option<Disruptions>,
}

impl PodOwnerBase {
    /// Over the apiserver and the process's shared `caches`.
    pub fn new(
        client: &Client,
        controller: &'static str,
        caches: &Caches,
        metrics: Arc<Metrics>,
        expectation_timeout: Duration,
    ) -> Self {
        let api = ApiWrites::new(client.clone());
        Self {
            controller,
            writes: api.clone(),
            live: api,
            pods: caches.pods.clone(),
            revisions: caches.revisions.store().clone(),
            expectations: Mutex::new(Expectations::new(expectation_timeout)),
            recorder: super::recorder(client.clone(), controller),
            metrics,
            budgets: caches.update_budgets.clone(),
        }
    }

    /// For a kind that keeps no ControllerRevisions and updates no Pod in place (BroadcastJob): an
    /// empty revision cache for the shared expectation check, and no budget.
    pub fn without_revisions(mut self) -> Self {
        self.revisions = kube::runtime::reflector::store().0;
        self.budgets = None;
        self
    }

    /// Deletes the owner's revisions in `namespace` beyond its `history_limit`
    /// (`kruise_core::revision::revisions_to_delete`: never `current`, `update`, nor one a Pod of
    /// `pods` is labelled with), each guarded by its uid ([`super::write::prune_revisions`]). How
    /// CloneSet, Advanced StatefulSet and Advanced DaemonSet end a reconcile: the same rule over
    /// the same caches, so it is written once.
    pub async fn truncate_history(
        &self,
        namespace: &str,
        revisions: &[ControllerRevision],
        (current, update): (&str, &str),
        pods: &[Pod],
        history_limit: Option<i32>,
    ) -> Result<(), Error> {
        let labels = pods.iter().filter_map(kruise_core::pods::revision_of);
        let doomed = revisions_to_delete(revisions, current, update, labels, history_limit);
        let api =
            super::writes::Writer::<ControllerRevision>::namespaced(self.writes.clone(), namespace);
        super::write::prune_revisions(&api, doomed).await?;
        Ok(())
    }

    /// Over `writes` and `live` (a `FakeCluster`, or the apiserver of a scripted client), with
    /// empty caches, listed; Events go to `events`.
    #[cfg(test)]
    pub fn for_tests(
        controller: &'static str,
        writes: Arc<dyn Writes>,
        live: Arc<dyn LiveReads>,
        events: Client,
    ) -> Self {
        let mut registry = prometheus_client::registry::Registry::default();
        let pods = PodCache::new();
        pods.apply(kube::runtime::watcher::Event::Init);
        pods.apply(kube::runtime::watcher::Event::InitDone);
        Self {
            controller,
            writes,
            live,
            pods,
            revisions: kube::runtime::reflector::store().0,
            expectations: Mutex::new(Expectations::new(Duration::from_secs(300))),
            recorder: super::recorder(events, controller),
            metrics: Metrics::register(&mut registry),
            budgets: None,
        }
    }

    /// Over the in-memory `cluster` (its writes and its live reads), with empty caches, listed;
    /// Events go to a scripted client, whose log is returned: how a kind's reconcile tests start.
    #[cfg(test)]
    pub fn over_cluster(
        controller: &'static str,
        cluster: &Arc<super::writes::fake::FakeCluster>,
    ) -> (Self, super::scripted::Log) {
        let (client, log) = super::scripted::client(Vec::new());
        let base = Self::for_tests(controller, cluster.clone(), cluster.clone(), client);
        (base, log)
    }
}

/// A Pod-owning kind's context: its [`PodOwnerBase`], which the shared head reads.
pub trait OwnsPods: Send + Sync + 'static {
    fn base(&self) -> &PodOwnerBase;
}

impl<C: OwnsPods> Driven for C {
    fn controller(&self) -> &'static str {
        self.base().controller
    }

    fn metrics(&self) -> &Metrics {
        &self.base().metrics
    }
}

/// The first step: `Err(action)` when there is nothing to do yet ([`begin`], with the expectations
/// checked against the Pod and revision caches), or when the revision cache — or another the kind
/// reads, `also_listed` false — has not been listed yet.
pub fn begin_owner<K: Resource, C: OwnsPods>(
    object: &K,
    ctx: &C,
    also_listed: bool,
) -> Result<Owner, Action> {
    let base = ctx.base();
    let unmet = |key: &str, namespace: &str| {
        expectations_met(
            &base.expectations,
            key,
            namespace,
            &base.pods,
            &base.revisions,
            &base.metrics,
            base.controller,
        )
        .err()
    };
    let owner = begin(object, &base.expectations, unmet)?;
    if !(listed(&base.revisions) && also_listed) {
        return Err(Action::requeue(NOT_LISTED_RETRY));
    }
    Ok(owner)
}

/// The Pod writer of one reconcile of `object`.
pub fn pod_control<'a, K, C>(
    ctx: &'a C,
    object: &K,
    owner: &'a Owner,
    now: Timestamp,
    wording: Wording,
) -> PodControl<'a>
where
    K: Resource<DynamicType = ()>,
    C: OwnsPods,
{
    let base = ctx.base();
    PodControl {
        writes: &base.writes,
        live: &base.live,
        namespace: &owner.namespace,
        owner: object.object_ref(&()),
        key: owner.key.clone(),
        expectations: &base.expectations,
        recorder: &base.recorder,
        metrics: &base.metrics,
        controller: base.controller,
        now,
        wording,
        budgets: base.budgets.as_ref(),
    }
}

/// The Pods and revisions `object` owns after claiming: those it controls that `selector` still
/// selects, and orphans it selects (Pods only those `orphan` accepts) adopted; controlled ones it
/// no longer selects released. `Err(action)` when the owner went away or is being deleted
/// (nothing to do), or when Pods were adopted (the next reconcile works on them as the cache shows
/// them). `object` is read for its type: the claim rechecks the owner through its API before
/// adopting.
pub async fn claim<K, C>(
    ctx: &C,
    pc: &PodControl<'_>,
    _object: &K,
    owner: &Owner,
    reference: &OwnerReference,
    selector: Option<&LabelSelector>,
    orphan: impl Fn(&Pod) -> bool,
) -> Result<Result<(Vec<Pod>, Vec<ControllerRevision>), Action>, Error>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug,
    C: OwnsPods,
{
    let claimant = Claimant {
        uid: &owner.uid,
        deleting: false,
    };
    let mut recheck = Recheck::<K>::new(
        ctx.base().live.clone(),
        Some(&owner.namespace),
        owner.name.clone(),
        owner.uid.clone(),
    );
    let Some((pods, adopted)) = claim_pods(
        pc,
        &ctx.base().pods,
        claimant,
        reference,
        &mut recheck,
        selector,
        orphan,
    )
    .await?
    else {
        return Ok(Err(Action::await_change()));
    };
    if adopted {
        return Ok(Err(Action::requeue(ADOPTED_RETRY)));
    }
    let Some(revisions) = claim_revisions(
        pc,
        &ctx.base().revisions,
        claimant,
        reference,
        &mut recheck,
        selector_match(selector),
    )
    .await?
    else {
        return Ok(Err(Action::await_change()));
    };
    Ok(Ok((pods, revisions)))
}

/// The update revision of a kind whose revisions record its Pod template (Advanced StatefulSet and
/// DaemonSet): the newest if it records `template`, an older equal one renumbered, or a new one
/// ([`crate::history::update_revision`]), labelled with the template's labels — and, when
/// `native_hash_label`, with `controller-revision-hash` too, as upstream's Advanced DaemonSet's
/// are; the revision cache is expected to show it. `None` after recording a hash collision
/// (`collided(count)`: the merge patch of the owner's status with that collision count).
pub async fn template_revision<K>(
    pc: &PodControl<'_>,
    object: &K,
    template: &PodTemplateSpec,
    revisions: &[ControllerRevision],
    collision_count: Option<i32>,
    native_hash_label: bool,
    collided: impl FnOnce(i32) -> serde_json::Value,
) -> Result<Option<ControllerRevision>, Error>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Debug,
{
    let invalid = |e: &dyn std::fmt::Display| Error::Invalid(format!("building the revision: {e}"));
    let labels = template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let data = revision_data(template).map_err(|e| invalid(&e))?;
    let mut candidate = build_revision(
        Parent {
            kind: &K::kind(&()),
            meta: object.meta(),
        },
        object.meta().namespace.clone(),
        labels,
        data,
        next_revision_number(revisions),
        collision_count,
    )
    .map_err(|e| invalid(&e))?;
    if native_hash_label
        && let Some(labels) = candidate.metadata.labels.as_mut()
        && let Some(hash) = labels.get(LABEL_REVISION_HASH).cloned()
    {
        labels.insert(keys::LABEL_NATIVE_CONTROLLER_REVISION_HASH.to_owned(), hash);
    }
    let registered = crate::history::update_revision(
        pc.writes,
        pc.live.as_ref(),
        object,
        revisions,
        candidate,
        collision_count,
        collided,
    )
    .await?;
    Ok(registered.map(|(revision, expectation)| {
        if let Some(expectation) = expectation {
            pc.expect(expectation);
        }
        revision
    }))
}
