//! Advanced StatefulSet planning (upstream `pkg/controller/statefulset/stateful_set_control.go`): one
//! sync of an ASTS decided from a snapshot.
//!
//! [`plan`] partitions the Pods into ordinal slots and condemned Pods ([`Slots`]), walks the slots in
//! ordinal order (create, replace failed Pods, wait in OrderedReady), deletes condemned Pods (highest
//! ordinal first), then rolls the update (specified-delete first, then ordered high → partition or
//! unordered by priority, within maxUnavailable). The controller carries out [`Plan::actions`] in
//! order — Parallel deletions of condemned Pods in [`slow_start_batches`] — and writes the status of
//! [`replica_status`]. When OrderedReady waits on a Pod, [`Plan::blocked`] names it and says why.
//!
//! Ordinals follow Kubernetes: a Pod `<set>-<n>` has ordinal n; `ordinals.start` is the first; reserved
//! ordinals are skipped, so `replicas` Pods run on the first `replicas` unreserved ordinals from
//! `start`. In ordered mode the partition counts those slots: the first `partition` slots keep the
//! current revision (without reserved ordinals, exactly the Pods with ordinal < start + partition).

use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kruise_api::intstr::{IntOrPercent, Round};
use kruise_api::statefulset::v1beta1::{
    POD_MANAGEMENT_PARALLEL, POD_UPDATE_IN_PLACE_IF_POSSIBLE, POD_UPDATE_IN_PLACE_ONLY,
    StatefulSetSpec, UPDATE_ON_DELETE,
};

// The shared types, also reachable here for the callers that import them with the planner.
use super::ordering;
use super::{InvalidSetting, Revision};
use crate::inplace::{self, Completion, InPlacePlan, PlanOptions};
use crate::lifecycle::{self, InPlaceGate, RefreshRules};
use crate::pods::{self, LifecycleState};
use crate::revision::pod_label_matches_revision;

const FIELD_MAX_UNAVAILABLE: &str = "spec.updateStrategy.rollingUpdate.maxUnavailable";
const FIELD_SCALE_MAX_UNAVAILABLE: &str = "spec.scaleStrategy.maxUnavailable";

/// The ordinal of a Pod of set `set`: the decimal suffix of `<set>-<n>`; `None` for any other name.
pub fn ordinal_of(set: &str, pod_name: &str) -> Option<i32> {
    let digits = pod_name.strip_prefix(set)?.strip_prefix('-')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The name of the Pod at `ordinal`.
pub fn pod_name(set: &str, ordinal: i32) -> String {
    format!("{set}-{ordinal}")
}

/// `spec.reserveOrdinals` as inclusive ranges. Entries validation rejects (negative, malformed,
/// reversed) are ignored; ranges are kept as ranges, so `"0-2000000000"` costs nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reserved(Vec<(i64, i64)>);

impl Reserved {
    pub fn parse(values: &[IntOrString]) -> Self {
        let mut ranges: Vec<(i64, i64)> = values
            .iter()
            .filter_map(|v| match v {
                IntOrString::Int(n) if *n >= 0 => Some((i64::from(*n), i64::from(*n))),
                IntOrString::Int(_) => None,
                IntOrString::String(s) => {
                    let (a, b) = s.split_once('-')?;
                    let (a, b) = (a.parse::<i64>().ok()?, b.parse::<i64>().ok()?);
                    (0 <= a && a <= b).then_some((a, b))
                }
            })
            .collect();
        ranges.sort_unstable();
        Self(ranges)
    }

    pub fn contains(&self, ordinal: i64) -> bool {
        self.0.iter().any(|&(a, b)| a <= ordinal && ordinal <= b)
    }

    /// The first ordinal ≥ `ordinal` that is not reserved.
    fn next_free(&self, mut ordinal: i64) -> i64 {
        // Ranges are sorted by start, so one pass skips chained and overlapping ranges.
        for &(a, b) in &self.0 {
            if a <= ordinal && ordinal <= b {
                ordinal = b + 1;
            }
        }
        ordinal
    }
}

/// The slot ordinals of a set: the first `replicas` unreserved ordinals from `start`, ascending.
pub fn slot_ordinals(start: i32, replicas: i32, reserved: &Reserved) -> Vec<i32> {
    let mut out = Vec::with_capacity(usize::try_from(replicas.max(0)).unwrap_or(0));
    let mut ordinal = i64::from(start.max(0));
    while out.len() < usize::try_from(replicas.max(0)).unwrap_or(0) {
        ordinal = reserved.next_free(ordinal);
        let Ok(o) = i32::try_from(ordinal) else {
            break;
        };
        out.push(o);
        ordinal += 1;
    }
    out
}

/// One ordinal the set should run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slot {
    pub ordinal: i32,
    /// Index of the Pod at this ordinal, if there is one.
    pub pod: Option<usize>,
}

