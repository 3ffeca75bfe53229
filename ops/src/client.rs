//! The Kubernetes client every binary builds the same way: `--kubeconfig` when given,
//! else in-cluster config, else `$KUBECONFIG` / `~/.kube/config` (kube's inference).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Why no client could be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The kubeconfig file given is unusable.
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig {
        /// The file.
        path: String,
        /// What is wrong with it.
        message: String,
    },
    /// Neither in-cluster config nor a default kubeconfig: what was looked at, in words.
    #[error("{0}")]
    Infer(String),
    /// The config cannot make a client (e.g. bad TLS material).
    #[error("kubernetes client: {0}")]
    Client(String),
}

/// Requests a client sent, by kind: what fleet mode reports per node (its benchmark's
/// "API requests per node").
#[derive(Debug, Default)]
pub struct RequestCounts {
    /// GETs with `watch=true`.
    pub watch: AtomicU64,
    /// Other GETs (get and list).
    pub read: AtomicU64,
    /// POST, PUT, PATCH, DELETE.
    pub write: AtomicU64,
}

impl RequestCounts {
    /// Every request so far.
    pub fn total(&self) -> u64 {
        self.watch.load(Ordering::Relaxed)
            + self.read.load(Ordering::Relaxed)
            + self.write.load(Ordering::Relaxed)
    }

    fn count<B>(&self, request: &http::Request<B>) {
        let counter = if request.method() == http::Method::GET {
            let watching = request
                .uri()
                .query()
                .is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
            if watching { &self.watch } else { &self.read }
        } else {
            &self.write
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// A client like [`client`] that counts every request it sends into `counts`.
pub async fn counting_client(
    kubeconfig: Option<&Path>,
    counts: Arc<RequestCounts>,
) -> Result<kube::Client, ClientError> {
    let config = config(kubeconfig).await?;
    let builder = kube::client::ClientBuilder::try_from(config)
        .map_err(|e| ClientError::Client(e.to_string()))?;
    let layer =
        tower::util::MapRequestLayer::new(move |request: http::Request<kube::client::Body>| {
            counts.count(&request);
            request
        });
    Ok(builder.with_layer(&layer).build())
}

/// A client from `kubeconfig`, or inferred without one.
pub async fn client(kubeconfig: Option<&Path>) -> Result<kube::Client, ClientError> {
    kube::Client::try_from(config(kubeconfig).await?)
        .map_err(|e| ClientError::Client(e.to_string()))
}

async fn config(kubeconfig: Option<&Path>) -> Result<kube::Config, ClientError> {
    // kube uses rustls with ring; a build that also links aws-lc-rs (test-only
    // dependencies) leaves rustls without a default, so name ours (an error means one is
    // already installed).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = match kubeconfig {
        Some(path) => {
            let bad = |e: &dyn std::fmt::Display| ClientError::Kubeconfig {
                path: path.display().to_string(),
                message: e.to_string(),
            };
            let file = kube::config::Kubeconfig::read_from(path).map_err(|e| bad(&e))?;
            kube::Config::from_custom_kubeconfig(file, &Default::default())
                .await
                .map_err(|e| bad(&e))?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| ClientError::Infer(explain_infer(&e.to_string())))?,
    };
    Ok(config)
}

/// Says where a client looked for its configuration, as kubectl would, rather than kube's
/// nested error (whose paths come quoted twice): in-cluster (the service account and
/// `KUBERNETES_SERVICE_HOST`), then `$KUBECONFIG`, then `~/.kube/config`.
fn explain_infer(detail: &str) -> String {
    let in_cluster = match std::env::var_os("KUBERNETES_SERVICE_HOST") {
        None => "not running in a cluster (KUBERNETES_SERVICE_HOST is not set)".to_string(),
        Some(_) => "the in-cluster configuration is unusable".to_string(),
    };
    let kubeconfig = match std::env::var_os("KUBECONFIG") {
        Some(paths) if !paths.is_empty() => {
            format!("KUBECONFIG={} cannot be read", paths.to_string_lossy())
        }
        _ => match std::env::var_os("HOME") {
            Some(home) => {
                let path = Path::new(&home).join(".kube/config");
                if path.exists() {
                    format!("{} cannot be read", path.display())
                } else {
                    // Nothing more to say than where it looked.
                    return format!(
                        "no Kubernetes configuration: {in_cluster}, no --kubeconfig was given, KUBECONFIG is not set and {} does not exist; give --kubeconfig or set KUBECONFIG",
                        path.display()
                    );
                }
            }
            None => "KUBECONFIG and HOME are not set".to_string(),
        },
    };
    format!(
        "no Kubernetes configuration: {in_cluster}, no --kubeconfig was given and {kubeconfig}; give --kubeconfig or set KUBECONFIG (kube: {})",
        detail
            .replace("\\\"", "")
            .replace("'\"", "'")
            .replace("\"'", "'")
    )
}
