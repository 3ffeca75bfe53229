//! Hostile input to the emulated apiserver: every refusal is a clear status naming the
//! field or the limit, given in bounded work, and what was stored before stays as it was.

use fake_dra_emulator::apiserver::{ApiServer, ApiServerOptions};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim};
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

async fn server(version: (u32, u32)) -> (ApiServer, kube::Client) {
    let server = ApiServer::start_with(ApiServerOptions {
        server_version: version,
        crds: fake_dra_api::crdgen::yaml_documents().expect("the driver's CRDs"),
        ..ApiServerOptions::default()
    })
    .await
    .expect("start the emulated apiserver");
    let client = server.client().expect("client");
    (server, client)
}

/// A raw request: the status code and the body (a `Status` for a refusal).
async fn raw(
    client: &kube::Client,
    method: &str,
    uri: &str,
    content_type: &str,
    body: String,
) -> (u16, Value) {
    use http_body_util::BodyExt;
    let request = http::Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", content_type)
        .body(kube::client::Body::from(body.into_bytes()))
        .unwrap();
    let response = client.send(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

fn message(body: &Value) -> &str {
    body["message"].as_str().unwrap_or_default()
}

/// `{"a": {"a": … "leaf" …}}`, `levels` objects deep.
fn nested(levels: usize) -> Value {
    let mut v = json!("leaf");
    for _ in 0..levels {
        v = json!({ "a": v });
    }
    v
}

async fn config_map(client: &kube::Client, name: &str) -> ConfigMap {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap(),
    )
    .await
    .unwrap()
}

/// D1: `add` a 1,000-character annotation, then `copy` the annotations into themselves:
/// each copy doubles them (14 of them made 16.6 MB of 2.3 KB). The copies stop at
/// kube-apiserver's 3 MiB `JSONPatchMaxCopyBytes`; the ConfigMap is as before.
#[tokio::test]
async fn json_patch_copies_stop_at_the_copy_limit_and_change_nothing() {
    let (server, client) = server((1, 30)).await;
    let before = config_map(&client, "amp").await;
    let mut ops = vec![
        json!({"op": "add", "path": "/metadata/annotations", "value": {"a": "x".repeat(1000)}}),
    ];
    for i in 0..14 {
        ops.push(json!({"op": "copy", "from": "/metadata/annotations", "path": format!("/metadata/annotations/c{i}")}));
    }
    let uri = format!("{}/api/v1/namespaces/default/configmaps/amp", server.url());
    let (code, body) = raw(
        &client,
        "PATCH",
        &uri,
        "application/json-patch+json",
        Value::Array(ops).to_string(),
    )
    .await;
    assert_eq!(code, 422, "{body}");
    assert!(
        message(&body).contains("the accumulated size increase of copy is")
            && message(&body).contains("exceeding the limit 3145728"),
        "{body}"
    );
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let after = cms.get("amp").await.unwrap();
    assert_eq!(
        after.metadata.resource_version,
        before.metadata.resource_version
    );
    assert_eq!(after.metadata.annotations, None);
}

/// D1: more than `maxJSONPatchOperations` (10,000) is 413 before any is applied.
#[tokio::test]
async fn json_patch_with_too_many_operations_is_413() {
    let (server, client) = server((1, 30)).await;
    config_map(&client, "ops").await;
    let ops: Vec<Value> = (0..10_001)
        .map(|_| json!({"op": "test", "path": "/data/k", "value": "v"}))
        .collect();
    let uri = format!("{}/api/v1/namespaces/default/configmaps/ops", server.url());
    let (code, body) = raw(
        &client,
        "PATCH",
        &uri,
        "application/json-patch+json",
        Value::Array(ops).to_string(),
    )
    .await;
    assert_eq!(code, 413, "{body}");
    assert_eq!(
        message(&body),
        "Request entity too large: The allowed maximum operations in a JSON patch is 10000, got 10001"
    );
}

/// D1 by other routes: a merge patch (or an update) that makes the object larger than
/// etcd's 1.5 MiB is refused with the size and the limit. A ConfigMap meets its own 1 MiB
/// limit of data first (ValidateConfigMap), by merge and strategic-merge patch alike.
#[tokio::test]
async fn objects_over_etcds_limit_are_refused_by_every_route() {
    let (server, client) = server((1, 30)).await;
    let faults = format!(
        "{}/apis/fake.resource.3-shake.com/v1alpha1/devicefaults",
        server.url()
    );
    let fault = |data: Value| {
        json!({"apiVersion": "fake.resource.3-shake.com/v1alpha1", "kind": "DeviceFault",
            "metadata": {"name": "big"}, "spec": {"deviceStatus": {"data": data}}})
    };
    let (code, created) = raw(
        &client,
        "POST",
        &faults,
        "application/json",
        fault(json!({"k": "v"})).to_string(),
    )
    .await;
    assert_eq!(code, 201, "{created}");
    let uri = format!("{faults}/big");
    let huge = "x".repeat(1600 * 1024);
    let big = json!({"spec": {"deviceStatus": {"data": {"big": huge}}}}).to_string();
    let (code, body) = raw(&client, "PATCH", &uri, "application/merge-patch+json", big).await;
    assert_eq!(code, 413, "{body}");
    assert!(message(&body).contains("1572864 bytes"), "{body}");
    let mut put = fault(json!({"big": huge}));
    put["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"].clone();
    let (code, body) = raw(&client, "PUT", &uri, "application/json", put.to_string()).await;
    assert_eq!(code, 413, "{body}");
    let (_, after) = raw(&client, "GET", &uri, "application/json", String::new()).await;
    assert_eq!(
        after["metadata"]["resourceVersion"],
        created["metadata"]["resourceVersion"]
    );

    let before = config_map(&client, "big").await;
    let cm_uri = format!("{}/api/v1/namespaces/default/configmaps/big", server.url());
    let big = json!({"data": {"big": "x".repeat(1600 * 1024)}}).to_string();
    for content_type in [
        "application/merge-patch+json",
        "application/strategic-merge-patch+json",
    ] {
        let (code, body) = raw(&client, "PATCH", &cm_uri, content_type, big.clone()).await;
        assert_eq!(code, 422, "{content_type}: {body}");
        assert!(
            message(&body).contains("Too long: may not be more than 1048576 bytes"),
            "{body}"
        );
    }
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let after = cms.get("big").await.unwrap();
    assert_eq!(
        after.metadata.resource_version,
        before.metadata.resource_version
    );
}

/// D6: a claim whose opaque parameters nest 119 levels was stored, and then every
/// ResourceClaim list failed to decode (serde_json stops at 128 levels). Refused at the
/// door, naming the field; the list still decodes. The same through a DeviceClass's config
/// and through a JSON patch that copies a deep value into a deep place.
#[tokio::test]
async fn objects_nested_too_deep_are_refused_and_lists_still_decode() {
    let (server, client) = server((1, 34)).await;
    let claim = |name: &str, parameters: Value| {
        json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {"devices": {
                "requests": [{"name": "r", "exactly": {"deviceClassName": "c", "allocationMode": "ExactCount", "count": 1}}],
                "config": [{"opaque": {"driver": "d.example.com", "parameters": parameters}}],
            }},
        })
    };
    let uri = format!(
        "{}/apis/resource.k8s.io/v1/namespaces/default/resourceclaims",
        server.url()
    );
    let (code, body) = raw(
        &client,
        "POST",
        &uri,
        "application/json",
        claim("deep", nested(119)).to_string(),
    )
    .await;
    assert_eq!(code, 400, "{body}");
    assert!(
        message(&body).contains("spec.devices.config[0].opaque.parameters")
            && message(&body).contains("exceeded max depth of 100"),
        "{body}"
    );
    // A JSON patch copying a 60-level value 60 levels down builds 120 levels.
    let (code, body) = raw(
        &client,
        "POST",
        &uri,
        "application/json",
        claim("shallow", nested(60)).to_string(),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let mut deep_path = "/spec/devices/config/0/opaque/parameters".to_string();
    for _ in 0..55 {
        deep_path.push_str("/a");
    }
    let ops = json!([{"op": "copy", "from": "/spec/devices/config/0/opaque/parameters", "path": format!("{deep_path}/b")}]);
    let (code, body) = raw(
        &client,
        "PATCH",
        &format!("{uri}/shallow"),
        "application/json-patch+json",
        ops.to_string(),
    )
    .await;
    assert_eq!(code, 422, "{body}");
    assert!(
        message(&body).contains("exceeded max depth of 100"),
        "{body}"
    );

    let classes = format!("{}/apis/resource.k8s.io/v1/deviceclasses", server.url());
    let class = json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "c"},
        "spec": {"config": [{"opaque": {"driver": "d.example.com", "parameters": nested(119)}}]}});
    let (code, body) = raw(
        &client,
        "POST",
        &classes,
        "application/json",
        class.to_string(),
    )
    .await;
    assert_eq!(code, 400, "{body}");

    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), "default");
    let list = claims.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    let dcs: Api<DeviceClass> = Api::all(client);
    assert!(
        dcs.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

/// D7: the same for a custom resource whose schema keeps unknown fields (a DeviceFault's
/// `deviceStatus.data`, 123 levels), by create and by merge patch.
#[tokio::test]
async fn custom_resources_nested_too_deep_are_refused() {
    let (server, client) = server((1, 34)).await;
    let uri = format!(
        "{}/apis/fake.resource.3-shake.com/v1alpha1/devicefaults",
        server.url()
    );
    let fault = |name: &str, data: Value| {
        json!({"apiVersion": "fake.resource.3-shake.com/v1alpha1", "kind": "DeviceFault",
            "metadata": {"name": name}, "spec": {"deviceStatus": {"data": data}}})
    };
    let (code, body) = raw(
        &client,
        "POST",
        &uri,
        "application/json",
        fault("deep", nested(123)).to_string(),
    )
    .await;
    assert_eq!(code, 400, "{body}");
    assert!(
        message(&body).contains("spec.deviceStatus.data")
            && message(&body).contains("exceeded max depth of 100"),
        "{body}"
    );
    let (code, body) = raw(
        &client,
        "POST",
        &uri,
        "application/json",
        fault("ok", nested(3)).to_string(),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let patch = json!({"spec": {"deviceStatus": {"data": nested(110)}}});
    let (code, body) = raw(
        &client,
        "PATCH",
        &format!("{uri}/ok"),
        "application/merge-patch+json",
        patch.to_string(),
    )
    .await;
    assert_eq!(code, 400, "{body}");
    let faults: Api<fake_dra_api::fault::DeviceFault> = Api::all(client);
    let list = faults.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(
        list.items[0]
            .spec
            .device_status
            .as_ref()
            .and_then(|s| s.data.clone()),
        Some(nested(3))
    );
}

/// D5: a merge patch that makes a label a map was stored; then every typed PodList failed
/// to decode and no new pod was scheduled. Every route that writes a Pod is now decoded
/// into the type first: patches (merge, strategic, JSON, apply) answer 422 on `patch`,
/// create and update 400, each naming the field; the pod is unchanged and lists decode.
#[tokio::test]
async fn wrongly_typed_fields_are_refused_by_every_route() {
    let (server, client) = server((1, 34)).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p", "labels": {"app": "a"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }))
    .unwrap();
    let before = pods.create(&PostParams::default(), &pod).await.unwrap();
    let uri = format!("{}/api/v1/namespaces/default/pods", server.url());
    let bad_labels = json!({"metadata": {"labels": {"x": {"y": "z"}}}}).to_string();
    for content_type in [
        "application/merge-patch+json",
        "application/strategic-merge-patch+json",
    ] {
        let (code, body) = raw(
            &client,
            "PATCH",
            &format!("{uri}/p"),
            content_type,
            bad_labels.clone(),
        )
        .await;
        assert_eq!(code, 422, "{content_type}: {body}");
        assert_eq!(body["details"]["causes"][0]["field"], "patch", "{body}");
        assert!(
            message(&body).contains("metadata.labels.x: invalid type: map"),
            "{body}"
        );
    }
    let json_patch =
        json!([{"op": "add", "path": "/spec/containers/0/image", "value": 7}]).to_string();
    let (code, body) = raw(
        &client,
        "PATCH",
        &format!("{uri}/p"),
        "application/json-patch+json",
        json_patch,
    )
    .await;
    assert_eq!(code, 422, "{body}");
    assert!(
        message(&body).contains("spec.containers[0].image"),
        "{body}"
    );
    let apply = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  labels:\n    x:\n      y: z\n";
    let (code, body) = raw(
        &client,
        "PATCH",
        &format!("{uri}/p?fieldManager=m"),
        "application/apply-patch+yaml",
        apply.to_string(),
    )
    .await;
    assert_eq!(code, 422, "{body}");
    let mut put = serde_json::to_value(&before).unwrap();
    put["metadata"]["labels"] = json!({"x": ["y"]});
    let (code, body) = raw(
        &client,
        "PUT",
        &format!("{uri}/p"),
        "application/json",
        put.to_string(),
    )
    .await;
    assert_eq!(code, 400, "{body}");
    assert_eq!(
        message(&body),
        "Pod in version \"v1\" cannot be handled as a Pod: metadata.labels.x: invalid type: sequence, expected a string"
    );
    let created = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "q"},
        "spec": {"containers": [{"name": "c", "image": "busybox", "ports": [{"containerPort": "80"}]}]}});
    let (code, body) = raw(
        &client,
        "POST",
        &uri,
        "application/json",
        created.to_string(),
    )
    .await;
    assert_eq!(code, 400, "{body}");
    assert!(
        message(&body).contains("spec.containers[0].ports[0].containerPort"),
        "{body}"
    );

    let list = pods.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(
        list.items[0].metadata.resource_version,
        before.metadata.resource_version
    );
    assert_eq!(list.items[0].metadata.labels, before.metadata.labels);

    // A custom resource's metadata is an ObjectMeta too.
    let faults = format!(
        "{}/apis/fake.resource.3-shake.com/v1alpha1/devicefaults",
        server.url()
    );
    let fault = json!({"apiVersion": "fake.resource.3-shake.com/v1alpha1", "kind": "DeviceFault",
        "metadata": {"name": "f", "labels": {"x": {"y": "z"}}}, "spec": {}});
    let (code, body) = raw(
        &client,
        "POST",
        &faults,
        "application/json",
        fault.to_string(),
    )
    .await;
    assert_eq!(code, 400, "{body}");
    assert!(message(&body).contains("metadata.labels.x"), "{body}");
}

