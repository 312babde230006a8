//! A whole rollout ahead of time: which Pods the next rollout updates, in which batches, in place or
//! recreated and why, and which stay at their revision.
//!
//! The preview runs the planners the controllers run — CloneSet's [`decide`](super::cloneset::decide),
//! [`statefulset::plan`], [`daemonset::plan`], [`uniteddeployment`]'s allocation and partitions over its
//! subsets' planners, and SidecarSet's [`upgrade::plan_upgrade`] — over a simulated cluster: each
//! step asks the planner what one sync does, carries it out on the simulated Pods (an updated or new
//! Pod is Running, Ready and available at once, a PreparingUpdate hook is released at once), and asks
//! again, until the planner has nothing left to do. Every step in which Pods start their update is a
//! batch. Nothing here waits or talks to the API server.
//!
//! What the simulation assumes: every Pod becomes ready after its update (a Pod that never does stops
//! a real rollout at that batch); a Pod the controller refuses (InPlaceOnly and a change that cannot
//! be made in place) is counted as done, so the preview shows every Pod that would be refused.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::api::core::v1::{Node, Pod, PodCondition, PodStatus, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kruise_api::cloneset::v1beta1::{CloneSet, POD_UPDATE_RECREATE, UPDATE_ON_DELETE};
use kruise_api::daemonset::v1beta1::DaemonSet;
use kruise_api::keys;
use kruise_api::pub_types::LifecycleHook;
use kruise_api::sidecarset::v1beta1::SidecarSet;
use kruise_api::statefulset::v1beta1::{POD_MANAGEMENT_PARALLEL, StatefulSet};
use kruise_api::uniteddeployment::v1beta1::UnitedDeployment;
use serde::Serialize;
use serde_json::Value;

use super::cloneset::decide::{self, ScaleStep, Settings, UpdateAction};
use super::cloneset::{Limits, RolloutKnobs};
use super::uniteddeployment::{self as ud_core, Existing, TemplateKind};
use super::{InvalidSetting, Revision, daemonset, statefulset};
use crate::inplace::{self, InPlacePlan};
use crate::pods::{self, LifecycleState};
use crate::revision::{LABEL_POD_TEMPLATE_HASH, short_hash};
use crate::sidecarset::upgrade;
use crate::{lifecycle, revision};

/// How one Pod is updated.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum Action {
    InPlace,
    Recreate,
    /// The controller refuses to update the Pod (InPlaceOnly and a change that cannot be made in
    /// place, or a sidecar change beyond images).
    Refused,
}

/// One Pod's update.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStep {
    /// 1-based position in the rollout.
    pub order: usize,
    /// 1-based batch: the Pods of one batch start their update in the same sync.
    pub batch: usize,
    pub pod: String,
    /// The UnitedDeployment subset the Pod belongs to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subset: Option<String>,
    pub from_revision: String,
    pub action: Action,
    pub why: String,
}

/// A previewed rollout.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Preview {
    pub update_revision: String,
    pub pod_update_policy: String,
    pub partition: i64,
    pub max_unavailable: i64,
    pub steps: Vec<PodStep>,
    /// Pods left at their old revision when the rollout is done (the partition, a selector).
    pub stay: Vec<String>,
    /// Pods already at the update revision.
    pub updated: Vec<String>,
    /// Why nothing moves now (paused, OnDelete, a subset kind kruise-rs does not roll), if so.
    pub note: Option<String>,
}

impl Preview {
    /// The Pods of each batch, in order.
    pub fn batches(&self) -> Vec<Vec<&str>> {
        let mut out: Vec<Vec<&str>> = Vec::new();
        for step in &self.steps {
            while out.len() < step.batch {
                out.push(Vec::new());
            }
            out[step.batch - 1].push(step.pod.as_str());
        }
        out
    }

    fn push(&mut self, batch: usize, pod: &Pod, action: Action, why: String) {
        self.steps.push(PodStep {
            order: self.steps.len() + 1,
            batch,
            pod: name(pod),
            subset: None,
            from_revision: pods::revision_of(pod).unwrap_or_default().to_owned(),
            action,
            why,
        });
    }
}

/// Why a rollout cannot be previewed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreviewError(pub String);

impl fmt::Display for PreviewError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PreviewError {}

impl From<InvalidSetting> for PreviewError {
    fn from(e: InvalidSetting) -> Self {
        Self(e.to_string())
    }
}

const PAUSED: &str = "the rollout is paused: nothing is updated until `rollout resume`";
const ON_DELETE: &str = "updateStrategy OnDelete: Pods are updated only when deleted";

/// The most syncs a preview steps through per Pod before it gives up (each Pod needs a few: its
/// hook, its update, the refresh of its lifecycle state).
const SYNCS_PER_POD: usize = 8;

fn name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

fn set_label(pod: &mut Pod, key: &str, value: &str) {
    pod.metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(key.to_owned(), value.to_owned());
}

fn set_lifecycle(pod: &mut Pod, state: LifecycleState) {
    set_label(
        pod,
        keys::LABEL_LIFECYCLE_STATE,
        lifecycle::state_value(state).unwrap_or_default(),
    );
}

fn set_condition(pod: &mut Pod, type_: &str, since: Timestamp) {
    let status = pod.status.get_or_insert_with(PodStatus::default);
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    conditions.retain(|c| c.type_ != type_);
    conditions.push(PodCondition {
        type_: type_.to_owned(),
        status: "True".to_owned(),
        last_transition_time: Some(Time(since)),
        ..PodCondition::default()
    });
}

