//! fake-dra with no cluster: the emulated control plane, the driver installed from
//! `deploy/` the way `kubectl apply -k deploy/classic` would, and the **real** controller
//! and kubelet-plugin binaries as child processes, configured from the rendered
//! Deployment and DaemonSet (their env, with the downward API and hostPath directories
//! mapped to the emulated node), so the configuration that is tested is the one deployed.
//!
//! The driver's own Deployment and DaemonSet are not handed to the emulated kubelets
//! (there is no image to run): [`Sim`] plays their part and runs the binaries directly.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use serde_json::Value;
use tokio::process::Child;

use crate::apiserver::{ApiServer, ApiServerOptions, StartError};
use crate::binaries;
use crate::cluster::lifeline;
use crate::cluster::{
    ClusterConfig, ClusterError, ContainerRuntime, EmulatedCluster, LogSink, NodeDirs,
};
use crate::manifests::{self, Manifest, ManifestError};

/// The repository's `deploy/` directory, where the sim finds the driver's manifests.
pub const DEPLOY_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy");
/// The driver's namespace in `deploy/base`.
const DRIVER_NAMESPACE: &str = "fake-dra";
/// How long the sim waits for the plugins to register (a safety net, not a pace).
const REGISTRATION_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a driver process may take to exit after SIGTERM before it is killed.
const TERMINATION_GRACE: Duration = Duration::from_secs(10);
/// Default work directories are `<temp dir>/fake-dra-sim-XXXXXX`.
const WORK_DIR_PREFIX: &str = "fake-dra-sim-";
/// The file in a work directory naming the sim that uses it: `<pid> <start time>`, the
/// start time (`/proc/<pid>/stat`) telling that sim from a later process with its pid.
pub const OWNER_FILE: &str = "fake-dra-sim.pid";

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(transparent)]
    Start(#[from] StartError),
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error(transparent)]
    Binary(#[from] binaries::NotFound),
    #[error("{origin}: {kind} {name}: {message}")]
    Apply {
        origin: String,
        kind: String,
        name: String,
        message: String,
    },
    #[error("deploy/{overlay}: {message}")]
    Deploy { overlay: String, message: String },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the kubelet plugin on {node} did not register within {timeout:?}; its log: {log}")]
    NotRegistered {
        node: String,
        timeout: Duration,
        log: PathBuf,
    },
}

/// Which container runtime the emulated nodes use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RuntimeChoice {
    /// podman when usable, else local processes (loudly); podman required when
    /// `FAKE_DRA_REQUIRE_PODMAN=1`.
    #[default]
    Auto,
    Podman,
    Process,
}

#[derive(Debug, Clone)]
pub struct SimConfig {
    pub nodes: Vec<String>,
    pub runtime: RuntimeChoice,
    /// The kustomize overlay of `deploy/` to install (`classic`).
    pub overlay: String,
    pub deploy_dir: PathBuf,
    /// Where the binaries are; default: next to the running executable.
    pub bin_dir: Option<PathBuf>,
    /// Where node directories and driver logs go; default: a temporary directory removed
    /// on shutdown.
    pub work_dir: Option<PathBuf>,
    /// The Kubernetes version the emulator reports and serves the APIs of; default from
    /// the overlay: classic 1.30, structured 1.34.
    pub server_version: Option<(u32, u32)>,
    /// Extra env for every kubelet plugin (e.g. `FAKE_DRA_NUM_DEVICES`), after the DaemonSet's.
    pub plugin_env: Vec<(String, String)>,
    /// Labels every Node carries besides `kubernetes.io/hostname`.
    pub node_labels: Vec<(String, String)>,
    /// How long after a DRA driver left a kubelet wipes its ResourceSlices.
    pub wiping_delay: std::time::Duration,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            nodes: vec!["kind-worker".into(), "kind-worker2".into()],
            runtime: RuntimeChoice::Auto,
            overlay: "classic".into(),
            deploy_dir: PathBuf::from(DEPLOY_DIR),
            bin_dir: None,
            work_dir: None,
            plugin_env: Vec::new(),
            node_labels: Vec::new(),
            server_version: None,
            wiping_delay: crate::cluster::kubelet::DEFAULT_WIPING_DELAY,
        }
    }
}