/// D2, D3, D4 at the door: a DeviceClass or claim selector longer than 10 KiB, nested
/// deeper than the parser allows, or estimated over `CELSelectorExpressionMaxCost` is
/// refused with 422 naming the field; 12 nested parentheses (which killed the sim) are
/// an ordinary selector.
#[tokio::test]
async fn cel_selectors_are_held_to_length_nesting_and_cost() {
    let (server, client) = server((1, 34)).await;
    let classes = format!("{}/apis/resource.k8s.io/v1/deviceclasses", server.url());
    let class = |name: &str, expression: &str| {
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": expression}}]}})
        .to_string()
    };
    let parens = |n: usize| format!("{}true{}", "(".repeat(n), ")".repeat(n));
    let (code, body) = raw(
        &client,
        "POST",
        &classes,
        "application/json",
        class("twelve", &parens(12)),
    )
    .await;
    assert_eq!(code, 201, "{body}");

    let (code, body) = raw(
        &client,
        "POST",
        &classes,
        "application/json",
        class("deep", &parens(200)),
    )
    .await;
    assert_eq!(code, 422, "{body}");
    assert!(
        message(&body).contains("spec.selectors[0].cel.expression")
            && message(&body).contains("expression recursion limit exceeded: 96"),
        "{body}"
    );

    let long = format!("true{}", " && true".repeat(1300));
    let (code, body) = raw(
        &client,
        "POST",
        &classes,
        "application/json",
        class("long", &long),
    )
    .await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body["details"]["causes"][0]["reason"], "FieldValueTooLong",
        "{body}"
    );
    assert!(
        message(&body).contains("Too long: may not be more than 10240 bytes"),
        "{body}"
    );

    let list = format!(
        "[{}]",
        (0..1000)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    let costly = format!("{list}.all(x, {list}.all(y, x + y >= 0))");
    let (code, body) = raw(
        &client,
        "POST",
        &classes,
        "application/json",
        class("costly", &costly),
    )
    .await;
    assert_eq!(code, 422, "{body}");
    assert!(
        message(&body).contains("Forbidden: too complex, exceeds cost limit"),
        "{body}"
    );

    // The same through a claim's request.
    let claims = format!(
        "{}/apis/resource.k8s.io/v1/namespaces/default/resourceclaims",
        server.url()
    );
    let claim = json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "twelve",
            "allocationMode": "ExactCount", "count": 1, "selectors": [{"cel": {"expression": costly}}]}}]}}});
    let (code, body) = raw(
        &client,
        "POST",
        &claims,
        "application/json",
        claim.to_string(),
    )
    .await;
    assert_eq!(code, 422, "{body}");
    assert!(
        message(&body).contains("spec.devices.requests[0].exactly.selectors[0].cel.expression"),
        "{body}"
    );
    let dcs: Api<DeviceClass> = Api::all(client);
    let names: Vec<String> = dcs
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    assert_eq!(names, ["twelve"]);
}

