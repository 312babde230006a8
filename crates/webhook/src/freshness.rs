//! Read-your-writes admission: a Pod (or an eviction) admitted after the create of a SidecarSet,
//! WorkloadSpread, PodUnavailableBudget, PersistentPodState or PodProbeMarker returned is decided
//! with it, however far behind the process's watch caches are.
//!
//! The webhooks decide from the process's watch caches (`ProcessCaches`), which may not have seen
//! a policy whose write already returned to its client (`kubectl apply` of a SidecarSet and a Pod,
//! back to back). Before deciding, an admission learns the apiserver's state of each policy kind
//! it reads — a consistent (resourceVersion unset) metadata-only list — and compares it with the
//! cache ([`compare`]): every listed object must be cached at the same or a newer resourceVersion,
//! or at least at the same generation (a status update, which policy controllers write
//! continually, holds no admission), and no cached object the list lacks may be older than the
//! list (it was deleted). Caught up, it decides at once; behind, it waits for the cache (woken by
//! its changes), at most until its deadline ([`Freshness::wait`] after the request arrived); past
//! it, it decides on what is cached, as before, and the kind is reported late ([`Late`]): counted,
//! logged, and, for a Pod created without a SidecarSet's sidecars, reported by the SidecarSet
//! controller's missed-injection report. The failure policy is untouched: the wait never turns an
//! answer into an error.
//!
//! Probes are coalesced and pipelined ([`Rounds`]): a request relies only on a list that started
//! after it arrived (an earlier one may predate the write it must see); requests arriving within
//! 25 ms of a list's start share the next one, which starts then even while earlier ones are in
//! flight (at most 4 of a kind at once). The apiserver sees at most 40 small lists per kind a
//! second, whatever the admission rate. A consistent list is served from the apiserver's watch
//! cache once that cache has caught up with etcd's current revision; for a kind that rarely
//! changes that takes an etcd progress notification, which the apiserver asks for every 100 ms:
//! a list takes tens of milliseconds (more on a busy apiserver), and that, not CPU, is what the
//! check costs an admission (docs/sizing.md). Lists started close together are answered by the
//! same notification, so a request waits for about one, not for the one in flight and then its own.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kruise_controllers::driver::caches::{ProcessCaches, Shared};
use kube::api::ListParams;
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::metrics::FreshnessMetrics;

/// The default of `--webhook-read-your-writes-timeout`: how long after its arrival an admission
/// may wait for the caches.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(2);
/// How often a waiting admission looks at the cache again when no change wakes it (a backstop:
/// changes wake it at once).
const POLL: Duration = Duration::from_millis(100);

/// The policy kinds whose caches the Pod webhooks read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PolicyKind {
    SidecarSet,
    WorkloadSpread,
    PodUnavailableBudget,
    PersistentPodState,
    PodProbeMarker,
}

impl PolicyKind {
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::SidecarSet => "SidecarSet",
            PolicyKind::WorkloadSpread => "WorkloadSpread",
            PolicyKind::PodUnavailableBudget => "PodUnavailableBudget",
            PolicyKind::PersistentPodState => "PersistentPodState",
            PolicyKind::PodProbeMarker => "PodProbeMarker",
        }
    }
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An object of a kind: its namespace (`None` when cluster-scoped) and name.
pub type Key = (Option<String>, String);

/// Which version of an object: its resourceVersion, and, where known, its generation (moved by
/// changes of its spec, not of its status) and uid (another object of the same name has another).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Version {
    pub resource_version: String,
    pub generation: Option<i64>,
    pub uid: Option<String>,
}

impl Version {
    /// The object's key and version.
    pub fn of(meta: &ObjectMeta) -> (Key, Self) {
        let key = (
            meta.namespace.clone(),
            meta.name.clone().unwrap_or_default(),
        );
        let version = Self {
            resource_version: meta.resource_version.clone().unwrap_or_default(),
            generation: meta.generation.filter(|g| *g > 0),
            uid: meta.uid.clone(),
        };
        (key, version)
    }

