//! Publishes the node's ResourceSlices (structured mode) and keeps them there, as
//! upstream's `resourceslice.Controller` does. [`PoolWriter`] writes one pool (asking
//! [`crate::pool::plan`] what to change); [`PoolController`] keeps any number of pools
//! published with it; [`SliceController`] gives it this node's pool, the driver's devices
//! with the hook's taints, again whenever either changes.
//!
//! Why a watch rather than polling: a slice deleted by hand (or by a confused tool) must
//! come back before the scheduler misses the node's devices, and a watch with the field
//! selector `spec.nodeName=<node>,spec.driver=<driver>` sees exactly our slices at no cost
//! while nothing happens. Our own writes' echoes are recognised and cost nothing; a slow
//! resync covers a watch that silently stalls.
//!
//! On shutdown the slices are left in place: a restart (upgrade, crash) must not make the
//! node's devices vanish from the scheduler's view and reappear. They go with the Node
//! (ownerReference), and the kubelet removes a driver's slices of its node when the
//! plugin stays unregistered; `kubectl delete resourceslices
//! --field-selector spec.driver=<driver>` cleans up after an uninstall otherwise.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::{v1, v1beta1};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use tokio_stream::StreamExt;
use tracing::{debug, error, info, warn};

use futures::stream::BoxStream;

use crate::dra_mode::ResourceApi;
use crate::hooks::FaultHook;
use crate::model::{CounterLayout, CounterSet, HealthStatus, SliceDevice, TaintRules};
use crate::pool::{self, Desired, PublishedSlice, SliceContent, SlicePlan};

mod pools;
#[cfg_attr(not(feature = "fleet"), allow(unused_imports))]
pub use pools::{PoolController, PoolScope, PoolStats};

/// A resync even without events, in case a watch stalls without an error.
const RESYNC: Duration = Duration::from_secs(30);

/// Where the node's devices come from, read again at every reconcile: what the driver
/// says now.
pub(crate) trait Inventory: Send + Sync + 'static {
    /// The devices, each unhealthy one with the taint the driver asks for.
    fn devices(&self) -> Vec<SliceDevice>;
    /// The counter sets.
    fn counter_sets(&self) -> Vec<CounterSet>;
    /// A device's pool other than the node's (see `DeviceProfile::device_pool`).
    fn device_pool(&self, device: &str) -> Option<String>;
    /// A device's health as the driver reports it.
    fn health(&self, device: &str) -> (HealthStatus, Option<String>);
    /// Yields whenever any of them may have changed.
    fn changes(&self) -> BoxStream<'static, ()>;
}

/// Keeps this node's ResourceSlices published.
#[derive(Clone)]
pub(crate) struct SliceController {
    client: Client,
    api: ResourceApi,
    /// The pool's fixed parts (driver, node, layout, split); its devices and counter sets
    /// are the inventory's.
    desired: Desired,
    /// What the driver has now.
    inventory: Arc<dyn Inventory>,
    /// What adds taints and binding conditions.
    hook: Arc<dyn FaultHook>,
}

impl std::fmt::Debug for SliceController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SliceController")
            .field("api", &self.api)
            .field("node", &self.desired.node_name)
            .finish_non_exhaustive()
    }
}

/// What the API server made of the pool we last wrote: kube-apiserver drops the fields of
/// a disabled feature gate without an error, so the stored slices never equal ours and a
/// publisher comparing with what it sent would rewrite them forever.
#[derive(Debug, Clone, Default)]
pub struct Accepted {
    /// The pool as we packed it.
    sent: Vec<SliceContent>,
    /// The pool as the API server stored it.
    stored: Vec<SliceContent>,
}

impl Accepted {
    /// What the API server will hold once `packed` is published.
    fn expected<'a>(&'a self, packed: &'a [SliceContent]) -> &'a [SliceContent] {
        if self.sent == packed {
            &self.stored
        } else {
            packed
        }
    }
}

/// Lists, writes and deletes the slices of one node's pool: shared by the node plugin
/// and a node simulator (feature `fleet`), so both publish the same slices.
#[derive(Clone)]
pub struct PoolWriter {
    client: Client,
    api: ResourceApi,
}

