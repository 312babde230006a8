//! The workload driver: what every workload controller does the same way, written once.
//!
//! A kind supplies its reconcile (observe its caches → plan with a pure function of `kruise-core` →
//! act with patches → status) and a context implementing [`Driven`]; the driver supplies
//! - the wiring ([`run`]): one reconcile per object at a time on a task of its own, the reconcile
//!   metrics, and one error policy (log, count, requeue after [`ERROR_REQUEUE`]; a write that lost
//!   a race to a change of its object is decided again after [`RACE_REQUEUE`], quietly);
//! - the shared caches ([`caches::Caches`]): one watch per resource kind for the whole manager;
//! - the writer interface ([`writes`]): every write of an act step goes through
//!   [`writes::Writes`], the apiserver in the manager and the in-memory
//!   [`writes::fake::FakeCluster`] (409/404/422 as the apiserver answers them) in unit tests;
//! - the guarded writes ([`write`]): the status written only when it changed and only over the
//!   resourceVersion it was computed from, and old revisions pruned with uid preconditions;
//! - expectations (`kruise_core::expectations::Expectations`, every entry expiring) checked against
//!   the shared caches ([`crate::podcontrol::expectations_met`]), and claiming ([`crate::claim`]);
//! - for kinds that own Pods directly, the start of the reconcile ([`head`]: wait for our writes to
//!   show, claim Pods and revisions), their context implementing [`head::OwnsPods`].
//!
//! # The shape of a kind
//!
//! Every kind's reconcile runs the same four steps; only the middle two are the kind's own:
//!
//! | kind | observe (shared caches) | plan (pure, `kruise-core`) | act | status |
//! |---|---|---|---|---|
//! | CloneSet | Pods, revisions, PVCs, Nodes | `rollout::cloneset::decide::{scale_step, update_step}` | `cloneset::act::Actor` | `cloneset::status::compute` |
//! | Advanced StatefulSet | [`head`]; PVCs | `rollout::statefulset::plan` | [`crate::podcontrol::PodControl`] | `statefulset::status::compute` |
//! | Advanced DaemonSet | [`head`]; Nodes | `rollout::daemonset::plan` | [`crate::podcontrol::PodControl`] | `daemonset::status::compute` |
//! | BroadcastJob | Pods, Nodes | `rollout::broadcastjob::{place, plan}` | [`crate::podcontrol::PodControl`] | the plan's status |
//! | UnitedDeployment | revisions, subset workloads, Pods | `rollout::uniteddeployment::{allocate, next_partitions, plan_subsets}` | `uniteddeployment::reconcile::manage` | `uniteddeployment::status::compute` |
//! | SidecarSet | Pods, Namespaces, revisions, SidecarSets | `sidecarset::upgrade::plan_upgrade` | guarded Pod patches | `sidecarset::upgrade::counts` |
//!
//! Each status goes through [`write::write_status`] (no write when unchanged, a resourceVersion
//! precondition, [`write::StatusWrite::Stale`] when it lost) and each revision pruning through
//! [`write::prune_revisions`]. A new kind adds its row: a `run` wiring a `Controller` on the shared
//! caches to [`run`], a context implementing [`Driven`] (and [`head::OwnsPods`] when it owns Pods),
//! and a reconcile in these four steps.

pub mod caches;
pub mod head;
pub mod registry;
pub mod stop;
pub mod wake;
pub mod watchdog;
pub mod write;
pub mod writes;

#[cfg(test)]
mod layout_tests;
#[cfg(test)]
mod relist_tests;
#[cfg(test)]
pub(crate) mod scripted;
#[cfg(test)]
mod tests;

use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kruise_core::expectations::Expectations;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::Reporter;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::error::Error;
use crate::events::EventRecorder;
use crate::metrics::Metrics;

/// How soon a failed reconcile is tried again.
pub const ERROR_REQUEUE: Duration = Duration::from_secs(2);

/// How soon a reconcile whose write raced (the object moved since it was read) decides again: the
/// caches show the other write within about this long.
pub const RACE_RETRY: Duration = Duration::from_millis(500);

