//! The per-node kubelet plugin, for classic DRA (kubelets 1.27–1.30) and structured DRA
//! (1.32+); [`mode`] picks which.
//!
//! The plumbing knows no device: a [`profile::DeviceProfile`] says what the devices are,
//! and [`fake`] is the fake device (docs/write-your-own-driver.md writes another).
//!
//! - pure: [`claim`] (a claim's uid and errors), [`profile`] (the device seam),
//!   [`plan`] (idempotency, one claim per device), [`allocation`] (a structured claim's
//!   allocation, narrowed to this driver and node), [`cdi`] (spec documents),
//!   [`checkpoint`] (the document), [`mode`] (which generation), [`slices`] (the
//!   ResourceSlice);
//! - adapters: [`driver`] (files: CDI specs, checkpoint), [`grpc`] (registration and
//!   DRA services on unix sockets), [`classic`] (the NodeAllocationState),
//!   [`publish_slices`] (the ResourceSlice, structured), [`claim_reader`] (reading
//!   claims, structured); health and metrics are `fake_dra_ops::health`;
//! - [`run`] wires them for any profile; `main.rs` parses flags and makes the fake one.

pub mod allocation;
pub mod cdi;
pub mod checkpoint;
pub mod claim;
pub mod claim_reader;
pub mod classic;
pub mod driver;
pub mod fake;
pub mod faults;
pub mod fleet;
pub mod fsutil;
pub mod gpu;
pub mod grpc;
pub mod inventory;
pub mod metrics;
pub mod mode;
pub mod node_profile;
pub mod plan;
pub mod profile;
pub mod publish_slices;
pub mod slices;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use fake_dra_api::nas::NodePhase;
use fake_dra_ops::conn::{self, Limits, Pool};
use fake_dra_proto::authority::RewriteIo;
use fake_dra_proto::{
    dra_health_v1, dra_health_v1alpha1, dra_v1, dra_v1beta1, pluginregistration, v1alpha2, v1alpha3,
};
use tokio_stream::StreamExt;
use tracing::{error, info, warn};

use crate::cdi::CdiKind;
use crate::driver::{CrashPoint, Driver, DriverConfig};
use crate::mode::{Mode, ModeFlag};
use crate::profile::DeviceProfile;

/// The Kubernetes API access the plugin needs in classic mode: (API group, resource,
/// verbs). The RBAC manifests grant exactly this; a test compares them.
pub const API_ACCESS_CLASSIC: &[(&str, &str, &[&str])] = &[
    (
        fake_dra_api::NAS_GROUP,
        "nodeallocationstates",
        &["get", "create", "update"],
    ),
    (
        fake_dra_api::NAS_GROUP,
        "nodeallocationstates/status",
        &["get", "update"],
    ),
    ("", "nodes", &["get"]),
];

/// The classic table under its first name.
pub const API_ACCESS: &[(&str, &str, &[&str])] = API_ACCESS_CLASSIC;

/// The Kubernetes API access the plugin needs in structured mode: its node's
/// ResourceSlices (listed and watched by field selector, written, stale ones deleted),
/// the claims it prepares (and, while a `DeviceFault` asks for binding or device status,
/// watches, writing `status.devices` of its own devices), its Node for the slices' owner
/// reference, and the `DeviceFault`s (watched, this node's entry of their status
/// applied). Discovery (`/apis`) needs no grant.
pub const API_ACCESS_STRUCTURED: &[(&str, &str, &[&str])] = &[
    (
        "resource.k8s.io",
        "resourceslices",
        &["list", "watch", "create", "update", "delete"],
    ),
    (
        "resource.k8s.io",
        "resourceclaims",
        &["get", "list", "watch"],
    ),
    ("resource.k8s.io", "resourceclaims/status", &["patch"]),
    // Kubernetes 1.36+ (DRAResourceClaimGranularStatusAuthorization): a driver changing
    // status.devices needs this synthetic permission, named after the driver;
    // `associated-node:` for a plugin on the node the claim is allocated on.
    (
        "resource.k8s.io",
        "resourceclaims/driver",
        &["associated-node:patch"],
    ),
    ("", "nodes", &["get"]),
    (
        fake_dra_api::PARAMS_GROUP,
        "devicefaults",
        &["list", "watch"],
    ),
    (
        fake_dra_api::PARAMS_GROUP,
        "devicefaults/status",
        &["patch"],
    ),
];

