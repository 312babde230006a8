//! Whether a Pod may run on a Node, as the workloads that place one Pod per node (Advanced DaemonSet,
//! BroadcastJob) decide it before the scheduler is asked: `spec.nodeName`, `nodeSelector`, the required
//! node affinity, taints against tolerations, `spec.unschedulable` and resource requests against
//! allocatable. The rules are Kubernetes' own (component-helpers' node affinity and the taint helpers
//! the DaemonSet controller uses), so a node we pick is a node the real scheduler accepts.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PodSpec, Taint,
    Toleration,
};
use kruise_api::quantity::{Format, Quantity};

/// Taint the node lifecycle controller puts on a node whose `spec.unschedulable` is true.
pub const TAINT_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";
pub const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";
pub const TAINT_UNREACHABLE: &str = "node.kubernetes.io/unreachable";
pub const TAINT_DISK_PRESSURE: &str = "node.kubernetes.io/disk-pressure";
pub const TAINT_MEMORY_PRESSURE: &str = "node.kubernetes.io/memory-pressure";
pub const TAINT_PID_PRESSURE: &str = "node.kubernetes.io/pid-pressure";
pub const TAINT_NETWORK_UNAVAILABLE: &str = "node.kubernetes.io/network-unavailable";

pub const EFFECT_NO_SCHEDULE: &str = "NoSchedule";
pub const EFFECT_NO_EXECUTE: &str = "NoExecute";

/// Why a Pod does not fit a node; the text names the rule so that a status message or Event can say
/// which one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Misfit {
    /// `spec.nodeName` names another node.
    NodeName(String),
    /// `spec.nodeSelector` or the required node affinity does not select the node.
    NodeAffinity,
    /// A taint with this key and effect is not tolerated.
    Taint { key: String, effect: String },
    /// The node is cordoned and the Pod does not tolerate `node.kubernetes.io/unschedulable`.
    Unschedulable,
    /// The Pod requests more of this resource than the node can allocate.
    Resources(String),
}

impl std::fmt::Display for Misfit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Misfit::NodeName(name) => write!(f, "the Pod's nodeName is {name}"),
            Misfit::NodeAffinity => {
                f.write_str("node(s) didn't match Pod's node affinity/selector")
            }
            Misfit::Taint { key, effect } => {
                write!(f, "node(s) had untolerated taint {key}:{effect}")
            }
            Misfit::Unschedulable => f.write_str("node(s) were unschedulable"),
            Misfit::Resources(resource) => write!(f, "Insufficient {resource}"),
        }
    }
}

/// `spec.nodeName`, `nodeSelector` and the required node affinity.
pub fn placement_fits(spec: &PodSpec, node: &Node) -> Result<(), Misfit> {
    let name = node_name(node);
    if let Some(wanted) = spec.node_name.as_deref().filter(|n| !n.is_empty())
        && wanted != name
    {
        return Err(Misfit::NodeName(wanted.to_string()));
    }
    if selects_node(spec, node) {
        Ok(())
    } else {
        Err(Misfit::NodeAffinity)
    }
}

/// Whether `nodeSelector` and the required node affinity of `spec` both select `node`.
pub fn selects_node(spec: &PodSpec, node: &Node) -> bool {
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    let selector_ok = spec
        .node_selector
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let required = required_node_affinity(spec);
    // Terms are ORed; a required affinity without terms (or whose terms are all empty) selects nothing.
    let affinity_ok = required.is_none_or(|r| {
        r.node_selector_terms
            .iter()
            .any(|term| term_matches(term, labels, node_name(node)))
    });
    selector_ok && affinity_ok
}

/// The required node affinity of `spec` (`requiredDuringSchedulingIgnoredDuringExecution`), if
/// any: what [`selects_node`] checks, and what a WorkloadSpread subset's required term is ANDed into.
pub fn required_node_affinity(spec: &PodSpec) -> Option<&NodeSelector> {
    spec.affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()
}

/// Whether one node selector term (its expressions and fields ANDed) selects `node`; an empty term
/// selects nothing.
pub fn term_selects(term: &NodeSelectorTerm, node: &Node) -> bool {
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    term_matches(term, labels, node_name(node))
}

