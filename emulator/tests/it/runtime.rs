//! The emulated nodes' container runtimes: podman and the process runner must apply a
//! node's CDI env edits the same way, stop containers without leftovers, and refuse what
//! they can't do. The podman tests skip loudly when podman is unusable, unless
//! FAKE_DRA_REQUIRE_PODMAN=1 (CI) makes that a failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use fake_dra_emulator::cluster::runtime::{ContainerRuntime, ContainerSpec, LogSink, RuntimeError};
use tempfile::TempDir;

const KIND: &str = "k8s.fake.resource.3-shake.com/fake";
const DEVICE: &str = "0b5c1e9a-7d3f-4c2b-9e8a-1f2d3c4b5a69";
/// A safety net only: nothing asserts how long anything takes.
const SAFETY: Duration = Duration::from_secs(60);

/// A node's CDI directory with the kubelet plugin's two kinds of device: the node-wide
/// `common` one and a per-claim one named like a uuid (hence cdiVersion 0.5.0).
fn cdi_dir(node: &str, claim_extra_edits: &str) -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    let spec = format!(
        r#"{{"cdiVersion":"0.5.0","kind":"{KIND}","devices":[
            {{"name":"common","containerEdits":{{"env":["FAKE_NODE_NAME={node}"]}}}},
            {{"name":"{DEVICE}","containerEdits":{{"env":["FAKE_DEVICE_0=FAKE-xyz"]{claim_extra_edits}}}}}]}}"#
    );
    std::fs::write(
        dir.path().join("k8s.fake.resource.3-shake.com-fake.json"),
        spec,
    )
    .unwrap();
    dir
}

fn devices() -> Vec<String> {
    vec![format!("{KIND}=common"), format!("{KIND}={DEVICE}")]
}

fn spec(id: &str, command: &[&str], cdi_devices: Vec<String>, cdi_root: &Path) -> ContainerSpec {
    ContainerSpec {
        namespace: "default".into(),
        pod: format!("pod-{id}"),
        container: "ctr".into(),
        id: format!("{id}-{}", uuid::Uuid::new_v4()),
        command: command.iter().map(|s| s.to_string()).collect(),
        env: vec![("GREETING".into(), "hello world".into())],
        cdi_devices,
        cdi_root: cdi_root.to_path_buf(),
        log_path: None,
    }
}

/// The podman runner, or None after a loud skip notice; a failure when podman is required.
fn podman_or_skip(work_dir: &Path) -> Option<ContainerRuntime> {
    match ContainerRuntime::podman(work_dir) {
        Ok(runtime) => Some(runtime),
        Err(e) if std::env::var("FAKE_DRA_REQUIRE_PODMAN").is_ok_and(|v| v == "1") => {
            panic!("FAKE_DRA_REQUIRE_PODMAN=1 but {e}")
        }
        Err(e) => {
            eprintln!("!!!!!!!! SKIPPED: podman not usable: {e} !!!!!!!!");
            None
        }
    }
}

/// Runs `export; echo done` and returns its output after it exited 0.
async fn export_lines(runtime: &ContainerRuntime, id: &str, cdi_root: &Path) -> Vec<String> {
    let logs = LogSink::default();
    let spec = spec(id, &["sh", "-c", "export; echo done"], devices(), cdi_root);
    let (ns, pod, ctr) = (
        spec.namespace.clone(),
        spec.pod.clone(),
        spec.container.clone(),
    );
    let mut running = runtime.start(spec, logs.clone()).await.unwrap();
    let lines = logs
        .wait_for(&ns, &pod, &ctr, SAFETY, |l| l == "done")
        .await
        .unwrap_or_else(|lines| panic!("{} never printed done: {lines:#?}", runtime.name()));
    let code = tokio::time::timeout(SAFETY, running.wait()).await.unwrap();
    assert_eq!(code, 0, "{}: {lines:#?}", runtime.name());
    lines
}

fn assert_has(lines: &[String], want: &str) {
    assert!(
        lines.iter().any(|l| l.trim() == want),
        "no line {want:?} in {lines:#?}"
    );
}

