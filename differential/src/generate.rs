//! Seeded random worlds, sized so that many pods are just feasible and many just not: few
//! nodes and devices, attributes drawn from small ranges (so selectors and `matchAttribute`
//! constraints cut the devices often, but not always), counts near what a node holds.
//!
//! What a world covers (this release of the generator): string, int, bool and version
//! attributes, one capacity, taints (NoSchedule, NoExecute, None), devices shared by
//! several requests (`allowMultipleAllocations` with a consumable capacity under a request
//! policy); DeviceClasses with or without a CEL selector; standalone claims with `exactly`
//! requests and `firstAvailable` ones of two subrequests, `ExactCount` and `All`, request
//! selectors, tolerations, capacity requests and `matchAttribute` constraints; a counter
//! set per node (DRAPartitionableDevices) that devices consume, in a slice of its own;
//! monitoring pods whose one claim asks for admin access. Not yet: admin access beside
//! ordinary requests, per-device node selection.

use std::collections::BTreeMap;

use crate::rng::Rng;
use crate::world::{
    Attr, ClaimSpec, ClassSpec, Cmp, DeviceSpec, Mode, NodeSpec, PodSpec, Pred, RequestSpec,
    Shared, Taint, World,
};

const MODELS: [&str; 3] = ["alpha", "beta", "gamma"];
const TAINT_KEYS: [&str; 2] = ["example.com/maintenance", "example.com/ecc"];
const EFFECTS: [&str; 3] = ["NoSchedule", "NoExecute", "None"];

fn device(rng: &mut Rng, index: usize) -> DeviceSpec {
    let mut attributes = BTreeMap::new();
    if rng.chance(90) {
        attributes.insert("model".into(), Attr::Str(rng.pick(&MODELS).to_string()));
    }
    if rng.chance(85) {
        attributes.insert("memory".into(), Attr::Int(8 * rng.between(1, 4) as i64));
    }
    if rng.chance(70) {
        attributes.insert("numa".into(), Attr::Int(rng.below(2) as i64));
    }
    if rng.chance(60) {
        attributes.insert("ecc".into(), Attr::Bool(rng.chance(50)));
    }
    if rng.chance(60) {
        attributes.insert(
            "firmware".into(),
            Attr::Version(1, rng.below(3) as u32, rng.below(2) as u32),
        );
    }
    let mut capacity = BTreeMap::new();
    if rng.chance(60) {
        capacity.insert("cores".into(), 16 * rng.between(1, 4) as i64);
    }
    let mut taints = Vec::new();
    if rng.chance(12) {
        taints.push(Taint {
            key: rng.pick(&TAINT_KEYS).to_string(),
            effect: rng.pick(&EFFECTS).to_string(),
        });
    }
    // Small enough that two or three shares fill it.
    let shared = rng.chance(15).then(|| Shared {
        value: 4 * rng.between(2, 4) as i64,
        default: 4,
        min: 2,
        step: 2,
    });
    DeviceSpec {
        name: format!("dev-{index}"),
        attributes,
        capacity,
        taints,
        shared,
        consumes: None,
    }
}

/// A simple selector; sometimes two joined.
fn predicate(rng: &mut Rng, depth: usize) -> Pred {
    if depth < 1 && rng.chance(20) {
        let a = predicate(rng, depth + 1);
        let b = predicate(rng, depth + 1);
        return match rng.below(3) {
            0 => Pred::And {
                a: Box::new(a),
                b: Box::new(b),
            },
            1 => Pred::Or {
                a: Box::new(a),
                b: Box::new(b),
            },
            _ => Pred::Not { a: Box::new(a) },
        };
    }
    match rng.below(7) {
        0 => Pred::StrEq {
            attr: "model".into(),
            value: rng.pick(&MODELS).to_string(),
        },
        1 => Pred::IntCmp {
            attr: "memory".into(),
            cmp: *rng.pick(&[Cmp::Ge, Cmp::Gt, Cmp::Le, Cmp::Eq]),
            value: 8 * rng.between(1, 4) as i64,
        },
        2 => Pred::IntCmp {
            attr: "numa".into(),
            cmp: *rng.pick(&[Cmp::Eq, Cmp::Ne]),
            value: rng.below(2) as i64,
        },
        3 => Pred::IsTrue { attr: "ecc".into() },
        4 => Pred::VersionAtLeast {
            attr: "firmware".into(),
            version: (1, rng.below(3) as u32, 0),
        },
        5 => Pred::CapacityAtLeast {
            capacity: "cores".into(),
            value: 16 * rng.between(1, 4) as i64,
        },
        _ => Pred::Has {
            attr: rng.pick(&["model", "numa", "ecc"]).to_string(),
        },
    }
}

