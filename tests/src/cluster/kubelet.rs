//! The kubelet of one emulated node, as far as DRA needs it: kubelet 1.30 for classic DRA,
//! 1.32–1.34 for structured DRA (the differences are listed after the classic behaviour):
//!
//! - **plugin registration** (`pkg/kubelet/pluginmanager`): sockets appearing in the
//!   registration dir (names starting with `.` ignored) are dialled, `GetInfo` (1 s) must
//!   answer type `DRAPlugin` and at least one `supported_versions` entry that parses as a
//!   semantic version (`pkg/kubelet/cm/dra/plugin/registration.go`); the plugin is then
//!   told `NotifyRegistrationStatus` (5 s). A removed socket deregisters; a re-created one
//!   (new inode) registers again. Upstream learns of changes through inotify; this kubelet
//!   rescans the directory every [`REGISTRY_SCAN`], which finds the same set of sockets.
//! - **DRA manager** (`pkg/kubelet/cm/dra/manager.go`): before a pod's containers start,
//!   every claim of the pod must list the pod in `status.reservedFor`; each resource handle
//!   goes to the plugin named by its `driverName`, `v1alpha3.Node/NodePrepareResources`
//!   first and `v1alpha2.Node/NodePrepareResource` when that is `Unimplemented`. A claim
//!   prepared for another pod of the node is not prepared again. The CDI ids must be fully
//!   qualified. When a pod terminates, its claims are unprepared once no other pod of the
//!   node uses them.
//! - **pod workers**: containers start with the CDI ids of the claims they name; pod
//!   status (phase, conditions, container statuses) is reported; `restartPolicy` is
//!   honoured; a deleted pod's containers are stopped, its claims unprepared, and the pod
//!   removed with grace period 0, as the kubelet finishes a graceful deletion.
//!
//! Structured DRA (emulated release ≥ 1.32):
//!
//! - registration picks the gRPC service like `pkg/kubelet/cm/dra/plugin/registration.go`
//!   (`validateSupportedServices`, 1.33+): the kubelet's known services, newest first
//!   (1.34: `v1.DRAPlugin`, `v1beta1.DRAPlugin`; 1.32/1.33: `v1beta1.DRAPlugin`), the first
//!   one the plugin lists wins; a plugin listing none of them is rejected. (1.32's kubelet
//!   still read a semantic version here; the emulator uses the 1.33 rule for it.)
//! - preparing a claim (allocated, the pod in `reservedFor`) calls
//!   `NodePrepareResources(Claim{namespace, uid, name})` on every driver named in
//!   `status.allocation.devices.results`; the container gets the union of the returned
//!   devices' CDI ids. A container claim naming one `request` is refused, not guessed.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fake_dra_crds::pod::{ClassicContainer, ClassicPod};
use fake_dra_crds::v1alpha2::ResourceClaim;
use fake_dra_proto::{DRA_PLUGIN_TYPE, pluginregistration as reg, v1alpha2, v1alpha3};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, Preconditions};
use serde_json::{Value, json};
use tokio::sync::{Mutex, RwLock, broadcast, watch};
use tokio::task::JoinSet;

use super::runtime::{ContainerSpec, RunningContainer};
use super::structured::{self, ResourceApi, ResourceClaim as StructuredClaim};
use super::{ContainerRuntime, Events, LogSink, NodeDirs, level_triggered, object_ref};
use crate::apiserver::WatchEvent;

/// How often the registration dir is rescanned.
const REGISTRY_SCAN: Duration = Duration::from_millis(100);
/// How often a pod worker looks at its containers and retries what failed.
const POD_TICK: Duration = Duration::from_millis(200);
/// Upstream's timeouts (`pluginwatcher`, `dra/plugin`).
const GET_INFO_TIMEOUT: Duration = Duration::from_secs(1);
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(5);
const DRA_CALL_TIMEOUT: Duration = Duration::from_secs(45);
/// The longest wait between two restarts of a crashing container (upstream: 5 minutes;
/// shortened so tests of crash loops end).
const MAX_RESTART_BACKOFF: Duration = Duration::from_secs(10);

/// A running emulated kubelet. [`Kubelet::shutdown`] stops its containers and leaves the
/// claims prepared, as a node shutdown does.
#[derive(Debug)]
pub struct Kubelet {
    node: String,
    tasks: JoinSet<()>,
    ctx: Arc<NodeContext>,
}

/// What the node's tasks share.
struct NodeContext {
    node: String,
    dirs: NodeDirs,
    client: kube::Client,
    runtime: ContainerRuntime,
    logs: LogSink,
    events: Events,
    /// Registered DRA plugins by driver name: their DRA socket and the API chosen for them.
    plugins: RwLock<BTreeMap<String, (PathBuf, PluginApi)>>,
    /// The emulated release: which registration rule and DRA APIs this kubelet has.
    server_version: (u32, u32),
    /// `resource.k8s.io` for structured releases; `None` on classic ones.
    structured: Option<ResourceApi>,
    /// Successful registrations so far (a restarted plugin registers again).
    registrations: AtomicU64,
    /// The claim-info cache: claims prepared on this node, by claim uid. Held across DRA
    /// calls so preparing and unpreparing one claim never interleave.
    claims: Mutex<BTreeMap<String, PreparedClaim>>,
    /// Pod workers by pod uid.
    workers: Mutex<HashMap<String, watch::Sender<Option<ClassicPod>>>>,
    /// Set on shutdown: workers stop their containers and exit, leaving claims prepared.
    stopping: watch::Sender<bool>,
}

impl std::fmt::Debug for NodeContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeContext")
            .field("node", &self.node)
            .field("dirs", &self.dirs)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone)]
struct PreparedClaim {
    namespace: String,
    name: String,
    /// (driver, handle data) pairs as prepared; the data is empty for structured claims.
    handles: Vec<(String, String)>,
    /// Prepared through a structured DRA service (the plugin reads the allocation itself).
    structured: bool,
    cdi_ids: Vec<String>,
    pods: BTreeSet<String>,
}

