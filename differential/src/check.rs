//! The independent checker, written from the API's rules (k8s.io/api resource/v1
//! `types.go`: what a request, its allocation mode, its selectors, tolerations and a
//! claim's `matchAttribute` constraints mean), not from either scheduler's code: whether
//! an allocation an oracle made is valid, and whether a pod an oracle left unschedulable
//! had a valid allocation (an exhaustive search over the small worlds generated).
//!
//! Pods are scheduled one after the other; each oracle is judged on its own trajectory:
//! the devices its earlier pods hold are taken for the later ones.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::world::{ClaimSpec, DeviceSpec, Mode, NodeSpec, RequestSpec, World};

/// A device, by node (= pool) and name.
pub type DeviceKey = (String, String);

/// What allocations hold: devices given whole, of each shared device what its shares
/// take together, and of each node's counter what its allocated devices consume.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Held {
    pub whole: BTreeSet<DeviceKey>,
    pub shares: BTreeMap<DeviceKey, i64>,
    pub counters: BTreeMap<String, i64>,
    /// Devices given with admin access in the pod being searched: each at most once.
    pub admin: BTreeSet<DeviceKey>,
    /// Admin access checks and takes counters as ordinary allocations do: Kubernetes
    /// 1.37.2's allocator (kubernetes/kubernetes#140729), not the API's rule; set only to
    /// tell that defect apart.
    pub admin_pays_counters: bool,
}

impl Held {
    fn share_load(&self, key: &DeviceKey) -> i64 {
        self.shares.get(key).copied().unwrap_or(0)
    }

    /// Whether `device` of `node` can go to `request` besides what is held here and in
    /// `more` (the current search's own): a device given whole to no one, or a share
    /// that fits the device's capacity beside its other shares. A share also takes all
    /// of each other capacity of the device, which has no request policy ("for any
    /// capacity that is not explicitly requested: if no requestPolicy is set, the default
    /// consumed capacity is equal to the full device capacity", `CapacityRequirements`),
    /// so such a device has one share at a time. A device that consumes counters needs
    /// what it consumes left in its node's counter set ("the device can only be allocated
    /// if [the counters] are available", `DeviceCounterConsumption`); a shared device
    /// consumes them once, with its first share.
    fn can_take(
        &self,
        more: &Held,
        node: &NodeSpec,
        device: &DeviceSpec,
        request: &RequestSpec,
    ) -> bool {
        self.fit(more, node, device, request).is_ok()
    }

    /// [`Held::can_take`], saying which part does not fit.
    fn fit(
        &self,
        more: &Held,
        node: &NodeSpec,
        device: &DeviceSpec,
        request: &RequestSpec,
    ) -> Result<(), Misfit> {
        let key = (node.name.clone(), device.name.clone());
        // Admin access ignores "all ordinary claims to the device with respect to access
        // modes and any resource allocations" (`ExactDeviceRequest`); within the pod a
        // device still goes once, unless it allows multiple allocations (kube-scheduler
        // 1.37.2 gives such a device to two admin requests of a claim: seed 9040).
        let free = if request.admin {
            device.shared.is_some()
                || (!more.whole.contains(&key)
                    && !more.admin.contains(&key)
                    && more.share_load(&key) == 0)
        } else {
            match (device.shared, request.share_of(device)) {
                (Some(shared), Some(share)) => {
                    let others = self.share_load(&key) + more.share_load(&key);
                    others + share <= shared.value && (device.capacity.is_empty() || others == 0)
                }
                _ => !self.whole.contains(&key) && !more.whole.contains(&key),
            }
        };
        if !free {
            return Err(Misfit::Device);
        }
        let pays = if request.admin {
            more.admin_pays_counters
        } else {
            self.pays_counters(more, &key, device, request)
        };
        if let Some(amount) = device.consumes
            && pays
        {
            let used = |h: &Held| h.counters.get(&node.name).copied().unwrap_or(0);
            if used(self) + used(more) + amount > node.counter.unwrap_or(0) {
                return Err(Misfit::Counters);
            }
        }
        Ok(())
    }

    /// Whether giving `device` to `request` now charges its counters: a device given whole
    /// does; a share only when it is the device's first (here and in `more`).
    fn pays_counters(
        &self,
        more: &Held,
        key: &DeviceKey,
        device: &DeviceSpec,
        request: &RequestSpec,
    ) -> bool {
        request.share_of(device).is_none() || self.share_load(key) + more.share_load(key) == 0
    }

    /// Adds (`sign` 1) or takes back (-1) what `device` consumes of its node's counter.
    fn charge(&mut self, node: &str, device: &DeviceSpec, sign: i64) {
        if let Some(amount) = device.consumes {
            *self.counters.entry(node.to_owned()).or_default() += sign * amount;
        }
    }

    /// Records `device` given to `request` besides `base` (what else is held); false
    /// when it was given whole already.
    fn take(
        &mut self,
        base: &Held,
        node: &str,
        device: &DeviceSpec,
        request: &RequestSpec,
    ) -> bool {
        let key = (node.to_owned(), device.name.clone());
        if request.admin {
            if device.shared.is_none() && !self.admin.insert(key) {
                return false;
            }
            if self.admin_pays_counters {
                self.charge(node, device, 1);
            }
            return true;
        }
        let pays = self.pays_counters(base, &key, device, request);
        match request.share_of(device) {
            Some(share) => *self.shares.entry(key).or_default() += share,
            None if !self.whole.insert(key) => return false,
            None => {}
        }
        if pays {
            self.charge(node, device, 1);
        }
        true
    }

