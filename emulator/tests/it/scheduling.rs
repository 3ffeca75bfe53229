//! The emulated cluster as a whole (apiserver, scheduler, kubelets with the process
//! runtime, no driver) on what a user's plain pods ask: the scheduler's node filters
//! (kube-scheduler's NodeUnschedulable, NodeAffinity, TaintToleration and NodeResourcesFit
//! plugins, and `schedulerName`), and the pods' logs at the edges of time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use fake_dra_emulator::apiserver::{ApiServer, ApiServerOptions};
use fake_dra_emulator::cluster::{ClusterConfig, ContainerRuntime, EmulatedCluster};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
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

/// A pod that printed `hello` and sleeps; the URL of its log.
async fn talker(h: &Harness) -> String {
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
    base
}

/// D16, D28: `sinceSeconds=1000000000000` answered 500 (the kubelet's task panicked)
/// and `sinceTime=9999-12-31T23:59:59Z` 400; upstream gives all the log and none of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_logs_since_the_edges_of_time() {
    let h = cluster((1, 34)).await;
    let base = talker(&h).await;
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

/// The fuzzer's `pod_log_queries` found `sinceTime=2026-12-06 12:00:00` a 500: the value
/// went on to the kubelet as it came, a space in the URI. Now the options are decoded as
/// kube-apiserver decodes them (`metav1.Time` is RFC 3339 or refused with a 400; a flag is
/// false only when `0` or `false`) and the kubelet's query is built from them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_log_options_are_decoded_as_kube_apiserver_decodes_them() {
    let h = cluster((1, 34)).await;
    let base = talker(&h).await;
    for (query, code, part) in [
        (
            "sinceTime=2026-12-06%2012%3A00%3A00",
            400,
            "parsing time \\\"2026-12-06 12:00:00\\\" as",
        ),
        ("sinceTime=2026-02-30T00%3A00%3A00Z", 400, "parsing time"),
        ("sinceTime=2026-01-01t00%3A00%3A00Z", 400, "parsing time"),
        ("sinceTime=", 200, "hello\n"),
        ("sinceTime=null", 200, "hello\n"),
        (
            "sinceTime=2026-01-01T00%3A00%3A00.5%2B14%3A00",
            200,
            "hello\n",
        ),
        ("timestamps=False", 200, "hello\n"),
        ("timestamps=0", 200, "hello\n"),
        ("timestamps=yes", 200, "Z hello\n"),
        ("timestamps=", 200, "Z hello\n"),
    ] {
        let (got, body) = raw_get(&h.client, &format!("{base}?{query}")).await;
        assert_eq!(got, code, "{query}: {body}");
        assert!(body.contains(part), "{query}: {body}");
        if part == "hello\n" {
            assert_eq!(body, part, "{query}");
        }
    }
}

/// The node a pod was bound to, once it is.
async fn bound_node(pods: &Api<Pod>, name: &str) -> String {
    eventually(&format!("pod {name} bound"), async || {
        pods.get(name).await.ok()?.spec?.node_name
    })
    .await
}

