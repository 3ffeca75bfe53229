//! A library for Kubernetes Dynamic Resource Allocation (DRA) kubelet plugins: the part
//! of a DRA driver that runs on every node, with everything but the device generic.
//!
//! A driver implements [`DeviceProfile`] — what the node has, what preparing a claim
//! means, what containers see — with no I/O, and runs it with [`Plugin`]:
//!
//! ```no_run
//! # async fn example<P: dra_kubelet_plugin::DeviceProfile>(profile: P) -> Result<(), Box<dyn std::error::Error>> {
//! let client = kube::Client::try_default().await?;
//! dra_kubelet_plugin::Plugin::new("gpu.example.com", "node-1", client)
//!     .run(profile, async { let _ = tokio::signal::ctrl_c().await; })
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! The plugin registers with the kubelet and serves the DRA gRPC services of every
//! version a kubelet may speak (`dra.v1.DRAPlugin`, `dra.v1beta1.DRAPlugin`, the device
//! health streams; with the `classic` feature the classic `v1alpha2`/`v1alpha3` node
//! services), under whatever `:authority` the kubelet sends. It reads each claim's
//! allocation, decodes and checks the driver's opaque configs ([`OpaqueConfig`]), keeps
//! a crash-safe checkpoint, writes one CDI spec per claim ([`cdi`]), publishes the
//! node's ResourceSlices and keeps them there, serves `/healthz`, `/readyz` and
//! `/metrics`, and shuts down gracefully. A [`FaultHook`] may delay or refuse calls,
//! taint devices and report their health.
//!
//! docs/write-your-own-driver.md walks through an out-of-tree driver
//! (`examples/fpga-driver`).

#![warn(missing_docs)]

pub mod cdi;
pub mod claim;
#[cfg(feature = "classic")]
pub mod classic;
pub mod config;
pub mod hook;
pub mod profile;
pub mod quantity;

// What publishes the ResourceSlices of pools of other nodes too (fake-dra's fleet mode,
// a node simulator): public with the `fleet` feature only.
#[cfg(feature = "fleet")]
pub mod mode;
#[cfg(not(feature = "fleet"))]
mod mode;
#[cfg(feature = "fleet")]
pub mod publish_slices;
#[cfg(not(feature = "fleet"))]
mod publish_slices;
#[cfg(feature = "fleet")]
pub mod slices;
#[cfg(not(feature = "fleet"))]
mod slices;

mod allocation;
mod checkpoint;
mod claim_reader;
mod driver;
mod fsutil;
mod grpc;
mod metrics;
mod plan;
mod plugin;
mod serve;
#[cfg(test)]
mod testing;

pub use config::{FieldError, NoConfig, OpaqueConfig};
#[cfg(feature = "test-crash-points")]
pub use driver::CrashPoint;
pub use driver::StartError;
#[cfg(feature = "classic")]
pub use driver::{PreparedClaim, PreparedClaims};
pub use hook::{FaultHook, HealthStatus, HookContext, NoHook, Refusal};
pub use mode::ModeFlag;
pub use plugin::{API_ACCESS, CHECKPOINT_FILE, DRA_SOCKET, Error, Plugin, shutdown_signal};
pub use profile::{DeviceProfile, ProfileError};
