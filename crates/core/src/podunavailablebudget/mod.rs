//! PodUnavailableBudget decisions (upstream `pkg/control/pubcontrol` and
//! `pkg/controller/podunavailablebudget`), as pure functions of a budget and its Pods:
//! - the admission of one voluntary disruption (delete, evict, in-place update): [`admit`], which
//!   either lets it through unrecorded, refuses it, or takes one unit of the budget and records the
//!   Pod in `disruptedPods` / `unavailablePods`; the webhook writes that record with a
//!   resourceVersion precondition, so two admissions computed from the same copy cannot both land;
//! - the status the controller computes: [`compute_status`].

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kruise_api::intstr::{IntOrPercent, Round};
use kruise_api::keys::LABEL_PREFIX_UNAVAILABLE_POD;
use kruise_api::policy::v1alpha1::{
    PodUnavailableBudgetSpec, PodUnavailableBudgetStatus, PubOperation,
};
use kruise_api::policy::{POD_NO_PROTECT_ANNOTATION, PUB_PROTECT_OPERATIONS_ANNOTATION};

use crate::inplace::{Completion, check_completed};
use crate::pods;

/// How long a Pod admitted for deletion or eviction stays recorded (and uncounted) before the
/// controller gives up waiting for it to go (upstream's `DeletionTimeout`).
pub const DELETION_TIMEOUT: SignedDuration = SignedDuration::from_secs(20);
/// How long a Pod admitted for an update stays recorded (upstream's `UpdatedDelayCheckTime`).
pub const UPDATE_DELAY: SignedDuration = SignedDuration::from_secs(10);
/// Refuse once this many Pods are recorded and not yet confirmed (upstream's `MaxUnavailablePodSize`).
pub const MAX_RECORDED_PODS: usize = 2000;

/// The operations a budget guards, from its `kruise.io/pub-protect-operations` annotation: absent or
/// empty means DELETE, UPDATE and EVICT. Without in-place vertical scaling (the
/// `InPlacePodVerticalScaling` gate off), guarding UPDATE guards RESIZE too.
pub fn protected_operations(
    annotation: Option<&str>,
    vertical_scaling: bool,
) -> BTreeSet<PubOperation> {
    let mut operations = BTreeSet::new();
    match annotation.filter(|v| !v.is_empty()) {
        None => {
            operations.extend([
                PubOperation::Delete,
                PubOperation::Update,
                PubOperation::Evict,
            ]);
        }
        Some(value) => operations.extend(value.split(',').filter_map(PubOperation::parse)),
    }
    if !vertical_scaling && operations.contains(&PubOperation::Update) {
        operations.insert(PubOperation::Resize);
    }
    operations
}

/// Whether a budget with `budget_annotations` guards the deletion or eviction of `pod` at all: the
/// Pod is not annotated `pub.kruise.io/no-protect` and the budget guards DELETE or EVICT. Such a Pod
/// is labelled `policy.kruise.io/guarded`, so that its deletion is refused while the webhook is down.
pub fn guards_removal(budget_annotations: Option<&BTreeMap<String, String>>, pod: &Pod) -> bool {
    if pods::annotation(pod, POD_NO_PROTECT_ANNOTATION) == Some("true") {
        return false;
    }
    let operations = protected_operations(
        budget_annotations
            .and_then(|a| a.get(PUB_PROTECT_OPERATIONS_ANNOTATION))
            .map(String::as_str),
        false,
    );
    operations.contains(&PubOperation::Delete) || operations.contains(&PubOperation::Evict)
}

/// Whether `pod` carries `policy.kruise.io/guarded`.
pub fn is_labelled_guarded(pod: &Pod) -> bool {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(kruise_api::policy::POD_GUARDED_LABEL))
        .is_some_and(|v| v == kruise_api::policy::POD_GUARDED_VALUE)
}

/// Carries an `unavailable-pod.kruise.io/…` label.
pub fn has_unavailable_label(pod: &Pod) -> bool {
    pod.metadata.labels.as_ref().is_some_and(|l| {
        l.keys()
            .any(|k| k.starts_with(LABEL_PREFIX_UNAVAILABLE_POD))
    })
}

