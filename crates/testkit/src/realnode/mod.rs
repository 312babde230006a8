//! Real nodes beside kubelet-sim: each a real kubelet (v1.34.10, built from the same Go module as the
//! control plane) with its own containerd and runc, in a network namespace of its own, pulling locally
//! built images from a local registry. They judge what only a real kubelet can: that an in-place update
//! really restarts just the changed container, that probes, hooks and image pulls behave as kubelet-sim
//! says they do.
//!
//! What this machine needs (Debian packages, installed by `make real-node`): containerd, runc,
//! containernetworking-plugins, busybox-static, docker-registry; and root (network namespaces, mounts).
//!
//! In-cluster networking is opt-in ([`RealNodeOptions::kube_proxy`]): Pod ranges unique to the cluster
//! and routed from the host, a kube-proxy per node, and the `kubernetes` Service served on every node
//! (see [`kube_proxy`]), so that Pods and host-network Pods reach `10.0.0.1:443`.

#![allow(unsafe_code)]

pub mod cgroups;
pub mod cleanup;
pub mod config;
pub mod images;
pub mod kruise_images;
pub mod kube_proxy;
pub mod mountns;
pub mod net;
pub mod openkruise_image;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, ensure};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};

use crate::control_plane::ControlPlane;
use crate::process::Process;
use config::NodeLayout;
use images::Registry;
use net::NodeNet;

/// The label every real node carries (`kruise-rs.io/real-node: "true"`); select it to run a Pod on one.
pub const REAL_NODE_LABEL: &str = "kruise-rs.io/real-node";

/// Port of the apiserver forwarder on each node's loopback (the node has its own namespace, so a fixed
/// port cannot collide).
const NODE_APISERVER_PORT: u16 = 6443;
/// Port of the registry forwarder on each node's loopback.
const NODE_REGISTRY_PORT: u16 = 5000;

/// How to start real nodes.
#[derive(Clone, Debug)]
pub struct RealNodeOptions {
    pub count: usize,
    /// Zones, given round-robin as `topology.kubernetes.io/zone`.
    pub zones: Vec<String>,
    /// Node names are `<prefix>-<index>`.
    pub name_prefix: String,
    /// The kubelet binary.
    pub kubelet: PathBuf,
    /// In-cluster networking, off when `None`. With the kube-proxy binary given:
    /// - each node's Pod range is `<prefix>.<128 + i>.0/24` in the cluster's own /16 (instead of
    ///   `10.244.<i + 1>.0/24`), and the host routes it to the node;
    /// - the node's apiserver forwarder also listens on `<node ip>:6443`;
    /// - once the nodes are Ready, the `kubernetes` Service is made `internalTrafficPolicy: Local` with
    ///   an EndpointSlice of those forwarders, and a kube-proxy runs in each node's network namespace.
    pub kube_proxy: Option<PathBuf>,
    /// Each node's containerd and kubelet in a mount namespace of the node's own, where its containerd
    /// socket is at `/run/containerd/containerd.sock` (see [`mountns`]): what a Pod mounting the host's
    /// `/var/run` (the chart's kruise-daemon) needs. Off, they share the machine's mounts.
    pub standard_runtime_socket: bool,
}

impl RealNodeOptions {
    pub fn new(count: usize, zones: &[&str], bin_dir: &Path) -> Self {
        Self {
            count,
            zones: zones.iter().map(|z| z.to_string()).collect(),
            name_prefix: "real".into(),
            kubelet: bin_dir.join("kubelet"),
            kube_proxy: None,
            standard_runtime_socket: false,
        }
    }
}

/// One running node.
pub struct RealNode {
    pub layout: NodeLayout,
    pub net: NodeNet,
    containerd: Process,
    kubelet: Process,
    kube_proxy: Option<Process>,
    mounts: Option<mountns::NodeMounts>,
}

impl RealNode {
    pub fn name(&self) -> &str {
        &self.layout.name
    }

    /// The last lines of its kubelet's and containerd's logs (and kube-proxy's, when it runs one).
    pub fn log_tails(&self, lines: usize) -> String {
        let mut tails = format!(
            "----- kubelet {} -----\n{}\n----- containerd {} -----\n{}\n",
            self.layout.name,
            crate::process::tail(&self.kubelet.log, lines),
            self.layout.name,
            crate::process::tail(&self.containerd.log, lines),
        );
        if let Some(kube_proxy) = &self.kube_proxy {
            tails.push_str(&format!(
                "----- kube-proxy {} -----\n{}\n",
                self.layout.name,
                crate::process::tail(&kube_proxy.log, lines),
            ));
        }
        tails
    }
}

