//! UnitedDeployment planning (upstream `pkg/controller/uniteddeployment`), pure: how many replicas each subset gets (the specific,
//! min/max and adaptive allocators), the partition of each subset, whether a subset of the Adaptive
//! strategy counts as unschedulable, the ControllerRevision data of the template, the workload
//! generated for a subset, and which subset workloads to create, delete and update ([`plan_subsets`]).

mod manage;
mod reservation;
pub mod strategic;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use kruise_api::keys;
use kruise_api::uniteddeployment::parse_subset_replicas;
use kruise_api::uniteddeployment::v1alpha1::SubsetTemplate as AlphaSubsetTemplate;
use kruise_api::uniteddeployment::v1beta1::{
    Subset, SubsetTemplate, UPDATE_MANUAL, UnitedDeployment, UnitedDeploymentSpec,
    UnitedDeploymentSubsetCondition,
};
use serde_json::{Map, Value, json};

pub use manage::{
    ManageInputs, SeenSubset, SubsetPlan, SubsetUpdate, contains, merge_diff, plan_subsets, set_at,
};
pub use reservation::{
    PodReservation, STATUS_SELECTOR_SUFFIX, SubsetReservation, pod_reservation,
    recovered_and_scaled_up, reserved_label, subset_reservation,
};
pub use strategic::strategic_merge;

use crate::pods;
use crate::revision::go_fields::{self, WorkloadSpec};

/// What the allocators read off a subset workload that exists.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Existing {
    /// The workload's `spec.replicas`.
    pub spec_replicas: i32,
    /// The workload's `status.readyReplicas`.
    pub ready_replicas: i32,
    /// Adaptive strategy: the subset currently counts as unschedulable ([`adaptive_schedulable`],
    /// or with reservation: it has reserved Pods, [`subset_reservation`]).
    pub unschedulable: bool,
    /// Reservation mode: the subset's `Schedulable` condition was False when the reconcile began.
    pub marked_unschedulable: bool,
    /// Reservation mode: Pods of the subset that are reserved.
    pub reserved_pods: i32,
}

/// The replicas of every subset of `spec.topology.subsets` (OpenKruise's `NewReplicaAllocator`): the
/// reservation allocator for Adaptive with `reserveUnschedulablePods` (its sum exceeds
/// `spec.replicas` by the substitutes of reserved Pods), the adaptive allocator for the Adaptive strategy, the min/max allocator when any subset has a capacity,
/// else the specific allocator. The error is OpenKruise's message (the controller reports it as a
/// `Failed SpecifySubsetReplicas` Event and changes nothing).
pub fn allocate(
    spec: &UnitedDeploymentSpec,
    existing: &BTreeMap<String, Existing>,
) -> Result<BTreeMap<String, i32>, String> {
    let subsets = &spec.topology.subsets;
    if spec
        .topology
        .schedule_strategy
        .should_reserve_unschedulable_pods()
    {
        let replicas = spec.replicas.unwrap_or(0);
        let (min, max) = min_max_maps(replicas, subsets)?;
        return Ok(reservation::allocate_with_reservation(
            replicas, &min, &max, subsets, existing,
        ));
    }
    if spec.topology.schedule_strategy.is_adaptive() {
        return adaptive(spec, existing);
    }
    if subsets
        .iter()
        .any(|s| s.min_replicas.is_some() || s.max_replicas.is_some())
    {
        let replicas = spec.replicas.unwrap_or(0);
        let (min, max) = min_max_maps(replicas, subsets)?;
        return Ok(allocate_by_min_max(replicas, &min, &max, subsets));
    }
    specific(spec, existing)
}

