//! The configuration files of one real node, as text: containerd's, the CNI network's, the kubelet's and
//! its kubeconfig, and the runc wrapper containerd runs instead of runc. Pure functions of [`NodeLayout`],
//! so what a node is started with can be read and tested without starting it.

use std::path::{Path, PathBuf};

/// Where one node keeps its state and how it is addressed.
#[derive(Clone, Debug)]
pub struct NodeLayout {
    /// Node name (the kubelet's `--hostname-override`).
    pub name: String,
    /// Directory holding everything of this node (containerd root and state, kubelet root, logs).
    pub dir: PathBuf,
    /// The node's own address inside its network namespace (its InternalIP).
    pub ip: String,
    /// The Pod range of this node's CNI bridge, e.g. `10.244.1.0/24`.
    pub pod_cidr: String,
    /// Port on the node's loopback where the apiserver is forwarded.
    pub apiserver_port: u16,
    /// Port on the node's loopback where the local registry is forwarded.
    pub registry_port: u16,
    /// The registry hosts whose images containerd pulls from the local registry instead.
    pub mirrored_registries: Vec<String>,
    /// The Pod sandbox image.
    pub pause_image: String,
    /// The runc wrapper (see [`RUNC_WRAPPER`]).
    pub runc_wrapper: PathBuf,
    /// Labels the kubelet registers the node with.
    pub labels: Vec<(String, String)>,
    /// The kubelet's cgroup root (see [`super::cgroups::root_for`]).
    pub cgroup_root: String,
}

impl NodeLayout {
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    pub fn containerd_socket(&self) -> PathBuf {
        self.path("containerd/containerd.sock")
    }

    /// runc's state directory for this node's containers (not the shared `/run/containerd/runc`, so
    /// that one node's clean-up finds exactly its own containers).
    pub fn runc_root(&self) -> PathBuf {
        self.path("containerd/runc")
    }
}

/// containerd 1.6's configuration (version 2) for one node: its own root, state, socket and runc root,
/// the CRI plugin with our sandbox image, the runc wrapper, the node's CNI network, and a registry
/// configuration directory ([`registry_hosts`]) sending every pull of a mirrored registry to the local
/// one.
pub fn containerd_toml(node: &NodeLayout) -> String {
    format!(
        r#"version = 2
root = "{root}"
state = "{state}"

[grpc]
  address = "{socket}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{opt}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  disable_apparmor = true
  restrict_oom_score_adj = true
  max_container_log_line_size = 16384

[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  BinaryName = "{wrapper}"
  Root = "{runc_root}"
  SystemdCgroup = false

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "{cni}"

[plugins."io.containerd.grpc.v1.cri".registry]
  config_path = "{hosts}"
"#,
        root = node.path("containerd/root").display(),
        state = node.path("containerd/state").display(),
        socket = node.containerd_socket().display(),
        opt = node.path("containerd/opt").display(),
        pause = node.pause_image,
        wrapper = node.runc_wrapper.display(),
        runc_root = node.runc_root().display(),
        cni = node.path("cni/net.d").display(),
        hosts = node.path("registry.d").display(),
    )
}

/// The registry configuration of each mirrored registry host, as (path under the node, `hosts.toml`).
/// `server` is the local registry itself, not only a mirror: a pull it cannot serve fails at once with
/// "not found" instead of falling back to the real registry (which this machine cannot reach, and whose
/// name it cannot even resolve inside a node's namespace).
pub fn registry_hosts(node: &NodeLayout) -> Vec<(PathBuf, String)> {
    let local = format!("http://127.0.0.1:{}", node.registry_port);
    node.mirrored_registries
        .iter()
        .map(|host| {
            (
                PathBuf::from("registry.d").join(host).join("hosts.toml"),
                format!(
                    "server = \"{local}\"\n\n[host.\"{local}\"]\n  capabilities = [\"pull\", \"resolve\"]\n  skip_verify = true\n"
                ),
            )
        })
        .collect()
}

/// The node's Pod network: a bridge inside the node's network namespace with host-local addresses from
/// the node's range; the bridge is the Pods' gateway (Pods reach the node's address, and the kubelet
/// reaches the Pods for probes).
pub fn cni_conflist(node: &NodeLayout) -> String {
    serde_json::json!({
        "cniVersion": "0.4.0",
        "name": "kruise-rs",
        "plugins": [{
            "type": "bridge",
            "bridge": "cni0",
            "isGateway": true,
            "ipMasq": false,
            "hairpinMode": true,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": node.pod_cidr}]],
                "routes": [{"dst": "0.0.0.0/0"}],
                "dataDir": node.path("cni/ipam").display().to_string(),
            },
        }],
    })
    .to_string()
}

