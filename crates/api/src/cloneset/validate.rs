//! CloneSet validation: OpenKruise's webhook rules (`pkg/webhook/cloneset/validating`) for create and
//! update, on the v1beta1 form.

use std::collections::HashSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;

use super::v1beta1::{self, CloneSet, CloneSetSpec, RollingUpdateCloneSetStrategy};
use crate::field::{FieldError, Path};
use crate::intstr::{self, Round};
use crate::pub_types::{InPlaceUpdateStrategy, validate_scatter};
use crate::validation;

const UPDATE_TYPES: [&str; 2] = [v1beta1::UPDATE_ROLLING_UPDATE, v1beta1::UPDATE_ON_DELETE];
const POD_UPDATE_POLICIES: [&str; 3] = [
    v1beta1::POD_UPDATE_RECREATE,
    v1beta1::POD_UPDATE_IN_PLACE_IF_POSSIBLE,
    v1beta1::POD_UPDATE_IN_PLACE_ONLY,
];
const IMMUTABLE_SPEC_MESSAGE: &str = "updates to cloneset spec for fields other than 'replicas', 'template', \
     'lifecycle', 'scaleStrategy', 'updateStrategy', 'minReadySeconds', 'progressDeadlineSeconds', \
     'volumeClaimTemplates' and 'revisionHistoryLimit' are forbidden";

pub(super) fn validate(object: &CloneSet, old: Option<&CloneSet>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if let Some(old) = old {
        validate_update(object, old, &mut errors);
    }
    validate_name(&object.metadata, &mut errors);
    validate_spec(&object.spec, &Path::new("spec"), &mut errors);
    errors
}

/// A DNS-1123 subdomain, as Kubernetes requires of object names (OpenKruise's CloneSet message has no
/// length in it).
fn validate_name(metadata: &ObjectMeta, errors: &mut Vec<FieldError>) {
    let check = |name: &str| {
        validation::check_dns1123_subdomain(name).map_err(|_| {
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or \
             '.', and must start and end with an alphanumeric character"
                .to_string()
        })
    };
    validation::validate_metadata_name(metadata, check, errors);
}

fn validate_spec(spec: &CloneSetSpec, path: &Path, errors: &mut Vec<FieldError>) {
    let replicas = spec.replicas.unwrap_or(1);
    validation::validate_non_negative(replicas.into(), &path.child("replicas"), errors);
    validation::validate_workload_selector_and_template(
        spec.selector.as_ref(),
        &spec.template,
        path,
        errors,
    );
    validate_volume_claim_templates(spec, path, errors);

    let scale_path = path.child("scaleStrategy");
    let mut seen = HashSet::new();
    for (i, name) in spec.scale_strategy.pods_to_delete.iter().enumerate() {
        if !seen.insert(name.as_str()) {
            errors.push(FieldError::duplicate(
                &scale_path.child("podsToDelete").index(i),
                name,
            ));
        }
    }
    if let Some(max_unavailable) = &spec.scale_strategy.max_unavailable {
        intstr::validate(
            max_unavailable,
            &scale_path.child("maxUnavailable"),
            None,
            errors,
        );
    }

    let update_path = path.child("updateStrategy");
    let strategy = &spec.update_strategy;
    if !strategy.type_.is_empty() && !UPDATE_TYPES.contains(&strategy.type_.as_str()) {
        errors.push(FieldError::not_supported(
            &update_path.child("type"),
            &strategy.type_,
            &UPDATE_TYPES,
        ));
    }
    if let Some(rolling) = &strategy.rolling_update {
        validate_rolling_update(
            rolling,
            replicas,
            &update_path.child("rollingUpdate"),
            errors,
        );
    }

    if let Some(lifecycle) = &spec.lifecycle {
        lifecycle.validate(&path.child("lifecycle"), errors);
    }
    if let Some(deadline) = spec.progress_deadline_seconds {
        let deadline_path = path.child("progressDeadlineSeconds");
        if deadline < 0 {
            validation::validate_non_negative(deadline.into(), &deadline_path, errors);
        } else if deadline != i32::MAX && deadline <= spec.min_ready_seconds {
            errors.push(FieldError::invalid(
                &deadline_path,
                deadline,
                "must be greater than minReadySeconds",
            ));
        }
    }
}

