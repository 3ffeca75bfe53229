//! The kubelet-facing gRPC services: registration, and on one socket next to the gRPC
//! health service either the classic DRA node services (`v1alpha2.Node`,
//! `v1alpha3.Node`) or the structured ones (`dra.v1beta1.DRAPlugin`, `dra.v1.DRAPlugin`,
//! one handler for both). Thin: they translate messages and call [`Driver`] on a
//! blocking thread.

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

use crate::claims::{ClaimRef, describe, validate_claim_uid};
use crate::driver::{Allocation, Driver, PrepareRequest};
use crate::metrics::Metrics;
use crate::resourceclaims::ClaimReader;
use crate::structured;

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

/// Both classic node services over one [`Driver`].
#[derive(Debug, Clone)]
pub struct NodeService {
    /// The state and files.
    pub driver: Arc<Driver>,
    /// Counters and latencies.
    pub metrics: Arc<Metrics>,
}

impl NodeService {
    async fn prepare(
        &self,
        requests: Vec<PrepareRequest>,
    ) -> Result<Vec<Result<Vec<String>, String>>, Status> {
        let driver = self.driver.clone();
        let results = tokio::task::spawn_blocking(move || driver.prepare(&requests))
            .await
            .map_err(|e| Status::internal(format!("prepare task failed: {e}")))?;
        for r in &results {
            self.metrics.claim("prepare", r.is_ok());
            if let Err(e) = r {
                warn!(error = %e, "claim not prepared");
            }
        }
        Ok(results)
    }

    async fn unprepare(&self, requests: Vec<ClaimRef>) -> Result<Vec<Result<(), String>>, Status> {
        let driver = self.driver.clone();
        let results = tokio::task::spawn_blocking(move || driver.unprepare(&requests))
            .await
            .map_err(|e| Status::internal(format!("unprepare task failed: {e}")))?;
        for r in &results {
            self.metrics.claim("unprepare", r.is_ok());
            if let Err(e) = r {
                warn!(error = %e, "claim not unprepared");
            }
        }
        Ok(results)
    }
}

#[tonic::async_trait]
impl v1alpha2::node_server::Node for NodeService {
    async fn node_prepare_resource(
        &self,
        request: Request<v1alpha2::NodePrepareResourceRequest>,
    ) -> Result<Response<v1alpha2::NodePrepareResourceResponse>, Status> {
        let start = Instant::now();
        let r = request.into_inner();
        let req = PrepareRequest {
            claim: ClaimRef {
                uid: r.claim_uid,
                namespace: r.namespace,
                name: r.claim_name,
            },
            allocation: Allocation::Handle(r.resource_handle),
        };
        let result = self.prepare(vec![req]).await?.pop();
        self.metrics
            .observe("NodePrepareResource", start.elapsed().as_secs_f64());
        match result {
            Some(Ok(cdi_devices)) => Ok(Response::new(v1alpha2::NodePrepareResourceResponse {
                cdi_devices,
            })),
            Some(Err(e)) => Err(Status::failed_precondition(e)),
            None => Err(Status::internal("no result")),
        }
    }

    async fn node_unprepare_resource(
        &self,
        request: Request<v1alpha2::NodeUnprepareResourceRequest>,
    ) -> Result<Response<v1alpha2::NodeUnprepareResourceResponse>, Status> {
        let start = Instant::now();
        let r = request.into_inner();
        let claim = ClaimRef {
            uid: r.claim_uid,
            namespace: r.namespace,
            name: r.claim_name,
        };
        let result = self.unprepare(vec![claim]).await?.pop();
        self.metrics
            .observe("NodeUnprepareResource", start.elapsed().as_secs_f64());
        match result {
            Some(Ok(())) => Ok(Response::new(v1alpha2::NodeUnprepareResourceResponse {})),
            Some(Err(e)) => Err(Status::failed_precondition(e)),
            None => Err(Status::internal("no result")),
        }
    }
}

/// A batch as the kubelet reads the answer — a map with one entry per claim uid: a uid
/// sent twice with the same contents is one claim; sent with different contents it is
/// refused and nothing is done for it, so what the plugin did and its one answer agree.
fn one_per_uid<C: PartialEq>(
    claims: Vec<C>,
    uid: impl Fn(&C) -> &str,
) -> (Vec<C>, Vec<(String, String)>) {
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
            let error = format!("claim uid {id} appears more than once in the request, with different contents; nothing was done for it");
            (id, error)
        })
        .collect();
    (unique, refused)
}

