//! The checks Kubernetes' Pod validation makes on one container's ports, environment and security
//! context (`pkg/apis/core/validation`, with OpenKruise's options: environment variable names are
//! not relaxed, `hostUsers` is true), shared by the kinds whose webhooks run them on containers
//! they carry: SidecarSet's sidecars and EphemeralJob's ephemeral containers.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EnvFromSource, EnvVar, ObjectFieldSelector, SecurityContext,
};

use super::{check_dns1123_label, check_dns1123_subdomain, check_qualified_name};
use crate::field::{FieldError, Path};

/// A container's name (required, a DNS-1123 label, not among `names`, where it is added) and image
/// (required; in a Pod, not a template, also without leading or trailing white space).
pub fn validate_name_and_image<'a>(
    container: &'a Container,
    path: &Path,
    names: &mut HashSet<&'a str>,
    in_pod: bool,
    errors: &mut Vec<FieldError>,
) {
    let name_path = path.child("name");
    if container.name.is_empty() {
        errors.push(FieldError::required(&name_path, ""));
    } else if let Err(message) = check_dns1123_label(&container.name) {
        errors.push(FieldError::invalid(&name_path, &container.name, message));
    } else if !names.insert(container.name.as_str()) {
        errors.push(FieldError::duplicate(&name_path, &container.name));
    }
    let image = container.image.as_deref().unwrap_or_default();
    if image.is_empty() {
        errors.push(FieldError::required(&path.child("image"), ""));
    } else if in_pod && image.trim() != image {
        errors.push(FieldError::invalid(
            &path.child("image"),
            image,
            "must not have leading or trailing whitespace",
        ));
    }
}

/// The ports, env, envFrom and securityContext of `container` (at `path`).
pub fn validate_container(container: &Container, path: &Path, errors: &mut Vec<FieldError>) {
    validate_ports(
        container.ports.as_deref().unwrap_or_default(),
        &path.child("ports"),
        errors,
    );
    validate_env(
        container.env.as_deref().unwrap_or_default(),
        &path.child("env"),
        errors,
    );
    validate_env_from(
        container.env_from.as_deref().unwrap_or_default(),
        &path.child("envFrom"),
        errors,
    );
    if let Some(context) = &container.security_context {
        validate_security_context(context, &path.child("securityContext"), errors);
    }
}

/// An environment variable name (or envFrom prefix): `[-._a-zA-Z][-._a-zA-Z0-9]*`, not `.`, `..`
/// or starting with `..` (Kubernetes' `IsEnvVarName`).
pub fn check_env_var_name(name: &str) -> Result<(), String> {
    let ok = name.bytes().enumerate().all(|(i, b)| {
        b.is_ascii_alphabetic() || matches!(b, b'-' | b'.' | b'_') || (i > 0 && b.is_ascii_digit())
    }) && !name.is_empty();
    if !ok {
        return Err("a valid environment variable name must consist of alphabetic characters, digits, '_', '-', \
                    or '.', and must not start with a digit"
            .into());
    }
    check_not_chdir(name)
}

/// Kubernetes' `hasChDirPrefix`.
pub fn check_not_chdir(value: &str) -> Result<(), String> {
    match value {
        "." => Err("must not be '.'".into()),
        ".." => Err("must not be '..'".into()),
        v if v.starts_with("..") => Err("must not start with '..'".into()),
        _ => Ok(()),
    }
}

/// An IANA service name: at most 15 lowercase alphanumerics or '-', with a letter, no '--', no '-'
/// at an end.
pub fn check_port_name(name: &str) -> Result<(), String> {
    let ok = name.len() <= 15
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && name.bytes().any(|b| b.is_ascii_lowercase())
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--");
    if ok {
        Ok(())
    } else {
        Err("must be no more than 15 characters of lowercase alphanumerics or '-', contain a letter, and not start, \
             end or repeat '-'"
            .into())
    }
}