/// Specified subsets get their value; the others share the rest evenly, and the remainder goes one by
/// one to the unspecified subsets taken from the end of the list sorted ascending by (current replicas,
/// name) — so a subset that already runs more keeps the extra replica, and on creation the last names
/// get it.
fn specific(
    spec: &UnitedDeploymentSpec,
    existing: &BTreeMap<String, Existing>,
) -> Result<BTreeMap<String, i32>, String> {
    let subsets = &spec.topology.subsets;
    let expected = spec.replicas.unwrap_or(-1);
    let mut order: Vec<(i32, &str)> = subsets
        .iter()
        .map(|s| {
            let current = existing.get(&s.name).map_or(0, |e| e.spec_replicas);
            (current, s.name.as_str())
        })
        .collect();
    order.sort();
    // A value that does not parse leaves its subset unspecified, as upstream (which only logs it).
    let specified: BTreeMap<&str, i32> = subsets
        .iter()
        .filter_map(|s| {
            let value = s.replicas.as_ref()?;
            parse_subset_replicas(spec.replicas, value)
                .ok()
                .map(|n| (s.name.as_str(), n))
        })
        .collect();
    let specified_sum: i64 = specified.values().map(|v| i64::from(*v)).sum();
    let specified_count = order
        .iter()
        .filter(|(_, name)| specified.contains_key(name))
        .count();
    if expected != -1 {
        if specified_sum > i64::from(expected) {
            return Err(format!(
                "specified subsets' replica ({specified_sum}) is greater than UnitedDeployment replica ({expected})"
            ));
        }
        if specified_sum < i64::from(expected) && specified_count == order.len() {
            return Err(format!(
                "specified subsets' replica ({specified_sum}) is less than UnitedDeployment replica ({expected})"
            ));
        }
    } else if specified_count != order.len() {
        return Err(
            "all subsets must be specified when UnitedDeployment replica is unspecified".into(),
        );
    }

    let mut result: BTreeMap<String, i32> = BTreeMap::new();
    for (_, name) in &order {
        if let Some(value) = specified.get(name) {
            result.insert((*name).to_string(), *value);
        }
    }
    let left = order.len() - specified_count;
    if left > 0 {
        let allocatable = i64::from(expected) - specified_sum;
        let left_i64 = i64::try_from(left).unwrap_or(i64::MAX);
        let average = allocatable / left_i64;
        let mut remainder = allocatable % left_i64;
        for (_, name) in order.iter().rev() {
            if specified.contains_key(name) {
                continue;
            }
            let value = if remainder > 0 {
                remainder -= 1;
                average + 1
            } else {
                average
            };
            result.insert((*name).to_string(), clamp_i32(value));
        }
    }
    Ok(result)
}

fn clamp_i32(value: i64) -> i32 {
    value.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32
}

/// A value per subset name.
type Bounds = BTreeMap<String, i32>;

/// Each subset's (minReplicas, maxReplicas) against `replicas`: unset min is 0, unset max unbounded; a
/// value that does not parse counts as 0, as upstream.
fn min_max_maps(replicas: i32, subsets: &[Subset]) -> Result<(Bounds, Bounds), String> {
    let mut mins = BTreeMap::new();
    let mut maxs = BTreeMap::new();
    for (index, subset) in subsets.iter().enumerate() {
        let parse = |v: &Option<_>, unset: i32| {
            v.as_ref().map_or(unset, |v| {
                parse_subset_replicas(Some(replicas), v).unwrap_or(0)
            })
        };
        let min = parse(&subset.min_replicas, 0);
        let max = parse(&subset.max_replicas, i32::MAX);
        if min > max {
            return Err(format!(
                "subset[{index}].maxReplicas({max}) must be more than or equal to minReplicas({min})"
            ));
        }
        mins.insert(subset.name.clone(), min);
        maxs.insert(subset.name.clone(), max);
    }
    Ok((mins, maxs))
}

/// Fill every subset's minimum in subset order, then every subset up to its maximum in subset order.
fn allocate_by_min_max(
    replicas: i32,
    mins: &BTreeMap<String, i32>,
    maxs: &BTreeMap<String, i32>,
    subsets: &[Subset],
) -> BTreeMap<String, i32> {
    let replicas = i64::from(replicas);
    let mut allocated: i64 = 0;
    let mut result: BTreeMap<String, i64> = BTreeMap::new();
    for subset in subsets {
        let min = i64::from(mins.get(&subset.name).copied().unwrap_or(0));
        let add = min.min(replicas - allocated).max(0);
        result.insert(subset.name.clone(), add);
        allocated += add;
    }
    if allocated < replicas {
        for subset in subsets {
            let min = i64::from(mins.get(&subset.name).copied().unwrap_or(0));
            let max = i64::from(maxs.get(&subset.name).copied().unwrap_or(i32::MAX));
            let add = (max - min).min(replicas - allocated).max(0);
            *result.entry(subset.name.clone()).or_default() += add;
            allocated += add;
        }
    }
    result.into_iter().map(|(k, v)| (k, clamp_i32(v))).collect()
}

