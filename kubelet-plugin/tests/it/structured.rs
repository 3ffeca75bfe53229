//! Structured mode: the real plugin binary against the emulated apiserver of Kubernetes
//! 1.34 (`resource.k8s.io/v1` + `v1beta1`) and 1.32 (`v1beta1` only), driven over its
//! unix sockets as a structured kubelet drives it. The claims' allocations are written
//! by the test, as the scheduler would write them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use std::time::{Duration, Instant};

use common::*;
use dra_kubelet_proto::{dra_v1, dra_v1beta1, pluginregistration as reg};
use fake_dra_emulator::apiserver::ApiServer;
use fake_dra_kubelet_plugin::fake::devices::children;
use k8s_openapi::api::resource::{v1, v1beta1};
use kube::Api;
use kube::api::{DeleteParams, ListParams};
use serde_json::json;

const NODE: &str = "node-1";

/// Guards against a hang only.
const LIMIT: Duration = Duration::from_secs(30);

fn opts<'a>(api: &'a ApiServer, args: &[&str]) -> Options<'a> {
    Options {
        node: NODE,
        kubeconfig: api.kubeconfig(),
        env: vec![],
        extra_args: args.iter().map(|s| s.to_string()).collect(),
    }
}

async fn v1beta1_client(
    dirs: &Dirs,
) -> dra_v1beta1::dra_plugin_client::DraPluginClient<tonic::transport::Channel> {
    dra_v1beta1::dra_plugin_client::DraPluginClient::new(
        dra_kubelet_proto::connect_unix(dirs.dra_socket())
            .await
            .unwrap(),
    )
}

async fn supported_versions(dirs: &Dirs) -> Vec<String> {
    registration(dirs)
        .await
        .unwrap()
        .get_info(reg::InfoRequest {})
        .await
        .unwrap()
        .into_inner()
        .supported_versions
}

