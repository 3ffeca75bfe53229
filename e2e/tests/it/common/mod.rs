//! What the end-to-end suites share: a running [`Sim`] per test (one at a time), reading
//! a container's env from its `export` output, and cluster-wide invariants.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use fake_dra_api::handle::AllocationHandle;
use fake_dra_api::nas::NodeAllocationState;
use fake_dra_api::upstream::pod::DraPod;
use fake_dra_api::upstream::v1alpha2::ResourceClaim;
use fake_dra_emulator::manifests::{self, Manifest};
use fake_dra_emulator::sim::{Sim, SimConfig};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams};
use serde_json::Value;

/// Containers naming one request of a two-request claim, and one naming the whole claim
/// (structured DRA; namespace `requests`).
pub const TWO_REQUESTS: &str = include_str!("two-requests.yaml");

/// Classic DRA: pod `pending` in `namespace` whose claim asks for a model no node has.
pub fn unknown_model_pod(namespace: &str) -> String {
    include_str!("unknown-model.yaml").replace("NAMESPACE", namespace)
}

/// The driver and the seed's nodes, as the default [`SimConfig`] has them.
pub const DRIVER: &str = "fake.resource.3-shake.com";
pub const NODES: [&str; 2] = ["kind-worker", "kind-worker2"];

/// What every container using a claim gets besides its devices.
pub fn common_env_ok(env: &BTreeMap<String, String>) {
    assert_eq!(
        env.get("DRA_RESOURCE_DRIVER_NAME").map(String::as_str),
        Some(DRIVER),
        "{env:?}"
    );
    let node = env
        .get("FAKE_NODE_NAME")
        .map(String::as_str)
        .unwrap_or_default();
    assert!(NODES.contains(&node), "{env:?}");
}

/// A safety net for waits; tests normally finish in seconds. Never an assertion on speed.
pub const PATIENCE: Duration = Duration::from_secs(120);

/// One emulated cluster at a time: each runs a controller, two plugins and containers,
/// and two cores are shared by all (the suites are modules of one test binary, so this
/// holds across them all).
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The same turn as [`start`] takes, for a synchronous test that runs clusters of its own
/// (the real-cluster suite and its emulator comparisons). Not from inside a runtime.
pub fn one_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.blocking_lock()
}

pub struct TestSim {
    pub sim: Option<Sim>,
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

impl std::ops::Deref for TestSim {
    type Target = Sim;
    fn deref(&self) -> &Sim {
        self.sim.as_ref().unwrap()
    }
}

impl std::ops::DerefMut for TestSim {
    fn deref_mut(&mut self) -> &mut Sim {
        self.sim.as_mut().unwrap()
    }
}

impl TestSim {
    pub async fn shutdown(mut self) {
        if let Some(sim) = self.sim.take() {
            sim.shutdown().await;
        }
    }
}

pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_test_writer()
        .try_init();
}

/// Podman when usable, and required when `FAKE_DRA_REQUIRE_PODMAN=1` (CI); otherwise the
/// process runner, announced loudly by the runtime.
pub async fn start(config: SimConfig) -> TestSim {
    init_tracing();
    let turn = ONE_AT_A_TIME.lock().await;
    let sim = Sim::start(config)
        .await
        .expect("start the emulated cluster with the real binaries");
    eprintln!("e2e: runtime {}", sim.cluster().config().runtime.name());
    TestSim {
        sim: Some(sim),
        _turn: turn,
    }
}

pub async fn start_default() -> TestSim {
    start(SimConfig::default()).await
}

pub fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples")
}

pub fn example(name: &str) -> Vec<Manifest> {
    manifests::load(&examples_dir().join(name)).unwrap()
}

pub fn parse(yaml: &str) -> Vec<Manifest> {
    manifests::parse(yaml, "test").unwrap()
}

/// The variables of `export` output (`export K='V'`), as busybox and dash print them.
pub fn exported(lines: &[String]) -> BTreeMap<String, String> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("export "))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.trim_matches('\'').to_string()))
        .collect()
}

