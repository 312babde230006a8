//! Rollout logic shared by every workload, as pure functions of a snapshot: revisions, the in-place update engine, update and scale-down ordering, int-or-percent arithmetic, Pod availability and expectations.
//!
//! This crate is part of the workspace layout in DESIGN.md; its content arrives with the issues that
//! need it (the API issue, the in-place engine and CloneSet issue, ...). Nothing here talks to the API
//! server or awaits: every function takes a snapshot (Pods, spec, `now`) and returns a decision.

pub mod pods;
pub mod rollout;
