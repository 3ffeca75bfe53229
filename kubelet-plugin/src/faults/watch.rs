//! Watches the `DeviceFault`s and reports on them. Thin: a kube watcher feeding a
//! channel of the current faults, and server-side applies of this node's entries to each
//! fault's `status.nodes` (a field manager per node, so every node owns its own entry and
//! an entry it no longer writes goes away).
//!
//! A cluster without the CRD (an older deploy) has no faults: the watch retries quietly
//! after one warning.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use fake_dra_api::fault::{DeviceFault, NodeFaultStatus};
use kube::api::{Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use tokio::sync::watch;
use tokio_stream::StreamExt;
use tracing::{debug, info, warn};

use super::Fault;

/// The current faults, as the watch last saw them.
pub type Faults = watch::Receiver<Arc<Vec<Fault>>>;

/// A channel with no faults, for a plugin that does not watch (classic mode, tests).
pub fn none() -> Faults {
    watch::channel(Arc::new(Vec::new())).1
}

fn from_object(f: &DeviceFault) -> Fault {
    Fault {
        name: f.metadata.name.clone().unwrap_or_default(),
        uid: f.metadata.uid.clone().unwrap_or_default(),
        generation: f.metadata.generation.unwrap_or(0),
        spec: f.spec.clone(),
    }
}

/// Starts watching; the receiver always holds the current faults.
pub fn start(client: Client) -> (Faults, tokio::task::JoinHandle<()>) {
    let (tx, rx) = watch::channel(Arc::new(Vec::new()));
    (rx, feed(client, tx))
}

/// Watches the faults into `tx`, until aborted.
pub fn feed(client: Client, tx: watch::Sender<Arc<Vec<Fault>>>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let api: Api<DeviceFault> = Api::all(client);
        let mut current: BTreeMap<String, Fault> = BTreeMap::new();
        let mut warned = false;
        let mut events = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
        let mut initial: Option<BTreeMap<String, Fault>> = None;
        while let Some(event) = events.next().await {
            let changed = match event {
                Ok(watcher::Event::Init) => {
                    initial = Some(BTreeMap::new());
                    false
                }
                Ok(watcher::Event::InitApply(f)) => {
                    if let Some(i) = initial.as_mut() {
                        let f = from_object(&f);
                        i.insert(f.name.clone(), f);
                    }
                    false
                }
                Ok(watcher::Event::InitDone) => {
                    current = initial.take().unwrap_or_default();
                    warned = false;
                    true
                }
                Ok(watcher::Event::Apply(f)) => {
                    let f = from_object(&f);
                    current.insert(f.name.clone(), f);
                    true
                }
                Ok(watcher::Event::Delete(f)) => current
                    .remove(f.metadata.name.as_deref().unwrap_or_default())
                    .is_some(),
                Err(e) => {
                    if !warned {
                        warned = true;
                        warn!(error = %e, "watching DeviceFaults failed (is the devicefaults CRD installed?); no faults apply until the watch works");
                    } else {
                        debug!(error = %e, "watching DeviceFaults");
                    }
                    false
                }
            };
            if changed {
                let faults: Vec<Fault> = current.values().cloned().collect();
                if **tx.borrow() != faults {
                    info!(faults = faults.len(), "DeviceFaults changed");
                    tx.send_replace(Arc::new(faults));
                }
            }
        }
    })
}

/// Writes one reporter's entries into the faults' status, only when they change.
#[derive(Debug)]
pub struct StatusWriter {
    api: Api<DeviceFault>,
    manager: String,
    /// What was last applied, per fault: an entry, or `None` once removed.
    written: BTreeMap<String, Option<NodeFaultStatus>>,
}

impl StatusWriter {
    /// A writer whose field manager is `fake-dra/<reporter>` (a node name, or the fleet).
    pub fn new(client: Client, reporter: &str) -> Self {
        let manager: String = format!("fake-dra/{reporter}").chars().take(128).collect();
        Self {
            api: Api::all(client),
            manager,
            written: BTreeMap::new(),
        }
    }

    /// Applies `reports` (fault name to this reporter's entry) to the faults in `faults`;
    /// a fault that no longer has an entry gets its entry removed.
    pub async fn write(&mut self, faults: &[Fault], reports: &[(String, NodeFaultStatus)]) {
        let wanted: BTreeMap<&str, &NodeFaultStatus> =
            reports.iter().map(|(f, s)| (f.as_str(), s)).collect();
        for f in faults {
            let entry = wanted.get(f.name.as_str()).copied().cloned();
            let previous = self.written.get(&f.name);
            let unchanged = match (previous, &entry) {
                (Some(p), e) => p == e,
                // Never written and nothing to write: nothing of ours to remove.
                (None, None) => true,
                (None, Some(_)) => false,
            };
            if unchanged {
                continue;
            }
            let body = serde_json::json!({
                "apiVersion": DeviceFault::api_version(&()),
                "kind": DeviceFault::kind(&()),
                "metadata": {"name": f.name},
                "status": {"nodes": entry.iter().collect::<Vec<_>>()},
            });
            let params = PatchParams::apply(&self.manager).force();
            match self
                .api
                .patch_status(&f.name, &params, &Patch::Apply(&body))
                .await
            {
                Ok(_) => {
                    self.written.insert(f.name.clone(), entry);
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    self.written.remove(&f.name);
                }
                Err(e) => {
                    warn!(fault = %f.name, error = %e, "writing the DeviceFault's status failed; retried on the next change")
                }
            }
        }
        self.written
            .retain(|name, _| faults.iter().any(|f| &f.name == name));
    }
}

/// How long a reporter waits after a change before writing, so a burst is one write.
pub const REPORT_DEBOUNCE: Duration = Duration::from_millis(200);

/// The faults as one node sees them.
#[derive(Debug, Clone)]
pub struct NodeView {
    faults: Faults,
    node: String,
    devices: Arc<Vec<String>>,
}

impl NodeView {
    /// `node`, whose pool has `devices`, watching `faults`.
    pub fn new(faults: Faults, node: &str, devices: Vec<String>) -> Self {
        Self {
            faults,
            node: node.to_owned(),
            devices: Arc::new(devices),
        }
    }

    /// The node.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The faults in force now.
    pub fn current(&self) -> super::NodeFaults {
        super::NodeFaults::resolve(&self.node, &self.devices, &self.faults.borrow())
    }

    /// The channel, to wait for changes.
    pub fn faults(&self) -> Faults {
        self.faults.clone()
    }

    /// Carries out what `decide` says a call does now: proceed (after a delay), hang
    /// until the faults change and decide again, or fail with the fault's name and
    /// message.
    pub async fn gate(
        &self,
        what: &str,
        decide: impl Fn(&super::NodeFaults) -> super::CallDecision,
    ) -> Result<(), (String, String)> {
        use super::CallDecision;
        let mut changes = self.faults.clone();
        loop {
            match decide(&self.current()) {
                CallDecision::Proceed => return Ok(()),
                CallDecision::Fail { fault, message } => {
                    info!(%fault, "{what}: failing as the DeviceFault asks");
                    return Err((fault, message));
                }
                CallDecision::Delay { fault, millis } => {
                    info!(%fault, millis, "{what}: delayed as the DeviceFault asks");
                    tokio::time::sleep(Duration::from_millis(u64::from(millis))).await;
                    return Ok(());
                }
                CallDecision::Hang { fault } => {
                    info!(%fault, "{what}: hanging until the DeviceFault changes");
                    if changes.changed().await.is_err() {
                        // The watch is gone (shutdown): hang until the caller gives up.
                        std::future::pending::<()>().await;
                    }
                }
            }
        }
    }
}
