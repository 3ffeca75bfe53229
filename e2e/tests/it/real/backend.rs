//! The two clusters the scenarios run on: the real one ([`RealCluster`]) and the
//! emulator ([`Emulated`], a [`Sim`] with one node of the real cluster's name). The
//! scenarios read and write through a kube-rs client either way; only what has no API
//! (applying as kubectl does, container logs, killing the plugin, restarting the kubelet,
//! the node's CDI directory) goes through this trait.

use std::time::Duration;

use fake_dra_emulator::apiserver::gates::FeatureGates;
use fake_dra_emulator::sim::{Sim, SimConfig};

use super::cluster::{DRIVER_NAMESPACE, PLUGIN_LABEL, RealCluster, output_within};
use super::protocol::Release;

/// The file names of our CDI specs start so (the common spec included).
pub const CDI_PREFIX: &str = "k8s.fake.resource.3-shake.com-fake_";

pub trait Backend {
    /// `real` or `emulator`.
    fn name(&self) -> &'static str;
    fn client(&self) -> kube::Client;
    /// The one node.
    fn node(&self) -> String;
    /// The Kubernetes release served, with its feature gates.
    fn release(&self) -> Release;
    /// What a failed scenario leaves behind, for the log (pods, claims, events, ...).
    fn diagnose(&self);
    /// The real cluster, for what only it can do (RBAC, admission, impersonation).
    fn real(&self) -> Option<&RealCluster>;
    /// Applies manifests as `kubectl apply -f` does; `Err` is what the user is told.
    async fn apply(&self, yaml: &str) -> Result<(), String>;
    /// `kubectl ARGS` as the cluster's admin: stdout, or what went wrong.
    fn kubectl(&self, args: &[&str]) -> Result<String, String>;
    /// The container's output so far (empty before it started).
    async fn logs(&self, namespace: &str, pod: &str, container: &str) -> Vec<String>;
    /// `kill -9` of the node's plugin; returns once a new plugin process runs (the
    /// kubelet restarts the DaemonSet's container; on the emulator the test starts it,
    /// as nothing else would) and, with `ready`, is Ready: its devices published and the
    /// kubelet registered it (without, for a plugin that cannot register).
    async fn kill_plugin(&mut self, ready: bool);
    /// Restarts the node's kubelet (containers keep running).
    async fn restart_kubelet(&mut self);
    /// Our CDI spec files in the node's CDI directory.
    fn cdi_specs(&self) -> Vec<String>;
    /// Sets environment variables of the plugin's container and waits until the plugin
    /// runs with them (`kubectl set env daemonset/...`; the emulator restarts it so).
    async fn set_plugin_env(&mut self, vars: &[(&str, &str)]);
}

fn cdi_files(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(CDI_PREFIX))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