impl SimConfig {
    /// The newest Kubernetes version of each DRA generation (classic: 1.27–1.30).
    pub fn kubernetes_version(&self) -> (u32, u32) {
        self.server_version.unwrap_or(if self.overlay == "classic" {
            (1, 30)
        } else {
            (1, 34)
        })
    }
}

/// How to start one driver process: what the Deployment/DaemonSet container says, mapped
/// onto this machine.
#[derive(Debug, Clone)]
struct ProcessSpec {
    program: PathBuf,
    env: Vec<(String, String)>,
    log: PathBuf,
}

impl ProcessSpec {
    fn spawn(&self) -> Result<DriverProcess, SimError> {
        let io = |what: &str| {
            let what = format!("{what} {}", self.log.display());
            move |source| SimError::Io { what, source }
        };
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(io("opening"))?;
        let stderr = log.try_clone().map_err(io("opening"))?;
        let starting = |source| SimError::Io {
            what: format!("starting {}", self.program.display()),
            source,
        };
        let mut command = lifeline::command(&self.program, &[], &lifeline::Cleanup::default())
            .map_err(starting)?;
        command
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        if let Some(filter) = std::env::var_os("RUST_LOG") {
            command.env("RUST_LOG", filter);
        }
        // A group of its own, as a pod's processes have: killing the group kills the
        // process and its supervisor, and a Ctrl-C at the terminal reaches only the sim,
        // which shuts the drivers down in order.
        command.stdout(log).stderr(stderr).process_group(0);
        let child = command.spawn().map_err(starting)?;
        Ok(DriverProcess { child })
    }
}

/// A running driver process (under its supervisor when the lifeline is installed), in a
/// process group of its own. Dropping it kills the group.
#[derive(Debug)]
struct DriverProcess {
    child: Child,
}

impl DriverProcess {
    /// `kill -9` of the process (and its supervisor), waiting until it is gone.
    async fn kill(mut self) {
        if let Some(pgid) = self.child.id()
            && let Err(e) = lifeline::signal_group("KILL", pgid)
        {
            tracing::warn!("killing a driver process: {e}");
            let _ = self.child.start_kill();
        }
        let _ = self.child.wait().await;
    }

    /// SIGTERM, then SIGKILL if it has not exited within [`TERMINATION_GRACE`].
    async fn terminate(mut self) {
        if let Some(pid) = self.child.id()
            && let Err(e) = lifeline::send_signal("TERM", &[pid])
        {
            tracing::warn!("stopping a driver process: {e}");
        }
        if tokio::time::timeout(TERMINATION_GRACE, self.child.wait())
            .await
            .is_err()
        {
            self.kill().await;
        }
    }
}

impl Drop for DriverProcess {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None))
            && let Some(pgid) = self.child.id()
            && let Err(e) = lifeline::signal_group("KILL", pgid)
        {
            tracing::warn!("killing a driver process: {e}");
        }
    }
}

/// Writes [`OWNER_FILE`] into `work_dir`: this process and when it started.
fn record_owner(work_dir: &Path) -> Result<(), SimError> {
    let pid = std::process::id();
    let start_time = lifeline::stat_of(pid).map_or(0, |s| s.start_time);
    let path = work_dir.join(OWNER_FILE);
    std::fs::write(&path, format!("{pid} {start_time}\n")).map_err(|source| SimError::Io {
        what: format!("writing {}", path.display()),
        source,
    })
}

