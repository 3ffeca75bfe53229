//! The emulator's structured DRA (Kubernetes 1.32+), without any driver: versions and
//! conversion over HTTP, discovery, admission, and the scheduler's allocator and the
//! resourceclaim controller driven by hand-made ResourceSlices.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::time::Duration;

use fake_dra_emulator::apiserver::gates::FeatureGates;
use fake_dra_emulator::apiserver::{ApiServer, ApiServerOptions, StartError};
use fake_dra_emulator::cluster::{claims, scheduler};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, ObjectMeta, PostParams,
};
use serde_json::{Value, json};

const DRIVER: &str = "fake.resource.3-shake.com";
const CLASS: &str = "fake.3-shake.com";

async fn server(version: (u32, u32)) -> (ApiServer, kube::Client) {
    server_with(version, FeatureGates::default()).await
}

/// `FeatureGates::all_on()` turns every DRA feature gate on (the scheduler's features on a
/// release's API, whatever its defaults).
async fn server_with(
    version: (u32, u32),
    feature_gates: FeatureGates,
) -> (ApiServer, kube::Client) {
    let server = ApiServer::start_with(ApiServerOptions {
        server_version: version,
        feature_gates,
        ..ApiServerOptions::default()
    })
    .await
    .expect("start the emulated apiserver");
    let client = server.client().expect("client");
    (server, client)
}

fn api(
    client: &kube::Client,
    version: &str,
    kind: &str,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    let lower = kind.to_ascii_lowercase();
    let plural = if lower.ends_with('s') {
        format!("{lower}es")
    } else {
        format!("{lower}s")
    };
    let resource = ApiResource {
        group: "resource.k8s.io".into(),
        version: version.into(),
        api_version: format!("resource.k8s.io/{version}"),
        kind: kind.into(),
        plural,
    };
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

fn object(value: Value) -> DynamicObject {
    serde_json::from_value(value).unwrap()
}

fn data(o: &DynamicObject) -> Value {
    serde_json::to_value(o).unwrap()
}

async fn get_json(client: &kube::Client, path: &str) -> Result<Value, kube::Error> {
    let request = http::Request::get(path).body(Vec::new()).unwrap();
    client.request::<Value>(request).await
}

async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..400 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("gave up waiting for: {what}");
}

// ---------------------------------------------------------------------------------------
// Versions, discovery, conversion

#[tokio::test]
async fn discovery_lists_exactly_the_served_versions() {
    for (version, expected) in [
        ((1, 30), vec!["v1alpha2"]),
        ((1, 32), vec!["v1beta1"]),
        ((1, 33), vec!["v1beta1"]),
        ((1, 34), vec!["v1", "v1beta1"]),
    ] {
        let (_server, client) = server(version).await;
        let group = get_json(&client, "/apis/resource.k8s.io").await.unwrap();
        let served: Vec<&str> = group["versions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["version"].as_str().unwrap())
            .collect();
        assert_eq!(served, expected, "{version:?}");
        assert_eq!(group["preferredVersion"]["version"], expected[0]);
        let all = get_json(&client, "/apis").await.unwrap();
        let listed = all["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["name"] == "resource.k8s.io")
            .unwrap();
        assert_eq!(listed["versions"], group["versions"]);
        for v in ["v1alpha2", "v1beta1", "v1", "v1beta2"] {
            let list = get_json(&client, &format!("/apis/resource.k8s.io/{v}")).await;
            assert_eq!(list.is_ok(), expected.contains(&v), "{version:?} {v}");
            if let Ok(list) = list {
                let names: BTreeSet<&str> = list["resources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| r["name"].as_str().unwrap())
                    .collect();
                let want: BTreeSet<&str> = if v == "v1alpha2" {
                    [
                        "resourceclasses",
                        "resourceclaims",
                        "resourceclaims/status",
                        "resourceclaimtemplates",
                        "podschedulingcontexts",
                        "podschedulingcontexts/status",
                    ]
                    .into()
                } else {
                    [
                        "deviceclasses",
                        "resourceclaims",
                        "resourceclaims/status",
                        "resourceclaimtemplates",
                        "resourceslices",
                    ]
                    .into()
                };
                assert_eq!(names, want, "{version:?} {v}");
            }
        }
    }
}

#[tokio::test]
async fn kubernetes_1_31_is_refused() {
    let err = ApiServer::start_with(ApiServerOptions {
        server_version: (1, 31),
        ..ApiServerOptions::default()
    })
    .await
    .unwrap_err();
    assert!(matches!(err, StartError::UnsupportedVersion(_)), "{err}");
}

fn beta_slice(name: &str, node: &str) -> DynamicObject {
    object(json!({
        "apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {"driver": DRIVER, "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "fake-0", "basic": {"attributes": {"model": {"string": "M1"}, "index": {"int": 0}}, "capacity": {"memory": {"value": "1Gi"}}}}]}
    }))
}

#[tokio::test]
async fn slices_convert_between_v1beta1_and_v1() {
    let (_server, client) = server((1, 34)).await;
    let beta = api(&client, "v1beta1", "ResourceSlice", None);
    let v1 = api(&client, "v1", "ResourceSlice", None);
    beta.create(&PostParams::default(), &beta_slice("n1-slice", "n1"))
        .await
        .unwrap();
    let stored = data(&v1.get("n1-slice").await.unwrap());
    assert_eq!(stored["apiVersion"], "resource.k8s.io/v1");
    assert_eq!(
        stored["spec"]["devices"],
        json!([{"name": "fake-0", "attributes": {"model": {"string": "M1"}, "index": {"int": 0}}, "capacity": {"memory": {"value": "1Gi"}}}])
    );
    // Written through v1, read through v1beta1: nested again.
    let mut flat = object(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": "n2-slice"},
        "spec": {"driver": DRIVER, "nodeName": "n2", "pool": {"name": "n2", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "fake-0", "attributes": {"model": {"string": "M2"}}}]}
    }));
    flat = v1.create(&PostParams::default(), &flat).await.unwrap();
    let as_beta = data(&beta.get("n2-slice").await.unwrap());
    assert_eq!(as_beta["apiVersion"], "resource.k8s.io/v1beta1");
    assert_eq!(
        as_beta["spec"]["devices"],
        json!([{"name": "fake-0", "basic": {"attributes": {"model": {"string": "M2"}}}}])
    );
    // A v1beta1 update (the plugin's publish path on 1.32/1.33) keeps the stored form right.
    let mut update = as_beta.clone();
    update["spec"]["devices"][0]["basic"]["attributes"]["model"] = json!({"string": "M3"});
    update["spec"]["pool"]["generation"] = json!(2);
    beta.replace("n2-slice", &PostParams::default(), &object(update))
        .await
        .unwrap();
    let stored = data(&v1.get("n2-slice").await.unwrap());
    assert_eq!(
        stored["spec"]["devices"][0]["attributes"]["model"]["string"],
        "M3"
    );
    assert!(stored["spec"]["devices"][0].get("basic").is_none());
    assert_ne!(
        stored["metadata"]["resourceVersion"],
        data(&flat)["metadata"]["resourceVersion"]
    );
    // Lists and watches render in the version asked for.
    let listed = beta.list(&ListParams::default()).await.unwrap();
    assert!(
        listed
            .items
            .iter()
            .all(|s| data(s)["spec"]["devices"][0].get("basic").is_some())
    );
}

