//! A library for Kubernetes Dynamic Resource Allocation (DRA) kubelet plugins: the part
//! of a DRA driver that runs on every node, with everything but the device generic.
//!
//! A driver implements [`DeviceProfile`] — what the node has, what preparing a claim
//! means, what containers see, pure; and, where its devices need it, the async device
//! work of preparing one ([`DeviceWork`]), their health, their changes and what it says of
//! them in the claim's status — and runs it with [`Plugin`]:
//!
//! ```no_run
//! # async fn example<P: dra_kubelet_plugin::DeviceProfile>(profile: P) -> Result<(), Box<dyn std::error::Error>> {
//! let client = kube::Client::try_default().await?;
//! dra_kubelet_plugin::Plugin::new("gpu.example.com", "node-1", client)
//!     .run(profile, dra_kubelet_plugin::shutdown_signal())
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! The plugin registers with the kubelet and serves the DRA gRPC services of every
//! version a kubelet may speak (`dra.v1.DRAPlugin`, `dra.v1beta1.DRAPlugin`, the device
//! health streams; with the `classic` feature the classic `v1alpha2`/`v1alpha3` node
//! services), under whatever `:authority` the kubelet sends. It reads each claim's
//! allocation, decodes and checks the driver's opaque configs ([`OpaqueConfig`]), keeps
//! a crash-safe checkpoint (two-phase around device work, rolled back after a failure or
//! a crash), writes one CDI spec per claim ([`cdi`]), publishes the node's ResourceSlices
//! and keeps them as the devices change, reports device health (and taints), writes the
//! claims' device status, runs two instances side by side for a rolling update, serves
//! `/healthz`, `/readyz` and `/metrics`, and shuts down gracefully. A [`FaultHook`] may
//! delay or refuse calls, taint devices and report them unhealthy, on top.
//!
//! # The public surface
//!
//! Everything public is listed in this file: the items at the root, and the modules
//! below, each re-exporting what a driver names. The modules that implement them are
//! private and layered (a module imports only from layers below its own; a unit test,
//! `layers::no_module_imports_from_a_layer_above`, keeps it so):
//!
//! | layer | modules | what |
//! | --- | --- | --- |
//! | 0 | `fsutil`, `instance`, `transport` | crash-safe files; per-instance sockets and the directory lock; guarded accept loops, `/healthz` |
//! | 1 | `quantity`, `model`, `claim_data`, `device_status`, `dra_mode` | the data model: devices, claims, what a driver says of a claim's devices, quantities, DRA generations |
//! | 2 | `cdi_spec`, `opaque` | CDI specs and edits; opaque configs |
//! | 3 | `profile`, `hooks`, `classic_inventory` | what a driver implements |
//! | 4 | `claim_error`, `allocation`, `claim_reader` | a claim read and judged |
//! | 5 | `checkpoint`, `plan`, `state` | the prepared claims and their files |
//! | 6 | `pool`, `slice_controller`, `claim_status` | the node's ResourceSlices; claims' device status |
//! | 7 | `metrics`, `grpc` | the kubelet's gRPC services |
//! | 8 | `serve` | running it all |
//! | 9 | `builder` | [`Plugin`] |
//!
//! # Features
//!
//! - `classic`: classic DRA (Kubernetes 1.27–1.30): the `v1alpha2`/`v1alpha3` node
//!   services, `DeviceProfile::prepare_handle`, and the `classic` module for the node inventory
//!   the driver's controller allocates from.
//! - `fleet`: [`slices`] gains the packing and publishing of any node's pool (a node
//!   simulator publishing the slices of many nodes from one process).
//! - `test-crash-points`: `Plugin::crash_point`, to abort at a named point of prepare or
//!   unprepare (crash tests).
//!
//! Features add items; no type of an always-present signature is behind one.
//!
//! The `dra-kubelet-plugin-testing` crate drives a plugin as a kubelet does, in a
//! driver's own tests.

#![warn(missing_docs)]

// Layer 0.
mod fsutil;
mod instance;
mod transport;
// Layer 1.
mod claim_data;
mod device_status;
mod dra_mode;
mod driver_name;
mod model;
mod quantity;
// Layer 2.
mod cdi_spec;
mod opaque;
// Layer 3.
#[cfg(feature = "classic")]
mod classic_inventory;
mod hooks;
mod profile;
#[cfg(test)]
mod testing;
// Layer 4.
mod allocation;
mod claim_error;
mod claim_reader;
// Layer 5.
mod checkpoint;
mod plan;
mod state;
// Layer 6.
mod claim_status;
mod device_metadata;
mod pool;
mod slice_controller;
// Layer 7.
mod grpc;
mod metrics;
// Layer 8.
mod serve;
// Layer 9.
mod builder;