/// What the driver needs of a kind's context.
pub trait Driven: Send + Sync + 'static {
    /// The controller's name in metrics, logs and Events (upstream's, e.g. `cloneset-controller`).
    fn controller(&self) -> &'static str;
    fn metrics(&self) -> &Metrics;
    /// Whether the controller reconciles only spec changes of its objects (a generation predicate:
    /// its own status writes must not wake it). The stall watchdog then waits for a reconcile of each
    /// generation, not of each resourceVersion.
    fn spec_changes_only(&self) -> bool {
        false
    }
}

/// The whole configuration of a kind tuned by nothing but its number of concurrent reconciles
/// (PodUnavailableBudget, ResourceDistribution, PersistentPodState): one type, so that their
/// default, upstream's `--<kind>-workers` default of 3, is written once.
#[derive(Clone, Debug)]
pub struct WorkersOnly {
    /// Concurrent reconciles (`--<kind>-workers`).
    pub workers: u16,
}

impl Default for WorkersOnly {
    fn default() -> Self {
        Self { workers: 3 }
    }
}

/// Implements [`Driven`] for a kind's context `$context` that keeps its [`Metrics`] in a field
/// `metrics: Arc<Metrics>`, under the controller name `$controller`; `spec_changes_only = true`
/// after them for a kind whose watch trigger is filtered to spec changes. Every kind without Pods
/// of its own answers the driver this same way, so the answer is written once here.
macro_rules! driven {
    ($context:ty, $controller:expr $(, spec_changes_only = $spec_changes_only:expr)?) => {
        impl $crate::driver::Driven for $context {
            fn controller(&self) -> &'static str {
                $controller
            }

            fn metrics(&self) -> &$crate::metrics::Metrics {
                &self.metrics
            }

            $(
                fn spec_changes_only(&self) -> bool {
                    $spec_changes_only
                }
            )?
        }
    };
}
pub(crate) use driven;

/// The Event recorder of a controller named `controller`.
pub fn recorder(client: kube::Client, controller: &'static str) -> EventRecorder {
    EventRecorder::new(
        client,
        Reporter {
            controller: controller.into(),
            instance: None,
        },
    )
}

