//! The device seam: what a driver's devices are, behind one trait, so the plumbing —
//! registration, the gRPC services of every version, the checkpoint, crash-safe files,
//! the ResourceSlice and NodeAllocationState publishers — never knows what it prepares.
//!
//! A profile answers four questions, all without I/O:
//!
//! 1. **What does the node have?** [`DeviceProfile::slice_devices`] and
//!    [`DeviceProfile::counter_sets`].
//! 2. **What does preparing this claim mean?** From the scheduler's allocation and the
//!    opaque configs ([`DeviceProfile::prepare_allocation`]) or, with the `classic`
//!    feature, from a classic allocation handle (`DeviceProfile::prepare_handle`), the
//!    profile's
//!    [`DeviceProfile::Prepared`] data — all the checkpoint keeps of the claim.
//! 3. **Which devices does it hold?** [`DeviceProfile::held_devices`]: the plumbing never
//!    lets two claims hold one.
//! 4. **What do containers see?** [`DeviceProfile::cdi_devices`] turns prepared data into
//!    CDI devices, deterministically (a retry or a restart writes the same spec), and says
//!    which of them a container gets for the whole claim or for one allocated device.
//!
//! docs/write-your-own-driver.md writes one (the example FPGA driver).

use std::collections::BTreeMap;
use std::fmt::Debug;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::config::{ConfigEntry, OpaqueConfig};

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

/// A quantity as a profile gives it (`80Gi`): compared by value, so the API server's
/// canonical spelling of the same amount is the same quantity.
#[derive(Debug, Clone, Default)]
pub struct Quantity(pub String);

impl Quantity {
    /// The parsed value; `None` if it is not a quantity (the API server would refuse it).
    pub fn value(&self) -> Option<crate::quantity::Quantity> {
        self.0.parse().ok()
    }
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        match (self.value(), other.value()) {
            (Some(a), Some(b)) => a == b,
            _ => self.0 == other.0,
        }
    }
}

impl Eq for Quantity {}

impl<S: Into<String>> From<S> for Quantity {
    fn from(s: S) -> Self {
        Self(s.into())
    }
}

/// `capacity.<name>.requestPolicy` of a device that allows multiple allocations: what a
/// claim may take of it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestPolicy {
    /// `default`: taken when the request names no amount.
    pub default: Option<Quantity>,
    /// `validValues`, ascending.
    pub valid_values: Vec<Quantity>,
    /// `validRange`.
    pub valid_range: Option<ValidRange>,
}

/// `validRange` of a [`RequestPolicy`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ValidRange {
    /// `min`.
    pub min: Quantity,
    /// `max`.
    pub max: Option<Quantity>,
    /// `step`.
    pub step: Option<Quantity>,
}

/// One `capacity` entry of a device.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Capacity {
    /// `value`.
    pub value: Quantity,
    /// `requestPolicy`; only on devices that allow multiple allocations.
    pub request_policy: Option<RequestPolicy>,
}

impl From<&str> for Capacity {
    fn from(value: &str) -> Self {
        Self {
            value: value.into(),
            request_policy: None,
        }
    }
}

/// A `sharedCounters` entry: amounts that the devices consuming from it share, so the
/// scheduler never allocates overlapping partitions of one physical device.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CounterSet {
    /// A DNS label, unique in the pool.
    pub name: String,
    /// Counter name to amount.
    pub counters: BTreeMap<String, Quantity>,
}

/// A `consumesCounters` entry of a device.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CounterConsumption {
    /// The [`CounterSet::name`] it draws from.
    pub counter_set: String,
    /// Counter name to amount.
    pub counters: BTreeMap<String, Quantity>,
}

/// The effect of a device taint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TaintEffect {
    /// `NoSchedule`: no new allocation without a toleration.
    NoSchedule,
    /// `NoExecute`: also evicts the pods of claims allocated the device.
    NoExecute,
    /// `None` (1.35+): informational.
    None,
}

impl TaintEffect {
    /// The API's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoSchedule => "NoSchedule",
            Self::NoExecute => "NoExecute",
            Self::None => "None",
        }
    }

    /// The effect the API spells `s`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "NoSchedule" => Some(Self::NoSchedule),
            "NoExecute" => Some(Self::NoExecute),
            "None" => Some(Self::None),
            _ => None,
        }
    }
}

/// A `taints` entry of a device (`timeAdded` is the API server's).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DeviceTaint {
    /// A qualified name.
    pub key: String,
    /// Its value, if any.
    pub value: Option<String>,
    /// What it does.
    pub effect: TaintEffect,
}

/// `bindingConditions`, `bindingFailureConditions` and `bindsToNode` of a device: the
/// scheduler binds a pod only once the driver reports the conditions in the claim's
/// `status.devices`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BindingConditions {
    /// Condition types that must all be `True` before binding.
    pub conditions: Vec<String>,
    /// Condition types of which any `True` fails the binding.
    pub failure_conditions: Vec<String>,
    /// `bindsToNode`: the allocation is limited to the node picked.
    pub binds_to_node: bool,
}

