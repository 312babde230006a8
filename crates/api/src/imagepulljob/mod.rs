//! Image pre-pulling: ImagePullJob, ImageListPullJob and NodeImage — both versions, conversion,
//! OpenKruise v1.9.0's defaults and validation, and the CRDs. Both versions have the same schema, so
//! conversion copies every field.

/// The NodeImage resource of one version (`"v1alpha1"` or `"v1beta1"`), declared with the spec
/// struct that follows the version. The kube attribute (names, subresources, printer columns) is
/// the same in both versions, so it is written once here; the specs differ, so each version writes
/// its own.
macro_rules! node_image_resource {
    ($version:tt, $($spec:tt)*) => {
        crate::crd::resource! {
            #[kube(
                version = $version,
                kind = "NodeImage",
                status = "NodeImageStatus",
                doc = "NodeImage is the Schema for the nodeimages API",
                printcolumn(
                    name = "DESIRED",
                    type_ = "integer",
                    json_path = ".status.desired",
                    description = "Number of all images on this node"
                ),
                printcolumn(
                    name = "PULLING",
                    type_ = "integer",
                    json_path = ".status.pulling",
                    description = "Number of image pull task active"
                ),
                printcolumn(
                    name = "SUCCEED",
                    type_ = "integer",
                    json_path = ".status.succeeded",
                    description = "Number of image pull task succeeded"
                ),
                printcolumn(
                    name = "FAILED",
                    type_ = "integer",
                    json_path = ".status.failed",
                    description = "Number of image pull tasks failed"
                )
            )]
            age_column(long)
            $($spec)*
        }
    };
}

/// The ImagePullJob resource of one version (`"v1alpha1"` or `"v1beta1"`), declared with the AGE
/// column (see [`crate::crd::resource`]) and the spec struct that follow the version. The kube
/// attribute (names, the columns before AGE) is the same in both versions, so it is written once here;
/// AGE differs (v1alpha1's has the long description and a MESSAGE column after it), and so do the
/// specs.
macro_rules! image_pull_job_resource {
    ($version:tt, age_column($($age:tt)*), $($spec:tt)*) => {
        crate::crd::resource! {
            #[kube(
                version = $version,
                kind = "ImagePullJob",
                namespaced,
                status = "ImagePullJobStatus",
                doc = "ImagePullJob is the Schema for the imagepulljobs API",
                printcolumn(
                    name = "TOTAL",
                    type_ = "integer",
                    json_path = ".status.desired",
                    description = "Number of all nodes matched by this job"
                ),
                printcolumn(
                    name = "ACTIVE",
                    type_ = "integer",
                    json_path = ".status.active",
                    description = "Number of image pull task active"
                ),
                printcolumn(
                    name = "SUCCEED",
                    type_ = "integer",
                    json_path = ".status.succeeded",
                    description = "Number of image pull task succeeded"
                ),
                printcolumn(
                    name = "FAILED",
                    type_ = "integer",
                    json_path = ".status.failed",
                    description = "Number of image pull tasks failed"
                )
            )]
            age_column($($age)*)
            $($spec)*
        }
    };
}

/// The ImageListPullJob resource of one version (`"v1alpha1"` or `"v1beta1"`), declared with the
/// spec struct that follows the version. The kube attribute (names, subresources, printer columns)
/// is the same in both versions, so it is written once here; the specs differ, so each version
/// writes its own.
macro_rules! image_list_pull_job_resource {
    ($version:tt, $($spec:tt)*) => {
        crate::crd::resource! {
            #[kube(
                version = $version,
                kind = "ImageListPullJob",
                namespaced,
                status = "ImageListPullJobStatus",
                doc = "ImageListPullJob is the Schema for the imagelistpulljobs API",
                printcolumn(
                    name = "TOTAL",
                    type_ = "integer",
                    json_path = ".status.desired",
                    description = "Number of image pull job"
                ),
                printcolumn(
                    name = "SUCCEEDED",
                    type_ = "integer",
                    json_path = ".status.succeeded",
                    description = "Number of image pull job succeeded"
                ),
                printcolumn(
                    name = "COMPLETED",
                    type_ = "integer",
                    json_path = ".status.completed",
                    description = "Number of ImagePullJobs which are finished"
                )
            )]
            age_column(short)
            $($spec)*
        }
    };
}

pub mod v1alpha1;
pub mod v1beta1;

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::broadcastjob::v1beta1::{COMPLETION_ALWAYS, COMPLETION_NEVER};
use crate::field::{FieldError, Path};
use crate::kinds::{Defaults, KindApi};
use crate::validation;

