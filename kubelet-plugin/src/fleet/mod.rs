//! Fleet mode (API only): one process publishes the ResourceSlices of many simulated
//! nodes — Node objects it creates, or nodes others made (kwok) that it finds by label —
//! exactly as the node plugin would publish them on each (one pool per node, the same
//! [`dra_kubelet_plugin::slices`] and [`dra_kubelet_plugin::slices::PoolWriter`], an owner reference to the
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
            fake_dra_api::names::qualified_name(key)
                .map_err(|r| flag_error("--node-taints", t, format!("key {r}")))?;
            fake_dra_api::names::label_value(value)
                .map_err(|r| flag_error("--node-taints", t, format!("value {r}")))?;
            Ok(Taint {
                key: key.to_owned(),
                value: (!value.is_empty()).then(|| value.to_owned()),
                effect: effect.to_owned(),
                time_added: None,
            })
        })
        .collect()
}

/// `--node-selector`: a label selector as kube-apiserver parses it — comma-separated
/// requirements `key`, `!key`, `key=value`, `key==value`, `key!=value`, `key in (a,b)`,
/// `key notin (a,b)`, `key>N`, `key<N`; keys qualified names, values label values; empty
/// for every node. Checked at start: the API server would refuse every watch of a bad one.
pub fn parse_node_selector(s: &str) -> Result<String, FlagError> {
    let fail = |reason: String| flag_error("--node-selector", s, reason);
    let tokens = selector_tokens(s);
    let mut at = 0;
    let next = |at: &mut usize| {
        let t = tokens.get(*at).cloned();
        *at += 1;
        t
    };
    let key =
        |k: &str| fake_dra_api::names::qualified_name(k).map_err(|r| fail(format!("key {r}")));
    let value =
        |v: &str| fake_dra_api::names::label_value(v).map_err(|r| fail(format!("value {r}")));
    if tokens.is_empty() {
        return Ok(s.to_owned());
    }
    loop {
        match next(&mut at) {
            Some(Tok::Not) => match next(&mut at) {
                Some(Tok::Word(k)) => key(&k)?,
                _ => return Err(fail("'!' must be followed by a key".into())),
            },
            Some(Tok::Word(k)) => {
                key(&k)?;
                match tokens.get(at) {
                    None | Some(Tok::Comma) => {}
                    Some(Tok::Eq | Tok::NotEq) => {
                        at += 1;
                        if let Some(Tok::Word(v)) = tokens.get(at) {
                            value(v)?;
                            at += 1;
                        }
                    }
                    Some(Tok::Gt | Tok::Lt) => {
                        at += 1;
                        match next(&mut at) {
                            Some(Tok::Word(v)) if v.parse::<i64>().is_ok() => {}
                            _ => return Err(fail(format!("{k}: '>' and '<' take a whole number"))),
                        }
                    }
                    Some(Tok::Word(op)) if op == "in" || op == "notin" => {
                        let op = op.clone();
                        at += 1;
                        if next(&mut at) != Some(Tok::Open) {
                            return Err(fail(format!("{k} {op}: the values go in parentheses, (a,b)")));
                        }
                        let mut values = 0;
                        loop {
                            match next(&mut at) {
                                Some(Tok::Word(v)) => {
                                    value(&v)?;
                                    values += 1;
                                }
                                Some(Tok::Comma) => {}
                                Some(Tok::Close) => break,
                                _ => return Err(fail(format!("{k} {op}: the values' list is not closed with ')'"))),
                            }
                        }
                        if values == 0 {
                            return Err(fail(format!("{k} {op}: the values' list is empty")));
                        }
                    }
                    Some(_) => {
                        return Err(fail(format!(
                            "after key {k}: expected =, ==, !=, in, notin, >, < or ','"
                        )));
                    }
                }
            }
            _ => return Err(fail("expected a requirement: key, !key, key=value, key!=value, key in (a,b), key notin (a,b)".into())),
        }
        match next(&mut at) {
            None => return Ok(s.to_owned()),
            Some(Tok::Comma) => {}
            Some(_) => return Err(fail("requirements must be separated by ','".into())),
        }
    }
}

