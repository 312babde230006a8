//! AdvancedCronJob: types of both versions, conversion, defaults, validation and CRD.
//!
//! v1beta1 adds `spec.template.imageListPullJobTemplate`; converted to v1alpha1 (which upstream refuses
//! to do), the template is carried in the conversion annotation and restored on the way back.

/// The AdvancedCronJob resource of one version (`"v1alpha1"` or `"v1beta1"`). Its kube attribute
/// (names, printer columns) and its spec fields are the same in both versions, so they are written
/// once here; the types the spec names resolve where the macro is called, so each version's
/// `AdvancedCronJobSpec` holds that version's `CronJobTemplate` (v1alpha1's has no
/// imageListPullJobTemplate).
macro_rules! advanced_cron_job_resource {
    ($version:tt) => {
        crate::crd::resource! {
            #[kube(
                version = $version,
                kind = "AdvancedCronJob",
                namespaced,
                status = "AdvancedCronJobStatus",
                shortname = "acj",
                doc = "AdvancedCronJob is the Schema for the advancedcronjobs API",
                printcolumn(
                    name = "Schedule",
                    type_ = "string",
                    json_path = ".spec.schedule",
                    description = "The schedule of advanced cron job."
                ),
                printcolumn(
                    name = "Type",
                    type_ = "string",
                    json_path = ".status.type",
                    description = "Type of cron job."
                ),
                printcolumn(
                    name = "LastScheduleTime",
                    type_ = "date",
                    json_path = ".status.lastScheduleTime",
                    description = "The last time at which job was scheduled."
                )
            )]
            age_column(short)
            #[serde(rename_all = "camelCase")]
            pub struct AdvancedCronJobSpec {
                /// The schedule in cron format (five fields, a descriptor such as `@hourly` or `@every 10s`, an
                /// optional `TZ=<zone>` prefix).
                pub schedule: String,
                /// The IANA time zone of the schedule; the manager's own zone when unset.
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub time_zone: Option<String>,
                /// Seconds after a scheduled time within which a missed run still starts.
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub starting_deadline_seconds: Option<i64>,
                /// `Allow` (default), `Forbid` or `Replace`.
                #[serde(default, skip_serializing_if = "String::is_empty")]
                #[schemars(schema_with = "super::concurrency_policy_schema")]
                pub concurrency_policy: String,
                /// Stop scheduling new runs.
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub paused: Option<bool>,
                /// Finished successful jobs kept (default 3).
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub successful_jobs_history_limit: Option<i32>,
                /// Finished failed jobs kept (default 1).
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub failed_jobs_history_limit: Option<i32>,
                /// The job each run creates.
                pub template: CronJobTemplate,
            }
        }
    };
}

/// The schema of `spec.concurrencyPolicy`, the same in both versions.
pub(crate) fn concurrency_policy_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "string", "enum": ["Allow", "Forbid", "Replace"] })
}

pub mod schedule;
pub mod v1alpha1;
pub mod v1beta1;

use k8s_openapi::jiff::tz::TimeZone;

use crate::conversion::Stash;
use crate::field::{FieldError, Path};
use crate::kinds::{Defaults, KindApi};
use crate::{keys, podtemplate, validation};

/// The annotation on every job an AdvancedCronJob creates: its scheduled time (RFC 3339, seconds).
pub const ANNOTATION_SCHEDULED_AT: &str = "apps.kruise.io/scheduled-at";

/// In the v1beta1-fields stash of a v1alpha1 object.
const STASH_IMAGE_LIST_PULL_JOB_TEMPLATE: &str = "template.imageListPullJobTemplate";

/// Upstream's limit on an ImageListPullJob template's `activeDeadlineSeconds` (one day).
const MAX_ACTIVE_DEADLINE_SECONDS: i64 = 24 * 3600;

/// The [`KindApi`] of AdvancedCronJob.
pub struct Api;

