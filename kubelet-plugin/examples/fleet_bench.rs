//! Fleet mode and kube-scheduler at scale on a real control plane (hack/fleet-bench.sh
//! brings one up and runs this; docs/performance.md has the numbers). Measures, each
//! against a floor taken in the same run:
//!
//! 1. publishing: fleet mode creating N nodes × D devices (`--create-nodes`), time until
//!    every node's slice is in the API server, against the time the same process took to
//!    create the N bare Nodes (its "fleet nodes created" log line); API requests per node;
//!    the fleet process's peak memory (VmHWM);
//! 2. scheduling: scheduler_perf's `SchedulingWithResourceClaimTemplate/5000pods_500nodes`
//!    shape — 500 nodes, 2500 pods with a one-device claim template first (not measured),
//!    then 2500 measured — in pods bound per second, against the same number of pods
//!    without claims on the same nodes (each fleet's own floor). Shapes (`--sched-shapes`):
//!    `fake`, 10 fake devices per node, a claim for any one; on one nvidia fleet
//!    (`--nvidia-gpus`, 10 A100-80GB with every MIG placement by default, so that 5000
//!    whole GPUs exist), `gpu`, a claim for one whole GPU, and `mig`, a claim for one MIG
//!    device of `--mig-profile`, allocated from the GPUs' shared counters. Each shape starts
//!    with every device free (the previous shape's namespace is deleted first).
//!
//! ```text
//! fleet_bench --kubeconfig K --plugin target/release/fake-dra-kubelet-plugin \
//!   [--publish 1000,5000] [--devices 8] [--sched-nodes 500] [--sched-init 2500] [--sched-pods 2500] \
//!   [--sched-shapes fake,gpu,mig] [--nvidia-gpus A100-80GB:10:mig] [--mig-profile 1g.10gb]
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
use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
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
    sched_shapes: Vec<String>,
    nvidia_gpus: String,
    mig_profile: String,
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
        sched_shapes: vec!["fake".into(), "gpu".into(), "mig".into()],
        nvidia_gpus: "A100-80GB:10:mig".into(),
        mig_profile: "1g.10gb".into(),
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
            "--sched-shapes" => {
                a.sched_shapes = value
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect();
                for s in &a.sched_shapes {
                    assert!(
                        ["fake", "gpu", "mig"].contains(&s.as_str()),
                        "--sched-shapes: fake, gpu or mig, not {s}"
                    );
                }
            }
            "--nvidia-gpus" => a.nvidia_gpus = value,
            "--mig-profile" => a.mig_profile = value,
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

async fn wait_for(what: &str, limit: Duration, check: impl AsyncFnMut() -> bool) {
    wait_every(what, limit, Duration::from_millis(200), check).await;
}

