//! A DRA world: nodes with their devices, DeviceClasses, and pods with claims, in a form
//! the generator writes, the shrinker cuts down, the checker judges directly, and
//! [`World::objects`] renders as the Kubernetes objects every oracle is given.
//!
//! Selectors are [`Pred`]icates: rendered as CEL for the schedulers, evaluated here by the
//! checker from their meaning, so the checker shares no CEL engine with an oracle.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The driver of every generated device.
pub const DRIVER: &str = "diff.example.com";
/// The namespace of the pods and claims of an untagged world.
pub const NAMESPACE: &str = "differential";
/// The namespace label that allows admin access (k8s.io/api resource/v1
/// `DRAAdminNamespaceLabelKey`).
pub const ADMIN_NAMESPACE_LABEL: &str = "resource.kubernetes.io/admin-access";
/// The node label a tagged world's nodes carry and its pods select: worlds share a
/// cluster without a pod of one being placed on a node of another.
pub const WORLD_LABEL: &str = "differential.fake-dra.dev/world";

/// A whole world, as the generator made it (or the shrinker left it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct World {
    /// The seed it came from, for the report.
    pub seed: u64,
    /// Set by [`World::tagged`] for a shared cluster: the namespace, the node label and
    /// the pods' node selector; empty for a world alone in its cluster.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tag: String,
    pub nodes: Vec<NodeSpec>,
    pub classes: Vec<ClassSpec>,
    /// Created, and scheduled, one after the other in this order.
    pub pods: Vec<PodSpec>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeSpec {
    pub name: String,
    /// Published in one ResourceSlice, pool = the node's name.
    pub devices: Vec<DeviceSpec>,
    /// The counter [`COUNTER`] of the pool's one counter set [`COUNTER_SET`]
    /// (DRAPartitionableDevices), published in a slice of its own: the API allows only
    /// one of `devices` and `sharedCounters` in a slice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counter: Option<i64>,
}

/// The name of the counter set of a node that has one, and of its one counter.
pub const COUNTER_SET: &str = "slots";
pub const COUNTER: &str = "slots";

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceSpec {
    pub name: String,
    /// By attribute name (in the driver's domain).
    pub attributes: BTreeMap<String, Attr>,
    /// By capacity name, as integer quantities.
    pub capacity: BTreeMap<String, i64>,
    pub taints: Vec<Taint>,
    /// `allowMultipleAllocations` with a consumable capacity (DRAConsumableCapacity):
    /// requests take shares of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared: Option<Shared>,
    /// How much of its node's [`COUNTER`] the device takes while allocated
    /// (`consumesCounters`); only on a node with a counter set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumes: Option<i64>,
}

/// The consumable capacity [`SHARED_CAPACITY`] of a device that allows multiple
/// allocations, and its request policy: `default`, `validRange: {min, step}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shared {
    pub value: i64,
    pub default: i64,
    pub min: i64,
    pub step: i64,
}

/// The name of a shared device's consumable capacity.
pub const SHARED_CAPACITY: &str = "mem";

