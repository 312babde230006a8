//! policy.kruise.io: PodUnavailableBudget (v1alpha1 only, as OpenKruise v1.9.0 serves it) and the
//! well-known keys of the budget and of deletion protection.

pub mod v1alpha1;
mod validate;

pub use validate::validate;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

pub const GROUP: &str = "policy.kruise.io";

/// The Pod annotation naming the PodUnavailableBudget that guards the Pod (set by the PUB controller).
pub const POD_RELATED_PUB_ANNOTATION: &str = "kruise.io/related-pub";
/// The Pod label (value [`POD_GUARDED_VALUE`]) of a Pod whose deletion or eviction a budget guards:
/// the Pod webhook sets it on create, the budget controller on the Pods it finds and drops it when no
/// budget names the Pod any more. The webhook configuration sends the deletions of labelled Pods to
/// a webhook that fails closed, so that a budget holds while the manager is down. kruise-rs only.
pub const POD_GUARDED_LABEL: &str = "policy.kruise.io/guarded";
pub const POD_GUARDED_VALUE: &str = "true";
/// PUB annotation: the operations the budget guards, comma-separated (`DELETE,EVICT,UPDATE,RESIZE`);
/// absent or empty: DELETE, UPDATE and EVICT.
pub const PUB_PROTECT_OPERATIONS_ANNOTATION: &str = "kruise.io/pub-protect-operations";
/// PUB annotation: the total replicas to count instead of the workloads' scale.
pub const PUB_PROTECT_TOTAL_REPLICAS_ANNOTATION: &str = "pub.kruise.io/protect-total-replicas";
/// Pod annotation `"true"`: the budget never guards this Pod.
pub const POD_NO_PROTECT_ANNOTATION: &str = "pub.kruise.io/no-protect";

/// The label that protects a Namespace, a workload or a CRD from deletion (`Always` or `Cascading`).
pub const DELETE_PROTECTION_LABEL: &str = "policy.kruise.io/delete-protection";
pub const DELETE_PROTECTION_ALWAYS: &str = "Always";
pub const DELETE_PROTECTION_CASCADING: &str = "Cascading";

/// PodUnavailableBudget's CRD, policy.kruise.io's only one.
pub fn crd() -> CustomResourceDefinition {
    v1alpha1::PodUnavailableBudget::crd()
}
