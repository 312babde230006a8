//! Types shared by several workloads (OpenKruise's `apps/pub`): lifecycle hooks, update priority and
//! update scatter, with their validation.

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::field::{FieldError, Path};
use crate::schema::is_default;
use crate::validation::validate_label_selector;

/// Hooks around a Pod's lifecycle states.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Lifecycle {
    /// The hook before a Pod is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_delete: Option<LifecycleHook>,
    /// The hook before a Pod is updated in place and after it has been.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_place_update: Option<LifecycleHook>,
    /// The hook after a Pod is created, before it becomes Normal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_normal: Option<LifecycleHook>,
}

/// A hook is "hooked" while any of its labels or finalizers is on the Pod.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LifecycleHook {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels_handler: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub finalizers_handler: Vec<String>,
    /// Mark the Pod not ready (through the `KruisePodReady` condition) in PreparingDelete and
    /// PreparingUpdate.
    #[serde(default, skip_serializing_if = "is_default")]
    pub mark_pod_not_ready: bool,
}

/// Which Pods update first. Only one of the two forms may be set.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdatePriorityStrategy {
    /// Pods are ordered by the value of the first key they carry, keys in this order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub order_priority: Vec<UpdatePriorityOrderTerm>,
    /// Pods are ordered by the sum of the weights of the terms they match, highest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub weight_priority: Vec<UpdatePriorityWeightTerm>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdatePriorityOrderTerm {
    pub ordered_key: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdatePriorityWeightTerm {
    /// 0 to 100.
    pub weight: i32,
    pub match_selector: LabelSelector,
}

/// Terms whose matching Pods are spread out over the update order.
pub type UpdateScatterStrategy = Vec<UpdateScatterTerm>;

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct UpdateScatterTerm {
    pub key: String,
    pub value: String,
}

/// How an in-place update proceeds (`apps/pub` InPlaceUpdateStrategy), shared by CloneSet and Advanced
/// StatefulSet.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InPlaceUpdateStrategy {
    /// Seconds between marking the Pod not ready and updating its containers in place.
    #[serde(default, skip_serializing_if = "is_default")]
    pub grace_period_seconds: i32,
    /// Parallelism of image pre-download (any non-negative value; 1 when unset, 0 pauses it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pre_download_parallelism:
        Option<k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>,
    /// Timeout of an image pull task (600 when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pre_download_timeout_seconds: Option<i32>,
    /// Updated ready Pods required before pre-downloading images for the next batch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pre_download_min_updated_ready_pods: Option<i32>,
}

impl Lifecycle {
    /// Validates the hooks (label keys and values, finalizer names).
    pub fn validate(&self, path: &Path, errors: &mut Vec<FieldError>) {
        for (name, hook) in [
            ("preDelete", &self.pre_delete),
            ("inPlaceUpdate", &self.in_place_update),
            ("preNormal", &self.pre_normal),
        ] {
            let Some(hook) = hook else { continue };
            let hook_path = path.child(name);
            for (key, value) in &hook.labels_handler {
                let label_path = hook_path.child("labelsHandler").key(key);
                if let Err(message) = crate::validation::check_qualified_name(key) {
                    errors.push(FieldError::invalid(&label_path, key, message));
                }
                if let Err(message) = crate::validation::check_label_value(value) {
                    errors.push(FieldError::invalid(&label_path, value, message));
                }
            }
            for (i, finalizer) in hook.finalizers_handler.iter().enumerate() {
                if let Err(message) = crate::validation::check_qualified_name(finalizer) {
                    errors.push(FieldError::invalid(
                        &hook_path.child("finalizersHandler").index(i),
                        finalizer,
                        message,
                    ));
                }
            }
        }
    }
}

impl UpdatePriorityStrategy {
    /// One form only; weights in 0..=100 with a non-empty, valid selector; non-empty order keys.
    pub fn validate(&self, path: &Path, errors: &mut Vec<FieldError>) {
        if !self.weight_priority.is_empty() && !self.order_priority.is_empty() {
            errors.push(FieldError::invalid(
                path,
                "weightPriority and orderPriority",
                "only one of weightPriority and orderPriority can be used",
            ));
        }
        for (i, term) in self.weight_priority.iter().enumerate() {
            let term_path = path.child("weightPriority").index(i);
            if !(0..=100).contains(&term.weight) {
                errors.push(FieldError::invalid(
                    &term_path.child("weight"),
                    term.weight,
                    "weight must be valid number in the range 1-100",
                ));
            }
            let selector_path = term_path.child("matchSelector");
            if term
                .match_selector
                .match_labels
                .as_ref()
                .is_none_or(BTreeMap::is_empty)
                && term
                    .match_selector
                    .match_expressions
                    .as_ref()
                    .is_none_or(Vec::is_empty)
            {
                errors.push(FieldError::required(
                    &selector_path,
                    "selector can not be empty",
                ));
            }
            validate_label_selector(&term.match_selector, &selector_path, errors);
        }
        for (i, term) in self.order_priority.iter().enumerate() {
            if term.ordered_key.is_empty() {
                errors.push(FieldError::required(
                    &path.child("orderPriority").index(i).child("orderedKey"),
                    "order key can not be empty",
                ));
            }
        }
    }
}

