//! A device profile written only against the library's seam (`DeviceProfile`), run by
//! the library: registration, the DRA services, the typed config, the checkpoint, the
//! CDI files and the ResourceSlice publisher, with no fake-dra code at all.
//!
//! The "counter" device: a node has `counter-0 … counter-<n-1>`; a claim's opaque config
//! may set `start`, and each container sees `COUNTER_<name>=<start>` and the counter's
//! device node for each counter it is given. The plugin runs in-process
//! (`Plugin::run`) against the emulated apiserver of Kubernetes 1.34 and is driven over
//! its socket as a structured kubelet drives it; the bad inputs of issue 20 (a config of
//! the wrong kind or apiVersion, over the size limit, refused by the profile's
//! validation, a device node whose host path does not exist) each fail their claim
//! alone, naming the field.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::common::{CLAIM_NS, allocated_claim_of, start_api_with, validate_schema};
use dra_kubelet_plugin::cdi::{ContainerEdits, Device, DeviceNode};
use dra_kubelet_plugin::claim::DriverAllocation;
use dra_kubelet_plugin::claim::{AllocatedDevice, ClaimRef, ClaimUid};
use dra_kubelet_plugin::device::{Attribute, SliceDevice};
use dra_kubelet_plugin::{DeviceProfile, FieldError, ModeFlag, OpaqueConfig, Plugin, ProfileError};
use dra_kubelet_proto::dra_v1;
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
    /// Where the host's device node of each counter is (`counter-<i>` in it): what a
    /// real driver finds under /dev.
    nodes: PathBuf,
}

/// All the checkpoint keeps of a counter claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CounterPrepared {
    counters: Vec<String>,
    start: u32,
}

/// `opaque.parameters` of a counter config: the plugin checks `apiVersion` and `kind`.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CounterConfig {
    #[serde(default)]
    start: u32,
}

impl OpaqueConfig for CounterConfig {
    const TYPE: Option<(&'static str, &'static str)> = Some((CONFIG_API_VERSION, CONFIG_KIND));

    fn validate(&self) -> Result<(), FieldError> {
        if self.start > MAX_START {
            return Err(FieldError::new(
                "start",
                format!("must be at most {MAX_START}, got {}", self.start),
            ));
        }
        Ok(())
    }
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
    type Config = CounterConfig;

    fn cdi_class(&self) -> &str {
        "counter"
    }

    fn slice_devices(&self) -> Vec<SliceDevice> {
        (0..self.counters)
            .map(|i| {
                let mut built = SliceDevice::new(format!("counter-{i}"));
                built.attributes = BTreeMap::from([("width".to_owned(), Attribute::Int(64))]);
                built
            })
            .collect()
    }

    fn prepare_allocation(
        &self,
        _claim: &ClaimRef,
        allocation: &DriverAllocation<CounterConfig>,
    ) -> Result<CounterPrepared, ProfileError> {
        // The last config that applies wins: class configs come first, the claim's after.
        let start = allocation.configs.last().map_or(0, |c| c.config.start);
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
        ContainerEdits::new().env("COUNTER_NODE", NODE)
    }

