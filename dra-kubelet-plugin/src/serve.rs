//! Running a plugin with its [`Settings`] (what `Plugin`'s builder resolved): the
//! checkpoint and CDI dir made to agree, the node's devices published, the kubelet's
//! sockets served (registration last), and on shutdown the sockets removed first, so the
//! kubelet deregisters the driver before anything stops.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use dra_kubelet_proto::authority::RewriteIo;
use dra_kubelet_proto::pluginregistration;
use tokio_stream::StreamExt;
use tracing::{error, info, warn};

use crate::driver_name::{DriverNameError, check_driver_name};

use crate::cdi_spec::{CdiKind, DriverNameTooLongForClassic, KindError};
use crate::dra_mode::{self, Mode, ModeError, ModeFlag};
use crate::hooks::{FaultHook, HookContext};
use crate::model::{CounterLayout, TaintRules};
use crate::pool::PackError;
use crate::profile::DeviceProfile;
use crate::state::{ClaimStore, StartError, StoreConfig};
use crate::transport::conn::{self, Limits, Pool};
use crate::{claim_reader, fsutil, grpc, instance, metrics, pool, slice_controller};

/// Name of the DRA socket in the plugin dir (of a single instance; with
/// `Plugin::rolling_update`, `plugin-<pod uid>.sock`).
pub const DRA_SOCKET: &str = "plugin.sock";
/// Name of the checkpoint in the plugin dir.
pub const CHECKPOINT_FILE: &str = crate::checkpoint::FILE_NAME;

/// Everything a running plugin needs, every default resolved.
pub struct Settings {
    /// The driver name.
    pub driver_name: String,
    /// This node.
    pub node_name: String,
    /// The API client.
    pub client: kube::Client,
    /// Where CDI specs go.
    pub cdi_root: PathBuf,
    /// The DRA socket's and the checkpoint's directory.
    pub plugin_dir: PathBuf,
    /// The kubelet's registration directory.
    pub registry_dir: PathBuf,
    /// `/healthz`, `/readyz`, `/metrics`, if served.
    pub http_address: Option<SocketAddr>,
    /// Which DRA generation to speak.
    pub mode: ModeFlag,
    /// Connections open at once (0: from the open-files limit).
    pub max_connections: usize,
    /// How long a connection may stay silent.
    pub idle_timeout: Duration,
    /// The checkpoint's `apiVersion`.
    pub checkpoint_api_version: String,
    /// The checkpoint's `kind`.
    pub checkpoint_kind: String,
    /// The metrics' prefix.
    pub metrics_prefix: String,
    /// The field manager handed to the hook.
    pub field_manager: String,
    /// Whether a profile without devices may run.
    pub allow_empty_pool: bool,
    /// How long one call's device work may take.
    pub device_work_timeout: Duration,
    /// One prepare or unprepare call at a time.
    pub serialize: bool,
    /// This instance's pod UID, for rolling updates.
    pub pod_uid: Option<String>,
    /// The versions of the device metadata files (none: no files).
    pub metadata_versions: Vec<crate::device_metadata::MetadataVersion>,
    /// The fault hook.
    pub hook: Arc<dyn FaultHook>,
    /// Classic DRA: the node's inventory.
    #[cfg(feature = "classic")]
    pub classic: Option<Arc<dyn crate::classic_inventory::ClassicInventory>>,
    /// Test only: abort here.
    #[cfg(feature = "test-crash-points")]
    pub crash_point: Option<crate::state::CrashPoint>,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("driver_name", &self.driver_name)
            .field("node_name", &self.node_name)
            .field("plugin_dir", &self.plugin_dir)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
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
    let (mode, why) = dra_mode::choose(flag, &served)?;
    info!("{why}");
    Ok(mode)
}

/// The connections of a plugin socket, whatever `:authority` the kubelet sends (see
/// `dra_kubelet_proto::authority`): a real kubelet sends the socket path, which h2 would
/// refuse.
fn kubelet_connections(
    listener: tokio::net::UnixListener,
    pool: &Pool,
) -> impl futures::Stream<Item = std::io::Result<RewriteIo<conn::Guarded<tokio::net::UnixStream>>>>
+ Send
+ 'static {
    conn::incoming(listener, pool.clone()).map(|c| c.map(RewriteIo::server))
}

/// The profile's devices as the slices and the health streams see them now.
struct ProfileInventory<D: DeviceProfile> {
    store: Arc<ClaimStore<D>>,
    /// `<driver>/unhealthy`.
    taint_key: String,
}

