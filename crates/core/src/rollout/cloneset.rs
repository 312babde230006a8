//! CloneSet's scale and update arithmetic (upstream `calculateDiffsWithExpectation` in
//! `pkg/controller/cloneset/sync/cloneset_sync_utils.go`) and the update and scale-in choices built on
//! it (`cloneset_update.go`, `cloneset_scale.go`). [`decide`] is the whole sync built on them.
//!
//! The arithmetic works on [`PodFacts`], four booleans per Pod, so it can be tested exhaustively
//! without building Pods; [`pod_facts`] derives them from real Pods.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kruise_api::cloneset::v1beta1::{
    CloneSetSpec, DEFAULT_MAX_UNAVAILABLE, RollingUpdateCloneSetStrategy, UPDATE_ON_DELETE,
};
use kruise_api::intstr::{IntOrPercent, Round};

// The shared error type, also reachable here for the callers that import it with the arithmetic.
use super::InvalidSetting;
use super::ordering::{self, Ranker};
use crate::pods::{self, LifecycleState};

const FIELD_PARTITION: &str = "spec.updateStrategy.rollingUpdate.partition";
const FIELD_MAX_SURGE: &str = "spec.updateStrategy.rollingUpdate.maxSurge";
const FIELD_MAX_UNAVAILABLE: &str = "spec.updateStrategy.rollingUpdate.maxUnavailable";
const FIELD_SCALE_MAX_UNAVAILABLE: &str = "spec.scaleStrategy.maxUnavailable";

fn parse(value: &IntOrString, field: &'static str) -> Result<IntOrPercent, InvalidSetting> {
    IntOrPercent::parse(value).map_err(|message| InvalidSetting { field, message })
}

/// The number of Pods a partition keeps at old revisions (`CalculatePartitionReplicas`): percentages
/// round up (so "10%" of 3 keeps one old Pod), but a percentage below 100% never keeps every Pod when
/// there is more than one, so at least one Pod is updated (upstream #926); clamped to [0, replicas].
pub fn partition_replicas(
    partition: Option<&IntOrString>,
    replicas: i32,
) -> Result<i32, InvalidSetting> {
    let Some(partition) = partition else {
        return Ok(0);
    };
    let parsed = parse(partition, FIELD_PARTITION)?;
    let mut value = parsed.scaled(replicas, Round::Up);
    if replicas > 1 && value == replicas && matches!(parsed, IntOrPercent::Percent(p) if p != 100) {
        value = replicas - 1;
    }
    Ok(value.clamp(0, replicas.max(0)))
}

/// The rollout knobs of a CloneSet, as written (before rounding).
#[derive(Clone, Copy, Debug, Default)]
pub struct RolloutKnobs<'a> {
    /// `spec.replicas` (1 when unset).
    pub replicas: i32,
    /// `spec.updateStrategy.rollingUpdate` is set; when it is not, the default maxUnavailable (20%)
    /// rounds down, as upstream does.
    pub rolling_update: bool,
    pub partition: Option<&'a IntOrString>,
    pub max_unavailable: Option<&'a IntOrString>,
    pub max_surge: Option<&'a IntOrString>,
    pub paused: bool,
    /// `spec.scaleStrategy.maxUnavailable`.
    pub scale_max_unavailable: Option<&'a IntOrString>,
}

impl<'a> RolloutKnobs<'a> {
    pub fn from_spec(spec: &'a CloneSetSpec) -> Self {
        let rolling: Option<&RollingUpdateCloneSetStrategy> =
            spec.update_strategy.rolling_update.as_ref();
        Self {
            replicas: spec.replicas.unwrap_or(1),
            rolling_update: rolling.is_some(),
            partition: rolling.and_then(|r| r.partition.as_ref()),
            max_unavailable: rolling.and_then(|r| r.max_unavailable.as_ref()),
            max_surge: rolling.and_then(|r| r.max_surge.as_ref()),
            paused: rolling.is_some_and(|r| r.paused),
            scale_max_unavailable: spec.scale_strategy.max_unavailable.as_ref(),
        }
    }
}

/// The knobs turned into Pod counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub replicas: i64,
    pub partition: i64,
    /// 0 while paused: a paused CloneSet must not create surge Pods it will not update.
    pub max_surge: i64,
    pub max_unavailable: i64,
    /// Unlimited (i32::MAX) when unset.
    pub scale_max_unavailable: i64,
}