#[tokio::test]
async fn claims_and_templates_convert_between_v1beta1_and_v1() {
    let (_server, client) = server((1, 34)).await;
    let claim = object(json!({
        "apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceClaim",
        "metadata": {"name": "c"},
        "spec": {"devices": {
            "requests": [
                {"name": "gpu", "deviceClassName": CLASS, "selectors": [{"cel": {"expression": "device.driver == \"x\""}}]},
                {"name": "all", "deviceClassName": CLASS, "allocationMode": "All"}
            ],
            "config": [{"requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": {"apiVersion": "fake.resource.3-shake.com/v1alpha1", "kind": "FakeClaimParameters", "spec": {"split": 2}}}}]
        }}
    }));
    api(&client, "v1beta1", "ResourceClaim", Some("default"))
        .create(&PostParams::default(), &claim)
        .await
        .unwrap();
    let v1 = data(
        &api(&client, "v1", "ResourceClaim", Some("default"))
            .get("c")
            .await
            .unwrap(),
    );
    assert_eq!(
        v1["spec"]["devices"]["requests"],
        json!([
            {"name": "gpu", "exactly": {"deviceClassName": CLASS, "selectors": [{"cel": {"expression": "device.driver == \"x\""}}], "allocationMode": "ExactCount", "count": 1}},
            {"name": "all", "exactly": {"deviceClassName": CLASS, "allocationMode": "All"}}
        ])
    );
    assert_eq!(
        v1["spec"]["devices"]["config"][0]["opaque"]["parameters"]["spec"]["split"],
        2
    );
    let beta = data(
        &api(&client, "v1beta1", "ResourceClaim", Some("default"))
            .get("c")
            .await
            .unwrap(),
    );
    assert_eq!(beta["spec"]["devices"]["requests"][0]["count"], 1);
    assert!(
        beta["spec"]["devices"]["requests"][0]
            .get("exactly")
            .is_none()
    );

    let template = object(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "t"},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": CLASS, "count": 4}}]}}}
    }));
    api(&client, "v1", "ResourceClaimTemplate", Some("default"))
        .create(&PostParams::default(), &template)
        .await
        .unwrap();
    let beta = data(
        &api(&client, "v1beta1", "ResourceClaimTemplate", Some("default"))
            .get("t")
            .await
            .unwrap(),
    );
    assert_eq!(
        beta["spec"]["spec"]["devices"]["requests"],
        json!([{"name": "gpu", "deviceClassName": CLASS, "count": 4, "allocationMode": "ExactCount"}])
    );
}

#[tokio::test]
async fn admission_rejects_broken_structured_objects() {
    let (_server, client) = server((1, 34)).await;
    let class = object(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "broken"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == "}}]}
    }));
    let err = api(&client, "v1", "DeviceClass", None)
        .create(&PostParams::default(), &class)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 422 && s.message.contains("compilation failed")),
        "{err}"
    );
    let slice = object(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "s"},
        "spec": {"driver": DRIVER, "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1}, "devices": [{"name": "Not_A_Label"}]}
    }));
    let err = api(&client, "v1", "ResourceSlice", None)
        .create(&PostParams::default(), &slice)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 422 && s.message.contains("nodeName") && s.message.contains("spec.devices[0].name")),
        "{err}"
    );
    // Pool names (`validatePoolName`): DNS subdomains joined by `/`, 253 at most.
    let pool_slice = |name: &str, pool: &str| {
        object(json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name},
            "spec": {"driver": DRIVER, "nodeName": "node-1", "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1}, "devices": []}
        }))
    };
    api(&client, "v1", "ResourceSlice", None)
        .create(
            &PostParams::default(),
            &pool_slice("nics", "node-1/nics.example"),
        )
        .await
        .unwrap();
    let long = format!("node-1/{}", "a".repeat(250));
    for bad in ["node-1//nics", "Node_1", "node-1/-nics", long.as_str()] {
        let err = api(&client, "v1", "ResourceSlice", None)
            .create(&PostParams::default(), &pool_slice("bad", bad))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, kube::Error::Api(s) if s.code == 422 && s.message.contains("spec.pool.name")),
            "{bad}: {err}"
        );
    }
    let claim = object(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": CLASS, "count": 0}}]}}
    }));
    let err = api(&client, "v1", "ResourceClaim", Some("default"))
        .create(&PostParams::default(), &claim)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 422 && s.message.contains("count")),
        "{err}"
    );
}

#[tokio::test]
async fn pods_take_the_claim_layout_of_their_release() {
    let pod = |entry: Value| -> k8s_openapi::api::core::v1::Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}], "resourceClaims": [entry]}
        }))
        .unwrap()
    };
    let raw = |entry: Value| json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p-raw"}, "spec": {"containers": [{"name": "c", "image": "busybox"}], "resourceClaims": [entry]}});
    let (_server, client) = server((1, 34)).await;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), "default");
    pods.create(
        &PostParams::default(),
        &pod(json!({"name": "gpu", "resourceClaimTemplateName": "t"})),
    )
    .await
    .unwrap();
    // The 1.30 layout: `source` is unknown to 1.34 and dropped, so the reference is missing.
    let request = http::Request::post("/api/v1/namespaces/default/pods")
        .header("content-type", "application/json")
        .body(
            serde_json::to_vec(&raw(
                json!({"name": "gpu", "source": {"resourceClaimTemplateName": "t"}}),
            ))
            .unwrap(),
        )
        .unwrap();
    let err = client.request::<Value>(request).await.unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 422 && s.message.contains("resourceClaimTemplateName")),
        "{err}"
    );

    let (_server, client) = server((1, 30)).await;
    let request = http::Request::post("/api/v1/namespaces/default/pods")
        .header("content-type", "application/json")
        .body(
            serde_json::to_vec(&raw(
                json!({"name": "gpu", "resourceClaimTemplateName": "t"}),
            ))
            .unwrap(),
        )
        .unwrap();
    let err = client.request::<Value>(request).await.unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 422),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------