/// The Kubernetes API access of fleet mode (`fake-dra-kubelet-plugin fleet`): the nodes
/// it creates (Ready status, heartbeat Leases in `kube-node-lease`) and follows, every
/// node's ResourceSlices, and what DeviceFaults ask of claims, as a controller that is
/// not on the claims' nodes (`arbitrary-node:`). The RBAC of deploy/fleet grants exactly
/// this; a test compares them.
pub const API_ACCESS_FLEET: &[(&str, &str, &[&str])] = &[
    ("", "nodes", &["get", "list", "watch", "create", "delete"]),
    ("", "nodes/status", &["patch"]),
    ("coordination.k8s.io", "leases", &["create", "patch"]),
    (
        "resource.k8s.io",
        "resourceslices",
        &["list", "watch", "create", "update", "delete"],
    ),
    ("resource.k8s.io", "resourceclaims", &["list", "watch"]),
    ("resource.k8s.io", "resourceclaims/status", &["patch"]),
    (
        "resource.k8s.io",
        "resourceclaims/driver",
        &["arbitrary-node:patch"],
    ),
    (
        fake_dra_api::PARAMS_GROUP,
        "devicefaults",
        &["list", "watch"],
    ),
    (
        fake_dra_api::PARAMS_GROUP,
        "devicefaults/status",
        &["patch"],
    ),
];

/// Name of the DRA socket in the plugin dir.
pub const DRA_SOCKET: &str = "plugin.sock";

/// Everything the plugin is configured with.
#[derive(Debug, Clone)]
pub struct Config {
    /// This node.
    pub node_name: String,
    /// The DRA driver name.
    pub driver_name: String,
    /// Namespace of the NodeAllocationState.
    pub namespace: String,
    /// CDI spec dir.
    pub cdi_root: PathBuf,
    /// Plugin dir: DRA socket and checkpoint.
    pub plugin_dir: PathBuf,
    /// The kubelet's plugin registry dir.
    pub registry_dir: PathBuf,
    /// Kubeconfig file; in-cluster or `$KUBECONFIG` when absent.
    pub kubeconfig: Option<PathBuf>,
    /// Where to serve /healthz, /readyz, /metrics, if anywhere.
    pub http_address: Option<SocketAddr>,
    /// Test-only crash point.
    pub crash_point: Option<CrashPoint>,
    /// `--mode`.
    pub mode: ModeFlag,
    /// Open connections and idle timeout, over the sockets and the HTTP port.
    pub connection_limits: Limits,
}

