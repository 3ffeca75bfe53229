//! DeviceTaintRule (KEP-5055, `resource.k8s.io/v1` from 1.37): what the API server keeps
//! of a rule and refuses, and what the scheduler does with the taint of a rule, on both
//! clusters. The example deploy/examples/structured/features/device-taint-rule.yaml runs
//! as written: a NoSchedule rule on every device of the driver; the pod whose claim
//! tolerates it runs, the other waits until the rule goes. Beside it, a rule without a
//! selector (no device) and one for another driver, which must taint nothing of ours; a
//! DeviceFault's slice taint beside a rule (taints add up); a DeviceFault taint `via:
//! Rule`, which the plugin turns into a rule for the device, removed with the fault.

use fake_dra_api::upstream::device_taint_rule::DeviceTaintRule;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::backend::Backend;
use super::features::{delete_fault, evicted_or_not, fault_status, wait_devices};
use super::protocol::{Gate, Protocol};
use super::scenarios::{
    apply, claim_of, delete_namespaces, get_pod, held, pending_with, pod_yaml, running, wait_until,
};
use crate::common::{DRIVER, devices, examples_dir};

const NAMESPACE: &str = "taint-rule";

fn rules<B: Backend>(b: &B) -> Api<DeviceTaintRule> {
    Api::all(b.client())
}

/// Deletes a rule and waits until it is gone; gone already is fine.
pub async fn delete_rule<B: Backend>(b: &B, name: &str) {
    super::features::delete_cluster_object::<B, DeviceTaintRule>(b, name).await;
}

/// Every rule, on a release that serves them (what a failed scenario may leave behind).
pub async fn delete_all_rules<B: Backend>(b: &B) {
    if !b.release().enabled(Gate::DeviceTaintRules) {
        return;
    }
    let names: Vec<String> = rules(b)
        .list(&Default::default())
        .await
        .map(|l| {
            l.items
                .into_iter()
                .filter_map(|r| r.metadata.name)
                .collect()
        })
        .unwrap_or_default();
    for name in names {
        delete_rule(b, &name).await;
    }
}

fn rule_yaml(name: &str, selector: Option<Value>, key: &str, effect: &str) -> String {
    let mut spec = json!({"taint": {"key": key, "effect": effect}});
    if let Some(selector) = selector {
        spec["deviceSelector"] = selector;
    }
    let rule = json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule", "metadata": {"name": name}, "spec": spec});
    serde_json::to_string(&rule).unwrap_or_else(|e| panic!("{e}"))
}

