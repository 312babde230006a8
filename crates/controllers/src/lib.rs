//! The workload controllers: one module per workload, each a thin loop that observes (the shared
//! Pod cache and its own watches), decides with pure functions (here and in kruise-core), and acts
//! with patches.

pub mod advancedcronjob;
pub mod broadcastjob;
pub mod cache;
pub mod claim;
pub mod cloneset;
pub mod conditions;
pub mod containerrecreaterequest;
pub mod daemonset;
pub mod driver;
pub mod ephemeraljob;
pub mod error;
pub mod events;
pub mod history;
pub mod imagepulljob;
pub mod kruise_configuration;
pub mod launchpriority;
pub mod ledger;
pub mod metrics;
pub mod nodes;
pub mod parallel;
pub mod persistentpodstate;
pub mod podcontrol;
pub mod podprobemarker;
pub mod podreadiness;
pub mod podunavailablebudget;
pub mod podworker;
pub mod predownload;
pub mod resourcedistribution;
pub mod sidecarset;
pub mod sidecarterminator;
pub mod statefulset;
pub mod status_patch;
pub mod uniteddeployment;
pub mod workloadspread;