/// Waits for exactly one slice of ours and returns it (v1 view).
async fn wait_slice(api: &ApiServer, newer_than: i64) -> v1::ResourceSlice {
    let slices: Api<v1::ResourceSlice> = Api::all(api.client().unwrap());
    let deadline = Instant::now() + LIMIT;
    loop {
        let list = slices.list(&ListParams::default()).await.unwrap().items;
        if let [only] = list.as_slice()
            && only.spec.pool.generation > newer_than
        {
            return only.clone();
        }
        assert!(Instant::now() < deadline, "no current slice: {list:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_1_34_slices_and_prepare_through_v1() {
    let api = start_api_version((1, 34)).await;
    let dirs = Dirs::new();
    let _plugin = Plugin::start(&dirs, opts(&api, &[])).await;
    assert_eq!(
        supported_versions(&dirs).await,
        [
            "v1.DRAPlugin",
            "v1beta1.DRAPlugin",
            "v1.DRAResourceHealth",
            "v1alpha1.DRAResourceHealth"
        ]
    );

    // The slice: one pool named after the node, eight devices with our attributes.
    let slice = wait_slice(&api, 0).await;
    let inv = inventory(NODE);
    assert_eq!(slice.spec.driver, DRIVER);
    assert_eq!(slice.spec.node_name.as_deref(), Some(NODE));
    assert_eq!(slice.spec.pool.name, NODE);
    assert_eq!(slice.spec.pool.resource_slice_count, 1);
    let name = slice.metadata.name.clone().unwrap();
    assert!(name.starts_with(&format!("{NODE}-{DRIVER}-")), "{name}");
    let devices = slice.spec.devices.clone().unwrap();
    assert_eq!(devices.len(), 8);
    let attrs = devices[3].attributes.clone().unwrap();
    assert_eq!(devices[3].name, "fake-3");
    assert_eq!(
        attrs["uuid"].string.as_deref(),
        Some(inv.devices[3].as_str())
    );
    assert_eq!(attrs["model"].string.as_deref(), Some(inv.model.as_str()));
    assert_eq!(attrs["index"].int, Some(3));
    assert_eq!(attrs["driverVersion"].version.as_deref(), Some("0.1.0"));
    // Settled: our own write's watch event plans nothing, so the generation stays put.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let settled = wait_slice(&api, 0).await;
    assert_eq!(settled.spec.pool.generation, slice.spec.pool.generation);
    assert_eq!(
        settled.metadata.resource_version,
        slice.metadata.resource_version
    );

    // count 4 split 2 → four devices, eight children in the env.
    let good = allocated_claim(
        &api,
        "v1",
        "good",
        NODE,
        &[0, 1, 2, 3],
        Some(claim_config(json!({"count": 4, "split": 2}))),
    )
    .await;
    let unallocated = allocated_claim(&api, "v1", "unallocated", NODE, &[4], None).await;
    let elsewhere = allocated_claim(&api, "v1", "elsewhere", "node-2", &[4], Some(json!([]))).await;
    let split0 = allocated_claim(
        &api,
        "v1",
        "split0",
        NODE,
        &[5],
        Some(claim_config(json!({"split": 0}))),
    )
    .await;
    let miscount = allocated_claim(
        &api,
        "v1",
        "miscount",
        NODE,
        &[6],
        Some(claim_config(json!({"count": 2}))),
    )
    .await;
    let other_kind = allocated_claim(&api, "v1", "other-kind", NODE, &[7], Some(json!([
        {"source": "FromClass", "opaque": {"driver": DRIVER, "parameters": {"apiVersion": "v1", "kind": "ConfigMap"}}}
    ]))).await;
    let answers = prepare_v1(
        &dirs,
        vec![
            v1_claim(&good, "good"),
            v1_claim(&unallocated, "unallocated"),
            v1_claim(&elsewhere, "elsewhere"),
            v1_claim(&split0, "split0"),
            v1_claim(&miscount, "miscount"),
            v1_claim(&other_kind, "other-kind"),
            v1_claim("0f8e2d6a-1c1b-4a53-9a1e-0a6a4c3e7c11", "good"),
        ],
    )
    .await;
    assert_eq!(answers.len(), 7);
    let err = |uid: &str| answers[uid].error.clone();
    assert!(
        err(&unallocated).contains("not allocated"),
        "{}",
        err(&unallocated)
    );
    assert!(
        err(&elsewhere).contains("pool \"node-2\""),
        "{}",
        err(&elsewhere)
    );
    assert!(
        err(&split0).contains("spec.split: must be between 1 and 64, got 0"),
        "{}",
        err(&split0)
    );
    assert!(
        err(&miscount).contains("spec.count is 2"),
        "{}",
        err(&miscount)
    );
    assert!(
        err(&other_kind).contains(".apiVersion: must be"),
        "{}",
        err(&other_kind)
    );
    assert!(err("0f8e2d6a-1c1b-4a53-9a1e-0a6a4c3e7c11").contains("the kubelet asked for"));

    let ok = &answers[&good];
    assert_eq!(ok.error, "");
    assert_eq!(ok.devices.len(), 4);
    let kind = kind();
    for (i, d) in ok.devices.iter().enumerate() {
        assert_eq!(d.request_names, vec!["req".to_string()]);
        assert_eq!(d.pool_name, NODE);
        assert_eq!(d.device_name, format!("fake-{i}"));
        // Each device answers with its own parent's CDI device.
        assert_eq!(
            d.cdi_device_ids,
            vec![
                kind.qualified("common"),
                kind.qualified(&format!("{good}:{i}"))
            ]
        );
    }
    // What a kubelet hands the runtime for a container using the whole claim: every
    // device's ids, in order, repeats included (`cdiDevicesAsList`).
    let ids: Vec<String> = ok
        .devices
        .iter()
        .flat_map(|d| d.cdi_device_ids.clone())
        .collect();
    let env = inject(&dirs.cdi_root, &ids);
    for (i, kid) in children(&inv.devices[..4], 2).iter().enumerate() {
        assert!(
            env.contains(&format!("FAKE_DEVICE_{i}={}", kid.id)),
            "{env:?}"
        );
    }
    assert!(env.contains(&format!("FAKE_NODE_NAME={NODE}")));
    validate_schema(&dirs.spec_path(&good));
    // Only the good claim wrote a spec (plus common).
    assert_eq!(dirs.spec_files().len(), 2);

    // Idempotent, and the v1beta1 service is the same handler.
    let again = v1beta1_client(&dirs)
        .await
        .node_prepare_resources(dra_v1beta1::NodePrepareResourcesRequest {
            claims: vec![dra_v1beta1::Claim {
                namespace: CLAIM_NS.into(),
                uid: good.clone(),
                name: "good".into(),
            }],
        })
        .await
        .unwrap()
        .into_inner()
        .into_map();
    assert_eq!(again[&good].error, "");
    assert_eq!(again[&good].devices.len(), 4);
    let ids_again: Vec<String> = again[&good]
        .devices
        .iter()
        .flat_map(|d| d.cdi_device_ids.clone())
        .collect();
    assert_eq!(ids_again, ids);

    // A slice deleted by hand comes back, with a newer pool generation.
    let slices: Api<v1::ResourceSlice> = Api::all(api.client().unwrap());
    slices
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    let back = wait_slice(&api, slice.spec.pool.generation).await;
    assert_ne!(back.metadata.name.unwrap(), name);
    assert_eq!(back.spec.devices.unwrap().len(), 8);

    // Unprepare removes the spec; an unknown claim is fine.
    let gone = v1_client(&dirs)
        .await
        .node_unprepare_resources(dra_v1::NodeUnprepareResourcesRequest {
            claims: vec![v1_claim(&good, "good"), v1_claim("never-prepared", "x")],
        })
        .await
        .unwrap()
        .into_inner()
        .into_map();
    assert!(gone.values().all(|r| r.error.is_empty()), "{gone:?}");
    assert!(!dirs.spec_path(&good).exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_1_32_uses_v1beta1_and_keeps_claims_across_kill9() {
    let api = start_api_version((1, 32)).await;
    let dirs = Dirs::new();
    let plugin = Plugin::start(&dirs, opts(&api, &["--mode", "structured"])).await;
    assert_eq!(
        supported_versions(&dirs).await,
        [
            "v1.DRAPlugin",
            "v1beta1.DRAPlugin",
            "v1.DRAResourceHealth",
            "v1alpha1.DRAResourceHealth"
        ]
    );
    // Written through v1beta1: attributes under `basic`.
    let slices: Api<v1beta1::ResourceSlice> = Api::all(api.client().unwrap());
    let deadline = Instant::now() + LIMIT;
    let slice = loop {
        if let Some(s) = slices
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .pop()
        {
            break s;
        }
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let basic = slice.spec.devices.unwrap()[0].basic.clone().unwrap();
    assert_eq!(basic.attributes.unwrap()["index"].int, Some(0));

    let uid = allocated_claim(&api, "v1beta1", "c", NODE, &[2], Some(json!([
        {"source": "FromClass", "opaque": {"driver": DRIVER, "parameters": params(json!({"split": 5}))}},
        {"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": params(json!({"split": 3}))}},
    ]))).await;
    let claim = dra_v1beta1::Claim {
        namespace: CLAIM_NS.into(),
        uid: uid.clone(),
        name: "c".into(),
    };
    let first = v1beta1_client(&dirs)
        .await
        .node_prepare_resources(dra_v1beta1::NodePrepareResourcesRequest {
            claims: vec![claim.clone()],
        })
        .await
        .unwrap()
        .into_inner()
        .into_map();
    assert_eq!(first[&uid].error, "");
    let env = inject(&dirs.cdi_root, &first[&uid].devices[0].cdi_device_ids);
    // Claim config (split 3) wins over the class's (split 5).
    assert!(env.iter().any(|e| e.starts_with("FAKE_DEVICE_2=")));
    assert!(!env.iter().any(|e| e.starts_with("FAKE_DEVICE_3=")));

    plugin.kill9();
    let _plugin = Plugin::start(&dirs, opts(&api, &["--mode", "structured"])).await;
    assert!(dirs.spec_path(&uid).exists());
    let again = v1beta1_client(&dirs)
        .await
        .node_prepare_resources(dra_v1beta1::NodePrepareResourcesRequest {
            claims: vec![claim],
        })
        .await
        .unwrap()
        .into_inner()
        .into_map();
    assert_eq!(again, first);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_mode_on_1_30_is_classic_and_structured_mode_refuses() {
    let api = start_api_version((1, 30)).await;
    let dirs = Dirs::new();
    let plugin = Plugin::start(&dirs, opts(&api, &[])).await;
    assert_eq!(supported_versions(&dirs).await, vec!["1.0.0".to_string()]);
    drop(plugin);

    let out = Plugin::command(&Dirs::new(), &opts(&api, &["--mode", "structured"]))
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("structured DRA (mode structured) needs resource.k8s.io v1 or v1beta1"),
        "{stderr}"
    );
}
