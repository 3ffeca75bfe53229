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

use fake_dra_api::handle::AllocationHandle;
use fake_dra_api::nas::NodeAllocationState;
use fake_dra_api::params::{ClaimRequest, DeviceClassParametersSpec};
use fake_dra_api::upstream::node_selector;
use fake_dra_api::upstream::pod::DraPod;
use fake_dra_api::upstream::v1alpha2::{
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

mod reconcile;
mod writes;

use reconcile::{reconcile_claim, reconcile_psc};

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
                let ar = ApiResource::erase::<fake_dra_api::params::DeviceClassParameters>(&());
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
            None => fake_dra_api::params::FakeClaimParametersSpec::default(),
            Some(r) => {
                params::check_claim_ref(r)?;
                let ar = ApiResource::erase::<fake_dra_api::params::FakeClaimParameters>(&());
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
