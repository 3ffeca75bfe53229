//! The emulated apiserver's rules, driven through real kube-rs clients over HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use fake_dra_api::params::{FakeClaimParameters, FakeClaimParametersSpec};
use fake_dra_emulator::apiserver::{ApiServer, ApiServerOptions, Fault, FaultVerb};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{
    Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

async fn server() -> (ApiServer, kube::Client) {
    // The fake-dra CRDs serve as a CRD with a schema to validate against.
    let server = ApiServer::start_with(ApiServerOptions {
        crds: fake_dra_api::crdgen::yaml_documents().expect("the driver's CRDs"),
        ..ApiServerOptions::default()
    })
    .await
    .expect("start the emulated apiserver");
    let client = server.client().expect("client");
    (server, client)
}

fn config_map(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("k".to_string(), "v".to_string())])),
        ..Default::default()
    }
}

fn api_error(result: Result<impl std::fmt::Debug, kube::Error>) -> Box<kube::core::Status> {
    match result {
        Err(kube::Error::Api(status)) => status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Polls until `check` holds. The deadline only turns a hang into a failure; nothing here
/// asserts on speed.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..600 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("gave up waiting for: {what}");
}

#[tokio::test]
async fn create_fills_metadata_and_generate_name() {
    let (_server, client) = server().await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let created = cms
        .create(&PostParams::default(), &config_map("a"))
        .await
        .unwrap();
    let meta = &created.metadata;
    assert!(
        meta.uid.as_deref().is_some_and(|u| u.len() == 36),
        "uid: {:?}",
        meta.uid
    );
    assert!(meta.creation_timestamp.is_some());
    assert!(
        meta.resource_version
            .as_deref()
            .is_some_and(|rv| rv.parse::<u64>().is_ok())
    );

    let generated = ConfigMap {
        metadata: ObjectMeta {
            generate_name: Some("gen-".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let g1 = cms
        .create(&PostParams::default(), &generated)
        .await
        .unwrap();
    let g2 = cms
        .create(&PostParams::default(), &generated)
        .await
        .unwrap();
    let (n1, n2) = (g1.metadata.name.unwrap(), g2.metadata.name.unwrap());
    assert!(
        n1.starts_with("gen-") && n1.len() == "gen-".len() + 5,
        "{n1}"
    );
    assert_ne!(n1, n2);
    assert_eq!(
        cms.list(&ListParams::default()).await.unwrap().items.len(),
        3
    );
}

#[tokio::test]
async fn stale_resource_version_on_put_is_a_conflict() {
    let (_server, client) = server().await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let first = cms
        .create(&PostParams::default(), &config_map("a"))
        .await
        .unwrap();
    let mut second = first.clone();
    second.data = Some(BTreeMap::from([("k".to_string(), "v2".to_string())]));
    let updated = cms
        .replace("a", &PostParams::default(), &second)
        .await
        .unwrap();
    assert_ne!(
        updated.metadata.resource_version,
        first.metadata.resource_version
    );

    let mut stale = first.clone();
    stale.data = Some(BTreeMap::from([("k".to_string(), "lost".to_string())]));
    let status = api_error(cms.replace("a", &PostParams::default(), &stale).await);
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert!(
        status.message.contains("the object has been modified"),
        "{}",
        status.message
    );
    assert_eq!(
        cms.get("a").await.unwrap().data.unwrap()["k"],
        "v2",
        "a rejected write changed nothing"
    );
}

#[tokio::test]
async fn create_existing_delete_missing_patch_missing() {
    let (_server, client) = server().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.create(&PostParams::default(), &config_map("a"))
        .await
        .unwrap();
    let status = api_error(cms.create(&PostParams::default(), &config_map("a")).await);
    assert_eq!(
        (status.code, status.reason.as_str()),
        (409, "AlreadyExists")
    );
    assert_eq!(status.message, r#"configmaps "a" already exists"#);

    let status = api_error(cms.delete("missing", &DeleteParams::default()).await);
    assert_eq!((status.code, status.reason.as_str()), (404, "NotFound"));
    assert_eq!(status.message, r#"configmaps "missing" not found"#);

    let status = api_error(
        cms.patch(
            "missing",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"x": "y"}})),
        )
        .await,
    );
    assert_eq!(status.code, 404);

    let missing_ns: Api<ConfigMap> = Api::namespaced(client, "nowhere");
    let status = api_error(
        missing_ns
            .create(&PostParams::default(), &config_map("a"))
            .await,
    );
    assert_eq!(
        status.code, 404,
        "NamespaceLifecycle refuses creates in a missing namespace: {}",
        status.message
    );
}

#[tokio::test]
async fn invalid_json_and_unknown_paths_are_refused_with_status_bodies() {
    let (server, client) = server().await;
    let request = http::Request::post(format!(
        "{}/api/v1/namespaces/default/configmaps",
        server.url()
    ))
    .header("content-type", "application/json")
    .body(b"{\"metadata\": {\"name\": ".to_vec())
    .unwrap();
    let status = api_error(client.request::<ConfigMap>(request).await);
    assert_eq!(status.code, 400, "{}", status.message);

    let request = http::Request::get(format!("{}/apis/nope.example.com/v1/widgets", server.url()))
        .body(Vec::new())
        .unwrap();
    let status = api_error(client.request::<serde_json::Value>(request).await);
    assert_eq!((status.code, status.reason.as_str()), (404, "NotFound"));

    let request = http::Request::get(format!(
        "{}/api/v1/namespaces/default/pods/p/exec",
        server.url()
    ))
    .body(Vec::new())
    .unwrap();
    let status = api_error(client.request::<serde_json::Value>(request).await);
    assert!(
        status.code >= 400,
        "an unimplemented subresource must fail loudly, got {}",
        status.code
    );
}

#[tokio::test]
async fn fake_claim_parameters_are_validated_by_the_crd_schema() {
    let (server, client) = server().await;
    let params: Api<FakeClaimParameters> = Api::namespaced(client.clone(), "default");
    let ok = params
        .create(
            &PostParams::default(),
            &FakeClaimParameters::new(
                "ok",
                FakeClaimParametersSpec {
                    count: 4,
                    split: 2,
                    selector: None,
                },
            ),
        )
        .await
        .unwrap();
    assert_eq!((ok.spec.count, ok.spec.split), (4, 2));

    // Defaults come from the schema when a field is absent.
    let raw: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client,
        "default",
        &kube::api::ApiResource::erase::<FakeClaimParameters>(&()),
    );
    let defaulted: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "fake.resource.3-shake.com/v1alpha1", "kind": "FakeClaimParameters",
        "metadata": {"name": "defaults"}, "spec": {}
    }))
    .unwrap();
    let stored = raw
        .create(&PostParams::default(), &defaulted)
        .await
        .unwrap();
    assert_eq!(stored.data["spec"], json!({"count": 1, "split": 1}));

    for (value, expected) in [
        (json!(0), "should be greater than or equal to 1"),
        (json!(-1), "should be greater than or equal to 1"),
        (json!("4"), "must be of type integer"),
        (json!(4.5), "must be of type integer"),
        (json!(1_000_000_000), "should be less than or equal to"),
    ] {
        let bad: kube::api::DynamicObject = serde_json::from_value(json!({
            "apiVersion": "fake.resource.3-shake.com/v1alpha1", "kind": "FakeClaimParameters",
            "metadata": {"name": "bad"}, "spec": {"count": value}
        }))
        .unwrap();
        let status = api_error(raw.create(&PostParams::default(), &bad).await);
        assert_eq!(
            (status.code, status.reason.as_str()),
            (422, "Invalid"),
            "count {value}: {}",
            status.message
        );
        assert!(
            status.message.contains("spec.count") && status.message.contains(expected),
            "count {value}: {}",
            status.message
        );
    }
    assert!(
        raw.get_opt("bad").await.unwrap().is_none(),
        "nothing invalid was stored"
    );
    drop(server);
}

