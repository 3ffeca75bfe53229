//! The seed scenarios both DRA generations must pass alike: each suite calls them with
//! its [`Generation`], so classic and structured assert exactly the same things.

use std::collections::BTreeSet;

use fake_dra_api::upstream::pod::DraPod;
use kube::api::Api;

use super::*;

/// Scenario 1: two pods, each with its own claim from one template → distinct devices.
pub async fn two_pods_get_distinct_devices(generation: Generation) {
    let sim = start(generation.config()).await;
    sim.apply(&generation.example("1-two-pods-own-claims.yaml"))
        .await
        .unwrap();
    let a = env_of(&sim, "test1", "pod0", "ctr0").await;
    let b = env_of(&sim, "test1", "pod1", "ctr0").await;
    common_env_ok(&a);
    common_env_ok(&b);
    let (da, db) = (devices(&a), devices(&b));
    assert_eq!((da.len(), db.len()), (1, 1), "{a:?} {b:?}");
    assert_ne!(da[0], db[0]);
    generation.assert_no_device_twice(&sim).await;
    sim.shutdown().await;
}

/// Scenario 2: one pod, two containers sharing one template claim → the same device.
pub async fn two_containers_of_a_pod_share_the_device(generation: Generation) {
    let sim = start(generation.config()).await;
    sim.apply(&generation.example("2-two-containers-share.yaml"))
        .await
        .unwrap();
    let a = env_of(&sim, "test2", "pod0", "ctr0").await;
    let b = env_of(&sim, "test2", "pod0", "ctr1").await;
    common_env_ok(&a);
    assert_eq!(devices(&a).len(), 1);
    assert_eq!(devices(&a), devices(&b));
    assert_eq!(a["FAKE_NODE_NAME"], b["FAKE_NODE_NAME"]);
    sim.shutdown().await;
}

/// Scenario 3: a global claim shared by two pods → the same device, released only after
/// both pods are gone.
pub async fn global_claim_is_shared_and_released_after_its_last_user(generation: Generation) {
    let sim = start(generation.config()).await;
    sim.apply(&generation.example("3-global-claim-shared.yaml"))
        .await
        .unwrap();
    let a = env_of(&sim, "test3", "pod0", "ctr0").await;
    let b = env_of(&sim, "test3", "pod1", "ctr0").await;
    assert_eq!(devices(&a).len(), 1);
    assert_eq!(devices(&a), devices(&b));
    assert_eq!(a["FAKE_NODE_NAME"], b["FAKE_NODE_NAME"]);

    delete_pod(&sim, "test3", "pod0").await;
    wait_pod_gone(&sim, "test3", "pod0").await;
    // Once pod0 has left reservedFor, a release would be due if pod1 did not count.
    eventually("pod0 out of reservedFor", || async {
        let claims = generation.claims(&sim, Some("test3")).await;
        let claim = claims.iter().find(|c| c["metadata"]["name"] == "fake")?;
        (claim["status"]["reservedFor"].as_array().map(Vec::len) == Some(1)).then_some(())
    })
    .await;
    assert_eq!(
        generation.held_by(&sim, "test3", "fake").await.len(),
        1,
        "still used by pod1, so still allocated"
    );

    delete_pod(&sim, "test3", "pod1").await;
    wait_pod_gone(&sim, "test3", "pod1").await;
    eventually("claim released after its last user", || async {
        generation
            .held_by(&sim, "test3", "fake")
            .await
            .is_empty()
            .then_some(())
    })
    .await;
    sim.shutdown().await;
}

/// Scenario 6: a Deployment of 2 replicas, count 4 split 5 → 20 ids each, no parent
/// shared between the replicas.
pub async fn deployment_replicas_get_20_ids_each_and_share_no_parent(generation: Generation) {
    let sim = start(generation.config()).await;
    sim.apply(&generation.example("6-deployment-count-4-split-5.yaml"))
        .await
        .unwrap();
    let pods = eventually("two replicas", || async {
        let pods = Api::<DraPod>::namespaced(sim.client().unwrap(), "test6")
            .list(&Default::default())
            .await
            .unwrap()
            .items;
        (pods.len() == 2).then_some(pods)
    })
    .await;
    let mut all_ids = Vec::new();
    let mut parents = BTreeSet::new();
    for p in &pods {
        let name = p.metadata.name.clone().unwrap();
        assert!(
            p.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.kind == "ReplicaSet"),
            "replica owned by its ReplicaSet"
        );
        let env = env_of(&sim, "test6", &name, "ctr0").await;
        let ids = devices(&env);
        assert_eq!(ids.len(), 20, "{name}: {env:?}");
        all_ids.extend(ids);
        // Read again: the pod listed above may predate its claim's status entry.
        let current = pod(&sim, "test6", &name).await.unwrap();
        let claim = current.claim_name("fake").unwrap().to_string();
        let held = generation.held_by(&sim, "test6", &claim).await;
        assert_eq!(held.len(), 4, "{name}: 4 parents");
        parents.extend(held);
    }
    assert!(distinct(&all_ids), "no id shared between replicas");
    assert_eq!(parents.len(), 8, "no parent shared between replicas");
    sim.shutdown().await;
}
