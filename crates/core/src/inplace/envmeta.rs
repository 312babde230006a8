//! Env from Pod metadata (upstream gate `InPlaceUpdateEnvFromMetadata`): a container that reads a
//! Pod label or annotation through a downward-API env var (`valueFrom.fieldRef.fieldPath:
//! metadata.labels['k']`) only sees a new value in a new container process. An in-place update that
//! changes such a key records which containers read it; kruise-daemon on the Pod's node reports, per
//! container, a hash of the values the running process was started with (the
//! `apps.kruise.io/runtime-containers-meta` annotation), restarts the container whose hash no longer
//! matches the Pod's metadata, and the update is complete once every container's reported hash matches.
//!
//! Everything here is pure: the hash (bit-compatible with upstream's, so that a Pod annotated by
//! OpenKruise's daemon reads the same here), which containers a change concerns, what the daemon
//! reports and restarts, and whether the reported hashes show the update done.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, EnvVar, Pod};
use kruise_api::keys;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Env vars the hash leaves out: SidecarSet writes them and changes them without a restart.
const EXCLUDED_ENVS: [&str; 2] = ["SIDECARSET_VERSION", "SIDECARSET_VERSION_ALT"];

/// The Pod metadata fields a container may read through the downward API.
pub const FIELD_LABELS: &str = "metadata.labels";
pub const FIELD_ANNOTATIONS: &str = "metadata.annotations";

/// The `apps.kruise.io/runtime-containers-meta` annotation (`pub.RuntimeContainerMetaSet`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeContainerMetaSet {
    #[serde(default, deserialize_with = "null_as_empty")]
    pub containers: Vec<RuntimeContainerMeta>,
}

/// One runtime container as kruise-daemon reports it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeContainerMeta {
    pub name: String,
    /// `<runtime>://<id>`, as `status.containerStatuses[].containerID` writes it.
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub restart_count: i32,
    pub hashes: RuntimeContainerHashes,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeContainerHashes {
    /// The kubelet's hash of the container spec (the runtime's `io.kubernetes.container.hash`).
    #[serde(default)]
    pub plain_hash: u64,
    /// [`current_hash`] of the running container; 0 while not computed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub extracted_env_from_metadata_hash: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

fn null_as_empty<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Vec<RuntimeContainerMeta>, D::Error> {
    Ok(Option::<Vec<RuntimeContainerMeta>>::deserialize(d)?.unwrap_or_default())
}

impl RuntimeContainerMetaSet {
    /// The annotation value (Go's field order).
    pub fn to_annotation(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string(self)
    }

    pub fn get(&self, name: &str) -> Option<&RuntimeContainerMeta> {
        self.containers.iter().find(|c| c.name == name)
    }
}

/// The Pod's reported container meta: `None` without the annotation.
pub fn read_meta_set(pod: &Pod) -> Option<Result<RuntimeContainerMetaSet, serde_json::Error>> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(keys::ANNOTATION_RUNTIME_CONTAINERS_META))
        .map(|s| serde_json::from_str(s))
}

/// `fieldpath.SplitMaybeSubscriptedPath`: `metadata.labels['k']` → (`metadata.labels`, `k`).
pub fn split_subscripted(path: &str) -> Option<(&str, &str)> {
    let inner = path.strip_suffix("']")?;
    let (field, key) = inner.split_once("['")?;
    (!field.is_empty()).then_some((field, key))
}

/// The env var's downward-API `(field, key)` when it reads a Pod label or annotation and counts for
/// the hash (a literal value wins over `valueFrom`, as the kubelet does).
fn metadata_ref(e: &EnvVar) -> Option<(&str, &str)> {
    if !e.value.as_deref().unwrap_or_default().is_empty()
        || EXCLUDED_ENVS.contains(&e.name.as_str())
    {
        return None;
    }
    let path = &e.value_from.as_ref()?.field_ref.as_ref()?.field_path;
    split_subscripted(path)
        .filter(|(field, _)| *field == FIELD_LABELS || *field == FIELD_ANNOTATIONS)
}

/// Whether an env var reads a Pod label or annotation (the shared Pod cache keeps those).
pub fn is_metadata_env(e: &EnvVar) -> bool {
    metadata_ref(e).is_some()
}

/// `IsContainerReferenceToMeta`: whether the container reads `field['key']`.
pub fn reads_metadata(c: &Container, field: &str, key: &str) -> bool {
    c.env
        .iter()
        .flatten()
        .filter_map(metadata_ref)
        .any(|(f, k)| f == field && k == key)
}

