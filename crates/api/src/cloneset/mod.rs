//! CloneSet: types of both versions, conversion, defaults, validation and CRD.

/// The CloneSet resource of one version (`"v1alpha1"` or `"v1beta1"`). Its kube attribute (names,
/// scale subresource, printer columns) and its spec fields are the same in both versions, so they
/// are written once here; the strategy types the spec names resolve where the macro is called, so
/// each version's `CloneSetSpec` holds that version's `CloneSetScaleStrategy` and
/// `CloneSetUpdateStrategy`.
macro_rules! clone_set_resource {
    ($version:tt) => {
        crate::crd::resource! {
            #[kube(
                version = $version,
                kind = "CloneSet",
                namespaced,
                status = "CloneSetStatus",
                shortname = "clone",
                doc = "CloneSet is the Schema for the clonesets API",
                scale(
                    spec_replicas_path = ".spec.replicas",
                    status_replicas_path = ".status.replicas",
                    label_selector_path = ".status.labelSelector"
                ),
                printcolumn(
                    name = "DESIRED",
                    type_ = "integer",
                    json_path = ".spec.replicas",
                    description = "The desired number of pods."
                ),
                printcolumn(
                    name = "UPDATED",
                    type_ = "integer",
                    json_path = ".status.updatedReplicas",
                    description = "The number of pods updated."
                ),
                printcolumn(
                    name = "UPDATED_READY",
                    type_ = "integer",
                    json_path = ".status.updatedReadyReplicas",
                    description = "The number of pods updated and ready."
                ),
                printcolumn(
                    name = "UPDATED_AVAILABLE",
                    type_ = "integer",
                    json_path = ".status.updatedAvailableReplicas",
                    description = "The number of pods updated and available."
                ),
                printcolumn(
                    name = "READY",
                    type_ = "integer",
                    json_path = ".status.readyReplicas",
                    description = "The number of pods ready."
                ),
                printcolumn(
                    name = "TOTAL",
                    type_ = "integer",
                    json_path = ".status.replicas",
                    description = "The number of currently all pods."
                )
            )]
            age_column(
                long,
                pod_template_columns(
                    "The containers of currently cloneset.",
                    "The images of currently cloneset."
                ),
                printcolumn(
                    name = "SELECTOR",
                    type_ = "string",
                    priority = 1,
                    json_path = ".status.labelSelector",
                    description = "The selector of currently cloneset."
                )
            )
            #[serde(rename_all = "camelCase")]
            pub struct CloneSetSpec {
                /// Desired number of Pods (default 1).
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub replicas: Option<i32>,
                /// Selects the Pods counted as replicas; must match the template's labels.
                #[serde(skip_serializing_if = "Option::is_none")]
                #[schemars(required)]
                pub selector: Option<LabelSelector>,
                /// The Pods created.
                #[schemars(schema_with = "preserve_unknown_fields_untyped")]
                pub template: PodTemplateSpec,
                /// One PVC per template per Pod, named `<template>-<cloneset>-<instance id>`; deleted with its Pod.
                #[serde(default, skip_serializing_if = "Vec::is_empty")]
                #[schemars(schema_with = "preserve_unknown_fields_untyped")]
                pub volume_claim_templates: Vec<PersistentVolumeClaim>,
                /// How Pods are created and deleted.
                #[serde(default)]
                pub scale_strategy: CloneSetScaleStrategy,
                /// How Pods are updated when the template changes.
                #[serde(default)]
                pub update_strategy: CloneSetUpdateStrategy,
                /// Revisions kept in the history (default 10).
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub revision_history_limit: Option<i32>,
                /// Seconds a new Pod must be ready before it counts as available.
                #[serde(default, skip_serializing_if = "is_default")]
                pub min_ready_seconds: i32,
                /// Hooks before a Pod becomes Normal, before deletion and around an in-place update.
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub lifecycle: Option<Lifecycle>,
                /// Seconds to reach the available (or partition-available) state before the Progressing condition
                /// turns False with ProgressDeadlineExceeded; unset: no Progressing condition.
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub progress_deadline_seconds: Option<i32>,
            }
        }
    };
}

