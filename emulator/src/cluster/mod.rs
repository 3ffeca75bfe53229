//! The control plane around the emulated apiserver: the parts of kube-controller-manager,
//! kube-scheduler and the kubelet that classic DRA needs, each talking to the apiserver over
//! HTTP through its own kube client, as the real components do.
//!
//! Every component is level-triggered: after any change in the store (and on a resync
//! tick) it lists what it cares about and moves the world one step towards the desired
//! state. Conflicts are not errors; the next pass retries with fresh objects, which is what
//! the upstream workqueues do.

pub mod claims;
mod endpoint_slices;
pub mod kubelet;
pub mod lifeline;
mod namespaces;
pub mod node_fit;
pub mod runtime;
pub mod scheduler;
pub mod structured;
pub mod workloads;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Node, ObjectReference};
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::sync::broadcast::{self, error::RecvError, error::TryRecvError};
use tokio::task::JoinSet;

use crate::apiserver::{ApiServer, StartError, WatchEvent};
pub use runtime::{ContainerRuntime, LogLine, LogSink};

/// How often a component runs even when nothing changed (the informers' resync).
const RESYNC: Duration = Duration::from_secs(1);
/// Changes arriving within this window are handled in one pass.
const COALESCE: Duration = Duration::from_millis(10);

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(transparent)]
    Start(#[from] StartError),
    #[error("creating {what}: {}", plain(source))]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("preparing the node directories under {path}: {source}")]
    Dirs {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Runtime(#[from] runtime::RuntimeError),
}

/// A kube client error for a person: an API status as its message, code and reason. kube's
/// own `Display` of an API error appends the `Status` as a Rust Debug dump.
pub fn plain(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) => {
            let reason = if status.reason.is_empty() {
                String::new()
            } else {
                format!(" {}", status.reason)
            };
            format!("{} ({}{reason})", status.message, status.code)
        }
        other => other.to_string(),
    }
}

/// The kubelet's directories on one emulated node.
#[derive(Debug, Clone)]
pub struct NodeDirs {
    /// `/var/lib/kubelet/plugins_registry` on a real node.
    pub registry_dir: PathBuf,
    /// Where the plugin keeps its DRA socket and checkpoint (`/var/lib/kubelet/plugins/<driver>`).
    pub plugin_dir: PathBuf,
    /// Where the plugin writes CDI specs and the runtime reads them.
    pub cdi_root: PathBuf,
    /// The containers' log files (`/var/log/pods` on a real node):
    /// `<ns>_<pod>_<uid>/<container>/<restart>.log`.
    pub pod_logs: PathBuf,
}

impl NodeDirs {
    /// The log file of one run of a container (`kuberuntime.BuildContainerLogsDirectory`
    /// and `<restartCount>.log`).
    pub fn container_log(
        &self,
        namespace: &str,
        pod: &str,
        uid: &str,
        container: &str,
        restart: u32,
    ) -> PathBuf {
        self.pod_log_dir(namespace, pod, uid)
            .join(container)
            .join(format!("{restart}.log"))
    }

    /// A pod's log directory, removed with the pod.
    pub fn pod_log_dir(&self, namespace: &str, pod: &str, uid: &str) -> PathBuf {
        self.pod_logs.join(format!("{namespace}_{pod}_{uid}"))
    }
}

/// Pods the kubelets leave alone because something else runs them: the sim runs the
/// driver's own workloads as host processes (there is no image to run) and reports their
/// status itself. Those of `namespace` whose labels include `labels`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRun {
    pub namespace: String,
    pub labels: std::collections::BTreeMap<String, String>,
}

impl HostRun {
    pub fn matches(
        &self,
        namespace: Option<&str>,
        labels: Option<&std::collections::BTreeMap<String, String>>,
    ) -> bool {
        namespace == Some(self.namespace.as_str())
            && !self.labels.is_empty()
            && self
                .labels
                .iter()
                .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
    }
}

#[derive(Debug, Clone)]
pub struct ClusterConfig {
    pub nodes: Vec<String>,
    /// Labels every emulated Node carries besides `kubernetes.io/hostname`.
    pub node_labels: Vec<(String, String)>,
    /// Parent of the per-node directories.
    pub work_dir: PathBuf,
    pub runtime: ContainerRuntime,
    /// How long after a DRA driver left a kubelet wipes its ResourceSlices (upstream
    /// 30 s, [`kubelet::DEFAULT_WIPING_DELAY`]).
    pub wiping_delay: std::time::Duration,
    /// Pods the kubelets leave to whoever runs them ([`HostRun`]).
    pub host_run: Vec<HostRun>,
}

