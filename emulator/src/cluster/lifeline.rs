//! Ties the processes the emulator starts to the life of the process that started them,
//! without `unsafe`.
//!
//! The workspace forbids `unsafe`, so there is no `pre_exec` with
//! `prctl(PR_SET_PDEATHSIG)` — which would not do anyway: the death signal follows the
//! *thread* that forked, and tokio forks from whichever worker thread runs the task, so a
//! child could be killed when a worker thread exits while the process lives on.
//!
//! The lifeline is a pipe instead. This process holds its only write end and never writes
//! to it; every supervised child gets the read end as its stdin. The child is a small
//! supervisor — this program re-executed as `<exe> __supervise -- <command…>` — that runs
//! the real command in its own process group and waits. When this process dies, however it
//! dies (`kill -9` too), the kernel closes the write end, the supervisor reads EOF, kills
//! every other process of its group and then runs the cleanup it was given: `podman rm -f`
//! for a container whose `podman run` client it just killed (conmon keeps the container
//! running on its own), removing a scratch directory.
//!
//! Who spawns a supervisor makes it lead a new process group (`process_group(0)`); the
//! command and all it starts inherit that group, so killing the group (the runtime stopping
//! a container, a test's `kill -9` of a driver) kills the supervisor and the command
//! together, as it killed the command alone before. SIGTERM and SIGINT sent to the
//! supervisor go to the command, so a graceful shutdown still reaches it.
//!
//! A lifeline exists only once [`install`]ed: `fake-dra-sim` installs one at start; library
//! users that do not (the in-process test suites) spawn commands directly, as before.

use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::sync::OnceLock;

use tokio::process::Command;

/// The hidden subcommand that runs the supervisor.
pub const SUBCOMMAND: &str = "__supervise";
/// Rounds of killing the group's remaining members on a cut lifeline; each round kills
/// every member seen, so only processes forked meanwhile are left for the next one.
const KILL_ROUNDS: usize = 100;

#[derive(Debug, thiserror::Error)]
pub enum LifelineError {
    #[error("creating the lifeline pipe: {0}")]
    Pipe(#[source] std::io::Error),
    #[error("a lifeline is already installed (supervisor {0})")]
    AlreadyInstalled(PathBuf),
}

#[derive(Debug)]
struct Lifeline {
    supervisor: PathBuf,
    reader: std::io::PipeReader,
    /// Never written to: it only has to stay open as long as this process lives. The pipe
    /// is close-on-exec, so no child inherits this end and keeps it open after we died.
    _writer: std::io::PipeWriter,
}

static LIFELINE: OnceLock<Lifeline> = OnceLock::new();

/// Makes every command started through [`command`] from now on run under `supervisor`
/// (this program's own executable, which must dispatch [`SUBCOMMAND`] to
/// [`supervise_main`]).
pub fn install(supervisor: PathBuf) -> Result<(), LifelineError> {
    let (reader, writer) = std::io::pipe().map_err(LifelineError::Pipe)?;
    let lifeline = Lifeline {
        supervisor,
        reader,
        _writer: writer,
    };
    LIFELINE
        .set(lifeline)
        .map_err(|l| LifelineError::AlreadyInstalled(l.supervisor))
}

/// Whether commands are supervised.
pub fn installed() -> bool {
    LIFELINE.get().is_some()
}

/// What the supervisor does after it killed the command because the lifeline was cut.
#[derive(Debug, Clone, Default)]
pub struct Cleanup {
    /// A command to run (program and arguments), e.g. `podman rm -f <container>`.
    pub run: Vec<OsString>,
    /// Directories to remove with all they hold.
    pub remove: Vec<PathBuf>,
}

/// A command running `program args`: under the supervisor when a lifeline is installed,
/// else directly. Its stdin is set here (the lifeline, or null for a direct command);
/// callers set everything else (env, working directory, output, `process_group(0)`),
/// which the supervisor passes on to the command unchanged.
pub fn command(
    program: impl AsRef<OsStr>,
    args: &[OsString],
    cleanup: &Cleanup,
) -> std::io::Result<Command> {
    let Some(lifeline) = LIFELINE.get() else {
        let mut command = Command::new(program);
        command.args(args).stdin(Stdio::null());
        return Ok(command);
    };
    let mut command = Command::new(&lifeline.supervisor);
    command.arg(SUBCOMMAND);
    for arg in &cleanup.run {
        command.arg("--then-run").arg(arg);
    }
    for dir in &cleanup.remove {
        command.arg("--then-remove").arg(dir);
    }
    command
        .arg("--")
        .arg(program)
        .args(args)
        .stdin(Stdio::from(lifeline.reader.try_clone()?));
    Ok(command)
}

/// The supervisor's command line: `[--then-run ARG]... [--then-remove DIR]... -- COMMAND [ARG]...`.
#[derive(Debug, PartialEq)]
struct SuperviseArgs {
    cleanup_run: Vec<OsString>,
    cleanup_remove: Vec<PathBuf>,
    command: Vec<OsString>,
}

fn parse_args(args: Vec<OsString>) -> Result<SuperviseArgs, String> {
    let mut parsed = SuperviseArgs {
        cleanup_run: Vec::new(),
        cleanup_remove: Vec::new(),
        command: Vec::new(),
    };
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        match arg.to_str() {
            Some("--then-run") => parsed
                .cleanup_run
                .push(args.next().ok_or("--then-run needs a value")?),
            Some("--then-remove") => parsed.cleanup_remove.push(PathBuf::from(
                args.next().ok_or("--then-remove needs a value")?,
            )),
            Some("--") => {
                parsed.command = args.collect();
                break;
            }
            _ => return Err(format!("unexpected argument {arg:?}")),
        }
    }
    if parsed.command.is_empty() {
        return Err("no command after --".into());
    }
    Ok(parsed)
}

