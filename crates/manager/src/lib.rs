//! The kruise-manager binary: flags, leader election, shared Pod watch, controllers and webhook wiring, metrics, health endpoints.
//!
//! This crate is part of the workspace layout in DESIGN.md; its content arrives with the issues that
//! need it (the API issue, the in-place engine and CloneSet issue, ...).
