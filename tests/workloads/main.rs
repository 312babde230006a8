//! The workload kinds end to end, in one test binary that shares one control plane and one
//! kruise-manager: CloneSet (and its claims), Advanced StatefulSet, BroadcastJob, AdvancedCronJob, the
//! API and its webhooks, ownership, unpullable images, webhook size limits and `kubectl kruise`.
//!
//! Every test here works in its own namespace and names anything cluster-scoped after it, adds only
//! tainted nodes (so no other test's Pods land there, and the untainted fleet stays the three
//! `sim-*` nodes), and runs against the default manager. A module is one file of tests; run one
//! kind's tests with a filter on its module, e.g. `cargo test -p kruise-e2e --test workloads
//! cloneset::` (the `::` keeps `cloneset_pvc::` out).
//!
//! Tests that need a cluster of their own stay in their own binaries: those that start the manager
//! with other flags or restart it (`cloneset_failover`, `gates`, `leader`, …), add
//! untainted nodes or untaint them (`daemonset`, `uniteddeployment`), rotate the webhook certificate
//! (`manager`), or install other CRDs (`takeover`, `install`).

mod advancedcronjob;
mod api;
mod broadcastjob;
mod cloneset;
mod cloneset_pvc;
mod kubectl_kruise;
mod orphans;
mod statefulset;
mod unpullable;
mod webhook_limits;
