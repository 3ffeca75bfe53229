//! The test kubelet: starts the real plugin binary against the emulated apiserver and
//! talks to it over its unix sockets with the generated clients.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use dra_kubelet_plugin::cdi::CdiKind;
use dra_kubelet_proto::{dra_v1, pluginregistration as reg, v1alpha2, v1alpha3};
use fake_dra_api::handle::AllocationHandle;
use fake_dra_kubelet_plugin::fake::devices::{DEFAULT_MODELS, Inventory};
use tonic::transport::Channel;

mod support;
#[allow(unused_imports)]
pub use support::{
    CLAIM_NS, allocated_claim_of, cannot_run, inject, start_api_with, validate_schema,
};

pub const DRIVER: &str = fake_dra_api::DEFAULT_DRIVER_NAME;
pub const NAMESPACE: &str = "fake-dra";

/// Guards against a hang, not a speed check: a plugin that is not up by then is broken.
const STARTUP_LIMIT: Duration = Duration::from_secs(60);

/// Where one plugin instance keeps its files; survives restarts of the process.
#[derive(Debug)]
pub struct Dirs {
    pub root: tempfile::TempDir,
    pub cdi_root: PathBuf,
    /// The driver name the plugin runs with (its registration socket is named after it).
    pub driver: &'static str,
}

impl Dirs {
    pub fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        let cdi_root = root.path().join("cdi");
        Self {
            root,
            cdi_root,
            driver: DRIVER,
        }
    }
    /// For a benchmark: under `FAKE_DRA_BENCH_DIR` if set (e.g. a tmpfs such as /dev/shm,
    /// which /var/run/cdi is on a real node, to separate file-system cost from the rest),
    /// else as [`Dirs::new`].
    pub fn for_bench() -> Self {
        match std::env::var_os("FAKE_DRA_BENCH_DIR") {
            Some(dir) => {
                let root = tempfile::tempdir_in(dir).unwrap();
                let cdi_root = root.path().join("cdi");
                Self {
                    root,
                    cdi_root,
                    driver: DRIVER,
                }
            }
            None => Self::new(),
        }
    }
    /// With CDI specs in `cdi_root` (e.g. /var/run/cdi for podman), for a plugin started
    /// with `--driver-name driver`.
    pub fn shared_cdi_root(cdi_root: PathBuf, driver: &'static str) -> Self {
        Self {
            root: tempfile::tempdir().unwrap(),
            cdi_root,
            driver,
        }
    }
    pub fn plugin_dir(&self) -> PathBuf {
        self.root.path().join("plugins").join(DRIVER)
    }
    pub fn registry_dir(&self) -> PathBuf {
        self.root.path().join("plugins_registry")
    }
    pub fn reg_socket(&self) -> PathBuf {
        self.registry_dir().join(format!("{}.sock", self.driver))
    }
    pub fn dra_socket(&self) -> PathBuf {
        self.plugin_dir().join("plugin.sock")
    }
    pub fn checkpoint(&self) -> PathBuf {
        self.plugin_dir().join("checkpoint.json")
    }
    pub fn spec_path(&self, id: &str) -> PathBuf {
        let kind = CdiKind::new(self.driver, fake_dra_kubelet_plugin::fake::CDI_CLASS).unwrap();
        self.cdi_root.join(kind.spec_file_name(id))
    }
    /// Our spec files, sorted.
    pub fn spec_files(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&self.cdi_root)
            .map(|rd| {
                rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with(&kind().spec_file_prefix()))
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }
}

pub fn kind() -> CdiKind {
    CdiKind::new(DRIVER, fake_dra_kubelet_plugin::fake::CDI_CLASS).unwrap()
}

pub fn inventory(node: &str) -> Inventory {
    let models: Vec<String> = DEFAULT_MODELS.iter().map(|m| m.to_string()).collect();
    Inventory::new(node, 8, &models).unwrap()
}

/// A handle for devices `idx` of `node`'s inventory.
pub fn handle(node: &str, idx: &[usize], split: u32) -> String {
    let inv = inventory(node);
    AllocationHandle {
        node_name: node.into(),
        model: inv.model.clone(),
        split,
        devices: idx.iter().map(|&i| inv.devices[i].clone()).collect(),
    }
    .to_json()
}

pub fn claim(uid: &str, handle: &str) -> v1alpha3::Claim {
    v1alpha3::Claim {
        namespace: "default".into(),
        uid: uid.into(),
        name: format!("claim-{uid}"),
        resource_handle: handle.into(),
    }
}

/// A running plugin process.
#[derive(Debug)]
pub struct Plugin {
    pub child: Child,
    pub node: String,
}

