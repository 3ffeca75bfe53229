//! The scenarios of the scheduler-testing features, for both clusters: the newer DRA
//! features of the examples (prioritized list, admin access, extended resources), the gpu
//! profile's partitions and shares, every kind of DeviceFault, and fleet mode. Where the
//! emulator does not implement a feature it refuses it by name (a FailedScheduling or
//! warning Event); the scenario records what each cluster did, and docs/emulator.md
//! lists the differences (`KNOWN_DIFFERENCES`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::{Api, DeleteParams, ListParams};

use super::backend::Backend;
use super::protocol::{Gate, Protocol, env_names};
use super::resources;
use super::scenarios::{
    apply, claim_of, delete_namespaces, events_of, get_pod, held, namespace_yaml, node_slices,
    pending_with, phase, pod_yaml, running, wait_until,
};
use crate::common::{DRIVER, devices, examples_dir};

fn feature(name: &str) -> String {
    let path = examples_dir().join("structured/features").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn fault_example(name: &str) -> String {
    let path = examples_dir().join("faults").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// What became of a pod: it runs (its env), or the scheduler refused it (recorded).
enum Outcome {
    Running(BTreeMap<String, String>),
    Refused,
}

/// Waits until the pod runs and printed its env, or a FailedScheduling event says the
/// emulated scheduler does not implement what it asks for; records which.
async fn runs_or_is_refused<B: Backend>(
    b: &B,
    p: &mut Protocol,
    (namespace, pod): (&str, &str),
    label: &str,
) -> Outcome {
    enum Seen {
        Running,
        Refused(String),
    }
    let seen = wait_until(&format!("{namespace}/{pod} running or refused"), || async {
        if get_pod(b, namespace, pod)
            .await
            .is_some_and(|po| phase(&po) == "Running")
        {
            return Some(Seen::Running);
        }
        events_of(b, namespace, pod)
            .await
            .into_iter()
            .find(|(r, note)| r == "FailedScheduling" && note.contains("not implement"))
            .map(|(_, note)| Seen::Refused(note))
    })
    .await;
    match seen {
        Seen::Running => {
            let env = running(b, p, namespace, pod, "ctr0", label).await;
            p.record(format!("{label} outcome"), "running");
            Outcome::Running(env)
        }
        Seen::Refused(note) => {
            p.record(format!("{label} outcome"), format!("refused: {note}"));
            Outcome::Refused
        }
    }
}

fn results_of(claim: &ResourceClaim) -> Vec<String> {
    claim
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
        .and_then(|d| d.results.as_ref())
        .into_iter()
        .flatten()
        .filter(|r| r.driver == DRIVER)
        .map(|r| r.request.clone())
        .collect()
}

pub(super) async fn delete_cluster_object<B: Backend, K>(b: &B, name: &str)
where
    K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::all(b.client());
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => panic!("delete {name}: {e}"),
    }
    wait_until(&format!("{name} gone"), || async {
        api.get_opt(name).await.ok()?.is_none().then_some(())
    })
    .await;
}

/// Deletes a DeviceClass (in the version the cluster serves) and waits until it is gone.
pub(super) async fn delete_device_class<B: Backend>(b: &B, name: &str) {
    use k8s_openapi::api::resource::v1::DeviceClass;
    resources::delete::<DeviceClass, B>(b, None, name).await;
    wait_until(&format!("DeviceClass {name} gone"), || async {
        (!resources::exists::<DeviceClass, B>(b, name).await).then_some(())
    })
    .await;
}

pub(super) async fn delete_fault<B: Backend>(b: &B, name: &str) {
    delete_cluster_object::<B, fake_dra_api::fault::DeviceFault>(b, name).await;
}

/// The devices of the node's slices with a taint (or binding conditions, `binding`).
pub(super) async fn wait_devices<B: Backend>(
    b: &B,
    what: &str,
    want: impl Fn(&[k8s_openapi::api::resource::v1::Device]) -> bool,
) {
    wait_until(what, || async {
        let devices: Vec<_> = node_slices(b)
            .await
            .into_iter()
            .flat_map(|s| s.spec.devices.unwrap_or_default())
            .collect();
        want(&devices).then_some(())
    })
    .await;
}

// --- the newer DRA features of deploy/examples/structured/features ------------------------

/// firstAvailable: nine devices is more than a node has, so the claim gets the second
/// subrequest's four, and the container naming the request sees them.
pub async fn prioritized_list<B: Backend>(b: &mut B, p: &mut Protocol) {
    p.scenario("prioritized-list");
    if !p.requires(&[Gate::PrioritizedList]) {
        return;
    }
    apply(b, &feature("prioritized-list.yaml")).await;
    if let Outcome::Running(env) = runs_or_is_refused(b, p, ("prioritized", "pod0"), "pod0").await {
        assert_eq!(devices(&env).len(), 4, "{env:?}");
        let c = claim_of(b, "prioritized", "pod0", "fake").await;
        let requests = results_of(&c);
        p.record("allocated for", requests.join(" "));
        assert!(requests.iter().all(|r| r == "fake/four"), "{requests:?}");
    }
    delete_namespaces(b, &["prioritized"]).await;
}

