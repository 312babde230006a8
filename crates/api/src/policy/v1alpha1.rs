//! PodUnavailableBudget, policy.kruise.io/v1alpha1: how many of a set of Pods may be unavailable at
//! once through voluntary disruption (deletion, eviction, in-place update).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The operations a budget can guard (`kruise.io/pub-protect-operations`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PubOperation {
    Update,
    Delete,
    Evict,
    Resize,
}

impl PubOperation {
    pub fn as_str(self) -> &'static str {
        match self {
            PubOperation::Update => "UPDATE",
            PubOperation::Delete => "DELETE",
            PubOperation::Evict => "EVICT",
            PubOperation::Resize => "RESIZE",
        }
    }

    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "UPDATE" => Some(PubOperation::Update),
            "DELETE" => Some(PubOperation::Delete),
            "EVICT" => Some(PubOperation::Evict),
            "RESIZE" => Some(PubOperation::Resize),
            _ => None,
        }
    }
}

crate::crd::resource! {
    #[kube(
        group = "policy.kruise.io",
        version = "v1alpha1",
        kind = "PodUnavailableBudget",
        namespaced,
        status = "PodUnavailableBudgetStatus",
        shortname = "pub",
        doc = "PodUnavailableBudget is the Schema for the podunavailablebudgets API",
        printcolumn(
            name = "Allowed",
            type_ = "integer",
            json_path = ".status.unavailableAllowed",
            description = "UnavailableAllowed number of pod unavailable that are currently allowed"
        ),
        printcolumn(
            name = "Current",
            type_ = "integer",
            json_path = ".status.currentAvailable",
            description = "CurrentAvailable current number of available pods"
        ),
        printcolumn(
            name = "Desired",
            type_ = "integer",
            json_path = ".status.desiredAvailable",
            description = "DesiredAvailable minimum desired number of available pods"
        ),
        printcolumn(
            name = "Total",
            type_ = "integer",
            json_path = ".status.totalReplicas",
            description = "TotalReplicas total number of pods counted by this budget"
        )
    )]
    #[serde(rename_all = "camelCase")]
    pub struct PodUnavailableBudgetSpec {
        /// Selects the Pods the budget counts (used when targetRef is not set).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub selector: Option<LabelSelector>,
        /// The workload whose Pods the budget counts (takes precedence over selector).
        #[serde(default, rename = "targetRef", skip_serializing_if = "Option::is_none")]
        pub target_reference: Option<TargetReference>,
        /// At most this many (or this percentage of the total, rounded up) Pods unavailable.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub max_unavailable: Option<IntOrString>,
        /// At least this many (or this percentage of the total, rounded up) Pods available.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub min_available: Option<IntOrString>,
    }
}

/// A workload in the budget's namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetReference {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}

/// What the budget observed and allows.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodUnavailableBudgetStatus {
    /// The generation the status was computed for.
    #[serde(default)]
    pub observed_generation: i64,
    /// Pods whose deletion or eviction was admitted, with the time: not counted as available until
    /// the controller sees them go (or the record expires).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disrupted_pods: Option<BTreeMap<String, Time>>,
    /// Pods whose update was admitted, with the time: not counted as available until the record
    /// expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable_pods: Option<BTreeMap<String, Time>>,
    /// How many more Pods may become unavailable.
    #[serde(default)]
    pub unavailable_allowed: i32,
    /// Available Pods now.
    #[serde(default)]
    pub current_available: i32,
    /// Pods that must stay available.
    #[serde(default)]
    pub desired_available: i32,
    /// Pods the budget counts.
    #[serde(default)]
    pub total_replicas: i32,
}
