//! The admission webhook configurations and CRD conversion settings kruise-rs installs, and how their
//! client config is pointed at the running webhook (a Service in a cluster, a URL such as
//! `https://127.0.0.1:9876` locally) with the current CA bundle.

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ServiceReference,
    ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};
use kruise_api::kinds::Kind;
use serde_json::{Value, json};

pub const MUTATING_CONFIGURATION: &str = "kruise-mutating-webhook-configuration";
pub const VALIDATING_CONFIGURATION: &str = "kruise-validating-webhook-configuration";
pub const DEFAULT_SERVICE: &str = "kruise-webhook-service";
pub const CONVERT_PATH: &str = "/convert";
/// Path and name of the Pod mutating webhook (SidecarSet injection), as OpenKruise's.
pub const MUTATE_POD_PATH: &str = "/mutate-pod";
pub const POD_WEBHOOK_NAME: &str = "mpod.kb.io";
/// The apiserver's deadline for one Pod admission call: small, because every Pod creation in scope
/// waits for it.
pub const POD_WEBHOOK_TIMEOUT_SECONDS: i32 = 5;
/// The apiserver's default deadline for the apps.kruise.io defaulting and validation webhooks
/// (`--webhook-timeout-seconds`; the chart's `webhookConfiguration.timeoutSeconds`).
pub const RESOURCE_WEBHOOK_TIMEOUT_SECONDS: i32 = 10;

/// What the apiserver does when it cannot reach the Pod webhook (or it answers too late).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FailurePolicy {
    /// Admit the Pod unchanged (it then lacks its sidecars; the SidecarSet controller reports it).
    /// The default: a webhook outage must not stop Pod creation across the cluster.
    #[default]
    Ignore,
    /// Reject the Pod (OpenKruise's hard-coded choice): no Pod ever starts without its sidecars, but
    /// no Pod in scope can be created while the webhook is down.
    Fail,
}

impl FailurePolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            FailurePolicy::Ignore => "Ignore",
            FailurePolicy::Fail => "Fail",
        }
    }
}

impl std::str::FromStr for FailurePolicy {
    type Err = String;
    fn from_str(value: &str) -> Result<Self, String> {
        match value {
            "Ignore" => Ok(FailurePolicy::Ignore),
            "Fail" => Ok(FailurePolicy::Fail),
            other => Err(format!(
                "invalid failure policy {other:?}: expected Ignore or Fail"
            )),
        }
    }
}

impl std::fmt::Display for FailurePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the Pod webhook is registered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodWebhook {
    pub failure_policy: FailurePolicy,
    /// Namespaces whose Pods are never sent to the webhook, besides `kube-system`: the manager's own
    /// (so that the manager can always be restarted, even while its webhook is down).
    pub excluded_namespaces: Vec<String>,
    /// The apiserver's deadline for one Pod admission call (1–30 s).
    pub timeout_seconds: i32,
    /// What the apiserver does with the deletion or eviction of a Pod a PodUnavailableBudget guards
    /// when the webhook cannot answer: `Fail` (the default) keeps the budget while the manager is
    /// down; every other Pod follows `failure_policy`.
    pub guarded_failure_policy: FailurePolicy,
    /// The namespaces holding a PodUnavailableBudget, sorted: their evictions are decided under
    /// `guarded_failure_policy` (an eviction carries no Pod labels to select on).
    pub budget_namespaces: Vec<String>,
}

impl PodWebhook {
    /// The defaults for a manager running in `namespace`.
    pub fn new(namespace: &str) -> Self {
        Self {
            failure_policy: FailurePolicy::default(),
            excluded_namespaces: vec![namespace.to_string()],
            timeout_seconds: POD_WEBHOOK_TIMEOUT_SECONDS,
            guarded_failure_policy: FailurePolicy::Fail,
            budget_namespaces: Vec::new(),
        }
    }

    /// [`PodWebhook::namespace_selector`], narrowed to the namespaces that hold a budget (`In`) or
    /// to the others (`NotIn`); `None` when no namespace holds one and `In` is asked for.
    fn eviction_namespace_selector(&self, guarded: bool) -> Option<LabelSelector> {
        let mut selector = self.namespace_selector();
        if self.budget_namespaces.is_empty() {
            return (!guarded).then_some(selector);
        }
        if let Some(requirements) = selector.match_expressions.as_mut() {
            requirements.push(LabelSelectorRequirement {
                key: kruise_api::sidecarset::LABEL_NAMESPACE_NAME.to_string(),
                operator: if guarded { "In" } else { "NotIn" }.into(),
                values: Some(self.budget_namespaces.clone()),
            });
        }
        Some(selector)
    }