/// The tokens of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Word(String),
    Not,
    Eq,
    NotEq,
    Gt,
    Lt,
    Comma,
    Open,
    Close,
}

fn selector_tokens(s: &str) -> Vec<Tok> {
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        let tok = match c {
            c if c.is_whitespace() => continue,
            ',' => Tok::Comma,
            '(' => Tok::Open,
            ')' => Tok::Close,
            '>' => Tok::Gt,
            '<' => Tok::Lt,
            '=' => {
                chars.next_if_eq(&'=');
                Tok::Eq
            }
            '!' => {
                if chars.next_if_eq(&'=').is_some() {
                    Tok::NotEq
                } else {
                    Tok::Not
                }
            }
            c => {
                let mut word = String::from(c);
                while let Some(c) = chars.next_if(|c| !c.is_whitespace() && !",()<>=!".contains(*c))
                {
                    word.push(c);
                }
                Tok::Word(word)
            }
        };
        out.push(tok);
    }
    out
}

/// `--node-cpu`, `--node-memory`: a Kubernetes quantity (`32`, `500m`, `256Gi`), not
/// negative; kept as written.
pub fn parse_quantity(flag: &'static str, s: &str) -> Result<String, FlagError> {
    match s.parse::<dra_kubelet_plugin::Quantity>() {
        Ok(q) if q.is_non_negative() => Ok(s.to_owned()),
        Ok(_) => Err(flag_error(flag, s, "must not be negative")),
        Err(e) => Err(flag_error(
            flag,
            s,
            format!(
                "not a Kubernetes quantity ({}): a number with an optional suffix, e.g. 256Gi, 512Mi, 32, 500m",
                e.reason
            ),
        )),
    }
}

/// `--node-pods`: a whole number.
pub fn parse_pods(s: &str) -> Result<String, FlagError> {
    match s.parse::<u32>() {
        Ok(_) if !s.starts_with('+') => Ok(s.to_owned()),
        _ => Err(flag_error(
            "--node-pods",
            s,
            format!("must be a whole number from 0 to {}, e.g. 110", u32::MAX),
        )),
    }
}

/// `--concurrency`: at least 1.
pub fn parse_concurrency(s: &str) -> Result<usize, FlagError> {
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(flag_error(
            "--concurrency",
            s,
            "must be a whole number, at least 1",
        )),
    }
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
            fake_dra_api::names::qualified_name(k)
                .map_err(|r| flag_error("--node-labels", l, format!("key {r}")))?;
            fake_dra_api::names::label_value(v)
                .map_err(|r| flag_error("--node-labels", l, format!("value {r}")))?;
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

/// The nodes of `listed` that an earlier run with more `--create-nodes` left: named
/// `<prefix><i>` (as [`node_names`] writes `i`) with `i` at least `count`. (A second fleet
/// whose prefix is this one's plus digits has names this one could create: the docs ask
/// for prefixes of their own.)
pub fn stale_node_names<'a>(
    prefix: &str,
    count: usize,
    listed: impl IntoIterator<Item = &'a str>,
) -> Vec<String> {
    listed
        .into_iter()
        .filter(|name| {
            name.strip_prefix(prefix).is_some_and(|i| {
                let canonical = !i.is_empty()
                    && i.bytes().all(|b| b.is_ascii_digit())
                    && (i == "0" || !i.starts_with('0'));
                canonical && i.parse::<usize>().is_ok_and(|i| i >= count)
            })
        })
        .map(str::to_owned)
        .collect()
}