impl ClusterConfig {
    /// Every node has its own directories, CDI dir included: the podman runner mounts the
    /// node's CDI dir on `/var/run/cdi` in a private mount namespace, as if each node were
    /// its own machine.
    pub fn node_dirs(&self, node: &str) -> NodeDirs {
        let root = self.work_dir.join("nodes").join(node);
        NodeDirs {
            registry_dir: root.join("plugins_registry"),
            plugin_dir: root.join("plugins"),
            cdi_root: root.join("cdi"),
            pod_logs: root.join("pods"),
        }
    }
}

/// A running emulated cluster. Dropping it stops every component and container.
#[derive(Debug)]
pub struct EmulatedCluster {
    config: ClusterConfig,
    logs: LogSink,
    components: JoinSet<()>,
    kubelets: Vec<kubelet::Kubelet>,
    // Dropped last: components still talk to it while they shut down.
    server: ApiServer,
}

impl EmulatedCluster {
    pub async fn start(server: ApiServer, config: ClusterConfig) -> Result<Self, ClusterError> {
        let client = server.client()?;
        create_if_missing(
            &Api::<Namespace>::all(client.clone()),
            Namespace {
                metadata: meta("fake-dra"),
                ..Default::default()
            },
        )
        .await?;
        // The labels a kubelet gives its Node (kubelet_node_status.go `initialNode`): the
        // scheduler now honours nodeSelector, and `kubernetes.io/os: linux` is a common one.
        let arch = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            other => other,
        };
        for (index, node) in config.nodes.iter().enumerate() {
            // kind numbers its workers' pod CIDRs from 1 (its control plane has 0).
            let pod_cidr = kubelet::addresses::PodAddresses::for_node_index(index + 1).cidr();
            let mut labels = std::collections::BTreeMap::from([
                ("kubernetes.io/hostname".to_string(), node.clone()),
                ("kubernetes.io/os".to_string(), "linux".to_string()),
                ("kubernetes.io/arch".to_string(), arch.to_string()),
                ("beta.kubernetes.io/os".to_string(), "linux".to_string()),
                ("beta.kubernetes.io/arch".to_string(), arch.to_string()),
            ]);
            labels.extend(config.node_labels.iter().cloned());
            let object = Node {
                metadata: ObjectMeta {
                    labels: Some(labels),
                    ..meta(node)
                },
                spec: Some(k8s_openapi::api::core::v1::NodeSpec {
                    pod_cidrs: pod_cidr.clone().map(|cidr| vec![cidr]),
                    pod_cidr,
                    ..Default::default()
                }),
                ..Default::default()
            };
            create_if_missing(&Api::<Node>::all(client.clone()), object).await?;
            let dirs = config.node_dirs(node);
            for dir in [&dirs.registry_dir, &dirs.plugin_dir, &dirs.cdi_root] {
                std::fs::create_dir_all(dir).map_err(|source| ClusterError::Dirs {
                    path: dir.clone(),
                    source,
                })?;
            }
        }
        let logs = LogSink::default();
        let mut components = JoinSet::new();
        let version = server.server_version();
        components.spawn(claims::run(server.client()?, changes(&server), version));
        components.spawn(scheduler::run(
            server.client()?,
            changes(&server),
            version,
            server.feature_gates().clone(),
        ));
        components.spawn(workloads::run(server.client()?, changes(&server), version));
        components.spawn(namespaces::run(server.client()?, changes(&server)));
        components.spawn(endpoint_slices::run(server.client()?, changes(&server)));
        let mut kubelets = Vec::new();
        for (index, node) in config.nodes.iter().enumerate() {
            kubelets.push(
                kubelet::Kubelet::start(
                    kubelet::KubeletConfig {
                        node: node.clone(),
                        dirs: config.node_dirs(node),
                        runtime: config.runtime.clone(),
                        logs: logs.clone(),
                        server_version: version,
                        wiping_delay: config.wiping_delay,
                        host_run: config.host_run.clone(),
                        pod_addresses: kubelet::addresses::PodAddresses::for_node_index(index + 1),
                    },
                    server.client()?,
                    changes(&server),
                )
                .map_err(|source| ClusterError::Dirs {
                    path: config.node_dirs(node).pod_logs,
                    source,
                })?,
            );
        }
        Ok(Self {
            config,
            logs,
            components,
            kubelets,
            server,
        })
    }

    pub fn server(&self) -> &ApiServer {
        &self.server
    }

    pub fn client(&self) -> Result<kube::Client, ClusterError> {
        Ok(self.server.client()?)
    }

    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    pub fn logs(&self) -> &LogSink {
        &self.logs
    }

    pub fn kubelet(&self, node: &str) -> Option<&kubelet::Kubelet> {
        self.kubelets.iter().find(|k| k.node() == node)
    }

    /// Restarts the kubelet of `node` (see [`kubelet::Kubelet::restart`]); false if there
    /// is no such node.
    pub async fn restart_kubelet(&mut self, node: &str) -> bool {
        let changes = changes(&self.server);
        match self.kubelets.iter_mut().find(|k| k.node() == node) {
            Some(kubelet) => {
                kubelet.restart(changes).await;
                true
            }
            None => false,
        }
    }

    /// Stops the kubelets (containers first, then the plugins' claims are left prepared, as a
    /// node shutdown does), then the control plane.
    pub async fn shutdown(mut self) {
        for kubelet in self.kubelets.drain(..) {
            kubelet.shutdown().await;
        }
        self.components.abort_all();
        while self.components.join_next().await.is_some() {}
    }
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        ..Default::default()
    }
}

