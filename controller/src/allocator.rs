//! The allocation core: which free devices a claim gets, and which nodes cannot take a
//! Pod's claims. No I/O.
//!
//! An [`Allocator`] is a view built from two inputs, both read from the API:
//! the nodes' inventories (NodeAllocationState `spec`) and the claims' allocation
//! handles. It is a cache: dropping it and building it again from the same inputs gives
//! the same answers, which is what makes a restart of the controller safe.
//!
//! Decisions are deterministic: nodes are ordered by name, devices by id, and every tie
//! is broken by that order. Immediate claims go to the node that fits them most tightly
//! (best fit), which keeps large holes for large claims.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use fake_dra_api::handle::AllocationHandle;
use fake_dra_api::params::ClaimRequest;
use fake_dra_api::upstream::node_selector::{self, NodeView};
use k8s_openapi::api::core::v1::NodeSelector;

/// One node as the allocator sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeInput {
    /// The node's name (and its NodeAllocationState's).
    pub name: String,
    /// Whether the node's plugin is Ready; NotReady nodes get no new allocations.
    pub ready: bool,
    /// The Node object's labels, for `suitableNodes`; empty when the Node is unknown.
    pub labels: BTreeMap<String, String>,
    /// `(id, model)` of every device of the node.
    pub devices: Vec<(String, String)>,
}

/// What one claim asks for, with its class's node restriction.
#[derive(Debug, Clone, Copy)]
pub struct ClaimAsk<'a> {
    /// The validated parameters.
    pub request: &'a ClaimRequest,
    /// The class's `suitableNodes`; `None` means every node.
    pub suitable_nodes: Option<&'a NodeSelector>,
}

/// Why the recorded allocations are inconsistent. Never expected; reported, not fatal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// Two claims' handles name the same device.
    #[error("device {device} is in the allocations of both claim {first} and claim {second}")]
    Conflict {
        device: String,
        /// The claim recorded first.
        first: String,
        /// The claim being recorded.
        second: String,
    },
}

/// Why a claim can never be allocated with the current inventory, whatever is freed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unsatisfiable {
    /// No node has a device of the requested model.
    #[error("no node has devices of model {model:?}; known models: {known}")]
    UnknownModel {
        /// The requested model.
        model: String,
        /// The models the nodes have, comma-separated.
        known: String,
    },
    /// No node has that many devices (of the model).
    #[error("spec.count is {count}, but the largest node inventory{of_model} has {max} devices")]
    CountAboveInventory {
        /// The requested count.
        count: usize,
        /// ` of model "x"`, or empty.
        of_model: String,
        /// The largest per-node number of (matching) devices.
        max: usize,
    },
    /// No NodeAllocationState exists at all.
    #[error("no node publishes fake devices (no NodeAllocationState in the driver namespace)")]
    NoNodes,
}

/// Why a node cannot take a set of claims right now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeUnsuitable {
    /// No NodeAllocationState for the node.
    #[error("node {0} has no NodeAllocationState")]
    Unknown(String),
    /// The node's plugin is not Ready.
    #[error("node {0} is not Ready")]
    NotReady(String),
    /// The class's `suitableNodes` does not match the node.
    #[error("node {0} does not match the class's suitableNodes")]
    NotSelected(String),
    /// Not enough free devices of the needed model(s).
    #[error("node {0} has not enough free devices")]
    NoCapacity(String),
}

#[derive(Debug, Clone)]
struct Slot {
    id: String,
    model: u32,
    owner: Option<u32>,
}

#[derive(Debug, Clone)]
struct Node {
    name: String,
    ready: bool,
    labels: BTreeMap<String, String>,
    /// Sorted by id.
    devices: Vec<Slot>,
    /// Free devices per model index.
    free: BTreeMap<u32, usize>,
}

impl Node {
    fn max_free(&self) -> usize {
        self.free.values().copied().max().unwrap_or(0)
    }
}

#[derive(Debug, Clone)]
struct Owned {
    uid: String,
    node: u32,
    devices: Vec<u32>,
}

