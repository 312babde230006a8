//! Rollout decisions: which Pods go first, and how many to create, delete and update.

pub mod cloneset;
pub mod ordering;
pub mod statefulset;
pub mod uniteddeployment;
