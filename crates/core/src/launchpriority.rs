//! Container launch priority at Pod creation: the containers of a Pod start in the order their
//! priorities say (higher first), as OpenKruise does without a node agent.
//!
//! The Pod webhook gives each container of a Pod that asks for an order
//! (`apps.kruise.io/container-launch-priority: Ordered`, or `KRUISE_CONTAINER_PRIORITY` values that
//! differ) an env var `KRUISE_CONTAINER_BARRIER` read from key `p_<priority>` of the ConfigMap
//! `<pod>-barrier`. The kubelet cannot start a container whose env key is missing (it retries), so
//! the containers wait. The launch-priority controller creates that ConfigMap (owned by the Pod)
//! and adds the keys one priority at a time, highest first, each once every container of a higher
//! priority is Ready; when the lowest is added, it marks the Pod
//! `apps.kruise.io/container-launch-priority-completed: "true"` and forgets it.
//!
//! The in-place update's batches (`crate::inplace::batches`) read the same env to restart
//! containers in the same order.

use k8s_openapi::api::core::v1::{ConfigMapKeySelector, Container, EnvVar, EnvVarSource, Pod};

use crate::inplace::{
    ANNOTATION_CONTAINER_LAUNCH_PRIORITY, ENV_CONTAINER_BARRIER, ENV_CONTAINER_PRIORITY,
};

/// Set on a Pod once every priority has been released: the controller leaves it alone after.
pub const ANNOTATION_COMPLETED: &str = "apps.kruise.io/container-launch-priority-completed";
/// The annotation value asking for the containers' listed order.
pub const ORDERED: &str = "Ordered";

/// The name of the ConfigMap that holds a Pod's released priorities.
pub fn barrier_name(pod_name: &str) -> String {
    format!("{pod_name}-barrier")
}

/// The name the apiserver would give a Pod created with only `generateName`: the barrier is named
/// after the Pod, so the webhook names it first. The prefix is cut to 58 characters, as Kubernetes'
/// name generator does, before the 5-character `suffix`.
pub fn generated_name(generate_name: &str, suffix: &str) -> String {
    const MAX_PREFIX: usize = 58;
    let mut end = generate_name.len().min(MAX_PREFIX);
    while !generate_name.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{suffix}", &generate_name[..end])
}

/// The barrier ConfigMap key of a priority.
pub fn barrier_key(priority: i64) -> String {
    format!("p_{priority}")
}

/// The env var that holds a container until `priority` is released.
pub fn barrier_env(priority: i64, pod_name: &str) -> EnvVar {
    EnvVar {
        name: ENV_CONTAINER_BARRIER.to_string(),
        value: None,
        value_from: Some(EnvVarSource {
            config_map_key_ref: Some(ConfigMapKeySelector {
                name: barrier_name(pod_name),
                key: barrier_key(priority),
                optional: None,
            }),
            ..EnvVarSource::default()
        }),
    }
}

/// A `KRUISE_CONTAINER_PRIORITY` value that is not an integer: the Pod is refused, naming it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "spec.containers[{index}].env[{ENV_CONTAINER_PRIORITY}]: Invalid value: {value:?}: must be an integer"
)]
pub struct InvalidPriority {
    pub index: usize,
    pub value: String,
}

/// The priority each container of a Pod being created starts with, by container index, or `None`
/// when the Pod asks for no order: a single container, no annotation and no differing
/// `KRUISE_CONTAINER_PRIORITY` values. With the `Ordered` annotation the first container has 0, the
/// next -1, and so on; otherwise a container without a value has 0.
pub fn creation_priorities(pod: &Pod) -> Result<Option<Vec<i64>>, InvalidPriority> {
    let containers = pod.spec.as_ref().map(|s| &s.containers[..]).unwrap_or(&[]);
    if containers.len() <= 1 {
        return Ok(None);
    }
    let ordered = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_CONTAINER_LAUNCH_PRIORITY))
        .is_some_and(|v| v == ORDERED);
    if ordered {
        return Ok(Some(
            (0..containers.len())
                .map(|i| -i64::try_from(i).unwrap_or(i64::MAX))
                .collect(),
        ));
    }
    let mut priorities = Vec::with_capacity(containers.len());
    for (index, container) in containers.iter().enumerate() {
        priorities.push(declared(index, container)?.unwrap_or(0));
    }
    let differ = priorities.windows(2).any(|w| w[0] != w[1]);
    Ok(differ.then_some(priorities))
}

