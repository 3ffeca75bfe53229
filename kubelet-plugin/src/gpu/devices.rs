//! A node's GPUs and the devices they publish, computed from the node name, the groups
//! and the catalog only: a restart (or a test, or fleet mode) gets the same names, uuids
//! and PCI addresses without storing them.
//!
//! GPU `i` of the node (numbered across the groups, in order) is `gpu-<i>`. The first
//! half of the node's GPUs sit on PCIe root `pci0000:00` and NUMA node 0, the second half
//! on `pci0000:80` and NUMA node 1, as on a two-socket server
//! ([`crate::shared::pci_placement`]).

use std::collections::BTreeMap;

use dra_kubelet_plugin::Quantity;

use super::catalog::{Catalog, GpuModel, positive};
use super::groups::{GpuGroup, Sharing};
use super::{DRIVER_VERSION, GpuError};
use dra_kubelet_plugin::device::{
    Attribute, Capacity, CounterConsumption, CounterSet, RequestPolicy, SliceDevice, ValidRange,
};

use crate::shared::prepared::NodeDevices;
use crate::shared::{check_publishable, pci_placement, stable_uuid};

/// Most GPUs on one node: as many as the fake profile's `--num-devices` allows, more
/// than any real server has.
pub const MAX_GPUS_PER_NODE: usize = 128;

/// What a share of a shared GPU takes when the request names no amount.
pub const SHARE_DEFAULT: &str = "10Gi";
/// The smallest share, and the step between share sizes.
pub const SHARE_STEP: &str = "1Gi";

pub use crate::shared::{ATTR_NUMA_NODE, ATTR_PCI_BUS_ID, ATTR_PCIE_ROOT};

const GIB: i128 = 1 << 30;

/// The uuid attribute of GPU `index` of `node`: stable across restarts, distinct from
/// the fake device's ids (whose names start `node/`).
pub fn gpu_uuid(node: &str, index: usize) -> String {
    format!("GPU-{}", stable_uuid(&format!("gpu/{node}/{index}")))
}

/// The uuid of partition `k` of `profile` on GPU `index` of `node`.
pub fn partition_uuid(node: &str, index: usize, profile: &str, k: u32) -> String {
    format!(
        "GPU-{}",
        stable_uuid(&format!("gpu/{node}/{index}/{profile}/{k}"))
    )
}

/// The ResourceSlice name of GPU `index`.
pub fn gpu_name(index: usize) -> String {
    format!("gpu-{index}")
}

/// The counter set of partitioned GPU `index`.
pub fn counter_set_name(index: usize) -> String {
    format!("gpu-{index}-counters")
}

/// One physical GPU of the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    /// Its index on the node.
    pub index: usize,
    pub model: GpuModel,
    pub sharing: Sharing,
    /// `GPU-<uuid>`.
    pub uuid: String,
    /// `pci0000:NN`.
    pub pcie_root: String,
    /// `0000:BB:00.0`.
    pub bus_id: String,
    pub numa_node: i64,
}

/// What a published device is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A whole GPU (exclusive, shared, or the whole of a partitioned one).
    Whole,
    /// A partition: its profile and the compute slices it takes.
    Partition { profile: String, slices: u32 },
}

/// One device of the node's pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeDevice {
    /// The ResourceSlice name.
    pub name: String,
    /// The index of its physical GPU in [`NodeLayout::gpus`].
    pub gpu: usize,
    pub kind: Kind,
    /// Its own uuid (a partition's differs from its GPU's).
    pub uuid: String,
    /// Its memory, as the catalog spells it.
    pub memory: String,
}

/// A node's GPUs and devices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeLayout {
    pub node_name: String,
    pub gpus: Vec<Gpu>,
    /// In publication order: each GPU, then its partitions.
    pub devices: Vec<NodeDevice>,
    by_name: BTreeMap<String, usize>,
}

/// The default of a shared GPU's request policy: [`SHARE_DEFAULT`], or the whole GPU's
/// memory in whole GiB if that is less (the default must be a step of the range).
fn share_default(memory: Quantity) -> Option<String> {
    let default: Quantity = SHARE_DEFAULT.parse().ok()?;
    if memory >= default {
        return Some(SHARE_DEFAULT.to_owned());
    }
    let gib = memory.nanos()? / (GIB * 1_000_000_000);
    Some(format!("{gib}Gi"))
}

