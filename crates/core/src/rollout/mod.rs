//! Rollout decisions: which Pods go first, and how many to create, delete and update.

pub mod broadcastjob;
pub mod cloneset;
pub mod daemonset;
pub mod ordering;
pub mod statefulset;
pub mod uniteddeployment;
