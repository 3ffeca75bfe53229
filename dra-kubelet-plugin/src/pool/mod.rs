//! The node's ResourceSlices, without I/O: which slices the pool needs ([`pack`]), what
//! to change given the slices the API server has ([`plan`]), and what the API server
//! dropped ([`dropped_features`]). The `v1`/`v1beta1` objects are [`convert`]; the
//! adapter is [`crate::slice_controller`], and a node simulator (feature `fleet`)
//! publishes the same slices for many nodes.
//!
//! A node's devices are in its own pool, named after the node, unless the driver puts
//! some in pools of their own, `<node>/<name>` ([`node_pools`]). A pool is as many slices as its devices and
//! counter sets need under the API's per-slice limits (`resourceSliceCount` says how
//! many); the pool generation goes up whenever what is published changes, so the
//! scheduler never mixes an old slice with a new one.

mod check;
pub mod convert;
mod plan;

use crate::model::{CounterLayout, CounterSet, SliceDevice, SliceSplit, TaintRules};

use check::{check_items, over};
pub use convert::{from_v1, from_v1beta1, to_v1, to_v1beta1};
#[cfg(feature = "fleet")]
pub use plan::Existing;
pub use plan::{SlicePlan, dropped_features, is_ours, plan};

/// `k8s.io/api/resource/v1` limits per slice and device, by layout (1.34's
/// `ResourceSliceMax*` constants, then 1.35's).
#[derive(Debug, Clone, Copy)]
struct Limits {
    devices: usize,
    /// With taints or counters in the slice (1.35+ `ResourceSliceMaxDevicesWithAdvancedFeatures`).
    advanced_devices: usize,
    /// `sharedCounters` entries per slice.
    counter_sets: usize,
    /// Counters over all counter sets of a slice (1.34).
    shared_counters: usize,
    /// Counters over all devices of a slice (1.34).
    device_counters: usize,
    /// `consumesCounters` entries per device.
    consumptions_per_device: usize,
    /// Counters of one counter set, or of one device's consumption.
    counters_per_set: usize,
    /// Taints per device ([`TaintRules::max_per_device`]).
    taints: usize,
}

/// Attributes and capacities per device, in every release.
pub const MAX_ATTRIBUTES_AND_CAPACITIES: usize = 32;

impl Limits {
    fn of(layout: CounterLayout) -> Self {
        match layout {
            CounterLayout::WithDevices => Self {
                devices: 128,
                advanced_devices: 128,
                counter_sets: usize::MAX,
                shared_counters: 32,
                device_counters: 1024,
                consumptions_per_device: usize::MAX,
                counters_per_set: 32,
                taints: TaintRules::of(layout).max_per_device,
            },
            CounterLayout::Separate => Self {
                devices: 128,
                advanced_devices: 64,
                counter_sets: 8,
                shared_counters: usize::MAX,
                device_counters: usize::MAX,
                consumptions_per_device: 2,
                counters_per_set: 32,
                taints: TaintRules::of(layout).max_per_device,
            },
        }
    }
}

/// What one slice of the pool lists.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SliceContent {
    /// `devices`.
    pub devices: Vec<SliceDevice>,
    /// `sharedCounters`.
    pub counter_sets: Vec<CounterSet>,
}

/// A slice of ours as the API has it, in version-neutral form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedSlice {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.resourceVersion`, for updates.
    pub resource_version: Option<String>,
    /// `spec.driver`.
    pub driver: String,
    /// `spec.nodeName`.
    pub node_name: Option<String>,
    /// `spec.pool.name`.
    pub pool: String,
    /// `spec.pool.generation`.
    pub generation: i64,
    /// `spec.pool.resourceSliceCount`.
    pub slice_count: i64,
    /// `spec.devices` and `spec.sharedCounters`.
    pub content: SliceContent,
}

/// What to publish for one pool of a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    /// The driver name.
    pub driver: String,
    /// The node.
    pub node_name: String,
    /// The pool: the node's name, or `<node>/<name>` for another pool of the node.
    pub pool: String,
    /// The devices.
    pub devices: Vec<SliceDevice>,
    /// The counter sets the devices consume from.
    pub counter_sets: Vec<CounterSet>,
    /// Where the counter sets go.
    pub layout: CounterLayout,
    /// How devices are spread over slices.
    pub split: SliceSplit,
}

