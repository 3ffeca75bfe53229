//! Fleet mode's adapter: creates the nodes it is asked to (and keeps their heartbeat
//! Leases fresh), follows the nodes its label selector picks, and tells the library's
//! [`PoolController`] what each node's pool holds (the profile's devices with the
//! faults). The controller publishes them, as it does the node plugin's one pool: many
//! at a time, each written only when it differs from what was last written.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::{Notify, watch};
use tracing::{error, info, warn};

use super::{
    CREATED_BY, FLEET_LABEL, LEASE_NAMESPACE, NodeTemplate, lease_object, node_names, node_object,
    node_owner, node_status_patch, stale_node_names,
};
use crate::faults::watch::{self as fault_watch, StatusWriter};
use crate::faults::{Fault, NodeFaults, claim_status};
use crate::registry::NodeProfile;
use dra_kubelet_plugin::device::SliceDevice;
use dra_kubelet_plugin::device::{CounterLayout, SliceSplit};
use dra_kubelet_plugin::slices;
use dra_kubelet_plugin::slices::{Desired, PoolController, PoolScope, PoolWriter};

/// Everything fleet mode is configured with.
#[derive(Debug, Clone)]
pub struct FleetConfig {
    pub driver_name: String,
    /// Create this many nodes, `<node_name_prefix><i>`.
    pub create_nodes: usize,
    pub node_name_prefix: String,
    pub template: NodeTemplate,
    /// The nodes to publish for (created ones carry [`super::FLEET_LABEL`]).
    pub node_selector: String,
    /// How often created nodes renew their Lease; zero: never.
    pub heartbeat: Duration,
    /// Nodes written at once.
    pub concurrency: usize,
    /// Leave the created nodes when stopping.
    pub keep_nodes: bool,
    pub kubeconfig: Option<std::path::PathBuf>,
    pub http_address: Option<SocketAddr>,
}

