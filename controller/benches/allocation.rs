//! Benchmarks of the allocation core, with a floor measured in the same run.
//!
//! `cargo bench -p fake-dra-controller --bench allocation`; results in docs/performance.md.

use std::collections::{BTreeMap, HashMap};
use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use fake_dra_api::params::ClaimRequest;
use fake_dra_controller::allocator::{Allocator, ClaimAsk, NodeInput};

const CLAIMS: usize = 10_000;
/// Claims alive at once: 1,000 claims of 4.5 devices on average fit 8,000 devices easily,
/// so every allocation succeeds and the oldest claim is released to make room.
const WINDOW: usize = 1_000;

fn inventory(nodes: usize, per: usize) -> Vec<NodeInput> {
    (0..nodes)
        .map(|k| NodeInput {
            name: format!("node-{k:05}"),
            ready: true,
            labels: BTreeMap::new(),
            devices: (0..per)
                .map(|i| {
                    (
                        format!("FAKE-00000000-0000-0000-{k:04x}-{i:012x}"),
                        "fake-x".into(),
                    )
                })
                .collect(),
        })
        .collect()
}

fn requests() -> Vec<ClaimRequest> {
    (0..CLAIMS)
        .map(|i| ClaimRequest {
            count: 1 + (i * 7919) % 8,
            split: 1,
            model: None,
        })
        .collect()
}

fn uids() -> Vec<String> {
    (0..CLAIMS).map(|i| format!("claim-{i:05}")).collect()
}

/// Allocates the 10,000 claims (releasing the oldest beyond [`WINDOW`]); returns how many
/// got devices.
fn churn(a: &mut Allocator, uids: &[String], reqs: &[ClaimRequest]) -> usize {
    let mut ok = 0;
    for i in 0..reqs.len() {
        if i >= WINDOW {
            a.release(&uids[i - WINDOW]);
        }
        let ask = ClaimAsk {
            request: &reqs[i],
            suitable_nodes: None,
        };
        ok += usize::from(a.allocate(&uids[i], &ask).is_some());
    }
    ok
}

/// The floor: the same number of map inserts and removals an allocator needs at least
/// (one per claim), with nothing chosen.
fn floor(uids: &[String]) -> usize {
    let mut map: HashMap<&str, usize> = HashMap::with_capacity(WINDOW * 2);
    for (i, uid) in uids.iter().enumerate() {
        if i >= WINDOW {
            map.remove(uids[i - WINDOW].as_str());
        }
        map.insert(uid.as_str(), i);
    }
    map.len()
}

fn bench(c: &mut Criterion) {
    let reqs = requests();
    let uids = uids();

    let mut g = c.benchmark_group("allocate_10k_claims");
    g.throughput(Throughput::Elements(CLAIMS as u64));
    let base = Allocator::new(inventory(1_000, 8));
    let check = churn(&mut base.clone(), &uids, &reqs);
    assert_eq!(check, CLAIMS, "every claim fits within the window");
    g.bench_function("1000_nodes_x_8", |b| {
        b.iter_batched(
            || base.clone(),
            |mut a| black_box(churn(&mut a, &uids, &reqs)),
            BatchSize::LargeInput,
        )
    });
    g.bench_function("floor_hashmap", |b| b.iter(|| black_box(floor(&uids))));
    g.finish();

    // Per-claim cost against cluster size, with the window scaled to the capacity so that
    // every claim succeeds: 10 nodes × 8 = 80 devices, 1,000 × 8 = 8,000.
    let mut g = c.benchmark_group("per_claim_by_nodes");
    for nodes in [10usize, 1_000] {
        let window = nodes; // ~4.5 devices per claim, 8 per node
        let base = Allocator::new(inventory(nodes, 8));
        let n = 2_000usize;
        g.throughput(Throughput::Elements(n as u64));
        g.bench_function(format!("{nodes}_nodes"), |b| {
            b.iter_batched(
                || base.clone(),
                |mut a| {
                    let mut ok = 0;
                    for i in 0..n {
                        if i >= window {
                            a.release(&uids[i - window]);
                        }
                        let ask = ClaimAsk {
                            request: &reqs[i],
                            suitable_nodes: None,
                        };
                        ok += usize::from(a.allocate(&uids[i], &ask).is_some());
                    }
                    black_box(ok)
                },
                BatchSize::LargeInput,
            )
        });
    }
    g.finish();

    // Unsuitable-node pass: a Pod with 3 claims over 128 potential nodes, half of them
    // partly used so some are unsuitable.
    let mut a = Allocator::new(inventory(1_000, 8));
    for k in (0..128).step_by(2) {
        let r = ClaimRequest {
            count: 6,
            split: 1,
            model: None,
        };
        a.allocate_on(
            &format!("node-{k:05}"),
            &[&format!("filler-{k}")],
            &[ClaimAsk {
                request: &r,
                suitable_nodes: None,
            }],
        )
        .ok();
    }
    let potential: Vec<String> = (0..128).map(|k| format!("node-{k:05}")).collect();
    let pod: Vec<ClaimRequest> = [2usize, 1, 1]
        .iter()
        .map(|&count| ClaimRequest {
            count,
            split: 2,
            model: Some("fake-x".into()),
        })
        .collect();
    let asks: Vec<ClaimAsk<'_>> = pod
        .iter()
        .map(|r| ClaimAsk {
            request: r,
            suitable_nodes: None,
        })
        .collect();
    assert_eq!(a.unsuitable_nodes(&potential, &asks).len(), 64);
    let mut g = c.benchmark_group("unsuitable_nodes");
    g.bench_function("pod_3_claims_128_nodes", |b| {
        b.iter(|| black_box(a.unsuitable_nodes(black_box(&potential), &asks).len()))
    });
    let lookup: HashMap<String, usize> = potential.iter().cloned().zip(0..).collect();
    g.bench_function("floor_128_hashmap_lookups", |b| {
        b.iter(|| {
            black_box(
                potential
                    .iter()
                    .filter(|n| lookup.get(n.as_str()).is_some_and(|i| i % 2 == 0))
                    .count(),
            )
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).warm_up_time(std::time::Duration::from_secs(1)).measurement_time(std::time::Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