/// The kubelet's configuration for this machine: cgroup v1 with the cgroupfs driver, per-QoS and per-Pod
/// cgroups under the node's own root (see [`super::cgroups`]), no node-allocatable enforcement, swap
/// tolerated, authentication and authorization off (the apiserver calls it without a client
/// certificate), no eviction or image garbage collection on a shared disk, its own Pod-log directory.
pub fn kubelet_yaml(node: &NodeLayout) -> String {
    format!(
        r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {ip}
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
cgroupDriver: cgroupfs
cgroupsPerQOS: true
cgroupRoot: {cgroup_root}
enforceNodeAllocatable: []
failSwapOn: false
failCgroupV1: false
containerRuntimeEndpoint: unix://{socket}
imageServiceEndpoint: unix://{socket}
podLogsDir: {logs}
resolvConf: /etc/resolv.conf
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "1Ki"
  nodefs.available: "0%"
  imagefs.available: "0%"
  nodefs.inodesFree: "0%"
nodeStatusUpdateFrequency: 4s
nodeStatusReportFrequency: 10s
syncFrequency: 10s
podPidsLimit: -1
maxPods: 60
registerNode: true
"#,
        ip = node.ip,
        cgroup_root = node.cgroup_root,
        socket = node.containerd_socket().display(),
        logs = node.path("pod-logs").display(),
    )
}

/// The kubelet's command line.
pub fn kubelet_args(node: &NodeLayout) -> Vec<String> {
    let labels: Vec<String> = node
        .labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    vec![
        format!("--config={}", node.path("kubelet.yaml").display()),
        format!("--kubeconfig={}", node.path("kubelet.kubeconfig").display()),
        format!("--hostname-override={}", node.name),
        format!("--node-ip={}", node.ip),
        format!("--root-dir={}", node.path("kubelet").display()),
        format!("--cert-dir={}", node.path("kubelet/pki").display()),
        format!("--node-labels={}", labels.join(",")),
        "--v=2".into(),
    ]
}

/// containerd's command line.
pub fn containerd_args(node: &NodeLayout) -> Vec<String> {
    vec![
        "--config".into(),
        node.path("containerd.toml").display().to_string(),
        "--log-level".into(),
        "warn".into(),
    ]
}

/// A kubeconfig for the kubelet: the apiserver through the node's loopback forwarder, the admin's token.
pub fn kubelet_kubeconfig(node: &NodeLayout, ca_pem: &str, token: &str) -> String {
    use base64::Engine as _;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        r#"apiVersion: v1
kind: Config
clusters:
- name: kruise-rs
  cluster:
    server: https://127.0.0.1:{port}
    certificate-authority-data: {ca}
users:
- name: kubelet
  user:
    token: {token}
contexts:
- name: kruise-rs
  context:
    cluster: kruise-rs
    user: kubelet
current-context: kruise-rs
"#,
        port = node.apiserver_port,
    )
}

/// The runc wrapper containerd runs instead of runc. The kubelet asks for a negative OOM score for
/// sandboxes and guaranteed Pods (-998); raising a process's OOM priority needs CAP_SYS_RESOURCE, which
/// this machine does not grant, and runc then fails every sandbox with "can't get final child's PID from
/// pipe: EOF" (its log: "failed to update /proc/self/oom_score_adj: Permission denied"). The wrapper
/// clamps a negative `process.oomScoreAdj` in the bundle's config.json to 0 before handing over to runc;
/// nothing else changes.
pub const RUNC_WRAPPER: &str = r#"#!/bin/sh
# kruise-rs test bed: runc with a negative process.oomScoreAdj clamped to 0 (see realnode/config.rs).
bundle=""
prev=""
for arg in "$@"; do
  case "$prev" in
    --bundle|-b) bundle="$arg" ;;
  esac
  case "$arg" in
    --bundle=*) bundle="${arg#--bundle=}" ;;
  esac
  prev="$arg"
done
if [ -n "$bundle" ] && [ -f "$bundle/config.json" ]; then
  sed -i -E 's/"oomScoreAdj":-[0-9]+/"oomScoreAdj":0/' "$bundle/config.json"
