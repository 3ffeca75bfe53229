//! `kill -9` of `fake-dra-sim` leaves nothing behind: every process it started (the
//! driver processes, the containers, `podman run` and its container) ends with it through
//! the lifeline its supervisors hold, and the work directory it could not remove is
//! removed by the next start.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use fake_dra_emulator::cluster::lifeline::{is_alive, live_processes, stat_of};

const SIM: &str = env!("CARGO_BIN_EXE_fake-dra-sim");
/// A safety net for waits only: nothing asserts how long anything takes.
const SAFETY: Duration = Duration::from_secs(180);

/// A process as `/proc` shows it: pid plus start time name one process for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Proc {
    pid: u32,
    start_time: u64,
}

/// What `/proc` says of a process, in one line for a failure message.
fn describe(pid: u32) -> String {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default();
    format!("{pid}: {cmdline}")
}

/// Every live process that mentions `marker` in its command line, environment or working
/// directory.
fn mentioning(marker: &str) -> BTreeSet<Proc> {
    let me = std::process::id();
    live_processes()
        .filter(|(pid, _)| *pid != me)
        .filter(|(pid, _)| {
            let read = |file: &str| {
                std::fs::read(format!("/proc/{pid}/{file}"))
                    .map(|b| String::from_utf8_lossy(&b).into_owned())
                    .unwrap_or_default()
            };
            let cwd = std::fs::read_link(format!("/proc/{pid}/cwd"))
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            read("cmdline").contains(marker)
                || read("environ").contains(marker)
                || cwd.contains(marker)
        })
        .map(|(pid, stat)| Proc {
            pid,
            start_time: stat.start_time,
        })
        .collect()
}

/// `root` and every live process whose parent chain leads to it.
fn descendants(root: u32) -> BTreeSet<Proc> {
    let all: Vec<(u32, u32, u64)> = live_processes()
        .map(|(pid, stat)| (pid, stat.ppid, stat.start_time))
        .collect();
    let mut found: BTreeSet<u32> = BTreeSet::from([root]);
    loop {
        let before = found.len();
        for (pid, ppid, _) in &all {
            if found.contains(ppid) {
                found.insert(*pid);
            }
        }
        if found.len() == before {
            break;
        }
    }
    all.iter()
        .filter(|(pid, _, _)| found.contains(pid) && *pid != root)
        .map(|(pid, _, start_time)| Proc {
            pid: *pid,
            start_time: *start_time,
        })
        .collect()
}

fn still_alive(procs: &BTreeSet<Proc>) -> Vec<String> {
    procs
        .iter()
        .filter(|p| is_alive(p.pid, p.start_time))
        .map(|p| describe(p.pid))
        .collect()
}

/// Waits until `done` holds, up to [`SAFETY`]; returns whether it did.
fn wait_until(mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + SAFETY;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    done()
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// `fake-dra-sim` with its temporary directory in `tmp`, output collected by threads.
struct SimRun {
    child: Child,
    stdout: mpsc::Receiver<String>,
    stderr: mpsc::Receiver<String>,
}

impl SimRun {
    fn start(tmp: &Path, runtime: &str, args: &[&str]) -> Self {
        let mut child = Command::new(SIM)
            .arg("--runtime")
            .arg(runtime)
            .args(args)
            .env("TMPDIR", tmp)
            .env("RUST_LOG", "warn,fake_dra_emulator::sim=info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let forward = |stream: Box<dyn std::io::Read + Send>| {
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    let _ = tx.send(line);
                }
            });
            rx
        };
        let stdout = forward(Box::new(child.stdout.take().unwrap()));
        let stderr = forward(Box::new(child.stderr.take().unwrap()));
        Self {
            child,
            stdout,
            stderr,
        }
    }

    /// Reads stdout until a line satisfies `pred`.
    fn wait_for_line(&self, pred: impl Fn(&str) -> bool) -> Vec<String> {
        let deadline = Instant::now() + SAFETY;
        let mut seen = Vec::new();
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.stdout.recv_timeout(left) {
                Ok(line) => {
                    let done = pred(&line);
                    seen.push(line);
                    if done {
                        return seen;
                    }
                }
                Err(_) => break,
            }
        }
        let stderr: Vec<String> = self.stderr.try_iter().collect();
        panic!("no such line on stdout: {seen:#?}\nstderr: {stderr:#?}");
    }

    fn stderr_lines(&self) -> Vec<String> {
        self.stderr.try_iter().collect()
    }
}

/// The demo's pod printed its env and sleeps: everything of the run is up.
fn demo_running(tmp: &Path, runtime: &str) -> SimRun {
    let run = SimRun::start(tmp, runtime, &["demo", "--keep-running"]);
    run.wait_for_line(|l| l.starts_with("test5 pod0 ctr0 export FAKE_NODE_NAME="));
    run
}

