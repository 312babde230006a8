//! The test bed itself, in one test binary that shares one control plane (no kruise-manager): the
//! real scheduler, controller manager and garbage collector with kubelet-sim (`testbed::`), and the
//! simulated volume provisioner (`volumes::`), and how the apiserver refuses a write whose
//! precondition no longer holds (`refusals::`). Nodes a test adds are tainted, so no other test's
//! Pods land there. Run one module with `cargo test -p kruise-e2e --test cluster volumes::`.

mod refusals;
mod testbed;
mod volumes;
