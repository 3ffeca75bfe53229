//! kwok plays the kubelet of many nodes whose devices fleet mode publishes, on the real
//! control plane of `hack/local-cluster.sh`: the scenario `hack/kwok.sh` drives (it brings
//! the cluster up, runs kwok and `fake-dra-kubelet-plugin fleet --node-selector type=kwok`
//! as host processes, runs this test, and tears everything down; docs/fleet.md).
//!
//! 1. N Nodes are created as kwok expects them (annotated `kwok.x-k8s.io/node=fake`,
//!    labelled `type=kwok`, tainted `kwok.x-k8s.io/node=fake:NoSchedule`); kwok makes them
//!    Ready and the fleet publishes a pool for each: every kwok node has its complete pool,
//!    and no other pool names a kwok node.
//! 2. M pods with claim templates of one and two devices go Running on kwok nodes (kwok
//!    writes their status): every claim is allocated from its pod's node, reserved for the
//!    pod, and no device is allocated twice.
//! 3. Some nodes with bound pods are deleted (the input to try): their slices go at once;
//!    the pod garbage collector (kube-controller-manager, 40 s after the node went) marks
//!    the pods bound there Failed with a DisruptionTarget condition (DeletionByPodGC) and
//!    deletes them, and their claims go with them; the other pods stay Running with their
//!    claims.
//! 4. The remaining pods are deleted (kwok finishes the deletion): every claim goes, no
//!    device stays allocated.
//! 5. The remaining nodes are deleted: no slice of a kwok node is left.
//!
//! Driven by `FAKE_DRA_KWOK_KUBECONFIG` (the cluster's kubeconfig), with the sizes in
//! `FAKE_DRA_KWOK_NODES`, `FAKE_DRA_KWOK_PODS`, `FAKE_DRA_KWOK_DELETE_NODES` and the
//! report written to `FAKE_DRA_KWOK_REPORT`. Without the kubeconfig it prints `SKIPPED: …`
//! and passes, or fails when `FAKE_DRA_REQUIRE_KWOK=1` (hack/kwok.sh sets it).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::external;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate, ResourceSlice};
use kube::api::{Api, DeleteParams, ListParams, ObjectList, PostParams};
use kube::runtime::watcher;
use serde_json::json;

use external::{Scenario, wait_until};

const KUBECONFIG_ENV: &str = "FAKE_DRA_KWOK_KUBECONFIG";
const SCENARIO: Scenario = Scenario {
    test: "kwok::kwok_nodes_with_fleet_slices",
    what: "the kwok scenario",
    script: "hack/kwok.sh",
    require_env: "FAKE_DRA_REQUIRE_KWOK",
};
const DRIVER: &str = "fake.resource.3-shake.com";
/// deploy/structured/deviceclass.yaml, which hack/kwok.sh applies.
const CLASS: &str = "fake.3-shake.com";
const NODE_PREFIX: &str = "kwok-node-";
/// The label the fleet selects (`--node-selector type=kwok`), as kwok's examples label.
const LABEL: &str = "type=kwok";
/// kwok manages the nodes with this annotation (`--manage-nodes-with-annotation-selector`)
/// and, by convention, these nodes carry it as a NoSchedule taint too, so only pods that
/// tolerate it land where no container ever runs.
const KWOK_KEY: &str = "kwok.x-k8s.io/node";
const NAMESPACE: &str = "kwok-claims";
/// Safety nets for the waits (never assertions on speed): 1,000 nodes on two shared cores
/// take minutes; the pod garbage collector waits 40 s before deleting orphaned pods.
const PATIENCE: Duration = Duration::from_secs(1200);

fn env_usize(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|e| panic!("{name}={v}: not a count ({e})")),
        Err(_) => default,
    }
}

