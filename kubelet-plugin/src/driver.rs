//! The node's prepared-claims state and its files: CDI specs in the CDI dir, the
//! checkpoint in the plugin dir. Blocking I/O; the gRPC layer calls it from
//! `spawn_blocking`. The plumbing here never looks inside a device: that is
//! [`crate::claims`] and [`crate::cdi`].
//!
//! Write order, so a crash at any point converges on restart ([`Driver::start`]):
//! - prepare: CDI spec, then checkpoint. A spec without an entry is an orphan, removed
//!   at start; the kubelet had no answer and prepares again.
//! - unprepare: CDI spec removal, then checkpoint. An entry without a spec gets its spec
//!   back at start; the kubelet had no answer and unprepares again.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use fake_dra_crds::nas;
use tracing::{info, warn};

use crate::cdi::{self, COMMON_DEVICE, CdiKind};
use crate::checkpoint::{self, Checkpoint, CheckpointError};
use crate::claims::{self, ClaimRef, Plan, PreparedClaim};
use crate::devices::Inventory;
use crate::fsutil::{
    CHECKPOINT_MODE, SPEC_MODE, create_dir, is_temp_file_of, read_regular, remove_if_exists,
    sync_dir, write_atomic,
};

/// A place to die on purpose, for crash tests (`FAKE_DRA_TEST_CRASH_POINT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPoint {
    /// Prepare: specs written, checkpoint not.
    PrepareAfterSpec,
    /// Prepare: both written, no answer sent.
    PrepareAfterCheckpoint,
    /// Unprepare: specs removed, checkpoint not updated.
    UnprepareAfterSpec,
    /// Unprepare: both done, no answer sent.
    UnprepareAfterCheckpoint,
}

impl std::str::FromStr for CrashPoint {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "prepare-after-spec" => Self::PrepareAfterSpec,
            "prepare-after-checkpoint" => Self::PrepareAfterCheckpoint,
            "unprepare-after-spec" => Self::UnprepareAfterSpec,
            "unprepare-after-checkpoint" => Self::UnprepareAfterCheckpoint,
            other => {
                return Err(format!(
                    "unknown crash point {other:?}; one of prepare-after-spec, prepare-after-checkpoint, unprepare-after-spec, unprepare-after-checkpoint"
                ));
            }
        })
    }
}

/// Why the driver cannot start. Each names the file.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The checkpoint is there but unusable; never wiped silently.
    #[error(
        "checkpoint {path}: {source}; fix or remove the file (removing it forgets every prepared claim)"
    )]
    Checkpoint {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        source: CheckpointError,
    },
    /// Claim specs of ours without a checkpoint: most likely `--plugin-dir` is not the
    /// directory they were prepared with. Starting would sweep them as orphans, taking the
    /// devices from running pods.
    #[error(
        "checkpoint {checkpoint} is missing, but {cdi_root} holds the CDI specs of {} prepared claim(s) ({}): is --plugin-dir (PLUGIN_DIR) the directory they were prepared with? Starting now would unprepare them under running pods. Mount the right directory; or, if no pod on this node uses these claims any more, delete those spec files and start again",
        claims.len(),
        claims.join(", ")
    )]
    MissingCheckpoint {
        /// Where the checkpoint should be.
        checkpoint: PathBuf,
        /// The CDI dir.
        cdi_root: PathBuf,
        /// The claim uids whose specs are there.
        claims: Vec<String>,
    },
    /// A file operation failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
}

