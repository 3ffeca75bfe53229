//! The gpu profile on the real plumbing: `run` with `GpuProfile` against the emulated
//! apiserver, driven over its socket as a structured kubelet drives it. The ResourceSlices
//! carry the GPUs, their partitions and counter sets, and the shared GPU's capacity; a
//! prepared claim's CDI spec gives containers `FAKE_GPU_<k>`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{CLAIM_NS, inject, prepare_v1_at, start_api_version, v1_claim, validate_schema};
use dra_kubelet_plugin::ModeFlag;
use fake_dra_emulator::apiserver::ApiServer;
use fake_dra_kubelet_plugin::gpu::groups::parse_gpus;
use fake_dra_kubelet_plugin::gpu::{Catalog, GpuProfile};
use k8s_openapi::api::resource::v1;
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::{Value, json};

const NODE: &str = "gpu-node-1";
const DRIVER: &str = "gpu.example.com";
/// Guards against a hang only.
const LIMIT: Duration = Duration::from_secs(30);
const SHARE_1: &str = "6f1c2e9a-0000-4000-8000-000000000001";
const SHARE_2: &str = "6f1c2e9a-0000-4000-8000-000000000002";

/// A plugin serving `gpus` (the `--gpus` syntax) on [`NODE`].
struct Plugin {
    _root: tempfile::TempDir,
    cdi_root: PathBuf,
    socket: PathBuf,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), dra_kubelet_plugin::Error>>,
}

