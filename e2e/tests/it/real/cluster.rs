//! The real one-node cluster of `hack/local-cluster.sh` (Kubernetes built from the Go
//! module proxy, see docs/real-kubernetes.md), driven the way a user drives it: the hack
//! scripts to build the images, bring it up, deploy `deploy/structured` and take it down;
//! `kubectl` for what users type; a kube-rs client for reads.
//!
//! [`RealCluster::start`] says why it cannot run (not root, components not built, a
//! cluster already running, ...) instead of failing, so the suite can skip; the returned
//! cluster takes itself down when dropped, also when a scenario panics (after printing
//! what a failing run needs: pods, events, slices, the plugin's log).

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};

use super::protocol::Release;

/// Set to `1` to leave the cluster running after the suite (for a look with kubectl);
/// `hack/local-cluster.sh down` removes it.
pub const KEEP_ENV: &str = "FAKE_DRA_KEEP_REAL_CLUSTER";

/// Where `hack/local-cluster.sh up` puts the node's API server and etcd.
/// The driver's binaries, packed into its image.
const CONTROLLER: &str = "fake-dra-controller";
const KUBELET_PLUGIN: &str = "fake-dra-kubelet-plugin";
const NODE_IP: &str = "10.200.0.1";
const API_SERVER: &str = "10.200.0.1:6443";
const ETCD: &str = "127.0.0.1:2379";
/// What the plugin's DaemonSet pods carry.
pub const PLUGIN_LABEL: &str = "app.kubernetes.io/name=fake-dra-kubelet-plugin";
pub const DRIVER_NAMESPACE: &str = "fake-dra";

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
}

/// The layout `hack/local-cluster.sh env` prints (KUBECONFIG, KUBE_BIN, NODE_NAME, ...).
#[derive(Debug, Clone)]
pub struct Layout {
    vars: BTreeMap<String, String>,
}

impl Layout {
    fn read(images_dir: &Path) -> Result<Self, String> {
        let mut env = Command::new(repo().join("hack/local-cluster.sh"));
        env.arg("env").env("IMAGES_DIR", images_dir);
        let out = output_within(env, None, "hack/local-cluster.sh env")?;
        if !out.status.success() {
            return Err(format!(
                "hack/local-cluster.sh env failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        // `printf %q` output: the paths here have no characters that need quoting.
        let vars = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Ok(Self { vars })
    }

    pub fn get(&self, key: &str) -> &str {
        self.vars.get(key).map(String::as_str).unwrap_or_default()
    }

    pub fn kube_bin(&self) -> PathBuf {
        PathBuf::from(self.get("KUBE_BIN"))
    }

    pub fn kubeconfig(&self) -> PathBuf {
        PathBuf::from(self.get("KUBECONFIG"))
    }

    pub fn node(&self) -> &str {
        self.get("NODE_NAME")
    }

    pub fn cluster_dir(&self) -> PathBuf {
        PathBuf::from(self.get("CLUSTER_DIR"))
    }
}

/// Output of a command that ran: stdout on success, the error a user would see otherwise.
pub type CmdResult = Result<String, String>;

/// How long one command of the suite may run. The slowest, `hack/local-cluster.sh up`, takes
/// about two minutes on two busy cores; one still running after this is stuck. A CI run
/// once printed nothing for 40 minutes until CI's own limit ended it; now the command is
/// killed, with its process group, and the scenario fails naming it.
pub const COMMAND_LIMIT: Duration = Duration::from_secs(600);

/// Runs `command` to its end, `stdin` written to it, within [`COMMAND_LIMIT`].
pub fn output_within(
    command: Command,
    stdin: Option<&str>,
    what: &str,
) -> Result<std::process::Output, String> {
    output_within_limit(command, stdin, what, COMMAND_LIMIT)
}

fn output_within_limit(
    mut command: Command,
    stdin: Option<&str>,
    what: &str,
    limit: Duration,
) -> Result<std::process::Output, String> {
    use std::io::Write;
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    command
        .process_group(0)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command
        .spawn()
        .map_err(|e| format!("cannot run {what}: {e}"))?;
    let group = child.id();
    let input = stdin.map(str::to_owned);
    let (done, ended) = std::sync::mpsc::channel();
    // The wait happens on a thread of its own, so a command that never ends (or never reads
    // its stdin) cannot hold the suite.
    std::thread::spawn(move || {
        let written = match (child.stdin.take(), input) {
            (Some(mut pipe), Some(text)) => pipe.write_all(text.as_bytes()),
            _ => Ok(()),
        };
        let _ = done.send((written, child.wait_with_output()));
    });
    match ended.recv_timeout(limit) {
        Ok((_, Err(e))) => Err(format!("{what}: {e}")),
        Ok((Err(e), Ok(out))) if out.status.success() => Err(format!("{what} stdin: {e}")),
        Ok((_, Ok(out))) => Ok(out),
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{group}")])
                .status();
            let printed = match ended.recv_timeout(Duration::from_secs(10)) {
                Ok((_, Ok(out))) => format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ),
                _ => "(its output stayed open after the kill)".to_string(),
            };
            Err(format!(
                "{what} was still running after {} s (COMMAND_LIMIT) and was killed; it printed:\n{}",
                limit.as_secs(),
                printed.trim()
            ))
        }
    }
}

fn run(command: Command, what: &str) -> CmdResult {
    let out = output_within(command, None, what)?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        )
        .trim()
        .to_string())
    }
}

