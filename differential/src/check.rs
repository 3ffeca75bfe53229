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

use crate::world::{ClaimSpec, DeviceSpec, Mode, NodeSpec, World};

/// A device, by node (= pool) and name.
pub type DeviceKey = (String, String);

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
    /// A device given twice (to two requests or two claims).
    DeviceTwice { pod: String, device: String },
    /// A `matchAttribute` constraint unmet.
    ConstraintUnmet { pod: String, attribute: String },
    /// The pod had a valid allocation on this node, yet was left unschedulable.
    FeasibleButUnschedulable { pod: String, node: String },
}

impl Violation {
    /// The kind, for the report.
    pub fn kind(&self) -> &'static str {
        match self {
            Violation::ClaimNotAllocated { .. } => "claim not allocated",
            Violation::UnknownDevice { .. } => "unknown device",
            Violation::NotAdmitted { .. } => "device not admitted",
            Violation::WrongCount { .. } => "wrong device count",
            Violation::DeviceTwice { .. } => "device given twice",
            Violation::ConstraintUnmet { .. } => "matchAttribute unmet",
            Violation::FeasibleButUnschedulable { .. } => "feasible but unschedulable",
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
    let mut taken: BTreeSet<DeviceKey> = BTreeSet::new();
    let mut out = Vec::new();
    for (pod, outcome) in world.pods.iter().zip(outcomes) {
        match outcome {
            PodOutcome::Unschedulable { .. } => {
                for node in &world.nodes {
                    if feasible(world, node, &pod.claims, &taken) {
                        out.push(Violation::FeasibleButUnschedulable {
                            pod: pod.name.clone(),
                            node: node.name.clone(),
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
                        if !taken.insert((node.clone(), device.clone())) {
                            out.push(Violation::DeviceTwice {
                                pod: pod.name.clone(),
                                device: format!("{pool}/{device}"),
                            });
                        }
                        let request = claim.requests.iter().find(|r| &r.name == request_name);
                        match request {
                            Some(r) if r.admits(&world.classes, found) => {
                                chosen.entry(r.name.as_str()).or_default().push(found);
                            }
                            _ => out.push(Violation::NotAdmitted {
                                pod: pod.name.clone(),
                                request: request_name.clone(),
                                device: format!("{pool}/{device}"),
                            }),
                        }
                    }
                    for request in &claim.requests {
                        let got = chosen.get(request.name.as_str()).map_or(0, Vec::len);
                        let (want, ok) = match request.mode {
                            Mode::Count(n) => (n.to_string(), got == n as usize),
                            Mode::All => {
                                let all = admitted(world, node_spec, request).len();
                                (format!("all {all}"), got == all && all > 0)
                            }
                        };
                        if !ok {
                            out.push(Violation::WrongCount {
                                pod: pod.name.clone(),
                                request: request.name.clone(),
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

/// Whether `claims` can all be allocated on `node` from devices not in `taken`.
pub fn feasible(
    world: &World,
    node: &NodeSpec,
    claims: &[ClaimSpec],
    taken: &BTreeSet<DeviceKey>,
) -> bool {
    let free = |d: &DeviceSpec| !taken.contains(&(node.name.clone(), d.name.clone()));
    let mut used: BTreeSet<String> = BTreeSet::new();
    search_claims(world, node, claims, &free, &mut used)
}

fn search_claims(
    world: &World,
    node: &NodeSpec,
    claims: &[ClaimSpec],
    free: &dyn Fn(&DeviceSpec) -> bool,
    used: &mut BTreeSet<String>,
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
        free,
        used,
        &mut chosen,
        &mut |used| search_claims(world, node, rest, free, used),
    )
}

#[allow(clippy::too_many_arguments)]
fn search_requests<'a>(
    world: &World,
    node: &'a NodeSpec,
    claim: &'a ClaimSpec,
    index: usize,
    free: &dyn Fn(&DeviceSpec) -> bool,
    used: &mut BTreeSet<String>,
    chosen: &mut BTreeMap<&'a str, Vec<&'a DeviceSpec>>,
    then: &mut dyn FnMut(&mut BTreeSet<String>) -> bool,
) -> bool {
    let Some(request) = claim.requests.get(index) else {
        return constraints_met(claim, chosen).is_none() && then(used);
    };
    let candidates = admitted(world, node, request);
    let sets: Vec<Vec<&DeviceSpec>> = match request.mode {
        Mode::All => {
            if candidates.is_empty()
                || candidates
                    .iter()
                    .any(|d| !free(d) || used.contains(&d.name))
            {
                return false;
            }
            vec![candidates]
        }
        Mode::Count(n) => {
            let open: Vec<&DeviceSpec> = candidates
                .into_iter()
                .filter(|d| free(d) && !used.contains(&d.name))
                .collect();
            combinations(&open, n as usize)
        }
    };
    for set in sets {
        for d in &set {
            used.insert(d.name.clone());
        }
        chosen.insert(request.name.as_str(), set.clone());
        let found = search_requests(world, node, claim, index + 1, free, used, chosen, then);
        chosen.remove(request.name.as_str());
        for d in &set {
            used.remove(&d.name);
        }
        if found {
            return true;
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
            &BTreeSet::new()
        ));
        let taken = BTreeSet::from([("n".to_string(), "c".to_string())]);
        assert!(!feasible(&w, &w.nodes[0], &w.pods[0].claims, &taken));
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
}