/// Removes the default work directories (`<temp>/fake-dra-sim-*`) of sims that are no
/// longer running — killed before they could clean up — and says so in the log. A
/// directory without an owner file is left alone: it may be a sim's that is just starting,
/// or one from before owner files.
pub fn remove_stale_work_dirs(temp: &Path) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Ok(entries) = std::fs::read_dir(temp) else {
        return removed;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let ours = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(WORK_DIR_PREFIX));
        if !ours || !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let Ok(owner) = std::fs::read_to_string(path.join(OWNER_FILE)) else {
            continue;
        };
        let mut fields = owner.split_whitespace().map(str::parse::<u64>);
        let (Some(Ok(pid)), Some(Ok(start_time))) = (fields.next(), fields.next()) else {
            tracing::warn!(dir = %path.display(), "unreadable {OWNER_FILE}; leaving the directory alone");
            continue;
        };
        let Ok(pid) = u32::try_from(pid) else {
            continue;
        };
        if lifeline::is_alive(pid, start_time) {
            continue;
        }
        match std::fs::remove_dir_all(&path) {
            Ok(()) => {
                tracing::info!(dir = %path.display(), pid, "removed the work directory of a fake-dra-sim that is no longer running");
                removed.push(path);
            }
            Err(e) => {
                tracing::warn!(dir = %path.display(), pid, "removing the work directory of a fake-dra-sim that is no longer running: {e}")
            }
        }
    }
    removed
}

/// A running no-cluster fake-dra.
#[derive(Debug)]
pub struct Sim {
    cluster: EmulatedCluster,
    /// `None` when the overlay has no controller (structured DRA).
    controller_spec: Option<ProcessSpec>,
    controller: Option<DriverProcess>,
    plugin_specs: BTreeMap<String, ProcessSpec>,
    plugins: BTreeMap<String, DriverProcess>,
    work_dir: PathBuf,
    // Removed last.
    _temp: Option<tempfile::TempDir>,
}

impl Sim {
    pub async fn start(config: SimConfig) -> Result<Self, SimError> {
        let controller_bin = binaries::locate(binaries::CONTROLLER, config.bin_dir.as_deref())?;
        let plugin_bin = binaries::locate(binaries::KUBELET_PLUGIN, config.bin_dir.as_deref())?;
        let overlay_dir = config.deploy_dir.join(&config.overlay);
        if !overlay_dir.join("kustomization.yaml").is_file() {
            return Err(SimError::Deploy {
                overlay: config.overlay.clone(),
                message: format!("no kustomization.yaml in {}", overlay_dir.display()),
            });
        }
        let deployed = manifests::rendered(&config.deploy_dir, &config.overlay)?;
        let (temp, work_dir) = match &config.work_dir {
            Some(dir) => (None, dir.clone()),
            None => {
                remove_stale_work_dirs(&std::env::temp_dir());
                let temp = tempfile::Builder::new()
                    .prefix(WORK_DIR_PREFIX)
                    .tempdir()
                    .map_err(|source| SimError::Io {
                        what: "creating the work dir".into(),
                        source,
                    })?;
                let path = temp.path().to_path_buf();
                (Some(temp), path)
            }
        };
        let logs_dir = work_dir.join("logs");
        std::fs::create_dir_all(&logs_dir).map_err(|source| SimError::Io {
            what: format!("creating {}", logs_dir.display()),
            source,
        })?;
        record_owner(&work_dir)?;
        let runtime = match config.runtime {
            RuntimeChoice::Auto => {
                ContainerRuntime::detect(&work_dir).map_err(ClusterError::from)?
            }
            RuntimeChoice::Podman => {
                ContainerRuntime::podman(&work_dir).map_err(ClusterError::from)?
            }
            RuntimeChoice::Process => ContainerRuntime::Process,
        };
        tracing::info!(runtime = runtime.name(), work_dir = %work_dir.display(), "starting the emulated cluster");

        // The driver's objects come from deploy/, CRDs included (not the emulator's own copy).
        let server = ApiServer::start_with(ApiServerOptions {
            server_version: config.kubernetes_version(),
            kubeconfig_dir: Some(work_dir.clone()),
            crds: Vec::new(),
        })
        .await?;
        let kubeconfig = server.kubeconfig().to_path_buf();
        let cluster_config = ClusterConfig {
            nodes: config.nodes.clone(),
            node_labels: config.node_labels.clone(),
            work_dir: work_dir.clone(),
            runtime,
            wiping_delay: config.wiping_delay,
        };
        let (installed, driver_workloads): (Vec<Manifest>, Vec<Manifest>) = deployed
            .into_iter()
            .partition(|m| !matches!(m.kind(), "Deployment" | "DaemonSet"));
        let cluster = EmulatedCluster::start(server, cluster_config.clone()).await?;
        apply_all(&cluster, &installed).await?;

        // Structured DRA has no controller: kube-scheduler allocates.
        let controller_container = if driver_workloads.iter().any(|m| m.kind() == "Deployment") {
            Some(driver_container(
                &driver_workloads,
                "Deployment",
                &config.overlay,
            )?)
        } else {
            None
        };
        let plugin_container = driver_container(&driver_workloads, "DaemonSet", &config.overlay)?;
        let controller_pod = PodIdentity {
            name: "fake-dra-controller-0".into(),
            node: config.nodes.first().cloned().unwrap_or_default(),
        };
        let controller_spec = match controller_container {
            Some(container) => {
                let mut env = container_env(container, &controller_pod, &|_| None)?;
                env.push(("KUBECONFIG".into(), kubeconfig.display().to_string()));
                Some(ProcessSpec {
                    program: controller_bin,
                    env,
                    log: logs_dir.join("controller.log"),
                })
            }
            None => None,
        };
        let mut plugin_specs = BTreeMap::new();
        for node in &config.nodes {
            let dirs = cluster_config.node_dirs(node);
            let pod = PodIdentity {
                name: format!("fake-dra-kubelet-plugin-{node}"),
                node: node.clone(),
            };
            let mut env = container_env(plugin_container, &pod, &|host_path| {
                node_dir_for(&dirs, host_path)
            })?;
            env.push(("KUBECONFIG".into(), kubeconfig.display().to_string()));
            env.extend(config.plugin_env.iter().cloned());
            plugin_specs.insert(
                node.clone(),
                ProcessSpec {
                    program: plugin_bin.clone(),
                    env,
                    log: logs_dir.join(format!("kubelet-plugin-{node}.log")),
                },
            );
        }
        let mut sim = Self {
            cluster,
            controller_spec,
            controller: None,
            plugin_specs,
            plugins: BTreeMap::new(),
            work_dir,
            _temp: temp,
        };
        if sim.controller_spec.is_some() {
            sim.start_controller()?;
        }
        for node in config.nodes.iter() {
            sim.start_plugin(node).await?;
        }
        Ok(sim)
    }

