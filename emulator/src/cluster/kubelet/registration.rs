//! Plugin registration (`pkg/kubelet/pluginmanager`) and the DRA registration handler
//! (`pkg/kubelet/cm/dra/plugin`: `registration.go` up to 1.33, `dra_plugin_manager.go`
//! from 1.34):
//!
//! - sockets appearing in the registration dir (names starting with `.` ignored) are
//!   dialled with the `:authority` the real kubelet sends ([`dial_authority`]); `GetInfo`
//!   (1 s) must answer type `DRAPlugin`, a name, an endpoint and a version the release
//!   knows (1.27–1.30: a semantic version; 1.32+: a `DRAPlugin` service,
//!   `validateSupportedServices`); the plugin is then registered and told
//!   `NotifyRegistrationStatus` (5 s). A removed socket deregisters; a re-created one
//!   (new inode) registers again. Upstream learns of changes through inotify; this
//!   kubelet rescans the directory every [`REGISTRY_SCAN`], which finds the same set.
//! - 1.27–1.30 keep one plugin per driver, a new registration replacing the old
//!   (`pluginsStore.add`), and so does 1.32, which wipes the driver's ResourceSlices as
//!   soon as its socket is removed. 1.33+ keep every instance and refuse an endpoint
//!   already registered for the driver ("endpoint … already registered"), and wipe a
//!   driver's slices [`super::DEFAULT_WIPING_DELAY`] after its last instance
//!   deregistered — or, 1.34+, after none of its instances is connected (`sync`) —
//!   unless it comes back first. 1.32+ wipe the node's ResourceSlices at startup.

use std::collections::{BTreeSet, HashMap};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use dra_kubelet_proto::{DRA_PLUGIN_TYPE, pluginregistration as reg};

use super::{NodeContext, PluginInstance};
use crate::cluster::structured::ResourceSlice;

/// How often the registration dir is rescanned.
const REGISTRY_SCAN: Duration = Duration::from_millis(100);
/// How often (1.34+) each plugin's connection is checked.
const CONNECTION_CHECK: Duration = Duration::from_millis(500);
/// Upstream's timeouts (`pluginwatcher`).
const GET_INFO_TIMEOUT: Duration = Duration::from_secs(1);
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(5);

/// Which plugin socket a kubelet dials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Socket {
    Registration,
    Dra,
}

/// The `:authority` a kubelet of `server_version` sends on a plugin socket.
///
/// The plugin watcher (`pkg/kubelet/pluginmanager/operationexecutor/operation_generator.go`,
/// `dial`: `grpc.DialContext(ctx, unixSocketPath, …, WithContextDialer)`, every release)
/// and the DRA client up to 1.33 (`pkg/kubelet/cm/dra/plugin`, `grpc.Dial(endpoint, …)`)
/// hand grpc-go the bare socket path, which grpc-go sends as the authority: raw before
/// grpc-go 1.57 (kubelet 1.27: v1.51.0, 1.28: v1.54.0), %-encoded since (`clientconn.go`,
/// `encodeAuthority`; kubelet 1.29: v1.58.3). The 1.34+ DRA client dials `"unix:" + path`
/// (`grpc.NewClient`), for which grpc-go sends `localhost`.
pub(super) fn dial_authority(server_version: (u32, u32), socket: &Path, kind: Socket) -> String {
    if kind == Socket::Dra && server_version >= (1, 34) {
        return "localhost".into();
    }
    let path = socket.to_string_lossy();
    if server_version >= (1, 29) {
        dra_kubelet_proto::authority::grpc_go_encoded_authority(&path)
    } else {
        path.into_owned()
    }
}

/// Connects to a plugin socket as the kubelet of `server_version` does.
pub(super) async fn dial(
    server_version: (u32, u32),
    socket: &Path,
    kind: Socket,
) -> Result<tonic::transport::Channel, String> {
    let authority = dial_authority(server_version, socket, kind);
    dra_kubelet_proto::connect_unix_with_authority(socket, authority)
        .await
        .map_err(|e| format!("dialling {}: {e}", socket.display()))
}

/// One socket seen in the registration dir, by inode and change time: a re-created
/// socket is a new one even when the file system hands out the same inode again (upstream
/// sees its creation through inotify).
type SocketId = (PathBuf, u64, i64, i64);