#[tokio::test]
async fn concurrent_writers_get_exactly_one_winner_per_version() {
    let (_server, client) = server().await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let base = cms
        .create(&PostParams::default(), &config_map("contended"))
        .await
        .unwrap();

    // 100 writers all holding the same resourceVersion: one wins, 99 get 409.
    let writers = (0..100).map(|i| {
        let cms = cms.clone();
        let mut mine = base.clone();
        mine.data = Some(BTreeMap::from([("k".to_string(), format!("writer-{i}"))]));
        async move {
            cms.replace("contended", &PostParams::default(), &mine)
                .await
        }
    });
    let results = futures::future::join_all(writers).await;
    let winners: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(winners.len(), 1);
    assert!(
        results
            .iter()
            .filter_map(|r| r.as_ref().err())
            .all(|e| matches!(e, kube::Error::Api(s) if s.code == 409))
    );
    assert_eq!(cms.get("contended").await.unwrap().data, winners[0].data);

    // 100 writers that retry on conflict: every increment lands exactly once.
    let incrementers = (0..100).map(|_| {
        let cms = cms.clone();
        async move {
            loop {
                let mut current = cms.get("contended").await.unwrap();
                let data = current.data.get_or_insert_with(BTreeMap::new);
                let n: u32 = data.get("n").and_then(|v| v.parse().ok()).unwrap_or(0);
                data.insert("n".into(), (n + 1).to_string());
                match cms
                    .replace("contended", &PostParams::default(), &current)
                    .await
                {
                    Ok(_) => return,
                    Err(kube::Error::Api(s)) if s.code == 409 => continue,
                    Err(e) => panic!("unexpected error: {e}"),
                }
            }
        }
    });
    futures::future::join_all(incrementers).await;
    assert_eq!(
        cms.get("contended").await.unwrap().data.unwrap()["n"],
        "100"
    );
}