impl NodeLayout {
    /// The devices of `node` with `groups` of `catalog`'s models, checked: known models,
    /// partitions only of models that have them, at most [`MAX_GPUS_PER_NODE`], and a pool
    /// that every Kubernetes release the plugin serves can publish.
    pub fn new(node: &str, groups: &[GpuGroup], catalog: &Catalog) -> Result<Self, GpuError> {
        if node.is_empty() {
            return Err(GpuError::NoNodeName);
        }
        if groups.is_empty() {
            return Err(GpuError::NoGpus);
        }
        let mut models = Vec::with_capacity(groups.len());
        let mut total: usize = 0;
        for (j, g) in groups.iter().enumerate() {
            let group = || format!("GPU group {j} ({g})");
            let Some(model) = catalog.get(&g.model) else {
                return Err(GpuError::UnknownModel {
                    group: group(),
                    model: g.model.clone(),
                    known: catalog.names(),
                });
            };
            if g.count == 0 {
                return Err(GpuError::BadGroup {
                    group: group(),
                    reason: "count must be at least 1".into(),
                });
            }
            if g.sharing == Sharing::Partitioned && model.partitions.is_empty() {
                return Err(GpuError::BadGroup {
                    group: group(),
                    reason: format!(
                        "model {:?} has no partitions; use exclusive or shared",
                        model.name
                    ),
                });
            }
            let memory = positive(&model.memory).map_err(|reason| GpuError::BadGroup {
                group: group(),
                reason,
            })?;
            if g.sharing == Sharing::Shared && memory.nanos() < Some(GIB * 1_000_000_000) {
                return Err(GpuError::BadGroup {
                    group: group(),
                    reason: format!(
                        "model {:?} has {} of memory; a shared GPU needs at least {SHARE_STEP}, its smallest share",
                        model.name, model.memory
                    ),
                });
            }
            total = total.saturating_add(g.count);
            models.push((model, g.sharing, g.count));
        }
        if total > MAX_GPUS_PER_NODE {
            return Err(GpuError::TooManyGpus {
                count: total,
                max: MAX_GPUS_PER_NODE,
            });
        }
        let mut gpus = Vec::with_capacity(total);
        for (model, sharing, count) in models {
            for _ in 0..count {
                let index = gpus.len();
                let pci = pci_placement(index, total);
                gpus.push(Gpu {
                    index,
                    model: model.clone(),
                    sharing,
                    uuid: gpu_uuid(node, index),
                    pcie_root: pci.pcie_root,
                    bus_id: pci.bus_id,
                    numa_node: pci.numa_node,
                });
            }
        }
        let mut devices = Vec::new();
        for g in &gpus {
            devices.push(NodeDevice {
                name: gpu_name(g.index),
                gpu: g.index,
                kind: Kind::Whole,
                uuid: g.uuid.clone(),
                memory: g.model.memory.clone(),
            });
            if g.sharing != Sharing::Partitioned {
                continue;
            }
            for p in &g.model.partitions {
                for k in 0..p.count {
                    devices.push(NodeDevice {
                        name: format!("gpu-{}-{}-{k}", g.index, p.name_part()),
                        gpu: g.index,
                        kind: Kind::Partition {
                            profile: p.profile.clone(),
                            slices: p.slices,
                        },
                        uuid: partition_uuid(node, g.index, &p.profile, k),
                        memory: p.memory.clone(),
                    });
                }
            }
        }
        let by_name = devices
            .iter()
            .enumerate()
            .map(|(i, d)| (d.name.clone(), i))
            .collect();
        let layout = Self {
            node_name: node.to_owned(),
            gpus,
            devices,
            by_name,
        };
        layout.check_publishable()?;
        Ok(layout)
    }

    /// Packs the pool as 1.34 and as 1.35+ would: a node the plumbing would refuse at
    /// start is refused here, with the inventory still at hand.
    fn check_publishable(&self) -> Result<(), GpuError> {
        check_publishable(&self.node_name, self.slice_devices(), self.counter_sets())
            .map_err(|(release, source)| GpuError::Unpublishable { release, source })
    }

    /// The device called `name`.
    pub fn device(&self, name: &str) -> Option<&NodeDevice> {
        self.by_name.get(name).and_then(|&i| self.devices.get(i))
    }

    /// The GPU a device is on.
    pub fn gpu_of(&self, d: &NodeDevice) -> Option<&Gpu> {
        self.gpus.get(d.gpu)
    }

