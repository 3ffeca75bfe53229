//! The DRA feature gates of a default cluster of each release, and the fields
//! kube-apiserver drops on write while a gate is off.
//!
//! Defaults: `defaultVersionedKubernetesFeatureGates` in pkg/features/kube_features.go of
//! Kubernetes 1.33.13, 1.34.4, 1.35.4, 1.36.3 and 1.37.2 (a gate is on from the first
//! release whose entry has `Default: true`; `DRADeviceTaintRules`: alpha 1.35, beta and
//! off 1.36, GA and on 1.37). Dropping: the registry strategies'
//! `PrepareForCreate`/`PrepareForUpdate` (pkg/registry/resource/{resourceslice,
//! deviceclass,resourceclaim}/strategy.go and pkg/api/resourceclaimspec/util.go) remove a
//! disabled feature's fields from the object written, unless the stored object already
//! uses the feature; the write then succeeds without them, silently. The objects here are
//! in `resource.k8s.io/v1`'s layout (the emulator's storage layout).

use std::collections::BTreeMap;

use serde_json::Value;

/// The DRA feature gates of Kubernetes 1.37.2's `kube_features.go`. Those the emulator
/// models ([`Gate::modeled`]) change what it serves or does; the others it knows by name,
/// so that `--feature-gates` can say what it would take instead of "unrecognized".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Gate {
    /// `firstAvailable` (prioritized list of subrequests).
    PrioritizedList,
    /// `adminAccess` in requests.
    AdminAccess,
    /// `extendedResourceName` of DeviceClasses.
    ExtendedResource,
    /// `sharedCounters`, `consumesCounters`, per-device node selection.
    PartitionableDevices,
    /// `allowMultipleAllocations`, capacity request policies and requests.
    ConsumableCapacity,
    /// Device taints and tolerations.
    DeviceTaints,
    /// DeviceTaintRules: kube-scheduler applies their taints (the emulator serves the
    /// kind in `resource.k8s.io/v1` only, which 1.37 brought).
    DeviceTaintRules,
    /// `bindingConditions`, `bindingFailureConditions`, `bindsToNode`.
    DeviceBindingConditions,
    /// `status.devices` of claims.
    ResourceClaimDeviceStatus,
    /// The kubelet's device health stream and `allocatedResourcesStatus`.
    ResourceHealthStatus,
    /// Capacity ranges counted in milli-units (KEP-5075).
    FractionalCapacityRange,
    /// DRA itself. The emulated cluster always has it on: a 1.32 or 1.33 cluster is
    /// emulated as started with it on, as hack/local-cluster.sh starts the real one.
    DynamicResourceAllocation,
    // Known by name only: the emulator does nothing for them.
    DerivedAttributes,
    DeviceCompatibilityGroups,
    ListTypeAttributes,
    NodeAllocatableResources,
    OptionalNodeOperations,
    PartitionableDevicesType,
    ResourceClaimGranularStatusAuthorization,
    ResourcePoolStatus,
    SchedulerFilterTimeout,
    WorkloadResourceClaims,
    ResourceHealthStatusMessage,
    KubeletPodResourcesDynamicResources,
}

/// One entry of a gate's history: from Kubernetes 1.`since`, its default and whether it
/// is locked to it (`LockToDefault`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stage {
    pub since: u32,
    pub default: bool,
    pub locked: bool,
}

const fn stage(since: u32, default: bool) -> Stage {
    Stage {
        since,
        default,
        locked: false,
    }
}

const fn locked(since: u32) -> Stage {
    Stage {
        since,
        default: true,
        locked: true,
    }
}

impl Gate {
    pub const ALL: [Gate; 24] = [
        Gate::PrioritizedList,
        Gate::AdminAccess,
        Gate::ExtendedResource,
        Gate::PartitionableDevices,
        Gate::ConsumableCapacity,
        Gate::DeviceTaints,
        Gate::DeviceTaintRules,
        Gate::DeviceBindingConditions,
        Gate::ResourceClaimDeviceStatus,
        Gate::ResourceHealthStatus,
        Gate::FractionalCapacityRange,
        Gate::DynamicResourceAllocation,
        Gate::DerivedAttributes,
        Gate::DeviceCompatibilityGroups,
        Gate::ListTypeAttributes,
        Gate::NodeAllocatableResources,
        Gate::OptionalNodeOperations,
        Gate::PartitionableDevicesType,
        Gate::ResourceClaimGranularStatusAuthorization,
        Gate::ResourcePoolStatus,
        Gate::SchedulerFilterTimeout,
        Gate::WorkloadResourceClaims,
        Gate::ResourceHealthStatusMessage,
        Gate::KubeletPodResourcesDynamicResources,
    ];