/// Writes one line to stderr, ignoring failure: after the lifeline was cut the reader of
/// our stderr may be gone, and a failed diagnostic must not stop the cleanup.
fn say(message: &str) {
    let _ = writeln!(std::io::stderr(), "fake-dra-sim supervisor: {message}");
}

/// The supervisor: the process `fake-dra-sim __supervise …` runs (arguments after the
/// subcommand). Exits as the command did (128 + signal when it was killed), or 137 after
/// a cut lifeline.
pub fn supervise_main(args: Vec<OsString>) -> ExitCode {
    let args = match parse_args(args) {
        Ok(args) => args,
        Err(e) => {
            say(&format!(
                "usage: {SUBCOMMAND} [--then-run ARG]... [--then-remove DIR]... -- COMMAND [ARG]...: {e}"
            ));
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            say(&format!("starting the runtime: {e}"));
            return ExitCode::from(125);
        }
    };
    ExitCode::from(runtime.block_on(supervise(args)))
}

async fn supervise(args: SuperviseArgs) -> u8 {
    use tokio::signal::unix::{SignalKind, signal};
    // Handlers first: a SIGTERM between spawning and installing them would kill the
    // supervisor and leave the command without one.
    let (mut term, mut int) = match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(term), Ok(int)) => (term, int),
        (Err(e), _) | (_, Err(e)) => {
            say(&format!("installing signal handlers: {e}"));
            return 125;
        }
    };
    let (program, rest) = match args.command.split_first() {
        Some(split) => split,
        None => return 2,
    };
    let mut child = match Command::new(program)
        .args(rest)
        .stdin(Stdio::null())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => {
            say(&format!("starting {program:?}: {e}"));
            // What a shell answers for a command it cannot find or cannot run.
            return if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
        }
    };
    let pid = child.id();
    let (cut_tx, mut cut) = tokio::sync::oneshot::channel::<()>();
    // A plain thread: a blocking read of stdin that ends with EOF when the last write end
    // closed, i.e. when the process holding the lifeline died.
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = [0u8; 64];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        let _ = cut_tx.send(());
    });
    loop {
        tokio::select! {
            status = child.wait() => {
                return match status {
                    Ok(status) => match (status.code(), status.signal()) {
                        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(1),
                        (None, Some(signal)) => u8::try_from((128 + signal) & 0xff).unwrap_or(1),
                        (None, None) => 1,
                    },
                    Err(e) => {
                        say(&format!("waiting for {program:?}: {e}"));
                        1
                    }
                };
            }
            _ = &mut cut => {
                kill_other_group_members();
                cleanup(&args);
                return 137;
            }
            _ = term.recv() => forward(pid, "TERM"),
            _ = int.recv() => forward(pid, "INT"),
        }
    }
}

fn forward(pid: Option<u32>, signal: &str) {
    if let Some(pid) = pid
        && let Err(e) = send_signal(signal, &[pid])
    {
        say(&format!("forwarding SIG{signal}: {e}"));
    }
}

/// SIGKILL to every process of the supervisor's group but itself, until none is left.
/// The group as a whole cannot be signalled: that would kill the supervisor before its
/// cleanup.
fn kill_other_group_members() {
    let me = std::process::id();
    let Some(group) = stat_of(me).map(|s| s.pgrp) else {
        say("reading our own process group; killing nothing");
        return;
    };
    for _ in 0..KILL_ROUNDS {
        let processes: Vec<(u32, ProcStat)> = live_processes().collect();
        let members: Vec<u32> = if group == me {
            processes
                .iter()
                .filter(|(pid, stat)| *pid != me && stat.pgrp == group)
                .map(|(pid, _)| *pid)
                .collect()
        } else {
            // Not a group leader (the caller did not ask for a new group): the group is
            // someone else's, so only our descendants are ours to kill.
            descendants(me, &processes)
        };
        if members.is_empty() {
            return;
        }
        if let Err(e) = send_signal("KILL", &members) {
            say(&e.to_string());
            return;
        }
    }
    say("processes of the group kept appearing; giving up");
}

/// The processes whose parent chain leads to `root`.
fn descendants(root: u32, processes: &[(u32, ProcStat)]) -> Vec<u32> {
    let mut found = vec![root];
    let mut grew = true;
    while grew {
        grew = false;
        for (pid, stat) in processes {
            if found.contains(&stat.ppid) && !found.contains(pid) {
                found.push(*pid);
                grew = true;
            }
        }
    }
    found.retain(|pid| *pid != root);
    found
}