    /// Whether this (cached) version shows everything of `listed` an admission reads: the same
    /// or a newer resourceVersion, or the same object at the same or a newer generation (what
    /// changed since is its status, labels or annotations, which its controller writes
    /// continually and which no admission decision reads).
    pub fn covers(&self, listed: &Version) -> bool {
        if at_least(&self.resource_version, &listed.resource_version) {
            return true;
        }
        let same_object = matches!((&self.uid, &listed.uid), (Some(a), Some(b)) if a == b);
        same_object
            && matches!((self.generation, listed.generation), (Some(have), Some(want)) if have >= want)
    }
}

/// What a consistent list of a kind says: the list's resourceVersion and each object's version.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listing {
    pub resource_version: String,
    pub items: Vec<(Key, Version)>,
}

/// How a cache stands against a [`Listing`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The cache shows everything the list shows.
    CaughtUp,
    /// A listed object is missing from the cache, or cached at an older version of its spec.
    Behind(Key),
    /// The cache holds an object the list lacks, older than the list: it was deleted and the cache
    /// has not seen the deletion yet.
    DeletedPending(Key),
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = |(namespace, name): &Key| match namespace {
            Some(namespace) => format!("{namespace}/{name}"),
            None => name.clone(),
        };
        match self {
            Verdict::CaughtUp => f.write_str("caught up"),
            Verdict::Behind(key) => write!(f, "{} not cached yet at its listed version", name(key)),
            Verdict::DeletedPending(key) => {
                write!(f, "{} deleted but still cached", name(key))
            }
        }
    }
}

/// Whether a cached resourceVersion is at least a listed one: compared as numbers where both are
/// (etcd's are), else they must be equal.
pub fn at_least(cached: &str, listed: &str) -> bool {
    match (cached.parse::<u64>(), listed.parse::<u64>()) {
        (Ok(cached), Ok(listed)) => cached >= listed,
        _ => cached == listed,
    }
}

/// Whether a cached resourceVersion is provably older than a list's (both numbers).
fn older(cached: &str, list: &str) -> bool {
    matches!(
        (cached.parse::<u64>(), list.parse::<u64>()),
        (Ok(cached), Ok(list)) if cached < list
    )
}

/// How `cached` (each object's version) stands against `listing`, counting only the objects of
/// `namespace` when one is given (a namespaced admission reads no other). A cached object is
/// caught up with its listed version when it [`Version::covers`] it.
///
/// `progress` is the newest resourceVersion the cache's watch is known to have delivered (its
/// objects' and its deletions'): a listed object the cache lacks is not waited for when the watch
/// has passed its version — it was deleted since the list. A cached object the list lacks is
/// pending deletion only when it is provably older than the list; one newer was created after it.
pub fn compare(
    cached: &HashMap<Key, Version>,
    progress: Option<u64>,
    listing: &Listing,
    namespace: Option<&str>,
) -> Verdict {
    let in_scope = |key: &Key| namespace.is_none_or(|ns| key.0.as_deref() == Some(ns));
    let passed =
        |version: &str| matches!((progress, version.parse::<u64>()), (Some(p), Ok(v)) if p >= v);
    let mut listed: HashSet<&Key> = HashSet::new();
    for (key, version) in listing.items.iter().filter(|(key, _)| in_scope(key)) {
        listed.insert(key);
        let caught_up = match cached.get(key) {
            Some(have) => have.covers(version),
            None => passed(&version.resource_version),
        };
        if !caught_up {
            return Verdict::Behind(key.clone());
        }
    }
    let mut gone: Vec<&Key> = cached
        .iter()
        .filter(|(key, version)| {
            in_scope(key)
                && !listed.contains(key)
                && older(&version.resource_version, &listing.resource_version)
        })
        .map(|(key, _)| key)
        .collect();
    gone.sort();
    match gone.first() {
        Some(key) => Verdict::DeletedPending((*key).clone()),
        None => Verdict::CaughtUp,
    }
}

/// The cache side of a kind: what it holds, how far its watch is known to have come, and a
/// wake-up on each change (once the cache shows it).
pub trait CacheView: Send + Sync {
    /// The version of each cached object (of `namespace` only, when given).
    fn versions(&self, namespace: Option<&str>) -> HashMap<Key, Version>;
    /// A lower bound of the newest resourceVersion the watch delivered (`None`: none known).
    fn progress(&self) -> Option<u64>;
    fn changes(&self) -> BoxStream<'static, ()>;
}

