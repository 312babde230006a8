//! Network namespaces for real nodes. The kubelet refuses a loopback node address, and this machine may
//! only listen on 127.0.0.1 or inside namespaces the test bed creates; so each real node gets a network
//! namespace of its own, joined to the host by a veth pair on a private /24: the node has `x.y.i.2`, the
//! host side `x.y.i.1`. The apiserver reaches the kubelet at the node address (exec, logs,
//! port-forward); the node reaches the apiserver and the local registry through forwarders that listen
//! on the node's own loopback and connect to the host's 127.0.0.1.
//!
//! With in-cluster networking (opt-in, [`super::RealNodeOptions::kube_proxy`]) each node's Pod range is
//! taken from the upper half of the same /16 ([`node_pod_cidr`]) and the host routes it to the node
//! address, so that host processes (the apiserver's service proxy and webhook calls) reach Pod IPs
//! without any forwarding on the host.

#![allow(unsafe_code)]

use std::os::fd::AsRawFd as _;
use std::process::Command;

use anyhow::{Context, bail};

/// Runs `ip` with `args`, failing with its stderr.
pub fn ip(args: &[&str]) -> anyhow::Result<()> {
    crate::process::checked_output("ip", args).map(|_| ())
}

/// A /16 (`10.<n>`, n in 200..250) that no address on this machine uses yet, for one cluster's nodes:
/// two clusters on one machine (a test run beside `kruise-local`) must not route the same range.
pub fn free_prefix() -> anyhow::Result<String> {
    let out = Command::new("ip")
        .args(["-o", "-4", "addr", "show"])
        .output()
        .context("running ip -o -4 addr show")?;
    let used = String::from_utf8_lossy(&out.stdout).into_owned();
    pick_prefix(&used).context("every 10.200-249.0.0/16 range is in use on this machine")
}

fn pick_prefix(ip_addr_output: &str) -> Option<String> {
    (200..250)
        .map(|n| format!("10.{n}"))
        .find(|prefix| !ip_addr_output.contains(&format!(" {prefix}.")))
}

/// The Pod range of the whole cluster in the /16 `prefix` with in-cluster networking: its upper half,
/// `<prefix>.128.0/17` (kube-proxy's `--cluster-cidr`). The lower half holds the nodes' veth /24s.
pub fn cluster_pod_cidr(prefix: &str) -> String {
    format!("{prefix}.128.0/17")
}

/// Node `index`'s Pod range in [`cluster_pod_cidr`]: `<prefix>.<128 + index>.0/24`. Unique to the cluster
/// (the /16 is), so two clusters on one machine never route the same range.
pub fn node_pod_cidr(prefix: &str, index: usize) -> anyhow::Result<String> {
    // Node `index`'s veth /24 is `<prefix>.<index + 1>`, which must stay in the lower half too.
    if index >= 127 {
        bail!(
            "at most 127 real nodes fit one cluster's /16 with in-cluster networking, not {}",
            index + 1
        );
    }
    Ok(format!("{prefix}.{}.0/24", 128 + index))
}

/// One node's namespace and veth pair.
#[derive(Clone, Debug)]
pub struct NodeNet {
    /// Name under /run/netns.
    pub netns: String,
    /// Host-side veth name (at most 15 bytes).
    pub host_veth: String,
    pub host_ip: String,
    pub node_ip: String,
    /// The node's Pod range, routed by the host to [`NodeNet::node_ip`] (in-cluster networking only).
    pub routed_pod_cidr: Option<String>,
}

impl NodeNet {
    /// The names and addresses for node `index` of the cluster tagged `tag` (a few digits unique on the
    /// machine, e.g. from the process id) in the /16 `prefix` (e.g. `10.201`).
    pub fn plan(tag: &str, index: usize, prefix: &str) -> Self {
        Self {
            netns: format!("krs-{tag}-{index}"),
            host_veth: format!("krs{tag}h{index}"),
            host_ip: format!("{prefix}.{}.1", index + 1),
            node_ip: format!("{prefix}.{}.2", index + 1),
            routed_pod_cidr: None,
        }
    }

    pub fn netns_path(&self) -> String {
        format!("/run/netns/{}", self.netns)
    }

    /// Creates the namespace and the veth pair, addresses both ends, brings up the node's loopback and
    /// routes the node's traffic through the host side (and, with [`NodeNet::routed_pod_cidr`], the
    /// host's traffic to the node's Pods through the node). The host route goes with the veth.
    pub fn create(&self) -> anyhow::Result<()> {
        // Left over from a run that was killed: start clean.
        self.delete();
        ip(&["netns", "add", &self.netns])?;
        let node_veth = format!("{}n", &self.host_veth[..self.host_veth.len().min(14)]);
        ip(&[
            "link",
            "add",
            &self.host_veth,
            "type",
            "veth",
            "peer",
            "name",
            &node_veth,
            "netns",
            &self.netns,
        ])?;
        ip(&[
            "addr",
            "add",
            &format!("{}/24", self.host_ip),
            "dev",
            &self.host_veth,
        ])?;
        ip(&["link", "set", &self.host_veth, "up"])?;
        let inside = |args: &[&str]| {
            let mut all = vec!["-n", self.netns.as_str()];
            all.extend_from_slice(args);
            ip(&all)
        };
        inside(&["link", "set", "lo", "up"])?;
        inside(&["link", "set", &node_veth, "name", "eth0"])?;
        inside(&[
            "addr",
            "add",
            &format!("{}/24", self.node_ip),
            "dev",
            "eth0",
        ])?;
        inside(&["link", "set", "eth0", "up"])?;
        inside(&["route", "add", "default", "via", &self.host_ip])?;
        if let Some(cidr) = &self.routed_pod_cidr {
            ip(&host_route(cidr, &self.node_ip, &self.host_veth))?;
        }
        Ok(())
    }