/// Real nodes and the registry they pull from. [`RealNodes::stop`] (also run on drop) stops every
/// kubelet, container, shim and containerd, unmounts what they mounted and removes the namespaces.
pub struct RealNodes {
    dir: PathBuf,
    pub registry: Registry,
    pub nodes: Vec<RealNode>,
    stopped: bool,
}

impl RealNodes {
    /// Starts the registry and pushes the test images, then `options.count` nodes, and waits until every
    /// node is Ready. Call it on the tokio runtime that outlives the nodes: the forwarders run on it.
    pub async fn start(plane: &ControlPlane, options: &RealNodeOptions) -> anyhow::Result<Self> {
        preflight(options)?;
        let dir = plane.dir().join("real-nodes");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let registry_port = crate::process::free_port()?;
        let registry = Registry::start(&dir.join("registry"), registry_port).await?;
        tokio::task::block_in_place(|| registry.push_test_images())?;
        let wrapper = dir.join("runc-wrapper");
        config::write_runc_wrapper(&wrapper)?;
        let mut this = Self {
            dir: dir.clone(),
            registry,
            nodes: Vec::new(),
            stopped: false,
        };
        // The tag keeps two clusters on one machine (a test run beside `kruise-local`) apart.
        let tag = format!("{}", std::process::id() % 100_000);
        let prefix = net::free_prefix()?;
        for index in 0..options.count {
            let name = format!("{}-{index}", options.name_prefix);
            let mut net = NodeNet::plan(&tag, index, &prefix);
            let pod_cidr = if options.kube_proxy.is_some() {
                let cidr = net::node_pod_cidr(&prefix, index)?;
                net.routed_pod_cidr = Some(cidr.clone());
                cidr
            } else {
                format!("10.244.{}.0/24", index + 1)
            };
            let zone = options
                .zones
                .get(index % options.zones.len().max(1))
                .cloned()
                .unwrap_or_else(|| "zone-a".into());
            let layout = NodeLayout {
                name: name.clone(),
                dir: dir.join(&name),
                ip: net.node_ip.clone(),
                pod_cidr,
                apiserver_port: NODE_APISERVER_PORT,
                registry_port: NODE_REGISTRY_PORT,
                mirrored_registries: images::MIRRORED_REGISTRIES
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
                pause_image: images::PAUSE_IMAGE.into(),
                runc_wrapper: wrapper.clone(),
                cgroup_root: cgroups::root_for(&tag, &name),
                labels: vec![
                    ("topology.kubernetes.io/zone".into(), zone),
                    (REAL_NODE_LABEL.into(), "true".into()),
                ],
            };
            let node = start_node(plane, options, layout, net, registry_port)
                .await
                .with_context(|| format!("starting real node {name}"))?;
            this.nodes.push(node);
        }
        let names: Vec<String> = this.nodes.iter().map(|n| n.name().to_string()).collect();
        if let Err(error) = wait_ready(plane, &names).await {
            let tails: String = this.nodes.iter().map(|n| n.log_tails(40)).collect();
            return Err(error.context(tails));
        }
        if let Some(kube_proxy) = &options.kube_proxy {
            let cluster_cidr = net::cluster_pod_cidr(&prefix);
            if let Err(error) = this
                .start_kube_proxies(plane, kube_proxy, &cluster_cidr)
                .await
            {
                let tails: String = this.nodes.iter().map(|n| n.log_tails(40)).collect();
                return Err(error.context(tails));
            }
        }
        Ok(this)
    }

    /// Publishes the nodes' apiserver forwarders as the `kubernetes` Service's endpoints, then starts
    /// one kube-proxy per node and waits until each serves 10.0.0.1:443.
    async fn start_kube_proxies(
        &mut self,
        plane: &ControlPlane,
        program: &Path,
        cluster_cidr: &str,
    ) -> anyhow::Result<()> {
        let endpoints: Vec<(String, String)> = self
            .nodes
            .iter()
            .map(|n| (n.name().to_string(), n.net.node_ip.clone()))
            .collect();
        kube_proxy::publish_apiserver(&plane.client().await?, &endpoints, NODE_APISERVER_PORT)
            .await?;
        let nsenter = images::which("nsenter")?;
        for node in &mut self.nodes {
            let mut args = vec![
                format!("--net={}", node.net.netns_path()),
                "--".into(),
                program.display().to_string(),
            ];
            args.extend(kube_proxy::args(&node.layout, cluster_cidr));
            node.kube_proxy = Some(Process::spawn(
                &format!("kube-proxy-{}", node.layout.name),
                &nsenter,
                &args,
                &node.layout.path("kube-proxy.log"),
            )?);
        }
        for node in &self.nodes {
            let log = node.layout.path("kube-proxy.log");
            kube_proxy::wait_synced(
                &node.net.netns,
                &node.net.node_ip,
                NODE_APISERVER_PORT,
                &log,
            )
            .await
            .with_context(|| format!("kube-proxy on {}", node.name()))?;
        }
        Ok(())
    }

