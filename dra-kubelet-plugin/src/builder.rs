//! [`Plugin`]: what a driver configures, with defaults derived from the driver name.
//! Running it is [`crate::serve`].

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::device_metadata::MetadataVersion;
use crate::dra_mode::ModeFlag;
use crate::hooks::{FaultHook, NoHook};
use crate::profile::DeviceProfile;
use crate::serve::{Error, Settings};

/// The Kubernetes API access a plugin needs in structured DRA, as (API group, resource,
/// verbs): its node's ResourceSlices (listed and watched by field selector, written,
/// stale ones deleted), the claims it prepares, and its Node (the slices' owner
/// reference). Discovery (`/apis`) needs no grant. A driver's RBAC grants at least this.
pub const API_ACCESS: &[(&str, &str, &[&str])] = &[
    (
        "resource.k8s.io",
        "resourceslices",
        &["list", "watch", "create", "update", "delete"],
    ),
    ("resource.k8s.io", "resourceclaims", &["get"]),
    ("", "nodes", &["get"]),
];

/// What a driver whose profile reports device status (`DeviceProfile::device_status`)
/// grants besides [`API_ACCESS`]: the claims' status, and on 1.36+ (the
/// `DRAResourceClaimGranularStatusAuthorization` gate, beta) the synthetic
/// `resourceclaims/driver` with the verb prefixed by whether the writer runs on the
/// claim's node, limited to the driver's name as `resourceNames`.
pub const STATUS_API_ACCESS: &[(&str, &str, &[&str])] = &[
    ("resource.k8s.io", "resourceclaims/status", &["update"]),
    (
        "resource.k8s.io",
        "resourceclaims/driver",
        &["associated-node:update", "arbitrary-node:update"],
    ),
];

/// How long one call's device work may take by default: the kubelet gives the whole call
/// 45 s (`defaultClientCallTimeout` of its DRA plugin client), and the answer must reach it
/// after the work, a possible rollback and the checkpoint's write.
pub const DEFAULT_DEVICE_WORK_TIMEOUT: Duration = Duration::from_secs(30);

/// A DRA kubelet plugin for one node, configured with builder methods; [`Plugin::run`]
/// serves the kubelet until shutdown.
///
/// ```no_run
/// # async fn run<P: dra_kubelet_plugin::DeviceProfile>(profile: P, client: kube::Client) -> Result<(), dra_kubelet_plugin::Error> {
/// use dra_kubelet_plugin::{ModeFlag, Plugin};
///
/// Plugin::new("fpga.example.com", "node-1", client)
///     .cdi_root("/var/run/cdi")
///     .http_address(Some(([0, 0, 0, 0], 8080).into()))
///     .mode(ModeFlag::Structured)
///     .run(profile, dra_kubelet_plugin::shutdown_signal())
///     .await
/// # }
/// ```
///
/// Every name has a default derived from the driver name: the plugin dir
/// `/var/lib/kubelet/plugins/<driver>`, the checkpoint `apiVersion` `<driver>/v1alpha1`
/// (kind `KubeletPluginCheckpoint`), the metrics prefix (the driver name with every
/// character outside `[A-Za-z0-9_]` replaced by `_`, then `_kubelet_plugin`), the field
/// manager `<driver>/<node>`.
pub struct Plugin {
    driver_name: String,
    node_name: String,
    client: kube::Client,
    cdi_root: PathBuf,
    plugin_dir: Option<PathBuf>,
    registry_dir: PathBuf,
    http_address: Option<SocketAddr>,
    mode: ModeFlag,
    max_connections: usize,
    idle_timeout: Duration,
    allow_empty_pool: bool,
    device_work_timeout: Duration,
    serialize: bool,
    pod_uid: Option<String>,
    metadata_versions: Vec<MetadataVersion>,
    checkpoint_api_version: Option<String>,
    checkpoint_kind: String,
    metrics_prefix: Option<String>,
    field_manager: Option<String>,
    hook: Arc<dyn FaultHook>,
    #[cfg(feature = "classic")]
    classic: Option<Arc<dyn crate::classic_inventory::ClassicInventory>>,
    #[cfg(feature = "test-crash-points")]
    crash_point: Option<crate::state::CrashPoint>,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("driver_name", &self.driver_name)
            .field("node_name", &self.node_name)
            .field("cdi_root", &self.cdi_root)
            .field("plugin_dir", &self.plugin_dir_or_default())
            .field("registry_dir", &self.registry_dir)
            .field("mode", &self.mode)
            .field("hook", &self.hook)
            .finish_non_exhaustive()
    }
}

