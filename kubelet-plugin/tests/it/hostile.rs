//! Hostile or careless start-up input to the real binary, node and fleet mode: what it
//! refuses before it talks to any API server, and the exact words it uses.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Guards against a hang only (a FIFO waited on, /dev/zero read without end).
const LIMIT: Duration = Duration::from_secs(30);

/// What the binary said on stderr and whether it failed, within [`LIMIT`]; a run past
/// the limit is killed and fails the test.
fn refusal(args: &[&str]) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fake-dra-kubelet-plugin"))
        .args(args)
        // No API server is needed: everything here is refused before a client exists.
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env("RUST_LOG", "off")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?}: still running after {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "{args:?} succeeded: {stderr}");
    stderr
}

fn node(inventory: &Path) -> Vec<String> {
    ["--node-name", "node-1", "--inventory"]
        .into_iter()
        .map(String::from)
        .chain([inventory.display().to_string()])
        .collect()
}

fn fleet(inventory: &Path) -> Vec<String> {
    ["fleet", "--create-nodes", "2", "--inventory"]
        .into_iter()
        .map(String::from)
        .chain([inventory.display().to_string()])
        .collect()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn an_inventory_that_is_no_regular_file_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let zero = dir.path().join("inv.yaml");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    let fifo = dir.path().join("fifo.yaml");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    for args in [node(&zero), fleet(&zero)] {
        assert_eq!(
            refusal(&strs(&args)),
            format!(
                "fake-dra-kubelet-plugin: --inventory '{}' is a character device, not a regular file\n",
                zero.display()
            )
        );
    }
    for args in [node(&fifo), fleet(&fifo)] {
        assert_eq!(
            refusal(&strs(&args)),
            format!(
                "fake-dra-kubelet-plugin: --inventory '{}' is a FIFO, not a regular file\n",
                fifo.display()
            )
        );
    }
}

#[test]
fn create_nodes_past_the_limit_is_refused() {
    for n in ["10001", "18446744073709551615", "lots"] {
        let err = refusal(&["fleet", "--create-nodes", n]);
        assert!(
            err.contains(&format!(
                "invalid value '{n}' for '--create-nodes <CREATE_NODES>': must be a whole number from 0 to 10000"
            )),
            "{err}"
        );
    }
}

#[test]
fn fleet_mode_refuses_profile_flags_no_node_could_use_before_creating_any() {
    for (args, wanted) in [
        (
            &["--profile", "gpu", "--gpus", "NOPE:1"][..],
            "fake-dra-kubelet-plugin: gpu profile: --gpus: GPU group 0 (NOPE:1:exclusive): model \"NOPE\" is not in the catalog; known models: A100-80GB, H100-80GB, L4-24GB\n",
        ),
        (
            &["--num-devices", "0"][..],
            "fake-dra-kubelet-plugin: fake profile: --num-devices (FAKE_DRA_NUM_DEVICES) must be between 1 and 128, got 0: a node publishes its devices in one ResourceSlice (or NodeAllocationState) of at most 128\n",
        ),
        (
            &[
                "--profile",
                "gpu",
                "--gpus",
                "A100-80GB:128:partitioned,L4-24GB",
            ][..],
            "fake-dra-kubelet-plugin: gpu profile: --gpus: the node has 129 GPUs; at most 128 per node\n",
        ),
    ] {
        let mut all = vec!["fleet", "--create-nodes", "2"];
        all.extend_from_slice(args);
        assert_eq!(refusal(&all), wanted, "{args:?}");
    }
    let err = refusal(&["fleet", "--profile", "tpu"]);
    assert!(
        err.contains("invalid value 'tpu' for '--profile <PROFILE>'")
            && err.contains("[possible values: fake, gpu, nvidia]"),
        "{err}"
    );
}

