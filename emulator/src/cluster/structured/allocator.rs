//! The structured allocator (`staging/src/k8s.io/dynamic-resource-allocation/structured/allocator.go`):
//! which devices of a node's ResourceSlices satisfy a pod's unallocated claims.

use super::capacity::{self, Consumption};
use super::*;
use k8s_openapi::api::resource::v1::{
    DeviceRequestAllocationResult, DeviceTaint, DeviceToleration,
};

use crate::cel::{compile, evaluate};

/// A device, as allocation results name it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DeviceId {
    pub driver: String,
    pub pool: String,
    pub device: String,
}

/// Why allocation cannot proceed at all, for any node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocateError {
    /// The claim asks for something that does not exist or is not implemented here.
    #[error("{0}")]
    Unresolvable(String),
    /// The Filter fails for the node with an error that ends the scheduling attempt: a CEL
    /// selector failed to compile or evaluate, or a capacity request cannot be computed
    /// with; the message names the expression or the capacity.
    #[error("{0}")]
    Filter(String),
}

/// What claims' allocations hold already (upstream's `AllocatedState`, gathered as
/// kube-scheduler's `foreachAllocatedDevice` does): devices given whole, and devices given
/// out in shares with what their shares take together, in nano-units per capacity.
/// Admin access holds nothing.
#[derive(Debug, Default, Clone)]
pub struct Held {
    whole: BTreeSet<DeviceId>,
    shared: BTreeMap<DeviceId, BTreeMap<String, i128>>,
}

impl Held {
    pub fn of_claims<'a>(claims: impl IntoIterator<Item = &'a ResourceClaim>) -> Self {
        let mut held = Self::default();
        for claim in claims {
            let results = claim
                .status
                .as_ref()
                .and_then(|s| s.allocation.as_ref())
                .and_then(|a| a.devices.as_ref())
                .and_then(|d| d.results.as_ref());
            held.add(results.into_iter().flatten());
        }
        held
    }

    pub fn add<'a>(
        &mut self,
        results: impl IntoIterator<Item = &'a DeviceRequestAllocationResult>,
    ) {
        for r in results.into_iter().filter(|r| r.admin_access != Some(true)) {
            let id = DeviceId {
                driver: r.driver.clone(),
                pool: r.pool.clone(),
                device: r.device.clone(),
            };
            if r.share_id.is_none() {
                self.whole.insert(id);
                continue;
            }
            let load = self.shared.entry(id).or_default();
            for (name, q) in r.consumed_capacity.iter().flatten() {
                let nanos = crate::cluster::node_fit::parse_quantity(&q.0).unwrap_or(0);
                *load.entry(name.clone()).or_default() += nanos;
            }
        }
    }
}

/// `status.allocation.nodeSelector` for devices local to `node`, as upstream writes it.
pub fn node_selector_for(node: &str) -> Value {
    json!({"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]})
}

/// The node-local devices of one node: slices with `spec.nodeName == node`, only the
/// newest generation of each pool (`GatherPools`), in a stable order.
pub(super) struct NodeDevices<'a> {
    devices: Vec<(DeviceId, &'a Device)>,
    /// Pools whose newest generation lacks slices (`resourceSliceCount` not reached).
    incomplete: BTreeSet<(String, String)>,
    /// The pools' shared counters (`sharedCounters` of any slice of the pool), in nano-units.
    counters: BTreeMap<CounterKey, i128>,
}

/// A shared counter: (driver, pool, counter set, counter).
type CounterKey = (String, String, String, String);

pub(super) fn node_devices<'a>(node: &str, slices: &'a [ResourceSlice]) -> NodeDevices<'a> {
    let local: Vec<&ResourceSlice> = slices
        .iter()
        .filter(|s| s.spec.node_name.as_deref() == Some(node))
        .collect();
    let mut newest: BTreeMap<(String, String), i64> = BTreeMap::new();
    for s in &local {
        let key = (s.spec.driver.clone(), s.spec.pool.name.clone());
        let g = newest.entry(key).or_insert(s.spec.pool.generation);
        *g = (*g).max(s.spec.pool.generation);
    }
    let mut current: Vec<&ResourceSlice> = local
        .into_iter()
        .filter(|s| {
            newest.get(&(s.spec.driver.clone(), s.spec.pool.name.clone()))
                == Some(&s.spec.pool.generation)
        })
        .collect();
    current.sort_by(|a, b| {
        (&a.spec.driver, &a.spec.pool.name, &a.metadata.name).cmp(&(
            &b.spec.driver,
            &b.spec.pool.name,
            &b.metadata.name,
        ))
    });
    let mut counts: BTreeMap<(String, String), (usize, i64)> = BTreeMap::new();
    let mut devices = Vec::new();
    let mut counters = BTreeMap::new();
    for s in current {
        let entry = counts
            .entry((s.spec.driver.clone(), s.spec.pool.name.clone()))
            .or_insert((0, s.spec.pool.resource_slice_count));
        entry.0 += 1;
        for set in s.spec.shared_counters.iter().flatten() {
            for (name, counter) in &set.counters {
                if let Some(value) = crate::cluster::node_fit::parse_quantity(&counter.value.0) {
                    let key = (
                        s.spec.driver.clone(),
                        s.spec.pool.name.clone(),
                        set.name.clone(),
                        name.clone(),
                    );
                    counters.insert(key, value);
                }
            }
        }
        for d in s.spec.devices.iter().flatten() {
            devices.push((
                DeviceId {
                    driver: s.spec.driver.clone(),
                    pool: s.spec.pool.name.clone(),
                    device: d.name.clone(),
                },
                d,
            ));
        }
    }
    let incomplete = counts
        .into_iter()
        .filter(|(_, (seen, want))| (*seen as i64) < *want)
        .map(|(k, _)| k)
        .collect();
    NodeDevices {
        devices,
        incomplete,
        counters,
    }
}