/// Running, Ready and not labelled unavailable (upstream's `IsPodReady` of pubcontrol).
pub fn is_ready(pod: &Pod) -> bool {
    pods::is_running_and_ready(pod) && !has_unavailable_label(pod)
}

/// The Pod runs what its spec says: every container whose image is pinned by digest runs that
/// digest; otherwise no sidecar a SidecarSet changed in place is still on its old image and no
/// in-place update of its workload is in flight (upstream's `IsPodStateConsistent`).
pub fn is_state_consistent(pod: &Pod) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return true;
    };
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref());
    let mut all_digests = true;
    for container in &spec.containers {
        let Some(digest) = container.image.as_deref().and_then(image_digest) else {
            all_digests = false;
            continue;
        };
        let runs = statuses
            .and_then(|list| list.iter().find(|s| s.name == container.name))
            .and_then(|s| image_digest(&s.image_id));
        if runs != Some(digest) {
            return false;
        }
    }
    all_digests
        || (crate::sidecarset::upgrade::sidecar_updates_completed(pod)
            && check_completed(pod) == Completion::Done)
}

fn image_digest(reference: &str) -> Option<&str> {
    reference
        .rsplit_once('@')
        .map(|(_, digest)| digest)
        .filter(|d| d.contains(':'))
}

/// Counted as available by the budget: ready and consistent.
pub fn is_available(pod: &Pod) -> bool {
    is_ready(pod) && is_state_consistent(pod)
}

/// Whether an update of `old` into `new` may make the Pod unavailable: the spec changed, or an
/// unavailable label appeared (upstream's `IsPodUnavailableChanged`).
pub fn update_may_disrupt(old: &Pod, new: &Pod) -> bool {
    old.spec != new.spec || (!has_unavailable_label(old) && has_unavailable_label(new))
}

/// Kubernetes' annotation naming where a Pod came from; `api` for the apiserver, else a static Pod.
const CONFIG_SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";

/// The resources a Pod can resize without a restart (upstream's `allowedResizeResourceKey`).
const RESIZABLE: [&str; 2] = ["cpu", "memory"];

/// Whether an update of `old` into `new` is a resize that keeps the Pod available, so the budget
/// decides it as RESIZE rather than UPDATE (upstream's `CanResizeInplace`): no unavailable label
/// appears, nothing but container resources changed, neither copy is a static Pod, the QoS class
/// stays, and every changed resource is cpu or memory whose `resizePolicy` does not restart the
/// container (a missing value must be present on both sides to count as unchanged, as upstream:
/// the kubelet does not fill in what the scheduler assumes).
pub fn resize_in_place(old: &Pod, new: &Pod) -> bool {
    if !has_unavailable_label(old) && has_unavailable_label(new) {
        return false;
    }
    let without_resources = |pod: &Pod| {
        let mut spec = pod.spec.clone().unwrap_or_default();
        // Init containers are left as they are: they do not change (upstream's note).
        for c in &mut spec.containers {
            c.resources = None;
        }
        spec
    };
    if without_resources(old) != without_resources(new) {
        return false;
    }
    let is_static = |pod: &Pod| {
        pods::annotation(pod, CONFIG_SOURCE_ANNOTATION).is_some_and(|source| source != "api")
    };
    if is_static(old) || is_static(new) {
        return false;
    }
    if crate::inplace::qos_class(old.spec.as_ref()) != crate::inplace::qos_class(new.spec.as_ref())
    {
        return false;
    }
    resources_resizable(old, new)
}

fn resources_resizable(old: &Pod, new: &Pod) -> bool {
    let (old, new) = (containers(old), containers(new));
    if old.len() != new.len() {
        return false;
    }
    new.iter().all(|container| {
        old.iter()
            .find(|c| c.name == container.name)
            .is_some_and(|before| container_resizable(before, container))
    })
}

