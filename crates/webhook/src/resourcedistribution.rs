//! The ResourceDistribution validating webhook (upstream `pkg/webhook/resourcedistribution`): the
//! resource must be a Secret or ConfigMap whose apiVersion, kind and name never change, the targets
//! valid and unambiguous. While the `ResourceDistributionGate` is off every create and update is
//! refused (403), as upstream's.

use kruise_api::field;
use kruise_api::resourcedistribution::{self as rd, ResourceDistribution};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionResponse, AdmissionReview, Operation};
use kube::core::response::StatusSummary;

use crate::admission::{Answer, allow, deny, request_of};

/// Path and webhook name, upstream's.
pub const VALIDATE_PATH: &str = "/validate-apps-kruise-io-v1alpha1-resourcedistribution";
pub const WEBHOOK_NAME: &str = "vresourcedistribution.kb.io";
pub const GATE: &str = "ResourceDistributionGate";

/// Answers a ResourceDistribution review; `enabled` is the `ResourceDistributionGate`.
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
        deny(&request, field::join(&errors))
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
