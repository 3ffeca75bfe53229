//! The chaos soak (e2e/tests/it/soak.rs, hack/soak.sh, docs/soak.md): a steady churn of pods
//! with claims on the real one-node cluster while faults hit the plugin, the kubelet,
//! kube-apiserver, containerd and the CDI directory, with the invariants checked as it
//! goes and at the end.
//!
//! Parts, each its own task: the observer (lists the pods, reads each container's env,
//! checks them: [`observer`]), the workload ([`workload`]), the faults ([`faults`]), the
//! plugin's process ([`plugin`]). They share one [`Soak`].

pub mod checks;
pub mod faults;
pub mod ledger;
pub mod observer;
pub mod plugin;
pub mod report;
pub mod rng;
pub mod workload;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::real::cluster::RealCluster;
use faults::FaultKind;
use ledger::{DeviceTable, Ledger};
use observer::PodTrack;
use report::Report;

/// What `hack/soak.sh` asks for (env `FAKE_DRA_SOAK_*`, docs/soak.md).
#[derive(Debug, Clone)]
pub struct Config {
    /// Pod lifecycles (pods that ran and went) to reach before the churn stops.
    pub size: u64,
    /// The churn lasts at least this long (0: as long as `size` takes).
    pub duration: Duration,
    pub seed: u64,
    /// Parent devices on the node (the plugin's FAKE_DRA_NUM_DEVICES).
    pub devices: u32,
    /// Workload units (a pod, or a claim with its pods) under way at once.
    pub concurrency: usize,
    pub faults: Vec<FaultKind>,
    /// The mean pause between a fault's recovery and the next fault.
    pub fault_gap: Duration,
    /// Faults start only this long into the churn (0: no limit); then not every kind
    /// needs to have come.
    pub fault_window: Duration,
    /// The churn goes on this long after the last fault.
    pub quiet: Duration,
    /// A pod not Running after this long is checked for an Event naming why.
    pub pod_deadline: Duration,
    pub report_file: std::path::PathBuf,
}

impl Config {
    pub fn from_env() -> Result<Self, String> {
        fn num(name: &str, default: u64) -> Result<u64, String> {
            match std::env::var(name) {
                Err(_) => Ok(default),
                Ok(v) if v.is_empty() => Ok(default),
                Ok(v) => v
                    .parse()
                    .map_err(|_| format!("{name}={v:?}: a whole number is needed")),
            }
        }
        let seed = match std::env::var("FAKE_DRA_SOAK_SEED") {
            Ok(v) if !v.is_empty() => v
                .parse()
                .map_err(|_| format!("FAKE_DRA_SOAK_SEED={v:?}: a whole number is needed"))?,
            _ => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or_default(),
        };
        let devices = num("FAKE_DRA_SOAK_DEVICES", 96)?;
        if !(16..=128).contains(&devices) {
            return Err(format!(
                "FAKE_DRA_SOAK_DEVICES={devices}: between 16 and 128 (the plugin's limit is 128)"
            ));
        }
        let faults = match std::env::var("FAKE_DRA_SOAK_FAULTS").as_deref() {
            Err(_) | Ok("") | Ok("all") => FaultKind::ALL.to_vec(),
            Ok("none") => Vec::new(),
            Ok(list) => list
                .split(',')
                .map(|k| {
                    FaultKind::parse(k.trim()).ok_or_else(|| {
                        format!(
                            "FAKE_DRA_SOAK_FAULTS: unknown fault {k:?}; known: {}",
                            FaultKind::ALL.map(FaultKind::name).join(",")
                        )
                    })
                })
                .collect::<Result<_, _>>()?,
        };
        let concurrency = num("FAKE_DRA_SOAK_CONCURRENCY", 16)?;
        if !(1..=64).contains(&concurrency) {
            return Err(format!(
                "FAKE_DRA_SOAK_CONCURRENCY={concurrency}: between 1 and 64"
            ));
        }
        Ok(Self {
            size: num("FAKE_DRA_SOAK_SIZE", 1000)?,
            duration: Duration::from_secs(num("FAKE_DRA_SOAK_DURATION", 0)?),
            seed,
            devices: devices as u32,
            concurrency: concurrency as usize,
            faults,
            fault_gap: Duration::from_secs(num("FAKE_DRA_SOAK_FAULT_GAP", 20)?),
            fault_window: Duration::from_secs(num("FAKE_DRA_SOAK_FAULT_WINDOW", 0)?),
            quiet: Duration::from_secs(num("FAKE_DRA_SOAK_QUIET", 60)?),
            pod_deadline: Duration::from_secs(num("FAKE_DRA_SOAK_POD_DEADLINE", 180)?),
            report_file: std::env::var_os("FAKE_DRA_SOAK_REPORT")
                .map(Into::into)
                .unwrap_or_else(|| crate::real::cluster::repo().join("target/soak/report.txt")),
        })
    }
}

/// The claims of the workload namespace as last listed: name → uid, and every uid seen.
#[derive(Debug, Default)]
pub struct Claims {
    pub by_name: HashMap<String, String>,
    pub uids: BTreeSet<String>,
}