    pub fn cluster(&self) -> &EmulatedCluster {
        &self.cluster
    }

    pub fn client(&self) -> Result<kube::Client, SimError> {
        Ok(self.cluster.client()?)
    }

    pub fn logs(&self) -> &LogSink {
        self.cluster.logs()
    }

    pub fn work_dir(&self) -> &Path {
        &self.work_dir
    }

    pub fn node_dirs(&self, node: &str) -> NodeDirs {
        self.cluster.config().node_dirs(node)
    }

    /// Creates the objects (updates those that exist, as `kubectl apply` would). Every
    /// kind is resolved first, so an unknown kind stops the whole set before anything is
    /// created.
    pub async fn apply(&self, objects: &[Manifest]) -> Result<(), SimError> {
        apply_all(&self.cluster, objects).await
    }

    pub fn start_controller(&mut self) -> Result<(), SimError> {
        let Some(spec) = &self.controller_spec else {
            return Err(SimError::Deploy {
                overlay: String::new(),
                message: "this overlay has no controller".into(),
            });
        };
        self.controller = Some(spec.spawn()?);
        Ok(())
    }

    /// `kill -9` of the controller.
    pub async fn kill_controller(&mut self) {
        if let Some(process) = self.controller.take() {
            process.kill().await;
        }
    }

    /// Starts the node's plugin and waits until the node's kubelet registered it.
    pub async fn start_plugin(&mut self, node: &str) -> Result<(), SimError> {
        let Some(spec) = self.plugin_specs.get(node) else {
            return Err(SimError::Deploy {
                overlay: String::new(),
                message: format!("no node {node}"),
            });
        };
        // A restarted plugin re-creates its socket; wait for the registration of the new one.
        let previous = match self.cluster.kubelet(node) {
            Some(kubelet) => kubelet.registration_count(),
            None => 0,
        };
        let child = spec.spawn()?;
        self.plugins.insert(node.to_string(), child);
        self.wait_registered(node, previous).await
    }

