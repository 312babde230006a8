//! The EphemeralJob validating webhook (upstream `vephemeraljobs.kb.io`,
//! `pkg/webhook/ephemeraljob/validating`): the checks are `kruise_api::ephemeraljob::validate`.

use kruise_api::ephemeraljob::{self as api, EphemeralJob};
use kruise_api::field;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionReview, Operation};

use crate::admission::{Answer, allow, deny, request_of};

/// Path and webhook name, upstream's.
pub const VALIDATE_PATH: &str = "/validate-apps-kruise-io-v1alpha1-ephemeraljob";
pub const WEBHOOK_NAME: &str = "vephemeraljobs.kb.io";

/// Answers an EphemeralJob review (400 on a refusal, as upstream's).
pub fn validate(review: AdmissionReview<DynamicObject>) -> Answer {
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
    let decoded = serde_json::to_value(object)
        .map_err(|e| format!("cannot read the object: {e}"))
        .and_then(|value| {
            kruise_api::kinds::decode::<EphemeralJob>(value).map_err(|e| e.to_string())
        });
    let message = match decoded {
        Err(message) => message,
        Ok(job) => {
            let errors = api::validate(&job);
            if errors.is_empty() {
                return allow(&request);
            }
            field::join(&errors)
        }
    };
    let mut answer = deny(&request, message);
    if let Some(response) = answer.review.response.as_mut() {
        response.result.code = 400;
    }
    answer
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testreview::{Review, response};
    use serde_json::{Value, json};

    fn review(operation: &str, spec: Value) -> AdmissionReview<DynamicObject> {
        Review::of("apps.kruise.io", "v1alpha1", "EphemeralJob", api::PLURAL)
            .operation(operation)
            .namespace("ns")
            .object(json!({
                "apiVersion": "apps.kruise.io/v1alpha1", "kind": "EphemeralJob",
                "metadata": {"name": "ejob", "namespace": "ns"},
                "spec": spec,
            }))
            .build()
    }

    #[test]
    fn answers() {
        let container = json!({
            "name": "debugger", "image": "busybox", "imagePullPolicy": "IfNotPresent",
            "terminationMessagePolicy": "File",
        });
        // (operation, spec, allowed, the message names)
        let cases = [
            (
                "CREATE",
                json!({"selector": {"matchLabels": {"app": "web"}}, "template": {"ephemeralContainers": [container]}}),
                true,
                "",
            ),
            (
                "UPDATE",
                json!({"selector": {"matchLabels": {"app": "has space!"}}, "template": {"ephemeralContainers": [container]}}),
                false,
                "spec.selector.matchLabels[app]",
            ),
            (
                "CREATE",
                json!({"selector": {"matchLabels": {"app": "web"}}, "template": {"ephemeralContainers": [{"name": "d", "image": "busybox"}]}}),
                false,
                "spec.template.ephemeralContainers[0].imagePullPolicy",
            ),
            // Upstream's "failed case": the containers are not a list.
            (
                "CREATE",
                json!({"selector": {"matchLabels": {"app": "web"}}, "template": {"ephemeralContainers": {"name": "d"}}}),
                false,
                "spec.template.ephemeralContainers",
            ),
            ("DELETE", json!({}), true, ""),
        ];
        for (i, (operation, spec, allowed, names)) in cases.into_iter().enumerate() {
            let answer = validate(review(operation, spec));
            let message = response(&answer).result.message.clone();
            assert_eq!(answer.allowed, allowed, "case {i}: {message}");
            assert!(message.contains(names), "case {i}: {message}");
        }
    }
}