/// The min/max allocator with two adjustments: an unschedulable subset is held at its ready Pods (its
/// pending ones move elsewhere; never above its max), and a schedulable subset never goes below its ready Pods (bounded by
/// its maximum), so running Pods are not deleted to make room.
fn adaptive(
    spec: &UnitedDeploymentSpec,
    existing: &BTreeMap<String, Existing>,
) -> Result<BTreeMap<String, i32>, String> {
    let replicas = spec.replicas.unwrap_or(0);
    let subsets = &spec.topology.subsets;
    let (mut mins, mut maxs) = min_max_maps(replicas, subsets)?;
    for subset in subsets {
        let name = &subset.name;
        let (mut min, mut max) = (mins[name], maxs[name]);
        let found = existing.get(name);
        let unschedulable = found.is_some_and(|e| e.unschedulable);
        let ready = found.map_or(0, |e| e.ready_replicas);
        if unschedulable {
            // Upstream raises min to the ready count even above a max the user lowered since;
            // we keep max a hard limit, so such a subset shrinks to its max.
            max = max.min(ready);
            min = min.max(ready).min(max);
        }
        if !unschedulable && ready > min {
            min = ready.min(max);
        }
        mins.insert(name.clone(), min);
        maxs.insert(name.clone(), max);
    }
    Ok(allocate_by_min_max(replicas, &mins, &maxs, subsets))
}

/// Each subset's partition: `manualUpdate.partitions[name]` (0 when unset), at most its next replicas.
pub fn next_partitions(
    spec: &UnitedDeploymentSpec,
    next_replicas: &BTreeMap<String, i32>,
) -> BTreeMap<String, i32> {
    let strategy = &spec.update_strategy;
    let manual = (strategy.type_ == UPDATE_MANUAL || strategy.type_.is_empty())
        .then_some(strategy.manual_update.as_ref())
        .flatten();
    spec.topology
        .subsets
        .iter()
        .map(|subset| {
            let mut partition = manual
                .and_then(|m| m.partitions.get(&subset.name).copied())
                .unwrap_or(0);
            if let Some(replicas) = next_replicas.get(&subset.name) {
                partition = partition.min(*replicas);
            }
            (subset.name.clone(), partition)
        })
        .collect()
}

/// Whether a Pod has waited for a node longer than `timeout` (scheduler said `Unschedulable`), and if
/// not yet, how long until it would have (`GetTimeBeforePendingTimeout`).
pub fn pending_timeout(pod: &Pod, timeout: Duration, now: Timestamp) -> (bool, Option<Duration>) {
    if pods::is_terminating(pod) || pods::phase(pod) != "Pending" || pods::is_assigned(pod) {
        return (false, None);
    }
    let unschedulable = pods::condition(pod, "PodScheduled")
        .is_some_and(|c| c.status == "False" && c.reason.as_deref() == Some("Unschedulable"));
    let Some(created) = pod.metadata.creation_timestamp.as_ref().map(|t| t.0) else {
        return (false, None);
    };
    if !unschedulable {
        return (false, None);
    }
    let deadline = created
        .checked_add(jiff_span(timeout))
        .unwrap_or(Timestamp::MAX);
    if deadline < now {
        (true, None)
    } else {
        (false, Some(duration_between(now, deadline)))
    }
}

fn jiff_span(duration: Duration) -> k8s_openapi::jiff::SignedDuration {
    k8s_openapi::jiff::SignedDuration::try_from(duration)
        .unwrap_or(k8s_openapi::jiff::SignedDuration::MAX)
}

fn duration_between(from: Timestamp, to: Timestamp) -> Duration {
    Duration::try_from(to.duration_since(from)).unwrap_or(Duration::ZERO)
}

/// What the Adaptive strategy concludes about one subset this reconcile.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Schedulability {
    /// The subset is held at its ready Pods by the allocator.
    pub unschedulable: bool,
    /// The `Schedulable` condition to write: (status, reason, message).
    pub condition: Option<(String, String, String)>,
    /// Look again after this long (a Pod reaching its pending deadline, the window ending).
    pub requeue_after: Option<Duration>,
    /// Pods pending longer than rescheduleCriticalSeconds.
    pub pending_pods: i32,
}

