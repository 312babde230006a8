//! The PodProbeMarker validating webhook (upstream `pkg/webhook/podprobemarker/validating`), with
//! upstream's rules and messages: a non-empty valid selector (immutable), at least one probe, each
//! named (unique, without '#', not a Kubernetes Pod condition), with a container, exactly one handler
//! (exec with a command, httpGet with a path and an HTTP(S) scheme, tcpSocket; no host), non-negative
//! delays and thresholds, a condition type or a marker policy, unique condition types, and marker
//! policies per state (`Succeeded`/`Failed`, unique) with valid labels or annotations. While
//! `PodProbeMarkerGate` or `KruiseDaemon` is off every create and update is refused (403).

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{HTTPGetAction, Probe, TCPSocketAction};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kruise_api::field::{self, FieldError, Path};
use kruise_api::podprobemarker::{self as ppm, PodProbeMarker, ProbeMarkerPolicy};
use kruise_api::validation::{
    check_qualified_name, selector_is_empty, validate_label_selector, validate_labels,
};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionReview, Operation};

use crate::admission::{Answer, allow, deny, gate_disabled, on_written};

/// Path and webhook name, upstream's.
pub const VALIDATE_PATH: &str = "/validate-apps-kruise-io-podprobemarker";
pub const WEBHOOK_NAME: &str = "vpodprobemarker.kb.io";

/// Condition types a probe may not be named after (upstream's `k8sNativePodConditions`).
const NATIVE_POD_CONDITIONS: &[&str] = &[
    "PodScheduled",
    "Initialized",
    "Ready",
    "ContainersReady",
    "KruisePodReady",
    "InPlaceUpdateReady",
];

/// Answers a PodProbeMarker review. `probe_gate` is `PodProbeMarkerGate`, `daemon_gate`
/// `KruiseDaemon`.
pub fn validate(
    review: AdmissionReview<DynamicObject>,
    probe_gate: bool,
    daemon_gate: bool,
) -> Answer {
    on_written(review, |request, object| {
        let decode = |object: &DynamicObject| -> Result<PodProbeMarker, String> {
            let value =
                serde_json::to_value(object).map_err(|e| format!("cannot read the object: {e}"))?;
            serde_json::from_value(value).map_err(|e| e.to_string())
        };
        let new = match decode(object) {
            Ok(new) => new,
            Err(message) => return deny(request, message),
        };
        for (on, gate) in [
            (probe_gate, "PodProbeMarkerGate"),
            (daemon_gate, "KruiseDaemon"),
        ] {
            if !on {
                return gate_disabled(request, gate);
            }
        }
        let old = match (&request.operation, &request.old_object) {
            (Operation::Update, Some(old)) => match decode(old) {
                Ok(old) => Some(old),
                Err(message) => return deny(request, message),
            },
            _ => None,
        };
        let errors = check(&new, old.as_ref());
        if errors.is_empty() {
            allow(request)
        } else {
            deny(request, field::join(&errors))
        }
    })
}

/// Every error of a new (or updated, with its `old` version) PodProbeMarker.
pub fn check(new: &PodProbeMarker, old: Option<&PodProbeMarker>) -> Vec<FieldError> {
    let mut errors = check_spec(new, &Path::new("spec"));
    if let Some(old) = old
        && old.spec.selector != new.spec.selector
    {
        errors.push(FieldError::invalid(
            &Path::new("selector"),
            selector_text(new),
            "selector must be immutable",
        ));
    }
    errors
}

fn selector_text(marker: &PodProbeMarker) -> String {
    serde_json::to_string(&marker.spec.selector).unwrap_or_default()
}

