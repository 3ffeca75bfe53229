//! The kubelet of one emulated node, as far as DRA needs it, for each emulated release:
//! 1.27–1.30 for classic DRA, 1.32–1.34+ for structured DRA. Each part follows the
//! upstream code named in its module:
//!
//! - [`registration`]: the plugin watcher and the DRA registration handler — dialling the
//!   sockets with the `:authority` the real kubelet sends, `GetInfo` checks, several
//!   instances per driver, slices wiped at start, after a driver left or lost its
//!   connection;
//! - [`dra`]: the DRA manager — the claim-info cache, one `NodePrepareResources` per
//!   driver with all claims of a pod, the CDI ids a container gets;
//! - [`pods`]: pod workers — containers, status, restart policy, graceful deletion.
//!
//! [`Kubelet::restart`] stops the kubelet's loops and starts them again the way a kubelet
//! process restart does: running containers stay, plugins register anew, the claim-info
//! cache comes back from its checkpoint.

pub mod addresses;
mod dra;
mod lease;
mod logs;
mod pods;
mod registration;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use fake_dra_api::upstream::pod::DraPod;
use tokio::sync::{Mutex, RwLock, broadcast, watch};
use tokio::task::JoinSet;

pub use registration::{PluginApi, choose_service, known_services};

use super::structured::ResourceClient;
use super::{ContainerRuntime, Events, LogSink, NodeDirs};
use crate::apiserver::WatchEvent;

/// `defaultWipingDelay` (`pkg/kubelet/cm/dra/manager.go`): how long after a driver left
/// (or, 1.34+, lost its connection) the kubelet deletes its ResourceSlices.
pub const DEFAULT_WIPING_DELAY: Duration = Duration::from_secs(30);

/// What differs between the kubelet releases emulated here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Release(pub (u32, u32));

impl Release {
    /// Structured DRA (1.32+).
    pub fn structured(self) -> bool {
        crate::apiserver::is_structured(self.0)
    }

    /// The wording of the DRA manager's errors as 1.34 reworked it (`pkg/kubelet/cm/dra`):
    /// a failed claim is `ResourceClaim <name>` and prepare errors are wrapped in
    /// `prepare dynamic resources: `. Up to 1.33 (seen on a real 1.33.13 kubelet) a failed
    /// claim is `claim <namespace>/<name>`, unwrapped.
    fn dra_errors_name_resource_claims(self) -> bool {
        self.0 >= (1, 34)
    }

    /// Only `v1alpha2.Node/NodePrepareResource`, one claim per call (1.27).
    fn single_claim_service_only(self) -> bool {
        self.0 < (1, 28)
    }

    /// Generated claims are named `<pod>-<pod claim>` and the pod records nothing
    /// (`resourceclaim.Name` of 1.27); later releases read `status.resourceClaimStatuses`.
    pub fn legacy_claim_names(self) -> bool {
        self.0 < (1, 28)
    }

    /// A claim restored from the checkpoint after a restart counts as prepared (1.27 has
    /// no such flag; 1.32+ checkpoint it); 1.28–1.30 prepare it again for the next pod.
    fn restored_claims_prepared(self) -> bool {
        self.0 < (1, 28) || self.structured()
    }

    /// Classic kubelets pass CDI ids to the runtime in the annotation
    /// `cdi.k8s.io/<driver>_<claim uid>` (`pkg/kubelet/cm/util/cdi`, `annotationKey`).
    fn cdi_annotations(self) -> bool {
        !self.structured()
    }

    /// Plugins may run several instances per driver, an endpoint registered twice is
    /// refused, and a driver's ResourceSlices are wiped [`DEFAULT_WIPING_DELAY`] after it
    /// left unless it comes back (1.33+, `plugins_store.go` and `wipingDelay` of
    /// `registration.go`). Up to 1.32 the newest registration replaces the driver's plugin
    /// and a socket's removal deregisters the driver by name (`pluginsStore.delete`).
    fn plugin_store(self) -> bool {
        self.0 >= (1, 33)
    }

    /// 1.32's `DeRegisterPlugin` wipes the driver's ResourceSlices at once, whatever
    /// registers next (`go h.wipeResourceSlices(pluginName)`, no delay, nothing cancels
    /// it): a plugin restarted in place publishes new slices (seen on a real 1.32.13
    /// kubelet: the slice's uid changes across a kill -9 of the plugin).
    fn wipes_slices_at_deregistration(self) -> bool {
        self.structured() && !self.plugin_store()
    }

    /// The kubelet watches each plugin's gRPC connection and wipes the slices of a driver
    /// none of whose instances is connected (`dra_plugin_manager.go`, `sync`; 1.34+).
    fn monitors_connections(self) -> bool {
        self.0 >= (1, 34)
    }

    /// The notes of the Created and Started Events (`kuberuntime_container.go`
    /// `startContainer`), which 1.28 and 1.35 reworded.
    fn container_event_notes(self, container: &str) -> (String, String) {
        if self.0 < (1, 28) {
            (
                format!("Created container {container}"),
                format!("Started container {container}"),
            )
        } else if self.0 < (1, 35) {
            (
                format!("Created container: {container}"),
                format!("Started container {container}"),
            )
        } else {
            ("Container created".into(), "Container started".into())
        }
    }
}

