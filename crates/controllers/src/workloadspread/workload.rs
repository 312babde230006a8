//! The workload a WorkloadSpread targets, read the same way by the controller and the Pod webhook:
//! the object, its replicas (the sum of `targetFilter.replicasPathList` when set; a Job's
//! parallelism), its Pod template, the owners of its Pods and its latest version.

use k8s_openapi::api::apps::v1::ReplicaSet;
use kruise_api::workloadspread::{TargetReference, VERSION_IGNORED, WorkloadSpread, group_of};
use kruise_core::workloadspread::{LABEL_POD_TEMPLATE_HASH, versioned_kind};
use kube::api::{ApiResource, ListParams};
use kube::core::{DynamicObject, GroupVersionKind};
use kube::{Api, Client, ResourceExt};
use serde_json::Value;

use crate::error::Error;

/// The API resource of a target (`apiVersion` as the reference names it; plural `<kind>s`).
pub fn resource(target: &TargetReference) -> ApiResource {
    let (group, version) = match target.api_version.rsplit_once('/') {
        Some((group, version)) => (group, version),
        None => ("", target.api_version.as_str()),
    };
    let gvk = GroupVersionKind::gvk(group, version, &target.kind);
    ApiResource::from_gvk_with_plural(&gvk, &format!("{}s", target.kind.to_ascii_lowercase()))
}

/// The target of `ws`, `None` when it does not exist (or is being deleted).
pub async fn get(client: &Client, ws: &WorkloadSpread) -> Result<Option<DynamicObject>, Error> {
    let Some(target) = &ws.spec.target_reference else {
        return Ok(None);
    };
    let namespace = ws.namespace().unwrap_or_default();
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &namespace, &resource(target));
    let object = api
        .get_opt(&target.name)
        .await
        .map_err(|source| Error::Kube {
            context: format!("reading {} {namespace}/{}", target.kind, target.name),
            source,
        })?;
    Ok(object.filter(|o| o.metadata.deletion_timestamp.is_none()))
}

fn as_i32(value: &Value) -> Option<i32> {
    value.as_i64().map(|v| i32::try_from(v).unwrap_or(i32::MAX))
}

/// The value at a dotted path (list indexes as numbers) of the object, as an i32.
fn at_path(object: &DynamicObject, path: &str) -> Option<i32> {
    let pointer: String = path.split('.').map(|part| format!("/{part}")).collect();
    object.data.pointer(&pointer).and_then(as_i32)
}

/// The replicas spread: the sum of the `replicasPathList` paths (dotted, list indexes as
/// numbers) when the filter has them; for a custom workload, the whitelist's `replicasPath`
/// (`custom_path`); a Job's `parallelism`; else `spec.replicas` (1 when unset for the kinds
/// targeted out of the box, 0 for a custom kind).
pub fn replicas(ws: &WorkloadSpread, object: &DynamicObject, custom_path: Option<&str>) -> i32 {
    if let Some(paths) = ws
        .spec
        .target_filter
        .as_ref()
        .map(|f| &f.replicas_path_list)
        .filter(|p| !p.is_empty())
    {
        return paths.iter().filter_map(|path| at_path(object, path)).sum();
    }
    if let Some(path) = custom_path {
        return at_path(object, path).unwrap_or(0);
    }
    let Some(target) = ws.spec.target_reference.as_ref() else {
        return 0;
    };
    if !kruise_api::workloadspread::is_target_kind(&target.api_version, &target.kind) {
        return object
            .data
            .pointer("/spec/replicas")
            .and_then(as_i32)
            .unwrap_or(0);
    }
    let field = if target.kind == "Job" {
        "/spec/parallelism"
    } else {
        "/spec/replicas"
    };
    object.data.pointer(field).and_then(as_i32).unwrap_or(1)
}

/// The replicas of `ws`'s workload (0 when it does not exist); a custom kind's from the path
/// kruise-configuration in `configuration_namespace` names.
pub async fn replicas_of(
    client: &Client,
    configuration_namespace: &str,
    ws: &WorkloadSpread,
) -> Result<i32, Error> {
    let Some(object) = get(client, ws).await? else {
        return Ok(0);
    };
    let path = custom_replicas_path(client, configuration_namespace, ws).await?;
    Ok(replicas(ws, &object, path.as_deref()))
}

/// The whitelist's replicas path of `ws`'s target when it is a custom kind (kruise-configuration
/// in `namespace` is read only then).
pub async fn custom_replicas_path(
    client: &Client,
    namespace: &str,
    ws: &WorkloadSpread,
) -> Result<Option<String>, Error> {
    let Some(target) = ws.spec.target_reference.as_ref() else {
        return Ok(None);
    };
    if kruise_api::workloadspread::is_target_kind(&target.api_version, &target.kind) {
        return Ok(None);
    }
    let whitelist = crate::kruise_configuration::workloadspread_whitelist(client, namespace)
        .await
        .map_err(Error::Invalid)?;
    Ok(whitelist
        .replicas_path(&target.api_version, &target.kind)
        .map(str::to_owned))
}

