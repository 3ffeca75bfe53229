//! What a node publishes about its devices, whichever `resource.k8s.io` version carries
//! it: a version-neutral data model of a ResourceSlice device and its parts, built with
//! constructors (the API adds fields every release, so the structs are
//! `#[non_exhaustive]`), and the per-release rules the serving API server holds a slice
//! to ([`CounterLayout`], [`TaintRules`]).

use std::collections::BTreeMap;

use crate::quantity::Quantity;

/// A device attribute value (one of the API's kinds).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Attribute {
    /// `int`.
    Int(i64),
    /// `string`.
    String(String),
    /// `version` (semver).
    Version(String),
    /// `bool`.
    Bool(bool),
}

impl From<i64> for Attribute {
    fn from(v: i64) -> Self {
        Self::Int(v)
    }
}

impl From<bool> for Attribute {
    fn from(v: bool) -> Self {
        Self::Bool(v)
    }
}

impl From<&str> for Attribute {
    fn from(v: &str) -> Self {
        Self::String(v.to_owned())
    }
}

impl From<String> for Attribute {
    fn from(v: String) -> Self {
        Self::String(v)
    }
}

/// `capacity.<name>.requestPolicy` of a device that allows multiple allocations: what a
/// claim may take of it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct RequestPolicy {
    /// `default`: taken when the request names no amount.
    pub default: Option<Quantity>,
    /// `validValues`, ascending.
    pub valid_values: Vec<Quantity>,
    /// `validRange`.
    pub valid_range: Option<ValidRange>,
}

impl RequestPolicy {
    /// A policy taking `default` when a request names no amount.
    pub fn new(default: Option<Quantity>) -> Self {
        Self {
            default,
            ..Self::default()
        }
    }

    /// Only these amounts, ascending.
    pub fn valid_values(mut self, values: impl IntoIterator<Item = Quantity>) -> Self {
        self.valid_values = values.into_iter().collect();
        self
    }

    /// Amounts in this range.
    pub fn valid_range(mut self, range: ValidRange) -> Self {
        self.valid_range = Some(range);
        self
    }
}

/// `validRange` of a [`RequestPolicy`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ValidRange {
    /// `min`.
    pub min: Quantity,
    /// `max`.
    pub max: Option<Quantity>,
    /// `step`.
    pub step: Option<Quantity>,
}

impl ValidRange {
    /// From `min` up, in `step`s (any amount when `None`), to `max` (no limit when `None`).
    pub fn new(min: Quantity, max: Option<Quantity>, step: Option<Quantity>) -> Self {
        Self { min, max, step }
    }
}

/// One `capacity` entry of a device.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Capacity {
    /// `value`.
    pub value: Quantity,
    /// `requestPolicy`; only on devices that allow multiple allocations.
    pub request_policy: Option<RequestPolicy>,
}

impl Capacity {
    /// A capacity of `value`.
    pub fn new(value: impl Into<Quantity>) -> Self {
        Self {
            value: value.into(),
            request_policy: None,
        }
    }

    /// What a claim may take of it (devices that allow multiple allocations).
    pub fn request_policy(mut self, policy: RequestPolicy) -> Self {
        self.request_policy = Some(policy);
        self
    }
}

impl From<&str> for Capacity {
    fn from(value: &str) -> Self {
        Self::new(value)
    }
}

impl From<Quantity> for Capacity {
    fn from(value: Quantity) -> Self {
        Self::new(value)
    }
}

/// A `sharedCounters` entry: amounts that the devices consuming from it share, so the
/// scheduler never allocates overlapping partitions of one physical device.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct CounterSet {
    /// A DNS label, unique in the pool.
    pub name: String,
    /// Counter name to amount.
    pub counters: BTreeMap<String, Quantity>,
}

impl CounterSet {
    /// Counter set `name` with `counters`.
    pub fn new(name: impl Into<String>, counters: BTreeMap<String, Quantity>) -> Self {
        Self {
            name: name.into(),
            counters,
        }
    }
}

/// A `consumesCounters` entry of a device.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct CounterConsumption {
    /// The [`CounterSet::name`] it draws from.
    pub counter_set: String,
    /// Counter name to amount.
    pub counters: BTreeMap<String, Quantity>,
}