/// Adaptive strategy (without reservation): a subset whose `Schedulable` condition went False less than
/// `unschedulable_duration` ago stays unschedulable; after that it recovers (True, `recover`). A subset
/// short of ready Pods with a Pod pending longer than `reschedule_critical` becomes unschedulable (False,
/// `reschedule`) for the next window.
pub fn adaptive_schedulable(
    condition: Option<&UnitedDeploymentSubsetCondition>,
    pods: &[&Pod],
    status_replicas: i32,
    ready_replicas: i32,
    reschedule_critical: Duration,
    unschedulable_duration: Duration,
    now: Timestamp,
) -> Schedulability {
    let mut out = Schedulability::default();
    let requeue = |after: Duration, out: &mut Schedulability| {
        out.requeue_after = Some(out.requeue_after.map_or(after, |a| a.min(after)));
    };
    if let Some(c) = condition.filter(|c| c.status == "False") {
        let since = c.last_transition_time.as_ref().map_or(now, |t| t.0);
        let recover = since
            .checked_add(jiff_span(unschedulable_duration))
            .unwrap_or(Timestamp::MAX);
        if now < recover {
            out.unschedulable = true;
            requeue(duration_between(now, recover), &mut out);
        } else {
            out.condition = Some((
                "True".into(),
                "recover".into(),
                format!(
                    "unschedulable subset recovered after {:.6} seconds",
                    unschedulable_duration.as_secs_f64()
                ),
            ));
        }
    }
    if ready_replicas < status_replicas {
        for pod in pods {
            let (timed_out, after) = pending_timeout(pod, reschedule_critical, now);
            if timed_out {
                out.pending_pods += 1;
            }
            if let Some(after) = after.filter(|a| !a.is_zero()) {
                requeue(after, &mut out);
            }
        }
        if out.pending_pods > 0 {
            out.unschedulable = true;
            out.condition = Some((
                "False".into(),
                "reschedule".into(),
                "timeout pending pods found".into(),
            ));
            requeue(unschedulable_duration, &mut out);
        }
    }
    out
}

/// Sets a subset condition as upstream's `SetCondition`: unchanged when status and reason are the same,
/// else rewritten with `now` as its transition time.
pub fn set_subset_condition(
    conditions: &mut Vec<UnitedDeploymentSubsetCondition>,
    type_: &str,
    (status, reason, message): (String, String, String),
    now: Timestamp,
) {
    let time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now));
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) if c.status == status && c.reason == reason => {}
        Some(c) => {
            c.status = status;
            c.reason = reason;
            c.message = message;
            c.last_transition_time = time;
        }
        None => conditions.push(UnitedDeploymentSubsetCondition {
            type_: type_.into(),
            status,
            last_transition_time: time,
            reason,
            message,
        }),
    }
}

/// Subset condition type (beyond OpenKruise): whether the subset runs its target of Ready Pods at
/// the update revision, and if not, why not.
pub const SUBSET_CONDITION_UPDATED: &str = "Updated";

/// What [`subset_updated_condition`] reads about one subset.
pub struct SubsetProgress<'a> {
    /// The replicas allocated to the subset.
    pub target: i32,
    /// The partition allocated to the subset.
    pub partition: i32,
    pub ready: i32,
    pub updated: i32,
    pub updated_ready: i32,
    pub pods: &'a [&'a Pod],
    /// A failure the subset workload reports (a True `ReplicaFailure`, `FailedCreate`, … condition).
    pub workload_failure: Option<String>,
}

/// A True failure condition of a subset workload's status (JSON), as "type: message".
pub fn workload_failure(workload: &Value) -> Option<String> {
    let conditions = workload.pointer("/status/conditions")?.as_array()?;
    conditions.iter().find_map(|c| {
        let type_ = c.get("type")?.as_str()?;
        let failing = matches!(
            type_,
            "ReplicaFailure" | "FailedCreate" | "FailedUpdate" | "FailedScale"
        );
        (failing && c.get("status")?.as_str()? == "True").then(|| {
            let message = c.get("message").and_then(Value::as_str).unwrap_or_default();
            format!("{type_}: {message}")
        })
    })
}

