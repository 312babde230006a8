//! Advanced StatefulSet: types of both versions, conversion, defaults, validation and CRD.

/// The Advanced StatefulSet resource of one version (`"v1alpha1"` or `"v1beta1"`). Its kube
/// attribute (names, subresources, printer columns) and the native spec fields are the same in both
/// versions, so they are written once here; v1beta1 adds volumeClaimUpdateStrategy (first braces,
/// after volumeClaimTemplates) and its own fields at the end (second braces). The update strategy
/// type resolves where the macro is called (both versions name the v1beta1 one).
macro_rules! stateful_set_resource {
    ($version:tt, { $($after_claims:tt)* }, { $($beta_only:tt)* }) => {
        crate::crd::resource! {
            #[kube(
                version = $version,
                kind = "StatefulSet",
                namespaced,
                status = "StatefulSetStatus",
                scale(
                    spec_replicas_path = ".spec.replicas",
                    status_replicas_path = ".status.replicas",
                    label_selector_path = ".status.labelSelector"
                ),
                shortname = "sts",
                shortname = "asts",
                doc = "StatefulSet is the Schema for the statefulsets API"
            )]
            replica_columns
            age_column(
                long,
                pod_template_columns(
                    "The containers of currently advanced statefulset.",
                    "The images of currently advanced statefulset."
                )
            )
            #[serde(rename_all = "camelCase")]
            pub struct StatefulSetSpec {
                /// Desired number of Pods (1 when unset); reserved ordinals do not count.
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub replicas: Option<i32>,
                /// Label query over the Pods of the set; must match the template's labels.
                #[schemars(required)]
                #[serde(skip_serializing_if = "Option::is_none")]
                pub selector: Option<LabelSelector>,
                /// The Pod every ordinal runs.
                #[schemars(schema_with = "preserve_unknown_fields_untyped")]
                pub template: PodTemplateSpec,
                /// Claims each Pod gets its own PersistentVolumeClaim of, named `<claim>-<set>-<ordinal>`.
                #[serde(default, skip_serializing_if = "Vec::is_empty")]
                #[schemars(schema_with = "preserve_unknown_fields_untyped")]
                pub volume_claim_templates: Vec<PersistentVolumeClaim>,
                $($after_claims)*
                /// The governing Service: Pods get `<pod>.<serviceName>` DNS names.
                #[serde(default, skip_serializing_if = "String::is_empty")]
                pub service_name: String,
                /// `OrderedReady` (default): one Pod at a time, in ordinal order; `Parallel`: all at once.
                #[serde(default, skip_serializing_if = "String::is_empty")]
                pub pod_management_policy: String,
                /// How Pods are replaced when the template changes.
                #[serde(default)]
                pub update_strategy: StatefulSetUpdateStrategy,
                /// Old revisions kept (10 when unset).
                #[serde(default, skip_serializing_if = "Option::is_none")]
                pub revision_history_limit: Option<i32>,
                $($beta_only)*
            }
        }
    };
}

/// The Advanced StatefulSet status of one version: the native fields are the same in both versions,
/// so they are written once here; v1beta1 adds the updated-ready and updated-available counts (first
/// braces, after updatedReplicas) and the volume claim statuses (second braces, at the end).
macro_rules! stateful_set_status {
    ({ $($after_updated:tt)* }, { $($beta_only:tt)* }) => {
        #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
        #[serde(rename_all = "camelCase")]
        pub struct StatefulSetStatus {
            #[serde(default, skip_serializing_if = "is_default")]
            pub observed_generation: i64,
            /// Pods created by the controller.
            pub replicas: i32,
            /// Pods with a Ready condition.
            pub ready_replicas: i32,
            /// Pods ready for minReadySeconds.
            pub available_replicas: i32,
            /// Pods at currentRevision.
            pub current_replicas: i32,
            /// Pods at updateRevision.
            pub updated_replicas: i32,
            $($after_updated)*
            #[serde(default, skip_serializing_if = "String::is_empty")]
            pub current_revision: String,
            #[serde(default, skip_serializing_if = "String::is_empty")]
            pub update_revision: String,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub collision_count: Option<i32>,
            /// `FailedCreatePod` / `FailedUpdatePod`.
            #[serde(default, skip_serializing_if = "Vec::is_empty")]
            pub conditions: Vec<StatefulSetCondition>,
            /// The selector in string form, for the scale subresource.
            #[serde(default, skip_serializing_if = "String::is_empty")]
            pub label_selector: String,
            $($beta_only)*
        }
    };
}

