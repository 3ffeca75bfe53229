//! The pod invariants that need the kubelet's side of the story (its Events): why a pod
//! is not Running, whether one in ContainerCreating is stuck once the faults stopped (the
//! kubelet's retry periods, from its 1.37.2 sources), and what is left at the end.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::{Api, ListParams};

use super::observer::{Outcome, update};
use super::report::invariant;
use super::workload::NS;
use super::{Soak, lock};

/// The kubelet's retry period for a pod whose start failed, Kubernetes 1.37.2:
/// - a failed sandbox or container (a sync error): `backOffPeriod` = 10 s
///   (pkg/kubelet/kubelet.go), requeued after `wait.Jitter(backOffPeriod,
///   workerBackOffPeriodJitterFactor = 0.5)` (pkg/kubelet/pod_workers.go, `completeWork`):
///   at most 15 s;
/// - a failed DRA prepare: `SyncPod` records the FailedPrepareDynamicResources Event and
///   returns without a sync error (pkg/kubelet/kuberuntime/kuberuntime_manager.go), so
///   `completeWork` requeues the pod at the regular resync, `wait.Jitter(resyncInterval =
///   syncFrequency (1 min by default), workerResyncIntervalJitterFactor = 0.5)`: at most
///   90 s.
pub const KUBELET_RETRY: Duration = Duration::from_secs(15);
pub const KUBELET_RESYNC: Duration = Duration::from_secs(90);
/// What the retried start itself may take (sandbox, container, status; 1–3 s on an idle
/// machine, up to 30 s under other jobs' load here).
pub const RETRIED_SYNC: Duration = Duration::from_secs(15);

/// The kubelet's retry period after a failure of this reason.
pub fn retry_period(reason: &str) -> Duration {
    if reason == "FailedPrepareDynamicResources" {
        KUBELET_RESYNC
    } else {
        KUBELET_RETRY
    }
}

/// Warning Event reasons of the kubelet failing to start a pod (a sync that failed and
/// is retried): a failed prepare, no sandbox, a volume, a container that could not be
/// created (e.g. its CDI device unresolvable).
pub const KUBELET_FAILURES: [&str; 4] = [
    "FailedPrepareDynamicResources",
    "FailedCreatePodSandBox",
    "FailedMount",
    "Failed",
];

/// Warning Event reasons that explain a pod that is not Running yet (docs/soak.md): the
/// kubelet's failures, and the scheduler's (no free devices for the claim yet).
pub fn documented(reason: &str) -> bool {
    reason == "FailedScheduling" || KUBELET_FAILURES.contains(&reason)
}

/// Warning Event reasons that say nothing about why a pod is not Running: the kubelet
/// records `MissingClusterDNS` at every sync of a `ClusterFirst` pod on a kubelet without
/// `clusterDNS` (the local cluster has no DNS; `pkg/kubelet/network/dns/dns.go`,
/// `GetPodDNS`, 1.37.2), so it is the newest Warning of any pod that waits, and would hide
/// the failure that does explain it.
const NOT_WHY: [&str; 1] = ["MissingClusterDNS"];

