//! Validation helpers shared by every workload: names, labels, selectors and Pod templates.

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use crate::field::{FieldError, Path};

pub mod containers;

/// A DNS-1123 label: lowercase alphanumerics and '-', starting and ending alphanumeric, at most 63.
pub fn check_dns1123_label(value: &str) -> Result<(), String> {
    let ok = !value.is_empty()
        && value.len() <= 63
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !value.starts_with('-')
        && !value.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must \
             start and end with an alphanumeric character (at most 63 characters)"
            .into())
    }
}

/// A DNS-1123 subdomain (an object name): at most 253 characters, dot-separated DNS-1123 labels.
pub fn check_dns1123_subdomain(value: &str) -> Result<(), String> {
    if value.len() <= 253
        && value
            .split('.')
            .all(|part| check_dns1123_label(part).is_ok())
    {
        Ok(())
    } else {
        Err("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', \
             and must start and end with an alphanumeric character (at most 253 characters)"
            .into())
    }
}

/// The group of an `apiVersion` (`apps/v1` → `apps`, `v1` → ``).
pub fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(group, _)| group)
}

/// `group/version` or `version` (Kubernetes' `schema.ParseGroupVersion`): at most one `/`, with
/// something on both sides of it.
pub fn check_group_version(value: &str) -> Result<(), String> {
    match value.split('/').collect::<Vec<_>>().as_slice() {
        [_] => Ok(()),
        [group, version] if !group.is_empty() && !version.is_empty() => Ok(()),
        _ => Err(format!("unexpected GroupVersion string: {value}")),
    }
}

fn is_name_part(part: &str) -> bool {
    !part.is_empty()
        && part.len() <= 63
        && part
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && part
            .as_bytes()
            .first()
            .is_some_and(u8::is_ascii_alphanumeric)
        && part
            .as_bytes()
            .last()
            .is_some_and(u8::is_ascii_alphanumeric)
}

/// A qualified name (label key, finalizer): `[prefix/]name`, prefix a DNS subdomain.
pub fn check_qualified_name(value: &str) -> Result<(), String> {
    let (prefix, name) = match value.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, value),
    };
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|label| check_dns1123_label(label).is_ok())
    });
    if prefix_ok && is_name_part(name) && !name.contains('/') {
        Ok(())
    } else {
        Err("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with \
             an alphanumeric character (at most 63 characters), with an optional DNS subdomain prefix and '/'"
            .into())
    }
}

/// A label value: empty, or a name part.
pub fn check_label_value(value: &str) -> Result<(), String> {
    if value.is_empty() || is_name_part(value) {
        Ok(())
    } else {
        Err("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', \
             and must start and end with an alphanumeric character (at most 63 characters)"
            .into())
    }
}

/// Label keys and values.
pub fn validate_labels(
    labels: &BTreeMap<String, String>,
    path: &Path,
    errors: &mut Vec<FieldError>,
) {
    for (key, value) in labels {
        if let Err(message) = check_qualified_name(key) {
            errors.push(FieldError::invalid(&path.key(key), key, message));
        }
        if let Err(message) = check_label_value(value) {
            errors.push(FieldError::invalid(&path.key(key), value, message));
        }
    }
}

/// The values rule of the set operators of a selector requirement, as label and node selectors share it:
/// `In` and `NotIn` need values, `Exists` and `DoesNotExist` take none (`path` is the requirement's
/// `values`). `None` when the rule holds or `operator` is another one.
pub(crate) fn set_operator_values_error(
    operator: &str,
    values: &[String],
    path: &Path,
) -> Option<FieldError> {
    match operator {
        "In" | "NotIn" if values.is_empty() => Some(FieldError::required(
            path,
            "must be specified when `operator` is 'In' or 'NotIn'",
        )),
        "Exists" | "DoesNotExist" if !values.is_empty() => Some(FieldError::forbidden(
            path,
            "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
        )),
        _ => None,
    }
}

