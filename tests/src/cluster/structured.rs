//! Structured DRA (Kubernetes 1.32+): the kube-scheduler's `DynamicResources` plugin
//! allocating devices from ResourceSlices
//! (`pkg/scheduler/framework/plugins/dynamicresources`, with the allocator of
//! `staging/src/k8s.io/dynamic-resource-allocation/structured/allocator.go`), and the access
//! to `resource.k8s.io` the other components share.
//!
//! For one pod at a time:
//!
//! - PreFilter: every claim of the pod exists, is not being deleted, is owned by the pod
//!   when generated, and has room in `reservedFor` (structured claims are always shareable).
//! - Filter, per node: an allocated claim limits the pod to its `nodeSelector`; the
//!   unallocated ones must all be allocatable together from the devices of the node's
//!   ResourceSlices (`spec.nodeName`), which no other claim's allocation lists. A device
//!   matches a request when every CEL selector of its DeviceClass and of the request is
//!   true; `ExactCount` takes `count` devices, `All` takes every matching device (at least
//!   one, none of them allocated).
//! - PostFilter: when no node fits, allocated claims nobody uses are deallocated so the
//!   next attempt can place them elsewhere.
//! - Reserve/PreBind: the `resource.kubernetes.io/delete-protection` finalizer, then
//!   `status.allocation` and `reservedFor` in one status update; Bind.
//!
//! What the allocator does not implement is refused with an Event, never guessed:
//! `firstAvailable`, `constraints`, `adminAccess`, capacity requests, and slices published
//! for `nodeSelector`/`allNodes`/per-device nodes (logged and skipped).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, LazyLock};

use fake_dra_crds::node_selector::{self, NodeView};
use fake_dra_crds::pod::ClassicPod;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{Device, DeviceSelector};
pub use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice,
};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::{Events, level_triggered, object_ref};
use crate::apiserver::{ResourceKey, WatchEvent, conversion, resource_api_versions};

/// `resourceapi.Finalizer`: put on a claim by the scheduler before it writes an allocation,
/// removed by the resourceclaim controller once the claim is deallocated.
pub const DELETE_PROTECTION_FINALIZER: &str = "resource.kubernetes.io/delete-protection";
/// `ResourceClaimReservedForMaxSize` of structured DRA.
pub const RESERVED_FOR_MAX: usize = 256;
/// Upper bound on the allocator's backtracking steps per node (upstream bounds its search
/// by a timeout; a pod that needs more is reported unschedulable, never half-allocated).
const SEARCH_BUDGET: usize = 100_000;

// ---------------------------------------------------------------------------------------
// resource.k8s.io access

/// `resource.k8s.io` through the version the emulated release prefers (`v1` from 1.34,
/// `v1beta1` on 1.32/1.33), with every object converted to `v1`'s layout so one code path
/// serves both — what the components' informers do through the internal version upstream.
#[derive(Clone)]
pub struct ResourceApi {
    client: kube::Client,
    version: &'static str,
}

impl std::fmt::Debug for ResourceApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceApi")
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

fn conversion_error(message: String) -> kube::Error {
    kube::Error::SerdeError(<serde_json::Error as serde::de::Error>::custom(message))
}

impl ResourceApi {
    /// `None` when the release serves classic DRA (`v1alpha2`) or is not emulated.
    pub fn for_server(client: kube::Client, server_version: (u32, u32)) -> Option<Self> {
        let version = *resource_api_versions(server_version).ok()?.first()?;
        (version != "v1alpha2").then_some(Self { client, version })
    }