fn the_work_dir(tmp: &Path) -> PathBuf {
    let dirs: Vec<PathBuf> = std::fs::read_dir(tmp)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("fake-dra-sim-"))
        })
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs[0].clone()
}

/// kill -9 of a running sim, then: no process of the run is left, only its work dir is
/// (processes of the run: the sim's descendants before the kill, and whatever mentions the
/// run's private temp dir); the next start removes that dir and says so.
fn kill_9_leaves_nothing(runtime: &str) -> Vec<String> {
    let tmp = tempfile::tempdir().unwrap();
    let marker = tmp.path().display().to_string();
    let mut run = demo_running(tmp.path(), runtime);
    let sim_pid = run.child.id();
    let work_dir = the_work_dir(tmp.path());
    let mut of_the_run = descendants(sim_pid);
    of_the_run.extend(mentioning(&marker));
    of_the_run.retain(|p| p.pid != sim_pid);
    let described: Vec<String> = of_the_run.iter().map(|p| describe(p.pid)).collect();
    // Two plugins, the controller, the container's shell and its sleep, each under a supervisor.
    assert!(of_the_run.len() >= 5, "{described:#?}");
    assert!(
        described.iter().any(|d| d.contains("__supervise")),
        "no supervisor among {described:#?}"
    );
    assert!(
        described
            .iter()
            .any(|d| d.contains("fake-dra-kubelet-plugin")),
        "{described:#?}"
    );

    let killed = Command::new("kill")
        .args(["-KILL", &sim_pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    run.child.wait().unwrap();
    assert!(stat_of(sim_pid).is_none_or(|s| s.state == 'Z'));

    let all_gone =
        wait_until(|| still_alive(&of_the_run).is_empty() && mentioning(&marker).is_empty());
    assert!(
        all_gone,
        "left running after kill -9 of the sim: {:#?} and mentioning {marker}: {:#?}",
        still_alive(&of_the_run),
        mentioning(&marker)
            .iter()
            .map(|p| describe(p.pid))
            .collect::<Vec<_>>()
    );
    // The supervisors removed the containers' scratch dirs; the work dir is the sim's own.
    let work_dir_name = work_dir.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        wait_until(|| entries(tmp.path()) == vec![work_dir_name.clone()]),
        "{:?}",
        entries(tmp.path())
    );
    assert!(work_dir.join(fake_dra_emulator::sim::OWNER_FILE).is_file());

    // The next start removes the dead run's work dir and says so.
    let mut next = SimRun::start(tmp.path(), runtime, &["demo"]);
    let status = next.child.wait().unwrap();
    let stderr = next.stderr_lines();
    assert!(status.success(), "{stderr:#?}");
    assert!(!work_dir.exists(), "{} still there", work_dir.display());
    assert!(
        stderr.iter().any(|l| l
            .contains("removed the work directory of a fake-dra-sim that is no longer running")
            && l.contains(&work_dir_name)),
        "{stderr:#?}"
    );
    assert_eq!(entries(tmp.path()), Vec::<String>::new());
    // The demo takes its cluster down as it ends, so it names --keep-running instead of
    // printing an `export KUBECONFIG` that would leave kubectl at `connection refused`.
    assert!(
        !stderr.iter().any(|l| l.contains("export KUBECONFIG=")),
        "{stderr:#?}"
    );
    assert!(
        stderr
            .iter()
            .any(|l| l.contains("add --keep-running to use kubectl against it")),
        "{stderr:#?}"
    );
    eprintln!(
        "{runtime}: {} processes of the run, all gone after kill -9 of the sim",
        described.len()
    );
    described
}

#[test]
fn kill_9_of_the_sim_leaves_nothing_process_runner() {
    kill_9_leaves_nothing("process");
}

#[test]
fn kill_9_of_the_sim_leaves_nothing_podman() {
    if let Some(why) = podman_unusable() {
        if std::env::var("FAKE_DRA_REQUIRE_PODMAN").is_ok_and(|v| v == "1") {
            panic!("FAKE_DRA_REQUIRE_PODMAN=1 but {why}");
        }
        eprintln!("!!!!!!!! SKIPPED: podman not usable: {why} !!!!!!!!");
        return;
    }
    let before = podman_names();
    let described = kill_9_leaves_nothing("podman");
    assert!(
        described
            .iter()
            .any(|d| d.contains("podman") && d.contains(" run ")),
        "no podman run among {described:#?}"
    );
    let after = podman_names();
    let leaked: Vec<&String> = after
        .iter()
        .filter(|n| n.starts_with("fake-dra-") && !before.contains(*n))
        .collect();
    assert!(leaked.is_empty(), "podman containers left: {leaked:?}");
}

fn podman_unusable() -> Option<String> {
    let work = tempfile::tempdir().unwrap();
    fake_dra_emulator::cluster::ContainerRuntime::podman(work.path())
        .err()
        .map(|e| e.to_string())
}

fn podman_names() -> BTreeSet<String> {
    let out = Command::new("podman")
        .args(["ps", "-a", "--format", "{{.Names}}"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// The supervisor on its own: the command's output passes through, its exit code comes
/// back, and closing the lifeline kills the command with what it started and runs the
/// cleanup.
#[test]
fn supervisor_kills_the_group_when_the_lifeline_is_cut() {
    let scratch = tempfile::tempdir().unwrap();
    let removed = scratch.path().join("removed");
    std::fs::create_dir(&removed).unwrap();
    let touched = scratch.path().join("touched");
    let mut child = Command::new(SIM)
        .arg("__supervise")
        .args(["--then-run", "touch", "--then-run"])
        .arg(&touched)
        .arg("--then-remove")
        .arg(&removed)
        .args(["--", "sh", "-c", "sleep 100000 & echo $!; wait"])
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let sleeper: u32 = line.trim().parse().unwrap();
    let sleeper = Proc {
        pid: sleeper,
        start_time: stat_of(sleeper).unwrap().start_time,
    };
    let group = descendants(child.id());
    assert!(group.len() >= 2, "{group:?}");
    // Nothing written, then the only write end closed: what the sim's death does.
    child.stdin.as_mut().unwrap().flush().unwrap();
    drop(child.stdin.take());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(137));
    assert!(
        wait_until(|| still_alive(&group).is_empty()),
        "{:?}",
        still_alive(&group)
    );
    assert!(!is_alive(sleeper.pid, sleeper.start_time));
    assert!(touched.exists(), "the cleanup command did not run");
    assert!(!removed.exists(), "the cleanup dir is still there");
}

/// While the lifeline holds, the supervisor is transparent: exit codes pass through and
/// SIGTERM reaches the command.
#[test]
fn supervisor_passes_exit_codes_and_sigterm() {
    let mut child = Command::new(SIM)
        .args(["__supervise", "--", "sh", "-c", "exit 7"])
        .process_group(0)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    // Child::wait closes stdin first: the lifeline is kept open here instead.
    let lifeline = child.stdin.take();
    assert_eq!(child.wait().unwrap().code(), Some(7));
    drop(lifeline);

    let mut child = Command::new(SIM)
        .args([
            "__supervise",
            "--",
            "sh",
            "-c",
            "trap 'echo got TERM; exit 0' TERM; echo ready; while :; do sleep 1; done",
        ])
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let lifeline = child.stdin.take();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    line.clear();
    stdout.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "got TERM");
    assert_eq!(child.wait().unwrap().code(), Some(0));
    drop(lifeline);
}

/// D11: Ctrl-C while `run -f` applied thousands of objects did nothing (the signal's
/// handler was installed while starting, and nothing watched it during the apply): the run
/// went on. Sent as soon as the cluster is up, SIGINT now ends the run, whether it lands
/// during the apply or after it, with the work directory gone.
#[test]
fn sigint_while_run_applies_ends_the_run() {
    let tmp = tempfile::tempdir().unwrap();
    let manifest = tmp.path().join("many.yaml");
    let mut text = String::new();
    for i in 0..3000 {
        text.push_str(&format!(
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: cm{i}}}\ndata: {{k: v}}\n"
        ));
    }
    std::fs::write(&manifest, text).unwrap();
    let runs = tmp.path().join("runs");
    std::fs::create_dir(&runs).unwrap();
    let mut run = SimRun::start(&runs, "process", &["run", "-f", manifest.to_str().unwrap()]);
    let deadline = Instant::now() + SAFETY;
    let mut seen = Vec::new();
    loop {
        let left = deadline
            .checked_duration_since(Instant::now())
            .unwrap_or_default();
        match run.stderr.recv_timeout(left) {
            Ok(line) => {
                let up = line.starts_with("fake-dra-sim: cluster up");
                seen.push(line);
                if up {
                    break;
                }
            }
            Err(_) => panic!("the cluster did not come up: {seen:#?}"),
        }
    }
    let sent = Command::new("kill")
        .args(["-INT", &run.child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let ended = wait_until(|| run.child.try_wait().unwrap().is_some());
    if !ended {
        let _ = run.child.kill();
    }
    let status = run.child.wait().unwrap();
    seen.extend(run.stderr_lines());
    assert!(ended, "still running after SIGINT: {seen:#?}");
    assert!(status.success(), "{status}: {seen:#?}");
    assert!(
        seen.iter().any(|l| l.contains("shutting down")),
        "{seen:#?}"
    );
    assert!(
        wait_until(|| entries(&runs).is_empty()),
        "{:?}",
        entries(&runs)
    );
}
