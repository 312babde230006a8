//! What one CloneSet sync does, decided from a snapshot: the scale step (regret, create, delete,
//! scale in, as upstream's `Scale` in `pkg/controller/cloneset/sync/cloneset_scale.go`) and the update
//! step (refresh fixes, then in-place or recreate updates, as upstream's `Update` in
//! `cloneset_update.go`). Pure: the controller gathers the snapshot, calls [`scale_step`] and, when
//! scaling has nothing to do, [`update_step`], and carries the result out; `rollout::preview` steps the
//! same two functions to preview a whole rollout.

use std::collections::{BTreeMap, BTreeSet};

use crate::inplace::{self, Completion, InPlacePlan, PlanOptions};
use crate::lifecycle;
use crate::pods::{self, LifecycleState};
use crate::revision::{LABEL_POD_TEMPLATE_HASH, pod_label_matches_revision, short_hash};
use crate::rollout::InvalidSetting;
pub use crate::rollout::Revision;
use crate::rollout::cloneset::{
    self as arith, DiffOptions, FactsContext, Gates, Limits, Purpose, RolloutKnobs,
};
use crate::rollout::ordering::{self, Ranker};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kruise_api::cloneset::LABEL_SCALING_EXCLUDE_PREPARING_DELETE;
use kruise_api::cloneset::v1beta1::{
    CloneSet, POD_UPDATE_IN_PLACE_IF_POSSIBLE, POD_UPDATE_IN_PLACE_ONLY,
};
use kruise_api::keys;

/// Process-wide switches.
#[derive(Clone, Copy, Debug, Default)]
pub struct Settings {
    /// `--cloneset-scaling-exclude-preparing-delete`.
    pub exclude_preparing_delete: bool,
    /// Resize cpu/memory in place through `pods/resize`.
    pub resize: bool,
    /// Restart the containers whose env reads a changed label/annotation, in place through
    /// kruise-daemon (gate `InPlaceUpdateEnvFromMetadata`).
    pub env_from_metadata: bool,
    pub gates: Gates,
}

/// Everything one sync decides on.
pub struct Snapshot<'a> {
    pub cs: &'a CloneSet,
    /// The CloneSet's active Pods (not finished, not being deleted).
    pub pods: &'a [Pod],
    pub current: Revision<'a>,
    pub update: Revision<'a>,
    /// Every revision of the CloneSet, for the template a Pod was created from.
    pub revisions: &'a [Revision<'a>],
    /// The volumeClaimTemplates hash each revision records, by revision name
    /// (`kruise_core::revision::ANNOTATION_VCT_HASH`; revisions without one are absent).
    pub vct_hashes: &'a BTreeMap<String, String>,
    /// Labels of the nodes the Pods run on; needed only with topologySpreadConstraints.
    pub node_labels: &'a BTreeMap<String, BTreeMap<String, String>>,
    pub now: Timestamp,
    pub settings: Settings,
}

impl Snapshot<'_> {
    fn revision_of(&self, pod: &Pod) -> Option<&Revision<'_>> {
        let label = pods::revision_of(pod)?;
        self.revisions
            .iter()
            .find(|r| pod_label_matches_revision(label, r.name))
    }
}

/// The scale step of a sync. Only one kind of change is made per sync.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScaleStep {
    /// Nothing to scale: go on to the update.
    None,
    /// Move these PreparingDelete Pods back to PreparingNormal (the set is short of Pods).
    Regret(Vec<usize>),
    /// Create Pods: `from_current` at the current revision first, then `from_update`. `limited` is
    /// the scaleStrategy.maxUnavailable limit when it held creations back.
    Create {
        from_current: usize,
        from_update: usize,
        limited: Option<i64>,
    },
    /// Delete `delete` (with their PVCs); move `prepare` to PreparingDelete because a preDelete hook
    /// holds them.
    Delete {
        delete: Vec<usize>,
        prepare: Vec<usize>,
    },
}

fn knobs(cs: &CloneSet) -> RolloutKnobs<'_> {
    RolloutKnobs::from_spec(&cs.spec)
}

