//! The kubelet-facing gRPC services: registration, and the classic DRA node services
//! (`v1alpha2.Node`, `v1alpha3.Node`) on one socket, next to the gRPC health service.
//! Thin: they translate messages and call [`Driver`] on a blocking thread.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use fake_dra_proto::{DRA_PLUGIN_TYPE, pluginregistration as reg, v1alpha2, v1alpha3};
use tonic::{Request, Response, Status};
use tracing::{error, info, warn};

use crate::claims::ClaimRef;
use crate::driver::{Driver, PrepareRequest};
use crate::metrics::Metrics;

/// The versions classic kubelets (1.27–1.31) accept: each entry is parsed as a semantic
/// version, and 1.0.0 means "the classic node services".
pub const SUPPORTED_VERSIONS: &[&str] = &["1.0.0"];

/// The registration service.
#[derive(Debug)]
pub struct Registration {
    /// The driver name.
    pub driver_name: String,
    /// The DRA socket.
    pub endpoint: PathBuf,
    /// Set once the kubelet says it registered us.
    pub registered: Arc<AtomicBool>,
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
            supported_versions: SUPPORTED_VERSIONS.iter().map(|v| v.to_string()).collect(),
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
            handle: r.resource_handle,
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
        let claims = request.into_inner().claims;
        let requests = claims
            .iter()
            .map(|c| PrepareRequest {
                claim: claim_ref(c),
                handle: c.resource_handle.clone(),
            })
            .collect();
        let results = self.prepare(requests).await?;
        let mut response = v1alpha3::NodePrepareResourcesResponse::default();
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
            response.claims.insert(claim.uid, entry);
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
        let claims = request.into_inner().claims;
        let results = self
            .unprepare(claims.iter().map(claim_ref).collect())
            .await?;
        let mut response = v1alpha3::NodeUnprepareResourcesResponse::default();
        for (claim, result) in claims.into_iter().zip(results) {
            response.claims.insert(
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

/// Binds a unix socket at `path`, replacing a stale one left by a crash.
pub fn bind(path: &Path) -> std::io::Result<tokio::net::UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    crate::fsutil::remove_if_exists(path)?;
    tokio::net::UnixListener::bind(path)
}