fn io_err(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> StartError {
    let path = path.to_owned();
    move |source| StartError::Io {
        action,
        path,
        source,
    }
}

/// Where the driver keeps its files and what it serves.
#[derive(Debug, Clone)]
pub struct DriverConfig {
    /// The node's devices.
    pub inventory: Inventory,
    /// The DRA driver name.
    pub driver_name: String,
    /// The CDI spec kind.
    pub kind: CdiKind,
    /// Where CDI specs go (`/var/run/cdi`).
    pub cdi_root: PathBuf,
    /// Where the checkpoint goes (the plugin dir).
    pub plugin_dir: PathBuf,
    /// Test-only: abort at this point.
    pub crash_point: Option<CrashPoint>,
}

/// One claim of a prepare call.
#[derive(Debug, Clone)]
pub struct PrepareRequest {
    /// The claim.
    pub claim: ClaimRef,
    /// What it was allocated.
    pub allocation: Allocation,
}

/// What a claim was allocated, as each DRA generation tells it.
#[derive(Debug, Clone)]
pub enum Allocation {
    /// Classic: the allocation handle's data, checked by [`claims::plan`].
    Handle(String),
    /// Structured: already resolved from the claim's status by
    /// [`crate::structured::resolve`].
    Resolved(PreparedClaim),
}

/// The node's claims and files.
#[derive(Debug)]
pub struct Driver {
    config: DriverConfig,
    checkpoint_path: PathBuf,
    claims: Mutex<BTreeMap<String, PreparedClaim>>,
    changed: tokio::sync::watch::Sender<u64>,
}

impl Driver {
    /// Loads the checkpoint and makes the CDI dir agree with it: writes the common spec,
    /// restores missing or altered claim specs, removes our specs of claims not
    /// checkpointed.
    pub fn start(config: DriverConfig) -> Result<Self, StartError> {
        create_dir(&config.cdi_root).map_err(io_err("creating CDI dir", &config.cdi_root))?;
        create_dir(&config.plugin_dir)
            .map_err(io_err("creating plugin dir", &config.plugin_dir))?;
        let checkpoint_path = config.plugin_dir.join(checkpoint::FILE_NAME);
        remove_temp_files(&config.plugin_dir, checkpoint::FILE_NAME)?;
        let node = &config.inventory.node_name;
        let claims = match fs::read(&checkpoint_path) {
            Ok(bytes) => {
                Checkpoint::parse(&bytes, node)
                    .map_err(|source| StartError::Checkpoint {
                        path: checkpoint_path.clone(),
                        source,
                    })?
                    .claims
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let claims = claim_specs(&config.cdi_root, &config.kind)?;
                if !claims.is_empty() {
                    return Err(StartError::MissingCheckpoint {
                        checkpoint: checkpoint_path,
                        cdi_root: config.cdi_root.clone(),
                        claims,
                    });
                }
                // From now on a missing checkpoint means a wrong directory, never a crash
                // during the first prepare.
                let empty = Checkpoint::new(node, BTreeMap::new());
                write_atomic(&checkpoint_path, &empty.to_bytes(), CHECKPOINT_MODE, true)
                    .map_err(io_err("writing checkpoint", &checkpoint_path))?;
                BTreeMap::new()
            }
            Err(e) => return Err(io_err("reading checkpoint", &checkpoint_path)(e)),
        };
        let driver = Self {
            checkpoint_path,
            claims: Mutex::new(claims),
            changed: tokio::sync::watch::Sender::new(0),
            config,
        };
        driver.reconcile()?;
        Ok(driver)
    }

    fn reconcile(&self) -> Result<(), StartError> {
        let root = &self.config.cdi_root;
        let kind = &self.config.kind;
        let claims = self.lock();
        let common = cdi::common_spec(
            kind,
            &self.config.inventory.node_name,
            &self.config.driver_name,
        );
        self.ensure_spec(COMMON_DEVICE, &common.to_bytes())?;
        for (uid, claim) in claims.iter() {
            if let Some(missing) = claim
                .devices
                .iter()
                .find(|d| !self.config.inventory.contains(d))
            {
                warn!(claim = %uid, device = %missing, "checkpointed claim names a device outside the inventory (flags changed?); keeping it prepared");
            }
            self.ensure_spec(uid, &claim.spec(kind, uid).to_bytes())?;
        }
        let entries = fs::read_dir(root).map_err(io_err("listing CDI dir", root))?;
        for entry in entries {
            let entry = entry.map_err(io_err("listing CDI dir", root))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let orphan = match kind.spec_id_of_file(&name) {
                Some(id) => id != COMMON_DEVICE && !claims.contains_key(id),
                // Our own temp files from an interrupted write.
                None => name.starts_with(&format!(".{}", kind.spec_file_prefix())),
            };
            if orphan {
                info!(file = %name, "removing CDI spec of a claim not in the checkpoint");
                remove_if_exists(&entry.path()).map_err(io_err("removing", &entry.path()))?;
            }
        }
        sync_dir(root).map_err(io_err("syncing", root))?;
        info!(
            claims = claims.len(),
            "checkpoint loaded and CDI dir reconciled"
        );
        Ok(())
    }

    /// Writes a spec unless the file already has exactly these bytes.
    fn ensure_spec(&self, id: &str, bytes: &[u8]) -> Result<(), StartError> {
        let path = self.spec_path(id);
        if read_regular(&path).ok().flatten().as_deref() == Some(bytes) {
            return Ok(());
        }
        info!(file = %path.display(), "writing CDI spec");
        write_atomic(&path, bytes, SPEC_MODE, false).map_err(io_err("writing CDI spec", &path))
    }

    fn spec_path(&self, id: &str) -> PathBuf {
        self.config
            .cdi_root
            .join(self.config.kind.spec_file_name(id))
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, PreparedClaim>> {
        // A panic while holding the lock cannot leave the map half-updated (it is only
        // replaced whole), so a poisoned lock is safe to use.
        self.claims.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn crash(&self, point: CrashPoint) {
        if self.config.crash_point == Some(point) {
            warn!(?point, "test crash point reached; aborting");
            std::process::abort();
        }
    }

    /// Makes the batch's spec writes and removals durable. A failure is logged, not fatal,
    /// in prepare and unprepare alike: the checkpoint written next is the truth, and the
    /// next start makes the CDI dir agree with it (restoring a spec, sweeping an orphan).
    fn sync_cdi_dir(&self) {
        if let Err(e) = sync_dir(&self.config.cdi_root) {
            warn!(dir = %self.config.cdi_root.display(), error = %e, "syncing the CDI dir failed");
        }
    }

    fn write_checkpoint(&self, claims: &BTreeMap<String, PreparedClaim>) -> io::Result<()> {
        let cp = Checkpoint::new(&self.config.inventory.node_name, claims.clone());
        write_atomic(&self.checkpoint_path, &cp.to_bytes(), CHECKPOINT_MODE, true)
    }

    /// The node's inventory.
    pub fn inventory(&self) -> &Inventory {
        &self.config.inventory
    }

    /// The CDI kind of our specs.
    pub fn kind(&self) -> &CdiKind {
        &self.config.kind
    }

    /// Ticks on every change of the prepared claims, for the status publisher.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// The prepared claims as the NodeAllocationState status lists them.
    pub fn prepared_claims(&self) -> Vec<nas::PreparedClaim> {
        self.lock()
            .iter()
            .map(|(uid, c)| nas::PreparedClaim {
                uid: uid.clone(),
                namespace: c.namespace.clone(),
                name: c.name.clone(),
                devices: c.devices.clone(),
            })
            .collect()
    }

    /// Prepares a batch; one result per request, in order: the CDI ids or the claim's
    /// error. One bad claim never fails the others.
    pub fn prepare(&self, requests: &[PrepareRequest]) -> Vec<Result<Vec<String>, String>> {
        let kind = &self.config.kind;
        let mut claims = self.lock();
        let mut working = claims.clone();
        let mut results = Vec::with_capacity(requests.len());
        let mut written: Vec<(usize, String)> = Vec::new();
        for (i, req) in requests.iter().enumerate() {
            let uid = &req.claim.uid;
            let planned = match &req.allocation {
                Allocation::Handle(handle) => {
                    claims::plan(&self.config.inventory, &working, &req.claim, handle)
                }
                Allocation::Resolved(wanted) => {
                    claims::plan_prepared(&working, &req.claim, wanted.clone())
                }
            };
            let outcome = match planned {
                Err(e) => Err(e.to_string()),
                Ok(Plan::AlreadyPrepared) => {
                    // Nothing to write, unless the spec was removed or altered under us.
                    let path = self.spec_path(uid);
                    let wanted = working.get(uid).map(|c| c.spec(kind, uid).to_bytes());
                    match wanted {
                        Some(bytes)
                            if read_regular(&path).ok().flatten().as_deref()
                                != Some(&bytes[..]) =>
                        {
                            warn!(file = %path.display(), "CDI spec of a prepared claim was missing or altered; rewriting it");
                            write_atomic(&path, &bytes, SPEC_MODE, true)
                                .map_err(|e| spec_write_error(&req.claim, &path, &e))
                        }
                        _ => Ok(()),
                    }
                }
                Ok(Plan::Prepare(claim)) => {
                    let path = self.spec_path(uid);
                    match write_atomic(&path, &claim.spec(kind, uid).to_bytes(), SPEC_MODE, false) {
                        Ok(()) => {
                            working.insert(uid.clone(), claim);
                            written.push((i, uid.clone()));
                            Ok(())
                        }
                        Err(e) => Err(spec_write_error(&req.claim, &path, &e)),
                    }
                }
            };
            results.push(outcome.map(|()| PreparedClaim::cdi_ids(kind, uid)));
        }
        if written.is_empty() {
            return results;
        }
        self.sync_cdi_dir();
        self.crash(CrashPoint::PrepareAfterSpec);
        let committed = self
            .write_checkpoint(&working)
            .map_err(|e| format!("writing checkpoint {}: {e}", self.checkpoint_path.display()));
        match committed {
            Ok(()) => {
                *claims = working;
                self.crash(CrashPoint::PrepareAfterCheckpoint);
                self.changed.send_modify(|n| *n += 1);
            }
            Err(e) => {
                // Not recorded, so not prepared: take the specs back and fail those claims.
                for (i, uid) in written {
                    if let Err(removal) = remove_if_exists(&self.spec_path(&uid)) {
                        warn!(claim = %uid, error = %removal, "removing the CDI spec of a claim whose checkpoint write failed failed; the next start removes it");
                    }
                    results[i] = Err(format!("claim {uid}: {e}"));
                }
            }
        }
        results
    }

    /// Unprepares a batch; one result per claim, in order. An unknown claim succeeds.
    pub fn unprepare(&self, requests: &[ClaimRef]) -> Vec<Result<(), String>> {
        let mut claims = self.lock();
        let mut working = claims.clone();
        let mut results = Vec::with_capacity(requests.len());
        let mut removed: Vec<(usize, String, PreparedClaim)> = Vec::new();
        for (i, claim) in requests.iter().enumerate() {
            if let Err(e) = claims::validate_claim_uid(&claim.uid) {
                results.push(Err(e.to_string()));
                continue;
            }
            let Some(prepared) = working.remove(&claim.uid) else {
                results.push(Ok(()));
                continue;
            };
            let path = self.spec_path(&claim.uid);
            match remove_if_exists(&path) {
                Ok(()) => {
                    removed.push((i, claim.uid.clone(), prepared));
                    results.push(Ok(()));
                }
                Err(e) => {
                    working.insert(claim.uid.clone(), prepared);
                    results.push(Err(format!(
                        "claim {}: removing CDI spec {}: {e}",
                        claim.uid,
                        path.display()
                    )));
                }
            }
        }
        if removed.is_empty() {
            return results;
        }
        self.sync_cdi_dir();
        self.crash(CrashPoint::UnprepareAfterSpec);
        match self.write_checkpoint(&working) {
            Ok(()) => {
                *claims = working;
                self.crash(CrashPoint::UnprepareAfterCheckpoint);
                self.changed.send_modify(|n| *n += 1);
            }
            Err(e) => {
                // Still recorded, so still prepared: put the specs back.
                for (i, uid, prepared) in removed {
                    let bytes = prepared.spec(&self.config.kind, &uid).to_bytes();
                    if let Err(e) = write_atomic(&self.spec_path(&uid), &bytes, SPEC_MODE, true) {
                        warn!(claim = %uid, error = %e, "putting the CDI spec back after a failed checkpoint write failed; the next start restores it");
                    }
                    results[i] = Err(format!(
                        "claim {uid}: writing checkpoint {}: {e}",
                        self.checkpoint_path.display()
                    ));
                }
            }
        }
        results
    }
}

/// Removes what interrupted writes of `target` left in `dir`.
fn remove_temp_files(dir: &Path, target: &str) -> Result<(), StartError> {
    for entry in fs::read_dir(dir).map_err(io_err("listing", dir))?.flatten() {
        if is_temp_file_of(&entry.file_name().to_string_lossy(), target) {
            info!(file = %entry.path().display(), "removing the temp file of an interrupted write");
            remove_if_exists(&entry.path()).map_err(io_err("removing", &entry.path()))?;
        }
    }
    Ok(())
}

/// The claim uids whose specs of ours are in the CDI dir.
fn claim_specs(cdi_root: &Path, kind: &CdiKind) -> Result<Vec<String>, StartError> {
    let mut claims: Vec<String> = fs::read_dir(cdi_root)
        .map_err(io_err("listing CDI dir", cdi_root))?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            kind.spec_id_of_file(&name)
                .filter(|id| *id != COMMON_DEVICE)
                .map(str::to_string)
        })
        .collect();
    claims.sort();
    Ok(claims)
}

fn spec_write_error(claim: &ClaimRef, path: &Path, e: &io::Error) -> String {
    format!(
        "claim {}: writing CDI spec {}: {e}",
        claims::describe(&claim.uid, &claim.namespace, &claim.name),
        path.display()
    )
}
