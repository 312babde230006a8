//! The ResourceDistribution validating webhook (upstream `pkg/webhook/resourcedistribution`): the
//! resource must be a Secret or ConfigMap whose apiVersion, kind and name never change, the targets
//! valid and unambiguous; and, as upstream, the apiserver must accept the resource itself: a server
//! dry-run create of it in the webhook's namespace answers that (a ConfigMap over 1 MiB, say, is
//! refused there and so here, instead of failing in every target namespace later). While the
//! `ResourceDistributionGate` is off every create and update is refused (403), as upstream's.

use kruise_api::field;
use kruise_api::resourcedistribution::{self as rd, ResourceDistribution};
use kube::api::{ApiResource, PostParams};
use kube::core::admission::AdmissionReview;
use kube::core::{DynamicObject, GroupVersionKind};
use kube::{Api, Client};
use serde_json::Value;

use crate::admission::{Answer, Change, allow, change_of, deny_with_code, gate_disabled};

/// Path and webhook name, upstream's.
pub const VALIDATE_PATH: &str = "/validate-apps-kruise-io-v1alpha1-resourcedistribution";
pub const WEBHOOK_NAME: &str = "vresourcedistribution.kb.io";
pub const GATE: &str = "ResourceDistributionGate";

/// Answers a ResourceDistribution review; `enabled` is the `ResourceDistributionGate`. Without a
/// client the resource is not dry-run.
pub async fn validate_with(
    review: AdmissionReview<DynamicObject>,
    enabled: bool,
    client: Option<&Client>,
    namespace: &str,
) -> Answer {
    let change = match change_of::<ResourceDistribution>(review) {
        Ok(change) => change,
        Err(answer) => return *answer,
    };
    if let Some(refusal) = refusal(&change, enabled) {
        return refusal;
    }
    if let Some(client) = client
        && let Err(message) = dry_run(client, &change.new.spec.resource, namespace).await
    {
        return deny_with_code(&change.request, 422, message);
    }
    allow(&change.request)
}

/// Answers a ResourceDistribution review without the dry run; `enabled` is the
/// `ResourceDistributionGate`.
pub fn validate(review: AdmissionReview<DynamicObject>, enabled: bool) -> Answer {
    match change_of::<ResourceDistribution>(review) {
        Ok(change) => refusal(&change, enabled).unwrap_or_else(|| allow(&change.request)),
        Err(answer) => *answer,
    }
}

/// The refusal of a create or update without the apiserver: 403 while the gate is off, 422 with
/// the fields at fault, as upstream's.
fn refusal(change: &Change<ResourceDistribution>, enabled: bool) -> Option<Answer> {
    if !enabled {
        return Some(gate_disabled(&change.request, GATE));
    }
    let errors = rd::validate(&change.new, change.old.as_ref());
    (!errors.is_empty()).then(|| deny_with_code(&change.request, 422, field::join(&errors)))
}

/// Creates `resource` in `namespace` with `dryRun=All`: `Err` with upstream's message when the
/// apiserver refuses it (its existing already is no refusal).
async fn dry_run(client: &Client, resource: &Value, namespace: &str) -> Result<(), String> {
    let (api_version, kind, _) = rd::identity(resource);
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let plural = format!("{}s", kind.to_lowercase());
    let api_resource = ApiResource::from_gvk_with_plural(&gvk, &plural);
    let mut object: DynamicObject = serde_json::from_value(resource.clone())
        .map_err(|e| format!("spec.resource: Invalid value: failed to read the resource: {e}"))?;
    object.metadata.namespace = Some(namespace.to_owned());
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &api_resource);
    let params = PostParams {
        dry_run: true,
        field_manager: None,
    };
    match api.create(&params, &object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.reason == "AlreadyExists" => Ok(()),
        Err(error) => {
            let detail = match &error {
                kube::Error::Api(status) => status.message.clone(),
                other => other.to_string(),
            };
            Err(format!(
                "spec.resource: Internal error: failed to dry-run to validate spec.resource, error: {detail}"
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testreview::{Review, outcome};
    use serde_json::{Value, json};

    fn review(
        operation: &str,
        object: Value,
        old: Option<Value>,
    ) -> AdmissionReview<DynamicObject> {
        Review::of(
            "apps.kruise.io",
            "v1alpha1",
            "ResourceDistribution",
            "resourcedistributions",
        )
        .operation(operation)
        .object(object)
        .old(old)
        .build()
    }

    fn distribution(name: &str, kind: &str) -> Value {
        json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "ResourceDistribution",
            "metadata": {"name": "rd"},
            "spec": {
                "resource": {"apiVersion": "v1", "kind": kind, "metadata": {"name": name}, "data": {"k": "dg=="}},
                "targets": {"allNamespaces": true, "excludedNamespaces": {"list": [{"name": "kube-system"}]}}
            }
        })
    }

    #[test]
    fn gate_off_refuses_with_403() {
        let (allowed, message, code) = outcome(&validate(
            review("CREATE", distribution("s", "Secret"), None),
            false,
        ));
        assert!(!allowed);
        assert_eq!(code, 403);
        assert!(message.contains("ResourceDistributionGate"), "{message}");
    }

    #[test]
    fn valid_create_and_update_are_allowed_and_renames_refused() {
        assert!(validate(review("CREATE", distribution("s", "Secret"), None), true).allowed);
        let update = review(
            "UPDATE",
            distribution("s", "Secret"),
            Some(distribution("s", "Secret")),
        );
        assert!(validate(update, true).allowed);
        let rename = review(
            "UPDATE",
            distribution("t", "Secret"),
            Some(distribution("s", "Secret")),
        );
        let (allowed, message, _) = outcome(&validate(rename, true));
        assert!(!allowed);
        assert!(
            message.contains("spec.resource") && message.contains("immutable"),
            "{message}"
        );
        let (allowed, message, _) = outcome(&validate(
            review("CREATE", distribution("s", "Pod"), None),
            true,
        ));
        assert!(!allowed);
        assert!(message.contains("only support"), "{message}");
    }

    #[test]
    fn deletes_are_allowed_even_with_the_gate_off() {
        assert!(validate(review("DELETE", distribution("s", "Secret"), None), false).allowed);
    }
}
