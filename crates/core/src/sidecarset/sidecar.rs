//! One sidecar as it goes into the Pod: the SidecarSet's container plus the marker env, the env vars it
//! takes from app containers (`transferEnv`), and the app containers' volume mounts and devices when it
//! shares them (`shareVolumePolicy`, `shareVolumeDevicePolicy`).

use std::collections::{BTreeMap, BTreeSet, HashSet};

use k8s_openapi::api::core::v1::{Container, EnvVar, Pod, VolumeDevice, VolumeMount};
use kruise_api::sidecarset::ENV_IS_INJECTED;
use kruise_api::sidecarset::v1beta1::{
    SHARE_VOLUME_POLICY_ENABLED, SidecarContainer, TransferEnvVar,
};
use kruise_api::validation::check_qualified_name;

/// The sidecar's container, ready to be placed into the Pod. `pod` is the Pod as submitted: sidecars
/// share and copy from its app containers only, never from each other.
pub(super) fn build(sidecar: &SidecarContainer, pod: &Pod) -> Container {
    let app = app_containers(pod);
    let mut container = sidecar.container.clone();

    let (shared_mounts, subpath_envs) =
        if sidecar.share_volume_policy.type_ == SHARE_VOLUME_POLICY_ENABLED {
            shared_mounts(&app)
        } else {
            (Vec::new(), Vec::new())
        };
    let mut copied_env = transferred_env(&sidecar.transfer_env, pod);
    merge_env(&mut copied_env, subpath_envs);

    // Mounts first: device paths below are checked against the merged mounts, as upstream does.
    let mounts = merge_mounts(&container, shared_mounts);
    set_list(&mut container.volume_mounts, mounts);

    let mut env = container.env.take().unwrap_or_default();
    // Upstream appends the marker unconditionally; the upgrade controller and later injections read it
    // to tell sidecars from app containers.
    env.push(EnvVar {
        name: ENV_IS_INJECTED.into(),
        value: Some("true".into()),
        value_from: None,
    });
    // The sidecar's own env wins over copied values.
    merge_env(&mut env, copied_env);
    container.env = Some(env);

    if sidecar
        .share_volume_device_policy
        .as_ref()
        .is_some_and(|p| p.type_ == SHARE_VOLUME_POLICY_ENABLED)
    {
        let shared: Vec<VolumeDevice> = app
            .iter()
            .flat_map(|c| c.volume_devices.iter().flatten().cloned())
            .collect();
        let devices = merge_devices(&container, shared);
        set_list(&mut container.volume_devices, devices);
    }
    container
}

/// Whether a Pod container was put there by an injection (first `IS_INJECTED` value is `"true"`).
pub(super) fn is_injected(container: &Container) -> bool {
    container
        .env
        .iter()
        .flatten()
        .find(|e| e.name == ENV_IS_INJECTED)
        .and_then(|e| e.value.as_deref())
        == Some("true")
}

/// The Pod's app containers: its containers minus earlier-injected sidecars. Init containers are not
/// shared from (upstream neither).
fn app_containers(pod: &Pod) -> Vec<&Container> {
    pod.spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .filter(|c| !is_injected(c))
        .collect()
}

/// Every volume mount of the app containers, verbatim (subPath, subPathExpr, readOnly and propagation
/// included, the service-account token mount too: the sidecar needs the same files at the same
/// paths), plus the env vars their `subPathExpr`s reference, taken from the same container so that the
/// expression expands to the same directory in the sidecar.
fn shared_mounts(app: &[&Container]) -> (Vec<VolumeMount>, Vec<EnvVar>) {
    let mut mounts = Vec::new();
    let mut envs = Vec::new();
    for container in app {
        for mount in container.volume_mounts.iter().flatten() {
            mounts.push(mount.clone());
            for name in subpath_expr_vars(mount.sub_path_expr.as_deref().unwrap_or_default()) {
                // The first definition, as the kubelet's lookup of a duplicated name would find.
                match container.env.iter().flatten().find(|e| e.name == name) {
                    Some(env) => envs.push(env.clone()),
                    None => continue,
                }
            }
        }
    }
    (mounts, envs)
}

/// The names in `$(NAME)` references of a subPathExpr, NAME being `[-._a-zA-Z][-._a-zA-Z0-9]*`.
fn subpath_expr_vars(expr: &str) -> Vec<&str> {
    let is_first = |b: u8| b.is_ascii_alphabetic() || matches!(b, b'-' | b'.' | b'_');
    let is_rest = |b: u8| is_first(b) || b.is_ascii_digit();
    let bytes = expr.as_bytes();
    let mut names = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i..].starts_with(b"$(") && bytes.get(i + 2).copied().is_some_and(is_first) {
            let start = i + 2;
            let mut end = start + 1;
            while bytes.get(end).copied().is_some_and(is_rest) {
                end += 1;
            }
            if bytes.get(end) == Some(&b')') {
                // ASCII-only bounds, so the slice is on char boundaries.
                names.push(&expr[start..end]);
                i = end + 1;
                continue;
            }
        }
        i += 1;
    }
    names
}