// The scheduler's allocator and the resourceclaim controller

/// A control plane of `version` with every DRA gate on, without kubelets: nodes `n1`
/// (models M1, M1, M2, M2) and `n2` (M1 ×4), the DeviceClass of the driver with a class
/// config, scheduler and controller. The scheduler's words follow the release (1.37's
/// where a test compares them).
async fn control_plane(version: (u32, u32)) -> (ApiServer, kube::Client, tokio::task::JoinSet<()>) {
    control_plane_with(version, FeatureGates::all_on()).await
}

async fn control_plane_with(
    version: (u32, u32),
    gates: FeatureGates,
) -> (ApiServer, kube::Client, tokio::task::JoinSet<()>) {
    let (server, client) = server_with(version, gates).await;
    let nodes: Api<Node> = Api::all(client.clone());
    for (node, models) in [
        ("n1", ["M1", "M1", "M2", "M2"]),
        ("n2", ["M1", "M1", "M1", "M1"]),
    ] {
        let n = Node {
            metadata: ObjectMeta {
                name: Some(node.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        nodes.create(&PostParams::default(), &n).await.unwrap();
        let devices: Vec<Value> = models
            .iter()
            .enumerate()
            .map(|(i, m)| json!({"name": format!("fake-{i}"), "attributes": {"model": {"string": m}, "index": {"int": i}, "uuid": {"string": format!("FAKE-{node}-{i}")}, "driverVersion": {"version": "0.1.0"}}}))
            .collect();
        let slice = object(json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": format!("{node}-{DRIVER}")},
            "spec": {"driver": DRIVER, "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}, "devices": devices}
        }));
        api(&client, "v1", "ResourceSlice", None)
            .create(&PostParams::default(), &slice)
            .await
            .unwrap();
    }
    let class = object(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": CLASS},
        "spec": {"selectors": [{"cel": {"expression": format!("device.driver == \"{DRIVER}\"")}}],
                 "config": [{"opaque": {"driver": DRIVER, "parameters": {"apiVersion": "fake.resource.3-shake.com/v1alpha1", "kind": "FakeClaimParameters", "spec": {"split": 1}}}}]}
    }));
    api(&client, "v1", "DeviceClass", None)
        .create(&PostParams::default(), &class)
        .await
        .unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(scheduler::run(
        server.client().unwrap(),
        server.store().subscribe(),
        version,
        server.feature_gates().clone(),
    ));
    tasks.spawn(claims::run(
        server.client().unwrap(),
        server.store().subscribe(),
        version,
    ));
    (server, client, tasks)
}

fn claim(name: &str, request: Value) -> DynamicObject {
    object(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
        "spec": {"devices": {"requests": [request],
            "config": [{"requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": {"apiVersion": "fake.resource.3-shake.com/v1alpha1", "kind": "FakeClaimParameters", "spec": {"split": 2}}}}]}}
    }))
}

/// Creates `template(name, request)` in `default`.
async fn create_template(client: &kube::Client, name: &str, request: Value) {
    api(client, "v1", "ResourceClaimTemplate", Some("default"))
        .create(&PostParams::default(), &template(name, request))
        .await
        .unwrap();
}

fn template(name: &str, request: Value) -> DynamicObject {
    object(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [request]}}}
    }))
}

fn pod(name: &str, entry: Value) -> k8s_openapi::api::core::v1::Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["true"], "resources": {"claims": [{"name": "gpu"}]}}],
                 "resourceClaims": [entry]}
    }))
    .unwrap()
}

async fn create_pod(client: &kube::Client, p: &k8s_openapi::api::core::v1::Pod) {
    Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), p)
        .await
        .unwrap();
}

async fn node_of(client: &kube::Client, pod: &str) -> Option<String> {
    Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), "default")
        .get(pod)
        .await
        .ok()?
        .spec?
        .node_name
}

/// Creates the ResourceClaim and a pod `pod` using it as "gpu", and waits until the
/// scheduler binds the pod: its node.
async fn bound_with_claim(
    client: &kube::Client,
    pod_name: &str,
    claim_object: DynamicObject,
) -> String {
    let claim_name = claim_object.metadata.name.clone().unwrap();
    api(client, "v1", "ResourceClaim", Some("default"))
        .create(&PostParams::default(), &claim_object)
        .await
        .unwrap();
    create_pod(
        client,
        &pod(
            pod_name,
            json!({"name": "gpu", "resourceClaimName": claim_name}),
        ),
    )
    .await;
    eventually(&format!("pod {pod_name} is bound"), || async {
        node_of(client, pod_name).await.is_some()
    })
    .await;
    node_of(client, pod_name).await.unwrap()
}

async fn claims_v1(client: &kube::Client) -> Vec<Value> {
    api(client, "v1", "ResourceClaim", Some("default"))
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(data)
        .collect()
}

async fn event_notes(client: &kube::Client, reason: &str) -> Vec<String> {
    Api::<Event>::namespaced(client.clone(), "default")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.note)
        .collect()
}

