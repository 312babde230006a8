//! apps.kruise.io types (v1alpha1, v1beta1), conversion, defaulting, validation, well-known keys and CRD generation. Pure: no client, no async.
//!
//! This crate is part of the workspace layout in DESIGN.md; its content arrives with the issues that
//! need it (the API issue, the in-place engine and CloneSet issue, ...).
