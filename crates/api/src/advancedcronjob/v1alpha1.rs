//! AdvancedCronJob, apps.kruise.io/v1alpha1: v1beta1 without `imageListPullJobTemplate`.

use k8s_openapi::api::batch::v1::JobTemplateSpec;
use kube::CustomResource;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

pub use super::v1beta1::{AdvancedCronJobStatus, BroadcastJobTemplateSpec};
use crate::schema::preserve_unknown_fields_untyped;

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "apps.kruise.io",
    version = "v1alpha1",
    kind = "AdvancedCronJob",
    namespaced,
    status = "AdvancedCronJobStatus",
    shortname = "acj",
    derive = "PartialEq",
    derive = "Default",
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
    ),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "CreationTimestamp is a timestamp representing the server time when this object was created."
    )
)]
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
    #[schemars(schema_with = "concurrency_policy_schema")]
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

fn concurrency_policy_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "string", "enum": ["Allow", "Forbid", "Replace"] })
}

/// Exactly one of the templates.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CronJobTemplate {
    /// A `batch/v1` Job template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserve_unknown_fields_untyped")]
    pub job_template: Option<JobTemplateSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broadcast_job_template: Option<BroadcastJobTemplateSpec>,
}