/// The Pods partitioned (upstream's replicas and condemned).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Slots {
    /// In ascending ordinal order.
    pub slots: Vec<Slot>,
    /// Pods at an ordinal outside the slots (beyond the range, below `start`, or reserved), highest
    /// ordinal first.
    pub condemned: Vec<usize>,
}

/// Partitions the set's Pods. Pods whose name carries no ordinal of this set are ignored.
pub fn partition_pods(
    set: &str,
    pods: &[Pod],
    start: i32,
    replicas: i32,
    reserved: &Reserved,
) -> Slots {
    let ordinals = slot_ordinals(start, replicas, reserved);
    let mut slots: Vec<Slot> = ordinals
        .iter()
        .map(|&ordinal| Slot { ordinal, pod: None })
        .collect();
    let mut condemned: Vec<(i32, usize)> = Vec::new();
    for (i, pod) in pods.iter().enumerate() {
        let Some(ord) = pod
            .metadata
            .name
            .as_deref()
            .and_then(|n| ordinal_of(set, n))
        else {
            continue;
        };
        match ordinals.binary_search(&ord) {
            Ok(k) => slots[k].pod = Some(i),
            Err(_) => condemned.push((ord, i)),
        }
    }
    condemned.sort_by_key(|&(ord, _)| std::cmp::Reverse(ord));
    Slots {
        slots,
        condemned: condemned.into_iter().map(|(_, i)| i).collect(),
    }
}

/// Everything one sync decides on.
#[derive(Clone, Copy)]
pub struct Snapshot<'a> {
    /// The set's name (Pods are `<name>-<ordinal>`).
    pub name: &'a str,
    pub spec: &'a StatefulSetSpec,
    /// `status.currentReplicas`, which places new Pods when `rollingUpdate` is unset.
    pub status_current_replicas: i32,
    /// Every Pod the set owns, terminating and finished ones included.
    pub pods: &'a [Pod],
    pub current: Revision<'a>,
    pub update: Revision<'a>,
    /// Every revision of the set, for the template an old Pod was created from.
    pub revisions: &'a [Revision<'a>],
    pub now: Timestamp,
    /// Resize cpu/memory in place through `pods/resize`.
    pub resize: bool,
    /// Restart the containers whose env reads a changed label/annotation, in place through
    /// kruise-daemon (gate `InPlaceUpdateEnvFromMetadata`).
    pub env_from_metadata: bool,
}

impl Snapshot<'_> {
    fn rolling(
        &self,
    ) -> Option<&kruise_api::statefulset::v1beta1::RollingUpdateStatefulSetStrategy> {
        self.spec.update_strategy.rolling_update.as_ref()
    }

    fn replicas(&self) -> i32 {
        self.spec.replicas.unwrap_or(1).max(0)
    }

    fn start(&self) -> i32 {
        self.spec.ordinals.as_ref().map_or(0, |o| o.start.max(0))
    }

    fn partition(&self) -> i32 {
        self.rolling().and_then(|r| r.partition).unwrap_or(0).max(0)
    }

    fn monotonic(&self) -> bool {
        self.spec.pod_management_policy != POD_MANAGEMENT_PARALLEL
    }

    fn policy(&self) -> &str {
        self.rolling().map_or("", |r| r.pod_update_policy.as_str())
    }

    fn revision_of(&self, pod: &Pod) -> Option<&Revision<'_>> {
        let label = pods::revision_of(pod)?;
        self.revisions
            .iter()
            .find(|r| pod_label_matches_revision(label, r.name))
    }

    fn pod_name(&self, i: usize) -> String {
        self.pods[i].metadata.name.clone().unwrap_or_default()
    }
}

/// `rollingUpdate.minReadySeconds` (0 when unset), clamped to [0, 300].
pub fn min_ready_seconds(spec: &StatefulSetSpec) -> i32 {
    spec.update_strategy
        .rolling_update
        .as_ref()
        .and_then(|r| r.min_ready_seconds)
        .unwrap_or(0)
        .clamp(0, kruise_api::statefulset::v1beta1::MAX_MIN_READY_SECONDS)
}

/// An int-or-percent of `replicas`, percentages rounded down, at least 1.
fn at_least_one(
    value: &IntOrString,
    replicas: i32,
    field: &'static str,
) -> Result<i64, InvalidSetting> {
    let parsed = IntOrPercent::parse(value).map_err(|message| InvalidSetting { field, message })?;
    Ok(i64::from(parsed.scaled(replicas, Round::Down).max(1)))
}