async fn create_if_missing<K>(api: &Api<K>, object: K) -> Result<(), ClusterError>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(source) => Err(ClusterError::Api {
            what: format!("{} {:?}", K::kind(&()), object.meta().name),
            source,
        }),
    }
}

fn changes(server: &ApiServer) -> broadcast::Receiver<Arc<WatchEvent>> {
    server.store().subscribe()
}

/// Runs `pass` after every batch of store changes and on every resync tick, until the
/// store goes away.
pub(crate) async fn level_triggered<F, Fut>(
    component: &'static str,
    mut changes: broadcast::Receiver<Arc<WatchEvent>>,
    mut pass: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), kube::Error>>,
{
    loop {
        if let Err(error) = pass().await {
            tracing::debug!(component, %error, "pass failed; retrying on the next change");
        }
        tokio::select! {
            received = changes.recv() => if let Err(RecvError::Closed) = received { return },
            () = tokio::time::sleep(RESYNC) => {}
        }
        tokio::time::sleep(COALESCE).await;
        loop {
            match changes.try_recv() {
                Ok(_) | Err(TryRecvError::Lagged(_)) => {}
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Closed) => return,
            }
        }
    }
}

/// Publishes Events as the component named `controller` (kube-scheduler, kubelet, …), the
/// way `kubectl describe` shows them: events.k8s.io/v1 as kube-scheduler writes them, or
/// core/v1 (`source` = component and node, `firstTimestamp`/`lastTimestamp`/`count`) as
/// the kubelet's legacy recorder does ([`Events::legacy`]).
///
/// Each distinct note is its own Event, as client-go keys aggregation by message (kube-rs'
/// `Recorder` folds every Event with the same reason into one series and keeps the first
/// note, which would hide a scheduler's changing reasons); the same note again on the same
/// object is counted in that Event (`series`, or `count` and `lastTimestamp`), which
/// `kubectl describe` shows as `(x4 over 46s)`.
#[derive(Clone)]
pub(crate) struct Events {
    client: kube::Client,
    controller: String,
    instance: String,
    legacy: bool,
    /// Events already written, by what they say.
    seen: Arc<std::sync::Mutex<std::collections::HashMap<String, Written>>>,
}

/// An Event written: (namespace, name, count so far).
type Written = (String, String, i32);

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events")
            .field("controller", &self.controller)
            .finish_non_exhaustive()
    }
}

impl Events {
    pub fn new(client: kube::Client, controller: &str, instance: Option<String>) -> Self {
        Self {
            client,
            controller: controller.into(),
            instance: instance.unwrap_or_else(|| controller.into()),
            legacy: false,
            seen: Arc::default(),
        }
    }

    /// The kubelet's recorder: core/v1 Events with `source` `{component, host}`.
    pub fn legacy(client: kube::Client, component: &str, host: &str) -> Self {
        Self {
            legacy: true,
            ..Self::new(client, component, Some(host.into()))
        }
    }

    pub async fn warn(&self, object: ObjectReference, reason: &str, action: &str, note: String) {
        self.publish(object, "Warning", reason, action, note).await;
    }

    pub async fn normal(&self, object: ObjectReference, reason: &str, action: &str, note: String) {
        self.publish(object, "Normal", reason, action, note).await;
    }

