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
    /// A device given twice (to two requests or two claims).
    DeviceTwice { pod: String, device: String },
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
            Violation::OraclesDiffer { .. } => "oracles differ",
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
            // What it held is released again; the eviction is compared, not judged.
            PodOutcome::Evicted { .. } => {}
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
                .any(|r| r.tolerations.contains(&t.key))
        });
    tolerated_no_execute.then(|| {
        "device-taint-eviction-controller ignores tolerations without an effect (Kubernetes 1.37.2; docs/differential.md#upstream)".to_owned()
    })
}

/// Where two oracles' outcomes part on feasibility, while they were in the same state:
/// pods are compared in order until both bound one differently (from there, the devices
/// free for the next pods differ).
pub fn compare(world: &World, first: &[PodOutcome], second: &[PodOutcome]) -> Vec<Violation> {
    for ((pod, a), b) in world.pods.iter().zip(first).zip(second) {
        match (a, b) {
            (PodOutcome::Unschedulable { .. }, PodOutcome::Unschedulable { .. }) => {}
            (PodOutcome::Scheduled { .. }, PodOutcome::Scheduled { .. }) => {
                let devices = |o: &PodOutcome| match o {
                    PodOutcome::Scheduled { node, claims } => {
                        let mut d: Vec<_> = claims.iter().flatten().cloned().collect();
                        d.sort();
                        Some((node.clone(), d))
                    }
                    PodOutcome::Unschedulable { .. } | PodOutcome::Evicted { .. } => None,
                };
                if devices(a) != devices(b) {
                    return Vec::new();
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
        // Different choices: the trajectories part, nothing to compare after.
        assert!(compare(&w, &[bound("a")], &[bound("b")]).is_empty());
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
