//! `fake-dra-kubelet-plugin`: parses flags and runs [`fake_dra_kubelet_plugin::run`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use fake_dra_kubelet_plugin::Config;
use fake_dra_kubelet_plugin::driver::CrashPoint;
use fake_dra_kubelet_plugin::fake::FakeProfile;
use fake_dra_kubelet_plugin::fake::devices::{self, Inventory};
use fake_dra_kubelet_plugin::mode::ModeFlag;
use fake_dra_ops::conn::Limits;

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// The fake-dra kubelet plugin: prepares fake devices for DRA claims (classic or structured).
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// This node's name (usually from the downward API).
    #[arg(long, env = "NODE_NAME")]
    node_name: String,
    /// The DRA driver name.
    #[arg(long, env = "DRIVER_NAME", default_value = fake_dra_crds::DEFAULT_DRIVER_NAME)]
    driver_name: String,
    /// Namespace of the NodeAllocationState objects.
    #[arg(long, env = "NAMESPACE", default_value = "fake-dra")]
    namespace: String,
    /// Parent devices on this node.
    #[arg(long, env = "NUM_DEVICES", default_value_t = devices::DEFAULT_NUM_DEVICES)]
    num_devices: usize,
    /// Models the node picks its model from, comma-separated.
    #[arg(
        long,
        env = "MODELS",
        value_delimiter = ',',
        default_value = "ULTRA_10,ULTRA_100"
    )]
    models: Vec<String>,
    /// Where CDI specs are written.
    #[arg(long, env = "CDI_ROOT", default_value = "/var/run/cdi")]
    cdi_root: PathBuf,
    /// The plugin's dir: DRA socket and checkpoint. Default /var/lib/kubelet/plugins/<driver>.
    #[arg(long, env = "PLUGIN_DIR")]
    plugin_dir: Option<PathBuf>,
    /// The kubelet's plugin registration dir.
    #[arg(
        long,
        env = "REGISTRY_DIR",
        default_value = "/var/lib/kubelet/plugins_registry"
    )]
    registry_dir: PathBuf,
    /// Kubeconfig file; in-cluster config or $KUBECONFIG when absent.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Log format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value = "text")]
    log_format: LogFormat,
    /// Address for /healthz, /readyz and /metrics, e.g. 0.0.0.0:8080; off when absent.
    #[arg(long, env = "HTTP_ADDRESS")]
    http_address: Option<SocketAddr>,
    /// DRA generation: classic (NodeAllocationState, v1alpha2/v1alpha3 node services),
    /// structured (ResourceSlices, DRAPlugin v1/v1beta1), or auto (from the
    /// resource.k8s.io versions the API server serves).
    #[arg(long, env = "DRA_MODE", default_value = "auto")]
    mode: ModeFlag,
    /// Most connections open at once over the sockets and the HTTP port; admitting one
    /// more closes the quietest. 0: as many as the open-files limit leaves room for.
    #[arg(long, env = "MAX_CONNECTIONS", default_value_t = 0)]
    max_connections: usize,
    /// Seconds a connection may stay quiet before it is closed (the kubelet's connection
    /// answers the plugin's keepalive pings and stays).
    #[arg(long, env = "CONNECTION_IDLE_TIMEOUT", default_value_t = fake_dra_ops::conn::DEFAULT_IDLE_TIMEOUT.as_secs())]
    connection_idle_timeout: u64,
    /// Test only: abort at this point of prepare/unprepare.
    #[arg(long, env = "FAKE_DRA_TEST_CRASH_POINT", hide = true)]
    test_crash_point: Option<CrashPoint>,
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            tracing::error!("cannot install signal handlers; stop with SIGKILL");
            std::future::pending::<()>().await;
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    // One TLS crypto provider for the kube client, whatever else is linked in.
    let _ = rustls::crypto::ring::default_provider().install_default();
    init_logging(args.log_format);
    let plugin_dir = args
        .plugin_dir
        .unwrap_or_else(|| PathBuf::from("/var/lib/kubelet/plugins").join(&args.driver_name));
    let inventory = match Inventory::new(&args.node_name, args.num_devices, &args.models) {
        Ok(inventory) => inventory,
        Err(e) => {
            tracing::error!(error = %e, "kubelet plugin failed");
            eprintln!("fake-dra-kubelet-plugin: {e}");
            return ExitCode::FAILURE;
        }
    };
    tracing::info!(node = %inventory.node_name, model = %inventory.model, devices = inventory.devices.len(), "inventory");
    let profile = FakeProfile::new(inventory, &args.driver_name);
    let config = Config {
        node_name: args.node_name,
        driver_name: args.driver_name,
        namespace: args.namespace,
        cdi_root: args.cdi_root,
        plugin_dir,
        registry_dir: args.registry_dir,
        kubeconfig: args.kubeconfig,
        http_address: args.http_address,
        crash_point: args.test_crash_point,
        mode: args.mode,
        connection_limits: Limits::from_flags(args.max_connections, args.connection_idle_timeout),
    };
    match fake_dra_kubelet_plugin::run(config, profile, shutdown_signal()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "kubelet plugin failed");
            eprintln!("fake-dra-kubelet-plugin: {e}");
            ExitCode::FAILURE
        }
    }
}
