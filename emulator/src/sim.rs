//! fake-dra with no cluster: the emulated control plane, the driver installed from
//! `deploy/` the way `kubectl apply -k deploy/classic` would, and the **real** controller
//! and kubelet-plugin binaries as child processes, configured from the rendered
//! Deployment and DaemonSet (their env, with the downward API and hostPath directories
//! mapped to the emulated node), so the configuration that is tested is the one deployed.
//!
//! The driver's own Deployment and DaemonSet are applied as every other object, and their
//! Pods made by the emulated controllers; the kubelets leave those Pods to [`Sim`] (there
//! is no image to run), which runs the binaries directly and reports the Pods' status
//! from the processes ([`host_pods`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use serde_json::Value;
use tokio::process::Child;

use crate::apiserver::gates::FeatureGates;
use crate::apiserver::{ApiServer, ApiServerOptions, StartError};
use crate::binaries;
use crate::cluster::lifeline;
use crate::cluster::{
    ClusterConfig, ClusterError, ContainerRuntime, EmulatedCluster, LogSink, NodeDirs,
};
use crate::manifests::{self, Manifest, ManifestError};

mod host_pods;
pub mod mode;
pub mod output;
mod processes;
mod validate;
pub mod wait;
mod work_dir;

use host_pods::HostPod;
use processes::*;
pub use validate::check_manifests;
pub use work_dir::remove_stale_work_dirs;
use work_dir::*;

