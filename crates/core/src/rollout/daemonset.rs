//! Advanced DaemonSet planning (upstream `pkg/controller/daemonset/daemonset_controller.go` and
//! `daemonset_update.go`): one sync of an ADS decided from a snapshot.
//!
//! The caller gives every node of the cluster with its eligibility verdict (whether the daemon should
//! run there and whether a Pod already there may continue to run, from `crate::nodefit`) and the
//! set's Pods. [`plan`] then decides, as Kubernetes' DaemonSet controller with OpenKruise's additions:
//!
//! 1. **manage** — per node: create a Pod where one should run and none does; delete failed Pods;
//!    keep the oldest of duplicates (with surge, the oldest new and the oldest old); delete every Pod
//!    of a node that may no longer run it, or that left the cluster. Creations are capped by
//!    `partitionedScaling`, creations and deletions by `burstReplicas`.
//! 2. **rolling update** (RollingUpdate, not paused, nothing created or deleted above): candidate
//!    nodes in upstream's order — updated, updating, then the nodes the rollout `selector` matches
//!    (all, without one), by name descending — cut to `nodes − partition`; then maxUnavailable
//!    (delete or update in place) or maxSurge (create beside, delete the old once the new is
//!    available).
//!
//! A Pod held by a preDelete hook is moved to `PreparingDelete` instead of being deleted, and counts
//! as unavailable (or surging) until its hook lets go.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kruise_api::daemonset::v1beta1::{
    DaemonSetSpec, ROLLING_UPDATE_IN_PLACE_IF_POSSIBLE, RollingUpdateDaemonSet, UPDATE_ON_DELETE,
};
use kruise_api::intstr::{IntOrPercent, Round};
use kruise_api::keys;
use kruise_api::validation::selector_matches;

use super::statefulset::running_and_available;
use super::{InvalidSetting, Revision};
use crate::inplace::{self, Completion, InPlacePlan, PlanOptions};
use crate::lifecycle;
use crate::pods::{self, LifecycleState};

const FIELD_MAX_UNAVAILABLE: &str = "spec.updateStrategy.rollingUpdate.maxUnavailable";
const FIELD_MAX_SURGE: &str = "spec.updateStrategy.rollingUpdate.maxSurge";
const FIELD_PARTITION: &str = "spec.updateStrategy.rollingUpdate.partition";
const FIELD_BURST_REPLICAS: &str = "spec.burstReplicas";

/// Default `burstReplicas`.
pub const DEFAULT_BURST_REPLICAS: i32 = 250;

/// A node as the planner sees it.
#[derive(Clone, Debug)]
pub struct NodeView<'a> {
    pub name: &'a str,
    pub labels: &'a BTreeMap<String, String>,
    /// The daemon should run here (a new Pod may be placed).
    pub should_run: bool,
    /// A daemon Pod already here may stay (it tolerates the node's NoExecute taints, …).
    pub should_continue_running: bool,
}

/// How the daemon of `template` sees `node` (whose labels are `labels`).
pub fn node_view<'a>(
    template: &k8s_openapi::api::core::v1::PodSpec,
    node: &'a k8s_openapi::api::core::v1::Node,
    labels: &'a BTreeMap<String, String>,
) -> NodeView<'a> {
    let fit = crate::nodefit::daemon_fit(template, node);
    NodeView {
        name: crate::nodefit::node_name(node),
        labels,
        should_run: fit.should_run,
        should_continue_running: fit.should_continue_running,
    }
}

/// Everything one sync decides on.
#[derive(Clone, Copy)]
pub struct Snapshot<'a> {
    pub spec: &'a DaemonSetSpec,
    /// Every Pod the set owns, terminating and finished ones included.
    pub pods: &'a [Pod],
    /// Every node of the cluster.
    pub nodes: &'a [NodeView<'a>],
    /// The update revision (the current template).
    pub update: Revision<'a>,
    /// Every revision of the set, for the template an old Pod was created from.
    pub revisions: &'a [Revision<'a>],
    pub now: Timestamp,
    /// Resize cpu/memory in place through `pods/resize`.
    pub resize: bool,
    /// Restart the containers whose env reads a changed label/annotation, in place through
    /// kruise-daemon (gate `InPlaceUpdateEnvFromMetadata`).
    pub env_from_metadata: bool,
    /// `DaemonSetPruneIneligibleNodes`: nodes that should no longer run the daemon (their Pods are
    /// being deleted by manage) are left out of the rolling update, so that their Pods use none of
    /// its maxUnavailable or maxSurge. Off, as in OpenKruise, such a node still counts: a selector
    /// narrowed while Pods are held by a preDelete hook can use the whole budget.
    pub prune_ineligible_nodes: bool,
}

