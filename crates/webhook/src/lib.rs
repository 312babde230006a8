//! HTTPS admission and conversion server: Pod mutation (SidecarSet injection), CR defaulting and validation, /convert, self-managed certificates.
//!
//! This crate is part of the workspace layout in DESIGN.md; its content arrives with the issues that
//! need it (the API issue, the in-place engine and CloneSet issue, ...).
