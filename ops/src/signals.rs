//! Graceful shutdown: Kubernetes stops a container with SIGTERM (then SIGKILL after the
//! grace period); a terminal sends SIGINT.

use tokio::signal::unix::{SignalKind, signal};

/// Completes at the first SIGTERM or SIGINT. If the handlers cannot be installed it says
/// so and never completes: the process then stops only by SIGKILL, which the kubelet
/// sends after the grace period anyway.
pub async fn shutdown() {
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            let name = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            };
            tracing::info!(signal = name, "shutting down");
        }
        (Err(e), _) | (_, Err(e)) => {
            tracing::error!(error = %e, "cannot install signal handlers; stop with SIGKILL");
            std::future::pending::<()>().await;
        }
    }
}