impl Desired {
    /// `generateName` of our slices: `<pool>-<driver>-`, with `-` for `/`.
    pub fn generate_name(&self) -> String {
        format!("{}-{}-", self.pool.replace('/', "-"), self.driver)
    }
}

/// Why the devices cannot be published; names the device or counter set and the limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PackError {
    /// An amount that is not a quantity (the API server would refuse the slice).
    #[error("{what} {name:?}: {field}: {source}")]
    NotAQuantity {
        /// What it is about (device, counter set).
        what: &'static str,
        /// Its name.
        name: String,
        /// The field, e.g. `capacity.memory.value`.
        field: String,
        /// Why it is not one.
        source: crate::quantity::QuantityError,
    },
    /// Two devices, or two counter sets, of one name.
    #[error("{what} {name:?} is listed twice; names must be unique in the node's pool")]
    Duplicate {
        /// What it is about (device, counter set).
        what: &'static str,
        /// Its name.
        name: String,
    },
    /// A device over the attribute and capacity limit.
    #[error(
        "device {device:?} has {count} attributes and capacities; a ResourceSlice device holds at most {MAX_ATTRIBUTES_AND_CAPACITIES}"
    )]
    TooManyAttributes {
        /// The device.
        device: String,
        /// How many it has.
        count: usize,
    },
    /// A counter consumption that names nothing.
    #[error("device {device:?} consumes from counter set {set:?}, which the pool does not have")]
    UnknownCounterSet {
        /// The device.
        device: String,
        /// The counter set.
        set: String,
    },
    /// A counter consumption of a counter the set does not have.
    #[error(
        "device {device:?} consumes counter {counter:?} of counter set {set:?}, which has no such counter"
    )]
    UnknownCounter {
        /// The device.
        device: String,
        /// The counter set.
        set: String,
        /// The counter.
        counter: String,
    },
    /// A pool name the API would refuse.
    #[error(
        "device {device:?}: pool {pool:?} is not a DNS subdomain (lowercase letters, digits, '-' and '.', at most 253 characters with the node's name and '/')"
    )]
    BadPoolName {
        /// A device the driver put in it.
        device: String,
        /// The name the driver gave.
        pool: String,
    },
    /// A counter set whose consumers are in more than one pool.
    #[error(
        "counter set {set:?} is consumed by devices of pools {first:?} and {second:?}; counters are shared within one pool only"
    )]
    CounterSetAcrossPools {
        /// The counter set.
        set: String,
        /// One pool of its consumers.
        first: String,
        /// Another.
        second: String,
    },
    /// More than the layout allows.
    #[error(
        "{what} {name:?} has {count} {items}; the Kubernetes release serving this pool allows at most {max}"
    )]
    OverLimit {
        /// What it is about (device, counter set).
        what: &'static str,
        /// Its name.
        name: String,
        /// How many it has.
        count: usize,
        /// What is counted.
        items: &'static str,
        /// `max`.
        max: usize,
    },
}

/// Splits a node's devices and counter sets (`node`, with the node's name as its pool)
/// into the pools the driver asks for: `pool_of` names a device's pool other than the
/// node's (`Some(name)`: pool `<node>/<name>`). A counter set goes with the devices that
/// consume it. The node's pool is kept, empty, when no device is in it and no other pool
/// has any, so the scheduler sees that the node has none. Device names stay unique over
/// all the node's pools, so a claim's device names say which devices it holds.
pub fn node_pools(
    node: Desired,
    pool_of: impl Fn(&str) -> Option<String>,
) -> Result<Vec<Desired>, PackError> {
    let mut seen = std::collections::BTreeSet::new();
    for d in &node.devices {
        if !seen.insert(d.name.as_str()) {
            return Err(PackError::Duplicate {
                what: "device",
                name: d.name.clone(),
            });
        }
    }
    let mut pools: std::collections::BTreeMap<String, Desired> = std::collections::BTreeMap::new();
    let mut set_pool: std::collections::BTreeMap<String, String> =
        std::collections::BTreeMap::new();
    let template = Desired {
        devices: Vec::new(),
        counter_sets: Vec::new(),
        ..node.clone()
    };
    for d in node.devices {
        let pool = match pool_of(&d.name) {
            None => node.pool.clone(),
            Some(name) => {
                let full = format!("{}/{name}", node.node_name);
                if !is_pool_name(&full) || name.is_empty() {
                    return Err(PackError::BadPoolName {
                        device: d.name,
                        pool: name,
                    });
                }
                full
            }
        };
        for c in &d.consumes_counters {
            if let Some(other) = set_pool.insert(c.counter_set.clone(), pool.clone())
                && other != pool
            {
                return Err(PackError::CounterSetAcrossPools {
                    set: c.counter_set.clone(),
                    first: other,
                    second: pool,
                });
            }
        }
        pools
            .entry(pool.clone())
            .or_insert_with(|| Desired {
                pool,
                ..template.clone()
            })
            .devices
            .push(d);
    }
    for set in node.counter_sets {
        let pool = set_pool
            .get(&set.name)
            .cloned()
            .unwrap_or_else(|| node.pool.clone());
        pools
            .entry(pool.clone())
            .or_insert_with(|| Desired {
                pool,
                ..template.clone()
            })
            .counter_sets
            .push(set);
    }
    if pools.is_empty() {
        pools.insert(node.pool.clone(), template);
    }
    Ok(pools.into_values().collect())
}

