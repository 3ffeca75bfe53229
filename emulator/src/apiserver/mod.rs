//! An in-memory Kubernetes API server over real HTTP on loopback.
//!
//! It implements what fake-dra and its clients use — CRUD, list and watch with
//! resourceVersions, the status subresource, finalizers, generateName, selectors, merge /
//! JSON / apply patches, owner-reference garbage collection — the way kube-apiserver does,
//! and answers anything else with a `Status` error instead of guessing. Every write is one
//! transaction under the [`Store`] lock, as `GuaranteedUpdate` over etcd is upstream.

pub mod conversion;
pub mod device_taint_rule;
mod error;
pub mod fields;
pub mod gates;
mod http;
mod managed;
mod openapi;
mod protobuf;
mod registry;
mod reviews;
mod schema;
mod selectors;
mod store;
mod table;
mod validation;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, MutexGuard};

use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;

pub use error::{ApiError, ApiResult, FieldCause};
pub(crate) use http::{percent_decode, percent_encode};
pub use registry::{
    ResourceKey, ResourceType, is_structured, resource_api_versions, serves_device_taint_rules,
};
pub use selectors::Selectors;
pub use store::{
    DeleteOptions, EventKind, Fault, FaultVerb, MAX_REQUEST_BODY_BYTES, PatchType, Store, Target,
    WatchEvent, WriteOptions, json_size, now_rfc3339, parse_rfc3339, request_too_large,
};

use http::Shared;