fn check_spec(marker: &PodProbeMarker, path: &Path) -> Vec<FieldError> {
    let spec = &marker.spec;
    let mut errors = Vec::new();
    let selector_path = path.child("selector");
    validate_label_selector(&spec.selector, &selector_path, &mut errors);
    if selector_is_empty(&spec.selector) {
        errors.push(FieldError::invalid(
            &selector_path,
            selector_text(marker),
            "empty selector is not valid for podProbeMarker.",
        ));
    }
    let probes_path = path.child("probes");
    if spec.probes.is_empty() {
        errors.push(FieldError::invalid(
            &probes_path,
            "null",
            "empty probes is not valid for PodProbeMarker.",
        ));
        return errors;
    }
    let mut names = BTreeSet::new();
    let mut condition_types = BTreeSet::new();
    for probe in &spec.probes {
        let stop = if probe.name.contains('#') {
            Some((
                probe.name.clone(),
                "probe name can't contains '#'.".to_owned(),
            ))
        } else if probe.name.is_empty() {
            Some((
                String::new(),
                "probe name can't be empty in PodProbeMarker.".to_owned(),
            ))
        } else if probe.container_name.is_empty() {
            Some((
                String::new(),
                "probe containerName can't be empty in PodProbeMarker.".to_owned(),
            ))
        } else if NATIVE_POD_CONDITIONS.contains(&probe.name.as_str()) {
            Some((
                probe.name.clone(),
                format!("probe name can't be {}", probe.name),
            ))
        } else if !names.insert(probe.name.clone()) {
            Some((
                probe.name.clone(),
                "probe name must be unique in PodProbeMarker.".to_owned(),
            ))
        } else {
            None
        };
        if let Some((value, message)) = stop {
            errors.push(FieldError::invalid(&probes_path, value, message));
            return errors;
        }
        check_probe(&probe.probe, &path.child("probe"), &mut errors);
        if probe.pod_condition_type.is_empty() && probe.marker_policy.is_empty() {
            errors.push(FieldError::invalid(
                &probes_path,
                &probe.name,
                "podConditionType and markerPolicy cannot be empty at the same time",
            ));
            return errors;
        }
        if !probe.pod_condition_type.is_empty() {
            if !condition_types.insert(probe.pod_condition_type.clone()) {
                errors.push(FieldError::invalid(
                    &probes_path,
                    &probe.pod_condition_type,
                    format!(
                        "podConditionType {} must be unique in podProbeMarker",
                        probe.pod_condition_type
                    ),
                ));
                return errors;
            }
            if let Err(message) = check_qualified_name(&probe.pod_condition_type) {
                errors.push(FieldError::invalid(
                    path,
                    &probe.pod_condition_type,
                    message,
                ));
            }
        }
        let policy_path = path.child("markerPolicy");
        let mut states = BTreeSet::new();
        for policy in &probe.marker_policy {
            if !states.insert(policy.state.clone()) {
                errors.push(FieldError::invalid(
                    &policy_path,
                    &policy.state,
                    "marker policy state must be unique.",
                ));
                return errors;
            }
            check_policy(policy, &policy_path, &mut errors);
        }
    }
    errors
}

fn check_probe(probe: &Probe, path: &Path, errors: &mut Vec<FieldError>) {
    let mut handlers = 0;
    if let Some(exec) = &probe.exec {
        handlers += 1;
        if exec.command.as_ref().is_none_or(Vec::is_empty) {
            errors.push(FieldError::required(
                &path.child("exec").child("command"),
                "",
            ));
        }
    }
    if let Some(get) = &probe.http_get {
        if handlers > 0 {
            errors.push(FieldError::forbidden(
                &path.child("httpGet"),
                "may not specify more than 1 handler type",
            ));
        } else {
            handlers += 1;
            check_http_get(get, &path.child("httpGet"), errors);
        }
    }
    if let Some(tcp) = &probe.tcp_socket {
        if handlers > 0 {
            errors.push(FieldError::forbidden(
                &path.child("tcpSocket"),
                "may not specify more than 1 handler type",
            ));
        } else {
            handlers += 1;
            check_tcp(tcp, &path.child("tcpSocket"), errors);
        }
    }
    if handlers == 0 {
        errors.push(FieldError::required(path, "must specify a handler type"));
    }
    for (value, name) in [
        (probe.initial_delay_seconds, "initialDelaySeconds"),
        (probe.timeout_seconds, "timeoutSeconds"),
        (probe.period_seconds, "periodSeconds"),
        (probe.success_threshold, "successThreshold"),
        (probe.failure_threshold, "failureThreshold"),
    ] {
        let value = value.unwrap_or(0);
        if value < 0 {
            errors.push(FieldError::invalid(
                &path.child(name),
                value,
                "must be greater than or equal to 0",
            ));
        }
    }
}

