//! The scenarios, written once for both clusters ([`Backend`]): each applies what a user
//! would, asserts what must hold on any correct cluster (on what the containers print
//! first of all), and writes down what it saw in the [`Protocol`] so the emulator can be
//! compared with the real cluster. Every scenario leaves the cluster as it found it (its
//! namespaces deleted and waited for), because one cluster runs them all.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use kube::api::{Api, DeleteParams, ListParams};

use super::backend::Backend;
use super::protocol::{Protocol, env_names};
use super::resources;
use crate::common::{DRIVER, TWO_REQUESTS, devices, distinct, examples_dir, exported};

/// A safety net for every wait: the real cluster normally answers in seconds. Never an
/// assertion on speed.
pub const PATIENCE: Duration = Duration::from_secs(180);

/// Polls `check` until it yields a value.
pub async fn wait_until<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    wait_until_seen(what, || {
        let next = check();
        async move { next.await.ok_or_else(String::new) }
    })
    .await
}

/// Polls `check` until it yields a value; on giving up, says what the last poll saw
/// (`check`'s `Err`).
pub async fn wait_until_seen<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let seen = match check().await {
            Ok(value) => return value,
            Err(seen) => seen,
        };
        assert!(
            tokio::time::Instant::now() < deadline,
            "gave up waiting for: {what}{}{seen}",
            if seen.is_empty() { "" } else { "; last seen: " }
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The node's slices as a line: name, uid, pool generation each.
fn describe_slices(slices: &[ResourceSlice]) -> String {
    let each: Vec<String> = slices
        .iter()
        .map(|s| {
            format!(
                "{} (uid {}, pool generation {})",
                s.metadata.name.as_deref().unwrap_or("?"),
                s.metadata.uid.as_deref().unwrap_or("?"),
                s.spec.pool.generation
            )
        })
        .collect();
    format!(
        "{} slice(s) of the node: [{}]",
        slices.len(),
        each.join(", ")
    )
}

// --- reading the cluster ----------------------------------------------------------------

pub(super) fn example(name: &str) -> String {
    let path = examples_dir().join("structured").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub async fn apply<B: Backend>(b: &B, yaml: &str) {
    if let Err(e) = b.apply(yaml).await {
        panic!("{}: applying failed: {e}\n{yaml}", b.name());
    }
}

pub async fn get_pod<B: Backend>(b: &B, namespace: &str, name: &str) -> Option<Pod> {
    Api::<Pod>::namespaced(b.client(), namespace)
        .get_opt(name)
        .await
        .unwrap_or_else(|e| panic!("get pod {namespace}/{name}: {e}"))
}

pub(super) fn phase(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

pub(super) fn restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map(|cs| cs.iter().map(|c| c.restart_count).sum())
        .unwrap_or_default()
}

pub(super) fn node_of(pod: &Pod) -> Option<String> {
    pod.spec.as_ref().and_then(|s| s.node_name.clone())
}

pub(super) async fn wait_phase<B: Backend>(b: &B, namespace: &str, name: &str, want: &str) -> Pod {
    wait_until(&format!("pod {namespace}/{name} {want}"), || async {
        get_pod(b, namespace, name)
            .await
            .filter(|p| phase(p) == want)
    })
    .await
}

/// The container's env, once it printed it (`export` lists `PWD` after our variables).
pub async fn env_of<B: Backend>(
    b: &B,
    namespace: &str,
    pod: &str,
    container: &str,
) -> BTreeMap<String, String> {
    let lines = wait_until(
        &format!("{namespace}/{pod}/{container} printed its environment"),
        || async {
            let lines = b.logs(namespace, pod, container).await;
            lines
                .iter()
                .any(|l| l.starts_with("export PWD="))
                .then_some(lines)
        },
    )
    .await;
    exported(&lines)
}

/// Waits until the pod runs and its container printed its env; records the phase, the
/// number of devices and our env names; checks the variables every container gets.
pub(super) async fn running<B: Backend>(
    b: &B,
    p: &mut Protocol,
    namespace: &str,
    pod: &str,
    container: &str,
    label: &str,
) -> BTreeMap<String, String> {
    let po = wait_phase(b, namespace, pod, "Running").await;
    let env = env_of(b, namespace, pod, container).await;
    assert_eq!(
        env.get("DRA_RESOURCE_DRIVER_NAME").map(String::as_str),
        Some(DRIVER),
        "{env:?}"
    );
    assert_eq!(
        env.get("FAKE_NODE_NAME"),
        Some(&b.node()),
        "{label}: {env:?}"
    );
    assert_eq!(node_of(&po), Some(b.node()));
    p.record(format!("{label} phase"), phase(&po));
    p.record(format!("{label} devices"), devices(&env).len());
    p.record(format!("{label} env"), env_names(&env));
    env
}

/// (reason, note) of the events about an object.
pub(super) async fn events_of<B: Backend>(
    b: &B,
    namespace: &str,
    object: &str,
) -> Vec<(String, String)> {
    Api::<Event>::namespaced(b.client(), namespace)
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("events of {namespace}: {e}"))
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(object))
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

/// Waits for the event with `reason` about the pod whose message is the `settled` one
/// (the one the pod stays with), asserts the pod is Pending, and records the message and
/// any other message of that reason seen so far.
pub(super) async fn pending_with<B: Backend>(
    b: &B,
    p: &mut Protocol,
    (namespace, pod): (&str, &str),
    reason: &str,
    settled: &str,
    label: &str,
) -> String {
    let note = wait_until(
        &format!("a {reason} event for {namespace}/{pod} saying {settled:?}"),
        || async {
            events_of(b, namespace, pod)
                .await
                .into_iter()
                .find(|(r, note)| r == reason && note.contains(settled))
                .map(|(_, note)| note)
        },
    )
    .await;
    let po = get_pod(b, namespace, pod)
        .await
        .unwrap_or_else(|| panic!("pod {namespace}/{pod} gone"));
    assert_eq!(phase(&po), "Pending", "{label}: {note}");
    p.record(format!("{label} phase"), phase(&po));
    p.record(format!("{label} scheduled"), node_of(&po).is_some());
    p.record(format!("{label} event"), reason);
    p.record(format!("{label} message"), &note);
    let others: BTreeSet<String> = events_of(b, namespace, pod)
        .await
        .into_iter()
        .filter(|(r, n)| r == reason && *n != note)
        .map(|(_, n)| n)
        .collect();
    p.record(
        format!("{label} other {reason} messages"),
        if others.is_empty() {
            "none".to_string()
        } else {
            others.into_iter().collect::<Vec<_>>().join(" / ")
        },
    );
    note
}

pub(super) async fn claims<B: Backend>(b: &B, namespace: Option<&str>) -> Vec<ResourceClaim> {
    resources::list(b, namespace).await
}

/// (pool, device) of our driver in a claim's allocation.
pub(super) fn held(claim: &ResourceClaim) -> Vec<(String, String)> {
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

pub(super) async fn claim<B: Backend>(b: &B, namespace: &str, name: &str) -> ResourceClaim {
    resources::get_opt(b, namespace, name)
        .await
        .unwrap_or_else(|| panic!("resourceclaim {namespace}/{name} not found"))
}

/// The claim a pod's `resourceClaims` entry resolved to.
pub(super) async fn claim_of<B: Backend>(
    b: &B,
    namespace: &str,
    pod: &str,
    pod_claim: &str,
) -> ResourceClaim {
    let name = wait_until(
        &format!("{namespace}/{pod}'s claim {pod_claim}"),
        || async {
            let po = get_pod(b, namespace, pod).await?;
            let direct = po
                .spec
                .as_ref()?
                .resource_claims
                .iter()
                .flatten()
                .find(|c| c.name == pod_claim)?
                .resource_claim_name
                .clone();
            direct.or_else(|| {
                po.status?
                    .resource_claim_statuses?
                    .into_iter()
                    .find(|s| s.name == pod_claim)?
                    .resource_claim_name
            })
        },
    )
    .await;
    claim(b, namespace, &name).await
}

/// No device is allocated to two claims.
pub(super) async fn assert_no_device_twice<B: Backend>(b: &B) {
    let mut owner: BTreeMap<(String, String), String> = BTreeMap::new();
    for c in claims(b, None).await {
        let name = format!(
            "{}/{}",
            c.metadata.namespace.clone().unwrap_or_default(),
            c.metadata.name.clone().unwrap_or_default()
        );
        for device in held(&c) {
            if let Some(previous) = owner.insert(device.clone(), name.clone()) {
                panic!(
                    "{}: device {device:?} is held by {previous} and {name}",
                    b.name()
                );
            }
        }
    }
}

pub(super) async fn node_slices<B: Backend>(b: &B) -> Vec<ResourceSlice> {
    let node = b.node();
    resources::list::<ResourceSlice, B>(b, None)
        .await
        .into_iter()
        .filter(|s| s.spec.driver == DRIVER && s.spec.node_name.as_deref() == Some(node.as_str()))
        .collect()
}

/// The parent ids (the `uuid` attribute) of allocated devices.
pub(super) async fn parent_ids<B: Backend>(b: &B, allocated: &[(String, String)]) -> Vec<String> {
    let slices = node_slices(b).await;
    allocated
        .iter()
        .map(|(pool, device)| {
            slices
                .iter()
                .filter(|s| s.spec.pool.name == *pool)
                .flat_map(|s| s.spec.devices.iter().flatten())
                .find(|d| d.name == *device)
                .and_then(|d| d.attributes.as_ref()?.get("uuid")?.string.clone())
                .unwrap_or_else(|| panic!("{device} of pool {pool} not published"))
        })
        .collect()
}

pub(super) fn cdi_spec_of(b: &impl Backend, claim: &ResourceClaim) -> bool {
    let uid = claim.metadata.uid.clone().unwrap_or_default();
    b.cdi_specs().iter().any(|f| f.contains(&uid))
}

/// Deletes the namespaces and waits until they are gone (their claims deleted) and the
/// node has unprepared their claims, so the next scenario finds those devices free.
pub async fn delete_namespaces<B: Backend>(b: &B, names: &[&str]) {
    let mut uids = Vec::new();
    for name in names {
        uids.extend(
            claims(b, Some(name))
                .await
                .into_iter()
                .filter_map(|c| c.metadata.uid),
        );
    }
    let api = Api::<Namespace>::all(b.client());
    for name in names {
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => panic!("delete namespace {name}: {e}"),
        }
    }
    for name in names {
        wait_until(&format!("namespace {name} gone"), || async {
            api.get_opt(name)
                .await
                .unwrap_or_else(|e| panic!("namespace {name}: {e}"))
                .is_none()
                .then_some(())
        })
        .await;
    }
    wait_until("their claims unprepared (CDI specs removed)", || async {
        let specs = b.cdi_specs();
        (!specs
            .iter()
            .any(|f| uids.iter().any(|u| f.contains(u.as_str()))))
        .then_some(())
    })
    .await;
}

/// The pod with one container printing its env and the claims given, as (pod claim
/// name, `resourceClaimName` or `resourceClaimTemplateName`).
pub(super) fn pod_yaml(namespace: &str, name: &str, claims: &[(&str, &str)]) -> String {
    let uses: Vec<String> = claims
        .iter()
        .map(|(n, _)| format!("{{name: {n}}}"))
        .collect();
    let sources: Vec<String> = claims
        .iter()
        .map(|(n, source)| format!("    - {{name: {n}, {source}}}"))
        .collect();
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{namespace: {namespace}, name: {name}}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
    - name: ctr0
      image: busybox:1.36
      command: ["sh", "-c", "trap 'exit 0' TERM; export; sleep infinity & wait"]
      resources:
        claims: [{}]
  resourceClaims:
{}
"#,
        uses.join(", "),
        sources.join("\n")
    )
}