/// `rollingUpdate.maxUnavailable` (1 when unset) as a Pod count.
pub fn max_unavailable(spec: &StatefulSetSpec) -> Result<i64, InvalidSetting> {
    let replicas = spec.replicas.unwrap_or(1);
    match spec
        .update_strategy
        .rolling_update
        .as_ref()
        .and_then(|r| r.max_unavailable.as_ref())
    {
        Some(v) => at_least_one(v, replicas, FIELD_MAX_UNAVAILABLE),
        None => Ok(1),
    }
}

/// `scaleStrategy.maxUnavailable` as a Pod count; `None` (no limit) when unset.
pub fn scale_max_unavailable(spec: &StatefulSetSpec) -> Result<Option<i64>, InvalidSetting> {
    spec.scale_strategy
        .as_ref()
        .and_then(|s| s.max_unavailable.as_ref())
        .map(|v| at_least_one(v, spec.replicas.unwrap_or(1), FIELD_SCALE_MAX_UNAVAILABLE))
        .transpose()
}

/// Running, Ready, not terminating, lifecycle unset or Normal (upstream `isHealthy`).
pub fn is_healthy(pod: &Pod) -> bool {
    pods::lifecycle_state(pod).allows_available()
        && pods::is_running_and_ready(pod)
        && !pods::is_terminating(pod)
}

/// Running and available for `min_ready_seconds`, lifecycle unset or Normal (upstream
/// `isRunningAndAvailable`); with the time left to wait when only minReadySeconds is missing.
pub fn running_and_available(
    pod: &Pod,
    min_ready_seconds: i32,
    now: Timestamp,
) -> (bool, Option<Duration>) {
    if pods::is_available(pod, min_ready_seconds, now) {
        return (true, None);
    }
    let waiting_out_min_ready = pods::lifecycle_state(pod).allows_available()
        && pods::is_running_and_ready(pod)
        && min_ready_seconds > 0;
    if !waiting_out_min_ready {
        return (false, None);
    }
    let wait = pods::ready_since(pod)
        .and_then(|since| {
            since
                .checked_add(SignedDuration::from_secs(i64::from(min_ready_seconds)))
                .ok()
        })
        .map(|at| at.duration_since(now))
        .map_or(
            Duration::from_secs(u64::try_from(min_ready_seconds).unwrap_or(0)),
            |d| {
                // Strictly after the deadline counts, so wake a second past it.
                Duration::from_secs(u64::try_from(d.as_secs().max(0)).unwrap_or(0) + 1)
            },
        );
    (false, Some(wait))
}

/// Why a Pod is deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteReason {
    /// Phase Failed or Succeeded: it is recreated at the same ordinal (Event `RecreatingFailedPod`).
    Finished,
    /// Beyond the replica range or at a reserved ordinal (scale-in).
    Condemned,
    /// Carries `apps.kruise.io/specified-delete`.
    Specified,
    /// Rolling update by recreation.
    Recreate,
}

/// A correction made to a Pod before anything else (upstream's refresh).
#[derive(Clone, Debug, PartialEq)]
pub enum Fix {
    /// The in-place update is complete: set `InPlaceUpdateReady=True` and, in the same write, move
    /// the Pod to this lifecycle state (the refresh's lifecycle move of the same Pod).
    InPlaceReady(usize, Option<LifecycleState>),
    /// Start the next batch of containers held back by container launch priority.
    InPlaceNextBatch(usize),
    /// Move the Pod to this lifecycle state.
    Lifecycle(usize, LifecycleState),
}

/// One thing for the controller to do, in plan order.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Create the Pod at `ordinal` from `revision` (its claims first), in lifecycle state
    /// `lifecycle` (Normal, or PreparingNormal while a preNormal hook is not all on the template).
    Create {
        ordinal: i32,
        name: String,
        revision: String,
        lifecycle: LifecycleState,
    },
    /// The Pod is Pending: create any of its claims that are missing.
    CreateClaims {
        pod: usize,
    },
    Fix(Fix),
    /// Delete the Pod.
    Delete {
        pod: usize,
        reason: DeleteReason,
    },
    /// A preDelete hook holds the Pod: move it to PreparingDelete instead of deleting it.
    PrepareDelete {
        pod: usize,
        reason: DeleteReason,
        mark_not_ready: bool,
    },
    /// Move the Pod to PreparingUpdate so the inPlaceUpdate hook's owner can act first.
    PrepareUpdate {
        pod: usize,
        mark_not_ready: bool,
        readd_hook: bool,
    },
    /// Update in place to the update revision (drain, wait, resize, patch: [`inplace::next_step`]),
    /// moving the lifecycle to `Updating` when the Pod has a lifecycle state.
    InPlace {
        pod: usize,
        plan: InPlacePlan,
        set_updating: bool,
    },
    /// The update of this Pod is refused (InPlaceOnly and not in place, or a state that forbids an
    /// update); the message is upstream's, for a condition and an Event.
    Refuse {
        pod: usize,
        message: String,
    },
}

