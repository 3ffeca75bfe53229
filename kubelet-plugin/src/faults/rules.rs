//! DeviceFault taints `via: Rule`: the DeviceTaintRules (`resource.k8s.io/v1`, Kubernetes
//! 1.37+) that put them on the devices, kept by whoever publishes those devices (the node
//! plugin for its node, fleet mode for its nodes), instead of taints in the slices.
//!
//! One rule per fault and node when the fault selects every device (the selector names
//! the driver and the node's pool), else one per fault, node and device (driver, pool and
//! device). Each rule carries the label [`WRITER_LABEL`] naming its writer, so each writer
//! lists only its own, and an owner reference to the fault, so the garbage collector
//! removes them with the fault even when no writer runs. Rules are written by server-side
//! apply (the API server keeps its `timeAdded`); a rule no fault wants any more is deleted.
//!
//! An API server without DeviceTaintRules (before 1.37) answers the list with 404: the
//! writer says so in [`RuleObjects::NotServed`], which the faults' status reports.

use std::collections::BTreeMap;
use std::time::Duration;

use fake_dra_api::fault::{DeviceFault, TaintSpec};
use fake_dra_api::upstream::device_taint_rule::{
    DeviceTaintRule, DeviceTaintRuleSpec, DeviceTaintSelector,
};
use k8s_openapi::api::resource::v1::DeviceTaint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client, Resource};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::claim_status::PoolFaults;
use super::watch::Faults;
use super::{NodeFaults, RuleTaint};

/// Names the writer of a rule: a node (its name, or a hash of a name too long for a label
/// value) or `fleet`.
pub const WRITER_LABEL: &str = "fake.resource.3-shake.com/fault-taint-writer";
/// The fault a rule is for.
pub const FAULT_ANNOTATION: &str = "fake.resource.3-shake.com/fault";
/// The node whose devices a rule taints.
pub const NODE_ANNOTATION: &str = "fake.resource.3-shake.com/node";
/// How often the writer lists its rules again while it has some (someone may have
/// deleted or changed one).
const RESYNC: Duration = Duration::from_secs(30);
/// The longest wait after a failed round.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Whether the API server serves DeviceTaintRules, as the writer last found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RuleObjects {
    /// Not asked yet (no fault wanted a rule).
    #[default]
    Unknown,
    Served,
    /// The list answered 404: a release before 1.37.
    NotServed,
}

/// The label value naming the writer for `node`: the name itself when it is a valid
/// label value (63 characters at most), else a hash of it.
pub fn writer_for_node(node: &str) -> String {
    if fake_dra_api::names::label_value(node).is_ok() {
        node.to_owned()
    } else {
        format!("node-{:016x}", fnv1a(&[node]))
    }
}

/// FNV-1a over the parts, NUL-separated: short, stable names.
fn fnv1a(parts: &[&str]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for (i, part) in parts.iter().enumerate() {
        let bytes = part.bytes();
        let separator = (i > 0).then_some(0u8);
        for byte in separator.into_iter().chain(bytes) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    hash
}

/// `<fault>-<hash of node and device>`: a DNS subdomain of at most 253 characters, stable
/// for the same fault, node and device.
fn rule_name(fault: &str, node: &str, device: Option<&str>) -> String {
    let hash = fnv1a(&[node, device.unwrap_or("*")]);
    let prefix = fault
        .get(..fault.len().min(235))
        .unwrap_or(fault)
        .trim_end_matches(['-', '.']);
    format!("{prefix}-{hash:016x}")
}

fn taint_of(spec: &TaintSpec) -> DeviceTaint {
    DeviceTaint {
        key: spec.key.clone(),
        value: spec.value.clone().filter(|v| !v.is_empty()),
        effect: match spec.effect {
            fake_dra_api::fault::TaintEffectSpec::NoSchedule => "NoSchedule",
            fake_dra_api::fault::TaintEffectSpec::NoExecute => "NoExecute",
            fake_dra_api::fault::TaintEffectSpec::None => "None",
        }
        .into(),
        time_added: None,
    }
}

fn rule_for(driver: &str, writer: &str, node: &str, wanted: &RuleTaint<'_>) -> DeviceTaintRule {
    let owner = OwnerReference {
        api_version: DeviceFault::api_version(&()).into_owned(),
        kind: DeviceFault::kind(&()).into_owned(),
        name: wanted.fault.name.clone(),
        uid: wanted.fault.uid.clone(),
        ..Default::default()
    };
    DeviceTaintRule {
        metadata: ObjectMeta {
            name: Some(rule_name(&wanted.fault.name, node, wanted.device)),
            labels: Some(BTreeMap::from([(WRITER_LABEL.into(), writer.into())])),
            annotations: Some(BTreeMap::from([
                (FAULT_ANNOTATION.into(), wanted.fault.name.clone()),
                (NODE_ANNOTATION.into(), node.into()),
            ])),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: DeviceTaintRuleSpec {
            device_selector: Some(DeviceTaintSelector {
                driver: Some(driver.into()),
                // fake-dra publishes one pool per node, named after it.
                pool: Some(node.into()),
                device: wanted.device.map(str::to_owned),
            }),
            taint: taint_of(wanted.taint),
        },
        status: None,
    }
}

/// The rules the faults of `nodes` want, by name, written by `writer`.
pub fn wanted(
    driver: &str,
    writer: &str,
    nodes: &BTreeMap<String, NodeFaults>,
) -> BTreeMap<String, DeviceTaintRule> {
    let mut out = BTreeMap::new();
    for (node, faults) in nodes {
        for wanted in faults.rule_taints() {
            let rule = rule_for(driver, writer, node, &wanted);
            out.insert(rule.metadata.name.clone().unwrap_or_default(), rule);
        }
    }
    out
}

/// Whether `stored` already says what `want` says (selector, taint key, value, effect;
/// the API server adds `timeAdded`), with the same writer label and owner.
fn up_to_date(stored: &DeviceTaintRule, want: &DeviceTaintRule) -> bool {
    let (s, w) = (&stored.spec, &want.spec);
    s.device_selector == w.device_selector
        && s.taint.key == w.taint.key
        && s.taint.value == w.taint.value
        && s.taint.effect == w.taint.effect
        && stored
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(WRITER_LABEL))
            == want
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(WRITER_LABEL))
        && stored.metadata.owner_references == want.metadata.owner_references
}

