//! Image pre-download for a rollout (OpenKruise v1.9.0 gates `PreDownloadImageForInPlaceUpdate` and
//! `PreDownloadImageForDaemonSetUpdate`): when a CloneSet or an Advanced DaemonSet starts rolling to a
//! new revision, its controller creates one ImagePullJob per container whose image the revision
//! changes, so that kruise-daemon pulls the new images on the nodes of the Pods still to be updated
//! before the in-place update restarts their containers.
//!
//! The decisions live here: whether a revision gets jobs at all ([`cloneset_skip`],
//! [`daemonset_skip`], [`cloneset_ready_to_start`]), which images changed ([`changed_images`]) and
//! the jobs themselves ([`jobs`]). The controllers only create the jobs, mark the revision with
//! [`LABEL_IMAGE_PREDOWNLOAD_CREATED`] or [`LABEL_IMAGE_PREDOWNLOAD_IGNORED`] so it is decided once,
//! and delete the workload's jobs once every Pod runs the update revision.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta, OwnerReference,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kruise_api::broadcastjob::v1beta1::COMPLETION_ALWAYS;
use kruise_api::cloneset::v1beta1::{
    CloneSet, DEFAULT_MAX_UNAVAILABLE, POD_UPDATE_IN_PLACE_IF_POSSIBLE, POD_UPDATE_IN_PLACE_ONLY,
};
use kruise_api::daemonset::v1beta1::DaemonSet;
use kruise_api::imagepulljob::v1beta1::{
    ANNOTATION_PREDOWNLOAD_MIN_UPDATED_READY_PODS, ANNOTATION_PREDOWNLOAD_PARALLELISM,
    ANNOTATION_PREDOWNLOAD_TIMEOUT_SECONDS, CompletionPolicy, ImagePullJob,
    ImagePullJobPodSelector, ImagePullJobSpec, PullPolicy, SandboxConfig,
};
use kruise_api::intstr::{IntOrPercent, Round};
pub use kruise_api::keys::{LABEL_IMAGE_PREDOWNLOAD_CREATED, LABEL_IMAGE_PREDOWNLOAD_IGNORED};

use crate::inplace::{self, Plan, PlanOptions};
use crate::revision::LABEL_REVISION_HASH;
use crate::rollout::cloneset::partition_replicas;

/// A CloneSet with this many replicas or fewer gets no jobs.
pub const MIN_REPLICAS: i32 = 3;
/// A job's pull timeout without [`ANNOTATION_PREDOWNLOAD_TIMEOUT_SECONDS`].
pub const DEFAULT_TIMEOUT_SECONDS: i32 = 300;
/// A job's node parallelism without [`ANNOTATION_PREDOWNLOAD_PARALLELISM`].
pub const DEFAULT_PARALLELISM: i32 = 1;
/// Each node tries a pull this many times.
pub const BACKOFF_LIMIT: i32 = 1;
/// A finished job is deleted after this long.
pub const TTL_SECONDS_AFTER_FINISHED: i32 = 600;
/// The Pods' label naming their revision.
pub const LABEL_POD_REVISION: &str = "controller-revision-hash";

/// Why a revision gets no pre-download jobs; the controller labels it
/// [`LABEL_IMAGE_PREDOWNLOAD_IGNORED`] and does not look again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Skip {
    /// The CloneSet recreates its Pods (`podUpdatePolicy: ReCreate`): the new Pods pull for
    /// themselves, wherever they land.
    Recreate,
    /// Too few replicas for pre-downloading to pay off ([`MIN_REPLICAS`] or fewer).
    TooFewReplicas(i32),
    /// Every Pod is updated in the first batch (no partition, maxUnavailable covers them all).
    OneBatch { replicas: i32, max_unavailable: i32 },
    /// The change cannot be applied in place, so the Pods are recreated.
    NotInPlace(String),
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Recreate => write!(f, "the update recreates Pods"),
            Self::TooFewReplicas(n) => {
                write!(f, "{n} replicas, not more than {MIN_REPLICAS}")
            }
            Self::OneBatch {
                replicas,
                max_unavailable,
            } => write!(
                f,
                "all {replicas} Pods update in one batch (maxUnavailable {max_unavailable}, no partition)"
            ),
            Self::NotInPlace(why) => write!(f, "the update cannot be done in place: {why}"),
        }
    }
}

