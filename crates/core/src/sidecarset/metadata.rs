//! `patchPodMetadata`: annotations a SidecarSet writes on the Pods it injects.

use std::collections::BTreeMap;

use kruise_api::sidecarset::v1beta1::{
    PATCH_POLICY_MERGE_PATCH_JSON, PATCH_POLICY_OVERWRITE, SidecarSetPatchPodMetadata,
};
use serde_json::Value;

use crate::revision::canonical_json;

/// Applies the patches in order: `Retain` (the default) only adds missing keys, `Overwrite` replaces,
/// `MergePatchJson` merges the value (RFC 7386) into the Pod's JSON value, or sets it when the Pod has
/// none. An unknown policy is ignored, as upstream does.
///
/// Returns whether an annotation changed. `Err` is the message for the offending key, for the caller
/// to place in a field path.
pub(super) fn patch_annotations(
    annotations: &mut BTreeMap<String, String>,
    patches: &[SidecarSetPatchPodMetadata],
) -> Result<bool, (usize, String, String)> {
    let before = annotations.clone();
    for (index, patch) in patches.iter().enumerate() {
        match patch.patch_policy.as_str() {
            PATCH_POLICY_OVERWRITE => {
                for (key, value) in &patch.annotations {
                    annotations.insert(key.clone(), value.clone());
                }
            }
            PATCH_POLICY_MERGE_PATCH_JSON => {
                for (key, value) in &patch.annotations {
                    let merged = match annotations.get(key).filter(|v| !v.is_empty()) {
                        Some(origin) => merge_json(origin, value)
                            .map_err(|message| (index, key.clone(), message))?,
                        None => value.clone(),
                    };
                    annotations.insert(key.clone(), merged);
                }
            }
            // Retain, the default; "" when the SidecarSet skipped defaulting.
            "" | kruise_api::sidecarset::v1beta1::PATCH_POLICY_RETAIN => {
                for (key, value) in &patch.annotations {
                    annotations
                        .entry(key.clone())
                        .or_insert_with(|| value.clone());
                }
            }
            _ => {}
        }
    }
    Ok(*annotations != before)
}

/// RFC 7386 merge of `patch` into `origin`, encoded as Go encodes the merged document (sorted keys).
fn merge_json(origin: &str, patch: &str) -> Result<String, String> {
    let mut document: Value =
        serde_json::from_str(origin).map_err(|e| format!("the Pod's value is not JSON: {e}"))?;
    let patch: Value =
        serde_json::from_str(patch).map_err(|e| format!("the patch is not JSON: {e}"))?;
    json_patch::merge(&mut document, &patch);
    Ok(String::from_utf8_lossy(&canonical_json(&document)).into_owned())
}
