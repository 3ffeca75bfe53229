//! Running a [`Plugin`]: the checkpoint and CDI dir made to agree, the node's devices
//! published, the kubelet's sockets served (registration last), and on shutdown the
//! sockets removed first, so the kubelet deregisters the driver before anything stops.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use fake_dra_ops::conn::{self, Limits, Pool};
use fake_dra_proto::authority::RewriteIo;
use fake_dra_proto::pluginregistration;
use tokio_stream::StreamExt;
use tracing::{error, info, warn};

use crate::cdi::CdiKind;
use crate::driver::{Driver, DriverConfig};
use crate::hook::HookContext;
use crate::mode::{self, Mode, ModeFlag};
use crate::plugin::{DRA_SOCKET, Error, Plugin};
use crate::profile::DeviceProfile;
use crate::{claim_reader, fsutil, grpc, metrics, publish_slices, slices};

/// The `resource.k8s.io` versions the API server serves (empty if none), from discovery.
async fn served_resource_versions(client: &kube::Client) -> Result<Vec<String>, Error> {
    let groups = client.list_api_groups().await.map_err(Error::Discovery)?;
    Ok(groups
        .groups
        .into_iter()
        .filter(|g| g.name == "resource.k8s.io")
        .flat_map(|g| g.versions.into_iter().map(|v| v.version))
        .collect())
}

/// Applies `--mode`: classic needs no discovery, the others ask the API server.
async fn choose_mode(flag: ModeFlag, client: &kube::Client) -> Result<Mode, Error> {
    let served = match flag {
        ModeFlag::Classic => Vec::new(),
        ModeFlag::Auto | ModeFlag::Structured => served_resource_versions(client).await?,
    };
    let (mode, why) = mode::choose(flag, &served)?;
    info!("{why}");
    Ok(mode)
}

/// The connections of a plugin socket, whatever `:authority` the kubelet sends (see
/// `fake_dra_proto::authority`): a real kubelet sends the socket path, which h2 would
/// refuse.
fn kubelet_connections(
    listener: tokio::net::UnixListener,
    pool: &Pool,
) -> impl futures::Stream<Item = std::io::Result<RewriteIo<conn::Guarded<tokio::net::UnixStream>>>>
+ Send
+ 'static {
    conn::incoming(listener, pool.clone()).map(|c| c.map(RewriteIo::server))
}