/// Port numbers, protocols (unset is defaulted) and unique valid names.
pub fn validate_ports(ports: &[ContainerPort], path: &Path, errors: &mut Vec<FieldError>) {
    let mut names = HashSet::new();
    for (j, port) in ports.iter().enumerate() {
        let port_path = path.index(j);
        if !(1..=65535).contains(&port.container_port) {
            errors.push(FieldError::invalid(
                &port_path.child("containerPort"),
                port.container_port,
                "must be between 1 and 65535, inclusive",
            ));
        }
        if let Some(host_port) = port.host_port
            && !(0..=65535).contains(&host_port)
        {
            errors.push(FieldError::invalid(
                &port_path.child("hostPort"),
                host_port,
                "must be between 1 and 65535, inclusive",
            ));
        }
        if let Some(protocol) = port.protocol.as_deref().filter(|p| !p.is_empty())
            && !["TCP", "UDP", "SCTP"].contains(&protocol)
        {
            errors.push(FieldError::not_supported(
                &port_path.child("protocol"),
                protocol,
                &["SCTP", "TCP", "UDP"],
            ));
        }
        if let Some(name) = port.name.as_deref().filter(|n| !n.is_empty()) {
            if let Err(message) = check_port_name(name) {
                errors.push(FieldError::invalid(&port_path.child("name"), name, message));
            } else if !names.insert(name) {
                errors.push(FieldError::duplicate(&port_path.child("name"), name));
            }
        }
    }
}

/// The downward API fields an environment variable may read.
const ENV_FIELD_PATHS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
];

/// The container resources an environment variable may read (besides hugepages).
const ENV_RESOURCE_FIELDS: &[&str] = &[
    "limits.cpu",
    "limits.ephemeral-storage",
    "limits.memory",
    "requests.cpu",
    "requests.ephemeral-storage",
    "requests.memory",
];

/// Kubernetes' `ValidateEnv`: names, and one well-formed source for a `valueFrom`.
pub fn validate_env(env: &[EnvVar], path: &Path, errors: &mut Vec<FieldError>) {
    for (j, var) in env.iter().enumerate() {
        let var_path = path.index(j);
        if var.name.is_empty() {
            errors.push(FieldError::required(&var_path.child("name"), ""));
        } else if let Err(message) = check_env_var_name(&var.name) {
            errors.push(FieldError::invalid(
                &var_path.child("name"),
                &var.name,
                message,
            ));
        }
        let Some(source) = &var.value_from else {
            continue;
        };
        let from_path = var_path.child("valueFrom");
        let mut sources = 0;
        if let Some(field_ref) = &source.field_ref {
            sources += 1;
            validate_env_field_ref(field_ref, &from_path.child("fieldRef"), errors);
        }
        if let Some(resource_ref) = &source.resource_field_ref {
            sources += 1;
            let resource_path = from_path.child("resourceFieldRef").child("resource");
            let resource = resource_ref.resource.as_str();
            if resource.is_empty() {
                errors.push(FieldError::required(&resource_path, ""));
            } else if !ENV_RESOURCE_FIELDS.contains(&resource)
                && !resource.starts_with("requests.hugepages-")
                && !resource.starts_with("limits.hugepages-")
            {
                errors.push(FieldError::not_supported(
                    &resource_path,
                    resource,
                    ENV_RESOURCE_FIELDS,
                ));
            }
        }
        let key_refs = [
            source
                .config_map_key_ref
                .as_ref()
                .map(|r| ("configMapKeyRef", r.name.as_str(), r.key.as_str())),
            source
                .secret_key_ref
                .as_ref()
                .map(|r| ("secretKeyRef", r.name.as_str(), r.key.as_str())),
        ];
        for (field, name, key) in key_refs.into_iter().flatten() {
            sources += 1;
            let ref_path = from_path.child(field);
            if let Err(message) = check_dns1123_subdomain(name) {
                errors.push(FieldError::invalid(&ref_path.child("name"), name, message));
            }
            if key.is_empty() {
                errors.push(FieldError::required(&ref_path.child("key"), ""));
            } else if let Err(message) = check_config_key(key) {
                errors.push(FieldError::invalid(&ref_path.child("key"), key, message));
            }
        }
        if let Some(file_ref) = &source.file_key_ref {
            sources += 1;
            if file_ref.key.is_empty() {
                errors.push(FieldError::required(
                    &from_path.child("fileKeyRef").child("key"),
                    "",
                ));
            }
        }
        if sources == 0 {
            errors.push(FieldError::invalid(
                &from_path,
                "",
                "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`",
            ));
        } else if var.value.as_deref().is_some_and(|v| !v.is_empty()) {
            errors.push(FieldError::invalid(
                &from_path,
                "",
                "may not be specified when `value` is not empty",
            ));
        } else if sources > 1 {
            errors.push(FieldError::invalid(
                &from_path,
                "",
                "may not have more than one field specified at a time",
            ));
        }
    }
}

