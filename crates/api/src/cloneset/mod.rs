//! CloneSet: types of both versions, conversion, defaults, validation and CRD.

mod convert;
pub mod v1alpha1;
pub mod v1beta1;
mod validate;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResourceExt;

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

    fn crd() -> CustomResourceDefinition {
        crate::crd::assemble(v1alpha1::CloneSet::crd(), v1beta1::CloneSet::crd())
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