/// Slices the allocator does not use, named so a caller can log them.
pub fn unsupported_slices(slices: &[ResourceSlice]) -> Vec<String> {
    slices
        .iter()
        .filter(|s| s.spec.node_name.as_deref().is_none_or(str::is_empty))
        .map(|s| s.metadata.name.clone().unwrap_or_default())
        .collect()
}

/// One request's need, resolved against the node's devices.
pub(super) enum Slot<'a> {
    /// `All`: exactly these devices.
    Fixed { who: Who<'a>, devices: Vec<usize> },
    /// `ExactCount`: `count` of these candidates.
    Pick {
        who: Who<'a>,
        count: usize,
        candidates: Vec<usize>,
    },
}

/// For whom a slot's devices are: the claim (its index), whether with admin access, the
/// request or `request/subrequest`, and what it takes of each device it may share.
pub(super) struct Who<'a> {
    claim: usize,
    /// `claim <namespace>/<name>`, as the allocator's errors name it.
    claim_name: &'a str,
    admin: bool,
    request: String,
    shares: &'a BTreeMap<usize, Consumption>,
}

/// A claim's constraint while a round runs: `matchAttribute` (upstream's
/// `matchAttributeConstraint`: every device has the first one's value) or
/// `distinctAttribute` (`distinctAttributeConstraint`: no two devices share a value).
#[derive(Clone)]
struct AttributeConstraint {
    claim: usize,
    /// `distinctAttribute` rather than `matchAttribute`.
    distinct: bool,
    /// The requests it binds (a request's name also covers its subrequests); all if empty.
    requests: Vec<String>,
    /// Fully qualified: `domain/name`.
    attribute: String,
    /// The values of the devices taken so far under it, in order (undone from the end).
    values: Vec<Value>,
}

impl AttributeConstraint {
    /// Whether a device with `value` (of the attribute; `None`: it has none) may join.
    fn admits(&self, value: Option<&Value>) -> bool {
        match value {
            None => false,
            Some(value) if self.distinct => !self.values.contains(value),
            Some(value) => self.values.first().is_none_or(|first| first == value),
        }
    }

    fn applies_to(&self, who: &Who) -> bool {
        let parent = who.request.split('/').next().unwrap_or_default();
        who.claim == self.claim
            && (self.requests.is_empty()
                || self
                    .requests
                    .iter()
                    .any(|r| *r == who.request || r == parent))
    }
}

/// A device's attribute by its fully qualified name; in the driver's own domain also by
/// its bare name (upstream's `lookupAttribute`). As JSON, `{"string": "x"}`, so equal
/// values of different types differ.
fn attribute_of(id: &DeviceId, device: &Device, qualified: &str) -> Option<Value> {
    let attributes = device.attributes.as_ref()?;
    let found = attributes.get(qualified).or_else(|| {
        let (domain, name) = qualified.split_once('/')?;
        (domain == id.driver)
            .then(|| attributes.get(name))
            .flatten()
    })?;
    let value = serde_json::to_value(found).ok()?;
    // An attribute of no known type matches nothing.
    value
        .as_object()
        .is_some_and(|o| !o.is_empty())
        .then_some(value)
}

/// What one allocation round has given out: which claims each device went to, what its
/// shares take, and what remains of the node's shared counters.
struct Round {
    used: Vec<Vec<usize>>,
    /// Per device allowing multiple allocations, its shares so far (held ones included);
    /// the first one charges its counters, the others do not (`deviceCapacityInUse`).
    shares: Vec<usize>,
    /// Per device, what its shares take, in nano-units per capacity.
    share_load: Vec<BTreeMap<String, i128>>,
    constraints: Vec<AttributeConstraint>,
    remaining: BTreeMap<CounterKey, i128>,
    /// Per device, the counters it consumes; `None` when it names a counter its pool does
    /// not define (it cannot be allocated).
    needs: Vec<Option<Vec<(CounterKey, i128)>>>,
}