impl std::fmt::Debug for PoolWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolWriter")
            .field("api", &self.api)
            .finish_non_exhaustive()
    }
}

impl PoolWriter {
    /// A writer through `api`.
    pub fn new(client: Client, api: ResourceApi) -> Self {
        Self { client, api }
    }

    /// The API version it writes.
    #[cfg(feature = "fleet")]
    pub fn api(&self) -> ResourceApi {
        self.api
    }

    /// Every slice of `driver` the field selector `fields` finds (e.g.
    /// `spec.nodeName=<node>,spec.driver=<driver>`).
    pub async fn list(&self, fields: &str) -> Result<Vec<PublishedSlice>, kube::Error> {
        let lp = ListParams::default().fields(fields);
        Ok(match self.api {
            ResourceApi::V1 => Api::<v1::ResourceSlice>::all(self.client.clone())
                .list(&lp)
                .await?
                .items
                .iter()
                .map(pool::from_v1)
                .collect(),
            ResourceApi::V1beta1 => Api::<v1beta1::ResourceSlice>::all(self.client.clone())
                .list(&lp)
                .await?
                .items
                .iter()
                .map(pool::from_v1beta1)
                .collect(),
        })
    }

    /// Writes one slice of a pool of `count`; returns it as the API server stored it.
    async fn write(
        &self,
        desired: &Desired,
        update: Option<&(String, Option<String>)>,
        content: &SliceContent,
        generation: i64,
        count: usize,
        owner: Option<&OwnerReference>,
    ) -> Result<PublishedSlice, kube::Error> {
        let pp = PostParams::default();
        Ok(match self.api {
            ResourceApi::V1 => {
                let api = Api::<v1::ResourceSlice>::all(self.client.clone());
                let obj = pool::to_v1(desired, update, content, generation, count, owner);
                pool::from_v1(&match update {
                    Some((name, _)) => api.replace(name, &pp, &obj).await?,
                    None => api.create(&pp, &obj).await?,
                })
            }
            ResourceApi::V1beta1 => {
                let api = Api::<v1beta1::ResourceSlice>::all(self.client.clone());
                let obj = pool::to_v1beta1(desired, update, content, generation, count, owner);
                pool::from_v1beta1(&match update {
                    Some((name, _)) => api.replace(name, &pp, &obj).await?,
                    None => api.create(&pp, &obj).await?,
                })
            }
        })
    }

    /// Deletes a slice; gone already is fine.
    pub async fn delete(&self, name: &str) -> Result<(), kube::Error> {
        let dp = DeleteParams::default();
        let result = match self.api {
            ResourceApi::V1 => Api::<v1::ResourceSlice>::all(self.client.clone())
                .delete(name, &dp)
                .await
                .map(|_| ()),
            ResourceApi::V1beta1 => Api::<v1beta1::ResourceSlice>::all(self.client.clone())
                .delete(name, &dp)
                .await
                .map(|_| ()),
        };
        match result {
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            other => other,
        }
    }

    /// Deletes every slice of `driver` on `node`, whatever its pool; failures are logged,
    /// not retried (the Node's owner reference removes them when the Node goes).
    #[cfg(feature = "fleet")]
    pub async fn delete_node_pools(&self, driver: &str, node: &str) {
        match self.list(&node_slices_selector(driver, node)).await {
            Ok(found) => {
                let on_node = |s: &&PublishedSlice| {
                    s.driver == driver && s.node_name.as_deref() == Some(node)
                };
                for s in found.iter().filter(on_node) {
                    if let Err(e) = self.delete(&s.name).await {
                        warn!(%node, slice = %s.name, error = %e, "deleting a slice of a pool that is gone failed");
                    }
                }
            }
            Err(e) => warn!(%node, error = %e, "listing the slices of a pool that is gone failed"),
        }
    }