/// The Pod runs and has been Ready long enough for any minReadySeconds; its in-place update, if
/// any, is complete.
fn make_ready(pod: &mut Pod) {
    let since = Timestamp::UNIX_EPOCH;
    if let Some(a) = pod.metadata.annotations.as_mut() {
        a.remove(keys::ANNOTATION_IN_PLACE_UPDATE_STATE);
        a.remove(keys::ANNOTATION_IN_PLACE_UPDATE_GRACE);
    }
    pod.status.get_or_insert_with(PodStatus::default).phase = Some(pods::PHASE_RUNNING.to_owned());
    set_condition(pod, pods::CONDITION_READY, since);
    if inplace::has_readiness_gate(pod) {
        set_condition(pod, keys::CONDITION_IN_PLACE_UPDATE_READY, since);
    }
}

/// The hook's owner has done its part: its labels and finalizers leave the Pod.
fn release_hook(pod: &mut Pod, hook: Option<&LifecycleHook>) {
    let Some(hook) = hook else { return };
    if let Some(labels) = pod.metadata.labels.as_mut() {
        for key in hook.labels_handler.keys() {
            labels.remove(key);
        }
    }
    if let Some(finalizers) = pod.metadata.finalizers.as_mut() {
        finalizers.retain(|f| !hook.finalizers_handler.contains(f));
    }
}

/// The hook's owner has marked the Pod again after its update.
fn restore_hook(pod: &mut Pod, hook: Option<&LifecycleHook>) {
    let Some(hook) = hook else { return };
    for (key, value) in &hook.labels_handler {
        set_label(pod, key, value);
    }
    let finalizers = pod.metadata.finalizers.get_or_insert_with(Vec::new);
    for f in &hook.finalizers_handler {
        if !finalizers.contains(f) {
            finalizers.push(f.clone());
        }
    }
}

/// The Pod after its in-place update to `revision`: new images, labels and annotations, the
/// revision label, lifecycle `Updating` when it has a lifecycle state (the refresh moves it on).
fn update_in_place(pod: &mut Pod, plan: &InPlacePlan, revision: &str) {
    if let Some(spec) = pod.spec.as_mut() {
        for c in spec.containers.iter_mut() {
            if let Some(image) = plan.images.get(&c.name) {
                c.image = Some(image.clone());
            }
        }
    }
    for meta in plan.env_from_metadata.values() {
        for (key, value) in meta.labels.iter().flatten() {
            let labels = pod.metadata.labels.get_or_insert_with(BTreeMap::new);
            labels.insert(key.clone(), value.clone());
        }
        for (key, value) in meta.annotations.iter().flatten() {
            let annotations = pod.metadata.annotations.get_or_insert_with(BTreeMap::new);
            annotations.insert(key.clone(), value.clone());
        }
    }
    for (key, value) in &plan.labels {
        let labels = pod.metadata.labels.get_or_insert_with(BTreeMap::new);
        match value {
            Some(v) => labels.insert(key.clone(), v.clone()),
            None => labels.remove(key),
        };
    }
    for (key, value) in &plan.annotations {
        let annotations = pod.metadata.annotations.get_or_insert_with(BTreeMap::new);
        match value {
            Some(v) => annotations.insert(key.clone(), v.clone()),
            None => annotations.remove(key),
        };
    }
    set_label(pod, keys::LABEL_NATIVE_CONTROLLER_REVISION_HASH, revision);
    set_label(pod, LABEL_POD_TEMPLATE_HASH, short_hash(revision));
    if pods::lifecycle_state(pod) != LifecycleState::Unset {
        set_lifecycle(pod, LifecycleState::Updating);
    }
    make_ready(pod);
}

/// A new Pod `name` from `template` at `revision`, Running and Ready.
fn new_pod(
    name: String,
    namespace: Option<String>,
    template: &PodTemplateSpec,
    revision: &str,
    node: Option<&str>,
) -> Pod {
    let meta = template.metadata.clone().unwrap_or_default();
    let mut pod = Pod {
        metadata: ObjectMeta {
            name: Some(name),
            namespace,
            labels: meta.labels,
            annotations: meta.annotations,
            creation_timestamp: Some(Time(Timestamp::UNIX_EPOCH)),
            ..ObjectMeta::default()
        },
        spec: template.spec.clone(),
        status: None,
    };
    if let (Some(spec), Some(node)) = (pod.spec.as_mut(), node) {
        spec.node_name = Some(node.to_owned());
    }
    set_label(
        &mut pod,
        keys::LABEL_NATIVE_CONTROLLER_REVISION_HASH,
        revision,
    );
    set_label(&mut pod, LABEL_POD_TEMPLATE_HASH, short_hash(revision));
    make_ready(&mut pod);
    pod
}

/// The batches of a preview as its syncs are stepped: a Pod is recorded once, in the batch of the
/// sync that starts its update; a sync that starts none makes no batch.
#[derive(Default)]
struct Recorder {
    batch: usize,
    /// This sync has opened its batch.
    open: bool,
    done: BTreeSet<String>,
}

impl Recorder {
    fn next_sync(&mut self) {
        self.open = false;
    }

    fn recorded(&self, pod: &Pod) -> bool {
        self.done.contains(&name(pod))
    }

