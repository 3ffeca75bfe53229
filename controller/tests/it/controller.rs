//! The real `fake-dra-controller` binary against the in-memory API server.
//!
//! Each test starts its own API server and controller process; the test plays the parts
//! of the kubelet plugin (it writes the NodeAllocationStates), the scheduler (it writes
//! PodSchedulingContexts) and the user.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fake_dra_api::handle::AllocationHandle;
use fake_dra_api::nas::{
    AllocatableDevice, NodeAllocationState, NodeAllocationStateSpec, NodeAllocationStateStatus,
    NodePhase,
};
use fake_dra_api::upstream::node_selector;
use fake_dra_api::upstream::pod::DraPod;
use fake_dra_api::upstream::v1alpha2::{PodSchedulingContext, ResourceClaim, ResourceClass};
use fake_dra_emulator::apiserver::{ApiServer, ApiServerOptions, Fault, FaultVerb};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

const DRIVER: &str = "fake.resource.3-shake.com";
const CLASS: &str = "fake.3-shake.com";
const DRIVER_NS: &str = "fake-dra";
const NS: &str = "test";
const FINALIZER: &str = "fake.resource.3-shake.com/deletion-protection";

/// Polls until `check` returns `Some`. The deadline only turns a hang into a failure;
/// nothing here asserts on speed.
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    for _ in 0..1200 {
        if let Some(v) = check().await {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("gave up waiting for: {what}");
}

struct Env {
    server: ApiServer,
    client: Client,
    controller: Option<Child>,
    http_port: u16,
}

impl Drop for Env {
    fn drop(&mut self) {
        if let Some(mut c) = self.controller.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Env {
    async fn new() -> Self {
        let server = ApiServer::start_with(ApiServerOptions {
            crds: fake_dra_api::crdgen::yaml_documents().expect("the driver's CRDs"),
            ..ApiServerOptions::default()
        })
        .await
        .expect("start the API server");
        let client = server.client().expect("client");
        let namespaces: Api<Namespace> = Api::all(client.clone());
        for ns in [DRIVER_NS, NS] {
            namespaces
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
                )
                .await
                .unwrap();
        }
        let classes: Api<ResourceClass> = Api::all(client.clone());
        classes
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": CLASS}, "driverName": DRIVER
                }))
                .unwrap(),
            )
            .await
            .unwrap();
        let mut env = Self {
            server,
            client,
            controller: None,
            http_port: free_port(),
        };
        env.start_controller();
        env
    }

    fn start_controller(&mut self) {
        let child = Command::new(env!("CARGO_BIN_EXE_fake-dra-controller"))
            .arg("--kubeconfig")
            .arg(self.server.kubeconfig())
            .args(["--namespace", DRIVER_NS, "--workers", "2"])
            .args(["--http-address", &format!("127.0.0.1:{}", self.http_port)])
            .env("RUST_LOG", "info,kube=warn")
            .stdin(Stdio::null())
            .spawn()
            .expect("start fake-dra-controller");
        self.controller = Some(child);
    }

    /// kill -9: no cleanup of any kind.
    fn kill_controller(&mut self) {
        if let Some(mut c) = self.controller.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    async fn metrics(&self) -> Option<String> {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", self.http_port))
            .await
            .ok()?;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut out = String::new();
        stream.read_to_string(&mut out).await.ok()?;
        Some(out)
    }

    /// A node's inventory, as its kubelet plugin would publish it.
    async fn node(&self, name: &str, node_no: u16, devices: usize, model: &str, ready: bool) {
        let api: Api<NodeAllocationState> = Api::namespaced(self.client.clone(), DRIVER_NS);
        let spec = NodeAllocationStateSpec {
            allocatable_devices: (0..devices)
                .map(|i| AllocatableDevice {
                    id: format!("FAKE-00000000-0000-0000-{node_no:04x}-{i:012x}"),
                    model: model.into(),
                })
                .collect(),
        };
        let mut nas = NodeAllocationState::new(name, spec.clone());
        nas.metadata.namespace = Some(DRIVER_NS.into());
        let created = api.create(&PostParams::default(), &nas).await.unwrap();
        let mut with_status = created.clone();
        with_status.status = Some(NodeAllocationStateStatus::new(
            if ready {
                NodePhase::Ready
            } else {
                NodePhase::NotReady
            },
            None,
            &spec,
            vec![],
        ));
        api.replace_status(name, &PostParams::default(), &with_status)
            .await
            .unwrap();
    }

    async fn params(&self, name: &str, spec: Value) {
        let api: Api<kube::api::DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            NS,
            &kube::api::ApiResource::erase::<fake_dra_api::params::FakeClaimParameters>(&()),
        );
        api.create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "fake.resource.3-shake.com/v1alpha1",
                "kind": "FakeClaimParameters",
                "metadata": {"name": name},
                "spec": spec,
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    }

    fn claims(&self) -> Api<ResourceClaim> {
        Api::namespaced(self.client.clone(), NS)
    }

    async fn claim(&self, name: &str, mode: &str, params_ref: Option<Value>) {
        let mut spec = json!({"resourceClassName": CLASS, "allocationMode": mode});
        if let Some(r) = params_ref {
            spec["parametersRef"] = r;
        }
        self.claims()
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap(),
            )
            .await
            .unwrap();
    }

    async fn allocated(&self, name: &str) -> (ResourceClaim, AllocationHandle) {
        let claims = self.claims();
        eventually(&format!("claim {name} allocated"), || async {
            let c = claims.get(name).await.ok()?;
            let h = AllocationHandle::parse(c.handle_for_driver(DRIVER)?).ok()?;
            Some((c, h))
        })
        .await
    }

    async fn event_reason(&self, claim: &str, reason: &str) -> Event {
        let events: Api<Event> = Api::namespaced(self.client.clone(), NS);
        eventually(&format!("event {reason} on claim {claim}"), || async {
            events
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some(reason)
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(claim)
                })
        })
        .await
    }
}

