//! The ContainerRecreateRequest admission webhook (upstream `pkg/webhook/containerrecreaterequest`,
//! one mutating webhook that both validates and defaults). While the `KruiseDaemon` gate is off every
//! request is refused (403).
//!
//! Update: the spec, the `pod-uid` and `node-name` labels and a set `unready-acquired` annotation are
//! immutable. Create: `podName` and `containers` are required, `activeDeadlineSeconds` ≥ 3, grace
//! periods non-negative, `failurePolicy` Fail (default) or Ignore; the Pod must be active (or stopped by
//! SidecarTerminator) and scheduled. The request then gets the `active`, `pod-uid` and `node-name` labels,
//! the Pod's `terminationGracePeriodSeconds` when it sets none, and per container (named once, present
//! in the Pod with a container ID) the Pod's preStop hook, its ports (for an httpGet hook) and its
//! current ID and restart count.

use k8s_openapi::api::core::v1::{Node, Pod};
use kruise_api::containerrecreaterequest::{
    self as crr, ContainerRecreateRequest, ContainerRecreateRequestContainerContext, ProbeHandler,
};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::response::StatusSummary;
use kube::{Api, Client};
use serde_json::Value;

use crate::admission::{Answer, allow, request_of};

/// Path and webhook name, upstream's.
pub const MUTATE_PATH: &str = "/mutate-apps-kruise-io-v1alpha1-containerrecreaterequest";
pub const WEBHOOK_NAME: &str = "mcontainerrecreaterequest.kb.io";
pub const GATE: &str = "KruiseDaemon";
/// The Pod condition SidecarTerminator sets on a Pod whose sidecars it stopped.
pub const SIDECAR_TERMINATED: &str = "SidecarTerminated";

/// A refusal: HTTP-like code and message, as upstream's `admission.Errored`.
#[derive(Debug, PartialEq, Eq)]
pub struct Refusal {
    pub code: u16,
    pub message: String,
}

fn refuse(code: u16, message: impl Into<String>) -> Refusal {
    Refusal {
        code,
        message: message.into(),
    }
}

fn label<'a>(r: &'a ContainerRecreateRequest, key: &str) -> Option<&'a str> {
    r.labels().get(key).map(String::as_str)
}

/// An update changes nothing immutable.
pub fn check_update(
    new: &ContainerRecreateRequest,
    old: &ContainerRecreateRequest,
) -> Result<(), Refusal> {
    if new.spec != old.spec {
        return Err(refuse(403, "spec of ContainerRecreateRequest is immutable"));
    }
    for key in [crr::LABEL_POD_UID, crr::LABEL_NODE_NAME] {
        if label(new, key) != label(old, key) {
            return Err(refuse(
                403,
                format!("not allowed to update immutable label {key}"),
            ));
        }
    }
    let acquired = old.annotation(crr::UNREADY_ACQUIRED).unwrap_or_default();
    if !acquired.is_empty() && new.annotation(crr::UNREADY_ACQUIRED).unwrap_or_default() != acquired
    {
        return Err(refuse(
            403,
            format!(
                "not allowed to update immutable annotation {}",
                crr::UNREADY_ACQUIRED
            ),
        ));
    }
    Ok(())
}

/// Defaults and checks what a new request says by itself (before its Pod is read).
pub fn default_new(request: &mut ContainerRecreateRequest) -> Result<(), Refusal> {
    if request.spec.pod_name.is_empty() {
        return Err(refuse(400, "podName can not be empty"));
    }
    request
        .metadata
        .labels
        .get_or_insert_default()
        .insert(crr::LABEL_ACTIVE.to_owned(), "true".to_owned());
    let strategy = request.spec.strategy.get_or_insert_default();
    if request.spec.containers.is_empty() {
        return Err(refuse(400, "containers list can not be null"));
    }
    if request
        .spec
        .active_deadline_seconds
        .is_some_and(|d| d < crr::MIN_DEADLINE_SECONDS)
    {
        return Err(refuse(
            400,
            format!(
                "activeDeadlineSeconds can not be less than {}s",
                crr::MIN_DEADLINE_SECONDS
            ),
        ));
    }
    if strategy
        .termination_grace_period_seconds
        .is_some_and(|s| s < 0)
    {
        return Err(refuse(
            400,
            "terminationGracePeriodSeconds must be non-negative integer",
        ));
    }
    if strategy.unready_grace_period_seconds.is_some_and(|s| s < 0) {
        return Err(refuse(
            400,
            "unreadyGracePeriodSeconds must be non-negative integer",
        ));
    }
    match strategy.failure_policy.as_str() {
        "" => strategy.failure_policy = crr::FAILURE_POLICY_FAIL.to_owned(),
        crr::FAILURE_POLICY_FAIL | crr::FAILURE_POLICY_IGNORE => {}
        other => return Err(refuse(400, format!("unknown failurePolicy {other}"))),
    }
    Ok(())
}