/// Why the emulator could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("binding the emulated apiserver to 127.0.0.1: {0}")]
    Bind(#[source] std::io::Error),
    #[error("writing the kubeconfig: {0}")]
    Kubeconfig(#[source] std::io::Error),
    #[error("parsing the driver CRD YAML: {0}")]
    CrdYaml(#[from] serde_yaml_ng::Error),
    #[error("installing a driver CRD: {0}")]
    InstallCrd(#[source] ApiError),
    #[error("{0}")]
    UnsupportedVersion(String),
    #[error("building a client for the emulated apiserver: {0}")]
    Client(String),
}

/// How to start the emulator.
#[derive(Debug, Clone)]
pub struct ApiServerOptions {
    /// The Kubernetes release emulated (major, minor): what `/version` answers and which
    /// `resource.k8s.io` versions are served (≤ 1.30 classic `v1alpha2`; 1.32/1.33
    /// `v1beta1`; ≥ 1.34 `v1` and `v1beta1`), which the control plane follows.
    pub server_version: (u32, u32),
    /// CustomResourceDefinitions (one YAML document each) installed before serving, as
    /// a driver's `helm install` would have; none by default. The emulator knows no
    /// driver: its CRDs are the caller's.
    pub crds: Vec<String>,
    /// Where the kubeconfig is written; default: a temporary directory of its own, removed
    /// with the server. `fake-dra-sim` names its work directory, so that a killed sim
    /// leaves nothing outside it.
    pub kubeconfig_dir: Option<PathBuf>,
    /// The DRA feature gates, over the release's defaults, as kube-apiserver's
    /// `--feature-gates` sets them: the fields of a gate that is off are dropped on write.
    pub feature_gates: gates::FeatureGates,
}

impl Default for ApiServerOptions {
    fn default() -> Self {
        Self {
            server_version: (1, 30),
            crds: Vec::new(),
            kubeconfig_dir: None,
            feature_gates: gates::FeatureGates::default(),
        }
    }
}

/// A running emulated apiserver. Dropping it stops the server and closes every connection.
#[derive(Debug)]
pub struct ApiServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
    kubeconfig: PathBuf,
    _dir: Option<tempfile::TempDir>,
    tasks: JoinSet<()>,
}

impl ApiServer {
    /// Starts a server reporting Kubernetes 1.30, with no CRDs.
    pub async fn start() -> Result<Self, StartError> {
        Self::start_with(ApiServerOptions::default()).await
    }

    pub async fn start_with(options: ApiServerOptions) -> Result<Self, StartError> {
        let mut store =
            Store::for_version(options.server_version).map_err(StartError::UnsupportedVersion)?;
        store.feature_gates = options.feature_gates.clone();
        install_crds(&mut store, &options.crds)?;
        let (watch_epoch, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            store: std::sync::Mutex::new(store),
            watch_epoch,
            gc: Notify::new(),
            server_version: options.server_version,
            feature_gates: options.feature_gates,
        });

        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(StartError::Bind)?;
        let addr = listener.local_addr().map_err(StartError::Bind)?;
        let (dir, kubeconfig) = match &options.kubeconfig_dir {
            Some(given) => (None, given.join("kubeconfig")),
            None => {
                let dir = tempfile::tempdir().map_err(StartError::Kubeconfig)?;
                let kubeconfig = dir.path().join("kubeconfig");
                (Some(dir), kubeconfig)
            }
        };
        std::fs::write(&kubeconfig, kubeconfig_yaml(&format!("http://{addr}")))
            .map_err(StartError::Kubeconfig)?;

        let mut tasks = JoinSet::new();
        tasks.spawn(serve(listener, shared.clone()));
        tasks.spawn(garbage_collector(shared.clone()));
        tracing::info!(%addr, "emulated apiserver listening");
        Ok(Self {
            shared,
            addr,
            kubeconfig,
            _dir: dir,
            tasks,
        })
    }

    /// The Kubernetes release this server emulates.
    pub fn server_version(&self) -> (u32, u32) {
        self.shared.server_version
    }

    /// The feature gates the server was started with; the emulated control plane's
    /// components take the same, as a cluster's components share `--feature-gates`.
    pub fn feature_gates(&self) -> &gates::FeatureGates {
        &self.shared.feature_gates
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig naming this server (no credentials: the emulator does not authenticate).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// A kube client for this server, as `kubectl` would build one from [`Self::kubeconfig`]:
    /// without kube's retries of 429, 503 and 504 (client-go retries only an answer with a
    /// `Retry-After` header, which the emulator never sends), so a caller sees the answer
    /// at once (a 504 for a future resourceVersion took kube's policy 15 tries).
    pub fn client(&self) -> Result<kube::Client, StartError> {
        // kube uses rustls with ring; when a test-only dependency also links aws-lc-rs,
        // rustls has no default provider until one is named (an error means one is set).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let url = self
            .url()
            .parse()
            .map_err(|e: ::http::uri::InvalidUri| StartError::Client(e.to_string()))?;
        let mut config = kube::Config::new(url);
        config.default_retry = false;
        kube::Client::try_from(config).map_err(|e| StartError::Client(e.to_string()))
    }

    /// Direct access to the objects, for the emulated control-plane components that run in
    /// this process (kube-controller-manager and kube-scheduler talk to etcd through the same
    /// registry logic upstream; here they take the same lock the HTTP handlers take).
    pub fn store(&self) -> MutexGuard<'_, Store> {
        self.shared.lock()
    }

    /// Makes the next matching writes fail (see [`Fault`]).
    pub fn inject_fault(&self, fault: Fault) {
        self.shared.lock().add_fault(fault);
    }

    /// Forgets the watch history and ends every open watch, as an apiserver restart with
    /// etcd compaction does: clients must relist (a watch from an old resourceVersion gets
    /// 410 Gone).
    pub fn compact(&self) {
        self.shared.lock().compact();
        self.end_watches();
    }

    /// Ends every open watch without losing history; clients resume from their last
    /// resourceVersion.
    pub fn end_watches(&self) {
        self.shared.watch_epoch.send_modify(|epoch| *epoch += 1);
    }

    /// Runs the garbage collector now (it also runs by itself after every write).
    pub fn collect_garbage(&self) {
        self.shared.gc.notify_one();
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.tasks.abort_all();
    }
}

fn install_crds(store: &mut Store, crds: &[String]) -> Result<(), StartError> {
    for yaml in crds {
        let crd: Value = serde_yaml_ng::from_str(yaml)?;
        let target = Target {
            key: ResourceKey {
                group: "apiextensions.k8s.io".into(),
                plural: "customresourcedefinitions".into(),
            },
            version: "v1".into(),
            namespace: None,
            name: None,
            subresource: None,
        };
        store
            .create(&target, crd, &WriteOptions::default())
            .map_err(StartError::InstallCrd)?;
    }
    Ok(())
}

fn kubeconfig_yaml(server: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: fake-dra-emulator\n  cluster:\n    server: {server}\nusers:\n- name: anonymous\n  user: {{}}\ncontexts:\n- name: fake-dra-emulator\n  context:\n    cluster: fake-dra-emulator\n    user: anonymous\ncurrent-context: fake-dra-emulator\n"
    )
}

/// Accepts connections until dropped; connections live in the set so dropping the server
/// closes them too (a watch must not outlive the server it watches).
async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        tracing::warn!(error = %e, "emulated apiserver: accept failed");
                        continue;
                    }
                };
                let shared = shared.clone();
                connections.spawn(async move {
                    let service = service_fn(move |req| http::handle(shared.clone(), req));
                    if let Err(e) = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await {
                        tracing::debug!(error = %e, "emulated apiserver: connection ended");
                    }
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// kube-controller-manager's garbage collector and namespace controller, woken after
/// writes; passes repeat until nothing changes (a deletion can orphan further dependents).
async fn garbage_collector(shared: Arc<Shared>) {
    loop {
        shared.gc.notified().await;
        loop {
            let mut store = shared.lock();
            let before = store.revision();
            store.collect_garbage();
            if store.revision() == before {
                break;
            }
        }
    }
}
