//! Whether an in-place update has taken effect, from the Pod alone (upstream
//! `pkg/util/inplaceupdate/inplace_update.go`, `CheckInPlaceUpdateCompleted`).

use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kruise_api::quantity::Quantity as ParsedQuantity;
use std::collections::BTreeMap;

use super::state::{InPlaceUpdateState, has_grace_annotation, read_state};

/// The outcome of [`check_completed`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Completion {
    Done,
    Waiting(WaitReason),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WaitReason {
    /// An OpenKruise grace-period spec has not been applied yet.
    GracePeriod,
    /// The state annotation is not valid JSON of the expected shape.
    UnreadableState(String),
    /// OpenKruise's container launch priority left containers for later batches.
    NextBatches,
    /// The update changed env from metadata and kruise-daemon's `runtime-containers-meta` does not
    /// show every container started with the Pod's metadata yet (why, in words).
    EnvFromMetadata(String),
    /// The container has no status yet.
    StatusMissing(String),
    /// The container's `status.resources` do not show the resized cpu/memory yet.
    ResourcesNotApplied(String),
    /// The container still runs the image it ran before the update.
    ImageNotUpdated(String),
}

/// Checks whether the Pod's latest in-place update is complete. A Pod without state is done: no
/// update is in flight.
pub fn check_completed(pod: &Pod) -> Completion {
    use Completion::{Done, Waiting};
    if has_grace_annotation(pod) {
        return Waiting(WaitReason::GracePeriod);
    }
    let state = match read_state(pod) {
        None => return Done,
        Some(Err(e)) => return Waiting(WaitReason::UnreadableState(e.to_string())),
        Some(Ok(state)) => state,
    };
    if state.has_next_batches() {
        return Waiting(WaitReason::NextBatches);
    }
    current_batch(pod, &state)
}

/// Whether the Pod's in-place update has a later batch of containers (container launch priority)
/// that may go now: the batch in flight runs its new images, and the containers it named in
/// `preCheckBeforeNext` are Ready.
pub fn next_batch_due(pod: &Pod) -> bool {
    if has_grace_annotation(pod) {
        return false;
    }
    let Some(Ok(state)) = read_state(pod) else {
        return false;
    };
    let none_left =
        state.next_container_images.is_empty() && state.next_container_ref_metadata.is_empty();
    if none_left || current_batch(pod, &state) != Completion::Done {
        return false;
    }
    let statuses = crate::pods::container_statuses(pod);
    state
        .pre_check_before_next
        .iter()
        .flat_map(|p| &p.containers_required_ready)
        .all(|name| statuses.iter().any(|s| &s.name == name && s.ready))
}

/// Whether the containers updated so far run what the update asked for.
fn current_batch(pod: &Pod, state: &InPlaceUpdateState) -> Completion {
    use Completion::{Done, Waiting};
    if state.update_env_from_metadata
        && let Some(why) = super::envmeta::env_hashes_pending(pod)
    {
        return Waiting(WaitReason::EnvFromMetadata(why));
    }
    let containers = pod.spec.as_ref().map(|s| &s.containers[..]).unwrap_or(&[]);
    let statuses = crate::pods::container_statuses(pod);
    let status_of = |name: &str| statuses.iter().find(|s| s.name == name);

    if state.update_resources {
        for c in containers {
            let Some(status) = status_of(&c.name) else {
                return Waiting(WaitReason::StatusMissing(c.name.clone()));
            };
            if !resources_applied(c, status) {
                return Waiting(WaitReason::ResourcesNotApplied(c.name.clone()));
            }
        }
    }

    for (name, before) in &state.last_container_statuses {
        let Some(status) = status_of(name) else {
            return Waiting(WaitReason::StatusMissing(name.clone()));
        };
        // A new imageID proves the new image runs. The same imageID is fine too when the status
        // already names the spec image: a new tag may point at the same image (kruise#635).
        if status.image_id == before.image_id {
            let spec_image = containers
                .iter()
                .find(|c| &c.name == name)
                .and_then(|c| c.image.as_deref())
                .unwrap_or_default();
            if with_default_tag(spec_image) != with_default_tag(&status.image) {
                return Waiting(WaitReason::ImageNotUpdated(name.clone()));
            }
        }
    }
    Done
}

/// `nginx` → `nginx:latest`. The tag is looked for in the last path segment only, so a registry port
/// (`host:5000/app`) is not mistaken for one; a digest reference has no implied tag.
pub fn with_default_tag(image: &str) -> String {
    let last_segment = image.rsplit('/').next().unwrap_or(image);
    if image.contains('@') || last_segment.contains(':') {
        image.to_owned()
    } else {
        format!("{image}:latest")
    }
}

/// Whether the kubelet reports the container's cpu/memory limits and requests as in the spec.
/// Only cpu and memory are compared: those are what a resize changes and what the kubelet reports.
fn resources_applied(c: &Container, status: &ContainerStatus) -> bool {
    let Some(actual) = status.resources.as_ref() else {
        return false;
    };
    let spec = c.resources.as_ref();
    let same = |want: Option<&BTreeMap<String, Quantity>>,
                have: Option<&BTreeMap<String, Quantity>>| {
        ["cpu", "memory"].iter().all(|k| {
            let parse = |m: Option<&BTreeMap<String, Quantity>>| {
                m.and_then(|m| m.get(*k))
                    .map(|q| ParsedQuantity::parse(&q.0).map_err(|_| q.0.clone()))
            };
            match (parse(want), parse(have)) {
                (None, None) => true,
                (Some(Ok(a)), Some(Ok(b))) => a.cmp_value(&b).is_eq(),
                (Some(Err(a)), Some(Err(b))) => a == b,
                _ => false,
            }
        })
    };
    same(spec.and_then(|r| r.limits.as_ref()), actual.limits.as_ref())
        && same(
            spec.and_then(|r| r.requests.as_ref()),
            actual.requests.as_ref(),
        )
}