/// D10: the garbage collector walked every object after every write, so applying N
/// objects took O(N²) (1,000 ConfigMaps 27 s, 2,000 77 s). Now a write without owner
/// references costs it nothing and one with them only a look at that object; a deletion
/// still makes it walk everything, and still collects the dependents.
#[test]
fn garbage_collection_work_grows_linearly_with_writes() {
    use fake_dra_emulator::apiserver::{ResourceKey, Store, Target, WriteOptions};
    let mut store = Store::for_version((1, 30)).unwrap();
    let target = |name: Option<&str>| Target {
        key: ResourceKey {
            group: String::new(),
            plural: "configmaps".into(),
        },
        version: "v1".into(),
        namespace: Some("default".into()),
        name: name.map(str::to_string),
        subresource: None,
    };
    let n = 2_000;
    for i in 0..n {
        let cm = json!({"metadata": {"name": format!("cm{i}")}, "data": {"k": "v"}});
        store
            .create(&target(None), cm, &WriteOptions::default())
            .unwrap();
        store.collect_garbage();
    }
    assert_eq!(store.garbage_collector_visits(), 0);
    let owner = store
        .create(
            &target(None),
            json!({"metadata": {"name": "owner"}}),
            &WriteOptions::default(),
        )
        .unwrap();
    let owner_ref = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
        "uid": owner["metadata"]["uid"]}]);
    for i in 0..n {
        let cm = json!({"metadata": {"name": format!("owned{i}"), "ownerReferences": owner_ref}});
        store
            .create(&target(None), cm, &WriteOptions::default())
            .unwrap();
        store.collect_garbage();
    }
    assert_eq!(store.garbage_collector_visits(), n as u64);
    store
        .delete(&target(Some("owner")), &Default::default())
        .unwrap();
    store.collect_garbage();
    store.collect_garbage();
    let left = store
        .list(&target(None), &Default::default(), None, None)
        .unwrap();
    assert_eq!(left["items"].as_array().map(Vec::len), Some(n));
}