/// A Secret or ConfigMap key: `[-._a-zA-Z0-9]+`, at most 253 characters, not `.`, `..` or
/// starting with `..` (Kubernetes' `IsConfigMapKey`).
pub fn check_config_key(key: &str) -> Result<(), String> {
    if key.is_empty() || key.len() > 253 {
        return Err("must be between 1 and 253 characters".into());
    }
    if !key
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
    {
        return Err(
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.'".into(),
        );
    }
    check_not_chdir(key)
}

fn validate_env_field_ref(
    field_ref: &ObjectFieldSelector,
    path: &Path,
    errors: &mut Vec<FieldError>,
) {
    let Some((version, field_path)) = field_ref_parts(field_ref, path, errors) else {
        return;
    };
    if version != "v1" {
        errors.push(FieldError::invalid(
            &path.child("fieldPath"),
            field_path,
            format!("error converting fieldPath: unsupported pod version: {version}"),
        ));
        return;
    }
    match validate_label_or_annotation_ref(field_path, path, errors) {
        Some(true) => {}
        Some(false) => {
            let prefix = field_path.split_once("['").map_or(field_path, |(p, _)| p);
            errors.push(FieldError::invalid(
                path,
                prefix,
                "does not support subscript",
            ))
        }
        None if !ENV_FIELD_PATHS.contains(&field_path) => errors.push(FieldError::not_supported(
            &path.child("fieldPath"),
            field_path,
            ENV_FIELD_PATHS,
        )),
        None => {}
    }
}

/// A fieldRef's `apiVersion` and `fieldPath`, each required (the first one missing is reported).
pub fn field_ref_parts<'a>(
    field_ref: &'a ObjectFieldSelector,
    path: &Path,
    errors: &mut Vec<FieldError>,
) -> Option<(&'a str, &'a str)> {
    let version = field_ref.api_version.as_deref().unwrap_or_default();
    if version.is_empty() {
        errors.push(FieldError::required(&path.child("apiVersion"), ""));
        return None;
    }
    if field_ref.field_path.is_empty() {
        errors.push(FieldError::required(&path.child("fieldPath"), ""));
        return None;
    }
    Some((version, field_ref.field_path.as_str()))
}

/// A subscripted field path (`metadata.labels['<key>']`): `None` when it is not one, `Some(false)`
/// when it subscripts something other than the labels or annotations, `Some(true)` when it is one
/// of those, its key checked (an annotation's in lower case, as Kubernetes does).
pub fn validate_label_or_annotation_ref(
    field_path: &str,
    path: &Path,
    errors: &mut Vec<FieldError>,
) -> Option<bool> {
    let (prefix, key) = field_path
        .strip_suffix("']")
        .and_then(|rest| rest.split_once("['"))?;
    let checked = match prefix {
        "metadata.labels" => key.to_owned(),
        "metadata.annotations" => key.to_lowercase(),
        _ => return Some(false),
    };
    if let Err(message) = check_qualified_name(&checked) {
        errors.push(FieldError::invalid(path, key, message));
    }
    Some(true)
}

/// Kubernetes' `ValidateEnvFrom`: prefixes, and exactly one named source each.
pub fn validate_env_from(sources: &[EnvFromSource], path: &Path, errors: &mut Vec<FieldError>) {
    for (j, source) in sources.iter().enumerate() {
        let source_path = path.index(j);
        if let Some(prefix) = source.prefix.as_deref().filter(|p| !p.is_empty())
            && let Err(message) = check_env_var_name(prefix)
        {
            errors.push(FieldError::invalid(
                &source_path.child("prefix"),
                prefix,
                message,
            ));
        }
        let refs = [
            source
                .config_map_ref
                .as_ref()
                .map(|r| ("configMapRef", r.name.as_str())),
            source
                .secret_ref
                .as_ref()
                .map(|r| ("secretRef", r.name.as_str())),
        ];
        let mut count = 0;
        for (field, name) in refs.into_iter().flatten() {
            count += 1;
            let name_path = source_path.child(field).child("name");
            if name.is_empty() {
                errors.push(FieldError::required(&name_path, ""));
            } else if let Err(message) = check_dns1123_subdomain(name) {
                errors.push(FieldError::invalid(&name_path, name, message));
            }
        }
        match count {
            0 => errors.push(FieldError::invalid(
                &source_path,
                "",
                "must specify one of: `configMapRef` or `secretRef`",
            )),
            1 => {}
            _ => errors.push(FieldError::invalid(
                &source_path,
                "",
                "may not have more than one field specified at a time",
            )),
        }
    }
}

