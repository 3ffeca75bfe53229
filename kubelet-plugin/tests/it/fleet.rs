//! Fleet mode on the real binary against the emulated API server (Kubernetes 1.34): the
//! nodes it creates, the same slices the node plugin publishes (one pool per node, owner
//! references), kwok-style nodes found by label, a slice deleted by hand coming back, a
//! node leaving, a fault's taint on some nodes (and its status forgetting a node that
//! left), heterogeneous nodes from an inventory file, SIGTERM removing the created nodes
//! (also while they are being created), a smaller fleet deleting what a larger one left,
//! and nodes deleted at once not published again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use fake_dra_api::fault::DeviceFault;
use fake_dra_emulator::apiserver::ApiServer;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use serde_json::json;

/// Guards against a hang only.
const LIMIT: Duration = Duration::from_secs(60);

struct Fleet(Child);

impl Fleet {
    fn start(api: &ApiServer, args: &[&str]) -> Self {
        Self::spawn(
            api,
            args,
            &std::env::var("PLUGIN_LOG").unwrap_or_else(|_| "warn".into()),
            Stdio::inherit(),
        )
    }

    /// With its info log on a pipe, read by [`Fleet::sigterm_log`].
    fn start_logged(api: &ApiServer, args: &[&str]) -> Self {
        Self::spawn(api, args, "info", Stdio::piped())
    }