    /// One round for one pool, given its slices as listed (`existing`, ours only): plan,
    /// write, delete.
    pub async fn reconcile(
        &self,
        desired: &Desired,
        existing: &[PublishedSlice],
        last_generation: i64,
        owner: Option<&OwnerReference>,
        accepted: &mut Accepted,
    ) -> Result<Reconciled, ReconcileError> {
        let packed = pool::pack(desired)?;
        let plan = pool::plan(
            desired,
            &packed,
            accepted.expected(&packed),
            existing,
            last_generation,
        );
        let SlicePlan::Write {
            generation,
            slices: writes,
            delete,
        } = plan
        else {
            debug!(pool = %desired.pool, "ResourceSlices up to date");
            return Ok(Reconciled {
                generation: existing.first().map_or(last_generation, |s| s.generation),
                written: None,
            });
        };
        let count = writes.len();
        let mut published = Vec::with_capacity(count);
        for (update, content) in &writes {
            published.push(
                self.write(desired, update.as_ref(), content, generation, count, owner)
                    .await?,
            );
        }
        let names: Vec<String> = published.iter().map(|s| s.name.clone()).collect();
        let stored: Vec<SliceContent> = published.iter().map(|s| s.content.clone()).collect();
        for stale in &delete {
            self.delete(stale).await?;
        }
        let dropped: Vec<&str> = writes
            .iter()
            .zip(&stored)
            .flat_map(|((_, sent), stored)| pool::dropped_features(sent, stored))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        if !dropped.is_empty() && accepted.sent != packed {
            error!(
                pool = %desired.pool,
                dropped = ?dropped,
                "the API server dropped fields of the ResourceSlices without an error: turn on these feature gates (kube-apiserver and kube-scheduler), or the scheduler sees devices without them"
            );
        }
        *accepted = Accepted {
            sent: packed,
            stored,
        };
        info!(
            slices = ?names,
            api = self.api.version(),
            pool = %desired.pool,
            generation,
            devices = desired.devices.len(),
            counter_sets = desired.counter_sets.len(),
            removed = ?delete,
            "ResourceSlices published"
        );
        Ok(Reconciled {
            generation,
            written: Some(published),
        })
    }
}

/// What one round did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reconciled {
    /// The generation now published.
    pub generation: i64,
    /// The pool's slices as the API server stored them, if they were written.
    pub written: Option<Vec<PublishedSlice>>,
}