fn containers(pod: &Pod) -> &[Container] {
    pod.spec.as_ref().map_or(&[], |s| &s.containers)
}

type Resources = BTreeMap<String, Quantity>;

fn requests_and_limits(c: &Container) -> (Option<&Resources>, Option<&Resources>) {
    let r = c.resources.as_ref();
    (
        r.and_then(|r| r.requests.as_ref()),
        r.and_then(|r| r.limits.as_ref()),
    )
}

/// Every resource of the container that changed may be resized without a restart.
fn container_resizable(old: &Container, new: &Container) -> bool {
    let (old_requests, old_limits) = requests_and_limits(old);
    let (new_requests, new_limits) = requests_and_limits(new);
    let names: BTreeSet<&String> = [old_requests, old_limits, new_requests, new_limits]
        .into_iter()
        .flatten()
        .flat_map(BTreeMap::keys)
        .collect();
    let changed = |name: &str, a: Option<&Resources>, b: Option<&Resources>| match (
        a.and_then(|m| m.get(name)),
        b.and_then(|m| m.get(name)),
    ) {
        (None, None) => false,
        (Some(a), Some(b)) => !crate::inplace::flow::same_quantity(&a.0, &b.0),
        _ => true,
    };
    names.into_iter().all(|name| {
        let unchanged =
            !changed(name, old_requests, new_requests) && !changed(name, old_limits, new_limits);
        unchanged
            || (RESIZABLE.contains(&name.as_str())
                && !new.resize_policy.iter().flatten().any(|p| {
                    &p.resource_name == name
                        && !p.restart_policy.is_empty()
                        && p.restart_policy != "NotRequired"
                }))
    })
}

/// The Pods that must stay available out of `total` (upstream's `getDesiredAvailableForPub`):
/// `total - maxUnavailable` (percent rounded up, never below 0), or `minAvailable` (percent rounded
/// up), or 0 when neither is set.
pub fn desired_available(spec: &PodUnavailableBudgetSpec, total: i32) -> Result<i32, String> {
    if let Some(max) = &spec.max_unavailable {
        let max = IntOrPercent::parse(max).map_err(|e| format!("spec.maxUnavailable: {e}"))?;
        return Ok((total - max.scaled(total, Round::Up)).max(0));
    }
    if let Some(min) = &spec.min_available {
        let min = IntOrPercent::parse(min).map_err(|e| format!("spec.minAvailable: {e}"))?;
        return Ok(min.scaled(total, Round::Up));
    }
    Ok(0)
}

/// What [`admit`] decided.
#[derive(Clone, Debug, PartialEq)]
pub enum Admission {
    /// Allowed without touching the budget (not guarded, not counted, already recorded, ...).
    Pass(&'static str),
    /// Allowed: this status (one unit taken, the Pod recorded) must be written first.
    Take(PodUnavailableBudgetStatus),
    /// Refused with upstream's message.
    Refuse(String),
}

/// What the webhook knows of one disruption.
pub struct Request<'a> {
    pub pod: &'a Pod,
    pub operation: PubOperation,
    /// The budget's name and annotations.
    pub pub_name: &'a str,
    pub pub_annotations: Option<&'a BTreeMap<String, String>>,
    pub vertical_scaling: bool,
    pub now: Timestamp,
}