/// The pod's FailedScheduling message, once there is one; the PodScheduled condition says
/// the same.
async fn failed_scheduling(client: &kube::Client, name: &str) -> String {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let message = eventually(&format!("FailedScheduling of {name}"), async || {
        events
            .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
            .await
            .ok()?
            .items
            .into_iter()
            .rev()
            .find(|e| e.reason.as_deref() == Some("FailedScheduling"))?
            .message
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let condition = eventually(&format!("PodScheduled of {name}"), async || {
        pods.get(name)
            .await
            .ok()?
            .status?
            .conditions?
            .into_iter()
            .find(|c| c.type_ == "PodScheduled")
    })
    .await;
    assert_eq!(condition.status, "False");
    assert_eq!(condition.reason.as_deref(), Some("Unschedulable"));
    assert_eq!(condition.message.as_deref(), Some(message.as_str()));
    message
}

async fn patch_node(client: &kube::Client, name: &str, patch: Value) {
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// D21, D22: the emulated scheduler bound every pod to the least loaded node, whatever
/// its `nodeSelector`, the node's taints (plain pods went to tainted fleet nodes, where no
/// kubelet runs them) or `schedulerName`. Now it filters as kube-scheduler's
/// NodeUnschedulable, TaintToleration, NodeAffinity and NodeResourcesFit plugins do, and
/// a pod no node fits gets FailedScheduling and PodScheduled=False in their words; a pod
/// for another scheduler is left alone. Classic (1.30) and structured (1.34, 1.37) alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheduler_filters_nodes_as_kube_scheduler() {
    for version in [(1, 30), (1, 34), (1, 37)] {
        filters_nodes(version).await;
    }
}

async fn filters_nodes(version: (u32, u32)) {
    let h = cluster(version).await;
    let c = &h.client;
    let pods: Api<Pod> = Api::namespaced(c.clone(), "default");
    let create = async |name: &str, spec: Value| {
        pods.create(&PostParams::default(), &pod(name, "sleep 300", spec))
            .await
            .unwrap();
    };
    let dra_none = if version < (1, 37) {
        "no new claims to deallocate, "
    } else {
        ""
    };

    // nodeSelector and required node affinity.
    patch_node(
        c,
        "node-b",
        json!({"metadata": {"labels": {"gpu": "yes", "gen": "7"}}}),
    )
    .await;
    for i in 0..3 {
        create(&format!("sel{i}"), json!({"nodeSelector": {"gpu": "yes"}})).await;
    }
    for i in 0..3 {
        assert_eq!(
            bound_node(&pods, &format!("sel{i}")).await,
            "node-b",
            "{version:?}"
        );
    }
    let affinity = json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["5"]}]}]}}}});
    create("aff", affinity).await;
    assert_eq!(bound_node(&pods, "aff").await, "node-b");
    // The kubelet's own labels select too, as on any cluster.
    create(
        "linux",
        json!({"nodeSelector": {"kubernetes.io/os": "linux"}}),
    )
    .await;
    bound_node(&pods, "linux").await;
    create("nowhere", json!({"nodeSelector": {"gpu": "no"}})).await;
    assert_eq!(
        failed_scheduling(c, "nowhere").await,
        format!(
            "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector. {dra_none}preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
        )
    );

    // Taints: NoSchedule on node-a sends plain pods to node-b; on both, they wait.
    patch_node(
        c,
        "node-a",
        json!({"spec": {"taints": [{"key": "fleet", "value": "true", "effect": "NoSchedule"}]}}),
    )
    .await;
    create("plain", json!({})).await;
    assert_eq!(bound_node(&pods, "plain").await, "node-b");
    patch_node(
        c,
        "node-b",
        json!({"spec": {"taints": [{"key": "gone", "effect": "NoExecute"}]}}),
    )
    .await;
    create("untolerated", json!({})).await;
    let taints = if version >= (1, 34) {
        "2 node(s) had untolerated taint(s)".to_owned()
    } else {
        "1 node(s) had untolerated taint {fleet: true}, 1 node(s) had untolerated taint {gone: }"
            .to_owned()
    };
    assert_eq!(
        failed_scheduling(c, "untolerated").await,
        format!(
            "0/2 nodes are available: {taints}. {dra_none}preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
        )
    );
    create(
        "tolerant",
        json!({"tolerations": [{"key": "fleet", "operator": "Exists"}], "nodeSelector": {"kubernetes.io/hostname": "node-a"}}),
    )
    .await;
    assert_eq!(bound_node(&pods, "tolerant").await, "node-a");
    patch_node(c, "node-a", json!({"spec": {"taints": null}})).await;
    patch_node(c, "node-b", json!({"spec": {"taints": null}})).await;

    // spec.unschedulable (kubectl cordon).
    patch_node(c, "node-b", json!({"spec": {"unschedulable": true}})).await;
    create("cordoned", json!({"nodeSelector": {"gpu": "yes"}})).await;
    assert_eq!(
        failed_scheduling(c, "cordoned").await,
        format!(
            "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) were unschedulable. {dra_none}preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
        )
    );
    patch_node(c, "node-b", json!({"spec": {"unschedulable": null}})).await;
    assert_eq!(bound_node(&pods, "cordoned").await, "node-b");

    // Resources, where the nodes declare them: the emulated kubelets report the machine's
    // (once, at start); set smaller ones after that, so the test does not depend on it.
    let nodes: Api<Node> = Api::all(c.clone());
    for node in NODES {
        let offers = eventually(&format!("{node} reports what it offers"), async || {
            nodes.get(node).await.ok()?.status?.allocatable
        })
        .await;
        assert_eq!(offers.get("pods").map(|q| q.0.as_str()), Some("110"));
        assert!(
            offers.contains_key("cpu") && offers.contains_key("memory"),
            "{offers:?}"
        );
    }
    for node in NODES {
        nodes
            .patch_status(
                node,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"allocatable": {"cpu": "2", "memory": "1Gi", "pods": "110"}}})),
            )
            .await
            .unwrap();
    }
    let cpu = |n: &str| json!({"containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", "sleep 300"], "resources": {"requests": {"cpu": n}}}]});
    create("big", cpu("1500m")).await;
    let big_node = bound_node(&pods, "big").await;
    // More than a node has in all: from 1.34 preemption is not tried (as kube-scheduler
    // 1.37.2 said in the real-cluster scenario node-filters); a shortage preemption could
    // resolve finds no victims.
    create("too-big", cpu("3")).await;
    let over_all = if version >= (1, 34) {
        "2 Preemption is not helpful for scheduling."
    } else {
        "2 No preemption victims found for incoming pod."
    };
    assert_eq!(
        failed_scheduling(c, "too-big").await,
        format!(
            "0/2 nodes are available: 2 Insufficient cpu. {dra_none}preemption: 0/2 nodes are available: {over_all}"
        )
    );
    create("second-big", cpu("1500m")).await;
    assert_ne!(
        bound_node(&pods, "second-big").await,
        big_node,
        "the other node had room"
    );
    create("crowded", cpu("1")).await;
    assert_eq!(
        failed_scheduling(c, "crowded").await,
        format!(
            "0/2 nodes are available: 2 Insufficient cpu. {dra_none}preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
        )
    );

    // Another scheduler's pod: never bound, no Event, no condition.
    create("theirs", json!({"schedulerName": "my-scheduler"})).await;
    create("after", json!({})).await;
    bound_node(&pods, "after").await;
    let theirs = pods.get("theirs").await.unwrap();
    assert_eq!(theirs.spec.and_then(|s| s.node_name), None);
    assert!(
        theirs
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .is_empty()
    );
    let events: Api<Event> = Api::namespaced(c.clone(), "default");
    let about_theirs = events
        .list(&ListParams::default().fields("involvedObject.name=theirs"))
        .await
        .unwrap();
    assert!(about_theirs.items.is_empty(), "{:?}", about_theirs.items);

    // The same through a Deployment's pods.
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                "nodeSelector": {"kubernetes.io/hostname": "node-a"},
                "containers": [{"name": "c", "image": "busybox", "command": ["sh", "-c", "sleep 300"]}]}}}
    }))
    .unwrap();
    Api::<Deployment>::namespaced(c.clone(), "default")
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    let placed = eventually("the Deployment's pods bound", async || {
        let listed = pods
            .list(&ListParams::default().labels("app=web"))
            .await
            .ok()?;
        let nodes: Vec<String> = listed
            .items
            .into_iter()
            .filter_map(|p| p.spec?.node_name)
            .collect();
        (nodes.len() == 2).then_some(nodes)
    })
    .await;
    assert_eq!(placed, ["node-a", "node-a"], "{version:?}");
    h.cluster.shutdown().await;
}
