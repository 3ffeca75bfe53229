//! What the emulated kubelet does because the real one of its release does, end to end on
//! the real binaries: 1.27 classic DRA, one batched prepare per pod, containers naming
//! one request of a claim, kubelet restarts and departed plugins.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::*;
use fake_dra_api::upstream::v1alpha2::ResourceClaim as ClassicClaim;
use fake_dra_emulator::sim::{Sim, SimConfig};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceSlice};
use kube::api::{Api, ListParams};

fn structured() -> SimConfig {
    Generation::Structured.config()
}

/// `FAKE_DEVICE_<i>` by index (a container naming one request sees that request's
/// indices only).
fn indexed_devices(env: &BTreeMap<String, String>) -> BTreeMap<usize, String> {
    env.iter()
        .filter_map(|(k, v)| Some((k.strip_prefix("FAKE_DEVICE_")?.parse().ok()?, v.clone())))
        .collect()
}

async fn slices_of(sim: &Sim, node: &str) -> Vec<ResourceSlice> {
    Api::<ResourceSlice>::all(sim.client().unwrap())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|s| s.spec.node_name.as_deref() == Some(node))
        .collect()
}

/// The node the pod runs on.
async fn node_of(sim: &Sim, namespace: &str, pod_name: &str) -> String {
    pod(sim, namespace, pod_name)
        .await
        .and_then(|p| p.node_name().map(str::to_string))
        .unwrap()
}

/// Kubernetes 1.27: the kubelet knows only `v1alpha2.Node` (one claim per call), the
/// generated claim is named `<pod>-<pod claim>` and the pod records nothing; the driver
/// finds the claim all the same and the container sees the seed's eight devices.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_classic_seed_demo_runs_on_kubernetes_1_27() {
    let sim = start(SimConfig {
        server_version: Some((1, 27)),
        ..SimConfig::default()
    })
    .await;
    sim.apply(&example("5-count-4-split-2.yaml")).await.unwrap();
    let env = env_of(&sim, "test5", "pod0", "ctr0").await;
    common_env_ok(&env);
    let ids = devices(&env);
    assert_eq!(ids.len(), 8, "{env:?}");
    assert!(distinct(&ids));
    let pod0 = pod(&sim, "test5", "pod0").await.unwrap();
    assert!(
        pod0.status
            .as_ref()
            .and_then(|s| s.resource_claim_statuses.as_ref())
            .is_none(),
        "1.27 pods record no claim statuses"
    );
    let claim = Api::<ClassicClaim>::namespaced(sim.client().unwrap(), "test5")
        .get("pod0-fake")
        .await
        .unwrap();
    assert!(pod0.controls(claim.metadata.owner_references.as_deref()));
    let h = handle(&claim).unwrap();
    assert_eq!((h.devices.len(), h.split), (4, 2));
    assert_eq!(h.node_name, env["FAKE_NODE_NAME"]);
    // PostBind deleted the PodSchedulingContext once the pod was bound.
    eventually("the PodSchedulingContext deleted after binding", || async {
        Api::<fake_dra_api::upstream::v1alpha2::PodSchedulingContext>::namespaced(
            sim.client().unwrap(),
            "test5",
        )
        .get_opt("pod0")
        .await
        .unwrap()
        .is_none()
        .then_some(())
    })
    .await;
    sim.shutdown().await;
}