    /// The version requests go through.
    pub fn version(&self) -> &'static str {
        self.version
    }

    fn api<T: k8s_openapi::Resource>(&self, namespace: Option<&str>) -> Api<DynamicObject> {
        let resource = ApiResource {
            group: T::GROUP.into(),
            version: self.version.into(),
            api_version: format!("{}/{}", T::GROUP, self.version),
            kind: T::KIND.into(),
            plural: T::URL_PATH_SEGMENT.into(),
        };
        match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        }
    }

    fn key<T: k8s_openapi::Resource>() -> ResourceKey {
        ResourceKey {
            group: T::GROUP.into(),
            plural: T::URL_PATH_SEGMENT.into(),
        }
    }

    fn decode<T: k8s_openapi::Resource + DeserializeOwned>(
        &self,
        object: DynamicObject,
    ) -> Result<T, kube::Error> {
        let mut value = serde_json::to_value(object).map_err(kube::Error::SerdeError)?;
        conversion::to_storage(&Self::key::<T>(), self.version, &mut value)
            .map_err(|e| conversion_error(e.message))?;
        value["apiVersion"] = Value::String(T::API_VERSION.into());
        value["kind"] = Value::String(T::KIND.into());
        serde_json::from_value(value).map_err(kube::Error::SerdeError)
    }

    fn encode<T: k8s_openapi::Resource + Serialize>(
        &self,
        object: &T,
    ) -> Result<DynamicObject, kube::Error> {
        let mut value = serde_json::to_value(object).map_err(kube::Error::SerdeError)?;
        conversion::from_storage(&Self::key::<T>(), self.version, &mut value);
        value["apiVersion"] = Value::String(format!("{}/{}", T::GROUP, self.version));
        serde_json::from_value(value).map_err(kube::Error::SerdeError)
    }

    pub async fn list<T: k8s_openapi::Resource + DeserializeOwned>(
        &self,
        namespace: Option<&str>,
    ) -> Result<Vec<T>, kube::Error> {
        self.api::<T>(namespace)
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .map(|o| self.decode(o))
            .collect()
    }

    pub async fn get<T: k8s_openapi::Resource + DeserializeOwned>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<T>, kube::Error> {
        self.api::<T>(namespace)
            .get_opt(name)
            .await?
            .map(|o| self.decode(o))
            .transpose()
    }

    pub async fn create<T: k8s_openapi::Resource + Serialize + DeserializeOwned>(
        &self,
        namespace: Option<&str>,
        object: &T,
    ) -> Result<T, kube::Error> {
        let created = self
            .api::<T>(namespace)
            .create(&PostParams::default(), &self.encode(object)?)
            .await?;
        self.decode(created)
    }

    /// A merge patch of the main resource (metadata only: spec layouts differ by version);
    /// returns the new resourceVersion.
    pub async fn patch_metadata<T: k8s_openapi::Resource>(
        &self,
        namespace: Option<&str>,
        name: &str,
        patch: &Value,
    ) -> Result<Option<String>, kube::Error> {
        if patch.get("spec").is_some() {
            return Err(conversion_error(
                "patch_metadata patches metadata only".into(),
            ));
        }
        let patched = self
            .api::<T>(namespace)
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        Ok(patched.metadata.resource_version)
    }

    /// A merge patch of `/status` (claim status is the same in every structured version);
    /// returns the new resourceVersion.
    pub async fn patch_status<T: k8s_openapi::Resource>(
        &self,
        namespace: Option<&str>,
        name: &str,
        patch: &Value,
    ) -> Result<Option<String>, kube::Error> {
        let patched = self
            .api::<T>(namespace)
            .patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        Ok(patched.metadata.resource_version)
    }

    pub async fn delete<T: k8s_openapi::Resource>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<(), kube::Error> {
        self.api::<T>(namespace)
            .delete(name, &DeleteParams::default())
            .await?;
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------
// CEL

/// Compiles a selector expression (the `cel` crate is a real CEL implementation).
pub fn compile(expression: &str) -> Result<cel::Program, String> {
    cel::Program::compile(expression).map_err(|e| e.to_string())
}

/// `device.attributes["<domain>"]` / `device.capacity["<domain>"]` with a literal domain.
static DOMAIN_LOOKUP: LazyLock<Option<regex::Regex>> =
    LazyLock::new(|| regex::Regex::new(r#"(?:attributes|capacity)\s*\[\s*"([^"]+)"\s*\]"#).ok());

/// The `device` variable of the DRA CEL environment
/// (`staging/src/k8s.io/dynamic-resource-allocation/cel/compile.go`): `driver`,
/// `attributes` and `capacity` as maps from domain to maps from name. A name without a
/// domain belongs to the driver's domain; a domain the device has nothing in is an empty
/// map (upstream resolves unknown domains lazily to empty maps, so
/// `device.attributes["other.example.com"].x` is a "no such key" error, not a type error).
///
/// Deviations, on purpose and documented: `version` attributes are strings (upstream: the
/// `semver` type, so `isGreaterThan` etc. fail to evaluate here), capacities are their
/// quantity strings (upstream: `quantity`).
pub fn device_variable(driver: &str, device: &Device, expression: &str) -> cel::Value {
    let mut attributes: HashMap<String, HashMap<String, cel::Value>> = HashMap::new();
    let mut capacity: HashMap<String, HashMap<String, cel::Value>> = HashMap::new();
    attributes.entry(driver.into()).or_default();
    capacity.entry(driver.into()).or_default();
    if let Some(re) = DOMAIN_LOOKUP.as_ref() {
        for domain in re.captures_iter(expression).filter_map(|c| c.get(1)) {
            attributes.entry(domain.as_str().into()).or_default();
            capacity.entry(domain.as_str().into()).or_default();
        }
    }
    let split = |name: &str| match name.split_once('/') {
        Some((domain, id)) => (domain.to_string(), id.to_string()),
        None => (driver.to_string(), name.to_string()),
    };
    for (name, attribute) in device.attributes.iter().flatten() {
        let value = if let Some(b) = attribute.bool {
            cel::Value::Bool(b)
        } else if let Some(i) = attribute.int {
            cel::Value::Int(i)
        } else if let Some(s) = &attribute.string {
            cel::Value::from(s.clone())
        } else if let Some(v) = &attribute.version {
            cel::Value::from(v.clone())
        } else {
            continue;
        };
        let (domain, id) = split(name);
        attributes.entry(domain).or_default().insert(id, value);
    }
    for (name, cap) in device.capacity.iter().flatten() {
        let (domain, id) = split(name);
        capacity
            .entry(domain)
            .or_default()
            .insert(id, cel::Value::from(cap.value.0.clone()));
    }
    let mut variable: HashMap<String, cel::Value> = HashMap::new();
    variable.insert("driver".into(), cel::Value::from(driver));
    variable.insert("attributes".into(), attributes.into());
    variable.insert("capacity".into(), capacity.into());
    variable.into()
}

/// Evaluates a compiled selector for one device; a non-bool result is an error, as
/// upstream's type check makes it.
pub fn evaluate(
    program: &cel::Program,
    expression: &str,
    driver: &str,
    device: &Device,
) -> Result<bool, String> {
    let mut context = cel::Context::default();
    context.add_variable_from_value("device", device_variable(driver, device, expression));
    match program.execute(&context) {
        Ok(cel::Value::Bool(b)) => Ok(b),
        Ok(other) => Err(format!("must evaluate to bool, got {other:?}")),
        Err(e) => Err(e.to_string()),
    }
}

// ---------------------------------------------------------------------------------------
// The allocator

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
    /// A CEL selector failed to compile or evaluate; the message names the expression.
    #[error("{0}")]
    Cel(String),
}

/// The devices allocated by every claim's `status.allocation`.
pub fn allocated_devices<'a>(
    claims: impl IntoIterator<Item = &'a ResourceClaim>,
) -> BTreeSet<DeviceId> {
    claims
        .into_iter()
        .filter_map(|c| {
            c.status
                .as_ref()?
                .allocation
                .as_ref()?
                .devices
                .as_ref()?
                .results
                .as_ref()
        })
        .flatten()
        .map(|r| DeviceId {
            driver: r.driver.clone(),
            pool: r.pool.clone(),
            device: r.device.clone(),
        })
        .collect()
}

/// `status.allocation.nodeSelector` for devices local to `node`, as upstream writes it.
pub fn node_selector_for(node: &str) -> Value {
    json!({"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]})
}

/// The node-local devices of one node: slices with `spec.nodeName == node`, only the
/// newest generation of each pool (`GatherPools`), in a stable order.
struct NodeDevices<'a> {
    devices: Vec<(DeviceId, &'a Device)>,
    /// Pools whose newest generation lacks slices (`resourceSliceCount` not reached).
    incomplete: BTreeSet<(String, String)>,
}

fn node_devices<'a>(node: &str, slices: &'a [ResourceSlice]) -> NodeDevices<'a> {
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
    for s in current {
        let entry = counts
            .entry((s.spec.driver.clone(), s.spec.pool.name.clone()))
            .or_insert((0, s.spec.pool.resource_slice_count));
        entry.0 += 1;
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
enum Slot {
    /// `All`: exactly these devices.
    Fixed {
        claim: usize,
        request: String,
        devices: Vec<usize>,
    },
    /// `ExactCount`: `count` of these candidates.
    Pick {
        claim: usize,
        request: String,
        count: usize,
        candidates: Vec<usize>,
    },
}

/// Compiled programs, kept across nodes and pods of one scheduling pass.
#[derive(Default)]
pub struct Programs(HashMap<String, Result<Arc<cel::Program>, String>>);

impl std::fmt::Debug for Programs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Programs")
            .field("count", &self.0.len())
            .finish()
    }
}

impl Programs {
    fn get(&mut self, expression: &str) -> Result<Arc<cel::Program>, String> {
        self.0
            .entry(expression.to_string())
            .or_insert_with(|| compile(expression).map(Arc::new))
            .clone()
    }
}

fn selector_matches(
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
            AllocateError::Cel(format!("{whose}: selector #{i}: CEL compile error: {e}"))
        })?;
        let ok = evaluate(&program, expression, &id.driver, device).map_err(|e| {
            AllocateError::Cel(format!(
                "{whose}: selector #{i} on device {}/{}/{}: CEL runtime error: {}",
                id.driver,
                id.pool,
                id.device,
                enhance_runtime_error(&e)
            ))
        })?;
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

