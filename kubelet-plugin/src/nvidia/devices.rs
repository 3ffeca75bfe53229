//! A node's NVIDIA GPUs and the devices they publish, shaped as k8s-dra-driver-gpu
//! (cmd/gpu-kubelet-plugin) publishes them with MIG devices drawn from counters
//! (DynamicMIG): computed from the node name and the groups only, so a restart (or a
//! test, or fleet mode) gets the same names, uuids and PCI addresses.
//!
//! - GPU `<minor>` (numbered across the groups, in order) is `gpu-<minor>`, `type: gpu`;
//! - a MIG-enabled GPU has the counter set `gpu-<minor>-counter-set`: one counter per
//!   engine kind and `memory` (the most any profile has), and `memory-slice-<k>` = 1 for
//!   each of its memory slices. The whole GPU consumes all of it;
//! - each placement of each MIG profile is `gpu-<minor>-mig-<profile>-<profileID>-<start>`,
//!   `type: mig`, consuming its engines, its memory and the memory slices of its
//!   placement. Two placements that overlap share a memory slice, whose counter is 1, so
//!   the scheduler never allocates both.

use std::collections::BTreeMap;

use dra_kubelet_plugin::Quantity;
use dra_kubelet_plugin::device::{
    Attribute, Capacity, CounterConsumption, CounterSet, SliceDevice,
};

use super::NvidiaError;
use super::groups::{Mig, NvidiaGroup};
use super::models::{
    self, BRAND, CUDA_DRIVER_VERSION, DRIVER_VERSION, MEMORY_SLICES, MigProfile, Model,
};
use crate::gpu::devices::MAX_GPUS_PER_NODE;
use crate::shared::prepared::NodeDevices;
use crate::shared::{
    ATTR_NUMA_NODE, ATTR_PCI_BUS_ID, ATTR_PCIE_ROOT, check_publishable, pci_placement, stable_uuid,
};

/// The `type` attribute of a whole GPU.
pub const TYPE_GPU: &str = "gpu";
/// The `type` attribute of a MIG device.
pub const TYPE_MIG: &str = "mig";

/// The uuid of GPU `minor` of `node`: `GPU-<uuid>`, stable across restarts, distinct from
/// the gpu profile's.
pub fn gpu_uuid(node: &str, minor: usize) -> String {
    format!("GPU-{}", stable_uuid(&format!("nvidia/{node}/{minor}")))
}

/// The uuid a MIG device gets when prepared: `MIG-<uuid>`. The real driver's changes each
/// time it creates the device; this one is the same on every restart.
pub fn mig_uuid(node: &str, minor: usize, profile: &MigProfile, start: u32) -> String {
    let name = format!("nvidia/{node}/{minor}/mig/{}/{start}", profile.id);
    format!("MIG-{}", stable_uuid(&name))
}

/// The device name of GPU `minor`.
pub fn gpu_name(minor: usize) -> String {
    format!("gpu-{minor}")
}

/// The device name of the placement of `profile` starting at memory slice `start`, as the
/// real driver names it:
///
/// ```
/// use fake_dra_kubelet_plugin::nvidia::{devices::mig_name, models::model};
///
/// let a100 = model("A100-40GB").unwrap();
/// let me = a100.mig_profile("1g.5gb+me").unwrap();
/// assert_eq!(mig_name(3, me, 6), "gpu-3-mig-1g5gb-me-20-6");
/// ```
pub fn mig_name(minor: usize, profile: &MigProfile, start: u32) -> String {
    format!(
        "gpu-{minor}-mig-{}-{}-{start}",
        profile.name_part(),
        profile.id
    )
}

/// The counter set of MIG-enabled GPU `minor`.
pub fn counter_set_name(minor: usize) -> String {
    format!("gpu-{minor}-counter-set")
}

/// The counter of memory slice `k`.
pub fn memory_slice_counter(k: u32) -> String {
    format!("memory-slice-{k}")
}

/// Capacity names of a MIG profile's engines and memory, with the counters they are
/// drawn from (the capacity name in DNS-label form, as the real driver derives them).
pub const CAPACITIES: [(&str, &str); 7] = [
    ("multiprocessors", "multiprocessors"),
    ("copyEngines", "copy-engines"),
    ("decoders", "decoders"),
    ("encoders", "encoders"),
    ("jpegEngines", "jpeg-engines"),
    ("ofaEngines", "ofa-engines"),
    ("memory", "memory"),
];