/// What an OrderedReady set waits for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BlockReason {
    RunningAndReady,
    /// Ready, but not yet for minReadySeconds (or its lifecycle state is not Normal).
    Available,
    Terminating,
}

/// The Pod an OrderedReady set waits for, for a condition message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocked {
    pub pod: String,
    pub reason: BlockReason,
    /// What the Pod shows: phase, and the Ready condition's reason and message when not Ready.
    pub detail: String,
}

impl fmt::Display for Blocked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.reason {
            BlockReason::RunningAndReady => "to be Running and Ready",
            BlockReason::Available => "to be Available",
            BlockReason::Terminating => "to terminate",
        };
        write!(f, "waiting for {} {what}", self.pod)?;
        if !self.detail.is_empty() {
            write!(f, " ({})", self.detail)?;
        }
        Ok(())
    }
}

fn detail(pod: &Pod) -> String {
    let phase = pods::phase(pod);
    let mut out = format!("phase {}", if phase.is_empty() { "unknown" } else { phase });
    if let Some(c) = pods::condition(pod, pods::CONDITION_READY).filter(|c| c.status != "True") {
        out.push_str(&format!(", Ready={}", c.status));
        if let Some(reason) = c.reason.as_deref().filter(|r| !r.is_empty()) {
            out.push_str(&format!(" {reason}"));
        }
        if let Some(message) = c.message.as_deref().filter(|m| !m.is_empty()) {
            out.push_str(&format!(": {message}"));
        }
    }
    let state = pods::lifecycle_state(pod);
    if !state.allows_available() {
        out.push_str(&format!(", lifecycle {state:?}"));
    }
    out
}

/// The decisions of one sync.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// In order. Deletions of condemned Pods in Parallel mode are independent of each other and may
    /// be sent in [`slow_start_batches`].
    pub actions: Vec<Action>,
    /// OrderedReady is waiting on this Pod (nothing after it was planned).
    pub blocked: Option<Blocked>,
    /// Look again after this long (minReadySeconds running out).
    pub requeue_after: Option<Duration>,
}

impl Plan {
    fn wake(&mut self, after: Option<Duration>) {
        if let Some(after) = after {
            self.requeue_after = Some(self.requeue_after.map_or(after, |d| d.min(after)));
        }
    }

    fn block(&mut self, pods: &[Pod], i: usize, reason: BlockReason) {
        self.blocked = Some(Blocked {
            pod: pods[i].metadata.name.clone().unwrap_or_default(),
            reason,
            detail: detail(&pods[i]),
        });
    }

    /// Indexes of the Pods the plan deletes or moves to PreparingDelete.
    pub fn deleted(&self) -> BTreeSet<usize> {
        self.actions
            .iter()
            .filter_map(|a| match a {
                Action::Delete { pod, .. } | Action::PrepareDelete { pod, .. } => Some(*pod),
                _ => None,
            })
            .collect()
    }
}

/// The revision a new Pod at slot `k` gets (upstream `isCurrentRevisionNeeded`): always the update
/// revision under OnDelete; without rollingUpdate, current below `start + status.currentReplicas`;
/// ordered, current within the first `partition` slots; unordered, current while fewer than
/// `partition` other Pods (existing or planned) are not at the update revision.
fn new_pod_revision<'a>(
    s: &Snapshot<'a>,
    k: usize,
    slots: &[Slot],
    planned: &[Option<bool>],
) -> &'a str {
    let current = s.current.name;
    let update = s.update.name;
    if s.spec.update_strategy.type_ == UPDATE_ON_DELETE {
        return update;
    }
    let Some(rolling) = s.rolling() else {
        let bound = i64::from(s.start()) + i64::from(s.status_current_replicas);
        return if i64::from(slots[k].ordinal) < bound {
            current
        } else {
            update
        };
    };
    let partition = usize::try_from(rolling.partition.unwrap_or(0).max(0)).unwrap_or(0);
    if rolling.unordered_update.is_none() {
        return if k < partition { current } else { update };
    }
    let not_updated = slots
        .iter()
        .enumerate()
        .filter(|&(j, _)| j != k)
        .filter(|&(j, slot)| match (slot.pod, planned[j]) {
            (Some(i), _) => !pods::is_at_revision(&s.pods[i], update),
            (None, Some(at_update)) => !at_update,
            (None, None) => false,
        })
        .count();
    if not_updated < partition {
        current
    } else {
        update
    }
}

