//! The plugin's pod and process: which container runs it, its pid (from containerd, as
//! crictl shows it), SIGKILL, and its RSS and open fds sampled from /proc every two
//! seconds. Also reads what each new plugin container logged at its start (specs swept
//! or written back: the trace of a crash between the CDI write and the checkpoint write,
//! or of a wiped CDI directory).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, LogParams};

use super::report::{ProcessStats, invariant};
use super::{Soak, lock};
use crate::real::cluster::{DRIVER_NAMESPACE, PLUGIN_LABEL, RealCluster};

/// How far above a fresh plugin's RSS the plugin may go while the churn runs.
pub const RSS_SLACK_KIB: u64 = 48 * 1024;
/// How many more fds than a fresh plugin it may hold while the churn runs.
pub const FDS_SLACK: u64 = 64;
/// How many more fds than a fresh plugin it may hold once the workload is gone.
pub const END_FDS_SLACK: u64 = 8;

/// The plugin pod that is not being deleted.
#[derive(Debug, Clone)]
pub struct PluginPod {
    pub name: String,
    pub container_id: String,
    pub ready: bool,
    /// The exit code of the container's last termination.
    pub last_exit: Option<i32>,
    pub crash_point: Option<String>,
}

pub async fn plugin_pod(client: &kube::Client) -> Result<PluginPod, String> {
    let pods = tokio::time::timeout(
        Duration::from_secs(10),
        Api::<Pod>::namespaced(client.clone(), DRIVER_NAMESPACE)
            .list(&ListParams::default().labels(PLUGIN_LABEL)),
    )
    .await
    .map_err(|_| "listing the plugin pod: no answer in 10 s".to_string())?
    .map_err(|e| format!("listing the plugin pod: {e}"))?;
    let pod = pods
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .max_by_key(|p| p.metadata.creation_timestamp.as_ref().map(|t| t.0))
        .ok_or("no plugin pod")?;
    let status = pod.status.clone().unwrap_or_default();
    let container = status
        .container_statuses
        .as_ref()
        .and_then(|c| c.first())
        .cloned()
        .unwrap_or_default();
    let crash_point = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.env.as_ref())
        .and_then(|env| env.iter().find(|e| e.name == "FAKE_DRA_TEST_CRASH_POINT"))
        .and_then(|e| e.value.clone());
    Ok(PluginPod {
        name: pod.metadata.name.clone().unwrap_or_default(),
        container_id: container
            .container_id
            .clone()
            .unwrap_or_default()
            .trim_start_matches("containerd://")
            .to_string(),
        ready: container.ready
            && container
                .state
                .as_ref()
                .is_some_and(|s| s.running.is_some()),
        last_exit: container
            .last_state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .map(|t| t.exit_code),
        crash_point,
    })
}

/// The host pid of a container's process (crictl inspect), checked to be the plugin.
pub async fn pid_of(cluster: &Arc<RealCluster>, container_id: &str) -> Result<u32, String> {
    let (cluster, id) = (cluster.clone(), container_id.to_string());
    tokio::task::spawn_blocking(move || {
        let out = cluster.crictl(&["inspect", &id])?;
        let info: serde_json::Value =
            serde_json::from_str(&out).map_err(|e| format!("crictl inspect {id}: {e}"))?;
        let pid = info["info"]["pid"]
            .as_u64()
            .ok_or_else(|| format!("crictl inspect {id}: no info.pid"))? as u32;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if !String::from_utf8_lossy(&cmdline).contains("fake-dra-kubelet-plugin") {
            return Err(format!(
                "pid {pid} of container {id} is not the plugin: {:?}",
                String::from_utf8_lossy(&cmdline)
            ));
        }
        Ok(pid)
    })
    .await
    .map_err(|e| e.to_string())?
}

/// SIGKILL to the plugin's process; says which.
pub async fn sigkill(soak: &Soak) -> Result<String, String> {
    let pod = plugin_pod(&soak.client).await?;
    if pod.container_id.is_empty() {
        return Err(format!("plugin pod {} has no container yet", pod.name));
    }
    let pid = pid_of(&soak.cluster, &pod.container_id).await?;
    let status = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .map_err(|e| format!("kill -KILL {pid}: {e}"))?;
    if !status.success() {
        return Err(format!("kill -KILL {pid}: {status}"));
    }
    Ok(format!("SIGKILL to pid {pid} (pod {})", pod.name))
}