    /// `kubernetes.io/metadata.name NotIn [kube-system, <excluded>…]` (sorted, deduplicated), and, as
    /// OpenKruise's, `control-plane DoesNotExist`: a namespace labelled `control-plane` opts out.
    pub fn namespace_selector(&self) -> LabelSelector {
        let mut values: Vec<String> = self.excluded_namespaces.clone();
        values.push(kruise_core::sidecarset::ALWAYS_EXCLUDED_NAMESPACE.to_string());
        values.retain(|v| !v.is_empty());
        values.sort();
        values.dedup();
        LabelSelector {
            match_expressions: Some(vec![
                LabelSelectorRequirement {
                    key: kruise_api::sidecarset::LABEL_NAMESPACE_NAME.to_string(),
                    operator: "NotIn".into(),
                    values: Some(values),
                },
                LabelSelectorRequirement {
                    key: kruise_core::sidecarset::OPT_OUT_NAMESPACE_LABEL.into(),
                    operator: "DoesNotExist".into(),
                    values: None,
                },
            ]),
            match_labels: None,
        }
    }

    fn webhook(&self, target: &Target, ca_bundle: Option<&[u8]>) -> MutatingWebhook {
        MutatingWebhook {
            name: POD_WEBHOOK_NAME.into(),
            client_config: target.client_config(MUTATE_POD_PATH, ca_bundle),
            rules: Some(vec![RuleWithOperations {
                api_groups: Some(vec![String::new()]),
                api_versions: Some(vec!["v1".into()]),
                operations: Some(vec!["CREATE".into()]),
                resources: Some(vec!["pods".into()]),
                scope: None,
            }]),
            namespace_selector: Some(self.namespace_selector()),
            admission_review_versions: vec!["v1".into()],
            side_effects: "None".into(),
            failure_policy: Some(self.failure_policy.as_str().into()),
            match_policy: Some("Equivalent".into()),
            timeout_seconds: Some(self.timeout_seconds),
            reinvocation_policy: Some("Never".into()),
            ..Default::default()
        }
    }
}

/// Where the apiserver reaches the webhook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// `service: {namespace, name, port: 443}` (in-cluster install).
    Service { namespace: String, name: String },
    /// `url: https://host:port/path` (local clusters, out-of-cluster managers).
    Url { host: String, port: u16 },
}

impl Target {
    /// The DNS name (or IP) the serving certificate must cover.
    pub fn cert_host(&self) -> String {
        match self {
            Target::Service { namespace, name } => format!("{name}.{namespace}.svc"),
            Target::Url { host, .. } => host.clone(),
        }
    }

    pub fn client_config(&self, path: &str, ca_bundle: Option<&[u8]>) -> WebhookClientConfig {
        let ca_bundle = ca_bundle.map(|ca| ByteString(ca.to_vec()));
        match self {
            Target::Service { namespace, name } => WebhookClientConfig {
                service: Some(ServiceReference {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    path: Some(path.into()),
                    port: Some(443),
                }),
                url: None,
                ca_bundle,
            },
            Target::Url { host, port } => WebhookClientConfig {
                service: None,
                url: Some(format!("https://{host}:{port}{path}")),
                ca_bundle,
            },
        }
    }
}

/// Path of a kind's defaulting webhook (OpenKruise's paths).
pub fn mutate_path(kind: Kind) -> String {
    format!("/mutate-apps-kruise-io-{}", kind.name().to_lowercase())
}

/// Path of a kind's validating webhook.
pub fn validate_path(kind: Kind) -> String {
    format!("/validate-apps-kruise-io-{}", kind.name().to_lowercase())
}

fn rules(kind: Kind) -> Vec<RuleWithOperations> {
    vec![RuleWithOperations {
        api_groups: Some(vec![kruise_api::kinds::GROUP.into()]),
        // v1beta1 only, with matchPolicy Equivalent: v1alpha1 requests reach us converted to v1beta1.
        api_versions: Some(vec!["v1beta1".into()]),
        operations: Some(vec!["CREATE".into(), "UPDATE".into()]),
        resources: Some(vec![kind.plural().into()]),
        scope: None,
    }]
}

