//! BroadcastJob, apps.kruise.io/v1alpha1: the same schema as v1beta1.

pub use super::v1beta1::{BroadcastJobStatus, CompletionPolicy, FailurePolicy, JobCondition};

broadcast_job_resource! {
    "v1alpha1",
    pub struct BroadcastJobSpec {
        #[serde(flatten)]
        pub fields: super::v1beta1::BroadcastJobSpec,
    }
}
