//! Well-known labels, annotations and condition types of apps.kruise.io, with OpenKruise's exact keys.

/// Pod condition (and readiness gate) that is False while an in-place update is in progress.
pub const CONDITION_IN_PLACE_UPDATE_READY: &str = "InPlaceUpdateReady";
/// Multi-writer Pod readiness gate; lifecycle hooks with `markPodNotReady` make it False.
pub const CONDITION_KRUISE_POD_READY: &str = "KruisePodReady";

/// The kubelet's reason on `Ready=False` while a readiness gate is not True.
pub const REASON_READINESS_GATES_NOT_READY: &str = "ReadinessGatesNotReady";

/// The kubelet's message on `Ready=False` for a readiness gate whose condition has `status` (not True).
/// The manager writes it too when it takes a Pod out of service, so that the kubelet finds `Ready` as
/// it would write it and has nothing to rewrite.
pub fn readiness_gate_not_true_message(gate: &str, status: &str) -> String {
    format!("the status of pod readiness gate \"{gate}\" is not \"True\", but {status}")
}

/// In-place update state of a Pod (JSON).
pub const ANNOTATION_IN_PLACE_UPDATE_STATE: &str = "apps.kruise.io/inplace-update-state";
/// Legacy key of [`ANNOTATION_IN_PLACE_UPDATE_STATE`], still read.
pub const ANNOTATION_IN_PLACE_UPDATE_STATE_OLD: &str = "inplace-update-state";
/// The spec an in-place update applies once its grace period has passed (JSON).
pub const ANNOTATION_IN_PLACE_UPDATE_GRACE: &str = "apps.kruise.io/inplace-update-grace";
/// Legacy key of [`ANNOTATION_IN_PLACE_UPDATE_GRACE`], still read.
pub const ANNOTATION_IN_PLACE_UPDATE_GRACE_OLD: &str = "inplace-update-grace";
/// Written by kruise-daemon: the runtime's view of the containers.
pub const ANNOTATION_RUNTIME_CONTAINERS_META: &str = "apps.kruise.io/runtime-containers-meta";

/// Pod lifecycle state label.
pub const LABEL_LIFECYCLE_STATE: &str = "lifecycle.apps.kruise.io/state";
/// RFC3339 time of the last lifecycle state change.
pub const ANNOTATION_LIFECYCLE_TIMESTAMP: &str = "lifecycle.apps.kruise.io/timestamp";
pub const LIFECYCLE_PREPARING_NORMAL: &str = "PreparingNormal";
pub const LIFECYCLE_NORMAL: &str = "Normal";
pub const LIFECYCLE_PREPARING_UPDATE: &str = "PreparingUpdate";
pub const LIFECYCLE_UPDATING: &str = "Updating";
pub const LIFECYCLE_UPDATED: &str = "Updated";
pub const LIFECYCLE_PREPARING_DELETE: &str = "PreparingDelete";

/// A Pod with this label (any value) is deleted first by its workload.
pub const LABEL_SPECIFIED_DELETE: &str = "apps.kruise.io/specified-delete";
/// Revision label on UnitedDeployment subsets (and Pods).
pub const LABEL_CONTROLLER_REVISION_HASH: &str = "apps.kruise.io/controller-revision-hash";
/// The native revision label on workload Pods.
pub const LABEL_NATIVE_CONTROLLER_REVISION_HASH: &str = "controller-revision-hash";
pub const LABEL_SUBSET_NAME: &str = "apps.kruise.io/subset-name";
pub const LABEL_UNITED_DEPLOYMENT_RESERVED_POD: &str =
    "apps.kruise.io/united-deployment-reserved-pod";
pub const ANNOTATION_SUBSET_PATCH: &str = "apps.kruise.io/subset-patch";
/// Prefix of labels that mark a Pod unavailable for workloads and PodUnavailableBudget.
pub const LABEL_PREFIX_UNAVAILABLE_POD: &str = "unavailable-pod.kruise.io/";
pub const LABEL_IMAGE_PREDOWNLOAD_CREATED: &str = "apps.kruise.io/pre-predownload-created";
pub const LABEL_IMAGE_PREDOWNLOAD_IGNORED: &str = "apps.kruise.io/image-predownload-ignored";
pub const ANNOTATION_IMAGE_PREDOWNLOAD_PARALLELISM: &str =
    "apps.kruise.io/image-predownload-parallelism";
pub const ANNOTATION_IMAGE_PREDOWNLOAD_TIMEOUT_SECONDS: &str =
    "apps.kruise.io/image-predownload-timeout-seconds";
pub const ANNOTATION_IMAGE_PREDOWNLOAD_MIN_UPDATED_READY_PODS: &str =
    "apps.kruise.io/image-predownload-min-updated-ready-pods";
/// Deletion protection label: `Always` or `Cascading`.
pub const LABEL_DELETE_PROTECTION: &str = "policy.kruise.io/delete-protection";

/// Annotations kruise-rs writes on a down-converted (v1alpha1) object to carry the v1beta1 fields that
/// v1alpha1 cannot express, so that v1beta1 → v1alpha1 → v1beta1 loses nothing. Removed on up-conversion.
pub const ANNOTATION_CONVERSION_V1BETA1_FIELDS: &str = "conversion.kruise-rs.io/v1beta1-fields";
/// The same, in the other direction: v1alpha1 fields that v1beta1 cannot express.
pub const ANNOTATION_CONVERSION_V1ALPHA1_FIELDS: &str = "conversion.kruise-rs.io/v1alpha1-fields";
