//! `fake-dra-sim`: fake-dra with no cluster. Starts the emulated control plane, installs
//! the driver from `deploy/`, runs the real controller and one real kubelet plugin per
//! node, applies manifests and prints the containers' logs prefixed `<namespace> <pod> <container>`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use fake_dra_emulator::apiserver::gates::FeatureGates;
use fake_dra_emulator::cluster::lifeline;
use fake_dra_emulator::manifests::{self, Manifest};
use fake_dra_emulator::sim::mode::{self, Generation};
use fake_dra_emulator::sim::{RuntimeChoice, Sim, SimConfig, output};
use fake_dra_ops::flags::{self, Renamed};
use fake_dra_ops::logging::{self, LogFormat};

/// The seed demo: count 4, split 2, pod0 in namespace test5 (per DRA generation).
const DEMO_CLASSIC: &str = "examples/5-count-4-split-2.yaml";
const DEMO_STRUCTURED: &str = "examples/structured/5-count-4-split-2.yaml";
const DEMO_NAMESPACE: &str = "test5";
const DEMO_POD: &str = "pod0";
const DEMO_CONTAINER: &str = "ctr0";
/// A safety net for the demo; it normally finishes in seconds.
const DEMO_TIMEOUT: Duration = Duration::from_secs(120);
/// The sim's own log: its version, its progress, and only warnings from the emulator around it.
const DEFAULT_LOG_FILTER: &str = "warn,fake_dra_emulator::sim=info,fake_dra_ops::version=info";
/// How often `run --wait` looks at the pods.
const WAIT_POLL: Duration = Duration::from_millis(500);

/// The names from before the env rule (`FAKE_DRA_SIM_<FLAG>`), kept one release.
const RENAMED: &[Renamed] = &[
    Renamed {
        old: "FAKE_DRA_SIM_NODES",
        new: "FAKE_DRA_NODES",
    },
    Renamed {
        old: "FAKE_DRA_SIM_MODE",
        new: "FAKE_DRA_MODE",
    },
    Renamed {
        old: "FAKE_DRA_SIM_KUBERNETES_VERSION",
        new: "FAKE_DRA_KUBERNETES_VERSION",
    },
    Renamed {
        old: "FAKE_DRA_SIM_RUNTIME",
        new: "FAKE_DRA_RUNTIME",
    },
    Renamed {
        old: "FAKE_DRA_SIM_NUM_DEVICES",
        new: "FAKE_DRA_NUM_DEVICES",
    },
    Renamed {
        old: "FAKE_DRA_SIM_DEPLOY_DIR",
        new: "FAKE_DRA_DEPLOY_DIR",
    },
    Renamed {
        old: "FAKE_DRA_SIM_WORK_DIR",
        new: "FAKE_DRA_WORK_DIR",
    },
    Renamed {
        old: "FAKE_DRA_SIM_LOG_FORMAT",
        new: "FAKE_DRA_LOG_FORMAT",
    },
];

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Runtime {
    Auto,
    Podman,
    Process,
}

/// Which DRA generation the emulated cluster runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// Kubernetes 1.27–1.30: resource.k8s.io/v1alpha2, the driver's controller allocates.
    Classic,
    /// Kubernetes 1.32+: resource.k8s.io/v1 (v1beta1 on 1.32/1.33), kube-scheduler allocates.
    Structured,
}