#[tokio::test]
async fn finalizers_hold_deletion_until_removed() {
    let (_server, client) = server().await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let mut cm = config_map("held");
    cm.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    cms.create(&PostParams::default(), &cm).await.unwrap();
    cms.delete("held", &DeleteParams::default()).await.unwrap();
    let terminating = cms.get("held").await.unwrap();
    assert!(terminating.metadata.deletion_timestamp.is_some());

    // New finalizers cannot be added once deletion started, but data may still change.
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "still-writable"}})),
    )
    .await
    .unwrap();
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(
        cms.get_opt("held").await.unwrap().is_none(),
        "removing the last finalizer deletes the object"
    );
}

#[tokio::test]
async fn owner_references_are_garbage_collected() {
    let (_server, client) = server().await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let owner = cms
        .create(&PostParams::default(), &config_map("owner"))
        .await
        .unwrap();
    let mut dependent = config_map("dependent");
    dependent.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: "owner".into(),
        uid: owner.metadata.uid.clone().unwrap(),
        ..Default::default()
    }]);
    cms.create(&PostParams::default(), &dependent)
        .await
        .unwrap();
    let mut orphan_to_be = config_map("unrelated");
    orphan_to_be.metadata.owner_references = None;
    cms.create(&PostParams::default(), &orphan_to_be)
        .await
        .unwrap();

    cms.delete("owner", &DeleteParams::default()).await.unwrap();
    eventually("the dependent is collected", || async {
        cms.get_opt("dependent").await.unwrap().is_none()
    })
    .await;
    assert!(cms.get_opt("unrelated").await.unwrap().is_some());
}

#[tokio::test]
async fn label_and_field_selectors_filter_lists() {
    let (_server, client) = server().await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    for (name, tier) in [("a", "web"), ("b", "db"), ("c", "web")] {
        let mut cm = config_map(name);
        cm.metadata.labels = Some(BTreeMap::from([("tier".to_string(), tier.to_string())]));
        cms.create(&PostParams::default(), &cm).await.unwrap();
    }
    let names = |list: kube::core::ObjectList<ConfigMap>| {
        list.items
            .into_iter()
            .map(|c| c.metadata.name.unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(
            cms.list(&ListParams::default().labels("tier=web"))
                .await
                .unwrap()
        ),
        ["a", "c"]
    );
    assert_eq!(
        names(
            cms.list(&ListParams::default().labels("tier!=web"))
                .await
                .unwrap()
        ),
        ["b"]
    );
    assert_eq!(
        names(
            cms.list(&ListParams::default().labels("tier in (db,cache)"))
                .await
                .unwrap()
        ),
        ["b"]
    );
    assert_eq!(
        names(
            cms.list(&ListParams::default().fields("metadata.name=c"))
                .await
                .unwrap()
        ),
        ["c"]
    );
    let status = api_error(cms.list(&ListParams::default().fields("data.k=v")).await);
    assert_eq!(
        status.code, 400,
        "unsupported field selectors are refused: {}",
        status.message
    );
}

#[tokio::test]
async fn merge_and_json_patches() {
    let (_server, client) = server().await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    cms.create(&PostParams::default(), &config_map("p"))
        .await
        .unwrap();
    let merged = cms
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"extra": "1", "k": null}})),
        )
        .await
        .unwrap();
    assert_eq!(
        merged.data.unwrap(),
        BTreeMap::from([("extra".to_string(), "1".to_string())])
    );
    let ops: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/data/extra", "value": "1"},
        {"op": "replace", "path": "/data/extra", "value": "2"}
    ]))
    .unwrap();
    let patched = cms
        .patch("p", &PatchParams::default(), &Patch::Json::<()>(ops))
        .await
        .unwrap();
    assert_eq!(patched.data.unwrap()["extra"], "2");
    let failing: json_patch::Patch =
        serde_json::from_value(json!([{"op": "test", "path": "/data/extra", "value": "1"}]))
            .unwrap();
    let status = api_error(
        cms.patch("p", &PatchParams::default(), &Patch::Json::<()>(failing))
            .await,
    );
    assert_eq!(status.code, 422, "{}", status.message);
}

