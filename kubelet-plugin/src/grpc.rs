//! The kubelet-facing gRPC services: registration, and on one socket next to the gRPC
//! health service either the classic DRA node services (`v1alpha2.Node`,
//! `v1alpha3.Node`) or the structured ones (`dra.v1beta1.DRAPlugin`, `dra.v1.DRAPlugin`,
//! one handler for both). Thin: they translate messages, let the device profile read
//! each claim, and call [`Driver`] on a blocking thread; nothing here knows the device.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use fake_dra_proto::{
    DRA_PLUGIN_TYPE, SUPPORTED_V1, SUPPORTED_V1BETA1, dra_v1, dra_v1beta1,
    pluginregistration as reg, v1alpha2, v1alpha3,
};
use futures::StreamExt;
use tonic::{Request, Response, Status};
use tracing::{error, info, warn};

use crate::allocation;
use crate::claim::{COMMON_DEVICE, ClaimError, ClaimRef};
use crate::claim_reader::ClaimReader;
use crate::driver::Driver;
use crate::metrics::Metrics;
use crate::profile::DeviceProfile;

/// The versions classic kubelets (1.27–1.31) accept: each entry is parsed as a semantic
/// version, and 1.0.0 means "the classic node services".
pub const SUPPORTED_VERSIONS: &[&str] = &["1.0.0"];

/// What structured mode advertises: exactly the `DRAPlugin` services it serves, newest
/// first (1.34+ kubelets take the first they know; 1.32–1.33 look for v1beta1).
pub const STRUCTURED_SUPPORTED_VERSIONS: &[&str] = &[SUPPORTED_V1, SUPPORTED_V1BETA1];

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
}

