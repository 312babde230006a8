//! WorkloadSpread decisions, as pure functions of a snapshot (upstream `pkg/util/workloadspread` and
//! `pkg/controller/workloadspread`, rewritten):
//! - [`admit_create`] / [`admit_delete`]: which subset a new Pod goes to, and the slot accounting
//!   the Pod webhook records in the status (`missingReplicas`, `creatingPods`, `deletingPods`);
//! - [`inject`]: the subset's affinity, tolerations, patch and the `matched-workloadspread`
//!   annotation into the Pod;
//! - [`group_pods`], [`favorite_subset`]: the controller's view of which Pod is in which subset;
//! - [`compute_status`]: subset statuses (all versions and per version) with expiring records and
//!   the Adaptive strategy's `Schedulable` condition and reschedule decisions;
//! - [`deletion_costs`]: `controller.kubernetes.io/pod-deletion-cost` per subset, so that a
//!   scale-down removes Pods from the subsets that have too many, and, for the versions a rolling
//!   update is leaving, from the first subsets (which the new version fills) first.
//!
//! Versions: Pods of a kind in [`VERSIONED_KINDS`] are counted per version (a Deployment's
//! `pod-template-hash`, a CloneSet's revision), so that during a rolling update — with maxSurge
//! too — the new version is spread over the subsets from scratch while the old one drains, instead
//! of the surge Pods spilling into the last subset and staying there (upstream kruise#1194, #834,
//! #877). Upstream counts CloneSet Pods all as one version (`versionIgnored`) by default; kruise-rs
//! counts them per revision too.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Affinity, Node, NodeAffinity, NodeSelector, NodeSelectorTerm, Pod,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kruise_api::intstr::{IntOrPercent, Round};
use kruise_api::workloadspread::{
    ANNOTATION_MATCHED, CONDITION_SCHEDULABLE, MAX_SCHEDULED_FAILED_SECONDS, MatchedWorkloadSpread,
    STRATEGY_ADAPTIVE, VERSION_IGNORED, WorkloadSpread, WorkloadSpreadStatus, WorkloadSpreadSubset,
    WorkloadSpreadSubsetCondition, WorkloadSpreadSubsetStatus,
};

use crate::pods;

/// A Pod admitted into a subset but not seen by the controller after this long is dropped from
/// `creatingPods` (its slot is free again) with a `CreatePodFailed` Event.
pub const CREATE_TIMEOUT: Duration = Duration::from_secs(30);
/// A Pod whose deletion was admitted but which is still there after this long takes its slot back.
pub const DELETE_TIMEOUT: Duration = Duration::from_secs(15);
/// Deletion cost unit: subset `i` of `n` gets `100 × (n − i)` for the Pods within its
/// `maxReplicas`, and `−100 × (i + 1)` for those beyond it.
pub const COST_UNIT: i32 = 100;
/// Workload kinds (lowercase) whose Pods are counted per version: OpenKruise v1.9.0's
/// `--ws-enabled-versioned-status` default, the only value it applies (it reads the flag before
/// parsing it). A CloneSet's Pods are counted under `versionIgnored`, as there.
pub const VERSIONED_KINDS: &[&str] = &["deployment", "replicaset"];
/// The label Deployments put on their ReplicaSets and Pods.
pub const LABEL_POD_TEMPLATE_HASH: &str = "pod-template-hash";
pub const LABEL_CONTROLLER_REVISION_HASH: &str = "controller-revision-hash";

/// Whether Pods owned by `kind` (or the workload `kind` itself) are counted per version.
pub fn versioned_kind(kind: &str) -> bool {
    VERSIONED_KINDS.contains(&kind.to_ascii_lowercase().as_str())
}

/// The last `-`-separated part of a revision name (`app-7d9f` → `7d9f`).
pub fn short_hash(revision: &str) -> &str {
    revision.rsplit_once('-').map_or(revision, |(_, hash)| hash)
}

/// The version a Pod is counted under: its `pod-template-hash`, else the short hash of its
/// `controller-revision-hash`, when its controller's kind is versioned; else [`VERSION_IGNORED`].
pub fn pod_version(pod: &Pod) -> String {
    let owner_kind = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.kind.as_str())
        .unwrap_or_default();
    if !versioned_kind(owner_kind) {
        return VERSION_IGNORED.into();
    }
    if let Some(hash) = pods::label(pod, LABEL_POD_TEMPLATE_HASH) {
        return hash.into();
    }
    if let Some(revision) = pods::label(pod, LABEL_CONTROLLER_REVISION_HASH) {
        return short_hash(revision).into();
    }
    VERSION_IGNORED.into()
}

