//! Network namespaces for real nodes. The kubelet refuses a loopback node address, and this machine may
//! only listen on 127.0.0.1 or inside namespaces the test bed creates; so each real node gets a network
//! namespace of its own, joined to the host by a veth pair on a private /24: the node has `x.y.i.2`, the
//! host side `x.y.i.1`. The apiserver reaches the kubelet at the node address (exec, logs,
//! port-forward); the node reaches the apiserver and the local registry through forwarders that listen
//! on the node's own loopback and connect to the host's 127.0.0.1.

#![allow(unsafe_code)]

use std::os::fd::AsRawFd as _;
use std::process::Command;

use anyhow::{Context, bail};

/// Runs `ip` with `args`, failing with its stderr.
pub fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .with_context(|| format!("running ip {}", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "ip {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
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

/// One node's namespace and veth pair.
#[derive(Clone, Debug)]
pub struct NodeNet {
    /// Name under /run/netns.
    pub netns: String,
    /// Host-side veth name (at most 15 bytes).
    pub host_veth: String,
    pub host_ip: String,
    pub node_ip: String,
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
        }
    }

    pub fn netns_path(&self) -> String {
        format!("/run/netns/{}", self.netns)
    }

    /// Creates the namespace and the veth pair, addresses both ends, brings up the node's loopback and
    /// routes the node's traffic through the host side.
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
        Ok(())
    }

    /// Removes the namespace (which removes both veth ends). Errors are ignored: it may not exist.
    pub fn delete(&self) {
        let _ = ip(&["link", "del", &self.host_veth]);
        let _ = ip(&["netns", "del", &self.netns]);
    }
}

/// Binds a listener on `127.0.0.1:port` inside the network namespace at `netns_path`. The socket keeps
/// the namespace it was made in, so the calling process can serve it from anywhere; the switch happens
/// on a short-lived thread so no other thread ever runs in the node's namespace.
pub fn listen_in(netns_path: &str, port: u16) -> anyhow::Result<std::net::TcpListener> {
    let path = netns_path.to_string();
    std::thread::spawn(move || -> anyhow::Result<std::net::TcpListener> {
        let target = std::fs::File::open(&path).with_context(|| format!("opening {path}"))?;
        // SAFETY: setns on this thread only, with a valid namespace fd; the thread ends right after.
        let rc = unsafe { libc::setns(target.as_raw_fd(), libc::CLONE_NEWNET) };
        if rc != 0 {
            bail!("setns({path}): {}", std::io::Error::last_os_error());
        }
        let listener = std::net::TcpListener::bind(("127.0.0.1", port))
            .with_context(|| format!("listening on 127.0.0.1:{port} in {path}"))?;
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
    }
}