    /// What the node has, for an error about a device it does not have.
    pub fn summary(&self) -> String {
        let partitions = self.devices.len().saturating_sub(self.gpus.len());
        let mut s = format!(
            "{} GPU(s), gpu-0 to gpu-{}",
            self.gpus.len(),
            self.gpus.len().saturating_sub(1)
        );
        if let Some(first) = self.devices.iter().find(|d| d.kind != Kind::Whole) {
            s.push_str(&format!(
                ", and {partitions} partition(s) such as {}",
                first.name
            ));
        }
        s
    }

    /// The counter sets of the partitioned GPUs.
    pub fn counter_sets(&self) -> Vec<CounterSet> {
        self.gpus
            .iter()
            .filter(|g| g.sharing == Sharing::Partitioned)
            .map(|g| {
                CounterSet::new(
                    counter_set_name(g.index),
                    counters(&g.model.memory, g.model.slices.unwrap_or(0)),
                )
            })
            .collect()
    }

    /// The pool's devices.
    pub fn slice_devices(&self) -> Vec<SliceDevice> {
        self.devices
            .iter()
            .filter_map(|d| Some(self.slice_device(d, self.gpu_of(d)?)))
            .collect()
    }

    fn slice_device(&self, d: &NodeDevice, g: &Gpu) -> SliceDevice {
        let string = |s: &str| Attribute::String(s.to_owned());
        let mut attributes = BTreeMap::from([
            ("uuid".to_owned(), string(&d.uuid)),
            ("productName".to_owned(), string(&g.model.product_name)),
            ("architecture".to_owned(), string(&g.model.architecture)),
            ("model".to_owned(), string(&g.model.name)),
            (
                "index".to_owned(),
                Attribute::Int(i64::try_from(g.index).unwrap_or(i64::MAX)),
            ),
            (
                "driverVersion".to_owned(),
                Attribute::Version(DRIVER_VERSION.to_owned()),
            ),
            ("type".to_owned(), string("gpu")),
            (ATTR_PCIE_ROOT.to_owned(), string(&g.pcie_root)),
            (ATTR_PCI_BUS_ID.to_owned(), string(&g.bus_id)),
            (ATTR_NUMA_NODE.to_owned(), Attribute::Int(g.numa_node)),
        ]);
        let mut device = {
            let mut built = SliceDevice::new(d.name.clone());
            built.capacity =
                BTreeMap::from([("memory".to_owned(), Capacity::from(d.memory.as_str()))]);
            built
        };
        match (&d.kind, g.sharing) {
            (Kind::Partition { profile, slices }, _) => {
                attributes.insert("type".into(), string("partition"));
                attributes.insert("profile".into(), string(profile));
                attributes.insert("parentUUID".into(), string(&g.uuid));
                device.consumes_counters = vec![CounterConsumption::new(
                    counter_set_name(g.index),
                    counters(&d.memory, *slices),
                )];
            }
            (Kind::Whole, Sharing::Partitioned) => {
                device.consumes_counters = vec![CounterConsumption::new(
                    counter_set_name(g.index),
                    counters(&g.model.memory, g.model.slices.unwrap_or(0)),
                )];
            }
            (Kind::Whole, Sharing::Shared) => {
                device.allow_multiple_allocations = true;
                let default = positive(&d.memory).ok().and_then(share_default);
                device.capacity.insert(
                    "memory".into(),
                    Capacity::new(d.memory.as_str()).request_policy(
                        RequestPolicy::new(default.map(Into::into)).valid_range(ValidRange::new(
                            SHARE_STEP.into(),
                            None,
                            Some(SHARE_STEP.into()),
                        )),
                    ),
                );
            }
            (Kind::Whole, Sharing::Exclusive) => {}
        }
        device.attributes = attributes;
        device
    }
}

impl NodeDevices for NodeLayout {
    fn node_name(&self) -> &str {
        &self.node_name
    }

    fn has_device(&self, name: &str) -> bool {
        self.device(name).is_some()
    }

    fn summary(&self) -> String {
        NodeLayout::summary(self)
    }
}

/// `{memory, slices}`: what a counter set has, or a device takes of it.
fn counters(memory: &str, slices: u32) -> BTreeMap<String, dra_kubelet_plugin::Quantity> {
    BTreeMap::from([
        ("memory".to_owned(), memory.into()),
        ("slices".to_owned(), slices.to_string().into()),
    ])
}