/// A [`Shared`] watch cache seen by the freshness check: besides its store, the newest
/// resourceVersion of every change it fanned out since (deletions carry the version of the
/// deletion, which the store cannot show), followed by a task of its own.
pub struct WatchedCache<K: Resource<DynamicType = ()> + Clone + 'static> {
    shared: Shared<K>,
    seen: Arc<AtomicU64>,
    changed: watch::Sender<u64>,
}

impl<K> WatchedCache<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static,
{
    /// Follows `shared`'s changes from now on (on a task that ends with the watch's fan-out).
    pub fn start(shared: Shared<K>) -> Arc<Self> {
        let this = Arc::new(Self {
            seen: Arc::default(),
            changed: watch::Sender::new(0),
            shared,
        });
        let mut changes = this.shared.subscribe();
        let (seen, changed) = (this.seen.clone(), this.changed.clone());
        tokio::spawn(async move {
            while let Some(object) = changes.recv().await {
                if let Some(version) = version_of(object.meta()) {
                    seen.fetch_max(version, Ordering::SeqCst);
                }
                changed.send_modify(|n| *n = n.wrapping_add(1));
            }
        });
        this
    }
}

fn version_of(meta: &ObjectMeta) -> Option<u64> {
    meta.resource_version.as_deref()?.parse().ok()
}

impl<K> CacheView for WatchedCache<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static,
{
    fn versions(&self, namespace: Option<&str>) -> HashMap<Key, Version> {
        self.shared
            .store()
            .state()
            .iter()
            .map(|object| object.meta())
            .filter(|meta| namespace.is_none_or(|ns| meta.namespace.as_deref() == Some(ns)))
            .map(Version::of)
            .collect()
    }

    fn progress(&self) -> Option<u64> {
        let stored = self
            .shared
            .store()
            .state()
            .iter()
            .filter_map(|object| version_of(object.meta()))
            .max();
        let seen = Some(self.seen.load(Ordering::SeqCst)).filter(|v| *v > 0);
        stored.max(seen)
    }

    fn changes(&self) -> BoxStream<'static, ()> {
        futures::stream::unfold(self.changed.subscribe(), |mut rx| async move {
            rx.changed().await.ok().map(|()| ((), rx))
        })
        .boxed()
    }
}

/// Lists a kind (one probe).
pub type Lister = Arc<dyn Fn() -> BoxFuture<'static, Result<Listing, String>> + Send + Sync>;

/// A consistent metadata-only list of every `K` (resourceVersion unset: the apiserver answers with
/// its current state, served from its watch cache once that has caught up with etcd).
pub fn metadata_lister<K>(client: Client) -> Lister
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + fmt::Debug + Send + Sync + 'static,
{
    Arc::new(move || {
        let api: Api<K> = Api::all(client.clone());
        async move {
            let list = api
                .list_metadata(&ListParams::default())
                .await
                .map_err(|e| format!("listing {}: {e}", K::kind(&())))?;
            Ok(Listing {
                resource_version: list.metadata.resource_version.unwrap_or_default(),
                items: list
                    .items
                    .into_iter()
                    .map(|item| Version::of(&item.metadata))
                    .collect(),
            })
        }
        .boxed()
    })
}

/// One probe's result, numbered in the order the probes started.
#[derive(Debug)]
struct Round {
    number: u64,
    listing: Result<Listing, String>,
}

/// How soon after a round started the next may start: requests arriving meanwhile share the next.
const ROUND_SPACING: Duration = Duration::from_millis(25);
/// Rounds of one kind in flight at most: past it, the next starts when one ends.
const ROUNDS_IN_FLIGHT: usize = 4;

#[derive(Debug, Default)]
struct RoundState {
    /// The number of the last round started.
    started: u64,
    /// The first round number every waiting request is served by: rounds start until `started`
    /// reaches it.
    wanted: u64,
    /// Rounds in flight.
    running: usize,
    /// When the last round started.
    last_start: Option<Instant>,
    /// A task waits to start the next round once [`ROUND_SPACING`] has passed.
    timer: bool,
}