impl Snapshot<'_> {
    fn rolling(&self) -> Option<&RollingUpdateDaemonSet> {
        if self.spec.update_strategy.type_ == UPDATE_ON_DELETE {
            return None;
        }
        self.spec.update_strategy.rolling_update.as_ref()
    }

    fn in_place(&self) -> bool {
        self.rolling()
            .is_some_and(|r| r.type_ == ROLLING_UPDATE_IN_PLACE_IF_POSSIBLE)
    }

    fn is_updated(&self, pod: &Pod) -> bool {
        pods::is_at_revision(pod, self.update.name)
    }

    fn revision_of(&self, pod: &Pod) -> Option<&Revision<'_>> {
        let label = pods::revision_of(pod)?;
        self.revisions
            .iter()
            .find(|r| crate::revision::pod_label_matches_revision(label, r.name))
    }

    fn pre_delete(&self) -> Option<&kruise_api::pub_types::LifecycleHook> {
        self.spec
            .lifecycle
            .as_ref()
            .and_then(|l| l.pre_delete.as_ref())
    }
}

/// The node a daemon Pod is for: `spec.nodeName` once bound, else the node its required affinity
/// pins it to (`matchFields metadata.name In [node]`), as upstream's `GetTargetNodeName`.
pub fn target_node(pod: &Pod) -> Option<&str> {
    crate::nodefit::bound_node(pod.spec.as_ref()?)
}

/// Daemon Pods by target node, each list oldest first (creation time, then name).
pub fn pods_by_node(pods: &[Pod]) -> BTreeMap<&str, Vec<usize>> {
    let mut out: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, pod) in pods.iter().enumerate() {
        if let Some(node) = target_node(pod) {
            out.entry(node).or_default().push(i);
        }
    }
    for list in out.values_mut() {
        list.sort_by(|&a, &b| oldest_first(&pods[a], &pods[b]));
    }
    out
}

fn oldest_first(a: &Pod, b: &Pod) -> std::cmp::Ordering {
    let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
    created(a)
        .cmp(&created(b))
        .then_with(|| a.metadata.name.cmp(&b.metadata.name))
}

/// An int-or-percent of `total`.
fn scaled(
    value: Option<&IntOrString>,
    total: i32,
    round: Round,
    field: &'static str,
) -> Result<i32, InvalidSetting> {
    match value {
        None => Ok(0),
        Some(v) => IntOrPercent::parse(v)
            .map(|p| p.scaled(total, round).max(0))
            .map_err(|message| InvalidSetting { field, message }),
    }
}

/// `burstReplicas` as a count of `desired` (percentages round down; 250 when unset). At least 1, so
/// a small percentage of a small fleet still makes progress.
pub fn burst_replicas(spec: &DaemonSetSpec, desired: i32) -> Result<usize, InvalidSetting> {
    let burst = match &spec.burst_replicas {
        None => DEFAULT_BURST_REPLICAS,
        Some(v) => scaled(Some(v), desired, Round::Down, FIELD_BURST_REPLICAS)?,
    };
    Ok(usize::try_from(burst.max(1)).unwrap_or(1))
}

/// (maxSurge, maxUnavailable) as node counts of `desired` (percentages round up); both zero gives
/// maxUnavailable 1, as upstream's `updatedDesiredNodeCounts`. maxSurge is 0 for InPlaceIfPossible.
pub fn surge_and_unavailable(
    rolling: Option<&RollingUpdateDaemonSet>,
    desired: i32,
) -> Result<(usize, usize), InvalidSetting> {
    let Some(rolling) = rolling else {
        return Ok((0, 1));
    };
    let mut surge = scaled(
        rolling.max_surge.as_ref(),
        desired,
        Round::Up,
        FIELD_MAX_SURGE,
    )?;
    let unavailable = scaled(
        rolling.max_unavailable.as_ref(),
        desired,
        Round::Up,
        FIELD_MAX_UNAVAILABLE,
    )?;
    if rolling.type_ == ROLLING_UPDATE_IN_PLACE_IF_POSSIBLE {
        surge = 0;
    }
    let to_usize = |v: i32| usize::try_from(v).unwrap_or(0);
    if surge == 0 && unavailable == 0 {
        return Ok((0, 1));
    }
    Ok((to_usize(surge), to_usize(unavailable)))
}

