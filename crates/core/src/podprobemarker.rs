//! PodProbeMarker / NodePodProbe decisions (upstream `pkg/controller/podprobemarker`,
//! `pkg/controller/nodepodprobe`, `pkg/daemon/podprobe`), pure:
//!
//! - which Pods a marker probes, and the probes (named ports resolved) it puts in their node's
//!   NodePodProbe ([`is_probe_candidate`], [`node_probes_for`], [`apply_marker`]);
//! - what leaves a NodePodProbe when a marker or a Pod goes ([`remove_marker`], [`keep_pods`]);
//! - what a Pod gets from its probe states: conditions, and the markers' labels/annotations
//!   ([`pod_update`]);
//! - on the node: the success/failure thresholds of a probe worker ([`ProbeRun`]), its initial delay
//!   ([`initial_delay_passed`]), and the NodePodProbe status written from the latest results
//!   ([`merge_status`]).

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kruise_api::podprobemarker::{
    self as ppm, ContainerProbe, ContainerProbeSpec, ContainerProbeState, NodePodProbe,
    NodePodProbeSpec, NodePodProbeStatus, PodContainerProbe, PodProbe, PodProbeMarker,
    PodProbeStatus,
};

use crate::pods;

#[cfg(test)]
mod tests;

/// The label a virtual-kubelet Node carries (`type: virtual-kubelet`): no kruise-daemon runs there.
pub const LABEL_VIRTUAL_KUBELET: &str = "type";
pub const VIRTUAL_KUBELET_VALUE: &str = "virtual-kubelet";

/// A status is re-reported at least this often even when nothing changed (upstream's
/// `maxSyncProbeTime`), so that `lastProbeTime` stays fresh.
pub const MAX_SYNC_PROBE_SECONDS: i64 = 600;
/// Probe messages are cut to this many characters.
pub const MAX_PROBE_MESSAGE_LENGTH: usize = 1024;

/// Whether a marker probes this Pod: active, `Initialized` True, and bound to a node.
pub fn is_probe_candidate(pod: &Pod) -> bool {
    pods::is_active(pod)
        && pods::condition(pod, "Initialized").is_some_and(|c| c.status == "True")
        && pods::is_assigned(pod)
}

/// The probe with its named port (tcpSocket, httpGet) resolved to the number of the container's port
/// of that name, as the NodePodProbe carries it; `Err` (a message) when the container or the port is
/// not found.
pub fn resolve_ports(probe: &PodContainerProbe, pod: &Pod) -> Result<ContainerProbeSpec, String> {
    let mut spec = probe.probe.clone();
    let named = |port: &IntOrString| match port {
        IntOrString::String(name) => Some(name.clone()),
        IntOrString::Int(_) => None,
    };
    let wanted = spec
        .tcp_socket
        .as_ref()
        .and_then(|t| named(&t.port))
        .or_else(|| spec.http_get.as_ref().and_then(|h| named(&h.port)));
    let Some(name) = wanted else {
        return Ok(spec);
    };
    let key = format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    );
    let container = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == probe.container_name))
        .ok_or_else(|| {
            format!(
                "Failed to get container by name: {} in pod: {key}",
                probe.container_name
            )
        })?;
    let number = match name.parse::<i32>() {
        Ok(n) => n,
        Err(_) => container
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .map(|p| p.container_port)
            .ok_or_else(|| {
                format!(
                    "Failed to extract port for container: {} in pod: {key}",
                    container.name
                )
            })?,
    };
    if let Some(tcp) = spec.tcp_socket.as_mut() {
        tcp.port = IntOrString::Int(number);
    }
    if let Some(get) = spec.http_get.as_mut() {
        get.port = IntOrString::Int(number);
    }
    Ok(spec)
}

/// The NodePodProbe probes of `marker` for one Pod (named `<marker>#<probe>`), and the messages of the
/// probes left out because a named port did not resolve.
pub fn node_probes_for(marker: &PodProbeMarker, pod: &Pod) -> (Vec<ContainerProbe>, Vec<String>) {
    let name = marker.metadata.name.as_deref().unwrap_or_default();
    let mut probes = Vec::new();
    let mut errors = Vec::new();
    for probe in &marker.spec.probes {
        match resolve_ports(probe, pod) {
            Ok(spec) => probes.push(ContainerProbe {
                name: ppm::node_probe_name(name, &probe.name),
                container_name: probe.container_name.clone(),
                probe: spec,
            }),
            Err(message) => errors.push(message),
        }
    }
    (probes, errors)
}

