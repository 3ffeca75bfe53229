//! `fake-dra-controller`: parses flags and wires the library together.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use fake_dra_controller::metrics::Metrics;
use fake_dra_controller::{Config, run};
use fake_dra_ops::conn::{Limits, Pool};
use fake_dra_ops::flags;
use fake_dra_ops::health::{self, Endpoints};
use fake_dra_ops::logging::{self, LogFormat};
use fake_dra_ops::signals;
use futures::FutureExt;

/// The classic-DRA controller of fake-dra: allocates ResourceClaims of classes naming the
/// driver from the devices the kubelet plugins publish in NodeAllocationStates.
#[derive(Debug, clap::Parser)]
#[command(version)]
struct Flags {
    /// Driver name: ResourceClasses with this driverName are handled.
    #[arg(long, env = "FAKE_DRA_DRIVER_NAME", default_value = fake_dra_api::DEFAULT_DRIVER_NAME)]
    driver_name: String,
    /// Namespace of the NodeAllocationStates (the driver's namespace).
    #[arg(long, env = "FAKE_DRA_NAMESPACE", default_value = "fake-dra")]
    namespace: String,
    /// Kubeconfig file; without it, in-cluster config or ~/.kube/config.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Reconciles run at once, per controller.
    #[arg(long, env = "FAKE_DRA_WORKERS", default_value_t = 4)]
    workers: u16,
    /// Run only while holding a coordination.k8s.io Lease (for more than one replica).
    #[arg(long, env = "FAKE_DRA_LEADER_ELECT", default_value_t = false)]
    leader_elect: bool,
    /// Name of the leader-election Lease.
    #[arg(
        long,
        env = "FAKE_DRA_LEASE_NAME",
        default_value = "fake-dra-controller"
    )]
    lease_name: String,
    /// Namespace of the Lease; defaults to --namespace.
    #[arg(long, env = "FAKE_DRA_LEASE_NAMESPACE")]
    lease_namespace: Option<String>,
    /// This instance's identity in the Lease and in Events (e.g. the Pod name).
    #[arg(long, env = "FAKE_DRA_INSTANCE")]
    instance: Option<String>,
    /// Address serving /metrics, /healthz and /readyz.
    #[arg(long, env = "FAKE_DRA_HTTP_ADDRESS", default_value = "0.0.0.0:8080")]
    http_address: SocketAddr,
    /// Most connections open at once on the HTTP port; admitting one more closes the
    /// quietest. 0: as many as the open-files limit leaves room for.
    #[arg(long, env = "FAKE_DRA_MAX_CONNECTIONS", default_value_t = 0)]
    max_connections: usize,
    /// Seconds an HTTP connection may stay quiet before it is closed.
    #[arg(long, env = "FAKE_DRA_CONNECTION_IDLE_TIMEOUT", default_value_t = fake_dra_ops::conn::DEFAULT_IDLE_TIMEOUT.as_secs())]
    connection_idle_timeout: u64,
    /// Log format.
    #[arg(long, env = "FAKE_DRA_LOG_FORMAT", value_enum, default_value = "text")]
    log_format: LogFormat,
}

#[tokio::main]
async fn main() -> ExitCode {
    // The controller's names followed the rule from the start: nothing renamed.
    let (flags, _) = flags::parse::<Flags>(&[]);
    logging::init(flags.log_format);
    let format = flags.log_format;
    match run_controller(flags).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Said once: a JSON line for a log pipeline, a plain line for a terminal.
            match format {
                LogFormat::Json => tracing::error!(error = %e, "controller failed"),
                LogFormat::Text => eprintln!("fake-dra-controller: {e}"),
            }
            ExitCode::FAILURE
        }
    }
}

async fn run_controller(flags: Flags) -> Result<(), Box<dyn std::error::Error>> {
    let client = fake_dra_ops::client::client(flags.kubeconfig.as_deref()).await?;
    let instance = flags
        .instance
        .clone()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| format!("fake-dra-controller-{}", std::process::id()));
    let metrics = Arc::new(Metrics::default());
    let ready = Arc::new(AtomicBool::new(false));
    let listener = tokio::net::TcpListener::bind(flags.http_address)
        .await
        .map_err(|e| format!("--http-address {}: {e}", flags.http_address))?;
    let endpoints = Endpoints {
        ready: ready.clone(),
        not_ready: "caches not synced",
        metrics: {
            let metrics = metrics.clone();
            Arc::new(move || metrics.encode())
        },
    };
    let pool = Pool::new(Limits::from_flags(
        flags.max_connections,
        flags.connection_idle_timeout,
    ));
    tokio::spawn(health::serve(listener, pool, endpoints));

    let shutdown = signals::shutdown().boxed().shared();
    let config = Config {
        driver_name: flags.driver_name.clone(),
        namespace: flags.namespace.clone(),
        workers: flags.workers,
        instance: instance.clone(),
    };

    if !flags.leader_elect {
        run(client, config, metrics, ready, shutdown).await;
        return Ok(());
    }

    let lease_ns = flags
        .lease_namespace
        .clone()
        .unwrap_or(flags.namespace.clone());
    let manager = kube_lease_manager::LeaseManagerBuilder::new(client.clone(), &flags.lease_name)
        .with_namespace(&lease_ns)
        .with_identity(&instance)
        .build()
        .await?;
    let (mut leading, lease_task) = manager.watch().await;
    tracing::info!(lease = %flags.lease_name, namespace = %lease_ns, "waiting for leadership");
    tokio::select! {
        r = leading.wait_for(|l| *l) => { r?; }
        _ = shutdown.clone() => { return Ok(()); }
    }
    tracing::info!("became leader");
    let mut lost_rx = leading.clone();
    let lost = async move {
        let _ = lost_rx.wait_for(|l| !*l).await;
    };
    let stop = {
        let shutdown = shutdown.clone();
        async move {
            tokio::select! {
                _ = shutdown => {}
                _ = lost => { tracing::error!("lost leadership"); }
            }
        }
        .boxed()
        .shared()
    };
    run(client, config, metrics, ready, stop).await;
    let lost_lead = !*leading.borrow();
    drop(leading);
    if let Ok(Ok(manager)) = lease_task.await {
        let _ = manager.release().await;
    }
    if lost_lead {
        return Err("lost leadership".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn every_flag_follows_the_env_rule() {
        assert_eq!(
            flags::rule_breakers(&Flags::command()),
            Vec::<String>::new()
        );
    }
}