fn term_matches(term: &NodeSelectorTerm, labels: &BTreeMap<String, String>, name: &str) -> bool {
    let expressions = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if expressions.is_empty() && fields.is_empty() {
        return false;
    }
    expressions
        .iter()
        .all(|r| requirement_matches(r, labels.get(&r.key).map(String::as_str)))
        && fields.iter().all(|r| {
            // `metadata.name` is the only field a node selector may name.
            r.key == "metadata.name"
                && matches!(r.operator.as_str(), "In" | "NotIn")
                && requirement_matches(r, Some(name))
        })
}

/// One `In`/`NotIn`/`Exists`/`DoesNotExist`/`Gt`/`Lt` requirement against the value the node has for
/// its key (None when the node lacks the label).
fn requirement_matches(req: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = req.values.as_deref().unwrap_or_default();
    match req.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|w| w == v)),
        "NotIn" => value.is_none_or(|v| values.iter().all(|w| w != v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        op @ ("Gt" | "Lt") => {
            let ([bound], Some(value)) = (values, value) else {
                return false;
            };
            match (value.parse::<i64>(), bound.parse::<i64>()) {
                (Ok(v), Ok(b)) if op == "Gt" => v > b,
                (Ok(v), Ok(b)) => v < b,
                _ => false,
            }
        }
        _ => false,
    }
}

/// Whether `toleration` tolerates `taint` (Kubernetes' `ToleratesTaint`): an effect, when set, must be
/// the taint's; a key, when set, must be the taint's (an empty key with `Exists` tolerates every taint);
/// `Exists` ignores the value, `Equal` (the default) compares it.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    if let Some(effect) = toleration.effect.as_deref().filter(|e| !e.is_empty())
        && effect != taint.effect
    {
        return false;
    }
    if let Some(key) = toleration.key.as_deref().filter(|k| !k.is_empty())
        && key != taint.key
    {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        "Equal" | "" => {
            toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
        _ => false,
    }
}

/// The first taint of `node` with one of `effects` that no toleration of `spec` tolerates.
pub fn untolerated_taint<'a>(
    spec: &PodSpec,
    node: &'a Node,
    effects: &[&str],
) -> Option<&'a Taint> {
    let tolerations = spec.tolerations.as_deref().unwrap_or_default();
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default()
        .iter()
        .filter(|t| effects.contains(&t.effect.as_str()))
        .find(|t| !tolerations.iter().any(|tol| tolerates(tol, t)))
}

/// Everything but resources: placement, NoSchedule/NoExecute taints, and a cordoned node (which the
/// Pod must tolerate as the `node.kubernetes.io/unschedulable` taint, as the scheduler requires).
pub fn pod_fits(spec: &PodSpec, node: &Node) -> Result<(), Misfit> {
    placement_fits(spec, node)?;
    if let Some(taint) = untolerated_taint(spec, node, &[EFFECT_NO_SCHEDULE, EFFECT_NO_EXECUTE]) {
        return Err(Misfit::Taint {
            key: taint.key.clone(),
            effect: taint.effect.clone(),
        });
    }
    let cordoned = node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    if cordoned {
        let as_taint = Taint {
            key: TAINT_UNSCHEDULABLE.to_string(),
            effect: EFFECT_NO_SCHEDULE.to_string(),
            ..Taint::default()
        };
        let tolerations = spec.tolerations.as_deref().unwrap_or_default();
        if !tolerations.iter().any(|t| tolerates(t, &as_taint)) {
            return Err(Misfit::Unschedulable);
        }
    }
    Ok(())
}