impl Kubelet {
    pub fn start(
        node: String,
        dirs: NodeDirs,
        client: kube::Client,
        changes: broadcast::Receiver<Arc<WatchEvent>>,
        runtime: ContainerRuntime,
        logs: LogSink,
        server_version: (u32, u32),
    ) -> Self {
        let events = Events::new(client.clone(), "kubelet", Some(node.clone()));
        let structured = ResourceApi::for_server(client.clone(), server_version);
        let ctx = Arc::new(NodeContext {
            server_version,
            structured,
            node: node.clone(),
            dirs,
            client,
            runtime,
            logs,
            events,
            plugins: RwLock::default(),
            registrations: AtomicU64::new(0),
            claims: Mutex::default(),
            workers: Mutex::default(),
            stopping: watch::Sender::new(false),
        });
        let mut tasks = JoinSet::new();
        tasks.spawn(watch_registry(ctx.clone()));
        let sync_ctx = ctx.clone();
        tasks.spawn(async move {
            level_triggered("kubelet", changes, || {
                let ctx = sync_ctx.clone();
                async move { sync_pods(&ctx).await }
            })
            .await;
        });
        Self { node, tasks, ctx }
    }

    pub fn node(&self) -> &str {
        &self.node
    }

    /// The drivers registered with this kubelet.
    pub async fn registered_plugins(&self) -> Vec<String> {
        self.ctx.plugins.read().await.keys().cloned().collect()
    }

    /// How many times a plugin registered with this kubelet.
    pub fn registration_count(&self) -> u64 {
        self.ctx.registrations.load(Ordering::SeqCst)
    }

    /// Stops every container and the kubelet's loops; prepared claims stay prepared.
    pub async fn shutdown(mut self) {
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
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

// ---------------------------------------------------------------------------------------
// Plugin registration

/// One socket seen in the registration dir, by inode and change time: a re-created
/// socket is a new one even when the file system hands out the same inode again (upstream
/// sees its creation through inotify).
type SocketId = (PathBuf, u64, i64, i64);

async fn watch_registry(ctx: Arc<NodeContext>) {
    // Socket → the driver it registered (None: seen, registration failed).
    let mut known: HashMap<SocketId, Option<String>> = HashMap::new();
    loop {
        let present = scan_sockets(&ctx.dirs.registry_dir);
        let gone: Vec<SocketId> = known
            .keys()
            .filter(|id| !present.contains(*id))
            .cloned()
            .collect();
        for id in gone {
            if let Some(Some(driver)) = known.remove(&id) {
                tracing::info!(node = %ctx.node, %driver, socket = %id.0.display(), "DRA plugin deregistered (socket removed)");
                ctx.plugins.write().await.remove(&driver);
            }
        }
        for id in present {
            if known.contains_key(&id) {
                continue;
            }
            let registered = match register(&id.0, ctx.server_version).await {
                Ok((driver, endpoint, api)) => {
                    tracing::info!(node = %ctx.node, %driver, endpoint = %endpoint.display(), ?api, "DRA plugin registered");
                    ctx.plugins
                        .write()
                        .await
                        .insert(driver.clone(), (endpoint, api));
                    ctx.registrations.fetch_add(1, Ordering::SeqCst);
                    Some(driver)
                }
                Err(error) => {
                    tracing::warn!(node = %ctx.node, socket = %id.0.display(), %error, "plugin registration failed");
                    None
                }
            };
            known.insert(id, registered);
        }
        tokio::time::sleep(REGISTRY_SCAN).await;
    }
}

fn scan_sockets(dir: &Path) -> BTreeSet<SocketId> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeSet::new();
    };
    entries
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            use std::os::unix::fs::FileTypeExt;
            meta.file_type()
                .is_socket()
                .then(|| (e.path(), meta.ino(), meta.ctime(), meta.ctime_nsec()))
        })
        .collect()
}

/// The DRA gRPC service the kubelet talks to a plugin through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PluginApi {
    /// `v1alpha3.Node`, falling back to `v1alpha2.Node` (kubelets 1.27–1.30).
    Classic,
    /// `k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin`.
    V1Beta1,
    /// `k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin`.
    V1,
}

/// The structured services a kubelet of `server_version` knows, newest first.
pub fn known_services(server_version: (u32, u32)) -> Vec<(&'static str, PluginApi)> {
    if server_version >= (1, 34) {
        vec![
            (fake_dra_proto::SUPPORTED_V1, PluginApi::V1),
            (fake_dra_proto::SUPPORTED_V1BETA1, PluginApi::V1Beta1),
        ]
    } else {
        vec![(fake_dra_proto::SUPPORTED_V1BETA1, PluginApi::V1Beta1)]
    }
}

/// `validateSupportedServices`: the first of the kubelet's services the plugin lists.
pub fn choose_service(
    server_version: (u32, u32),
    supported: &[String],
) -> Result<PluginApi, String> {
    if supported.is_empty() {
        return Err("empty list of supported versions".into());
    }
    let known = known_services(server_version);
    known
        .iter()
        .find(|(name, _)| supported.iter().any(|s| s == name))
        .map(|(_, api)| *api)
        .ok_or_else(|| {
            let names: Vec<&str> = known.iter().map(|(n, _)| *n).collect();
            format!(
                "none of the supported versions {supported:?} is a DRA service this kubelet knows ({})",
                names.join(", ")
            )
        })
}

/// Which plugin socket a kubelet dials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Socket {
    Registration,
    Dra,
}

