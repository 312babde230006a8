//! The Pods and claims an Advanced StatefulSet creates (Kubernetes' `newVersionedStatefulSetPod`
//! plus OpenKruise's readiness gate), and the owner references its claims carry under
//! `persistentVolumeClaimRetentionPolicy` (Kubernetes 1.27+). Pure.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kruise_api::keys;
use kruise_api::quantity::Quantity;
use kruise_api::statefulset::v1beta1::{PVC_RETENTION_DELETE, StatefulSet};
use kruise_core::pods::LifecycleState;

/// `statefulset.kubernetes.io/pod-name`.
pub const LABEL_POD_NAME: &str = "statefulset.kubernetes.io/pod-name";
/// `apps.kubernetes.io/pod-index`.
pub const LABEL_POD_INDEX: &str = "apps.kubernetes.io/pod-index";

/// Why a Pod or claim cannot be built.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BuildError {
    #[error("the StatefulSet has no {0}")]
    Missing(&'static str),
}

fn set_name(set: &StatefulSet) -> Result<&str, BuildError> {
    set.metadata
        .name
        .as_deref()
        .ok_or(BuildError::Missing("metadata.name"))
}

/// The controller reference of the set's Pods and revisions.
pub fn owner_reference(set: &StatefulSet) -> Result<OwnerReference, BuildError> {
    crate::claim::controller_reference(set).map_err(BuildError::Missing)
}

/// `<claim>-<set>-<ordinal>`.
pub fn claim_name(template: &str, set: &str, ordinal: i32) -> String {
    format!("{template}-{set}-{ordinal}")
}