async fn wait_every(
    what: &str,
    limit: Duration,
    every: Duration,
    mut check: impl AsyncFnMut() -> bool,
) {
    let deadline = Instant::now() + limit;
    while !check().await {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        tokio::time::sleep(every).await;
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

fn pod(namespace: &str, name: &str, template: Option<&str>) -> Pod {
    let mut spec = json!({
        "terminationGracePeriodSeconds": 0,
        "tolerations": [{"key": "fake.resource.3-shake.com/fleet", "operator": "Exists"}],
        "nodeSelector": {"fake.resource.3-shake.com/fleet": "true"},
        "containers": [{"name": "c", "image": "fake.local/pause:1"}],
    });
    if let Some(template) = template {
        spec["containers"][0]["resources"] = json!({"claims": [{"name": "dev"}]});
        spec["resourceClaims"] = json!([{"name": "dev", "resourceClaimTemplateName": template}]);
    }
    serde_json::from_value(
        json!({"metadata": {"name": name, "namespace": namespace}, "spec": spec}),
    )
    .unwrap()
}

async fn create_pods(
    client: &kube::Client,
    namespace: &str,
    names: &[String],
    template: Option<&str>,
) {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    futures::stream::iter(names.iter().map(|n| {
        let api = api.clone();
        let p = pod(namespace, n, template);
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
/// Waits until the namespace is gone, so that its claims are deallocated and the next
/// shape finds every device free.
async fn drop_namespace(client: &kube::Client, name: &str) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), name);
    let _ = pods
        .delete_collection(
            &DeleteParams::default().grace_period(0),
            &ListParams::default(),
        )
        .await;
    let namespaces = Api::<Namespace>::all(client.clone());
    let _ = namespaces.delete(name, &DeleteParams::default()).await;
    wait_for(
        &format!("namespace {name} (its pods and claims) gone"),
        Duration::from_secs(900),
        async || matches!(namespaces.get_opt(name).await, Ok(None)),
    )
    .await;
}

/// Schedules `count` pods in `ns` and returns pods bound per second.
async fn measure(
    client: &kube::Client,
    ns: &str,
    prefix: &str,
    count: usize,
    template: Option<&str>,
) -> f64 {
    let names: Vec<String> = (0..count).map(|i| format!("{prefix}-{i}")).collect();
    let before = bound(client, ns).await;
    let started = Instant::now();
    create_pods(client, ns, &names, template).await;
    // Listing thousands of pods costs the API server (and this process) CPU the scheduler
    // competes for on a small machine: once a second is enough against runs of minutes.
    wait_every(
        &format!("{count} pods of {ns} bound"),
        Duration::from_secs(3600),
        Duration::from_secs(1),
        async || bound(client, ns).await >= before + count,
    )
    .await;
    count as f64 / started.elapsed().as_secs_f64()
}

/// One kind of claim the scheduling part measures: every pod gets one device of `class`
/// (narrowed by `cel`), and every allocated device's name must satisfy `expect`.
struct ClaimShape {
    name: &'static str,
    what: String,
    class: &'static str,
    cel: Option<String>,
    expect: Box<dyn Fn(&str) -> bool>,
}

/// Pods bound per second: the first `--sched-init` (not measured in scheduler_perf) and
/// the measured `--sched-pods`.
struct ClaimRun {
    init: f64,
    measured: f64,
}

/// Plain pods on the fleet's nodes: the floor every claim shape of that fleet is
/// compared with.
async fn plain(a: &Args, client: &kube::Client, ns: &str) -> f64 {
    namespace(client, ns).await;
    let rate = measure(client, ns, "plain", a.sched_pods, None).await;
    drop_namespace(client, ns).await;
    rate
}

async fn with_claims(a: &Args, client: &kube::Client, shape: &ClaimShape) -> ClaimRun {
    let ns = format!("bench-{}", shape.name);
    namespace(client, &ns).await;
    let mut exactly = json!({"deviceClassName": shape.class});
    if let Some(cel) = &shape.cel {
        exactly["selectors"] = json!([{"cel": {"expression": cel}}]);
    }
    let template = json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-device", "namespace": ns},
        "spec": {"spec": {"devices": {"requests": [{"name": "dev", "exactly": exactly}]}}}});
    Api::<ResourceClaimTemplate>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(template).unwrap(),
        )
        .await
        .unwrap();
    let init = measure(client, &ns, "init", a.sched_init, Some("one-device")).await;
    let measured = measure(client, &ns, "measured", a.sched_pods, Some("one-device")).await;
    // Every claim allocated, no device twice, each of the asked-for kind.
    let claims = Api::<ResourceClaim>::namespaced(client.clone(), &ns)
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
                (shape.expect)(&r.device),
                "{}: {}/{} allocated, not {}",
                shape.name,
                r.pool,
                r.device,
                shape.what
            );
            assert!(
                devices.insert((r.pool.clone(), r.device.clone())),
                "{}: {}/{} allocated twice",
                shape.name,
                r.pool,
                r.device
            );
        }
    }
    assert_eq!(
        devices.len(),
        a.sched_init + a.sched_pods,
        "{}: one device per pod",
        shape.name
    );
    drop_namespace(client, &ns).await;
    ClaimRun { init, measured }
}

/// Starts a fleet of `--sched-nodes` nodes with `extra` (its devices) and waits until
/// it has published every node's slices.
async fn sched_fleet(a: &Args, client: &kube::Client, extra: &[&str]) -> Fleet {
    let nodes = a.sched_nodes.to_string();
    let mut args = vec![
        "--create-nodes",
        &nodes,
        "--node-taints",
        "fake.resource.3-shake.com/fleet=true:NoSchedule",
    ];
    args.extend_from_slice(extra);
    let fleet = Fleet::start(a, &args);
    wait_for("the nodes' slices", Duration::from_secs(1800), async || {
        fleet.logged("fleet published", "seconds").is_some()
            && count_pools(client).await >= a.sched_nodes
    })
    .await;
    fleet
}

/// Stops the fleet and waits until its nodes and their slices are gone, so that the next
/// fleet's slices are the only ones counted.
async fn stop_sched_fleet(fleet: Fleet, client: &kube::Client) {
    fleet.stop();
    wait_for(
        "the fleet's nodes and slices gone",
        Duration::from_secs(1800),
        async || fleet_nodes(client).await == 0 && count_pools(client).await == 0,
    )
    .await;
}

/// Devices and slices of the fleet's pools, and whether any slice kept its shared
/// counters (an API server without `DRAPartitionableDevices` drops them silently).
async fn slice_stats(client: &kube::Client) -> (usize, usize, bool) {
    let api: Api<ResourceSlice> = Api::all(client.clone());
    let (mut devices, mut slices, mut counters) = (0, 0, false);
    let mut lp = ListParams::default().limit(500);
    loop {
        let page = api.list(&lp).await.unwrap();
        for s in page.items.iter().filter(|s| s.spec.driver == DRIVER) {
            slices += 1;
            devices += s.spec.devices.as_ref().map_or(0, Vec::len);
            counters |= s
                .spec
                .shared_counters
                .as_ref()
                .is_some_and(|c| !c.is_empty());
        }
        match page.metadata.continue_ {
            Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
            _ => return (devices, slices, counters),
        }
    }
}

