//! The faults: one at a time, in an order drawn from the seed (every kind once per round,
//! shuffled), after a random pause; each followed by the measurement of its recovery.
//!
//! Recovery (docs/soak.md): from the end of the fault — the SIGKILL sent, the pod
//! deletion accepted, the restarted component serving again (`hack/local-cluster.sh
//! restart` returned), the crash point turned off again — until the plugin pod is Ready
//! and the node's slices list every device ("plugin back"), and then a pod with a
//! one-device claim, created at that moment, runs and has printed its env ("recovered").

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::api::{Api, DeleteParams, ListParams};

use super::observer::EnvState;
use super::plugin::{self, plugin_pod};
use super::report::invariant;
use super::rng::Rng;
use super::workload::{self, NS, Shape, Source};
use super::{Soak, lock};
use crate::common::DRIVER;
use crate::real::cluster::DRIVER_NAMESPACE;

/// How long kube-apiserver stays down in [`FaultKind::ApiserverDownLong`]: longer than the
/// plugin's longest retry pause (30 s: slice_controller.rs of dra-kubelet-plugin, and kube-runtime's watcher
/// backoff), after the up to 15 s its own stop takes.
pub const APISERVER_DOWN: Duration = Duration::from_secs(40);
/// A fault not recovered from after this long is a violation.
const RECOVERY_LIMIT: Duration = Duration::from_secs(300);

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultKind {
    /// SIGKILL to the plugin's process at a random moment.
    PluginSigkill,
    /// SIGKILL 0–150 ms after two pods with three claims each were bound: during their
    /// prepare batches, with luck between a CDI write and the checkpoint write.
    PluginSigkillInBatch,
    /// The node's slices deleted, SIGKILL 0–150 ms later: while the plugin publishes.
    PluginSigkillWhilePublishing,
    /// The plugin pod deleted (SIGTERM; the DaemonSet makes another).
    PluginPodDelete,
    /// `hack/local-cluster.sh restart kubelet`.
    KubeletRestart,
    /// `hack/local-cluster.sh restart kube-apiserver`.
    ApiserverRestart,
    /// kube-apiserver stopped for [`APISERVER_DOWN`].
    ApiserverDownLong,
    /// `hack/local-cluster.sh restart containerd`.
    ContainerdRestart,
    /// The claim specs and the common spec removed from /var/run/cdi, and the plugin
    /// SIGKILLed: what a reboot leaves (a tmpfs emptied, the plugin started again).
    CdiWipe,
    /// The plugin started with `FAKE_DRA_TEST_CRASH_POINT=prepare-after-spec`: it aborts
    /// after writing a prepare's CDI specs, before the checkpoint; then started without.
    CrashPrepareAfterSpec,
    /// Likewise `unprepare-after-spec`: specs removed, checkpoint not written.
    CrashUnprepareAfterSpec,
}