pub fn namespace_yaml(name: &str) -> String {
    format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {name}}}\n")
}

/// A claim of `count` devices of class `class`, with opaque parameters when given (YAML
/// flow syntax).
pub(super) fn claim_yaml(
    kind: &str,
    namespace: &str,
    name: &str,
    class: &str,
    count: u32,
    parameters: Option<&str>,
) -> String {
    let spec = format!(
        "devices:\n  requests:\n    - name: fake\n      exactly: {{deviceClassName: {class}, count: {count}}}\n{}",
        parameters
            .map(|p| format!(
                "  config:\n    - opaque:\n        driver: {DRIVER}\n        parameters: {p}\n"
            ))
            .unwrap_or_default()
    );
    let indent = if kind == "ResourceClaimTemplate" {
        "    "
    } else {
        "  "
    };
    let spec: String = spec.lines().map(|l| format!("{indent}{l}\n")).collect();
    let wrapper = if kind == "ResourceClaimTemplate" {
        "spec:\n  spec:\n"
    } else {
        "spec:\n"
    };
    format!(
        "apiVersion: resource.k8s.io/v1\nkind: {kind}\nmetadata: {{namespace: {namespace}, name: {name}}}\n{wrapper}{spec}"
    )
}

pub(super) fn params(spec: &str) -> String {
    format!(
        "{{apiVersion: fake.resource.3-shake.com/v1alpha1, kind: FakeClaimParameters, spec: {spec}}}"
    )
}