    /// Undoes [`Held::take`] of the same arguments.
    fn give_back(&mut self, base: &Held, node: &str, device: &DeviceSpec, request: &RequestSpec) {
        let key = (node.to_owned(), device.name.clone());
        if request.admin {
            let removed = device.shared.is_some() || self.admin.remove(&key);
            if removed && self.admin_pays_counters {
                self.charge(node, device, -1);
            }
            return;
        }
        let removed = match request.share_of(device) {
            Some(share) => {
                *self.shares.entry(key.clone()).or_default() -= share;
                true
            }
            None => self.whole.remove(&key),
        };
        // After the removal, a share pays back only when it was the device's last.
        if removed && self.pays_counters(base, &key, device, request) {
            self.charge(node, device, -1);
        }
    }
}

/// Why a device cannot go to a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Misfit {
    /// Given whole already, or its shares' capacity spent.
    Device,
    /// Its node's counter set has not enough left.
    Counters,
}

/// What an oracle did with one pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PodOutcome {
    /// Bound to `node`; per claim, (request, pool, device) of each result.
    Scheduled {
        node: String,
        claims: Vec<Vec<(String, String, String)>>,
    },
    /// Left Pending with this reason (the scheduler's message).
    Unschedulable { message: String },
    /// Bound, then deleted before the world was done: kube-controller-manager's device
    /// taint eviction controller, for a device with a `NoExecute` taint.
    Evicted { node: String },
}

/// A rule an allocation breaks, or a feasible pod left unschedulable.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Violation {
    /// A claim of a scheduled pod has no allocation.
    ClaimNotAllocated { pod: String, claim: usize },
    /// A result names a device the node does not have (wrong pool, unknown device).
    UnknownDevice { pod: String, device: String },
    /// A device the request's class, selectors or tolerations do not admit.
    NotAdmitted {
        pod: String,
        request: String,
        device: String,
    },
    /// `ExactCount` with a different number of devices, or `All` not every matching one.
    WrongCount {
        pod: String,
        request: String,
        want: String,
        got: usize,
    },
    /// Results of one `firstAvailable` request from more than one of its subrequests.
    SubrequestsMixed { pod: String, request: String },
    /// A device given twice (to two requests or two claims).
    DeviceTwice { pod: String, device: String },
    /// Shares of a device that together take more than its capacity.
    CapacityExceeded { pod: String, device: String },
    /// A device whose counter consumption does not fit what its node's counter set has
    /// left.
    CountersExceeded { pod: String, device: String },
    /// A `matchAttribute` constraint unmet.
    ConstraintUnmet { pod: String, attribute: String },
    /// The pod had a valid allocation on this node, yet was left unschedulable.
    FeasibleButUnschedulable { pod: String, node: String },
    /// Two oracles, in the same state so far, did not agree whether the pod fits.
    OraclesDiffer {
        pod: String,
        first: String,
        second: String,
    },
    /// Two oracles, in the same state so far, bound the pod to the same node but chose
    /// other devices, where the release's rules make the choice determinate.
    ChoiceDiffers {
        pod: String,
        first: String,
        second: String,
    },
    /// Two oracles differ where a known upstream defect says why (docs/differential.md):
    /// reported, not counted as a disagreement.
    KnownUpstream { pod: String, defect: String },
    /// A violation of the named oracle's outcome (when several run).
    Of {
        oracle: String,
        violation: Box<Violation>,
    },
}

impl Violation {
    /// Whether a known upstream defect explains it, whichever oracle showed it.
    pub fn is_known_upstream(&self) -> bool {
        match self {
            Violation::KnownUpstream { .. } => true,
            Violation::Of { violation, .. } => violation.is_known_upstream(),
            _ => false,
        }
    }

    /// The kind, for the report.
    pub fn kind(&self) -> &'static str {
        match self {
            Violation::ClaimNotAllocated { .. } => "claim not allocated",
            Violation::UnknownDevice { .. } => "unknown device",
            Violation::NotAdmitted { .. } => "device not admitted",
            Violation::WrongCount { .. } => "wrong device count",
            Violation::SubrequestsMixed { .. } => "subrequests mixed",
            Violation::DeviceTwice { .. } => "device given twice",
            Violation::CapacityExceeded { .. } => "capacity exceeded",
            Violation::CountersExceeded { .. } => "counters exceeded",
            Violation::ConstraintUnmet { .. } => "matchAttribute unmet",
            Violation::FeasibleButUnschedulable { .. } => "feasible but unschedulable",
            Violation::OraclesDiffer { .. } => "oracles differ",
            Violation::ChoiceDiffers { .. } => "device choice differs",
            Violation::KnownUpstream { .. } => "known upstream defect",
            Violation::Of { violation, .. } => violation.kind(),
        }
    }
}

fn devices_of<'a>(world: &'a World, node: &str) -> Option<&'a NodeSpec> {
    world.nodes.iter().find(|n| n.name == node)
}

/// The devices of `node` that `request` of `claim` admits.
fn admitted<'a>(
    world: &World,
    node: &'a NodeSpec,
    request: &crate::world::RequestSpec,
) -> Vec<&'a DeviceSpec> {
    node.devices
        .iter()
        .filter(|d| request.admits(&world.classes, d))
        .collect()
}

