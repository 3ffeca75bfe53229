//! Server-side apply and the request-level errors around it, as kube-apiserver answers
//! them, driven over real HTTP (kube-rs, and raw requests where the exact body matters).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use fake_dra_api::fault::DeviceFault;
use fake_dra_emulator::apiserver::{ApiServer, ApiServerOptions};
use http_body_util::BodyExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

async fn server() -> (ApiServer, kube::Client) {
    let server = ApiServer::start_with(ApiServerOptions {
        crds: fake_dra_api::crdgen::yaml_documents().expect("the driver's CRDs"),
        ..ApiServerOptions::default()
    })
    .await
    .expect("start the emulated apiserver");
    let client = server.client().expect("client");
    (server, client)
}

/// One raw request: the status code and the body as JSON (`Null` if it is none).
async fn send(
    client: &kube::Client,
    method: http::Method,
    uri: &str,
    content_type: &str,
    body: Vec<u8>,
) -> (u16, Value) {
    let request = http::Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", content_type)
        .body(kube::client::Body::from(body))
        .unwrap();
    let response = client.send(request).await.expect("an HTTP answer");
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

const FAULTS: &str = "/apis/fake.resource.3-shake.com/v1alpha1/devicefaults";

async fn create_fault(client: &kube::Client, name: &str) -> Api<DeviceFault> {
    let faults: Api<DeviceFault> = Api::all(client.clone());
    let fault: DeviceFault = serde_json::from_value(json!({
        "apiVersion": "fake.resource.3-shake.com/v1alpha1", "kind": "DeviceFault",
        "metadata": {"name": name},
        "spec": {"health": {"status": "Unhealthy"}}
    }))
    .unwrap();
    faults.create(&PostParams::default(), &fault).await.unwrap();
    faults
}

/// What each kubelet plugin applies: its own node's entry of `status.nodes`.
fn node_entries(name: &str, nodes: &[(&str, i64)]) -> Value {
    let entries: Vec<Value> = nodes
        .iter()
        .map(|(node, generation)| json!({"node": node, "observedGeneration": generation}))
        .collect();
    json!({
        "apiVersion": "fake.resource.3-shake.com/v1alpha1", "kind": "DeviceFault",
        "metadata": {"name": name},
        "status": {"nodes": entries}
    })
}

async fn apply_status(faults: &Api<DeviceFault>, manager: &str, body: &Value) -> Vec<String> {
    let applied = faults
        .patch_status(
            "f",
            &PatchParams::apply(manager).force(),
            &Patch::Apply(body),
        )
        .await
        .unwrap();
    let nodes = applied.status.unwrap_or_default().nodes;
    nodes
        .iter()
        .map(|n| format!("{}@{}", n.node, n.observed_generation))
        .collect()
}

/// `status.nodes` is `x-kubernetes-list-type: map` keyed by `node`: kube-apiserver merges
/// each manager's entries by key and removes only the entries a manager stops applying.
#[tokio::test]
async fn two_appliers_keep_their_own_entries_of_a_map_list() {
    let (_server, client) = server().await;
    let faults = create_fault(&client, "f").await;
    let a = "fake-dra-kubelet-plugin-node-a";
    let b = "fake-dra-kubelet-plugin-node-b";
    assert_eq!(
        apply_status(&faults, a, &node_entries("f", &[("node-a", 1)])).await,
        ["node-a@1"]
    );
    assert_eq!(
        apply_status(&faults, b, &node_entries("f", &[("node-b", 1)])).await,
        ["node-a@1", "node-b@1"],
        "b's entry joins a's"
    );
    assert_eq!(
        apply_status(&faults, b, &node_entries("f", &[("node-b", 2)])).await,
        ["node-a@1", "node-b@2"],
        "b changes its own entry only"
    );
    assert_eq!(
        apply_status(&faults, a, &node_entries("f", &[])).await,
        ["node-b@2"],
        "a applying no entry removes a's entry, not b's"
    );
    let stored = faults.get("f").await.unwrap();
    assert_eq!(stored.status.unwrap().nodes.len(), 1);
    assert_eq!(
        stored.spec.health.map(|h| format!("{:?}", h.status)),
        Some("Unhealthy".to_string()),
        "a status apply leaves the spec alone"
    );

    // Without force, writing another manager's entry conflicts, naming the entry by key.
    let err = faults
        .patch_status(
            "f",
            &PatchParams::apply(a),
            &Patch::Apply(&node_entries("f", &[("node-b", 3)])),
        )
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("expected an API error, got {err}")
    };
    assert_eq!(status.code, 409, "{}", status.message);
    assert!(
        status.message.contains(&format!(
            "conflict with \"{b}\": .status.nodes[node=\"node-b\"].observedGeneration"
        )),
        "{}",
        status.message
    );
}