/// The Pod at `ordinal` from `template` (the template of `revision`), as Kubernetes'
/// `newVersionedStatefulSetPod` builds it: the template's labels, annotations and finalizers;
/// `generateName` `<set>-` and name `<set>-<ordinal>`; the identity labels; hostname = name and
/// subdomain = serviceName; a volume per claim template (replacing a template volume of that
/// name); the revision label; and the lifecycle state the plan chose.
pub fn build_pod(
    set: &StatefulSet,
    template: &PodTemplateSpec,
    revision: &str,
    ordinal: i32,
    lifecycle: LifecycleState,
    now: Timestamp,
) -> Result<Pod, BuildError> {
    let name = set_name(set)?;
    let pod_name = format!("{name}-{ordinal}");
    let meta = template.metadata.clone().unwrap_or_default();
    let mut labels = meta.labels.unwrap_or_default();
    labels.insert(LABEL_POD_NAME.to_owned(), pod_name.clone());
    labels.insert(LABEL_POD_INDEX.to_owned(), ordinal.to_string());
    labels.insert(
        keys::LABEL_NATIVE_CONTROLLER_REVISION_HASH.to_owned(),
        revision.to_owned(),
    );
    let mut annotations = meta.annotations.unwrap_or_default();
    if let Some(state) = kruise_core::lifecycle::state_value(lifecycle) {
        labels.insert(keys::LABEL_LIFECYCLE_STATE.to_owned(), state.to_owned());
        annotations.insert(
            keys::ANNOTATION_LIFECYCLE_TIMESTAMP.to_owned(),
            now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        );
    }
    let mut spec = template.spec.clone().unwrap_or_default();
    spec.hostname = Some(pod_name.clone());
    spec.subdomain = (!set.spec.service_name.is_empty()).then(|| set.spec.service_name.clone());
    kruise_core::pods::mount_claims(&mut spec, &set.spec.volume_claim_templates, |vct| {
        claim_name(vct, name, ordinal)
    });
    Ok(Pod {
        metadata: ObjectMeta {
            name: Some(pod_name),
            generate_name: Some(format!("{name}-")),
            namespace: set.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            finalizers: meta.finalizers,
            owner_references: Some(vec![owner_reference(set)?]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    })
}

/// The claims of the Pod at `ordinal`, one per claim template: the template's labels plus the
/// selector's matchLabels (as Kubernetes labels them), owned as the retention policy says for a
/// Pod that is not condemned (the set when `whenDeleted: Delete`).
pub fn build_claims(
    set: &StatefulSet,
    ordinal: i32,
) -> Result<Vec<PersistentVolumeClaim>, BuildError> {
    let name = set_name(set)?;
    let selector_labels = set
        .spec
        .selector
        .as_ref()
        .and_then(|s| s.match_labels.clone())
        .unwrap_or_default();
    let owners = claim_owners(set, &[], None, false)?.unwrap_or_default();
    kruise_core::pods::claims_from_templates(
        &set.spec.volume_claim_templates,
        set.metadata.namespace.as_deref(),
        &selector_labels,
        &owners,
        |vct_name| claim_name(vct_name, name, ordinal),
    )
    .ok_or(BuildError::Missing("volumeClaimTemplates[].metadata.name"))
}

/// The owner references a claim of the set should carry (Kubernetes' retention policy table):
/// a reference to the set when `whenDeleted: Delete`; a reference to the Pod (`pod`: its name and
/// uid) when `whenScaled: Delete` and the Pod is condemned by a scale-down. References to anything
/// else are kept. `None` when `existing` is already right.
pub fn claim_owners(
    set: &StatefulSet,
    existing: &[OwnerReference],
    pod: Option<(&str, &str)>,
    condemned: bool,
) -> Result<Option<Vec<OwnerReference>>, BuildError> {
    let set_uid = set
        .metadata
        .uid
        .as_deref()
        .ok_or(BuildError::Missing("metadata.uid"))?;
    let policy = set.spec.persistent_volume_claim_retention_policy.as_ref();
    let delete_with_set = policy.is_some_and(|p| p.when_deleted == PVC_RETENTION_DELETE);
    let delete_when_scaled = policy.is_some_and(|p| p.when_scaled == PVC_RETENTION_DELETE);
    let mut wanted: Vec<OwnerReference> = existing
        .iter()
        .filter(|o| {
            o.uid != set_uid && !(o.kind == "Pod" && pod.is_some_and(|(_, uid)| uid == o.uid))
        })
        .cloned()
        .collect();
    if delete_with_set {
        let mut owner = owner_reference(set)?;
        owner.controller = None;
        wanted.push(owner);
    }
    if delete_when_scaled
        && condemned
        && let Some((name, uid)) = pod
    {
        wanted.push(OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: name.to_owned(),
            uid: uid.to_owned(),
            controller: None,
            block_owner_deletion: None,
        });
    }
    let key = |o: &OwnerReference| (o.uid.clone(), o.kind.clone());
    let mut have: Vec<_> = existing.iter().map(key).collect();
    let mut want: Vec<_> = wanted.iter().map(key).collect();
    have.sort();
    want.sort();
    Ok((have != want).then_some(wanted))
}

/// The storage a claim (or claim template) requests.
pub fn requested_storage(claim: &PersistentVolumeClaim) -> Option<&K8sQuantity> {
    claim
        .spec
        .as_ref()?
        .resources
        .as_ref()?
        .requests
        .as_ref()?
        .get("storage")
}

/// `a` compared with `b` as quantities; `None` when either does not parse.
pub fn compare_quantities(a: &K8sQuantity, b: &K8sQuantity) -> Option<Ordering> {
    let a = Quantity::parse(&a.0).ok()?;
    let b = Quantity::parse(&b.0).ok()?;
    Some(a.cmp_value(&b))
}

/// Per claim template: how many of `claims` (the set's claims, by name) request at least the
/// template's storage, and how many of those have the capacity to show for it
/// (`status.volumeClaims`). Ordinals are those of the set's Pods.
pub fn volume_claim_status(
    set: &StatefulSet,
    ordinals: &[i32],
    claims: &BTreeMap<String, &PersistentVolumeClaim>,
) -> Vec<kruise_api::statefulset::v1beta1::VolumeClaimStatus> {
    let name = set.metadata.name.as_deref().unwrap_or_default();
    set.spec
        .volume_claim_templates
        .iter()
        .filter_map(|vct| {
            let vct_name = vct.metadata.name.as_deref()?;
            let wanted = requested_storage(vct);
            let mut status = kruise_api::statefulset::v1beta1::VolumeClaimStatus {
                volume_claim_name: vct_name.to_owned(),
                ..Default::default()
            };
            for &ordinal in ordinals {
                let Some(claim) = claims.get(&claim_name(vct_name, name, ordinal)) else {
                    continue;
                };
                let at_least = |q: Option<&K8sQuantity>| match (q, wanted) {
                    (_, None) => true,
                    (Some(q), Some(w)) => compare_quantities(q, w).is_some_and(Ordering::is_ge),
                    (None, Some(_)) => false,
                };
                if !at_least(requested_storage(claim)) {
                    continue;
                }
                status.compatible_replicas += 1;
                let capacity = claim
                    .status
                    .as_ref()
                    .and_then(|s| s.capacity.as_ref())
                    .and_then(|c| c.get("storage"));
                if at_least(capacity) {
                    status.compatible_ready_replicas += 1;
                }
            }
            Some(status)
        })
        .collect()
}

/// The growth `OnPodRollingUpdate` makes to one claim: the template's storage when the claim
/// requests less (storage only grows); `None` otherwise.
pub fn claim_growth(
    template: &PersistentVolumeClaim,
    claim: &PersistentVolumeClaim,
) -> Option<K8sQuantity> {
    let wanted = requested_storage(template)?;
    match requested_storage(claim) {
        Some(have) if compare_quantities(have, wanted).is_some_and(Ordering::is_ge) => None,
        Some(have) if compare_quantities(have, wanted).is_none() => None,
        _ => Some(wanted.clone()),
    }
}

#[cfg(test)]
mod tests;