/// The `:authority` a kubelet of `server_version` sends on a plugin socket.
///
/// The plugin watcher (`pkg/kubelet/pluginmanager/operationexecutor/operation_generator.go`,
/// `dial`: `grpc.DialContext(ctx, unixSocketPath, …, WithContextDialer)`, every release)
/// and the DRA client up to 1.33 (`pkg/kubelet/cm/dra/plugin`, `grpc.Dial(endpoint, …)`)
/// hand grpc-go the bare socket path, which grpc-go sends as the authority: raw before
/// grpc-go 1.57 (kubelet 1.27: v1.51.0, 1.28: v1.54.0), %-encoded since (`clientconn.go`,
/// `encodeAuthority`; kubelet 1.29: v1.58.3). The 1.34+ DRA client dials `"unix:" + path`
/// (`grpc.NewClient`), for which grpc-go sends `localhost`.
fn dial_authority(server_version: (u32, u32), socket: &Path, kind: Socket) -> String {
    if kind == Socket::Dra && server_version >= (1, 34) {
        return "localhost".into();
    }
    let path = socket.to_string_lossy();
    if server_version >= (1, 29) {
        fake_dra_proto::authority::grpc_go_encoded_authority(&path)
    } else {
        path.into_owned()
    }
}

/// Connects to a plugin socket as the kubelet of `server_version` does.
async fn dial(
    server_version: (u32, u32),
    socket: &Path,
    kind: Socket,
) -> Result<tonic::transport::Channel, String> {
    let authority = dial_authority(server_version, socket, kind);
    fake_dra_proto::connect_unix_with_authority(socket, authority)
        .await
        .map_err(|e| format!("dialling {}: {e}", socket.display()))
}

/// `GetInfo`, validation, `NotifyRegistrationStatus`; returns the driver, its DRA socket
/// and the API chosen for it.
async fn register(
    socket: &Path,
    server_version: (u32, u32),
) -> Result<(String, PathBuf, PluginApi), String> {
    let channel = dial(server_version, socket, Socket::Registration).await?;
    let mut client = reg::registration_client::RegistrationClient::new(channel);
    let info = tokio::time::timeout(GET_INFO_TIMEOUT, client.get_info(reg::InfoRequest {}))
        .await
        .map_err(|_| "GetInfo timed out".to_string())?
        .map_err(|e| format!("GetInfo: {e}"))?
        .into_inner();
    let verdict = validate(&info, server_version);
    let status = reg::RegistrationStatus {
        plugin_registered: verdict.is_ok(),
        error: verdict.clone().err().unwrap_or_default(),
    };
    tokio::time::timeout(NOTIFY_TIMEOUT, client.notify_registration_status(status))
        .await
        .map_err(|_| "NotifyRegistrationStatus timed out".to_string())?
        .map_err(|e| format!("NotifyRegistrationStatus: {e}"))?;
    let api = verdict?;
    Ok((info.name, PathBuf::from(info.endpoint), api))
}

/// What the kubelet accepts from a DRA plugin: 1.28–1.30 a semantic version, 1.32+ a
/// structured service it knows.
fn validate(info: &reg::PluginInfo, server_version: (u32, u32)) -> Result<PluginApi, String> {
    if info.r#type != DRA_PLUGIN_TYPE {
        return Err(format!(
            "plugin type {:?} is not {DRA_PLUGIN_TYPE}",
            info.r#type
        ));
    }
    if info.name.is_empty() {
        return Err("plugin name is empty".into());
    }
    if info.endpoint.is_empty() {
        return Err("plugin endpoint is empty".into());
    }
    if crate::apiserver::is_structured(server_version) {
        return choose_service(server_version, &info.supported_versions);
    }
    if !info.supported_versions.iter().any(|v| parses_as_semver(v)) {
        return Err(format!(
            "none of the versions {:?} is a semantic version this kubelet supports",
            info.supported_versions
        ));
    }
    Ok(PluginApi::Classic)
}

/// `utilversion.ParseGeneric`-like: an optional `v`, then 1–3 dot-separated numbers, major 1.
fn parses_as_semver(v: &str) -> bool {
    let v = v.strip_prefix('v').unwrap_or(v);
    let parts: Vec<&str> = v.split('.').collect();
    (1..=3).contains(&parts.len())
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        && parts[0] == "1"
}

// ---------------------------------------------------------------------------------------
// Pod dispatch

