//! BroadcastJob, apps.kruise.io/v1alpha1: the same schema as v1beta1.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use super::v1beta1::{BroadcastJobStatus, CompletionPolicy, FailurePolicy, JobCondition};

#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "apps.kruise.io",
    version = "v1alpha1",
    kind = "BroadcastJob",
    namespaced,
    status = "BroadcastJobStatus",
    shortname = "bcj",
    derive = "PartialEq",
    derive = "Default",
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
    ),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "CreationTimestamp is a timestamp representing the server time when this object was created."
    )
)]
pub struct BroadcastJobSpec {
    #[serde(flatten)]
    pub fields: super::v1beta1::BroadcastJobSpec,
}
