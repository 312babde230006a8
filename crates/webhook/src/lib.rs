//! kruise-rs webhook: the HTTPS admission (defaulting, validation) and CRD conversion server for the
//! apps.kruise.io workloads, with self-managed certificates.

pub mod admission;
pub mod certctl;
pub mod certs;
pub mod configuration;
pub mod containerrecreaterequest;
pub mod convert;
pub mod ephemeraljob;
pub mod freshness;
pub mod metrics;
pub mod patch;
pub mod persistentpodstate;
pub mod pod;
pub mod podprobemarker;
pub mod podunavailablebudget;
pub mod policy;
pub mod relatedpub;
pub mod replicaset_owners;
pub mod resourcedistribution;
pub mod server;
#[cfg(test)]
mod testreview;
pub mod workloadspread;