/// The coalesced probes of one kind. A request is served by the first round that starts after it
/// arrives; rounds are pipelined: one starts at most every [`ROUND_SPACING`] while requests want
/// one, up to [`ROUNDS_IN_FLIGHT`] at once, so that a request waits about one list, not the rest
/// of the list in flight and then its own (a consistent list waits for the apiserver's watch cache
/// to catch up with etcd, the largest part of its time, and lists started close together are
/// answered by the same catch-up).
struct Rounds {
    kind: PolicyKind,
    list: Lister,
    /// How long one list may take (past it the round fails and the next may start).
    list_timeout: Duration,
    state: Mutex<RoundState>,
    /// The newest round that ended (by number: a round ending after a later one is not kept).
    done: watch::Sender<Option<Arc<Round>>>,
    metrics: FreshnessMetrics,
}

impl Rounds {
    fn new(
        kind: PolicyKind,
        list: Lister,
        list_timeout: Duration,
        metrics: FreshnessMetrics,
    ) -> Arc<Self> {
        Arc::new(Self {
            kind,
            list,
            list_timeout,
            state: Mutex::default(),
            done: watch::Sender::new(None),
            metrics,
        })
    }

    /// The number of the first round that starts at or after `arrived` (one is started, or wanted,
    /// if none has yet).
    fn want(self: &Arc<Self>, arrived: Instant) -> u64 {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        // The last round started after the request arrived serves it; one started before may
        // predate the write it must see: the next one.
        if state.last_start.is_some_and(|last| last >= arrived) {
            return state.started;
        }
        let needed = state.started + 1;
        state.wanted = state.wanted.max(needed);
        self.pump(&mut state);
        needed
    }

    /// The first round that started at or after `arrived` (or any later one), or `None` when none
    /// has ended by `deadline`.
    async fn after(self: &Arc<Self>, arrived: Instant, deadline: Instant) -> Option<Arc<Round>> {
        let mut done = self.done.subscribe();
        let needed = self.want(arrived);
        let ended = done.wait_for(|round| round.as_ref().is_some_and(|r| r.number >= needed));
        match tokio::time::timeout_at(deadline, ended).await {
            Ok(Ok(round)) => round.clone(),
            _ => None,
        }
    }

    /// Starts the next round if a request wants one and the spacing and the rounds in flight
    /// allow it; else leaves it to the timer (spacing) or to a round's end (in flight).
    fn pump(self: &Arc<Self>, state: &mut RoundState) {
        if state.started >= state.wanted || state.timer || state.running >= ROUNDS_IN_FLIGHT {
            return;
        }
        let now = Instant::now();
        let at = state.last_start.map_or(now, |last| last + ROUND_SPACING);
        if at > now {
            state.timer = true;
            let this = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep_until(at).await;
                let mut state = this.state.lock().unwrap_or_else(PoisonError::into_inner);
                state.timer = false;
                this.pump(&mut state);
            });
            return;
        }
        state.started += 1;
        state.running += 1;
        state.last_start = Some(now);
        // Its own task: a request that gives up must not cancel the others' round.
        tokio::spawn(self.clone().run(state.started));
    }

    /// Runs round `number`, publishes it, and starts the next one wanted.
    async fn run(self: Arc<Self>, number: u64) {
        self.metrics.probe(self.kind);
        let listing = match tokio::time::timeout(self.list_timeout, (self.list)()).await {
            Ok(listing) => listing,
            Err(_) => Err(format!(
                "listing {} took more than {:?}",
                self.kind, self.list_timeout
            )),
        };
        let round = Arc::new(Round { number, listing });
        self.done.send_if_modified(|newest| {
            if newest.as_ref().is_some_and(|n| n.number > number) {
                return false;
            }
            *newest = Some(round);
            true
        });
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.running -= 1;
        self.pump(&mut state);
    }
}

/// Waits until `check` gives a value, trying it now, on every item of `changes` and at least every
/// [`POLL`], until `deadline`; `Err` with the last value of `pending` when the deadline passes.
pub async fn until<T, P>(
    mut changes: BoxStream<'static, ()>,
    deadline: Instant,
    mut check: impl FnMut() -> Result<T, P>,
) -> Result<T, P> {
    let mut open = true;
    loop {
        let pending = match check() {
            Ok(value) => return Ok(value),
            Err(pending) => pending,
        };
        if Instant::now() >= deadline {
            return Err(pending);
        }
        tokio::select! {
            change = changes.next(), if open => open = change.is_some(),
            () = tokio::time::sleep(POLL) => {}
            () = tokio::time::sleep_until(deadline) => {}
        }
    }
}

