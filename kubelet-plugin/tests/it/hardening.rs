//! The plugin as an attacker or a careless operator meets it: exhausted file descriptors
//! and idle connections, a mis-mounted plugin dir, damaged checkpoints and spec files,
//! odd claim uids and names, duplicate claims in one call.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::Command;
use std::time::Duration;

use common::*;
use fake_dra_emulator::apiserver::ApiServer;
/// The modes the plugin sets, whatever the umask (docs/kubelet-plugin.md, Files).
const SPEC_MODE: u32 = 0o644;
const CHECKPOINT_MODE: u32 = 0o600;
const DIR_MODE: u32 = 0o750;
const SOCKET_MODE: u32 = 0o660;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const NODE: &str = "node-1";
const UID_A: &str = "0b7c1c6e-2f55-4a53-9a1e-0a6a4c3e7c11";
const UID_B: &str = "a4d0a3f2-9d41-4f4e-8d0e-6c4d7b1e2f22";

fn opts(api: &ApiServer) -> Options<'_> {
    Options {
        node: NODE,
        kubeconfig: api.kubeconfig(),
        env: vec![],
        extra_args: vec![],
    }
}

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().mode() & 0o777
}

/// Runs the plugin with its open-files limit at `fds`.
fn with_fd_limit(fds: u32) -> impl FnOnce(Command) -> Command {
    move |plugin| {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!("ulimit -n {fds} && exec \"$0\" \"$@\""))
            .arg(plugin.get_program())
            .args(plugin.get_args());
        for (k, v) in plugin.get_envs() {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        cmd.stdin(std::process::Stdio::null());
        cmd
    }
}

/// User + system CPU time of a process, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

async fn http_status(addr: &str, path: &str) -> Option<String> {
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut response = String::new();
    s.read_to_string(&mut response).await.ok()?;
    response.lines().next().map(str::to_string)
}

/// `ulimit -n 64` and 400 idle connections (200 on the DRA socket, 200 on the HTTP port):
/// health and prepare still answer, the plugin does not spin, and every idle connection
/// is closed after the idle timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_connections_past_the_fd_limit_starve_nobody() {
    idle_connections_at_the_fd_limit(None).await;
}

/// The same with the connection limit set far above the descriptors, so accepts do fail
/// with EMFILE: the servers back off and make room instead of ending or spinning.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn accept_failing_for_want_of_descriptors_stops_no_server() {
    idle_connections_at_the_fd_limit(Some(1000)).await;
}

async fn idle_connections_at_the_fd_limit(max_connections: Option<usize>) {
    let api = start_api().await;
    let dirs = Dirs::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let plugin = Plugin::start_with(
        &dirs,
        Options {
            extra_args: [
                "--http-address".to_string(),
                addr.clone(),
                "--connection-idle-timeout".into(),
                "2".into(),
            ]
            .into_iter()
            .chain(max_connections.map(|n| format!("--max-connections={n}")))
            .collect(),
            ..opts(&api)
        },
        with_fd_limit(64),
    )
    .await;
    let pid = plugin.child.id();

    let mut idle = Vec::new();
    for _ in 0..200 {
        let dra = tokio::time::timeout(
            Duration::from_secs(5),
            tokio::net::UnixStream::connect(dirs.dra_socket()),
        );
        let http = tokio::time::timeout(
            Duration::from_secs(5),
            tokio::net::TcpStream::connect(&addr),
        );
        if let Ok(Ok(s)) = dra.await {
            idle.push(Box::new(s) as Box<dyn tokio::io::AsyncRead + Unpin + Send>);
        }
        if let Ok(Ok(s)) = http.await {
            idle.push(Box::new(s));
        }
    }
    assert!(
        idle.len() > 64,
        "more connections than descriptors: {}",
        idle.len()
    );

    // Out of descriptors, the plugin waits for them instead of spinning on accept.
    let before = cpu_ticks(pid);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let spent = cpu_ticks(pid) - before;
    assert!(
        spent < 100,
        "{spent} ticks of CPU in 3 s while holding idle connections"
    );

    let status = eventually_some("/healthz answered", || http_status(&addr, "/healthz")).await;
    assert_eq!(status, "HTTP/1.1 200 OK");
    let out = prepare(&dirs, vec![claim(UID_A, &handle(NODE, &[0], 1))]).await;
    assert_eq!(out[UID_A].error, "");

    // Every idle connection is closed by the plugin (EOF or reset) after the timeout;
    // what the servers said first (h2's SETTINGS) is read past.
    for mut conn in idle {
        let mut sink = Vec::new();
        let read =
            tokio::time::timeout(Duration::from_secs(120), conn.read_to_end(&mut sink)).await;
        assert!(
            read.is_ok(),
            "an idle connection was still open after 120 s"
        );
    }
}