#[tonic::async_trait]
impl reg::registration_server::Registration for Registration {
    async fn get_info(
        &self,
        _: Request<reg::InfoRequest>,
    ) -> Result<Response<reg::PluginInfo>, Status> {
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
    pub driver: Arc<Driver<D>>,
    /// Counters and latencies.
    pub metrics: Arc<Metrics>,
}

impl<D: DeviceProfile> Clone for NodeService<D> {
    fn clone(&self) -> Self {
        Self {
            driver: self.driver.clone(),
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
    /// Prepares the claims the profile read (`Err`s are passed through), on a blocking
    /// thread; one outcome per claim, in order, each counted.
    async fn prepare(
        &self,
        read: Vec<Outcome<(ClaimRef, D::Prepared)>>,
    ) -> Result<Vec<Outcome<(ClaimRef, D::Prepared)>>, Status> {
        let requests: Vec<(ClaimRef, D::Prepared)> = read
            .iter()
            .filter_map(|r| r.as_ref().ok().cloned())
            .collect();
        let driver = self.driver.clone();
        let mut done = tokio::task::spawn_blocking(move || {
            let results = driver.prepare(&requests);
            requests
                .into_iter()
                .zip(results)
                .map(|(r, o)| o.map(|()| r))
                .collect::<Vec<_>>()
        })
        .await
        .map_err(|e| Status::internal(format!("prepare task failed: {e}")))?
        .into_iter();
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
        let driver = self.driver.clone();
        let mut done = tokio::task::spawn_blocking(move || driver.unprepare(&requests))
            .await
            .map_err(|e| Status::internal(format!("unprepare task failed: {e}")))?
            .into_iter();
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
    fn read_handle(
        &self,
        uid: &str,
        namespace: &str,
        name: &str,
        handle: &str,
    ) -> Outcome<(ClaimRef, D::Prepared)> {
        let claim = ClaimRef::new(uid, namespace, name)?;
        let wanted = self
            .driver
            .profile()
            .prepare_handle(&claim, handle)
            .map_err(|source| ClaimError::Device {
                claim: claim.to_string(),
                source,
            })?;
        Ok((claim, wanted))
    }

    /// The ids a classic kubelet gets: the common device and the claim's.
    fn claim_ids(&self, claim: &ClaimRef, prepared: &D::Prepared) -> Vec<String> {
        let kind = self.driver.kind();
        std::iter::once(COMMON_DEVICE.to_string())
            .chain(
                self.driver
                    .profile()
                    .claim_cdi_devices(&claim.uid, prepared),
            )
            .map(|name| kind.qualified(&name))
            .collect()
    }
}

#[tonic::async_trait]
impl<D: DeviceProfile> v1alpha2::node_server::Node for NodeService<D> {
    async fn node_prepare_resource(
        &self,
        request: Request<v1alpha2::NodePrepareResourceRequest>,
    ) -> Result<Response<v1alpha2::NodePrepareResourceResponse>, Status> {
        let start = Instant::now();
        let r = request.into_inner();
        let read = self.read_handle(
            &r.claim_uid,
            &r.namespace,
            &r.claim_name,
            &r.resource_handle,
        );
        let result = self.prepare(vec![read]).await?.pop();
        self.metrics
            .observe("NodePrepareResource", start.elapsed().as_secs_f64());
        match result {
            Some(Ok((claim, prepared))) => {
                Ok(Response::new(v1alpha2::NodePrepareResourceResponse {
                    cdi_devices: self.claim_ids(&claim, &prepared),
                }))
            }
            Some(Err(e)) => Err(Status::failed_precondition(e.to_string())),
            None => Err(Status::internal("no result")),
        }
    }

    async fn node_unprepare_resource(
        &self,
        request: Request<v1alpha2::NodeUnprepareResourceRequest>,
    ) -> Result<Response<v1alpha2::NodeUnprepareResourceResponse>, Status> {
        let start = Instant::now();
        let r = request.into_inner();
        let claim = ClaimRef::new(&r.claim_uid, &r.namespace, &r.claim_name);
        let result = self.unprepare(vec![claim]).await?.pop();
        self.metrics
            .observe("NodeUnprepareResource", start.elapsed().as_secs_f64());
        match result {
            Some(Ok(())) => Ok(Response::new(v1alpha2::NodeUnprepareResourceResponse {})),
            Some(Err(e)) => Err(Status::failed_precondition(e.to_string())),
            None => Err(Status::internal("no result")),
        }
    }
}

#[tonic::async_trait]
impl<D: DeviceProfile> v1alpha3::node_server::Node for NodeService<D> {
    type NodeListAndWatchResourcesStream =
        tonic::codegen::BoxStream<v1alpha3::NodeListAndWatchResourcesResponse>;

    async fn node_prepare_resources(
        &self,
        request: Request<v1alpha3::NodePrepareResourcesRequest>,
    ) -> Result<Response<v1alpha3::NodePrepareResourcesResponse>, Status> {
        let start = Instant::now();
        let (claims, refused) = one_per_uid(request.into_inner().claims, |c| &c.uid);
        let read = claims
            .iter()
            .map(|c| self.read_handle(&c.uid, &c.namespace, &c.name, &c.resource_handle))
            .collect();
        let outcomes = self.prepare(read).await?;
        let mut response = v1alpha3::NodePrepareResourcesResponse::default();
        for (uid, error) in refused {
            self.metrics.claim::<()>("prepare", &Err(error.clone()));
            response.insert(
                uid,
                v1alpha3::NodePrepareResourceResponse {
                    cdi_devices: vec![],
                    error: error.to_string(),
                },
            );
        }
        for (claim, outcome) in claims.into_iter().zip(outcomes) {
            let entry = match outcome {
                Ok((c, prepared)) => v1alpha3::NodePrepareResourceResponse {
                    cdi_devices: self.claim_ids(&c, &prepared),
                    error: String::new(),
                },
                Err(e) => v1alpha3::NodePrepareResourceResponse {
                    cdi_devices: vec![],
                    error: e.to_string(),
                },
            };
            response.insert(claim.uid, entry);
        }
        self.metrics
            .observe("NodePrepareResources", start.elapsed().as_secs_f64());
        Ok(Response::new(response))
    }

    async fn node_unprepare_resources(
        &self,
        request: Request<v1alpha3::NodeUnprepareResourcesRequest>,
    ) -> Result<Response<v1alpha3::NodeUnprepareResourcesResponse>, Status> {
        let start = Instant::now();
        let (claims, refused) = one_per_uid(request.into_inner().claims, |c| &c.uid);
        let refs = claims
            .iter()
            .map(|c| ClaimRef::new(&c.uid, &c.namespace, &c.name))
            .collect();
        let outcomes = self.unprepare(refs).await?;
        let mut response = v1alpha3::NodeUnprepareResourcesResponse::default();
        for (uid, error) in refused {
            self.metrics.claim::<()>("unprepare", &Err(error.clone()));
            response.insert(
                uid,
                v1alpha3::NodeUnprepareResourceResponse {
                    error: error.to_string(),
                },
            );
        }
        for (claim, outcome) in claims.into_iter().zip(outcomes) {
            response.insert(
                claim.uid,
                v1alpha3::NodeUnprepareResourceResponse {
                    error: outcome.err().map(|e| e.to_string()).unwrap_or_default(),
                },
            );
        }
        self.metrics
            .observe("NodeUnprepareResources", start.elapsed().as_secs_f64());
        Ok(Response::new(response))
    }

    async fn node_list_and_watch_resources(
        &self,
        _: Request<v1alpha3::NodeListAndWatchResourcesRequest>,
    ) -> Result<Response<Self::NodeListAndWatchResourcesStream>, Status> {
        // The kubelet takes Unimplemented as "this plugin publishes no structured resources".
        Err(Status::unimplemented(
            "NodeListAndWatchResources: this driver uses classic (controller) allocation",
        ))
    }
}

/// How many claims of one structured batch are read from the API at a time.
const MAX_CONCURRENT_READS: usize = 16;

/// One prepared device of a structured claim, version-neutral.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceOutcome {
    /// The request it was allocated for.
    pub request: String,
    /// The pool (this node).
    pub pool: String,
    /// The device name in the pool.
    pub device: String,
    /// The CDI ids to inject for it.
    pub cdi_device_ids: Vec<String>,
}

/// The structured `DRAPlugin` service (v1beta1 and v1): reads each claim's allocation
/// from the API, lets the profile read it, then prepares through the same path as
/// classic.
#[derive(Debug)]
pub struct DraPluginService<D: DeviceProfile> {
    /// The shared prepare/unprepare path.
    pub node: NodeService<D>,
    /// Where claims are read.
    pub claims: ClaimReader,
    /// Our driver name, to pick our results.
    pub driver_name: String,
    /// This node: its pool.
    pub node_name: String,
}

impl<D: DeviceProfile> Clone for DraPluginService<D> {
    fn clone(&self) -> Self {
        Self {
            node: self.node.clone(),
            claims: self.claims.clone(),
            driver_name: self.driver_name.clone(),
            node_name: self.node_name.clone(),
        }
    }
}

/// A structured claim as the profile read it, with the devices the kubelet asks about.
type ReadClaim<P> = (ClaimRef, P, Vec<crate::profile::AllocatedDevice>);

impl<D: DeviceProfile> DraPluginService<D> {
    /// Reads one claim and lets the profile say what preparing it means.
    async fn read(&self, claim: ClaimRef) -> Outcome<ReadClaim<D::Prepared>> {
        let fetched = self
            .claims
            .get(&claim.namespace, &claim.name)
            .await
            .map_err(|e| ClaimError::Read {
                claim: claim.to_string(),
                reason: e.to_string(),
            })?;
        let allocation = allocation::ours(&self.driver_name, &self.node_name, &claim, &fetched)?;
        let prepared = self
            .node
            .driver
            .profile()
            .prepare_allocation(&claim, &allocation)
            .map_err(|source| ClaimError::Device {
                claim: claim.to_string(),
                source,
            })?;
        Ok((claim, prepared, allocation.devices))
    }

    /// Prepares a batch; one outcome per claim, in order. A claim that cannot be read or
    /// resolved fails alone; the others go on. The claims are read concurrently — a few
    /// API round trips for the batch instead of one per claim — but at most
    /// [`MAX_CONCURRENT_READS`] at a time, so a huge batch cannot open a connection per
    /// claim.
    pub async fn prepare(
        &self,
        claims: Vec<Outcome<ClaimRef>>,
    ) -> Result<Vec<Outcome<Vec<DeviceOutcome>>>, Status> {
        let reads: Vec<_> = claims
            .into_iter()
            .map(|c| async move {
                match c {
                    Ok(claim) => self.read(claim).await,
                    Err(e) => Err(e),
                }
            })
            .collect();
        let read: Vec<Outcome<ReadClaim<D::Prepared>>> = futures::stream::iter(reads)
            .buffered(MAX_CONCURRENT_READS)
            .collect()
            .await;
        let devices: Vec<Vec<crate::profile::AllocatedDevice>> = read
            .iter()
            .map(|r| r.as_ref().map(|(_, _, d)| d.clone()).unwrap_or_default())
            .collect();
        let outcomes = self
            .node
            .prepare(
                read.into_iter()
                    .map(|r| r.map(|(c, p, _)| (c, p)))
                    .collect(),
            )
            .await?;
        Ok(outcomes
            .into_iter()
            .zip(devices)
            .map(|(o, devices)| {
                o.and_then(|(claim, prepared)| self.device_outcomes(&claim, &prepared, devices))
            })
            .collect())
    }

    /// Each allocated device answers with the common device and the profile's devices for
    /// it, so the kubelet can give a container the devices of the requests it names.
    fn device_outcomes(
        &self,
        claim: &ClaimRef,
        prepared: &D::Prepared,
        devices: Vec<crate::profile::AllocatedDevice>,
    ) -> Outcome<Vec<DeviceOutcome>> {
        let kind = self.node.driver.kind();
        let profile = self.node.driver.profile();
        devices
            .into_iter()
            .map(|d| {
                let names = profile
                    .device_cdi_devices(&claim.uid, prepared, &d.device)
                    .ok_or_else(|| ClaimError::Device {
                        claim: claim.to_string(),
                        source: crate::profile::ProfileError::new(
                            "bad_cdi_name",
                            format!("the device profile has no CDI device for {}", d.device),
                        ),
                    })?;
                let cdi_device_ids = std::iter::once(COMMON_DEVICE.to_string())
                    .chain(names)
                    .map(|name| kind.qualified(&name))
                    .collect();
                Ok(DeviceOutcome {
                    request: d.request,
                    pool: self.node_name.clone(),
                    device: d.device,
                    cdi_device_ids,
                })
            })
            .collect()
    }
}

/// Both `DRAPlugin` packages have the same messages: one implementation per package,
/// converting to and from the neutral types.
macro_rules! dra_plugin {
    ($pkg:ident) => {
        // `..Default::default()` fills v1's `share_id`; v1beta1 has nothing to fill.
        #[allow(clippy::needless_update)]
        #[tonic::async_trait]
        impl<D: DeviceProfile> $pkg::dra_plugin_server::DraPlugin for DraPluginService<D> {
            async fn node_prepare_resources(
                &self,
                request: Request<$pkg::NodePrepareResourcesRequest>,
            ) -> Result<Response<$pkg::NodePrepareResourcesResponse>, Status> {
                let start = Instant::now();
                let (claims, refused) = one_per_uid(request.into_inner().claims, |c| &c.uid);
                let refs = claims
                    .iter()
                    .map(|c| ClaimRef::new(&c.uid, &c.namespace, &c.name))
                    .collect();
                let outcomes = self.prepare(refs).await?;
                let mut response = $pkg::NodePrepareResourcesResponse::default();
                for (uid, error) in refused {
                    self.node
                        .metrics
                        .claim::<()>("prepare", &Err(error.clone()));
                    response.insert(
                        uid,
                        $pkg::NodePrepareResourceResponse {
                            devices: vec![],
                            error: error.to_string(),
                        },
                    );
                }
                for (claim, outcome) in claims.into_iter().zip(outcomes) {
                    let entry = match outcome {
                        Ok(devices) => $pkg::NodePrepareResourceResponse {
                            devices: devices
                                .into_iter()
                                .map(|d| $pkg::Device {
                                    request_names: vec![d.request],
                                    pool_name: d.pool,
                                    device_name: d.device,
                                    cdi_device_ids: d.cdi_device_ids,
                                    ..Default::default()
                                })
                                .collect(),
                            error: String::new(),
                        },
                        Err(e) => $pkg::NodePrepareResourceResponse {
                            devices: vec![],
                            error: e.to_string(),
                        },
                    };
                    response.insert(claim.uid, entry);
                }
                self.node
                    .metrics
                    .observe("NodePrepareResources", start.elapsed().as_secs_f64());
                Ok(Response::new(response))
            }

            async fn node_unprepare_resources(
                &self,
                request: Request<$pkg::NodeUnprepareResourcesRequest>,
            ) -> Result<Response<$pkg::NodeUnprepareResourcesResponse>, Status> {
                let start = Instant::now();
                let (claims, refused) = one_per_uid(request.into_inner().claims, |c| &c.uid);
                let refs = claims
                    .iter()
                    .map(|c| ClaimRef::new(&c.uid, &c.namespace, &c.name))
                    .collect();
                let outcomes = self.node.unprepare(refs).await?;
                let mut response = $pkg::NodeUnprepareResourcesResponse::default();
                for (uid, error) in refused {
                    self.node
                        .metrics
                        .claim::<()>("unprepare", &Err(error.clone()));
                    response.insert(
                        uid,
                        $pkg::NodeUnprepareResourceResponse {
                            error: error.to_string(),
                        },
                    );
                }
                for (claim, outcome) in claims.into_iter().zip(outcomes) {
                    response.insert(
                        claim.uid,
                        $pkg::NodeUnprepareResourceResponse {
                            error: outcome.err().map(|e| e.to_string()).unwrap_or_default(),
                        },
                    );
                }
                self.node
                    .metrics
                    .observe("NodeUnprepareResources", start.elapsed().as_secs_f64());
                Ok(Response::new(response))
            }
        }
    };
}

dra_plugin!(dra_v1beta1);
dra_plugin!(dra_v1);

/// Binds a unix socket at `path`, replacing a stale one left by a crash.
pub fn bind(path: &Path) -> std::io::Result<tokio::net::UnixListener> {
    if let Some(dir) = path.parent() {
        crate::fsutil::create_dir(dir)?;
    }
    crate::fsutil::remove_if_exists(path)?;
    let listener = tokio::net::UnixListener::bind(path)?;
    crate::fsutil::restrict_socket(path)?;
    Ok(listener)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn claim(uid: &str, handle: &str) -> v1alpha3::Claim {
        v1alpha3::Claim {
            namespace: "ns".into(),
            uid: uid.into(),
            name: format!("c-{uid}"),
            resource_handle: handle.into(),
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
