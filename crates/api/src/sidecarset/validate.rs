//! SidecarSet validation: OpenKruise's webhook rules for one object (create and update), plus the checks
//! the core Pod validation makes on the sidecar containers and volumes (upstream validates them inside a
//! fake Pod). Rules that need other objects (other SidecarSets, ControllerRevisions, the patch-metadata
//! whitelist ConfigMap, the canary's base) are not here; see [`super::conflicts`].

use std::collections::{BTreeMap, HashMap, HashSet};

use k8s_openapi::api::core::v1::{Container, LifecycleHandler, ObjectFieldSelector, Probe, Volume};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::resources_expr;
use super::v1beta1::{self as api, SidecarContainer, SidecarSet};
use super::{ANNOTATION_BASE, canary_base, is_native_sidecar};
use crate::field::{FieldError, Path};
use crate::intstr::{self, IntOrPercent};
use crate::pub_types::validate_scatter;
use crate::quantity::Quantity;
use crate::validation::containers;
use crate::validation::{
    check_dns1123_label, check_label_value, check_qualified_name, selector_is_empty,
    validate_label_selector, validate_non_negative,
};

const NAME_MAX_LEN: usize = 63;

pub(super) fn validate(object: &SidecarSet, old: Option<&SidecarSet>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    validate_metadata(object, old, &mut errors);
    validate_spec(object, &mut errors);
    if let Some(old) = old {
        validate_update(object, old, &mut errors);
    }
    errors
}

fn validate_metadata(object: &SidecarSet, old: Option<&SidecarSet>, errors: &mut Vec<FieldError>) {
    let meta = &object.metadata;
    let path = Path::new("metadata");
    let name = meta.name.as_deref().unwrap_or_default();
    if name.is_empty() {
        if meta.generate_name.as_deref().is_none_or(str::is_empty) {
            errors.push(FieldError::required(
                &path.child("name"),
                "name or generateName is required",
            ));
        }
    } else if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        || name.len() > NAME_MAX_LEN
    {
        errors.push(FieldError::invalid(
            &path.child("name"),
            name,
            "sidecarset name must consist of alphanumeric characters or '-' (at most 63 characters)",
        ));
    }
    if meta.namespace.as_deref().is_some_and(|ns| !ns.is_empty()) {
        errors.push(FieldError::forbidden(
            &path.child("namespace"),
            "not allowed on this type (SidecarSet is cluster-scoped)",
        ));
    }

    // Canary SidecarSets (the checks that need no other object).
    if let Some(base) = canary_base(meta) {
        let base_path = path.child("annotations").key(ANNOTATION_BASE);
        if base == name {
            errors.push(FieldError::invalid(
                &base_path,
                base,
                "base sidecarSet cannot be itself",
            ));
        }
        if let Some(old) = old
            && canary_base(&old.metadata) != Some(base)
        {
            errors.push(FieldError::invalid(
                &base_path,
                base,
                format!("annotations[{ANNOTATION_BASE}] is immutable"),
            ));
        }
        if object.spec.update_strategy.type_ != api::UPDATE_NOT_UPDATE {
            errors.push(FieldError::forbidden(
                &Path::new("spec").child("updateStrategy").child("type"),
                "RollingUpdate is not supported for canary sidecarSet (use NotUpdate)",
            ));
        }
    }
}

