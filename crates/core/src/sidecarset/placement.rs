//! Where injected things go in the Pod spec: container order, volumes and pull secrets.

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::core::v1::{Container, LocalObjectReference, Volume};
use kruise_api::sidecarset::v1beta1::BEFORE_APP_CONTAINER;

/// Where a sidecar goes relative to the Pod's own containers (`podInjectPolicy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Position {
    Before,
    After,
}

impl Position {
    /// `BeforeAppContainer`, or after for `AfterAppContainer` and anything else (upstream's default).
    pub(super) fn of(policy: &str) -> Self {
        if policy == BEFORE_APP_CONTAINER {
            Self::Before
        } else {
            Self::After
        }
    }
}

/// Merges sidecars into a container list (containers or init containers).
///
/// A sidecar whose name the Pod already uses replaces that container where it stands: the SidecarSet
/// owns that name, and re-running the injection on its own output must give the same Pod. The others
/// go, in the given order, before the Pod's containers (`Before`) or after them.
pub(super) fn merge_containers(
    own: Vec<Container>,
    sidecars: Vec<(Container, Position)>,
) -> Vec<Container> {
    let mut own = own;
    let index: HashMap<String, usize> = own
        .iter()
        .enumerate()
        .map(|(i, c)| (c.name.clone(), i))
        .collect();
    let mut before = Vec::new();
    let mut after = Vec::new();
    for (sidecar, position) in sidecars {
        if let Some(slot) = index.get(&sidecar.name).and_then(|&i| own.get_mut(i)) {
            *slot = sidecar;
            continue;
        }
        match position {
            Position::Before => before.push(sidecar),
            Position::After => after.push(sidecar),
        }
    }
    before.extend(own);
    before.extend(after);
    before
}

/// The Pod's volumes plus the sidecars' ones whose names are free: a Pod volume of the same name wins,
/// so a SidecarSet can never redirect what an app container mounts.
pub(super) fn merge_volumes(own: Vec<Volume>, extra: Vec<Volume>) -> Vec<Volume> {
    let mut names: HashSet<String> = own.iter().map(|v| v.name.clone()).collect();
    let mut volumes = own;
    for volume in extra {
        if names.insert(volume.name.clone()) {
            volumes.push(volume);
        }
    }
    volumes
}

/// Pull secrets deduplicated by name, the Pod's own first.
pub(super) fn merge_secrets(
    own: Vec<LocalObjectReference>,
    extra: Vec<LocalObjectReference>,
) -> Vec<LocalObjectReference> {
    let mut names = HashSet::new();
    own.into_iter()
        .chain(extra)
        .filter(|s| names.insert(s.name.clone()))
        .collect()
}
