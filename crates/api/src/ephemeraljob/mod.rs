//! EphemeralJob, apps.kruise.io/v1alpha1 (the only version OpenKruise v1.9.0 serves, and stores):
//! ephemeral containers injected into the Pods its selector matches. Namespaced, short name `ejob`.
//! Validated as upstream's `vephemeraljobs.kb.io` does ([`validate`]).

use k8s_openapi::api::core::v1::Container;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::CustomResourceExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::field::{FieldError, Path};
use crate::schema::{is_default, preserve_unknown_fields_untyped};
use crate::validation::{containers, validate_label_selector};

pub const KIND: &str = "EphemeralJob";
pub const PLURAL: &str = "ephemeraljobs";

/// The environment variable every injected container carries: the uid of its EphemeralJob (how a
/// job recognises its own containers).
pub const ENV_JOB_ID: &str = "KRUISE_EJOB_ID";
/// The finalizer that keeps a job until its containers are accounted for.
pub const FINALIZER: &str = "apps.kruise.io/ephemeralcontainers-cleanup";
/// Pods injected at once when `parallelism` is not set.
pub const DEFAULT_PARALLELISM: i32 = 1;
/// How long a finished job stays when `ttlSecondsAfterFinished` is not set (upstream: 30 minutes).
pub const DEFAULT_TTL_SECONDS: i64 = 1800;

/// Condition types.
pub const CONDITION_SUCCEEDED: &str = "JobSucceeded";
pub const CONDITION_FAILED: &str = "JobFailed";
pub const CONDITION_ERROR: &str = "JobError";
pub const CONDITION_INITIALIZED: &str = "Initialized";
pub const CONDITION_MATCHED_EMPTY: &str = "MatchedEmpty";

/// Phases.
pub const PHASE_SUCCEEDED: &str = "Succeeded";
pub const PHASE_FAILED: &str = "Failed";
pub const PHASE_WAITING: &str = "Waiting";
pub const PHASE_RUNNING: &str = "Running";
pub const PHASE_PAUSED: &str = "Paused";
pub const PHASE_ERROR: &str = "Error";
pub const PHASE_UNKNOWN: &str = "Unknown";