/// A running emulated kubelet. [`Kubelet::shutdown`] stops its containers and leaves the
/// claims prepared, as a node shutdown does.
#[derive(Debug)]
pub struct Kubelet {
    node: String,
    tasks: JoinSet<()>,
    ctx: Arc<NodeContext>,
    /// `/containerLogs` (kube-apiserver's `pods/log` proxies there); outlives restarts.
    log_server: tokio::task::AbortHandle,
}

/// One registered instance of a DRA plugin.
#[derive(Debug, Clone)]
struct PluginInstance {
    /// The registration socket it came through.
    socket: PathBuf,
    /// Its DRA socket.
    endpoint: PathBuf,
    /// The service chosen for it.
    api: PluginApi,
    /// Whether its gRPC connection is up (1.34+ watch it; before, always true).
    connected: Arc<AtomicBool>,
}

/// What the node's tasks share; survives [`Kubelet::restart`] where a real node's state
/// would (containers, the claim checkpoint).
struct NodeContext {
    node: String,
    dirs: NodeDirs,
    client: kube::Client,
    runtime: ContainerRuntime,
    logs: LogSink,
    events: Events,
    release: Release,
    /// `resource.k8s.io` for structured releases; `None` on classic ones.
    structured: Option<ResourceClient>,
    /// Registered DRA plugins by driver name.
    plugins: RwLock<BTreeMap<String, Vec<PluginInstance>>>,
    /// Successful registrations so far (a restarted plugin registers again).
    registrations: AtomicU64,
    /// The claim-info cache; held across DRA calls so preparing and unpreparing one claim
    /// never interleave.
    claims: Mutex<dra::ClaimCache>,
    /// Pod workers by pod uid.
    workers: Mutex<HashMap<String, watch::Sender<Option<DraPod>>>>,
    /// Set on shutdown: workers stop their containers and exit, leaving claims prepared.
    stopping: watch::Sender<bool>,
    /// See [`DEFAULT_WIPING_DELAY`].
    wiping_delay: Duration,
    /// Pending ResourceSlice wipes by driver.
    pending_wipes: std::sync::Mutex<HashMap<String, tokio::task::AbortHandle>>,
    /// Which pod holds which address of the node's pod CIDR.
    pod_addresses: std::sync::Mutex<addresses::PodAddresses>,
    /// Log files of container runs that have ended: a `kubectl logs -f` stops there.
    ended_runs: Arc<std::sync::Mutex<std::collections::HashSet<PathBuf>>>,
    /// The port of the log endpoint, in the Node's `status.daemonEndpoints`.
    log_port: u16,
    /// Pods left to whoever runs them.
    host_run: Vec<super::HostRun>,
}

impl NodeContext {
    /// Marks a run's log file complete.
    fn run_ended(&self, log: Option<&std::path::Path>) {
        if let Some(log) = log {
            self.ended_runs
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(log.to_path_buf());
        }
    }
}

impl std::fmt::Debug for NodeContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeContext")
            .field("node", &self.node)
            .field("dirs", &self.dirs)
            .field("release", &self.release)
            .finish_non_exhaustive()
    }
}

/// How a [`Kubelet`] is set up.
#[derive(Debug, Clone)]
pub struct KubeletConfig {
    pub node: String,
    pub dirs: NodeDirs,
    pub runtime: ContainerRuntime,
    pub logs: LogSink,
    pub server_version: (u32, u32),
    /// See [`DEFAULT_WIPING_DELAY`]; tests shorten it.
    pub wiping_delay: Duration,
    /// Pods of this node that something else runs ([`super::HostRun`]).
    pub host_run: Vec<super::HostRun>,
    /// The addresses this node gives its pods (its `spec.podCIDR`).
    pub pod_addresses: addresses::PodAddresses,
}

impl Kubelet {
    pub fn start(
        config: KubeletConfig,
        client: kube::Client,
        changes: broadcast::Receiver<Arc<WatchEvent>>,
    ) -> std::io::Result<Self> {
        let release = Release(config.server_version);
        // The kubelet's port (10250 on a node): loopback, any free port.
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
        listener.set_nonblocking(true)?;
        let log_port = listener.local_addr()?.port();
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let ctx = Arc::new(NodeContext {
            events: Events::legacy(client.clone(), "kubelet", &config.node),
            structured: ResourceClient::for_server(client.clone(), config.server_version),
            release,
            node: config.node.clone(),
            dirs: config.dirs,
            client,
            runtime: config.runtime,
            logs: config.logs,
            plugins: RwLock::default(),
            registrations: AtomicU64::new(0),
            claims: Mutex::default(),
            workers: Mutex::default(),
            stopping: watch::Sender::new(false),
            wiping_delay: config.wiping_delay,
            pending_wipes: std::sync::Mutex::default(),
            ended_runs: Arc::default(),
            log_port,
            host_run: config.host_run,
            pod_addresses: std::sync::Mutex::new(config.pod_addresses),
        });
        let log_server = tokio::spawn(logs::serve(ctx.clone(), listener)).abort_handle();
        let mut kubelet = Self {
            node: config.node,
            tasks: JoinSet::new(),
            ctx,
            log_server,
        };
        kubelet.spawn_loops(changes);
        Ok(kubelet)
    }

