//! [`Plugin`]: what a driver configures, with defaults derived from the driver name, and
//! why running it can fail. Running it is [`crate::serve`].

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::hook::{FaultHook, NoHook};
use crate::mode::ModeFlag;
use crate::profile::DeviceProfile;

/// Name of the DRA socket in the plugin dir.
pub const DRA_SOCKET: &str = "plugin.sock";
/// Name of the checkpoint in the plugin dir.
pub const CHECKPOINT_FILE: &str = crate::checkpoint::FILE_NAME;

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

/// A DRA kubelet plugin for one node, configured with builder methods; [`Plugin::run`]
/// serves the kubelet until shutdown.
///
/// Every name has a default derived from the driver name: the plugin dir
/// `/var/lib/kubelet/plugins/<driver>`, the checkpoint `apiVersion` `<driver>/v1alpha1`
/// (kind `KubeletPluginCheckpoint`), the metrics prefix (the driver name with every
/// character outside `[A-Za-z0-9_]` replaced by `_`, then `_kubelet_plugin`), the field
/// manager `<driver>/<node>`.
pub struct Plugin {
    pub(crate) driver_name: String,
    pub(crate) node_name: String,
    pub(crate) client: kube::Client,
    pub(crate) cdi_root: PathBuf,
    pub(crate) plugin_dir: Option<PathBuf>,
    pub(crate) registry_dir: PathBuf,
    pub(crate) http_address: Option<SocketAddr>,
    pub(crate) mode: ModeFlag,
    pub(crate) max_connections: usize,
    pub(crate) idle_timeout: Duration,
    pub(crate) checkpoint_api_version: Option<String>,
    pub(crate) checkpoint_kind: String,
    pub(crate) metrics_prefix: Option<String>,
    pub(crate) field_manager: Option<String>,
    pub(crate) hook: Arc<dyn FaultHook>,
    #[cfg(feature = "classic")]
    pub(crate) classic: Option<Arc<dyn crate::classic::ClassicPublisher>>,
    #[cfg(feature = "test-crash-points")]
    pub(crate) crash_point: Option<crate::CrashPoint>,
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
            idle_timeout: fake_dra_ops::conn::DEFAULT_IDLE_TIMEOUT,
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
    pub fn classic_publisher(mut self, publisher: impl crate::classic::ClassicPublisher) -> Self {
        self.classic = Some(Arc::new(publisher));
        self
    }

    /// Test only: abort the process at `point`.
    #[cfg(feature = "test-crash-points")]
    pub fn crash_point(mut self, point: Option<crate::CrashPoint>) -> Self {
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
        crate::serve::run(self, profile, shutdown).await
    }

    pub(crate) fn plugin_dir_or_default(&self) -> PathBuf {
        self.plugin_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from("/var/lib/kubelet/plugins").join(&self.driver_name))
    }

    pub(crate) fn checkpoint_api_version_or_default(&self) -> String {
        self.checkpoint_api_version
            .clone()
            .unwrap_or_else(|| format!("{}/v1alpha1", self.driver_name))
    }

    pub(crate) fn metrics_prefix_or_default(&self) -> String {
        self.metrics_prefix.clone().unwrap_or_else(|| {
            let name: String = self
                .driver_name
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect();
            format!("{name}_kubelet_plugin")
        })
    }

    pub(crate) fn field_manager_or_default(&self) -> String {
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

/// Why the plugin could not start, or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad driver name or CDI class.
    #[error(transparent)]
    Kind(#[from] crate::cdi::BadKind),
    /// A driver name classic kubelets cannot use.
    #[error(transparent)]
    ClassicDriverName(#[from] crate::cdi::DriverNameTooLongForClassic),
    /// Classic DRA chosen, but the plugin has no classic publisher (or was built without
    /// the `classic` feature).
    #[error(
        "classic DRA (resource.k8s.io/v1alpha2) needs a classic publisher of the node's inventory, which this driver does not have{0}; use structured DRA (Kubernetes 1.32+)"
    )]
    NoClassic(&'static str),
    /// Checkpoint or CDI dir trouble at start.
    #[error(transparent)]
    Start(#[from] crate::driver::StartError),
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
    Mode(#[from] crate::mode::ModeError),
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
    Pack(#[from] crate::slices::PackError),
}