fn check_tcp(tcp: &TCPSocketAction, path: &Path, errors: &mut Vec<FieldError>) {
    if let Some(host) = tcp.host.as_ref().filter(|h| !h.is_empty()) {
        errors.push(FieldError::invalid(
            &path.child("host"),
            host,
            "host field in probes is not allowed",
        ));
    }
    check_port(&tcp.port, &path.child("port"), errors);
}

fn check_http_get(get: &HTTPGetAction, path: &Path, errors: &mut Vec<FieldError>) {
    let request_path = get.path.as_deref().unwrap_or_default();
    if request_path.is_empty() {
        errors.push(FieldError::required(&path.child("path"), ""));
    }
    if let Some(host) = get.host.as_ref().filter(|h| !h.is_empty()) {
        errors.push(FieldError::invalid(
            &path.child("host"),
            host,
            "host field in probes is not allowed",
        ));
    }
    if request_path.chars().any(char::is_control) {
        errors.push(FieldError::invalid(
            &path.child("path"),
            request_path,
            "must be a valid URL path",
        ));
    }
    check_port(&get.port, &path.child("port"), errors);
    let scheme = get.scheme.as_deref().unwrap_or_default();
    if !matches!(scheme, "HTTP" | "HTTPS") {
        errors.push(FieldError::not_supported(
            &path.child("scheme"),
            scheme,
            &["HTTP", "HTTPS"],
        ));
    }
    for header in get.http_headers.iter().flatten() {
        let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        if header.name.is_empty() || !header.name.bytes().all(token) {
            errors.push(FieldError::invalid(
                &path.child("httpHeaders"),
                &header.name,
                "a valid HTTP header must consist of alphanumeric characters or '-' (e.g. 'X-Header-Name', \
                 regex used for validation is '[-A-Za-z0-9]+')",
            ));
        }
    }
}

fn check_port(port: &IntOrString, path: &Path, errors: &mut Vec<FieldError>) {
    match port {
        IntOrString::Int(n) => {
            if !(1..=65535).contains(n) {
                errors.push(FieldError::invalid(
                    path,
                    n,
                    "must be between 1 and 65535, inclusive",
                ));
            }
        }
        IntOrString::String(name) => {
            for message in port_name_errors(name) {
                errors.push(FieldError::invalid(path, name, message));
            }
        }
    }
}

/// Kubernetes' `IsValidPortName` (an IANA_SVC_NAME).
fn port_name_errors(name: &str) -> Vec<&'static str> {
    let mut out = Vec::new();
    if name.is_empty() || name.len() > 15 {
        out.push("must be no more than 15 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        out.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)");
    }
    if name.contains("--") {
        out.push("must not contain consecutive hyphens");
    }
    if !name.bytes().any(|b| b.is_ascii_lowercase()) {
        out.push("must contain at least one letter (a-z)");
    }
    if name.starts_with('-') || name.ends_with('-') {
        out.push("must not begin or end with a hyphen");
    }
    out
}

fn check_policy(policy: &ProbeMarkerPolicy, path: &Path, errors: &mut Vec<FieldError>) {
    if policy.state != ppm::PROBE_SUCCEEDED && policy.state != ppm::PROBE_FAILED {
        errors.push(FieldError::required(
            &path.child("state"),
            "marker policy state must be 'True' or 'False'",
        ));
        return;
    }
    if policy.labels.is_empty() && policy.annotations.is_empty() {
        errors.push(FieldError::required(
            path,
            "marker policy annotations or labels can't be both empty",
        ));
        return;
    }
    validate_labels(&policy.labels, &path.child("labels"), errors);
    let annotations = path.child("annotations");
    let mut total = 0;
    for (key, value) in &policy.annotations {
        total += key.len() + value.len();
        if let Err(message) = check_qualified_name(&key.to_lowercase()) {
            errors.push(FieldError::invalid(&annotations, key, message));
        }
    }
    if total > 256 * 1024 {
        errors.push(FieldError::too_long(&annotations, 256 * 1024));
    }
}

#[cfg(test)]
mod tests;
