//! The node filters kube-scheduler runs for every pod, before its DynamicResources
//! filter, in the default profile's order (`pkg/scheduler/apis/config/v1/
//! default_plugins.go`): NodeUnschedulable, TaintToleration, NodeAffinity (nodeSelector
//! and required node affinity), NodeResourcesFit. Both emulated schedulers (classic and
//! structured) use them, so a plain pod no longer lands on a tainted fleet node or one its
//! `nodeSelector` rules out, and stays Pending with kube-scheduler's words.
//!
//! The first failing plugin decides a node, as `RunFilterPlugins` stops there. Left out:
//! NodePorts, the volume plugins, PodTopologySpread, InterPodAffinity, preemption itself
//! (the emulator never evicts; its message is the one with no victims).

use std::collections::BTreeMap;

use fake_dra_api::upstream::node_selector::{self, NodeView};
use fake_dra_api::upstream::pod::DraPod;
use k8s_openapi::api::core::v1::{Node, NodeSelector, Taint};
use serde_json::Value;

/// The scheduler a pod with no `schedulerName` is for (`v1.DefaultSchedulerName`).
pub const DEFAULT_SCHEDULER: &str = "default-scheduler";

/// `v1.TaintNodeUnschedulable`: tolerating it (NoSchedule) tolerates `spec.unschedulable`.
const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";

/// Whether the emulated default scheduler handles `pod`: a pod for another scheduler is
/// left alone, Pending, without an Event (kube-scheduler only queues pods of its profiles).
pub fn is_ours(pod: &DraPod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.extra.get("schedulerName"))
        .and_then(Value::as_str)
        .is_none_or(|name| name.is_empty() || name == DEFAULT_SCHEDULER)
}

/// Why a node does not fit: the plugin's reasons, and whether preemption could make room
/// (NodeResourcesFit's `Unschedulable`) or not (the others' `UnschedulableAndUnresolvable`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub reasons: Vec<String>,
    pub resolvable: bool,
}

impl Rejection {
    fn unresolvable(reason: impl Into<String>) -> Self {
        Self {
            reasons: vec![reason.into()],
            resolvable: false,
        }
    }
}

/// What the pods bound to a node request, for NodeResourcesFit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeUsage {
    pub pods: i128,
    /// Per resource, in nano-units (1 cpu = 10^9, 1 byte = 10^9).
    pub requested: BTreeMap<String, i128>,
}

impl NodeUsage {
    /// Adds a pod bound to the node.
    pub fn add(&mut self, pod: &DraPod) {
        self.pods += 1;
        for (resource, amount) in pod_requests(pod) {
            *self.requested.entry(resource).or_default() += amount;
        }
    }
}

/// The usage of every node by the pods bound to it that have not finished.
pub fn usage_by_node(pods: &[DraPod]) -> BTreeMap<String, NodeUsage> {
    let mut usage: BTreeMap<String, NodeUsage> = BTreeMap::new();
    for pod in pods.iter().filter(|p| !p.is_done()) {
        if let Some(node) = pod.node_name() {
            usage.entry(node.to_owned()).or_default().add(pod);
        }
    }
    usage
}

