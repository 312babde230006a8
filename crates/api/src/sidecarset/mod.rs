//! SidecarSet: types of both versions, conversion, defaults (with the two hash annotations), validation,
//! the cross-SidecarSet conflict check and the CRD.

/// The SidecarSet resource of one version (`"v1alpha1"` or `"v1beta1"`), declared with the spec
/// struct that follows the version. The kube attribute (names, subresources, printer columns) is
/// the same in both versions, so it is written once here; the specs differ, so each version writes
/// its own.
macro_rules! sidecar_set_resource {
    ($version:tt, $($spec:tt)*) => {
        crate::crd::resource! {
            #[kube(
                version = $version,
                kind = "SidecarSet",
                status = "SidecarSetStatus",
                doc = "SidecarSet is the Schema for the sidecarsets API",
                printcolumn(
                    name = "MATCHED",
                    type_ = "integer",
                    json_path = ".status.matchedPods",
                    description = "The number of pods matched."
                ),
                printcolumn(
                    name = "UPDATED",
                    type_ = "integer",
                    json_path = ".status.updatedPods",
                    description = "The number of pods matched and updated."
                ),
                printcolumn(
                    name = "READY",
                    type_ = "integer",
                    json_path = ".status.readyPods",
                    description = "The number of pods matched and ready."
                )
            )]
            age_column(long)
            $($spec)*
        }
    };
}

mod conflicts;
mod gotypes;
pub mod hash;
pub mod patch_metadata;
/// Kept at its old path for importers outside kruise-api; the type lives in [`crate::quantity`].
pub mod resources_expr;
pub mod v1alpha1;
pub mod v1beta1;
mod validate;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, HTTPGetAction, ObjectFieldSelector, Probe};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

pub use conflicts::conflicts;
pub use hash::{ANNOTATION_HASH, ANNOTATION_HASH_WITHOUT_IMAGE};

use crate::conversion::Stash;
use crate::field::FieldError;
use crate::keys::{ANNOTATION_CONVERSION_V1ALPHA1_FIELDS, ANNOTATION_CONVERSION_V1BETA1_FIELDS};
use crate::kinds::{Defaults, KindApi};

/// v1alpha1 label carrying v1beta1's `spec.customVersion`; also put on the ControllerRevisions.
pub const LABEL_CUSTOM_VERSION: &str = "apps.kruise.io/sidecarset-custom-version";
/// A canary SidecarSet (`"true"`) shadows its base SidecarSet during injection.
pub const ANNOTATION_CANARY: &str = "apps.kruise.io/sidecarset-canary";
/// The base of a canary SidecarSet.
pub const ANNOTATION_BASE: &str = "apps.kruise.io/sidecarset-base";
/// Label of SidecarSet ControllerRevisions: the SidecarSet name.
pub const LABEL_SIDECARSET_NAME: &str = "kruise.io/sidecarset-name";
/// Pod annotation: comma-joined sorted names of the SidecarSets injected.
pub const ANNOTATION_INJECTED_LIST: &str = "kruise.io/sidecarset-injected-list";
/// Pod annotation: in-place upgrade state per SidecarSet.
pub const ANNOTATION_INPLACE_UPDATE_STATE: &str = "kruise.io/sidecarset-inplace-update-state";
/// Pod annotation: the working container of each hot-upgrade sidecar.
pub const ANNOTATION_WORKING_HOT_UPGRADE_CONTAINER: &str =
    "kruise.io/sidecarset-working-hotupgrade-container";
/// Pod condition: whether the Pod's sidecars can be upgraded in place.
pub const CONDITION_SIDECARSET_UPGRADABLE: &str = "SidecarSetUpgradable";
/// Env var set on every injected container.
pub const ENV_IS_INJECTED: &str = "IS_INJECTED";
/// Namespace label v1alpha1's `namespace` becomes in v1beta1's `namespaceSelector`.
pub const LABEL_NAMESPACE_NAME: &str = "kubernetes.io/metadata.name";

// Names of the fields carried through the other version.
const STASH_NAMESPACE: &str = "namespace";
const STASH_NAMESPACE_SELECTOR: &str = "namespaceSelector";
const STASH_EMPTY_CUSTOM_VERSION_LABEL: &str = "emptyCustomVersionLabel";
const STASH_CUSTOM_VERSION_LABEL: &str = "customVersionLabel";

