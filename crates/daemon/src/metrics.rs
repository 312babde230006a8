//! The daemon's Prometheus metrics.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RuntimeLabels {
    pub runtime: String,
    pub version: String,
    pub endpoint: String,
}

pub struct Metrics {
    pub registry: Registry,
    syncs: Family<ResultLabel, Counter>,
    sync_seconds: Histogram,
    recreated: Counter,
    containermeta_syncs: Family<ResultLabel, Counter>,
    containermeta_restarted: Counter,
    pub runtime_up: Gauge,
    pub runtime_info: Family<RuntimeLabels, Gauge>,
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("kruise_daemon");
        let syncs = Family::<ResultLabel, Counter>::default();
        registry.register(
            "crr_syncs",
            "ContainerRecreateRequest syncs of a Pod, by result",
            syncs.clone(),
        );
        let sync_seconds = Histogram::new(exponential_buckets(0.005, 2.0, 14));
        registry.register(
            "crr_sync_duration_seconds",
            "How long one ContainerRecreateRequest sync took (preStop and stop included)",
            sync_seconds.clone(),
        );
        let recreated = Counter::default();
        registry.register(
            "containers_recreated",
            "Containers stopped for a ContainerRecreateRequest",
            recreated.clone(),
        );
        let containermeta_syncs = Family::<ResultLabel, Counter>::default();
        registry.register(
            "containermeta_syncs",
            "Container meta reports of a Pod (runtime-containers-meta), by result",
            containermeta_syncs.clone(),
        );
        let containermeta_restarted = Counter::default();
        registry.register(
            "containermeta_containers_restarted",
            "Containers stopped because their env from Pod metadata changed",
            containermeta_restarted.clone(),
        );
        let runtime_up = Gauge::default();
        registry.register(
            "runtime_up",
            "1 while the container runtime answers over the CRI",
            runtime_up.clone(),
        );
        let runtime_info = Family::<RuntimeLabels, Gauge>::default();
        registry.register(
            "runtime_info",
            "The container runtime the daemon talks to",
            runtime_info.clone(),
        );
        Self {
            registry,
            syncs,
            sync_seconds,
            recreated,
            containermeta_syncs,
            containermeta_restarted,
            runtime_up,
            runtime_info,
        }
    }

    pub fn sync(&self, result: &str, took: Duration) {
        self.syncs
            .get_or_create(&ResultLabel {
                result: result.to_owned(),
            })
            .inc();
        self.sync_seconds.observe(took.as_secs_f64());
    }

    pub fn recreated(&self) {
        self.recreated.inc();
    }

    pub fn containermeta_sync(&self, result: &str) {
        self.containermeta_syncs
            .get_or_create(&ResultLabel {
                result: result.to_owned(),
            })
            .inc();
    }

    pub fn containermeta_restarted(&self) {
        self.containermeta_restarted.inc();
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
