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
    #[error("process runtime applies only env edits; device {device} has {edit}")]
    UnsupportedEdit { device: String, edit: String },
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

/// The effective uid from /proc (no libc: `unsafe` is forbidden here).
fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// A busybox root filesystem laid out like a merged-/usr image (Wolfi, Debian): every applet
/// `busybox --list` gives is a link in `usr/bin`, and `bin`, `sbin` and `usr/sbin` lead
/// there, so a command finds its program under whichever of those paths a manifest names
/// (`/bin/ash`, `/usr/bin/env`, `/sbin/ip`). Built in a staging directory and renamed into
/// place, so concurrent callers with the same `work_dir` never see half of it.
fn build_rootfs(work_dir: &Path) -> Result<PathBuf, RuntimeError> {
    let target = work_dir.join("podman-rootfs");
    let io_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| RuntimeError::Rootfs { path, source }
    };
    let complete = |root: &Path| {
        root.join("usr/bin/busybox").is_file()
            && root.join("bin").is_symlink()
            && root.join("usr/bin/printenv").exists()
    };
    if !complete(&target) {
        std::fs::create_dir_all(work_dir).map_err(io_err(work_dir))?;
        if target.exists() {
            // An older layout (a reused --work-dir): rebuilt, since renaming onto a
            // non-empty directory fails.
            let _ = std::fs::remove_dir_all(&target);
        }
        let staging = work_dir.join(format!(".podman-rootfs-{}", uuid::Uuid::new_v4()));
        let built = populate_rootfs(&staging).and_then(|()| std::fs::rename(&staging, &target));
        if let Err(source) = built {
            let _ = std::fs::remove_dir_all(&staging);
            // Another caller may have won the rename.
            if !complete(&target) {
                return Err(RuntimeError::Rootfs {
                    path: target,
                    source,
                });
            }
        }
    }
    target.canonicalize().map_err(io_err(&target))
}

fn populate_rootfs(root: &Path) -> std::io::Result<()> {
    for dir in ["usr/bin", "etc", "tmp", "proc", "sys", "dev", "run"] {
        std::fs::create_dir_all(root.join(dir))?;
    }
    for (link, to) in [("bin", "usr/bin"), ("sbin", "usr/bin"), ("usr/sbin", "bin")] {
        std::os::unix::fs::symlink(to, root.join(link))?;
    }
    let bin = root.join("usr/bin");
    std::fs::copy(BUSYBOX, bin.join("busybox"))?;
    let applets = busybox_list(Path::new(BUSYBOX))?;
    for applet in &applets {
        std::os::unix::fs::symlink("busybox", bin.join(applet))?;
    }
    // The few applets busybox installs elsewhere (`linuxrc` at the root).
    for path in busybox_output(Path::new(BUSYBOX), "--list-full")?.lines() {
        let in_bin_dirs = APPLET_DIRS
            .iter()
            .any(|dir| Path::new("/").join(path).parent() == Some(Path::new(dir)));
        if !path.is_empty() && !in_bin_dirs && !path.contains("..") {
            let link = root.join(path);
            if let Some(parent) = link.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::os::unix::fs::symlink("/usr/bin/busybox", link)?;
        }
    }
    if !applets.contains("printenv") {
        let printenv = bin.join("printenv");
        std::fs::write(&printenv, PRINTENV_SCRIPT)?;
        std::fs::set_permissions(&printenv, std::fs::Permissions::from_mode(0o755))?;
    }
    Ok(())
}

/// The applets of a busybox binary (`busybox --list`), without `busybox` itself.
fn busybox_list(busybox: &Path) -> std::io::Result<BTreeSet<String>> {
    Ok(busybox_output(busybox, "--list")?
        .lines()
        .map(str::trim)
        .filter(|a| !a.is_empty() && *a != "busybox" && !a.contains('/'))
        .map(str::to_string)
        .collect())
}