fn pod_active(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    !matches!(phase, Some("Succeeded" | "Failed")) && pod.metadata.deletion_timestamp.is_none()
}

fn terminated_by_sidecar_terminator(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == SIDECAR_TERMINATED))
}

/// The Pod may have containers recreated: active (or stopped by SidecarTerminator) and scheduled.
pub fn check_pod(pod: &Pod) -> Result<&str, Refusal> {
    if !pod_active(pod) && !terminated_by_sidecar_terminator(pod) {
        return Err(refuse(
            400,
            "not allowed to recreate containers in an inactive Pod",
        ));
    }
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
        .ok_or_else(|| refuse(400, "not allowed to recreate containers in a pending Pod"))
}

/// Copies what the daemon needs from the Pod (and its Node) into a new request.
pub fn inject(
    request: &mut ContainerRecreateRequest,
    pod: &Pod,
    node: Option<&Node>,
) -> Result<(), Refusal> {
    let spec = pod.spec.clone().unwrap_or_default();
    let labels = request.metadata.labels.get_or_insert_default();
    labels.insert(
        crr::LABEL_NODE_NAME.to_owned(),
        spec.node_name.clone().unwrap_or_default(),
    );
    labels.insert(
        crr::LABEL_POD_UID.to_owned(),
        pod.metadata.uid.clone().unwrap_or_default(),
    );
    let virtual_kubelet = node
        .and_then(|n| n.metadata.labels.as_ref())
        .and_then(|l| l.get(crr::LABEL_VIRTUAL_KUBELET))
        .is_some_and(|v| v == crr::VIRTUAL_KUBELET_VALUE);
    if virtual_kubelet {
        labels.insert(
            crr::LABEL_VIRTUAL_KUBELET.to_owned(),
            crr::VIRTUAL_KUBELET_VALUE.to_owned(),
        );
    }
    let strategy = request.spec.strategy.get_or_insert_default();
    if strategy.termination_grace_period_seconds.is_none() {
        strategy.termination_grace_period_seconds = spec.termination_grace_period_seconds;
    }
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.clone())
        .unwrap_or_default();
    let mut seen = std::collections::BTreeSet::new();
    for c in &mut request.spec.containers {
        if !seen.insert(c.name.clone()) {
            return Err(refuse(
                400,
                format!("can not recreate {} multi times", c.name),
            ));
        }
        if c.pre_stop.is_some() || c.ports.is_some() || c.status_context.is_some() {
            return Err(refuse(
                400,
                "preStop, ports, statusContext in container are ready-only fields",
            ));
        }
        let Some(container) = spec.containers.iter().find(|p| p.name == c.name) else {
            return Err(refuse(
                400,
                format!("container {} not found in Pod", c.name),
            ));
        };
        let Some(status) = statuses.iter().find(|s| s.name == c.name) else {
            return Err(refuse(
                400,
                format!("not found {} containerStatus in Pod Status", c.name),
            ));
        };
        let container_id = status.container_id.clone().unwrap_or_default();
        if container_id.is_empty() {
            return Err(refuse(
                400,
                format!(
                    "no containerID in {} containerStatus, maybe the container has not been initialized",
                    c.name
                ),
            ));
        }
        if let Some(pre_stop) = container
            .lifecycle
            .as_ref()
            .and_then(|l| l.pre_stop.as_ref())
        {
            c.pre_stop = Some(ProbeHandler {
                exec: pre_stop.exec.clone(),
                http_get: pre_stop.http_get.clone(),
                tcp_socket: pre_stop.tcp_socket.clone(),
            });
        }
        if c.pre_stop.as_ref().is_some_and(|p| p.http_get.is_some()) {
            c.ports = container.ports.clone();
        }
        c.status_context = Some(ContainerRecreateRequestContainerContext {
            container_id,
            restart_count: status.restart_count,
        });
    }
    Ok(())
}

