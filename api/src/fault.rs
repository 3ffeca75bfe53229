//! `DeviceFault`: failures and device behaviour on demand, through the API. A cluster-scoped
//! object names nodes, devices and claims, and what should happen to them; every kubelet
//! plugin (and fleet mode) watches the faults and applies those that select its nodes:
//!
//! - `taint`: the devices are published with a device taint (`NoSchedule`, `NoExecute`,
//!   `None`), or (`via: Rule`) DeviceTaintRules taint them, so the scheduler keeps new
//!   claims off them and (NoExecute) the device taint eviction controller evicts the pods
//!   using them;
//! - `health`: the plugin reports the devices so on the kubelet's health stream
//!   (`DRAResourceHealth`), which shows in the pods' `allocatedResourcesStatus`;
//! - `prepare`, `unprepare`: the kubelet's calls for matching claims fail, hang, or take
//!   longer;
//! - `getInfo`: the registration call fails, so the kubelet cannot register the plugin;
//! - `binding`: the devices carry binding conditions; the scheduler waits in PreBind
//!   until the driver reports them, which it does (or fails, or never does) as asked;
//! - `deviceStatus`: conditions and data written into `status.devices` of the claims
//!   allocated the devices.
//!
//! Each plugin reports what it made of a fault in `status.nodes[]`, one entry per node,
//! written by server-side apply with a field manager per node.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Longest delay a `prepare`/`unprepare` fault may ask for: the kubelet gives up on a call
/// after 45 s (`defaultClientCallTimeout`), so longer is the same as `Hang`.
pub const MAX_DELAY_MILLIS: u32 = 600_000;

/// Longest wait before a binding outcome: the scheduler's default binding timeout.
pub const MAX_BINDING_AFTER_SECONDS: u32 = 600;

/// Most nodes, devices or claims one fault names.
pub const MAX_NAMES: usize = 256;

/// Failures and behaviour injected into the driver for the devices and claims it selects.
#[derive(CustomResource, Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
// clippy mistakes repeated `type_ = "string"` in the printcolumns for duplicate attributes.
#[allow(clippy::duplicated_attributes)]
#[kube(
    group = "fake.resource.3-shake.com",
    version = "v1alpha1",
    kind = "DeviceFault",
    plural = "devicefaults",
    shortname = "df",
    status = "DeviceFaultStatus",
    derive = "PartialEq",
    doc = "Failures and device behaviour injected into the fake-dra driver on the nodes, devices and claims it selects.",
    printcolumn(name = "Nodes", type_ = "string", json_path = ".spec.nodes"),
    printcolumn(name = "Devices", type_ = "string", json_path = ".spec.devices"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct DeviceFaultSpec {
    /// The nodes it applies to; empty: every node of the driver.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub nodes: Vec<String>,
    /// Device names in the nodes' pools (`fake-3`, `gpu-0`); empty: every device.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub devices: Vec<String>,
    /// The claims `prepare`/`unprepare` apply to; empty: every claim of the selected
    /// devices.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub claims: Vec<ClaimSelector>,
    /// A device taint on the selected devices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taint: Option<TaintSpec>,
    /// The health the plugin reports for the selected devices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthSpec>,
    /// What `NodePrepareResources` does for matching claims.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepare: Option<CallFault>,
    /// What `NodeUnprepareResources` does for matching claims.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unprepare: Option<CallFault>,
    /// Makes the registration `GetInfo` call fail on the selected nodes (devices and
    /// claims do not matter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub get_info: Option<GetInfoFault>,
    /// Binding conditions on the selected devices, and how they turn out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding: Option<BindingSpec>,
    /// Conditions and data written into `status.devices` of claims allocated the
    /// selected devices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_status: Option<DeviceStatusSpec>,
}

/// A claim by namespace and name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaimSelector {
    pub namespace: String,
    /// The claim's name; empty: every claim of the namespace.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}

/// `taint`: as a ResourceSlice device taint.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaintSpec {
    /// A label key, e.g. `fake.resource.3-shake.com/unhealthy`.
    #[schemars(length(min = 1, max = 316))]
    pub key: String,
    /// A label value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub value: Option<String>,
    /// `NoSchedule`, `NoExecute` or `None` (`None` needs Kubernetes 1.35+).
    pub effect: TaintEffectSpec,
    /// Where the taint is put: in the driver's ResourceSlices (default), or in
    /// DeviceTaintRules the plugin keeps (Kubernetes 1.37+).
    #[serde(default, skip_serializing_if = "TaintVia::is_slice")]
    pub via: TaintVia,
}

/// How a taint reaches the devices.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum TaintVia {
    /// Published with the devices in the driver's ResourceSlices.
    #[default]
    Slice,
    /// A DeviceTaintRule (`resource.k8s.io/v1`, Kubernetes 1.37+) per node's pool, or per
    /// device when the fault names devices; the slices stay as they are. This is how an
    /// administrator's tooling, or a driver such as Intel's Gaudi driver, taints devices.
    Rule,
}

impl TaintVia {
    fn is_slice(&self) -> bool {
        *self == TaintVia::Slice
    }
}

