//! The admission webhook configurations and CRD conversion settings kruise-rs installs, and how their
//! client config is pointed at the running webhook (a Service in a cluster, a URL such as
//! `https://127.0.0.1:9876` locally) with the current CA bundle.

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ServiceReference,
    ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kruise_api::kinds::Kind;
use serde_json::{Value, json};

pub const MUTATING_CONFIGURATION: &str = "kruise-mutating-webhook-configuration";
pub const VALIDATING_CONFIGURATION: &str = "kruise-validating-webhook-configuration";
pub const DEFAULT_SERVICE: &str = "kruise-webhook-service";
pub const CONVERT_PATH: &str = "/convert";

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

/// The mutating configuration for every kind.
pub fn mutating(target: &Target, ca_bundle: Option<&[u8]>) -> MutatingWebhookConfiguration {
    MutatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(MUTATING_CONFIGURATION.into()),
            ..Default::default()
        },
        webhooks: Some(
            Kind::ALL
                .iter()
                .map(|&kind| MutatingWebhook {
                    name: format!("m{}.kb.io", kind.name().to_lowercase()),
                    client_config: target.client_config(&mutate_path(kind), ca_bundle),
                    rules: Some(rules(kind)),
                    admission_review_versions: vec!["v1".into()],
                    side_effects: "None".into(),
                    failure_policy: Some("Fail".into()),
                    match_policy: Some("Equivalent".into()),
                    timeout_seconds: Some(10),
                    reinvocation_policy: Some("Never".into()),
                    ..Default::default()
                })
                .collect(),
        ),
    }
}

/// The validating configuration for every kind.
pub fn validating(target: &Target, ca_bundle: Option<&[u8]>) -> ValidatingWebhookConfiguration {
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
                    timeout_seconds: Some(10),
                    ..Default::default()
                })
                .collect(),
        ),
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
    let mutating = with_type(&mutating(&target, None), "MutatingWebhookConfiguration");
    let validating = with_type(&validating(&target, None), "ValidatingWebhookConfiguration");
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

    #[test]
    fn one_webhook_per_kind_with_upstream_names_and_paths() {
        let target = Target::Url {
            host: "127.0.0.1".into(),
            port: 9876,
        };
        let mutating = mutating(&target, Some(b"ca"));
        let hooks = mutating.webhooks.unwrap_or_default();
        assert_eq!(hooks.len(), Kind::ALL.len());
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
        let validating = validating(
            &Target::Service {
                namespace: "kruise-system".into(),
                name: DEFAULT_SERVICE.into(),
            },
            None,
        );
        let hook = &validating.webhooks.unwrap_or_default()[0];
        assert_eq!(
            hook.client_config
                .service
                .as_ref()
                .and_then(|s| s.path.as_deref()),
            Some(validate_path(Kind::ALL[0]).as_str())
        );
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
}
