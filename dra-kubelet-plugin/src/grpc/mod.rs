//! The kubelet-facing gRPC services: registration, and on one socket next to the gRPC
//! health service either the classic DRA node services (`v1alpha2.Node`,
//! `v1alpha3.Node`) or the structured ones (`dra.v1beta1.DRAPlugin`, `dra.v1.DRAPlugin`,
//! one handler for both). Thin: they translate messages, let the device profile read
//! each claim, and hand the claims to the [`ClaimStore`]; nothing here knows the device.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use dra_kubelet_proto::{
    DRA_PLUGIN_TYPE, SUPPORTED_HEALTH_V1, SUPPORTED_HEALTH_V1ALPHA1, SUPPORTED_V1,
    SUPPORTED_V1BETA1, dra_health_v1, dra_health_v1alpha1, dra_v1, dra_v1beta1,
    pluginregistration as reg,
};
#[cfg(feature = "classic")]
use dra_kubelet_proto::{v1alpha2, v1alpha3};
use futures::StreamExt;
use tonic::{Request, Response, Status};
use tracing::{error, info, warn};

use crate::allocation;
use crate::claim_data::ClaimRef;
use crate::claim_error::ClaimError;
use crate::claim_reader::ClaimReader;
use crate::hooks::FaultHook;
use crate::metrics::Metrics;
use crate::profile::DeviceProfile;
use crate::state::ClaimStore;

#[cfg(feature = "classic")]
mod classic;
mod device_health;
mod structured;

pub(crate) use structured::DraPluginService;

/// The versions classic kubelets (1.27–1.31) accept: each entry is parsed as a semantic
/// version, and 1.0.0 means "the classic node services".
#[cfg(feature = "classic")]
pub const SUPPORTED_VERSIONS: &[&str] = &["1.0.0"];

/// What structured mode advertises: exactly the services it serves, newest first: the
/// `DRAPlugin` services (1.34+ kubelets take the first they know; 1.32–1.33 look for
/// v1beta1), then the device health streams (1.37 takes the first it knows,
/// `pickHealthService`).
pub const STRUCTURED_SUPPORTED_VERSIONS: &[&str] = &[
    SUPPORTED_V1,
    SUPPORTED_V1BETA1,
    SUPPORTED_HEALTH_V1,
    SUPPORTED_HEALTH_V1ALPHA1,
];

/// How often the gRPC servers ping a connection, and how long they wait for the answer:
/// a kubelet's connection answers and stays open however long it idles; one that does
/// not is closed.
const KEEPALIVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(30);
const KEEPALIVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// A gRPC server with the plugin's keepalive.
pub fn server() -> tonic::transport::Server {
    tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
}

/// The services on the DRA socket in structured DRA, next to the gRPC health service, and
/// what registration advertises for them.
pub async fn structured_services<D: DeviceProfile>(
    dra: DraPluginService<D>,
    inventory: Arc<dyn crate::slice_controller::Inventory>,
    hook: Arc<dyn FaultHook>,
    stopping: tokio::sync::watch::Receiver<bool>,
) -> (tonic::transport::server::Router, &'static [&'static str]) {
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<dra_v1::dra_plugin_server::DraPluginServer<DraPluginService<D>>>()
        .await;
    health_reporter
        .set_serving::<dra_v1beta1::dra_plugin_server::DraPluginServer<DraPluginService<D>>>()
        .await;
    let device_health = device_health::DeviceHealthService {
        pool: dra.node_name.clone(),
        inventory,
        hook,
        stopping,
    };
    (
        server()
            .add_service(health_service)
            .add_service(dra_v1::dra_plugin_server::DraPluginServer::new(dra.clone()))
            .add_service(dra_v1beta1::dra_plugin_server::DraPluginServer::new(dra))
            .add_service(
                dra_health_v1::dra_resource_health_server::DraResourceHealthServer::new(
                    device_health.clone(),
                ),
            )
            .add_service(
                dra_health_v1alpha1::dra_resource_health_server::DraResourceHealthServer::new(
                    device_health,
                ),
            ),
        STRUCTURED_SUPPORTED_VERSIONS,
    )
}

/// The classic node services on the DRA socket, next to the gRPC health service, and
/// what registration advertises for them.
#[cfg(feature = "classic")]
pub async fn classic_services<D: DeviceProfile>(
    node: NodeService<D>,
) -> (tonic::transport::server::Router, &'static [&'static str]) {
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<v1alpha3::node_server::NodeServer<NodeService<D>>>()
        .await;
    health_reporter
        .set_serving::<v1alpha2::node_server::NodeServer<NodeService<D>>>()
        .await;
    (
        server()
            .add_service(health_service)
            .add_service(v1alpha3::node_server::NodeServer::new(node.clone()))
            .add_service(v1alpha2::node_server::NodeServer::new(node)),
        SUPPORTED_VERSIONS,
    )
}

