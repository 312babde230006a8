//! Which updates of `volumeClaimTemplates` an Advanced StatefulSet admits when its claims follow the
//! templates (`volumeClaimUpdateStrategy.type: OnPodRollingUpdate`), as OpenKruise v1.9.0's validating
//! webhook decides (`ValidateVolumeClaimTemplateUpdate` in
//! pkg/webhook/statefulset/validating/statefulset_validation.go):
//!
//! - no template may be added, removed or renamed;
//! - a template may change its storage request or limit, and nothing its claims cannot follow: its
//!   `storageClassName` (when both old and new name one) and its `accessModes` stay;
//! - a template whose storage changed is checked against its StorageClass — the one it names, or the
//!   cluster's default class when it names none: a class with `allowVolumeExpansion: false` refuses
//!   the change (unset allows it, as upstream); a named class that cannot be read refuses it; no
//!   default class admits it.
//!
//! Like upstream, the first error found is the answer, and templates are checked in the new spec's
//! order. Pure: the classes are looked up by the caller ([`resized_templates`] says which are needed).

use std::cmp::Ordering;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;

use super::v1beta1::{StatefulSetSpec, VOLUME_CLAIM_UPDATE_ON_DELETE};
use crate::field::{FieldError, Path};
use crate::quantity::Quantity;

/// The annotation that makes a StorageClass the cluster's default.
pub const ANNOTATION_DEFAULT_STORAGE_CLASS: &str = "storageclass.kubernetes.io/is-default-class";

/// A template whose storage request or limit changed, and the class that must allow it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resize {
    /// The template's name.
    pub template: String,
    /// The class the template names; `None`: the cluster's default class.
    pub storage_class: Option<String>,
}

/// What reading a template's StorageClass found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClassLookup {
    /// The class, and its `allowVolumeExpansion`.
    Found {
        name: String,
        allow_volume_expansion: Option<bool>,
    },
    /// The template names no class and the cluster has no default class.
    NoDefault,
    /// The class could not be read (not found, or the apiserver did not answer): why.
    Unreadable(String),
}

impl ClassLookup {
    pub fn of(class: &StorageClass) -> Self {
        Self::Found {
            name: class.metadata.name.clone().unwrap_or_default(),
            allow_volume_expansion: class.allow_volume_expansion,
        }
    }
}

/// The cluster's default StorageClass among `classes`: of those annotated default, the most
/// recently created (the first listed among equals), as upstream's `GetDefaultStorageClass`.
pub fn default_class(classes: &[StorageClass]) -> Option<&StorageClass> {
    let mut found: Option<&StorageClass> = None;
    for class in classes {
        let is_default = class
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_DEFAULT_STORAGE_CLASS))
            .is_some_and(|v| v == "true");
        if !is_default {
            continue;
        }
        let newer = found.is_none_or(|f| {
            let created = |c: &StorageClass| c.metadata.creation_timestamp.clone().map(|t| t.0);
            created(f) < created(class)
        });
        if newer {
            found = Some(class);
        }
    }
    found
}

fn templates_path(name: &str) -> Path {
    // Upstream names the template by its name inside the path segment.
    Path::new("spec").child(&format!("volumeClaimTemplates[{name}]"))
}

/// The structural rules, and the templates whose storage changed (to be checked against their
/// class); `Ok(vec![])` when the strategy is not `OnPodRollingUpdate` (unset or `OnDelete`: the
/// templates only shape new claims, anything goes).
pub fn resized_templates(
    spec: &StatefulSetSpec,
    old: &StatefulSetSpec,
) -> Result<Vec<Resize>, FieldError> {
    let strategy = spec.volume_claim_update_strategy.type_.as_str();
    if strategy.is_empty() || strategy == VOLUME_CLAIM_UPDATE_ON_DELETE {
        return Ok(Vec::new());
    }
    let templates = &spec.volume_claim_templates;
    if templates.len() != old.volume_claim_templates.len() {
        return Err(FieldError::invalid(
            &Path::new("spec").child("volumeClaimTemplates"),
            format!(
                "{} templates (were {})",
                templates.len(),
                old.volume_claim_templates.len()
            ),
            "volumeClaimTemplate can not be added or deleted when OnRollingUpdate",
        ));
    }
    let mut resizes = Vec::new();
    for template in templates {
        let name = template.metadata.name.clone().unwrap_or_default();
        let path = templates_path(&name);
        let Some(previous) = old
            .volume_claim_templates
            .iter()
            .find(|t| t.metadata.name.as_deref().unwrap_or_default() == name)
        else {
            return Err(FieldError::forbidden(
                &path.child("name"),
                "volumeClaimTemplate name can not be modified",
            ));
        };
        if !compatible_without_size(previous, template) {
            return Err(FieldError::invalid(
                &path,
                &name,
                "volumeClaimTemplate can not be modified when OnRollingUpdate",
            ));
        }
        if storage_changed(previous, template) {
            resizes.push(Resize {
                template: name,
                storage_class: class_name(template).map(str::to_owned),
            });
        }
    }
    Ok(resizes)
}