/// A request: mostly `exactly`; about one in seven a `firstAvailable` of two
/// subrequests, whose first often asks for more than the second.
fn request(rng: &mut Rng, name: String, classes: &[ClassSpec]) -> RequestSpec {
    if rng.chance(15) {
        return RequestSpec {
            name,
            first_available: (0..2)
                .map(|i| exact_request(rng, format!("s{i}"), classes))
                .collect(),
            ..RequestSpec::default()
        };
    }
    exact_request(rng, name, classes)
}

fn exact_request(rng: &mut Rng, name: String, classes: &[ClassSpec]) -> RequestSpec {
    let class = rng.pick(classes).name.clone();
    let selector = rng.chance(35).then(|| predicate(rng, 0));
    let mode = if rng.chance(8) {
        Mode::All
    } else {
        Mode::Count(*rng.pick(&[1, 1, 1, 1, 1, 1, 2, 2, 2, 3]))
    };
    let tolerations = if rng.chance(25) {
        vec![rng.pick(&TAINT_KEYS).to_string()]
    } else {
        Vec::new()
    };
    // Below min, between steps, on a step, and more than any device has.
    let capacity = rng.chance(15).then(|| *rng.pick(&[1, 3, 4, 7, 40]));
    RequestSpec {
        name,
        class,
        selector,
        mode,
        tolerations,
        capacity,
        admin: false,
        first_available: Vec::new(),
    }
}

/// The one claim of a monitoring pod: every request with admin access, `exactly` and
/// without a capacity request.
fn admin_claim(rng: &mut Rng, classes: &[ClassSpec]) -> ClaimSpec {
    let mut claim = claim(rng, classes);
    for r in &mut claim.requests {
        let name = r.name.clone();
        let mut exact = r.alternatives()[0].clone();
        exact.name = name;
        exact.admin = true;
        exact.capacity = None;
        *r = exact;
    }
    claim
}

fn claim(rng: &mut Rng, classes: &[ClassSpec]) -> ClaimSpec {
    let requests: Vec<RequestSpec> = (0..*rng.pick(&[1, 1, 2]))
        .map(|i| request(rng, format!("r{i}"), classes))
        .collect();
    let mut match_attributes = Vec::new();
    if rng.chance(30) {
        let attr = rng
            .pick(&["model", "numa", "memory", "firmware"])
            .to_string();
        let bound = if requests.len() > 1 && rng.chance(50) {
            vec![requests[0].name.clone()]
        } else {
            Vec::new()
        };
        match_attributes.push((attr, bound));
    }
    ClaimSpec {
        requests,
        match_attributes,
    }
}

/// A node; sometimes with a counter set that three in four of its devices consume, sized
/// so that two or three of them use it up. A shared device among them consumes with its
/// first share only.
fn node(rng: &mut Rng, index: usize) -> NodeSpec {
    let mut devices: Vec<DeviceSpec> = (0..rng.between(0, 6)).map(|i| device(rng, i)).collect();
    let counter = rng.chance(25).then(|| *rng.pick(&[4, 6, 8]));
    if counter.is_some() {
        for d in &mut devices {
            d.consumes = rng.chance(75).then(|| *rng.pick(&[2, 3, 4]));
        }
    }
    NodeSpec {
        name: format!("node-{index}"),
        devices,
        counter,
    }
}