/// Like [`run`], with `stdin` written to the command; the error is its stderr.
fn run_with_stdin(command: Command, stdin: &str, what: &str) -> CmdResult {
    let out = output_within(command, Some(stdin), what)?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().next().map(|u| u == "0"))
        })
        .unwrap_or(false)
}

fn listening(addr: &str) -> bool {
    addr.parse::<SocketAddr>()
        .is_ok_and(|a| TcpStream::connect_timeout(&a, Duration::from_millis(300)).is_ok())
}

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(tool).is_file()))
}

/// What must be on the machine before the suite can bring a cluster up; each missing
/// piece is named with how to get it.
fn missing_prerequisites(layout: &Layout, bin_dir: &Path) -> Vec<String> {
    let mut missing = Vec::new();
    if !is_root() {
        missing.push(
            "root (the cluster mounts, makes network interfaces and iptables rules)".to_string(),
        );
    }
    let kube_bin = layout.kube_bin();
    let components = [
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kubelet",
        "kube-proxy",
        "kubectl",
        "etcd",
        "containerd",
        "containerd-shim-runc-v2",
        "ctr",
        "crictl",
        "pause",
        "ociarchive",
    ];
    let absent: Vec<&str> = components
        .iter()
        .copied()
        .filter(|c| !kube_bin.join(c).is_file())
        .collect();
    if !absent.is_empty() {
        missing.push(format!(
            "the Go-built components {absent:?} in {} (hack/kube-build.sh)",
            kube_bin.display()
        ));
    }
    for (tool, package) in [
        ("runc", "runc"),
        ("iptables", "iptables"),
        ("openssl", "openssl"),
        ("ip", "iproute2"),
        ("strip", "binutils"),
        (
            "go",
            "Go (hack/build-image-local.sh checks the tools group's stamp)",
        ),
    ] {
        if !on_path(tool) && !Path::new("/usr/sbin").join(tool).is_file() {
            missing.push(format!("{tool} ({package})"));
        }
    }
    if !Path::new("/usr/lib/cni/bridge").is_file() {
        missing.push("CNI plugins in /usr/lib/cni (containernetworking-plugins)".into());
    }
    if !Path::new("/bin/busybox").is_file() {
        missing.push("/bin/busybox (busybox-static), the examples' image".into());
    }
    for bin in [CONTROLLER, KUBELET_PLUGIN] {
        if !bin_dir.join(bin).is_file() {
            missing.push(format!(
                "{bin} in {} (cargo build --workspace --bins)",
                bin_dir.display()
            ));
        }
    }
    missing
}