/// The subset's `Updated` condition (status, reason, message): True (`Updated`) when it runs its
/// target of Ready Pods at the update revision; else False with the first reason that explains the
/// shortfall — `Unschedulable` (Pods the scheduler cannot place, with its message),
/// `WorkloadFailure` (the subset workload reports a failure), `Partitioned` (the partition holds Pods
/// at the old revision), or `Progressing`.
pub fn subset_updated_condition(p: &SubsetProgress<'_>) -> (String, String, String) {
    let counts = format!(
        "{} of {} Pods Ready, {} at the update revision ({} Ready), partition {}",
        p.ready, p.target, p.updated, p.updated_ready, p.partition
    );
    if p.ready >= p.target && p.updated_ready >= p.target {
        return ("True".into(), "Updated".into(), counts);
    }
    let unschedulable: Vec<&&Pod> = p
        .pods
        .iter()
        .filter(|pod| {
            !pods::is_terminating(pod)
                && pods::condition(pod, "PodScheduled").is_some_and(|c| {
                    c.status == "False" && c.reason.as_deref() == Some("Unschedulable")
                })
        })
        .collect();
    if let Some(first) = unschedulable.first() {
        let why = pods::condition(first, "PodScheduled")
            .and_then(|c| c.message.clone())
            .unwrap_or_default();
        return (
            "False".into(),
            "Unschedulable".into(),
            format!(
                "{counts}; {} Pods cannot be scheduled: {why}",
                unschedulable.len()
            ),
        );
    }
    if let Some(failure) = &p.workload_failure {
        return (
            "False".into(),
            "WorkloadFailure".into(),
            format!("{counts}; the subset workload reports {failure}"),
        );
    }
    if p.partition > 0 && p.updated_ready >= p.target - p.partition && p.ready >= p.target {
        return (
            "False".into(),
            "Partitioned".into(),
            format!(
                "{counts}; the partition holds {} Pods at the old revision",
                p.target - p.updated
            ),
        );
    }
    ("False".into(), "Progressing".into(), counts)
}

/// The kind of workload a template provisions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TemplateKind {
    /// `statefulSetTemplate`: apps/v1 StatefulSet.
    StatefulSet,
    /// `advancedStatefulSetTemplate`: apps.kruise.io/v1beta1 StatefulSet.
    AdvancedStatefulSet,
    /// `cloneSetTemplate`: apps.kruise.io/v1beta1 CloneSet.
    CloneSet,
    /// `deploymentTemplate`: apps/v1 Deployment.
    Deployment,
}

impl TemplateKind {
    pub const ALL: [TemplateKind; 4] = [
        Self::StatefulSet,
        Self::AdvancedStatefulSet,
        Self::CloneSet,
        Self::Deployment,
    ];

    /// The kind of the template that is set (the first of the four, as upstream).
    pub fn of(template: &SubsetTemplate) -> Option<Self> {
        if template.stateful_set_template.is_some() {
            Some(Self::StatefulSet)
        } else if template.advanced_stateful_set_template.is_some() {
            Some(Self::AdvancedStatefulSet)
        } else if template.clone_set_template.is_some() {
            Some(Self::CloneSet)
        } else if template.deployment_template.is_some() {
            Some(Self::Deployment)
        } else {
            None
        }
    }

    /// OpenKruise's subset type name, used in Events ("Create 3 Subset (StatefulSet)").
    pub fn subset_type(self) -> &'static str {
        match self {
            Self::StatefulSet => "StatefulSet",
            Self::AdvancedStatefulSet => "AdvancedStatefulSet",
            Self::CloneSet => "CloneSet",
            Self::Deployment => "Deployment",
        }
    }

    pub fn api_version(self) -> &'static str {
        match self {
            Self::StatefulSet | Self::Deployment => "apps/v1",
            Self::AdvancedStatefulSet | Self::CloneSet => "apps.kruise.io/v1beta1",
        }
    }

    pub fn kind(self) -> &'static str {
        match self {
            Self::StatefulSet | Self::AdvancedStatefulSet => "StatefulSet",
            Self::CloneSet => "CloneSet",
            Self::Deployment => "Deployment",
        }
    }

    /// Where the workload keeps its partition (none for a Deployment).
    pub fn partition_pointer(self) -> Option<&'static str> {
        match self {
            Self::StatefulSet | Self::AdvancedStatefulSet | Self::CloneSet => {
                Some("/spec/updateStrategy/rollingUpdate/partition")
            }
            Self::Deployment => None,
        }
    }

    /// Where the workload keeps the maxUnavailable of its rolling update.
    pub fn max_unavailable_pointer(self) -> &'static str {
        match self {
            Self::StatefulSet | Self::AdvancedStatefulSet | Self::CloneSet => {
                "/spec/updateStrategy/rollingUpdate/maxUnavailable"
            }
            Self::Deployment => "/spec/strategy/rollingUpdate/maxUnavailable",
        }
    }
}

