//! BroadcastJob, apps.kruise.io/v1beta1 (storage version): run a Pod to completion on every eligible node.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::pub_types::JobCondition;
use crate::schema::{is_default, preserve_unknown_fields};

pub const COMPLETION_ALWAYS: &str = "Always";
pub const COMPLETION_NEVER: &str = "Never";
pub const FAILURE_CONTINUE: &str = "Continue";
pub const FAILURE_FAIL_FAST: &str = "FailFast";
pub const FAILURE_PAUSE: &str = "Pause";
pub const PHASE_COMPLETED: &str = "completed";
pub const PHASE_RUNNING: &str = "running";
pub const PHASE_PAUSED: &str = "paused";
pub const PHASE_FAILED: &str = "failed";
pub const CONDITION_COMPLETE: &str = "Complete";
pub const CONDITION_FAILED: &str = "Failed";

broadcast_job_resource! {
    "v1beta1",
    #[serde(rename_all = "camelCase")]
    pub struct BroadcastJobSpec {
        /// Maximum number of Pods running at once: an integer, or a percentage of the desired node count.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub parallelism: Option<IntOrString>,
        /// The Pod run on every eligible node.
        #[schemars(schema_with = "preserve_unknown_fields")]
        pub template: PodTemplateSpec,
        /// When the job counts as finished.
        #[serde(default)]
        pub completion_policy: CompletionPolicy,
        /// Stop creating Pods.
        #[serde(default, skip_serializing_if = "is_default")]
        pub paused: bool,
        /// What a failed Pod does to the job.
        #[serde(default, skip_serializing_if = "is_default")]
        pub failure_policy: FailurePolicy,
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompletionPolicy {
    /// `Always` (default): the job completes when every desired node ran its Pod; `Never`: it keeps
    /// running Pods on new nodes.
    #[serde(default, rename = "type", skip_serializing_if = "String::is_empty")]
    pub type_: String,
    /// Seconds after startTime at which an unfinished job fails (Always only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<i64>,
    /// Seconds after completion at which the job is deleted (Always only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<i32>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailurePolicy {
    /// `FailFast` (default), `Continue` or `Pause`.
    #[serde(default, rename = "type", skip_serializing_if = "String::is_empty")]
    pub type_: String,
    /// Restarts tolerated per Pod (restartPolicy OnFailure) before it counts as failed.
    #[serde(default, skip_serializing_if = "is_default")]
    pub restart_limit: i32,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BroadcastJobStatus {
    /// `Complete` or `Failed` conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<JobCondition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    #[serde(default)]
    pub active: i32,
    #[serde(default)]
    pub succeeded: i32,
    #[serde(default)]
    pub failed: i32,
    #[serde(default)]
    pub desired: i32,
    /// `running`, `paused`, `completed` or `failed`.
    #[serde(default)]
    pub phase: String,
}