pub(super) fn docs(parts: &[String]) -> String {
    parts.join("\n---\n")
}

// --- the scenarios ----------------------------------------------------------------------

/// The node's ResourceSlice as our plugin publishes it, stored by the API server (so it
/// passed its validation): one slice, pool = node, eight devices with their attributes,
/// owned by the Node.
pub async fn published_slice<B: Backend>(b: &mut B, p: &mut Protocol) {
    p.scenario("published-slice");
    let slices = wait_until("the node's ResourceSlice", || async {
        let s = node_slices(b).await;
        (!s.is_empty()).then_some(s)
    })
    .await;
    p.record("slices of the node", slices.len());
    assert_eq!(slices.len(), 1);
    let s = &slices[0];
    assert_eq!(s.spec.pool.name, b.node());
    p.record("pool is the node's name", s.spec.pool.name == b.node());
    p.record("pool resourceSliceCount", s.spec.pool.resource_slice_count);
    let devices = s.spec.devices.clone().unwrap_or_default();
    p.record("devices", devices.len());
    let attributes: BTreeSet<String> = devices
        .iter()
        .flat_map(|d| d.attributes.iter().flatten().map(|(k, _)| k.clone()))
        .collect();
    p.record(
        "attributes",
        attributes.into_iter().collect::<Vec<_>>().join(" "),
    );
    let models: BTreeSet<String> = devices
        .iter()
        .filter_map(|d| d.attributes.as_ref()?.get("model")?.string.clone())
        .collect();
    p.record("models", models.into_iter().collect::<Vec<_>>().join(" "));
    let owners: Vec<String> = s
        .metadata
        .owner_references
        .iter()
        .flatten()
        .map(|o| {
            let name = if o.name == b.node() {
                "<the node>"
            } else {
                o.name.as_str()
            };
            format!("{}/{name}", o.kind)
        })
        .collect();
    p.record("owners", owners.join(" "));
}

