//! `/metrics`, `/healthz` and `/readyz` over HTTP/1.

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

use crate::metrics::Metrics;

/// What the endpoints report.
#[derive(Debug, Default)]
pub struct Health {
    /// Set once the caches have synced (and, with leader election, this instance leads or
    /// stands by); `/readyz` answers 200 from then on.
    pub ready: AtomicBool,
}

fn respond(req: &Request<Incoming>, metrics: &Metrics, health: &Health) -> Response<Full<Bytes>> {
    let (status, body) = match req.uri().path() {
        "/metrics" => (StatusCode::OK, metrics.encode()),
        "/healthz" => (StatusCode::OK, "ok\n".to_string()),
        "/readyz" if health.ready.load(Ordering::Relaxed) => (StatusCode::OK, "ok\n".into()),
        "/readyz" => (
            StatusCode::SERVICE_UNAVAILABLE,
            "caches not synced\n".into(),
        ),
        _ => (StatusCode::NOT_FOUND, "not found\n".into()),
    };
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp
}

/// Binds `addr`; the returned future serves until dropped.
pub async fn bind(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
) -> std::io::Result<(SocketAddr, impl Future<Output = ()>)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let serve = async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let metrics = metrics.clone();
            let health = health.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req| {
                    let resp = respond(&req, &metrics, &health);
                    async move { Ok::<_, std::convert::Infallible>(resp) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    };
    Ok((local, serve))
}
