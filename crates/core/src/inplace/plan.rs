//! Deciding whether the change between two revisions' templates can be applied to a Pod in place
//! (upstream `pkg/util/inplaceupdate/inplace_update_defaults.go`, `defaultCalculateInPlaceUpdateSpec`).
//!
//! In place: a replaced container image; Pod labels and annotations; with [`PlanOptions::resize`], a
//! replaced cpu or memory limit or request that keeps the QoS class (sent to `pods/resize`); with
//! [`PlanOptions::env_from_metadata`], a label or annotation a container's env reads (kruise-daemon
//! restarts that container, see [`super::envmeta`]).
//! Everything else — env, command, ports, volumes, an added or removed resource key, any other
//! metadata — needs a new Pod.
//!
//! A restart request (a new value of [`ANNOTATION_RESTARTED_AT`] in the template, which `kubectl
//! kruise rollout restart` writes) restarts every template container in place: a kubelet restarts a
//! container whose image reference changes, so the Pod's image is switched between the template's
//! reference and the digest the container runs (`status.containerStatuses[].imageID`) — the same
//! image bits, a new container process, same Pod.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kruise_api::quantity::Quantity as ParsedQuantity;
use serde_json::Value;

use super::envmeta;

/// The Pod template annotation `kubectl rollout restart` sets; a new value asks for a restart.
pub const ANNOTATION_RESTARTED_AT: &str = "kubectl.kubernetes.io/restartedAt";

/// Which optional in-place changes are allowed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlanOptions {
    /// Resize cpu/memory through `pods/resize` (upstream gate `InPlaceWorkloadVerticalScaling`).
    pub resize: bool,
    /// Restart, through kruise-daemon, the containers whose env reads a changed Pod label or
    /// annotation (upstream gate `InPlaceUpdateEnvFromMetadata`); without it such a change needs a
    /// new Pod.
    pub env_from_metadata: bool,
}

/// The cpu/memory values a container gets; only the keys that change.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ResourceChange {
    pub limits: BTreeMap<String, Quantity>,
    pub requests: BTreeMap<String, Quantity>,
}

/// What an in-place update changes on the Pod. Containers are named, not indexed: a Pod may hold
/// injected sidecars, so template index N is not Pod index N.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InPlacePlan {
    /// Container name → new image.
    pub images: BTreeMap<String, String>,
    /// Container name → new cpu/memory values.
    pub resources: BTreeMap<String, ResourceChange>,
    /// Label key → new value, or `None` to remove it.
    pub labels: BTreeMap<String, Option<String>>,
    /// Annotation key → new value, or `None` to remove it.
    pub annotations: BTreeMap<String, Option<String>>,
    /// Container name → the changed labels/annotations its env reads (upstream
    /// `containerRefMetadata`). These keys are not in `labels`/`annotations`: they are applied with
    /// the container's batch, and kruise-daemon restarts the container for them.
    pub env_from_metadata: BTreeMap<String, ObjectMeta>,
    /// Whether the update restarts a container of this Pod, so traffic must be drained first: an image
    /// change always does; a resize only where the container's `resizePolicy` says `RestartContainer`.
    /// Label/annotation changes never do, so they skip the drain and its grace period.
    pub restarts_containers: bool,
}

impl InPlacePlan {
    /// Whether there is nothing to change.
    pub fn is_empty(&self) -> bool {
        self.images.is_empty()
            && self.resources.is_empty()
            && self.labels.is_empty()
            && self.annotations.is_empty()
            && self.env_from_metadata.is_empty()
    }
}

/// Why a change needs a new Pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotInPlace {
    /// A template field outside what can change in place, with its JSON pointer (e.g. `/spec/containers/0/env/0/value`).
    Field(String),
    /// A resource key was added or removed, or resize is disabled, or the value is not a quantity.
    Resource(String),
    /// The resource change would move the Pod to another QoS class, which the API server rejects.
    QosClassChanged { from: QosClass, to: QosClass },
    /// A container reads a changed label or annotation through a downward-API env var, and
    /// `InPlaceUpdateEnvFromMetadata` is off; only a new container process sees the change.
    EnvFromMetadata { container: String, key: String },
    /// The template names a container the Pod does not have.
    ContainerNotInPod(String),
    /// A template could not be encoded (should not happen for typed templates).
    Encode(String),
    /// A restart was asked for, but the container has no running image digest to switch to (not
    /// started yet, or the template already pins that digest).
    RestartNeedsRecreate(String),
    /// The CloneSet's volumeClaimTemplates differ from those the Pod's revision recorded, and
    /// `RecreatePodWhenChangeVCTInCloneSetGate` recreates such Pods.
    VolumeClaimTemplatesChanged,
}