/// Scenario 1: two pods, each with its own claim from one template: distinct devices.
pub async fn two_pods_get_distinct_devices<B: Backend>(b: &mut B, p: &mut Protocol) {
    p.scenario("two-pods-own-claims");
    apply(b, &example("1-two-pods-own-claims.yaml")).await;
    let a = running(b, p, "test1", "pod0", "ctr0", "pod0").await;
    let c = running(b, p, "test1", "pod1", "ctr0", "pod1").await;
    let (da, dc) = (devices(&a), devices(&c));
    assert_eq!((da.len(), dc.len()), (1, 1));
    assert_ne!(da[0], dc[0], "two pods, two devices");
    p.record("distinct devices", da[0] != dc[0]);
    assert_no_device_twice(b).await;
    delete_namespaces(b, &["test1"]).await;
}

/// Scenario 2: two containers of a pod share the pod's claim.
pub async fn two_containers_share_a_claim<B: Backend>(b: &mut B, p: &mut Protocol) {
    p.scenario("two-containers-share");
    apply(b, &example("2-two-containers-share.yaml")).await;
    let a = running(b, p, "test2", "pod0", "ctr0", "pod0/ctr0").await;
    let c = env_of(b, "test2", "pod0", "ctr1").await;
    p.record("pod0/ctr1 env", env_names(&c));
    assert_eq!(devices(&a).len(), 1);
    assert_eq!(
        devices(&a),
        devices(&c),
        "the same device in both containers"
    );
    p.record("same device", devices(&a) == devices(&c));
    delete_namespaces(b, &["test2"]).await;
}