    fn spawn(api: &ApiServer, args: &[&str], log: &str, stderr: Stdio) -> Self {
        let child = Command::new(env!("CARGO_BIN_EXE_fake-dra-kubelet-plugin"))
            .arg("fleet")
            .arg("--kubeconfig")
            .arg(api.kubeconfig())
            .args(args)
            .env("RUST_LOG", log)
            .env("FAKE_DRA_LOG_FORMAT", "text")
            .stdin(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap();
        Self(child)
    }

    fn sigterm(mut self) -> std::process::ExitStatus {
        self.term();
        self.0.wait().unwrap()
    }

    /// SIGTERM, then the exit status and the log of a [`Fleet::start_logged`] fleet.
    fn sigterm_log(mut self) -> (std::process::ExitStatus, String) {
        self.term();
        let mut log = String::new();
        std::io::Read::read_to_string(&mut self.0.stderr.take().unwrap(), &mut log).unwrap();
        (self.0.wait().unwrap(), log)
    }

    fn term(&mut self) {
        let pid = self.0.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
    }
}

async fn node_names(nodes: &Api<Node>) -> Option<Vec<String>> {
    let mut names: Vec<String> = nodes
        .list(&ListParams::default())
        .await
        .ok()?
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    names.sort();
    Some(names)
}

impl Drop for Fleet {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn eventually<T>(what: &str, mut probe: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + LIMIT;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Slices by node, once `ready` holds.
async fn pools(
    slices: &Api<v1::ResourceSlice>,
    ready: impl Fn(&BTreeMap<String, Vec<v1::ResourceSlice>>) -> bool,
) -> BTreeMap<String, Vec<v1::ResourceSlice>> {
    eventually("the fleet's slices", async || {
        let mut by_node: BTreeMap<String, Vec<v1::ResourceSlice>> = BTreeMap::new();
        for s in slices.list(&ListParams::default()).await.ok()?.items {
            by_node
                .entry(s.spec.node_name.clone().unwrap_or_default())
                .or_default()
                .push(s);
        }
        ready(&by_node).then_some(by_node)
    })
    .await
}

fn device_names(pool: &[v1::ResourceSlice]) -> Vec<String> {
    let mut names: Vec<String> = pool
        .iter()
        .flat_map(|s| s.spec.devices.iter().flatten().map(|d| d.name.clone()))
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_of_created_nodes_publishes_what_node_plugins_would() {
    let api = start_api_version((1, 34)).await;
    let client = api.client().unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let slices: Api<v1::ResourceSlice> = Api::all(client.clone());
    let fleet = Fleet::start(
        &api,
        &[
            "--create-nodes",
            "12",
            "--node-name-prefix",
            "sim-",
            "--num-devices",
            "8",
            "--heartbeat-interval",
            "1",
        ],
    );
    let by_node = pools(&slices, |p| p.len() == 12).await;
    let all_nodes = nodes.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(all_nodes.len(), 12);
    for node in &all_nodes {
        let name = node.metadata.name.clone().unwrap();
        assert!(name.starts_with("sim-"), "{name}");
        let labels = node.metadata.labels.clone().unwrap();
        assert_eq!(labels["fake.resource.3-shake.com/fleet"], "true");
        let taints = node.spec.as_ref().unwrap().taints.clone().unwrap();
        assert_eq!(taints[0].key, "fake.resource.3-shake.com/fleet");
        let status = node.status.as_ref().unwrap();
        assert_eq!(status.conditions.as_ref().unwrap()[0].status, "True");
        assert_eq!(status.allocatable.as_ref().unwrap()["pods"].0, "110");
        let pool = &by_node[&name];
        assert_eq!(pool.len(), 1);
        let s = &pool[0];
        assert_eq!(s.spec.pool.name, name);
        assert_eq!(s.spec.driver, DRIVER);
        assert_eq!(
            s.metadata.owner_references.as_ref().unwrap()[0].uid,
            node.metadata.uid.clone().unwrap()
        );
        assert_eq!(
            device_names(pool),
            (0..8).map(|i| format!("fake-{i}")).collect::<Vec<_>>()
        );
        // The same devices, attribute for attribute, as the node plugin on that node.
        let expected = dra_kubelet_plugin::DeviceProfile::slice_devices(
            &fake_dra_kubelet_plugin::fake::FakeProfile::new(
                fake_dra_kubelet_plugin::fake::devices::Inventory::new(
                    &name,
                    8,
                    &["ULTRA_10".into(), "ULTRA_100".into()],
                )
                .unwrap(),
                DRIVER,
            ),
        );
        assert_eq!(
            dra_kubelet_plugin::slices::from_v1(s).content.devices,
            expected
        );
    }
    // Heartbeats.
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let first = leases
        .get("sim-0")
        .await
        .unwrap()
        .spec
        .unwrap()
        .renew_time
        .unwrap();
    eventually("a renewed lease", async || {
        let now = leases.get("sim-0").await.ok()?.spec?.renew_time?;
        (now.0 > first.0).then_some(())
    })
    .await;

    // A slice deleted by hand comes back; a node that leaves takes its slices along.
    let victim = by_node["sim-3"][0].metadata.name.clone().unwrap();
    slices
        .delete(&victim, &DeleteParams::default())
        .await
        .unwrap();
    pools(&slices, |p| {
        p.get("sim-3")
            .is_some_and(|s| s.len() == 1 && s[0].metadata.name.as_deref() != Some(&victim))
    })
    .await;
    nodes
        .delete("sim-5", &DeleteParams::default())
        .await
        .unwrap();
    pools(&slices, |p| !p.contains_key("sim-5") && p.len() == 11).await;

    // A fault tainting the devices of two nodes: only their slices change.
    let faults: Api<DeviceFault> = Api::all(client.clone());
    let fault: DeviceFault = serde_json::from_value(json!({
        "apiVersion": "fake.resource.3-shake.com/v1alpha1", "kind": "DeviceFault",
        "metadata": {"name": "rack-7"},
        "spec": {"nodes": ["sim-1", "sim-2", "gone"], "devices": ["fake-0"],
                 "taint": {"key": "rack", "value": "7", "effect": "NoSchedule"}},
    }))
    .unwrap();
    faults.create(&PostParams::default(), &fault).await.unwrap();
    let tainted = |p: &BTreeMap<String, Vec<v1::ResourceSlice>>, n: &str| {
        p[n][0]
            .spec
            .devices
            .iter()
            .flatten()
            .any(|d| d.taints.is_some())
    };
    let by_node = pools(&slices, |p| {
        p.len() == 11 && tainted(p, "sim-1") && tainted(p, "sim-2")
    })
    .await;
    assert!(!tainted(&by_node, "sim-4"));
    let status = eventually("the fleet's entry in the fault's status", async || {
        faults
            .get("rack-7")
            .await
            .ok()?
            .status
            .filter(|s| !s.nodes.is_empty())
    })
    .await;
    assert_eq!(status.nodes[0].node, "fleet");
    assert_eq!(status.nodes[0].devices, ["sim-1/fake-0", "sim-2/fake-0"]);
    assert!(
        status.nodes[0]
            .problems
            .iter()
            .any(|p| p.contains("\"gone\" is not a node of this fleet")),
        "{:?}",
        status.nodes[0].problems
    );
    // A node that leaves the fleet leaves the fault's status too.
    nodes
        .delete("sim-2", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the fault's status without the deleted node", async || {
        let status = faults.get("rack-7").await.ok()?.status?;
        (status.nodes.first()?.devices == ["sim-1/fake-0"]).then_some(())
    })
    .await;

    // SIGTERM: the created nodes go, and with them (owner references) their slices.
    assert!(fleet.sigterm().success());
    eventually("the created nodes to go", async || {
        nodes
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .is_empty()
            .then_some(())
    })
    .await;
    pools(&slices, |p| p.is_empty()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kwok_nodes_found_by_label_with_heterogeneous_devices() {
    let api = start_api_version((1, 34)).await;
    let client = api.client().unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    for (name, kwok) in [
        ("kwok-gpu-0", true),
        ("kwok-gpu-1", true),
        ("kwok-cpu-0", true),
        ("real-node", false),
    ] {
        let mut labels = json!({"kubernetes.io/hostname": name});
        if kwok {
            labels["type"] = json!("kwok");
        }
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels, "annotations": {"kwok.x-k8s.io/node": "fake"}},
        }))
        .unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
    }
    let inventory = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        inventory.path(),
        "apiVersion: fake.resource.3-shake.com/v1alpha1\nkind: Inventory\nnodes:\n- names: [\"kwok-gpu-*\"]\n  profile: gpu\n  gpus: [{model: A100-80GB, count: 2, sharing: partitioned}]\n- names: [\"*\"]\n  numDevices: 4\n",
    )
    .unwrap();
    let _fleet = Fleet::start(
        &api,
        &[
            "--node-selector",
            "type=kwok",
            "--inventory",
            inventory.path().to_str().unwrap(),
        ],
    );
    let slices: Api<v1::ResourceSlice> = Api::all(client.clone());
    let by_node = pools(&slices, |p| p.len() == 3).await;
    assert!(
        !by_node.contains_key("real-node"),
        "only the selected nodes"
    );
    assert_eq!(
        device_names(&by_node["kwok-cpu-0"]),
        ["fake-0", "fake-1", "fake-2", "fake-3"]
    );
    let gpu = &by_node["kwok-gpu-0"];
    let names = device_names(gpu);
    assert!(
        names.contains(&"gpu-0".to_string()) && names.contains(&"gpu-1-1g-10gb-0".to_string()),
        "{names:?}"
    );
    // 1.34: the counter sets in the slice of the devices that consume them.
    let sets: usize = gpu
        .iter()
        .map(|s| s.spec.shared_counters.iter().flatten().count())
        .sum();
    assert_eq!(sets, 2);
    // Nothing was created: the nodes are kwok's.
    assert_eq!(
        nodes
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        4
    );
}