impl Plugin {
    async fn start(api: &ApiServer, gpus: &str) -> Self {
        let root = tempfile::tempdir().unwrap();
        let plugin_dir = root.path().join("plugins").join(DRIVER);
        let cdi_root = root.path().join("cdi");
        let plugin = dra_kubelet_plugin::Plugin::new(DRIVER, NODE, api.client().unwrap())
            .cdi_root(&cdi_root)
            .plugin_dir(&plugin_dir)
            .registry_dir(root.path().join("plugins_registry"))
            .mode(ModeFlag::Structured)
            .checkpoint_type(
                fake_dra_kubelet_plugin::CHECKPOINT_API_VERSION,
                fake_dra_kubelet_plugin::CHECKPOINT_KIND,
            );
        let groups = parse_gpus(gpus).unwrap();
        let profile = GpuProfile::new(NODE, DRIVER, &groups, &Catalog::builtin()).unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(plugin.run(profile, async move {
            let _ = stopped.await;
        }));
        let socket = plugin_dir.join(dra_kubelet_plugin::DRA_SOCKET);
        let deadline = Instant::now() + LIMIT;
        while !socket.exists() {
            assert!(
                Instant::now() < deadline,
                "{} never appeared",
                socket.display()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Self {
            _root: root,
            cdi_root,
            socket,
            stop,
            task,
        }
    }

    async fn stop(self) {
        self.stop.send(()).unwrap();
        tokio::time::timeout(LIMIT, self.task)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(!self.socket.exists(), "socket left behind at shutdown");
    }

    fn spec_path(&self, uid: &str) -> PathBuf {
        self.cdi_root.join(format!("k8s.{DRIVER}-gpu_{uid}.json"))
    }
}

/// The node's slices once the pool is complete (`resourceSliceCount` of them), as JSON.
async fn pool(api: &ApiServer) -> Vec<Value> {
    let slices: Api<v1::ResourceSlice> = Api::all(api.client().unwrap());
    let deadline = Instant::now() + LIMIT;
    loop {
        let items = slices.list(&ListParams::default()).await.unwrap().items;
        let complete = items.first().is_some_and(|s| {
            usize::try_from(s.spec.pool.resource_slice_count).ok() == Some(items.len())
        });
        if complete {
            let mut json: Vec<Value> = items
                .iter()
                .map(|s| serde_json::to_value(s).unwrap())
                .collect();
            // Counter-set slices first, then by first device: the packing order.
            json.sort_by_key(|s| {
                (
                    s["spec"]["devices"][0]["name"].as_str().map(str::to_owned),
                    s["metadata"]["name"].as_str().map(str::to_owned),
                )
            });
            return json;
        }
        assert!(
            Instant::now() < deadline,
            "the pool never completed: {items:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn devices_of(slices: &[Value]) -> Vec<Value> {
    slices
        .iter()
        .flat_map(|s| s["spec"]["devices"].as_array().cloned().unwrap_or_default())
        .collect()
}

fn find<'a>(devices: &'a [Value], name: &str) -> &'a Value {
    devices.iter().find(|d| d["name"] == name).unwrap()
}

/// Creates a v1 claim allocated as the scheduler would: `results` (JSON entries without
/// driver and pool) and `config`.
async fn claim(api: &ApiServer, name: &str, results: Vec<Value>, config: Vec<Value>) -> String {
    let client = api.client().unwrap();
    let claims: Api<v1::ResourceClaim> = Api::namespaced(client, CLAIM_NS);
    let object = json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": CLAIM_NS},
        "spec": {"devices": {"requests": [
            {"name": "req", "exactly": {"deviceClassName": "gpu.example.com", "count": results.len()}}
        ]}},
    });
    let mut created = claims
        .create(
            &PostParams::default(),
            &serde_json::from_value(object).unwrap(),
        )
        .await
        .unwrap();
    let results: Vec<Value> = results
        .into_iter()
        .map(|mut r| {
            r["request"] = json!("req");
            r["driver"] = json!(DRIVER);
            r["pool"] = json!(NODE);
            r
        })
        .collect();
    created.status = Some(
        serde_json::from_value(json!({"allocation": {
            "devices": {"results": results, "config": config},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [NODE]}
            ]}]},
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpus_partitions_and_shares_on_kubernetes_1_34() {
    let api = start_api_version((1, 34)).await;
    let plugin = Plugin::start(&api, "A100-80GB:2:partitioned,L4-24GB:1:shared,H100-80GB:1").await;

    // 1.34: each counter set in the slice of its devices; 28 devices fit one slice.
    let slices = pool(&api).await;
    assert_eq!(slices.len(), 1);
    let spec = &slices[0]["spec"];
    assert_eq!(spec["driver"], DRIVER);
    assert_eq!(
        spec["sharedCounters"],
        json!([
            {"name": "gpu-0-counters", "counters": {"memory": {"value": "80Gi"}, "slices": {"value": "7"}}},
            {"name": "gpu-1-counters", "counters": {"memory": {"value": "80Gi"}, "slices": {"value": "7"}}},
        ])
    );
    let devices = devices_of(&slices);
    assert_eq!(devices.len(), 2 * 13 + 2);
    let part = find(&devices, "gpu-1-3g-40gb-0");
    assert_eq!(
        part["consumesCounters"],
        json!([{"counterSet": "gpu-1-counters", "counters": {"memory": {"value": "40Gi"}, "slices": {"value": "3"}}}])
    );
    assert_eq!(part["attributes"]["profile"], json!({"string": "3g.40gb"}));
    assert_eq!(part["attributes"]["type"], json!({"string": "partition"}));
    let h100 = find(&devices, "gpu-3");
    assert_eq!(
        h100["attributes"]["productName"],
        json!({"string": "H100-SXM5-80GB"})
    );
    assert_eq!(
        h100["attributes"]["resource.kubernetes.io/pcieRoot"],
        json!({"string": "pci0000:80"})
    );
    assert_eq!(
        h100["attributes"]["resource.kubernetes.io/numaNode"],
        json!({"int": 1})
    );
    assert_eq!(h100["capacity"], json!({"memory": {"value": "80Gi"}}));
    let l4 = find(&devices, "gpu-2");
    assert_eq!(l4["allowMultipleAllocations"], json!(true));
    assert_eq!(
        l4["capacity"]["memory"],
        json!({"value": "24Gi", "requestPolicy": {"default": "10Gi", "validRange": {"min": "1Gi", "step": "1Gi"}}})
    );

    let whole = claim(&api, "whole", vec![json!({"device": "gpu-1"})], vec![]).await;
    let part_of_held = claim(
        &api,
        "part-of-held",
        vec![json!({"device": "gpu-1-1g-10gb-0"})],
        vec![],
    )
    .await;
    let mixed = claim(
        &api,
        "mixed",
        vec![
            json!({"device": "gpu-0-2g-20gb-1"}),
            json!({"device": "gpu-2", "shareID": SHARE_1, "consumedCapacity": {"memory": "20Gi"}}),
            json!({"device": "gpu-2", "shareID": SHARE_2, "consumedCapacity": {"memory": "4Gi"}}),
        ],
        vec![],
    )
    .await;
    let with_config = claim(
        &api,
        "with-config",
        vec![json!({"device": "gpu-3"})],
        vec![json!({"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": {"x": 1}}})],
    )
    .await;
    let unknown = claim(&api, "unknown", vec![json!({"device": "gpu-4"})], vec![]).await;

