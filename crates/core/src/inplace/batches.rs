//! Container launch priority in in-place updates (OpenKruise's "container batches"): when the
//! containers whose image changes have different launch priorities, only the highest-priority ones
//! (and those without a priority) are updated first; the others wait in the state's
//! `nextContainerImages` until the first batch runs its new image and is Ready
//! (`preCheckBeforeNext.containersRequiredReady`), then the next batch goes — so a container that
//! must start after another (a proxy before the app) is also restarted after it.
//!
//! Priorities are read as OpenKruise defines them: the Pod annotation
//! `apps.kruise.io/container-launch-priority: Ordered` (earlier containers first), a container's
//! `KRUISE_CONTAINER_PRIORITY` env value (higher first), or the `KRUISE_CONTAINER_BARRIER` env
//! OpenKruise's webhook writes from those (key `p_<priority>`), so Pods created by OpenKruise keep
//! their order.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Container, Pod};

/// Pod annotation asking for containers to start (and restart) in their listed order.
pub const ANNOTATION_CONTAINER_LAUNCH_PRIORITY: &str = "apps.kruise.io/container-launch-priority";
/// Container env giving its launch priority (an integer, higher first).
pub const ENV_CONTAINER_PRIORITY: &str = "KRUISE_CONTAINER_PRIORITY";
/// Container env OpenKruise's Pod webhook writes for a priority (a ConfigMap key `p_<priority>`).
pub const ENV_CONTAINER_BARRIER: &str = "KRUISE_CONTAINER_BARRIER";

/// The launch priority of each container of `pod` that has one.
pub fn container_priorities(pod: &Pod) -> BTreeMap<String, i64> {
    let containers = pod.spec.as_ref().map(|s| &s.containers[..]).unwrap_or(&[]);
    let ordered = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_CONTAINER_LAUNCH_PRIORITY))
        .is_some_and(|v| v == "Ordered");
    // OpenKruise's Pod webhook gives every container a priority (a barrier) once the declared
    // `KRUISE_CONTAINER_PRIORITY` values differ, 0 where none is declared: a container without one
    // then waits for those above 0.
    let declared: Vec<i64> = containers
        .iter()
        .map(|c| declared_priority(c).unwrap_or(0))
        .collect();
    let webhook_default =
        !ordered && declared.iter().any(|p| *p != 0) && declared.windows(2).any(|w| w[0] != w[1]);
    containers
        .iter()
        .enumerate()
        .filter_map(|(index, c)| {
            let from_env = env_priority(c);
            let from_order = ordered.then(|| -i64::try_from(index).unwrap_or(i64::MAX));
            let default = webhook_default.then_some(0);
            from_env
                .or(from_order)
                .or(default)
                .map(|p| (c.name.clone(), p))
        })
        .collect()
}

fn declared_priority(c: &Container) -> Option<i64> {
    let env = c.env.as_deref().unwrap_or(&[]);
    env.iter()
        .find(|e| e.name == ENV_CONTAINER_PRIORITY)
        .and_then(|e| e.value.as_deref()?.trim().parse().ok())
}

fn env_priority(c: &Container) -> Option<i64> {
    let env = c.env.as_deref().unwrap_or(&[]);
    env.iter().find_map(|e| {
        if e.name == ENV_CONTAINER_BARRIER {
            let key = &e.value_from.as_ref()?.config_map_key_ref.as_ref()?.key;
            key.strip_prefix("p_")?.parse().ok()
        } else if e.name == ENV_CONTAINER_PRIORITY {
            e.value.as_deref()?.trim().parse().ok()
        } else {
            None
        }
    })
}

/// Splits the containers to update into the batch to update now and the ones to leave for later:
/// now are those without a priority and those with the highest priority among `changing`.
pub fn first_batch(
    changing: &BTreeSet<String>,
    priorities: &BTreeMap<String, i64>,
) -> (BTreeSet<String>, BTreeSet<String>) {
    let highest = changing.iter().filter_map(|c| priorities.get(c)).max();
    let Some(highest) = highest else {
        return (changing.clone(), BTreeSet::new());
    };
    changing
        .iter()
        .cloned()
        .partition(|c| priorities.get(c).is_none_or(|p| p == highest))
}