    /// The gate's name, as `--feature-gates` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Gate::PrioritizedList => "DRAPrioritizedList",
            Gate::AdminAccess => "DRAAdminAccess",
            Gate::ExtendedResource => "DRAExtendedResource",
            Gate::PartitionableDevices => "DRAPartitionableDevices",
            Gate::ConsumableCapacity => "DRAConsumableCapacity",
            Gate::DeviceTaints => "DRADeviceTaints",
            Gate::DeviceTaintRules => "DRADeviceTaintRules",
            Gate::DeviceBindingConditions => "DRADeviceBindingConditions",
            Gate::ResourceClaimDeviceStatus => "DRAResourceClaimDeviceStatus",
            Gate::ResourceHealthStatus => "ResourceHealthStatus",
            Gate::FractionalCapacityRange => "DRAFractionalCapacityRange",
            Gate::DynamicResourceAllocation => "DynamicResourceAllocation",
            Gate::DerivedAttributes => "DRADerivedAttributes",
            Gate::DeviceCompatibilityGroups => "DRADeviceCompatibilityGroups",
            Gate::ListTypeAttributes => "DRAListTypeAttributes",
            Gate::NodeAllocatableResources => "DRANodeAllocatableResources",
            Gate::OptionalNodeOperations => "DRAOptionalNodeOperations",
            Gate::PartitionableDevicesType => "DRAPartitionableDevicesType",
            Gate::ResourceClaimGranularStatusAuthorization => {
                "DRAResourceClaimGranularStatusAuthorization"
            }
            Gate::ResourcePoolStatus => "DRAResourcePoolStatus",
            Gate::SchedulerFilterTimeout => "DRASchedulerFilterTimeout",
            Gate::WorkloadResourceClaims => "DRAWorkloadResourceClaims",
            Gate::ResourceHealthStatusMessage => "ResourceHealthStatusMessage",
            Gate::KubeletPodResourcesDynamicResources => "KubeletPodResourcesDynamicResources",
        }
    }

    /// The gate's history: `defaultVersionedKubernetesFeatureGates` of 1.37.2, entries
    /// that change neither the default nor the lock left out. `DRAFractionalCapacityRange`
    /// has two 1.37 entries; the one for the default minimum compatibility version (one
    /// release below the binary's), off, is the one a default cluster has.
    pub fn history(self) -> &'static [Stage] {
        match self {
            Gate::PrioritizedList => const { &[stage(33, false), stage(34, true), locked(37)] },
            Gate::AdminAccess => const { &[stage(32, false), stage(34, true), locked(36)] },
            Gate::ExtendedResource => const { &[stage(34, false), stage(36, true), locked(37)] },
            Gate::PartitionableDevices | Gate::DeviceTaints => {
                const { &[stage(33, false), stage(36, true)] }
            }
            Gate::ConsumableCapacity | Gate::DeviceBindingConditions => {
                const { &[stage(34, false), stage(36, true)] }
            }
            Gate::DeviceTaintRules => const { &[stage(35, false), stage(37, true)] },
            Gate::ResourceClaimDeviceStatus => {
                const { &[stage(32, false), stage(33, true), locked(37)] }
            }
            Gate::ResourceHealthStatus => const { &[stage(31, false), stage(36, true)] },
            Gate::DynamicResourceAllocation => {
                const { &[stage(26, false), stage(34, true), locked(35)] }
            }
            Gate::FractionalCapacityRange
            | Gate::DerivedAttributes
            | Gate::DeviceCompatibilityGroups
            | Gate::OptionalNodeOperations
            | Gate::PartitionableDevicesType => const { &[stage(37, false)] },
            Gate::ListTypeAttributes
            | Gate::NodeAllocatableResources
            | Gate::ResourcePoolStatus
            | Gate::WorkloadResourceClaims => const { &[stage(36, false)] },
            Gate::ResourceClaimGranularStatusAuthorization | Gate::ResourceHealthStatusMessage => {
                const { &[stage(36, true)] }
            }
            Gate::SchedulerFilterTimeout => const { &[stage(34, true)] },
            Gate::KubeletPodResourcesDynamicResources => {
                const { &[stage(27, false), stage(34, true), locked(36)] }
            }
        }
    }

    /// The enhancement (kep.k8s.io/N) the gate belongs to.
    pub fn kep(self) -> u32 {
        match self {
            Gate::PrioritizedList => 4816,
            Gate::AdminAccess => 5018,
            Gate::ExtendedResource => 5004,
            Gate::PartitionableDevices => 4815,
            Gate::ConsumableCapacity | Gate::FractionalCapacityRange => 5075,
            Gate::DeviceTaints | Gate::DeviceTaintRules => 5055,
            Gate::DeviceBindingConditions => 5007,
            Gate::ResourceClaimDeviceStatus | Gate::ResourceClaimGranularStatusAuthorization => {
                4817
            }
            Gate::ResourceHealthStatus | Gate::ResourceHealthStatusMessage => 4680,
            Gate::DynamicResourceAllocation | Gate::SchedulerFilterTimeout => 4381,
            Gate::DerivedAttributes => 6080,
            Gate::DeviceCompatibilityGroups => 5963,
            Gate::ListTypeAttributes => 5491,
            Gate::NodeAllocatableResources => 5517,
            Gate::OptionalNodeOperations => 5945,
            Gate::PartitionableDevicesType | Gate::ResourcePoolStatus => 5677,
            Gate::WorkloadResourceClaims => 5729,
            Gate::KubeletPodResourcesDynamicResources => 3695,
        }
    }

    /// The gates this one needs on (`defaultKubernetesFeatureGateDependencies` of 1.37.2;
    /// `DynamicResourceAllocation`, always on here, and non-DRA gates are left out).
    pub fn needs(self) -> &'static [Gate] {
        match self {
            Gate::DeviceBindingConditions | Gate::ResourceClaimGranularStatusAuthorization => {
                &[Gate::ResourceClaimDeviceStatus]
            }
            Gate::DeviceCompatibilityGroups => &[Gate::PartitionableDevices],
            Gate::DeviceTaintRules => &[Gate::DeviceTaints],
            Gate::FractionalCapacityRange => &[Gate::ConsumableCapacity],
            Gate::PartitionableDevicesType => {
                &[Gate::PartitionableDevices, Gate::ResourcePoolStatus]
            }
            Gate::ResourceHealthStatusMessage => &[Gate::ResourceHealthStatus],
            _ => &[],
        }
    }

    /// Whether setting the gate changes what the emulator serves or does.
    pub fn modeled(self) -> bool {
        !matches!(
            self,
            Gate::DerivedAttributes
                | Gate::DeviceCompatibilityGroups
                | Gate::ListTypeAttributes
                | Gate::NodeAllocatableResources
                | Gate::OptionalNodeOperations
                | Gate::PartitionableDevicesType
                | Gate::ResourceClaimGranularStatusAuthorization
                | Gate::ResourcePoolStatus
                | Gate::SchedulerFilterTimeout
                | Gate::WorkloadResourceClaims
                | Gate::ResourceHealthStatusMessage
                | Gate::KubeletPodResourcesDynamicResources
        )
    }

    /// The gate's stage in Kubernetes 1.`minor`; `None` before the gate existed.
    pub fn stage_in(self, minor: u32) -> Option<Stage> {
        self.history()
            .iter()
            .rev()
            .find(|s| s.since <= minor)
            .copied()
    }

    /// Whether a default cluster of `server_version` has the gate on.
    pub fn enabled(self, server_version: (u32, u32)) -> bool {
        self == Gate::DynamicResourceAllocation
            || server_version.0 > 1
            || self.stage_in(server_version.1).is_some_and(|s| s.default)
    }

    pub fn from_name(name: &str) -> Option<Gate> {
        Gate::ALL.into_iter().find(|g| g.name() == name)
    }
}