fn results(claim: &Value) -> Vec<(String, String, String)> {
    claim
        .pointer("/status/allocation/devices/results")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|r| {
            (
                r["request"].as_str().unwrap().to_string(),
                r["pool"].as_str().unwrap().to_string(),
                r["device"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn model_selection_count_config_and_release() {
    let (_server, client, _tasks) = control_plane((1, 34)).await;
    let expression = format!("device.attributes[\"{DRIVER}\"].model == \"M2\"");
    let node = bound_with_claim(
        &client,
        "p",
        claim("m2", json!({"name": "gpu", "exactly": {"deviceClassName": CLASS, "count": 2, "selectors": [{"cel": {"expression": expression}}]}})),
    )
    .await;
    assert_eq!(node, "n1");
    let claim = claims_v1(&client).await.into_iter().next().unwrap();
    assert_eq!(
        results(&claim),
        [
            ("gpu".to_string(), "n1".to_string(), "fake-2".to_string()),
            ("gpu".into(), "n1".into(), "fake-3".into())
        ]
    );
    let allocation = &claim["status"]["allocation"];
    assert_eq!(allocation["devices"]["results"][0]["driver"], DRIVER);
    assert_eq!(
        allocation["devices"]["config"],
        json!([
            {"source": "FromClass", "requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": {"apiVersion": "fake.resource.3-shake.com/v1alpha1", "kind": "FakeClaimParameters", "spec": {"split": 1}}}},
            {"source": "FromClaim", "requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": {"apiVersion": "fake.resource.3-shake.com/v1alpha1", "kind": "FakeClaimParameters", "spec": {"split": 2}}}}
        ])
    );
    assert_eq!(
        allocation["nodeSelector"],
        json!({"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]})
    );
    assert_eq!(claim["status"]["reservedFor"][0]["name"], "p");
    assert_eq!(
        claim["metadata"]["finalizers"],
        json!(["resource.kubernetes.io/delete-protection"])
    );
    // The same allocation through v1beta1.
    let beta = data(
        &api(&client, "v1beta1", "ResourceClaim", Some("default"))
            .get("m2")
            .await
            .unwrap(),
    );
    assert_eq!(beta["status"]["allocation"], *allocation);

    // The last consumer goes: the controller deallocates and drops the finalizer.
    Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), "default")
        .delete(
            "p",
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    eventually("the claim is deallocated", || async {
        let c = claims_v1(&client).await.into_iter().next().unwrap();
        c.pointer("/status/allocation").is_none_or(Value::is_null)
            && c.pointer("/metadata/finalizers")
                .is_none_or(|f| f.as_array().is_none_or(Vec::is_empty))
    })
    .await;
}

#[tokio::test]
async fn no_device_is_allocated_twice_and_over_requests_stay_pending() {
    let (_server, client, _tasks) = control_plane((1, 37)).await;
    create_template(
        &client,
        "one",
        json!({"name": "gpu", "exactly": {"deviceClassName": CLASS}}),
    )
    .await;
    for i in 0..9 {
        create_pod(
            &client,
            &pod(
                &format!("p{i}"),
                json!({"name": "gpu", "resourceClaimTemplateName": "one"}),
            ),
        )
        .await;
    }
    eventually("8 pods are bound", || async {
        let mut bound = 0;
        for i in 0..9 {
            bound += usize::from(node_of(&client, &format!("p{i}")).await.is_some());
        }
        bound == 8
    })
    .await;
    let claims = claims_v1(&client).await;
    let devices: Vec<(String, String)> = claims
        .iter()
        .flat_map(results)
        .map(|(_, p, d)| (p, d))
        .collect();
    let distinct: BTreeSet<_> = devices.iter().cloned().collect();
    assert_eq!(devices.len(), 8);
    assert_eq!(distinct.len(), 8, "{devices:?}");
    eventually("the ninth pod is reported unschedulable", || async {
        event_notes(&client, "FailedScheduling")
            .await
            .iter()
            .any(|n| n == "0/2 nodes are available: 2 cannot allocate all claims. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.")
    })
    .await;

    // Freeing one device lets the pending pod in.
    let bound = (0..9).find(|i| *i != 8).unwrap();
    let pending = {
        let mut p = None;
        for i in 0..9 {
            if node_of(&client, &format!("p{i}")).await.is_none() {
                p = Some(i);
            }
        }
        p.unwrap()
    };
    let victim = if pending == bound { 1 } else { bound };
    Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), "default")
        .delete(
            &format!("p{victim}"),
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    eventually(
        "the pending pod is bound after a device is freed",
        || async { node_of(&client, &format!("p{pending}")).await.is_some() },
    )
    .await;
    let devices: Vec<(String, String)> = claims_v1(&client)
        .await
        .iter()
        .flat_map(results)
        .map(|(_, p, d)| (p, d))
        .collect();
    assert_eq!(
        devices.iter().cloned().collect::<BTreeSet<_>>().len(),
        devices.len()
    );
}

#[tokio::test]
async fn allocation_mode_all_takes_every_matching_device_of_one_node() {
    let (_server, client, _tasks) = control_plane((1, 34)).await;
    let expression = format!(
        "device.attributes[\"{DRIVER}\"].model == \"M1\" && device.attributes[\"{DRIVER}\"].index >= 0"
    );
    create_template(&client, "all", json!({"name": "gpu", "exactly": {"deviceClassName": CLASS, "allocationMode": "All", "selectors": [{"cel": {"expression": expression}}]}})).await;
    create_pod(
        &client,
        &pod(
            "a",
            json!({"name": "gpu", "resourceClaimTemplateName": "all"}),
        ),
    )
    .await;
    eventually("the pod is bound", || async {
        node_of(&client, "a").await.is_some()
    })
    .await;
    let node = node_of(&client, "a").await.unwrap();
    let claims = claims_v1(&client).await;
    let got: Vec<String> = results(&claims[0])
        .into_iter()
        .map(|(_, pool, d)| format!("{pool}/{d}"))
        .collect();
    let expected: Vec<String> = if node == "n1" {
        vec!["n1/fake-0".into(), "n1/fake-1".into()]
    } else {
        (0..4).map(|i| format!("n2/fake-{i}")).collect()
    };
    assert_eq!(got, expected);
    // The generated claim is recorded in the pod status, owned by the pod.
    let p = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), "default")
        .get("a")
        .await
        .unwrap();
    let statuses = p.status.unwrap().resource_claim_statuses.unwrap();
    assert_eq!(
        statuses[0].resource_claim_name.as_deref(),
        claims[0]["metadata"]["name"].as_str()
    );
}

#[tokio::test]
async fn unsatisfiable_requests_and_cel_errors_are_reported() {
    let (_server, client, _tasks) = control_plane((1, 37)).await;
    create_template(
        &client,
        "five",
        json!({"name": "gpu", "exactly": {"deviceClassName": CLASS, "count": 5}}),
    )
    .await;
    let broken = format!("device.attributes[\"{DRIVER}\"].nosuch == \"x\"");
    create_template(&client, "broken", json!({"name": "gpu", "exactly": {"deviceClassName": CLASS, "selectors": [{"cel": {"expression": broken}}]}})).await;
    create_template(
        &client,
        "noclass",
        json!({"name": "gpu", "exactly": {"deviceClassName": "missing"}}),
    )
    .await;
    create_pod(
        &client,
        &pod(
            "five",
            json!({"name": "gpu", "resourceClaimTemplateName": "five"}),
        ),
    )
    .await;
    create_pod(
        &client,
        &pod(
            "broken",
            json!({"name": "gpu", "resourceClaimTemplateName": "broken"}),
        ),
    )
    .await;
    create_pod(
        &client,
        &pod(
            "noclass",
            json!({"name": "gpu", "resourceClaimTemplateName": "noclass"}),
        ),
    )
    .await;
    eventually("all three are reported", || async {
        let notes = event_notes(&client, "FailedScheduling").await;
        notes
            .iter()
            .any(|n| n == "0/2 nodes are available: 2 cannot allocate all claims. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.")
            && notes
                .iter()
                .any(|n| n.starts_with("running \"DynamicResources\" filter plugin: claim default/")
                    && n.contains(": selector #0 on device ")
                    && n.contains("CEL runtime error: no such key: nosuch. consider using CEL optional chaining"))
            && notes
                .iter()
                .any(|n| n.contains("deviceclasses.resource.k8s.io \"missing\" not found"))
    })
    .await;
    for p in ["five", "broken", "noclass"] {
        assert_eq!(node_of(&client, p).await, None, "{p}");
    }
    assert!(
        claims_v1(&client)
            .await
            .iter()
            .all(|c| results(c).is_empty())
    );
}