impl<D: DeviceProfile> slice_controller::Inventory for ProfileInventory<D> {
    fn devices(&self) -> Vec<crate::model::SliceDevice> {
        let profile = self.store.profile();
        let mut devices = profile.slice_devices();
        if let Some(effect) = profile.unhealthy_taint() {
            for device in &mut devices {
                if profile.health(&device.name).0 == crate::model::HealthStatus::Unhealthy {
                    device
                        .taints
                        .push(crate::model::DeviceTaint::new(&self.taint_key, effect));
                }
            }
        }
        devices
    }

    fn counter_sets(&self) -> Vec<crate::model::CounterSet> {
        self.store.profile().counter_sets()
    }

    fn device_pool(&self, device: &str) -> Option<String> {
        self.store.profile().device_pool(device)
    }

    fn health(&self, device: &str) -> (crate::model::HealthStatus, Option<String>) {
        self.store.profile().health(device)
    }

    fn changes(&self) -> futures::stream::BoxStream<'static, ()> {
        self.store.profile().changes()
    }
}

/// The pod UID this instance registers under, if rolling updates are on and the release
/// takes them (kubelet 1.33+, structured DRA).
async fn instance_uid(plugin: &Settings, mode: Mode, client: &kube::Client) -> Option<String> {
    let uid = plugin.pod_uid.clone()?;
    if mode == Mode::Classic {
        warn!("rolling updates need structured DRA; one instance at a time");
        return None;
    }
    match slice_controller::server_minor(client).await {
        Some(minor) if minor < 33 => {
            warn!(
                minor,
                "rolling updates need Kubernetes 1.33+ (the kubelet registers one plugin instance per driver before); one instance at a time"
            );
            None
        }
        _ => {
            info!(pod_uid = %uid, "rolling updates on: this instance has sockets of its own");
            Some(uid)
        }
    }
}