/// `ResourcePool.name` as the API validates it (`validatePoolName`): DNS subdomains
/// joined by `/`, at most 253 characters in all.
fn is_pool_name(name: &str) -> bool {
    name.len() <= 253 && name.split('/').all(crate::claim_reader::is_dns_subdomain)
}

fn is_advanced(d: &SliceDevice) -> bool {
    !d.taints.is_empty() || !d.consumes_counters.is_empty()
}

fn device_counters(d: &SliceDevice) -> usize {
    d.consumes_counters.iter().map(|c| c.counters.len()).sum()
}

/// Splits the pool into slices under the per-slice limits of `desired.layout`: the same
/// input always gives the same slices, in order. A pool with no devices is one empty
/// slice, so the scheduler sees that the node has none.
pub fn pack(desired: &Desired) -> Result<Vec<SliceContent>, PackError> {
    let limits = Limits::of(desired.layout);
    check_items(desired, limits)?;
    let mut slices = match desired.layout {
        CounterLayout::Separate => pack_separate(desired, limits),
        CounterLayout::WithDevices => pack_with_devices(desired, limits)?,
    };
    if slices.is_empty() {
        slices.push(SliceContent::default());
    }
    Ok(slices)
}

/// Fills slices with devices in order, closing one when the next device would go over.
fn fill_devices<'a>(
    devices: impl IntoIterator<Item = &'a SliceDevice>,
    limits: Limits,
) -> Vec<Vec<SliceDevice>> {
    let mut chunks: Vec<Vec<SliceDevice>> = Vec::new();
    let mut current: Vec<SliceDevice> = Vec::new();
    let mut advanced = false;
    for d in devices {
        let next_advanced = advanced || is_advanced(d);
        let max = if next_advanced {
            limits.advanced_devices
        } else {
            limits.devices
        };
        if current.len() + 1 > max {
            chunks.push(std::mem::take(&mut current));
            advanced = is_advanced(d);
        } else {
            advanced = next_advanced;
        }
        current.push(d.clone());
    }
    if !current.is_empty() {
        chunks.push(current);
    }
    chunks
}

/// 1.35+: counter sets eight to a slice, then the devices.
fn pack_separate(desired: &Desired, limits: Limits) -> Vec<SliceContent> {
    let mut slices: Vec<SliceContent> = desired
        .counter_sets
        .chunks(limits.counter_sets)
        .map(|sets| SliceContent {
            devices: Vec::new(),
            counter_sets: sets.to_vec(),
        })
        .collect();
    let device_slices = match desired.split {
        SliceSplit::Packed => fill_devices(&desired.devices, limits),
        SliceSplit::PerCounterSet => {
            let first_set = |d: &SliceDevice| {
                d.consumes_counters.first().and_then(|c| {
                    desired
                        .counter_sets
                        .iter()
                        .position(|s| s.name == c.counter_set)
                })
            };
            let mut by_set: Vec<Vec<&SliceDevice>> = vec![Vec::new(); desired.counter_sets.len()];
            let mut plain = Vec::new();
            for d in &desired.devices {
                match first_set(d) {
                    Some(i) => by_set[i].push(d),
                    None => plain.push(d),
                }
            }
            let mut chunks: Vec<Vec<SliceDevice>> = by_set
                .into_iter()
                .flat_map(|group| fill_devices(group, limits))
                .collect();
            chunks.extend(fill_devices(plain, limits));
            chunks
        }
    };
    slices.extend(device_slices.into_iter().map(|devices| SliceContent {
        devices,
        counter_sets: Vec::new(),
    }));
    slices
}