/// The registration service.
#[derive(Debug)]
pub struct Registration {
    /// The driver name.
    pub driver_name: String,
    /// The DRA socket.
    pub endpoint: PathBuf,
    /// Set once the kubelet says it registered us.
    pub registered: Arc<AtomicBool>,
    /// `supported_versions`: [`SUPPORTED_VERSIONS`] or [`STRUCTURED_SUPPORTED_VERSIONS`].
    pub supported_versions: &'static [&'static str],
    /// What can make `GetInfo` fail.
    pub hook: Arc<dyn FaultHook>,
}

#[tonic::async_trait]
impl reg::registration_server::Registration for Registration {
    async fn get_info(
        &self,
        _: Request<reg::InfoRequest>,
    ) -> Result<Response<reg::PluginInfo>, Status> {
        if let Err(message) = self.hook.get_info() {
            warn!(%message, "GetInfo fails as the fault hook asks");
            return Err(Status::unavailable(message));
        }
        Ok(Response::new(reg::PluginInfo {
            r#type: DRA_PLUGIN_TYPE.to_owned(),
            name: self.driver_name.clone(),
            endpoint: self.endpoint.to_string_lossy().into_owned(),
            supported_versions: self
                .supported_versions
                .iter()
                .map(|v| v.to_string())
                .collect(),
        }))
    }

    async fn notify_registration_status(
        &self,
        request: Request<reg::RegistrationStatus>,
    ) -> Result<Response<reg::RegistrationStatusResponse>, Status> {
        let status = request.into_inner();
        if status.plugin_registered {
            info!("kubelet registered the plugin");
        } else {
            error!(error = %status.error, "kubelet refused to register the plugin");
        }
        self.registered
            .store(status.plugin_registered, Ordering::SeqCst);
        Ok(Response::new(reg::RegistrationStatusResponse {}))
    }
}

/// What the node services share: the claims' state and files, and the counters.
#[derive(Debug)]
pub struct NodeService<D: DeviceProfile> {
    /// The state and files.
    pub store: Arc<ClaimStore<D>>,
    /// Counters and latencies.
    pub metrics: Arc<Metrics>,
}

impl<D: DeviceProfile> Clone for NodeService<D> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            metrics: self.metrics.clone(),
        }
    }
}

/// One claim's outcome in a batch.
type Outcome<T> = Result<T, ClaimError>;

/// A batch as the kubelet reads the answer — a map with one entry per claim uid: a uid
/// sent twice with the same contents is one claim; sent with different contents it is
/// refused and nothing is done for it, so what the plugin did and its one answer agree.
fn one_per_uid<C: PartialEq>(
    claims: Vec<C>,
    uid: impl Fn(&C) -> &str,
) -> (Vec<C>, Vec<(String, ClaimError)>) {
    let mut unique: Vec<C> = Vec::with_capacity(claims.len());
    let mut conflicting: Vec<String> = Vec::new();
    for claim in claims {
        match unique.iter().find(|u| uid(u) == uid(&claim)) {
            None => unique.push(claim),
            Some(first) if *first == claim => {}
            Some(_) => {
                let id = uid(&claim).to_string();
                if !conflicting.contains(&id) {
                    conflicting.push(id);
                }
            }
        }
    }
    unique.retain(|c| !conflicting.iter().any(|id| id == uid(c)));
    let refused = conflicting
        .into_iter()
        .map(|id| {
            let error = ClaimError::Duplicate(id.clone());
            (id, error)
        })
        .collect();
    (unique, refused)
}

impl<D: DeviceProfile> NodeService<D> {
    /// Prepares the claims the profile read (`Err`s are passed through); one outcome per
    /// claim, in order, each counted.
    async fn prepare(
        &self,
        read: Vec<Outcome<(ClaimRef, D::Prepared)>>,
    ) -> Result<Vec<Outcome<(ClaimRef, D::Prepared)>>, Status> {
        let requests: Vec<(ClaimRef, D::Prepared)> = read
            .iter()
            .filter_map(|r| r.as_ref().ok().cloned())
            .collect();
        let results = self.store.prepare_claims(requests.clone()).await;
        let mut done = requests
            .into_iter()
            .zip(results)
            .map(|(r, o)| o.map(|()| r));
        let outcomes: Vec<Outcome<(ClaimRef, D::Prepared)>> = read
            .into_iter()
            .map(|r| match r {
                Ok(_) => done.next().unwrap_or_else(|| {
                    Err(ClaimError::Read {
                        claim: String::new(),
                        reason: "internal error: claim not handled".into(),
                    })
                }),
                Err(e) => Err(e),
            })
            .collect();
        for o in &outcomes {
            self.metrics.claim("prepare", o);
            if let Err(e) = o {
                warn!(error = %e, "claim not prepared");
            }
        }
        Ok(outcomes)
    }