/// No empty key or value, no repeated key:value pair.
pub fn validate_scatter(terms: &[UpdateScatterTerm], path: &Path, errors: &mut Vec<FieldError>) {
    let mut seen = HashSet::new();
    for (i, term) in terms.iter().enumerate() {
        let term_path = path.index(i);
        if term.key.is_empty() {
            errors.push(FieldError::required(
                &term_path.child("key"),
                "key can not be empty",
            ));
        }
        if term.value.is_empty() {
            errors.push(FieldError::required(
                &term_path.child("value"),
                "value can not be empty",
            ));
        }
        if !seen.insert((term.key.as_str(), term.value.as_str())) {
            errors.push(FieldError::duplicate(
                &term_path,
                format!("{}:{}", term.key, term.value),
            ));
        }
    }
}

/// Declares the condition type of a kind's status: its leading fields as given (`type` and `status`,
/// which the kinds declare with different docs and defaults, and a probe or update time where the kind
/// has one), then lastTransitionTime, reason and message, which every condition declared with it has
/// alike (as upstream's condition types spell them). The derives and `Time` resolve where it is called.
macro_rules! condition {
    ($(#[$attr:meta])* pub struct $name:ident { $($head:tt)* }) => {
        $(#[$attr])*
        #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
        #[serde(rename_all = "camelCase")]
        pub struct $name {
            $($head)*
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub last_transition_time: Option<Time>,
            #[serde(default, skip_serializing_if = "String::is_empty")]
            pub reason: String,
            #[serde(default, skip_serializing_if = "String::is_empty")]
            pub message: String,
        }
    };
}
pub(crate) use condition;

// A condition of one subset, as UnitedDeployment and WorkloadSpread report it: upstream declares the
// same five fields (and the same JSON) for both, so the type is written once here and each kind names
// it with an alias. (A plain comment: a doc comment would become a description in both CRDs.)
condition! {
    pub struct SubsetCondition {
        #[serde(rename = "type")]
        pub type_: String,
        pub status: String,
    }
}

// A condition of a job, as BroadcastJob and EphemeralJob report it: upstream declares the same six
// fields (and the same JSON) for both (BroadcastJob's `JobCondition`, `EphemeralJobCondition`), so the
// type is written once here and each kind names it. (A plain comment: a doc comment would become a
// description in both CRDs.)
condition! {
    pub struct JobCondition {
        #[serde(rename = "type")]
        pub type_: String,
        pub status: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub last_probe_time: Option<Time>,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priority_rules() {
        let path = Path::new("spec").child("priorityStrategy");
        let selector = LabelSelector {
            match_labels: Some([("a".to_string(), "b".to_string())].into()),
            ..Default::default()
        };
        let both = UpdatePriorityStrategy {
            order_priority: vec![UpdatePriorityOrderTerm {
                ordered_key: "k".into(),
            }],
            weight_priority: vec![UpdatePriorityWeightTerm {
                weight: 50,
                match_selector: selector.clone(),
            }],
        };
        let mut errors = Vec::new();
        both.validate(&path, &mut errors);
        assert_eq!(errors.len(), 1, "{errors:?}");

        let bad = UpdatePriorityStrategy {
            weight_priority: vec![UpdatePriorityWeightTerm {
                weight: 101,
                match_selector: LabelSelector::default(),
            }],
            ..Default::default()
        };
        let mut errors = Vec::new();
        bad.validate(&path, &mut errors);
        let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert!(
            text.iter()
                .any(|e| e.starts_with("spec.priorityStrategy.weightPriority[0].weight")),
            "{text:?}"
        );
        assert!(
            text.iter()
                .any(|e| e.starts_with("spec.priorityStrategy.weightPriority[0].matchSelector"))
        );
    }

    #[test]
    fn scatter_rules() {
        let path = Path::new("spec").child("scatterStrategy");
        let term = |k: &str, v: &str| UpdateScatterTerm {
            key: k.into(),
            value: v.into(),
        };
        let mut errors = Vec::new();
        validate_scatter(
            &[term("a", "1"), term("a", "1"), term("", "x")],
            &path,
            &mut errors,
        );
        let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                r#"spec.scatterStrategy[1]: Duplicate value: "a:1""#,
                "spec.scatterStrategy[2].key: Required value: key can not be empty",
            ]
        );
    }
}