/// Why a kind was not confirmed caught up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lag {
    /// The cache did not catch up by the deadline (`None`: no list answered by then).
    Timeout(Option<Verdict>),
    /// The apiserver could not be listed.
    Error(String),
}

/// The kinds an admission decided on without knowing their caches caught up.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Late {
    pub kinds: Vec<(PolicyKind, Lag)>,
}

impl Late {
    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }

    pub fn includes(&self, kind: PolicyKind) -> bool {
        self.kinds.iter().any(|(k, _)| *k == kind)
    }
}

impl fmt::Display for Late {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (kind, lag)) in self.kinds.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            match lag {
                Lag::Timeout(None) => write!(f, "{kind}: the apiserver did not answer in time")?,
                Lag::Timeout(Some(verdict)) => write!(f, "{kind}: {verdict}")?,
                Lag::Error(error) => write!(f, "{kind}: {error}")?,
            }
        }
        Ok(())
    }
}

struct Tracker {
    cache: Arc<dyn CacheView>,
    rounds: Arc<Rounds>,
}

/// The freshness check of the webhooks (see the module docs); cheap to clone.
#[derive(Clone)]
pub struct Freshness {
    inner: Arc<Inner>,
}

struct Inner {
    wait: Duration,
    trackers: HashMap<PolicyKind, Tracker>,
    metrics: FreshnessMetrics,
}

impl Freshness {
    /// A check that waits at most `wait` after a request arrived, of no kind yet ([`Freshness::track`]).
    pub fn new(wait: Duration, metrics: FreshnessMetrics) -> Self {
        Self {
            inner: Arc::new(Inner {
                wait,
                trackers: HashMap::new(),
                metrics,
            }),
        }
    }

    /// The check of the process's policy caches, each probed by a consistent metadata list
    /// through `client`.
    pub fn for_process(
        client: &Client,
        caches: &ProcessCaches,
        wait: Duration,
        metrics: FreshnessMetrics,
    ) -> Self {
        use kruise_api::persistentpodstate::PersistentPodState;
        use kruise_api::podprobemarker::PodProbeMarker;
        use kruise_api::policy::v1alpha1::PodUnavailableBudget;
        use kruise_api::sidecarset::v1beta1::SidecarSet;
        use kruise_api::workloadspread::WorkloadSpread;
        Self::new(wait, metrics)
            .track(
                PolicyKind::SidecarSet,
                WatchedCache::start(caches.sidecarsets.clone()),
                metadata_lister::<SidecarSet>(client.clone()),
            )
            .track(
                PolicyKind::WorkloadSpread,
                WatchedCache::start(caches.workloadspreads.clone()),
                metadata_lister::<WorkloadSpread>(client.clone()),
            )
            .track(
                PolicyKind::PodUnavailableBudget,
                WatchedCache::start(caches.budgets.clone()),
                metadata_lister::<PodUnavailableBudget>(client.clone()),
            )
            .track(
                PolicyKind::PersistentPodState,
                WatchedCache::start(caches.persistentpodstates.clone()),
                metadata_lister::<PersistentPodState>(client.clone()),
            )
            .track(
                PolicyKind::PodProbeMarker,
                WatchedCache::start(caches.podprobemarkers.clone()),
                metadata_lister::<PodProbeMarker>(client.clone()),
            )
    }

    /// This check, also of `kind`: its cache, and how to list it. Call before cloning.
    pub fn track(mut self, kind: PolicyKind, cache: Arc<dyn CacheView>, list: Lister) -> Self {
        let inner = Arc::get_mut(&mut self.inner);
        if let Some(inner) = inner {
            let rounds = Rounds::new(kind, list, inner.wait, inner.metrics.clone());
            inner.trackers.insert(kind, Tracker { cache, rounds });
        }
        self
    }

