//! A GPU-like device profile: whole GPUs, partitions drawn from a GPU's counters
//! (DRAPartitionableDevices), and GPUs shared by several claims, each taking part of the
//! memory (DRAConsumableCapacity). Structured DRA only; pure.
//!
//! - [`catalog`]: the models (built-in and an inventory file's), checked;
//! - [`devices`]: a node's GPUs and the ResourceSlice devices and counter sets they give;
//! - [`env`]: the `FAKE_GPU_<k>` variables containers see;
//! - [`groups`]: a node's GPUs as flags and inventory files give them;
//! - [`registration`]: its flags and inventory fields, in the profile registry.
//!
//! docs/profiles.md describes it for operators.

pub mod catalog;
pub mod devices;
pub mod env;
pub mod groups;
pub mod registration;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use catalog::{Catalog, GpuModel, Partition};
use devices::{Kind, NodeLayout};
use env::SeenDevice;

use dra_kubelet_plugin::cdi::{ContainerEdits, Device};
use dra_kubelet_plugin::claim::{ClaimRef, ClaimUid};
use dra_kubelet_plugin::profile::{
    CounterSet, DeviceProfile, DriverAllocation, ProfileError, SliceDevice,
};
use dra_kubelet_plugin::slices::PackError;
use groups::{GpuGroup, Sharing};

/// The CDI class of GPUs: `k8s.<driver>/gpu=<device>`.
pub const CDI_CLASS: &str = "gpu";

/// The driver version published as the `driverVersion` attribute.
pub const DRIVER_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Longest share id accepted (the API writes a UUID).
const MAX_SHARE_ID_LEN: usize = 64;
/// Longest capacity name (a C identifier of at most 63 characters in the API).
const MAX_CAPACITY_NAME_LEN: usize = 63;

/// Why a catalog or a node's GPUs cannot be used; names the model, group or device and
/// the limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GpuError {
    /// A model name given twice.
    #[error("GPU model {name:?} is defined twice (the built-in models are {builtin})", builtin = Catalog::builtin().names())]
    DuplicateModel { name: String },
    /// A model that cannot be published or whose counters do not add up.
    #[error("GPU model {model:?}: {field} {reason}")]
    BadModel {
        model: String,
        field: String,
        reason: String,
    },
    /// A group of a model the catalog lacks.
    #[error("{group}: model {model:?} is not in the catalog; known models: {known}")]
    UnknownModel {
        group: String,
        model: String,
        known: String,
    },
    /// A group that cannot be built.
    #[error("{group}: {reason}")]
    BadGroup { group: String, reason: String },
    /// More GPUs than a node may have.
    #[error("the node has {count} GPUs; at most {max} per node")]
    TooManyGpus { count: usize, max: usize },
    /// No GPUs at all.
    #[error("the gpu profile needs at least one GPU (e.g. --gpus A100-80GB:8:partitioned)")]
    NoGpus,
    /// An empty node name.
    #[error("--node-name must not be empty")]
    NoNodeName,
    /// A pool that a Kubernetes release could not publish.
    #[error("the node's GPUs cannot be published to Kubernetes {release}: {source}")]
    Unpublishable {
        release: &'static str,
        source: PackError,
    },
}

/// One allocated device of a prepared claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PreparedDevice {
    /// The device name in the pool (`gpu-0`, `gpu-0-1g-10gb-3`).
    pub device: String,
    /// The share of a shared GPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_id: Option<String>,
    /// What the share takes, as the API wrote it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub consumed_capacity: BTreeMap<String, String>,
}

/// A prepared GPU claim: all the checkpoint keeps (uuids, products and memory come from
/// the node's devices).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GpuPrepared {
    /// The allocated devices, in the allocation's order.
    pub devices: Vec<PreparedDevice>,
    /// Allocated with `adminAccess`: the devices stay other claims' too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub admin_access: bool,
}

/// GPUs on one node.
#[derive(Debug, Clone)]
pub struct GpuProfile {
    layout: NodeLayout,
    driver_name: String,
}

impl GpuProfile {
    /// The profile of `node_name` with `groups` of `catalog`'s models, for `driver_name`.
    pub fn new(
        node_name: &str,
        driver_name: &str,
        groups: &[GpuGroup],
        catalog: &Catalog,
    ) -> Result<Self, GpuError> {
        Ok(Self {
            layout: NodeLayout::new(node_name, groups, catalog)?,
            driver_name: driver_name.to_owned(),
        })
    }