impl Limits {
    /// Rounds the knobs: maxSurge rounds up; maxUnavailable rounds up when maxSurge is 0 and down when
    /// it is positive (so surge and unavailability together stay within the percentage), and down when
    /// there is no rollingUpdate at all; scaleStrategy.maxUnavailable rounds up.
    pub fn resolve(knobs: &RolloutKnobs<'_>) -> Result<Self, InvalidSetting> {
        let replicas = knobs.replicas;
        let partition = partition_replicas(knobs.partition, replicas)?;
        let mut max_surge = match knobs.max_surge {
            Some(v) => parse(v, FIELD_MAX_SURGE)?.scaled(replicas, Round::Up),
            None => 0,
        };
        if knobs.paused {
            max_surge = 0;
        }
        let default_unavailable = IntOrString::String(DEFAULT_MAX_UNAVAILABLE.to_string());
        let round = if knobs.rolling_update && max_surge == 0 {
            Round::Up
        } else {
            Round::Down
        };
        let max_unavailable = parse(
            knobs.max_unavailable.unwrap_or(&default_unavailable),
            FIELD_MAX_UNAVAILABLE,
        )?
        .scaled(replicas, round);
        let scale_max_unavailable = match knobs.scale_max_unavailable {
            Some(v) => parse(v, FIELD_SCALE_MAX_UNAVAILABLE)?.scaled(replicas, Round::Up),
            None => i32::MAX,
        };
        Ok(Self {
            replicas: replicas.into(),
            partition: partition.into(),
            max_surge: max_surge.into(),
            max_unavailable: max_unavailable.into(),
            scale_max_unavailable: scale_max_unavailable.into(),
        })
    }
}

/// What the arithmetic needs to know about one Pod.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PodFacts {
    /// At the update revision (see [`Purpose`]).
    pub updated: bool,
    /// In the PreparingDelete lifecycle state: on its way out, not counted as active.
    pub preparing_delete: bool,
    /// Specified for deletion (label or `scaleStrategy.podsToDelete`).
    pub specified_delete: bool,
    /// [`pods::is_available`] with the CloneSet's minReadySeconds.
    pub available: bool,
}

/// Why the numbers are computed. With the `PreparingUpdateAsUpdate` gate a Pod in PreparingUpdate
/// counts as updated when scaling (it is about to be), but as not yet updated when updating (it still
/// needs the update).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    Scale,
    Update,
}

/// The snapshot-wide inputs of [`pod_facts`].
#[derive(Clone, Copy, Debug)]
pub struct FactsContext<'a> {
    pub update_revision: &'a str,
    /// `spec.scaleStrategy.podsToDelete`.
    pub pods_to_delete: &'a [String],
    pub min_ready_seconds: i32,
    pub now: Timestamp,
    pub purpose: Purpose,
    /// The `PreparingUpdateAsUpdate` feature gate (off by default).
    pub preparing_update_as_update: bool,
}

/// Specified for deletion by label or by name in `podsToDelete`.
pub fn is_specified_delete(pod: &Pod, pods_to_delete: &[String]) -> bool {
    pods::is_specified_delete(pod)
        || pod
            .metadata
            .name
            .as_ref()
            .is_some_and(|name| pods_to_delete.contains(name))
}

/// Whether the Pod counts as at the update revision for `purpose`.
pub fn counts_as_updated(pod: &Pod, ctx: &FactsContext<'_>) -> bool {
    (ctx.purpose == Purpose::Scale
        && ctx.preparing_update_as_update
        && pods::lifecycle_state(pod) == LifecycleState::PreparingUpdate)
        || pods::is_at_revision(pod, ctx.update_revision)
}

/// The facts of one Pod.
pub fn pod_facts(pod: &Pod, ctx: &FactsContext<'_>) -> PodFacts {
    PodFacts {
        updated: counts_as_updated(pod, ctx),
        preparing_delete: pods::lifecycle_state(pod) == LifecycleState::PreparingDelete,
        specified_delete: is_specified_delete(pod, ctx.pods_to_delete),
        available: pods::is_available(pod, ctx.min_ready_seconds, ctx.now),
    }
}

/// Switches of the arithmetic that are not part of the spec.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiffOptions {
    /// Do not count PreparingDelete Pods when scaling (`scaleStrategy.excludePreparingDelete` or the
    /// `--cloneset-scaling-exclude-preparing-delete` flag).
    pub exclude_preparing_delete: bool,
    /// Raising the partition rolls Pods back to the current revision: the `CloneSetPartitionRollback`
    /// gate is on and the current and update revisions differ.
    pub allow_rollback: bool,
}