/// Whether the revision was already decided (jobs created, or skipped).
pub fn decided(revision_labels: &BTreeMap<String, String>) -> bool {
    revision_labels.contains_key(LABEL_IMAGE_PREDOWNLOAD_CREATED)
        || revision_labels.contains_key(LABEL_IMAGE_PREDOWNLOAD_IGNORED)
}

/// Container name → new image, for every container of `new` whose image differs from the
/// same-named container of any of `olds`, or that none of them has.
pub fn changed_images(
    olds: &[&PodTemplateSpec],
    new: &PodTemplateSpec,
) -> BTreeMap<String, String> {
    let containers = |t: &PodTemplateSpec| t.spec.as_ref().map(|s| s.containers.clone());
    let olds: Vec<_> = olds
        .iter()
        .map(|t| containers(t).unwrap_or_default())
        .collect();
    let mut changed = BTreeMap::new();
    for container in containers(new).unwrap_or_default() {
        let image = container.image.clone().unwrap_or_default();
        let mut found = false;
        for old in &olds {
            if let Some(before) = old.iter().find(|c| c.name == container.name) {
                found = true;
                if before.image.clone().unwrap_or_default() != image {
                    changed.insert(container.name.clone(), image.clone());
                }
            }
        }
        if !found {
            changed.insert(container.name.clone(), image);
        }
    }
    changed
}

/// The `apps.kruise.io/image-predownload-min-updated-ready-pods` annotation as a Pod count of `total`
/// (a number, or a percentage rounded up); absent or unreadable is 0.
pub fn min_updated_ready(annotations: &BTreeMap<String, String>, total: i32) -> i32 {
    let Some(value) = annotations.get(ANNOTATION_PREDOWNLOAD_MIN_UPDATED_READY_PODS) else {
        return 0;
    };
    let value = match value.parse::<i32>() {
        Ok(n) => IntOrString::Int(n),
        Err(_) => IntOrString::String(value.clone()),
    };
    IntOrPercent::parse(&value)
        .map(|v| v.scaled(total, Round::Up))
        .unwrap_or(0)
}

/// A CloneSet's pre-download settings as OpenKruise v1.9.0's annotations: its annotations, overlaid
/// with `spec.updateStrategy.rollingUpdate.inPlaceUpdateStrategy.imagePreDownload*`, where the
/// v1beta1 form keeps the annotations a v1alpha1 client wrote (see `kruise_api::cloneset::convert`).
pub fn cloneset_settings(cs: &CloneSet) -> BTreeMap<String, String> {
    let mut settings = cs.metadata.annotations.clone().unwrap_or_default();
    let in_place = cs
        .spec
        .update_strategy
        .rolling_update
        .as_ref()
        .and_then(|r| r.in_place_update_strategy.as_ref());
    if let Some(in_place) = in_place {
        if let Some(parallelism) = &in_place.image_pre_download_parallelism {
            settings.insert(
                ANNOTATION_PREDOWNLOAD_PARALLELISM.into(),
                kruise_api::intstr::display(parallelism),
            );
        }
        if let Some(timeout) = in_place.image_pre_download_timeout_seconds {
            settings.insert(
                ANNOTATION_PREDOWNLOAD_TIMEOUT_SECONDS.into(),
                timeout.to_string(),
            );
        }
        if let Some(min_ready) = in_place.image_pre_download_min_updated_ready_pods {
            settings.insert(
                ANNOTATION_PREDOWNLOAD_MIN_UPDATED_READY_PODS.into(),
                min_ready.to_string(),
            );
        }
    }
    settings
}

