//! The emulated cluster as a whole (apiserver, scheduler, kubelets with the process
//! runtime, no driver) on what a user's plain pods ask: the scheduler's node filters
//! (kube-scheduler's NodeUnschedulable, NodeAffinity, TaintToleration and NodeResourcesFit
//! plugins, and `schedulerName`), and the pods' logs at the edges of time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use fake_dra_emulator::apiserver::{ApiServer, ApiServerOptions};
use fake_dra_emulator::cluster::{ClusterConfig, ContainerRuntime, EmulatedCluster};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

const NODES: [&str; 2] = ["node-a", "node-b"];

struct Harness {
    cluster: EmulatedCluster,
    client: kube::Client,
    _work_dir: tempfile::TempDir,
}

/// Two nodes, `node-a` and `node-b`, of Kubernetes `version` (1.30: the classic
/// scheduler; 1.34: the structured one).
async fn cluster(version: (u32, u32)) -> Harness {
    let work_dir = tempfile::tempdir().unwrap();
    let server = ApiServer::start_with(ApiServerOptions {
        server_version: version,
        ..ApiServerOptions::default()
    })
    .await
    .expect("start the emulated apiserver");
    let client = server.client().unwrap();
    let cluster = EmulatedCluster::start(
        server,
        ClusterConfig {
            nodes: NODES.iter().map(|n| n.to_string()).collect(),
            node_labels: Vec::new(),
            work_dir: work_dir.path().to_path_buf(),
            runtime: ContainerRuntime::Process,
            wiping_delay: Duration::from_secs(30),
            host_run: Vec::new(),
        },
    )
    .await
    .expect("start the emulated cluster");
    Harness {
        cluster,
        client,
        _work_dir: work_dir,
    }
}

/// Waits (a hang guard, not a pace) until `check` gives something.
async fn eventually<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    for _ in 0..600 {
        if let Some(v) = check().await {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("gave up waiting for: {what}");
}

fn pod(name: &str, command: &str, spec: Value) -> Pod {
    let mut pod = json!({
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", command]}]},
    });
    if let (Some(base), Some(extra)) = (pod["spec"].as_object_mut(), spec.as_object()) {
        for (k, v) in extra {
            base.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(pod).unwrap()
}

async fn raw_get(client: &kube::Client, uri: &str) -> (u16, String) {
    use http_body_util::BodyExt;
    let request = http::Request::get(uri)
        .body(kube::client::Body::from(Vec::new()))
        .unwrap();
    let response = client.send(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

/// D16, D28: `sinceSeconds=1000000000000` answered 500 (the kubelet's task panicked)
/// and `sinceTime=9999-12-31T23:59:59Z` 400; upstream gives all the log and none of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_logs_since_the_edges_of_time() {
    let h = cluster((1, 34)).await;
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &pod("talker", "echo hello; sleep 300", json!({})),
    )
    .await
    .unwrap();
    let base = format!(
        "{}/api/v1/namespaces/default/pods/talker/log",
        h.cluster.server().url()
    );
    eventually("the pod's first line", async || {
        let (code, body) = raw_get(&h.client, &base).await;
        (code == 200 && body == "hello\n").then_some(())
    })
    .await;
    for (query, want) in [
        ("sinceSeconds=1000000000000", "hello\n"),
        ("sinceSeconds=9223372036854775807", "hello\n"),
        ("sinceTime=9999-12-31T23:59:59Z", ""),
    ] {
        let (code, body) = raw_get(&h.client, &format!("{base}?{query}")).await;
        assert_eq!((code, body.as_str()), (200, want), "{query}");
    }
    // The kubelet still answers.
    let (code, body) = raw_get(&h.client, &base).await;
    assert_eq!((code, body.as_str()), (200, "hello\n"));
}