    /// Unprepares claims; one outcome per claim, in order, each counted.
    async fn unprepare(&self, claims: Vec<Outcome<ClaimRef>>) -> Result<Vec<Outcome<()>>, Status> {
        let requests: Vec<ClaimRef> = claims
            .iter()
            .filter_map(|c| c.as_ref().ok().cloned())
            .collect();
        let mut done = self.store.unprepare_claims(requests).await.into_iter();
        let outcomes: Vec<Outcome<()>> = claims
            .into_iter()
            .map(|c| match c {
                Ok(_) => done.next().unwrap_or(Ok(())),
                Err(e) => Err(e),
            })
            .collect();
        for o in &outcomes {
            self.metrics.claim("unprepare", o);
            if let Err(e) = o {
                warn!(error = %e, "claim not unprepared");
            }
        }
        Ok(outcomes)
    }

    /// Classic: what the profile makes of a claim's allocation handle.
    #[cfg(feature = "classic")]
    fn read_handle(
        &self,
        uid: &str,
        namespace: &str,
        name: &str,
        handle: &str,
    ) -> Outcome<(ClaimRef, D::Prepared)> {
        let claim = ClaimRef::new(uid, namespace, name)?;
        let wanted = self
            .store
            .profile()
            .prepare_handle(&claim, handle)
            .map_err(|source| ClaimError::Device {
                claim: claim.to_string(),
                source,
            })?;
        Ok((claim, wanted))
    }

    /// The ids a classic kubelet gets: the common device (if any) and the claim's.
    #[cfg(feature = "classic")]
    fn claim_ids(&self, claim: &ClaimRef, prepared: &D::Prepared) -> Vec<String> {
        let names = self.store.profile().claim_cdi_devices(&claim.uid, prepared);
        self.store.qualified_ids(names)
    }
}

/// Binds a unix socket at `path`, replacing a stale one left by a crash. The socket is
/// bound, restricted and listening under a hidden name first, then renamed into place,
/// so whoever sees `path` appear can connect at once: a kubelet that dialed between
/// `bind` and `listen` got "connection refused" (seen on a loaded CI machine). The
/// hidden name is a dot (the kubelet's plugin watcher ignores such names) and random
/// characters, no longer than the file name: a path that fits a socket address still
/// does (107 bytes).
pub fn bind(path: &Path) -> std::io::Result<tokio::net::UnixListener> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{}: not a socket file path", path.display()),
        ));
    };
    crate::fsutil::create_dir(dir)?;
    let keep = name.len().saturating_sub(1).clamp(1, 12);
    let random: String = uuid::Uuid::new_v4()
        .simple()
        .to_string()
        .chars()
        .take(keep)
        .collect();
    let hidden = dir.join(format!(".{random}"));
    let listener = tokio::net::UnixListener::bind(&hidden)?;
    let placed =
        crate::fsutil::restrict_socket(&hidden).and_then(|()| std::fs::rename(&hidden, path));
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&hidden);
        return Err(e);
    }
    Ok(listener)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_socket_appears_listening_with_its_mode_and_replaces_a_stale_one() {
        use std::os::unix::fs::{FileTypeExt, PermissionsExt};
        let dir = tempfile::tempdir().unwrap();
        // A path at the limit of a socket address (107 bytes) fits.
        let registry = dir.path().join("registry");
        let room = 107 - registry.as_os_str().len() - "/.sock".len();
        let path = registry.join(format!("{}.sock", "d".repeat(room)));
        assert_eq!(path.as_os_str().len(), 107);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "a stale file").unwrap();
        let listener = bind(&path).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(
            meta.permissions().mode() & 0o777,
            crate::fsutil::SOCKET_MODE
        );
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [path.file_name().unwrap()], "no hidden name left");
        // Connectable at once, at the final path.
        let (connected, accepted) =
            tokio::join!(tokio::net::UnixStream::connect(&path), listener.accept());
        connected.unwrap();
        accepted.unwrap();
    }

    fn claim(uid: &str, handle: &str) -> dra_v1::Claim {
        dra_v1::Claim {
            namespace: "ns".into(),
            uid: uid.into(),
            name: format!("c-{handle}"),
        }
    }

    #[test]
    fn a_batch_has_one_claim_per_uid() {
        let (unique, refused) = one_per_uid(
            vec![
                claim("a", "h"),
                claim("b", "h1"),
                claim("a", "h"),
                claim("b", "h2"),
                claim("c", "h"),
                claim("b", "h1"),
            ],
            |c| &c.uid,
        );
        let uids: Vec<&str> = unique.iter().map(|c| c.uid.as_str()).collect();
        assert_eq!(
            uids,
            ["a", "c"],
            "identical repeats merged, conflicting ones dropped"
        );
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].0, "b");
        assert!(
            refused[0].1.to_string().contains("more than once"),
            "{}",
            refused[0].1
        );
        assert_eq!(refused[0].1.reason(), "duplicate");
    }
}
