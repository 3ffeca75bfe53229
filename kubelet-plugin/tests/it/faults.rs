//! DeviceFaults on the real plugin binary, structured mode against the emulated API server
//! of Kubernetes 1.34: each effect as the kubelet, the scheduler and a user would see it —
//! the published slice's taints and binding conditions, prepare/unprepare errors and
//! delays, a GetInfo refusal, the health stream, a claim's status.devices, and the
//! fault's own status (what this node made of it, unknown devices, conflicts). Removing a
//! fault undoes it and loses nothing prepared.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use std::time::{Duration, Instant};

use common::*;
use dra_kubelet_proto::{dra_health_v1, dra_health_v1alpha1, dra_v1, pluginregistration as reg};
use fake_dra_api::fault::DeviceFault;
use k8s_openapi::api::resource::v1;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};

const NODE: &str = "node-1";

/// Guards against a hang only.
const LIMIT: Duration = Duration::from_secs(30);

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

async fn create_fault(api: &Api<DeviceFault>, name: &str, spec: Value) {
    let f: DeviceFault = serde_json::from_value(json!({
        "apiVersion": "fake.resource.3-shake.com/v1alpha1", "kind": "DeviceFault",
        "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap();
    api.create(&PostParams::default(), &f).await.unwrap();
}

async fn delete_fault(api: &Api<DeviceFault>, name: &str) {
    api.delete(name, &DeleteParams::default()).await.unwrap();
}

/// The node's slice devices as JSON, once the slice shows what `ready` wants.
async fn slice_devices(
    slices: &Api<v1::ResourceSlice>,
    ready: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    eventually("the slice", async || {
        let list = slices.list(&ListParams::default()).await.ok()?;
        let devices: Vec<Value> = list
            .items
            .iter()
            .flat_map(|s| s.spec.devices.iter().flatten())
            .map(|d| serde_json::to_value(d).unwrap())
            .collect();
        ready(&devices).then_some(devices)
    })
    .await
}

async fn prepare(dirs: &Dirs, uid: &str, name: &str) -> dra_v1::NodePrepareResourceResponse {
    prepare_v1(dirs, vec![v1_claim(uid, name)])
        .await
        .remove(uid)
        .unwrap()
}

async fn unprepare(dirs: &Dirs, uid: &str, name: &str) -> String {
    unprepare_v1(dirs, vec![v1_claim(uid, name)])
        .await
        .remove(uid)
        .unwrap()
        .error
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fault_as_the_cluster_sees_it_and_removing_it_undoes_it() {
    let api = start_api_version((1, 34)).await;
    let dirs = Dirs::new();
    let _plugin = Plugin::start(
        &dirs,
        Options {
            node: NODE,
            kubeconfig: api.kubeconfig(),
            env: vec![],
            extra_args: vec![
                "--mode".into(),
                "structured".into(),
                "--num-devices".into(),
                "4".into(),
            ],
        },
    )
    .await;
    let client = api.client().unwrap();
    let faults: Api<DeviceFault> = Api::all(client.clone());
    let slices: Api<v1::ResourceSlice> = Api::all(client.clone());
    slice_devices(&slices, |d| d.len() == 4).await;

    // Taint and binding conditions: in the slice.
    create_fault(
        &faults,
        "a-taint",
        json!({"devices": ["fake-1", "fake-9"], "taint": {"key": "fake.resource.3-shake.com/unhealthy", "value": "ecc", "effect": "NoExecute"}}),
    )
    .await;
    create_fault(
        &faults,
        "b-binding",
        json!({"devices": ["fake-2"], "binding": {"outcome": "Ready", "afterSeconds": 0, "bindsToNode": true}}),
    )
    .await;
    let devices = slice_devices(&slices, |d| {
        d.iter().any(|x| x.get("taints").is_some())
            && d.iter().any(|x| x.get("bindingConditions").is_some())
    })
    .await;
    let by_name = |n: &str| devices.iter().find(|d| d["name"] == n).unwrap().clone();
    assert_eq!(
        by_name("fake-1")["taints"],
        json!([{"key": "fake.resource.3-shake.com/unhealthy", "value": "ecc", "effect": "NoExecute"}])
    );
    assert!(by_name("fake-0").get("taints").is_none());
    assert_eq!(
        by_name("fake-2")["bindingConditions"],
        json!(["fake.resource.3-shake.com/attached"])
    );
    assert_eq!(
        by_name("fake-2")["bindingFailureConditions"],
        json!(["fake.resource.3-shake.com/attach-failed"])
    );
    assert_eq!(by_name("fake-2")["bindsToNode"], true);

    // The fault's status: this node's entry, with the unknown device named.
    let status = eventually("a-taint's status", async || {
        let f = faults.get("a-taint").await.ok()?;
        f.status.filter(|s| !s.nodes.is_empty())
    })
    .await;
    assert_eq!(status.nodes[0].node, NODE);
    assert_eq!(status.nodes[0].devices, ["fake-1"]);
    assert_eq!(status.nodes[0].effects, ["taint"]);
    assert!(
        status.nodes[0].problems[0].contains("\"fake-9\" is not a device of node node-1"),
        "{:?}",
        status.nodes[0].problems
    );

    // The health stream: healthy devices, then the fault's Unhealthy one.
    let mut health = dra_health_v1::dra_resource_health_client::DraResourceHealthClient::new(
        dra_kubelet_proto::connect_unix(dirs.dra_socket())
            .await
            .unwrap(),
    )
    .node_watch_resources(dra_health_v1::NodeWatchResourcesRequest {})
    .await
    .unwrap()
    .into_inner();
    let first = health.message().await.unwrap().unwrap();
    assert_eq!(first.devices.len(), 4);
    assert!(
        first
            .devices
            .iter()
            .all(|d| d.health == dra_health_v1::HealthStatus::Healthy as i32)
    );
    assert_eq!(first.devices[0].device.as_ref().unwrap().pool_name, NODE);
    create_fault(
        &faults,
        "c-health",
        json!({"devices": ["fake-3"], "health": {"status": "Unhealthy", "message": "fan failed"}}),
    )
    .await;
    let changed = loop {
        let m = health.message().await.unwrap().unwrap();
        if m.devices
            .iter()
            .any(|d| d.health == dra_health_v1::HealthStatus::Unhealthy as i32)
        {
            break m;
        }
    };
    let sick = changed
        .devices
        .iter()
        .find(|d| d.health == dra_health_v1::HealthStatus::Unhealthy as i32)
        .unwrap();
    assert_eq!(sick.device.as_ref().unwrap().device_name, "fake-3");
    assert_eq!(sick.message, "fan failed");
    // v1alpha1 says the same.
    let mut alpha = dra_health_v1alpha1::dra_resource_health_client::DraResourceHealthClient::new(
        dra_kubelet_proto::connect_unix(dirs.dra_socket())
            .await
            .unwrap(),
    )
    .node_watch_resources(dra_health_v1alpha1::NodeWatchResourcesRequest {})
    .await
    .unwrap()
    .into_inner();
    let a = alpha.message().await.unwrap().unwrap();
    assert_eq!(
        a.devices
            .iter()
            .filter(|d| d.health == dra_health_v1alpha1::HealthStatus::Unhealthy as i32)
            .count(),
        1
    );

    // Prepare fails for the fault's claim only; delay answers late but answers.
    let good = allocated_claim(&api, "v1", "good", NODE, &[0], Some(json!([]))).await;
    let bad = allocated_claim(&api, "v1", "bad", NODE, &[1], Some(json!([]))).await;
    create_fault(
        &faults,
        "d-prepare",
        json!({"claims": [{"namespace": CLAIM_NS, "name": "bad"}], "prepare": {"action": "Fail", "message": "injected: no luck"}}),
    )
    .await;
    let refused = eventually("the prepare fault", async || {
        let r = prepare(&dirs, &bad, "bad").await;
        (!r.error.is_empty()).then_some(r)
    })
    .await;
    assert!(
        refused.error.contains("injected: no luck"),
        "{}",
        refused.error
    );
    assert!(prepare(&dirs, &good, "good").await.error.is_empty());
    delete_fault(&faults, "d-prepare").await;
    let ok = eventually("the prepare fault to go", async || {
        let r = prepare(&dirs, &bad, "bad").await;
        r.error.is_empty().then_some(r)
    })
    .await;
    assert_eq!(ok.devices.len(), 1);

    // Unprepare: a delay, then it answers; the claim is gone from the checkpoint.
    create_fault(
        &faults,
        "e-unprepare",
        json!({"devices": ["fake-0"], "unprepare": {"action": "Delay", "delayMillis": 300}}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(unprepare(&dirs, &good, "good").await, "");
    assert!(
        !std::fs::read_to_string(dirs.checkpoint())
            .unwrap()
            .contains(&good)
    );

    // deviceStatus and binding outcome in the claim's status.devices.
    create_fault(
        &faults,
        "f-status",
        json!({"devices": ["fake-1"], "deviceStatus": {"conditions": [{"type": "Ready", "status": "True", "reason": "Configured"}], "data": {"link": "up"}}}),
    )
    .await;
    let claims: Api<v1::ResourceClaim> = Api::namespaced(client.clone(), CLAIM_NS);
    let entry = eventually("status.devices", async || {
        let c = claims.get("bad").await.ok()?;
        c.status?
            .devices?
            .into_iter()
            .find(|d| d.device == "fake-1")
    })
    .await;
    assert_eq!(entry.driver, DRIVER);
    assert_eq!(entry.pool, NODE);
    assert_eq!(entry.conditions.unwrap()[0].type_, "Ready");
    assert_eq!(entry.data.unwrap().0, json!({"link": "up"}));

    // GetInfo fails while a getInfo fault is there.
    create_fault(
        &faults,
        "g-getinfo",
        json!({"getInfo": {"message": "registration refused on purpose"}}),
    )
    .await;
    let status = eventually("GetInfo to fail", async || {
        let mut c = registration(&dirs).await.ok()?;
        c.get_info(reg::InfoRequest {}).await.err()
    })
    .await;
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert_eq!(status.message(), "registration refused on purpose");
    delete_fault(&faults, "g-getinfo").await;
    eventually("GetInfo to work again", async || {
        let mut c = registration(&dirs).await.ok()?;
        c.get_info(reg::InfoRequest {}).await.ok()
    })
    .await;

    // Removing the taint republishes without it; the prepared claim stays prepared.
    delete_fault(&faults, "a-taint").await;
    slice_devices(&slices, |d| d.iter().all(|x| x.get("taints").is_none())).await;
    assert!(
        std::fs::read_to_string(dirs.checkpoint())
            .unwrap()
            .contains(&bad)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_and_conflicting_faults_are_reported_in_their_status() {
    let (api, _dirs, _plugin) = structured_plugin_on((1, 34)).await;
    let faults: Api<DeviceFault> = Api::all(api.client().unwrap());
    create_fault(&faults, "a", json!({"health": {"status": "Unhealthy"}})).await;
    create_fault(&faults, "b", json!({"health": {"status": "Unknown"}})).await;
    // Valid for the schema, refused by the driver: a delay without its length.
    create_fault(&faults, "c", json!({"prepare": {"action": "Delay"}})).await;
    // A node that is not this one: no entry from this node.
    create_fault(
        &faults,
        "d",
        json!({"nodes": ["elsewhere"], "health": {"status": "Unhealthy"}}),
    )
    .await;
    let problems = |name: &'static str| {
        let faults = faults.clone();
        async move {
            eventually(name, async || {
                let s = faults.get(name).await.ok()?.status?;
                s.nodes.first().map(|n| n.problems.clone())
            })
            .await
        }
    };
    assert!(problems("a").await.is_empty());
    let b = problems("b").await;
    assert!(
        b[0].contains("health is also set by DeviceFault a"),
        "{b:?}"
    );
    let c = problems("c").await;
    assert_eq!(
        c,
        ["not applied: spec.prepare.delayMillis: is required with action Delay"]
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        faults
            .get("d")
            .await
            .unwrap()
            .status
            .is_none_or(|s| s.nodes.is_empty())
    );
}

/// The plugin in structured mode against the emulated API server of `version`.
async fn structured_plugin_on(
    version: (u32, u32),
) -> (fake_dra_emulator::apiserver::ApiServer, Dirs, Plugin) {
    let api = start_api_version(version).await;
    let dirs = Dirs::new();
    let plugin = Plugin::start(
        &dirs,
        Options {
            node: NODE,
            kubeconfig: api.kubeconfig(),
            env: vec![],
            extra_args: vec!["--mode".into(), "structured".into()],
        },
    )
    .await;
    (api, dirs, plugin)
}

/// A taint `via: Rule` on 1.37: a DeviceTaintRule per named device (driver, pool, device)
/// or per pool, owned by the fault and labelled with the node; nothing in the slice; a
/// changed fault changes the rules and a deleted one takes them along. On 1.36 (no
/// DeviceTaintRules served) the fault's status says why nothing was applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taint_via_rule_is_kept_in_device_taint_rules_on_1_37() {
    use fake_dra_api::upstream::device_taint_rule::DeviceTaintRule;
    let (api, _dirs, _plugin) = structured_plugin_on((1, 37)).await;
    let client = api.client().unwrap();
    let faults: Api<DeviceFault> = Api::all(client.clone());
    let rules: Api<DeviceTaintRule> = Api::all(client.clone());
    let slices: Api<v1::ResourceSlice> = Api::all(client);
    slice_devices(&slices, |d| !d.is_empty()).await;
    create_fault(
        &faults,
        "broken",
        json!({"devices": ["fake-1", "fake-2"], "taint": {"key": "example.com/broken", "value": "ecc", "effect": "NoExecute", "via": "Rule"}}),
    )
    .await;
    let listed = |count: usize| {
        let rules = rules.clone();
        async move {
            eventually(&format!("{count} DeviceTaintRules"), async || {
                let list = rules.list(&ListParams::default()).await.ok()?.items;
                (list.len() == count).then_some(list)
            })
            .await
        }
    };
    let two = listed(2).await;
    let mut devices: Vec<String> = Vec::new();
    for rule in &two {
        let selector = rule.spec.device_selector.clone().unwrap();
        assert_eq!(selector.driver.as_deref(), Some(DRIVER));
        assert_eq!(selector.pool.as_deref(), Some(NODE));
        devices.push(selector.device.unwrap());
        assert_eq!(rule.spec.taint.key, "example.com/broken");
        assert_eq!(rule.spec.taint.effect, "NoExecute");
        assert!(rule.spec.taint.time_added.is_some(), "{rule:?}");
        let labels = rule.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels
                .get("fake.resource.3-shake.com/fault-taint-writer")
                .map(String::as_str),
            Some(NODE)
        );
        let owner = rule.metadata.owner_references.clone().unwrap_or_default();
        assert_eq!(owner.first().map(|o| o.name.as_str()), Some("broken"));
    }
    devices.sort();
    assert_eq!(devices, ["fake-1", "fake-2"]);
    let published = slice_devices(&slices, |d| !d.is_empty()).await;
    assert!(
        published.iter().all(|d| d.get("taints").is_none()),
        "a taint via Rule is not published in the slice: {published:?}"
    );
    let status = eventually("the fault's status", async || {
        let s = faults.get("broken").await.ok()?.status?;
        s.nodes.first().cloned()
    })
    .await;
    assert!(status.problems.is_empty(), "{status:?}");
    assert_eq!(status.effects, ["taint"]);

    // Every device: one rule for the pool instead.
    let patch = json!({"spec": {"devices": null}});
    faults
        .patch(
            "broken",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .unwrap();
    let one = eventually("one rule for the pool", async || {
        let list = rules.list(&ListParams::default()).await.ok()?.items;
        (list.len() == 1 && list[0].spec.device_selector.as_ref()?.device.is_none()).then_some(list)
    })
    .await;
    assert_eq!(
        one[0]
            .spec
            .device_selector
            .as_ref()
            .unwrap()
            .pool
            .as_deref(),
        Some(NODE)
    );
    delete_fault(&faults, "broken").await;
    listed(0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taint_via_rule_on_1_36_is_reported_not_applied() {
    let (api, _dirs, _plugin) = structured_plugin_on((1, 36)).await;
    let client = api.client().unwrap();
    let faults: Api<DeviceFault> = Api::all(client.clone());
    let slices: Api<v1::ResourceSlice> = Api::all(client);
    slice_devices(&slices, |d| !d.is_empty()).await;
    create_fault(
        &faults,
        "broken",
        json!({"taint": {"key": "example.com/broken", "effect": "NoSchedule", "via": "Rule"}}),
    )
    .await;
    let problems = eventually("the fault's problem", async || {
        let s = faults.get("broken").await.ok()?.status?;
        let problems = s.nodes.first()?.problems.clone();
        (!problems.is_empty()).then_some(problems)
    })
    .await;
    assert_eq!(
        problems,
        [
            "taint example.com/broken not applied: this API server serves no DeviceTaintRules (resource.k8s.io/v1 devicetaintrules: Kubernetes 1.37 or later, where DRADeviceTaintRules is on by default)"
        ]
    );
    let published = slice_devices(&slices, |d| !d.is_empty()).await;
    assert!(
        published.iter().all(|d| d.get("taints").is_none()),
        "{published:?}"
    );
}