/// SIGTERM while `--create-nodes` is still creating: the creation stops, the fleet says it
/// is shutting down, and the nodes created so far are deleted (they were left behind, by
/// the thousand, when the signal killed the process).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_while_nodes_are_created_deletes_those_created() {
    let api = start_api_version((1, 34)).await;
    let client = api.client().unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let fleet = Fleet::start_logged(
        &api,
        &[
            "--create-nodes",
            "10000",
            "--concurrency",
            "1",
            "--node-name-prefix",
            "busy-",
        ],
    );
    eventually("the first nodes", async || {
        (node_names(&nodes).await?.len() >= 5).then_some(())
    })
    .await;
    let (status, log) = fleet.sigterm_log();
    assert!(status.success(), "{status}: {log}");
    assert!(
        log.contains("fleet mode shutting down before publishing"),
        "{log}"
    );
    assert!(
        !log.contains("fleet nodes created"),
        "the creation was stopped: {log}"
    );
    assert!(log.contains("fleet nodes deleted"), "{log}");
    eventually("the created nodes to go", async || {
        node_names(&nodes).await?.is_empty().then_some(())
    })
    .await;
}

/// A fleet started with fewer `--create-nodes` than the last one deletes the nodes past
/// its count that a fleet created (with their Leases and slices); a node of the same
/// pattern that no fleet created stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_smaller_fleet_deletes_the_nodes_a_larger_one_left() {
    let api = start_api_version((1, 34)).await;
    let client = api.client().unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let slices: Api<v1::ResourceSlice> = Api::all(client.clone());
    let args = |n: &'static str| {
        [
            "--create-nodes",
            n,
            "--node-name-prefix",
            "sim-",
            "--num-devices",
            "2",
            "--keep-nodes",
        ]
    };
    let first = Fleet::start(&api, &args("6"));
    pools(&slices, |p| p.len() == 6).await;
    assert!(first.sigterm().success());
    assert_eq!(node_names(&nodes).await.unwrap().len(), 6, "--keep-nodes");
    let hand_made: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "sim-9", "labels": {"fake.resource.3-shake.com/fleet": "true"}},
    }))
    .unwrap();
    nodes
        .create(&PostParams::default(), &hand_made)
        .await
        .unwrap();

    let _second = Fleet::start(&api, &args("3")[..6]);
    eventually("the nodes past the count to go", async || {
        (node_names(&nodes).await? == ["sim-0", "sim-1", "sim-2", "sim-9"]).then_some(())
    })
    .await;
    eventually("their Leases to go", async || {
        let mut names: Vec<String> = leases
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .filter_map(|l| l.metadata.name)
            .collect();
        names.sort();
        (names == ["sim-0", "sim-1", "sim-2"]).then_some(())
    })
    .await;
    // The hand-made node carries the label, so it is published for; not the deleted ones.
    let by_node = pools(&slices, |p| p.len() == 4).await;
    assert_eq!(
        by_node.keys().collect::<Vec<_>>(),
        ["sim-0", "sim-1", "sim-2", "sim-9"]
    );
}

