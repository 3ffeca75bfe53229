//! `fake-dra-kubelet-plugin`: parses flags and runs the [`dra_kubelet_plugin`] library
//! with fake-dra's profiles, its `DeviceFault` hook and (classic DRA) its
//! NodeAllocationState.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::ArgMatches;
use dra_kubelet_plugin::claim::MetadataVersion;
use dra_kubelet_plugin::{CrashPoint, ModeFlag, Plugin};
use fake_dra_kubelet_plugin::faults::hook::DeviceFaults;
use fake_dra_kubelet_plugin::fleet;
use fake_dra_kubelet_plugin::inventory::{self, InventoryError};
use fake_dra_kubelet_plugin::registry::{FLEET_SUBCOMMAND, NodeContext, Profiles, Registry};
use fake_dra_ops::flags::{self, Renamed};
use fake_dra_ops::logging::{self, LogFormat};
use fake_dra_ops::signals;

/// The fake-dra kubelet plugin: prepares fake devices for DRA claims (classic or structured).
/// With `fleet`, publishes the devices of many simulated nodes instead (API only).
#[derive(Debug, clap::Parser)]
#[command(version, subcommand_negates_reqs = true)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// This node's name (usually from the downward API).
    #[arg(long, env = "FAKE_DRA_NODE_NAME", required = true)]
    node_name: Option<String>,
    /// The DRA driver name.
    #[arg(long, env = "FAKE_DRA_DRIVER_NAME", default_value = fake_dra_api::DEFAULT_DRIVER_NAME)]
    driver_name: String,
    /// Namespace of the NodeAllocationState objects.
    #[arg(long, env = "FAKE_DRA_NAMESPACE", default_value = "fake-dra")]
    namespace: String,
    #[command(flatten)]
    devices: DeviceFlags,
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
    /// Write device metadata files (KEP-5304, structured DRA): each prepared request's
    /// devices and attributes, mounted read-only into its containers under
    /// /var/run/kubernetes.io/dra-device-attributes (metadata.resource.k8s.io v1beta1 and
    /// v1alpha1).
    #[arg(long, env = "FAKE_DRA_DEVICE_METADATA")]
    device_metadata: bool,
    /// This pod's UID (the downward API's metadata.uid): turns on rolling updates (kubelet
    /// 1.33+), this instance registering under sockets of its own so that a DaemonSet
    /// update with maxSurge 1 and maxUnavailable 0 never leaves the node without a plugin.
    #[arg(long, env = "FAKE_DRA_POD_UID")]
    pod_uid: Option<String>,
    /// Test only: abort at this point of prepare/unprepare.
    #[arg(long, env = "FAKE_DRA_TEST_CRASH_POINT", hide = true)]
    test_crash_point: Option<CrashPoint>,
}

/// What devices a node has (docs/profiles.md); the same flags in fleet mode, per node.
/// Each profile adds its own flags ([`fake_dra_kubelet_plugin::PROFILES`]).
#[derive(Debug, Clone, clap::Args)]
struct DeviceFlags {
    /// The device profile of a node the inventory file does not place.
    #[arg(long, env = "FAKE_DRA_PROFILE", default_value = "fake")]
    profile: String,
    /// An inventory file (YAML or JSON) giving nodes, by name pattern, their profile and
    /// devices.
    #[arg(long, env = "FAKE_DRA_INVENTORY")]
    inventory: Option<PathBuf>,
}

impl DeviceFlags {
    /// The profiles' flags (from `matches`) and the inventory file, read and checked.
    fn profiles(
        &self,
        registry: &Registry,
        matches: &ArgMatches,
    ) -> Result<Profiles, InventoryError> {
        let file = self
            .inventory
            .as_deref()
            .map(|path| inventory::load(path, registry))
            .transpose()?;
        registry.profiles(matches, &self.profile, file)
    }
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// API only: publish the ResourceSlices of many simulated nodes (created, or found by
    /// label, e.g. kwok's), as the node plugin would on each; no kubelet calls
    /// (docs/fleet.md).
    Fleet(FleetArgs),
}