#[tokio::test]
async fn status_subresource_splits_spec_and_status_writes() {
    let (_server, client) = server().await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta {
                    name: Some("fake-dra".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let nas: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client,
        "fake-dra",
        &kube::api::ApiResource::erase::<fake_dra_api::nas::NodeAllocationState>(&()),
    );
    let object: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "nas.fake.resource.3-shake.com/v1alpha1", "kind": "NodeAllocationState",
        "metadata": {"name": "node-a"},
        "spec": {"allocatableDevices": [{"id": "FAKE-00000000-0000-0000-0000-000000000001", "model": "ULTRA_10"}]},
        "status": {"phase": "Ready"}
    }))
    .unwrap();
    let created = nas.create(&PostParams::default(), &object).await.unwrap();
    assert!(
        created.data.get("status").is_none(),
        "status is ignored on create when the status subresource is enabled"
    );
    let with_status = nas
        .patch_status(
            "node-a",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"phase": "Ready"}, "spec": {"allocatableDevices": []}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(with_status.data["status"]["phase"], "Ready");
    assert_eq!(
        with_status.data["spec"]["allocatableDevices"]
            .as_array()
            .map(Vec::len),
        Some(1),
        "the status subresource ignores spec"
    );
    let spec_write = nas
        .patch(
            "node-a",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "NotReady"}})),
        )
        .await
        .unwrap();
    assert_eq!(
        spec_write.data["status"]["phase"], "Ready",
        "the main resource ignores status"
    );
}

#[tokio::test]
async fn injected_faults_fail_the_next_matching_write_only() {
    let (server, client) = server().await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    cms.create(&PostParams::default(), &config_map("f"))
        .await
        .unwrap();
    server.inject_fault(Fault {
        verb: FaultVerb::Modify,
        plural: "configmaps".into(),
        subresource: None,
        code: 409,
        times: 1,
    });
    let status = api_error(
        cms.patch(
            "f",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "x"}})),
        )
        .await,
    );
    assert_eq!(status.code, 409);
    assert_eq!(cms.get("f").await.unwrap().data.unwrap()["k"], "v");
    cms.patch(
        "f",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "x"}})),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn server_side_apply_tracks_managers_and_conflicts() {
    let (_server, client) = server().await;
    let leases: Api<Lease> = Api::namespaced(client, "default");
    let applied = json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "leader"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}
    });
    let created = leases
        .patch(
            "leader",
            &PatchParams::apply("manager-a"),
            &Patch::Apply(&applied),
        )
        .await
        .unwrap();
    assert_eq!(created.spec.unwrap().holder_identity.as_deref(), Some("a"));

    let takeover = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "leader"}, "spec": {"holderIdentity": "b"}});
    let status = api_error(
        leases
            .patch(
                "leader",
                &PatchParams::apply("manager-b"),
                &Patch::Apply(&takeover),
            )
            .await,
    );
    assert_eq!(
        status.code, 409,
        "a field owned by another manager conflicts without force: {}",
        status.message
    );
    assert!(status.message.contains("manager-a"), "{}", status.message);

    let forced = leases
        .patch(
            "leader",
            &PatchParams::apply("manager-b").force(),
            &Patch::Apply(&takeover),
        )
        .await
        .unwrap();
    assert_eq!(
        forced.spec.as_ref().unwrap().holder_identity.as_deref(),
        Some("b")
    );
    assert_eq!(
        forced.spec.unwrap().lease_duration_seconds,
        Some(15),
        "fields of other managers are kept"
    );

    // kube-lease-manager renews with strategic merge patches.
    let renewed = leases
        .patch(
            "leader",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"leaseTransitions": 1}})),
        )
        .await
        .unwrap();
    assert_eq!(renewed.spec.unwrap().lease_transitions, Some(1));
}