/// A device taint's effect.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum TaintEffectSpec {
    /// No new allocations without a toleration.
    #[default]
    NoSchedule,
    /// Also evicts the pods using the devices.
    NoExecute,
    /// Informational.
    None,
}

/// `health`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthSpec {
    pub status: HealthStatus,
    /// Shown next to the status (Kubernetes 1.36+, `ResourceHealthStatusMessage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub message: Option<String>,
}

/// A device's health as the kubelet's health API reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum HealthStatus {
    Healthy,
    #[default]
    Unhealthy,
    Unknown,
}

/// What a node call does.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CallFault {
    pub action: CallAction,
    /// `Delay`: how long, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 600000))]
    pub delay_millis: Option<u32>,
    /// `Fail`: the claim's error (a default names the fault).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub message: Option<String>,
}

/// `prepare.action`, `unprepare.action`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum CallAction {
    /// The claim gets an error; the kubelet retries.
    #[default]
    Fail,
    /// The call does not answer until the fault is removed or changed (the kubelet gives
    /// up after its call timeout and retries).
    Hang,
    /// The call answers after `delayMillis`.
    Delay,
}

/// `getInfo`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GetInfoFault {
    /// The error the call returns (a default names the fault).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub message: Option<String>,
}

/// `binding`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BindingSpec {
    /// `Ready`: the driver reports the binding condition `True`; `Fail`: it reports the
    /// failure condition `True`; `Timeout`: it reports nothing.
    pub outcome: BindingOutcome,
    /// Seconds after the allocation before the driver reports.
    #[serde(default)]
    #[schemars(range(min = 0, max = 600))]
    pub after_seconds: u32,
    /// `bindsToNode` on the devices.
    #[serde(default)]
    pub binds_to_node: bool,
}

/// How a binding turns out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum BindingOutcome {
    #[default]
    Ready,
    Fail,
    Timeout,
}

/// `deviceStatus`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeviceStatusSpec {
    /// Conditions of the device in the claim (at most 8).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub conditions: Vec<DeviceConditionSpec>,
    /// Arbitrary driver data (`status.devices[].data`): a JSON object, at most 10 KiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_object")]
    pub data: Option<serde_json::Value>,
}

/// An object the API server keeps as it is (not pruned by the structural schema).
fn free_form_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// One condition of `deviceStatus`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeviceConditionSpec {
    /// The condition type, e.g. `Ready`.
    #[serde(rename = "type")]
    #[schemars(length(min = 1, max = 316))]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: ConditionStatus,
    /// A CamelCase reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32768))]
    pub message: Option<String>,
}

/// A condition's status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ConditionStatus {
    #[default]
    True,
    False,
    Unknown,
}

impl ConditionStatus {
    /// The API's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::True => "True",
            Self::False => "False",
            Self::Unknown => "Unknown",
        }
    }
}

/// What each node's plugin made of the fault.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeviceFaultStatus {
    /// One entry per node that applies the fault, written by that node's plugin.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["node"]))]
    pub nodes: Vec<NodeFaultStatus>,
}

/// One node's report.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeFaultStatus {
    pub node: String,
    /// The `metadata.generation` this report is about.
    #[serde(default)]
    pub observed_generation: i64,
    /// The node's devices it applies to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<String>,
    /// The effects in force on this node (`taint`, `health`, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub effects: Vec<String>,
    /// What could not be applied, and why: unknown devices, conflicts with other faults,
    /// limits.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
}

/// Why a fault's spec cannot be applied as it is; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("spec{}{field}: {reason}", if field.is_empty() { "" } else { "." })]
pub struct FaultSpecError {
    pub field: String,
    pub reason: String,
}

