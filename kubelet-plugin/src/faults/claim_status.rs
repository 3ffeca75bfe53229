//! Writes what [`super::device_status`] says into the claims' `status.devices`. Thin: a
//! watch of the ResourceClaims (`resource.k8s.io/v1`, or `v1beta1` where the API server
//! serves no `v1`: Kubernetes 1.32/1.33), started once a fault asks for
//! binding or device status (until then the driver reads claims only when the kubelet
//! asks), and a server-side apply per claim whose entries change, with the driver's field
//! manager for the reporter, so other drivers' entries and the scheduler's fields stay
//! untouched. Kubernetes 1.36+ also want the `resourceclaims/driver` permission
//! (`associated-node:patch` for a node's plugin, `arbitrary-node:patch` for fleet mode);
//! a refusal is logged with what is missing.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use dra_kubelet_plugin::mode::ResourceApi;
use k8s_openapi::api::resource::{v1, v1beta1};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, ResourceExt};
use tokio_stream::StreamExt;
use tracing::{debug, info, warn};

use super::NodeFaults;
use super::device_status::{self, AllocatedResult, Entry};
use super::watch::Faults;

/// How often claims are looked at again without an event (a binding delay running out).
const TICK: Duration = Duration::from_secs(1);

/// The faults of every pool the reporter publishes, by pool name.
pub type PoolFaults = Arc<dyn Fn() -> BTreeMap<String, NodeFaults> + Send + Sync>;

fn wants_claims(pools: &BTreeMap<String, NodeFaults>) -> bool {
    pools.values().any(NodeFaults::writes_claim_status)
}

/// What the writer reads of a claim, in either served version (the fields it reads are
/// the same in both).
trait Claim:
    kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
    + Clone
    + std::fmt::Debug
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
    fn results(&self) -> Vec<AllocatedResult>;
    fn allocated_at(&self) -> Option<&Time>;
}

macro_rules! claim_of {
    ($version:ident) => {
        impl Claim for $version::ResourceClaim {
            fn results(&self) -> Vec<AllocatedResult> {
                self.status
                    .as_ref()
                    .and_then(|s| s.allocation.as_ref())
                    .and_then(|a| a.devices.as_ref())
                    .and_then(|d| d.results.as_ref())
                    .into_iter()
                    .flatten()
                    .map(|r| AllocatedResult {
                        driver: r.driver.clone(),
                        pool: r.pool.clone(),
                        device: r.device.clone(),
                        share_id: r.share_id.clone(),
                        has_binding_conditions: r
                            .binding_conditions
                            .as_ref()
                            .is_some_and(|c| !c.is_empty()),
                    })
                    .collect()
            }

            fn allocated_at(&self) -> Option<&Time> {
                self.status
                    .as_ref()
                    .and_then(|s| s.allocation.as_ref())
                    .and_then(|a| a.allocation_timestamp.as_ref())
            }
        }
    };
}
claim_of!(v1);
claim_of!(v1beta1);

fn age<K: Claim>(claim: &K) -> Duration {
    let Some(at) = claim.allocated_at() else {
        return Duration::ZERO;
    };
    let seconds = jiff::Timestamp::now().as_second() - at.0.as_second();
    Duration::from_secs(u64::try_from(seconds).unwrap_or(0))
}

/// Runs until aborted: `manager` is the field manager (`fake-dra/<node>`).
pub async fn run(
    client: Client,
    api: ResourceApi,
    driver: String,
    manager: String,
    faults: Faults,
    pools: PoolFaults,
) {
    let mut changes = faults.clone();
    // Nothing to do until some fault asks for claim status.
    while !wants_claims(&pools()) {
        if changes.changed().await.is_err() {
            return;
        }
    }
    info!(
        api = api.version(),
        "a DeviceFault asks for binding or device status: watching ResourceClaims"
    );
    match api {
        ResourceApi::V1 => {
            write_status::<v1::ResourceClaim>(client, api, driver, manager, changes, pools).await
        }
        ResourceApi::V1beta1 => {
            write_status::<v1beta1::ResourceClaim>(client, api, driver, manager, changes, pools)
                .await
        }
    }
}

async fn write_status<K: Claim>(
    client: Client,
    version: ResourceApi,
    driver: String,
    manager: String,
    mut changes: Faults,
    pools: PoolFaults,
) {
    let api: Api<K> = Api::all(client.clone());
    let (store, writer) = reflector::store();
    let events = reflector(writer, watcher(api, watcher::Config::default()))
        .default_backoff()
        .touched_objects();
    let mut events = std::pin::pin!(events);
    let mut written: BTreeMap<String, Vec<Entry>> = BTreeMap::new();
    let mut warned = false;
    loop {
        tokio::select! {
            event = events.next() => match event {
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    if !warned {
                        warned = true;
                        warn!(error = %e, "watching ResourceClaims failed (RBAC: list/watch resourceclaims, or the served version); retrying");
                    }
                    continue;
                }
                None => return,
            },
            _ = tokio::time::sleep(TICK) => {}
            _ = changes.changed() => {}
        }
        let faults_by_pool = pools();
        let now = jiff::Timestamp::now().to_string();
        for claim in store.state() {
            let key = format!(
                "{}/{}",
                claim.namespace().unwrap_or_default(),
                claim.name_any()
            );
            let (entries, _) = device_status::entries(
                &driver,
                &claim.results(),
                |p| faults_by_pool.get(p),
                age(claim.as_ref()),
            );
            let before = written.get(&key);
            if before.map_or(entries.is_empty(), |b| *b == entries) {
                continue;
            }
            let namespace = claim.namespace().unwrap_or_default();
            let body = device_status::apply_body(
                version.version(),
                &namespace,
                &claim.name_any(),
                &driver,
                &entries,
                &now,
            );
            let api: Api<K> = Api::namespaced(client.clone(), &namespace);
            match api
                .patch_status(
                    &claim.name_any(),
                    &PatchParams::apply(&manager).force(),
                    &Patch::Apply(&body),
                )
                .await
            {
                Ok(_) => {
                    info!(claim = %key, devices = entries.len(), "claim status.devices written");
                    written.insert(key, entries);
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    written.remove(&key);
                }
                Err(e) => {
                    warn!(claim = %key, error = %e, "writing the claim's status.devices failed (RBAC: patch resourceclaims/status, and from Kubernetes 1.36 resourceclaims/driver with associated-node:patch or arbitrary-node:patch); retrying")
                }
            }
        }
        let live: Vec<String> = store
            .state()
            .iter()
            .map(|c| format!("{}/{}", c.namespace().unwrap_or_default(), c.name_any()))
            .collect();
        written.retain(|k, _| live.contains(k));
        debug!(claims = live.len(), "claim status pass");
    }
}