pub mod v1alpha1;
pub mod v1beta1;
pub mod volume_expansion;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;

use crate::conversion::Stash;
use crate::field::{FieldError, Path};
use crate::intstr::{self, Round};
use crate::kinds::{Defaults, KindApi};
use crate::{keys, podtemplate, validation};

use v1beta1::{
    POD_MANAGEMENT_ORDERED_READY, POD_MANAGEMENT_PARALLEL, POD_UPDATE_IN_PLACE_IF_POSSIBLE,
    POD_UPDATE_IN_PLACE_ONLY, POD_UPDATE_RECREATE, PVC_RETENTION_DELETE, PVC_RETENTION_RETAIN,
    UPDATE_ON_DELETE, UPDATE_ROLLING_UPDATE,
};

/// The [`KindApi`] of Advanced StatefulSet.
pub struct Api;

// Names under which v1beta1-only fields ride on a v1alpha1 object.
const STASH_RESERVE_ORDINALS: &str = "reserveOrdinals";
const STASH_LIFECYCLE: &str = "lifecycle";
const STASH_SCALE_STRATEGY: &str = "scaleStrategy";
const STASH_PVC_RETENTION: &str = "persistentVolumeClaimRetentionPolicy";
const STASH_ORDINALS: &str = "ordinals";
const STASH_VOLUME_CLAIM_UPDATE: &str = "volumeClaimUpdateStrategy";
const STASH_UPDATED_READY: &str = "status.updatedReadyReplicas";
const STASH_UPDATED_AVAILABLE: &str = "status.updatedAvailableReplicas";
const STASH_VOLUME_CLAIMS: &str = "status.volumeClaims";

/// A StatefulSet spec of version `$to` from `$spec`, of the other version: the fields both versions
/// declare alike are moved (named once here for both directions), v1beta1's own fields are given.
macro_rules! spec_of {
    ($spec:ident => $to:ident { $($rest:tt)* }) => {
        crate::conversion::moved_fields!($spec => $to::StatefulSetSpec {
            replicas, selector, template, volume_claim_templates, service_name, pod_management_policy,
            update_strategy, revision_history_limit;
            $($rest)*
        })
    };
}

/// A StatefulSet status of version `$to` from `$status`, of the other version: the fields both
/// versions declare alike are moved (named once here for both directions), v1beta1's own fields are
/// given.
macro_rules! status_of {
    ($status:ident => $to:ident { $($rest:tt)* }) => {
        crate::conversion::moved_fields!($status => $to::StatefulSetStatus {
            observed_generation, replicas, ready_replicas, available_replicas, current_replicas,
            updated_replicas, current_revision, update_revision, collision_count, conditions,
            label_selector;
            $($rest)*
        })
    };
}

