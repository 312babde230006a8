//! policy.kruise.io admission: the PodUnavailableBudget checks of Pod deletion, eviction and update
//! (`/validate-pod`, upstream's `vpod.kb.io` and `vpodeviction.kb.io`), and deletion protection of
//! Namespaces, CRDs and workloads labelled `policy.kruise.io/delete-protection`.
//!
//! The decisions are kruise-core's (`kruise_core::podunavailablebudget`); a disruption is taken from the budget by
//! `kruise_controllers::disruptions` (shared with the in-place update engine), which
//! records it with a resourceVersion precondition so that concurrent evictions never take more
//! than allowed.

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kruise_api::policy::v1alpha1::{PodUnavailableBudget, PubOperation};
use kruise_controllers::disruptions::{Disruptions, related_pub};
use kruise_controllers::driver::caches::Shared;
use kruise_core::podunavailablebudget::{self as budget, Protection};
use kube::api::{ApiResource, ListParams};
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::{DynamicObject, GroupVersionKind};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client};
use serde_json::Value;

use crate::admission::{Answer, allow, request_of};
use crate::freshness::{Freshness, PolicyKind};
use crate::relatedpub::RelatedPub;

/// Path of the Pod validating webhooks (upstream's).
pub const VALIDATE_POD_PATH: &str = "/validate-pod";
/// Paths of the deletion protection webhooks (upstream's, and one for the apps.kruise.io workloads,
/// whose upstream webhooks also validate create and update).
pub const VALIDATE_NAMESPACE_PATH: &str = "/validate-namespace";
pub const VALIDATE_CRD_PATH: &str = "/validate-customresourcedefinition";
pub const VALIDATE_DEPLOYMENT_PATH: &str = "/validate-apps-deployment";
pub const VALIDATE_REPLICASET_PATH: &str = "/validate-apps-replicaset";
pub const VALIDATE_STATEFULSET_PATH: &str = "/validate-apps-statefulset";
pub const VALIDATE_KRUISE_WORKLOAD_DELETION_PATH: &str = "/validate-apps-kruise-io-deletion";
pub const VALIDATE_SERVICE_PATH: &str = "/validate-service";
pub const VALIDATE_INGRESS_PATH: &str = "/validate-ingress";

/// Every path [`Policy::review_deletion`] serves.
pub const DELETION_PATHS: &[&str] = &[
    VALIDATE_NAMESPACE_PATH,
    VALIDATE_CRD_PATH,
    VALIDATE_DEPLOYMENT_PATH,
    VALIDATE_REPLICASET_PATH,
    VALIDATE_STATEFULSET_PATH,
    VALIDATE_KRUISE_WORKLOAD_DELETION_PATH,
    VALIDATE_SERVICE_PATH,
    VALIDATE_INGRESS_PATH,
];

/// The feature gates the policy webhooks honour.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PolicyGates {
    /// `PodUnavailableBudgetDeleteGate`: guard deletion and eviction.
    pub budget_delete: bool,
    /// `PodUnavailableBudgetUpdateGate`: guard updates that change the spec.
    pub budget_update: bool,
    /// `InPlacePodVerticalScaling`.
    pub vertical_scaling: bool,
    /// `ResourcesDeletionProtection`.
    pub deletion_protection: bool,
    /// `DeletionProtectionForCRDCascadingGate`.
    pub crd_cascading: bool,
}

/// The Warning a refused disruption leaves on its Pod, and its reporter: `take` publishes it
/// (see `disruptions::record_refusals`).
pub use kruise_controllers::disruptions::{EVENT_REPORTER, REASON_PREVENTED};

/// The policy webhooks' handlers. Without a client every request is allowed.
#[derive(Clone, Default)]
pub struct Policy {
    client: Option<Client>,
    gates: PolicyGates,
    /// Read-your-writes ([`Policy::with_freshness`]).
    fresh: Option<FreshBudgets>,
    /// Where disruptions take their budget's units: the process's ([`Policy::with_disruptions`]),
    /// else this policy's own.
    disruptions: Option<Disruptions>,
}