/// A subset's `maxReplicas` against the workload's `replicas`: `None` for no limit; a percentage
/// rounds up. An unreadable or negative value is an error naming it.
pub fn max_replicas(subset: &WorkloadSpreadSubset, replicas: i32) -> Result<Option<i32>, String> {
    let Some(value) = &subset.max_replicas else {
        return Ok(None);
    };
    let n = IntOrPercent::parse(value)?.scaled(replicas, Round::Up);
    if n < 0 {
        return Err(format!(
            "subset {}: maxReplicas {n} is negative",
            subset.name
        ));
    }
    Ok(Some(n))
}

/// Whether some subset's `maxReplicas` is a percentage (the workload's replicas are then needed).
pub fn has_percent_subset(ws: &WorkloadSpread) -> bool {
    ws.spec
        .subsets
        .iter()
        .any(|s| matches!(&s.max_replicas, Some(IntOrString::String(v)) if v.ends_with('%')))
}

/// Fresh subset statuses: every slot free (`missingReplicas` = maxReplicas, -1 for no limit).
pub fn initial_subset_statuses(
    ws: &WorkloadSpread,
    replicas: i32,
) -> Vec<WorkloadSpreadSubsetStatus> {
    ws.spec
        .subsets
        .iter()
        .map(|subset| WorkloadSpreadSubsetStatus {
            name: subset.name.clone(),
            missing_replicas: max_replicas(subset, replicas).ok().flatten().unwrap_or(-1),
            ..Default::default()
        })
        .collect()
}

/// The subset statuses `status` records for workload version `version`, or fresh ones
/// ([`initial_subset_statuses`]) when it records none: where admitting a creation and admitting a
/// deletion both start, so a version's first Pod sees every slot free either way.
fn version_statuses(
    ws: &WorkloadSpread,
    status: &WorkloadSpreadStatus,
    version: &str,
    replicas: i32,
) -> Vec<WorkloadSpreadSubsetStatus> {
    status
        .versioned_subset_statuses
        .get(version)
        .cloned()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| initial_subset_statuses(ws, replicas))
}

/// Whether the subset records the Pod `name` as being created or deleted (its slot is taken or
/// given back already, so admitting it again changes nothing).
fn records_pod(status: &WorkloadSpreadSubsetStatus, name: &str) -> bool {
    status.creating_pods.contains_key(name) || status.deleting_pods.contains_key(name)
}

fn schedulable(status: &WorkloadSpreadSubsetStatus) -> bool {
    !status
        .conditions
        .iter()
        .any(|c| c.type_ == CONDITION_SCHEDULABLE && c.status == "False")
}

/// Whether the webhook needs the workload's replicas to admit a Pod of `version` (percentages,
/// and no status for that version yet).
pub fn needs_replicas(ws: &WorkloadSpread, version: &str) -> bool {
    has_percent_subset(ws)
        && ws
            .status
            .as_ref()
            .and_then(|s| s.versioned_subset_statuses.get(version))
            .is_none_or(Vec::is_empty)
}

/// The webhook's answer for a Pod being created.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CreateDecision {
    /// The subset the Pod goes to; `None`: no subset has room, the Pod is left as it is.
    pub subset: Option<String>,
    /// The status to write (over the resourceVersion it was computed from) when it changed.
    pub status: Option<WorkloadSpreadStatus>,
    /// The id recorded in `creatingPods` for a Pod without a name yet (generateName).
    pub uid: String,
}

/// A StatefulSet Pod's ordinal (the trailing number of its name), -1 when it has none.
pub fn ordinal(name: &str) -> i64 {
    name.rsplit_once('-')
        .and_then(|(_, n)| n.parse::<i64>().ok())
        .unwrap_or(-1)
}