impl KindApi for Api {
    const KIND: &'static str = "StatefulSet";
    const PLURAL: &'static str = "statefulsets";
    const RAW_PATHS: &'static [&'static str] = &["/spec/template", "/spec/volumeClaimTemplates"];
    type V1alpha1 = v1alpha1::StatefulSet;
    type V1beta1 = v1beta1::StatefulSet;

    fn to_v1beta1(object: v1alpha1::StatefulSet) -> v1beta1::StatefulSet {
        let mut metadata = object.metadata;
        let stash = Stash::take(&mut metadata, keys::ANNOTATION_CONVERSION_V1BETA1_FIELDS);
        let spec = object.spec;
        let spec = spec_of!(spec => v1beta1 {
            volume_claim_update_strategy: stash.get(STASH_VOLUME_CLAIM_UPDATE).unwrap_or_default(),
            reserve_ordinals: stash.get(STASH_RESERVE_ORDINALS).unwrap_or_default(),
            lifecycle: stash.get(STASH_LIFECYCLE),
            scale_strategy: stash.get(STASH_SCALE_STRATEGY),
            persistent_volume_claim_retention_policy: stash.get(STASH_PVC_RETENTION),
            ordinals: stash.get(STASH_ORDINALS),
        });
        let status = object.status.map(|s| {
            status_of!(s => v1beta1 {
                updated_ready_replicas: stash.get(STASH_UPDATED_READY).unwrap_or_default(),
                updated_available_replicas: stash.get(STASH_UPDATED_AVAILABLE).unwrap_or_default(),
                volume_claims: stash.get(STASH_VOLUME_CLAIMS).unwrap_or_default(),
            })
        });
        v1beta1::StatefulSet {
            metadata,
            spec,
            status,
        }
    }

    fn to_v1alpha1(object: v1beta1::StatefulSet) -> v1alpha1::StatefulSet {
        let mut metadata = object.metadata;
        let spec = object.spec;
        let mut stash = Stash::default();
        stash.set(STASH_RESERVE_ORDINALS, &spec.reserve_ordinals);
        stash.set(STASH_LIFECYCLE, &spec.lifecycle);
        stash.set(STASH_SCALE_STRATEGY, &spec.scale_strategy);
        stash.set(
            STASH_PVC_RETENTION,
            &spec.persistent_volume_claim_retention_policy,
        );
        stash.set(STASH_ORDINALS, &spec.ordinals);
        stash.set(
            STASH_VOLUME_CLAIM_UPDATE,
            &spec.volume_claim_update_strategy,
        );
        let status = object.status.map(|s| {
            stash.set(STASH_UPDATED_READY, &s.updated_ready_replicas);
            stash.set(STASH_UPDATED_AVAILABLE, &s.updated_available_replicas);
            stash.set(STASH_VOLUME_CLAIMS, &s.volume_claims);
            status_of!(s => v1alpha1 {})
        });
        stash.put(&mut metadata, keys::ANNOTATION_CONVERSION_V1BETA1_FIELDS);
        v1alpha1::StatefulSet {
            metadata,
            spec: spec_of!(spec => v1alpha1 {}),
            status,
        }
    }

    /// `SetDefaultsStatefulSet` with the default feature gates (StatefulSetAutoDeletePVC on,
    /// StatefulSetAutoResizePVCGate off), template defaults included.
    fn default_with(object: &mut v1beta1::StatefulSet, defaults: &Defaults) {
        let spec = &mut object.spec;
        if spec.pod_management_policy.is_empty() {
            spec.pod_management_policy = POD_MANAGEMENT_ORDERED_READY.into();
        }
        let strategy = &mut spec.update_strategy;
        if strategy.type_.is_empty() {
            strategy.type_ = UPDATE_ROLLING_UPDATE.into();
        }
        if strategy.type_ == UPDATE_ROLLING_UPDATE {
            let rolling = strategy.rolling_update.get_or_insert_with(Default::default);
            rolling.partition.get_or_insert(0);
            rolling.max_unavailable.get_or_insert(IntOrString::Int(1));
            if rolling.pod_update_policy.is_empty() {
                rolling.pod_update_policy = POD_UPDATE_RECREATE.into();
            }
            rolling.min_ready_seconds.get_or_insert(0);
        }
        let retention = spec
            .persistent_volume_claim_retention_policy
            .get_or_insert_with(Default::default);
        if retention.when_deleted.is_empty() {
            retention.when_deleted = PVC_RETENTION_RETAIN.into();
        }
        if retention.when_scaled.is_empty() {
            retention.when_scaled = PVC_RETENTION_RETAIN.into();
        }
        spec.replicas.get_or_insert(1);
        spec.revision_history_limit.get_or_insert(10);
        if let Some(pod) = spec.template.spec.as_mut()
            && defaults.pod_templates
        {
            podtemplate::set_defaults_pod_template_spec(pod, defaults);
        }
        for claim in spec
            .volume_claim_templates
            .iter_mut()
            .filter(|_| defaults.pod_templates)
        {
            // Upstream applies only the object-level PVC default here: an empty phase becomes Pending.
            let status = claim.status.get_or_insert_with(Default::default);
            status.phase.get_or_insert_with(|| "Pending".into());
        }
    }

    fn validate(
        object: &v1beta1::StatefulSet,
        old: Option<&v1beta1::StatefulSet>,
    ) -> Vec<FieldError> {
        let mut errors = Vec::new();
        let name = object.metadata.name.as_deref().unwrap_or_default();
        if object.metadata.generate_name.is_none()
            && let Err(message) = validation::check_dns1123_label(name)
        {
            errors.push(FieldError::invalid(
                &Path::new("metadata").child("name"),
                name,
                message,
            ));
        }
        validate_spec(&object.spec, &mut errors);
        if let Some(old) = old {
            validate_update(&object.spec, &old.spec, &mut errors);
        }
        errors
    }
}