    /// Records `pod` in this sync's batch unless it was recorded before.
    fn record(&mut self, out: &mut Preview, pod: &Pod, action: Action, why: String) {
        if self.recorded(pod) {
            return;
        }
        if !self.open {
            self.batch += 1;
            self.open = true;
        }
        out.push(self.batch, pod, action, why);
        self.done.insert(name(pod));
    }

    /// The Pods of `pods` not at `update` and not recorded: those the rollout leaves alone.
    fn stay(&self, pods: &[Pod], update: &str) -> Vec<String> {
        split_by_revision(pods, update)
            .1
            .into_iter()
            .filter(|n| !self.done.contains(n))
            .collect()
    }
}

/// `sim` without the Pods at `gone`, plus `news`: the Pods after one sync's deletions and creations.
fn after_sync(sim: Vec<Pod>, gone: &BTreeSet<usize>, news: Vec<Pod>) -> Vec<Pod> {
    sim.into_iter()
        .enumerate()
        .filter(|(i, _)| !gone.contains(i))
        .map(|(_, p)| p)
        .chain(news)
        .collect()
}

/// What an in-place update changes, for the WHY column.
pub fn describe_in_place(plan: &InPlacePlan) -> String {
    let mut parts: Vec<String> = plan
        .images
        .iter()
        .map(|(c, image)| format!("image {c} → {image}"))
        .collect();
    if !plan.resources.is_empty() {
        let names: Vec<&str> = plan.resources.keys().map(String::as_str).collect();
        parts.push(format!("resize {}", names.join(",")));
    }
    if !plan.env_from_metadata.is_empty() {
        let names: Vec<&str> = plan.env_from_metadata.keys().map(String::as_str).collect();
        parts.push(format!("restart {} (env from metadata)", names.join(",")));
    }
    if !plan.labels.is_empty() || !plan.annotations.is_empty() {
        parts.push("metadata".into());
    }
    if parts.is_empty() {
        "revision label only".into()
    } else {
        parts.join(", ")
    }
}

/// Why a Pod is recreated, for the WHY column.
fn recreate_why(policy: &str, not_in_place: Option<&str>, pod: &Pod) -> String {
    match not_in_place {
        Some(reason) => reason.to_owned(),
        None if policy.is_empty() || policy == POD_UPDATE_RECREATE => {
            "podUpdatePolicy ReCreate".to_owned()
        }
        None => format!(
            "its revision {} is gone",
            pods::revision_of(pod).unwrap_or_default()
        ),
    }
}

fn with_hook_note(hooked: &BTreeSet<String>, pod: &Pod, why: String) -> String {
    if hooked.contains(&name(pod)) {
        format!("after the inPlaceUpdate hook: {why}")
    } else {
        why
    }
}

/// The Pods (by name) at `revision` among `pods`, and the others.
fn split_by_revision(pods: &[Pod], revision: &str) -> (Vec<String>, Vec<String>) {
    let (at, not): (Vec<&Pod>, Vec<&Pod>) =
        pods.iter().partition(|p| pods::is_at_revision(p, revision));
    (
        at.into_iter().map(name).collect(),
        not.into_iter().map(name).collect(),
    )
}

/// Takes a paused rollout as unpaused (a preview shows what resuming would do); the note saying
/// so, or that OnDelete updates nothing by itself.
fn unpause(cs: &mut CloneSet) -> Option<String> {
    let mut note = None;
    if let Some(r) = cs.spec.update_strategy.rolling_update.as_mut()
        && r.paused
    {
        note = Some(PAUSED.to_owned());
        r.paused = false;
    }
    if cs.spec.update_strategy.type_ == UPDATE_ON_DELETE {
        note = Some(ON_DELETE.to_owned());
    }
    note
}

/// Applies a sync's fixes to the simulated Pods; whether any Pod changed (then the sync is over).
fn apply_fixes(sim: &mut [Pod], fixes: &[decide::Fix]) -> bool {
    if fixes.is_empty() {
        return false;
    }
    let before = sim.to_vec();
    for fix in fixes {
        match fix {
            decide::Fix::InPlaceReady(i, state) => {
                make_ready(&mut sim[*i]);
                if let Some(state) = state {
                    set_lifecycle(&mut sim[*i], *state);
                }
            }
            decide::Fix::InPlaceNextBatch(i) => make_ready(&mut sim[*i]),
            decide::Fix::Lifecycle(i, state) => set_lifecycle(&mut sim[*i], *state),
            decide::Fix::TemplateHash(i, hash) => {
                set_label(&mut sim[*i], LABEL_POD_TEMPLATE_HASH, hash);
            }
        }
    }
    sim != before.as_slice()
}