/// D17: `timeoutSeconds` past int64 answered an empty 200 and panicked the watch's task
/// (1e19 s added to the clock). It is a 400 with strconv's words, as kube-apiserver's
/// parameter codec answers; `limit` too. The largest int64 is a watch without deadline,
/// and the same number as `gracePeriodSeconds` a deletion far in the future, not a panic.
#[tokio::test]
async fn int64_query_parameters_past_the_range_are_400_and_huge_ones_do_not_panic() {
    let (server, client) = server((1, 34)).await;
    let pods = format!("{}/api/v1/namespaces/default/pods", server.url());
    for (query, text) in [
        ("watch=true&timeoutSeconds=", "10000000000000000000"),
        ("limit=", "10000000000000000000"),
        ("watch=true&timeoutSeconds=", "soon"),
    ] {
        let (code, body) = raw(
            &client,
            "GET",
            &format!("{pods}?{query}{text}"),
            "application/json",
            String::new(),
        )
        .await;
        assert_eq!(code, 400, "{query}{text}: {body}");
        let why = if text == "soon" {
            "invalid syntax"
        } else {
            "value out of range"
        };
        assert_eq!(
            message(&body),
            format!("strconv.ParseInt: parsing \"{text}\": {why}")
        );
    }
    // The largest int64: a watch that stays open, and sees what happens next.
    let request = client
        .request_events::<Pod>(
            http::Request::get(format!("{pods}?watch=true&timeoutSeconds={}", i64::MAX))
                .body(Vec::new())
                .unwrap(),
        )
        .await
        .unwrap();
    let mut request = Box::pin(request);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "spec": {"nodeName": "somewhere", "containers": [{"name": "c", "image": "busybox"}]},
    }))
    .unwrap();
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &pod).await.unwrap();
    use futures::StreamExt;
    let event = tokio::time::timeout(std::time::Duration::from_secs(30), request.next())
        .await
        .expect("a watch event (hang guard)");
    assert!(
        matches!(event, Some(Ok(kube::api::WatchEvent::Added(_)))),
        "{event:?}"
    );
    let (code, body) = raw(
        &client,
        "DELETE",
        &format!("{pods}/p?gracePeriodSeconds={}", i64::MAX),
        "application/json",
        String::new(),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert!(
        body["metadata"]["deletionTimestamp"]
            .as_str()
            .is_some_and(|t| t.starts_with("9999-")),
        "{body}"
    );
    assert!(api.get("p").await.is_ok());
}

