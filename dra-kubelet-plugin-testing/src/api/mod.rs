//! An in-process Kubernetes API server, as much of one as a DRA kubelet plugin uses:
//! discovery (`/apis`, `/version`), ResourceSlices (list and watch by field selector,
//! create, replace, delete), ResourceClaims (get, and the test's own writes), Nodes (get).
//! Plain HTTP on a loopback port, objects as JSON in memory.
//!
//! What it does not do: validation beyond names and resource versions (a slice the real
//! API server would refuse is stored), conversion between versions (an object is read
//! through the version it was written through; ResourceClaims, whose `status.allocation`
//! reads the same in `v1` and `v1beta1`, are one object under both), admission, patches,
//! label selectors. A test of what the real API server refuses runs on a real cluster.

mod http;
mod store;

use std::net::SocketAddr;
use std::sync::Arc;

use k8s_openapi::api::resource::v1;
use serde_json::{Value, json};

use crate::KitError;
pub(crate) use store::Refused;
use store::{Kind, Store};

/// Which Kubernetes release the server says it is, and so which `resource.k8s.io`
/// versions it serves: 1.32 and 1.33 serve `v1beta1`, 1.34+ `v1` too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiVersion {
    /// The minor version of Kubernetes 1.
    pub minor: u32,
}

impl ApiVersion {
    /// The `resource.k8s.io` versions served, newest first.
    pub fn resource_versions(self) -> &'static [&'static str] {
        if self.minor >= 34 {
            &["v1", "v1beta1"]
        } else {
            &["v1beta1"]
        }
    }
}

impl Default for ApiVersion {
    /// Kubernetes 1.34.
    fn default() -> Self {
        Self { minor: 34 }
    }
}

/// The in-process API server; stops when dropped.
#[derive(Debug)]
pub struct ApiServer {
    addr: SocketAddr,
    store: Arc<Store>,
    version: ApiVersion,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ApiServer {
    /// A server of Kubernetes 1.34 on a free loopback port.
    pub async fn start() -> Result<Self, KitError> {
        Self::start_as(ApiVersion::default()).await
    }

    /// A server that says it is Kubernetes `1.<version.minor>`.
    pub async fn start_as(version: ApiVersion) -> Result<Self, KitError> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|source| KitError::Io {
                action: "binding the API server's port",
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| KitError::Io {
            action: "reading the API server's address",
            source,
        })?;
        let store = Arc::new(Store::default());
        let task = tokio::spawn(http::serve(listener, store.clone(), version));
        Ok(Self {
            addr,
            store,
            version,
            task,
        })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The release it says it is.
    pub fn version(&self) -> ApiVersion {
        self.version
    }

    /// A client of it. Installs rustls' `ring` provider as the process default if none
    /// is (kube uses ring; the CDI checks' dependencies link aws-lc-rs too, and rustls then
    /// has no default).
    pub fn client(&self) -> Result<kube::Client, KitError> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let url = self
            .url()
            .parse()
            .map_err(|e| KitError::Client(format!("{e}")))?;
        kube::Client::try_from(kube::Config::new(url)).map_err(|e| KitError::Client(e.to_string()))
    }

    /// Creates a Node named `name` (the owner of the slices a plugin publishes for it).
    pub fn create_node(&self, name: &str) -> Result<(), KitError> {
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}});
        self.store
            .create(&Kind::new("", "v1", "nodes"), "", node)
            .map(|_| ())
            .map_err(KitError::from)
    }

    /// Stores `claim` (spec and status) as the scheduler left it; returns it as stored,
    /// with its uid.
    pub fn create_claim(&self, claim: &v1::ResourceClaim) -> Result<v1::ResourceClaim, KitError> {
        let namespace = claim
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let mut value = serde_json::to_value(claim).map_err(|e| KitError::Client(e.to_string()))?;
        value["apiVersion"] = json!("resource.k8s.io/v1");
        value["kind"] = json!("ResourceClaim");
        let stored = self.store.create(
            &Kind::new("resource.k8s.io", "v1", "resourceclaims"),
            &namespace,
            value,
        )?;
        serde_json::from_value(stored).map_err(|e| KitError::Client(e.to_string()))
    }

    /// Deletes claim `namespace/name`.
    pub fn delete_claim(&self, namespace: &str, name: &str) -> Result<(), KitError> {
        self.store
            .delete(
                &Kind::new("resource.k8s.io", "v1", "resourceclaims"),
                namespace,
                name,
            )
            .map(|_| ())
            .map_err(KitError::from)
    }

    /// Every `resource.k8s.io/v1` ResourceSlice, by name.
    pub fn slices(&self) -> Vec<v1::ResourceSlice> {
        self.objects("resource.k8s.io", "v1", "resourceslices")
            .into_iter()
            .filter_map(|v| serde_json::from_value(v).ok())
            .collect()
    }

    /// Every object of `group/version` `resource` (cluster-wide and in every namespace),
    /// as JSON.
    pub fn objects(&self, group: &str, version: &str, resource: &str) -> Vec<Value> {
        self.store
            .list(&Kind::new(group, version, resource), None)
            .0
    }

    /// Stores an object of `group/version` `resource` as given (a stale slice of an
    /// earlier run, a Node with labels); returns it as stored.
    pub fn create(
        &self,
        group: &str,
        version: &str,
        resource: &str,
        namespace: &str,
        object: Value,
    ) -> Result<Value, KitError> {
        self.store
            .create(&Kind::new(group, version, resource), namespace, object)
            .map_err(KitError::from)
    }

    /// Waits until `ready` holds for the `v1` ResourceSlices, at most `limit`; the slices
    /// it held for.
    pub async fn wait_for_slices(
        &self,
        limit: std::time::Duration,
        ready: impl Fn(&[v1::ResourceSlice]) -> bool,
    ) -> Result<Vec<v1::ResourceSlice>, KitError> {
        let mut changes = self.store.subscribe();
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let slices = self.slices();
            if ready(&slices) {
                return Ok(slices);
            }
            if tokio::time::timeout_at(deadline, changes.changed())
                .await
                .is_err()
            {
                return Err(KitError::Timeout {
                    what: format!("the ResourceSlices to be as wanted; they are {slices:?}"),
                    limit,
                });
            }
        }
    }
}