fn validate_spec(spec: &v1beta1::StatefulSetSpec, errors: &mut Vec<FieldError>) {
    let path = Path::new("spec");
    match spec.pod_management_policy.as_str() {
        "" => errors.push(FieldError::required(&path.child("podManagementPolicy"), "")),
        POD_MANAGEMENT_ORDERED_READY | POD_MANAGEMENT_PARALLEL => {}
        other => errors.push(FieldError::not_supported(
            &path.child("podManagementPolicy"),
            other,
            &[POD_MANAGEMENT_ORDERED_READY, POD_MANAGEMENT_PARALLEL],
        )),
    }
    validate_reserve_ordinals(
        &spec.reserve_ordinals,
        &path.child("reserveOrdinals"),
        errors,
    );
    if let Some(max_unavailable) = spec
        .scale_strategy
        .as_ref()
        .and_then(|s| s.max_unavailable.as_ref())
    {
        validate_max_unavailable(
            max_unavailable,
            spec,
            &path.child("scaleStrategy").child("maxUnavailable"),
            errors,
        );
    }
    validate_update_strategy(spec, &path, errors);
    if let Some(policy) = &spec.persistent_volume_claim_retention_policy {
        let policy_path = path.child("persistentVolumeClaimRetentionPolicy");
        for (name, value) in [
            ("whenDeleted", &policy.when_deleted),
            ("whenScaled", &policy.when_scaled),
        ] {
            if value != PVC_RETENTION_RETAIN && value != PVC_RETENTION_DELETE {
                errors.push(FieldError::not_supported(
                    &policy_path.child(name),
                    value,
                    &[PVC_RETENTION_RETAIN, PVC_RETENTION_DELETE],
                ));
            }
        }
    }
    if let Some(replicas) = spec.replicas {
        validation::validate_non_negative(replicas.into(), &path.child("replicas"), errors);
    }
    validation::validate_workload_selector_and_template(
        spec.selector.as_ref(),
        &spec.template,
        &path,
        errors,
    );
}

/// Integers ≥ 0, or `"a-b"` ranges of digits with a ≤ b.
fn validate_reserve_ordinals(ordinals: &[IntOrString], path: &Path, errors: &mut Vec<FieldError>) {
    for (i, ordinal) in ordinals.iter().enumerate() {
        match ordinal {
            IntOrString::Int(n) if *n < 0 => errors.push(FieldError::invalid(
                &path.index(i),
                n,
                "reserve ordinal must not be negative",
            )),
            IntOrString::Int(_) => {}
            IntOrString::String(range) => {
                let bounds = range.split_once('-').filter(|(a, b)| {
                    [a, b]
                        .iter()
                        .all(|s| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit()))
                });
                let parsed = bounds
                    .and_then(|(a, b)| Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?)));
                match parsed {
                    None => errors.push(FieldError::invalid(
                        &path.index(i),
                        range,
                        "reserve ordinal must be an integer or a range like \"3-5\"",
                    )),
                    Some((start, end)) if start > end => errors.push(FieldError::invalid(
                        &path.index(i),
                        range,
                        "the start of a reserve ordinal range must not be greater than its end",
                    )),
                    Some(_) => {}
                }
            }
        }
    }
}

/// At least 1 (a percentage rounds up against 1 here); anything but the integer 1 needs Parallel.
fn validate_max_unavailable(
    value: &IntOrString,
    spec: &v1beta1::StatefulSetSpec,
    path: &Path,
    errors: &mut Vec<FieldError>,
) {
    if let Some(parsed) = intstr::validate(value, path, None, errors)
        && parsed.scaled(1, Round::Up) < 1
    {
        errors.push(FieldError::invalid(
            path,
            intstr::display(value),
            "should not be less than 1",
        ));
    }
    if spec.pod_management_policy != POD_MANAGEMENT_PARALLEL && *value != IntOrString::Int(1) {
        errors.push(FieldError::invalid(
            path,
            intstr::display(value),
            "can only work with Parallel PodManagementPolicyType",
        ));
    }
}

