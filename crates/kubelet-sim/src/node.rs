//! Simulated Nodes: what a kubelet registers, and its heartbeats (a Lease in `kube-node-lease` plus the
//! Ready condition's `lastHeartbeatTime`).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeSpec, NodeStatus,
    NodeSystemInfo, Taint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use serde_json::json;

pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
pub const LEASE_NAMESPACE: &str = "kube-node-lease";
pub const LEASE_DURATION_SECONDS: i32 = 40;
pub const KUBELET_VERSION: &str = "v1.34.10";
/// Label on every simulated Node; a running simulator adopts Nodes created later with it.
pub const SIMULATED_LABEL: &str = "node.kruise-rs.io/simulated";
/// Annotation holding the node's index in the fleet (it picks the node IP and the Pod CIDR), so a
/// simulator that adopts a Node created by someone else gives it the same addresses.
pub const INDEX_ANNOTATION: &str = "node.kruise-rs.io/sim-index";

/// One simulated node.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeSpecSim {
    pub name: String,
    /// Position of the node in the simulator; it picks the node IP and the Pod CIDR.
    pub index: u16,
    pub zone: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub cpu: String,
    pub memory: String,
    pub max_pods: u32,
    /// Taints registered with the node (e.g. to keep ordinary Pods off a node a test owns).
    pub taints: Vec<Taint>,
    /// `spec.unschedulable` at registration (a cordoned node).
    pub unschedulable: bool,
}

impl NodeSpecSim {
    /// `count` nodes named `<prefix>-<i>`, spread round-robin over `zones`.
    pub fn fleet(prefix: &str, count: u16, zones: &[String]) -> Vec<Self> {
        (0..count)
            .map(|index| Self {
                name: format!("{prefix}-{index}"),
                index,
                zone: (!zones.is_empty()).then(|| zones[index as usize % zones.len()].clone()),
                labels: BTreeMap::new(),
                cpu: "32".into(),
                memory: "128Gi".into(),
                max_pods: 250,
                taints: Vec::new(),
                unschedulable: false,
            })
            .collect()
    }

    /// One node named `name` at fleet position `index`, with the fleet's default capacity.
    pub fn named(name: &str, index: u16) -> Self {
        Self {
            name: name.to_string(),
            index,
            zone: None,
            labels: BTreeMap::new(),
            cpu: "32".into(),
            memory: "128Gi".into(),
            max_pods: 250,
            taints: Vec::new(),
            unschedulable: false,
        }
    }

