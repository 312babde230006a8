//! Which PodUnavailableBudget guards a Pod (upstream's `GetPubForPod`), for the Pod webhook to
//! record `kruise.io/related-pub` when the Pod is created, before the controller has seen it.
//!
//! A budget with a targetRef guards the Pods of that workload only (the Pod's controlling workload
//! is resolved by the caller: a ReplicaSet's Deployment, else the owner itself); any other budget
//! guards the Pods its selector matches, and a budget whose selector is empty guards nothing.

use std::collections::BTreeMap;

use kruise_api::policy::v1alpha1::{PodUnavailableBudget, TargetReference};
use kruise_api::validation::{selector_is_empty, selector_matches};

/// A workload a Pod belongs to, as `apiVersion`, kind and name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadRef {
    pub api_version: String,
    pub kind: String,
    pub name: String,
}

/// The API group of an `apiVersion` (`apps/v1` → `apps`, `v1` → the core group, empty).
fn group(api_version: &str) -> &str {
    api_version
        .rsplit_once('/')
        .map_or("", |(group, _version)| group)
}

/// Whether a targetRef names `workload`: same group (any version), kind and name.
pub fn names_workload(target: &TargetReference, workload: &WorkloadRef) -> bool {
    group(&target.api_version) == group(&workload.api_version)
        && target.kind == workload.kind
        && target.name == workload.name
}

/// The budget that guards a Pod with `labels` belonging to `workload`: one whose targetRef names the
/// workload, else the first (in the order given) whose selector matches. A budget with a targetRef
/// is judged by its selector when the workload is not known, as upstream does.
pub fn budget_for_pod<'a>(
    budgets: impl IntoIterator<Item = &'a PodUnavailableBudget>,
    labels: &BTreeMap<String, String>,
    workload: Option<&WorkloadRef>,
) -> Option<&'a PodUnavailableBudget> {
    let budgets: Vec<&PodUnavailableBudget> = budgets.into_iter().collect();
    let by_target = budgets.iter().find(|budget| {
        matches!((&budget.spec.target_reference, workload),
            (Some(target), Some(workload)) if names_workload(target, workload))
    });
    by_target
        .or_else(|| {
            budgets.iter().find(|budget| {
                (budget.spec.target_reference.is_none() || workload.is_none())
                    && budget
                        .spec
                        .selector
                        .as_ref()
                        .is_some_and(|s| !selector_is_empty(s) && selector_matches(s, labels))
            })
        })
        .copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn budget(name: &str, spec: serde_json::Value) -> PodUnavailableBudget {
        serde_json::from_value(json!({
            "apiVersion": "policy.kruise.io/v1alpha1", "kind": "PodUnavailableBudget",
            "metadata": {"name": name, "namespace": "ns"}, "spec": spec,
        }))
        .expect("budget")
    }

    fn workload(api_version: &str, kind: &str, name: &str) -> WorkloadRef {
        WorkloadRef {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
        }
    }

    /// (budgets, Pod labels, the Pod's workload, the budget that guards the Pod)
    type Case<'a> = (
        Vec<&'a PodUnavailableBudget>,
        &'a BTreeMap<String, String>,
        Option<&'a WorkloadRef>,
        Option<&'static str>,
    );

    #[test]
    fn which_budget_guards_a_pod() {
        let by_target = budget(
            "by-target",
            json!({"targetRef": {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": "web"},
                   "maxUnavailable": 1}),
        );
        let by_selector = budget(
            "by-selector",
            json!({"selector": {"matchLabels": {"app": "web"}}, "maxUnavailable": 1}),
        );
        let empty_selector = budget("empty", json!({"selector": {}, "maxUnavailable": 1}));
        let labels: BTreeMap<String, String> = [("app".to_string(), "web".to_string())].into();
        let other: BTreeMap<String, String> = [("app".to_string(), "db".to_string())].into();
        let cloneset = workload("apps.kruise.io/v1beta1", "CloneSet", "web");
        let deployment = workload("apps/v1", "Deployment", "web");
        let cases: Vec<Case<'_>> = vec![
            // The targetRef names the workload in another version of its group.
            (vec![&by_target], &other, Some(&cloneset), Some("by-target")),
            // Same name, another kind.
            (vec![&by_target], &labels, Some(&deployment), None),
            // The selector matches whatever owns the Pod.
            (
                vec![&by_target, &by_selector],
                &labels,
                Some(&deployment),
                Some("by-selector"),
            ),
            (vec![&by_selector], &other, None, None),
            // An empty selector guards nothing, rather than everything.
            (vec![&empty_selector], &labels, None, None),
            // The first that matches wins.
            (
                vec![&by_target, &by_selector],
                &labels,
                Some(&cloneset),
                Some("by-target"),
            ),
            (vec![], &labels, Some(&cloneset), None),
        ];
        for (i, (budgets, labels, workload, want)) in cases.into_iter().enumerate() {
            let got =
                budget_for_pod(budgets, labels, workload).and_then(|b| b.metadata.name.as_deref());
            assert_eq!(got, want, "case {i}");
        }
    }

    #[test]
    fn groups_of_api_versions() {
        assert_eq!(group("apps/v1"), "apps");
        assert_eq!(group("v1"), "");
        assert_eq!(group("apps.kruise.io/v1alpha1"), "apps.kruise.io");
    }
}
