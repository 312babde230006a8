//! Advanced DaemonSet: types of both versions, conversion, defaults, validation and CRD.

/// The Advanced DaemonSet resource of one version (`"v1alpha1"` or `"v1beta1"`). Its kube attribute
/// (names, subresources, printer columns) and its spec fields are the same in both versions, so they
/// are written once here; v1beta1 adds scaleStrategy, given in braces after the version (empty for
/// v1alpha1). The update strategy type resolves where the macro is called (both versions name the
/// v1beta1 one, whose rollingUpdateType v1alpha1 may also set to the deprecated `Surging`).
macro_rules! daemon_set_resource {
    ($version:tt, { $($beta_only:tt)* }) => {
        crate::crd::resource! {
            #[kube(
                version = $version,
                kind = "DaemonSet",
                namespaced,
                status = "DaemonSetStatus",
                shortname = "daemon",
                shortname = "ads",
                doc = "DaemonSet is the Schema for the daemonsets API",
                printcolumn(
                    name = "DESIRED",
                    type_ = "integer",
                    json_path = ".status.desiredNumberScheduled",
                    description = "The desired number of pods."
                ),
                printcolumn(
                    name = "CURRENT",
                    type_ = "integer",
                    json_path = ".status.currentNumberScheduled",
                    description = "The current number of pods."
                ),
                printcolumn(
                    name = "READY",
                    type_ = "integer",
                    json_path = ".status.numberReady",
                    description = "The ready number of pods."
                ),
                printcolumn(
                    name = "UP-TO-DATE",
                    type_ = "integer",
                    json_path = ".status.updatedNumberScheduled",
                    description = "The updated number of pods."
                ),
                printcolumn(
                    name = "AVAILABLE",
                    type_ = "integer",
                    json_path = ".status.numberAvailable",
                    description = "The updated number of pods."
                )
            )]
            age_column(
                long,
                pod_template_columns(
                    "The containers of currently  daemonset.",
                    "The images of currently advanced daemonset."
                )
            )
            #[serde(rename_all = "camelCase")]
            pub struct DaemonSetSpec {
                /// Label query over the daemon Pods; must match the template's labels.
                #[schemars(required)]
                #[serde(skip_serializing_if = "Option::is_none")]
                pub selector: Option<LabelSelector>,
                /// The Pod run on every eligible node.
                #[schemars(schema_with = "preserve_unknown_fields_untyped")]
                pub template: PodTemplateSpec,
                /// How Pods are replaced when the template changes.
                #[serde(default)]
                pub update_strategy: DaemonSetUpdateStrategy,
                /// Seconds a new Pod must be ready before it counts as available.
                #[serde(default, skip_serializing_if = "is_default")]
                pub min_ready_seconds: i32,
                /// Creates, deletes and in-place updates per sync: a number, or a percentage of the desired node count
                /// rounded down (250 when unset).
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub burst_replicas: Option<IntOrString>,
                /// Old revisions kept (10 when unset).
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub revision_history_limit: Option<i32>,
                /// Hooks around Pod lifecycle; only preDelete is supported.
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub lifecycle: Option<Lifecycle>,
                $($beta_only)*
            }
        }
    };
}

/// The Advanced DaemonSet status of one version: the same in both versions but for the field of the
/// latest revision's hash (v1alpha1's `daemonSetHash`, v1beta1's `updateRevision`), given.
macro_rules! daemon_set_status {
    ($($revision:tt)*) => {
        #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
        #[serde(rename_all = "camelCase")]
        pub struct DaemonSetStatus {
            /// Nodes that should run the daemon Pod and run at least one.
            pub current_number_scheduled: i32,
            /// Nodes that run the daemon Pod but should not.
            pub number_misscheduled: i32,
            /// Nodes that should run the daemon Pod.
            pub desired_number_scheduled: i32,
            /// Nodes that should run the daemon Pod and have one ready.
            pub number_ready: i32,
            #[serde(default, skip_serializing_if = "is_default")]
            pub observed_generation: i64,
            /// Nodes that run an updated daemon Pod.
            pub updated_number_scheduled: i32,
            /// Nodes that should run the daemon Pod and have one available.
            #[serde(default, skip_serializing_if = "is_default")]
            pub number_available: i32,
            /// Nodes that should run the daemon Pod and have none available.
            #[serde(default, skip_serializing_if = "is_default")]
            pub number_unavailable: i32,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub collision_count: Option<i32>,
            #[serde(default, skip_serializing_if = "Vec::is_empty")]
            pub conditions: Vec<DaemonSetCondition>,
            $($revision)*
        }
    };
}