/// Chooses the subset of a Pod being created and records it: the first schedulable subset with a
/// free slot for the Pod's `version` takes it (`missingReplicas` − 1, the Pod in `creatingPods`
/// under its name, or under `generated_uid` when it has none yet). A subset without `maxReplicas`
/// is not recorded. A Pod already recorded (under its name, or under `generated_uid`) keeps its subset. StatefulSet Pods go by ordinal: the
/// first `maxReplicas` ordinals to the first subset, and so on.
pub fn admit_create(
    ws: &WorkloadSpread,
    pod_name: Option<&str>,
    version: &str,
    replicas: i32,
    now: Timestamp,
    generated_uid: &str,
) -> CreateDecision {
    let subsets = &ws.spec.subsets;
    if subsets.len() == 1 && subsets[0].max_replicas.is_none() {
        return CreateDecision {
            subset: Some(subsets[0].name.clone()),
            ..Default::default()
        };
    }
    let status = ws.status.clone().unwrap_or_default();
    if ws
        .spec
        .target_reference
        .as_ref()
        .is_some_and(|t| t.kind == "StatefulSet")
    {
        let ordinal = pod_name.map_or(-1, ordinal);
        let mut threshold = 0i64;
        for subset in subsets {
            let subset_status = status
                .subset_statuses
                .iter()
                .find(|s| s.name == subset.name);
            if subset_status.is_some_and(|s| !schedulable(s)) {
                continue;
            }
            let limit = match &subset.max_replicas {
                Some(IntOrString::Int(n)) => i64::from(*n),
                _ => i64::from(i32::MAX),
            };
            threshold += limit;
            if ordinal < threshold {
                return CreateDecision {
                    subset: Some(subset.name.clone()),
                    ..Default::default()
                };
            }
        }
        return CreateDecision::default();
    }
    let mut status = status;
    let mut statuses = version_statuses(ws, &status, version, replicas);
    if let Some(name) = pod_name.filter(|n| !n.is_empty())
        && let Some(recorded) = statuses.iter().find(|s| records_pod(s, name))
    {
        return CreateDecision {
            subset: Some(recorded.name.clone()),
            ..Default::default()
        };
    }
    // A slot recorded under the id the Pod asked with before it had a name (its write landed
    // after the webhook had given up and gated the Pod) is the Pod's: kept, not taken twice. The
    // Pod carries the id in its annotation, which is how the slot is matched to it afterwards.
    if !generated_uid.is_empty()
        && let Some(recorded) = statuses
            .iter()
            .find(|s| s.creating_pods.contains_key(generated_uid))
    {
        return CreateDecision {
            subset: Some(recorded.name.clone()),
            uid: generated_uid.to_string(),
            ..Default::default()
        };
    }
    let Some(chosen) = statuses
        .iter_mut()
        .find(|s| schedulable(s) && (s.missing_replicas > 0 || s.missing_replicas == -1))
    else {
        return CreateDecision::default();
    };
    let subset = chosen.name.clone();
    if chosen.missing_replicas == -1 {
        return CreateDecision {
            subset: Some(subset),
            ..Default::default()
        };
    }
    let (key, uid) = match pod_name.filter(|n| !n.is_empty()) {
        Some(name) => (name.to_string(), String::new()),
        None => (generated_uid.to_string(), generated_uid.to_string()),
    };
    chosen.creating_pods.insert(key, Time(now));
    chosen.missing_replicas -= 1;
    status
        .versioned_subset_statuses
        .insert(version.to_string(), statuses);
    CreateDecision {
        subset: Some(subset),
        status: Some(status),
        uid,
    }
}

/// Records a Pod whose deletion (or eviction) is admitted: its subset (of `matched`) gets the slot
/// back at once (`missingReplicas` + 1, the Pod in `deletingPods`), so that its replacement may
/// take it before the Pod is gone. `None` when nothing changes (the Pod is recorded already, the
/// subset is gone or has no limit).
pub fn admit_delete(
    ws: &WorkloadSpread,
    pod_name: &str,
    matched: &MatchedWorkloadSpread,
    version: &str,
    replicas: i32,
    now: Timestamp,
) -> Option<WorkloadSpreadStatus> {
    let subsets = &ws.spec.subsets;
    if subsets.len() == 1 && subsets[0].max_replicas.is_none() {
        return None;
    }
    if ws
        .spec
        .target_reference
        .as_ref()
        .is_some_and(|t| t.kind == "StatefulSet")
    {
        return None;
    }
    let mut status = ws.status.clone().unwrap_or_default();
    let mut statuses = version_statuses(ws, &status, version, replicas);
    if statuses.iter().any(|s| records_pod(s, pod_name)) {
        return None;
    }
    let subset = statuses.iter_mut().find(|s| s.name == matched.subset)?;
    if subset.missing_replicas == -1 {
        return None;
    }
    subset.deleting_pods.insert(pod_name.to_string(), Time(now));
    subset.missing_replicas += 1;
    status
        .versioned_subset_statuses
        .insert(version.to_string(), statuses);
    Some(status)
}

