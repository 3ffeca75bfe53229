//! Fleet mode (API only): one process publishes the ResourceSlices of many simulated
//! nodes — Node objects it creates, or nodes others made (kwok) that it finds by label —
//! exactly as the node plugin would publish them on each (one pool per node, the same
//! [`dra_kubelet_plugin::slices`] and [`dra_kubelet_plugin::publish_slices::PoolWriter`], an owner reference to the
//! Node), with the `DeviceFault`s applied. No kubelet calls it: nothing is prepared. For
//! scheduler, autoscaler and queueing tests at thousands of nodes (docs/fleet.md).
//!
//! This module is the pure part: the Node and Lease objects of the nodes it creates, and
//! the flags' syntax. [`run`] is the adapter.

pub mod run;

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Node, NodeSpec, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, OwnerReference};
use kube::api::ObjectMeta;
use serde_json::{Value, json};

/// The label of the nodes fleet mode creates, and what it selects by default.
pub const FLEET_LABEL: &str = "fake.resource.3-shake.com/fleet";

/// The taint of the nodes fleet mode creates unless told otherwise, as kwok taints its
/// nodes: pods that do not tolerate it never land on a node no kubelet runs.
pub const DEFAULT_TAINT: &str = "fake.resource.3-shake.com/fleet=true:NoSchedule";

/// Most nodes `--create-nodes` creates: one process renews every created node's Lease
/// each heartbeat interval (10000 Leases in 20 s is 500 writes a second) and keeps a
/// pool per node; larger fleets are several processes with their own prefixes.
pub const MAX_CREATE_NODES: usize = 10_000;

/// The namespace of node heartbeats.
pub const LEASE_NAMESPACE: &str = "kube-node-lease";

/// Why a flag of fleet mode is unusable; names the flag.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{flag} {value:?}: {reason}")]
pub struct FlagError {
    pub flag: &'static str,
    pub value: String,
    pub reason: String,
}

fn flag_error(flag: &'static str, value: &str, reason: impl Into<String>) -> FlagError {
    FlagError {
        flag,
        value: value.chars().take(120).collect(),
        reason: reason.into(),
    }
}

/// `key[=value]:Effect`, as `kubectl taint` writes taints; several comma-separated; empty
/// for none.
pub fn parse_taints(s: &str) -> Result<Vec<Taint>, FlagError> {
    s.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| {
            let (kv, effect) = t
                .rsplit_once(':')
                .ok_or_else(|| flag_error("--node-taints", t, "must be key[=value]:Effect"))?;
            if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
                return Err(flag_error(
                    "--node-taints",
                    t,
                    "the effect must be NoSchedule, PreferNoSchedule or NoExecute",
                ));
            }
            let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
            if key.is_empty() {
                return Err(flag_error("--node-taints", t, "the key is empty"));
            }
            Ok(Taint {
                key: key.to_owned(),
                value: (!value.is_empty()).then(|| value.to_owned()),
                effect: effect.to_owned(),
                time_added: None,
            })
        })
        .collect()
}

/// `key=value,...`; empty for none.
pub fn parse_labels(s: &str) -> Result<BTreeMap<String, String>, FlagError> {
    s.split(',')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (k, v) = l
                .split_once('=')
                .ok_or_else(|| flag_error("--node-labels", l, "must be key=value"))?;
            if k.is_empty() {
                return Err(flag_error("--node-labels", l, "the key is empty"));
            }
            Ok((k.to_owned(), v.to_owned()))
        })
        .collect()
}

/// What a created node looks like.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeTemplate {
    /// Extra labels (the fleet label and `kubernetes.io/hostname` are always set).
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    /// `status.capacity` and `allocatable`: cpu, memory, pods.
    pub cpu: String,
    pub memory: String,
    pub pods: String,
}

impl Default for NodeTemplate {
    fn default() -> Self {
        Self {
            labels: BTreeMap::new(),
            taints: Vec::new(),
            cpu: "32".into(),
            memory: "256Gi".into(),
            pods: "110".into(),
        }
    }
}

/// The names of `count` created nodes: `<prefix><i>`.
pub fn node_names(prefix: &str, count: usize) -> Vec<String> {
    (0..count).map(|i| format!("{prefix}{i}")).collect()
}