/// Runs the filters for `pod` on `node`; `version` picks the release's wording.
pub fn filter(
    pod: &DraPod,
    node: &Node,
    usage: Option<&NodeUsage>,
    version: (u32, u32),
) -> Result<(), Rejection> {
    let spec = pod.spec.as_ref();
    let field = |name: &str| spec.and_then(|s| s.extra.get(name));
    let tolerations: Vec<Value> = field("tolerations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();

    // NodeUnschedulable (node_unschedulable.go).
    let cordoned = node
        .spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false);
    let unschedulable_taint = Taint {
        key: UNSCHEDULABLE_TAINT.into(),
        effect: "NoSchedule".into(),
        ..Default::default()
    };
    if cordoned && !tolerated(&unschedulable_taint, &tolerations) {
        return Err(Rejection::unresolvable("node(s) were unschedulable"));
    }

    // TaintToleration: the first NoSchedule/NoExecute taint no toleration tolerates.
    let taints = node.spec.as_ref().and_then(|s| s.taints.as_deref());
    if let Some(taint) = taints.into_iter().flatten().find(|t| {
        matches!(t.effect.as_str(), "NoSchedule" | "NoExecute") && !tolerated(t, &tolerations)
    }) {
        // kubernetes#134740 (1.35, cherry-picked to 1.34): the taint is no longer named,
        // as taint keys and values may be sensitive.
        let reason = if version >= (1, 34) {
            "node(s) had untolerated taint(s)".to_owned()
        } else {
            format!(
                "node(s) had untolerated taint {{{}: {}}}",
                taint.key,
                taint.value.as_deref().unwrap_or_default()
            )
        };
        return Err(Rejection::unresolvable(reason));
    }

    // NodeAffinity: nodeSelector, then the required node affinity terms.
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    let selected = field("nodeSelector")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str());
    let required = field("affinity")
        .and_then(|a| a.pointer("/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution"))
        .and_then(|s| serde_json::from_value::<NodeSelector>(s.clone()).ok());
    let name = node.metadata.name.as_deref().unwrap_or_default();
    let affine = required.is_none_or(|s| node_selector::matches(&s, NodeView { name, labels }));
    if !selected || !affine {
        return Err(Rejection::unresolvable(
            "node(s) didn't match Pod's node affinity/selector",
        ));
    }

    // NodeResourcesFit, as far as the node declares what it has.
    if let Some(allocatable) = node.status.as_ref().and_then(|s| s.allocatable.as_ref()) {
        let used = usage.cloned().unwrap_or_default();
        let mut reasons = Vec::new();
        // From 1.34 (kubernetes/kubernetes#131345), a request over what the node has in
        // all (`InsufficientResource.Unresolvable`) makes the node
        // `UnschedulableAndUnresolvable`: even an empty node would not take the pod, so
        // preemption is not tried there. Before, every shortage was `Unschedulable`.
        let mut over_allocatable = false;
        if let Some(pods) = allocatable.get("pods").and_then(|q| parse_quantity(&q.0))
            && used.pods + 1 > pods / NANO
        {
            reasons.push("Too many pods".to_owned());
        }
        for (resource, wanted) in pod_requests(pod) {
            if wanted == 0 {
                continue;
            }
            let has = allocatable
                .get(&resource)
                .and_then(|q| parse_quantity(&q.0))
                .unwrap_or(0);
            let taken = used.requested.get(&resource).copied().unwrap_or(0);
            if taken + wanted > has {
                reasons.push(format!("Insufficient {resource}"));
                over_allocatable |= wanted > has;
            }
        }
        if !reasons.is_empty() {
            return Err(Rejection {
                reasons,
                resolvable: !(over_allocatable && version >= (1, 34)),
            });
        }
    }
    Ok(())
}

/// `Toleration.ToleratesTaint` (k8s.io/api core/v1 toleration.go): the effect and key
/// match when given, then `Exists`, or `Equal` (the default) with the same value.
pub fn tolerated(taint: &Taint, tolerations: &[Value]) -> bool {
    tolerations.iter().any(|t| {
        let text = |k: &str| t.get(k).and_then(Value::as_str).unwrap_or_default();
        let effect = text("effect");
        let key = text("key");
        if (!effect.is_empty() && effect != taint.effect) || (!key.is_empty() && key != taint.key) {
            return false;
        }
        match text("operator") {
            "" | "Equal" => text("value") == taint.value.as_deref().unwrap_or_default(),
            "Exists" => true,
            _ => false,
        }
    })
}

/// Nano-units per unit.
const NANO: i128 = 1_000_000_000;