/// What a disruption reads to be decided with every budget written before it.
#[derive(Clone)]
struct FreshBudgets {
    freshness: Freshness,
    budgets: Shared<PodUnavailableBudget>,
    related: RelatedPub,
}

/// How long after its creation a budget without a status yet is waited for (its controller
/// computes the first one within moments); an older one is decided on as it is.
const FIRST_STATUS_WITHIN: SignedDuration = SignedDuration::from_secs(60);

fn forbidden(request: &AdmissionRequest<DynamicObject>, message: String) -> Answer {
    let mut response = AdmissionResponse::from(request).deny(message);
    response.result.code = 403;
    response.result.reason = "Forbidden".into();
    Answer {
        review: response.into_review(),
        allowed: false,
    }
}

fn decode<T: serde::de::DeserializeOwned>(object: &DynamicObject) -> Result<T, String> {
    serde_json::to_value(object)
        .map_err(|e| e.to_string())
        .and_then(|v| kruise_api::kinds::decode(v).map_err(|e| e.to_string()))
}

fn labels(object: &DynamicObject) -> Option<&std::collections::BTreeMap<String, String>> {
    object.metadata.labels.as_ref()
}

impl Policy {
    pub fn new(client: Client, gates: PolicyGates) -> Self {
        Self {
            disruptions: Some(Disruptions::new(client.clone())),
            client: Some(client),
            gates,
            fresh: None,
        }
    }

    /// Takes budget units through the process's `disruptions` (shared with the in-place updates of
    /// the workload controllers, so that decisions on one budget are batched together).
    pub fn with_disruptions(mut self, disruptions: Disruptions) -> Self {
        self.disruptions = Some(disruptions);
        self
    }

    /// Decides each disruption with every PodUnavailableBudget written before it arrived:
    /// waits (at most `freshness.wait()` after its arrival) until the process's budget cache
    /// (`budgets`) shows them, names the budget of a Pod created before it (the controller has
    /// not yet marked the Pod, or marked it for a budget deleted since), and waits for a budget
    /// created moments ago to get its first status.
    pub fn with_freshness(
        mut self,
        freshness: Freshness,
        budgets: Shared<PodUnavailableBudget>,
    ) -> Self {
        self.fresh = Some(FreshBudgets {
            related: RelatedPub::new(budgets.store().clone(), self.client.clone()),
            freshness,
            budgets,
        });
        self
    }

    /// Read-your-writes for a disruption of `pod` (in `namespace`): see [`Policy::with_freshness`].
    /// Whether the budget cache is known to show every write made before the request arrived
    /// (then a refusal decided on it stands without reading the budget again).
    async fn catch_up(
        &self,
        pod: &mut Pod,
        operation: PubOperation,
        namespace: &str,
        arrived: tokio::time::Instant,
    ) -> bool {
        let Some(fresh) = &self.fresh else {
            return false;
        };
        // A Pod that does not count (not available) or opts out passes whatever the budget.
        if !budget::is_ready(pod)
            || !budget::is_state_consistent(pod)
            || kruise_core::pods::annotation(pod, kruise_api::policy::POD_NO_PROTECT_ANNOTATION)
                == Some("true")
        {
            return false;
        }
        let late = fresh
            .freshness
            .catch_up(
                &[(PolicyKind::PodUnavailableBudget, Some(namespace))],
                arrived,
            )
            .await;
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        if !late.is_empty() {
            tracing::warn!(pod = %format!("{namespace}/{pod_name}"), operation = operation.as_str(), %late, "PodUnavailableBudget check decides on a cache not known to show every earlier write");
        }
        // A Pod the controller has not marked yet, or marked for a budget since deleted: the
        // budget that selects it now.
        let store = fresh.budgets.store();
        let named_exists = related_pub(pod)
            .is_some_and(|name| store.get(&ObjectRef::new(name).within(namespace)).is_some());
        // An update (or resize) is decided on the budget the Pod names; only a deletion or an
        // eviction looks for the budget of a Pod not marked yet.
        if !matches!(operation, PubOperation::Update | PubOperation::Resize) && !named_exists {
            fresh.related.annotate(pod, namespace).await;
        }
        let current = late.is_empty();
        let Some(name) = related_pub(pod).map(str::to_string) else {
            return current;
        };
        let key = ObjectRef::new(&name).within(namespace);
        let ready = || {
            store
                .get(&key)
                .is_none_or(|budget| !awaiting_first_status(&budget, Timestamp::now()))
        };
        if !fresh
            .freshness
            .wait_for(
                PolicyKind::PodUnavailableBudget,
                "PodUnavailableBudgetStatus",
                arrived,
                ready,
            )
            .await
        {
            tracing::warn!(pod = %format!("{namespace}/{pod_name}"), operation = operation.as_str(), budget = %name, "PodUnavailableBudget has no status yet; the disruption is decided without it");
            return false;
        }
        current
    }