fn creation_lifecycle(s: &Snapshot<'_>, template: &PodTemplateSpec) -> LifecycleState {
    let pre_normal = s
        .spec
        .lifecycle
        .as_ref()
        .and_then(|l| l.pre_normal.as_ref());
    if pre_normal.is_none() {
        return LifecycleState::Normal;
    }
    let probe = Pod {
        metadata: template.metadata.clone().unwrap_or_default(),
        ..Pod::default()
    };
    if lifecycle::is_all_hooked(pre_normal, &probe) {
        LifecycleState::Normal
    } else {
        LifecycleState::PreparingNormal
    }
}

/// Delete, or PrepareDelete when a preDelete hook holds the Pod; nothing when it is already in
/// PreparingDelete under the hook (upstream `deletePod`). Returns whether an action was planned.
fn delete(s: &Snapshot<'_>, plan: &mut Plan, i: usize, reason: DeleteReason) -> bool {
    let hook = s
        .spec
        .lifecycle
        .as_ref()
        .and_then(|l| l.pre_delete.as_ref());
    let pod = &s.pods[i];
    if lifecycle::is_hooked(hook, pod) {
        if pods::lifecycle_state(pod) == LifecycleState::PreparingDelete {
            return false;
        }
        plan.actions.push(Action::PrepareDelete {
            pod: i,
            reason,
            mark_not_ready: hook.is_some_and(|h| h.mark_pod_not_ready),
        });
        return true;
    }
    plan.actions.push(Action::Delete { pod: i, reason });
    true
}

/// The refresh of one Pod: in-place readiness, the continuation of an in-place update waiting out
/// its grace period (upstream finishes it in `Refresh`, before any rollout decision), and lifecycle.
fn refresh(s: &Snapshot<'_>, plan: &mut Plan, i: usize) {
    let pod = &s.pods[i];
    if pods::is_terminating(pod) {
        return;
    }
    let completed = inplace::check_completed(pod) == Completion::Done;
    let gate_true = pods::condition(pod, kruise_api::keys::CONDITION_IN_PLACE_UPDATE_READY)
        .is_some_and(|c| c.status == "True");
    let at_update = pods::is_at_revision(pod, s.update.name);
    let rules = RefreshRules {
        normal_needs_scheduling: false,
    };
    let state = lifecycle::refresh_transition_with(
        rules,
        s.spec.lifecycle.as_ref(),
        pod,
        at_update,
        completed,
    );
    if !at_update && inplace::drained_for_update(pod) {
        match update_one(s, i) {
            UpdateStep::Act(action) => plan.actions.push(action),
            UpdateStep::Held => {}
            // The update revision changed under the drain to one that cannot be reached in place.
            UpdateStep::Recreate => {
                delete(s, plan, i, DeleteReason::Recreate);
            }
        }
    } else if inplace::next_batch_due(pod) {
        plan.actions.push(Action::Fix(Fix::InPlaceNextBatch(i)));
    } else if completed && !gate_true && inplace::has_readiness_gate(pod) {
        // One write finishes the update: the gate and the lifecycle move together.
        plan.actions.push(Action::Fix(Fix::InPlaceReady(i, state)));
        return;
    }
    if let Some(state) = state {
        plan.actions.push(Action::Fix(Fix::Lifecycle(i, state)));
    }
}

/// Decrements the scale budget; true when it is spent (upstream `decreaseAndCheckMaxUnavailable`).
fn spend(budget: &mut Option<i64>) -> bool {
    match budget {
        Some(b) => {
            *b -= 1;
            *b <= 0
        }
        None => false,
    }
}

/// Deletes the condemned Pods (beyond the replicas), highest ordinal first; true when an
/// OrderedReady set must stop there this sync.
fn delete_condemned(
    s: &Snapshot<'_>,
    condemned: &[usize],
    first_unhealthy: Option<usize>,
    min_ready: i32,
    plan: &mut Plan,
) -> bool {
    let monotonic = s.monotonic();
    for &i in condemned {
        let pod = &s.pods[i];
        if pods::is_terminating(pod) {
            if monotonic {
                plan.block(s.pods, i, BlockReason::Terminating);
                return true;
            }
            continue;
        }
        if monotonic && Some(i) != first_unhealthy {
            let (available, wait) = running_and_available(pod, min_ready, s.now);
            if !available {
                plan.wake(wait);
                let waiting_on = first_unhealthy.unwrap_or(i);
                plan.block(s.pods, waiting_on, BlockReason::RunningAndReady);
                return true;
            }
        }
        if delete(s, plan, i, DeleteReason::Condemned) && monotonic {
            return true;
        }
    }
    false
}