/// A counter set group of 1.34: sets joined by devices consuming from more than one,
/// which must share a slice with all of them.
#[derive(Debug, Default)]
struct Group {
    sets: Vec<usize>,
    devices: Vec<usize>,
}

/// 1.34: each group of counter sets with its devices in one slice (groups share a slice
/// while the limits allow), then the devices without counters.
fn pack_with_devices(desired: &Desired, limits: Limits) -> Result<Vec<SliceContent>, PackError> {
    let set_index = |name: &str| desired.counter_sets.iter().position(|s| s.name == name);
    // Union-find over counter sets.
    let mut parent: Vec<usize> = (0..desired.counter_sets.len()).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    for d in &desired.devices {
        let sets: Vec<usize> = d
            .consumes_counters
            .iter()
            .filter_map(|c| set_index(&c.counter_set))
            .collect();
        for pair in sets.windows(2) {
            let (a, b) = (root(&mut parent, pair[0]), root(&mut parent, pair[1]));
            parent[a] = b;
        }
    }
    let mut groups: Vec<Group> = Vec::new();
    let mut group_of_root: Vec<Option<usize>> = vec![None; desired.counter_sets.len()];
    for i in 0..desired.counter_sets.len() {
        let r = root(&mut parent, i);
        let g = *group_of_root[r].get_or_insert_with(|| {
            groups.push(Group::default());
            groups.len() - 1
        });
        groups[g].sets.push(i);
    }
    let mut plain = Vec::new();
    for (i, d) in desired.devices.iter().enumerate() {
        match d
            .consumes_counters
            .first()
            .and_then(|c| set_index(&c.counter_set))
        {
            Some(s) => {
                let r = root(&mut parent, s);
                if let Some(g) = group_of_root[r] {
                    groups[g].devices.push(i);
                }
            }
            None => plain.push(i),
        }
    }
    let shared = |g: &Group| -> usize {
        g.sets
            .iter()
            .map(|&s| desired.counter_sets[s].counters.len())
            .sum()
    };
    let counters = |g: &Group| -> usize {
        g.devices
            .iter()
            .map(|&d| device_counters(&desired.devices[d]))
            .sum()
    };
    let mut slices: Vec<(Group, usize, usize)> = Vec::new();
    for g in groups {
        let name = desired.counter_sets[g.sets[0]].name.clone();
        over(
            "counter set group of",
            &name,
            g.devices.len(),
            "devices",
            limits.devices,
        )?;
        over(
            "counter set group of",
            &name,
            shared(&g),
            "shared counters",
            limits.shared_counters,
        )?;
        over(
            "counter set group of",
            &name,
            counters(&g),
            "device counters",
            limits.device_counters,
        )?;
        let (s, c) = (shared(&g), counters(&g));
        let packed = desired.split == SliceSplit::Packed;
        match slices.iter_mut().find(|(open, os, oc)| {
            packed
                && open.devices.len() + g.devices.len() <= limits.devices
                && os + s <= limits.shared_counters
                && oc + c <= limits.device_counters
        }) {
            Some((open, os, oc)) => {
                open.sets.extend(&g.sets);
                open.devices.extend(&g.devices);
                *os += s;
                *oc += c;
            }
            None => slices.push((g, s, c)),
        }
    }
    let mut out: Vec<SliceContent> = slices
        .into_iter()
        .map(|(g, _, _)| {
            let mut devices = g.devices;
            devices.sort_unstable();
            SliceContent {
                devices: devices
                    .iter()
                    .map(|&d| desired.devices[d].clone())
                    .collect(),
                counter_sets: g
                    .sets
                    .iter()
                    .map(|&s| desired.counter_sets[s].clone())
                    .collect(),
            }
        })
        .collect();
    // Devices without counters top up the counter slices (when packed), then get slices
    // of their own.
    let mut rest = plain.into_iter().map(|i| &desired.devices[i]).peekable();
    let topped_up = match desired.split {
        SliceSplit::Packed => out.as_mut_slice(),
        SliceSplit::PerCounterSet => &mut [],
    };
    for slice in topped_up {
        while slice.devices.len() < limits.devices {
            match rest.next() {
                Some(d) => slice.devices.push(d.clone()),
                None => break,
            }
        }
    }
    out.extend(
        fill_devices(rest, limits)
            .into_iter()
            .map(|devices| SliceContent {
                devices,
                counter_sets: Vec::new(),
            }),
    );
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