fn exclude_preparing_delete(cs: &CloneSet, settings: &Settings) -> bool {
    settings.exclude_preparing_delete
        || cs.spec.scale_strategy.exclude_preparing_delete
        || cs
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_SCALING_EXCLUDE_PREPARING_DELETE))
            .is_some_and(|v| v == "true")
}

fn diff_options(s: &Snapshot<'_>) -> DiffOptions {
    DiffOptions {
        exclude_preparing_delete: exclude_preparing_delete(s.cs, &s.settings),
        allow_rollback: s.settings.gates.partition_rollback
            && !pod_label_matches_revision(s.current.name, s.update.name),
    }
}

/// Splits Pods chosen for deletion into those to delete and those a preDelete hook holds.
fn deletions(s: &Snapshot<'_>, chosen: &[usize]) -> ScaleStep {
    let hook =
        s.cs.spec
            .lifecycle
            .as_ref()
            .and_then(|l| l.pre_delete.as_ref());
    let (mut delete, mut prepare) = (Vec::new(), Vec::new());
    for &i in chosen {
        let pod = &s.pods[i];
        if lifecycle::is_hooked(hook, pod) {
            if pods::lifecycle_state(pod) != LifecycleState::PreparingDelete {
                prepare.push(i);
            }
        } else {
            delete.push(i);
        }
    }
    if delete.is_empty() && prepare.is_empty() {
        ScaleStep::None
    } else {
        ScaleStep::Delete { delete, prepare }
    }
}

/// The scale step (upstream `Scale`), in upstream's order: regret PreparingDelete Pods when short;
/// create; delete Pods already in PreparingDelete; delete specified Pods; scale in.
pub fn scale_step(s: &Snapshot<'_>) -> Result<ScaleStep, InvalidSetting> {
    let cs = s.cs;
    let pods_to_delete = &cs.spec.scale_strategy.pods_to_delete;
    let specified: Vec<usize> = (0..s.pods.len())
        .filter(|&i| arith::is_specified_delete(&s.pods[i], pods_to_delete))
        .collect();
    let pre_delete: Vec<usize> = (0..s.pods.len())
        .filter(|&i| pods::lifecycle_state(&s.pods[i]) == LifecycleState::PreparingDelete)
        .collect();
    let planned: BTreeSet<usize> = specified.iter().chain(&pre_delete).copied().collect();
    let replicas = i64::from(cs.spec.replicas.unwrap_or(1));

    // 1. A set that is short of Pods takes back Pods it was preparing to delete, unless a hook
    //    marked them NotReady (upstream forbids regret then).
    if !lifecycle::marks_pod_not_ready(cs.spec.lifecycle.as_ref()) {
        let mut short = replicas - s.pods.len() as i64 + planned.len() as i64;
        let mut regret = Vec::new();
        for &i in &pre_delete {
            if short <= 0 {
                break;
            }
            if !specified.contains(&i) {
                regret.push(i);
                short -= 1;
            }
        }
        if !regret.is_empty() {
            return Ok(ScaleStep::Regret(regret));
        }
    }

    // 2. Scale out.
    let mut limits = Limits::resolve(&knobs(cs))?;
    if metadata_only_in_place(s) {
        // Surge Pods exist to keep capacity while old Pods restart; a labels/annotations-only
        // change restarts nothing, so surging would only churn Pods (kruise#2369).
        limits.max_surge = 0;
    }
    let ctx = FactsContext {
        update_revision: s.update.name,
        pods_to_delete,
        min_ready_seconds: cs.spec.min_ready_seconds,
        now: s.now,
        purpose: Purpose::Scale,
        preparing_update_as_update: s.settings.gates.preparing_update_as_update,
    };
    let facts: Vec<_> = s.pods.iter().map(|p| arith::pod_facts(p, &ctx)).collect();
    let diffs = arith::calculate_diffs(&limits, &facts, diff_options(s));
    if diffs.scale_up_num > 0 {
        let creations = usize::try_from(diffs.scale_up_limit).unwrap_or(0);
        let from_current = usize::try_from(diffs.scale_up_num_old_revision)
            .unwrap_or(0)
            .min(creations);
        return Ok(ScaleStep::Create {
            from_current,
            from_update: creations - from_current,
            limited: (diffs.scale_up_num > diffs.scale_up_limit).then_some(diffs.scale_up_limit),
        });
    }

    // 3. Pods already in PreparingDelete whose hook is gone.
    if !pre_delete.is_empty() {
        let mut pre_delete = pre_delete.clone();
        ordering::sort_deletions(s.pods, &mut pre_delete);
        let step = deletions(s, &pre_delete);
        if step != ScaleStep::None {
            return Ok(step);
        }
    }

    // 4. Specified Pods: unready ones always (first), ready ones within the unavailability budget.
    let mut specified_only: Vec<usize> = specified
        .iter()
        .copied()
        .filter(|i| !pre_delete.contains(i))
        .collect();
    ordering::sort_deletions(s.pods, &mut specified_only);
    let specified_only =
        arith::within_ready_budget(specified_only, diffs.delete_ready_limit, |i| {
            pods::is_update_ready(&s.pods[i], 0, s.now)
        });
    if !specified_only.is_empty() {
        let step = deletions(s, &specified_only);
        if step != ScaleStep::None {
            return Ok(step);
        }
    }

    // 5. Scale in, unless deletions are already planned.
    if diffs.scale_down_num > 0 && planned.is_empty() {
        let updated: Vec<bool> = facts.iter().map(|f| f.updated).collect();
        let spread_keys: Vec<String> = cs
            .spec
            .template
            .spec
            .as_ref()
            .and_then(|spec| spec.topology_spread_constraints.as_ref())
            .map(|c| c.iter().map(|c| c.topology_key.clone()).collect())
            .unwrap_or_default();
        let node_labels = |node: &str| s.node_labels.get(node);
        let ranker = if spread_keys.is_empty() {
            Ranker::SameNode
        } else {
            Ranker::Spread {
                topology_keys: &spread_keys,
                node_labels: &node_labels,
            }
        };
        let chosen = arith::choose_scale_in(
            s.pods,
            &updated,
            &diffs,
            cs.spec.min_ready_seconds,
            s.now,
            &ranker,
        );
        return Ok(deletions(s, &chosen));
    }
    Ok(ScaleStep::None)
}