impl Round {
    /// A round on `available`, the counters of `held` devices (whole or shared) already
    /// spent.
    fn new(available: &NodeDevices, held: &Held, constraints: Vec<AttributeConstraint>) -> Self {
        let needs: Vec<Option<Vec<(CounterKey, i128)>>> = available
            .devices
            .iter()
            .map(|(id, device)| {
                let mut needs = Vec::new();
                for consumption in device.consumes_counters.iter().flatten() {
                    for (name, counter) in &consumption.counters {
                        let key = (
                            id.driver.clone(),
                            id.pool.clone(),
                            consumption.counter_set.clone(),
                            name.clone(),
                        );
                        if !available.counters.contains_key(&key) {
                            return None;
                        }
                        needs.push((
                            key,
                            crate::cluster::node_fit::parse_quantity(&counter.value.0)?,
                        ));
                    }
                }
                Some(needs)
            })
            .collect();
        let mut remaining = available.counters.clone();
        let mut shares = vec![0; available.devices.len()];
        let mut share_load = vec![BTreeMap::new(); available.devices.len()];
        for (d, (id, _)) in available.devices.iter().enumerate() {
            let shared = held.shared.get(id);
            if let Some(load) = shared {
                shares[d] = 1;
                share_load[d] = load.clone();
            }
            if held.whole.contains(id) || shared.is_some() {
                for (key, amount) in needs[d].iter().flatten() {
                    if let Some(left) = remaining.get_mut(key) {
                        *left -= amount;
                    }
                }
            }
        }
        Self {
            used: vec![Vec::new(); available.devices.len()],
            shares,
            share_load,
            constraints,
            remaining,
            needs,
        }
    }

    /// Whether device `d` may go to `claim`: with admin access only not twice to the same
    /// claim, otherwise to no one else (upstream's `allocateDevice`:
    /// `allocatingDeviceForClaim` / `deviceInUse`), and its counters must remain
    /// (`checkAvailableCounters`). A device allowing multiple allocations goes to any
    /// number of requests while its capacity lasts, its counters charged by the first
    /// share only.
    /// The claim's `matchAttribute` constraints that bind `who` must hold for it too.
    fn can_take(&self, available: &NodeDevices, d: usize, who: &Who) -> bool {
        self.usable(available, d, who) && self.constraints_hold(available, d, who)
    }

    /// [`Round::can_take`] but for the claim's constraints.
    fn usable(&self, available: &NodeDevices, d: usize, who: &Who) -> bool {
        let device = available.devices[d].1;
        let share = who.shares.get(&d);
        let free = match share {
            Some(taken) => capacity::fits(
                taken,
                &self.share_load[d],
                device.capacity.as_ref().unwrap_or(&BTreeMap::new()),
            ),
            None if who.admin => !self.used[d].contains(&who.claim),
            None => self.used[d].is_empty(),
        };
        let counters_charged = share.is_some() && self.shares[d] > 0;
        let counters_left = self.needs[d].as_ref().is_some_and(|needs| {
            counters_charged
                || needs
                    .iter()
                    .all(|(key, amount)| self.remaining.get(key).is_some_and(|left| left >= amount))
        });
        free && counters_left
    }

    /// Whether the claim's constraints that bind `who` admit device `d`.
    fn constraints_hold(&self, available: &NodeDevices, d: usize, who: &Who) -> bool {
        let (id, device) = &available.devices[d];
        self.constraints
            .iter()
            .filter(|c| c.applies_to(who))
            .all(|c| c.admits(attribute_of(id, device, &c.attribute).as_ref()))
    }

    fn take(&mut self, available: &NodeDevices, d: usize, who: &Who) {
        let (id, device) = &available.devices[d];
        for c in self.constraints.iter_mut().filter(|c| c.applies_to(who)) {
            if let Some(value) = attribute_of(id, device, &c.attribute) {
                c.values.push(value);
            }
        }
        let charge = match who.shares.get(&d) {
            Some(taken) => {
                self.shares[d] += 1;
                for (name, q) in taken {
                    *self.share_load[d].entry(name.clone()).or_default() += q.nanos();
                }
                self.shares[d] == 1
            }
            None => {
                self.used[d].push(who.claim);
                true
            }
        };
        if charge {
            self.charge(d, -1);
        }
    }

    /// Undoes the last `take` of `d` for `who` (the search gives back in reverse order, so
    /// the share given back last is the one that charged the counters).
    fn give_back(&mut self, d: usize, who: &Who) {
        for c in self.constraints.iter_mut().filter(|c| c.applies_to(who)) {
            c.values.pop();
        }
        let refund = match who.shares.get(&d) {
            Some(taken) => {
                self.shares[d] -= 1;
                for (name, q) in taken {
                    *self.share_load[d].entry(name.clone()).or_default() -= q.nanos();
                }
                self.shares[d] == 0
            }
            None => {
                self.used[d].pop();
                true
            }
        };
        if refund {
            self.charge(d, 1);
        }
    }

    /// Adds `sign` times the counters device `d` consumes to what remains.
    fn charge(&mut self, d: usize, sign: i128) {
        for (key, amount) in self.needs[d].iter().flatten() {
            if let Some(left) = self.remaining.get_mut(key) {
                *left += sign * amount;
            }
        }
    }
}