#[tokio::test]
async fn raw_watch_from_a_compacted_version_gets_410() {
    let (server, client) = server().await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let first = cms
        .create(&PostParams::default(), &config_map("a"))
        .await
        .unwrap();
    cms.create(&PostParams::default(), &config_map("b"))
        .await
        .unwrap();
    server.compact();
    let old_rv = first.metadata.resource_version.unwrap();
    let mut stream = cms
        .watch(&WatchParams::default(), &old_rv)
        .await
        .unwrap()
        .boxed();
    match stream.next().await {
        Some(Ok(WatchEvent::Error(status))) => assert_eq!(status.code, 410, "{}", status.message),
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
}

#[tokio::test]
async fn watcher_relists_after_compaction_and_sees_every_object() {
    let (server, client) = server().await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    cms.create(&PostParams::default(), &config_map("before"))
        .await
        .unwrap();
    let (seen_tx, mut seen_rx) = tokio::sync::mpsc::unbounded_channel();
    let watch = tokio::spawn(async move {
        let stream = watcher(cms.clone(), watcher::Config::default())
            .default_backoff()
            .applied_objects();
        futures::pin_mut!(stream);
        while let Some(cm) = stream.try_next().await.unwrap() {
            if seen_tx.send(cm.metadata.name.unwrap()).is_err() {
                break;
            }
        }
    });
    assert_eq!(seen_rx.recv().await.as_deref(), Some("before"));

    let cms: Api<ConfigMap> = Api::namespaced(server.client().unwrap(), "default");
    cms.create(&PostParams::default(), &config_map("during"))
        .await
        .unwrap();
    assert_eq!(seen_rx.recv().await.as_deref(), Some("during"));

    // Compaction ends the watch; the watcher's resume from its last version gets 410 and
    // it must relist, then keep watching.
    server.compact();
    cms.create(&PostParams::default(), &config_map("after"))
        .await
        .unwrap();
    let mut names = Vec::new();
    while !names.iter().any(|n| n == "after") {
        names.push(seen_rx.recv().await.unwrap());
    }
    watch.abort();
}

#[tokio::test]
async fn resource_claims_follow_the_v1alpha2_rules() {
    use fake_dra_api::upstream::v1alpha2::ResourceClaim;
    let (_server, client) = server().await;
    let claims: Api<ResourceClaim> = Api::namespaced(client, "default");
    let claim: ResourceClaim = serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1alpha2", "kind": "ResourceClaim",
        "metadata": {"name": "c"},
        "spec": {"resourceClassName": "fake.3-shake.com"}
    }))
    .unwrap();
    let created = claims.create(&PostParams::default(), &claim).await.unwrap();
    assert_eq!(
        created.spec.allocation_mode(),
        fake_dra_api::upstream::v1alpha2::AllocationMode::WaitForFirstConsumer,
        "the API defaults allocationMode"
    );

    let status = api_error(
        claims
            .patch(
                "c",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"resourceClassName": "other"}})),
            )
            .await,
    );
    assert_eq!(
        status.code, 422,
        "claim spec is immutable: {}",
        status.message
    );

    let status = api_error(
        claims
            .patch_status(
                "c",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"deallocationRequested": true}})),
            )
            .await,
    );
    assert!(
        status.message.contains("allocated claim"),
        "deallocation needs an allocation: {}",
        status.message
    );
    let allocation = json!({"status": {"driverName": "fake.resource.3-shake.com", "allocation": {"shareable": true, "resourceHandles": [{"driverName": "fake.resource.3-shake.com", "data": "{}"}]}}});
    claims
        .patch_status("c", &PatchParams::default(), &Patch::Merge(allocation))
        .await
        .unwrap();
    claims
        .patch_status(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"deallocationRequested": true}})),
        )
        .await
        .unwrap();
    let consumer = json!({"status": {"reservedFor": [{"resource": "pods", "name": "p", "uid": "00000000-0000-0000-0000-000000000001"}]}});
    let status = api_error(
        claims
            .patch_status("c", &PatchParams::default(), &Patch::Merge(consumer))
            .await,
    );
    assert_eq!(status.code, 422);
    assert!(
        status.message.contains("status.reservedFor"),
        "{}",
        status.message
    );
}