/// Plans one sync of the set. An unparsable maxUnavailable is an error naming the field: nothing is
/// planned from it.
pub fn plan(s: &Snapshot<'_>) -> Result<Plan, InvalidSetting> {
    let max_unavailable = max_unavailable(s.spec)?;
    let mut scale_budget = scale_max_unavailable(s.spec)?;
    let scale_limited = scale_budget.is_some();
    let min_ready = min_ready_seconds(s.spec);
    let monotonic = s.monotonic();
    let reserved = Reserved::parse(&s.spec.reserve_ordinals);
    let Slots { slots, condemned } =
        partition_pods(s.name, s.pods, s.start(), s.replicas(), &reserved);
    let mut plan = Plan::default();

    // Revisions of the empty slots, decided in ordinal order as upstream fills them.
    let mut planned: Vec<Option<bool>> = vec![None; slots.len()];
    for k in 0..slots.len() {
        if slots[k].pod.is_none() {
            let revision = new_pod_revision(s, k, &slots, &planned);
            planned[k] = Some(pod_label_matches_revision(revision, s.update.name));
        }
    }

    // The first unhealthy Pod (lowest ordinal), which OrderedReady may delete while condemned.
    let first_unhealthy = slots
        .iter()
        .filter_map(|slot| slot.pod)
        .chain(condemned.iter().copied())
        .filter(|&i| !is_healthy(&s.pods[i]))
        .min_by_key(|&i| {
            s.pods[i]
                .metadata
                .name
                .as_deref()
                .and_then(|n| ordinal_of(s.name, n))
        });

    // 1. The replicas, in ordinal order.
    let mut refreshed: BTreeSet<usize> = BTreeSet::new();
    for (k, slot) in slots.iter().enumerate() {
        let Some(i) = slot.pod else {
            let revision = if planned[k] == Some(true) {
                s.update
            } else {
                s.current
            };
            plan.actions.push(Action::Create {
                ordinal: slot.ordinal,
                name: pod_name(s.name, slot.ordinal),
                revision: revision.name.to_owned(),
                lifecycle: creation_lifecycle(s, revision.template),
            });
            if monotonic {
                plan.blocked = Some(Blocked {
                    pod: pod_name(s.name, slot.ordinal),
                    reason: BlockReason::RunningAndReady,
                    detail: "being created".into(),
                });
                return Ok(plan);
            }
            if spend(&mut scale_budget) {
                break;
            }
            continue;
        };
        let pod = &s.pods[i];
        if matches!(pods::phase(pod), pods::PHASE_FAILED | pods::PHASE_SUCCEEDED) {
            if spend(&mut scale_budget) {
                break;
            }
            if !pods::is_terminating(pod) {
                delete(s, &mut plan, i, DeleteReason::Finished);
            }
            if monotonic {
                plan.block(s.pods, i, BlockReason::RunningAndReady);
                return Ok(plan);
            }
            continue;
        }
        if pods::phase(pod) == pods::PHASE_PENDING && !pods::is_terminating(pod) {
            plan.actions.push(Action::CreateClaims { pod: i });
        }
        if pods::is_terminating(pod) {
            if monotonic {
                plan.block(s.pods, i, BlockReason::Terminating);
                return Ok(plan);
            }
            if spend(&mut scale_budget) {
                break;
            }
        }
        refresh(s, &mut plan, i);
        refreshed.insert(i);
        if monotonic || scale_limited {
            let (available, wait) = running_and_available(pod, min_ready, s.now);
            if !available {
                plan.wake(wait);
                if monotonic {
                    let reason = if pods::is_running_and_ready(pod) {
                        BlockReason::Available
                    } else {
                        BlockReason::RunningAndReady
                    };
                    plan.block(s.pods, i, reason);
                    return Ok(plan);
                }
                if spend(&mut scale_budget) {
                    break;
                }
            }
        }
    }

    // 2. Condemned Pods, highest ordinal first.
    if delete_condemned(s, &condemned, first_unhealthy, min_ready, &mut plan) {
        return Ok(plan);
    }

    // 3. The rolling update.
    if s.spec.update_strategy.type_ == UPDATE_ON_DELETE {
        return Ok(plan);
    }
    let mut lifecycle_moved = false;
    for i in 0..s.pods.len() {
        if refreshed.contains(&i) {
            continue;
        }
        refresh(s, &mut plan, i);
    }
    for action in &plan.actions {
        if let Action::Fix(Fix::Lifecycle(..) | Fix::InPlaceReady(_, Some(_))) = action {
            lifecycle_moved = true;
        }
    }
    if lifecycle_moved || s.rolling().is_some_and(|r| r.paused) {
        return Ok(plan);
    }
    rolling_update(s, &slots, &planned, max_unavailable, min_ready, &mut plan);
    Ok(plan)
}