    /// The node's GPUs and devices.
    pub fn layout(&self) -> &NodeLayout {
        &self.layout
    }

    /// Checks allocated devices against this node: known devices, share ids and
    /// consumed capacities the API could have written, no device twice unless as
    /// distinct shares. The error comes with the position of the device it is about.
    fn check_devices(&self, devices: &[PreparedDevice]) -> Result<(), (usize, ProfileError)> {
        let node = &self.layout.node_name;
        let mut seen: BTreeMap<&str, Vec<Option<&str>>> = BTreeMap::new();
        for (k, d) in devices.iter().enumerate() {
            self.check_device(node, d, seen.entry(d.device.as_str()).or_default())
                .map_err(|e| (k, e))?;
        }
        Ok(())
    }

    /// [`Self::check_devices`] of one device; `shares` are the share ids under which the
    /// claim already has it (`None`: whole).
    fn check_device<'a>(
        &self,
        node: &str,
        d: &'a PreparedDevice,
        shares: &mut Vec<Option<&'a str>>,
    ) -> Result<(), ProfileError> {
        if self.layout.device(&d.device).is_none() {
            return Err(ProfileError::new(
                "unknown_device",
                format!(
                    "device {:?} is not a device of node {node:?} (it has {})",
                    d.device,
                    self.layout.summary()
                ),
            ));
        }
        if let Some(id) = &d.share_id
            && (id.is_empty()
                || id.len() > MAX_SHARE_ID_LEN
                || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
        {
            return Err(ProfileError::new(
                "bad_allocation",
                format!(
                    "device {:?}: shareID {id:?} must be 1 to {MAX_SHARE_ID_LEN} letters, digits and '-'",
                    d.device
                ),
            ));
        }
        for (name, value) in &d.consumed_capacity {
            let bad_name = name.is_empty() || name.len() > MAX_CAPACITY_NAME_LEN;
            if bad_name
                || value
                    .parse::<dra_kubelet_plugin::quantity::Quantity>()
                    .is_err()
            {
                return Err(ProfileError::new(
                    "bad_allocation",
                    format!(
                        "device {:?}: consumedCapacity {name:?} = {value:?} is not a capacity name (1 to {MAX_CAPACITY_NAME_LEN} characters) with a quantity",
                        d.device
                    ),
                ));
            }
        }
        let share = d.share_id.as_deref();
        if !shares.is_empty() && (share.is_none() || shares.contains(&share)) {
            return Err(ProfileError::new(
                "duplicate_device",
                format!(
                    "device {:?} is allocated to the claim more than once, not as distinct shares",
                    d.device
                ),
            ));
        }
        if shares.contains(&None) {
            return Err(ProfileError::new(
                "duplicate_device",
                format!(
                    "device {:?} is allocated to the claim both whole and as a share",
                    d.device
                ),
            ));
        }
        shares.push(share);
        Ok(())
    }

    /// What a container sees of allocated device `d`.
    fn seen(&self, d: &PreparedDevice) -> Option<SeenDevice> {
        let device = self.layout.device(&d.device)?;
        let gpu = self.layout.gpu_of(device)?;
        Some(SeenDevice {
            uuid: device.uuid.clone(),
            product: gpu.model.product_name.clone(),
            memory: d
                .consumed_capacity
                .get("memory")
                .cloned()
                .unwrap_or_else(|| device.memory.clone()),
            partition: match &device.kind {
                Kind::Partition { profile, .. } => Some(profile.clone()),
                Kind::Whole => None,
            },
            share: d.share_id.clone(),
        })
    }
}

impl DeviceProfile for GpuProfile {
    type Prepared = GpuPrepared;
    /// The gpu profile takes no parameters: the plugin refuses any opaque config.
    type Config = dra_kubelet_plugin::NoConfig;

    fn cdi_class(&self) -> &str {
        CDI_CLASS
    }

    fn slice_devices(&self) -> Vec<SliceDevice> {
        self.layout.slice_devices()
    }

    fn counter_sets(&self) -> Vec<CounterSet> {
        self.layout.counter_sets()
    }

