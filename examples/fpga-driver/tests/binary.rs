//! The real binary over its real sockets, against the kit's API server:
//!
//! - the crash test: the process killed (SIGABRT, as kill -9 would) between a bitstream's
//!   load and the checkpoint's record of it, then started again. The load is rolled back
//!   once before the plugin serves, and the kubelet's retry prepares the claim afresh;
//! - its config directory: a card plugged in, one gone bad, and the slice follows.
#![allow(clippy::unwrap_used)]

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dra_kubelet_plugin::claim::ClaimUid;
use dra_kubelet_plugin::{CHECKPOINT_FILE, STATE_DIR, claim_state_dir};
use dra_kubelet_plugin_testing::{ApiServer, Claim, ClaimBuilder, Kubelet, TestNode};
use fpga_driver::profile::CONFIG_API_VERSION;
use serde_json::json;

const DRIVER: &str = "fpga.example.com";
const NODE: &str = "node-1";
const LIMIT: Duration = Duration::from_secs(60);

/// The driver's process, its output in `log`.
fn start(node: &TestNode, kubeconfig: &Path, log: &Path, crash_point: Option<&str>) -> Child {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fpga-driver"));
    cmd.args(["--node-name", NODE, "--cards", "2"])
        .arg("--plugin-dir")
        .arg(node.plugin_dir(DRIVER))
        .arg("--cdi-root")
        .arg(node.cdi_root())
        .arg("--registry-dir")
        .arg(node.registry_dir())
        .env("KUBECONFIG", kubeconfig)
        .env_remove("TEST_CRASH_POINT")
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out);
    if let Some(point) = crash_point {
        cmd.args(["--test-crash-point", point]);
    }
    cmd.spawn().unwrap()
}

