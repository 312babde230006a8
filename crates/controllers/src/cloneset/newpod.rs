//! The Pods and PVCs a CloneSet creates when it scales out (upstream
//! `pkg/controller/cloneset/sync`), built from a revision's template. Pure: the random instance ids
//! come from the caller.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kruise_api::cloneset::LABEL_INSTANCE_ID;
use kruise_api::cloneset::v1beta1::CloneSet;
use kruise_api::keys;
use kruise_core::pods;
use kruise_core::revision::{LABEL_POD_TEMPLATE_HASH, short_hash};

/// Length of an instance id (upstream `LengthOfInstanceID`).
pub const INSTANCE_ID_LEN: usize = 5;
/// The alphabet of Kubernetes' `rand.String` (no vowels, no look-alike digits), which upstream uses.
pub const INSTANCE_ID_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// Why a Pod cannot be built.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BuildError {
    #[error("the CloneSet has no {0}")]
    Missing(&'static str),
}

/// A random instance id from `draw`, which returns indexes into the alphabet.
pub fn random_id(mut draw: impl FnMut(usize) -> usize) -> String {
    (0..INSTANCE_ID_LEN)
        .map(|_| {
            let i = draw(INSTANCE_ID_ALPHABET.len()) % INSTANCE_ID_ALPHABET.len();
            char::from(INSTANCE_ID_ALPHABET[i])
        })
        .collect()
}

/// Where the instance id of a Pod to create comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NewId {
    /// The id of PVCs whose Pod is gone: the new Pod gets its volumes back.
    Reuse(String),
    /// The id of PVCs whose Pod is still terminating: the new Pod takes its name and volumes once
    /// it is gone (a Pod of the same name cannot be created before), so it is not created yet.
    AfterTermination(String),
    /// A fresh id no Pod or PVC uses.
    Fresh(String),
}

impl NewId {
    /// The id, unless the Pod must wait for its predecessor to terminate.
    pub fn now(&self) -> Option<&str> {
        match self {
            Self::Reuse(id) | Self::Fresh(id) => Some(id),
            Self::AfterTermination(_) => None,
        }
    }
}

/// The instance ids of `n` Pods to create, as OpenKruise: the ids of the CloneSet's PVCs that no
/// live Pod uses come first (a deleted Pod is replaced under its id and gets its PVCs back; those
/// whose Pod is gone before those whose Pod is still terminating), then fresh ones from `fresh`.
/// `taken`: ids of Pods that exist and are not being deleted (running, or finished: their names are
/// taken for good), and of claims being deleted ([`ClaimIds::deleting`]); `terminating`: ids of
/// Pods being deleted; `pvc_ids`: ids of the PVCs the CloneSet keeps that are not being deleted
/// (without PVC reuse, none of a Pod that is not live).
pub fn instance_ids(
    n: usize,
    taken: &BTreeSet<String>,
    terminating: &BTreeSet<String>,
    pvc_ids: &BTreeSet<String>,
    mut fresh: impl FnMut() -> String,
) -> Vec<NewId> {
    let free = pvc_ids.difference(taken);
    let (waiting, gone): (Vec<&String>, Vec<&String>) =
        free.partition(|id| terminating.contains(*id));
    let mut ids: Vec<NewId> = gone
        .into_iter()
        .map(|id| NewId::Reuse(id.clone()))
        .chain(
            waiting
                .into_iter()
                .map(|id| NewId::AfterTermination(id.clone())),
        )
        .take(n)
        .collect();
    let mut used: BTreeSet<String> = taken
        .iter()
        .chain(terminating)
        .chain(pvc_ids)
        .cloned()
        .collect();
    // Bounded: with 27^5 ids a collision streak this long means a broken generator.
    let mut attempts = 0;
    while ids.len() < n && attempts < n * 100 + 100 {
        attempts += 1;
        let id = fresh();
        if used.insert(id.clone()) {
            ids.push(NewId::Fresh(id));
        }
    }
    ids
}

/// The expectation kind of a PVC the CloneSet deleted with its Pod.
pub const CLAIM_KIND: &str = "PersistentVolumeClaim";