/// Why the plugin stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad driver name or CDI class.
    #[error(transparent)]
    Kind(#[from] cdi::BadKind),
    /// Classic DRA asked of a profile without it.
    #[error("classic DRA needs a device profile with a NodeAllocationState inventory")]
    NoClassicInventory,
    /// A driver name classic kubelets cannot use.
    #[error(transparent)]
    ClassicDriverName(#[from] cdi::DriverNameTooLongForClassic),
    /// Checkpoint or CDI dir trouble at start.
    #[error(transparent)]
    Start(#[from] driver::StartError),
    /// A socket could not be bound.
    #[error("binding {path}: {source}")]
    Bind {
        /// The socket path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// No Kubernetes client.
    #[error(transparent)]
    Kube(#[from] fake_dra_ops::client::ClientError),
    /// No DRA generation fits the flag and the API server.
    #[error(transparent)]
    Mode(#[from] mode::ModeError),
    /// Discovery failed.
    #[error("asking the API server which resource.k8s.io versions it serves: {0}")]
    Discovery(#[source] kube::Error),
    /// A gRPC server failed.
    #[error("grpc server: {0}")]
    Serve(#[from] tonic::transport::Error),
    /// A background task failed.
    #[error("task failed: {0}")]
    Task(String),
    /// The node's devices do not fit in ResourceSlices.
    #[error("the node's devices cannot be published: {0}")]
    Pack(#[from] slices::PackError),
}

/// The `resource.k8s.io` versions the API server serves (empty if none), from discovery.
async fn served_resource_versions(client: &kube::Client) -> Result<Vec<String>, Error> {
    let groups = client.list_api_groups().await.map_err(Error::Discovery)?;
    Ok(groups
        .groups
        .into_iter()
        .filter(|g| g.name == "resource.k8s.io")
        .flat_map(|g| g.versions.into_iter().map(|v| v.version))
        .collect())
}

/// Applies `--mode`: classic needs no discovery, the others ask the API server.
async fn choose_mode(flag: ModeFlag, client: &kube::Client) -> Result<Mode, Error> {
    let served = match flag {
        ModeFlag::Classic => Vec::new(),
        ModeFlag::Auto | ModeFlag::Structured => served_resource_versions(client).await?,
    };
    let (mode, why) = mode::choose(flag, &served)?;
    info!("{why}");
    Ok(mode)
}

/// How often the gRPC servers ping a connection, and how long they wait for the answer:
/// a kubelet's connection answers and stays open however long it idles; one that does
/// not is closed.
const KEEPALIVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(30);
const KEEPALIVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

fn grpc_server() -> tonic::transport::Server {
    tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
}

/// The connections of a plugin socket, whatever `:authority` the kubelet sends (see
/// [`fake_dra_proto::authority`]): a real kubelet sends the socket path, which h2 would
/// refuse.
fn kubelet_connections(
    listener: tokio::net::UnixListener,
    pool: &Pool,
) -> impl futures::Stream<Item = std::io::Result<RewriteIo<conn::Guarded<tokio::net::UnixStream>>>>
+ Send
+ 'static {
    conn::incoming(listener, pool.clone()).map(|c| c.map(RewriteIo::server))
}

/// Runs the plugin with the devices `profile` describes until `shutdown` completes,
/// then removes the sockets and (classic) marks the node NotReady.
pub async fn run<D: DeviceProfile>(
    config: Config,
    profile: D,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let kind = CdiKind::new(&config.driver_name, profile.cdi_class())?;
    let client = fake_dra_ops::client::client(config.kubeconfig.as_deref()).await?;
    let mode = choose_mode(config.mode, &client).await?;
    if mode == Mode::Classic {
        cdi::check_classic_annotation_key(&config.driver_name)?;
    }
    let driver_config = DriverConfig {
        node_name: config.node_name.clone(),
        kind,
        cdi_root: config.cdi_root.clone(),
        plugin_dir: config.plugin_dir.clone(),
        crash_point: config.crash_point,
    };
    let driver = Arc::new(
        tokio::task::spawn_blocking(move || Driver::start(profile, driver_config))
            .await
            .map_err(|e| Error::Task(e.to_string()))??,
    );
    let metrics = Arc::new(metrics::Metrics::new());
    let ready = Arc::new(AtomicBool::new(false));

    // Where the serving release wants counter sets, and how many taints a device may have.
    let layout = match mode {
        Mode::Structured(api) => publish_slices::counter_layout(&client, api).await,
        Mode::Classic => slices::CounterLayout::WithDevices,
    };
    // Structured mode applies the DeviceFaults of this node (docs/faults.md).
    let (fault_view, fault_tasks) = match mode {
        Mode::Classic => (None, Vec::new()),
        Mode::Structured(_) => {
            let (faults, watch_task) = faults::watch::start(client.clone());
            let names = driver
                .profile()
                .slice_devices()
                .into_iter()
                .map(|d| d.name)
                .collect();
            let view = faults::watch::NodeView::new(faults, &config.node_name, names);
            let reporter = tokio::spawn(faults::report(
                client.clone(),
                view.clone(),
                slices::max_taints(layout),
            ));
            let pool_view = view.clone();
            let node = config.node_name.clone();
            let claim_status = tokio::spawn(faults::claim_status::run(
                client.clone(),
                config.driver_name.clone(),
                format!("fake-dra/{node}"),
                view.faults(),
                Arc::new(move || {
                    std::collections::BTreeMap::from([(node.clone(), pool_view.current())])
                }),
            ));
            (Some(view), vec![watch_task, reporter, claim_status])
        }
    };

    // Classic publishes the NodeAllocationState (and marks it NotReady at shutdown);
    // structured publishes the ResourceSlice.
    let (nas_publisher, publish_task) = match mode {
        Mode::Classic => {
            let spec = driver
                .profile()
                .node_allocation_state()
                .ok_or(Error::NoClassicInventory)?;
            let publisher = classic::nas::Publisher::new(
                client.clone(),
                &config.namespace,
                &config.node_name,
                spec,
            );
            let task = tokio::spawn(publisher.clone().run(driver.clone(), ready.clone()));
            (Some(publisher), task)
        }
        Mode::Structured(api) => {
            let desired = slices::Desired {
                driver: config.driver_name.clone(),
                node_name: config.node_name.clone(),
                devices: driver.profile().slice_devices(),
                counter_sets: driver.profile().counter_sets(),
                layout,
            };
            // Refused before anything is served: a pool that cannot be published is an
            // inventory error the operator must fix.
            slices::pack(&desired)?;
            let publisher = publish_slices::SlicePublisher::new(
                client.clone(),
                api,
                desired,
                fault_view.clone(),
            );
            (None, tokio::spawn(publisher.run(ready.clone())))
        }
    };

    let pool = Pool::new(config.connection_limits);
    let http_task = match config.http_address {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| Error::Bind {
                    path: PathBuf::from(addr.to_string()),
                    source,
                })?;
            let metrics = metrics.clone();
            let endpoints = fake_dra_ops::health::Endpoints {
                ready: ready.clone(),
                not_ready: "not ready",
                metrics: Arc::new(move || metrics.encode()),
            };
            Some(tokio::spawn(fake_dra_ops::health::serve(
                listener,
                pool.clone(),
                endpoints,
            )))
        }
        None => None,
    };

    let dra_path = config.plugin_dir.join(DRA_SOCKET);
    let reg_path = config
        .registry_dir
        .join(format!("{}.sock", config.driver_name));
    let bind = |path: &PathBuf| {
        grpc::bind(path).map_err(|source| Error::Bind {
            path: path.clone(),
            source,
        })
    };

    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    let node = grpc::NodeService {
        driver: driver.clone(),
        metrics: metrics.clone(),
    };
    let (services, supported_versions) = match mode {
        Mode::Classic => {
            health_reporter
                .set_serving::<v1alpha3::node_server::NodeServer<grpc::NodeService<D>>>()
                .await;
            health_reporter
                .set_serving::<v1alpha2::node_server::NodeServer<grpc::NodeService<D>>>()
                .await;
            (
                grpc_server()
                    .add_service(health_service)
                    .add_service(v1alpha3::node_server::NodeServer::new(node.clone()))
                    .add_service(v1alpha2::node_server::NodeServer::new(node)),
                grpc::SUPPORTED_VERSIONS,
            )
        }
        Mode::Structured(api) => {
            let dra = grpc::DraPluginService {
                node,
                claims: claim_reader::ClaimReader::new(client.clone(), api),
                driver_name: config.driver_name.clone(),
                node_name: config.node_name.clone(),
                faults: fault_view.clone().unwrap_or_else(|| {
                    faults::watch::NodeView::new(
                        faults::watch::none(),
                        &config.node_name,
                        Vec::new(),
                    )
                }),
            };
            health_reporter
                .set_serving::<dra_v1::dra_plugin_server::DraPluginServer<grpc::DraPluginService<D>>>()
                .await;
            health_reporter
                .set_serving::<dra_v1beta1::dra_plugin_server::DraPluginServer<grpc::DraPluginService<D>>>()
                .await;
            let device_health = grpc::device_health::DeviceHealthService {
                pool: config.node_name.clone(),
                devices: driver
                    .profile()
                    .slice_devices()
                    .into_iter()
                    .map(|d| d.name)
                    .collect(),
                faults: dra.faults.clone(),
            };
            (
                grpc_server()
                    .add_service(health_service)
                    .add_service(dra_v1::dra_plugin_server::DraPluginServer::new(dra.clone()))
                    .add_service(dra_v1beta1::dra_plugin_server::DraPluginServer::new(dra))
                    .add_service(
                        dra_health_v1::dra_resource_health_server::DraResourceHealthServer::new(
                            device_health.clone(),
                        ),
                    )
                    .add_service(
                        dra_health_v1alpha1::dra_resource_health_server::DraResourceHealthServer::new(
                            device_health,
                        ),
                    ),
                grpc::STRUCTURED_SUPPORTED_VERSIONS,
            )
        }
    };

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };

    let dra_listener = bind(&dra_path)?;
    let dra_server = services.serve_with_incoming_shutdown(
        kubelet_connections(dra_listener, &pool),
        stopped(stop_rx.clone()),
    );
    let dra_task = tokio::spawn(dra_server);

    // Registration last: once the kubelet sees this socket it dials the DRA socket.
    let reg_listener = bind(&reg_path)?;
    let registration = grpc::Registration {
        driver_name: config.driver_name.clone(),
        endpoint: dra_path.clone(),
        registered: Arc::new(AtomicBool::new(false)),
        supported_versions,
        faults: fault_view.clone(),
    };
    let reg_server = grpc_server()
        .add_service(pluginregistration::registration_server::RegistrationServer::new(registration))
        .serve_with_incoming_shutdown(kubelet_connections(reg_listener, &pool), stopped(stop_rx));
    let reg_task = tokio::spawn(reg_server);
    info!(registration = %reg_path.display(), dra = %dra_path.display(), versions = ?supported_versions, "serving");

    shutdown.await;
    info!("shutting down");
    // Deregister first: deleting the registration socket tells the kubelet we are gone.
    for path in [&reg_path, &dra_path] {
        if let Err(e) = fsutil::remove_if_exists(path) {
            warn!(path = %path.display(), error = %e, "removing socket");
        }
    }
    let _ = stop_tx.send(true);
    for task in [reg_task, dra_task] {
        match task.await {
            Ok(Err(e)) => error!(error = %e, "grpc server"),
            Err(e) => error!(error = %e, "grpc server task"),
            Ok(Ok(())) => {}
        }
    }
    publish_task.abort();
    for task in fault_tasks {
        task.abort();
    }
    if let Some(task) = http_task {
        task.abort();
    }
    let Some(publisher) = nas_publisher else {
        info!(
            "leaving the ResourceSlice in place: a restarted plugin takes it over; it goes with the Node, or when the kubelet drops the unregistered driver's slices"
        );
        return Ok(());
    };
    let not_ready = publisher.set_status(
        NodePhase::NotReady,
        Some("kubelet plugin shut down".into()),
        driver.prepared_claims(),
    );
    match tokio::time::timeout(std::time::Duration::from_secs(10), not_ready).await {
        Ok(Ok(())) => info!("NodeAllocationState NotReady"),
        Ok(Err(e)) => warn!(error = %e, "marking NodeAllocationState NotReady"),
        Err(_) => warn!("marking NodeAllocationState NotReady timed out"),
    }
    Ok(())
}