/// Replaces node `node`'s slice with one whose devices are `devices` (generation 2).
async fn republish(client: &kube::Client, node: &str, devices: Vec<Value>) {
    let slices = api(client, "v1", "ResourceSlice", None);
    let name = format!("{node}-{DRIVER}");
    let mut current = slices.get(&name).await.unwrap();
    // A device drawing on counters needs the counter set in the same slice (1.34's
    // validation of sharedCounters).
    let counters = devices.iter().any(|d| d.get("consumesCounters").is_some());
    current.data["spec"]["devices"] = json!(devices);
    if counters {
        current.data["spec"]["sharedCounters"] =
            json!([{"name": "s", "counters": {"c": {"value": "1"}}}]);
    } else if let Some(spec) = current.data["spec"].as_object_mut() {
        spec.remove("sharedCounters");
    }
    current.data["spec"]["pool"]["generation"] = json!(2);
    slices
        .replace(&name, &PostParams::default(), &current)
        .await
        .unwrap();
}

#[tokio::test]
async fn device_taints_keep_new_claims_off_unless_tolerated() {
    let (_server, client, _tasks) = control_plane((1, 37)).await;
    let taint = json!([{"key": "fake.resource.3-shake.com/unhealthy", "effect": "NoSchedule"}]);
    let info = json!([{"key": "note", "effect": "None"}]);
    for node in ["n1", "n2"] {
        let devices: Vec<Value> = (0..4)
            .map(|i| {
                let mut d = json!({"name": format!("fake-{i}"), "attributes": {"model": {"string": "M1"}, "index": {"int": i}}});
                // Every device tainted but fake-3 of n2, which carries an informational taint.
                if node == "n1" || i < 3 {
                    d["taints"] = taint.clone();
                } else {
                    d["taints"] = info.clone();
                }
                d
            })
            .collect();
        republish(&client, node, devices).await;
    }
    create_template(
        &client,
        "one",
        json!({"name": "gpu", "exactly": {"deviceClassName": CLASS}}),
    )
    .await;
    create_template(&client, "tolerant", json!({"name": "gpu", "exactly": {"deviceClassName": CLASS, "count": 4, "tolerations": [{"key": "fake.resource.3-shake.com/unhealthy", "operator": "Exists", "effect": "NoSchedule"}]}})).await;
    create_pod(
        &client,
        &pod(
            "a",
            json!({"name": "gpu", "resourceClaimTemplateName": "one"}),
        ),
    )
    .await;
    create_pod(
        &client,
        &pod(
            "b",
            json!({"name": "gpu", "resourceClaimTemplateName": "one"}),
        ),
    )
    .await;
    create_pod(
        &client,
        &pod(
            "t",
            json!({"name": "gpu", "resourceClaimTemplateName": "tolerant"}),
        ),
    )
    .await;
    eventually("a and t placed", || async {
        node_of(&client, "a").await.is_some() && node_of(&client, "t").await.is_some()
    })
    .await;
    // The only untainted device (a None-effect taint does not count) is n2's fake-3.
    assert_eq!(node_of(&client, "a").await.as_deref(), Some("n2"));
    let claims = claims_v1(&client).await;
    let of_pod = |p: &str| {
        claims
            .iter()
            .find(|c| {
                c["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("{p}-"))
            })
            .map(results)
            .unwrap()
    };
    assert_eq!(of_pod("a")[0].2, "fake-3");
    assert_eq!(
        of_pod("t").len(),
        4,
        "tolerating the taint, it gets all four of n1"
    );
    // The second pod needs another untainted device: there is none.
    eventually("b unschedulable", || async {
        event_notes(&client, "FailedScheduling")
            .await
            .iter()
            .any(|n| n.contains("cannot allocate all claims"))
    })
    .await;
    assert_eq!(node_of(&client, "b").await, None);
}

/// kube-scheduler applies DeviceTaintRules only with `DRADeviceTaintRules` on
/// (`EnableDeviceTaintRules` in pkg/scheduler/scheduler.go of 1.37.2); the API serves the
/// kind either way.
#[tokio::test]
async fn taint_rules_keep_pods_off_only_while_their_gate_is_on() {
    for (spec, allocated) in [("", false), ("DRADeviceTaintRules=false", true)] {
        let gates = FeatureGates::parse(spec, (1, 37)).unwrap();
        let (_server, client, _tasks) = control_plane_with((1, 37), gates).await;
        let rule = object(json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule", "metadata": {"name": "maintenance"},
            "spec": {"deviceSelector": {"driver": DRIVER}, "taint": {"key": "maintenance", "effect": "NoSchedule"}}
        }));
        api(&client, "v1", "DeviceTaintRule", None)
            .create(&PostParams::default(), &rule)
            .await
            .unwrap();
        create_template(
            &client,
            "one",
            json!({"name": "gpu", "exactly": {"deviceClassName": CLASS}}),
        )
        .await;
        create_pod(
            &client,
            &pod(
                "a",
                json!({"name": "gpu", "resourceClaimTemplateName": "one"}),
            ),
        )
        .await;
        if allocated {
            eventually(
                "a placed though every device is tainted by the rule",
                || async { node_of(&client, "a").await.is_some() },
            )
            .await;
        } else {
            eventually("a unschedulable", || async {
                event_notes(&client, "FailedScheduling")
                    .await
                    .iter()
                    .any(|n| n.contains("cannot allocate all claims"))
            })
            .await;
            assert_eq!(node_of(&client, "a").await, None, "gates: {spec:?}");
        }
    }
}