fn validate_spec(object: &SidecarSet, errors: &mut Vec<FieldError>) {
    let spec = &object.spec;
    let path = Path::new("spec");

    // Native sidecars (init containers with restartPolicy Always) are not upgraded in place.
    if spec.update_strategy.type_ == api::UPDATE_ROLLING_UPDATE
        && let Some(native) = spec.init_containers.iter().find(|c| is_native_sidecar(c))
    {
        errors.push(FieldError::forbidden(
            &path.child("updateStrategy").child("type"),
            format!(
                "RollingUpdate is not supported with initContainer {:?} of restartPolicy Always (in-place upgrade of \
                 init containers is not supported); use NotUpdate",
                native.name
            ),
        ));
    }

    match &spec.selector {
        None => errors.push(FieldError::required(
            &path.child("selector"),
            "no selector defined for SidecarSet",
        )),
        Some(selector) => validate_selector(selector, &path.child("selector"), errors),
    }
    if let Some(selector) = &spec.namespace_selector {
        validate_selector(selector, &path.child("namespaceSelector"), errors);
    }
    validate_injection_strategy(
        &spec.injection_strategy,
        &path.child("injectionStrategy"),
        errors,
    );
    validate_update_strategy(&spec.update_strategy, &path.child("updateStrategy"), errors);
    let volumes = validate_volumes(&spec.volumes, &path.child("volumes"), errors);

    if spec.init_containers.is_empty() && spec.containers.is_empty() {
        errors.push(FieldError::required(
            &path.child("containers"),
            "no initContainer or container defined for SidecarSet",
        ));
    }
    let mut names = HashSet::new();
    for (i, container) in spec.init_containers.iter().enumerate() {
        let container_path = path.child("initContainers").index(i);
        validate_sidecar_container(
            container,
            &container_path,
            true,
            &volumes,
            &mut names,
            errors,
        );
    }
    for (i, container) in spec.containers.iter().enumerate() {
        let container_path = path.child("containers").index(i);
        validate_sidecar_container(
            container,
            &container_path,
            false,
            &volumes,
            &mut names,
            errors,
        );
    }

    validate_patch_pod_metadata(
        &spec.patch_pod_metadata,
        &path.child("patchPodMetadata"),
        errors,
    );
    if let Some(limit) = spec.revision_history_limit {
        validate_non_negative(limit.into(), &path.child("revisionHistoryLimit"), errors);
    }
    if let Err(message) = check_label_value(&spec.custom_version) {
        errors.push(FieldError::invalid(
            &path.child("customVersion"),
            &spec.custom_version,
            message,
        ));
    }
}

fn validate_update(object: &SidecarSet, old: &SidecarSet, errors: &mut Vec<FieldError>) {
    let path = Path::new("spec").child("containers");
    let old_types: HashMap<&str, &str> = old
        .spec
        .containers
        .iter()
        .map(|c| (c.name.as_str(), c.upgrade_strategy.upgrade_type.as_str()))
        .collect();
    for (i, container) in object.spec.containers.iter().enumerate() {
        let container_path = path.index(i);
        match old_types.get(container.name.as_str()) {
            None => errors.push(FieldError::forbidden(
                &container_path.child("name"),
                format!("container {:?} is not found in the existing SidecarSet: sidecar containers may not be added or renamed", container.name),
            )),
            Some(old_type) if !old_type.is_empty() && *old_type != container.upgrade_strategy.upgrade_type => {
                errors.push(FieldError::invalid(
                    &container_path.child("upgradeStrategy").child("upgradeType"),
                    &container.upgrade_strategy.upgrade_type,
                    format!("field is immutable (was {old_type:?})"),
                ));
            }
            Some(_) => {}
        }
    }
}

fn validate_selector(selector: &LabelSelector, path: &Path, errors: &mut Vec<FieldError>) {
    validate_label_selector(selector, path, errors);
    if selector_is_empty(selector) {
        errors.push(FieldError::invalid(
            path,
            "{}",
            "empty selector is not valid for sidecarset.",
        ));
    }
}

fn validate_injection_strategy(
    strategy: &api::SidecarSetInjectionStrategy,
    path: &Path,
    errors: &mut Vec<FieldError>,
) {
    let Some(revision) = &strategy.revision else {
        return;
    };
    let revision_path = path.child("revision");
    let set = |v: &Option<String>| v.as_deref().is_some_and(|s| !s.is_empty());
    if !set(&revision.custom_version) && !set(&revision.revision_name) {
        errors.push(FieldError::required(
            &revision_path,
            "revisionName and customVersion cannot be empty simultaneously",
        ));
    }
    match revision.policy.as_str() {
        "" | api::INJECT_REVISION_ALWAYS | api::INJECT_REVISION_PARTIAL => {}
        other => errors.push(FieldError::not_supported(
            &revision_path.child("policy"),
            other,
            &[api::INJECT_REVISION_ALWAYS, api::INJECT_REVISION_PARTIAL],
        )),
    }
}

