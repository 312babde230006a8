//! A CRI v1 client: gRPC over the container runtime's unix socket, on the messages of
//! k8s.io/cri-api v0.34 (`third_party/cri-api/runtime/v1/api.proto`, compiled at build time).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use k8s_openapi::jiff::Timestamp;
use kruise_core::containerrecreaterequest::ObservedContainer;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

#[allow(clippy::all, clippy::pedantic, clippy::unwrap_used, missing_docs)]
pub mod api {
    tonic::include_proto!("runtime.v1");
}

use api::runtime_service_client::RuntimeServiceClient;

/// The label the kubelet puts on every container and sandbox of a Pod.
const LABEL_POD_UID: &str = "io.kubernetes.pod.uid";
/// The annotation the kubelet keeps a container's restart count in.
const ANNOTATION_RESTART_COUNT: &str = "io.kubernetes.container.restartCount";

#[derive(Debug, thiserror::Error)]
pub enum CriError {
    #[error("runtime endpoint {0}: only unix:// endpoints are supported")]
    Endpoint(String),
    #[error("connect to {endpoint}: {source}")]
    Connect {
        endpoint: String,
        source: tonic::transport::Error,
    },
    #[error("{call}: {status}")]
    Call {
        call: &'static str,
        status: tonic::Status,
    },
}

fn call(name: &'static str) -> impl FnOnce(tonic::Status) -> CriError {
    move |status| CriError::Call { call: name, status }
}

/// A connection to one runtime, and its name (`containerd`, `cri-o`, `docker`) as container IDs carry it.
#[derive(Clone)]
pub struct Runtime {
    client: RuntimeServiceClient<Channel>,
    pub endpoint: String,
    /// The runtime's name (`VersionResponse.runtime_name`).
    pub name: String,
    pub version: String,
}

/// The socket path of a `unix://` endpoint (a bare path is taken as one).
pub fn socket_path(endpoint: &str) -> Result<PathBuf, CriError> {
    if let Some(path) = endpoint.strip_prefix("unix://") {
        return Ok(PathBuf::from(path));
    }
    if endpoint.starts_with('/') {
        return Ok(PathBuf::from(endpoint));
    }
    Err(CriError::Endpoint(endpoint.to_owned()))
}

/// A gRPC channel to the runtime's unix socket at `endpoint` (`unix:///run/containerd/containerd.sock`
/// or a bare path), connected within 5 s. `request_timeout` bounds every call on it; `None` leaves
/// calls unbounded (image pulls, which their own `timeoutSeconds` bounds).
pub async fn unix_channel(
    endpoint: &str,
    request_timeout: Option<Duration>,
) -> Result<Channel, CriError> {
    let path = socket_path(endpoint)?;
    // The URI is required by tonic but unused: every connection goes to the socket.
    let mut builder =
        Endpoint::from_static("http://cri.sock").connect_timeout(Duration::from_secs(5));
    if let Some(timeout) = request_timeout {
        builder = builder.timeout(timeout);
    }
    builder
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { UnixStream::connect(path).await.map(TokioIo::new) }
        }))
        .await
        .map_err(|source| CriError::Connect {
            endpoint: endpoint.to_owned(),
            source,
        })
}

impl Runtime {
    /// Connects to `endpoint` (`unix:///run/containerd/containerd.sock`) and asks its version.
    pub async fn connect(endpoint: &str) -> Result<Self, CriError> {
        let channel = unix_channel(endpoint, Some(Duration::from_secs(120))).await?;
        let mut client =
            RuntimeServiceClient::new(channel).max_decoding_message_size(16 * 1024 * 1024);
        let version = client
            .version(api::VersionRequest {
                version: "v1".to_owned(),
            })
            .await
            .map_err(call("Version"))?
            .into_inner();
        Ok(Self {
            client,
            endpoint: endpoint.to_owned(),
            name: version.runtime_name,
            version: version.runtime_version,
        })
    }

    /// Whether the runtime answers (health).
    pub async fn ping(&self) -> Result<(), CriError> {
        self.client
            .clone()
            .version(api::VersionRequest {
                version: "v1".to_owned(),
            })
            .await
            .map_err(call("Version"))?;
        Ok(())
    }

