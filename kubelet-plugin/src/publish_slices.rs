//! Publishes the node's ResourceSlice (structured mode) and keeps it there. Thin: lists
//! this node's slices of our driver, asks [`crate::slices::plan`] what to change, writes.
//!
//! Why a watch rather than polling: a slice deleted by hand (or by a confused tool) must
//! come back before the scheduler misses the node's devices, and a watch with the field
//! selector `spec.nodeName=<node>,spec.driver=<driver>` sees exactly our slices at no cost
//! while nothing happens. Every event (including our own writes, which then plan to
//! nothing) triggers a reconcile; a slow resync covers a watch that silently stalls.
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
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::sync::Notify;
use tokio_stream::StreamExt;
use tracing::{debug, info, warn};

use crate::mode::ResourceApi;
use crate::slices::{self, Desired, PublishedSlice, SlicePlan};

/// A resync even without events, in case a watch stalls without an error.
const RESYNC: Duration = Duration::from_secs(30);

/// Coalesces a burst of events (ours included) into one reconcile.
const DEBOUNCE: Duration = Duration::from_millis(100);

/// Writes this node's ResourceSlice.
#[derive(Clone)]
pub struct SlicePublisher {
    client: Client,
    api: ResourceApi,
    desired: Desired,
}

impl std::fmt::Debug for SlicePublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlicePublisher")
            .field("api", &self.api)
            .field("node", &self.desired.node_name)
            .finish_non_exhaustive()
    }
}

impl SlicePublisher {
    /// A publisher of `desired` through `api`.
    pub fn new(client: Client, api: ResourceApi, desired: Desired) -> Self {
        Self {
            client,
            api,
            desired,
        }
    }

    /// The field selector of this node's slices of our driver (both fields are selectable
    /// on ResourceSlices).
    fn field_selector(&self) -> String {
        format!(
            "spec.nodeName={},spec.driver={}",
            self.desired.node_name, self.desired.driver
        )
    }

    async fn list(&self) -> Result<Vec<PublishedSlice>, kube::Error> {
        let lp = ListParams::default().fields(&self.field_selector());
        let all: Vec<PublishedSlice> = match self.api {
            ResourceApi::V1 => Api::<v1::ResourceSlice>::all(self.client.clone())
                .list(&lp)
                .await?
                .items
                .iter()
                .map(slices::from_v1)
                .collect(),
            ResourceApi::V1beta1 => Api::<v1beta1::ResourceSlice>::all(self.client.clone())
                .list(&lp)
                .await?
                .items
                .iter()
                .map(slices::from_v1beta1)
                .collect(),
        };
        Ok(all
            .into_iter()
            .filter(|s| slices::is_ours(s, &self.desired.driver, &self.desired.node_name))
            .collect())
    }

    async fn write(
        &self,
        update: Option<&(String, Option<String>)>,
        generation: i64,
        owner: Option<&OwnerReference>,
    ) -> Result<String, kube::Error> {
        let pp = PostParams::default();
        let d = &self.desired;
        let name = match self.api {
            ResourceApi::V1 => {
                let api = Api::<v1::ResourceSlice>::all(self.client.clone());
                let obj = slices::to_v1(d, update, generation, owner);
                match update {
                    Some((name, _)) => api.replace(name, &pp, &obj).await?,
                    None => api.create(&pp, &obj).await?,
                }
                .metadata
                .name
            }
            ResourceApi::V1beta1 => {
                let api = Api::<v1beta1::ResourceSlice>::all(self.client.clone());
                let obj = slices::to_v1beta1(d, update, generation, owner);
                match update {
                    Some((name, _)) => api.replace(name, &pp, &obj).await?,
                    None => api.create(&pp, &obj).await?,
                }
                .metadata
                .name
            }
        };
        Ok(name.unwrap_or_default())
    }

    async fn delete(&self, name: &str) -> Result<(), kube::Error> {
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

    /// One round: list, plan, write. Returns the generation now published.
    pub async fn reconcile(
        &self,
        last_generation: i64,
        owner: Option<&OwnerReference>,
    ) -> Result<i64, kube::Error> {
        let existing = self.list().await?;
        match slices::plan(&self.desired, &existing, last_generation) {
            SlicePlan::UpToDate => {
                debug!("ResourceSlice up to date");
                Ok(existing.first().map_or(last_generation, |s| s.generation))
            }
            SlicePlan::Write {
                update,
                generation,
                delete,
            } => {
                let name = self.write(update.as_ref(), generation, owner).await?;
                for stale in &delete {
                    self.delete(stale).await?;
                }
                info!(
                    slice = %name,
                    api = self.api.version(),
                    pool = %self.desired.node_name,
                    generation,
                    devices = self.desired.devices.len(),
                    removed = ?delete,
                    "ResourceSlice published"
                );
                Ok(generation)
            }
        }
    }

    /// Watches this node's slices and wakes `notify` on every event.
    async fn watch(self, notify: Arc<Notify>) {
        let config = watcher::Config::default().fields(&self.field_selector());
        macro_rules! pump {
            ($ty:ty) => {{
                let api = Api::<$ty>::all(self.client.clone());
                let mut events = std::pin::pin!(watcher(api, config).default_backoff());
                let mut warned = false;
                while let Some(event) = events.next().await {
                    match event {
                        Ok(_) => notify.notify_one(),
                        Err(e) if !warned => {
                            warned = true;
                            warn!(error = %e, "watching ResourceSlices failed; retrying (resync every {RESYNC:?} meanwhile)");
                        }
                        Err(e) => debug!(error = %e, "watching ResourceSlices"),
                    }
                }
            }};
        }
        match self.api {
            ResourceApi::V1 => pump!(v1::ResourceSlice),
            ResourceApi::V1beta1 => pump!(v1beta1::ResourceSlice),
        }
    }

    /// Publishes the slice (retrying with backoff until it works), marks the plugin ready,
    /// then keeps it published. Never returns on its own.
    pub async fn run(self, ready: Arc<AtomicBool>) {
        let owner = match node_owner(&self.client, &self.desired.node_name).await {
            Ok(owner) => owner,
            Err(e) => {
                warn!(error = %e, "cannot read our Node; publishing ResourceSlices without an owner reference");
                None
            }
        };
        let notify = Arc::new(Notify::new());
        // Stops the watch when this task is aborted (shutdown).
        let _watch = AbortOnDrop(tokio::spawn(self.clone().watch(notify.clone())));
        let mut generation = 0;
        let mut backoff = Duration::from_millis(200);
        loop {
            match self.reconcile(generation, owner.as_ref()).await {
                Ok(g) => {
                    generation = g;
                    backoff = Duration::from_millis(200);
                    if !ready.swap(true, Ordering::SeqCst) {
                        info!(node = %self.desired.node_name, "ResourceSlice published, ready");
                    }
                    let _ = tokio::time::timeout(RESYNC, notify.notified()).await;
                    tokio::time::sleep(DEBOUNCE).await;
                }
                Err(e) => {
                    warn!(error = %e, "publishing ResourceSlice failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(30));
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