fn validate_update_strategy(
    strategy: &api::SidecarSetUpdateStrategy,
    path: &Path,
    errors: &mut Vec<FieldError>,
) {
    match strategy.type_.as_str() {
        "" | api::UPDATE_ROLLING_UPDATE => {}
        api::UPDATE_NOT_UPDATE => return,
        other => {
            errors.push(FieldError::not_supported(
                &path.child("type"),
                other,
                &[api::UPDATE_ROLLING_UPDATE, api::UPDATE_NOT_UPDATE],
            ));
            return;
        }
    }
    let partition_set = strategy
        .partition
        .as_ref()
        .is_some_and(|p| !matches!(p, IntOrString::Int(0)));
    if partition_set && strategy.selector.is_some() {
        errors.push(FieldError::forbidden(
            &path.child("partition"),
            "partition and selector cannot be used together under RollingUpdate",
        ));
    }
    if let Some(selector) = &strategy.selector {
        validate_selector(selector, &path.child("selector"), errors);
    }
    if let Some(partition) = &strategy.partition {
        intstr::validate(partition, &path.child("partition"), Some(100), errors);
    }
    if let Some(max_unavailable) = &strategy.max_unavailable {
        let max_path = path.child("maxUnavailable");
        if intstr::validate(max_unavailable, &max_path, Some(100), errors)
            .is_some_and(IntOrPercent::is_zero)
        {
            errors.push(FieldError::invalid(
                &max_path,
                intstr::display(max_unavailable),
                "must not be 0",
            ));
        }
    }
    if let Some(priority) = &strategy.priority_strategy {
        priority.validate(&path.child("priorityStrategy"), errors);
    }
    validate_scatter(
        &strategy.scatter_strategy,
        &path.child("scatterStrategy"),
        errors,
    );
}

/// Names, uniqueness and exactly one source per volume; returns the volumes by name.
fn validate_volumes<'a>(
    volumes: &'a [Volume],
    path: &Path,
    errors: &mut Vec<FieldError>,
) -> HashMap<&'a str, &'a Volume> {
    let mut by_name = HashMap::new();
    for (i, volume) in volumes.iter().enumerate() {
        let volume_path = path.index(i);
        let name_path = volume_path.child("name");
        if volume.name.is_empty() {
            errors.push(FieldError::required(&name_path, ""));
        } else if let Err(message) = check_dns1123_label(&volume.name) {
            errors.push(FieldError::invalid(&name_path, &volume.name, message));
        } else if by_name.insert(volume.name.as_str(), volume).is_some() {
            errors.push(FieldError::duplicate(&name_path, &volume.name));
        }
        let sources = serde_json::to_value(volume)
            .ok()
            .and_then(|v| {
                v.as_object()
                    .map(|m| m.keys().filter(|k| *k != "name").count())
            })
            .unwrap_or_default();
        match sources {
            0 => errors.push(FieldError::required(
                &volume_path,
                "must specify a volume type",
            )),
            1 => {}
            _ => errors.push(FieldError::forbidden(
                &volume_path,
                "may not specify more than 1 volume type",
            )),
        }
    }
    by_name
}

fn not_supported_unless(value: &str, allowed: &[&str], path: &Path, errors: &mut Vec<FieldError>) {
    if !value.is_empty() && !allowed.contains(&value) {
        errors.push(FieldError::not_supported(path, value, allowed));
    }
}