/// An applied `map` list with two entries of one key (or a `set` list with a value twice)
/// is refused as kube-apiserver refuses it: structured-merge-diff cannot type it, and the
/// error reaches the handler as no API status, so the answer is 500 with no reason, worded
/// "failed to create typed patch object (namespace/name; gvk): <path>: duplicate entries
/// for key <key>". Nothing is written.
#[tokio::test]
async fn an_apply_with_duplicate_entries_of_a_map_list_is_refused() {
    let (server, client) = server().await;
    let faults = create_fault(&client, "f").await;
    let url = format!(
        "{}{FAULTS}/f/status?fieldManager=m&force=true",
        server.url()
    );
    let twice = node_entries("f", &[("x", 1), ("y", 1), ("x", 2)]);
    let (code, status) = send(
        &client,
        http::Method::PATCH,
        &url,
        "application/apply-patch+yaml",
        twice.to_string().into_bytes(),
    )
    .await;
    assert_eq!(code, 500, "{status}");
    assert_eq!(
        status,
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "failed to create typed patch object (/f; fake.resource.3-shake.com/v1alpha1, Kind=DeviceFault): .status.nodes: duplicate entries for key [node=\"x\"]",
            "code": 500
        })
    );
    assert_eq!(
        faults.get("f").await.unwrap().status,
        None,
        "nothing written"
    );
    // Two repeated keys: each named, as SMD lists several errors.
    let (code, status) = send(
        &client,
        http::Method::PATCH,
        &url,
        "application/apply-patch+yaml",
        node_entries("f", &[("x", 1), ("x", 2), ("y", 1), ("y", 1)])
            .to_string()
            .into_bytes(),
    )
    .await;
    assert_eq!(code, 500, "{status}");
    assert!(
        status["message"].as_str().unwrap().ends_with(
            ": errors:\n  .status.nodes: duplicate entries for key [node=\"x\"]\n  .status.nodes: duplicate entries for key [node=\"y\"]"
        ),
        "{status}"
    );
    // A `set` list (metadata.finalizers) likewise.
    let finalizers = json!({
        "apiVersion": "fake.resource.3-shake.com/v1alpha1", "kind": "DeviceFault",
        "metadata": {"name": "f", "finalizers": ["a/b", "a/b"]},
    });
    let (code, status) = send(
        &client,
        http::Method::PATCH,
        &format!("{}{FAULTS}/f?fieldManager=m&force=true", server.url()),
        "application/apply-patch+yaml",
        finalizers.to_string().into_bytes(),
    )
    .await;
    assert_eq!(code, 500, "{status}");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .ends_with(": .metadata.finalizers: duplicate entries for key [=\"a/b\"]"),
        "{status}"
    );
    // Distinct entries apply.
    let applied = apply_status(&faults, "m", &node_entries("f", &[("x", 1), ("y", 1)])).await;
    assert_eq!(applied, ["x@1", "y@1"]);
}

/// An apply body nested deeper than fake_dra_ops::yaml::MAX_DEPTH is refused before it is
/// parsed (libyaml's time grows with the square of the depth), as a body that does not
/// decode: 400.
#[tokio::test]
async fn an_apply_body_nested_too_deep_is_a_bad_request() {
    let (server, client) = server().await;
    let url = format!(
        "{}/api/v1/namespaces/default/configmaps/deep?fieldManager=m",
        server.url()
    );
    let body = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: deep}}\ndata: {}x{}\n",
        "{a: ".repeat(200),
        "}".repeat(200)
    );
    let (code, status) = send(
        &client,
        http::Method::PATCH,
        &url,
        "application/apply-patch+yaml",
        body.into_bytes(),
    )
    .await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(
        status["message"],
        "error decoding YAML: YAML nested deeper than 64 levels at line 4: at most 64 mappings and sequences may nest"
    );
    assert_eq!(status["reason"], "BadRequest");
}

