//! The target workload of a PersistentPodState, read from the apiserver: its uid (which owns its
//! Pods), replicas, first ordinal, reserved ordinals and whether it is being deleted. StatefulSets
//! of apps and apps.kruise.io are known; another kind (a whitelisted custom workload) is found
//! through discovery and read the same way (`spec.replicas`, else its scale subresource).

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kruise_api::persistentpodstate::{TargetReference, group_of};
use kruise_core::persistentpodstate::ObservedWorkload;
use kruise_core::rollout::statefulset::Reserved;
use kube::api::ApiResource;
use kube::core::{DynamicObject, GroupVersionKind};
use kube::{Api, Client, ResourceExt};
use serde_json::Value;

use crate::error::{Error, KubeContext};

/// A workload found.
pub struct Found {
    pub uid: String,
    pub observed: ObservedWorkload,
}

/// The API resource of a StatefulSet of either group.
pub fn known(group: &str, kind: &str) -> Option<ApiResource> {
    let version = match (group, kind) {
        ("apps", "StatefulSet") => "v1",
        ("apps.kruise.io", "StatefulSet") => "v1beta1",
        _ => return None,
    };
    Some(ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(group, version, kind),
        "statefulsets",
    ))
}

/// The workload `target` in `namespace`; `None` when it does not exist (or its kind is not
/// served).
pub async fn read(
    client: &Client,
    namespace: &str,
    target: &TargetReference,
) -> Result<Option<Found>, Error> {
    let group = group_of(&target.api_version);
    let resource = match known(group, &target.kind) {
        Some(resource) => resource,
        None => {
            let version = target
                .api_version
                .rsplit_once('/')
                .map_or(target.api_version.as_str(), |(_, v)| v);
            let gvk = GroupVersionKind::gvk(group, version, &target.kind);
            match kube::discovery::pinned_kind(client, &gvk).await {
                Ok((resource, _)) => resource,
                Err(error) => {
                    tracing::debug!(%error, api_version = %target.api_version, kind = %target.kind, "not a kind the apiserver serves");
                    return Ok(None);
                }
            }
        }
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    let what = || format!("reading {} {namespace}/{}", target.kind, target.name);
    let Some(object) = api.get_opt(&target.name).await.context(what)? else {
        return Ok(None);
    };
    let spec = object.data.get("spec").cloned().unwrap_or(Value::Null);
    let replicas = match spec.get("replicas").and_then(Value::as_i64) {
        Some(replicas) => i32::try_from(replicas).unwrap_or(i32::MAX),
        // Kubernetes' default for a StatefulSet; another kind tells through its scale.
        None if known(group, &target.kind).is_some() => 1,
        None => api
            .get_scale(&target.name)
            .await
            .context(|| {
                format!(
                    "reading the scale of {} {namespace}/{}",
                    target.kind, target.name
                )
            })?
            .spec
            .and_then(|s| s.replicas)
            .unwrap_or_default(),
    };
    let start = spec
        .pointer("/ordinals/start")
        .and_then(Value::as_i64)
        .map_or(0, |s| i32::try_from(s).unwrap_or(0));
    let reserved: Vec<IntOrString> = spec
        .get("reserveOrdinals")
        .cloned()
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default();
    Ok(Some(Found {
        uid: object.uid().unwrap_or_default(),
        observed: ObservedWorkload {
            replicas,
            start,
            reserved: Reserved::parse(&reserved),
            deleting: object.metadata.deletion_timestamp.is_some(),
        },
    }))
}