/// What `busybox <option>` prints.
fn busybox_output(busybox: &Path, option: &str) -> std::io::Result<String> {
    let out = std::process::Command::new(busybox)
        .arg(option)
        .stdin(Stdio::null())
        .output()?;
    if !out.status.success() {
        return Err(std::io::Error::other(format!(
            "{} {option} failed: {}",
            busybox.display(),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The host's busybox applets, listed once; `None` when busybox is not installed.
fn host_applets() -> Option<&'static BTreeSet<String>> {
    static APPLETS: OnceLock<Option<BTreeSet<String>>> = OnceLock::new();
    APPLETS
        .get_or_init(|| {
            let busybox = Path::new(BUSYBOX);
            if !is_executable(busybox) {
                return None;
            }
            busybox_list(busybox)
                .inspect_err(|e| tracing::warn!("listing the busybox applets: {e}"))
                .ok()
        })
        .as_ref()
}

/// How the process runner runs a container's program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Program {
    pub path: PathBuf,
    /// Arguments before the container's own (the applet name for busybox).
    pub prefix: Vec<String>,
}

/// The process runner's rule for a container's program (`command[0]`), so manifests
/// written for real images run as they are:
///
/// 1. A bare name (`ash`) or an absolute path in `/bin`, `/sbin`, `/usr/bin` or `/usr/sbin`
///    (`/bin/ash`, `/usr/bin/env`) names the program of that file name. When it is an
///    applet of `applets` (the host's `/bin/busybox --list`), it runs as
///    `/bin/busybox <applet> <args…>`, as in an image whose shell and tools are busybox.
/// 2. Otherwise the host's program: a bare name looked up in the container's `PATH`; an
///    absolute path as it is when the host has it, else its file name in that `PATH`.
///    Any other path (`./x`, `/opt/tool`) runs as it is.
/// 3. Nothing found: an error naming the program.
pub(crate) fn resolve_program(
    program: &str,
    path_env: &str,
    applets: Option<&BTreeSet<String>>,
    busybox: &Path,
) -> Result<Program, String> {
    let name = if !program.contains('/') {
        Some(program)
    } else {
        let path = Path::new(program);
        let in_applet_dir = path
            .parent()
            .and_then(Path::to_str)
            .is_some_and(|dir| APPLET_DIRS.contains(&dir));
        in_applet_dir
            .then(|| path.file_name().and_then(|n| n.to_str()))
            .flatten()
    };
    let direct = |path: PathBuf| Program {
        path,
        prefix: Vec::new(),
    };
    let Some(name) = name.filter(|n| !n.is_empty()) else {
        // A path outside the image's bin directories: the host's file, as it is.
        return Ok(direct(PathBuf::from(program)));
    };
    if applets.is_some_and(|a| a.contains(name)) {
        return Ok(Program {
            path: busybox.to_path_buf(),
            prefix: vec![name.to_string()],
        });
    }
    if program.starts_with('/') && is_executable(Path::new(program)) {
        return Ok(direct(PathBuf::from(program)));
    }
    let in_path = std::env::split_paths(path_env)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate));
    match in_path {
        Some(found) => Ok(direct(found)),
        None => Err(format!(
            "{} and no {name:?} on the host (PATH {path_env})",
            if applets.is_some() {
                format!("{name:?} is not a busybox applet")
            } else {
                format!("busybox ({}) is not installed", busybox.display())
            }
        )),
    }
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

#[derive(Debug)]
enum Runner {
    Podman {
        name: String,
    },
    /// The container's process group id (= the leader's pid), `None` if it had exited already.
    Process {
        pgid: Option<u32>,
    },
}

/// A started container. Dropping it without [`RunningContainer::stop`] still kills it
/// (best effort, in the background).
#[derive(Debug)]
pub struct RunningContainer {
    child: Child,
    runner: Runner,
    label: String,
    exit: Option<i32>,
    /// When the exit was observed.
    exited_at: Option<std::time::Instant>,
    /// `stop` is killing it, so a non-zero exit is expected.
    stopping: bool,
    readers: Vec<JoinHandle<()>>,
    /// Nothing of the container is left.
    cleaned: bool,
    /// The process runner's working directory, removed on drop.
    _scratch: Option<tempfile::TempDir>,
}

impl RunningContainer {
    fn new(
        mut child: Child,
        runner: Runner,
        spec: &ContainerSpec,
        logs: LogSink,
        scratch: Option<tempfile::TempDir>,
    ) -> Self {
        let origin = Origin {
            namespace: spec.namespace.clone(),
            pod: spec.pod.clone(),
            container: spec.container.clone(),
        };
        let podman = matches!(runner, Runner::Podman { .. });
        let mut readers = Vec::new();
        if let Some(stdout) = child.stdout.take() {
            readers.push(tokio::spawn(forward_lines(
                stdout,
                logs.clone(),
                origin.clone(),
                false,
            )));
        }
        if let Some(stderr) = child.stderr.take() {
            readers.push(tokio::spawn(forward_lines(stderr, logs, origin, podman)));
        }
        Self {
            child,
            runner,
            label: spec.label(),
            exit: None,
            exited_at: None,
            stopping: false,
            readers,
            cleaned: false,
            _scratch: scratch,
        }
    }

    /// The podman container name (podman runner).
    pub fn podman_name(&self) -> Option<&str> {
        match &self.runner {
            Runner::Podman { name } => Some(name),
            Runner::Process { .. } => None,
        }
    }

    /// The pid of the process the runner started, the leader of the container's process
    /// group: the container's main process (process runner) or the podman client — or their
    /// supervisor when a [`super::lifeline`] is installed.
    pub fn pid(&self) -> Option<u32> {
        match &self.runner {
            Runner::Process { pgid } => *pgid,
            Runner::Podman { .. } => self.child.id(),
        }
    }

    /// Some(exit code) once the container has exited and its output is in the log sink
    /// (non-blocking), so whoever sees the exit also sees every line; 128+signal when
    /// killed. A stray process holding the output open delays this by [`DRAIN_TIMEOUT`] at most.
    pub fn try_exit_code(&mut self) -> Option<i32> {
        let code = self.poll_exit()?;
        let drained = self.readers.iter().all(JoinHandle::is_finished)
            || self
                .exited_at
                .is_some_and(|at| at.elapsed() >= DRAIN_TIMEOUT);
        drained.then_some(code)
    }

    /// The exit code if the main process has exited, output drained or not.
    fn poll_exit(&mut self) -> Option<i32> {
        if self.exit.is_none() {
            match self.child.try_wait() {
                Ok(Some(status)) => self.exited(status),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(container = %self.label, "checking whether the container exited: {e}")
                }
            }
        }
        self.exit
    }

    /// Waits for the container to exit (and for its output to reach the log sink).
    pub async fn wait(&mut self) -> i32 {
        if self.exit.is_none() {
            match self.child.wait().await {
                Ok(status) => self.exited(status),
                Err(e) => {
                    tracing::warn!(container = %self.label, "waiting for the container: {e}");
                    self.exit = Some(-1);
                }
            }
        }
        self.drain().await;
        self.exit.unwrap_or(-1)
    }

    /// Kills the container (SIGKILL to its process group / `podman rm -f -t 0`) and waits
    /// for it; no process or podman container of it is left afterwards.
    pub async fn stop(mut self) {
        tracing::debug!(container = %self.label, "stopping container");
        self.stopping = true;
        match &self.runner {
            Runner::Process { pgid } => {
                if self.exit.is_none() {
                    let killed = match pgid {
                        Some(pgid) => kill_group(*pgid).await,
                        None => false,
                    };
                    if !killed {
                        let _ = self.child.start_kill();
                    }
                }
            }
            Runner::Podman { name } => {
                let name = name.clone();
                self.stop_podman(&name).await;
            }
        }
        self.wait().await;
        self.cleaned = true;
    }

    /// `podman rm -f` until podman run exits: the first removal can come before podman has
    /// created the container, and a later one still catches it.
    async fn stop_podman(&mut self, name: &str) {
        for _ in 0..PODMAN_STOP_ROUNDS {
            if self.poll_exit().is_some() {
                break;
            }
            podman_rm(name).await;
            if let Ok(result) = tokio::time::timeout(PODMAN_STOP_ROUND, self.child.wait()).await {
                match result {
                    Ok(status) => self.exited(status),
                    Err(e) => tracing::warn!(container = %self.label, "waiting for podman: {e}"),
                }
                break;
            }
        }
        if self.poll_exit().is_none() {
            tracing::warn!(container = %self.label, "podman did not exit after `podman rm -f {name}`; killing it");
            match self.child.id() {
                // The podman client's group: its supervisor too, when there is one.
                Some(pgid) => kill_group_blocking(pgid),
                None => {
                    let _ = self.child.start_kill();
                }
            }
            if let Ok(status) = self.child.wait().await {
                self.exited(status);
            }
        }
        // podman run normally removes its container (--rm); this catches one it left behind.
        podman_rm(name).await;
    }

    fn exited(&mut self, status: ExitStatus) {
        let code = exit_code(status);
        self.exit = Some(code);
        self.exited_at = Some(std::time::Instant::now());
        match &self.runner {
            // A container ends with its main process: kill what it left in its group.
            Runner::Process { pgid: Some(pgid) } => kill_group_blocking(*pgid),
            Runner::Process { pgid: None } => {}
            Runner::Podman { .. } if code != 0 && !self.stopping => {
                tracing::warn!(container = %self.label, code, "podman run exited non-zero (its stderr is in the container's logs)");
            }
            Runner::Podman { .. } => {}
        }
        tracing::debug!(container = %self.label, code, "container exited");
        self.cleaned = true;
    }

    async fn drain(&mut self) {
        for reader in self.readers.drain(..) {
            if tokio::time::timeout(DRAIN_TIMEOUT, reader).await.is_err() {
                tracing::warn!(container = %self.label, "output still open {DRAIN_TIMEOUT:?} after the container exited; not waiting for it");
            }
        }
    }
}

impl Drop for RunningContainer {
    fn drop(&mut self) {
        if self.cleaned {
            return;
        }
        // kill_on_drop ends the child itself; this ends what it started.
        match &self.runner {
            Runner::Process { pgid: Some(pgid) } => kill_group_blocking(*pgid),
            Runner::Process { pgid: None } => {}
            Runner::Podman { name } => {
                let name = name.clone();
                if let Some(pgid) = self.child.id() {
                    kill_group_blocking(pgid);
                }
                std::thread::spawn(move || {
                    let _ = std::process::Command::new("podman")
                        .args(PODMAN_GLOBAL_ARGS)
                        .args(["rm", "-f", "-t", "0", "--ignore", &name])
                        .stdin(Stdio::null())
                        .output();
                });
            }
        }
    }
}

fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

async fn podman_rm(name: &str) {
    let output = Command::new("podman")
        .args(PODMAN_GLOBAL_ARGS)
        .args(["rm", "-f", "-t", "0", "--ignore", name])
        .stdin(Stdio::null())
        .output()
        .await;
    match output {
        Ok(output) if output.status.success() => {}
        Ok(output) => tracing::warn!(
            name,
            "podman rm -f failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ),
        Err(e) => tracing::warn!(name, "running podman rm -f: {e}"),
    }
}

/// SIGKILL to a process group through kill(1) (`unsafe` is forbidden, so no libc::kill).
/// Returns whether kill(1) ran and succeeded.
async fn kill_group(pgid: u32) -> bool {
    let (program, args) = kill_group_argv(pgid);
    let status = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await;
    match status {
        Ok(status) => status.success(),
        Err(e) => {
            tracing::warn!(
                pgid,
                "running kill(1) for the container's process group: {e}"
            );
            false
        }
    }
}

/// [`kill_group`] for sync contexts; kill(1) returns at once. A group that is already
/// gone is no error.
fn kill_group_blocking(pgid: u32) {
    if let Err(e) = lifeline::signal_group("KILL", pgid) {
        tracing::warn!(pgid, "killing the container's process group: {e}");
    }
}

/// kill(1) for a process group (the group as `-pgid`).
fn kill_group_argv(pgid: u32) -> (PathBuf, Vec<String>) {
    let (program, mut args) = lifeline::kill_argv("KILL");
    args.push(format!("-{pgid}"));
    (program, args)
}

#[derive(Debug, Clone)]
struct Origin {
    namespace: String,
    pod: String,
    container: String,
}

/// Copies a stream into the sink line by line (lossy UTF-8, so binary output can't stop it).
async fn forward_lines(
    stream: impl AsyncRead + Unpin,
    logs: LogSink,
    origin: Origin,
    podman_stderr: bool,
) {
    let mut reader = BufReader::new(stream);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf).await {
            Ok(0) => break,
            Ok(_) => {
                let line = String::from_utf8_lossy(&buf);
                let line = line.strip_suffix('\n').unwrap_or(&line);
                let line = line.strip_suffix('\r').unwrap_or(line);
                if podman_stderr && line.starts_with("Error: ") {
                    tracing::warn!(container = %format!("{}/{}/{}", origin.namespace, origin.pod, origin.container), "podman: {line}");
                }
                logs.push(LogLine {
                    namespace: origin.namespace.clone(),
                    pod: origin.pod.clone(),
                    container: origin.container.clone(),
                    line: line.to_string(),
                });
            }
            Err(e) => {
                tracing::warn!("reading container output: {e}");
                break;
            }
        }
    }
}

