//! `fake-dra-kubelet-plugin`: parses flags and runs [`fake_dra_kubelet_plugin::run`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use fake_dra_kubelet_plugin::Config;
use fake_dra_kubelet_plugin::driver::CrashPoint;
use fake_dra_kubelet_plugin::fake::FakeProfile;
use fake_dra_kubelet_plugin::fake::devices::{self, Inventory};
use fake_dra_kubelet_plugin::mode::ModeFlag;
use fake_dra_ops::conn::Limits;
use fake_dra_ops::flags::{self, Renamed};
use fake_dra_ops::logging::{self, LogFormat};
use fake_dra_ops::signals;

/// The fake-dra kubelet plugin: prepares fake devices for DRA claims (classic or structured).
#[derive(Debug, clap::Parser)]
#[command(version)]
struct Args {
    /// This node's name (usually from the downward API).
    #[arg(long, env = "FAKE_DRA_NODE_NAME")]
    node_name: String,
    /// The DRA driver name.
    #[arg(long, env = "FAKE_DRA_DRIVER_NAME", default_value = fake_dra_api::DEFAULT_DRIVER_NAME)]
    driver_name: String,
    /// Namespace of the NodeAllocationState objects.
    #[arg(long, env = "FAKE_DRA_NAMESPACE", default_value = "fake-dra")]
    namespace: String,
    /// Parent devices on this node.
    #[arg(long, env = "FAKE_DRA_NUM_DEVICES", default_value_t = devices::DEFAULT_NUM_DEVICES)]
    num_devices: usize,
    /// Models the node picks its model from, comma-separated.
    #[arg(
        long,
        env = "FAKE_DRA_MODELS",
        value_delimiter = ',',
        default_value = "ULTRA_10,ULTRA_100"
    )]
    models: Vec<String>,
    /// Where CDI specs are written.
    #[arg(long, env = "FAKE_DRA_CDI_ROOT", default_value = "/var/run/cdi")]
    cdi_root: PathBuf,
    /// The plugin's dir: DRA socket and checkpoint. Default /var/lib/kubelet/plugins/<driver>.
    #[arg(long, env = "FAKE_DRA_PLUGIN_DIR")]
    plugin_dir: Option<PathBuf>,
    /// The kubelet's plugin registration dir.
    #[arg(
        long,
        env = "FAKE_DRA_REGISTRY_DIR",
        default_value = "/var/lib/kubelet/plugins_registry"
    )]
    registry_dir: PathBuf,
    /// Kubeconfig file; in-cluster config or $KUBECONFIG when absent.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Log format.
    #[arg(long, env = "FAKE_DRA_LOG_FORMAT", value_enum, default_value = "text")]
    log_format: LogFormat,
    /// Address for /healthz, /readyz and /metrics, e.g. 0.0.0.0:8080; off when absent.
    #[arg(long, env = "FAKE_DRA_HTTP_ADDRESS")]
    http_address: Option<SocketAddr>,
    /// DRA generation: classic (NodeAllocationState, v1alpha2/v1alpha3 node services),
    /// structured (ResourceSlices, DRAPlugin v1/v1beta1), or auto (from the
    /// resource.k8s.io versions the API server serves).
    #[arg(long, env = "FAKE_DRA_MODE", default_value = "auto")]
    mode: ModeFlag,
    /// Most connections open at once over the sockets and the HTTP port; admitting one
    /// more closes the quietest. 0: as many as the open-files limit leaves room for.
    #[arg(long, env = "FAKE_DRA_MAX_CONNECTIONS", default_value_t = 0)]
    max_connections: usize,
    /// Seconds a connection may stay quiet before it is closed (the kubelet's connection
    /// answers the plugin's keepalive pings and stays).
    #[arg(long, env = "FAKE_DRA_CONNECTION_IDLE_TIMEOUT", default_value_t = fake_dra_ops::conn::DEFAULT_IDLE_TIMEOUT.as_secs())]
    connection_idle_timeout: u64,
    /// Test only: abort at this point of prepare/unprepare.
    #[arg(long, env = "FAKE_DRA_TEST_CRASH_POINT", hide = true)]
    test_crash_point: Option<CrashPoint>,
}

/// The environment names before every flag's twin was `FAKE_DRA_<FLAG>`; they work until
/// the next release, with a warning.
const RENAMED: &[Renamed] = &[
    Renamed {
        old: "NODE_NAME",
        new: "FAKE_DRA_NODE_NAME",
    },
    Renamed {
        old: "DRIVER_NAME",
        new: "FAKE_DRA_DRIVER_NAME",
    },
    Renamed {
        old: "NAMESPACE",
        new: "FAKE_DRA_NAMESPACE",
    },
    Renamed {
        old: "NUM_DEVICES",
        new: "FAKE_DRA_NUM_DEVICES",
    },
    Renamed {
        old: "MODELS",
        new: "FAKE_DRA_MODELS",
    },
    Renamed {
        old: "CDI_ROOT",
        new: "FAKE_DRA_CDI_ROOT",
    },
    Renamed {
        old: "PLUGIN_DIR",
        new: "FAKE_DRA_PLUGIN_DIR",
    },
    Renamed {
        old: "REGISTRY_DIR",
        new: "FAKE_DRA_REGISTRY_DIR",
    },
    Renamed {
        old: "LOG_FORMAT",
        new: "FAKE_DRA_LOG_FORMAT",
    },
    Renamed {
        old: "HTTP_ADDRESS",
        new: "FAKE_DRA_HTTP_ADDRESS",
    },
    Renamed {
        old: "DRA_MODE",
        new: "FAKE_DRA_MODE",
    },
    Renamed {
        old: "MAX_CONNECTIONS",
        new: "FAKE_DRA_MAX_CONNECTIONS",
    },
    Renamed {
        old: "CONNECTION_IDLE_TIMEOUT",
        new: "FAKE_DRA_CONNECTION_IDLE_TIMEOUT",
    },
];

#[tokio::main]
async fn main() -> ExitCode {
    let (args, old_names) = flags::parse::<Args>(RENAMED);
    logging::init(args.log_format);
    old_names.iter().for_each(flags::OldName::warn);
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
    match fake_dra_kubelet_plugin::run(config, profile, signals::shutdown()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "kubelet plugin failed");
            eprintln!("fake-dra-kubelet-plugin: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn every_flag_follows_the_env_rule_and_every_old_name_maps_to_one() {
        let command = Args::command();
        assert_eq!(flags::rule_breakers(&command), Vec::<String>::new());
        for r in RENAMED {
            assert!(
                command
                    .get_arguments()
                    .any(|a| a.get_env().is_some_and(|e| e == r.new)),
                "{} maps to no flag",
                r.new
            );
        }
    }
}
