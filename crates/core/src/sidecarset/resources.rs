//! `resourcesPolicy`: a sidecar's resources computed at injection (Pod creation only) from the Pod's own
//! containers, as OpenKruise's Pod webhook does.
//!
//! - **Targets**: the Pod's containers and its native-sidecar init containers (`restartPolicy: Always`)
//!   whose name matches `targetContainersNameRegex` anywhere (default `.*`), minus every container named
//!   by a SidecarSet being injected into the Pod: sidecars are never sized after each other. Plain init
//!   containers never count: they do not run beside the sidecar.
//! - **Aggregate** per resource (cpu, memory), the `sum` or the `max` over the targets. A target without
//!   a *limit* is unlimited, so the aggregate is unlimited and the sidecar gets no limit for that
//!   resource (its expression is not evaluated). A target without a *request* counts as 0.
//! - **Evaluate** every non-empty expression with the aggregate as its variable
//!   ([`resources_expr::evaluate`]: exact, rounded up to 1m / 1 byte, printed as Kubernetes prints).
//!
//! Any error fails the injection (so the Pod creation) with the SidecarSet field at fault: no target,
//! an expression that cannot be evaluated, or — a kruise-rs check, where upstream would let the
//! apiserver reject the Pod without naming the SidecarSet — a computed request above the computed
//! limit. A policy that validation forbids (on a plain init container, next to `resources`, an unknown
//! mode, a bad regex) is an error too, for a SidecarSet that bypassed the validating webhook.

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use kruise_api::quantity::{Format, Quantity};
use kruise_api::sidecarset::is_native_sidecar;
use kruise_api::sidecarset::resources_expr::{self, ExprError, Resource, TargetNamePattern};
use kruise_api::sidecarset::v1beta1::{
    ResourceExprs, ResourcesPolicy, SidecarContainer, TARGET_CONTAINERS_MODE_MAX,
    TARGET_CONTAINERS_MODE_SUM,
};

use super::InjectError;

/// How the targets' quantities combine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Sum,
    Max,
}

/// The two lists of `ResourceRequirements`, which treat a target without a value differently.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum List {
    Limits,
    Requests,
}

impl List {
    fn name(self) -> &'static str {
        match self {
            List::Limits => "limits",
            List::Requests => "requests",
        }
    }
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Sum => TARGET_CONTAINERS_MODE_SUM,
            Mode::Max => TARGET_CONTAINERS_MODE_MAX,
        }
    }
}

const RESOURCES: [Resource; 2] = [Resource::Cpu, Resource::Memory];

/// Where the policy sits, for error messages.
struct Origin<'a> {
    sidecarset: &'a str,
    /// The policy's path: `spec.containers[0].resourcesPolicy`.
    field: String,
}

impl Origin<'_> {
    fn invalid(&self, child: &str, message: impl Into<String>) -> InjectError {
        InjectError::InvalidField {
            sidecarset: self.sidecarset.to_string(),
            field: self.child(child),
            message: message.into(),
        }
    }

    fn child(&self, child: &str) -> String {
        if child.is_empty() {
            self.field.clone()
        } else {
            format!("{}.{child}", self.field)
        }
    }
}