/// What every part of the soak shares.
pub struct Soak {
    pub config: Config,
    pub cluster: Arc<RealCluster>,
    pub client: kube::Client,
    pub node: String,
    pub table: DeviceTable,
    pub started: Instant,
    pub pods: Mutex<BTreeMap<String, PodTrack>>,
    pub claims: Mutex<Claims>,
    pub ledger: Mutex<Ledger>,
    pub report: Mutex<Report>,
    /// When the last fault ended (set once the faults stop).
    pub faults_stopped: Mutex<Option<Instant>>,
    /// The same moment as a wall-clock time, to compare with Events.
    pub faults_stopped_at: Mutex<Option<jiff::Timestamp>>,
    pub stop_churn: AtomicBool,
    pub stop_watching: AtomicBool,
    names: AtomicU64,
}

/// A poisoned lock only means another task panicked; the data is still usable.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Soak {
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    pub fn violation(&self, invariant: &'static str, detail: String) {
        lock(&self.report).violation(self.elapsed(), invariant, detail);
    }

    pub fn checked(&self, invariant: &'static str, n: u64) {
        lock(&self.report).checked(invariant, n);
    }

    /// A name not used before in this run.
    pub fn name(&self, prefix: &str) -> String {
        format!("{prefix}-{}", self.names.fetch_add(1, Ordering::Relaxed))
    }

    pub fn faults_stopped(&self) -> Option<Instant> {
        *lock(&self.faults_stopped)
    }

    pub fn churn_stopped(&self) -> bool {
        self.stop_churn.load(Ordering::SeqCst)
    }

    /// Pods that ran and went.
    pub fn lifecycles(&self) -> u64 {
        lock(&self.report).ran()
    }

    pub fn log(&self, line: impl std::fmt::Display) {
        eprintln!("[soak {:>6.1}s] {line}", self.elapsed().as_secs_f64());
    }
}

/// Runs the soak on a cluster whose plugin already runs with `config.devices` devices
/// (see [`prepare`]) and returns its report.
pub async fn run(cluster: Arc<RealCluster>, config: Config) -> Report {
    let client = cluster.client();
    let node = cluster.node().to_string();
    let parents = workload::wait_for_parents(&client, &node, config.devices).await;
    let table = DeviceTable::new(&parents);
    let mut report = Report {
        seed: config.seed,
        devices: config.devices,
        size: config.size,
        ..Report::default()
    };
    report.baseline = plugin::baseline(&cluster, &client).await;
    let soak = Arc::new(Soak {
        config,
        cluster,
        client,
        node,
        table,
        started: Instant::now(),
        pods: Mutex::default(),
        claims: Mutex::default(),
        ledger: Mutex::default(),
        report: Mutex::new(report),
        faults_stopped: Mutex::new(None),
        faults_stopped_at: Mutex::new(None),
        stop_churn: AtomicBool::new(false),
        stop_watching: AtomicBool::new(false),
        names: AtomicU64::new(0),
    });
    soak.log(format!(
        "seed {}, size {}, {} devices, concurrency {}, faults {}, baseline plugin (RSS KiB, fds) {:?}",
        soak.config.seed,
        soak.config.size,
        soak.config.devices,
        soak.config.concurrency,
        soak.config
            .faults
            .iter()
            .map(|f| f.name())
            .collect::<Vec<_>>()
            .join(","),
        lock(&soak.report).baseline
    ));
    workload::install(&soak).await;

    let watchers = [
        tokio::spawn(observer::run(soak.clone())),
        tokio::spawn(plugin::sample(soak.clone())),
    ];
    let faults = tokio::spawn(faults::run(soak.clone()));
    let scaler = tokio::spawn(workload::scale_deployment(soak.clone()));
    workload::drive(&soak).await;
    let churn = soak.elapsed();
    for task in [faults, scaler] {
        if let Err(e) = task.await {
            soak.violation(
                report::invariant::RECOVERY,
                format!("a soak task failed: {e}"),
            );
        }
    }
    checks::failures_after_faults(&soak).await;
    soak.log("churn over; deleting the workload");
    workload::uninstall(&soak).await;
    checks::final_checks(&soak).await;
    soak.stop_watching.store(true, Ordering::SeqCst);
    for task in watchers {
        let _ = task.await;
    }
    plugin::final_check(&soak).await;
    let mut report = std::mem::take(&mut *lock(&soak.report));
    report.churn = churn;
    report.quiet = soak
        .faults_stopped()
        .map(|t| churn.saturating_sub(t.duration_since(soak.started)))
        .unwrap_or_default();
    report.total = soak.elapsed();
    report
}

/// Sets the plugin's devices per node, before the soak.
pub async fn prepare(cluster: &mut RealCluster, config: &Config) {
    use crate::real::backend::Backend;
    cluster
        .set_plugin_env(&[("FAKE_DRA_NUM_DEVICES", &config.devices.to_string())])
        .await;
}