fn validate_sidecar_container<'a>(
    sidecar: &'a SidecarContainer,
    path: &Path,
    init: bool,
    volumes: &HashMap<&str, &Volume>,
    names: &mut HashSet<&'a str>,
    errors: &mut Vec<FieldError>,
) {
    not_supported_unless(
        &sidecar.pod_inject_policy,
        &[api::BEFORE_APP_CONTAINER, api::AFTER_APP_CONTAINER],
        &path.child("podInjectPolicy"),
        errors,
    );
    let upgrade = &sidecar.upgrade_strategy;
    let upgrade_path = path.child("upgradeStrategy");
    not_supported_unless(
        &upgrade.upgrade_type,
        &[api::COLD_UPGRADE, api::HOT_UPGRADE],
        &upgrade_path.child("upgradeType"),
        errors,
    );
    if upgrade.upgrade_type == api::HOT_UPGRADE {
        if upgrade.hot_upgrade_empty_image.is_empty() {
            errors.push(FieldError::required(
                &upgrade_path.child("hotUpgradeEmptyImage"),
                "HotUpgrade needs the image of the idle twin container",
            ));
        }
        if sidecar.name.len() > NAME_MAX_LEN - 2 {
            errors.push(FieldError::invalid(
                &path.child("name"),
                &sidecar.name,
                "must be no more than 61 characters with HotUpgrade (the Pod gets <name>-1 and <name>-2)",
            ));
        }
    }
    let share_values = [
        api::SHARE_VOLUME_POLICY_ENABLED,
        api::SHARE_VOLUME_POLICY_DISABLED,
    ];
    not_supported_unless(
        &sidecar.share_volume_policy.type_,
        &share_values,
        &path.child("shareVolumePolicy").child("type"),
        errors,
    );
    if let Some(policy) = &sidecar.share_volume_device_policy {
        not_supported_unless(
            &policy.type_,
            &share_values,
            &path.child("shareVolumeDevicePolicy").child("type"),
            errors,
        );
    }
    for (j, transfer) in sidecar.transfer_env.iter().enumerate() {
        validate_transfer_env(transfer, &path.child("transferEnv").index(j), errors);
    }
    if let Some(policy) = &sidecar.resources_policy {
        let policy_path = path.child("resourcesPolicy");
        if init && !is_native_sidecar(sidecar) {
            errors.push(FieldError::forbidden(
                &policy_path,
                "resourcesPolicy is only supported for containers with RestartPolicy Always",
            ));
        }
        validate_resources_policy(policy, sidecar, &policy_path, errors);
    }
    validate_container(&sidecar.container, path, init, volumes, names, errors);
}

fn validate_transfer_env(
    transfer: &api::TransferEnvVar,
    path: &Path,
    errors: &mut Vec<FieldError>,
) {
    let from = transfer.source_container_name_from.as_ref();
    if transfer.source_container_name.is_empty() && from.is_none() {
        errors.push(FieldError::required(
            &path.child("sourceContainerName"),
            "one of sourceContainerName and sourceContainerNameFrom is required",
        ));
    }
    if let Some(from) = from {
        let from_path = path.child("sourceContainerNameFrom").child("fieldRef");
        match &from.field_ref {
            None => errors.push(FieldError::required(&from_path, "")),
            Some(field_ref) => validate_source_field_ref(field_ref, &from_path, errors),
        }
    }
    if transfer.env_name.is_empty() && transfer.env_names.is_empty() {
        errors.push(FieldError::required(
            &path.child("envName"),
            "one of envName and envNames is required",
        ));
    }
    for (k, name) in transfer.env_names.iter().enumerate() {
        if name.is_empty() {
            errors.push(FieldError::required(&path.child("envNames").index(k), ""));
        }
    }
}

/// Only `metadata.labels['<key>']` and `metadata.annotations['<key>']` of API version v1.
fn validate_source_field_ref(
    field_ref: &ObjectFieldSelector,
    path: &Path,
    errors: &mut Vec<FieldError>,
) {
    let Some((version, field_path)) = containers::field_ref_parts(field_ref, path, errors) else {
        return;
    };
    if version != "v1" {
        errors.push(FieldError::not_supported(
            &path.child("apiVersion"),
            version,
            &["v1"],
        ));
        return;
    }
    let field_path_at = path.child("fieldPath");
    if containers::validate_label_or_annotation_ref(field_path, &field_path_at, errors)
        != Some(true)
    {
        errors.push(FieldError::not_supported(
            &field_path_at,
            field_path,
            &["metadata.labels['<key>']", "metadata.annotations['<key>']"],
        ));
    }
}