pub struct Options<'a> {
    pub node: &'a str,
    pub kubeconfig: &'a Path,
    pub env: Vec<(&'a str, &'a str)>,
    pub extra_args: Vec<String>,
}

impl Plugin {
    pub fn command(dirs: &Dirs, opts: &Options<'_>) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_fake-dra-kubelet-plugin"));
        cmd.arg("--node-name")
            .arg(opts.node)
            .arg("--namespace")
            .arg(NAMESPACE)
            .arg("--kubeconfig")
            .arg(opts.kubeconfig)
            .arg("--cdi-root")
            .arg(&dirs.cdi_root)
            .arg("--plugin-dir")
            .arg(dirs.plugin_dir())
            .arg("--registry-dir")
            .arg(dirs.registry_dir())
            .args(&opts.extra_args)
            .env_remove("FAKE_DRA_TEST_CRASH_POINT")
            .env(
                "RUST_LOG",
                std::env::var("PLUGIN_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdin(Stdio::null());
        for (k, v) in &opts.env {
            cmd.env(k, v);
        }
        cmd
    }

    /// Starts the plugin and waits until both sockets answer.
    pub async fn start(dirs: &Dirs, opts: Options<'_>) -> Self {
        Self::start_with(dirs, opts, |cmd| cmd).await
    }

    /// Starts the plugin through `wrap` (e.g. a shell that lowers a limit first) and waits
    /// until both sockets answer.
    pub async fn start_with(
        dirs: &Dirs,
        opts: Options<'_>,
        wrap: impl FnOnce(Command) -> Command,
    ) -> Self {
        let child = wrap(Self::command(dirs, &opts)).spawn().unwrap();
        let mut plugin = Self {
            child,
            node: opts.node.to_owned(),
        };
        plugin.wait_ready(dirs).await;
        plugin
    }

    async fn wait_ready(&mut self, dirs: &Dirs) {
        let deadline = Instant::now() + STARTUP_LIMIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("plugin exited during startup: {status} (its error is on stderr, above)");
            }
            if dirs.reg_socket().exists()
                && let Ok(mut c) = registration(dirs).await
                && c.get_info(reg::InfoRequest {}).await.is_ok()
            {
                return;
            }
            assert!(Instant::now() < deadline, "plugin did not come up");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn kill9(mut self) -> ExitStatus {
        self.child.kill().unwrap();
        self.child.wait().unwrap()
    }

    pub fn sigterm(mut self) -> ExitStatus {
        let pid = self.child.id().to_string();
        let ok = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(ok.success());
        self.child.wait().unwrap()
    }

    /// Waits for the process to end by itself (e.g. at a crash point).
    pub fn wait(mut self) -> ExitStatus {
        self.child.wait().unwrap()
    }
}

impl Drop for Plugin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub async fn registration(
    dirs: &Dirs,
) -> Result<reg::registration_client::RegistrationClient<Channel>, tonic::transport::Error> {
    Ok(reg::registration_client::RegistrationClient::new(
        dra_kubelet_proto::connect_unix(dirs.reg_socket()).await?,
    ))
}

pub async fn v1alpha3(dirs: &Dirs) -> v1alpha3::node_client::NodeClient<Channel> {
    v1alpha3::node_client::NodeClient::new(
        dra_kubelet_proto::connect_unix(dirs.dra_socket())
            .await
            .unwrap(),
    )
}

pub async fn v1alpha2(dirs: &Dirs) -> v1alpha2::node_client::NodeClient<Channel> {
    v1alpha2::node_client::NodeClient::new(
        dra_kubelet_proto::connect_unix(dirs.dra_socket())
            .await
            .unwrap(),
    )
}

/// Prepares claims over v1alpha3; returns the per-claim responses.
pub async fn prepare(
    dirs: &Dirs,
    claims: Vec<v1alpha3::Claim>,
) -> std::collections::HashMap<String, v1alpha3::NodePrepareResourceResponse> {
    v1alpha3(dirs)
        .await
        .node_prepare_resources(v1alpha3::NodePrepareResourcesRequest { claims })
        .await
        .unwrap()
        .into_inner()
        .into_map()
}

pub async fn unprepare(
    dirs: &Dirs,
    claims: Vec<v1alpha3::Claim>,
) -> std::collections::HashMap<String, v1alpha3::NodeUnprepareResourceResponse> {
    v1alpha3(dirs)
        .await
        .node_unprepare_resources(v1alpha3::NodeUnprepareResourcesRequest { claims })
        .await
        .unwrap()
        .into_inner()
        .into_map()
}

/// The driver's CRDs, as `kubectl apply -k deploy/<overlay>` installs them.
fn driver_crds() -> Vec<String> {
    fake_dra_api::crdgen::yaml_documents().expect("the driver's CRDs")
}

/// The emulated apiserver with the driver's namespace, as the deploy manifests create it.
/// A claim in the test namespace as a structured kubelet names it.
pub fn v1_claim(uid: &str, name: &str) -> dra_v1::Claim {
    dra_v1::Claim {
        namespace: support::CLAIM_NS.into(),
        uid: uid.into(),
        name: name.into(),
    }
}

/// A `dra.v1` client on the plugin's DRA socket, as kubelets 1.34+ call it.
pub async fn v1_client(dirs: &Dirs) -> dra_v1::dra_plugin_client::DraPluginClient<Channel> {
    v1_client_at(&dirs.dra_socket()).await
}

/// A `dra.v1` client on the DRA socket `socket`.
pub async fn v1_client_at(
    socket: &std::path::Path,
) -> dra_v1::dra_plugin_client::DraPluginClient<Channel> {
    dra_v1::dra_plugin_client::DraPluginClient::new(
        dra_kubelet_proto::connect_unix(socket).await.unwrap(),
    )
}

/// `dra.v1` `NodePrepareResources`: the answer per claim uid.
pub async fn prepare_v1(
    dirs: &Dirs,
    claims: Vec<dra_v1::Claim>,
) -> std::collections::HashMap<String, dra_v1::NodePrepareResourceResponse> {
    prepare_v1_at(&dirs.dra_socket(), claims).await
}

/// `dra.v1` `NodePrepareResources` on the DRA socket `socket`.
pub async fn prepare_v1_at(
    socket: &std::path::Path,
    claims: Vec<dra_v1::Claim>,
) -> std::collections::HashMap<String, dra_v1::NodePrepareResourceResponse> {
    v1_client_at(socket)
        .await
        .node_prepare_resources(dra_v1::NodePrepareResourcesRequest { claims })
        .await
        .unwrap()
        .into_inner()
        .into_map()
}

/// `dra.v1` `NodeUnprepareResources`: the answer per claim uid.
pub async fn unprepare_v1(
    dirs: &Dirs,
    claims: Vec<dra_v1::Claim>,
) -> std::collections::HashMap<String, dra_v1::NodeUnprepareResourceResponse> {
    v1_client(dirs)
        .await
        .node_unprepare_resources(dra_v1::NodeUnprepareResourcesRequest { claims })
        .await
        .unwrap()
        .into_inner()
        .into_map()
}

pub async fn start_api() -> fake_dra_emulator::apiserver::ApiServer {
    let _ = rustls::crypto::ring::default_provider().install_default();
    use fake_dra_emulator::apiserver::{ApiServer, ApiServerOptions};
    let api = ApiServer::start_with(ApiServerOptions {
        crds: driver_crds(),
        ..ApiServerOptions::default()
    })
    .await
    .unwrap();
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(api.client().unwrap());
    let ns = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}
    }))
    .unwrap();
    namespaces.create(&Default::default(), &ns).await.unwrap();
    api
}