/// An AdvancedCronJob spec of version `$to` from `$spec`, of the other version: every field and the
/// Job and BroadcastJob templates are the same in both versions and moved (named once here for both
/// directions); v1beta1's ImageListPullJob template is given.
macro_rules! spec_of {
    ($spec:ident => $to:ident { $($template_rest:tt)* }) => {{
        let template = $spec.template;
        crate::conversion::moved_fields!($spec => $to::AdvancedCronJobSpec {
            schedule, time_zone, starting_deadline_seconds, concurrency_policy, paused,
            successful_jobs_history_limit, failed_jobs_history_limit;
            template: crate::conversion::moved_fields!(template => $to::CronJobTemplate {
                job_template, broadcast_job_template;
                $($template_rest)*
            }),
        })
    }};
}

impl KindApi for Api {
    const KIND: &'static str = "AdvancedCronJob";
    const PLURAL: &'static str = "advancedcronjobs";
    const RAW_PATHS: &'static [&'static str] = &[
        "/spec/template/jobTemplate",
        "/spec/template/broadcastJobTemplate/metadata",
        "/spec/template/broadcastJobTemplate/spec/template",
    ];
    type V1alpha1 = v1alpha1::AdvancedCronJob;
    type V1beta1 = v1beta1::AdvancedCronJob;

    fn to_v1beta1(object: v1alpha1::AdvancedCronJob) -> v1beta1::AdvancedCronJob {
        let mut metadata = object.metadata;
        let stash = Stash::take(&mut metadata, keys::ANNOTATION_CONVERSION_V1BETA1_FIELDS);
        let spec = object.spec;
        v1beta1::AdvancedCronJob {
            metadata,
            spec: spec_of!(spec => v1beta1 {
                image_list_pull_job_template: stash.get(STASH_IMAGE_LIST_PULL_JOB_TEMPLATE),
            }),
            status: object.status,
        }
    }

    fn to_v1alpha1(object: v1beta1::AdvancedCronJob) -> v1alpha1::AdvancedCronJob {
        let mut metadata = object.metadata;
        let spec = object.spec;
        let mut stash = Stash::default();
        stash.set(
            STASH_IMAGE_LIST_PULL_JOB_TEMPLATE,
            &spec.template.image_list_pull_job_template,
        );
        stash.put(&mut metadata, keys::ANNOTATION_CONVERSION_V1BETA1_FIELDS);
        v1alpha1::AdvancedCronJob {
            metadata,
            spec: spec_of!(spec => v1alpha1 {}),
            status: object.status,
        }
    }

    fn default_with(object: &mut v1beta1::AdvancedCronJob, defaults: &Defaults) {
        let spec = &mut object.spec;
        if let Some(pod) = spec
            .template
            .job_template
            .as_mut()
            .and_then(|t| t.spec.as_mut())
            .and_then(|s| s.template.spec.as_mut())
            .filter(|_| defaults.pod_templates)
        {
            podtemplate::set_defaults_pod_template_spec(pod, defaults);
        }
        if let Some(pod) = spec
            .template
            .broadcast_job_template
            .as_mut()
            .and_then(|t| t.spec.template.spec.as_mut())
            .filter(|_| defaults.pod_templates)
        {
            podtemplate::set_defaults_pod_template_spec(pod, defaults);
        }
        if let Some(template) = spec.template.image_list_pull_job_template.as_mut()
            && template.spec.completion_policy.type_.is_empty()
        {
            let job = &mut template.spec;
            job.completion_policy.type_ = crate::broadcastjob::v1beta1::COMPLETION_ALWAYS.into();
            let pull = job.pull_policy.get_or_insert_with(Default::default);
            pull.timeout_seconds.get_or_insert(600);
            pull.backoff_limit.get_or_insert(3);
            if job.image_pull_policy.is_empty() {
                job.image_pull_policy = "IfNotPresent".into();
            }
        }
        if spec.concurrency_policy.is_empty() {
            // Concurrent image pulls are useless: Replace for ImageListPullJobs.
            spec.concurrency_policy = if spec.template.image_list_pull_job_template.is_some() {
                v1beta1::CONCURRENCY_REPLACE
            } else {
                v1beta1::CONCURRENCY_ALLOW
            }
            .into();
        }
        spec.paused.get_or_insert(false);
        spec.successful_jobs_history_limit.get_or_insert(3);
        spec.failed_jobs_history_limit.get_or_insert(1);
    }

    fn validate(
        object: &v1beta1::AdvancedCronJob,
        old: Option<&v1beta1::AdvancedCronJob>,
    ) -> Vec<FieldError> {
        let mut errors = Vec::new();
        if old.is_none() {
            validate_name(object, &mut errors);
        }
        validate_spec(&object.spec, &mut errors);
        if let Some(old) = old {
            validate_update(&object.spec, &old.spec, &mut errors);
        }
        errors
    }
}