/// Every object a list returns, page by page (1,000 nodes' slices are many).
async fn list_all<K>(api: &Api<K>, lp: &ListParams) -> Result<Vec<K>, String>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut items = Vec::new();
    let mut lp = lp.clone().limit(500);
    loop {
        let page: ObjectList<K> = api.list(&lp).await.map_err(|e| format!("list: {e}"))?;
        items.extend(page.items);
        match page.metadata.continue_ {
            Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
            _ => return Ok(items),
        }
    }
}

fn node_name(i: usize) -> String {
    format!("{NODE_PREFIX}{i}")
}

fn kwok_node(name: &str) -> Node {
    let (key, value) = LABEL.split_once('=').unwrap();
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": {key: value, "kubernetes.io/hostname": name},
            "annotations": {KWOK_KEY: "fake"},
        },
        "spec": {"taints": [{"key": KWOK_KEY, "value": "fake", "effect": "NoSchedule"}]},
    }))
    .unwrap()
}

/// Pod `i`: one device (even `i`) or two (odd), from a template, on a kwok node.
fn pod(i: usize) -> Pod {
    let (key, value) = LABEL.split_once('=').unwrap();
    let template = if i.is_multiple_of(2) {
        "one-device"
    } else {
        "two-devices"
    };
    serde_json::from_value(json!({
        "metadata": {"name": format!("pod-{i}"), "namespace": NAMESPACE},
        "spec": {
            "nodeSelector": {key: value},
            "tolerations": [{"key": KWOK_KEY, "operator": "Exists", "effect": "NoSchedule"}],
            // Never pulled: kwok runs no container.
            "containers": [{"name": "c", "image": "fake-dra.local/never-pulled:1",
                            "resources": {"claims": [{"name": "dev"}]}}],
            "resourceClaims": [{"name": "dev", "resourceClaimTemplateName": template}],
        },
    }))
    .unwrap()
}

fn devices_wanted(i: usize) -> usize {
    if i.is_multiple_of(2) { 1 } else { 2 }
}

fn template(name: &str, count: usize) -> ResourceClaimTemplate {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"spec": {"devices": {"requests": [{"name": "dev", "exactly": {
            "deviceClassName": CLASS, "allocationMode": "ExactCount", "count": count}}]}}},
    }))
    .unwrap()
}

/// The kwok nodes' pools as published: pool (= node) name to its device names, counting a
/// pool only once all `resourceSliceCount` slices of its newest generation are there.
/// Pools of our driver that name a node outside the kwok prefix are ignored (the local
/// cluster's own node has none: no plugin runs there).
async fn kwok_pools(
    slices: &Api<ResourceSlice>,
) -> Result<BTreeMap<String, BTreeSet<String>>, String> {
    let all = list_all(
        slices,
        &ListParams::default().fields(&format!("spec.driver={DRIVER}")),
    )
    .await?;
    let mut by_pool: BTreeMap<String, Vec<&ResourceSlice>> = BTreeMap::new();
    for s in &all {
        let Some(node) = &s.spec.node_name else {
            continue;
        };
        if !node.starts_with(NODE_PREFIX) {
            continue;
        }
        if s.spec.pool.name != *node {
            return Err(format!(
                "slice {:?} of node {node} is in pool {}",
                s.metadata.name, s.spec.pool.name
            ));
        }
        by_pool.entry(node.clone()).or_default().push(s);
    }
    let mut pools = BTreeMap::new();
    for (pool, slices) in by_pool {
        let newest = slices
            .iter()
            .map(|s| s.spec.pool.generation)
            .max()
            .unwrap_or(0);
        let current: Vec<_> = slices
            .iter()
            .filter(|s| s.spec.pool.generation == newest)
            .collect();
        if current.len() as i64 != current[0].spec.pool.resource_slice_count {
            continue;
        }
        let devices = current
            .iter()
            .flat_map(|s| s.spec.devices.iter().flatten())
            .map(|d| d.name.clone())
            .collect();
        pools.insert(pool, devices);
    }
    Ok(pools)
}