/// `rollingUpdate.partition` as a node count of `total` (percentages round down).
pub fn partition(spec: &DaemonSetSpec, total: i32) -> Result<usize, InvalidSetting> {
    let value = spec
        .update_strategy
        .rolling_update
        .as_ref()
        .and_then(|r| r.partition.as_ref());
    Ok(usize::try_from(scaled(value, total, Round::Down, FIELD_PARTITION)?).unwrap_or(0))
}

/// Whether the rollout selector matches a node; `Ok(true)` without a selector.
fn selector_allows(
    selector: Option<&LabelSelector>,
    labels: &BTreeMap<String, String>,
) -> Result<bool, InvalidSetting> {
    let Some(selector) = selector else {
        return Ok(true);
    };
    // An empty selector matches every node, as a labels.Selector built from it does; validation
    // rejects malformed ones.
    Ok(selector_matches(selector, labels))
}

/// Available as a daemon Pod: Running, Ready for minReadySeconds, `InPlaceUpdateReady` not False,
/// lifecycle unset or Normal (so a Pod held in PreparingDelete is not), not being deleted.
pub fn is_daemon_pod_available(pod: &Pod, min_ready_seconds: i32, now: Timestamp) -> bool {
    !pods::is_terminating(pod) && pods::is_available(pod, min_ready_seconds, now)
}

/// Why a Pod is deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteReason {
    /// Phase Failed: it is replaced (Event `FailedDaemonPod`).
    Failed,
    /// A second Pod on a node (the oldest stays).
    Duplicate,
    /// The node may no longer run the daemon (selector, affinity, NoExecute taint).
    Misscheduled,
    /// The node left the cluster.
    NodeGone,
    /// Rolling update (recreate, or the old Pod after a surge).
    Update,
}

/// A correction made to a Pod before anything else (refresh).
#[derive(Clone, Debug, PartialEq)]
pub enum Fix {
    /// The in-place update is complete (or the Pod is new): set `InPlaceUpdateReady=True`.
    InPlaceReady(usize),
    /// Start the next batch of containers held back by container launch priority.
    InPlaceNextBatch(usize),
}

/// One thing for the controller to do.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Create a Pod for this node at the update revision.
    Create {
        node: String,
    },
    Fix(Fix),
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
    /// Update in place to the update revision ([`inplace::next_step`] via the shared engine).
    InPlace {
        pod: usize,
        plan: InPlacePlan,
    },
}

/// The decisions of one sync.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub actions: Vec<Action>,
    /// Look again after this long (minReadySeconds running out).
    pub requeue_after: Option<Duration>,
    /// Node names that need a Pod but were held back (burstReplicas, partitionedScaling).
    pub deferred_creates: usize,
}

impl Plan {
    fn wake(&mut self, after: Option<Duration>) {
        if let Some(after) = after {
            self.requeue_after = Some(self.requeue_after.map_or(after, |d| d.min(after)));
        }
    }