/// A device as the node's ResourceSlice lists it, whichever API version publishes it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SliceDevice {
    /// A DNS label, unique in the node's pool.
    pub name: String,
    /// Unqualified names are in the driver's domain; `resource.kubernetes.io/...` are
    /// the standard ones.
    pub attributes: BTreeMap<String, Attribute>,
    /// `capacity`.
    pub capacity: BTreeMap<String, Capacity>,
    /// `consumesCounters`: what allocating it takes from the pool's counter sets.
    pub consumes_counters: Vec<CounterConsumption>,
    /// `allowMultipleAllocations`: several claims share it, each taking part of its
    /// capacity.
    pub allow_multiple_allocations: bool,
    /// `taints`.
    pub taints: Vec<DeviceTaint>,
    /// Binding conditions, if the scheduler must wait for the driver.
    pub binding: Option<BindingConditions>,
}

/// One `status.allocation.devices.results[]` entry of this driver in this node's pool.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AllocatedDevice {
    /// The request (or `request/subrequest`) it was allocated for.
    pub request: String,
    /// The device name in the pool (a [`SliceDevice::name`]).
    pub device: String,
    /// `adminAccess`: the claim may use a device other claims hold (monitoring); it
    /// holds nothing itself.
    pub admin_access: bool,
    /// `shareID` of a device that allows multiple allocations: which share this is.
    pub share_id: Option<String>,
    /// `consumedCapacity` of such a device: what this share takes.
    pub consumed_capacity: BTreeMap<String, String>,
}

impl AllocatedDevice {
    /// The request name without a `/subrequest` (the prioritized list's choice): what
    /// containers name and what the kubelet matches `request_names` against
    /// (`resourceclaim.BaseRequestRef`).
    pub fn base_request(&self) -> &str {
        self.request.split('/').next().unwrap_or(&self.request)
    }
}

/// Where an opaque config entry came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ConfigSource {
    /// The DeviceClass.
    FromClass,
    /// The claim.
    FromClaim,
}

/// What the scheduler allocated a claim from this driver on this node, with the
/// driver's opaque configs decoded as `C`.
#[derive(Debug, Clone, PartialEq)]
pub struct DriverAllocation<C> {
    /// This driver's results in this node's pool, in the allocation's order (never empty).
    pub devices: Vec<AllocatedDevice>,
    /// This driver's opaque configs, class configs first (each source in the API's order).
    pub configs: Vec<ConfigEntry<C>>,
}

impl<C> DriverAllocation<C> {
    /// The configs that apply to `request`, in the order they apply: a later one
    /// overrides an earlier one (the claim's over its class's).
    pub fn configs_for<'a>(&'a self, request: &'a str) -> impl Iterator<Item = &'a C> + 'a {
        self.configs
            .iter()
            .filter(move |c| c.applies_to(request))
            .map(|c| &c.config)
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

    /// The opaque config the driver takes (`crate::config::NoConfig` for none), decoded
    /// and validated by the plugin before [`DeviceProfile::prepare_allocation`].
    type Config: OpaqueConfig;

    /// The CDI class of the devices: one word (`k8s.<driver>/<class>=<device>`).
    fn cdi_class(&self) -> &str;

    /// The devices the node publishes in its ResourceSlices.
    fn slice_devices(&self) -> Vec<SliceDevice>;

    /// The counter sets its devices consume from (partitionable devices); none by
    /// default.
    fn counter_sets(&self) -> Vec<CounterSet> {
        Vec::new()
    }

    /// How the devices are spread over the node's ResourceSlices; as few slices as the
    /// limits allow by default.
    fn slice_split(&self) -> crate::slices::SliceSplit {
        crate::slices::SliceSplit::Packed
    }

    /// Classic DRA: what preparing `claim` with this allocation handle (written by the
    /// driver's controller) means.
    #[cfg(feature = "classic")]
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
        allocation: &DriverAllocation<Self::Config>,
    ) -> Result<Self::Prepared, ProfileError>;

    /// The node devices a prepared claim holds exclusively; no two claims ever hold one.
    /// Shares of a device that allows multiple allocations, and admin access, hold
    /// nothing.
    fn held_devices(&self, prepared: &Self::Prepared) -> Vec<String>;

    /// The slice device names ([`SliceDevice::name`]) a prepared claim was allocated, which
    /// the fault hook is told when it is unprepared; by default the held devices (a
    /// profile whose held devices are named otherwise says how they map).
    fn allocated_devices(&self, prepared: &Self::Prepared) -> Vec<String> {
        self.held_devices(prepared)
    }

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