/// The feature gates of an emulated cluster: the release's defaults, and what
/// `--feature-gates` set over them. Each component reads them as its own `--feature-gates`
/// flag gives them upstream: the API server for the fields it keeps, the scheduler for the
/// rules it applies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FeatureGates {
    set: BTreeMap<Gate, bool>,
    /// Every modeled gate on, whatever the release (tests of a release's layout with all
    /// its optional features).
    all_on: bool,
}

/// A `--feature-gates` value the emulated release would refuse, or the emulator cannot
/// honour. The messages follow kube-apiserver's (k8s.io/component-base
/// `featuregate/feature_gate.go`) and add what to do instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GateError {
    #[error("--feature-gates: missing bool value for {0} (the form is NAME=true,NAME=false)")]
    MissingValue(String),
    #[error("--feature-gates: invalid value of {name}={value}: it takes true or false")]
    InvalidValue { name: String, value: String },
    #[error(
        "--feature-gates: unrecognized feature gate: {name} (the emulator knows the DRA gates of Kubernetes 1.37: {known})"
    )]
    Unknown { name: String, known: String },
    #[error(
        "--feature-gates: {name} does not exist in Kubernetes 1.{minor}: it came in 1.{since}, and kube-apiserver 1.{minor} refuses it as an unrecognized feature gate"
    )]
    NotInRelease {
        name: String,
        minor: u32,
        since: u32,
    },
    #[error(
        "--feature-gates: cannot set feature gate {name} to {value}, feature is locked to {locked} in Kubernetes 1.{minor}"
    )]
    Locked {
        name: String,
        value: bool,
        locked: bool,
        minor: u32,
    },
    #[error(
        "--feature-gates: the emulator does not implement {name}={value} (KEP-{kep}) on Kubernetes 1.{minor}{why}; the real cluster does: KUBE_FEATURE_GATES={name}={value} hack/local-cluster.sh up (docs/real-kubernetes.md)"
    )]
    NotEmulated {
        name: String,
        value: bool,
        kep: u32,
        minor: u32,
        why: &'static str,
    },
    #[error(
        "--feature-gates: {name} is enabled, but depends on features that are disabled: {disabled}"
    )]
    Dependency { name: String, disabled: String },
}