/// Upstream's hash of `[{name, value}]` sorted by name: FNV-1a (32 bits) of spew's `%#v` rendering
/// of the Go JSON bytes (`([]uint8)[91 123 …]`).
fn hash_envs(mut envs: Vec<(String, String)>) -> u64 {
    envs.sort_by(|a, b| a.0.cmp(&b.0));
    let value = if envs.is_empty() {
        Value::Null
    } else {
        Value::Array(
            envs.into_iter()
                .map(|(name, value)| {
                    if value.is_empty() {
                        json!({ "name": name })
                    } else {
                        json!({ "name": name, "value": value })
                    }
                })
                .collect(),
        )
    };
    let bytes = crate::revision::canonical_json(&value);
    let rendered: Vec<String> = bytes.iter().map(u8::to_string).collect();
    let text = format!("([]uint8)[{}]", rendered.join(" "));
    u64::from(fnv1a_32(text.as_bytes()))
}

fn fnv1a_32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |hash, &b| {
        (hash ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

/// The hash a container started now would have: its metadata env vars with the Pod's values.
pub fn expected_hash(
    c: &Container,
    labels: Option<&BTreeMap<String, String>>,
    annotations: Option<&BTreeMap<String, String>>,
) -> u64 {
    let envs = c
        .env
        .iter()
        .flatten()
        .filter_map(|e| {
            let (field, key) = metadata_ref(e)?;
            let source = if field == FIELD_LABELS {
                labels
            } else {
                annotations
            };
            let value = source.and_then(|m| m.get(key)).cloned().unwrap_or_default();
            Some((e.name.clone(), value))
        })
        .collect();
    hash_envs(envs)
}

/// [`expected_hash`] against the Pod's own metadata.
pub fn expected_hash_in(c: &Container, pod: &Pod) -> u64 {
    expected_hash(
        c,
        pod.metadata.labels.as_ref(),
        pod.metadata.annotations.as_ref(),
    )
}

/// The hash of the running container: its metadata env vars with the values its process has (`env`
/// run in the container, [`parse_env`]).
pub fn current_hash(c: &Container, running_env: &BTreeMap<String, String>) -> u64 {
    let envs = c
        .env
        .iter()
        .flatten()
        .filter(|e| metadata_ref(e).is_some())
        .map(|e| {
            let value = running_env.get(&e.name).cloned().unwrap_or_default();
            (e.name.clone(), value)
        })
        .collect();
    hash_envs(envs)
}

/// The output of `env`: one `NAME=value` a line.
pub fn parse_env(stdout: &str) -> BTreeMap<String, String> {
    stdout
        .trim()
        .lines()
        .filter_map(|l| l.trim().split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// Whether the container needs the env hash at all (it reads Pod metadata).
pub fn has_metadata_env(c: &Container) -> bool {
    c.env.iter().flatten().any(|e| metadata_ref(e).is_some())
}

/// Why the reported meta does not (yet) show every container started with the Pod's metadata
/// (`checkAllContainersHashConsistent` with the env hash); `None` when it does.
pub fn env_hashes_pending(pod: &Pod) -> Option<String> {
    let set = match read_meta_set(pod) {
        None => return Some("runtime-containers-meta not reported yet".to_owned()),
        Some(Err(e)) => return Some(format!("runtime-containers-meta unreadable: {e}")),
        Some(Ok(set)) => set,
    };
    let containers = pod.spec.as_ref().map(|s| &s.containers[..]).unwrap_or(&[]);
    let statuses = crate::pods::container_statuses(pod);
    for c in containers {
        let Some(status) = statuses.iter().find(|s| s.name == c.name) else {
            return Some(format!("container {} has no status", c.name));
        };
        let Some(meta) = set.get(&c.name) else {
            return Some(format!("container {} not reported", c.name));
        };
        if Some(meta.container_id.as_str()) != status.container_id.as_deref() {
            return Some(format!(
                "container {} reported for another container ID",
                c.name
            ));
        }
        if meta.hashes.extracted_env_from_metadata_hash != expected_hash_in(c, pod) {
            return Some(format!(
                "container {} runs with old env from metadata",
                c.name
            ));
        }
    }
    None
}

/// A container of the Pod as the daemon finds it in the runtime (the newest of its name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeContainer {
    pub name: String,
    /// `<runtime>://<id>`.
    pub id: String,
    pub restart_count: i32,
    /// The kubelet's spec hash (`io.kubernetes.container.hash`, hex in the runtime).
    pub plain_hash: u64,
    pub running: bool,
}

/// The meta the daemon reports for the Pod from what the runtime shows: entries of containers it
/// reported before are kept (their hash was taken from that very process), new containers get a new
/// entry. Also returns the names of the running containers whose env hash is still to be taken
/// (`env` run in them; then [`current_hash`]), in report order.
pub fn next_meta_set(
    pod: &Pod,
    runtime: &[RuntimeContainer],
    old: Option<&RuntimeContainerMetaSet>,
    env_gate: bool,
) -> (RuntimeContainerMetaSet, Vec<String>) {
    let statuses = crate::pods::container_statuses(pod);
    let spec = |name: &str| {
        pod.spec
            .as_ref()
            .and_then(|s| s.containers.iter().find(|c| c.name == name))
    };
    let mut set = RuntimeContainerMetaSet::default();
    let mut to_hash = Vec::new();
    for status in statuses {
        let (Some(found), Some(c)) = (
            runtime.iter().find(|r| r.name == status.name),
            spec(&status.name),
        ) else {
            continue;
        };
        let meta = old
            .and_then(|o| o.containers.iter().find(|m| m.container_id == found.id))
            .cloned()
            .unwrap_or_else(|| RuntimeContainerMeta {
                name: found.name.clone(),
                container_id: found.id.clone(),
                restart_count: found.restart_count,
                hashes: RuntimeContainerHashes {
                    plain_hash: found.plain_hash,
                    extracted_env_from_metadata_hash: 0,
                },
            });
        if env_gate && meta.hashes.extracted_env_from_metadata_hash == 0 && found.running {
            to_hash.push(c.name.clone());
        }
        set.containers.push(meta);
    }
    (set, to_hash)
}

/// The IDs of the containers the daemon restarts: only while the Pod is updated in place
/// (`InPlaceUpdateReady` False), those whose reported env hash differs from what the Pod's metadata
/// gives now.
pub fn containers_to_restart(pod: &Pod, set: &RuntimeContainerMetaSet) -> Vec<String> {
    let updating = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.type_ == keys::CONDITION_IN_PLACE_UPDATE_READY)
        })
        .is_some_and(|c| c.status == "False");
    if !updating {
        return Vec::new();
    }
    let containers = pod.spec.as_ref().map(|s| &s.containers[..]).unwrap_or(&[]);
    set.containers
        .iter()
        .filter(|m| {
            let hash = m.hashes.extracted_env_from_metadata_hash;
            hash > 0
                && containers
                    .iter()
                    .find(|c| c.name == m.name)
                    .is_some_and(|c| expected_hash_in(c, pod) != hash)
        })
        .map(|m| m.container_id.clone())
        .collect()
}

