//! `DeviceFault`s as one node applies them, without I/O: which faults select the node,
//! what each device and claim gets, conflicts between faults, and the node's report for
//! each fault's status. The watch and the writes are [`watch`]; [`hook`] makes them the
//! library's fault hook.
//!
//! Faults apply in name order: where two set the same thing for a device or a claim (a
//! health status, a prepare action, binding, device status), the first by name wins and
//! the other reports the conflict. Taints add up (one per key and effect).

pub mod claim_status;
pub mod device_status;
pub mod hook;
pub mod rules;
pub mod watch;

use std::collections::BTreeSet;

use fake_dra_api::fault::{
    BindingSpec, CallAction, ClaimSelector, DeviceFaultSpec, DeviceStatusSpec, HealthStatus,
    NodeFaultStatus, TaintEffectSpec, TaintSpec, TaintVia,
};

use dra_kubelet_plugin::device::TaintRules;
use dra_kubelet_plugin::device::{BindingConditions, DeviceTaint, SliceDevice, TaintEffect};

/// Keeps this node's entries in the faults' status current: after every change of the
/// faults or of what the rule writer found, what [`NodeFaults::reports`] says. Never
/// returns on its own.
pub async fn report(
    client: kube::Client,
    view: watch::NodeView,
    taint_rules: TaintRules,
    mut rule_objects: tokio::sync::watch::Receiver<rules::RuleObjects>,
) {
    let mut writer = watch::StatusWriter::new(client, view.node());
    let mut changes = view.faults();
    loop {
        let faults: Vec<Fault> = changes.borrow_and_update().as_ref().clone();
        let served = *rule_objects.borrow_and_update();
        writer
            .write(&faults, &view.current().reports(taint_rules, served))
            .await;
        tokio::select! {
            changed = changes.changed() => if changed.is_err() { return },
            changed = rule_objects.changed() => if changed.is_err() { return },
        }
        tokio::time::sleep(watch::REPORT_DEBOUNCE).await;
    }
}