/// A profile's amounts, in [`CAPACITIES`]' order (memory in MiB).
fn amounts(p: &MigProfile) -> [u64; 7] {
    [
        u64::from(p.multiprocessors),
        u64::from(p.copy_engines),
        u64::from(p.decoders),
        u64::from(p.encoders),
        u64::from(p.jpeg_engines),
        u64::from(p.ofa_engines),
        p.memory_mib,
    ]
}

/// The most of each amount any profile of `model` has: what the whole GPU offers when
/// its MIG devices are published (the real driver's "max capacities").
fn max_amounts(model: &Model) -> [u64; 7] {
    let mut max = [0u64; 7];
    for p in model.mig {
        for (m, a) in max.iter_mut().zip(amounts(p)) {
            *m = (*m).max(a);
        }
    }
    max
}

/// An amount as a quantity: memory in `Mi`, the rest plain.
fn quantity(index: usize, amount: u64) -> String {
    if CAPACITIES[index].0 == "memory" {
        format!("{amount}Mi")
    } else {
        amount.to_string()
    }
}

fn capacities(amounts: [u64; 7]) -> BTreeMap<String, Capacity> {
    amounts
        .iter()
        .enumerate()
        .map(|(i, a)| {
            (
                CAPACITIES[i].0.to_owned(),
                Capacity::from(quantity(i, *a).as_str()),
            )
        })
        .collect()
}

/// The counters of `amounts` and of memory slices `slices`, each 1.
fn counters(amounts: [u64; 7], slices: std::ops::Range<u32>) -> BTreeMap<String, Quantity> {
    let mut c: BTreeMap<String, Quantity> = amounts
        .iter()
        .enumerate()
        .map(|(i, a)| (CAPACITIES[i].1.to_owned(), quantity(i, *a).into()))
        .collect();
    for k in slices {
        c.insert(memory_slice_counter(k), "1".into());
    }
    c
}

/// One physical GPU of the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    /// Its minor number (`/dev/nvidia<minor>`): its position on the node.
    pub minor: usize,
    pub model: &'static Model,
    /// The MIG profiles it publishes; none: whole GPU only, no counters.
    pub mig: Vec<&'static MigProfile>,
    /// `GPU-<uuid>`.
    pub uuid: String,
    /// `pci0000:NN`.
    pub pcie_root: String,
    /// `0000:BB:00.0`.
    pub bus_id: String,
    /// The NUMA node of its socket.
    pub numa_node: i64,
}

impl Gpu {
    /// Whether it publishes MIG devices and its counter set.
    pub fn mig_enabled(&self) -> bool {
        !self.mig.is_empty()
    }
}

/// What a published device is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Whole,
    /// The placement of `profile` starting at memory slice `start`.
    Mig {
        profile: &'static MigProfile,
        start: u32,
    },
}

/// One device of the node's pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeDevice {
    /// The ResourceSlice name.
    pub name: String,
    /// The minor of its physical GPU.
    pub gpu: usize,
    pub kind: Kind,
    /// What containers see: the GPU's uuid, or the MIG device's.
    pub uuid: String,
}

/// A node's GPUs and devices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeLayout {
    pub node_name: String,
    pub gpus: Vec<Gpu>,
    /// In publication order: each GPU's devices sorted by name (the GPU first), as the
    /// real driver sorts them; the scheduler tries devices in this order.
    pub devices: Vec<NodeDevice>,
    by_name: BTreeMap<String, usize>,
}

/// Where a group came from, for errors: `--nvidia-gpus entry 1` or `nvidiaGpus[1]`.
fn group_label(field: &str, j: usize, g: &NvidiaGroup) -> String {
    if field.starts_with("--") {
        format!("{field} entry {j} ({g})")
    } else {
        format!("{field}[{j}] ({g})")
    }
}

