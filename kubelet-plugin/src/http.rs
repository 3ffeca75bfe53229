//! `/healthz`, `/readyz` and `/metrics` over plain HTTP/1.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tracing::{debug, info};

use crate::metrics::Metrics;

fn respond(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
}

/// Serves until the task is dropped. `ready` is set once the plugin serves and its
/// NodeAllocationState is published.
pub async fn serve(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
) -> std::io::Result<()> {
    let addr: Option<SocketAddr> = listener.local_addr().ok();
    info!(?addr, "serving /healthz, /readyz, /metrics");
    loop {
        let (stream, _) = listener.accept().await?;
        let metrics = metrics.clone();
        let ready = ready.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<Incoming>| {
                let metrics = metrics.clone();
                let ready = ready.clone();
                async move {
                    Ok::<_, Infallible>(match req.uri().path() {
                        "/healthz" => respond(StatusCode::OK, "ok\n".into()),
                        "/readyz" if ready.load(Ordering::SeqCst) => {
                            respond(StatusCode::OK, "ok\n".into())
                        }
                        "/readyz" => respond(StatusCode::SERVICE_UNAVAILABLE, "not ready\n".into()),
                        "/metrics" => respond(StatusCode::OK, metrics.encode()),
                        _ => respond(StatusCode::NOT_FOUND, "not found\n".into()),
                    })
                }
            });
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                debug!(error = %e, "http connection ended");
            }
        });
    }
}