/// The [`KindApi`] of SidecarSet.
pub struct Api;

/// Whether a SidecarSet is a canary, and the name of its base.
pub fn canary_base(meta: &ObjectMeta) -> Option<&str> {
    let annotations = meta.annotations.as_ref()?;
    let base = annotations
        .get(ANNOTATION_BASE)
        .map(String::as_str)
        .filter(|b| !b.is_empty())?;
    (annotations.get(ANNOTATION_CANARY).map(String::as_str) == Some("true")).then_some(base)
}

/// Whether a container is a native sidecar (an init container with `restartPolicy: Always`).
pub fn is_native_sidecar(container: &Container) -> bool {
    container.restart_policy.as_deref() == Some("Always")
}

fn namespace_selector(namespace: &str) -> LabelSelector {
    LabelSelector {
        match_labels: Some(BTreeMap::from([(
            LABEL_NAMESPACE_NAME.to_string(),
            namespace.to_string(),
        )])),
        match_expressions: None,
    }
}

fn take_stash(meta: &mut ObjectMeta, key: &str) -> Option<(Stash, String)> {
    let raw = meta.annotations.as_ref()?.get(key)?.clone();
    Some((Stash::take(meta, key), raw))
}

fn remove_label(meta: &mut ObjectMeta, key: &str) -> Option<String> {
    let labels = meta.labels.as_mut()?;
    let value = labels.remove(key)?;
    if labels.is_empty() {
        meta.labels = None;
    }
    Some(value)
}

fn put_annotation(meta: &mut ObjectMeta, key: &str, value: String) {
    meta.annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(key.to_string(), value);
}

/// A SidecarSet spec of version `$to` from `$spec`, of the other version: the fields both versions
/// declare alike are moved (named once here for both directions); the namespace fields (which the
/// conversion rewrites) and v1beta1's customVersion are given.
macro_rules! spec_of {
    ($spec:ident => $to:ident { $($rest:tt)* }) => {
        crate::conversion::moved_fields!($spec => $to::SidecarSetSpec {
            selector, init_containers, containers, volumes, update_strategy, injection_strategy,
            image_pull_secrets, revision_history_limit, patch_pod_metadata;
            $($rest)*
        })
    };
}