/// The rollout of CloneSet `cs` (its spec holding the template and strategy to roll to) over its
/// `pods`, from `current` to `update` (both in `revisions`, which give each Pod's old template), with
/// the controller's process-wide `settings`.
pub fn cloneset(
    cs: &CloneSet,
    pods: &[Pod],
    current: Revision<'_>,
    update: Revision<'_>,
    revisions: &[Revision<'_>],
    settings: Settings,
    now: Timestamp,
) -> Result<Preview, PreviewError> {
    let mut cs = cs.clone();
    let note = unpause(&mut cs);
    let policy = cs
        .spec
        .update_strategy
        .rolling_update
        .as_ref()
        .map(|r| r.pod_update_policy.clone())
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| POD_UPDATE_RECREATE.to_owned());
    let limits = Limits::resolve(&RolloutKnobs::from_spec(&cs.spec))?;
    let hook = cs
        .spec
        .lifecycle
        .as_ref()
        .and_then(|l| l.in_place_update.clone());
    let active: Vec<Pod> = pods
        .iter()
        .filter(|p| pods::is_active(p))
        .cloned()
        .collect();
    let mut sim = active.clone();
    let (updated, _) = split_by_revision(&sim, update.name);
    let mut out = Preview {
        update_revision: update.name.to_owned(),
        pod_update_policy: policy.clone(),
        partition: limits.partition,
        max_unavailable: limits.max_unavailable,
        updated,
        note,
        ..Preview::default()
    };
    let node_labels = BTreeMap::new();
    let base = cs.metadata.name.clone().unwrap_or_default();
    let mut created = 0;
    let mut rec = Recorder::default();
    let mut hooked: BTreeSet<String> = BTreeSet::new();
    for _ in 0..SYNCS_PER_POD * (sim.len() + 2) {
        let snapshot = decide::Snapshot {
            cs: &cs,
            pods: &sim,
            current,
            update,
            revisions,
            // A preview plans the template change alone.
            vct_hashes: &BTreeMap::new(),
            node_labels: &node_labels,
            now,
            settings,
        };
        match decide::scale_step(&snapshot)? {
            ScaleStep::None => {}
            ScaleStep::Create {
                from_current,
                from_update,
                ..
            } => {
                let news: Vec<Pod> = (0..from_current + from_update)
                    .map(|k| {
                        created += 1;
                        let rev = if k < from_current { current } else { update };
                        new_pod(
                            format!("{base}-new-{created}"),
                            cs.metadata.namespace.clone(),
                            rev.template,
                            rev.name,
                            None,
                        )
                    })
                    .collect();
                sim.extend(news);
                continue;
            }
            ScaleStep::Delete { delete, prepare } => {
                for &i in &prepare {
                    set_lifecycle(&mut sim[i], LifecycleState::PreparingDelete);
                }
                sim = after_sync(sim, &delete.into_iter().collect(), Vec::new());
                continue;
            }
            ScaleStep::Regret(list) => {
                for &i in &list {
                    set_lifecycle(&mut sim[i], LifecycleState::PreparingNormal);
                }
                continue;
            }
        }
        let step = decide::update_step(&snapshot)?;
        if apply_fixes(&mut sim, &step.fixes) {
            continue;
        }
        let target = if step.target == current.name {
            current
        } else {
            update
        };
        rec.next_sync();
        let mut gone = BTreeSet::new();
        for action in &step.actions {
            match action {
                UpdateAction::PrepareUpdate { pod, .. } => {
                    hooked.insert(name(&sim[*pod]));
                    set_lifecycle(&mut sim[*pod], LifecycleState::PreparingUpdate);
                    release_hook(&mut sim[*pod], hook.as_ref());
                }
                UpdateAction::InPlace { pod, plan } => {
                    let why = with_hook_note(&hooked, &sim[*pod], describe_in_place(plan));
                    rec.record(&mut out, &sim[*pod], Action::InPlace, why);
                    update_in_place(&mut sim[*pod], plan, target.name);
                    if hooked.contains(&name(&sim[*pod])) {
                        restore_hook(&mut sim[*pod], hook.as_ref());
                    }
                }
                UpdateAction::Recreate { pod, not_in_place } => {
                    let why = recreate_why(&policy, not_in_place.as_deref(), &sim[*pod]);
                    rec.record(&mut out, &sim[*pod], Action::Recreate, why);
                    gone.insert(*pod);
                }
                UpdateAction::Refuse { pod, message } => {
                    rec.record(&mut out, &sim[*pod], Action::Refused, message.clone());
                    // Counted as done so the preview goes on (see the module's note).
                    set_label(
                        &mut sim[*pod],
                        keys::LABEL_NATIVE_CONTROLLER_REVISION_HASH,
                        target.name,
                    );
                }
            }
        }
        if step.actions.is_empty() {
            break;
        }
        // A recreated Pod is deleted; the scale step of the next sync creates its replacement.
        sim = after_sync(sim, &gone, Vec::new());
    }
    out.stay = rec.stay(&active, update.name);
    Ok(out)
}

