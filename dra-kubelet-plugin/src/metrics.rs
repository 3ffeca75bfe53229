//! Prometheus metrics: prepare/unprepare counts by result and their latency, under the
//! driver's prefix. Every series whose labels are known in advance is there at zero from
//! the start, so a scrape of an idle plugin already lists them.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of the per-claim counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClaimLabels {
    /// `prepare` or `unprepare`.
    pub operation: &'static str,
    /// `success` or `error`.
    pub result: &'static str,
}

/// Labels of the per-claim error counters.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// `prepare` or `unprepare`.
    pub operation: &'static str,
    /// The kind of failure ([`crate::claim_error::ClaimError::reason`]).
    pub reason: &'static str,
}

/// Labels of the latency histograms.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    /// The rpc name, e.g. `NodePrepareResources`.
    pub method: &'static str,
}

/// The plugin's metrics.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    claims: Family<ClaimLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    latency: Family<CallLabels, Histogram>,
}

/// The calls whose latency is recorded, each listed from the start.
const METHODS: &[&str] = &[
    "NodePrepareResources",
    "NodeUnprepareResources",
    #[cfg(feature = "classic")]
    "NodePrepareResource",
    #[cfg(feature = "classic")]
    "NodeUnprepareResource",
];

impl Metrics {
    /// Registers every metric, named `<prefix>_...`.
    pub fn new(prefix: &str) -> Self {
        let mut registry = Registry::with_prefix(prefix);
        let claims = Family::<ClaimLabels, Counter>::default();
        registry.register(
            "claims",
            "Claims prepared or unprepared, by result",
            claims.clone(),
        );
        let errors = Family::<ErrorLabels, Counter>::default();
        registry.register(
            "claim_errors",
            "Claims not prepared or unprepared, by the kind of failure",
            errors.clone(),
        );
        let latency = Family::<CallLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0001, 2.0, 16))
        });
        registry.register(
            "call_duration_seconds",
            "Duration of the kubelet's DRA calls",
            latency.clone(),
        );
        for operation in ["prepare", "unprepare"] {
            for result in ["success", "error"] {
                let _ = claims.get_or_create(&ClaimLabels { operation, result });
            }
        }
        for &method in METHODS {
            let _ = latency.get_or_create(&CallLabels { method });
        }
        Self {
            registry,
            claims,
            errors,
            latency,
        }
    }

    /// Counts one claim's outcome.
    pub fn claim<T>(
        &self,
        operation: &'static str,
        outcome: &Result<T, crate::claim_error::ClaimError>,
    ) {
        let result = if outcome.is_ok() { "success" } else { "error" };
        self.claims
            .get_or_create(&ClaimLabels { operation, result })
            .inc();
        if let Err(e) = outcome {
            self.errors
                .get_or_create(&ErrorLabels {
                    operation,
                    reason: e.reason(),
                })
                .inc();
        }
    }

    /// Records a call's duration.
    pub fn observe(&self, method: &'static str, seconds: f64) {
        self.latency
            .get_or_create(&CallLabels { method })
            .observe(seconds);
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}