fn validate_resources_policy(
    policy: &api::ResourcesPolicy,
    sidecar: &SidecarContainer,
    path: &Path,
    errors: &mut Vec<FieldError>,
) {
    let has_resources = sidecar.resources.as_ref().is_some_and(|r| {
        r.limits.as_ref().is_some_and(|l| !l.is_empty())
            || r.requests.as_ref().is_some_and(|l| !l.is_empty())
    });
    if has_resources {
        errors.push(FieldError::forbidden(
            path,
            "resourcesPolicy and resources cannot be configured together",
        ));
        return;
    }
    not_supported_unless(
        &policy.target_containers_mode,
        &[
            api::TARGET_CONTAINERS_MODE_SUM,
            api::TARGET_CONTAINERS_MODE_MAX,
        ],
        &path.child("targetContainersMode"),
        errors,
    );
    if policy.target_containers_mode.is_empty() {
        errors.push(FieldError::required(
            &path.child("targetContainersMode"),
            "sum or max",
        ));
    }
    let regex_path = path.child("targetContainersNameRegex");
    if policy.target_containers_name_regex.is_empty() {
        errors.push(FieldError::required(&regex_path, "invalid empty regex"));
    } else if let Err(error) = regex::Regex::new(&policy.target_containers_name_regex) {
        errors.push(FieldError::invalid(
            &regex_path,
            &policy.target_containers_name_regex,
            format!("invalid regex pattern: {error}"),
        ));
    }
    let expr_path = path.child("resourcesExpr");
    let expr = &policy.resources_expr;
    if expr.limits.is_none() && expr.requests.is_none() {
        errors.push(FieldError::required(
            &expr_path,
            "at least one of limits or requests must be configured",
        ));
        return;
    }
    for (name, exprs) in [("limits", &expr.limits), ("requests", &expr.requests)] {
        let Some(exprs) = exprs else { continue };
        for (resource, text) in [("cpu", &exprs.cpu), ("memory", &exprs.memory)] {
            let field = expr_path.child(name).child(resource);
            if text.is_empty() {
                continue;
            }
            if text.len() > resources_expr::MAX_EXPRESSION_LENGTH {
                errors.push(FieldError::too_long(
                    &field,
                    resources_expr::MAX_EXPRESSION_LENGTH,
                ));
                continue;
            }
            if let Err(message) = resources_expr::check(text, resource) {
                errors.push(FieldError::invalid(
                    &field,
                    text,
                    format!("invalid expression: {message}"),
                ));
            }
        }
    }
}

fn validate_patch_pod_metadata(
    patches: &[api::SidecarSetPatchPodMetadata],
    path: &Path,
    errors: &mut Vec<FieldError>,
) {
    let mut seen = HashSet::new();
    for (i, patch) in patches.iter().enumerate() {
        let patch_path = path.index(i);
        if patch.annotations.is_empty() {
            errors.push(FieldError::required(
                &patch_path.child("annotations"),
                "no annotations defined for SidecarSet",
            ));
        }
        not_supported_unless(
            &patch.patch_policy,
            &[
                api::PATCH_POLICY_RETAIN,
                api::PATCH_POLICY_OVERWRITE,
                api::PATCH_POLICY_MERGE_PATCH_JSON,
            ],
            &patch_path.child("patchPolicy"),
            errors,
        );
        for (key, value) in &patch.annotations {
            let key_path = patch_path.child("annotations").key(key);
            if let Err(message) = check_qualified_name(&key.to_lowercase()) {
                errors.push(FieldError::invalid(&key_path, key, message));
            }
            if !seen.insert(key.as_str()) {
                errors.push(FieldError::duplicate(&key_path, key));
            }
            if patch.patch_policy == api::PATCH_POLICY_MERGE_PATCH_JSON
                && serde_json::from_str::<serde_json::Value>(value).is_err()
            {
                errors.push(FieldError::invalid(
                    &key_path,
                    value,
                    "MergePatchJson needs a JSON value",
                ));
            }
        }
    }
}

