//! Container runtimes of the emulated nodes.
//!
//! The emulated kubelet starts a Pod's containers here with the CDI device ids the DRA
//! kubelet plugin returned. Images are never pulled: a container runs either under podman
//! on a local busybox root filesystem (podman resolves our CDI specs itself, an independent
//! check of them), or as a local host process for which this module applies the CDI env
//! edits itself. Both runners must show the same values for the variables fake-dra sets.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::OnceLock;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use super::lifeline::{self, find_in_path, is_executable};

mod cdi;
mod container;
mod logs;
mod rootfs;
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;

pub(crate) use cdi::*;
pub use container::*;
pub use logs::*;
pub(crate) use rootfs::*;

/// Where Debian's busybox-static puts the binary the podman rootfs is made of and the
/// process runner runs applets with.
pub(crate) const BUSYBOX: &str = "/bin/busybox";
/// The directories of an image whose programs its busybox provides: an absolute command
/// in one of them names the applet of its file name (`/bin/ash`, `/usr/bin/env`).
const APPLET_DIRS: [&str; 4] = ["/bin", "/sbin", "/usr/bin", "/usr/sbin"];
/// `printenv` as Alpine's busybox has it, for a rootfs whose busybox lacks the applet
/// (Debian's busybox-static 1.35 has none): the values of the named variables, one a line,
/// exit 1 when one is unset; the whole environment without arguments.
const PRINTENV_SCRIPT: &str = r#"#!/bin/sh
[ $# -eq 0 ] && exec /bin/busybox env
exec /bin/busybox awk 'BEGIN { rc = 0; for (i = 1; i < ARGC; i++) { if (ARGV[i] in ENVIRON) print ENVIRON[ARGV[i]]; else rc = 1 } exit rc }' "$@"
"#;
/// What to install when the podman runner is unusable.
const INSTALL_HINT: &str = "apt-get install podman runc busybox-static";
/// Set to `1` (as CI does) to make a missing podman an error instead of a fallback.
const REQUIRE_PODMAN_ENV: &str = "FAKE_DRA_REQUIRE_PODMAN";
/// The PATH podman gives a container whose image sets none (it also sets TERM=xterm).
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Podman's options that work in the nested VMs this runs on: crun fails in cgroup hybrid
/// mode, and the default ulimits need CAP_SYS_RESOURCE.
const PODMAN_GLOBAL_ARGS: [&str; 3] = ["--runtime", "runc", "--cgroup-manager=cgroupfs"];
/// Runs podman in a private mount namespace that sees the node's CDI directory as
/// /var/run/cdi and an empty /etc/cdi: podman 4.3 reads specs only from those two, and
/// every emulated node has its own directory. A missing node directory reads as empty.
const MOUNT_NS_SCRIPT: &str = r#"set -e
mkdir -p /var/run/cdi /etc/cdi
if [ -d "$1" ]; then mount --bind "$1" /var/run/cdi; else mount -t tmpfs -o size=1m tmpfs /var/run/cdi; fi
mount -t tmpfs -o size=1m tmpfs /etc/cdi
shift
exec "$@""#;
/// How long `wait`/`stop` wait for the output readers after the container exited; only a
/// safety net against a stray process that keeps a pipe open.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `stop` waits for podman to exit after each `podman rm -f`.
const PODMAN_STOP_ROUND: Duration = Duration::from_secs(3);
/// `podman rm -f` rounds before `stop` gives up and kills the podman client.
const PODMAN_STOP_ROUNDS: usize = 20;
/// Log lines kept for subscribers that fall behind.
const LOG_CHANNEL_CAPACITY: usize = 4096;

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("podman not usable: {why}; {INSTALL_HINT}")]
    PodmanUnusable { why: String },
    #[error("building the podman rootfs at {path}: {source}")]
    Rootfs {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("container {container}: empty command")]
    EmptyCommand { container: String },
    #[error("starting {what}: {source}")]
    Spawn {
        what: String,
        source: std::io::Error,
    },
    #[error("reading CDI spec directory {path}: {source}")]
    ReadCdi {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("CDI spec {path}: {reason}")]
    InvalidCdiSpec { path: PathBuf, reason: String },
    #[error("invalid CDI device id {id:?}: want vendor/class=name")]
    InvalidCdiId { id: String },
    #[error("CDI device {id} not found in {dir}{notes}")]
    CdiDeviceNotFound {
        id: String,
        dir: PathBuf,
        notes: String,
    },
    #[error("CDI device {id} is defined more than once: {files:?}")]
    CdiDeviceAmbiguous { id: String, files: Vec<PathBuf> },
    #[error(
        "process runtime applies only env edits and device nodes already at their path; device {device} has {edit}"
    )]
    UnsupportedEdit { device: String, edit: String },
    #[error("process runtime: device {device}: deviceNodes[{index}] {reason}")]
    DeviceNode {
        device: String,
        index: usize,
        reason: String,
    },
    #[error(
        "container {container}: program {program:?} not found: {why} (the process runner runs busybox applets with {BUSYBOX}: apt-get install busybox-static)"
    )]
    ProgramNotFound {
        container: String,
        program: String,
        why: String,
    },
}