/// The rollout of Advanced StatefulSet `sts` (its spec holding the template and strategy to roll
/// to) over its `pods`, from `current` to `update`.
pub fn statefulset(
    sts: &StatefulSet,
    pods: &[Pod],
    current: Revision<'_>,
    update: Revision<'_>,
    revisions: &[Revision<'_>],
    resize: bool,
    now: Timestamp,
) -> Result<Preview, PreviewError> {
    let mut spec = sts.spec.clone();
    let mut note = None;
    if let Some(r) = spec.update_strategy.rolling_update.as_mut()
        && r.paused
    {
        note = Some(PAUSED.to_owned());
        r.paused = false;
    }
    if spec.update_strategy.type_ == statefulset_on_delete() {
        note = Some(ON_DELETE.to_owned());
    }
    let rolling = spec
        .update_strategy
        .rolling_update
        .clone()
        .unwrap_or_default();
    let policy = if rolling.pod_update_policy.is_empty() {
        POD_UPDATE_RECREATE.to_owned()
    } else {
        rolling.pod_update_policy.clone()
    };
    let width = if spec.pod_management_policy == POD_MANAGEMENT_PARALLEL {
        statefulset::max_unavailable(&spec)?
    } else {
        1
    };
    let set = sts.metadata.name.clone().unwrap_or_default();
    let hook = spec
        .lifecycle
        .as_ref()
        .and_then(|l| l.in_place_update.clone());
    let mut sim: Vec<Pod> = pods.to_vec();
    let (updated, _) = split_by_revision(&sim, update.name);
    let mut out = Preview {
        update_revision: update.name.to_owned(),
        pod_update_policy: policy.clone(),
        partition: i64::from(rolling.partition.unwrap_or(0)),
        max_unavailable: width,
        updated,
        note,
        ..Preview::default()
    };
    let status_current_replicas = sts.status.as_ref().map_or(0, |s| s.current_replicas);
    let mut rec = Recorder::default();
    let mut hooked: BTreeSet<String> = BTreeSet::new();
    for _ in 0..SYNCS_PER_POD * (sim.len() + 2) {
        let snapshot = statefulset::Snapshot {
            name: &set,
            spec: &spec,
            status_current_replicas,
            pods: &sim,
            current,
            update,
            revisions,
            now,
            resize,
            // OpenKruise's default (`InPlaceUpdateEnvFromMetadata` on).
            env_from_metadata: true,
        };
        let plan = statefulset::plan(&snapshot)?;
        if plan.actions.is_empty() {
            break;
        }
        rec.next_sync();
        let mut gone = BTreeSet::new();
        let mut news = Vec::new();
        for action in &plan.actions {
            use statefulset::{Action as A, DeleteReason, Fix};
            match action {
                A::Create {
                    name: pod_name,
                    revision,
                    lifecycle,
                    ..
                } => {
                    let template = revisions
                        .iter()
                        .find(|r| r.name == revision)
                        .map_or(update.template, |r| r.template);
                    let mut pod = new_pod(
                        pod_name.clone(),
                        sts.metadata.namespace.clone(),
                        template,
                        revision,
                        None,
                    );
                    if *lifecycle != LifecycleState::Unset {
                        set_lifecycle(&mut pod, *lifecycle);
                    }
                    news.push(pod);
                }
                A::CreateClaims { pod } => make_ready(&mut sim[*pod]),
                A::Fix(Fix::InPlaceReady(i, state)) => {
                    make_ready(&mut sim[*i]);
                    if let Some(state) = state {
                        set_lifecycle(&mut sim[*i], *state);
                    }
                }
                A::Fix(Fix::InPlaceNextBatch(i)) => make_ready(&mut sim[*i]),
                A::Fix(Fix::Lifecycle(i, state)) => set_lifecycle(&mut sim[*i], *state),
                A::Delete { pod, reason } | A::PrepareDelete { pod, reason, .. } => {
                    if *reason == DeleteReason::Recreate {
                        let why = recreate_why(&policy, None, &sim[*pod]);
                        rec.record(&mut out, &sim[*pod], Action::Recreate, why);
                    }
                    gone.insert(*pod);
                }
                A::PrepareUpdate { pod, .. } => {
                    hooked.insert(name(&sim[*pod]));
                    set_lifecycle(&mut sim[*pod], LifecycleState::PreparingUpdate);
                    release_hook(&mut sim[*pod], hook.as_ref());
                }
                A::InPlace { pod, plan, .. } => {
                    let why = with_hook_note(&hooked, &sim[*pod], describe_in_place(plan));
                    rec.record(&mut out, &sim[*pod], Action::InPlace, why);
                    update_in_place(&mut sim[*pod], plan, update.name);
                    if hooked.contains(&name(&sim[*pod])) {
                        restore_hook(&mut sim[*pod], hook.as_ref());
                    }
                }
                A::Refuse { pod, message } => {
                    rec.record(&mut out, &sim[*pod], Action::Refused, message.clone());
                    // Counted as done so the preview goes on (see the module's note).
                    set_label(
                        &mut sim[*pod],
                        keys::LABEL_NATIVE_CONTROLLER_REVISION_HASH,
                        update.name,
                    );
                }
            }
        }
        sim = after_sync(sim, &gone, news);
    }
    out.stay = rec.stay(pods, update.name);
    Ok(out)
}

fn statefulset_on_delete() -> &'static str {
    kruise_api::statefulset::v1beta1::UPDATE_ON_DELETE
}

