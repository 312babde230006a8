//! UnitedDeployment validation, as OpenKruise's UnitedDeployment webhook
//! (`pkg/webhook/uniteddeployment/validating/uniteddeployment_validation.go`) on create and update.

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::apps::v1::StatefulSetSpec as NativeStatefulSetSpec;
use k8s_openapi::api::core::v1::{NodeSelectorTerm, PodTemplateSpec, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;
use serde_json::Value;

use super::parse_subset_replicas;
use super::v1beta1::{
    SCHEDULE_ADAPTIVE, SCHEDULE_FIXED, Subset, SubsetTemplate, UPDATE_MANUAL, UnitedDeployment,
    UnitedDeploymentSpec,
};
use crate::field::{FieldError, Path};
use crate::intstr;
use crate::statefulset::v1beta1::StatefulSetSpec as AdvancedStatefulSetSpec;
use crate::validation;

const ONE_TEMPLATE: &str =
    "statefulSetTemplate, advancedStatefulSetTemplate, cloneSetTemplate, or deploymentTemplate";
const LABELS_MISMATCH: &str = "`selector` does not match template `labels`";
const NOT_UPDATABLE: &str = "may not be changed in an update";
/// The upper bound the subset-replica arithmetic gives a subset without maxReplicas.
const UNBOUNDED_MAX_REPLICAS: i64 = 1_000_000;

pub(super) fn validate(
    object: &UnitedDeployment,
    old: Option<&UnitedDeployment>,
) -> Vec<FieldError> {
    let mut errors = Vec::new();
    validation::validate_metadata_name(
        &object.metadata,
        validation::check_dns1123_subdomain,
        &mut errors,
    );
    let path = Path::new("spec");
    validate_spec(&object.spec, &path, &mut errors);
    if let Some(old) = old {
        validate_update(&object.spec, &old.spec, &path, &mut errors);
    }
    errors
}

/// A value shown in a message, in JSON.
fn shown(value: &impl Serialize) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

fn validate_spec(spec: &UnitedDeploymentSpec, path: &Path, errors: &mut Vec<FieldError>) {
    if let Some(replicas) = spec.replicas {
        validation::validate_non_negative(replicas.into(), &path.child("replicas"), errors);
    }
    let selector_path = path.child("selector");
    // The selector the template labels are checked against; none when it is missing or invalid.
    let selector = match &spec.selector {
        None => {
            errors.push(FieldError::required(&selector_path, ""));
            None
        }
        Some(selector) => {
            let before = errors.len();
            validation::validate_label_selector(selector, &selector_path, errors);
            if validation::selector_is_empty(selector) {
                errors.push(FieldError::invalid(
                    &selector_path,
                    "{}",
                    "empty selector is invalid for a workload",
                ));
            }
            (errors.len() == before).then_some(selector)
        }
    };

    let schedule = &spec.topology.schedule_strategy;
    let schedule_path = path.child("topology").child("scheduleStrategy");
    match schedule.type_.as_str() {
        "" | SCHEDULE_FIXED | SCHEDULE_ADAPTIVE => {}
        other => errors.push(FieldError::not_supported(
            &schedule_path.child("type"),
            other,
            &[SCHEDULE_ADAPTIVE, SCHEDULE_FIXED, ""],
        )),
    }
    if schedule.should_reserve_unschedulable_pods()
        && (spec.template.advanced_stateful_set_template.is_some()
            || spec.template.stateful_set_template.is_some())
    {
        errors.push(FieldError::invalid(
            &schedule_path,
            shown(schedule),
            "only stateless workloads (Deployment and CloneSet) are supported by reserved rescheduling",
        ));
    }

    validate_template(&spec.template, selector, &path.child("template"), errors);

    let subsets_path = path.child("topology").child("subsets");
    validate_subset_replicas(spec.replicas, &spec.topology.subsets, &subsets_path, errors);
    let mut names = HashSet::new();
    for (i, subset) in spec.topology.subsets.iter().enumerate() {
        let subset_path = subsets_path.index(i);
        let name_path = subset_path.child("name");
        if subset.name.is_empty() {
            errors.push(FieldError::required(&name_path, ""));
        } else {
            if !names.insert(subset.name.as_str()) {
                errors.push(FieldError::invalid(
                    &name_path,
                    &subset.name,
                    format!("duplicated subset name {}", subset.name),
                ));
            }
            if let Err(message) = validation::check_dns1123_label(&subset.name) {
                errors.push(FieldError::invalid(
                    &name_path,
                    &subset.name,
                    format!("invalid subset name {message}"),
                ));
            }
        }
        validate_node_selector_term(
            &subset.node_selector_term,
            &subset_path.child("nodeSelectorTerm"),
            errors,
        );
        validate_tolerations(
            &subset.tolerations,
            &subset_path.child("tolerations"),
            errors,
        );
        if subset.replicas.is_some() && schedule.is_adaptive() {
            errors.push(FieldError::forbidden(
                &subset_path.child("replicas"),
                "specify replicas use minReplicas/maxReplicas to enable adaptive strategy",
            ));
        }
    }

    let strategy_path = path.child("updateStrategy");
    let strategy = &spec.update_strategy;
    match strategy.type_.as_str() {
        "" | UPDATE_MANUAL => {
            let partitions = strategy
                .manual_update
                .as_ref()
                .map(|m| &m.partitions)
                .filter(|p| !p.is_empty());
            for (subset, _) in partitions.into_iter().flatten() {
                if !names.contains(subset.as_str()) {
                    errors.push(FieldError::invalid(
                        &strategy_path.child("manualUpdate").child("partitions"),
                        shown(&partitions),
                        format!("subset {subset} does not exist"),
                    ));
                }
            }
        }
        other => errors.push(FieldError::not_supported(
            &strategy_path.child("type"),
            other,
            &[UPDATE_MANUAL, ""],
        )),
    }
}

/// The labels of a subset template's metadata must match the selector, when there is a valid one
/// (`path` is the template's): the StatefulSet, Advanced StatefulSet and Deployment templates and the
/// Pod templates are checked alike.
fn check_template_labels(
    metadata: Option<&ObjectMeta>,
    selector: Option<&LabelSelector>,
    path: &Path,
    errors: &mut Vec<FieldError>,
) {
    let Some(selector) = selector else { return };
    let empty = BTreeMap::new();
    let labels = metadata.and_then(|m| m.labels.as_ref()).unwrap_or(&empty);
    if !validation::selector_matches(selector, labels) {
        errors.push(FieldError::invalid(
            &path.child("metadata").child("labels"),
            format!("{labels:?}"),
            LABELS_MISMATCH,
        ));
    }
}

/// A subset's Pod template: labels matching the selector, and a valid workload Pod template (every subset
/// workload kind needs restartPolicy Always and no activeDeadlineSeconds).
fn validate_pod_template(
    template: &PodTemplateSpec,
    selector: Option<&LabelSelector>,
    path: &Path,
    errors: &mut Vec<FieldError>,
) {
    check_template_labels(template.metadata.as_ref(), selector, path, errors);
    validation::validate_pod_template(template, path, &["Always"], true, errors);
}

fn validate_template(
    template: &SubsetTemplate,
    selector: Option<&LabelSelector>,
    path: &Path,
    errors: &mut Vec<FieldError>,
) {
    match template.count() {
        0 => errors.push(FieldError::required(
            path,
            format!("should provide one of {ONE_TEMPLATE}"),
        )),
        1 => {}
        _ => {
            let set: Vec<&str> = [
                (
                    "statefulSetTemplate",
                    template.stateful_set_template.is_some(),
                ),
                (
                    "advancedStatefulSetTemplate",
                    template.advanced_stateful_set_template.is_some(),
                ),
                ("cloneSetTemplate", template.clone_set_template.is_some()),
                ("deploymentTemplate", template.deployment_template.is_some()),
            ]
            .into_iter()
            .filter_map(|(name, set)| set.then_some(name))
            .collect();
            errors.push(FieldError::invalid(
                path,
                set.join(", "),
                format!("should provide only one of {ONE_TEMPLATE}"),
            ));
        }
    }

    if let Some(sts) = &template.stateful_set_template {
        let sts_path = path.child("statefulSetTemplate");
        check_template_labels(Some(&sts.metadata), selector, &sts_path, errors);
        validate_native_statefulset(&sts.spec, selector, &sts_path.child("spec"), errors);
    } else if let Some(asts) = &template.advanced_stateful_set_template {
        let asts_path = path.child("advancedStatefulSetTemplate");
        check_template_labels(Some(&asts.metadata), selector, &asts_path, errors);
        validate_advanced_statefulset(&asts.spec, selector, &asts_path.child("spec"), errors);
    } else if let Some(clone) = &template.clone_set_template {
        // OpenKruise checks nothing here; the subset CloneSets would be rejected unless their Pod
        // template matches the selector (the UnitedDeployment's, plus the subset label) and is valid.
        let spec_path = path.child("cloneSetTemplate").child("spec");
        validate_pod_template(
            &clone.spec.template,
            selector,
            &spec_path.child("template"),
            errors,
        );
    } else if let Some(deployment) = &template.deployment_template {
        let deployment_path = path.child("deploymentTemplate");
        check_template_labels(
            Some(&deployment.metadata),
            selector,
            &deployment_path,
            errors,
        );
        let spec_path = deployment_path.child("spec");
        if let Some(replicas) = deployment.spec.replicas {
            errors.push(FieldError::invalid(
                &spec_path.child("replicas"),
                replicas,
                "replicas in deploymentTemplate will not be used",
            ));
        }
        validate_pod_template(
            &deployment.spec.template,
            selector,
            &spec_path.child("template"),
            errors,
        );
    }
}

/// The native StatefulSet spec of a template, validated as Kubernetes validates a StatefulSet whose
/// selector is the UnitedDeployment's; replicas and partition are set per subset and may not be given.
fn validate_native_statefulset(
    spec: &NativeStatefulSetSpec,
    selector: Option<&LabelSelector>,
    path: &Path,
    errors: &mut Vec<FieldError>,
) {
    if let Some(replicas) = spec.replicas {
        errors.push(FieldError::invalid(
            &path.child("replicas"),
            replicas,
            "replicas in statefulSetTemplate will not be used",
        ));
    }
    let strategy = spec.update_strategy.clone().unwrap_or_default();
    let strategy_path = path.child("updateStrategy");
    let rolling_path = strategy_path.child("rollingUpdate");
    if strategy.type_.as_deref() == Some("RollingUpdate")
        && let Some(partition) = strategy.rolling_update.as_ref().and_then(|r| r.partition)
    {
        errors.push(FieldError::invalid(
            &rolling_path.child("partition"),
            partition,
            "partition in statefulSetTemplate will not be used",
        ));
    }
    match spec.pod_management_policy.as_deref().unwrap_or_default() {
        "" | "OrderedReady" | "Parallel" => {}
        other => errors.push(FieldError::invalid(
            &path.child("podManagementPolicy"),
            other,
            "must be 'OrderedReady' or 'Parallel'",
        )),
    }
    match strategy.type_.as_deref().unwrap_or_default() {
        "OnDelete" => {
            if strategy.rolling_update.is_some() {
                errors.push(FieldError::invalid(
                    &rolling_path,
                    shown(&strategy.rolling_update),
                    "only allowed for updateStrategy 'RollingUpdate'",
                ));
            }
        }
        "" | "RollingUpdate" => {
            let max_unavailable = strategy
                .rolling_update
                .as_ref()
                .and_then(|r| r.max_unavailable.as_ref());
            if let Some(value) = max_unavailable {
                let max_path = rolling_path.child("maxUnavailable");
                if let Some(parsed) = intstr::validate(value, &max_path, Some(100), errors)
                    && parsed.is_zero()
                {
                    errors.push(FieldError::invalid(
                        &max_path,
                        intstr::display(value),
                        "cannot be 0",
                    ));
                }
            }
        }
        other => errors.push(FieldError::invalid(
            &strategy_path,
            other,
            "must be 'RollingUpdate' or 'OnDelete'",
        )),
    }
    if let Some(policy) = &spec.persistent_volume_claim_retention_policy {
        let policy_path = path.child("persistentVolumeClaimRetentionPolicy");
        for (name, value) in [
            ("whenDeleted", &policy.when_deleted),
            ("whenScaled", &policy.when_scaled),
        ] {
            let value = value.as_deref().unwrap_or_default();
            if value != "Retain" && value != "Delete" {
                errors.push(FieldError::not_supported(
                    &policy_path.child(name),
                    value,
                    &["Retain", "Delete"],
                ));
            }
        }
    }
    if let Some(seconds) = spec.min_ready_seconds {
        validation::validate_non_negative(seconds.into(), &path.child("minReadySeconds"), errors);
    }
    if let Some(start) = spec.ordinals.as_ref().and_then(|o| o.start) {
        validation::validate_non_negative(
            start.into(),
            &path.child("ordinals").child("start"),
            errors,
        );
    }
    validate_pod_template(&spec.template, selector, &path.child("template"), errors);
}

fn validate_advanced_statefulset(
    spec: &AdvancedStatefulSetSpec,
    selector: Option<&LabelSelector>,
    path: &Path,
    errors: &mut Vec<FieldError>,
) {
    if let Some(replicas) = spec.replicas {
        errors.push(FieldError::invalid(
            &path.child("replicas"),
            replicas,
            "replicas in advancedStatefulSetTemplate will not be used",
        ));
    }
    let strategy = &spec.update_strategy;
    if strategy.type_ == "RollingUpdate"
        && let Some(partition) = strategy.rolling_update.as_ref().and_then(|r| r.partition)
    {
        errors.push(FieldError::invalid(
            &path
                .child("updateStrategy")
                .child("rollingUpdate")
                .child("partition"),
            partition,
            "partition in advancedStatefulSetTemplate will not be used",
        ));
    }
    validate_pod_template(&spec.template, selector, &path.child("template"), errors);
}

/// A subset replica value, or 0 after recording why it is invalid.
fn parse(
    ud_replicas: Option<i32>,
    value: &IntOrString,
    path: &Path,
    errors: &mut Vec<FieldError>,
) -> i32 {
    parse_subset_replicas(ud_replicas, value).unwrap_or_else(|message| {
        errors.push(FieldError::invalid(path, intstr::display(value), message));
        0
    })
}

/// OpenKruise's replica rules over the subsets (`validateSubsetReplicas`).
fn validate_subset_replicas(
    ud_replicas: Option<i32>,
    subsets: &[Subset],
    path: &Path,
    errors: &mut Vec<FieldError>,
) {
    let (mut sum_replicas, mut sum_min, mut sum_max) = (0i64, 0i64, 0i64);
    let (mut count_replicas, mut count_max) = (0usize, 0usize);
    let (mut has_replicas, mut has_capacity) = (false, false);
    for (i, subset) in subsets.iter().enumerate() {
        if let Some(value) = &subset.replicas {
            count_replicas += 1;
            has_replicas = true;
            sum_replicas += i64::from(parse(
                ud_replicas,
                value,
                &path.index(i).child("replicas"),
                errors,
            ));
        }
        let mut min = 0i64;
        if let Some(value) = &subset.min_replicas {
            has_capacity = true;
            min = parse(
                ud_replicas,
                value,
                &path.index(i).child("minReplicas"),
                errors,
            )
            .into();
        }
        sum_min += min;
        let mut max = UNBOUNDED_MAX_REPLICAS;
        if let Some(value) = &subset.max_replicas {
            count_max += 1;
            has_capacity = true;
            max = parse(
                ud_replicas,
                value,
                &path.index(i).child("maxReplicas"),
                errors,
            )
            .into();
        }
        sum_max += max;
        if min > max {
            errors.push(FieldError::invalid(
                &path.index(i).child("minReplicas"),
                intstr::display_or_empty(subset.min_replicas.as_ref()),
                format!("subset[{i}].minReplicas must be less than or equal to maxReplicas"),
            ));
        }
    }

    if has_replicas && has_capacity {
        errors.push(FieldError::invalid(
            path,
            "{...}",
            "subset.Replicas and subset.MinReplicas/subset.MaxReplicas are mutually exclusive in a UnitedDeployment",
        ));
        return;
    }
    if has_capacity {
        if ud_replicas.is_none() {
            errors.push(FieldError::invalid(
                path,
                "null",
                "spec.replicas must be not empty if you set subset.minReplicas/maxReplicas",
            ));
        }
        if count_max >= subsets.len() {
            errors.push(FieldError::invalid(
                path,
                count_max,
                "at least one subset.maxReplicas must be empty",
            ));
        }
        if sum_min > sum_max {
            errors.push(FieldError::invalid(
                path,
                sum_min,
                "sum of indicated subset.minReplicas should not be greater than sum of indicated subset.maxReplicas",
            ));
        }
        return;
    }
    match ud_replicas {
        Some(total) => {
            if sum_replicas > i64::from(total) {
                errors.push(FieldError::invalid(
                    path,
                    sum_replicas,
                    format!(
                        "sum of indicated subset replicas {sum_replicas} should not be greater than UnitedDeployment replicas {total}"
                    ),
                ));
            }
            if count_replicas > 0
                && count_replicas == subsets.len()
                && sum_replicas != i64::from(total)
            {
                errors.push(FieldError::invalid(
                    path,
                    sum_replicas,
                    format!(
                        "if replicas of all subsets are provided, the sum of indicated subset replicas {sum_replicas} should equal UnitedDeployment replicas {total}"
                    ),
                ));
            }
        }
        None if count_replicas != subsets.len() => errors.push(FieldError::invalid(
            path,
            sum_replicas,
            "if UnitedDeployment replicas is not provided, replicas of all subsets should be provided",
        )),
        None => {}
    }
}

/// `ValidateNodeSelectorTerm` with invalid label values allowed (as OpenKruise calls it).
fn validate_node_selector_term(term: &NodeSelectorTerm, path: &Path, errors: &mut Vec<FieldError>) {
    for (j, requirement) in term.match_expressions.iter().flatten().enumerate() {
        let req_path = path.child("matchExpressions").index(j);
        let values = requirement.values.as_deref().unwrap_or_default();
        let operator = requirement.operator.as_str();
        let values_path = req_path.child("values");
        let error =
            validation::set_operator_values_error(operator, values, &values_path).or_else(|| {
                match operator {
                    "Gt" | "Lt" if values.len() != 1 => Some(FieldError::required(
                        &values_path,
                        "must be specified single value when `operator` is 'Lt' or 'Gt'",
                    )),
                    "In" | "NotIn" | "Exists" | "DoesNotExist" | "Gt" | "Lt" => None,
                    other => Some(FieldError::invalid(
                        &req_path.child("operator"),
                        other,
                        "not a valid selector operator",
                    )),
                }
            });
        errors.extend(error);
        if let Err(message) = validation::check_qualified_name(&requirement.key) {
            errors.push(FieldError::invalid(
                &req_path.child("key"),
                &requirement.key,
                message,
            ));
        }
    }
    for (j, requirement) in term.match_fields.iter().flatten().enumerate() {
        let req_path = path.child("matchFields").index(j);
        let values = requirement.values.as_deref().unwrap_or_default();
        match requirement.operator.as_str() {
            "In" | "NotIn" if values.len() != 1 => errors.push(FieldError::required(
                &req_path.child("values"),
                "must be only one value when `operator` is 'In' or 'NotIn' for node field selector",
            )),
            "In" | "NotIn" => {}
            other => errors.push(FieldError::invalid(
                &req_path.child("operator"),
                other,
                "not a valid selector operator",
            )),
        }
        if requirement.key != "metadata.name" {
            errors.push(FieldError::invalid(
                &req_path.child("key"),
                &requirement.key,
                "not a valid field selector key",
            ));
        } else {
            for (k, value) in values.iter().enumerate() {
                if let Err(message) = validation::check_dns1123_subdomain(value) {
                    errors.push(FieldError::invalid(
                        &req_path.child("values").index(k),
                        value,
                        message,
                    ));
                }
            }
        }
    }
}

/// Kubernetes' toleration rules (`ValidateTolerations`).
fn validate_tolerations(tolerations: &[Toleration], path: &Path, errors: &mut Vec<FieldError>) {
    const EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];
    for (i, toleration) in tolerations.iter().enumerate() {
        let item = path.index(i);
        let key = toleration.key.as_deref().unwrap_or_default();
        let operator = toleration.operator.as_deref().unwrap_or_default();
        let value = toleration.value.as_deref().unwrap_or_default();
        let effect = toleration.effect.as_deref().unwrap_or_default();
        if !key.is_empty()
            && let Err(message) = validation::check_qualified_name(key)
        {
            errors.push(FieldError::invalid(&item.child("key"), key, message));
        }
        if key.is_empty() && operator != "Exists" {
            errors.push(FieldError::invalid(
                &item.child("operator"),
                operator,
                "operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
            ));
        }
        if toleration.toleration_seconds.is_some() && effect != "NoExecute" {
            errors.push(FieldError::invalid(
                &item.child("effect"),
                effect,
                "effect must be 'NoExecute' when `tolerationSeconds` is set",
            ));
        }
        match operator {
            "" | "Equal" => {
                if let Err(message) = validation::check_label_value(value) {
                    errors.push(FieldError::invalid(&item.child("operator"), value, message));
                }
            }
            "Exists" => {
                if !value.is_empty() {
                    errors.push(FieldError::invalid(
                        &item.child("operator"),
                        value,
                        "value must be empty when `operator` is 'Exists'",
                    ));
                }
            }
            other => errors.push(FieldError::not_supported(
                &item.child("operator"),
                other,
                &["Equal", "Exists"],
            )),
        }
        if !effect.is_empty() && !EFFECTS.contains(&effect) {
            errors.push(FieldError::not_supported(
                &item.child("effect"),
                effect,
                &EFFECTS,
            ));
        }
    }
}

