//! The device health stream (`DRAResourceHealth`, v1alpha1 and v1): the health of every
//! device of the node's pool as the hook says (healthy without one), sent at once, after
//! every change the hook reports, and every [`REFRESH`] so the kubelet never times a
//! device out (its default timeout is 30 s, `DefaultHealthTimeout`).

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dra_kubelet_proto::{dra_health_v1, dra_health_v1alpha1};
use futures::{Stream, StreamExt};
use tonic::{Request, Response, Status};
use tracing::info;

use crate::hooks::{FaultHook, HealthStatus};
use crate::slice_controller::Inventory;

/// How often the whole list is sent again without a change.
pub const REFRESH: Duration = Duration::from_secs(10);

/// The health service of one node's pool.
#[derive(Clone)]
pub struct DeviceHealthService {
    /// The pool (the node).
    pub pool: String,
    /// The pool's devices and their health as the driver reports it.
    pub inventory: Arc<dyn Inventory>,
    /// Faults that make devices unhealthy.
    pub hook: Arc<dyn FaultHook>,
    /// Turns `true` at shutdown: the streams end, so the server's graceful shutdown
    /// (which waits for every open stream) is not held up by a kubelet's watch.
    pub stopping: tokio::sync::watch::Receiver<bool>,
}

/// One device's report, version-neutral: (device, health, message).
type Report = (String, HealthStatus, Option<String>);

impl std::fmt::Debug for DeviceHealthService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceHealthService")
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

impl DeviceHealthService {
    /// Every device the pool has now, the worse of the driver's and the hook's report.
    fn snapshot(&self) -> Vec<Report> {
        self.inventory
            .devices()
            .into_iter()
            .map(|d| {
                let (health, message) =
                    HealthStatus::worse(self.inventory.health(&d.name), self.hook.health(&d.name));
                (d.name, health, message)
            })
            .collect()
    }

    /// The reports, now and after every change or [`REFRESH`], until the kubelet hangs up
    /// or the plugin stops.
    fn reports(&self) -> impl Stream<Item = Vec<Report>> + Send + 'static {
        let service = self.clone();
        let mut stopping = self.stopping.clone();
        // A stream that ends would wake the loop at once, forever.
        let changes = futures::stream::select(self.hook.changes(), self.inventory.changes())
            .chain(futures::stream::pending())
            .boxed();
        futures::stream::unfold(
            (service, changes, true),
            |(service, mut changes, first)| async move {
                if !first {
                    let _ = tokio::time::timeout(REFRESH, changes.next()).await;
                }
                let snapshot = service.snapshot();
                Some((snapshot, (service, changes, false)))
            },
        )
        .take_until(async move {
            let _ = stopping.wait_for(|s| *s).await;
        })
    }
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// One implementation per package; the messages are the same.
macro_rules! health_service {
    ($pkg:ident) => {
        #[tonic::async_trait]
        impl $pkg::dra_resource_health_server::DraResourceHealth for DeviceHealthService {
            type NodeWatchResourcesStream = Pin<
                Box<dyn Stream<Item = Result<$pkg::NodeWatchResourcesResponse, Status>> + Send>,
            >;

            async fn node_watch_resources(
                &self,
                _: Request<$pkg::NodeWatchResourcesRequest>,
            ) -> Result<Response<Self::NodeWatchResourcesStream>, Status> {
                info!(api = stringify!($pkg), "kubelet watches device health");
                let pool = self.pool.clone();
                let stream = futures::StreamExt::map(self.reports(), move |reports| {
                    let at = now();
                    Ok($pkg::NodeWatchResourcesResponse {
                        devices: reports
                            .into_iter()
                            .map(|(device, health, message)| $pkg::DeviceHealth {
                                device: Some($pkg::DeviceIdentifier {
                                    pool_name: pool.clone(),
                                    device_name: device,
                                }),
                                health: match health {
                                    HealthStatus::Healthy => $pkg::HealthStatus::Healthy,
                                    HealthStatus::Unhealthy => $pkg::HealthStatus::Unhealthy,
                                    HealthStatus::Unknown => $pkg::HealthStatus::Unknown,
                                } as i32,
                                last_updated_time: at,
                                health_check_timeout_seconds: 0,
                                message: message.unwrap_or_default(),
                            })
                            .collect(),
                    })
                });
                Ok(Response::new(Box::pin(stream)))
            }
        }
    };
}

health_service!(dra_health_v1alpha1);
health_service!(dra_health_v1);