impl KindApi for Api {
    const KIND: &'static str = "SidecarSet";
    const PLURAL: &'static str = "sidecarsets";
    const RAW_PATHS: &'static [&'static str] =
        &["/spec/containers", "/spec/initContainers", "/spec/volumes"];
    type V1alpha1 = v1alpha1::SidecarSet;
    type V1beta1 = v1beta1::SidecarSet;

    fn to_v1beta1(object: v1alpha1::SidecarSet) -> v1beta1::SidecarSet {
        let mut metadata = object.metadata;
        let spec = object.spec;
        let carried = take_stash(&mut metadata, ANNOTATION_CONVERSION_V1BETA1_FIELDS);
        let mut stash = Stash::default();

        // The custom-version label becomes the field (an empty label is remembered).
        let label = remove_label(&mut metadata, LABEL_CUSTOM_VERSION);
        if label.as_deref() == Some("") {
            stash.set(STASH_EMPTY_CUSTOM_VERSION_LABEL, &true);
        }
        // A label of that key that the v1beta1 object had of its own.
        if let Some((carried, _)) = &carried
            && let Some(own) = carried
                .get::<Option<String>>(STASH_CUSTOM_VERSION_LABEL)
                .flatten()
        {
            metadata
                .labels
                .get_or_insert_with(BTreeMap::new)
                .insert(LABEL_CUSTOM_VERSION.into(), own);
        }
        // A namespace wins over namespaceSelector and becomes a selector on the namespace name label.
        let namespace_selector = if spec.namespace.is_empty() {
            spec.namespace_selector
        } else {
            stash.set(STASH_NAMESPACE, &spec.namespace);
            stash.set(STASH_NAMESPACE_SELECTOR, &spec.namespace_selector);
            Some(namespace_selector(&spec.namespace))
        };
        stash.put(&mut metadata, ANNOTATION_CONVERSION_V1ALPHA1_FIELDS);

        v1beta1::SidecarSet {
            metadata,
            spec: spec_of!(spec => v1beta1 {
                namespace_selector,
                custom_version: label.unwrap_or_default(),
            }),
            status: object.status,
        }
    }

    fn to_v1alpha1(object: v1beta1::SidecarSet) -> v1alpha1::SidecarSet {
        let mut metadata = object.metadata;
        let spec = object.spec;

        // What an earlier up-conversion carried: applied only while it still describes this object
        // (a v1beta1 client may have changed namespaceSelector or customVersion since); otherwise the
        // annotation is left as it is.
        let mut namespace = String::new();
        let mut namespace_selector = spec.namespace_selector;
        let mut empty_label = false;
        if let Some((carried, raw)) =
            take_stash(&mut metadata, ANNOTATION_CONVERSION_V1ALPHA1_FIELDS)
        {
            let carried_namespace = carried.get::<String>(STASH_NAMESPACE).unwrap_or_default();
            let namespace_ok = carried_namespace.is_empty()
                || namespace_selector.as_ref()
                    == Some(&self::namespace_selector(&carried_namespace));
            let wants_empty_label = carried
                .get::<bool>(STASH_EMPTY_CUSTOM_VERSION_LABEL)
                .unwrap_or_default();
            let label_ok = !wants_empty_label || spec.custom_version.is_empty();
            if namespace_ok && label_ok {
                if !carried_namespace.is_empty() {
                    namespace = carried_namespace;
                    namespace_selector = carried.get::<LabelSelector>(STASH_NAMESPACE_SELECTOR);
                }
                empty_label = wants_empty_label;
            } else {
                put_annotation(&mut metadata, ANNOTATION_CONVERSION_V1ALPHA1_FIELDS, raw);
            }
        }

        // customVersion becomes the label; a label of that key the object had is carried.
        let mut stash = Stash::default();
        if let Some(own) = remove_label(&mut metadata, LABEL_CUSTOM_VERSION) {
            stash.set(STASH_CUSTOM_VERSION_LABEL, &Some(own));
        }
        if !spec.custom_version.is_empty() || empty_label {
            metadata
                .labels
                .get_or_insert_with(BTreeMap::new)
                .insert(LABEL_CUSTOM_VERSION.into(), spec.custom_version);
        }
        stash.put(&mut metadata, ANNOTATION_CONVERSION_V1BETA1_FIELDS);

        v1alpha1::SidecarSet {
            metadata,
            spec: spec_of!(spec => v1alpha1 { namespace, namespace_selector }),
            status: object.status,
        }
    }

    /// A SidecarSet embeds no Pod template: `_defaults` changes nothing.
    fn default_with(object: &mut v1beta1::SidecarSet, _defaults: &Defaults) {
        set_defaults(object);
        hash::set_hash_annotations(object);
    }

    fn validate(
        object: &v1beta1::SidecarSet,
        old: Option<&v1beta1::SidecarSet>,
    ) -> Vec<FieldError> {
        validate::validate(object, old)
    }
}

/// OpenKruise's `SetDefaultsSidecarSetV1beta1` (plus the CRD-schema defaults of upstream, which our CRD
/// leaves to the webhook).
pub fn set_defaults(object: &mut v1beta1::SidecarSet) {
    let spec = &mut object.spec;
    let strategy = &mut spec.update_strategy;
    if strategy.type_.is_empty() {
        strategy.type_ = v1beta1::UPDATE_ROLLING_UPDATE.into();
    }
    strategy.max_unavailable.get_or_insert(IntOrString::Int(1));
    strategy.partition.get_or_insert(IntOrString::Int(0));
    for container in &mut spec.init_containers {
        set_defaults_sidecar_container(container, v1beta1::AFTER_APP_CONTAINER);
    }
    for container in &mut spec.containers {
        set_defaults_sidecar_container(container, v1beta1::BEFORE_APP_CONTAINER);
    }
    for volume in &mut spec.volumes {
        crate::podtemplate::set_defaults_volume(volume);
    }
    spec.revision_history_limit.get_or_insert(10);
    for patch in &mut spec.patch_pod_metadata {
        if patch.patch_policy.is_empty() {
            patch.patch_policy = v1beta1::PATCH_POLICY_RETAIN.into();
        }
    }
    if let Some(revision) = spec.injection_strategy.revision.as_mut()
        && revision.policy.is_empty()
    {
        revision.policy = v1beta1::INJECT_REVISION_ALWAYS.into();
    }
}