    /// The feature gates these webhooks honour.
    pub fn gates(&self) -> PolicyGates {
        self.gates
    }

    /// The client the webhooks read the cluster with (none: every request is allowed).
    pub fn client(&self) -> Option<&Client> {
        self.client.as_ref()
    }

    /// `/validate-pod`: Pod UPDATE (with the update gate) and DELETE, and `pods/eviction` CREATE.
    pub async fn review_pod(&self, review: AdmissionReview<DynamicObject>) -> Answer {
        self.review_pod_with(review, None, tokio::time::Instant::now())
            .await
    }

    /// Starts reading what a disruption arriving at `arrived` will be decided with (the budgets'
    /// consistent list, [`Policy::with_freshness`]) while the request reads something else first
    /// (an eviction, its Pod).
    pub fn prefetch(&self, arrived: tokio::time::Instant) {
        if let Some(fresh) = &self.fresh {
            fresh
                .freshness
                .prefetch(&[PolicyKind::PodUnavailableBudget], arrived);
        }
    }

    /// [`Self::review_pod`] of a request that arrived at `arrived`, with the Pod of an eviction
    /// already read (`evicted`), so that the WorkloadSpread part of the same request does not read
    /// it again.
    pub async fn review_pod_with(
        &self,
        review: AdmissionReview<DynamicObject>,
        evicted: Option<Pod>,
        arrived: tokio::time::Instant,
    ) -> Answer {
        let request = match request_of(review) {
            Ok(request) => request,
            Err(answer) => return *answer,
        };
        let Some(client) = self.client.as_ref() else {
            return allow(&request);
        };
        let sub_resource = request.sub_resource.as_deref().unwrap_or_default();
        let (mut pod, operation) = match request.operation {
            Operation::Update if self.gates.budget_update && sub_resource.is_empty() => {
                let (Some(new), Some(old)) = (&request.object, &request.old_object) else {
                    return allow(&request);
                };
                let (new, old): (Pod, Pod) = match (decode(new), decode(old)) {
                    (Ok(new), Ok(old)) => (new, old),
                    (Err(e), _) | (_, Err(e)) => {
                        return crate::admission::deny(
                            &request,
                            format!("cannot read the Pod: {e}"),
                        );
                    }
                };
                if related_pub(&new).is_none() || !budget::update_may_disrupt(&old, &new) {
                    return allow(&request);
                }
                // A resize that keeps the Pod available is RESIZE, which a budget guards only
                // when its annotation names it (or UPDATE without InPlacePodVerticalScaling).
                let operation = if budget::resize_in_place(&old, &new) {
                    PubOperation::Resize
                } else {
                    PubOperation::Update
                };
                (old, operation)
            }
            Operation::Delete if self.gates.budget_delete && sub_resource.is_empty() => {
                let Some(old) = &request.old_object else {
                    return allow(&request);
                };
                match decode::<Pod>(old) {
                    Ok(pod) => (pod, PubOperation::Delete),
                    Err(e) => {
                        return crate::admission::deny(
                            &request,
                            format!("cannot read the Pod: {e}"),
                        );
                    }
                }
            }
            Operation::Create if self.gates.budget_delete && sub_resource == "eviction" => {
                let namespace = request.namespace.clone().unwrap_or_default();
                let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
                let read = match evicted {
                    Some(pod) => Ok(Some(pod)),
                    None => {
                        // The budgets are listed while the Pod is read.
                        self.prefetch(arrived);
                        pods.get_opt(&request.name).await
                    }
                };
                match read {
                    Ok(Some(pod)) => (pod, PubOperation::Evict),
                    // The apiserver answers the eviction of a missing Pod itself.
                    Ok(None) => return allow(&request),
                    Err(e) => {
                        return crate::admission::deny(
                            &request,
                            format!("cannot read Pod {namespace}/{}: {e}", request.name),
                        );
                    }
                }
            }
            _ => return allow(&request),
        };
        let namespace = pod
            .metadata
            .namespace
            .clone()
            .or_else(|| request.namespace.clone())
            .unwrap_or_default();
        if pod.metadata.namespace.is_none() {
            pod.metadata.namespace = Some(namespace.clone());
        }
        let cache_current = self
            .catch_up(&mut pod, operation, &namespace, arrived)
            .await;
        let Some(pub_name) = related_pub(&pod).map(str::to_string) else {
            return allow(&request);
        };
        let Some(disruptions) = &self.disruptions else {
            return allow(&request);
        };
        match disruptions
            .take(
                &pod,
                operation,
                request.dry_run || eviction_dry_run(&request),
                self.gates.vertical_scaling,
                cache_current,
            )
            .await
        {
            Ok(None) => allow(&request),
            Ok(Some(refusal)) => {
                tracing::info!(pod = %format!("{namespace}/{}", request.name), operation = operation.as_str(), budget = %pub_name, user = ?request.user_info.username, %refusal, "PodUnavailableBudget refused a disruption");
                forbidden(&request, refusal)
            }
            Err(e) => crate::admission::deny(
                &request,
                format!("cannot check PodUnavailableBudget {namespace}/{pub_name}: {e}"),
            ),
        }
    }