    let answers = prepare_v1_at(
        &plugin.socket,
        vec![v1_claim(&whole, "whole"), v1_claim(&mixed, "mixed")],
    )
    .await;
    assert_eq!(answers[&whole].error, "");
    assert_eq!(answers[&mixed].error, "");
    let kind = format!("k8s.{DRIVER}/gpu");
    let outcome: Vec<(String, Option<String>, Vec<String>)> = answers[&mixed]
        .devices
        .iter()
        .map(|d| {
            (
                d.device_name.clone(),
                d.share_id.clone(),
                d.cdi_device_ids.clone(),
            )
        })
        .collect();
    let ids = |ks: &[usize]| -> Vec<String> {
        std::iter::once(format!("{kind}=common"))
            .chain(ks.iter().map(|k| format!("{kind}={mixed}:{k}")))
            .collect()
    };
    assert_eq!(
        outcome,
        [
            ("gpu-0-2g-20gb-1".to_owned(), None, ids(&[0])),
            // Each share its own CDI device: a container naming one request gets its share.
            ("gpu-2".to_owned(), Some(SHARE_1.to_owned()), ids(&[1])),
            ("gpu-2".to_owned(), Some(SHARE_2.to_owned()), ids(&[2])),
        ]
    );

    // The spec: valid CDI, each device's variables, numbered claim-wide.
    let spec_path = plugin.spec_path(&mixed);
    validate_schema(&spec_path);
    validate_schema(
        &plugin
            .cdi_root
            .join(format!("k8s.{DRIVER}-gpu_common.json")),
    );
    let spec: Value = serde_json::from_slice(&std::fs::read(&spec_path).unwrap()).unwrap();
    assert_eq!(spec["kind"], kind);
    let uuid = |d: &Value| {
        d["attributes"]["uuid"]["string"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let part_uuid = uuid(find(&devices, "gpu-0-2g-20gb-1"));
    let l4_uuid = uuid(l4);
    assert_eq!(
        spec["devices"][0]["containerEdits"]["env"],
        json!([
            format!("FAKE_GPU_0={part_uuid}"),
            "FAKE_GPU_0_PRODUCT=A100-SXM4-80GB",
            "FAKE_GPU_0_MEMORY=20Gi",
            "FAKE_GPU_0_PARTITION=2g.20gb",
            format!("FAKE_GPU_1={l4_uuid}"),
            "FAKE_GPU_1_PRODUCT=L4",
            "FAKE_GPU_1_MEMORY=20Gi",
            format!("FAKE_GPU_1_SHARE={SHARE_1}"),
            format!("FAKE_GPU_2={l4_uuid}"),
            "FAKE_GPU_2_PRODUCT=L4",
            "FAKE_GPU_2_MEMORY=4Gi",
            format!("FAKE_GPU_2_SHARE={SHARE_2}"),
            "FAKE_GPU_COUNT=3",
        ])
    );
    // What a container given the shared GPU's ids sees, as the CDI library injects it.
    let env = inject(&plugin.cdi_root, &ids(&[1, 2]));
    assert!(env.contains(&format!("FAKE_NODE_NAME={NODE}")), "{env:?}");
    assert!(env.contains(&"FAKE_GPU_2_MEMORY=4Gi".to_owned()), "{env:?}");
    assert!(!env.iter().any(|e| e.starts_with("FAKE_GPU_0")), "{env:?}");

    // The checkpoint keeps the allocation, nothing recomputable.
    let checkpoint: Value = serde_json::from_slice(
        &std::fs::read(
            plugin
                ._root
                .path()
                .join("plugins")
                .join(DRIVER)
                .join(dra_kubelet_plugin::CHECKPOINT_FILE),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(
        checkpoint["claims"][&whole],
        json!({"namespace": CLAIM_NS, "name": "whole", "devices": [{"device": "gpu-1"}]})
    );

    // Refusals reach the kubelet: a partition of a GPU another claim has whole, an opaque
    // config, a device the node does not have.
    let answers = prepare_v1_at(
        &plugin.socket,
        vec![
            v1_claim(&part_of_held, "part-of-held"),
            v1_claim(&with_config, "with-config"),
            v1_claim(&unknown, "unknown"),
        ],
    )
    .await;
    let error = |uid: &str| answers[uid].error.clone();
    assert!(
        error(&part_of_held).contains("gpu-1-1g-10gb-0") && error(&part_of_held).contains(&whole),
        "{}",
        error(&part_of_held)
    );
    assert!(
        error(&with_config).contains("takes no parameters"),
        "{}",
        error(&with_config)
    );
    assert!(
        error(&unknown).contains("device \"gpu-4\" is not a device of node \"gpu-node-1\""),
        "{}",
        error(&unknown)
    );

    plugin.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_partitioned_gpus_span_slices_on_kubernetes_1_35() {
    let api = start_api_version((1, 35)).await;
    let plugin = Plugin::start(&api, "A100-80GB:8:partitioned").await;
    // 1.35+: the counter sets in a slice of their own, then devices 64 to a slice.
    let slices = pool(&api).await;
    let shape: Vec<(usize, usize)> = slices
        .iter()
        .map(|s| {
            let len = |f: &str| s["spec"][f].as_array().map_or(0, Vec::len);
            (len("sharedCounters"), len("devices"))
        })
        .collect();
    let mut sorted = shape.clone();
    sorted.sort();
    assert_eq!(sorted, [(0, 40), (0, 64), (8, 0)]);
    let generations: std::collections::BTreeSet<i64> = slices
        .iter()
        .map(|s| s["spec"]["pool"]["generation"].as_i64().unwrap())
        .collect();
    assert_eq!(generations.len(), 1, "one generation");
    let devices = devices_of(&slices);
    assert_eq!(devices.len(), 104);
    assert_eq!(
        find(&devices, "gpu-7-1g-10gb-6")["consumesCounters"][0]["counterSet"],
        "gpu-7-counters"
    );

    let uid = claim(
        &api,
        "part",
        vec![json!({"device": "gpu-7-1g-10gb-6"})],
        vec![],
    )
    .await;
    let answers = prepare_v1_at(&plugin.socket, vec![v1_claim(&uid, "part")]).await;
    assert_eq!(answers[&uid].error, "");
    let spec: Value =
        serde_json::from_slice(&std::fs::read(plugin.spec_path(&uid)).unwrap()).unwrap();
    let env = &spec["devices"][1]["containerEdits"]["env"];
    assert_eq!(env[1], "FAKE_GPU_0_PRODUCT=A100-SXM4-80GB");
    assert_eq!(env[2], "FAKE_GPU_0_MEMORY=10Gi");
    assert_eq!(env[3], "FAKE_GPU_0_PARTITION=1g.10gb");
    plugin.stop().await;
}