fn rolling_update(
    s: &Snapshot<'_>,
    slots: &[Slot],
    planned: &[Option<bool>],
    max_unavailable: i64,
    min_ready: i32,
    plan: &mut Plan,
) {
    let already_leaving = plan.deleted();
    // Pods whose in-place update the refresh continued: they count as unavailable, nothing more.
    let continued: BTreeSet<usize> = plan
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::InPlace { pod, .. }
            | Action::PrepareUpdate { pod, .. }
            | Action::Refuse { pod, .. } => Some(*pod),
            _ => None,
        })
        .collect();
    let max = usize::try_from(max_unavailable).unwrap_or(usize::MAX);
    // Unavailable slots: unhealthy, in-place update unfinished, not available for minReadySeconds;
    // an empty slot (a Pod still to be created) counts too.
    let mut unavailable: BTreeSet<usize> = BTreeSet::new();
    for (k, slot) in slots.iter().enumerate() {
        let Some(i) = slot.pod else {
            unavailable.insert(k);
            continue;
        };
        let pod = &s.pods[i];
        let (available, wait) = running_and_available(pod, min_ready, s.now);
        if !is_healthy(pod) || inplace::check_completed(pod) != Completion::Done || !available {
            plan.wake(wait);
            unavailable.insert(k);
        }
    }

    // Specified-delete Pods, highest ordinal first, ignoring the partition.
    let mut specified: BTreeSet<usize> = BTreeSet::new();
    for k in (0..slots.len()).rev() {
        let Some(i) = slots[k].pod else { continue };
        if !pods::is_specified_delete(&s.pods[i]) || already_leaving.contains(&i) {
            continue;
        }
        if unavailable.len() >= max && !unavailable.contains(&k) {
            continue;
        }
        specified.insert(k);
        if !pods::is_terminating(&s.pods[i]) {
            delete(s, plan, i, DeleteReason::Specified);
        }
        unavailable.insert(k);
    }

    for k in update_order(s, slots, planned) {
        let Some(i) = slots[k].pod else { continue };
        let pod = &s.pods[i];
        if pods::is_at_revision(pod, s.update.name) {
            continue;
        }
        if unavailable.len() >= max && !unavailable.contains(&k) {
            return;
        }
        if !specified.contains(&k)
            && !pods::is_terminating(pod)
            && !already_leaving.contains(&i)
            && !continued.contains(&i)
        {
            match update_one(s, i) {
                UpdateStep::Act(action @ Action::Refuse { .. }) => {
                    plan.actions.push(action);
                    return;
                }
                UpdateStep::Act(action) => plan.actions.push(action),
                UpdateStep::Held => {}
                UpdateStep::Recreate => {
                    delete(s, plan, i, DeleteReason::Recreate);
                }
            }
        }
        unavailable.insert(k);
    }
}

/// The order in which slots are considered for update (upstream `sortPodsToUpdate`), cut to
/// `replicas − partition`. Ordered: from the highest slot down to slot `partition`. Unordered:
/// terminating and updated Pods first (they use up the quota without a change), then the others by
/// the priority strategy, highest ordinal first among equals. `planned[k]` is the revision planned for
/// an empty slot (`Some(true)`: the update revision).
pub fn update_order(s: &Snapshot<'_>, slots: &[Slot], planned: &[Option<bool>]) -> Vec<usize> {
    let partition = usize::try_from(s.partition()).unwrap_or(0);
    let max_update = slots.len().saturating_sub(partition);
    if max_update == 0 {
        return Vec::new();
    }
    let unordered = s.rolling().and_then(|r| r.unordered_update.as_ref());
    let Some(unordered) = unordered else {
        return (partition..slots.len()).rev().collect();
    };
    let (mut done, mut waiting): (Vec<usize>, Vec<usize>) = (Vec::new(), Vec::new());
    for k in (0..slots.len()).rev() {
        match slots[k].pod {
            Some(i) => {
                let pod = &s.pods[i];
                if pods::is_terminating(pod) || pods::is_at_revision(pod, s.update.name) {
                    done.push(k);
                } else {
                    waiting.push(i);
                }
            }
            None if planned.get(k).copied().flatten() == Some(true) => done.push(k),
            None => {}
        }
    }
    if let Some(priority) = unordered.priority_strategy.as_ref() {
        ordering::sort_by_priority(s.pods, &mut waiting, priority);
    }
    let slot_of = |i: usize| slots.iter().position(|slot| slot.pod == Some(i));
    done.into_iter()
        .chain(waiting.into_iter().filter_map(slot_of))
        .take(max_update)
        .collect()
}