/// PVC templates become volumes of every Pod: valid, unique names that no template volume already uses.
/// Every volume mount must name a template volume or a PVC template.
fn validate_volume_claim_templates(spec: &CloneSetSpec, path: &Path, errors: &mut Vec<FieldError>) {
    let pod = spec.template.spec.as_ref();
    let mut volumes: HashSet<&str> = pod
        .and_then(|p| p.volumes.as_ref())
        .into_iter()
        .flatten()
        .map(|v| v.name.as_str())
        .collect();
    for (i, pvc) in spec.volume_claim_templates.iter().enumerate() {
        let name_path = path
            .child("volumeClaimTemplates")
            .index(i)
            .child("metadata")
            .child("name");
        let name = pvc.metadata.name.as_deref().unwrap_or_default();
        if name.is_empty() {
            errors.push(FieldError::required(&name_path, ""));
        } else if let Err(message) = validation::check_dns1123_label(name) {
            errors.push(FieldError::invalid(&name_path, name, message));
        } else if !volumes.insert(name) {
            errors.push(FieldError::duplicate(&name_path, name));
        }
    }
    let Some(pod) = pod else { return };
    let spec_path = path.child("template").child("spec");
    for (container_path, container) in validation::pod_containers(pod, &spec_path) {
        for (j, mount) in container.volume_mounts.iter().flatten().enumerate() {
            if !volumes.contains(mount.name.as_str()) {
                errors.push(FieldError::invalid(
                    &container_path.child("volumeMounts").index(j).child("name"),
                    &mount.name,
                    "must be the name of a volume or of a volumeClaimTemplate",
                ));
            }
        }
    }
}

/// A scaled int-or-percent; a missing or invalid value counts as 0 (the invalid one is reported).
fn scaled(
    value: Option<&IntOrString>,
    replicas: i32,
    path: &Path,
    errors: &mut Vec<FieldError>,
) -> i32 {
    value
        .and_then(|v| intstr::validate(v, path, None, errors))
        .map_or(0, |v| v.scaled(replicas, Round::Up))
}

fn validate_rolling_update(
    rolling: &RollingUpdateCloneSetStrategy,
    replicas: i32,
    path: &Path,
    errors: &mut Vec<FieldError>,
) {
    let policy = rolling.pod_update_policy.as_str();
    if !policy.is_empty() && !POD_UPDATE_POLICIES.contains(&policy) {
        errors.push(FieldError::not_supported(
            &path.child("podUpdatePolicy"),
            policy,
            &POD_UPDATE_POLICIES,
        ));
    }
    if let Some(partition) = &rolling.partition {
        intstr::validate(partition, &path.child("partition"), Some(100), errors);
    }
    let max_unavailable = scaled(
        rolling.max_unavailable.as_ref(),
        replicas,
        &path.child("maxUnavailable"),
        errors,
    );
    let max_surge = scaled(
        rolling.max_surge.as_ref(),
        replicas,
        &path.child("maxSurge"),
        errors,
    );
    if policy == v1beta1::POD_UPDATE_IN_PLACE_ONLY && max_surge > 0 {
        errors.push(FieldError::invalid(
            &path.child("maxSurge"),
            intstr::display_or_empty(rolling.max_surge.as_ref()),
            "can not use maxSurge with podUpdatePolicy InPlaceOnly",
        ));
    }
    if replicas > 0 && max_unavailable < 1 && max_surge < 1 {
        errors.push(FieldError::invalid(
            &path.child("maxUnavailable"),
            rolling
                .max_unavailable
                .as_ref()
                .map_or_else(|| "null".to_string(), intstr::display),
            "maxUnavailable and maxSurge should not both be less than 1",
        ));
    }
    if let Some(priority) = &rolling.priority_strategy {
        priority.validate(&path.child("priorityStrategy"), errors);
    }
    validate_scatter(
        &rolling.scatter_strategy,
        &path.child("scatterStrategy"),
        errors,
    );
    if let Some(in_place) = &rolling.in_place_update_strategy {
        validate_in_place(in_place, &path.child("inPlaceUpdateStrategy"), errors);
    }
}