/// Puts `pod` into `subset` of `ws`: its tolerations appended; its preferred terms appended to the
/// Pod's preferred node affinity; its required term ANDed into every required term of the Pod (or
/// made the only one); its patch merged strategically; the annotation
/// `apps.kruise.io/matched-workloadspread` written. A patch that changes `priorityClassName`
/// clears `priority` (the apiserver sets it again from the class).
pub fn inject(
    ws_name: &str,
    subset: &WorkloadSpreadSubset,
    pod: &Pod,
    uid: &str,
) -> Result<Pod, String> {
    let mut pod = pod.clone();
    let spec = pod.spec.get_or_insert_with(Default::default);
    if !subset.tolerations.is_empty() {
        spec.tolerations
            .get_or_insert_with(Vec::new)
            .extend(subset.tolerations.iter().cloned());
    }
    let affinity = spec.affinity.get_or_insert_with(Affinity::default);
    let node_affinity = affinity
        .node_affinity
        .get_or_insert_with(NodeAffinity::default);
    if !subset.preferred_node_selector_terms.is_empty() {
        node_affinity
            .preferred_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .extend(subset.preferred_node_selector_terms.iter().cloned());
    }
    if let Some(term) = &subset.required_node_selector_term {
        let required = node_affinity
            .required_during_scheduling_ignored_during_execution
            .get_or_insert_with(NodeSelector::default);
        and_term(&mut required.node_selector_terms, term);
    }
    if let Some(patch) = &subset.patch {
        let before = pod.clone();
        let json = serde_json::to_value(&pod).map_err(|e| e.to_string())?;
        let merged = crate::rollout::uniteddeployment::strategic::strategic_merge(&json, patch)
            .map_err(|e| format!("subset {}: patch: {e}", subset.name))?;
        pod = serde_json::from_value(merged)
            .map_err(|e| format!("subset {}: the patched Pod: {e}", subset.name))?;
        let class = |p: &Pod| p.spec.as_ref().and_then(|s| s.priority_class_name.clone());
        if class(&pod) != class(&before)
            && let Some(spec) = pod.spec.as_mut()
        {
            spec.priority = None;
        }
    }
    let matched = MatchedWorkloadSpread {
        name: ws_name.into(),
        subset: subset.name.clone(),
        uid: uid.into(),
    };
    pod.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(ANNOTATION_MATCHED.into(), matched.to_annotation());
    Ok(pod)
}

/// ANDs `term` into every term of `terms` (or makes it the only one).
fn and_term(terms: &mut Vec<NodeSelectorTerm>, term: &NodeSelectorTerm) {
    if terms.is_empty() {
        terms.push(term.clone());
        return;
    }
    for existing in terms.iter_mut() {
        if let Some(expressions) = &term.match_expressions {
            existing
                .match_expressions
                .get_or_insert_with(Vec::new)
                .extend(expressions.iter().cloned());
        }
        if let Some(fields) = &term.match_fields {
            existing
                .match_fields
                .get_or_insert_with(Vec::new)
                .extend(fields.iter().cloned());
        }
    }
}

/// The `matched-workloadspread` annotation of `pod` when it names `ws_name` and a subset.
pub fn matched(pod: &Pod, ws_name: &str) -> Option<MatchedWorkloadSpread> {
    pods::annotation(pod, ANNOTATION_MATCHED)
        .and_then(MatchedWorkloadSpread::parse)
        .filter(|m| m.name == ws_name && !m.subset.is_empty())
}

/// Whether `pod` may run on `node` as a Pod of `subset`: every taint of the node tolerated by the
/// Pod's and the subset's tolerations, and the Pod's required terms ANDed with the subset's
/// required term selecting the node. With it, a score: 100 × the preferred terms' weights the
/// node matches, + 10 when the subset's patch would not change the Pod, + 1 when the subset has
/// room. `None` when it may not.
pub fn subset_score(
    pod: &Pod,
    node: &Node,
    subset: &WorkloadSpreadSubset,
    missing: i64,
) -> Option<i64> {
    let mut spec = pod.spec.clone().unwrap_or_default();
    spec.tolerations
        .get_or_insert_with(Vec::new)
        .extend(subset.tolerations.iter().cloned());
    let effects = [
        crate::nodefit::EFFECT_NO_SCHEDULE,
        crate::nodefit::EFFECT_NO_EXECUTE,
        "PreferNoSchedule",
    ];
    if crate::nodefit::untolerated_taint(&spec, node, &effects).is_some() {
        return None;
    }
    if let Some(term) = &subset.required_node_selector_term {
        let mut terms = crate::nodefit::required_node_affinity(&spec)
            .map(|r| r.node_selector_terms.clone())
            .unwrap_or_default();
        and_term(&mut terms, term);
        if !terms.iter().any(|t| crate::nodefit::term_selects(t, node)) {
            return None;
        }
    }
    let preferred: i64 = subset
        .preferred_node_selector_terms
        .iter()
        .filter(|t| crate::nodefit::term_selects(&t.preference, node))
        .map(|t| i64::from(t.weight))
        .sum();
    let patched = subset
        .patch
        .as_ref()
        .is_some_and(|patch| patch_is_applied(pod, patch));
    let patch_score = if patched { 10 } else { 0 };
    Some(preferred * 100 + patch_score + i64::from(missing > 0))
}

