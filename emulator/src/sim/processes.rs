//! The driver's processes: the controller and one kubelet plugin per node, started from
//! the rendered Deployment/DaemonSet (command, env, downward API, hostPath dirs mapped
//! onto each emulated node's directories), so the deployed configuration is the tested one.

use super::*;
use crate::cluster::runtime::{MAX_LOG_LINE_BYTES, Stream, cri_record, read_line_bounded};

/// How to start one driver process: what the Deployment/DaemonSet container says, mapped
/// onto this machine.
#[derive(Debug, Clone)]
pub(super) struct ProcessSpec {
    pub(super) program: PathBuf,
    pub(super) env: Vec<(String, String)>,
    pub(super) log: PathBuf,
    /// The pod's CRI log file of this run (`kubectl logs`), besides `log`.
    pub(super) cri_log: Option<PathBuf>,
}

impl ProcessSpec {
    pub(super) fn spawn(&self) -> Result<DriverProcess, SimError> {
        let io = |what: &str| {
            let what = format!("{what} {}", self.log.display());
            move |source| SimError::Io { what, source }
        };
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(io("opening"))?;
        let stderr = log.try_clone().map_err(io("opening"))?;
        let starting = |source| SimError::Io {
            what: format!("starting {}", self.program.display()),
            source,
        };
        let mut command = lifeline::command(&self.program, &[], &lifeline::Cleanup::default())
            .map_err(starting)?;
        command
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        if let Some(filter) = std::env::var_os("RUST_LOG") {
            command.env("RUST_LOG", filter);
        }
        // A group of its own, as a pod's processes have: killing the group kills the
        // process and its supervisor, and a Ctrl-C at the terminal reaches only the sim,
        // which shuts the drivers down in order.
        command.process_group(0);
        let Some(cri_log) = &self.cri_log else {
            command.stdout(log).stderr(stderr);
            return Ok(DriverProcess {
                child: command.spawn().map_err(starting)?,
            });
        };
        // Both files: the sim's driver log and the pod's, as the runtime writes it.
        if let Some(dir) = cri_log.parent() {
            std::fs::create_dir_all(dir).map_err(io("creating the log dir of"))?;
        }
        let cri = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(cri_log)
            .map_err(io("opening"))?;
        let files = std::sync::Arc::new(std::sync::Mutex::new((log, cri)));
        command
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = command.spawn().map_err(starting)?;
        if let Some(out) = child.stdout.take() {
            tokio::spawn(copy_lines(out, Stream::Stdout, files.clone()));
        }
        if let Some(err) = child.stderr.take() {
            tokio::spawn(copy_lines(err, Stream::Stderr, files));
        }
        Ok(DriverProcess { child })
    }
}

/// Copies a driver's output line by line into its plain log and its CRI log, a line longer
/// than 16 KiB in parts, as a container's (so output without a newline stays bounded).
async fn copy_lines(
    stream: impl tokio::io::AsyncRead + Unpin,
    which: Stream,
    files: std::sync::Arc<std::sync::Mutex<(std::fs::File, std::fs::File)>>,
) {
    use std::io::Write;
    let mut reader = tokio::io::BufReader::new(stream);
    let mut buf = Vec::new();
    while let Ok(n) = read_line_bounded(&mut reader, &mut buf, MAX_LOG_LINE_BYTES).await {
        if n == 0 {
            return;
        }
        let line = String::from_utf8_lossy(&buf);
        let mut files = files
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (plain, cri) = &mut *files;
        let _ = plain.write_all(&buf);
        let full = line.ends_with('\n');
        let _ = cri.write_all(
            cri_record(which, full, line.strip_suffix('\n').unwrap_or(&line)).as_bytes(),
        );
        drop(files);
        buf.clear();
    }
}

/// A running driver process (under its supervisor when the lifeline is installed), in a
/// process group of its own. Dropping it kills the group.
#[derive(Debug)]
pub(super) struct DriverProcess {
    pub(super) child: Child,
}

impl DriverProcess {
    /// `kill -9` of the process (and its supervisor), waiting until it is gone; its exit
    /// code (128 + 9).
    pub(super) async fn kill(mut self) -> i32 {
        if let Some(pgid) = self.child.id()
            && let Err(e) = lifeline::signal_group("KILL", pgid)
        {
            tracing::warn!("killing a driver process: {e}");
            let _ = self.child.start_kill();
        }
        exit_code(self.child.wait().await)
    }

    /// SIGTERM, then SIGKILL if it has not exited within [`TERMINATION_GRACE`]; its exit code.
    pub(super) async fn terminate(mut self) -> i32 {
        if let Some(pid) = self.child.id()
            && let Err(e) = lifeline::send_signal("TERM", &[pid])
        {
            tracing::warn!("stopping a driver process: {e}");
        }
        match tokio::time::timeout(TERMINATION_GRACE, self.child.wait()).await {
            Ok(status) => exit_code(status),
            Err(_) => self.kill().await,
        }
    }
}

/// As a container's: the code, or 128 + the signal.
fn exit_code(status: std::io::Result<std::process::ExitStatus>) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Ok(status) => status
            .code()
            .or_else(|| status.signal().map(|s| 128 + s))
            .unwrap_or(-1),
        Err(_) => -1,
    }
}