/// The MIG profiles `mig` asks of `model`, checked.
fn mig_profiles(
    model: &'static Model,
    mig: &Mig,
    group: &dyn Fn() -> String,
) -> Result<Vec<&'static MigProfile>, NvidiaError> {
    let bad = |reason: String| NvidiaError::BadGroup {
        group: group(),
        reason,
    };
    if mig.enabled() && model.mig.is_empty() {
        return Err(bad(format!(
            "model {:?} has no MIG; the models with MIG are {}",
            model.name,
            models::mig_model_names()
        )));
    }
    match mig {
        Mig::Off => Ok(Vec::new()),
        Mig::All => Ok(model.mig.iter().collect()),
        Mig::Profiles(names) if names.is_empty() => Err(bad(
            "mig lists no profiles; give true for all of them, false for none".into(),
        )),
        Mig::Profiles(names) => {
            let mut chosen: Vec<&'static MigProfile> = Vec::new();
            for name in names {
                let Some(p) = model.mig_profile(name) else {
                    return Err(NvidiaError::UnknownMigProfile {
                        group: group(),
                        profile: name.chars().take(64).collect(),
                        model: model.name,
                        known: model.mig_names(),
                    });
                };
                if chosen.contains(&p) {
                    return Err(bad(format!("MIG profile {name:?} is listed twice")));
                }
                chosen.push(p);
            }
            // NVML's order, whatever the list's.
            Ok(model.mig.iter().filter(|p| chosen.contains(p)).collect())
        }
    }
}