/// The annotation the nodes fleet mode creates carry, and its value.
pub const CREATED_BY: (&str, &str) = (
    "fake.resource.3-shake.com/created-by",
    "fake-dra-kubelet-plugin fleet",
);

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
            annotations: Some(BTreeMap::from([(CREATED_BY.0.into(), CREATED_BY.1.into())])),
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
    fn labels_and_taints_are_spelled_as_kubernetes_requires() {
        for (bad, why) in [
            (
                parse_labels("bad key=x").map(|_| ()),
                "key \"bad key\" is not a qualified name",
            ),
            (
                parse_labels("k=bad value").map(|_| ()),
                "value \"bad value\" is not a label value",
            ),
            (
                parse_taints("=v:NoSchedule").map(|_| ()),
                "key \"\" is not a qualified name",
            ),
        ] {
            let err = bad.unwrap_err().to_string();
            assert!(err.contains(why), "{err}");
        }
        let err = parse_taints("k=a/b:NoExecute").unwrap_err();
        assert_eq!(err.flag, "--node-taints");
        assert!(err.reason.contains("is not a label value"), "{err}");
    }

    #[test]
    fn node_selectors_are_checked_as_the_api_server_parses_them() {
        for good in [
            "",
            "fake.resource.3-shake.com/fleet=true",
            "type=kwok",
            "type==kwok, zone!=a",
            "!gpu",
            "gpu",
            "zone in (a, b),tier notin (x)",
            "rank>3,rank<10",
            "empty=",
            "k in (a,)",
        ] {
            assert_eq!(parse_node_selector(good).as_deref(), Ok(good), "{good}");
        }
        for (bad, why) in [
            ("bad key=x", "after key bad: expected"),
            ("!!bad key!!", "'!' must be followed by a key"),
            ("k=v w", "separated by ','"),
            ("-k=v", "is not a qualified name"),
            ("k=-v", "is not a label value"),
            ("k in a,b", "the values go in parentheses"),
            ("k in (a", "not closed"),
            ("k notin ()", "list is empty"),
            ("k>x", "take a whole number"),
            ("k,,j", "expected a requirement"),
            ("k=v,", "expected a requirement"),
        ] {
            let err = parse_node_selector(bad).unwrap_err();
            assert_eq!(err.flag, "--node-selector");
            assert!(err.reason.contains(why), "{bad:?}: {err}");
        }
    }

    #[test]
    fn quantities_pods_and_concurrency_are_checked() {
        assert_eq!(parse_quantity("--node-cpu", "500m").as_deref(), Ok("500m"));
        assert_eq!(
            parse_quantity("--node-memory", "256Gi").as_deref(),
            Ok("256Gi")
        );
        let err = parse_quantity("--node-memory", "lots")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("--node-memory \"lots\": not a Kubernetes quantity"),
            "{err}"
        );
        assert!(
            parse_quantity("--node-cpu", "-1")
                .unwrap_err()
                .to_string()
                .contains("must not be negative")
        );
        assert_eq!(parse_pods("110").as_deref(), Ok("110"));
        for bad in ["1.5", "-3", "+3", "", "many", "1e3"] {
            let err = parse_pods(bad).unwrap_err().to_string();
            assert!(err.starts_with("--node-pods"), "{err}");
            assert!(err.contains("whole number"), "{err}");
        }
        assert_eq!(parse_concurrency("16"), Ok(16));
        assert_eq!(
            parse_concurrency("0").unwrap_err().to_string(),
            "--concurrency \"0\": must be a whole number, at least 1"
        );
    }

    #[test]
    fn stale_nodes_are_the_created_names_at_or_past_the_count() {
        let listed = [
            "sim-0", "sim-2", "sim-3", "sim-10", "sim-03", "sim-", "sim-3a", "other-5", "sim-x",
        ];
        assert_eq!(
            stale_node_names("sim-", 3, listed),
            ["sim-3", "sim-10"],
            "canonical indexes only, as node_names writes them"
        );
        assert!(stale_node_names("sim-", 11, listed).is_empty());
        assert_eq!(stale_node_names("sim-", 0, ["sim-0"]), ["sim-0"]);
        // Names of this fleet are never stale.
        let names = node_names("n-", 12);
        assert!(stale_node_names("n-", 12, names.iter().map(String::as_str)).is_empty());
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
