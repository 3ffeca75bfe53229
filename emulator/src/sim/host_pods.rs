//! The driver's pods, as a cluster shows them: the sim applies the driver's Deployment and
//! DaemonSet like every other object, the emulated controllers make their Pods (the
//! scheduler binds the Deployment's), and the kubelets leave those Pods to the sim
//! ([`HostRun`]), which runs each as the host process of the binary its command names and
//! reports its status from that process — Running and ready while it runs, terminated with
//! its exit code after a kill, a restart counted when it starts again — and writes its
//! output to the pod's CRI log file, so `kubectl get pods -n fake-dra`, `describe` and
//! `logs` work as on a node.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use super::*;
use crate::cluster::HostRun;

/// How long the sim waits for the controllers to make a driver pod (a safety net).
const POD_TIMEOUT: Duration = Duration::from_secs(60);

/// The pods of `workload` the kubelets leave to the sim: its namespace and selector.
pub(super) fn host_run(workload: &Manifest) -> HostRun {
    let labels: BTreeMap<String, String> = workload
        .object
        .pointer("/spec/selector/matchLabels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
        .collect();
    HostRun {
        namespace: workload.namespace().unwrap_or("default").to_string(),
        labels,
    }
}

/// One driver pod and its runs.
#[derive(Debug, Clone)]
pub(super) struct HostPod {
    pub(super) namespace: String,
    pub(super) name: String,
    pub(super) uid: String,
    pub(super) node: String,
    container: String,
    image: String,
    log_dir: PathBuf,
    /// The current run (0 first), `None` before the first start.
    run: Option<u32>,
    started_at: String,
    /// `state.terminated` of the current run once it exited.
    ended: Option<Value>,
    /// `lastState.terminated`.
    last: Option<Value>,
}

impl HostPod {
    /// Waits for the pod `host` selects (on `node`, or on any node once bound).
    pub(super) async fn find(
        client: &kube::Client,
        host: &HostRun,
        node: Option<&str>,
        container: &Value,
        node_dirs: &dyn Fn(&str) -> NodeDirs,
    ) -> Result<Self, SimError> {
        let selector: Vec<String> = host
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let api: Api<Pod> = Api::namespaced(client.clone(), &host.namespace);
        let deadline = tokio::time::Instant::now() + POD_TIMEOUT;
        loop {
            let pods = api
                .list(&ListParams::default().labels(&selector.join(",")))
                .await
                .map_err(|e| SimError::Deploy {
                    overlay: String::new(),
                    message: format!("listing the driver's pods: {e}"),
                })?;
            let found = pods.items.into_iter().find(|p| {
                let bound = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
                p.metadata.deletion_timestamp.is_none()
                    && match node {
                        Some(node) => bound == Some(node),
                        None => bound.is_some(),
                    }
            });
            if let Some(pod) = found {
                let node = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_default();
                let (namespace, name, uid) = (
                    pod.metadata.namespace.clone().unwrap_or_default(),
                    pod.metadata.name.clone().unwrap_or_default(),
                    pod.metadata.uid.clone().unwrap_or_default(),
                );
                let container_name = container
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                return Ok(Self {
                    log_dir: node_dirs(&node)
                        .pod_log_dir(&namespace, &name, &uid)
                        .join(&container_name),
                    namespace,
                    name,
                    uid,
                    node,
                    container: container_name,
                    image: container
                        .get("image")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    run: None,
                    started_at: String::new(),
                    ended: None,
                    last: None,
                });
            }
            if tokio::time::Instant::now() > deadline {
                return Err(SimError::Deploy {
                    overlay: String::new(),
                    message: format!(
                        "no pod of the driver's workload ({}) in namespace {}{} within {POD_TIMEOUT:?}",
                        selector.join(","),
                        host.namespace,
                        node.map(|n| format!(" on node {n}")).unwrap_or_default()
                    ),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Starts the next run: its CRI log file.
    pub(super) fn next_run(&mut self) -> PathBuf {
        let run = match self.run {
            None => 0,
            Some(run) => {
                self.last = self.ended.take();
                run + 1
            }
        };
        self.run = Some(run);
        self.started_at = crate::apiserver::now_rfc3339();
        self.ended = None;
        self.log_dir.join(format!("{run}.log"))
    }

    fn container_id(&self) -> String {
        format!(
            "host://{}-{}-{}",
            self.uid,
            self.container,
            self.run.unwrap_or(0)
        )
    }

    /// The run exited with `code` (128 + signal when killed).
    pub(super) fn exited(&mut self, code: i32) {
        self.ended = Some(json!({
            "exitCode": code,
            "reason": if code == 0 { "Completed" } else { "Error" },
            "startedAt": self.started_at,
            "finishedAt": crate::apiserver::now_rfc3339(),
            "containerID": self.container_id(),
        }));
    }

    /// Writes the pod's status as the kubelet would for the process (merge patch on
    /// pods/status); a failure is logged: the status is for people, the process runs.
    pub(super) async fn report(&self, client: &kube::Client) {
        let running = self.ended.is_none() && self.run.is_some();
        let state = match &self.ended {
            Some(ended) => json!({"terminated": ended}),
            None if running => json!({"running": {"startedAt": self.started_at}}),
            None => json!({"waiting": {"reason": "ContainerCreating"}}),
        };
        let condition = |type_: &str, ok: bool| json!({"type": type_, "status": if ok { "True" } else { "False" }});
        let status = json!({"status": {
            "phase": "Running",
            "hostIP": "127.0.0.1",
            "startTime": self.started_at,
            "conditions": [
                condition("PodScheduled", true),
                condition("Initialized", true),
                condition("ContainersReady", running),
                condition("Ready", running),
            ],
            "containerStatuses": [{
                "name": self.container,
                "ready": running,
                "started": running,
                "restartCount": self.run.unwrap_or(0),
                "image": self.image,
                "imageID": "",
                "containerID": self.container_id(),
                "state": state,
                "lastState": self.last.clone().map_or_else(|| json!({}), |t| json!({"terminated": t})),
            }],
        }});
        if let Err(error) = Api::<Pod>::namespaced(client.clone(), &self.namespace)
            .patch_status(&self.name, &PatchParams::default(), &Patch::Merge(&status))
            .await
        {
            tracing::warn!(pod = %self.name, %error, "writing the driver pod's status failed");
        }
    }
}