fn validate_update_strategy(
    spec: &v1beta1::StatefulSetSpec,
    path: &Path,
    errors: &mut Vec<FieldError>,
) {
    let strategy_path = path.child("updateStrategy");
    let rolling_path = strategy_path.child("rollingUpdate");
    match spec.update_strategy.type_.as_str() {
        "" => errors.push(FieldError::required(&strategy_path.child("type"), "")),
        UPDATE_ON_DELETE => {
            if spec.update_strategy.rolling_update.is_some() {
                errors.push(FieldError::invalid(
                    &rolling_path,
                    "{...}",
                    format!("only allowed for updateStrategy '{UPDATE_ROLLING_UPDATE}'"),
                ));
            }
        }
        UPDATE_ROLLING_UPDATE => {
            if let Some(rolling) = &spec.update_strategy.rolling_update {
                validate_rolling_update(spec, rolling, path, &rolling_path, errors);
            }
        }
        other => errors.push(FieldError::not_supported(
            &strategy_path.child("type"),
            other,
            &[UPDATE_ROLLING_UPDATE, UPDATE_ON_DELETE],
        )),
    }
}

fn validate_rolling_update(
    spec: &v1beta1::StatefulSetSpec,
    rolling: &v1beta1::RollingUpdateStatefulSetStrategy,
    path: &Path,
    rolling_path: &Path,
    errors: &mut Vec<FieldError>,
) {
    if let Some(partition) = rolling.partition {
        validation::validate_non_negative(
            partition.into(),
            &rolling_path.child("partition"),
            errors,
        );
    }
    if let Some(seconds) = rolling.min_ready_seconds {
        let seconds_path = rolling_path.child("minReadySeconds");
        validation::validate_non_negative(seconds.into(), &seconds_path, errors);
        if seconds > v1beta1::MAX_MIN_READY_SECONDS {
            errors.push(FieldError::invalid(
                &seconds_path,
                seconds,
                "must be no more than 300 seconds",
            ));
        }
    }
    match &rolling.max_unavailable {
        None => errors.push(FieldError::required(
            &rolling_path.child("maxUnavailable"),
            "",
        )),
        Some(value) => {
            validate_max_unavailable(value, spec, &rolling_path.child("maxUnavailable"), errors)
        }
    }
    let policy_path = rolling_path.child("podUpdatePolicy");
    match rolling.pod_update_policy.as_str() {
        "" => errors.push(FieldError::required(&policy_path, "")),
        POD_UPDATE_RECREATE => {}
        policy @ (POD_UPDATE_IN_PLACE_IF_POSSIBLE | POD_UPDATE_IN_PLACE_ONLY) => {
            if !has_in_place_readiness_gate(&spec.template) {
                errors.push(FieldError::invalid(
                    &path.child("template").child("spec").child("readinessGates"),
                    readiness_gates(&spec.template).join(","),
                    format!(
                        "must contains {} when podUpdatePolicy is {policy}",
                        keys::CONDITION_IN_PLACE_UPDATE_READY
                    ),
                ));
            }
        }
        other => errors.push(FieldError::not_supported(
            &policy_path,
            other,
            &[
                POD_UPDATE_RECREATE,
                POD_UPDATE_IN_PLACE_IF_POSSIBLE,
                POD_UPDATE_IN_PLACE_ONLY,
            ],
        )),
    }
    if let Some(unordered) = &rolling.unordered_update {
        let unordered_path = rolling_path.child("unorderedUpdate");
        if spec.pod_management_policy != POD_MANAGEMENT_PARALLEL {
            errors.push(FieldError::required(
                &unordered_path,
                "unorderedUpdate can only work with Parallel PodManagementPolicyType",
            ));
        }
        if let Some(priority) = &unordered.priority_strategy {
            priority.validate(&unordered_path.child("priorityStrategy"), errors);
        }
    }
}

