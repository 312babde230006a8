//! The PodUnavailableBudget validating webhook (upstream `vpodunavailablebudget.kb.io`,
//! `pkg/webhook/podunavailablebudget/validating`): the checks are `kruise_api::policy::validate`,
//! against the other budgets of the namespace, read from the apiserver. While neither
//! `PodUnavailableBudgetDeleteGate` nor `PodUnavailableBudgetUpdateGate` is on, every create and
//! update is refused, as upstream's.

use kruise_api::field;
use kruise_api::policy::v1alpha1::PodUnavailableBudget;
use kube::api::ListParams;
use kube::core::DynamicObject;
use kube::core::admission::AdmissionReview;
use kube::{Api, Client};

use crate::admission::{Answer, Change, allow, change_of, deny_with_code};
use crate::policy::PolicyGates;

/// Path and webhook name, upstream's.
pub const VALIDATE_PATH: &str = "/validate-policy-kruise-io-podunavailablebudget";
pub const WEBHOOK_NAME: &str = "vpodunavailablebudget.kb.io";
pub const PLURAL: &str = "podunavailablebudgets";

/// Answers a PodUnavailableBudget review (400 on a refusal, as upstream's); `client` reads the
/// other budgets of the namespace (without one, none are known).
pub async fn validate(
    review: AdmissionReview<DynamicObject>,
    gates: PolicyGates,
    client: Option<&Client>,
) -> Answer {
    let Change { request, new, old } = match change_of::<PodUnavailableBudget>(review) {
        Ok(change) => change,
        Err(answer) => return *answer,
    };
    if !gates.budget_delete && !gates.budget_update {
        return deny_with_code(
            &request,
            400,
            "feature PodUnavailableBudget is invalid, please open via \
             feature-gate(PodUnavailableBudgetDeleteGate, PodUnavailableBudgetUpdateGate)"
                .into(),
        );
    }
    let others = match client {
        Some(client) => {
            let namespace = new
                .metadata
                .namespace
                .clone()
                .or_else(|| request.namespace.clone())
                .unwrap_or_default();
            let budgets: Api<PodUnavailableBudget> = Api::namespaced(client.clone(), &namespace);
            match budgets.list(&ListParams::default()).await {
                Ok(list) => list.items,
                Err(error) => {
                    return deny_with_code(
                        &request,
                        400,
                        format!("query other podUnavailableBudget failed, err: {error}"),
                    );
                }
            }
        }
        None => Vec::new(),
    };
    let errors = kruise_api::policy::validate(&new, old.as_ref(), &others);
    if errors.is_empty() {
        allow(&request)
    } else {
        deny_with_code(&request, 400, field::join(&errors))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testreview::{Review, response};
    use serde_json::{Value, json};

    fn review(operation: &str, spec: Value, old: Option<Value>) -> AdmissionReview<DynamicObject> {
        let object = |spec: Value| {
            json!({
                "apiVersion": "policy.kruise.io/v1alpha1", "kind": "PodUnavailableBudget",
                "metadata": {"name": "pub", "namespace": "ns"},
                "spec": spec,
            })
        };
        Review::of(
            "policy.kruise.io",
            "v1alpha1",
            "PodUnavailableBudget",
            PLURAL,
        )
        .operation(operation)
        .namespace("ns")
        .object(object(spec))
        .old(old.map(object))
        .build()
    }

    const ON: PolicyGates = PolicyGates {
        budget_delete: true,
        budget_update: false,
        vertical_scaling: false,
        deletion_protection: false,
        crd_cascading: false,
    };

    /// (operation, spec, old spec, gates, allowed, the message names)
    type Case = (
        &'static str,
        Value,
        Option<Value>,
        PolicyGates,
        bool,
        &'static str,
    );

    #[tokio::test]
    async fn answers() {
        let web = json!({"selector": {"matchLabels": {"app": "web"}}, "maxUnavailable": 1});
        let update_only = PolicyGates {
            budget_delete: false,
            budget_update: true,
            ..ON
        };
        let cases: Vec<Case> = vec![
            ("CREATE", web.clone(), None, ON, true, ""),
            ("CREATE", web.clone(), None, update_only, true, ""),
            (
                "CREATE",
                web.clone(),
                None,
                PolicyGates::default(),
                false,
                "feature-gate(PodUnavailableBudgetDeleteGate",
            ),
            (
                "CREATE",
                json!({"selector": {"matchLabels": {"app": "web"}}, "maxUnavailable": "150%"}),
                None,
                ON,
                false,
                "spec.maxUnavailable",
            ),
            (
                "CREATE",
                json!({"selector": {"matchExpressions": [{"key": "app", "operator": "Bogus"}]}, "maxUnavailable": 1}),
                None,
                ON,
                false,
                "spec.selector.matchExpressions[0].operator",
            ),
            (
                "UPDATE",
                json!({"selector": {"matchLabels": {"app": "web"}}, "maxUnavailable": 2}),
                Some(web.clone()),
                ON,
                true,
                "",
            ),
            (
                "UPDATE",
                json!({"selector": {"matchLabels": {"app": "db"}}, "maxUnavailable": 1}),
                Some(web.clone()),
                ON,
                false,
                "cannot be modified",
            ),
            // Deletes are not validated, whatever the gates.
            ("DELETE", json!({}), None, PolicyGates::default(), true, ""),
        ];
        for (i, (operation, spec, old, gates, allowed, names)) in cases.into_iter().enumerate() {
            let answer = validate(review(operation, spec, old), gates, None).await;
            let message = response(&answer).result.message.clone();
            assert_eq!(answer.allowed, allowed, "case {i}: {message}");
            assert!(message.contains(names), "case {i}: {message}");
            if !allowed {
                assert_eq!(response(&answer).result.code, 400, "case {i}");
            }
        }
    }
}