impl FaultKind {
    pub const ALL: [Self; 11] = [
        Self::PluginSigkill,
        Self::PluginSigkillInBatch,
        Self::PluginSigkillWhilePublishing,
        Self::PluginPodDelete,
        Self::KubeletRestart,
        Self::ApiserverRestart,
        Self::ApiserverDownLong,
        Self::ContainerdRestart,
        Self::CdiWipe,
        Self::CrashPrepareAfterSpec,
        Self::CrashUnprepareAfterSpec,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::PluginSigkill => "plugin-sigkill",
            Self::PluginSigkillInBatch => "plugin-sigkill-in-batch",
            Self::PluginSigkillWhilePublishing => "plugin-sigkill-while-publishing",
            Self::PluginPodDelete => "plugin-pod-delete",
            Self::KubeletRestart => "kubelet-restart",
            Self::ApiserverRestart => "apiserver-restart",
            Self::ApiserverDownLong => "apiserver-down-long",
            Self::ContainerdRestart => "containerd-restart",
            Self::CdiWipe => "cdi-wipe",
            Self::CrashPrepareAfterSpec => "crash-prepare-after-spec",
            Self::CrashUnprepareAfterSpec => "crash-unprepare-after-spec",
        }
    }

    /// Whether the fault ends the plugin's process: then "plugin back" needs a new one
    /// (the pod's Ready condition lags behind a kill by up to the probe period).
    fn replaces_plugin(self) -> bool {
        !matches!(
            self,
            Self::KubeletRestart
                | Self::ApiserverRestart
                | Self::ApiserverDownLong
                | Self::ContainerdRestart
        )
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// Injects faults until the soak has enough: 85 % of its lifecycles, every kind at least
/// once, and all but the quiet time of its duration; or until the fault window is over.
/// Then marks the faults stopped.
pub async fn run(soak: Arc<Soak>) {
    let c = &soak.config;
    let mut rng = Rng::stream(c.seed, "faults");
    let mut order: Vec<FaultKind> = Vec::new();
    let mut seen = BTreeSet::new();
    let mut n = 0;
    while !c.faults.is_empty() {
        let window_over = !c.fault_window.is_zero() && soak.elapsed() >= c.fault_window;
        let enough = window_over
            || soak.lifecycles() * 100 >= c.size * 85
                && seen.len() == c.faults.iter().collect::<BTreeSet<_>>().len()
                && soak.elapsed() + c.quiet >= c.duration;
        if enough || soak.churn_stopped() {
            break;
        }
        tokio::time::sleep(rng.around(c.fault_gap)).await;
        if order.is_empty() {
            order = c.faults.clone();
            rng.shuffle(&mut order);
            soak.log(format!(
                "fault order of this round: {}",
                order
                    .iter()
                    .map(|k| k.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            order.reverse();
        }
        let Some(kind) = order.pop() else { break };
        seen.insert(kind);
        n += 1;
        let at = soak.elapsed();
        soak.log(format!("fault #{n}: {}", kind.name()));
        let before = plugin_pod(&soak.client)
            .await
            .map(|p| p.container_id)
            .unwrap_or_default();
        let injected = inject(&soak, kind, &mut rng).await;
        lock(&soak.report).fault(kind.name()).injected += 1;
        let line = match injected {
            Err(e) => {
                soak.violation(
                    invariant::RECOVERY,
                    format!("fault #{n} {}: could not inject: {e}", kind.name()),
                );
                format!(
                    "#{n} at {:.0} s {}: could not inject: {e}",
                    at.as_secs_f64(),
                    kind.name()
                )
            }
            Ok((end, what)) => {
                let old = kind.replaces_plugin().then_some(before.as_str());
                let recovered = recover(&soak, kind, end, old).await;
                let mut report = lock(&soak.report);
                let stats = report.fault(kind.name());
                let took = match recovered {
                    Some((back, d)) => {
                        stats.recovered += 1;
                        stats.total += d;
                        stats.slowest = stats.slowest.max(d);
                        stats.slowest_plugin_back = stats.slowest_plugin_back.max(back);
                        format!(
                            "plugin back in {:.1} s, recovered in {:.1} s",
                            back.as_secs_f64(),
                            d.as_secs_f64()
                        )
                    }
                    None => "NOT recovered".to_string(),
                };
                drop(report);
                soak.log(format!("fault #{n} {}: {what}; {took}", kind.name()));
                format!(
                    "#{n} at {:.0} s {}: {what}; {took}",
                    at.as_secs_f64(),
                    kind.name()
                )
            }
        };
        lock(&soak.report).fault_log.push(line);
    }
    *lock(&soak.faults_stopped) = Some(Instant::now());
    *lock(&soak.faults_stopped_at) = Some(jiff::Timestamp::now());
    soak.log(format!("faults stop after {n}; the churn goes on without"));
}

/// `hack/local-cluster.sh ARGS`, off the async threads.
async fn local_cluster(soak: &Soak, args: &[&str]) -> Result<String, String> {
    let cluster = soak.cluster.clone();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        cluster
            .local_cluster(&args)
            .map(|out| out.lines().last().unwrap_or_default().to_string())
    })
    .await
    .map_err(|e| e.to_string())?
}

async fn kubectl(soak: &Soak, args: &[&str]) -> Result<String, String> {
    let cluster = soak.cluster.clone();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        cluster.kubectl(&args)
    })
    .await
    .map_err(|e| e.to_string())?
}