/// What a default kube-apiserver fills in on create, which `kubectl get -o yaml` and the
/// ALLOCATIONMODE column show (issue 35 item 9): the pod spec's defaults, the Priority and
/// DefaultTolerationSeconds admission plugins', and a classic claim's allocation mode.
#[tokio::test]
async fn created_objects_get_the_apiserver_defaults() {
    let (_server, client) = server().await;
    let resource = |group: &str, version: &str, kind: &str, plural: &str| kube::api::ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: if group.is_empty() {
            version.into()
        } else {
            format!("{group}/{version}")
        },
        kind: kind.into(),
        plural: plural.into(),
    };
    let pods: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &resource("", "v1", "Pod", "pods"),
    );
    let pod = |name: &str, extra: serde_json::Value| {
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [
                {"name": "pinned", "image": "busybox:1.36"},
                {"name": "floating", "image": "registry:5000/busybox"}]}});
        for (k, v) in extra.as_object().cloned().unwrap_or_default() {
            pod["spec"][k] = v;
        }
        serde_json::from_value::<kube::api::DynamicObject>(pod).unwrap()
    };
    let created = pods
        .create(&PostParams::default(), &pod("plain", json!({})))
        .await
        .unwrap();
    let spec = &created.data["spec"];
    assert_eq!(spec["dnsPolicy"], "ClusterFirst");
    assert_eq!(spec["enableServiceLinks"], true);
    assert_eq!(spec["priority"], 0);
    assert_eq!(spec["preemptionPolicy"], "PreemptLowerPriority");
    assert_eq!(spec["containers"][0]["imagePullPolicy"], "IfNotPresent");
    assert_eq!(spec["containers"][1]["imagePullPolicy"], "Always");
    assert_eq!(
        spec["containers"][0]["terminationMessagePath"],
        "/dev/termination-log"
    );
    assert_eq!(
        spec["tolerations"],
        json!([
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
        ])
    );
    // A pod that tolerates everything already gets no more; what the user set is kept.
    let created = pods
        .create(
            &PostParams::default(),
            &pod(
                "tolerant",
                json!({"tolerations": [{"operator": "Exists"}], "dnsPolicy": "Default"}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        created.data["spec"]["tolerations"],
        json!([{"operator": "Exists"}])
    );
    assert_eq!(created.data["spec"]["dnsPolicy"], "Default");

    let claims: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client,
        "default",
        &resource(
            "resource.k8s.io",
            "v1alpha2",
            "ResourceClaim",
            "resourceclaims",
        ),
    );
    let claim = |name: &str, spec: serde_json::Value| {
        serde_json::from_value::<kube::api::DynamicObject>(json!({
            "apiVersion": "resource.k8s.io/v1alpha2", "kind": "ResourceClaim",
            "metadata": {"name": name}, "spec": spec}))
        .unwrap()
    };
    let created = claims
        .create(
            &PostParams::default(),
            &claim("c", json!({"resourceClassName": "fake.3-shake.com"})),
        )
        .await
        .unwrap();
    assert_eq!(
        created.data["spec"]["allocationMode"],
        "WaitForFirstConsumer"
    );
    let created = claims
        .create(
            &PostParams::default(),
            &claim(
                "i",
                json!({"resourceClassName": "fake.3-shake.com", "allocationMode": "Immediate"}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(created.data["spec"]["allocationMode"], "Immediate");
}

/// A raw request (bodies with duplicate keys cannot be built from typed objects): the
/// status, the `Warning` headers' texts and the body.
async fn raw(
    client: &kube::Client,
    method: http::Method,
    uri: &str,
    content_type: &str,
    body: &str,
) -> (u16, Vec<String>, serde_json::Value) {
    use http_body_util::BodyExt;
    let request = http::Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", content_type)
        .body(kube::client::Body::from(body.as_bytes().to_vec()))
        .unwrap();
    let response = client.send(request).await.unwrap();
    let status = response.status().as_u16();
    let warnings = response
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| {
            let v = v.to_str().unwrap();
            // `299 - "text"`, the text with \" and \\ escaped.
            let text = v
                .strip_prefix("299 - \"")
                .unwrap()
                .strip_suffix('"')
                .unwrap();
            text.replace("\\\"", "\"").replace("\\\\", "\\")
        })
        .collect();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let body = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
    (status, warnings, body)
}

const JSON: &str = "application/json";

/// `fieldValidation` as kube-apiserver answers it: Strict refuses naming every unknown or
/// duplicate field, Warn (also the default) and Ignore accept and drop the unknown ones,
/// Warn saying so in `Warning` headers.
#[tokio::test]
async fn field_validation_strict_warn_and_ignore() {
    let (server, client) = server().await;
    let url = format!("{}/api/v1/namespaces/default/configmaps", server.url());
    let body = |name: &str| {
        format!(
            r#"{{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {{"name": "{name}", "labelz": {{}}}},
               "data": {{"a": "1", "a": "2"}}, "dta": {{"b": "2"}}}}"#
        )
    };
    let (code, _, status) = raw(
        &client,
        http::Method::POST,
        &format!("{url}?fieldValidation=Strict"),
        JSON,
        &body("strict"),
    )
    .await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(status["reason"], "BadRequest");
    assert_eq!(
        status["message"],
        "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: \
         duplicate field \"data.a\", unknown field \"dta\", unknown field \"metadata.labelz\""
    );
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    assert!(cms.get_opt("strict").await.unwrap().is_none());

    let expected = vec![
        "duplicate field \"data.a\"".to_string(),
        "unknown field \"dta\"".to_string(),
        "unknown field \"metadata.labelz\"".to_string(),
    ];
    for (query, name, warned) in [
        ("?fieldValidation=Warn", "warn", true),
        ("", "default", true),
        ("?fieldValidation=Ignore", "ignore", false),
    ] {
        let (code, warnings, created) = raw(
            &client,
            http::Method::POST,
            &format!("{url}{query}"),
            JSON,
            &body(name),
        )
        .await;
        assert_eq!(code, 201, "{created}");
        assert_eq!(
            warnings,
            if warned { expected.clone() } else { Vec::new() },
            "{query}"
        );
        // The last of a duplicate wins; unknown fields are not stored.
        assert_eq!(created["data"], json!({"a": "2"}));
        assert!(created.get("dta").is_none() && created["metadata"].get("labelz").is_none());
    }

    // A merge patch is checked on the object it makes, its own duplicates first.
    let (code, _, status) = raw(
        &client,
        http::Method::PATCH,
        &format!("{url}/warn?fieldValidation=Strict"),
        "application/merge-patch+json",
        r#"{"data": {"x": "1", "x": "2"}, "spec": {"oops": true}}"#,
    )
    .await;
    assert_eq!(code, 400);
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .ends_with("strict decoding error: duplicate field \"data.x\", unknown field \"spec\""),
        "{status}"
    );
    // A JSON patch's own operations are checked too.
    let (code, warnings, _) = raw(
        &client,
        http::Method::PATCH,
        &format!("{url}/warn?fieldValidation=Warn"),
        "application/json-patch+json",
        r#"[{"op": "add", "path": "/data/y", "value": "1", "foo": 1}, {"op": "add", "path": "/metadata/bogus", "value": 1}]"#,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(
        warnings,
        vec![
            "json patch unknown field \"[0].foo\"".to_string(),
            "unknown field \"metadata.bogus\"".to_string()
        ]
    );
    // Server-side apply: its YAML too.
    let (code, _, status) = raw(
        &client,
        http::Method::PATCH,
        &format!("{url}/applied?fieldManager=me&fieldValidation=Strict"),
        "application/apply-patch+yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\ndata:\n  a: \"1\"\n  a: \"2\"\ndta: 1\n",
    )
    .await;
    assert_eq!(code, 400, "{status}");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .ends_with("strict decoding error: duplicate field \"data.a\", unknown field \"dta\""),
        "{status}"
    );
    // Custom resources: the CRD schema says what is known.
    let (code, _, status) = raw(
        &client,
        http::Method::POST,
        &format!(
            "{}/apis/fake.resource.3-shake.com/v1alpha1/namespaces/default/fakeclaimparameters?fieldValidation=Strict",
            server.url()
        ),
        JSON,
        r#"{"apiVersion": "fake.resource.3-shake.com/v1alpha1", "kind": "FakeClaimParameters",
            "metadata": {"name": "p"}, "spec": {"count": 2, "cont": 4, "selector": {"modle": "x"}}}"#,
    )
    .await;
    assert_eq!(code, 400, "{status}");
    assert!(
        status["message"].as_str().unwrap().ends_with(
            "strict decoding error: unknown field \"spec.cont\", unknown field \"spec.selector.modle\""
        ),
        "{status}"
    );
    let (code, _, status) = raw(
        &client,
        http::Method::POST,
        &format!("{url}?fieldValidation=Sometimes"),
        JSON,
        &body("bad-mode"),
    )
    .await;
    assert_eq!(code, 400, "{status}");
}

