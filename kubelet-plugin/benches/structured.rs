//! Structured DRA: `dra.v1.DRAPlugin/NodePrepareResources` round trips on the plugin's
//! unix socket next to the floor (an empty gRPC call on the same socket, same run), and
//! publishing the ResourceSlice of a node with 128 devices.
//!
//! `cargo bench -p fake-dra-kubelet-plugin --bench structured`
//!
//! With `FAKE_DRA_BENCH_DEVICE_METADATA=1` the plugin also writes device metadata files
//! (`--device-metadata`): one more file and CDI spec per request of each claim. With
//! `FAKE_DRA_BENCH_DIR=/dev/shm` its files are on a tmpfs.
//!
//! The plugin is the real binary against the emulated apiserver of Kubernetes 1.34; each
//! structured prepare includes the plugin's GET of the claim over HTTP. The slice
//! benchmark deletes the node's slice and times until the plugin has published a new one
//! (its watch sees the deletion; the bench polls the apiserver every 1 ms).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[path = "../tests/it/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::*;
use criterion::{Criterion, criterion_group, criterion_main};
use dra_kubelet_proto::dra_v1;
use fake_dra_emulator::apiserver::{ApiServer, ApiServerOptions};
use k8s_openapi::api::resource::v1;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use serde_json::json;

const NODE: &str = "bench-node";

async fn start_api_1_34() -> ApiServer {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let api = ApiServer::start_with(ApiServerOptions {
        server_version: (1, 34),
        ..Default::default()
    })
    .await
    .unwrap();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(api.client().unwrap());
    for ns in [NAMESPACE, "default"] {
        let obj = serde_json::from_value(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        )
        .unwrap();
        let _ = namespaces.create(&PostParams::default(), &obj).await;
    }
    api
}

/// A v1 claim allocated to `fake-<idx>` of this node with split `split`, as the scheduler
/// writes it; returns its uid.
async fn allocated_claim(api: &ApiServer, name: &str, idx: &[usize], split: u32) -> String {
    let claims: Api<v1::ResourceClaim> = Api::namespaced(api.client().unwrap(), "default");
    let claim = json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "req", "exactly": {"deviceClassName": "fake.3-shake.com", "count": idx.len()}}]}},
    });
    let mut created = claims
        .create(
            &PostParams::default(),
            &serde_json::from_value(claim).unwrap(),
        )
        .await
        .unwrap();
    let results: Vec<_> = idx.iter().map(|i| json!({"request": "req", "driver": DRIVER, "pool": NODE, "device": format!("fake-{i}")})).collect();
    let params = json!({"apiVersion": "fake.resource.3-shake.com/v1alpha1", "kind": "FakeClaimParameters", "spec": {"split": split}});
    created.status = Some(
        serde_json::from_value(json!({"allocation": {
            "devices": {"results": results, "config": [{"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": params}}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}]},
        }}))
        .unwrap(),
    );
    claims
        .replace_status(name, &PostParams::default(), &created)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap()
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let api = rt.block_on(start_api_1_34());
    let dirs = Dirs::for_bench();
    let mut extra_args: Vec<String> = ["--num-devices", "128", "--mode", "structured"]
        .map(String::from)
        .into();
    if std::env::var_os("FAKE_DRA_BENCH_DEVICE_METADATA").is_some_and(|v| v == "1") {
        extra_args.push("--device-metadata".into());
    }
    let plugin = rt.block_on(Plugin::start(
        &dirs,
        Options {
            node: NODE,
            kubeconfig: api.kubeconfig(),
            env: vec![],
            extra_args,
        },
    ));
    let channel = rt
        .block_on(dra_kubelet_proto::connect_unix(dirs.dra_socket()))
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    let mut node = dra_v1::dra_plugin_client::DraPluginClient::new(channel);

    let mut group = c.benchmark_group("kubelet_plugin_structured");
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

    let mut run = |name: &str, claims: Vec<dra_v1::Claim>| {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    let resp = rt
                        .block_on(node.node_prepare_resources(
                            dra_v1::NodePrepareResourcesRequest {
                                claims: claims.clone(),
                            },
                        ))
                        .unwrap()
                        .into_inner();
                    total += start.elapsed();
                    assert!(
                        resp.claims
                            .iter()
                            .all(|e| e.value.as_ref().is_some_and(|r| r.error.is_empty())),
                        "{resp:?}"
                    );
                    rt.block_on(node.node_unprepare_resources(
                        dra_v1::NodeUnprepareResourcesRequest {
                            claims: claims.clone(),
                        },
                    ))
                    .unwrap();
                }
                total
            })
        });
    };
    let claim = |name: &str, uid: String| dra_v1::Claim {
        namespace: "default".into(),
        uid,
        name: name.into(),
    };
    let uid = rt.block_on(allocated_claim(&api, "bench-single", &[0, 1, 2, 3], 2));
    run("prepare_1_claim_4x2", vec![claim("bench-single", uid)]);
    let batch: Vec<_> = (0..100)
        .map(|i| {
            let name = format!("bench-batch-{i:03}");
            let uid = rt.block_on(allocated_claim(&api, &name, &[4 + i], 2));
            claim(&name, uid)
        })
        .collect();
    run("prepare_batch_100_claims_1x2", batch);

    // Republishing the node's slice of 128 devices after it was deleted.
    let slices: Api<v1::ResourceSlice> = rt.block_on(async { Api::all(api.client().unwrap()) });
    let current = || {
        rt.block_on(slices.list(&ListParams::default()))
            .unwrap()
            .items
            .into_iter()
            .find(|s| s.metadata.deletion_timestamp.is_none())
    };
    let first = loop {
        if let Some(s) = current() {
            break s;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(first.spec.devices.as_ref().map(Vec::len), Some(128));
    group.bench_function("republish_slice_128_devices", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let name = current().and_then(|s| s.metadata.name).unwrap();
                let start = Instant::now();
                rt.block_on(slices.delete(&name, &DeleteParams::default()))
                    .unwrap();
                loop {
                    if current().is_some_and(|s| s.metadata.name.as_deref() != Some(name.as_str()))
                    {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                total += start.elapsed();
            }
            total
        })
    });
    group.finish();
    drop(plugin);
}

criterion_group!(benches, bench);
criterion_main!(benches);
