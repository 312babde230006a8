//! The Pods an Advanced DaemonSet creates (upstream `pkg/controller/daemonset`), as Kubernetes'
//! DaemonSet controller builds them plus OpenKruise's readiness gate. Pure.

use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kruise_api::daemonset::v1beta1::{DaemonSet, ROLLING_UPDATE_IN_PLACE_IF_POSSIBLE};
use kruise_api::keys;
use kruise_core::nodefit;

/// `deprecated.daemonset.template.generation`: when the set carries it, its Pods get the
/// `pod-template-generation` label, as upstream's.
pub const ANNOTATION_TEMPLATE_GENERATION: &str = "deprecated.daemonset.template.generation";
pub const LABEL_TEMPLATE_GENERATION: &str = "pod-template-generation";

/// Why a Pod cannot be built.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BuildError {
    #[error("the DaemonSet has no {0}")]
    Missing(&'static str),
}

fn set_name(ds: &DaemonSet) -> Result<&str, BuildError> {
    ds.metadata
        .name
        .as_deref()
        .ok_or(BuildError::Missing("metadata.name"))
}

/// The controller reference of the set's Pods and revisions.
pub fn owner_reference(ds: &DaemonSet) -> Result<OwnerReference, BuildError> {
    crate::claim::controller_reference(ds).map_err(BuildError::Missing)
}

/// The daemon Pod for `node` from `template` at revision `hash` (the short hash): `generateName`
/// `<set>-`, the template's metadata, `controller-revision-hash`, the default DaemonSet tolerations,
/// required node affinity replaced by `matchFields metadata.name In [node]` (the real scheduler binds
/// it), and for InPlaceIfPossible the `InPlaceUpdateReady` readiness gate.
pub fn build_pod(
    ds: &DaemonSet,
    template: &PodTemplateSpec,
    hash: &str,
    node: &str,
) -> Result<Pod, BuildError> {
    let name = set_name(ds)?;
    let meta = template.metadata.clone().unwrap_or_default();
    let mut labels = meta.labels.unwrap_or_default();
    labels.insert(
        keys::LABEL_NATIVE_CONTROLLER_REVISION_HASH.to_owned(),
        hash.to_owned(),
    );
    if let Some(generation) = ds
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_TEMPLATE_GENERATION))
    {
        labels.insert(LABEL_TEMPLATE_GENERATION.to_owned(), generation.clone());
    }
    let mut spec = template.spec.clone().unwrap_or_default();
    nodefit::add_daemon_tolerations(&mut spec);
    nodefit::bind_to_node(&mut spec, node);
    let in_place = ds
        .spec
        .update_strategy
        .rolling_update
        .as_ref()
        .is_some_and(|r| r.type_ == ROLLING_UPDATE_IN_PLACE_IF_POSSIBLE);
    if in_place {
        kruise_core::pods::add_readiness_gate(&mut spec, keys::CONDITION_IN_PLACE_UPDATE_READY);
    }
    Ok(Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{name}-")),
            namespace: ds.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: meta.annotations,
            finalizers: meta.finalizers,
            owner_references: Some(vec![owner_reference(ds)?]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ds(yaml: &str) -> DaemonSet {
        let mut ds: DaemonSet = serde_yaml::from_str(yaml).expect("yaml");
        ds.metadata.uid = Some("uid-1".into());
        ds.metadata.namespace = Some("ns".into());
        ds
    }

    const SEED: &str = r#"
apiVersion: apps.kruise.io/v1beta1
kind: DaemonSet
metadata: {name: guestbook-ds}
spec:
  selector: {matchLabels: {app: guestbook-daemon}}
  template:
    metadata: {labels: {app: guestbook-daemon}}
    spec:
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms: [{matchExpressions: [{key: zone, operator: In, values: [a]}]}]
      tolerations: [{key: node.kubernetes.io/unschedulable, operator: Equal, value: x, effect: NoSchedule}]
      containers: [{name: daemon, image: "openkruise/guestbook:v1"}]
  updateStrategy: {type: RollingUpdate, rollingUpdate: {rollingUpdateType: Standard, maxUnavailable: 1}}
"#;

    #[test]
    fn a_daemon_pod_is_bound_by_affinity_and_tolerates_node_conditions() {
        let set = ds(SEED);
        let template = set.spec.template.clone();
        let pod = build_pod(&set, &template, "5d4f8", "sim-1").expect("pod");
        assert_eq!(pod.metadata.generate_name.as_deref(), Some("guestbook-ds-"));
        assert_eq!(pod.metadata.name, None);
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels["controller-revision-hash"], "5d4f8");
        assert_eq!(labels["app"], "guestbook-daemon");
        let owner = &pod.metadata.owner_references.clone().unwrap_or_default()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("DaemonSet", Some(true))
        );
        let spec = pod.spec.expect("spec");
        assert_eq!(nodefit::bound_node(&spec), Some("sim-1"));
        let terms = &spec
            .affinity
            .and_then(|a| a.node_affinity)
            .and_then(|n| n.required_during_scheduling_ignored_during_execution)
            .expect("required")
            .node_selector_terms;
        assert_eq!(terms.len(), 1, "the template's terms are replaced");
        let tolerations = spec.tolerations.unwrap_or_default();
        let keys: Vec<_> = tolerations
            .iter()
            .map(|t| {
                format!(
                    "{}:{}:{}",
                    t.key.as_deref().unwrap_or_default(),
                    t.operator.as_deref().unwrap_or_default(),
                    t.effect.as_deref().unwrap_or_default()
                )
            })
            .collect();
        assert_eq!(
            keys,
            [
                "node.kubernetes.io/unschedulable:Exists:NoSchedule",
                "node.kubernetes.io/not-ready:Exists:NoExecute",
                "node.kubernetes.io/unreachable:Exists:NoExecute",
                "node.kubernetes.io/disk-pressure:Exists:NoSchedule",
                "node.kubernetes.io/memory-pressure:Exists:NoSchedule",
                "node.kubernetes.io/pid-pressure:Exists:NoSchedule",
            ]
        );
        assert!(spec.readiness_gates.is_none(), "Standard: no gate");
    }

    #[test]
    fn in_place_if_possible_pods_carry_the_readiness_gate() {
        let set = ds(&SEED.replace("Standard", "InPlaceIfPossible"));
        let template = set.spec.template.clone();
        let pod = build_pod(&set, &template, "h", "n").expect("pod");
        let gates = pod.spec.and_then(|s| s.readiness_gates).unwrap_or_default();
        assert_eq!(gates.len(), 1);
        assert_eq!(gates[0].condition_type, "InPlaceUpdateReady");
    }
}
