//! CloneSet conversion, v1alpha1 ⇄ v1beta1.
//!
//! The mapping is OpenKruise's (`apis/apps/v1alpha1/cloneset_conversion.go`):
//! - v1alpha1 `updateStrategy.type` `OnDelete` is v1beta1 `type: OnDelete` without `rollingUpdate`; any other
//!   type is `type: RollingUpdate` with `rollingUpdate.podUpdatePolicy` set to it, and the flat fields
//!   (partition, maxUnavailable, maxSurge, paused, priority, scatter, inPlaceUpdateStrategy) move into
//!   `rollingUpdate`.
//! - The v1alpha1 image pre-download annotations are folded into `inPlaceUpdateStrategy`, and written back
//!   from it on the way down.
//! - `disablePVCReuse` is the negation of `enablePVCReuse`.
//! - The v1alpha1 label `apps.kruise.io/cloneset-scaling-exclude-preparing-delete: "true"` is
//!   `scaleStrategy.excludePreparingDelete: true` (and is written back on the way down).
//!
//! Differences, all of them to lose nothing: an empty or unknown v1alpha1 type maps to the same
//! `podUpdatePolicy` (OpenKruise maps both to ReCreate; v1beta1 defaulting and validation then treat it as
//! usual), an empty `inPlaceUpdateStrategy: {}` stays as it is, and an annotation or label that was folded
//! into a spec field (in its canonical spelling) is not also kept on the v1beta1 object.
//!
//! Conversion works on two independent parts: the update part (update strategy plus the pre-download
//! annotations) and the scale part (scale strategy plus the exclude-preparing-delete label); everything else
//! is copied. When a part does not survive the trip back, the original part is stashed in an annotation of
//! the converted object ([`Stash`]) and restored on the way back — provided the part still converts to
//! what the client holds, so that an edit made in the other version wins over the stash.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::{Deserialize, Serialize};

use super::{LABEL_SCALING_EXCLUDE_PREPARING_DELETE, v1alpha1, v1beta1};
use crate::conversion::{Stash, convert_part};
use crate::keys;
use crate::pub_types::InPlaceUpdateStrategy;

/// The v1alpha1 annotations of the image pre-download settings.
const PRE_DOWNLOAD_ANNOTATIONS: [&str; 3] = [
    keys::ANNOTATION_IMAGE_PREDOWNLOAD_PARALLELISM,
    keys::ANNOTATION_IMAGE_PREDOWNLOAD_TIMEOUT_SECONDS,
    keys::ANNOTATION_IMAGE_PREDOWNLOAD_MIN_UPDATED_READY_PODS,
];
const SCALE_LABELS: [&str; 1] = [LABEL_SCALING_EXCLUDE_PREPARING_DELETE];
/// Stash entries.
const STASH_UPDATE: &str = "updateStrategy";
const STASH_SCALE: &str = "scaleStrategy";

/// One part of an object: a strategy and the metadata entries (among a fixed set of keys) that go with it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
struct Part<S> {
    strategy: S,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    meta: BTreeMap<String, String>,
}

/// Removes `keys` from a label or annotation map and returns them.
fn take_keys(
    map: &mut Option<BTreeMap<String, String>>,
    keys: &[&str],
) -> BTreeMap<String, String> {
    let Some(entries) = map.as_mut() else {
        return BTreeMap::new();
    };
    let taken: BTreeMap<String, String> = keys
        .iter()
        .filter_map(|key| entries.remove(*key).map(|value| (key.to_string(), value)))
        .collect();
    if !taken.is_empty() && entries.is_empty() {
        *map = None;
    }
    taken
}

fn put_keys(map: &mut Option<BTreeMap<String, String>>, entries: BTreeMap<String, String>) {
    if !entries.is_empty() {
        map.get_or_insert_with(BTreeMap::new).extend(entries);
    }
}