/// A CEL runtime error as cel-go words it, with the hint upstream's
/// `cel.EnhanceRuntimeError` adds to a missing map key (k8s.io/dynamic-resource-allocation/cel).
fn enhance_runtime_error(error: &str) -> String {
    let error = match error.strip_prefix("No such key: ") {
        Some(key) => format!("no such key: {key}"),
        None => error.to_string(),
    };
    if error.contains("no such key:") {
        format!(
            "{error}. consider using CEL optional chaining (.? followed by orValue()) or guarding the check with has() for optional fields"
        )
    } else {
        error
    }
}

/// Allocates all `claims` together on `node`: `Ok(Some(allocations))` (one `status.allocation`
/// per claim, in order), `Ok(None)` when the node cannot hold them, `Err` when no node can.
pub fn allocate_on_node(
    node: &str,
    claims: &[&ResourceClaim],
    classes: &BTreeMap<String, DeviceClass>,
    slices: &[ResourceSlice],
    taken: &BTreeSet<DeviceId>,
    programs: &mut Programs,
) -> Result<Option<Vec<Value>>, AllocateError> {
    let available = node_devices(node, slices);
    let mut slots = Vec::new();
    for (ci, claim) in claims.iter().enumerate() {
        let claim_name = format!(
            "claim {}/{}",
            claim.metadata.namespace.as_deref().unwrap_or_default(),
            claim.metadata.name.as_deref().unwrap_or_default()
        );
        let devices = claim.spec.devices.as_ref();
        if devices
            .and_then(|d| d.constraints.as_ref())
            .is_some_and(|c| !c.is_empty())
        {
            return Err(AllocateError::Unresolvable(format!(
                "{claim_name}: spec.devices.constraints are not implemented by the emulated scheduler"
            )));
        }
        for request in devices
            .and_then(|d| d.requests.as_ref())
            .into_iter()
            .flatten()
        {
            let whose = format!("{claim_name}, request {}", request.name);
            if request.first_available.is_some() {
                return Err(AllocateError::Unresolvable(format!(
                    "{whose}: firstAvailable is not implemented by the emulated scheduler"
                )));
            }
            let Some(exact) = request.exactly.as_ref() else {
                return Err(AllocateError::Unresolvable(format!(
                    "{whose}: neither exactly nor firstAvailable is set"
                )));
            };
            if exact.admin_access == Some(true) || exact.capacity.is_some() {
                return Err(AllocateError::Unresolvable(format!(
                    "{whose}: adminAccess and capacity requests are not implemented by the emulated scheduler"
                )));
            }
            let class = classes.get(&exact.device_class_name).ok_or_else(|| {
                AllocateError::Unresolvable(format!(
                    "{whose}: could not retrieve device class {}: deviceclasses.resource.k8s.io \"{}\" not found",
                    exact.device_class_name, exact.device_class_name
                ))
            })?;
            let class_selectors = class.spec.selectors.as_deref().unwrap_or_default();
            let request_selectors = exact.selectors.as_deref().unwrap_or_default();
            let mut matching = Vec::new();
            let class_whose = format!("class {}", exact.device_class_name);
            for (i, (id, device)) in available.devices.iter().enumerate() {
                if selector_matches(programs, class_selectors, &class_whose, id, device)?
                    && selector_matches(programs, request_selectors, &claim_name, id, device)?
                {
                    matching.push(i);
                }
            }
            match exact.allocation_mode.as_deref().unwrap_or("ExactCount") {
                "All" => {
                    // "At least one device must exist on the node for the allocation to
                    // succeed. Allocation will fail if some devices are already allocated."
                    let pools_complete = matching.iter().all(|i| {
                        let id = &available.devices[*i].0;
                        !available
                            .incomplete
                            .contains(&(id.driver.clone(), id.pool.clone()))
                    });
                    if matching.is_empty()
                        || !pools_complete
                        || matching
                            .iter()
                            .any(|i| taken.contains(&available.devices[*i].0))
                    {
                        return Ok(None);
                    }
                    slots.push(Slot::Fixed {
                        claim: ci,
                        request: request.name.clone(),
                        devices: matching,
                    });
                }
                "ExactCount" => {
                    let count = usize::try_from(exact.count.unwrap_or(1).max(1)).unwrap_or(1);
                    let candidates: Vec<usize> = matching
                        .into_iter()
                        .filter(|i| !taken.contains(&available.devices[*i].0))
                        .collect();
                    if candidates.len() < count {
                        return Ok(None);
                    }
                    slots.push(Slot::Pick {
                        claim: ci,
                        request: request.name.clone(),
                        count,
                        candidates,
                    });
                }
                other => {
                    return Err(AllocateError::Unresolvable(format!(
                        "{whose}: unsupported allocationMode {other:?}"
                    )));
                }
            }
        }
    }
    let mut used = vec![false; available.devices.len()];
    let mut chosen: Vec<Vec<usize>> = slots.iter().map(|_| Vec::new()).collect();
    for (si, slot) in slots.iter().enumerate() {
        if let Slot::Fixed { devices, .. } = slot {
            for d in devices {
                if used[*d] {
                    return Ok(None);
                }
                used[*d] = true;
            }
            chosen[si] = devices.clone();
        }
    }
    let mut budget = SEARCH_BUDGET;
    if !search(&slots, 0, 0, &mut used, &mut chosen, &mut budget) {
        return Ok(None);
    }
    let mut allocations = Vec::new();
    for (ci, claim) in claims.iter().enumerate() {
        let mut results = Vec::new();
        let mut config = Vec::new();
        for (si, slot) in slots.iter().enumerate() {
            let (Slot::Fixed { claim, request, .. } | Slot::Pick { claim, request, .. }) = slot;
            if *claim != ci {
                continue;
            }
            for d in &chosen[si] {
                let id = &available.devices[*d].0;
                results.push(json!({"request": request, "driver": id.driver, "pool": id.pool, "device": id.device}));
            }
        }
        // Class configuration first, one entry per request and class config, then the
        // claim's own (allocator.go: "allocationResult.Devices.Config").
        let spec = claim.spec.devices.as_ref();
        for request in spec.and_then(|d| d.requests.as_ref()).into_iter().flatten() {
            let class = request
                .exactly
                .as_ref()
                .and_then(|e| classes.get(&e.device_class_name));
            for c in class
                .and_then(|c| c.spec.config.as_ref())
                .into_iter()
                .flatten()
            {
                let mut entry = json!({"source": "FromClass", "requests": [request.name]});
                if let Some(opaque) = &c.opaque {
                    entry["opaque"] = serde_json::to_value(opaque).unwrap_or(Value::Null);
                }
                config.push(entry);
            }
        }
        for c in spec.and_then(|d| d.config.as_ref()).into_iter().flatten() {
            let mut entry = json!({"source": "FromClaim"});
            if let Some(requests) = c.requests.as_ref().filter(|r| !r.is_empty()) {
                entry["requests"] = json!(requests);
            }
            if let Some(opaque) = &c.opaque {
                entry["opaque"] = serde_json::to_value(opaque).unwrap_or(Value::Null);
            }
            config.push(entry);
        }
        let mut devices = json!({"results": results});
        if !config.is_empty() {
            devices["config"] = Value::Array(config);
        }
        allocations.push(json!({"devices": devices, "nodeSelector": node_selector_for(node)}));
    }
    Ok(Some(allocations))
}