/// Upstream's defaults of a pull: seconds per attempt, and attempts.
pub const DEFAULT_TIMEOUT_SECONDS: i32 = 600;
pub const DEFAULT_BACKOFF_LIMIT: i32 = 3;
/// The most images one NodeImage may list.
pub const MAX_IMAGES_PER_NODE: usize = 256;
/// The most images one ImageListPullJob may list.
pub const MAX_IMAGES_PER_LIST: usize = 255;

/// The [`KindApi`] of ImagePullJob.
pub struct ImagePullJobApi;
/// The [`KindApi`] of ImageListPullJob.
pub struct ImageListPullJobApi;
/// The [`KindApi`] of NodeImage.
pub struct NodeImageApi;

fn default_pull_policy(policy: &mut Option<v1beta1::PullPolicy>) {
    let policy = policy.get_or_insert_with(Default::default);
    policy
        .timeout_seconds
        .get_or_insert(DEFAULT_TIMEOUT_SECONDS);
    policy.backoff_limit.get_or_insert(DEFAULT_BACKOFF_LIMIT);
}

/// Whether `image` is a valid image reference (`name[:tag][@digest]`).
pub fn image_reference_ok(image: &str) -> bool {
    crate::advancedcronjob::image_reference_ok(image)
}

/// The selector checks ImagePullJob and ImageListPullJob share; the first error found is reported.
fn validate_selectors(
    selector: Option<&v1beta1::ImagePullJobNodeSelector>,
    pod_selector: Option<&v1beta1::ImagePullJobPodSelector>,
    path: &Path,
) -> Option<FieldError> {
    if let Some(selector) = selector {
        let labels = &selector.label_selector;
        if labels.match_labels.is_some() || labels.match_expressions.is_some() {
            if !selector.names.is_empty() {
                return Some(FieldError::invalid(
                    &path.child("selector"),
                    "selector",
                    "can not set both names and labelSelector in this spec.selector",
                ));
            }
            let mut errors = Vec::new();
            validation::validate_label_selector(labels, &path.child("selector"), &mut errors);
            if let Some(error) = errors.into_iter().next() {
                return Some(error);
            }
        }
        let mut seen = BTreeSet::new();
        if !selector.names.iter().all(|name| seen.insert(name)) {
            return Some(FieldError::invalid(
                &path.child("selector").child("names"),
                selector.names.join(","),
                "duplicated name in selector names",
            ));
        }
    }
    if let Some(pods) = pod_selector {
        if selector.is_some() {
            return Some(FieldError::invalid(
                path,
                "selector, podSelector",
                "can not set both selector and podSelector",
            ));
        }
        let mut errors = Vec::new();
        validation::validate_label_selector(
            &pods.label_selector,
            &path.child("podSelector"),
            &mut errors,
        );
        if let Some(error) = errors.into_iter().next() {
            return Some(error);
        }
    }
    None
}

/// `completionPolicy.type`: Always (deadline and TTL allowed) or Never (neither).
fn validate_completion(
    policy: &v1beta1::CompletionPolicy,
    timeout_seconds: Option<i32>,
    path: &Path,
) -> Option<FieldError> {
    let path = path.child("completionPolicy");
    match policy.type_.as_str() {
        COMPLETION_ALWAYS => {
            let timeout = i64::from(timeout_seconds.unwrap_or(DEFAULT_TIMEOUT_SECONDS));
            match (policy.active_deadline_seconds, timeout_seconds.is_some()) {
                (Some(deadline), _) if timeout > deadline => Some(FieldError::invalid(
                    &path.child("activeDeadlineSeconds"),
                    deadline,
                    "completionPolicy.activeDeadlineSeconds must be greater than pullPolicy.timeoutSeconds(default 600)",
                )),
                _ => None,
            }
        }
        COMPLETION_NEVER => (policy.active_deadline_seconds.is_some()
            || policy.ttl_seconds_after_finished.is_some())
        .then(|| {
            FieldError::invalid(
                &path,
                "Never",
                "activeDeadlineSeconds and ttlSecondsAfterFinished can only work with Always CompletionPolicyType",
            )
        }),
        other => Some(FieldError::not_supported(
            &path.child("type"),
            format!("unknown type of completionPolicy: {other}"),
            &[COMPLETION_ALWAYS, COMPLETION_NEVER],
        )),
    }
}

