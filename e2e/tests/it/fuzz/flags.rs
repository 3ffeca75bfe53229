//! The binaries' flags: `fake-dra-sim`, `fake-dra-kubelet-plugin` (and its `fleet`) and
//! `fake-dra-controller`, run as a user runs them, with flags from their own vocabulary
//! and hostile values (empty, 70,000 characters, `../`, numbers past u64, upper case,
//! non-ASCII). None of them can succeed: the plugin and controller get a kubeconfig that
//! does not exist and the sim a manifest that does not exist, both read only after the
//! flags are checked. So each run must end by itself within the deadline with exit code
//! 1 (our refusal) or 2 (clap's), a message that says something and does not echo a long
//! value whole, and no panic or signal (D14, D15, D25, D26, D32: a panic after start, a
//! silent hang, a Debug dump).

use super::json::tricky_string;
use super::{CASE_DEADLINE, MAX_MESSAGE_BYTES, run};
use proptest::prelude::*;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

const MISSING_KUBECONFIG: &str = "/nonexistent/fake-dra-fuzz/kubeconfig";
const MISSING_MANIFEST: &str = "/nonexistent/fake-dra-fuzz/manifest.yaml";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Binary {
    Sim,
    Plugin,
    Fleet,
    Controller,
}

impl Binary {
    fn file(self) -> &'static str {
        match self {
            Binary::Sim => fake_dra_emulator::binaries::SIM,
            Binary::Plugin | Binary::Fleet => "fake-dra-kubelet-plugin",
            Binary::Controller => "fake-dra-controller",
        }
    }

    /// The flags taking a value, and the switches, that the fuzzer sets.
    fn flags(self) -> (&'static [&'static str], &'static [&'static str]) {
        match self {
            Binary::Sim => (
                &[
                    "--nodes",
                    "--mode",
                    "--kubernetes-version",
                    "--feature-gates",
                    "--runtime",
                    "--num-devices",
                    "--log-format",
                    "--timeout",
                ],
                &["--wait"],
            ),
            Binary::Plugin => (
                &[
                    "--node-name",
                    "--driver-name",
                    "--namespace",
                    "--profile",
                    "--inventory",
                    "--log-format",
                    "--http-address",
                    "--mode",
                    "--max-connections",
                    "--connection-idle-timeout",
                    "--num-devices",
                    "--models",
                    "--gpus",
                    "--nvidia-gpus",
                ],
                &[],
            ),
            Binary::Fleet => (
                &[
                    "--driver-name",
                    "--create-nodes",
                    "--node-name-prefix",
                    "--node-labels",
                    "--node-taints",
                    "--node-cpu",
                    "--node-memory",
                    "--node-pods",
                    "--node-selector",
                    "--heartbeat-interval",
                    "--concurrency",
                    "--profile",
                    "--inventory",
                    "--log-format",
                    "--http-address",
                    "--num-devices",
                    "--models",
                    "--gpus",
                    "--nvidia-gpus",
                ],
                &["--keep-nodes"],
            ),
            Binary::Controller => (
                &[
                    "--driver-name",
                    "--namespace",
                    "--workers",
                    "--lease-name",
                    "--lease-namespace",
                    "--instance",
                    "--http-address",
                    "--max-connections",
                    "--connection-idle-timeout",
                    "--log-format",
                ],
                &["--leader-elect"],
            ),
        }
    }

    /// The whole command line: the fixed part that makes every run end, then the flags.
    fn argv(self, flags: &[(String, Option<String>)], scratch: &std::path::Path) -> Vec<String> {
        let mut argv: Vec<String> = match self {
            Binary::Sim => vec!["run".into(), "-f".into(), MISSING_MANIFEST.into()],
            Binary::Fleet => vec![
                "fleet".into(),
                "--kubeconfig".into(),
                MISSING_KUBECONFIG.into(),
            ],
            Binary::Plugin => {
                let dir = |d: &str| scratch.join(d).to_string_lossy().into_owned();
                vec![
                    "--kubeconfig".into(),
                    MISSING_KUBECONFIG.into(),
                    "--cdi-root".into(),
                    dir("cdi"),
                    "--plugin-dir".into(),
                    dir("plugin"),
                    "--registry-dir".into(),
                    dir("registry"),
                ]
            }
            Binary::Controller => vec!["--kubeconfig".into(), MISSING_KUBECONFIG.into()],
        };
        for (flag, value) in flags {
            argv.push(flag.clone());
            argv.extend(value.clone());
        }
        argv
    }
}