/// `--feature-gates DRADeviceTaints=true` on 1.35 keeps the taints a default 1.35 drops.
#[tokio::test]
async fn a_gate_turned_on_keeps_the_fields_its_release_drops_by_default() {
    for (gates, kept) in [
        (FeatureGates::default(), false),
        (
            FeatureGates::parse("DRADeviceTaints=true", (1, 35)).unwrap(),
            true,
        ),
    ] {
        let (_server, client) = server_with((1, 35), gates).await;
        let slice = object(json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "s"},
            "spec": {"driver": DRIVER, "nodeName": "n1", "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": "d", "taints": [{"key": "k", "effect": "NoSchedule"}]}]}
        }));
        let stored = api(&client, "v1", "ResourceSlice", None)
            .create(&PostParams::default(), &slice)
            .await
            .unwrap();
        assert_eq!(
            stored.data.pointer("/spec/devices/0/taints").is_some(),
            kept,
            "{}",
            stored.data
        );
    }
}

#[tokio::test]
async fn device_features_the_emulator_does_not_implement_are_refused_by_name() {
    let (_server, client, _tasks) = control_plane((1, 34)).await;
    let shapes = [(
        "binding",
        json!({"bindingConditions": ["a"], "bindingFailureConditions": ["f"]}),
        "bindingConditions (binding conditions)",
    )];
    for (i, (name, extra, feature)) in shapes.iter().enumerate() {
        let mut device =
            json!({"name": format!("x-{name}"), "attributes": {"model": {"string": "M1"}}});
        for (k, v) in extra.as_object().unwrap() {
            device[k] = v.clone();
        }
        republish(&client, "n1", vec![device]).await;
        republish(&client, "n2", vec![]).await;
        let t = format!("t{i}");
        create_template(
            &client,
            &t,
            json!({"name": "gpu", "exactly": {"deviceClassName": CLASS}}),
        )
        .await;
        create_pod(
            &client,
            &pod(
                &format!("p{i}"),
                json!({"name": "gpu", "resourceClaimTemplateName": t}),
            ),
        )
        .await;
        let feature = feature.to_string();
        eventually(&format!("the refusal of {feature}"), || {
            let client = client.clone();
            let feature = feature.clone();
            async move {
                event_notes(&client, "FailedScheduling")
                    .await
                    .iter()
                    .any(|n| {
                        n.contains(&format!(
                            "uses {feature}, which the emulated scheduler does not implement"
                        ))
                    })
            }
        })
        .await;
    }
}

/// firstAvailable (kube-scheduler's allocator, `allocateOne`): the subrequests in order,
/// the first the node can satisfy; results name `request/subrequest`. From 1.37 a config
/// covering every request names none (kubernetes/kubernetes#139731).
#[tokio::test]
async fn first_available_takes_the_first_subrequest_that_fits() {
    let (_server, client, _tasks) = control_plane((1, 37)).await;
    let m2 = format!("device.attributes[\"{DRIVER}\"].model == \"M2\"");
    let node = bound_with_claim(
        &client,
        "p",
        claim(
            "pl",
            json!({"name": "gpu", "firstAvailable": [
                {"name": "nine", "deviceClassName": CLASS, "count": 9},
                {"name": "two-m2", "deviceClassName": CLASS, "count": 2, "selectors": [{"cel": {"expression": m2}}]},
                {"name": "one", "deviceClassName": CLASS}
            ]}),
        ),
    )
    .await;
    assert_eq!(node, "n1");
    let claim = claims_v1(&client).await.into_iter().next().unwrap();
    assert_eq!(
        results(&claim),
        [
            (
                "gpu/two-m2".to_string(),
                "n1".to_string(),
                "fake-2".to_string()
            ),
            ("gpu/two-m2".into(), "n1".into(), "fake-3".into())
        ]
    );
    let config = &claim["status"]["allocation"]["devices"]["config"];
    assert_eq!(
        config,
        &json!([
            {"source": "FromClass", "opaque": {"driver": DRIVER, "parameters": {"apiVersion": "fake.resource.3-shake.com/v1alpha1", "kind": "FakeClaimParameters", "spec": {"split": 1}}}},
            {"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": {"apiVersion": "fake.resource.3-shake.com/v1alpha1", "kind": "FakeClaimParameters", "spec": {"split": 2}}}}
        ]),
        "{config:#}"
    );
}

/// adminAccess (`allocateDevice`, and `allocateddevices.go` leaving admin results out):
/// a monitor gets devices whatever holds them, and holds none itself.
#[tokio::test]
async fn admin_access_sees_devices_and_holds_none() {
    let (_server, client, _tasks) = control_plane((1, 37)).await;
    // The API server allows adminAccess only in a namespace labelled so.
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .patch(
            "default",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({"metadata": {"labels": {"resource.kubernetes.io/admin-access": "true"}}}),
            ),
        )
        .await
        .unwrap();
    let m2 = format!("device.attributes[\"{DRIVER}\"].model == \"M2\"");
    let claims = api(&client, "v1", "ResourceClaim", Some("default"));
    bound_with_claim(
        &client,
        "monitor",
        claim(
            "mon",
            json!({"name": "gpu", "exactly": {"deviceClassName": CLASS, "allocationMode": "All", "adminAccess": true, "selectors": [{"cel": {"expression": m2}}]}}),
        ),
    )
    .await;
    let mon = data(&claims.get("mon").await.unwrap());
    let admin: Vec<&Value> = mon
        .pointer("/status/allocation/devices/results")
        .and_then(Value::as_array)
        .unwrap()
        .iter()
        .map(|r| &r["adminAccess"])
        .collect();
    assert_eq!(admin, [&json!(true), &json!(true)], "{mon:#}");
    // The same two devices go to a claim of its own: the monitor holds nothing.
    bound_with_claim(
        &client,
        "owner",
        claim(
            "own",
            json!({"name": "gpu", "exactly": {"deviceClassName": CLASS, "count": 2, "selectors": [{"cel": {"expression": m2}}]}}),
        ),
    )
    .await;
    let own = data(&claims.get("own").await.unwrap());
    let held: Vec<(String, String)> = results(&own).into_iter().map(|(_, p, d)| (p, d)).collect();
    assert_eq!(
        held,
        [
            ("n1".to_string(), "fake-2".to_string()),
            ("n1".into(), "fake-3".into())
        ]
    );
    assert!(
        own.pointer("/status/allocation/devices/results/0/adminAccess")
            .is_none(),
        "{own:#}"
    );
}