/// The scheduler and the rules: see the module docs.
pub async fn device_taint_rules<B: Backend>(b: &mut B, p: &mut Protocol) {
    p.scenario("device-taint-rules");
    if !p.requires(&[Gate::DeviceTaintRules]) {
        return;
    }
    apply(
        b,
        &rule_yaml("nothing", None, "example.com/nothing", "NoSchedule"),
    )
    .await;
    apply(
        b,
        &rule_yaml(
            "other-driver",
            Some(json!({"driver": "other.example.com"})),
            "example.com/other",
            "NoSchedule",
        ),
    )
    .await;
    let path = examples_dir().join("structured/features/device-taint-rule.yaml");
    let example =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    apply(b, &example).await;
    let stored = rules(b)
        .get("fake-maintenance")
        .await
        .unwrap_or_else(|e| panic!("get DeviceTaintRule fake-maintenance: {e}"));
    p.record(
        "rule as stored: generation, timeAdded set",
        format!(
            "{}, {}",
            stored.metadata.generation.unwrap_or_default(),
            stored.spec.taint.time_added.is_some()
        ),
    );
    let env = running(b, p, NAMESPACE, "pod0", "ctr0", "pod0, tolerating the rule").await;
    assert_eq!(devices(&env).len(), 1);
    pending_with(
        b,
        p,
        (NAMESPACE, "pod1"),
        "FailedScheduling",
        "cannot allocate all claims",
        "pod1 while the rule taints every device",
    )
    .await;

    // A slice taint of a DeviceFault beside the rule: pod2 tolerates the rule's taint
    // only, so it waits until the fault goes (taints add up, whatever puts them there).
    apply(
        b,
        "apiVersion: fake.resource.3-shake.com/v1alpha1\nkind: DeviceFault\nmetadata: {name: degraded}\nspec:\n  taint: {key: fake.resource.3-shake.com/degraded, effect: NoSchedule}\n",
    )
    .await;
    wait_devices(b, "every device with the fault's taint", |d| {
        !d.is_empty() && d.iter().all(|x| x.taints.is_some())
    })
    .await;
    apply(
        b,
        &pod_yaml(
            NAMESPACE,
            "pod2",
            &[("fake", "resourceClaimTemplateName: tolerant")],
        ),
    )
    .await;
    pending_with(
        b,
        p,
        (NAMESPACE, "pod2"),
        "FailedScheduling",
        "cannot allocate all claims",
        "pod2 tolerating the rule but not the slice taint",
    )
    .await;
    delete_fault(b, "degraded").await;
    running(
        b,
        p,
        NAMESPACE,
        "pod2",
        "ctr0",
        "pod2 after the slice taint went",
    )
    .await;

    delete_rule(b, "fake-maintenance").await;
    running(b, p, NAMESPACE, "pod1", "ctr0", "pod1 after the rule went").await;

    // NoExecute through a rule naming pod1's device alone (driver, pool and device).
    let claim = claim_of(b, NAMESPACE, "pod1", "fake").await;
    let (pool, device) = held(&claim).first().cloned().unwrap_or_default();
    apply(
        b,
        &rule_yaml(
            "evict",
            Some(json!({"driver": DRIVER, "pool": pool, "device": device})),
            "fake.resource.3-shake.com/unhealthy",
            "NoExecute",
        ),
    )
    .await;
    let what = evicted_or_not(b, NAMESPACE, "pod1").await;
    p.record("pod1 after a NoExecute rule on its device", &what);
    let pod0 = get_pod(b, NAMESPACE, "pod0").await;
    p.record(
        "pod0 after the NoExecute rule on another device",
        if pod0.is_some_and(|po| po.metadata.deletion_timestamp.is_none()) {
            "still there"
        } else {
            "evicted"
        },
    );

    // A DeviceFault's taint `via: Rule`: the plugin writes the rule, for pod0's device.
    let claim = claim_of(b, NAMESPACE, "pod0", "fake").await;
    let (pool, device) = held(&claim).first().cloned().unwrap_or_default();
    apply(
        b,
        &format!(
            "apiVersion: fake.resource.3-shake.com/v1alpha1\nkind: DeviceFault\nmetadata: {{name: via-rule}}\nspec:\n  devices: [{device}]\n  taint: {{key: fake.resource.3-shake.com/unhealthy, effect: NoExecute, via: Rule}}\n"
        ),
    )
    .await;
    let written = wait_until("the plugin's DeviceTaintRule for the fault", || async {
        let list = rules(b).list(&Default::default()).await.ok()?.items;
        list.into_iter().find(|r| {
            r.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("fake.resource.3-shake.com/fault"))
                == Some(&"via-rule".to_string())
        })
    })
    .await;
    let selector = written.spec.device_selector.clone().unwrap_or_default();
    p.record(
        "fault via rule: the rule's selector is pod0's device",
        selector.driver.as_deref() == Some(DRIVER)
            && selector.pool.as_deref() == Some(pool.as_str())
            && selector.device.as_deref() == Some(device.as_str()),
    );
    p.record("fault via rule: status", fault_status(b, "via-rule").await);
    let what = evicted_or_not(b, NAMESPACE, "pod0").await;
    p.record("pod0 after a NoExecute fault via rule on its device", &what);
    delete_fault(b, "via-rule").await;
    wait_until("the fault's rule gone", || async {
        let list = rules(b).list(&Default::default()).await.ok()?.items;
        list.iter()
            .all(|r| {
                r.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("fake.resource.3-shake.com/fault"))
                    != Some(&"via-rule".to_string())
            })
            .then_some(())
    })
    .await;
    delete_namespaces(b, &[NAMESPACE]).await;
    for name in ["evict", "nothing", "other-driver"] {
        delete_rule(b, name).await;
    }
}