/// The world of `seed`.
pub fn world(seed: u64) -> World {
    let mut rng = Rng::new(seed);
    let nodes: Vec<NodeSpec> = (0..rng.between(1, 3)).map(|n| node(&mut rng, n)).collect();
    let mut classes = vec![ClassSpec {
        name: "any".into(),
        selector: None,
    }];
    for i in 0..rng.between(0, 2) {
        classes.push(ClassSpec {
            name: format!("class-{i}"),
            selector: Some(predicate(&mut rng, 0)),
        });
    }
    let pods: Vec<PodSpec> = (0..rng.between(1, 5))
        .map(|p| PodSpec {
            name: format!("pod-{p}"),
            claims: if rng.chance(12) {
                vec![admin_claim(&mut rng, &classes)]
            } else {
                (0..rng.between(1, 2))
                    .map(|_| claim(&mut rng, &classes))
                    .collect()
            },
        })
        .collect();
    World {
        seed,
        tag: String::new(),
        nodes,
        classes,
        pods,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tagged world (the real oracle's) names only classes it has, subrequests too.
    #[test]
    fn a_tagged_world_asks_only_for_its_own_classes() {
        for seed in 0..300 {
            let w = world(seed).tagged("t");
            let classes: Vec<&str> = w.classes.iter().map(|c| c.name.as_str()).collect();
            for r in w
                .pods
                .iter()
                .flat_map(|p| &p.claims)
                .flat_map(|c| &c.requests)
                .flat_map(RequestSpec::alternatives)
            {
                assert!(classes.contains(&r.class.as_str()), "seed {seed}: {r:?}");
            }
        }
    }

    #[test]
    fn a_seed_makes_the_same_world_and_seeds_differ() {
        assert_eq!(world(42), world(42));
        assert_ne!(world(42), world(43));
    }

    #[test]
    fn worlds_vary_in_the_ways_that_matter() {
        let worlds: Vec<World> = (0..200).map(world).collect();
        let any = |f: &dyn Fn(&World) -> bool| worlds.iter().any(f);
        assert!(any(&|w| w.nodes.iter().any(|n| n.devices.is_empty())));
        assert!(any(&|w| w
            .pods
            .iter()
            .flat_map(|p| &p.claims)
            .any(|c| !c.match_attributes.is_empty())));
        assert!(any(&|w| w
            .pods
            .iter()
            .flat_map(|p| &p.claims)
            .flat_map(|c| &c.requests)
            .any(|r| r.mode == Mode::All)));
        assert!(any(&|w| w
            .nodes
            .iter()
            .flat_map(|n| &n.devices)
            .any(|d| !d.taints.is_empty())));
        assert!(any(&|w| w
            .nodes
            .iter()
            .flat_map(|n| &n.devices)
            .any(|d| d.shared.is_some())));
        assert!(any(&|w| w
            .pods
            .iter()
            .flat_map(|p| &p.claims)
            .flat_map(|c| &c.requests)
            .any(|r| r.capacity.is_some())));
        assert!(any(&|w| w
            .pods
            .iter()
            .flat_map(|p| &p.claims)
            .flat_map(|c| &c.requests)
            .any(|r| r.first_available.len() == 2)));
        // Admin access only on `exactly` requests without capacity, alone in their pod.
        assert!(any(&|w| w
            .pods
            .iter()
            .any(|p| p.claims[0].requests[0].admin)));
        assert!(!any(&|w| w.pods.iter().any(|p| {
            let admin = p.claims.iter().flat_map(|c| &c.requests).any(|r| r.admin);
            admin
                && (p.claims.len() > 1
                    || p.claims[0]
                        .requests
                        .iter()
                        .any(|r| !r.admin || r.capacity.is_some() || !r.first_available.is_empty()))
        })));
        assert!(any(&|w| w.nodes.iter().any(|n| n.counter.is_some()
            && n.devices.iter().filter(|d| d.consumes.is_some()).count()
                >= 2)));
        assert!(any(&|w| w
            .nodes
            .iter()
            .flat_map(|n| &n.devices)
            .any(|d| d.shared.is_some() && d.consumes.is_some())));
        // Never a consumption without its node's counter set.
        assert!(!any(&|w| w.nodes.iter().any(
            |n| n.counter.is_none() && n.devices.iter().any(|d| d.consumes.is_some())
        )));
    }
}
