//! Which SidecarSets apply to a Pod: namespace scope, namespace selector, Pod selector.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kruise_api::sidecarset::LABEL_NAMESPACE_NAME;
use kruise_api::sidecarset::v1beta1::SidecarSet;
use kruise_api::validation::{selector_is_empty, selector_matches, selector_matches_by};

/// Never injected, whatever the SidecarSets say: the cluster's own components live there, and a broken
/// sidecar must not be able to take them down.
pub const ALWAYS_EXCLUDED_NAMESPACE: &str = "kube-system";

/// A Namespace carrying this label (any value) is not sent to the Pod webhook (OpenKruise's
/// `control-plane DoesNotExist` namespace selector), so its Pods are never injected.
pub const OPT_OUT_NAMESPACE_LABEL: &str = "control-plane";

/// The Pod's namespace; a Pod posted without one is created in `default` (as upstream assumes).
pub fn pod_namespace(pod: &Pod) -> &str {
    namespace_or_default(pod.metadata.namespace.as_deref())
}

/// A Pod's namespace as [`pod_namespace`] reads it, from the namespace alone (a cache key).
pub fn namespace_or_default(namespace: Option<&str>) -> &str {
    namespace.filter(|ns| !ns.is_empty()).unwrap_or("default")
}

/// Whether `sidecarset` applies to `pod`.
///
/// - Pods in `kube-system` or in one of `excluded_namespaces` never match, nor do inactive Pods
///   (finished or being deleted).
/// - Otherwise as [`selects`].
///
/// `injectionStrategy.paused` is not looked at: a paused SidecarSet still matches its Pods (the upgrade
/// controller counts them); [`super::inject`] skips it.
pub fn matches(
    sidecarset: &SidecarSet,
    pod: &Pod,
    namespace_labels: &BTreeMap<String, String>,
    excluded_namespaces: &[String],
) -> bool {
    let namespace = pod_namespace(pod);
    if namespace == super::ALWAYS_EXCLUDED_NAMESPACE
        || excluded_namespaces.iter().any(|ns| ns == namespace)
        || !crate::pods::is_active(pod)
    {
        return false;
    }
    selects(sidecarset, pod, namespace_labels)
}

/// Whether `sidecarset`'s selectors take in `pod`, whatever the Pod's state and namespace:
///
/// - `namespaceSelector` (v1alpha1's `namespace` arrives here as a selector on
///   `kubernetes.io/metadata.name`) is matched against `namespace_labels`, the labels of the Pod's
///   Namespace. The name label is added if the caller's copy lacks it, since the apiserver always sets it.
/// - `selector` must be set and non-empty: an empty selector matches nothing (upstream), so that a
///   typo cannot inject a sidecar into every Pod of the cluster.
pub fn selects(
    sidecarset: &SidecarSet,
    pod: &Pod,
    namespace_labels: &BTreeMap<String, String>,
) -> bool {
    let labels = pod.metadata.labels.as_ref();
    selects_by(
        sidecarset,
        pod_namespace(pod),
        |key| labels.and_then(|l| l.get(key)).map(String::as_str),
        namespace_labels,
    )
}

/// [`selects`] for a Pod known by its namespace and its labels (`label` gives a key's value), as a
/// cache holds them, without the Pod.
pub fn selects_by<'a>(
    sidecarset: &SidecarSet,
    namespace: &str,
    label: impl Fn(&str) -> Option<&'a str>,
    namespace_labels: &BTreeMap<String, String>,
) -> bool {
    let Some(selector) = &sidecarset.spec.selector else {
        return false;
    };
    if selector_is_empty(selector) || !selector_matches_by(selector, label) {
        return false;
    }
    let Some(ns_selector) = &sidecarset.spec.namespace_selector else {
        return true;
    };
    if namespace_labels.contains_key(LABEL_NAMESPACE_NAME) {
        return selector_matches(ns_selector, namespace_labels);
    }
    let mut labels = namespace_labels.clone();
    labels.insert(LABEL_NAMESPACE_NAME.to_string(), namespace.to_string());
    selector_matches(ns_selector, &labels)
}