pub(super) async fn watch_registry(ctx: Arc<NodeContext>) {
    // Socket → the driver and endpoint it registered (None: registration failed).
    let mut known: HashMap<SocketId, Option<(String, PathBuf)>> = HashMap::new();
    loop {
        let present = scan_sockets(&ctx.dirs.registry_dir);
        let gone: Vec<SocketId> = known
            .keys()
            .filter(|id| !present.contains(*id))
            .cloned()
            .collect();
        for id in gone {
            if let Some(Some((driver, endpoint))) = known.remove(&id) {
                deregister(&ctx, &driver, &endpoint).await;
            }
        }
        for id in present {
            if known.contains_key(&id) {
                continue;
            }
            let registered = match register(&ctx, &id.0).await {
                Ok((driver, endpoint)) => Some((driver, endpoint)),
                Err(error) => {
                    tracing::warn!(node = %ctx.node, socket = %id.0.display(), %error, "plugin registration failed");
                    None
                }
            };
            known.insert(id, registered);
        }
        tokio::time::sleep(REGISTRY_SCAN).await;
    }
}

fn scan_sockets(dir: &Path) -> BTreeSet<SocketId> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeSet::new();
    };
    entries
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            use std::os::unix::fs::FileTypeExt;
            meta.file_type()
                .is_socket()
                .then(|| (e.path(), meta.ino(), meta.ctime(), meta.ctime_nsec()))
        })
        .collect()
}

/// The DRA gRPC service the kubelet talks to a plugin through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PluginApi {
    /// `v1alpha3.Node`, falling back to `v1alpha2.Node` (kubelets 1.28–1.30), or
    /// `v1alpha2.Node` only (1.27).
    Classic,
    /// `k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin`.
    V1Beta1,
    /// `k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin`.
    V1,
}

/// The structured services a kubelet of `server_version` knows, newest first.
pub fn known_services(server_version: (u32, u32)) -> Vec<(&'static str, PluginApi)> {
    if server_version >= (1, 34) {
        vec![
            (dra_kubelet_proto::SUPPORTED_V1, PluginApi::V1),
            (dra_kubelet_proto::SUPPORTED_V1BETA1, PluginApi::V1Beta1),
        ]
    } else {
        vec![(dra_kubelet_proto::SUPPORTED_V1BETA1, PluginApi::V1Beta1)]
    }
}

/// `validateSupportedServices`: the first of the kubelet's services the plugin lists.
pub fn choose_service(
    server_version: (u32, u32),
    supported: &[String],
) -> Result<PluginApi, String> {
    if supported.is_empty() {
        return Err("empty list of supported versions".into());
    }
    let known = known_services(server_version);
    known
        .iter()
        .find(|(name, _)| supported.iter().any(|s| s == name))
        .map(|(_, api)| *api)
        .ok_or_else(|| {
            let names: Vec<&str> = known.iter().map(|(n, _)| *n).collect();
            format!(
                "none of the supported versions {supported:?} is a DRA service this kubelet knows ({})",
                names.join(", ")
            )
        })
}

/// `GetInfo`, validation, registration, `NotifyRegistrationStatus` (in the plugin
/// watcher's order: the plugin hears the outcome of the handler's `RegisterPlugin`);
/// returns the driver and its DRA socket.
async fn register(ctx: &Arc<NodeContext>, socket: &Path) -> Result<(String, PathBuf), String> {
    let version = ctx.release.0;
    let channel = dial(version, socket, Socket::Registration).await?;
    let mut client = reg::registration_client::RegistrationClient::new(channel);
    let info = tokio::time::timeout(GET_INFO_TIMEOUT, client.get_info(reg::InfoRequest {}))
        .await
        .map_err(|_| "GetInfo timed out".to_string())?
        .map_err(|e| format!("GetInfo: {e}"))?
        .into_inner();
    let endpoint = PathBuf::from(&info.endpoint);
    let verdict = match validate(&info, version) {
        Ok(api) => add_plugin(ctx, socket, &info.name, &endpoint, api).await,
        Err(e) => Err(e),
    };
    let status = reg::RegistrationStatus {
        plugin_registered: verdict.is_ok(),
        error: verdict.clone().err().unwrap_or_default(),
    };
    tokio::time::timeout(NOTIFY_TIMEOUT, client.notify_registration_status(status))
        .await
        .map_err(|_| "NotifyRegistrationStatus timed out".to_string())?
        .map_err(|e| format!("NotifyRegistrationStatus: {e}"))?;
    verdict?;
    tracing::info!(node = %ctx.node, driver = %info.name, endpoint = %endpoint.display(), "DRA plugin registered");
    ctx.registrations.fetch_add(1, Ordering::SeqCst);
    Ok((info.name, endpoint))
}