/// Whether a CloneSet rolling to `update_revision` may start pre-downloading: the update revision's
/// ready Pods (from the last status, and only if it was about the same revision) reach the
/// min-updated-ready-pods annotation.
pub fn cloneset_ready_to_start(cs: &CloneSet, update_revision: &str) -> bool {
    let replicas = cs.spec.replicas.unwrap_or(1);
    let status = cs.status.clone().unwrap_or_default();
    let updated_ready = if status.update_revision == update_revision {
        status.updated_ready_replicas
    } else {
        0
    };
    min_updated_ready(&cloneset_settings(cs), replicas) <= updated_ready
}

/// Whether a CloneSet's rollout from `current` to `update` gets no jobs, and why; an unreadable
/// partition is an error.
pub fn cloneset_skip(
    cs: &CloneSet,
    current: &PodTemplateSpec,
    update: &PodTemplateSpec,
    opts: &PlanOptions,
) -> Result<Option<Skip>, String> {
    let rolling = cs
        .spec
        .update_strategy
        .rolling_update
        .clone()
        .unwrap_or_default();
    let policy = rolling.pod_update_policy.as_str();
    if policy != POD_UPDATE_IN_PLACE_IF_POSSIBLE && policy != POD_UPDATE_IN_PLACE_ONLY {
        return Ok(Some(Skip::Recreate));
    }
    let replicas = cs.spec.replicas.unwrap_or(1);
    if replicas <= MIN_REPLICAS {
        return Ok(Some(Skip::TooFewReplicas(replicas)));
    }
    let partition =
        partition_replicas(rolling.partition.as_ref(), replicas).map_err(|e| e.to_string())?;
    let max_unavailable = rolling
        .max_unavailable
        .unwrap_or_else(|| IntOrString::String(DEFAULT_MAX_UNAVAILABLE.into()));
    let max_unavailable = IntOrPercent::parse(&max_unavailable)
        .map(|v| v.scaled(replicas, Round::Down))
        .unwrap_or(0);
    if partition == 0 && max_unavailable >= replicas {
        return Ok(Some(Skip::OneBatch {
            replicas,
            max_unavailable,
        }));
    }
    if let Some(why) = not_in_place(current, update, opts) {
        return Ok(Some(Skip::NotInPlace(why)));
    }
    Ok(None)
}

/// Why the change between two templates needs new Pods, judged on a Pod made from `current`.
fn not_in_place(
    current: &PodTemplateSpec,
    update: &PodTemplateSpec,
    opts: &PlanOptions,
) -> Option<String> {
    let pod = Pod {
        metadata: current.metadata.clone().unwrap_or_default(),
        spec: Some(current.spec.clone().unwrap_or_default()),
        status: None,
    };
    match inplace::plan(current, update, &pod, opts) {
        Plan::InPlace(_) => None,
        Plan::NotInPlace(why) => Some(why.to_string()),
    }
}

/// Whether an Advanced DaemonSet's rollout gets no jobs: only when every node is updated in the
/// first batch (no partition, maxUnavailable covers the desired number of nodes).
pub fn daemonset_skip(ds: &DaemonSet) -> Result<Option<Skip>, String> {
    let nodes = ds.status.as_ref().map_or(0, |s| s.desired_number_scheduled);
    let rolling = ds
        .spec
        .update_strategy
        .rolling_update
        .clone()
        .unwrap_or_default();
    let partition = match &rolling.partition {
        Some(p) => IntOrPercent::parse(p)
            .map(|v| v.scaled(nodes, Round::Down))
            .map_err(|e| format!("spec.updateStrategy.rollingUpdate.partition: {e}"))?,
        None => 0,
    };
    let max_unavailable = rolling
        .max_unavailable
        .as_ref()
        .map_or(Ok(1), |v| {
            IntOrPercent::parse(v).map(|v| v.scaled(nodes, Round::Up))
        })
        .unwrap_or(0);
    if partition == 0 && max_unavailable >= nodes {
        return Ok(Some(Skip::OneBatch {
            replicas: nodes,
            max_unavailable,
        }));
    }
    Ok(None)
}

/// Whether an Advanced DaemonSet is still rolling out (`hash` is its update revision's hash).
pub fn daemonset_rolling(ds: &DaemonSet, hash: &str) -> bool {
    let status = ds.status.clone().unwrap_or_default();
    status.updated_number_scheduled != status.desired_number_scheduled
        || status.update_revision != hash
}