/// A pod not Running by its deadline (or terminated without running): the Warning
/// Event that says why, which must be a documented one.
pub async fn classify_pod(soak: Arc<Soak>, pod: Pod) {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let events = Api::<Event>::namespaced(soak.client.clone(), NS)
        .list(&ListParams::default().fields(&format!("involvedObject.uid={uid}")))
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let mut warnings: Vec<&Event> = events
        .iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .filter(|e| !e.reason.as_deref().is_some_and(|r| NOT_WHY.contains(&r)))
        .collect();
    warnings.sort_by_key(|e| {
        e.last_timestamp
            .as_ref()
            .map(|t| t.0)
            .or_else(|| e.event_time.as_ref().map(|t| t.0))
    });
    let status = lock(&soak.pods)
        .get(&name)
        .map(|t| t.status.clone())
        .unwrap_or_default();
    soak.checked(invariant::POD_OUTCOME, 1);
    let outcome = match warnings.last() {
        Some(e) => {
            let reason = e.reason.clone().unwrap_or_default();
            let message = e.message.clone().unwrap_or_default();
            let stopped_long_ago = soak
                .faults_stopped()
                .is_some_and(|t| t.elapsed() > KUBELET_RESYNC + RETRIED_SYNC);
            if documented(&reason) && !stopped_long_ago {
                soak.log(format!(
                    "pod {name} not Running ({status}) by its deadline: {reason}: {message}"
                ));
                *lock(&soak.report)
                    .documented
                    .entry(reason.clone())
                    .or_default() += 1;
                Outcome::Documented(reason)
            } else {
                let why = if documented(&reason) {
                    "though the faults stopped before its kubelet retry was due; last"
                } else {
                    "undocumented"
                };
                soak.violation(
                    invariant::POD_OUTCOME,
                    format!("pod {name} not Running ({status}) by its deadline, {why} {reason}: {message}"),
                );
                Outcome::Unexplained
            }
        }
        None => {
            soak.violation(
                invariant::POD_OUTCOME,
                format!(
                    "pod {name} not Running ({status}) after {} s, and no Warning Event says why",
                    soak.config.pod_deadline.as_secs()
                ),
            );
            Outcome::Unexplained
        }
    };
    update(&soak, &name, |t| t.outcome = outcome);
}

/// The Warning Events of the kubelet's failures for a pod, oldest first: (when, reason,
/// message).
async fn kubelet_failures(soak: &Soak, uid: &str) -> Vec<(jiff::Timestamp, String, String)> {
    let events = Api::<Event>::namespaced(soak.client.clone(), NS)
        .list(&ListParams::default().fields(&format!("involvedObject.uid={uid}")))
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let mut failures: Vec<_> = events
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .filter(|e| {
            e.reason
                .as_deref()
                .is_some_and(|r| KUBELET_FAILURES.contains(&r))
        })
        .map(|e| {
            let when = e
                .last_timestamp
                .map(|t| t.0)
                .or_else(|| e.event_time.map(|t| t.0))
                .unwrap_or_default();
            (
                when,
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default(),
            )
        })
        .collect();
    failures.sort_by_key(|f| f.0);
    failures
}

/// A pod in ContainerCreating past the shorter retry period after the faults stopped.
/// Stuck if the kubelet failed to start it after the faults stopped (the fault outlived
/// the recovery), or if the retry of its last failure was due (that failure's retry
/// period, counted from the failure or from the faults' end if later) and the retried
/// start had [`RETRIED_SYNC`] more, and it is still in ContainerCreating. Without any
/// failure it is slow (the machine's load), not stuck; one that never starts is caught at
/// its deadline.
pub async fn check_stuck(
    soak: Arc<Soak>,
    name: String,
    uid: String,
    kind: &'static str,
    waited: Duration,
) {
    let Some(stopped) = *lock(&soak.faults_stopped_at) else {
        return;
    };
    let failures = kubelet_failures(&soak, &uid).await;
    let now = jiff::Timestamp::now();
    let stuck = match failures.last() {
        Some((when, reason, message)) if *when > stopped + jiff::SignedDuration::from_secs(1) => {
            Some(format!(
                "its start failed again after the faults stopped, at {when}: {reason}: {message}"
            ))
        }
        Some((when, reason, message)) => {
            let retry = jiff::SignedDuration::try_from(retry_period(reason)).unwrap_or_default();
            let slack = jiff::SignedDuration::try_from(RETRIED_SYNC).unwrap_or_default();
            let due = (*when + retry).max(stopped) + slack;
            (now > due).then(|| {
                format!(
                    "its last failure at {when} ({reason}: {message}) was due for a retry within {} s, and the retried start had until {due}",
                    retry_period(reason).as_secs()
                )
            })
        }
        None => {
            let mut first = false;
            update(&soak, &name, |t| {
                first = !t.counted_slow;
                t.counted_slow = true;
            });
            if first {
                lock(&soak.report).slow_starts += 1;
            }
            None
        }
    };
    if let Some(why) = stuck {
        update(&soak, &name, |t| t.stuck_reported = true);
        soak.violation(
            invariant::CREATING,
            format!(
                "pod {name} ({kind}) still in ContainerCreating {:.0} s after the faults stopped: {why}",
                waited.as_secs_f64()
            ),
        );
    }
}

