//! The emulated apiserver's API surface over real HTTP: create bodies of every kind a DRA
//! user meets (JSON, YAML, cut short, a media type it does not take), the four patch
//! types on stored objects, and list and watch queries. After each input the apiserver
//! must have answered in time with a status below 500 (a refusal: a `Status` with a
//! message), a refused patch must have left the object as it was, and a typed list of
//! the kind must still decode (D5/D6: one bad object stored broke every list of its kind).

use super::cel::expression;
use super::json::{
    Encoding, any_json, encode, encoding, metadata, or_any, string_map, tricky_string,
};
use super::{CASE_DEADLINE, run};
use fake_dra_api::fault::DeviceFault;
use fake_dra_api::params::FakeClaimParameters;
use fake_dra_emulator::apiserver::{ApiServer, ApiServerOptions};
use http_body_util::BodyExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceClaimTemplate};
use kube::api::{Api, ListParams};
use proptest::prelude::*;
use serde_json::{Value, json};

/// A refusal message may echo what it refuses (upstream's selector errors quote the
/// selector twice), so its bound is this much plus twice the request's size: more is an
/// amplification.
const STATUS_MESSAGE_BASE_BYTES: usize = 4096;
/// The namespace of the namespaced kinds.
const NS: &str = "default";
/// The name of the objects the patch target patches.
const TARGET: &str = "fuzz-target";

/// A kind the fuzzer writes, with its collection path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    ConfigMap,
    Pod,
    Namespace,
    Deployment,
    ResourceClaim,
    ResourceClaimTemplate,
    DeviceClass,
    FakeClaimParameters,
    DeviceFault,
}

/// Secrets are not served (the emulator refuses them with a 404 naming the route).
const KINDS: [Kind; 9] = [
    Kind::ConfigMap,
    Kind::Pod,
    Kind::Namespace,
    Kind::Deployment,
    Kind::ResourceClaim,
    Kind::ResourceClaimTemplate,
    Kind::DeviceClass,
    Kind::FakeClaimParameters,
    Kind::DeviceFault,
];

impl Kind {
    fn api_version(self) -> &'static str {
        match self {
            Kind::ConfigMap | Kind::Pod | Kind::Namespace => "v1",
            Kind::Deployment => "apps/v1",
            Kind::ResourceClaim | Kind::ResourceClaimTemplate | Kind::DeviceClass => {
                "resource.k8s.io/v1"
            }
            Kind::FakeClaimParameters | Kind::DeviceFault => "fake.resource.3-shake.com/v1alpha1",
        }
    }

    fn collection(self) -> String {
        let (plural, namespaced) = match self {
            Kind::ConfigMap => ("configmaps", true),
            Kind::Pod => ("pods", true),
            Kind::Namespace => ("namespaces", false),
            Kind::Deployment => ("deployments", true),
            Kind::ResourceClaim => ("resourceclaims", true),
            Kind::ResourceClaimTemplate => ("resourceclaimtemplates", true),
            Kind::DeviceClass => ("deviceclasses", false),
            Kind::FakeClaimParameters => ("fakeclaimparameters", true),
            Kind::DeviceFault => ("devicefaults", false),
        };
        let root = match self.api_version() {
            "v1" => "/api/v1".to_string(),
            group => format!("/apis/{group}"),
        };
        if namespaced {
            format!("{root}/namespaces/{NS}/{plural}")
        } else {
            format!("{root}/{plural}")
        }
    }

    /// Every stored object of the kind still decodes as its type.
    async fn typed_list_decodes(self, client: &kube::Client) -> Result<(), String> {
        async fn list<K>(api: Api<K>) -> Result<(), String>
        where
            K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
        {
            api.list(&ListParams::default())
                .await
                .map(|_| ())
                .map_err(|e| format!("a typed list no longer decodes: {e}"))
        }
        let c = client.clone();
        match self {
            Kind::ConfigMap => list(Api::<ConfigMap>::namespaced(c, NS)).await,
            Kind::Pod => list(Api::<Pod>::namespaced(c, NS)).await,
            Kind::Namespace => list(Api::<Namespace>::all(c)).await,
            Kind::Deployment => list(Api::<Deployment>::namespaced(c, NS)).await,
            Kind::ResourceClaim => list(Api::<ResourceClaim>::namespaced(c, NS)).await,
            Kind::ResourceClaimTemplate => {
                list(Api::<ResourceClaimTemplate>::namespaced(c, NS)).await
            }
            Kind::DeviceClass => list(Api::<DeviceClass>::all(c)).await,
            Kind::FakeClaimParameters => list(Api::<FakeClaimParameters>::namespaced(c, NS)).await,
            Kind::DeviceFault => list(Api::<DeviceFault>::all(c)).await,
        }
    }
}