fn set_defaults_sidecar_container(sidecar: &mut v1beta1::SidecarContainer, inject_policy: &str) {
    if sidecar.pod_inject_policy.is_empty() {
        sidecar.pod_inject_policy = inject_policy.into();
    }
    if sidecar.upgrade_strategy.upgrade_type.is_empty() {
        sidecar.upgrade_strategy.upgrade_type = v1beta1::COLD_UPGRADE.into();
    }
    if sidecar.share_volume_policy.type_.is_empty() {
        sidecar.share_volume_policy.type_ = v1beta1::SHARE_VOLUME_POLICY_DISABLED.into();
    }
    for transfer in &mut sidecar.transfer_env {
        if let Some(field_ref) = transfer
            .source_container_name_from
            .as_mut()
            .and_then(|s| s.field_ref.as_mut())
        {
            set_defaults_field_selector(field_ref);
        }
    }
    if let Some(policy) = sidecar.resources_policy.as_mut()
        && policy.target_containers_name_regex.is_empty()
    {
        policy.target_containers_name_regex = ".*".into();
    }
    set_defaults_container(&mut sidecar.container);
}

/// The core container defaults upstream applies to sidecars: those of `SetDefaults_Container` (the core
/// pull-policy rule: `Always` for `:latest` or untagged images, else `IfNotPresent`), port protocols,
/// fieldRef API versions, resource quantities rounded up to 1m, liveness and readiness probe defaults
/// (not startup), and HTTP handler defaults.
fn set_defaults_container(container: &mut Container) {
    if container
        .image_pull_policy
        .as_deref()
        .is_none_or(str::is_empty)
    {
        let latest = image_tag_is_latest(container.image.as_deref().unwrap_or_default());
        container.image_pull_policy = Some(if latest { "Always" } else { "IfNotPresent" }.into());
    }
    if container
        .termination_message_path
        .as_deref()
        .is_none_or(str::is_empty)
    {
        container.termination_message_path = Some("/dev/termination-log".into());
    }
    if container
        .termination_message_policy
        .as_deref()
        .is_none_or(str::is_empty)
    {
        container.termination_message_policy = Some("File".into());
    }
    for port in container.ports.iter_mut().flatten() {
        if port.protocol.as_deref().is_none_or(str::is_empty) {
            port.protocol = Some("TCP".into());
        }
    }
    for env in container.env.iter_mut().flatten() {
        if let Some(field_ref) = env.value_from.as_mut().and_then(|v| v.field_ref.as_mut()) {
            set_defaults_field_selector(field_ref);
        }
    }
    if let Some(resources) = container.resources.as_mut() {
        for list in [&mut resources.limits, &mut resources.requests]
            .into_iter()
            .flatten()
        {
            for value in list.values_mut() {
                if let Ok(mut quantity) = crate::quantity::Quantity::parse(&value.0) {
                    quantity.round_up_to_milli();
                    *value = K8sQuantity(quantity.go_string());
                }
            }
        }
    }
    crate::podtemplate::default_probes_and_handlers(
        container,
        false,
        set_defaults_probe,
        set_defaults_http_get,
    );
}

fn set_defaults_field_selector(selector: &mut ObjectFieldSelector) {
    if selector.api_version.as_deref().is_none_or(str::is_empty) {
        selector.api_version = Some("v1".into());
    }
}

fn set_defaults_probe(probe: &mut Probe) {
    for (field, default) in [
        (&mut probe.timeout_seconds, 1),
        (&mut probe.period_seconds, 10),
        (&mut probe.success_threshold, 1),
        (&mut probe.failure_threshold, 3),
    ] {
        if field.is_none_or(|v| v == 0) {
            *field = Some(default);
        }
    }
    if let Some(http) = probe.http_get.as_mut() {
        set_defaults_http_get(http);
    }
}

fn set_defaults_http_get(http: &mut HTTPGetAction) {
    if http.path.as_deref().is_none_or(str::is_empty) {
        http.path = Some("/".into());
    }
    if http.scheme.as_deref().is_none_or(str::is_empty) {
        http.scheme = Some("HTTP".into());
    }
}

/// The core rule: an image without a tag or digest is `:latest`.
fn image_tag_is_latest(image: &str) -> bool {
    // An unparsable (here: empty) reference has no tag.
    if image.is_empty() || image.contains('@') {
        return false;
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        Some((_, tag)) => tag == "latest",
        None => true,
    }
}

#[cfg(test)]
mod tests;