impl DeviceFaultSpec {
    /// Checks what the schema cannot (or what a cluster with an older CRD let through):
    /// at least one effect, a delay only with `Delay`, the limits, a taint's key and value
    /// spelled as a label's.
    pub fn validate(&self) -> Result<(), FaultSpecError> {
        let err = |field: &str, reason: String| FaultSpecError {
            field: field.to_owned(),
            reason,
        };
        let has_effect = self.taint.is_some()
            || self.health.is_some()
            || self.prepare.is_some()
            || self.unprepare.is_some()
            || self.get_info.is_some()
            || self.binding.is_some()
            || self.device_status.is_some();
        if !has_effect {
            return Err(err(
                "",
                "names no effect: set one of taint, health, prepare, unprepare, getInfo, binding, deviceStatus".into(),
            ));
        }
        for (field, list) in [
            ("nodes", self.nodes.len()),
            ("devices", self.devices.len()),
            ("claims", self.claims.len()),
        ] {
            if list > MAX_NAMES {
                return Err(err(
                    field,
                    format!("names {list} entries, at most {MAX_NAMES}"),
                ));
            }
        }
        for (field, call) in [("prepare", &self.prepare), ("unprepare", &self.unprepare)] {
            let Some(call) = call else { continue };
            match (call.action, call.delay_millis) {
                (CallAction::Delay, None) => {
                    return Err(err(
                        &format!("{field}.delayMillis"),
                        "is required with action Delay".into(),
                    ));
                }
                (CallAction::Delay, Some(ms)) if ms == 0 || ms > MAX_DELAY_MILLIS => {
                    return Err(err(
                        &format!("{field}.delayMillis"),
                        format!("must be between 1 and {MAX_DELAY_MILLIS}, got {ms}"),
                    ));
                }
                (CallAction::Fail | CallAction::Hang, Some(_)) => {
                    return Err(err(
                        &format!("{field}.delayMillis"),
                        "is only for action Delay".into(),
                    ));
                }
                _ => {}
            }
        }
        // A taint the API server would refuse would fail the whole slice write.
        if let Some(t) = &self.taint {
            crate::names::qualified_name(&t.key).map_err(|r| err("taint.key", r))?;
            if let Some(v) = &t.value {
                crate::names::label_value(v).map_err(|r| err("taint.value", r))?;
            }
        }
        if let Some(b) = &self.binding
            && b.after_seconds > MAX_BINDING_AFTER_SECONDS
        {
            return Err(err(
                "binding.afterSeconds",
                format!(
                    "must be at most {MAX_BINDING_AFTER_SECONDS}, got {}",
                    b.after_seconds
                ),
            ));
        }
        if let Some(s) = &self.device_status {
            if s.conditions.len() > 8 {
                return Err(err(
                    "deviceStatus.conditions",
                    format!("has {} entries, at most 8", s.conditions.len()),
                ));
            }
            if let Some(data) = &s.data {
                let len = serde_json::to_vec(data).map(|v| v.len()).unwrap_or(0);
                if len > 10 * 1024 {
                    return Err(err(
                        "deviceStatus.data",
                        format!("is {len} bytes as JSON, at most 10240"),
                    ));
                }
            }
        }
        if self.claims.iter().any(|c| c.namespace.is_empty()) {
            return Err(err("claims", "every entry needs a namespace".into()));
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_needs_an_effect_and_consistent_calls() {
        let none = DeviceFaultSpec::default();
        assert!(
            none.validate()
                .unwrap_err()
                .to_string()
                .contains("names no effect")
        );
        let mut delay = DeviceFaultSpec {
            prepare: Some(CallFault {
                action: CallAction::Delay,
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            delay.validate().unwrap_err().to_string(),
            "spec.prepare.delayMillis: is required with action Delay"
        );
        delay.prepare.as_mut().unwrap().delay_millis = Some(700_000);
        assert!(
            delay
                .validate()
                .unwrap_err()
                .to_string()
                .contains("between 1 and 600000")
        );
        delay.prepare.as_mut().unwrap().delay_millis = Some(500);
        assert_eq!(delay.validate(), Ok(()));
        let fail_with_delay = DeviceFaultSpec {
            unprepare: Some(CallFault {
                action: CallAction::Fail,
                delay_millis: Some(5),
                message: None,
            }),
            ..Default::default()
        };
        assert!(
            fail_with_delay
                .validate()
                .unwrap_err()
                .to_string()
                .contains("only for action Delay")
        );
        let claimless = DeviceFaultSpec {
            claims: vec![ClaimSelector::default()],
            get_info: Some(GetInfoFault::default()),
            ..Default::default()
        };
        assert!(
            claimless
                .validate()
                .unwrap_err()
                .to_string()
                .contains("namespace")
        );
    }

    #[test]
    fn a_taint_is_spelled_as_a_label() {
        let tainted = |key: &str, value: Option<&str>| DeviceFaultSpec {
            taint: Some(TaintSpec {
                key: key.into(),
                value: value.map(Into::into),
                effect: TaintEffectSpec::NoSchedule,
                via: Default::default(),
            }),
            ..Default::default()
        };
        assert_eq!(tainted("example.com/rack", Some("7")).validate(), Ok(()));
        assert_eq!(tainted("rack", Some("")).validate(), Ok(()));
        let err = tainted("!!bad key!!", None).validate().unwrap_err();
        assert_eq!(err.field, "taint.key");
        assert!(
            err.to_string()
                .starts_with("spec.taint.key: \"!!bad key!!\" is not a qualified name: "),
            "{err}"
        );
        let err = tainted("rack", Some("seven and a half"))
            .validate()
            .unwrap_err();
        assert_eq!(err.field, "taint.value");
        assert!(err.to_string().contains("is not a label value"), "{err}");
        assert!(
            tainted("rack", Some(&"v".repeat(64)))
                .validate()
                .unwrap_err()
                .to_string()
                .contains("at most 63")
        );
    }

    #[test]
    fn the_crd_has_a_status_map_keyed_by_node() {
        use kube::CustomResourceExt;
        let crd = serde_json::to_value(DeviceFault::crd()).unwrap();
        let version = &crd["spec"]["versions"][0];
        assert_eq!(crd["spec"]["scope"], "Cluster");
        assert!(version["subresources"]["status"].is_object());
        let nodes =
            &version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["nodes"];
        assert_eq!(nodes["x-kubernetes-list-type"], "map");
        assert_eq!(
            nodes["x-kubernetes-list-map-keys"],
            serde_json::json!(["node"])
        );
    }
}