/// What the pod requests (`resource.PodRequests`): its containers' requests summed, or
/// the largest init container's where that is more, plus `overhead`. A resource with a
/// limit and no request requests its limit, as API defaulting makes it.
pub fn pod_requests(pod: &DraPod) -> BTreeMap<String, i128> {
    let of = |c: &fake_dra_api::upstream::pod::ClassicContainer| {
        let extra = c.resources.as_ref().map(|r| &r.extra);
        let map = |k: &str| extra.and_then(|e| e.get(k)).and_then(Value::as_object);
        let mut out: BTreeMap<String, i128> = BTreeMap::new();
        for (resource, q) in map("limits").into_iter().flatten() {
            if let Some(n) = q.as_str().and_then(parse_quantity) {
                out.insert(resource.clone(), n);
            }
        }
        for (resource, q) in map("requests").into_iter().flatten() {
            if let Some(n) = q.as_str().and_then(parse_quantity) {
                out.insert(resource.clone(), n);
            }
        }
        out
    };
    let spec = pod.spec.as_ref();
    let mut total: BTreeMap<String, i128> = BTreeMap::new();
    for c in spec.map(|s| s.containers.as_slice()).unwrap_or_default() {
        for (r, n) in of(c) {
            *total.entry(r).or_default() += n;
        }
    }
    for c in spec
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or_default()
    {
        for (r, n) in of(c) {
            let t = total.entry(r).or_default();
            *t = (*t).max(n);
        }
    }
    let overhead = spec
        .and_then(|s| s.extra.get("overhead"))
        .and_then(Value::as_object);
    for (r, q) in overhead.into_iter().flatten() {
        if let Some(n) = q.as_str().and_then(parse_quantity) {
            *total.entry(r.clone()).or_default() += n;
        }
    }
    total
}

/// A Kubernetes quantity (`500m`, `2`, `1.5Gi`, `1e3`) in nano-units; `None` if it is
/// none or too large.
pub fn parse_quantity(text: &str) -> Option<i128> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let negative = whole.starts_with('-');
    let whole = whole.trim_start_matches(['+', '-']);
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    let digits = |s: &str| -> Option<i128> {
        if s.is_empty() {
            Some(0)
        } else if s.bytes().all(|b| b.is_ascii_digit()) && s.len() <= 30 {
            s.parse().ok()
        } else {
            None
        }
    };
    if !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // The fraction to nano-units, nine digits at most.
    let fraction_nanos = {
        let cut = &fraction[..fraction.len().min(9)];
        digits(cut)?.checked_mul(10i128.checked_pow(9 - cut.len() as u32)?)?
    };
    let base = digits(whole)?
        .checked_mul(NANO)?
        .checked_add(fraction_nanos)?;
    let (numerator, denominator): (i128, i128) = match suffix {
        "" => (1, 1),
        "n" => (1, NANO),
        "u" => (1, 1_000_000),
        "m" => (1, 1_000),
        "k" => (1_000, 1),
        "M" => (1_000_000, 1),
        "G" => (NANO, 1),
        "T" => (1_000_000_000_000, 1),
        "P" => (1_000_000_000_000_000, 1),
        "E" => (1_000_000_000_000_000_000, 1),
        "Ki" => (1 << 10, 1),
        "Mi" => (1 << 20, 1),
        "Gi" => (1 << 30, 1),
        "Ti" => (1 << 40, 1),
        "Pi" => (1 << 50, 1),
        "Ei" => (1 << 60, 1),
        exponent => {
            let power: i32 = exponent.strip_prefix(['e', 'E'])?.parse().ok()?;
            let scale = 10i128.checked_pow(power.unsigned_abs())?;
            if power < 0 { (1, scale) } else { (scale, 1) }
        }
    };
    let value = base.checked_mul(numerator)? / denominator;
    Some(if negative { -value } else { value })
}

/// kube-scheduler's `FitError` message for a pod no node fits: the nodes' reasons as a
/// sorted histogram, then the PostFilter plugins' messages: DynamicResources' (`dra`,
/// when it has one) and DefaultPreemption's, which finds no victim on a node a resolvable
/// reason rejected (the emulator does not preempt) and calls preemption not helpful on
/// the others (`preemption.Evaluator`, `default_preemption.go`).
pub fn fit_error(
    nodes: usize,
    reasons: &BTreeMap<String, usize>,
    resolvable_nodes: usize,
    dra: Option<&str>,
) -> String {
    if nodes == 0 {
        // ErrNoNodesAvailable (schedule_one.go).
        return "no nodes available to schedule pods".to_owned();
    }
    let mut histogram: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
    histogram.sort();
    let mut preemption = Vec::new();
    if resolvable_nodes > 0 {
        preemption.push(format!(
            "{resolvable_nodes} No preemption victims found for incoming pod"
        ));
    }
    let unresolvable = nodes.saturating_sub(resolvable_nodes);
    if unresolvable > 0 {
        preemption.push(format!(
            "{unresolvable} Preemption is not helpful for scheduling"
        ));
    }
    preemption.sort();
    let mut post_filter: Vec<String> = dra.map(str::to_owned).into_iter().collect();
    post_filter.push(format!(
        "preemption: 0/{nodes} nodes are available: {}.",
        preemption.join(", ")
    ));
    format!(
        "0/{nodes} nodes are available: {}. {}",
        histogram.join(", "),
        post_filter.join(", ")
    )
}