/// The refusal of one resize given what its class lookup found; `None` admits it.
pub fn refusal(resize: &Resize, lookup: &ClassLookup) -> Option<FieldError> {
    let class_path = templates_path(&resize.template)
        .child("spec")
        .child("storageClassName");
    match lookup {
        ClassLookup::NoDefault => None,
        ClassLookup::Unreadable(why) => Some(match &resize.storage_class {
            Some(name) => FieldError::invalid(&class_path, name, format!("can not get sc: {why}")),
            None => FieldError::invalid(
                &class_path,
                "nil",
                format!("can not list storage class: {why}"),
            ),
        }),
        ClassLookup::Found {
            name,
            allow_volume_expansion: Some(false),
        } => Some(FieldError::forbidden(
            &templates_path(&resize.template)
                .child("spec")
                .child("resources")
                .child("requests")
                .child("storage"),
            format!("storage class {name} does not support volume expansion"),
        )),
        ClassLookup::Found { .. } => None,
    }
}

/// The whole rule with a lookup: the first refusal, if any.
pub fn check(
    spec: &StatefulSetSpec,
    old: &StatefulSetSpec,
    mut lookup: impl FnMut(Option<&str>) -> ClassLookup,
) -> Option<FieldError> {
    let resizes = match resized_templates(spec, old) {
        Ok(resizes) => resizes,
        Err(error) => return Some(error),
    };
    resizes
        .iter()
        .find_map(|r| refusal(r, &lookup(r.storage_class.as_deref())))
}

fn class_name(claim: &PersistentVolumeClaim) -> Option<&str> {
    claim.spec.as_ref()?.storage_class_name.as_deref()
}

/// Upstream's `IsClaimCompatibleWithoutSize`: the class (when both name one) and the access modes,
/// in order, are unchanged.
fn compatible_without_size(old: &PersistentVolumeClaim, new: &PersistentVolumeClaim) -> bool {
    if let (Some(a), Some(b)) = (class_name(old), class_name(new))
        && a != b
    {
        return false;
    }
    let modes = |c: &PersistentVolumeClaim| {
        c.spec
            .as_ref()
            .and_then(|s| s.access_modes.clone())
            .unwrap_or_default()
    };
    modes(old) == modes(new)
}