pub mod v1alpha1;
pub mod v1beta1;

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Value, json};

use crate::conversion::Stash;
use crate::field::{FieldError, Path};
use crate::intstr::{self, IntOrPercent};
use crate::kinds::{Defaults, KindApi};
use crate::{keys, validation};

use v1alpha1::{ANNOTATION_PROGRESSIVE_CREATE_POD, ROLLING_UPDATE_SURGING};
use v1beta1::{
    ROLLING_UPDATE_IN_PLACE_IF_POSSIBLE, ROLLING_UPDATE_STANDARD, UPDATE_ON_DELETE,
    UPDATE_ROLLING_UPDATE,
};

/// The [`KindApi`] of Advanced DaemonSet.
pub struct Api;

/// On a v1beta1 object: the v1alpha1 rollingUpdateType (`Surging`) that v1beta1 writes as Standard.
const STASH_ROLLING_UPDATE_TYPE: &str = "updateStrategy.rollingUpdate.rollingUpdateType";
/// On a v1alpha1 object: `{"value": <scaleStrategy>}` when the annotation alone would not restore it.
const STASH_SCALE_STRATEGY: &str = "scaleStrategy";
/// On a v1alpha1 object: `{"value": <previous annotation value or null>}` when down-conversion wrote the
/// progressive-create-pod annotation.
const STASH_PROGRESSIVE_ANNOTATION: &str = "progressiveCreatePodAnnotation";

/// A DaemonSet spec of version `$to` from `$spec`, of the other version: the fields both versions
/// declare alike are moved (named once here for both directions), the update strategy (which the
/// conversion rewrites) and v1beta1's scaleStrategy are given.
macro_rules! spec_of {
    ($spec:ident => $to:ident { $($rest:tt)* }) => {
        crate::conversion::moved_fields!($spec => $to::DaemonSetSpec {
            selector, template, min_ready_seconds, burst_replicas, revision_history_limit, lifecycle;
            $($rest)*
        })
    };
}

/// A DaemonSet status of version `$to` from `$status`, of the other version: every field but the
/// revision (v1alpha1's `daemonSetHash`, v1beta1's `updateRevision`, given) is the same in both.
macro_rules! status_of {
    ($status:ident => $to:ident { $($rest:tt)* }) => {
        crate::conversion::moved_fields!($status => $to::DaemonSetStatus {
            current_number_scheduled, number_misscheduled, desired_number_scheduled, number_ready,
            observed_generation, updated_number_scheduled, number_available, number_unavailable,
            collision_count, conditions;
            $($rest)*
        })
    };
}

/// What the v1alpha1 annotation stands for in v1beta1.
fn scale_strategy_from_annotation(meta: &ObjectMeta) -> Option<v1beta1::DaemonSetScaleStrategy> {
    let progressive = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_PROGRESSIVE_CREATE_POD));
    (progressive.map(String::as_str) == Some("true")).then_some(v1beta1::DaemonSetScaleStrategy {
        partitioned_scaling: true,
    })
}