    /// The deletion protection webhooks: refuses deleting a Namespace, CRD or workload labelled
    /// `policy.kruise.io/delete-protection` as upstream does.
    pub async fn review_deletion(&self, review: AdmissionReview<DynamicObject>) -> Answer {
        let request = match request_of(review) {
            Ok(request) => request,
            Err(answer) => return *answer,
        };
        if !self.gates.deletion_protection || request.operation != Operation::Delete {
            return allow(&request);
        }
        let Some(old) = request.old_object.as_ref() else {
            return allow(&request);
        };
        let deleting = old.metadata.deletion_timestamp.is_some();
        let protection = budget::protection(labels(old), deleting);
        let refusal = match (request.kind.kind.as_str(), protection) {
            (_, Protection::None) => None,
            (_, Protection::Always) => Some(budget::always_refusal(
                kruise_api::policy::DELETE_PROTECTION_ALWAYS,
            )),
            // Services and Ingresses know only Always (upstream's).
            ("Service" | "Ingress", Protection::Cascading) => None,
            ("Namespace", Protection::Cascading) => self.namespace_cascading(&request.name).await,
            ("CustomResourceDefinition", Protection::Cascading) => self.crd_cascading(old).await,
            (_, Protection::Cascading) => {
                let replicas = old
                    .data
                    .pointer("/spec/replicas")
                    .and_then(Value::as_i64)
                    .map(|r| i32::try_from(r).unwrap_or(i32::MAX));
                budget::workload_deletion(labels(old), deleting, replicas)
            }
        };
        match refusal {
            Some(message) => forbidden(&request, message),
            None => allow(&request),
        }
    }

