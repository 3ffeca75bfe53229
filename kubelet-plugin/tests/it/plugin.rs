//! The real plugin binary against the emulated apiserver, driven over its unix sockets
//! as the kubelet drives it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use common::*;
use dra_kubelet_proto::{pluginregistration as reg, v1alpha2};
use fake_dra_api::nas::{NodeAllocationState, NodePhase};
use fake_dra_emulator::apiserver::{ApiServer, Fault, FaultVerb};
use fake_dra_kubelet_plugin::fake::devices::children;
use kube::Api;

const NODE: &str = "node-1";

fn opts(api: &ApiServer) -> Options<'_> {
    Options {
        node: NODE,
        kubeconfig: api.kubeconfig(),
        env: vec![],
        extra_args: vec![],
    }
}

/// The env the seed's 4×2 example must give: eight distinct children, node and driver.
fn expect_seed_env(env: &[String], uid: &str) {
    let inv = inventory(NODE);
    let kids = children(&inv.devices[..4], 2);
    assert_eq!(kids.len(), 8);
    for (i, kid) in kids.iter().enumerate() {
        assert!(
            env.contains(&format!("FAKE_DEVICE_{i}={}", kid.id)),
            "FAKE_DEVICE_{i} in {env:?}"
        );
        let key = fake_dra_kubelet_plugin::fake::env::claim_env_key(uid);
        assert!(env.contains(&format!("FAKE_CLAIM_{key}_DEVICE_{i}={}", kid.id)));
    }
    assert!(!env.iter().any(|e| e.starts_with("FAKE_DEVICE_8=")));
    assert!(env.contains(&format!("FAKE_DEVICE_MODEL={}", inv.model)));
    assert!(env.contains(&format!("FAKE_NODE_NAME={NODE}")));
    assert!(env.contains(&format!("DRA_RESOURCE_DRIVER_NAME={DRIVER}")));
}