/// Why a pool could not be published.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReconcileError {
    /// The devices do not fit the API's limits: nothing is written.
    #[error(transparent)]
    Pack(#[from] pool::PackError),
    /// The API server failed or refused.
    #[error(transparent)]
    Api(#[from] kube::Error),
}

impl SliceController {
    /// A publisher of `desired` through `api`, with the taints and binding conditions
    /// `hook` adds.
    pub(crate) fn new(
        client: Client,
        api: ResourceApi,
        desired: Desired,
        inventory: Arc<dyn Inventory>,
        hook: Arc<dyn FaultHook>,
    ) -> Self {
        Self {
            client,
            api,
            desired,
            inventory,
            hook,
        }
    }

    /// What to publish now: the profile's devices with the hook's overlay, without the
    /// taints the serving release would refuse the whole slice for, in their pools.
    fn effective(&self) -> Result<Vec<Desired>, pool::PackError> {
        let mut desired = self.desired.clone();
        let rules = TaintRules::of(desired.layout);
        desired.counter_sets = self.inventory.counter_sets();
        desired.devices = self.hook.overlay(self.inventory.devices(), rules);
        for d in &mut desired.devices {
            let before = d.taints.len();
            d.taints.retain(|t| rules.allows(t.effect));
            d.taints.truncate(rules.max_per_device);
            if d.taints.len() != before {
                tracing::warn!(
                    device = %d.name,
                    dropped = before - d.taints.len(),
                    "taints left out: this Kubernetes release accepts at most {} a device{}",
                    rules.max_per_device,
                    if rules.effect_none { "" } else { ", and only the effects NoSchedule and NoExecute" }
                );
            }
        }
        pool::node_pools(desired, |d| self.inventory.device_pool(d))
    }

    /// Gives the controller the pools there are now; keeps the last ones published when
    /// the driver's devices cannot be split into pools.
    fn publish(&self, controller: &PoolController, owner: &Option<OwnerReference>) {
        match self.effective() {
            Ok(pools) => controller.set_all(pools, owner.clone()),
            Err(e) => {
                error!(error = %e, "cannot publish the node's devices; the pools published last stay");
            }
        }
    }

    /// Publishes the node's pool (retrying with backoff until the first list works),
    /// marks the plugin ready once it is published, then keeps it published. Never
    /// returns on its own.
    pub async fn run(self, ready: Arc<AtomicBool>) {
        let node = self.desired.node_name.clone();
        let owner = match node_owner(&self.client, &node).await {
            Ok(owner) => owner,
            Err(e) => {
                warn!(error = %e, "cannot read our Node; publishing ResourceSlices without an owner reference");
                None
            }
        };
        let mut backoff = Duration::from_millis(200);
        let controller = loop {
            match PoolController::start(
                self.client.clone(),
                self.api,
                self.desired.driver.clone(),
                PoolScope::Node(node.clone()),
                1,
            )
            .await
            {
                Ok(controller) => break controller,
                Err(e) => {
                    warn!(error = %e, "listing the node's ResourceSlices failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                }
            }
        };
        self.publish(&controller, &owner);
        // What the hook changes (a fault added or removed) and what the driver changes (a
        // device plugged in or out, one failing) change the slices at once; the driver is
        // asked again at every resync besides.
        let mut changes = futures::stream::select(self.hook.changes(), self.inventory.changes())
            .chain(futures::stream::pending());
        let mut stats = controller.stats();
        let mut resync = tokio::time::interval(RESYNC);
        loop {
            tokio::select! {
                _ = changes.next() => self.publish(&controller, &owner),
                _ = resync.tick() => self.publish(&controller, &owner),
                changed = stats.changed(), if !ready.load(Ordering::SeqCst) => {
                    let now = *stats.borrow_and_update();
                    if changed.is_ok() && now.pools > 0 && now.in_sync == now.pools
                        && !ready.swap(true, Ordering::SeqCst)
                    {
                        info!(node = %node, pools = now.pools, "ResourceSlices published, ready");
                    }
                }
            }
        }
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The owner reference to `node_name`'s Node, if the Node exists, so an object published
/// for the node (NodeAllocationState, ResourceSlice) goes away with the Node.
pub async fn node_owner(
    client: &Client,
    node_name: &str,
) -> Result<Option<OwnerReference>, kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    Ok(nodes.get_opt(node_name).await?.and_then(|node| {
        node.metadata.uid.map(|uid| OwnerReference {
            api_version: "v1".into(),
            kind: "Node".into(),
            name: node_name.to_owned(),
            uid,
            ..Default::default()
        })
    }))
}

/// The field selector of `node`'s slices of `driver`.
pub fn node_slices_selector(driver: &str, node: &str) -> String {
    format!("spec.nodeName={node},spec.driver={driver}")
}

/// The API server's minor version, if it is a plain 1.x release.
pub(crate) async fn server_minor(client: &Client) -> Option<u32> {
    match client.apiserver_version().await {
        Ok(info) => {
            let minor: String = info
                .minor
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            match (info.major.as_str(), minor.parse::<u32>()) {
                ("1", Ok(minor)) => Some(minor),
                _ => {
                    warn!(major = %info.major, minor = %info.minor, "unexpected API server version");
                    None
                }
            }
        }
        Err(e) => {
            warn!(error = %e, "cannot read the API server version");
            None
        }
    }
}

/// Where the API server wants counter sets: from its version (1.35+ in slices of their
/// own); 1.34 layout when the version cannot be read or is not a plain release number.
pub async fn counter_layout(client: &Client, api: ResourceApi) -> CounterLayout {
    if api == ResourceApi::V1beta1 {
        return CounterLayout::WithDevices;
    }
    match server_minor(client).await {
        Some(minor) => CounterLayout::for_minor(minor),
        None => {
            warn!("publishing counter sets as Kubernetes 1.34 wants them");
            CounterLayout::WithDevices
        }
    }
}
