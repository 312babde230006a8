//! apps.kruise.io API for kruise-rs: the six workloads in v1alpha1 and v1beta1 with OpenKruise's JSON
//! names, conversion between the versions, defaulting, validation with field-named errors, well-known keys
//! and CRD generation. Pure: no client, no async.

// kube's CustomResource derive takes one `printcolumn(...)` attribute per column; clippy reads the
// repeated keys inside them as duplicated attributes.
#![allow(clippy::duplicated_attributes)]

pub mod advancedcronjob;
pub mod broadcastjob;
pub mod cloneset;
pub mod containerrecreaterequest;
pub mod conversion;
pub mod crd;
pub mod daemonset;
pub mod ephemeraljob;
pub mod field;
pub mod gojson;
pub mod imagepulljob;
pub mod intstr;
pub mod keys;
pub mod kinds;
pub mod persistentpodstate;
pub mod podprobemarker;
pub mod podtemplate;
pub mod policy;
pub mod pub_types;
pub mod quantity;
pub mod resourcedistribution;
pub mod schema;
pub mod sidecarset;
pub mod statefulset;
#[cfg(test)]
mod testutil;
pub mod uniteddeployment;
pub mod validation;
pub mod workloadspread;

pub use field::{FieldError, Path};
pub use kinds::{Kind, KindApi};