/// Runs `controller` with `workers` concurrent reconciles until the future is dropped, or until
/// its term's [`stop::Stop`] is requested: then it starts no new reconcile, lets those in flight
/// finish (a failure then is the stop's doing: logged at debug, not counted) and returns. Each call
/// of `reconcile` runs on a task of its own ([`crate::parallel::on_own_task`]) and is timed; a
/// failed one is logged, counted and retried after [`ERROR_REQUEUE`].
pub async fn run<K, C, Fut>(
    controller: Controller<K>,
    workers: u16,
    reconcile: fn(Arc<K>, Arc<C>) -> Fut,
    ctx: Arc<C>,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    C: Driven,
    Fut: Future<Output = Result<Action, Error>> + Send + 'static,
{
    let name = ctx.controller();
    tracing::info!(workers, controller = name, "controller started");
    let stop = stop::Stop::current();
    let _running = stop.as_ref().map(|stop| stop.enter(name));
    let store = controller.store();
    let dog = Arc::new(watchdog::Watchdog::default());
    let (stalled_tx, stalled_rx) = tokio::sync::mpsc::unbounded_channel();
    let controller = controller.reconcile_on(crate::cache::receiver_stream(stalled_rx));
    let controller = match &stop {
        Some(stop) => controller.graceful_shutdown_on(announce_stop(stop.clone(), name)),
        None => controller,
    };
    let mut reconcile = crate::parallel::on_own_task(reconcile);
    let seen = dog.clone();
    let by_generation = ctx.spec_changes_only();
    let counted = stop.clone();
    let timed = move |object: Arc<K>, ctx: Arc<C>| {
        let started = Instant::now();
        if let Some(waited) = seen.started(
            watch_key(object.as_ref()),
            version(object.as_ref(), by_generation),
            started,
        ) {
            ctx.metrics()
                .change_waited(ctx.controller(), waited.as_secs_f64());
        }
        // Counted in flight until the reconcile's own task ends, even if kube stops awaiting it:
        // the term's drain must not resolve while a reconcile still runs.
        let in_flight = counted.as_ref().map(|stop| stop.reconciling(name));
        let run = reconcile(object, ctx.clone(), in_flight);
        async move {
            let result = run.await;
            if result.is_ok() {
                ctx.metrics()
                    .reconciled(ctx.controller(), true, started.elapsed().as_secs_f64());
            }
            result
        }
    };
    let stopping = stop.clone();
    let errors = move |object: Arc<K>, error: &Error, ctx: Arc<C>| {
        if stopping.as_ref().is_some_and(stop::Stop::is_requested) {
            // The term is ending (its writes are fenced off): not a failure of the reconcile.
            tracing::debug!(
                controller = ctx.controller(),
                object = %object_key(object.as_ref()),
                %error,
                "reconcile cut short by the end of the leader's term"
            );
            return Action::await_change();
        }
        error_policy(object, error, ctx)
    };
    let watch = watch_for_stalls(store, dog, stalled_tx, ctx.clone(), by_generation);
    let run = controller
        .with_config(kube::runtime::controller::Config::default().concurrency(workers))
        .run(timed, errors, ctx)
        .for_each(|_| futures::future::ready(()));
    tokio::select! {
        () = run => {
            if stop.as_ref().is_some_and(stop::Stop::is_requested) {
                tracing::debug!(controller = name, "controller stopped with its term");
            }
        }
        () = watch => {}
    }
}

/// Resolves when `stop` is requested, saying what the controller still has in flight.
fn announce_stop(
    stop: stop::Stop,
    name: &'static str,
) -> impl Future<Output = ()> + Send + Sync + 'static {
    let requested = stop.requested();
    async move {
        requested.await;
        let in_flight = stop
            .in_flight()
            .into_iter()
            .find_map(|(controller, n)| (controller == name).then_some(n))
            .unwrap_or(0);
        tracing::debug!(
            controller = name,
            in_flight,
            "stopping: no new reconciles, finishing those in flight"
        );
    }
}

fn object_key<K: Resource>(object: &K) -> String {
    let meta = object.meta();
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
}