    /// A wake-up on every change of the cache of `kind`, when it is tracked (for waits of other
    /// things in that cache, with [`until`]).
    pub fn changes(&self, kind: PolicyKind) -> Option<BoxStream<'static, ()>> {
        Some(self.inner.trackers.get(&kind)?.cache.changes())
    }

    /// Waits until `ready` holds of the cache of `kind` (tried now and on each of its changes), at
    /// most until the deadline of a request that arrived at `arrived`; whether it held. Counted
    /// in the metrics under `what`. For what follows a write rather than the write itself (a
    /// PodUnavailableBudget's first status).
    pub async fn wait_for(
        &self,
        kind: PolicyKind,
        what: &str,
        arrived: Instant,
        mut ready: impl FnMut() -> bool,
    ) -> bool {
        let Some(changes) = self.changes(kind) else {
            return ready();
        };
        let mut waited = false;
        let outcome = until(changes, self.deadline(arrived), || {
            if ready() {
                Ok(())
            } else {
                waited = true;
                Err(())
            }
        })
        .await;
        let result = match (outcome.is_ok(), waited) {
            (true, false) => "fresh",
            (true, true) => "waited",
            (false, _) => "timeout",
        };
        self.inner
            .metrics
            .checked(what, result, arrived.elapsed().as_secs_f64());
        outcome.is_ok()
    }

    /// How long after its arrival an admission may wait.
    pub fn wait(&self) -> Duration {
        self.inner.wait
    }

    /// The deadline of a request that arrived at `arrived`.
    pub fn deadline(&self, arrived: Instant) -> Instant {
        arrived + self.inner.wait
    }

    /// Waits until the caches of `kinds` (each of the given namespace only, or all) show every
    /// write that returned before `arrived`, at most until `arrived` + [`Freshness::wait`]. The
    /// kinds checked in parallel; those not confirmed are returned (decide on what is cached).
    pub async fn catch_up(&self, kinds: &[(PolicyKind, Option<&str>)], arrived: Instant) -> Late {
        let deadline = self.deadline(arrived);
        let checks = kinds.iter().filter_map(|&(kind, namespace)| {
            let tracker = self.inner.trackers.get(&kind)?;
            Some(async move {
                let lag = self.check(tracker, namespace, arrived, deadline).await;
                let result = match &lag {
                    Ok(false) => "fresh",
                    Ok(true) => "waited",
                    Err(Lag::Timeout(_)) => "timeout",
                    Err(Lag::Error(_)) => "error",
                };
                self.inner
                    .metrics
                    .checked(kind, result, arrived.elapsed().as_secs_f64());
                lag.err().map(|lag| (kind, lag))
            })
        });
        let kinds = futures::future::join_all(checks)
            .await
            .into_iter()
            .flatten()
            .collect();
        Late { kinds }
    }

    /// Starts (or wants) the list of each of `kinds` that a request arriving at `arrived` will
    /// rely on, without waiting: for a request that reads something else first (an eviction reads
    /// its Pod), so that the list runs meanwhile.
    pub fn prefetch(&self, kinds: &[PolicyKind], arrived: Instant) {
        for kind in kinds {
            if let Some(tracker) = self.inner.trackers.get(kind) {
                tracker.rounds.want(arrived);
            }
        }
    }

    /// Whether the cache was behind the first list that started after the request arrived and
    /// had to be waited for.
    async fn check(
        &self,
        tracker: &Tracker,
        namespace: Option<&str>,
        arrived: Instant,
        deadline: Instant,
    ) -> Result<bool, Lag> {
        let Some(round) = tracker.rounds.after(arrived, deadline).await else {
            return Err(Lag::Timeout(None));
        };
        let listing = round.listing.as_ref().map_err(|e| Lag::Error(e.clone()))?;
        let mut waited = false;
        let cache = &tracker.cache;
        until(cache.changes(), deadline, || {
            match compare(
                &cache.versions(namespace),
                cache.progress(),
                listing,
                namespace,
            ) {
                Verdict::CaughtUp => Ok(waited),
                behind => {
                    waited = true;
                    Err(behind)
                }
            }
        })
        .await
        .map_err(|verdict| Lag::Timeout(Some(verdict)))
    }
}

#[cfg(test)]
mod tests;
