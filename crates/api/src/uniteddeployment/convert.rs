//! UnitedDeployment conversion, v1alpha1 ⇄ v1beta1.
//!
//! The spec is the same in both versions except the CloneSet template, whose spec is the v1alpha1 CloneSet
//! spec in v1alpha1 and the v1beta1 one in v1beta1: it converts with the CloneSet conversion itself
//! ([`crate::cloneset::Api`]), the template's metadata standing for the CloneSet's (that is where the
//! v1alpha1 image pre-download annotations and the exclude-preparing-delete label of the subset CloneSets
//! live). What the CloneSet conversion stashes to stay lossless is carried in this object's stash (entry
//! `template.cloneSetTemplate`), not in the template's metadata, so that it never reaches the subset
//! CloneSets.
//!
//! The status maps as OpenKruise's
//! `apis/apps/v1alpha1/uniteddeployment_conversion.go` does:
//! - up: `subsetReplicas[name]` sets `subsetStatuses[name].replicas` and `updateStatus.currentPartitions[name]`
//!   sets `subsetStatuses[name].partition` (a missing subset status is appended, in name order here where Go
//!   follows map order); `updateStatus.updatedRevision` is `updatedRevision`;
//! - down: `subsetStatuses` are copied, `subsetReplicas` and `currentPartitions` are read off the named
//!   subset statuses, and `updateStatus` is set when there is an updated revision or a subset status.
//!
//! That mapping is not one-to-one (a v1alpha1 `subsetReplicas` entry without a subset status, say). When the
//! subset part of a status does not survive the trip back, the original part is stashed in an annotation of
//! the converted object ([`Stash`]) and restored on the way back — provided it still converts to what the
//! client holds, so that a status written in the other version wins over the stash.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{v1alpha1, v1beta1};
use crate::cloneset::v1alpha1::CloneSet as CloneSetV1alpha1;
use crate::cloneset::v1beta1::CloneSet as CloneSetV1beta1;
use crate::conversion::{Stash, convert_part};
use crate::keys;
use crate::kinds::KindApi;

/// Stash entry of the subset part of the status.
const STASH_SUBSETS: &str = "status.subsets";
/// Stash entry of what the CloneSet conversion of the CloneSet template stashed.
const STASH_CLONE_SET_TEMPLATE: &str = "template.cloneSetTemplate";

/// The v1alpha1 fields of the status that the mapping touches.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AlphaSubsets {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    subset_replicas: BTreeMap<String, i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    subset_statuses: Vec<v1beta1::UnitedDeploymentSubsetStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    update_status: Option<v1alpha1::UpdateStatus>,
}

/// The v1beta1 fields of the status that the mapping touches.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct BetaSubsets {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    subset_statuses: Vec<v1beta1::UnitedDeploymentSubsetStatus>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    updated_revision: String,
}

fn ensure_subset<'a>(
    statuses: &'a mut Vec<v1beta1::UnitedDeploymentSubsetStatus>,
    name: &str,
) -> &'a mut v1beta1::UnitedDeploymentSubsetStatus {
    let index = match statuses.iter().position(|s| s.name == name) {
        Some(index) => index,
        None => {
            statuses.push(v1beta1::UnitedDeploymentSubsetStatus {
                name: name.to_string(),
                ..Default::default()
            });
            statuses.len() - 1
        }
    };
    &mut statuses[index]
}

fn subsets_up(part: AlphaSubsets) -> BetaSubsets {
    let mut statuses = part.subset_statuses;
    for (name, replicas) in part.subset_replicas {
        ensure_subset(&mut statuses, &name).replicas = replicas;
    }
    let mut updated_revision = String::new();
    if let Some(update) = part.update_status {
        for (name, partition) in update.current_partitions {
            ensure_subset(&mut statuses, &name).partition = partition;
        }
        updated_revision = update.updated_revision;
    }
    BetaSubsets {
        subset_statuses: statuses,
        updated_revision,
    }
}

fn subsets_down(part: BetaSubsets) -> AlphaSubsets {
    let named = || part.subset_statuses.iter().filter(|s| !s.name.is_empty());
    let subset_replicas = named().map(|s| (s.name.clone(), s.replicas)).collect();
    let update_status = (!part.updated_revision.is_empty() || !part.subset_statuses.is_empty())
        .then(|| v1alpha1::UpdateStatus {
            updated_revision: part.updated_revision.clone(),
            current_partitions: named().map(|s| (s.name.clone(), s.partition)).collect(),
        });
    AlphaSubsets {
        subset_replicas,
        update_status,
        subset_statuses: part.subset_statuses,
    }
}

/// Converts the CloneSet template of `template` (if any) with `convert`, the CloneSet conversion in one
/// direction: `incoming` holds what the last conversion the other way stashed for this template (the
/// CloneSet conversion reads it from the template's metadata under `incoming_key`); what this one stashes
/// (written to the template's metadata under `outgoing_key`) is moved to `outgoing`.
fn convert_template<S, T>(
    template: v1beta1::SubsetTemplate<S>,
    convert: impl FnOnce(ObjectMeta, S) -> (ObjectMeta, T),
    (incoming, incoming_key): (&Stash, &str),
    (outgoing, outgoing_key): (&mut Stash, &str),
) -> v1beta1::SubsetTemplate<T> {
    template.map_clone_set_template(|t| {
        let mut metadata = t.metadata;
        if let Some(stashed) = incoming.get::<Value>(STASH_CLONE_SET_TEMPLATE) {
            metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(incoming_key.to_string(), stashed.to_string());
        }
        let (mut metadata, spec) = convert(metadata, t.spec);
        let stashed = Stash::take(&mut metadata, outgoing_key);
        if !stashed.is_empty() {
            outgoing.set(STASH_CLONE_SET_TEMPLATE, &stashed.into_value());
        }
        v1beta1::CloneSetTemplateSpec { metadata, spec }
    })
}

