//! The observer: lists the workload's pods and claims once a second, reads each
//! container's env when it runs, and checks the pod invariants as it goes: what the env
//! shows (against the API and against every other pod that exists), how long pods stay
//! in ContainerCreating once the faults stopped, and why a pod that does not run does
//! not. It also counts the lifecycles: a pod that ran, printed its env and went.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::{Api, ListParams, LogParams};

use super::ledger::{Expected, check_env, claim_key, parse_env};
use super::report::invariant;
use super::workload::{self, NS};
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvState {
    NotRead,
    Reading,
    Read,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Pending,
    Classifying,
    Ran,
    Documented(String),
    Unexplained,
}

/// One workload pod as the observer knows it.
#[derive(Debug, Clone)]
pub struct PodTrack {
    pub uid: String,
    pub kind: &'static str,
    pub first_seen: Instant,
    pub scheduled: bool,
    pub creating_since: Option<Instant>,
    pub running: bool,
    pub env: EnvState,
    pub outcome: Outcome,
    pub stuck_reported: bool,
    /// When to look again at the Events of a pod in ContainerCreating past the limit.
    pub next_stuck_check: Option<Instant>,
    pub counted_slow: bool,
    /// The soak asked for its deletion.
    pub deleted: bool,
    pub gone: bool,
    pub status: String,
}

impl PodTrack {
    fn new(uid: String, kind: &'static str, now: Instant) -> Self {
        Self {
            uid,
            kind,
            first_seen: now,
            scheduled: false,
            creating_since: None,
            running: false,
            env: EnvState::NotRead,
            outcome: Outcome::Pending,
            stuck_reported: false,
            next_stuck_check: None,
            counted_slow: false,
            deleted: false,
            gone: false,
            status: String::new(),
        }
    }

    /// Ran, or its not running is accounted for.
    pub fn settled(&self) -> bool {
        self.gone || !matches!(self.outcome, Outcome::Pending | Outcome::Classifying)
    }
}

struct PodState {
    scheduled: bool,
    running: bool,
    creating: bool,
    terminal: bool,
    summary: String,
}

fn state(pod: &Pod) -> PodState {
    let status = pod.status.clone().unwrap_or_default();
    let phase = status.phase.unwrap_or_default();
    let container = status
        .container_statuses
        .as_ref()
        .and_then(|c| c.first())
        .and_then(|c| c.state.clone());
    let waiting = container
        .as_ref()
        .and_then(|s| s.waiting.as_ref())
        .and_then(|w| w.reason.clone());
    let scheduled = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_ref())
        .is_some();
    let running = phase == "Running" && container.as_ref().is_some_and(|s| s.running.is_some());
    // As kubectl shows it: scheduled, Pending, and the container waits to be created
    // (or the kubelet has not reported the container yet).
    let creating = scheduled
        && phase == "Pending"
        && (container.is_none() || waiting.as_deref() == Some("ContainerCreating"));
    PodState {
        scheduled,
        running,
        creating,
        terminal: phase == "Succeeded" || phase == "Failed",
        summary: format!(
            "{phase}{}",
            waiting.map(|w| format!("/{w}")).unwrap_or_default()
        ),
    }
}

pub async fn run(soak: Arc<Soak>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    while !soak.stop_watching.load(Ordering::SeqCst) {
        tick.tick().await;
        round(&soak).await;
    }
}

async fn list<K>(api: &Api<K>) -> Result<Vec<K>, String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match tokio::time::timeout(Duration::from_secs(10), api.list(&ListParams::default())).await {
        Ok(Ok(list)) => Ok(list.items),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer in 10 s".into()),
    }
}

