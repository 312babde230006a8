//! In-cluster networking for real nodes (opt-in, [`super::RealNodeOptions::kube_proxy`]): what a Pod's
//! in-cluster configuration needs, `https://10.0.0.1:443` (the `kubernetes` Service) reachable from the
//! Pod's and from the node's network namespace, served by real kube-proxies.
//!
//! - One kube-proxy (v1.34.10, iptables mode) per node, run in the node's network namespace as the
//!   kubelet is: its rules live in that namespace's netfilter tables, never in the host's or another
//!   cluster's.
//! - The `kubernetes` Service gets `internalTrafficPolicy: Local` and an EndpointSlice
//!   ([`apiserver_endpoint_slice`]) with one endpoint per node, `nodeIP:6443`, where the node's apiserver
//!   forwarder also listens: each node sends 10.0.0.1:443 to its own forwarder, so nothing crosses the
//!   host (which does not forward). Nothing reconciles that slice: the apiserver's endpoint reconciler
//!   is `none`, and the EndpointSlice controller skips Services without a selector.

use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use super::config::NodeLayout;

/// kube-proxy's healthz port, on the node's address.
pub const HEALTHZ_PORT: u16 = 10256;
/// kube-proxy's metrics port, on the node's loopback.
const METRICS_PORT: u16 = 10249;
/// The `kubernetes` Service's ClusterIP (the first address of `--service-cluster-ip-range`) and port.
pub const APISERVER_SERVICE_IP: &str = "10.0.0.1";
pub const APISERVER_SERVICE_PORT: u16 = 443;
/// The EndpointSlice of the `kubernetes` Service that the test bed writes.
pub const ENDPOINT_SLICE_NAME: &str = "kubernetes-real-nodes";
const FIELD_MANAGER: &str = "kruise-rs-testbed";

/// kube-proxy's command line for `node` in a cluster whose Pods are in `cluster_cidr`.
///
/// - iptables mode (the v1.34 default on Linux; the kernel here has no IPVS).
/// - The three conntrack zeros skip the sysctls that are global (read-only outside the machine's first
///   network namespace).
/// - healthz on the node's address (the host checks it there), metrics on the node's loopback,
///   NodePorts on the node's address.
pub fn args(node: &NodeLayout, cluster_cidr: &str) -> Vec<String> {
    vec![
        format!("--kubeconfig={}", node.path("kubelet.kubeconfig").display()),
        format!("--hostname-override={}", node.name),
        "--proxy-mode=iptables".into(),
        format!("--cluster-cidr={cluster_cidr}"),
        // NodePorts on the node's address only (unset: every local address, and a warning).
        "--nodeport-addresses=primary".into(),
        "--conntrack-max-per-core=0".into(),
        "--conntrack-tcp-timeout-established=0".into(),
        "--conntrack-tcp-timeout-close-wait=0".into(),
        format!("--healthz-bind-address={}:{HEALTHZ_PORT}", node.ip),
        format!("--metrics-bind-address=127.0.0.1:{METRICS_PORT}"),
        "--v=2".into(),
    ]
}

/// The `kubernetes` Service's EndpointSlice: one ready endpoint `ip:port` per `(node name, node ip)`.
pub fn apiserver_endpoint_slice(nodes: &[(String, String)], port: u16) -> Value {
    let endpoints: Vec<Value> = nodes
        .iter()
        .map(|(name, ip)| {
            json!({"addresses": [ip], "nodeName": name, "conditions": {"ready": true}})
        })
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": ENDPOINT_SLICE_NAME,
            "namespace": "default",
            "labels": {
                "kubernetes.io/service-name": "kubernetes",
                "endpointslice.kubernetes.io/managed-by": FIELD_MANAGER,
            },
        },
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
    })
}

/// Whether `iptables-save -t nat` output of a node has the Service rule for 10.0.0.1:443 and the DNAT to
/// the node's own `node_ip:port`: kube-proxy has synced the `kubernetes` Service on that node.
pub fn serves_apiserver(iptables_nat: &str, node_ip: &str, port: u16) -> bool {
    let service = format!("-d {APISERVER_SERVICE_IP}/32");
    let service_port = format!("--dport {APISERVER_SERVICE_PORT}");
    let dnat = format!("--to-destination {node_ip}:{port}");
    iptables_nat
        .lines()
        .any(|l| l.contains(&service) && l.contains(&service_port) && l.contains("-j KUBE-SV"))
        && iptables_nat.lines().any(|l| l.contains(&dnat))
}

/// Points the `kubernetes` Service at the nodes' forwarders: `internalTrafficPolicy: Local` and the
/// EndpointSlice of `nodes` (name, ip) on `port`.
pub async fn publish_apiserver(
    client: &Client,
    nodes: &[(String, String)],
    port: u16,
) -> anyhow::Result<()> {
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    services
        .patch(
            "kubernetes",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"internalTrafficPolicy": "Local"}})),
        )
        .await
        .context("patching Service default/kubernetes to internalTrafficPolicy Local")?;
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    slices
        .patch(
            ENDPOINT_SLICE_NAME,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(apiserver_endpoint_slice(nodes, port)),
        )
        .await
        .context("writing the kubernetes Service's EndpointSlice")?;
    Ok(())
}