/// One Pod's entry as a marker wants it in the NodePodProbe.
#[derive(Clone, Debug, PartialEq)]
pub struct PodProbes {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub ip: String,
    pub probes: Vec<ContainerProbe>,
}

fn of_marker(probe_name: &str, marker: &str) -> bool {
    ppm::split_node_probe_name(probe_name).is_some_and(|(m, _)| m == marker)
}

/// The NodePodProbe spec with `marker`'s probes for `pods` (entries matched by name, namespace and
/// uid): a new Pod gets an entry; an existing entry gets its IP when it had none, each probe added or
/// replaced, and the marker's probes that the marker no longer lists removed.
pub fn apply_marker(spec: &NodePodProbeSpec, marker: &str, pods: &[PodProbes]) -> NodePodProbeSpec {
    let mut out = spec.clone();
    for pod in pods {
        let found = out
            .pod_probes
            .iter_mut()
            .find(|p| p.name == pod.name && p.namespace == pod.namespace && p.uid == pod.uid);
        match found {
            Some(entry) => {
                if entry.ip.is_empty() {
                    entry.ip.clone_from(&pod.ip);
                }
                entry.probes.retain(|p| {
                    !of_marker(&p.name, marker) || pod.probes.iter().any(|w| w.name == p.name)
                });
                for wanted in &pod.probes {
                    match entry.probes.iter_mut().find(|p| p.name == wanted.name) {
                        Some(have) => {
                            if have != wanted {
                                *have = wanted.clone();
                            }
                        }
                        None => entry.probes.push(wanted.clone()),
                    }
                }
            }
            None if pod.probes.is_empty() => {}
            None => out.pod_probes.push(PodProbe {
                name: pod.name.clone(),
                namespace: pod.namespace.clone(),
                uid: pod.uid.clone(),
                ip: pod.ip.clone(),
                probes: pod.probes.clone(),
            }),
        }
    }
    out.pod_probes.retain(|p| !p.probes.is_empty());
    out
}

/// The NodePodProbe spec without the probes of the marker `namespace/marker`; Pods left without
/// probes are dropped.
pub fn remove_marker(spec: &NodePodProbeSpec, namespace: &str, marker: &str) -> NodePodProbeSpec {
    let mut out = NodePodProbeSpec::default();
    for entry in &spec.pod_probes {
        if entry.namespace != namespace {
            out.pod_probes.push(entry.clone());
            continue;
        }
        let mut kept = entry.clone();
        kept.probes.retain(|p| !of_marker(&p.name, marker));
        if !kept.probes.is_empty() {
            out.pod_probes.push(kept);
        }
    }
    out
}

/// The NodePodProbe spec with only the Pods `live` accepts (the Pod exists with that uid and is
/// active).
pub fn keep_pods(spec: &NodePodProbeSpec, live: impl Fn(&PodProbe) -> bool) -> NodePodProbeSpec {
    NodePodProbeSpec {
        pod_probes: spec
            .pod_probes
            .iter()
            .filter(|p| live(p))
            .cloned()
            .collect(),
    }
}

/// What a Pod gets from its probe states.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodUpdate {
    /// Conditions to write (whole), each new or changed in status or message.
    pub conditions: Vec<PodCondition>,
    /// Labels to set (`Some`) or remove (`None`), only those that change.
    pub labels: BTreeMap<String, Option<String>>,
    pub annotations: BTreeMap<String, Option<String>>,
}

impl PodUpdate {
    pub fn is_empty(&self) -> bool {
        self.conditions.is_empty() && self.labels.is_empty() && self.annotations.is_empty()
    }
}