    /// The nodes to create a Pod on, in plan order.
    pub fn creates(&self) -> Vec<&str> {
        self.actions
            .iter()
            .filter_map(|a| match a {
                Action::Create { node } => Some(node.as_str()),
                _ => None,
            })
            .collect()
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

/// Delete, or PrepareDelete when a preDelete hook holds the Pod; nothing while it already waits in
/// PreparingDelete under the hook.
fn delete(s: &Snapshot<'_>, actions: &mut Vec<Action>, i: usize, reason: DeleteReason) {
    let hook = s.pre_delete();
    let pod = &s.pods[i];
    if lifecycle::is_hooked(hook, pod) {
        if pods::lifecycle_state(pod) != LifecycleState::PreparingDelete {
            actions.push(Action::PrepareDelete {
                pod: i,
                reason,
                mark_not_ready: hook.is_some_and(|h| h.mark_pod_not_ready),
            });
        }
        return;
    }
    actions.push(Action::Delete { pod: i, reason });
}

/// A Pod waiting in PreparingDelete under its hook: on its way out, not a running daemon.
fn pre_deleting(pod: &Pod) -> bool {
    pods::lifecycle_state(pod) == LifecycleState::PreparingDelete
}

/// What `manage` wants for one node (upstream `podsShouldBeOnNode`).
fn pods_should_be_on_node(
    s: &Snapshot<'_>,
    node: &NodeView<'_>,
    on_node: &[usize],
    surge: bool,
    create: &mut Vec<String>,
    delete: &mut Vec<(usize, DeleteReason)>,
) {
    if node.should_run && on_node.is_empty() {
        create.push(node.name.to_owned());
        return;
    }
    if !node.should_continue_running {
        for &i in on_node {
            if !pods::is_terminating(&s.pods[i]) {
                delete.push((i, DeleteReason::Misscheduled));
            }
        }
        return;
    }
    let mut running = Vec::new();
    for &i in on_node {
        let pod = &s.pods[i];
        if pods::is_terminating(pod) {
            continue;
        }
        if pods::phase(pod) == pods::PHASE_FAILED {
            delete.push((i, DeleteReason::Failed));
            continue;
        }
        running.push(i);
    }
    // Every Pod of the node failed: a new one is created once they are gone (next sync).
    if running.len() <= 1 {
        return;
    }
    if !surge {
        // Keep the oldest; `on_node` is oldest first.
        for &i in &running[1..] {
            delete.push((i, DeleteReason::Duplicate));
        }
        return;
    }
    // With surge, at most two Pods: the oldest new one and the oldest old one.
    let (mut new_kept, mut old_kept) = (false, false);
    for &i in &running {
        let slot = if s.is_updated(&s.pods[i]) {
            &mut new_kept
        } else {
            &mut old_kept
        };
        if *slot {
            delete.push((i, DeleteReason::Duplicate));
        } else {
            *slot = true;
        }
    }
}

/// How many of `needing` (sorted by name) `partitionedScaling` lets be created now (upstream
/// `GetNodesNeedingPods`): `desired − nodes with an updated Pod − partition`.
fn partitioned_creates(desired: usize, updated: usize, partition: usize, needing: usize) -> usize {
    if partition >= desired {
        return 0;
    }
    desired
        .saturating_sub(updated)
        .saturating_sub(partition)
        .min(needing)
}

/// Plans one sync. An unparsable int-or-percent is an error naming the field: nothing is planned from
/// it (validation keeps such values out; this guards objects written before it).
pub fn plan(s: &Snapshot<'_>) -> Result<Plan, InvalidSetting> {
    let min_ready = s.spec.min_ready_seconds.max(0);
    let by_node = pods_by_node(s.pods);
    let desired = s.nodes.iter().filter(|n| n.should_run).count();
    let desired_i32 = i32::try_from(desired).unwrap_or(i32::MAX);
    let burst = burst_replicas(s.spec, desired_i32)?;
    let (max_surge, max_unavailable) = surge_and_unavailable(s.rolling(), desired_i32)?;
    let mut plan = Plan::default();

    // Refresh: mark completed in-place updates (and new Pods of an InPlaceIfPossible set) ready. An
    // old Pod whose gate is False without an in-place state is drained for an update whose patch has
    // not landed yet: marking it ready again would undo the drain and livelock the update.
    for (i, pod) in s.pods.iter().enumerate() {
        if pods::is_terminating(pod) {
            continue;
        }
        if inplace::next_batch_due(pod) {
            plan.actions.push(Action::Fix(Fix::InPlaceNextBatch(i)));
            continue;
        }
        if !inplace::has_readiness_gate(pod) {
            continue;
        }
        if !s.is_updated(pod) && inplace::read_state(pod).is_none() {
            continue;
        }
        let gate_true = pods::condition(pod, keys::CONDITION_IN_PLACE_UPDATE_READY)
            .is_some_and(|c| c.status == "True");
        if !gate_true && inplace::check_completed(pod) == Completion::Done {
            plan.actions.push(Action::Fix(Fix::InPlaceReady(i)));
        }
    }

    // 1. manage.
    let mut create: Vec<String> = Vec::new();
    let mut doomed: Vec<(usize, DeleteReason)> = Vec::new();
    let existing: BTreeSet<&str> = s.nodes.iter().map(|n| n.name).collect();
    for node in s.nodes {
        let on_node = by_node.get(node.name).map_or(&[][..], Vec::as_slice);
        pods_should_be_on_node(s, node, on_node, max_surge > 0, &mut create, &mut doomed);
    }
    // Pods for nodes that left the cluster go too (through their preDelete hook): upstream leaves
    // bound ones to the Pod garbage collector, which would skip the hook.
    for (node, list) in &by_node {
        if existing.contains(node) {
            continue;
        }
        for &i in list {
            if !pods::is_terminating(&s.pods[i]) {
                doomed.push((i, DeleteReason::NodeGone));
            }
        }
    }
    // Pods with no node at all (no target) cannot be placed: delete them.
    for (i, pod) in s.pods.iter().enumerate() {
        if target_node(pod).is_none() && !pods::is_terminating(pod) {
            doomed.push((i, DeleteReason::Misscheduled));
        }
    }
    let partitioned_scaling = s
        .spec
        .scale_strategy
        .as_ref()
        .is_some_and(|st| st.partitioned_scaling);
    create.sort();
    if partitioned_scaling && let Some(rolling) = s.rolling() {
        let part = partition(s.spec, desired_i32)?;
        if rolling.partition.is_some() && part > 0 {
            let updated = s
                .nodes
                .iter()
                .filter(|n| n.should_run)
                .filter(|n| {
                    by_node.get(n.name).is_some_and(|l| {
                        l.iter()
                            .any(|&i| pods::is_active(&s.pods[i]) && s.is_updated(&s.pods[i]))
                    })
                })
                .count();
            let allowed = partitioned_creates(desired, updated, part, create.len());
            plan.deferred_creates += create.len() - allowed;
            create.truncate(allowed);
        }
    }
    if create.len() > burst {
        plan.deferred_creates += create.len() - burst;
        create.truncate(burst);
    }
    doomed.truncate(burst);
    let before_manage = plan.actions.len();
    for node in create {
        plan.actions.push(Action::Create { node });
    }
    for (i, reason) in doomed {
        delete(s, &mut plan.actions, i, reason);
    }
    // Only writes hold the rolling update back: a Pod already held in PreparingDelete by its hook
    // needs none (upstream's lifecycle update is then a no-op, and its expectations are met).
    let managed = plan.actions.len() > before_manage;

    // 2. rolling update, once nothing was created or deleted (upstream returns after manage's writes
    // and rolls on the next sync, when the caches show them).
    let Some(rolling) = s.rolling() else {
        return Ok(plan);
    };
    if managed || rolling.paused == Some(true) {
        return Ok(plan);
    }
    let candidates = update_candidates(s, &by_node)?;
    if max_surge == 0 {
        update_with_max_unavailable(
            s,
            &by_node,
            &candidates,
            max_unavailable,
            burst,
            min_ready,
            &mut plan,
        );
    } else {
        update_with_surge(
            s,
            &by_node,
            &candidates,
            max_surge,
            burst,
            min_ready,
            &mut plan,
        );
    }
    Ok(plan)
}

/// The nodes the rolling update may touch, in order (kruise `filterDaemonPodsNodeToUpdate`): nodes of
/// the cluster that have daemon Pods, by name descending, regrouped as updated, updating (a Pod
/// terminating or mid in-place update), then selected (every node without a rollout selector; nodes
/// the selector does not match are dropped), and cut to `nodes − partition`.
pub fn update_candidates<'a>(
    s: &Snapshot<'a>,
    by_node: &BTreeMap<&'a str, Vec<usize>>,
) -> Result<Vec<&'a str>, InvalidSetting> {
    let mut names: Vec<&NodeView<'a>> = s
        .nodes
        .iter()
        .filter(|n| by_node.contains_key(n.name))
        .filter(|n| n.should_run || !s.prune_ineligible_nodes)
        .collect();
    names.sort_by(|a, b| b.name.cmp(a.name));
    let total = i32::try_from(names.len()).unwrap_or(i32::MAX);
    let part = partition(s.spec, total)?;
    let selector = s.rolling().and_then(|r| r.selector.as_ref());
    let (mut updated, mut updating, mut selected) = (Vec::new(), Vec::new(), Vec::new());
    for node in names.iter() {
        let list = &by_node[node.name];
        let has_updated = list.iter().any(|&i| s.is_updated(&s.pods[i]));
        let is_updating = list.iter().any(|&i| {
            let pod = &s.pods[i];
            pods::is_terminating(pod) || inplace::check_completed(pod) != Completion::Done
        });
        if has_updated {
            updated.push(node.name);
        } else if is_updating {
            updating.push(node.name);
        } else if selector_allows(selector, node.labels)? {
            selected.push(node.name);
        }
    }
    let mut sorted = updated;
    sorted.extend(updating);
    sorted.extend(selected);
    sorted.truncate(names.len().saturating_sub(part));
    Ok(sorted)
}