/// The emulated apiserver of Kubernetes `version` (which decides the `resource.k8s.io`
/// versions served) with the driver's CRDs, its namespace and [`CLAIM_NS`].
pub async fn start_api_version(version: (u32, u32)) -> fake_dra_emulator::apiserver::ApiServer {
    start_api_with(version, driver_crds(), &[NAMESPACE, CLAIM_NS]).await
}

/// Opaque claim parameters of ours with `spec`.
pub fn params(spec: serde_json::Value) -> serde_json::Value {
    serde_json::json!({"apiVersion": "fake.resource.3-shake.com/v1alpha1", "kind": "FakeClaimParameters", "spec": spec})
}

/// An allocation's `config` with one `FromClaim` entry of ours.
pub fn claim_config(spec: serde_json::Value) -> serde_json::Value {
    serde_json::json!([{"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": params(spec)}}])
}

/// Creates a claim through `version` and writes its allocation as the scheduler would:
/// devices `fake-<i>` of `pool` for request `req`, with `config` (`None`: no allocation).
/// Returns the claim's uid.
pub async fn allocated_claim(
    api: &fake_dra_emulator::apiserver::ApiServer,
    version: &str,
    name: &str,
    pool: &str,
    idx: &[usize],
    config: Option<serde_json::Value>,
) -> String {
    let devices: Vec<String> = idx.iter().map(|i| format!("fake-{i}")).collect();
    allocated_claim_of(api, version, name, DRIVER, pool, &devices, config).await
}