/// Why fleet mode stopped.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error(transparent)]
    Kube(#[from] fake_dra_ops::client::ClientError),
    #[error("fleet mode needs structured DRA: {0}")]
    Mode(#[from] dra_kubelet_plugin::mode::ModeError),
    #[error("asking the API server which resource.k8s.io versions it serves: {0}")]
    Discovery(#[source] kube::Error),
    #[error("creating node {node}: {source}")]
    CreateNode { node: String, source: kube::Error },
    #[error("listing the driver's ResourceSlices: {0}")]
    List(#[source] kube::Error),
    #[error("binding {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// A node's devices, counter sets and how its profile splits them, before faults.
type PoolDevices = (
    Vec<SliceDevice>,
    Vec<dra_kubelet_plugin::device::CounterSet>,
    SliceSplit,
);

/// What fleet mode knows about one node.
#[derive(Debug, Default)]
struct NodeState {
    uid: String,
    /// The profile's devices, before faults; `Err` when the inventory refuses the node.
    devices: Option<Result<PoolDevices, String>>,
}

/// The fleet's counters, for /metrics and the end-of-sync log.
#[derive(Debug, Default)]
pub struct FleetMetrics {
    pub nodes: AtomicU64,
    pub in_sync: AtomicU64,
    pub pool_writes: AtomicU64,
    pub requests: Arc<fake_dra_ops::client::RequestCounts>,
}

impl FleetMetrics {
    fn encode(&self) -> String {
        let r = &self.requests;
        format!(
            "# HELP fake_dra_fleet_nodes Nodes fleet mode publishes for.\n# TYPE fake_dra_fleet_nodes gauge\nfake_dra_fleet_nodes {}\n\
             # HELP fake_dra_fleet_pools_in_sync Nodes whose slices are as wanted.\n# TYPE fake_dra_fleet_pools_in_sync gauge\nfake_dra_fleet_pools_in_sync {}\n\
             # HELP fake_dra_fleet_pool_writes_total Pools written.\n# TYPE fake_dra_fleet_pool_writes_total counter\nfake_dra_fleet_pool_writes_total {}\n\
             # HELP fake_dra_fleet_api_requests_total Requests sent to the API server.\n# TYPE fake_dra_fleet_api_requests_total counter\n\
             fake_dra_fleet_api_requests_total{{kind=\"read\"}} {}\nfake_dra_fleet_api_requests_total{{kind=\"write\"}} {}\nfake_dra_fleet_api_requests_total{{kind=\"watch\"}} {}\n",
            self.nodes.load(Ordering::Relaxed),
            self.in_sync.load(Ordering::Relaxed),
            self.pool_writes.load(Ordering::Relaxed),
            r.read.load(Ordering::Relaxed),
            r.write.load(Ordering::Relaxed),
            r.watch.load(Ordering::Relaxed),
        )
    }
}

/// The devices fleet mode publishes for a node.
pub type Profiles = Arc<dyn Fn(&str) -> Result<Box<dyn NodeProfile>, String> + Send + Sync>;

/// The fleet's nodes, and what turns each into the pool the controller publishes.
struct Fleet {
    nodes: Mutex<BTreeMap<String, NodeState>>,
    pools: PoolController,
    driver: String,
    layout: CounterLayout,
    profiles: Profiles,
    faults: fault_watch::Faults,
    device_names: DeviceNames,
}

impl Fleet {
    /// Tells the controller what `node`'s pool holds now: its profile's devices (asked
    /// for once) with the faults.
    fn publish(&self, node: &str) {
        let (uid, (base, counter_sets, split)) = {
            let mut nodes = lock(&self.nodes);
            let Some(state) = nodes.get_mut(node) else {
                return;
            };
            let built = state.devices.get_or_insert_with(|| {
                let built = (self.profiles)(node)
                    .map(|p| (p.slice_devices(), p.counter_sets(), p.slice_split()));
                match &built {
                    Ok((devices, _, _)) => {
                        if let Ok(mut names) = self.device_names.write() {
                            names.insert(
                                node.to_owned(),
                                devices.iter().map(|d| d.name.clone()).collect(),
                            );
                        }
                    }
                    Err(e) => {
                        error!(%node, error = %e, "no devices for this node: its inventory is refused");
                    }
                }
                built
            });
            match built {
                Ok(devices) => (state.uid.clone(), devices.clone()),
                Err(_) => return,
            }
        };
        let names: Vec<String> = base.iter().map(|d| d.name.clone()).collect();
        let node_faults = NodeFaults::resolve(node, &names, &self.faults.borrow());
        let desired = Desired {
            driver: self.driver.clone(),
            node_name: node.to_owned(),
            pool: node.to_owned(),
            devices: node_faults.overlay(
                &base,
                &self.driver,
                dra_kubelet_plugin::device::TaintRules::of(self.layout),
            ),
            counter_sets,
            layout: self.layout,
            split,
        };
        let owner = (!uid.is_empty()).then(|| node_owner(node, &uid));
        self.pools.set(desired, owner);
    }

    fn publish_all(&self) {
        let names: Vec<String> = lock(&self.nodes).keys().cloned().collect();
        for node in names {
            self.publish(&node);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Completes once `stop` says so (never if its sender is gone without saying so).
async fn stopped(mut stop: watch::Receiver<bool>) {
    if stop.wait_for(|s| *s).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// The device names of the nodes fleet mode publishes for, by node: what the faults'
/// status and the claims' device status are reported from.
type DeviceNames = Arc<RwLock<BTreeMap<String, Vec<String>>>>;

/// Runs fleet mode until `shutdown` completes.
pub async fn run(
    config: FleetConfig,
    profiles: Profiles,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), FleetError> {
    // Polled from the start (signal handlers are installed when it is first polled), so a
    // SIGTERM while nodes are being created stops the creation and removes them, rather
    // than killing the process and leaving them behind.
    let (stop_tx, stop) = watch::channel(false);
    let signal = tokio::spawn(async move {
        shutdown.await;
        stop_tx.send_replace(true);
    });
    let result = run_until(config, profiles, stop).await;
    signal.abort();
    result
}

async fn run_until(
    config: FleetConfig,
    profiles: Profiles,
    stop: watch::Receiver<bool>,
) -> Result<(), FleetError> {
    let metrics = Arc::new(FleetMetrics::default());
    let client = fake_dra_ops::client::counting_client(
        config.kubeconfig.as_deref(),
        metrics.requests.clone(),
    )
    .await?;
    let groups = client
        .list_api_groups()
        .await
        .map_err(FleetError::Discovery)?;
    let served: Vec<String> = groups
        .groups
        .into_iter()
        .filter(|g| g.name == "resource.k8s.io")
        .flat_map(|g| g.versions.into_iter().map(|v| v.version))
        .collect();
    let (mode, why) =
        dra_kubelet_plugin::mode::choose(dra_kubelet_plugin::mode::ModeFlag::Structured, &served)?;
    info!("{why}");
    let dra_kubelet_plugin::mode::Mode::Structured(api) = mode else {
        return Err(FleetError::Mode(
            dra_kubelet_plugin::mode::ModeError::NoDra { served },
        ));
    };
    let layout = slices::counter_layout(&client, api).await;
    let ready = Arc::new(AtomicBool::new(false));
    let http = match config.http_address {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| FleetError::Bind { addr, source })?;
            let m = metrics.clone();
            Some(tokio::spawn(fake_dra_ops::health::serve(
                listener,
                fake_dra_ops::conn::Pool::new(fake_dra_ops::conn::Limits::from_flags(0, 120)),
                fake_dra_ops::health::Endpoints {
                    ready: ready.clone(),
                    not_ready: "publishing the fleet's slices",
                    metrics: Arc::new(move || m.encode()),
                },
            )))
        }
        None => None,
    };

    let writer = PoolWriter::new(client.clone(), api);
    let created = node_names(&config.node_name_prefix, config.create_nodes);
    let started = Instant::now();
    // Only a fleet that creates nodes: one that only finds nodes by label deletes none.
    if config.create_nodes > 0 && !*stop.borrow() {
        delete_stale_nodes(&client, &writer, &config).await;
    }
    let (begun, creation) = create_nodes(&client, &created, &config, stop.clone()).await;
    // Stopped, or failed: the nodes created so far go (nothing would keep them Ready).
    if creation.is_err() || *stop.borrow() {
        if creation.is_ok() {
            info!(
                created = begun,
                asked = created.len(),
                "fleet mode shutting down before publishing"
            );
        }
        if let Some(h) = http {
            h.abort();
        }
        if !config.keep_nodes {
            let begun = &created[..begun.min(created.len())];
            delete_nodes(&client, begun, config.concurrency).await;
        }
        return creation;
    }
    // The slices as they are now: one list for the whole fleet, before any watch starts,
    // so a failure here is the fleet's last word (it was followed by the DeviceFault
    // watch's warning) and takes back the nodes it created.
    let pools = match PoolController::start(
        client.clone(),
        api,
        config.driver_name.clone(),
        PoolScope::AllNodes,
        config.concurrency,
    )
    .await
    {
        Ok(pools) => pools,
        Err(e) => {
            if let Some(h) = http {
                h.abort();
            }
            if !config.keep_nodes {
                delete_nodes(&client, &created, config.concurrency).await;
            }
            return Err(FleetError::List(e));
        }
    };
    let heartbeat = (!created.is_empty() && !config.heartbeat.is_zero()).then(|| {
        tokio::spawn(heartbeats(
            client.clone(),
            created.clone(),
            config.heartbeat,
            config.concurrency,
        ))
    });

    let (faults, fault_task) = fault_watch::start(client.clone());
    let device_names: DeviceNames = Arc::default();
    let fleet = Arc::new(Fleet {
        nodes: Mutex::new(BTreeMap::new()),
        pools,
        driver: config.driver_name.clone(),
        layout,
        profiles,
        faults: faults.clone(),
        device_names: device_names.clone(),
    });
    // Woken when a node leaves, so the faults' status stops naming it.
    let fleet_changed = Arc::new(Notify::new());

    // The nodes: the first list decides the fleet; then every change.
    let nodes_task = tokio::spawn(watch_nodes(
        client.clone(),
        config.node_selector.clone(),
        fleet.clone(),
        Leaving {
            device_names: device_names.clone(),
            changed: fleet_changed.clone(),
        },
    ));
    let (rule_objects, rule_objects_seen) = tokio::sync::watch::channel(Default::default());
    let reporter = tokio::spawn(report_faults(
        client.clone(),
        faults.clone(),
        device_names.clone(),
        fleet_changed,
        dra_kubelet_plugin::device::TaintRules::of(layout),
        rule_objects_seen,
    ));
    let rules_task = tokio::spawn(crate::faults::rules::run(
        client.clone(),
        config.driver_name.clone(),
        "fleet".into(),
        "fake-dra/fleet".into(),
        faults.clone(),
        fleet_node_faults(faults.clone(), device_names.clone()),
        rule_objects,
    ));
    let claim_task = {
        let names = device_names.clone();
        let faults_now = faults.clone();
        tokio::spawn(claim_status::run(
            client.clone(),
            api,
            config.driver_name.clone(),
            "fake-dra/fleet".into(),
            faults.clone(),
            fleet_node_faults(faults_now, names),
        ))
    };
    let fault_changes = {
        let mut changes = faults.clone();
        let fleet = fleet.clone();
        tokio::spawn(async move {
            while changes.changed().await.is_ok() {
                fleet.publish_all();
            }
        })
    };

    let mut shutdown = std::pin::pin!(stopped(stop));
    let mut announced = false;
    let mut stats = fleet.pools.stats();
    loop {
        let now = *stats.borrow_and_update();
        let total = lock(&fleet.nodes).len();
        metrics.nodes.store(total as u64, Ordering::Relaxed);
        metrics.in_sync.store(now.in_sync as u64, Ordering::Relaxed);
        metrics.pool_writes.store(now.writes, Ordering::Relaxed);
        if !announced && total > 0 && now.in_sync == total && total >= config.create_nodes {
            announced = true;
            ready.store(true, Ordering::SeqCst);
            let requests = metrics.requests.total();
            info!(
                nodes = total,
                seconds = started.elapsed().as_secs_f64(),
                requests,
                requests_per_node = requests as f64 / total as f64,
                "fleet published: every node's slices are in place"
            );
        }
        tokio::select! {
            changed = stats.changed() => if changed.is_err() {
                break;
            },
            _ = &mut shutdown => break,
        }
    }
    info!("fleet mode shutting down");
    for task in [
        nodes_task,
        reporter,
        rules_task,
        claim_task,
        fault_changes,
        fault_task,
    ] {
        task.abort();
    }
    if let Some(h) = heartbeat {
        h.abort();
    }
    if let Some(h) = http {
        h.abort();
    }
    if !created.is_empty() && !config.keep_nodes {
        delete_nodes(&client, &created, config.concurrency).await;
    }
    Ok(())
}

/// Deletes the nodes an earlier run with a larger `--create-nodes` left (the fleet's
/// label and annotation, `<prefix><i>` with `i` at least `--create-nodes`), with their
/// Leases and slices: nobody would keep them Ready or their slices current. Unless
/// `--keep-nodes`.
async fn delete_stale_nodes(client: &Client, writer: &PoolWriter, config: &FleetConfig) {
    let nodes: Api<Node> = Api::all(client.clone());
    let listed = match nodes.list(&ListParams::default().labels(FLEET_LABEL)).await {
        Ok(l) => l.items,
        Err(e) => {
            warn!(error = %e, "listing the fleet's nodes left by an earlier run failed; they stay");
            return;
        }
    };
    let ours = listed.iter().filter(|n| {
        n.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(CREATED_BY.0))
            .is_some_and(|v| v == CREATED_BY.1)
    });
    let stale = stale_node_names(
        &config.node_name_prefix,
        config.create_nodes,
        ours.filter_map(|n| n.metadata.name.as_deref()),
    );
    if stale.is_empty() {
        return;
    }
    if config.keep_nodes {
        info!(
            nodes = stale.len(),
            "nodes an earlier, larger fleet created are left in place (--keep-nodes)"
        );
        return;
    }
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    let deleted: usize = futures::stream::iter(stale.iter().map(|n| {
        let nodes = nodes.clone();
        let leases = leases.clone();
        async move {
            let gone = match nodes.delete(n, &DeleteParams::default()).await {
                Ok(_) => true,
                Err(kube::Error::Api(s)) if s.code == 404 => false,
                Err(e) => {
                    warn!(node = %n, error = %e, "deleting a node an earlier fleet left failed");
                    false
                }
            };
            // The owner reference takes the Lease too, once the garbage collector runs.
            match leases.delete(n, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => warn!(node = %n, error = %e, "deleting the Lease of a node an earlier fleet left failed"),
            }
            usize::from(gone)
        }
    }))
    .buffer_unordered(config.concurrency.max(1))
    .collect::<Vec<usize>>()
    .await
    .into_iter()
    .sum();
    // Likewise the slices: deleted rather than left to the garbage collector.
    for node in &stale {
        writer.delete_node_pools(&config.driver_name, node).await;
    }
    info!(
        deleted,
        prefix = %config.node_name_prefix,
        from = config.create_nodes,
        "deleted the nodes an earlier, larger fleet created (with their Leases and slices)"
    );
}

/// Creates the nodes (an existing one is taken as it is), reports them Ready, and
/// creates their Leases; `concurrency` at a time. Starts no node once `stop` is set or a
/// creation failed; those under way finish. Returns how many were begun (the first ones
/// of `names`) and the first error.
async fn create_nodes(
    client: &Client,
    names: &[String],
    config: &FleetConfig,
    stop: watch::Receiver<bool>,
) -> (usize, Result<(), FleetError>) {
    if names.is_empty() {
        return (0, Ok(()));
    }
    let started = Instant::now();
    let nodes: Api<Node> = Api::all(client.clone());
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    let begun = std::sync::atomic::AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let names_now = futures::stream::iter(names.iter())
        .take_until(stopped(stop))
        .take_while(|_| futures::future::ready(!failed.load(Ordering::SeqCst)));
    let results: Vec<Result<(), FleetError>> = names_now
        .map(|name| {
            begun.fetch_add(1, Ordering::SeqCst);
            let nodes = nodes.clone();
            let leases = leases.clone();
            let failed = &failed;
            async move {
                let created = create_node(&nodes, &leases, name, config).await;
                if created.is_err() {
                    failed.store(true, Ordering::SeqCst);
                }
                created
            }
        })
        .buffer_unordered(config.concurrency.max(1))
        .collect()
        .await;
    let begun = begun.load(Ordering::SeqCst);
    if let Some(e) = results.into_iter().find_map(Result::err) {
        return (begun, Err(e));
    }
    if begun == names.len() {
        info!(
            nodes = names.len(),
            seconds = started.elapsed().as_secs_f64(),
            "fleet nodes created"
        );
    }
    (begun, Ok(()))
}

/// Creates one node, reports it Ready, creates its Lease.
async fn create_node(
    nodes: &Api<Node>,
    leases: &Api<Lease>,
    name: &String,
    config: &FleetConfig,
) -> Result<(), FleetError> {
    let failed = |source| FleetError::CreateNode {
        node: name.clone(),
        source,
    };
    let node = match nodes
        .create(&PostParams::default(), &node_object(name, &config.template))
        .await
    {
        Ok(n) => n,
        Err(kube::Error::Api(s)) if s.code == 409 => nodes.get(name).await.map_err(failed)?,
        Err(source) => return Err(failed(source)),
    };
    let now = jiff::Timestamp::now().to_string();
    nodes
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&node_status_patch(&config.template, &now)),
        )
        .await
        .map_err(failed)?;
    if !config.heartbeat.is_zero() {
        let owner = node
            .metadata
            .uid
            .as_deref()
            .map(|uid| node_owner(name, uid));
        let duration = i32::try_from(config.heartbeat.as_secs().saturating_mul(4)).unwrap_or(40);
        let lease = lease_object(name, owner, duration, jiff::Timestamp::now());
        match leases.create(&PostParams::default(), &lease).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => {
                warn!(node = %name, error = %e, "creating the node's Lease failed; the heartbeat will retry")
            }
        }
    }
    Ok(())
}

/// Renews the created nodes' Leases every `interval`, so the node lifecycle controller
/// keeps them Ready.
async fn heartbeats(client: Client, names: Vec<String>, interval: Duration, concurrency: usize) {
    let leases: Api<Lease> = Api::namespaced(client, LEASE_NAMESPACE);
    let mut warned = false;
    loop {
        tokio::time::sleep(interval).await;
        let body = serde_json::json!({"spec": {"renewTime": k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(jiff::Timestamp::now())}});
        let failures: usize = futures::stream::iter(names.clone().into_iter().map(|n| {
            let leases = leases.clone();
            let body = body.clone();
            async move {
                // A node deleted meanwhile has no Lease any more (owner reference): fine.
                match leases
                    .patch(&n, &PatchParams::default(), &Patch::Merge(&body))
                    .await
                {
                    Ok(_) => 0,
                    Err(kube::Error::Api(s)) if s.code == 404 => 0,
                    Err(_) => 1,
                }
            }
        }))
        .buffer_unordered(concurrency.max(1))
        .collect::<Vec<usize>>()
        .await
        .into_iter()
        .sum();
        if failures > 0 && !warned {
            warned = true;
            warn!(
                failures,
                "renewing fleet node Leases failed (RBAC: patch leases in kube-node-lease?)"
            );
        }
    }
}

async fn delete_nodes(client: &Client, names: &[String], concurrency: usize) {
    let nodes: Api<Node> = Api::all(client.clone());
    let deleted: usize = futures::stream::iter(names.iter().cloned().map(|n| {
        let nodes = nodes.clone();
        async move { usize::from(nodes.delete(&n, &DeleteParams::default()).await.is_ok()) }
    }))
    .buffer_unordered(concurrency.max(1))
    .collect::<Vec<usize>>()
    .await
    .into_iter()
    .sum();
    info!(
        deleted,
        "fleet nodes deleted (their slices and Leases go with them)"
    );
}

/// What a node that leaves the fleet takes along: its devices in the faults' status and
/// the claims' device status.
struct Leaving {
    device_names: DeviceNames,
    /// Wakes the faults' reporter.
    changed: Arc<Notify>,
}

impl Leaving {
    fn forget(&self, nodes: &[String]) {
        if nodes.is_empty() {
            return;
        }
        if let Ok(mut names) = self.device_names.write() {
            for n in nodes {
                names.remove(n);
            }
        }
        self.changed.notify_one();
    }
}

/// Follows the selected nodes: joins, leaves (its slices deleted, its devices no longer
/// reported), uid changes.
async fn watch_nodes(client: Client, selector: String, fleet: Arc<Fleet>, leaving: Leaving) {
    let api: Api<Node> = Api::all(client.clone());
    let config = watcher::Config::default().labels(&selector);
    let mut events = std::pin::pin!(watcher(api, config).default_backoff());
    let mut listing: Option<BTreeMap<String, String>> = None;
    let mut warned = false;
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Init) => listing = Some(BTreeMap::new()),
            Ok(watcher::Event::InitApply(n)) => {
                if let Some(l) = listing.as_mut() {
                    l.insert(n.name_any(), n.uid().unwrap_or_default());
                }
            }
            Ok(watcher::Event::InitDone) => {
                let seen = listing.take().unwrap_or_default();
                let gone: Vec<String> = {
                    let mut nodes = lock(&fleet.nodes);
                    let gone: Vec<String> = nodes
                        .keys()
                        .filter(|k| !seen.contains_key(*k))
                        .cloned()
                        .collect();
                    for g in &gone {
                        nodes.remove(g);
                    }
                    for (name, uid) in &seen {
                        let state = nodes.entry(name.clone()).or_default();
                        state.uid = uid.clone();
                    }
                    gone
                };
                info!(nodes = seen.len(), selector = %selector, "fleet nodes listed");
                for name in seen.keys() {
                    fleet.publish(name);
                }
                leaving.forget(&gone);
                for node in &gone {
                    fleet.pools.remove(node);
                }
            }
            Ok(watcher::Event::Apply(n)) => {
                let name = n.name_any();
                let joined = {
                    let mut nodes = lock(&fleet.nodes);
                    let state = nodes.entry(name.clone()).or_default();
                    let uid = n.uid().unwrap_or_default();
                    let changed = state.uid != uid;
                    state.uid = uid;
                    changed
                };
                if joined {
                    fleet.publish(&name);
                }
            }
            Ok(watcher::Event::Delete(n)) => {
                let name = n.name_any();
                let was = lock(&fleet.nodes).remove(&name).is_some();
                if was {
                    info!(node = %name, "node left the fleet");
                    leaving.forget(std::slice::from_ref(&name));
                    // Its pool is dropped at once and its slices deleted in the
                    // controller's rounds: a node still published while the garbage
                    // collector removes its slices would get them published again
                    // (kwok's 1,000-node deletion: up to 21 generations a pool).
                    fleet.pools.remove(&name);
                }
            }
            Err(e) => {
                if !warned {
                    warned = true;
                    // A 400 is the selector, which no retry mends; only 401/403 is RBAC.
                    let code = match &e {
                        watcher::Error::InitialListFailed(kube::Error::Api(s))
                        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
                        | watcher::Error::WatchFailed(kube::Error::Api(s)) => Some(s.code),
                        watcher::Error::WatchError(s) => Some(s.code),
                        _ => None,
                    };
                    match code {
                        Some(400) => {
                            warn!(error = %e, selector = %selector, "the API server refuses to list Nodes by --node-selector (FAKE_DRA_NODE_SELECTOR); retrying")
                        }
                        Some(401 | 403) => {
                            warn!(error = %e, "watching Nodes failed (RBAC: list/watch nodes); retrying")
                        }
                        _ => warn!(error = %e, "watching Nodes failed; retrying"),
                    }
                }
            }
        }
    }
}