/// Syntax of a label selector: keys, values and operators.
pub fn validate_label_selector(
    selector: &LabelSelector,
    path: &Path,
    errors: &mut Vec<FieldError>,
) {
    if let Some(labels) = &selector.match_labels {
        validate_labels(labels, &path.child("matchLabels"), errors);
    }
    for (i, requirement) in selector.match_expressions.iter().flatten().enumerate() {
        let req_path = path.child("matchExpressions").index(i);
        if let Err(message) = check_qualified_name(&requirement.key) {
            errors.push(FieldError::invalid(
                &req_path.child("key"),
                &requirement.key,
                message,
            ));
        }
        let values = requirement.values.as_deref().unwrap_or_default();
        let operator = requirement.operator.as_str();
        let error =
            set_operator_values_error(operator, values, &req_path.child("values")).or_else(|| {
                match operator {
                    "In" | "NotIn" | "Exists" | "DoesNotExist" => None,
                    other => Some(FieldError::not_supported(
                        &req_path.child("operator"),
                        other,
                        &["In", "NotIn", "Exists", "DoesNotExist"],
                    )),
                }
            });
        errors.extend(error);
        for (j, value) in values.iter().enumerate() {
            if let Err(message) = check_label_value(value) {
                errors.push(FieldError::invalid(
                    &req_path.child("values").index(j),
                    value,
                    message,
                ));
            }
        }
    }
}

/// Whether the selector selects nothing-in-particular (no labels, no expressions).
pub fn selector_is_empty(selector: &LabelSelector) -> bool {
    selector
        .match_labels
        .as_ref()
        .is_none_or(BTreeMap::is_empty)
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(Vec::is_empty)
}

/// Whether `labels` satisfy `selector` (an empty selector matches everything).
pub fn selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    selector_matches_by(selector, |key| labels.get(key).map(String::as_str))
}