/// A running cluster of `hack/local-cluster.sh` with `deploy/structured` installed.
/// Dropping it runs `hack/local-cluster.sh down` (unless [`KEEP_ENV`] is `1`).
pub struct RealCluster {
    layout: Layout,
    images_dir: PathBuf,
    path: std::ffi::OsString,
    client: kube::Client,
}

impl std::fmt::Debug for RealCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RealCluster")
            .field("layout", &self.layout)
            .field("images_dir", &self.images_dir)
            .finish_non_exhaustive()
    }
}

impl RealCluster {
    /// `Err(why)` when this machine cannot run the suite (a skip, or a failure when the
    /// suite is required); panics when the cluster itself misbehaves.
    pub async fn start() -> Result<Self, String> {
        let plugin =
            fake_dra_emulator::binaries::locate(KUBELET_PLUGIN, None).map_err(|e| e.to_string())?;
        let bin_dir = plugin.parent().map(Path::to_path_buf).unwrap_or_default();
        // Our own image archives: packed from the binaries `cargo test` built (so the
        // cluster runs the code under test), apart from hack/real-k8s-demo.sh's.
        let images_dir = repo().join("target/kube/e2e-images");
        let layout = Layout::read(&images_dir)?;
        let missing = missing_prerequisites(&layout, &bin_dir);
        if !missing.is_empty() {
            return Err(format!("missing: {}", missing.join("; ")));
        }
        // The node IP is only ever on lo while a cluster is up (connecting to it otherwise
        // may reach whatever the default route leads to).
        let node_ip_here = run(
            {
                let mut c = Command::new("ip");
                c.args(["-4", "-o", "addr", "show", "dev", "lo"]);
                c
            },
            "ip",
        )
        .is_ok_and(|out| out.contains(&format!(" {}/", NODE_IP)));
        if listening(ETCD) || (node_ip_here && listening(API_SERVER)) {
            return Err(format!(
                "a cluster already runs on this machine ({API_SERVER} or {ETCD} answers; \
                 hack/local-cluster.sh status): only one fits, and it is not this suite's"
            ));
        }
        let path = {
            let mut dirs = vec![layout.kube_bin()];
            dirs.extend(std::env::split_paths(
                &std::env::var_os("PATH").unwrap_or_default(),
            ));
            std::env::join_paths(dirs).map_err(|e| e.to_string())?
        };
        let mut cluster = PartialCluster {
            layout: layout.clone(),
            images_dir: images_dir.clone(),
            path: path.clone(),
            armed: true,
        };
        // Leftovers of an earlier run that was killed (nothing runs: checked above).
        let _ = cluster.script("hack/local-cluster.sh", &["down"]);
        cluster
            .script(
                "hack/build-image-local.sh",
                &["--bin-dir", &bin_dir.display().to_string()],
            )
            .unwrap_or_else(|e| panic!("hack/build-image-local.sh: {e}"));
        let up = cluster
            .script("hack/local-cluster.sh", &["up"])
            .unwrap_or_else(|e| panic!("hack/local-cluster.sh up: {e}"));
        let summary = up
            .lines()
            .filter(|l| l.starts_with("cluster up in"))
            .collect::<String>();
        eprintln!("real cluster: {summary}");
        cluster
            .script("hack/deploy.sh", &["structured"])
            .unwrap_or_else(|e| panic!("hack/deploy.sh structured: {e}"));
        let kubeconfig = Kubeconfig::read_from(layout.kubeconfig())
            .unwrap_or_else(|e| panic!("reading {}: {e}", layout.kubeconfig().display()));
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .unwrap_or_else(|e| panic!("kubeconfig: {e}"));
        // kube's TLS is rustls with ring; name the provider in case another one is linked.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = kube::Client::try_from(config).unwrap_or_else(|e| panic!("kube client: {e}"));
        cluster.armed = false;
        Ok(Self {
            layout,
            images_dir,
            path,
            client,
        })
    }

    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    pub fn node(&self) -> &str {
        self.layout.node()
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The release hack/local-cluster.sh runs (`KUBE_MODULE`) with the gates set by hand
    /// (`KUBE_FEATURE_GATES`, which hack/local-cluster.sh passes to every component).
    pub fn release(&self) -> Release {
        let version = self.layout.get("KUBE_VERSION");
        let gates = std::env::var(super::protocol::FEATURE_GATES_ENV).unwrap_or_default();
        Release::parse(version, &gates)
            .unwrap_or_else(|| panic!("hack/local-cluster.sh env: KUBE_VERSION {version:?}"))
    }

    /// The `resource.k8s.io/v1` documents of `yaml` as `v1beta1` (hack/v1beta1.sh).
    pub fn to_v1beta1(&self, yaml: &str) -> CmdResult {
        run_with_stdin(
            self.command(repo().join("hack/v1beta1.sh")),
            yaml,
            "hack/v1beta1.sh",
        )
    }

    fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        command(program, &self.layout, &self.images_dir, &self.path)
    }