/// A user's text in a message, shortened when long.
fn quoted(text: &str) -> String {
    fake_dra_ops::text::elide_middle(text, 100)
}

impl FeatureGates {
    /// Every modeled gate on, whatever the release.
    pub fn all_on() -> Self {
        Self {
            set: BTreeMap::new(),
            all_on: true,
        }
    }

    /// `--feature-gates` (`NAME=BOOL,...`) for a cluster of `server_version`, refused
    /// where that release's kube-apiserver refuses it (an unknown gate, a locked one, a
    /// dependency off) and where the emulator would only pretend to honour it.
    pub fn parse(spec: &str, server_version: (u32, u32)) -> Result<Self, GateError> {
        let minor = server_version.1;
        let mut set = BTreeMap::new();
        for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (name, value) = entry
                .split_once('=')
                .ok_or_else(|| GateError::MissingValue(quoted(entry)))?;
            let (name, value) = (name.trim(), value.trim());
            let value = match value.to_ascii_lowercase().as_str() {
                "true" => true,
                "false" => false,
                _ => {
                    return Err(GateError::InvalidValue {
                        name: quoted(name),
                        value: quoted(value),
                    });
                }
            };
            let gate = Gate::from_name(name).ok_or_else(|| GateError::Unknown {
                name: quoted(name),
                known: Gate::ALL.map(Gate::name).join(", "),
            })?;
            let stage = gate.stage_in(minor).ok_or(GateError::NotInRelease {
                name: name.into(),
                minor,
                since: gate.history()[0].since,
            })?;
            if stage.locked && value != stage.default {
                return Err(GateError::Locked {
                    name: name.into(),
                    value,
                    locked: stage.default,
                    minor,
                });
            }
            let not_emulated = |why| GateError::NotEmulated {
                name: name.into(),
                value,
                kep: gate.kep(),
                minor,
                why,
            };
            if !gate.modeled() && value != stage.default {
                return Err(not_emulated(""));
            }
            if gate == Gate::DynamicResourceAllocation && !value {
                return Err(not_emulated(": the emulated cluster is a DRA cluster"));
            }
            if gate == Gate::DeviceTaintRules && value && minor < 37 {
                return Err(not_emulated(
                    ": before 1.37 the kind is served in resource.k8s.io/v1alpha3 (1.35) or v1beta2 (1.36), which the emulator does not serve",
                ));
            }
            set.insert(gate, value);
        }
        let gates = Self { set, all_on: false };
        // As `featureGate.Validate` of component-base: an enabled gate with a disabled
        // dependency is refused, whichever of the two was set by hand.
        for gate in Gate::ALL {
            let disabled: Vec<&str> = gate
                .needs()
                .iter()
                .filter(|need| !gates.enabled(**need, server_version))
                .map(|need| need.name())
                .collect();
            if gates.enabled(gate, server_version) && !disabled.is_empty() {
                return Err(GateError::Dependency {
                    name: gate.name().into(),
                    disabled: format!("[{}]", disabled.join(" ")),
                });
            }
        }
        Ok(gates)
    }

    /// Whether `gate` is on in a cluster of `server_version` with these gates.
    pub fn enabled(&self, gate: Gate, server_version: (u32, u32)) -> bool {
        if self.all_on && gate.modeled() {
            return true;
        }
        self.set
            .get(&gate)
            .copied()
            .unwrap_or_else(|| gate.enabled(server_version))
    }

    /// Whether every gate is as the release has it by default.
    pub fn are_defaults(&self) -> bool {
        !self.all_on && self.set.is_empty()
    }

    /// The gates set by hand, as `--feature-gates` takes them (`NAME=BOOL,...`).
    pub fn spec(&self) -> String {
        self.set
            .iter()
            .map(|(gate, on)| format!("{}={on}", gate.name()))
            .collect::<Vec<_>>()
            .join(",")
    }
}

fn items_mut<'a>(v: &'a mut Value, pointer: &str) -> impl Iterator<Item = &'a mut Value> {
    v.pointer_mut(pointer)
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
}

fn items<'a>(v: Option<&'a Value>, pointer: &str) -> impl Iterator<Item = &'a Value> {
    v.and_then(|v| v.pointer(pointer))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn set(v: &Value, field: &str) -> bool {
    v.get(field).is_some_and(|f| !f.is_null())
}

fn non_empty(v: &Value, field: &str) -> bool {
    match v.get(field) {
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(m)) => !m.is_empty(),
        Some(Value::Null) | None => false,
        Some(_) => true,
    }
}

fn remove(v: &mut Value, fields: &[&str]) {
    if let Some(map) = v.as_object_mut() {
        for f in fields {
            map.remove(*f);
        }
    }
}

