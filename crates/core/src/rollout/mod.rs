//! Rollout decisions: which Pods go first, and how many to create, delete and update.

pub mod broadcastjob;
pub mod cloneset;
pub mod common;
pub mod daemonset;
pub mod ordering;
pub mod preview;
pub mod statefulset;
pub mod uniteddeployment;

pub use common::{InvalidSetting, MAX_BATCH_SIZE, Revision, slow_start_batches};
