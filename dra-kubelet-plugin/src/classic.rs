//! Classic DRA (Kubernetes 1.27–1.30, feature `classic`): the driver's controller
//! allocates from an inventory the node publishes in a driver-specific object, so the
//! driver brings that publisher. The plugin serves the `v1alpha2`/`v1alpha3` node
//! services and asks the profile to read each allocation handle
//! (`DeviceProfile::prepare_handle`).

use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use futures::future::BoxFuture;

use crate::driver::{PreparedClaim, PreparedClaims};

/// Publishes the node's inventory and prepared claims for a classic DRA controller.
pub trait ClassicPublisher: Debug + Send + Sync + 'static {
    /// Publishes the node (retrying until it works), sets `ready`, then keeps what it
    /// publishes of `claims` current. Runs until aborted at shutdown.
    fn run(&self, claims: PreparedClaims, ready: Arc<AtomicBool>) -> BoxFuture<'static, ()>;

    /// At shutdown, after the sockets are gone: marks the node not ready. The plugin
    /// waits for it.
    fn shutdown(&self, claims: Vec<PreparedClaim>) -> BoxFuture<'_, ()>;
}