/// Values a flag could be given: the strings that break parsers, numbers at and past the
/// edges, durations, the names and lists the flags take, and files that are not files.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => tricky_string(),
        1 => prop_oneof![
            Just("0".to_string()),
            Just("128".to_string()),
            Just("129".to_string()),
            Just("100000".to_string()),
            Just("18446744073709551615".to_string()),
            Just("18446744073709551616".to_string()),
            "-?[0-9]{1,25}",
        ],
        1 => prop_oneof![
            Just("90s".to_string()),
            Just("18446744073709551615m".to_string()),
            Just("1h1h".to_string()),
            "[0-9]{1,22}(ns|ms|s|m|h|d)?",
        ],
        1 => prop::sample::select(
            &[
                "fake", "gpu", "nvidia", "classic", "structured", "auto", "json", "text", "process",
                "podman", "1.37", "1.26", "2.0", "1.99999999999", "a,a", "UPPER,x", ",",
                "0.0.0.0:0", "[::1]:99999", "localhost:8080", "A100-80GB:2", "x=y:NoSchedule",
                "a>5", "key in (a,b", "DRADeviceTaints=true", "DRAAdminAccess=false", "/dev/zero", "/etc", "/proc/self/mem", "-", "--help=no",
            ][..],
        )
        .prop_map(String::from),
    ]
    // An argument cannot hold a NUL byte: the kernel ends it there.
    .prop_map(|v| v.replace('\0', "\u{1}"))
}

fn command_line() -> impl Strategy<Value = (Binary, Vec<(String, Option<String>)>)> {
    prop::sample::select(
        &[
            Binary::Sim,
            Binary::Plugin,
            Binary::Fleet,
            Binary::Controller,
        ][..],
    )
    .prop_flat_map(|binary| {
        let (with_value, switches) = binary.flags();
        let flag = prop_oneof![
            6 => (prop::sample::select(with_value), value())
                .prop_map(|(f, v)| (f.to_string(), Some(v))),
            1 => prop::sample::select(if switches.is_empty() { with_value } else { switches })
                .prop_map(|f| (f.to_string(), None)),
        ];
        (Just(binary), prop::collection::vec(flag, 0..5))
    })
}

/// Runs the command line, killing it at the deadline; (exit code, stderr), or what went
/// wrong.
fn run_binary(binary: Binary, argv: &[String]) -> Result<(Option<i32>, String), String> {
    let path: PathBuf = fake_dra_emulator::binaries::locate(binary.file(), None)
        .map_err(|e| format!("{} not found: {e}", binary.file()))?;
    let mut child = Command::new(&path)
        .args(argv)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", std::env::temp_dir())
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawning {}: {e}", path.display()))?;
    let mut stderr = child.stderr.take().ok_or("no stderr pipe")?;
    let reader = std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = stderr.read_to_end(&mut text);
        String::from_utf8_lossy(&text).into_owned()
    });
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < CASE_DEADLINE => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                let text = reader.join().unwrap_or_default();
                return Err(format!(
                    "still running after {} s (a hang before start); stderr: {}",
                    CASE_DEADLINE.as_secs(),
                    tail(&text)
                ));
            }
            Err(e) => return Err(format!("waiting for the process: {e}")),
        }
    };
    let text = reader.join().map_err(|_| "the stderr reader panicked")?;
    Ok((status.code(), text))
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(5)..].join("\n")
}

/// What the user is told: stderr without the log lines below ERROR (`<timestamp> INFO …`,
/// or their JSON form with `--log-format json`) and clap's closing hint.
fn message(stderr: &str) -> String {
    let below_error = |l: &str| {
        (l.starts_with("20") && !l.contains(" ERROR "))
            || (l.starts_with("{\"timestamp\"") && !l.contains("\"level\":\"ERROR\""))
    };
    stderr
        .lines()
        .filter(|l| !below_error(l))
        .filter(|l| !l.starts_with("For more information, try"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn binary_flags() {
    let scratch = tempfile::tempdir().expect("a scratch directory");
    run("binary_flags", command_line(), |(binary, flags)| {
        let argv = binary.argv(flags, scratch.path());
        let (code, stderr) = run_binary(*binary, &argv)?;
        let what = format!("{} {}", binary.file(), super::clip(&argv.join(" ")));
        if stderr.contains("panicked at") {
            return Err(format!("{what}: panicked: {}", tail(&stderr)));
        }
        match code {
            Some(1 | 2) => {}
            Some(code) => return Err(format!("{what}: exit code {code}: {}", tail(&stderr))),
            None => return Err(format!("{what}: killed by a signal: {}", tail(&stderr))),
        }
        let message = message(&stderr);
        if message.trim().is_empty() {
            return Err(format!("{what}: refused without a word: {}", tail(&stderr)));
        }
        if message.len() > MAX_MESSAGE_BYTES {
            return Err(format!(
                "{what}: a refusal of {} bytes: {}",
                message.len(),
                super::clip(&message)
            ));
        }
        Ok(())
    });
}