    /// The simulated node a registered Node describes: its index from [`INDEX_ANNOTATION`] (else from
    /// the Pod CIDR `10.<index+1>.0.0/16`), zone, labels, taints and capacity. `None` when the Node is
    /// not a simulated one.
    pub fn from_node(node: &Node) -> Option<Self> {
        let labels = node.metadata.labels.clone().unwrap_or_default();
        if labels.get(SIMULATED_LABEL).map(String::as_str) != Some("true") {
            return None;
        }
        let name = node.metadata.name.clone()?;
        let spec = node.spec.clone().unwrap_or_default();
        let index = node
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(INDEX_ANNOTATION))
            .and_then(|v| v.parse::<u16>().ok())
            .or_else(|| {
                let cidr = spec.pod_cidr.as_deref()?;
                let octet: u16 = cidr.strip_prefix("10.")?.split('.').next()?.parse().ok()?;
                octet.checked_sub(1)
            })
            .unwrap_or(0);
        let capacity = node
            .status
            .as_ref()
            .and_then(|s| s.capacity.clone())
            .unwrap_or_default();
        let quantity = |key: &str, default: &str| {
            capacity
                .get(key)
                .map_or_else(|| default.to_string(), |q| q.0.clone())
        };
        let own = [
            HOSTNAME_LABEL,
            ZONE_LABEL,
            SIMULATED_LABEL,
            "kubernetes.io/os",
            "kubernetes.io/arch",
        ];
        Some(Self {
            zone: labels.get(ZONE_LABEL).cloned(),
            labels: labels
                .into_iter()
                .filter(|(k, _)| !own.contains(&k.as_str()))
                .collect(),
            cpu: quantity("cpu", "32"),
            memory: quantity("memory", "128Gi"),
            max_pods: quantity("pods", "250").parse().unwrap_or(250),
            taints: spec.taints.unwrap_or_default(),
            unschedulable: spec.unschedulable.unwrap_or(false),
            name,
            index,
        })
    }

    /// A fake, non-loopback InternalIP, distinct per node.
    pub fn node_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(
            172,
            18,
            (self.index / 250) as u8,
            (self.index % 250) as u8 + 2,
        )
    }

    /// The node's Pod network, distinct per node: `10.<index+1>.0.0/16` for the first 254 nodes
    /// (65,024 Pod IPs each), then `/20` blocks from `11.0.0.0` on (4,064 Pod IPs each), so a fleet
    /// of any size gets valid CIDRs.
    pub fn pod_cidr(&self) -> String {
        let (a, b, c, prefix) = self.pod_network();
        format!("{a}.{b}.{c}.0/{prefix}")
    }

    /// (first, second, third octet, prefix length) of [`Self::pod_cidr`].
    fn pod_network(&self) -> (u8, u8, u8, u8) {
        match u8::try_from(self.index + 1) {
            Ok(second) if second < 255 => (10, second, 0, 16),
            _ => {
                let block = u32::from(self.index) - 254;
                let first = 11 + block / 4096;
                let second = (block % 4096) / 16;
                let third = (block % 16) * 16;
                (first as u8, second as u8, third as u8, 20)
            }
        }
    }

    /// The n-th Pod IP of this node (n from 0, wrapping around the network), skipping .0 and .255
    /// host parts.
    pub fn pod_ip(&self, n: u32) -> Ipv4Addr {
        let (a, b, c, prefix) = self.pod_network();
        let third_octets: u32 = if prefix == 16 { 256 } else { 16 };
        let host = n % (third_octets * 254);
        Ipv4Addr::new(a, b, c + (host / 254) as u8, (host % 254) as u8 + 1)
    }

    /// The Node object a kubelet creates, with its status in the same create (so the scheduler sees
    /// capacity and allocatable at once).
    pub fn build(&self, now: Timestamp) -> Node {
        let mut labels = self.labels.clone();
        labels.insert(HOSTNAME_LABEL.into(), self.name.clone());
        labels.insert("kubernetes.io/os".into(), "linux".into());
        labels.insert("kubernetes.io/arch".into(), "amd64".into());
        labels.insert(SIMULATED_LABEL.into(), "true".into());
        if let Some(zone) = &self.zone {
            labels.insert(ZONE_LABEL.into(), zone.clone());
        }
        let resources: BTreeMap<String, Quantity> = [
            ("cpu", self.cpu.clone()),
            ("memory", self.memory.clone()),
            ("pods", self.max_pods.to_string()),
            ("ephemeral-storage", "500Gi".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), Quantity(v)))
        .collect();
        Node {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                labels: Some(labels),
                annotations: Some([(INDEX_ANNOTATION.to_string(), self.index.to_string())].into()),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                pod_cidr: Some(self.pod_cidr()),
                pod_cidrs: Some(vec![self.pod_cidr()]),
                taints: (!self.taints.is_empty()).then(|| self.taints.clone()),
                unschedulable: self.unschedulable.then_some(true),
                ..Default::default()
            }),
            status: Some(NodeStatus {
                capacity: Some(resources.clone()),
                allocatable: Some(resources),
                conditions: Some(conditions(now)),
                addresses: Some(vec![
                    NodeAddress {
                        type_: "InternalIP".into(),
                        address: self.node_ip().to_string(),
                    },
                    NodeAddress {
                        type_: "Hostname".into(),
                        address: self.name.clone(),
                    },
                ]),
                daemon_endpoints: Some(NodeDaemonEndpoints {
                    kubelet_endpoint: Some(DaemonEndpoint { port: 10250 }),
                }),
                node_info: Some(NodeSystemInfo {
                    architecture: "amd64".into(),
                    boot_id: format!("sim-boot-{}", self.index),
                    container_runtime_version: "containerd://2.1.0-sim".into(),
                    kernel_version: "6.1.0-sim".into(),
                    kube_proxy_version: String::new(),
                    kubelet_version: KUBELET_VERSION.into(),
                    machine_id: format!("sim-machine-{}", self.index),
                    operating_system: "linux".into(),
                    os_image: "kubelet-sim".into(),
                    system_uuid: format!("sim-uuid-{}", self.index),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        }
    }
}

/// The node conditions of a healthy kubelet, all stamped with `now` as heartbeat.
pub fn conditions(now: Timestamp) -> Vec<NodeCondition> {
    let condition = |type_: &str, status: &str, reason: &str, message: &str| NodeCondition {
        type_: type_.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_heartbeat_time: Some(Time(now)),
        last_transition_time: Some(Time(now)),
    };
    vec![
        condition(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
        ),
        condition(
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure",
        ),
        condition(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
        ),
        condition(
            "Ready",
            "True",
            "KubeletReady",
            "kubelet is posting ready status",
        ),
    ]
}

/// The status patch a heartbeat writes. Conditions merge by type, so only these four are touched; a
/// condition that flips (Ready back to True after the node lifecycle controller set Unknown) gets a new
/// transition time, the others keep theirs.
pub fn heartbeat_status_patch(node: &Node, now: Timestamp) -> serde_json::Value {
    let current = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let updated: Vec<NodeCondition> = conditions(now)
        .into_iter()
        .map(|mut wanted| {
            if let Some(previous) = current.iter().find(|c| c.type_ == wanted.type_)
                && previous.status == wanted.status
            {
                wanted.last_transition_time = previous.last_transition_time.clone();
            }
            wanted
        })
        .collect();
    json!({ "status": { "conditions": updated } })
}

/// Whether a heartbeat must also refresh the node status (not only the Lease): when Ready is not True
/// (a controller marked the node Unknown) or the last status heartbeat is older than `every`.
pub fn status_is_stale(node: &Node, now: Timestamp, every: std::time::Duration) -> bool {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|all| all.iter().find(|c| c.type_ == "Ready"));
    match ready {
        Some(ready) if ready.status == "True" => ready
            .last_heartbeat_time
            .as_ref()
            .is_none_or(|beat| now.duration_since(beat.0).as_secs_f64() >= every.as_secs_f64()),
        _ => true,
    }
}