/// Waits until the container printed its environment and returns it.
pub async fn env_of(
    sim: &Sim,
    namespace: &str,
    pod: &str,
    container: &str,
) -> BTreeMap<String, String> {
    match sim
        .logs()
        .wait_for(namespace, pod, container, PATIENCE, |l| {
            l.starts_with("export PWD=") || l.starts_with("export FAKE_NODE_NAME=")
        })
        .await
    {
        Ok(lines) => exported(&lines),
        Err(lines) => panic!(
            "{namespace}/{pod}/{container} printed no environment; its lines: {lines:?}\n{}",
            describe(sim, namespace).await
        ),
    }
}

/// `FAKE_DEVICE_<i>` values in index order; asserts the indexes are 0..n without gaps.
pub fn devices(env: &BTreeMap<String, String>) -> Vec<String> {
    let mut indexed: Vec<(usize, String)> = env
        .iter()
        .filter_map(|(k, v)| {
            Some((
                k.strip_prefix("FAKE_DEVICE_")?.parse::<usize>().ok()?,
                v.clone(),
            ))
        })
        .collect();
    indexed.sort();
    for (expected, (i, _)) in indexed.iter().enumerate() {
        assert_eq!(*i, expected, "FAKE_DEVICE_ indexes have a gap: {env:?}");
    }
    indexed.into_iter().map(|(_, v)| v).collect()
}

pub fn distinct(ids: &[String]) -> bool {
    ids.iter().collect::<BTreeSet<_>>().len() == ids.len()
}

pub async fn pod(sim: &Sim, namespace: &str, name: &str) -> Option<DraPod> {
    Api::<DraPod>::namespaced(sim.client().unwrap(), namespace)
        .get_opt(name)
        .await
        .unwrap()
}

pub async fn claims(sim: &Sim) -> Vec<ResourceClaim> {
    Api::<ResourceClaim>::all(sim.client().unwrap())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

/// The handle of an allocated claim.
pub fn handle(claim: &ResourceClaim) -> Option<AllocationHandle> {
    let data = claim.handle_for_driver(fake_dra_api::DEFAULT_DRIVER_NAME)?;
    Some(AllocationHandle::parse(data).unwrap())
}

/// Which DRA generation a suite runs; what differs between the two suites' shared
/// scenarios is how a claim records its devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generation {
    /// The allocation handle our controller writes (node, parent ids).
    Classic,
    /// The scheduler's allocation results (pool = node, device name).
    Structured,
}

impl Generation {
    pub fn config(self) -> SimConfig {
        match self {
            Self::Classic => SimConfig::default(),
            Self::Structured => SimConfig {
                overlay: "structured".into(),
                ..SimConfig::default()
            },
        }
    }

    /// A manifest of deploy/examples (or deploy/examples/structured).
    pub fn example(self, name: &str) -> Vec<Manifest> {
        match self {
            Self::Classic => example(name),
            Self::Structured => example(&format!("structured/{name}")),
        }
    }