/// One `NodePrepareResources` per driver with every claim of the pod: the plugin
/// prepares the good claim and refuses the bad one in the same call; the kubelet fails
/// the pod with the bad claim's error, and unprepares both when the pod goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pod_with_one_bad_claim_of_two_fails_with_that_claims_error() {
    let sim = start(structured()).await;
    let claim = |name: &str, split: u32| {
        format!(
            r#"
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {{namespace: batch, name: {name}}}
spec:
  devices:
    requests:
      - name: fake
        exactly: {{deviceClassName: fake.3-shake.com, count: 1}}
    config:
      - opaque:
          driver: fake.resource.3-shake.com
          parameters:
            apiVersion: fake.resource.3-shake.com/v1alpha1
            kind: FakeClaimParameters
            spec: {{split: {split}}}
"#
        )
    };
    let manifest = format!(
        r#"
apiVersion: v1
kind: Namespace
metadata: {{name: batch}}
---{}---{}---
apiVersion: v1
kind: Pod
metadata: {{namespace: batch, name: both}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
    - name: ctr
      image: busybox:1.36
      command: ["sh", "-c", "trap 'exit 0' TERM; export; sleep infinity & wait"]
      resources:
        claims: [{{name: good}}, {{name: bad}}]
  resourceClaims:
    - {{name: good, resourceClaimName: good}}
    - {{name: bad, resourceClaimName: bad}}
"#,
        claim("good", 2),
        claim("bad", 0)
    );
    sim.apply(&parse(&manifest)).await.unwrap();
    let message = eventually("the pod's prepare failure", || async {
        events(&sim, "batch")
            .await
            .into_iter()
            .find(|e| e.contains("FailedPrepareDynamicResources"))
    })
    .await;
    assert!(message.contains("ResourceClaim bad"), "{message}");
    assert!(message.contains("spec.split"), "{message}");
    let node = node_of(&sim, "batch", "both").await;
    let good = Api::<ResourceClaim>::namespaced(sim.client().unwrap(), "batch")
        .get("good")
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    assert!(
        cdi_specs(&sim, &node).iter().any(|f| f.contains(&good)),
        "the good claim was prepared in the same call"
    );
    let phase = pod(&sim, "batch", "both")
        .await
        .and_then(|p| p.status)
        .and_then(|s| s.extra.get("phase").cloned());
    assert_eq!(phase, Some(serde_json::json!("Pending")));
    delete_pod(&sim, "batch", "both").await;
    wait_pod_gone(&sim, "batch", "both").await;
    eventually("the good claim unprepared with the pod", || async {
        (!cdi_specs(&sim, &node).iter().any(|f| f.contains(&good))).then_some(())
    })
    .await;
    sim.shutdown().await;
}

/// A container naming one request of a claim sees that request's devices only
/// (`cdiDevicesAsList`); one naming the whole claim sees all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_container_naming_one_request_sees_only_its_devices() {
    let sim = start(structured()).await;
    sim.apply(&parse(TWO_REQUESTS)).await.unwrap();
    let a = indexed_devices(&env_of(&sim, "requests", "pod0", "only-a").await);
    let b = indexed_devices(&env_of(&sim, "requests", "pod0", "only-b").await);
    let whole_env = env_of(&sim, "requests", "pod0", "whole").await;
    common_env_ok(&whole_env);
    let whole = indexed_devices(&whole_env);
    assert_eq!(whole.len(), 3, "{whole:?}");
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(b.len(), 2, "{b:?}");
    let mut union = a.clone();
    union.extend(b.clone());
    assert_eq!(union, whole, "the requests' devices, numbered claim-wide");
    assert!(
        a.keys()
            .collect::<BTreeSet<_>>()
            .is_disjoint(&b.keys().collect()),
        "no device seen by both"
    );
    sim.shutdown().await;
}

/// A kubelet restart wipes the node's ResourceSlices (no driver has registered with the
/// new process yet); the plugin registers again and publishes them anew; the running pod
/// keeps its devices.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_kubelet_restart_wipes_the_slices_and_the_plugin_publishes_them_again() {
    let mut sim = start(structured()).await;
    sim.apply(&Generation::Structured.example("5-count-4-split-2.yaml"))
        .await
        .unwrap();
    let before = devices(&env_of(&sim, "test5", "pod0", "ctr0").await);
    let node = node_of(&sim, "test5", "pod0").await;
    let old: BTreeSet<String> = slices_of(&sim, &node)
        .await
        .into_iter()
        .filter_map(|s| s.metadata.uid)
        .collect();
    assert_eq!(old.len(), 1);
    sim.restart_kubelet(&node).await.unwrap();
    eventually("the node's slice published anew", || async {
        let now: Vec<String> = slices_of(&sim, &node)
            .await
            .into_iter()
            .filter_map(|s| s.metadata.uid)
            .collect();
        (now.len() == 1 && !old.contains(&now[0])).then_some(())
    })
    .await;
    let pod0 = pod(&sim, "test5", "pod0").await.unwrap();
    assert_eq!(
        pod0.status.and_then(|s| s.extra.get("phase").cloned()),
        Some(serde_json::json!("Running"))
    );
    let uid = Api::<ResourceClaim>::namespaced(sim.client().unwrap(), "test5")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items[0]
        .metadata
        .uid
        .clone()
        .unwrap();
    assert!(cdi_specs(&sim, &node).iter().any(|f| f.contains(&uid)));
    // A new pod on the restarted kubelet gets devices the running one does not hold.
    sim.apply(&Generation::Structured.example("4-count-4.yaml"))
        .await
        .unwrap();
    let other = devices(&env_of(&sim, "test4", "pod0", "ctr0").await);
    assert_eq!(other.len(), 4);
    assert!(other.iter().all(|d| !before.contains(d)));
    Generation::Structured.assert_no_device_twice(&sim).await;
    sim.shutdown().await;
}