/// A `DeviceFault` as read from the API.
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`: the owner of the DeviceTaintRules a `via: Rule` taint makes.
    pub uid: String,
    /// `metadata.generation`.
    pub generation: i64,
    pub spec: DeviceFaultSpec,
}

/// What a node call does for a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallDecision {
    /// As usual.
    Proceed,
    /// Answer the claim with this error.
    Fail { fault: String, message: String },
    /// Answer after this long.
    Delay { fault: String, millis: u32 },
    /// Do not answer while the fault is there.
    Hang { fault: String },
}

/// The condition type the driver reports `True` when a device is attached (binding
/// `Ready`), as a qualified name in the driver's domain.
pub fn attached_condition(driver: &str) -> String {
    format!("{driver}/attached")
}

/// The condition type the driver reports `True` when attaching failed (binding `Fail`).
pub fn attach_failed_condition(driver: &str) -> String {
    format!("{driver}/attach-failed")
}

/// Which node a fault selects.
fn selects_node(spec: &DeviceFaultSpec, node: &str) -> bool {
    spec.nodes.is_empty() || spec.nodes.iter().any(|n| n == node)
}

fn selects_device(spec: &DeviceFaultSpec, device: &str) -> bool {
    spec.devices.is_empty() || spec.devices.iter().any(|d| d == device)
}

fn selects_claim(spec: &DeviceFaultSpec, namespace: &str, name: &str) -> bool {
    spec.claims.is_empty()
        || spec
            .claims
            .iter()
            .any(|c| c.namespace == namespace && (c.name.is_empty() || c.name == name))
}

/// Whether two claim selections can pick the same claim.
fn claims_overlap(a: &[ClaimSelector], b: &[ClaimSelector]) -> bool {
    a.is_empty()
        || b.is_empty()
        || a.iter().any(|x| {
            b.iter().any(|y| {
                x.namespace == y.namespace
                    && (x.name.is_empty() || y.name.is_empty() || x.name == y.name)
            })
        })
}

fn taint_effect(e: TaintEffectSpec) -> TaintEffect {
    match e {
        TaintEffectSpec::NoSchedule => TaintEffect::NoSchedule,
        TaintEffectSpec::NoExecute => TaintEffect::NoExecute,
        TaintEffectSpec::None => TaintEffect::None,
    }
}

/// A taint a fault puts on a node's devices through a DeviceTaintRule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RuleTaint<'a> {
    pub fault: &'a Fault,
    /// The device; `None`: every device of the node.
    pub device: Option<&'a str>,
    pub taint: &'a TaintSpec,
}

/// The faults in force on one node with its devices.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeFaults {
    node: String,
    devices: BTreeSet<String>,
    /// The valid faults selecting the node, in name order.
    active: Vec<Fault>,
    /// Faults selecting the node whose spec is invalid, with the reason.
    invalid: Vec<(Fault, String)>,
}

impl NodeFaults {
    /// The faults of `faults` that select `node`, whose devices are `devices`.
    pub fn resolve(node: &str, devices: &[String], faults: &[Fault]) -> Self {
        let mut selecting: Vec<&Fault> = faults
            .iter()
            .filter(|f| selects_node(&f.spec, node))
            .collect();
        selecting.sort_by(|a, b| a.name.cmp(&b.name));
        let mut active = Vec::new();
        let mut invalid = Vec::new();
        for f in selecting {
            match f.spec.validate() {
                Ok(()) => active.push(f.clone()),
                Err(e) => invalid.push((f.clone(), e.to_string())),
            }
        }
        Self {
            node: node.to_owned(),
            devices: devices.iter().cloned().collect(),
            active,
            invalid,
        }
    }

    /// Whether a fault asks for something in claims' `status.devices`.
    pub fn writes_claim_status(&self) -> bool {
        self.active
            .iter()
            .any(|f| f.spec.binding.is_some() || f.spec.device_status.is_some())
    }

    /// Whether no fault is in force.
    pub fn is_empty(&self) -> bool {
        self.active.is_empty()
    }

    fn on_device<'a>(&'a self, device: &'a str) -> impl Iterator<Item = &'a Fault> + 'a {
        self.active
            .iter()
            .filter(move |f| selects_device(&f.spec, device))
    }

    /// The node's name.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The taints faults put on this node's devices through DeviceTaintRules (`via:
    /// Rule`), in fault name order: `device` `None` for a fault that selects every device.
    pub fn rule_taints(&self) -> Vec<RuleTaint<'_>> {
        let mut out = Vec::new();
        for fault in &self.active {
            let Some(taint) = fault
                .spec
                .taint
                .as_ref()
                .filter(|t| t.via == TaintVia::Rule)
            else {
                continue;
            };
            if fault.spec.devices.is_empty() {
                out.push(RuleTaint {
                    fault,
                    device: None,
                    taint,
                });
            }
            for device in fault
                .spec
                .devices
                .iter()
                .filter(|d| self.devices.contains(*d))
            {
                out.push(RuleTaint {
                    fault,
                    device: Some(device),
                    taint,
                });
            }
        }
        out
    }

    /// The slice taints of `device`, at most `max` (the first faults' when there are more).
    pub fn taints(&self, device: &str, max: usize, rules: TaintRules) -> Vec<DeviceTaint> {
        let mut taints: Vec<DeviceTaint> = Vec::new();
        let slice_taints = self
            .on_device(device)
            .filter_map(|f| f.spec.taint.as_ref())
            .filter(|t| t.via == TaintVia::Slice);
        for t in slice_taints {
            let effect = taint_effect(t.effect);
            if rules.allows(effect)
                && !taints.iter().any(|x| x.key == t.key && x.effect == effect)
                && taints.len() < max
            {
                let mut taint = DeviceTaint::new(t.key.clone(), effect);
                taint.value = t.value.clone().filter(|v| !v.is_empty());
                taints.push(taint);
            }
        }
        taints
    }

    /// The health reported for `device`: the first fault's, else healthy.
    pub fn health(&self, device: &str) -> (HealthStatus, Option<String>) {
        self.on_device(device)
            .find_map(|f| f.spec.health.as_ref())
            .map_or((HealthStatus::Healthy, None), |h| {
                (h.status, h.message.clone())
            })
    }

    /// The binding of `device`: the first fault's, with its name.
    pub fn binding<'a>(&'a self, device: &'a str) -> Option<(&'a str, &'a BindingSpec)> {
        self.on_device(device)
            .find_map(|f| f.spec.binding.as_ref().map(|b| (f.name.as_str(), b)))
    }

    /// The device status written for `device`: the first fault's, with its name.
    pub fn device_status<'a>(&'a self, device: &'a str) -> Option<(&'a str, &'a DeviceStatusSpec)> {
        self.on_device(device)
            .find_map(|f| f.spec.device_status.as_ref().map(|s| (f.name.as_str(), s)))
    }

    /// The error `GetInfo` returns, if a fault makes it fail.
    pub fn get_info(&self) -> Option<String> {
        self.active.iter().find_map(|f| {
            f.spec.get_info.as_ref().map(|g| {
                g.message.clone().unwrap_or_else(|| {
                    format!(
                        "GetInfo fails on node {} by DeviceFault {}",
                        self.node, f.name
                    )
                })
            })
        })
    }

    fn call(
        &self,
        which: fn(&DeviceFaultSpec) -> Option<&fake_dra_api::fault::CallFault>,
        verb: &str,
        namespace: &str,
        name: &str,
        devices: &[String],
    ) -> CallDecision {
        let found = self.active.iter().find_map(|f| {
            let call = which(&f.spec)?;
            let device_match =
                f.spec.devices.is_empty() || devices.iter().any(|d| selects_device(&f.spec, d));
            (device_match && selects_claim(&f.spec, namespace, name)).then_some((f, call))
        });
        let Some((fault, call)) = found else {
            return CallDecision::Proceed;
        };
        let fault_name = fault.name.clone();
        match call.action {
            CallAction::Fail => CallDecision::Fail {
                message: call.message.clone().unwrap_or_else(|| {
                    format!("{verb} of claim {namespace}/{name} fails by DeviceFault {fault_name}")
                }),
                fault: fault_name,
            },
            CallAction::Delay => CallDecision::Delay {
                fault: fault_name,
                millis: call.delay_millis.unwrap_or(1),
            },
            CallAction::Hang => CallDecision::Hang { fault: fault_name },
        }
    }

    /// What `NodePrepareResources` does for the claim `namespace/name` allocated
    /// `devices` (names in the node's pool).
    pub fn prepare(&self, namespace: &str, name: &str, devices: &[String]) -> CallDecision {
        self.call(|s| s.prepare.as_ref(), "prepare", namespace, name, devices)
    }

    /// What `NodeUnprepareResources` does for the claim.
    pub fn unprepare(&self, namespace: &str, name: &str, devices: &[String]) -> CallDecision {
        self.call(
            |s| s.unprepare.as_ref(),
            "unprepare",
            namespace,
            name,
            devices,
        )
    }

    /// The node's devices as published with the faults: taints (as the serving release
    /// accepts them) and binding conditions.
    pub fn overlay(
        &self,
        devices: &[SliceDevice],
        driver: &str,
        rules: TaintRules,
    ) -> Vec<SliceDevice> {
        devices
            .iter()
            .map(|d| {
                let mut d = d.clone();
                for t in self.taints(
                    &d.name,
                    rules.max_per_device.saturating_sub(d.taints.len()),
                    rules,
                ) {
                    if !d
                        .taints
                        .iter()
                        .any(|x| x.key == t.key && x.effect == t.effect)
                    {
                        d.taints.push(t);
                    }
                }
                if let Some((_, b)) = self.binding(&d.name) {
                    d.binding = Some(
                        BindingConditions::new(
                            vec![attached_condition(driver)],
                            vec![attach_failed_condition(driver)],
                        )
                        .binds_to_node(b.binds_to_node),
                    );
                }
                d
            })
            .collect()
    }

    /// This node's entry for each fault selecting it (invalid ones included), for the
    /// faults' status: the devices it applies to, the effects in force, the problems.
    pub fn reports(
        &self,
        rules: TaintRules,
        rule_objects: rules::RuleObjects,
    ) -> Vec<(String, NodeFaultStatus)> {
        let mut out = Vec::new();
        for (f, reason) in &self.invalid {
            out.push((
                f.name.clone(),
                NodeFaultStatus {
                    node: self.node.clone(),
                    observed_generation: f.generation,
                    problems: vec![format!("not applied: {reason}")],
                    ..Default::default()
                },
            ));
        }
        for (i, f) in self.active.iter().enumerate() {
            let spec = &f.spec;
            let mut problems = Vec::new();
            let unknown: Vec<&String> = spec
                .devices
                .iter()
                .filter(|d| !self.devices.contains(*d))
                .collect();
            match unknown.as_slice() {
                [] => {}
                [d] => problems.push(format!(
                    "device {} is not a device of node {} ({})",
                    shown_name(d),
                    self.node,
                    summarize(&self.devices)
                )),
                many => problems.push(format!(
                    "devices {} are not devices of node {} ({})",
                    listed_names(many),
                    self.node,
                    summarize(&self.devices)
                )),
            }
            let devices: Vec<String> = self
                .devices
                .iter()
                .filter(|d| selects_device(spec, d))
                .cloned()
                .collect();
            let earlier = &self.active[..i];
            let shares_device =
                |other: &Fault| devices.iter().any(|d| selects_device(&other.spec, d));
            let mut conflict = |what: &str, other: Option<&Fault>| {
                if let Some(o) = other {
                    problems.push(format!(
                        "{what} is also set by DeviceFault {} for the same devices; {} applies (faults apply in name order)",
                        o.name, o.name
                    ));
                }
            };
            if let Some(h) = &spec.health {
                conflict(
                    "health",
                    earlier.iter().find(|o| {
                        shares_device(o)
                            && o.spec.health.as_ref().is_some_and(|x| x.status != h.status)
                    }),
                );
            }
            for (what, mine, theirs) in [
                (
                    "prepare",
                    spec.prepare.is_some(),
                    (|s: &DeviceFaultSpec| s.prepare.is_some()) as fn(&DeviceFaultSpec) -> bool,
                ),
                (
                    "unprepare",
                    spec.unprepare.is_some(),
                    |s: &DeviceFaultSpec| s.unprepare.is_some(),
                ),
            ] {
                if mine {
                    conflict(
                        what,
                        earlier.iter().find(|o| {
                            theirs(&o.spec)
                                && shares_device(o)
                                && claims_overlap(&spec.claims, &o.spec.claims)
                        }),
                    );
                }
            }
            if spec.get_info.is_some() {
                conflict(
                    "getInfo",
                    earlier.iter().find(|o| o.spec.get_info.is_some()),
                );
            }
            if spec.binding.is_some() {
                conflict(
                    "binding",
                    earlier
                        .iter()
                        .find(|o| o.spec.binding.is_some() && shares_device(o)),
                );
            }
            if spec.device_status.is_some() {
                conflict(
                    "deviceStatus",
                    earlier
                        .iter()
                        .find(|o| o.spec.device_status.is_some() && shares_device(o)),
                );
            }
            if let Some(t) = spec.taint.as_ref().filter(|t| t.via == TaintVia::Rule) {
                if rule_objects == rules::RuleObjects::NotServed {
                    problems.push(format!(
                        "taint {} not applied: this API server serves no DeviceTaintRules (resource.k8s.io/v1 devicetaintrules: Kubernetes 1.37 or later, where DRADeviceTaintRules is on by default)",
                        t.key
                    ));
                }
            } else if let Some(t) = &spec.taint
                && !rules.allows(taint_effect(t.effect))
            {
                problems.push(format!(
                    "taint {} not published: the effect None needs Kubernetes 1.35 or later (this release accepts only NoSchedule and NoExecute)",
                    t.key
                ));
            } else if let Some(t) = &spec.taint {
                let effect = taint_effect(t.effect);
                let max_taints = rules.max_per_device;
                let dropped: Vec<&String> = devices
                    .iter()
                    .filter(|d| {
                        !self
                            .taints(d, max_taints, rules)
                            .iter()
                            .any(|x| x.key == t.key && x.effect == effect)
                    })
                    .collect();
                if !dropped.is_empty() {
                    problems.push(format!(
                        "taint {} not published on {}: a device carries at most {max_taints} taints on this Kubernetes release",
                        t.key,
                        summarize(dropped)
                    ));
                }
            }
            let effects: Vec<String> = [
                ("taint", spec.taint.is_some()),
                ("health", spec.health.is_some()),
                ("prepare", spec.prepare.is_some()),
                ("unprepare", spec.unprepare.is_some()),
                ("getInfo", spec.get_info.is_some()),
                ("binding", spec.binding.is_some()),
                ("deviceStatus", spec.device_status.is_some()),
            ]
            .into_iter()
            .filter(|(_, on)| *on)
            .map(|(e, _)| e.to_owned())
            .collect();
            out.push((
                f.name.clone(),
                NodeFaultStatus {
                    node: self.node.clone(),
                    observed_generation: f.generation,
                    devices,
                    effects,
                    problems,
                },
            ));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }
}

