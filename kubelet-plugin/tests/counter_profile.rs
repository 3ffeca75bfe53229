//! A second device profile, written only against the seam (`profile::DeviceProfile`), run
//! by the same plumbing as the fake device: the proof that registration, the DRA
//! services, the checkpoint, the CDI files and the ResourceSlice publisher know nothing
//! of fake devices. docs/write-your-own-driver.md walks through it.
//!
//! The "counter" device: a node has `counter-0 … counter-<n-1>`; a claim's opaque config
//! may set `start`, and each container sees `COUNTER_<name>=<start>` for each counter it
//! is given. The plugin runs in-process (`run`) against the emulated apiserver of
//! Kubernetes 1.34 and is driven over its socket as a structured kubelet drives it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{CLAIM_NS, allocated_claim_of, start_api_version, validate_schema};
use fake_dra_kubelet_plugin::cdi::{ContainerEdits, Device};
use fake_dra_kubelet_plugin::claim::{ClaimRef, ClaimUid};
use fake_dra_kubelet_plugin::profile::{
    Attribute, DeviceProfile, DriverAllocation, ProfileError, SliceDevice,
};
use fake_dra_kubelet_plugin::{Config, mode::ModeFlag, run};
use fake_dra_ops::conn::Limits;
use fake_dra_proto::dra_v1;
use k8s_openapi::api::resource::v1;
use kube::Api;
use kube::api::ListParams;
use serde::{Deserialize, Serialize};
use serde_json::json;

const NODE: &str = "node-1";
const DRIVER: &str = "counter.example.com";
/// The config kind the profile reads from `opaque.parameters`.
const CONFIG_API_VERSION: &str = "counter.example.com/v1";
const CONFIG_KIND: &str = "CounterConfig";
/// The largest `start`: what a real driver would check against its hardware.
const MAX_START: u32 = 1_000_000;
/// Guards against a hang only.
const LIMIT: Duration = Duration::from_secs(30);

// ---- The profile: pure, no I/O. ----

#[derive(Debug)]
struct CounterProfile {
    counters: usize,
}

/// All the checkpoint keeps of a counter claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CounterPrepared {
    counters: Vec<String>,
    start: u32,
}

/// `opaque.parameters` of a counter config.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CounterConfig {
    api_version: String,
    kind: String,
    #[serde(default)]
    start: u32,
}

impl CounterProfile {
    fn is_counter(&self, name: &str) -> bool {
        name.strip_prefix("counter-")
            .and_then(|i| i.parse::<usize>().ok())
            .is_some_and(|i| i < self.counters && name == format!("counter-{i}"))
    }

    fn env(counter: &str, start: u32) -> String {
        format!(
            "COUNTER_{}={start}",
            counter.replace('-', "_").to_uppercase()
        )
    }
}

impl DeviceProfile for CounterProfile {
    type Prepared = CounterPrepared;

    fn cdi_class(&self) -> &str {
        "counter"
    }

    fn slice_devices(&self) -> Vec<SliceDevice> {
        (0..self.counters)
            .map(|i| SliceDevice {
                name: format!("counter-{i}"),
                attributes: BTreeMap::from([("width".to_owned(), Attribute::Int(64))]),
                ..Default::default()
            })
            .collect()
    }

    fn prepare_allocation(
        &self,
        _claim: &ClaimRef,
        allocation: &DriverAllocation,
    ) -> Result<CounterPrepared, ProfileError> {
        // The last config that applies wins: class configs come first, the claim's after.
        let mut start = 0;
        for config in &allocation.configs {
            let parsed: CounterConfig =
                serde_json::from_value(config.parameters.clone()).map_err(|e| {
                    ProfileError::new(
                        "bad_parameters",
                        format!("config[{}].opaque.parameters: {e}", config.index),
                    )
                })?;
            if parsed.api_version != CONFIG_API_VERSION || parsed.kind != CONFIG_KIND {
                return Err(ProfileError::new(
                    "bad_parameters",
                    format!(
                        "config[{}].opaque.parameters: {}/{} is not {CONFIG_API_VERSION}/{CONFIG_KIND}",
                        config.index, parsed.api_version, parsed.kind
                    ),
                ));
            }
            start = parsed.start;
        }
        let prepared = CounterPrepared {
            counters: allocation
                .devices
                .iter()
                .map(|d| d.device.clone())
                .collect(),
            start,
        };
        self.check(&prepared)?;
        Ok(prepared)
    }

    fn held_devices(&self, prepared: &CounterPrepared) -> Vec<String> {
        prepared.counters.clone()
    }