/// D30: a 200-character fieldManager was accepted (and recorded in managedFields).
/// kube-apiserver's ValidateFieldManager allows 128 bytes of printable characters; the
/// create, update and patch handlers refuse their options with 422.
#[tokio::test]
async fn field_managers_past_128_bytes_are_refused_by_every_verb() {
    let (server, client) = server((1, 34)).await;
    let before = config_map(&client, "fm").await;
    let cms = format!("{}/api/v1/namespaces/default/configmaps", server.url());
    let long = "m".repeat(200);
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fm2"}});
    let mut put = serde_json::to_value(&before).unwrap();
    put["data"] = json!({"k": "changed"});
    for (method, uri, content_type, body, kind) in [
        (
            "POST",
            cms.clone(),
            "application/json",
            body.to_string(),
            "CreateOptions",
        ),
        (
            "PUT",
            format!("{cms}/fm"),
            "application/json",
            put.to_string(),
            "UpdateOptions",
        ),
        (
            "PATCH",
            format!("{cms}/fm"),
            "application/merge-patch+json",
            json!({"data": {"k": "x"}}).to_string(),
            "PatchOptions",
        ),
        (
            "PATCH",
            format!("{cms}/fm"),
            "application/apply-patch+yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: fm}\ndata: {k: y}\n".into(),
            "PatchOptions",
        ),
    ] {
        let (code, status) = raw(
            &client,
            method,
            &format!("{uri}?fieldManager={long}"),
            content_type,
            body,
        )
        .await;
        assert_eq!(code, 422, "{method} {content_type}: {status}");
        assert_eq!(
            message(&status),
            format!(
                "{kind}.meta.k8s.io \"\" is invalid: fieldManager: Too long: may not be more than 128 bytes"
            ),
        );
        assert_eq!(
            status["details"]["causes"][0]["reason"],
            "FieldValueTooLong"
        );
    }
    let (code, status) = raw(
        &client,
        "PATCH",
        &format!("{cms}/fm?fieldManager=a%07b"),
        "application/merge-patch+json",
        json!({"data": {"k": "x"}}).to_string(),
    )
    .await;
    assert_eq!(code, 422, "{status}");
    assert!(
        message(&status).contains("invalid character U+0007 (at position 1)"),
        "{status}"
    );
    let exactly = "m".repeat(128);
    let (code, status) = raw(
        &client,
        "PATCH",
        &format!("{cms}/fm?fieldManager={exactly}"),
        "application/merge-patch+json",
        json!({"data": {"k": "ok"}}).to_string(),
    )
    .await;
    assert_eq!(code, 200, "{status}");
    let cm: Api<ConfigMap> = Api::namespaced(client, "default");
    assert!(cm.get("fm2").await.is_err());
}

