//! Test kit for kruise-rs: a real local control plane (etcd, kube-apiserver, kube-controller-manager,
//! kube-scheduler built from their Go modules), kubelet-sim, per-test namespaces and waits with deadlines.

pub mod balancer;
pub mod blackhole;
pub mod certs;
pub mod chaos;
pub mod control_plane;
pub mod daemon;
pub mod fleet;
pub mod helm;
pub mod installed;
pub mod lag;
pub mod manager;
pub mod monitor;
pub mod process;
pub mod realnode;
pub mod starve;
pub mod testbed;
pub mod wait;

pub use control_plane::{ControlPlane, Options};
pub use monitor::{Limits, RolloutMonitor};
pub use testbed::{
    BedShape, TestBed, TestNamespace, managed_namespace, testbed, testbed_shaped, testbed_with,
    testbed_with_real_nodes,
};
pub use wait::{eventually, settled, until};
