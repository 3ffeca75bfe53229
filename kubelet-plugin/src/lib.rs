//! fake-dra's kubelet plugin: the [`dra_kubelet_plugin`] library running fake-dra's device
//! profiles, with `DeviceFault`s as its fault hook, the NodeAllocationState for classic
//! DRA, and fleet mode.
//!
//! - profiles: [`fake`] (the fake device), [`gpu`] (GPU-like devices), [`nvidia`]
//!   (NVIDIA GPUs as NVIDIA's DRA driver publishes them), listed in [`PROFILES`] and
//!   chosen per node by the [`registry`] from the flags or an [`inventory`] file; what
//!   more than one of them uses is in [`shared`];
//! - [`faults`]: `DeviceFault`s, as the library's fault hook ([`faults::hook`]);
//! - [`classic`]: the NodeAllocationState publisher (classic DRA);
//! - [`fleet`]: the slices of many simulated nodes from one process;
//! - `main.rs` parses flags and runs the library with them.

pub mod classic;
pub mod fake;
pub mod faults;
pub mod fleet;
pub mod gpu;
pub mod inventory;
pub mod nvidia;
pub mod registry;
pub mod shared;

/// The device profiles, in `--profile`'s order. A new profile is its module and a line
/// here (docs/write-your-own-driver.md).
pub const PROFILES: &[&registry::Registration] = &[
    &fake::registration::REGISTRATION,
    &gpu::registration::REGISTRATION,
    &nvidia::registration::REGISTRATION,
];

/// The registry of [`PROFILES`].
pub fn registry() -> Result<registry::Registry, registry::RegistryError> {
    registry::Registry::new(PROFILES)
}

/// The checkpoint's `apiVersion`, as every release wrote it.
pub const CHECKPOINT_API_VERSION: &str = "fake.resource.3-shake.com/v1alpha1";
/// The checkpoint's `kind`.
pub const CHECKPOINT_KIND: &str = "KubeletPluginCheckpoint";
/// What every metric's name starts with.
pub const METRICS_PREFIX: &str = "fake_dra_kubelet_plugin";

/// The Kubernetes API access the plugin needs in classic mode: (API group, resource,
/// verbs). The RBAC manifests grant exactly this; a test compares them.
pub const API_ACCESS_CLASSIC: &[(&str, &str, &[&str])] = &[
    (
        fake_dra_api::NAS_GROUP,
        "nodeallocationstates",
        &["get", "create", "update"],
    ),
    (
        fake_dra_api::NAS_GROUP,
        "nodeallocationstates/status",
        &["get", "update"],
    ),
    ("", "nodes", &["get"]),
];

/// The classic table under its first name.
pub const API_ACCESS: &[(&str, &str, &[&str])] = API_ACCESS_CLASSIC;

/// The Kubernetes API access the plugin needs in structured mode: what the library needs
/// ([`dra_kubelet_plugin::API_ACCESS`]: its node's ResourceSlices, the claims it
/// prepares, its Node), and for the `DeviceFault`s: the claims listed and watched
/// (writing `status.devices` of its own devices while a fault asks for binding or device
/// status) and the faults (watched, this node's entry of their status applied).
pub const API_ACCESS_STRUCTURED: &[(&str, &str, &[&str])] = &[
    (
        "resource.k8s.io",
        "resourceslices",
        &["list", "watch", "create", "update", "delete"],
    ),
    (
        "resource.k8s.io",
        "resourceclaims",
        &["get", "list", "watch"],
    ),
    ("resource.k8s.io", "resourceclaims/status", &["patch"]),
    // Kubernetes 1.36+ (DRAResourceClaimGranularStatusAuthorization): a driver changing
    // status.devices needs this synthetic permission, named after the driver;
    // `associated-node:` for a plugin on the node the claim is allocated on.
    (
        "resource.k8s.io",
        "resourceclaims/driver",
        &["associated-node:patch"],
    ),
    ("", "nodes", &["get"]),
    (
        fake_dra_api::PARAMS_GROUP,
        "devicefaults",
        &["list", "watch"],
    ),
    (
        fake_dra_api::PARAMS_GROUP,
        "devicefaults/status",
        &["patch"],
    ),
    // DeviceFault taints `via: Rule` (Kubernetes 1.37+).
    (
        "resource.k8s.io",
        "devicetaintrules",
        &["list", "create", "patch", "delete"],
    ),
];

/// The Kubernetes API access of fleet mode (`fake-dra-kubelet-plugin fleet`): the nodes
/// it creates (Ready status, heartbeat Leases in `kube-node-lease`) and follows, every
/// node's ResourceSlices, and what DeviceFaults ask of claims, as a controller that is
/// not on the claims' nodes (`arbitrary-node:`). The RBAC of deploy/fleet grants exactly
/// this; a test compares them.
pub const API_ACCESS_FLEET: &[(&str, &str, &[&str])] = &[
    ("", "nodes", &["get", "list", "watch", "create", "delete"]),
    ("", "nodes/status", &["patch"]),
    // delete: the Leases of nodes an earlier, larger fleet left.
    (
        "coordination.k8s.io",
        "leases",
        &["create", "patch", "delete"],
    ),
    (
        "resource.k8s.io",
        "resourceslices",
        &["list", "watch", "create", "update", "delete"],
    ),
    ("resource.k8s.io", "resourceclaims", &["list", "watch"]),
    ("resource.k8s.io", "resourceclaims/status", &["patch"]),
    (
        "resource.k8s.io",
        "resourceclaims/driver",
        &["arbitrary-node:patch"],
    ),
    (
        fake_dra_api::PARAMS_GROUP,
        "devicefaults",
        &["list", "watch"],
    ),
    (
        fake_dra_api::PARAMS_GROUP,
        "devicefaults/status",
        &["patch"],
    ),
    // DeviceFault taints `via: Rule` (Kubernetes 1.37+).
    (
        "resource.k8s.io",
        "devicetaintrules",
        &["list", "create", "patch", "delete"],
    ),
];