/// How an emulated node runs containers.
#[derive(Debug, Clone)]
pub enum ContainerRuntime {
    /// `podman run --rootfs` on a busybox root filesystem.
    Podman { rootfs: PathBuf },
    /// A local process in its own process group, with the CDI env edits applied here.
    Process,
}

impl ContainerRuntime {
    /// Podman when `podman` and `runc` are on PATH and busybox (/bin/busybox, from
    /// busybox-static) exists: builds the rootfs under `work_dir`. Otherwise the process
    /// runner — but when `FAKE_DRA_REQUIRE_PODMAN=1` and podman is unusable, an error
    /// naming what is missing, so CI cannot silently test less.
    pub fn detect(work_dir: &Path) -> Result<Self, RuntimeError> {
        match Self::podman(work_dir) {
            Ok(runtime) => Ok(runtime),
            Err(RuntimeError::PodmanUnusable { why }) if !podman_required() => {
                tracing::warn!(
                    "!!!!!!!! podman is not usable ({why}): containers run as LOCAL PROCESSES with the CDI env edits applied by the emulator, so the CDI specs are NOT checked by a real runtime. {INSTALL_HINT} (and set {REQUIRE_PODMAN_ENV}=1 to require it) !!!!!!!!"
                );
                Ok(Self::Process)
            }
            Err(e) => Err(e),
        }
    }

    /// The podman runner, or an error naming what is missing.
    pub fn podman(work_dir: &Path) -> Result<Self, RuntimeError> {
        let missing = podman_missing();
        if !missing.is_empty() {
            return Err(RuntimeError::PodmanUnusable {
                why: format!("missing {}", missing.join(", ")),
            });
        }
        Ok(Self::Podman {
            rootfs: build_rootfs(work_dir)?,
        })
    }

    pub fn name(&self) -> &'static str {
        match self {
            Self::Podman { .. } => "podman",
            Self::Process => "process",
        }
    }

    /// Starts the container; its stdout and stderr lines go to `logs`.
    pub async fn start(
        &self,
        spec: ContainerSpec,
        logs: LogSink,
    ) -> Result<RunningContainer, RuntimeError> {
        if spec.command.is_empty() {
            return Err(RuntimeError::EmptyCommand {
                container: spec.label(),
            });
        }
        tracing::info!(runtime = self.name(), container = %spec.label(), command = ?spec.command, devices = ?spec.cdi_devices, "starting container");
        match self {
            Self::Podman { rootfs } => start_podman(rootfs, spec, logs),
            Self::Process => start_process(spec, logs).await,
        }
    }
}

fn podman_required() -> bool {
    std::env::var(REQUIRE_PODMAN_ENV).is_ok_and(|v| v == "1")
}

/// What the podman runner lacks on this machine, empty when it is usable.
fn podman_missing() -> Vec<String> {
    let mut missing = Vec::new();
    for program in ["podman", "runc", "unshare", "mount"] {
        if find_in_path(program).is_none() {
            missing.push(format!("{program} (not on PATH)"));
        }
    }
    if !is_executable(Path::new(BUSYBOX)) {
        missing.push(format!("{BUSYBOX} (busybox-static)"));
    }
    if effective_uid().is_some_and(|uid| uid != 0) {
        missing.push(
            "root (the private mount namespace for the node's CDI directory needs it)".into(),
        );
    }
    missing
}

/// One container of a Pod, as the kubelet hands it to the runtime.
#[derive(Debug, Clone)]
pub struct ContainerSpec {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    /// Unique per container instance; becomes the podman container name.
    pub id: String,
    /// Command followed by args, Kubernetes-style (`command` + `args`); must be non-empty.
    /// A bare program name ("sh") is looked up in PATH.
    pub command: Vec<String>,
    /// The container's own env (from the pod spec).
    pub env: Vec<(String, String)>,
    /// Fully qualified CDI ids (`vendor/class=name`).
    pub cdi_devices: Vec<String>,
    /// The node's CDI spec directory (what /var/run/cdi is on that node).
    pub cdi_root: PathBuf,
    /// Where this run's output goes in the CRI log format, as containerd writes
    /// `/var/log/pods/<ns>_<pod>_<uid>/<container>/<restart>.log` (`kubectl logs` reads it
    /// through the kubelet); `None`: the in-memory sink only.
    pub log_path: Option<PathBuf>,
}

impl ContainerSpec {
    fn label(&self) -> String {
        format!("{}/{}/{}", self.namespace, self.pod, self.container)
    }
}

/// The podman container name for a container id: podman names must match
/// `[a-zA-Z0-9][a-zA-Z0-9_.-]*`, and the prefix makes ours easy to find and clean up.
pub fn podman_container_name(id: &str) -> String {
    let sanitized: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("fake-dra-{sanitized}")
}