/// The update changes only Pod labels/annotations and the policy applies it in place, so no
/// container restarts and no capacity is lost.
fn metadata_only_in_place(s: &Snapshot<'_>) -> bool {
    if !updates_in_place(s.cs) || pod_label_matches_revision(s.current.name, s.update.name) {
        return false;
    }
    let opts = PlanOptions {
        resize: s.settings.resize,
        env_from_metadata: s.settings.env_from_metadata,
    };
    let old_pods: Vec<&Pod> = s
        .pods
        .iter()
        .filter(|p| !pods::is_at_revision(p, s.update.name))
        .collect();
    !old_pods.is_empty()
        && old_pods.iter().all(|pod| {
            let Some(old) = s.revision_of(pod) else {
                return false;
            };
            matches!(
                inplace::plan(old.template, s.update.template, pod, &opts),
                inplace::Plan::InPlace(p)
                    if p.images.is_empty() && p.resources.is_empty() && !p.restarts_containers
            )
        })
}

/// Whether `RecreatePodWhenChangeVCTInCloneSetGate` recreates a Pod of revision `old` updated to
/// `new`: the gate is on, the policy is not InPlaceOnly (upstream ignores the templates there), and
/// the two revisions recorded different volumeClaimTemplates.
fn vct_change_recreates(s: &Snapshot<'_>, policy: &str, old: &str, new: &str) -> bool {
    s.settings.gates.recreate_on_vct_change
        && policy != POD_UPDATE_IN_PLACE_ONLY
        && !crate::revision::vct_hashes_allow_in_place(
            s.vct_hashes.get(old).map(String::as_str),
            s.vct_hashes.get(new).map(String::as_str),
        )
}