/// A device attribute's value.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Attr {
    Int(i64),
    Str(String),
    Bool(bool),
    /// major, minor, patch.
    Version(u32, u32, u32),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Taint {
    pub key: String,
    /// `NoSchedule` or `NoExecute` (both keep new allocations off) or `None`.
    pub effect: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClassSpec {
    pub name: String,
    pub selector: Option<Pred>,
}

/// A selector, from which its CEL is rendered. Written as a map with its `op` (YAML has no
/// nested tags), so a reproducer reads as the selector it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub enum Pred {
    /// The attribute is set.
    Has {
        attr: String,
    },
    /// An int attribute compared: false without it.
    IntCmp {
        attr: String,
        cmp: Cmp,
        value: i64,
    },
    /// A string attribute equal to the value: false without it.
    StrEq {
        attr: String,
        value: String,
    },
    /// A bool attribute that is true: false without it.
    IsTrue {
        attr: String,
    },
    /// A version attribute at least `major.minor.patch`: false without it.
    VersionAtLeast {
        attr: String,
        version: (u32, u32, u32),
    },
    /// A capacity of at least this many: false without it.
    CapacityAtLeast {
        capacity: String,
        value: i64,
    },
    And {
        a: Box<Pred>,
        b: Box<Pred>,
    },
    Or {
        a: Box<Pred>,
        b: Box<Pred>,
    },
    Not {
        a: Box<Pred>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Cmp {
    Lt,
    Le,
    Eq,
    Ge,
    Gt,
    Ne,
}

impl Cmp {
    fn symbol(self) -> &'static str {
        match self {
            Cmp::Lt => "<",
            Cmp::Le => "<=",
            Cmp::Eq => "==",
            Cmp::Ge => ">=",
            Cmp::Gt => ">",
            Cmp::Ne => "!=",
        }
    }

    pub fn holds(self, a: i64, b: i64) -> bool {
        match self {
            Cmp::Lt => a < b,
            Cmp::Le => a <= b,
            Cmp::Eq => a == b,
            Cmp::Ge => a >= b,
            Cmp::Gt => a > b,
            Cmp::Ne => a != b,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PodSpec {
    pub name: String,
    /// Each a standalone ResourceClaim `<pod>-<index>`.
    pub claims: Vec<ClaimSpec>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClaimSpec {
    pub requests: Vec<RequestSpec>,
    /// `matchAttribute` constraints: (attribute, the requests it binds; empty: all).
    pub match_attributes: Vec<(String, Vec<String>)>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestSpec {
    pub name: String,
    pub class: String,
    pub selector: Option<Pred>,
    pub mode: Mode,
    /// Taint keys tolerated (operator `Exists`, any effect).
    pub tolerations: Vec<String>,
    /// `capacity.requests` of [`SHARED_CAPACITY`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<i64>,
    /// `adminAccess` (an `exactly` request only: subrequests have no such field). Its
    /// devices "ignore all ordinary claims to the device with respect to access modes and
    /// any resource allocations" (k8s.io/api resource/v1 `ExactDeviceRequest`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub admin: bool,
    /// `firstAvailable`: subrequests, tried in order (DRAPrioritizedList). When set, the
    /// request is these and its own fields but `name` mean nothing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub first_available: Vec<RequestSpec>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Mode {
    /// `ExactCount` with this count.
    Count(u32),
    /// Every matching device of the node (at least one).
    All,
}

impl Default for Mode {
    fn default() -> Self {
        Mode::Count(1)
    }
}

fn attr_ref(name: &str) -> String {
    format!("device.attributes[\"{DRIVER}\"][\"{name}\"]")
}

fn has_attr(name: &str) -> String {
    format!("\"{name}\" in device.attributes[\"{DRIVER}\"]")
}

impl Pred {
    /// The CEL expression. Guards keep a missing attribute false, not an error (a
    /// runtime error fails scheduling of the whole pod, which is a different test).
    pub fn cel(&self) -> String {
        match self {
            Pred::Has { attr } => format!("({})", has_attr(attr)),
            Pred::IntCmp { attr, cmp, value } => format!(
                "({} && {} {} {value})",
                has_attr(attr),
                attr_ref(attr),
                cmp.symbol()
            ),
            Pred::StrEq { attr, value } => {
                format!("({} && {} == {value:?})", has_attr(attr), attr_ref(attr))
            }
            Pred::IsTrue { attr } => format!("({} && {} == true)", has_attr(attr), attr_ref(attr)),
            Pred::VersionAtLeast {
                attr,
                version: (x, y, z),
            } => format!(
                "({} && {}.compareTo(semver(\"{x}.{y}.{z}\")) >= 0)",
                has_attr(attr),
                attr_ref(attr)
            ),
            Pred::CapacityAtLeast { capacity, value } => format!(
                "(\"{capacity}\" in device.capacity[\"{DRIVER}\"] && device.capacity[\"{DRIVER}\"][\"{capacity}\"].compareTo(quantity(\"{value}\")) >= 0)"
            ),
            Pred::And { a, b } => format!("({} && {})", a.cel(), b.cel()),
            Pred::Or { a, b } => format!("({} || {})", a.cel(), b.cel()),
            Pred::Not { a } => format!("!{}", a.cel()),
        }
    }

    /// Whether `device` satisfies it: the checker's own reading of the rule.
    pub fn holds(&self, device: &DeviceSpec) -> bool {
        let get = |a: &str| device.attributes.get(a);
        match self {
            Pred::Has { attr } => get(attr).is_some(),
            Pred::IntCmp { attr, cmp, value } => {
                matches!(get(attr), Some(Attr::Int(x)) if cmp.holds(*x, *value))
            }
            Pred::StrEq { attr, value } => matches!(get(attr), Some(Attr::Str(x)) if x == value),
            Pred::IsTrue { attr } => matches!(get(attr), Some(Attr::Bool(true))),
            Pred::VersionAtLeast { attr, version } => {
                matches!(get(attr), Some(Attr::Version(x, y, z)) if (*x, *y, *z) >= *version)
            }
            Pred::CapacityAtLeast { capacity, value } => {
                device.capacity.get(capacity).is_some_and(|x| x >= value)
            }
            Pred::And { a, b } => a.holds(device) && b.holds(device),
            Pred::Or { a, b } => a.holds(device) || b.holds(device),
            Pred::Not { a } => !a.holds(device),
        }
    }
}

impl Attr {
    fn json(&self) -> Value {
        match self {
            Attr::Int(v) => json!({"int": v}),
            Attr::Str(v) => json!({"string": v}),
            Attr::Bool(v) => json!({"bool": v}),
            Attr::Version(x, y, z) => json!({"version": format!("{x}.{y}.{z}")}),
        }
    }
}

impl RequestSpec {
    /// What the request may be allocated as, in the order tried: its subrequests, or
    /// itself.
    pub fn alternatives(&self) -> &[RequestSpec] {
        if self.first_available.is_empty() {
            std::slice::from_ref(self)
        } else {
            &self.first_available
        }
    }

    /// The request of `requests` an allocation result names, and the alternative: a
    /// request `r` itself, or its subrequest `s` as `r/s` (the API's
    /// `DeviceRequestAllocationResult.request`).
    pub fn named<'a>(
        requests: &'a [RequestSpec],
        name: &str,
    ) -> Option<(&'a RequestSpec, &'a RequestSpec)> {
        let (parent, sub) = match name.split_once('/') {
            Some((parent, sub)) => (parent, Some(sub)),
            None => (name, None),
        };
        let request = requests.iter().find(|r| r.name == parent)?;
        match (sub, request.first_available.is_empty()) {
            (None, true) => Some((request, request)),
            (Some(sub), false) => request
                .first_available
                .iter()
                .find(|s| s.name == sub)
                .map(|s| (request, s)),
            _ => None,
        }
    }

    /// The `exactly` (or one subrequest's) body of the request in the API.
    fn exactly_json(&self) -> Value {
        let mut exactly = json!({"deviceClassName": self.class});
        match self.mode {
            Mode::Count(n) => {
                exactly["allocationMode"] = json!("ExactCount");
                exactly["count"] = json!(n);
            }
            Mode::All => exactly["allocationMode"] = json!("All"),
        }
        if let Some(p) = &self.selector {
            exactly["selectors"] = json!([{"cel": {"expression": p.cel()}}]);
        }
        if let Some(amount) = self.capacity {
            exactly["capacity"] = json!({"requests": {SHARED_CAPACITY: amount.to_string()}});
        }
        if self.admin {
            exactly["adminAccess"] = json!(true);
        }
        if !self.tolerations.is_empty() {
            exactly["tolerations"] = self
                .tolerations
                .iter()
                .map(|k| json!({"key": k, "operator": "Exists"}))
                .collect();
        }
        exactly
    }

    /// The request in the API: `exactly`, or `firstAvailable`.
    fn json(&self) -> Value {
        if self.first_available.is_empty() {
            return json!({"name": self.name, "exactly": self.exactly_json()});
        }
        let subrequests: Vec<Value> = self
            .first_available
            .iter()
            .map(|s| {
                let mut body = s.exactly_json();
                body["name"] = json!(s.name);
                body
            })
            .collect();
        json!({"name": self.name, "firstAvailable": subrequests})
    }

    /// What a share of `device` for this request takes of its capacity, read from the API's
    /// documentation of `CapacityRequestPolicyRange` (k8s.io/api resource/v1 `types.go`):
    /// no amount takes the default; one below `min` takes `min`; one between steps rounds
    /// up to `min + n·step`. `None` for a device that is not shared.
    pub fn share_of(&self, device: &DeviceSpec) -> Option<i64> {
        let shared = device.shared?;
        let asked = self.capacity.unwrap_or(shared.default);
        Some(if asked <= shared.min {
            shared.min
        } else {
            let above = asked - shared.min;
            shared.min + (above + shared.step - 1) / shared.step * shared.step
        })
    }

    /// Whether `device` may serve this request: it [`RequestSpec::selects`] it and every
    /// taint that keeps allocations off is tolerated.
    pub fn admits(&self, classes: &[ClassSpec], device: &DeviceSpec) -> bool {
        self.selects(classes, device) && self.tolerates(device)
    }

    /// Whether every taint of `device` that keeps new allocations off (`NoSchedule`,
    /// `NoExecute`) is tolerated.
    pub fn tolerates(&self, device: &DeviceSpec) -> bool {
        device
            .taints
            .iter()
            .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
            .all(|t| self.tolerations.contains(&t.key))
    }

    /// Whether `device` is one the request asks for: the class's and the request's
    /// selectors hold, and an amount of capacity asked for is one the device has (a share
    /// that fits it when alone). `All` asks for every such device of the node, and fails
    /// when one has a taint it does not tolerate ("All devices must be untainted or all of
    /// their taints must be tolerated", the DRA docs).
    pub fn selects(&self, classes: &[ClassSpec], device: &DeviceSpec) -> bool {
        let class_ok = classes
            .iter()
            .find(|c| c.name == self.class)
            .is_some_and(|c| c.selector.as_ref().is_none_or(|p| p.holds(device)));
        let own_ok = self.selector.as_ref().is_none_or(|p| p.holds(device));
        let capacity_ok = match (device.shared, self.share_of(device)) {
            (Some(shared), Some(share)) => share <= shared.value,
            _ => self.capacity.is_none(),
        };
        class_ok && own_ok && capacity_ok
    }
}

impl World {
    /// The world with its nodes, classes and pods renamed `<tag>-<name>`, in namespace
    /// `differential-<tag>`, its pods selecting its nodes: a world that can share a
    /// cluster with others (the real oracle's, whose objects outlive a world).
    pub fn tagged(&self, tag: &str) -> World {
        let name = |n: &str| format!("{tag}-{n}");
        let mut w = self.clone();
        w.tag = tag.to_owned();
        for node in &mut w.nodes {
            node.name = name(&node.name);
        }
        for class in &mut w.classes {
            class.name = name(&class.name);
        }
        for pod in &mut w.pods {
            pod.name = name(&pod.name);
            for request in pod.claims.iter_mut().flat_map(|c| &mut c.requests) {
                request.class = name(&request.class);
                for sub in &mut request.first_available {
                    sub.class = name(&sub.class);
                }
            }
        }
        w
    }

    /// The namespace of the pods and claims.
    pub fn namespace(&self) -> String {
        if self.tag.is_empty() {
            NAMESPACE.to_owned()
        } else {
            format!("{NAMESPACE}-{}", self.tag)
        }
    }

    /// The claim names of `pod`, in order.
    pub fn claim_names(pod: &PodSpec) -> Vec<String> {
        (0..pod.claims.len())
            .map(|i| format!("{}-{i}", pod.name))
            .collect()
    }

    /// Every object to create, in order: the namespace, the nodes, their slices, the
    /// classes; the pods' claims and pods come from [`World::pod_objects`], one pod at a
    /// time.
    pub fn objects(&self) -> Vec<Value> {
        let mut out = vec![
            // The label lets claims in it ask for admin access (`DRAAdminNamespaceLabelKey`).
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace(), "labels": {ADMIN_NAMESPACE_LABEL: "true"}}}),
        ];
        for node in &self.nodes {
            out.push(json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": node.name, "labels": {"kubernetes.io/hostname": node.name, WORLD_LABEL: self.tag}},
                "status": {
                    "capacity": {"cpu": "64", "memory": "256Gi", "pods": "110"},
                    "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "differential testing", "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}]
                }
            }));
        }
        for node in &self.nodes {
            let devices: Vec<Value> = node
                .devices
                .iter()
                .map(|d| {
                    let mut device = json!({"name": d.name});
                    if !d.attributes.is_empty() {
                        device["attributes"] = d
                            .attributes
                            .iter()
                            .map(|(k, v)| (k.clone(), v.json()))
                            .collect::<serde_json::Map<_, _>>()
                            .into();
                    }
                    if !d.capacity.is_empty() {
                        device["capacity"] = d
                            .capacity
                            .iter()
                            .map(|(k, v)| (k.clone(), json!({"value": v.to_string()})))
                            .collect::<serde_json::Map<_, _>>()
                            .into();
                    }
                    if let Some(shared) = d.shared {
                        device["allowMultipleAllocations"] = json!(true);
                        let capacity = device
                            .as_object_mut()
                            .and_then(|o| {
                                o.entry("capacity")
                                    .or_insert_with(|| json!({}))
                                    .as_object_mut()
                            });
                        if let Some(capacity) = capacity {
                            capacity.insert(
                                SHARED_CAPACITY.to_owned(),
                                json!({"value": shared.value.to_string(), "requestPolicy": {
                                    "default": shared.default.to_string(),
                                    "validRange": {"min": shared.min.to_string(), "step": shared.step.to_string()}
                                }}),
                            );
                        }
                    }
                    if let Some(amount) = d.consumes {
                        device["consumesCounters"] = json!([{
                            "counterSet": COUNTER_SET,
                            "counters": {COUNTER: {"value": amount.to_string()}}
                        }]);
                    }
                    if !d.taints.is_empty() {
                        device["taints"] = d
                            .taints
                            .iter()
                            .map(|t| json!({"key": t.key, "effect": t.effect}))
                            .collect();
                    }
                    device
                })
                .collect();
            // "Must not have more than 128 entries. If any device uses taints or consumes
            // counters the limit is 64" (ResourceSliceSpec.Devices).
            let per_slice = if node
                .devices
                .iter()
                .any(|d| d.consumes.is_some() || !d.taints.is_empty())
            {
                64
            } else {
                128
            };
            let chunks: Vec<&[Value]> = if devices.is_empty() {
                vec![&[]]
            } else {
                devices.chunks(per_slice).collect()
            };
            let slices = chunks.len() + usize::from(node.counter.is_some());
            let pool = json!({"name": node.name, "generation": 1, "resourceSliceCount": slices});
            for (i, chunk) in chunks.iter().enumerate() {
                let name = match i {
                    0 => format!("{}-{DRIVER}", node.name),
                    _ => format!("{}-{DRIVER}-{i}", node.name),
                };
                out.push(json!({
                    "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                    "metadata": {"name": name},
                    "spec": {"driver": DRIVER, "nodeName": node.name, "pool": pool, "devices": chunk}
                }));
            }
            if let Some(value) = node.counter {
                out.push(json!({
                    "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                    "metadata": {"name": format!("{}-{DRIVER}-counters", node.name)},
                    "spec": {
                        "driver": DRIVER, "nodeName": node.name, "pool": pool,
                        "sharedCounters": [{
                            "name": COUNTER_SET,
                            "counters": {COUNTER: {"value": value.to_string()}}
                        }]
                    }
                }));
            }
        }
        for class in &self.classes {
            let mut expression = format!("device.driver == \"{DRIVER}\"");
            if let Some(p) = &class.selector {
                expression = format!("{expression} && {}", p.cel());
            }
            out.push(json!({
                "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                "metadata": {"name": class.name},
                "spec": {"selectors": [{"cel": {"expression": expression}}]}
            }));
        }
        out
    }

    /// The claims of `pod`, then the pod.
    pub fn pod_objects(&self, pod: &PodSpec) -> Vec<Value> {
        let namespace = self.namespace();
        let names = Self::claim_names(pod);
        let mut out = Vec::new();
        for (claim, name) in pod.claims.iter().zip(&names) {
            let requests: Vec<Value> = claim.requests.iter().map(RequestSpec::json).collect();
            let mut devices = json!({"requests": requests});
            if !claim.match_attributes.is_empty() {
                devices["constraints"] = claim
                    .match_attributes
                    .iter()
                    .map(|(attr, requests)| {
                        let mut c = json!({"matchAttribute": format!("{DRIVER}/{attr}")});
                        if !requests.is_empty() {
                            c["requests"] = json!(requests);
                        }
                        c
                    })
                    .collect();
            }
            out.push(json!({
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"devices": devices}
            }));
        }
        let claims: Vec<Value> = names
            .iter()
            .enumerate()
            .map(|(i, n)| json!({"name": format!("c{i}"), "resourceClaimName": n}))
            .collect();
        let uses: Vec<Value> = (0..names.len())
            .map(|i| json!({"name": format!("c{i}")}))
            .collect();
        out.push(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod.name, "namespace": namespace},
            "spec": {
                "nodeSelector": {WORLD_LABEL: self.tag},
                "terminationGracePeriodSeconds": 0,
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "c", "image": "busybox:1.36", "command": ["sleep", "infinity"], "resources": {"claims": uses}}],
                "resourceClaims": claims
            }
        }));
        out
    }

    /// Every object, pods included, as one multi-document YAML (a reproducer).
    pub fn yaml(&self) -> String {
        let mut all = self.objects();
        for pod in &self.pods {
            all.extend(self.pod_objects(pod));
        }
        all.iter()
            .map(|o| serde_yaml_ng::to_string(o).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("---\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(attrs: &[(&str, Attr)]) -> DeviceSpec {
        DeviceSpec {
            name: "d".into(),
            attributes: attrs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_predicate_without_its_attribute_is_false_and_renders_guarded() {
        let p = Pred::IntCmp {
            attr: "mem".into(),
            cmp: Cmp::Ge,
            value: 8,
        };
        assert!(!p.holds(&device(&[])));
        assert!(!p.holds(&device(&[("mem", Attr::Str("8".into()))])));
        assert!(p.holds(&device(&[("mem", Attr::Int(8))])));
        assert_eq!(
            p.cel(),
            "(\"mem\" in device.attributes[\"diff.example.com\"] && device.attributes[\"diff.example.com\"][\"mem\"] >= 8)"
        );
        let v = Pred::VersionAtLeast {
            attr: "fw".into(),
            version: (1, 2, 0),
        };
        assert!(v.holds(&device(&[("fw", Attr::Version(1, 10, 0))])));
        assert!(!v.holds(&device(&[("fw", Attr::Version(1, 1, 9))])));
        assert!(Pred::Not { a: Box::new(p) }.holds(&device(&[])));
        assert_eq!(
            Pred::Not {
                a: Box::new(Pred::Has { attr: "x".into() })
            }
            .cel(),
            "!(\"x\" in device.attributes[\"diff.example.com\"])"
        );
    }

    #[test]
    fn an_untolerated_taint_keeps_a_device_out() {
        let classes = [ClassSpec {
            name: "c".into(),
            selector: None,
        }];
        let mut d = device(&[]);
        d.taints.push(Taint {
            key: "k".into(),
            effect: "NoSchedule".into(),
        });
        let mut r = RequestSpec {
            name: "r".into(),
            class: "c".into(),
            ..Default::default()
        };
        assert!(!r.admits(&classes, &d));
        r.tolerations.push("k".into());
        assert!(r.admits(&classes, &d));
        d.taints[0].effect = "None".into();
        r.tolerations.clear();
        assert!(r.admits(&classes, &d));
    }
}