    /// The allocated devices, as they are: the scheduler chose them from the slice (and
    /// the plugin refused any opaque config).
    fn prepare_allocation(
        &self,
        _claim: &ClaimRef,
        allocation: &DriverAllocation<dra_kubelet_plugin::NoConfig>,
    ) -> Result<GpuPrepared, ProfileError> {
        let admin_access = allocation.devices.iter().all(|d| d.admin_access);
        if !admin_access && allocation.devices.iter().any(|d| d.admin_access) {
            return Err(ProfileError::new(
                "admin_access_mixed",
                "the claim mixes requests with and without adminAccess; the gpu profile prepares a claim either for admin access or not: put them in separate claims",
            ));
        }
        let devices: Vec<PreparedDevice> = allocation
            .devices
            .iter()
            .map(|d| PreparedDevice {
                device: d.device.clone(),
                share_id: d.share_id.clone(),
                consumed_capacity: d.consumed_capacity.clone(),
            })
            .collect();
        self.check_devices(&devices).map_err(|(k, e)| {
            let request = allocation
                .devices
                .get(k)
                .map(|d| format!(" (request {:?})", d.request))
                .unwrap_or_default();
            ProfileError::new(e.reason, format!("{}{request}", e.message))
        })?;
        Ok(GpuPrepared {
            devices,
            admin_access,
        })
    }

    /// Every device but shares; a whole partitioned GPU also holds its partitions, so a
    /// claim of the GPU and a claim of one of its partitions are never prepared at once.
    fn held_devices(&self, prepared: &GpuPrepared) -> Vec<String> {
        if prepared.admin_access {
            return Vec::new();
        }
        let mut held = Vec::new();
        for d in prepared.devices.iter().filter(|d| d.share_id.is_none()) {
            held.push(d.device.clone());
            let Some(device) = self.layout.device(&d.device) else {
                continue;
            };
            let partitioned = self
                .layout
                .gpu_of(device)
                .is_some_and(|g| g.sharing == Sharing::Partitioned);
            if device.kind == Kind::Whole && partitioned {
                held.extend(
                    self.layout
                        .devices
                        .iter()
                        .filter(|p| p.gpu == device.gpu && p.kind != Kind::Whole)
                        .map(|p| p.name.clone()),
                );
            }
        }
        held
    }

    /// Each allocated device once, shares and admin access included: what a
    /// `DeviceFault` selecting the device reaches.
    fn allocated_devices(&self, prepared: &GpuPrepared) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for d in &prepared.devices {
            if !names.contains(&d.device) {
                names.push(d.device.clone());
            }
        }
        names
    }

    /// The devices must still be this node's: a checkpoint from before an inventory
    /// change that removed one is refused, naming it.
    fn check(&self, prepared: &GpuPrepared) -> Result<(), ProfileError> {
        if prepared.devices.is_empty() {
            return Err(ProfileError::new(
                "bad_checkpoint",
                "a prepared GPU claim lists no devices",
            ));
        }
        self.check_devices(&prepared.devices)
            .map_err(|(_, e)| ProfileError::new("bad_checkpoint", e.message))
    }

    fn common_edits(&self) -> ContainerEdits {
        crate::fake::env::common(&self.layout.node_name, &self.driver_name)
    }

    fn cdi_devices(&self, uid: &ClaimUid, prepared: &GpuPrepared) -> Vec<Device> {
        // `check` and `prepare_allocation` let only this node's devices in, so none is
        // left out; positions stay the claim's either way.
        let seen: Vec<(usize, SeenDevice)> = prepared
            .devices
            .iter()
            .enumerate()
            .filter_map(|(k, d)| Some((k, self.seen(d)?)))
            .collect();
        env::claim_devices(uid, &seen, prepared.devices.len())
    }

    fn claim_cdi_devices(&self, uid: &ClaimUid, _prepared: &GpuPrepared) -> Vec<String> {
        vec![uid.to_string()]
    }

    /// Every `<uid>:<k>` allocated as `device`: two shares of one GPU give both.
    fn device_cdi_devices(
        &self,
        uid: &ClaimUid,
        prepared: &GpuPrepared,
        device: &str,
    ) -> Option<Vec<String>> {
        let names: Vec<String> = prepared
            .devices
            .iter()
            .enumerate()
            .filter(|(_, d)| d.device == device)
            .map(|(k, _)| env::device_name(uid, k))
            .collect();
        (!names.is_empty()).then_some(names)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