#[cfg(test)]
mod layers;

pub use builder::{
    API_ACCESS, DEFAULT_DEVICE_WORK_TIMEOUT, Plugin, STATUS_API_ACCESS, shutdown_signal,
};
pub use checkpoint::CheckpointError;
pub use claim_data::ProfileError;
pub use dra_mode::ModeFlag;
pub use driver_name::DriverNameError;
pub use hooks::{FaultHook, NoHook};
pub use opaque::{FieldError, NoConfig, OpaqueConfig};
pub use profile::{DeviceProfile, DeviceWork};
pub use quantity::Quantity;
pub use serve::{CHECKPOINT_FILE, DRA_SOCKET, Error};
#[cfg(feature = "test-crash-points")]
pub use state::CrashPoint;
pub use state::StartError;
pub use state::{STATE_DIR, claim_state_dir};

/// What a node publishes about its devices: a version-neutral ResourceSlice device and
/// its parts, and the rules of the serving release.
pub mod device {
    pub use crate::model::{
        Attribute, BindingConditions, Capacity, CounterConsumption, CounterLayout, CounterSet,
        DeviceTaint, HealthStatus, RequestPolicy, SliceDevice, SliceSplit, TaintEffect, TaintRules,
        ValidRange,
    };
    pub use crate::quantity::{Quantity, QuantityError};
}

/// A claim as the kubelet names it and as the scheduler allocated it, and what can go
/// wrong with one.
pub mod claim {
    pub use crate::allocation::allocation_of;
    pub use crate::claim_data::{
        AllocatedDevice, COMMON_DEVICE, ClaimRef, ClaimUid, ConfigEntry, ConfigSource,
        DriverAllocation, MAX_CLAIM_UID_LEN, ProfileError, UidError,
    };
    pub use crate::claim_error::ClaimError;
    pub use crate::device_metadata::{CONTAINER_DIR, METADATA_DIR, MetadataVersion};
    pub use crate::device_status::{
        ConditionStatus, DeviceCondition, DeviceStatus, MAX_CONDITIONS, MAX_DATA_BYTES,
        MAX_HARDWARE_ADDRESS, MAX_INTERFACE_NAME, MAX_IPS, NetworkData, StatusError,
    };
}

/// Typed opaque configs: the `opaque.parameters` of a claim's (or its class's) config
/// entries, decoded into the driver's own type and checked before the profile sees them.
pub mod config {
    pub use crate::opaque::{FieldError, MAX_PARAMETERS_BYTES, NoConfig, OpaqueConfig, decode};
}

/// CDI specs: the devices a profile gives a claim and their edits, checked as runtimes
/// check them.
pub mod cdi {
    pub use crate::cdi_spec::{
        CdiKind, ContainerEdits, Device, DeviceNode, DriverNameTooLongForClassic, EditError, Hook,
        KindError, Mount, Spec, SpecError, check_classic_annotation_key, claim_spec, common_spec,
        min_version,
    };
}

/// The optional hook between the kubelet's calls and the driver.
pub mod hook {
    pub use crate::hooks::{FaultHook, HealthStatus, HookContext, NoHook, Refusal};
}

/// Which DRA generation a plugin speaks, from the `resource.k8s.io` versions the API
/// server serves.
pub mod mode {
    pub use crate::dra_mode::{Mode, ModeError, ModeFlag, ResourceApi, choose};
}

/// The node's ResourceSlices: why a pool cannot be published, and with the `fleet`
/// feature, the packing and publishing of any node's pool.
pub mod slices {
    pub use crate::pool::PackError;
    #[cfg(feature = "fleet")]
    pub use crate::pool::{
        Desired, Existing, MAX_ATTRIBUTES_AND_CAPACITIES, PublishedSlice, SliceContent, SlicePlan,
        dropped_features, from_v1, from_v1beta1, is_ours, pack, plan, to_v1, to_v1beta1,
    };
    #[cfg(feature = "fleet")]
    pub use crate::slice_controller::{
        Accepted, PoolController, PoolScope, PoolStats, PoolWriter, ReconcileError, Reconciled,
        counter_layout, node_owner, node_slices_selector,
    };
}

/// Classic DRA (feature `classic`): the node inventory a classic controller allocates
/// from.
#[cfg(feature = "classic")]
pub mod classic {
    pub use crate::classic_inventory::{ClassicInventory, PreparedClaim, PreparedClaims};
}

/// What the plugin serves its sockets and its HTTP port with: accept loops no client can
/// take down, and the `/healthz` `/readyz` `/metrics` endpoints. Public so that a
/// driver's own servers share them.
pub mod net {
    pub use crate::transport::{conn, health};
}