/// Partitionable devices (`checkAvailableCounters`): devices drawing on one counter set
/// of their pool (in a slice of its own, as from 1.35) are allocated while the counters
/// last; the whole GPU waits for both halves to go.
#[tokio::test]
async fn shared_counters_limit_what_partitions_get() {
    let (_server, client, _tasks) = control_plane((1, 37)).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let n3 = Node {
        metadata: ObjectMeta {
            name: Some("n3".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    nodes.create(&PostParams::default(), &n3).await.unwrap();
    let pool = json!({"name": "n3", "generation": 1, "resourceSliceCount": 2});
    let counters = object(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "n3-counters"},
        "spec": {"driver": DRIVER, "nodeName": "n3", "pool": pool,
                 "sharedCounters": [{"name": "gpu-0", "counters": {"memory": {"value": "80Gi"}}}]}
    }));
    let part = |name: &str, kind: &str, memory: &str| {
        json!({"name": name, "attributes": {"kind": {"string": kind}},
               "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": memory}}}]})
    };
    let devices = object(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "n3-devices"},
        "spec": {"driver": DRIVER, "nodeName": "n3", "pool": pool,
                 "devices": [part("gpu-0", "whole", "80Gi"), part("gpu-0-a", "half", "40Gi"), part("gpu-0-b", "half", "40Gi")]}
    }));
    let slices = api(&client, "v1", "ResourceSlice", None);
    slices
        .create(&PostParams::default(), &counters)
        .await
        .unwrap();
    slices
        .create(&PostParams::default(), &devices)
        .await
        .unwrap();
    let of_kind = |kind: &str| json!({"name": "gpu", "exactly": {"deviceClassName": CLASS, "selectors": [{"cel": {"expression": format!("has(device.attributes[\"{DRIVER}\"].kind) && device.attributes[\"{DRIVER}\"].kind == \"{kind}\"")}}]}});
    let templates = api(&client, "v1", "ResourceClaimTemplate", Some("default"));
    for kind in ["whole", "half"] {
        templates
            .create(&PostParams::default(), &template(kind, of_kind(kind)))
            .await
            .unwrap();
    }
    for name in ["half-a", "half-b"] {
        create_pod(
            &client,
            &pod(
                name,
                json!({"name": "gpu", "resourceClaimTemplateName": "half"}),
            ),
        )
        .await;
    }
    for name in ["half-a", "half-b"] {
        eventually(&format!("{name} is bound"), || async {
            node_of(&client, name).await.is_some()
        })
        .await;
    }
    let held: BTreeSet<String> = claims_v1(&client)
        .await
        .iter()
        .flat_map(results)
        .map(|(_, _, d)| d)
        .collect();
    assert_eq!(held, BTreeSet::from(["gpu-0-a".into(), "gpu-0-b".into()]));
    create_pod(
        &client,
        &pod(
            "whole",
            json!({"name": "gpu", "resourceClaimTemplateName": "whole"}),
        ),
    )
    .await;
    eventually("the whole GPU is reported unschedulable", || async {
        event_notes(&client, "FailedScheduling")
            .await
            .iter()
            .any(|n| n.starts_with("0/3 nodes are available: 3 cannot allocate all claims."))
    })
    .await;
    assert_eq!(node_of(&client, "whole").await, None);
    // One half going is not enough; both are.
    let pods = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), "default");
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    pods.delete("half-a", &now).await.unwrap();
    eventually("half-a's claim is gone", || async {
        claims_v1(&client).await.len() == 2
    })
    .await;
    assert_eq!(node_of(&client, "whole").await, None);
    pods.delete("half-b", &now).await.unwrap();
    eventually("the whole GPU is bound once both halves went", || async {
        node_of(&client, "whole").await.as_deref() == Some("n3")
    })
    .await;
}

/// `matchAttribute` constraints (upstream's `matchAttributeConstraint`): every device of
/// the requests it names shares the attribute's value, looked up by its qualified name
/// or, in the driver's own domain, its bare one; a device without it never qualifies.
#[tokio::test]
async fn match_attribute_constraints_pick_devices_that_agree() {
    let (_server, client, _tasks) = control_plane((1, 37)).await;
    let m2 = format!("device.attributes[\"{DRIVER}\"].model == \"M2\"");
    let two_requests = |name: &str, attribute: &str| {
        object(json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {
                "requests": [
                    {"name": "a", "exactly": {"deviceClassName": CLASS, "selectors": [{"cel": {"expression": m2}}]}},
                    {"name": "b", "exactly": {"deviceClassName": CLASS}},
                    {"name": "c", "exactly": {"deviceClassName": CLASS}}
                ],
                "constraints": [{"requests": ["a", "b"], "matchAttribute": attribute}]
            }}
        }))
    };
    let claims = api(&client, "v1", "ResourceClaim", Some("default"));
    for (name, attribute) in [
        ("same-model", format!("{DRIVER}/model")),
        ("same-index", format!("{DRIVER}/index")),
        ("missing", "example.com/model".to_string()),
    ] {
        claims
            .create(&PostParams::default(), &two_requests(name, &attribute))
            .await
            .unwrap();
        let entry = json!({"name": "gpu", "resourceClaimName": name});
        create_pod(&client, &pod(name, entry)).await;
    }
    eventually("same-model is bound", || async {
        node_of(&client, "same-model").await.is_some()
    })
    .await;
    let claim = data(&claims.get("same-model").await.unwrap());
    // a takes the first M2 device; b, bound by the constraint, the other M2 rather than
    // the first free device; c, unbound, the first free one.
    assert_eq!(
        results(&claim),
        [
            ("a".to_string(), "n1".to_string(), "fake-2".to_string()),
            ("b".into(), "n1".into(), "fake-3".into()),
            ("c".into(), "n1".into(), "fake-0".into())
        ]
    );
    // No two devices of a node share an index; no device has example.com/model.
    eventually("the other two are reported unschedulable", || async {
        event_notes(&client, "FailedScheduling")
            .await
            .iter()
            .filter(|n| n.starts_with("0/2 nodes are available: 2 cannot allocate all claims."))
            .count()
            >= 2
    })
    .await;
    assert_eq!(node_of(&client, "same-index").await, None);
    assert_eq!(node_of(&client, "missing").await, None);
}