impl Backend for RealCluster {
    fn name(&self) -> &'static str {
        "real"
    }

    fn client(&self) -> kube::Client {
        RealCluster::client(self)
    }

    fn node(&self) -> String {
        RealCluster::node(self).to_string()
    }

    fn release(&self) -> Release {
        RealCluster::release(self)
    }

    fn diagnose(&self) {
        RealCluster::diagnose(self);
    }

    fn real(&self) -> Option<&RealCluster> {
        Some(self)
    }

    fn kubectl(&self, args: &[&str]) -> Result<String, String> {
        RealCluster::kubectl(self, args)
    }

    /// `kubectl apply -f -`; on 1.32/1.33 the `resource.k8s.io/v1` documents are rewritten
    /// to `v1beta1` first, as a user does with hack/v1beta1.sh.
    async fn apply(&self, yaml: &str) -> Result<(), String> {
        let yaml = if self.release().serves_v1() {
            yaml.to_string()
        } else {
            self.to_v1beta1(yaml)?
        };
        self.kubectl_stdin(&["apply", "-f", "-"], &yaml).map(|_| ())
    }

    async fn logs(&self, namespace: &str, pod: &str, container: &str) -> Vec<String> {
        self.kubectl(&["-n", namespace, "logs", pod, "-c", container])
            .map(|out| out.lines().map(str::to_string).collect())
            .unwrap_or_default()
    }

    async fn kill_plugin(&mut self, ready: bool) {
        let (pod, container_id, restarts) = plugin_container(self);
        let id = container_id
            .strip_prefix("containerd://")
            .unwrap_or(&container_id)
            .to_string();
        let inspect = self
            .crictl(&["inspect", &id])
            .unwrap_or_else(|e| panic!("crictl inspect {id}: {e}"));
        let info: serde_json::Value = serde_json::from_str(&inspect)
            .unwrap_or_else(|e| panic!("crictl inspect {id}: {e}: {inspect}"));
        let pid = info["info"]["pid"]
            .as_u64()
            .unwrap_or_else(|| panic!("crictl inspect {id}: no info.pid"));
        // Never anything else: the process must be the plugin binary.
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        assert!(
            String::from_utf8_lossy(&cmdline).contains("fake-dra-kubelet-plugin"),
            "pid {pid} of container {id} is not the plugin: {:?}",
            String::from_utf8_lossy(&cmdline)
        );
        let status = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .unwrap_or_else(|e| panic!("kill -KILL {pid}: {e}"));
        assert!(status.success(), "kill -KILL {pid}");
        eprintln!("    (killed the plugin of pod {pod}, pid {pid}, with SIGKILL)");
        super::scenarios::wait_until("the kubelet restarted the plugin's container", || async {
            let (now, id, count) = plugin_container(self);
            let back = now == pod && count > restarts && !id.is_empty();
            (back && (!ready || plugin_pod_ready(self, &now))).then_some(())
        })
        .await;
    }

    async fn restart_kubelet(&mut self) {
        RealCluster::restart_kubelet(self)
            .unwrap_or_else(|e| panic!("hack/local-cluster.sh restart-kubelet: {e}"));
    }

    fn cdi_specs(&self) -> Vec<String> {
        cdi_files(std::path::Path::new("/var/run/cdi"))
    }

    async fn set_plugin_env(&mut self, vars: &[(&str, &str)]) {
        let (before, _, _) = plugin_container(self);
        let mut args = vec![
            "-n".to_string(),
            DRIVER_NAMESPACE.to_string(),
            "set".to_string(),
            "env".to_string(),
            "daemonset/fake-dra-kubelet-plugin".to_string(),
        ];
        args.extend(vars.iter().map(|(k, v)| format!("{k}={v}")));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.kubectl(&args)
            .unwrap_or_else(|e| panic!("kubectl set env: {e}"));
        self.kubectl(&[
            "-n",
            DRIVER_NAMESPACE,
            "rollout",
            "status",
            "daemonset/fake-dra-kubelet-plugin",
            "--timeout=180s",
        ])
        .unwrap_or_else(|e| panic!("kubectl rollout status: {e}"));
        super::scenarios::wait_until("the new plugin pod ready", || async {
            let (now, _, _) = plugin_container(self);
            (now != before && plugin_pod_ready(self, &now)).then_some(())
        })
        .await;
    }
}