/// Hands every pod of this node to its worker; a pod that left the API ends its worker.
async fn sync_pods(ctx: &Arc<NodeContext>) -> Result<(), kube::Error> {
    if *ctx.stopping.borrow() {
        return Ok(());
    }
    let pods = Api::<ClassicPod>::all(ctx.client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let mine: HashMap<String, ClassicPod> = pods
        .into_iter()
        .filter(|p| p.node_name() == Some(ctx.node.as_str()))
        .filter_map(|p| Some((p.metadata.uid.clone()?, p)))
        .collect();
    let mut workers = ctx.workers.lock().await;
    workers.retain(|uid, tx| {
        if tx.is_closed() {
            return false;
        }
        if !mine.contains_key(uid) {
            tx.send_replace(None);
        }
        true
    });
    for (uid, pod) in mine {
        match workers.get(&uid) {
            Some(tx) => {
                tx.send_replace(Some(pod));
            }
            None => {
                let (tx, rx) = watch::channel(Some(pod));
                tokio::spawn(PodWorker::new(ctx.clone(), uid.clone()).run(rx));
                workers.insert(uid, tx);
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Pod workers

struct ContainerSlot {
    name: String,
    spec: ContainerSpec,
    running: Option<RunningContainer>,
    restarts: u32,
    /// Exit code of the last run, once it ended.
    last_exit: Option<i32>,
    next_start: tokio::time::Instant,
    started_at: String,
}

struct PodWorker {
    ctx: Arc<NodeContext>,
    uid: String,
    containers: Vec<ContainerSlot>,
    /// Claims this pod holds in the claim-info cache.
    claims: Vec<String>,
    /// The last status written, to write only changes.
    reported: Option<Value>,
    /// The last failure reported as an Event, to report each once.
    last_failure: Option<String>,
}

impl PodWorker {
    fn new(ctx: Arc<NodeContext>, uid: String) -> Self {
        Self {
            ctx,
            uid,
            containers: Vec::new(),
            claims: Vec::new(),
            reported: None,
            last_failure: None,
        }
    }

    async fn run(mut self, mut pod_rx: watch::Receiver<Option<ClassicPod>>) {
        let mut stopping = self.ctx.stopping.subscribe();
        loop {
            if *stopping.borrow() {
                self.stop_containers().await;
                return;
            }
            let pod = pod_rx.borrow_and_update().clone();
            match pod {
                None => {
                    // Gone from the API (force deletion or garbage collection).
                    self.stop_containers().await;
                    self.unprepare().await;
                    return;
                }
                Some(pod) if pod.metadata.deletion_timestamp.is_some() => {
                    if self.terminate(&pod).await {
                        return;
                    }
                }
                Some(pod) if pod.is_done() => {
                    self.stop_containers().await;
                    self.unprepare().await;
                }
                Some(pod) => self.sync(&pod).await,
            }
            tokio::select! {
                changed = pod_rx.changed() => if changed.is_err() { self.stop_containers().await; return },
                _ = stopping.changed() => {}
                () = tokio::time::sleep(POD_TICK) => {}
            }
        }
    }

    /// Graceful deletion: containers stopped, claims unprepared, then the pod removed with
    /// grace 0 (uid precondition, so a new pod of the same name is never hit).
    async fn terminate(&mut self, pod: &ClassicPod) -> bool {
        if !self.containers.is_empty() {
            let note = format!("Stopping {} container(s)", self.containers.len());
            self.ctx
                .events
                .normal(object_ref(pod), "Killing", "Kill", note)
                .await;
        }
        self.stop_containers().await;
        if !self.unprepare().await {
            return false;
        }
        let (Some(namespace), Some(name)) = (
            pod.metadata.namespace.as_deref(),
            pod.metadata.name.as_deref(),
        ) else {
            return true;
        };
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(self.uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match Api::<ClassicPod>::namespaced(self.ctx.client.clone(), namespace)
            .delete(name, &params)
            .await
        {
            Ok(_) => true,
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => true,
            Err(error) => {
                tracing::debug!(pod = name, %error, "finishing the pod's deletion failed; retrying");
                false
            }
        }
    }

    async fn sync(&mut self, pod: &ClassicPod) {
        if self.containers.is_empty() {
            match self.prepare_and_create(pod).await {
                Ok(()) => self.last_failure = None,
                Err(failure) => {
                    if self.last_failure.as_ref() != Some(&failure.message) {
                        self.ctx
                            .events
                            .warn(
                                object_ref(pod),
                                failure.reason,
                                "StartPod",
                                failure.message.clone(),
                            )
                            .await;
                        self.last_failure = Some(failure.message.clone());
                    }
                    self.report(pod, Some(&failure)).await;
                    return;
                }
            }
        }
        let policy = restart_policy(pod);
        let now = tokio::time::Instant::now();
        for slot in &mut self.containers {
            if let Some(running) = slot.running.as_mut()
                && let Some(code) = running.try_exit_code()
            {
                slot.running = None;
                slot.last_exit = Some(code);
                let backoff =
                    Duration::from_secs(1 << slot.restarts.min(4)).min(MAX_RESTART_BACKOFF);
                slot.next_start = now + backoff;
                tracing::info!(node = %self.ctx.node, pod = %slot.spec.pod, container = %slot.name, code, "container exited");
            }
            let restart = match (slot.last_exit, policy) {
                (None, _) => slot.running.is_none(),
                (Some(_), "Always") => true,
                (Some(code), "OnFailure") => code != 0,
                (Some(_), _) => false,
            };
            if slot.running.is_none() && restart && now >= slot.next_start {
                if slot.last_exit.is_some() {
                    slot.restarts += 1;
                }
                match self
                    .ctx
                    .runtime
                    .start(slot.spec.clone(), self.ctx.logs.clone())
                    .await
                {
                    Ok(running) => {
                        slot.running = Some(running);
                        slot.last_exit = None;
                        slot.started_at = crate::apiserver::now_rfc3339();
                        let note = format!("Started container {}", slot.name);
                        self.ctx
                            .events
                            .normal(object_ref(pod), "Started", "Start", note)
                            .await;
                    }
                    Err(error) => {
                        tracing::warn!(pod = %slot.spec.pod, container = %slot.name, %error, "starting the container failed");
                        slot.last_exit = Some(128);
                        slot.next_start = now + MAX_RESTART_BACKOFF;
                    }
                }
            }
        }
        self.report(pod, None).await;
    }

    /// Prepares the pod's claims and builds its containers' specs.
    async fn prepare_and_create(&mut self, pod: &ClassicPod) -> Result<(), Failure> {
        if pod
            .spec
            .as_ref()
            .and_then(|s| s.init_containers.as_ref())
            .is_some_and(|c| !c.is_empty())
        {
            return Err(Failure::new(
                "InitContainersNotSupported",
                "the emulated kubelet does not run init containers".into(),
            ));
        }
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        // Pod claim name → CDI ids.
        let mut ids_by_pod_claim: HashMap<String, Vec<String>> = HashMap::new();
        for pod_claim in pod.resource_claims() {
            let claim_name = pod.claim_name(&pod_claim.name).ok_or_else(|| {
                Failure::prepare(format!(
                    "waiting for the ResourceClaim of pod claim {} to be created",
                    pod_claim.name
                ))
            })?;
            if let Some(api) = self.ctx.structured.clone() {
                let claim = api
                    .get::<StructuredClaim>(Some(&namespace), claim_name)
                    .await
                    .map_err(|e| {
                        Failure::prepare(format!("fetching ResourceClaim {claim_name}: {e}"))
                    })?
                    .ok_or_else(|| {
                        Failure::prepare(format!("ResourceClaim {claim_name} not found"))
                    })?;
                if !structured::reserved_for(&claim)
                    .iter()
                    .any(|r| r.uid == self.uid)
                {
                    return Err(Failure::prepare(format!(
                        "pod {namespace}/{pod_name} is not listed in the reservedFor of ResourceClaim {claim_name}"
                    )));
                }
                let ids = self.prepare_structured_claim(&claim).await?;
                ids_by_pod_claim.insert(pod_claim.name.clone(), ids);
                continue;
            }
            let claim = Api::<ResourceClaim>::namespaced(self.ctx.client.clone(), &namespace)
                .get_opt(claim_name)
                .await
                .map_err(|e| Failure::prepare(format!("fetching ResourceClaim {claim_name}: {e}")))?
                .ok_or_else(|| Failure::prepare(format!("ResourceClaim {claim_name} not found")))?;
            if !claim.is_reserved_for(&self.uid) {
                return Err(Failure::prepare(format!(
                    "pod {namespace}/{pod_name} is not listed in the reservedFor of ResourceClaim {claim_name}"
                )));
            }
            let ids = self.prepare_claim(&claim).await?;
            ids_by_pod_claim.insert(pod_claim.name.clone(), ids);
        }
        let mut containers = Vec::new();
        for container in pod.all_containers() {
            if let Some(claim) = container
                .resources
                .as_ref()
                .and_then(|r| r.claims.as_ref())
                .into_iter()
                .flatten()
                .find(|c| c.extra.get("request").is_some_and(|r| !r.is_null()))
            {
                return Err(Failure::new(
                    "CreateContainerConfigError",
                    format!(
                        "container {} uses claim {:?} for one request only; the emulated kubelet gives containers whole claims and does not implement resources.claims[].request",
                        container.name, claim.name
                    ),
                ));
            }
            let mut cdi_devices: Vec<String> = Vec::new();
            for claim in container.claim_names() {
                let ids = ids_by_pod_claim.get(claim).ok_or_else(|| {
                    Failure::new(
                        "CreateContainerConfigError",
                        format!(
                            "container {} uses claim {claim:?}, which the pod does not declare",
                            container.name
                        ),
                    )
                })?;
                for id in ids {
                    if !cdi_devices.contains(id) {
                        cdi_devices.push(id.clone());
                    }
                }
            }
            let spec = ContainerSpec {
                namespace: namespace.clone(),
                pod: pod_name.clone(),
                container: container.name.clone(),
                id: format!("{}-{}", self.uid, container.name),
                command: command_of(container)
                    .map_err(|m| Failure::new("CreateContainerConfigError", m))?,
                env: env_of(container)
                    .map_err(|m| Failure::new("CreateContainerConfigError", m))?,
                cdi_devices,
                cdi_root: self.ctx.dirs.cdi_root.clone(),
            };
            containers.push(ContainerSlot {
                name: container.name.clone(),
                spec,
                running: None,
                restarts: 0,
                last_exit: None,
                next_start: tokio::time::Instant::now(),
                started_at: String::new(),
            });
        }
        self.containers = containers;
        Ok(())
    }

    /// `NodePrepareResources` for one claim unless another pod of the node prepared it.
    async fn prepare_claim(&mut self, claim: &ResourceClaim) -> Result<Vec<String>, Failure> {
        let uid = claim.metadata.uid.clone().unwrap_or_default();
        let namespace = claim.metadata.namespace.clone().unwrap_or_default();
        let name = claim.metadata.name.clone().unwrap_or_default();
        let mut cache = self.ctx.claims.lock().await;
        if let Some(prepared) = cache.get_mut(&uid) {
            prepared.pods.insert(self.uid.clone());
            if !self.claims.contains(&uid) {
                self.claims.push(uid.clone());
            }
            return Ok(prepared.cdi_ids.clone());
        }
        let handles: Vec<(String, String)> = claim
            .allocation()
            .and_then(|a| a.resource_handles.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|h| {
                (
                    h.driver_name.unwrap_or_else(|| {
                        claim
                            .status
                            .as_ref()
                            .and_then(|s| s.driver_name.clone())
                            .unwrap_or_default()
                    }),
                    h.data.unwrap_or_default(),
                )
            })
            .collect();
        if handles.is_empty() {
            return Err(Failure::prepare(format!(
                "ResourceClaim {name} is not allocated"
            )));
        }
        let mut cdi_ids = Vec::new();
        for (driver, data) in &handles {
            let socket = self
                .ctx
                .plugins
                .read()
                .await
                .get(driver)
                .map(|(socket, _)| socket.clone())
                .ok_or_else(|| {
                    Failure::prepare(format!(
                        "prepare dynamic resources: DRA driver {driver} is not registered"
                    ))
                })?;
            let ids = call_classic(
                self.ctx.server_version,
                &socket,
                Call::Prepare,
                &namespace,
                &uid,
                &name,
                data,
            )
            .await
            .map_err(|m| Failure::prepare(format!("NodePrepareResources for claim {name}: {m}")))?;
            for id in &ids {
                if !is_qualified_cdi_id(id) {
                    return Err(Failure::prepare(format!(
                        "driver {driver} returned CDI device id {id:?}, which is not fully qualified (vendor/class=name)"
                    )));
                }
            }
            cdi_ids.extend(ids);
        }
        cache.insert(
            uid.clone(),
            PreparedClaim {
                namespace,
                name,
                handles,
                structured: false,
                cdi_ids: cdi_ids.clone(),
                pods: BTreeSet::from([self.uid.clone()]),
            },
        );
        self.claims.push(uid);
        Ok(cdi_ids)
    }

    /// `NodePrepareResources` of a structured claim on every driver of its allocation,
    /// unless another pod of the node prepared it.
    async fn prepare_structured_claim(
        &mut self,
        claim: &StructuredClaim,
    ) -> Result<Vec<String>, Failure> {
        let uid = claim.metadata.uid.clone().unwrap_or_default();
        let namespace = claim.metadata.namespace.clone().unwrap_or_default();
        let name = claim.metadata.name.clone().unwrap_or_default();
        let mut cache = self.ctx.claims.lock().await;
        if let Some(prepared) = cache.get_mut(&uid) {
            prepared.pods.insert(self.uid.clone());
            if !self.claims.contains(&uid) {
                self.claims.push(uid.clone());
            }
            return Ok(prepared.cdi_ids.clone());
        }
        let Some(allocation) = claim.status.as_ref().and_then(|s| s.allocation.as_ref()) else {
            return Err(Failure::prepare(format!(
                "ResourceClaim {name} is not allocated"
            )));
        };
        let mut drivers: Vec<String> = Vec::new();
        for result in allocation
            .devices
            .as_ref()
            .and_then(|d| d.results.as_ref())
            .into_iter()
            .flatten()
        {
            if !drivers.contains(&result.driver) {
                drivers.push(result.driver.clone());
            }
        }
        let mut cdi_ids: Vec<String> = Vec::new();
        for driver in &drivers {
            let (socket, api) = self
                .ctx
                .plugins
                .read()
                .await
                .get(driver)
                .cloned()
                .ok_or_else(|| {
                    Failure::prepare(format!(
                        "prepare dynamic resources: DRA driver {driver} is not registered"
                    ))
                })?;
            let ids = call_structured(
                self.ctx.server_version,
                &socket,
                api,
                Call::Prepare,
                &namespace,
                &uid,
                &name,
            )
            .await
            .map_err(|m| {
                Failure::prepare(format!(
                    "NodePrepareResources failed for ResourceClaim {namespace}/{name}: {m}"
                ))
            })?;
            for id in ids {
                if !is_qualified_cdi_id(&id) {
                    return Err(Failure::prepare(format!(
                        "driver {driver} returned CDI device id {id:?}, which is not fully qualified (vendor/class=name)"
                    )));
                }
                if !cdi_ids.contains(&id) {
                    cdi_ids.push(id);
                }
            }
        }
        cache.insert(
            uid.clone(),
            PreparedClaim {
                namespace,
                name,
                handles: drivers.into_iter().map(|d| (d, String::new())).collect(),
                structured: true,
                cdi_ids: cdi_ids.clone(),
                pods: BTreeSet::from([self.uid.clone()]),
            },
        );
        self.claims.push(uid);
        Ok(cdi_ids)
    }

    /// Releases this pod's claims; the last pod using a claim unprepares it. Returns
    /// whether everything was released (a failed call is retried on the next tick).
    async fn unprepare(&mut self) -> bool {
        let mut cache = self.ctx.claims.lock().await;
        let mut all_done = true;
        let mut remaining = Vec::new();
        for uid in std::mem::take(&mut self.claims) {
            let Some(prepared) = cache.get_mut(&uid) else {
                continue;
            };
            prepared.pods.remove(&self.uid);
            if !prepared.pods.is_empty() {
                continue;
            }
            let mut ok = true;
            for (driver, data) in &prepared.handles {
                let plugin = self.ctx.plugins.read().await.get(driver).cloned();
                let result = match plugin {
                    Some((socket, api)) if prepared.structured => call_structured(
                        self.ctx.server_version,
                        &socket,
                        api,
                        Call::Unprepare,
                        &prepared.namespace,
                        &uid,
                        &prepared.name,
                    )
                    .await
                    .map(|_| ()),
                    Some((socket, _)) => call_classic(
                        self.ctx.server_version,
                        &socket,
                        Call::Unprepare,
                        &prepared.namespace,
                        &uid,
                        &prepared.name,
                        data,
                    )
                    .await
                    .map(|_| ()),
                    None => Err(format!("DRA driver {driver} is not registered")),
                };
                if let Err(error) = result {
                    tracing::warn!(node = %self.ctx.node, claim = %prepared.name, %error, "NodeUnprepareResources failed; retrying");
                    ok = false;
                }
            }
            if ok {
                cache.remove(&uid);
            } else {
                prepared.pods.insert(self.uid.clone());
                remaining.push(uid);
                all_done = false;
            }
        }
        self.claims = remaining;
        all_done
    }

    async fn stop_containers(&mut self) {
        for slot in &mut self.containers {
            if let Some(running) = slot.running.take() {
                running.stop().await;
                slot.last_exit = Some(137);
            }
        }
        self.containers.clear();
    }

    /// Writes the pod's status when it changed (merge patch on `pods/status`, which only
    /// touches the fields the kubelet owns).
    async fn report(&mut self, pod: &ClassicPod, failure: Option<&Failure>) {
        let status = self.status(pod, failure);
        if self.reported.as_ref() == Some(&status) {
            return;
        }
        let (Some(namespace), Some(name)) = (
            pod.metadata.namespace.as_deref(),
            pod.metadata.name.as_deref(),
        ) else {
            return;
        };
        let api = Api::<ClassicPod>::namespaced(self.ctx.client.clone(), namespace);
        match api
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await
        {
            Ok(_) => self.reported = Some(status),
            Err(error) => {
                tracing::debug!(pod = name, %error, "writing the pod status failed; retrying")
            }
        }
    }

    fn status(&self, pod: &ClassicPod, failure: Option<&Failure>) -> Value {
        let policy = restart_policy(pod);
        let statuses: Vec<Value> = self
            .containers
            .iter()
            .map(|slot| {
                let state = match (&slot.running, slot.last_exit) {
                    (Some(_), _) => json!({"running": {"startedAt": slot.started_at}}),
                    (None, Some(code)) => json!({"terminated": {"exitCode": code, "reason": if code == 0 { "Completed" } else { "Error" }}}),
                    (None, None) => json!({"waiting": {"reason": "ContainerCreating"}}),
                };
                json!({
                    "name": slot.name,
                    "ready": slot.running.is_some(),
                    "started": slot.running.is_some(),
                    "restartCount": slot.restarts,
                    "image": image_of(pod, &slot.name),
                    "imageID": "",
                    "containerID": format!("{}://{}", self.ctx.runtime.name(), slot.spec.id),
                    "state": state,
                })
            })
            .collect();
        let all_running =
            !self.containers.is_empty() && self.containers.iter().all(|c| c.running.is_some());
        let all_exited = !self.containers.is_empty()
            && self
                .containers
                .iter()
                .all(|c| c.running.is_none() && c.last_exit.is_some());
        let will_restart = |c: &ContainerSlot| match (c.last_exit, policy) {
            (Some(_), "Always") => true,
            (Some(code), "OnFailure") => code != 0,
            _ => false,
        };
        let phase = if all_exited && !self.containers.iter().any(will_restart) {
            if self.containers.iter().all(|c| c.last_exit == Some(0)) {
                "Succeeded"
            } else {
                "Failed"
            }
        } else if self
            .containers
            .iter()
            .any(|c| c.running.is_some() || c.last_exit.is_some())
        {
            "Running"
        } else {
            "Pending"
        };
        let condition = |type_: &str, ok: bool| json!({"type": type_, "status": if ok { "True" } else { "False" }});
        let mut status = json!({
            "phase": phase,
            "hostIP": "127.0.0.1",
            "conditions": [
                condition("PodScheduled", true),
                condition("Initialized", true),
                condition("ContainersReady", all_running),
                condition("Ready", all_running),
            ],
            "containerStatuses": statuses,
        });
        if let Some(failure) = failure {
            status["reason"] = Value::String(failure.reason.into());
            status["message"] = Value::String(failure.message.clone());
        } else {
            status["reason"] = Value::Null;
            status["message"] = Value::Null;
        }
        status
    }
}

/// Why a pod's containers could not be created yet (an Event reason and message).
#[derive(Debug)]
struct Failure {
    reason: &'static str,
    message: String,
}

impl Failure {
    fn new(reason: &'static str, message: String) -> Self {
        Self { reason, message }
    }

    /// The reason the kubelet's DRA manager reports.
    fn prepare(message: String) -> Self {
        Self::new("FailedPrepareDynamicResources", message)
    }
}

fn restart_policy(pod: &ClassicPod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.extra.get("restartPolicy"))
        .and_then(Value::as_str)
        .unwrap_or("Always")
}

fn image_of(pod: &ClassicPod, container: &str) -> String {
    pod.all_containers()
        .find(|c| c.name == container)
        .and_then(|c| c.extra.get("image"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn strings(value: Option<&Value>, field: &str) -> Result<Vec<String>, String> {
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("{field}: every entry must be a string"))
            })
            .collect(),
        Some(_) => Err(format!("{field} must be a list of strings")),
    }
}

/// `command` + `args`. Images are never pulled, so there is no image entrypoint to fall
/// back on: a container must name its command.
fn command_of(container: &ClassicContainer) -> Result<Vec<String>, String> {
    let mut command = strings(container.extra.get("command"), "command")?;
    command.extend(strings(container.extra.get("args"), "args")?);
    if command.is_empty() {
        return Err(format!(
            "container {}: the emulated kubelet runs no image entrypoints; set command",
            container.name
        ));
    }
    Ok(command)
}

/// Literal `env` values; `valueFrom` and `envFrom` are refused rather than guessed.
fn env_of(container: &ClassicContainer) -> Result<Vec<(String, String)>, String> {
    if container.extra.get("envFrom").is_some_and(|v| !v.is_null()) {
        return Err(format!(
            "container {}: envFrom is not supported by the emulated kubelet",
            container.name
        ));
    }
    let Some(env) = container.extra.get("env").and_then(Value::as_array) else {
        return Ok(Vec::new());
    };
    env.iter()
        .map(|e| {
            let name = e
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("container {}: env entry without a name", container.name))?;
            if e.get("valueFrom").is_some_and(|v| !v.is_null()) {
                return Err(format!(
                    "container {}: env {name}: valueFrom is not supported by the emulated kubelet",
                    container.name
                ));
            }
            Ok((
                name.to_string(),
                e.get("value")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
            ))
        })
        .collect()
}

/// `vendor/class=name`, as `cdi.GenerateAnnotations` requires.
fn is_qualified_cdi_id(id: &str) -> bool {
    let Some((kind, name)) = id.split_once('=') else {
        return false;
    };
    let Some((vendor, class)) = kind.split_once('/') else {
        return false;
    };
    !vendor.is_empty() && !class.is_empty() && !name.is_empty() && !class.contains('.')
}

// ---------------------------------------------------------------------------------------
// DRA gRPC calls, as kubelet 1.28–1.30 make them

/// Which structured DRA call to make.
#[derive(Debug, Clone, Copy)]
enum Call {
    Prepare,
    Unprepare,
}

/// One structured call on the plugin's chosen service; returns the CDI ids of every
/// device prepared (none for unprepare). Per-claim errors come back as `Err`.
macro_rules! structured_call {
    ($module:ident, $channel:expr, $call:expr, $namespace:expr, $uid:expr, $name:expr) => {{
        use fake_dra_proto::$module as api;
        let mut client = api::dra_plugin_client::DraPluginClient::new($channel);
        let claims = vec![api::Claim {
            namespace: $namespace.into(),
            uid: $uid.into(),
            name: $name.into(),
        }];
        match $call {
            Call::Prepare => {
                let call =
                    client.node_prepare_resources(api::NodePrepareResourcesRequest { claims });
                let mut response = timed(call)
                    .await?
                    .map_err(|s| s.message().to_string())?
                    .into_map();
                let result = response
                    .remove($uid)
                    .ok_or_else(|| "the response has no entry for the claim".to_string())?;
                if !result.error.is_empty() {
                    return Err(result.error);
                }
                Ok(result
                    .devices
                    .into_iter()
                    .flat_map(|d| d.cdi_device_ids)
                    .collect())
            }
            Call::Unprepare => {
                let call =
                    client.node_unprepare_resources(api::NodeUnprepareResourcesRequest { claims });
                let mut response = timed(call)
                    .await?
                    .map_err(|s| s.message().to_string())?
                    .into_map();
                let result = response
                    .remove($uid)
                    .ok_or_else(|| "the response has no entry for the claim".to_string())?;
                if result.error.is_empty() {
                    Ok(Vec::new())
                } else {
                    Err(result.error)
                }
            }
        }
    }};
}

async fn call_structured(
    server_version: (u32, u32),
    socket: &Path,
    api: PluginApi,
    call: Call,
    namespace: &str,
    uid: &str,
    name: &str,
) -> Result<Vec<String>, String> {
    let channel = dial(server_version, socket, Socket::Dra).await?;
    match api {
        PluginApi::V1 => structured_call!(dra_v1, channel, call, namespace, uid, name),
        PluginApi::V1Beta1 => structured_call!(dra_v1beta1, channel, call, namespace, uid, name),
        PluginApi::Classic => Err(format!(
            "the plugin registered for classic DRA only; a structured claim needs {} or {}",
            fake_dra_proto::SUPPORTED_V1,
            fake_dra_proto::SUPPORTED_V1BETA1
        )),
    }
}

/// A classic call as kubelets 1.28–1.30 make it: `v1alpha3` (batched, here one claim),
/// and the single-claim `v1alpha2` service when that is `Unimplemented`. Returns the CDI
/// ids prepared (none for unprepare); a per-claim error comes back as `Err`.
async fn call_classic(
    server_version: (u32, u32),
    socket: &Path,
    call: Call,
    namespace: &str,
    uid: &str,
    name: &str,
    handle: &str,
) -> Result<Vec<String>, String> {
    let channel = dial(server_version, socket, Socket::Dra).await?;
    let claims = vec![v1alpha3::Claim {
        namespace: namespace.into(),
        uid: uid.into(),
        name: name.into(),
        resource_handle: handle.into(),
    }];
    let mut batched = v1alpha3::node_client::NodeClient::new(channel.clone());
    // (per-claim error, CDI ids) of the claim's entry in the response.
    let entry = match call {
        Call::Prepare => {
            timed(batched.node_prepare_resources(v1alpha3::NodePrepareResourcesRequest { claims }))
                .await?
                .map(|r| r.into_map().remove(uid).map(|c| (c.error, c.cdi_devices)))
        }
        Call::Unprepare => timed(
            batched.node_unprepare_resources(v1alpha3::NodeUnprepareResourcesRequest { claims }),
        )
        .await?
        .map(|r| r.into_map().remove(uid).map(|c| (c.error, Vec::new()))),
    };
    match entry {
        Ok(Some((error, ids))) if error.is_empty() => Ok(ids),
        Ok(Some((error, _))) => Err(error),
        Ok(None) => Err("the response has no entry for the claim".into()),
        Err(status) if status.code() == tonic::Code::Unimplemented => {
            let mut single = v1alpha2::node_client::NodeClient::new(channel);
            let (namespace, claim_uid, claim_name, resource_handle) =
                (namespace.into(), uid.into(), name.into(), handle.into());
            match call {
                Call::Prepare => {
                    let request = v1alpha2::NodePrepareResourceRequest {
                        namespace,
                        claim_uid,
                        claim_name,
                        resource_handle,
                    };
                    Ok(timed(single.node_prepare_resource(request))
                        .await?
                        .map_err(|s| s.message().to_string())?
                        .cdi_devices)
                }
                Call::Unprepare => {
                    let request = v1alpha2::NodeUnprepareResourceRequest {
                        namespace,
                        claim_uid,
                        claim_name,
                        resource_handle,
                    };
                    timed(single.node_unprepare_resource(request))
                        .await?
                        .map_err(|s| s.message().to_string())?;
                    Ok(Vec::new())
                }
            }
        }
        Err(status) => Err(status.message().to_string()),
    }
}

/// Awaits a DRA call within the kubelet's timeout.
async fn timed<T>(
    call: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<Result<T, tonic::Status>, String> {
    tokio::time::timeout(DRA_CALL_TIMEOUT, call)
        .await
        .map(|r| r.map(tonic::Response::into_inner))
        .map_err(|_| "timed out".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_as_kubelet_1_30_reads_them() {
        assert!(parses_as_semver("1.0.0"));
        assert!(parses_as_semver("v1.0"));
        assert!(!parses_as_semver("v1.DRAPlugin"));
        assert!(!parses_as_semver("2.0.0"));
        assert!(!parses_as_semver(""));
    }

    #[test]
    fn chooses_services_as_kubelet_1_34() {
        let both = vec!["v1.DRAPlugin".to_string(), "v1beta1.DRAPlugin".to_string()];
        assert_eq!(choose_service((1, 34), &both), Ok(PluginApi::V1));
        assert_eq!(choose_service((1, 33), &both), Ok(PluginApi::V1Beta1));
        assert_eq!(choose_service((1, 32), &both), Ok(PluginApi::V1Beta1));
        let beta = vec!["v1beta1.DRAPlugin".to_string()];
        assert_eq!(choose_service((1, 34), &beta), Ok(PluginApi::V1Beta1));
        let v1 = vec!["v1.DRAPlugin".to_string()];
        assert!(choose_service((1, 33), &v1).is_err());
        assert!(choose_service((1, 34), &["1.0.0".to_string()]).is_err());
        assert!(choose_service((1, 34), &[]).is_err());
    }

    #[test]
    fn cdi_ids_must_be_qualified() {
        assert!(is_qualified_cdi_id(
            "k8s.fake.resource.3-shake.com/fake=common"
        ));
        assert!(!is_qualified_cdi_id("common"));
        assert!(!is_qualified_cdi_id("k8s.x/fake="));
        assert!(!is_qualified_cdi_id("k8s.x/a.b=c"));
    }
}