/// The registration handler's `RegisterPlugin`: stores the instance, then re-evaluates
/// the driver's pending slice wipe.
async fn add_plugin(
    ctx: &Arc<NodeContext>,
    socket: &Path,
    driver: &str,
    endpoint: &Path,
    api: PluginApi,
) -> Result<(), String> {
    let instance = PluginInstance {
        socket: socket.to_path_buf(),
        endpoint: endpoint.to_path_buf(),
        api,
        connected: Arc::new(AtomicBool::new(true)),
    };
    {
        let mut plugins = ctx.plugins.write().await;
        let instances = plugins.entry(driver.to_string()).or_default();
        if ctx.release.plugin_store() {
            // `pluginsStore.add`: one instance cannot hijack another's endpoint.
            if instances.iter().any(|p| p.endpoint == endpoint) {
                return Err(format!(
                    "endpoint {} already registered for DRA driver plugin {driver}",
                    endpoint.display()
                ));
            }
            instances.push(instance);
        } else {
            // 1.27–1.30: the newest registration replaces the driver's plugin.
            *instances = vec![instance];
        }
    }
    sync(ctx, driver).await;
    Ok(())
}

/// `DeRegisterPlugin`: the registration socket is gone.
async fn deregister(ctx: &Arc<NodeContext>, driver: &str, endpoint: &Path) {
    let removed = {
        let mut plugins = ctx.plugins.write().await;
        if ctx.release.plugin_store() {
            if let Some(instances) = plugins.get_mut(driver) {
                instances.retain(|p| p.endpoint != endpoint);
                if instances.is_empty() {
                    plugins.remove(driver);
                }
            }
            false
        } else {
            // Up to 1.32 the store has one plugin per driver and forgets it by name,
            // even when a newer registration replaced the instance whose socket is gone.
            plugins.remove(driver).is_some()
        }
    };
    tracing::info!(node = %ctx.node, %driver, endpoint = %endpoint.display(), "DRA plugin deregistered (socket removed)");
    if removed && ctx.release.wipes_slices_at_deregistration() {
        tokio::spawn(wipe_slices(
            ctx.clone(),
            Some(driver.to_string()),
            Duration::ZERO,
        ));
    }
    sync(ctx, driver).await;
}

/// Whether any instance of `driver` can take calls.
async fn usable(ctx: &NodeContext, driver: &str) -> bool {
    ctx.plugins
        .read()
        .await
        .get(driver)
        .is_some_and(|instances| instances.iter().any(|p| p.connected.load(Ordering::SeqCst)))
}