/// fake-dra on an emulated cluster: no Kubernetes, no images. Containers run on a local
/// busybox root filesystem with podman when it is installed, else as local processes.
#[derive(Debug, Parser)]
// The binary's name, not the crate's (fake-dra-emulator): --version, usage and the
// completion scripts name the command a user types.
#[command(name = "fake-dra-sim", version)]
struct Args {
    #[command(subcommand)]
    command: Cmd,
    /// Node names, comma-separated.
    #[arg(
        long,
        env = "FAKE_DRA_NODES",
        value_delimiter = ',',
        default_value = "kind-worker,kind-worker2",
        global = true
    )]
    nodes: Vec<String>,
    /// DRA generation: installs deploy/<mode> and emulates a matching Kubernetes. Without
    /// it: the one --kubernetes-version runs, else the one of `run -f`'s manifests
    /// (resource.k8s.io/v1alpha2 classic, v1 and v1beta* structured), else classic.
    #[arg(long, env = "FAKE_DRA_MODE", value_enum, global = true)]
    mode: Option<Mode>,
    /// Kubernetes version to emulate, e.g. 1.33 (default: 1.30 classic, 1.34 structured).
    #[arg(long, env = "FAKE_DRA_KUBERNETES_VERSION", value_parser = parse_version, global = true)]
    kubernetes_version: Option<(u32, u32)>,
    /// DRA feature gates over the emulated release's defaults, NAME=true,NAME=false, as
    /// kube-apiserver and kube-scheduler take them (e.g. DRAFractionalCapacityRange=true
    /// on 1.37, DRADeviceTaints=true on 1.35). A gate the release lacks, a locked one, or
    /// one the emulator does not implement is refused by name.
    #[arg(long, env = "FAKE_DRA_FEATURE_GATES", global = true)]
    feature_gates: Option<String>,
    /// Container runtime of the nodes (auto: podman when usable).
    #[arg(
        long,
        env = "FAKE_DRA_RUNTIME",
        value_enum,
        default_value = "auto",
        global = true
    )]
    runtime: Runtime,
    /// Parent devices per node (the plugin's FAKE_DRA_NUM_DEVICES).
    #[arg(long, env = "FAKE_DRA_NUM_DEVICES", global = true)]
    num_devices: Option<usize>,
    /// More environment for every node's plugin, KEY=VALUE; repeatable (';'-separated in
    /// the env). The profiles of docs/profiles.md: --plugin-env FAKE_DRA_PROFILE=gpu
    /// --plugin-env FAKE_DRA_GPUS=A100-80GB:1:partitioned,L4-24GB:1:shared
    #[arg(
        long = "plugin-env",
        env = "FAKE_DRA_PLUGIN_ENV",
        value_delimiter = ';',
        value_parser = parse_plugin_env,
        global = true
    )]
    plugin_env: Vec<(String, String)>,
    /// Where the binaries are that the deployed workloads' commands name (default: next to this binary).
    #[arg(long, env = "FAKE_DRA_BIN_DIR", global = true)]
    bin_dir: Option<PathBuf>,
    /// The deploy/ directory whose overlay is installed [default: the deploy/ of the source
    /// tree this binary was built in, found from the binary's place in target/]
    #[arg(long, env = "FAKE_DRA_DEPLOY_DIR", global = true)]
    deploy_dir: Option<PathBuf>,
    /// Keep node directories and driver logs here (default: a temporary directory, removed at exit).
    #[arg(long, env = "FAKE_DRA_WORK_DIR", global = true)]
    work_dir: Option<PathBuf>,
    /// Format of the sim's own log (stderr).
    #[arg(
        long,
        env = "FAKE_DRA_LOG_FORMAT",
        value_enum,
        default_value = "text",
        global = true
    )]
    log_format: LogFormat,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// The seed demo: a claim of 4 devices split in 2, used by pod0 in namespace test5,
    /// which prints its environment (FAKE_DEVICE_0 … FAKE_DEVICE_7).
    Demo {
        /// Keep the cluster running after the demo until Ctrl-C.
        #[arg(long, env = "FAKE_DRA_KEEP_RUNNING")]
        keep_running: bool,
    },
    /// Apply manifests (files or directories) and print container logs until Ctrl-C, or
    /// with --wait until every pod is ready or has succeeded.
    Run {
        /// A manifest file or a directory of them; repeatable (comma-separated in the env).
        #[arg(
            short = 'f',
            long = "filename",
            env = "FAKE_DRA_FILENAME",
            value_delimiter = ',',
            required = true
        )]
        files: Vec<PathBuf>,
        /// Exit once every pod (outside the driver's namespace) is Ready or Succeeded and
        /// every Deployment has its replicas ready: 0 then, 1 as soon as a pod fails or a
        /// container keeps crashing, or when --timeout passes (for scripts and CI).
        #[arg(long, env = "FAKE_DRA_WAIT")]
        wait: bool,
        /// With --wait: how long to wait, e.g. 90s, 5m.
        #[arg(long, env = "FAKE_DRA_TIMEOUT", default_value = "5m", value_parser = parse_duration)]
        timeout: Duration,
    },
}