/// Kubernetes 1.34 watches each plugin's connection: once a killed plugin has been gone
/// for the wiping delay, its slices are deleted; the restarted plugin publishes them
/// again, and the running pod is left alone throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dead_plugins_slices_are_wiped_and_come_back_with_it() {
    let mut sim = start(SimConfig {
        wiping_delay: Duration::from_secs(1),
        ..structured()
    })
    .await;
    sim.apply(&Generation::Structured.example("4-count-4.yaml"))
        .await
        .unwrap();
    let before = devices(&env_of(&sim, "test4", "pod0", "ctr0").await);
    let node = node_of(&sim, "test4", "pod0").await;
    sim.kill_plugin(&node).await;
    eventually("the dead plugin's slices wiped", || async {
        slices_of(&sim, &node).await.is_empty().then_some(())
    })
    .await;
    sim.start_plugin(&node).await.unwrap();
    eventually("the slices published again", || async {
        (slices_of(&sim, &node).await.len() == 1).then_some(())
    })
    .await;
    let pod0 = pod(&sim, "test4", "pod0").await.unwrap();
    assert_eq!(
        pod0.status.and_then(|s| s.extra.get("phase").cloned()),
        Some(serde_json::json!("Running"))
    );
    // The allocation was never touched: the claim still holds the devices the pod sees.
    let pod0 = pod(&sim, "test4", "pod0").await.unwrap();
    let claim = pod0.claim_name("fake").unwrap();
    assert_eq!(
        Generation::Structured
            .held_by(&sim, "test4", claim)
            .await
            .len(),
        before.len()
    );
    sim.shutdown().await;
}

/// Kubernetes 1.32 keeps one plugin per driver and wipes the driver's slices as soon as
/// its registration socket goes (`DeRegisterPlugin`, no wiping delay; 1.33 added one): a
/// plugin killed and restarted in place (its new socket replaces the stale one) publishes
/// a new slice, where 1.33+ keep the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kubernetes_1_32_replaces_the_slices_of_a_plugin_restarted_in_place() {
    for (version, replaced) in [((1, 32), true), ((1, 33), false)] {
        let mut sim = start(SimConfig {
            server_version: Some(version),
            ..structured()
        })
        .await;
        sim.apply(&Generation::Structured.example("4-count-4.yaml"))
            .await
            .unwrap();
        assert_eq!(
            devices(&env_of(&sim, "test4", "pod0", "ctr0").await).len(),
            4
        );
        let node = node_of(&sim, "test4", "pod0").await;
        // 1.32 and 1.33 serve only v1beta1.
        let slices =
            Api::<k8s_openapi::api::resource::v1beta1::ResourceSlice>::all(sim.client().unwrap());
        let uids = || async {
            slices
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .filter(|s| s.spec.node_name.as_deref() == Some(node.as_str()))
                .filter_map(|s| s.metadata.uid)
                .collect::<BTreeSet<String>>()
        };
        let old = uids().await;
        assert_eq!(old.len(), 1, "{version:?}: one slice before the kill");
        sim.kill_plugin(&node).await;
        // Returns once the kubelet registered the new socket.
        sim.start_plugin(&node).await.unwrap();
        let now = eventually("one slice published after the restart", || async {
            let now = uids().await;
            // 1.32: the old slice is wiped, then published anew.
            (now.len() == 1 && (!replaced || now != old)).then_some(now)
        })
        .await;
        assert_eq!(
            now != old,
            replaced,
            "{version:?}: slice uid before {old:?}, after {now:?}"
        );
        sim.shutdown().await;
    }
}