/// Backtracking over the `ExactCount` slots: combinations in candidate order, so the
/// first solution takes the first free devices, as upstream's allocator does.
fn search(
    slots: &[Slot],
    slot: usize,
    start: usize,
    used: &mut [bool],
    chosen: &mut [Vec<usize>],
    budget: &mut usize,
) -> bool {
    let Some(current) = slots.get(slot) else {
        return true;
    };
    let (count, candidates) = match current {
        Slot::Fixed { .. } => return search(slots, slot + 1, 0, used, chosen, budget),
        Slot::Pick {
            count, candidates, ..
        } => (*count, candidates),
    };
    if chosen[slot].len() == count {
        return search(slots, slot + 1, 0, used, chosen, budget);
    }
    for (pos, d) in candidates.iter().enumerate().skip(start) {
        if *budget == 0 {
            return false;
        }
        *budget -= 1;
        if used[*d] {
            continue;
        }
        used[*d] = true;
        chosen[slot].push(*d);
        if search(slots, slot, pos + 1, used, chosen, budget) {
            return true;
        }
        chosen[slot].pop();
        used[*d] = false;
    }
    false
}

// ---------------------------------------------------------------------------------------
// The scheduler

pub async fn run_scheduler(
    api: ResourceApi,
    client: kube::Client,
    changes: broadcast::Receiver<Arc<WatchEvent>>,
) {
    let events = Events::new(client.clone(), "default-scheduler", None);
    let reported = Arc::new(tokio::sync::Mutex::new(HashMap::new()));
    level_triggered("kube-scheduler", changes, || {
        let (api, client, events, reported) = (
            api.clone(),
            client.clone(),
            events.clone(),
            reported.clone(),
        );
        async move { pass(&api, &client, &events, &mut *reported.lock().await).await }
    })
    .await;
}