/// What the API server keeps of a rule and what it refuses (`ValidateDeviceTaintRule`).
pub async fn taint_rule_api<B: Backend>(b: &mut B, p: &mut Protocol) {
    p.scenario("taint-rule-api");
    if !p.requires(&[Gate::DeviceTaintRules]) {
        return;
    }
    let taint = json!({"key": "example.com/probe", "effect": "None"});
    let probes: [(&str, Value); 8] = [
        ("no selector", json!({"taint": taint})),
        (
            "empty selector",
            json!({"deviceSelector": {}, "taint": taint}),
        ),
        (
            "selector of another driver",
            json!({"deviceSelector": {"driver": "other.example.com", "pool": "node-a/gpus", "device": "gpu-0"}, "taint": taint}),
        ),
        (
            "tombstoned deviceClassName",
            json!({"deviceSelector": {"deviceClassName": "fake.3-shake.com"}, "taint": taint}),
        ),
        (
            "bad names",
            json!({"deviceSelector": {"driver": "Bad_Driver", "pool": "a//b", "device": "gpu.0"}, "taint": taint}),
        ),
        (
            "effect PreferNoSchedule",
            json!({"taint": {"key": "example.com/probe", "effect": "PreferNoSchedule"}}),
        ),
        ("no key, no effect", json!({"taint": {"value": "x y"}})),
        ("no taint", json!({})),
    ];
    let api = rules(b);
    for (i, (case, spec)) in probes.into_iter().enumerate() {
        let name = format!("probe-{i}");
        let body = json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule", "metadata": {"name": name}, "spec": spec});
        // Sent as written (unknown fields included), through the dynamic API.
        let dynamic: Api<kube::api::DynamicObject> = Api::all_with(
            b.client(),
            &kube::api::ApiResource::erase::<DeviceTaintRule>(&()),
        );
        let object: kube::api::DynamicObject =
            serde_json::from_value(body).unwrap_or_else(|e| panic!("{e}"));
        let outcome = match dynamic.create(&PostParams::default(), &object).await {
            Ok(stored) => {
                let stored = serde_json::to_value(&stored).unwrap_or_default();
                let selector = stored.pointer("/spec/deviceSelector");
                format!(
                    "accepted; deviceSelector {}, timeAdded {}",
                    selector.map_or("absent".to_string(), |s| s.to_string()),
                    if stored.pointer("/spec/taint/timeAdded").is_some() {
                        "set"
                    } else {
                        "unset"
                    }
                )
            }
            Err(kube::Error::Api(s)) => format!("refused: {}", s.message),
            Err(e) => panic!("create DeviceTaintRule {name}: {e}"),
        };
        p.record(format!("create: {case}"), outcome.replace(&name, "<probe>"));
        delete_rule(b, &name).await;
    }

    // The status: kube-controller-manager's, at most 8 conditions.
    apply(
        b,
        &rule_yaml(
            "status-probe",
            Some(json!({"driver": "other.example.com"})),
            "example.com/probe",
            "None",
        ),
    )
    .await;
    for count in [8, 9] {
        let conditions: Vec<Value> = (0..count)
            .map(|i| json!({"type": format!("Probe{i}"), "status": "True", "reason": "Probe", "message": "", "lastTransitionTime": "2026-12-07T00:00:00Z"}))
            .collect();
        let patch = json!({"status": {"conditions": conditions}});
        let outcome = match api
            .patch_status(
                "status-probe",
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(r) => format!(
                "accepted; {} conditions",
                r.status.and_then(|s| s.conditions).map_or(0, |c| c.len())
            ),
            Err(kube::Error::Api(s)) => format!("refused: {}", s.message),
            Err(e) => panic!("patch DeviceTaintRule status: {e}"),
        };
        p.record(format!("status: {count} conditions"), outcome);
    }
    delete_rule(b, "status-probe").await;
}
