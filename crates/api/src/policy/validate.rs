//! Validation of a PodUnavailableBudget (upstream `vpodunavailablebudget.kb.io`,
//! `pkg/webhook/podunavailablebudget/validating`): its annotations, selector or targetRef (one of
//! them), maxUnavailable or minAvailable (one of them, a non-negative int or a percentage up to
//! 100%), no change of what it selects, and no other budget of the namespace guarding the same Pods.

use crate::field::{FieldError, Path};
use crate::intstr;
use crate::validation::{
    check_group_version, group_of, selector_is_empty, selectors_loosely_overlap,
    validate_label_selector,
};

use super::v1alpha1::{PodUnavailableBudget, PubOperation};
use super::{PUB_PROTECT_OPERATIONS_ANNOTATION, PUB_PROTECT_TOTAL_REPLICAS_ANNOTATION};

/// Create (`old` = None) or update validation of `new`, against the other budgets of its namespace
/// (`others`, which may include `new` itself: a budget never conflicts with its own name).
pub fn validate(
    new: &PodUnavailableBudget,
    old: Option<&PodUnavailableBudget>,
    others: &[PodUnavailableBudget],
) -> Vec<FieldError> {
    let mut errors = Vec::new();
    validate_annotations(new, &mut errors);
    let spec = Path::new("spec");
    validate_spec(new, &spec, &mut errors);
    if let Some(old) = old
        && (new.spec.selector != old.spec.selector
            || new.spec.target_reference != old.spec.target_reference)
    {
        errors.push(FieldError::forbidden(
            &spec.child("selector, targetRef"),
            "selector and targetRef cannot be modified",
        ));
    }
    if let Some(error) = conflict(new, others, &spec) {
        errors.push(error);
    }
    errors
}

fn validate_annotations(budget: &PodUnavailableBudget, errors: &mut Vec<FieldError>) {
    let annotations = Path::new("metadata").child("annotations");
    let Some(all) = budget.metadata.annotations.as_ref() else {
        return;
    };
    // Split on commas as upstream does: no spaces, and an empty value is no operation at all.
    if let Some(value) = all.get(PUB_PROTECT_OPERATIONS_ANNOTATION)
        && value.split(',').any(|op| PubOperation::parse(op).is_none())
    {
        errors.push(FieldError::invalid(
            &annotations.key(PUB_PROTECT_OPERATIONS_ANNOTATION),
            value,
            "must be a comma-separated list of UPDATE, DELETE, EVICT and RESIZE",
        ));
    }
    if let Some(value) = all.get(PUB_PROTECT_TOTAL_REPLICAS_ANNOTATION)
        && value.parse::<i32>().is_err()
    {
        errors.push(FieldError::invalid(
            &annotations.key(PUB_PROTECT_TOTAL_REPLICAS_ANNOTATION),
            value,
            "must be a 32-bit integer",
        ));
    }
}

fn validate_spec(budget: &PodUnavailableBudget, spec: &Path, errors: &mut Vec<FieldError>) {
    let s = &budget.spec;
    match (&s.selector, &s.target_reference) {
        (None, None) => errors.push(FieldError::required(
            &spec.child("selector, targetRef"),
            "no selector or targetRef defined in PodUnavailableBudget",
        )),
        (Some(_), Some(_)) => errors.push(FieldError::forbidden(
            &spec.child("selector, targetRef"),
            "selector and targetRef are mutually exclusive",
        )),
        (None, Some(target)) => {
            let path = spec.child("targetRef");
            for (name, value) in [
                ("apiVersion", &target.api_version),
                ("kind", &target.kind),
                ("name", &target.name),
            ] {
                if value.is_empty() {
                    errors.push(FieldError::required(
                        &path.child(name),
                        "empty TargetReference is not valid for PodUnavailableBudget",
                    ));
                }
            }
            if let Err(message) = check_group_version(&target.api_version) {
                errors.push(FieldError::invalid(
                    &path.child("apiVersion"),
                    &target.api_version,
                    message,
                ));
            }
        }
        (Some(selector), None) => {
            let path = spec.child("selector");
            validate_label_selector(selector, &path, errors);
            if selector_is_empty(selector) {
                errors.push(FieldError::invalid(
                    &path,
                    "{}",
                    "empty selector is not valid for PodUnavailableBudget",
                ));
            }
        }
    }
    match (&s.max_unavailable, &s.min_available) {
        (None, None) => errors.push(FieldError::required(
            &spec.child("maxUnavailable, minAvailable"),
            "no maxUnavailable or minAvailable defined in PodUnavailableBudget",
        )),
        (Some(_), Some(_)) => errors.push(FieldError::forbidden(
            &spec.child("maxUnavailable, minAvailable"),
            "maxUnavailable and minAvailable are mutually exclusive",
        )),
        (Some(value), None) => {
            intstr::validate(value, &spec.child("maxUnavailable"), Some(100), errors);
        }
        (None, Some(value)) => {
            intstr::validate(value, &spec.child("minAvailable"), Some(100), errors);
        }
    }
}

/// The first other budget of the namespace that guards the same Pods: the same workload (group,
/// kind and name), or selectors that loosely overlap (upstream's `IsSelectorLooseOverlap`).
fn conflict(
    budget: &PodUnavailableBudget,
    others: &[PodUnavailableBudget],
    spec: &Path,
) -> Option<FieldError> {
    let name = budget.metadata.name.as_deref();
    others
        .iter()
        .filter(|other| other.metadata.name.as_deref() != name)
        .find_map(|other| {
            let other_name = other.metadata.name.as_deref().unwrap_or_default();
            match (
                (&budget.spec.target_reference, &budget.spec.selector),
                (&other.spec.target_reference, &other.spec.selector),
            ) {
                ((Some(mine), _), (Some(theirs), _))
                    if group_of(&mine.api_version) == group_of(&theirs.api_version)
                        && mine.kind == theirs.kind
                        && mine.name == theirs.name =>
                {
                    Some(FieldError::forbidden(
                        &spec.child("targetRef"),
                        format!(
                            "pub.spec.targetReference is in conflict with other PodUnavailableBudget {other_name}"
                        ),
                    ))
                }
                ((None, Some(mine)), (None, Some(theirs)))
                    if selectors_loosely_overlap(mine, theirs) =>
                {
                    Some(FieldError::forbidden(
                        &spec.child("selector"),
                        format!(
                            "pub.spec.selector is in conflict with other PodUnavailableBudget {other_name}"
                        ),
                    ))
                }
                _ => None,
            }
        })
}

#[cfg(test)]
mod tests;