    async fn namespace_cascading(&self, namespace: &str) -> Option<String> {
        let client = self.client.as_ref()?;
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let active = match pods.list(&ListParams::default()).await {
            Ok(list) => list
                .items
                .iter()
                .filter(|p| kruise_core::pods::is_active(p))
                .count(),
            Err(e) => {
                return Some(format!(
                    "forbidden by ResourcesProtectionDeletion for list pods error: {e}"
                ));
            }
        };
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
        let bound = match claims.list(&ListParams::default()).await {
            Ok(list) => list
                .items
                .iter()
                .filter(|c| {
                    c.metadata.deletion_timestamp.is_none()
                        && c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
                })
                .count(),
            Err(e) => {
                return Some(format!(
                    "forbidden by ResourcesProtectionDeletion for list pvc error: {e}"
                ));
            }
        };
        budget::namespace_cascading(active, bound)
    }

    async fn crd_cascading(&self, old: &DynamicObject) -> Option<String> {
        if !self.gates.crd_cascading {
            return Some(
                "feature-gate DeletionProtectionForCRDCascadingGate is not enabled".to_string(),
            );
        }
        let client = self.client.as_ref()?;
        let crd: CustomResourceDefinition = match decode(old) {
            Ok(crd) => crd,
            Err(e) => return Some(format!("cannot read the CustomResourceDefinition: {e}")),
        };
        let version = crd
            .spec
            .versions
            .iter()
            .find(|v| v.storage)
            .or_else(|| crd.spec.versions.first())?;
        let gvk = GroupVersionKind::gvk(&crd.spec.group, &version.name, &crd.spec.names.kind);
        let resource = ApiResource::from_gvk_with_plural(&gvk, &crd.spec.names.plural);
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        match api.list(&ListParams::default()).await {
            Ok(list) => budget::crd_cascading(
                list.items
                    .iter()
                    .filter(|o| o.metadata.deletion_timestamp.is_none())
                    .count(),
            ),
            Err(e) => Some(format!(
                "failed to list CRs of {}/{}, Kind={}: {e}",
                gvk.group, gvk.version, gvk.kind
            )),
        }
    }
}

/// An Eviction's own `deleteOptions.dryRun` (`kubectl drain --dry-run=server` sets it there), which
/// upstream honours beside the request's.
fn eviction_dry_run(request: &AdmissionRequest<DynamicObject>) -> bool {
    request.sub_resource.as_deref() == Some("eviction")
        && request
            .object
            .as_ref()
            .and_then(|o| o.data.pointer("/deleteOptions/dryRun"))
            .and_then(Value::as_array)
            .is_some_and(|modes| !modes.is_empty())
}

