//! An NVIDIA-shaped device profile: the devices NVIDIA's DRA driver
//! (k8s-dra-driver-gpu, cmd/gpu-kubelet-plugin) publishes, under the same names, with the
//! same attributes, capacities and counters, for A100 40GB and 80GB, H100 80GB and L4
//! GPUs, with or without their MIG devices. Selectors and DeviceClasses written for the
//! real driver work unchanged with `--driver-name gpu.nvidia.com`. Structured DRA only;
//! pure. Nothing is real: no device nodes, no NVML, no MIG devices created.
//!
//! - [`models`]: the GPUs and their MIG profiles, from NVIDIA's published tables;
//! - [`devices`]: a node's GPUs and the ResourceSlice devices and counter sets they give;
//! - [`env`](mod@env): the `NVIDIA_VISIBLE_DEVICES` containers see;
//! - [`groups`]: a node's GPUs as `--nvidia-gpus` and inventory files give them;
//! - [`registration`]: its flag and inventory field, in the profile registry.
//!
//! docs/profiles.md (`## nvidia`) compares it field by field with the real driver.

pub mod devices;
pub mod env;
pub mod groups;
pub mod models;
pub mod registration;

use devices::{Kind, NodeLayout};
use groups::NvidiaGroup;

use dra_kubelet_plugin::DeviceProfile;
use dra_kubelet_plugin::cdi::{ContainerEdits, Device};
use dra_kubelet_plugin::claim::{AllocatedDevice, ClaimRef, ClaimUid};
use dra_kubelet_plugin::claim::{DriverAllocation, ProfileError};
use dra_kubelet_plugin::device::SliceSplit;
use dra_kubelet_plugin::device::{CounterSet, SliceDevice};
use dra_kubelet_plugin::slices::PackError;

use crate::gpu::env::{self as gpu_env, SeenDevice};
use crate::shared::prepared::{self, PreparedClaim, PreparedDevice, Requests};

/// The CDI class: `k8s.<driver>/claim=<device>`, the real driver's kind
/// (`k8s.gpu.nvidia.com/claim`) under `--driver-name gpu.nvidia.com`.
pub const CDI_CLASS: &str = "claim";

/// Why a node's NVIDIA GPUs cannot be used; names the group or entry and the limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NvidiaError {
    /// A group of a model the profile does not have.
    #[error(
        "{group}: model {model:?} is not an NVIDIA model of the nvidia profile; the models are {known}"
    )]
    UnknownModel {
        group: String,
        model: String,
        known: String,
    },
    /// A MIG profile the model does not have.
    #[error(
        "{group}: MIG profile {profile:?} is not one of {model}'s; its MIG profiles are {known}"
    )]
    UnknownMigProfile {
        group: String,
        profile: String,
        model: &'static str,
        known: String,
    },
    /// A group that cannot be built.
    #[error("{group}: {reason}")]
    BadGroup { group: String, reason: String },
    /// More GPUs than a node may have.
    #[error("the node has {count} NVIDIA GPUs; at most {max} per node")]
    TooManyGpus { count: usize, max: usize },
    /// No GPUs at all.
    #[error("the nvidia profile needs at least one GPU (e.g. --nvidia-gpus A100-40GB:8:mig)")]
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

/// A prepared nvidia claim: its allocated devices and the request of each (containers
/// see a request's devices together). The gpu profile's checkpoint shape.
pub type NvidiaPrepared = PreparedClaim;

/// NVIDIA GPUs on one node.
#[derive(Debug, Clone)]
pub struct NvidiaProfile {
    layout: NodeLayout,
    driver_name: String,
}