/// The workload's Pod template as a Pod (metadata and spec), with its volumeClaimTemplates as
/// volumes, as upstream checks subset patches against it.
pub fn pod_template(object: &DynamicObject) -> Option<Value> {
    let mut template = object.data.pointer("/spec/template")?.clone();
    let claims: Vec<String> = object
        .data
        .pointer("/spec/volumeClaimTemplates")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| {
            c.pointer("/metadata/name")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .collect();
    if !claims.is_empty()
        && let Some(spec) = template.get_mut("spec").and_then(Value::as_object_mut)
    {
        let volumes = spec
            .entry("volumes")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Some(list) = volumes.as_array_mut() {
            for name in claims {
                list.push(
                    serde_json::json!({"name": name, "persistentVolumeClaim": {"claimName": name}}),
                );
            }
        }
    }
    Some(template)
}

/// The uids whose Pods are the workload's: itself and, for a Deployment, its ReplicaSets.
pub async fn pod_owners(
    client: &Client,
    namespace: &str,
    target: &TargetReference,
    object: &DynamicObject,
) -> Result<Vec<String>, Error> {
    let uid = object.uid().unwrap_or_default();
    let mut owners = vec![uid.clone()];
    if (group_of(&target.api_version), target.kind.as_str()) == ("apps", "Deployment") {
        owners.extend(
            replica_sets_of(client, namespace, &uid)
                .await?
                .iter()
                .filter_map(|rs| rs.uid()),
        );
    }
    Ok(owners)
}

async fn replica_sets_of(
    client: &Client,
    namespace: &str,
    uid: &str,
) -> Result<Vec<ReplicaSet>, Error> {
    let api: Api<ReplicaSet> = Api::namespaced(client.clone(), namespace);
    let list = api
        .list(&ListParams::default())
        .await
        .map_err(|source| Error::Kube {
            context: format!("listing the ReplicaSets of namespace {namespace}"),
            source,
        })?;
    Ok(list
        .items
        .into_iter()
        .filter(|rs| {
            rs.owner_references()
                .iter()
                .any(|o| o.controller == Some(true) && o.uid == uid)
        })
        .collect())
}

/// The workload's latest version, the one its new Pods get: a Deployment's ReplicaSet whose
/// template is the Deployment's; a ReplicaSet's own hash. [`VERSION_IGNORED`] for kinds not
/// counted per version. `None` while it is not known yet.
pub async fn latest_version(
    client: &Client,
    namespace: &str,
    target: &TargetReference,
    object: &DynamicObject,
) -> Result<Option<String>, Error> {
    if !versioned_kind(&target.kind) {
        return Ok(Some(VERSION_IGNORED.into()));
    }
    match target.kind.as_str() {
        "ReplicaSet" => Ok(object.labels().get(LABEL_POD_TEMPLATE_HASH).cloned()),
        "Deployment" => {
            // Both sides through the typed template, so that their JSON is written alike.
            let Some(template) = object
                .data
                .pointer("/spec/template")
                .cloned()
                .and_then(|t| {
                    serde_json::from_value::<k8s_openapi::api::core::v1::PodTemplateSpec>(t).ok()
                })
                .and_then(|t| serde_json::to_value(t).ok())
            else {
                return Ok(None);
            };
            let uid = object.uid().unwrap_or_default();
            for rs in replica_sets_of(client, namespace, &uid).await? {
                if rs.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                let Some(hash) = rs.labels().get(LABEL_POD_TEMPLATE_HASH).cloned() else {
                    continue;
                };
                let Some(rs_template) = rs.spec.as_ref().and_then(|s| s.template.as_ref()) else {
                    continue;
                };
                let mut rs_template = serde_json::to_value(rs_template).unwrap_or(Value::Null);
                if let Some(labels) = rs_template
                    .pointer_mut("/metadata/labels")
                    .and_then(Value::as_object_mut)
                {
                    labels.remove(LABEL_POD_TEMPLATE_HASH);
                    if labels.is_empty()
                        && let Some(meta) = rs_template
                            .pointer_mut("/metadata")
                            .and_then(Value::as_object_mut)
                    {
                        meta.remove("labels");
                    }
                }
                if rs_template == template {
                    return Ok(Some(hash));
                }
            }
            Ok(None)
        }
        _ => Ok(Some(VERSION_IGNORED.into())),
    }
}