crate::crd::resource! {
    #[kube(
        version = "v1alpha1",
        kind = "EphemeralJob",
        namespaced,
        status = "EphemeralJobStatus",
        shortname = "ejob",
        doc = "EphemeralJob is the Schema for the ephemeraljobs API",
        printcolumn(
            name = "STATUS",
            type_ = "string",
            json_path = ".status.phase",
            description = "The status of ephemeral job"
        ),
        printcolumn(
            name = "MATCH",
            type_ = "integer",
            json_path = ".status.match",
            description = "Number of ephemeral container matched by this job"
        ),
        printcolumn(
            name = "SUCCEED",
            type_ = "integer",
            json_path = ".status.succeeded",
            description = "Number of succeed ephemeral containers"
        ),
        printcolumn(
            name = "FAILED",
            type_ = "integer",
            json_path = ".status.failed",
            description = "Number of failed ephemeral containers"
        ),
        printcolumn(
            name = "RUNNING",
            type_ = "integer",
            json_path = ".status.running",
            description = "Number of running ephemeral containers"
        ),
        printcolumn(
            name = "WAITING",
            type_ = "integer",
            json_path = ".status.waiting",
            description = "Number of waiting ephemeral containers"
        )
    )]
    age_column(short)
    #[serde(rename_all = "camelCase")]
    pub struct EphemeralJobSpec {
        /// The Pods (in the job's namespace) to inject into.
        pub selector: Option<LabelSelector>,
        /// How many of the matching Pods (oldest first) to inject into; all when unset or larger.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub replicas: Option<i32>,
        /// How many Pods may run the containers at once (default 1).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub parallelism: Option<i32>,
        pub template: EphemeralContainerTemplateSpec,
        #[serde(default, skip_serializing_if = "is_default")]
        pub paused: bool,
        /// Seconds after `status.startTime` at which an unfinished job fails.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub active_deadline_seconds: Option<i64>,
        /// Seconds after `status.completionTime` at which the job is deleted (default 1800).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub ttl_seconds_after_finished: Option<i32>,
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EphemeralContainerTemplateSpec {
    /// Core `EphemeralContainer`s, kept verbatim (schemaless, as upstream's CRD).
    #[schemars(schema_with = "preserve_unknown_fields_untyped")]
    pub ephemeral_containers: Vec<Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EphemeralJobStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<EphemeralJobCondition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    #[serde(default)]
    pub phase: String,
    /// Matching Pods the job works on (upstream's JSON name `match`).
    #[serde(default, rename = "match")]
    pub matches: i32,
    #[serde(default)]
    pub running: i32,
    #[serde(default)]
    pub succeeded: i32,
    #[serde(default)]
    pub waiting: i32,
    #[serde(default)]
    pub failed: i32,
}

/// Upstream's `EphemeralJobCondition`: the same fields as BroadcastJob's ([`crate::pub_types::JobCondition`]).
pub type EphemeralJobCondition = crate::pub_types::JobCondition;

/// The CRD, served and stored in v1alpha1 only, as upstream's.
pub fn crd() -> CustomResourceDefinition {
    crate::crd::single_version(EphemeralJob::crd())
}

/// The name of an ephemeral container of the template (empty when it has none).
pub fn container_name(container: &Value) -> &str {
    container
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// Create and update validation, as upstream's webhook (`pkg/webhook/ephemeraljob/validating`):
/// every ephemeral container passes Kubernetes' checks of an ephemeral container (a name, an image,
/// an explicit imagePullPolicy and terminationMessagePolicy, valid env, envFrom and
/// securityContext, unique names, no ports, resources, probes, lifecycle, resizePolicy or
/// restartPolicy, no volume subPath); and, beyond upstream (which leaves it to fail in the
/// controller), the selector is a valid label selector.
pub fn validate(job: &EphemeralJob) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let spec = Path::new("spec");
    if let Some(selector) = &job.spec.selector {
        validate_label_selector(selector, &spec.child("selector"), &mut errors);
    }
    let path = spec.child("template").child("ephemeralContainers");
    // Decoded as Containers: the same fields, less `targetContainerName`, which is not checked.
    let decoded: Vec<(Path, Option<Container>)> = job
        .spec
        .template
        .ephemeral_containers
        .iter()
        .enumerate()
        .map(|(i, raw)| {
            let container_path = path.index(i);
            match serde_json::from_value(raw.clone()) {
                Ok(container) => (container_path, Some(container)),
                Err(error) => {
                    errors.push(FieldError::invalid(
                        &container_path,
                        "",
                        format!("not an ephemeral container: {error}"),
                    ));
                    (container_path, None)
                }
            }
        })
        .collect();
    let mut names = std::collections::HashSet::new();
    for (container_path, container) in &decoded {
        if let Some(container) = container {
            validate_container(container, container_path, &mut names, &mut errors);
        }
    }
    errors
}

fn validate_container<'a>(
    container: &'a Container,
    path: &Path,
    names: &mut std::collections::HashSet<&'a str>,
    errors: &mut Vec<FieldError>,
) {
    containers::validate_name_and_image(container, path, names, true, errors);
    required_one_of(
        container.termination_message_policy.as_deref(),
        &["File", "FallbackToLogsOnError"],
        &path.child("terminationMessagePolicy"),
        errors,
    );
    containers::validate_container(container, path, errors);
    required_one_of(
        container.image_pull_policy.as_deref(),
        &["Always", "IfNotPresent", "Never"],
        &path.child("imagePullPolicy"),
        errors,
    );
    let set = [
        ("ports", container.ports.is_some()),
        (
            "resources",
            container
                .resources
                .as_ref()
                .is_some_and(|r| *r != Default::default()),
        ),
        ("resizePolicy", container.resize_policy.is_some()),
        ("restartPolicy", container.restart_policy.is_some()),
        ("livenessProbe", container.liveness_probe.is_some()),
        ("readinessProbe", container.readiness_probe.is_some()),
        ("startupProbe", container.startup_probe.is_some()),
        ("lifecycle", container.lifecycle.is_some()),
    ];
    for (field, _) in set.iter().filter(|(_, set)| *set) {
        errors.push(FieldError::forbidden(
            &path.child(field),
            "cannot be set for an Ephemeral Container",
        ));
    }
    for (j, mount) in container.volume_mounts.iter().flatten().enumerate() {
        let mount_path = path.child("volumeMounts").index(j);
        if mount.sub_path.as_deref().is_some_and(|p| !p.is_empty()) {
            errors.push(FieldError::forbidden(
                &mount_path.child("subPath"),
                "cannot be set for an Ephemeral Container",
            ));
        }
        if mount
            .sub_path_expr
            .as_deref()
            .is_some_and(|p| !p.is_empty())
        {
            errors.push(FieldError::forbidden(
                &mount_path.child("subPathExpr"),
                "cannot be set for an Ephemeral Container",
            ));
        }
    }
}

/// A value that must be given (nothing defaults it here) and be one of `allowed`.
fn required_one_of(
    value: Option<&str>,
    allowed: &[&str],
    path: &Path,
    errors: &mut Vec<FieldError>,
) {
    match value.unwrap_or_default() {
        "" => errors.push(FieldError::required(path, "")),
        value if !allowed.contains(&value) => {
            errors.push(FieldError::not_supported(path, value, allowed))
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests;