const UID_A: &str = "0b7c1c6e-2f55-4a53-9a1e-0a6a4c3e7c11";
const UID_B: &str = "a4d0a3f2-9d41-4f4e-8d0e-6c4d7b1e2f22";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_answers_like_a_dra_plugin() {
    let api = start_api().await;
    let dirs = Dirs::new();
    let _plugin = Plugin::start(&dirs, opts(&api)).await;
    let mut reg = registration(&dirs).await.unwrap();
    let info = reg
        .get_info(reg::InfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.r#type, "DRAPlugin");
    assert_eq!(info.name, DRIVER);
    assert_eq!(info.endpoint, dirs.dra_socket().to_string_lossy());
    assert_eq!(info.supported_versions, vec!["1.0.0".to_string()]);
    reg.notify_registration_status(reg::RegistrationStatus {
        plugin_registered: true,
        error: String::new(),
    })
    .await
    .unwrap();

    // The gRPC health service answers on the DRA socket.
    let channel = dra_kubelet_proto::connect_unix(dirs.dra_socket())
        .await
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    let status = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "v1alpha3.Node".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        status.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );

    // 1.30's structured preview gets Unimplemented, which it reads as "no resources".
    let err = v1alpha3(&dirs)
        .await
        .node_list_and_watch_resources(
            dra_kubelet_proto::v1alpha3::NodeListAndWatchResourcesRequest {},
        )
        .await
        .err()
        .unwrap();
    assert_eq!(err.code(), tonic::Code::Unimplemented);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1alpha3_prepares_the_seed_example_idempotently() {
    let api = start_api().await;
    let dirs = Dirs::new();
    let _plugin = Plugin::start(&dirs, opts(&api)).await;
    let h = handle(NODE, &[0, 1, 2, 3], 2);

    let resp = prepare(&dirs, vec![claim(UID_A, &h)]).await;
    let entry = &resp[UID_A];
    assert_eq!(entry.error, "");
    let expected_ids = vec![kind().qualified("common"), kind().qualified(UID_A)];
    assert_eq!(entry.cdi_devices, expected_ids);
    for id in &entry.cdi_devices {
        assert!(id.starts_with("k8s.fake.resource.3-shake.com/fake="));
    }
    let spec = dirs.spec_path(UID_A);
    validate_schema(&spec);
    validate_schema(&dirs.spec_path("common"));
    expect_seed_env(&inject(&dirs.cdi_root, &entry.cdi_devices), UID_A);

    // Again: same ids, file untouched.
    let before = std::fs::metadata(&spec).unwrap().modified().unwrap();
    let bytes = std::fs::read(&spec).unwrap();
    let again = prepare(&dirs, vec![claim(UID_A, &h)]).await;
    assert_eq!(again[UID_A].cdi_devices, expected_ids);
    assert_eq!(
        std::fs::metadata(&spec).unwrap().modified().unwrap(),
        before
    );
    assert_eq!(std::fs::read(&spec).unwrap(), bytes);

    let out = unprepare(&dirs, vec![claim(UID_A, &h)]).await;
    assert_eq!(out[UID_A].error, "");
    assert!(!spec.exists());
    // Unknown (already unprepared) claims succeed.
    let out = unprepare(&dirs, vec![claim(UID_A, &h), claim("never-prepared", "")]).await;
    assert_eq!(out.len(), 2);
    assert!(out.values().all(|r| r.error.is_empty()), "{out:?}");
    assert_eq!(dirs.spec_files(), vec![kind().spec_file_name("common")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1alpha2_prepares_and_unprepares_one_claim() {
    let api = start_api().await;
    let dirs = Dirs::new();
    let _plugin = Plugin::start(&dirs, opts(&api)).await;
    let mut client = v1alpha2(&dirs).await;
    let req = v1alpha2::NodePrepareResourceRequest {
        namespace: "default".into(),
        claim_uid: UID_A.into(),
        claim_name: "c".into(),
        resource_handle: handle(NODE, &[0, 1, 2, 3], 2),
    };
    let ids = client
        .node_prepare_resource(req.clone())
        .await
        .unwrap()
        .into_inner()
        .cdi_devices;
    expect_seed_env(&inject(&dirs.cdi_root, &ids), UID_A);
    let again = client
        .node_prepare_resource(req)
        .await
        .unwrap()
        .into_inner()
        .cdi_devices;
    assert_eq!(again, ids);

    let bad = v1alpha2::NodePrepareResourceRequest {
        namespace: "default".into(),
        claim_uid: UID_B.into(),
        claim_name: "c".into(),
        resource_handle: "{".into(),
    };
    let err = client.node_prepare_resource(bad).await.err().unwrap();
    assert!(err.message().contains("not JSON"), "{err:?}");

    client
        .node_unprepare_resource(v1alpha2::NodeUnprepareResourceRequest {
            namespace: "default".into(),
            claim_uid: UID_A.into(),
            claim_name: "c".into(),
            resource_handle: String::new(),
        })
        .await
        .unwrap();
    assert!(!dirs.spec_path(UID_A).exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_claims_get_their_own_error_and_lose_nothing() {
    let api = start_api().await;
    let dirs = Dirs::new();
    let _plugin = Plugin::start(&dirs, opts(&api)).await;
    let good = handle(NODE, &[0, 1], 2);
    let first = prepare(&dirs, vec![claim(UID_A, &good)]).await;
    assert_eq!(first[UID_A].error, "");
    let spec_before = std::fs::read(dirs.spec_path(UID_A)).unwrap();
    let checkpoint_before = std::fs::read(dirs.checkpoint()).unwrap();

    let foreign = handle("node-2", &[0], 1).replace("node-2", NODE);
    let wrong_version = good.replace(
        "fake.resource.3-shake.com/v1alpha1",
        "fake.resource.3-shake.com/v9",
    );
    let long_uid = "u".repeat(10_000);
    let cases: Vec<(String, String, &str)> = vec![
        (
            "c-node".into(),
            handle("node-2", &[0], 1),
            "is for node \"node-2\"",
        ),
        ("c-foreign".into(), foreign, "is not a device of node"),
        ("c-json".into(), "{not json".into(), "not JSON"),
        ("c-version".into(), wrong_version, "is not supported"),
        (
            "c-empty".into(),
            String::new(),
            "allocation handle is empty",
        ),
        (
            "c-split0".into(),
            good.replace("\"split\":2", "\"split\":0"),
            "split must be between 1 and 64, got 0",
        ),
        (
            "c-splitbig".into(),
            good.replace("\"split\":2", "\"split\":1000000"),
            "got 1000000",
        ),
        (
            "c-taken".into(),
            handle(NODE, &[1, 2], 1),
            "already prepared for claim default/claim-0b7c",
        ),
        (
            "../../etc/passwd".into(),
            handle(NODE, &[5], 1),
            "claim uid \"../../etc/passwd\" is invalid",
        ),
        (String::new(), handle(NODE, &[5], 1), "must not be empty"),
        (
            long_uid.clone(),
            handle(NODE, &[5], 1),
            "at most 128 characters, got 10000",
        ),
        (
            UID_A.into(),
            handle(NODE, &[6], 1),
            "is already prepared with devices",
        ),
    ];
    let mut claims: Vec<_> = cases.iter().map(|(uid, h, _)| claim(uid, h)).collect();
    // A good claim in the same batch, twice: prepared once, both answers the same.
    claims.push(claim(UID_B, &handle(NODE, &[4], 3)));
    claims.push(claim(UID_B, &handle(NODE, &[4], 3)));
    let resp = prepare(&dirs, claims).await;
    for (uid, _, msg) in &cases {
        let entry = &resp[uid];
        assert!(
            entry.error.contains(msg),
            "{}: {:?}",
            &uid[..uid.len().min(20)],
            entry.error
        );
        assert!(entry.cdi_devices.is_empty());
    }
    assert_eq!(resp[UID_B].error, "");
    assert_eq!(resp[UID_B].cdi_devices.len(), 2);

    // The first claim is untouched and nothing escaped the CDI dir.
    assert_eq!(std::fs::read(dirs.spec_path(UID_A)).unwrap(), spec_before);
    assert!(!std::path::Path::new("/etc/passwd.json").exists());
    let mut expected = vec![
        kind().spec_file_name(UID_A),
        kind().spec_file_name(UID_B),
        kind().spec_file_name("common"),
    ];
    expected.sort();
    assert_eq!(dirs.spec_files(), expected);
    assert_ne!(std::fs::read(dirs.checkpoint()).unwrap(), checkpoint_before);
    let cp = std::fs::read_to_string(dirs.checkpoint()).unwrap();
    assert!(cp.contains(UID_A) && cp.contains(UID_B));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unwritable_spec_path_fails_only_that_claim() {
    let api = start_api().await;
    let dirs = Dirs::new();
    let _plugin = Plugin::start(&dirs, opts(&api)).await;
    // A directory where the claim's spec file should go: the rename fails (as on a full
    // or read-only file system, which root cannot simulate with permissions).
    std::fs::create_dir_all(dirs.spec_path(UID_B).join("x")).unwrap();
    let resp = prepare(
        &dirs,
        vec![
            claim(UID_A, &handle(NODE, &[0], 1)),
            claim(UID_B, &handle(NODE, &[1], 1)),
        ],
    )
    .await;
    assert_eq!(resp[UID_A].error, "");
    assert!(
        resp[UID_B].error.contains("writing CDI spec"),
        "{:?}",
        resp[UID_B]
    );
    let cp = std::fs::read_to_string(dirs.checkpoint()).unwrap();
    assert!(cp.contains(UID_A) && !cp.contains(UID_B));
    // Device 1 was not taken by the failed claim.
    std::fs::remove_dir_all(dirs.spec_path(UID_B)).unwrap();
    let resp = prepare(&dirs, vec![claim(UID_B, &handle(NODE, &[1], 1))]).await;
    assert_eq!(resp[UID_B].error, "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_claims_in_one_container_see_every_device() {
    let api = start_api().await;
    let dirs = Dirs::new();
    let _plugin = Plugin::start(&dirs, opts(&api)).await;
    let resp = prepare(
        &dirs,
        vec![
            claim(UID_A, &handle(NODE, &[0, 1], 2)),
            claim(UID_B, &handle(NODE, &[2, 3, 4], 1)),
        ],
    )
    .await;
    let mut ids: Vec<String> = resp[UID_A].cdi_devices.clone();
    ids.extend(
        resp[UID_B]
            .cdi_devices
            .iter()
            .filter(|id| !ids.contains(id))
            .cloned()
            .collect::<Vec<_>>(),
    );
    let env = inject(&dirs.cdi_root, &ids);
    let inv = inventory(NODE);
    let a = children(&inv.devices[0..2], 2);
    let b = children(&inv.devices[2..5], 1);
    let key_a = fake_dra_kubelet_plugin::fake::env::claim_env_key(UID_A);
    let key_b = fake_dra_kubelet_plugin::fake::env::claim_env_key(UID_B);
    for (i, d) in a.iter().enumerate() {
        assert!(
            env.contains(&format!("FAKE_CLAIM_{key_a}_DEVICE_{i}={}", d.id)),
            "{env:?}"
        );
    }
    for (i, d) in b.iter().enumerate() {
        assert!(
            env.contains(&format!("FAKE_CLAIM_{key_b}_DEVICE_{i}={}", d.id)),
            "{env:?}"
        );
    }
    assert!(env.contains(&format!("FAKE_CLAIM_{key_a}_DEVICE_COUNT=4")));
    assert!(env.contains(&format!("FAKE_CLAIM_{key_b}_DEVICE_COUNT=3")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_restart_and_reboot_keep_prepared_claims() {
    let api = start_api().await;
    let dirs = Dirs::new();
    let plugin = Plugin::start(&dirs, opts(&api)).await;
    let h = handle(NODE, &[0, 1, 2, 3], 2);
    let first = prepare(&dirs, vec![claim(UID_A, &h)]).await;
    let spec = std::fs::read(dirs.spec_path(UID_A)).unwrap();
    let common = std::fs::read(dirs.spec_path("common")).unwrap();
    plugin.kill9();

    // An orphan spec of ours (a claim not in the checkpoint) and someone else's spec.
    std::fs::write(dirs.spec_path("orphan-uid"), b"{}").unwrap();
    std::fs::write(dirs.cdi_root.join("vendor.example-gpu_x.json"), b"{}").unwrap();
    let plugin = Plugin::start(&dirs, opts(&api)).await;
    assert!(!dirs.spec_path("orphan-uid").exists());
    assert!(dirs.cdi_root.join("vendor.example-gpu_x.json").exists());
    let again = prepare(&dirs, vec![claim(UID_A, &h)]).await;
    assert_eq!(again[UID_A].cdi_devices, first[UID_A].cdi_devices);
    // Exclusivity survives the restart.
    let other = prepare(&dirs, vec![claim(UID_B, &handle(NODE, &[3], 1))]).await;
    assert!(
        other[UID_B].error.contains("already prepared for claim"),
        "{:?}",
        other[UID_B]
    );
    plugin.kill9();

    // Reboot: /var/run/cdi is a tmpfs and comes back empty.
    std::fs::remove_dir_all(&dirs.cdi_root).unwrap();
    let _plugin = Plugin::start(&dirs, opts(&api)).await;
    assert_eq!(std::fs::read(dirs.spec_path(UID_A)).unwrap(), spec);
    assert_eq!(std::fs::read(dirs.spec_path("common")).unwrap(), common);
    let out = unprepare(&dirs, vec![claim(UID_A, &h)]).await;
    assert_eq!(out[UID_A].error, "");
    assert!(!dirs.spec_path(UID_A).exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_checkpoint_is_a_startup_error_naming_the_file() {
    let api = start_api().await;
    let dirs = Dirs::new();
    std::fs::create_dir_all(dirs.plugin_dir()).unwrap();
    std::fs::write(dirs.checkpoint(), b"{\"apiVersion\": tru").unwrap();
    let out = Plugin::command(&dirs, &opts(&api)).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&dirs.checkpoint().display().to_string()),
        "{stderr}"
    );
    assert!(stderr.contains("not a valid checkpoint"), "{stderr}");
    // Not wiped.
    assert_eq!(
        std::fs::read(dirs.checkpoint()).unwrap(),
        b"{\"apiVersion\": tru"
    );
}

/// Crash at `point` during the call `act` makes, restart, and check convergence.
async fn crash_and_converge(point: &str, prepared_before: bool, act_prepare: bool) {
    let api = start_api().await;
    let dirs = Dirs::new();
    let h = handle(NODE, &[0, 1], 2);
    if prepared_before {
        let p = Plugin::start(&dirs, opts(&api)).await;
        assert_eq!(
            prepare(&dirs, vec![claim(UID_A, &h)]).await[UID_A].error,
            ""
        );
        p.kill9();
    }
    let mut o = opts(&api);
    o.env.push(("FAKE_DRA_TEST_CRASH_POINT", point));
    let plugin = Plugin::start(&dirs, o).await;
    let mut client = v1alpha3(&dirs).await;
    let claims = vec![claim(UID_A, &h)];
    let result = if act_prepare {
        client
            .node_prepare_resources(dra_kubelet_proto::v1alpha3::NodePrepareResourcesRequest {
                claims,
            })
            .await
            .map(|_| ())
    } else {
        client
            .node_unprepare_resources(dra_kubelet_proto::v1alpha3::NodeUnprepareResourcesRequest {
                claims,
            })
            .await
            .map(|_| ())
    };
    assert!(result.is_err(), "{point}: the call must not be answered");
    assert!(
        !plugin.wait().success(),
        "{point}: the plugin must have died"
    );

    // After restart the files agree with the checkpoint, and the kubelet's retry converges.
    let _plugin = Plugin::start(&dirs, opts(&api)).await;
    let cp = std::fs::read_to_string(dirs.checkpoint()).unwrap_or_default();
    assert_eq!(
        cp.contains(UID_A),
        dirs.spec_path(UID_A).exists(),
        "{point}: checkpoint and CDI dir disagree"
    );
    if act_prepare {
        let r = prepare(&dirs, vec![claim(UID_A, &h)]).await;
        assert_eq!(r[UID_A].error, "");
        assert!(dirs.spec_path(UID_A).exists());
        assert!(
            std::fs::read_to_string(dirs.checkpoint())
                .unwrap()
                .contains(UID_A)
        );
    } else {
        let r = unprepare(&dirs, vec![claim(UID_A, &h)]).await;
        assert_eq!(r[UID_A].error, "");
        assert!(!dirs.spec_path(UID_A).exists());
        assert!(
            !std::fs::read_to_string(dirs.checkpoint())
                .unwrap()
                .contains(UID_A)
        );
        // The devices are free again.
        let r = prepare(&dirs, vec![claim(UID_B, &h)]).await;
        assert_eq!(r[UID_B].error, "");
    }
    assert!(!dirs.spec_files().iter().any(|f| f.starts_with('.')));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_after_spec_before_checkpoint_on_prepare() {
    crash_and_converge("prepare-after-spec", false, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_after_checkpoint_before_answer_on_prepare() {
    crash_and_converge("prepare-after-checkpoint", false, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_after_spec_removal_before_checkpoint_on_unprepare() {
    crash_and_converge("unprepare-after-spec", true, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_after_checkpoint_before_answer_on_unprepare() {
    crash_and_converge("unprepare-after-checkpoint", true, false).await;
}

async fn wait_for_nas(
    api: &ApiServer,
    pred: impl Fn(&NodeAllocationState) -> bool,
) -> NodeAllocationState {
    let nas: Api<NodeAllocationState> = Api::namespaced(api.client().unwrap(), NAMESPACE);
    // A hang guard, not a speed check.
    for _ in 0..600 {
        if let Some(obj) = nas.get_opt(NODE).await.unwrap()
            && pred(&obj)
        {
            return obj;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("NodeAllocationState never reached the expected state");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishes_nas_ready_then_not_ready_on_sigterm() {
    let api = start_api().await;
    let client = api.client().unwrap();
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}
    }))
    .unwrap();
    let node = nodes.create(&Default::default(), &node).await.unwrap();
    // The first status write conflicts, as with a concurrent writer.
    api.inject_fault(Fault {
        verb: FaultVerb::Update,
        plural: "nodeallocationstates".into(),
        subresource: Some("status".into()),
        code: 409,
        times: 1,
    });
    let dirs = Dirs::new();
    let plugin = Plugin::start(&dirs, opts(&api)).await;
    let nas = wait_for_nas(&api, |n| n.is_ready()).await;
    let inv = inventory(NODE);
    assert_eq!(nas.spec, inv.to_nas_spec());
    let owners = nas.metadata.owner_references.unwrap_or_default();
    assert_eq!(owners.len(), 1);
    assert_eq!(owners[0].kind, "Node");
    assert_eq!(Some(owners[0].uid.clone()), node.metadata.uid);

    assert_eq!(
        prepare(&dirs, vec![claim(UID_A, &handle(NODE, &[0], 1))]).await[UID_A].error,
        ""
    );
    let nas = wait_for_nas(&api, |n| {
        n.status
            .as_ref()
            .is_some_and(|s| s.prepared_claim_count == 1)
    })
    .await;
    assert_eq!(nas.status.unwrap().prepared_claims[0].uid, UID_A);

    let status = plugin.sigterm();
    assert!(status.success(), "{status}");
    assert!(!dirs.reg_socket().exists());
    assert!(!dirs.dra_socket().exists());
    let nas = wait_for_nas(&api, |_| true).await;
    assert_eq!(nas.status.unwrap().phase, NodePhase::NotReady);

    // Restart: stale sockets from a kill -9 are replaced, and the node is Ready again.
    std::fs::write(dirs.reg_socket(), b"stale").unwrap();
    let _plugin = Plugin::start(&dirs, opts(&api)).await;
    wait_for_nas(&api, |n| n.is_ready()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_claims_in_one_call_each_get_an_answer() {
    let api = start_api().await;
    let dirs = Dirs::new();
    let _plugin = Plugin::start(&dirs, opts(&api)).await;
    let claims: Vec<_> = (0..1000)
        .map(|i| claim(&format!("uid-{i:04}"), &handle(NODE, &[i % 8], 1)))
        .collect();
    let resp = prepare(&dirs, claims).await;
    assert_eq!(resp.len(), 1000);
    let ok: Vec<_> = resp.iter().filter(|(_, r)| r.error.is_empty()).collect();
    // Eight devices, one claim each; the rest are refused, naming the holder.
    assert_eq!(ok.len(), 8);
    assert!(
        resp.values()
            .filter(|r| !r.error.is_empty())
            .all(|r| r.error.contains("already prepared for claim"))
    );
}

async fn http_get(addr: &str, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
    let mut out = String::new();
    stream.read_to_string(&mut out).await.unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_health_readiness_and_metrics() {
    let api = start_api().await;
    let dirs = Dirs::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut o = opts(&api);
    o.env.push(("FAKE_DRA_HTTP_ADDRESS", &addr));
    let _plugin = Plugin::start(&dirs, o).await;
    assert!(
        http_get(&addr, "/healthz")
            .await
            .starts_with("HTTP/1.1 200")
    );
    wait_for_nas(&api, |n| n.is_ready()).await;
    // Published, but no kubelet registered it yet: not ready.
    let before = http_get(&addr, "/readyz").await;
    assert!(before.starts_with("HTTP/1.1 503"), "{before}");
    let mut reg = registration(&dirs).await.unwrap();
    reg.notify_registration_status(reg::RegistrationStatus {
        plugin_registered: true,
        error: String::new(),
    })
    .await
    .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let now = http_get(&addr, "/readyz").await;
        if now.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not ready after registration: {now}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let r = prepare(
        &dirs,
        vec![claim(UID_A, &handle(NODE, &[0], 1)), claim("bad", "{")],
    )
    .await;
    assert_eq!(r[UID_A].error, "");
    let metrics = http_get(&addr, "/metrics").await;
    assert!(
        metrics.contains(
            "fake_dra_kubelet_plugin_claims_total{operation=\"prepare\",result=\"success\"} 1"
        ),
        "{metrics}"
    );
    assert!(metrics.contains(
        "fake_dra_kubelet_plugin_claims_total{operation=\"prepare\",result=\"error\"} 1"
    ));
    assert!(metrics.contains(
        "fake_dra_kubelet_plugin_call_duration_seconds_count{method=\"NodePrepareResources\"} 1"
    ));
    assert!(
        metrics.contains(
            "fake_dra_kubelet_plugin_claim_errors_total{operation=\"prepare\",reason=\"bad_handle\"} 1"
        ),
        "{metrics}"
    );
    assert!(http_get(&addr, "/nope").await.starts_with("HTTP/1.1 404"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classic_mode_refuses_a_driver_name_too_long_for_the_cdi_annotation() {
    let api = start_api().await;
    let dirs = Dirs::new();
    let long = "a-very-long-driver.example.com"; // 30 characters
    let out = Plugin::command(
        &dirs,
        &Options {
            extra_args: vec![
                "--mode".into(),
                "classic".into(),
                "--driver-name".into(),
                long.into(),
            ],
            ..opts(&api)
        },
    )
    .output()
    .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(long), "{stderr}");
    assert!(stderr.contains("at most 26"), "{stderr}");
    assert!(!dirs.registry_dir().join(format!("{long}.sock")).exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_env_names_still_work_with_a_warning() {
    let api = start_api().await;
    let dirs = Dirs::new();
    let mut o = opts(&api);
    // An old name alone is used; next to its new name it is ignored.
    o.env.push(("NUM_DEVICES", "3"));
    o.env.push(("MODELS", "OLD_MODEL"));
    o.env.push(("FAKE_DRA_MODELS", "NEW_MODEL"));
    let log = dirs.root.path().join("stderr.log");
    let file = std::fs::File::create(&log).unwrap();
    let plugin = Plugin::start_with(&dirs, o, |mut cmd| {
        cmd.stderr(file);
        cmd
    })
    .await;
    let nas = wait_for_nas(&api, |n| n.is_ready()).await;
    let devices = &nas.spec.allocatable_devices;
    assert_eq!(devices.len(), 3, "{devices:?}");
    assert!(
        devices.iter().all(|d| d.model == "NEW_MODEL"),
        "{devices:?}"
    );
    drop(plugin);
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(
        stderr.contains(
            "environment variable NUM_DEVICES is deprecated and will stop working in the next release; set FAKE_DRA_NUM_DEVICES instead"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("environment variable MODELS is ignored because FAKE_DRA_MODELS is set"),
        "{stderr}"
    );
}

/// D35: a start error after the plugin had begun its work (here the HTTP port taken) left
/// the DeviceFault watch and the slice publisher running until the process ended: with
/// `--log-format json` the fatal error was followed by "watching DeviceFaults failed (is
/// the devicefaults CRD installed?)". What can fail at start is checked before any of them
/// starts: the error is the plugin's last word and nothing was published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_error_is_the_last_word_and_publishes_nothing() {
    // No driver CRDs: a DeviceFault watch, were it started, fails at once.
    let api = start_api_with((1, 34), Vec::new(), &[NAMESPACE]).await;
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    for _ in 0..3 {
        let dirs = Dirs::new();
        let out = Plugin::command(
            &dirs,
            &Options {
                extra_args: vec![
                    "--log-format".into(),
                    "json".into(),
                    "--http-address".into(),
                    addr.clone(),
                ],
                env: vec![("RUST_LOG", "info")],
                ..opts(&api)
            },
        )
        .output()
        .unwrap();
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr.lines().last().unwrap_or_default();
        assert!(
            last.contains("\"level\":\"ERROR\"") && last.contains("Address already in use"),
            "{stderr}"
        );
        assert!(!stderr.contains("DeviceFault"), "{stderr}");
        let slices: Api<k8s_openapi::api::resource::v1::ResourceSlice> =
            Api::all(api.client().unwrap());
        let listed = slices.list(&Default::default()).await.unwrap();
        assert!(listed.items.is_empty(), "{:?}", listed.items);
    }
}