/// One way to satisfy a request: the request itself (`exactly`) or one of its
/// `firstAvailable` subrequests, with the node's devices its selectors match.
struct Alternative<'a> {
    claim: usize,
    /// `claim <namespace>/<name>`, as the allocator's errors name it.
    claim_name: String,
    /// The name results carry: `request` or `request/subrequest`.
    result_name: String,
    class: &'a DeviceClass,
    /// `None` for `All`, else the count.
    count: Option<usize>,
    admin: bool,
    tolerations: &'a [DeviceToleration],
    matching: Vec<usize>,
    /// Of the matching devices that allow multiple allocations, what a share takes.
    shares: BTreeMap<usize, Consumption>,
    /// A device the selectors match has a taint the request does not tolerate: `All`
    /// cannot be had ("All devices must be untainted or all of their taints must be
    /// tolerated", the DRA docs; upstream's allocator counts the device in `allDevices` and
    /// then fails to allocate it, kubernetes/kubernetes#130447).
    untolerated: bool,
}

impl Alternative<'_> {
    fn who(&self) -> Who<'_> {
        Who {
            claim: self.claim,
            claim_name: &self.claim_name,
            admin: self.admin,
            request: self.result_name.clone(),
            shares: &self.shares,
        }
    }
}

/// The fields `exactly` and a subrequest share, as the allocator reads them.
struct RequestFields<'a> {
    class_name: &'a str,
    selectors: &'a [k8s_openapi::api::resource::v1::DeviceSelector],
    allocation_mode: Option<&'a str>,
    count: Option<i64>,
    admin: bool,
    tolerations: &'a [DeviceToleration],
    capacity: Option<&'a k8s_openapi::api::resource::v1::CapacityRequirements>,
}

/// Compiled programs, kept across nodes and pods of one scheduling pass, and how the
/// emulated release's allocator words their errors.
#[derive(Default)]
pub struct Programs {
    compiled: HashMap<String, Result<Arc<cel::Program>, String>>,
    /// From 1.37 a CEL runtime error names the device and gets `EnhanceRuntimeError`'s
    /// hint (k8s.io/dynamic-resource-allocation v0.37 `structured/internal/*/allocator_*.go`,
    /// `selectorsMatch`); up to 1.36 it is `<whose>: selector #<i>: CEL runtime error: <e>`.
    runtime_errors_name_the_device: bool,
    /// From 1.37 a config of the allocation that applies to every request of the claim
    /// names none ("empty means all", kubernetes/kubernetes#139731); before, it lists them.
    configs_for_all_name_no_request: bool,
    /// Capacity ranges may count in milli-units (DRAFractionalCapacityRange).
    fractional_capacity: bool,
}

impl std::fmt::Debug for Programs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Programs")
            .field("count", &self.compiled.len())
            .finish()
    }
}

impl Programs {
    /// Programs evaluated as the allocator of Kubernetes `server_version` does;
    /// `fractional_capacity`: DRAFractionalCapacityRange is on.
    pub fn for_release(server_version: (u32, u32), fractional_capacity: bool) -> Self {
        Self {
            compiled: HashMap::new(),
            runtime_errors_name_the_device: server_version >= (1, 37),
            configs_for_all_name_no_request: server_version >= (1, 37),
            fractional_capacity,
        }
    }

    /// The compiled program, or why there is none. One whose estimated cost passes the
    /// limit is never evaluated: kube-scheduler's runtime cost limit would stop it
    /// (`cel.CostLimit(CELSelectorExpressionMaxCost)` in k8s.io/dynamic-resource-allocation
    /// `cel/compile.go`), and the `cel` crate cannot be stopped once it runs.
    fn get(&mut self, expression: &str) -> Result<Arc<cel::Program>, String> {
        self.compiled
            .entry(expression.to_string())
            .or_insert_with(|| {
                let program = compile(expression).map_err(|e| e.to_string())?;
                let cost = crate::cel::with_stack(|| crate::cel::estimate(&program));
                if cost > crate::cel::MAX_COST {
                    return Err(format!(
                        "estimated cost {cost} exceeds the limit {}: operation cancelled: actual cost limit exceeded",
                        crate::cel::MAX_COST
                    ));
                }
                Ok(Arc::new(program))
            })
            .clone()
    }
}