/// What the jobs of one revision are built from.
pub struct JobSource<'a> {
    /// The workload's namespace and controller reference (the jobs' owner).
    pub namespace: &'a str,
    pub owner: OwnerReference,
    /// The workload's annotations (parallelism and timeout of the jobs).
    pub owner_annotations: &'a BTreeMap<String, String>,
    /// The workload's Pod selector.
    pub selector: &'a LabelSelector,
    /// The update revision: its name, its labels and its template.
    pub revision_name: &'a str,
    pub revision_labels: &'a BTreeMap<String, String>,
    pub template: &'a PodTemplateSpec,
    /// Container name → image, from [`changed_images`].
    pub images: &'a BTreeMap<String, String>,
}

/// The name of the job pulling `container`'s image of `revision`.
pub fn job_name(revision: &str, container: &str) -> String {
    format!("{revision}-{container}")
}

/// One ImagePullJob per changed image: named `<revision>-<container>`, owned by the workload, labelled
/// with the template's labels and the revision hash, pulling on the nodes of the workload's Pods that
/// are not at the update revision yet.
pub fn jobs(source: &JobSource<'_>) -> Vec<ImagePullJob> {
    let meta = source.template.metadata.clone().unwrap_or_default();
    let revision_hash = source
        .revision_labels
        .get(LABEL_REVISION_HASH)
        .cloned()
        .unwrap_or_default();
    let mut labels = meta.labels.clone().unwrap_or_default();
    labels.insert(LABEL_REVISION_HASH.into(), revision_hash.clone());
    let annotations = meta.annotations.clone().unwrap_or_default();
    let mut selector = source.selector.clone();
    let mut values = vec![source.revision_name.to_owned()];
    if !revision_hash.is_empty() && revision_hash != source.revision_name {
        values.push(revision_hash);
    }
    selector
        .match_expressions
        .get_or_insert_with(Vec::new)
        .push(LabelSelectorRequirement {
            key: LABEL_POD_REVISION.into(),
            operator: "NotIn".into(),
            values: Some(values),
        });
    let pull_secrets: Vec<String> = source
        .template
        .spec
        .as_ref()
        .and_then(|s| s.image_pull_secrets.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|s| s.name)
        .collect();
    let number = |key: &str, default: i32| {
        source
            .owner_annotations
            .get(key)
            .and_then(|v| v.parse::<i32>().ok())
            .unwrap_or(default)
    };
    let timeout = number(
        ANNOTATION_PREDOWNLOAD_TIMEOUT_SECONDS,
        DEFAULT_TIMEOUT_SECONDS,
    );
    let parallelism = number(ANNOTATION_PREDOWNLOAD_PARALLELISM, DEFAULT_PARALLELISM);
    source
        .images
        .iter()
        .map(|(container, image)| ImagePullJob {
            metadata: ObjectMeta {
                name: Some(job_name(source.revision_name, container)),
                namespace: Some(source.namespace.to_owned()),
                labels: Some(labels.clone()),
                owner_references: Some(vec![source.owner.clone()]),
                ..ObjectMeta::default()
            },
            spec: ImagePullJobSpec {
                image: image.clone(),
                pull_secrets: pull_secrets.clone(),
                selector: None,
                pod_selector: Some(ImagePullJobPodSelector {
                    label_selector: selector.clone(),
                }),
                parallelism: Some(IntOrString::Int(parallelism)),
                pull_policy: Some(PullPolicy {
                    timeout_seconds: Some(timeout),
                    backoff_limit: Some(BACKOFF_LIMIT),
                }),
                completion_policy: CompletionPolicy {
                    type_: COMPLETION_ALWAYS.into(),
                    active_deadline_seconds: None,
                    ttl_seconds_after_finished: Some(TTL_SECONDS_AFTER_FINISHED),
                },
                sandbox_config: Some(SandboxConfig {
                    labels: labels.clone(),
                    annotations: annotations.clone(),
                }),
                image_pull_policy: String::new(),
            },
            status: None,
        })
        .collect()
}

#[cfg(test)]
mod tests;
