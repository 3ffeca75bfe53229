//! The reconcilers: ResourceClaims (Immediate allocation, deallocation, finalizer) and
//! PodSchedulingContexts (unsuitable nodes, allocation on the selected node).
//!
//! Every allocation decision is made under one lock ([`Context::ledger`]) from an
//! [`Allocator`] built afresh from the caches, and the lock is held until the claim's
//! status write has answered. A reservation therefore lives only for the length of one
//! write: if the write fails (409, crash) it is gone, and nothing is ever allocated only
//! in memory. Successful writes are kept in an overlay until the claim cache has caught
//! up with them, so a stale cache cannot hand the same device out twice.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fake_dra_crds::handle::AllocationHandle;
use fake_dra_crds::nas::NodeAllocationState;
use fake_dra_crds::node_selector;
use fake_dra_crds::params::{ClaimRequest, DeviceClassParametersSpec};
use fake_dra_crds::pod::DraPod;
use fake_dra_crds::v1alpha2::{
    AllocationMode, AllocationResult, MAX_SCHEDULING_NODES, PodSchedulingContext,
    PodSchedulingContextStatus, ResourceClaim, ResourceClaimSchedulingStatus, ResourceClass,
    ResourceHandle,
};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, NodeSelector};
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, reflector, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;

use crate::allocator::{Allocator, ClaimAsk, NodeInput};
use crate::metrics::{ControllerLabel, Label, Metrics, StateLabel};
use crate::params::{self, Problem};
use crate::{Error, Result};

/// How the controller runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// The driver name: classes naming it are ours; it prefixes the finalizer.
    pub driver_name: String,
    /// Where the NodeAllocationStates live.
    pub namespace: String,
    /// Reconciles run at once, per controller.
    pub workers: u16,
    /// Reported in Events.
    pub instance: String,
}

impl Config {
    /// `<driver>/deletion-protection`.
    pub fn finalizer(&self) -> String {
        format!("{}/deletion-protection", self.driver_name)
    }
}

/// A claim we wrote, kept until the cache shows that version or a newer one.
#[derive(Debug)]
struct Written {
    claim: Arc<ResourceClaim>,
    at: Instant,
}

/// Writes the claim cache has not caught up with yet.
#[derive(Debug, Default)]
pub struct Ledger {
    written: HashMap<String, Written>,
}

/// Overlay entries for claims the cache no longer has are dropped after this long: by then
/// the cache has seen the deletion.
const OVERLAY_TTL: Duration = Duration::from_secs(60);

