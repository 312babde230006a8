//! The Pod a BroadcastJob runs on one node (upstream `createPod` with Kubernetes'
//! `GetPodFromTemplate`).

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kruise_api::broadcastjob::v1beta1::BroadcastJob;
use kruise_api::broadcastjob::{LABEL_CONTROLLER_UID, LABEL_JOB_NAME};
use kruise_core::nodefit;

/// A field the job lacks (the API server always sets them).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("BroadcastJob has no {0}")]
pub struct BuildError(&'static str);

/// The labels the job's Pods carry and are found by.
pub fn job_labels(job: &BroadcastJob) -> Result<[(String, String); 2], BuildError> {
    let name = job
        .metadata
        .name
        .clone()
        .ok_or(BuildError("metadata.name"))?;
    let uid = job.metadata.uid.clone().ok_or(BuildError("metadata.uid"))?;
    Ok([
        (LABEL_JOB_NAME.to_owned(), name),
        (LABEL_CONTROLLER_UID.to_owned(), uid),
    ])
}

/// The controller reference of the job's Pods.
pub fn owner_reference(job: &BroadcastJob) -> Result<OwnerReference, BuildError> {
    crate::claim::controller_reference(job).map_err(BuildError)
}

/// The job's Pod for `node`: the template's labels (plus the job's), annotations and finalizers,
/// `generateName` `<job>-`, owned by the job; bound to the node by required node affinity
/// `matchFields metadata.name In [node]` for the scheduler, or by `spec.nodeName` when
/// `by_scheduler` is false.
pub fn build_pod(job: &BroadcastJob, node: &str, by_scheduler: bool) -> Result<Pod, BuildError> {
    let meta = job.spec.template.metadata.clone().unwrap_or_default();
    let mut labels = meta.labels.unwrap_or_default();
    labels.extend(job_labels(job)?);
    let owner = owner_reference(job)?;
    let mut spec = job.spec.template.spec.clone().unwrap_or_default();
    if by_scheduler {
        nodefit::bind_to_node(&mut spec, node);
    } else {
        spec.node_name = Some(node.to_owned());
    }
    Ok(Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", owner.name)),
            namespace: job.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: meta.annotations.filter(|a| !a.is_empty()),
            finalizers: meta.finalizers.filter(|f| !f.is_empty()),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{
        Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PodSpec,
        PodTemplateSpec, PreferredSchedulingTerm,
    };

    use super::*;

    fn job() -> BroadcastJob {
        let mut job = BroadcastJob::default();
        job.metadata.name = Some("download-image".into());
        job.metadata.namespace = Some("ns".into());
        job.metadata.uid = Some("u-1".into());
        job.spec.template = PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some([("app".to_string(), "x".to_string())].into()),
                annotations: Some([("a".to_string(), "b".to_string())].into()),
                ..Default::default()
            }),
            spec: Some(PodSpec {
                restart_policy: Some("Never".into()),
                affinity: Some(Affinity {
                    node_affinity: Some(NodeAffinity {
                        required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                            node_selector_terms: vec![NodeSelectorTerm {
                                match_expressions: Some(vec![NodeSelectorRequirement {
                                    key: "zone".into(),
                                    operator: "Exists".into(),
                                    values: None,
                                }]),
                                match_fields: None,
                            }],
                        }),
                        preferred_during_scheduling_ignored_during_execution: Some(vec![
                            PreferredSchedulingTerm::default(),
                        ]),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        };
        job
    }

    #[test]
    fn pod_for_a_node_through_the_scheduler() {
        let pod = build_pod(&job(), "sim-1", true).expect("pod");
        assert_eq!(
            pod.metadata.generate_name.as_deref(),
            Some("download-image-")
        );
        assert_eq!(pod.metadata.name, None);
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels["broadcastjob-name"], "download-image");
        assert_eq!(labels["broadcastjob-controller-uid"], "u-1");
        assert_eq!(labels["app"], "x");
        let owner = &pod.metadata.owner_references.as_ref().expect("owner")[0];
        assert_eq!(
            (
                owner.kind.as_str(),
                owner.controller,
                owner.block_owner_deletion
            ),
            ("BroadcastJob", Some(true), Some(true))
        );
        let spec = pod.spec.as_ref().expect("spec");
        assert_eq!(spec.node_name, None);
        assert_eq!(nodefit::bound_node(spec), Some("sim-1"));
        let affinity = spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .expect("node affinity");
        // The template's required terms are replaced; preferred terms stay.
        let terms = &affinity
            .required_during_scheduling_ignored_during_execution
            .as_ref()
            .expect("required")
            .node_selector_terms;
        assert_eq!(terms.len(), 1);
        assert!(terms[0].match_expressions.is_none());
        assert!(
            affinity
                .preferred_during_scheduling_ignored_during_execution
                .is_some()
        );
    }

    #[test]
    fn pod_for_a_node_by_node_name() {
        let pod = build_pod(&job(), "sim-2", false).expect("pod");
        assert_eq!(
            pod.spec.as_ref().and_then(|s| s.node_name.as_deref()),
            Some("sim-2")
        );
    }

    #[test]
    fn a_job_without_uid_builds_nothing() {
        let mut j = job();
        j.metadata.uid = None;
        assert_eq!(
            build_pod(&j, "n", true).err(),
            Some(BuildError("metadata.uid"))
        );
    }
}