/// `sync`: a usable driver cancels its pending wipe; an unusable one gets one (a wipe
/// already pending keeps its original time).
async fn sync(ctx: &Arc<NodeContext>, driver: &str) {
    if !ctx.release.plugin_store() {
        return;
    }
    let usable = usable(ctx, driver).await;
    let mut pending = lock(&ctx.pending_wipes);
    pending.retain(|_, task| !task.is_finished());
    if usable {
        if let Some(task) = pending.remove(driver) {
            tracing::info!(node = %ctx.node, %driver, "DRA driver usable again; ResourceSlice wipe cancelled");
            task.abort();
        }
        return;
    }
    if pending.contains_key(driver) {
        return;
    }
    tracing::info!(node = %ctx.node, %driver, delay = ?ctx.wiping_delay, "DRA driver unusable; its ResourceSlices will be wiped");
    let task = tokio::spawn(wipe_slices(
        ctx.clone(),
        Some(driver.to_string()),
        ctx.wiping_delay,
    ));
    pending.insert(driver.to_string(), task.abort_handle());
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Forgets every pending wipe (the kubelet process that scheduled them is gone).
pub(super) fn forget_pending_wipes(ctx: &NodeContext) {
    for (_, task) in lock(&ctx.pending_wipes).drain() {
        task.abort();
    }
}

/// `wipeResourceSlices`: after `delay`, deletes the ResourceSlices of this node (of
/// `driver` only, when given), retrying with backoff until it succeeds.
pub(super) async fn wipe_slices(ctx: Arc<NodeContext>, driver: Option<String>, delay: Duration) {
    let Some(api) = ctx.structured.clone() else {
        return;
    };
    tokio::time::sleep(delay).await;
    let mut backoff = Duration::from_secs(1);
    loop {
        let result: Result<usize, kube::Error> = async {
            let slices: Vec<ResourceSlice> = api.list(None).await?;
            let mut deleted = 0;
            for slice in slices {
                let ours = slice.spec.node_name.as_deref() == Some(ctx.node.as_str())
                    && driver.as_ref().is_none_or(|d| &slice.spec.driver == d);
                let Some(name) = slice.metadata.name.as_deref().filter(|_| ours) else {
                    continue;
                };
                match api.delete::<ResourceSlice>(None, name).await {
                    Ok(()) => deleted += 1,
                    Err(kube::Error::Api(status)) if status.code == 404 => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(deleted)
        }
        .await;
        match result {
            Ok(deleted) => {
                tracing::info!(node = %ctx.node, driver = driver.as_deref().unwrap_or("(all)"), deleted, "wiped the node's ResourceSlices");
                return;
            }
            Err(error) => {
                tracing::debug!(node = %ctx.node, %error, "wiping ResourceSlices failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(300));
            }
        }
    }
}

/// 1.34+: each instance's gRPC connection is watched (`monitoredPlugin`, a gRPC stats
/// handler); here, whether its DRA socket accepts a connection. A change re-runs
/// [`sync`] for the driver.
pub(super) async fn monitor_connections(ctx: Arc<NodeContext>) {
    loop {
        let instances: Vec<(String, PluginInstance)> = ctx
            .plugins
            .read()
            .await
            .iter()
            .flat_map(|(d, ps)| ps.iter().map(|p| (d.clone(), p.clone())))
            .collect();
        for (driver, instance) in instances {
            let up = tokio::net::UnixStream::connect(&instance.endpoint)
                .await
                .is_ok();
            if instance.connected.swap(up, Ordering::SeqCst) != up {
                tracing::info!(node = %ctx.node, %driver, endpoint = %instance.endpoint.display(), connected = up, socket = %instance.socket.display(), "DRA plugin connection changed");
                sync(&ctx, &driver).await;
            }
        }
        tokio::time::sleep(CONNECTION_CHECK).await;
    }
}

/// What the kubelet accepts from a DRA plugin: 1.27–1.30 a semantic version, 1.32+ a
/// structured service it knows.
fn validate(info: &reg::PluginInfo, server_version: (u32, u32)) -> Result<PluginApi, String> {
    if info.r#type != DRA_PLUGIN_TYPE {
        return Err(format!(
            "plugin type {:?} is not {DRA_PLUGIN_TYPE}",
            info.r#type
        ));
    }
    if info.name.is_empty() {
        return Err("plugin name is empty".into());
    }
    if info.endpoint.is_empty() {
        return Err("plugin endpoint is empty".into());
    }
    if crate::apiserver::is_structured(server_version) {
        return choose_service(server_version, &info.supported_versions);
    }
    if !info.supported_versions.iter().any(|v| parses_as_semver(v)) {
        return Err(format!(
            "none of the versions {:?} is a semantic version this kubelet supports",
            info.supported_versions
        ));
    }
    Ok(PluginApi::Classic)
}

/// `utilversion.ParseGeneric`-like: an optional `v`, then 1–3 dot-separated numbers, major 1.
fn parses_as_semver(v: &str) -> bool {
    let v = v.strip_prefix('v').unwrap_or(v);
    let parts: Vec<&str> = v.split('.').collect();
    (1..=3).contains(&parts.len())
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        && parts[0] == "1"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_as_kubelet_1_30_reads_them() {
        assert!(parses_as_semver("1.0.0"));
        assert!(parses_as_semver("v1.0"));
        assert!(!parses_as_semver("v1.DRAPlugin"));
        assert!(!parses_as_semver("2.0.0"));
        assert!(!parses_as_semver(""));
    }

    #[test]
    fn chooses_services_as_kubelet_1_34() {
        let both = vec!["v1.DRAPlugin".to_string(), "v1beta1.DRAPlugin".to_string()];
        assert_eq!(choose_service((1, 34), &both), Ok(PluginApi::V1));
        assert_eq!(choose_service((1, 33), &both), Ok(PluginApi::V1Beta1));
        assert_eq!(choose_service((1, 32), &both), Ok(PluginApi::V1Beta1));
        let beta = vec!["v1beta1.DRAPlugin".to_string()];
        assert_eq!(choose_service((1, 34), &beta), Ok(PluginApi::V1Beta1));
        let v1 = vec!["v1.DRAPlugin".to_string()];
        assert!(choose_service((1, 33), &v1).is_err());
        assert!(choose_service((1, 34), &["1.0.0".to_string()]).is_err());
        assert!(choose_service((1, 34), &[]).is_err());
    }

    #[test]
    fn authorities_as_each_release_sends_them() {
        let socket = Path::new("/var/lib/kubelet/plugins_registry/d.sock");
        let encoded = "%2Fvar%2Flib%2Fkubelet%2Fplugins_registry%2Fd.sock";
        let raw = "/var/lib/kubelet/plugins_registry/d.sock";
        assert_eq!(dial_authority((1, 27), socket, Socket::Registration), raw);
        assert_eq!(dial_authority((1, 28), socket, Socket::Dra), raw);
        assert_eq!(dial_authority((1, 29), socket, Socket::Dra), encoded);
        assert_eq!(dial_authority((1, 33), socket, Socket::Dra), encoded);
        assert_eq!(
            dial_authority((1, 34), socket, Socket::Registration),
            encoded
        );
        assert_eq!(dial_authority((1, 34), socket, Socket::Dra), "localhost");
    }
}