/// The new and old Pod of a node (upstream `findUpdatedPodsOnNode`), terminating Pods left out;
/// `None` when there are two of either kind.
fn updated_and_old(s: &Snapshot<'_>, list: &[usize]) -> Option<(Option<usize>, Option<usize>)> {
    let (mut new, mut old) = (None, None);
    for &i in list {
        let pod = &s.pods[i];
        if pods::is_terminating(pod) {
            continue;
        }
        let slot = if s.is_updated(pod) {
            &mut new
        } else {
            &mut old
        };
        if slot.is_some() {
            return None;
        }
        *slot = Some(i);
    }
    Some((new, old))
}

fn available(s: &Snapshot<'_>, i: usize, min_ready: i32, plan: &mut Plan) -> bool {
    let pod = &s.pods[i];
    if is_daemon_pod_available(pod, min_ready, s.now) {
        return true;
    }
    if !pods::is_terminating(pod) && pods::in_place_update_ready(pod) {
        let (_, wait) = running_and_available(pod, min_ready, s.now);
        plan.wake(wait);
    }
    false
}

fn update_with_max_unavailable(
    s: &Snapshot<'_>,
    by_node: &BTreeMap<&str, Vec<usize>>,
    candidates: &[&str],
    max_unavailable: usize,
    burst: usize,
    min_ready: i32,
    plan: &mut Plan,
) {
    let mut unavailable = 0usize;
    let mut replace: Vec<usize> = Vec::new();
    let mut candidate_pods: Vec<usize> = Vec::new();
    for node in candidates {
        let list = &by_node[node];
        let Some((new, old)) = updated_and_old(s, list) else {
            unavailable += 1;
            continue;
        };
        match (new, old) {
            (None, None) | (Some(_), Some(_)) => unavailable += 1,
            (Some(new), None) => {
                if !available(s, new, min_ready, plan) {
                    unavailable += 1;
                }
            }
            (None, Some(old)) => {
                if !available(s, old, min_ready, plan) {
                    replace.push(old);
                } else if unavailable < max_unavailable {
                    candidate_pods.push(old);
                }
            }
        }
    }
    let room = max_unavailable
        .saturating_sub(unavailable)
        .min(candidate_pods.len());
    replace.extend(&candidate_pods[..room]);
    // A Pod already held in PreparingDelete is on its way; nothing more to do for it.
    replace.retain(|&i| {
        !(pre_deleting(&s.pods[i]) && lifecycle::is_hooked(s.pre_delete(), &s.pods[i]))
    });
    replace.truncate(burst);
    for i in replace {
        match in_place_plan(s, i) {
            Some(in_place) => plan.actions.push(Action::InPlace {
                pod: i,
                plan: in_place,
            }),
            None => delete(s, &mut plan.actions, i, DeleteReason::Update),
        }
    }
}