/// Requests of `spec` plus those already `used` on the node, against the node's allocatable (the
/// scheduler's NodeResourcesFit). A Pod counts as one of the node's `pods`. Resources the node does not
/// list are not checked, except that a positive request for an extended resource the node lacks fails.
pub fn requests_fit(
    spec: &PodSpec,
    node: &Node,
    used: &BTreeMap<String, Quantity>,
) -> Result<(), Misfit> {
    let allocatable = node
        .status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .cloned()
        .unwrap_or_default();
    let mut wanted = pod_requests(spec);
    wanted.insert(
        "pods".to_string(),
        Quantity::from_decimal(false, 1, 0, Format::DecimalSi),
    );
    for (resource, request) in &wanted {
        let total = match used.get(resource) {
            Some(u) => request.checked_add(u).unwrap_or_else(|| request.clone()),
            None => request.clone(),
        };
        if total.is_zero() || total.is_negative() {
            continue;
        }
        match allocatable.get(resource).map(|q| Quantity::parse(&q.0)) {
            Some(Ok(limit)) if total.cmp_value(&limit).is_gt() => {
                return Err(Misfit::Resources(resource.clone()));
            }
            Some(_) => {}
            None if is_extended(resource) => return Err(Misfit::Resources(resource.clone())),
            None => {}
        }
    }
    Ok(())
}

/// Extended resources are the ones outside the `kubernetes.io` namespace that the scheduler does not
/// ignore when a node lacks them (`example.com/gpu`), plus hugepages.
fn is_extended(resource: &str) -> bool {
    resource.starts_with("hugepages-")
        || (resource.contains('/') && !resource.starts_with("kubernetes.io/"))
}

/// The Pod's effective requests: the larger of the sum over app containers (plus restartable init
/// containers, which keep running) and each ordinary init container, plus the Pod overhead.
pub fn pod_requests(spec: &PodSpec) -> BTreeMap<String, Quantity> {
    let requests_of = |c: &Container| -> BTreeMap<String, Quantity> {
        c.resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Quantity::parse(&v.0).ok().map(|q| (k.clone(), q)))
            .collect()
    };
    let mut sum = BTreeMap::new();
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    for c in spec.containers.iter().chain(sidecars) {
        add_into(&mut sum, &requests_of(c));
    }
    for c in spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() != Some("Always"))
    {
        for (k, q) in requests_of(c) {
            let bigger = sum
                .get(&k)
                .is_none_or(|s: &Quantity| q.cmp_value(s).is_gt());
            if bigger {
                sum.insert(k, q);
            }
        }
    }
    if let Some(overhead) = &spec.overhead {
        let parsed: BTreeMap<String, Quantity> = overhead
            .iter()
            .filter_map(|(k, v)| Quantity::parse(&v.0).ok().map(|q| (k.clone(), q)))
            .collect();
        add_into(&mut sum, &parsed);
    }
    sum
}

/// Adds `more` into `into`, resource by resource.
pub fn add_into(into: &mut BTreeMap<String, Quantity>, more: &BTreeMap<String, Quantity>) {
    for (k, q) in more {
        let next = match into.get(k) {
            Some(have) => have.checked_add(q).unwrap_or_else(|| have.clone()),
            None => q.clone(),
        };
        into.insert(k.clone(), next);
    }
}

/// The tolerations Kubernetes' DaemonSet controller adds to every daemon Pod (`AddOrUpdateDaemonPod
/// Tolerations`), so that daemons survive node conditions and cordons: NoExecute for not-ready and
/// unreachable, NoSchedule for disk/memory/pid pressure and unschedulable, and network-unavailable for
/// host-network Pods. Existing tolerations with the same key and effect are replaced.
pub fn add_daemon_tolerations(spec: &mut PodSpec) {
    let mut defaults = vec![
        (TAINT_NOT_READY, EFFECT_NO_EXECUTE),
        (TAINT_UNREACHABLE, EFFECT_NO_EXECUTE),
        (TAINT_DISK_PRESSURE, EFFECT_NO_SCHEDULE),
        (TAINT_MEMORY_PRESSURE, EFFECT_NO_SCHEDULE),
        (TAINT_PID_PRESSURE, EFFECT_NO_SCHEDULE),
        (TAINT_UNSCHEDULABLE, EFFECT_NO_SCHEDULE),
    ];
    if spec.host_network == Some(true) {
        defaults.push((TAINT_NETWORK_UNAVAILABLE, EFFECT_NO_SCHEDULE));
    }
    let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
    for (key, effect) in defaults {
        let wanted = Toleration {
            key: Some(key.to_string()),
            operator: Some("Exists".to_string()),
            effect: Some(effect.to_string()),
            ..Toleration::default()
        };
        match tolerations
            .iter_mut()
            .find(|t| t.key.as_deref() == Some(key) && t.effect.as_deref() == Some(effect))
        {
            Some(existing) => *existing = wanted,
            None => tolerations.push(wanted),
        }
    }
}