/// Whether the storage request or limit changed in value (an absent one counts as zero, as Go's
/// `ResourceList.Storage()`).
fn storage_changed(old: &PersistentVolumeClaim, new: &PersistentVolumeClaim) -> bool {
    let storage = |c: &PersistentVolumeClaim, limits: bool| {
        let resources = c.spec.as_ref().and_then(|s| s.resources.as_ref());
        let list = if limits {
            resources.and_then(|r| r.limits.as_ref())
        } else {
            resources.and_then(|r| r.requests.as_ref())
        };
        list.and_then(|l| l.get("storage")).map(|q| q.0.clone())
    };
    [false, true].into_iter().any(|limits| {
        let (a, b) = (storage(old, limits), storage(new, limits));
        let value = |q: Option<String>| Quantity::parse(q.as_deref().unwrap_or("0"));
        match (value(a.clone()), value(b.clone())) {
            (Ok(a), Ok(b)) => a.cmp_value(&b) != Ordering::Equal,
            // The apiserver validated both; unparsable text compares as text.
            _ => a != b,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use serde_json::json;

    fn spec(strategy: &str, templates: serde_json::Value) -> StatefulSetSpec {
        serde_json::from_value(json!({
            "template": {},
            "volumeClaimUpdateStrategy": {"type": strategy},
            "volumeClaimTemplates": templates,
        }))
        .expect("test spec decodes")
    }

    fn vct(name: &str, class: Option<&str>, storage: &str) -> serde_json::Value {
        let mut spec = json!({
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": storage}},
        });
        if let Some(class) = class {
            spec["storageClassName"] = json!(class);
        }
        json!({"metadata": {"name": name}, "spec": spec})
    }

    fn found(name: &str, allow: Option<bool>) -> ClassLookup {
        ClassLookup::Found {
            name: name.into(),
            allow_volume_expansion: allow,
        }
    }

    /// The classes of the cases: `allow` allows expansion, `deny` does not, `unset` does not say,
    /// `gone` cannot be read; the default class is `deny` unless a case says otherwise.
    fn classes(default: ClassLookup) -> impl FnMut(Option<&str>) -> ClassLookup {
        move |name| match name {
            Some("allow") => found("allow", Some(true)),
            Some("deny") => found("deny", Some(false)),
            Some("unset") => found("unset", None),
            Some(other) => ClassLookup::Unreadable(format!("storageclasses {other:?} not found")),
            None => default.clone(),
        }
    }

    #[test]
    fn volume_expansion_decisions() {
        let deny_default = found("deny", Some(false));
        let refused_by = |class: &str, template: &str| {
            Some(format!(
                "spec.volumeClaimTemplates[{template}].spec.resources.requests.storage: Forbidden: \
                 storage class {class} does not support volume expansion"
            ))
        };
        #[allow(clippy::type_complexity)]
        let cases: Vec<(&str, StatefulSetSpec, StatefulSetSpec, ClassLookup, Option<String>)> = vec![
            (
                "no strategy: anything goes",
                spec("", json!([vct("data", Some("deny"), "2Gi")])),
                spec("", json!([vct("data", Some("deny"), "1Gi")])),
                deny_default.clone(),
                None,
            ),
            (
                "OnDelete: anything goes",
                spec("OnDelete", json!([vct("data", Some("allow"), "2Gi")])),
                spec("OnDelete", json!([vct("data", Some("deny"), "1Gi")])),
                deny_default.clone(),
                None,
            ),
            (
                "grows with a class that allows expansion",
                spec("OnPodRollingUpdate", json!([vct("data", Some("allow"), "2Gi")])),
                spec("OnPodRollingUpdate", json!([vct("data", Some("allow"), "1Gi")])),
                deny_default.clone(),
                None,
            ),
            (
                "grows with a class that refuses expansion",
                spec("OnPodRollingUpdate", json!([vct("data", Some("deny"), "2Gi")])),
                spec("OnPodRollingUpdate", json!([vct("data", Some("deny"), "1Gi")])),
                deny_default.clone(),
                refused_by("deny", "data"),
            ),
            (
                "shrinks with a class that refuses expansion (any change of size is checked)",
                spec("OnPodRollingUpdate", json!([vct("data", Some("deny"), "1Gi")])),
                spec("OnPodRollingUpdate", json!([vct("data", Some("deny"), "2Gi")])),
                deny_default.clone(),
                refused_by("deny", "data"),
            ),
            (
                "the same size written differently is no change",
                spec("OnPodRollingUpdate", json!([vct("data", Some("deny"), "1024Mi")])),
                spec("OnPodRollingUpdate", json!([vct("data", Some("deny"), "1Gi")])),
                deny_default.clone(),
                None,
            ),
            (
                "a class that does not say allows",
                spec("OnPodRollingUpdate", json!([vct("data", Some("unset"), "2Gi")])),
                spec("OnPodRollingUpdate", json!([vct("data", Some("unset"), "1Gi")])),
                deny_default.clone(),
                None,
            ),
            (
                "a named class that cannot be read refuses",
                spec("OnPodRollingUpdate", json!([vct("data", Some("gone"), "2Gi")])),
                spec("OnPodRollingUpdate", json!([vct("data", Some("gone"), "1Gi")])),
                deny_default.clone(),
                Some(
                    "spec.volumeClaimTemplates[data].spec.storageClassName: Invalid value: \"gone\": \
                     can not get sc: storageclasses \"gone\" not found"
                        .into(),
                ),
            ),
            (
                "no class named: the default class decides",
                spec("OnPodRollingUpdate", json!([vct("data", None, "2Gi")])),
                spec("OnPodRollingUpdate", json!([vct("data", None, "1Gi")])),
                deny_default.clone(),
                refused_by("deny", "data"),
            ),
            (
                "no class named and no default class: admitted",
                spec("OnPodRollingUpdate", json!([vct("data", None, "2Gi")])),
                spec("OnPodRollingUpdate", json!([vct("data", None, "1Gi")])),
                ClassLookup::NoDefault,
                None,
            ),
            (
                "no class named and the classes cannot be listed",
                spec("OnPodRollingUpdate", json!([vct("data", None, "2Gi")])),
                spec("OnPodRollingUpdate", json!([vct("data", None, "1Gi")])),
                ClassLookup::Unreadable("timeout".into()),
                Some(
                    "spec.volumeClaimTemplates[data].spec.storageClassName: Invalid value: \"nil\": \
                     can not list storage class: timeout"
                        .into(),
                ),
            ),
            (
                "two templates: only the grown one is checked",
                spec(
                    "OnPodRollingUpdate",
                    json!([vct("data0", Some("allow"), "2Gi"), vct("data1", Some("deny"), "1Gi")]),
                ),
                spec(
                    "OnPodRollingUpdate",
                    json!([vct("data0", Some("allow"), "1Gi"), vct("data1", Some("deny"), "1Gi")]),
                ),
                deny_default.clone(),
                None,
            ),
            (
                "two templates: the second grows with a refusing class",
                spec(
                    "OnPodRollingUpdate",
                    json!([vct("data0", Some("allow"), "2Gi"), vct("data1", Some("deny"), "2Gi")]),
                ),
                spec(
                    "OnPodRollingUpdate",
                    json!([vct("data0", Some("allow"), "1Gi"), vct("data1", Some("deny"), "1Gi")]),
                ),
                deny_default.clone(),
                refused_by("deny", "data1"),
            ),
            (
                "a template added",
                spec(
                    "OnPodRollingUpdate",
                    json!([vct("data0", Some("allow"), "1Gi"), vct("data1", Some("allow"), "1Gi")]),
                ),
                spec("OnPodRollingUpdate", json!([vct("data0", Some("allow"), "1Gi")])),
                deny_default.clone(),
                Some(
                    "spec.volumeClaimTemplates: Invalid value: \"2 templates (were 1)\": \
                     volumeClaimTemplate can not be added or deleted when OnRollingUpdate"
                        .into(),
                ),
            ),
            (
                "a template renamed",
                spec("OnPodRollingUpdate", json!([vct("other", Some("allow"), "1Gi")])),
                spec("OnPodRollingUpdate", json!([vct("data", Some("allow"), "1Gi")])),
                deny_default.clone(),
                Some(
                    "spec.volumeClaimTemplates[other].name: Forbidden: volumeClaimTemplate name can \
                     not be modified"
                        .into(),
                ),
            ),
            (
                "the class changed",
                spec("OnPodRollingUpdate", json!([vct("data", Some("deny"), "1Gi")])),
                spec("OnPodRollingUpdate", json!([vct("data", Some("allow"), "1Gi")])),
                deny_default.clone(),
                Some(
                    "spec.volumeClaimTemplates[data]: Invalid value: \"data\": volumeClaimTemplate \
                     can not be modified when OnRollingUpdate"
                        .into(),
                ),
            ),
            (
                "a class named where none was: not a change upstream checks",
                spec("OnPodRollingUpdate", json!([vct("data", Some("allow"), "2Gi")])),
                spec("OnPodRollingUpdate", json!([vct("data", None, "1Gi")])),
                deny_default.clone(),
                None,
            ),
        ];
        for (name, new, old, default, expected) in cases {
            let got = check(&new, &old, classes(default)).map(|e| e.to_string());
            assert_eq!(got, expected, "{name}");
        }
    }

    #[test]
    fn the_newest_default_class_is_the_default() {
        let class = |name: &str, default: Option<&str>, created: i64| StorageClass {
            metadata: ObjectMeta {
                name: Some(name.into()),
                annotations: default
                    .map(|v| [(ANNOTATION_DEFAULT_STORAGE_CLASS.to_owned(), v.to_owned())].into()),
                creation_timestamp: Some(Time(
                    k8s_openapi::jiff::Timestamp::from_second(created).expect("a time"),
                )),
                ..ObjectMeta::default()
            },
            provisioner: "sim".into(),
            ..StorageClass::default()
        };
        let name =
            |classes: &[StorageClass]| default_class(classes).and_then(|c| c.metadata.name.clone());
        assert_eq!(name(&[]), None);
        assert_eq!(
            name(&[class("a", None, 1), class("b", Some("false"), 2)]),
            None
        );
        assert_eq!(
            name(&[
                class("old", Some("true"), 1),
                class("new", Some("true"), 2),
                class("x", None, 3)
            ]),
            Some("new".into())
        );
        assert_eq!(
            name(&[
                class("first", Some("true"), 1),
                class("second", Some("true"), 1)
            ]),
            Some("first".into())
        );
    }
}