/// Waits until the log has `n` lines containing `what`; the log when it does not.
async fn wait_for_log(log: &Path, what: &str, n: usize) -> String {
    let deadline = Instant::now() + LIMIT;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.lines().filter(|l| l.contains(what)).count() >= n {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "no {n} line(s) with {what:?} in {LIMIT:?}; the driver's log:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The driver makes its cards' device nodes with mknod: root only.
fn is_root(test: &str) -> bool {
    let root = std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(1)
        == 0;
    if !root {
        eprintln!(
            "SKIPPED {test}: the driver needs root (mknod of its device nodes); CI runs it as root"
        );
    }
    root
}

fn kubeconfig(dir: &Path, url: &str) -> PathBuf {
    let path = dir.join("kubeconfig");
    let config = json!({
        "apiVersion": "v1", "kind": "Config", "current-context": "kit",
        "clusters": [{"name": "kit", "cluster": {"server": url}}],
        "users": [{"name": "kit", "user": {}}],
        "contexts": [{"name": "kit", "context": {"cluster": "kit", "user": "kit"}}],
    });
    std::fs::write(&path, config.to_string()).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_the_load_is_rolled_back_once_and_prepared_on_retry() {
    // The driver makes its cards' device nodes with mknod.
    if std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(1)
        != 0
    {
        eprintln!(
            "SKIPPED a_crash_after_the_load_is_rolled_back_once_and_prepared_on_retry: the driver needs root (mknod of its device nodes); CI runs it as root"
        );
        return;
    }
    let api = ApiServer::start().await.unwrap();
    api.create_node(NODE).unwrap();
    let node = TestNode::new(NODE).unwrap();
    let config = kubeconfig(node.root(), &api.url());
    let log = node.root().join("driver.log");
    let claim = api
        .create_claim(
            &ClaimBuilder::new(DRIVER, NODE, "default", "crashy")
                .device("fpga", "fpga-1")
                .opaque_config(
                    None,
                    json!({"apiVersion": CONFIG_API_VERSION, "kind": "FpgaConfig", "bitstream": "v1.bit"}),
                )
                .build(),
        )
        .unwrap();
    let claim = Claim::of(&claim);
    let state_dir = claim_state_dir(
        &node.plugin_dir(DRIVER),
        &ClaimUid::parse(&claim.uid).unwrap(),
    );

    let mut driver = start(&node, &config, &log, Some("prepare-after-device-work"));
    wait_for_log(&log, "serving", 1).await;
    let mut kubelet = Kubelet::new(node.registration_socket(DRIVER));
    kubelet.register().await.unwrap();
    let answer = kubelet.prepare(std::slice::from_ref(&claim)).await;
    assert!(
        answer.is_err(),
        "the call dies with the process: {answer:?}"
    );
    let status = driver.wait().unwrap();
    assert!(!status.success(), "aborted: {status}");
    // What the crash left: the card loaded, the claim recorded as started.
    assert_eq!(
        std::fs::read_to_string(state_dir.join("fpga1.bitstream")).unwrap(),
        "v1.bit\n"
    );
    let checkpoint =
        std::fs::read_to_string(node.plugin_dir(DRIVER).join(CHECKPOINT_FILE)).unwrap();
    assert!(
        checkpoint.contains("\"preparePhase\": \"PrepareStarted\""),
        "{checkpoint}"
    );

    let mut driver = start(&node, &config, &log, None);
    let text = wait_for_log(&log, "serving", 2).await;
    assert_eq!(
        text.matches("rolling back a bitstream load").count(),
        1,
        "rolled back once, before serving:\n{text}"
    );
    assert!(!state_dir.exists(), "nothing left of the load");
    let states: Vec<_> = std::fs::read_dir(node.plugin_dir(DRIVER).join(STATE_DIR))
        .unwrap()
        .flatten()
        .collect();
    assert!(states.is_empty(), "{states:?}");

    // The kubelet's retry prepares it afresh.
    let mut kubelet = Kubelet::new(node.registration_socket(DRIVER));
    kubelet.register().await.unwrap();
    let devices = kubelet.prepare_one(&claim).await.unwrap();
    assert_eq!(devices[0].device, "fpga-1");
    assert_eq!(
        std::fs::read_to_string(state_dir.join("fpga1.bitstream")).unwrap(),
        "v1.bit\n"
    );
    driver.kill().unwrap();
    driver.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_card_plugged_in_is_published_and_a_bad_one_tainted() {
    if !is_root("a_card_plugged_in_is_published_and_a_bad_one_tainted") {
        return;
    }
    let api = ApiServer::start().await.unwrap();
    api.create_node(NODE).unwrap();
    let node = TestNode::new(NODE).unwrap();
    let config = kubeconfig(node.root(), &api.url());
    let log = node.root().join("driver.log");
    let mut driver = start(&node, &config, &log, None);
    let devices =
        |slices: &[k8s_openapi::api::resource::v1::ResourceSlice]| -> Vec<(String, usize)> {
            slices
                .iter()
                .flat_map(|s| s.spec.devices.clone().unwrap_or_default())
                .map(|d| (d.name, d.taints.map_or(0, |t| t.len())))
                .collect()
        };
    api.wait_for_slices(LIMIT, |s| devices(s).len() == 2)
        .await
        .unwrap();

    let dir = node.plugin_dir(DRIVER).join("config");
    std::fs::create_dir_all(&dir).unwrap();
    let plugged = Instant::now();
    std::fs::write(dir.join("cards"), "3\n").unwrap();
    api.wait_for_slices(LIMIT, |s| devices(s).len() == 3)
        .await
        .unwrap();
    eprintln!(
        "card plugged in to slice published: {:?}",
        plugged.elapsed()
    );
    assert!(
        node.plugin_dir(DRIVER).join("dev/fpga2").exists(),
        "its device node was made"
    );

    std::fs::write(dir.join("unhealthy"), "fpga-1 PCIe link down\n").unwrap();
    let slices = api
        .wait_for_slices(LIMIT, |s| devices(s).iter().any(|(_, t)| *t > 0))
        .await
        .unwrap();
    assert_eq!(
        devices(&slices),
        [
            ("fpga-0".to_owned(), 0),
            ("fpga-1".to_owned(), 1),
            ("fpga-2".to_owned(), 0)
        ]
    );
    std::fs::write(dir.join("cards"), "not a number\n").unwrap();
    wait_for_log(&log, "the config directory cannot be used", 1).await;
    std::fs::write(dir.join("cards"), "1\n").unwrap();
    api.wait_for_slices(LIMIT, |s| devices(s).len() == 1)
        .await
        .unwrap();
    driver.kill().unwrap();
    driver.wait().unwrap();
}