/// One direction of the conversion, `$from` → `$to`. Both directions are the same steps with the two
/// versions' roles swapped — take the stash the other direction left, convert the update part and the
/// scale part without loss, put their metadata entries and the new stash back, copy the rest of the spec
/// — so they are written once here.
macro_rules! convert {
    (
        $name:ident: $from:ident -> $to:ident,
        update: $update:ident / $update_back:ident,
        scale: $scale:ident / $scale_back:ident,
        stash: $incoming_key:ident -> $outgoing_key:ident $(,)?
    ) => {
        pub(super) fn $name(object: $from::CloneSet) -> $to::CloneSet {
            let $from::CloneSet {
                mut metadata,
                spec,
                status,
            } = object;
            let incoming = Stash::take(&mut metadata, keys::$incoming_key);
            let mut outgoing = Stash::default();
            let update = Part {
                strategy: spec.update_strategy,
                meta: take_keys(&mut metadata.annotations, &PRE_DOWNLOAD_ANNOTATIONS),
            };
            let update = convert_part(
                update,
                $update,
                $update_back,
                STASH_UPDATE,
                &incoming,
                &mut outgoing,
            );
            let scale = Part {
                strategy: spec.scale_strategy,
                meta: take_keys(&mut metadata.labels, &SCALE_LABELS),
            };
            let scale = convert_part(
                scale,
                $scale,
                $scale_back,
                STASH_SCALE,
                &incoming,
                &mut outgoing,
            );
            put_keys(&mut metadata.annotations, update.meta);
            put_keys(&mut metadata.labels, scale.meta);
            outgoing.put(&mut metadata, keys::$outgoing_key);
            $to::CloneSet {
                metadata,
                spec: $to::CloneSetSpec {
                    replicas: spec.replicas,
                    selector: spec.selector,
                    template: spec.template,
                    volume_claim_templates: spec.volume_claim_templates,
                    scale_strategy: scale.strategy,
                    update_strategy: update.strategy,
                    revision_history_limit: spec.revision_history_limit,
                    min_ready_seconds: spec.min_ready_seconds,
                    lifecycle: spec.lifecycle,
                    progress_deadline_seconds: spec.progress_deadline_seconds,
                },
                status,
            }
        }
    };
}

convert!(
    to_v1beta1: v1alpha1 -> v1beta1,
    update: update_up / update_down,
    scale: scale_up / scale_down,
    stash: ANNOTATION_CONVERSION_V1BETA1_FIELDS -> ANNOTATION_CONVERSION_V1ALPHA1_FIELDS,
);
convert!(
    to_v1alpha1: v1beta1 -> v1alpha1,
    update: update_down / update_up,
    scale: scale_down / scale_up,
    stash: ANNOTATION_CONVERSION_V1ALPHA1_FIELDS -> ANNOTATION_CONVERSION_V1BETA1_FIELDS,
);

fn update_up(
    part: Part<v1alpha1::CloneSetUpdateStrategy>,
) -> Part<v1beta1::CloneSetUpdateStrategy> {
    let Part { strategy, mut meta } = part;
    if strategy.type_ == v1alpha1::UPDATE_ON_DELETE {
        let strategy = v1beta1::CloneSetUpdateStrategy {
            type_: v1beta1::UPDATE_ON_DELETE.into(),
            rolling_update: None,
        };
        return Part { strategy, meta };
    }
    let in_place_update_strategy = fold_pre_download(strategy.in_place_update_strategy, &mut meta);
    let rolling = v1beta1::RollingUpdateCloneSetStrategy {
        partition: strategy.partition,
        max_unavailable: strategy.max_unavailable,
        max_surge: strategy.max_surge,
        pod_update_policy: strategy.type_,
        paused: strategy.paused,
        priority_strategy: strategy.priority_strategy,
        scatter_strategy: strategy.scatter_strategy,
        in_place_update_strategy,
    };
    let strategy = v1beta1::CloneSetUpdateStrategy {
        type_: v1beta1::UPDATE_ROLLING_UPDATE.into(),
        rolling_update: Some(rolling),
    };
    Part { strategy, meta }
}

fn update_down(
    part: Part<v1beta1::CloneSetUpdateStrategy>,
) -> Part<v1alpha1::CloneSetUpdateStrategy> {
    let Part { strategy, mut meta } = part;
    let type_ = if strategy.type_ == v1beta1::UPDATE_ON_DELETE {
        v1alpha1::UPDATE_ON_DELETE.to_string()
    } else {
        strategy
            .rolling_update
            .as_ref()
            .map_or(v1alpha1::UPDATE_RECREATE.into(), |r| {
                r.pod_update_policy.clone()
            })
    };
    let mut out = v1alpha1::CloneSetUpdateStrategy {
        type_,
        ..Default::default()
    };
    if let Some(rolling) = strategy.rolling_update {
        out.partition = rolling.partition;
        out.max_unavailable = rolling.max_unavailable;
        out.max_surge = rolling.max_surge;
        out.paused = rolling.paused;
        out.priority_strategy = rolling.priority_strategy;
        out.scatter_strategy = rolling.scatter_strategy;
        out.in_place_update_strategy = rolling.in_place_update_strategy.map(|in_place| {
            let [parallelism_key, timeout_key, min_ready_key] = PRE_DOWNLOAD_ANNOTATIONS;
            if let Some(parallelism) = &in_place.image_pre_download_parallelism {
                meta.insert(parallelism_key.into(), crate::intstr::display(parallelism));
            }
            if let Some(timeout) = in_place.image_pre_download_timeout_seconds {
                meta.insert(timeout_key.into(), timeout.to_string());
            }
            if let Some(min_ready) = in_place.image_pre_download_min_updated_ready_pods {
                meta.insert(min_ready_key.into(), min_ready.to_string());
            }
            InPlaceUpdateStrategy {
                grace_period_seconds: in_place.grace_period_seconds,
                ..Default::default()
            }
        });
    }
    Part {
        strategy: out,
        meta,
    }
}

