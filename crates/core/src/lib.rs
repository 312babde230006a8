//! Rollout logic shared by every workload, as pure functions of a snapshot: revisions, the in-place update engine, update and scale-down ordering, int-or-percent arithmetic, Pod availability and expectations.
//!
//! This crate is part of the workspace layout in DESIGN.md; its content arrives with the issues that
//! need it (the API issue, the in-place engine and CloneSet issue, ...).

pub mod inplace;
pub mod revision;
