//! Helpers shared by the scale benches (`testbed-scale`, `cloneset-scale`, `sidecarset-scale`): the
//! kubelet-sim child process, kruise-manager, Prometheus text from the apiserver and the manager,
//! quantiles, CPU and memory figures. The benches print figures; nothing here asserts about time.

pub mod apiserver;
pub mod manager;
pub mod process;
pub mod prom;
pub mod sim;
pub mod stats;