/// `parallelism`: a non-negative integer (a percentage is refused).
fn validate_parallelism(parallelism: Option<&IntOrString>, path: &Path) -> Option<FieldError> {
    let path = path.child("parallelism");
    match parallelism? {
        IntOrString::Int(n) if *n < 0 => Some(FieldError::invalid(
            &path,
            n,
            "parallelism must be non-negative",
        )),
        IntOrString::Int(_) => None,
        IntOrString::String(s) if s.ends_with('%') => Some(FieldError::invalid(
            &path,
            s,
            "parallelism does not support percentage value",
        )),
        IntOrString::String(s) => match s.parse::<i32>() {
            Ok(n) if n < 0 => Some(FieldError::invalid(
                &path,
                s,
                "parallelism must be non-negative",
            )),
            Ok(_) => None,
            Err(error) => Some(FieldError::invalid(
                &path,
                s,
                format!("parallelism must be a valid integer: {error}"),
            )),
        },
    }
}

/// The number of nodes an ImagePullJob pulls on at once (default 1; a string is read as an integer).
pub fn parallelism(value: Option<&IntOrString>) -> usize {
    let n = match value {
        None => 1,
        Some(IntOrString::Int(n)) => *n,
        Some(IntOrString::String(s)) => s.parse().unwrap_or(1),
    };
    usize::try_from(n).unwrap_or(0)
}

impl KindApi for ImagePullJobApi {
    const KIND: &'static str = "ImagePullJob";
    const PLURAL: &'static str = "imagepulljobs";
    const RAW_PATHS: &'static [&'static str] = &[];
    type V1alpha1 = v1alpha1::ImagePullJob;
    type V1beta1 = v1beta1::ImagePullJob;

    crate::kinds::same_schema_conversion!(ImagePullJob, ImagePullJobSpec);

    fn default_with(object: &mut v1beta1::ImagePullJob, _defaults: &Defaults) {
        let spec = &mut object.spec;
        if spec.completion_policy.type_.is_empty() {
            spec.completion_policy.type_ = COMPLETION_ALWAYS.into();
        }
        default_pull_policy(&mut spec.pull_policy);
        if spec.image_pull_policy.is_empty() {
            spec.image_pull_policy = v1beta1::PULL_IF_NOT_PRESENT.into();
        }
    }

    fn validate(
        object: &v1beta1::ImagePullJob,
        old: Option<&v1beta1::ImagePullJob>,
    ) -> Vec<FieldError> {
        let spec = &object.spec;
        let path = Path::new("spec");
        if let Some(old) = old
            && old.spec.pull_secrets != spec.pull_secrets
        {
            return vec![FieldError::forbidden(
                &path.child("pullSecrets"),
                "spec.pullSecrets is immutable",
            )];
        }
        let first = validate_selectors(spec.selector.as_ref(), spec.pod_selector.as_ref(), &path)
            .or_else(|| {
                spec.image.is_empty().then(|| {
                    FieldError::invalid(&path.child("image"), "", "image can not be empty")
                })
            })
            .or_else(|| {
                (!image_reference_ok(&spec.image)).then(|| {
                    FieldError::invalid(
                        &path.child("image"),
                        &spec.image,
                        format!("invalid image {}: invalid reference format", spec.image),
                    )
                })
            })
            .or_else(|| validate_parallelism(spec.parallelism.as_ref(), &path))
            .or_else(|| {
                validate_completion(
                    &spec.completion_policy,
                    spec.pull_policy.as_ref().and_then(|p| p.timeout_seconds),
                    &path,
                )
            });
        first.into_iter().collect()
    }
}

