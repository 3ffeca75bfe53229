//! `fpga-driver`: a DRA kubelet plugin for FPGA-like cards, built on the
//! `dra-kubelet-plugin` library from outside fake-dra. The profile is `profile.rs` (the
//! crate's library, so the tests in `tests/` run it too); this file parses flags and runs
//! the library.

use std::path::PathBuf;

use clap::Parser;
use dra_kubelet_plugin::{CrashPoint, Plugin};
use fpga_driver::config;
use fpga_driver::profile::{FpgaProfile, create_device_nodes};

/// A DRA kubelet plugin for FPGA cards.
#[derive(Debug, Parser)]
struct Args {
    /// This node's name.
    #[arg(long, env = "NODE_NAME")]
    node_name: String,
    /// The DRA driver name.
    #[arg(long, env = "DRIVER_NAME", default_value = "fpga.example.com")]
    driver_name: String,
    /// Cards on the node.
    #[arg(long, env = "CARDS", default_value_t = 2)]
    cards: usize,
    /// The bitstream loaded at start.
    #[arg(long, env = "BITSTREAM", default_value = "blank")]
    bitstream: String,
    /// The plugin's directory (socket, checkpoint, the cards' device nodes).
    #[arg(
        long,
        env = "PLUGIN_DIR",
        default_value = "/var/lib/kubelet/plugins/fpga.example.com"
    )]
    plugin_dir: PathBuf,
    /// The directory whose files say how many cards the node has and which are bad, read
    /// while the driver runs (see `config.rs`); `<plugin-dir>/config` by default.
    #[arg(long, env = "CONFIG_DIR")]
    config_dir: Option<PathBuf>,
    /// Where CDI specs are written.
    #[arg(long, env = "CDI_ROOT", default_value = "/var/run/cdi")]
    cdi_root: PathBuf,
    /// The kubelet's plugin registration directory.
    #[arg(
        long,
        env = "REGISTRY_DIR",
        default_value = "/var/lib/kubelet/plugins_registry"
    )]
    registry_dir: PathBuf,
    /// Serve `/healthz`, `/readyz` (devices published and registered with the kubelet)
    /// and `/metrics` there, e.g. `0.0.0.0:8080`; off by default.
    #[arg(long, env = "HTTP_ADDRESS")]
    http_address: Option<std::net::SocketAddr>,
    /// This pod's UID (downward API `metadata.uid`): with it, rolling updates — the new
    /// instance registers beside the old one (kubelet 1.33+).
    #[arg(long, env = "POD_UID")]
    pod_uid: Option<String>,
    /// Test only: abort the process at this point of prepare or unprepare (crash tests).
    #[arg(long, env = "TEST_CRASH_POINT", hide = true)]
    test_crash_point: Option<CrashPoint>,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_env_filter("info").init();
    let args = Args::parse();
    let dev_dir = args.plugin_dir.join("dev");
    let config_dir = args
        .config_dir
        .clone()
        .unwrap_or_else(|| args.plugin_dir.join("config"));
    let cards = config::load(&config_dir, args.cards)?;
    create_device_nodes(&dev_dir, cards.count)?;
    let (cards_tx, cards) = tokio::sync::watch::channel(cards);
    tokio::spawn(config::watch(
        config_dir,
        args.cards,
        dev_dir.clone(),
        cards_tx,
    ));
    let profile = FpgaProfile {
        node_name: args.node_name.clone(),
        cards,
        bitstream: args.bitstream,
        dev_dir,
        plugin_dir: args.plugin_dir.clone(),
    };
    // Chosen, not inferred: with two TLS providers in the build rustls refuses to guess.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = kube::Client::try_default().await?;
    Plugin::new(&args.driver_name, &args.node_name, client)
        .plugin_dir(&args.plugin_dir)
        .cdi_root(&args.cdi_root)
        .registry_dir(&args.registry_dir)
        .http_address(args.http_address)
        .rolling_update(args.pod_uid)
        .crash_point(args.test_crash_point)
        .run(profile, dra_kubelet_plugin::shutdown_signal())
        .await?;
    Ok(())
}