/// The expected numbers of one sync. Scale and update never both act in one pass: the controller
/// scales when a scale number is non-zero, else updates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Diffs {
    /// Pods to create.
    pub scale_up_num: i64,
    /// Of those, how many from the current (old) revision; may exceed `scale_up_num`, which wins.
    pub scale_up_num_old_revision: i64,
    /// Pods to delete by scale-in, not counting Pods already specified for deletion.
    pub scale_down_num: i64,
    /// Of those, how many from old revisions; may exceed `scale_down_num`, which wins.
    pub scale_down_num_old_revision: i64,
    /// Pods that may actually be created now (`scaleStrategy.maxUnavailable`).
    pub scale_up_limit: i64,
    /// Ready Pods that may be deleted now (unready ones always may); set only when something is to
    /// be deleted.
    pub delete_ready_limit: i64,
    /// Pods temporarily above replicas.
    pub use_surge: i64,
    /// The part of `use_surge` kept at old revisions.
    pub use_surge_old_revision: i64,
    /// Pods to update: positive towards the update revision, negative back to the current revision.
    pub update_num: i64,
    /// Most Pods unavailable during the update (maxUnavailable plus the Pods above replicas); set only
    /// when `update_num` is non-zero.
    pub update_max_unavailable: i64,
}

#[derive(Default)]
struct Counts {
    total: i64,
    old: i64,
    old_active: i64,
    new_active: i64,
    pre_deleting_old: i64,
    pre_deleting_new: i64,
    to_delete_old: i64,
    to_delete_new: i64,
    unavailable: i64,
}

fn count(facts: &[PodFacts]) -> Counts {
    let mut c = Counts::default();
    for f in facts {
        c.total += 1;
        if !f.updated {
            c.old += 1;
        }
        if f.preparing_delete {
            if f.updated {
                c.pre_deleting_new += 1;
            } else {
                c.pre_deleting_old += 1;
            }
            continue;
        }
        if f.updated {
            c.new_active += 1;
        } else {
            c.old_active += 1;
        }
        // A Pod specified for deletion is counted there, not also as unavailable: it is leaving.
        if f.specified_delete {
            if f.updated {
                c.to_delete_new += 1;
            } else {
                c.to_delete_old += 1;
            }
        } else if !f.available {
            c.unavailable += 1;
        }
    }
    c
}

/// The scale and update numbers for a snapshot (`calculateDiffsWithExpectation`).
pub fn calculate_diffs(limits: &Limits, facts: &[PodFacts], options: DiffOptions) -> Diffs {
    let Limits {
        replicas,
        partition,
        max_surge,
        max_unavailable,
        scale_max_unavailable,
    } = *limits;
    let c = count(facts);
    let mut res = Diffs::default();

    let mut update_old_diff = c.old_active - partition;
    let mut update_new_diff = c.new_active - (replicas - partition);
    if !options.allow_rollback {
        update_old_diff = update_old_diff.max(0);
        update_new_diff = update_new_diff.min(0);
    }
    let total_unavailable = c.pre_deleting_old + c.pre_deleting_new + c.unavailable;

    if max_surge > 0 {
        // Surge to replace specified Pods whose deletion maxUnavailable would otherwise block.
        let to_delete = c.to_delete_old + c.to_delete_new;
        let (mut scale_surge, mut scale_surge_old) = (0, 0);
        if to_delete > 0 {
            scale_surge = (total_unavailable + to_delete - max_unavailable).clamp(0, to_delete);
            scale_surge_old = (scale_surge - c.to_delete_new).max(0);
        }
        // Surge to move Pods between revisions: only when one side has too many and the other too
        // few, by the smaller imbalance.
        let (mut update_surge, mut update_surge_old) = (0, 0);
        if (update_old_diff > 0 && update_new_diff < 0)
            || (update_old_diff < 0 && update_new_diff > 0)
        {
            if update_old_diff.abs() <= update_new_diff.abs() {
                update_surge = update_old_diff.abs();
                if update_old_diff < 0 {
                    update_surge_old = update_surge;
                }
            } else {
                update_surge = update_new_diff.abs();
                if update_new_diff > 0 {
                    update_surge_old = update_surge;
                }
            }
        }
        // Scale and update never run in the same pass, so only the larger need is provisioned.
        let (surge, surge_old) = if scale_surge >= update_surge {
            (scale_surge, scale_surge_old)
        } else {
            (update_surge, update_surge_old)
        };
        res.use_surge = max_surge.min(surge);
        res.use_surge_old_revision = res.use_surge.min(surge_old);
    }

    let (mut current_total, mut current_old) = (c.total, c.old);
    if options.exclude_preparing_delete {
        current_total -= c.pre_deleting_old + c.pre_deleting_new;
        current_old -= c.pre_deleting_old;
    }
    let expected_total = replicas + res.use_surge;
    let expected_old = partition + res.use_surge_old_revision;

    let up = expected_total - current_total;
    if up > 0 {
        res.scale_up_num = up;
        res.scale_up_num_old_revision = (expected_old - current_old).max(0);
        res.scale_up_limit = up.min((scale_max_unavailable - total_unavailable).max(0));
    }

    let down = current_total - c.to_delete_old - c.to_delete_new - expected_total;
    if down > 0 {
        res.scale_down_num = down;
        res.scale_down_num_old_revision = (current_old - c.to_delete_old - expected_old).max(0);
    }
    if c.to_delete_old > 0 || c.to_delete_new > 0 || res.scale_down_num > 0 {
        res.delete_ready_limit =
            (max_unavailable + (c.total - replicas) - total_unavailable).max(0);
    }

    res.update_num = if update_old_diff.abs() <= update_new_diff.abs() {
        update_old_diff
    } else {
        -update_new_diff
    };
    if res.update_num != 0 {
        res.update_max_unavailable = max_unavailable + c.total - replicas;
    }
    res
}