/// D29: a merge patch `[1,2]` replaced the whole object and came back as 409 "the object
/// has been modified". kube-apiserver decodes a merge patch into a map first: 400 with Go's
/// words (422 on `patch` under fieldValidation=Ignore); a strategic one 400 too.
#[tokio::test]
async fn merge_patches_that_are_no_objects_are_refused_as_upstream() {
    let (server, client) = server((1, 34)).await;
    let before = config_map(&client, "mp").await;
    let uri = format!("{}/api/v1/namespaces/default/configmaps/mp", server.url());
    for (content_type, query, body, code, want) in [
        (
            "application/merge-patch+json",
            "",
            "[1,2]",
            400,
            "error decoding patch: json: cannot unmarshal array into Go value of type map[string]interface {}",
        ),
        (
            "application/merge-patch+json",
            "?fieldValidation=Strict",
            "\"x\"",
            400,
            "error decoding patch: json: cannot unmarshal string into Go value of type map[string]interface {}",
        ),
        (
            "application/merge-patch+json",
            "?fieldValidation=Ignore",
            "[1,2]",
            422,
            " \"\" is invalid: patch: Invalid value: \"[1,2]\": json: cannot unmarshal array into Go value of type map[string]interface {}",
        ),
        (
            "application/merge-patch+json",
            "",
            "null",
            400,
            "Invalid JSON Patch",
        ),
        (
            "application/strategic-merge-patch+json",
            "",
            "[1,2]",
            400,
            "json: cannot unmarshal array into Go value of type map[string]interface {}",
        ),
    ] {
        let (got, status) = raw(
            &client,
            "PATCH",
            &format!("{uri}{query}"),
            content_type,
            body.into(),
        )
        .await;
        assert_eq!(got, code, "{content_type}{query} {body}: {status}");
        assert_eq!(message(&status), want);
    }
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let after = cms.get("mp").await.unwrap();
    assert_eq!(
        after.metadata.resource_version,
        before.metadata.resource_version
    );
    assert_eq!(after.data, before.data);
}