/// The container's volume mounts and devices: each names a volume of the Pod, mount paths unique,
/// sub-paths relative.
fn validate_mounts(
    container: &Container,
    path: &Path,
    volumes: &HashMap<&str, &Volume>,
    errors: &mut Vec<FieldError>,
) {
    let mut mount_paths = HashSet::new();
    for (j, mount) in container.volume_mounts.iter().flatten().enumerate() {
        let mount_path = path.child("volumeMounts").index(j);
        if mount.name.is_empty() {
            errors.push(FieldError::required(&mount_path.child("name"), ""));
        } else if !volumes.contains_key(mount.name.as_str()) {
            errors.push(FieldError::invalid(
                &mount_path.child("name"),
                &mount.name,
                "no volume of this name in spec.volumes",
            ));
        }
        if mount.mount_path.is_empty() {
            errors.push(FieldError::required(&mount_path.child("mountPath"), ""));
        } else if !mount_paths.insert(mount.mount_path.as_str()) {
            errors.push(FieldError::invalid(
                &mount_path.child("mountPath"),
                &mount.mount_path,
                "must be unique",
            ));
        }
        let sub_path = mount.sub_path.as_deref().unwrap_or_default();
        if !sub_path.is_empty() {
            if mount
                .sub_path_expr
                .as_deref()
                .is_some_and(|e| !e.is_empty())
            {
                errors.push(FieldError::invalid(
                    &mount_path.child("subPathExpr"),
                    mount.sub_path_expr.as_deref().unwrap_or_default(),
                    "subPathExpr and subPath are mutually exclusive",
                ));
            }
            if sub_path.starts_with('/') || sub_path.split('/').any(|part| part == "..") {
                errors.push(FieldError::invalid(
                    &mount_path.child("subPath"),
                    sub_path,
                    "must be a relative path without '..'",
                ));
            }
        }
        not_supported_unless(
            mount.mount_propagation.as_deref().unwrap_or_default(),
            &["None", "HostToContainer", "Bidirectional"],
            &mount_path.child("mountPropagation"),
            errors,
        );
        not_supported_unless(
            mount.recursive_read_only.as_deref().unwrap_or_default(),
            &["Disabled", "IfPossible", "Enabled"],
            &mount_path.child("recursiveReadOnly"),
            errors,
        );
    }
    for (j, device) in container.volume_devices.iter().flatten().enumerate() {
        let device_path = path.child("volumeDevices").index(j);
        if device.name.is_empty() {
            errors.push(FieldError::required(&device_path.child("name"), ""));
        } else if !volumes.contains_key(device.name.as_str()) {
            errors.push(FieldError::invalid(
                &device_path.child("name"),
                &device.name,
                "no volume of this name in spec.volumes",
            ));
        }
        if device.device_path.is_empty() {
            errors.push(FieldError::required(&device_path.child("devicePath"), ""));
        }
    }
}

/// The core container checks upstream gets from validating the sidecars inside a fake Pod.
fn validate_container<'a>(
    container: &'a Container,
    path: &Path,
    init: bool,
    volumes: &HashMap<&str, &Volume>,
    names: &mut HashSet<&'a str>,
    errors: &mut Vec<FieldError>,
) {
    containers::validate_name_and_image(container, path, names, true, errors);
    not_supported_unless(
        container.image_pull_policy.as_deref().unwrap_or_default(),
        &["Always", "IfNotPresent", "Never"],
        &path.child("imagePullPolicy"),
        errors,
    );
    not_supported_unless(
        container
            .termination_message_policy
            .as_deref()
            .unwrap_or_default(),
        &["File", "FallbackToLogsOnError"],
        &path.child("terminationMessagePolicy"),
        errors,
    );
    let native = init && is_native_sidecar(container);
    if let Some(policy) = &container.restart_policy {
        if !init {
            errors.push(FieldError::forbidden(
                &path.child("restartPolicy"),
                "may not be set for non-init containers",
            ));
        } else if policy != "Always" {
            errors.push(FieldError::not_supported(
                &path.child("restartPolicy"),
                policy,
                &["Always"],
            ));
        }
    }

    containers::validate_container(container, path, errors);

    validate_resources(container, &path.child("resources"), errors);

    validate_mounts(container, path, volumes, errors);

    let probes = [
        ("livenessProbe", &container.liveness_probe, true),
        ("readinessProbe", &container.readiness_probe, false),
        ("startupProbe", &container.startup_probe, true),
    ];
    for (name, probe, success_must_be_one) in probes {
        let Some(probe) = probe else { continue };
        let probe_path = path.child(name);
        if init && !native {
            errors.push(FieldError::forbidden(
                &probe_path,
                "may not be set for init containers without restartPolicy=Always",
            ));
            continue;
        }
        validate_probe(probe, &probe_path, success_must_be_one, errors);
    }
    if let Some(lifecycle) = &container.lifecycle {
        let lifecycle_path = path.child("lifecycle");
        if init && !native {
            errors.push(FieldError::forbidden(
                &lifecycle_path,
                "may not be set for init containers without restartPolicy=Always",
            ));
        } else {
            for (name, handler) in [
                ("postStart", &lifecycle.post_start),
                ("preStop", &lifecycle.pre_stop),
            ] {
                if let Some(handler) = handler {
                    validate_handler(handler, &lifecycle_path.child(name), errors);
                }
            }
        }
    }
}

