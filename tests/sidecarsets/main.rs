//! SidecarSet end to end, in one test binary that shares one control plane and one kruise-manager:
//! injection, in-place and hot upgrades, rollouts and history.
//!
//! SidecarSets are cluster-scoped: every one here is named after its test's namespace and restricted
//! to it (or selects a label only its test uses), and is deleted when the test ends. A module is one
//! file of tests; run one with a filter on its module, e.g. `cargo test -p kruise-e2e --test
//! sidecarsets sidecarset_rollout::`. (`sidecarset_webhook_down` kills the manager, so it keeps a
//! binary of its own.)

mod sidecarset;
mod sidecarset_history;
mod sidecarset_hot_upgrade;
mod sidecarset_rollout;
mod sidecarset_upgrade;
