//! ImagePullJob, ImageListPullJob and NodeImage, apps.kruise.io/v1alpha1: the same schemas as v1beta1
//! (v1alpha1's NodeImage pull secrets have no `mode` upstream; kruise-rs serves it in both versions so
//! that nothing is lost through conversion).

pub use super::v1beta1::{ImageListPullJobStatus, ImagePullJobStatus, NodeImageStatus};

image_pull_job_resource! {
    "v1alpha1",
    age_column(
        long,
        printcolumn(
            name = "MESSAGE",
            type_ = "string",
            json_path = ".status.message",
            description = "Summary of status when job is failed"
        )
    ),
    pub struct ImagePullJobSpec {
        #[serde(flatten)]
        pub fields: super::v1beta1::ImagePullJobSpec,
    }
}

image_list_pull_job_resource! {
    "v1alpha1",
    pub struct ImageListPullJobSpec {
        #[serde(flatten)]
        pub fields: super::v1beta1::ImageListPullJobSpec,
    }
}

node_image_resource! {
    "v1alpha1",
    pub struct NodeImageSpec {
        #[serde(flatten)]
        pub fields: super::v1beta1::NodeImageSpec,
    }
}
