//! Keeps any number of node pools of one driver published, as upstream's
//! `resourceslice.Controller` does for a driver's `DriverResources`: the node plugin
//! runs it with its own node's pools, a node simulator (fake-dra's fleet mode) with
//! thousands of nodes' pools. The caller says what each pool should hold
//! ([`PoolController::set`], [`PoolController::set_all`]); the controller writes a pool
//! only when that differs from what it last wrote, so a steady set of pools costs no
//! requests, and deletes the slices of a pool it is told to drop.
//!
//! What was last written is kept per pool. A watch of the driver's slices (in the
//! controller's scope) notices what someone else changed or deleted: that pool is listed
//! again and rewritten. A write refused for a stale resourceVersion lists again too. A
//! lost watch lists everything again and rewrites every pool whose slices are not the
//! ones last written.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::{v1, v1beta1};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use tokio::sync::{Notify, watch};
use tracing::{debug, error, info, warn};

use super::{AbortOnDrop, Accepted, PoolWriter, RESYNC, ReconcileError, node_slices_selector};
use crate::dra_mode::ResourceApi;
use crate::pool::{self, Desired, PublishedSlice};
use events::{external_change, stale_after_relist};

/// Lets a burst of changes gather into one round.
const DEBOUNCE: Duration = Duration::from_millis(50);
/// The first retry of a pool whose write failed; doubled up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Which of the driver's slices a controller looks after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolScope {
    /// One node's: what a node plugin watches (`spec.nodeName` and `spec.driver`).
    Node(String),
    /// Every node's (`spec.driver`): a node simulator publishing for many nodes.
    #[cfg_attr(not(feature = "fleet"), allow(dead_code))]
    AllNodes,
}

/// How far the pools are published, after each round.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Pools the controller was given.
    pub pools: usize,
    /// Of them, those whose slices are as wanted.
    pub in_sync: usize,
    /// Pools written since the start.
    pub writes: u64,
}

/// What the controller knows about one pool.
#[derive(Debug, Default)]
struct PoolState {
    /// What to publish; `None` for a pool to delete (listed, or dropped by the caller).
    desired: Option<Desired>,
    /// The pool's node.
    node: String,
    owner: Option<OwnerReference>,
    /// The slices as last written (or listed).
    record: Vec<PublishedSlice>,
    /// Someone else changed the pool's slices: list them before writing.
    needs_list: bool,
    last_generation: i64,
    accepted: Accepted,
    in_sync: bool,
    backoff: Option<Duration>,
}

impl PoolState {
    fn seeded(node: String, record: Vec<PublishedSlice>) -> Self {
        Self {
            node,
            last_generation: record.iter().map(|s| s.generation).max().unwrap_or(0),
            record,
            ..Self::default()
        }
    }

    /// A pool found at the start that nobody publishes: to delete.
    fn leftover(slices: Vec<PublishedSlice>) -> Self {
        let node = slices
            .first()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        Self::seeded(node, slices)
    }
}

struct Inner {
    writer: PoolWriter,
    client: Client,
    driver: String,
    scope: PoolScope,
    concurrency: usize,
    /// By pool name.
    pools: Mutex<BTreeMap<String, PoolState>>,
    /// Listed at the start, by pool name, for pools not given yet.
    listed: Mutex<BTreeMap<String, Vec<PublishedSlice>>>,
    dirty: Mutex<BTreeSet<String>>,
    wake: Notify,
    writes: AtomicU64,
    stats: watch::Sender<PoolStats>,
}

/// A handle on the running controller; cheap to clone. The controller stops when the
/// last handle is dropped. Slices stay where they are: see [`PoolController::remove`].
#[derive(Clone)]
pub struct PoolController {
    inner: Arc<Inner>,
    _tasks: Arc<[AbortOnDrop; 2]>,
}