fn validate_resources(container: &Container, path: &Path, errors: &mut Vec<FieldError>) {
    let Some(resources) = &container.resources else {
        return;
    };
    let limits = parse_resource_list(&resources.limits, &path.child("limits"), errors);
    let requests = parse_resource_list(&resources.requests, &path.child("requests"), errors);
    for (name, request) in &requests {
        if let Some(limit) = limits.get(name)
            && request.cmp_value(limit).is_gt()
        {
            errors.push(FieldError::invalid(
                &path.child("requests").key(name),
                request.go_string(),
                format!(
                    "must be less than or equal to {name} limit of {}",
                    limit.go_string()
                ),
            ));
        }
    }
}

fn parse_resource_list<'a>(
    list: &'a Option<BTreeMap<String, K8sQuantity>>,
    path: &Path,
    errors: &mut Vec<FieldError>,
) -> BTreeMap<&'a str, Quantity> {
    let mut parsed = BTreeMap::new();
    for (name, value) in list.iter().flatten() {
        let value_path = path.key(name);
        match Quantity::parse(&value.0) {
            Err(message) => errors.push(FieldError::invalid(&value_path, &value.0, message)),
            Ok(q) if q.is_negative() => errors.push(FieldError::invalid(
                &value_path,
                &value.0,
                "must be greater than or equal to 0",
            )),
            Ok(q) => {
                parsed.insert(name.as_str(), q);
            }
        }
    }
    parsed
}

fn validate_probe(
    probe: &Probe,
    path: &Path,
    success_must_be_one: bool,
    errors: &mut Vec<FieldError>,
) {
    let handlers = [
        probe.exec.is_some(),
        probe.http_get.is_some(),
        probe.tcp_socket.is_some(),
        probe.grpc.is_some(),
    ];
    match handlers.into_iter().filter(|set| *set).count() {
        0 => errors.push(FieldError::required(path, "must specify a handler type")),
        1 => {}
        _ => errors.push(FieldError::forbidden(
            path,
            "may not specify more than 1 handler type",
        )),
    }
    for (name, value) in [
        ("initialDelaySeconds", probe.initial_delay_seconds),
        ("timeoutSeconds", probe.timeout_seconds),
        ("periodSeconds", probe.period_seconds),
        ("successThreshold", probe.success_threshold),
        ("failureThreshold", probe.failure_threshold),
    ] {
        if let Some(value) = value {
            validate_non_negative(value.into(), &path.child(name), errors);
        }
    }
    if success_must_be_one && probe.success_threshold.is_some_and(|v| v != 1) {
        errors.push(FieldError::invalid(
            &path.child("successThreshold"),
            probe.success_threshold.unwrap_or_default(),
            "must be 1",
        ));
    }
}

fn validate_handler(handler: &LifecycleHandler, path: &Path, errors: &mut Vec<FieldError>) {
    let set = [
        handler.exec.is_some(),
        handler.http_get.is_some(),
        handler.tcp_socket.is_some(),
        handler.sleep.is_some(),
    ];
    match set.into_iter().filter(|s| *s).count() {
        0 => errors.push(FieldError::required(path, "must specify a handler type")),
        1 => {}
        _ => errors.push(FieldError::forbidden(
            path,
            "may not specify more than 1 handler type",
        )),
    }
}
