//! The runtime every kind runs on, and nothing kind-specific: the driver (the reconcile loop, the
//! cache registry, the writer interface and its in-memory cluster), the packed Pod cache, the Pod
//! writes of the Pod-owning kinds (claims, revisions, the in-place engine, pre-download),
//! expectations' ledgers, Events, errors and metrics. A kind's module holds what only that kind
//! decides; anything two kinds need lives here.

pub mod cache;
pub mod claim;
pub mod conditions;
pub mod disruptions;
pub mod driver;
pub mod error;
pub mod events;
pub mod history;
pub mod kruise_configuration;
pub mod ledger;
pub mod metrics;
pub mod nodes;
pub mod parallel;
pub mod placements;
pub mod podcontrol;
pub mod podworker;
pub mod predownload;
pub mod status_patch;
