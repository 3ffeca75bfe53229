//! fake-dra's API: everything that crosses a process boundary.
//!
//! - [`params`]: the `FakeClaimParameters` and `DeviceClassParameters` CRDs users write,
//!   with the limits the controller enforces.
//! - [`nas`]: the `NodeAllocationState` CRD each kubelet plugin publishes for its node.
//! - [`fault`]: the `DeviceFault` CRD: failures and device behaviour on demand.
//! - [`handle`]: the allocation handle, the document the controller writes into a claim
//!   and the kubelet plugin reads back.
//! - [`names`]: the syntax of label keys and values, for what users spell like them.
//! - [`crdgen`]: renders the CRDs to the YAML files under `deploy/crds/`.
//!
//! Not ours, kept apart in [`upstream`]: `resource.k8s.io/v1alpha2` (Kubernetes
//! 1.27–1.30) and the Pod of every release we support, which k8s-openapi 0.29 no longer
//! ships or models differently, and node selector evaluation.
//!
//! This crate does no I/O except in [`crdgen`]'s file helpers, so it can be shared by the
//! controller, the kubelet plugin and the test emulator without pulling in a runtime.

pub mod crdgen;
pub mod fault;
pub mod handle;
pub mod names;
pub mod nas;
pub mod params;
pub mod upstream;

/// The driver name when `--driver-name` is not given; matches the original Go driver so its
/// manifests work unchanged.
pub const DEFAULT_DRIVER_NAME: &str = "fake.resource.3-shake.com";

/// API group of the parameter CRDs ([`params`]).
pub const PARAMS_GROUP: &str = "fake.resource.3-shake.com";

/// API group of [`nas::NodeAllocationState`]; a separate group so RBAC can give the kubelet
/// plugin write access to its inventory without access to user parameters.
pub const NAS_GROUP: &str = "nas.fake.resource.3-shake.com";

/// The one version all our CRDs are served at.
pub const VERSION: &str = "v1alpha1";