async fn eventually_some<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Files and sockets get their modes whatever the umask: specs 0644, the checkpoint 0600,
/// the directories the plugin creates 0750, the sockets 0660.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_get_explicit_modes() {
    let api = start_api().await;
    let dirs = Dirs::new();
    let _plugin = Plugin::start_with(&dirs, opts(&api), |plugin| {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg("umask 000 && exec \"$0\" \"$@\"")
            .arg(plugin.get_program())
            .args(plugin.get_args());
        for (k, v) in plugin.get_envs() {
            if let Some(v) = v {
                cmd.env(k, v);
            }
        }
        cmd
    })
    .await;
    let out = prepare(&dirs, vec![claim(UID_A, &handle(NODE, &[0], 1))]).await;
    assert_eq!(out[UID_A].error, "");
    assert_eq!(mode(&dirs.spec_path(UID_A)), SPEC_MODE);
    assert_eq!(mode(&dirs.spec_path("common")), SPEC_MODE);
    assert_eq!(mode(&dirs.checkpoint()), CHECKPOINT_MODE);
    assert_eq!(mode(&dirs.plugin_dir()), DIR_MODE);
    assert_eq!(mode(&dirs.cdi_root), DIR_MODE);
    assert_eq!(mode(&dirs.dra_socket()), SOCKET_MODE);
    assert_eq!(mode(&dirs.reg_socket()), SOCKET_MODE);
}

/// A plugin started on the wrong `--plugin-dir` (no checkpoint) next to the specs of
/// prepared claims refuses to start and says how to recover, instead of sweeping them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_checkpoint_next_to_prepared_specs_stops_start() {
    let api = start_api().await;
    let dirs = Dirs::new();
    let plugin = Plugin::start(&dirs, opts(&api)).await;
    let out = prepare(&dirs, vec![claim(UID_A, &handle(NODE, &[0], 1))]).await;
    assert_eq!(out[UID_A].error, "");
    plugin.kill9();
    let spec = std::fs::read(dirs.spec_path(UID_A)).unwrap();
    std::fs::remove_file(dirs.checkpoint()).unwrap();
    let out = Plugin::command(&dirs, &opts(&api)).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("is missing"), "{stderr}");
    assert!(stderr.contains(UID_A), "{stderr}");
    assert!(stderr.contains("--plugin-dir"), "{stderr}");
    assert_eq!(
        std::fs::read(dirs.spec_path(UID_A)).unwrap(),
        spec,
        "nothing swept"
    );

    // A first start (only the common spec there) writes an empty checkpoint at once.
    let fresh = Dirs::new();
    std::fs::create_dir_all(&fresh.cdi_root).unwrap();
    std::fs::write(fresh.spec_path("common"), b"{}").unwrap();
    let _plugin = Plugin::start(&fresh, opts(&api)).await;
    assert!(fresh.checkpoint().exists());
}

/// Checkpoint entries are held to the wire limits: a damaged value stops start naming the
/// file and the claim, and nothing is rewritten.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoint_values_past_the_limits_stop_start() {
    let api = start_api().await;
    let dirs = Dirs::new();
    let plugin = Plugin::start(&dirs, opts(&api)).await;
    let out = prepare(&dirs, vec![claim(UID_A, &handle(NODE, &[0], 2))]).await;
    assert_eq!(out[UID_A].error, "");
    plugin.kill9();
    for (from, to, why) in [
        (
            "\"split\": 2",
            "\"split\": 0",
            "split must be between 1 and 64, got 0",
        ),
        ("\"split\": 2", "\"split\": 100000", "got 100000"),
    ] {
        let good = std::fs::read_to_string(dirs.checkpoint()).unwrap();
        assert!(good.contains(from), "{good}");
        let bad = good.replace(from, to);
        std::fs::write(dirs.checkpoint(), &bad).unwrap();
        let spec = std::fs::read(dirs.spec_path(UID_A)).unwrap();
        let out = Plugin::command(&dirs, &opts(&api)).output().unwrap();
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&dirs.checkpoint().display().to_string()),
            "{stderr}"
        );
        assert!(stderr.contains(&format!("claim {UID_A}")), "{stderr}");
        assert!(stderr.contains(why), "{stderr}");
        assert_eq!(std::fs::read_to_string(dirs.checkpoint()).unwrap(), bad);
        assert_eq!(std::fs::read(dirs.spec_path(UID_A)).unwrap(), spec);
        std::fs::write(dirs.checkpoint(), good).unwrap();
    }
}