impl Plugin {
    /// A plugin of `driver_name` on `node_name`, talking to the API through `client`.
    pub fn new(
        driver_name: impl Into<String>,
        node_name: impl Into<String>,
        client: kube::Client,
    ) -> Self {
        Self {
            driver_name: driver_name.into(),
            node_name: node_name.into(),
            client,
            cdi_root: PathBuf::from("/var/run/cdi"),
            plugin_dir: None,
            registry_dir: PathBuf::from("/var/lib/kubelet/plugins_registry"),
            http_address: None,
            mode: ModeFlag::Auto,
            max_connections: 0,
            idle_timeout: crate::transport::conn::DEFAULT_IDLE_TIMEOUT,
            allow_empty_pool: false,
            device_work_timeout: DEFAULT_DEVICE_WORK_TIMEOUT,
            serialize: true,
            pod_uid: None,
            metadata_versions: Vec::new(),
            checkpoint_api_version: None,
            checkpoint_kind: "KubeletPluginCheckpoint".to_owned(),
            metrics_prefix: None,
            field_manager: None,
            hook: Arc::new(NoHook),
            #[cfg(feature = "classic")]
            classic: None,
            #[cfg(feature = "test-crash-points")]
            crash_point: None,
        }
    }

    /// Where CDI specs are written; `/var/run/cdi` by default.
    pub fn cdi_root(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cdi_root = dir.into();
        self
    }