fn row(label: &str, shape: &str, what: &str, run: &ClaimRun, floor: f64, a: &Args) {
    println!(
        "| schedule, {label} | {shape}, {} pods first, {} measured | {:.1} pods/s with {what} each | floor: {floor:.1} pods/s without claims | ratio {:.2} | (the first {}: {:.1} pods/s) |",
        a.sched_init,
        a.sched_pods,
        run.measured,
        run.measured / floor,
        a.sched_init,
        run.init
    );
}

async fn create_class(client: &kube::Client, name: &str, cel: &str) {
    let class = json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": cel}}]}});
    let _ = Api::<DeviceClass>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(class).unwrap(),
        )
        .await;
}

/// The fake profile's shape of scheduler_perf: 10 devices per node, a claim for any one.
async fn scheduling_fake(a: &Args, client: &kube::Client) {
    let fleet = sched_fleet(a, client, &["--num-devices", "10"]).await;
    create_class(
        client,
        "fake.3-shake.com",
        &format!("device.driver == \"{DRIVER}\""),
    )
    .await;
    let floor = plain(a, client, "bench-plain-fake").await;
    let shape = ClaimShape {
        name: "fake",
        what: "a fake device".into(),
        class: "fake.3-shake.com",
        cel: None,
        expect: Box::new(|_| true),
    };
    let run = with_claims(a, client, &shape).await;
    row(
        "fake profile",
        &format!("{} nodes × 10 devices", a.sched_nodes),
        "a one-device claim",
        &run,
        floor,
        a,
    );
    stop_sched_fleet(fleet, client).await;
}

/// The nvidia profile: whole GPUs and MIG devices of the same partitionable GPUs, each
/// shape on fresh (all free) devices, against plain pods on the same nodes.
async fn scheduling_nvidia(a: &Args, client: &kube::Client) {
    let fleet = sched_fleet(
        a,
        client,
        &["--profile", "nvidia", "--nvidia-gpus", &a.nvidia_gpus],
    )
    .await;
    let (devices, slices, counters) = slice_stats(client).await;
    assert!(
        counters,
        "no fleet slice has sharedCounters: is DRAPartitionableDevices off on the API server?"
    );
    // As deploy/examples/nvidia/deviceclasses.yaml.
    let attr = format!("device.attributes['{DRIVER}']");
    create_class(
        client,
        "gpu.fake.resource.3-shake.com",
        &format!("device.driver == '{DRIVER}' && {attr}.type == 'gpu'"),
    )
    .await;
    create_class(
        client,
        "mig.fake.resource.3-shake.com",
        &format!("device.driver == '{DRIVER}' && {attr}.type == 'mig'"),
    )
    .await;
    let nodes_shape = format!(
        "{} nodes × `{}` ({} devices, {} slices per node)",
        a.sched_nodes,
        a.nvidia_gpus,
        devices / a.sched_nodes,
        slices / a.sched_nodes
    );
    let floor = plain(a, client, "bench-plain-nvidia").await;
    if a.sched_shapes.iter().any(|s| s == "gpu") {
        let shape = ClaimShape {
            name: "gpu",
            what: "a whole GPU".into(),
            class: "gpu.fake.resource.3-shake.com",
            cel: None,
            expect: Box::new(|d| d.starts_with("gpu-") && !d.contains("-mig-")),
        };
        let run = with_claims(a, client, &shape).await;
        row(
            "nvidia, whole GPU",
            &nodes_shape,
            "a claim for one whole GPU (`type == 'gpu'`)",
            &run,
            floor,
            a,
        );
    }
    if a.sched_shapes.iter().any(|s| s == "mig") {
        let profile = a.mig_profile.clone();
        let infix = format!("-mig-{}-", profile.replace('.', "").replace('+', "-"));
        let shape = ClaimShape {
            name: "mig",
            what: format!("a {profile} MIG device"),
            class: "mig.fake.resource.3-shake.com",
            cel: Some(format!("{attr}.profile == '{profile}'")),
            expect: Box::new(move |d| d.contains(&infix)),
        };
        let run = with_claims(a, client, &shape).await;
        row(
            "nvidia, MIG",
            &nodes_shape,
            &format!(
                "a claim for one `{profile}` MIG device (`type == 'mig'`, `profile == '{profile}'`)"
            ),
            &run,
            floor,
            a,
        );
    }
    println!(
        "| schedule, nvidia, plain | {nodes_shape} | {floor:.1} pods/s without claims (the floor of the rows above) | | | | |"
    );
    stop_sched_fleet(fleet, client).await;
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
        if a.sched_shapes.iter().any(|s| s == "fake") {
            scheduling_fake(&a, &client).await;
        }
        if a.sched_shapes.iter().any(|s| s == "gpu" || s == "mig") {
            scheduling_nvidia(&a, &client).await;
        }
    }
}