    /// A handle on the runtime service, for calls this type does not wrap.
    pub fn service(&self) -> RuntimeServiceClient<Channel> {
        self.client.clone()
    }

    /// The ID of a runtime container as a Pod status writes it.
    pub fn typed_id(&self, id: &str) -> String {
        format!("{}://{id}", self.name)
    }

    /// The newest container of each name among the Pod's containers (kubelet keeps the dead ones until
    /// garbage collection), with its state, start time and restart count.
    pub async fn pod_containers(
        &self,
        pod_uid: &str,
    ) -> Result<BTreeMap<String, ObservedContainer>, CriError> {
        let mut client = self.client.clone();
        let listed = client
            .list_containers(api::ListContainersRequest {
                filter: Some(api::ContainerFilter {
                    label_selector: [(LABEL_POD_UID.to_owned(), pod_uid.to_owned())].into(),
                    ..Default::default()
                }),
            })
            .await
            .map_err(call("ListContainers"))?
            .into_inner()
            .containers;
        let mut newest: BTreeMap<String, api::Container> = BTreeMap::new();
        for container in listed {
            let Some(name) = container.metadata.as_ref().map(|m| m.name.clone()) else {
                continue;
            };
            let newer = newest
                .get(&name)
                .is_none_or(|have| container.created_at > have.created_at);
            if newer {
                newest.insert(name, container);
            }
        }
        let mut out = BTreeMap::new();
        for (name, container) in newest {
            let status = client
                .container_status(api::ContainerStatusRequest {
                    container_id: container.id.clone(),
                    verbose: false,
                })
                .await
                .map_err(call("ContainerStatus"))?
                .into_inner()
                .status;
            let exited = status.as_ref().map_or(
                container.state == api::ContainerState::ContainerExited as i32,
                |s| s.state == api::ContainerState::ContainerExited as i32,
            );
            let started_at = status
                .as_ref()
                .map(|s| s.started_at)
                .filter(|ns| *ns > 0)
                .and_then(|ns| Timestamp::from_nanosecond(i128::from(ns)).ok());
            let restart_count = container
                .annotations
                .get(ANNOTATION_RESTART_COUNT)
                .and_then(|r| r.parse().ok())
                .unwrap_or(0);
            out.insert(
                name,
                ObservedContainer {
                    id: self.typed_id(&container.id),
                    exited,
                    started_at,
                    restart_count,
                },
            );
        }
        Ok(out)
    }

    /// The Pod's IP as its ready sandbox reports it (for an httpGet preStop without a host).
    pub async fn pod_ip(&self, pod_uid: &str) -> Result<Option<String>, CriError> {
        let mut client = self.client.clone();
        let sandboxes = client
            .list_pod_sandbox(api::ListPodSandboxRequest {
                filter: Some(api::PodSandboxFilter {
                    label_selector: [(LABEL_POD_UID.to_owned(), pod_uid.to_owned())].into(),
                    state: Some(api::PodSandboxStateValue {
                        state: api::PodSandboxState::SandboxReady as i32,
                    }),
                    ..Default::default()
                }),
            })
            .await
            .map_err(call("ListPodSandbox"))?
            .into_inner()
            .items;
        let Some(sandbox) = sandboxes.into_iter().max_by_key(|s| s.created_at) else {
            return Ok(None);
        };
        let status = client
            .pod_sandbox_status(api::PodSandboxStatusRequest {
                pod_sandbox_id: sandbox.id,
                verbose: false,
            })
            .await
            .map_err(call("PodSandboxStatus"))?
            .into_inner()
            .status;
        Ok(status
            .and_then(|s| s.network)
            .map(|n| n.ip)
            .filter(|ip| !ip.is_empty()))
    }