pub(super) fn selector_matches(
    programs: &mut Programs,
    selectors: &[DeviceSelector],
    whose: &str,
    id: &DeviceId,
    device: &Device,
) -> Result<bool, AllocateError> {
    for (i, selector) in selectors.iter().enumerate() {
        let Some(expression) = selector.cel.as_ref().map(|c| c.expression.as_str()) else {
            return Err(AllocateError::Unresolvable(format!(
                "{whose}: selector #{i} has no cel expression (the only selector kind)"
            )));
        };
        // Worded as the upstream allocator (k8s.io/dynamic-resource-allocation/structured,
        // selectorsMatch): `whose` is `class <name>` or `claim <namespace>/<name>`.
        let program = programs.get(expression).map_err(|e| {
            AllocateError::Filter(format!("{whose}: selector #{i}: CEL compile error: {e}"))
        })?;
        let ok = evaluate(&program, expression, &id.driver, device).map_err(|e| {
            AllocateError::Filter(if programs.runtime_errors_name_the_device {
                format!(
                    "{whose}: selector #{i} on device {}/{}/{}: CEL runtime error: {}",
                    id.driver,
                    id.pool,
                    id.device,
                    enhance_runtime_error(&e)
                )
            } else {
                format!(
                    "{whose}: selector #{i}: CEL runtime error: {}",
                    cel_go_error(&e)
                )
            })
        })?;
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

/// A CEL runtime error of the `cel` crate as cel-go words it.
fn cel_go_error(error: &str) -> String {
    match error.strip_prefix("No such key: ") {
        Some(key) => format!("no such key: {key}"),
        None => error.to_string(),
    }
}

/// A CEL runtime error as cel-go words it, with the hint upstream's
/// `cel.EnhanceRuntimeError` adds to a missing map key (k8s.io/dynamic-resource-allocation/cel).
pub(super) fn enhance_runtime_error(error: &str) -> String {
    let error = cel_go_error(error);
    if error.contains("no such key:") {
        format!(
            "{error}. consider using CEL optional chaining (.? followed by orValue()) or guarding the check with has() for optional fields"
        )
    } else {
        error
    }
}

/// The device features the emulated allocator does not implement: upstream's allocator
/// would honour them, so a device using one is never allocated here by guesswork.
fn unsupported_feature(device: &Device) -> Option<&'static str> {
    if device
        .binding_conditions
        .as_ref()
        .is_some_and(|c| !c.is_empty())
    {
        return Some("bindingConditions (binding conditions)");
    }
    None
}

/// Whether the request's tolerations tolerate every taint of the device that keeps new
/// allocations off it (`NoSchedule`, `NoExecute`; `None` and unknown effects do not, as
/// the API says consumers must treat unknown effects like `None`), as upstream's
/// `allocator.go` checks with `resourceclaim.ToleratesTaint`.
fn tolerates(device: &Device, tolerations: &[DeviceToleration]) -> bool {
    device.taints.iter().flatten().all(|t| {
        !matches!(t.effect.as_str(), "NoSchedule" | "NoExecute") || tolerated(t, tolerations)
    })
}

/// Whether one of `tolerations` tolerates `taint` (key, operator `Exists`/`Equal`,
/// value, effect; an empty key or effect matches any).
pub(super) fn tolerated(taint: &DeviceTaint, tolerations: &[DeviceToleration]) -> bool {
    tolerations.iter().any(|tol| {
        let effect_ok = tol
            .effect
            .as_deref()
            .is_none_or(|e| e.is_empty() || e == taint.effect);
        let key_ok = tol
            .key
            .as_deref()
            .is_none_or(|k| k.is_empty() || k == taint.key);
        let value_ok = match tol.operator.as_deref().unwrap_or("Equal") {
            "Exists" => true,
            _ => {
                tol.value.as_deref().unwrap_or_default()
                    == taint.value.as_deref().unwrap_or_default()
            }
        };
        effect_ok && key_ok && value_ok
    })
}

/// Allocates all `claims` together on `node`: `Ok(Some(allocations))` (one `status.allocation`
/// per claim, in order), `Ok(None)` when the node cannot hold them, `Err` when no node can.
pub fn allocate_on_node(
    node: &str,
    claims: &[&ResourceClaim],
    classes: &BTreeMap<String, DeviceClass>,
    slices: &[ResourceSlice],
    held: &Held,
    programs: &mut Programs,
) -> Result<Option<Vec<Value>>, AllocateError> {
    let available = node_devices(node, slices);
    // Every request's alternatives, each resolved against the node up front, as upstream
    // validates every subrequest before it allocates anything.
    let mut requests: Vec<Vec<Alternative>> = Vec::new();
    let mut constraints = Vec::new();
    for (ci, claim) in claims.iter().enumerate() {
        let claim_name = format!(
            "claim {}/{}",
            claim.metadata.namespace.as_deref().unwrap_or_default(),
            claim.metadata.name.as_deref().unwrap_or_default()
        );
        let devices = claim.spec.devices.as_ref();
        for constraint in devices
            .and_then(|d| d.constraints.as_ref())
            .into_iter()
            .flatten()
        {
            let (distinct, attribute) =
                match (&constraint.match_attribute, &constraint.distinct_attribute) {
                    (Some(attribute), _) => (false, attribute.clone()),
                    (None, Some(attribute)) => (true, attribute.clone()),
                    // Upstream: "empty constraint (unsupported constraint type?)".
                    (None, None) => {
                        return Err(AllocateError::Unresolvable(format!(
                            "{claim_name}: empty constraint (unsupported constraint type?)"
                        )));
                    }
                };
            constraints.push(AttributeConstraint {
                claim: ci,
                distinct,
                requests: constraint.requests.clone().unwrap_or_default(),
                attribute,
                values: Vec::new(),
            });
        }
        for request in devices
            .and_then(|d| d.requests.as_ref())
            .into_iter()
            .flatten()
        {
            let whose = format!("{claim_name}, request {}", request.name);
            let shapes: Vec<(String, RequestFields)> =
                match (&request.exactly, &request.first_available) {
                    (Some(exact), _) => vec![(
                        request.name.clone(),
                        RequestFields {
                            class_name: &exact.device_class_name,
                            selectors: exact.selectors.as_deref().unwrap_or_default(),
                            allocation_mode: exact.allocation_mode.as_deref(),
                            count: exact.count,
                            admin: exact.admin_access == Some(true),
                            tolerations: exact.tolerations.as_deref().unwrap_or_default(),
                            capacity: exact.capacity.as_ref(),
                        },
                    )],
                    (None, Some(subrequests)) if !subrequests.is_empty() => subrequests
                        .iter()
                        .map(|sub| {
                            (
                                format!("{}/{}", request.name, sub.name),
                                RequestFields {
                                    class_name: &sub.device_class_name,
                                    selectors: sub.selectors.as_deref().unwrap_or_default(),
                                    allocation_mode: sub.allocation_mode.as_deref(),
                                    count: sub.count,
                                    admin: false,
                                    tolerations: sub.tolerations.as_deref().unwrap_or_default(),
                                    capacity: sub.capacity.as_ref(),
                                },
                            )
                        })
                        .collect(),
                    _ => {
                        return Err(AllocateError::Unresolvable(format!(
                            "{whose}: neither exactly nor firstAvailable is set"
                        )));
                    }
                };
            let mut alternatives = Vec::new();
            for (result_name, fields) in shapes {
                let whose = format!("{claim_name}, request {result_name}");
                alternatives.push(resolve(
                    ci,
                    result_name,
                    &whose,
                    &claim_name,
                    &fields,
                    classes,
                    &available,
                    programs,
                )?);
            }
            requests.push(alternatives);
        }
    }
    // The subrequests' combinations in order, the first request's choice the slowest to
    // change: upstream's depth-first search tries a request's next subrequest only once
    // everything after it failed with the current one.
    let mut choice = vec![0usize; requests.len()];
    let mut budget = SEARCH_BUDGET;
    loop {
        let picked: Vec<&Alternative> = requests
            .iter()
            .zip(&choice)
            .map(|(alts, c)| &alts[*c])
            .collect();
        if let Some(chosen) =
            try_alternatives(&picked, &available, held, &constraints, &mut budget)?
        {
            let empty_means_all = programs.configs_for_all_name_no_request;
            return Ok(Some(allocations(
                node,
                claims,
                &picked,
                &chosen,
                &available,
                empty_means_all,
            )));
        }
        if budget == 0 || !next_choice(&mut choice, &requests) {
            return Ok(None);
        }
    }
}

/// The next combination of subrequest choices (the last request's first), false after
/// the last one.
fn next_choice(choice: &mut [usize], requests: &[Vec<Alternative>]) -> bool {
    for i in (0..choice.len()).rev() {
        if choice[i] + 1 < requests[i].len() {
            choice[i] += 1;
            choice[i + 1..].iter_mut().for_each(|c| *c = 0);
            return true;
        }
    }
    false
}

/// One request or subrequest against the node: its class, and the devices its class's
/// and its own selectors match and whose taints it tolerates.
#[allow(clippy::too_many_arguments)]
fn resolve<'a>(
    claim: usize,
    result_name: String,
    whose: &str,
    claim_name: &str,
    fields: &RequestFields<'a>,
    classes: &'a BTreeMap<String, DeviceClass>,
    available: &NodeDevices,
    programs: &mut Programs,
) -> Result<Alternative<'a>, AllocateError> {
    let requested = capacity::requested(fields.capacity.and_then(|c| c.requests.as_ref()))
        .map_err(|e| AllocateError::Unresolvable(format!("{whose}: {e}")))?;
    let class = classes.get(fields.class_name).ok_or_else(|| {
        AllocateError::Unresolvable(format!(
            "{whose}: could not retrieve device class {}: deviceclasses.resource.k8s.io \"{}\" not found",
            fields.class_name, fields.class_name
        ))
    })?;
    let class_selectors = class.spec.selectors.as_deref().unwrap_or_default();
    let class_whose = format!("class {}", fields.class_name);
    let mut matching = Vec::new();
    let mut shares = BTreeMap::new();
    let mut untolerated = false;
    let no_capacity = BTreeMap::new();
    for (i, (id, device)) in available.devices.iter().enumerate() {
        if selector_matches(programs, class_selectors, &class_whose, id, device)?
            && selector_matches(programs, fields.selectors, claim_name, id, device)?
        {
            if let Some(feature) = unsupported_feature(device) {
                return Err(AllocateError::Unresolvable(format!(
                    "{whose}: device {}/{}/{} uses {feature}, which the emulated scheduler does not implement; it allocates no such device (run this on a real cluster: docs/real-kubernetes.md)",
                    id.driver, id.pool, id.device
                )));
            }
            // Upstream checks capacity right after the selectors
            // (`CmpRequestOverCapacity`), the taints only when it allocates; what a share
            // takes is the same on every try.
            let device_capacity = device.capacity.as_ref().unwrap_or(&no_capacity);
            let mut share = None;
            if !requested.is_empty() || !device_capacity.is_empty() {
                let taken = capacity::consumption(
                    &requested,
                    device_capacity,
                    programs.fractional_capacity,
                )
                .map_err(|e| {
                    AllocateError::Filter(format!(
                        "{whose}: checking capacity for device {}/{}/{}: {e}",
                        id.driver, id.pool, id.device
                    ))
                })?;
                let Some(taken) = taken else {
                    continue;
                };
                if device.allow_multiple_allocations == Some(true) {
                    share = Some(taken);
                } else if !capacity::fits(&taken, &BTreeMap::new(), device_capacity) {
                    continue;
                }
            }
            if !tolerates(device, fields.tolerations) {
                untolerated = true;
                continue;
            }
            if let Some(taken) = share {
                shares.insert(i, taken);
            }
            matching.push(i);
        }
    }
    let count = match fields.allocation_mode.unwrap_or("ExactCount") {
        "All" => None,
        "ExactCount" => Some(usize::try_from(fields.count.unwrap_or(1).max(1)).unwrap_or(1)),
        other => {
            return Err(AllocateError::Unresolvable(format!(
                "{whose}: unsupported allocationMode {other:?}"
            )));
        }
    };
    Ok(Alternative {
        claim,
        claim_name: claim_name.to_owned(),
        result_name,
        class,
        count,
        admin: fields.admin,
        tolerations: fields.tolerations,
        matching,
        shares,
        untolerated,
    })
}