#[derive(Debug, clap::Args)]
struct FleetArgs {
    /// The DRA driver name.
    #[arg(long, env = "FAKE_DRA_DRIVER_NAME", default_value = fake_dra_api::DEFAULT_DRIVER_NAME)]
    driver_name: String,
    /// Create this many Node objects, <node-name-prefix><i>, Ready, with heartbeats; at
    /// most 10000 (docs/fleet.md).
    #[arg(long, env = "FAKE_DRA_CREATE_NODES", default_value_t = 0, value_parser = parse_create_nodes)]
    create_nodes: usize,
    /// Name prefix of the created nodes.
    #[arg(
        long,
        env = "FAKE_DRA_NODE_NAME_PREFIX",
        default_value = "fake-dra-fleet-"
    )]
    node_name_prefix: String,
    /// Extra labels of the created nodes: key=value,...
    #[arg(long, env = "FAKE_DRA_NODE_LABELS", default_value = "")]
    node_labels: String,
    /// Taints of the created nodes (key[=value]:Effect,...; empty for none), so that only
    /// pods that tolerate them land where no kubelet runs.
    #[arg(long, env = "FAKE_DRA_NODE_TAINTS", default_value = fleet::DEFAULT_TAINT)]
    node_taints: String,
    /// status.allocatable cpu of the created nodes, a Kubernetes quantity (32, 500m).
    #[arg(long, env = "FAKE_DRA_NODE_CPU", default_value = "32", value_parser = |s: &str| fleet::parse_quantity("--node-cpu", s).map_err(|e| e.reason))]
    node_cpu: String,
    /// status.allocatable memory of the created nodes, a Kubernetes quantity (256Gi, 512Mi).
    #[arg(long, env = "FAKE_DRA_NODE_MEMORY", default_value = "256Gi", value_parser = |s: &str| fleet::parse_quantity("--node-memory", s).map_err(|e| e.reason))]
    node_memory: String,
    /// status.allocatable pods of the created nodes, a whole number.
    #[arg(long, env = "FAKE_DRA_NODE_PODS", default_value = "110", value_parser = |s: &str| fleet::parse_pods(s).map_err(|e| e.reason))]
    node_pods: String,
    /// The nodes to publish for, a label selector (kwok: type=kwok); the created nodes
    /// carry fake.resource.3-shake.com/fleet=true.
    #[arg(
        long,
        env = "FAKE_DRA_NODE_SELECTOR",
        default_value = "fake.resource.3-shake.com/fleet=true",
        value_parser = |s: &str| fleet::parse_node_selector(s).map_err(|e| e.reason)
    )]
    node_selector: String,
    /// Seconds between heartbeats (Lease renewals) of the created nodes; 0: none.
    #[arg(long, env = "FAKE_DRA_HEARTBEAT_INTERVAL", default_value_t = 20)]
    heartbeat_interval: u64,
    /// Nodes written at once, at least 1.
    #[arg(long, env = "FAKE_DRA_CONCURRENCY", default_value_t = 16, value_parser = |s: &str| fleet::parse_concurrency(s).map_err(|e| e.reason))]
    concurrency: usize,
    /// Leave the created nodes (and their slices) in place when stopping.
    #[arg(long, env = "FAKE_DRA_KEEP_NODES")]
    keep_nodes: bool,
    #[command(flatten)]
    devices: DeviceFlags,
    /// Kubeconfig file; in-cluster config or $KUBECONFIG when absent.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Log format.
    #[arg(long, env = "FAKE_DRA_LOG_FORMAT", value_enum, default_value = "text")]
    log_format: LogFormat,
    /// Address for /healthz, /readyz (all slices published) and /metrics.
    #[arg(long, env = "FAKE_DRA_HTTP_ADDRESS")]
    http_address: Option<SocketAddr>,
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

/// `--create-nodes`: a whole number up to [`fleet::MAX_CREATE_NODES`].
fn parse_create_nodes(s: &str) -> Result<usize, String> {
    let max = fleet::MAX_CREATE_NODES;
    match s.parse::<u64>() {
        Ok(n) if n <= max as u64 => Ok(n as usize),
        _ => Err(format!("must be a whole number from 0 to {max}")),
    }
}