fn params_ref(name: &str) -> Value {
    json!({"apiGroup": "fake.resource.3-shake.com", "kind": "FakeClaimParameters", "name": name})
}

/// The write PROTOCOLS.md describes: driverName, one handle for our driver, the node,
/// shareable.
fn assert_written_as_specified(claim: &ResourceClaim, handle: &AllocationHandle) {
    let status = claim.status.as_ref().unwrap();
    assert_eq!(status.driver_name.as_deref(), Some(DRIVER));
    let alloc = status.allocation.as_ref().unwrap();
    let handles = alloc.resource_handles.as_ref().unwrap();
    assert_eq!(handles.len(), 1);
    assert_eq!(handles[0].driver_name.as_deref(), Some(DRIVER));
    assert_eq!(
        alloc.available_on_nodes,
        Some(node_selector::for_node(&handle.node_name))
    );
    assert_eq!(alloc.shareable, Some(true));
    assert!(claim.has_finalizer(FINALIZER));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn immediate_claim_is_allocated_and_released_on_deletion() {
    let env = Env::new().await;
    env.node("node-a", 1, 4, "fake-x", true).await;
    env.params("two", json!({"count": 2, "split": 3})).await;
    // A class of another driver: its claims are not ours to touch.
    let classes: Api<ResourceClass> = Api::all(env.client.clone());
    classes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "other"}, "driverName": "gpu.example.com"
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    env.claims()
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "foreign"},
                "spec": {"resourceClassName": "other", "allocationMode": "Immediate"}
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    env.claim("c1", "Immediate", Some(params_ref("two"))).await;

    let (claim, handle) = env.allocated("c1").await;
    assert_written_as_specified(&claim, &handle);
    assert_eq!(handle.node_name, "node-a");
    assert_eq!(handle.split, 3);
    assert_eq!(handle.model, "fake-x");
    assert_eq!(
        handle.devices,
        [
            "FAKE-00000000-0000-0000-0001-000000000000",
            "FAKE-00000000-0000-0000-0001-000000000001"
        ]
    );
    env.event_reason("c1", "Allocated").await;
    let foreign = env.claims().get("foreign").await.unwrap();
    assert!(foreign.status.is_none() && foreign.metadata.finalizers.is_none());

    // Deletion: the claim stays until the controller has cleared the allocation and
    // dropped its finalizer, then it is gone.
    env.claims()
        .delete("c1", &DeleteParams::default())
        .await
        .unwrap();
    let claims = env.claims();
    eventually("claim c1 deleted", || async {
        claims.get_opt("c1").await.unwrap().is_none().then_some(())
    })
    .await;

    // Its devices are free again: a claim for all 4 fits.
    env.params("four", json!({"count": 4})).await;
    env.claim("c2", "Immediate", Some(params_ref("four"))).await;
    let (_, h2) = env.allocated("c2").await;
    assert_eq!(h2.devices.len(), 4);
}

