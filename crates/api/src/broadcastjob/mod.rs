//! BroadcastJob: types of both versions, conversion, defaults, validation and CRD.

/// The BroadcastJob resource of one version (`"v1alpha1"` or `"v1beta1"`), declared with the spec
/// struct that follows the version. The kube attribute (names, subresources, printer columns) is
/// the same in both versions, so it is written once here; the specs differ, so each version writes
/// its own.
macro_rules! broadcast_job_resource {
    ($version:tt, $($spec:tt)*) => {
        crate::crd::resource! {
            #[kube(
                version = $version,
                kind = "BroadcastJob",
                namespaced,
                status = "BroadcastJobStatus",
                shortname = "bcj",
                doc = "BroadcastJob is the Schema for the broadcastjobs API",
                printcolumn(
                    name = "Desired",
                    type_ = "integer",
                    json_path = ".status.desired",
                    description = "The desired number of pods. This is typically equal to the number of nodes satisfied to run pods."
                ),
                printcolumn(
                    name = "Active",
                    type_ = "integer",
                    json_path = ".status.active",
                    description = "The number of actively running pods."
                ),
                printcolumn(
                    name = "Succeeded",
                    type_ = "integer",
                    json_path = ".status.succeeded",
                    description = "The number of pods which reached phase Succeeded."
                ),
                printcolumn(
                    name = "Failed",
                    type_ = "integer",
                    json_path = ".status.failed",
                    description = "The number of pods which reached phase Failed."
                )
            )]
            age_column(short)
            $($spec)*
        }
    };
}

pub mod v1alpha1;
pub mod v1beta1;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::field::{FieldError, Path};
use crate::kinds::{Defaults, KindApi};
use crate::{intstr, podtemplate, validation};

/// Labels the controller puts on its Pods; a template may not preset them.
pub const LABEL_JOB_NAME: &str = "broadcastjob-name";
pub const LABEL_CONTROLLER_UID: &str = "broadcastjob-controller-uid";

/// The [`KindApi`] of BroadcastJob.
pub struct Api;

impl KindApi for Api {
    const KIND: &'static str = "BroadcastJob";
    const PLURAL: &'static str = "broadcastjobs";
    const RAW_PATHS: &'static [&'static str] = &["/spec/template"];
    type V1alpha1 = v1alpha1::BroadcastJob;
    type V1beta1 = v1beta1::BroadcastJob;

    crate::kinds::same_schema_conversion!(BroadcastJob, BroadcastJobSpec);

    fn default_with(object: &mut v1beta1::BroadcastJob, defaults: &Defaults) {
        let spec = &mut object.spec;
        if let Some(pod) = spec.template.spec.as_mut()
            && defaults.pod_templates
        {
            podtemplate::set_defaults_pod_template_spec(pod, defaults);
        }
        if spec.completion_policy.type_.is_empty() {
            spec.completion_policy.type_ = v1beta1::COMPLETION_ALWAYS.into();
        }
        spec.parallelism.get_or_insert(IntOrString::Int(i32::MAX));
        if spec.failure_policy.type_.is_empty() {
            spec.failure_policy.type_ = v1beta1::FAILURE_FAIL_FAST.into();
        }
    }

    fn validate(
        object: &v1beta1::BroadcastJob,
        _old: Option<&v1beta1::BroadcastJob>,
    ) -> Vec<FieldError> {
        let mut errors = Vec::new();
        let name = object.metadata.name.as_deref().unwrap_or_default();
        let name_ok = !name.is_empty()
            && name.len() <= 63
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if !name_ok && object.metadata.generate_name.is_none() {
            errors.push(FieldError::invalid(
                &Path::new("metadata").child("name"),
                name,
                "BroadcastJob name must consist of alphanumeric characters or '-' (at most 63 characters)",
            ));
        }
        let spec = &object.spec;
        let path = Path::new("spec");
        let policy_path = path.child("completionPolicy");
        let policy = &spec.completion_policy;
        match policy.type_.as_str() {
            v1beta1::COMPLETION_ALWAYS | "" => {}
            v1beta1::COMPLETION_NEVER => {
                if let Some(ttl) = policy.ttl_seconds_after_finished {
                    errors.push(FieldError::invalid(
                        &policy_path.child("ttlSecondsAfterFinished"),
                        ttl,
                        "ttlSecondsAfterFinished only works with completionPolicy type Always",
                    ));
                }
                if let Some(deadline) = policy.active_deadline_seconds {
                    errors.push(FieldError::invalid(
                        &policy_path.child("activeDeadlineSeconds"),
                        deadline,
                        "activeDeadlineSeconds only works with completionPolicy type Always",
                    ));
                }
            }
            other => errors.push(FieldError::not_supported(
                &policy_path.child("type"),
                other,
                &[v1beta1::COMPLETION_ALWAYS, v1beta1::COMPLETION_NEVER],
            )),
        }
        if let Some(deadline) = policy.active_deadline_seconds
            && deadline <= 0
        {
            errors.push(FieldError::invalid(
                &policy_path.child("activeDeadlineSeconds"),
                deadline,
                "must be greater than 0",
            ));
        }
        if let Some(ttl) = policy.ttl_seconds_after_finished {
            validation::validate_non_negative(
                ttl.into(),
                &policy_path.child("ttlSecondsAfterFinished"),
                &mut errors,
            );
        }
        let failure_path = path.child("failurePolicy");
        match spec.failure_policy.type_.as_str() {
            ""
            | v1beta1::FAILURE_FAIL_FAST
            | v1beta1::FAILURE_CONTINUE
            | v1beta1::FAILURE_PAUSE => {}
            other => errors.push(FieldError::not_supported(
                &failure_path.child("type"),
                other,
                &[
                    v1beta1::FAILURE_FAIL_FAST,
                    v1beta1::FAILURE_CONTINUE,
                    v1beta1::FAILURE_PAUSE,
                ],
            )),
        }
        validation::validate_non_negative(
            spec.failure_policy.restart_limit.into(),
            &failure_path.child("restartLimit"),
            &mut errors,
        );
        if let Some(parallelism) = &spec.parallelism {
            intstr::validate(parallelism, &path.child("parallelism"), None, &mut errors);
        }

        let template_path = path.child("template");
        let labels = spec
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone())
            .unwrap_or_default();
        for reserved in [LABEL_JOB_NAME, LABEL_CONTROLLER_UID] {
            if labels.get(reserved).is_some_and(|v| !v.is_empty()) {
                errors.push(FieldError::forbidden(
                    &template_path.child("metadata").child("labels").key(reserved),
                    format!("{LABEL_JOB_NAME:?} and {LABEL_CONTROLLER_UID:?} are set by the controller and may not be preset"),
                ));
            }
        }
        validation::validate_pod_template(
            &spec.template,
            &template_path,
            &["Never", "OnFailure"],
            false,
            &mut errors,
        );
        errors
    }
}

#[cfg(test)]
mod tests;