impl NodeLayout {
    /// The devices of `node` with `groups`, checked: known models and MIG profiles, MIG
    /// only on models that have it, at most [`MAX_GPUS_PER_NODE`], and a pool every
    /// Kubernetes release the plugin serves can publish. `field` is where the groups came
    /// from (`--nvidia-gpus`, `nvidiaGpus`), for errors.
    pub fn new(node: &str, groups: &[NvidiaGroup], field: &str) -> Result<Self, NvidiaError> {
        if node.is_empty() {
            return Err(NvidiaError::NoNodeName);
        }
        if groups.is_empty() {
            return Err(NvidiaError::NoGpus);
        }
        let mut chosen = Vec::with_capacity(groups.len());
        let mut total: usize = 0;
        for (j, g) in groups.iter().enumerate() {
            let group = || group_label(field, j, g);
            let Some(model) = models::model(&g.model) else {
                return Err(NvidiaError::UnknownModel {
                    group: group(),
                    model: g.model.chars().take(64).collect(),
                    known: models::model_names(),
                });
            };
            if g.count == 0 {
                return Err(NvidiaError::BadGroup {
                    group: group(),
                    reason: "count must be at least 1".into(),
                });
            }
            let mig = mig_profiles(model, &g.mig, &group)?;
            total = total.saturating_add(g.count);
            chosen.push((model, mig, g.count));
        }
        if total > MAX_GPUS_PER_NODE {
            return Err(NvidiaError::TooManyGpus {
                count: total,
                max: MAX_GPUS_PER_NODE,
            });
        }
        let mut gpus = Vec::with_capacity(total);
        for (model, mig, count) in chosen {
            for _ in 0..count {
                let minor = gpus.len();
                let pci = pci_placement(minor, total);
                gpus.push(Gpu {
                    minor,
                    model,
                    mig: mig.clone(),
                    uuid: gpu_uuid(node, minor),
                    pcie_root: pci.pcie_root,
                    bus_id: pci.bus_id,
                    numa_node: pci.numa_node,
                });
            }
        }
        let mut devices = Vec::new();
        for g in &gpus {
            let mut own = vec![NodeDevice {
                name: gpu_name(g.minor),
                gpu: g.minor,
                kind: Kind::Whole,
                uuid: g.uuid.clone(),
            }];
            for &profile in &g.mig {
                for &start in profile.starts {
                    own.push(NodeDevice {
                        name: mig_name(g.minor, profile, start),
                        gpu: g.minor,
                        kind: Kind::Mig { profile, start },
                        uuid: mig_uuid(node, g.minor, profile, start),
                    });
                }
            }
            own.sort_by(|a, b| a.name.cmp(&b.name));
            devices.extend(own);
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
        check_publishable(
            &layout.node_name,
            layout.slice_devices(),
            layout.counter_sets(),
        )
        .map_err(|(release, source)| NvidiaError::Unpublishable { release, source })?;
        Ok(layout)
    }

    /// The device called `name`.
    pub fn device(&self, name: &str) -> Option<&NodeDevice> {
        self.by_name.get(name).and_then(|&i| self.devices.get(i))
    }

    /// The GPU a device is on.
    pub fn gpu_of(&self, d: &NodeDevice) -> Option<&Gpu> {
        self.gpus.get(d.gpu)
    }

    /// The memory slices a device takes of its GPU, named `gpu-<minor>/memory-slice-<k>`:
    /// all of them for a whole MIG-enabled GPU, none for a GPU without MIG.
    pub fn memory_slices(&self, d: &NodeDevice) -> Vec<String> {
        let Some(g) = self.gpu_of(d) else {
            return Vec::new();
        };
        let slices = match d.kind {
            Kind::Whole if g.mig_enabled() => 0..MEMORY_SLICES,
            Kind::Whole => 0..0,
            Kind::Mig { profile, start } => profile.slices_at(start),
        };
        slices
            .map(|k| format!("{}/{}", gpu_name(g.minor), memory_slice_counter(k)))
            .collect()
    }

    /// The counter sets of the MIG-enabled GPUs.
    pub fn counter_sets(&self) -> Vec<CounterSet> {
        self.gpus
            .iter()
            .filter(|g| g.mig_enabled())
            .map(|g| {
                CounterSet::new(
                    counter_set_name(g.minor),
                    counters(max_amounts(g.model), 0..MEMORY_SLICES),
                )
            })
            .collect()
    }

    /// The pool's devices.
    pub fn slice_devices(&self) -> Vec<SliceDevice> {
        self.devices
            .iter()
            .filter_map(|d| Some(slice_device(d, self.gpu_of(d)?)))
            .collect()
    }

    /// What the node has, for an error about a device it does not have.
    pub fn summary(&self) -> String {
        let mig = self.devices.len().saturating_sub(self.gpus.len());
        let mut s = format!(
            "{} GPU(s), gpu-0 to gpu-{}",
            self.gpus.len(),
            self.gpus.len().saturating_sub(1)
        );
        if let Some(first) = self
            .devices
            .iter()
            .find(|d| matches!(d.kind, Kind::Mig { .. }))
        {
            s.push_str(&format!(", and {mig} MIG device(s) such as {}", first.name));
        }
        s
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

/// The attributes every device of GPU `g` has, whole or MIG.
fn common_attributes(g: &Gpu) -> BTreeMap<String, Attribute> {
    let string = |s: &str| Attribute::String(s.to_owned());
    let version = |s: &str| Attribute::Version(s.to_owned());
    BTreeMap::from([
        ("productName".to_owned(), string(g.model.product_name)),
        ("brand".to_owned(), string(BRAND)),
        ("architecture".to_owned(), string(g.model.architecture)),
        (
            "cudaComputeCapability".to_owned(),
            version(g.model.compute_capability),
        ),
        ("driverVersion".to_owned(), version(DRIVER_VERSION)),
        ("cudaDriverVersion".to_owned(), version(CUDA_DRIVER_VERSION)),
        (ATTR_PCI_BUS_ID.to_owned(), string(&g.bus_id)),
        (ATTR_PCIE_ROOT.to_owned(), string(&g.pcie_root)),
        // Scalar, as the real driver publishes it without its DRAListTypeAttributes gate.
        (ATTR_NUMA_NODE.to_owned(), Attribute::Int(g.numa_node)),
    ])
}

fn slice_device(d: &NodeDevice, g: &Gpu) -> SliceDevice {
    let mut attributes = common_attributes(g);
    let mut device = SliceDevice::new(d.name.clone());
    match d.kind {
        Kind::Whole => {
            attributes.insert("type".into(), Attribute::String(TYPE_GPU.into()));
            attributes.insert("uuid".into(), Attribute::String(g.uuid.clone()));
            if g.mig_enabled() {
                let max = max_amounts(g.model);
                device.capacity = capacities(max);
                device.consumes_counters = vec![CounterConsumption::new(
                    counter_set_name(g.minor),
                    counters(max, 0..MEMORY_SLICES),
                )];
            } else {
                device.capacity = BTreeMap::from([(
                    "memory".to_owned(),
                    Capacity::from(format!("{}Mi", g.model.memory_mib).as_str()),
                )]);
            }
        }
        Kind::Mig { profile, start } => {
            // No `uuid`: the real driver creates a MIG device only when a claim is
            // prepared, so what it publishes has none yet.
            attributes.insert("type".into(), Attribute::String(TYPE_MIG.into()));
            attributes.insert("parentUUID".into(), Attribute::String(g.uuid.clone()));
            attributes.insert("profile".into(), Attribute::String(profile.name.into()));
            device.capacity = capacities(amounts(profile));
            device.consumes_counters = vec![CounterConsumption::new(
                counter_set_name(g.minor),
                counters(amounts(profile), profile.slices_at(start)),
            )];
        }
    }
    device.attributes = attributes;
    device
}