fn assert_node_env(lines: &[String], node: &str) {
    assert_has(lines, &format!("export FAKE_NODE_NAME='{node}'"));
    assert_has(lines, "export FAKE_DEVICE_0='FAKE-xyz'");
    assert_has(lines, "export GREETING='hello world'");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_runner_applies_cdi_env() {
    let cdi = cdi_dir("node-a", "");
    let lines = export_lines(&ContainerRuntime::Process, "env", cdi.path()).await;
    assert_node_env(&lines, "node-a");
    assert_has(&lines, "export HOME='/'");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn podman_applies_cdi_env() {
    let work = tempfile::tempdir().unwrap();
    let Some(podman) = podman_or_skip(work.path()) else {
        return;
    };
    let cdi = cdi_dir("node-a", "");
    let lines = export_lines(&podman, "env", cdi.path()).await;
    assert_node_env(&lines, "node-a");
    assert_has(&lines, "export HOME='/'");
    // It really ran in the container's root, not in the process runner's scratch dir.
    assert_has(&lines, "export PWD='/'");
    // Both runners give the same environment, but for what the shell itself sets.
    let process = export_lines(&ContainerRuntime::Process, "env", cdi.path()).await;
    let comparable = |lines: &[String]| -> Vec<String> {
        let shell_set = ["export PWD=", "export SHLVL=", "export OLDPWD="];
        lines
            .iter()
            .filter(|l| !shell_set.iter().any(|p| l.starts_with(p)))
            .cloned()
            .collect()
    };
    assert_eq!(comparable(&lines), comparable(&process));
}

/// The container env a pod sets and the CDI env win over each other the same way in both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cdi_env_overrides_pod_env_in_both_runners() {
    let work = tempfile::tempdir().unwrap();
    let cdi = cdi_dir("node-a", "");
    let mut runtimes = vec![ContainerRuntime::Process];
    runtimes.extend(podman_or_skip(work.path()));
    for runtime in runtimes {
        let logs = LogSink::default();
        let mut spec = spec(
            "override",
            &["sh", "-c", "echo \"node=$FAKE_NODE_NAME\""],
            devices(),
            cdi.path(),
        );
        spec.env.push(("FAKE_NODE_NAME".into(), "from-pod".into()));
        let (ns, pod, ctr) = (
            spec.namespace.clone(),
            spec.pod.clone(),
            spec.container.clone(),
        );
        let mut running = runtime.start(spec, logs.clone()).await.unwrap();
        assert_eq!(
            tokio::time::timeout(SAFETY, running.wait()).await.unwrap(),
            0
        );
        assert_eq!(
            logs.lines(&ns, &pod, &ctr),
            vec!["node=node-a"],
            "{}",
            runtime.name()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_are_reported() {
    let work = tempfile::tempdir().unwrap();
    let cdi = cdi_dir("node-a", "");
    let mut runtimes = vec![ContainerRuntime::Process];
    runtimes.extend(podman_or_skip(work.path()));
    for runtime in runtimes {
        let mut running = runtime
            .start(
                spec(
                    "exit",
                    &["sh", "-c", "echo bye >&2; exit 3"],
                    Vec::new(),
                    cdi.path(),
                ),
                LogSink::default(),
            )
            .await
            .unwrap();
        assert_eq!(
            tokio::time::timeout(SAFETY, running.wait()).await.unwrap(),
            3,
            "{}",
            runtime.name()
        );
        assert_eq!(running.try_exit_code(), Some(3));
        running.stop().await;
    }
}

/// Processes in `pgid`'s group that are still alive (zombies are dead, only not yet reaped by init).
fn live_group_members(pgid: u32) -> Vec<u32> {
    let mut members = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid pgrp ...; comm may contain spaces and parens.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.len() > 2 && fields[0] != "Z" && fields[2] == pgid.to_string() {
            members.push(pid);
        }
    }
    members
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_stop_kills_the_whole_group() {
    let cdi = cdi_dir("node-a", "");
    let logs = LogSink::default();
    let spec = spec(
        "sleeper",
        &["sh", "-c", "sleep infinity & echo started; sleep infinity"],
        Vec::new(),
        cdi.path(),
    );
    let (ns, pod, ctr) = (
        spec.namespace.clone(),
        spec.pod.clone(),
        spec.container.clone(),
    );
    let mut running = ContainerRuntime::Process
        .start(spec, logs.clone())
        .await
        .unwrap();
    logs.wait_for(&ns, &pod, &ctr, SAFETY, |l| l == "started")
        .await
        .unwrap();
    let pid = running.pid().unwrap();
    assert!(
        live_group_members(pid).len() >= 2,
        "{:?}",
        live_group_members(pid)
    );
    assert_eq!(running.try_exit_code(), None);
    tokio::time::timeout(SAFETY, running.stop()).await.unwrap();
    assert!(
        !PathBuf::from(format!("/proc/{pid}")).exists(),
        "pid {pid} still there"
    );
    assert_eq!(live_group_members(pid), Vec::<u32>::new());
}

/// When the main process exits, what it left running in the container goes too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_exit_kills_leftovers() {
    let cdi = cdi_dir("node-a", "");
    let mut running = ContainerRuntime::Process
        .start(
            spec(
                "orphan",
                &["sh", "-c", "sleep infinity & exit 0"],
                Vec::new(),
                cdi.path(),
            ),
            LogSink::default(),
        )
        .await
        .unwrap();
    let pid = running.pid().unwrap();
    assert_eq!(
        tokio::time::timeout(SAFETY, running.wait()).await.unwrap(),
        0
    );
    assert_eq!(live_group_members(pid), Vec::<u32>::new());
}

fn podman_names() -> Vec<String> {
    let out = Command::new("podman")
        .args(["ps", "-a", "--format", "{{.Names}}"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn podman_stop_leaves_nothing() {
    let work = tempfile::tempdir().unwrap();
    let Some(podman) = podman_or_skip(work.path()) else {
        return;
    };
    let cdi = cdi_dir("node-a", "");
    let logs = LogSink::default();
    let spec = spec(
        "sleeper",
        &["sh", "-c", "echo started; exec sleep infinity"],
        devices(),
        cdi.path(),
    );
    let (ns, pod, ctr) = (
        spec.namespace.clone(),
        spec.pod.clone(),
        spec.container.clone(),
    );
    let mut running = podman.start(spec, logs.clone()).await.unwrap();
    logs.wait_for(&ns, &pod, &ctr, SAFETY, |l| l == "started")
        .await
        .unwrap_or_else(|lines| panic!("{lines:#?}"));
    let name = running.podman_name().unwrap().to_string();
    assert!(podman_names().contains(&name), "{name} not in podman ps -a");
    assert_eq!(running.try_exit_code(), None);
    tokio::time::timeout(SAFETY, running.stop()).await.unwrap();
    assert!(!podman_names().contains(&name), "{name} left behind");
}

/// A pod deleted right after it started: stop races podman creating the container.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn podman_stop_right_after_start_leaves_nothing() {
    let work = tempfile::tempdir().unwrap();
    let Some(podman) = podman_or_skip(work.path()) else {
        return;
    };
    let cdi = cdi_dir("node-a", "");
    let running = podman
        .start(
            spec("quick", &["sleep", "infinity"], devices(), cdi.path()),
            LogSink::default(),
        )
        .await
        .unwrap();
    let name = running.podman_name().unwrap().to_string();
    tokio::time::timeout(SAFETY, running.stop()).await.unwrap();
    assert!(!podman_names().contains(&name), "{name} left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_unknown_device_is_an_error() {
    let cdi = cdi_dir("node-a", "");
    let id = format!("{KIND}=abc");
    let err = ContainerRuntime::Process
        .start(
            spec("unknown", &["true"], vec![id.clone()], cdi.path()),
            LogSink::default(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, RuntimeError::CdiDeviceNotFound { .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains(&format!(
            "CDI device {id} not found in {}",
            cdi.path().display()
        )),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn podman_unknown_device_exits_non_zero() {
    let work = tempfile::tempdir().unwrap();
    let Some(podman) = podman_or_skip(work.path()) else {
        return;
    };
    let cdi = cdi_dir("node-a", "");
    let logs = LogSink::default();
    let spec = spec(
        "unknown",
        &["true"],
        vec![format!("{KIND}=abc")],
        cdi.path(),
    );
    let (ns, pod, ctr) = (
        spec.namespace.clone(),
        spec.pod.clone(),
        spec.container.clone(),
    );
    let mut running = podman.start(spec, logs.clone()).await.unwrap();
    let code = tokio::time::timeout(SAFETY, running.wait()).await.unwrap();
    let lines = logs.lines(&ns, &pod, &ctr);
    assert_ne!(code, 0, "{lines:#?}");
    assert!(
        lines.iter().any(|l| l.contains("abc")),
        "podman's error should name the device: {lines:#?}"
    );
    let name = running.podman_name().unwrap().to_string();
    running.stop().await;
    assert!(!podman_names().contains(&name), "{name} left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_command_is_an_error() {
    let cdi = cdi_dir("node-a", "");
    // The podman runner checks before touching podman, so no podman is needed here.
    for runtime in [
        ContainerRuntime::Process,
        ContainerRuntime::Podman {
            rootfs: PathBuf::from("/nonexistent"),
        },
    ] {
        let err = runtime
            .start(
                spec("empty", &[], devices(), cdi.path()),
                LogSink::default(),
            )
            .await
            .unwrap_err();
        assert!(
            matches!(err, RuntimeError::EmptyCommand { .. }),
            "{}: {err}",
            runtime.name()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_runner_refuses_device_nodes_it_cannot_place() {
    // A node already at its path on the host is what the host process sees.
    let cdi = cdi_dir("node-a", r#","deviceNodes":[{"path":"/dev/null"}]"#);
    let started = ContainerRuntime::Process
        .start(
            spec("nodes", &["true"], devices(), cdi.path()),
            LogSink::default(),
        )
        .await;
    assert!(started.is_ok(), "{:?}", started.err());
    // One made from another host path cannot appear at its container path.
    let cdi = cdi_dir(
        "node-a",
        r#","deviceNodes":[{"path":"/dev/fpga0","hostPath":"/dev/null"}]"#,
    );
    let err = ContainerRuntime::Process
        .start(
            spec("nodes", &["true"], devices(), cdi.path()),
            LogSink::default(),
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string().starts_with(&format!(
            "process runtime: device {KIND}={DEVICE}: deviceNodes[0] would appear at /dev/fpga0, made from the host's /dev/null"
        )),
        "{err}"
    );
}

/// Each emulated node's podman sees its own CDI directory, even at the same time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn podman_nodes_see_their_own_cdi_dirs_concurrently() {
    let work = tempfile::tempdir().unwrap();
    let Some(podman) = podman_or_skip(work.path()) else {
        return;
    };
    let (cdi_a, cdi_b) = (cdi_dir("node-a", ""), cdi_dir("node-b", ""));
    let (a, b) = tokio::join!(
        export_lines(&podman, "node-a", cdi_a.path()),
        export_lines(&podman, "node-b", cdi_b.path())
    );
    assert_node_env(&a, "node-a");
    assert_node_env(&b, "node-b");
}

#[test]
fn detect_picks_a_runtime() {
    let work = tempfile::tempdir().unwrap();
    match ContainerRuntime::detect(work.path()) {
        Ok(runtime) => {
            let podman = ContainerRuntime::podman(work.path());
            assert_eq!(
                runtime.name(),
                if podman.is_ok() { "podman" } else { "process" }
            );
            if let ContainerRuntime::Podman { rootfs } = runtime {
                assert!(rootfs.join("bin/busybox").is_file());
                assert!(rootfs.join("bin/sh").exists());
            }
        }
        Err(e) => {
            assert!(
                std::env::var("FAKE_DRA_REQUIRE_PODMAN").is_ok_and(|v| v == "1"),
                "{e}"
            );
            assert!(matches!(e, RuntimeError::PodmanUnusable { .. }), "{e}");
        }
    }
}

/// Whoever sees the exit through `try_exit_code` (the kubelet) also sees all the output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_exit_code_reports_after_the_output_is_in() {
    let work = tempfile::tempdir().unwrap();
    let cdi = cdi_dir("node-a", "");
    let mut runtimes = vec![ContainerRuntime::Process];
    runtimes.extend(podman_or_skip(work.path()));
    for runtime in runtimes {
        let logs = LogSink::default();
        let spec = spec(
            "poll",
            &["sh", "-c", "echo one; echo last >&2; exit 4"],
            Vec::new(),
            cdi.path(),
        );
        let (ns, pod, ctr) = (
            spec.namespace.clone(),
            spec.pod.clone(),
            spec.container.clone(),
        );
        let mut running = runtime.start(spec, logs.clone()).await.unwrap();
        let code = tokio::time::timeout(SAFETY, async {
            loop {
                if let Some(code) = running.try_exit_code() {
                    break code;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap();
        assert_eq!(code, 4, "{}", runtime.name());
        let mut lines = logs.lines(&ns, &pod, &ctr);
        lines.sort();
        assert_eq!(lines, vec!["last", "one"], "{}", runtime.name());
        running.stop().await;
    }
}

/// Runs `command` to completion and returns its output lines and exit code.
async fn run_to_end(
    runtime: &ContainerRuntime,
    id: &str,
    command: &[&str],
    cdi_root: &Path,
) -> (Vec<String>, i32) {
    let logs = LogSink::default();
    let spec = spec(id, command, devices(), cdi_root);
    let (ns, pod, ctr) = (
        spec.namespace.clone(),
        spec.pod.clone(),
        spec.container.clone(),
    );
    let mut running = runtime
        .start(spec, logs.clone())
        .await
        .unwrap_or_else(|e| panic!("{}: {command:?}: {e}", runtime.name()));
    let code = tokio::time::timeout(SAFETY, running.wait()).await.unwrap();
    (logs.lines(&ns, &pod, &ctr), code)
}

/// Commands as manifests written for Alpine/Wolfi-based images give them: busybox's
/// shells and tools by name or by their absolute paths in the image, in both runners.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busybox_commands_of_real_images_run_in_both_runners() {
    let work = tempfile::tempdir().unwrap();
    let cdi = cdi_dir("node-a", "");
    let mut runtimes = vec![ContainerRuntime::Process];
    runtimes.extend(podman_or_skip(work.path()));
    let cases: [(&[&str], &[&str]); 10] = [
        (
            &["ash", "-c", "echo \"ash $FAKE_NODE_NAME\""],
            &["ash node-a"],
        ),
        (&["/bin/ash", "-c", "echo \"$GREETING\""], &["hello world"]),
        (&["/bin/sh", "-c", "echo sh; exit 0"], &["sh"]),
        (&["sh", "-c", "echo $((6 * 7))"], &["42"]),
        (&["printenv", "FAKE_NODE_NAME"], &["node-a"]),
        (
            &["printenv", "FAKE_DEVICE_0", "GREETING"],
            &["FAKE-xyz", "hello world"],
        ),
        (&["/usr/bin/env", "sh", "-c", "echo env"], &["env"]),
        (&["sleep", "0"], &[]),
        (&["/bin/echo", "echo"], &["echo"]),
        (&["/usr/bin/printenv", "GREETING"], &["hello world"]),
    ];
    for runtime in &runtimes {
        for (i, (command, want)) in cases.iter().enumerate() {
            let (lines, code) = run_to_end(runtime, &format!("bb{i}"), command, cdi.path()).await;
            assert_eq!(code, 0, "{}: {command:?}: {lines:#?}", runtime.name());
            assert_eq!(lines, *want, "{}: {command:?}", runtime.name());
        }
        // `env` without arguments prints the whole environment, CDI edits included.
        let (lines, code) = run_to_end(runtime, "env", &["env"], cdi.path()).await;
        assert_eq!(code, 0, "{}: {lines:#?}", runtime.name());
        assert_has(&lines, "FAKE_NODE_NAME=node-a");
        // printenv of an unset variable fails, as it does everywhere.
        let (_, code) = run_to_end(runtime, "unset", &["printenv", "NOT_SET"], cdi.path()).await;
        assert_eq!(code, 1, "{}", runtime.name());
    }
    // The process runner really runs busybox's applet, not the host's program of that name.
    if std::path::Path::new("/bin/busybox").exists() {
        let (lines, _) = run_to_end(
            &ContainerRuntime::Process,
            "exe",
            &["sh", "-c", "readlink /proc/$$/exe"],
            cdi.path(),
        )
        .await;
        assert!(lines.iter().any(|l| l.ends_with("/busybox")), "{lines:#?}");
    } else {
        eprintln!(
            "!!!!!!!! SKIPPED: /bin/busybox not installed (apt-get install busybox-static): the process runner fell back to the host's programs !!!!!!!!"
        );
    }
}

/// The podman rootfs has every applet `busybox --list` gives under each of /bin, /sbin,
/// /usr/bin and /usr/sbin, so also at the path `busybox --list-full` puts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn podman_rootfs_has_every_applet_everywhere() {
    let work = tempfile::tempdir().unwrap();
    let Some(podman) = podman_or_skip(work.path()) else {
        return;
    };
    let cdi = cdi_dir("node-a", "");
    let script = "n=0; for a in $(busybox --list); do n=$((n+1)); for d in /bin /sbin /usr/bin /usr/sbin; do [ -x $d/$a ] || echo \"missing $d/$a\"; done; done; for p in $(busybox --list-full); do [ -x /$p ] || echo \"missing /$p\"; done; echo \"checked $n\"";
    let (lines, code) = run_to_end(&podman, "applets", &["sh", "-c", script], cdi.path()).await;
    assert_eq!(code, 0, "{lines:#?}");
    let host = Command::new("/bin/busybox").arg("--list").output().unwrap();
    let count = String::from_utf8_lossy(&host.stdout).lines().count();
    assert_eq!(lines, vec![format!("checked {count}")]);
}

/// A program that is neither a busybox applet nor on the host: an error naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_runner_names_a_missing_program() {
    let cdi = cdi_dir("node-a", "");
    for program in ["no-such-program-7f3a", "/bin/no-such-program-7f3a"] {
        let err = ContainerRuntime::Process
            .start(
                spec("missing", &[program, "-c", "true"], Vec::new(), cdi.path()),
                LogSink::default(),
            )
            .await
            .map(|_| ())
            .unwrap_err();
        assert!(
            matches!(err, RuntimeError::ProgramNotFound { .. }),
            "{program}: {err}"
        );
        assert!(err.to_string().contains(program), "{err}");
        assert!(err.to_string().contains("no-such-program-7f3a"), "{err}");
    }
}
