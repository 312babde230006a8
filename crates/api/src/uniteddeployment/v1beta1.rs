//! UnitedDeployment, apps.kruise.io/v1beta1 (storage version): one workload template (StatefulSet, Advanced
//! StatefulSet, CloneSet or Deployment) provisioned as one workload per topology subset, with the replicas
//! split between the subsets.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DeploymentSpec, StatefulSetSpec as NativeStatefulSetSpec};
use k8s_openapi::api::core::v1::{NodeSelectorTerm, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::cloneset::v1beta1::CloneSetSpec;
use crate::schema::{is_default, preserve_unknown_fields_untyped};
use crate::statefulset::v1beta1::StatefulSetSpec as AdvancedStatefulSetSpec;

/// `updateStrategy.type`: the only one, and the default.
pub const UPDATE_MANUAL: &str = "Manual";
/// `topology.scheduleStrategy.type`: Pods stay in their subset even when they cannot be scheduled (default).
pub const SCHEDULE_FIXED: &str = "Fixed";
/// `topology.scheduleStrategy.type`: Pods pending too long are moved to other subsets.
pub const SCHEDULE_ADAPTIVE: &str = "Adaptive";
/// Default of `adaptive.rescheduleCriticalSeconds`.
pub const DEFAULT_RESCHEDULE_CRITICAL_SECONDS: i32 = 30;
/// Default of `adaptive.unschedulableDuration`.
pub const DEFAULT_UNSCHEDULABLE_DURATION_SECONDS: i32 = 300;

/// Condition types.
pub const CONDITION_SUBSET_PROVISIONED: &str = "SubsetProvisioned";
pub const CONDITION_SUBSET_UPDATED: &str = "SubsetUpdated";
pub const CONDITION_SUBSET_FAILURE: &str = "SubsetFailure";
pub const CONDITION_UNITED_DEPLOYMENT_UPDATED: &str = "UnitedDeploymentUpdated";
/// Subset condition type: False while new Pods of the subset would stay pending.
pub const SUBSET_CONDITION_SCHEDULABLE: &str = "Schedulable";

united_deployment_resource!("v1beta1");

/// The workload template of the subsets; exactly one is set. `C` is the CloneSet spec a CloneSet template
/// holds: the v1beta1 one here, the v1alpha1 one in v1alpha1 ([`super::v1alpha1::SubsetTemplate`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubsetTemplate<C = CloneSetSpec> {
    /// Subsets are native apps/v1 StatefulSets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stateful_set_template: Option<StatefulSetTemplateSpec>,
    /// Subsets are Advanced StatefulSets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advanced_stateful_set_template: Option<AdvancedStatefulSetTemplateSpec>,
    /// Subsets are CloneSets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clone_set_template: Option<CloneSetTemplateSpec<C>>,
    /// Subsets are apps/v1 Deployments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment_template: Option<DeploymentTemplateSpec>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StatefulSetTemplateSpec {
    /// Labels and annotations of the subset workloads.
    #[serde(default)]
    #[schemars(schema_with = "preserve_unknown_fields_untyped")]
    pub metadata: ObjectMeta,
    #[schemars(schema_with = "preserve_unknown_fields_untyped")]
    pub spec: NativeStatefulSetSpec,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AdvancedStatefulSetTemplateSpec {
    /// Labels and annotations of the subset workloads.
    #[serde(default)]
    #[schemars(schema_with = "preserve_unknown_fields_untyped")]
    pub metadata: ObjectMeta,
    pub spec: AdvancedStatefulSetSpec,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CloneSetTemplateSpec<C = CloneSetSpec> {
    /// Labels and annotations of the subset workloads.
    #[serde(default)]
    #[schemars(schema_with = "preserve_unknown_fields_untyped")]
    pub metadata: ObjectMeta,
    pub spec: C,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeploymentTemplateSpec {
    /// Labels and annotations of the subset workloads.
    #[serde(default)]
    #[schemars(schema_with = "preserve_unknown_fields_untyped")]
    pub metadata: ObjectMeta,
    #[schemars(schema_with = "preserve_unknown_fields_untyped")]
    pub spec: DeploymentSpec,
}

impl<C> SubsetTemplate<C> {
    /// The same template with the CloneSet template (if any) mapped by `convert`.
    pub fn map_clone_set_template<D>(
        self,
        convert: impl FnOnce(CloneSetTemplateSpec<C>) -> CloneSetTemplateSpec<D>,
    ) -> SubsetTemplate<D> {
        SubsetTemplate {
            stateful_set_template: self.stateful_set_template,
            advanced_stateful_set_template: self.advanced_stateful_set_template,
            clone_set_template: self.clone_set_template.map(convert),
            deployment_template: self.deployment_template,
        }
    }

    /// The metadata of whichever template is set (the first, if several are).
    pub fn metadata(&self) -> Option<&ObjectMeta> {
        if let Some(t) = &self.stateful_set_template {
            Some(&t.metadata)
        } else if let Some(t) = &self.advanced_stateful_set_template {
            Some(&t.metadata)
        } else if let Some(t) = &self.clone_set_template {
            Some(&t.metadata)
        } else {
            self.deployment_template.as_ref().map(|t| &t.metadata)
        }
    }

    /// How many of the four templates are set (valid: exactly one).
    pub fn count(&self) -> usize {
        [
            self.stateful_set_template.is_some(),
            self.advanced_stateful_set_template.is_some(),
            self.clone_set_template.is_some(),
            self.deployment_template.is_some(),
        ]
        .into_iter()
        .filter(|set| *set)
        .count()
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnitedDeploymentUpdateStrategy {
    /// `Manual` (default, and the only type).
    #[serde(default, rename = "type", skip_serializing_if = "String::is_empty")]
    #[schemars(extend("enum" = ["Manual", ""]))]
    pub type_: String,
    /// Parameters of the Manual type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manual_update: Option<ManualUpdate>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManualUpdate {
    /// Per subset name: the number of its Pods kept at the old revision.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub partitions: BTreeMap<String, i32>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Topology {
    /// One workload is provisioned per subset.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subsets: Vec<Subset>,
    /// What happens to Pods that cannot be scheduled in their subset.
    #[serde(default)]
    pub schedule_strategy: UnitedDeploymentScheduleStrategy,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Subset {
    /// A DNS label, unique among the subsets; the workload is named `<ud>-<subset>-<random>`.
    pub name: String,
    /// Appended to the required node affinity of the Pods; immutable.
    #[serde(default)]
    pub node_selector_term: NodeSelectorTerm,
    /// Appended to the tolerations of the Pods; immutable.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Replicas of this subset: an integer, or a percentage of spec.replicas (rounded half up). Unset:
    /// shared evenly with the other unset subsets. Excludes minReplicas/maxReplicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<IntOrString>,
    /// Lower bound, filled first in subset order (default 0 when only bounds are used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_replicas: Option<IntOrString>,
    /// Upper bound; unset: no limit. At least one subset must leave it unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replicas: Option<IntOrString>,
    /// Strategic-merge patch applied to the workload template of this subset, last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserve_unknown_fields_untyped")]
    pub patch: Option<serde_json::Value>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnitedDeploymentScheduleStrategy {
    /// `Fixed` (default) or `Adaptive`.
    #[serde(default, rename = "type", skip_serializing_if = "String::is_empty")]
    #[schemars(extend("enum" = ["Adaptive", "Fixed", ""]))]
    pub type_: String,
    /// Parameters of the Adaptive type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<AdaptiveUnitedDeploymentStrategy>,
}

impl UnitedDeploymentScheduleStrategy {
    pub fn is_adaptive(&self) -> bool {
        self.type_ == SCHEDULE_ADAPTIVE
    }

    /// Adaptive with `reserveUnschedulablePods`.
    pub fn should_reserve_unschedulable_pods(&self) -> bool {
        self.is_adaptive()
            && self
                .adaptive
                .as_ref()
                .is_some_and(|a| a.reserve_unschedulable_pods)
    }

    /// Seconds a Pod may stay unschedulable before it is rescheduled (30 when unset).
    pub fn reschedule_critical_seconds(&self) -> i32 {
        self.adaptive
            .as_ref()
            .and_then(|a| a.reschedule_critical_seconds)
            .unwrap_or(DEFAULT_RESCHEDULE_CRITICAL_SECONDS)
    }

    /// Seconds a subset stays unschedulable (300 when unset).
    pub fn unschedulable_duration_seconds(&self) -> i32 {
        self.adaptive
            .as_ref()
            .and_then(|a| a.unschedulable_duration)
            .unwrap_or(DEFAULT_UNSCHEDULABLE_DURATION_SECONDS)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdaptiveUnitedDeploymentStrategy {
    /// Seconds a Pod may stay unschedulable before it is moved to another subset (default 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reschedule_critical_seconds: Option<i32>,
    /// Seconds a subset counts as unschedulable after a reschedule (default 300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unschedulable_duration: Option<i32>,
    /// Keep unschedulable Pods and run temporary substitutes elsewhere until they are ready
    /// (Deployment and CloneSet templates only).
    #[serde(default, skip_serializing_if = "is_default")]
    pub reserve_unschedulable_pods: bool,
}

united_deployment_status!(
    {
        /// The newest revision of the template.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        pub updated_revision: String,
    },
    {}
);

impl UnitedDeploymentStatus {
    /// The status of subset `name`, if recorded.
    pub fn subset_status(&self, name: &str) -> Option<&UnitedDeploymentSubsetStatus> {
        self.subset_statuses.iter().find(|s| s.name == name)
    }
}

crate::pub_types::condition! {
    pub struct UnitedDeploymentCondition {
        /// `SubsetProvisioned`, `SubsetUpdated`, `SubsetFailure` or `UnitedDeploymentUpdated`.
        #[serde(default, rename = "type", skip_serializing_if = "String::is_empty")]
        pub type_: String,
        /// `True`, `False` or `Unknown`.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        pub status: String,
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnitedDeploymentSubsetStatus {
    /// The subset name of spec.topology.subsets.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The current target replicas of the subset.
    #[serde(default, skip_serializing_if = "is_default")]
    pub replicas: i32,
    #[serde(default, skip_serializing_if = "is_default")]
    pub ready_replicas: i32,
    /// The current partition of the subset.
    #[serde(default, skip_serializing_if = "is_default")]
    pub partition: i32,
    #[serde(default, skip_serializing_if = "is_default")]
    pub reserved_pods: i32,
    /// `Schedulable`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<UnitedDeploymentSubsetCondition>,
}

/// Upstream's `UnitedDeploymentSubsetCondition`: the same fields as [`crate::pub_types::SubsetCondition`].
pub type UnitedDeploymentSubsetCondition = crate::pub_types::SubsetCondition;