fn rv(claim: &ResourceClaim) -> u64 {
    claim
        .metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// State shared by every reconcile.
pub struct Context {
    client: Client,
    config: Config,
    recorder: Recorder,
    metrics: Arc<Metrics>,
    claims: Store<ResourceClaim>,
    classes: Store<ResourceClass>,
    nas: Store<NodeAllocationState>,
    nodes: Store<Node>,
    ledger: tokio::sync::Mutex<Ledger>,
    failures: std::sync::Mutex<HashMap<String, u32>>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// What a claim needs, once its parameters resolved.
#[derive(Debug, Clone)]
struct Resolved {
    request: ClaimRequest,
    suitable_nodes: Option<NodeSelector>,
}

impl Context {
    fn claims_api(&self, ns: &str) -> Api<ResourceClaim> {
        Api::namespaced(self.client.clone(), ns)
    }

    fn is_ours(&self, claim: &ResourceClaim) -> Option<Arc<ResourceClass>> {
        let class = self
            .classes
            .get(&ObjectRef::new(&claim.spec.resource_class_name))?;
        (class.driver_name == self.config.driver_name && class.structured_parameters != Some(true))
            .then_some(class)
    }

    async fn event(&self, claim: &ResourceClaim, type_: EventType, reason: &str, note: String) {
        let ev = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(note.chars().take(1000).collect()),
            action: "Allocate".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, &claim.object_ref(&())).await {
            tracing::warn!(error = %e, reason, "publishing an event failed");
        }
    }

    /// Reports a problem the user has to fix: Event on the claim, log line.
    async fn report(&self, claim: &ResourceClaim, problem: Problem) -> Error {
        tracing::warn!(
            claim = %ObjectRef::from_obj(claim),
            reason = problem.reason(),
            "{problem}"
        );
        self.event(
            claim,
            EventType::Warning,
            problem.reason(),
            problem.to_string(),
        )
        .await;
        Error::Parameters(problem)
    }

    async fn get_json(
        &self,
        ar: &ApiResource,
        ns: Option<&str>,
        name: &str,
    ) -> Result<Option<serde_json::Value>> {
        let api: Api<DynamicObject> = match ns {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, ar),
            None => Api::all_with(self.client.clone(), ar),
        };
        let obj = api.get_opt(name).await.map_err(Error::Kube)?;
        Ok(obj.map(|o| serde_json::to_value(o).unwrap_or_default()))
    }

    /// Reads and checks the claim's and the class's parameters; a problem the user must fix
    /// is reported on the claim and returned as [`Error::Parameters`].
    async fn resolve(&self, claim: &ResourceClaim, class: &ResourceClass) -> Result<Resolved> {
        match self.try_resolve(claim, class).await {
            Ok(r) => Ok(r),
            Err(Error::Parameters(problem)) => Err(self.report(claim, problem).await),
            Err(e) => Err(e),
        }
    }

    async fn try_resolve(&self, claim: &ResourceClaim, class: &ResourceClass) -> Result<Resolved> {
        let ns = claim.namespace().unwrap_or_default();
        let class_params = match &class.parameters_ref {
            None => DeviceClassParametersSpec::default(),
            Some(r) => {
                params::check_class_ref(r)?;
                let ar = ApiResource::erase::<fake_dra_crds::params::DeviceClassParameters>(&());
                let obj = self.get_json(&ar, None, &r.name).await?.ok_or_else(|| {
                    Problem::ParametersNotFound {
                        kind: params::CLASS_PARAMETERS_KIND,
                        name: r.name.clone(),
                        namespace_note: String::new(),
                    }
                })?;
                params::class_parameters(&format!("DeviceClassParameters {}", r.name), &obj)?
            }
        };
        let claim_params = match &claim.spec.parameters_ref {
            None => fake_dra_crds::params::FakeClaimParametersSpec::default(),
            Some(r) => {
                params::check_claim_ref(r)?;
                let ar = ApiResource::erase::<fake_dra_crds::params::FakeClaimParameters>(&());
                let obj = self
                    .get_json(&ar, Some(&ns), &r.name)
                    .await?
                    .ok_or_else(|| Problem::ParametersNotFound {
                        kind: params::CLAIM_PARAMETERS_KIND,
                        name: r.name.clone(),
                        namespace_note: format!(" in namespace {ns:?}"),
                    })?;
                params::claim_parameters(&format!("FakeClaimParameters {ns}/{}", r.name), &obj)?
            }
        };
        let request =
            claim_params
                .resolve(Some(&class_params))
                .map_err(|e| Problem::InvalidParameters {
                    object: format!("ResourceClaim {ns}/{}", claim.name_any()),
                    message: e.to_string(),
                })?;
        Ok(Resolved {
            request,
            suitable_nodes: class.suitable_nodes.clone(),
        })
    }

    /// The allocator as of now: inventories from the NAS cache, allocations from the claim
    /// cache overlaid with our own recent writes.
    fn view(&self, ledger: &mut Ledger) -> Allocator {
        let labels: HashMap<String, BTreeMap<String, String>> = self
            .nodes
            .state()
            .iter()
            .map(|n| (n.name_any(), n.metadata.labels.clone().unwrap_or_default()))
            .collect();
        let inputs = self.nas.state().into_iter().map(|nas| {
            let name = nas.name_any();
            NodeInput {
                ready: nas.is_ready(),
                labels: labels.get(&name).cloned().unwrap_or_default(),
                devices: nas
                    .spec
                    .allocatable_devices
                    .iter()
                    .map(|d| (d.id.clone(), d.model.clone()))
                    .collect(),
                name,
            }
        });
        let mut alloc = Allocator::new(inputs);
        let mut claims: BTreeMap<String, Arc<ResourceClaim>> = BTreeMap::new();
        for claim in self.claims.state() {
            let uid = claim.uid().unwrap_or_default();
            let newer = match ledger.written.get(&uid) {
                Some(w) if rv(&w.claim) > rv(&claim) => w.claim.clone(),
                Some(_) => {
                    ledger.written.remove(&uid);
                    claim
                }
                None => claim,
            };
            claims.insert(uid, newer);
        }
        ledger.written.retain(|uid, w| {
            if claims.contains_key(uid) {
                return true;
            }
            if w.at.elapsed() < OVERLAY_TTL {
                claims.insert(uid.clone(), w.claim.clone());
                true
            } else {
                false
            }
        });
        for (uid, claim) in &claims {
            let Some(data) = claim.handle_for_driver(&self.config.driver_name) else {
                continue;
            };
            match AllocationHandle::parse(data) {
                Ok(handle) => {
                    if let Err(e) = alloc.record(uid, &handle) {
                        tracing::error!(error = %e, "inconsistent allocations in the API");
                    }
                }
                Err(e) => tracing::error!(
                    claim = %ObjectRef::from_obj(claim.as_ref()),
                    error = %e,
                    "claim carries an allocation handle of our driver that does not parse"
                ),
            }
        }
        alloc
    }

    fn update_claim_gauges(&self) {
        let (mut allocated, mut pending, mut deallocating) = (0, 0, 0);
        for claim in self.claims.state() {
            if self.is_ours(&claim).is_none() {
                continue;
            }
            if claim.deallocation_requested() || claim.is_being_deleted() {
                deallocating += 1;
            } else if claim.is_allocated() {
                allocated += 1;
            } else {
                pending += 1;
            }
        }
        for (state, n) in [
            ("allocated", allocated),
            ("pending", pending),
            ("deallocating", deallocating),
        ] {
            self.metrics
                .claims
                .get_or_create(&StateLabel { state })
                .set(n);
        }
    }

    /// Adds our finalizer (before anything is allocated), returning the updated claim.
    async fn add_finalizer(&self, claim: &ResourceClaim) -> Result<ResourceClaim> {
        let finalizer = self.config.finalizer();
        if claim.has_finalizer(&finalizer) {
            return Ok(claim.clone());
        }
        let rv = claim.resource_version().unwrap_or_default();
        let add = if claim.metadata.finalizers.is_some() {
            json!({"op": "add", "path": "/metadata/finalizers/-", "value": finalizer})
        } else {
            json!({"op": "add", "path": "/metadata/finalizers", "value": [finalizer]})
        };
        let patch: json_patch_value::Patch = serde_json::from_value(json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
            add
        ]))
        .map_err(Error::Serialize)?;
        let ns = claim.namespace().unwrap_or_default();
        self.claims_api(&ns)
            .patch(
                &claim.name_any(),
                &PatchParams::default(),
                &Patch::<()>::Json(patch),
            )
            .await
            .map_err(Error::Kube)
    }

    async fn remove_finalizer(&self, claim: &ResourceClaim) -> Result<()> {
        let finalizer = self.config.finalizer();
        let Some(list) = claim.metadata.finalizers.as_ref() else {
            return Ok(());
        };
        let rest: Vec<&String> = list.iter().filter(|f| **f != finalizer).collect();
        if rest.len() == list.len() {
            return Ok(());
        }
        let rv = claim.resource_version().unwrap_or_default();
        let patch: json_patch_value::Patch = serde_json::from_value(json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
            {"op": "replace", "path": "/metadata/finalizers", "value": rest}
        ]))
        .map_err(Error::Serialize)?;
        let ns = claim.namespace().unwrap_or_default();
        self.claims_api(&ns)
            .patch(
                &claim.name_any(),
                &PatchParams::default(),
                &Patch::<()>::Json(patch),
            )
            .await
            .map_err(Error::Kube)?;
        Ok(())
    }

    /// Writes the allocation into the claim's status. On success the write is kept in the
    /// ledger; on failure nothing is, so the devices are free again.
    async fn write_allocation(
        &self,
        ledger: &mut Ledger,
        claim: &ResourceClaim,
        handle: &AllocationHandle,
    ) -> Result<()> {
        handle
            .validate()
            .map_err(|e| Error::Internal(format!("built an invalid handle: {e}")))?;
        let driver = self.config.driver_name.clone();
        let mut updated = claim.clone();
        let status = updated.status.get_or_insert_with(Default::default);
        status.driver_name = Some(driver.clone());
        status.allocation = Some(AllocationResult {
            resource_handles: Some(vec![ResourceHandle {
                driver_name: Some(driver),
                data: Some(handle.to_json()),
                structured_data: None,
            }]),
            available_on_nodes: Some(node_selector::for_node(&handle.node_name)),
            shareable: Some(true),
        });
        let ns = claim.namespace().unwrap_or_default();
        let written = self
            .claims_api(&ns)
            .replace_status(&claim.name_any(), &PostParams::default(), &updated)
            .await
            .map_err(Error::Kube)?;
        let uid = written.uid().unwrap_or_default();
        ledger.written.insert(
            uid,
            Written {
                claim: Arc::new(written),
                at: Instant::now(),
            },
        );
        self.metrics.allocations.inc();
        tracing::info!(
            claim = %ObjectRef::from_obj(claim),
            node = %handle.node_name,
            devices = ?handle.devices,
            "allocated"
        );
        self.event(
            claim,
            EventType::Normal,
            "Allocated",
            format!(
                "allocated {} device(s) on node {}",
                handle.devices.len(),
                handle.node_name
            ),
        )
        .await;
        Ok(())
    }

    /// Clears the allocation (and `deallocationRequested`), then drops the finalizer if
    /// the claim is being deleted or deallocation was requested.
    async fn deallocate(&self, claim: &ResourceClaim) -> Result<Action> {
        if !claim.reserved_for().is_empty() && claim.is_allocated() {
            // Still in use: the scheduler or the claim controller clears reservedFor first.
            return Ok(Action::requeue(Duration::from_secs(5)));
        }
        let mut current = claim.clone();
        if claim.is_allocated() || claim.deallocation_requested() {
            let mut updated = claim.clone();
            if let Some(status) = updated.status.as_mut() {
                status.allocation = None;
                status.driver_name = None;
                status.deallocation_requested = None;
            }
            let ns = claim.namespace().unwrap_or_default();
            let mut ledger = self.ledger.lock().await;
            let written = self
                .claims_api(&ns)
                .replace_status(&claim.name_any(), &PostParams::default(), &updated)
                .await
                .map_err(Error::Kube)?;
            let uid = written.uid().unwrap_or_default();
            current = written.clone();
            ledger.written.insert(
                uid,
                Written {
                    claim: Arc::new(written),
                    at: Instant::now(),
                },
            );
            drop(ledger);
            if claim.is_allocated() {
                self.metrics.deallocations.inc();
                tracing::info!(claim = %ObjectRef::from_obj(claim), "deallocated");
            }
        }
        // Nothing is allocated any more: the finalizer has done its job.
        self.remove_finalizer(&current).await?;
        Ok(Action::await_change())
    }

    async fn allocate_immediate(
        &self,
        claim: &ResourceClaim,
        resolved: &Resolved,
    ) -> Result<Action> {
        let claim = self.add_finalizer(claim).await?;
        let mut ledger = self.ledger.lock().await;
        let mut view = self.view(&mut ledger);
        view.check_satisfiable(&resolved.request)
            .map_err(Problem::from)?;
        let uid = claim.uid().unwrap_or_default();
        let ask = ClaimAsk {
            request: &resolved.request,
            suitable_nodes: resolved.suitable_nodes.as_ref(),
        };
        let Some(handle) = view.allocate(&uid, &ask) else {
            return Err(Error::NoCapacity);
        };
        self.write_allocation(&mut ledger, &claim, &handle).await?;
        Ok(Action::await_change())
    }

    fn backoff(&self, key: &str, error: &Error) -> Duration {
        let mut failures = self
            .failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = failures.entry(key.to_owned()).or_insert(0);
        *n = n.saturating_add(1);
        let base = if error.is_conflict() { 100 } else { 500 };
        Duration::from_millis(base << (*n - 1).min(7)).min(Duration::from_secs(60))
    }

    fn succeeded(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(key);
    }
}