/// The condition and markers a Pod gets from its probe states (upstream's `updatePodProbeStatus`):
/// each state of a live marker (`marker(name)`, `None` when gone or being deleted) sets the probe's
/// `podConditionType` (True when Succeeded, False otherwise; a condition type already set by an
/// earlier probe is left to it), removes the labels/annotations of the marker policy of the other
/// state and sets those of the policy of its own state. Only what changes the Pod is returned.
pub fn pod_update<'a>(
    pod: &Pod,
    status: &PodProbeStatus,
    marker: impl Fn(&str) -> Option<&'a PodProbeMarker>,
) -> PodUpdate {
    let mut conditions: Vec<PodCondition> = Vec::new();
    let mut seen_types = BTreeSet::new();
    let mut labels: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut annotations: BTreeMap<String, Option<String>> = BTreeMap::new();
    for state in &status.probe_states {
        if state.state.is_empty() {
            continue;
        }
        let Some((marker_name, probe_name)) = ppm::split_node_probe_name(&state.name) else {
            continue;
        };
        let Some(marker) = marker(marker_name) else {
            continue;
        };
        let Some(probe) = marker.spec.probes.iter().find(|p| p.name == probe_name) else {
            continue;
        };
        let condition_type = probe.pod_condition_type.as_str();
        if !condition_type.is_empty() && seen_types.insert(condition_type.to_owned()) {
            conditions.push(PodCondition {
                type_: condition_type.to_owned(),
                status: if state.state == ppm::PROBE_SUCCEEDED {
                    "True"
                } else {
                    "False"
                }
                .to_owned(),
                last_probe_time: state.last_probe_time.clone(),
                last_transition_time: state.last_transition_time.clone(),
                message: Some(state.message.clone()).filter(|m| !m.is_empty()),
                ..PodCondition::default()
            });
        }
        let matched = probe
            .marker_policy
            .iter()
            .rev()
            .find(|p| p.state == state.state);
        let opposite = probe
            .marker_policy
            .iter()
            .rev()
            .find(|p| p.state != state.state);
        if let Some(opposite) = opposite {
            labels.extend(opposite.labels.keys().map(|k| (k.clone(), None)));
            annotations.extend(opposite.annotations.keys().map(|k| (k.clone(), None)));
        }
        if let Some(matched) = matched {
            labels.extend(
                matched
                    .labels
                    .iter()
                    .map(|(k, v)| (k.clone(), Some(v.clone()))),
            );
            annotations.extend(
                matched
                    .annotations
                    .iter()
                    .map(|(k, v)| (k.clone(), Some(v.clone()))),
            );
        }
    }
    let current = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    let conditions = conditions
        .into_iter()
        .filter(|c| {
            current
                .and_then(|all| all.iter().find(|have| have.type_ == c.type_))
                .is_none_or(|have| have.status != c.status || have.message != c.message)
        })
        .collect();
    PodUpdate {
        conditions,
        labels: changed_entries(labels, pod.metadata.labels.as_ref()),
        annotations: changed_entries(annotations, pod.metadata.annotations.as_ref()),
    }
}

/// The entries of `wanted` (set, or removed with `None`) that change `have`.
fn changed_entries(
    wanted: BTreeMap<String, Option<String>>,
    have: Option<&BTreeMap<String, String>>,
) -> BTreeMap<String, Option<String>> {
    wanted
        .into_iter()
        .filter(|(k, v)| have.and_then(|h| h.get(k)) != v.as_ref())
        .collect()
}

/// Whether a Node runs no kruise-daemon (virtual kubelet): its Pods get no NodePodProbe entry.
pub fn is_virtual_kubelet(labels: Option<&BTreeMap<String, String>>) -> bool {
    labels
        .and_then(|l| l.get(LABEL_VIRTUAL_KUBELET))
        .is_some_and(|v| v == VIRTUAL_KUBELET_VALUE)
}