impl KindApi for ImageListPullJobApi {
    const KIND: &'static str = "ImageListPullJob";
    const PLURAL: &'static str = "imagelistpulljobs";
    const RAW_PATHS: &'static [&'static str] = &[];
    type V1alpha1 = v1alpha1::ImageListPullJob;
    type V1beta1 = v1beta1::ImageListPullJob;

    crate::kinds::same_schema_conversion!(
        ImageListPullJob,
        ImageListPullJobSpec,
        ImageListPullJobObjectSpec
    );

    fn default_with(object: &mut v1beta1::ImageListPullJob, _defaults: &Defaults) {
        let spec = &mut object.spec.fields;
        if spec.completion_policy.type_.is_empty() {
            spec.completion_policy.type_ = COMPLETION_ALWAYS.into();
        }
        default_pull_policy(&mut spec.pull_policy);
    }

    fn validate(
        object: &v1beta1::ImageListPullJob,
        _old: Option<&v1beta1::ImageListPullJob>,
    ) -> Vec<FieldError> {
        let spec = &object.spec.fields;
        let path = Path::new("spec");
        let images = path.child("images");
        let mut seen = BTreeSet::new();
        let first = validate_selectors(spec.selector.as_ref(), spec.pod_selector.as_ref(), &path)
            .or_else(|| {
                spec.images
                    .is_empty()
                    .then(|| FieldError::invalid(&images, "[]", "image can not be empty"))
            })
            .or_else(|| {
                (!spec.images.iter().all(|image| seen.insert(image))).then(|| {
                    FieldError::invalid(
                        &images,
                        spec.images.join(","),
                        "images cannot have duplicate values",
                    )
                })
            })
            .or_else(|| {
                (spec.images.len() > MAX_IMAGES_PER_LIST).then(|| {
                    FieldError::invalid(
                        &images,
                        spec.images.len(),
                        "the maximum number of images cannot > 255",
                    )
                })
            })
            .or_else(|| {
                spec.images
                    .iter()
                    .find(|image| !image_reference_ok(image))
                    .map(|bad| {
                        FieldError::invalid(
                            &images,
                            bad,
                            format!("invalid image {bad}: invalid reference format"),
                        )
                    })
            })
            .or_else(|| {
                // Upstream checks no deadline against the timeout for a list.
                match spec.completion_policy.type_.as_str() {
                    COMPLETION_ALWAYS => None,
                    _ => validate_completion(&spec.completion_policy, None, &path),
                }
            });
        first.into_iter().collect()
    }
}

/// Upstream's NodeImage defaults: every tag gets a creation time and a pull policy with its timeout and
/// back-off limit; tags are kept sorted.
pub fn default_node_image(object: &mut v1beta1::NodeImage, now: &Time) {
    for image in object.spec.images.values_mut() {
        for tag in &mut image.tags {
            tag.created_at.get_or_insert_with(|| now.clone());
            let policy = tag.pull_policy.get_or_insert_with(Default::default);
            policy
                .timeout_seconds
                .get_or_insert(DEFAULT_TIMEOUT_SECONDS);
            policy.backoff_limit.get_or_insert(DEFAULT_BACKOFF_LIMIT);
        }
        image.tags.sort_by(|a, b| a.tag.cmp(&b.tag));
    }
}

impl KindApi for NodeImageApi {
    const KIND: &'static str = "NodeImage";
    const PLURAL: &'static str = "nodeimages";
    const RAW_PATHS: &'static [&'static str] = &[];
    type V1alpha1 = v1alpha1::NodeImage;
    type V1beta1 = v1beta1::NodeImage;

    crate::kinds::same_schema_conversion!(NodeImage, NodeImageSpec);

    fn default_with(object: &mut v1beta1::NodeImage, _defaults: &Defaults) {
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        default_node_image(object, &now);
    }

    fn validate(object: &v1beta1::NodeImage, _old: Option<&v1beta1::NodeImage>) -> Vec<FieldError> {
        let images = &object.spec.images;
        let path = Path::new("spec").child("images");
        if images.len() > MAX_IMAGES_PER_NODE {
            return vec![FieldError::invalid(
                &path,
                images.len(),
                format!(
                    "spec images length {} can not be more than {MAX_IMAGES_PER_NODE}",
                    images.len()
                ),
            )];
        }
        for (name, image) in images {
            let image_path = path.key(name);
            if name.is_empty() {
                return vec![FieldError::invalid(
                    &path,
                    "",
                    "image name can not be empty",
                )];
            }
            let mut seen = BTreeSet::new();
            for (i, tag) in image.tags.iter().enumerate() {
                let tag_path = image_path.child("tags").index(i);
                let full = format!("{name}/{}", tag.tag);
                let error = if tag.tag.is_empty() {
                    Some(format!("tag for image {name} can not be empty"))
                } else if !seen.insert(&tag.tag) {
                    Some(format!("duplicated tag {} for image {name}", tag.tag))
                } else if tag.created_at.is_none() {
                    Some(format!("createAt field for {full} can not be empty"))
                } else if tag.version < 0 {
                    Some(format!("version for {full} can not be less than 0"))
                } else if tag.pull_policy.is_none() {
                    Some(format!("pullPolicy field for {full} must set"))
                } else if tag
                    .pull_policy
                    .as_ref()
                    .is_some_and(|p| p.ttl_seconds_after_finished.is_none())
                {
                    Some(format!(
                        "pullPolicy.ttlSecondsAfterFinished for {full} must set"
                    ))
                } else {
                    None
                };
                if let Some(message) = error {
                    return vec![FieldError::invalid(&tag_path, &tag.tag, message)];
                }
            }
        }
        Vec::new()
    }
}

#[cfg(test)]
mod tests;