/// `--driver-name`: a DRA driver name as resource.k8s.io validates one (every slice, claim
/// result and CDI name carries it, so a bad one is refused there for ever: the plugin
/// retried without end and never became Ready).
fn check_driver_name(name: &str) -> Result<(), String> {
    fake_dra_api::names::driver_name(name)
        .map_err(|why| format!("--driver-name (FAKE_DRA_DRIVER_NAME): {why}"))
}

/// `--node-name`: a node name as kube-apiserver's ValidateNodeName takes one (a DNS
/// subdomain of at most 253 characters); it also names the node's pool and its slices.
fn check_node_name(name: &str) -> Result<(), String> {
    fake_dra_api::names::dns_subdomain(name, 253)
        .map_err(|why| format!("--node-name (FAKE_DRA_NODE_NAME): a node name: {why}"))
}

/// `--node-name-prefix`: every created node is `<prefix><i>`, so the longest of them must
/// be a node name; checked before the first is created (it failed at the first create).
fn check_node_name_prefix(prefix: &str, create_nodes: usize) -> Result<(), String> {
    let longest = format!("{prefix}{}", create_nodes.saturating_sub(1));
    fake_dra_api::names::dns_subdomain(&longest, 253).map_err(|why| {
        format!(
            "--node-name-prefix (FAKE_DRA_NODE_NAME_PREFIX) {}: the created nodes are named <prefix><number>, and {why}",
            fake_dra_api::names::shown(prefix)
        )
    })
}

/// Says why the plugin stops, once: as a log line where logs are JSON (read by
/// machines), else as one plain line on stderr.
fn fail(e: &dyn std::fmt::Display, format: LogFormat) -> ExitCode {
    match format {
        LogFormat::Json => tracing::error!(error = %e, "kubelet plugin failed"),
        LogFormat::Text => eprintln!("fake-dra-kubelet-plugin: {e}"),
    }
    ExitCode::FAILURE
}

#[tokio::main]
async fn main() -> ExitCode {
    let registry = match fake_dra_kubelet_plugin::registry() {
        Ok(registry) => registry,
        Err(e) => return fail(&e, LogFormat::Text),
    };
    let (args, matches, old_names) =
        flags::parse_extended::<Args>(RENAMED, |command| registry.augment(command));
    if let Some(Command::Fleet(fleet)) = args.command {
        logging::init(fleet.log_format);
        let format = fleet.log_format;
        let Some(fleet_matches) = matches.subcommand_matches(FLEET_SUBCOMMAND) else {
            return fail(&"the fleet subcommand's flags are missing", format);
        };
        return run_fleet(fleet, &registry, fleet_matches).await;
    }
    let format = args.log_format;
    logging::init(format);
    old_names.iter().for_each(flags::OldName::warn);
    let Some(node_name) = args.node_name else {
        return fail(&"--node-name (FAKE_DRA_NODE_NAME) is required", format);
    };
    if let Err(e) = check_node_name(&node_name).and_then(|()| check_driver_name(&args.driver_name))
    {
        return fail(&e, format);
    }
    let plugin_dir = args
        .plugin_dir
        .unwrap_or_else(|| PathBuf::from("/var/lib/kubelet/plugins").join(&args.driver_name));
    let profile = match args
        .devices
        .profiles(&registry, &matches)
        .and_then(|profiles| profiles.build(&node_name, &args.driver_name))
    {
        Ok(p) => p,
        Err(e) => return fail(&e, format),
    };
    if !profile.classic() && args.mode == ModeFlag::Classic {
        return fail(
            &format!(
                "the {} profile is structured DRA only; use --mode structured or auto (Kubernetes 1.32+)",
                profile.profile_name()
            ),
            format,
        );
    }
    let client = match fake_dra_ops::client::client(args.kubeconfig.as_deref()).await {
        Ok(client) => client,
        Err(e) => return fail(&e, format),
    };
    let devices: Vec<String> = profile
        .slice_devices()
        .into_iter()
        .map(|d| d.name)
        .collect();
    let plugin = Plugin::new(&args.driver_name, &node_name, client.clone())
        .cdi_root(args.cdi_root)
        .plugin_dir(plugin_dir)
        .registry_dir(args.registry_dir)
        .http_address(args.http_address)
        .mode(args.mode)
        .max_connections(args.max_connections)
        .connection_idle_timeout(Duration::from_secs(args.connection_idle_timeout))
        .checkpoint_type(
            fake_dra_kubelet_plugin::CHECKPOINT_API_VERSION,
            fake_dra_kubelet_plugin::CHECKPOINT_KIND,
        )
        .metrics_prefix(fake_dra_kubelet_plugin::METRICS_PREFIX)
        .field_manager(format!("fake-dra/{node_name}"))
        .crash_point(args.test_crash_point)
        .rolling_update(args.pod_uid)
        .device_metadata(if args.device_metadata {
            MetadataVersion::ALL.to_vec()
        } else {
            Vec::new()
        })
        .fault_hook(DeviceFaults::new(&args.driver_name, &node_name, devices));
    let node = NodeContext {
        client,
        namespace: args.namespace,
        node_name,
    };
    match profile
        .run(plugin, node, Box::pin(signals::shutdown()))
        .await
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&with_flags(&e), format),
    }
}