/// The mutating configuration: the Pod webhook (SidecarSet injection), then defaulting for every kind
/// with the deadline `timeout_seconds`.
pub fn mutating(
    target: &Target,
    ca_bundle: Option<&[u8]>,
    pod: &PodWebhook,
    timeout_seconds: i32,
) -> MutatingWebhookConfiguration {
    MutatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(MUTATING_CONFIGURATION.into()),
            ..Default::default()
        },
        webhooks: Some(
            std::iter::once(pod.webhook(target, ca_bundle))
                .chain(Kind::ALL.iter().map(|&kind| MutatingWebhook {
                    name: format!("m{}.kb.io", kind.name().to_lowercase()),
                    client_config: target.client_config(&mutate_path(kind), ca_bundle),
                    rules: Some(rules(kind)),
                    admission_review_versions: vec!["v1".into()],
                    side_effects: "None".into(),
                    failure_policy: Some("Fail".into()),
                    match_policy: Some("Equivalent".into()),
                    timeout_seconds: Some(timeout_seconds),
                    reinvocation_policy: Some("Never".into()),
                    ..Default::default()
                }))
                .chain(std::iter::once(container_recreate_request(
                    target,
                    ca_bundle,
                    timeout_seconds,
                )))
                .collect(),
        ),
    }
}

fn rule(group: &str, versions: &[&str], operations: &[&str], resource: &str) -> RuleWithOperations {
    RuleWithOperations {
        api_groups: Some(vec![group.into()]),
        api_versions: Some(versions.iter().map(|v| v.to_string()).collect()),
        operations: Some(operations.iter().map(|o| o.to_string()).collect()),
        resources: Some(vec![resource.into()]),
        scope: None,
    }
}

/// `policy.kruise.io/guarded In [true]` (or `NotIn`): a Pod whose deletion a budget guards.
fn guarded_pods(guarded: bool) -> LabelSelector {
    LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: kruise_api::policy::POD_GUARDED_LABEL.into(),
            operator: if guarded { "In" } else { "NotIn" }.into(),
            values: Some(vec![kruise_api::policy::POD_GUARDED_VALUE.into()]),
        }]),
        match_labels: None,
    }
}

/// The policy.kruise.io validating webhooks (upstream's names and paths, the budget's split in
/// two): the PodUnavailableBudget checks of Pod update (`vpod.kb.io`), deletion and eviction, and
/// deletion protection of Namespaces, CRDs and workloads. All are scoped and timed as the Pod
/// webhook is and fail as it does (`pod.failure_policy`), so that a webhook outage never stops Pod
/// updates, deletions or evictions unless asked to — except where a budget is at stake:
/// - the deletion of a Pod labelled `policy.kruise.io/guarded` (set by the Pod webhook on create
///   and by the budget controller) goes to `vpodguarded.kb.io`, under `pod.guarded_failure_policy`;
///   other deletions to `vpoddelete.kb.io`. The two select disjoint Pods (a DELETE carries only the
///   old Pod), so no deletion is judged twice;
/// - an eviction carries the Eviction, not the Pod, so no label can select it: evictions in a
///   namespace holding a budget go to `vpodevictionguarded.kb.io` under the guarded policy, the rest
///   to `vpodeviction.kb.io`.
///
/// Updates stay in one webhook without an object selector: an update that adds or removes the
/// label would match both halves of a split. Their handlers honour the feature gates.
fn policy_webhooks(
    target: &Target,
    ca_bundle: Option<&[u8]>,
    timeout_seconds: i32,
    pod: &PodWebhook,
) -> Vec<ValidatingWebhook> {
    use crate::policy::*;
    let hook =
        |name: &str, path: &str, rules: Vec<RuleWithOperations>, pods: bool| ValidatingWebhook {
            name: name.into(),
            client_config: target.client_config(path, ca_bundle),
            rules: Some(rules),
            namespace_selector: pods.then(|| pod.namespace_selector()),
            admission_review_versions: vec!["v1".into()],
            side_effects: "None".into(),
            failure_policy: Some(pod.failure_policy.as_str().into()),
            match_policy: Some("Equivalent".into()),
            timeout_seconds: Some(if pods {
                pod.timeout_seconds
            } else {
                timeout_seconds
            }),
            ..Default::default()
        };
    let guarded = |mut hook: ValidatingWebhook| {
        hook.failure_policy = Some(pod.guarded_failure_policy.as_str().into());
        hook
    };
    let kruise = kruise_api::kinds::GROUP;
    let pod_delete = || vec![rule("", &["v1"], &["DELETE"], "pods")];
    let eviction = || vec![rule("", &["v1"], &["CREATE"], "pods/eviction")];
    let mut hooks = vec![
        hook(
            "vpod.kb.io",
            VALIDATE_POD_PATH,
            vec![rule("", &["v1"], &["UPDATE"], "pods")],
            true,
        ),
        ValidatingWebhook {
            object_selector: Some(guarded_pods(false)),
            ..hook("vpoddelete.kb.io", VALIDATE_POD_PATH, pod_delete(), true)
        },
        guarded(ValidatingWebhook {
            object_selector: Some(guarded_pods(true)),
            ..hook("vpodguarded.kb.io", VALIDATE_POD_PATH, pod_delete(), true)
        }),
        ValidatingWebhook {
            namespace_selector: pod.eviction_namespace_selector(false),
            ..hook("vpodeviction.kb.io", VALIDATE_POD_PATH, eviction(), true)
        },
    ];
    if let Some(selector) = pod.eviction_namespace_selector(true) {
        hooks.push(guarded(ValidatingWebhook {
            namespace_selector: Some(selector),
            ..hook(
                "vpodevictionguarded.kb.io",
                VALIDATE_POD_PATH,
                eviction(),
                true,
            )
        }));
    }
    hooks.extend(vec![
        hook(
            "vnamespace.kb.io",
            VALIDATE_NAMESPACE_PATH,
            vec![rule("", &["v1"], &["DELETE"], "namespaces")],
            false,
        ),
        hook(
            "vcustomresourcedefinition.kb.io",
            VALIDATE_CRD_PATH,
            vec![rule(
                "apiextensions.k8s.io",
                &["v1"],
                &["DELETE"],
                "customresourcedefinitions",
            )],
            false,
        ),
        hook(
            "vbuiltindeployment.kb.io",
            VALIDATE_DEPLOYMENT_PATH,
            vec![rule("apps", &["v1"], &["DELETE"], "deployments")],
            false,
        ),
        hook(
            "vbuiltinreplicaset.kb.io",
            VALIDATE_REPLICASET_PATH,
            vec![rule("apps", &["v1"], &["DELETE"], "replicasets")],
            false,
        ),
        hook(
            "vbuiltinstatefulset.kb.io",
            VALIDATE_STATEFULSET_PATH,
            vec![rule("apps", &["v1"], &["DELETE"], "statefulsets")],
            false,
        ),
        hook(
            "vservice.kb.io",
            VALIDATE_SERVICE_PATH,
            vec![rule("", &["v1"], &["DELETE"], "services")],
            false,
        ),
        hook(
            "vingress.kb.io",
            VALIDATE_INGRESS_PATH,
            vec![rule("networking.k8s.io", &["v1"], &["DELETE"], "ingresses")],
            false,
        ),
        hook(
            "vkruiseworkloaddeletion.kb.io",
            VALIDATE_KRUISE_WORKLOAD_DELETION_PATH,
            ["clonesets", "statefulsets", "uniteddeployments"]
                .iter()
                .map(|r| rule(kruise, &["v1beta1"], &["DELETE"], r))
                .collect(),
            false,
        ),
    ]);
    hooks
}