/// One line a container printed.
#[derive(Debug, Clone)]
pub struct LogLine {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    pub line: String,
}

impl LogLine {
    fn is_of(&self, namespace: &str, pod: &str, container: &str) -> bool {
        self.namespace == namespace && self.pod == pod && self.container == container
    }
}

/// Every line every container printed (stdout and stderr), kept in memory and broadcast.
#[derive(Debug, Clone)]
pub struct LogSink {
    lines: Arc<Mutex<Vec<LogLine>>>,
    tx: broadcast::Sender<LogLine>,
}

impl Default for LogSink {
    fn default() -> Self {
        Self {
            lines: Arc::default(),
            tx: broadcast::channel(LOG_CHANNEL_CAPACITY).0,
        }
    }
}

impl LogSink {
    pub fn subscribe(&self) -> broadcast::Receiver<LogLine> {
        self.tx.subscribe()
    }

    pub fn lines(&self, namespace: &str, pod: &str, container: &str) -> Vec<String> {
        self.locked()
            .iter()
            .filter(|l| l.is_of(namespace, pod, container))
            .map(|l| l.line.clone())
            .collect()
    }

    pub fn all(&self) -> Vec<LogLine> {
        self.locked().clone()
    }

    /// Records a line and broadcasts it.
    pub fn push(&self, line: LogLine) {
        let mut lines = self.locked();
        lines.push(line.clone());
        // Sent under the lock so subscribers see lines in the stored order; no subscriber is fine.
        let _ = self.tx.send(line);
    }