/// Keeps `ready` as "published and registered" until the process ends.
async fn follow_readiness(
    published: Arc<AtomicBool>,
    registered: Arc<AtomicBool>,
    ready: Arc<AtomicBool>,
) {
    use std::sync::atomic::Ordering::SeqCst;
    loop {
        let now = published.load(SeqCst) && registered.load(SeqCst);
        if ready.swap(now, SeqCst) != now {
            info!(
                ready = now,
                "readiness (devices published and registered with the kubelet)"
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Aborts the tasks it holds when dropped: the tasks a failed start had begun.
#[derive(Debug, Default)]
struct AbortOnDrop(Vec<tokio::task::AbortHandle>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// Serves `profile` with `plugin`'s settings until `shutdown` completes (`Plugin::run`).
pub async fn run<D: DeviceProfile>(
    plugin: Settings,
    profile: D,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    check_driver_name(&plugin.driver_name)?;
    let kind = CdiKind::new(&plugin.driver_name, profile.cdi_class())?;
    if !plugin.allow_empty_pool && profile.slice_devices().is_empty() {
        return Err(Error::NoDevices);
    }
    let client = plugin.client.clone();
    let mode = choose_mode(plugin.mode, &client).await?;
    #[cfg(feature = "classic")]
    let classic = match mode {
        Mode::Classic => {
            crate::cdi_spec::check_classic_annotation_key(&plugin.driver_name)?;
            Some(plugin.classic.clone().ok_or(Error::NoClassic(""))?)
        }
        Mode::Structured(_) => None,
    };
    #[cfg(not(feature = "classic"))]
    if mode == Mode::Classic {
        return Err(Error::NoClassic(
            " (the library was built without its classic feature)",
        ));
    }
    let plugin_dir = plugin.plugin_dir.clone();
    let pod_uid = instance_uid(&plugin, mode, &client).await;
    let store_config = StoreConfig {
        node_name: plugin.node_name.clone(),
        kind,
        cdi_root: plugin.cdi_root.clone(),
        plugin_dir: plugin_dir.clone(),
        checkpoint_api_version: plugin.checkpoint_api_version.clone(),
        checkpoint_kind: plugin.checkpoint_kind.clone(),
        device_work_timeout: plugin.device_work_timeout,
        serialize: plugin.serialize,
        shared: pod_uid.is_some(),
        #[cfg(feature = "test-crash-points")]
        crash_point: plugin.crash_point,
    };
    let store = Arc::new(
        tokio::task::spawn_blocking(move || ClaimStore::start(profile, store_config))
            .await
            .map_err(|e| Error::Task(e.to_string()))??,
    );
    // Before anything is served: a crash during a claim's device work is undone.
    store.roll_back_started().await;
    let metadata = crate::device_metadata::start(
        match mode {
            Mode::Structured(_) => crate::device_metadata::MetadataWriter::new(
                &plugin.driver_name,
                &plugin_dir,
                &plugin.cdi_root,
                &plugin.metadata_versions,
            ),
            Mode::Classic => None,
        },
        store.prepared_uids(),
        pod_uid.is_none(),
    )
    .await;
    let metrics = Arc::new(metrics::Metrics::new(&plugin.metrics_prefix));
    // Ready once the node's devices are published and the kubelet registered the plugin:
    // before that, a pod's prepare can meet a kubelet still holding the connection of the
    // instance that ran before (a crash, an update), and the kubelet retries such a pod
    // only at its next resync, 60 to 90 s later (see docs/kubelet-plugin.md#readiness).
    let published = Arc::new(AtomicBool::new(false));
    let registered = Arc::new(AtomicBool::new(false));
    let ready = Arc::new(AtomicBool::new(false));
    let inventory: Arc<dyn slice_controller::Inventory> = Arc::new(ProfileInventory {
        store: store.clone(),
        taint_key: format!("{}/unhealthy", plugin.driver_name),
    });
    let device_names: Vec<String> = store
        .profile()
        .slice_devices()
        .into_iter()
        .map(|d| d.name)
        .collect();

    // Where the serving release wants counter sets, and how many taints a device may have.
    let layout = match mode {
        Mode::Structured(api) => slice_controller::counter_layout(&client, api).await,
        Mode::Classic => CounterLayout::WithDevices,
    };
    // The HTTP port is bound before anything starts: a port that is taken is the start's
    // error with nothing begun (a watch started first could log its own warning after it).
    let http_listener = match plugin.http_address {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| Error::Bind {
                    path: PathBuf::from(addr.to_string()),
                    source,
                })?,
        ),
        None => None,
    };
    // Everything spawned from here is aborted if the start fails further on (a socket or
    // the HTTP port that cannot be bound): the error is then the plugin's last word, not
    // followed by a watch's warning or a slice published for a plugin that never served.
    let mut started = AbortOnDrop::default();
    // The hook applies to structured DRA only.
    let hook_tasks = match mode {
        Mode::Classic => Vec::new(),
        Mode::Structured(resource_api) => plugin.hook.start(&HookContext {
            client: client.clone(),
            driver_name: plugin.driver_name.clone(),
            node_name: plugin.node_name.clone(),
            field_manager: plugin.field_manager.clone(),
            devices: device_names.clone(),
            taint_rules: TaintRules::of(layout),
            resource_api,
        }),
    };

    started
        .0
        .extend(hook_tasks.iter().map(tokio::task::JoinHandle::abort_handle));
    // Classic publishes the node for the driver's controller; structured publishes the
    // ResourceSlices.
    let publish_task = match mode {
        #[cfg(feature = "classic")]
        Mode::Classic => match &classic {
            Some(inventory) => tokio::spawn(inventory.run(store.prepared(), published.clone())),
            None => return Err(Error::NoClassic("")),
        },
        #[cfg(not(feature = "classic"))]
        Mode::Classic => return Err(Error::NoClassic("")),
        Mode::Structured(api) => {
            let desired = pool::Desired {
                driver: plugin.driver_name.clone(),
                node_name: plugin.node_name.clone(),
                pool: plugin.node_name.clone(),
                devices: store.profile().slice_devices(),
                counter_sets: store.profile().counter_sets(),
                layout,
                split: store.profile().slice_split(),
            };
            // Refused before anything is served: a pool that cannot be published is an
            // inventory error the operator must fix.
            for pool in pool::node_pools(desired.clone(), |d| store.profile().device_pool(d))? {
                pool::pack(&pool)?;
            }
            let controller = slice_controller::SliceController::new(
                client.clone(),
                api,
                desired,
                inventory.clone(),
                plugin.hook.clone(),
            );
            tokio::spawn(controller.run(published.clone()))
        }
    };
    started.0.push(publish_task.abort_handle());

    let connections = Pool::new(Limits::from_flags(
        plugin.max_connections,
        plugin.idle_timeout.as_secs(),
    ));
    let readiness_task = tokio::spawn(follow_readiness(
        published.clone(),
        registered.clone(),
        ready.clone(),
    ));
    started.0.push(readiness_task.abort_handle());
    let http_task = match http_listener {
        Some(listener) => {
            let metrics = metrics.clone();
            let endpoints = crate::transport::health::Endpoints {
                ready: ready.clone(),
                not_ready: "not ready",
                metrics: Arc::new(move || metrics.encode()),
            };
            Some(tokio::spawn(crate::transport::health::serve(
                listener,
                connections.clone(),
                endpoints,
            )))
        }
        None => None,
    };
    started
        .0
        .extend(http_task.iter().map(tokio::task::JoinHandle::abort_handle));

    let dra_path = plugin_dir.join(instance::dra_socket_file(&plugin_dir, pod_uid.as_deref()));
    let reg_path = plugin.registry_dir.join(instance::registration_socket_file(
        &plugin.registry_dir,
        &plugin.driver_name,
        pod_uid.as_deref(),
    ));
    let bind = |path: &PathBuf| {
        grpc::bind(path).map_err(|source| Error::Bind {
            path: path.clone(),
            source,
        })
    };

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let node = grpc::NodeService {
        store: store.clone(),
        metrics: metrics.clone(),
    };
    let (services, supported_versions, registration_hook) = match mode {
        #[cfg(feature = "classic")]
        Mode::Classic => {
            let (services, versions) = grpc::classic_services(node).await;
            (
                services,
                versions,
                Arc::new(crate::hooks::NoHook) as Arc<dyn FaultHook>,
            )
        }
        #[cfg(not(feature = "classic"))]
        Mode::Classic => return Err(Error::NoClassic("")),
        Mode::Structured(api) => {
            let dra = grpc::DraPluginService {
                node,
                claims: claim_reader::ClaimReader::new(client.clone(), api),
                driver_name: plugin.driver_name.clone(),
                node_name: plugin.node_name.clone(),
                hook: plugin.hook.clone(),
                metadata,
            };
            let (services, versions) =
                grpc::structured_services(dra, inventory, plugin.hook.clone(), stop_rx.clone())
                    .await;
            (services, versions, plugin.hook.clone())
        }
    };

    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };

    let dra_listener = bind(&dra_path)?;
    let dra_server = services.serve_with_incoming_shutdown(
        kubelet_connections(dra_listener, &connections),
        stopped(stop_rx.clone()),
    );
    let dra_task = tokio::spawn(dra_server);
    started.0.push(dra_task.abort_handle());

    // Registration last: once the kubelet sees this socket it dials the DRA socket.
    let reg_listener = bind(&reg_path)?;
    let registration = grpc::Registration {
        driver_name: plugin.driver_name.clone(),
        endpoint: dra_path.clone(),
        registered: registered.clone(),
        supported_versions,
        hook: registration_hook,
    };
    let reg_server = grpc::server()
        .add_service(pluginregistration::registration_server::RegistrationServer::new(registration))
        .serve_with_incoming_shutdown(
            kubelet_connections(reg_listener, &connections),
            stopped(stop_rx),
        );
    let reg_task = tokio::spawn(reg_server);
    // Started: from here the tasks end by the shutdown below.
    started.0.clear();
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
    for task in hook_tasks {
        task.abort();
    }
    readiness_task.abort();
    if let Some(task) = http_task {
        task.abort();
    }
    #[cfg(feature = "classic")]
    if let Some(inventory) = classic {
        inventory.shutdown(store.prepared().current()).await;
        return Ok(());
    }
    info!(
        "leaving the ResourceSlice in place: a restarted plugin takes it over; it goes with the Node, or when the kubelet drops the unregistered driver's slices"
    );
    Ok(())
}

/// Why the plugin could not start, or stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A driver name the API refuses.
    #[error(transparent)]
    DriverName(#[from] DriverNameError),
    /// Bad driver name or CDI class.
    #[error(transparent)]
    Kind(#[from] KindError),
    /// A driver name classic kubelets cannot use.
    #[error(transparent)]
    ClassicDriverName(#[from] DriverNameTooLongForClassic),
    /// Classic DRA chosen, but the plugin has no classic inventory (or was built without
    /// the `classic` feature).
    #[error(
        "classic DRA (resource.k8s.io/v1alpha2) needs a classic inventory of the node (Plugin::classic_inventory), which this driver does not have{0}; use structured DRA (Kubernetes 1.32+)"
    )]
    NoClassic(&'static str),
    /// The profile lists no devices, and the plugin was not told that is fine.
    #[error(
        "DeviceProfile::slice_devices returned no devices: the node would publish an empty pool and no claim could be allocated on it; a node without the hardware should not run the plugin (a nodeSelector on its DaemonSet), or the driver allows it with Plugin::allow_empty_pool"
    )]
    NoDevices,
    /// Checkpoint or CDI dir trouble at start.
    #[error(transparent)]
    Start(#[from] StartError),
    /// A socket could not be bound.
    #[error("binding {path}: {source}")]
    Bind {
        /// The socket path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// No DRA generation fits the flag and the API server.
    #[error(transparent)]
    Mode(#[from] ModeError),
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
    Pack(#[from] PackError),
}
