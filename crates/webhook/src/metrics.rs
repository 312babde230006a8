//! Prometheus metrics of the webhook server.

use kruise_controllers::ledger::commit::CommitMetrics;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Upper bounds of the request duration histogram: 50 µs to 6.4 s by factor 1.5 (30 buckets).
///
/// A Pod admission takes tens to hundreds of microseconds and the apiserver gives up after 5 s, so
/// the bounds span both; with factor 1.5 a quantile interpolated inside a bucket is off by at most a
/// third of its value (factor 2 left a p99 anywhere between 0.8 and 1.6 ms, which says little).
pub fn duration_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.000_05, 1.5, 30)
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// The endpoint path, e.g. `/validate-apps-kruise-io-cloneset`.
    pub path: String,
    /// `allowed`, `denied` (admission) or `converted`, `failed` (conversion).
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PathLabels {
    pub path: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FreshnessLabels {
    pub kind: String,
    /// `fresh` (caught up at the first list), `waited` (caught up after waiting), `timeout`,
    /// `error` (the list failed).
    pub result: String,
}

/// The read-your-writes check's metrics ([`crate::freshness`]); `Default` for an unregistered set.
#[derive(Clone)]
pub struct FreshnessMetrics {
    /// Consistent metadata lists sent, by policy kind (one per round, shared by the admissions
    /// waiting for it).
    pub probes: Family<KindLabels, Counter>,
    /// Checks of one kind for one admission, by result.
    pub checks: Family<FreshnessLabels, Counter>,
    /// From an admission's arrival until its cache of one kind was known caught up (or given up).
    pub wait: Family<KindLabels, Histogram>,
}

impl Default for FreshnessMetrics {
    fn default() -> Self {
        Self {
            probes: Family::default(),
            checks: Family::default(),
            wait: Family::new_with_constructor(|| Histogram::new(duration_buckets())),
        }
    }
}

impl FreshnessMetrics {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "kruise_webhook_freshness_probes",
            "Consistent metadata lists of a policy kind sent by the read-your-writes check (one per round, shared by the admissions waiting)",
            self.probes.clone(),
        );
        registry.register(
            "kruise_webhook_freshness_checks",
            "Read-your-writes checks of one policy kind for one admission, by result (fresh, waited, timeout, error)",
            self.checks.clone(),
        );
        registry.register(
            "kruise_webhook_freshness_wait_seconds",
            "Time from an admission's arrival until the policy cache was known to show every earlier write (or the check gave up)",
            self.wait.clone(),
        );
    }

    pub fn probe(&self, kind: impl std::fmt::Display) {
        self.probes
            .get_or_create(&KindLabels {
                kind: kind.to_string(),
            })
            .inc();
    }

    pub fn checked(&self, kind: impl std::fmt::Display, result: &str, seconds: f64) {
        let kind = kind.to_string();
        self.checks
            .get_or_create(&FreshnessLabels {
                kind: kind.clone(),
                result: result.into(),
            })
            .inc();
        self.wait
            .get_or_create(&KindLabels { kind })
            .observe(seconds);
    }
}

/// Handles to the webhook's metrics (cheap to clone).
#[derive(Clone)]
pub struct Metrics {
    pub requests: Family<RequestLabels, Counter>,
    pub duration: Family<PathLabels, Histogram>,
    pub cert_rotations: Counter,
    pub freshness: FreshnessMetrics,
    /// The group commit of the PodUnavailableBudgets' disruptions.
    pub budget_commit: CommitMetrics,
    /// The group commit of the WorkloadSpreads' slots (taken or given back).
    pub workloadspread_commit: CommitMetrics,
}

impl Metrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self {
            requests: Family::default(),
            duration: Family::new_with_constructor(|| Histogram::new(duration_buckets())),
            cert_rotations: Counter::default(),
            freshness: FreshnessMetrics::default(),
            budget_commit: CommitMetrics::default(),
            workloadspread_commit: CommitMetrics::default(),
        };
        metrics.freshness.register(registry);
        metrics.budget_commit.register(
            registry,
            "kruise_webhook_podunavailablebudget",
            "PodUnavailableBudget disruptions",
        );
        metrics.workloadspread_commit.register(
            registry,
            "kruise_webhook_workloadspread",
            "WorkloadSpread placements and releases",
        );
        registry.register(
            "kruise_webhook_requests",
            "Webhook requests by endpoint and result",
            metrics.requests.clone(),
        );
        registry.register(
            "kruise_webhook_request_duration_seconds",
            "Time to answer a webhook request",
            metrics.duration.clone(),
        );
        registry.register(
            "kruise_webhook_certificate_rotations",
            "Serving certificates generated by the manager",
            metrics.cert_rotations.clone(),
        );
        metrics
    }

    pub fn observe(&self, path: &str, result: &str, seconds: f64) {
        self.requests
            .get_or_create(&RequestLabels {
                path: path.into(),
                result: result.into(),
            })
            .inc();
        self.duration
            .get_or_create(&PathLabels { path: path.into() })
            .observe(seconds);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duration_buckets_span_microseconds_to_the_apiserver_timeout() {
        let bounds: Vec<f64> = duration_buckets().collect();
        assert_eq!(bounds.len(), 30);
        assert!((bounds[0] - 0.000_05).abs() < 1e-12, "{bounds:?}");
        let last = bounds[bounds.len() - 1];
        assert!(last > 5.0 && last < 10.0, "last bound {last}");
        for pair in bounds.windows(2) {
            let ratio = pair[1] / pair[0];
            assert!((ratio - 1.5).abs() < 1e-9, "{pair:?}");
        }
    }

    #[test]
    fn observations_land_in_the_exposed_histogram() {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        metrics.observe("/mutate-pod", "injected", 0.000_3);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        // Cumulative buckets: 0 below the observation, 1 from the first bound at or above it.
        let buckets: Vec<(f64, u64)> = text
            .lines()
            .filter_map(|l| l.strip_prefix("kruise_webhook_request_duration_seconds_bucket{"))
            .filter_map(|l| {
                let le = l.split("le=\"").nth(1)?.split('"').next()?;
                let count = l.rsplit(' ').next()?.parse().ok()?;
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().ok()?
                };
                Some((le, count))
            })
            .collect();
        assert_eq!(buckets.len(), 31, "{text}");
        for (le, count) in buckets {
            assert_eq!(count, u64::from(le >= 0.000_3), "le {le}: {text}");
        }
        assert!(
            text.contains(
                "kruise_webhook_requests_total{path=\"/mutate-pod\",result=\"injected\"} 1"
            ),
            "{text}"
        );
    }
}