/// The revision data of a UnitedDeployment: a strategic-merge patch that replaces `spec.template` (the
/// whole four-way template, not only the Pod template). The template is in its v1alpha1 form
/// ([`kruise_api::uniteddeployment::template_as_v1alpha1`]: a CloneSet template holds the v1alpha1 CloneSet
/// spec), the only form OpenKruise v1.9.0 has, so that a UnitedDeployment it managed keeps its revision.
pub fn revision_data(template: &AlphaSubsetTemplate) -> Result<Value, serde_json::Error> {
    let mut template = serde_json::to_value(template)?;
    if let Value::Object(map) = &mut template {
        // The empty fields Go writes, so that the revision hashes as OpenKruise's does.
        for (field, kind) in [
            ("cloneSetTemplate", WorkloadSpec::CloneSet),
            (
                "advancedStatefulSetTemplate",
                WorkloadSpec::AdvancedStatefulSet,
            ),
            ("statefulSetTemplate", WorkloadSpec::StatefulSet),
            ("deploymentTemplate", WorkloadSpec::Deployment),
        ] {
            if let Some(workload) = map.get_mut(field) {
                go_fields::workload_template(workload, kind);
            }
        }
        map.insert("$patch".into(), Value::String("replace".into()));
    }
    Ok(json!({"spec": {"template": template}}))
}

/// The labels of a revision: the workload template's labels — except for a CloneSet template, whose
/// labels upstream leaves out.
pub fn revision_labels(template: &SubsetTemplate) -> BTreeMap<String, String> {
    let labels = if let Some(t) = &template.stateful_set_template {
        t.metadata.labels.clone()
    } else if let Some(t) = &template.advanced_stateful_set_template {
        t.metadata.labels.clone()
    } else if let Some(t) = &template.deployment_template {
        t.metadata.labels.clone()
    } else {
        None
    };
    labels.unwrap_or_default()
}

/// `generateName` of a subset workload: `<ud>-<subset>-`, or `<ud>-` when that is not a valid name
/// prefix (`NameIsDNSSubdomain(prefix, true)`: the trailing dash stands for a character).
pub fn subset_prefix(ud: &str, subset: &str) -> String {
    let prefix = format!("{ud}-{subset}-");
    let masked = format!("{}a", &prefix[..prefix.len() - 1]);
    if is_dns1123_subdomain(&masked) {
        prefix
    } else {
        format!("{ud}-")
    }
}

fn is_dns1123_subdomain(value: &str) -> bool {
    !value.is_empty()
        && value.len() <= 253
        && value
            .split('.')
            .all(|part| kruise_api::validation::check_dns1123_label(part).is_ok())
}

/// Appends the subset's node selector requirements to every required node selector term of a Pod spec
/// (JSON), adding one term when there is none; nothing when the subset has no `matchExpressions`.
pub fn attach_node_affinity(pod_spec: &mut Map<String, Value>, subset: &Subset) {
    let expressions = subset
        .node_selector_term
        .match_expressions
        .clone()
        .unwrap_or_default();
    if expressions.is_empty() {
        return;
    }
    let affinity = object_at(pod_spec, "affinity");
    let node = object_at(affinity, "nodeAffinity");
    let required = object_at(node, "requiredDuringSchedulingIgnoredDuringExecution");
    let terms = required
        .entry("nodeSelectorTerms")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !terms.is_array() {
        *terms = Value::Array(Vec::new());
    }
    let Value::Array(terms) = terms else {
        return;
    };
    if terms.is_empty() {
        terms.push(Value::Object(Map::new()));
    }
    let values: Vec<Value> = expressions
        .iter()
        .filter_map(|e| serde_json::to_value(e).ok())
        .collect();
    for term in terms.iter_mut() {
        if !term.is_object() {
            *term = Value::Object(Map::new());
        }
        if let Value::Object(term) = term {
            let list = term
                .entry("matchExpressions")
                .or_insert_with(|| Value::Array(Vec::new()));
            if !list.is_array() {
                *list = Value::Array(Vec::new());
            }
            if let Value::Array(list) = list {
                list.extend(values.iter().cloned());
            }
        }
    }
}

