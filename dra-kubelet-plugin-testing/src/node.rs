//! A node's directories in a temp dir (the CDI root, the kubelet's plugins and
//! plugins_registry), and a plugin running in-process on them until stopped.

use std::path::{Path, PathBuf};
use std::time::Duration;

use dra_kubelet_plugin::{DeviceProfile, Plugin};

use crate::KitError;
use crate::kubelet::Kubelet;

/// How long a plugin may take to put its registration socket up.
const STARTUP: Duration = Duration::from_secs(30);

/// A node's directories, removed when dropped.
#[derive(Debug)]
pub struct TestNode {
    name: String,
    root: tempfile::TempDir,
}

impl TestNode {
    /// Node `name`, with empty directories.
    pub fn new(name: impl Into<String>) -> Result<Self, KitError> {
        let root = tempfile::tempdir().map_err(|source| KitError::Io {
            action: "creating the node's temp dir",
            source,
        })?;
        Ok(Self {
            name: name.into(),
            root,
        })
    }

    /// The node's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The temp dir everything is under; a test puts its fake device nodes here.
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// Where CDI specs go (`/var/run/cdi` on a node).
    pub fn cdi_root(&self) -> PathBuf {
        self.root.path().join("cdi")
    }

    /// `driver`'s plugin dir (`/var/lib/kubelet/plugins/<driver>`).
    pub fn plugin_dir(&self, driver: &str) -> PathBuf {
        self.root.path().join("plugins").join(driver)
    }

    /// The kubelet's registration dir (`/var/lib/kubelet/plugins_registry`).
    pub fn registry_dir(&self) -> PathBuf {
        self.root.path().join("plugins_registry")
    }

    /// `driver`'s registration socket, where the kubelet finds it.
    pub fn registration_socket(&self, driver: &str) -> PathBuf {
        self.registry_dir().join(format!("{driver}.sock"))
    }

    /// A plugin of `driver` on this node with its directories set; the caller sets the
    /// rest before [`TestNode::start`].
    pub fn plugin(&self, driver: &str, client: kube::Client) -> Plugin {
        Plugin::new(driver, &self.name, client)
            .cdi_root(self.cdi_root())
            .plugin_dir(self.plugin_dir(driver))
            .registry_dir(self.registry_dir())
    }

    /// Runs `plugin` (of `driver`, made by [`TestNode::plugin`]) with `profile` in this
    /// process until [`RunningPlugin::stop`]; returns once the kubelet can find it. A
    /// plugin that stops before (an error at start) is that error.
    pub async fn start<P: DeviceProfile>(
        &self,
        driver: &str,
        plugin: Plugin,
        profile: P,
    ) -> Result<RunningPlugin, KitError> {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        // Where this plugin registers (its own name with rolling updates); `driver` is
        // the plugin's own, kept in the signature for the callers written before.
        let _ = driver;
        let socket = plugin.registration_socket();
        let mut task = tokio::spawn(plugin.run(profile, async move {
            let _ = stopped.await;
        }));
        let deadline = tokio::time::Instant::now() + STARTUP;
        while !socket.exists() {
            if task.is_finished() {
                return Err(match (&mut task).await {
                    Ok(Err(e)) => KitError::Plugin(e),
                    Ok(Ok(())) => KitError::Stopped,
                    Err(e) => KitError::Client(format!("the plugin's task failed: {e}")),
                });
            }
            if tokio::time::Instant::now() > deadline {
                task.abort();
                return Err(KitError::Timeout {
                    what: format!("the registration socket {}", socket.display()),
                    limit: STARTUP,
                });
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(RunningPlugin {
            registration_socket: socket,
            stop: Some(stop),
            task,
        })
    }
}

/// A plugin running in this process.
#[derive(Debug)]
pub struct RunningPlugin {
    registration_socket: PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), dra_kubelet_plugin::Error>>,
}

impl RunningPlugin {
    /// A kubelet that finds it (not yet registered: [`Kubelet::register`]).
    pub fn kubelet(&self) -> Kubelet {
        Kubelet::new(&self.registration_socket)
    }

    /// Stops it as SIGTERM would; what it returned.
    pub async fn stop(mut self) -> Result<(), KitError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match tokio::time::timeout(STARTUP, &mut self.task).await {
            Ok(Ok(result)) => result.map_err(KitError::Plugin),
            Ok(Err(e)) => Err(KitError::Client(format!("the plugin's task failed: {e}"))),
            Err(_) => {
                self.task.abort();
                Err(KitError::Timeout {
                    what: "the plugin to stop".into(),
                    limit: STARTUP,
                })
            }
        }
    }
}

impl Drop for RunningPlugin {
    fn drop(&mut self) {
        self.task.abort();
    }
}