impl fmt::Display for NotInPlace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Field(path) => write!(f, "{path} changed and cannot be updated in place"),
            Self::Resource(path) => write!(f, "{path} cannot be resized in place"),
            Self::QosClassChanged { from, to } => {
                write!(f, "QoS class would change from {from:?} to {to:?}")
            }
            Self::EnvFromMetadata { container, key } => write!(
                f,
                "env from metadata changed (container {container} reads {key}) and \
                 InPlaceUpdateEnvFromMetadata is off"
            ),
            Self::ContainerNotInPod(name) => write!(f, "container {name} is not in the Pod"),
            Self::Encode(e) => write!(f, "cannot encode template: {e}"),
            Self::RestartNeedsRecreate(name) => write!(
                f,
                "restart requested but container {name} has no other reference to its running image"
            ),
            Self::VolumeClaimTemplatesChanged => write!(
                f,
                "volumeClaimTemplates changed since the Pod's revision (RecreatePodWhenChangeVCTInCloneSetGate)"
            ),
        }
    }
}

/// The outcome of [`plan`].
#[derive(Clone, Debug, PartialEq)]
pub enum Plan {
    InPlace(InPlacePlan),
    NotInPlace(NotInPlace),
}

/// Kubernetes Pod QoS class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QosClass {
    Guaranteed,
    Burstable,
    BestEffort,
}

#[derive(Debug)]
enum Op {
    Add,
    Remove,
    Replace,
}

struct Change {
    path: Vec<String>,
    op: Op,
    new: Option<Value>,
}

/// Plans the in-place update of `pod` from the `old` revision's template to the `new` one.
pub fn plan(old: &PodTemplateSpec, new: &PodTemplateSpec, pod: &Pod, opts: &PlanOptions) -> Plan {
    match try_plan(old, new, pod, opts) {
        Ok(p) => Plan::InPlace(p),
        Err(reason) => Plan::NotInPlace(reason),
    }
}

fn try_plan(
    old: &PodTemplateSpec,
    new: &PodTemplateSpec,
    pod: &Pod,
    opts: &PlanOptions,
) -> Result<InPlacePlan, NotInPlace> {
    let encode = |t: &PodTemplateSpec| {
        serde_json::to_value(t)
            .map(crate::revision::go_fields::without_empty_fields)
            .map_err(|e| NotInPlace::Encode(e.to_string()))
    };
    let (old_v, new_v) = (encode(old)?, encode(new)?);
    let mut changes = Vec::new();
    diff(&mut Vec::new(), Some(&old_v), Some(&new_v), &mut changes);

    let old_containers = old.spec.as_ref().map(|s| &s.containers[..]).unwrap_or(&[]);
    let mut out = InPlacePlan::default();
    for change in changes {
        classify(change, old_containers, opts, &mut out)?;
    }

    if !out.resources.is_empty() {
        let (from, to) = (qos_class(old.spec.as_ref()), qos_class(new.spec.as_ref()));
        if from != to {
            return Err(NotInPlace::QosClassChanged { from, to });
        }
    }

    env_from_metadata(old, new, opts, &mut out)?;

    let pod_containers = pod.spec.as_ref().map(|s| &s.containers[..]).unwrap_or(&[]);
    if matches!(out.annotations.get(ANNOTATION_RESTARTED_AT), Some(Some(_))) {
        let new_containers = new.spec.as_ref().map(|s| &s.containers[..]).unwrap_or(&[]);
        for c in new_containers {
            if out.images.contains_key(&c.name) {
                continue;
            }
            let image = restart_image(pod, c)?;
            out.images.insert(c.name.clone(), image);
        }
    }
    for name in out
        .images
        .keys()
        .chain(out.resources.keys())
        .chain(out.env_from_metadata.keys())
    {
        if !pod_containers.iter().any(|c| &c.name == name) {
            return Err(NotInPlace::ContainerNotInPod(name.clone()));
        }
    }
    out.restarts_containers = !out.images.is_empty()
        || !out.env_from_metadata.is_empty()
        || out.resources.iter().any(|(name, change)| {
            pod_containers
                .iter()
                .find(|c| &c.name == name)
                .is_some_and(|c| resize_restarts(c, change))
        });
    Ok(out)
}