fn validate_name(object: &v1beta1::AdvancedCronJob, errors: &mut Vec<FieldError>) {
    let name = object.metadata.name.as_deref().unwrap_or_default();
    if name.is_empty() && object.metadata.generate_name.is_some() {
        return;
    }
    let path = Path::new("metadata").child("name");
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        errors.push(FieldError::invalid(
            &path,
            name,
            "AdvancedCronJob name must consist of alphanumeric characters or '-' (regex used for validation is '^[a-zA-Z0-9\\-]+$')",
        ));
    }
    if name.len() > 63 {
        errors.push(FieldError::too_long(&path, 63));
    }
}

fn validate_spec(spec: &v1beta1::AdvancedCronJobSpec, errors: &mut Vec<FieldError>) {
    let path = Path::new("spec");
    let schedule_path = path.child("schedule");
    if spec.schedule.is_empty() {
        errors.push(FieldError::invalid(
            &schedule_path,
            "",
            "schedule cannot be empty, please provide valid cron schedule.",
        ));
    }
    // The process's zone does not change whether a schedule parses.
    if let Err(error) = schedule::parse(&spec.schedule, &TimeZone::UTC) {
        errors.push(FieldError::invalid(&schedule_path, &spec.schedule, error.0));
    }
    if spec.schedule.contains("TZ") && spec.time_zone.is_some() {
        errors.push(FieldError::invalid(
            &schedule_path,
            &spec.schedule,
            "cannot use both timeZone field and TZ or CRON_TZ in schedule",
        ));
    }
    validate_templates(spec, &path, errors);
    if let Some(deadline) = spec.starting_deadline_seconds {
        validation::validate_non_negative(deadline, &path.child("startingDeadlineSeconds"), errors);
    }
    if let Some(limit) = spec.successful_jobs_history_limit {
        validation::validate_non_negative(
            limit.into(),
            &path.child("successfulJobsHistoryLimit"),
            errors,
        );
    }
    if let Some(limit) = spec.failed_jobs_history_limit {
        validation::validate_non_negative(
            limit.into(),
            &path.child("failedJobsHistoryLimit"),
            errors,
        );
    }
    if let Some(zone) = &spec.time_zone {
        let zone_path = path.child("timeZone");
        if zone.is_empty() {
            errors.push(FieldError::invalid(
                &zone_path,
                "",
                "timeZone must be nil or non-empty string",
            ));
        } else {
            if zone.eq_ignore_ascii_case("Local") {
                errors.push(FieldError::invalid(
                    &zone_path,
                    zone,
                    "timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones",
                ));
            }
            if let Err(error) = schedule::load_location(zone, &TimeZone::UTC) {
                errors.push(FieldError::invalid(&zone_path, zone, error.0));
            }
        }
    }
}