    /// Runs `cmd` in the container and waits up to `timeout` for it: (exit code, stdout+stderr).
    pub async fn exec_sync(
        &self,
        container_id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> Result<(i32, String), CriError> {
        let response = self
            .client
            .clone()
            .exec_sync(api::ExecSyncRequest {
                container_id: container_id.to_owned(),
                cmd,
                timeout: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
            })
            .await
            .map_err(call("ExecSync"))?
            .into_inner();
        let mut output = String::from_utf8_lossy(&response.stdout).into_owned();
        output.push_str(&String::from_utf8_lossy(&response.stderr));
        Ok((response.exit_code, output))
    }

    /// Stops the container, giving it `grace` after SIGTERM before SIGKILL.
    pub async fn stop_container(
        &self,
        container_id: &str,
        grace: Duration,
    ) -> Result<(), CriError> {
        self.client
            .clone()
            .stop_container(api::StopContainerRequest {
                container_id: container_id.to_owned(),
                timeout: i64::try_from(grace.as_secs()).unwrap_or(i64::MAX),
            })
            .await
            .map_err(call("StopContainer"))?;
        Ok(())
    }
}

/// The runtime sockets upstream's kruise-daemon looks for under the host's `/var/run` (mounted at
/// `var_run`), in its order: containerd, CRI-O, cri-dockerd (k3s layouts included).
pub const KNOWN_SOCKETS: &[&str] = &[
    "containerd.sock",
    "containerd/containerd.sock",
    "crio.sock",
    "crio/crio.sock",
    "cri-dockerd.sock",
    "cri-dockerd/cri-dockerd.sock",
];

/// The runtime endpoint to use: `explicit` (`--runtime-endpoint`) as given; else `socket_file`
/// (`--socket-file`, upstream's flag) under `var_run` when it exists; else the first known socket under
/// `var_run` that exists.
pub fn detect_endpoint(
    explicit: Option<&str>,
    socket_file: Option<&str>,
    var_run: &Path,
    exists: impl Fn(&Path) -> bool,
) -> Option<String> {
    if let Some(endpoint) = explicit.filter(|e| !e.is_empty()) {
        return Some(endpoint.to_owned());
    }
    let candidates: Vec<PathBuf> = match socket_file.filter(|s| !s.is_empty()) {
        Some(file) => vec![var_run.join(file)],
        None => KNOWN_SOCKETS.iter().map(|s| var_run.join(s)).collect(),
    };
    candidates
        .into_iter()
        .find(|p| exists(p))
        .map(|p| format!("unix://{}", p.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection_follows_upstream_order_and_flags() {
        let root = Path::new("/hostvarrun");
        let only = |present: &'static [&'static str]| {
            move |p: &Path| present.iter().any(|s| root.join(s) == p)
        };
        // (case, --runtime-endpoint, --socket-file, sockets present, endpoint chosen)
        type Case<'a> = (
            &'a str,
            Option<&'a str>,
            Option<&'a str>,
            &'a [&'a str],
            Option<&'a str>,
        );
        let cases: &[Case] = &[
            ("nothing", None, None, &[], None),
            (
                "containerd first",
                None,
                None,
                &["crio.sock", "containerd/containerd.sock"],
                Some("unix:///hostvarrun/containerd/containerd.sock"),
            ),
            (
                "crio",
                None,
                None,
                &["crio/crio.sock"],
                Some("unix:///hostvarrun/crio/crio.sock"),
            ),
            (
                "cri-dockerd",
                None,
                None,
                &["cri-dockerd.sock"],
                Some("unix:///hostvarrun/cri-dockerd.sock"),
            ),
            (
                "socket-file given",
                None,
                Some("k3s/containerd.sock"),
                &["k3s/containerd.sock", "containerd.sock"],
                Some("unix:///hostvarrun/k3s/containerd.sock"),
            ),
            (
                "socket-file missing",
                None,
                Some("x.sock"),
                &["containerd.sock"],
                None,
            ),
            (
                "explicit endpoint wins",
                Some("unix:///run/n1/containerd.sock"),
                None,
                &["containerd.sock"],
                Some("unix:///run/n1/containerd.sock"),
            ),
        ];
        for (name, explicit, file, present, want) in cases {
            let present: &'static [&'static str] = Box::leak(present.to_vec().into_boxed_slice());
            assert_eq!(
                detect_endpoint(*explicit, *file, root, only(present)).as_deref(),
                *want,
                "{name}"
            );
        }
    }

    #[test]
    fn socket_paths() {
        assert_eq!(
            socket_path("unix:///run/containerd/containerd.sock").ok(),
            Some(PathBuf::from("/run/containerd/containerd.sock"))
        );
        assert!(socket_path("tcp://1.2.3.4:1").is_err());
    }
}