/// D19: built-in kinds are decoded into their types before they are stored (404b7ba), so
/// a ConfigMap's `data: {a: 5}` and a Deployment's `replicas: "many"` are refused naming
/// the field, by create, update and patch alike, and an object over 1 MiB of data is
/// refused too; nothing is stored.
#[tokio::test]
async fn built_in_kinds_are_type_checked_by_every_route() {
    let (server, client) = server((1, 34)).await;
    let cms = format!("{}/api/v1/namespaces/default/configmaps", server.url());
    let deployments = format!(
        "{}/apis/apps/v1/namespaces/default/deployments",
        server.url()
    );
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "typed"}, "data": {"a": 5}});
    let (code, body) = raw(&client, "POST", &cms, "application/json", cm.to_string()).await;
    assert_eq!(code, 400, "{body}");
    assert_eq!(
        message(&body),
        "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: data.a: invalid type: integer `5`, expected a string"
    );
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"replicas": "many", "selector": {"matchLabels": {"a": "b"}},
            "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}});
    let (code, body) = raw(
        &client,
        "POST",
        &deployments,
        "application/json",
        deployment.to_string(),
    )
    .await;
    assert_eq!(code, 400, "{body}");
    assert!(
        message(&body).contains("spec.replicas: invalid type: string \"many\", expected i32"),
        "{body}"
    );
    // Patches too.
    config_map(&client, "ok").await;
    let (code, body) = raw(
        &client,
        "PATCH",
        &format!("{cms}/ok"),
        "application/merge-patch+json",
        json!({"data": {"k": 5}}).to_string(),
    )
    .await;
    assert_eq!(code, 422, "{body}");
    assert!(
        message(&body).contains("data.k: invalid type: integer `5`"),
        "{body}"
    );
    // ConfigMap validation: at most 1 MiB of data (MaxConfigMapSize... upstream 1048576 bytes).
    let big = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"}, "data": {"a": "x".repeat(1024 * 1024 + 1)}});
    let (code, body) = raw(&client, "POST", &cms, "application/json", big.to_string()).await;
    assert_eq!(code, 422, "{body}");
    assert!(
        message(&body).contains("Too long: may not be more than 1048576 bytes"),
        "{body}"
    );
    let listed: Api<ConfigMap> = Api::namespaced(client, "default");
    let names: Vec<String> = listed
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    assert_eq!(names, ["ok"]);
}