/// The node's Lease with `renewTime = now`, owned by the Node so it goes away with it.
pub fn lease(node: &Node, now: Timestamp) -> Lease {
    let name = node.metadata.name.clone().unwrap_or_default();
    Lease {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(LEASE_NAMESPACE.into()),
            owner_references: node.metadata.uid.clone().map(|uid| {
                vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Node".into(),
                    name: name.clone(),
                    uid,
                    ..Default::default()
                }]
            }),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(name),
            lease_duration_seconds: Some(LEASE_DURATION_SECONDS),
            renew_time: Some(MicroTime(now)),
            ..Default::default()
        }),
    }
}

/// Whether a node's heartbeats were stopped through its annotation.
pub fn heartbeats_stopped(node: &Node) -> bool {
    node.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(crate::steer::HEARTBEAT))
        .is_some_and(|value| value == "stopped")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        Timestamp::from_second(1_700_000_000).expect("valid")
    }

    #[test]
    fn fleet_spreads_zones_and_ips() {
        let zones = vec!["zone-a".to_string(), "zone-b".into(), "zone-c".into()];
        let fleet = NodeSpecSim::fleet("sim", 4, &zones);
        let names: Vec<_> = fleet.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["sim-0", "sim-1", "sim-2", "sim-3"]);
        let zones: Vec<_> = fleet
            .iter()
            .map(|n| n.zone.clone().unwrap_or_default())
            .collect();
        assert_eq!(zones, ["zone-a", "zone-b", "zone-c", "zone-a"]);
        let ips: std::collections::HashSet<_> = fleet.iter().map(NodeSpecSim::node_ip).collect();
        assert_eq!(ips.len(), 4);
        assert_eq!(fleet[0].pod_ip(0).to_string(), "10.1.0.1");
        assert_eq!(fleet[0].pod_ip(254).to_string(), "10.1.1.1");
        assert_eq!(fleet[1].pod_ip(0).to_string(), "10.2.0.1");
    }

    #[test]
    fn large_fleets_get_valid_distinct_pod_networks() {
        let fleet = NodeSpecSim::fleet("sim", 5000, &[]);
        let cidrs: std::collections::HashSet<_> = fleet.iter().map(NodeSpecSim::pod_cidr).collect();
        assert_eq!(cidrs.len(), 5000);
        assert_eq!(fleet[253].pod_cidr(), "10.254.0.0/16");
        assert_eq!(fleet[254].pod_cidr(), "11.0.0.0/20");
        assert_eq!(fleet[255].pod_cidr(), "11.0.16.0/20");
        assert_eq!(fleet[254 + 4096].pod_cidr(), "12.0.0.0/20");
        assert_eq!(fleet[255].pod_ip(0).to_string(), "11.0.16.1");
        assert_eq!(fleet[255].pod_ip(254).to_string(), "11.0.17.1");
        // The last IP of a /20 block stays inside it, then wraps.
        assert_eq!(fleet[255].pod_ip(16 * 254 - 1).to_string(), "11.0.31.254");
        assert_eq!(fleet[255].pod_ip(16 * 254).to_string(), "11.0.16.1");
        let ips: std::collections::HashSet<_> = fleet.iter().map(|n| n.pod_ip(7)).collect();
        assert_eq!(ips.len(), 5000);
    }

    #[test]
    fn built_node_is_schedulable() {
        let node = NodeSpecSim::fleet("sim", 1, &["zone-a".into()])[0].build(now());
        let labels = node.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels.get(ZONE_LABEL).map(String::as_str), Some("zone-a"));
        assert_eq!(
            labels.get(HOSTNAME_LABEL).map(String::as_str),
            Some("sim-0")
        );
        let status = node.status.expect("status");
        assert!(
            status
                .allocatable
                .expect("allocatable")
                .contains_key("pods")
        );
        let ready = status
            .conditions
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "Ready");
        assert_eq!(ready.map(|c| c.status), Some("True".into()));
        assert_eq!(
            status.node_info.map(|i| i.kubelet_version),
            Some(KUBELET_VERSION.into())
        );
    }

    #[test]
    fn heartbeat_keeps_transition_time_unless_flipped() {
        let earlier = Timestamp::from_second(1_600_000_000).expect("valid");
        let mut node = NodeSpecSim::fleet("sim", 1, &[])[0].build(earlier);
        let patch = heartbeat_status_patch(&node, now());
        let ready = &patch["status"]["conditions"][3];
        assert_eq!(ready["type"], "Ready");
        assert_eq!(
            ready["lastTransitionTime"],
            serde_json::to_value(Time(earlier)).expect("json")
        );
        assert_eq!(
            ready["lastHeartbeatTime"],
            serde_json::to_value(Time(now())).expect("json")
        );

        if let Some(conditions) = node.status.as_mut().and_then(|s| s.conditions.as_mut()) {
            conditions[3].status = "Unknown".into();
        }
        assert!(status_is_stale(
            &node,
            now(),
            std::time::Duration::from_secs(3600)
        ));
        let patch = heartbeat_status_patch(&node, now());
        assert_eq!(
            patch["status"]["conditions"][3]["lastTransitionTime"],
            serde_json::to_value(Time(now())).expect("json")
        );
    }

    #[test]
    fn a_registered_node_reads_back_as_the_same_simulated_node() {
        let mut spec = NodeSpecSim::named("extra-7", 7);
        spec.zone = Some("zone-b".into());
        spec.labels.insert("node-pool".into(), "canary".into());
        spec.cpu = "4".into();
        spec.memory = "8Gi".into();
        spec.max_pods = 10;
        spec.unschedulable = true;
        spec.taints = vec![Taint {
            key: "dedicated".into(),
            value: Some("gpu".into()),
            effect: "NoSchedule".into(),
            ..Default::default()
        }];
        let node = spec.build(now());
        assert_eq!(NodeSpecSim::from_node(&node), Some(spec));

        let mut foreign = node;
        foreign.metadata.annotations = None;
        assert_eq!(NodeSpecSim::from_node(&foreign).map(|n| n.index), Some(7));
        if let Some(labels) = foreign.metadata.labels.as_mut() {
            labels.remove(SIMULATED_LABEL);
        }
        assert_eq!(NodeSpecSim::from_node(&foreign), None);
    }

    #[test]
    fn stale_status_after_interval() {
        let node = NodeSpecSim::fleet("sim", 1, &[])[0].build(now());
        let minute = std::time::Duration::from_secs(60);
        assert!(!status_is_stale(&node, now(), minute));
        let later = now()
            .checked_add(jiff::SignedDuration::from_secs(61))
            .expect("valid");
        assert!(status_is_stale(&node, later, minute));
    }
}