mod convert;
pub mod v1alpha1;
pub mod v1beta1;
mod validate;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::field::FieldError;
use crate::kinds::{Defaults, KindApi};
use crate::podtemplate;

/// Label on every Pod and PVC of a CloneSet: the instance id shared by a Pod and its PVCs.
pub const LABEL_INSTANCE_ID: &str = "apps.kruise.io/cloneset-instance-id";
/// Label (value `"true"`) by which a v1alpha1 CloneSet asks to leave PreparingDelete Pods out of the scale
/// arithmetic; v1beta1 says it with `scaleStrategy.excludePreparingDelete`.
pub const LABEL_SCALING_EXCLUDE_PREPARING_DELETE: &str =
    "apps.kruise.io/cloneset-scaling-exclude-preparing-delete";

/// The [`KindApi`] of CloneSet.
pub struct Api;

impl KindApi for Api {
    const KIND: &'static str = "CloneSet";
    const PLURAL: &'static str = "clonesets";
    const RAW_PATHS: &'static [&'static str] = &["/spec/template", "/spec/volumeClaimTemplates"];
    type V1alpha1 = v1alpha1::CloneSet;
    type V1beta1 = v1beta1::CloneSet;

    fn to_v1beta1(object: v1alpha1::CloneSet) -> v1beta1::CloneSet {
        convert::to_v1beta1(object)
    }

    fn to_v1alpha1(object: v1beta1::CloneSet) -> v1alpha1::CloneSet {
        convert::to_v1alpha1(object)
    }

    fn default_with(object: &mut v1beta1::CloneSet, defaults: &Defaults) {
        let spec = &mut object.spec;
        spec.replicas.get_or_insert(1);
        spec.revision_history_limit.get_or_insert(10);
        if defaults.pod_templates {
            if let Some(pod) = spec.template.spec.as_mut() {
                podtemplate::set_defaults_pod_template_spec(pod, defaults);
            }
            spec.volume_claim_templates
                .iter_mut()
                .for_each(set_defaults_pvc);
        }

        let strategy = &mut spec.update_strategy;
        if strategy.type_.is_empty() {
            strategy.type_ = v1beta1::UPDATE_ROLLING_UPDATE.into();
        }
        if strategy.type_ == v1beta1::UPDATE_ROLLING_UPDATE {
            let rolling = strategy.rolling_update.get_or_insert_with(Default::default);
            if rolling.pod_update_policy.is_empty() {
                rolling.pod_update_policy = v1beta1::POD_UPDATE_RECREATE.into();
            }
            if matches!(
                rolling.pod_update_policy.as_str(),
                v1beta1::POD_UPDATE_IN_PLACE_IF_POSSIBLE | v1beta1::POD_UPDATE_IN_PLACE_ONLY
            ) {
                rolling
                    .in_place_update_strategy
                    .get_or_insert_with(Default::default);
            }
            rolling.partition.get_or_insert(IntOrString::Int(0));
            rolling.max_unavailable.get_or_insert_with(|| {
                IntOrString::String(v1beta1::DEFAULT_MAX_UNAVAILABLE.into())
            });
            rolling.max_surge.get_or_insert(IntOrString::Int(0));
        }
    }

    fn validate(object: &v1beta1::CloneSet, old: Option<&v1beta1::CloneSet>) -> Vec<FieldError> {
        validate::validate(object, old)
    }
}

/// The core PVC default OpenKruise applies to PVC templates: a claim's phase starts as Pending.
pub(crate) fn set_defaults_pvc(pvc: &mut PersistentVolumeClaim) {
    let status = pvc.status.get_or_insert_with(Default::default);
    if status.phase.as_deref().is_none_or(str::is_empty) {
        status.phase = Some("Pending".into());
    }
}

#[cfg(test)]
pub(crate) mod tests;
