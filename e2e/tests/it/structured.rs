//! The seed scenarios end to end, structured DRA (Kubernetes 1.34, resource.k8s.io/v1):
//! the same plugin binary as the classic suite, publishing ResourceSlices; the emulated
//! kube-scheduler allocates; containers run by podman (CI) or as local processes. Every
//! assertion is made on what the containers print, checked against the claims'
//! allocation results where the scenario is about them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use std::collections::BTreeSet;

use common::*;
use fake_dra_emulator::manifests::Manifest;
use fake_dra_emulator::sim::{Sim, SimConfig};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use kube::api::{Api, DeleteParams, ListParams};

fn structured() -> SimConfig {
    Generation::Structured.config()
}

fn example_s(name: &str) -> Vec<Manifest> {
    Generation::Structured.example(name)
}

async fn v1_claims(sim: &Sim, namespace: Option<&str>) -> Vec<ResourceClaim> {
    let client = sim.client().unwrap();
    let api: Api<ResourceClaim> = match namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    };
    api.list(&ListParams::default()).await.unwrap().items
}

/// (pool, device) of our driver's results in a claim's allocation.
fn allocated(claim: &ResourceClaim) -> Vec<(String, String)> {
    claim
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
        .map(|d| {
            d.results
                .iter()
                .flatten()
                .filter(|r| r.driver == DRIVER)
                .map(|r| (r.pool.clone(), r.device.clone()))
                .collect()
        })
        .unwrap_or_default()
}

async fn claim_of(sim: &Sim, namespace: &str, pod_name: &str) -> ResourceClaim {
    let p = pod(sim, namespace, pod_name).await.unwrap();
    let name = p.claim_name("fake").unwrap().to_string();
    Api::<ResourceClaim>::namespaced(sim.client().unwrap(), namespace)
        .get(&name)
        .await
        .unwrap()
}