/// core/v1 and events.k8s.io/v1 Events are one store served through both APIs, converted
/// as upstream converts them, with each API's field selectors.
#[tokio::test]
async fn events_are_one_store_served_through_both_apis() {
    use k8s_openapi::api::core::v1::{Event as CoreEvent, EventSource, ObjectReference};
    use k8s_openapi::api::events::v1::Event as NewEvent;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    let (_server, client) = server().await;
    let regarding = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some("pod0".into()),
        namespace: Some("default".into()),
        uid: Some("uid-0".into()),
        ..Default::default()
    };
    let core_api: Api<CoreEvent> = Api::namespaced(client.clone(), "default");
    let new_api: Api<NewEvent> = Api::namespaced(client.clone(), "default");
    let mut core_watch = core_api
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    let written_new = new_api
        .create(
            &PostParams::default(),
            &NewEvent {
                metadata: ObjectMeta {
                    name: Some("from-new".into()),
                    ..Default::default()
                },
                event_time: Some(MicroTime(jiff::Timestamp::now())),
                action: Some("Allocate".into()),
                reason: Some("InvalidParameters".into()),
                note: Some("spec.count must be between 1 and 128".into()),
                type_: Some("Warning".into()),
                regarding: Some(regarding.clone()),
                reporting_controller: Some("fake.resource.3-shake.com-controller".into()),
                reporting_instance: Some("ctl-0".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    core_api
        .create(
            &PostParams::default(),
            &CoreEvent {
                metadata: ObjectMeta {
                    name: Some("from-core".into()),
                    ..Default::default()
                },
                involved_object: regarding.clone(),
                reason: Some("FailedScheduling".into()),
                message: Some("0/2 nodes are available".into()),
                source: Some(EventSource {
                    component: Some("default-scheduler".into()),
                    host: None,
                }),
                count: Some(3),
                type_: Some("Warning".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();

    // The event written through events.k8s.io, read through core/v1 as kubectl describe
    // reads it.
    let by_pod = ListParams::default().fields(
        "involvedObject.name=pod0,involvedObject.namespace=default,involvedObject.uid=uid-0",
    );
    let core_list = core_api.list(&by_pod).await.unwrap().items;
    assert_eq!(core_list.len(), 2, "{core_list:?}");
    let converted = core_list
        .iter()
        .find(|e| e.metadata.name.as_deref() == Some("from-new"))
        .unwrap();
    assert_eq!(
        converted.message.as_deref(),
        Some("spec.count must be between 1 and 128")
    );
    assert_eq!(converted.involved_object, regarding);
    assert_eq!(
        converted.reporting_component.as_deref(),
        Some("fake.resource.3-shake.com-controller")
    );
    assert_eq!(converted.metadata.uid, written_new.metadata.uid);
    assert_eq!(
        converted.metadata.resource_version,
        written_new.metadata.resource_version
    );
    // And the other way, with events.k8s.io's selector names.
    let new_list = new_api
        .list(&ListParams::default().fields("regarding.name=pod0,reason=FailedScheduling"))
        .await
        .unwrap()
        .items;
    assert_eq!(new_list.len(), 1, "{new_list:?}");
    assert_eq!(new_list[0].note.as_deref(), Some("0/2 nodes are available"));
    assert_eq!(new_list[0].deprecated_count, Some(3));
    assert_eq!(
        new_list[0]
            .deprecated_source
            .as_ref()
            .and_then(|s| s.component.as_deref()),
        Some("default-scheduler")
    );
    assert_eq!(
        core_api
            .list(&ListParams::default().fields("involvedObject.kind=ResourceClaim"))
            .await
            .unwrap()
            .items
            .len(),
        0
    );
    // A watch of one API sees what was written through the other.
    let first = tokio::time::timeout(Duration::from_secs(60), core_watch.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    match first {
        WatchEvent::Added(e) => assert_eq!(e.metadata.name.as_deref(), Some("from-new")),
        other => panic!("{other:?}"),
    }
    // One object: deleting it through one API deletes it from the other.
    core_api
        .delete("from-new", &DeleteParams::default())
        .await
        .unwrap();
    assert!(new_api.get_opt("from-new").await.unwrap().is_none());
}

fn widget_crd(schema: serde_json::Value, versions: &[(&str, bool)]) -> serde_json::Value {
    let versions: Vec<serde_json::Value> = versions
        .iter()
        .map(|(name, storage)| {
            json!({"name": name, "served": true, "storage": storage,
                   "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": schema}}}})
        })
        .collect();
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                 "versions": versions},
    })
}