/// The Pods that may take part in an update (before ordering and limits): those not at the target —
/// for `update_num > 0` the Pods not at `update_revision`, for `update_num < 0` (rollback) the Pods at
/// it — except Pods in PreparingDelete and Pods still waiting out an in-place grace period. A Pod in
/// `Updated` whose revision is wrong is a candidate again.
pub fn update_candidates(pods: &[Pod], update_revision: &str, update_num: i64) -> Vec<usize> {
    if update_num == 0 {
        return Vec::new();
    }
    pods.iter()
        .enumerate()
        .filter(|(_, pod)| pods::is_at_revision(pod, update_revision) == (update_num < 0))
        .filter(|(_, pod)| match pods::lifecycle_state(pod) {
            LifecycleState::PreparingDelete => false,
            LifecycleState::Updated => true,
            _ => !pods::in_place_update_grace_pending(pod),
        })
        .map(|(i, _)| i)
        .collect()
}

/// Cuts the ordered candidates to |update_num| and to what maxUnavailable allows
/// (`limitUpdateIndexes`). `available[i]` and `at_target[i]` describe every Pod of the set. Walking in
/// order, a Pod is accepted while the unavailable Pods at the target revision plus those accepted stay
/// under `update_max_unavailable`; an available Pod additionally needs the total unavailable count
/// under it, and counts as unavailable once accepted (updating an already unavailable Pod costs
/// nothing).
pub fn limit_updates(
    ordered: &[usize],
    available: &[bool],
    at_target: &[bool],
    diffs: &Diffs,
) -> Vec<usize> {
    let wanted = usize::try_from(diffs.update_num.unsigned_abs()).unwrap_or(usize::MAX);
    let mut unavailable: i64 = 0;
    let mut target_unavailable: i64 = 0;
    for (&avail, &target) in available.iter().zip(at_target) {
        if !avail {
            unavailable += 1;
            if target {
                target_unavailable += 1;
            }
        }
    }
    let mut accepted = Vec::new();
    for &i in ordered.iter().take(wanted) {
        if target_unavailable + accepted.len() as i64 >= diffs.update_max_unavailable {
            break;
        }
        if available.get(i).copied().unwrap_or(false) {
            if unavailable >= diffs.update_max_unavailable {
                break;
            }
            unavailable += 1;
        }
        accepted.push(i);
    }
    accepted
}

/// Feature gates the CloneSet arithmetic reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Gates {
    pub preparing_update_as_update: bool,
    pub partition_rollback: bool,
    /// `CloneSetShortHash`: Pods' `controller-revision-hash` label holds only the hash
    /// (`5d8f7c`), not the revision name (`web-5d8f7c`). Either form is read as the same revision.
    pub short_hash: bool,
    /// `RecreatePodWhenChangeVCTInCloneSetGate`: a Pod whose revision recorded other
    /// volumeClaimTemplates than the update revision is recreated, not updated in place (except with
    /// the InPlaceOnly policy).
    pub recreate_on_vct_change: bool,
}

/// The Pods to update in this pass and the revision they go to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UpdatePlan {
    /// The update revision, or the current revision when rolling back.
    pub target_revision: String,
    /// Indexes into the Pods, in update order.
    pub pods: Vec<usize>,
}