/// What one pass knows of the cluster.
struct World {
    nodes: Vec<Node>,
    claims: Vec<ResourceClaim>,
    classes: BTreeMap<String, DeviceClass>,
    slices: Vec<ResourceSlice>,
    /// Devices in any claim's allocation, including those this pass just allocated.
    taken: BTreeSet<DeviceId>,
    load: BTreeMap<String, usize>,
    programs: Programs,
}

enum ScheduleError {
    Unschedulable(String),
    /// Rejected by the DynamicResources PreEnqueue check (a claim of the pod missing,
    /// being deleted or not the pod's): upstream keeps such a pod out of the active queue
    /// without a scheduling attempt, so without a FailedScheduling Event.
    Gated(String),
    Api(kube::Error),
}

impl From<kube::Error> for ScheduleError {
    fn from(e: kube::Error) -> Self {
        Self::Api(e)
    }
}

async fn pass(
    api: &ResourceApi,
    client: &kube::Client,
    events: &Events,
    reported: &mut HashMap<String, String>,
) -> Result<(), kube::Error> {
    let pods = Api::<ClassicPod>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let mut nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let claims: Vec<ResourceClaim> = api.list(None).await?;
    let classes: BTreeMap<String, DeviceClass> = api
        .list::<DeviceClass>(None)
        .await?
        .into_iter()
        .filter_map(|c| Some((c.metadata.name.clone()?, c)))
        .collect();
    let slices: Vec<ResourceSlice> = api.list(None).await?;
    for name in unsupported_slices(&slices) {
        tracing::debug!(slice = %name, "ResourceSlice without spec.nodeName: not used by the emulated scheduler");
    }
    let mut load: BTreeMap<String, usize> = BTreeMap::new();
    for pod in &pods {
        if let Some(node) = pod.node_name() {
            *load.entry(node.to_string()).or_default() += 1;
        }
    }
    let mut world = World {
        nodes,
        taken: allocated_devices(&claims),
        claims,
        classes,
        slices,
        load,
        programs: Programs::default(),
    };
    for pod in &pods {
        if pod.node_name().is_some() || pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let key = format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default()
        );
        match schedule(api, client, pod, &mut world).await {
            Ok(node) => {
                reported.remove(&key);
                let note = format!("Successfully assigned {key} to {node}");
                events
                    .normal(object_ref(pod), "Scheduled", "Binding", note)
                    .await;
            }
            Err(ScheduleError::Unschedulable(message)) => {
                if reported.get(&key) != Some(&message) {
                    tracing::info!(pod = %key, %message, "pod unschedulable");
                    events
                        .warn(
                            object_ref(pod),
                            "FailedScheduling",
                            "Scheduling",
                            message.clone(),
                        )
                        .await;
                    reported.insert(key, message);
                }
            }
            Err(ScheduleError::Gated(message)) => {
                tracing::debug!(pod = %key, %message, "pod gated by PreEnqueue: no scheduling attempt")
            }
            Err(ScheduleError::Api(error)) => {
                tracing::debug!(pod = key, %error, "scheduling attempt failed")
            }
        }
    }
    Ok(())
}

