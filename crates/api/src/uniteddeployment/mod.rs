//! UnitedDeployment: types of both versions, conversion, defaults, validation and CRD.

/// The UnitedDeployment resource of one version (`"v1alpha1"` or `"v1beta1"`). Its kube attribute
/// (names, scale subresource, printer columns) and its spec fields are the same in both versions,
/// so they are written once here; the types the spec names resolve where the macro is called, so
/// each version's `UnitedDeploymentSpec` holds that version's `SubsetTemplate` (v1alpha1's embeds
/// the v1alpha1 CloneSet spec).
macro_rules! united_deployment_resource {
    ($version:tt) => {
        crate::crd::resource! {
            #[kube(
                version = $version,
                kind = "UnitedDeployment",
                namespaced,
                status = "UnitedDeploymentStatus",
                scale(
                    spec_replicas_path = ".spec.replicas",
                    status_replicas_path = ".status.replicas",
                    label_selector_path = ".status.labelSelector"
                ),
                shortname = "ud",
                doc = "UnitedDeployment is the Schema for the uniteddeployments API"
            )]
            replica_columns
            age_column(long)
            #[serde(rename_all = "camelCase")]
            pub struct UnitedDeploymentSpec {
                /// Total desired replicas over all subsets (default 1).
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub replicas: Option<i32>,
                /// Label query over the Pods; must match the template's labels.
                #[schemars(required)]
                #[serde(skip_serializing_if = "Option::is_none")]
                pub selector: Option<LabelSelector>,
                /// The workload every subset runs: exactly one of the four templates.
                #[serde(default)]
                pub template: SubsetTemplate,
                /// The subsets and how Pods are spread over them.
                #[serde(default)]
                pub topology: Topology,
                /// How subsets move to a new template revision.
                #[serde(default)]
                pub update_strategy: UnitedDeploymentUpdateStrategy,
                /// Revisions kept in the history (default 10).
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub revision_history_limit: Option<i32>,
            }
        }
    };
}

/// The UnitedDeployment status of one version: the replica counts, revisions, subset statuses,
/// conditions and selector are the same in both versions, so they are written once here. The
/// versions say the updated revision and the subsets' replicas and partitions differently: v1beta1's
/// `updatedRevision` (first braces, after currentRevision), v1alpha1's `subsetReplicas` (first braces)
/// and `updateStatus` (second braces, after conditions).
macro_rules! united_deployment_status {
    ({ $($after_current_revision:tt)* }, { $($after_conditions:tt)* }) => {
        #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
        #[serde(rename_all = "camelCase")]
        pub struct UnitedDeploymentStatus {
            #[serde(default, skip_serializing_if = "is_default")]
            pub observed_generation: i64,
            /// Ready Pods over all subsets.
            #[serde(default, skip_serializing_if = "is_default")]
            pub ready_replicas: i32,
            /// Pods over all subsets, reserved Pods not counted.
            pub replicas: i32,
            /// Pods at the updated revision.
            pub updated_replicas: i32,
            /// Pods reserved by the Adaptive strategy.
            #[serde(default, skip_serializing_if = "is_default")]
            pub reserved_pods: i32,
            /// Ready Pods at the updated revision.
            #[serde(default, skip_serializing_if = "is_default")]
            pub updated_ready_replicas: i32,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub collision_count: Option<i32>,
            /// The revision of the template all Pods ran when they last converged.
            pub current_revision: String,
            $($after_current_revision)*
            #[serde(default, skip_serializing_if = "Vec::is_empty")]
            pub subset_statuses: Vec<UnitedDeploymentSubsetStatus>,
            #[serde(default, skip_serializing_if = "Vec::is_empty")]
            pub conditions: Vec<UnitedDeploymentCondition>,
            $($after_conditions)*
            /// The selector as a string, for the scale subresource.
            #[serde(default, skip_serializing_if = "String::is_empty")]
            pub label_selector: String,
        }
    };
}

mod convert;
pub mod v1alpha1;
pub mod v1beta1;
mod validate;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::field::FieldError;
use crate::kinds::{Defaults, KindApi};
use crate::podtemplate;

pub use convert::template_as_v1alpha1;

/// The [`KindApi`] of UnitedDeployment.
pub struct Api;