    async fn publish(
        &self,
        object: ObjectReference,
        type_: &str,
        reason: &str,
        action: &str,
        note: String,
    ) {
        use k8s_openapi::api::events::v1::Event;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
        let namespace = object.namespace.clone().unwrap_or_else(|| "default".into());
        let key = format!(
            "{}/{}/{}/{}/{type_}/{reason}/{note}",
            namespace,
            object.name.as_deref().unwrap_or_default(),
            object.uid.as_deref().unwrap_or_default(),
            object.field_path.as_deref().unwrap_or_default()
        );
        let now = jiff::Timestamp::now();
        // client-go's recorders name an Event `<object>.<hex of the time in ns>`, so that
        // Events list (by name) in the order they happened.
        let event_name = format!(
            "{}.{:x}",
            object.name.as_deref().unwrap_or("event"),
            now.as_nanosecond()
        );
        let repeated = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get_mut(&key)
            .map(|(ns, name, count)| {
                *count += 1;
                (ns.clone(), name.clone(), *count)
            });
        if let Some((ns, name, count)) = repeated {
            self.count_again(&ns, &name, count, now).await;
            return;
        }
        let created = if self.legacy {
            let event = serde_json::json!({
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": event_name, "namespace": namespace},
                "involvedObject": object,
                "reason": reason, "message": note, "type": type_,
                "source": {"component": self.controller, "host": self.instance},
                "firstTimestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
                "lastTimestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
                "count": 1,
                "reportingComponent": self.controller, "reportingInstance": self.instance,
            });
            let api: Api<kube::api::DynamicObject> = Api::namespaced_with(
                self.client.clone(),
                &namespace,
                &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::Event>(&()),
            );
            match serde_json::from_value(event) {
                Ok(event) => api
                    .create(&PostParams::default(), &event)
                    .await
                    .map(|e| e.metadata.name),
                Err(e) => Err(kube::Error::SerdeError(e)),
            }
        } else {
            let event = Event {
                metadata: ObjectMeta {
                    name: Some(event_name),
                    namespace: Some(namespace.clone()),
                    ..Default::default()
                },
                event_time: Some(MicroTime(now)),
                action: Some(action.into()),
                reason: Some(reason.into()),
                note: Some(note),
                type_: Some(type_.into()),
                regarding: Some(object),
                reporting_controller: Some(self.controller.clone()),
                reporting_instance: Some(self.instance.clone()),
                ..Default::default()
            };
            Api::<Event>::namespaced(self.client.clone(), &namespace)
                .create(&PostParams::default(), &event)
                .await
                .map(|e| e.metadata.name)
        };
        match created {
            Ok(Some(name)) => {
                self.seen
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert(key, (namespace, name, 1));
            }
            Ok(None) => {}
            Err(error) => tracing::debug!(%error, reason, "could not publish an event"),
        }
    }

    /// The same Event once more: `count`/`lastTimestamp` (core/v1, the kubelet's
    /// correlator) or `series` (events.k8s.io/v1).
    async fn count_again(&self, namespace: &str, name: &str, count: i32, now: jiff::Timestamp) {
        let result = if self.legacy {
            let patch = serde_json::json!({"count": count, "lastTimestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()});
            Api::<k8s_openapi::api::core::v1::Event>::namespaced(self.client.clone(), namespace)
                .patch(
                    name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(&patch),
                )
                .await
                .map(drop)
        } else {
            let patch = serde_json::json!({"series": {"count": count, "lastObservedTime": now.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()}});
            Api::<k8s_openapi::api::events::v1::Event>::namespaced(self.client.clone(), namespace)
                .patch(
                    name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(&patch),
                )
                .await
                .map(drop)
        };
        if let Err(error) = result {
            tracing::debug!(%error, "could not count an event again");
        }
    }
}

/// `POST pods/<name>/binding`, the scheduler's last step (Bind plugin).
pub(crate) async fn bind(
    client: &kube::Client,
    namespace: &str,
    pod_name: &str,
    node: &str,
) -> Result<(), kube::Error> {
    let binding = k8s_openapi::api::core::v1::Binding {
        metadata: ObjectMeta {
            name: Some(pod_name.into()),
            namespace: Some(namespace.into()),
            ..Default::default()
        },
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.into()),
            ..Default::default()
        },
    };
    let body = serde_json::to_vec(&binding).map_err(kube::Error::SerdeError)?;
    let request = http::Request::post(format!(
        "/api/v1/namespaces/{namespace}/pods/{pod_name}/binding"
    ))
    .header(http::header::CONTENT_TYPE, "application/json")
    .body(body)
    .map_err(kube::Error::HttpError)?;
    client.request::<serde_json::Value>(request).await?;
    Ok(())
}

/// The reference an Event names its object by.
pub(crate) fn object_ref<K: kube::Resource<DynamicType = ()>>(object: &K) -> ObjectReference {
    object.object_ref(&())
}
