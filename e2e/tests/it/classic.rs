//! The seed scenarios end to end, classic DRA: the real controller and kubelet-plugin
//! binaries on the emulated control plane, containers run by podman (CI) or as local
//! processes, and every assertion made on what the containers print (their env), checked
//! against the API objects where the scenario is about them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use std::collections::BTreeSet;

use common::*;
use fake_dra_api::upstream::v1alpha2::ResourceClaim;
use fake_dra_emulator::sim::SimConfig;
use kube::api::{Api, DeleteParams};

/// The generated claim of a pod's `fake` pod claim.
async fn claim_of(
    sim: &fake_dra_emulator::sim::Sim,
    namespace: &str,
    pod_name: &str,
) -> ResourceClaim {
    let pod = pod(sim, namespace, pod_name).await.unwrap();
    let name = pod.claim_name("fake").unwrap().to_string();
    Api::<ResourceClaim>::namespaced(sim.client().unwrap(), namespace)
        .get(&name)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s1_two_pods_get_distinct_devices() {
    scenarios::two_pods_get_distinct_devices(Generation::Classic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s2_two_containers_of_a_pod_share_the_device() {
    scenarios::two_containers_of_a_pod_share_the_device(Generation::Classic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_global_claim_is_shared_and_deallocated_after_its_last_user() {
    scenarios::global_claim_is_shared_and_released_after_its_last_user(Generation::Classic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s4_count_4_gives_4_distinct_devices() {
    let sim = start_default().await;
    sim.apply(&example("4-count-4.yaml")).await.unwrap();
    let env = env_of(&sim, "test4", "pod0", "ctr0").await;
    common_env_ok(&env);
    let ids = devices(&env);
    assert_eq!(ids.len(), 4, "{env:?}");
    assert!(distinct(&ids));
    let h = handle(&claim_of(&sim, "test4", "pod0").await).unwrap();
    assert_eq!(
        BTreeSet::from_iter(h.devices.iter().cloned()),
        BTreeSet::from_iter(ids),
        "with split 1 the parents are the devices"
    );
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s5_count_4_split_2_gives_8_children_two_per_parent() {
    let sim = start_default().await;
    sim.apply(&example("5-count-4-split-2.yaml")).await.unwrap();
    let env = env_of(&sim, "test5", "pod0", "ctr0").await;
    common_env_ok(&env);
    let ids = devices(&env);
    assert_eq!(ids.len(), 8, "{env:?}");
    assert!(distinct(&ids));
    let h = handle(&claim_of(&sim, "test5", "pod0").await).unwrap();
    assert_eq!((h.devices.len(), h.split), (4, 2));
    assert_eq!(h.node_name, env["FAKE_NODE_NAME"]);
    let children: Vec<String> =
        fake_dra_kubelet_plugin::fake::devices::children(&h.devices, h.split)
            .into_iter()
            .map(|c| c.id)
            .collect();
    assert_eq!(
        children, ids,
        "children derive from the recorded parents, two each, in order"
    );
    // The plugin records the prepared claim with its parents in the node's NAS.
    // (Its status writes are coalesced, so it may trail the container by a moment.)
    let prepared = eventually("the NAS lists the prepared claim", || async {
        let prepared = nas(&sim, &h.node_name).await.status?.prepared_claims;
        (prepared.len() == 1).then_some(prepared)
    })
    .await;
    assert_eq!(
        BTreeSet::from_iter(prepared[0].devices.iter().cloned()),
        BTreeSet::from_iter(h.devices.iter().cloned())
    );
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s6_deployment_replicas_get_20_ids_each_and_share_no_parent() {
    scenarios::deployment_replicas_get_20_ids_each_and_share_no_parent(Generation::Classic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s7_model_selector_picks_nodes_of_that_model_and_unknown_model_stays_pending() {
    let sim = start_default().await;
    let models = ["ULTRA_10".to_string(), "ULTRA_100".to_string()];
    let with_model: Vec<&str> = NODES
        .iter()
        .copied()
        .filter(|n| {
            fake_dra_kubelet_plugin::fake::devices::node_model(n, &models) == Some("ULTRA_100")
        })
        .collect();
    assert!(
        !with_model.is_empty(),
        "the example asks for ULTRA_100, which some seed node must have"
    );
    sim.apply(&example("7-selector-model.yaml")).await.unwrap();
    let env = env_of(&sim, "test7", "pod0", "ctr0").await;
    assert_eq!(env["FAKE_DEVICE_MODEL"], "ULTRA_100");
    assert!(
        with_model.contains(&env["FAKE_NODE_NAME"].as_str()),
        "{env:?} not on {with_model:?}"
    );
    assert_eq!(devices(&env).len(), 8);

    sim.apply(&parse(&unknown_model_pod("test7")))
        .await
        .unwrap();
    let events = eventually("an Event naming the unknown model", || async {
        let events = events(&sim, "test7").await;
        events
            .iter()
            .any(|e| e.contains("ULTRA_9000"))
            .then_some(events)
    })
    .await;
    let p = pod(&sim, "test7", "pending").await.unwrap();
    assert!(
        p.node_name().is_none(),
        "unschedulable pod was bound: {events:?}"
    );
    assert!(sim.logs().lines("test7", "pending", "ctr0").is_empty());
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s8_more_than_a_node_has_stays_pending_and_freed_devices_let_a_pod_schedule() {
    let sim = start_default().await;
    sim.apply(&example("8-more-than-a-node-has.yaml"))
        .await
        .unwrap();
    let seen = eventually("an Event explaining count 9", || async {
        let events = events(&sim, "test8").await;
        events
            .iter()
            .any(|e| {
                e.contains("9")
                    && (e.contains("CountAboveInventory") || e.contains("FailedScheduling"))
            })
            .then_some(events)
    })
    .await;
    assert!(
        pod(&sim, "test8", "pod0")
            .await
            .unwrap()
            .node_name()
            .is_none(),
        "{seen:?}"
    );

    // Fill both nodes (6 of 8 each), then ask for 4: nowhere fits until one is freed.
    let fill = |name: &str, count: u32| {
        format!(
            r#"
apiVersion: fake.resource.3-shake.com/v1alpha1
kind: FakeClaimParameters
metadata: {{namespace: test8, name: {name}}}
spec: {{count: {count}}}
---
apiVersion: resource.k8s.io/v1alpha2
kind: ResourceClaimTemplate
metadata: {{namespace: test8, name: {name}}}
spec:
  spec:
    resourceClassName: fake.3-shake.com
    parametersRef: {{apiGroup: fake.resource.3-shake.com, kind: FakeClaimParameters, name: {name}}}
---
apiVersion: v1
kind: Pod
metadata: {{namespace: test8, name: {name}}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: ctr0
    image: busybox
    command: ["sh", "-c", "trap 'exit 0' TERM; export; sleep infinity & wait"]
    resources: {{claims: [{{name: fake}}]}}
  resourceClaims:
  - name: fake
    source: {{resourceClaimTemplateName: {name}}}
"#
        )
    };
    sim.apply(&parse(&fill("big-a", 6))).await.unwrap();
    let a = env_of(&sim, "test8", "big-a", "ctr0").await;
    sim.apply(&parse(&fill("big-b", 6))).await.unwrap();
    let b = env_of(&sim, "test8", "big-b", "ctr0").await;
    assert_ne!(
        a["FAKE_NODE_NAME"], b["FAKE_NODE_NAME"],
        "6+6 cannot share a node of 8"
    );
    sim.apply(&parse(&fill("four", 4))).await.unwrap();
    eventually("the pod asking for 4 reported unschedulable", || async {
        events(&sim, "test8")
            .await
            .iter()
            .any(|e| e.starts_with("four FailedScheduling: 0/2 nodes are available"))
            .then_some(())
    })
    .await;
    assert!(
        pod(&sim, "test8", "four")
            .await
            .unwrap()
            .node_name()
            .is_none()
    );
    delete_pod(&sim, "test8", "big-a").await;
    let four = env_of(&sim, "test8", "four", "ctr0").await;
    assert_eq!(devices(&four).len(), 4);
    assert_eq!(
        four["FAKE_NODE_NAME"], a["FAKE_NODE_NAME"],
        "lands where devices were freed"
    );
    Generation::Classic.assert_no_device_twice(&sim).await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s9_immediate_claim_is_allocated_first_and_the_pod_follows_it() {
    let sim = start_default().await;
    sim.apply(&example("9-immediate.yaml")).await.unwrap();
    let env = env_of(&sim, "test9", "pod0", "ctr0").await;
    assert_eq!(devices(&env).len(), 2);
    let claims = Api::<ResourceClaim>::namespaced(sim.client().unwrap(), "test9")
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    assert_eq!(claims.len(), 1);
    let h = handle(&claims[0]).unwrap();
    assert_eq!(
        h.node_name, env["FAKE_NODE_NAME"],
        "the pod runs where the Immediate claim was allocated"
    );
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s10_deleting_pods_and_claims_frees_everything() {
    let sim = start_default().await;
    sim.apply(&example("5-count-4-split-2.yaml")).await.unwrap();
    sim.apply(&example("3-global-claim-shared.yaml"))
        .await
        .unwrap();
    env_of(&sim, "test5", "pod0", "ctr0").await;
    env_of(&sim, "test3", "pod1", "ctr0").await;
    assert!(
        NODES
            .iter()
            .map(|n| cdi_specs(&sim, n).len())
            .sum::<usize>()
            >= 4,
        "common specs and claim specs written"
    );

    let client = sim.client().unwrap();
    for (ns, name) in [("test5", "pod0"), ("test3", "pod0"), ("test3", "pod1")] {
        delete_pod(&sim, ns, name).await;
    }
    Api::<ResourceClaim>::namespaced(client.clone(), "test3")
        .delete("fake", &DeleteParams::default())
        .await
        .unwrap();
    eventually("every claim gone", || async {
        claims(&sim).await.is_empty().then_some(())
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
        eventually(&format!("{node}: NAS shows nothing prepared"), || async {
            let status = nas(&sim, node).await.status.unwrap();
            (status.prepared_claims.is_empty() && status.prepared_claim_count == 0).then_some(())
        })
        .await;
    }
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s11_kill_9_of_controller_and_plugin_converges_without_double_allocation() {
    // 2 + 4 + 8 + 4 parents are asked for in all: more than two nodes of 8 have.
    let mut sim = start(SimConfig {
        plugin_env: vec![("FAKE_DRA_NUM_DEVICES".into(), "16".into())],
        ..SimConfig::default()
    })
    .await;
    sim.apply(&example("1-two-pods-own-claims.yaml"))
        .await
        .unwrap();
    env_of(&sim, "test1", "pod0", "ctr0").await;

    // Controller killed while work arrives; it restarts (same pod, as a container restart).
    sim.kill_controller().await;
    sim.apply(&example("4-count-4.yaml")).await.unwrap();
    sim.apply(&example("6-deployment-count-4-split-5.yaml"))
        .await
        .unwrap();
    sim.start_controller().unwrap();
    let four = env_of(&sim, "test4", "pod0", "ctr0").await;
    assert_eq!(devices(&four).len(), 4);

    // A plugin killed while pods use its claims and more are coming; restarted.
    let node = four["FAKE_NODE_NAME"].clone();
    sim.kill_plugin(&node).await;
    sim.apply(&example("5-count-4-split-2.yaml")).await.unwrap();
    sim.start_plugin(&node).await.unwrap();
    let five = env_of(&sim, "test5", "pod0", "ctr0").await;
    assert_eq!(devices(&five).len(), 8);

    let replicas = eventually("deployment replicas printing", || async {
        let pods =
            Api::<fake_dra_api::upstream::pod::DraPod>::namespaced(sim.client().unwrap(), "test6")
                .list(&Default::default())
                .await
                .unwrap()
                .items;
        (pods.len() == 2).then_some(pods)
    })
    .await;
    for p in replicas {
        assert_eq!(
            devices(&env_of(&sim, "test6", p.metadata.name.as_deref().unwrap(), "ctr0").await)
                .len(),
            20
        );
    }
    // The pods prepared before the kill stay prepared: their specs are still there.
    let h = handle(&claim_of(&sim, "test4", "pod0").await).unwrap();
    let uid = claim_of(&sim, "test4", "pod0").await.metadata.uid.unwrap();
    assert!(
        cdi_specs(&sim, &h.node_name)
            .iter()
            .any(|f| f.contains(&uid))
    );
    Generation::Classic.assert_no_device_twice(&sim).await;
    sim.shutdown().await;
}

/// A pod in `namespace` named `name` with one claim from template `template` (count via
/// its own FakeClaimParameters when `count` is given).
fn pod_with_template(namespace: &str, name: &str, template: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{namespace: {namespace}, name: {name}}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: ctr0
    image: busybox
    command: ["sh", "-c", "trap 'exit 0' TERM; export; sleep infinity & wait"]
    resources: {{claims: [{{name: fake}}]}}
  resourceClaims:
  - name: fake
    source: {{resourceClaimTemplateName: {template}}}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn input_pod_with_a_missing_template_stays_pending_with_the_reason() {
    let sim = start_default().await;
    sim.apply(&parse(
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: missing}\n",
    ))
    .await
    .unwrap();
    sim.apply(&parse(&pod_with_template(
        "missing",
        "pod0",
        "no-such-template",
    )))
    .await
    .unwrap();
    eventually("an Event naming the missing template", || async {
        events(&sim, "missing")
            .await
            .iter()
            .any(|e| e.contains("FailedResourceClaimCreation") && e.contains("no-such-template"))
            .then_some(())
    })
    .await;
    assert!(
        pod(&sim, "missing", "pod0")
            .await
            .unwrap()
            .node_name()
            .is_none()
    );
    assert!(claims(&sim).await.is_empty());
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn input_deleting_a_claim_in_use_waits_for_its_users() {
    let sim = start_default().await;
    sim.apply(&example("3-global-claim-shared.yaml"))
        .await
        .unwrap();
    let before = env_of(&sim, "test3", "pod0", "ctr0").await;
    let api = Api::<ResourceClaim>::namespaced(sim.client().unwrap(), "test3");
    api.delete("fake", &DeleteParams::default()).await.unwrap();
    let claim = api
        .get("fake")
        .await
        .expect("held by the driver's finalizer while in use");
    assert!(claim.is_being_deleted());
    assert!(
        claim.is_allocated(),
        "a reserved claim is not deallocated under its pods"
    );
    // A new pod cannot start using a claim that is being deleted.
    let late = pod(&sim, "test3", "pod1").await.unwrap();
    assert!(late.node_name().is_some(), "pod1 was already running");
    delete_pod(&sim, "test3", "pod0").await;
    delete_pod(&sim, "test3", "pod1").await;
    eventually("claim gone once unused", || async {
        api.get_opt("fake").await.unwrap().is_none().then_some(())
    })
    .await;
    let node = before["FAKE_NODE_NAME"].clone();
    eventually("its CDI spec removed", || async {
        (cdi_specs(&sim, &node).len() == 1).then_some(())
    })
    .await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn input_fifty_pods_at_once_on_two_nodes_never_share_a_device() {
    let sim = start_default().await;
    let mut yaml = String::from(
        r#"
apiVersion: v1
kind: Namespace
metadata: {name: many}
---
apiVersion: fake.resource.3-shake.com/v1alpha1
kind: FakeClaimParameters
metadata: {namespace: many, name: one}
spec: {count: 1}
---
apiVersion: resource.k8s.io/v1alpha2
kind: ResourceClaimTemplate
metadata: {namespace: many, name: one}
spec:
  spec:
    resourceClassName: fake.3-shake.com
    parametersRef: {apiGroup: fake.resource.3-shake.com, kind: FakeClaimParameters, name: one}
"#,
    );
    for i in 0..50 {
        yaml.push_str("---");
        yaml.push_str(&pod_with_template("many", &format!("pod{i}"), "one"));
    }
    sim.apply(&parse(&yaml)).await.unwrap();
    // Two nodes of 8 devices: 16 run, 34 wait with a reason.
    let mut seen = BTreeSet::new();
    let running = eventually("16 pods printing their device", || async {
        let printed: Vec<String> = (0..50)
            .map(|i| format!("pod{i}"))
            .filter(|p| !sim.logs().lines("many", p, "ctr0").is_empty())
            .collect();
        (printed.len() == 16).then_some(printed)
    })
    .await;
    for name in &running {
        let env = env_of(&sim, "many", name, "ctr0").await;
        let ids = devices(&env);
        assert_eq!(ids.len(), 1);
        assert!(seen.insert(ids[0].clone()), "{} handed out twice", ids[0]);
    }
    let waiting: Vec<String> = (0..50)
        .map(|i| format!("pod{i}"))
        .filter(|p| !running.contains(p))
        .collect();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let events = events(&sim, "many").await;
        let without: Vec<&String> = waiting
            .iter()
            .filter(|p| {
                !events
                    .iter()
                    .any(|e| e.starts_with(&format!("{p} FailedScheduling")))
            })
            .collect();
        if without.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "gave up waiting for every waiting pod to have a FailedScheduling reason; without one: {without:?}; the namespace's events: {events:#?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    for p in &waiting {
        assert!(
            pod(&sim, "many", p).await.unwrap().node_name().is_none(),
            "{p} bound without devices"
        );
    }
    Generation::Classic.assert_no_device_twice(&sim).await;
    sim.shutdown().await;
}

/// `fake-dra-sim run` with a broken manifest: a clear error naming the file and document,
/// and nothing started (no cluster, no driver process).
#[test]
fn sim_refuses_malformed_manifests_before_starting_anything() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "not-yaml.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: [\n",
            "not valid YAML",
        ),
        (
            "no-kind.yaml",
            "apiVersion: v1\nmetadata: {name: x}\n",
            "kind is required",
        ),
        ("scalar.yaml", "42\n", "expected an object"),
    ];
    let sim = sim_binary();
    for (file, text, want) in cases {
        let path = dir.path().join(file);
        std::fs::write(
            &path,
            format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: ok}}\n---\n{text}"),
        )
        .unwrap();
        let out = std::process::Command::new(&sim)
            .args(["run", "-f"])
            .arg(&path)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{file}: {stderr}");
        assert!(
            stderr.contains(want) && stderr.contains(file) && stderr.contains("document 1"),
            "{file}: {stderr}"
        );
        assert!(
            !stderr.contains("cluster up"),
            "{file}: started before refusing: {stderr}"
        );
    }
    let out = std::process::Command::new(sim)
        .args(["run", "-f", "/no/such/file.yaml"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/no/such/file.yaml"));
}

/// `fake-dra-sim run -f` checks the manifests as the API server will take them — strictly,
/// as `kubectl apply` asks — before the cluster is up: a misspelled field and a kind the
/// emulator does not serve are refused with the file, the object and the reason.
#[test]
fn sim_run_refuses_what_the_api_server_would_before_starting() {
    let dir = tempfile::tempdir().unwrap();
    for (file, text, want) in [
        (
            "typo.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: typo}\nspec:\n  containers:\n  - {name: c, image: busybox, command: [\"true\"], cont: 1}\n",
            "Pod typo: Pod in version \"v1\" cannot be handled as a Pod: strict decoding error: unknown field \"spec.containers[0].cont\"",
        ),
        (
            "gadget.yaml",
            "apiVersion: v1\nkind: Gadget\nmetadata: {name: g}\n",
            "Gadget g: no resource type serves kind Gadget in v1",
        ),
        (
            "params.yaml",
            "apiVersion: fake.resource.3-shake.com/v1alpha1\nkind: FakeClaimParameters\nmetadata: {name: p}\nspec: {cuont: 2}\n",
            "unknown field \"spec.cuont\"",
        ),
    ] {
        let path = dir.path().join(file);
        std::fs::write(&path, text).unwrap();
        let out = std::process::Command::new(sim_binary())
            .args(["run", "-f"])
            .arg(&path)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{file}: {stderr}");
        assert!(stderr.contains(want), "{file}: {stderr}");
        assert!(stderr.contains(file), "{file}: {stderr}");
        assert!(
            !stderr.contains("cluster up"),
            "{file}: started first: {stderr}"
        );
    }
}

/// `--feature-gates` (env `FAKE_DRA_FEATURE_GATES`) sets the emulated cluster's DRA gates
/// over its release's defaults, as on kube-apiserver and kube-scheduler: a gate the release
/// lacks, or one the emulator does not implement, is refused by name before anything
/// starts; a gate turned off changes what the scheduler does (here: the DeviceTaintRule
/// example's untolerating pod runs, which a default 1.37 keeps Pending).
#[test]
fn sim_feature_gates_are_checked_against_the_release_and_honoured() {
    let example = examples_dir().join("structured/features/device-taint-rule.yaml");
    for (version, flag, env, want) in [
        (
            "1.33",
            Some("DRAConsumableCapacity=true"),
            None,
            "DRAConsumableCapacity does not exist in Kubernetes 1.33: it came in 1.34",
        ),
        (
            "1.37",
            None,
            Some("DRAWorkloadResourceClaims=true"),
            "the emulator does not implement DRAWorkloadResourceClaims=true (KEP-5729) on Kubernetes 1.37",
        ),
    ] {
        let mut command = std::process::Command::new(sim_binary());
        command.args(["--mode", "structured", "--kubernetes-version", version]);
        command.args(flag.map(|f| format!("--feature-gates={f}")));
        if let Some(env) = env {
            command.env("FAKE_DRA_FEATURE_GATES", env);
        }
        let out = command
            .args(["run", "-f"])
            .arg(examples_dir().join("structured/1-two-pods-own-claims.yaml"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(want), "{stderr}");
        assert!(!stderr.contains("cluster up"), "started first: {stderr}");
    }
    let out = std::process::Command::new(sim_binary())
        .args(["--kubernetes-version", "1.37"])
        .args(["--feature-gates", "DRADeviceTaintRules=false"])
        .args(["run", "--wait", "--timeout", "90s", "-f"])
        .arg(&example)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("every pod is ready or has succeeded (2 pods, 0 deployments)"),
        "{stderr}"
    );
}

/// `fake-dra-sim run --wait` for scripts: exits 0 once every pod is ready, 1 with the
/// waiting pod named when --timeout passes. It takes the cluster down as it ends, so it
/// prints no `export KUBECONFIG` (kubectl would find nothing there) but the way to keep it.
#[test]
fn sim_run_wait_ends_with_the_pods() {
    let out = std::process::Command::new(sim_binary())
        .args(["run", "--wait", "--timeout", "90s", "-f"])
        .arg(examples_dir().join("4-count-4.yaml"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("every pod is ready or has succeeded (1 pod, 0 deployments)"),
        "{stderr}"
    );
    // A line per pod: its node and what its claims hold.
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("  test4/pod0 on kind-worker") && l.ends_with("(allocated)")),
        "{stderr}"
    );
    assert!(!stderr.contains("export KUBECONFIG="), "{stderr}");
    assert!(
        stderr.contains("it goes away when --wait ends: leave out --wait to use kubectl"),
        "{stderr}"
    );
    let out = std::process::Command::new(sim_binary())
        .args(["run", "--wait", "--timeout", "5s", "-f"])
        .arg(examples_dir().join("8-more-than-a-node-has.yaml"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--timeout passed: pod test8/pod0 is Pending"),
        "{stderr}"
    );
}

/// Issue 35 item 2: without `--mode`, `run -f` takes the generation of the manifests
/// (a structured example on the default sim was refused as a kind "the emulator does not
/// implement") and says so; `--kubernetes-version 1.34` alone implies structured; a flag
/// the manifests contradict is refused before start, naming the flag to change.
#[test]
fn sim_run_picks_the_mode_from_the_manifests() {
    let structured = examples_dir().join("structured/1-two-pods-own-claims.yaml");
    let out = std::process::Command::new(sim_binary())
        .args(["run", "--wait", "--timeout", "90s", "-f"])
        .arg(&structured)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("fake-dra-sim: structured DRA, from the manifests: ResourceClaimTemplate"),
        "{stderr}"
    );
    // Issue 35 item 3: the pods are Ready (they sleep) before they print, and --wait
    // printed nothing of them; it now prints their output before it ends, each line
    // prefixed with the namespace, and a line per pod with its claim's devices.
    let stdout = String::from_utf8_lossy(&out.stdout);
    for pod in ["pod0", "pod1"] {
        let prefix = format!("test1 {pod} ctr0 export FAKE_NODE_NAME=");
        assert!(
            stdout.lines().any(|l| l.starts_with(&prefix)),
            "{pod}: {stdout}\n{stderr}"
        );
        assert!(
            stderr
                .lines()
                .any(|l| l.starts_with(&format!("  test1/{pod} on kind-worker"))
                    && l.ends_with("(1 device)")),
            "{pod}: {stderr}"
        );
    }
    let out = std::process::Command::new(sim_binary())
        .args(["--mode", "classic", "run", "--wait", "-f"])
        .arg(&structured)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "is structured DRA, but --mode makes a classic cluster: use --mode structured"
        ),
        "{stderr}"
    );
    assert!(
        !stderr.contains("cluster up"),
        "refused before start: {stderr}"
    );
    let out = std::process::Command::new(sim_binary())
        .args(["--kubernetes-version", "1.34", "demo"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("structured DRA, from --kubernetes-version 1.34"),
        "{stderr}"
    );
}

/// An unknown kind is refused before any object of the set is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn input_unknown_kind_creates_nothing() {
    let sim = start_default().await;
    let set = parse(
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: half}\n---\napiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w, namespace: half}\n",
    );
    let err = sim.apply(&set).await.unwrap_err().to_string();
    assert!(
        err.contains("Widget") && err.contains("example.com/v1"),
        "{err}"
    );
    let ns = Api::<k8s_openapi::api::core::v1::Namespace>::all(sim.client().unwrap())
        .get_opt("half")
        .await
        .unwrap();
    assert!(ns.is_none(), "the namespace of a refused set was created");
    sim.shutdown().await;
}

/// `fake-dra-sim run` prints container logs prefixed like stern, and Ctrl-C tears down
/// everything: containers, driver processes, the work directory.
#[test]
fn sim_run_prints_logs_and_ctrl_c_tears_down() {
    use std::io::{BufRead, BufReader};
    let mut child = std::process::Command::new(sim_binary())
        .args(["run", "-f"])
        .arg(examples_dir().join("5-count-4-split-2.yaml"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut printed = Vec::new();
    for line in BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
    {
        let done = line.starts_with("test5 pod0 ctr0 export FAKE_NODE_NAME=");
        printed.push(line);
        if done {
            break;
        }
    }
    assert!(
        printed
            .iter()
            .any(|l| l.starts_with("test5 pod0 ctr0 export FAKE_DEVICE_7='FAKE-")),
        "{printed:?}"
    );
    let status = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = child.wait().unwrap();
    let messages: Vec<String> = rx.try_iter().collect();
    assert!(exit.success(), "exit {exit:?}: {messages:?}");
    // It stays up until Ctrl-C, so it says how kubectl reaches it.
    assert!(
        messages
            .iter()
            .any(|m| m.starts_with("export KUBECONFIG=/")),
        "{messages:?}"
    );
    let work_dir = messages
        .iter()
        .find_map(|m| m.split("driver logs in ").nth(1))
        .map(|logs| {
            std::path::PathBuf::from(logs)
                .parent()
                .unwrap()
                .to_path_buf()
        })
        .unwrap_or_else(|| panic!("no work dir announced: {messages:?}"));
    assert!(!work_dir.exists(), "{} left behind", work_dir.display());
    // The driver processes of that run are gone: none has its kubeconfig in its environment.
    let marker = work_dir.to_string_lossy().into_owned();
    let mut leftovers = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(environ) = std::fs::read(entry.path().join("environ"))
            && String::from_utf8_lossy(&environ).contains(&marker)
        {
            leftovers.push(entry.file_name());
        }
    }
    assert!(
        leftovers.is_empty(),
        "processes of the run still alive: {leftovers:?}"
    );
}

/// `fake-dra-sim`, built next to the driver's binaries by `cargo test --workspace`.
fn sim_binary() -> std::path::PathBuf {
    fake_dra_emulator::binaries::locate(fake_dra_emulator::binaries::SIM, None)
        .unwrap_or_else(|e| panic!("{e}"))
}