/// The parent id of a published device, from the node's ResourceSlice.
async fn parent_ids(sim: &Sim, devices: &[(String, String)]) -> Vec<String> {
    let slices = Api::<ResourceSlice>::all(sim.client().unwrap())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    devices
        .iter()
        .map(|(pool, device)| {
            let slice = slices
                .iter()
                .find(|s| s.spec.pool.name == *pool && s.spec.driver == DRIVER)
                .unwrap_or_else(|| panic!("no slice for pool {pool}"));
            let d = slice
                .spec
                .devices
                .iter()
                .flatten()
                .find(|d| d.name == *device)
                .unwrap_or_else(|| panic!("{device} not published in {pool}"));
            let attrs = d.attributes.as_ref().unwrap();
            attrs
                .get("uuid")
                .and_then(|a| a.string.clone())
                .unwrap_or_else(|| panic!("{device}: no uuid attribute: {attrs:?}"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s1_two_pods_get_distinct_devices() {
    scenarios::two_pods_get_distinct_devices(Generation::Structured).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s2_two_containers_of_a_pod_share_the_device() {
    scenarios::two_containers_of_a_pod_share_the_device(Generation::Structured).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_global_claim_is_shared_and_freed_after_its_last_user() {
    scenarios::global_claim_is_shared_and_released_after_its_last_user(Generation::Structured)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s4_count_4_gives_4_distinct_devices() {
    let sim = start(structured()).await;
    sim.apply(&example_s("4-count-4.yaml")).await.unwrap();
    let env = env_of(&sim, "test4", "pod0", "ctr0").await;
    common_env_ok(&env);
    let ids = devices(&env);
    assert_eq!(ids.len(), 4, "{env:?}");
    assert!(distinct(&ids));
    let parents = parent_ids(&sim, &allocated(&claim_of(&sim, "test4", "pod0").await)).await;
    assert_eq!(
        BTreeSet::from_iter(parents),
        BTreeSet::from_iter(ids),
        "split 1: the devices are the parents"
    );
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s5_count_4_split_2_gives_8_children_two_per_parent() {
    let sim = start(structured()).await;
    sim.apply(&example_s("5-count-4-split-2.yaml"))
        .await
        .unwrap();
    let env = env_of(&sim, "test5", "pod0", "ctr0").await;
    common_env_ok(&env);
    let ids = devices(&env);
    assert_eq!(ids.len(), 8, "{env:?}");
    assert!(distinct(&ids));
    let results = allocated(&claim_of(&sim, "test5", "pod0").await);
    assert_eq!(results.len(), 4);
    assert!(
        results
            .iter()
            .all(|(pool, _)| *pool == env["FAKE_NODE_NAME"]),
        "{results:?}"
    );
    let parents = parent_ids(&sim, &results).await;
    let children: BTreeSet<String> = fake_dra_kubelet_plugin::fake::devices::children(&parents, 2)
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(
        children,
        BTreeSet::from_iter(ids),
        "children derive from the allocated parents, two each"
    );
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s6_deployment_replicas_get_20_ids_each_and_share_no_parent() {
    scenarios::deployment_replicas_get_20_ids_each_and_share_no_parent(Generation::Structured)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s7_model_selected_by_cel_and_an_unknown_model_stays_pending() {
    let sim = start(structured()).await;
    let models = ["ULTRA_10".to_string(), "ULTRA_100".to_string()];
    let with_model: Vec<&str> = NODES
        .iter()
        .copied()
        .filter(|n| {
            fake_dra_kubelet_plugin::fake::devices::node_model(n, &models) == Some("ULTRA_100")
        })
        .collect();
    sim.apply(&example_s("7-selector-model.yaml"))
        .await
        .unwrap();
    let env = env_of(&sim, "test7", "pod0", "ctr0").await;
    assert_eq!(env["FAKE_DEVICE_MODEL"], "ULTRA_100");
    assert!(
        with_model.contains(&env["FAKE_NODE_NAME"].as_str()),
        "{env:?} not on {with_model:?}"
    );

    let unknown = r#"
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {namespace: test7, name: nobody}
spec:
  spec:
    devices:
      requests:
      - name: fake
        exactly:
          deviceClassName: fake.3-shake.com
          selectors:
          - cel: {expression: 'device.attributes["fake.resource.3-shake.com"].model == "ULTRA_9000"'}
---
apiVersion: v1
kind: Pod
metadata: {namespace: test7, name: pending}
spec:
  containers:
  - name: ctr0
    image: busybox
    command: ["sh", "-c", "trap 'exit 0' TERM; export; sleep infinity & wait"]
    resources: {claims: [{name: fake}]}
  resourceClaims:
  - name: fake
    resourceClaimTemplateName: nobody
"#;
    sim.apply(&parse(unknown)).await.unwrap();
    stays_pending(&sim, "test7", "pending").await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s8_more_than_a_node_has_stays_pending() {
    let sim = start(structured()).await;
    sim.apply(&example_s("8-more-than-a-node-has.yaml"))
        .await
        .unwrap();
    stays_pending(&sim, "test8", "pod0").await;
    assert!(allocated(&v1_claims(&sim, Some("test8")).await[0]).is_empty());
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s10_deleting_pods_and_claims_frees_everything() {
    let sim = start(structured()).await;
    sim.apply(&example_s("5-count-4-split-2.yaml"))
        .await
        .unwrap();
    sim.apply(&example_s("3-global-claim-shared.yaml"))
        .await
        .unwrap();
    env_of(&sim, "test5", "pod0", "ctr0").await;
    env_of(&sim, "test3", "pod1", "ctr0").await;
    for (ns, name) in [("test5", "pod0"), ("test3", "pod0"), ("test3", "pod1")] {
        delete_pod(&sim, ns, name).await;
    }
    Api::<ResourceClaim>::namespaced(sim.client().unwrap(), "test3")
        .delete("fake", &DeleteParams::default())
        .await
        .unwrap();
    eventually("every claim gone", || async {
        v1_claims(&sim, None).await.is_empty().then_some(())
    })
    .await;
    for node in NODES {
        eventually(
            &format!("{node}: only the common CDI spec left"),
            || async {
                (cdi_specs(&sim, node) == ["k8s.fake.resource.3-shake.com-fake_common.json"])
                    .then_some(())
            },
        )
        .await;
    }
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s11_kill_9_of_a_plugin_and_a_deleted_slice_converge() {
    let mut sim = start(structured()).await;
    sim.apply(&example_s("4-count-4.yaml")).await.unwrap();
    let four = env_of(&sim, "test4", "pod0", "ctr0").await;
    let node = four["FAKE_NODE_NAME"].clone();
    sim.kill_plugin(&node).await;
    sim.apply(&example_s("5-count-4-split-2.yaml"))
        .await
        .unwrap();
    sim.start_plugin(&node).await.unwrap();
    assert_eq!(
        devices(&env_of(&sim, "test5", "pod0", "ctr0").await).len(),
        8
    );

    // A slice deleted by hand while pods run comes back.
    let slices = Api::<ResourceSlice>::all(sim.client().unwrap());
    let mine: Vec<String> = slices
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|s| s.spec.node_name.as_deref() == Some(node.as_str()))
        .filter_map(|s| s.metadata.name)
        .collect();
    assert_eq!(mine.len(), 1, "one slice per node");
    slices
        .delete(&mine[0], &DeleteParams::default())
        .await
        .unwrap();
    eventually("the node's slice republished", || async {
        let items = slices.list(&ListParams::default()).await.unwrap().items;
        items
            .iter()
            .any(|s| {
                s.spec.node_name.as_deref() == Some(node.as_str())
                    && s.metadata.name.as_deref() != Some(mine[0].as_str())
            })
            .then_some(())
    })
    .await;
    sim.apply(&example_s("1-two-pods-own-claims.yaml"))
        .await
        .unwrap();
    env_of(&sim, "test1", "pod0", "ctr0").await;
    env_of(&sim, "test1", "pod1", "ctr0").await;
    let uid = claim_of(&sim, "test4", "pod0").await.metadata.uid.unwrap();
    assert!(
        cdi_specs(&sim, &node).iter().any(|f| f.contains(&uid)),
        "prepared before the kill, still prepared"
    );
    Generation::Structured.assert_no_device_twice(&sim).await;
    sim.shutdown().await;
}

/// Kubernetes 1.33: only resource.k8s.io/v1beta1 is served, the kubelet knows only
/// `v1beta1.DRAPlugin`, and the v1 manifests are applied as v1beta1; the container sees
/// the same devices.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s5_on_kubernetes_1_33_through_v1beta1() {
    let sim = start(SimConfig {
        server_version: Some((1, 33)),
        ..structured()
    })
    .await;
    sim.apply(&example_s("5-count-4-split-2.yaml"))
        .await
        .unwrap();
    let env = env_of(&sim, "test5", "pod0", "ctr0").await;
    common_env_ok(&env);
    let ids = devices(&env);
    assert_eq!(ids.len(), 8, "{env:?}");
    assert!(distinct(&ids));
    let slices: Api<k8s_openapi::api::resource::v1beta1::ResourceSlice> =
        Api::all(sim.client().unwrap());
    let published = slices.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(published.len(), 2, "one slice per node, through v1beta1");
    assert!(
        published
            .iter()
            .all(|s| s.spec.devices.iter().flatten().all(|d| d.basic.is_some())),
        "v1beta1 layout"
    );
    sim.shutdown().await;
}

/// Waits for the scheduler's FailedScheduling Event on the pod (no node of the two fits)
/// and checks that the pod is still unbound.
async fn stays_pending(sim: &Sim, namespace: &str, name: &str) {
    let prefix = format!("{name} FailedScheduling");
    let seen = eventually(
        &format!("a FailedScheduling Event for {namespace}/{name}"),
        || async {
            let events = events(sim, namespace).await;
            events
                .iter()
                .any(|e| e.starts_with(&prefix) && e.contains("0/2 nodes"))
                .then_some(events)
        },
    )
    .await;
    assert!(
        pod(sim, namespace, name)
            .await
            .unwrap()
            .node_name()
            .is_none(),
        "{seen:?}"
    );
}