/// An updated CRD is served as it now reads: new fields are kept and validated, new
/// versions are served; group, plural and scope cannot change.
#[tokio::test]
async fn crd_update_takes_its_new_schema() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{ApiResource, DynamicObject};
    let (_server, client) = server().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(widget_crd(
        json!({"type": "object", "properties": {"a": {"type": "string"}}}),
        &[("v1", true)],
    ))
    .unwrap();
    crds.create(&PostParams::default(), &crd).await.unwrap();
    let widgets = |version: &str| -> Api<DynamicObject> {
        let resource = ApiResource {
            group: "example.com".into(),
            version: version.into(),
            api_version: format!("example.com/{version}"),
            kind: "Widget".into(),
            plural: "widgets".into(),
        };
        Api::namespaced_with(client.clone(), "default", &resource)
    };
    let widget = |name: &str, spec: serde_json::Value, version: &str| -> DynamicObject {
        serde_json::from_value(
            json!({"apiVersion": format!("example.com/{version}"), "kind": "Widget",
                                      "metadata": {"name": name}, "spec": spec}),
        )
        .unwrap()
    };
    let first = widgets("v1")
        .create(
            &PostParams::default(),
            &widget("w1", json!({"a": "x", "b": 5}), "v1"),
        )
        .await
        .unwrap();
    assert_eq!(
        first.data["spec"],
        json!({"a": "x"}),
        "b is not in the schema yet"
    );

    // The new schema: b, an integer of at least 1; and a second version served.
    let mut current = crds.get("widgets.example.com").await.unwrap();
    let updated: CustomResourceDefinition = serde_json::from_value(widget_crd(
        json!({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer", "minimum": 1}}}),
        &[("v1", true), ("v2", false)],
    ))
    .unwrap();
    current.spec = updated.spec;
    let replaced = crds
        .replace("widgets.example.com", &PostParams::default(), &current)
        .await
        .unwrap();
    assert_eq!(
        replaced.status.as_ref().map(|s| s.stored_versions.clone()),
        Some(Some(vec!["v1".to_string()]))
    );
    let second = widgets("v1")
        .create(
            &PostParams::default(),
            &widget("w2", json!({"a": "y", "b": 5}), "v1"),
        )
        .await
        .unwrap();
    assert_eq!(second.data["spec"], json!({"a": "y", "b": 5}));
    let status = api_error(
        widgets("v1")
            .create(&PostParams::default(), &widget("w3", json!({"b": 0}), "v1"))
            .await,
    );
    assert_eq!(status.code, 422, "{}", status.message);
    assert!(status.message.contains("spec.b"), "{}", status.message);
    // The new version serves the same objects.
    let through_v2 = widgets("v2").get("w2").await.unwrap();
    assert_eq!(through_v2.data["spec"]["b"], 5);
    // The schema change also shows in Strict validation: b is known now, c is not.
    let patch = widgets("v1")
        .patch(
            "w2",
            &PatchParams::default().validation_strict(),
            &Patch::Merge(json!({"spec": {"b": 6, "c": 1}})),
        )
        .await;
    let status = api_error(patch);
    assert_eq!(status.code, 400, "{}", status.message);
    assert!(
        status
            .message
            .ends_with("strict decoding error: unknown field \"spec.c\""),
        "{}",
        status.message
    );

    // Scope is immutable.
    let mut current = crds.get("widgets.example.com").await.unwrap();
    current.spec.scope = "Cluster".into();
    let status = api_error(
        crds.replace("widgets.example.com", &PostParams::default(), &current)
            .await,
    );
    assert_eq!(status.code, 422, "{}", status.message);
    assert!(status.message.contains("spec.scope"), "{}", status.message);
}
