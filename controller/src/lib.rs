//! The classic-DRA controller: allocates ResourceClaims from `FakeClaimParameters`.
//!
//! - [`allocator`]: the pure allocation core (no I/O).
//! - [`params`]: reading a claim's and its class's parameters, with Event reasons.
//! - [`controller`]: the ResourceClaim and PodSchedulingContext reconcilers.
//! - [`metrics`], [`http`]: `/metrics`, `/healthz`, `/readyz`.

pub mod allocator;
pub mod controller;
pub mod metrics;
pub mod params;

pub use controller::{Config, run};

/// Why a reconcile failed. Each variant has a short label for `/metrics`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The user's parameters or the inventory rule the claim out; an Event says why.
    #[error("{0}")]
    Parameters(#[from] params::Problem),
    /// Nothing fits right now; retried as devices are freed.
    #[error("no node has enough free devices")]
    NoCapacity,
    /// An API call failed.
    #[error("API request failed: {0}")]
    Kube(#[source] kube::Error),
    /// Building a request failed.
    #[error("serializing a request: {0}")]
    Serialize(#[source] serde_json::Error),
    /// A bug: we built something invalid.
    #[error("internal error: {0}")]
    Internal(String),
}

/// Every value [`Error::metric_label`] gives: `/metrics` shows each at zero from the start,
/// so a dashboard or an alert on a rate sees the series before the first failure.
pub const FAILURE_REASONS: &[&str] = &[
    "ParametersNotFound",
    "WrongParametersKind",
    "InvalidParameters",
    "UnknownModel",
    "CountAboveInventory",
    "NoNodes",
    "NoCapacity",
    "Conflict",
    "ApiError",
    "Serialize",
    "Internal",
];

impl Error {
    /// The `reason` label of `fake_dra_controller_reconcile_failures_total` (one of
    /// [`FAILURE_REASONS`]).
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::Parameters(p) => p.reason(),
            Self::NoCapacity => "NoCapacity",
            Self::Kube(_) if self.is_conflict() => "Conflict",
            Self::Kube(_) => "ApiError",
            Self::Serialize(_) => "Serialize",
            Self::Internal(_) => "Internal",
        }
    }

    /// A 409 (or a failed JSON-patch test on resourceVersion): retry soon with fresh data.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Kube(kube::Error::Api(s)) if s.code == 409 || s.code == 422)
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every API call the controller makes, as `(API group, resource, verbs)`: what its RBAC
/// role must grant, no more. Kept next to the code so a test can compare it with the
/// deploy manifests.
pub const API_ACCESS: &[(&str, &str, &[&str])] = &[
    // patch: adding and removing the finalizer.
    (
        "resource.k8s.io",
        "resourceclaims",
        &["list", "watch", "patch"],
    ),
    ("resource.k8s.io", "resourceclaims/status", &["update"]),
    ("resource.k8s.io", "resourceclasses", &["list", "watch"]),
    (
        "resource.k8s.io",
        "podschedulingcontexts",
        &["list", "watch"],
    ),
    (
        "resource.k8s.io",
        "podschedulingcontexts/status",
        &["update"],
    ),
    ("", "pods", &["get"]),
    ("", "nodes", &["list", "watch"]),
    ("fake.resource.3-shake.com", "fakeclaimparameters", &["get"]),
    (
        "fake.resource.3-shake.com",
        "deviceclassparameters",
        &["get"],
    ),
    (
        "nas.fake.resource.3-shake.com",
        "nodeallocationstates",
        &["list", "watch"],
    ),
    // patch: kube's Recorder updates a repeated event's series.
    ("events.k8s.io", "events", &["create", "patch"]),
    // Only with --leader-elect (kube-lease-manager).
    ("coordination.k8s.io", "leases", &["get", "create", "patch"]),
];