/// The kwok nodes that exist, and how many of them are Ready and free of the
/// not-ready taint the node lifecycle controller puts on new nodes.
async fn kwok_nodes(nodes: &Api<Node>) -> Result<(BTreeSet<String>, usize), String> {
    let list = list_all(nodes, &ListParams::default().labels(LABEL)).await?;
    let mut ready = 0;
    let mut names = BTreeSet::new();
    for n in &list {
        names.insert(n.metadata.name.clone().unwrap_or_default());
        let is_ready = n
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        let not_ready_taint = n
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|ts| ts.iter().any(|t| t.key.starts_with("node.kubernetes.io/")));
        if is_ready && !not_ready_taint {
            ready += 1;
        }
    }
    Ok((names, ready))
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("<none>")
}

fn node_of(p: &Pod) -> Option<&str> {
    p.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

/// Pods by phase, and one pod not Running with its conditions, for failure messages.
fn pods_seen(pods: &[Pod]) -> String {
    let mut by_phase: BTreeMap<&str, usize> = BTreeMap::new();
    for p in pods {
        *by_phase.entry(phase(p)).or_default() += 1;
    }
    let stuck = pods.iter().find(|p| phase(p) != "Running").map(|p| {
        format!(
            "; e.g. {} on {:?}: {:?}",
            p.metadata.name.as_deref().unwrap_or_default(),
            node_of(p),
            p.status.as_ref().and_then(|s| s.conditions.as_ref())
        )
    });
    format!(
        "{} pods {by_phase:?}{}",
        pods.len(),
        stuck.unwrap_or_default()
    )
}

/// The devices (pool, device) a claim holds, checked to be our driver's.
fn held(c: &ResourceClaim) -> Vec<(String, String)> {
    c.status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
        .and_then(|d| d.results.as_ref())
        .into_iter()
        .flatten()
        .map(|r| {
            assert_eq!(r.driver, DRIVER, "claim {:?}: {r:?}", c.metadata.name);
            (r.pool.clone(), r.device.clone())
        })
        .collect()
}

/// The name of the claim the pod's `dev` entry got from its template.
fn claim_name(p: &Pod) -> Option<String> {
    p.status
        .as_ref()?
        .resource_claim_statuses
        .as_ref()?
        .iter()
        .find(|s| s.name == "dev")?
        .resource_claim_name
        .clone()
}

/// A pod's state as the scenario reports it: its phase and DisruptionTarget reason, or
/// `deleted`.
fn state(p: &Pod) -> String {
    let disruption = p
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "DisruptionTarget" && c.status == "True")
        .map(|c| {
            format!(
                ", DisruptionTarget: {}",
                c.reason.as_deref().unwrap_or_default()
            )
        })
        .unwrap_or_default();
    let deleting = if p.metadata.deletion_timestamp.is_some() {
        ", deleting"
    } else {
        ""
    };
    format!("{}{disruption}{deleting}", phase(p))
}

type History = Arc<Mutex<BTreeMap<String, Vec<String>>>>;

/// Watches the pods of the namespace and records, for those named, each distinct state
/// they pass through in order; returns once the watch has its initial list.
async fn watch_states(
    pods: Api<Pod>,
    names: BTreeSet<String>,
) -> (History, tokio::task::JoinHandle<()>) {
    let history: History = Default::default();
    let (synced, is_synced) = tokio::sync::oneshot::channel();
    let sink = history.clone();
    let task = tokio::spawn(async move {
        let mut synced = Some(synced);
        let mut events = watcher(pods, watcher::Config::default()).boxed();
        while let Some(event) = events.next().await {
            let (p, what) = match event {
                Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                    let what = state(&p);
                    (p, what)
                }
                Ok(watcher::Event::Delete(p)) => (p, "deleted".to_string()),
                Ok(watcher::Event::InitDone) => {
                    if let Some(s) = synced.take() {
                        let _ = s.send(());
                    }
                    continue;
                }
                Ok(watcher::Event::Init) | Err(_) => continue,
            };
            let name = p.metadata.name.clone().unwrap_or_default();
            if names.contains(&name) {
                let mut h = sink.lock().unwrap();
                let states = h.entry(name).or_default();
                if states.last() != Some(&what) {
                    states.push(what);
                }
            }
        }
    });
    is_synced
        .await
        .expect("the pod watch ended before its initial list");
    (history, task)
}