    /// Restarts a node's kubelet (containers keep running) and waits until the node's
    /// plugin registered with the new one.
    pub async fn restart_kubelet(&mut self, node: &str) -> Result<(), SimError> {
        let previous = match self.cluster.kubelet(node) {
            Some(kubelet) => kubelet.registration_count(),
            None => 0,
        };
        if !self.cluster.restart_kubelet(node).await {
            return Err(SimError::Deploy {
                overlay: String::new(),
                message: format!("no node {node}"),
            });
        }
        self.wait_registered(node, previous).await
    }

    /// `kill -9` of a node's plugin.
    pub async fn kill_plugin(&mut self, node: &str) {
        if let Some(process) = self.plugins.remove(node) {
            process.kill().await;
        }
    }

    async fn wait_registered(&self, node: &str, previous: u64) -> Result<(), SimError> {
        let log = self
            .plugin_specs
            .get(node)
            .map(|s| s.log.clone())
            .unwrap_or_default();
        let not_registered = || SimError::NotRegistered {
            node: node.to_string(),
            timeout: REGISTRATION_TIMEOUT,
            log: log.clone(),
        };
        let kubelet = self.cluster.kubelet(node).ok_or_else(not_registered)?;
        let deadline = tokio::time::Instant::now() + REGISTRATION_TIMEOUT;
        loop {
            if kubelet.registration_count() > previous {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                return Err(not_registered());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGTERM to the driver processes (they mark their NodeAllocationStates NotReady and
    /// remove their sockets), then the cluster stops.
    pub async fn shutdown(mut self) {
        let mut children: Vec<DriverProcess> = self.plugins.into_values().collect();
        children.extend(self.controller.take());
        futures::future::join_all(children.into_iter().map(DriverProcess::terminate)).await;
        self.cluster.shutdown().await;
    }
}

/// The one container of the driver's Deployment or DaemonSet.
fn driver_container<'a>(
    workloads: &'a [Manifest],
    kind: &str,
    overlay: &str,
) -> Result<&'a Value, SimError> {
    let found: Vec<&Manifest> = workloads.iter().filter(|m| m.kind() == kind).collect();
    let [workload] = found.as_slice() else {
        return Err(SimError::Deploy {
            overlay: overlay.into(),
            message: format!("expected exactly one {kind}, found {}", found.len()),
        });
    };
    workload
        .object
        .pointer("/spec/template/spec/containers/0")
        .ok_or_else(|| SimError::Deploy {
            overlay: overlay.into(),
            message: format!("{kind} {} has no container", workload.name()),
        })
}

/// The pod a driver process stands for, for the downward API.
struct PodIdentity {
    name: String,
    node: String,
}

/// The container's env on this machine: literal values as they are, downward-API fields
/// of the pod it stands for, paths under hostPath mounts moved to the emulated node's
/// directories, and every `*HTTP_ADDRESS` on a free loopback port (several driver
/// processes share this machine's network, unlike pods).
fn container_env(
    container: &Value,
    pod: &PodIdentity,
    host_dir: &dyn Fn(&str) -> Option<PathBuf>,
) -> Result<Vec<(String, String)>, SimError> {
    let deploy_err = |message: String| SimError::Deploy {
        overlay: String::new(),
        message,
    };
    // mountPath → hostPath, from the pod's volumes (only hostPath volumes matter here).
    let mounts: Vec<(String, String)> = container
        .get("volumeMounts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|m| {
            Some((
                m.get("mountPath")?.as_str()?.to_string(),
                m.get("name")?.as_str()?.to_string(),
            ))
        })
        .collect();
    let mut env = Vec::new();
    for entry in container
        .get("env")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = entry
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let value = if let Some(field) = entry
            .pointer("/valueFrom/fieldRef/fieldPath")
            .and_then(Value::as_str)
        {
            match field {
                "metadata.namespace" => DRIVER_NAMESPACE.to_string(),
                "metadata.name" => pod.name.clone(),
                "spec.nodeName" => pod.node.clone(),
                other => {
                    return Err(deploy_err(format!(
                        "env {name}: fieldRef {other} is not provided by the sim"
                    )));
                }
            }
        } else if entry.get("valueFrom").is_some() {
            return Err(deploy_err(format!(
                "env {name}: only literal values and fieldRef are provided by the sim"
            )));
        } else {
            entry
                .get("value")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let value = if name.ends_with("HTTP_ADDRESS") {
            "127.0.0.1:0".to_string()
        } else if let Some((mount_path, _)) = mounts
            .iter()
            .find(|(path, _)| value == *path || value.starts_with(&format!("{path}/")))
        {
            let host = host_dir(mount_path).ok_or_else(|| {
                deploy_err(format!(
                    "env {name}={value}: the sim has no node directory for the mount {mount_path}"
                ))
            })?;
            let rest = value
                .strip_prefix(mount_path.as_str())
                .unwrap_or_default()
                .trim_start_matches('/');
            if rest.is_empty() {
                host.display().to_string()
            } else {
                host.join(rest).display().to_string()
            }
        } else {
            value
        };
        env.push((name, value));
    }
    Ok(env)
}

/// The emulated node's directory for a kubelet host path the DaemonSet mounts.
fn node_dir_for(dirs: &NodeDirs, path: &str) -> Option<PathBuf> {
    match path {
        "/var/lib/kubelet/plugins_registry" => Some(dirs.registry_dir.clone()),
        "/var/run/cdi" | "/run/cdi" | "/etc/cdi" => Some(dirs.cdi_root.clone()),
        p if p.starts_with("/var/lib/kubelet/plugins/") => Some(dirs.plugin_dir.clone()),
        _ => None,
    }
}

/// Resolves every object's type, then creates them in order (replacing existing ones).
async fn apply_all(cluster: &EmulatedCluster, objects: &[Manifest]) -> Result<(), SimError> {
    let client = cluster.client()?;
    let mut resolved = Vec::new();
    // CRDs in the same set register their kinds only once created, as with kubectl.
    let mut pending_crds: Vec<(String, String)> = Vec::new();
    for m in objects {
        if m.kind() == "CustomResourceDefinition" {
            let group = m
                .object
                .pointer("/spec/group")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let kind = m
                .object
                .pointer("/spec/names/kind")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            pending_crds.push((group, kind));
        }
    }
    for m in objects {
        let (group, mut version) = match m.api_version().split_once('/') {
            Some((g, v)) => (g.to_string(), v.to_string()),
            None => (String::new(), m.api_version().to_string()),
        };
        let mut object = m.object.clone();
        // Kubernetes 1.32/1.33 serve resource.k8s.io/v1beta1 only: the v1 manifests of
        // deploy/ are rewritten to it, as hack/deploy.sh does on such a cluster.
        if group == "resource.k8s.io" && version == "v1" {
            let older = cluster
                .server()
                .store()
                .types()
                .find(|t| {
                    t.group == group && t.kind == m.kind() && !t.serves("v1") && t.serves("v1beta1")
                })
                .map(|t| t.key());
            if let Some(key) = older {
                crate::apiserver::conversion::from_storage(&key, "v1beta1", &mut object);
                object["apiVersion"] = Value::String("resource.k8s.io/v1beta1".into());
                version = "v1beta1".into();
                tracing::info!(
                    kind = m.kind(),
                    name = m.name(),
                    "this Kubernetes serves resource.k8s.io/v1beta1 only: applying the v1 manifest as v1beta1"
                );
            }
        }
        let found = cluster
            .server()
            .store()
            .types()
            .find(|t| t.group == group && t.kind == m.kind() && t.serves(&version))
            .map(|t| (t.plural.clone(), t.namespaced));
        let (plural, namespaced) = match found {
            Some(found) => found,
            None if pending_crds
                .iter()
                .any(|(g, k)| *g == group && k == m.kind()) =>
            {
                (String::new(), true)
            }
            None => {
                return Err(SimError::Apply {
                    origin: m.origin.clone(),
                    kind: m.kind().into(),
                    name: m.name().into(),
                    message: format!(
                        "no resource type serves kind {} in {} (the emulator refuses what it does not implement)",
                        m.kind(),
                        m.api_version()
                    ),
                });
            }
        };
        resolved.push((m, object, group, version, plural, namespaced));
    }
    for (m, object, group, version, plural, namespaced) in resolved {
        let (plural, namespaced) = if plural.is_empty() {
            let t = cluster
                .server()
                .store()
                .types()
                .find(|t| t.group == group && t.kind == m.kind())
                .map(|t| (t.plural.clone(), t.namespaced));
            t.ok_or_else(|| SimError::Apply {
                origin: m.origin.clone(),
                kind: m.kind().into(),
                name: m.name().into(),
                message: "its CRD did not register the kind".into(),
            })?
        } else {
            (plural, namespaced)
        };
        let resource = ApiResource {
            api_version: if group.is_empty() {
                version.clone()
            } else {
                format!("{group}/{version}")
            },
            group: group.clone(),
            version: version.clone(),
            kind: m.kind().into(),
            plural,
        };
        let api: Api<DynamicObject> = if namespaced {
            Api::namespaced_with(
                client.clone(),
                m.namespace().unwrap_or("default"),
                &resource,
            )
        } else {
            Api::all_with(client.clone(), &resource)
        };
        let object: DynamicObject =
            serde_json::from_value(object).map_err(|e| SimError::Apply {
                origin: m.origin.clone(),
                kind: m.kind().into(),
                name: m.name().into(),
                message: e.to_string(),
            })?;
        let fail = |e: kube::Error| SimError::Apply {
            origin: m.origin.clone(),
            kind: m.kind().into(),
            name: m.name().into(),
            message: e.to_string(),
        };
        match api.create(&PostParams::default(), &object).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 && !m.name().is_empty() => {
                let mut current = api.get(m.name()).await.map_err(fail)?;
                let mut desired = object.clone();
                desired.metadata.resource_version = current.metadata.resource_version.take();
                api.replace(m.name(), &PostParams::default(), &desired)
                    .await
                    .map_err(fail)?;
            }
            Err(e) => return Err(fail(e)),
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn env_maps_downward_api_host_paths_and_ports() {
        let container = json!({
            "env": [
                {"name": "FAKE_DRA_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "FAKE_DRA_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "FAKE_DRA_CDI_ROOT", "value": "/var/run/cdi"},
                {"name": "FAKE_DRA_PLUGIN_DIR", "value": "/var/lib/kubelet/plugins/drv"},
                {"name": "FAKE_DRA_HTTP_ADDRESS", "value": "0.0.0.0:8080"},
                {"name": "FAKE_DRA_DRIVER_NAME", "value": "drv"}
            ],
            "volumeMounts": [
                {"name": "cdi", "mountPath": "/var/run/cdi"},
                {"name": "plugin", "mountPath": "/var/lib/kubelet/plugins/drv"}
            ]
        });
        let dirs = NodeDirs {
            registry_dir: "/n/reg".into(),
            plugin_dir: "/n/plugin".into(),
            cdi_root: "/n/cdi".into(),
        };
        let pod = PodIdentity {
            name: "p".into(),
            node: "node-a".into(),
        };
        let env: BTreeMap<_, _> = container_env(&container, &pod, &|p| node_dir_for(&dirs, p))
            .unwrap()
            .into_iter()
            .collect();
        assert_eq!(env["FAKE_DRA_NODE_NAME"], "node-a");
        assert_eq!(env["FAKE_DRA_NAMESPACE"], "fake-dra");
        assert_eq!(env["FAKE_DRA_CDI_ROOT"], "/n/cdi");
        assert_eq!(env["FAKE_DRA_PLUGIN_DIR"], "/n/plugin");
        assert_eq!(env["FAKE_DRA_HTTP_ADDRESS"], "127.0.0.1:0");
        assert_eq!(env["FAKE_DRA_DRIVER_NAME"], "drv");
        let unknown = json!({"env": [{"name": "X", "value": "/srv/x"}], "volumeMounts": [{"name": "s", "mountPath": "/srv"}]});
        let err = container_env(&unknown, &pod, &|p| node_dir_for(&dirs, p))
            .unwrap_err()
            .to_string();
        assert!(err.contains("/srv"), "{err}");
    }
}