impl KindApi for Api {
    const KIND: &'static str = "DaemonSet";
    const PLURAL: &'static str = "daemonsets";
    const RAW_PATHS: &'static [&'static str] = &["/spec/template"];
    type V1alpha1 = v1alpha1::DaemonSet;
    type V1beta1 = v1beta1::DaemonSet;

    fn to_v1beta1(object: v1alpha1::DaemonSet) -> v1beta1::DaemonSet {
        let mut metadata = object.metadata;
        let stash = Stash::take(&mut metadata, keys::ANNOTATION_CONVERSION_V1BETA1_FIELDS);
        // As upstream, the annotation stays on the object and also sets partitionedScaling.
        let mut scale_strategy = scale_strategy_from_annotation(&metadata);
        if let Some(recorded) = stash.get::<Value>(STASH_SCALE_STRATEGY) {
            scale_strategy = serde_json::from_value(recorded["value"].clone()).unwrap_or_default();
        }
        if let Some(recorded) = stash.get::<Value>(STASH_PROGRESSIVE_ANNOTATION) {
            let annotations = metadata.annotations.get_or_insert_with(BTreeMap::new);
            match recorded["value"].as_str() {
                Some(previous) => {
                    annotations.insert(ANNOTATION_PROGRESSIVE_CREATE_POD.into(), previous.into())
                }
                None => annotations.remove(ANNOTATION_PROGRESSIVE_CREATE_POD),
            };
            if annotations.is_empty() {
                metadata.annotations = None;
            }
        }

        let spec = object.spec;
        let mut update_strategy = spec.update_strategy;
        let mut alpha_only = Stash::default();
        if let Some(rolling) = update_strategy.rolling_update.as_mut()
            && rolling.type_ == ROLLING_UPDATE_SURGING
        {
            rolling.type_ = ROLLING_UPDATE_STANDARD.into();
            alpha_only.set(
                STASH_ROLLING_UPDATE_TYPE,
                &ROLLING_UPDATE_SURGING.to_string(),
            );
        }
        alpha_only.put(&mut metadata, keys::ANNOTATION_CONVERSION_V1ALPHA1_FIELDS);

        v1beta1::DaemonSet {
            metadata,
            spec: spec_of!(spec => v1beta1 { update_strategy, scale_strategy }),
            status: object
                .status
                .map(|s| status_of!(s => v1beta1 { update_revision: s.daemon_set_hash })),
        }
    }

    fn to_v1alpha1(object: v1beta1::DaemonSet) -> v1alpha1::DaemonSet {
        let mut metadata = object.metadata;
        let alpha_only = Stash::take(&mut metadata, keys::ANNOTATION_CONVERSION_V1ALPHA1_FIELDS);
        let spec = object.spec;
        let mut update_strategy = spec.update_strategy;
        if let Some(rolling) = update_strategy.rolling_update.as_mut()
            && rolling.type_ == ROLLING_UPDATE_STANDARD
            && alpha_only
                .get::<String>(STASH_ROLLING_UPDATE_TYPE)
                .as_deref()
                == Some(ROLLING_UPDATE_SURGING)
        {
            rolling.type_ = ROLLING_UPDATE_SURGING.into();
        }

        let mut stash = Stash::default();
        if spec
            .scale_strategy
            .as_ref()
            .is_some_and(|s| s.partitioned_scaling)
        {
            let previous = metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(ANNOTATION_PROGRESSIVE_CREATE_POD.into(), "true".into());
            if previous.as_deref() != Some("true") {
                stash.set(STASH_PROGRESSIVE_ANNOTATION, &json!({ "value": previous }));
            }
        }
        if scale_strategy_from_annotation(&metadata) != spec.scale_strategy {
            stash.set(
                STASH_SCALE_STRATEGY,
                &json!({ "value": spec.scale_strategy }),
            );
        }
        stash.put(&mut metadata, keys::ANNOTATION_CONVERSION_V1BETA1_FIELDS);

        v1alpha1::DaemonSet {
            metadata,
            spec: spec_of!(spec => v1alpha1 { update_strategy }),
            status: object
                .status
                .map(|s| status_of!(s => v1alpha1 { daemon_set_hash: s.update_revision })),
        }
    }

    /// `SetDefaultsDaemonSetV1beta1`, plus the v1alpha1 rule for a DaemonSet written as `Surging`
    /// (carried here by conversion): maxSurge 1 and maxUnavailable 0 where unset, and the type stays
    /// Standard. As upstream, the Pod template is not defaulted.
    /// OpenKruise defaults no field of an Advanced DaemonSet's Pod template: `_defaults` changes
    /// nothing.
    fn default_with(object: &mut v1beta1::DaemonSet, _defaults: &Defaults) {
        let was_surging = consume_surging_marker(&mut object.metadata);
        let spec = &mut object.spec;
        spec.burst_replicas.get_or_insert(IntOrString::Int(250));
        let strategy = &mut spec.update_strategy;
        if strategy.type_.is_empty() {
            strategy.type_ = UPDATE_ROLLING_UPDATE.into();
        }
        if strategy.type_ == UPDATE_ROLLING_UPDATE {
            let rolling = strategy.rolling_update.get_or_insert_with(Default::default);
            if was_surging && rolling.type_ == ROLLING_UPDATE_STANDARD {
                rolling.max_surge.get_or_insert(IntOrString::Int(1));
                rolling.max_unavailable.get_or_insert(IntOrString::Int(0));
            }
            if rolling.type_.is_empty() {
                rolling.type_ = ROLLING_UPDATE_STANDARD.into();
            }
            if rolling.max_unavailable.is_none() && rolling.max_surge.is_none() {
                rolling.max_unavailable = Some(IntOrString::Int(1));
                rolling.max_surge = Some(IntOrString::Int(0));
            }
        }
        spec.revision_history_limit.get_or_insert(10);
    }

    fn validate(object: &v1beta1::DaemonSet, old: Option<&v1beta1::DaemonSet>) -> Vec<FieldError> {
        let mut errors = Vec::new();
        let name = object.metadata.name.as_deref().unwrap_or_default();
        if object.metadata.generate_name.is_none()
            && let Err(message) = validation::check_dns1123_subdomain(name)
        {
            errors.push(FieldError::invalid(
                &Path::new("metadata").child("name"),
                name,
                message,
            ));
        }
        if let Some(old) = old {
            let mut frozen = object.spec.clone();
            frozen.template = old.spec.template.clone();
            frozen.update_strategy = old.spec.update_strategy.clone();
            frozen.lifecycle = old.spec.lifecycle.clone();
            frozen.burst_replicas = old.spec.burst_replicas.clone();
            frozen.min_ready_seconds = old.spec.min_ready_seconds;
            frozen.revision_history_limit = old.spec.revision_history_limit;
            frozen.scale_strategy = old.spec.scale_strategy.clone();
            if frozen != old.spec {
                errors.push(FieldError::forbidden(
                    &Path::new("spec"),
                    "updates to daemonset spec for fields other than 'burstReplicas', 'template', 'lifecycle', \
                     'scaleStrategy', 'updateStrategy', 'minReadySeconds' and 'revisionHistoryLimit' are forbidden",
                ));
            }
        }
        validate_spec(&object.spec, &mut errors);
        errors
    }
}