    /// Removes the namespace (which removes both veth ends). Errors are ignored: it may not exist.
    pub fn delete(&self) {
        let _ = ip(&["link", "del", &self.host_veth]);
        let _ = ip(&["netns", "del", &self.netns]);
    }
}

/// `ip` arguments routing `cidr` from the host to a node's Pods: through the node, over its veth.
fn host_route<'a>(cidr: &'a str, node_ip: &'a str, host_veth: &'a str) -> [&'a str; 7] {
    ["route", "add", cidr, "via", node_ip, "dev", host_veth]
}

/// Binds a listener on `address:port` inside the network namespace at `netns_path` (its loopback, or
/// an address of the node there). The socket keeps
/// the namespace it was made in, so the calling process can serve it from anywhere; the switch happens
/// on a short-lived thread so no other thread ever runs in the node's namespace.
pub fn listen_in(
    netns_path: &str,
    address: &str,
    port: u16,
) -> anyhow::Result<std::net::TcpListener> {
    let path = netns_path.to_string();
    let address: std::net::IpAddr = address
        .parse()
        .with_context(|| format!("parsing address {address}"))?;
    std::thread::spawn(move || -> anyhow::Result<std::net::TcpListener> {
        let target = std::fs::File::open(&path).with_context(|| format!("opening {path}"))?;
        // SAFETY: setns on this thread only, with a valid namespace fd; the thread ends right after.
        let rc = unsafe { libc::setns(target.as_raw_fd(), libc::CLONE_NEWNET) };
        if rc != 0 {
            bail!("setns({path}): {}", std::io::Error::last_os_error());
        }
        let listener = std::net::TcpListener::bind((address, port))
            .with_context(|| format!("listening on {address}:{port} in {path}"))?;
        listener.set_nonblocking(true)?;
        Ok(listener)
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the namespace thread panicked"))?
}

/// Serves `listener` (from [`listen_in`]) on the current tokio runtime: every connection is copied both
/// ways to `127.0.0.1:target` in the host namespace, until the runtime ends.
pub fn forward(listener: std::net::TcpListener, target: u16) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::from_std(listener).context("adopting a listener")?;
    tokio::spawn(async move {
        loop {
            // The listener only fails when the process is out of descriptors or going away.
            let Ok((mut inbound, _)) = listener.accept().await else {
                break;
            };
            tokio::spawn(async move {
                if let Ok(mut outbound) =
                    tokio::net::TcpStream::connect(("127.0.0.1", target)).await
                {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_takes_a_range_no_interface_uses() {
        let used = "2: eth0    inet 10.200.1.1/24 brd 10.200.1.255 scope global krs1h0\n\
                    3: eth1    inet 10.201.1.1/24 scope global krs2h0\n";
        assert_eq!(pick_prefix(used).as_deref(), Some("10.202"));
        assert_eq!(pick_prefix("").as_deref(), Some("10.200"));
    }

    #[test]
    fn names_fit_the_kernel_limit_and_addresses_are_per_node() {
        let net = NodeNet::plan("12345", 2, "10.201");
        assert!(net.host_veth.len() <= 15, "{}", net.host_veth);
        assert_eq!(net.host_ip, "10.201.3.1");
        assert_eq!(net.node_ip, "10.201.3.2");
        assert_eq!(net.netns_path(), "/run/netns/krs-12345-2");
        assert_eq!(net.routed_pod_cidr, None);
    }

    #[test]
    fn pod_ranges_are_the_upper_half_of_the_clusters_range_one_per_node() {
        let cases: &[(&str, usize, Option<&str>)] = &[
            ("10.201", 0, Some("10.201.128.0/24")),
            ("10.201", 1, Some("10.201.129.0/24")),
            ("10.249", 126, Some("10.249.254.0/24")),
            // Node 127's veth would be 10.201.128.0/24: the first Pod range.
            ("10.201", 127, None),
            ("10.201", 500, None),
        ];
        for &(prefix, index, want) in cases {
            let got = node_pod_cidr(prefix, index).ok();
            assert_eq!(got.as_deref(), want, "{prefix} node {index}");
            if want.is_some() {
                // Never the node's own veth range.
                let veth = NodeNet::plan("1", index, prefix).node_ip;
                let veth_third = veth.split('.').nth(2);
                assert_ne!(got.as_deref().and_then(|c| c.split('.').nth(2)), veth_third);
            }
        }
        assert_eq!(cluster_pod_cidr("10.201"), "10.201.128.0/17");
    }

    #[test]
    fn the_host_routes_a_pod_range_through_the_node_over_its_veth() {
        assert_eq!(
            host_route("10.201.129.0/24", "10.201.2.2", "krs7h1").join(" "),
            "route add 10.201.129.0/24 via 10.201.2.2 dev krs7h1"
        );
    }
}