enum UpdateStep {
    Act(Action),
    /// Its inPlaceUpdate hook holds it (or the refresh must move it on first): it counts as being
    /// updated, nothing is sent.
    Held,
    Recreate,
}

/// The update of one Pod not at the update revision (upstream `inPlaceUpdatePod`).
fn update_one(s: &Snapshot<'_>, i: usize) -> UpdateStep {
    let pod = &s.pods[i];
    let policy = s.policy();
    if policy != POD_UPDATE_IN_PLACE_IF_POSSIBLE && policy != POD_UPDATE_IN_PLACE_ONLY {
        return UpdateStep::Recreate;
    }
    let opts = PlanOptions {
        resize: s.resize,
        env_from_metadata: s.env_from_metadata,
    };
    let planned = s
        .revision_of(pod)
        .map(|old| inplace::plan(old.template, s.update.template, pod, &opts));
    let Some(inplace::Plan::InPlace(in_place)) = planned else {
        if policy == POD_UPDATE_IN_PLACE_ONLY {
            return UpdateStep::Act(Action::Refuse {
                pod: i,
                message: format!(
                    "find strategy is InPlaceOnly but Pod {} can not update in-place",
                    s.pod_name(i)
                ),
            });
        }
        return UpdateStep::Recreate;
    };
    let state = pods::lifecycle_state(pod);
    UpdateStep::Act(
        match lifecycle::in_place_gate(s.spec.lifecycle.as_ref(), pod) {
            InPlaceGate::Proceed => Action::InPlace {
                pod: i,
                plan: in_place,
                set_updating: state != LifecycleState::Unset,
            },
            InPlaceGate::Prepare {
                mark_not_ready,
                readd_hook,
            } => Action::PrepareUpdate {
                pod: i,
                mark_not_ready,
                readd_hook,
            },
            InPlaceGate::Wait => return UpdateStep::Held,
            InPlaceGate::NotAllowed => Action::Refuse {
                pod: i,
                message: format!(
                    "not allowed to in-place update pod {} in state {}",
                    s.pod_name(i),
                    lifecycle::state_value(state).unwrap_or("unknown")
                ),
            },
        },
    )
}

/// The replica counts of the status: replicas, ready, available, current and updated (and updated
/// and ready), as upstream's `computeReplicaStatus`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplicaStatus {
    /// Created Pods (a phase is set).
    pub replicas: i32,
    /// Running and Ready.
    pub ready_replicas: i32,
    /// Running, Ready for minReadySeconds, lifecycle unset or Normal.
    pub available_replicas: i32,
    /// Created, not terminating, at the current revision.
    pub current_replicas: i32,
    /// Created, not terminating, at the update revision.
    pub updated_replicas: i32,
    pub updated_ready_replicas: i32,
    pub updated_available_replicas: i32,
}

/// Counts the set's Pods (those with an ordinal of the set, as upstream counts its replicas and
/// condemned Pods).
pub fn replica_status(
    set: &str,
    pods: &[Pod],
    min_ready_seconds: i32,
    current_revision: &str,
    update_revision: &str,
    now: Timestamp,
) -> ReplicaStatus {
    let mut st = ReplicaStatus::default();
    for pod in pods {
        if pod
            .metadata
            .name
            .as_deref()
            .and_then(|n| ordinal_of(set, n))
            .is_none()
        {
            continue;
        }
        let created = !pods::phase(pod).is_empty();
        let at_update = pods::is_at_revision(pod, update_revision);
        if created {
            st.replicas += 1;
        }
        if pods::is_running_and_ready(pod) {
            st.ready_replicas += 1;
            let available = running_and_available(pod, min_ready_seconds, now).0;
            if available {
                st.available_replicas += 1;
            }
            if at_update {
                st.updated_ready_replicas += 1;
                if available {
                    st.updated_available_replicas += 1;
                }
            }
        }
        if created && !pods::is_terminating(pod) {
            if pods::is_at_revision(pod, current_revision) {
                st.current_replicas += 1;
            }
            if at_update {
                st.updated_replicas += 1;
            }
        }
    }
    st
}

/// `status.currentRevision` after a sync, and the currentReplicas to report with it: a RollingUpdate
/// whose Pods are all updated and Ready is complete, so the update revision becomes current.
pub fn complete_rolling_update(
    spec: &StatefulSetSpec,
    status: &mut ReplicaStatus,
    current_revision: &str,
    update_revision: &str,
) -> String {
    let rolling = spec.update_strategy.type_ != UPDATE_ON_DELETE;
    if rolling
        && status.updated_replicas == status.replicas
        && status.ready_replicas == status.replicas
    {
        status.current_replicas = status.updated_replicas;
        return update_revision.to_owned();
    }
    current_revision.to_owned()
}

#[cfg(test)]
mod tests;