/// A container's `KRUISE_CONTAINER_PRIORITY`: the last one listed wins, as the kubelet reads env.
fn declared(index: usize, container: &Container) -> Result<Option<i64>, InvalidPriority> {
    let mut found = None;
    for env in container.env.as_deref().unwrap_or(&[]) {
        if env.name != ENV_CONTAINER_PRIORITY {
            continue;
        }
        let value = env.value.clone().unwrap_or_default();
        let parsed = value.trim().parse::<i64>().map_err(|_| InvalidPriority {
            index,
            value: value.clone(),
        })?;
        found = Some(parsed);
    }
    Ok(found)
}

/// Adds each container's barrier env (`priorities` by container index) to `pod`, whose name must be
/// set. A container that already waits on this Pod's barrier for its priority keeps its one entry.
pub fn add_barriers(pod: &mut Pod, pod_name: &str, priorities: &[i64]) {
    let Some(spec) = pod.spec.as_mut() else {
        return;
    };
    for (container, priority) in spec.containers.iter_mut().zip(priorities) {
        let env = barrier_env(*priority, pod_name);
        let list = container.env.get_or_insert_with(Vec::new);
        if !list.contains(&env) {
            list.push(env);
        }
    }
}

/// The barrier priority a container waits on, if any (the key it reads, `p_<priority>`).
pub fn barrier_priority(container: &Container) -> Option<i64> {
    container
        .env
        .as_deref()?
        .iter()
        .filter(|e| e.name == ENV_CONTAINER_BARRIER)
        .find_map(|e| {
            let key = &e.value_from.as_ref()?.config_map_key_ref.as_ref()?.key;
            key.strip_prefix("p_")?.parse().ok()
        })
}

/// What the controller does for one Pod, given the keys its barrier ConfigMap holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing to do now: the Pod is done, not waiting on a barrier, or waits on Ready containers.
    Wait,
    /// Add this key to the barrier.
    Release(String),
    /// Add this key, and mark the Pod completed: it was the last priority.
    ReleaseLast(String),
    /// Mark the Pod completed: every priority it waits on is released.
    Complete,
}

/// Whether a Pod may still need the controller: not marked completed, not being deleted, and its
/// containers not all Ready.
pub fn in_progress(pod: &Pod) -> bool {
    let completed = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_COMPLETED))
        .is_some_and(|v| v == "true");
    let containers_ready = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "ContainersReady" && c.status == "True")
        });
    !completed && !containers_ready && pod.metadata.deletion_timestamp.is_none()
}

/// The priorities still held back: those of the containers that wait on a barrier and are not
/// Ready, lowest first.
pub fn pending(pod: &Pod) -> Vec<i64> {
    let ready: Vec<&str> = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map(|statuses| {
            statuses
                .iter()
                .filter(|s| s.ready)
                .map(|s| s.name.as_str())
                .collect()
        })
        .unwrap_or_default();
    let containers = pod.spec.as_ref().map(|s| &s.containers[..]).unwrap_or(&[]);
    let mut pending: Vec<i64> = containers
        .iter()
        .filter(|c| !ready.contains(&c.name.as_str()))
        .filter_map(barrier_priority)
        .collect();
    pending.sort_unstable();
    pending
}

/// The next step for `pod`, whose barrier holds `released` keys. The highest pending priority is
/// released first; the next one only when every container above it is Ready (it is then the
/// highest pending). Once the lowest pending priority is released the Pod is complete.
pub fn next_step(pod: &Pod, released: impl Fn(&str) -> bool) -> Step {
    if !in_progress(pod) {
        return Step::Wait;
    }
    let pending = pending(pod);
    // A Pod that waits on no barrier is not the controller's: it is never marked.
    let (Some(lowest), Some(highest)) = (pending.first(), pending.last()) else {
        return Step::Wait;
    };
    if released(&barrier_key(*lowest)) {
        return Step::Complete;
    }
    let key = barrier_key(*highest);
    if released(&key) {
        return Step::Wait;
    }
    if lowest == highest {
        Step::ReleaseLast(key)
    } else {
        Step::Release(key)
    }
}

#[cfg(test)]
mod tests;