/// kube-apiserver's status storage never creates (forceAllowCreate=false for
/// subresources): an apply to a missing object's `/status` is 404 NotFound.
#[tokio::test]
async fn status_apply_to_a_missing_object_is_not_found() {
    let (server, client) = server().await;
    let url = format!(
        "{}{FAULTS}/missing/status?fieldManager=plugin",
        server.url()
    );
    let body = serde_yaml_ng::to_string(&node_entries("missing", &[("node-a", 1)])).unwrap();
    let (code, status) = send(
        &client,
        http::Method::PATCH,
        &url,
        "application/apply-patch+yaml",
        body.into_bytes(),
    )
    .await;
    assert_eq!(code, 404, "{status}");
    assert_eq!(
        status,
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "devicefaults.fake.resource.3-shake.com \"missing\" not found",
            "reason": "NotFound",
            "details": {"name": "missing", "group": "fake.resource.3-shake.com", "kind": "devicefaults"},
            "code": 404
        })
    );
    let faults: Api<DeviceFault> = Api::all(client.clone());
    assert!(
        faults.get_opt("missing").await.unwrap().is_none(),
        "nothing was created"
    );
}

/// `/status` serves get, update and patch only; other verbs are 405 with apimachinery's
/// generic body, and never reach the object.
#[tokio::test]
async fn other_verbs_on_status_are_method_not_allowed() {
    let (server, client) = server().await;
    let faults = create_fault(&client, "f").await;
    let url = format!("{}{FAULTS}/f/status", server.url());
    let expected = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "the server does not allow this method on the requested resource",
        "reason": "MethodNotAllowed", "details": {}, "code": 405
    });
    for method in [http::Method::DELETE, http::Method::POST] {
        let body = node_entries("f", &[]).to_string().into_bytes();
        let (code, status) = send(&client, method.clone(), &url, "application/json", body).await;
        assert_eq!((code, &status), (405, &expected), "{method}");
    }
    assert!(
        faults.get_opt("f").await.unwrap().is_some(),
        "DELETE on /status does not delete the object"
    );
}

/// A body over kube-apiserver's 3 MiB limit gets its 413 Status, read by the client (not a
/// broken pipe), and the server keeps serving.
#[tokio::test]
async fn a_request_over_the_body_limit_gets_its_413() {
    let (server, client) = server().await;
    let url = format!("{}/api/v1/namespaces/default/configmaps", server.url());
    let big = json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"},
        "data": {"blob": "x".repeat(4 * 1024 * 1024)}
    });
    let (code, status) = send(
        &client,
        http::Method::POST,
        &url,
        "application/json",
        big.to_string().into_bytes(),
    )
    .await;
    assert_eq!(code, 413, "{status}");
    assert_eq!(
        status,
        json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "Request entity too large: limit is 3145728",
            "reason": "RequestEntityTooLarge", "code": 413
        })
    );
    // The plainest HTTP/1.1 client (as Python's http.client or curl without
    // `Expect: 100-continue`): it writes the whole request, then reads the answer. A server
    // that answered and closed mid-body made its write fail with a broken pipe or a reset.
    let address = server.url().trim_start_matches("http://").to_string();
    let body = big.to_string();
    let answer = tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(address).unwrap();
        let head = format!(
            "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: emulator\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).expect("writing the head");
        stream
            .write_all(body.as_bytes())
            .expect("the server reads the whole body (no broken pipe)");
        let mut answer = String::new();
        stream
            .read_to_string(&mut answer)
            .expect("the answer, then a clean close (no reset)");
        answer
    })
    .await
    .unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 413 "),
        "{}",
        &answer[..answer.len().min(300)]
    );
    assert!(
        answer.contains("Request entity too large: limit is 3145728"),
        "{answer}"
    );

    let small = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "small"}});
    let (code, _) = send(
        &client,
        http::Method::POST,
        &url,
        "application/json",
        small.to_string().into_bytes(),
    )
    .await;
    assert_eq!(code, 201, "the server still serves");
}