fi
exec runc "$@"
"#;

/// Writes [`RUNC_WRAPPER`] to `path`, executable.
pub fn write_runc_wrapper(path: &Path) -> anyhow::Result<()> {
    use anyhow::Context as _;
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::write(path, RUNC_WRAPPER).with_context(|| format!("writing {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("making {} executable", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> NodeLayout {
        NodeLayout {
            name: "real-0".into(),
            dir: "/run/krs/real-0".into(),
            ip: "10.201.0.2".into(),
            pod_cidr: "10.244.0.0/24".into(),
            apiserver_port: 6443,
            registry_port: 5000,
            mirrored_registries: vec!["docker.io".into(), "registry.k8s.io".into()],
            pause_image: "registry.k8s.io/pause:3.10".into(),
            runc_wrapper: "/run/krs/runc-wrapper".into(),
            labels: vec![("topology.kubernetes.io/zone".into(), "zone-a".into())],
            cgroup_root: "/kruise-rs/1-real-0".into(),
        }
    }

    #[test]
    fn containerd_is_isolated_per_node_and_mirrors_every_registry() {
        let toml = containerd_toml(&layout());
        for want in [
            r#"root = "/run/krs/real-0/containerd/root""#,
            r#"address = "/run/krs/real-0/containerd/containerd.sock""#,
            r#"Root = "/run/krs/real-0/containerd/runc""#,
            r#"BinaryName = "/run/krs/runc-wrapper""#,
            r#"config_path = "/run/krs/real-0/registry.d""#,
            r#"sandbox_image = "registry.k8s.io/pause:3.10""#,
        ] {
            assert!(toml.contains(want), "missing {want} in\n{toml}");
        }
    }

    #[test]
    fn every_mirrored_registry_is_served_by_the_local_one_only() {
        let hosts = registry_hosts(&layout());
        assert_eq!(hosts.len(), 2);
        assert_eq!(hosts[0].0, PathBuf::from("registry.d/docker.io/hosts.toml"));
        assert!(
            hosts[0]
                .1
                .starts_with("server = \"http://127.0.0.1:5000\"\n"),
            "{}",
            hosts[0].1
        );
        assert!(hosts[1].1.contains("[host.\"http://127.0.0.1:5000\"]"));
    }

    #[test]
    fn kubelet_serves_on_the_node_address_and_registers_labels() {
        let node = layout();
        let yaml = kubelet_yaml(&node);
        assert!(yaml.contains("address: 10.201.0.2"));
        assert!(yaml.contains("failCgroupV1: false"));
        assert!(yaml.contains("cgroupsPerQOS: true"));
        assert!(yaml.contains("cgroupRoot: /kruise-rs/1-real-0"));
        let args = kubelet_args(&node);
        assert!(args.contains(&"--node-ip=10.201.0.2".to_string()));
        assert!(args.contains(&"--node-labels=topology.kubernetes.io/zone=zone-a".to_string()));
    }

    #[test]
    fn cni_network_uses_the_node_range() {
        let conf: serde_json::Value =
            serde_json::from_str(&cni_conflist(&layout())).expect("valid JSON");
        assert_eq!(
            conf["plugins"][0]["ipam"]["ranges"][0][0]["subnet"],
            "10.244.0.0/24"
        );
    }

    #[test]
    fn runc_wrapper_clamps_only_negative_scores() {
        let dir = std::env::temp_dir().join(format!("krs-wrapper-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let config = dir.join("config.json");
        std::fs::write(
            &config,
            r#"{"process":{"oomScoreAdj":-998},"x":{"oomScoreAdj":5}}"#,
        )
        .expect("write");
        let wrapper = dir.join("wrapper");
        // Run the wrapper's editing part only: replace the final `exec runc` by `exit 0`.
        std::fs::write(&wrapper, RUNC_WRAPPER.replace("exec runc \"$@\"", "exit 0")).expect("w");
        let status = std::process::Command::new("sh")
            .arg(&wrapper)
            .args(["create", "--bundle", &dir.display().to_string(), "id"])
            .status()
            .expect("sh runs");
        assert!(status.success());
        let edited = std::fs::read_to_string(&config).expect("read");
        assert_eq!(
            edited,
            r#"{"process":{"oomScoreAdj":0},"x":{"oomScoreAdj":5}}"#
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