/// One look at the workload.
pub async fn round(soak: &Arc<Soak>) {
    let Ok(pods) = list(&Api::<Pod>::namespaced(soak.client.clone(), NS)).await else {
        lock(&soak.report).blind_rounds += 1;
        return;
    };
    if let Ok(claims) = list(&Api::<ResourceClaim>::namespaced(soak.client.clone(), NS)).await {
        let mut known = lock(&soak.claims);
        known.by_name.clear();
        for c in claims {
            if let (Some(name), Some(uid)) = (c.metadata.name, c.metadata.uid) {
                known.uids.insert(uid.clone());
                known.by_name.insert(name, uid);
            }
        }
    }
    let now = Instant::now();
    let faults_stopped = soak.faults_stopped();
    let deadline = soak.config.pod_deadline;
    let (mut read, mut classify, mut gone) = (Vec::new(), Vec::new(), Vec::new());
    let mut stuck = Vec::new();
    let (mut creating_checks, mut longest_during, mut longest_after) =
        (0, Duration::ZERO, Duration::ZERO);
    {
        let mut tracks = lock(&soak.pods);
        let mut present = HashSet::new();
        for pod in &pods {
            let name = pod.metadata.name.clone().unwrap_or_default();
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            present.insert(name.clone());
            let t = tracks
                .entry(name.clone())
                .or_insert_with(|| PodTrack::new(uid, workload::kind_of(pod), now));
            let s = state(pod);
            // Deleted by the soak or by a controller (a scale-down): no outcome expected.
            t.deleted |= pod.metadata.deletion_timestamp.is_some();
            t.scheduled = s.scheduled;
            t.status = s.summary.clone();
            if s.running {
                t.running = true;
                t.creating_since = None;
                if t.env == EnvState::NotRead {
                    t.env = EnvState::Reading;
                    read.push(pod.clone());
                }
            } else if s.creating {
                let since = *t.creating_since.get_or_insert(now);
                match faults_stopped {
                    None => longest_during = longest_during.max(now - since),
                    Some(stopped) => {
                        // Counted from when the faults stopped for a pod that was
                        // waiting already then.
                        let waited = now - since.max(stopped);
                        longest_after = longest_after.max(waited);
                        creating_checks += 1;
                        let due = t.next_stuck_check.is_none_or(|at| now >= at);
                        if waited > KUBELET_RETRY + RETRIED_SYNC && !t.stuck_reported && due {
                            t.next_stuck_check = Some(now + Duration::from_secs(10));
                            stuck.push((name.clone(), t.uid.clone(), t.kind, waited));
                        }
                    }
                }
            } else {
                t.creating_since = None;
            }
            if !t.running
                && t.outcome == Outcome::Pending
                && !t.deleted
                && (s.terminal || now - t.first_seen > deadline)
            {
                t.outcome = Outcome::Classifying;
                classify.push(pod.clone());
            }
        }
        for (name, t) in tracks.iter_mut() {
            if !t.gone && !present.contains(name) {
                t.gone = true;
                gone.push((name.clone(), t.clone()));
            }
        }
    }
    {
        let mut report = lock(&soak.report);
        report.checked(invariant::CREATING, creating_checks);
        report.creating_during_faults = report.creating_during_faults.max(longest_during);
        report.creating_after_faults = report.creating_after_faults.max(longest_after);
    }
    for (name, uid, kind, waited) in stuck {
        tokio::spawn(check_stuck(soak.clone(), name, uid, kind, waited));
    }
    for (name, t) in gone {
        lock(&soak.ledger).unregister(&t.uid);
        let mut report = lock(&soak.report);
        let l = report.lifecycles(t.kind);
        l.gone += 1;
        if t.env == EnvState::Read {
            l.ran += 1;
        } else if t.kind == workload::DEPLOYMENT {
            // A scale-down removes pods that are not ready first (ReplicaSet controller).
            l.deleted_before_running += 1;
        } else if t.outcome == Outcome::Pending || t.outcome == Outcome::Classifying {
            report.violation(
                soak.elapsed(),
                invariant::POD_OUTCOME,
                format!(
                    "pod {name} ({}) went without running and without an Event naming why (last status {})",
                    t.kind, t.status
                ),
            );
        }
    }
    let live = lock(&soak.ledger).live_pods();
    let mut report = lock(&soak.report);
    report.max_live_pods = report.max_live_pods.max(live);
    drop(report);
    for pod in read {
        tokio::spawn(read_env(soak.clone(), pod));
    }
    for pod in classify {
        tokio::spawn(classify_pod(soak.clone(), pod));
    }
}

fn update(soak: &Soak, name: &str, f: impl FnOnce(&mut PodTrack)) {
    if let Some(t) = lock(&soak.pods).get_mut(name) {
        f(t);
    }
}

fn is_gone(soak: &Soak, name: &str) -> bool {
    lock(&soak.pods).get(name).is_none_or(|t| t.gone)
}