/// A small correction to one Pod, made before any update (upstream's refresh).
#[derive(Clone, Debug, PartialEq)]
pub enum Fix {
    /// The in-place update is complete: set `InPlaceUpdateReady=True` and, in the same write, move
    /// the Pod to this lifecycle state (the refresh's lifecycle move of the same Pod).
    InPlaceReady(usize, Option<LifecycleState>),
    /// Start the next batch of containers held back by container launch priority.
    InPlaceNextBatch(usize),
    /// Move the Pod to this lifecycle state.
    Lifecycle(usize, LifecycleState),
    /// Add the missing `pod-template-hash` label.
    TemplateHash(usize, String),
}

/// What to do to one Pod chosen for update.
#[derive(Clone, Debug, PartialEq)]
pub enum UpdateAction {
    /// Move the Pod to PreparingUpdate so the inPlaceUpdate hook's owner can act first;
    /// `readd_hook` puts the hook's labels and finalizers back (a Pod updated before).
    PrepareUpdate {
        pod: usize,
        mark_not_ready: bool,
        readd_hook: bool,
    },
    /// Update in place (drain, wait, resize, patch: [`inplace::next_step`]).
    InPlace { pod: usize, plan: InPlacePlan },
    /// Mark the Pod for deletion; the scale step replaces it.
    Recreate {
        pod: usize,
        /// Why the Pod is not updated in place, when the policy asked for in place
        /// (InPlaceIfPossible): said in a `RecreatePodNotInPlace` Event.
        not_in_place: Option<String>,
    },
    /// InPlaceOnly and the change cannot be made in place.
    Refuse { pod: usize, message: String },
}

/// The update step: refresh fixes and, unless there are any, the Pods to update.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UpdateStep {
    pub fixes: Vec<Fix>,
    pub actions: Vec<UpdateAction>,
    /// The revision the actions move Pods to.
    pub target: String,
}

/// The policy tries in-place updates (InPlaceIfPossible or InPlaceOnly).
fn updates_in_place(cs: &CloneSet) -> bool {
    matches!(
        update_policy(cs),
        POD_UPDATE_IN_PLACE_IF_POSSIBLE | POD_UPDATE_IN_PLACE_ONLY
    )
}

fn update_policy(cs: &CloneSet) -> &str {
    cs.spec
        .update_strategy
        .rolling_update
        .as_ref()
        .map_or("", |r| r.pod_update_policy.as_str())
}