fn claim_ref(c: &v1alpha3::Claim) -> ClaimRef {
    ClaimRef {
        uid: c.uid.clone(),
        namespace: c.namespace.clone(),
        name: c.name.clone(),
    }
}

#[tonic::async_trait]
impl v1alpha3::node_server::Node for NodeService {
    type NodeListAndWatchResourcesStream =
        tonic::codegen::BoxStream<v1alpha3::NodeListAndWatchResourcesResponse>;

    async fn node_prepare_resources(
        &self,
        request: Request<v1alpha3::NodePrepareResourcesRequest>,
    ) -> Result<Response<v1alpha3::NodePrepareResourcesResponse>, Status> {
        let start = Instant::now();
        let (claims, refused) = one_per_uid(request.into_inner().claims, |c| &c.uid);
        let requests = claims
            .iter()
            .map(|c| PrepareRequest {
                claim: claim_ref(c),
                allocation: Allocation::Handle(c.resource_handle.clone()),
            })
            .collect();
        let results = self.prepare(requests).await?;
        let mut response = v1alpha3::NodePrepareResourcesResponse::default();
        for (uid, error) in refused {
            self.metrics.claim("prepare", false);
            response.insert(
                uid,
                v1alpha3::NodePrepareResourceResponse {
                    cdi_devices: vec![],
                    error,
                },
            );
        }
        for (claim, result) in claims.into_iter().zip(results) {
            let entry = match result {
                Ok(cdi_devices) => v1alpha3::NodePrepareResourceResponse {
                    cdi_devices,
                    error: String::new(),
                },
                Err(error) => v1alpha3::NodePrepareResourceResponse {
                    cdi_devices: vec![],
                    error,
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
        let results = self
            .unprepare(claims.iter().map(claim_ref).collect())
            .await?;
        let mut response = v1alpha3::NodeUnprepareResourcesResponse::default();
        for (uid, error) in refused {
            self.metrics.claim("unprepare", false);
            response.insert(uid, v1alpha3::NodeUnprepareResourceResponse { error });
        }
        for (claim, result) in claims.into_iter().zip(results) {
            response.insert(
                claim.uid,
                v1alpha3::NodeUnprepareResourceResponse {
                    error: result.err().unwrap_or_default(),
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
    /// The device as allocated.
    pub device: structured::PreparedDevice,
    /// The CDI ids to inject for it.
    pub cdi_device_ids: Vec<String>,
}

/// The structured `DRAPlugin` service (v1beta1 and v1) over one [`Driver`]: reads each
/// claim's allocation from the API, then prepares through the same path as classic.
#[derive(Debug, Clone)]
pub struct DraPluginService {
    /// The shared prepare/unprepare path.
    pub node: NodeService,
    /// Where claims are read.
    pub claims: ClaimReader,
    /// Our driver name, to pick our results.
    pub driver_name: String,
}

impl DraPluginService {
    /// Reads one claim and decides what preparing it means.
    async fn resolve(&self, claim: &ClaimRef) -> Result<structured::Resolved, String> {
        match self.claims.get(&claim.namespace, &claim.name).await {
            Err(e) => Err(format!(
                "claim {}: {e}",
                describe(&claim.uid, &claim.namespace, &claim.name)
            )),
            Ok(fetched) => structured::resolve(
                self.node.driver.inventory(),
                &self.driver_name,
                claim,
                &fetched,
            )
            .map_err(|e| e.to_string()),
        }
    }

    /// Prepares a batch; one result per claim, in order. A claim that cannot be read or
    /// resolved fails alone; the others go on.
    pub async fn prepare(
        &self,
        claims: &[ClaimRef],
    ) -> Result<Vec<Result<Vec<DeviceOutcome>, String>>, Status> {
        let mut results: Vec<Option<Result<Vec<DeviceOutcome>, String>>> = vec![None; claims.len()];
        // Before anything uses the uid (it names files).
        let mut valid = Vec::new();
        for (i, claim) in claims.iter().enumerate() {
            match validate_claim_uid(&claim.uid) {
                Ok(()) => valid.push((i, claim)),
                Err(e) => results[i] = Some(Err(e.to_string())),
            }
        }
        // The claims of a batch are read concurrently — a few API round trips for the batch
        // instead of one per claim — but at most MAX_CONCURRENT_READS at a time, so a huge
        // batch cannot open a connection per claim.
        let reads: Vec<_> = valid.iter().map(|(_, claim)| self.resolve(claim)).collect();
        let resolved: Vec<_> = futures::stream::iter(reads)
            .buffered(MAX_CONCURRENT_READS)
            .collect()
            .await;
        let mut requests = Vec::new();
        let mut pending = Vec::new();
        for ((i, claim), resolved) in valid.into_iter().zip(resolved) {
            match resolved {
                Err(e) => {
                    self.node.metrics.claim("prepare", false);
                    warn!(error = %e, "claim not prepared");
                    results[i] = Some(Err(e));
                }
                Ok(r) => {
                    requests.push(PrepareRequest {
                        claim: claim.clone(),
                        allocation: Allocation::Resolved(r.claim),
                    });
                    pending.push((i, r.devices));
                }
            }
        }
        let kind = self.node.driver.kind().clone();
        let prepared = self.node.prepare(requests.clone()).await?;
        for (((i, devices), request), outcome) in pending.into_iter().zip(&requests).zip(prepared) {
            let Allocation::Resolved(claim) = &request.allocation else {
                continue;
            };
            // Each device answers with its own parent's CDI device, so the kubelet can give
            // a container the devices of the requests it names.
            results[i] = Some(outcome.and_then(|_| {
                devices
                    .into_iter()
                    .map(|device| {
                        let ids = claim
                            .device_cdi_ids(&kind, &request.claim.uid, &device.parent)
                            .ok_or_else(|| {
                                format!(
                                    "internal error: device {} is not in claim {}",
                                    device.device, request.claim.uid
                                )
                            })?;
                        Ok(DeviceOutcome {
                            device,
                            cdi_device_ids: ids,
                        })
                    })
                    .collect()
            }));
        }
        Ok(results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err("internal error: claim not handled".into())))
            .collect())
    }
}

/// Both `DRAPlugin` packages have the same messages: one implementation per package,
/// converting to and from the neutral types.
macro_rules! dra_plugin {
    ($pkg:ident) => {
        // `..Default::default()` fills v1's `share_id`; v1beta1 has nothing to fill.
        #[allow(clippy::needless_update)]
        #[tonic::async_trait]
        impl $pkg::dra_plugin_server::DraPlugin for DraPluginService {
            async fn node_prepare_resources(
                &self,
                request: Request<$pkg::NodePrepareResourcesRequest>,
            ) -> Result<Response<$pkg::NodePrepareResourcesResponse>, Status> {
                let start = Instant::now();
                let (claims, refused) = one_per_uid(request.into_inner().claims, |c| &c.uid);
                let refs: Vec<ClaimRef> = claims
                    .iter()
                    .map(|c| ClaimRef {
                        uid: c.uid.clone(),
                        namespace: c.namespace.clone(),
                        name: c.name.clone(),
                    })
                    .collect();
                let results = self.prepare(&refs).await?;
                let mut response = $pkg::NodePrepareResourcesResponse::default();
                for (uid, error) in refused {
                    self.node.metrics.claim("prepare", false);
                    response.insert(
                        uid,
                        $pkg::NodePrepareResourceResponse {
                            devices: vec![],
                            error,
                        },
                    );
                }
                for (claim, result) in claims.into_iter().zip(results) {
                    let entry = match result {
                        Ok(devices) => $pkg::NodePrepareResourceResponse {
                            devices: devices
                                .into_iter()
                                .map(|d| $pkg::Device {
                                    request_names: vec![d.device.request],
                                    pool_name: d.device.pool,
                                    device_name: d.device.device,
                                    cdi_device_ids: d.cdi_device_ids,
                                    // v1's share_id: none, a fake device is whole.
                                    ..Default::default()
                                })
                                .collect(),
                            error: String::new(),
                        },
                        Err(error) => $pkg::NodePrepareResourceResponse {
                            devices: vec![],
                            error,
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
                    .map(|c| ClaimRef {
                        uid: c.uid.clone(),
                        namespace: c.namespace.clone(),
                        name: c.name.clone(),
                    })
                    .collect();
                let results = self.node.unprepare(refs).await?;
                let mut response = $pkg::NodeUnprepareResourcesResponse::default();
                for (uid, error) in refused {
                    self.node.metrics.claim("unprepare", false);
                    response.insert(uid, $pkg::NodeUnprepareResourceResponse { error });
                }
                for (claim, result) in claims.into_iter().zip(results) {
                    response.insert(
                        claim.uid,
                        $pkg::NodeUnprepareResourceResponse {
                            error: result.err().unwrap_or_default(),
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
        assert!(refused[0].1.contains("more than once"), "{}", refused[0].1);
    }
}