fn cleanup(args: &SuperviseArgs) {
    if let Some((program, rest)) = args.cleanup_run.split_first() {
        let outcome = std::process::Command::new(program)
            .args(rest)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if let Err(e) = outcome {
            say(&format!("running {program:?}: {e}"));
        }
    }
    for dir in &args.cleanup_remove {
        match std::fs::remove_dir_all(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => say(&format!("removing {}: {e}", dir.display())),
        }
    }
}

/// What `/proc/<pid>/stat` says of a process, the fields used here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    pub state: char,
    pub ppid: u32,
    pub pgrp: u32,
    /// Clock ticks after boot the process started: with the pid it names one process even
    /// after the pid was reused.
    pub start_time: u64,
}

/// Parses `/proc/<pid>/stat` (`pid (comm) state ppid pgrp … starttime …`; comm may hold
/// spaces and parentheses, so the fields are counted after the last `)`).
pub fn parse_stat(text: &str) -> Option<ProcStat> {
    let (_, rest) = text.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(ProcStat {
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        pgrp: fields.get(2)?.parse().ok()?,
        // Field 22 of stat(5), the 20th after the comm.
        start_time: fields.get(19)?.parse().ok()?,
    })
}

/// The stat of a process, `None` when there is none with that pid.
pub fn stat_of(pid: u32) -> Option<ProcStat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Every process that is alive: zombies are dead already, only not yet reaped.
pub fn live_processes() -> impl Iterator<Item = (u32, ProcStat)> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, stat_of(pid)?)))
        .filter(|(_, stat)| stat.state != 'Z' && stat.state != 'X')
}

/// Whether the process `pid` that started at `start_time` still runs.
pub fn is_alive(pid: u32, start_time: u64) -> bool {
    stat_of(pid).is_some_and(|s| s.start_time == start_time && s.state != 'Z' && s.state != 'X')
}

/// Sends a signal to processes through kill(1) (no `libc::kill` without `unsafe`). A
/// process that is gone already is no error; failing to run kill(1) is.
pub fn send_signal(signal: &str, pids: &[u32]) -> std::io::Result<()> {
    run_kill(signal, &pids.iter().map(u32::to_string).collect::<Vec<_>>())
}

/// kill(1) gets a process group of its own so that it is never among the processes a
/// group kill hits.
fn run_kill(signal: &str, targets: &[String]) -> std::io::Result<()> {
    let (program, mut args) = kill_argv(signal);
    args.extend(targets.iter().cloned());
    std::process::Command::new(&program)
        .args(&args)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(drop)
        .map_err(|e| std::io::Error::new(e.kind(), format!("running {}: {e}", program.display())))
}

/// Sends a signal to a process group through kill(1). A group that is gone already is no
/// error; failing to run kill(1) is.
pub fn signal_group(signal: &str, pgid: u32) -> std::io::Result<()> {
    run_kill(signal, &[format!("-{pgid}")])
}

/// procps' kill wherever it is (a test's PATH may lack it), else busybox's. The target
/// list comes after this.
pub(crate) fn kill_argv(signal: &str) -> (PathBuf, Vec<String>) {
    let procps = ["/usr/bin/kill", "/bin/kill"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| is_executable(p))
        .or_else(|| find_in_path("kill"));
    match procps {
        Some(kill) => (kill, vec![format!("-{signal}"), "--".into()]),
        // busybox's kill takes no `--`.
        None => (
            PathBuf::from(super::runtime::BUSYBOX),
            vec!["kill".into(), format!("-{signal}")],
        ),
    }
}

pub(crate) fn find_in_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
}

pub(crate) fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_command_line() {
        let os = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        let parsed = parse_args(os(&[
            "--then-run",
            "podman",
            "--then-run",
            "rm",
            "--then-remove",
            "/tmp/x",
            "--",
            "sh",
            "-c",
            "--then-run",
        ]))
        .unwrap();
        assert_eq!(parsed.cleanup_run, os(&["podman", "rm"]));
        assert_eq!(parsed.cleanup_remove, vec![PathBuf::from("/tmp/x")]);
        assert_eq!(parsed.command, os(&["sh", "-c", "--then-run"]));
        assert!(parse_args(os(&["--"])).is_err());
        assert!(parse_args(os(&["sh"])).is_err());
        assert!(parse_args(os(&["--then-run"])).is_err());
    }

    #[test]
    fn parses_stat_with_odd_comm() {
        let stat =
            parse_stat("42 (a) b (c) S 1 42 42 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 777 1000 10")
                .unwrap();
        assert_eq!(
            stat,
            ProcStat {
                state: 'S',
                ppid: 1,
                pgrp: 42,
                start_time: 777
            }
        );
        let me = stat_of(std::process::id()).unwrap();
        assert!(is_alive(std::process::id(), me.start_time));
        assert!(!is_alive(std::process::id(), me.start_time + 1));
    }
}