fn validate_in_place(strategy: &InPlaceUpdateStrategy, path: &Path, errors: &mut Vec<FieldError>) {
    let parallelism_path = path.child("imagePreDownloadParallelism");
    match &strategy.image_pre_download_parallelism {
        None => {}
        Some(IntOrString::Int(n)) if *n < 0 => errors.push(FieldError::invalid(
            &parallelism_path,
            n,
            "imagePreDownloadParallelism must be non-negative",
        )),
        Some(IntOrString::Int(_)) => {}
        Some(IntOrString::String(s)) if s.ends_with('%') => errors.push(FieldError::invalid(
            &parallelism_path,
            s,
            "imagePreDownloadParallelism does not support percentage value",
        )),
        Some(IntOrString::String(s)) => match s.parse::<i32>() {
            Err(error) => errors.push(FieldError::invalid(
                &parallelism_path,
                s,
                format!("imagePreDownloadParallelism must be a valid integer: {error}"),
            )),
            Ok(n) if n < 0 => errors.push(FieldError::invalid(
                &parallelism_path,
                s,
                "imagePreDownloadParallelism must be non-negative",
            )),
            Ok(_) => {}
        },
    }
    if let Some(timeout) = strategy.image_pre_download_timeout_seconds {
        validation::validate_non_negative(
            timeout.into(),
            &path.child("imagePreDownloadTimeoutSeconds"),
            errors,
        );
    }
    if let Some(min_ready) = strategy.image_pre_download_min_updated_ready_pods {
        validation::validate_non_negative(
            min_ready.into(),
            &path.child("imagePreDownloadMinUpdatedReadyPods"),
            errors,
        );
    }
}

/// An absent selector, an empty map and an empty list are the same selector.
fn normalized_selector(selector: Option<&LabelSelector>) -> LabelSelector {
    let selector = selector.cloned().unwrap_or_default();
    LabelSelector {
        match_labels: selector.match_labels.filter(|m| !m.is_empty()),
        match_expressions: selector.match_expressions.filter(|e| !e.is_empty()),
    }
}

/// Update rules: only the selector is immutable among the spec fields; under InPlaceOnly the Pod spec may
/// change only by replacing container images.
fn validate_update(object: &CloneSet, old: &CloneSet, errors: &mut Vec<FieldError>) {
    if normalized_selector(object.spec.selector.as_ref())
        != normalized_selector(old.spec.selector.as_ref())
    {
        errors.push(FieldError::forbidden(
            &Path::new("spec"),
            IMMUTABLE_SPEC_MESSAGE,
        ));
    }
    let in_place_only = object
        .spec
        .update_strategy
        .rolling_update
        .as_ref()
        .is_some_and(|r| r.pod_update_policy == v1beta1::POD_UPDATE_IN_PLACE_ONLY);
    if !in_place_only {
        return;
    }
    let (Ok(before), Ok(after)) = (
        serde_json::to_value(&old.spec.template.spec),
        serde_json::to_value(&object.spec.template.spec),
    ) else {
        return;
    };
    let mut patch = Vec::new();
    json_patch(&before, &after, "", &mut patch);
    if let Some((op, pointer)) = patch
        .into_iter()
        .find(|(op, pointer)| *op != "replace" || !is_image_pointer(pointer))
    {
        errors.push(FieldError::forbidden(
            &Path::new("spec").child("template").child("spec"),
            format!(
                "only allowed to update images in spec for InPlaceOnly, but found {op} {pointer}"
            ),
        ));
    }
}

/// `/containers/<n>/image`
fn is_image_pointer(pointer: &str) -> bool {
    pointer
        .strip_prefix("/containers/")
        .and_then(|rest| rest.strip_suffix("/image"))
        .is_some_and(|index| !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit()))
}

/// The operations of a JSON patch from `before` to `after`: (op, JSON pointer).
fn json_patch(
    before: &Value,
    after: &Value,
    pointer: &str,
    patch: &mut Vec<(&'static str, String)>,
) {
    if before == after {
        return;
    }
    match (before, after) {
        (Value::Object(old), Value::Object(new)) => {
            for (key, old_value) in old {
                let child = format!("{pointer}/{}", key.replace('~', "~0").replace('/', "~1"));
                match new.get(key) {
                    Some(new_value) => json_patch(old_value, new_value, &child, patch),
                    None => patch.push(("remove", child)),
                }
            }
            for key in new.keys().filter(|key| !old.contains_key(*key)) {
                patch.push((
                    "add",
                    format!("{pointer}/{}", key.replace('~', "~0").replace('/', "~1")),
                ));
            }
        }
        (Value::Array(old), Value::Array(new)) => {
            for (i, (old_value, new_value)) in old.iter().zip(new).enumerate() {
                json_patch(old_value, new_value, &format!("{pointer}/{i}"), patch);
            }
            patch.extend((new.len()..old.len()).map(|i| ("remove", format!("{pointer}/{i}"))));
            patch.extend((old.len()..new.len()).map(|i| ("add", format!("{pointer}/{i}"))));
        }
        _ => patch.push(("replace", pointer.to_string())),
    }
}