    /// Waits until a line of that container satisfies `pred`, up to `timeout`; returns all
    /// that container's lines so far, or `Err(lines so far)` on timeout.
    pub async fn wait_for(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> Result<Vec<String>, Vec<String>> {
        let deadline = tokio::time::Instant::now() + timeout;
        // Subscribed before looking, so no line slips between the look and the wait.
        let mut rx = self.subscribe();
        let mut recheck = true;
        loop {
            if recheck {
                let lines = self.lines(namespace, pod, container);
                if lines.iter().any(|l| pred(l)) {
                    return Ok(lines);
                }
                recheck = false;
            }
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Err(_) | Ok(Err(broadcast::error::RecvError::Closed)) => {
                    return Err(self.lines(namespace, pod, container));
                }
                Ok(Ok(line)) if line.is_of(namespace, pod, container) && pred(&line.line) => {
                    return Ok(self.lines(namespace, pod, container));
                }
                Ok(Ok(_)) => {}
                Ok(Err(broadcast::error::RecvError::Lagged(_))) => recheck = true,
            }
        }
    }

    fn locked(&self) -> MutexGuard<'_, Vec<LogLine>> {
        // A panic while pushing leaves a consistent Vec; keep serving it.
        self.lines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

// ---- CDI, for the process runner ----

/// One CDI spec file, reduced to what the process runner applies or refuses.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CdiSpec {
    path: PathBuf,
    /// `vendor/class`
    kind: String,
    /// The spec's top-level containerEdits, applied once before its first requested device.
    edits: Edits,
    devices: Vec<CdiDevice>,
}