/// The in-place plan for an old Pod of an InPlaceIfPossible set, when the change allows one and the
/// Pod carries the `InPlaceUpdateReady` gate; `None` means recreate.
fn in_place_plan(s: &Snapshot<'_>, i: usize) -> Option<InPlacePlan> {
    if !s.in_place() {
        return None;
    }
    let pod = &s.pods[i];
    if !inplace::has_readiness_gate(pod) || pre_deleting(pod) {
        return None;
    }
    let old = s.revision_of(pod)?;
    let opts = PlanOptions {
        resize: s.resize,
        env_from_metadata: s.env_from_metadata,
    };
    match inplace::plan(old.template, s.update.template, pod, &opts) {
        inplace::Plan::InPlace(in_place) => Some(in_place),
        _ => None,
    }
}

fn update_with_surge(
    s: &Snapshot<'_>,
    by_node: &BTreeMap<&str, Vec<usize>>,
    candidates: &[&str],
    max_surge: usize,
    burst: usize,
    min_ready: i32,
    plan: &mut Plan,
) {
    let mut surging = 0usize;
    let mut allowed: Vec<&str> = Vec::new();
    let mut candidate_nodes: Vec<&str> = Vec::new();
    let mut old_to_delete: Vec<usize> = Vec::new();
    for &node in candidates {
        let list = &by_node[node];
        let Some((new, old)) = updated_and_old(s, list) else {
            surging += 1;
            continue;
        };
        match (new, old) {
            (_, None) => {}
            (None, Some(old)) => {
                if !available(s, old, min_ready, plan) {
                    allowed.push(node);
                } else if surging < max_surge {
                    candidate_nodes.push(node);
                }
            }
            (Some(new), Some(old)) => {
                if !available(s, new, min_ready, plan) {
                    surging += 1;
                } else if !(pre_deleting(&s.pods[old])
                    && lifecycle::is_hooked(s.pre_delete(), &s.pods[old]))
                {
                    old_to_delete.push(old);
                } else {
                    // The old Pod is held by its hook: the node still runs two Pods.
                    surging += 1;
                }
            }
        }
    }
    // A node whose old Pod goes now still runs two Pods until the deletion shows: it counts, so that
    // no more than maxSurge nodes ever run two Pods at once.
    let room = max_surge
        .saturating_sub(surging + old_to_delete.len())
        .min(candidate_nodes.len());
    allowed.extend(&candidate_nodes[..room]);
    allowed.truncate(burst);
    old_to_delete.truncate(burst);
    for node in allowed {
        plan.actions.push(Action::Create {
            node: node.to_owned(),
        });
    }
    for i in old_to_delete {
        delete(s, &mut plan.actions, i, DeleteReason::Update);
    }
}