/// Reconciles one ResourceClaim.
async fn reconcile_claim(claim: Arc<ResourceClaim>, ctx: Arc<Context>) -> Result<Action> {
    let started = Instant::now();
    let result = reconcile_claim_inner(&claim, &ctx).await;
    ctx.metrics
        .reconcile_seconds
        .get_or_create(&ControllerLabel {
            controller: "resourceclaim",
        })
        .observe(started.elapsed().as_secs_f64());
    ctx.update_claim_gauges();
    if result.is_ok() {
        ctx.succeeded(&ObjectRef::from_obj(claim.as_ref()).to_string());
    }
    result
}

async fn reconcile_claim_inner(claim: &ResourceClaim, ctx: &Context) -> Result<Action> {
    let has_finalizer = claim.has_finalizer(&ctx.config.finalizer());
    let class = ctx.is_ours(claim);
    if class.is_none() && !has_finalizer {
        return Ok(Action::await_change());
    }
    if claim.is_being_deleted() || claim.deallocation_requested() {
        let ours = claim
            .status
            .as_ref()
            .and_then(|s| s.driver_name.as_deref())
            .is_none_or(|d| d == ctx.config.driver_name);
        if !ours && !has_finalizer {
            return Ok(Action::await_change());
        }
        return ctx.deallocate(claim).await;
    }
    if claim.is_allocated() {
        return Ok(Action::await_change());
    }
    let Some(class) = class else {
        // Our finalizer but the class is gone or no longer ours: nothing to allocate.
        return Ok(Action::await_change());
    };
    let resolved = ctx.resolve(claim, &class).await?;
    match claim.spec.allocation_mode() {
        AllocationMode::WaitForFirstConsumer => Ok(Action::await_change()),
        AllocationMode::Immediate => match ctx.allocate_immediate(claim, &resolved).await {
            Err(Error::Parameters(problem)) => Err(ctx.report(claim, problem).await),
            Err(Error::NoCapacity) => {
                ctx.event(
                    claim,
                    EventType::Warning,
                    "NoCapacity",
                    format!(
                        "no Ready node the class allows has {} free device(s){}; retrying",
                        resolved.request.count,
                        resolved
                            .request
                            .model
                            .as_ref()
                            .map(|m| format!(" of model {m:?}"))
                            .unwrap_or_default()
                    ),
                )
                .await;
                Err(Error::NoCapacity)
            }
            other => other,
        },
    }
}