/// A valid hostname from a pod name, so podman's HOSTNAME matches the process runner's.
fn hostname_for(pod: &str) -> String {
    let name: String = pod
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '.') {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(63)
        .collect();
    let name = name.trim_matches(['-', '.']);
    if name.is_empty() {
        "pod".to_string()
    } else {
        name.to_string()
    }
}

fn start_podman(
    rootfs: &Path,
    spec: ContainerSpec,
    logs: LogSink,
) -> Result<RunningContainer, RuntimeError> {
    let name = podman_container_name(&spec.id);
    let cdi_root = spec
        .cdi_root
        .canonicalize()
        .unwrap_or_else(|_| spec.cdi_root.clone());
    let mut argv: Vec<OsString> = [
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        MOUNT_NS_SCRIPT,
        "sh",
    ]
    .map(OsString::from)
    .into();
    argv.push(cdi_root.into_os_string());
    argv.push("podman".into());
    argv.extend(PODMAN_GLOBAL_ARGS.map(OsString::from));
    argv.extend(
        [
            "run",
            "--rm",
            "--name",
            &name,
            "--hostname",
            &hostname_for(&spec.pod),
            "--network=none",
            "--ulimit",
            "nofile=20000:20000",
            "--ulimit",
            "nproc=32768:32768",
        ]
        .map(OsString::from),
    );
    for device in &spec.cdi_devices {
        argv.extend(["--device".into(), OsString::from(device)]);
    }
    for (key, value) in &spec.env {
        argv.extend(["-e".into(), OsString::from(format!("{key}={value}"))]);
    }
    argv.extend(["--rootfs".into(), rootfs.as_os_str().to_owned()]);
    argv.extend(spec.command.iter().map(OsString::from));
    // Killing `podman run` leaves the container to conmon: a cut lifeline removes it too.
    let mut cleanup = lifeline::Cleanup::default();
    cleanup
        .run
        .push(find_in_path("podman").map_or_else(|| "podman".into(), PathBuf::into_os_string));
    cleanup.run.extend(PODMAN_GLOBAL_ARGS.map(OsString::from));
    cleanup
        .run
        .extend(["rm", "-f", "-t", "0", "--ignore", &name].map(OsString::from));
    let what = format!("podman for {}", spec.label());
    let command =
        lifeline::command("unshare", &argv, &cleanup).map_err(|source| RuntimeError::Spawn {
            what: what.clone(),
            source,
        })?;
    let child = spawn(command, &what)?;
    Ok(RunningContainer::new(
        child,
        Runner::Podman { name },
        &spec,
        logs,
        None,
    ))
}

async fn start_process(
    spec: ContainerSpec,
    logs: LogSink,
) -> Result<RunningContainer, RuntimeError> {
    let cdi_env = if spec.cdi_devices.is_empty() {
        Vec::new()
    } else {
        let (specs, skipped) = load_cdi_specs(&spec.cdi_root)?;
        resolve_cdi_env(&specs, &spec.cdi_devices, &spec.cdi_root, &skipped)?
    };
    let env = process_env(&spec.pod, &spec.env, &cdi_env);
    let scratch = tempfile::Builder::new()
        .prefix("fake-dra-container-")
        .tempdir()
        .map_err(|source| RuntimeError::Spawn {
            what: format!("scratch directory for {}", spec.label()),
            source,
        })?;
    let path_env = env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map_or(DEFAULT_PATH, |(_, v)| v.as_str());
    let program = resolve_program(
        &spec.command[0],
        path_env,
        host_applets(),
        Path::new(BUSYBOX),
    )
    .map_err(|why| RuntimeError::ProgramNotFound {
        container: spec.label(),
        program: spec.command[0].clone(),
        why,
    })?;
    let args: Vec<OsString> = program
        .prefix
        .iter()
        .chain(&spec.command[1..])
        .map(OsString::from)
        .collect();
    let what = format!("{:?} for {}", spec.command[0], spec.label());
    let cleanup = lifeline::Cleanup {
        remove: vec![scratch.path().to_path_buf()],
        ..lifeline::Cleanup::default()
    };
    let mut command = lifeline::command(&program.path, &args, &cleanup).map_err(|source| {
        RuntimeError::Spawn {
            what: what.clone(),
            source,
        }
    })?;
    command.env_clear().envs(env).current_dir(scratch.path());
    let child = spawn(command, &what)?;
    let pgid = child.id();
    Ok(RunningContainer::new(
        child,
        Runner::Process { pgid },
        &spec,
        logs,
        Some(scratch),
    ))
}

/// Spawns with the settings both runners share: captured output, its own process group
/// (so a Ctrl-C of the test run doesn't reach it first and the runner can kill everything
/// the container started, supervisor included), killed if the handle is dropped. stdin is
/// [`lifeline::command`]'s.
fn spawn(mut command: Command, what: &str) -> Result<Child, RuntimeError> {
    command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    command.spawn().map_err(|source| RuntimeError::Spawn {
        what: what.to_string(),
        source,
    })
}