/// Whether merging `patch` into `pod` changes nothing but its annotations.
fn patch_is_applied(pod: &Pod, patch: &serde_json::Value) -> bool {
    let Ok(json) = serde_json::to_value(pod) else {
        return false;
    };
    let Ok(mut merged) = crate::rollout::uniteddeployment::strategic::strategic_merge(&json, patch)
    else {
        return false;
    };
    let mut original = json;
    for value in [&mut merged, &mut original] {
        if let Some(meta) = value.get_mut("metadata").and_then(|m| m.as_object_mut()) {
            meta.remove("annotations");
        }
    }
    merged == original
}

/// The subset a Pod without the annotation belongs to, judged by the node it runs on: the
/// matching subset with the best [`subset_score`] (the first on a tie). `missing` is the room
/// left per subset (decremented for the chosen one).
pub fn favorite_subset(
    ws: &WorkloadSpread,
    pod: &Pod,
    node: &Node,
    missing: &mut [i64],
) -> Option<usize> {
    let mut best: Option<(usize, i64)> = None;
    for (i, subset) in ws.spec.subsets.iter().enumerate() {
        let room = missing.get(i).copied().unwrap_or(0);
        if let Some(score) = subset_score(pod, node, subset, room)
            && best.is_none_or(|(_, s)| score > s)
        {
            best = Some((i, score));
        }
    }
    let (index, _) = best?;
    if let Some(room) = missing.get_mut(index) {
        *room -= 1;
    }
    Some(index)
}

/// Which Pod (by index into the controller's list) is in which subset, per version. Index
/// `subsets.len()` of each list holds the Pods in no subset.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Grouping {
    pub by_version: BTreeMap<String, Vec<Vec<usize>>>,
    /// Pods without the annotation that the controller placed by their node: `(pod, subset)`; it
    /// writes the annotation (and the subset patch's metadata) on them.
    pub adopted: Vec<(usize, usize)>,
}

impl Grouping {
    /// All versions together, per subset.
    pub fn all(&self, subsets: usize) -> Vec<Vec<usize>> {
        let mut all = vec![Vec::new(); subsets + 1];
        for groups in self.by_version.values() {
            for (i, group) in groups.iter().enumerate() {
                all[i].extend(group.iter().copied());
            }
        }
        all
    }
}

/// Groups `pods` by version and subset: a Pod annotated for `ws` goes to its subset (none when
/// the subset no longer exists); a Pod without it, once on a node, to its [`favorite_subset`].
/// `node` looks a node up by name.
pub fn group_pods<'a>(
    ws: &WorkloadSpread,
    pods: &[&Pod],
    replicas: i32,
    node: impl Fn(&str) -> Option<&'a Node>,
) -> Grouping {
    let ws_name = ws.metadata.name.as_deref().unwrap_or_default();
    let subsets = &ws.spec.subsets;
    let mut by_version: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, pod) in pods.iter().enumerate() {
        by_version.entry(pod_version(pod)).or_default().push(i);
    }
    let mut grouping = Grouping::default();
    for (version, members) in by_version {
        let mut groups = vec![Vec::new(); subsets.len() + 1];
        let mut missing: Vec<i64> = subsets
            .iter()
            .map(|s| {
                max_replicas(s, replicas)
                    .ok()
                    .flatten()
                    .map_or(i64::from(i32::MAX), i64::from)
            })
            .collect();
        for &i in &members {
            if let Some(m) = matched(pods[i], ws_name)
                && let Some(at) = subsets.iter().position(|s| s.name == m.subset)
            {
                missing[at] -= 1;
            }
        }
        for &i in &members {
            let pod = pods[i];
            let at = match matched(pod, ws_name) {
                Some(m) => subsets.iter().position(|s| s.name == m.subset),
                None => {
                    let found = pods::node_name(pod)
                        .and_then(&node)
                        .and_then(|n| favorite_subset(ws, pod, n, &mut missing));
                    if let Some(at) = found {
                        grouping.adopted.push((i, at));
                    }
                    found
                }
            };
            groups[at.unwrap_or(subsets.len())].push(i);
        }
        grouping.by_version.insert(version, groups);
    }
    grouping
}