/// Appends the subset's tolerations to a Pod spec (JSON).
pub fn attach_tolerations(pod_spec: &mut Map<String, Value>, subset: &Subset) {
    if subset.tolerations.is_empty() {
        return;
    }
    let list = pod_spec
        .entry("tolerations")
        .or_insert_with(|| Value::Array(Vec::new()));
    if !list.is_array() {
        *list = Value::Array(Vec::new());
    }
    if let Value::Array(list) = list {
        list.extend(
            subset
                .tolerations
                .iter()
                .filter_map(|t| serde_json::to_value(t).ok()),
        );
    }
}

/// The object under `key`, created (or replaced, if it is not an object).
fn object_at<'a>(map: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let slot = map
        .entry(key.to_string())
        .or_insert_with(|| Value::Object(Map::new()));
    if !slot.is_object() {
        *slot = Value::Object(Map::new());
    }
    match slot {
        Value::Object(inner) => inner,
        _ => unreachable!("just made an object"),
    }
}

/// The raw subset patch as the `apps.kruise.io/subset-patch` annotation holds it ("" without a patch).
pub fn patch_annotation(subset: &Subset) -> String {
    subset
        .patch
        .as_ref()
        .map(|p| serde_json::to_string(p).unwrap_or_default())
        .unwrap_or_default()
}

/// The subset workload a UnitedDeployment asks for, as the JSON object to create (OpenKruise's
/// `ApplySubsetTemplate`): `generateName`, labels, annotations, controller reference `owner`, and the
/// template's spec with the UD selector plus the subset name, `replicas`, the partition, the subset
/// name and revision on the Pod template, the subset's node selector terms and tolerations, and its
/// strategic-merge `patch` applied last.
pub fn subset_workload(
    ud: &UnitedDeployment,
    subset_name: &str,
    revision: &str,
    replicas: i32,
    partition: i32,
    owner: &OwnerReference,
) -> Result<Value, String> {
    let subset = ud
        .spec
        .topology
        .subsets
        .iter()
        .find(|s| s.name == subset_name)
        .ok_or_else(|| format!("fail to find subset config {subset_name}"))?;
    let template = &ud.spec.template;
    let kind = TemplateKind::of(template).ok_or("the UnitedDeployment has no template")?;
    let to_json = |v: Result<Value, serde_json::Error>| v.map_err(|e| e.to_string());
    let (metadata, spec) = match kind {
        TemplateKind::StatefulSet => {
            let t = template
                .stateful_set_template
                .as_ref()
                .ok_or("no template")?;
            (&t.metadata, to_json(serde_json::to_value(&t.spec))?)
        }
        TemplateKind::AdvancedStatefulSet => {
            let t = template
                .advanced_stateful_set_template
                .as_ref()
                .ok_or("no template")?;
            (&t.metadata, to_json(serde_json::to_value(&t.spec))?)
        }
        TemplateKind::CloneSet => {
            let t = template.clone_set_template.as_ref().ok_or("no template")?;
            (&t.metadata, to_json(serde_json::to_value(&t.spec))?)
        }
        TemplateKind::Deployment => {
            let t = template.deployment_template.as_ref().ok_or("no template")?;
            (&t.metadata, to_json(serde_json::to_value(&t.spec))?)
        }
    };
    let Value::Object(mut spec) = spec else {
        return Err("the workload template spec is not an object".into());
    };

    let selector = ud.spec.selector.clone().unwrap_or_default();
    let mut labels = metadata.labels.clone().unwrap_or_default();
    labels.extend(selector.match_labels.clone().unwrap_or_default());
    labels.insert(keys::LABEL_CONTROLLER_REVISION_HASH.into(), revision.into());
    labels.insert(keys::LABEL_SUBSET_NAME.into(), subset_name.into());
    let mut annotations = metadata.annotations.clone().unwrap_or_default();
    annotations.insert(
        keys::ANNOTATION_SUBSET_PATCH.into(),
        patch_annotation(subset),
    );

    let mut subset_selector = selector;
    subset_selector
        .match_labels
        .get_or_insert_with(Default::default)
        .insert(keys::LABEL_SUBSET_NAME.into(), subset_name.into());
    spec.insert(
        "selector".into(),
        serde_json::to_value(&subset_selector).map_err(|e| e.to_string())?,
    );
    spec.insert("replicas".into(), json!(replicas));
    match kind {
        TemplateKind::StatefulSet | TemplateKind::AdvancedStatefulSet => {
            let strategy = object_at(&mut spec, "updateStrategy");
            let type_ = strategy
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            if type_.is_empty() || type_ == "RollingUpdate" {
                // Upstream writes the defaulted type only into native StatefulSets.
                if kind == TemplateKind::StatefulSet {
                    strategy.insert("type".into(), json!("RollingUpdate"));
                }
                object_at(strategy, "rollingUpdate").insert("partition".into(), json!(partition));
            }
        }
        TemplateKind::CloneSet => {
            let strategy = object_at(&mut spec, "updateStrategy");
            object_at(strategy, "rollingUpdate").insert("partition".into(), json!(partition));
        }
        TemplateKind::Deployment => {}
    }

    let mut pod_template = spec.remove("template").unwrap_or(json!({}));
    if !pod_template.is_object() {
        pod_template = json!({});
    }
    if let Value::Object(t) = &mut pod_template {
        let meta = object_at(t, "metadata");
        let pod_labels = object_at(meta, "labels");
        pod_labels.insert(keys::LABEL_SUBSET_NAME.into(), json!(subset_name));
        pod_labels.insert(keys::LABEL_CONTROLLER_REVISION_HASH.into(), json!(revision));
        let pod_spec = object_at(t, "spec");
        attach_node_affinity(pod_spec, subset);
        attach_tolerations(pod_spec, subset);
    }
    if let Some(patch) = &subset.patch {
        pod_template = strategic_merge(&pod_template, patch)
            .map_err(|e| format!("subset {subset_name} patch: {e}"))?;
    }
    spec.insert("template".into(), pod_template);

    Ok(json!({
        "apiVersion": kind.api_version(),
        "kind": kind.kind(),
        "metadata": {
            "generateName": subset_prefix(ud.metadata.name.as_deref().unwrap_or_default(), subset_name),
            "namespace": ud.metadata.namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner],
        },
        "spec": spec,
    }))
}