async fn pod_with_claim(env: &Env, pod: &str, claim: &str) {
    let pods: Api<DraPod> = Api::namespaced(env.client.clone(), NS);
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": pod},
            "spec": {
                "containers": [{"name": "c", "image": "busybox", "resources": {"claims": [{"name": "dev"}]}}],
                "resourceClaims": [{"name": "dev", "source": {"resourceClaimName": claim}}]
            }
        }))
        .unwrap(),
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_first_consumer_through_pod_scheduling_context() {
    let env = Env::new().await;
    env.node("node-a", 1, 2, "fake-x", true).await;
    env.node("node-b", 2, 8, "fake-x", false).await; // NotReady
    env.node("node-c", 3, 1, "fake-x", true).await; // too small
    env.params("two", json!({"count": 2})).await;
    env.claim("c1", "WaitForFirstConsumer", Some(params_ref("two")))
        .await;
    pod_with_claim(&env, "p1", "c1").await;

    let pscs: Api<PodSchedulingContext> = Api::namespaced(env.client.clone(), NS);
    pscs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": "p1"},
            // node-d has no NodeAllocationState at all.
            "spec": {"potentialNodes": ["node-a", "node-b", "node-c", "node-d"]}
        }))
        .unwrap(),
    )
    .await
    .unwrap();

    let unsuitable = eventually("unsuitableNodes written", || async {
        let psc = pscs.get("p1").await.ok()?;
        let entries = psc.status?.resource_claims?;
        let entry = entries.into_iter().find(|e| e.name == "dev")?;
        entry.unsuitable_nodes
    })
    .await;
    assert_eq!(unsuitable, ["node-b", "node-c", "node-d"]);
    assert!(
        !env.claims().get("c1").await.unwrap().is_allocated(),
        "WaitForFirstConsumer claims wait for a selected node"
    );

    pscs.patch(
        "p1",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"selectedNode": "node-a"}})),
    )
    .await
    .unwrap();
    let (claim, handle) = env.allocated("c1").await;
    assert_written_as_specified(&claim, &handle);
    assert_eq!(handle.node_name, "node-a");
    assert_eq!(handle.devices.len(), 2);

    // Deallocation on request: the scheduler gives up on the Pod (the context goes) and
    // asks for the claim to be deallocated.
    pscs.delete("p1", &DeleteParams::default()).await.unwrap();
    env.claims()
        .patch_status(
            "c1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"deallocationRequested": true}})),
        )
        .await
        .unwrap();
    let claims = env.claims();
    eventually("claim c1 deallocated", || async {
        let c = claims.get("c1").await.ok()?;
        (!c.is_allocated() && !c.deallocation_requested() && !c.has_finalizer(FINALIZER))
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflict_on_the_status_write_is_retried() {
    let env = Env::new().await;
    env.node("node-a", 1, 2, "fake-x", true).await;
    env.server.inject_fault(Fault {
        verb: FaultVerb::Update,
        plural: "resourceclaims".into(),
        subresource: Some("status".into()),
        code: 409,
        times: 1,
    });
    env.claim("c1", "Immediate", None).await;
    let (claim, handle) = env.allocated("c1").await;
    assert_written_as_specified(&claim, &handle);
    assert_eq!(handle.devices.len(), 1);
    // The 409 did happen and was counted.
    let metrics = eventually("metrics served", || env.metrics()).await;
    assert!(
        metrics.contains(r#"fake_dra_controller_reconcile_failures_total{reason="Conflict"} 1"#),
        "{metrics}"
    );
    assert!(metrics.contains("fake_dra_controller_allocations_total 1"));
    // The reservation of the failed write was released: the other device is still free
    // for a second claim, and the two claims hold different devices.
    env.claim("c2", "Immediate", None).await;
    let (_, h2) = env.allocated("c2").await;
    assert_ne!(h2.devices, handle.devices);
}

/// Replaces the FakeClaimParameters schema with one that accepts anything, as objects
/// written before a CRD update (or with validation off) would be.
///
/// The emulator keeps the schema a CRD was created with when the CRD is updated (the
/// real apiserver applies the new one), so the CRD is deleted and created again.
async fn loosen_parameters_schema(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = "fakeclaimparameters.fake.resource.3-shake.com";
    let mut crd = crds.get(name).await.unwrap();
    for v in &mut crd.spec.versions {
        v.schema = Some(
            serde_json::from_value(json!({"openAPIV3Schema": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": true
            }}))
            .unwrap(),
        );
    }
    crds.delete(name, &DeleteParams::default()).await.unwrap();
    eventually("the old CRD is gone", || async {
        crds.get_opt(name).await.unwrap().is_none().then_some(())
    })
    .await;
    crd.metadata = kube::api::ObjectMeta {
        name: Some(name.into()),
        ..Default::default()
    };
    crd.status = None;
    crds.create(&PostParams::default(), &crd).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_parameters_get_an_event_and_no_allocation() {
    let env = Env::new().await;
    env.node("node-a", 1, 4, "fake-x", true).await;
    loosen_parameters_schema(&env.client).await;

    let cases: Vec<(&str, Option<Value>, Option<Value>, &str)> = vec![
        (
            "missing",
            Some(params_ref("nope")),
            None,
            "ParametersNotFound",
        ),
        (
            "other-kind",
            Some(json!({"kind": "ConfigMap", "name": "x"})),
            None,
            "WrongParametersKind",
        ),
        (
            "other-group",
            Some(json!({"apiGroup": "example.com", "kind": "FakeClaimParameters", "name": "x"})),
            None,
            "WrongParametersKind",
        ),
        (
            "count-zero",
            None,
            Some(json!({"count": 0})),
            "InvalidParameters",
        ),
        (
            "count-negative",
            None,
            Some(json!({"count": -1})),
            "InvalidParameters",
        ),
        (
            "count-huge",
            None,
            Some(json!({"count": 1_000_000_000})),
            "InvalidParameters",
        ),
        (
            "count-string",
            None,
            Some(json!({"count": "4"})),
            "InvalidParameters",
        ),
        (
            "count-fraction",
            None,
            Some(json!({"count": 4.5})),
            "InvalidParameters",
        ),
        (
            "split-zero",
            None,
            Some(json!({"split": 0})),
            "InvalidParameters",
        ),
        (
            "split-huge",
            None,
            Some(json!({"split": 1_000_000})),
            "InvalidParameters",
        ),
        ("no-spec", None, Some(Value::Null), "InvalidParameters"),
        (
            "unknown-model",
            None,
            Some(json!({"selector": {"model": "fake-z"}})),
            "UnknownModel",
        ),
        (
            "above-inventory",
            None,
            Some(json!({"count": 5})),
            "CountAboveInventory",
        ),
    ];
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(
        env.client.clone(),
        NS,
        &kube::api::ApiResource::erase::<fake_dra_api::params::FakeClaimParameters>(&()),
    );
    for (name, reference, spec, _) in &cases {
        let reference = match spec {
            Some(spec) => {
                let mut obj = json!({
                    "apiVersion": "fake.resource.3-shake.com/v1alpha1",
                    "kind": "FakeClaimParameters",
                    "metadata": {"name": name},
                });
                if !spec.is_null() {
                    obj["spec"] = spec.clone();
                }
                api.create(
                    &PostParams::default(),
                    &serde_json::from_value(obj).unwrap(),
                )
                .await
                .unwrap();
                Some(params_ref(name))
            }
            None => reference.clone(),
        };
        env.claim(name, "Immediate", reference).await;
    }
    for (name, _, _, reason) in &cases {
        let event = env.event_reason(name, reason).await;
        assert_eq!(event.type_.as_deref(), Some("Warning"));
        let note = event.note.unwrap_or_default();
        assert!(!note.is_empty(), "{name}: the event says what is wrong");
        if reason == &"InvalidParameters" && name.starts_with("count") {
            assert!(note.contains("spec.count"), "{name}: {note}");
        }
        if name.starts_with("split") {
            assert!(note.contains("spec.split"), "{name}: {note}");
        }
    }
    for (name, _, _, _) in &cases {
        let c = env.claims().get(name).await.unwrap();
        assert!(!c.is_allocated(), "{name} must not be allocated");
    }
    // A good claim still gets all four devices: nothing was half-allocated.
    env.params("four", json!({"count": 4})).await;
    env.claim("good", "Immediate", Some(params_ref("four")))
        .await;
    let (_, h) = env.allocated("good").await;
    assert_eq!(h.devices.len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_between_reserving_and_writing_converges_without_double_allocation() {
    let mut env = Env::new().await;
    env.node("node-a", 1, 4, "fake-x", true).await;
    env.node("node-b", 2, 4, "fake-x", true).await;
    // Every status write fails for a while: the controller reserves devices, the write
    // fails, it retries. Kill it in the middle of that.
    env.server.inject_fault(Fault {
        verb: FaultVerb::Update,
        plural: "resourceclaims".into(),
        subresource: Some("status".into()),
        code: 500,
        times: 6,
    });
    for i in 0..10 {
        env.claim(&format!("c{i}"), "Immediate", None).await;
    }
    eventually("the controller failed a status write", || async {
        let m = env.metrics().await?;
        m.contains(r#"reconcile_failures_total{reason="ApiError"}"#)
            .then_some(())
    })
    .await;
    env.kill_controller();
    env.start_controller();

    // 8 devices, 10 claims of one device: exactly 8 end up allocated, all different, and
    // the other two are told there is no capacity.
    let claims = env.claims();
    let handles = eventually("8 claims allocated", || async {
        let list = claims.list(&ListParams::default()).await.ok()?;
        let handles: Vec<AllocationHandle> = list
            .items
            .iter()
            .filter_map(|c| AllocationHandle::parse(c.handle_for_driver(DRIVER)?).ok())
            .collect();
        (handles.len() == 8).then_some(handles)
    })
    .await;
    let devices: HashSet<String> = handles.iter().flat_map(|h| h.devices.clone()).collect();
    assert_eq!(devices.len(), 8, "no device is handed out twice");
    let list = claims.list(&ListParams::default()).await.unwrap();
    let pending: Vec<String> = list
        .items
        .iter()
        .filter(|c| !c.is_allocated())
        .map(|c| c.name_any())
        .collect();
    assert_eq!(pending.len(), 2);
    for name in &pending {
        env.event_reason(name, "NoCapacity").await;
    }
}

async fn http_get(port: u16, path: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .ok()?;
    let mut out = String::new();
    stream.read_to_string(&mut out).await.ok()?;
    Some(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_election_health_and_graceful_shutdown() {
    let mut env = Env::new().await;
    env.kill_controller();
    env.node("node-a", 1, 2, "fake-x", true).await;
    let start = |port: u16, id: &str| {
        Command::new(env!("CARGO_BIN_EXE_fake-dra-controller"))
            .arg("--kubeconfig")
            .arg(env.server.kubeconfig())
            .args(["--namespace", DRIVER_NS, "--leader-elect", "--instance", id])
            .args(["--http-address", &format!("127.0.0.1:{port}")])
            .args(["--log-format", "json"])
            .env("RUST_LOG", "info,kube=warn")
            .stdin(Stdio::null())
            .spawn()
            .expect("start fake-dra-controller")
    };
    let (port_a, port_b) = (free_port(), free_port());
    let mut a = start(port_a, "ctl-a");
    eventually("ctl-a holds the lease", || async {
        let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
            Api::namespaced(env.client.clone(), DRIVER_NS);
        let lease = leases.get_opt("fake-dra-controller").await.ok()??;
        (lease.spec?.holder_identity?.as_str() == "ctl-a").then_some(())
    })
    .await;
    let mut b = start(port_b, "ctl-b");
    env.claim("c1", "Immediate", None).await;
    env.allocated("c1").await;
    let health = eventually("healthz", || http_get(port_a, "/healthz")).await;
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    let ready = eventually("readyz 200", || async {
        let r = http_get(port_a, "/readyz").await?;
        r.starts_with("HTTP/1.1 200").then_some(r)
    })
    .await;
    assert!(ready.ends_with("ok\n"));
    let standby = eventually("standby serves healthz", || http_get(port_b, "/healthz")).await;
    assert!(standby.starts_with("HTTP/1.1 200"));
    // The claims gauge follows the informer cache, which sees the allocation a moment
    // after the write that made it.
    let metrics = eventually("metrics with the allocated claim", || async {
        let m = http_get(port_a, "/metrics").await?;
        m.contains(r#"fake_dra_controller_claims{state="allocated"} 1"#)
            .then_some(m)
    })
    .await;
    assert!(
        metrics.contains("fake_dra_controller_allocations_total 1"),
        "{metrics}"
    );
    // Prometheus 3 picks its parser by the Content-Type and refuses a scrape without one.
    assert!(
        metrics.to_ascii_lowercase().contains(
            "\r\ncontent-type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\n"
        ),
        "{metrics}"
    );
    assert!(metrics.ends_with("# EOF\n"), "{metrics}");

    // SIGTERM: both exit cleanly.
    for child in [&mut a, &mut b] {
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }
    let code_a = tokio::task::spawn_blocking(move || a.wait().unwrap())
        .await
        .unwrap();
    let code_b = tokio::task::spawn_blocking(move || b.wait().unwrap())
        .await
        .unwrap();
    assert!(code_a.success(), "leader exit: {code_a}");
    assert!(code_b.success(), "standby exit: {code_b}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_allocation_state_that_disappears_keeps_its_claims_allocated() {
    let env = Env::new().await;
    env.node("node-a", 1, 2, "fake-x", true).await;
    env.params("two", json!({"count": 2})).await;
    env.claim("c1", "Immediate", Some(params_ref("two"))).await;
    let (before, h1) = env.allocated("c1").await;
    assert_eq!(h1.node_name, "node-a");

    let nas: Api<NodeAllocationState> = Api::namespaced(env.client.clone(), DRIVER_NS);
    nas.delete("node-a", &DeleteParams::default())
        .await
        .unwrap();
    env.node("node-b", 2, 2, "fake-x", true).await;
    env.claim("c2", "Immediate", Some(params_ref("two"))).await;
    let (_, h2) = env.allocated("c2").await;
    assert_eq!(h2.node_name, "node-b", "node-a has no inventory any more");
    let after = env.claims().get("c1").await.unwrap();
    assert_eq!(
        after.status, before.status,
        "the allocation of record is the claim's, not the NAS's"
    );

    // The node comes back with the same devices: they are still c1's.
    env.node("node-a", 1, 2, "fake-x", true).await;
    env.params("one", json!({"count": 1})).await;
    env.claim("c3", "Immediate", Some(params_ref("one"))).await;
    env.event_reason("c3", "NoCapacity").await;
    assert!(!env.claims().get("c3").await.unwrap().is_allocated());
    // Freeing c1 lets c3 in.
    env.claims()
        .delete("c1", &DeleteParams::default())
        .await
        .unwrap();
    let (_, h3) = env.allocated("c3").await;
    assert_eq!(h3.node_name, "node-a");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_pods_racing_for_the_last_device_get_it_once() {
    let env = Env::new().await;
    env.node("node-a", 1, 1, "fake-x", true).await;
    let pscs: Api<PodSchedulingContext> = Api::namespaced(env.client.clone(), NS);
    for p in ["p1", "p2"] {
        env.claim(&format!("{p}-claim"), "WaitForFirstConsumer", None)
            .await;
        pod_with_claim(&env, p, &format!("{p}-claim")).await;
    }
    for p in ["p1", "p2"] {
        pscs.create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": p},
                "spec": {"potentialNodes": ["node-a"], "selectedNode": "node-a"}
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    }
    let claims = env.claims();
    let (winner, loser) = eventually("one claim allocated", || async {
        let a = claims.get("p1-claim").await.ok()?.is_allocated();
        let b = claims.get("p2-claim").await.ok()?.is_allocated();
        match (a, b) {
            (true, false) => Some(("p1", "p2")),
            (false, true) => Some(("p2", "p1")),
            (true, true) => panic!("one device allocated to two claims"),
            _ => None,
        }
    })
    .await;
    // The loser is told node-a cannot take its claim.
    let unsuitable = eventually("loser's unsuitableNodes", || async {
        let psc = pscs.get(loser).await.ok()?;
        let e = psc
            .status?
            .resource_claims?
            .into_iter()
            .find(|e| e.name == "dev")?;
        e.unsuitable_nodes.filter(|u| !u.is_empty())
    })
    .await;
    assert_eq!(unsuitable, ["node-a"]);
    assert!(
        claims
            .get(&format!("{winner}-claim"))
            .await
            .unwrap()
            .is_allocated()
    );
    assert!(
        !claims
            .get(&format!("{loser}-claim"))
            .await
            .unwrap()
            .is_allocated()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relists_after_the_watch_history_is_compacted() {
    let env = Env::new().await;
    env.node("node-a", 1, 2, "fake-x", true).await;
    env.claim("c1", "Immediate", None).await;
    let (_, h1) = env.allocated("c1").await;
    env.server.compact();
    env.claim("c2", "Immediate", None).await;
    let (_, h2) = env.allocated("c2").await;
    assert_ne!(h1.devices, h2.devices, "the rebuilt view knows c1's device");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_deleted_while_its_allocation_is_in_flight_is_cleaned_up() {
    let env = Env::new().await;
    env.node("node-a", 1, 1, "fake-x", true).await;
    // The status writes fail for a while, so the claim is deleted with the allocation
    // pending (and its finalizer already on).
    env.server.inject_fault(Fault {
        verb: FaultVerb::Update,
        plural: "resourceclaims".into(),
        subresource: Some("status".into()),
        code: 500,
        times: 3,
    });
    env.claim("c1", "Immediate", None).await;
    let claims = env.claims();
    eventually("finalizer added", || async {
        claims
            .get("c1")
            .await
            .ok()?
            .has_finalizer(FINALIZER)
            .then_some(())
    })
    .await;
    claims.delete("c1", &DeleteParams::default()).await.unwrap();
    eventually("claim c1 gone", || async {
        claims.get_opt("c1").await.unwrap().is_none().then_some(())
    })
    .await;
    // Its device was not leaked.
    env.claim("c2", "Immediate", None).await;
    let (_, h) = env.allocated("c2").await;
    assert_eq!(h.devices, ["FAKE-00000000-0000-0000-0001-000000000000"]);
}