fn answer(request: &AdmissionRequest<DynamicObject>, refusal: Refusal) -> Answer {
    let mut response = AdmissionResponse::from(request).deny(refusal.message);
    response.result.code = refusal.code;
    response.result.reason = match refusal.code {
        403 => "Forbidden",
        500 => "InternalError",
        _ => "BadRequest",
    }
    .into();
    response.result.status = Some(StatusSummary::Failure);
    Answer {
        review: response.into_review(),
        allowed: false,
    }
}

fn decode(object: &DynamicObject) -> Result<(Value, ContainerRecreateRequest), Refusal> {
    let value = serde_json::to_value(object)
        .map_err(|e| refuse(400, format!("cannot read the object: {e}")))?;
    let typed = serde_json::from_value(value.clone()).map_err(|e| refuse(400, e.to_string()))?;
    Ok((value, typed))
}

/// Reads the Pod and its Node for a new request.
async fn read_pod(
    client: &Client,
    namespace: &str,
    pod_name: &str,
) -> Result<(Pod, Option<Node>), Refusal> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod = match pods.get_opt(pod_name).await {
        Ok(Some(pod)) => pod,
        Ok(None) => return Err(refuse(400, format!("no found Pod named {pod_name}"))),
        Err(e) => return Err(refuse(500, format!("failed to find Pod {pod_name}: {e}"))),
    };
    let node_name = check_pod(&pod)?.to_owned();
    let nodes: Api<Node> = Api::all(client.clone());
    let node = match nodes.get_opt(&node_name).await {
        Ok(Some(node)) => node,
        Ok(None) => {
            return Err(refuse(
                400,
                format!("failed to get Node {node_name}: nodes \"{node_name}\" not found"),
            ));
        }
        Err(e) => return Err(refuse(500, format!("failed to get Node {node_name}: {e}"))),
    };
    Ok((pod, Some(node)))
}

/// Answers a ContainerRecreateRequest review; `enabled` is the `KruiseDaemon` gate.
pub async fn review(
    review: AdmissionReview<DynamicObject>,
    enabled: bool,
    client: Option<&Client>,
) -> Answer {
    let request = match request_of(review) {
        Ok(request) => request,
        Err(answer) => return *answer,
    };
    if !enabled {
        return answer(
            &request,
            refuse(403, format!("feature-gate {GATE} is not enabled")),
        );
    }
    let Some(object) = &request.object else {
        return allow(&request);
    };
    let (original, mut new) = match decode(object) {
        Ok(decoded) => decoded,
        Err(refusal) => return answer(&request, refusal),
    };
    match request.operation {
        Operation::Update => {
            let old = match request.old_object.as_ref().map(decode) {
                Some(Ok((_, old))) => old,
                Some(Err(refusal)) => return answer(&request, refusal),
                None => return allow(&request),
            };
            return match check_update(&new, &old) {
                Ok(()) => allow(&request),
                Err(refusal) => answer(&request, refusal),
            };
        }
        Operation::Create => {}
        _ => return allow(&request),
    }
    if let Err(refusal) = default_new(&mut new) {
        return answer(&request, refusal);
    }
    let Some(client) = client else {
        return answer(&request, refuse(500, "no client to read the Pod with"));
    };
    let namespace = request.namespace.clone().unwrap_or_default();
    let (pod, node) = match read_pod(client, &namespace, &new.spec.pod_name).await {
        Ok(read) => read,
        Err(refusal) => return answer(&request, refusal),
    };
    if let Err(refusal) = inject(&mut new, &pod, node.as_ref()) {
        return answer(&request, refusal);
    }
    let mutated = match serde_json::to_value(&new) {
        Ok(mutated) => mutated,
        Err(e) => return answer(&request, refuse(500, e.to_string())),
    };
    let patch = crate::patch::additive_diff(&original, &mutated);
    if patch.0.is_empty() {
        return allow(&request);
    }
    match AdmissionResponse::from(&request).with_patch(patch) {
        Ok(response) => Answer {
            review: response.into_review(),
            allowed: true,
        },
        Err(e) => answer(
            &request,
            refuse(500, format!("cannot encode the patch: {e}")),
        ),
    }
}

#[cfg(test)]
mod tests;