/// The devices of all nodes and who holds them; see the module docs.
#[derive(Debug, Clone, Default)]
pub struct Allocator {
    nodes: Vec<Node>,
    node_index: HashMap<String, u32>,
    device_index: HashMap<String, (u32, u32)>,
    models: Vec<String>,
    model_index: HashMap<String, u32>,
    /// Largest per-node inventory per model, for [`Allocator::check_satisfiable`].
    max_inventory: Vec<usize>,
    owners: Vec<Option<Owned>>,
    owner_index: HashMap<String, u32>,
    free_owner_slots: Vec<u32>,
    /// Ready nodes by (most free devices of one model, node index): the best-fit index.
    by_free: BTreeSet<(usize, u32)>,
    /// Ready nodes by (free devices of the model, node index), per model index.
    by_model_free: Vec<BTreeSet<(usize, u32)>>,
}

impl Allocator {
    /// A view of these nodes with nothing allocated. Nodes are ordered by name; a node
    /// listed twice keeps its last entry; a device id listed twice counts once.
    pub fn new(nodes: impl IntoIterator<Item = NodeInput>) -> Self {
        let mut by_name: BTreeMap<String, NodeInput> = BTreeMap::new();
        for node in nodes {
            by_name.insert(node.name.clone(), node);
        }
        let mut this = Self::default();
        for (idx, input) in by_name.into_values().enumerate() {
            let idx = idx as u32;
            let mut devices: Vec<(String, String)> = input.devices;
            devices.sort();
            devices.dedup_by(|a, b| a.0 == b.0);
            let mut slots = Vec::with_capacity(devices.len());
            let mut free = BTreeMap::new();
            for (id, model) in devices {
                if this.device_index.contains_key(&id) {
                    // The same id on two nodes: the first node (by name) keeps it.
                    continue;
                }
                let m = this.intern_model(&model);
                *free.entry(m).or_insert(0) += 1;
                this.device_index
                    .insert(id.clone(), (idx, slots.len() as u32));
                slots.push(Slot {
                    id,
                    model: m,
                    owner: None,
                });
            }
            for (&m, &n) in &free {
                let max = &mut this.max_inventory[m as usize];
                *max = (*max).max(n);
            }
            this.node_index.insert(input.name.clone(), idx);
            this.nodes.push(Node {
                name: input.name,
                ready: input.ready,
                labels: input.labels,
                devices: slots,
                free,
            });
        }
        for idx in 0..this.nodes.len() as u32 {
            this.index_insert(idx);
        }
        this
    }

    fn intern_model(&mut self, model: &str) -> u32 {
        if let Some(&m) = self.model_index.get(model) {
            return m;
        }
        let m = self.models.len() as u32;
        self.models.push(model.to_owned());
        self.model_index.insert(model.to_owned(), m);
        self.max_inventory.push(0);
        self.by_model_free.push(BTreeSet::new());
        m
    }

    fn index_insert(&mut self, idx: u32) {
        let node = &self.nodes[idx as usize];
        if !node.ready {
            return;
        }
        self.by_free.insert((node.max_free(), idx));
        for (&m, &n) in &node.free {
            self.by_model_free[m as usize].insert((n, idx));
        }
    }

    fn index_remove(&mut self, idx: u32) {
        let node = &self.nodes[idx as usize];
        if !node.ready {
            return;
        }
        self.by_free.remove(&(node.max_free(), idx));
        for (&m, &n) in &node.free {
            self.by_model_free[m as usize].remove(&(n, idx));
        }
    }

    /// Marks the devices of an existing allocation as taken. Devices the inventory does
    /// not know (a node that went away) are ignored: they cannot be handed out anyway.
    /// Recording the same claim again replaces its earlier record.
    pub fn record(&mut self, uid: &str, handle: &AllocationHandle) -> Result<(), RecordError> {
        self.release(uid);
        let mut taken = Vec::new();
        let mut node_of = None;
        for id in &handle.devices {
            let Some(&(n, d)) = self.device_index.get(id) else {
                continue;
            };
            if let Some(other) = self.nodes[n as usize].devices[d as usize].owner {
                let first = self.owners[other as usize]
                    .as_ref()
                    .map(|o| o.uid.clone())
                    .unwrap_or_default();
                return Err(RecordError::Conflict {
                    device: id.clone(),
                    first,
                    second: uid.to_owned(),
                });
            }
            if node_of.is_some_and(|node| node != n) {
                // A handle spanning nodes cannot come from us; record only the first node's.
                continue;
            }
            node_of = Some(n);
            taken.push(d);
        }
        if let Some(node) = node_of {
            self.take(uid, node, taken);
        }
        Ok(())
    }