/// Whether conversion marked the object as written with rollingUpdateType `Surging`; the marker is
/// removed, since defaulting turns Surging into Standard for good. Objects without the stash annotation are
/// left untouched.
fn consume_surging_marker(meta: &mut ObjectMeta) -> bool {
    let key = keys::ANNOTATION_CONVERSION_V1ALPHA1_FIELDS;
    if !meta
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(key))
    {
        return false;
    }
    let mut alpha_only = Stash::take(meta, key);
    let surging = alpha_only
        .get::<String>(STASH_ROLLING_UPDATE_TYPE)
        .as_deref()
        == Some(ROLLING_UPDATE_SURGING);
    alpha_only.remove(STASH_ROLLING_UPDATE_TYPE);
    alpha_only.put(meta, key);
    surging
}

fn validate_spec(spec: &v1beta1::DaemonSetSpec, errors: &mut Vec<FieldError>) {
    let path = Path::new("spec");
    validation::validate_workload_selector_and_template(
        spec.selector.as_ref(),
        &spec.template,
        &path,
        errors,
    );
    validation::validate_non_negative(
        spec.min_ready_seconds.into(),
        &path.child("minReadySeconds"),
        errors,
    );
    validate_update_strategy(&spec.update_strategy, &path.child("updateStrategy"), errors);
    if let Some(limit) = spec.revision_history_limit {
        validation::validate_non_negative(
            limit.into(),
            &path.child("revisionHistoryLimit"),
            errors,
        );
    }
    if spec
        .lifecycle
        .as_ref()
        .is_some_and(|l| l.in_place_update.is_some())
    {
        errors.push(FieldError::forbidden(
            &path.child("lifecycle").child("inPlaceUpdate"),
            "inPlaceUpdate hook has not supported yet",
        ));
    }
}