/// The devices for one combination of alternatives (one list per alternative), `None`
/// when the node cannot hold it, `Err` when upstream's allocator gives up on the pod (an
/// `All` request whose devices a constraint refuses).
fn try_alternatives(
    picked: &[&Alternative],
    available: &NodeDevices,
    held: &Held,
    constraints: &[AttributeConstraint],
    budget: &mut usize,
) -> Result<Option<Vec<Vec<usize>>>, AllocateError> {
    let is_taken = |i: &usize| held.whole.contains(&available.devices[*i].0);
    let mut slots = Vec::new();
    for alt in picked {
        match alt.count {
            None => {
                // "At least one device must exist on the node for the allocation to
                // succeed. Allocation will fail if some devices are already allocated"
                // (admin access aside: it holds none).
                let pools_complete = alt.matching.iter().all(|i| {
                    let id = &available.devices[*i].0;
                    !available
                        .incomplete
                        .contains(&(id.driver.clone(), id.pool.clone()))
                });
                if alt.matching.is_empty()
                    || alt.untolerated
                    || !pools_complete
                    || (!alt.admin && alt.matching.iter().any(is_taken))
                {
                    return Ok(None);
                }
                slots.push(Slot::Fixed {
                    who: alt.who(),
                    devices: alt.matching.clone(),
                });
            }
            Some(count) => {
                let candidates: Vec<usize> = alt
                    .matching
                    .iter()
                    .copied()
                    .filter(|i| alt.admin || !is_taken(i))
                    .collect();
                if candidates.len() < count {
                    return Ok(None);
                }
                slots.push(Slot::Pick {
                    who: alt.who(),
                    count,
                    candidates,
                });
            }
        }
    }
    let mut round = Round::new(available, held, constraints.to_vec());
    let mut chosen: Vec<Vec<usize>> = slots.iter().map(|_| Vec::new()).collect();
    Ok(search(available, &slots, 0, 0, &mut round, &mut chosen, budget)?.then_some(chosen))
}