    /// The (node, device) pairs a claim (as JSON, either API version) holds of our driver.
    pub fn held(self, claim: &Value) -> Vec<(String, String)> {
        let allocation = &claim["status"]["allocation"];
        match self {
            Self::Classic => allocation["resourceHandles"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|h| h["driverName"] == DRIVER)
                .filter_map(|h| AllocationHandle::parse(h["data"].as_str()?).ok())
                .flat_map(|h| h.devices.into_iter().map(move |d| (h.node_name.clone(), d)))
                .collect(),
            Self::Structured => allocation["devices"]["results"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|r| r["driver"] == DRIVER)
                .map(|r| {
                    (
                        r["pool"].as_str().unwrap_or_default().to_string(),
                        r["device"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect(),
        }
    }

    /// Every ResourceClaim of the cluster (or of `namespace`) as JSON.
    pub async fn claims(self, sim: &Sim, namespace: Option<&str>) -> Vec<Value> {
        let (group, version) = match self {
            Self::Classic => ("resource.k8s.io", "v1alpha2"),
            Self::Structured => ("resource.k8s.io", "v1"),
        };
        let resource = ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: format!("{group}/{version}"),
            kind: "ResourceClaim".into(),
            plural: "resourceclaims".into(),
        };
        let client = sim.client().unwrap();
        let api: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(client, ns, &resource),
            None => Api::all_with(client, &resource),
        };
        api.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|o| serde_json::to_value(o).unwrap())
            .collect()
    }

    /// What the claim `namespace/name` holds.
    pub async fn held_by(self, sim: &Sim, namespace: &str, name: &str) -> Vec<(String, String)> {
        let claims = self.claims(sim, Some(namespace)).await;
        let claim = claims
            .iter()
            .find(|c| c["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no claim {namespace}/{name}"));
        self.held(claim)
    }

    /// The single source of truth holds: no device is allocated to two claims.
    pub async fn assert_no_device_twice(self, sim: &Sim) {
        let mut owner: BTreeMap<(String, String), String> = BTreeMap::new();
        for claim in self.claims(sim, None).await {
            let name = format!(
                "{}/{}",
                claim["metadata"]["namespace"].as_str().unwrap_or_default(),
                claim["metadata"]["name"].as_str().unwrap_or_default()
            );
            for device in self.held(&claim) {
                if let Some(previous) = owner.insert(device.clone(), name.clone()) {
                    panic!("device {device:?} is held by both {previous} and {name}");
                }
            }
        }
    }
}

/// Polls `check` until it yields a value (a safety-net timeout, not a speed assertion).
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "gave up waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Events of a namespace, as `reason: note` lines.
pub async fn events(sim: &Sim, namespace: &str) -> Vec<String> {
    Api::<Event>::namespaced(sim.client().unwrap(), namespace)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|e| {
            format!(
                "{} {}: {}",
                e.regarding.and_then(|r| r.name).unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default()
            )
        })
        .collect()
}

/// What a failing test prints: pods, claims and events of the namespace.
pub async fn describe(sim: &Sim, namespace: &str) -> String {
    let client = sim.client().unwrap();
    let pods = Api::<DraPod>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .map(|l| l.items);
    let claims = Api::<ResourceClaim>::namespaced(client, namespace)
        .list(&ListParams::default())
        .await
        .map(|l| l.items);
    format!(
        "pods: {}\nclaims: {}\nevents: {:#?}",
        pods.map(|p| serde_json::to_string_pretty(&p).unwrap_or_default())
            .unwrap_or_else(|e| format!("cannot list: {e}")),
        claims
            .map(|c| serde_json::to_string_pretty(&c).unwrap_or_default())
            .unwrap_or_else(|e| format!("cannot list: {e}")),
        events(sim, namespace).await
    )
}

pub async fn delete_pod(sim: &Sim, namespace: &str, name: &str) {
    Api::<DraPod>::namespaced(sim.client().unwrap(), namespace)
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
}

pub async fn wait_pod_gone(sim: &Sim, namespace: &str, name: &str) {
    eventually(&format!("pod {namespace}/{name} gone"), || async {
        pod(sim, namespace, name).await.is_none().then_some(())
    })
    .await;
}

pub async fn nas(sim: &Sim, node: &str) -> NodeAllocationState {
    Api::<NodeAllocationState>::namespaced(sim.client().unwrap(), "fake-dra")
        .get(node)
        .await
        .unwrap()
}

/// Our CDI spec files in a node's CDI dir (the common spec included).
pub fn cdi_specs(sim: &Sim, node: &str) -> Vec<String> {
    let dir = sim.node_dirs(node).cdi_root;
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("k8s.fake.resource.3-shake.com-fake_"))
        .collect();
    names.sort();
    names
}
pub mod scenarios;