    pub fn names(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.name().to_string()).collect()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Each node's name and containerd socket (what a kruise-daemon of that node talks to).
    pub fn containerd_sockets(&self) -> Vec<(String, PathBuf)> {
        self.nodes
            .iter()
            .map(|n| (n.name().to_string(), n.layout.containerd_socket()))
            .collect()
    }

    /// Where each node's kruise-daemon runs, as the chart's host-network DaemonSet Pod would: in the
    /// node's network namespace (it reaches the node's Pods by their IPs, for PodProbeMarker's tcpSocket
    /// and httpGet probes, and the apiserver through the node's forwarder), on the node's containerd.
    pub fn daemon_hosts(&self) -> Vec<crate::daemon::DaemonHost> {
        self.nodes
            .iter()
            .map(|n| crate::daemon::DaemonHost {
                node: n.name().to_string(),
                socket: n.layout.containerd_socket(),
                netns: n.net.netns.clone(),
                ip: n.net.node_ip.clone(),
                kubeconfig: n.layout.path("kubelet.kubeconfig"),
            })
            .collect()
    }

    pub fn log_tails(&self, lines: usize) -> String {
        self.nodes.iter().map(|n| n.log_tails(lines)).collect()
    }

    /// Stops everything the nodes started; idempotent.
    pub fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        for node in &mut self.nodes {
            if let Some(kube_proxy) = &mut node.kube_proxy {
                kube_proxy.stop(Duration::from_secs(5));
            }
            node.kubelet.stop(Duration::from_secs(5));
        }
        for node in &mut self.nodes {
            cleanup::stop_containers(&node.layout);
            node.containerd.stop(Duration::from_secs(5));
            cleanup::kill_shims(&node.layout);
            if let Some(mounts) = &mut node.mounts {
                mounts.stop();
            }
            cleanup::unmount_under(&node.layout.dir);
            node.net.delete();
            cgroups::remove(&node.layout.cgroup_root);
        }
        cgroups::remove_parent();
        self.registry.process.stop(Duration::from_secs(2));
        cleanup::unmount_under(&self.dir);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for RealNodes {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Fails with what is missing before anything is started.
fn preflight(options: &RealNodeOptions) -> anyhow::Result<()> {
    ensure!(
        options.kubelet.is_file(),
        "no kubelet at {} (run `make real-node`)",
        options.kubelet.display()
    );
    for program in ["containerd", "runc", "docker-registry", "nsenter", "ip"] {
        images::which(program)?;
    }
    ensure!(
        Path::new("/usr/lib/cni/bridge").is_file(),
        "the CNI plugins are not installed in /usr/lib/cni (run `make real-node`)"
    );
    ensure!(
        Path::new(images::BUSYBOX).is_file(),
        "{} is not installed (run `make real-node`)",
        images::BUSYBOX
    );
    if let Some(kube_proxy) = &options.kube_proxy {
        ensure!(
            kube_proxy.is_file(),
            "no kube-proxy at {} (run `make real-node`)",
            kube_proxy.display()
        );
        for program in ["iptables", "iptables-save", "iptables-restore"] {
            images::which(program)?;
        }
    }
    // SAFETY: geteuid has no preconditions.
    ensure!(
        unsafe { libc::geteuid() } == 0,
        "real nodes need root (network namespaces, mounts)"
    );
    Ok(())
}

async fn start_node(
    plane: &ControlPlane,
    options: &RealNodeOptions,
    layout: NodeLayout,
    net: NodeNet,
    registry_port: u16,
) -> anyhow::Result<RealNode> {
    for sub in [
        "containerd",
        "cni/net.d",
        "cni/ipam",
        "kubelet/pki",
        "pod-logs",
    ] {
        std::fs::create_dir_all(layout.path(sub))
            .with_context(|| format!("creating {}", layout.path(sub).display()))?;
    }
    let write = |name: &str, text: String| {
        let path = layout.path(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
    };
    write("containerd.toml", config::containerd_toml(&layout))?;
    write(
        "cni/net.d/10-kruise-rs.conflist",
        config::cni_conflist(&layout),
    )?;
    for (path, text) in config::registry_hosts(&layout) {
        let path = layout.dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    write("kubelet.yaml", config::kubelet_yaml(&layout))?;
    write(
        "kubelet.kubeconfig",
        config::kubelet_kubeconfig(&layout, plane.ca_pem(), plane.admin_token()),
    )?;
    cgroups::create(&layout.cgroup_root)?;
    net.create()?;
    let mut mounts = if options.standard_runtime_socket {
        match mountns::NodeMounts::start(&layout).await {
            Ok(mounts) => Some(mounts),
            Err(error) => {
                net.delete();
                cgroups::remove(&layout.cgroup_root);
                return Err(error);
            }
        }
    } else {
        None
    };
    let started = start_processes(
        plane,
        options,
        &layout,
        &net,
        mounts.as_ref(),
        registry_port,
    )
    .await;
    match started {
        Ok((containerd, kubelet)) => Ok(RealNode {
            layout,
            net,
            containerd,
            kubelet,
            kube_proxy: None,
            mounts,
        }),
        Err(error) => {
            cleanup::stop_containers(&layout);
            cleanup::kill_shims(&layout);
            if let Some(mounts) = &mut mounts {
                mounts.stop();
            }
            net.delete();
            cgroups::remove(&layout.cgroup_root);
            Err(error)
        }
    }
}

async fn start_processes(
    plane: &ControlPlane,
    options: &RealNodeOptions,
    layout: &NodeLayout,
    net: &NodeNet,
    mounts: Option<&mountns::NodeMounts>,
    registry_port: u16,
) -> anyhow::Result<(Process, Process)> {
    let mut forwarders = vec![
        ("127.0.0.1", NODE_APISERVER_PORT, plane.ports().apiserver),
        ("127.0.0.1", NODE_REGISTRY_PORT, registry_port),
    ];
    if options.kube_proxy.is_some() {
        // Where kube-proxy sends the node's 10.0.0.1:443 (the `kubernetes` Service's endpoint).
        forwarders.push((&net.node_ip, NODE_APISERVER_PORT, plane.ports().apiserver));
    }
    for (address, inside, outside) in forwarders {
        let listener = net::listen_in(&net.netns_path(), address, inside)?;
        net::forward(listener, outside)?;
    }
    let nsenter = images::which("nsenter")?;
    let in_netns = |program: PathBuf, args: Vec<String>| {
        let mut all = vec![format!("--net={}", net.netns_path())];
        all.extend(mounts.map(mountns::NodeMounts::nsenter_arg));
        all.push("--".into());
        all.push(program.display().to_string());
        all.extend(args);
        all
    };
    let containerd = Process::spawn(
        &format!("containerd-{}", layout.name),
        &nsenter,
        &in_netns(
            images::which("containerd")?,
            config::containerd_args(layout),
        ),
        &layout.path("containerd.log"),
    )?;
    wait_for_socket(&layout.containerd_socket(), &containerd.log).await?;
    let kubelet = Process::spawn(
        &format!("kubelet-{}", layout.name),
        &nsenter,
        &in_netns(options.kubelet.clone(), config::kubelet_args(layout)),
        &layout.path("kubelet.log"),
    )?;
    Ok((containerd, kubelet))
}

async fn wait_for_socket(socket: &Path, log: &Path) -> anyhow::Result<()> {
    crate::wait::until(
        format!("containerd to open {}", socket.display()),
        Duration::from_secs(30),
        || async { Ok(socket.exists()) },
    )
    .await
    .with_context(|| crate::process::tail(log, 20))
}

/// Waits until every named node is registered, Ready and free of the not-ready taints.
async fn wait_ready(plane: &ControlPlane, names: &[String]) -> anyhow::Result<()> {
    let api: Api<Node> = Api::all(plane.client().await?);
    crate::wait::until("real nodes Ready", Duration::from_secs(180), || {
        let api = api.clone();
        async move {
            let list = api.list(&ListParams::default()).await?;
            Ok(names.iter().all(|name| {
                list.items.iter().any(|node| {
                    node.metadata.name.as_deref() == Some(name.as_str())
                        && crate::fleet::node_is_ready(node)
                        && !node
                            .spec
                            .as_ref()
                            .and_then(|s| s.taints.as_ref())
                            .is_some_and(|t| {
                                t.iter().any(|t| t.key.starts_with("node.kubernetes.io/"))
                            })
                })
            }))
        }
    })
    .await
}
