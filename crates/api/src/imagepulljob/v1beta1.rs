//! ImagePullJob, ImageListPullJob and NodeImage, apps.kruise.io/v1beta1 (the storage version in
//! OpenKruise v1.9.0). An ImagePullJob pulls one image on a set of nodes; an ImageListPullJob creates one
//! ImagePullJob per image of its list; a NodeImage (one per Node, cluster-scoped, named after the Node)
//! lists the images its node's kruise-daemon is asked to pull, and reports what it pulled.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::advancedcronjob::v1beta1::{
    ImageListPullJobSpec, ImagePullJobNodeSelector, ImagePullJobPodSelector, PullPolicy,
    SandboxConfig,
};
pub use crate::broadcastjob::v1beta1::CompletionPolicy;
use crate::schema::is_default;

pub const PULL_ALWAYS: &str = "Always";
pub const PULL_IF_NOT_PRESENT: &str = "IfNotPresent";

pub const PHASE_WAITING: &str = "Waiting";
pub const PHASE_PULLING: &str = "Pulling";
pub const PHASE_SUCCEEDED: &str = "Succeeded";
pub const PHASE_FAILED: &str = "Failed";

/// `ReferenceObject.mode` of a pull secret copied for a job into the daemon's namespace.
pub const REFERENCE_MODE_BATCH: &str = "batch";

/// Annotations on a CloneSet / Advanced DaemonSet tuning its image pre-download jobs.
pub const ANNOTATION_PREDOWNLOAD_PARALLELISM: &str = "apps.kruise.io/image-predownload-parallelism";
pub const ANNOTATION_PREDOWNLOAD_TIMEOUT_SECONDS: &str =
    "apps.kruise.io/image-predownload-timeout-seconds";
pub const ANNOTATION_PREDOWNLOAD_MIN_UPDATED_READY_PODS: &str =
    "apps.kruise.io/image-predownload-min-updated-ready-pods";

image_pull_job_resource! {
    "v1beta1",
    age_column(short),
    #[serde(rename_all = "camelCase")]
    pub struct ImagePullJobSpec {
        /// The image to pull.
        #[serde(default)]
        pub image: String,
        /// Names of Secrets in the job's namespace used to pull the image.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub pull_secrets: Vec<String>,
        /// Nodes to pull on: by name or by labels (all nodes when neither this nor podSelector is set).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub selector: Option<ImagePullJobNodeSelector>,
        /// Pull on the nodes of the Pods this selects in the job's namespace.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub pod_selector: Option<ImagePullJobPodSelector>,
        /// How many nodes pull at once (default 1).
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
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImagePullJobStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// Nodes the job pulls on.
    #[serde(default)]
    pub desired: i32,
    /// Nodes pulling now.
    #[serde(default)]
    pub active: i32,
    #[serde(default)]
    pub succeeded: i32,
    #[serde(default)]
    pub failed: i32,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The nodes that failed to pull, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_nodes: Vec<String>,
}

image_list_pull_job_resource! {
    "v1beta1",
    pub struct ImageListPullJobObjectSpec {
        #[serde(flatten)]
        pub fields: ImageListPullJobSpec,
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageListPullJobStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// Images to pull (one ImagePullJob each).
    #[serde(default)]
    pub desired: i32,
    /// ImagePullJobs still running.
    #[serde(default)]
    pub active: i32,
    /// ImagePullJobs finished.
    #[serde(default)]
    pub completed: i32,
    /// ImagePullJobs finished without a failed node.
    #[serde(default)]
    pub succeeded: i32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_image_statuses: Vec<FailedImageStatus>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailedImageStatus {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image_pull_job: String,
    /// The image.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

node_image_resource! {
    "v1beta1",
    pub struct NodeImageSpec {
        /// Image name (without tag) → what to pull of it.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        pub images: BTreeMap<String, ImageSpec>,
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageSpec {
    /// Secrets (in the daemon's config namespace) to pull with.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pull_secrets: Vec<ReferenceObject>,
    #[serde(default)]
    pub tags: Vec<ImageTagSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_config: Option<SandboxConfig>,
}

#[derive(
    Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
pub struct ReferenceObject {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// `batch`: a Secret copied for ImagePullJobs, cleaned up with the image spec.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mode: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageTagSpec {
    pub tag: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_policy: Option<ImageTagPullPolicy>,
    /// The objects (ImagePullJobs) that asked for this tag.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owner_references: Vec<ObjectReference>,
    /// Increased to ask for a new pull of the tag.
    #[serde(default, skip_serializing_if = "is_default")]
    pub version: i64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image_pull_policy: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageTagPullPolicy {
    /// Seconds one pull attempt may take (default 600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<i32>,
    /// Attempts before the pull is failed (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_limit: Option<i32>,
    /// Seconds after completion at which the tag is removed from the spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<i32>,
    /// Seconds after creation at which an unfinished pull is failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeImageStatus {
    #[serde(default)]
    pub desired: i32,
    #[serde(default)]
    pub succeeded: i32,
    #[serde(default)]
    pub failed: i32,
    #[serde(default)]
    pub pulling: i32,
    #[serde(default)]
    pub waiting: i32,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub image_statuses: BTreeMap<String, ImageStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_sync_status: Option<SyncStatus>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ImageStatus {
    #[serde(default)]
    pub tags: Vec<ImageTagStatus>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageTagStatus {
    pub tag: String,
    /// Waiting, Pulling, Succeeded, Failed.
    #[serde(default)]
    pub phase: String,
    #[serde(default, skip_serializing_if = "is_default")]
    pub progress: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    #[serde(default, skip_serializing_if = "is_default")]
    pub version: i64,
    #[serde(default, rename = "imageID", skip_serializing_if = "String::is_empty")]
    pub image_id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_at: Option<Time>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub status: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

impl ImageListPullJob {
    pub fn spec(&self) -> &ImageListPullJobSpec {
        &self.spec.fields
    }
}