    /// `kubectl ARGS` as the cluster's admin; stdout, or the error kubectl printed.
    pub fn kubectl(&self, args: &[&str]) -> CmdResult {
        let mut c = self.command(self.layout.kube_bin().join("kubectl"));
        c.args(args);
        run(c, "kubectl")
    }

    /// `kubectl ARGS` with `stdin` (e.g. `apply -f -`).
    pub fn kubectl_stdin(&self, args: &[&str], stdin: &str) -> CmdResult {
        let mut c = self.command(self.layout.kube_bin().join("kubectl"));
        c.args(args);
        run_with_stdin(c, stdin, "kubectl")
    }

    /// `kubectl` as someone else, with only the flags given (no admin credentials):
    /// e.g. `--token` of a ServiceAccount.
    pub fn kubectl_as(&self, credentials: &[&str], args: &[&str], stdin: &str) -> CmdResult {
        let ca = self.layout.cluster_dir().join("pki/ca.crt");
        let server = format!("https://{API_SERVER}");
        let mut all: Vec<&str> = vec![
            "--kubeconfig=/dev/null",
            "--server",
            &server,
            "--certificate-authority",
        ];
        let ca = ca.display().to_string();
        all.push(&ca);
        all.extend_from_slice(credentials);
        all.extend_from_slice(args);
        self.kubectl_stdin(&all, stdin)
    }

    /// `hack/local-cluster.sh crictl ARGS`.
    pub fn crictl(&self, args: &[&str]) -> CmdResult {
        let mut c = self.command(repo().join("hack/local-cluster.sh"));
        c.arg("crictl").args(args);
        run(c, "crictl")
    }

    /// `hack/local-cluster.sh restart-kubelet`.
    pub fn restart_kubelet(&self) -> CmdResult {
        self.local_cluster(&["restart-kubelet"])
    }

    /// `hack/local-cluster.sh ARGS` (e.g. `restart kube-apiserver --down-for 40`).
    pub fn local_cluster(&self, args: &[&str]) -> CmdResult {
        let mut c = self.command(repo().join("hack/local-cluster.sh"));
        c.args(args);
        run(c, &format!("hack/local-cluster.sh {}", args.join(" ")))
    }
}

fn command(
    program: impl AsRef<std::ffi::OsStr>,
    layout: &Layout,
    images_dir: &Path,
    path: &std::ffi::OsStr,
) -> Command {
    let mut c = Command::new(program);
    c.current_dir(repo())
        .env("KUBECONFIG", layout.kubeconfig())
        .env("PATH", path)
        .env("IMAGES_DIR", images_dir)
        // kubectl and crictl look for these in $HOME; nothing of the user's applies here.
        .env_remove("KUBECTL_EXTERNAL_DIFF");
    c
}

/// The cluster while it is being set up: taken down if setup panics.
struct PartialCluster {
    layout: Layout,
    images_dir: PathBuf,
    path: std::ffi::OsString,
    armed: bool,
}