impl std::fmt::Debug for PoolController {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolController")
            .field("driver", &self.inner.driver)
            .field("scope", &self.inner.scope)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl PoolController {
    /// Lists the driver's slices in `scope` and starts publishing, `concurrency` pools at a
    /// time. Fails only if that first list fails (RBAC, no such API): then nothing started.
    pub async fn start(
        client: Client,
        api: ResourceApi,
        driver: String,
        scope: PoolScope,
        concurrency: usize,
    ) -> Result<Self, kube::Error> {
        let writer = PoolWriter::new(client.clone(), api);
        let fields = field_selector(&driver, &scope);
        let mut listed: BTreeMap<String, Vec<PublishedSlice>> = BTreeMap::new();
        for s in writer.list(&fields).await? {
            if s.node_name.is_some() && s.driver == driver {
                listed.entry(s.pool.clone()).or_default().push(s);
            }
        }
        let (stats, _) = watch::channel(PoolStats::default());
        let inner = Arc::new(Inner {
            writer,
            client,
            driver,
            scope,
            concurrency: concurrency.max(1),
            pools: Mutex::default(),
            listed: Mutex::new(listed),
            dirty: Mutex::default(),
            wake: Notify::new(),
            writes: AtomicU64::new(0),
            stats,
        });
        let watch = AbortOnDrop(tokio::spawn(inner.clone().watch(api)));
        let rounds = AbortOnDrop(tokio::spawn(inner.clone().rounds()));
        Ok(Self {
            inner,
            _tasks: Arc::new([watch, rounds]),
        })
    }

    /// What the pool `desired.pool` of `desired.node_name` should hold from now on, with
    /// `owner` as its slices' owner (the Node, so they go with it). Written at the next
    /// round if it differs from what was last written.
    #[cfg(feature = "fleet")]
    pub fn set(&self, desired: Desired, owner: Option<OwnerReference>) {
        if self.update(desired, owner) {
            self.inner.wake.notify_one();
        }
    }

    /// The pools there are now, all of them: each is [`Self::set`], and every other pool
    /// the controller published or found in its scope at the start is deleted (a pool
    /// the driver no longer has).
    pub fn set_all(&self, pools: Vec<Desired>, owner: Option<OwnerReference>) {
        let keep: std::collections::BTreeSet<String> =
            pools.iter().map(|d| d.pool.clone()).collect();
        let mut changed = false;
        for desired in pools {
            changed |= self.update(desired, owner.clone());
        }
        let listed: Vec<(String, Vec<PublishedSlice>)> = {
            let mut listed = lock(&self.inner.listed);
            let gone: Vec<String> = listed
                .keys()
                .filter(|p| !keep.contains(*p))
                .cloned()
                .collect();
            gone.into_iter()
                .filter_map(|p| listed.remove(&p).map(|slices| (p, slices)))
                .collect()
        };
        {
            let mut states = lock(&self.inner.pools);
            let mut dirty = lock(&self.inner.dirty);
            for (pool, slices) in listed {
                states.insert(pool.clone(), PoolState::leftover(slices));
                dirty.insert(pool);
                changed = true;
            }
            for (pool, state) in states.iter_mut() {
                if !keep.contains(pool) && state.desired.is_some() {
                    state.desired = None;
                    state.in_sync = false;
                    dirty.insert(pool.clone());
                    changed = true;
                }
            }
        }
        if changed {
            self.inner.wake.notify_one();
        }
    }

    /// Records `desired` and marks its pool if it changed; whether it did.
    fn update(&self, desired: Desired, owner: Option<OwnerReference>) -> bool {
        let pool = desired.pool.clone();
        {
            let mut pools = lock(&self.inner.pools);
            let state = pools.entry(pool.clone()).or_insert_with(|| {
                let listed = lock(&self.inner.listed).remove(&pool).unwrap_or_default();
                PoolState::seeded(desired.node_name.clone(), listed)
            });
            if state.in_sync && state.desired.as_ref() == Some(&desired) && state.owner == owner {
                return false;
            }
            state.node = desired.node_name.clone();
            state.desired = Some(desired);
            state.owner = owner;
        }
        lock(&self.inner.dirty).insert(pool);
        true
    }

    /// Stops publishing `pool` and deletes its slices at the next round (a node that
    /// left; when the Node itself is deleted, its owner reference removes them as well).
    #[cfg(feature = "fleet")]
    pub fn remove(&self, pool: &str) {
        let listed = lock(&self.inner.listed).remove(pool);
        {
            let mut pools = lock(&self.inner.pools);
            if let Some(slices) = listed {
                pools
                    .entry(pool.to_owned())
                    .or_insert_with(|| PoolState::leftover(slices));
            }
            let Some(state) = pools.get_mut(pool) else {
                return;
            };
            state.desired = None;
            state.in_sync = false;
        }
        self.inner.mark(pool);
    }

    /// The pools' progress, updated after every round.
    pub fn stats(&self) -> watch::Receiver<PoolStats> {
        self.inner.stats.subscribe()
    }
}

fn field_selector(driver: &str, scope: &PoolScope) -> String {
    match scope {
        PoolScope::Node(node) => node_slices_selector(driver, node),
        PoolScope::AllNodes => format!("spec.driver={driver}"),
    }
}

impl Inner {
    fn mark(&self, node: &str) {
        lock(&self.dirty).insert(node.to_owned());
        self.wake.notify_one();
    }