/// What a write of `group`/`plural` keeps of `new` given the stored `old` (none on
/// create) on a cluster of `server_version` with `gates`: the fields of disabled gates are
/// removed from `new` (when `old` does not use the feature), as kube-apiserver does.
pub fn drop_disabled_fields(
    group: &str,
    plural: &str,
    old: Option<&Value>,
    new: &mut Value,
    server_version: (u32, u32),
    gates: &FeatureGates,
) {
    if group != "resource.k8s.io" {
        return;
    }
    let on = |g: Gate| gates.enabled(g, server_version);
    match plural {
        "resourceslices" => slice(old, new, &on),
        "resourceclaims" => {
            claim_spec(
                old.and_then(|o| o.get("spec")),
                new.get_mut("spec"),
                server_version,
                &on,
            );
            claim_status(old, new, &on);
        }
        "resourceclaimtemplates" => claim_spec(
            old.and_then(|o| o.pointer("/spec/spec")),
            new.pointer_mut("/spec/spec"),
            server_version,
            &on,
        ),
        "deviceclasses" => {
            let in_use = old.is_some_and(|o| o.pointer("/spec/extendedResourceName").is_some());
            if !on(Gate::ExtendedResource)
                && !in_use
                && let Some(spec) = new.get_mut("spec")
            {
                remove(spec, &["extendedResourceName"]);
            }
        }
        _ => {}
    }
}

/// `dropDisabledFields` of pkg/registry/resource/resourceslice/strategy.go.
fn slice(old: Option<&Value>, new: &mut Value, on: &impl Fn(Gate) -> bool) {
    let devices = |o: Option<&Value>| items(o, "/spec/devices").cloned().collect::<Vec<_>>();
    let old_devices = devices(old);
    let uses = |check: &dyn Fn(&Value) -> bool| old_devices.iter().any(check);
    if !on(Gate::DeviceTaints) && !uses(&|d| non_empty(d, "taints")) {
        for d in items_mut(new, "/spec/devices") {
            remove(d, &["taints"]);
        }
    }
    let node_selection = ["nodeName", "nodeSelector", "allNodes"];
    let partitionable_in_use = old.is_some_and(|o| {
        o.pointer("/spec/sharedCounters")
            .is_some_and(|c| c.as_array().is_some_and(|a| !a.is_empty()))
            || o.pointer("/spec/perDeviceNodeSelection")
                .is_some_and(|v| !v.is_null())
    }) || uses(&|d| {
        non_empty(d, "consumesCounters") || node_selection.iter().any(|f| set(d, f))
    });
    if !on(Gate::PartitionableDevices) && !partitionable_in_use {
        if let Some(spec) = new.get_mut("spec") {
            remove(spec, &["sharedCounters", "perDeviceNodeSelection"]);
        }
        for d in items_mut(new, "/spec/devices") {
            remove(
                d,
                &["consumesCounters", "nodeName", "nodeSelector", "allNodes"],
            );
        }
    }
    let binding = [
        "bindingConditions",
        "bindingFailureConditions",
        "bindsToNode",
    ];
    let binding_on = on(Gate::DeviceBindingConditions) && on(Gate::ResourceClaimDeviceStatus);
    if !binding_on && !uses(&|d| binding.iter().any(|f| non_empty(d, f))) {
        for d in items_mut(new, "/spec/devices") {
            remove(d, &binding);
        }
    }
    let consumable_in_use = uses(&|d| {
        set(d, "allowMultipleAllocations")
            || d.get("capacity")
                .and_then(Value::as_object)
                .is_some_and(|c| c.values().any(|v| set(v, "requestPolicy")))
    });
    if !on(Gate::ConsumableCapacity) && !consumable_in_use {
        for d in items_mut(new, "/spec/devices") {
            remove(d, &["allowMultipleAllocations"]);
            if let Some(capacity) = d.get_mut("capacity").and_then(Value::as_object_mut) {
                for c in capacity.values_mut() {
                    remove(c, &["requestPolicy"]);
                }
            }
        }
    }
}