/// The validating configuration for every kind, with the deadline `timeout_seconds`, and the
/// policy.kruise.io webhooks (see `policy_webhooks`).
pub fn validating(
    target: &Target,
    ca_bundle: Option<&[u8]>,
    timeout_seconds: i32,
    pod: &PodWebhook,
) -> ValidatingWebhookConfiguration {
    ValidatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(VALIDATING_CONFIGURATION.into()),
            ..Default::default()
        },
        webhooks: Some(
            Kind::ALL
                .iter()
                .map(|&kind| ValidatingWebhook {
                    name: format!("v{}.kb.io", kind.name().to_lowercase()),
                    client_config: target.client_config(&validate_path(kind), ca_bundle),
                    rules: Some(rules(kind)),
                    admission_review_versions: vec!["v1".into()],
                    side_effects: "None".into(),
                    failure_policy: Some("Fail".into()),
                    match_policy: Some("Equivalent".into()),
                    timeout_seconds: Some(timeout_seconds),
                    ..Default::default()
                })
                .chain(policy_webhooks(target, ca_bundle, timeout_seconds, pod))
                .chain(V1ALPHA1_VALIDATED.iter().map(|&webhook| {
                    v1alpha1_validating(webhook, target, ca_bundle, timeout_seconds)
                }))
                .collect(),
        ),
    }
}

/// ContainerRecreateRequest's mutating webhook (v1alpha1, its only version; it validates too), upstream's
/// name and path.
fn container_recreate_request(
    target: &Target,
    ca_bundle: Option<&[u8]>,
    timeout_seconds: i32,
) -> MutatingWebhook {
    MutatingWebhook {
        name: crate::containerrecreaterequest::WEBHOOK_NAME.into(),
        client_config: target
            .client_config(crate::containerrecreaterequest::MUTATE_PATH, ca_bundle),
        rules: Some(vec![rule(
            kruise_api::kinds::GROUP,
            &["v1alpha1"],
            &["CREATE", "UPDATE"],
            kruise_api::containerrecreaterequest::PLURAL,
        )]),
        admission_review_versions: vec!["v1".into()],
        side_effects: "None".into(),
        failure_policy: Some("Fail".into()),
        match_policy: Some("Equivalent".into()),
        timeout_seconds: Some(timeout_seconds),
        reinvocation_policy: Some("Never".into()),
        ..Default::default()
    }
}