/// The library's error with the flag that sets what it is about: the library names its
/// own settings (it does not know this binary's flags), the operator needs the flag.
fn with_flags(e: &dra_kubelet_plugin::Error) -> String {
    use dra_kubelet_plugin::{Error, StartError};
    let flag = match e {
        Error::Start(StartError::MissingCheckpoint { .. }) => {
            Some("the plugin directory is --plugin-dir (FAKE_DRA_PLUGIN_DIR)")
        }
        Error::DriverName(_) | Error::ClassicDriverName(_) => {
            Some("the driver name is --driver-name (FAKE_DRA_DRIVER_NAME)")
        }
        Error::Kind(dra_kubelet_plugin::cdi::KindError::Vendor(_)) => {
            Some("the driver name is --driver-name (FAKE_DRA_DRIVER_NAME)")
        }
        Error::Mode(_) => Some("the mode is --mode (FAKE_DRA_MODE)"),
        _ => None,
    };
    match flag {
        Some(flag) => format!("{e} [{flag}]"),
        None => e.to_string(),
    }
}

async fn run_fleet(args: FleetArgs, registry: &Registry, matches: &ArgMatches) -> ExitCode {
    let format = args.log_format;
    if let Err(e) = check_driver_name(&args.driver_name)
        .and_then(|()| check_node_name_prefix(&args.node_name_prefix, args.create_nodes))
    {
        return fail(&e, format);
    }
    let template = match (
        fleet::parse_labels(&args.node_labels),
        fleet::parse_taints(&args.node_taints),
    ) {
        (Ok(labels), Ok(taints)) => fleet::NodeTemplate {
            labels,
            taints,
            cpu: args.node_cpu,
            memory: args.node_memory,
            pods: args.node_pods,
        },
        (Err(e), _) | (_, Err(e)) => return fail(&e, format),
    };
    // Every node's profile is built from these: flags no node could use are refused
    // now, before a node is created.
    let profiles = match args
        .devices
        .profiles(registry, matches)
        .and_then(|profiles| {
            profiles.check(&args.driver_name)?;
            Ok(profiles)
        }) {
        Ok(profiles) => profiles,
        Err(e) => return fail(&e, format),
    };
    let driver = args.driver_name.clone();
    let profiles: fleet::run::Profiles =
        Arc::new(move |node: &str| profiles.build(node, &driver).map_err(|e| e.to_string()));
    let config = fleet::run::FleetConfig {
        driver_name: args.driver_name,
        create_nodes: args.create_nodes,
        node_name_prefix: args.node_name_prefix,
        template,
        node_selector: args.node_selector,
        heartbeat: std::time::Duration::from_secs(args.heartbeat_interval),
        concurrency: args.concurrency,
        keep_nodes: args.keep_nodes,
        kubeconfig: args.kubeconfig,
        http_address: args.http_address,
    };
    match fleet::run::run(config, profiles, signals::shutdown()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e, format),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn every_flag_follows_the_env_rule_and_every_old_name_maps_to_one() {
        let command = fake_dra_kubelet_plugin::registry()
            .unwrap()
            .augment(Args::command());
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
