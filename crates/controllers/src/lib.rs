//! The workload controllers.
//!
//! Two halves: [`runtime`], what every kind runs on (the driver, the shared caches, the writer
//! interface, Pod control), and one module per kind (named as the kind, as in kruise-api,
//! kruise-core and kruise-webhook), each a thin loop that observes its caches, decides with pure
//! functions (in kruise-core) and acts through the writer. The runtime's modules are re-exported
//! at the crate's root, where the kinds and the other crates name them.

pub mod runtime;

pub use runtime::{
    cache, claim, conditions, disruptions, driver, error, events, history, kruise_configuration,
    ledger, metrics, nodes, parallel, placements, podcontrol, podworker, predownload, status_patch,
};

// The kinds, and the controllers of OpenKruise that own no kind of their own (container launch
// priority, Pod readiness, sidecar terminator).
pub mod advancedcronjob;
pub mod broadcastjob;
pub mod cloneset;
pub mod containerrecreaterequest;
pub mod daemonset;
pub mod ephemeraljob;
pub mod imagepulljob;
pub mod launchpriority;
pub mod persistentpodstate;
pub mod podprobemarker;
pub mod podreadiness;
pub mod podunavailablebudget;
pub mod resourcedistribution;
pub mod sidecarset;
pub mod sidecarterminator;
pub mod statefulset;
pub mod uniteddeployment;
pub mod workloadspread;
