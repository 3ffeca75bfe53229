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

pub use catalog::{Catalog, GpuModel, Partition};
use devices::{Kind, NodeLayout};
use env::SeenDevice;

use dra_kubelet_plugin::DeviceProfile;
use dra_kubelet_plugin::cdi::{ContainerEdits, Device};
use dra_kubelet_plugin::claim::{AllocatedDevice, ClaimRef, ClaimUid};
use dra_kubelet_plugin::claim::{DriverAllocation, ProfileError};
use dra_kubelet_plugin::device::{CounterSet, SliceDevice};
use dra_kubelet_plugin::slices::PackError;
use groups::{GpuGroup, Sharing};

pub use crate::shared::prepared::PreparedDevice;
use crate::shared::prepared::{self, PreparedClaim, Requests};

/// The CDI class of GPUs: `k8s.<driver>/gpu=<device>`.
pub const CDI_CLASS: &str = "gpu";

/// The driver version published as the `driverVersion` attribute.
pub const DRIVER_VERSION: &str = env!("CARGO_PKG_VERSION");

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

/// A prepared GPU claim: all the checkpoint keeps (uuids, products and memory come from
/// the node's devices). The gpu profile does not keep requests.
pub type GpuPrepared = PreparedClaim;

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
        prepared::from_allocation(&self.layout, allocation, Requests::Drop, "gpu")
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
        prepared::allocated_devices(prepared)
    }

    /// The devices must still be this node's: a checkpoint from before an inventory
    /// change that removed one is refused, naming it.
    fn check(&self, prepared: &GpuPrepared) -> Result<(), ProfileError> {
        prepared::check(&self.layout, prepared)
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

    /// The `<uid>:<k>` of `device`: of a share, that share's alone, so two requests sharing
    /// one GPU each get their own.
    fn device_cdi_devices(
        &self,
        uid: &ClaimUid,
        prepared: &GpuPrepared,
        device: &AllocatedDevice,
    ) -> Option<Vec<String>> {
        let names: Vec<String> = prepared
            .devices
            .iter()
            .enumerate()
            .filter(|(_, d)| d.device == device.device && d.share_id == device.share_id)
            .map(|(k, _)| env::device_name(uid, k))
            .collect();
        (!names.is_empty()).then_some(names)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
