//! The ResourceDistribution validating webhook (upstream `pkg/webhook/resourcedistribution`): the
//! resource must be a Secret or ConfigMap whose apiVersion, kind and name never change, the targets
//! valid and unambiguous; and, as upstream, the apiserver must accept the resource itself: a server
//! dry-run create of it in the webhook's namespace answers that (a ConfigMap over 1 MiB, say, is
//! refused there and so here, instead of failing in every target namespace later). While the
//! `ResourceDistributionGate` is off every create and update is refused (403), as upstream's.

use kruise_api::field;
use kruise_api::resourcedistribution::{self as rd, ResourceDistribution};
use kube::api::{ApiResource, PostParams};
use kube::core::admission::{AdmissionResponse, AdmissionReview, Operation};
use kube::core::response::StatusSummary;
use kube::core::{DynamicObject, GroupVersionKind};
use kube::{Api, Client};
use serde_json::Value;

use crate::admission::{Answer, allow, deny, request_of};

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
    let answer = validate(review.clone(), enabled);
    let Some(client) = client else {
        return answer;
    };
    if !answer.allowed {
        return answer;
    }
    let Ok(request) = request_of(review) else {
        return answer;
    };
    if !matches!(request.operation, Operation::Create | Operation::Update) {
        return answer;
    }
    let Some(object) = &request.object else {
        return answer;
    };
    let resource = object.data.pointer("/spec/resource").cloned();
    match resource {
        Some(resource) => match dry_run(client, &resource, namespace).await {
            Ok(()) => answer,
            Err(message) => unprocessable(&request, message),
        },
        None => answer,
    }
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

/// 422, as upstream answers a ResourceDistribution that fails validation.
fn unprocessable(
    request: &kube::core::admission::AdmissionRequest<DynamicObject>,
    message: String,
) -> Answer {
    let mut answer = deny(request, message);
    if let Some(response) = answer.review.response.as_mut() {
        response.result.code = 422;
    }
    answer
}

/// Answers a ResourceDistribution review without the dry run; `enabled` is the
/// `ResourceDistributionGate`.
pub fn validate(review: AdmissionReview<DynamicObject>, enabled: bool) -> Answer {
    let request = match request_of(review) {
        Ok(request) => request,
        Err(answer) => return *answer,
    };
    if !matches!(request.operation, Operation::Create | Operation::Update) {
        return allow(&request);
    }
    let Some(object) = &request.object else {
        return allow(&request);
    };
    let decode = |object: &DynamicObject| -> Result<ResourceDistribution, String> {
        let value =
            serde_json::to_value(object).map_err(|e| format!("cannot read the object: {e}"))?;
        kruise_api::kinds::decode(value).map_err(|e| e.to_string())
    };
    let new = match decode(object) {
        Ok(new) => new,
        Err(message) => return deny(&request, message),
    };
    let old = match (&request.operation, &request.old_object) {
        (Operation::Update, Some(old)) => match decode(old) {
            Ok(old) => Some(old),
            Err(message) => return deny(&request, message),
        },
        _ => None,
    };
    if !enabled {
        let mut response =
            AdmissionResponse::from(&request).deny(format!("feature-gate {GATE} is not enabled"));
        response.result.code = 403;
        response.result.reason = "Forbidden".into();
        response.result.status = Some(StatusSummary::Failure);
        return Answer {
            review: response.into_review(),
            allowed: false,
        };
    }
    let errors = rd::validate(&new, old.as_ref());
    if errors.is_empty() {
        allow(&request)
    } else {
        unprocessable(&request, field::join(&errors))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testreview::{Review, response};
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

    fn outcome(answer: &Answer) -> (bool, String, u16) {
        let response = response(answer);
        (
            answer.allowed,
            response.result.message.clone(),
            response.result.code,
        )
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