    fn mark_all(&self) {
        let names: Vec<String> = lock(&self.pools).keys().cloned().collect();
        lock(&self.dirty).extend(names);
        self.wake.notify_one();
    }

    fn publish_stats(&self) {
        let (pools, in_sync) = {
            let p = lock(&self.pools);
            let published = || p.values().filter(|s| s.desired.is_some());
            (
                published().count(),
                published().filter(|s| s.in_sync).count(),
            )
        };
        self.stats.send_replace(PoolStats {
            pools,
            in_sync,
            writes: self.writes.load(Ordering::Relaxed),
        });
    }

    /// Publishes the marked pools, `concurrency` at a time, round after round; every
    /// pool again after [`RESYNC`] without events (from its record: no request unless it
    /// changed).
    async fn rounds(self: Arc<Self>) {
        loop {
            let batch: Vec<String> = std::mem::take(&mut *lock(&self.dirty))
                .into_iter()
                .collect();
            if !batch.is_empty() {
                futures::stream::iter(batch.into_iter().map(|n| self.publish(n)))
                    .buffer_unordered(self.concurrency)
                    .collect::<Vec<()>>()
                    .await;
            }
            self.publish_stats();
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(RESYNC) => self.mark_all(),
            }
            tokio::time::sleep(DEBOUNCE).await;
        }
    }

    /// One round for one pool: written if it differs from what was last written, or its
    /// slices deleted if it is to go.
    async fn publish(self: &Arc<Self>, pool: String) {
        // Taken out of the state: the lock is never held across a request.
        let (desired, node, owner, record, needs_list, last_generation, mut accepted) = {
            let mut pools = lock(&self.pools);
            let Some(state) = pools.get_mut(&pool) else {
                return;
            };
            (
                state.desired.clone(),
                state.node.clone(),
                state.owner.clone(),
                state.record.clone(),
                state.needs_list,
                state.last_generation,
                std::mem::take(&mut state.accepted),
            )
        };
        let existing = if needs_list {
            match self
                .writer
                .list(&node_slices_selector(&self.driver, &node))
                .await
            {
                Ok(found) => found
                    .into_iter()
                    .filter(|s| pool::is_ours(s, &self.driver, &node, &pool))
                    .collect(),
                Err(e) => {
                    warn!(%pool, error = %e, "listing the pool's slices failed; retrying");
                    if let Some(state) = lock(&self.pools).get_mut(&pool) {
                        state.accepted = accepted;
                    }
                    self.failed(&pool);
                    return;
                }
            }
        } else {
            record.clone()
        };
        let Some(desired) = desired else {
            self.delete(&pool, &existing).await;
            return;
        };
        if existing.is_empty() && !record.is_empty() && self.owner_is_gone(&pool, &owner).await {
            if let Some(state) = lock(&self.pools).get_mut(&pool) {
                state.accepted = accepted;
            }
            return;
        }
        let result = self
            .writer
            .reconcile(
                &desired,
                &existing,
                last_generation,
                owner.as_ref(),
                &mut accepted,
            )
            .await;
        let mut pools = lock(&self.pools);
        let Some(state) = pools.get_mut(&pool) else {
            return;
        };
        state.accepted = accepted;
        match result {
            Ok(r) => {
                state.last_generation = r.generation;
                state.needs_list = false;
                state.backoff = None;
                // Changed again while it was written: the next round writes that.
                state.in_sync = state.desired.as_ref() == Some(&desired);
                state.record = match r.written {
                    Some(written) => {
                        self.writes.fetch_add(1, Ordering::Relaxed);
                        written
                    }
                    None => existing,
                };
            }
            Err(ReconcileError::Pack(e)) => {
                state.in_sync = false;
                error!(%pool, error = %e, "the pool's devices cannot be published; fix the inventory");
            }
            Err(ReconcileError::Api(kube::Error::Api(s))) if s.code == 409 => {
                // Someone else wrote in between: list and write again at once.
                state.in_sync = false;
                state.needs_list = true;
                drop(pools);
                self.mark(&pool);
            }
            Err(e) => {
                warn!(%pool, error = %e, "publishing the pool's slices failed; retrying");
                drop(pools);
                self.failed(&pool);
            }
        }
    }

