//! Prometheus metrics, served at `/metrics`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// A label with one value: which failure, which controller, which claim state.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Label {
    /// The label's value; the key depends on the metric.
    pub reason: String,
}

/// Label for the reconcile histogram.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabel {
    /// `resourceclaim` or `podschedulingcontext`.
    pub controller: &'static str,
}

/// Label for the claims gauge.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    /// `allocated`, `pending` or `deallocating`.
    pub state: &'static str,
}

/// The `controller` label values of the reconcile histogram.
pub const CONTROLLERS: [&str; 2] = ["resourceclaim", "podschedulingcontext"];
/// The `state` label values of the claims gauge.
pub const CLAIM_STATES: [&str; 3] = ["allocated", "pending", "deallocating"];

/// Every metric of the controller.
#[derive(Debug)]
pub struct Metrics {
    /// Claims allocated (successful status writes).
    pub allocations: Counter,
    /// Claims deallocated.
    pub deallocations: Counter,
    /// Failed reconciles by reason (an [`Error::metric_label`](crate::Error::metric_label)).
    pub failures: Family<Label, Counter>,
    /// Reconcile duration in seconds.
    pub reconcile_seconds: Family<ControllerLabel, Histogram>,
    /// Our claims by state, as of the last claim reconcile.
    pub claims: Family<StateLabel, Gauge>,
    registry: Registry,
}

impl Default for Metrics {
    fn default() -> Self {
        let allocations = Counter::default();
        let deallocations = Counter::default();
        let failures = Family::<Label, Counter>::default();
        let reconcile_seconds = Family::<ControllerLabel, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0005, 2.0, 16))
        });
        let claims = Family::<StateLabel, Gauge>::default();
        let mut registry = Registry::with_prefix("fake_dra_controller");
        registry.register(
            "allocations",
            "ResourceClaims allocated",
            allocations.clone(),
        );
        registry.register(
            "deallocations",
            "ResourceClaims deallocated",
            deallocations.clone(),
        );
        registry.register(
            "reconcile_failures",
            "Failed reconciles by reason",
            failures.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Time spent in one reconcile",
            reconcile_seconds.clone(),
        );
        registry.register(
            "claims",
            "ResourceClaims of this driver by state",
            claims.clone(),
        );
        // Every series exists from the start, at zero (Prometheus' advice for labelled
        // metrics: a series that appears only on the first event breaks rate() and alerts).
        for reason in crate::FAILURE_REASONS {
            let _ = failures.get_or_create(&Label {
                reason: (*reason).to_string(),
            });
        }
        for controller in CONTROLLERS {
            let _ = reconcile_seconds.get_or_create(&ControllerLabel { controller });
        }
        for state in CLAIM_STATES {
            let _ = claims.get_or_create(&StateLabel { state });
        }
        Self {
            allocations,
            deallocations,
            failures,
            reconcile_seconds,
            claims,
            registry,
        }
    }
}

impl Metrics {
    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_series_is_there_at_zero_before_anything_happened() {
        let text = Metrics::default().encode();
        for reason in crate::FAILURE_REASONS {
            let line =
                format!("fake_dra_controller_reconcile_failures_total{{reason=\"{reason}\"}} 0");
            assert!(text.contains(&line), "no {line} in:\n{text}");
        }
        for state in CLAIM_STATES {
            let line = format!("fake_dra_controller_claims{{state=\"{state}\"}} 0");
            assert!(text.contains(&line), "no {line} in:\n{text}");
        }
        for controller in CONTROLLERS {
            let line = format!(
                "fake_dra_controller_reconcile_duration_seconds_count{{controller=\"{controller}\"}} 0"
            );
            assert!(text.contains(&line), "no {line} in:\n{text}");
        }
        assert!(
            text.contains("fake_dra_controller_allocations_total 0"),
            "{text}"
        );
    }
}