/// The update step of a CloneSet sync: nothing when the strategy is OnDelete or paused; otherwise the
/// candidates in update order, cut by |updateNum| and maxUnavailable. `pods` are the active Pods.
pub fn plan_update(
    spec: &CloneSetSpec,
    pods: &[Pod],
    current_revision: &str,
    update_revision: &str,
    gates: Gates,
    now: Timestamp,
) -> Result<UpdatePlan, InvalidSetting> {
    let knobs = RolloutKnobs::from_spec(spec);
    let limits = Limits::resolve(&knobs)?;
    if spec.update_strategy.type_ == UPDATE_ON_DELETE || knobs.paused {
        return Ok(UpdatePlan::default());
    }
    let ctx = FactsContext {
        update_revision,
        pods_to_delete: &spec.scale_strategy.pods_to_delete,
        min_ready_seconds: spec.min_ready_seconds,
        now,
        purpose: Purpose::Update,
        preparing_update_as_update: gates.preparing_update_as_update,
    };
    let facts: Vec<PodFacts> = pods.iter().map(|p| pod_facts(p, &ctx)).collect();
    let options = DiffOptions {
        exclude_preparing_delete: spec.scale_strategy.exclude_preparing_delete,
        allow_rollback: gates.partition_rollback
            && !crate::revision::pod_label_matches_revision(current_revision, update_revision),
    };
    let diffs = calculate_diffs(&limits, &facts, options);
    if diffs.update_num == 0 {
        return Ok(UpdatePlan::default());
    }
    let target = if diffs.update_num > 0 {
        update_revision
    } else {
        current_revision
    };
    let rolling = spec.update_strategy.rolling_update.as_ref();
    let ordered = ordering::sort_update_indexes(
        pods,
        update_candidates(pods, update_revision, diffs.update_num),
        rolling.and_then(|r| r.priority_strategy.as_ref()),
        rolling.map_or(&[][..], |r| &r.scatter_strategy[..]),
    );
    let available: Vec<bool> = facts.iter().map(|f| f.available).collect();
    let at_target: Vec<bool> = pods
        .iter()
        .map(|p| pods::is_at_revision(p, target))
        .collect();
    Ok(UpdatePlan {
        target_revision: target.to_string(),
        pods: limit_updates(&ordered, &available, &at_target, &diffs),
    })
}

/// The scale-in choice (`choosePodsToDelete` then the ready limit): `scale_down_num_old_revision` Pods
/// from the old revisions first, the rest from the updated ones, each group in
/// [`ordering::scale_down_order`]; then unready Pods always, ready ones (available with
/// minReadySeconds 0) only within `delete_ready_limit`. `updated[i]` says whether Pod i counts as
/// updated for scaling.
pub fn choose_scale_in(
    pods: &[Pod],
    updated: &[bool],
    diffs: &Diffs,
    min_ready_seconds: i32,
    now: Timestamp,
    ranker: &Ranker<'_>,
) -> Vec<usize> {
    let total = usize::try_from(diffs.scale_down_num).unwrap_or(0);
    if total == 0 {
        return Vec::new();
    }
    let old_quota = usize::try_from(diffs.scale_down_num_old_revision)
        .unwrap_or(0)
        .min(total);
    let (new_pods, old_pods): (Vec<usize>, Vec<usize>) =
        (0..pods.len()).partition(|&i| updated.get(i).copied().unwrap_or(false));
    let choose = |group: &[usize], n: usize| -> Vec<usize> {
        if n >= group.len() {
            // All of them go; the order does not matter.
            return group.to_vec();
        }
        let mut order = ordering::scale_down_order(pods, group, min_ready_seconds, now, ranker);
        order.truncate(n);
        order
    };
    let mut chosen = choose(&old_pods, old_quota);
    chosen.extend(choose(&new_pods, total - old_quota));
    within_ready_budget(chosen, diffs.delete_ready_limit, |i| {
        pods::is_available(&pods[i], 0, now)
    })
}

/// Keeps the Pods (indexes, in order) that may be deleted now: every unready one, and ready ones
/// (`ready`) while `budget` lasts (upstream's deleteReadyLimit).
pub fn within_ready_budget(
    mut chosen: Vec<usize>,
    mut budget: i64,
    ready: impl Fn(usize) -> bool,
) -> Vec<usize> {
    chosen.retain(|&i| {
        if !ready(i) {
            true
        } else if budget > 0 {
            budget -= 1;
            true
        } else {
            false
        }
    });
    chosen
}

pub mod decide;

#[cfg(test)]
mod tests;