/// Waits until kube-proxy's healthz on `node_ip` answers 200 and the node's nat table sends
/// 10.0.0.1:443 to `node_ip:port`; `log` is kube-proxy's, added to a failure.
pub async fn wait_synced(
    netns: &str,
    node_ip: &str,
    port: u16,
    log: &std::path::Path,
) -> anyhow::Result<()> {
    let iptables_save = super::images::which("iptables-save")?;
    let iptables_save = &iptables_save;
    crate::wait::until(
        format!("kube-proxy in {netns} to serve {APISERVER_SERVICE_IP}:{APISERVER_SERVICE_PORT}"),
        Duration::from_secs(60),
        || async move {
            if !healthz_ok(node_ip).await {
                return Ok(false);
            }
            let out = tokio::process::Command::new("ip")
                .args(["netns", "exec", netns])
                .arg(iptables_save)
                .args(["-t", "nat"])
                .output()
                .await
                .context("running iptables-save in the node's namespace")?;
            Ok(serves_apiserver(
                &String::from_utf8_lossy(&out.stdout),
                node_ip,
                port,
            ))
        },
    )
    .await
    .with_context(|| crate::process::tail(log, 30))
}

/// `GET http://<address>:10256/healthz` answers 200 (the node's address, routed over its veth).
async fn healthz_ok(address: &str) -> bool {
    let attempt = crate::control_plane::plain_http_get_at(address, HEALTHZ_PORT, "/healthz");
    match tokio::time::timeout(Duration::from_secs(2), attempt).await {
        Ok(Ok(response)) => {
            crate::control_plane::status_and_body(&response).is_ok_and(|(code, _)| code == 200)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> NodeLayout {
        NodeLayout {
            name: "real-0".into(),
            dir: "/run/real-0".into(),
            ip: "10.201.1.2".into(),
            pod_cidr: "10.201.128.0/24".into(),
            apiserver_port: 6443,
            registry_port: 5000,
            mirrored_registries: Vec::new(),
            pause_image: "registry.k8s.io/pause:3.10".into(),
            runc_wrapper: "/run/runc-wrapper".into(),
            labels: Vec::new(),
            cgroup_root: "/kruise-rs/1-real-0".into(),
        }
    }

    #[test]
    fn kube_proxy_runs_in_iptables_mode_on_the_node_without_global_sysctls() {
        let args = args(&layout(), "10.201.128.0/17");
        let cases: &[&str] = &[
            "--kubeconfig=/run/real-0/kubelet.kubeconfig",
            "--hostname-override=real-0",
            "--proxy-mode=iptables",
            "--cluster-cidr=10.201.128.0/17",
            "--nodeport-addresses=primary",
            "--conntrack-max-per-core=0",
            "--conntrack-tcp-timeout-established=0",
            "--conntrack-tcp-timeout-close-wait=0",
            "--healthz-bind-address=10.201.1.2:10256",
            "--metrics-bind-address=127.0.0.1:10249",
        ];
        for want in cases {
            assert!(args.iter().any(|a| a == want), "{want} not in {args:?}");
        }
        // Nothing listens on every address of the node.
        assert!(!args.iter().any(|a| a.contains("0.0.0.0")), "{args:?}");
    }

    #[test]
    fn the_slice_has_one_ready_endpoint_per_node_on_the_forwarder_port() {
        let nodes = [
            ("real-0".to_string(), "10.201.1.2".to_string()),
            ("real-1".to_string(), "10.201.2.2".to_string()),
        ];
        let slice = apiserver_endpoint_slice(&nodes, 6443);
        let cases: &[(&str, Value)] = &[
            ("/metadata/namespace", json!("default")),
            (
                "/metadata/labels/kubernetes.io~1service-name",
                json!("kubernetes"),
            ),
            ("/addressType", json!("IPv4")),
            ("/endpoints/0/addresses", json!(["10.201.1.2"])),
            ("/endpoints/0/nodeName", json!("real-0")),
            ("/endpoints/0/conditions/ready", json!(true)),
            ("/endpoints/1/addresses", json!(["10.201.2.2"])),
            ("/endpoints/1/nodeName", json!("real-1")),
            ("/ports/0/name", json!("https")),
            ("/ports/0/port", json!(6443)),
        ];
        for (pointer, want) in cases {
            assert_eq!(slice.pointer(pointer), Some(want), "{pointer} in {slice}");
        }
        // It is a valid EndpointSlice.
        let typed: EndpointSlice = serde_json::from_value(slice).expect("an EndpointSlice");
        assert_eq!(typed.endpoints.len(), 2);
    }

    #[test]
    fn synced_means_the_service_rule_and_the_dnat_to_this_node() {
        let synced = "\
-A KUBE-SERVICES -d 10.0.0.1/32 -p tcp -m comment --comment \"default/kubernetes:https cluster IP\" -m tcp --dport 443 -j KUBE-SVL-NPX46M4PTMTKRN6Y
-A KUBE-SEP-AAA -p tcp -m comment --comment \"default/kubernetes:https\" -m tcp -j DNAT --to-destination 10.201.1.2:6443
";
        let other_node = synced.replace("10.201.1.2:6443", "10.201.2.2:6443");
        let cases: &[(&str, &str, bool)] = &[
            (synced, "10.201.1.2", true),
            (&other_node, "10.201.1.2", false),
            ("", "10.201.1.2", false),
            // Before the slice: the Service has no endpoints and is rejected.
            (
                "-A KUBE-SERVICES -d 10.0.0.1/32 -p tcp -m tcp --dport 443 -j REJECT",
                "10.201.1.2",
                false,
            ),
        ];
        for &(nat, ip, want) in cases {
            assert_eq!(serves_apiserver(nat, ip, 6443), want, "{ip} in {nat}");
        }
    }
}
