//! SidecarSet injection into a Pod being created, as pure functions: which SidecarSets apply to a Pod
//! ([`matches`]) and what the Pod looks like once their sidecars are in ([`inject`]).
//!
//! The rules are OpenKruise's Pod mutating webhook (`mpod.kb.io`, upstream `pkg/webhook/pod/mutating/sidecarset.go`); the webhook fetches
//! the SidecarSets, the Pod's Namespace labels and any pinned ControllerRevision, calls these functions
//! and diffs the returned Pod into a JSON patch. Only CREATE injects: upstream's UPDATE path is a no-op in
//! the community edition, so there is nothing to model for it.

mod annotations;
pub mod history;
mod hot_upgrade;
mod inject;
mod matching;
mod metadata;
mod missing;
mod placement;
mod resources;
mod revision;
mod sidecar;
pub mod upgradable;
pub mod upgrade;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

pub use annotations::{UpgradeSpec, hashes, parse_upgrade_specs};
pub use hot_upgrade::{
    ANNOTATION_VERSION_ALT_PREFIX, ANNOTATION_VERSION_PREFIX, ENV_SIDECARSET_VERSION,
    ENV_SIDECARSET_VERSION_ALT, hot_upgrade_names,
};
pub use inject::inject;
pub use matching::{
    ALWAYS_EXCLUDED_NAMESPACE, OPT_OUT_NAMESPACE_LABEL, matches, namespace_or_default,
    pod_namespace, selects, selects_by,
};
pub use missing::missing_injections;
pub use revision::RevisionTemplate;

/// Names of every container and init container of the Pod.
pub(crate) fn pod_container_names(pod: &Pod) -> std::collections::HashSet<&str> {
    pod.spec
        .iter()
        .flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        })
        .map(|c| c.name.as_str())
        .collect()
}

/// What [`inject`] needs besides the Pod and the SidecarSets.
pub struct InjectContext<'a> {
    /// Recorded as `updateTimestamp` in the hash annotations (upstream: `metav1.Now()`).
    pub now: Timestamp,
    /// The restored revision of every SidecarSet that pins one through `injectionStrategy.revision`,
    /// keyed by SidecarSet name. Fetching ControllerRevisions is I/O, so the caller does it (see
    /// [`RevisionTemplate::from_controller_revision`]).
    pub revisions: &'a std::collections::BTreeMap<String, RevisionTemplate>,
    /// A uniform draw in `[0, 1)`, called once per SidecarSet whose `Partial` revision policy has to
    /// toss a coin. Passed in so that tests are deterministic.
    pub random: &'a dyn Fn() -> f64,
    /// Feature gate `EnableSortSidecarContainerByName`: sort injected containers by name.
    pub sort_sidecars_by_name: bool,
}

/// The outcome of [`inject`].
#[derive(Clone, Debug, PartialEq)]
pub struct Injection {
    /// The Pod with sidecars, volumes, pull secrets and annotations merged in.
    pub pod: Pod,
    /// Whether anything changed (upstream's `!skip`): a container was injected or `patchPodMetadata`
    /// changed an annotation.
    pub changed: bool,
    /// Names of the SidecarSets applied, after canaries shadowed their bases.
    pub applied: Vec<String>,
}

/// Why a Pod cannot be injected. Every variant names the object and field at fault.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum InjectError {
    #[error("pod has no spec")]
    NoPodSpec,
    #[error("pod metadata.annotations[{key}]: invalid value: {message}")]
    InvalidPodAnnotation { key: String, message: String },
    #[error(
        "sidecarset {sidecarset}: spec.injectionStrategy.revision: the pinned revision was not provided"
    )]
    RevisionNotFound { sidecarset: String },
    #[error("sidecarset {sidecarset}: {field}: invalid value: {message}")]
    InvalidField {
        sidecarset: String,
        field: String,
        message: String,
    },
    #[error(
        "sidecarset {sidecarset}: {field}: volume {volume:?} is defined neither by the SidecarSet nor by the Pod"
    )]
    UnknownVolume {
        sidecarset: String,
        field: String,
        volume: String,
    },
    #[error(
        "sidecarset {sidecarset}: {field}: container {container:?} is also injected by sidecarset {other}"
    )]
    DuplicateContainer {
        sidecarset: String,
        field: String,
        container: String,
        other: String,
    },
    #[error("pod {field}: invalid value: {message}")]
    InvalidPodField { field: String, message: String },
    #[error(
        "sidecarset {sidecarset}: {field}: no container of the Pod matches {pattern:?} (only its own containers and native sidecars count, not those of SidecarSets)"
    )]
    NoTargetContainers {
        sidecarset: String,
        field: String,
        pattern: String,
    },
    #[error("sidecarset {sidecarset}: {field}: {expression:?} with {variable}: {error}")]
    ResourcesExpr {
        sidecarset: String,
        field: String,
        expression: String,
        /// The variable and its value, `cpu=1500m`.
        variable: String,
        /// Boxed to keep `InjectError` small.
        error: Box<kruise_api::sidecarset::resources_expr::ExprError>,
    },
    #[error(
        "sidecarset {sidecarset}: {field}: the computed request {request} is above the computed limit {limit}"
    )]
    RequestAboveLimit {
        sidecarset: String,
        field: String,
        request: String,
        limit: String,
    },
}

/// An annotation's value, an empty one counting as absent (Go reads both as "").
fn non_empty_annotation<'a>(
    meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) -> Option<&'a str> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
        .filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests;