/// The v1alpha1-only kinds with a validating webhook of their own (upstream's name, path, group and
/// resource), checked on CREATE and UPDATE: ResourceDistribution, PersistentPodState,
/// WorkloadSpread, PodProbeMarker, EphemeralJob and policy.kruise.io's PodUnavailableBudget.
const V1ALPHA1_VALIDATED: &[(&str, &str, &str, &str)] = &[
    (
        crate::resourcedistribution::WEBHOOK_NAME,
        crate::resourcedistribution::VALIDATE_PATH,
        kruise_api::kinds::GROUP,
        kruise_api::resourcedistribution::PLURAL,
    ),
    (
        crate::persistentpodstate::WEBHOOK_NAME,
        crate::persistentpodstate::VALIDATE_PATH,
        kruise_api::kinds::GROUP,
        kruise_api::persistentpodstate::PLURAL,
    ),
    (
        crate::workloadspread::WEBHOOK_NAME,
        crate::workloadspread::VALIDATE_PATH,
        kruise_api::kinds::GROUP,
        kruise_api::workloadspread::PLURAL,
    ),
    (
        crate::podprobemarker::WEBHOOK_NAME,
        crate::podprobemarker::VALIDATE_PATH,
        kruise_api::kinds::GROUP,
        kruise_api::podprobemarker::PLURAL,
    ),
    (
        crate::ephemeraljob::WEBHOOK_NAME,
        crate::ephemeraljob::VALIDATE_PATH,
        kruise_api::kinds::GROUP,
        kruise_api::ephemeraljob::PLURAL,
    ),
    (
        crate::podunavailablebudget::WEBHOOK_NAME,
        crate::podunavailablebudget::VALIDATE_PATH,
        kruise_api::policy::GROUP,
        crate::podunavailablebudget::PLURAL,
    ),
];

/// The validating webhook of a v1alpha1-only kind ([`V1ALPHA1_VALIDATED`]).
fn v1alpha1_validating(
    (name, path, group, plural): (&str, &str, &str, &str),
    target: &Target,
    ca_bundle: Option<&[u8]>,
    timeout_seconds: i32,
) -> ValidatingWebhook {
    ValidatingWebhook {
        name: name.into(),
        client_config: target.client_config(path, ca_bundle),
        rules: Some(vec![rule(
            group,
            &["v1alpha1"],
            &["CREATE", "UPDATE"],
            plural,
        )]),
        admission_review_versions: vec!["v1".into()],
        side_effects: "None".into(),
        failure_policy: Some("Fail".into()),
        match_policy: Some("Equivalent".into()),
        timeout_seconds: Some(timeout_seconds),
        ..Default::default()
    }
}

/// A merge patch pointing a CRD's conversion at the webhook with `ca_bundle`. The other form of client
/// config (service or url) is nulled so switching between them works.
pub fn crd_conversion_patch(target: &Target, ca_bundle: &[u8]) -> Value {
    let config = serde_json::to_value(target.client_config(CONVERT_PATH, Some(ca_bundle)))
        .unwrap_or(Value::Null);
    let mut client_config = json!({ "service": null, "url": null });
    if let (Some(slot), Some(fields)) = (client_config.as_object_mut(), config.as_object()) {
        for (key, value) in fields {
            slot.insert(key.clone(), value.clone());
        }
    }
    json!({
        "spec": {
            "conversion": {
                "strategy": "Webhook",
                "webhook": { "clientConfig": client_config, "conversionReviewVersions": ["v1"] }
            }
        }
    })
}

/// The manifests checked in under `config/webhook/` (Service form, no CA bundle: the manager fills it).
pub fn manifests_yaml(namespace: &str) -> Result<String, serde_yaml::Error> {
    let target = Target::Service {
        namespace: namespace.into(),
        name: DEFAULT_SERVICE.into(),
    };
    let pod = PodWebhook::new(namespace);
    let mutating = with_type(
        &mutating(&target, None, &pod, RESOURCE_WEBHOOK_TIMEOUT_SECONDS),
        "MutatingWebhookConfiguration",
    );
    let validating = with_type(
        &validating(&target, None, RESOURCE_WEBHOOK_TIMEOUT_SECONDS, &pod),
        "ValidatingWebhookConfiguration",
    );
    Ok(format!(
        "# Generated from crates/webhook (configuration.rs) by `make manifests`; do not edit.\n\
         # kruise-manager keeps these up to date (client config and caBundle) at runtime.\n{}---\n{}",
        serde_yaml::to_string(&mutating)?,
        serde_yaml::to_string(&validating)?
    ))
}

