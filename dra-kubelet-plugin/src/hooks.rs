//! The optional hook between the kubelet's calls and the driver: a place to make calls
//! fail, wait or hang, to add taints and binding conditions to the published devices,
//! and to say how healthy each device is. A driver without one gets
//! [`NoHook`]: every call proceeds, every device is healthy.
//!
//! A fault injector (faults on demand, for tests of what uses the driver) is one implementation; a
//! real driver that watches its hardware reports genuine health through
//! [`FaultHook::health`] the same way.

use std::fmt::Debug;

use futures::future::BoxFuture;
use futures::stream::BoxStream;

use crate::claim_data::ClaimRef;
use crate::dra_mode::ResourceApi;
pub use crate::model::HealthStatus;
use crate::model::{SliceDevice, TaintRules};

/// What the plugin tells a hook when structured DRA starts serving.
#[derive(Clone)]
#[non_exhaustive]
pub struct HookContext {
    /// The API client the plugin uses.
    pub client: kube::Client,
    /// The driver name.
    pub driver_name: String,
    /// This node (and its pool).
    pub node_name: String,
    /// The field manager for server-side applies (`Plugin::field_manager`).
    pub field_manager: String,
    /// The names of the node's devices in its pool.
    pub devices: Vec<String>,
    /// What the serving release accepts of a device's taints.
    pub taint_rules: TaintRules,
    /// The `resource.k8s.io` version the API server serves claims and slices through
    /// (`v1beta1` on 1.32/1.33, which serve no `v1`).
    pub resource_api: ResourceApi,
}

impl std::fmt::Debug for HookContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookContext")
            .field("driver_name", &self.driver_name)
            .field("node_name", &self.node_name)
            .field("field_manager", &self.field_manager)
            .field("devices", &self.devices)
            .field("taint_rules", &self.taint_rules)
            .field("resource_api", &self.resource_api)
            .finish_non_exhaustive()
    }
}

/// Why a hook made a call fail for a claim.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
#[non_exhaustive]
pub struct Refusal {
    /// Who refused (a fault's name), for the log.
    pub by: String,
    /// The message the kubelet gets for the claim.
    pub message: String,
}

impl Refusal {
    /// Refused by `by` (for the log), telling the kubelet `message`.
    pub fn new(by: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            by: by.into(),
            message: message.into(),
        }
    }
}

/// Hooks into the plugin's calls and publications; every method has a default that does
/// nothing. Used in structured DRA only.
///
/// A driver that watches its hardware reports health through it:
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use dra_kubelet_plugin::hook::{FaultHook, HealthStatus};
///
/// #[derive(Debug, Default)]
/// struct Watchdog {
///     failed: Arc<Mutex<Vec<String>>>,
/// }
///
/// impl FaultHook for Watchdog {
///     fn health(&self, device: &str) -> (HealthStatus, Option<String>) {
///         let failed = self.failed.lock().map(|f| f.contains(&device.to_owned())).unwrap_or(false);
///         if failed {
///             (HealthStatus::Unhealthy, Some("ECC errors over the limit".into()))
///         } else {
///             (HealthStatus::Healthy, None)
///         }
///     }
/// }
///
/// let hook = Watchdog::default();
/// hook.failed.lock().unwrap().push("gpu-1".into());
/// assert_eq!(hook.health("gpu-1").0, HealthStatus::Unhealthy);
/// assert_eq!(hook.health("gpu-0").0, HealthStatus::Healthy);
/// ```
pub trait FaultHook: Debug + Send + Sync + 'static {
    /// Called once when structured DRA starts: start what the hook watches. The tasks
    /// returned are aborted at shutdown.
    fn start(&self, context: &HookContext) -> Vec<tokio::task::JoinHandle<()>> {
        let _ = context;
        Vec::new()
    }

    /// `Err(message)` makes the registration's `GetInfo` fail with it.
    fn get_info(&self) -> Result<(), String> {
        Ok(())
    }

    /// Before a claim allocated `devices` (names in the node's pool) is prepared: may
    /// wait, hang, or refuse the claim (nothing is then prepared for it).
    fn before_prepare<'a>(
        &'a self,
        claim: &'a ClaimRef,
        devices: &'a [String],
    ) -> BoxFuture<'a, Result<(), Refusal>> {
        let _ = (claim, devices);
        Box::pin(async { Ok(()) })
    }

    /// Before a prepared claim is unprepared; a refusal leaves it prepared.
    fn before_unprepare<'a>(
        &'a self,
        claim: &'a ClaimRef,
        devices: &'a [String],
    ) -> BoxFuture<'a, Result<(), Refusal>> {
        let _ = (claim, devices);
        Box::pin(async { Ok(()) })
    }

    /// The node's devices as they are published: the profile's, with what the hook adds
    /// (taints, within `taint_rules`; binding conditions). Taints the rules refuse are
    /// dropped after the overlay anyway; a hook says why where its user looks.
    fn overlay(&self, devices: Vec<SliceDevice>, taint_rules: TaintRules) -> Vec<SliceDevice> {
        let _ = taint_rules;
        devices
    }

    /// The health of `device` and why, for the kubelet's health stream.
    fn health(&self, device: &str) -> (HealthStatus, Option<String>) {
        let _ = device;
        (HealthStatus::Healthy, None)
    }

    /// Yields whenever what [`FaultHook::overlay`], [`FaultHook::health`] or
    /// [`FaultHook::get_info`] say may have changed; the plugin then publishes again.
    /// Never yields by default.
    fn changes(&self) -> BoxStream<'static, ()> {
        Box::pin(futures::stream::pending())
    }
}

/// The hook of a driver without one.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHook;

impl FaultHook for NoHook {}