/// The rollout of Advanced DaemonSet `ds` (its spec holding the template and strategy to roll to)
/// over its `pods` on the cluster's `nodes`, to `update`.
pub fn daemonset(
    ds: &DaemonSet,
    pods: &[Pod],
    nodes: &[Node],
    update: Revision<'_>,
    revisions: &[Revision<'_>],
    resize: bool,
    now: Timestamp,
) -> Result<Preview, PreviewError> {
    let mut spec = ds.spec.clone();
    let mut note = None;
    if let Some(r) = spec.update_strategy.rolling_update.as_mut()
        && r.paused == Some(true)
    {
        note = Some(PAUSED.to_owned());
        r.paused = None;
    }
    if spec.update_strategy.type_ == kruise_api::daemonset::v1beta1::UPDATE_ON_DELETE {
        note = Some(ON_DELETE.to_owned());
    }
    let rolling = spec.update_strategy.rolling_update.clone();
    let policy = match &rolling {
        Some(r)
            if r.type_ == kruise_api::daemonset::v1beta1::ROLLING_UPDATE_IN_PLACE_IF_POSSIBLE =>
        {
            r.type_.clone()
        }
        _ => POD_UPDATE_RECREATE.to_owned(),
    };
    let template_spec = spec.template.spec.clone().unwrap_or_default();
    let labels: Vec<BTreeMap<String, String>> = nodes
        .iter()
        .map(|n| n.metadata.labels.clone().unwrap_or_default())
        .collect();
    let views: Vec<daemonset::NodeView<'_>> = nodes
        .iter()
        .zip(&labels)
        .map(|(node, labels)| daemonset::node_view(&template_spec, node, labels))
        .collect();
    let desired = i32::try_from(daemonset::pods_by_node(pods).len()).unwrap_or(i32::MAX);
    let (surge, unavailable) = daemonset::surge_and_unavailable(rolling.as_ref(), desired)?;
    let partition = daemonset::partition(&spec, desired)?;
    let mut sim: Vec<Pod> = pods.to_vec();
    let (updated, _) = split_by_revision(&sim, update.name);
    let mut out = Preview {
        update_revision: update.name.to_owned(),
        pod_update_policy: policy.clone(),
        partition: partition as i64,
        max_unavailable: surge.max(unavailable) as i64,
        updated,
        note,
        ..Preview::default()
    };
    let base = ds.metadata.name.clone().unwrap_or_default();
    let mut rec = Recorder::default();
    for _ in 0..SYNCS_PER_POD * (sim.len() + 2) {
        let snapshot = daemonset::Snapshot {
            spec: &spec,
            pods: &sim,
            nodes: &views,
            update,
            revisions,
            now,
            resize,
            env_from_metadata: true,
            // The preview's nodes are those that run the set's Pods: none is ineligible.
            prune_ineligible_nodes: false,
        };
        let plan = daemonset::plan(&snapshot)?;
        if plan.actions.is_empty() {
            break;
        }
        // The old Pod on each node, for the creations of a surge.
        let old_on: BTreeMap<String, usize> = sim
            .iter()
            .enumerate()
            .filter(|(_, p)| !pods::is_at_revision(p, update.name) && !pods::is_terminating(p))
            .filter_map(|(i, p)| Some((daemonset::target_node(p)?.to_owned(), i)))
            .collect();
        rec.next_sync();
        let mut gone = BTreeSet::new();
        let mut news = Vec::new();
        for action in &plan.actions {
            use daemonset::{Action as A, DeleteReason, Fix};
            match action {
                A::Create { node } => {
                    if let Some(&old) = old_on.get(node) {
                        let why = "maxSurge: a new Pod starts before the old one is deleted";
                        rec.record(&mut out, &sim[old], Action::Recreate, why.to_owned());
                    }
                    news.push(new_pod(
                        format!("{base}-{node}-new"),
                        ds.metadata.namespace.clone(),
                        update.template,
                        update.name,
                        Some(node),
                    ));
                }
                A::Fix(Fix::InPlaceReady(i) | Fix::InPlaceNextBatch(i)) => make_ready(&mut sim[*i]),
                A::Delete { pod, reason } | A::PrepareDelete { pod, reason, .. } => {
                    if *reason == DeleteReason::Update {
                        let why = recreate_why(&policy, None, &sim[*pod]);
                        rec.record(&mut out, &sim[*pod], Action::Recreate, why);
                    }
                    gone.insert(*pod);
                }
                A::InPlace { pod, plan } => {
                    rec.record(
                        &mut out,
                        &sim[*pod],
                        Action::InPlace,
                        describe_in_place(plan),
                    );
                    update_in_place(&mut sim[*pod], plan, update.name);
                }
            }
        }
        sim = after_sync(sim, &gone, news);
    }
    out.stay = rec.stay(pods, update.name);
    Ok(out)
}

/// The rollout of SidecarSet `ss` (its spec holding the sidecars to roll to) over the Pods its
/// selector matches (`pods`, any namespace; those it did not inject are left out, as the controller
/// does).
pub fn sidecarset(ss: &SidecarSet, pods: &[Pod]) -> Result<Preview, PreviewError> {
    let mut ss = ss.clone();
    let mut note = None;
    if ss.spec.update_strategy.paused {
        note = Some(PAUSED.to_owned());
        ss.spec.update_strategy.paused = false;
    }
    if ss.spec.update_strategy.type_ == kruise_api::sidecarset::v1beta1::UPDATE_NOT_UPDATE {
        note = Some("updateStrategy NotUpdate: sidecars change only in new Pods".to_owned());
    }
    let mut managed: Vec<&Pod> = pods
        .iter()
        .filter(|p| upgrade::is_managed(&ss, p))
        .collect();
    // The controller's order: by namespace, then name.
    managed.sort_by(|a, b| {
        (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
    });
    let mut facts: Vec<upgrade::PodFacts> =
        managed.iter().map(|p| upgrade::pod_facts(&ss, p)).collect();
    let total = i32::try_from(managed.len()).unwrap_or(i32::MAX);
    let strategy = &ss.spec.update_strategy;
    let partition = super::cloneset::partition_replicas(strategy.partition.as_ref(), total)
        .map_err(|e| PreviewError(format!("spec.updateStrategy.partition: {}", e.message)))?;
    let max_unavailable = match &strategy.max_unavailable {
        None => 1,
        Some(v) => kruise_api::intstr::IntOrPercent::parse(v)
            .map_err(|e| PreviewError(format!("spec.updateStrategy.maxUnavailable: {e}")))?
            .scaled(total, kruise_api::intstr::Round::Up),
    };
    let (hash, _) = crate::sidecarset::hashes(&ss);
    let images: Vec<String> = ss
        .spec
        .containers
        .iter()
        .map(|c| {
            format!(
                "image {} → {}",
                c.container.name,
                c.container.image.as_deref().unwrap_or_default()
            )
        })
        .collect();
    let mut out = Preview {
        update_revision: hash,
        pod_update_policy: "InPlace (sidecar images)".to_owned(),
        partition: i64::from(partition),
        max_unavailable: i64::from(max_unavailable),
        updated: managed
            .iter()
            .zip(&facts)
            .filter(|(_, f)| f.updated)
            .map(|(p, _)| name(p))
            .collect(),
        note,
        ..Preview::default()
    };
    let mut batch = 0;
    let mut refused = BTreeSet::new();
    for _ in 0..SYNCS_PER_POD * (managed.len() + 2) {
        let plan = upgrade::plan_upgrade(&ss, &managed, &facts)?;
        if !plan.flip.is_empty() {
            for &i in &plan.flip {
                facts[i].flip_due = false;
            }
            continue;
        }
        let new_refusals: Vec<usize> = plan
            .not_upgradable
            .iter()
            .copied()
            .filter(|i| !refused.contains(i))
            .collect();
        if plan.upgrade.is_empty() && new_refusals.is_empty() {
            break;
        }
        batch += 1;
        for &i in &plan.upgrade {
            out.push(batch, managed[i], Action::InPlace, images.join(", "));
            facts[i] = upgrade::PodFacts {
                updated: true,
                upgradable: true,
                consistent: true,
                ready: true,
                ..upgrade::PodFacts::default()
            };
        }
        for i in new_refusals {
            out.push(
                batch,
                managed[i],
                Action::Refused,
                "a sidecar changed beyond its image: only new Pods get it".to_owned(),
            );
            refused.insert(i);
        }
    }
    let done: BTreeSet<&str> = out.steps.iter().map(|s| s.pod.as_str()).collect();
    out.stay = managed
        .iter()
        .map(|p| name(p))
        .filter(|n| !done.contains(n.as_str()) && !out.updated.contains(n))
        .collect();
    // A SidecarSet's Pods carry no revision label of the SidecarSet.
    for step in &mut out.steps {
        step.from_revision.clear();
    }
    Ok(out)
}

/// One subset of a UnitedDeployment as it runs now.
pub struct Subset<'a> {
    pub name: &'a str,
    /// The subset's workload (a CloneSet or Advanced StatefulSet), as read from the cluster.
    pub workload: &'a Value,
    /// The workload's Pods.
    pub pods: &'a [Pod],
    /// The workload's revisions.
    pub revisions: &'a [Revision<'a>],
}