struct Report(String);

impl Report {
    fn line(&mut self, text: String) {
        eprintln!("kwok: {text}");
        let _ = writeln!(self.0, "{text}");
    }
}

async fn create_all<K>(api: &Api<K>, objects: Vec<K>) -> Result<(), String>
where
    K: Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug + kube::Resource,
{
    let results: Vec<_> = futures::stream::iter(objects.into_iter().map(|o| {
        let api = api.clone();
        async move {
            let name = o.meta().name.clone().unwrap_or_default();
            api.create(&PostParams::default(), &o)
                .await
                .map_err(|e| format!("create {name}: {e}"))
        }
    }))
    .buffer_unordered(32)
    .collect()
    .await;
    let errors: Vec<String> = results.into_iter().filter_map(Result::err).collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!("{} failed, e.g. {}", errors.len(), errors[0]))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kwok_nodes_with_fleet_slices() {
    let Ok(kubeconfig) = std::env::var(KUBECONFIG_ENV) else {
        return SCENARIO.skip(&format!(
            "{KUBECONFIG_ENV} is not set (not driven by hack/kwok.sh)"
        ));
    };
    let n_nodes = env_usize("FAKE_DRA_KWOK_NODES", 1000);
    let n_pods = env_usize("FAKE_DRA_KWOK_PODS", 500);
    let n_delete = env_usize("FAKE_DRA_KWOK_DELETE_NODES", 10);
    assert!(
        n_nodes > 0 && n_pods > 0,
        "FAKE_DRA_KWOK_NODES and FAKE_DRA_KWOK_PODS must be at least 1"
    );
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig)
            .unwrap_or_else(|e| panic!("{kubeconfig}: {e}")),
        &Default::default(),
    )
    .await
    .unwrap_or_else(|e| panic!("{kubeconfig}: {e}"));
    let client = kube::Client::try_from(config).unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), NAMESPACE);
    let mut report = Report(String::new());

    // 1. The nodes: kwok makes them Ready, the fleet publishes their pools.
    let (existing, _) = kwok_nodes(&nodes).await.unwrap();
    assert!(
        existing.is_empty(),
        "a fresh cluster has no kwok node, but there are {existing:?}"
    );
    let started = Instant::now();
    create_all(
        &nodes,
        (0..n_nodes).map(|i| kwok_node(&node_name(i))).collect(),
    )
    .await
    .unwrap_or_else(|e| panic!("creating {n_nodes} kwok nodes: {e}"));
    let created = started.elapsed();
    let names: BTreeSet<String> = (0..n_nodes).map(node_name).collect();
    let mut ready_after = None;
    let mut published_after = None;
    let pools = wait_until(
        &format!("{n_nodes} kwok nodes Ready with their pools published"),
        PATIENCE,
        async || {
            let (seen, ready) = kwok_nodes(&nodes).await?;
            if seen != names {
                return Err(format!(
                    "{} kwok nodes, not the {n_nodes} created",
                    seen.len()
                ));
            }
            if ready == n_nodes && ready_after.is_none() {
                ready_after = Some(started.elapsed());
            }
            let pools = kwok_pools(&slices).await?;
            if pools.len() == n_nodes && published_after.is_none() {
                published_after = Some(started.elapsed());
            }
            if ready < n_nodes || pools.len() < n_nodes {
                return Err(format!(
                    "{ready} of {n_nodes} Ready, {} complete pools",
                    pools.len()
                ));
            }
            Ok(pools)
        },
    )
    .await;
    let pool_names: BTreeSet<String> = pools.keys().cloned().collect();
    assert_eq!(
        pool_names, names,
        "the kwok nodes' pools are exactly the kwok nodes"
    );
    let per_node: BTreeSet<usize> = pools.values().map(BTreeSet::len).collect();
    assert!(
        per_node.len() == 1 && !per_node.contains(&0),
        "every kwok node has the same devices (the fleet's flags), at least one; per node: {per_node:?}"
    );
    let devices_total: usize = pools.values().map(BTreeSet::len).sum();
    report.line(format!(
        "{n_nodes} kwok nodes created in {:.1} s; all Ready after {:.1} s; all {n_nodes} pools ({devices_total} devices, {per_node:?} per node) published after {:.1} s",
        created.as_secs_f64(),
        ready_after.unwrap_or_default().as_secs_f64(),
        published_after.unwrap_or_default().as_secs_f64(),
    ));

    // 2. Pods with claims go Running on kwok nodes, each device allocated once.
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap_or_else(|e| panic!("create namespace {NAMESPACE}: {e}"));
    let templates: Api<ResourceClaimTemplate> = Api::namespaced(client.clone(), NAMESPACE);
    create_all(
        &templates,
        vec![template("one-device", 1), template("two-devices", 2)],
    )
    .await
    .unwrap_or_else(|e| panic!("the claim templates: {e}"));
    let started = Instant::now();
    create_all(&pods, (0..n_pods).map(pod).collect())
        .await
        .unwrap_or_else(|e| panic!("creating {n_pods} pods: {e}"));
    let running = wait_until(&format!("{n_pods} pods Running"), PATIENCE, async || {
        let list = list_all(&pods, &ListParams::default()).await?;
        if list.len() == n_pods && list.iter().all(|p| phase(p) == "Running") {
            Ok(list)
        } else {
            Err(pods_seen(&list))
        }
    })
    .await;
    let running_after = started.elapsed();
    let all_claims = list_all(&claims, &ListParams::default()).await.unwrap();
    let by_name: BTreeMap<&str, &ResourceClaim> = all_claims
        .iter()
        .map(|c| (c.metadata.name.as_deref().unwrap_or_default(), c))
        .collect();
    let mut allocated: BTreeMap<(String, String), String> = BTreeMap::new();
    let mut pod_node: BTreeMap<String, String> = BTreeMap::new();
    let mut pod_claim: BTreeMap<String, String> = BTreeMap::new();
    for p in &running {
        let name = p.metadata.name.clone().unwrap_or_default();
        let node = node_of(p).unwrap_or_else(|| panic!("{name} is Running but not bound"));
        assert!(
            names.contains(node),
            "{name} runs on {node}, not a kwok node"
        );
        let i: usize = name.trim_start_matches("pod-").parse().unwrap();
        let claim_name = claim_name(p)
            .unwrap_or_else(|| panic!("{name} has no claim in its status: {:?}", p.status));
        let claim = by_name.get(claim_name.as_str()).unwrap_or_else(|| {
            panic!(
                "{name}'s claim {claim_name} is not in the list of {} claims",
                all_claims.len()
            )
        });
        let reserved: Vec<_> = claim
            .status
            .as_ref()
            .and_then(|s| s.reserved_for.as_ref())
            .into_iter()
            .flatten()
            .map(|r| r.name.clone())
            .collect();
        assert_eq!(
            reserved,
            std::slice::from_ref(&name),
            "claim {claim_name} is reserved for its pod only"
        );
        let devices = held(claim);
        assert_eq!(
            devices.len(),
            devices_wanted(i),
            "{name}'s claim {claim_name} holds {devices:?}"
        );
        for d in devices {
            assert_eq!(
                d.0, node,
                "{name} on {node} got a device of another node's pool: {d:?}"
            );
            assert!(
                pools[node].contains(&d.1),
                "{name} got {d:?}, which {node}'s pool does not publish"
            );
            if let Some(other) = allocated.insert(d.clone(), claim_name.clone()) {
                panic!("device {d:?} is allocated to two claims: {other} and {claim_name}");
            }
        }
        pod_node.insert(name.clone(), node.to_string());
        pod_claim.insert(name, claim_name);
    }
    let wanted: usize = (0..n_pods).map(devices_wanted).sum();
    assert_eq!(
        allocated.len(),
        wanted,
        "distinct devices allocated to the {n_pods} pods"
    );
    let used_nodes: BTreeSet<&String> = pod_node.values().collect();
    report.line(format!(
        "{n_pods} pods (claims of 1 and 2 devices) Running after {:.1} s on {} kwok nodes; {} distinct devices allocated, none twice",
        running_after.as_secs_f64(),
        used_nodes.len(),
        allocated.len()
    ));

    // 3. Nodes deleted while pods are bound to them.
    let victims: BTreeSet<String> = used_nodes
        .iter()
        .take(n_delete)
        .map(|s| s.to_string())
        .collect();
    let victim_pods: BTreeSet<String> = pod_node
        .iter()
        .filter(|(_, n)| victims.contains(*n))
        .map(|(p, _)| p.clone())
        .collect();
    let victim_claims: BTreeSet<String> =
        victim_pods.iter().map(|p| pod_claim[p].clone()).collect();
    // Every state the victim pods pass through, from a watch started before the nodes
    // go: polling would miss a status written just before a deletion.
    let (history, watching) = watch_states(pods.clone(), victim_pods.clone()).await;
    let started = Instant::now();
    for v in &victims {
        nodes
            .delete(v, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("delete node {v}: {e}"));
    }
    let mut slices_gone_after = None;
    let mut pods_gone_after = None;
    wait_until(
        &format!("the {} deleted nodes' slices, pods and claims gone", victims.len()),
        PATIENCE,
        async || {
            let pools = kwok_pools(&slices).await?;
            let left: Vec<_> = victims.iter().filter(|v| pools.contains_key(*v)).collect();
            let any_slice = list_all(&slices, &ListParams::default().fields(&format!("spec.driver={DRIVER}")))
                .await?
                .into_iter()
                .filter(|s| s.spec.node_name.as_ref().is_some_and(|n| victims.contains(n)))
                .count();
            if left.is_empty() && any_slice == 0 && slices_gone_after.is_none() {
                slices_gone_after = Some(started.elapsed());
            }
            let list = list_all(&pods, &ListParams::default()).await?;
            let mut victims_left = 0;
            for p in &list {
                let name = p.metadata.name.clone().unwrap_or_default();
                if victim_pods.contains(&name) {
                    victims_left += 1;
                }
            }
            if victims_left == 0 && pods_gone_after.is_none() {
                pods_gone_after = Some(started.elapsed());
            }
            let claims_left = list_all(&claims, &ListParams::default())
                .await?
                .into_iter()
                .filter(|c| c.metadata.name.as_ref().is_some_and(|n| victim_claims.contains(n)))
                .count();
            if any_slice > 0 || victims_left > 0 || claims_left > 0 {
                return Err(format!(
                    "{any_slice} slices of the deleted nodes, {victims_left} of their {} pods, {claims_left} of their claims",
                    victim_pods.len()
                ));
            }
            Ok(())
        },
    )
    .await;
    let freed_after = started.elapsed();
    let survivors = list_all(&pods, &ListParams::default()).await.unwrap();
    assert_eq!(
        survivors.len(),
        n_pods - victim_pods.len(),
        "only the pods of the deleted nodes went: {}",
        pods_seen(&survivors)
    );
    assert!(
        survivors
            .iter()
            .all(|p| phase(p) == "Running" && p.metadata.deletion_timestamp.is_none()),
        "the other pods stay Running: {}",
        pods_seen(&survivors)
    );
    let claims_now = list_all(&claims, &ListParams::default()).await.unwrap();
    assert_eq!(
        claims_now.len(),
        survivors.len(),
        "one claim per remaining pod"
    );
    for c in &claims_now {
        assert!(
            !held(c).is_empty(),
            "claim {:?} of a remaining pod is still allocated",
            c.metadata.name
        );
    }
    // What upstream does with them (kube-controller-manager's pod garbage collector, once
    // the node has been gone 40 s): marks each Failed with a DisruptionTarget condition,
    // then deletes it at once (grace 0; no kubelet would ever confirm).
    watching.abort();
    let history = history.lock().unwrap().clone();
    let mut paths: BTreeSet<String> = BTreeSet::new();
    for pod in &victim_pods {
        let states = history.get(pod).cloned().unwrap_or_default();
        assert_eq!(
            states.last().map(String::as_str),
            Some("deleted"),
            "{pod} (on a deleted node): states seen {states:?}"
        );
        assert!(
            states
                .iter()
                .any(|s| s == "Failed, DisruptionTarget: DeletionByPodGC"),
            "{pod} (on a deleted node) was marked Failed by the pod garbage collector before its deletion: states seen {states:?}"
        );
        paths.insert(states.join(" -> "));
    }
    report.line(format!(
        "{} nodes deleted with {} pods bound: their slices gone after {:.1} s, the pods gone after {:.1} s ({paths:?}), their claims gone after {:.1} s; the other {} pods still Running with their claims",
        victims.len(),
        victim_pods.len(),
        slices_gone_after.unwrap_or_default().as_secs_f64(),
        pods_gone_after.unwrap_or_default().as_secs_f64(),
        freed_after.as_secs_f64(),
        survivors.len()
    ));

    // 4. Deleting the pods frees their devices: kwok completes the deletions, the claims go.
    let started = Instant::now();
    pods.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete the pods: {e}"));
    wait_until("every pod and claim gone", PATIENCE, async || {
        let p = list_all(&pods, &ListParams::default()).await?;
        let c = list_all(&claims, &ListParams::default()).await?;
        if p.is_empty() && c.is_empty() {
            Ok(())
        } else {
            Err(format!("{}; {} claims", pods_seen(&p), c.len()))
        }
    })
    .await;
    let deleted_after = started.elapsed();
    let everywhere = list_all(
        &Api::<ResourceClaim>::all(client.clone()),
        &ListParams::default(),
    )
    .await
    .unwrap();
    let still: Vec<_> = everywhere
        .iter()
        .flat_map(held)
        .filter(|(pool, _)| pool.starts_with(NODE_PREFIX))
        .collect();
    assert!(
        still.is_empty(),
        "no claim anywhere holds a kwok node's device, but {still:?}"
    );
    report.line(format!(
        "{} pods deleted (kwok completes the deletion): pods and claims gone after {:.1} s, no device allocated",
        survivors.len(),
        deleted_after.as_secs_f64()
    ));

    // 5. Every kwok node removed: no slice of them is left.
    let started = Instant::now();
    nodes
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels(LABEL),
        )
        .await
        .unwrap_or_else(|e| panic!("delete the kwok nodes: {e}"));
    wait_until("no kwok node and no slice of one", PATIENCE, async || {
        let (left, _) = kwok_nodes(&nodes).await?;
        let stale = list_all(
            &slices,
            &ListParams::default().fields(&format!("spec.driver={DRIVER}")),
        )
        .await?
        .into_iter()
        .filter(|s| {
            s.spec
                .node_name
                .as_ref()
                .is_some_and(|n| n.starts_with(NODE_PREFIX))
        })
        .count();
        if left.is_empty() && stale == 0 {
            Ok(())
        } else {
            Err(format!(
                "{} kwok nodes, {stale} slices of kwok nodes",
                left.len()
            ))
        }
    })
    .await;
    report.line(format!(
        "the other {} kwok nodes deleted: nodes and slices gone after {:.1} s",
        n_nodes - victims.len(),
        started.elapsed().as_secs_f64()
    ));
    let _ = Api::<Namespace>::all(client.clone())
        .delete(NAMESPACE, &DeleteParams::default())
        .await;
    if let Ok(path) = std::env::var("FAKE_DRA_KWOK_REPORT") {
        std::fs::write(&path, &report.0).unwrap_or_else(|e| panic!("writing {path}: {e}"));
    }
}