/// Each claim's `status.allocation`: the results in request order, class configuration
/// once per class (naming every request that uses the class) then the claim's own, as
/// upstream's allocator writes them (kubernetes/kubernetes#134793, in 1.35 and patch
/// releases of 1.32-1.34), and the node selector.
fn allocations(
    node: &str,
    claims: &[&ResourceClaim],
    picked: &[&Alternative],
    chosen: &[Vec<usize>],
    available: &NodeDevices,
    empty_means_all: bool,
) -> Vec<Value> {
    let mut out = Vec::new();
    for (ci, claim) in claims.iter().enumerate() {
        let mut results = Vec::new();
        let mut config: Vec<Value> = Vec::new();
        let mut class_configs: BTreeMap<&str, std::ops::Range<usize>> = BTreeMap::new();
        let mine: Vec<(&Alternative, &Vec<usize>)> = picked
            .iter()
            .zip(chosen)
            .filter(|(alt, _)| alt.claim == ci)
            .map(|(alt, devices)| (*alt, devices))
            .collect();
        for (alt, devices) in &mine {
            for d in *devices {
                let id = &available.devices[*d].0;
                let mut result = json!({"request": alt.result_name, "driver": id.driver, "pool": id.pool, "device": id.device});
                if alt.admin {
                    result["adminAccess"] = json!(true);
                }
                // A share gets an id of its own (`GenerateShareID`: a random UUID).
                if let Some(taken) = alt.shares.get(d) {
                    result["shareID"] = json!(uuid::Uuid::new_v4().to_string());
                    if !taken.is_empty() {
                        result["consumedCapacity"] = json!(capacity::as_written(taken));
                    }
                }
                if !alt.tolerations.is_empty() {
                    result["tolerations"] =
                        serde_json::to_value(alt.tolerations).unwrap_or(Value::Null);
                }
                results.push(result);
            }
        }
        for (alt, _) in &mine {
            let class_name = alt.class.metadata.name.as_deref().unwrap_or_default();
            if let Some(range) = class_configs.get(class_name) {
                for entry in &mut config[range.clone()] {
                    if let Some(requests) = entry["requests"].as_array_mut() {
                        requests.push(json!(alt.result_name));
                    }
                }
                continue;
            }
            let start = config.len();
            for c in alt.class.spec.config.iter().flatten() {
                let mut entry = json!({"source": "FromClass", "requests": [alt.result_name]});
                if let Some(opaque) = &c.opaque {
                    entry["opaque"] = serde_json::to_value(opaque).unwrap_or(Value::Null);
                }
                config.push(entry);
            }
            class_configs.insert(class_name, start..config.len());
        }
        // The claim's own config applies where it names a request or the chosen subrequest.
        let names: Vec<(&str, &str)> = mine
            .iter()
            .map(|(alt, _)| {
                let parent = alt.result_name.split('/').next().unwrap_or_default();
                (parent, alt.result_name.as_str())
            })
            .collect();
        for c in claim
            .spec
            .devices
            .as_ref()
            .and_then(|d| d.config.as_ref())
            .into_iter()
            .flatten()
        {
            let requests = c.requests.as_deref().unwrap_or_default();
            let applies = requests.is_empty()
                || names
                    .iter()
                    .any(|(parent, full)| requests.iter().any(|r| r == parent || r == full));
            if !applies {
                continue;
            }
            let mut entry = json!({"source": "FromClaim"});
            if !requests.is_empty() {
                entry["requests"] = json!(requests);
            }
            if let Some(opaque) = &c.opaque {
                entry["opaque"] = serde_json::to_value(opaque).unwrap_or(Value::Null);
            }
            config.push(entry);
        }
        // A config naming every request applies to all: upstream then leaves its
        // requests out ("empty means all").
        for entry in config.iter_mut().filter(|_| empty_means_all) {
            let covers_all = entry["requests"].as_array().is_some_and(|listed| {
                names.iter().all(|(parent, full)| {
                    listed
                        .iter()
                        .any(|r| r.as_str() == Some(parent) || r.as_str() == Some(full))
                })
            });
            if covers_all && let Some(map) = entry.as_object_mut() {
                map.remove("requests");
            }
        }
        let mut devices = json!({"results": results});
        if !config.is_empty() {
            devices["config"] = Value::Array(config);
        }
        out.push(json!({"devices": devices, "nodeSelector": node_selector_for(node)}));
    }
    out
}

