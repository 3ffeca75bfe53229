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

use super::conn::{self, Pool};

/// What `/metrics` answers: prometheus-client's text encoder writes OpenMetrics 1.0.0
/// (`# EOF`, counters as `<name>_total`). Prometheus 3 picks its parser by this header and
/// refuses a scrape without a valid one.
pub const OPENMETRICS_TEXT: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The probes' answers.
const PLAIN_TEXT: &str = "text/plain; charset=utf-8";

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
    /// `/metrics`: the OpenMetrics text exposition ([`OPENMETRICS_TEXT`]).
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
        let (status, content_type, body) = match req.uri().path() {
            "/healthz" => (StatusCode::OK, PLAIN_TEXT, "ok\n".to_string()),
            "/readyz" if self.ready.load(Ordering::SeqCst) => {
                (StatusCode::OK, PLAIN_TEXT, "ok\n".into())
            }
            "/readyz" => (
                StatusCode::SERVICE_UNAVAILABLE,
                PLAIN_TEXT,
                format!("{}\n", self.not_ready),
            ),
            "/metrics" => (StatusCode::OK, OPENMETRICS_TEXT, (self.metrics)()),
            _ => (StatusCode::NOT_FOUND, PLAIN_TEXT, "not found\n".into()),
        };
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static(content_type),
        );
        response
    }
}

/// Serves until the future is dropped.
pub async fn serve(listener: TcpListener, pool: Pool, endpoints: Endpoints) {
    match listener.local_addr() {
        Ok(addr) => info!(%addr, "serving /healthz, /readyz, /metrics"),
        Err(e) => info!(error = %e, "serving /healthz, /readyz, /metrics (address unknown)"),
    }
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