/// The devices of `node` that `request` selects (an `All` request asks for all of them).
fn selected<'a>(world: &World, node: &'a NodeSpec, request: &RequestSpec) -> Vec<&'a DeviceSpec> {
    node.devices
        .iter()
        .filter(|d| request.selects(&world.classes, d))
        .collect()
}

/// Whether the devices chosen per request meet the claim's constraints.
fn constraints_met(claim: &ClaimSpec, chosen: &BTreeMap<&str, Vec<&DeviceSpec>>) -> Option<String> {
    for (attribute, bound) in &claim.match_attributes {
        let mut values = BTreeSet::new();
        for request in &claim.requests {
            if !bound.is_empty() && !bound.contains(&request.name) {
                continue;
            }
            for device in chosen.get(request.name.as_str()).into_iter().flatten() {
                match device.attributes.get(attribute) {
                    Some(v) => {
                        values.insert(v.clone());
                    }
                    None => return Some(attribute.clone()),
                }
            }
        }
        if values.len() > 1 {
            return Some(attribute.clone());
        }
    }
    None
}

/// The violations of `outcomes` (one per pod, in the world's order).
pub fn check(world: &World, outcomes: &[PodOutcome]) -> Vec<Violation> {
    let mut held = Held::default();
    let mut out = Vec::new();
    for (pod, outcome) in world.pods.iter().zip(outcomes) {
        match outcome {
            // What it held is released again; the eviction is compared, not judged.
            PodOutcome::Evicted { .. } => {}
            PodOutcome::Unschedulable { message } => {
                for node in &world.nodes {
                    if feasible(world, node, &pod.claims, &held) {
                        let known = constraint_gives_up(pod, message)
                            .or_else(|| admin_pays_counters(world, &pod.claims, &held));
                        out.push(match known {
                            Some(defect) => Violation::KnownUpstream {
                                pod: pod.name.clone(),
                                defect,
                            },
                            None => Violation::FeasibleButUnschedulable {
                                pod: pod.name.clone(),
                                node: node.name.clone(),
                            },
                        });
                        break;
                    }
                }
            }
            PodOutcome::Scheduled { node, claims } => {
                let Some(node_spec) = devices_of(world, node) else {
                    out.push(Violation::UnknownDevice {
                        pod: pod.name.clone(),
                        device: format!("{node}/*"),
                    });
                    continue;
                };
                for (index, claim) in pod.claims.iter().enumerate() {
                    let results = claims.get(index).map(Vec::as_slice).unwrap_or_default();
                    if results.is_empty() {
                        out.push(Violation::ClaimNotAllocated {
                            pod: pod.name.clone(),
                            claim: index,
                        });
                        continue;
                    }
                    let mut chosen: BTreeMap<&str, Vec<&DeviceSpec>> = BTreeMap::new();
                    // Per request, the alternative its results are of (`firstAvailable`).
                    let mut alternative: BTreeMap<&str, &RequestSpec> = BTreeMap::new();
                    // Devices given with admin access: they hold nothing for later pods.
                    let mut admin = Held::default();
                    for (request_name, pool, device) in results {
                        let found = (pool == node)
                            .then(|| node_spec.devices.iter().find(|d| &d.name == device))
                            .flatten();
                        let Some(found) = found else {
                            out.push(Violation::UnknownDevice {
                                pod: pod.name.clone(),
                                device: format!("{pool}/{device}"),
                            });
                            continue;
                        };
                        let request = RequestSpec::named(&claim.requests, request_name);
                        match request {
                            Some((parent, r)) if r.admits(&world.classes, found) => {
                                let first = *alternative.entry(parent.name.as_str()).or_insert(r);
                                if first.name != r.name {
                                    out.push(Violation::SubrequestsMixed {
                                        pod: pod.name.clone(),
                                        request: parent.name.clone(),
                                    });
                                }
                                let none = Held::default();
                                let fit = held.fit(&none, node_spec, found, r);
                                let (pod, device) = (pod.name.clone(), format!("{pool}/{device}"));
                                if r.admin {
                                    if !admin.take(&held, node, found, r) {
                                        out.push(Violation::DeviceTwice { pod, device });
                                    }
                                } else if !held.take(&none, node, found, r) {
                                    out.push(Violation::DeviceTwice { pod, device });
                                } else if fit == Err(Misfit::Device) {
                                    out.push(Violation::CapacityExceeded { pod, device });
                                } else if fit == Err(Misfit::Counters) {
                                    out.push(Violation::CountersExceeded { pod, device });
                                }
                                chosen.entry(parent.name.as_str()).or_default().push(found);
                            }
                            _ => out.push(Violation::NotAdmitted {
                                pod: pod.name.clone(),
                                request: request_name.clone(),
                                device: format!("{pool}/{device}"),
                            }),
                        }
                    }
                    for parent in &claim.requests {
                        let got = chosen.get(parent.name.as_str()).map_or(0, Vec::len);
                        let request = alternative
                            .get(parent.name.as_str())
                            .copied()
                            .unwrap_or(&parent.alternatives()[0]);
                        let (want, ok) = match request.mode {
                            Mode::Count(n) => (n.to_string(), got == n as usize),
                            Mode::All => {
                                let all = selected(world, node_spec, request).len();
                                (format!("all {all}"), got == all && all > 0)
                            }
                        };
                        if !ok {
                            out.push(Violation::WrongCount {
                                pod: pod.name.clone(),
                                request: parent.name.clone(),
                                want,
                                got,
                            });
                        }
                    }
                    if let Some(attribute) = constraints_met(claim, &chosen) {
                        out.push(Violation::ConstraintUnmet {
                            pod: pod.name.clone(),
                            attribute,
                        });
                    }
                }
            }
        }
    }
    out
}