/// The faults of every fleet node, as they are when called.
fn fleet_node_faults(faults: fault_watch::Faults, names: DeviceNames) -> claim_status::PoolFaults {
    Arc::new(move || {
        let current: Vec<Fault> = faults.borrow().as_ref().clone();
        names
            .read()
            .map(|n| {
                n.iter()
                    .map(|(node, devices)| {
                        (node.clone(), NodeFaults::resolve(node, devices, &current))
                    })
                    .collect()
            })
            .unwrap_or_default()
    })
}

/// One entry per fault for the whole fleet in the faults' status: what it selects and
/// what could not be applied, over every node; named nodes the fleet does not have.
/// Written again when the faults change or a node leaves.
async fn report_faults(
    client: Client,
    faults: fault_watch::Faults,
    device_names: DeviceNames,
    fleet_changed: Arc<Notify>,
    taint_rules: dra_kubelet_plugin::device::TaintRules,
    mut rule_objects: tokio::sync::watch::Receiver<crate::faults::rules::RuleObjects>,
) {
    let mut writer = StatusWriter::new(client, "fleet");
    let mut changes = faults.clone();
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let current: Vec<Fault> = changes.borrow_and_update().as_ref().clone();
        let names = device_names.read().map(|n| n.clone()).unwrap_or_default();
        let mut reports: BTreeMap<String, fake_dra_api::fault::NodeFaultStatus> = BTreeMap::new();
        for (node, devices) in &names {
            let served = *rule_objects.borrow_and_update();
            for (fault, entry) in
                NodeFaults::resolve(node, devices, &current).reports(taint_rules, served)
            {
                let r =
                    reports
                        .entry(fault)
                        .or_insert_with(|| fake_dra_api::fault::NodeFaultStatus {
                            node: "fleet".into(),
                            ..Default::default()
                        });
                r.observed_generation = entry.observed_generation;
                for d in entry.devices {
                    if r.devices.len() < 20 {
                        r.devices.push(format!("{node}/{d}"));
                    }
                }
                for e in entry.effects {
                    if !r.effects.contains(&e) {
                        r.effects.push(e);
                    }
                }
                for p in entry.problems {
                    if r.problems.len() < 20 && !r.problems.contains(&p) {
                        r.problems.push(p);
                    }
                }
            }
        }
        for f in &current {
            for n in f.spec.nodes.iter().filter(|n| !names.contains_key(*n)) {
                let r = reports.entry(f.name.clone()).or_insert_with(|| {
                    fake_dra_api::fault::NodeFaultStatus {
                        node: "fleet".into(),
                        observed_generation: f.generation,
                        ..Default::default()
                    }
                });
                if r.problems.len() < 20 {
                    r.problems.push(format!(
                        "node {} is not a node of this fleet",
                        crate::faults::shown_name(n)
                    ));
                }
            }
        }
        let reports: Vec<_> = reports.into_iter().collect();
        writer.write(&current, &reports).await;
        tokio::select! {
            changed = changes.changed() => if changed.is_err() {
                return;
            },
            _ = fleet_changed.notified() => {}
            changed = rule_objects.changed() => if changed.is_err() {
                return;
            },
        }
    }
}
