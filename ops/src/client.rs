//! The Kubernetes client every binary builds the same way: `--kubeconfig` when given,
//! else in-cluster config, else `$KUBECONFIG` / `~/.kube/config` (kube's inference).

use std::path::Path;

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
    /// Neither in-cluster config nor a default kubeconfig.
    #[error("no Kubernetes config (not in a cluster, no --kubeconfig, no $KUBECONFIG): {0}")]
    Infer(String),
    /// The config cannot make a client (e.g. bad TLS material).
    #[error("kubernetes client: {0}")]
    Client(String),
}

/// A client from `kubeconfig`, or inferred without one.
pub async fn client(kubeconfig: Option<&Path>) -> Result<kube::Client, ClientError> {
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
            .map_err(|e| ClientError::Infer(e.to_string()))?,
    };
    kube::Client::try_from(config).map_err(|e| ClientError::Client(e.to_string()))
}