    /// The DRA socket and the checkpoint's directory;
    /// `/var/lib/kubelet/plugins/<driver>` by default.
    pub fn plugin_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.plugin_dir = Some(dir.into());
        self
    }

    /// The kubelet's plugin registration directory;
    /// `/var/lib/kubelet/plugins_registry` by default.
    pub fn registry_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.registry_dir = dir.into();
        self
    }

    /// Serve `/healthz`, `/readyz` (ready once the node's devices are published) and
    /// `/metrics` there; off by default.
    pub fn http_address(mut self, address: Option<SocketAddr>) -> Self {
        self.http_address = address;
        self
    }

    /// Which DRA generation to speak; [`ModeFlag::Auto`] (from the API server's
    /// discovery) by default.
    pub fn mode(mut self, mode: ModeFlag) -> Self {
        self.mode = mode;
        self
    }

    /// Most connections open at once over both sockets and the HTTP port; admitting one
    /// more closes the quietest. 0 (the default): as many as the open-files limit leaves
    /// room for.
    pub fn max_connections(mut self, max: usize) -> Self {
        self.max_connections = max;
        self
    }

    /// How long a connection may stay silent before it is closed; 120 s by default (the
    /// kubelet's connection answers the plugin's keepalive pings and stays).
    pub fn connection_idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = timeout;
        self
    }

    /// Lets a profile with no devices run (an empty pool is published); refused at start
    /// otherwise ([`Error::NoDevices`]), since such a node can never be allocated from.
    pub fn allow_empty_pool(mut self, allow: bool) -> Self {
        self.allow_empty_pool = allow;
        self
    }

    /// How long one prepare or unprepare call's device work
    /// ([`DeviceProfile::DEVICE_WORK`]) may take before the claims still at work are
    /// failed and rolled back; [`DEFAULT_DEVICE_WORK_TIMEOUT`] by default, within the
    /// kubelet's 45 s for the whole call.
    pub fn device_work_timeout(mut self, timeout: Duration) -> Self {
        self.device_work_timeout = timeout;
        self
    }

    /// Whether prepare and unprepare calls run one at a time (the default, as the upstream
    /// Go helper's `Serialize`), the claims of a call one after the other. A driver whose
    /// hardware takes concurrent work turns it off: calls then overlap and the claims of a
    /// call work together. Two calls never work on one claim at once either way (the
    /// second is told the claim is busy).
    pub fn serialize(mut self, serialize: bool) -> Self {
        self.serialize = serialize;
        self
    }

    /// Rolling updates (kubelet 1.33+, structured DRA): `Some(<this pod's UID>)` (from the
    /// downward API, `metadata.uid`) registers this instance under sockets of its own, so
    /// a DaemonSet update with `maxSurge: 1, maxUnavailable: 0` runs the new instance
    /// beside the old one and the kubelet always has one. Both share the plugin directory:
    /// every call takes its lock (`serialize.lock`, across instances, whatever
    /// [`Plugin::serialize`] says) and reads the checkpoint the other may have written.
    /// Servers older than 1.33, and classic DRA, keep the one-instance sockets (logged).
    /// An instance killed without its shutdown leaves its sockets behind: the kubelet
    /// drops them when it finds nobody listening.
    pub fn rolling_update(mut self, pod_uid: Option<String>) -> Self {
        self.pod_uid = pod_uid.filter(|u| !u.is_empty());
        self
    }

    /// Device metadata files (KEP-5304; structured DRA): for each request of a prepared
    /// claim, a file naming its devices and their published attributes, mounted read-only
    /// into the containers that use the request, in each of `versions` (none, the default:
    /// no files). Layout and format are the upstream Go helper's, so its reader
    /// (`k8s.io/dynamic-resource-allocation/devicemetadata`) reads them;
    /// [`MetadataVersion::ALL`] serves the
    /// readers of 1.36 and 1.37.
    pub fn device_metadata(mut self, versions: impl IntoIterator<Item = MetadataVersion>) -> Self {
        self.metadata_versions = versions.into_iter().collect();
        self
    }

    /// Where this plugin's registration socket is (where a kubelet, or a test's, finds
    /// it), given the settings so far; with [`Plugin::rolling_update`] the per-instance
    /// name.
    pub fn registration_socket(&self) -> PathBuf {
        let file = crate::instance::registration_socket_file(
            &self.registry_dir,
            &self.driver_name,
            self.pod_uid.as_deref(),
        );
        self.registry_dir.join(file)
    }

    /// The checkpoint's `apiVersion` and `kind`, written and required when read.
    pub fn checkpoint_type(
        mut self,
        api_version: impl Into<String>,
        kind: impl Into<String>,
    ) -> Self {
        self.checkpoint_api_version = Some(api_version.into());
        self.checkpoint_kind = kind.into();
        self
    }

    /// The prefix of every metric's name.
    pub fn metrics_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.metrics_prefix = Some(prefix.into());
        self
    }

    /// The field manager of the plugin's server-side applies (handed to the hook).
    pub fn field_manager(mut self, manager: impl Into<String>) -> Self {
        self.field_manager = Some(manager.into());
        self
    }

    /// The hook between the kubelet's calls and the profile (structured DRA).
    pub fn fault_hook(mut self, hook: impl FaultHook) -> Self {
        self.hook = Arc::new(hook);
        self
    }

    /// Classic DRA: what publishes the node's inventory for the driver's controller.
    #[cfg(feature = "classic")]
    pub fn classic_inventory(
        mut self,
        inventory: impl crate::classic_inventory::ClassicInventory,
    ) -> Self {
        self.classic = Some(Arc::new(inventory));
        self
    }

    /// Test only: abort the process at `point`.
    #[cfg(feature = "test-crash-points")]
    pub fn crash_point(mut self, point: Option<crate::state::CrashPoint>) -> Self {
        self.crash_point = point;
        self
    }

    /// Serves the devices `profile` describes until `shutdown` completes, then removes
    /// the sockets (the kubelet deregisters the driver) and stops. The ResourceSlices
    /// stay, so a restarted plugin takes them over.
    pub async fn run<D: DeviceProfile>(
        self,
        profile: D,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), Error> {
        crate::serve::run(self.settings(), profile, shutdown).await
    }

    /// Every setting with its default resolved.
    fn settings(self) -> Settings {
        Settings {
            plugin_dir: self.plugin_dir_or_default(),
            checkpoint_api_version: self.checkpoint_api_version_or_default(),
            metrics_prefix: self.metrics_prefix_or_default(),
            field_manager: self.field_manager_or_default(),
            driver_name: self.driver_name,
            node_name: self.node_name,
            client: self.client,
            cdi_root: self.cdi_root,
            registry_dir: self.registry_dir,
            http_address: self.http_address,
            mode: self.mode,
            max_connections: self.max_connections,
            idle_timeout: self.idle_timeout,
            checkpoint_kind: self.checkpoint_kind,
            allow_empty_pool: self.allow_empty_pool,
            device_work_timeout: self.device_work_timeout,
            serialize: self.serialize,
            pod_uid: self.pod_uid,
            metadata_versions: self.metadata_versions,
            hook: self.hook,
            #[cfg(feature = "classic")]
            classic: self.classic,
            #[cfg(feature = "test-crash-points")]
            crash_point: self.crash_point,
        }
    }

    fn plugin_dir_or_default(&self) -> PathBuf {
        self.plugin_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from("/var/lib/kubelet/plugins").join(&self.driver_name))
    }

    fn checkpoint_api_version_or_default(&self) -> String {
        self.checkpoint_api_version
            .clone()
            .unwrap_or_else(|| format!("{}/v1alpha1", self.driver_name))
    }

    fn metrics_prefix_or_default(&self) -> String {
        self.metrics_prefix.clone().unwrap_or_else(|| {
            let name: String = self
                .driver_name
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect();
            format!("{name}_kubelet_plugin")
        })
    }

    fn field_manager_or_default(&self) -> String {
        self.field_manager
            .clone()
            .unwrap_or_else(|| format!("{}/{}", self.driver_name, self.node_name))
            .chars()
            .take(128)
            .collect()
    }
}

/// Completes on SIGTERM (what the kubelet sends a pod it stops) or SIGINT: the usual
/// `shutdown` of [`Plugin::run`].
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        // No signal handling (never on Linux): run until the process is killed.
        _ => std::future::pending().await,
    }
}