    /// Deletes the slices of a pool that is to go; forgets it once they are gone, unless
    /// it was given again meanwhile.
    async fn delete(self: &Arc<Self>, pool: &str, existing: &[PublishedSlice]) {
        for s in existing {
            if let Err(e) = self.writer.delete(&s.name).await {
                warn!(%pool, slice = %s.name, error = %e, "deleting a slice of a pool that is gone failed; retrying");
                self.failed(pool);
                return;
            }
        }
        let mut pools = lock(&self.pools);
        match pools.get_mut(pool) {
            Some(state) if state.desired.is_none() => {
                pools.remove(pool);
                if !existing.is_empty() {
                    info!(%pool, slices = existing.len(), "ResourceSlices of a pool that is gone deleted");
                }
            }
            // Given again meanwhile: written from nothing at its next round.
            Some(state) => {
                state.record.clear();
                state.needs_list = false;
            }
            None => {}
        }
    }

    /// Lists and writes `pool` again after its backoff.
    fn failed(self: &Arc<Self>, pool: &str) {
        let wait = {
            let mut pools = lock(&self.pools);
            let Some(state) = pools.get_mut(pool) else {
                return;
            };
            state.in_sync = false;
            state.needs_list = true;
            let wait = state.backoff.unwrap_or(FIRST_BACKOFF);
            state.backoff = Some((wait * 2).min(MAX_BACKOFF));
            wait
        };
        let pool = pool.to_owned();
        let inner = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            if let Some(inner) = inner.upgrade() {
                inner.mark(&pool);
            }
        });
    }

    /// Whether the pool's owner (a Node) is gone from the API server. Asked when every
    /// slice written for the pool has vanished: the garbage collector removes a deleted
    /// Node's slices, often before whoever manages the pools has heard that the Node is
    /// gone, and publishing them again would only feed it.
    async fn owner_is_gone(&self, pool: &str, owner: &Option<OwnerReference>) -> bool {
        let Some(owner) = owner.as_ref().filter(|o| o.kind == "Node") else {
            return false;
        };
        let gone = match Api::<Node>::all(self.client.clone())
            .get_opt(&owner.name)
            .await
        {
            Ok(None) => true,
            Ok(Some(n)) => n.uid().as_deref() != Some(owner.uid.as_str()),
            // Unknown: publish.
            Err(_) => false,
        };
        if gone {
            info!(%pool, "the pool's Node is gone and its slices collected; not publishing it");
        }
        gone
    }

    /// Marks a pool for listing and writing whenever its slices change other than by our
    /// own writes.
    async fn watch(self: Arc<Self>, api: ResourceApi) {
        let config = watcher::Config::default().fields(&field_selector(&self.driver, &self.scope));
        macro_rules! pump {
            ($ty:ty, $from:path) => {{
                let mut events = std::pin::pin!(
                    watcher(Api::<$ty>::all(self.client.clone()), config).default_backoff()
                );
                // The first list seeds nothing (`start` listed); a later one, after the
                // watch was lost, is compared with the records.
                let mut first_list = true;
                let mut relisted: Option<Vec<PublishedSlice>> = None;
                let mut warned = false;
                while let Some(event) = events.next().await {
                    match event {
                        Ok(watcher::Event::Apply(s)) => self.external_change(&$from(&s), false),
                        Ok(watcher::Event::Delete(s)) => self.external_change(&$from(&s), true),
                        Ok(watcher::Event::Init) => relisted = (!first_list).then(Vec::new),
                        Ok(watcher::Event::InitApply(s)) => {
                            if let Some(seen) = relisted.as_mut() {
                                seen.push($from(&s));
                            }
                        }
                        Ok(watcher::Event::InitDone) => {
                            if let Some(seen) = relisted.take() {
                                self.resync_after_relist(&seen);
                            }
                            first_list = false;
                        }
                        Err(e) if !warned => {
                            warned = true;
                            warn!(error = %e, "watching ResourceSlices failed; retrying (resync every {RESYNC:?} meanwhile)");
                        }
                        Err(e) => debug!(error = %e, "watching ResourceSlices"),
                    }
                }
            }};
        }
        match api {
            ResourceApi::V1 => pump!(v1::ResourceSlice, pool::from_v1),
            ResourceApi::V1beta1 => pump!(v1beta1::ResourceSlice, pool::from_v1beta1),
        }
    }

    fn external_change(&self, slice: &PublishedSlice, deleted: bool) {
        let changed = external_change(&mut lock(&self.pools), &self.driver, slice, deleted);
        if let Some(pool) = changed {
            self.mark(&pool);
        }
    }

    fn resync_after_relist(&self, listed: &[PublishedSlice]) {
        let stale = stale_after_relist(&mut lock(&self.pools), &self.driver, listed);
        for pool in stale {
            self.mark(&pool);
        }
    }
}

mod events;

#[cfg(test)]
mod tests;