/// Fleet mode's node flags are refused by name before anything starts (a bad selector
/// used to be retried forever under a message about RBAC).
#[test]
fn fleet_node_flags_are_checked_at_start() {
    for (flag, value, why) in [
        (
            "--node-memory",
            "lots",
            "not a Kubernetes quantity (no digits)",
        ),
        ("--node-cpu", "-2", "must not be negative"),
        (
            "--node-pods",
            "1.5",
            "must be a whole number from 0 to 4294967295",
        ),
        ("--concurrency", "0", "must be a whole number, at least 1"),
        ("--node-selector", "bad key=x", "after key bad: expected"),
        ("--node-selector", "k in (a", "not closed with ')'"),
        ("--node-selector", "k=v/w", "is not a label value"),
    ] {
        let err = refusal(&["fleet", "--create-nodes", "1", &format!("{flag}={value}")]);
        let upper = flag
            .trim_start_matches("--")
            .replace('-', "_")
            .to_uppercase();
        assert!(
            err.contains(&format!("invalid value '{value}' for '{flag} <{upper}>': ")),
            "{err}"
        );
        assert!(err.contains(why), "{flag} {value}: {err}");
    }
}

/// An inventory nested 100,000 levels deep is refused at once; parsed, it took minutes.
#[test]
fn an_inventory_nested_too_deep_is_refused_before_it_is_parsed() {
    let dir = tempfile::tempdir().unwrap();
    let deep = dir.path().join("deep.yaml");
    std::fs::write(
        &deep,
        format!(
            "apiVersion: fake.resource.3-shake.com/v1alpha1\nkind: Inventory\nnodes: {}{}\n",
            "{a: ".repeat(100_000),
            "}".repeat(100_000)
        ),
    )
    .unwrap();
    for args in [node(&deep), fleet(&deep)] {
        let err = refusal(&strs(&args));
        assert!(
            err.contains("YAML nested deeper than 64 levels at line 3"),
            "{err}"
        );
    }
}

/// D23: `--driver-name Bad_Driver`, `--node-name ../../etc` or a 300-character name were
/// taken, and the plugin (or the fleet) retried for ever, never Ready: every write naming
/// them was refused. D33: `fleet --node-name-prefix UPPER-` failed at the first create with
/// a Debug dump. All are refused at start naming the flag, its env twin and the rule.
#[test]
fn names_the_api_would_refuse_are_refused_at_start() {
    let long = "n".repeat(300);
    let long_driver = format!("{}.example.com", "d".repeat(60));
    for (args, wanted) in [
        (
            vec!["--node-name", "node-1", "--driver-name", "Bad_Driver"],
            "fake-dra-kubelet-plugin: --driver-name (FAKE_DRA_DRIVER_NAME): \"Bad_Driver\" must be a lowercase DNS subdomain",
        ),
        (
            vec!["--node-name", "node-1", "--driver-name", &long_driver],
            "is 72 characters, at most 63 (a DRA driver name is a DNS subdomain of at most 63 characters",
        ),
        (
            vec!["--node-name", "../../etc"],
            "fake-dra-kubelet-plugin: --node-name (FAKE_DRA_NODE_NAME): a node name: \"../../etc\" must be a lowercase DNS subdomain",
        ),
        (
            vec!["--node-name", &long],
            "--node-name (FAKE_DRA_NODE_NAME): a node name: \"nnnn",
        ),
        (
            vec![
                "fleet",
                "--create-nodes",
                "2",
                "--driver-name",
                "Bad_Driver",
            ],
            "fake-dra-kubelet-plugin: --driver-name (FAKE_DRA_DRIVER_NAME): \"Bad_Driver\"",
        ),
        (
            vec![
                "fleet",
                "--create-nodes",
                "2",
                "--node-name-prefix",
                "UPPER-",
            ],
            "fake-dra-kubelet-plugin: --node-name-prefix (FAKE_DRA_NODE_NAME_PREFIX) \"UPPER-\": the created nodes are named <prefix><number>, and \"UPPER-1\" must be a lowercase DNS subdomain",
        ),
        (
            vec!["fleet", "--create-nodes", "2", "--node-name-prefix", &long],
            "is 301 characters, at most 253",
        ),
    ] {
        let err = refusal(&args);
        assert!(err.contains(wanted), "{args:?}: {err}");
        assert!(err.len() < 600, "{err}");
        assert!(!err.contains("Status {"), "{err}");
    }
    // The env twin is checked the same way.
    let mut child = Command::new(env!("CARGO_BIN_EXE_fake-dra-kubelet-plugin"))
        .env("FAKE_DRA_NODE_NAME", "UPPER")
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!child.wait().unwrap().success());
    assert!(
        stderr.contains("--node-name (FAKE_DRA_NODE_NAME): a node name: \"UPPER\""),
        "{stderr}"
    );
}