/// Does the fault; returns when it ended and what was done.
async fn inject(
    soak: &Arc<Soak>,
    kind: FaultKind,
    rng: &mut Rng,
) -> Result<(Instant, String), String> {
    let what = match kind {
        FaultKind::PluginSigkill => plugin::sigkill(soak).await?,
        FaultKind::PluginSigkillInBatch => {
            let delay = Duration::from_millis(rng.range(0, 150));
            let pods = batch_pods(soak).await?;
            wait_bound(soak, &pods).await?;
            tokio::time::sleep(delay).await;
            let killed = plugin::sigkill(soak).await;
            let soak2 = soak.clone();
            tokio::spawn(async move {
                workload::wait_settled(&soak2, &pods).await;
                workload::retire(&soak2, &pods, &[]).await;
            });
            format!(
                "{} {} ms after two 3-claim pods were bound",
                killed?,
                delay.as_millis()
            )
        }
        FaultKind::PluginSigkillWhilePublishing => {
            let delay = Duration::from_millis(rng.range(0, 150));
            let deleted = delete_node_slices(soak).await?;
            tokio::time::sleep(delay).await;
            format!(
                "{} {} ms after deleting the node's slices {deleted:?}",
                plugin::sigkill(soak).await?,
                delay.as_millis()
            )
        }
        FaultKind::PluginPodDelete => {
            let pod = plugin_pod(&soak.client).await?;
            Api::<Pod>::namespaced(soak.client.clone(), DRIVER_NAMESPACE)
                .delete(&pod.name, &DeleteParams::default())
                .await
                .map_err(|e| format!("delete pod {}: {e}", pod.name))?;
            format!("deleted pod {}", pod.name)
        }
        FaultKind::KubeletRestart => local_cluster(soak, &["restart", "kubelet"]).await?,
        FaultKind::ApiserverRestart => local_cluster(soak, &["restart", "kube-apiserver"]).await?,
        FaultKind::ApiserverDownLong => {
            let secs = APISERVER_DOWN.as_secs().to_string();
            local_cluster(soak, &["restart", "kube-apiserver", "--down-for", &secs]).await?
        }
        FaultKind::ContainerdRestart => local_cluster(soak, &["restart", "containerd"]).await?,
        FaultKind::CdiWipe => {
            let removed = wipe_cdi(soak)?;
            format!(
                "removed {removed} CDI specs; {}",
                plugin::sigkill(soak).await?
            )
        }
        FaultKind::CrashPrepareAfterSpec => crash_point(soak, "prepare-after-spec").await?,
        FaultKind::CrashUnprepareAfterSpec => crash_point(soak, "unprepare-after-spec").await?,
    };
    Ok((Instant::now(), what))
}

/// Two pods with three claims each (prepared in one call per pod).
async fn batch_pods(soak: &Soak) -> Result<Vec<String>, String> {
    let shapes = [
        Shape { count: 1, split: 1 },
        Shape { count: 1, split: 3 },
        Shape { count: 1, split: 2 },
    ];
    let mut pods = Vec::new();
    for _ in 0..2 {
        let pod = soak.name("batch");
        let entries: Vec<(String, Source)> = shapes
            .iter()
            .enumerate()
            .map(|(k, s)| (s.entry(k), Source::Template(*s)))
            .collect();
        workload::create_pod(soak, &pod, "batch", &entries).await?;
        pods.push(pod);
    }
    Ok(pods)
}