    /// The loops of one kubelet process.
    fn spawn_loops(&mut self, changes: broadcast::Receiver<Arc<WatchEvent>>) {
        let ctx = self.ctx.clone();
        self.tasks.spawn(report_node_status(ctx.clone()));
        self.tasks.spawn(lease::keep_node_lease(ctx.clone()));
        if ctx.structured.is_some() {
            // No driver has registered yet, so none of the node's slices can be trusted
            // (`NewDRAPluginManager`: wipe at startup, all drivers).
            self.tasks
                .spawn(registration::wipe_slices(ctx.clone(), None, Duration::ZERO));
        }
        self.tasks.spawn(registration::watch_registry(ctx.clone()));
        if ctx.release.monitors_connections() {
            self.tasks
                .spawn(registration::monitor_connections(ctx.clone()));
        }
        self.tasks.spawn(async move {
            super::level_triggered("kubelet", changes, || {
                let ctx = ctx.clone();
                async move { pods::sync_pods(&ctx).await }
            })
            .await;
        });
    }

    /// Restarts the kubelet process: its loops stop and start again, plugins register
    /// anew, pending slice wipes are forgotten, the claim-info cache is what its
    /// checkpoint held; containers keep running.
    pub async fn restart(&mut self, changes: broadcast::Receiver<Arc<WatchEvent>>) {
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
        registration::forget_pending_wipes(&self.ctx);
        self.ctx.plugins.write().await.clear();
        dra::restore_from_checkpoint(&self.ctx).await;
        tracing::info!(node = %self.node, "kubelet restarted");
        self.spawn_loops(changes);
    }

    pub fn node(&self) -> &str {
        &self.node
    }

    /// How many times a plugin registered with this kubelet.
    pub fn registration_count(&self) -> u64 {
        self.ctx.registrations.load(Ordering::SeqCst)
    }

    /// Stops every container and the kubelet's loops; prepared claims stay prepared.
    pub async fn shutdown(mut self) {
        self.log_server.abort();
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
        registration::forget_pending_wipes(&self.ctx);
        self.ctx.stopping.send_replace(true);
        // Workers see `stopping` and stop their containers; wait until all are gone.
        loop {
            let live = {
                let mut workers = self.ctx.workers.lock().await;
                workers.retain(|_, tx| !tx.is_closed());
                workers.len()
            };
            if live == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// What the machine offers, as a kubelet reports it (`setNodeStatusMachineInfo`):
/// (capacity, allocatable). Capacity is the machine's CPUs and memory and 110 pods (the
/// kubelet's `maxPods` default); allocatable takes off only the default hard eviction
/// threshold, `memory.available<100Mi`, as no reservations are configured. So pods'
/// requests are held to the machine, as on a kind node.
fn machine_resources() -> (serde_json::Value, serde_json::Value) {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let memory_kib = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0);
    let capacity = serde_json::json!({"cpu": cpus.to_string(), "memory": format!("{memory_kib}Ki"), "pods": "110"});
    let allocatable = serde_json::json!({
        "cpu": cpus.to_string(),
        "memory": format!("{}Ki", memory_kib.saturating_sub(100 * 1024)),
        "pods": "110",
    });
    (capacity, allocatable)
}

/// The node's status as a kubelet reports it at start (`setNodeStatus`): Ready, its
/// address and kubelet port (where kube-apiserver finds `/containerLogs`), what it runs on
/// and what it offers. Retried until written.
async fn report_node_status(ctx: Arc<NodeContext>) {
    let (capacity, allocatable) = machine_resources();
    let now = crate::apiserver::now_rfc3339();
    let (major, minor) = ctx.release.0;
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let os_image = read("/etc/os-release")
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap_or_default();
    let architecture = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let status = serde_json::json!({"status": {
        "conditions": [{
            "type": "Ready", "status": "True", "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
            "lastHeartbeatTime": now, "lastTransitionTime": now,
        }],
        "addresses": [
            {"type": "InternalIP", "address": "127.0.0.1"},
            {"type": "Hostname", "address": ctx.node},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": ctx.log_port}},
        "capacity": capacity,
        "allocatable": allocatable,
        "nodeInfo": {
            "kubeletVersion": format!("v{major}.{minor}.0-fake-dra-emulator"),
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": architecture,
            "osImage": os_image,
            "kernelVersion": read("/proc/sys/kernel/osrelease").trim(),
            "containerRuntimeVersion": format!("{}://fake-dra-emulator", ctx.runtime.name()),
            "machineID": "", "systemUUID": "", "bootID": "",
        },
    }});
    let nodes = kube::api::Api::<k8s_openapi::api::core::v1::Node>::all(ctx.client.clone());
    loop {
        match nodes
            .patch_status(
                &ctx.node,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&status),
            )
            .await
        {
            Ok(_) => return,
            Err(error) => {
                tracing::debug!(node = %ctx.node, %error, "writing the node status failed; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}
