//! The SidecarSet controller (upstream `pkg/controller/sidecarset`), on the shared driver: records
//! the SidecarSet's history as ControllerRevisions in the manager's namespace, upgrades injected
//! sidecars in place (cold: the image is replaced; hot: the new image starts in the idle twin,
//! which takes over, then the old twin is reset to the empty image), keeps each Pod's
//! `SidecarSetUpgradable` condition, and reports status. Decisions are
//! `kruise_core::sidecarset::{history, upgrade, upgradable}`.
//!
//! It also watches for Pods the selector matches that were created without the sidecars (the Pod
//! webhook was down and its failure policy lets Pods through): they are counted in
//! `status.missedInjectionPods`, reported with a `SidecarMissing` Warning Event on the Pod and the
//! SidecarSet, and exposed as the `kruise_sidecarset_missed_injection_pods` gauge. Sidecars cannot be
//! added to a running Pod, so the Pod is left as it is.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Namespace, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kruise_api::sidecarset::LABEL_SIDECARSET_NAME;
use kruise_api::sidecarset::v1beta1::{SidecarSet, SidecarSetStatus};
use kruise_core::expectations::{CachedState, Expectation, Expectations};
use kruise_core::ownership::Claimant;
use kruise_core::revision::next_revision_number;
use kruise_core::sidecarset::history;
use kruise_core::sidecarset::upgradable::{upgradable_condition_patch, wanted_entry};
use kruise_core::sidecarset::upgrade::{self, PodFacts};
use kruise_core::sidecarset::{missing_injections, pod_namespace};
use kube::api::{PartialObjectMeta, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{PredicateConfig, WatchStreamExt, predicates};
use kube::{Client, Resource, ResourceExt};
use tokio::sync::mpsc;

use crate::cache::{PodCache, Selected, WirePod};
use crate::claim::{Recheck, claim_each};
use crate::driver::caches::Caches;
use crate::driver::write::{StatusWrite, write_status};
use crate::driver::writes::{Part, Writer};
use crate::error::KubeContext;
use crate::events::EventRecorder;
use crate::history::{Registered, register};
use crate::metrics::{Metrics, SidecarSetLabels};
use verdicts::Verdict;

#[cfg(test)]
mod reconcile_tests;
mod triggers;
mod verdicts;

pub const CONTROLLER: &str = "sidecarset-controller";

/// How the controller runs.
#[derive(Clone, Debug)]
pub struct Config {
    pub workers: u16,
    pub expectation_timeout: Duration,
    /// Namespaces the Pod webhook never injects into (besides kube-system): the manager's own.
    pub excluded_namespaces: Vec<String>,
    /// The manager's namespace, where SidecarSet ControllerRevisions live (a SidecarSet is
    /// cluster-scoped, a ControllerRevision is not).
    pub namespace: String,
}

struct Context {
    /// The act step's writes (the apiserver; a `FakeCluster` in unit tests).
    writes: Arc<dyn crate::driver::writes::Writes>,
    /// The SidecarSet re-read before it adopts a revision; a revision whose name is taken.
    live: Arc<dyn crate::driver::writes::LiveReads>,
    pods: Arc<PodCache>,
    namespaces: Store<PartialObjectMeta<Namespace>>,
    /// Every ControllerRevision (the shared cache); a SidecarSet's are those labelled
    /// `kruise.io/sidecarset-name` in the manager's namespace.
    revisions: Store<ControllerRevision>,
    expectations: Mutex<Expectations>,
    recorder: EventRecorder,
    metrics: Arc<Metrics>,
    /// The SidecarSets the controller knows (its reflector's store).
    sidecarsets: Store<SidecarSet>,
    /// Each SidecarSet's verdicts on the Pods it selects, kept between reconciles.
    verdicts: Mutex<HashMap<String, verdicts::Memo>>,
    /// Pods already reported as missing a sidecar (uid, SidecarSet), so each gets one Event.
    reported: Mutex<BTreeSet<(String, String)>>,
    /// Since when each SidecarSet has had `SidecarSetUpgradable` entries waiting for a quiet round.
    marks_waiting: Mutex<HashMap<String, Instant>>,
    config: Config,
}

pub use crate::error::{Error, is_race};

/// Runs the SidecarSet controller until the future is dropped.
pub async fn run(client: Client, caches: Caches, metrics: Arc<Metrics>, config: Config) {
    let pods = caches.pods.clone();
    let events = pods.subscribe("sidecarset");
    pods.wait_synced().await;
    let namespaces = caches.namespaces.store().clone();
    let revisions = caches.revisions.store().clone();

    // The process's SidecarSet cache (the Pod webhook reads it too): every SidecarSet once it is
    // listed, then only spec changes — the status this controller writes on every reconcile must
    // not cause another one (Pod events and requeues cover everything else).
    let sidecarsets = caches.sidecarsets.store().clone();
    let changes = caches
        .sidecarsets
        .replayed_stream()
        .predicate_filter(predicates::generation, PredicateConfig::default());
    let controller = Controller::for_stream(changes, sidecarsets.clone());
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(triggers::run(
        events,
        pods.clone(),
        sidecarsets.clone(),
        namespaces.clone(),
        tx,
    ));

    let ctx = Arc::new(Context {
        writes: crate::driver::writes::ApiWrites::new(client.clone()),
        live: crate::driver::writes::ApiWrites::new(client.clone()),
        pods,
        namespaces,
        revisions,
        expectations: Mutex::new(Expectations::new(config.expectation_timeout)),
        recorder: crate::driver::recorder(client, CONTROLLER),
        metrics,
        sidecarsets,
        verdicts: Mutex::new(HashMap::new()),
        reported: Mutex::new(BTreeSet::new()),
        marks_waiting: Mutex::new(HashMap::new()),
        config: config.clone(),
    });
    let controller = controller.reconcile_on(crate::cache::receiver_stream(rx));
    crate::driver::run(controller, config.workers, reconcile, ctx).await;
}

// Its watch trigger is filtered to spec changes (its status writes must not wake it).
crate::driver::driven!(Context, CONTROLLER, spec_changes_only = true);

async fn reconcile(ss: Arc<SidecarSet>, ctx: Arc<Context>) -> Result<Action, Error> {
    reconcile_inner(&ss, &ctx).await
}

/// Drops what is kept per SidecarSet for those that no longer exist (the controller is not called
/// for a deleted object).
fn forget_deleted(ctx: &Context) {
    let alive = |name: &String| ctx.sidecarsets.get(&ObjectRef::new(name)).is_some();
    if let Ok(mut memos) = ctx.verdicts.lock() {
        memos.retain(|name, _| alive(name));
    }
    if let Ok(mut reported) = ctx.reported.lock() {
        reported.retain(|(_, name)| alive(name));
    }
    if let Ok(mut waiting) = ctx.marks_waiting.lock() {
        waiting.retain(|name, _| alive(name));
    }
}

/// Forgets what the controller holds of a SidecarSet being deleted.
fn forget(ctx: &Context, name: &str) {
    if let Ok(mut ex) = ctx.expectations.lock() {
        ex.forget(name);
    }
    ctx.metrics.missed_injections.remove(&SidecarSetLabels {
        sidecarset: name.to_owned(),
    });
    if let Ok(mut memos) = ctx.verdicts.lock() {
        memos.remove(name);
    }
}

/// Whether the caches show every write of the SidecarSet's last reconciles (its Pod patches, its
/// revisions, its status), or their expectations expired.
fn writes_shown(ctx: &Context, name: &str) -> bool {
    let check = match ctx.expectations.lock() {
        Ok(mut ex) => ex.check(name, Instant::now(), |e| match e.kind {
            "Pod" => {
                let (ns, pod) = e.name.split_once('/').unwrap_or(("", e.name.as_str()));
                e.satisfied_by(
                    ctx.pods
                        .get(ns, pod)
                        .as_deref()
                        .map(|p| CachedState::of(&p.metadata)),
                )
            }
            "ControllerRevision" => {
                let revision = ctx
                    .revisions
                    .get(&ObjectRef::new(&e.name).within(&ctx.config.namespace));
                e.satisfied_by(revision.as_deref().map(|r| CachedState::of(&r.metadata)))
            }
            // Our status write: the cache shows the SidecarSet at its resourceVersion or later.
            "SidecarSet" => {
                let cached = ctx.sidecarsets.get(&ObjectRef::new(&e.name));
                e.satisfied_by(cached.as_deref().map(|s| CachedState::of(&s.metadata)))
            }
            _ => true,
        }),
        Err(_) => Default::default(),
    };
    if !check.expired.is_empty() {
        ctx.metrics.expired(CONTROLLER, check.expired.len());
    }
    check.satisfied()
}

/// The candidates' verdicts (memoized per SidecarSet): the Pods the SidecarSet manages, sorted,
/// with their facts, and the Pods it should have been injected into and was not.
fn judge_candidates(
    ctx: &Context,
    ss: &SidecarSet,
    name: &str,
    candidates: &[Selected],
) -> (Vec<Selected>, Vec<PodFacts>, Vec<Arc<Pod>>) {
    let excluded = &ctx.config.excluded_namespaces;
    let judge = |pod: &Pod| {
        if upgrade::is_managed(ss, pod) {
            return Verdict::Managed(upgrade::pod_facts(ss, pod));
        }
        let ns_labels = ctx
            .namespaces
            .get(&ObjectRef::new(pod_namespace(pod)))
            .and_then(|n| n.metadata.labels.clone())
            .unwrap_or_default();
        if missing_injections(pod, &[ss], &ns_labels, excluded).is_empty() {
            Verdict::Neither
        } else {
            Verdict::Missed
        }
    };
    // The memo is taken out while in use: reconciles of other SidecarSets need not wait for it.
    let mut memo = ctx
        .verdicts
        .lock()
        .ok()
        .and_then(|mut m| m.remove(name))
        .unwrap_or_default();
    let verdicts = memo.verdicts(ss, candidates, judge);
    if let Ok(mut m) = ctx.verdicts.lock() {
        m.insert(name.to_owned(), memo);
    }
    // Pods are decoded only where read: those judged anew above, and those the plan orders or
    // writes to (none in a settled SidecarSet).
    let mut managed: Vec<(Selected, PodFacts)> = Vec::new();
    let mut missed: Vec<Arc<Pod>> = Vec::new();
    for (pod, verdict) in candidates.iter().zip(verdicts) {
        match verdict {
            Verdict::Managed(facts) => managed.push((pod.clone(), facts)),
            Verdict::Missed => missed.push(pod.pod().clone()),
            Verdict::Neither => {}
        }
    }
    managed.sort_by(|(a, _), (b, _)| a.key().cmp(b.key()));
    let (managed, facts): (Vec<Selected>, Vec<PodFacts>) = managed.into_iter().unzip();
    (managed, facts, missed)
}

async fn reconcile_inner(ss: &SidecarSet, ctx: &Context) -> Result<Action, Error> {
    let name = ss.name_any();
    forget_deleted(ctx);
    if ss.metadata.deletion_timestamp.is_some() {
        forget(ctx, &name);
        return Ok(Action::await_change());
    }
    // Wait until our own Pod patches show in the cache (bounded: expectations expire).
    if !writes_shown(ctx, &name) {
        return Ok(Action::requeue(Duration::from_secs(1)));
    }

    let now = Timestamp::now();
    let selector_set = ss
        .spec
        .selector
        .as_ref()
        .is_some_and(|s| !kruise_api::validation::selector_is_empty(s));
    let candidates = if selector_set {
        ctx.pods.select_lazily(None, |labels| {
            ss.spec.selector.as_ref().is_some_and(|s| labels.matches(s))
        })
    } else {
        Vec::new()
    };
    let (managed, facts, missed) = judge_candidates(ctx, ss, &name, &candidates);
    report_missed(ctx, ss, &missed).await;

    // History: the revision of the current sidecars, then the old ones nobody needs.
    let old = ss.status.clone().unwrap_or_default();
    let Some(mut revisions) = claim_revisions(ctx, ss).await? else {
        return Ok(Action::await_change());
    };
    let Some((latest, collision_count)) = register_latest_revision(ctx, ss, &revisions).await?
    else {
        // A hash collision was recorded; the next reconcile names the revision anew.
        return Ok(Action::requeue(Duration::from_millis(100)));
    };
    let latest_revision = latest.name_any();
    // The store may not show a revision created a moment ago; it is the newest all the same.
    if !revisions
        .iter()
        .any(|r| r.metadata.name == latest.metadata.name)
    {
        revisions.push(latest.clone());
    }
    truncate_history(ctx, ss, &candidates, &revisions, &latest).await?;

    // Upgrade.
    let Round {
        mut failure,
        more_to_upgrade,
        mut raced,
        marks,
        upgrading_now,
    } = upgrade_round(ctx, ss, &managed, &facts, &latest_revision, now).await;

    // Status.
    let (matched, updated, ready, updated_ready) = upgrade::counts(&facts);
    let status = SidecarSetStatus {
        observed_generation: ss.metadata.generation.unwrap_or(0),
        matched_pods: matched,
        updated_pods: updated,
        ready_pods: ready,
        updated_ready_pods: updated_ready,
        latest_revision,
        collision_count: Some(collision_count),
        missed_injection_pods: i32::try_from(missed.len()).unwrap_or(i32::MAX),
    };
    ctx.metrics
        .missed_injections
        .get_or_create(&SidecarSetLabels {
            sidecarset: name.clone(),
        })
        .set(missed.len() as i64);
    let status_changed = status != old;

    // The SidecarSetUpgradable entries go before the status: a status that says the rollout is
    // done (or stuck on Pods it cannot upgrade) is only written once the Pods' conditions say so.
    let now_instant = Instant::now();
    let waiting_since = ctx.marks_waiting.lock().ok().map(|mut waiting| {
        if marks.is_empty() {
            waiting.remove(&name);
            now_instant
        } else {
            *waiting.entry(name.clone()).or_insert(now_instant)
        }
    });
    let waited_long =
        waiting_since.is_none_or(|since| now_instant.duration_since(since) >= MARKS_MAX_WAIT);
    let timing = marks_timing(
        !marks.is_empty(),
        upgrading_now,
        more_to_upgrade,
        status_changed,
        waited_long,
    );
    let mut more_marks = false;
    let mut marks_lost = false;
    if timing == MarksTiming::Write {
        more_marks = marks.len() > MARKS_PER_ROUND;
        let writes = marks
            .iter()
            .take(MARKS_PER_ROUND)
            .map(|&(i, upgradable)| set_upgradable(ctx, ss, managed[i].pod(), upgradable, now))
            .collect::<Vec<_>>();
        let (error, lost) = concurrently(writes).await;
        keep_first(&mut failure, error);
        marks_lost = lost;
        raced |= lost;
    }
    // Entries still to write (beyond this round's share, or lost to a concurrent writer) hold the
    // status back until the next round, which follows at once.
    if !more_marks && !marks_lost {
        let api = crate::driver::writes::Writer::<SidecarSet>::all(ctx.writes.clone());
        match write_status(&api, ss, Some(&old), &status, status_changed).await? {
            StatusWrite::Unchanged => {}
            StatusWrite::Written { resource_version } => expect_written(ctx, ss, resource_version),
            // Computed from a copy older than the apiserver's: computed again on the newer one.
            StatusWrite::Stale => raced = true,
        }
    }
    let marks_deferred = timing == MarksTiming::Defer;
    if let Some(error) = failure {
        return Err(error);
    }
    if more_to_upgrade || more_marks {
        return Ok(Action::requeue(Duration::ZERO));
    }
    if raced {
        return Ok(Action::requeue(RACE_RETRY));
    }
    if marks_deferred {
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    Ok(Action::requeue(Duration::from_secs(60)))
}

/// What one round of upgrades did and left.
struct Round {
    /// The first error of the round (every planned Pod is tried all the same).
    failure: Option<Error>,
    /// The plan has more Pods than one round takes.
    more_to_upgrade: bool,
    /// A Pod write lost a race (the Pod changed since it was read): soon decide again.
    raced: bool,
    /// SidecarSetUpgradable entries to write: (Pod, upgradable).
    marks: Vec<(usize, bool)>,
    /// Whether this round upgrades any Pod.
    upgrading_now: bool,
}

/// Plans the upgrade of the SidecarSet's Pods (`managed`, with their `facts`) and carries out this
/// round of it: hot-upgrade twins reset, Pods upgraded to `latest_revision`, and the
/// SidecarSetUpgradable entries the Pods should carry.
async fn upgrade_round(
    ctx: &Context,
    ss: &SidecarSet,
    managed: &[Selected],
    facts: &[PodFacts],
    latest_revision: &str,
    now: Timestamp,
) -> Round {
    let mut failure = None;
    let mut more_to_upgrade = false;
    // A Pod write lost a race (the Pod changed since it was read): soon decide again.
    let mut raced = false;
    // SidecarSetUpgradable entries to write: (Pod, upgradable).
    let mut marks: Vec<(usize, bool)> = Vec::new();
    // Whether this round upgrades any Pod.
    let mut upgrading_now = false;
    match upgrade::plan_upgrade(ss, managed, facts) {
        Ok(plan) => {
            // Hot upgrade: reset the old twins to the empty image first; the round ends there.
            let flips = plan
                .flip
                .iter()
                .map(|&i| reset_idle_twin(ctx, ss, managed[i].pod(), now))
                .collect::<Vec<_>>();
            let (error, lost) = concurrently(flips).await;
            keep_first(&mut failure, error);
            raced |= lost;
            if !plan.not_upgradable.is_empty() {
                let names: Vec<String> = plan
                    .not_upgradable
                    .iter()
                    .map(|&i| managed[i].key().1.clone())
                    .collect();
                publish(
                    ctx,
                    ss,
                    EventType::Normal,
                    "NotUpgradablePods",
                    // Upstream's wording, then which Pods (it names none).
                    format!(
                        "SidecarSet in-place update detected {} not upgradable pod(s) in this round, will skip them: {}",
                        names.len(),
                        names.join(", ")
                    ),
                    None,
                )
                .await;
            }
            // One Pod the SidecarSet cannot patch (say, an annotation patchPodMetadata cannot
            // merge into) does not hold up the others: every planned Pod is tried. A large plan is
            // done in rounds, so that the status shows the rollout progressing.
            let mut this_round = plan.upgrade.clone();
            more_to_upgrade = crate::parallel::this_round(&mut this_round);
            upgrading_now = !this_round.is_empty();
            let upgrades = this_round
                .iter()
                .map(|&i| upgrade_pod(ctx, ss, managed[i].pod(), latest_revision, now))
                .collect::<Vec<_>>();
            let (error, lost) = concurrently(upgrades).await;
            keep_first(&mut failure, error);
            raced |= lost;
            // The SidecarSetUpgradable entries, level-triggered: whatever an entry should say now
            // and does not (a refusal, a SidecarSet upgradable again, `true` after an in-place
            // upgrade) is written, every reconcile, until it holds. Pods being upgraded this round
            // are left to the next.
            let upgrading: BTreeSet<usize> = plan.upgrade.iter().copied().collect();
            let refused: BTreeSet<usize> = plan.not_upgradable.iter().copied().collect();
            marks = facts
                .iter()
                .enumerate()
                .filter(|(i, _)| !upgrading.contains(i))
                .filter_map(|(i, f)| wanted_entry(f, refused.contains(&i)).map(|u| (i, u)))
                .collect();
        }
        Err(invalid) => failure = Some(Error::Invalid(invalid.to_string())),
    }

    Round {
        failure,
        more_to_upgrade,
        raced,
        marks,
        upgrading_now,
    }
}

/// When a reconcile writes the `SidecarSetUpgradable` entries it found wanting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MarksTiming {
    /// None is wanted.
    Nothing,
    /// Now, before the status.
    Write,
    /// In a later round: they share the client's rate limit with the upgrades, which go first.
    Defer,
}

/// The entries are written before the status in every round that upgrades no Pod (the rollout is
/// done, stuck on Pods it cannot upgrade, or waiting for upgraded Pods to become ready), so the
/// status never says a rollout settled before the Pods' conditions do — OpenKruise writes an entry
/// as it refuses or upgrades a Pod. While Pods are being upgraded they wait for a round whose status
/// does not change, or MARKS_MAX_WAIT; never while upgrades are left for the next round.
fn marks_timing(
    wanted: bool,
    upgrading_now: bool,
    more_to_upgrade: bool,
    status_changed: bool,
    waited_long: bool,
) -> MarksTiming {
    if !wanted {
        MarksTiming::Nothing
    } else if more_to_upgrade || (upgrading_now && status_changed && !waited_long) {
        MarksTiming::Defer
    } else {
        MarksTiming::Write
    }
}

/// `SidecarSetUpgradable` writes per reconcile; the rest follow at once in the next.
const MARKS_PER_ROUND: usize = 2 * crate::parallel::PARALLEL_WRITES;

/// How long `SidecarSetUpgradable` writes wait for a round in which the status does not change
/// (a rollout in progress) before they are written all the same.
const MARKS_MAX_WAIT: Duration = Duration::from_secs(30);

/// How soon a SidecarSet is reconciled again after one of its Pod writes lost a race.
const RACE_RETRY: Duration = Duration::from_millis(200);

/// Runs Pod writes in parallel ([`crate::parallel`]), each `Ok(true)` once done or `Ok(false)` when
/// it lost a race; the first error, if any (a client or server error is preferred over a Pod that
/// cannot be patched, which says more about the SidecarSet), and whether any write lost a race.
async fn concurrently(
    writes: Vec<impl Future<Output = Result<bool, Error>>>,
) -> (Option<Error>, bool) {
    let results = crate::parallel::in_parallel(writes).await;
    let mut first = None;
    let mut lost = false;
    for result in results {
        match result {
            Ok(done) => lost |= !done,
            Err(error) => match (&first, &error) {
                (None, _) | (Some(Error::Invalid(_)), Error::Kube { .. }) => first = Some(error),
                _ => {}
            },
        }
    }
    (first, lost)
}

fn keep_first(failure: &mut Option<Error>, error: Option<Error>) {
    if let Some(error) = error {
        failure.get_or_insert(error);
    }
}

/// The SidecarSet's revisions after claiming (Kubernetes' `ClaimControllerRevisions`), among the
/// revisions in the manager's namespace: those it controls whose `kruise.io/sidecarset-name` label
/// still names it, and orphans that name it — the history a SidecarSet deleted with
/// `--cascade=orphan` left behind — adopted; controlled ones whose label names another SidecarSet
/// are released. `None` when the SidecarSet is gone or being deleted.
async fn claim_revisions(
    ctx: &Context,
    ss: &SidecarSet,
) -> Result<Option<Vec<ControllerRevision>>, Error> {
    let name = ss.name_any();
    let Some(claimant) = Claimant::of(&ss.metadata) else {
        return Err(Error::Invalid(format!("SidecarSet {name} has no uid")));
    };
    let owner = OwnerReference {
        api_version: "apps.kruise.io/v1beta1".into(),
        kind: "SidecarSet".into(),
        name: name.clone(),
        uid: claimant.uid.to_owned(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    let mut recheck = Recheck::<SidecarSet>::new(
        ctx.live.clone(),
        None,
        name.clone(),
        claimant.uid.to_owned(),
    );
    let api = Writer::<ControllerRevision>::namespaced(ctx.writes.clone(), &ctx.config.namespace);
    let names_us = |meta: &ObjectMeta| {
        Some(
            meta.labels
                .as_ref()
                .and_then(|l| l.get(LABEL_SIDECARSET_NAME))
                == Some(&name),
        )
    };
    let revisions = ctx.revisions.state().into_iter().filter(|r| {
        r.metadata.namespace.as_deref() == Some(ctx.config.namespace.as_str())
            && r.labels().contains_key(LABEL_SIDECARSET_NAME)
    });
    let Some(claimed) =
        claim_each(&api, revisions, claimant, &owner, &mut recheck, names_us).await?
    else {
        return Ok(None);
    };
    if let Ok(mut ex) = ctx.expectations.lock() {
        for revision in claimed.written {
            if let (Some(revision_name), Some(rv)) =
                (revision.metadata.name, revision.metadata.resource_version)
            {
                ex.expect(
                    &name,
                    Expectation::observed("ControllerRevision", revision_name, rv),
                    Instant::now(),
                );
            }
        }
    }
    Ok(Some(claimed.owned))
}

/// The revision recording the SidecarSet's current sidecars, with the collision count it was named
/// with: the newest revision when it records them, an older equal one renumbered (the sidecars were
/// rolled back), or a new one. `None` when the name was taken by different data: the collision is
/// counted in the status and the next reconcile tries the next name.
async fn register_latest_revision(
    ctx: &Context,
    ss: &SidecarSet,
    revisions: &[ControllerRevision],
) -> Result<Option<(ControllerRevision, i32)>, Error> {
    let name = ss.name_any();
    let namespace = &ctx.config.namespace;
    let collision_count = ss
        .status
        .as_ref()
        .and_then(|s| s.collision_count)
        .unwrap_or(0);
    let candidate = history::new_revision(
        ss,
        namespace,
        next_revision_number(revisions),
        Some(collision_count),
    )
    .map_err(|e| Error::Invalid(format!("SidecarSet {name}: building its revision: {e}")))?;
    let api = Writer::<ControllerRevision>::namespaced(ctx.writes.clone(), namespace);
    let latest = match register(
        &api,
        ctx.live.as_ref(),
        revisions,
        candidate,
        ss.metadata.uid.as_deref(),
    )
    .await?
    {
        Registered::Revision(revision, expectation) => {
            if let (Some(expectation), Ok(mut ex)) = (expectation, ctx.expectations.lock()) {
                ex.expect(&name, expectation, Instant::now());
            }
            *revision
        }
        Registered::Collision => {
            // The whole status: a first status must carry its required counters. Over the
            // resourceVersion it was read at, so one collision is counted once.
            let old = ss.status.clone().unwrap_or_default();
            let status = SidecarSetStatus {
                collision_count: Some(collision_count + 1),
                ..old.clone()
            };
            let api = crate::driver::writes::Writer::<SidecarSet>::all(ctx.writes.clone());
            if let StatusWrite::Written { resource_version } =
                write_status(&api, ss, Some(&old), &status, true).await?
            {
                expect_written(ctx, ss, resource_version);
            }
            return Ok(None);
        }
    };
    if let Some(patch) = history::custom_version_patch(ss, &latest) {
        let revision_name = latest.name_any();
        api.patch(
            &revision_name,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .context(|| {
            format!(
                "labelling ControllerRevision {namespace}/{revision_name} with its custom version"
            )
        })?;
    }
    Ok(Some((latest, collision_count)))
}

/// Remembers that the cache should come to show the SidecarSet at `resource_version` (our status
/// write), so that no reconcile acts on the copy before it.
fn expect_written(ctx: &Context, ss: &SidecarSet, resource_version: Option<String>) {
    if let (Some(rv), Ok(mut ex)) = (resource_version, ctx.expectations.lock()) {
        let name = ss.name_any();
        ex.expect(
            &name,
            Expectation::observed("SidecarSet", name.clone(), rv),
            Instant::now(),
        );
    }
}

/// Deletes the oldest revisions beyond `revisionHistoryLimit` that no Pod records and no injection
/// strategy pins. Each delete is preconditioned on the uid it was decided on.
async fn truncate_history(
    ctx: &Context,
    ss: &SidecarSet,
    pods: &[Selected],
    revisions: &[ControllerRevision],
    latest: &ControllerRevision,
) -> Result<(), Error> {
    if revisions.len() <= history::history_limit(ss) {
        // Nothing to delete: spares parsing every Pod's hash annotation each reconcile.
        return Ok(());
    }
    let name = ss.name_any();
    let live = history::live_revisions(ss, pods.iter().map(|p| p.pod().as_ref()), revisions);
    let api = crate::driver::writes::Writer::<ControllerRevision>::namespaced(
        ctx.writes.clone(),
        &ctx.config.namespace,
    );
    let mut doomed = history::revisions_to_delete(ss, revisions, &live);
    doomed.retain(|doomed| doomed.metadata.name != latest.metadata.name);
    let gone = crate::driver::write::prune_revisions(&api, doomed).await?;
    if let Ok(mut ex) = ctx.expectations.lock() {
        for expectation in gone {
            ex.expect(&name, expectation, Instant::now());
        }
    }
    Ok(())
}

/// Sends a JSON patch guarded by the Pod's resourceVersion (to the status subresource when
/// `status`), recording the expectation that the cache catches up with the result. `Ok(None)` when
/// the Pod changed or went away meanwhile: the next reconcile decides again.
async fn patch_pod(
    ctx: &Context,
    ss: &SidecarSet,
    pod: &Pod,
    patch: json_patch::Patch,
    status: bool,
    operation: &str,
) -> Result<Option<Pod>, Error> {
    let ns = pod.namespace().unwrap_or_default();
    let pod_name = pod.name_any();
    // The answer is read without its managed fields (`WirePod`): only its resourceVersion is.
    let part = if status { Part::Status } else { Part::Object };
    let result = Writer::<Pod>::namespaced(ctx.writes.clone(), &ns)
        .patch_part_as::<WirePod, _>(&pod_name, part, &Patch::<()>::Json(patch))
        .await
        .map(WirePod::into_pod);
    match result {
        Ok(patched) => {
            ctx.metrics.pod_operation(CONTROLLER, operation, true);
            if let (Ok(mut ex), Some(rv)) = (
                ctx.expectations.lock(),
                patched.metadata.resource_version.clone(),
            ) {
                ex.expect(
                    &ss.name_any(),
                    Expectation::observed("Pod", format!("{ns}/{pod_name}"), rv),
                    Instant::now(),
                );
            }
            Ok(Some(patched))
        }
        Err(error) if is_race(&error) => Ok(None),
        Err(source) => {
            ctx.metrics.pod_operation(CONTROLLER, operation, false);
            Err(Error::Kube {
                context: format!("{operation}: Pod {ns}/{pod_name}"),
                source,
            })
        }
    }
}

/// Upgrades one Pod's sidecar images in place. `Ok(false)` when the patch lost a race. (The
/// `SidecarSetUpgradable` entry `true` OpenKruise writes after an upgrade follows from a later
/// reconcile's [`wanted_entry`], off the upgrade's path.)
async fn upgrade_pod(
    ctx: &Context,
    ss: &SidecarSet,
    pod: &Pod,
    latest_revision: &str,
    now: Timestamp,
) -> Result<bool, Error> {
    let patch = upgrade::upgrade_patch(ss, pod, latest_revision, now).map_err(|e| {
        Error::Invalid(format!(
            "Pod {}/{}: {e}",
            pod.namespace().unwrap_or_default(),
            pod.name_any()
        ))
    })?;
    Ok(patch_pod(ctx, ss, pod, patch, false, "update_in_place")
        .await?
        .is_some())
}

/// Records in the Pod's `SidecarSetUpgradable` condition whether this SidecarSet can upgrade it in
/// place (a no-op when the condition already says so). One status patch, guarded by tests on the
/// conditions rather than the resourceVersion ([`upgradable_condition_patch`]), so the kubelet's
/// status updates do not make it fail. `Ok(false)` when it lost a race (another SidecarSet wrote
/// the condition, or the Pod is gone): not retried here — the entry is level-triggered
/// ([`wanted_entry`]) and the SidecarSet is reconciled again soon.
async fn set_upgradable(
    ctx: &Context,
    ss: &SidecarSet,
    pod: &Pod,
    upgradable: bool,
    now: Timestamp,
) -> Result<bool, Error> {
    let patch = upgradable_condition_patch(pod, &ss.name_any(), upgradable, now).map_err(|e| {
        Error::Invalid(format!(
            "Pod {}/{}: {e}",
            pod.namespace().unwrap_or_default(),
            pod.name_any()
        ))
    })?;
    let Some(patch) = patch else {
        return Ok(true);
    };
    Ok(patch_pod(ctx, ss, pod, patch, true, "update_condition")
        .await?
        .is_some())
}

/// Hot upgrade's last step: the twin that no longer works goes back to the empty image, with an
/// Event on the Pod either way (upstream's reasons).
async fn reset_idle_twin(
    ctx: &Context,
    ss: &SidecarSet,
    pod: &Pod,
    now: Timestamp,
) -> Result<bool, Error> {
    let patch = upgrade::flip_patch(ss, pod, now).map_err(|e| {
        Error::Invalid(format!(
            "Pod {}/{}: {e}",
            pod.namespace().unwrap_or_default(),
            pod.name_any()
        ))
    })?;
    let result = patch_pod(ctx, ss, pod, patch, false, "reset_hot_upgrade_container").await;
    let (type_, reason, note) = match &result {
        Ok(Some(_)) => (
            EventType::Normal,
            "ResetContainerSucceed",
            "reset sidecar container image empty successfully".to_owned(),
        ),
        Ok(None) => return Ok(false),
        Err(error) => (
            EventType::Warning,
            "ResetContainerFailed",
            format!("reset sidecar container image empty failed: {error}"),
        ),
    };
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: "HotUpgrade".into(),
        secondary: Some(ss.object_ref(&())),
    };
    if let Err(error) = ctx.recorder.publish(&event, &pod_reference(pod)).await {
        tracing::warn!(%error, "publishing an event");
    }
    result.map(|patched| patched.is_some())
}

fn pod_reference(pod: &Pod) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: pod.metadata.name.clone(),
        namespace: pod.metadata.namespace.clone(),
        uid: pod.metadata.uid.clone(),
        ..ObjectReference::default()
    }
}

/// One Warning Event per Pod (on the Pod and on the SidecarSet) for each missed injection.
async fn report_missed(ctx: &Context, ss: &SidecarSet, missed: &[Arc<Pod>]) {
    let ss_name = ss.name_any();
    for pod in missed {
        let Some(uid) = pod.metadata.uid.clone() else {
            continue;
        };
        let first = ctx
            .reported
            .lock()
            .map(|mut r| r.insert((uid, ss_name.clone())))
            .unwrap_or(false);
        if !first {
            continue;
        }
        let pod_ref = pod_reference(pod);
        let note = format!(
            "Pod {}/{} matches SidecarSet {ss_name} but was created without its sidecars (the Pod webhook was unavailable); recreate the Pod to inject them",
            pod.namespace().unwrap_or_default(),
            pod.name_any()
        );
        publish(
            ctx,
            ss,
            EventType::Warning,
            "SidecarMissing",
            note.clone(),
            Some(pod_ref.clone()),
        )
        .await;
        let event = Event {
            type_: EventType::Warning,
            reason: "SidecarMissing".into(),
            note: Some(note),
            action: "Inject".into(),
            secondary: Some(ss.object_ref(&())),
        };
        if let Err(error) = ctx.recorder.publish(&event, &pod_ref).await {
            tracing::warn!(%error, "publishing an event");
        }
    }
}

async fn publish(
    ctx: &Context,
    ss: &SidecarSet,
    type_: EventType,
    reason: &str,
    note: String,
    related: Option<ObjectReference>,
) {
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: reason.into(),
        secondary: related,
    };
    if let Err(error) = ctx.recorder.publish(&event, &ss.object_ref(&())).await {
        tracing::warn!(%error, reason, "publishing an event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upgradable_entries_are_written_before_a_settled_status() {
        use MarksTiming::{Defer, Nothing, Write};
        // (case, wanted, upgrading now, more to upgrade, status changed, waited long) → timing
        let cases = [
            ("nothing wanted", false, false, false, true, false, Nothing),
            (
                "refused Pods, nothing to upgrade, status changes: before the status",
                true,
                false,
                false,
                true,
                false,
                Write,
            ),
            (
                "upgraded Pods becoming ready, status changes: before the status",
                true,
                false,
                false,
                true,
                false,
                Write,
            ),
            (
                "settled, status unchanged",
                true,
                false,
                false,
                false,
                false,
                Write,
            ),
            (
                "upgrading, status changes: the upgrades go first",
                true,
                true,
                false,
                true,
                false,
                Defer,
            ),
            (
                "upgrading, status unchanged",
                true,
                true,
                false,
                false,
                false,
                Write,
            ),
            (
                "upgrading, status changes, waited long enough",
                true,
                true,
                false,
                true,
                true,
                Write,
            ),
            (
                "more upgrades left for the next round",
                true,
                true,
                true,
                false,
                true,
                Defer,
            ),
        ];
        for (case, wanted, upgrading, more, changed, waited, expected) in cases {
            assert_eq!(
                marks_timing(wanted, upgrading, more, changed, waited),
                expected,
                "{case}"
            );
        }
    }
}