/// matchAttribute constraints: two requests of one claim whose devices must agree on an
/// attribute. The node's devices share their model, so "same model" runs with all four;
/// no two share an index, and none has an attribute of another domain, so those claims
/// stay Pending with the scheduler's reason.
pub async fn match_attribute<B: Backend>(b: &mut B, p: &mut Protocol) {
    p.scenario("match-attribute");
    let claim = |name: &str, count: u32, attribute: &str| {
        format!(
            "apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {{namespace: constraints, name: {name}}}
spec:
  devices:
    requests:
      - name: a
        exactly: {{deviceClassName: fake.3-shake.com, count: {count}}}
      - name: b
        exactly: {{deviceClassName: fake.3-shake.com, count: {count}}}
    constraints:
      - requests: [a, b]
        matchAttribute: {attribute}
"
        )
    };
    let mut parts = vec![namespace_yaml("constraints")];
    for (name, count, attribute) in [
        ("same-model", 2, format!("{DRIVER}/model")),
        ("same-index", 1, format!("{DRIVER}/index")),
        ("other-domain", 1, "example.com/model".to_string()),
    ] {
        parts.push(claim(name, count, &attribute));
        parts.push(pod_yaml(
            "constraints",
            name,
            &[("fake", &format!("resourceClaimName: {name}"))],
        ));
    }
    apply(b, &super::scenarios::docs(&parts)).await;
    let env = running(b, p, "constraints", "same-model", "ctr0", "same model").await;
    assert_eq!(devices(&env).len(), 4, "{env:?}");
    for (pod, label) in [
        ("same-index", "same index"),
        ("other-domain", "an attribute no device has"),
    ] {
        let note = pending_with(
            b,
            p,
            ("constraints", pod),
            "FailedScheduling",
            "cannot allocate all claims",
            label,
        )
        .await;
        assert!(note.starts_with("0/1 nodes are available"), "{note}");
    }
    delete_namespaces(b, &["constraints"]).await;
}

/// adminAccess: a monitor sees all the devices another pod holds, without holding them.
pub async fn admin_access<B: Backend>(b: &mut B, p: &mut Protocol) {
    p.scenario("admin-access");
    if !p.requires(&[Gate::AdminAccess]) {
        return;
    }
    apply(b, &feature("admin-access.yaml")).await;
    let owner = running(b, p, "admin", "pod0", "ctr0", "pod0").await;
    assert_eq!(devices(&owner).len(), 8);
    if let Outcome::Running(env) = runs_or_is_refused(b, p, ("admin", "monitor"), "monitor").await {
        let (mut mine, mut theirs) = (devices(&env), devices(&owner));
        mine.sort();
        theirs.sort();
        assert_eq!(
            mine, theirs,
            "the monitor sees exactly the devices pod0 holds"
        );
        p.record("monitor sees pod0's devices", true);
    }
    delete_namespaces(b, &["admin"]).await;
}

