//! Pod workers (`pkg/kubelet/pod_workers.go` and the sync loop, as far as this node's
//! pods need): containers start with the CDI ids the DRA manager gives them; pod status
//! (phase, conditions, container statuses) is reported; `restartPolicy` is honoured; a
//! deleted pod's containers are stopped, its claims unprepared, and the pod removed with
//! grace period 0, as the kubelet finishes a graceful deletion.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use fake_dra_api::upstream::pod::{ClassicContainer, DraPod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, Preconditions};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::NodeContext;
use super::dra::{self, ClaimKey};
use crate::cluster::object_ref;
use crate::cluster::runtime::{ContainerSpec, RunningContainer};

/// How often a pod worker looks at its containers and retries what failed.
const POD_TICK: Duration = Duration::from_millis(200);
/// The longest wait between two restarts of a crashing container (upstream: 5 minutes;
/// shortened so tests of crash loops end).
const MAX_RESTART_BACKOFF: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------
// Pod dispatch

/// Hands every pod of this node to its worker; a pod that left the API ends its worker.
pub(super) async fn sync_pods(ctx: &Arc<NodeContext>) -> Result<(), kube::Error> {
    if *ctx.stopping.borrow() {
        return Ok(());
    }
    let pods = Api::<DraPod>::all(ctx.client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let mine: HashMap<String, DraPod> = pods
        .into_iter()
        .filter(|p| p.node_name() == Some(ctx.node.as_str()))
        .filter(|p| {
            !ctx.host_run
                .iter()
                .any(|h| h.matches(p.metadata.namespace.as_deref(), p.metadata.labels.as_ref()))
        })
        .filter_map(|p| Some((p.metadata.uid.clone()?, p)))
        .collect();
    let mut workers = ctx.workers.lock().await;
    workers.retain(|uid, tx| {
        if tx.is_closed() {
            return false;
        }
        if !mine.contains_key(uid) {
            tx.send_replace(None);
        }
        true
    });
    for (uid, pod) in mine {
        match workers.get(&uid) {
            Some(tx) => {
                tx.send_replace(Some(pod));
            }
            None => {
                let (tx, rx) = watch::channel(Some(pod));
                tokio::spawn(PodWorker::new(ctx.clone(), uid.clone()).run(rx));
                workers.insert(uid, tx);
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Pod workers

struct ContainerSlot {
    name: String,
    spec: ContainerSpec,
    running: Option<RunningContainer>,
    restarts: u32,
    /// Exit code of the last run, once it ended.
    last_exit: Option<i32>,
    next_start: tokio::time::Instant,
    started_at: String,
    /// The current run's container id (`<runtime>://<id>-<run>`: the run names its log file).
    container_id: String,
    /// `state.terminated` of the current run once it ended.
    terminated: Option<Value>,
    /// `lastState.terminated`: the run before the current one.
    last_terminated: Option<Value>,
}

struct PodWorker {
    ctx: Arc<NodeContext>,
    uid: String,
    containers: Vec<ContainerSlot>,
    /// The claim-info cache entries this pod may hold.
    claims: Vec<ClaimKey>,
    /// The last status written, to write only changes.
    reported: Option<Value>,
    /// The last failure reported as an Event, to report each once.
    last_failure: Option<String>,
    /// When this kubelet first took the pod (`status.startTime`, set once as upstream's
    /// `generateAPIPodStatus` does).
    start_time: String,
    /// `status.podIP`, from when the sandbox exists (its claims are prepared).
    ip: Option<std::net::Ipv4Addr>,
}

impl Drop for PodWorker {
    /// The pod is gone from this node: its address goes back to the pool.
    fn drop(&mut self) {
        self.ctx
            .pod_addresses
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .release(&self.uid);
    }
}

impl PodWorker {
    fn new(ctx: Arc<NodeContext>, uid: String) -> Self {
        Self {
            ctx,
            uid,
            containers: Vec::new(),
            claims: Vec::new(),
            reported: None,
            last_failure: None,
            start_time: crate::apiserver::now_rfc3339(),
            ip: None,
        }
    }

    async fn run(mut self, mut pod_rx: watch::Receiver<Option<DraPod>>) {
        let mut stopping = self.ctx.stopping.subscribe();
        loop {
            if *stopping.borrow() {
                self.stop_containers().await;
                return;
            }
            let pod = pod_rx.borrow_and_update().clone();
            match pod {
                None => {
                    // Gone from the API (force deletion or garbage collection).
                    self.stop_containers().await;
                    self.unprepare().await;
                    return;
                }
                Some(pod) if pod.metadata.deletion_timestamp.is_some() => {
                    if self.terminate(&pod).await {
                        return;
                    }
                }
                Some(pod) if pod.is_done() => {
                    self.stop_containers().await;
                    self.unprepare().await;
                }
                Some(pod) => self.sync(&pod).await,
            }
            tokio::select! {
                changed = pod_rx.changed() => if changed.is_err() { self.stop_containers().await; return },
                _ = stopping.changed() => {}
                () = tokio::time::sleep(POD_TICK) => {}
            }
        }
    }

    /// Graceful deletion: containers stopped, claims unprepared, then the pod removed with
    /// grace 0 (uid precondition, so a new pod of the same name is never hit).
    async fn terminate(&mut self, pod: &DraPod) -> bool {
        if !self.containers.is_empty() {
            let note = format!("Stopping {} container(s)", self.containers.len());
            self.ctx
                .events
                .normal(object_ref(pod), "Killing", "Kill", note)
                .await;
        }
        self.stop_containers().await;
        if !self.unprepare().await {
            return false;
        }
        let (Some(namespace), Some(name)) = (
            pod.metadata.namespace.as_deref(),
            pod.metadata.name.as_deref(),
        ) else {
            return true;
        };
        // The containers are gone; so are their logs once the pod is (the kubelet removes a
        // removed pod's log directory), before a new pod of the same name can print.
        self.ctx.logs.forget(namespace, name);
        let dir = self.ctx.dirs.pod_log_dir(namespace, name, &self.uid);
        if let Err(e) = std::fs::remove_dir_all(&dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(dir = %dir.display(), "removing the pod's logs: {e}");
        }
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(self.uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match Api::<DraPod>::namespaced(self.ctx.client.clone(), namespace)
            .delete(name, &params)
            .await
        {
            Ok(_) => true,
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => true,
            Err(error) => {
                tracing::debug!(pod = name, %error, "finishing the pod's deletion failed; retrying");
                false
            }
        }
    }

    async fn sync(&mut self, pod: &DraPod) {
        if self.containers.is_empty() {
            match self.prepare_and_create(pod).await {
                Ok(()) => self.last_failure = None,
                Err(failure) => {
                    if self.last_failure.as_ref() != Some(&failure.message) {
                        self.ctx
                            .events
                            .warn(
                                object_ref(pod),
                                failure.reason,
                                "StartPod",
                                failure.message.clone(),
                            )
                            .await;
                        self.last_failure = Some(failure.message.clone());
                    }
                    self.report(pod, Some(&failure)).await;
                    return;
                }
            }
        }
        let policy = restart_policy(pod);
        let now = tokio::time::Instant::now();
        let release = self.ctx.release;
        for slot in &mut self.containers {
            if let Some(running) = slot.running.as_mut()
                && let Some(code) = running.try_exit_code()
            {
                slot.running = None;
                slot.last_exit = Some(code);
                slot.terminated =
                    Some(terminated(code, &slot.started_at, &slot.container_id, None));
                self.ctx.run_ended(slot.spec.log_path.as_deref());
                let backoff =
                    Duration::from_secs(1 << slot.restarts.min(4)).min(MAX_RESTART_BACKOFF);
                slot.next_start = now + backoff;
                tracing::info!(node = %self.ctx.node, pod = %slot.spec.pod, container = %slot.name, code, "container exited");
                if will_restart(slot.last_exit, policy) {
                    let note = format!(
                        "Back-off restarting failed container {} in pod {}",
                        slot.name,
                        pod_full_name(pod)
                    );
                    self.ctx
                        .events
                        .warn(
                            container_ref(pod, &slot.name),
                            "BackOff",
                            "StartContainer",
                            note,
                        )
                        .await;
                }
            }
            let restart = match slot.last_exit {
                None => slot.running.is_none(),
                exit => will_restart(exit, policy),
            };
            if slot.running.is_none() && restart && now >= slot.next_start {
                if slot.last_exit.is_some() {
                    slot.restarts += 1;
                    slot.last_terminated = slot.terminated.take();
                }
                let run = slot.restarts;
                slot.spec.log_path = Some(self.ctx.dirs.container_log(
                    &slot.spec.namespace,
                    &slot.spec.pod,
                    &self.uid,
                    &slot.name,
                    run,
                ));
                slot.container_id = format!("{}://{}-{run}", self.ctx.runtime.name(), slot.spec.id);
                slot.started_at = crate::apiserver::now_rfc3339();
                let reference = container_ref(pod, &slot.name);
                let (created, started) = release.container_event_notes(&slot.name);
                let pulled = format!(
                    "Container image {:?} already present on machine",
                    image_of(pod, &slot.name)
                );
                self.ctx
                    .events
                    .normal(reference.clone(), "Pulled", "Pull", pulled)
                    .await;
                match self
                    .ctx
                    .runtime
                    .start(slot.spec.clone(), self.ctx.logs.clone())
                    .await
                {
                    Ok(running) => {
                        slot.running = Some(running);
                        slot.last_exit = None;
                        let events = &self.ctx.events;
                        events
                            .normal(reference.clone(), "Created", "Create", created)
                            .await;
                        events.normal(reference, "Started", "Start", started).await;
                    }
                    Err(error) => {
                        tracing::warn!(pod = %slot.spec.pod, container = %slot.name, %error, "starting the container failed");
                        let message = error.to_string();
                        slot.last_exit = Some(128);
                        slot.terminated = Some(terminated(
                            128,
                            &slot.started_at,
                            &slot.container_id,
                            Some(&message),
                        ));
                        self.ctx.run_ended(slot.spec.log_path.as_deref());
                        slot.next_start = now + MAX_RESTART_BACKOFF;
                        let note = format!("Error: {message}");
                        self.ctx
                            .events
                            .warn(reference, "Failed", "StartContainer", note)
                            .await;
                    }
                }
            }
        }
        self.report(pod, None).await;
    }

    /// Prepares the pod's claims and builds its containers' specs.
    /// Prepares the pod's claims (`PrepareDynamicResources`, when the pod's sandbox is
    /// created) and builds its containers' specs.
    async fn prepare_and_create(&mut self, pod: &DraPod) -> Result<(), Failure> {
        if pod
            .spec
            .as_ref()
            .and_then(|s| s.init_containers.as_ref())
            .is_some_and(|c| !c.is_empty())
        {
            return Err(Failure::new(
                "InitContainersNotSupported",
                "the emulated kubelet does not run init containers".into(),
            ));
        }
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        // Whatever happens, the claims the cache now holds for this pod are unprepared
        // when it goes (1.32+ track them before calling the driver).
        let prepared = dra::prepare_pod(&self.ctx, pod, &self.uid).await;
        for key in dra::pod_claim_keys(self.ctx.release, pod) {
            if !self.claims.contains(&key) {
                self.claims.push(key);
            }
        }
        prepared
            .map_err(|e| Failure::prepare(format!("Failed to prepare dynamic resources: {e}")))?;
        let mut containers = Vec::new();
        for container in pod.all_containers() {
            let cdi_devices = dra::container_cdi_devices(&self.ctx, pod, container)
                .await
                .map_err(|m| Failure::new("CreateContainerConfigError", m))?;
            let spec = ContainerSpec {
                namespace: namespace.clone(),
                pod: pod_name.clone(),
                container: container.name.clone(),
                id: format!("{}-{}", self.uid, container.name),
                command: command_of(container)
                    .map_err(|m| Failure::new("CreateContainerConfigError", m))?,
                env: env_of(container)
                    .map_err(|m| Failure::new("CreateContainerConfigError", m))?,
                cdi_devices,
                cdi_root: self.ctx.dirs.cdi_root.clone(),
                // Set per run, when it starts.
                log_path: None,
            };
            containers.push(ContainerSlot {
                name: container.name.clone(),
                spec,
                running: None,
                restarts: 0,
                last_exit: None,
                next_start: tokio::time::Instant::now(),
                started_at: String::new(),
                container_id: String::new(),
                terminated: None,
                last_terminated: None,
            });
        }
        self.containers = containers;
        let host_network = pod
            .spec
            .as_ref()
            .and_then(|s| s.extra.get("hostNetwork"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        self.ip = if host_network {
            Some(std::net::Ipv4Addr::LOCALHOST)
        } else {
            self.ctx
                .pod_addresses
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .assign(&self.uid)
        };
        Ok(())
    }

    /// Releases this pod's claims; the last pod using a claim unprepares it. Returns
    /// whether everything was released (a failed call is retried on the next tick).
    async fn unprepare(&mut self) -> bool {
        if self.claims.is_empty() {
            return true;
        }
        match dra::unprepare_pod(&self.ctx, &self.uid, &self.claims).await {
            Ok(()) => {
                self.claims.clear();
                true
            }
            Err(error) => {
                tracing::warn!(node = %self.ctx.node, pod = %self.uid, %error, "unpreparing the pod's claims failed; retrying");
                false
            }
        }
    }

    async fn stop_containers(&mut self) {
        for slot in &mut self.containers {
            if let Some(running) = slot.running.take() {
                running.stop().await;
                slot.last_exit = Some(137);
            }
            self.ctx.run_ended(slot.spec.log_path.as_deref());
        }
        self.containers.clear();
    }

    /// Writes the pod's status when it changed (merge patch on `pods/status`, which only
    /// touches the fields the kubelet owns).
    async fn report(&mut self, pod: &DraPod, failure: Option<&Failure>) {
        let status = self.status(pod, failure);
        if self.reported.as_ref() == Some(&status) {
            return;
        }
        let (Some(namespace), Some(name)) = (
            pod.metadata.namespace.as_deref(),
            pod.metadata.name.as_deref(),
        ) else {
            return;
        };
        let api = Api::<DraPod>::namespaced(self.ctx.client.clone(), namespace);
        match api
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await
        {
            Ok(_) => self.reported = Some(status),
            Err(error) => {
                tracing::debug!(pod = name, %error, "writing the pod status failed; retrying")
            }
        }
    }

    fn status(&self, pod: &DraPod, failure: Option<&Failure>) -> Value {
        let policy = restart_policy(pod);
        let now = tokio::time::Instant::now();
        let statuses: Vec<Value> = self
            .containers
            .iter()
            .map(|slot| {
                // As the kubelet reports them (`convertToAPIContainerStatuses`): a run that
                // ended and will be started again after a back-off is waiting in
                // CrashLoopBackOff, with the run in lastState.
                let (state, last) = match (&slot.running, &slot.terminated) {
                    (Some(_), _) => (
                        json!({"running": {"startedAt": slot.started_at}}),
                        slot.last_terminated.clone(),
                    ),
                    (None, Some(ended)) if will_restart(slot.last_exit, policy) => {
                        let wait = slot
                            .next_start
                            .saturating_duration_since(now)
                            .as_secs()
                            .max(1);
                        let message = format!(
                            "back-off {wait}s restarting failed container={} pod={}",
                            slot.name,
                            pod_full_name(pod)
                        );
                        (
                            json!({"waiting": {"reason": "CrashLoopBackOff", "message": message}}),
                            Some(ended.clone()),
                        )
                    }
                    (None, Some(ended)) => {
                        (json!({"terminated": ended}), slot.last_terminated.clone())
                    }
                    (None, None) => (json!({"waiting": {"reason": "ContainerCreating"}}), None),
                };
                let mut status = json!({
                    "name": slot.name,
                    "ready": slot.running.is_some(),
                    "started": slot.running.is_some(),
                    "restartCount": slot.restarts,
                    "image": image_of(pod, &slot.name),
                    "imageID": "",
                    "state": state,
                    "lastState": last.map_or_else(|| json!({}), |t| json!({"terminated": t})),
                });
                if !slot.container_id.is_empty() {
                    status["containerID"] = json!(slot.container_id);
                }
                status
            })
            .collect();
        let all_running =
            !self.containers.is_empty() && self.containers.iter().all(|c| c.running.is_some());
        let all_exited = !self.containers.is_empty()
            && self
                .containers
                .iter()
                .all(|c| c.running.is_none() && c.last_exit.is_some());
        let phase = if all_exited
            && !self
                .containers
                .iter()
                .any(|c| will_restart(c.last_exit, policy))
        {
            if self.containers.iter().all(|c| c.last_exit == Some(0)) {
                "Succeeded"
            } else {
                "Failed"
            }
        } else if self
            .containers
            .iter()
            .any(|c| c.running.is_some() || c.last_exit.is_some())
        {
            "Running"
        } else {
            "Pending"
        };
        // Before its containers exist, each waits as the kubelet reports it: creating, or
        // the reason it cannot be (CreateContainerConfigError …). A failed prepare is an
        // Event only, so the pod shows ContainerCreating, as on a cluster (issue 35: it
        // showed STATUS FailedPrepareDynamicResources).
        let statuses = if statuses.is_empty() {
            let waiting = match failure {
                Some(f) if f.reason != Failure::PREPARE => {
                    json!({"reason": f.reason, "message": f.message})
                }
                _ => json!({"reason": "ContainerCreating"}),
            };
            pod.spec
                .as_ref()
                .map(|s| {
                    s.containers
                        .iter()
                        .map(|c| c.name.clone())
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
                .into_iter()
                .map(|name| {
                    json!({
                        "name": name, "ready": false, "started": false, "restartCount": 0,
                        "image": image_of(pod, &name), "imageID": "",
                        "state": {"waiting": waiting}, "lastState": {},
                    })
                })
                .collect()
        } else {
            statuses
        };
        let condition = |type_: &str, ok: bool| json!({"type": type_, "status": if ok { "True" } else { "False" }});
        let mut status = json!({
            "phase": phase,
            "hostIP": "127.0.0.1",
            "startTime": self.start_time,
            "conditions": [
                condition("PodScheduled", true),
                condition("Initialized", true),
                condition("ContainersReady", all_running),
                condition("Ready", all_running),
            ],
            "containerStatuses": statuses,
        });
        if let Some(ip) = self.ip {
            status["podIP"] = json!(ip.to_string());
            status["podIPs"] = json!([{"ip": ip.to_string()}]);
        }
        status
    }
}

/// Why a pod's containers could not be created yet (an Event reason and message).
#[derive(Debug)]
struct Failure {
    reason: &'static str,
    message: String,
}

impl Failure {
    fn new(reason: &'static str, message: String) -> Self {
        Self { reason, message }
    }

    /// The reason the kubelet's DRA manager reports.
    const PREPARE: &'static str = "FailedPrepareDynamicResources";

    fn prepare(message: String) -> Self {
        Self::new(Self::PREPARE, message)
    }
}

/// Whether a run that ended with `exit` is started again under `policy`.
fn will_restart(exit: Option<i32>, policy: &str) -> bool {
    match (exit, policy) {
        (Some(_), "Always") => true,
        (Some(code), "OnFailure") => code != 0,
        _ => false,
    }
}

/// `state.terminated` of a run (`Error`/`Completed`, or `StartError` when it never ran).
fn terminated(code: i32, started_at: &str, container_id: &str, start_error: Option<&str>) -> Value {
    let mut ended = json!({
        "exitCode": code,
        "reason": if start_error.is_some() { "StartError" } else if code == 0 { "Completed" } else { "Error" },
        "startedAt": started_at,
        "finishedAt": crate::apiserver::now_rfc3339(),
        "containerID": container_id,
    });
    if let Some(message) = start_error {
        ended["message"] = json!(message);
    }
    ended
}

/// `format.Pod`: `<name>_<namespace>(<uid>)`, how the kubelet names a pod in messages.
fn pod_full_name(pod: &DraPod) -> String {
    format!(
        "{}_{}({})",
        pod.metadata.name.as_deref().unwrap_or_default(),
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.uid.as_deref().unwrap_or_default()
    )
}

/// The reference of a container's Events: the pod with `fieldPath: spec.containers{<name>}`.
fn container_ref(pod: &DraPod, container: &str) -> k8s_openapi::api::core::v1::ObjectReference {
    let mut reference = object_ref(pod);
    reference.field_path = Some(format!("spec.containers{{{container}}}"));
    reference
}

fn restart_policy(pod: &DraPod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.extra.get("restartPolicy"))
        .and_then(Value::as_str)
        .unwrap_or("Always")
}

fn image_of(pod: &DraPod, container: &str) -> String {
    pod.all_containers()
        .find(|c| c.name == container)
        .and_then(|c| c.extra.get("image"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn strings(value: Option<&Value>, field: &str) -> Result<Vec<String>, String> {
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("{field}: every entry must be a string"))
            })
            .collect(),
        Some(_) => Err(format!("{field} must be a list of strings")),
    }
}

/// `command` + `args`. Images are never pulled, so there is no image entrypoint to fall
/// back on: a container must name its command.
fn command_of(container: &ClassicContainer) -> Result<Vec<String>, String> {
    let mut command = strings(container.extra.get("command"), "command")?;
    command.extend(strings(container.extra.get("args"), "args")?);
    if command.is_empty() {
        return Err(format!(
            "container {}: the emulated kubelet runs no image entrypoints; set command",
            container.name
        ));
    }
    Ok(command)
}

/// Literal `env` values; `valueFrom` and `envFrom` are refused rather than guessed.
fn env_of(container: &ClassicContainer) -> Result<Vec<(String, String)>, String> {
    if container.extra.get("envFrom").is_some_and(|v| !v.is_null()) {
        return Err(format!(
            "container {}: envFrom is not supported by the emulated kubelet",
            container.name
        ));
    }
    let Some(env) = container.extra.get("env").and_then(Value::as_array) else {
        return Ok(Vec::new());
    };
    env.iter()
        .map(|e| {
            let name = e
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("container {}: env entry without a name", container.name))?;
            if e.get("valueFrom").is_some_and(|v| !v.is_null()) {
                return Err(format!(
                    "container {}: env {name}: valueFrom is not supported by the emulated kubelet",
                    container.name
                ));
            }
            Ok((
                name.to_string(),
                e.get("value")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
            ))
        })
        .collect()
}