#[derive(Debug, Clone, PartialEq)]
struct CdiDevice {
    name: String,
    edits: Edits,
}

#[derive(Debug, Clone, PartialEq, Default)]
struct Edits {
    env: Vec<(String, String)>,
    /// Names of the non-env edits present (deviceNodes, mounts, hooks, ...).
    other: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawSpec {
    #[allow(dead_code)]
    cdi_version: String,
    kind: String,
    #[serde(default)]
    devices: Vec<RawDevice>,
    #[serde(default)]
    container_edits: RawEdits,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawDevice {
    name: String,
    #[serde(default)]
    container_edits: RawEdits,
}

#[derive(Deserialize, Default)]
struct RawEdits {
    #[serde(default)]
    env: Option<Vec<String>>,
    #[serde(flatten)]
    other: serde_json::Map<String, serde_json::Value>,
}

impl RawEdits {
    fn into_edits(self, path: &Path, what: &str) -> Result<Edits, RuntimeError> {
        let mut env = Vec::new();
        for entry in self.env.unwrap_or_default() {
            match entry.split_once('=') {
                Some((key, value)) if !key.is_empty() => {
                    env.push((key.to_string(), value.to_string()))
                }
                _ => {
                    return Err(RuntimeError::InvalidCdiSpec {
                        path: path.to_path_buf(),
                        reason: format!("{what}: env entry {entry:?} is not KEY=VALUE"),
                    });
                }
            }
        }
        let other = self
            .other
            .into_iter()
            .filter(|(_, value)| !is_empty_value(value))
            .map(|(key, _)| key)
            .collect();
        Ok(Edits { env, other })
    }
}

fn is_empty_value(value: &serde_json::Value) -> bool {
    match value {
        serde_json::Value::Null => true,
        serde_json::Value::Array(a) => a.is_empty(),
        serde_json::Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// Parses one spec file's text; `.json` as JSON, anything else as YAML.
pub(crate) fn parse_cdi_spec(path: &Path, text: &str) -> Result<CdiSpec, RuntimeError> {
    let invalid = |reason: String| RuntimeError::InvalidCdiSpec {
        path: path.to_path_buf(),
        reason,
    };
    let raw: RawSpec = if path.extension().is_some_and(|e| e == "json") {
        serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?
    } else {
        serde_yaml_ng::from_str(text).map_err(|e| invalid(e.to_string()))?
    };
    match raw.kind.split_once('/') {
        Some((vendor, class))
            if !vendor.is_empty() && !class.is_empty() && !class.contains('/') => {}
        _ => return Err(invalid(format!("kind {:?} is not vendor/class", raw.kind))),
    }
    let edits = raw.container_edits.into_edits(path, "containerEdits")?;
    let mut devices = Vec::new();
    for device in raw.devices {
        let edits = device
            .container_edits
            .into_edits(path, &format!("device {:?}", device.name))?;
        devices.push(CdiDevice {
            name: device.name,
            edits,
        });
    }
    Ok(CdiSpec {
        path: path.to_path_buf(),
        kind: raw.kind,
        edits,
        devices,
    })
}

/// Every `*.json` / `*.yaml` spec in `dir`, sorted by file name, plus a note per file that
/// did not parse. Like the CDI registry, a broken file doesn't hide the others; the notes
/// show up in the error when a device then can't be found. A missing dir has no specs.
pub(crate) fn load_cdi_specs(dir: &Path) -> Result<(Vec<CdiSpec>, Vec<String>), RuntimeError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), Vec::new())),
        Err(source) => {
            return Err(RuntimeError::ReadCdi {
                path: dir.to_path_buf(),
                source,
            });
        }
    };
    let mut paths = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|source| RuntimeError::ReadCdi {
                path: dir.to_path_buf(),
                source,
            })?
            .path();
        if path.extension().is_some_and(|e| e == "json" || e == "yaml") && path.is_file() {
            paths.push(path);
        }
    }
    paths.sort();
    let (mut specs, mut skipped) = (Vec::new(), Vec::new());
    for path in paths {
        let parsed = match std::fs::read_to_string(&path) {
            Ok(text) => parse_cdi_spec(&path, &text),
            // Removed between listing and reading (a claim being unprepared).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => Err(RuntimeError::ReadCdi {
                path: path.clone(),
                source,
            }),
        };
        match parsed {
            Ok(spec) => specs.push(spec),
            Err(e) => {
                tracing::warn!("skipping CDI spec: {e}");
                skipped.push(e.to_string());
            }
        }
    }
    Ok((specs, skipped))
}

/// Splits `vendor/class=name`.
pub(crate) fn parse_qualified_id(id: &str) -> Result<(&str, &str), RuntimeError> {
    let invalid = || RuntimeError::InvalidCdiId { id: id.to_string() };
    let (kind, name) = id.split_once('=').ok_or_else(invalid)?;
    let (vendor, class) = kind.split_once('/').ok_or_else(invalid)?;
    if vendor.is_empty() || class.is_empty() || name.is_empty() || class.contains('/') {
        return Err(invalid());
    }
    Ok((kind, name))
}