/// The env vars `transferEnv` copies: for each entry, the named vars (envName and envNames, in name
/// order) of the source container, copied whole (a `valueFrom` such as a downward-API fieldRef or a
/// secretKeyRef is copied as a reference). Missing containers or vars are skipped: a sidecar that can
/// live without an optional var should not block the Pod.
fn transferred_env(transfers: &[TransferEnvVar], pod: &Pod) -> Vec<EnvVar> {
    // (container, var) -> value; a var defined twice in one container resolves to its last definition.
    let mut pod_env: BTreeMap<(&str, &str), &EnvVar> = BTreeMap::new();
    for container in pod.spec.iter().flat_map(|s| s.containers.iter()) {
        for env in container.env.iter().flatten() {
            pod_env.insert((container.name.as_str(), env.name.as_str()), env);
        }
    }
    let mut out = Vec::new();
    for transfer in transfers {
        let names: BTreeSet<&str> = std::iter::once(transfer.env_name.as_str())
            .filter(|n| !n.is_empty())
            .chain(transfer.env_names.iter().map(String::as_str))
            .collect();
        let from_field = transfer
            .source_container_name_from
            .as_ref()
            .and_then(|s| s.field_ref.as_ref());
        let source = match from_field {
            Some(field_ref) => match container_name_from_field(&field_ref.field_path, pod) {
                Some(name) => name,
                None => continue,
            },
            None => transfer.source_container_name.clone(),
        };
        for name in names {
            if let Some(env) = pod_env.get(&(source.as_str(), name)) {
                out.push((*env).clone());
            }
        }
    }
    out
}

/// Resolves `metadata.labels['k']` or `metadata.annotations['k']` on the Pod (a missing key is the
/// empty name, which no container has). Any other path, or an invalid key, gives `None`.
fn container_name_from_field(field_path: &str, pod: &Pod) -> Option<String> {
    let inner = field_path.strip_suffix("']")?;
    let (path, key) = inner.split_once("['")?;
    let source = match path {
        // Annotation keys are validated case-insensitively (upstream).
        "metadata.annotations" => {
            check_qualified_name(&key.to_lowercase()).ok()?;
            pod.metadata.annotations.as_ref()
        }
        "metadata.labels" => {
            check_qualified_name(key).ok()?;
            pod.metadata.labels.as_ref()
        }
        _ => return None,
    };
    Some(source.and_then(|m| m.get(key)).cloned().unwrap_or_default())
}

/// Appends the vars of `extra` whose names are not defined yet (first definition wins).
pub(super) fn merge_env(env: &mut Vec<EnvVar>, extra: Vec<EnvVar>) {
    let mut names: HashSet<String> = env.iter().map(|e| e.name.clone()).collect();
    for var in extra {
        if names.insert(var.name.clone()) {
            env.push(var);
        }
    }
}

/// The container's mounts plus the shared ones whose path is still free (a path the sidecar mounts or
/// uses for a device is its own; among app containers the first one to use a path wins).
fn merge_mounts(container: &Container, shared: Vec<VolumeMount>) -> Vec<VolumeMount> {
    let device_paths = container
        .volume_devices
        .iter()
        .flatten()
        .map(|d| d.device_path.as_str());
    merge_by_path(
        container.volume_mounts.as_deref(),
        device_paths,
        shared,
        |m| &m.mount_path,
    )
}

/// The same for devices, by device path.
fn merge_devices(container: &Container, shared: Vec<VolumeDevice>) -> Vec<VolumeDevice> {
    let mount_paths = container
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| m.mount_path.as_str());
    merge_by_path(
        container.volume_devices.as_deref(),
        mount_paths,
        shared,
        |d| &d.device_path,
    )
}

/// `own` plus the items of `shared` whose path is neither in `own`, nor among `other_paths`, nor taken
/// by an earlier shared item.
fn merge_by_path<'a, T: Clone>(
    own: Option<&[T]>,
    other_paths: impl Iterator<Item = &'a str>,
    shared: Vec<T>,
    path: impl Fn(&T) -> &String,
) -> Vec<T> {
    let mut merged: Vec<T> = own.unwrap_or_default().to_vec();
    let mut paths: HashSet<String> = merged.iter().map(|m| path(m).clone()).collect();
    paths.extend(other_paths.map(str::to_string));
    for item in shared {
        if paths.insert(path(&item).clone()) {
            merged.push(item);
        }
    }
    merged
}

/// An empty list stays absent, so an untouched field does not appear in the diff.
fn set_list<T>(field: &mut Option<Vec<T>>, list: Vec<T>) {
    *field = (!list.is_empty()).then_some(list);
}

#[cfg(test)]
mod unit {
    use super::subpath_expr_vars;

    #[test]
    fn subpath_expr_references() {
        assert_eq!(
            subpath_expr_vars("foo/$(POD_NAME)/$(OD_NAME)/conf"),
            ["POD_NAME", "OD_NAME"]
        );
        assert_eq!(subpath_expr_vars("foo"), Vec::<&str>::new());
        assert_eq!(subpath_expr_vars("$($(A)"), ["A"]);
        assert_eq!(subpath_expr_vars("$(1A)/$(a-b.c_9)"), ["a-b.c_9"]);
        assert_eq!(subpath_expr_vars("$(UNCLOSED"), Vec::<&str>::new());
    }
}