impl Drop for DriverProcess {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None))
            && let Some(pgid) = self.child.id()
            && let Err(e) = lifeline::signal_group("KILL", pgid)
        {
            tracing::warn!("killing a driver process: {e}");
        }
    }
}

/// The driver's Deployment or DaemonSet, as the sim runs it: its one container, as a
/// process of the binary its command names.
pub(super) struct DriverWorkload<'a> {
    /// The workload as rendered.
    pub(super) manifest: &'a Manifest,
    /// Its namespace: what the downward API's `metadata.namespace` gives its pods.
    pub(super) namespace: String,
    /// The binary's file name (the command's last path segment), looked up in the bin dir.
    pub(super) program: String,
    pub(super) container: &'a Value,
}

/// The one Deployment or DaemonSet of that kind among the driver's objects.
pub(super) fn driver_workload<'a>(
    workloads: &'a [Manifest],
    kind: &str,
    overlay: &str,
) -> Result<DriverWorkload<'a>, SimError> {
    let found: Vec<&Manifest> = workloads.iter().filter(|m| m.kind() == kind).collect();
    let [workload] = found.as_slice() else {
        return Err(SimError::Deploy {
            overlay: overlay.into(),
            message: format!("expected exactly one {kind}, found {}", found.len()),
        });
    };
    let refuse = |message: String| SimError::Deploy {
        overlay: overlay.into(),
        message: format!("{kind} {}: {message}", workload.name()),
    };
    let container = workload
        .object
        .pointer("/spec/template/spec/containers/0")
        .ok_or_else(|| refuse("no container".into()))?;
    let program = container
        .pointer("/command/0")
        .and_then(Value::as_str)
        .and_then(|command| command.rsplit('/').next())
        .filter(|name| !name.is_empty())
        .ok_or_else(|| {
            refuse(
                "the sim runs a container's command[0] as a local binary, and it has none".into(),
            )
        })?;
    Ok(DriverWorkload {
        manifest: workload,
        namespace: workload
            .object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("default")
            .to_string(),
        program: program.to_string(),
        container,
    })
}

/// The pod a driver process stands for, for the downward API.
pub(super) struct PodIdentity {
    pub(super) name: String,
    pub(super) namespace: String,
    pub(super) node: String,
}

/// The container's env on this machine: literal values as they are, downward-API fields
/// of the pod it stands for, paths under hostPath mounts moved to the emulated node's
/// directories, and every `*HTTP_ADDRESS` on a free loopback port (several driver
/// processes share this machine's network, unlike pods).
pub(super) fn container_env(
    container: &Value,
    pod: &PodIdentity,
    host_dir: &dyn Fn(&str) -> Option<PathBuf>,
) -> Result<Vec<(String, String)>, SimError> {
    let deploy_err = |message: String| SimError::Deploy {
        overlay: String::new(),
        message,
    };
    // mountPath → hostPath, from the pod's volumes (only hostPath volumes matter here).
    let mounts: Vec<(String, String)> = container
        .get("volumeMounts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|m| {
            Some((
                m.get("mountPath")?.as_str()?.to_string(),
                m.get("name")?.as_str()?.to_string(),
            ))
        })
        .collect();
    let mut env = Vec::new();
    for entry in container
        .get("env")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = entry
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let value = if let Some(field) = entry
            .pointer("/valueFrom/fieldRef/fieldPath")
            .and_then(Value::as_str)
        {
            match field {
                "metadata.namespace" => pod.namespace.clone(),
                "metadata.name" => pod.name.clone(),
                "spec.nodeName" => pod.node.clone(),
                other => {
                    return Err(deploy_err(format!(
                        "env {name}: fieldRef {other} is not provided by the sim"
                    )));
                }
            }
        } else if entry.get("valueFrom").is_some() {
            return Err(deploy_err(format!(
                "env {name}: only literal values and fieldRef are provided by the sim"
            )));
        } else {
            entry
                .get("value")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let value = if name.ends_with("HTTP_ADDRESS") {
            "127.0.0.1:0".to_string()
        } else if let Some((mount_path, _)) = mounts
            .iter()
            .find(|(path, _)| value == *path || value.starts_with(&format!("{path}/")))
        {
            let host = host_dir(mount_path).ok_or_else(|| {
                deploy_err(format!(
                    "env {name}={value}: the sim has no node directory for the mount {mount_path}"
                ))
            })?;
            let rest = value
                .strip_prefix(mount_path.as_str())
                .unwrap_or_default()
                .trim_start_matches('/');
            if rest.is_empty() {
                host.display().to_string()
            } else {
                host.join(rest).display().to_string()
            }
        } else {
            value
        };
        env.push((name, value));
    }
    Ok(env)
}

/// The emulated node's directory for a kubelet host path the DaemonSet mounts.
pub(super) fn node_dir_for(dirs: &NodeDirs, path: &str) -> Option<PathBuf> {
    match path {
        "/var/lib/kubelet/plugins_registry" => Some(dirs.registry_dir.clone()),
        "/var/run/cdi" | "/run/cdi" | "/etc/cdi" => Some(dirs.cdi_root.clone()),
        p if p.starts_with("/var/lib/kubelet/plugins/") => Some(dirs.plugin_dir.clone()),
        _ => None,
    }
}