/// The env edits the requested devices make, in the order CDI applies them: each spec's
/// top-level edits before its first requested device, then the device's own. Any other
/// edit is refused: the process runner can't apply it and must not pretend to.
pub(crate) fn resolve_cdi_env(
    specs: &[CdiSpec],
    ids: &[String],
    dir: &Path,
    skipped: &[String],
) -> Result<Vec<(String, String)>, RuntimeError> {
    let mut env = Vec::new();
    let mut seen_specs = BTreeSet::new();
    for id in ids {
        let (kind, name) = parse_qualified_id(id)?;
        let matches: Vec<(usize, &CdiDevice)> = specs
            .iter()
            .enumerate()
            .filter(|(_, s)| s.kind == kind)
            .flat_map(|(i, s)| {
                s.devices
                    .iter()
                    .filter(|d| d.name == name)
                    .map(move |d| (i, d))
            })
            .collect();
        let (index, device) = match matches.as_slice() {
            [one] => *one,
            [] => {
                let notes = if skipped.is_empty() {
                    String::new()
                } else {
                    format!(" (unparsable specs skipped: {})", skipped.join("; "))
                };
                return Err(RuntimeError::CdiDeviceNotFound {
                    id: id.clone(),
                    dir: dir.to_path_buf(),
                    notes,
                });
            }
            many => {
                return Err(RuntimeError::CdiDeviceAmbiguous {
                    id: id.clone(),
                    files: many.iter().map(|(i, _)| specs[*i].path.clone()).collect(),
                });
            }
        };
        let spec = &specs[index];
        if seen_specs.insert(index) {
            if let Some(edit) = spec.edits.other.first() {
                return Err(RuntimeError::UnsupportedEdit {
                    device: id.clone(),
                    edit: format!(
                        "{edit} (top-level containerEdits of {})",
                        spec.path.display()
                    ),
                });
            }
            env.extend(spec.edits.env.iter().cloned());
        }
        if let Some(edit) = device.edits.other.first() {
            return Err(RuntimeError::UnsupportedEdit {
                device: id.clone(),
                edit: edit.clone(),
            });
        }
        env.extend(device.edits.env.iter().cloned());
    }
    Ok(env)
}