/// One direction of the conversion, `$from` → `$to`. Both directions are the same steps with the two
/// versions' roles swapped — take the stash the other direction left, convert the subset part of the
/// status without loss, convert the CloneSet template with the CloneSet conversion the same way, put the
/// new stash back and copy the rest of the spec and status — so they are written once here. Only the
/// status fields the subset part is read from (`$from_part`) and written to (`$to_part`, fields of the
/// same names) differ, and are given per direction. `$template` is the template conversion alone, which
/// [`template_as_v1alpha1`] uses too.
macro_rules! convert {
    (
        $name:ident, $template:ident: $from:ident -> $to:ident,
        clone_set: $clone_set_convert:ident($FromCloneSet:ident),
        subsets: $FromPart:ident { $($from_part:ident),* } -> $ToPart:ident { $($to_part:ident),* }
            by $subsets:ident / $subsets_back:ident,
        stash: $incoming_key:ident -> $outgoing_key:ident $(,)?
    ) => {
        fn $template(
            template: $from::SubsetTemplate,
            incoming: &Stash,
            outgoing: &mut Stash,
        ) -> $to::SubsetTemplate {
            convert_template(
                template,
                |metadata, spec| {
                    let cloneset = crate::cloneset::Api::$clone_set_convert($FromCloneSet {
                        metadata,
                        spec,
                        status: None,
                    });
                    (cloneset.metadata, cloneset.spec)
                },
                (incoming, keys::$incoming_key),
                (outgoing, keys::$outgoing_key),
            )
        }

        pub(super) fn $name(object: $from::UnitedDeployment) -> $to::UnitedDeployment {
            let mut metadata = object.metadata;
            let incoming = Stash::take(&mut metadata, keys::$incoming_key);
            let mut outgoing = Stash::default();
            let status = object.status.map(|s| {
                let part = $FromPart {
                    $($from_part: s.$from_part,)*
                };
                let part = convert_part(
                    part,
                    $subsets,
                    $subsets_back,
                    STASH_SUBSETS,
                    &incoming,
                    &mut outgoing,
                );
                $to::UnitedDeploymentStatus {
                    observed_generation: s.observed_generation,
                    ready_replicas: s.ready_replicas,
                    replicas: s.replicas,
                    updated_replicas: s.updated_replicas,
                    reserved_pods: s.reserved_pods,
                    updated_ready_replicas: s.updated_ready_replicas,
                    collision_count: s.collision_count,
                    current_revision: s.current_revision,
                    conditions: s.conditions,
                    label_selector: s.label_selector,
                    $($to_part: part.$to_part,)*
                }
            });
            let spec = object.spec;
            let spec = $to::UnitedDeploymentSpec {
                replicas: spec.replicas,
                selector: spec.selector,
                template: $template(spec.template, &incoming, &mut outgoing),
                topology: spec.topology,
                update_strategy: spec.update_strategy,
                revision_history_limit: spec.revision_history_limit,
            };
            outgoing.put(&mut metadata, keys::$outgoing_key);
            $to::UnitedDeployment {
                metadata,
                spec,
                status,
            }
        }
    };
}

convert!(
    to_v1beta1, template_up: v1alpha1 -> v1beta1,
    clone_set: to_v1beta1(CloneSetV1alpha1),
    subsets: AlphaSubsets { subset_replicas, subset_statuses, update_status }
        -> BetaSubsets { subset_statuses, updated_revision }
        by subsets_up / subsets_down,
    stash: ANNOTATION_CONVERSION_V1BETA1_FIELDS -> ANNOTATION_CONVERSION_V1ALPHA1_FIELDS,
);
convert!(
    to_v1alpha1, template_down: v1beta1 -> v1alpha1,
    clone_set: to_v1alpha1(CloneSetV1beta1),
    subsets: BetaSubsets { subset_statuses, updated_revision }
        -> AlphaSubsets { subset_replicas, subset_statuses, update_status }
        by subsets_down / subsets_up,
    stash: ANNOTATION_CONVERSION_V1ALPHA1_FIELDS -> ANNOTATION_CONVERSION_V1BETA1_FIELDS,
);

/// The v1alpha1 form of a (v1beta1) subset template, as OpenKruise v1.9.0 — which serves only v1alpha1 —
/// holds it; `metadata` is the UnitedDeployment's (its stash restores what v1beta1 cannot say).
pub fn template_as_v1alpha1(
    metadata: &ObjectMeta,
    template: &v1beta1::SubsetTemplate,
) -> v1alpha1::SubsetTemplate {
    let mut metadata = metadata.clone();
    let incoming = Stash::take(&mut metadata, keys::ANNOTATION_CONVERSION_V1ALPHA1_FIELDS);
    template_down(template.clone(), &incoming, &mut Stash::default())
}