/// The plugin pod's name, its container's id and restart count.
fn plugin_container(cluster: &RealCluster) -> (String, String, u64) {
    let out = cluster
        .kubectl(&[
            "-n",
            DRIVER_NAMESPACE,
            "get",
            "pods",
            "-l",
            PLUGIN_LABEL,
            "-o",
            "json",
        ])
        .unwrap_or_else(|e| panic!("kubectl get pods: {e}"));
    let pods: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("pods: {e}: {out}"));
    let items = pods["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(items.len(), 1, "one plugin pod on the one node: {out}");
    let pod = &items[0];
    let status = &pod["status"]["containerStatuses"][0];
    (
        pod["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        status["containerID"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        status["restartCount"].as_u64().unwrap_or_default(),
    )
}

/// The emulator with the real cluster's node name, at a release.
#[derive(Debug)]
pub struct Emulated {
    sim: Sim,
    node: String,
    release: Release,
}

impl Emulated {
    /// `gates`: the `--feature-gates` of the emulated cluster (those of a gated real run).
    pub async fn start(node: &str, release: &Release, gates: FeatureGates) -> Self {
        let sim = Sim::start(SimConfig {
            nodes: vec![node.to_string()],
            overlay: "structured".into(),
            server_version: Some(release.version),
            feature_gates: gates,
            ..SimConfig::default()
        })
        .await
        .unwrap_or_else(|e| panic!("starting the emulator: {e}"));
        eprintln!(
            "emulator: runtime {}",
            sim.cluster().config().runtime.name()
        );
        Self {
            sim,
            node: node.to_string(),
            release: release.clone(),
        }
    }

    pub async fn shutdown(self) {
        self.sim.shutdown().await;
    }

    /// The last lines of each driver log of the sim (`<work dir>/logs`), for a failed
    /// scenario's report: the work dir goes with the sim.
    pub fn log_tails(&self, lines: usize) -> String {
        let dir = self.sim.work_dir().join("logs");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return format!("(no logs in {})", dir.display());
        };
        let mut paths: Vec<_> = entries.flatten().map(|e| e.path()).collect();
        paths.sort();
        let mut out = String::new();
        for path in paths {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let all: Vec<&str> = text.lines().collect();
            out.push_str(&format!(
                "--- last {} of {} lines of {}\n",
                lines.min(all.len()),
                all.len(),
                path.display()
            ));
            for line in &all[all.len().saturating_sub(lines)..] {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }
}

impl Backend for Emulated {
    fn name(&self) -> &'static str {
        "emulator"
    }

    fn client(&self) -> kube::Client {
        self.sim
            .client()
            .unwrap_or_else(|e| panic!("emulator client: {e}"))
    }

    fn node(&self) -> String {
        self.node.clone()
    }

    fn release(&self) -> Release {
        self.release.clone()
    }

    fn diagnose(&self) {
        eprintln!(
            "--- the emulator's driver logs are in {}",
            self.sim.work_dir().join("logs").display()
        );
    }

    fn real(&self) -> Option<&RealCluster> {
        None
    }

    /// The kubectl on PATH against the sim's kubeconfig, with a cache of its own.
    fn kubectl(&self, args: &[&str]) -> Result<String, String> {
        let mut kubectl = std::process::Command::new("kubectl");
        kubectl
            .arg("--kubeconfig")
            .arg(self.sim.work_dir().join("kubeconfig"))
            .arg("--cache-dir")
            .arg(self.sim.work_dir().join("kubectl-cache"))
            .args(args);
        let out = output_within(kubectl, None, "kubectl (is it on PATH?)")?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "kubectl {args:?}: {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    async fn apply(&self, yaml: &str) -> Result<(), String> {
        let objects =
            fake_dra_emulator::manifests::parse(yaml, "scenario").map_err(|e| e.to_string())?;
        self.sim.apply(&objects).await.map_err(|e| e.to_string())
    }

    async fn logs(&self, namespace: &str, pod: &str, container: &str) -> Vec<String> {
        self.sim.logs().lines(namespace, pod, container)
    }

    async fn kill_plugin(&mut self, _ready: bool) {
        // The emulator's restart returns once the plugin registered (docs/emulator.md).
        self.sim.kill_plugin(&self.node).await;
        // A moment without a plugin, as on a node between the kill and the restart.
        tokio::time::sleep(Duration::from_millis(500)).await;
        self.sim
            .start_plugin(&self.node)
            .await
            .unwrap_or_else(|e| panic!("restarting the plugin: {e}"));
    }

    async fn restart_kubelet(&mut self) {
        self.sim
            .restart_kubelet(&self.node)
            .await
            .unwrap_or_else(|e| panic!("restarting the kubelet: {e}"));
    }

    fn cdi_specs(&self) -> Vec<String> {
        cdi_files(&self.sim.node_dirs(&self.node).cdi_root)
    }

    async fn set_plugin_env(&mut self, vars: &[(&str, &str)]) {
        self.sim
            .set_plugin_env(&self.node, vars)
            .await
            .unwrap_or_else(|e| panic!("restarting the plugin with {vars:?}: {e}"));
    }
}

/// Whether the plugin pod's Ready condition is True.
fn plugin_pod_ready(cluster: &RealCluster, pod: &str) -> bool {
    cluster
        .kubectl(&[
            "-n",
            DRIVER_NAMESPACE,
            "get",
            "pod",
            pod,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ])
        .is_ok_and(|ready| ready == "True")
}