/// Serverless mode (`EnablePodProbeMarkerOnServerless`), at Pod creation: the probes the Pod's
/// virtual kubelet is to run, for the `kruise.io/podprobe` annotation (JSON, marker policies left
/// out), and the names of the markers they come from, for `kruise.io/podprobemarker-list` (sorted,
/// comma-separated). `markers` are those of the Pod's namespace; a marker with an empty selector
/// matches nothing. A probe is taken once per `container/name` and once per condition type, only for
/// a container the Pod has (a restartable init container counts), and only with a condition type.
/// `None` when no probe applies.
pub fn serverless_probes(markers: &[&PodProbeMarker], pod: &Pod) -> Option<(String, String)> {
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let spec = pod.spec.as_ref()?;
    let containers: BTreeSet<&str> = spec
        .containers
        .iter()
        .map(|c| c.name.as_str())
        .chain(
            spec.init_containers
                .iter()
                .flatten()
                .filter(|c| c.restart_policy.as_deref() == Some("Always"))
                .map(|c| c.name.as_str()),
        )
        .collect();
    let mut markers: Vec<&&PodProbeMarker> = markers
        .iter()
        .filter(|m| {
            !kruise_api::validation::selector_is_empty(&m.spec.selector)
                && kruise_api::validation::selector_matches(&m.spec.selector, &labels)
        })
        .collect();
    markers.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut keys = BTreeSet::new();
    let mut condition_types = BTreeSet::new();
    let mut names = BTreeSet::new();
    let mut probes = Vec::new();
    for marker in markers {
        for probe in &marker.spec.probes {
            let key = format!("{}/{}", probe.container_name, probe.name);
            if probe.pod_condition_type.is_empty()
                || condition_types.contains(&probe.pod_condition_type)
                || keys.contains(&key)
                || !containers.contains(probe.container_name.as_str())
            {
                continue;
            }
            keys.insert(key);
            condition_types.insert(probe.pod_condition_type.clone());
            names.insert(marker.metadata.name.clone().unwrap_or_default());
            probes.push(PodContainerProbe {
                marker_policy: Vec::new(),
                ..probe.clone()
            });
        }
    }
    if probes.is_empty() {
        return None;
    }
    let body = serde_json::to_string(&probes).ok()?;
    Some((body, names.into_iter().collect::<Vec<_>>().join(",")))
}

/// Serverless mode: the labels and annotations `marker`'s policies put on a Pod whose virtual
/// kubelet reports the probes' conditions itself. A policy applies when its state matches its
/// probe's condition (`Succeeded` True, `Failed` False, `Unknown` otherwise); a probe whose
/// condition the Pod does not have yet applies nothing. Only the entries that change the Pod are
/// returned; nothing is removed, as upstream.
pub fn serverless_marks(marker: &PodProbeMarker, pod: &Pod) -> PodUpdate {
    let conditions = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or(&[]);
    let mut labels = BTreeMap::new();
    let mut annotations = BTreeMap::new();
    for probe in &marker.spec.probes {
        if probe.pod_condition_type.is_empty() || probe.marker_policy.is_empty() {
            continue;
        }
        let Some(condition) = conditions
            .iter()
            .find(|c| c.type_ == probe.pod_condition_type)
        else {
            continue;
        };
        let state = match condition.status.as_str() {
            "True" => ppm::PROBE_SUCCEEDED,
            "False" => ppm::PROBE_FAILED,
            _ => ppm::PROBE_UNKNOWN,
        };
        for policy in probe.marker_policy.iter().filter(|p| p.state == state) {
            labels.extend(
                policy
                    .labels
                    .iter()
                    .map(|(k, v)| (k.clone(), Some(v.clone()))),
            );
            annotations.extend(
                policy
                    .annotations
                    .iter()
                    .map(|(k, v)| (k.clone(), Some(v.clone()))),
            );
        }
    }
    PodUpdate {
        conditions: Vec::new(),
        labels: changed_entries(labels, pod.metadata.labels.as_ref()),
        annotations: changed_entries(annotations, pod.metadata.annotations.as_ref()),
    }
}

/// A Pod asks for OpenKruise's enhanced liveness probe with this annotation set to `"true"`.
pub const ANNOTATION_USING_ENHANCED_LIVENESS: &str = "apps.kruise.io/using-enhanced-liveness";
/// Where the Pod webhook keeps the liveness probes it took off the containers (JSON list of
/// `{"name", "livenessProbe"}`), for the component that runs them instead of the kubelet.
pub const ANNOTATION_CONTAINER_PROBE_CONTEXT: &str = "apps.kruise.io/container-probe-context";