/// The image reference that restarts `template`'s container of `pod` without changing what it runs:
/// the digest it runs (from the container status' imageID) when the Pod names it otherwise, else the
/// template's own reference.
fn restart_image(pod: &Pod, template: &Container) -> Result<String, NotInPlace> {
    let fail = || NotInPlace::RestartNeedsRecreate(template.name.clone());
    let current = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == template.name))
        .and_then(|c| c.image.as_deref())
        .ok_or_else(|| NotInPlace::ContainerNotInPod(template.name.clone()))?;
    let running = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|s| s.iter().find(|s| s.name == template.name))
        .map(|s| s.image_id.as_str())
        .unwrap_or_default();
    // Runtimes may prefix the ID with a scheme (`docker-pullable://`).
    let digest_ref = running.rsplit("://").next().unwrap_or(running);
    if digest_ref.contains("@sha256:") && digest_ref != current {
        return Ok(digest_ref.to_owned());
    }
    match template.image.as_deref() {
        Some(image) if image != current => Ok(image.to_owned()),
        _ => Err(fail()),
    }
}

/// A leaf-level diff: objects are compared key by key (a missing object counts as empty), arrays
/// index by index, so every change names the most specific path.
fn diff(path: &mut Vec<String>, a: Option<&Value>, b: Option<&Value>, out: &mut Vec<Change>) {
    match (a, b) {
        (Some(x), Some(y)) if x == y => {}
        (Some(Value::Object(_)) | None, Some(Value::Object(_)) | None)
            if a.is_some_and(Value::is_object) || b.is_some_and(Value::is_object) =>
        {
            let empty = serde_json::Map::new();
            let ma = a.and_then(Value::as_object).unwrap_or(&empty);
            let mb = b.and_then(Value::as_object).unwrap_or(&empty);
            let mut keys: Vec<&String> = ma.keys().chain(mb.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                path.push(k.clone());
                diff(path, ma.get(k), mb.get(k), out);
                path.pop();
            }
        }
        (Some(Value::Array(xa)), Some(Value::Array(xb))) => {
            for i in 0..xa.len().max(xb.len()) {
                path.push(i.to_string());
                diff(path, xa.get(i), xb.get(i), out);
                path.pop();
            }
        }
        (None, None) => {}
        (None, Some(v)) => out.push(Change {
            path: path.clone(),
            op: Op::Add,
            new: Some(v.clone()),
        }),
        (Some(_), None) => out.push(Change {
            path: path.clone(),
            op: Op::Remove,
            new: None,
        }),
        (Some(_), Some(v)) => out.push(Change {
            path: path.clone(),
            op: Op::Replace,
            new: Some(v.clone()),
        }),
    }
}

fn pointer(path: &[String]) -> String {
    crate::json_pointer(path)
}