/// The longest `--timeout`: Go's `time.Duration` (what kubectl's `--timeout` flags are)
/// holds 2562047h47m16s; anything longer is no timeout anyone means, and past the end of
/// a `tokio::time::Instant` it panicked (`--timeout 18446744073709551615`).
const MAX_TIMEOUT_SECS: u64 = i64::MAX as u64 / 1_000_000_000;

/// `90s`, `5m`, `1h`, or plain seconds, up to [`MAX_TIMEOUT_SECS`].
fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("{text:?} is not a duration like 90s, 5m or 1h");
    let (number, unit) = text
        .find(|c: char| !c.is_ascii_digit())
        .map_or((text, "s"), |i| text.split_at(i));
    let factor: u64 = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => return Err(bad()),
    };
    let too_long = || {
        format!(
            "{text:?} is longer than the longest timeout, {MAX_TIMEOUT_SECS}s (2562047h, Go's time.Duration as kubectl's --timeout)"
        )
    };
    // All digits: a number too large for u64 is too long, not malformed.
    if number.is_empty() {
        return Err(bad());
    }
    let n: u64 = number.parse().map_err(|_| too_long())?;
    match n.checked_mul(factor) {
        Some(secs) if secs <= MAX_TIMEOUT_SECS => Ok(Duration::from_secs(secs)),
        _ => Err(too_long()),
    }
}

/// The deploy/ directory: given, else the source tree's this binary was built in — found
/// from the binary itself (`<repo>/target/<profile>/fake-dra-sim`), so a moved checkout
/// still works — else the path it was built at.
fn deploy_dir(given: Option<&PathBuf>) -> PathBuf {
    if let Some(dir) = given {
        return dir.clone();
    }
    let beside = std::env::current_exe().ok().and_then(|exe| {
        exe.ancestors()
            .skip(1)
            .map(|dir| dir.join("deploy"))
            .find(|dir| dir.join("rendered").is_dir())
    });
    beside.unwrap_or_else(|| PathBuf::from(fake_dra_emulator::sim::DEPLOY_DIR))
}

fn parse_version(text: &str) -> Result<(u32, u32), String> {
    let bad = || format!("{text:?} is not a Kubernetes version like 1.34");
    let (major, minor) = text
        .trim_start_matches('v')
        .split_once('.')
        .ok_or_else(bad)?;
    let version = (
        major.parse().map_err(|_| bad())?,
        minor.parse().map_err(|_| bad())?,
    );
    match version {
        (1, 27..=30) | (1, 32..=37) => Ok(version),
        (1, 31) => Err("Kubernetes 1.31 is not supported (its kubelet reuses the v1alpha3 service name with another message layout)".into()),
        _ => Err(format!("{text} is outside the supported versions 1.27–1.30 (classic) and 1.32–1.37 (structured)")),
    }
}

