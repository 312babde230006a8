//! What a reconcile of a UnitedDeployment observes of each subset workload: the workload as cached
//! and its Pods (the shared Pod cache). Read by the planning steps (`status`, `reservation`) and
//! by `reconcile`, which writes; this module neither writes nor depends on the modules that do.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kruise_core::rollout::uniteddeployment::{self as planner, TemplateKind};
use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::Value;

use super::Context;

/// A subset workload as observed this reconcile.
pub(crate) struct Observed {
    pub(crate) object: Arc<DynamicObject>,
    pub(crate) spec_replicas: i32,
    pub(crate) partition: Option<i32>,
    pub(crate) status_replicas: i32,
    pub(crate) ready_replicas: i32,
    pub(crate) updated_replicas: i32,
    pub(crate) updated_ready_replicas: i32,
    pub(crate) pods: Vec<Arc<Pod>>,
}

fn int_at(object: &DynamicObject, pointer: &str) -> Option<i32> {
    object
        .data
        .pointer(pointer)
        .and_then(Value::as_i64)
        .map(|v| v.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32)
}

fn selector_of(object: &DynamicObject) -> Option<LabelSelector> {
    serde_json::from_value(object.data.pointer("/spec/selector")?.clone()).ok()
}

pub(crate) fn observe(
    ctx: &Context,
    kind: TemplateKind,
    object: Arc<DynamicObject>,
    update_revision: &str,
) -> Observed {
    let namespace = object.namespace().unwrap_or_default();
    let pods: Vec<Arc<Pod>> = match kind {
        TemplateKind::Deployment => {
            // Deployment Pods belong to ReplicaSets: select them by the subset's selector.
            let selector = selector_of(&object);
            ctx.pods.select(Some(&namespace), |labels| {
                selector.as_ref().is_some_and(|s| labels.matches(s))
            })
        }
        _ => object
            .metadata
            .uid
            .as_deref()
            .map(|uid| ctx.pods.owned_by(uid))
            .unwrap_or_default(),
    };
    let (updated, updated_ready) =
        planner::updated_replicas(pods.iter().map(|p| p.as_ref()), update_revision);
    Observed {
        spec_replicas: int_at(&object, "/spec/replicas").unwrap_or(1),
        partition: planner::workload_partition(kind, &object.data),
        status_replicas: int_at(&object, "/status/replicas").unwrap_or(0),
        ready_replicas: int_at(&object, "/status/readyReplicas").unwrap_or(0),
        updated_replicas: updated,
        updated_ready_replicas: updated_ready,
        pods,
        object,
    }
}