/// Whether a PVC counts among the CloneSet's claims: not one being deleted. A claim deleted with
/// its Pod (scaled in, or recreated for an update) lingers, held by the `pvc-protection`
/// finalizer, until that Pod is gone; counted, its instance id would look free once the Pod is
/// gone and the replacement would take the id and mount a claim about to vanish, Pending for good.
/// Not counted, the replacement gets a fresh id and new claims, as upstream, which lists only
/// claims without a deletionTimestamp (`getOwnedPVCs`).
pub fn claim_counts(pvc: &PersistentVolumeClaim) -> bool {
    pvc.metadata.deletion_timestamp.is_none()
}

/// The instance ids of a CloneSet's claims, for [`instance_ids`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClaimIds {
    /// Ids of claims that count ([`claim_counts`]): a new Pod may get one back with its claims.
    pub reusable: BTreeSet<String>,
    /// Ids of claims being deleted: taken (no new Pod gets them, neither back nor fresh, since
    /// the claim's name is still in use) until the claims are gone.
    pub deleting: BTreeSet<String>,
}

pub fn claim_ids(pvcs: &[PersistentVolumeClaim]) -> ClaimIds {
    let mut ids = ClaimIds::default();
    for pvc in pvcs {
        let Some(id) = pvc
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_INSTANCE_ID))
        else {
            continue;
        };
        if claim_counts(pvc) {
            ids.reusable.insert(id.clone());
        } else {
            ids.deleting.insert(id.clone());
        }
    }
    ids
}

/// What becomes of a PVC the CloneSet owns when it does not reuse PVCs
/// (`scaleStrategy.disablePVCReuse`), as OpenKruise's `cleanupPVCs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimFate {
    /// Its instance has a live Pod (or it has no instance id: not one the CloneSet made).
    Keep,
    /// Its Pod is terminating or finished: the PVC is handed to that Pod and goes with it.
    HandToPod,
    /// No Pod has its instance id: it is deleted.
    Delete,
}

pub fn claim_fate(
    id: Option<&str>,
    live_ids: &BTreeSet<String>,
    inactive_ids: &BTreeSet<String>,
) -> ClaimFate {
    match id {
        None => ClaimFate::Keep,
        Some(id) if live_ids.contains(id) => ClaimFate::Keep,
        Some(id) if inactive_ids.contains(id) => ClaimFate::HandToPod,
        Some(_) => ClaimFate::Delete,
    }
}

/// `<cloneset>-<id>`.
pub fn pod_name(cloneset: &str, id: &str) -> String {
    format!("{cloneset}-{id}")
}

/// `<vct>-<cloneset>-<id>`.
pub fn pvc_name(template_name: &str, cloneset: &str, id: &str) -> String {
    format!("{template_name}-{cloneset}-{id}")
}

/// The labels recording a revision on a CloneSet Pod: `controller-revision-hash` with the revision's
/// name (only its hash with `short_hash`, the `CloneSetShortHash` gate) and `pod-template-hash` with
/// the hash.
pub fn revision_labels(revision: &str, short_hash_label: bool) -> BTreeMap<String, String> {
    let revision_label = if short_hash_label {
        short_hash(revision)
    } else {
        revision
    };
    BTreeMap::from([
        (
            keys::LABEL_NATIVE_CONTROLLER_REVISION_HASH.to_owned(),
            revision_label.to_owned(),
        ),
        (
            LABEL_POD_TEMPLATE_HASH.to_owned(),
            short_hash(revision).to_owned(),
        ),
    ])
}

/// The controller reference every Pod, PVC and revision of the CloneSet carries.
pub fn owner_reference(cs: &CloneSet) -> Result<OwnerReference, BuildError> {
    // CloneSet's errors name the field without its `metadata.`.
    crate::claim::controller_reference(cs)
        .map_err(|field| BuildError::Missing(field.trim_start_matches("metadata.")))
}