/// Until one of the pods is bound to the node (polled every 20 ms).
async fn wait_bound(soak: &Soak, pods: &[String]) -> Result<(), String> {
    let api = Api::<Pod>::namespaced(soak.client.clone(), NS);
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        for pod in pods {
            if let Ok(Some(p)) = api.get_opt(pod).await
                && p.spec.and_then(|s| s.node_name).is_some()
            {
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(format!("none of {pods:?} was bound in 60 s"))
}

async fn delete_node_slices(soak: &Soak) -> Result<Vec<String>, String> {
    let api = Api::<ResourceSlice>::all(soak.client.clone());
    let slices = api
        .list(&ListParams::default())
        .await
        .map_err(|e| format!("list slices: {e}"))?;
    let mut deleted = Vec::new();
    for s in slices.items {
        if s.spec.driver == DRIVER && s.spec.node_name.as_deref() == Some(soak.node.as_str()) {
            let name = s.metadata.name.unwrap_or_default();
            api.delete(&name, &DeleteParams::default())
                .await
                .map_err(|e| format!("delete slice {name}: {e}"))?;
            deleted.push(name);
        }
    }
    Ok(deleted)
}

/// Removes this cluster's specs from /var/run/cdi (its claims' and its node's common
/// spec; other CDI producers of the machine keep theirs).
fn wipe_cdi(soak: &Soak) -> Result<usize, String> {
    let uids = lock(&soak.claims).uids.clone();
    let dir = std::path::Path::new("/var/run/cdi");
    let mut removed = 0;
    for entry in std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with(crate::real::backend::CDI_PREFIX) {
            continue;
        }
        let ours = uids.iter().any(|u| name.contains(u.as_str()))
            || (name.ends_with("_common.json")
                && std::fs::read_to_string(entry.path())
                    .is_ok_and(|s| s.contains(&format!("FAKE_NODE_NAME={}", soak.node))));
        if ours {
            std::fs::remove_file(entry.path()).map_err(|e| format!("{name}: {e}"))?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// The plugin restarted with a crash point, until it crashed there (or a minute went
/// by without a call reaching it), then without.
async fn crash_point(soak: &Soak, point: &str) -> Result<String, String> {
    // `kubectl set env`: what an operator types; the DaemonSet rolls its pod.
    let set_env = |assignment: String| async move {
        let ds = "daemonset/fake-dra-kubelet-plugin";
        kubectl(
            soak,
            &["-n", DRIVER_NAMESPACE, "set", "env", ds, &assignment],
        )
        .await
    };
    set_env(format!("FAKE_DRA_TEST_CRASH_POINT={point}")).await?;
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut crashed = false;
    while Instant::now() < deadline {
        if let Ok(pod) = plugin_pod(&soak.client).await {
            // abort() as PID 1 of the container: SIGABRT (134), or the fault glibc's
            // abort falls back to when the signal is ignored; never 0.
            if pod.crash_point.as_deref() == Some(point) && pod.last_exit.is_some_and(|c| c != 0) {
                crashed = true;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    set_env("FAKE_DRA_TEST_CRASH_POINT-".to_string()).await?;
    Ok(if crashed {
        format!("the plugin aborted at {point}; crash point off again")
    } else {
        format!("no call reached {point} in 90 s; crash point off again")
    })
}

/// Waits until the plugin is Ready (in a new container if the fault ended the `old` one)
/// and the node's slices list every device, then until a pod with a claim created at that
/// moment runs and printed its env; returns both times, from `end`.
async fn recover(
    soak: &Arc<Soak>,
    kind: FaultKind,
    end: Instant,
    old: Option<&str>,
) -> Option<(Duration, Duration)> {
    let devices = soak.config.devices as usize;
    let plugin_back = loop {
        let ready = plugin_pod(&soak.client).await.is_ok_and(|p| {
            p.ready && p.crash_point.is_none() && old.is_none_or(|old| p.container_id != old)
        });
        let slices = workload::published_parents(&soak.client, &soak.node)
            .await
            .is_ok_and(|ids| ids.len() == devices);
        if ready && slices {
            break end.elapsed();
        }
        if end.elapsed() > RECOVERY_LIMIT {
            soak.violation(
                invariant::RECOVERY,
                format!(
                    "{}: {} s after the fault the plugin is not back (Ready {ready}, slices complete {slices})",
                    kind.name(),
                    RECOVERY_LIMIT.as_secs()
                ),
            );
            soak.checked(invariant::RECOVERY, 1);
            return None;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let probe = soak.name("probe");
    let shape = Shape { count: 1, split: 1 };
    if let Err(e) = workload::create_pod(
        soak,
        &probe,
        "probe",
        &[(shape.entry(0), Source::Template(shape))],
    )
    .await
    {
        soak.violation(
            invariant::RECOVERY,
            format!("{}: the probe pod: {e}", kind.name()),
        );
        return None;
    }
    let recovered = loop {
        let ran = lock(&soak.pods)
            .get(&probe)
            .is_some_and(|t| t.env == EnvState::Read);
        if ran {
            break Some((plugin_back, end.elapsed()));
        }
        if end.elapsed() > RECOVERY_LIMIT {
            let status = lock(&soak.pods)
                .get(&probe)
                .map(|t| t.status.clone())
                .unwrap_or_default();
            soak.violation(
                invariant::RECOVERY,
                format!(
                    "{}: the plugin was back {:.1} s after the fault, but a pod with a claim created then ({probe}) did not run {} s after the fault (status {status})",
                    kind.name(),
                    plugin_back.as_secs_f64(),
                    RECOVERY_LIMIT.as_secs()
                ),
            );
            break None;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    soak.checked(invariant::RECOVERY, 1);
    let soak = soak.clone();
    tokio::spawn(async move {
        workload::wait_settled(&soak, std::slice::from_ref(&probe)).await;
        workload::retire(&soak, &[probe], &[]).await;
    });
    recovered
}