/// The update step (upstream `Update`): first the refresh fixes of every Pod not being updated
/// now; when there are none, the actions for the Pods [`arith::plan_update`] chose, in order.
///
/// A Pod chosen for an in-place update is left out of the refresh: while its traffic drains its
/// `InPlaceUpdateReady` is False on purpose and must not be flipped back.
pub fn update_step(s: &Snapshot<'_>) -> Result<UpdateStep, InvalidSetting> {
    let cs = s.cs;
    let plan = arith::plan_update(
        &cs.spec,
        s.pods,
        s.current.name,
        s.update.name,
        s.settings.gates,
        s.now,
    )?;
    let target = if plan.target_revision.is_empty() || plan.target_revision == s.update.name {
        s.update
    } else {
        s.current
    };
    let policy = update_policy(cs);
    let in_place_policy = updates_in_place(cs);
    let opts = PlanOptions {
        resize: s.settings.resize,
        env_from_metadata: s.settings.env_from_metadata,
    };
    let hook = cs
        .spec
        .lifecycle
        .as_ref()
        .and_then(|l| l.in_place_update.as_ref());

    let mut actions = Vec::new();
    for &i in &plan.pods {
        let pod = &s.pods[i];
        let in_place = if in_place_policy {
            s.revision_of(pod).map(|old| {
                if vct_change_recreates(s, policy, old.name, target.name) {
                    inplace::Plan::NotInPlace(inplace::NotInPlace::VolumeClaimTemplatesChanged)
                } else {
                    inplace::plan(old.template, target.template, pod, &opts)
                }
            })
        } else {
            None
        };
        match in_place {
            Some(inplace::Plan::InPlace(plan)) => {
                let action = match pods::lifecycle_state(pod) {
                    LifecycleState::Unset
                    | LifecycleState::PreparingNormal
                    | LifecycleState::Normal
                        if lifecycle::is_hooked(hook, pod) =>
                    {
                        Some(UpdateAction::PrepareUpdate {
                            pod: i,
                            mark_not_ready: hook.is_some_and(|h| h.mark_pod_not_ready),
                            readd_hook: false,
                        })
                    }
                    LifecycleState::Updated => hook.map(|h| UpdateAction::PrepareUpdate {
                        pod: i,
                        mark_not_ready: h.mark_pod_not_ready,
                        readd_hook: true,
                    }),
                    LifecycleState::PreparingUpdate if lifecycle::is_hooked(hook, pod) => None,
                    LifecycleState::PreparingDelete | LifecycleState::Unknown => None,
                    _ => Some(UpdateAction::InPlace { pod: i, plan }),
                };
                actions.extend(action);
            }
            Some(inplace::Plan::NotInPlace(reason)) if policy == POD_UPDATE_IN_PLACE_ONLY => {
                actions.push(UpdateAction::Refuse {
                    pod: i,
                    message: format!(
                        "find Pod {} update strategy is InPlaceOnly but can not update in-place: {reason}",
                        pod.metadata.name.as_deref().unwrap_or_default()
                    ),
                });
            }
            None if policy == POD_UPDATE_IN_PLACE_ONLY => {
                actions.push(UpdateAction::Refuse {
                    pod: i,
                    message: format!(
                        "find Pod {} update strategy is InPlaceOnly but can not update in-place: its revision {} is gone",
                        pod.metadata.name.as_deref().unwrap_or_default(),
                        pods::revision_of(pod).unwrap_or_default()
                    ),
                });
            }
            Some(inplace::Plan::NotInPlace(reason)) => actions.push(UpdateAction::Recreate {
                pod: i,
                not_in_place: Some(reason.to_string()),
            }),
            _ => actions.push(UpdateAction::Recreate {
                pod: i,
                not_in_place: None,
            }),
        }
    }

    let draining: BTreeSet<usize> = actions
        .iter()
        .filter_map(|a| match a {
            UpdateAction::InPlace { pod, .. } => Some(*pod),
            _ => None,
        })
        .collect();
    let fixes = refresh(s, &draining);
    Ok(UpdateStep {
        fixes,
        actions,
        target: target.name.to_owned(),
    })
}

/// The refresh fixes of every Pod except `skip`.
fn refresh(s: &Snapshot<'_>, skip: &BTreeSet<usize>) -> Vec<Fix> {
    let lifecycle = s.cs.spec.lifecycle.as_ref();
    let mut fixes = Vec::new();
    for (i, pod) in s.pods.iter().enumerate() {
        if skip.contains(&i) {
            continue;
        }
        let completed = inplace::check_completed(pod) == Completion::Done;
        // The gate is injected at creation with no condition: the first refresh sets it True.
        let gate_true = pods::condition(pod, keys::CONDITION_IN_PLACE_UPDATE_READY)
            .is_some_and(|c| c.status == "True");
        if inplace::next_batch_due(pod) {
            fixes.push(Fix::InPlaceNextBatch(i));
        }
        let at_update = pods::is_at_revision(pod, s.update.name);
        let state = lifecycle::refresh_transition(lifecycle, pod, at_update, completed);
        if completed && !gate_true && inplace::has_readiness_gate(pod) {
            fixes.push(Fix::InPlaceReady(i, state));
        } else if let Some(state) = state {
            fixes.push(Fix::Lifecycle(i, state));
        }
        if pods::label(pod, LABEL_POD_TEMPLATE_HASH).is_none()
            && let Some(revision) = pods::revision_of(pod)
        {
            fixes.push(Fix::TemplateHash(i, short_hash(revision).to_owned()));
        }
    }
    fixes
}

#[cfg(test)]
mod tests;