fn watch_key<K: Resource>(object: &K) -> watchdog::Key {
    let meta = object.meta();
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// What makes a change the watchdog waits for a reconcile of: a new resourceVersion, or with
/// `by_generation` a new generation.
fn version<K: Resource>(object: &K, by_generation: bool) -> watchdog::Version {
    let meta = object.meta();
    let version = match (by_generation, meta.generation) {
        (true, Some(generation)) => Some(format!("g{generation}")),
        _ => meta.resource_version.clone(),
    };
    (meta.uid.clone(), version)
}

/// Scans the controller's objects every [`watchdog::SCAN_EVERY`] ([`watchdog::Watchdog::scan`]):
/// publishes the oldest unreconciled change's age and queues again, with a warning, every object
/// whose change waited [`watchdog::STALL_AFTER`]. Never ends.
async fn watch_for_stalls<K, C>(
    store: kube::runtime::reflector::Store<K>,
    dog: Arc<watchdog::Watchdog>,
    stalled: tokio::sync::mpsc::UnboundedSender<kube::runtime::reflector::ObjectRef<K>>,
    ctx: Arc<C>,
    by_generation: bool,
) where
    K: Resource<DynamicType = ()> + Clone + 'static,
    C: Driven,
{
    let mut tick = tokio::time::interval(watchdog::SCAN_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let objects = store
            .state()
            .into_iter()
            .filter(|o| o.meta().deletion_timestamp.is_none())
            .map(|o| (watch_key(o.as_ref()), version(o.as_ref(), by_generation)))
            .collect::<Vec<_>>();
        let scan = dog.scan(objects, Instant::now());
        ctx.metrics().watchdog_scanned(
            ctx.controller(),
            scan.oldest.as_secs_f64(),
            scan.stalled.len(),
        );
        for ((namespace, name), waited) in scan.stalled {
            tracing::warn!(
                controller = ctx.controller(),
                object = %format!("{namespace}/{name}"),
                waited = ?waited,
                "a change waited unreconciled; queued again (a missed event or a stalled queue)"
            );
            let object = kube::runtime::reflector::ObjectRef::new(&name);
            let object = if namespace.is_empty() {
                object
            } else {
                object.within(&namespace)
            };
            if stalled.send(object).is_err() {
                return;
            }
        }
    }
}

/// How soon a reconcile that lost a race ([`Error::is_race`]) is tried again: time for the caches
/// to show what moved, no more (no backoff: the next decision is made on the newer view).
pub const RACE_REQUEUE: Duration = Duration::from_millis(500);

/// How soon a reconcile whose write the leader fence refused is tried again: about a lease
/// renewal's retry period.
pub const FENCED_REQUEUE: Duration = Duration::from_secs(2);

/// The one error policy. A reconcile that lost a race — a write whose precondition (a JSON patch
/// `test`, a resourceVersion) found the object changed, or an object gone — decided on a view the
/// cluster had left behind: it is decided again on a fresh one after [`RACE_REQUEUE`], logged at
/// debug and counted as `race`, not as a failure. Any other error is logged with the object,
/// counted as a failed reconcile and retried after [`ERROR_REQUEUE`].
pub fn error_policy<K: Resource, C: Driven>(object: Arc<K>, error: &Error, ctx: Arc<C>) -> Action {
    if error.is_race() {
        tracing::debug!(
            controller = ctx.controller(),
            object = %object_key(object.as_ref()),
            %error,
            "the object moved under the reconcile; deciding again on a fresh view"
        );
        ctx.metrics().raced(ctx.controller());
        return Action::requeue(RACE_REQUEUE);
    }
    if error.is_fenced() {
        // Not sure to lead right now (a resumed process, a late renewal): the elector renews or
        // ends the term; until then the reconcile waits, it did not fail.
        tracing::debug!(
            controller = ctx.controller(),
            object = %object_key(object.as_ref()),
            %error,
            "a write was refused by the leader fence; trying again once the lease is renewed"
        );
        return Action::requeue(FENCED_REQUEUE);
    }
    tracing::warn!(
        controller = ctx.controller(),
        object = %object_key(object.as_ref()),
        %error,
        "reconcile failed"
    );
    ctx.metrics().reconciled(ctx.controller(), false, 0.0);
    Action::requeue(ERROR_REQUEUE)
}

/// The owner one reconcile works for.
#[derive(Clone, Debug)]
pub struct Owner {
    pub namespace: String,
    pub name: String,
    /// `namespace/name`: the owner's key in the expectations.
    pub key: String,
    pub uid: String,
}

/// The start every namespaced kind's reconcile shares: `Err(action)` when there is nothing to do
/// yet — the object has no uid, or is being deleted (its expectations are forgotten: what it owns
/// goes with it), or a write of ours is not in the caches yet (`unmet(key, namespace)` says how
/// long to wait; expectations expire, so that wait ends).
pub fn begin<K: Resource>(
    object: &K,
    expectations: &Mutex<Expectations>,
    unmet: impl FnOnce(&str, &str) -> Option<Duration>,
) -> Result<Owner, Action> {
    let namespace = object.namespace().unwrap_or_default();
    let name = object.name_any();
    let key = format!("{namespace}/{name}");
    let Some(uid) = object.meta().uid.clone() else {
        return Err(Action::await_change());
    };
    if object.meta().deletion_timestamp.is_some() {
        if let Ok(mut ex) = expectations.lock() {
            ex.forget(&key);
        }
        return Err(Action::await_change());
    }
    if let Some(wait) = unmet(&key, &namespace) {
        return Err(Action::requeue(wait));
    }
    Ok(Owner {
        namespace,
        name,
        key,
        uid,
    })
}