/// DynamicResources' PostFilter message for a pod without claims: "no new claims to
/// deallocate" up to 1.36; 1.37 returns its status without a message.
pub fn dra_message_without_claims(version: (u32, u32)) -> Option<&'static str> {
    (version < (1, 37)).then_some("no new claims to deallocate")
}

/// Sets the pod's `PodScheduled` condition to False with `reason: Unschedulable` and the
/// message, as kube-scheduler's failure handler does (`updatePod`), keeping its other
/// conditions. No resourceVersion precondition: nothing else writes the status of a pod
/// no node has taken, and a stale one would leave the condition unset until the message
/// changed.
pub async fn mark_unschedulable(
    client: &kube::Client,
    pod: &DraPod,
    message: &str,
) -> Result<(), kube::Error> {
    let (Some(namespace), Some(name)) = (
        pod.metadata.namespace.as_deref(),
        pod.metadata.name.as_deref(),
    ) else {
        return Ok(());
    };
    let mut conditions: Vec<Value> = pod
        .status
        .as_ref()
        .and_then(|s| s.extra.get("conditions"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let condition = serde_json::json!({
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": message, "lastProbeTime": null, "lastTransitionTime": now,
    });
    match conditions
        .iter_mut()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("PodScheduled"))
    {
        Some(existing) => {
            let same = existing.get("status").and_then(Value::as_str) == Some("False")
                && existing.get("message").and_then(Value::as_str) == Some(message);
            if same {
                return Ok(());
            }
            *existing = condition;
        }
        None => conditions.push(condition),
    }
    let patch = serde_json::json!({"status": {"conditions": conditions}});
    kube::Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), namespace)
        .patch_status(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .map(drop)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: Value) -> DraPod {
        let mut spec = spec;
        spec["containers"] = spec
            .get("containers")
            .cloned()
            .unwrap_or(json!([{"name": "c"}]));
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap()
    }

    fn node(value: Value) -> Node {
        let mut value = value;
        value["metadata"]["name"] = json!("n");
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn quantities_read_as_kubernetes_writes_them() {
        assert_eq!(parse_quantity("2"), Some(2 * NANO));
        assert_eq!(parse_quantity("500m"), Some(NANO / 2));
        assert_eq!(parse_quantity("1.5"), Some(3 * NANO / 2));
        assert_eq!(parse_quantity("1Ki"), Some(1024 * NANO));
        assert_eq!(parse_quantity("256Gi"), Some(256 * (1 << 30) * NANO));
        assert_eq!(parse_quantity("1e3"), Some(1000 * NANO));
        assert_eq!(parse_quantity("lots"), None);
        assert_eq!(parse_quantity(""), None);
        assert_eq!(parse_quantity("9".repeat(40).as_str()), None);
    }

    #[test]
    fn tolerations_as_upstream_matches_them() {
        let taint = Taint {
            key: "k".into(),
            value: Some("v".into()),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        let yes = |t: Value| tolerated(&taint, &[t]);
        assert!(yes(json!({"key": "k", "value": "v"})));
        assert!(yes(json!({"key": "k", "operator": "Exists"})));
        assert!(yes(json!({"operator": "Exists"})));
        assert!(yes(json!({"value": "v", "effect": "NoSchedule"})));
        assert!(!yes(json!({"key": "k", "value": "w"})));
        assert!(!yes(
            json!({"key": "k", "operator": "Exists", "effect": "NoExecute"})
        ));
        assert!(!yes(json!({"key": "other", "operator": "Exists"})));
    }

    #[test]
    fn each_filter_gives_its_plugins_words() {
        let v = (1, 34);
        let plain = pod(json!({}));
        let cordoned = node(json!({"spec": {"unschedulable": true}}));
        assert_eq!(
            filter(&plain, &cordoned, None, v).unwrap_err().reasons,
            ["node(s) were unschedulable"]
        );
        let tolerant = pod(
            json!({"tolerations": [{"key": UNSCHEDULABLE_TAINT, "operator": "Exists", "effect": "NoSchedule"}]}),
        );
        assert_eq!(filter(&tolerant, &cordoned, None, v), Ok(()));
        let tainted = node(json!({"spec": {"taints": [
            {"key": "soft", "effect": "PreferNoSchedule"},
            {"key": "fleet", "value": "true", "effect": "NoSchedule"}]}}));
        assert_eq!(
            filter(&plain, &tainted, None, (1, 30)).unwrap_err().reasons,
            ["node(s) had untolerated taint {fleet: true}"]
        );
        assert_eq!(
            filter(&plain, &tainted, None, v).unwrap_err().reasons,
            ["node(s) had untolerated taint(s)"]
        );
        let labelled = node(json!({"metadata": {"labels": {"gpu": "yes", "gen": "7"}}}));
        for (spec, fits) in [
            (json!({"nodeSelector": {"gpu": "yes"}}), true),
            (json!({"nodeSelector": {"gpu": "no"}}), false),
            (
                json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["5"]}]}]}}}}),
                true,
            ),
            (
                json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["other"]}]}]}}}}),
                false,
            ),
        ] {
            let result = filter(&pod(spec.clone()), &labelled, None, v);
            assert_eq!(result.is_ok(), fits, "{spec}");
            if !fits {
                assert_eq!(
                    result.unwrap_err().reasons,
                    ["node(s) didn't match Pod's node affinity/selector"]
                );
            }
        }
        let small =
            node(json!({"status": {"allocatable": {"cpu": "2", "memory": "1Gi", "pods": "1"}}}));
        let hungry = pod(
            json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "1500m"}, "limits": {"memory": "2Gi"}}}]}),
        );
        let mut used = NodeUsage::default();
        used.add(&pod(
            json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}),
        ));
        let rejection = filter(&hungry, &small, Some(&used), v).unwrap_err();
        // 2Gi of memory is more than the node has in all: unresolvable from 1.34.
        assert!(!rejection.resolvable);
        assert!(
            filter(&hungry, &small, Some(&used), (1, 33))
                .unwrap_err()
                .resolvable
        );
        assert_eq!(
            rejection.reasons,
            ["Too many pods", "Insufficient cpu", "Insufficient memory"]
        );
        let short = pod(
            json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "1500m"}}}]}),
        );
        let roomy =
            node(json!({"status": {"allocatable": {"cpu": "2", "memory": "1Gi", "pods": "9"}}}));
        let rejection = filter(&short, &roomy, Some(&used), v).unwrap_err();
        assert!(rejection.resolvable, "1.5 of 2 cpu: preemption could help");
        assert_eq!(filter(&hungry, &node(json!({})), Some(&used), v), Ok(()));
    }

    #[test]
    fn schedulers_are_told_apart_by_name() {
        assert!(is_ours(&pod(json!({}))));
        assert!(is_ours(&pod(json!({"schedulerName": "default-scheduler"}))));
        assert!(!is_ours(&pod(json!({"schedulerName": "my-scheduler"}))));
    }

    #[test]
    fn the_fit_error_reads_as_kube_schedulers() {
        let reasons = BTreeMap::from([
            ("node(s) had untolerated taint(s)".to_owned(), 1),
            ("Insufficient cpu".to_owned(), 1),
        ]);
        assert_eq!(
            fit_error(2, &reasons, 1, Some("no new claims to deallocate")),
            "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint(s). no new claims to deallocate, preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, 1 Preemption is not helpful for scheduling."
        );
        let reasons = BTreeMap::from([(
            "node(s) didn't match Pod's node affinity/selector".to_owned(),
            2,
        )]);
        assert_eq!(
            fit_error(2, &reasons, 0, None),
            "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
        );
    }
}
