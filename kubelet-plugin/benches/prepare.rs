//! NodePrepareResources round trips on the plugin's unix socket, next to the floor: an
//! empty gRPC call (health check) on the same socket, in the same run.
//!
//! `cargo bench -p fake-dra-kubelet-plugin --bench prepare`
//!
//! Each prepare is timed alone; the unprepare that frees the devices for the next
//! iteration is not. The plugin is the real binary against the emulated apiserver, with
//! its CDI dir and checkpoint on the temp dir's file system (fsync included).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[path = "../tests/it/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::*;
use criterion::{Criterion, criterion_group, criterion_main};
use dra_kubelet_proto::v1alpha3;

const NODE: &str = "bench-node";

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let api = rt.block_on(start_api());
    let dirs = Dirs::for_bench();
    let plugin = rt.block_on(Plugin::start(
        &dirs,
        Options {
            node: NODE,
            kubeconfig: api.kubeconfig(),
            env: vec![],
            extra_args: vec!["--num-devices".into(), "128".into()],
        },
    ));
    let inv128 = || {
        let models: Vec<String> = fake_dra_kubelet_plugin::fake::devices::DEFAULT_MODELS
            .iter()
            .map(|m| m.to_string())
            .collect();
        fake_dra_kubelet_plugin::fake::devices::Inventory::new(NODE, 128, &models).unwrap()
    };
    let inv = inv128();
    let handle_of = |idx: &[usize], split: u32| {
        fake_dra_api::handle::AllocationHandle {
            node_name: NODE.into(),
            model: inv.model.clone(),
            split,
            devices: idx.iter().map(|&i| inv.devices[i].clone()).collect(),
        }
        .to_json()
    };

    let channel = rt
        .block_on(dra_kubelet_proto::connect_unix(dirs.dra_socket()))
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    let mut node = v1alpha3::node_client::NodeClient::new(channel);

    let mut group = c.benchmark_group("kubelet_plugin");
    group.measurement_time(Duration::from_secs(5));
    group.sample_size(30);

    group.bench_function("floor_empty_grpc_health_check", |b| {
        b.iter(|| {
            rt.block_on(health.check(tonic_health::pb::HealthCheckRequest {
                service: String::new(),
            }))
            .unwrap()
        })
    });

    // What one crash-safe file write costs on this file system (temp file, fsync,
    // rename, fsync dir): the other part of the prepare target.
    let scratch = tempfile::tempdir_in(dirs.root.path()).unwrap();
    let path = scratch.path().join("x.json");
    group.bench_function("floor_one_fsynced_file_write", |b| {
        b.iter(|| crash_safe_write(&path, &[b'x'; 1024]))
    });

    let mut run = |name: &str, claims: Vec<v1alpha3::Claim>| {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    let resp = rt
                        .block_on(node.node_prepare_resources(
                            v1alpha3::NodePrepareResourcesRequest {
                                claims: claims.clone(),
                            },
                        ))
                        .unwrap()
                        .into_inner();
                    total += start.elapsed();
                    assert!(
                        resp.claims
                            .iter()
                            .all(|e| e.value.as_ref().is_some_and(|r| r.error.is_empty()))
                    );
                    rt.block_on(node.node_unprepare_resources(
                        v1alpha3::NodeUnprepareResourcesRequest {
                            claims: claims.clone(),
                        },
                    ))
                    .unwrap();
                }
                total
            })
        });
    };
    run(
        "prepare_1_claim_4x2",
        vec![claim("bench-single", &handle_of(&[0, 1, 2, 3], 2))],
    );
    run(
        "prepare_1_claim_1x2",
        vec![claim("bench-one", &handle_of(&[0], 2))],
    );
    run(
        "prepare_batch_100_claims_1x2",
        (0..100)
            .map(|i| claim(&format!("bench-batch-{i:03}"), &handle_of(&[i], 2)))
            .collect(),
    );
    group.finish();

    // Peak RSS with every device prepared (128 claims: one device each, the most a node
    // can hold at once).
    let claims: Vec<_> = (0..128)
        .map(|i| claim(&format!("rss-{i:03}"), &handle_of(&[i], 2)))
        .collect();
    let resp = rt
        .block_on(node.node_prepare_resources(v1alpha3::NodePrepareResourcesRequest { claims }))
        .unwrap()
        .into_inner();
    assert!(
        resp.claims
            .iter()
            .all(|e| e.value.as_ref().is_some_and(|r| r.error.is_empty()))
    );
    let status = std::fs::read_to_string(format!("/proc/{}/status", plugin.child.id())).unwrap();
    let hwm = status
        .lines()
        .find(|l| l.starts_with("VmHWM"))
        .unwrap_or("VmHWM: ?");
    println!(
        "plugin peak RSS with 128 prepared claims: {}",
        hwm.trim_start_matches("VmHWM:").trim()
    );
    drop(plugin);
}

criterion_group!(benches, bench);
criterion_main!(benches);

/// One crash-safe write as the plugin makes it: a temp file, fsync'd, renamed over the
/// target, the directory fsync'd.
fn crash_safe_write(path: &std::path::Path, bytes: &[u8]) {
    use std::io::Write;
    let dir = path.parent().unwrap();
    let tmp = dir.join(".x.json.tmp");
    let mut file = std::fs::File::create(&tmp).unwrap();
    file.write_all(bytes).unwrap();
    file.sync_all().unwrap();
    std::fs::rename(&tmp, path).unwrap();
    std::fs::File::open(dir).unwrap().sync_all().unwrap();
}