fn validate_templates(
    spec: &v1beta1::AdvancedCronJobSpec,
    path: &Path,
    errors: &mut Vec<FieldError>,
) {
    let template_path = path.child("template");
    let templates = &spec.template;
    let mut count = 0;
    if let Some(job) = &templates.job_template {
        count += 1;
        let job_path = template_path
            .child("jobTemplate")
            .child("spec")
            .child("template");
        let pod = job
            .spec
            .as_ref()
            .map(|s| s.template.clone())
            .unwrap_or_default();
        validation::validate_pod_template(&pod, &job_path, &["Never", "OnFailure"], false, errors);
    }
    if let Some(broadcast) = &templates.broadcast_job_template {
        count += 1;
        let pod_path = template_path
            .child("broadcastJobTemplate")
            .child("spec")
            .child("template");
        validation::validate_pod_template(
            &broadcast.spec.template,
            &pod_path,
            &["Never", "OnFailure"],
            false,
            errors,
        );
    }
    if let Some(pull) = &templates.image_list_pull_job_template {
        count += 1;
        if spec.concurrency_policy != v1beta1::CONCURRENCY_REPLACE
            && spec.concurrency_policy != v1beta1::CONCURRENCY_FORBID
        {
            errors.push(FieldError::invalid(
                &path.child("concurrencyPolicy"),
                &spec.concurrency_policy,
                format!(
                    "concurrencyPolicy should be Replace or Forbid, but current value is: {}",
                    spec.concurrency_policy
                ),
            ));
        }
        validate_image_list_pull_job(
            &pull.spec,
            &template_path
                .child("imageListPullJobTemplate")
                .child("spec"),
            errors,
        );
    }
    match count {
        0 => errors.push(FieldError::forbidden(
            &template_path,
            "spec must have one template, either JobTemplate or BroadcastJobTemplate or ImageListPullJobTemplate should be provided",
        )),
        1 => {}
        _ => errors.push(FieldError::forbidden(
            &template_path,
            "spec can have only one template, either JobTemplate or BroadcastJobTemplate or ImageListPullJobTemplate should be provided",
        )),
    }
}

/// Upstream's checks of an ImageListPullJob template; like upstream, the first error found is the one
/// reported.
fn validate_image_list_pull_job(
    spec: &v1beta1::ImageListPullJobSpec,
    path: &Path,
    errors: &mut Vec<FieldError>,
) {
    if let Some(selector) = &spec.selector {
        let labels = &selector.label_selector;
        if labels.match_labels.is_some() || labels.match_expressions.is_some() {
            if !selector.names.is_empty() {
                errors.push(FieldError::invalid(
                    &path.child("selector"),
                    "selector",
                    "can not set both names and labelSelector in this spec.selector",
                ));
                return;
            }
            let before = errors.len();
            validation::validate_label_selector(labels, &path.child("selector"), errors);
            if errors.len() > before {
                return;
            }
        }
        let mut seen = std::collections::HashSet::new();
        if !selector.names.iter().all(|name| seen.insert(name)) {
            errors.push(FieldError::invalid(
                &path.child("selector").child("names"),
                selector.names.join(","),
                "duplicated name in selector names",
            ));
            return;
        }
    }
    if let Some(pods) = &spec.pod_selector {
        if spec.selector.is_some() {
            errors.push(FieldError::invalid(
                path,
                "selector, podSelector",
                "can not set both selector and podSelector",
            ));
            return;
        }
        let before = errors.len();
        validation::validate_label_selector(
            &pods.label_selector,
            &path.child("podSelector"),
            errors,
        );
        if errors.len() > before {
            return;
        }
    }
    let images_path = path.child("images");
    if spec.images.is_empty() {
        errors.push(FieldError::invalid(
            &images_path,
            "[]",
            "image can not be empty",
        ));
        return;
    }
    if spec.images.len() > 255 {
        errors.push(FieldError::invalid(
            &images_path,
            spec.images.len(),
            "the maximum number of images cannot > 255",
        ));
        return;
    }
    let mut seen = std::collections::HashSet::new();
    if !spec.images.iter().all(|image| seen.insert(image)) {
        errors.push(FieldError::invalid(
            &images_path,
            spec.images.join(","),
            "images cannot have duplicate values",
        ));
        return;
    }
    if let Some(bad) = spec.images.iter().find(|image| !image_reference_ok(image)) {
        errors.push(FieldError::invalid(
            &images_path,
            bad,
            format!("invalid image {bad}: invalid reference format"),
        ));
        return;
    }
    let policy = &spec.completion_policy;
    let policy_path = path.child("completionPolicy");
    if policy.type_ != crate::broadcastjob::v1beta1::COMPLETION_ALWAYS {
        errors.push(FieldError::invalid(
            &policy_path.child("type"),
            &policy.type_,
            format!(
                "completionPolicy should be Always, but current value is: {}",
                policy.type_
            ),
        ));
        return;
    }
    if let Some(deadline) = policy.active_deadline_seconds {
        // Both checks refuse the deadline itself, at the same field; only the message differs.
        let timeout = spec.pull_policy.as_ref().and_then(|p| p.timeout_seconds);
        let message = if deadline > MAX_ACTIVE_DEADLINE_SECONDS {
            Some(format!(
                "activeDeadlineSeconds must be less than {MAX_ACTIVE_DEADLINE_SECONDS}, current value is: {deadline}"
            ))
        } else {
            timeout.filter(|t| i64::from(*t) > deadline).map(|timeout| {
                format!(
                    "completionPolicy.activeDeadlineSeconds must be greater than pullPolicy.timeoutSeconds({timeout})"
                )
            })
        };
        if let Some(message) = message {
            errors.push(FieldError::invalid(
                &policy_path.child("activeDeadlineSeconds"),
                deadline,
                message,
            ));
            return;
        }
    }
    if let Some(ttl) = policy.ttl_seconds_after_finished {
        errors.push(FieldError::invalid(
            &policy_path.child("ttlSecondsAfterFinished"),
            ttl,
            "ttlSecondsAfterFinished is not supported in advancedCronJob",
        ));
    }
}

