use super::*;
use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm};
use proptest::prelude::*;
use std::collections::HashSet;

fn dev(node: usize, i: usize) -> String {
    format!("FAKE-00000000-0000-0000-{node:04x}-{i:012x}")
}

fn nodes(n: usize, per: usize, model: impl Fn(usize, usize) -> String) -> Vec<NodeInput> {
    (0..n)
        .map(|k| NodeInput {
            name: format!("node-{k:03}"),
            ready: true,
            labels: BTreeMap::from([("zone".into(), format!("z{}", k % 2))]),
            devices: (0..per).map(|i| (dev(k, i), model(k, i))).collect(),
        })
        .collect()
}

fn req(count: usize, model: Option<&str>) -> ClaimRequest {
    ClaimRequest {
        count,
        split: 1,
        model: model.map(str::to_owned),
    }
}

fn ask(r: &ClaimRequest) -> ClaimAsk<'_> {
    ClaimAsk {
        request: r,
        suitable_nodes: None,
    }
}

fn zone(z: &str) -> NodeSelector {
    NodeSelector {
        node_selector_terms: vec![NodeSelectorTerm {
            match_expressions: Some(vec![NodeSelectorRequirement {
                key: "zone".into(),
                operator: "In".into(),
                values: Some(vec![z.into()]),
            }]),
            match_fields: None,
        }],
    }
}

#[test]
fn best_fit_and_exact_counts() {
    let mut a = Allocator::new(nodes(3, 8, |_, _| "m".into()));
    let r6 = req(6, None);
    let h = a.allocate("a", &ask(&r6)).unwrap();
    assert_eq!(h.node_name, "node-000");
    assert_eq!(h.devices, (0..6).map(|i| dev(0, i)).collect::<Vec<_>>());
    // 2 left on node-000: a claim of 2 fits there best.
    let r2 = req(2, None);
    assert_eq!(a.allocate("b", &ask(&r2)).unwrap().node_name, "node-000");
    assert_eq!(a.allocate("c", &ask(&r2)).unwrap().node_name, "node-001");
    a.release("a");
    assert_eq!(a.free_devices(), 24 - 4);
    assert_eq!(a.allocate("d", &ask(&r6)).unwrap().node_name, "node-000");
}

#[test]
fn models_selectors_and_readiness() {
    let mut input = nodes(4, 4, |k, _| if k < 2 { "a".into() } else { "b".into() });
    input[2].ready = false;
    let a = Allocator::new(input);
    let rb = req(1, Some("b"));
    assert_eq!(
        a.pick_node(&ask(&rb)),
        Some("node-003"),
        "node-002 is NotReady"
    );
    let sel = zone("z1");
    let ra = req(1, Some("a"));
    let only_z1 = ClaimAsk {
        request: &ra,
        suitable_nodes: Some(&sel),
    };
    assert_eq!(a.pick_node(&only_z1), Some("node-001"));
    assert_eq!(
        a.check_satisfiable(&req(1, Some("c")))
            .unwrap_err()
            .to_string(),
        "no node has devices of model \"c\"; known models: a, b"
    );
    assert_eq!(
        a.check_satisfiable(&req(5, Some("a")))
            .unwrap_err()
            .to_string(),
        "spec.count is 5, but the largest node inventory of model \"a\" has 4 devices"
    );
    a.check_satisfiable(&req(4, None)).unwrap();
}

#[test]
fn pod_claims_are_all_or_nothing() {
    let mut a = Allocator::new(nodes(2, 4, |_, _| "m".into()));
    let r3 = req(3, None);
    let r2 = req(2, None);
    let asks = [ask(&r3), ask(&r2)];
    let potential = vec!["node-000".to_string(), "node-001".into(), "node-009".into()];
    assert_eq!(
        a.unsuitable_nodes(&potential, &asks),
        ["node-000", "node-001", "node-009"]
    );
    let r1 = req(1, None);
    let fits = [ask(&r3), ask(&r1)];
    assert_eq!(a.unsuitable_nodes(&potential, &fits), ["node-009"]);
    assert!(a.allocate_on("node-000", &["x", "y"], &asks).is_err());
    assert_eq!(a.free_devices(), 8, "a failed pod allocation takes nothing");
    let hs = a.allocate_on("node-001", &["x", "y"], &fits).unwrap();
    let all: HashSet<_> = hs.iter().flat_map(|h| h.devices.clone()).collect();
    assert_eq!(all.len(), 4);
}

#[test]
fn conflicting_records_are_reported() {
    let mut a = Allocator::new(nodes(1, 2, |_, _| "m".into()));
    let h = AllocationHandle {
        node_name: "node-000".into(),
        model: "m".into(),
        split: 1,
        devices: vec![dev(0, 0)],
    };
    a.record("a", &h).unwrap();
    a.record("a", &h).unwrap();
    assert!(matches!(
        a.record("b", &h),
        Err(RecordError::Conflict { .. })
    ));
    assert_eq!(a.free_devices(), 1);
}

#[derive(Debug, Clone)]
enum Op {
    Allocate {
        count: usize,
        model: Option<u8>,
        zone: Option<u8>,
    },
    AllocateOn {
        node: usize,
        counts: Vec<usize>,
    },
    Release(usize),
    Rebuild,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1..=8usize, proptest::option::of(0..3u8), proptest::option::of(0..2u8))
            .prop_map(|(count, model, zone)| Op::Allocate { count, model, zone }),
        2 => (0..20usize, proptest::collection::vec(1..=4usize, 1..=3))
            .prop_map(|(node, counts)| Op::AllocateOn { node, counts }),
        3 => (0..64usize).prop_map(Op::Release),
        1 => Just(Op::Rebuild),
    ]
}