/// `EnhancedLivenessProbe`, at Pod creation: a Pod of an OpenKruise workload (its controller is of
/// the `apps.kruise.io` group) that asks for it has its containers' liveness probes moved from the
/// kubelet into [`ANNOTATION_CONTAINER_PROBE_CONTEXT`]. Whether the Pod changed.
pub fn move_liveness_probes(pod: &mut Pod) -> bool {
    let owned_by_kruise = crate::ownership::controller_of(&pod.metadata).is_some_and(|owner| {
        owner.api_version.split_once('/').map(|(group, _)| group) == Some("apps.kruise.io")
    });
    let asked = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_USING_ENHANCED_LIVENESS))
        .is_some_and(|v| v == "true");
    if !owned_by_kruise || !asked {
        return false;
    }
    let Some(spec) = pod.spec.as_mut() else {
        return false;
    };
    let moved: Vec<serde_json::Value> = spec
        .containers
        .iter_mut()
        .filter_map(|c| {
            let probe = c.liveness_probe.take()?;
            Some(serde_json::json!({"name": c.name, "livenessProbe": probe}))
        })
        .collect();
    if moved.is_empty() {
        return false;
    }
    pod.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(
            ANNOTATION_CONTAINER_PROBE_CONTEXT.to_owned(),
            serde_json::Value::Array(moved).to_string(),
        );
    true
}

/// The result of one probe attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Succeeded,
    Failed,
}

impl Outcome {
    pub fn state(self) -> &'static str {
        match self {
            Outcome::Succeeded => ppm::PROBE_SUCCEEDED,
            Outcome::Failed => ppm::PROBE_FAILED,
        }
    }
}

/// A probe worker's run of equal outcomes: a result is reported once it has been seen
/// `successThreshold` (Succeeded) or `failureThreshold` (Failed) times in a row (thresholds below 1
/// count as 1).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProbeRun {
    last: Option<Outcome>,
    run: u32,
}

impl ProbeRun {
    /// Records an attempt; `Some(outcome)` when it is to be reported.
    pub fn observe(
        &mut self,
        outcome: Outcome,
        success_threshold: i32,
        failure_threshold: i32,
    ) -> Option<Outcome> {
        if self.last == Some(outcome) {
            self.run = self.run.saturating_add(1);
        } else {
            self.last = Some(outcome);
            self.run = 1;
        }
        let threshold = match outcome {
            Outcome::Succeeded => success_threshold,
            Outcome::Failed => failure_threshold,
        };
        let threshold = u32::try_from(threshold.max(1)).unwrap_or(1);
        (self.run >= threshold).then_some(outcome)
    }
}

/// Whether a container started at `started_at` has been running `initialDelaySeconds` (at least 1).
pub fn initial_delay_passed(started_at: Timestamp, now: Timestamp, initial_delay: i32) -> bool {
    let delay = i64::from(initial_delay.max(1));
    now.as_second() - started_at.as_second() >= delay
}

/// The period of a probe worker, in seconds (at least 1).
pub fn period_seconds(spec: &ContainerProbeSpec) -> u64 {
    u64::try_from(spec.period_seconds.unwrap_or(0).max(1)).unwrap_or(1)
}

/// The timeout of one probe attempt, in seconds (at least 1).
pub fn timeout_seconds(spec: &ContainerProbeSpec) -> u64 {
    u64::try_from(spec.timeout_seconds.unwrap_or(0).max(1)).unwrap_or(1)
}

/// A probe message as reported: cut to [`MAX_PROBE_MESSAGE_LENGTH`] characters.
pub fn trim_message(message: &str) -> String {
    message.chars().take(MAX_PROBE_MESSAGE_LENGTH).collect()
}

/// The latest result of one probe of one Pod, as the daemon holds it.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeResult {
    pub pod_namespace: String,
    pub pod_name: String,
    pub pod_uid: String,
    /// `<marker>#<probe>`.
    pub probe: String,
    pub state: String,
    pub message: String,
    pub probed_at: Timestamp,
}

