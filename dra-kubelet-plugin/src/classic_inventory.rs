//! Classic DRA (Kubernetes 1.27–1.30, feature `classic`): the driver's controller
//! allocates from an inventory the node publishes in a driver-specific object, so the
//! driver brings what publishes it ([`ClassicInventory`]). The plugin serves the
//! `v1alpha2`/`v1alpha3` node services and asks the profile to read each allocation
//! handle (`DeviceProfile::prepare_handle`).

use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use futures::future::BoxFuture;

/// Publishes the node's inventory and prepared claims for a classic DRA controller (in a
/// driver-specific object, e.g. a NodeAllocationState).
pub trait ClassicInventory: Debug + Send + Sync + 'static {
    /// Publishes the node (retrying until it works), sets `ready`, then keeps what it
    /// publishes of `claims` current. Runs until aborted at shutdown.
    fn run(&self, claims: PreparedClaims, ready: Arc<AtomicBool>) -> BoxFuture<'static, ()>;

    /// At shutdown, after the sockets are gone: marks the node not ready. The plugin
    /// waits for it.
    fn shutdown(&self, claims: Vec<PreparedClaim>) -> BoxFuture<'_, ()>;
}

/// A prepared claim as the node's inventory lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PreparedClaim {
    /// The claim's uid.
    pub uid: String,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The node devices it holds (`DeviceProfile::held_devices`).
    pub devices: Vec<String>,
}

impl PreparedClaim {
    /// Claim `namespace/name` (`uid`) holding `devices`.
    pub fn new(
        uid: impl Into<String>,
        namespace: impl Into<String>,
        name: impl Into<String>,
        devices: Vec<String>,
    ) -> Self {
        Self {
            uid: uid.into(),
            namespace: namespace.into(),
            name: name.into(),
            devices,
        }
    }
}

/// The node's prepared claims, now and as they change.
#[derive(Clone)]
pub struct PreparedClaims {
    list: Arc<dyn Fn() -> Vec<PreparedClaim> + Send + Sync>,
    changes: tokio::sync::watch::Receiver<u64>,
}

impl Debug for PreparedClaims {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedClaims").finish_non_exhaustive()
    }
}

impl PreparedClaims {
    /// The claims `list` gives, changing whenever `changes` moves.
    pub(crate) fn new(
        list: Arc<dyn Fn() -> Vec<PreparedClaim> + Send + Sync>,
        changes: tokio::sync::watch::Receiver<u64>,
    ) -> Self {
        Self { list, changes }
    }

    /// The claims prepared now.
    pub fn current(&self) -> Vec<PreparedClaim> {
        (self.list)()
    }

    /// Waits for the next change after the last one seen; `false` once the plugin is gone.
    pub async fn changed(&mut self) -> bool {
        let changed = self.changes.changed().await.is_ok();
        self.changes.mark_unchanged();
        changed
    }

    /// Forgets the changes so far: [`PreparedClaims::changed`] waits for a new one.
    pub fn mark_seen(&mut self) {
        self.changes.mark_unchanged();
    }
}