fn selectors() -> impl Strategy<Value = Value> {
    or_any(prop::collection::vec(expression(), 0..3).prop_map(|e| {
        json!(
            e.iter()
                .map(|x| json!({"cel": {"expression": x}}))
                .collect::<Vec<_>>()
        )
    }))
}

fn pod_spec() -> impl Strategy<Value = Value> {
    (
        or_any(Just(json!("busybox"))),
        or_any(Just(json!([{"name": "gpu"}]))),
        string_map(),
        or_any(Just(json!([{"key": "k", "operator": "Exists"}]))),
        or_any(Just(json!([{"name": "gpu", "resourceClaimName": "c"}]))),
    )
        .prop_map(
            |(image, claims, node_selector, tolerations, resource_claims)| {
                json!({
                    "containers": [{"name": "c", "image": image, "resources": {"claims": claims}}],
                    "nodeSelector": node_selector,
                    "tolerations": tolerations,
                    "resourceClaims": resource_claims,
                })
            },
        )
}

fn claim_spec() -> impl Strategy<Value = Value> {
    (
        or_any("[a-z.]{1,20}".prop_map(|c| json!(c))),
        selectors(),
        or_any((-2i64..40).prop_map(|c| json!(c))),
        any_json(),
    )
        .prop_map(|(class, selectors, count, parameters)| {
            json!({"devices": {
                "requests": [{"name": "r", "exactly": {
                    "deviceClassName": class, "selectors": selectors,
                    "allocationMode": "ExactCount", "count": count}}],
                "config": [{"opaque": {"driver": "fake.resource.3-shake.com", "parameters": parameters}}],
            }})
        })
}