/// Whether `budget` was created moments ago (within [`FIRST_STATUS_WITHIN`] of `now`, or after
/// it by a skewed clock) and its
/// controller has not written its first status yet: a disruption decided now would pass it by
/// (a budget without a status desires no available Pod).
fn awaiting_first_status(budget: &PodUnavailableBudget, now: Timestamp) -> bool {
    let unobserved = budget
        .status
        .as_ref()
        .is_none_or(|status| status.observed_generation == 0);
    let young = budget
        .metadata
        .creation_timestamp
        .as_ref()
        .is_some_and(|created| now.duration_since(created.0) < FIRST_STATUS_WITHIN);
    unobserved && young && budget.metadata.deletion_timestamp.is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testreview::Review;
    use serde_json::json;

    fn review(kind: &str, operation: &str, old: Value) -> AdmissionReview<DynamicObject> {
        Review::of("apps.kruise.io", "v1beta1", kind, "clonesets")
            .operation(operation)
            .name("web")
            .namespace("d")
            .old(Some(old))
            .build()
    }

    fn cloneset(protection: &str, replicas: i64) -> Value {
        json!({
            "apiVersion": "apps.kruise.io/v1beta1", "kind": "CloneSet",
            "metadata": {"name": "web", "namespace": "d",
                         "labels": {"policy.kruise.io/delete-protection": protection}},
            "spec": {"replicas": replicas}
        })
    }

    #[test]
    fn only_a_young_budget_without_a_status_is_waited_for() {
        let now: Timestamp = "2025-01-01T00:10:00Z".parse().expect("time");
        let budget = |created: &str, status: Option<i64>, deleting: bool| {
            let mut budget: PodUnavailableBudget = serde_json::from_value(json!({
                "apiVersion": "policy.kruise.io/v1alpha1", "kind": "PodUnavailableBudget",
                "metadata": {"name": "b", "namespace": "d", "creationTimestamp": created,
                             "generation": 1},
                "spec": {"maxUnavailable": 0},
            }))
            .expect("budget");
            if let Some(observed) = status {
                budget.status = Some(kruise_api::policy::v1alpha1::PodUnavailableBudgetStatus {
                    observed_generation: observed,
                    ..Default::default()
                });
            }
            if deleting {
                budget.metadata.deletion_timestamp = budget.metadata.creation_timestamp.clone();
            }
            budget
        };
        let cases = [
            (
                "created 2 s ago, no status",
                "2025-01-01T00:09:58Z",
                None,
                false,
                true,
            ),
            (
                "an empty status",
                "2025-01-01T00:09:58Z",
                Some(0),
                false,
                true,
            ),
            (
                "its first status written",
                "2025-01-01T00:09:58Z",
                Some(1),
                false,
                false,
            ),
            (
                "created 5 minutes ago",
                "2025-01-01T00:05:00Z",
                None,
                false,
                false,
            ),
            ("being deleted", "2025-01-01T00:09:58Z", None, true, false),
            (
                "created after now (clock skew)",
                "2025-01-01T00:10:03Z",
                None,
                false,
                true,
            ),
        ];
        for (name, created, status, deleting, want) in cases {
            assert_eq!(
                awaiting_first_status(&budget(created, status, deleting), now),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn an_evictions_own_dry_run_counts() {
        let eviction = |options: Value| -> AdmissionRequest<DynamicObject> {
            let review = Review::of("policy", "v1", "Eviction", "")
                .sub_resource("", "v1", "pods", "eviction")
                .namespace("d")
                .object(json!({"apiVersion": "policy/v1", "kind": "Eviction",
                               "metadata": {"name": "p"}, "deleteOptions": options}))
                .build();
            review.try_into().expect("request")
        };
        assert!(eviction_dry_run(&eviction(json!({"dryRun": ["All"]}))));
        assert!(!eviction_dry_run(&eviction(json!({}))));
        assert!(!eviction_dry_run(&eviction(json!({"dryRun": []}))));
    }

    #[tokio::test]
    async fn workload_deletion_protection_follows_the_gate_and_the_label() {
        let on = Policy {
            gates: PolicyGates {
                deletion_protection: true,
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = on
            .review_deletion(review("CloneSet", "DELETE", cloneset("Always", 0)))
            .await;
        assert!(!answer.allowed);
        let response = answer.review.response.expect("response");
        assert_eq!(response.result.code, 403);
        assert_eq!(
            response.result.message,
            "forbidden by ResourcesProtectionDeletion for policy.kruise.io/delete-protection=Always"
        );
        let answer = on
            .review_deletion(review("CloneSet", "DELETE", cloneset("Cascading", 2)))
            .await;
        assert!(!answer.allowed);
        let answer = on
            .review_deletion(review("CloneSet", "DELETE", cloneset("Cascading", 0)))
            .await;
        assert!(answer.allowed);
        let off = Policy::default();
        let answer = off
            .review_deletion(review("CloneSet", "DELETE", cloneset("Always", 1)))
            .await;
        assert!(answer.allowed, "gate off");
    }
}