fn describe(outcome: &PodOutcome) -> String {
    match outcome {
        PodOutcome::Scheduled { node, claims } => {
            let devices: Vec<String> = claims
                .iter()
                .flatten()
                .map(|(r, _, d)| format!("{r}={d}"))
                .collect();
            format!("scheduled on {node}: {}", devices.join(" "))
        }
        PodOutcome::Unschedulable { message } => format!("unschedulable: {message}"),
        PodOutcome::Evicted { node } => format!("bound to {node}, then evicted"),
    }
}

/// The defect of Kubernetes 1.37.2 that explains `pod` evicted by one oracle and not by
/// the other: the device taint eviction controller honours only tolerations whose effect
/// is `NoExecute` (pkg/controller/devicetainteviction, `claimEvictionTime`), while the
/// API (and the scheduler's allocator) let a toleration without an effect tolerate every
/// effect. Every generated toleration has no effect, so any `NoExecute` taint the pod's
/// requests tolerate explains it.
fn known_eviction_defect(world: &World, pod: &str) -> Option<String> {
    let pod = world.pods.iter().find(|p| p.name == pod)?;
    let tolerated_no_execute = world
        .nodes
        .iter()
        .flat_map(|n| &n.devices)
        .flat_map(|d| &d.taints)
        .filter(|t| t.effect == "NoExecute")
        .any(|t| {
            pod.claims
                .iter()
                .flat_map(|c| &c.requests)
                .flat_map(RequestSpec::alternatives)
                .any(|r| r.tolerations.contains(&t.key))
        });
    tolerated_no_execute.then(|| {
        "device-taint-eviction-controller ignores tolerations without an effect (Kubernetes 1.37.2; docs/differential.md#upstream)".to_owned()
    })
}

/// The behaviour of Kubernetes 1.37.2's allocator that explains `pod` left unschedulable
/// although a node could hold it: an `All` request under a `matchAttribute` constraint
/// whose devices on some node the constraint refuses is an error ("cannot add device …
/// because a claim constraint would not be satisfied", `allocateDevice` with `must`), and
/// a Filter error fails the scheduling attempt on every node, not only that one.
fn constraint_gives_up(pod: &crate::world::PodSpec, message: &str) -> Option<String> {
    let all_under_constraint = pod.claims.iter().any(|c| {
        !c.match_attributes.is_empty()
            && c.requests
                .iter()
                .flat_map(RequestSpec::alternatives)
                .any(|r| r.mode == Mode::All)
    });
    (all_under_constraint && message.contains("because a claim constraint would not be satisfied"))
        .then(|| {
            "an All request a constraint refuses on one node fails the pod everywhere (Kubernetes 1.37.2; docs/differential.md#upstream)".to_owned()
        })
}

/// The defect of Kubernetes 1.37.2 that explains a pod with admin access left
/// unschedulable although the API's rules let it fit: the allocator checks and takes the
/// counters of a device given with admin access as for an ordinary allocation
/// (kubernetes/kubernetes#140729, open), so a device whose counter set its ordinary
/// allocation spent cannot be had with admin access. It explains the outcome when no node
/// fits under that rule.
fn admin_pays_counters(world: &World, claims: &[ClaimSpec], held: &Held) -> Option<String> {
    let admin = claims.iter().flat_map(|c| &c.requests).any(|r| r.admin);
    let fits_as_upstream = world.nodes.iter().any(|node| {
        let mut used = Held {
            admin_pays_counters: true,
            ..Held::default()
        };
        search_claims(world, node, claims, held, &mut used)
    });
    (admin && !fits_as_upstream).then(|| {
        "admin access needs the counters its devices consume (kubernetes/kubernetes#140729; docs/differential.md#upstream)".to_owned()
    })
}

/// Where two oracles' outcomes part, while they were in the same state: pods are compared
/// in order until both bound one differently (from there, the devices free for the next
/// pods differ). Feasibility must agree; so must the devices of a pod both bound to the
/// same node. Upstream's allocator goes through the requests in order and, for each, the
/// node's devices in slice order (one slice per node here), backtracking depth-first, so
/// its first solution is determinate; which of several fitting nodes it binds is not
/// (kube-scheduler breaks ties between equal scores at random).
pub fn compare(world: &World, first: &[PodOutcome], second: &[PodOutcome]) -> Vec<Violation> {
    for ((pod, a), b) in world.pods.iter().zip(first).zip(second) {
        match (a, b) {
            (PodOutcome::Unschedulable { .. }, PodOutcome::Unschedulable { .. }) => {}
            (
                PodOutcome::Scheduled {
                    node: node_a,
                    claims: claims_a,
                },
                PodOutcome::Scheduled {
                    node: node_b,
                    claims: claims_b,
                },
            ) => {
                if node_a != node_b {
                    return Vec::new();
                }
                if claims_a != claims_b {
                    return vec![Violation::ChoiceDiffers {
                        pod: pod.name.clone(),
                        first: describe(a),
                        second: describe(b),
                    }];
                }
            }
            (PodOutcome::Evicted { .. }, PodOutcome::Scheduled { .. })
            | (PodOutcome::Scheduled { .. }, PodOutcome::Evicted { .. }) => {
                return vec![match known_eviction_defect(world, &pod.name) {
                    Some(defect) => Violation::KnownUpstream {
                        pod: pod.name.clone(),
                        defect,
                    },
                    None => Violation::OraclesDiffer {
                        pod: pod.name.clone(),
                        first: describe(a),
                        second: describe(b),
                    },
                }];
            }
            _ => {
                return vec![Violation::OraclesDiffer {
                    pod: pod.name.clone(),
                    first: describe(a),
                    second: describe(b),
                }];
            }
        }
    }
    Vec::new()
}