fn classify(
    change: Change,
    old_containers: &[Container],
    opts: &PlanOptions,
    out: &mut InPlacePlan,
) -> Result<(), NotInPlace> {
    let path: Vec<&str> = change.path.iter().map(String::as_str).collect();
    let new_string = || {
        change
            .new
            .as_ref()
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let container_name = |index: &str| {
        index
            .parse::<usize>()
            .ok()
            .and_then(|i| old_containers.get(i))
            .map(|c| c.name.clone())
    };
    match (path.as_slice(), &change.op) {
        (["metadata", "labels", key], _) => {
            out.labels.insert((*key).to_owned(), new_string());
        }
        (["metadata", "annotations", key], _) => {
            out.annotations.insert((*key).to_owned(), new_string());
        }
        (["spec", "containers", index, "image"], Op::Replace) => {
            match (container_name(index), new_string()) {
                (Some(name), Some(image)) => {
                    out.images.insert(name, image);
                }
                _ => return Err(NotInPlace::Field(pointer(&change.path))),
            }
        }
        (
            [
                "spec",
                "containers",
                index,
                "resources",
                kind @ ("limits" | "requests"),
                res @ ("cpu" | "memory"),
            ],
            Op::Replace,
        ) if opts.resize => {
            let value = new_string()
                .filter(|v| ParsedQuantity::parse(v).is_ok())
                .ok_or_else(|| NotInPlace::Resource(pointer(&change.path)))?;
            let name =
                container_name(index).ok_or_else(|| NotInPlace::Resource(pointer(&change.path)))?;
            let entry = out.resources.entry(name).or_default();
            let map = if *kind == "limits" {
                &mut entry.limits
            } else {
                &mut entry.requests
            };
            map.insert((*res).to_owned(), Quantity(value));
        }
        (["spec", "containers", _, "resources", ..], _) => {
            return Err(NotInPlace::Resource(pointer(&change.path)));
        }
        _ => return Err(NotInPlace::Field(pointer(&change.path))),
    }
    Ok(())
}

/// Handles the changed labels/annotations that a container's env reads. With
/// `opts.env_from_metadata`, a key set to a value moves from the plan's metadata to
/// `env_from_metadata` under every container of the new template that reads it (upstream reads the
/// new template's containers); a removed key is removed from the Pod like any label, with no
/// restart, as upstream. Without the option any read key needs a new Pod: only a new container
/// process sees the new value. Both templates are checked there: a container that stops reading
/// the key still needs a restart to drop the old value.
fn env_from_metadata(
    old: &PodTemplateSpec,
    new: &PodTemplateSpec,
    opts: &PlanOptions,
    out: &mut InPlacePlan,
) -> Result<(), NotInPlace> {
    let templates = [old.spec.as_ref(), new.spec.as_ref()];
    let new_containers = new.spec.as_ref().map(|s| &s.containers[..]).unwrap_or(&[]);
    for field in [envmeta::FIELD_LABELS, envmeta::FIELD_ANNOTATIONS] {
        let changes = if field == envmeta::FIELD_LABELS {
            &mut out.labels
        } else {
            &mut out.annotations
        };
        let mut moved = Vec::new();
        for (key, value) in changes.iter() {
            let reader = templates.iter().flatten().find_map(|spec| {
                spec.containers
                    .iter()
                    .find(|c| envmeta::reads_metadata(c, field, key))
            });
            let Some(reader) = reader else { continue };
            if !opts.env_from_metadata {
                return Err(NotInPlace::EnvFromMetadata {
                    container: reader.name.clone(),
                    key: format!("{field}['{key}']"),
                });
            }
            // A removed key stays a plain metadata change: the Pod keeps its containers, as
            // upstream (which restarts only for keys added or replaced).
            let Some(value) = value else { continue };
            for c in new_containers
                .iter()
                .filter(|c| envmeta::reads_metadata(c, field, key))
            {
                let meta = out.env_from_metadata.entry(c.name.clone()).or_default();
                let target = if field == envmeta::FIELD_LABELS {
                    &mut meta.labels
                } else {
                    &mut meta.annotations
                };
                target
                    .get_or_insert_with(BTreeMap::new)
                    .insert(key.clone(), value.clone());
            }
            moved.push(key.clone());
        }
        for key in moved {
            changes.remove(&key);
        }
    }
    Ok(())
}

fn resize_restarts(c: &Container, change: &ResourceChange) -> bool {
    c.resize_policy.iter().flatten().any(|p| {
        p.restart_policy == "RestartContainer"
            && (change.limits.contains_key(&p.resource_name)
                || change.requests.contains_key(&p.resource_name))
    })
}

/// The QoS class Kubernetes would give a Pod with this spec (`qos.GetPodQOS`, container level), with
/// requests defaulted from limits as the API server does on creation.
pub fn qos_class(spec: Option<&PodSpec>) -> QosClass {
    let mut requests: BTreeMap<&str, f64> = BTreeMap::new();
    let mut limits: BTreeMap<&str, f64> = BTreeMap::new();
    let mut guaranteed = true;
    let containers = spec.into_iter().flat_map(|s| {
        s.containers
            .iter()
            .chain(s.init_containers.iter().flatten())
    });
    for c in containers {
        let res = c.resources.as_ref();
        let get = |m: Option<&BTreeMap<String, Quantity>>, k: &str| {
            m.and_then(|m| m.get(k))
                .and_then(|q| ParsedQuantity::parse(&q.0).ok())
                .map(|q| q.as_f64())
        };
        let mut limit_keys = 0;
        for key in ["cpu", "memory"] {
            let limit = get(res.and_then(|r| r.limits.as_ref()), key);
            let request = get(res.and_then(|r| r.requests.as_ref()), key).or(limit);
            if let Some(r) = request.filter(|r| *r > 0.0) {
                *requests.entry(key).or_default() += r;
            }
            if let Some(l) = limit {
                limit_keys += 1;
                if l > 0.0 {
                    *limits.entry(key).or_default() += l;
                }
            }
        }
        if limit_keys < 2 {
            guaranteed = false;
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return QosClass::BestEffort;
    }
    if guaranteed
        && requests.len() == limits.len()
        && requests.iter().all(|(k, r)| limits.get(k) == Some(r))
    {
        QosClass::Guaranteed
    } else {
        QosClass::Burstable
    }
}
