//! AdvancedCronJob, apps.kruise.io/v1alpha1: v1beta1 without `imageListPullJobTemplate`.

use k8s_openapi::api::batch::v1::JobTemplateSpec;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use super::v1beta1::{AdvancedCronJobStatus, BroadcastJobTemplateSpec};
use crate::schema::preserve_unknown_fields_untyped;

advanced_cron_job_resource!("v1alpha1");

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