/// Longest name (a device, a node, as a fault names it) shown in a status message.
pub const SHOWN_NAME_LEN: usize = 64;

/// Most names one status message lists.
pub const SHOWN_NAMES: usize = 10;

/// A name from a fault's spec, quoted and cut to [`SHOWN_NAME_LEN`] characters: a status
/// message never grows with what the fault says.
pub fn shown_name(name: &str) -> String {
    let cut: String = name.chars().take(SHOWN_NAME_LEN).collect();
    if cut.len() < name.len() {
        format!("{cut:?}...")
    } else {
        format!("{cut:?}")
    }
}

/// At most [`SHOWN_NAMES`] names as [`shown_name`] shows them, then `and N more`.
fn listed_names(names: &[&String]) -> String {
    let shown: Vec<String> = names
        .iter()
        .take(SHOWN_NAMES)
        .map(|n| shown_name(n))
        .collect();
    let rest = names.len() - shown.len();
    if rest > 0 {
        format!("{} and {rest} more", shown.join(", "))
    } else {
        shown.join(", ")
    }
}

/// `a, b, c` for a few names, `a, b, ... (n in all)` for many.
fn summarize<'a>(names: impl IntoIterator<Item = &'a String>) -> String {
    let names: Vec<&String> = names.into_iter().collect();
    if names.is_empty() {
        return "none".into();
    }
    let shown: Vec<String> = names
        .iter()
        .take(4)
        .map(|s| s.chars().take(SHOWN_NAME_LEN).collect())
        .collect();
    if names.len() > shown.len() {
        format!("{}, ... ({} in all)", shown.join(", "), names.len())
    } else {
        shown.join(", ")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