/// `distinctAttribute` (upstream's `distinctAttributeConstraint`, DRAConsumableCapacity):
/// no two devices of the requests it names share the attribute's value. Two devices of
/// distinct models exist only on n1: its first M1 and its first M2.
#[tokio::test]
async fn distinct_attribute_constraints_pick_devices_that_differ() {
    let (_server, client, _tasks) = control_plane((1, 37)).await;
    let distinct = object(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "two-models"},
        "spec": {"devices": {
            "requests": [{"name": "gpu", "exactly": {"deviceClassName": CLASS, "count": 2}}],
            "constraints": [{"distinctAttribute": format!("{DRIVER}/model")}]
        }}
    }));
    let node = bound_with_claim(&client, "p", distinct).await;
    assert_eq!(node, "n1");
    let claim = claims_v1(&client).await.into_iter().next().unwrap();
    assert_eq!(
        results(&claim),
        [
            ("gpu".to_string(), "n1".to_string(), "fake-0".to_string()),
            ("gpu".into(), "n1".into(), "fake-2".into())
        ]
    );
}

/// Consumable capacity (DRAConsumableCapacity, upstream's `consumable_capacity.go`): a
/// device allowing multiple allocations goes to several requests, of one claim or of
/// several, each a share with an id of its own and what it takes under the capacity's
/// request policy, until its capacity is spent.
#[tokio::test]
async fn shares_of_a_device_take_its_capacity_under_the_request_policy() {
    let (_server, client, _tasks) = control_plane((1, 37)).await;
    let shared = json!({"name": "gpu-0", "allowMultipleAllocations": true,
        "attributes": {"model": {"string": "M1"}},
        "capacity": {"memory": {"value": "8Gi", "requestPolicy": {
            "default": "1Gi", "validRange": {"min": "1Gi", "step": "512Mi"}}}}});
    republish(&client, "n1", vec![shared]).await;
    republish(&client, "n2", vec![]).await;
    let share = |name: &str, memory: Option<&str>| {
        let mut exactly = json!({"deviceClassName": CLASS});
        if let Some(m) = memory {
            exactly["capacity"] = json!({"requests": {"memory": m}});
        }
        json!({"name": name, "exactly": exactly})
    };
    let claims = api(&client, "v1", "ResourceClaim", Some("default"));
    // One claim, two shares of the one device: 1.2Gi rounds up to the next step (1.5Gi),
    // no amount takes the default.
    let two = object(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "two"},
        "spec": {"devices": {"requests": [share("a", Some("1.2Gi")), share("b", None)]}}
    }));
    claims.create(&PostParams::default(), &two).await.unwrap();
    create_pod(
        &client,
        &pod("two", json!({"name": "gpu", "resourceClaimName": "two"})),
    )
    .await;
    eventually("two is bound", || async {
        node_of(&client, "two").await.is_some()
    })
    .await;
    let claim = data(&claims.get("two").await.unwrap());
    let results = claim["status"]["allocation"]["devices"]["results"]
        .as_array()
        .unwrap();
    let taken: Vec<(&str, &str, &str)> = results
        .iter()
        .map(|r| {
            (
                r["request"].as_str().unwrap(),
                r["device"].as_str().unwrap(),
                r["consumedCapacity"]["memory"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(taken, [("a", "gpu-0", "1536Mi"), ("b", "gpu-0", "1Gi")]);
    let ids: Vec<&str> = results
        .iter()
        .map(|r| r["shareID"].as_str().unwrap())
        .collect();
    assert_ne!(ids[0], ids[1], "each share has an id of its own");
    assert!(
        ids.iter().all(|id| uuid::Uuid::parse_str(id).is_ok()),
        "{ids:?}"
    );

    // 5.5Gi of 8Gi left: a 5Gi share fits, then a 1Gi one does not (0.5Gi left), and a
    // request above the capacity matches no device.
    for (name, memory) in [("big", "5Gi"), ("late", "1Gi"), ("huge", "9Gi")] {
        claims
            .create(
                &PostParams::default(),
                &object(json!({
                    "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
                    "spec": {"devices": {"requests": [share("gpu", Some(memory))]}}
                })),
            )
            .await
            .unwrap();
        create_pod(
            &client,
            &pod(name, json!({"name": "gpu", "resourceClaimName": name})),
        )
        .await;
        if name == "big" {
            eventually("big is bound", || async {
                node_of(&client, "big").await.is_some()
            })
            .await;
        }
    }
    eventually("late and huge are reported unschedulable", || async {
        event_notes(&client, "FailedScheduling")
            .await
            .iter()
            .filter(|n| n.contains("cannot allocate all claims"))
            .count()
            >= 2
    })
    .await;
    assert_eq!(node_of(&client, "late").await, None);
    assert_eq!(node_of(&client, "huge").await, None);
}

/// `All` with a tainted device (kube-scheduler 1.37.2, found by the differential test,
/// seed 2086): "All devices must be untainted or all of their taints must be tolerated"
/// (the DRA docs; upstream counts the tainted device in `allDevices`, then cannot
/// allocate it). n1's devices are all tainted but one, n2 has none: an untolerating `All`
/// is unschedulable (it never takes n1's untainted device alone); tolerating, it gets
/// n1's four.
#[tokio::test]
async fn all_fails_on_a_node_with_a_device_whose_taint_is_not_tolerated() {
    let (_server, client, _tasks) = control_plane((1, 37)).await;
    let taint = json!([{"key": "example.com/maintenance", "effect": "NoSchedule"}]);
    let devices: Vec<Value> = (0..4)
        .map(|i| {
            let mut d =
                json!({"name": format!("fake-{i}"), "attributes": {"model": {"string": "M1"}}});
            if i > 0 {
                d["taints"] = taint.clone();
            }
            d
        })
        .collect();
    republish(&client, "n1", devices).await;
    republish(&client, "n2", vec![]).await;
    let all = |name: &str, tolerate: bool| {
        let mut exactly = json!({"deviceClassName": CLASS, "allocationMode": "All"});
        if tolerate {
            exactly["tolerations"] =
                json!([{"key": "example.com/maintenance", "operator": "Exists"}]);
        }
        object(json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}
        }))
    };
    let claims = api(&client, "v1", "ResourceClaim", Some("default"));
    claims
        .create(&PostParams::default(), &all("strict", false))
        .await
        .unwrap();
    create_pod(
        &client,
        &pod(
            "strict",
            json!({"name": "gpu", "resourceClaimName": "strict"}),
        ),
    )
    .await;
    eventually("strict is reported unschedulable", || async {
        event_notes(&client, "FailedScheduling")
            .await
            .iter()
            .any(|n| n.contains("cannot allocate all claims"))
    })
    .await;
    assert_eq!(node_of(&client, "strict").await, None);
    let node = bound_with_claim(&client, "tolerant", all("tolerant", true)).await;
    assert_eq!(node, "n1");
    let claim = data(&claims.get("tolerant").await.unwrap());
    assert_eq!(results(&claim).len(), 4, "every device of n1: {claim}");
}