/// A node's verdict for a daemon Pod (Kubernetes' `NodeShouldRunDaemonPod`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonFit {
    /// A daemon Pod should be created here if none exists.
    pub should_run: bool,
    /// A daemon Pod already here may stay: true when the node fits, and also when the only problem is
    /// a NoSchedule taint (a NoExecute-tolerating Pod is not evicted by a taint it was placed before).
    pub should_continue_running: bool,
    /// Why it should not run, when it should not.
    pub misfit: Option<Misfit>,
}

/// Whether a daemon Pod from `template` (before the default tolerations, which this adds) should run,
/// and continue running, on `node`. Resources and `spec.unschedulable` are not checked: a DaemonSet's
/// Pods tolerate cordons and are placed by the scheduler, which preempts or leaves them Pending.
pub fn daemon_fit(template: &PodSpec, node: &Node) -> DaemonFit {
    let mut spec = template.clone();
    add_daemon_tolerations(&mut spec);
    if let Err(misfit) = placement_fits(&spec, node) {
        return DaemonFit {
            should_run: false,
            should_continue_running: false,
            misfit: Some(misfit),
        };
    }
    if let Some(taint) = untolerated_taint(&spec, node, &[EFFECT_NO_SCHEDULE, EFFECT_NO_EXECUTE]) {
        let misfit = Misfit::Taint {
            key: taint.key.clone(),
            effect: taint.effect.clone(),
        };
        return DaemonFit {
            should_run: false,
            should_continue_running: untolerated_taint(&spec, node, &[EFFECT_NO_EXECUTE]).is_none(),
            misfit: Some(misfit),
        };
    }
    DaemonFit {
        should_run: true,
        should_continue_running: true,
        misfit: None,
    }
}

/// The node's name ("" when unset, which no Pod names).
pub fn node_name(node: &Node) -> &str {
    node.metadata.name.as_deref().unwrap_or("")
}

/// Binds a Pod to `node` through its required node affinity, as Kubernetes' DaemonSet controller and
/// OpenKruise's BroadcastJob do when the scheduler places their Pods (`ReplaceDaemonSetPodNodeName
/// NodeAffinity`): the required terms become the single term `matchFields metadata.name In [node]`. The
/// template's own terms are dropped, having already been checked against the node by [`pod_fits`] or
/// [`daemon_fit`]; preferred terms and Pod (anti-)affinity are kept.
pub fn bind_to_node(spec: &mut PodSpec, node: &str) {
    let term = NodeSelectorTerm {
        match_fields: Some(vec![NodeSelectorRequirement {
            key: "metadata.name".to_string(),
            operator: "In".to_string(),
            values: Some(vec![node.to_string()]),
        }]),
        ..NodeSelectorTerm::default()
    };
    let affinity = spec.affinity.get_or_insert_with(Default::default);
    let node_affinity = affinity.node_affinity.get_or_insert_with(Default::default);
    node_affinity.required_during_scheduling_ignored_during_execution =
        Some(k8s_openapi::api::core::v1::NodeSelector {
            node_selector_terms: vec![term],
        });
}

/// The node a Pod is bound to: `spec.nodeName` once scheduled, else the `metadata.name` its required
/// node affinity names (a Pod created by [`bind_to_node`] and still Pending).
pub fn bound_node(spec: &PodSpec) -> Option<&str> {
    if let Some(name) = spec.node_name.as_deref().filter(|n| !n.is_empty()) {
        return Some(name);
    }
    let terms = &required_node_affinity(spec)?.node_selector_terms;
    terms.iter().find_map(|t| {
        t.match_fields.iter().flatten().find_map(|r| {
            let values = r.values.as_deref().unwrap_or_default();
            (r.key == "metadata.name" && r.operator == "In" && values.len() == 1)
                .then(|| values[0].as_str())
        })
    })
}

#[cfg(test)]
mod tests;