fn inventory(n: usize) -> Vec<NodeInput> {
    let mut input = nodes(n, 8, |k, i| format!("m{}", (k + i / 4) % 3));
    for (k, node) in input.iter_mut().enumerate() {
        node.ready = k % 7 != 3;
    }
    input
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The invariants of §4.4 over random histories: no device in two allocations,
    /// exact counts, selectors respected, and a rebuild from the handles (a restart)
    /// gives the same view.
    #[test]
    fn never_double_allocates(n in 1..20usize, ops in proptest::collection::vec(op(), 1..120)) {
        let input = inventory(n);
        let mut a = Allocator::new(input.clone());
        // The API's record: claim uid -> handle.
        let mut claims: BTreeMap<String, AllocationHandle> = BTreeMap::new();
        let mut next = 0usize;
        let selectors = [zone("z0"), zone("z1")];
        for op in ops {
            match op {
                Op::Allocate { count, model, zone } => {
                    let r = req(count, model.map(|m| format!("m{m}")).as_deref());
                    let ask = ClaimAsk { request: &r, suitable_nodes: zone.map(|z| &selectors[z as usize]) };
                    let uid = format!("c{next}"); next += 1;
                    let picked = a.pick_node(&ask).map(str::to_owned);
                    match a.allocate(&uid, &ask) {
                        Some(h) => {
                            prop_assert_eq!(Some(&h.node_name), picked.as_ref());
                            prop_assert_eq!(h.devices.len(), count);
                            let node = input.iter().find(|x| x.name == h.node_name).unwrap();
                            prop_assert!(node.ready);
                            for d in &h.devices {
                                let m = &node.devices.iter().find(|x| &x.0 == d).unwrap().1;
                                prop_assert_eq!(m, &h.model);
                            }
                            if let Some(m) = &r.model { prop_assert_eq!(&h.model, m); }
                            if let Some(z) = zone { prop_assert_eq!(&node.labels["zone"], &format!("z{z}")); }
                            claims.insert(uid, h);
                        }
                        None => {
                            prop_assert!(picked.is_none());
                            // Nothing fits: no Ready, selected node has `count` free of one model.
                            for node in input.iter().filter(|x| x.ready) {
                                if let Some(z) = zone && node.labels["zone"] != format!("z{z}") { continue; }
                                let used: HashSet<&String> = claims.values().flat_map(|h| &h.devices).collect();
                                let mut free: BTreeMap<&String, usize> = BTreeMap::new();
                                for (id, m) in &node.devices { if !used.contains(id) { *free.entry(m).or_default() += 1; } }
                                let ok = free.iter().any(|(m, &c)| c >= count && r.model.as_ref().is_none_or(|want| want == *m));
                                prop_assert!(!ok, "{} could take the claim", node.name);
                            }
                        }
                    }
                }
                Op::AllocateOn { node, counts } => {
                    let reqs: Vec<ClaimRequest> = counts.iter().map(|&c| req(c, None)).collect();
                    let asks: Vec<ClaimAsk<'_>> = reqs.iter().map(ask).collect();
                    let name = format!("node-{node:03}");
                    let uids: Vec<String> = (0..asks.len()).map(|i| format!("c{}", next + i)).collect();
                    next += asks.len();
                    let uid_refs: Vec<&str> = uids.iter().map(String::as_str).collect();
                    let potential = vec![name.clone()];
                    let unsuitable = !a.unsuitable_nodes(&potential, &asks).is_empty();
                    let before = a.free_devices();
                    match a.allocate_on(&name, &uid_refs, &asks) {
                        Ok(hs) => {
                            prop_assert!(!unsuitable);
                            prop_assert_eq!(before - a.free_devices(), counts.iter().sum::<usize>());
                            for (uid, h) in uids.into_iter().zip(hs) { claims.insert(uid, h); }
                        }
                        Err(_) => {
                            prop_assert!(unsuitable);
                            prop_assert_eq!(before, a.free_devices());
                        }
                    }
                }
                Op::Release(k) => {
                    if let Some(uid) = claims.keys().nth(k % claims.len().max(1)).cloned() {
                        claims.remove(&uid);
                        a.release(&uid);
                    }
                }
                Op::Rebuild => {
                    let mut b = Allocator::new(input.clone());
                    for (uid, h) in &claims { b.record(uid, h).unwrap(); }
                    prop_assert_eq!(b.free_devices(), a.free_devices());
                    a = b;
                }
            }
            let mut seen = HashSet::new();
            for h in claims.values() {
                for d in &h.devices { prop_assert!(seen.insert(d.clone()), "{} twice", d); }
            }
            let total: usize = input.iter().map(|x| x.devices.len()).sum();
            prop_assert_eq!(a.free_devices(), total - seen.len());
        }
    }

    /// Determinism: the same inputs give the same handles.
    #[test]
    fn deterministic(n in 1..10usize, counts in proptest::collection::vec(1..=8usize, 1..30)) {
        let run = || {
            let mut a = Allocator::new(inventory(n));
            counts.iter().enumerate().map(|(i, &c)| {
                let r = req(c, None);
                a.allocate(&format!("c{i}"), &ask(&r))
            }).collect::<Vec<_>>()
        };
        prop_assert_eq!(run(), run());
    }
}