/// Kubernetes' `ValidateSecurityContext` with `hostUsers` true (what OpenKruise passes): user and
/// group IDs, procMount, seccomp and AppArmor profiles, and no privilege escalation refused while
/// privileges are asked for.
pub fn validate_security_context(
    context: &SecurityContext,
    path: &Path,
    errors: &mut Vec<FieldError>,
) {
    for (field, id) in [
        ("runAsUser", context.run_as_user),
        ("runAsGroup", context.run_as_group),
    ] {
        if let Some(id) = id
            && !(0..=i64::from(i32::MAX)).contains(&id)
        {
            errors.push(FieldError::invalid(
                &path.child(field),
                id,
                format!("must be between 0 and {}, inclusive", i32::MAX),
            ));
        }
    }
    if let Some(proc_mount) = context.proc_mount.as_deref() {
        let proc_path = path.child("procMount");
        match proc_mount {
            "Default" => {}
            "Unmasked" => errors.push(FieldError::invalid(
                &proc_path,
                proc_mount,
                "`hostUsers` must be false to use `Unmasked`",
            )),
            other => errors.push(FieldError::not_supported(
                &proc_path,
                other,
                &["Default", "Unmasked"],
            )),
        }
    }
    let profiles = [
        (
            "seccompProfile",
            "seccomp",
            context
                .seccomp_profile
                .as_ref()
                .map(|p| (p.type_.as_str(), p.localhost_profile.as_deref())),
        ),
        (
            "appArmorProfile",
            "AppArmor",
            context
                .app_armor_profile
                .as_ref()
                .map(|p| (p.type_.as_str(), p.localhost_profile.as_deref())),
        ),
    ];
    for (field, what, profile) in profiles {
        if let Some((type_, localhost)) = profile {
            validate_profile(type_, localhost, &path.child(field), what, errors);
        }
    }
    if context.allow_privilege_escalation == Some(false) {
        if context.privileged == Some(true) {
            errors.push(FieldError::invalid(
                path,
                "",
                "cannot set `allowPrivilegeEscalation` to false and `privileged` to true",
            ));
        }
        let adds = context.capabilities.as_ref().and_then(|c| c.add.as_ref());
        if adds.is_some_and(|add| add.iter().any(|c| c == "CAP_SYS_ADMIN")) {
            errors.push(FieldError::invalid(
                path,
                "",
                "cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN",
            ));
        }
    }
}

/// A seccomp or AppArmor profile: a known type; a localhost profile exactly when the type is
/// Localhost.
fn validate_profile(
    type_: &str,
    localhost: Option<&str>,
    path: &Path,
    what: &str,
    errors: &mut Vec<FieldError>,
) {
    let type_path = path.child("type");
    let localhost_path = path.child("localhostProfile");
    match type_ {
        "Localhost" => match localhost.map(str::trim) {
            None | Some("") => errors.push(FieldError::required(
                &localhost_path,
                format!("must be set when {what} type is Localhost"),
            )),
            Some(trimmed) if localhost != Some(trimmed) => errors.push(FieldError::invalid(
                &localhost_path,
                localhost.unwrap_or_default(),
                "must not be padded with whitespace",
            )),
            Some(_) => {}
        },
        "RuntimeDefault" | "Unconfined" => {
            if let Some(localhost) = localhost {
                errors.push(FieldError::invalid(
                    &localhost_path,
                    localhost,
                    format!("can only be set when {what} type is Localhost"),
                ));
            }
        }
        "" => errors.push(FieldError::required(
            &type_path,
            format!("type is required when {what} profile is set"),
        )),
        other => errors.push(FieldError::not_supported(
            &type_path,
            other,
            &["Localhost", "RuntimeDefault", "Unconfined"],
        )),
    }
}