/// (RSS in KiB, open fds) of a process.
pub fn rss_fds(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
    Some((rss, fds))
}

/// The fresh plugin's (RSS, fds), before any claim: the bounds are measured from it.
pub async fn baseline(cluster: &Arc<RealCluster>, client: &kube::Client) -> Option<(u64, u64)> {
    for _ in 0..60 {
        if let Ok(pod) = plugin_pod(client).await
            && pod.ready
        {
            // A moment for the kubelet's connection and the health stream.
            tokio::time::sleep(Duration::from_secs(3)).await;
            if let Ok(pid) = pid_of(cluster, &pod.container_id).await {
                return rss_fds(pid);
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    None
}

/// Samples the plugin process every two seconds until the soak ends.
pub async fn sample(soak: Arc<Soak>) {
    let baseline = lock(&soak.report).baseline;
    let mut current: Option<(String, u32)> = None;
    let mut reported = false;
    while !soak.stop_watching.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let Ok(pod) = plugin_pod(&soak.client).await else {
            continue;
        };
        if pod.container_id.is_empty() || !pod.ready {
            continue;
        }
        if current.as_ref().map(|(id, _)| id) != Some(&pod.container_id) {
            let Ok(pid) = pid_of(&soak.cluster, &pod.container_id).await else {
                continue;
            };
            current = Some((pod.container_id.clone(), pid));
            reported = false;
            scan_start(&soak, &pod).await;
            lock(&soak.report).processes.push(ProcessStats {
                container: pod.container_id.clone(),
                ..ProcessStats::default()
            });
        }
        let Some((_, pid)) = &current else { continue };
        let Some((rss, fds)) = rss_fds(*pid) else {
            current = None;
            continue;
        };
        let mut report = lock(&soak.report);
        report.checked(invariant::PLUGIN_BOUNDED, 1);
        if let Some(p) = report.processes.last_mut() {
            if p.samples == 0 {
                p.first_rss_kib = rss;
                p.first_fds = fds;
            }
            p.samples += 1;
            p.max_rss_kib = p.max_rss_kib.max(rss);
            p.max_fds = p.max_fds.max(fds);
            p.last_rss_kib = rss;
            p.last_fds = fds;
        }
        if let Some((base_rss, base_fds)) = baseline
            && !reported
            && (rss > base_rss + RSS_SLACK_KIB || fds > base_fds + FDS_SLACK)
        {
            reported = true;
            report.violation(
                    soak.elapsed(),
                    invariant::PLUGIN_BOUNDED,
                    format!(
                        "plugin pid {pid}: RSS {rss} KiB, {fds} fds; bounds {} KiB and {} fds (a fresh plugin: {base_rss} KiB, {base_fds} fds)",
                        base_rss + RSS_SLACK_KIB,
                        base_fds + FDS_SLACK
                    ),
                );
        }
    }
}

/// What a new plugin container logged at its start: specs of claims not in the
/// checkpoint removed, claim specs written back.
async fn scan_start(soak: &Soak, pod: &PluginPod) {
    let params = LogParams {
        container: Some("plugin".into()),
        ..LogParams::default()
    };
    let Ok(Ok(log)) = tokio::time::timeout(
        Duration::from_secs(10),
        Api::<Pod>::namespaced(soak.client.clone(), DRIVER_NAMESPACE).logs(&pod.name, &params),
    )
    .await
    else {
        return;
    };
    let swept = log
        .lines()
        .filter(|l| l.contains("removing CDI spec of a claim not in the checkpoint"))
        .count();
    let restored = log
        .lines()
        .filter(|l| l.contains("writing CDI spec") && !l.contains("_common.json"))
        .count();
    let mut report = lock(&soak.report);
    report.plugin_starts_scanned += 1;
    if swept > 0 {
        report.orphans_swept += 1;
    }
    if restored > 0 {
        report.specs_restored += 1;
    }
    drop(report);
    if swept + restored > 0 {
        soak.log(format!(
            "plugin container {:.12} at its start: {swept} specs of unrecorded claims removed, {restored} claim specs written back",
            pod.container_id
        ));
    }
}

/// How long the end check waits for the plugin's fds to come back down: kube-client's
/// connection pool (hyper-util's legacy client) keeps an idle connection to the API server
/// for 90 s, and the churn's bursts leave several. A leak outlives that; a pool does not.
const END_FDS_SETTLE: Duration = Duration::from_secs(100);

/// With the workload gone: the plugin holds about the fds a fresh one does.
pub async fn final_check(soak: &Soak) {
    let Some((base_rss, base_fds)) = lock(&soak.report).baseline else {
        soak.violation(
            invariant::PLUGIN_BOUNDED,
            "no baseline of the plugin's RSS and fds was taken".into(),
        );
        return;
    };
    let bound = base_fds + END_FDS_SLACK;
    let deadline = tokio::time::Instant::now() + END_FDS_SETTLE;
    soak.checked(invariant::PLUGIN_BOUNDED, 1);
    loop {
        // The kubelet's and the API's connections settle.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let sample = match plugin_pod(&soak.client).await {
            Ok(pod) => pid_of(&soak.cluster, &pod.container_id)
                .await
                .ok()
                .and_then(|pid| rss_fds(pid).map(|s| (pid, s))),
            Err(_) => None,
        };
        let Some((pid, (rss, fds))) = sample else {
            if tokio::time::Instant::now() < deadline {
                continue;
            }
            soak.violation(
                invariant::PLUGIN_BOUNDED,
                "cannot sample the plugin at the end".into(),
            );
            return;
        };
        if fds <= bound {
            soak.log(format!(
                "plugin at the end, no claims: RSS {rss} KiB, {fds} fds (fresh: {base_rss} KiB, {base_fds} fds)"
            ));
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            soak.violation(
                invariant::PLUGIN_BOUNDED,
                format!(
                    "the plugin holds {fds} fds with no claim {}s after the churn, a fresh one {base_fds} (bound {bound}); they are: {}",
                    END_FDS_SETTLE.as_secs(),
                    fd_kinds(pid)
                ),
            );
            return;
        }
    }
}

/// What a process's fds are, counted by kind: sockets by their peer (TCP) or kind
/// (unix), other files by their path, so a leak names itself.
fn fd_kinds(pid: u32) -> String {
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return format!("(cannot read /proc/{pid}/fd)");
    };
    let peers = tcp_peers(pid);
    let mut kinds: std::collections::BTreeMap<String, usize> = Default::default();
    for entry in entries.flatten() {
        let target = std::fs::read_link(entry.path())
            .map(|t| t.display().to_string())
            .unwrap_or_else(|e| format!("({e})"));
        let kind = match target
            .strip_prefix("socket:[")
            .and_then(|t| t.strip_suffix(']'))
        {
            Some(inode) => match peers.get(inode) {
                Some(peer) => format!("tcp to {peer}"),
                None => "socket (unix or listening)".to_string(),
            },
            None => target,
        };
        *kinds.entry(kind).or_default() += 1;
    }
    kinds
        .iter()
        .map(|(kind, n)| format!("{kind} x{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Socket inode -> remote address:port of the TCP connections in a process's network
/// namespace (/proc/PID/net/tcp and tcp6; addresses in hex, as the kernel writes them).
fn tcp_peers(pid: u32) -> std::collections::HashMap<String, String> {
    let mut peers = std::collections::HashMap::new();
    for table in ["tcp", "tcp6"] {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            if let (Some(remote), Some(state), Some(inode)) =
                (fields.get(2), fields.get(3), fields.get(9))
            {
                peers.insert(
                    inode.to_string(),
                    format!("{} (state {state})", hex_peer(remote)),
                );
            }
        }
    }
    peers
}

/// "0100007F:1F90" -> "127.0.0.1:8080" (IPv4); IPv6 peers stay in hex.
fn hex_peer(hex: &str) -> String {
    let Some((addr, port)) = hex.split_once(':') else {
        return hex.to_string();
    };
    let port = u16::from_str_radix(port, 16).map_or_else(|_| port.to_string(), |p| p.to_string());
    match u32::from_str_radix(addr, 16) {
        Ok(a) if addr.len() == 8 => format!("{}:{port}", std::net::Ipv4Addr::from(a.swap_bytes())),
        _ => format!("[{addr}]:{port}"),
    }
}