fn main() -> ExitCode {
    // The hidden supervisor every child of the sim runs under (see `lifeline`): checked
    // before clap, so its command line is the child's and nothing else.
    let mut argv = std::env::args_os().skip(1);
    if argv.next().is_some_and(|a| a == lifeline::SUBCOMMAND) {
        return lifeline::supervise_main(argv.collect());
    }
    let (args, old_names) = flags::parse::<Args>(RENAMED);
    logging::init_with(args.log_format, DEFAULT_LOG_FILTER);
    for old in &old_names {
        old.warn();
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("fake-dra-sim: starting the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(start(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("fake-dra-sim: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Ties every process the sim starts to its life, then runs.
async fn start(args: Args) -> Result<(), String> {
    // Whatever ends the sim — Ctrl-C, a crash, `kill -9` — its children end with it.
    let exe = std::env::current_exe()
        .map_err(|e| format!("locating this executable for the process supervisor: {e}"))?;
    lifeline::install(exe).map_err(|e| e.to_string())?;
    run(args).await
}

/// What the flags say that no cluster could be started with, refused before anything
/// starts (they used to fail after start with a Debug dump, or hang it without a word).
fn check_flags(args: &Args) -> Result<(), String> {
    let nodes = "--nodes (FAKE_DRA_NODES)";
    if args.nodes.is_empty() {
        return Err(format!(
            "{nodes} names no node; give one or more node names, comma-separated"
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, node) in args.nodes.iter().enumerate() {
        // kube-apiserver's ValidateNodeName: a DNS subdomain (the node's directories and
        // its plugin's socket paths are named after it too).
        fake_dra_api::names::dns_subdomain(node, 253)
            .map_err(|why| format!("{nodes} entry {i}: {why}"))?;
        if !seen.insert(node) {
            return Err(format!(
                "{nodes} names {node:?} twice; every emulated node needs a name of its own"
            ));
        }
    }
    if let Some(n) = args.num_devices {
        // The plugin's own limit (kubelet-plugin fake::devices::MAX_NUM_DEVICES): one
        // NodeAllocationState, or one ResourceSlice of at most 128 devices.
        let max = fake_dra_api::params::MAX_COUNT.unsigned_abs() as usize;
        if !(1..=max).contains(&n) {
            return Err(format!(
                "--num-devices (FAKE_DRA_NUM_DEVICES) must be between 1 and {max}, got {n}: the kubelet plugin publishes 1 to {max} devices per node (one ResourceSlice or NodeAllocationState)"
            ));
        }
    }
    Ok(())
}

async fn run(args: Args) -> Result<(), String> {
    check_flags(&args)?;
    let deploy = deploy_dir(args.deploy_dir.as_ref());
    // Every manifest is read and checked before anything starts.
    let flag = args.mode.map(|m| match m {
        Mode::Classic => Generation::Classic,
        Mode::Structured => Generation::Structured,
    });
    let manifests: Vec<Manifest> = match &args.command {
        Cmd::Demo { .. } => {
            let generation = mode::pick(flag, args.kubernetes_version, &[])?.generation;
            let demo = match generation {
                Generation::Classic => DEMO_CLASSIC,
                Generation::Structured => DEMO_STRUCTURED,
            };
            manifests::load(&deploy.join(demo)).map_err(|e| e.to_string())?
        }
        Cmd::Run { files, .. } => {
            let mut all = Vec::new();
            for file in files {
                all.extend(manifests::load(file).map_err(|e| e.to_string())?);
            }
            if all.is_empty() {
                return Err("the given files hold no objects".into());
            }
            all
        }
    };
    let picked = mode::pick(flag, args.kubernetes_version, &manifests)?;
    if args.mode.is_none() {
        eprintln!(
            "fake-dra-sim: {} DRA, from {}; --mode sets it",
            picked.generation.overlay(),
            picked.reason
        );
    }
    let overlay = picked.generation.overlay();
    let config = SimConfig {
        overlay: overlay.into(),
        server_version: args.kubernetes_version,
        nodes: args.nodes.clone(),
        runtime: match args.runtime {
            Runtime::Auto => RuntimeChoice::Auto,
            Runtime::Podman => RuntimeChoice::Podman,
            Runtime::Process => RuntimeChoice::Process,
        },
        deploy_dir: deploy.clone(),
        bin_dir: args.bin_dir.clone(),
        work_dir: args.work_dir.clone(),
        plugin_env: args
            .num_devices
            .map(|n| ("FAKE_DRA_NUM_DEVICES".to_string(), n.to_string()))
            .into_iter()
            .chain(args.plugin_env.iter().cloned())
            .collect(),
        ..SimConfig::default()
    };
    let config = SimConfig {
        feature_gates: FeatureGates::parse(
            args.feature_gates.as_deref().unwrap_or_default(),
            config.kubernetes_version(),
        )
        .map_err(|e| e.to_string())?,
        ..config
    };
    // As the API server will take them, strictly, before anything starts.
    let deployed = manifests::rendered(&deploy, overlay).map_err(|e| e.to_string())?;
    fake_dra_emulator::sim::check_manifests(
        config.kubernetes_version(),
        &config.feature_gates,
        &deployed,
        &manifests,
    )
    .map_err(|e| e.to_string())?;
    // One watch on SIGINT/SIGTERM for the whole run, installed when the start is first
    // polled: a signal between two separately made watches was lost (a Ctrl-C right after
    // "cluster up" did nothing).
    let interrupt = fake_dra_ops::signals::shutdown();
    tokio::pin!(interrupt);
    let sim = tokio::select! {
        started = Sim::start(config) => started.map_err(|e| e.to_string())?,
        () = &mut interrupt => return Err("interrupted while starting".into()),
    };
    eprintln!(
        "fake-dra-sim: cluster up: nodes {}; driver logs in {}; {}",
        args.nodes.join(", "),
        sim.work_dir().join("logs").display(),
        kubectl_hint(&args.command, &sim.work_dir().join("kubeconfig"))
    );
    let outcome = drive(&sim, &args, &manifests, interrupt).await;
    sim.shutdown().await;
    outcome
}

/// How to reach the cluster with kubectl, when it stays up for that: the demo and
/// `run --wait` take it down as they end (with its kubeconfig), so they say which flag
/// keeps it instead of printing an export that would leave kubectl at `connection
/// refused` (issue 35).
fn kubectl_hint(command: &Cmd, kubeconfig: &std::path::Path) -> String {
    match command {
        Cmd::Demo {
            keep_running: false,
        } => "it goes away when the demo ends: add --keep-running to use kubectl against it"
            .to_string(),
        Cmd::Run { wait: true, .. } => {
            "it goes away when --wait ends: leave out --wait to use kubectl against it".to_string()
        }
        _ => format!("for kubectl:\nexport KUBECONFIG={}", kubeconfig.display()),
    }
}

/// `work`'s result, or `None` when `interrupt` completes first.
async fn until_interrupted<T>(
    work: impl std::future::Future<Output = T>,
    interrupt: impl std::future::Future<Output = ()>,
) -> Option<T> {
    tokio::select! {
        done = work => Some(done),
        () = interrupt => None,
    }
}

/// Applies the manifests and prints logs; returns when the demo is done or on Ctrl-C.
async fn drive(
    sim: &Sim,
    args: &Args,
    manifests: &[Manifest],
    mut interrupt: std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
) -> Result<(), String> {
    let mut lines = sim.logs().subscribe();
    // Thousands of objects take a while: Ctrl-C stops the apply too (the signal's handler
    // was installed while starting, so an unwatched Ctrl-C did nothing at all).
    match until_interrupted(sim.apply(manifests), interrupt.as_mut()).await {
        Some(applied) => applied.map_err(|e| e.to_string())?,
        None => {
            eprintln!("fake-dra-sim: interrupted while applying the manifests; shutting down");
            return Ok(());
        }
    }
    let demo = match args.command {
        Cmd::Demo { keep_running } => Some(keep_running),
        Cmd::Run { .. } => None,
    };
    let wait = match args.command {
        Cmd::Run {
            wait: true,
            timeout,
            ..
        } => tokio::time::Instant::now().checked_add(timeout),
        _ => None,
    };
    let client = sim.client().map_err(|e| e.to_string())?;
    let colour = output::colour_wanted(
        std::io::IsTerminal::is_terminal(&std::io::stdout()),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    let mut check = tokio::time::interval(WAIT_POLL);
    let deadline = tokio::time::sleep(DEMO_TIMEOUT);
    tokio::pin!(deadline);
    let mut demo_done = false;
    // Once --wait's pods settle: the summary, printed when their output has gone quiet.
    let mut settled: Option<(String, tokio::time::Instant)> = None;
    let quiet = tokio::time::sleep(output::QUIET);
    tokio::pin!(quiet);
    loop {
        tokio::select! {
            line = lines.recv() => match line {
                Ok(line) => {
                    use std::io::Write;
                    let text = output::format_line(&line.namespace, &line.pod, &line.container, &line.line, colour);
                    // A closed stdout (`| head`) ends the run quietly, as for any CLI.
                    if writeln!(std::io::stdout().lock(), "{text}").is_err() {
                        return Ok(());
                    }
                    if let Some((_, since)) = &settled {
                        quiet.as_mut().reset((tokio::time::Instant::now() + output::QUIET).min(*since + output::DRAIN_AT_MOST));
                    }
                    // `export` prints sorted: FAKE_NODE_NAME comes after every FAKE_DEVICE_*.
                    if demo.is_some() && line.namespace == DEMO_NAMESPACE && line.pod == DEMO_POD && line.container == DEMO_CONTAINER && line.line.starts_with("export FAKE_NODE_NAME=") {
                        demo_done = true;
                        if demo == Some(false) {
                            return Ok(());
                        }
                        eprintln!("fake-dra-sim: demo done; running until Ctrl-C");
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => eprintln!("fake-dra-sim: {n} log lines dropped"),
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return Ok(()),
            },
            () = &mut quiet, if settled.is_some() => {
                if let Some((summary, _)) = settled.take() {
                    eprintln!("fake-dra-sim: {summary}");
                }
                return Ok(());
            }
            _ = check.tick(), if wait.is_some() && settled.is_none() => {
                match fake_dra_emulator::sim::wait::settled(&client, sim.driver_namespace()).await {
                    Ok(fake_dra_emulator::sim::wait::Settled::Ready(summary)) => {
                        let now = tokio::time::Instant::now();
                        quiet.as_mut().reset(now + output::QUIET);
                        settled = Some((summary, now));
                    }
                    Ok(fake_dra_emulator::sim::wait::Settled::Failed(why)) => return Err(why),
                    Ok(fake_dra_emulator::sim::wait::Settled::NotYet(why)) => {
                        if wait.is_some_and(|at| tokio::time::Instant::now() >= at) {
                            return Err(format!("--timeout passed: {why}"));
                        }
                    }
                    Err(e) => tracing::debug!("checking the pods: {e}"),
                }
            }
            () = &mut deadline, if demo.is_some() && !demo_done => {
                return Err(format!("the demo pod {DEMO_NAMESPACE}/{DEMO_POD} printed no FAKE_NODE_NAME within {DEMO_TIMEOUT:?}; see the driver logs under {}", sim.work_dir().join("logs").display()));
            }
            () = &mut interrupt => {
                eprintln!("fake-dra-sim: shutting down");
                return Ok(());
            }
        }
    }
}

/// `KEY=VALUE`, KEY an environment variable's name (letters, digits, `_`, not starting
/// with a digit), as a shell would take it.
fn parse_plugin_env(text: &str) -> Result<(String, String), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not KEY=VALUE"))?;
    let valid = key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && key.bytes().next().is_some_and(|b| !b.is_ascii_digit());
    if !valid {
        return Err(format!(
            "{key:?} is not an environment variable's name (letters, digits and _, not starting with a digit)"
        ));
    }
    Ok((key.to_string(), value.to_string()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn plugin_env_takes_key_value() {
        assert_eq!(
            parse_plugin_env("FAKE_DRA_GPUS=A100-80GB:1:partitioned,L4-24GB:1:shared").unwrap(),
            (
                "FAKE_DRA_GPUS".into(),
                "A100-80GB:1:partitioned,L4-24GB:1:shared".into()
            )
        );
        assert_eq!(parse_plugin_env("A=").unwrap(), ("A".into(), String::new()));
        assert!(
            parse_plugin_env("FAKE_DRA_PROFILE")
                .unwrap_err()
                .contains("not KEY=VALUE")
        );
        assert!(
            parse_plugin_env("1X=y")
                .unwrap_err()
                .contains("not an environment")
        );
        assert!(
            parse_plugin_env("=y")
                .unwrap_err()
                .contains("not an environment")
        );
    }

    #[test]
    fn every_flag_follows_the_env_rule() {
        assert_eq!(flags::rule_breakers(&Args::command()), Vec::<String>::new());
    }

    /// Issue 35, item 4: `--version` and the completion scripts said fake-dra-emulator.
    #[test]
    fn the_command_is_named_as_the_binary() {
        let command = Args::command();
        assert_eq!(command.get_name(), "fake-dra-sim");
        let version = command.render_version();
        assert!(version.starts_with("fake-dra-sim "), "{version}");
    }

    /// D11: Ctrl-C while `run -f` applied was ignored until every object was in.
    #[tokio::test]
    async fn an_interrupt_stops_the_apply() {
        let never = std::future::pending::<Result<(), String>>();
        assert_eq!(until_interrupted(never, async {}).await, None);
        let done = async { Ok::<(), String>(()) };
        assert_eq!(
            until_interrupted(done, std::future::pending()).await,
            Some(Ok(()))
        );
    }

    /// D14, D25: `u64::MAX` seconds panicked after start, `u64::MAX` minutes overflowed
    /// the multiplication; both are refused by clap, naming the longest timeout.
    #[test]
    fn timeouts_past_the_longest_are_refused_not_overflowed() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(
            parse_duration("2562047h"),
            Ok(Duration::from_secs(2_562_047 * 3600))
        );
        for text in [
            "18446744073709551615",
            "18446744073709551615m",
            "18446744073709551616",
            "2562048h",
            "9223372037s",
        ] {
            let err = parse_duration(text).unwrap_err();
            assert!(
                err.contains("is longer than the longest timeout, 9223372036s"),
                "{text}: {err}"
            );
        }
        for text in ["", "m", "5d", "-1s", "1.5h"] {
            let err = parse_duration(text).unwrap_err();
            assert!(err.contains("is not a duration like 90s"), "{text}: {err}");
        }
        let err = Args::try_parse_from([
            "fake-dra-sim",
            "run",
            "-f",
            "x.yaml",
            "--timeout",
            "18446744073709551615",
        ])
        .unwrap_err()
        .to_string();
        assert!(err.contains("--timeout"), "{err}");
    }

    /// D26, D15: bad `--nodes` failed after start with a Debug dump (or, `a,a`, not at
    /// all), and `--num-devices 0` or `100000` hung the start while the plugins exited.
    #[test]
    fn node_names_and_device_counts_are_checked_before_start() {
        let check = |extra: &[&str]| {
            let mut argv = vec!["fake-dra-sim"];
            argv.extend_from_slice(extra);
            argv.extend_from_slice(&["run", "-f", "x.yaml"]);
            check_flags(&Args::try_parse_from(argv).unwrap())
        };
        assert_eq!(check(&[]), Ok(()));
        assert_eq!(check(&["--nodes", "a,b.c", "--num-devices", "128"]), Ok(()));
        let long = "n".repeat(300);
        for (args, want) in [
            (vec!["--nodes", ""], "--nodes (FAKE_DRA_NODES) "),
            (
                vec!["--nodes", "UPPER"],
                "--nodes (FAKE_DRA_NODES) entry 0: \"UPPER\" must be a lowercase DNS subdomain",
            ),
            (vec!["--nodes", &long], "--nodes (FAKE_DRA_NODES) entry 0: "),
            (
                vec!["--nodes", "a,a"],
                "--nodes (FAKE_DRA_NODES) names \"a\" twice",
            ),
            (
                vec!["--num-devices", "0"],
                "--num-devices (FAKE_DRA_NUM_DEVICES) must be between 1 and 128, got 0",
            ),
            (
                vec!["--num-devices", "100000"],
                "--num-devices (FAKE_DRA_NUM_DEVICES) must be between 1 and 128, got 100000",
            ),
        ] {
            let err = check(&args).unwrap_err();
            assert!(err.starts_with(want), "{args:?}: {err}");
        }
        let err = check(&["--nodes", &long]).unwrap_err();
        assert!(err.contains("is 300 characters, at most 253"), "{err}");
        assert!(err.len() < 400, "{err}");
    }

    #[test]
    fn every_old_name_maps_to_a_flag() {
        for r in RENAMED {
            assert!(
                Args::command()
                    .get_arguments()
                    .any(|a| a.get_env().is_some_and(|e| e == r.new)),
                "{} maps to no flag",
                r.new
            );
        }
    }
}