impl CounterConsumption {
    /// Draws `counters` from counter set `counter_set`.
    pub fn new(counter_set: impl Into<String>, counters: BTreeMap<String, Quantity>) -> Self {
        Self {
            counter_set: counter_set.into(),
            counters,
        }
    }
}

/// The effect of a device taint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum TaintEffect {
    /// `NoSchedule`: no new allocation without a toleration.
    NoSchedule,
    /// `NoExecute`: also evicts the pods of claims allocated the device.
    NoExecute,
    /// `None` (1.35+): informational.
    None,
}

impl TaintEffect {
    /// The API's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoSchedule => "NoSchedule",
            Self::NoExecute => "NoExecute",
            Self::None => "None",
        }
    }

    /// The effect the API spells `s`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "NoSchedule" => Some(Self::NoSchedule),
            "NoExecute" => Some(Self::NoExecute),
            "None" => Some(Self::None),
            _ => None,
        }
    }
}

/// A device's health as the kubelet's health stream reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum HealthStatus {
    /// Working.
    #[default]
    Healthy,
    /// Failing: the kubelet marks the pods using it.
    Unhealthy,
    /// Not known.
    Unknown,
}

impl HealthStatus {
    /// How bad: what a device reported from two sources is the worse of the two.
    fn badness(self) -> u8 {
        match self {
            Self::Healthy => 0,
            Self::Unknown => 1,
            Self::Unhealthy => 2,
        }
    }

    /// The worse of two reports, with its message.
    pub fn worse(a: (Self, Option<String>), b: (Self, Option<String>)) -> (Self, Option<String>) {
        if b.0.badness() > a.0.badness() { b } else { a }
    }
}

/// A `taints` entry of a device (`timeAdded` is the API server's).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub struct DeviceTaint {
    /// A qualified name.
    pub key: String,
    /// Its value, if any.
    pub value: Option<String>,
    /// What it does.
    pub effect: TaintEffect,
}

impl DeviceTaint {
    /// A taint `key` with `effect` and no value.
    pub fn new(key: impl Into<String>, effect: TaintEffect) -> Self {
        Self {
            key: key.into(),
            value: None,
            effect,
        }
    }

    /// With `value`.
    pub fn value(mut self, value: impl Into<String>) -> Self {
        self.value = Some(value.into());
        self
    }
}

/// `bindingConditions`, `bindingFailureConditions` and `bindsToNode` of a device: the
/// scheduler binds a pod only once the driver reports the conditions in the claim's
/// `status.devices`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct BindingConditions {
    /// Condition types that must all be `True` before binding.
    pub conditions: Vec<String>,
    /// Condition types of which any `True` fails the binding.
    pub failure_conditions: Vec<String>,
    /// `bindsToNode`: the allocation is limited to the node picked.
    pub binds_to_node: bool,
}

impl BindingConditions {
    /// Binding waits for `conditions` and fails on any of `failure_conditions`.
    pub fn new(conditions: Vec<String>, failure_conditions: Vec<String>) -> Self {
        Self {
            conditions,
            failure_conditions,
            binds_to_node: false,
        }
    }

    /// `bindsToNode`.
    pub fn binds_to_node(mut self, binds: bool) -> Self {
        self.binds_to_node = binds;
        self
    }
}

/// A device as the node's ResourceSlice lists it, whichever API version publishes it.
///
/// ```
/// use dra_kubelet_plugin::device::{Attribute, SliceDevice};
///
/// let card = SliceDevice::new("fpga-0")
///     .attribute("bitstream", "none")
///     .attribute("lanes", 16)
///     .capacity("memory", "8Gi");
/// assert_eq!(card.attributes["lanes"], Attribute::Int(16));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct SliceDevice {
    /// A DNS label, unique in the node's pool.
    pub name: String,
    /// Unqualified names are in the driver's domain; `resource.kubernetes.io/...` are
    /// the standard ones.
    pub attributes: BTreeMap<String, Attribute>,
    /// `capacity`.
    pub capacity: BTreeMap<String, Capacity>,
    /// `consumesCounters`: what allocating it takes from the pool's counter sets.
    pub consumes_counters: Vec<CounterConsumption>,
    /// `allowMultipleAllocations`: several claims share it, each taking part of its
    /// capacity.
    pub allow_multiple_allocations: bool,
    /// `taints`.
    pub taints: Vec<DeviceTaint>,
    /// Binding conditions, if the scheduler must wait for the driver.
    pub binding: Option<BindingConditions>,
}