/// See [`Plugin::run`].
/// Aborts the tasks it holds when dropped: the tasks a failed start had begun.
#[derive(Debug, Default)]
struct AbortOnDrop(Vec<tokio::task::AbortHandle>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

pub(crate) async fn run<D: DeviceProfile>(
    plugin: Plugin,
    profile: D,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let kind = CdiKind::new(&plugin.driver_name, profile.cdi_class())?;
    let client = plugin.client.clone();
    let mode = choose_mode(plugin.mode, &client).await?;
    #[cfg(feature = "classic")]
    let classic = match mode {
        Mode::Classic => {
            crate::cdi::check_classic_annotation_key(&plugin.driver_name)?;
            Some(plugin.classic.clone().ok_or(Error::NoClassic(""))?)
        }
        Mode::Structured(_) => None,
    };
    #[cfg(not(feature = "classic"))]
    if mode == Mode::Classic {
        return Err(Error::NoClassic(
            " (the library was built without its classic feature)",
        ));
    }
    let plugin_dir = plugin.plugin_dir_or_default();
    let driver_config = DriverConfig {
        node_name: plugin.node_name.clone(),
        kind,
        cdi_root: plugin.cdi_root.clone(),
        plugin_dir: plugin_dir.clone(),
        checkpoint_api_version: plugin.checkpoint_api_version_or_default(),
        checkpoint_kind: plugin.checkpoint_kind.clone(),
        #[cfg(feature = "test-crash-points")]
        crash_point: plugin.crash_point,
    };
    let driver = Arc::new(
        tokio::task::spawn_blocking(move || Driver::start(profile, driver_config))
            .await
            .map_err(|e| Error::Task(e.to_string()))??,
    );
    let metrics = Arc::new(metrics::Metrics::new(&plugin.metrics_prefix_or_default()));
    let ready = Arc::new(AtomicBool::new(false));
    let device_names: Vec<String> = driver
        .profile()
        .slice_devices()
        .into_iter()
        .map(|d| d.name)
        .collect();

    // Where the serving release wants counter sets, and how many taints a device may have.
    let layout = match mode {
        Mode::Structured(api) => publish_slices::counter_layout(&client, api).await,
        Mode::Classic => slices::CounterLayout::WithDevices,
    };
    // Everything spawned from here is aborted if the start fails further on (a socket or
    // the HTTP port that cannot be bound): the error is then the plugin's last word, not
    // followed by a watch's warning or a slice published for a plugin that never served.
    let mut started = AbortOnDrop::default();
    // The hook applies to structured DRA only.
    let hook_tasks = match mode {
        Mode::Classic => Vec::new(),
        Mode::Structured(resource_api) => plugin.hook.start(&HookContext {
            client: client.clone(),
            driver_name: plugin.driver_name.clone(),
            node_name: plugin.node_name.clone(),
            field_manager: plugin.field_manager_or_default(),
            devices: device_names.clone(),
            taint_rules: slices::TaintRules::of(layout),
            resource_api,
        }),
    };

    started
        .0
        .extend(hook_tasks.iter().map(tokio::task::JoinHandle::abort_handle));
    // Classic publishes the node for the driver's controller; structured publishes the
    // ResourceSlices.
    let publish_task = match mode {
        #[cfg(feature = "classic")]
        Mode::Classic => match &classic {
            Some(publisher) => tokio::spawn(publisher.run(driver.prepared(), ready.clone())),
            None => return Err(Error::NoClassic("")),
        },
        #[cfg(not(feature = "classic"))]
        Mode::Classic => return Err(Error::NoClassic("")),
        Mode::Structured(api) => {
            let desired = slices::Desired {
                driver: plugin.driver_name.clone(),
                node_name: plugin.node_name.clone(),
                devices: driver.profile().slice_devices(),
                counter_sets: driver.profile().counter_sets(),
                layout,
                split: driver.profile().slice_split(),
            };
            // Refused before anything is served: a pool that cannot be published is an
            // inventory error the operator must fix.
            slices::pack(&desired)?;
            let publisher = publish_slices::SlicePublisher::new(
                client.clone(),
                api,
                desired,
                plugin.hook.clone(),
            );
            tokio::spawn(publisher.run(ready.clone()))
        }
    };
    started.0.push(publish_task.abort_handle());

    let pool = Pool::new(Limits::from_flags(
        plugin.max_connections,
        plugin.idle_timeout.as_secs(),
    ));
    let http_task = match plugin.http_address {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| Error::Bind {
                    path: PathBuf::from(addr.to_string()),
                    source,
                })?;
            let metrics = metrics.clone();
            let endpoints = fake_dra_ops::health::Endpoints {
                ready: ready.clone(),
                not_ready: "not ready",
                metrics: Arc::new(move || metrics.encode()),
            };
            Some(tokio::spawn(fake_dra_ops::health::serve(
                listener,
                pool.clone(),
                endpoints,
            )))
        }
        None => None,
    };
    started
        .0
        .extend(http_task.iter().map(tokio::task::JoinHandle::abort_handle));

    let dra_path = plugin_dir.join(DRA_SOCKET);
    let reg_path = plugin
        .registry_dir
        .join(format!("{}.sock", plugin.driver_name));
    let bind = |path: &PathBuf| {
        grpc::bind(path).map_err(|source| Error::Bind {
            path: path.clone(),
            source,
        })
    };

    let node = grpc::NodeService {
        driver: driver.clone(),
        metrics: metrics.clone(),
    };
    let (services, supported_versions, registration_hook) = match mode {
        #[cfg(feature = "classic")]
        Mode::Classic => {
            let (services, versions) = grpc::classic_services(node).await;
            (
                services,
                versions,
                Arc::new(crate::hook::NoHook) as Arc<dyn crate::hook::FaultHook>,
            )
        }
        #[cfg(not(feature = "classic"))]
        Mode::Classic => return Err(Error::NoClassic("")),
        Mode::Structured(api) => {
            let dra = grpc::DraPluginService {
                node,
                claims: claim_reader::ClaimReader::new(client.clone(), api),
                driver_name: plugin.driver_name.clone(),
                node_name: plugin.node_name.clone(),
                hook: plugin.hook.clone(),
            };
            let (services, versions) =
                grpc::structured_services(dra, device_names, plugin.hook.clone()).await;
            (services, versions, plugin.hook.clone())
        }
    };

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };

    let dra_listener = bind(&dra_path)?;
    let dra_server = services.serve_with_incoming_shutdown(
        kubelet_connections(dra_listener, &pool),
        stopped(stop_rx.clone()),
    );
    let dra_task = tokio::spawn(dra_server);
    started.0.push(dra_task.abort_handle());

    // Registration last: once the kubelet sees this socket it dials the DRA socket.
    let reg_listener = bind(&reg_path)?;
    let registration = grpc::Registration {
        driver_name: plugin.driver_name.clone(),
        endpoint: dra_path.clone(),
        registered: Arc::new(AtomicBool::new(false)),
        supported_versions,
        hook: registration_hook,
    };
    let reg_server = grpc::server()
        .add_service(pluginregistration::registration_server::RegistrationServer::new(registration))
        .serve_with_incoming_shutdown(kubelet_connections(reg_listener, &pool), stopped(stop_rx));
    let reg_task = tokio::spawn(reg_server);
    // Started: from here the tasks end by the shutdown below.
    started.0.clear();
    info!(registration = %reg_path.display(), dra = %dra_path.display(), versions = ?supported_versions, "serving");

    shutdown.await;
    info!("shutting down");
    // Deregister first: deleting the registration socket tells the kubelet we are gone.
    for path in [&reg_path, &dra_path] {
        if let Err(e) = fsutil::remove_if_exists(path) {
            warn!(path = %path.display(), error = %e, "removing socket");
        }
    }
    let _ = stop_tx.send(true);
    for task in [reg_task, dra_task] {
        match task.await {
            Ok(Err(e)) => error!(error = %e, "grpc server"),
            Err(e) => error!(error = %e, "grpc server task"),
            Ok(Ok(())) => {}
        }
    }
    publish_task.abort();
    for task in hook_tasks {
        task.abort();
    }
    if let Some(task) = http_task {
        task.abort();
    }
    #[cfg(feature = "classic")]
    if let Some(publisher) = classic {
        publisher.shutdown(driver.prepared().current()).await;
        return Ok(());
    }
    info!(
        "leaving the ResourceSlice in place: a restarted plugin takes it over; it goes with the Node, or when the kubelet drops the unregistered driver's slices"
    );
    Ok(())
}
