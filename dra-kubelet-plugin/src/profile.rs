//! The device seam: what a driver's devices are, behind one trait, so the plumbing —
//! registration, the gRPC services of every version, the checkpoint, crash-safe files,
//! the ResourceSlices — never knows what it prepares.
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

use std::fmt::Debug;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::cdi_spec::{ContainerEdits, Device};
use crate::claim_data::{ClaimRef, ClaimUid, DriverAllocation, ProfileError};
use crate::model::{CounterSet, SliceDevice, SliceSplit};
use crate::opaque::OpaqueConfig;

/// What a DRA driver's devices are. See the module docs.
///
/// A driver of NIC virtual functions, whole:
///
/// ```
/// use dra_kubelet_plugin::cdi::{ContainerEdits, Device};
/// use dra_kubelet_plugin::claim::{AllocatedDevice, ClaimRef, ClaimUid, DriverAllocation};
/// use dra_kubelet_plugin::device::SliceDevice;
/// use dra_kubelet_plugin::{DeviceProfile, NoConfig, ProfileError};
///
/// #[derive(Debug)]
/// struct Vfs(usize);
///
/// impl DeviceProfile for Vfs {
///     type Prepared = Vec<String>;
///     type Config = NoConfig;
///
///     fn cdi_class(&self) -> &str {
///         "vf"
///     }
///     fn slice_devices(&self) -> Vec<SliceDevice> {
///         (0..self.0).map(|i| SliceDevice::new(format!("vf-{i}"))).collect()
///     }
///     fn prepare_allocation(&self, _: &ClaimRef, a: &DriverAllocation<NoConfig>) -> Result<Vec<String>, ProfileError> {
///         Ok(a.devices.iter().map(|d| d.device.clone()).collect())
///     }
///     fn held_devices(&self, vfs: &Vec<String>) -> Vec<String> {
///         vfs.clone()
///     }
///     fn check(&self, vfs: &Vec<String>) -> Result<(), ProfileError> {
///         match vfs.iter().find(|v| !v.starts_with("vf-")) {
///             Some(v) => Err(ProfileError::new("unknown_device", format!("{v:?} is not a VF"))),
///             None => Ok(()),
///         }
///     }
///     fn cdi_devices(&self, uid: &ClaimUid, vfs: &Vec<String>) -> Vec<Device> {
///         vfs.iter()
///             .map(|v| Device::new(format!("{uid}:{v}"), ContainerEdits::new().env("VF", v)))
///             .collect()
///     }
///     fn claim_cdi_devices(&self, uid: &ClaimUid, vfs: &Vec<String>) -> Vec<String> {
///         vfs.iter().map(|v| format!("{uid}:{v}")).collect()
///     }
///     fn device_cdi_devices(&self, uid: &ClaimUid, vfs: &Vec<String>, device: &str) -> Option<Vec<String>> {
///         vfs.iter().any(|v| v == device).then(|| vec![format!("{uid}:{device}")])
///     }
/// }
///
/// let claim = ClaimRef::new("u1", "default", "c").unwrap();
/// let allocation = DriverAllocation::<NoConfig>::new(vec![AllocatedDevice::new("nic", "vf-1")], vec![]);
/// let prepared = Vfs(4).prepare_allocation(&claim, &allocation).unwrap();
/// assert_eq!(Vfs(4).cdi_devices(&claim.uid, &prepared)[0].name, "u1:vf-1");
/// ```
pub trait DeviceProfile: Debug + Send + Sync + 'static {
    /// What the checkpoint keeps of a prepared claim: only what cannot be recomputed.
    /// Serialized next to the claim's namespace and name, so its fields must not be
    /// called `namespace` or `name`.
    type Prepared: Clone + PartialEq + Debug + Serialize + DeserializeOwned + Send + Sync + 'static;

    /// The opaque config the driver takes ([`crate::opaque::NoConfig`] for none), decoded
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
    fn slice_split(&self) -> SliceSplit {
        SliceSplit::Packed
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

    /// The edits every container using any claim gets (the node-wide `common` device);
    /// none by default, and then there is no `common` device. Checked at start: edits the
    /// CDI specification refuses, or a device node or bind mount whose host file is
    /// missing, stop the plugin before it serves, naming this method.
    fn common_edits(&self) -> ContainerEdits {
        ContainerEdits::new()
    }

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