/// D20: kubectl's `create namespace|configmap|deployment` send protobuf, which got a 400
/// "couldn't decode the request body as JSON". kube-apiserver reads protobuf and answers
/// a type it does not read with 415; the emulator reads JSON only and answers 415 naming
/// the type and the kubectl command that sends JSON.
#[tokio::test]
async fn bodies_in_another_media_type_are_415_naming_it() {
    let (server, client) = server((1, 34)).await;
    let namespaces = format!("{}/api/v1/namespaces", server.url());
    // A protobuf Namespace as kubectl sends it: "k8s\0" and a runtime.Unknown.
    let mut protobuf = b"k8s\0\n\x0f\n\x02v1\x12\tNamespace\x12\x08\n\x06\n\x04pbns".to_vec();
    protobuf.extend_from_slice(b"\x1a\x00\"\x00");
    let request = http::Request::post(&namespaces)
        .header("content-type", "application/vnd.kubernetes.protobuf")
        .body(kube::client::Body::from(protobuf))
        .unwrap();
    let response = client.send(request).await.unwrap();
    assert_eq!(response.status().as_u16(), 415);
    use http_body_util::BodyExt;
    let body: Value =
        serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(body["reason"], "UnsupportedMediaType");
    assert!(
        message(&body).starts_with("the body of the request was in an unknown format - accepted media types include: application/json (emulator: application/vnd.kubernetes.protobuf bodies are not decoded; kubectl's create namespace/configmap/secret/deployment/job/service send protobuf: run them as 'kubectl create ... --dry-run=client -o yaml | kubectl apply -f -'"),
        "{body}"
    );
    let cms = format!("{}/api/v1/namespaces/default/configmaps", server.url());
    let (code, body) = raw(
        &client,
        "POST",
        &cms,
        "application/yaml",
        "kind: ConfigMap\n".into(),
    )
    .await;
    assert_eq!(code, 415, "{body}");
    assert!(
        message(&body).contains("(emulator: application/yaml bodies are not decoded)"),
        "{body}"
    );
    // JSON with a charset is JSON.
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
    let (code, body) = raw(
        &client,
        "POST",
        &cms,
        "application/json; charset=utf-8",
        cm.to_string(),
    )
    .await;
    assert_eq!(code, 201, "{body}");
}

/// D34: a CRD's printer columns with JSONPaths `{{{bad` and `$..*` were accepted (and then
/// printed nothing). apiextensions' ValidateCustomResourceColumnDefinition wants a simple
/// path starting with `.`, a known type and format: 422 naming each column, nothing stored.
#[tokio::test]
async fn crd_printer_columns_are_validated_as_upstream() {
    let (server, client) = server((1, 34)).await;
    let crds = format!(
        "{}/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        server.url()
    );
    let crd = |columns: Value| {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                    "additionalPrinterColumns": columns}]}})
        .to_string()
    };
    let bad = json!([
        {"name": "A", "type": "string", "jsonPath": "{{{bad"},
        {"name": "B", "type": "string", "jsonPath": "$..*"},
        {"name": "C", "type": "text", "format": "huge", "jsonPath": ".spec.c"},
    ]);
    let (code, body) = raw(&client, "POST", &crds, "application/json", crd(bad)).await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        message(&body),
        "CustomResourceDefinition.apiextensions.k8s.io \"widgets.example.com\" is invalid: [\
spec.versions[0].additionalPrinterColumns[0].JSONPath: Invalid value: \"{{{bad\": must be a simple json path starting with ., \
spec.versions[0].additionalPrinterColumns[1].JSONPath: Invalid value: \"$..*\": must be a simple json path starting with ., \
spec.versions[0].additionalPrinterColumns[2].type: Invalid value: \"text\": must be one of boolean,date,integer,number,string, \
spec.versions[0].additionalPrinterColumns[2].format: Invalid value: \"huge\": must be one of byte,date,date-time,double,float,int32,int64,password]"
    );
    let good = json!([{"name": "C", "type": "string", "jsonPath": ".spec.c"}]);
    let (code, body) = raw(&client, "POST", &crds, "application/json", crd(good)).await;
    assert_eq!(code, 201, "{body}");
}

/// Found by the fuzzer (`fuzz::api_queries`, seed 0): a list from a resourceVersion the
/// store has not reached was a 504 `InternalError`, which kube's
/// client retries 15 times as a server error. kube-apiserver's watch cache answers it with
/// a `Timeout` that names the cause and asks for a retry after 1 s.
#[tokio::test]
async fn reads_from_a_future_resource_version_are_a_timeout_naming_the_cause() {
    let (_server, client) = server((1, 34)).await;
    config_map(&client, "now").await;
    let uri = "/api/v1/namespaces/default/configmaps?resourceVersion=9107099807151&resourceVersionMatch=NotOlderThan";
    let (status, body) = raw(&client, "GET", uri, "application/json", String::new()).await;
    assert_eq!(status, 504, "{body}");
    assert_eq!(body["reason"], "Timeout", "{body}");
    assert!(
        message(&body).starts_with("Timeout: Too large resource version: 9107099807151, current: "),
        "{body}"
    );
    assert_eq!(
        body["details"]["causes"][0]["reason"], "ResourceVersionTooLarge",
        "{body}"
    );
    assert_eq!(body["details"]["retryAfterSeconds"], 1, "{body}");
}
