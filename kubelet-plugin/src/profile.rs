//! The device seam: what a driver's devices are, behind one trait, so the plumbing —
//! registration, the gRPC services of every version, the checkpoint, crash-safe files,
//! the ResourceSlice and NodeAllocationState publishers — never knows what it prepares.
//!
//! A profile answers four questions, all without I/O:
//!
//! 1. **What does the node have?** [`DeviceProfile::slice_devices`] (structured DRA) and
//!    [`DeviceProfile::node_allocation_state`] (classic DRA, optional).
//! 2. **What does preparing this claim mean?** From the scheduler's allocation and the
//!    opaque configs ([`DeviceProfile::prepare_allocation`]) or from a classic allocation
//!    handle ([`DeviceProfile::prepare_handle`]), the profile's
//!    [`DeviceProfile::Prepared`] data — all the checkpoint keeps of the claim.
//! 3. **Which devices does it hold?** [`DeviceProfile::held_devices`]: the plumbing never
//!    lets two claims hold one.
//! 4. **What do containers see?** [`DeviceProfile::cdi_devices`] turns prepared data into
//!    CDI devices, deterministically (a retry or a restart writes the same spec), and says
//!    which of them a container gets for the whole claim or for one allocated device.
//!
//! `crate::fake` is the fake device; docs/write-your-own-driver.md writes another.

use std::collections::BTreeMap;
use std::fmt::Debug;

use fake_dra_api::nas::NodeAllocationStateSpec;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::cdi::{ContainerEdits, Device};
use crate::claim::{ClaimRef, ClaimUid};

/// A device attribute value (one of the API's kinds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attribute {
    /// `int`.
    Int(i64),
    /// `string`.
    String(String),
    /// `version` (semver).
    Version(String),
    /// `bool`.
    Bool(bool),
}

/// A device as the node's ResourceSlice lists it, whichever API version publishes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SliceDevice {
    /// A DNS label, unique in the node's pool.
    pub name: String,
    /// Unqualified names: they are in the driver's domain.
    pub attributes: BTreeMap<String, Attribute>,
}

/// One `status.allocation.devices.results[]` entry of this driver in this node's pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocatedDevice {
    /// The request (or `request/subrequest`) it was allocated for.
    pub request: String,
    /// The device name in the pool (a [`SliceDevice::name`]).
    pub device: String,
}

/// Where an opaque config entry came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ConfigSource {
    /// The DeviceClass.
    FromClass,
    /// The claim.
    FromClaim,
}

/// One `status.allocation.devices.config[]` entry with opaque config for this driver.
#[derive(Debug, Clone, PartialEq)]
pub struct OpaqueConfig {
    /// Where it came from; anything but `FromClass` counts as the claim's.
    pub source: ConfigSource,
    /// The requests it applies to; `None` means all.
    pub requests: Option<Vec<String>>,
    /// `opaque.parameters`.
    pub parameters: serde_json::Value,
    /// Its index in `status.allocation.devices.config`, for error messages.
    pub index: usize,
}

/// What the scheduler allocated a claim from this driver on this node.
#[derive(Debug, Clone, PartialEq)]
pub struct DriverAllocation {
    /// This driver's results in this node's pool, in the allocation's order (never empty).
    pub devices: Vec<AllocatedDevice>,
    /// This driver's opaque configs, class configs first (each source in the API's order).
    pub configs: Vec<OpaqueConfig>,
}

impl OpaqueConfig {
    /// Whether it applies to `request` (a `request/subrequest` result is named by its
    /// request too).
    pub fn applies_to(&self, request: &str) -> bool {
        let base = request.split('/').next().unwrap_or(request);
        self.requests
            .as_deref()
            .is_none_or(|rs| rs.iter().any(|r| r == request || r == base))
    }
}

/// Why a profile refused a claim: a short label for the metrics and a message for the
/// kubelet (the plumbing prefixes the claim).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ProfileError {
    /// A metrics label, e.g. `bad_parameters`.
    pub reason: &'static str,
    /// What is wrong, naming the field and the limit.
    pub message: String,
}

impl ProfileError {
    /// An error labelled `reason`.
    pub fn new(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
        }
    }
}

/// What a DRA driver's devices are. See the module docs.
pub trait DeviceProfile: Debug + Send + Sync + 'static {
    /// What the checkpoint keeps of a prepared claim: only what cannot be recomputed.
    /// Serialized next to the claim's namespace and name, so its fields must not be
    /// called `namespace` or `name`.
    type Prepared: Clone + PartialEq + Debug + Serialize + DeserializeOwned + Send + Sync + 'static;

    /// The CDI class of the devices: one word (`k8s.<driver>/<class>=<device>`).
    fn cdi_class(&self) -> &str;

    /// The devices the node publishes in its ResourceSlice.
    fn slice_devices(&self) -> Vec<SliceDevice>;

    /// Classic DRA: the node's inventory for its NodeAllocationState; `None` when the
    /// profile does not do classic DRA.
    fn node_allocation_state(&self) -> Option<NodeAllocationStateSpec> {
        None
    }

    /// Classic DRA: what preparing `claim` with this allocation handle (written by the
    /// driver's controller) means.
    fn prepare_handle(
        &self,
        claim: &ClaimRef,
        handle: &str,
    ) -> Result<Self::Prepared, ProfileError> {
        let _ = (claim, handle);
        Err(ProfileError::new(
            "classic_unsupported",
            "this driver does not do classic DRA",
        ))
    }

    /// Structured DRA: what preparing `claim` with these allocated devices and configs
    /// means.
    fn prepare_allocation(
        &self,
        claim: &ClaimRef,
        allocation: &DriverAllocation,
    ) -> Result<Self::Prepared, ProfileError>;

    /// The node devices a prepared claim holds; no two claims ever hold one.
    fn held_devices(&self, prepared: &Self::Prepared) -> Vec<String>;

    /// Checks prepared data read back from the checkpoint against the limits a request
    /// would have been held to.
    fn check(&self, prepared: &Self::Prepared) -> Result<(), ProfileError>;

    /// The edits every container using any claim gets (the node-wide `common` device).
    fn common_edits(&self) -> ContainerEdits;

    /// The claim's CDI devices. Every name must be the claim uid or start with
    /// `<uid>:`, so it never meets another claim's; the same input always gives the same
    /// devices.
    fn cdi_devices(&self, uid: &ClaimUid, prepared: &Self::Prepared) -> Vec<Device>;

    /// The names (of [`DeviceProfile::cdi_devices`]) a container using the whole claim
    /// gets, as a classic kubelet injects them.
    fn claim_cdi_devices(&self, uid: &ClaimUid, prepared: &Self::Prepared) -> Vec<String>;

    /// The names a structured kubelet injects for one allocated device (a
    /// [`SliceDevice::name`]); `None` if the claim does not hold it.
    fn device_cdi_devices(
        &self,
        uid: &ClaimUid,
        prepared: &Self::Prepared,
        device: &str,
    ) -> Option<Vec<String>>;
}