    fn check(&self, prepared: &CounterPrepared) -> Result<(), ProfileError> {
        if let Some(bad) = prepared.counters.iter().find(|c| !self.is_counter(c)) {
            return Err(ProfileError::new(
                "unknown_device",
                format!(
                    "device {bad:?} is not a counter of this node (counter-0 … counter-{})",
                    self.counters - 1
                ),
            ));
        }
        if prepared.start > MAX_START {
            return Err(ProfileError::new(
                "bad_parameters",
                format!("start {} is above the limit {MAX_START}", prepared.start),
            ));
        }
        Ok(())
    }

    fn common_edits(&self) -> ContainerEdits {
        ContainerEdits {
            env: vec![format!("COUNTER_NODE={NODE}")],
        }
    }

    fn cdi_devices(&self, uid: &ClaimUid, prepared: &CounterPrepared) -> Vec<Device> {
        let all = Device {
            name: uid.to_string(),
            container_edits: ContainerEdits {
                env: prepared
                    .counters
                    .iter()
                    .map(|c| Self::env(c, prepared.start))
                    .collect(),
            },
        };
        let each = prepared.counters.iter().map(|c| Device {
            name: format!("{uid}:{c}"),
            container_edits: ContainerEdits {
                env: vec![Self::env(c, prepared.start)],
            },
        });
        std::iter::once(all).chain(each).collect()
    }

    fn claim_cdi_devices(&self, uid: &ClaimUid, _prepared: &CounterPrepared) -> Vec<String> {
        vec![uid.to_string()]
    }

    fn device_cdi_devices(
        &self,
        uid: &ClaimUid,
        prepared: &CounterPrepared,
        device: &str,
    ) -> Option<Vec<String>> {
        prepared
            .counters
            .iter()
            .any(|c| c == device)
            .then(|| vec![format!("{uid}:{device}")])
    }
}

// ---- The test: the unchanged plumbing serves it. ----

fn counter_config(parameters: serde_json::Value) -> serde_json::Value {
    json!([{"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": parameters}}])
}