/// The status counters (desired, current, ready, available, updated, misscheduled), per node that
/// should run the daemon, from its oldest Pod.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub desired: i32,
    pub current: i32,
    pub misscheduled: i32,
    pub ready: i32,
    pub available: i32,
    pub unavailable: i32,
    /// With a rollout selector: only the selected nodes.
    pub updated: i32,
    /// Nodes that should run the daemon and that the rollout selector matches (all without one).
    pub selected: i32,
}

/// Counts the status (upstream `updateDaemonSetStatus`): for each node that should run the daemon,
/// its oldest Pod decides ready/available/updated; a node with a Pod that should not run one is
/// misscheduled. With a rollout selector, `updated` counts only the nodes it matches (kruise-rs: so
/// a canary rollout's progress reads "k of n selected nodes updated").
pub fn counts(s: &Snapshot<'_>) -> Counts {
    let min_ready = s.spec.min_ready_seconds.max(0);
    let by_node = pods_by_node(s.pods);
    let selector = s.rolling().and_then(|r| r.selector.as_ref());
    let mut c = Counts::default();
    for node in s.nodes {
        let list: Vec<usize> = by_node
            .get(node.name)
            .map(|l| {
                l.iter()
                    .copied()
                    .filter(|&i| !pods::is_terminating(&s.pods[i]))
                    .collect()
            })
            .unwrap_or_default();
        if !node.should_run {
            if !list.is_empty() {
                c.misscheduled += 1;
            }
            continue;
        }
        c.desired += 1;
        let selected = selector_allows(selector, node.labels).unwrap_or(true);
        if selected {
            c.selected += 1;
        }
        let Some(&oldest) = list.first() else {
            continue;
        };
        c.current += 1;
        let pod = &s.pods[oldest];
        if pods::is_ready(pod) {
            c.ready += 1;
            if is_daemon_pod_available(pod, min_ready, s.now) {
                c.available += 1;
            }
        }
        if selected && s.is_updated(pod) {
            c.updated += 1;
        }
    }
    c.unavailable = c.desired - c.available;
    c
}

#[cfg(test)]
mod tests;