/// [`selector_matches`] over labels kept in some other form: `label` gives a key's value.
pub fn selector_matches_by<'a>(
    selector: &LabelSelector,
    label: impl Fn(&str) -> Option<&'a str>,
) -> bool {
    let labels_ok = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| label(k) == Some(v.as_str()));
    let expressions_ok = selector.match_expressions.iter().flatten().all(|req| {
        let values = req.values.as_deref().unwrap_or_default();
        let value = label(&req.key);
        match req.operator.as_str() {
            "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
            "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    });
    labels_ok && expressions_ok
}

/// Upstream's "loose" overlap of two selectors (`util.IsSelectorLooseOverlap`, how
/// PodUnavailableBudgets are told apart): both constrain the same label keys (a `matchLabels` entry
/// counts as `In [value]` and replaces an expression of its key), and for every key the two
/// requirements can hold at once. Selectors over different keys never overlap in this sense.
pub fn selectors_loosely_overlap(a: &LabelSelector, b: &LabelSelector) -> bool {
    let (a, b) = (requirements_by_key(a), requirements_by_key(b));
    a.len() == b.len()
        && a.iter().all(|(key, x)| {
            b.get(key)
                .is_some_and(|y| requirements_overlap(x, y) && requirements_overlap(y, x))
        })
}

/// `(operator, values)` per key, `matchLabels` last.
fn requirements_by_key(selector: &LabelSelector) -> BTreeMap<&str, (&str, Vec<&str>)> {
    let mut by_key: BTreeMap<&str, (&str, Vec<&str>)> = BTreeMap::new();
    for requirement in selector.match_expressions.iter().flatten() {
        let values = requirement.values.iter().flatten().map(String::as_str);
        by_key.insert(
            requirement.key.as_str(),
            (requirement.operator.as_str(), values.collect()),
        );
    }
    for (key, value) in selector.match_labels.iter().flatten() {
        by_key.insert(key.as_str(), ("In", vec![value.as_str()]));
    }
    by_key
}

/// Whether requirement `x` can hold together with `y`, as upstream judges it (`isMatchExpOverlap`).
fn requirements_overlap(x: &(&str, Vec<&str>), y: &(&str, Vec<&str>)) -> bool {
    let ((x_op, x_values), (y_op, y_values)) = (x, y);
    let contains = |all: &[&str], some: &[&str]| some.iter().all(|v| all.contains(v));
    match (*x_op, *y_op) {
        ("In", "Exists") => true,
        ("In", "In") => x_values.iter().any(|v| y_values.contains(v)),
        ("In", "NotIn") => !contains(y_values, x_values),
        ("Exists", "In" | "NotIn" | "Exists") => true,
        ("NotIn", "Exists" | "DoesNotExist" | "NotIn") => true,
        ("NotIn", "In") => !contains(x_values, y_values),
        ("DoesNotExist", "DoesNotExist" | "NotIn") => true,
        _ => false,
    }
}

/// A workload selector: required, non-empty, valid, and matching the template's labels.
pub fn validate_workload_selector(
    selector: &LabelSelector,
    template: &PodTemplateSpec,
    selector_path: &Path,
    template_path: &Path,
    errors: &mut Vec<FieldError>,
) {
    if selector_is_empty(selector) {
        errors.push(FieldError::invalid(
            selector_path,
            "{}",
            "empty selector is invalid for a workload",
        ));
        return;
    }
    let before = errors.len();
    validate_label_selector(selector, selector_path, errors);
    if errors.len() > before {
        return;
    }
    let labels = template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    if !selector_matches(selector, &labels) {
        errors.push(FieldError::invalid(
            &template_path.child("metadata").child("labels"),
            format!("{labels:?}"),
            "`selector` does not match template `labels`",
        ));
    }
}

/// The selector and Pod template of a replicated workload (CloneSet, Advanced StatefulSet, Advanced
/// DaemonSet) at `spec_path`: the selector is required and must match the template's labels, and the
/// template must restart Always and have no activeDeadlineSeconds.
pub fn validate_workload_selector_and_template(
    selector: Option<&LabelSelector>,
    template: &PodTemplateSpec,
    spec_path: &Path,
    errors: &mut Vec<FieldError>,
) {
    let template_path = spec_path.child("template");
    match selector {
        None => errors.push(FieldError::required(&spec_path.child("selector"), "")),
        Some(selector) => validate_workload_selector(
            selector,
            template,
            &spec_path.child("selector"),
            &template_path,
            errors,
        ),
    }
    // An unset restartPolicy counts as Always: upstream defaults a copy of the template before checking.
    validate_pod_template(template, &template_path, &["Always"], true, errors);
}

/// The init containers then the containers of a Pod spec, each with its path below `spec_path`.
pub fn pod_containers<'a>(
    spec: &'a PodSpec,
    spec_path: &Path,
) -> impl Iterator<Item = (Path, &'a Container)> {
    let init_path = spec_path.child("initContainers");
    let path = spec_path.child("containers");
    spec.init_containers
        .iter()
        .flatten()
        .enumerate()
        .map(move |(i, c)| (init_path.index(i), c))
        .chain(
            spec.containers
                .iter()
                .enumerate()
                .map(move |(i, c)| (path.index(i), c)),
        )
}

/// `metadata.name`: required unless a `generateName` is set; a set name must pass `check`, whose
/// message is the error's.
pub fn validate_metadata_name(
    metadata: &ObjectMeta,
    check: impl Fn(&str) -> Result<(), String>,
    errors: &mut Vec<FieldError>,
) {
    let path = Path::new("metadata").child("name");
    match metadata.name.as_deref() {
        None | Some("")
            if metadata
                .generate_name
                .as_deref()
                .is_some_and(|g| !g.is_empty()) => {}
        None | Some("") => errors.push(FieldError::required(
            &path,
            "name or generateName is required",
        )),
        Some(name) => {
            if let Err(message) = check(name) {
                errors.push(FieldError::invalid(&path, name, message));
            }
        }
    }
}

/// The Pod template of a workload: restartPolicy among `allowed_restart_policies` (unset counts as
/// Always), no activeDeadlineSeconds when `forbid_active_deadline`, at least one container, unique valid
/// container names, images present, and each container's ports, env, envFrom and securityContext as
/// Kubernetes checks them ([`containers`]).
pub fn validate_pod_template(
    template: &PodTemplateSpec,
    path: &Path,
    allowed_restart_policies: &[&str],
    forbid_active_deadline: bool,
    errors: &mut Vec<FieldError>,
) {
    if let Some(labels) = template.metadata.as_ref().and_then(|m| m.labels.as_ref()) {
        validate_labels(labels, &path.child("metadata").child("labels"), errors);
    }
    let spec_path = path.child("spec");
    let Some(spec) = &template.spec else {
        errors.push(FieldError::required(
            &spec_path,
            "a Pod template needs a spec",
        ));
        return;
    };
    let restart = spec.restart_policy.as_deref().unwrap_or("Always");
    if !allowed_restart_policies.contains(&restart) {
        errors.push(FieldError::not_supported(
            &spec_path.child("restartPolicy"),
            restart,
            allowed_restart_policies,
        ));
    }
    if forbid_active_deadline && spec.active_deadline_seconds.is_some() {
        errors.push(FieldError::forbidden(
            &spec_path.child("activeDeadlineSeconds"),
            "activeDeadlineSeconds in a workload's Pod template is not supported",
        ));
    }
    if spec.containers.is_empty() {
        errors.push(FieldError::required(
            &spec_path.child("containers"),
            "at least one container is required",
        ));
    }
    let mut names = HashSet::new();
    for (container_path, container) in pod_containers(spec, &spec_path) {
        containers::validate_name_and_image(container, &container_path, &mut names, false, errors);
        containers::validate_container(container, &container_path, errors);
    }
}

/// A value that must not be negative.
pub fn validate_non_negative(value: i64, path: &Path, errors: &mut Vec<FieldError>) {
    if value < 0 {
        errors.push(FieldError::invalid(
            path,
            value,
            "must be greater than or equal to 0",
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelectorRequirement, ObjectMeta};

    fn template(labels: &[(&str, &str)], containers: &[(&str, &str)]) -> PodTemplateSpec {
        PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            }),
            spec: Some(PodSpec {
                containers: containers
                    .iter()
                    .map(|(n, i)| Container {
                        name: n.to_string(),
                        image: Some(i.to_string()),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }),
        }
    }

    fn selector(labels: &[(&str, &str)]) -> LabelSelector {
        LabelSelector {
            match_labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    fn errors_of(f: impl FnOnce(&mut Vec<FieldError>)) -> Vec<String> {
        let mut errors = Vec::new();
        f(&mut errors);
        errors.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn names() {
        assert!(check_dns1123_label("nginx-1").is_ok());
        assert!(check_dns1123_label("Nginx").is_err());
        assert!(check_dns1123_label("-a").is_err());
        assert!(check_qualified_name("apps.kruise.io/state").is_ok());
        assert!(check_qualified_name("app").is_ok());
        assert!(check_qualified_name("/app").is_err());
        assert!(check_qualified_name("a/b/c").is_err());
        assert!(check_label_value("").is_ok());
        assert!(check_label_value("v1.2_x").is_ok());
        assert!(check_label_value("bad value").is_err());
    }

    #[test]
    fn selector_matching_table() {
        let labels: BTreeMap<String, String> = [("app".to_string(), "web".to_string())].into();
        let expr = |op: &str, values: &[&str]| LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "app".into(),
                operator: op.into(),
                values: Some(values.iter().map(|v| v.to_string()).collect()),
            }]),
            ..Default::default()
        };
        let cases = [
            (selector(&[("app", "web")]), true),
            (selector(&[("app", "db")]), false),
            (expr("In", &["web", "x"]), true),
            (expr("NotIn", &["web"]), false),
            (expr("Exists", &[]), true),
            (expr("DoesNotExist", &[]), false),
            (LabelSelector::default(), true),
        ];
        for (sel, want) in cases {
            assert_eq!(selector_matches(&sel, &labels), want, "{sel:?}");
        }
    }

    #[test]
    fn workload_selector_rules() {
        let spec = Path::new("spec");
        let tpl = template(&[("app", "web")], &[("nginx", "nginx")]);
        assert!(
            errors_of(|e| validate_workload_selector(
                &selector(&[("app", "web")]),
                &tpl,
                &spec.child("selector"),
                &spec.child("template"),
                e
            ))
            .is_empty()
        );
        let mismatch = errors_of(|e| {
            validate_workload_selector(
                &selector(&[("app", "db")]),
                &tpl,
                &spec.child("selector"),
                &spec.child("template"),
                e,
            )
        });
        assert!(
            mismatch[0].starts_with("spec.template.metadata.labels: Invalid value"),
            "{mismatch:?}"
        );
        let empty = errors_of(|e| {
            validate_workload_selector(
                &LabelSelector::default(),
                &tpl,
                &spec.child("selector"),
                &spec.child("template"),
                e,
            )
        });
        assert!(
            empty[0].starts_with("spec.selector: Invalid value"),
            "{empty:?}"
        );
    }

    #[test]
    fn pod_template_rules() {
        let path = Path::new("spec").child("template");
        let mut tpl = template(
            &[("app", "web")],
            &[("nginx", "nginx"), ("nginx", "busybox"), ("Bad", "")],
        );
        if let Some(spec) = tpl.spec.as_mut() {
            spec.restart_policy = Some("Never".into());
            spec.active_deadline_seconds = Some(5);
        }
        let errors = errors_of(|e| validate_pod_template(&tpl, &path, &["Always"], true, e));
        assert_eq!(
            errors,
            [
                r#"spec.template.spec.restartPolicy: Unsupported value: "Never": supported values: "Always""#,
                "spec.template.spec.activeDeadlineSeconds: Forbidden: activeDeadlineSeconds in a workload's Pod template is not supported",
                r#"spec.template.spec.containers[1].name: Duplicate value: "nginx""#,
                &format!(
                    r#"spec.template.spec.containers[2].name: Invalid value: "Bad": {}"#,
                    check_dns1123_label("Bad").err().unwrap_or_default()
                ),
                "spec.template.spec.containers[2].image: Required value",
            ]
        );
    }

    #[test]
    fn loose_overlap_table() {
        let expr = |key: &str, op: &str, values: &[&str]| LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(values.iter().map(|v| v.to_string()).collect()),
        };
        let exprs = |requirements: Vec<LabelSelectorRequirement>| LabelSelector {
            match_expressions: Some(requirements),
            ..Default::default()
        };
        // (a, b, overlap)
        let cases = [
            (
                selector(&[("app", "web")]),
                selector(&[("app", "web")]),
                true,
            ),
            (
                selector(&[("app", "web")]),
                selector(&[("app", "db")]),
                false,
            ),
            // Different keys: not loosely overlapping, though a Pod could match both.
            (
                selector(&[("app", "web")]),
                selector(&[("tier", "fe")]),
                false,
            ),
            (
                selector(&[("app", "web")]),
                selector(&[("app", "web"), ("tier", "fe")]),
                false,
            ),
            (
                selector(&[("app", "web")]),
                exprs(vec![expr("app", "In", &["db", "web"])]),
                true,
            ),
            (
                selector(&[("app", "web")]),
                exprs(vec![expr("app", "Exists", &[])]),
                true,
            ),
            (
                selector(&[("app", "web")]),
                exprs(vec![expr("app", "NotIn", &["web"])]),
                false,
            ),
            (
                selector(&[("app", "web")]),
                exprs(vec![expr("app", "NotIn", &["db"])]),
                true,
            ),
            (
                exprs(vec![expr("app", "DoesNotExist", &[])]),
                exprs(vec![expr("app", "NotIn", &["db"])]),
                true,
            ),
            (
                exprs(vec![expr("app", "DoesNotExist", &[])]),
                exprs(vec![expr("app", "Exists", &[])]),
                false,
            ),
            // matchLabels replaces the expression of its key.
            (
                LabelSelector {
                    match_labels: Some([("app".to_string(), "web".to_string())].into()),
                    match_expressions: Some(vec![expr("app", "In", &["db"])]),
                },
                selector(&[("app", "web")]),
                true,
            ),
        ];
        for (i, (a, b, overlap)) in cases.iter().enumerate() {
            assert_eq!(selectors_loosely_overlap(a, b), *overlap, "case {i}");
            assert_eq!(
                selectors_loosely_overlap(b, a),
                *overlap,
                "case {i} reversed"
            );
        }
    }

    #[test]
    fn pod_template_container_checks() {
        let path = Path::new("spec").child("template");
        let tpl: PodTemplateSpec = match serde_json::from_value(serde_json::json!({
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{
                "name": "app", "image": "nginx",
                "ports": [{"containerPort": 0}, {"containerPort": 80, "name": "Web"}],
                "env": [{"name": "1A", "value": "x"}, {"name": "B", "valueFrom": {}}],
                "envFrom": [{"configMapRef": {"name": "c"}, "secretRef": {"name": "s"}}],
                "securityContext": {"runAsUser": -5, "procMount": "Bogus"},
            }]},
        })) {
            Ok(tpl) => tpl,
            Err(e) => panic!("template: {e}"),
        };
        let errors = errors_of(|e| validate_pod_template(&tpl, &path, &["Always"], false, e));
        let container = "spec.template.spec.containers[0]";
        let want = [
            format!("{container}.ports[0].containerPort: Invalid value"),
            format!(r#"{container}.ports[1].name: Invalid value: "Web""#),
            format!(r#"{container}.env[0].name: Invalid value: "1A""#),
            format!("{container}.env[1].valueFrom: Invalid value"),
            format!("{container}.envFrom[0]: Invalid value"),
            format!(r#"{container}.securityContext.runAsUser: Invalid value: "-5""#),
            format!(r#"{container}.securityContext.procMount: Unsupported value: "Bogus""#),
        ];
        assert_eq!(errors.len(), want.len(), "{errors:#?}");
        for (error, want) in errors.iter().zip(&want) {
            assert!(
                error.starts_with(want.as_str()),
                "{error} does not start with {want}"
            );
        }
    }
}