/// Scenario 3: a global claim shared by two pods; allocated until its last user goes.
pub async fn global_claim_shared_until_its_last_user<B: Backend>(b: &mut B, p: &mut Protocol) {
    p.scenario("global-claim-shared");
    apply(b, &example("3-global-claim-shared.yaml")).await;
    let a = running(b, p, "test3", "pod0", "ctr0", "pod0").await;
    let c = running(b, p, "test3", "pod1", "ctr0", "pod1").await;
    assert_eq!(devices(&a).len(), 1);
    assert_eq!(devices(&a), devices(&c), "one claim, one device, two pods");
    p.record("same device", devices(&a) == devices(&c));
    let reserved = |c: &ResourceClaim| {
        c.status
            .as_ref()
            .and_then(|s| s.reserved_for.as_ref())
            .map(Vec::len)
            .unwrap_or_default()
    };
    p.record("reservedFor", reserved(&claim(b, "test3", "fake").await));

    Api::<Pod>::namespaced(b.client(), "test3")
        .delete("pod0", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete pod0: {e}"));
    let after = wait_until("pod0 out of reservedFor", || async {
        let c = claim(b, "test3", "fake").await;
        (reserved(&c) == 1 && get_pod(b, "test3", "pod0").await.is_none()).then_some(c)
    })
    .await;
    p.record("after pod0 went: devices allocated", held(&after).len());
    assert_eq!(held(&after).len(), 1, "still used by pod1");
    assert!(cdi_spec_of(b, &after), "still prepared for pod1");

    Api::<Pod>::namespaced(b.client(), "test3")
        .delete("pod1", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete pod1: {e}"));
    let released = wait_until("the claim deallocated after its last user", || async {
        let c = claim(b, "test3", "fake").await;
        (held(&c).is_empty() && reserved(&c) == 0).then_some(c)
    })
    .await;
    p.record("after pod1 went: devices allocated", held(&released).len());
    p.record(
        "after pod1 went: claim kept",
        released.metadata.name.is_some(),
    );
    wait_until("the claim unprepared", || async {
        (!cdi_spec_of(b, &released)).then_some(())
    })
    .await;
    delete_namespaces(b, &["test3"]).await;
}

/// Scenario 4: count 4: four distinct devices, the allocated parents themselves.
pub async fn count_4<B: Backend>(b: &mut B, p: &mut Protocol) {
    p.scenario("count-4");
    apply(b, &example("4-count-4.yaml")).await;
    let env = running(b, p, "test4", "pod0", "ctr0", "pod0").await;
    let ids = devices(&env);
    assert!(distinct(&ids));
    let results = held(&claim_of(b, "test4", "pod0", "fake").await);
    p.record("allocation results", results.len());
    let parents: BTreeSet<String> = parent_ids(b, &results).await.into_iter().collect();
    assert_eq!(
        parents,
        ids.iter().cloned().collect(),
        "split 1: the parents"
    );
    p.record("devices are the allocated parents", true);
    delete_namespaces(b, &["test4"]).await;
}

/// Scenario 5, the seed demo: count 4 split 2: FAKE_DEVICE_0..7, two children per
/// allocated parent.
pub async fn count_4_split_2<B: Backend>(b: &mut B, p: &mut Protocol) {
    p.scenario("count-4-split-2");
    apply(b, &example("5-count-4-split-2.yaml")).await;
    let env = running(b, p, "test5", "pod0", "ctr0", "pod0").await;
    let ids = devices(&env);
    assert_eq!(ids.len(), 8, "{env:?}");
    assert!(distinct(&ids));
    p.record("distinct", distinct(&ids));
    let results = held(&claim_of(b, "test5", "pod0", "fake").await);
    p.record("allocation results", results.len());
    let parents = parent_ids(b, &results).await;
    let children: BTreeSet<String> = fake_dra_kubelet_plugin::fake::devices::children(&parents, 2)
        .into_iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(children, ids.iter().cloned().collect(), "two per parent");
    p.record("children of the allocated parents", true);
    delete_namespaces(b, &["test5"]).await;
}

/// Scenario 6: a Deployment of two replicas, count 4 split 5: 20 ids each, no parent
/// shared (on one node of eight devices: all of them).
pub async fn deployment_replicas<B: Backend>(b: &mut B, p: &mut Protocol) {
    p.scenario("deployment-count-4-split-5");
    apply(b, &example("6-deployment-count-4-split-5.yaml")).await;
    let names = wait_until("two replicas", || async {
        let pods = Api::<Pod>::namespaced(b.client(), "test6")
            .list(&ListParams::default().labels("app=test6"))
            .await
            .ok()?
            .items;
        let mut names: Vec<String> = pods.into_iter().filter_map(|p| p.metadata.name).collect();
        names.sort();
        (names.len() == 2).then_some(names)
    })
    .await;
    let (mut ids, mut parents) = (Vec::new(), BTreeSet::new());
    for (i, name) in names.iter().enumerate() {
        let env = running(b, p, "test6", name, "ctr0", &format!("replica {i}")).await;
        assert_eq!(devices(&env).len(), 20, "{name}: {env:?}");
        ids.extend(devices(&env));
        parents.extend(held(&claim_of(b, "test6", name, "fake").await));
    }
    assert!(distinct(&ids), "no id shared between replicas");
    assert_eq!(parents.len(), 8, "no parent shared between replicas");
    p.record("distinct parents", parents.len());
    assert_no_device_twice(b).await;
    delete_namespaces(b, &["test6"]).await;
}

/// Scenario 7: a CEL selector on the model attribute picks the node's devices; an
/// unknown model stays Pending with the scheduler's reason.
pub async fn model_selector<B: Backend>(b: &mut B, p: &mut Protocol) {
    p.scenario("cel-model-selector");
    let slices = node_slices(b).await;
    let model = slices
        .iter()
        .flat_map(|s| s.spec.devices.iter().flatten())
        .find_map(|d| d.attributes.as_ref()?.get("model")?.string.clone())
        .unwrap_or_else(|| panic!("no model published"));
    // The example asks for ULTRA_100; the node has the model its name hashes to.
    apply(
        b,
        &example("7-selector-model.yaml").replace("\"ULTRA_100\"", &format!("\"{model}\"")),
    )
    .await;
    let env = running(b, p, "test7", "pod0", "ctr0", "pod0 (the node's model)").await;
    assert_eq!(env["FAKE_DEVICE_MODEL"], model);
    p.record(
        "model seen is the selected one",
        env["FAKE_DEVICE_MODEL"] == model,
    );

    // Block style: hack/lib.sh's to_v1beta1 (1.32/1.33) flattens a flow-style `exactly`
    // only when it holds no collection.
    let unknown = r#"apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {namespace: test7, name: nobody}
spec:
  spec:
    devices:
      requests:
        - name: fake
          exactly:
            deviceClassName: fake.3-shake.com
            count: 1
            selectors:
              - cel:
                  expression: 'device.attributes["fake.resource.3-shake.com"].model == "ULTRA_9000"'
"#
    .to_string();
    apply(
        b,
        &docs(&[
            unknown,
            pod_yaml(
                "test7",
                "pending",
                &[("fake", "resourceClaimTemplateName: nobody")],
            ),
        ]),
    )
    .await;
    let note = pending_with(
        b,
        p,
        ("test7", "pending"),
        "FailedScheduling",
        "0/1 nodes are available",
        "unknown model",
    )
    .await;
    assert!(note.contains("0/1 nodes are available"), "{note}");
    delete_namespaces(b, &["test7"]).await;
}

/// Scenario 8: more devices than the node has: Pending with the scheduler's reason; and
/// a pod that does not fit while another holds devices runs once that one is deleted.
pub async fn over_request_and_freed_devices<B: Backend>(b: &mut B, p: &mut Protocol) {
    p.scenario("more-than-a-node-has");
    apply(b, &example("8-more-than-a-node-has.yaml")).await;
    let note = pending_with(
        b,
        p,
        ("test8", "pod0"),
        "FailedScheduling",
        "0/1 nodes are available",
        "pod0 (9 devices)",
    )
    .await;
    assert!(note.contains("0/1 nodes are available"), "{note}");
    let c = claim_of(b, "test8", "pod0", "fake").await;
    p.record("pod0's claim allocated", !held(&c).is_empty());
    assert!(held(&c).is_empty());

    apply(b, &example("5-count-4-split-2.yaml")).await;
    running(b, p, "test5", "pod0", "ctr0", "test5/pod0 (4 parents)").await;
    apply(
        b,
        &docs(&[
            claim_yaml(
                "ResourceClaimTemplate",
                "test8",
                "six",
                "fake.3-shake.com",
                6,
                None,
            ),
            pod_yaml(
                "test8",
                "six",
                &[("fake", "resourceClaimTemplateName: six")],
            ),
        ]),
    )
    .await;
    pending_with(
        b,
        p,
        ("test8", "six"),
        "FailedScheduling",
        "0/1 nodes are available",
        "six (6 devices, 4 free)",
    )
    .await;
    delete_namespaces(b, &["test5"]).await;
    let env = running(b, p, "test8", "six", "ctr0", "six after test5 went").await;
    assert_eq!(devices(&env).len(), 6);
    assert_no_device_twice(b).await;
    delete_namespaces(b, &["test8"]).await;
}

/// Bad opaque parameters: what the API server refuses, and what it stores but our plugin
/// refuses at prepare (the pod stays Pending with FailedPrepareDynamicResources naming
/// the field; the good claim of the same pod is prepared all the same and unprepared
/// with the pod).
pub async fn bad_opaque_parameters<B: Backend>(b: &mut B, p: &mut Protocol) {
    p.scenario("bad-opaque-parameters");
    apply(b, &namespace_yaml("bad")).await;
    // Created through the API (the same client on both clusters), so the message is the
    // API server's own, not kubectl's rewording of it.
    let not_an_object: serde_json::Value = serde_yaml_ng::from_str(&claim_yaml(
        "ResourceClaim",
        "bad",
        "string",
        "fake.3-shake.com",
        1,
        Some("\"split=2\""),
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let refused = resources::create::<ResourceClaim, B>(b, Some("bad"), not_an_object).await;
    p.record(
        "parameters as a string: create",
        match &refused {
            Ok(_) => "accepted".to_string(),
            Err(e) => format!("refused: {e}"),
        },
    );
    if refused.is_ok() {
        resources::delete::<ResourceClaim, B>(b, Some("bad"), "string").await;
    }

    apply(
        b,
        &docs(&[
            claim_yaml("ResourceClaim", "bad", "good", "fake.3-shake.com", 1, None),
            claim_yaml(
                "ResourceClaim",
                "bad",
                "split0",
                "fake.3-shake.com",
                1,
                Some(&params("{split: 0}")),
            ),
            claim_yaml(
                "ResourceClaim",
                "bad",
                "typo",
                "fake.3-shake.com",
                1,
                Some(&params("{splitt: 2}")),
            ),
            pod_yaml(
                "bad",
                "both",
                &[
                    ("good", "resourceClaimName: good"),
                    ("bad", "resourceClaimName: split0"),
                ],
            ),
            pod_yaml("bad", "typo", &[("typo", "resourceClaimName: typo")]),
        ]),
    )
    .await;
    // The kubelet names a failed claim `ResourceClaim split0` from 1.34 and
    // `claim bad/split0` before (its DRA manager's errors, reworded in 1.34).
    let failed_claim = |name: &str| {
        if b.release().minor() >= 34 {
            format!("ResourceClaim {name}")
        } else {
            format!("claim bad/{name}")
        }
    };
    let note = pending_with(
        b,
        p,
        ("bad", "both"),
        "FailedPrepareDynamicResources",
        &failed_claim("split0"),
        "both (good + split 0)",
    )
    .await;
    assert!(note.contains(&failed_claim("split0")), "{note}");
    assert!(
        note.contains("spec.split: must be between 1 and 64, got 0"),
        "{note}"
    );
    let good = claim(b, "bad", "good").await;
    wait_until("the good claim prepared in the same call", || async {
        cdi_spec_of(b, &good).then_some(())
    })
    .await;
    p.record("good claim prepared", true);
    let note = pending_with(
        b,
        p,
        ("bad", "typo"),
        "FailedPrepareDynamicResources",
        &failed_claim("typo"),
        "typo (splitt)",
    )
    .await;
    assert!(note.contains("unknown field `splitt`"), "{note}");
    for c in ["split0", "typo"] {
        let c = claim(b, "bad", c).await;
        p.record(
            format!("{} allocated", c.metadata.name.clone().unwrap_or_default()),
            !held(&c).is_empty(),
        );
        assert!(!cdi_spec_of(b, &c), "a refused claim has no CDI spec");
    }
    Api::<Pod>::namespaced(b.client(), "bad")
        .delete("both", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete pod both: {e}"));
    wait_until("the good claim unprepared with its pod", || async {
        (!cdi_spec_of(b, &good)).then_some(())
    })
    .await;
    p.record("good claim unprepared with the pod", true);
    delete_namespaces(b, &["bad"]).await;
}

/// A DeviceClass whose selector reads an attribute no device has: the scheduler's CEL
/// error, the pod Pending.
pub async fn device_class_on_a_missing_attribute<B: Backend>(b: &mut B, p: &mut Protocol) {
    p.scenario("device-class-missing-attribute");
    let class = r#"
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: fake-e2e-color}
spec:
  selectors:
    - cel: {expression: 'device.driver == "fake.resource.3-shake.com" && device.attributes["fake.resource.3-shake.com"].color == "red"'}
"#;
    apply(
        b,
        &docs(&[
            class.to_string(),
            namespace_yaml("color"),
            claim_yaml("ResourceClaim", "color", "red", "fake-e2e-color", 1, None),
            pod_yaml("color", "pod0", &[("red", "resourceClaimName: red")]),
        ]),
    )
    .await;
    let note = pending_with(b, p, ("color", "pod0"), "FailedScheduling", "color", "pod0").await;
    assert!(note.contains("color"), "{note}");
    delete_namespaces(b, &["color"]).await;
    resources::delete::<DeviceClass, B>(b, None, "fake-e2e-color").await;
}

/// Containers naming one request of a claim see that request's devices only; one naming
/// the claim sees all, numbered claim-wide.
pub async fn container_naming_one_request<B: Backend>(b: &mut B, p: &mut Protocol) {
    p.scenario("container-naming-one-request");
    apply(b, TWO_REQUESTS).await;
    let whole = running(b, p, "requests", "pod0", "whole", "whole").await;
    let indexed = |env: &BTreeMap<String, String>| -> BTreeMap<usize, String> {
        env.iter()
            .filter_map(|(k, v)| Some((k.strip_prefix("FAKE_DEVICE_")?.parse().ok()?, v.clone())))
            .collect()
    };
    let mut union = BTreeMap::new();
    for c in ["only-a", "only-b"] {
        let env = env_of(b, "requests", "pod0", c).await;
        let mine = indexed(&env);
        p.record(
            format!("{c} device indexes"),
            format!("{:?}", mine.keys().collect::<Vec<_>>()),
        );
        p.record(format!("{c} env"), env_names(&env));
        union.extend(mine);
    }
    assert_eq!(
        union,
        indexed(&whole),
        "the requests' devices, numbered claim-wide"
    );
    delete_namespaces(b, &["requests"]).await;
}

/// `kill -9` of the plugin: it comes back; the running pod keeps its devices (still
/// allocated, still prepared, container not restarted); a new pod gets the other devices;
/// nothing is allocated twice.
pub async fn kill_9_of_the_plugin<B: Backend>(b: &mut B, p: &mut Protocol) {
    p.scenario("kill-9-of-the-plugin");
    apply(b, &example("4-count-4.yaml")).await;
    let before = running(b, p, "test4", "pod0", "ctr0", "pod0 before").await;
    let c = claim_of(b, "test4", "pod0", "fake").await;
    let restarts_before = restarts(&wait_phase(b, "test4", "pod0", "Running").await);
    let slice_before = node_slices(b).await;
    b.kill_plugin(true).await;
    let pod0 = wait_phase(b, "test4", "pod0", "Running").await;
    p.record("pod0 after the kill: phase", phase(&pod0));
    p.record(
        "pod0 after the kill: container restarted",
        restarts(&pod0) != restarts_before,
    );
    assert_eq!(
        restarts(&pod0),
        restarts_before,
        "the workload is left alone"
    );
    let after = claim(b, "test4", &c.metadata.name.clone().unwrap_or_default()).await;
    assert_eq!(held(&after), held(&c), "the allocation is untouched");
    p.record("pod0's claim still allocated", held(&after).len());
    assert!(
        cdi_spec_of(b, &after),
        "prepared before the kill, still prepared"
    );
    p.record("pod0's claim still prepared", true);
    let slices = wait_until_seen("the node's slice published", || async {
        let s = node_slices(b).await;
        if s.len() == 1 {
            Ok(s)
        } else {
            Err(describe_slices(&s))
        }
    })
    .await;
    p.record(
        "slice kept (same uid)",
        slices[0].metadata.uid == slice_before.first().and_then(|s| s.metadata.uid.clone()),
    );

    apply(b, &example("5-count-4-split-2.yaml")).await;
    let new = running(b, p, "test5", "pod0", "ctr0", "new pod (count 4 split 2)").await;
    assert_eq!(devices(&new).len(), 8);
    let mine = parent_ids(b, &held(&claim_of(b, "test5", "pod0", "fake").await)).await;
    assert!(
        mine.iter().all(|d| !devices(&before).contains(d)),
        "the new pod got devices the running one does not hold"
    );
    assert_no_device_twice(b).await;
    p.record("no device twice", true);
    delete_namespaces(b, &["test4", "test5"]).await;
}

/// A kubelet restart wipes the node's ResourceSlices; the plugin registers again and
/// publishes them anew; the running pod keeps running with its devices.
pub async fn kubelet_restart<B: Backend>(b: &mut B, p: &mut Protocol) {
    p.scenario("kubelet-restart");
    apply(b, &example("5-count-4-split-2.yaml")).await;
    let before = running(b, p, "test5", "pod0", "ctr0", "pod0 before").await;
    let c = claim_of(b, "test5", "pod0", "fake").await;
    let restarts_before = restarts(&wait_phase(b, "test5", "pod0", "Running").await);
    let old: BTreeSet<String> = node_slices(b)
        .await
        .into_iter()
        .filter_map(|s| s.metadata.uid)
        .collect();
    assert_eq!(old.len(), 1);
    b.restart_kubelet().await;
    wait_until_seen("the node's slice published anew", || async {
        let slices = node_slices(b).await;
        let now: Vec<&String> = slices
            .iter()
            .filter_map(|s| s.metadata.uid.as_ref())
            .collect();
        if now.len() == 1 && !old.contains(now[0]) {
            Ok(())
        } else {
            Err(describe_slices(&slices))
        }
    })
    .await;
    p.record("slice replaced (new uid)", true);
    let pod0 = wait_phase(b, "test5", "pod0", "Running").await;
    p.record("pod0 after the restart: phase", phase(&pod0));
    p.record(
        "pod0 after the restart: container restarted",
        restarts(&pod0) != restarts_before,
    );
    assert_eq!(restarts(&pod0), restarts_before);
    assert!(cdi_spec_of(b, &c), "still prepared");
    apply(b, &example("4-count-4.yaml")).await;
    let other = running(b, p, "test4", "pod0", "ctr0", "new pod (count 4)").await;
    assert!(
        devices(&other).iter().all(|d| {
            !fake_dra_kubelet_plugin::fake::devices::children(std::slice::from_ref(d), 2)
                .iter()
                .any(|child| devices(&before).contains(&child.id))
        }),
        "the new pod's devices are not the running pod's parents"
    );
    assert_no_device_twice(b).await;
    p.record("no device twice", true);
    delete_namespaces(b, &["test4", "test5"]).await;
}

/// After everything: no claim left, no CDI spec but the common one (none orphaned).
pub async fn nothing_left<B: Backend>(b: &mut B, p: &mut Protocol) {
    p.scenario("nothing-left");
    let left = claims(b, None).await.len();
    p.record("claims", left);
    assert_eq!(left, 0);
    let specs = wait_until("only the common CDI spec left", || async {
        let specs = b.cdi_specs();
        (specs.len() == 1).then_some(specs)
    })
    .await;
    p.record("CDI specs", specs.join(" "));
}

/// Puts the cluster back after a failed scenario: the node untainted and uncordoned, the
/// fleet and every DeviceFault go, every namespace a scenario made and every DeviceClass
/// but the driver's, the plugin publishes the fake devices again, and nothing stays
/// prepared.
pub async fn reset<B: Backend>(b: &mut B) {
    use k8s_openapi::api::apps::v1::Deployment;
    super::filters::restore_node(b).await;
    let fleet = Api::<Deployment>::namespaced(b.client(), super::cluster::DRIVER_NAMESPACE);
    if let Err(e) = fleet
        .delete("fake-dra-fleet", &DeleteParams::default())
        .await
        && !matches!(&e, kube::Error::Api(s) if s.code == 404)
    {
        panic!("delete the fleet: {e}");
    }
    let faults: Api<fake_dra_api::fault::DeviceFault> = Api::all(b.client());
    for fault in faults
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("devicefaults: {e}"))
        .items
    {
        let name = fault.metadata.name.unwrap_or_default();
        let _ = faults.delete(&name, &DeleteParams::default()).await;
    }
    super::taint_rules::delete_all_rules(b).await;
    let keep = [
        "default",
        "kube-system",
        "kube-public",
        "kube-node-lease",
        super::cluster::DRIVER_NAMESPACE,
    ];
    let namespaces: Vec<String> = Api::<Namespace>::all(b.client())
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("namespaces: {e}"))
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .filter(|n| !keep.contains(&n.as_str()))
        .collect();
    let names: Vec<&str> = namespaces.iter().map(String::as_str).collect();
    delete_namespaces(b, &names).await;
    for class in resources::list::<DeviceClass, B>(b, None).await {
        let name = class.metadata.name.unwrap_or_default();
        if name != "fake.3-shake.com" {
            super::features::delete_device_class(b, &name).await;
        }
    }
    let fake_devices = |slices: &[ResourceSlice]| {
        let devices: Vec<_> = slices
            .iter()
            .flat_map(|s| s.spec.devices.iter().flatten())
            .collect();
        devices.len() == 8 && devices.iter().all(|d| d.name.starts_with("fake-"))
    };
    if !fake_devices(&node_slices(b).await) {
        b.set_plugin_env(&[("FAKE_DRA_PROFILE", "fake"), ("FAKE_DRA_GPUS", "")])
            .await;
    }
    wait_until("the fake devices published, untainted", || async {
        let slices = node_slices(b).await;
        let untainted = slices
            .iter()
            .flat_map(|s| s.spec.devices.iter().flatten())
            .all(|d| d.taints.is_none() && d.binding_conditions.is_none());
        (fake_devices(&slices) && untainted).then_some(())
    })
    .await;
    wait_until("only the common CDI spec left", || async {
        (b.cdi_specs().len() == 1).then_some(())
    })
    .await;
}
