//! Helpers for the WorkloadSpread end-to-end tests: the manifests a user writes to spread a CloneSet
//! over the test bed's zones.

use k8s_openapi::api::core::v1::Pod;

use crate::ZONE;
use crate::cloneset_kit::annotation;

/// The annotation naming the WorkloadSpread and subset a Pod was placed by.
pub const MATCHED: &str = "apps.kruise.io/matched-workloadspread";

/// The subset the Pod's [`MATCHED`] annotation names, if it has one.
pub fn matched_subset(pod: &Pod) -> Option<String> {
    let matched: serde_json::Value = serde_json::from_str(annotation(pod, MATCHED)?).ok()?;
    matched["subset"].as_str().map(str::to_owned)
}

/// A subset of the nodes of zone `zone` (by their [`ZONE`] label) holding at most `max` Pods (a count
/// or a percentage; `None`: no limit), whose Pods it labels `<label>: <zone>` when `label` is given.
pub fn zone_subset(zone: &str, max: Option<&str>, label: Option<&str>) -> String {
    let max = max
        .map(|m| format!("\n    maxReplicas: {m}"))
        .unwrap_or_default();
    let patch = label
        .map(|l| format!("\n    patch:\n      metadata:\n        labels:\n          {l}: {zone}"))
        .unwrap_or_default();
    format!(
        r#"
  - name: {zone}
    requiredNodeSelectorTerm:
      matchExpressions:
      - key: {ZONE}
        operator: In
        values: [{zone}]{max}{patch}"#
    )
}

/// A WorkloadSpread `name` of the CloneSet `cloneset` over `subsets` (see [`zone_subset`]).
pub fn cloneset_spread(name: &str, cloneset: &str, subsets: &[String]) -> String {
    workload_spread(
        name,
        "apps.kruise.io/v1alpha1",
        "CloneSet",
        cloneset,
        subsets,
    )
}

/// A WorkloadSpread `name` of the workload `kind` `target` (of `api_version`) over `subsets`.
pub fn workload_spread(
    name: &str,
    api_version: &str,
    kind: &str,
    target: &str,
    subsets: &[String],
) -> String {
    let subsets = subsets.concat();
    format!(
        r#"apiVersion: apps.kruise.io/v1alpha1
kind: WorkloadSpread
metadata: {{name: {name}}}
spec:
  targetRef: {{apiVersion: {api_version}, kind: {kind}, name: {target}}}
  subsets:{subsets}
"#
    )
}