/// Waits for the container's `export` output, then checks it and registers its devices.
async fn read_env(soak: Arc<Soak>, pod: Pod) {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let api = Api::<Pod>::namespaced(soak.client.clone(), NS);
    let params = LogParams {
        container: Some("ctr0".into()),
        ..LogParams::default()
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    let text = loop {
        if is_gone(&soak, &name) {
            return;
        }
        if let Ok(Ok(text)) =
            tokio::time::timeout(Duration::from_secs(10), api.logs(&name, &params)).await
        {
            if text.contains("export PWD=") {
                break text;
            }
        }
        if Instant::now() > deadline {
            soak.violation(
                invariant::POD_OUTCOME,
                format!("pod {name} runs but printed no env in 120 s"),
            );
            update(&soak, &name, |t| t.outcome = Outcome::Unexplained);
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    let seen = parse_env(&crate::common::exported(&lines));
    match expected_claims(&soak, &pod).await {
        Ok(expected) => {
            soak.checked(invariant::ENV_MATCHES_API, 1);
            for problem in check_env(&seen, &expected, &soak.node, &soak.table) {
                soak.violation(invariant::ENV_MATCHES_API, format!("pod {name}: {problem}"));
            }
        }
        Err(e) => soak.violation(invariant::ENV_MATCHES_API, format!("pod {name}: {e}")),
    }
    // Registered under the pods' lock: a pod the observer saw go is never registered.
    let registration = {
        let mut tracks = lock(&soak.pods);
        let Some(t) = tracks.get_mut(&name).filter(|t| !t.gone) else {
            return;
        };
        t.env = EnvState::Read;
        t.outcome = Outcome::Ran;
        lock(&soak.ledger).register(&name, &uid, &seen, &soak.table)
    };
    {
        let mut report = lock(&soak.report);
        report.checked(invariant::EXCLUSIVE, 1);
        report.checked(invariant::SHARED_SAME, seen.claims.len() as u64);
        report.checked(invariant::POD_OUTCOME, 1);
    }
    for detail in registration.inconsistent {
        soak.violation(invariant::SHARED_SAME, detail);
    }
    for c in registration.conflicts {
        // The other pod still there, not terminated: both exist with the device.
        match api.get_opt(&c.theirs.pod).await {
            Ok(Some(other))
                if other.metadata.uid.as_deref() == Some(c.theirs.pod_uid.as_str())
                    && !state(&other).terminal =>
            {
                soak.violation(
                    invariant::EXCLUSIVE,
                    format!(
                        "device {} is in pod {} (claim {}) and in pod {} (claim {}, status {}), which do not share a claim",
                        c.parent,
                        c.mine.pod,
                        c.mine.claim,
                        c.theirs.pod,
                        c.theirs.claim,
                        state(&other).summary
                    ),
                );
            }
            _ => lock(&soak.report).dismissed_conflicts += 1,
        }
    }
}

/// The pod's claims as the API has them: claim key → the devices the shape asked for
/// (the pod's claim entries are named `c<count>s<split>-<k>` by the workload).
async fn expected_claims(soak: &Soak, pod: &Pod) -> Result<Expected, String> {
    let spec = pod.spec.clone().unwrap_or_default();
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.resource_claim_statuses.clone())
        .unwrap_or_default();
    let mut expected = BTreeMap::new();
    for entry in spec.resource_claims.unwrap_or_default() {
        let devices = workload::Shape::of_entry(&entry.name)
            .ok_or_else(|| format!("claim entry {:?} is not named by its shape", entry.name))?
            .devices();
        let claim = entry
            .resource_claim_name
            .clone()
            .or_else(|| {
                statuses
                    .iter()
                    .find(|s| s.name == entry.name)
                    .and_then(|s| s.resource_claim_name.clone())
            })
            .ok_or_else(|| format!("claim entry {} resolved to no claim", entry.name))?;
        let known = lock(&soak.claims).by_name.get(&claim).cloned();
        let uid = match known {
            Some(uid) => uid,
            None => Api::<ResourceClaim>::namespaced(soak.client.clone(), NS)
                .get(&claim)
                .await
                .map_err(|e| format!("claim {claim}: {e}"))?
                .metadata
                .uid
                .unwrap_or_default(),
        };
        expected.insert(claim_key(&uid), devices);
    }
    Ok(expected)
}

/// A pod not Running by its deadline (or terminated without running): the Warning
/// Event that says why, which must be a documented one.
async fn classify_pod(soak: Arc<Soak>, pod: Pod) {
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
async fn check_stuck(
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
    let reported: HashSet<String> = lock(&soak.pods)
        .iter()
        .filter(|(_, t)| t.stuck_reported)
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
