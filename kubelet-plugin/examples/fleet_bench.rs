//! Fleet mode and kube-scheduler at scale on a real control plane (hack/fleet-bench.sh
//! brings one up and runs this; docs/performance.md has the numbers). Measures, each
//! against a floor taken in the same run:
//!
//! 1. publishing: fleet mode creating N nodes × D devices (`--create-nodes`), time until
//!    every node's slice is in the API server, against the time the same process took to
//!    create the N bare Nodes (its "fleet nodes created" log line); API requests per node;
//!    the fleet process's peak memory (VmHWM);
//! 2. scheduling: scheduler_perf's `SchedulingWithResourceClaimTemplate/5000pods_500nodes`
//!    shape — 500 nodes of 10 devices, 2500 pods with a one-device claim template first
//!    (not measured), then 2500 measured — in pods bound per second, against the same
//!    number of pods without claims on the same nodes.
//!
//! ```text
//! fleet_bench --kubeconfig K --plugin target/release/fake-dra-kubelet-plugin \
//!   [--publish 1000,5000] [--devices 8] [--sched-nodes 500] [--sched-init 2500] [--sched-pods 2500]
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

const DRIVER: &str = "fake.resource.3-shake.com";
const FLEET_SELECTOR: &str = "fake.resource.3-shake.com/fleet=true";

struct Args {
    kubeconfig: PathBuf,
    plugin: PathBuf,
    publish: Vec<usize>,
    devices: usize,
    sched_nodes: usize,
    sched_init: usize,
    sched_pods: usize,
}

fn args() -> Args {
    let mut a = Args {
        kubeconfig: PathBuf::new(),
        plugin: PathBuf::new(),
        publish: vec![1000, 5000],
        devices: 8,
        sched_nodes: 500,
        sched_init: 2500,
        sched_pods: 2500,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--kubeconfig" => a.kubeconfig = value.into(),
            "--plugin" => a.plugin = value.into(),
            "--publish" => {
                a.publish = value
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(|s| s.parse().unwrap())
                    .collect()
            }
            "--devices" => a.devices = value.parse().unwrap(),
            "--sched-nodes" => a.sched_nodes = value.parse().unwrap(),
            "--sched-init" => a.sched_init = value.parse().unwrap(),
            "--sched-pods" => a.sched_pods = value.parse().unwrap(),
            other => panic!("unknown flag {other}"),
        }
    }
    assert!(
        a.plugin.is_file(),
        "--plugin {}: not a file",
        a.plugin.display()
    );
    a
}

/// A running `fleet` process with what it logged.
struct Fleet {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    metrics_port: u16,
}

/// A benchmark that panics must not leave its fleet publishing into the next cluster.
impl Drop for Fleet {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Fleet {
    fn start(a: &Args, extra: &[&str]) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = Command::new(&a.plugin)
            .arg("fleet")
            .arg("--kubeconfig")
            .arg(&a.kubeconfig)
            .args([
                "--http-address",
                &format!("127.0.0.1:{port}"),
                "--concurrency",
                "32",
            ])
            .args(extra)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Self {
            child,
            lines,
            metrics_port: port,
        }
    }

    /// The number after `key=` in the first log line containing `needle`.
    fn logged(&self, needle: &str, key: &str) -> Option<f64> {
        let lines = self.lines.lock().unwrap();
        let line = lines.iter().find(|l| l.contains(needle))?;
        let rest = line.split(&format!("{key}=")).nth(1)?;
        rest.split_whitespace()
            .next()?
            .trim_matches('"')
            .parse()
            .ok()
    }

