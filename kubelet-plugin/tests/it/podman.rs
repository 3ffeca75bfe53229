//! A real container runtime resolves our CDI specs: `podman run --device <id>` for every
//! id the plugin returned, and the container's env is checked.
//!
//! Needs podman, runc and busybox-static (ARCHITECTURE.md §5); without them it fails,
//! unless `FAKE_DRA_SKIP_PODMAN=1` says to skip it (loudly). Podman 4.3 reads specs only
//! from /etc/cdi and /var/run/cdi, so this test uses /var/run/cdi — under a driver name of
//! its own, so its CDI vendor never meets another producer's (or a running fake-dra's)
//! files there — and removes what it wrote.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use fake_dra_kubelet_plugin::fake::devices::children;

const NODE: &str = "podman-node";
/// Short enough for classic mode's CDI annotation key (≤ 26 characters).
const TEST_DRIVER: &str = "podman.fake-dra.test";
/// The metadata test's own: the tests run at once, and a plugin that finds another
/// plugin's claim specs of its driver in /var/run/cdi refuses to start.
const METADATA_DRIVER: &str = "podman-md.fake-dra.test";

fn find(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(name))
            .find(|p| p.is_file())
    })
}

fn busybox() -> Option<PathBuf> {
    ["/bin/busybox", "/usr/bin/busybox"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

fn rootfs(dir: &Path, busybox: &Path) {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(busybox, bin.join("busybox")).unwrap();
    for tool in ["sh", "env", "sleep"] {
        std::os::unix::fs::symlink("busybox", bin.join(tool)).unwrap();
    }
}

/// podman and busybox, runc beside them; `None` after a loud SKIPPED line (or a failure
/// where podman is required) when one is missing.
fn tools(test: &str) -> Option<(PathBuf, PathBuf)> {
    match (find("podman"), find("runc"), busybox()) {
        (Some(podman), Some(_runc), Some(busybox)) => Some((podman, busybox)),
        _ => {
            cannot_run(
                test,
                "podman, runc or busybox-static is not installed (apt-get install -y podman runc busybox-static)",
                "FAKE_DRA_SKIP_PODMAN",
            );
            None
        }
    }
}

/// `podman run` of `argv` in a busybox root file system with the devices `ids`.
fn run_container(
    podman: &Path,
    busybox: &Path,
    ids: &[String],
    argv: &[&str],
) -> std::process::Output {
    let root = tempfile::tempdir().unwrap();
    rootfs(root.path(), busybox);
    let mut cmd = Command::new(podman);
    cmd.args([
        "--runtime",
        "runc",
        "--cgroup-manager=cgroupfs",
        "run",
        "--rm",
        "--network=none",
        "--ulimit",
        "nofile=20000:20000",
        "--ulimit",
        "nproc=32768:32768",
    ]);
    for id in ids {
        cmd.arg("--device").arg(id);
    }
    cmd.arg("--rootfs").arg(root.path()).args(argv);
    cmd.output().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn podman_sees_the_claim_env() {
    let Some((podman, busybox)) = tools("podman_sees_the_claim_env") else {
        return;
    };

    let api = start_api().await;
    let dirs = Dirs::shared_cdi_root(PathBuf::from("/var/run/cdi"), TEST_DRIVER);
    let plugin = Plugin::start(
        &dirs,
        Options {
            node: NODE,
            kubeconfig: api.kubeconfig(),
            env: vec![],
            extra_args: vec!["--driver-name".into(), TEST_DRIVER.into()],
        },
    )
    .await;
    // A fresh uid, starting with a digit so the spec needs CDI 0.5.0.
    let uid = format!("0{}", &uuid::Uuid::new_v4().to_string()[1..]);
    let resp = prepare(&dirs, vec![claim(&uid, &handle(NODE, &[0, 1, 2, 3], 2))]).await;
    assert_eq!(resp[&uid].error, "");
    let ids = resp[&uid].cdi_devices.clone();

    let out = run_container(&podman, &busybox, &ids, &["/bin/env"]);

    // Clean up before asserting, so a failure leaves nothing in /var/run/cdi.
    let un = unprepare(&dirs, vec![claim(&uid, "")]).await;
    assert!(plugin.sigterm().success());
    let _ = std::fs::remove_file(dirs.spec_path("common"));
    assert_eq!(un[&uid].error, "");
    assert!(!dirs.spec_path(&uid).exists());

    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "podman failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let env: Vec<&str> = stdout.lines().collect();
    let inv = inventory(NODE);
    for (i, kid) in children(&inv.devices[..4], 2).iter().enumerate() {
        let line = format!("FAKE_DEVICE_{i}={}", kid.id);
        assert!(env.contains(&line.as_str()), "{line} not in {env:?}");
    }
    assert!(
        env.contains(&format!("FAKE_NODE_NAME={NODE}").as_str()),
        "{env:?}"
    );
    assert!(env.contains(&format!("DRA_RESOURCE_DRIVER_NAME={TEST_DRIVER}").as_str()));
    assert!(env.contains(&format!("FAKE_DEVICE_MODEL={}", inv.model).as_str()));
}

/// A real runtime mounts a device metadata file (`--device-metadata`, structured DRA)
/// where upstream's reader looks for it, read-only, from the CDI id the plugin answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn podman_mounts_the_device_metadata_file() {
    let Some((podman, busybox)) = tools("podman_mounts_the_device_metadata_file") else {
        return;
    };
    let api = start_api_version((1, 34)).await;
    let dirs = Dirs::shared_cdi_root(PathBuf::from("/var/run/cdi"), METADATA_DRIVER);
    let plugin = Plugin::start(
        &dirs,
        Options {
            node: NODE,
            kubeconfig: api.kubeconfig(),
            env: vec![],
            extra_args: vec![
                "--driver-name".into(),
                METADATA_DRIVER.into(),
                "--mode".into(),
                "structured".into(),
                "--device-metadata".into(),
            ],
        },
    )
    .await;
    let devices = ["fake-0".to_owned()];
    let uid = allocated_claim_of(
        &api,
        "v1",
        "meta",
        METADATA_DRIVER,
        NODE,
        &devices,
        Some(claim_config(serde_json::json!({"count": 1, "split": 1}))),
    )
    .await;
    let answer = prepare_v1(&dirs, vec![v1_claim(&uid, "meta")])
        .await
        .remove(&uid)
        .unwrap();
    let ids: Vec<String> = answer
        .devices
        .iter()
        .flat_map(|d| d.cdi_device_ids.clone())
        .collect();

    let path = format!(
        "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/meta/req/{METADATA_DRIVER}-metadata.json"
    );
    // The file, then proof that it is read-only.
    let script = format!("cat {path} && ! (echo x >> {path}) 2>/dev/null && echo read-only");
    let out = run_container(
        &podman,
        &busybox,
        &ids,
        &["/bin/busybox", "sh", "-c", &script],
    );

    // Clean up before asserting, so a failure leaves nothing in /var/run/cdi.
    let un = unprepare_v1(&dirs, vec![v1_claim(&uid, "meta")]).await;
    assert!(plugin.sigterm().success());
    let _ = std::fs::remove_file(dirs.spec_path("common"));
    assert_eq!(un[&uid].error, "");
    let left: Vec<_> = std::fs::read_dir("/var/run/cdi")
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(&uid))
        .collect();
    assert!(left.is_empty(), "{left:?}");

    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "podman failed ({ids:?}): {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("\"apiVersion\": \"metadata.resource.k8s.io/v1beta1\""),
        "{stdout}"
    );
    assert!(stdout.contains(&format!("\"uid\": \"{uid}\"")), "{stdout}");
    assert!(stdout.contains("\"name\": \"fake-0\""), "{stdout}");
    assert!(stdout.trim_end().ends_with("read-only"), "{stdout}");
}