    /// The claim device sets every counter's variable; each counter's own device sets
    /// its variable and brings its device node.
    fn cdi_devices(&self, uid: &ClaimUid, prepared: &CounterPrepared) -> Vec<Device> {
        let all = Device::new(
            uid.to_string(),
            ContainerEdits::new().env_entries(
                prepared
                    .counters
                    .iter()
                    .map(|c| Self::env(c, prepared.start)),
            ),
        );
        let each = prepared.counters.iter().map(|c| {
            let host = self.nodes.join(c);
            Device::new(
                format!("{uid}:{c}"),
                ContainerEdits::new()
                    .env_entries([Self::env(c, prepared.start)])
                    .device_node(
                        DeviceNode::new(format!("/dev/{c}"))
                            .host_path(host.to_string_lossy())
                            .permissions("rw"),
                    ),
            )
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
        device: &AllocatedDevice,
    ) -> Option<Vec<String>> {
        prepared
            .counters
            .contains(&device.device)
            .then(|| vec![format!("{uid}:{}", device.device)])
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
    let api = start_api_with((1, 34), Vec::new(), &[CLAIM_NS]).await;
    let root = tempfile::tempdir().unwrap();
    let plugin_dir = root.path().join("plugins").join(DRIVER);
    let cdi_root = root.path().join("cdi");
    // The host's device nodes of counters 0 to 2; counter-3 has none.
    let nodes = root.path().join("dev");
    std::fs::create_dir(&nodes).unwrap();
    for i in 0..3 {
        std::os::unix::fs::symlink("/dev/null", nodes.join(format!("counter-{i}"))).unwrap();
    }
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let profile = CounterProfile {
        counters: 4,
        nodes: nodes.clone(),
    };
    let plugin = Plugin::new(DRIVER, NODE, api.client().unwrap())
        .cdi_root(&cdi_root)
        .plugin_dir(&plugin_dir)
        .registry_dir(root.path().join("plugins_registry"))
        .mode(ModeFlag::Structured);
    let plugin = tokio::spawn(plugin.run(profile, async move {
        let _ = stopped.await;
    }));
    let socket = plugin_dir.join(dra_kubelet_plugin::DRA_SOCKET);
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
    assert_eq!(names, ["counter-0", "counter-1", "counter-2", "counter-3"]);
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
    let config = |extra: serde_json::Value| {
        let mut c = json!({"apiVersion": CONFIG_API_VERSION, "kind": CONFIG_KIND});
        c.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        c
    };
    let good = claim(
        "good",
        &["counter-1", "counter-2"],
        config(json!({"start": 7})),
    )
    .await;
    let same_counter = claim("same-counter", &["counter-2"], config(json!({}))).await;
    let too_big = claim(
        "too-big",
        &["counter-0"],
        config(json!({"start": MAX_START + 1})),
    )
    .await;
    let wrong_kind = claim(
        "wrong-kind",
        &["counter-0"],
        json!({"apiVersion": CONFIG_API_VERSION, "kind": "ConfigMap"}),
    )
    .await;
    let wrong_version = claim(
        "wrong-version",
        &["counter-0"],
        json!({"apiVersion": "counter.example.com/v2", "kind": CONFIG_KIND}),
    )
    .await;
    let oversized = claim(
        "oversized",
        &["counter-0"],
        config(json!({"pad": "x".repeat(1 << 20)})),
    )
    .await;
    let no_node = claim("no-node", &["counter-3"], config(json!({}))).await;

    let mut client = dra_v1::dra_plugin_client::DraPluginClient::new(
        dra_kubelet_proto::connect_unix(&socket).await.unwrap(),
    );
    let v1_claim = |uid: &str, name: &str| dra_v1::Claim {
        namespace: CLAIM_NS.into(),
        uid: uid.into(),
        name: name.into(),
    };
    // One batch: the good claim is prepared, each bad one gets an error naming the field
    // and the limit, and nothing is written for it.
    let answers = client
        .node_prepare_resources(dra_v1::NodePrepareResourcesRequest {
            claims: vec![
                v1_claim(&too_big, "too-big"),
                v1_claim(&good, "good"),
                v1_claim(&wrong_kind, "wrong-kind"),
                v1_claim(&wrong_version, "wrong-version"),
                v1_claim(&oversized, "oversized"),
                v1_claim(&no_node, "no-node"),
            ],
        })
        .await
        .unwrap()
        .into_inner()
        .into_map();
    let answer = &answers[&good];
    assert_eq!(answer.error, "");
    let error = |uid: &str| answers[uid].error.clone();
    let parameters = "status.allocation.devices.config[0].opaque.parameters";
    for (uid, want) in [
        (
            &too_big,
            format!("{parameters}.start: must be at most 1000000, got 1000001"),
        ),
        (
            &wrong_kind,
            format!("{parameters}.kind: must be \"CounterConfig\", got \"ConfigMap\""),
        ),
        (
            &wrong_version,
            format!(
                "{parameters}.apiVersion: must be \"counter.example.com/v1\", got \"counter.example.com/v2\""
            ),
        ),
        (&oversized, format!("{parameters}: is 1048")),
        (&oversized, "at most 10240".to_owned()),
        (
            &no_node,
            format!(
                "containerEdits.deviceNodes[0].hostPath \"{}\" cannot be used on this node",
                nodes.join("counter-3").display()
            ),
        ),
    ] {
        assert!(error(uid).contains(&want), "{}\nwanted {want}", error(uid));
    }
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

    // The claim's spec: the profile's devices, valid CDI of the version its fields need
    // (a device node's hostPath is CDI 0.5.0).
    let spec_path = cdi_root.join(format!("k8s.{DRIVER}-counter_{good}.json"));
    validate_schema(&spec_path);
    let spec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&spec_path).unwrap()).unwrap();
    assert_eq!(spec["kind"], kind);
    assert_eq!(spec["cdiVersion"], "0.5.0");
    assert_eq!(spec["devices"][0]["name"], good.as_str());
    assert_eq!(
        spec["devices"][0]["containerEdits"],
        json!({"env": ["COUNTER_COUNTER_1=7", "COUNTER_COUNTER_2=7"]})
    );
    assert_eq!(
        spec["devices"][2]["containerEdits"],
        json!({
            "env": ["COUNTER_COUNTER_2=7"],
            "deviceNodes": [{"path": "/dev/counter-2", "hostPath": nodes.join("counter-2"), "permissions": "rw"}],
        })
    );
    validate_schema(&cdi_root.join(format!("k8s.{DRIVER}-counter_common.json")));

    // The checkpoint keeps the profile's data next to the claim's name, nothing more.
    let checkpoint: serde_json::Value = serde_json::from_slice(
        &std::fs::read(plugin_dir.join(dra_kubelet_plugin::CHECKPOINT_FILE)).unwrap(),
    )
    .unwrap();
    assert_eq!(checkpoint["apiVersion"], format!("{DRIVER}/v1alpha1"));
    assert_eq!(
        checkpoint["claims"],
        json!({good.clone(): {"namespace": CLAIM_NS, "name": "good", "counters": ["counter-1", "counter-2"], "start": 7}})
    );

    // The plumbing's rules hold for any profile: a held device is not handed out twice.
    let answers = client
        .node_prepare_resources(dra_v1::NodePrepareResourcesRequest {
            claims: vec![v1_claim(&same_counter, "same-counter")],
        })
        .await
        .unwrap()
        .into_inner()
        .into_map();
    let refused = &answers[&same_counter].error;
    assert!(
        refused.contains("counter-2") && refused.contains(&good),
        "{refused}"
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