/// Reconciles one PodSchedulingContext.
async fn reconcile_psc(psc: Arc<PodSchedulingContext>, ctx: Arc<Context>) -> Result<Action> {
    let started = Instant::now();
    let result = reconcile_psc_inner(&psc, &ctx).await;
    ctx.metrics
        .reconcile_seconds
        .get_or_create(&ControllerLabel {
            controller: "podschedulingcontext",
        })
        .observe(started.elapsed().as_secs_f64());
    if result.is_ok() {
        ctx.succeeded(&ObjectRef::from_obj(psc.as_ref()).to_string());
    }
    result
}

async fn reconcile_psc_inner(psc: &PodSchedulingContext, ctx: &Context) -> Result<Action> {
    if psc.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ns = psc.namespace().unwrap_or_default();
    let pods: Api<DraPod> = Api::namespaced(ctx.client.clone(), &ns);
    let Some(pod) = pods.get_opt(&psc.name_any()).await.map_err(Error::Kube)? else {
        return Ok(Action::await_change());
    };
    let mut pending: Vec<(String, Arc<ResourceClaim>, Resolved)> = Vec::new();
    let mut waiting = false;
    for pod_claim in pod.resource_claims() {
        let Some((claim_name, must_be_the_pods)) = pod.claim_name_any_release(&pod_claim.name)
        else {
            waiting = true;
            continue;
        };
        let Some(claim) = ctx.claims.get(&ObjectRef::new(&claim_name).within(&ns)) else {
            waiting = true;
            continue;
        };
        if must_be_the_pods && !pod.controls(claim.metadata.owner_references.as_deref()) {
            // Not (yet) the claim generated for this pod.
            waiting = true;
            continue;
        }
        let Some(class) = ctx.is_ours(&claim) else {
            continue;
        };
        if claim.is_allocated()
            || claim.is_being_deleted()
            || claim.deallocation_requested()
            || claim.spec.allocation_mode() != AllocationMode::WaitForFirstConsumer
        {
            continue;
        }
        let resolved = ctx.resolve(&claim, &class).await?;
        pending.push((pod_claim.name.clone(), claim, resolved));
    }
    if pending.is_empty() {
        return Ok(if waiting {
            Action::requeue(Duration::from_secs(2))
        } else {
            Action::await_change()
        });
    }
    {
        let mut ledger = ctx.ledger.lock().await;
        let view = ctx.view(&mut ledger);
        drop(ledger);
        for (_, claim, resolved) in &pending {
            if let Err(e) = view.check_satisfiable(&resolved.request) {
                return Err(ctx.report(claim, Problem::from(e)).await);
            }
        }
    }

    let selected = psc.spec.selected_node.as_deref();
    if selected.is_some() {
        // The finalizer goes on before anything is allocated, so a claim deleted while its
        // allocation is in flight still waits for us to clean up.
        for (_, claim, _) in pending.iter_mut() {
            if !claim.has_finalizer(&ctx.config.finalizer()) {
                *claim = Arc::new(ctx.add_finalizer(claim).await?);
            }
        }
    }

    let mut ledger = ctx.ledger.lock().await;
    let mut view = ctx.view(&mut ledger);
    let asks: Vec<ClaimAsk<'_>> = pending
        .iter()
        .map(|(_, _, r)| ClaimAsk {
            request: &r.request,
            suitable_nodes: r.suitable_nodes.as_ref(),
        })
        .collect();

    if let Some(node) = selected {
        let uids: Vec<String> = pending
            .iter()
            .map(|(_, c, _)| c.uid().unwrap_or_default())
            .collect();
        let uid_refs: Vec<&str> = uids.iter().map(String::as_str).collect();
        match view.allocate_on(node, &uid_refs, &asks) {
            Ok(handles) => {
                for ((_, claim, _), handle) in pending.iter().zip(handles) {
                    ctx.write_allocation(&mut ledger, claim, &handle).await?;
                }
                return Ok(Action::await_change());
            }
            Err(e) => {
                tracing::info!(pod = %psc.name_any(), node, reason = %e, "selected node is unsuitable");
            }
        }
    }

    let potential: Vec<String> = psc
        .spec
        .potential_nodes
        .clone()
        .unwrap_or_default()
        .into_iter()
        .take(MAX_SCHEDULING_NODES)
        .collect();
    let unsuitable: Vec<String> = view
        .unsuitable_nodes(&potential, &asks)
        .into_iter()
        .map(str::to_owned)
        .collect();
    drop(ledger);
    let ours: Vec<&str> = pending.iter().map(|(n, _, _)| n.as_str()).collect();
    let mut entries: Vec<ResourceClaimSchedulingStatus> = psc
        .status
        .as_ref()
        .and_then(|s| s.resource_claims.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|e| !ours.contains(&e.name.as_str()))
        .collect();
    for name in ours {
        entries.push(ResourceClaimSchedulingStatus {
            name: name.to_owned(),
            unsuitable_nodes: Some(unsuitable.clone()),
        });
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    let new_status = PodSchedulingContextStatus {
        resource_claims: Some(entries),
    };
    if psc.status.as_ref() != Some(&new_status) {
        let mut updated = psc.clone();
        updated.status = Some(new_status);
        let api: Api<PodSchedulingContext> = Api::namespaced(ctx.client.clone(), &ns);
        api.replace_status(&psc.name_any(), &PostParams::default(), &updated)
            .await
            .map_err(Error::Kube)?;
        tracing::info!(pod = %psc.name_any(), ?unsuitable, "updated unsuitable nodes");
    }
    // Free devices change without this object changing; look again soon.
    Ok(Action::requeue(Duration::from_secs(5)))
}

fn error_policy<K: Resource<DynamicType = ()>>(
    obj: Arc<K>,
    error: &Error,
    ctx: Arc<Context>,
) -> Action {
    ctx.metrics
        .failures
        .get_or_create(&Label {
            reason: error.metric_label().to_owned(),
        })
        .inc();
    let key = ObjectRef::from_obj(obj.as_ref()).to_string();
    let delay = ctx.backoff(&key, error);
    match error {
        Error::Parameters(_) | Error::NoCapacity => {
            tracing::debug!(object = %key, error = %error, ?delay, "retrying")
        }
        _ => tracing::warn!(object = %key, error = %error, ?delay, "reconcile failed; retrying"),
    }
    Action::requeue(delay)
}

/// Runs both controllers until `shutdown` resolves. `ready` is set once every cache has
/// synced.
pub async fn run(
    client: Client,
    config: Config,
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
    shutdown: impl Future<Output = ()> + Send + Sync + Clone + 'static,
) {
    let wc = watcher::Config::default();
    let (classes, classes_w) = reflector::store::<ResourceClass>();
    let (nas, nas_w) = reflector::store::<NodeAllocationState>();
    let (nodes, nodes_w) = reflector::store::<Node>();

    // Inventory and class changes re-run both controllers (coalesced).
    let (claims_tx, claims_rx) = futures::channel::mpsc::channel::<()>(1);
    let (psc_tx, psc_rx) = futures::channel::mpsc::channel::<()>(1);
    let poke = move || {
        let mut a = claims_tx.clone();
        let mut b = psc_tx.clone();
        move || {
            let _ = a.try_send(());
            let _ = b.try_send(());
        }
    };
    let mut poke_classes = poke();
    let mut poke_nas = poke();
    let classes_task = watcher(Api::<ResourceClass>::all(client.clone()), wc.clone())
        .default_backoff()
        .reflect(classes_w)
        .touched_objects()
        .for_each(move |_| {
            poke_classes();
            futures::future::ready(())
        });
    let nas_task = watcher(
        Api::<NodeAllocationState>::namespaced(client.clone(), &config.namespace),
        wc.clone(),
    )
    .default_backoff()
    .reflect(nas_w)
    .for_each(move |_| {
        poke_nas();
        futures::future::ready(())
    });
    let nodes_task = watcher(Api::<Node>::all(client.clone()), wc.clone())
        .default_backoff()
        .reflect(nodes_w)
        .for_each(|_| futures::future::ready(()));

    let claim_ctl = Controller::new(Api::<ResourceClaim>::all(client.clone()), wc.clone());
    let claims = claim_ctl.store();
    let reporter = Reporter {
        controller: format!("{}-controller", config.driver_name),
        instance: Some(config.instance.clone()),
    };
    let workers = config.workers.max(1);
    let ctx = Arc::new(Context {
        recorder: Recorder::new(client.clone(), reporter),
        client: client.clone(),
        config,
        metrics,
        claims: claims.clone(),
        classes: classes.clone(),
        nas: nas.clone(),
        nodes: nodes.clone(),
        ledger: tokio::sync::Mutex::new(Ledger::default()),
        failures: std::sync::Mutex::new(HashMap::new()),
    });

    let ctl_config = kube::runtime::controller::Config::default().concurrency(workers);
    let claim_run = claim_ctl
        .with_config(ctl_config.clone())
        .reconcile_all_on(claims_rx)
        .graceful_shutdown_on(shutdown.clone())
        .run(reconcile_claim, error_policy, ctx.clone())
        .for_each(|_| futures::future::ready(()));
    let psc_run = Controller::new(Api::<PodSchedulingContext>::all(client.clone()), wc.clone())
        .with_config(ctl_config)
        .reconcile_all_on(psc_rx)
        .graceful_shutdown_on(shutdown.clone())
        .run(reconcile_psc, error_policy, ctx.clone())
        .for_each(|_| futures::future::ready(()));

    // The controllers start once the side caches are complete: an empty NAS cache would
    // read as "no nodes" and a missing class as "not our claim". (The claim cache itself
    // is awaited by each Controller before its first reconcile.)
    let controllers = async {
        let _ = classes.wait_until_ready().await;
        let _ = nas.wait_until_ready().await;
        let _ = nodes.wait_until_ready().await;
        let synced = async {
            let _ = claims.wait_until_ready().await;
            ready.store(true, Ordering::SeqCst);
            tracing::info!("caches synced");
        };
        tokio::join!(claim_run, psc_run, synced);
    };
    let background = async {
        tokio::join!(classes_task, nas_task, nodes_task);
    };
    tokio::select! {
        _ = controllers => {}
        _ = background => {}
    }
}

use json_patch as json_patch_value;
