//! `/healthz`, `/readyz` and `/metrics` over HTTP/1, on a [`conn::incoming`] loop.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tracing::{debug, info};

use crate::conn::{self, Pool};

/// A client that has not sent a request's headers by then is cut off (drip-fed headers
/// would otherwise hold a connection past the idle timeout).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// What the endpoints answer.
#[derive(Clone)]
pub struct Endpoints {
    /// `/readyz` answers 200 once this is set.
    pub ready: Arc<AtomicBool>,
    /// `/readyz`'s body until then.
    pub not_ready: &'static str,
    /// `/metrics`: the Prometheus text exposition.
    pub metrics: Arc<dyn Fn() -> String + Send + Sync>,
}

impl std::fmt::Debug for Endpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoints")
            .field("ready", &self.ready)
            .field("not_ready", &self.not_ready)
            .finish_non_exhaustive()
    }
}

impl Endpoints {
    fn respond(&self, req: &Request<Incoming>) -> Response<Full<Bytes>> {
        let (status, body) = match req.uri().path() {
            "/healthz" => (StatusCode::OK, "ok\n".to_string()),
            "/readyz" if self.ready.load(Ordering::SeqCst) => (StatusCode::OK, "ok\n".into()),
            "/readyz" => (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("{}\n", self.not_ready),
            ),
            "/metrics" => (StatusCode::OK, (self.metrics)()),
            _ => (StatusCode::NOT_FOUND, "not found\n".into()),
        };
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        response
    }
}

/// Serves until the future is dropped.
pub async fn serve(listener: TcpListener, pool: Pool, endpoints: Endpoints) {
    info!(addr = ?listener.local_addr().ok(), "serving /healthz, /readyz, /metrics");
    let mut connections = std::pin::pin!(conn::incoming(listener, pool));
    while let Some(Ok(stream)) = connections.next().await {
        let endpoints = endpoints.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<Incoming>| {
                let response = endpoints.respond(&req);
                async move { Ok::<_, Infallible>(response) }
            });
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                debug!(error = %e, "http connection ended");
            }
        });
    }
}