/// Whether a new result is to be stored (and the status written): the state or the message
/// changed, or the stored one is older than [`MAX_SYNC_PROBE_SECONDS`].
pub fn result_is_news(
    previous: Option<&ProbeResult>,
    state: &str,
    message: &str,
    now: Timestamp,
) -> bool {
    previous.is_none_or(|p| {
        p.state != state
            || p.message != message
            || now.as_second() - p.probed_at.as_second() >= MAX_SYNC_PROBE_SECONDS
    })
}

/// The state the NodePodProbe's status reports for probe `probe` (`<marker>#<probe>`) of the Pod
/// `pod_uid`; `None` when it reports none (or an empty one).
pub fn reported_state<'a>(
    status: Option<&'a NodePodProbeStatus>,
    pod_uid: &str,
    probe: &str,
) -> Option<&'a str> {
    status?
        .pod_probe_statuses
        .iter()
        .filter(|s| s.uid == pod_uid)
        .flat_map(|s| &s.probe_states)
        .find(|s| s.name == probe && !s.state.is_empty())
        .map(|s| s.state.as_str())
}

/// Whether a probe worker reports `Unknown` when it sees a container it has not probed yet
/// (upstream's worker does, on every container ID it has not seen). Not on a worker's first sight of
/// a container whose state the status already reports: the node agent restarted, or took over from
/// another one (an upgrade, a takeover), and the container is the one that state is about. An
/// `Unknown` there would flip the Pod's condition and markers away and back for nothing; the state
/// stands until the worker's first result. A container seen replaced, or one never reported, starts
/// `Unknown`.
pub fn reports_unknown_on_new_container(first_sight: bool, reported: Option<&str>) -> bool {
    !first_sight || reported.is_none()
}

/// The NodePodProbe status from the current one and the daemon's latest results: states of probes the
/// spec no longer lists are dropped; each result sets its probe's state, message and
/// `lastProbeTime`, and `lastTransitionTime` (to `now`) when the state changes.
pub fn merge_status(
    npp: &NodePodProbe,
    results: &[ProbeResult],
    now: Timestamp,
) -> NodePodProbeStatus {
    let valid: BTreeSet<(&str, &str)> = npp
        .spec
        .pod_probes
        .iter()
        .flat_map(|p| {
            p.probes
                .iter()
                .map(move |c| (p.uid.as_str(), c.name.as_str()))
        })
        .collect();
    let mut out = NodePodProbeStatus::default();
    for status in npp.status.iter().flat_map(|s| &s.pod_probe_statuses) {
        let states: Vec<ContainerProbeState> = status
            .probe_states
            .iter()
            .filter(|s| valid.contains(&(status.uid.as_str(), s.name.as_str())))
            .cloned()
            .collect();
        if !states.is_empty() {
            out.pod_probe_statuses.push(PodProbeStatus {
                name: status.name.clone(),
                namespace: status.namespace.clone(),
                uid: status.uid.clone(),
                probe_states: states,
            });
        }
    }
    for result in results {
        if !valid.contains(&(result.pod_uid.as_str(), result.probe.as_str())) {
            continue;
        }
        let index = match out
            .pod_probe_statuses
            .iter()
            .position(|s| s.uid == result.pod_uid)
        {
            Some(index) => index,
            None => {
                out.pod_probe_statuses.push(PodProbeStatus {
                    name: result.pod_name.clone(),
                    namespace: result.pod_namespace.clone(),
                    uid: result.pod_uid.clone(),
                    probe_states: Vec::new(),
                });
                out.pod_probe_statuses.len() - 1
            }
        };
        let states = &mut out.pod_probe_statuses[index].probe_states;
        let probed = Some(Time(result.probed_at));
        match states.iter_mut().find(|s| s.name == result.probe) {
            Some(state) => {
                if state.state != result.state {
                    state.last_transition_time = Some(Time(now));
                }
                state.state.clone_from(&result.state);
                state.message.clone_from(&result.message);
                state.last_probe_time = probed;
            }
            None => states.push(ContainerProbeState {
                name: result.probe.clone(),
                state: result.state.clone(),
                last_probe_time: probed,
                last_transition_time: Some(Time(now)),
                message: result.message.clone(),
            }),
        }
    }
    out
}