/// Go's `intstr.Parse`: an integer when the text is one (truncated to 32 bits), else the text.
fn parse_int_or_string(text: &str) -> IntOrString {
    match text.parse::<i64>() {
        Ok(number) => IntOrString::Int(number as i32),
        Err(_) => IntOrString::String(text.to_string()),
    }
}

/// The v1beta1 `inPlaceUpdateStrategy` of a v1alpha1 one plus the pre-download annotations (OpenKruise reads
/// only the annotations for these settings). An annotation whose value is the canonical spelling of what it
/// folded into is removed: the spec field carries it.
fn fold_pre_download(
    in_place: Option<InPlaceUpdateStrategy>,
    annotations: &mut BTreeMap<String, String>,
) -> Option<InPlaceUpdateStrategy> {
    let [parallelism_key, timeout_key, min_ready_key] = PRE_DOWNLOAD_ANNOTATIONS;
    let value = |key: &str| annotations.get(key).filter(|v| !v.is_empty()).cloned();
    let (parallelism, timeout, min_ready) = (
        value(parallelism_key),
        value(timeout_key),
        value(min_ready_key),
    );
    if in_place.is_none() && parallelism.is_none() && timeout.is_none() && min_ready.is_none() {
        return None;
    }
    let mut folded = InPlaceUpdateStrategy {
        grace_period_seconds: in_place.map_or(0, |s| s.grace_period_seconds),
        ..Default::default()
    };
    if let Some(text) = parallelism {
        let parsed = parse_int_or_string(&text);
        if crate::intstr::display(&parsed) == text {
            annotations.remove(parallelism_key);
        }
        folded.image_pre_download_parallelism = Some(parsed);
    }
    let mut fold_int = |key: &str, text: Option<String>| {
        let number = text.as_deref().and_then(|t| t.parse::<i32>().ok())?;
        if text.is_some_and(|t| number.to_string() == t) {
            annotations.remove(key);
        }
        Some(number)
    };
    folded.image_pre_download_timeout_seconds = fold_int(timeout_key, timeout);
    folded.image_pre_download_min_updated_ready_pods = fold_int(min_ready_key, min_ready);
    Some(folded)
}

fn scale_up(part: Part<v1alpha1::CloneSetScaleStrategy>) -> Part<v1beta1::CloneSetScaleStrategy> {
    let Part { strategy, mut meta } = part;
    let exclude = meta
        .get(LABEL_SCALING_EXCLUDE_PREPARING_DELETE)
        .is_some_and(|v| v == "true");
    if exclude {
        meta.remove(LABEL_SCALING_EXCLUDE_PREPARING_DELETE);
    }
    let strategy = v1beta1::CloneSetScaleStrategy {
        pods_to_delete: strategy.pods_to_delete,
        max_unavailable: strategy.max_unavailable,
        enable_pvc_reuse: !strategy.disable_pvc_reuse,
        exclude_preparing_delete: exclude,
    };
    Part { strategy, meta }
}

fn scale_down(part: Part<v1beta1::CloneSetScaleStrategy>) -> Part<v1alpha1::CloneSetScaleStrategy> {
    let Part { strategy, mut meta } = part;
    if strategy.exclude_preparing_delete {
        meta.insert(LABEL_SCALING_EXCLUDE_PREPARING_DELETE.into(), "true".into());
    }
    let strategy = v1alpha1::CloneSetScaleStrategy {
        pods_to_delete: strategy.pods_to_delete,
        max_unavailable: strategy.max_unavailable,
        disable_pvc_reuse: !strategy.enable_pvc_reuse,
    };
    Part { strategy, meta }
}