/// The repository's `deploy/` directory, where the sim finds the driver's manifests.
pub const DEPLOY_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy");
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
    /// The plugin process ended before it registered: waiting on would only hang.
    #[error(
        "the kubelet plugin on {node} exited with code {code} before it registered; the end of its log ({log}):\n{tail}"
    )]
    PluginExited {
        node: String,
        code: i32,
        log: PathBuf,
        tail: String,
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
    /// The DRA feature gates over the release's defaults (`--feature-gates`), for the API
    /// server and the scheduler alike.
    pub feature_gates: FeatureGates,
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
            feature_gates: FeatureGates::default(),
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

/// A running no-cluster fake-dra.
#[derive(Debug)]
pub struct Sim {
    cluster: EmulatedCluster,
    /// `None` when the overlay has no controller (structured DRA).
    controller_spec: Option<ProcessSpec>,
    controller: Option<DriverProcess>,
    /// The Pod the controller process is, as the API shows it.
    controller_pod: Option<HostPod>,
    plugin_specs: BTreeMap<String, ProcessSpec>,
    plugins: BTreeMap<String, DriverProcess>,
    plugin_pods: BTreeMap<String, HostPod>,
    /// Where the driver's workloads run.
    driver_namespace: String,
    work_dir: PathBuf,
    // Removed last.
    _temp: Option<tempfile::TempDir>,
}

impl Sim {
    pub async fn start(config: SimConfig) -> Result<Self, SimError> {
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
        if !config.feature_gates.are_defaults() {
            tracing::info!(feature_gates = %config.feature_gates.spec(), "feature gates over the release's defaults");
        }

        // The driver's objects come from deploy/, CRDs included (not the emulator's own copy).
        let server = ApiServer::start_with(ApiServerOptions {
            server_version: config.kubernetes_version(),
            kubeconfig_dir: Some(work_dir.clone()),
            crds: Vec::new(),
            feature_gates: config.feature_gates.clone(),
        })
        .await?;
        let kubeconfig = server.kubeconfig().to_path_buf();
        let cluster_config = ClusterConfig {
            nodes: config.nodes.clone(),
            node_labels: config.node_labels.clone(),
            work_dir: work_dir.clone(),
            runtime,
            wiping_delay: config.wiping_delay,
            host_run: Vec::new(),
        };
        let (installed, driver_workloads): (Vec<Manifest>, Vec<Manifest>) = deployed
            .into_iter()
            .partition(|m| !matches!(m.kind(), "Deployment" | "DaemonSet"));
        let cluster_config = ClusterConfig {
            host_run: driver_workloads.iter().map(host_pods::host_run).collect(),
            ..cluster_config
        };
        let cluster = EmulatedCluster::start(server, cluster_config.clone()).await?;
        apply_all(&cluster, &installed).await?;
        // Applied like the rest; the controllers make their Pods, which the sim runs.
        apply_all(&cluster, &driver_workloads).await?;
        let client = cluster.client()?;
        let node_dirs = |node: &str| cluster_config.node_dirs(node);

        // Structured DRA has no controller: kube-scheduler allocates.
        let controller = if driver_workloads.iter().any(|m| m.kind() == "Deployment") {
            Some(driver_workload(
                &driver_workloads,
                "Deployment",
                &config.overlay,
            )?)
        } else {
            None
        };
        let plugin = driver_workload(&driver_workloads, "DaemonSet", &config.overlay)?;
        let plugin_bin = binaries::locate(&plugin.program, config.bin_dir.as_deref())?;
        let (controller_spec, controller_pod) = match controller {
            Some(controller) => {
                let host = host_pods::host_run(controller.manifest);
                let found =
                    HostPod::find(&client, &host, None, controller.container, &node_dirs).await?;
                let pod = PodIdentity {
                    name: found.name.clone(),
                    namespace: found.namespace.clone(),
                    node: found.node.clone(),
                };
                let mut env = container_env(controller.container, &pod, &|_| None)?;
                env.push(("KUBECONFIG".into(), kubeconfig.display().to_string()));
                let spec = ProcessSpec {
                    program: binaries::locate(&controller.program, config.bin_dir.as_deref())?,
                    env,
                    log: logs_dir.join("controller.log"),
                    cri_log: None,
                };
                (Some(spec), Some(found))
            }
            None => (None, None),
        };
        let plugin_host = host_pods::host_run(plugin.manifest);
        let mut plugin_pods = BTreeMap::new();
        let mut plugin_specs = BTreeMap::new();
        for node in &config.nodes {
            let dirs = cluster_config.node_dirs(node);
            let found = HostPod::find(
                &client,
                &plugin_host,
                Some(node),
                plugin.container,
                &node_dirs,
            )
            .await?;
            let pod = PodIdentity {
                name: found.name.clone(),
                namespace: found.namespace.clone(),
                node: node.clone(),
            };
            plugin_pods.insert(node.clone(), found);
            let mut env = container_env(plugin.container, &pod, &|host_path| {
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
                    cri_log: None,
                },
            );
        }
        let mut sim = Self {
            cluster,
            controller_spec,
            controller: None,
            controller_pod,
            plugin_specs,
            plugins: BTreeMap::new(),
            plugin_pods,
            driver_namespace: plugin.namespace.clone(),
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

    /// The namespace of the driver's workloads (`fake-dra`).
    pub fn driver_namespace(&self) -> &str {
        &self.driver_namespace
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
        let (Some(spec), Some(pod)) = (&mut self.controller_spec, &mut self.controller_pod) else {
            return Err(SimError::Deploy {
                overlay: String::new(),
                message: "this overlay has no controller".into(),
            });
        };
        spec.cri_log = Some(pod.next_run());
        self.controller = Some(spec.spawn()?);
        let (pod, client) = (pod.clone(), self.cluster.client()?);
        tokio::spawn(async move { pod.report(&client).await });
        Ok(())
    }

    /// `kill -9` of the controller.
    pub async fn kill_controller(&mut self) {
        if let Some(process) = self.controller.take() {
            let code = process.kill().await;
            self.report_exit(None, code).await;
        }
    }

    /// A driver process exited with `code`: its pod says so (`node`: a plugin's, else the
    /// controller's).
    async fn report_exit(&mut self, node: Option<&str>, code: i32) {
        let pod = match node {
            Some(node) => self.plugin_pods.get_mut(node),
            None => self.controller_pod.as_mut(),
        };
        if let (Some(pod), Ok(client)) = (pod, self.cluster.client()) {
            pod.exited(code);
            pod.report(&client).await;
        }
    }

    /// Starts the node's plugin and waits until the node's kubelet registered it.
    pub async fn start_plugin(&mut self, node: &str) -> Result<(), SimError> {
        let (Some(spec), Some(pod)) = (
            self.plugin_specs.get_mut(node),
            self.plugin_pods.get_mut(node),
        ) else {
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
        spec.cri_log = Some(pod.next_run());
        let child = spec.spawn()?;
        pod.report(&self.cluster.client()?).await;
        self.plugins.insert(node.to_string(), child);
        self.wait_registered(node, previous).await
    }

    /// Sets environment variables of a node's plugin and starts it again with them, as
    /// `kubectl set env daemonset/...` rolls the node's pod; waits until it registered.
    pub async fn set_plugin_env(
        &mut self,
        node: &str,
        vars: &[(&str, &str)],
    ) -> Result<(), SimError> {
        let Some(spec) = self.plugin_specs.get_mut(node) else {
            return Err(SimError::Deploy {
                overlay: String::new(),
                message: format!("no node {node}"),
            });
        };
        for (k, v) in vars {
            spec.env.retain(|(name, _)| name != k);
            spec.env.push(((*k).to_owned(), (*v).to_owned()));
        }
        if let Some(process) = self.plugins.remove(node) {
            let code = process.terminate().await;
            self.report_exit(Some(node), code).await;
        }
        self.start_plugin(node).await
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
            let code = process.kill().await;
            self.report_exit(Some(node), code).await;
        }
    }

    async fn wait_registered(&mut self, node: &str, previous: u64) -> Result<(), SimError> {
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
            let exited = self
                .plugins
                .get_mut(node)
                .and_then(|p| p.child.try_wait().ok().flatten());
            if let Some(status) = exited {
                return Err(SimError::PluginExited {
                    node: node.to_string(),
                    code: status.code().unwrap_or(-1),
                    tail: log_tail(&log),
                    log: log.clone(),
                });
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

/// The last lines of a driver's log (at most 4 KiB of it), for an error.
fn log_tail(log: &Path) -> String {
    use std::io::{Read, Seek, SeekFrom};
    const TAIL_BYTES: u64 = 4096;
    let Ok(mut file) = std::fs::File::open(log) else {
        return String::new();
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(TAIL_BYTES)));
    let mut bytes = Vec::new();
    let _ = file.take(TAIL_BYTES).read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(5)..].join("\n")
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
        let (group, version, object) = validate::served_form(&cluster.server().store(), m);
        if version != m.api_version().rsplit('/').next().unwrap_or_default() {
            tracing::info!(
                kind = m.kind(),
                name = m.name(),
                "this Kubernetes serves resource.k8s.io/v1beta1 only: applying the v1 manifest as v1beta1"
            );
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
            message: crate::cluster::plain(&e),
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
mod tests;