    fn take(&mut self, uid: &str, node: u32, devices: Vec<u32>) {
        let slot = match self.free_owner_slots.pop() {
            Some(slot) => slot,
            None => {
                self.owners.push(None);
                (self.owners.len() - 1) as u32
            }
        };
        self.index_remove(node);
        let n = &mut self.nodes[node as usize];
        for &d in &devices {
            let dev = &mut n.devices[d as usize];
            dev.owner = Some(slot);
            if let Some(free) = n.free.get_mut(&dev.model) {
                *free -= 1;
            }
        }
        self.index_insert(node);
        self.owners[slot as usize] = Some(Owned {
            uid: uid.to_owned(),
            node,
            devices,
        });
        self.owner_index.insert(uid.to_owned(), slot);
    }

    /// Frees the devices held by claim `uid`; a claim holding nothing is fine.
    pub fn release(&mut self, uid: &str) {
        let Some(slot) = self.owner_index.remove(uid) else {
            return;
        };
        let Some(owned) = self.owners[slot as usize].take() else {
            return;
        };
        self.free_owner_slots.push(slot);
        self.index_remove(owned.node);
        let n = &mut self.nodes[owned.node as usize];
        for d in owned.devices {
            let dev = &mut n.devices[d as usize];
            dev.owner = None;
            *n.free.entry(dev.model).or_insert(0) += 1;
        }
        self.index_insert(owned.node);
    }

    /// Number of free devices, on all nodes (ready or not).
    pub fn free_devices(&self) -> usize {
        self.nodes
            .iter()
            .map(|n| n.free.values().sum::<usize>())
            .sum()
    }

    /// Whether the request could ever be met by the inventory as it is, ignoring what is
    /// allocated and which nodes are Ready. A failure here is the user's to fix.
    pub fn check_satisfiable(&self, request: &ClaimRequest) -> Result<(), Unsatisfiable> {
        if self.nodes.is_empty() {
            return Err(Unsatisfiable::NoNodes);
        }
        let (max, of_model) = match &request.model {
            Some(model) => match self.model_index.get(model) {
                Some(&m) => (
                    self.max_inventory[m as usize],
                    format!(" of model {model:?}"),
                ),
                None => {
                    let mut known: Vec<&str> = self.models.iter().map(String::as_str).collect();
                    known.sort_unstable();
                    return Err(Unsatisfiable::UnknownModel {
                        model: model.clone(),
                        known: if known.is_empty() {
                            "none".into()
                        } else {
                            known.join(", ")
                        },
                    });
                }
            },
            None => (
                self.max_inventory.iter().copied().max().unwrap_or(0),
                String::new(),
            ),
        };
        if request.count > max {
            return Err(Unsatisfiable::CountAboveInventory {
                count: request.count,
                of_model,
                max,
            });
        }
        Ok(())
    }

    fn selected(node: &Node, ask: &ClaimAsk<'_>) -> bool {
        ask.suitable_nodes.is_none_or(|sel| {
            node_selector::matches(
                sel,
                NodeView {
                    name: &node.name,
                    labels: &node.labels,
                },
            )
        })
    }

