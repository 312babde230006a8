//! Prometheus metrics of the workload controllers.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    pub controller: String,
    /// `success`, `error`, or `race`: the reconcile's write found the object changed (or gone)
    /// since it was read, and it is decided again on a fresh view.
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    pub controller: String,
    /// `create`, `delete`, `update_in_place`, `recreate`, `resize`.
    pub operation: String,
    /// `success` or `error`.
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SidecarSetLabels {
    pub sidecarset: String,
}

/// Handles to the controllers' metrics (cheap to clone).
#[derive(Clone)]
pub struct Metrics {
    pub reconciles: Family<ReconcileLabels, Counter>,
    pub reconcile_duration: Family<ControllerLabels, Histogram>,
    pub expectations_expired: Family<ControllerLabels, Counter>,
    pub pod_operations: Family<OperationLabels, Counter>,
    pub cached_pods: Gauge<i64, AtomicI64>,
    pub missed_injections: Family<SidecarSetLabels, Gauge>,
    /// The stall watchdog's ([`crate::driver::watchdog`]).
    pub oldest_unreconciled: Family<ControllerLabels, Gauge<f64, AtomicU64>>,
    pub unreconciled_wait: Family<ControllerLabels, Histogram>,
    pub stall_requeues: Family<ControllerLabels, Counter>,
}

impl Metrics {
    pub fn register(registry: &mut Registry) -> Arc<Self> {
        let metrics = Self {
            reconciles: Family::default(),
            reconcile_duration: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.0005, 2.0, 16))
            }),
            expectations_expired: Family::default(),
            pod_operations: Family::default(),
            cached_pods: Gauge::default(),
            missed_injections: Family::default(),
            oldest_unreconciled: Family::default(),
            unreconciled_wait: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(1.0, 2.0, 10))
            }),
            stall_requeues: Family::default(),
        };
        registry.register(
            "kruise_controller_reconciles",
            "Reconciles by controller and result (success, error, race: decided again after a write found the object changed)",
            metrics.reconciles.clone(),
        );
        registry.register(
            "kruise_controller_reconcile_duration_seconds",
            "Time spent in one reconcile",
            metrics.reconcile_duration.clone(),
        );
        registry.register(
            "kruise_controller_expectations_expired",
            "Expectations dropped because the cache never showed the write (a leak upstream would stall on)",
            metrics.expectations_expired.clone(),
        );
        registry.register(
            "kruise_controller_pod_operations",
            "Pod writes by controller, operation and result",
            metrics.pod_operations.clone(),
        );
        registry.register(
            "kruise_controller_cached_pods",
            "Pods in the shared Pod cache",
            metrics.cached_pods.clone(),
        );
        registry.register(
            "kruise_controller_pod_cache_decodes",
            "Pods decoded whole from the shared Pod cache for a controller to read",
            crate::cache::POD_DECODES.clone(),
        );
        registry.register(
            "kruise_sidecarset_missed_injection_pods",
            "Pods a SidecarSet matches that were created without its sidecars",
            metrics.missed_injections.clone(),
        );
        registry.register(
            "kruise_controller_oldest_unreconciled_change_seconds",
            "How long the controller's oldest change not reconciled yet has waited (0: none)",
            metrics.oldest_unreconciled.clone(),
        );
        registry.register(
            "kruise_controller_unreconciled_change_wait_seconds",
            "How long a change the stall watchdog saw waiting waited for its reconcile",
            metrics.unreconciled_wait.clone(),
        );
        registry.register(
            "kruise_controller_stall_requeues",
            "Objects queued again by the stall watchdog after a change waited 30 s unreconciled",
            metrics.stall_requeues.clone(),
        );
        Arc::new(metrics)
    }

    pub fn reconciled(&self, controller: &str, ok: bool, seconds: f64) {
        self.reconciles
            .get_or_create(&ReconcileLabels {
                controller: controller.into(),
                result: if ok { "success" } else { "error" }.into(),
            })
            .inc();
        self.reconcile_duration
            .get_or_create(&ControllerLabels {
                controller: controller.into(),
            })
            .observe(seconds);
    }

    /// A reconcile that lost a race ([`crate::error::Error::is_race`]).
    pub fn raced(&self, controller: &str) {
        self.reconciles
            .get_or_create(&ReconcileLabels {
                controller: controller.into(),
                result: "race".into(),
            })
            .inc();
    }

    pub fn pod_operation(&self, controller: &str, operation: &str, ok: bool) {
        self.pod_operations
            .get_or_create(&OperationLabels {
                controller: controller.into(),
                operation: operation.into(),
                result: if ok { "success" } else { "error" }.into(),
            })
            .inc();
    }

    pub fn expired(&self, controller: &str, n: usize) {
        self.expectations_expired
            .get_or_create(&ControllerLabels {
                controller: controller.into(),
            })
            .inc_by(n as u64);
    }

    fn controller_labels(controller: &str) -> ControllerLabels {
        ControllerLabels {
            controller: controller.into(),
        }
    }

    /// What a watchdog scan found ([`crate::driver::watchdog`]).
    pub fn watchdog_scanned(&self, controller: &str, oldest: f64, requeued: usize) {
        let labels = Self::controller_labels(controller);
        self.oldest_unreconciled.get_or_create(&labels).set(oldest);
        if requeued > 0 {
            self.stall_requeues
                .get_or_create(&labels)
                .inc_by(requeued as u64);
        }
    }

    /// A change the watchdog saw waiting got its reconcile after `seconds`.
    pub fn change_waited(&self, controller: &str, seconds: f64) {
        self.unreconciled_wait
            .get_or_create(&Self::controller_labels(controller))
            .observe(seconds);
    }
}