/// The process runner's environment, built as podman/OCI builds a container's: the
/// runtime's defaults, the container's env, then the CDI edits. A later value of a name
/// replaces the earlier one in place (what the OCI spec generator does).
pub(crate) fn process_env(
    pod: &str,
    container_env: &[(String, String)],
    cdi_env: &[(String, String)],
) -> Vec<(String, String)> {
    let defaults = [
        ("PATH", DEFAULT_PATH),
        ("TERM", "xterm"),
        ("HOSTNAME", &hostname_for(pod)),
        ("HOME", "/"),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()));
    let mut env: Vec<(String, String)> = Vec::new();
    for (key, value) in defaults.iter().chain(container_env).chain(cdi_env) {
        match env.iter_mut().find(|(k, _)| k == key) {
            Some(existing) => existing.1 = value.clone(),
            None => env.push((key.clone(), value.clone())),
        }
    }
    env
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const KIND: &str = "k8s.fake.resource.3-shake.com/fake";

    fn spec_json(common_env: &str, extra: &str) -> String {
        format!(
            r#"{{"cdiVersion":"0.5.0","kind":"{KIND}","containerEdits":{{"env":["TOP=1"]}},
            "devices":[{{"name":"common","containerEdits":{{"env":[{common_env}]}}}},
                       {{"name":"0b5c1e9a-1111-2222-3333-444455556666","containerEdits":{{"env":["FAKE_DEVICE_0=FAKE-xyz"]{extra}}}}}]}}"#
        )
    }

    fn kv(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn parses_json_and_yaml_alike() {
        let json = parse_cdi_spec(
            Path::new("/x/a.json"),
            &spec_json(r#""FAKE_NODE_NAME=node-a""#, ""),
        )
        .unwrap();
        let yaml_text = format!(
            "cdiVersion: 0.5.0\nkind: {KIND}\ncontainerEdits:\n  env: [TOP=1]\ndevices:\n- name: common\n  containerEdits:\n    env: [FAKE_NODE_NAME=node-a]\n- name: 0b5c1e9a-1111-2222-3333-444455556666\n  containerEdits:\n    env: [FAKE_DEVICE_0=FAKE-xyz]\n"
        );
        let yaml = parse_cdi_spec(Path::new("/x/a.json.yaml"), &yaml_text).unwrap();
        assert_eq!(json.kind, KIND);
        assert_eq!(json.devices, yaml.devices);
        assert_eq!(json.edits.env, kv(&[("TOP", "1")]));
        assert_eq!(
            json.devices[1].edits.env,
            kv(&[("FAKE_DEVICE_0", "FAKE-xyz")])
        );
    }

    #[test]
    fn rejects_bad_specs() {
        let bad_env =
            parse_cdi_spec(Path::new("a.json"), &spec_json(r#""NOEQUALS""#, "")).unwrap_err();
        assert!(bad_env.to_string().contains("NOEQUALS"), "{bad_env}");
        let bad_kind = parse_cdi_spec(
            Path::new("a.json"),
            r#"{"cdiVersion":"0.5.0","kind":"nokind","devices":[]}"#,
        )
        .unwrap_err();
        assert!(bad_kind.to_string().contains("nokind"), "{bad_kind}");
        assert!(parse_cdi_spec(Path::new("a.json"), "{").is_err());
    }

    #[test]
    fn value_after_equals_keeps_equals() {
        let spec = parse_cdi_spec(Path::new("a.json"), &spec_json(r#""A=b=c""#, "")).unwrap();
        assert_eq!(spec.devices[0].edits.env, kv(&[("A", "b=c")]));
    }

    #[test]
    fn resolves_env_in_cdi_order() {
        let spec = parse_cdi_spec(
            Path::new("a.json"),
            &spec_json(r#""FAKE_NODE_NAME=node-a""#, ""),
        )
        .unwrap();
        let ids = vec![
            format!("{KIND}=common"),
            format!("{KIND}=0b5c1e9a-1111-2222-3333-444455556666"),
        ];
        let env = resolve_cdi_env(&[spec], &ids, Path::new("/d"), &[]).unwrap();
        // The top-level edits once, before the spec's first device.
        assert_eq!(
            env,
            kv(&[
                ("TOP", "1"),
                ("FAKE_NODE_NAME", "node-a"),
                ("FAKE_DEVICE_0", "FAKE-xyz")
            ])
        );
    }

    #[test]
    fn unknown_ambiguous_and_invalid_ids_are_errors() {
        let spec = parse_cdi_spec(Path::new("a.json"), &spec_json(r#""A=1""#, "")).unwrap();
        let missing = resolve_cdi_env(
            std::slice::from_ref(&spec),
            &[format!("{KIND}=abc")],
            Path::new("/d"),
            &["b.json: broken".into()],
        )
        .unwrap_err();
        assert!(matches!(missing, RuntimeError::CdiDeviceNotFound { .. }));
        assert!(
            missing
                .to_string()
                .contains(&format!("{KIND}=abc not found in /d")),
            "{missing}"
        );
        assert!(missing.to_string().contains("b.json: broken"), "{missing}");
        let mut other = spec.clone();
        other.path = PathBuf::from("b.json");
        let ambiguous = resolve_cdi_env(
            &[spec.clone(), other],
            &[format!("{KIND}=common")],
            Path::new("/d"),
            &[],
        )
        .unwrap_err();
        assert!(
            matches!(ambiguous, RuntimeError::CdiDeviceAmbiguous { ref files, .. } if files.len() == 2),
            "{ambiguous}"
        );
        for bad in ["nokind", "vendor=name", "a/b=", "/b=c", "a/b/c=d"] {
            let err = resolve_cdi_env(
                std::slice::from_ref(&spec),
                &[bad.to_string()],
                Path::new("/d"),
                &[],
            )
            .unwrap_err();
            assert!(
                matches!(err, RuntimeError::InvalidCdiId { .. }),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn non_env_edits_are_refused_naming_device_and_edit() {
        let spec = parse_cdi_spec(
            Path::new("a.json"),
            &spec_json(r#""A=1""#, r#","deviceNodes":[{"path":"/dev/null"}]"#),
        )
        .unwrap();
        let id = format!("{KIND}=0b5c1e9a-1111-2222-3333-444455556666");
        let err = resolve_cdi_env(
            std::slice::from_ref(&spec),
            std::slice::from_ref(&id),
            Path::new("/d"),
            &[],
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("process runtime applies only env edits; device {id} has deviceNodes")
        );
        // The other device of that spec has only env edits.
        assert!(
            resolve_cdi_env(&[spec], &[format!("{KIND}=common")], Path::new("/d"), &[]).is_ok()
        );
        // Empty non-env edits are no edits.
        let empty = parse_cdi_spec(
            Path::new("a.json"),
            &spec_json(r#""A=1""#, r#","mounts":[],"hooks":null"#),
        )
        .unwrap();
        assert!(empty.devices[1].edits.other.is_empty());
    }

    #[test]
    fn top_level_non_env_edits_are_refused() {
        let text = format!(
            r#"{{"cdiVersion":"0.5.0","kind":"{KIND}","containerEdits":{{"mounts":[{{"hostPath":"/a","containerPath":"/b"}}]}},"devices":[{{"name":"d","containerEdits":{{"env":["A=1"]}}}}]}}"#
        );
        let spec = parse_cdi_spec(Path::new("a.json"), &text).unwrap();
        let err =
            resolve_cdi_env(&[spec], &[format!("{KIND}=d")], Path::new("/d"), &[]).unwrap_err();
        assert!(
            err.to_string()
                .contains("has mounts (top-level containerEdits of a.json)"),
            "{err}"
        );
    }

    #[test]
    fn process_env_orders_and_overrides_like_oci() {
        let env = process_env(
            "my-pod",
            &kv(&[("A", "container"), ("B", "b"), ("HOME", "/root")]),
            &kv(&[("A", "cdi"), ("C", "1"), ("C", "2")]),
        );
        assert_eq!(
            env,
            kv(&[
                ("PATH", DEFAULT_PATH),
                ("TERM", "xterm"),
                ("HOSTNAME", "my-pod"),
                ("HOME", "/root"),
                ("A", "cdi"),
                ("B", "b"),
                ("C", "2")
            ])
        );
    }

    #[test]
    fn load_skips_broken_and_unrelated_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("good.json"), spec_json(r#""A=1""#, "")).unwrap();
        std::fs::write(dir.path().join("broken.yaml"), "kind: [").unwrap();
        std::fs::write(dir.path().join("notes.txt"), "not a spec").unwrap();
        let (specs, skipped) = load_cdi_specs(dir.path()).unwrap();
        assert_eq!(specs.len(), 1);
        assert_eq!(skipped.len(), 1);
        assert!(skipped[0].contains("broken.yaml"), "{skipped:?}");
        let (none, _) = load_cdi_specs(&dir.path().join("missing")).unwrap();
        assert!(none.is_empty());
    }

    #[test]
    fn programs_map_to_busybox_applets_then_the_host() {
        let applets: BTreeSet<String> = ["ash", "sh", "env", "sleep"]
            .into_iter()
            .map(String::from)
            .collect();
        let bb = Path::new("/bb/busybox");
        let host = tempfile::tempdir().unwrap();
        let tool = host.path().join("tool");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path_env = host.path().display().to_string();
        let busybox = |applet: &str| Program {
            path: bb.to_path_buf(),
            prefix: vec![applet.to_string()],
        };
        let resolve = |program: &str, applets| resolve_program(program, &path_env, applets, bb);
        for (program, applet) in [
            ("ash", "ash"),
            ("/bin/ash", "ash"),
            ("/usr/bin/env", "env"),
            ("/sbin/sleep", "sleep"),
            ("/usr/sbin/sh", "sh"),
        ] {
            assert_eq!(
                resolve(program, Some(&applets)),
                Ok(busybox(applet)),
                "{program}"
            );
        }
        let direct = |path: &Path| Program {
            path: path.to_path_buf(),
            prefix: Vec::new(),
        };
        // Not an applet: the host's program of that name, in the container's PATH.
        assert_eq!(resolve("tool", Some(&applets)), Ok(direct(&tool)));
        assert_eq!(resolve("/usr/bin/tool", Some(&applets)), Ok(direct(&tool)));
        // No busybox at all: the host's program too.
        assert_eq!(resolve("tool", None), Ok(direct(&tool)));
        // A path outside the image's bin directories runs as it is.
        assert_eq!(
            resolve("/opt/x/ash", Some(&applets)),
            Ok(direct(Path::new("/opt/x/ash")))
        );
        assert_eq!(
            resolve("./ash", Some(&applets)),
            Ok(direct(Path::new("./ash")))
        );
        // Neither: the error names the program and why.
        let err = resolve("/bin/ash", None).unwrap_err();
        assert!(
            err.contains("\"ash\"") && err.contains("busybox (/bb/busybox) is not installed"),
            "{err}"
        );
        let err = resolve("nope", Some(&applets)).unwrap_err();
        assert!(err.contains("\"nope\" is not a busybox applet"), "{err}");
    }

    #[test]
    fn podman_names_are_valid() {
        assert_eq!(
            podman_container_name("ns/pod:ctr@1"),
            "fake-dra-ns-pod-ctr-1"
        );
        assert_eq!(hostname_for("My_Pod"), "my-pod");
        assert_eq!(hostname_for("___"), "pod");
        assert_eq!(hostname_for("web.v1"), "web.v1");
    }

    #[tokio::test]
    async fn wait_for_sees_earlier_and_later_lines() {
        let sink = LogSink::default();
        let line = |container: &str, text: &str| LogLine {
            namespace: "ns".into(),
            pod: "p".into(),
            container: container.into(),
            line: text.into(),
        };
        sink.push(line("c", "early"));
        assert_eq!(
            sink.wait_for("ns", "p", "c", Duration::from_secs(60), |l| l == "early")
                .await
                .unwrap(),
            vec!["early"]
        );
        let pusher = sink.clone();
        let task = tokio::spawn(async move {
            pusher.push(line("other", "late"));
            pusher.push(line("c", "late"));
        });
        let lines = sink
            .wait_for("ns", "p", "c", Duration::from_secs(60), |l| l == "late")
            .await
            .unwrap();
        assert_eq!(lines, vec!["early", "late"]);
        task.await.unwrap();
        let timed_out = sink
            .wait_for("ns", "p", "c", Duration::from_millis(10), |l| l == "never")
            .await
            .unwrap_err();
        assert_eq!(timed_out, vec!["early", "late"]);
        assert_eq!(sink.all().len(), 3);
    }
}
