//! kube-scheduler's node filters that a DRA user meets beside the claims: a
//! `nodeSelector`, required node affinity, the node's taints and a pod's tolerations, a
//! cordoned node, a pod asking for more CPU than the node has, and a pod for another
//! scheduler. The real run is the reference for the
//! emulated scheduler's filters (emulator/src/cluster/node_fit.rs), word for word in the
//! FailedScheduling messages, as the DRA scenarios are.
//!
//! The scenario taints and cordons the one node, so it always puts the node back
//! ([`restore_node`], also run by [`super::scenarios::reset`] after a failure).

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use super::backend::Backend;
use super::protocol::Protocol;
use super::scenarios::{
    apply, delete_namespaces, events_of, get_pod, namespace_yaml, node_of, pending_with, phase,
    wait_phase, wait_until,
};

const NAMESPACE: &str = "filters";
/// The taint the scenario puts on the node; nothing else uses the key.
const TAINT_KEY: &str = "fake-dra-e2e/filters";

/// A pod without claims: busybox sleeping, with `spec` (YAML flow mappings, each a line
/// of the pod's spec) added.
fn plain_pod(name: &str, spec: &[&str]) -> String {
    let extra: String = spec.iter().map(|l| format!("  {l}\n")).collect();
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{namespace: {NAMESPACE}, name: {name}}}
spec:
  terminationGracePeriodSeconds: 1
{extra}  containers:
    - name: ctr0
      image: busybox:1.36
      command: ["sh", "-c", "trap 'exit 0' TERM; sleep infinity & wait"]
"#
    )
}

async fn patch_node<B: Backend>(b: &B, patch: Value) {
    let node = b.node();
    Api::<Node>::all(b.client())
        .patch(&node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("patch node {node} with {patch}: {e}"));
}

/// Waits for the pod to run on the node and records it.
async fn runs_on_the_node<B: Backend>(b: &B, p: &mut Protocol, pod: &str) {
    let po = wait_phase(b, NAMESPACE, pod, "Running").await;
    assert_eq!(node_of(&po), Some(b.node()), "{pod}");
    p.record(format!("{pod} phase"), phase(&po));
}

/// The node without the scenario's taint and schedulable again.
pub async fn restore_node<B: Backend>(b: &B) {
    let node = b.node();
    let current = Api::<Node>::all(b.client())
        .get(&node)
        .await
        .unwrap_or_else(|e| panic!("node {node}: {e}"));
    let spec = current.spec.unwrap_or_default();
    let taints: Vec<_> = spec
        .taints
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.key != TAINT_KEY)
        .collect();
    let taints = if taints.is_empty() {
        Value::Null
    } else {
        json!(taints)
    };
    patch_node(
        b,
        json!({"spec": {"taints": taints, "unschedulable": null}}),
    )
    .await;
}

pub async fn node_filters<B: Backend>(b: &mut B, p: &mut Protocol) {
    p.scenario("node-filters");
    apply(b, &namespace_yaml(NAMESPACE)).await;
    let node = b.node();
    let b = &*b;

    // NodeAffinity: the kubelet's own hostname and os labels select the node; a label no
    // node has, or an affinity that excludes linux, leaves the pod Pending.
    apply(
        b,
        &plain_pod(
            "by-hostname",
            &[&format!("nodeSelector: {{kubernetes.io/hostname: {node}}}")],
        ),
    )
    .await;
    runs_on_the_node(b, p, "by-hostname").await;
    apply(
        b,
        &plain_pod("by-missing-label", &["nodeSelector: {gpu: 'yes'}"]),
    )
    .await;
    pending_with(
        b,
        p,
        (NAMESPACE, "by-missing-label"),
        "FailedScheduling",
        "0/1 nodes are available",
        "by-missing-label",
    )
    .await;
    let affinity = |operator: &str| {
        format!(
            "affinity: {{nodeAffinity: {{requiredDuringSchedulingIgnoredDuringExecution: \
             {{nodeSelectorTerms: [{{matchExpressions: [{{key: kubernetes.io/os, \
             operator: {operator}, values: [linux]}}]}}]}}}}}}"
        )
    };
    apply(b, &plain_pod("affinity-in", &[&affinity("In")])).await;
    runs_on_the_node(b, p, "affinity-in").await;
    apply(b, &plain_pod("affinity-not-in", &[&affinity("NotIn")])).await;
    pending_with(
        b,
        p,
        (NAMESPACE, "affinity-not-in"),
        "FailedScheduling",
        "0/1 nodes are available",
        "affinity-not-in",
    )
    .await;

    // TaintToleration: a NoSchedule taint keeps a pod off the node unless it tolerates it;
    // once the taint goes, the waiting pod is scheduled.
    patch_node(
        b,
        json!({"spec": {"taints": [{"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"}]}}),
    )
    .await;
    apply(b, &plain_pod("untolerated", &[])).await;
    pending_with(
        b,
        p,
        (NAMESPACE, "untolerated"),
        "FailedScheduling",
        "0/1 nodes are available",
        "untolerated",
    )
    .await;
    apply(
        b,
        &plain_pod(
            "tolerant",
            &[&format!(
                "tolerations: [{{key: {TAINT_KEY}, operator: Exists, effect: NoSchedule}}]"
            )],
        ),
    )
    .await;
    runs_on_the_node(b, p, "tolerant").await;
    restore_node(b).await;
    let po = wait_phase(b, NAMESPACE, "untolerated", "Running").await;
    p.record("untolerated after the taint went phase", phase(&po));

    // NodeUnschedulable: a cordoned node takes no new pod; uncordoned, it does.
    patch_node(b, json!({"spec": {"unschedulable": true}})).await;
    apply(b, &plain_pod("cordoned", &[])).await;
    pending_with(
        b,
        p,
        (NAMESPACE, "cordoned"),
        "FailedScheduling",
        "0/1 nodes are available",
        "cordoned",
    )
    .await;
    restore_node(b).await;
    let po = wait_phase(b, NAMESPACE, "cordoned", "Running").await;
    p.record("cordoned after uncordon phase", phase(&po));

    // NodeResourcesFit: the node offers its machine's CPUs (the emulated kubelet reports
    // them as a kubelet does); a pod asking for a thousand stays Pending.
    apply(
        b,
        &plain_pod("too-big", &[]).replace(
            "      command:",
            "      resources: {requests: {cpu: \"1000\"}}\n      command:",
        ),
    )
    .await;
    pending_with(
        b,
        p,
        (NAMESPACE, "too-big"),
        "FailedScheduling",
        "0/1 nodes are available",
        "too-big",
    )
    .await;

    // schedulerName: a pod for another scheduler is left alone (no binding, no Event, no
    // condition), while a pod created after it is scheduled.
    apply(b, &plain_pod("theirs", &["schedulerName: my-scheduler"])).await;
    apply(b, &plain_pod("after-theirs", &[])).await;
    runs_on_the_node(b, p, "after-theirs").await;
    let theirs = wait_until("pod theirs", || get_pod(b, NAMESPACE, "theirs")).await;
    let conditions = theirs
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .map(|c| c.iter().map(|c| c.type_.clone()).collect::<Vec<_>>())
        .unwrap_or_default();
    p.record("theirs phase", phase(&theirs));
    p.record("theirs scheduled", node_of(&theirs).is_some());
    p.record("theirs conditions", format!("{conditions:?}"));
    p.record(
        "theirs events",
        events_of(b, NAMESPACE, "theirs").await.len(),
    );
    assert_eq!(node_of(&theirs), None);
    delete_namespaces(b, &[NAMESPACE]).await;
}