impl SliceDevice {
    /// Device `name` with nothing else.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ..Self::default()
        }
    }

    /// Adds attribute `name`.
    pub fn attribute(mut self, name: impl Into<String>, value: impl Into<Attribute>) -> Self {
        self.attributes.insert(name.into(), value.into());
        self
    }

    /// Adds capacity `name`.
    pub fn capacity(mut self, name: impl Into<String>, capacity: impl Into<Capacity>) -> Self {
        self.capacity.insert(name.into(), capacity.into());
        self
    }

    /// Adds a `consumesCounters` entry.
    pub fn consumes(mut self, consumption: CounterConsumption) -> Self {
        self.consumes_counters.push(consumption);
        self
    }

    /// Lets several claims share it (`allowMultipleAllocations`).
    pub fn allow_multiple_allocations(mut self) -> Self {
        self.allow_multiple_allocations = true;
        self
    }

    /// Adds a taint.
    pub fn taint(mut self, taint: DeviceTaint) -> Self {
        self.taints.push(taint);
        self
    }

    /// Sets the binding conditions.
    pub fn binding(mut self, binding: BindingConditions) -> Self {
        self.binding = Some(binding);
        self
    }
}

/// How a pool's devices are spread over its slices. Either way every slice is within the
/// limits of [`CounterLayout`] and the scheduler sees the same devices; what differs is
/// which devices a slice lists, which tools that read slices (and people) may rely on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SliceSplit {
    /// As few slices as the limits allow.
    #[default]
    Packed,
    /// The devices consuming from a counter set (by their first `consumesCounters`
    /// entry) in slices of their own, one such group after another: on 1.34 with the
    /// counter set (and any set its devices also consume from), from 1.35 after the slices
    /// of counter sets. Devices without counters are packed after them. NVIDIA's
    /// `gpu.nvidia.com` driver cuts its pool this way, one slice per partitionable GPU.
    PerCounterSet,
}

/// Where counter sets go. Kubernetes 1.34 (`validateResourceSliceSpec`) wants a device's
/// counter sets in its own slice; from 1.35 a slice holds either `sharedCounters` or
/// `devices`, and a device may consume from any slice of its pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CounterLayout {
    /// 1.34 and v1beta1 servers.
    WithDevices,
    /// 1.35+.
    Separate,
}

impl CounterLayout {
    /// The layout of a server of this minor version of Kubernetes 1.
    pub fn for_minor(minor: u32) -> Self {
        if minor >= 35 {
            Self::Separate
        } else {
            Self::WithDevices
        }
    }
}

/// What the serving release accepts of a device's taints. A slice write breaking them is
/// refused whole, so what breaks them is left out and said where the taint came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaintRules {
    /// Taints one device may carry (`ResourceSliceMaxDeviceTaintsPerDevice`: 4 up to 1.34,
    /// 16 from 1.35).
    pub max_per_device: usize,
    /// Whether the effect `None` is accepted: kube-apiserver's validation
    /// (pkg/apis/resource/validation, `validateDeviceTaint`) accepts only `NoSchedule`
    /// and `NoExecute` up to 1.34; 1.35 added `None`.
    pub effect_none: bool,
}

impl TaintRules {
    /// At most `max_per_device` taints a device, the effect `None` allowed or not.
    pub fn new(max_per_device: usize, effect_none: bool) -> Self {
        Self {
            max_per_device,
            effect_none,
        }
    }

    /// The rules of a server with `layout`.
    pub fn of(layout: CounterLayout) -> Self {
        match layout {
            CounterLayout::WithDevices => Self {
                max_per_device: 4,
                effect_none: false,
            },
            CounterLayout::Separate => Self {
                max_per_device: 16,
                effect_none: true,
            },
        }
    }

    /// Whether a taint with `effect` may be published.
    pub fn allows(self, effect: TaintEffect) -> bool {
        effect != TaintEffect::None || self.effect_none
    }
}