/// A created node's object.
pub fn node_object(name: &str, template: &NodeTemplate) -> Node {
    let mut labels = template.labels.clone();
    labels.insert(FLEET_LABEL.into(), "true".into());
    labels.insert("kubernetes.io/hostname".into(), name.into());
    labels.insert("kubernetes.io/os".into(), "linux".into());
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([(
                "fake.resource.3-shake.com/created-by".into(),
                "fake-dra-kubelet-plugin fleet".into(),
            )])),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            taints: (!template.taints.is_empty()).then(|| template.taints.clone()),
            ..Default::default()
        }),
        status: None,
    }
}

/// The status a created node reports: Ready, with the template's resources (merge patch
/// of the status subresource; `now` RFC 3339).
pub fn node_status_patch(template: &NodeTemplate, now: &str) -> Value {
    let resources = json!({
        "cpu": Quantity(template.cpu.clone()),
        "memory": Quantity(template.memory.clone()),
        "pods": Quantity(template.pods.clone()),
    });
    json!({"status": {
        "capacity": resources,
        "allocatable": resources,
        "conditions": [{
            "type": "Ready",
            "status": "True",
            "reason": "FleetNodeReady",
            "message": "simulated by fake-dra fleet mode; no kubelet runs here",
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }],
        "nodeInfo": {
            "architecture": "amd64",
            "operatingSystem": "linux",
            "kubeletVersion": "fake-dra-fleet",
            "kubeProxyVersion": "",
            "bootID": "", "containerRuntimeVersion": "", "kernelVersion": "", "machineID": "",
            "osImage": "", "systemUUID": "",
        },
    }})
}

/// A created node's heartbeat Lease, owned by the node (the kubelet's layout).
pub fn lease_object(
    node: &str,
    owner: Option<OwnerReference>,
    duration_seconds: i32,
    now: jiff::Timestamp,
) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(node.into()),
            namespace: Some(LEASE_NAMESPACE.into()),
            owner_references: owner.map(|o| vec![o]),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(node.into()),
            lease_duration_seconds: Some(duration_seconds),
            renew_time: Some(MicroTime(now)),
            ..Default::default()
        }),
    }
}

/// The owner reference to a Node.
pub fn node_owner(name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: name.into(),
        uid: uid.into(),
        ..Default::default()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn taints_and_labels_as_kubectl_writes_them() {
        let t = parse_taints(DEFAULT_TAINT).unwrap();
        assert_eq!(t[0].key, FLEET_LABEL);
        assert_eq!(t[0].value.as_deref(), Some("true"));
        assert_eq!(t[0].effect, "NoSchedule");
        let two = parse_taints("a:NoExecute, b=c:PreferNoSchedule").unwrap();
        assert_eq!(two.len(), 2);
        assert_eq!(two[0].value, None);
        assert!(parse_taints("").unwrap().is_empty());
        assert_eq!(
            parse_taints("k=v").unwrap_err().to_string(),
            "--node-taints \"k=v\": must be key[=value]:Effect"
        );
        assert!(
            parse_taints("k:Sometimes")
                .unwrap_err()
                .to_string()
                .contains("the effect must be")
        );
        assert_eq!(
            parse_labels("type=kwok,zone=a").unwrap(),
            BTreeMap::from([("type".into(), "kwok".into()), ("zone".into(), "a".into())])
        );
        assert!(parse_labels("novalue").is_err());
    }

    #[test]
    fn a_created_node_is_labelled_tainted_and_ready() {
        let template = NodeTemplate {
            taints: parse_taints(DEFAULT_TAINT).unwrap(),
            ..Default::default()
        };
        let node = serde_json::to_value(node_object("fleet-7", &template)).unwrap();
        assert_eq!(node["metadata"]["labels"][FLEET_LABEL], "true");
        assert_eq!(
            node["metadata"]["labels"]["kubernetes.io/hostname"],
            "fleet-7"
        );
        assert_eq!(node["spec"]["taints"][0]["effect"], "NoSchedule");
        let status = node_status_patch(&template, "2026-12-03T00:00:00Z");
        assert_eq!(status["status"]["allocatable"]["pods"], "110");
        assert_eq!(status["status"]["conditions"][0]["type"], "Ready");
        assert_eq!(node_names("n-", 3), ["n-0", "n-1", "n-2"]);
        let lease =
            serde_json::to_value(lease_object("n-0", None, 40, jiff::Timestamp::UNIX_EPOCH))
                .unwrap();
        assert_eq!(lease["metadata"]["namespace"], "kube-node-lease");
        assert_eq!(lease["spec"]["holderIdentity"], "n-0");
    }
}