/// Whether a Pod event concerns the daemon's reporter (upstream's `eventFilter`): a Pod of a Kruise
/// workload (or injected by a SidecarSet) whose running containers are not all reported, or whose
/// metadata env hash changed or differs from the report.
pub fn needs_report(old: Option<&Pod>, new: &Pod, env_gate: bool) -> bool {
    let owned_by_kruise = new
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .is_some_and(|o| o.api_version.split('/').next() == Some("apps.kruise.io"));
    let injected = new
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(kruise_api::sidecarset::hash::ANNOTATION_HASH));
    if !owned_by_kruise && !injected {
        return false;
    }
    let containers = |p: &Pod| p.spec.as_ref().map(|s| s.containers.len()).unwrap_or(0);
    if old.is_some_and(|o| containers(o) != containers(new)) {
        return true;
    }
    let set = read_meta_set(new).and_then(Result::ok);
    let statuses = crate::pods::container_statuses(new);
    for (i, status) in statuses.iter().enumerate() {
        if status
            .container_id
            .as_deref()
            .unwrap_or_default()
            .is_empty()
        {
            continue;
        }
        let Some(set) = set
            .as_ref()
            .filter(|s| s.containers.len() == statuses.len())
        else {
            return true;
        };
        if Some(set.containers[i].container_id.as_str()) != status.container_id.as_deref() {
            return true;
        }
        if env_gate {
            let spec_at = |p: &Pod| p.spec.as_ref().and_then(|s| s.containers.get(i)).cloned();
            let Some(c) = spec_at(new) else { continue };
            let hash = expected_hash_in(&c, new);
            if hash != set.containers[i].hashes.extracted_env_from_metadata_hash {
                return true;
            }
            if let Some(o) = old
                && let Some(oc) = spec_at(o)
                && expected_hash_in(&oc, o) != hash
            {
                return true;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests;
