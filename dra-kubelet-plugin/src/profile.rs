//! The device seam: what a driver's devices are, behind one trait, so the plumbing —
//! registration, the gRPC services of every version, the checkpoint, crash-safe files,
//! the ResourceSlices — never knows what it prepares.
//!
//! A profile answers four questions, all without I/O:
//!
//! 1. **What does the node have?** [`DeviceProfile::slice_devices`] and
//!    [`DeviceProfile::counter_sets`], read again whenever [`DeviceProfile::changes`]
//!    yields, with each device's [`DeviceProfile::health`].
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
//! A driver whose devices need work to be ready — a partition created, a bitstream loaded,
//! a virtual function configured — sets [`DeviceProfile::DEVICE_WORK`] and does that work,
//! with all the I/O it needs, in [`DeviceProfile::prepare_devices`],
//! [`DeviceProfile::unprepare_devices`] and [`DeviceProfile::roll_back_devices`]. The
//! plugin runs them off the kubelet's call, each under a deadline, with the claim recorded
//! as started before and completed after, so a crash or a refusal in between is always
//! rolled back.

use std::fmt::Debug;
use std::future::Future;
use std::path::Path;
use std::time::Instant;

use futures::stream::BoxStream;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::cdi_spec::{ContainerEdits, Device};
use crate::claim_data::{AllocatedDevice, ClaimRef, ClaimUid, DriverAllocation, ProfileError};
use crate::model::{CounterSet, HealthStatus, SliceDevice, SliceSplit, TaintEffect};
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
///     fn device_cdi_devices(&self, uid: &ClaimUid, vfs: &Vec<String>, d: &AllocatedDevice) -> Option<Vec<String>> {
///         vfs.iter().any(|v| *v == d.device).then(|| vec![format!("{uid}:{}", d.device)])
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
    /// called `namespace`, `name` or `preparePhase`.
    type Prepared: Clone + PartialEq + Debug + Serialize + DeserializeOwned + Send + Sync + 'static;

    /// The opaque config the driver takes ([`crate::opaque::NoConfig`] for none), decoded
    /// and validated by the plugin before [`DeviceProfile::prepare_allocation`].
    type Config: OpaqueConfig;

    /// Whether preparing a claim takes device work ([`DeviceProfile::prepare_devices`]).
    /// `false` (the default): a claim is ready once its CDI spec is written, and the three
    /// device-work methods are never called. `true`: each new claim is recorded in the
    /// checkpoint as started before its work (one more durable write per batch), gets a
    /// state directory of its own, and is rolled back if the work or anything after it
    /// fails, or the plugin dies before the claim is recorded as completed.
    const DEVICE_WORK: bool = false;

    /// The CDI class of the devices: one word (`k8s.<driver>/<class>=<device>`).
    fn cdi_class(&self) -> &str;

    /// The devices the node publishes in its ResourceSlices.
    fn slice_devices(&self) -> Vec<SliceDevice>;

    /// The counter sets its devices consume from (partitionable devices); none by
    /// default.
    fn counter_sets(&self) -> Vec<CounterSet> {
        Vec::new()
    }

    /// Yields whenever what [`DeviceProfile::slice_devices`],
    /// [`DeviceProfile::counter_sets`] or [`DeviceProfile::health`] say may have changed
    /// (a card plugged in or out, a device failing): the plugin publishes the node's
    /// slices again within a second and sends the kubelet's health streams a report.
    /// Never yields by default: the devices are read once. A claim prepared on a device
    /// that goes away stays prepared (its pod keeps what it has; unprepare works as
    /// ever); the scheduler just stops allocating the device.
    fn changes(&self) -> BoxStream<'static, ()> {
        Box::pin(futures::stream::pending())
    }

    /// The health of `device` (a [`SliceDevice::name`]) and why, for the kubelet's health
    /// stream (the worse of this and the fault hook's); healthy by default.
    fn health(&self, device: &str) -> (HealthStatus, Option<String>) {
        let _ = device;
        (HealthStatus::Healthy, None)
    }

    /// With `Some(effect)`, every unhealthy device is published with the taint
    /// `<driver>/unhealthy` of that effect (as NVIDIA's driver turns health events into
    /// taints), so the scheduler stops allocating it (`NoSchedule`) or also evicts its
    /// pods (`NoExecute`); `None` (the default) reports health to the kubelet only.
    fn unhealthy_taint(&self) -> Option<TaintEffect> {
        None
    }

    /// The pool of `device` (a [`SliceDevice::name`]) when the driver publishes more than
    /// the node's own pool: `Some(name)` puts it in pool `<node>/<name>` (DNS subdomains
    /// joined by `/`), as a driver does whose devices are unrelated (GPUs and NICs) or
    /// change generation apart. `None` (the default) is the node's pool, named after the
    /// node. A counter set goes with the devices that consume it, so they must be of one
    /// pool; device names stay unique over all the node's pools. A claim may be allocated
    /// devices of any of them.
    fn device_pool(&self, device: &str) -> Option<String> {
        let _ = device;
        None
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

    /// Makes the claim's devices ready (with [`DeviceProfile::DEVICE_WORK`]): after the
    /// claim is recorded as started, before its CDI spec is written, so the spec may point
    /// at files made here (in [`DeviceWork::state_dir`]). Runs off the kubelet's call: a
    /// kubelet that gives up does not interrupt it. Past [`DeviceWork::deadline`] the
    /// future is dropped and the claim is rolled back. An error, a panic or a timeout
    /// fails the claim (the kubelet retries) after [`DeviceProfile::roll_back_devices`].
    fn prepare_devices(
        &self,
        work: &DeviceWork<'_, Self::Prepared>,
    ) -> impl Future<Output = Result<(), ProfileError>> + Send {
        let _ = work;
        async { Ok(()) }
    }

    /// Releases a prepared claim's devices (with [`DeviceProfile::DEVICE_WORK`]): after its
    /// CDI spec is removed, before the checkpoint forgets it. Must be idempotent: a crash
    /// after it and before the checkpoint's write makes the kubelet ask again. An error
    /// leaves the claim prepared (its spec is put back) and the kubelet retries.
    fn unprepare_devices(
        &self,
        work: &DeviceWork<'_, Self::Prepared>,
    ) -> impl Future<Output = Result<(), ProfileError>> + Send {
        let _ = work;
        async { Ok(()) }
    }

    /// Undoes whatever part of [`DeviceProfile::prepare_devices`] was done, for a claim
    /// whose preparation failed or was interrupted by a crash (found at start). The work
    /// may have done anything from nothing to all of it. By default
    /// [`DeviceProfile::unprepare_devices`]. An error keeps the claim recorded as started:
    /// rolled back again on the kubelet's next call for it, or at the next start.
    fn roll_back_devices(
        &self,
        work: &DeviceWork<'_, Self::Prepared>,
    ) -> impl Future<Output = Result<(), ProfileError>> + Send {
        self.unprepare_devices(work)
    }

    /// What the driver says of the devices of a claim it prepared (conditions, data,
    /// network data: a NIC's interface and addresses), written to the claim's
    /// `status.devices` as this driver's and pool's entries after each successful
    /// prepare, off the kubelet's call; none by default (nothing is written). May read what
    /// the device work left in [`DeviceWork::state_dir`]. What the API would refuse is
    /// logged naming the field, and the claim stays prepared.
    fn device_status(
        &self,
        work: &DeviceWork<'_, Self::Prepared>,
    ) -> impl Future<Output = Vec<crate::device_status::DeviceStatus>> + Send {
        let _ = work;
        async { Vec::new() }
    }

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

    /// The names a structured kubelet injects for one allocated device (its
    /// [`SliceDevice::name`], and for a share of a device that allows multiple
    /// allocations its `share_id`: each share is a CDI device of its own, so two requests
    /// sharing one device each get only theirs); `None` if the claim does not hold it.
    fn device_cdi_devices(
        &self,
        uid: &ClaimUid,
        prepared: &Self::Prepared,
        device: &AllocatedDevice,
    ) -> Option<Vec<String>>;
}

/// One claim's device work: what [`DeviceProfile::prepare_devices`],
/// [`DeviceProfile::unprepare_devices`] and [`DeviceProfile::roll_back_devices`] are given.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct DeviceWork<'a, P> {
    /// The claim.
    pub claim: &'a ClaimRef,
    /// What [`DeviceProfile::prepare_allocation`] made of it.
    pub prepared: &'a P,
    /// A directory of the claim's own, created before its preparation and removed with
    /// everything in it after its unprepare or rollback: files a bind mount needs live
    /// here.
    pub state_dir: &'a Path,
    /// When the plugin stops waiting: blocking work handed to a thread should give up by
    /// then, since its outcome is no longer awaited.
    pub deadline: Instant,
}

impl<'a, P> DeviceWork<'a, P> {
    /// The work on `claim`, prepared as `prepared`, with its `state_dir`, due by
    /// `deadline` (for a driver's own tests; the plugin makes these).
    pub fn new(
        claim: &'a ClaimRef,
        prepared: &'a P,
        state_dir: &'a Path,
        deadline: Instant,
    ) -> Self {
        Self {
            claim,
            prepared,
            state_dir,
            deadline,
        }
    }
}