/// The resources `sidecar` gets from its `resourcesPolicy`; `None` when it has no policy or the policy
/// sets nothing (every limit unlimited and no request expression). `field` is the sidecar's path in
/// the SidecarSet (`spec.initContainers[1]`), `init` whether it is an init container, and
/// `kruise_sidecars` the names of every container of the SidecarSets being injected.
pub(super) fn compute(
    sidecar: &SidecarContainer,
    init: bool,
    pod: &Pod,
    kruise_sidecars: &HashSet<&str>,
    sidecarset: &str,
    field: &str,
) -> Result<Option<ResourceRequirements>, InjectError> {
    let Some(policy) = &sidecar.resources_policy else {
        return Ok(None);
    };
    let origin = Origin {
        sidecarset,
        field: format!("{field}.resourcesPolicy"),
    };
    let mode = check_policy(policy, sidecar, init, &origin)?;
    let pattern = TargetNamePattern::new(&policy.target_containers_name_regex)
        .map_err(|message| origin.invalid("targetContainersNameRegex", message))?;
    let targets = targets(pod, &pattern, kruise_sidecars);
    if targets.is_empty() {
        return Err(InjectError::NoTargetContainers {
            sidecarset: sidecarset.to_string(),
            field: origin.child("targetContainersNameRegex"),
            pattern: policy.target_containers_name_regex.clone(),
        });
    }

    let mut computed: BTreeMap<(&str, &str), Quantity> = BTreeMap::new();
    let lists = [
        (List::Limits, &policy.resources_expr.limits),
        (List::Requests, &policy.resources_expr.requests),
    ];
    for (list, exprs) in lists {
        for resource in RESOURCES {
            let expression = exprs
                .as_ref()
                .map(|e| expression(e, resource))
                .unwrap_or("");
            if expression.is_empty() {
                continue;
            }
            let expr_field = origin.child(&format!(
                "resourcesExpr.{}.{}",
                list.name(),
                resource.name()
            ));
            let expr_error = |value: String, error| InjectError::ResourcesExpr {
                sidecarset: sidecarset.to_string(),
                field: expr_field.clone(),
                expression: expression.to_string(),
                variable: format!("{}={value}", resource.name()),
                error: Box::new(error),
            };
            let values = target_values(&targets, list, resource)?;
            let aggregated = aggregate(&values, mode, list).map_err(|error| {
                expr_error(format!("the {} of the targets", mode.name()), error)
            })?;
            // An unlimited aggregate leaves the sidecar unlimited too.
            let Some(variable) = aggregated else { continue };
            let value = resources_expr::evaluate(expression, resource, &variable)
                .map_err(|error| expr_error(variable.canonical(), error))?;
            computed.insert((list.name(), resource.name()), value);
        }
    }
    check_requests_within_limits(&computed, &origin)?;

    let to_list = |list: List| -> Option<BTreeMap<String, K8sQuantity>> {
        let map: BTreeMap<String, K8sQuantity> = computed
            .iter()
            .filter(|((l, _), _)| *l == list.name())
            .map(|((_, r), q)| (r.to_string(), K8sQuantity(q.canonical())))
            .collect();
        (!map.is_empty()).then_some(map)
    };
    let requirements = ResourceRequirements {
        limits: to_list(List::Limits),
        requests: to_list(List::Requests),
        ..ResourceRequirements::default()
    };
    let empty = requirements.limits.is_none() && requirements.requests.is_none();
    Ok((!empty).then_some(requirements))
}

/// What validation enforces, checked again for SidecarSets that did not go through it; returns the mode.
fn check_policy(
    policy: &ResourcesPolicy,
    sidecar: &SidecarContainer,
    init: bool,
    origin: &Origin<'_>,
) -> Result<Mode, InjectError> {
    if init && !is_native_sidecar(sidecar) {
        return Err(origin.invalid(
            "",
            "resourcesPolicy is only supported for containers with restartPolicy Always",
        ));
    }
    let has_resources = sidecar.resources.as_ref().is_some_and(|r| {
        r.limits.as_ref().is_some_and(|l| !l.is_empty())
            || r.requests.as_ref().is_some_and(|l| !l.is_empty())
    });
    if has_resources {
        return Err(origin.invalid(
            "",
            "resourcesPolicy and resources cannot be configured together",
        ));
    }
    match policy.target_containers_mode.as_str() {
        TARGET_CONTAINERS_MODE_SUM => Ok(Mode::Sum),
        TARGET_CONTAINERS_MODE_MAX => Ok(Mode::Max),
        other => Err(origin.invalid(
            "targetContainersMode",
            format!("{other:?}: must be \"sum\" or \"max\""),
        )),
    }
}