/// Nodes deleted at once (kwok's deletecollection): the garbage collector removes their
/// slices, often before the fleet's node watch has seen the nodes go, and the fleet must
/// not publish them again (at 1,000 kwok nodes it did, up to 21 times a pool).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_deleted_at_once_are_not_published_again() {
    const N: usize = 60;
    let api = start_api_version((1, 34)).await;
    let client = api.client().unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let node = |name: &str| -> Node {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"type": "kwok", "kubernetes.io/hostname": name}},
        }))
        .unwrap()
    };
    let names: Vec<String> = (0..N).map(|i| format!("gone-{i:02}")).collect();
    for name in &names {
        nodes
            .create(&PostParams::default(), &node(name))
            .await
            .unwrap();
    }
    let fleet = Fleet::start_logged(&api, &["--node-selector", "type=kwok"]);
    let slices: Api<v1::ResourceSlice> = Api::all(client.clone());
    pools(&slices, |p| p.len() == N).await;
    nodes
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("type=kwok"),
        )
        .await
        .unwrap();
    pools(&slices, |p| p.is_empty()).await;
    // The node watch takes events in order: once a node added after the deletion has its
    // pool, the fleet has seen every deleted node go.
    nodes
        .create(&PostParams::default(), &node("late"))
        .await
        .unwrap();
    let by_node = pools(&slices, |p| p.contains_key("late")).await;
    assert_eq!(
        by_node.keys().collect::<Vec<_>>(),
        ["late"],
        "only the late node's pool is left"
    );
    let (status, log) = fleet.sigterm_log();
    assert!(status.success(), "{status}\n{log}");
    let published = |node: &str| {
        log.lines()
            .filter(|l| {
                l.contains("ResourceSlices published") && l.contains(&format!("pool={node} "))
            })
            .count()
    };
    let again: Vec<(String, usize)> = names
        .iter()
        .map(|n| (n.clone(), published(n)))
        .filter(|(_, count)| *count != 1)
        .collect();
    assert!(
        again.is_empty(),
        "pools published other than once (node, times): {again:?}\n{log}"
    );
}

/// D18: `--node-selector 'gen>5'` (Gt, which kube-apiserver serves) was refused by the
/// emulated API server, and the fleet retried for ever under a hint about RBAC; it selects
/// the nodes whose label is a greater integer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_greater_than_node_selector_selects_by_number() {
    let api = start_api_version((1, 34)).await;
    let client = api.client().unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    for (name, generation) in [
        ("old-0", "3"),
        ("new-0", "7"),
        ("new-1", "12"),
        ("odd-0", "x"),
    ] {
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"gen": generation}},
        }))
        .unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
    }
    let _fleet = Fleet::start(&api, &["--node-selector", "gen>5"]);
    let slices: Api<v1::ResourceSlice> = Api::all(client.clone());
    let by_node = pools(&slices, |p| p.len() == 2).await;
    assert_eq!(
        by_node.keys().collect::<Vec<_>>(),
        ["new-0", "new-1"],
        "only the nodes with gen > 5"
    );
}

/// D35: a fleet whose first list of ResourceSlices was refused stopped with the error, but
/// with its DeviceFault watch and node watch still running (`--log-format json`: the error
/// was followed by "watching DeviceFaults failed (is the devicefaults CRD installed?)")
/// and the nodes it had created left behind. The error is its last word, and the created
/// nodes go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_error_after_creating_nodes_takes_them_back_and_is_the_last_word() {
    use fake_dra_emulator::apiserver::{Fault, FaultVerb};
    let api = start_api_version((1, 34)).await;
    api.inject_fault(Fault {
        verb: FaultVerb::List,
        plural: "resourceslices".into(),
        subresource: None,
        code: 403,
        times: 1,
    });
    let child = Command::new(env!("CARGO_BIN_EXE_fake-dra-kubelet-plugin"))
        .args(["fleet", "--create-nodes", "2", "--log-format", "json"])
        .arg("--kubeconfig")
        .arg(api.kubeconfig())
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.contains("\"level\":\"ERROR\"") && last.contains("forbidden"),
        "{stderr}"
    );
    assert!(!stderr.contains("watching DeviceFaults failed"), "{stderr}");
    let nodes: Api<Node> = Api::all(api.client().unwrap());
    assert_eq!(node_names(&nodes).await, Some(Vec::new()), "{stderr}");
}