fn validate_update_strategy(
    strategy: &v1beta1::DaemonSetUpdateStrategy,
    path: &Path,
    errors: &mut Vec<FieldError>,
) {
    match strategy.type_.as_str() {
        UPDATE_ON_DELETE => {}
        UPDATE_ROLLING_UPDATE => match &strategy.rolling_update {
            None => errors.push(FieldError::required(&path.child("rollingUpdate"), "")),
            Some(rolling) => validate_rolling_update(rolling, &path.child("rollingUpdate"), errors),
        },
        other => errors.push(FieldError::not_supported(
            &path.child("type"),
            other,
            &[UPDATE_ROLLING_UPDATE, UPDATE_ON_DELETE],
        )),
    }
}

/// Whether an int-or-percent counts as set (non-zero). An unparsable value counts as set, so that it is
/// reported rather than ignored.
fn is_non_zero(value: Option<&IntOrString>) -> bool {
    value.is_some_and(|v| IntOrPercent::parse(v).map_or(true, |parsed| !parsed.is_zero()))
}

fn validate_rolling_update(
    rolling: &v1beta1::RollingUpdateDaemonSet,
    path: &Path,
    errors: &mut Vec<FieldError>,
) {
    let has_unavailable = is_non_zero(rolling.max_unavailable.as_ref());
    let has_surge = is_non_zero(rolling.max_surge.as_ref());
    if let (true, Some(value)) = (has_unavailable, &rolling.max_unavailable) {
        intstr::validate(value, &path.child("maxUnavailable"), Some(100), errors);
    }
    if let (true, Some(value)) = (has_surge, &rolling.max_surge) {
        intstr::validate(value, &path.child("maxSurge"), Some(100), errors);
    }
    match (has_unavailable, has_surge) {
        (true, true) => errors.push(FieldError::invalid(
            &path.child("maxSurge"),
            intstr::display_or_empty(rolling.max_surge.as_ref()),
            "may not be set when maxUnavailable is non-zero",
        )),
        (false, false) => errors.push(FieldError::required(
            &path.child("maxUnavailable"),
            "cannot be 0 when maxSurge is 0",
        )),
        _ => {}
    }
    match rolling.type_.as_str() {
        "" | ROLLING_UPDATE_STANDARD => {}
        ROLLING_UPDATE_IN_PLACE_IF_POSSIBLE => {
            if has_surge {
                errors.push(FieldError::required(
                    &path.child("maxSurge"),
                    "must be 0 for InPlaceIfPossible type",
                ));
            }
        }
        other => errors.push(FieldError::not_supported(
            &path.child("rollingUpdateType"),
            other,
            &[ROLLING_UPDATE_STANDARD, ROLLING_UPDATE_IN_PLACE_IF_POSSIBLE],
        )),
    }
    if let Some(partition) = &rolling.partition {
        intstr::validate(partition, &path.child("partition"), Some(100), errors);
    }
}

#[cfg(test)]
mod tests;
