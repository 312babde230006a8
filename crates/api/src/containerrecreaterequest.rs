//! ContainerRecreateRequest, apps.kruise.io/v1alpha1 (the only version OpenKruise v1.9.0 serves and
//! stores): recreate (stop, and let the kubelet start again) the named containers of one running Pod,
//! executed by the kruise-daemon of the Pod's node. Namespaced, short name `crr`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ContainerPort, ExecAction, HTTPGetAction, TCPSocketAction};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResourceExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::schema::is_default;

pub const KIND: &str = "ContainerRecreateRequest";
pub const PLURAL: &str = "containerrecreaterequests";

/// [Immutable] label: the uid of the Pod.
pub const LABEL_POD_UID: &str = "crr.apps.kruise.io/pod-uid";
/// [Immutable] label: the node of the Pod (what a kruise-daemon selects on).
pub const LABEL_NODE_NAME: &str = "crr.apps.kruise.io/node-name";
/// Label `"true"` while the request is not finished (removed on completion, so daemons stop watching it).
pub const LABEL_ACTIVE: &str = "crr.apps.kruise.io/active";
/// Annotation: the statuses of the recreated containers as the Pod reports them (JSON list of
/// [`SyncContainerStatus`]), written by the manager while the request is Recreating.
pub const ANNOTATION_SYNC_CONTAINER_STATUSES: &str = "crr.apps.kruise.io/sync-container-statuses";
/// Annotation (RFC 3339 time) and finalizer: the Pod has been made not-ready for
/// `unreadyGracePeriodSeconds`.
pub const UNREADY_ACQUIRED: &str = "crr.apps.kruise.io/unready-acquired";
/// The label a virtual-kubelet Node carries, copied onto the request (such Nodes run no daemon).
pub const LABEL_VIRTUAL_KUBELET: &str = "type";
pub const VIRTUAL_KUBELET_VALUE: &str = "virtual-kubelet";
/// The smallest `activeDeadlineSeconds` the webhook accepts.
pub const MIN_DEADLINE_SECONDS: i64 = 3;
/// How long the manager waits for a daemon to take a new request (phase still empty) before failing it.
pub const RESPONSE_TIMEOUT_SECONDS: i64 = 60;
/// The `terminationGracePeriodSeconds` the daemon uses when neither the request nor the Pod sets one.
pub const DEFAULT_TERMINATION_GRACE_SECONDS: i64 = 30;

pub const FAILURE_POLICY_FAIL: &str = "Fail";
pub const FAILURE_POLICY_IGNORE: &str = "Ignore";

pub const PHASE_PENDING: &str = "Pending";
pub const PHASE_RECREATING: &str = "Recreating";
pub const PHASE_SUCCEEDED: &str = "Succeeded";
pub const PHASE_FAILED: &str = "Failed";
pub const PHASE_COMPLETED: &str = "Completed";