/// Whether `claims` can all be allocated on `node` beside what `held` holds.
pub fn feasible(world: &World, node: &NodeSpec, claims: &[ClaimSpec], held: &Held) -> bool {
    let mut used = Held::default();
    search_claims(world, node, claims, held, &mut used)
}

fn search_claims(
    world: &World,
    node: &NodeSpec,
    claims: &[ClaimSpec],
    held: &Held,
    used: &mut Held,
) -> bool {
    let Some((claim, rest)) = claims.split_first() else {
        return true;
    };
    let mut chosen: BTreeMap<&str, Vec<&DeviceSpec>> = BTreeMap::new();
    search_requests(
        world,
        node,
        claim,
        0,
        held,
        used,
        &mut chosen,
        &mut |used| search_claims(world, node, rest, held, used),
    )
}

#[allow(clippy::too_many_arguments)]
fn search_requests<'a>(
    world: &World,
    node: &'a NodeSpec,
    claim: &'a ClaimSpec,
    index: usize,
    held: &Held,
    used: &mut Held,
    chosen: &mut BTreeMap<&'a str, Vec<&'a DeviceSpec>>,
    then: &mut dyn FnMut(&mut Held) -> bool,
) -> bool {
    let Some(parent) = claim.requests.get(index) else {
        return constraints_met(claim, chosen).is_none() && then(used);
    };
    // A `firstAvailable` request is met by any one of its subrequests.
    for request in parent.alternatives() {
        let open = |d: &DeviceSpec, used: &Held| held.can_take(used, node, d, request);
        let sets: Vec<Vec<&DeviceSpec>> = match request.mode {
            Mode::All => {
                let all = selected(world, node, request);
                if all.is_empty() || !all.iter().all(|d| request.tolerates(d)) {
                    continue;
                }
                vec![all]
            }
            Mode::Count(n) => {
                let open: Vec<&DeviceSpec> = admitted(world, node, request)
                    .into_iter()
                    .filter(|d| open(d, used))
                    .collect();
                combinations(&open, n as usize)
            }
        };
        for set in sets {
            // One by one: devices that each fit may not fit together (counters).
            let mut taken = 0;
            for d in &set {
                if !open(d, used) {
                    break;
                }
                used.take(held, &node.name, d, request);
                taken += 1;
            }
            let found = taken == set.len() && {
                chosen.insert(parent.name.as_str(), set.clone());
                let found =
                    search_requests(world, node, claim, index + 1, held, used, chosen, then);
                chosen.remove(parent.name.as_str());
                found
            };
            for d in set.iter().take(taken).rev() {
                used.give_back(held, &node.name, d, request);
            }
            if found {
                return true;
            }
        }
    }
    false
}