impl PartialCluster {
    fn script(&self, script: &str, args: &[&str]) -> CmdResult {
        let mut c = command(
            repo().join(script),
            &self.layout,
            &self.images_dir,
            &self.path,
        );
        c.args(args);
        run(c, script)
    }
}

impl Drop for PartialCluster {
    fn drop(&mut self) {
        if self.armed {
            down(&self.layout, &self.images_dir, &self.path);
        }
    }
}

fn down(layout: &Layout, images_dir: &Path, path: &std::ffi::OsStr) {
    if std::env::var(KEEP_ENV).as_deref() == Ok("1") {
        eprintln!(
            "real cluster left running ({KEEP_ENV}=1): export KUBECONFIG={} PATH={}:$PATH; \
             hack/local-cluster.sh down removes it",
            layout.kubeconfig().display(),
            layout.kube_bin().display()
        );
        return;
    }
    let mut c = command(
        repo().join("hack/local-cluster.sh"),
        layout,
        images_dir,
        path,
    );
    c.arg("down");
    match run(c, "hack/local-cluster.sh down") {
        Ok(out) => eprintln!("real cluster: {}", out.lines().last().unwrap_or_default()),
        Err(e) => eprintln!("hack/local-cluster.sh down failed: {e}"),
    }
}

impl Drop for RealCluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.diagnose();
        }
        down(&self.layout, &self.images_dir, &self.path);
    }
}

impl RealCluster {
    /// What a failing run prints before the cluster goes.
    pub fn diagnose(&self) {
        let show = |what: &str, r: CmdResult| {
            eprintln!(
                "--- {what}\n{}",
                r.unwrap_or_else(|e| format!("(failed: {e})"))
            );
        };
        show("pods", self.kubectl(&["get", "pods", "-A", "-o", "wide"]));
        show(
            "resourceclaims",
            self.kubectl(&["get", "resourceclaims", "-A", "-o", "wide"]),
        );
        show(
            "resourceslices",
            self.kubectl(&["get", "resourceslices", "-o", "wide"]),
        );
        show(
            "events",
            self.kubectl(&[
                "get",
                "events",
                "-A",
                "--sort-by=.lastTimestamp",
                "-o",
                "custom-columns=NS:.metadata.namespace,OBJ:.involvedObject.name,REASON:.reason,MESSAGE:.message",
            ]),
        );
        show(
            "plugin log (last 40 lines)",
            self.kubectl(&[
                "-n",
                DRIVER_NAMESPACE,
                "logs",
                "-l",
                PLUGIN_LABEL,
                "--tail=40",
            ]),
        );
        eprintln!(
            "--- component logs stay in {}/logs",
            self.layout.cluster_dir().display()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_past_its_limit_is_killed_with_its_children_and_named() {
        let marker = format!("fake-dra-limit-test-{}", std::process::id());
        let mut c = Command::new("bash");
        // A child that would outlive its parent, and output before the hang.
        c.args([
            "-c",
            &format!("echo started; (exec -a {marker} sleep 300) & sleep 300"),
        ]);
        let err = output_within_limit(c, None, "the stuck command", Duration::from_secs(1))
            .expect_err("a command past its limit fails");
        assert!(
            err.starts_with("the stuck command was still running after 1 s")
                && err.ends_with("started"),
            "{err}"
        );
        let left = Command::new("pgrep")
            .args(["-f", &marker])
            .output()
            .expect("pgrep");
        assert!(
            left.stdout.is_empty(),
            "the child outlived the kill: {}",
            String::from_utf8_lossy(&left.stdout)
        );
    }

    #[test]
    fn stdin_reaches_the_command_and_its_output_comes_back() {
        let mut c = Command::new("cat");
        c.arg("-");
        let out = output_within_limit(c, Some("hello"), "cat", Duration::from_secs(60))
            .expect("cat ends");
        assert!(out.status.success());
        assert_eq!(String::from_utf8_lossy(&out.stdout), "hello");
    }
}