/// A subset workload's partition as its spec holds it (a CloneSet's may be a percentage of its
/// replicas, rounded up); `None` when it has none.
pub fn workload_partition(kind: TemplateKind, workload: &Value) -> Option<i32> {
    let value = workload.pointer(kind.partition_pointer()?)?;
    match value {
        Value::Number(n) => n.as_i64().map(clamp_i32),
        Value::String(s) => {
            let replicas = workload
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .map_or(1, clamp_i32);
            kruise_api::intstr::scaled_value(
                &k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s.clone()),
                replicas,
                kruise_api::intstr::Round::Up,
            )
            .ok()
        }
        _ => None,
    }
}

/// Updated and updated-ready Pods of a subset: active Pods whose UnitedDeployment revision label is
/// `revision` (`CalculateUpdatedReplicas`).
pub fn updated_replicas<'a>(pods: impl IntoIterator<Item = &'a Pod>, revision: &str) -> (i32, i32) {
    let mut updated = 0;
    let mut ready = 0;
    for pod in pods {
        if pods::label(pod, keys::LABEL_CONTROLLER_REVISION_HASH) == Some(revision)
            && pods::is_active(pod)
        {
            updated += 1;
            if pods::is_ready(pod) {
                ready += 1;
            }
        }
    }
    (updated, ready)
}

/// OpenKruise's k8s#67250 workaround for native StatefulSet subsets: a Pod at or above the partition,
/// not at `revision` and not Ready would block the rolling update forever; it is deleted.
pub fn is_stuck_for_rolling_update(pod: &Pod, revision: &str, partition: i32) -> bool {
    let ordinal = pod
        .metadata
        .name
        .as_deref()
        .and_then(|n| n.rsplit('-').next())
        .and_then(|o| o.parse::<i64>().ok())
        .unwrap_or(-1);
    if ordinal < i64::from(partition) {
        return false;
    }
    if pods::label(pod, keys::LABEL_CONTROLLER_REVISION_HASH) == Some(revision) {
        return false;
    }
    !pods::is_ready(pod)
}

#[cfg(test)]
mod tests;