/// What happened while computing a status, for Events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finding {
    /// A Pod admitted into a subset did not appear within [`CREATE_TIMEOUT`].
    CreateExpired(String),
    /// A Pod whose deletion was admitted is still there after [`DELETE_TIMEOUT`].
    DeleteExpired(String),
    /// A subset marked unschedulable is schedulable again.
    Recovered(String),
}

/// The controller's status and what it must do.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StatusPlan {
    pub status: WorkloadSpreadStatus,
    /// Pods (indexes) that stayed unschedulable in a subset longer than the Adaptive strategy's
    /// `rescheduleCriticalSeconds`: deleted, so that their replacements go to the next subset.
    pub reschedule: Vec<usize>,
    /// When to compute again (a record or a condition expires).
    pub requeue_after: Option<Duration>,
    pub findings: Vec<Finding>,
}

fn elapsed(since: Timestamp, now: Timestamp) -> Duration {
    Duration::try_from(now.duration_since(since)).unwrap_or(Duration::ZERO)
}

fn soonest(slot: &mut Option<Duration>, wait: Duration) {
    *slot = Some(slot.map_or(wait, |w| w.min(wait)));
}

/// Pending, unbound and marked `Unschedulable` by the scheduler: whether it has been so for longer
/// than `critical` since its creation, and otherwise how long until then.
pub fn unschedulable_timeout(
    pod: &Pod,
    critical: Duration,
    now: Timestamp,
) -> (bool, Option<Duration>) {
    if pods::is_terminating(pod)
        || pods::phase(pod) != pods::PHASE_PENDING
        || pods::is_assigned(pod)
    {
        return (false, None);
    }
    let unschedulable = pods::condition(pod, "PodScheduled")
        .is_some_and(|c| c.status == "False" && c.reason.as_deref() == Some("Unschedulable"));
    if !unschedulable {
        return (false, None);
    }
    let created = pod
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(now, |t| t.0);
    let age = elapsed(created, now);
    if age > critical {
        (true, None)
    } else {
        (false, Some(critical - age))
    }
}

fn condition(status: &WorkloadSpreadSubsetStatus) -> Option<&WorkloadSpreadSubsetCondition> {
    status
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_SCHEDULABLE)
}

/// Sets the Schedulable condition, keeping its transition time when the status stays.
fn set_schedulable(status: &mut WorkloadSpreadSubsetStatus, value: bool, now: Timestamp) {
    let value = if value { "True" } else { "False" };
    if condition(status).is_some_and(|c| c.status == value) {
        return;
    }
    status
        .conditions
        .retain(|c| c.type_ != CONDITION_SCHEDULABLE);
    status.conditions.push(WorkloadSpreadSubsetCondition {
        type_: CONDITION_SCHEDULABLE.into(),
        status: value.into(),
        last_transition_time: Some(Time(now)),
        ..Default::default()
    });
}

/// What one status computation reads.
struct Pass<'a> {
    ws: &'a WorkloadSpread,
    pods: &'a [&'a Pod],
    replicas: i32,
    now: Timestamp,
}

/// The status of one subset from its Pods: `replicas` (active Pods), `missingReplicas` (room left
/// after them, the deleting Pods given back and the creating Pods taken), with the old records
/// kept until their Pods show up (creating) or go (deleting), or they expire.
fn subset_status(
    pass: &Pass<'_>,
    subset: &WorkloadSpreadSubset,
    members: &[usize],
    old: Option<&WorkloadSpreadSubsetStatus>,
    plan: &mut StatusPlan,
) -> Result<WorkloadSpreadSubsetStatus, String> {
    let (pods, now) = (pass.pods, pass.now);
    let ws_name = pass.ws.metadata.name.as_deref().unwrap_or_default();
    let max = max_replicas(subset, pass.replicas)?;
    let mut status = WorkloadSpreadSubsetStatus {
        name: subset.name.clone(),
        missing_replicas: max.unwrap_or(-1),
        conditions: old.map(|o| o.conditions.clone()).unwrap_or_default(),
        ..Default::default()
    };
    let mut creating = old.map(|o| o.creating_pods.clone()).unwrap_or_default();
    let deleting = old.map(|o| o.deleting_pods.clone()).unwrap_or_default();
    let mut active = 0;
    for &i in members {
        let pod = pods[i];
        let name = pod.metadata.name.clone().unwrap_or_default();
        match matched(pod, ws_name).filter(|m| !m.uid.is_empty()) {
            Some(m) => creating.remove(&m.uid),
            None => creating.remove(&name),
        };
        if !pods::is_active(pod) {
            continue;
        }
        active += 1;
        if status.missing_replicas > 0 {
            status.missing_replicas -= 1;
        }
        if let Some(at) = deleting.get(&name) {
            let age = elapsed(at.0, now);
            if age > DELETE_TIMEOUT {
                plan.findings.push(Finding::DeleteExpired(name));
            } else {
                status.deleting_pods.insert(name, at.clone());
                if max.is_some_and(|m| status.missing_replicas < m) {
                    status.missing_replicas += 1;
                }
                soonest(&mut plan.requeue_after, DELETE_TIMEOUT - age);
            }
        }
    }
    status.replicas = active;
    for (id, at) in creating {
        let age = elapsed(at.0, now);
        if age > CREATE_TIMEOUT {
            plan.findings.push(Finding::CreateExpired(id));
        } else {
            status.creating_pods.insert(id, at);
            if status.missing_replicas > 0 {
                status.missing_replicas -= 1;
            }
            soonest(&mut plan.requeue_after, CREATE_TIMEOUT - age);
        }
    }
    Ok(status)
}