/// The rollout of UnitedDeployment `ud` (its spec holding the template to roll to, at UD revision
/// `revision`) over its `subsets`: the replicas and partition of each subset as the controller
/// allocates them, then each subset workload's rollout by its own planner. The subsets roll at the
/// same time, so batch n is every subset's batch n.
pub fn uniteddeployment(
    ud: &UnitedDeployment,
    revision: &str,
    subsets: &[Subset<'_>],
    settings: Settings,
    now: Timestamp,
) -> Result<Preview, PreviewError> {
    let kind = TemplateKind::of(&ud.spec.template)
        .ok_or_else(|| PreviewError("the UnitedDeployment has no template".to_owned()))?;
    let existing: BTreeMap<String, Existing> = subsets
        .iter()
        .map(|s| {
            let int = |ptr: &str| {
                s.workload
                    .pointer(ptr)
                    .and_then(Value::as_i64)
                    .and_then(|v| i32::try_from(v).ok())
                    .unwrap_or(0)
            };
            (
                s.name.to_owned(),
                Existing {
                    spec_replicas: int("/spec/replicas"),
                    ready_replicas: int("/status/readyReplicas"),
                    ..Existing::default()
                },
            )
        })
        .collect();
    let replicas = ud_core::allocate(&ud.spec, &existing).map_err(PreviewError)?;
    let partitions = ud_core::next_partitions(&ud.spec, &replicas);
    let owner = OwnerReference {
        api_version: "apps.kruise.io/v1beta1".to_owned(),
        kind: "UnitedDeployment".to_owned(),
        name: ud.metadata.name.clone().unwrap_or_default(),
        uid: ud.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    let mut out = Preview {
        update_revision: revision.to_owned(),
        pod_update_policy: format!("by each subset's {}", kind.subset_type()),
        partition: i64::from(partitions.values().sum::<i32>()),
        ..Preview::default()
    };
    let mut steps = Vec::new();
    let mut missing = Vec::new();
    for subset in &ud.spec.topology.subsets {
        let Some(live) = subsets.iter().find(|s| s.name == subset.name) else {
            missing.push(subset.name.clone());
            continue;
        };
        let mut desired = ud_core::subset_workload(
            ud,
            &subset.name,
            revision,
            replicas.get(&subset.name).copied().unwrap_or(0),
            partitions.get(&subset.name).copied().unwrap_or(0),
            &owner,
        )
        .map_err(PreviewError)?;
        desired["metadata"] = live.workload.get("metadata").cloned().unwrap_or_default();
        let collision = live
            .workload
            .pointer("/status/collisionCount")
            .and_then(Value::as_i64)
            .and_then(|c| i32::try_from(c).ok());
        let current_name = live
            .workload
            .pointer("/status/currentRevision")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let part = match kind {
            TemplateKind::CloneSet => {
                let cs: CloneSet = serde_json::from_value(desired)
                    .map_err(|e| PreviewError(format!("subset {}: {e}", subset.name)))?;
                let update_name = revision::new_revision(&cs, 0, collision)
                    .map_err(|e| PreviewError(e.to_string()))?
                    .metadata
                    .name
                    .unwrap_or_default();
                let update = Revision {
                    name: &update_name,
                    template: &cs.spec.template,
                };
                let revisions = with_revision(live.revisions, update);
                cloneset(
                    &cs,
                    live.pods,
                    current_or(&revisions, current_name, update),
                    update,
                    &revisions,
                    settings,
                    now,
                )?
            }
            TemplateKind::AdvancedStatefulSet => {
                let sts: StatefulSet = serde_json::from_value(desired)
                    .map_err(|e| PreviewError(format!("subset {}: {e}", subset.name)))?;
                let update_name = statefulset_revision_name(&sts, collision)?;
                let update = Revision {
                    name: &update_name,
                    template: &sts.spec.template,
                };
                let revisions = with_revision(live.revisions, update);
                statefulset(
                    &sts,
                    live.pods,
                    current_or(&revisions, current_name, update),
                    update,
                    &revisions,
                    settings.resize,
                    now,
                )?
            }
            other => {
                out.note = Some(format!(
                    "{} subsets are rolled by kube-controller-manager, not kruise-rs: no preview",
                    other.subset_type()
                ));
                return Ok(out);
            }
        };
        out.max_unavailable = out.max_unavailable.max(part.max_unavailable);
        out.updated.extend(part.updated);
        out.stay.extend(part.stay);
        if out.note.is_none() {
            out.note = part.note;
        }
        steps.extend(part.steps.into_iter().map(|mut s| {
            s.subset = Some(subset.name.clone());
            s
        }));
    }
    // Subsets roll side by side: batch n of every subset goes together (stable: subset order
    // within a batch).
    steps.sort_by_key(|s| s.batch);
    for (n, step) in steps.iter_mut().enumerate() {
        step.order = n + 1;
    }
    out.steps = steps;
    if !missing.is_empty() && out.note.is_none() {
        out.note = Some(format!(
            "subsets without a workload yet (created at the new revision): {}",
            missing.join(", ")
        ));
    }
    Ok(out)
}

/// `revisions` with `update` added when it is not among them (a template not applied yet).
pub fn with_revision<'a>(revisions: &[Revision<'a>], update: Revision<'a>) -> Vec<Revision<'a>> {
    let mut out = revisions.to_vec();
    if !out.iter().any(|r| r.name == update.name) {
        out.push(update);
    }
    out
}

/// The revision named `name` among `revisions`, else `update` (a workload with no current revision
/// yet).
pub fn current_or<'a>(
    revisions: &[Revision<'a>],
    name: &str,
    update: Revision<'a>,
) -> Revision<'a> {
    revisions
        .iter()
        .find(|r| r.name == name)
        .copied()
        .unwrap_or(update)
}

