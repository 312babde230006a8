//! The Pod annotations that record what was injected: the two hash maps (read back by the upgrade
//! controller to decide which Pods are up to date and which can be upgraded in place) and the injected
//! SidecarSet list.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kruise_api::sidecarset::ANNOTATION_INJECTED_LIST;
use kruise_api::sidecarset::hash::{
    ANNOTATION_HASH, ANNOTATION_HASH_WITHOUT_IMAGE, sidecarset_hash, sidecarset_hash_without_image,
};
use kruise_api::sidecarset::v1beta1::SidecarSet;
use serde::{Deserialize, Serialize};

use super::{InjectError, non_empty_annotation};

/// The SidecarSet's current hashes, with and without images: its annotations (written by its
/// defaulting webhook), computed when missing (a SidecarSet that bypassed the webhook), so that a Pod
/// never records an empty hash.
pub fn hashes(ss: &SidecarSet) -> (String, String) {
    let recorded = |key: &str, compute: fn(&SidecarSet) -> String| {
        non_empty_annotation(&ss.metadata, key)
            .map(str::to_string)
            .unwrap_or_else(|| compute(ss))
    };
    (
        recorded(ANNOTATION_HASH, sidecarset_hash),
        recorded(ANNOTATION_HASH_WITHOUT_IMAGE, sidecarset_hash_without_image),
    )
}

/// Records in the Pod's two hash maps (`kruise.io/sidecarset-hash` and `-without-image`) that
/// SidecarSet `name` gave it the sidecars of `hashes` at `now`, from `controller_revision`.
pub(super) fn record_hashes(
    with_image: &mut BTreeMap<String, UpgradeSpec>,
    without_image: &mut BTreeMap<String, UpgradeSpec>,
    name: &str,
    (hash, hash_without_image): (String, String),
    sidecar_list: Option<Vec<String>>,
    controller_revision: &str,
    now: Timestamp,
) {
    let entry = |hash: String, controller_revision: &str| UpgradeSpec {
        update_timestamp: Some(Time(now)),
        hash,
        sidecar_set_name: name.to_owned(),
        sidecar_list: sidecar_list.clone(),
        controller_revision: controller_revision.to_owned(),
    };
    with_image.insert(name.to_owned(), entry(hash, controller_revision));
    without_image.insert(name.to_owned(), entry(hash_without_image, ""));
}

/// One SidecarSet's entry in `kruise.io/sidecarset-hash` (and, without `controllerRevision`, in
/// `kruise.io/sidecarset-hash-without-image`): upstream's `SidecarSetUpgradeSpec`.
///
/// Field order and `null`s follow Go's encoding of that struct, so the annotation is byte-identical to
/// what OpenKruise writes: a zero time and a nil list are `null`, an empty revision is omitted.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UpgradeSpec {
    #[serde(rename = "updateTimestamp", default)]
    pub update_timestamp: Option<Time>,
    #[serde(rename = "hash", default)]
    pub hash: String,
    #[serde(rename = "sidecarSetName", default)]
    pub sidecar_set_name: String,
    /// Names of the SidecarSet's containers and native-sidecar init containers, sorted.
    #[serde(rename = "sidecarList", default)]
    pub sidecar_list: Option<Vec<String>>,
    /// The ControllerRevision injected (only in `kruise.io/sidecarset-hash`).
    #[serde(
        rename = "controllerRevision",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub controller_revision: String,
}

/// Reads a hash annotation of the Pod: a JSON map from SidecarSet name to [`UpgradeSpec`], or the older
/// map from name to hash, which is still accepted. Absent or empty = no entries.
pub fn parse_upgrade_specs(
    annotations: &BTreeMap<String, String>,
    key: &str,
) -> Result<BTreeMap<String, UpgradeSpec>, InjectError> {
    let Some(text) = annotations.get(key).filter(|t| !t.is_empty()) else {
        return Ok(BTreeMap::new());
    };
    let current = serde_json::from_str::<BTreeMap<String, UpgradeSpec>>(text);
    let error = match current {
        Ok(specs) => return Ok(specs),
        Err(error) => error,
    };
    let legacy = serde_json::from_str::<BTreeMap<String, String>>(text).map_err(|_| {
        InjectError::InvalidPodAnnotation {
            key: key.to_string(),
            message: error.to_string(),
        }
    })?;
    Ok(legacy
        .into_iter()
        .map(|(name, hash)| {
            let spec = UpgradeSpec {
                hash,
                sidecar_set_name: name.clone(),
                ..UpgradeSpec::default()
            };
            (name, spec)
        })
        .collect())
}

/// Encodes a hash map for its annotation (keys sorted, as Go sorts map keys).
pub(super) fn encode_upgrade_specs(specs: &BTreeMap<String, UpgradeSpec>) -> String {
    // Serialising strings, options and a sorted map cannot fail.
    serde_json::to_string(specs).unwrap_or_default()
}

/// The names in `kruise.io/sidecarset-injected-list`.
pub(super) fn injected_list(annotations: &BTreeMap<String, String>) -> BTreeSet<String> {
    annotations
        .get(ANNOTATION_INJECTED_LIST)
        .map(|list| {
            list.split(',')
                .filter(|n| !n.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}