/// JSON without nulls, empty lists and empty objects, so that comparisons treat an unset field and an
/// empty one alike (as Kubernetes' semantic equality does).
fn normalized(value: &impl Serialize) -> Value {
    crate::gojson::prune_empty(serde_json::to_value(value).unwrap_or(Value::Null))
}

/// What of a native StatefulSet template may not change: everything but replicas, selector (the
/// UnitedDeployment's is used), template, updateStrategy, minReadySeconds, ordinals and the PVC retention
/// policy; an empty podManagementPolicy counts as OrderedReady.
fn native_statefulset_fixed_part(spec: &NativeStatefulSetSpec) -> Value {
    let mut fixed = spec.clone();
    fixed.replicas = None;
    fixed.selector = LabelSelector::default();
    fixed.template = PodTemplateSpec::default();
    fixed.update_strategy = None;
    fixed.min_ready_seconds = None;
    fixed.ordinals = None;
    fixed.persistent_volume_claim_retention_policy = None;
    if fixed
        .pod_management_policy
        .as_deref()
        .is_none_or(str::is_empty)
    {
        fixed.pod_management_policy = Some("OrderedReady".into());
    }
    normalized(&fixed)
}

fn validate_update(
    spec: &UnitedDeploymentSpec,
    old: &UnitedDeploymentSpec,
    path: &Path,
    errors: &mut Vec<FieldError>,
) {
    let template_path = path.child("template");
    let (new_template, old_template) = (&spec.template, &old.template);
    if let (Some(new), Some(previous)) = (
        &new_template.stateful_set_template,
        &old_template.stateful_set_template,
    ) {
        if native_statefulset_fixed_part(&new.spec) != native_statefulset_fixed_part(&previous.spec)
        {
            errors.push(FieldError::forbidden(
                &template_path.child("statefulSetTemplate").child("spec"),
                "updates to statefulsetTemplate spec for fields other than 'template', 'updateStrategy', \
                 'persistentVolumeClaimRetentionPolicy', 'minReadySeconds' and 'ordinals' are forbidden",
            ));
        }
    } else if let (Some(new), Some(previous)) = (
        &new_template.advanced_stateful_set_template,
        &old_template.advanced_stateful_set_template,
    ) {
        let mut unchanged = new.spec.clone();
        unchanged.replicas = previous.spec.replicas;
        unchanged.template = previous.spec.template.clone();
        unchanged.update_strategy = previous.spec.update_strategy.clone();
        if normalized(&unchanged) != normalized(&previous.spec) {
            errors.push(FieldError::forbidden(
                &template_path
                    .child("advancedStatefulSetTemplate")
                    .child("spec"),
                "updates to advancedStatefulsetTemplate spec for fields other than 'template', and \
                 'updateStrategy' are forbidden",
            ));
        }
    }

    let subsets_path = path.child("topology").child("subsets");
    for (i, subset) in spec.topology.subsets.iter().enumerate() {
        let Some(previous) = old.topology.subsets.iter().find(|s| s.name == subset.name) else {
            continue;
        };
        if normalized(&subset.node_selector_term) != normalized(&previous.node_selector_term) {
            errors.push(FieldError::forbidden(
                &subsets_path.index(i).child("nodeSelectorTerm"),
                NOT_UPDATABLE,
            ));
        }
        if normalized(&subset.tolerations) != normalized(&previous.tolerations) {
            errors.push(FieldError::forbidden(
                &subsets_path.index(i).child("tolerations"),
                NOT_UPDATABLE,
            ));
        }
    }
}