/// Decides one disruption against the budget's current `status` (upstream's
/// `PodUnavailableBudgetValidatePod` and `checkAndDecrement`).
pub fn admit(request: &Request<'_>, status: &PodUnavailableBudgetStatus) -> Admission {
    let pod = request.pod;
    if pods::annotation(pod, POD_NO_PROTECT_ANNOTATION) == Some("true") {
        return Admission::Pass("the Pod is annotated pub.kruise.io/no-protect");
    }
    if !is_ready(pod) || !is_state_consistent(pod) {
        return Admission::Pass("the Pod is not available: it does not count");
    }
    if status.desired_available == 0 {
        return Admission::Pass("the budget desires no available Pod");
    }
    let operations = protected_operations(
        request
            .pub_annotations
            .and_then(|a| a.get(PUB_PROTECT_OPERATIONS_ANNOTATION))
            .map(String::as_str),
        request.vertical_scaling,
    );
    if !operations.contains(&request.operation) {
        return Admission::Pass("the budget does not guard this operation");
    }
    let name = pod.metadata.name.clone().unwrap_or_default();
    let recorded =
        |m: &Option<BTreeMap<String, Time>>| m.as_ref().is_some_and(|m| m.contains_key(&name));
    if recorded(&status.disrupted_pods) || recorded(&status.unavailable_pods) {
        return Admission::Pass("the Pod is already recorded in the budget");
    }
    let forbidden = |why: &str| {
        format!(
            "podunavailablebudgets.policy.kruise.io \"{}\" is forbidden: {why}",
            request.pub_name
        )
    };
    if status.unavailable_allowed <= 0 {
        return Admission::Refuse(forbidden("pub unavailable allowed is negative"));
    }
    let size = |m: &Option<BTreeMap<String, Time>>| m.as_ref().map_or(0, BTreeMap::len);
    if size(&status.disrupted_pods) + size(&status.unavailable_pods) > MAX_RECORDED_PODS {
        return Admission::Refuse(forbidden(
            "DisruptedPods and UnavailablePods map too big - too many unavailable not confirmed by PUB controller",
        ));
    }
    let mut next = status.clone();
    next.unavailable_allowed -= 1;
    let disrupted = next.disrupted_pods.get_or_insert_default();
    let unavailable = next.unavailable_pods.get_or_insert_default();
    match request.operation {
        PubOperation::Update => unavailable.insert(name, Time(request.now)),
        _ => disrupted.insert(name, Time(request.now)),
    };
    Admission::Take(next)
}

/// The status the controller writes, and how soon to compute it again (the earliest expiry of a
/// record), for the budget's `pods` (those it counts), `total` replicas expected and `desired`
/// available (see [`desired_available`]).
pub fn compute_status(
    pods: &[&Pod],
    previous: &PodUnavailableBudgetStatus,
    generation: i64,
    total: i32,
    desired: i32,
    now: Timestamp,
) -> (PodUnavailableBudgetStatus, Option<SignedDuration>) {
    let mut disrupted = BTreeMap::new();
    let mut unavailable = BTreeMap::new();
    let mut recheck: Option<SignedDuration> = None;
    let mut soonest = |at: Timestamp| {
        let wait = at.duration_since(now);
        recheck = Some(recheck.map_or(wait, |r| r.min(wait)));
    };
    for pod in pods.iter().filter(|p| pods::is_active(p)) {
        let name = pod.metadata.name.clone().unwrap_or_default();
        if let Some(at) = previous.disrupted_pods.as_ref().and_then(|m| m.get(&name))
            && let Ok(expires) = at.0.checked_add(DELETION_TIMEOUT)
            && expires >= now
        {
            disrupted.insert(name.clone(), at.clone());
            soonest(expires);
        }
        if let Some(at) = previous
            .unavailable_pods
            .as_ref()
            .and_then(|m| m.get(&name))
            && let Ok(expires) = at.0.checked_add(UPDATE_DELAY)
            && expires >= now
        {
            unavailable.insert(name.clone(), at.clone());
            soonest(expires);
        }
    }
    let current = pods
        .iter()
        .filter(|p| pods::is_active(p))
        .filter(|p| {
            let name = p.metadata.name.as_deref().unwrap_or_default();
            !disrupted.contains_key(name) && !unavailable.contains_key(name)
        })
        .filter(|p| is_available(p))
        .count();
    let current = i32::try_from(current).unwrap_or(i32::MAX);
    let status = PodUnavailableBudgetStatus {
        observed_generation: generation,
        disrupted_pods: (!disrupted.is_empty()).then_some(disrupted),
        unavailable_pods: (!unavailable.is_empty()).then_some(unavailable),
        unavailable_allowed: (current - desired).max(0),
        current_available: current,
        desired_available: desired,
        total_replicas: total,
    };
    (status, recheck)
}

