//! The observer: lists the workload's pods and claims once a second, reads each
//! container's env when it runs, and checks the pod invariants as it goes: what the env
//! shows (against the API and against every other pod that exists), how long pods stay
//! in ContainerCreating once the faults stopped, and why a pod that does not run does
//! not. It also counts the lifecycles: a pod that ran, printed its env and went.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::{Api, ListParams, LogParams};

use super::checks::{KUBELET_RETRY, RETRIED_SYNC, check_stuck, classify_pod};
use super::ledger::{Expected, check_env, claim_key, parse_env};
use super::report::invariant;
use super::workload::{self, NS};
use super::{Soak, lock};
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

pub fn update(soak: &Soak, name: &str, f: impl FnOnce(&mut PodTrack)) {
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
            && text.contains("export PWD=")
        {
            break text;
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
