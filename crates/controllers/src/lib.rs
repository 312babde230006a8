//! One module per workload: observe (shared caches), plan (pure, from kruise-core), act (patches), status.
//!
//! This crate is part of the workspace layout in DESIGN.md; its content arrives with the issues that
//! need it (the API issue, the in-place engine and CloneSet issue, ...).