/// The kind-specific fields of an object of `kind`, usually close to valid.
fn fields(kind: Kind) -> BoxedStrategy<Value> {
    match kind {
        Kind::ConfigMap => (string_map(), string_map())
            .prop_map(|(d, b)| json!({"data": d, "binaryData": b}))
            .boxed(),
        Kind::Pod => or_any(pod_spec()).prop_map(|s| json!({"spec": s})).boxed(),
        Kind::Namespace => Just(json!({})).boxed(),
        Kind::Deployment => (or_any(Just(json!(1))), string_map(), pod_spec())
            .prop_map(|(replicas, labels, pod)| {
                json!({"spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                    "template": {"metadata": {"labels": labels}, "spec": pod}}})
            })
            .boxed(),
        Kind::ResourceClaim => or_any(claim_spec()).prop_map(|s| json!({"spec": s})).boxed(),
        Kind::ResourceClaimTemplate => or_any(claim_spec())
            .prop_map(|s| json!({"spec": {"spec": s}}))
            .boxed(),
        Kind::DeviceClass => (selectors(), any_json())
            .prop_map(|(s, p)| {
                json!({"spec": {"selectors": s, "config": [{"opaque": {"driver": "d.example.com", "parameters": p}}]}})
            })
            .boxed(),
        Kind::FakeClaimParameters => (any_json(), any_json(), tricky_string())
            .prop_map(|(count, split, model)| {
                json!({"spec": {"count": count, "split": split, "selector": {"model": model}}})
            })
            .boxed(),
        Kind::DeviceFault => (any_json(), any_json())
            .prop_map(|(spec, data)| json!({"spec": spec, "status": {"deviceStatus": {"data": data}}}))
            .boxed(),
    }
}

/// A whole object of a kind (or anything at all, now and then).
fn object() -> impl Strategy<Value = (Kind, Value)> {
    prop::sample::select(&KINDS[..]).prop_flat_map(|kind| {
        let object = (metadata(), fields(kind)).prop_map(move |(metadata, fields)| {
            let mut o = json!({"apiVersion": kind.api_version(), "kind": format!("{kind:?}"), "metadata": metadata});
            if let (Some(o), Value::Object(f)) = (o.as_object_mut(), fields) {
                o.extend(f);
            }
            o
        });
        (Just(kind), prop_oneof![12 => object, 1 => any_json()])
    })
}

/// One request's answer: its status and body.
struct Answer {
    status: u16,
    body: Value,
}

async fn send(
    client: &kube::Client,
    method: &str,
    uri: &str,
    content_type: &str,
    body: Vec<u8>,
) -> Result<Answer, String> {
    let request = http::Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", content_type)
        .body(kube::client::Body::from(body))
        .map_err(|e| format!("building {method} {uri}: {e}"))?;
    let response = client
        .send(request)
        .await
        .map_err(|e| format!("{method} {uri}: no answer: {e}"))?;
    let status = response.status().as_u16();
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("{method} {uri}: the body broke off: {e}"))?
        .to_bytes();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Ok(Answer { status, body })
}

/// Below 500 (or the emulator's 501 for what it does not implement, said as such), and a
/// refusal is a `Status` that says why.
fn clear(answer: &Answer, what: &str, sent_bytes: usize) -> Result<(), String> {
    let what: String = if what.chars().count() > 300 {
        format!("{}…", what.chars().take(300).collect::<String>())
    } else {
        what.to_string()
    };
    let not_implemented = answer.status == 501
        && answer.body["reason"] == "NotImplemented"
        && answer.body["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("emulator: "));
    // kube-apiserver's answer to a read from a resourceVersion it has not reached.
    let too_large_resource_version = answer.status == 504
        && answer.body["reason"] == "Timeout"
        && answer.body["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge";
    // kube-apiserver's answer when structured-merge-diff cannot type an applied object
    // (duplicate keys in an associative list): a 500 without a reason (kubernetes/kubernetes
    // issue 122480, open), as the emulator gives it on purpose (`ApiError::unknown`).
    let untyped_apply = answer.status == 500
        && answer.body["reason"]
            .as_str()
            .unwrap_or_default()
            .is_empty()
        && answer.body["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("failed to create typed patch object"));
    if answer.status >= 500 && !not_implemented && !too_large_resource_version && !untyped_apply {
        return Err(format!("{what}: {} {}", answer.status, answer.body));
    }
    if answer.status >= 400 {
        let message = answer.body["message"].as_str().unwrap_or_default();
        if answer.body["kind"] != "Status" || message.trim().is_empty() {
            return Err(format!(
                "{what}: {} without a Status message: {}",
                answer.status, answer.body
            ));
        }
        let limit = STATUS_MESSAGE_BASE_BYTES + 2 * sent_bytes;
        if message.len() > limit {
            return Err(format!(
                "{what}: a message of {} bytes for a request of {sent_bytes}",
                message.len()
            ));
        }
    }
    Ok(())
}

/// The apiserver at 1.34 (resource.k8s.io/v1) with the driver's CRDs, and a runtime to
/// drive it from the harness's synchronous checks.
fn apiserver() -> (tokio::runtime::Runtime, ApiServer, kube::Client) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let server = rt
        .block_on(ApiServer::start_with(ApiServerOptions {
            server_version: (1, 34),
            crds: fake_dra_api::crdgen::yaml_documents().expect("the driver's CRDs"),
            ..ApiServerOptions::default()
        }))
        .expect("start the emulated apiserver");
    let client = {
        let _runtime = rt.enter();
        server.client().expect("client")
    };
    (rt, server, client)
}

fn in_time<T>(
    rt: &tokio::runtime::Runtime,
    case: impl std::future::Future<Output = Result<T, String>>,
) -> Result<T, String> {
    rt.block_on(async { tokio::time::timeout(CASE_DEADLINE, case).await })
        .map_err(|_| format!("no answer within {} s", CASE_DEADLINE.as_secs()))?
}

#[test]
fn api_bodies() {
    let (rt, _server, client) = apiserver();
    run(
        "api_bodies",
        (object(), encoding()),
        |((kind, object), encoding)| {
            let (content_type, body) = encode(object, *encoding);
            let sent = body.len();
            in_time(&rt, async {
                let uri = kind.collection();
                let answer = send(&client, "POST", &uri, content_type, body).await?;
                clear(&answer, &format!("POST {uri}"), sent)?;
                if matches!(encoding, Encoding::Protobuf | Encoding::Truncated)
                    && answer.status < 400
                {
                    return Err(format!(
                        "POST {uri} as {encoding:?} was taken: {}",
                        answer.status
                    ));
                }
                if answer.status < 300
                    && let Some(name) = answer.body["metadata"]["name"].as_str()
                {
                    let del = send(
                        &client,
                        "DELETE",
                        &format!("{uri}/{name}?gracePeriodSeconds=0"),
                        "application/json",
                        vec![],
                    )
                    .await?;
                    clear(&del, "DELETE the created object", 0)?;
                }
                kind.typed_list_decodes(&client).await
            })
        },
    );
}

/// A JSON patch: operations on paths a user would aim at, values of any type, and now
/// and then the copy chain that doubled an object 14 times (D1).
fn json_patch() -> impl Strategy<Value = Value> {
    let path = prop_oneof![
        prop::sample::select(
            &[
                "/metadata/labels/x",
                "/metadata/annotations",
                "/metadata/annotations/a",
                "/metadata/name",
                "/metadata/resourceVersion",
                "/data",
                "/data/k",
                "/spec",
                "/spec/containers/0/image",
                "/spec/devices/requests/0/exactly/count",
                "/spec/selectors/-",
                "/metadata/labels/~1",
                "/-",
                "",
                "/a/b/c",
            ][..]
        )
        .prop_map(String::from),
        tricky_string(),
    ];
    let op =
        prop::sample::select(&["add", "remove", "replace", "copy", "move", "test", "merge"][..]);
    let one = (op, path.clone(), path, any_json()).prop_map(
        |(op, path, from, value)| json!({"op": op, "path": path, "from": from, "value": value}),
    );
    prop_oneof![
        6 => prop::collection::vec(one, 0..10).prop_map(Value::Array),
        1 => (1usize..30).prop_map(|n| {
            let mut ops = vec![json!({"op": "add", "path": "/metadata/annotations", "value": {"a": "x".repeat(1000)}})];
            ops.extend((0..n).map(|i| json!({"op": "copy", "from": "/metadata/annotations", "path": format!("/metadata/annotations/c{i}")})));
            Value::Array(ops)
        }),
        1 => any_json(),
    ]
}

#[derive(Debug, Clone, Copy)]
enum PatchType {
    Json,
    Merge,
    Strategic,
    Apply,
}

fn patch() -> impl Strategy<Value = (Kind, PatchType, Value, String)> {
    prop::sample::select(&PATCHED[..]).prop_flat_map(|kind| {
        let merge = (
            metadata(),
            fields(kind),
            prop::option::of(prop::sample::select(
                &["replace", "delete", "merge", "bogus"][..],
            )),
        )
            .prop_map(|(mut metadata, fields, directive)| {
                metadata["name"] = json!(TARGET);
                let mut p = json!({"metadata": metadata});
                if let (Some(p), Value::Object(f)) = (p.as_object_mut(), fields) {
                    p.extend(f);
                }
                if let Some(d) = directive {
                    p["$patch"] = json!(d);
                }
                p
            })
            .boxed();
        let body = prop_oneof![
            3 => json_patch().prop_map(|p| (PatchType::Json, p)),
            2 => merge.clone().prop_map(|p| (PatchType::Merge, p)),
            2 => merge.clone().prop_map(|p| (PatchType::Strategic, p)),
            2 => merge.prop_map(move |mut p| {
                p["apiVersion"] = json!(kind.api_version());
                p["kind"] = json!(format!("{kind:?}"));
                (PatchType::Apply, p)
            }),
            1 => any_json().prop_map(|p| (PatchType::Merge, p)),
        ];
        (
            Just(kind),
            body,
            // At most 4,000 characters: percent-encoded in the URI, within what a client sends.
            prop_oneof![
                3 => Just("fuzz".to_string()),
                1 => tricky_string().prop_map(|m| m.chars().take(4000).collect::<String>()),
            ],
        )
            .prop_map(|(kind, (t, p), manager)| (kind, t, p, manager))
    })
}

/// The kinds of the objects the patches aim at.
const PATCHED: [Kind; 6] = [
    Kind::ConfigMap,
    Kind::Pod,
    Kind::ResourceClaim,
    Kind::DeviceClass,
    Kind::FakeClaimParameters,
    Kind::DeviceFault,
];

/// The objects the patches aim at, one per kind, valid.
async fn create_targets(client: &kube::Client) {
    let objects = [
        (Kind::ConfigMap, json!({"data": {"k": "v"}})),
        (
            Kind::Pod,
            json!({"spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
        ),
        (
            Kind::ResourceClaim,
            json!({"spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "c"}}]}}}),
        ),
        (Kind::DeviceClass, json!({"spec": {}})),
        (Kind::FakeClaimParameters, json!({"spec": {"count": 1}})),
        (Kind::DeviceFault, json!({"spec": {}})),
    ];
    for (kind, fields) in objects {
        let mut o = json!({"apiVersion": kind.api_version(), "kind": format!("{kind:?}"), "metadata": {"name": TARGET}});
        if let (Some(o), Value::Object(f)) = (o.as_object_mut(), fields) {
            o.extend(f);
        }
        let answer = send(
            client,
            "POST",
            &kind.collection(),
            "application/json",
            serde_json::to_vec(&o).unwrap(),
        )
        .await
        .expect("create a patch target");
        assert!(
            answer.status < 300,
            "creating the {kind:?} target: {} {}",
            answer.status,
            answer.body
        );
    }
}

#[test]
fn api_patches() {
    let (rt, _server, client) = apiserver();
    rt.block_on(create_targets(&client));
    run(
        "api_patches",
        patch(),
        |(kind, patch_type, body, manager)| {
            in_time(&rt, async {
                let uri = format!("{}/{TARGET}", kind.collection());
                let before = send(&client, "GET", &uri, "application/json", vec![]).await?;
                let (content_type, query) = match patch_type {
                    PatchType::Json => ("application/json-patch+json", String::new()),
                    PatchType::Merge => ("application/merge-patch+json", String::new()),
                    PatchType::Strategic => {
                        ("application/strategic-merge-patch+json", String::new())
                    }
                    PatchType::Apply => (
                        "application/apply-patch+yaml",
                        format!("?fieldManager={}&force=true", percent(manager)),
                    ),
                };
                let body = serde_json::to_vec(body).unwrap_or_default();
                let sent = body.len() + query.len();
                let answer = send(
                    &client,
                    "PATCH",
                    &format!("{uri}{query}"),
                    content_type,
                    body,
                )
                .await?;
                clear(&answer, &format!("PATCH {uri} ({patch_type:?})"), sent)?;
                if answer.status >= 400 {
                    let after = send(&client, "GET", &uri, "application/json", vec![]).await?;
                    if after.body != before.body {
                        return Err(format!(
                            "a refused patch ({}) changed the object: before {}, after {}",
                            answer.status, before.body, after.body
                        ));
                    }
                }
                kind.typed_list_decodes(&client).await
            })
        },
    );
}

/// Label and field selectors from their grammar, with the operators kube-apiserver takes
/// (and some it does not).
fn label_selector() -> impl Strategy<Value = String> {
    let key = prop_oneof!["[a-z]{1,8}", "[a-z.]{1,10}/[a-z]{1,8}", tricky_string()];
    let term = (
        key,
        prop::sample::select(&["", "=", "==", "!=", " in ", " notin ", ">", "<", "!"][..]),
        "[a-z0-9(),]{0,12}",
    )
        .prop_map(|(k, op, v)| match op {
            "!" => format!("!{k}"),
            "" => k,
            _ => format!("{k}{op}{v}"),
        });
    prop::collection::vec(term, 0..4).prop_map(|t| t.join(","))
}

fn field_selector() -> impl Strategy<Value = String> {
    let key = prop_oneof![
        prop::sample::select(
            &[
                "metadata.name",
                "metadata.namespace",
                "spec.nodeName",
                "status.phase",
                "spec.driver"
            ][..]
        )
        .prop_map(String::from),
        tricky_string(),
    ];
    let term = (
        key,
        prop::sample::select(&["=", "==", "!=", "", " in "][..]),
        tricky_string(),
    )
        .prop_map(|(k, op, v)| format!("{k}{op}{v}"));
    prop::collection::vec(term, 0..3).prop_map(|t| t.join(","))
}

/// A query of list and watch parameters, each sometimes a value of the wrong type.
fn query() -> impl Strategy<Value = (Kind, bool, Vec<(String, String)>)> {
    let number = prop_oneof!["-?[0-9]{1,25}", tricky_string()];
    let params = (
        prop::option::of(label_selector()),
        prop::option::of(field_selector()),
        prop::option::of(number.clone()),
        prop::option::of(tricky_string()),
        prop::option::of(prop_oneof![
            Just("0".to_string()),
            number.clone(),
            tricky_string()
        ]),
        prop::option::of(prop::sample::select(
            &["Exact", "NotOlderThan", "", "bogus"][..],
        )),
        prop::option::of(number),
        prop::option::of(prop::sample::select(&["true", "false", "1", "yes", ""][..])),
    )
        .prop_map(|(l, f, limit, cont, rv, rvm, timeout, bookmarks)| {
            let mut q = Vec::new();
            // Each value cut to 4,000 characters: percent-encoded, the URI stays within what
            // an HTTP client sends (the `http` crate's limit is 64 KiB).
            let mut put = |k: &str, v: Option<String>| {
                if let Some(v) = v {
                    q.push((k.to_string(), v.chars().take(4000).collect()));
                }
            };
            put("labelSelector", l);
            put("fieldSelector", f);
            put("limit", limit);
            put("continue", cont);
            put("resourceVersion", rv);
            put("resourceVersionMatch", rvm.map(String::from));
            put("timeoutSeconds", timeout);
            put("allowWatchBookmarks", bookmarks.map(String::from));
            q
        });
    (prop::sample::select(&KINDS[..]), any::<bool>(), params)
}

/// `GET uri`, the answer's head (its body still to read), or what went wrong.
pub(super) async fn get(
    client: &kube::Client,
    uri: &str,
) -> Result<http::Response<kube::client::Body>, String> {
    let request = http::Request::builder()
        .method("GET")
        .uri(uri)
        .body(kube::client::Body::empty())
        .map_err(|e| format!("building GET {uri}: {e}"))?;
    client
        .send(request)
        .await
        .map_err(|e| format!("GET {uri}: no answer: {e}"))
}

/// Every byte but the unreserved ones percent-encoded.
pub(super) fn percent(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[test]
fn api_queries() {
    let (rt, _server, client) = apiserver();
    rt.block_on(create_targets(&client));
    run("api_queries", query(), |(kind, watch, params)| {
        let mut uri = format!("{}?", kind.collection());
        if *watch {
            uri.push_str("watch=true&");
        }
        for (k, v) in params {
            uri.push_str(&format!("{k}={}&", percent(v)));
        }
        in_time(&rt, async {
            let response = get(&client, &uri).await?;
            let status = response.status().as_u16();
            if *watch && status < 300 {
                // A watch streams until its timeout: its headers are the answer.
                return Ok(());
            }
            let bytes = response
                .into_body()
                .collect()
                .await
                .map_err(|e| format!("GET {uri}: the body broke off: {e}"))?
                .to_bytes();
            let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            clear(&Answer { status, body }, &format!("GET {uri}"), uri.len())
        })
    });
}