/// What a crash left behind (temp files of interrupted writes, old and new names) is
/// removed at start; a prepared claim's spec damaged or replaced by a symlink while the
/// plugin runs is rewritten on the next prepare, without touching the symlink's target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_leftovers_go_and_damaged_specs_are_rewritten() {
    let api = start_api().await;
    let dirs = Dirs::new();
    std::fs::create_dir_all(dirs.plugin_dir()).unwrap();
    let stale = [
        dirs.plugin_dir().join(".checkpoint.json.tmp"),
        dirs.plugin_dir()
            .join(".checkpoint.json.0123456789abcdef0123456789abcdef.tmp"),
    ];
    for f in &stale {
        std::fs::write(f, b"half a checkpoint").unwrap();
    }
    let _plugin = Plugin::start(&dirs, opts(&api)).await;
    for f in &stale {
        assert!(!f.exists(), "{} left", f.display());
    }
    let h = handle(NODE, &[0, 1], 2);
    let out = prepare(&dirs, vec![claim(UID_A, &h)]).await;
    assert_eq!(out[UID_A].error, "");
    let spec = std::fs::read(dirs.spec_path(UID_A)).unwrap();

    std::fs::write(dirs.spec_path(UID_A), b"{\"cdiVersion\": \"0.3.0\"}").unwrap();
    let again = prepare(&dirs, vec![claim(UID_A, &h)]).await;
    assert_eq!(again[UID_A].error, "");
    assert_eq!(std::fs::read(dirs.spec_path(UID_A)).unwrap(), spec);

    let victim = dirs.root.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    std::fs::remove_file(dirs.spec_path(UID_A)).unwrap();
    std::os::unix::fs::symlink(&victim, dirs.spec_path(UID_A)).unwrap();
    let again = prepare(&dirs, vec![claim(UID_A, &h)]).await;
    assert_eq!(again[UID_A].error, "");
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert!(
        !std::fs::symlink_metadata(dirs.spec_path(UID_A))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(std::fs::read(dirs.spec_path(UID_A)).unwrap(), spec);
    assert_eq!(
        std::fs::metadata(dirs.spec_path(UID_A))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        SPEC_MODE
    );
}

/// Claim uids that would make CDI names runtimes refuse get a per-claim error; a uid sent
/// twice in one call is answered once and consistently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_uids_and_duplicates_get_consistent_answers() {
    let api = start_api().await;
    let dirs = Dirs::new();
    let _plugin = Plugin::start(&dirs, opts(&api)).await;
    let mut claims: Vec<_> = ["ends-with-dot.", "ends-with-dash-", "ends_", "has:colon"]
        .iter()
        .enumerate()
        .map(|(i, uid)| claim(uid, &handle(NODE, &[i], 1)))
        .collect();
    // The same claim twice: one claim. Another uid with two different handles: refused,
    // and nothing prepared for it.
    claims.push(claim(UID_A, &handle(NODE, &[5], 1)));
    claims.push(claim(UID_A, &handle(NODE, &[5], 1)));
    claims.push(claim(UID_B, &handle(NODE, &[6], 1)));
    claims.push(claim(UID_B, &handle(NODE, &[7], 1)));
    let raw = v1alpha3(&dirs)
        .await
        .node_prepare_resources(dra_kubelet_proto::v1alpha3::NodePrepareResourcesRequest { claims })
        .await
        .unwrap()
        .into_inner();
    let keys: Vec<&str> = raw.claims.iter().map(|e| e.key.as_str()).collect();
    let mut distinct = keys.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(keys.len(), distinct.len(), "one answer per uid: {keys:?}");
    let answers = raw.into_map();
    for uid in ["ends-with-dot.", "ends-with-dash-", "ends_"] {
        assert!(
            answers[uid]
                .error
                .contains("must end with a letter or digit"),
            "{uid}: {:?}",
            answers[uid].error
        );
    }
    assert!(
        answers["has:colon"].error.contains("found ':'"),
        "{:?}",
        answers["has:colon"]
    );
    assert_eq!(answers[UID_A].error, "");
    assert_eq!(answers[UID_A].cdi_devices.len(), 2);
    assert!(
        answers[UID_B].error.contains("more than once"),
        "{:?}",
        answers[UID_B]
    );
    assert!(!dirs.spec_path(UID_B).exists());
    let cp = std::fs::read_to_string(dirs.checkpoint()).unwrap();
    assert!(cp.contains(UID_A) && !cp.contains(UID_B));
}