    /// Chooses the device ids for `asks` on one node, all or none. `scratch` holds free
    /// counts per model while earlier asks consume them.
    fn fit(&self, idx: u32, asks: &[ClaimAsk<'_>]) -> Result<Vec<(u32, usize)>, NodeUnsuitable> {
        let node = &self.nodes[idx as usize];
        if !node.ready {
            return Err(NodeUnsuitable::NotReady(node.name.clone()));
        }
        let mut free: Vec<(u32, usize)> = node.free.iter().map(|(&m, &n)| (m, n)).collect();
        let mut picks = Vec::with_capacity(asks.len());
        for ask in asks {
            if !Self::selected(node, ask) {
                return Err(NodeUnsuitable::NotSelected(node.name.clone()));
            }
            let count = ask.request.count;
            let choice = match &ask.request.model {
                Some(model) => {
                    let m = self.model_index.get(model).copied();
                    free.iter_mut()
                        .find(|(fm, n)| Some(*fm) == m && *n >= count)
                }
                // Best fit among the node's models; ties go to the lower model index,
                // which is stable for a given inventory.
                None => free
                    .iter_mut()
                    .filter(|(_, n)| *n >= count)
                    .min_by_key(|(m, n)| (*n, *m)),
            };
            let Some((m, n)) = choice else {
                return Err(NodeUnsuitable::NoCapacity(node.name.clone()));
            };
            *n -= count;
            picks.push((*m, count));
        }
        Ok(picks)
    }

    /// Whether `node` can take all of `asks` now.
    pub fn check_node(&self, node: &str, asks: &[ClaimAsk<'_>]) -> Result<(), NodeUnsuitable> {
        let &idx = self
            .node_index
            .get(node)
            .ok_or_else(|| NodeUnsuitable::Unknown(node.to_owned()))?;
        self.fit(idx, asks).map(|_| ())
    }

    /// The nodes of `potential` that cannot take all of `asks`, in the order given. A
    /// node that fails one ask fails them all (a Pod needs every claim on its node), so
    /// the one list applies to each of the Pod's claims.
    pub fn unsuitable_nodes<'n>(
        &self,
        potential: &'n [String],
        asks: &[ClaimAsk<'_>],
    ) -> Vec<&'n str> {
        potential
            .iter()
            .filter(|node| self.check_node(node, asks).is_err())
            .map(String::as_str)
            .collect()
    }

    /// Allocates all of `asks` on `node`, or nothing. Returns one handle per ask, in order;
    /// `uids[i]` becomes the owner of handle `i`.
    pub fn allocate_on(
        &mut self,
        node: &str,
        uids: &[&str],
        asks: &[ClaimAsk<'_>],
    ) -> Result<Vec<AllocationHandle>, NodeUnsuitable> {
        let &idx = self
            .node_index
            .get(node)
            .ok_or_else(|| NodeUnsuitable::Unknown(node.to_owned()))?;
        let picks = self.fit(idx, asks)?;
        let mut handles = Vec::with_capacity(asks.len());
        for ((uid, ask), (model, count)) in uids.iter().zip(asks).zip(picks) {
            let n = &self.nodes[idx as usize];
            let chosen: Vec<u32> = n
                .devices
                .iter()
                .enumerate()
                .filter(|(_, d)| d.owner.is_none() && d.model == model)
                .take(count)
                .map(|(i, _)| i as u32)
                .collect();
            let handle = AllocationHandle {
                node_name: n.name.clone(),
                model: self.models[model as usize].clone(),
                split: ask.request.split as u32,
                devices: chosen
                    .iter()
                    .map(|&d| n.devices[d as usize].id.clone())
                    .collect(),
            };
            self.take(uid, idx, chosen);
            handles.push(handle);
        }
        Ok(handles)
    }

    /// The node an Immediate claim goes to: among Ready nodes the class allows, the one
    /// with the fewest free devices that still fit (best fit), ties by name.
    pub fn pick_node(&self, ask: &ClaimAsk<'_>) -> Option<&str> {
        let count = ask.request.count;
        let index = match &ask.request.model {
            Some(model) => &self.by_model_free[*self.model_index.get(model)? as usize],
            None => &self.by_free,
        };
        index
            .range((count, 0)..)
            .map(|&(_, idx)| &self.nodes[idx as usize])
            .find(|node| Self::selected(node, ask))
            .map(|node| node.name.as_str())
    }

    /// Allocates an Immediate claim on the node [`pick_node`](Self::pick_node) chooses.
    pub fn allocate(&mut self, uid: &str, ask: &ClaimAsk<'_>) -> Option<AllocationHandle> {
        let node = self.pick_node(ask)?.to_owned();
        self.allocate_on(&node, &[uid], std::slice::from_ref(ask))
            .ok()?
            .pop()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
