//! kruise-daemon: OpenKruise's node agent in Rust. One runs on every node (a DaemonSet); it talks to the
//! node's container runtime over the CRI v1 API (gRPC on the runtime's unix socket) and executes the
//! ContainerRecreateRequests of the Pods on its node. It serves `/healthz`, `/readyz` and Prometheus
//! `/metrics`.

pub mod containermeta;
pub mod cri;
pub mod crr;
pub mod hooks;
pub mod imagepuller;
pub mod metrics;
pub mod podprobe;
pub mod queue;
