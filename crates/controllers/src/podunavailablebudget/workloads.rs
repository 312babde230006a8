//! The workloads a budget counts (upstream `pkg/util/controllerfinder`): a workload's scale and the
//! uids that own its Pods, for Kubernetes' Deployments, ReplicaSets and StatefulSets, kruise's
//! CloneSets and Advanced StatefulSets, and any other kind through its scale subresource.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use kruise_api::policy::v1alpha1::TargetReference;
use kube::api::{ApiResource, ListParams};
use kube::core::{DynamicObject, GroupVersionKind};
use kube::{Api, Client, ResourceExt};

use crate::cache::PodCache;
use crate::error::Error;

/// A budget's Pods and the replicas they should number.
#[derive(Default)]
pub struct Found {
    pub pods: Vec<Arc<Pod>>,
    pub expected: i32,
}

/// One workload: its uid, scale, and the uids of what owns its Pods (a Deployment's ReplicaSets).
struct Workload {
    uid: String,
    scale: i32,
    pod_owners: Vec<String>,
}

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(group, _)| group)
}

fn known(group: &str, kind: &str) -> Option<ApiResource> {
    let (version, plural) = match (group, kind) {
        ("apps", "Deployment") => ("v1", "deployments"),
        ("apps", "ReplicaSet") => ("v1", "replicasets"),
        ("apps", "StatefulSet") => ("v1", "statefulsets"),
        ("apps.kruise.io", "CloneSet") => ("v1alpha1", "clonesets"),
        ("apps.kruise.io", "StatefulSet") => ("v1beta1", "statefulsets"),
        _ => return None,
    };
    Some(ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(group, version, kind),
        plural,
    ))
}

fn kube_error(context: String) -> impl FnOnce(kube::Error) -> Error {
    move |source| Error::Kube { context, source }
}

/// The workload `api_version`/`kind` `name` in `namespace`; `None` when it is missing or being
/// deleted. A ReplicaSet controlled by a Deployment stands for that Deployment (upstream's).
async fn workload(
    client: &Client,
    namespace: &str,
    api_version: &str,
    kind: &str,
    name: &str,
) -> Result<Option<Workload>, Error> {
    let group = group_of(api_version);
    let resource = match known(group, kind) {
        Some(resource) => resource,
        None => {
            let version = api_version.rsplit_once('/').map_or(api_version, |(_, v)| v);
            let gvk = GroupVersionKind::gvk(group, version, kind);
            match kube::discovery::pinned_kind(client, &gvk).await {
                Ok((resource, _)) => resource,
                Err(error) => {
                    tracing::debug!(%error, api_version, kind, "not a kind the apiserver serves");
                    return Ok(None);
                }
            }
        }
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    let context = format!("reading {kind} {namespace}/{name}");
    let Some(object) = api
        .get_opt(name)
        .await
        .map_err(kube_error(context.clone()))?
    else {
        return Ok(None);
    };
    if object.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    if (group, kind) == ("apps", "ReplicaSet")
        && let Some(owner) = object
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true) && o.kind == "Deployment")
    {
        return Box::pin(workload(
            client,
            namespace,
            &owner.api_version,
            &owner.kind,
            &owner.name,
        ))
        .await;
    }
    let uid = object.uid().unwrap_or_default();
    let scale = if known(group, kind).is_some() {
        object
            .data
            .pointer("/spec/replicas")
            .and_then(serde_json::Value::as_i64)
            .map_or(1, |r| i32::try_from(r).unwrap_or(i32::MAX))
    } else {
        let scale = api.get_scale(name).await.map_err(kube_error(format!(
            "reading the scale of {kind} {namespace}/{name}"
        )))?;
        scale.spec.and_then(|s| s.replicas).unwrap_or_default()
    };
    let mut pod_owners = vec![uid.clone()];
    if (group, kind) == ("apps", "Deployment") {
        let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), namespace);
        let list = sets
            .list(&ListParams::default())
            .await
            .map_err(kube_error(format!(
                "listing the ReplicaSets of Deployment {namespace}/{name}"
            )))?;
        pod_owners.extend(
            list.items
                .iter()
                .filter(|rs| {
                    rs.owner_references()
                        .iter()
                        .any(|o| o.controller == Some(true) && o.uid == uid)
                })
                .filter_map(|rs| rs.uid()),
        );
    }
    Ok(Some(Workload {
        uid,
        scale,
        pod_owners,
    }))
}

/// The active Pods of the budget's `targetRef` and the workload's scale.
pub async fn pods_of_target(
    client: &Client,
    pods: &PodCache,
    namespace: &str,
    target: &TargetReference,
) -> Result<Found, Error> {
    let Some(workload) = workload(
        client,
        namespace,
        &target.api_version,
        &target.kind,
        &target.name,
    )
    .await?
    else {
        return Ok(Found::default());
    };
    let pods = workload
        .pod_owners
        .iter()
        .flat_map(|uid| pods.owned_by(uid))
        .filter(|p| kruise_core::pods::is_active(p))
        .collect();
    Ok(Found {
        pods,
        expected: workload.scale,
    })
}

/// The replicas `pods` should number: the sum of the scales of their controllers, each counted once.
pub async fn expected_scale(
    client: &Client,
    namespace: &str,
    pods: &[Arc<Pod>],
) -> Result<i32, Error> {
    let mut owners = BTreeMap::new();
    for pod in pods {
        if let Some(owner) = crate::cache::controller_of(pod) {
            owners.insert(owner.uid.clone(), owner.clone());
        }
    }
    let mut scales: BTreeMap<String, i32> = BTreeMap::new();
    for owner in owners.values() {
        if let Some(workload) = workload(
            client,
            namespace,
            &owner.api_version,
            &owner.kind,
            &owner.name,
        )
        .await?
        {
            scales.insert(workload.uid, workload.scale);
        }
    }
    Ok(scales.values().sum())
}