fn readiness_gates(template: &PodTemplateSpec) -> Vec<&str> {
    template
        .spec
        .iter()
        .flat_map(|spec| spec.readiness_gates.iter().flatten())
        .map(|gate| gate.condition_type.as_str())
        .collect()
}

/// Whether the template carries the `InPlaceUpdateReady` readiness gate that in-place update needs.
pub fn has_in_place_readiness_gate(template: &PodTemplateSpec) -> bool {
    readiness_gates(template).contains(&keys::CONDITION_IN_PLACE_UPDATE_READY)
}

/// Update rules: only the fields allowed to change changed; with InPlaceOnly, the template changed in
/// container images only.
fn validate_update(
    spec: &v1beta1::StatefulSetSpec,
    old: &v1beta1::StatefulSetSpec,
    errors: &mut Vec<FieldError>,
) {
    let mut frozen = spec.clone();
    frozen.replicas = old.replicas;
    frozen.ordinals = old.ordinals.clone();
    frozen.template = old.template.clone();
    frozen.reserve_ordinals = old.reserve_ordinals.clone();
    frozen.lifecycle = old.lifecycle.clone();
    frozen.revision_history_limit = old.revision_history_limit;
    frozen.persistent_volume_claim_retention_policy =
        old.persistent_volume_claim_retention_policy.clone();
    frozen.volume_claim_templates = old.volume_claim_templates.clone();
    frozen.volume_claim_update_strategy = old.volume_claim_update_strategy.clone();
    frozen.update_strategy = old.update_strategy.clone();
    frozen.scale_strategy = old.scale_strategy.clone();
    if frozen != *old {
        errors.push(FieldError::forbidden(
            &Path::new("spec"),
            "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', \
             'reserveOrdinals', 'lifecycle', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy', \
             'volumeClaimTemplates', 'volumeClaimUpdateStrategy', 'scaleStrategy' and 'updateStrategy' are forbidden",
        ));
    }
    let in_place_only = spec
        .update_strategy
        .rolling_update
        .as_ref()
        .is_some_and(|r| r.pod_update_policy == POD_UPDATE_IN_PLACE_ONLY);
    if in_place_only && let Some((op, at)) = non_image_change(&old.template, &spec.template) {
        errors.push(FieldError::forbidden(
            &Path::new("spec").child("template"),
            format!(
                "invalid template modified with InPlaceOnly strategy: {op} {at}, currently only image update is \
                 allowed for InPlaceOnly"
            ),
        ));
    }
}

/// The first change between two Pod template specs, as a JSON patch would express it (`replace
/// /containers/0/env`), that is not the replacement of an app container's image.
fn non_image_change(
    old: &PodTemplateSpec,
    new: &PodTemplateSpec,
) -> Option<(&'static str, String)> {
    let encode = |t: &PodTemplateSpec| {
        crate::gojson::prune_empty(serde_json::to_value(&t.spec).unwrap_or(Value::Null))
    };
    let mut changes = Vec::new();
    diff(&encode(old), &encode(new), String::new(), &mut changes);
    changes
        .into_iter()
        .find(|(op, at)| !(*op == "replace" && is_container_image_path(at)))
}

/// Upstream's rule is the unanchored pattern `/containers/<n>/image`.
fn is_container_image_path(at: &str) -> bool {
    at.match_indices("/containers/").any(|(i, m)| {
        let rest = &at[i + m.len()..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        digits > 0 && rest[digits..].starts_with("/image")
    })
}

fn diff(old: &Value, new: &Value, at: String, changes: &mut Vec<(&'static str, String)>) {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, value) in a {
                match b.get(key) {
                    Some(other) => diff(value, other, format!("{at}/{key}"), changes),
                    None => changes.push(("remove", format!("{at}/{key}"))),
                }
            }
            for key in b.keys().filter(|k| !a.contains_key(*k)) {
                changes.push(("add", format!("{at}/{key}")));
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                diff(x, y, format!("{at}/{i}"), changes);
            }
            for i in b.len()..a.len() {
                changes.push(("remove", format!("{at}/{i}")));
            }
            for i in a.len()..b.len() {
                changes.push(("add", format!("{at}/{i}")));
            }
        }
        (a, b) if a != b => changes.push(("replace", at)),
        _ => {}
    }
}

#[cfg(test)]
mod tests;