/// `DropDisabledFields` of pkg/api/resourceclaimspec/util.go (1.35+; before, the claim
/// and template strategies' own `dropDisabledFields`), on a claim's `spec` (or a
/// template's `spec.spec`). Requests' `tolerations` are dropped from 1.35 only: 1.33 and
/// 1.34 keep them with `DRADeviceTaints` off. 1.32's `v1beta1.DeviceRequest` has no
/// `tolerations` (device taints came in 1.33), so its decoder drops them as an unknown
/// field, as it drops `firstAvailable` (`DRAPrioritizedList` is off there too).
fn claim_spec(
    old: Option<&Value>,
    new: Option<&mut Value>,
    server_version: (u32, u32),
    on: &impl Fn(Gate) -> bool,
) {
    let Some(new) = new else { return };
    let old_requests: Vec<Value> = items(old, "/devices/requests").cloned().collect();
    let old_uses = |check: &dyn Fn(&Value) -> bool| old_requests.iter().any(check);
    let subrequests = |r: &Value| -> Vec<Value> {
        r.get("firstAvailable")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    if !on(Gate::PrioritizedList) && !old_uses(&|r| non_empty(r, "firstAvailable")) {
        for r in items_mut(new, "/devices/requests") {
            remove(r, &["firstAvailable"]);
        }
    }
    let tolerations_in_use = old_uses(&|r| {
        r.get("exactly")
            .is_some_and(|e| non_empty(e, "tolerations"))
            || subrequests(r).iter().any(|s| non_empty(s, "tolerations"))
    });
    let release_drops_tolerations = !((1, 33)..(1, 35)).contains(&server_version);
    if !on(Gate::DeviceTaints) && release_drops_tolerations && !tolerations_in_use {
        for r in items_mut(new, "/devices/requests") {
            if let Some(exactly) = r.get_mut("exactly") {
                remove(exactly, &["tolerations"]);
            }
            for s in items_mut(r, "/firstAvailable") {
                remove(s, &["tolerations"]);
            }
        }
    }
    let admin_in_use = old_uses(&|r| r.get("exactly").is_some_and(|e| set(e, "adminAccess")));
    if !on(Gate::AdminAccess) && !admin_in_use {
        for r in items_mut(new, "/devices/requests") {
            if let Some(exactly) = r.get_mut("exactly") {
                remove(exactly, &["adminAccess"]);
            }
        }
    }
    let capacity_in_use = items(old, "/devices/constraints").any(|c| set(c, "distinctAttribute"))
        || old_uses(&|r| {
            r.get("exactly").is_some_and(|e| set(e, "capacity"))
                || subrequests(r).iter().any(|s| set(s, "capacity"))
        });
    if !on(Gate::ConsumableCapacity) && !capacity_in_use {
        for c in items_mut(new, "/devices/constraints") {
            remove(c, &["distinctAttribute"]);
        }
        for r in items_mut(new, "/devices/requests") {
            if let Some(exactly) = r.get_mut("exactly") {
                remove(exactly, &["capacity"]);
            }
            for s in items_mut(r, "/firstAvailable") {
                remove(s, &["capacity"]);
            }
        }
    }
}

/// `dropDisabledDRAResourceClaimDeviceStatusFields` of the claim's status strategy.
fn claim_status(old: Option<&Value>, new: &mut Value, on: &impl Fn(Gate) -> bool) {
    let in_use = old.is_some_and(|o| o.pointer("/status/devices").is_some_and(|d| !d.is_null()));
    if !on(Gate::ResourceClaimDeviceStatus)
        && !in_use
        && let Some(status) = new.get_mut("status").and_then(Value::as_object_mut)
    {
        status.remove("devices");
    }
}

/// The paths of the fields `drop_disabled_fields` took out of `before` (now `after`), for
/// the log.
pub fn dropped(before: &Value, after: &Value) -> Vec<String> {
    let mut paths = Vec::new();
    missing_paths(before, after, String::new(), &mut paths);
    paths
}

fn missing_paths(before: &Value, after: &Value, at: String, out: &mut Vec<String>) {
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            for (k, v) in b {
                let path = if at.is_empty() {
                    k.clone()
                } else {
                    format!("{at}.{k}")
                };
                match a.get(k) {
                    Some(w) => missing_paths(v, w, path, out),
                    None => out.push(path),
                }
            }
        }
        (Value::Array(b), Value::Array(a)) => {
            for (i, (v, w)) in b.iter().zip(a).enumerate() {
                missing_paths(v, w, format!("{at}[{i}]"), out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn defaults() -> FeatureGates {
        FeatureGates::default()
    }

    /// [`slice_with_everything`] as a create on a cluster of `version` with `gates` keeps it.
    fn dropped_from_slice(version: (u32, u32), gates: &FeatureGates) -> Value {
        let mut s = slice_with_everything();
        drop_disabled_fields(
            "resource.k8s.io",
            "resourceslices",
            None,
            &mut s,
            version,
            gates,
        );
        s
    }

    /// Why `--feature-gates spec` is refused on 1.`minor`.
    fn error(spec: &str, minor: u32) -> String {
        FeatureGates::parse(spec, (1, minor))
            .unwrap_err()
            .to_string()
    }

    fn slice_with_everything() -> Value {
        json!({"spec": {
            "driver": "d", "nodeName": "n", "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
            "sharedCounters": [{"name": "gpu-0", "counters": {"memory": {"value": "80Gi"}}}],
            "devices": [{
                "name": "a",
                "taints": [{"key": "k", "effect": "NoSchedule"}],
                "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": "40Gi"}}}],
                "bindingConditions": ["c"], "bindingFailureConditions": ["f"],
                "allowMultipleAllocations": true,
                "capacity": {"memory": {"value": "80Gi", "requestPolicy": {"default": "1Gi"}}}
            }]
        }})
    }

    #[test]
    fn a_default_1_34_server_drops_every_beta_and_alpha_field_of_a_slice() {
        let s = dropped_from_slice((1, 34), &defaults());
        assert_eq!(
            s["spec"]["devices"][0],
            json!({"name": "a", "capacity": {"memory": {"value": "80Gi"}}})
        );
        assert!(s["spec"].get("sharedCounters").is_none());
    }

    #[test]
    fn a_default_1_36_server_keeps_them() {
        assert_eq!(
            dropped_from_slice((1, 36), &defaults()),
            slice_with_everything()
        );
    }

    #[test]
    fn fields_in_use_by_the_stored_object_are_kept() {
        let old = slice_with_everything();
        let mut s = slice_with_everything();
        drop_disabled_fields(
            "resource.k8s.io",
            "resourceslices",
            Some(&old),
            &mut s,
            (1, 35),
            &defaults(),
        );
        assert_eq!(s, old);
    }

    #[test]
    fn claims_lose_fields_of_disabled_gates() {
        let spec = json!({"devices": {"requests": [
            {"name": "a", "firstAvailable": [{"name": "x", "deviceClassName": "c", "tolerations": [{"operator": "Exists"}]}]},
            {"name": "b", "exactly": {"deviceClassName": "c", "adminAccess": true, "capacity": {"requests": {"memory": "1Gi"}}}}
        ]}});
        let mut claim = json!({"spec": spec, "status": {"devices": [{"driver": "d"}]}});
        drop_disabled_fields(
            "resource.k8s.io",
            "resourceclaims",
            None,
            &mut claim,
            (1, 32),
            &defaults(),
        );
        assert_eq!(
            claim,
            json!({"spec": {"devices": {"requests": [{"name": "a"}, {"name": "b", "exactly": {"deviceClassName": "c"}}]}}, "status": {}})
        );
        let tolerations = json!({"spec": {"devices": {"requests": [
            {"name": "b", "exactly": {"deviceClassName": "c", "tolerations": [{"operator": "Exists"}]}}
        ]}}});
        let mut kept = tolerations.clone();
        drop_disabled_fields(
            "resource.k8s.io",
            "resourceclaims",
            None,
            &mut kept,
            (1, 34),
            &defaults(),
        );
        assert_eq!(
            kept, tolerations,
            "1.34 keeps tolerations with the gate off"
        );
        let mut dropped = tolerations.clone();
        drop_disabled_fields(
            "resource.k8s.io",
            "resourceclaims",
            None,
            &mut dropped,
            (1, 35),
            &defaults(),
        );
        assert!(
            dropped
                .pointer("/spec/devices/requests/0/exactly/tolerations")
                .is_none()
        );
        let mut unknown_to_1_32 = tolerations.clone();
        drop_disabled_fields(
            "resource.k8s.io",
            "resourceclaims",
            None,
            &mut unknown_to_1_32,
            (1, 32),
            &defaults(),
        );
        assert_eq!(unknown_to_1_32, dropped, "1.32 has no request tolerations");
        let mut template = json!({"spec": {"spec": spec}});
        drop_disabled_fields(
            "resource.k8s.io",
            "resourceclaimtemplates",
            None,
            &mut template,
            (1, 34),
            &defaults(),
        );
        assert_eq!(
            template["spec"]["spec"]["devices"]["requests"],
            json!([
                {"name": "a", "firstAvailable": [{"name": "x", "deviceClassName": "c", "tolerations": [{"operator": "Exists"}]}]},
                {"name": "b", "exactly": {"deviceClassName": "c", "adminAccess": true}}
            ])
        );
    }

    #[test]
    fn device_classes_lose_the_extended_resource_name_before_1_36() {
        let mut class = json!({"spec": {"extendedResourceName": "example.com/gpu"}});
        drop_disabled_fields(
            "resource.k8s.io",
            "deviceclasses",
            None,
            &mut class,
            (1, 35),
            &defaults(),
        );
        assert_eq!(class, json!({"spec": {}}));
        let mut class = json!({"spec": {"extendedResourceName": "example.com/gpu"}});
        drop_disabled_fields(
            "resource.k8s.io",
            "deviceclasses",
            None,
            &mut class,
            (1, 36),
            &defaults(),
        );
        assert_eq!(class["spec"]["extendedResourceName"], "example.com/gpu");
    }

    #[test]
    fn dropped_names_the_paths() {
        let before = slice_with_everything();
        let mut after = before.clone();
        drop_disabled_fields(
            "resource.k8s.io",
            "resourceslices",
            None,
            &mut after,
            (1, 35),
            &defaults(),
        );
        let paths = dropped(&before, &after);
        assert!(
            paths.contains(&"spec.sharedCounters".to_string()),
            "{paths:?}"
        );
        assert!(
            paths.contains(&"spec.devices[0].taints".to_string()),
            "{paths:?}"
        );
    }

    #[test]
    fn feature_gates_turn_a_gate_on_over_the_release_default() {
        let gates = FeatureGates::parse("DRADeviceTaints=true", (1, 35)).unwrap();
        assert!(gates.enabled(Gate::DeviceTaints, (1, 35)));
        assert!(!gates.enabled(Gate::PartitionableDevices, (1, 35)));
        assert_eq!(gates.spec(), "DRADeviceTaints=true");
        assert!(!gates.are_defaults());
        let s = dropped_from_slice((1, 35), &gates);
        assert!(s.pointer("/spec/devices/0/taints").is_some());
        assert!(s.pointer("/spec/sharedCounters").is_none());
        let off = FeatureGates::parse(" DRAConsumableCapacity=false , ", (1, 36)).unwrap();
        let s = dropped_from_slice((1, 36), &off);
        assert!(
            s.pointer("/spec/devices/0/allowMultipleAllocations")
                .is_none()
        );
        assert!(FeatureGates::parse("", (1, 37)).unwrap().are_defaults());
    }

    #[test]
    fn feature_gates_the_release_refuses_are_refused_naming_release_and_gate() {
        assert_eq!(
            error("DRAConsumableCapacity=true", 33),
            "--feature-gates: DRAConsumableCapacity does not exist in Kubernetes 1.33: it came in 1.34, and kube-apiserver 1.33 refuses it as an unrecognized feature gate"
        );
        assert_eq!(
            error("DRAAdminAccess=false", 36),
            "--feature-gates: cannot set feature gate DRAAdminAccess to false, feature is locked to true in Kubernetes 1.36"
        );
        assert!(FeatureGates::parse("DRAAdminAccess=false", (1, 35)).is_ok());
        assert_eq!(
            error("DRADeviceTaintRules=true,DRADeviceTaints=false", 37),
            "--feature-gates: DRADeviceTaintRules is enabled, but depends on features that are disabled: [DRADeviceTaints]"
        );
        assert_eq!(
            error(
                "DRAFractionalCapacityRange=true,DRAConsumableCapacity=false",
                37
            ),
            "--feature-gates: DRAFractionalCapacityRange is enabled, but depends on features that are disabled: [DRAConsumableCapacity]"
        );
        let unknown = error("GenericWorkload=true", 37);
        assert!(
            unknown.starts_with("--feature-gates: unrecognized feature gate: GenericWorkload (the emulator knows the DRA gates of Kubernetes 1.37: DRAPrioritizedList, "),
            "{unknown}"
        );
        assert_eq!(
            error("DRADeviceTaints", 37),
            "--feature-gates: missing bool value for DRADeviceTaints (the form is NAME=true,NAME=false)"
        );
        assert_eq!(
            error("DRADeviceTaints=yes", 37),
            "--feature-gates: invalid value of DRADeviceTaints=yes: it takes true or false"
        );
        let long = error(&format!("{}=true", "X".repeat(70_000)), 37);
        assert!(long.len() < 1_000, "{} bytes", long.len());
    }

    #[test]
    fn gates_the_emulator_does_not_implement_are_refused_with_the_way_to_the_real_cluster() {
        assert_eq!(
            error("DRAWorkloadResourceClaims=true", 37),
            "--feature-gates: the emulator does not implement DRAWorkloadResourceClaims=true (KEP-5729) on Kubernetes 1.37; the real cluster does: KUBE_FEATURE_GATES=DRAWorkloadResourceClaims=true hack/local-cluster.sh up (docs/real-kubernetes.md)"
        );
        assert!(
            error("DRADeviceTaintRules=true", 36)
                .contains("v1beta2 (1.36), which the emulator does not serve")
        );
        assert!(error("DynamicResourceAllocation=false", 34).contains("a DRA cluster"));
        // The default value of a gate the emulator does not model changes nothing: taken.
        assert!(FeatureGates::parse("DRASchedulerFilterTimeout=true", (1, 37)).is_ok());
        assert!(FeatureGates::parse("DynamicResourceAllocation=true", (1, 32)).is_ok());
        assert!(FeatureGates::parse("DRAFractionalCapacityRange=true", (1, 37)).is_ok());
    }

    #[test]
    fn every_gate_has_a_history_in_order_and_a_name_of_its_own() {
        for gate in Gate::ALL {
            let history = gate.history();
            assert!(
                history.windows(2).all(|w| w[0].since < w[1].since),
                "{gate:?}"
            );
            assert_eq!(Gate::from_name(gate.name()), Some(gate));
        }
        assert!(Gate::DynamicResourceAllocation.modeled());
        assert!(!Gate::DerivedAttributes.modeled());
    }

    #[test]
    fn gates_follow_the_upstream_defaults() {
        assert!(!Gate::DeviceTaints.enabled((1, 35)));
        assert!(Gate::DeviceTaints.enabled((1, 36)));
        assert!(!Gate::PrioritizedList.enabled((1, 33)));
        assert!(Gate::PrioritizedList.enabled((1, 34)));
        assert!(Gate::ResourceClaimDeviceStatus.enabled((1, 33)));
        assert!(!Gate::ResourceClaimDeviceStatus.enabled((1, 32)));
    }
}