/// Backtracking over the slots in request order: an `All` slot takes its devices or fails,
/// an `ExactCount` slot tries combinations in candidate order, so the first solution takes
/// the first free devices, as upstream's allocator does. An `All` device that only a
/// constraint refuses ends the search with upstream's error: "It does not make sense to
/// declare a claim where a constraint prevents getting all devices. Treat this as an
/// error" (`allocateDevice` with `must`), which fails the pod's scheduling attempt on
/// every node, not only this one.
fn search(
    available: &NodeDevices,
    slots: &[Slot],
    slot: usize,
    start: usize,
    round: &mut Round,
    chosen: &mut [Vec<usize>],
    budget: &mut usize,
) -> Result<bool, AllocateError> {
    let Some(current) = slots.get(slot) else {
        return Ok(true);
    };
    let (who, count, candidates) = match current {
        Slot::Fixed { who, devices } => {
            let mut taken = 0;
            let mut outcome = Ok(false);
            for d in devices {
                if !round.can_take(available, *d, who) {
                    if round.usable(available, *d, who) {
                        let id = &available.devices[*d].0;
                        let request = who.request.rsplit('/').next().unwrap_or_default();
                        outcome = Err(AllocateError::Filter(format!(
                            "{}, request {request}: cannot add device {}/{}/{} because a claim constraint would not be satisfied",
                            who.claim_name, id.driver, id.pool, id.device
                        )));
                    }
                    break;
                }
                round.take(available, *d, who);
                taken += 1;
            }
            if taken == devices.len() {
                chosen[slot].clone_from(devices);
                outcome = search(available, slots, slot + 1, 0, round, chosen, budget);
                if matches!(outcome, Ok(true)) {
                    return outcome;
                }
                chosen[slot].clear();
            }
            for d in devices[..taken].iter().rev() {
                round.give_back(*d, who);
            }
            return outcome;
        }
        Slot::Pick {
            who,
            count,
            candidates,
        } => (who, *count, candidates),
    };
    if chosen[slot].len() == count {
        return search(available, slots, slot + 1, 0, round, chosen, budget);
    }
    for (pos, d) in candidates.iter().enumerate().skip(start) {
        if *budget == 0 {
            return Ok(false);
        }
        *budget -= 1;
        if !round.can_take(available, *d, who) {
            continue;
        }
        round.take(available, *d, who);
        chosen[slot].push(*d);
        if search(available, slots, slot, pos + 1, round, chosen, budget)? {
            return Ok(true);
        }
        chosen[slot].pop();
        round.give_back(*d, who);
    }
    Ok(false)
}