impl KindApi for Api {
    const KIND: &'static str = "UnitedDeployment";
    const PLURAL: &'static str = "uniteddeployments";
    /// Everything of the spec that has the same schema in both versions is carried verbatim: all of it but
    /// the CloneSet template's metadata and spec, whose Pod and PVC templates are carried verbatim
    /// instead (the rest of that spec is the v1alpha1 CloneSet spec in v1alpha1, the v1beta1 one in
    /// v1beta1).
    const RAW_PATHS: &'static [&'static str] = &[
        "/spec/selector",
        "/spec/topology",
        "/spec/updateStrategy",
        "/spec/template/statefulSetTemplate",
        "/spec/template/advancedStatefulSetTemplate",
        "/spec/template/deploymentTemplate",
        "/spec/template/cloneSetTemplate/spec/template",
        "/spec/template/cloneSetTemplate/spec/volumeClaimTemplates",
    ];
    const RAW_METADATA_PATHS: &'static [&'static str] =
        &["/spec/template/cloneSetTemplate/metadata"];
    type V1alpha1 = v1alpha1::UnitedDeployment;
    type V1beta1 = v1beta1::UnitedDeployment;

    fn to_v1beta1(object: v1alpha1::UnitedDeployment) -> v1beta1::UnitedDeployment {
        convert::to_v1beta1(object)
    }

    fn to_v1alpha1(object: v1beta1::UnitedDeployment) -> v1alpha1::UnitedDeployment {
        convert::to_v1alpha1(object)
    }

    /// `SetDefaultsUnitedDeploymentV1beta1`: replicas, revision history, the Manual update strategy, the
    /// Pod and PVC template defaults of a native StatefulSet template (OpenKruise leaves the other three
    /// templates to the webhooks of the subset workloads), and minReplicas 0 when the subsets use only
    /// capacities. The Adaptive timings are read with their defaults
    /// ([`v1beta1::UnitedDeploymentScheduleStrategy::reschedule_critical_seconds`]) and never written.
    fn default_with(object: &mut v1beta1::UnitedDeployment, defaults: &Defaults) {
        let spec = &mut object.spec;
        spec.replicas.get_or_insert(1);
        spec.revision_history_limit.get_or_insert(10);
        let strategy = &mut spec.update_strategy;
        if strategy.type_.is_empty() {
            strategy.type_ = v1beta1::UPDATE_MANUAL.into();
        }
        if strategy.type_ == v1beta1::UPDATE_MANUAL {
            strategy.manual_update.get_or_insert_with(Default::default);
        }
        if let Some(template) = spec.template.stateful_set_template.as_mut()
            && defaults.pod_templates
        {
            if let Some(pod) = template.spec.template.spec.as_mut() {
                podtemplate::set_defaults_pod_template_spec(pod, defaults);
            }
            template
                .spec
                .volume_claim_templates
                .iter_mut()
                .flatten()
                .for_each(crate::cloneset::set_defaults_pvc);
        }
        let subsets = &mut spec.topology.subsets;
        let has_replicas = subsets.iter().any(|s| s.replicas.is_some());
        let has_capacity = subsets
            .iter()
            .any(|s| s.min_replicas.is_some() || s.max_replicas.is_some());
        if has_capacity && !has_replicas {
            for subset in subsets.iter_mut() {
                subset.min_replicas.get_or_insert(IntOrString::Int(0));
            }
        }
    }

    fn validate(
        object: &v1beta1::UnitedDeployment,
        old: Option<&v1beta1::UnitedDeployment>,
    ) -> Vec<FieldError> {
        validate::validate(object, old)
    }
}

/// The replicas a subset value stands for out of the UnitedDeployment's `replicas`: an integer ≥ 0, or a
/// percentage `"N%"` with N in 0..=100, rounded half up (a percentage needs `replicas`). The error is
/// OpenKruise's message (`ParseSubsetReplicas`).
pub fn parse_subset_replicas(ud_replicas: Option<i32>, value: &IntOrString) -> Result<i32, String> {
    let text = match value {
        IntOrString::Int(n) if *n < 0 => {
            return Err(format!("subset replicas ({n}) should not be less than 0"));
        }
        IntOrString::Int(n) => return Ok(*n),
        IntOrString::String(text) => text,
    };
    let total = match ud_replicas {
        Some(total) if total >= 0 => total,
        _ => {
            return Err(format!(
                "subsetReplicas ({text}) should not be string when unitedDeployment replicas is empty"
            ));
        }
    };
    let Some(number) = text.strip_suffix('%') else {
        return Err(format!(
            "subset replicas ({text}) only support integer value or percentage value with a suffix '%'"
        ));
    };
    let percent: i32 = number.parse().map_err(|error| {
        format!("subset replicas ({text}) should be correct percentage integer: {error}")
    })?;
    if !(0..=100).contains(&percent) {
        return Err(format!(
            "subset replicas ({text}) should be in range [0, 100]"
        ));
    }
    // floor(total * percent / 100 + 0.5), exactly.
    let scaled = (2 * i64::from(total) * i64::from(percent) + 100) / 200;
    Ok(i32::try_from(scaled).unwrap_or(i32::MAX))
}

#[cfg(test)]
mod tests;