async fn wait_for_socket(path: &std::path::Path) {
    let deadline = Instant::now() + LIMIT;
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_profile_runs_on_the_same_plumbing() {
    let api = start_api_version((1, 34)).await;
    let root = tempfile::tempdir().unwrap();
    let plugin_dir = root.path().join("plugins").join(DRIVER);
    let cdi_root = root.path().join("cdi");
    let config = Config {
        node_name: NODE.into(),
        driver_name: DRIVER.into(),
        namespace: common::NAMESPACE.into(),
        cdi_root: cdi_root.clone(),
        plugin_dir: plugin_dir.clone(),
        registry_dir: root.path().join("plugins_registry"),
        kubeconfig: Some(api.kubeconfig().to_path_buf()),
        http_address: None,
        crash_point: None,
        mode: ModeFlag::Structured,
        connection_limits: Limits::from_flags(0, 300),
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let plugin = tokio::spawn(run(config, CounterProfile { counters: 3 }, async move {
        let _ = stopped.await;
    }));
    let socket = plugin_dir.join(fake_dra_kubelet_plugin::DRA_SOCKET);
    wait_for_socket(&socket).await;

    // The slice lists the profile's devices under the driver's name.
    let slices: Api<v1::ResourceSlice> = Api::all(api.client().unwrap());
    let deadline = Instant::now() + LIMIT;
    let slice = loop {
        if let [only] = slices
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .as_slice()
        {
            break only.clone();
        }
        assert!(Instant::now() < deadline, "no slice");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(slice.spec.driver, DRIVER);
    let devices = slice.spec.devices.unwrap();
    let names: Vec<_> = devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["counter-0", "counter-1", "counter-2"]);
    assert_eq!(
        devices[1].attributes.as_ref().unwrap()["width"].int,
        Some(64)
    );

    let claim = |name: &str, devices: &[&str], parameters: serde_json::Value| {
        let devices: Vec<String> = devices.iter().map(|d| d.to_string()).collect();
        let api = &api;
        let name = name.to_owned();
        async move {
            allocated_claim_of(
                api,
                "v1",
                &name,
                DRIVER,
                NODE,
                &devices,
                Some(counter_config(parameters)),
            )
            .await
        }
    };
    let good = claim(
        "good",
        &["counter-1", "counter-2"],
        json!({"apiVersion": CONFIG_API_VERSION, "kind": CONFIG_KIND, "start": 7}),
    )
    .await;
    let same_counter = claim(
        "same-counter",
        &["counter-2"],
        json!({"apiVersion": CONFIG_API_VERSION, "kind": CONFIG_KIND}),
    )
    .await;
    let too_big = claim(
        "too-big",
        &["counter-0"],
        json!({"apiVersion": CONFIG_API_VERSION, "kind": CONFIG_KIND, "start": MAX_START + 1}),
    )
    .await;
    let wrong_kind = claim(
        "wrong-kind",
        &["counter-0"],
        json!({"apiVersion": "v1", "kind": "ConfigMap"}),
    )
    .await;

    let mut client = dra_v1::dra_plugin_client::DraPluginClient::new(
        fake_dra_proto::connect_unix(&socket).await.unwrap(),
    );
    let v1_claim = |uid: &str, name: &str| dra_v1::Claim {
        namespace: CLAIM_NS.into(),
        uid: uid.into(),
        name: name.into(),
    };
    let answers = client
        .node_prepare_resources(dra_v1::NodePrepareResourcesRequest {
            claims: vec![v1_claim(&good, "good")],
        })
        .await
        .unwrap()
        .into_inner()
        .into_map();
    let answer = &answers[&good];
    assert_eq!(answer.error, "");
    let kind = format!("k8s.{DRIVER}/counter");
    let per_device: Vec<(String, Vec<String>)> = answer
        .devices
        .iter()
        .map(|d| (d.device_name.clone(), d.cdi_device_ids.clone()))
        .collect();
    assert_eq!(
        per_device,
        [
            (
                "counter-1".to_owned(),
                vec![format!("{kind}=common"), format!("{kind}={good}:counter-1")]
            ),
            (
                "counter-2".to_owned(),
                vec![format!("{kind}=common"), format!("{kind}={good}:counter-2")]
            ),
        ]
    );

    // The claim's spec: the profile's devices, valid CDI.
    let spec_path = cdi_root.join(format!("k8s.{DRIVER}-counter_{good}.json"));
    validate_schema(&spec_path);
    let spec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&spec_path).unwrap()).unwrap();
    assert_eq!(spec["kind"], kind);
    assert_eq!(spec["devices"][0]["name"], good.as_str());
    assert_eq!(
        spec["devices"][0]["containerEdits"]["env"],
        json!(["COUNTER_COUNTER_1=7", "COUNTER_COUNTER_2=7"])
    );
    assert_eq!(
        spec["devices"][2]["containerEdits"]["env"],
        json!(["COUNTER_COUNTER_2=7"])
    );
    validate_schema(&cdi_root.join(format!("k8s.{DRIVER}-counter_common.json")));

    // The checkpoint keeps the profile's data next to the claim's name, nothing more.
    let checkpoint: serde_json::Value = serde_json::from_slice(
        &std::fs::read(plugin_dir.join(fake_dra_kubelet_plugin::checkpoint::FILE_NAME)).unwrap(),
    )
    .unwrap();
    assert_eq!(
        checkpoint["claims"][&good],
        json!({"namespace": CLAIM_NS, "name": "good", "counters": ["counter-1", "counter-2"], "start": 7})
    );

    // The plumbing's rules hold for any profile: a held device is not handed out twice,
    // and the profile's refusals reach the kubelet naming the field and the limit.
    let answers = client
        .node_prepare_resources(dra_v1::NodePrepareResourcesRequest {
            claims: vec![
                v1_claim(&same_counter, "same-counter"),
                v1_claim(&too_big, "too-big"),
                v1_claim(&wrong_kind, "wrong-kind"),
            ],
        })
        .await
        .unwrap()
        .into_inner()
        .into_map();
    let error = |uid: &str| answers[uid].error.clone();
    assert!(
        error(&same_counter).contains("counter-2") && error(&same_counter).contains(&good),
        "{}",
        error(&same_counter)
    );
    assert!(
        error(&too_big).contains("start 1000001 is above the limit 1000000"),
        "{}",
        error(&too_big)
    );
    assert!(
        error(&wrong_kind).contains("config[0].opaque.parameters: v1/ConfigMap"),
        "{}",
        error(&wrong_kind)
    );
    let mut specs: Vec<String> = std::fs::read_dir(&cdi_root)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    specs.sort();
    let mut expected = [
        format!("k8s.{DRIVER}-counter_{good}.json"),
        format!("k8s.{DRIVER}-counter_common.json"),
    ];
    // The uid is random, so it may sort either side of "common".
    expected.sort();
    assert_eq!(specs, expected);

    // Unprepare removes the claim's spec; the node's common spec stays.
    let answers = client
        .node_unprepare_resources(dra_v1::NodeUnprepareResourcesRequest {
            claims: vec![v1_claim(&good, "good")],
        })
        .await
        .unwrap()
        .into_inner()
        .into_map();
    assert_eq!(answers[&good].error, "");
    assert!(!spec_path.exists());

    stop.send(()).unwrap();
    tokio::time::timeout(LIMIT, plugin)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(!socket.exists(), "socket left behind at shutdown");
}
