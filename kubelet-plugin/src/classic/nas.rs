//! Publishes the node's `NodeAllocationState`: the inventory in `spec`, readiness and the
//! prepared claims in `status`. Every write is a read-modify-write with the object's
//! resourceVersion, retried on 409 Conflict.

use std::time::Duration;

use fake_dra_api::nas::{
    NodeAllocationState, NodeAllocationStateSpec, NodeAllocationStateStatus, NodePhase,
    PreparedClaim,
};

use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tracing::{debug, warn};

use dra_kubelet_plugin::classic::ClassicInventory;
use dra_kubelet_plugin::classic::PreparedClaims;
use dra_kubelet_plugin::slices::node_owner;
use futures::future::BoxFuture;

/// How long the status publisher waits after a change before writing, to batch changes.
const STATUS_COALESCE: Duration = Duration::from_millis(250);

/// Attempts per write before giving up on conflicts.
const MAX_CONFLICT_RETRIES: usize = 10;

/// Where and what to publish.
#[derive(Clone)]
pub struct NasInventory {
    client: Client,
    namespace: String,
    node_name: String,
    spec: NodeAllocationStateSpec,
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

impl std::fmt::Debug for NasInventory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NasInventory")
            .field("namespace", &self.namespace)
            .field("node_name", &self.node_name)
            .finish_non_exhaustive()
    }
}

impl NasInventory {
    /// A publisher for `node_name`'s object in `namespace`.
    pub fn new(
        client: Client,
        namespace: &str,
        node_name: &str,
        spec: NodeAllocationStateSpec,
    ) -> Self {
        Self {
            client,
            namespace: namespace.to_owned(),
            node_name: node_name.to_owned(),
            spec,
        }
    }

    fn api(&self) -> Api<NodeAllocationState> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Creates the object or brings its spec and owner up to date.
    pub async fn ensure_spec(&self) -> Result<NodeAllocationState, kube::Error> {
        let api = self.api();
        let owner = match node_owner(&self.client, &self.node_name).await {
            Ok(owner) => owner,
            Err(e) => {
                warn!(error = %e, "cannot read our Node; publishing without an owner reference");
                None
            }
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            let result = match api.get_opt(&self.node_name).await? {
                None => {
                    let nas = NodeAllocationState {
                        metadata: ObjectMeta {
                            name: Some(self.node_name.clone()),
                            namespace: Some(self.namespace.clone()),
                            owner_references: owner.clone().map(|o| vec![o]),
                            ..Default::default()
                        },
                        spec: self.spec.clone(),
                        status: None,
                    };
                    api.create(&PostParams::default(), &nas).await
                }
                Some(mut nas) => {
                    let mut changed = nas.spec != self.spec;
                    nas.spec = self.spec.clone();
                    if let Some(owner) = &owner {
                        let refs = nas.metadata.owner_references.get_or_insert_with(Vec::new);
                        if !refs.iter().any(|r| r.uid == owner.uid) {
                            refs.push(owner.clone());
                            changed = true;
                        }
                    }
                    if !changed {
                        return Ok(nas);
                    }
                    api.replace(&self.node_name, &PostParams::default(), &nas)
                        .await
                }
            };
            match result {
                Err(e) if is_conflict(&e) && attempt < MAX_CONFLICT_RETRIES => {
                    debug!(attempt, "conflict writing NodeAllocationState; retrying");
                }
                other => return other,
            }
        }
    }

    /// Writes the status.
    pub async fn set_status(
        &self,
        phase: NodePhase,
        message: Option<String>,
        prepared: Vec<PreparedClaim>,
    ) -> Result<(), kube::Error> {
        let api = self.api();
        let status = NodeAllocationStateStatus::new(phase, message, &self.spec, prepared);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut nas = match api.get_opt(&self.node_name).await? {
                Some(nas) => nas,
                // Deleted under us (or never created): recreate, then write the status.
                None => self.ensure_spec().await?,
            };
            if nas.status.as_ref() == Some(&status) {
                return Ok(());
            }
            nas.status = Some(status.clone());
            match api
                .replace_status(&self.node_name, &PostParams::default(), &nas)
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if is_conflict(&e) && attempt < MAX_CONFLICT_RETRIES => {
                    debug!(
                        attempt,
                        "conflict writing NodeAllocationState status; retrying"
                    );
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Publishes spec and Ready status, retrying with backoff until it works; then keeps
    /// the prepared-claims list current whenever the claims change. Never returns on its
    /// own.
    async fn publish(
        self,
        mut claims: PreparedClaims,
        ready: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) {
        let mut backoff = Duration::from_millis(200);
        loop {
            let result = async {
                self.ensure_spec().await?;
                self.set_status(NodePhase::Ready, None, listed(&claims.current()))
                    .await
            }
            .await;
            match result {
                Ok(()) => break,
                Err(e) => {
                    warn!(error = %e, "publishing NodeAllocationState failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(30));
                }
            }
        }
        ready.store(true, std::sync::atomic::Ordering::SeqCst);
        tracing::info!(node = %self.node_name, "NodeAllocationState published, Ready");
        claims.mark_seen();
        while claims.changed().await {
            // The list is informational: coalesce bursts of prepares into one write, so a
            // busy node does not spend its time (and the apiserver's) on status updates.
            tokio::time::sleep(STATUS_COALESCE).await;
            claims.mark_seen();
            if let Err(e) = self
                .set_status(NodePhase::Ready, None, listed(&claims.current()))
                .await
            {
                warn!(error = %e, "updating NodeAllocationState status failed; next change retries");
            }
        }
    }
}

/// The prepared claims as the status lists them.
fn listed(claims: &[dra_kubelet_plugin::classic::PreparedClaim]) -> Vec<PreparedClaim> {
    claims
        .iter()
        .map(|c| PreparedClaim {
            uid: c.uid.clone(),
            namespace: c.namespace.clone(),
            name: c.name.clone(),
            devices: c.devices.clone(),
        })
        .collect()
}

/// The library runs the publisher in classic mode and marks the node NotReady at
/// shutdown.
impl ClassicInventory for NasInventory {
    fn run(
        &self,
        claims: PreparedClaims,
        ready: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> BoxFuture<'static, ()> {
        Box::pin(self.clone().publish(claims, ready))
    }

    fn shutdown(
        &self,
        claims: Vec<dra_kubelet_plugin::classic::PreparedClaim>,
    ) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let not_ready = self.set_status(
                NodePhase::NotReady,
                Some("kubelet plugin shut down".into()),
                listed(&claims),
            );
            match tokio::time::timeout(Duration::from_secs(10), not_ready).await {
                Ok(Ok(())) => tracing::info!("NodeAllocationState NotReady"),
                Ok(Err(e)) => warn!(error = %e, "marking NodeAllocationState NotReady"),
                Err(_) => warn!("marking NodeAllocationState NotReady timed out"),
            }
        })
    }
}