/// An extended resource backed by a DeviceClass: the scheduler makes the claim.
pub async fn extended_resource<B: Backend>(b: &mut B, p: &mut Protocol) {
    p.scenario("extended-resource");
    if !p.requires(&[Gate::ExtendedResource]) {
        return;
    }
    apply(b, &feature("extended-resource.yaml")).await;
    if let Outcome::Running(env) = runs_or_is_refused(b, p, ("extended", "pod0"), "pod0").await {
        assert_eq!(devices(&env).len(), 2, "{env:?}");
        let po = get_pod(b, "extended", "pod0")
            .await
            .unwrap_or_else(|| panic!("pod0 gone"));
        let status = serde_json::to_value(po.status).unwrap_or_default();
        let claim = status["extendedResourceClaimStatus"]["resourceClaimName"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        p.record(
            "claim made by the scheduler",
            claim.contains("-extended-resources-"),
        );
        assert!(claim.starts_with("pod0-extended-resources-"), "{status}");
    }
    delete_namespaces(b, &["extended"]).await;
    delete_device_class(b, "fake-extended.3-shake.com").await;
}

// --- the gpu profile ---------------------------------------------------------------------

/// The plugin with a partitioned A100 and a shared L4: partitions exclude the whole GPU
/// while they hold its counters; shares of the L4 run side by side until its memory is
/// taken. Then back to the fake devices.
pub async fn gpu_profile<B: Backend>(b: &mut B, p: &mut Protocol) {
    p.scenario("gpu-profile");
    b.set_plugin_env(&[
        ("FAKE_DRA_PROFILE", "gpu"),
        ("FAKE_DRA_GPUS", "A100-80GB:1:partitioned,L4-24GB:1:shared"),
    ])
    .await;
    wait_devices(b, "the GPUs published", |d| {
        d.iter().any(|x| x.name == "gpu-0-3g-40gb-0")
    })
    .await;
    let slices = node_slices(b).await;
    p.record("slices", slices.len());
    p.record(
        "counter sets",
        slices
            .iter()
            .map(|s| s.spec.shared_counters.iter().flatten().count())
            .sum::<usize>(),
    );
    p.record(
        "devices",
        slices
            .iter()
            .map(|s| s.spec.devices.iter().flatten().count())
            .sum::<usize>(),
    );

    if p.requires_for(
        "pods",
        &[Gate::PartitionableDevices, Gate::ConsumableCapacity],
    ) {
        gpu_pods(b, p).await;
    }
    p.scenario("gpu-shares-in-one-pod");
    if p.requires_for("pod0", &[Gate::ConsumableCapacity]) {
        shares_in_one_pod(b, p).await;
    }
    b.set_plugin_env(&[("FAKE_DRA_PROFILE", "fake"), ("FAKE_DRA_GPUS", "")])
        .await;
    wait_devices(b, "the fake devices published again", |d| {
        d.len() == 8 && d.iter().all(|x| x.name.starts_with("fake-"))
    })
    .await;
}

/// The partitions and shares of the gpu profile's devices.
async fn gpu_pods<B: Backend>(b: &mut B, p: &mut Protocol) {
    // `whole` goes in once `part` runs: created together, the scheduler may take gpu-0
    // for `whole` first (its queue does not follow the file's order), and then `part` is
    // the one that waits.
    let yaml = feature("gpu-partitions.yaml");
    let (until_whole, whole_pod) = yaml
        .rsplit_once("\n---\n")
        .filter(|(_, last)| last.contains("name: whole"))
        .unwrap_or_else(|| panic!("gpu-partitions.yaml no longer ends with Pod whole:\n{yaml}"));
    apply(b, until_whole).await;
    if let Outcome::Running(env) =
        runs_or_is_refused(b, p, ("gpu-partitions", "part"), "part").await
    {
        apply(b, whole_pod).await;
        assert_eq!(
            env.get("FAKE_GPU_0_PARTITION").map(String::as_str),
            Some("3g.40gb"),
            "{env:?}"
        );
        p.record(
            "part memory",
            env.get("FAKE_GPU_0_MEMORY").cloned().unwrap_or_default(),
        );
        p.record("part env", env_names(&env));
        pending_with(
            b,
            p,
            ("gpu-partitions", "whole"),
            "FailedScheduling",
            "cannot allocate all claims",
            "whole while part runs",
        )
        .await;
        Api::<Pod>::namespaced(b.client(), "gpu-partitions")
            .delete("part", &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("delete part: {e}"));
        let whole = running(b, p, "gpu-partitions", "whole", "ctr0", "whole after part").await;
        p.record(
            "whole memory",
            whole.get("FAKE_GPU_0_MEMORY").cloned().unwrap_or_default(),
        );
    }
    delete_namespaces(b, &["gpu-partitions"]).await;

    // `share2` goes in once the other two run: created together, the scheduler may take
    // the L4 for `share2` before `share1` (seen on 1.37.2), and then `share1` waits.
    let yaml = feature("gpu-shares.yaml");
    let (until_share2, share2_pod) = yaml
        .rsplit_once("\n---\n")
        .filter(|(_, last)| last.contains("name: share2"))
        .unwrap_or_else(|| panic!("gpu-shares.yaml no longer ends with Pod share2:\n{yaml}"));
    apply(b, until_share2).await;
    let mut shares = Vec::new();
    for pod in ["share0", "share1"] {
        if let Outcome::Running(env) = runs_or_is_refused(b, p, ("gpu-shares", pod), pod).await {
            assert_eq!(
                env.get("FAKE_GPU_0_MEMORY").map(String::as_str),
                Some("10Gi"),
                "{env:?}"
            );
            shares.push(env.get("FAKE_GPU_0_SHARE").cloned().unwrap_or_default());
        }
    }
    if shares.len() == 2 {
        assert_ne!(shares[0], shares[1], "two shares of one GPU");
        p.record("two distinct shares", true);
        apply(b, share2_pod).await;
        pending_with(
            b,
            p,
            ("gpu-shares", "share2"),
            "FailedScheduling",
            "cannot allocate all claims",
            "share2",
        )
        .await;
    }
    delete_namespaces(b, &["gpu-shares"]).await;
}

/// Two shares of the L4 in one claim, one per request, and a container per request: each
/// sees its own share only (a CDI device per `shareID`), a container of the whole claim both.
async fn shares_in_one_pod<B: Backend>(b: &mut B, p: &mut Protocol) {
    let ns = "gpu-shares-in-one-pod";
    apply(b, &feature("gpu-shares-in-one-pod.yaml")).await;
    let small = running(b, p, ns, "pod0", "small", "small").await;
    let big = running(b, p, ns, "pod0", "big", "big").await;
    let both = running(b, p, ns, "pod0", "both", "both").await;
    let get = |env: &BTreeMap<String, String>, key: &str| env.get(key).cloned().unwrap_or_default();
    // 1500Mi rounds up to the policy's next step.
    p.record("small memory", get(&small, "FAKE_GPU_0_MEMORY"));
    p.record("big memory", get(&big, "FAKE_GPU_1_MEMORY"));
    let (small_share, big_share) = (
        get(&small, "FAKE_GPU_0_SHARE"),
        get(&big, "FAKE_GPU_1_SHARE"),
    );
    assert!(
        !small_share.is_empty() && !big_share.is_empty(),
        "{small:?} {big:?}"
    );
    p.record("two distinct shares", small_share != big_share);
    p.record(
        "both sees the two shares",
        get(&both, "FAKE_GPU_0_SHARE") == small_share
            && get(&both, "FAKE_GPU_1_SHARE") == big_share,
    );
    delete_namespaces(b, &[ns]).await;
}

// --- DeviceFaults ------------------------------------------------------------------------

/// A NoSchedule taint on every device keeps a new pod Pending until it is removed; a
/// NoExecute taint on a running pod's device evicts the pod (the device taint eviction
/// controller; the emulator says it does not evict).
pub async fn device_taints<B: Backend>(b: &mut B, p: &mut Protocol) {
    p.scenario("device-taints");
    if !p.requires_for("taints", &[Gate::DeviceTaints]) {
        return taints_dropped(b, p).await;
    }
    apply(
        b,
        "apiVersion: fake.resource.3-shake.com/v1alpha1\nkind: DeviceFault\nmetadata: {name: all-noschedule}\nspec:\n  taint: {key: fake.resource.3-shake.com/maintenance, effect: NoSchedule}\n",
    )
    .await;
    wait_devices(b, "every device tainted", |d| {
        !d.is_empty() && d.iter().all(|x| x.taints.is_some())
    })
    .await;
    apply(b, &super::scenarios::example("4-count-4.yaml")).await;
    pending_with(
        b,
        p,
        ("test4", "pod0"),
        "FailedScheduling",
        "cannot allocate all claims",
        "pod0 while tainted",
    )
    .await;
    delete_fault(b, "all-noschedule").await;
    let env = running(b, p, "test4", "pod0", "ctr0", "pod0 after the taint went").await;
    assert_eq!(devices(&env).len(), 4);
    let c = claim_of(b, "test4", "pod0", "fake").await;
    let device = held(&c).first().map(|(_, d)| d.clone()).unwrap_or_default();
    apply(
        b,
        &format!(
            "apiVersion: fake.resource.3-shake.com/v1alpha1\nkind: DeviceFault\nmetadata: {{name: evict}}\nspec:\n  devices: [{device}]\n  taint: {{key: fake.resource.3-shake.com/unhealthy, value: ecc, effect: NoExecute}}\n"
        ),
    )
    .await;
    let what = evicted_or_not(b, "test4", "pod0").await;
    p.record("pod0 after a NoExecute taint on its device", &what);
    delete_namespaces(b, &["test4"]).await;
    delete_fault(b, "evict").await;
    wait_devices(b, "no taint left", |d| d.iter().all(|x| x.taints.is_none())).await;

    // Effect None: published for information only, repels nothing. An API server of 1.34
    // or older with DRADeviceTaints on refuses the effect (and with it the whole slice), so
    // there the plugin leaves the taint out and the fault's status says why.
    apply(
        b,
        "apiVersion: fake.resource.3-shake.com/v1alpha1\nkind: DeviceFault\nmetadata: {name: all-none}\nspec:\n  taint: {key: fake.resource.3-shake.com/degraded, effect: None}\n",
    )
    .await;
    p.record(
        "fault with effect None: status",
        fault_status(b, "all-none").await,
    );
    if b.release().minor() >= 35 {
        wait_devices(b, "every device with the None taint", |d| {
            !d.is_empty()
                && d.iter()
                    .all(|x| x.taints.iter().flatten().any(|t| t.effect == "None"))
        })
        .await;
    } else {
        let stored: Vec<_> = node_slices(b)
            .await
            .into_iter()
            .flat_map(|s| s.spec.devices.unwrap_or_default())
            .collect();
        p.record(
            "devices with a None taint as stored",
            stored
                .iter()
                .filter(|x| x.taints.iter().flatten().any(|t| t.effect == "None"))
                .count(),
        );
    }
    apply(b, &super::scenarios::example("4-count-4.yaml")).await;
    running(
        b,
        p,
        "test4",
        "pod0",
        "ctr0",
        "pod0 with a None taint on every device",
    )
    .await;
    delete_namespaces(b, &["test4"]).await;
    delete_fault(b, "all-none").await;
    wait_devices(b, "no taint left", |d| d.iter().all(|x| x.taints.is_none())).await;
}

/// `evicted` once the pod is gone or going (the device taint eviction controller), or
/// `not evicted (DeviceTaintNotEvicted)` once the emulator warns that it does not evict.
pub(super) async fn evicted_or_not<B: Backend>(b: &B, namespace: &str, pod: &str) -> String {
    wait_until(
        &format!("{pod} evicted, or the emulator saying it does not evict"),
        || async {
            if get_pod(b, namespace, pod)
                .await
                .is_none_or(|po| po.metadata.deletion_timestamp.is_some())
            {
                return Some("evicted".to_string());
            }
            events_of(b, namespace, pod)
                .await
                .into_iter()
                .find(|(r, _)| r == "DeviceTaintNotEvicted")
                .map(|(r, _)| format!("not evicted ({r})"))
        },
    )
    .await
}

/// A release whose API server drops device taints (gate off): the fault's taint never
/// reaches the stored slice, and a new pod gets the "tainted" devices.
async fn taints_dropped<B: Backend>(b: &mut B, p: &mut Protocol) {
    let generation = |slices: &[k8s_openapi::api::resource::v1::ResourceSlice]| {
        slices
            .iter()
            .map(|s| s.spec.pool.generation)
            .max()
            .unwrap_or_default()
    };
    let before = generation(&node_slices(b).await);
    apply(
        b,
        "apiVersion: fake.resource.3-shake.com/v1alpha1\nkind: DeviceFault\nmetadata: {name: all-noschedule}\nspec:\n  taint: {key: fake.resource.3-shake.com/maintenance, effect: NoSchedule}\n",
    )
    .await;
    let slices = wait_until("the slices written again with the fault", || async {
        let slices = node_slices(b).await;
        (generation(&slices) > before).then_some(slices)
    })
    .await;
    p.record(
        "devices with a taint as stored",
        slices
            .iter()
            .flat_map(|s| s.spec.devices.iter().flatten())
            .filter(|d| d.taints.as_ref().is_some_and(|t| !t.is_empty()))
            .count(),
    );
    p.record("fault status", fault_status(b, "all-noschedule").await);
    apply(b, &super::scenarios::example("4-count-4.yaml")).await;
    let env = running(
        b,
        p,
        "test4",
        "pod0",
        "ctr0",
        "pod0 with the fault in place",
    )
    .await;
    assert_eq!(devices(&env).len(), 4);
    delete_namespaces(b, &["test4"]).await;
    delete_fault(b, "all-noschedule").await;
}

/// What the node's plugin wrote into a fault's status: its effects and problems.
pub(super) async fn fault_status<B: Backend>(b: &B, name: &str) -> String {
    let api: Api<fake_dra_api::fault::DeviceFault> = Api::all(b.client());
    let node = b.node();
    wait_until(
        &format!("the plugin's status entry in DeviceFault {name}"),
        || async {
            let fault = api.get_opt(name).await.ok()??;
            let generation = fault.metadata.generation.unwrap_or_default();
            let entry = fault
                .status?
                .nodes
                .into_iter()
                .find(|n| n.node == node && n.observed_generation == generation)?;
            Some(format!(
                "effects: {}; problems: {}",
                entry.effects.join(", "),
                if entry.problems.is_empty() {
                    "none".to_string()
                } else {
                    entry.problems.join("; ")
                }
            ))
        },
    )
    .await
}

/// Health through the kubelet's health stream shows in the pod's status.
pub async fn device_health<B: Backend>(b: &mut B, p: &mut Protocol) {
    p.scenario("device-health");
    if !p.requires(&[Gate::ResourceHealthStatus]) {
        return;
    }
    apply(b, &super::scenarios::example("4-count-4.yaml")).await;
    running(b, p, "test4", "pod0", "ctr0", "pod0").await;
    let c = claim_of(b, "test4", "pod0", "fake").await;
    let device = held(&c).first().map(|(_, d)| d.clone()).unwrap_or_default();
    apply(
        b,
        &format!(
            "apiVersion: fake.resource.3-shake.com/v1alpha1\nkind: DeviceFault\nmetadata: {{name: sick}}\nspec:\n  devices: [{device}]\n  health: {{status: Unhealthy, message: fan failed}}\n"
        ),
    )
    .await;
    if b.real().is_some() {
        let statuses = wait_until(
            "pod0's allocatedResourcesStatus with an Unhealthy device",
            || async {
                let po = get_pod(b, "test4", "pod0").await?;
                let status = serde_json::to_value(po.status?).ok()?;
                let entries = status["containerStatuses"][0]["allocatedResourcesStatus"]
                    .as_array()?
                    .clone();
                entries
                    .iter()
                    .any(|e| {
                        e["resources"]
                            .as_array()
                            .is_some_and(|r| r.iter().any(|x| x["health"] == "Unhealthy"))
                    })
                    .then_some(entries)
            },
        )
        .await;
        for e in &statuses {
            let name = e["name"].as_str().unwrap_or_default();
            let mut health: Vec<String> = e["resources"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|r| {
                    format!(
                        "{} {}",
                        r["health"].as_str().unwrap_or_default(),
                        r["message"].as_str().unwrap_or_default()
                    )
                })
                .collect();
            health.sort();
            p.record(
                format!(
                    "{} health",
                    if name.starts_with("claim:") {
                        "claim"
                    } else {
                        name
                    }
                ),
                health.join(", "),
            );
        }
    } else {
        // The emulated kubelet opens no health stream (docs/emulator.md).
        p.record("claim health", "not emulated");
    }
    delete_fault(b, "sick").await;
    delete_namespaces(b, &["test4"]).await;
}

/// NodePrepareResources fails for a namespace's claims while the fault is there.
pub async fn prepare_fault<B: Backend>(b: &mut B, p: &mut Protocol) {
    p.scenario("prepare-fault");
    apply(b, &fault_example("prepare-fails.yaml")).await;
    let claim = super::scenarios::claim_yaml(
        "ResourceClaimTemplate",
        "flaky",
        "fake",
        "fake.3-shake.com",
        1,
        None,
    );
    apply(
        b,
        &super::scenarios::docs(&[
            namespace_yaml("flaky"),
            claim,
            pod_yaml(
                "flaky",
                "pod0",
                &[("fake", "resourceClaimTemplateName: fake")],
            ),
        ]),
    )
    .await;
    let note = wait_until(
        "a FailedPrepareDynamicResources event naming the fault",
        || async {
            events_of(b, "flaky", "pod0")
                .await
                .into_iter()
                .find(|(r, n)| {
                    r == "FailedPrepareDynamicResources"
                        && n.contains("injected by DeviceFault flaky-prepare")
                })
                .map(|(_, n)| n)
        },
    )
    .await;
    p.record("pod0 event", "FailedPrepareDynamicResources");
    p.record(
        "pod0 message names the fault",
        note.contains("injected by DeviceFault flaky-prepare"),
    );
    let po = get_pod(b, "flaky", "pod0")
        .await
        .unwrap_or_else(|| panic!("pod0 gone"));
    p.record("pod0 phase while failing", phase(&po));
    delete_fault(b, "flaky-prepare").await;
    running(b, p, "flaky", "pod0", "ctr0", "pod0 after the fault went").await;
    delete_namespaces(b, &["flaky"]).await;
}

/// Binding conditions: the scheduler waits for the driver's condition before binding;
/// a failure condition makes it give the allocation up.
pub async fn binding_conditions<B: Backend>(b: &mut B, p: &mut Protocol) {
    p.scenario("binding-conditions");
    if !p.requires(&[
        Gate::DeviceBindingConditions,
        Gate::ResourceClaimDeviceStatus,
    ]) {
        return;
    }
    apply(b, &fault_example("binding-conditions.yaml")).await;
    wait_devices(b, "the devices with binding conditions", |d| {
        !d.is_empty() && d.iter().all(|x| x.binding_conditions.is_some())
    })
    .await;
    apply(b, &super::scenarios::example("4-count-4.yaml")).await;
    if let Outcome::Running(env) = runs_or_is_refused(b, p, ("test4", "pod0"), "pod0").await {
        assert_eq!(devices(&env).len(), 4);
        let c = claim_of(b, "test4", "pod0", "fake").await;
        let attached =
            c.status
                .and_then(|s| s.devices)
                .into_iter()
                .flatten()
                .filter(|d| {
                    d.conditions.iter().flatten().any(|c| {
                        c.type_ == "fake.resource.3-shake.com/attached" && c.status == "True"
                    })
                })
                .count();
        p.record("devices reported attached", attached);
        let reasons: Vec<String> = events_of(b, "test4", "pod0")
            .await
            .into_iter()
            .map(|(r, _)| r)
            .collect();
        p.record(
            "waited for the binding conditions",
            reasons.iter().any(|r| r == "BindingConditionsPending"),
        );
    }
    delete_namespaces(b, &["test4"]).await;
    delete_fault(b, "slow-attach").await;
    apply(
        b,
        "apiVersion: fake.resource.3-shake.com/v1alpha1\nkind: DeviceFault\nmetadata: {name: attach-fails}\nspec:\n  binding: {outcome: Fail}\n",
    )
    .await;
    wait_devices(b, "the devices with binding conditions", |d| {
        !d.is_empty() && d.iter().all(|x| x.binding_conditions.is_some())
    })
    .await;
    apply(b, &super::scenarios::example("4-count-4.yaml")).await;
    let note = wait_until("a FailedScheduling event", || async {
        events_of(b, "test4", "pod0")
            .await
            .into_iter()
            .find(|(r, _)| r == "FailedScheduling")
            .map(|(_, n)| n)
    })
    .await;
    p.record(
        "attach fails: binding failure reported",
        note.contains("binding") || note.contains("not implement"),
    );
    let po = get_pod(b, "test4", "pod0")
        .await
        .unwrap_or_else(|| panic!("pod0 gone"));
    p.record(
        "attach fails: pod0 bound",
        po.spec.and_then(|s| s.node_name).is_some(),
    );
    delete_namespaces(b, &["test4"]).await;
    delete_fault(b, "attach-fails").await;
    wait_devices(b, "no binding conditions left", |d| {
        d.iter().all(|x| x.binding_conditions.is_none())
    })
    .await;
}

/// Conditions and data in the claim's status.devices, written by the plugin.
pub async fn device_status<B: Backend>(b: &mut B, p: &mut Protocol) {
    p.scenario("device-status");
    if !p.requires(&[Gate::ResourceClaimDeviceStatus]) {
        return;
    }
    apply(
        b,
        "apiVersion: fake.resource.3-shake.com/v1alpha1\nkind: DeviceFault\nmetadata: {name: status}\nspec:\n  deviceStatus:\n    conditions: [{type: Ready, status: \"True\", reason: Configured}]\n    data: {firmware: \"1.2.3\"}\n",
    )
    .await;
    apply(b, &super::scenarios::example("4-count-4.yaml")).await;
    running(b, p, "test4", "pod0", "ctr0", "pod0").await;
    let name = claim_of(b, "test4", "pod0", "fake")
        .await
        .metadata
        .name
        .unwrap_or_default();
    let entries = wait_until("status.devices of pod0's claim", || async {
        let c: ResourceClaim = resources::get_opt(b, "test4", &name).await?;
        let d = c.status?.devices?;
        (d.len() == 4).then_some(d)
    })
    .await;
    p.record("status.devices entries", entries.len());
    p.record("their drivers", entries.iter().all(|e| e.driver == DRIVER));
    p.record(
        "their conditions",
        entries[0]
            .conditions
            .iter()
            .flatten()
            .map(|c| format!("{}={} ({})", c.type_, c.status, c.reason))
            .collect::<Vec<_>>()
            .join(" "),
    );
    p.record(
        "their data",
        entries[0]
            .data
            .as_ref()
            .map(|d| d.0.to_string())
            .unwrap_or_default(),
    );
    delete_namespaces(b, &["test4"]).await;
    delete_fault(b, "status").await;
}

/// GetInfo fails: the plugin restarted meanwhile cannot register, so new claims cannot be
/// prepared; once the fault goes the kubelet registers it again. Real cluster only: the
/// emulator's plugin restart waits for the registration (docs/emulator.md).
pub async fn getinfo_fault<B: Backend>(b: &mut B, p: &mut Protocol) {
    if b.real().is_none() {
        return;
    }
    p.scenario("getinfo-fault");
    apply(b, &fault_example("getinfo-fails.yaml")).await;
    // The fault must be seen by the running plugin's watch before it is restarted... and
    // the restarted one reads it at start.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    // Not Ready while it cannot register: only its new process is waited for.
    b.kill_plugin(false).await;
    // Until the kubelet's plugin watcher has seen the new registration socket, it keeps the
    // old process's registration and dials the DRA socket the new process already serves:
    // a pod created in that window is prepared (seen once, 2026-12-06). So the pod comes
    // after the kubelet asked the new process for its info and was refused.
    let plugin = Api::<Pod>::namespaced(b.client(), super::cluster::DRIVER_NAMESPACE)
        .list(&ListParams::default().labels(super::cluster::PLUGIN_LABEL))
        .await
        .unwrap_or_else(|e| panic!("the plugin pod: {e}"))
        .items
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no plugin pod"));
    let (pod_name, container) = (
        plugin.metadata.name.clone().unwrap_or_default(),
        plugin
            .spec
            .and_then(|s| s.containers.first().map(|c| c.name.clone()))
            .unwrap_or_default(),
    );
    wait_until(
        "the kubelet refused by the restarted plugin's GetInfo",
        || async {
            b.logs(super::cluster::DRIVER_NAMESPACE, &pod_name, &container)
                .await
                .iter()
                .any(|l| l.contains("GetInfo fails as the fault hook asks"))
                .then_some(())
        },
    )
    .await;
    apply(b, &super::scenarios::example("4-count-4.yaml")).await;
    let note = wait_until("pod0 failing to prepare", || async {
        events_of(b, "test4", "pod0")
            .await
            .into_iter()
            .find(|(r, _)| r == "FailedPrepareDynamicResources")
            .map(|(_, n)| n)
    })
    .await;
    p.record(
        "pod0 event while unregistered",
        "FailedPrepareDynamicResources",
    );
    p.record("pod0 message", note.replace(&b.node(), "<node>"));
    delete_fault(b, "no-registration").await;
    let env = running(b, p, "test4", "pod0", "ctr0", "pod0 after the fault went").await;
    assert_eq!(devices(&env).len(), 4);
    delete_namespaces(b, &["test4"]).await;
}

/// Fleet mode on the real control plane: three simulated nodes next to the real one, each
/// with its pool; the scheduler binds a pod tolerating the fleet taint to one of them.
/// Real cluster only: the emulator runs no Deployment of the driver's image.
pub async fn fleet_mode<B: Backend>(b: &mut B, p: &mut Protocol) {
    if b.real().is_none() {
        return;
    }
    p.scenario("fleet-mode");
    let dir = examples_dir().join("../fleet");
    let read = |f: &str| {
        std::fs::read_to_string(dir.join(f)).unwrap_or_else(|e| panic!("deploy/fleet/{f}: {e}"))
    };
    let deployment = read("fleet.yaml").replace("value: \"10\"", "value: \"3\"");
    apply(
        b,
        &super::scenarios::docs(&[read("rbac-fleet.yaml"), deployment]),
    )
    .await;
    let nodes: Api<Node> = Api::all(b.client());
    wait_until("three fleet nodes with their slices", || async {
        let fleet = nodes
            .list(&ListParams::default().labels("fake.resource.3-shake.com/fleet=true"))
            .await
            .ok()?
            .items;
        let slices =
            resources::list::<k8s_openapi::api::resource::v1::ResourceSlice, B>(b, None).await;
        let pools = fleet
            .iter()
            .filter(|n| slices.iter().any(|s| s.spec.node_name == n.metadata.name))
            .count();
        (fleet.len() == 3 && pools == 3).then_some(())
    })
    .await;
    p.record("fleet nodes with a pool", 3);
    let pod = pod_yaml("fleet-test", "pod0", &[("fake", "resourceClaimTemplateName: fake")]).replace(
        "  terminationGracePeriodSeconds: 1\n",
        "  terminationGracePeriodSeconds: 1\n  nodeSelector: {fake.resource.3-shake.com/fleet: \"true\"}\n  tolerations: [{key: fake.resource.3-shake.com/fleet, operator: Exists}]\n",
    );
    let claim = super::scenarios::claim_yaml(
        "ResourceClaimTemplate",
        "fleet-test",
        "fake",
        "fake.3-shake.com",
        2,
        None,
    );
    apply(
        b,
        &super::scenarios::docs(&[namespace_yaml("fleet-test"), claim, pod]),
    )
    .await;
    let node = wait_until("pod0 bound to a fleet node", || async {
        get_pod(b, "fleet-test", "pod0").await?.spec?.node_name
    })
    .await;
    p.record(
        "pod0 bound to a fleet node",
        node.starts_with("fake-dra-fleet-"),
    );
    let c = claim_of(b, "fleet-test", "pod0", "fake").await;
    let pools: Vec<String> = held(&c).into_iter().map(|(pool, _)| pool).collect();
    p.record(
        "devices from that node's pool",
        pools.len() == 2 && pools.iter().all(|pl| *pl == node),
    );
    let po = get_pod(b, "fleet-test", "pod0")
        .await
        .unwrap_or_else(|| panic!("pod0 gone"));
    p.record("pod0 phase (no kubelet there)", phase(&po));
    // Stopping fleet mode deletes its nodes; the pod bound there goes with them.
    Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(b.client(), "fake-dra")
        .delete("fake-dra-fleet", &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete the fleet: {e}"));
    wait_until("the fleet nodes gone", || async {
        nodes
            .list(&ListParams::default().labels("fake.resource.3-shake.com/fleet=true"))
            .await
            .ok()?
            .items
            .is_empty()
            .then_some(())
    })
    .await;
    p.record("fleet nodes after the fleet stopped", 0);
    delete_namespaces(b, &["fleet-test"]).await;
}