/// A container image reference's shape: lowercase repository path components, an optional registry
/// host (with port), an optional tag, an optional digest.
pub(crate) fn image_reference_ok(image: &str) -> bool {
    let (rest, digest) = match image.split_once('@') {
        Some((rest, digest)) => (rest, Some(digest)),
        None => (image, None),
    };
    if let Some(digest) = digest {
        let Some((algorithm, hex)) = digest.split_once(':') else {
            return false;
        };
        if algorithm.is_empty() || hex.len() < 32 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return false;
        }
    }
    let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match rest[last_slash..].split_once(':') {
        Some((_, tag)) => (
            &rest[..last_slash + rest[last_slash..].find(':').unwrap_or(0)],
            Some(tag),
        ),
        None => (rest, None),
    };
    if let Some(tag) = tag {
        let tag_ok = !tag.is_empty()
            && tag.len() <= 128
            && tag
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
            && !tag.starts_with(['.', '-']);
        if !tag_ok {
            return false;
        }
    }
    if name.is_empty() || name.len() > 255 {
        return false;
    }
    let components: Vec<&str> = name.split('/').collect();
    let repository = if components.len() > 1
        && (components[0].contains(['.', ':']) || components[0] == "localhost")
    {
        &components[1..]
    } else {
        &components[..]
    };
    !repository.is_empty()
        && repository.iter().all(|component| {
            !component.is_empty()
                && component
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
                && component.starts_with(|c: char| c.is_ascii_alphanumeric())
                && component.ends_with(|c: char| c.is_ascii_alphanumeric())
        })
}

/// Upstream forbids changing anything of the spec on update but the schedule, time zone,
/// concurrency policy, history limits, starting deadline, paused and an ImageListPullJob template.
fn validate_update(
    new: &v1beta1::AdvancedCronJobSpec,
    old: &v1beta1::AdvancedCronJobSpec,
    errors: &mut Vec<FieldError>,
) {
    let mut fixed = new.clone();
    fixed.schedule.clone_from(&old.schedule);
    fixed.concurrency_policy.clone_from(&old.concurrency_policy);
    fixed.successful_jobs_history_limit = old.successful_jobs_history_limit;
    fixed.failed_jobs_history_limit = old.failed_jobs_history_limit;
    fixed.starting_deadline_seconds = old.starting_deadline_seconds;
    fixed.paused = old.paused;
    fixed.time_zone.clone_from(&old.time_zone);
    if old.template.image_list_pull_job_template.is_some() {
        fixed
            .template
            .image_list_pull_job_template
            .clone_from(&old.template.image_list_pull_job_template);
    }
    if fixed != *old {
        errors.push(FieldError::forbidden(
            &Path::new("spec"),
            "updates to advancedcronjob spec for fields other than 'imageListPullJobTemplate', 'schedule', 'concurrencyPolicy', 'successfulJobsHistoryLimit', 'failedJobsHistoryLimit', 'startingDeadlineSeconds', 'timeZone' and 'paused' are forbidden",
        ));
    }
}

#[cfg(test)]
mod tests;