/// The subset statuses of one set of groups (all versions, or one), with the Adaptive strategy's
/// conditions; `reschedule` collects the Pods to delete when `collect` is set.
fn subset_statuses(
    pass: &Pass<'_>,
    groups: &[Vec<usize>],
    old: &[WorkloadSpreadSubsetStatus],
    plan: &mut StatusPlan,
    collect: bool,
) -> Result<Vec<WorkloadSpreadSubsetStatus>, String> {
    let (ws, pods, now) = (pass.ws, pass.pods, pass.now);
    let critical = adaptive_critical(ws);
    let subsets = &ws.spec.subsets;
    let mut out = Vec::with_capacity(subsets.len());
    for (i, subset) in subsets.iter().enumerate() {
        let previous = old.iter().find(|s| s.name == subset.name);
        let members = groups.get(i).map(Vec::as_slice).unwrap_or_default();
        let mut status = subset_status(pass, subset, members, previous, plan)?;
        match critical {
            None => status
                .conditions
                .retain(|c| c.type_ != CONDITION_SCHEDULABLE),
            Some(_) if i + 1 == subsets.len() => set_schedulable(&mut status, true, now),
            Some(critical) => {
                let mut failed = Vec::new();
                for &p in members {
                    let (timed_out, wait) = unschedulable_timeout(pods[p], critical, now);
                    if timed_out {
                        failed.push(p);
                    }
                    if let Some(wait) = wait {
                        soonest(&mut plan.requeue_after, wait);
                    }
                }
                if !failed.is_empty() {
                    set_schedulable(&mut status, false, now);
                } else if let Some(c) = condition(&status).filter(|c| c.status == "False") {
                    let since = c.last_transition_time.as_ref().map_or(now, |t| t.0);
                    let held = elapsed(since, now);
                    let hold = Duration::from_secs(MAX_SCHEDULED_FAILED_SECONDS.unsigned_abs());
                    if held > hold {
                        set_schedulable(&mut status, true, now);
                        if collect {
                            plan.findings.push(Finding::Recovered(subset.name.clone()));
                        }
                    } else {
                        soonest(&mut plan.requeue_after, hold - held);
                    }
                } else if condition(&status).is_none() {
                    set_schedulable(&mut status, true, now);
                }
                if collect {
                    plan.reschedule.extend(failed);
                }
            }
        }
        out.push(status);
    }
    Ok(out)
}

/// `rescheduleCriticalSeconds` of an Adaptive strategy, when positive.
pub fn adaptive_critical(ws: &WorkloadSpread) -> Option<Duration> {
    let strategy = &ws.spec.schedule_strategy;
    if strategy.type_ != STRATEGY_ADAPTIVE {
        return None;
    }
    strategy
        .adaptive
        .as_ref()
        .and_then(|a| a.reschedule_critical_seconds)
        .filter(|s| *s > 0)
        .map(|s| Duration::from_secs(s.unsigned_abs().into()))
}