    fn peak_memory_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    }

    fn requests(&self) -> u64 {
        let out = Command::new("curl")
            .args([
                "-s",
                &format!("http://127.0.0.1:{}/metrics", self.metrics_port),
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with("fake_dra_fleet_api_requests_total"))
            .filter_map(|l| l.split_whitespace().last()?.parse::<u64>().ok())
            .sum()
    }

    fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

async fn count_pools(client: &kube::Client) -> usize {
    let api: Api<ResourceSlice> = Api::all(client.clone());
    let mut nodes = BTreeSet::new();
    let mut lp = ListParams::default().limit(2000);
    loop {
        let page = api.list(&lp).await.unwrap();
        for s in &page.items {
            if s.spec.driver == DRIVER
                && let Some(n) = &s.spec.node_name
                && n.starts_with("fake-dra-fleet-")
            {
                nodes.insert(n.clone());
            }
        }
        match page.metadata.continue_ {
            Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
            _ => return nodes.len(),
        }
    }
}

async fn fleet_nodes(client: &kube::Client) -> usize {
    Api::<Node>::all(client.clone())
        .list_metadata(&ListParams::default().labels(FLEET_SELECTOR))
        .await
        .unwrap()
        .items
        .len()
}

async fn wait_for(what: &str, limit: Duration, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check().await {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn publish(a: &Args, client: &kube::Client, n: usize) {
    let started = Instant::now();
    let fleet = Fleet::start(
        a,
        &[
            "--create-nodes",
            &n.to_string(),
            "--num-devices",
            &a.devices.to_string(),
            "--heartbeat-interval",
            "0",
        ],
    );
    wait_for(
        "every fleet node's slice",
        Duration::from_secs(1800),
        async || count_pools(client).await >= n,
    )
    .await;
    let all_slices = started.elapsed().as_secs_f64();
    // Let the fleet notice the sync is complete, then read its own account.
    wait_for(
        "the fleet's sync log line",
        Duration::from_secs(120),
        async || fleet.logged("fleet published", "seconds").is_some(),
    )
    .await;
    let nodes_created = fleet
        .logged("fleet nodes created", "seconds")
        .unwrap_or(f64::NAN);
    let requests = fleet.requests();
    let memory = fleet.peak_memory_kib();
    fleet.stop();
    wait_for(
        "the fleet's nodes gone",
        Duration::from_secs(1800),
        async || fleet_nodes(client).await == 0,
    )
    .await;
    println!(
        "| publish | {n} nodes × {} devices | all slices present after {all_slices:.1} s | floor: {n} bare Nodes created in {nodes_created:.1} s | ratio {:.2} | {:.2} API requests per node | peak RSS {:.1} MiB |",
        a.devices,
        all_slices / nodes_created,
        requests as f64 / n as f64,
        memory as f64 / 1024.0
    );
}

fn pod(namespace: &str, name: &str, with_claim: bool) -> Pod {
    let mut spec = json!({
        "terminationGracePeriodSeconds": 0,
        "tolerations": [{"key": "fake.resource.3-shake.com/fleet", "operator": "Exists"}],
        "nodeSelector": {"fake.resource.3-shake.com/fleet": "true"},
        "containers": [{"name": "c", "image": "fake.local/pause:1"}],
    });
    if with_claim {
        spec["containers"][0]["resources"] = json!({"claims": [{"name": "dev"}]});
        spec["resourceClaims"] =
            json!([{"name": "dev", "resourceClaimTemplateName": "one-device"}]);
    }
    serde_json::from_value(
        json!({"metadata": {"name": name, "namespace": namespace}, "spec": spec}),
    )
    .unwrap()
}

async fn create_pods(client: &kube::Client, namespace: &str, names: &[String], with_claim: bool) {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    futures::stream::iter(names.iter().map(|n| {
        let api = api.clone();
        let p = pod(namespace, n, with_claim);
        async move { api.create(&PostParams::default(), &p).await.unwrap() }
    }))
    .buffer_unordered(32)
    .collect::<Vec<_>>()
    .await;
}

async fn bound(client: &kube::Client, namespace: &str) -> usize {
    Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
        .count()
}

async fn namespace(client: &kube::Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

/// Pods bound to nodes without a kubelet never finish a graceful deletion: force them.
async fn drop_namespace(client: &kube::Client, name: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), name);
    let _ = pods
        .delete_collection(
            &DeleteParams::default().grace_period(0),
            &ListParams::default(),
        )
        .await;
    let _ = Api::<Namespace>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await;
}

/// Schedules `count` pods in `ns` and returns pods bound per second.
async fn measure(
    client: &kube::Client,
    ns: &str,
    prefix: &str,
    count: usize,
    with_claim: bool,
) -> f64 {
    let names: Vec<String> = (0..count).map(|i| format!("{prefix}-{i}")).collect();
    let before = bound(client, ns).await;
    let started = Instant::now();
    create_pods(client, ns, &names, with_claim).await;
    wait_for(
        &format!("{count} pods of {ns} bound"),
        Duration::from_secs(3600),
        async || bound(client, ns).await >= before + count,
    )
    .await;
    count as f64 / started.elapsed().as_secs_f64()
}

async fn scheduling(a: &Args, client: &kube::Client) {
    let fleet = Fleet::start(
        a,
        &[
            "--create-nodes",
            &a.sched_nodes.to_string(),
            "--num-devices",
            "10",
            "--node-taints",
            "fake.resource.3-shake.com/fleet=true:NoSchedule",
        ],
    );
    wait_for("the nodes' slices", Duration::from_secs(1800), async || {
        count_pools(client).await >= a.sched_nodes
    })
    .await;
    let class = json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "fake.3-shake.com"},
        "spec": {"selectors": [{"cel": {"expression": format!("device.driver == \"{DRIVER}\"")}}]}});
    let _ = Api::<k8s_openapi::api::resource::v1::DeviceClass>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(class).unwrap(),
        )
        .await;

    namespace(client, "bench-plain").await;
    let plain = measure(client, "bench-plain", "plain", a.sched_pods, false).await;
    drop_namespace(client, "bench-plain").await;

    namespace(client, "bench-dra").await;
    let template = json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-device", "namespace": "bench-dra"},
        "spec": {"spec": {"devices": {"requests": [{"name": "dev", "exactly": {"deviceClassName": "fake.3-shake.com"}}]}}}});
    Api::<k8s_openapi::api::resource::v1::ResourceClaimTemplate>::namespaced(
        client.clone(),
        "bench-dra",
    )
    .create(
        &PostParams::default(),
        &serde_json::from_value(template).unwrap(),
    )
    .await
    .unwrap();
    let init = measure(client, "bench-dra", "init", a.sched_init, true).await;
    let dra = measure(client, "bench-dra", "measured", a.sched_pods, true).await;
    // Every claim allocated, no device twice.
    let claims = Api::<ResourceClaim>::namespaced(client.clone(), "bench-dra")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let mut devices = BTreeSet::new();
    for c in &claims {
        for r in c
            .status
            .as_ref()
            .and_then(|s| s.allocation.as_ref())
            .and_then(|a| a.devices.as_ref())
            .and_then(|d| d.results.as_ref())
            .into_iter()
            .flatten()
        {
            assert!(
                devices.insert((r.pool.clone(), r.device.clone())),
                "{}/{} allocated twice",
                r.pool,
                r.device
            );
        }
    }
    assert_eq!(
        devices.len(),
        a.sched_init + a.sched_pods,
        "one device per pod"
    );
    println!(
        "| schedule | {} nodes × 10 devices, {} pods first, {} measured | {dra:.1} pods/s with a one-device claim each | floor: {plain:.1} pods/s without claims | ratio {:.2} | (the first {} with claims: {init:.1} pods/s) |",
        a.sched_nodes,
        a.sched_init,
        a.sched_pods,
        dra / plain,
        a.sched_init
    );
    drop_namespace(client, "bench-dra").await;
    fleet.stop();
    wait_for(
        "the fleet's nodes gone",
        Duration::from_secs(1800),
        async || fleet_nodes(client).await == 0,
    )
    .await;
}

#[tokio::main]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let a = args();
    let kubeconfig = kube::config::Kubeconfig::read_from(&a.kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    println!("| what | shape | measured | floor (same run) | ratio | per node | memory |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for &n in &a.publish {
        publish(&a, &client, n).await;
    }
    if a.sched_pods > 0 {
        scheduling(&a, &client).await;
    }
}
