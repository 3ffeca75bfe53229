//! A started container: waiting for it, stopping it (podman stop/rm or the process group), its exit code.

use super::*;

#[derive(Debug)]
pub(super) enum Runner {
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
    pub(super) child: Child,
    pub(super) runner: Runner,
    pub(super) label: String,
    pub(super) exit: Option<i32>,
    /// When the exit was observed.
    pub(super) exited_at: Option<std::time::Instant>,
    /// `stop` is killing it, so a non-zero exit is expected.
    pub(super) stopping: bool,
    pub(super) readers: Vec<JoinHandle<()>>,
    /// Nothing of the container is left.
    pub(super) cleaned: bool,
    /// The process runner's working directory, removed on drop.
    pub(super) _scratch: Option<tempfile::TempDir>,
}

impl RunningContainer {
    pub(super) fn new(
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
            file: spec.log_path.as_deref().and_then(CriLog::create),
        };
        let podman = matches!(runner, Runner::Podman { .. });
        let mut readers = Vec::new();
        if let Some(stdout) = child.stdout.take() {
            readers.push(tokio::spawn(forward_lines(
                stdout,
                logs.clone(),
                origin.clone(),
                Stream::Stdout,
                false,
            )));
        }
        if let Some(stderr) = child.stderr.take() {
            readers.push(tokio::spawn(forward_lines(
                stderr,
                logs,
                origin,
                Stream::Stderr,
                podman,
            )));
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
    pub(super) fn poll_exit(&mut self) -> Option<i32> {
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
        if let Runner::Process { pgid: Some(pgid) } = self.runner {
            wait_until_group_gone(pgid).await;
        }
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
    pub(super) async fn stop_podman(&mut self, name: &str) {
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

    pub(super) fn exited(&mut self, status: ExitStatus) {
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

    pub(super) async fn drain(&mut self) {
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

pub(super) fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

pub(super) async fn podman_rm(name: &str) {
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
pub(super) async fn kill_group(pgid: u32) -> bool {
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

/// Waits (up to [`DRAIN_TIMEOUT`]) until no live process is left in the group: a SIGKILL
/// is delivered at once but takes effect when the process next runs, and a container has
/// ended only when every process of it has (as runc waits for its cgroup to empty).
pub(super) async fn wait_until_group_gone(pgid: u32) {
    let deadline = tokio::time::Instant::now() + DRAIN_TIMEOUT;
    while lifeline::live_processes().any(|(_, stat)| stat.pgrp == pgid) {
        if tokio::time::Instant::now() > deadline {
            tracing::warn!(
                pgid,
                "processes of a container's group outlived its SIGKILL"
            );
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// [`kill_group`] for sync contexts; kill(1) returns at once. A group that is already
/// gone is no error.
pub(super) fn kill_group_blocking(pgid: u32) {
    if let Err(e) = lifeline::signal_group("KILL", pgid) {
        tracing::warn!(pgid, "killing the container's process group: {e}");
    }
}

/// kill(1) for a process group (the group as `-pgid`).
pub(super) fn kill_group_argv(pgid: u32) -> (PathBuf, Vec<String>) {
    let (program, mut args) = lifeline::kill_argv("KILL");
    args.push(format!("-{pgid}"));
    (program, args)
}