/// The name of the revision `template` gets as the template of a `kind` (StatefulSet, DaemonSet)
/// described by `meta`: `<name>-<hash>`, as its controller names it.
fn template_revision_name(
    kind: &str,
    meta: &ObjectMeta,
    template: &PodTemplateSpec,
    collision: Option<i32>,
) -> Result<String, PreviewError> {
    let data = revision::revision_data(template).map_err(|e| PreviewError(e.to_string()))?;
    let parent = revision::Parent { kind, meta };
    Ok(
        revision::build_revision(parent, None, BTreeMap::new(), data, 0, collision)
            .map_err(|e| PreviewError(e.to_string()))?
            .metadata
            .name
            .unwrap_or_default(),
    )
}

/// The name of the revision an Advanced StatefulSet's template gets.
pub fn statefulset_revision_name(
    sts: &StatefulSet,
    collision: Option<i32>,
) -> Result<String, PreviewError> {
    template_revision_name("StatefulSet", &sts.metadata, &sts.spec.template, collision)
}

/// The name of the revision an Advanced DaemonSet's template gets.
pub fn daemonset_revision_name(
    ds: &DaemonSet,
    collision: Option<i32>,
) -> Result<String, PreviewError> {
    template_revision_name("DaemonSet", &ds.metadata, &ds.spec.template, collision)
}

/// The name of the revision a UnitedDeployment's template gets (`<ud>-<hash>`), as its controller
/// names it: the hash of the whole template in its v1alpha1 form.
pub fn uniteddeployment_revision_name(
    ud: &UnitedDeployment,
    collision: Option<i32>,
) -> Result<String, PreviewError> {
    let template =
        kruise_api::uniteddeployment::template_as_v1alpha1(&ud.metadata, &ud.spec.template);
    let data = ud_core::revision_data(&template).map_err(|e| PreviewError(e.to_string()))?;
    let mut meta = ud.metadata.clone();
    meta.annotations = None;
    let parent = revision::Parent {
        kind: "UnitedDeployment",
        meta: &meta,
    };
    Ok(revision::build_revision(
        parent,
        None,
        ud_core::revision_labels(&ud.spec.template),
        data,
        0,
        collision,
    )
    .map_err(|e| PreviewError(e.to_string()))?
    .metadata
    .name
    .unwrap_or_default())
}

#[cfg(test)]
mod tests;