crate::crd::resource! {
    #[kube(
        version = "v1alpha1",
        kind = "ContainerRecreateRequest",
        namespaced,
        status = "ContainerRecreateRequestStatus",
        shortname = "crr",
        doc = "ContainerRecreateRequest is the Schema for the containerrecreaterequests API",
        printcolumn(
            name = "PHASE",
            type_ = "string",
            json_path = ".status.phase",
            description = "Phase of this ContainerRecreateRequest."
        ),
        printcolumn(
            name = "POD",
            type_ = "string",
            json_path = ".spec.podName",
            description = "Pod name of this ContainerRecreateRequest."
        ),
        printcolumn(
            name = "NODE",
            type_ = "string",
            json_path = ".metadata.labels.crr\\.apps\\.kruise\\.io/node-name",
            description = "Pod name of this ContainerRecreateRequest."
        )
    )]
    age_column(short)
    #[serde(rename_all = "camelCase")]
    pub struct ContainerRecreateRequestSpec {
        /// Name of the Pod that owns the recreated containers.
        pub pod_name: String,
        /// The containers to recreate, by name.
        pub containers: Vec<ContainerRecreateRequestContainer>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub strategy: Option<ContainerRecreateRequestStrategy>,
        /// Seconds after creation at which an unfinished request is completed as failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub active_deadline_seconds: Option<i64>,
        /// Seconds after completion at which the request is deleted.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub ttl_seconds_after_finished: Option<i32>,
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRecreateRequestContainer {
    /// Name of a container in `pod.spec.containers`.
    pub name: String,
    /// Copied from the container's preStop hook on creation (read-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_stop: Option<ProbeHandler>,
    /// Copied from the container's ports on creation when preStop is an httpGet (read-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<ContainerPort>>,
    /// The container's ID and restartCount on creation (read-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_context: Option<ContainerRecreateRequestContainerContext>,
}

/// A lifecycle handler: one of exec, httpGet, tcpSocket.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProbeHandler {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec: Option<ExecAction>,
    #[serde(default, rename = "httpGet", skip_serializing_if = "Option::is_none")]
    pub http_get: Option<HTTPGetAction>,
    #[serde(default, rename = "tcpSocket", skip_serializing_if = "Option::is_none")]
    pub tcp_socket: Option<TCPSocketAction>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRecreateRequestContainerContext {
    /// Container ID as the Pod status writes it (`containerd://<id>`).
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub restart_count: i32,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRecreateRequestStrategy {
    /// `Fail` (default) or `Ignore`: whether to go on when a container fails to recreate.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub failure_policy: String,
    /// Recreate the next container only once the previous one has been recreated.
    #[serde(default, skip_serializing_if = "is_default")]
    pub ordered_recreate: bool,
    /// Kill the container even if it is still starting.
    #[serde(default, skip_serializing_if = "is_default")]
    pub force_recreate: bool,
    /// Grace period of the stop (default: the Pod's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<i64>,
    /// Keep the Pod not-ready this long before running preStop and stopping the containers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unready_grace_period_seconds: Option<i64>,
    /// Seconds a new container must have been started and ready to count as Succeeded.
    #[serde(default, skip_serializing_if = "is_default")]
    pub min_started_seconds: i32,
}

impl ContainerRecreateRequestStrategy {
    pub fn ignores_failures(&self) -> bool {
        self.failure_policy == FAILURE_POLICY_IGNORE
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRecreateRequestStatus {
    /// Pending, Recreating, Completed.
    #[serde(default)]
    pub phase: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub container_recreate_states: Vec<ContainerRecreateState>,
}

/// The recreation state of one container.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRecreateState {
    pub name: String,
    /// Pending, Recreating, Succeeded, Failed.
    pub phase: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Whether kruise-daemon has stopped the container.
    #[serde(default, skip_serializing_if = "is_default")]
    pub is_killed: bool,
}

/// One entry of the [`ANNOTATION_SYNC_CONTAINER_STATUSES`] annotation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncContainerStatus {
    pub name: String,
    pub ready: bool,
    pub restart_count: i32,
    #[serde(
        default,
        rename = "containerID",
        skip_serializing_if = "String::is_empty"
    )]
    pub container_id: String,
}

impl ContainerRecreateRequest {
    pub fn labels(&self) -> &BTreeMap<String, String> {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        self.metadata.labels.as_ref().unwrap_or(&EMPTY)
    }

    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .map(String::as_str)
    }

    /// Finished: completed (completionTime set) or being deleted.
    pub fn is_finished(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
            || self
                .status
                .as_ref()
                .is_some_and(|s| s.completion_time.is_some())
    }

    pub fn phase(&self) -> &str {
        self.status.as_ref().map_or("", |s| s.phase.as_str())
    }

    pub fn strategy(&self) -> ContainerRecreateRequestStrategy {
        self.spec.strategy.clone().unwrap_or_default()
    }

    /// The statuses the manager synchronised from the Pod (annotation), by container name.
    pub fn sync_container_statuses(&self) -> BTreeMap<String, SyncContainerStatus> {
        self.annotation(ANNOTATION_SYNC_CONTAINER_STATUSES)
            .and_then(|raw| serde_json::from_str::<Vec<SyncContainerStatus>>(raw).ok())
            .unwrap_or_default()
            .into_iter()
            .map(|s| (s.name.clone(), s))
            .collect()
    }
}

/// The CRD, served and stored in v1alpha1 only, as upstream's.
pub fn crd() -> CustomResourceDefinition {
    crate::crd::single_version(ContainerRecreateRequest::crd())
}