impl NvidiaProfile {
    /// The profile of `node_name` with `groups`, for `driver_name`; `field` names where
    /// the groups came from, for errors.
    pub fn new(
        node_name: &str,
        driver_name: &str,
        groups: &[NvidiaGroup],
        field: &str,
    ) -> Result<Self, NvidiaError> {
        Ok(Self {
            layout: NodeLayout::new(node_name, groups, field)?,
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
        let (memory_mib, partition) = match device.kind {
            Kind::Whole => (gpu.model.memory_mib, None),
            Kind::Mig { profile, .. } => (profile.memory_mib, Some(profile.name.to_owned())),
        };
        Some(SeenDevice {
            uuid: device.uuid.clone(),
            product: gpu.model.product_name.to_owned(),
            memory: format!("{memory_mib}Mi"),
            partition,
            share: None,
        })
    }
}

impl DeviceProfile for NvidiaProfile {
    type Prepared = NvidiaPrepared;
    /// The nvidia profile takes no parameters (the real driver's `GpuConfig` and
    /// `MigDeviceConfig` sharing settings are not modelled): the plugin refuses any
    /// opaque config.
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

    /// One slice per MIG-enabled GPU, as the real driver cuts its pool.
    fn slice_split(&self) -> SliceSplit {
        SliceSplit::PerCounterSet
    }

    /// The allocated devices and their requests, as they are: the scheduler chose them
    /// from the slice (and the plugin refused any opaque config).
    fn prepare_allocation(
        &self,
        _claim: &ClaimRef,
        allocation: &DriverAllocation<dra_kubelet_plugin::NoConfig>,
    ) -> Result<NvidiaPrepared, ProfileError> {
        prepared::from_allocation(&self.layout, allocation, Requests::Keep, "nvidia")
    }

    /// Each device and the memory slices it takes (`gpu-0/memory-slice-3`): a whole
    /// MIG-enabled GPU takes all of them, a MIG device those of its placement, so two
    /// claims of overlapping placements (or of a GPU and one of its MIG devices) are never
    /// prepared at once, even if the scheduler's counters were bypassed. Admin access
    /// holds nothing.
    fn held_devices(&self, prepared: &NvidiaPrepared) -> Vec<String> {
        if prepared.admin_access {
            return Vec::new();
        }
        let mut held = Vec::new();
        for d in &prepared.devices {
            held.push(d.device.clone());
            if let Some(device) = self.layout.device(&d.device) {
                held.extend(self.layout.memory_slices(device));
            }
        }
        held
    }

    fn allocated_devices(&self, prepared: &NvidiaPrepared) -> Vec<String> {
        prepared::allocated_devices(prepared)
    }

    fn check(&self, prepared: &NvidiaPrepared) -> Result<(), ProfileError> {
        prepared::check(&self.layout, prepared)
    }

    fn common_edits(&self) -> ContainerEdits {
        crate::fake::env::common(&self.layout.node_name, &self.driver_name)
    }

    /// `<uid>` with every device, `<uid>:<k>` per allocated device with its request's
    /// uuids in `NVIDIA_VISIBLE_DEVICES` ([`env`](mod@env)).
    fn cdi_devices(&self, uid: &ClaimUid, prepared: &NvidiaPrepared) -> Vec<Device> {
        // `check` and `prepare_allocation` let only this node's devices in, so none is
        // left out; positions stay the claim's either way.
        let seen: Vec<(usize, SeenDevice)> = prepared
            .devices
            .iter()
            .enumerate()
            .filter_map(|(k, d)| Some((k, self.seen(d)?)))
            .collect();
        let uuids_where = |keep: &dyn Fn(&PreparedDevice) -> bool| -> Vec<&str> {
            seen.iter()
                .filter(|(k, _)| prepared.devices.get(*k).is_some_and(keep))
                .map(|(_, s)| s.uuid.as_str())
                .collect()
        };
        let all = env::visible_devices(&uuids_where(&|_| true));
        gpu_env::claim_devices_with(uid, &seen, prepared.devices.len(), all, |k| {
            let request = prepared.devices.get(k).map(|d| &d.request);
            env::visible_devices(&uuids_where(&|d| Some(&d.request) == request))
        })
    }

    fn claim_cdi_devices(&self, uid: &ClaimUid, _prepared: &NvidiaPrepared) -> Vec<String> {
        vec![uid.to_string()]
    }

    fn device_cdi_devices(
        &self,
        uid: &ClaimUid,
        prepared: &NvidiaPrepared,
        device: &AllocatedDevice,
    ) -> Option<Vec<String>> {
        let names: Vec<String> = prepared
            .devices
            .iter()
            .enumerate()
            .filter(|(_, d)| d.device == device.device && d.share_id == device.share_id)
            .map(|(k, _)| gpu_env::device_name(uid, k))
            .collect();
        (!names.is_empty()).then_some(names)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