fn combinations<'a>(items: &[&'a DeviceSpec], k: usize) -> Vec<Vec<&'a DeviceSpec>> {
    if k == 0 {
        return vec![Vec::new()];
    }
    let mut out = Vec::new();
    for (i, first) in items.iter().enumerate() {
        for mut rest in combinations(items.get(i + 1..).unwrap_or_default(), k - 1) {
            rest.insert(0, *first);
            out.push(rest);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::world::{Attr, ClassSpec, PodSpec, RequestSpec};

    fn world(devices: &[(&str, i64)], claims: Vec<ClaimSpec>) -> World {
        World {
            seed: 0,
            tag: String::new(),
            nodes: vec![NodeSpec {
                name: "n".into(),
                devices: devices
                    .iter()
                    .map(|(name, numa)| DeviceSpec {
                        name: name.to_string(),
                        attributes: [("numa".to_string(), Attr::Int(*numa))].into(),
                        ..Default::default()
                    })
                    .collect(),
                counter: None,
            }],
            classes: vec![ClassSpec {
                name: "any".into(),
                selector: None,
            }],
            pods: vec![PodSpec {
                name: "p".into(),
                claims,
            }],
        }
    }

    fn two_on_one_numa() -> ClaimSpec {
        ClaimSpec {
            requests: vec![RequestSpec {
                name: "r".into(),
                class: "any".into(),
                mode: Mode::Count(2),
                ..Default::default()
            }],
            match_attributes: vec![("numa".into(), Vec::new())],
        }
    }

    #[test]
    fn the_search_finds_the_pair_on_one_numa_node() {
        let w = world(&[("a", 0), ("b", 1), ("c", 1)], vec![two_on_one_numa()]);
        assert!(feasible(
            &w,
            &w.nodes[0],
            &w.pods[0].claims,
            &Held::default()
        ));
        let taken = Held {
            whole: BTreeSet::from([("n".to_string(), "c".to_string())]),
            ..Held::default()
        };
        assert!(!feasible(&w, &w.nodes[0], &w.pods[0].claims, &taken));
    }

    /// `firstAvailable`: three devices on one NUMA node first, else one.
    fn three_else_one() -> ClaimSpec {
        let alternative = |name: &str, count| RequestSpec {
            name: name.into(),
            class: "any".into(),
            mode: Mode::Count(count),
            ..Default::default()
        };
        ClaimSpec {
            requests: vec![RequestSpec {
                name: "r".into(),
                first_available: vec![alternative("three", 3), alternative("one", 1)],
                ..Default::default()
            }],
            match_attributes: vec![("numa".into(), Vec::new())],
        }
    }

    #[test]
    fn a_first_available_request_is_met_by_any_one_of_its_subrequests() {
        let w = world(&[("a", 0), ("b", 1)], vec![three_else_one()]);
        let feasible_now = |held: &Held| feasible(&w, &w.nodes[0], &w.pods[0].claims, held);
        assert!(feasible_now(&Held::default()), "the second subrequest fits");
        let all_taken = Held {
            whole: BTreeSet::from([("n".into(), "a".into()), ("n".into(), "b".into())]),
            ..Held::default()
        };
        assert!(!feasible_now(&all_taken));
        let scheduled = |results: &[(&str, &str)]| PodOutcome::Scheduled {
            node: "n".into(),
            claims: vec![
                results
                    .iter()
                    .map(|(r, d)| (r.to_string(), "n".to_string(), d.to_string()))
                    .collect(),
            ],
        };
        assert_eq!(check(&w, &[scheduled(&[("r/one", "b")])]), Vec::new());
        let kinds = |results: &[(&str, &str)]| -> Vec<&'static str> {
            check(&w, &[scheduled(results)])
                .iter()
                .map(Violation::kind)
                .collect()
        };
        assert_eq!(kinds(&[("r/three", "a")]), ["wrong device count"]);
        assert_eq!(
            kinds(&[("r/one", "a"), ("r/three", "b")]),
            [
                "subrequests mixed",
                "wrong device count",
                "matchAttribute unmet"
            ]
        );
        // A result naming the request itself, or a subrequest it lacks, names nothing.
        assert_eq!(
            kinds(&[("r", "a")]),
            ["device not admitted", "wrong device count"]
        );
        assert_eq!(
            kinds(&[("r/two", "a")]),
            ["device not admitted", "wrong device count"]
        );
    }

    #[test]
    fn an_allocation_across_numa_nodes_breaks_the_constraint() {
        let w = world(&[("a", 0), ("b", 1), ("c", 1)], vec![two_on_one_numa()]);
        let bad = PodOutcome::Scheduled {
            node: "n".into(),
            claims: vec![vec![
                ("r".into(), "n".into(), "a".into()),
                ("r".into(), "n".into(), "b".into()),
            ]],
        };
        assert_eq!(
            check(&w, &[bad]),
            vec![Violation::ConstraintUnmet {
                pod: "p".into(),
                attribute: "numa".into()
            }]
        );
        let unschedulable = PodOutcome::Unschedulable {
            message: String::new(),
        };
        assert_eq!(
            check(&w, &[unschedulable])[0].kind(),
            "feasible but unschedulable"
        );
    }

    /// One device shared by two requests: 3 rounds up to 4 (min 2, step 2), no amount
    /// takes the default 4; together 8, the device's whole capacity.
    #[test]
    fn shares_fit_until_the_capacity_is_spent() {
        let request = |name: &str, capacity: Option<i64>| RequestSpec {
            name: name.into(),
            class: "any".into(),
            capacity,
            ..Default::default()
        };
        let claim = ClaimSpec {
            requests: vec![request("a", Some(3)), request("b", None)],
            match_attributes: Vec::new(),
        };
        let mut w = world(&[("g", 0)], vec![claim]);
        w.nodes[0].devices[0].shared = Some(crate::world::Shared {
            value: 8,
            default: 4,
            min: 2,
            step: 2,
        });
        assert_eq!(
            w.pods[0].claims[0].requests[0].share_of(&w.nodes[0].devices[0]),
            Some(4)
        );
        assert!(feasible(
            &w,
            &w.nodes[0],
            &w.pods[0].claims,
            &Held::default()
        ));
        let both = PodOutcome::Scheduled {
            node: "n".into(),
            claims: vec![vec![
                ("a".into(), "n".into(), "g".into()),
                ("b".into(), "n".into(), "g".into()),
            ]],
        };
        assert_eq!(check(&w, std::slice::from_ref(&both)), Vec::new());
        // A second pod alike finds the device full.
        let mut second = w.pods[0].clone();
        second.name = "q".into();
        w.pods.push(second);
        let mut held = Held::default();
        held.shares.insert(("n".into(), "g".into()), 8);
        assert!(!feasible(&w, &w.nodes[0], &w.pods[1].claims, &held));
        let over = check(&w, &[both.clone(), both]);
        assert_eq!(
            over.iter().map(Violation::kind).collect::<Vec<_>>(),
            ["capacity exceeded", "capacity exceeded"]
        );
        // More than the device has: not admitted at all.
        let too_big = request("a", Some(40));
        assert!(!too_big.admits(&w.classes, &w.nodes[0].devices[0]));
        // With a capacity of no request policy beside, a share takes all of it: one share
        // at a time (found by the batch, seed 33: the checker had missed the rule).
        w.nodes[0].devices[0].capacity.insert("cores".into(), 32);
        assert!(!feasible(
            &w,
            &w.nodes[0],
            &w.pods[0].claims,
            &Held::default()
        ));
        w.pods[0].claims[0].requests.pop();
        assert!(feasible(
            &w,
            &w.nodes[0],
            &w.pods[0].claims,
            &Held::default()
        ));
        let mut one_share = Held::default();
        one_share.shares.insert(("n".into(), "g".into()), 4);
        assert!(!feasible(&w, &w.nodes[0], &w.pods[0].claims, &one_share));
    }

    #[test]
    fn devices_that_each_fit_the_counter_set_may_not_fit_together() {
        let request = |name: &str, mode: Mode| RequestSpec {
            name: name.into(),
            class: "any".into(),
            mode,
            ..Default::default()
        };
        let claim = |mode: Mode| ClaimSpec {
            requests: vec![request("r", mode)],
            match_attributes: Vec::new(),
        };
        // Three devices of 3 slots each on a node with 8: any two, never three.
        let mut w = world(&[("a", 0), ("b", 0), ("c", 0)], vec![claim(Mode::Count(2))]);
        w.nodes[0].counter = Some(8);
        for d in &mut w.nodes[0].devices {
            d.consumes = Some(3);
        }
        let none = Held::default();
        assert!(feasible(&w, &w.nodes[0], &w.pods[0].claims, &none));
        for mode in [Mode::Count(3), Mode::All] {
            assert!(
                !feasible(&w, &w.nodes[0], &[claim(mode.clone())], &none),
                "{mode:?}"
            );
        }
        // Two pods of one device and a third: the third finds 2 slots left.
        w.pods[0].claims = vec![claim(Mode::Count(1))];
        for name in ["q", "s"] {
            let mut pod = w.pods[0].clone();
            pod.name = name.into();
            w.pods.push(pod);
        }
        let on = |d: &str| PodOutcome::Scheduled {
            node: "n".into(),
            claims: vec![vec![("r".into(), "n".into(), d.into())]],
        };
        let over = check(&w, &[on("a"), on("b"), on("c")]);
        assert_eq!(
            over.iter().map(Violation::kind).collect::<Vec<_>>(),
            ["counters exceeded"]
        );
        let left_pending = PodOutcome::Unschedulable {
            message: "cannot allocate all claims".into(),
        };
        assert_eq!(check(&w, &[on("a"), on("b"), left_pending]), Vec::new());
        // A device that consumes nothing still fits.
        w.nodes[0].devices[2].consumes = None;
        assert_eq!(check(&w, &[on("a"), on("b"), on("c")]), Vec::new());
    }

    /// Admin access takes devices others hold, holds none for later pods, and is not
    /// stopped by counters others spent; Kubernetes 1.37.2's allocator is
    /// (kubernetes/kubernetes#140729), which the checker names as a known defect.
    #[test]
    fn admin_access_ignores_what_others_hold_and_holds_nothing() {
        let claim = |admin: bool| ClaimSpec {
            requests: vec![RequestSpec {
                name: "r".into(),
                class: "any".into(),
                admin,
                ..Default::default()
            }],
            match_attributes: Vec::new(),
        };
        let mut w = world(&[("a", 0)], vec![claim(false)]);
        for (name, admin) in [("monitor", true), ("q", false)] {
            w.pods.push(PodSpec {
                name: name.into(),
                claims: vec![claim(admin)],
            });
        }
        let on_a = PodOutcome::Scheduled {
            node: "n".into(),
            claims: vec![vec![("r".into(), "n".into(), "a".into())]],
        };
        let pending = PodOutcome::Unschedulable {
            message: "cannot allocate all claims".into(),
        };
        // p holds a; the monitor gets it too; q does not, as p still holds it.
        assert_eq!(
            check(&w, &[on_a.clone(), on_a.clone(), pending.clone()]),
            Vec::new()
        );
        let kinds = |w: &World, outcomes: &[PodOutcome]| -> Vec<&'static str> {
            check(w, outcomes).iter().map(Violation::kind).collect()
        };
        assert_eq!(
            kinds(&w, &[on_a.clone(), pending.clone(), pending.clone()]),
            ["feasible but unschedulable"]
        );
        assert_eq!(
            kinds(&w, &[on_a.clone(), on_a.clone(), on_a.clone()]),
            ["device given twice"]
        );
        // With a counter set that p's device spends, the monitor still fits by the API;
        // upstream refuses it, a known defect.
        w.nodes[0].counter = Some(4);
        w.nodes[0].devices[0].consumes = Some(4);
        assert_eq!(
            kinds(&w, &[on_a.clone(), pending.clone(), pending.clone()]),
            ["known upstream defect"]
        );
        assert_eq!(check(&w, &[on_a.clone(), on_a, pending]), Vec::new());
    }

    /// Two admin requests of one claim may get the same device when it allows multiple
    /// allocations (kube-scheduler 1.37.2 does, seed 9040), not otherwise.
    #[test]
    fn admin_access_gives_a_device_once_a_claim_unless_it_is_shared() {
        let admin = |name: &str| RequestSpec {
            name: name.into(),
            class: "any".into(),
            admin: true,
            ..Default::default()
        };
        let claim = ClaimSpec {
            requests: vec![admin("r0"), admin("r1")],
            match_attributes: Vec::new(),
        };
        let mut w = world(&[("a", 0)], vec![claim]);
        let both_on_a = PodOutcome::Scheduled {
            node: "n".into(),
            claims: vec![vec![
                ("r0".into(), "n".into(), "a".into()),
                ("r1".into(), "n".into(), "a".into()),
            ]],
        };
        let none = Held::default();
        assert!(!feasible(&w, &w.nodes[0], &w.pods[0].claims, &none));
        assert_eq!(
            check(&w, std::slice::from_ref(&both_on_a))
                .iter()
                .map(Violation::kind)
                .collect::<Vec<_>>(),
            ["device given twice"]
        );
        w.nodes[0].devices[0].shared = Some(crate::world::Shared {
            value: 8,
            default: 4,
            min: 2,
            step: 2,
        });
        assert!(feasible(&w, &w.nodes[0], &w.pods[0].claims, &none));
        assert_eq!(check(&w, &[both_on_a]), Vec::new());
    }

    #[test]
    fn a_known_defect_is_known_whichever_oracle_showed_it() {
        let known = Violation::KnownUpstream {
            pod: "p".into(),
            defect: "d".into(),
        };
        let of = |violation: Violation| Violation::Of {
            oracle: "kube-scheduler".into(),
            violation: Box::new(violation),
        };
        assert!(known.is_known_upstream());
        assert!(of(known).is_known_upstream());
        assert!(
            !of(Violation::FeasibleButUnschedulable {
                pod: "p".into(),
                node: "n".into()
            })
            .is_known_upstream()
        );
    }

    /// `All` fails on a node where a device it selects has a taint it does not tolerate
    /// (found against kube-scheduler 1.37.2, seed 2086: checker and emulator had left the
    /// device out instead).
    #[test]
    fn all_needs_every_selected_device_tolerated() {
        let mut claim = two_on_one_numa();
        claim.requests[0].mode = Mode::All;
        claim.match_attributes.clear();
        let mut w = world(&[("a", 0), ("b", 1)], vec![claim]);
        w.nodes[0].devices[0].taints.push(crate::world::Taint {
            key: "k".into(),
            effect: "NoSchedule".into(),
        });
        assert!(!feasible(
            &w,
            &w.nodes[0],
            &w.pods[0].claims,
            &Held::default()
        ));
        let only_b = PodOutcome::Scheduled {
            node: "n".into(),
            claims: vec![vec![("r".into(), "n".into(), "b".into())]],
        };
        assert_eq!(check(&w, &[only_b])[0].kind(), "wrong device count");
        w.pods[0].claims[0].requests[0].tolerations.push("k".into());
        assert!(feasible(
            &w,
            &w.nodes[0],
            &w.pods[0].claims,
            &Held::default()
        ));
    }

    #[test]
    fn all_means_every_admitted_device() {
        let mut claim = two_on_one_numa();
        claim.requests[0].mode = Mode::All;
        claim.match_attributes.clear();
        let w = world(&[("a", 0), ("b", 1)], vec![claim]);
        let one = PodOutcome::Scheduled {
            node: "n".into(),
            claims: vec![vec![("r".into(), "n".into(), "a".into())]],
        };
        assert_eq!(check(&w, &[one])[0].kind(), "wrong device count");
    }

    #[test]
    fn oracles_are_compared_until_their_allocations_part() {
        let w = world(&[("a", 0), ("b", 1)], vec![two_on_one_numa()]);
        let bound = |d: &str| PodOutcome::Scheduled {
            node: "n".into(),
            claims: vec![vec![("r".into(), "n".into(), d.into())]],
        };
        let pending = PodOutcome::Unschedulable {
            message: String::new(),
        };
        assert!(compare(&w, &[bound("a")], &[bound("a")]).is_empty());
        // Another device on the same node: the choice was determinate.
        assert_eq!(
            compare(&w, &[bound("a")], &[bound("b")])[0].kind(),
            "device choice differs"
        );
        // Another node: a tie the scheduler may break either way; the trajectories part,
        // nothing to compare after.
        let elsewhere = PodOutcome::Scheduled {
            node: "m".into(),
            claims: vec![vec![("r".into(), "m".into(), "a".into())]],
        };
        assert!(compare(&w, &[bound("a"), pending.clone()], &[elsewhere, bound("a")]).is_empty());
        assert_eq!(
            compare(&w, &[bound("a")], &[pending])[0].kind(),
            "oracles differ"
        );
    }

    #[test]
    fn an_eviction_of_a_tolerated_no_execute_taint_is_the_known_defect() {
        let mut w = world(&[("a", 0)], vec![two_on_one_numa()]);
        w.nodes[0].devices[0].taints.push(crate::world::Taint {
            key: "k".into(),
            effect: "NoExecute".into(),
        });
        let bound = PodOutcome::Scheduled {
            node: "n".into(),
            claims: vec![vec![("r".into(), "n".into(), "a".into())]],
        };
        let evicted = PodOutcome::Evicted { node: "n".into() };
        assert_eq!(
            compare(
                &w,
                std::slice::from_ref(&bound),
                std::slice::from_ref(&evicted)
            )[0]
            .kind(),
            "oracles differ"
        );
        w.pods[0].claims[0].requests[0].tolerations.push("k".into());
        assert_eq!(
            compare(&w, &[bound], &[evicted])[0].kind(),
            "known upstream defect"
        );
    }
}