/// The controller's status: `subsetStatuses` over all Pods, and `versionedSubsetStatuses` per
/// version (a version without Pods is kept while it still has records). Pods are `pods`, grouped
/// by [`group_pods`].
pub fn compute_status(
    ws: &WorkloadSpread,
    pods: &[&Pod],
    grouping: &Grouping,
    replicas: i32,
    now: Timestamp,
) -> Result<StatusPlan, String> {
    let mut plan = StatusPlan::default();
    let pass = Pass {
        ws,
        pods,
        replicas,
        now,
    };
    let old = ws.status.clone().unwrap_or_default();
    let n = ws.spec.subsets.len();
    let all = grouping.all(n);
    let statuses = subset_statuses(&pass, &all, &old.subset_statuses, &mut plan, true)?;
    let mut versioned = BTreeMap::new();
    for (version, groups) in &grouping.by_version {
        let previous = old
            .versioned_subset_statuses
            .get(version)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let mut scratch = StatusPlan::default();
        let statuses = subset_statuses(&pass, groups, previous, &mut scratch, false)?;
        merge_timing(&mut plan, scratch);
        versioned.insert(version.clone(), statuses);
    }
    for (version, previous) in &old.versioned_subset_statuses {
        if versioned.contains_key(version) {
            continue;
        }
        let mut scratch = StatusPlan::default();
        let statuses = subset_statuses(&pass, &[], previous, &mut scratch, false)?;
        let empty = statuses
            .iter()
            .all(|s| s.replicas == 0 && s.creating_pods.is_empty() && s.deleting_pods.is_empty());
        if !empty {
            merge_timing(&mut plan, scratch);
            versioned.insert(version.clone(), statuses);
        }
    }
    plan.status = WorkloadSpreadStatus {
        observed_generation: ws.metadata.generation.unwrap_or_default(),
        subset_statuses: statuses,
        versioned_subset_statuses: versioned,
    };
    Ok(plan)
}

/// The requeue of a per-version computation (its findings duplicate the all-versions ones).
fn merge_timing(plan: &mut StatusPlan, scratch: StatusPlan) {
    if let Some(wait) = scratch.requeue_after {
        soonest(&mut plan.requeue_after, wait);
    }
}

/// Whether two statuses differ in what matters (transition times of unchanged conditions aside,
/// which [`compute_status`] keeps anyway).
pub fn status_changed(old: Option<&WorkloadSpreadStatus>, new: &WorkloadSpreadStatus) -> bool {
    old != Some(new)
}

/// The deletion cost of each active Pod of one version (`pods` indexes → cost): in subset `i` of
/// `n`, the Pods within `maxReplicas` get `100 × (n − i)` and the others, the most deletable
/// first by Kubernetes' ActivePods order, `−100 × (i + 1)`; Pods in no subset `−100 × (n + 1)`.
/// With `reverse` (a version that is not the workload's latest) the subset order is reversed, so
/// that the old version leaves the first subsets, which the new one fills, first.
pub fn deletion_costs(
    ws: &WorkloadSpread,
    groups: &[Vec<usize>],
    pods: &[&Pod],
    replicas: i32,
    reverse: bool,
) -> BTreeMap<usize, i32> {
    let subsets = &ws.spec.subsets;
    let n = subsets.len();
    let mut costs = BTreeMap::new();
    let rank = |i: usize| if reverse { n - i - 1 } else { i };
    let as_cost = |v: usize| i32::try_from(v).unwrap_or(i32::MAX / COST_UNIT);
    for (i, subset) in subsets.iter().enumerate() {
        let index = rank(i);
        let mut active: Vec<usize> = groups
            .get(i)
            .into_iter()
            .flatten()
            .copied()
            .filter(|&p| pods::is_active(pods[p]))
            .collect();
        let positive = COST_UNIT * as_cost(n - index);
        let negative = -COST_UNIT * as_cost(index + 1);
        let limit = match max_replicas(subset, replicas) {
            Ok(limit) => limit,
            Err(_) => continue,
        };
        match limit {
            Some(limit) if active.len() > usize::try_from(limit).unwrap_or(0) => {
                active
                    .sort_by(|&a, &b| crate::rollout::ordering::active_pods_cmp(pods[a], pods[b]));
                let surplus = active.len() - usize::try_from(limit).unwrap_or(0);
                for (k, &p) in active.iter().enumerate() {
                    costs.insert(p, if k < surplus { negative } else { positive });
                }
            }
            _ => {
                for &p in &active {
                    costs.insert(p, positive);
                }
            }
        }
    }
    for &p in groups.get(n).into_iter().flatten() {
        if pods::is_active(pods[p]) {
            costs.insert(p, -COST_UNIT * as_cost(n + 1));
        }
    }
    costs
}

/// Whether the target kind is one whose controller honours the deletion cost (ReplicaSets,
/// Deployments, CloneSets).
pub fn deletion_cost_kind(kind: &str) -> bool {
    matches!(kind, "ReplicaSet" | "Deployment" | "CloneSet")
}

pub mod gate;
#[cfg(test)]
mod tests;