/// A new Pod `<cloneset>-<id>` from `template` (the template of `revision`).
///
/// Labels: the template's, the instance id, the revision labels and lifecycle `PreparingNormal` (the
/// refresh step moves it to Normal once it is scheduled). The `InPlaceUpdateReady` readiness gate is
/// always added, so a later in-place update can take the Pod out of Service endpoints before a
/// container restarts. Each volumeClaimTemplate becomes a volume of the Pod's own PVC, replacing a
/// template volume of the same name.
pub fn build_pod(
    cs: &CloneSet,
    template: &PodTemplateSpec,
    revision: &str,
    id: &str,
    now: Timestamp,
    short_hash_label: bool,
) -> Result<Pod, BuildError> {
    let cs_name = cs
        .metadata
        .name
        .as_deref()
        .ok_or(BuildError::Missing("name"))?;
    let meta = template.metadata.clone().unwrap_or_default();
    let mut labels = meta.labels.unwrap_or_default();
    labels.insert(LABEL_INSTANCE_ID.to_owned(), id.to_owned());
    labels.extend(revision_labels(revision, short_hash_label));
    labels.insert(
        keys::LABEL_LIFECYCLE_STATE.to_owned(),
        keys::LIFECYCLE_PREPARING_NORMAL.to_owned(),
    );
    let mut annotations = meta.annotations.unwrap_or_default();
    annotations.insert(
        keys::ANNOTATION_LIFECYCLE_TIMESTAMP.to_owned(),
        now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
    );

    let mut spec: PodSpec = template.spec.clone().unwrap_or_default();
    pods::add_readiness_gate(&mut spec, keys::CONDITION_IN_PLACE_UPDATE_READY);
    // A hook with markPodNotReady takes the Pod out of endpoints through the KruisePodReady
    // condition; the gate makes the kubelet honour it (upstream's Pod webhook adds it to every
    // kruise-owned Pod; here only where a hook can use it, so no Pod waits on a condition nobody sets).
    if kruise_core::lifecycle::marks_pod_not_ready(cs.spec.lifecycle.as_ref()) {
        pods::add_readiness_gate(&mut spec, keys::CONDITION_KRUISE_POD_READY);
    }
    pods::mount_claims(&mut spec, &cs.spec.volume_claim_templates, |vct| {
        pvc_name(vct, cs_name, id)
    });

    Ok(Pod {
        metadata: ObjectMeta {
            name: Some(pod_name(cs_name, id)),
            namespace: cs.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: Some(annotations),
            finalizers: meta.finalizers,
            owner_references: Some(vec![owner_reference(cs)?]),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    })
}

/// The PVCs of instance `id`: one per volumeClaimTemplate, labelled with the selector's matchLabels
/// and the instance id, owned by the CloneSet.
pub fn build_pvcs(cs: &CloneSet, id: &str) -> Result<Vec<PersistentVolumeClaim>, BuildError> {
    let cs_name = cs
        .metadata
        .name
        .as_deref()
        .ok_or(BuildError::Missing("name"))?;
    let owner = owner_reference(cs)?;
    let mut labels = cs
        .spec
        .selector
        .as_ref()
        .and_then(|s| s.match_labels.clone())
        .unwrap_or_default();
    labels.insert(LABEL_INSTANCE_ID.to_owned(), id.to_owned());
    kruise_core::pods::claims_from_templates(
        &cs.spec.volume_claim_templates,
        cs.metadata.namespace.as_deref(),
        &labels,
        &[owner],
        |vct_name| pvc_name(vct_name, cs_name, id),
    )
    .ok_or(BuildError::Missing("volumeClaimTemplates[].metadata.name"))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Container, PersistentVolumeClaimSpec, Volume};
    use kruise_api::cloneset::v1beta1::CloneSetSpec;

    use super::*;

    fn cloneset() -> CloneSet {
        let mut cs = CloneSet::new(
            "web",
            CloneSetSpec {
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(BTreeMap::from([("app".into(), "web".into())])),
                        ..ObjectMeta::default()
                    }),
                    spec: Some(PodSpec {
                        containers: vec![Container {
                            name: "main".into(),
                            image: Some("nginx:alpine".into()),
                            ..Container::default()
                        }],
                        volumes: Some(vec![Volume {
                            name: "data".into(),
                            ..Volume::default()
                        }]),
                        ..PodSpec::default()
                    }),
                },
                volume_claim_templates: vec![PersistentVolumeClaim {
                    metadata: ObjectMeta {
                        name: Some("data".into()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(PersistentVolumeClaimSpec::default()),
                    status: None,
                }],
                ..CloneSetSpec::default()
            },
        );
        cs.metadata.namespace = Some("ns".into());
        cs.metadata.uid = Some("uid-1".into());
        cs.spec
            .selector
            .get_or_insert_with(Default::default)
            .match_labels = Some(BTreeMap::from([("app".into(), "web".into())]));
        cs
    }

    #[test]
    fn pod_has_identity_revision_gate_and_claims() -> Result<(), BuildError> {
        let cs = cloneset();
        let now = Timestamp::UNIX_EPOCH;
        let pod = build_pod(&cs, &cs.spec.template, "web-5d8f7c", "x7k2p", now, false)?;
        assert_eq!(pod.metadata.name.as_deref(), Some("web-x7k2p"));
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        for (k, v) in [
            ("app", "web"),
            (LABEL_INSTANCE_ID, "x7k2p"),
            ("controller-revision-hash", "web-5d8f7c"),
            ("pod-template-hash", "5d8f7c"),
            ("lifecycle.apps.kruise.io/state", "PreparingNormal"),
        ] {
            assert_eq!(labels.get(k).map(String::as_str), Some(v), "{k}");
        }
        let spec = pod.spec.clone().unwrap_or_default();
        let gates = spec.readiness_gates.unwrap_or_default();
        assert_eq!(gates.len(), 1);
        assert_eq!(gates[0].condition_type, "InPlaceUpdateReady");
        // The template's own "data" volume is replaced by the claim.
        let volumes = spec.volumes.unwrap_or_default();
        assert_eq!(volumes.len(), 1);
        assert_eq!(
            volumes[0]
                .persistent_volume_claim
                .as_ref()
                .map(|c| c.claim_name.as_str()),
            Some("data-web-x7k2p")
        );
        let owner = &pod.metadata.owner_references.unwrap_or_default()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller),
            ("CloneSet", Some(true))
        );
        Ok(())
    }

    #[test]
    fn pvcs_carry_selector_and_id() -> Result<(), BuildError> {
        let pvcs = build_pvcs(&cloneset(), "abcde")?;
        assert_eq!(pvcs.len(), 1);
        assert_eq!(pvcs[0].metadata.name.as_deref(), Some("data-web-abcde"));
        let labels = pvcs[0].metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels.get("app").map(String::as_str), Some("web"));
        assert_eq!(
            labels.get(LABEL_INSTANCE_ID).map(String::as_str),
            Some("abcde")
        );
        Ok(())
    }

    #[test]
    fn ids_reuse_free_claims_first_and_never_collide() {
        let set =
            |ids: &[&str]| -> BTreeSet<String> { ids.iter().map(|s| s.to_string()).collect() };
        let reuse = |id: &str| NewId::Reuse(id.into());
        let wait = |id: &str| NewId::AfterTermination(id.into());
        let fresh_id = |id: &str| NewId::Fresh(id.into());
        // (case, n, taken, terminating, pvc ids) → ids
        #[allow(clippy::type_complexity)]
        let cases: Vec<(
            &str,
            usize,
            BTreeSet<String>,
            BTreeSet<String>,
            BTreeSet<String>,
            Vec<NewId>,
        )> = vec![
            (
                "scale up without PVCs: fresh ids no Pod uses",
                2,
                set(&["aaaaa"]),
                set(&["bbbbb"]),
                set(&[]),
                vec![fresh_id("ccccc"), fresh_id("ddddd")],
            ),
            (
                "a deleted Pod that is gone: its id and PVCs come back",
                1,
                set(&["aaaaa"]),
                set(&[]),
                set(&["aaaaa", "bbbbb"]),
                vec![reuse("bbbbb")],
            ),
            (
                "a deleted Pod still terminating: its replacement waits for the name",
                1,
                set(&["aaaaa"]),
                set(&["bbbbb"]),
                set(&["aaaaa", "bbbbb"]),
                vec![wait("bbbbb")],
            ),
            (
                "gone before terminating, then fresh",
                3,
                set(&[]),
                set(&["aaaaa"]),
                set(&["aaaaa", "bbbbb"]),
                vec![reuse("bbbbb"), wait("aaaaa"), fresh_id("ccccc")],
            ),
            (
                "a finished Pod keeps its name: its PVCs' id is not reused",
                1,
                set(&["aaaaa"]),
                set(&[]),
                set(&["aaaaa"]),
                vec![fresh_id("bbbbb")],
            ),
            (
                "more free PVC ids than Pods to create",
                1,
                set(&[]),
                set(&[]),
                set(&["aaaaa", "bbbbb"]),
                vec![reuse("aaaaa")],
            ),
        ];
        for (case, n, taken, terminating, pvcs, expected) in cases {
            let mut fresh = ["aaaaa", "bbbbb", "ccccc", "ddddd", "fffff"]
                .into_iter()
                .map(String::from);
            let ids = instance_ids(n, &taken, &terminating, &pvcs, || {
                fresh.next().unwrap_or_default()
            });
            assert_eq!(ids, expected, "{case}");
        }
        let id = random_id(|n| n - 1);
        assert_eq!(id, "99999");
        assert_eq!(random_id(|_| 0).len(), INSTANCE_ID_LEN);
    }

    #[test]
    fn claims_being_deleted_free_no_id_and_block_no_new_claim() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let claim = |id: &str, deleting: bool| {
            let mut c = build_pvcs(&cloneset(), id)
                .ok()
                .and_then(|mut c| c.pop())
                .unwrap_or_default();
            c.metadata.deletion_timestamp = deleting.then_some(Time(Timestamp::UNIX_EPOCH));
            c
        };
        let set =
            |ids: &[&str]| -> BTreeSet<String> { ids.iter().map(|s| s.to_string()).collect() };
        // (case, the CloneSet's claims, ids of its live Pods) → the new Pod's id, the claims to
        // create for it. Fresh ids are drawn in the order aaaaa, bbbbb, ccccc.
        let cases = [
            (
                "recreated for an update: its claims deleted with it, being deleted",
                vec![claim("aaaaa", false), claim("bbbbb", true)],
                set(&["aaaaa"]),
                NewId::Fresh("ccccc".into()),
                vec!["data-web-ccccc"],
            ),
            (
                "deleted by someone else: its claims kept, its id and claims come back",
                vec![claim("aaaaa", false), claim("bbbbb", false)],
                set(&["aaaaa"]),
                NewId::Reuse("bbbbb".into()),
                vec![],
            ),
            (
                "no claims at all",
                vec![],
                set(&["aaaaa"]),
                NewId::Fresh("bbbbb".into()),
                vec!["data-web-bbbbb"],
            ),
        ];
        for (case, claims, live, want_id, want_created) in cases {
            let ClaimIds { reusable, deleting } = claim_ids(&claims);
            let taken: BTreeSet<String> = live.union(&deleting).cloned().collect();
            let mut fresh = ["aaaaa", "bbbbb", "ccccc"].into_iter().map(String::from);
            let ids = instance_ids(1, &taken, &BTreeSet::new(), &reusable, || {
                fresh.next().unwrap_or_default()
            });
            assert_eq!(ids, vec![want_id], "{case}");
            let existing: BTreeSet<String> = claims
                .iter()
                .filter_map(|c| c.metadata.name.clone())
                .collect();
            let id = ids[0].now().unwrap_or_default();
            let created: Vec<String> = build_pvcs(&cloneset(), id)
                .unwrap_or_default()
                .into_iter()
                .filter_map(|c| c.metadata.name)
                .filter(|n| !existing.contains(n))
                .collect();
            assert_eq!(created, want_created, "{case}");
        }
    }

    #[test]
    fn claims_without_reuse() {
        let set =
            |ids: &[&str]| -> BTreeSet<String> { ids.iter().map(|s| s.to_string()).collect() };
        let live = set(&["aaaaa"]);
        let inactive = set(&["bbbbb"]);
        for (case, id, expected) in [
            ("its Pod is live", Some("aaaaa"), ClaimFate::Keep),
            (
                "its Pod is terminating or finished",
                Some("bbbbb"),
                ClaimFate::HandToPod,
            ),
            ("no Pod has its id", Some("ccccc"), ClaimFate::Delete),
            ("no instance id", None, ClaimFate::Keep),
        ] {
            assert_eq!(claim_fate(id, &live, &inactive), expected, "{case}");
        }
    }
}