/// Whether two statuses say the same (an absent map and an empty one are equal).
pub fn same_status(a: &PodUnavailableBudgetStatus, b: &PodUnavailableBudgetStatus) -> bool {
    let empty = BTreeMap::new();
    a.observed_generation == b.observed_generation
        && a.unavailable_allowed == b.unavailable_allowed
        && a.current_available == b.current_available
        && a.desired_available == b.desired_available
        && a.total_replicas == b.total_replicas
        && a.disrupted_pods.as_ref().unwrap_or(&empty)
            == b.disrupted_pods.as_ref().unwrap_or(&empty)
        && a.unavailable_pods.as_ref().unwrap_or(&empty)
            == b.unavailable_pods.as_ref().unwrap_or(&empty)
}

/// What deletion protection decides for an object labelled `policy.kruise.io/delete-protection`
/// (upstream `pkg/webhook/util/deletionprotection`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protection {
    /// No label, another value, or the object is already being deleted.
    None,
    Always,
    Cascading,
}

/// The protection of an object with `labels`, unless it is already being deleted.
pub fn protection(labels: Option<&BTreeMap<String, String>>, deleting: bool) -> Protection {
    if deleting {
        return Protection::None;
    }
    match labels
        .and_then(|l| l.get(kruise_api::policy::DELETE_PROTECTION_LABEL))
        .map(String::as_str)
    {
        Some(kruise_api::policy::DELETE_PROTECTION_ALWAYS) => Protection::Always,
        Some(kruise_api::policy::DELETE_PROTECTION_CASCADING) => Protection::Cascading,
        _ => Protection::None,
    }
}

/// Upstream's refusal for `Always`.
pub fn always_refusal(value: &str) -> String {
    format!(
        "forbidden by ResourcesProtectionDeletion for {}={value}",
        kruise_api::policy::DELETE_PROTECTION_LABEL
    )
}

/// The refusal of deleting a workload with `replicas` (upstream's `ValidateWorkloadDeletion`).
pub fn workload_deletion(
    labels: Option<&BTreeMap<String, String>>,
    deleting: bool,
    replicas: Option<i32>,
) -> Option<String> {
    match protection(labels, deleting) {
        Protection::None => None,
        Protection::Always => Some(always_refusal(kruise_api::policy::DELETE_PROTECTION_ALWAYS)),
        Protection::Cascading => replicas.filter(|r| *r > 0).map(|r| {
            format!(
                "forbidden by ResourcesProtectionDeletion for {}={} and replicas {r}>0",
                kruise_api::policy::DELETE_PROTECTION_LABEL,
                kruise_api::policy::DELETE_PROTECTION_CASCADING
            )
        }),
    }
}

/// The Cascading refusal of deleting a Namespace with `active_pods` active Pods and `bound_pvcs`
/// Bound claims (not being deleted), upstream's order: Pods first.
pub fn namespace_cascading(active_pods: usize, bound_pvcs: usize) -> Option<String> {
    let key = kruise_api::policy::DELETE_PROTECTION_LABEL;
    let value = kruise_api::policy::DELETE_PROTECTION_CASCADING;
    if active_pods > 0 {
        return Some(format!(
            "forbidden by ResourcesProtectionDeletion for {key}={value} and active pods {active_pods}>0"
        ));
    }
    if bound_pvcs > 0 {
        return Some(format!(
            "forbidden by ResourcesProtectionDeletion for {key}={value} and \"Bound\" status pvc {bound_pvcs}>0"
        ));
    }
    None
}

/// The Cascading refusal of deleting a CRD with `active` custom resources not being deleted.
pub fn crd_cascading(active: usize) -> Option<String> {
    (active > 0).then(|| {
        format!(
            "forbidden by ResourcesProtectionDeletion for {}={} and active CRs {active}>0",
            kruise_api::policy::DELETE_PROTECTION_LABEL,
            kruise_api::policy::DELETE_PROTECTION_CASCADING
        )
    })
}

pub mod matching;
#[cfg(test)]
mod tests;
