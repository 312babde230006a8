//! The EphemeralJob validating webhook (upstream `vephemeraljobs.kb.io`,
//! `pkg/webhook/ephemeraljob/validating`): the checks are `kruise_api::ephemeraljob::validate`.

use kruise_api::ephemeraljob::{self as api, EphemeralJob};
use kruise_api::field;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionReview;

use crate::admission::{Answer, allow, change_of, deny_with_code};

/// Path and webhook name, upstream's.
pub const VALIDATE_PATH: &str = "/validate-apps-kruise-io-v1alpha1-ephemeraljob";
pub const WEBHOOK_NAME: &str = "vephemeraljobs.kb.io";

/// Answers an EphemeralJob review (400 on a refusal, as upstream's).
pub fn validate(review: AdmissionReview<DynamicObject>) -> Answer {
    let change = match change_of::<EphemeralJob>(review) {
        Ok(change) => change,
        Err(answer) => return *answer,
    };
    let errors = api::validate(&change.new);
    if errors.is_empty() {
        allow(&change.request)
    } else {
        deny_with_code(&change.request, 400, field::join(&errors))
    }
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