/// What went wrong in a round.
#[derive(Debug, thiserror::Error)]
enum RoundError {
    #[error("this API server serves no DeviceTaintRules")]
    NotServed,
    #[error("{0}")]
    Api(#[from] kube::Error),
}

/// Lists the writer's rules, deletes those not wanted and applies those missing or
/// different. Returns how many rules the writer has now.
async fn round(
    api: &Api<DeviceTaintRule>,
    writer: &str,
    manager: &str,
    want: &BTreeMap<String, DeviceTaintRule>,
) -> Result<usize, RoundError> {
    let selector = format!("{WRITER_LABEL}={writer}");
    let stored = match api.list(&ListParams::default().labels(&selector)).await {
        Ok(list) => list.items,
        Err(kube::Error::Api(status)) if status.code == 404 => return Err(RoundError::NotServed),
        Err(e) => return Err(e.into()),
    };
    let mut stored: BTreeMap<String, DeviceTaintRule> = stored
        .into_iter()
        .filter_map(|r| Some((r.metadata.name.clone()?, r)))
        .collect();
    for name in stored.keys().filter(|n| !want.contains_key(*n)) {
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => info!(rule = %name, "deleted a DeviceTaintRule no fault wants"),
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    for (name, rule) in want {
        if stored.remove(name).is_some_and(|s| up_to_date(&s, rule)) {
            continue;
        }
        let params = PatchParams::apply(manager).force();
        api.patch(name, &params, &Patch::Apply(rule)).await?;
        info!(rule = %name, "applied a DeviceTaintRule for a DeviceFault");
    }
    Ok(want.len())
}

/// Keeps the rules the faults want for the nodes `nodes` gives, as `writer`, until the
/// faults' channel closes. Lists nothing until a fault wants a rule or, at start, to
/// find rules left by an earlier run.
pub async fn run(
    client: Client,
    driver: String,
    writer: String,
    manager: String,
    faults: Faults,
    nodes: PoolFaults,
    state: watch::Sender<RuleObjects>,
) {
    let api: Api<DeviceTaintRule> = Api::all(client);
    let mut changes = faults;
    let mut backoff = Duration::from_millis(200);
    // Rules this writer may have: at start unknown, so the first round lists.
    let mut may_have_rules = true;
    loop {
        let want = wanted(&driver, &writer, &nodes());
        let mut wait = RESYNC;
        if may_have_rules || !want.is_empty() {
            match round(&api, &writer, &manager, &want).await {
                Ok(count) => {
                    may_have_rules = count > 0;
                    backoff = Duration::from_millis(200);
                    state.send_if_modified(|s| {
                        std::mem::replace(s, RuleObjects::Served) != RuleObjects::Served
                    });
                }
                Err(RoundError::NotServed) => {
                    may_have_rules = false;
                    if state.send_if_modified(|s| {
                        std::mem::replace(s, RuleObjects::NotServed) != RuleObjects::NotServed
                    }) && !want.is_empty()
                    {
                        warn!(
                            "a DeviceFault asks for a taint via DeviceTaintRule, which this API server does not serve (Kubernetes 1.37+)"
                        );
                    }
                }
                Err(RoundError::Api(error)) => {
                    debug!(%error, "writing DeviceTaintRules failed; retrying");
                    wait = backoff;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
        let resync = may_have_rules || wait != RESYNC;
        tokio::select! {
            changed = changes.changed() => if changed.is_err() { return },
            () = tokio::time::sleep(wait), if resync => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::Fault;
    use fake_dra_api::fault::{DeviceFaultSpec, TaintEffectSpec, TaintVia};

    fn fault(name: &str, devices: &[&str], via: TaintVia) -> Fault {
        Fault {
            name: name.into(),
            uid: format!("uid-{name}"),
            generation: 1,
            spec: DeviceFaultSpec {
                devices: devices.iter().map(|d| d.to_string()).collect(),
                taint: Some(TaintSpec {
                    key: "example.com/broken".into(),
                    value: Some("ecc".into()),
                    effect: TaintEffectSpec::NoExecute,
                    via,
                }),
                ..Default::default()
            },
        }
    }

    fn nodes(faults: &[Fault]) -> BTreeMap<String, NodeFaults> {
        let devices: Vec<String> = (0..4).map(|i| format!("fake-{i}")).collect();
        ["node-a", "node-b"]
            .into_iter()
            .map(|n| (n.to_string(), NodeFaults::resolve(n, &devices, faults)))
            .collect()
    }

    #[test]
    fn a_fault_of_every_device_wants_one_rule_per_pool() {
        let rules = wanted(
            "d.example.com",
            "fleet",
            &nodes(&[fault("f", &[], TaintVia::Rule)]),
        );
        assert_eq!(rules.len(), 2);
        let pools: Vec<_> = rules
            .values()
            .map(|r| r.spec.device_selector.clone().unwrap_or_default())
            .collect();
        assert!(
            pools
                .iter()
                .all(|s| s.driver.as_deref() == Some("d.example.com") && s.device.is_none())
        );
        assert_eq!(
            pools
                .iter()
                .filter_map(|s| s.pool.clone())
                .collect::<Vec<_>>(),
            vec!["node-a".to_string(), "node-b".to_string()]
        );
        let rule = rules.values().next().cloned().unwrap_or_default();
        assert_eq!(rule.spec.taint.effect, "NoExecute");
        assert_eq!(rule.spec.taint.value.as_deref(), Some("ecc"));
        let owner = rule.metadata.owner_references.unwrap_or_default();
        assert_eq!(owner.first().map(|o| o.uid.as_str()), Some("uid-f"));
    }

    #[test]
    fn named_devices_want_a_rule_each_and_slice_taints_want_none() {
        let faults = [
            fault("named", &["fake-1", "fake-9"], TaintVia::Rule),
            fault("in-slices", &[], TaintVia::Slice),
        ];
        let rules = wanted("d.example.com", "node-a", &nodes(&faults));
        // fake-9 is no device of the nodes; two nodes with fake-1 each.
        assert_eq!(rules.len(), 2);
        assert!(rules.values().all(|r| {
            r.spec
                .device_selector
                .as_ref()
                .and_then(|s| s.device.as_deref())
                == Some("fake-1")
        }));
    }

    #[test]
    fn names_are_stable_short_subdomains() {
        let long = "f".repeat(253);
        let name = rule_name(&long, "node-a", Some("fake-1"));
        assert!(name.len() <= 253, "{}", name.len());
        assert_eq!(name, rule_name(&long, "node-a", Some("fake-1")));
        assert_ne!(
            rule_name("f", "node-a", None),
            rule_name("f", "node-a", Some("fake-1"))
        );
        assert_ne!(
            rule_name("f", "node-a", None),
            rule_name("f", "node-b", None)
        );
        assert!(fake_dra_api::names::dns_subdomain(&rule_name("f.x-", "n", None), 253).is_ok());
    }

    #[test]
    fn a_writer_label_is_the_node_or_a_hash() {
        assert_eq!(writer_for_node("node-a"), "node-a");
        let long = format!("{}.example.com", "n".repeat(70));
        let writer = writer_for_node(&long);
        assert!(
            writer.starts_with("node-") && writer.len() == 21,
            "{writer}"
        );
    }
}
