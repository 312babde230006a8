//! AdvancedCronJob, apps.kruise.io/v1beta1 (storage version): Jobs, BroadcastJobs or ImageListPullJobs
//! created on a cron schedule.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::JobTemplateSpec;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::broadcastjob::v1beta1::{BroadcastJobSpec, CompletionPolicy};
use crate::schema::{preserve_unknown_fields, preserve_unknown_fields_untyped};

pub const CONCURRENCY_ALLOW: &str = "Allow";
pub const CONCURRENCY_FORBID: &str = "Forbid";
pub const CONCURRENCY_REPLACE: &str = "Replace";
/// `status.type`: which kind of job the template creates.
pub const TEMPLATE_JOB: &str = "Job";
pub const TEMPLATE_BROADCAST_JOB: &str = "BroadcastJob";
pub const TEMPLATE_IMAGE_LIST_PULL_JOB: &str = "ImageListPullJob";

advanced_cron_job_resource!("v1beta1");

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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_list_pull_job_template: Option<ImageListPullJobTemplateSpec>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BroadcastJobTemplateSpec {
    /// Labels and annotations of the BroadcastJobs.
    #[serde(default, skip_serializing_if = "crate::schema::is_default")]
    #[schemars(schema_with = "preserve_unknown_fields")]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: BroadcastJobSpec,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ImageListPullJobTemplateSpec {
    /// Labels and annotations of the ImageListPullJobs.
    #[serde(default, skip_serializing_if = "crate::schema::is_default")]
    #[schemars(schema_with = "preserve_unknown_fields")]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: ImageListPullJobSpec,
}

/// The spec of an ImageListPullJob (a node-agent kind), as upstream's v1beta1 has it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageListPullJobSpec {
    /// The images to pull.
    #[serde(default)]
    pub images: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pull_secrets: Vec<String>,
    /// Nodes to pull on: by name or by labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<ImagePullJobNodeSelector>,
    /// Pull on the nodes of the Pods this selects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<ImagePullJobPodSelector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallelism: Option<IntOrString>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_policy: Option<PullPolicy>,
    #[serde(default)]
    pub completion_policy: CompletionPolicy,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_config: Option<SandboxConfig>,
    /// `Always` or `IfNotPresent` (default).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image_pull_policy: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImagePullJobNodeSelector {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    #[serde(flatten)]
    pub label_selector: LabelSelector,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ImagePullJobPodSelector {
    #[serde(flatten)]
    pub label_selector: LabelSelector,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PullPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_limit: Option<i32>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SandboxConfig {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdvancedCronJobStatus {
    /// `Job`, `BroadcastJob` or `ImageListPullJob`.
    #[serde(default, rename = "type", skip_serializing_if = "String::is_empty")]
    pub type_: String,
    /// The jobs still running.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub active: Vec<ObjectReference>,
    /// The scheduled time of the most recent run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<Time>,
}

impl CronJobTemplate {
    /// The kind of job the template creates (upstream's `FindTemplateKind`: Job first, then
    /// ImageListPullJob, else BroadcastJob).
    pub fn kind(&self) -> &'static str {
        if self.job_template.is_some() {
            TEMPLATE_JOB
        } else if self.image_list_pull_job_template.is_some() {
            TEMPLATE_IMAGE_LIST_PULL_JOB
        } else {
            TEMPLATE_BROADCAST_JOB
        }
    }
}