/// Every kubelet failure Event of the workload since the faults stopped (and recovery
/// was seen): each says a fault's effect outlived the recovery.
pub async fn failures_after_faults(soak: &Soak) {
    let Some(stopped) = *lock(&soak.faults_stopped_at) else {
        return;
    };
    let events = Api::<Event>::namespaced(soak.client.clone(), NS)
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    soak.checked(invariant::CREATING, 1);
    // Pods reported stuck already, and pods deleted before they ran: the kubelet's start
    // of a pod being deleted fails for that reason (e.g. FailedMount, `failed to fetch
    // token: pod ... not found`: the TokenRequest of a deleted pod), which is no fault's
    // effect; the pod's outcome is checked on its own (a scale-down's, or a violation).
    let reported: HashSet<String> = lock(&soak.pods)
        .iter()
        .filter(|(_, t)| t.stuck_reported || (t.deleted || t.gone) && !t.running)
        .map(|(name, _)| name.clone())
        .collect();
    for e in events {
        if e.involved_object
            .name
            .as_ref()
            .is_some_and(|n| reported.contains(n))
        {
            continue;
        }
        let when = e
            .last_timestamp
            .map(|t| t.0)
            .or_else(|| e.event_time.map(|t| t.0));
        let reason = e.reason.unwrap_or_default();
        // Event times have whole seconds.
        if e.type_.as_deref() == Some("Warning")
            && KUBELET_FAILURES.contains(&reason.as_str())
            && when.is_some_and(|w| w > stopped + jiff::SignedDuration::from_secs(1))
        {
            soak.violation(
                invariant::CREATING,
                format!(
                    "after the faults stopped, the kubelet failed to start pod {}: {reason} ({} times): {}",
                    e.involved_object.name.unwrap_or_default(),
                    e.count.unwrap_or(1),
                    e.message.unwrap_or_default()
                ),
            );
        }
    }
}

/// Once the workload is deleted: no CDI spec of any claim the soak saw, no checkpoint
/// entry, no ResourceClaim; waits up to two minutes for the kubelet's unprepares.
pub async fn final_checks(soak: &Soak) {
    let uids = lock(&soak.claims).uids.clone();
    let deadline = Instant::now() + Duration::from_secs(120);
    let cdi = std::path::Path::new("/var/run/cdi");
    let checkpoint =
        std::path::Path::new("/var/lib/kubelet/plugins/fake.resource.3-shake.com/checkpoint.json");
    let (specs, entries, claims) = loop {
        let specs: Vec<String> = std::fs::read_dir(cdi)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|f| uids.iter().any(|u| f.contains(u.as_str())))
                    .collect()
            })
            .unwrap_or_default();
        let entries: Vec<String> = std::fs::read(checkpoint)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| v["claims"].as_object().map(|o| o.keys().cloned().collect()))
            .unwrap_or_else(|| vec![format!("(cannot read {})", checkpoint.display())]);
        let claims: Vec<String> = Api::<ResourceClaim>::all(soak.client.clone())
            .list(&ListParams::default())
            .await
            .map(|l| l.items.into_iter().filter_map(|c| c.metadata.uid).collect())
            .unwrap_or_else(|e| vec![format!("(cannot list: {e})")]);
        if (specs.is_empty() && entries.is_empty() && claims.is_empty())
            || Instant::now() > deadline
        {
            break (specs, entries, claims);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    soak.checked(invariant::NOTHING_LEFT, 3);
    soak.log(format!(
        "at the end: {} claim CDI specs, {} checkpoint entries, {} ResourceClaims left ({} claim uids seen)",
        specs.len(),
        entries.len(),
        claims.len(),
        uids.len()
    ));
    if !specs.is_empty() {
        soak.violation(
            invariant::NOTHING_LEFT,
            format!("CDI specs left in /var/run/cdi: {specs:?}"),
        );
    }
    if !entries.is_empty() {
        soak.violation(
            invariant::NOTHING_LEFT,
            format!(
                "checkpoint entries left in {}: {entries:?}",
                checkpoint.display()
            ),
        );
    }
    if !claims.is_empty() {
        soak.violation(
            invariant::NOTHING_LEFT,
            format!("ResourceClaims left: {claims:?}"),
        );
    }
}