fn expression(exprs: &ResourceExprs, resource: Resource) -> &str {
    match resource {
        Resource::Cpu => &exprs.cpu,
        Resource::Memory => &exprs.memory,
    }
}

/// A target container and its path in the Pod (`spec.containers[1]`).
struct Target<'a> {
    container: &'a Container,
    field: String,
}

/// The Pod's native sidecars, then its containers, that the policy sizes the sidecar after.
fn targets<'a>(
    pod: &'a Pod,
    pattern: &TargetNamePattern,
    kruise_sidecars: &HashSet<&str>,
) -> Vec<Target<'a>> {
    let Some(spec) = &pod.spec else {
        return Vec::new();
    };
    let native = spec
        .init_containers
        .iter()
        .flatten()
        .enumerate()
        .filter(|(_, c)| is_native_sidecar(c))
        .map(|(i, c)| (format!("spec.initContainers[{i}]"), c));
    let plain = spec
        .containers
        .iter()
        .enumerate()
        .map(|(i, c)| (format!("spec.containers[{i}]"), c));
    native
        .chain(plain)
        .filter(|(_, c)| !kruise_sidecars.contains(c.name.as_str()) && pattern.matches(&c.name))
        .map(|(field, container)| Target { container, field })
        .collect()
}

/// Every target's quantity of `resource` in `list`, `None` where it sets none.
fn target_values(
    targets: &[Target<'_>],
    list: List,
    resource: Resource,
) -> Result<Vec<Option<Quantity>>, InjectError> {
    targets
        .iter()
        .map(|target| {
            let resources = target.container.resources.as_ref();
            let values = match list {
                List::Limits => resources.and_then(|r| r.limits.as_ref()),
                List::Requests => resources.and_then(|r| r.requests.as_ref()),
            };
            let Some(value) = values.and_then(|v| v.get(resource.name())) else {
                return Ok(None);
            };
            Quantity::parse(&value.0)
                .map(Some)
                .map_err(|message| InjectError::InvalidPodField {
                    field: format!(
                        "{}.resources.{}.{}",
                        target.field,
                        list.name(),
                        resource.name()
                    ),
                    message,
                })
        })
        .collect()
}

fn zero() -> Quantity {
    Quantity::from_decimal(false, 0, 0, Format::DecimalSi)
}

/// The `mode` aggregate of one resource over the targets; `None` = unlimited (a limit some target does
/// not set). A missing request counts as 0. Sums keep the suffix family of the first non-zero value,
/// as Go's `Quantity.Add` does from a zero start; a maximum is the first largest value as written.
fn aggregate(
    values: &[Option<Quantity>],
    mode: Mode,
    list: List,
) -> Result<Option<Quantity>, ExprError> {
    if list == List::Limits && values.iter().any(Option::is_none) {
        return Ok(None);
    }
    let mut present = values.iter().flatten();
    let result = match mode {
        Mode::Sum => present.try_fold(zero(), |sum, value| {
            sum.checked_add(value).ok_or(ExprError::OutOfRange)
        })?,
        Mode::Max => {
            let first = present.next().cloned().unwrap_or_else(zero);
            present.fold(first, |max, value| {
                if value.cmp_value(&max).is_gt() {
                    value.clone()
                } else {
                    max
                }
            })
        }
    };
    Ok(Some(result))
}

/// A request above its limit would be rejected by the apiserver; say which SidecarSet field computed it.
fn check_requests_within_limits(
    computed: &BTreeMap<(&str, &str), Quantity>,
    origin: &Origin<'_>,
) -> Result<(), InjectError> {
    for resource in RESOURCES {
        let name = resource.name();
        let limit = computed.get(&(List::Limits.name(), name));
        let request = computed.get(&(List::Requests.name(), name));
        if let (Some(limit), Some(request)) = (limit, request)
            && request.cmp_value(limit).is_gt()
        {
            return Err(InjectError::RequestAboveLimit {
                sidecarset: origin.sidecarset.to_string(),
                field: origin.child(&format!("resourcesExpr.requests.{name}")),
                request: request.canonical(),
                limit: limit.canonical(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn q(text: &str) -> Quantity {
        Quantity::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn values(texts: &[Option<&str>]) -> Vec<Option<Quantity>> {
        texts.iter().map(|t| t.map(q)).collect()
    }

    #[test]
    fn aggregates_by_mode_and_list() {
        use List::{Limits, Requests};
        use Mode::{Max, Sum};
        // (values of the targets, mode, list, aggregate as printed; None = unlimited)
        type Case<'a> = (&'a [Option<&'a str>], Mode, List, Option<&'a str>);
        let cases: &[Case<'_>] = &[
            (&[Some("1"), Some("500m")], Sum, Limits, Some("1500m")),
            (&[Some("1"), Some("500m")], Max, Limits, Some("1")),
            (&[Some("256Mi"), Some("768Mi")], Sum, Limits, Some("1Gi")),
            (&[Some("256Mi"), Some("768Mi")], Max, Limits, Some("768Mi")),
            // an unlimited target makes the aggregate limit unlimited, in both modes
            (&[Some("1"), None], Sum, Limits, None),
            (&[None, Some("2")], Max, Limits, None),
            // a missing request counts as 0
            (&[Some("100m"), None], Sum, Requests, Some("100m")),
            (&[None, Some("100m")], Max, Requests, Some("100m")),
            (&[None, None], Sum, Requests, Some("0")),
            (&[None, None], Max, Requests, Some("0")),
            // the sum keeps the first non-zero value's suffix family, as Go's Add does
            (
                &[Some("0"), Some("512Mi"), Some("512Mi")],
                Sum,
                Requests,
                Some("1Gi"),
            ),
            (
                &[Some("500Mi"), Some("524288000")],
                Sum,
                Requests,
                Some("1000Mi"),
            ),
            (
                &[Some("524288000"), Some("500Mi")],
                Sum,
                Requests,
                Some("1048576k"),
            ),
            (&[Some("500M"), Some("500M")], Sum, Limits, Some("1G")),
            // max: the first largest, as written
            (&[Some("1Gi"), Some("1024Mi")], Max, Requests, Some("1Gi")),
        ];
        for (texts, mode, list, want) in cases {
            let got = aggregate(&values(texts), *mode, *list).expect("aggregate");
            assert_eq!(
                got.map(|q| q.canonical()).as_deref(),
                *want,
                "{texts:?} {mode:?} {list:?}"
            );
        }
    }

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).expect("pod")
    }

    #[test]
    fn targets_are_app_containers_and_native_sidecars_matching_the_pattern() {
        let p = pod(json!({
            "initContainers": [
                {"name": "init-db"},
                {"name": "log-agent", "restartPolicy": "Always"},
                {"name": "kruise-native", "restartPolicy": "Always"},
            ],
            "containers": [{"name": "app-web"}, {"name": "app-worker"}, {"name": "envoy"}],
        }));
        let kruise: HashSet<&str> = ["envoy", "kruise-native"].into();
        // (pattern, target paths)
        let cases: &[(&str, &[&str])] = &[
            (
                ".*",
                &[
                    "spec.initContainers[1]",
                    "spec.containers[0]",
                    "spec.containers[1]",
                ],
            ),
            (
                "",
                &[
                    "spec.initContainers[1]",
                    "spec.containers[0]",
                    "spec.containers[1]",
                ],
            ),
            ("^app-", &["spec.containers[0]", "spec.containers[1]"]),
            ("worker$", &["spec.containers[1]"]),
            ("agent", &["spec.initContainers[1]"]),
            // plain init containers and Kruise sidecars never count
            ("init-db|envoy|kruise-native", &[]),
        ];
        for (pattern, want) in cases {
            let compiled = TargetNamePattern::new(pattern).expect("pattern");
            let got: Vec<String> = targets(&p, &compiled, &kruise)
                .into_iter()
                .map(|t| t.field)
                .collect();
            assert_eq!(got, *want, "{pattern}");
        }
    }
}