/// The JSON of an admissionregistration.k8s.io/v1 object with its apiVersion and kind set (the typed
/// structs leave them out), as a manifest or a server-side apply body needs.
pub(crate) fn with_type<T: serde::Serialize>(object: &T, kind: &str) -> Value {
    let mut value = serde_json::to_value(object).unwrap_or(Value::Null);
    if let Some(map) = value.as_object_mut() {
        map.insert(
            "apiVersion".into(),
            json!("admissionregistration.k8s.io/v1"),
        );
        map.insert("kind".into(), json!(kind));
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind of `kruise_api::crd::SERVED` is admitted as its line says: a webhook whose rules
    /// take its creates and updates, validating or (ContainerRecreateRequest) mutating.
    #[test]
    fn every_served_kind_is_admitted_as_its_line_says() {
        use kruise_api::crd::{Admission, SERVED};
        let target = Target::Url {
            host: "127.0.0.1".into(),
            port: 9876,
        };
        let pods = PodWebhook::new("kruise-system");
        let takes = |rules: &[RuleWithOperations], group: &str, plural: &str| {
            ["CREATE", "UPDATE"].iter().all(|op| {
                rules.iter().any(|r| {
                    let has = |list: &Option<Vec<String>>, want: &str| {
                        list.as_ref()
                            .is_some_and(|l| l.iter().any(|i| i == want || i == "*"))
                    };
                    has(&r.api_groups, group) && has(&r.resources, plural) && has(&r.operations, op)
                })
            })
        };
        let validating: Vec<Vec<RuleWithOperations>> =
            validating(&target, None, RESOURCE_WEBHOOK_TIMEOUT_SECONDS, &pods)
                .webhooks
                .unwrap_or_default()
                .into_iter()
                .map(|h| h.rules.unwrap_or_default())
                .collect();
        let mutating: Vec<Vec<RuleWithOperations>> = mutating(&target, None, &pods, 12)
            .webhooks
            .unwrap_or_default()
            .into_iter()
            .map(|h| h.rules.unwrap_or_default())
            .collect();
        for served in SERVED {
            let plural = (served.crd)().spec.names.plural;
            let hooks = match served.admission {
                Admission::Validated => &validating,
                Admission::MutatedAndValidated => &mutating,
                Admission::None => continue,
            };
            assert!(
                hooks
                    .iter()
                    .any(|rules| takes(rules, served.group, &plural)),
                "{}: no webhook takes its creates and updates ({:?})",
                served.kind,
                served.admission
            );
        }
    }

    #[test]
    fn one_webhook_per_kind_with_upstream_names_and_paths() {
        let target = Target::Url {
            host: "127.0.0.1".into(),
            port: 9876,
        };
        let mutating = mutating(&target, Some(b"ca"), &PodWebhook::new("kruise-system"), 12);
        let hooks = mutating.webhooks.unwrap_or_default();
        assert_eq!(hooks.len(), Kind::ALL.len() + 2);
        let bcj = hooks
            .iter()
            .find(|h| h.name == "mbroadcastjob.kb.io")
            .expect("broadcastjob webhook");
        assert_eq!(
            bcj.client_config.url.as_deref(),
            Some("https://127.0.0.1:9876/mutate-apps-kruise-io-broadcastjob")
        );
        assert_eq!(
            bcj.client_config.ca_bundle,
            Some(ByteString(b"ca".to_vec()))
        );
        assert_eq!(bcj.match_policy.as_deref(), Some("Equivalent"));
        assert_eq!(bcj.timeout_seconds, Some(12));
        let validating = validating(
            &Target::Service {
                namespace: "kruise-system".into(),
                name: DEFAULT_SERVICE.into(),
            },
            None,
            RESOURCE_WEBHOOK_TIMEOUT_SECONDS,
            &PodWebhook::new("kruise-system"),
        );
        let hooks = validating.webhooks.unwrap_or_default();
        let vpod = hooks
            .iter()
            .find(|h| h.name == "vpod.kb.io")
            .expect("vpod.kb.io");
        assert_eq!(
            vpod.failure_policy.as_deref(),
            Some("Ignore"),
            "never blocks by default"
        );
        assert!(vpod.namespace_selector.is_some());
        assert!(hooks.iter().any(|h| h.name == "vpodeviction.kb.io"));
        assert!(hooks.iter().any(|h| h.name == "vpodguarded.kb.io"));
        assert!(hooks.iter().any(|h| h.name == "vnamespace.kb.io"));
        let hook = &hooks[0];
        assert_eq!(hook.timeout_seconds, Some(RESOURCE_WEBHOOK_TIMEOUT_SECONDS));
        assert_eq!(
            hook.client_config
                .service
                .as_ref()
                .and_then(|s| s.path.as_deref()),
            Some(validate_path(Kind::ALL[0]).as_str())
        );
    }

    #[test]
    fn pod_webhook_cannot_block_the_cluster() {
        let target = Target::Url {
            host: "127.0.0.1".into(),
            port: 9876,
        };
        let hooks = mutating(
            &target,
            None,
            &PodWebhook::new("kruise-system"),
            RESOURCE_WEBHOOK_TIMEOUT_SECONDS,
        )
        .webhooks
        .unwrap_or_default();
        let pod = hooks
            .iter()
            .find(|h| h.name == POD_WEBHOOK_NAME)
            .expect("mpod.kb.io");
        assert_eq!(
            pod.client_config.url.as_deref(),
            Some("https://127.0.0.1:9876/mutate-pod")
        );
        let rule = &pod.rules.clone().unwrap_or_default()[0];
        assert_eq!(rule.operations, Some(vec!["CREATE".to_string()]));
        assert_eq!(rule.resources, Some(vec!["pods".to_string()]));
        assert_eq!(rule.api_groups, Some(vec![String::new()]));
        assert_eq!(
            pod.failure_policy.as_deref(),
            Some("Ignore"),
            "safe default"
        );
        assert_eq!(pod.timeout_seconds, Some(POD_WEBHOOK_TIMEOUT_SECONDS));
        assert!(pod.object_selector.is_none());
        let selector = pod.namespace_selector.clone().expect("namespaceSelector");
        let expressions = selector.match_expressions.unwrap_or_default();
        assert_eq!(expressions.len(), 2);
        assert_eq!(
            (
                expressions[1].key.as_str(),
                expressions[1].operator.as_str()
            ),
            ("control-plane", "DoesNotExist"),
            "upstream's opt-out label"
        );
        let requirement = &expressions[0];
        assert_eq!(requirement.key, "kubernetes.io/metadata.name");
        assert_eq!(requirement.operator, "NotIn");
        assert_eq!(
            requirement.values,
            Some(vec!["kruise-system".to_string(), "kube-system".to_string()])
        );

        let strict = PodWebhook {
            failure_policy: "Fail".parse().expect("Fail parses"),
            excluded_namespaces: vec!["ops".into(), "kube-system".into()],
            timeout_seconds: 3,
            ..PodWebhook::new("ops")
        };
        let hooks = mutating(&target, None, &strict, RESOURCE_WEBHOOK_TIMEOUT_SECONDS)
            .webhooks
            .unwrap_or_default();
        assert_eq!(hooks[0].failure_policy.as_deref(), Some("Fail"));
        assert_eq!(hooks[0].timeout_seconds, Some(3));
        let selector = hooks[0].namespace_selector.clone().expect("selector");
        assert_eq!(
            selector.match_expressions.unwrap_or_default()[0].values,
            Some(vec!["kube-system".to_string(), "ops".to_string()])
        );
        assert!("fail".parse::<FailurePolicy>().is_err());
    }

    #[test]
    fn conversion_patch_switches_forms() {
        let patch = crd_conversion_patch(
            &Target::Url {
                host: "127.0.0.1".into(),
                port: 1,
            },
            b"ca",
        );
        let config = &patch["spec"]["conversion"]["webhook"]["clientConfig"];
        assert_eq!(config["url"], "https://127.0.0.1:1/convert");
        assert_eq!(config["service"], Value::Null);
        assert!(config["caBundle"].is_string());
    }

    #[test]
    fn checked_in_manifests_are_up_to_date() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../config/webhook/manifests.yaml");
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        let want = manifests_yaml("kruise-system").expect("yaml");
        assert!(
            have == want,
            "{} is stale: run `make manifests`",
            path.display()
        );
    }

    /// Which policy webhooks a Pod request reaches: (webhook name, failure policy) for each.
    fn reached(
        hooks: &[ValidatingWebhook],
        operation: &str,
        resource: &str,
        namespace: &str,
        object_labels: &[(&str, &str)],
    ) -> Vec<(String, String)> {
        use kruise_api::validation::selector_matches;
        let namespace_labels: std::collections::BTreeMap<String, String> = [(
            "kubernetes.io/metadata.name".to_string(),
            namespace.to_string(),
        )]
        .into();
        let object_labels: std::collections::BTreeMap<String, String> = object_labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        hooks
            .iter()
            .filter(|h| {
                h.rules.iter().flatten().any(|r| {
                    r.api_groups == Some(vec![String::new()])
                        && r.resources == Some(vec![resource.to_string()])
                        && r.operations.iter().flatten().any(|o| o == operation)
                })
            })
            .filter(|h| {
                h.namespace_selector
                    .as_ref()
                    .is_none_or(|s| selector_matches(s, &namespace_labels))
            })
            .filter(|h| {
                h.object_selector
                    .as_ref()
                    .is_none_or(|s| selector_matches(s, &object_labels))
            })
            .map(|h| (h.name.clone(), h.failure_policy.clone().unwrap_or_default()))
            .collect()
    }

    #[test]
    fn a_budget_holds_while_the_webhook_is_down_and_nothing_else_is_blocked() {
        let target = Target::Url {
            host: "127.0.0.1".into(),
            port: 9876,
        };
        let guarded = [(kruise_api::policy::POD_GUARDED_LABEL, "true")];
        let other = [("app", "web")];
        let with_budgets = PodWebhook {
            budget_namespaces: vec!["shop".into(), "store".into()],
            ..PodWebhook::new("kruise-system")
        };
        let hooks = validating(&target, None, 10, &with_budgets)
            .webhooks
            .unwrap_or_default();
        let one = |name: &str, policy: &str| vec![(name.to_string(), policy.to_string())];
        // (operation, resource, namespace, labels of the object the apiserver matches on) → the
        // one webhook that judges it: never two (a budget would be taken twice), never none.
        type Labels<'a> = &'a [(&'a str, &'a str)];
        type Reached = Vec<(String, String)>;
        let cases: [(&str, &str, &str, Labels, Reached); 9] = [
            (
                "DELETE",
                "pods",
                "shop",
                &guarded,
                one("vpodguarded.kb.io", "Fail"),
            ),
            (
                "DELETE",
                "pods",
                "elsewhere",
                &guarded,
                one("vpodguarded.kb.io", "Fail"),
            ),
            (
                "DELETE",
                "pods",
                "shop",
                &other,
                one("vpoddelete.kb.io", "Ignore"),
            ),
            (
                "DELETE",
                "pods",
                "elsewhere",
                &[],
                one("vpoddelete.kb.io", "Ignore"),
            ),
            (
                "UPDATE",
                "pods",
                "shop",
                &guarded,
                one("vpod.kb.io", "Ignore"),
            ),
            (
                "UPDATE",
                "pods",
                "elsewhere",
                &other,
                one("vpod.kb.io", "Ignore"),
            ),
            // An Eviction carries no labels of the Pod: its namespace decides.
            (
                "CREATE",
                "pods/eviction",
                "shop",
                &[],
                one("vpodevictionguarded.kb.io", "Fail"),
            ),
            (
                "CREATE",
                "pods/eviction",
                "store",
                &[],
                one("vpodevictionguarded.kb.io", "Fail"),
            ),
            (
                "CREATE",
                "pods/eviction",
                "elsewhere",
                &[],
                one("vpodeviction.kb.io", "Ignore"),
            ),
        ];
        for (operation, resource, namespace, labels, want) in cases {
            assert_eq!(
                reached(&hooks, operation, resource, namespace, labels),
                want,
                "{operation} {resource} in {namespace} with {labels:?}"
            );
        }
        // The manager's own namespace never reaches a Pod webhook, guarded or not.
        assert!(reached(&hooks, "DELETE", "pods", "kruise-system", &guarded).is_empty());

        // No budget anywhere: every eviction goes to the webhook that cannot block.
        let hooks = validating(&target, None, 10, &PodWebhook::new("kruise-system"))
            .webhooks
            .unwrap_or_default();
        assert!(!hooks.iter().any(|h| h.name == "vpodevictionguarded.kb.io"));
        assert_eq!(
            reached(&hooks, "CREATE", "pods/eviction", "shop", &[]),
            one("vpodeviction.kb.io", "Ignore")
        );
        // Asked to, guarded Pods follow the Pod webhook's policy like the rest.
        let lenient = PodWebhook {
            guarded_failure_policy: FailurePolicy::Ignore,
            ..with_budgets
        };
        let hooks = validating(&target, None, 10, &lenient)
            .webhooks
            .unwrap_or_default();
        assert_eq!(
            reached(&hooks, "DELETE", "pods", "shop", &guarded),
            one("vpodguarded.kb.io", "Ignore")
        );
    }
}