/// Schedules one pod; returns the node it was bound to.
async fn schedule(
    api: &ResourceApi,
    client: &kube::Client,
    pod: &ClassicPod,
    world: &mut World,
) -> Result<String, ScheduleError> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let pod_uid = pod.metadata.uid.clone().unwrap_or_default();

    // PreEnqueue (foreachPodResourceClaim), then PreFilter.
    let mut claims: Vec<ResourceClaim> = Vec::new();
    for pod_claim in pod.resource_claims() {
        let Some(claim_name) = pod.claim_name(&pod_claim.name) else {
            return Err(ScheduleError::Gated(format!(
                "waiting for resource claim {} of the pod to be created",
                pod_claim.name
            )));
        };
        let Some(claim) = world.claims.iter().find(|c| {
            c.metadata.namespace.as_deref() == Some(namespace.as_str())
                && c.metadata.name.as_deref() == Some(claim_name)
        }) else {
            return Err(ScheduleError::Gated(format!(
                "resourceclaim \"{claim_name}\" not found"
            )));
        };
        if claim.metadata.deletion_timestamp.is_some() {
            return Err(ScheduleError::Gated(format!(
                "resourceclaim \"{claim_name}\" is being deleted"
            )));
        }
        if pod_claim.template_name().is_some()
            && !claim
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.uid == pod_uid)
        {
            return Err(ScheduleError::Gated(format!(
                "ResourceClaim {claim_name} was not created for the pod"
            )));
        }
        let reserved = reserved_for(claim);
        if !reserved.iter().any(|r| r.uid == pod_uid) && reserved.len() >= RESERVED_FOR_MAX {
            return Err(ScheduleError::Unschedulable(format!(
                "resourceclaim \"{claim_name}\": reservedFor is full"
            )));
        }
        if !claims.iter().any(|c| c.metadata.uid == claim.metadata.uid) {
            claims.push(claim.clone());
        }
    }
    let pending: Vec<&ResourceClaim> = claims.iter().filter(|c| !is_allocated(c)).collect();

    // Filter.
    let mut feasible: Vec<(String, Option<Vec<Value>>)> = Vec::new();
    let mut reasons: BTreeMap<&'static str, usize> = BTreeMap::new();
    for node in &world.nodes {
        let name = node.metadata.name.clone().unwrap_or_default();
        let empty = BTreeMap::new();
        let view = NodeView {
            name: &name,
            labels: node.metadata.labels.as_ref().unwrap_or(&empty),
        };
        let allocated_fit = claims.iter().filter(|c| is_allocated(c)).all(|c| {
            c.status
                .as_ref()
                .and_then(|s| s.allocation.as_ref())
                .and_then(|a| a.node_selector.as_ref())
                .is_none_or(|s| node_selector::matches(s, view))
        });
        if !allocated_fit {
            *reasons
                .entry("resourceclaim not available on the node")
                .or_default() += 1;
            continue;
        }
        if pending.is_empty() {
            feasible.push((name, None));
            continue;
        }
        match allocate_on_node(
            &name,
            &pending,
            &world.classes,
            &world.slices,
            &world.taken,
            &mut world.programs,
        ) {
            Ok(Some(allocations)) => feasible.push((name, Some(allocations))),
            Ok(None) => *reasons.entry("cannot allocate all claims").or_default() += 1,
            // A Filter error (not a rejection) ends the scheduling cycle; the framework
            // names the plugin (frameworkImpl.RunFilterPlugins).
            Err(AllocateError::Cel(e)) => {
                return Err(ScheduleError::Unschedulable(format!(
                    "running \"DynamicResources\" filter plugin: {e}"
                )));
            }
            Err(e) => return Err(ScheduleError::Unschedulable(e.to_string())),
        }
    }

    if feasible.is_empty() {
        // PostFilter, DynamicResources first (before DefaultPreemption): an allocated claim
        // nobody uses may be what holds the pod back.
        let mut post_filter = Vec::new();
        for c in claims
            .iter()
            .filter(|c| is_allocated(c) && reserved_for(c).is_empty())
        {
            if post_filter.is_empty() {
                post_filter.push("deallocation of ResourceClaim completed".to_string());
            }
            let patch = json!({"metadata": {"resourceVersion": c.metadata.resource_version}, "status": {"allocation": null}});
            api.patch_status::<ResourceClaim>(
                Some(&namespace),
                c.metadata.name.as_deref().unwrap_or_default(),
                &patch,
            )
            .await?;
        }
        let mut details: Vec<String> = reasons
            .iter()
            .map(|(reason, n)| format!("{n} {reason}"))
            .collect();
        details.sort();
        // DefaultPreemption: every node failed with UnschedulableAndUnresolvable (the DRA
        // reasons are), so no victim can help (preemption.Evaluator.evaluate).
        let n = world.nodes.len();
        post_filter.push(format!(
            "preemption: 0/{n} nodes are available: {n} Preemption is not helpful for scheduling."
        ));
        // FitError.Error(): the Filter reasons, then the PostFilter messages.
        return Err(ScheduleError::Unschedulable(format!(
            "0/{n} nodes are available: {}. {}",
            details.join(", "),
            post_filter.join(", ")
        )));
    }

    let (node, allocations) = feasible
        .into_iter()
        .min_by_key(|(n, _)| world.load.get(n).copied().unwrap_or(0))
        .unwrap_or_default();

    // PreBind: finalizer, then allocation + reservedFor in one status update.
    let consumer = json!({"resource": "pods", "name": pod_name, "uid": pod_uid});
    let mut allocations = allocations.unwrap_or_default().into_iter();
    for claim in &claims {
        let name = claim.metadata.name.clone().unwrap_or_default();
        let mut reserved: Vec<Value> = reserved_for(claim)
            .iter()
            .map(|r| serde_json::to_value(r).unwrap_or(Value::Null))
            .collect();
        let already = reserved_for(claim).iter().any(|r| r.uid == pod_uid);
        if !already {
            reserved.push(consumer.clone());
        }
        if is_allocated(claim) {
            if !already {
                let patch = json!({"metadata": {"resourceVersion": claim.metadata.resource_version}, "status": {"reservedFor": reserved}});
                api.patch_status::<ResourceClaim>(Some(&namespace), &name, &patch)
                    .await?;
            }
            continue;
        }
        let Some(allocation) = allocations.next() else {
            continue;
        };
        let mut finalizers = claim.metadata.finalizers.clone().unwrap_or_default();
        let mut resource_version = claim.metadata.resource_version.clone();
        if !finalizers.iter().any(|f| f == DELETE_PROTECTION_FINALIZER) {
            finalizers.push(DELETE_PROTECTION_FINALIZER.into());
            let patch = json!({"metadata": {"resourceVersion": resource_version, "finalizers": finalizers}});
            resource_version = api
                .patch_metadata::<ResourceClaim>(Some(&namespace), &name, &patch)
                .await?;
        }
        let patch = json!({"metadata": {"resourceVersion": resource_version}, "status": {"allocation": allocation, "reservedFor": reserved}});
        api.patch_status::<ResourceClaim>(Some(&namespace), &name, &patch)
            .await?;
        world.taken.extend(allocated_devices_of(&allocation));
    }
    super::bind(client, &namespace, &pod_name, &node).await?;
    *world.load.entry(node.clone()).or_default() += 1;
    Ok(node)
}

fn allocated_devices_of(allocation: &Value) -> Vec<DeviceId> {
    allocation
        .pointer("/devices/results")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|r| {
            let s = |f: &str| {
                r.get(f)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            DeviceId {
                driver: s("driver"),
                pool: s("pool"),
                device: s("device"),
            }
        })
        .collect()
}

pub fn is_allocated(claim: &ResourceClaim) -> bool {
    claim
        .status
        .as_ref()
        .is_some_and(|s| s.allocation.is_some())
}

pub fn reserved_for(
    claim: &ResourceClaim,
) -> &[k8s_openapi::api::resource::v1::ResourceClaimConsumerReference] {
    claim
        .status
        .as_ref()
        .and_then(|s| s.reserved_for.as_deref())
        .unwrap_or_default()
}
