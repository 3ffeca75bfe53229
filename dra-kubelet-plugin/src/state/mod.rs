//! The node's prepared claims and their files ([`ClaimStore`]): CDI specs in the CDI dir,
//! the checkpoint in the plugin dir. Blocking I/O; the gRPC layer calls it from
//! `spawn_blocking`. The plumbing here never looks inside a device: that is the device
//! profile ([`crate::profile::DeviceProfile`]).
//!
//! Write order, so a crash at any point converges on restart ([`ClaimStore::start`]):
//! - prepare: CDI specs, then the checkpoint. A spec without an entry is an orphan,
//!   removed at start; the kubelet had no answer and prepares again.
//! - unprepare: CDI spec removal, then the checkpoint. An entry without a spec gets its
//!   spec back at start; the kubelet had no answer and unprepares again.
//!
//! Group commit: a batch pays one fsync'd write, the checkpoint's. The specs are written
//! atomically (temp file, rename) but not fsync'd: the kubelet's answer only goes out
//! once the checkpoint is durable, a runtime reads the specs from the page cache (never
//! torn: the rename is atomic), and a spec a power loss took (or left torn) is
//! deterministic from its checkpoint entry, so [`ClaimStore::start`] writes it again before
//! the plugin serves anything — as it does after every reboot, when `/var/run/cdi` (a
//! tmpfs) comes back empty. A kill -9 loses nothing that was written: the page cache
//! survives the process.

mod phases;
mod start_error;
mod work;

pub use start_error::StartError;
use start_error::io_err;

pub use work::{STATE_DIR, claim_state_dir};

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tracing::{info, warn};

use crate::cdi_spec::{self, CdiKind, ContainerEdits, SpecError};
use crate::checkpoint::{self, Checkpoint, Entry, Phase};
use crate::claim_data::{COMMON_DEVICE, ClaimRef, ClaimUid};
use crate::claim_error::ClaimError;
use crate::fsutil::{
    CHECKPOINT_MODE, Durability, SPEC_MODE, create_dir, is_temp_file_of, read_regular,
    remove_if_exists, sync_dir, write_atomic,
};
use crate::plan::{Plan, plan};
use crate::profile::DeviceProfile;

/// A place to die on purpose, for crash tests (feature `test-crash-points`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CrashPoint {
    /// Prepare: specs written, checkpoint not.
    PrepareAfterSpec,
    /// Prepare with device work: the work done, the claim still recorded as started.
    PrepareAfterDeviceWork,
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
            "prepare-after-device-work" => Self::PrepareAfterDeviceWork,
            "prepare-after-checkpoint" => Self::PrepareAfterCheckpoint,
            "unprepare-after-spec" => Self::UnprepareAfterSpec,
            "unprepare-after-checkpoint" => Self::UnprepareAfterCheckpoint,
            other => {
                return Err(format!(
                    "unknown crash point {other:?}; one of prepare-after-spec, prepare-after-device-work, prepare-after-checkpoint, unprepare-after-spec, unprepare-after-checkpoint"
                ));
            }
        })
    }
}

/// Where the store keeps its files.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// This node: the checkpoint is refused on another.
    pub node_name: String,
    /// The CDI spec kind.
    pub kind: CdiKind,
    /// Where CDI specs go (`/var/run/cdi`).
    pub cdi_root: PathBuf,
    /// Where the checkpoint goes (the plugin dir).
    pub plugin_dir: PathBuf,
    /// The checkpoint's `apiVersion`.
    pub checkpoint_api_version: String,
    /// The checkpoint's `kind`.
    pub checkpoint_kind: String,
    /// How long one call's device work may take ([`DeviceProfile::DEVICE_WORK`]).
    pub device_work_timeout: Duration,
    /// One prepare or unprepare call at a time.
    pub serialize: bool,
    /// Another instance shares the plugin dir (a rolling update): every call and the
    /// start take the directory's lock and read the checkpoint it may have written.
    pub shared: bool,
    /// Test-only: abort at this point.
    #[cfg(feature = "test-crash-points")]
    pub crash_point: Option<CrashPoint>,
}

/// The node's prepared claims and their files, for one device profile.
#[derive(Debug)]
pub struct ClaimStore<D: DeviceProfile> {
    profile: D,
    config: StoreConfig,
    checkpoint_path: PathBuf,
    claims: Mutex<BTreeMap<ClaimUid, Entry<D::Prepared>>>,
    /// Claims with device work in flight; locked only while `claims` is.
    busy: Mutex<BTreeSet<ClaimUid>>,
    /// Taken for a whole call when calls are serialized.
    serial: tokio::sync::Mutex<()>,
    changed: tokio::sync::watch::Sender<u64>,
}

impl<D: DeviceProfile> ClaimStore<D> {
    /// Loads the checkpoint and makes the CDI dir agree with it: writes the common spec,
    /// restores missing or altered claim specs, removes our specs of claims not
    /// checkpointed.
    pub fn start(profile: D, config: StoreConfig) -> Result<Self, StartError> {
        create_dir(&config.cdi_root).map_err(io_err("creating CDI dir", &config.cdi_root))?;
        create_dir(&config.plugin_dir)
            .map_err(io_err("creating plugin dir", &config.plugin_dir))?;
        // Another instance may be in the middle of a call: its claims are not ours to
        // reconcile until it is done.
        let _lock = match config.shared {
            true => Some(
                crate::instance::lock_dir(&config.plugin_dir)
                    .map_err(io_err("locking", &config.plugin_dir))?,
            ),
            false => None,
        };
        let checkpoint_path = config.plugin_dir.join(checkpoint::FILE_NAME);
        remove_temp_files(&config.plugin_dir, checkpoint::FILE_NAME)?;
        let node = &config.node_name;
        let doc = checkpoint::DocType {
            api_version: &config.checkpoint_api_version,
            kind: &config.checkpoint_kind,
        };
        let claims = match fs::read(&checkpoint_path) {
            Ok(bytes) => {
                Checkpoint::parse(&bytes, doc, node, |p| profile.check(p))
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
                let empty = Checkpoint::<D::Prepared>::new(doc, node, BTreeMap::new());
                write_atomic(
                    &checkpoint_path,
                    &empty.to_bytes(),
                    CHECKPOINT_MODE,
                    Durability::Durable,
                )
                .map_err(io_err("writing checkpoint", &checkpoint_path))?;
                BTreeMap::new()
            }
            Err(e) => return Err(io_err("reading checkpoint", &checkpoint_path)(e)),
        };
        let store = Self {
            profile,
            checkpoint_path,
            claims: Mutex::new(claims),
            busy: Mutex::new(BTreeSet::new()),
            serial: tokio::sync::Mutex::new(()),
            changed: tokio::sync::watch::Sender::new(0),
            config,
        };
        store.reconcile()?;
        Ok(store)
    }

    /// The device profile.
    pub fn profile(&self) -> &D {
        &self.profile
    }

    /// The bytes of a claim's spec file.
    fn spec_bytes(&self, uid: &ClaimUid, prepared: &D::Prepared) -> Result<Vec<u8>, SpecError> {
        cdi_spec::claim_spec(
            &self.config.kind,
            uid,
            self.profile.cdi_devices(uid, prepared),
        )
        .map(|spec| spec.to_bytes())
    }

    /// Every device node and bind mount source of a new claim's spec must exist on the
    /// host: the runtime would fail the container otherwise, long after the kubelet was
    /// told the claim is ready.
    fn check_host_paths(&self, uid: &ClaimUid, prepared: &D::Prepared) -> Result<(), SpecError> {
        for device in self.profile.cdi_devices(uid, prepared) {
            check_host_paths(&device.name, &device.container_edits)?;
        }
        Ok(())
    }

    fn reconcile(&self) -> Result<(), StartError> {
        let root = &self.config.cdi_root;
        let kind = &self.config.kind;
        let claims = self.lock();
        let edits = self.profile.common_edits();
        let common = cdi_spec::common_spec(kind, edits.clone()).map_err(StartError::CommonEdits)?;
        match common {
            Some(common) => {
                check_host_paths(COMMON_DEVICE, &edits).map_err(StartError::CommonEdits)?;
                self.ensure_spec(COMMON_DEVICE, &common.to_bytes())?;
            }
            None => info!("the device profile has no common edits: no common CDI device"),
        }
        let has_common = !edits.is_empty();
        // A started claim has no spec: it is rolled back before the plugin serves.
        let completed =
            |uid: &ClaimUid| claims.get(uid).is_some_and(|e| e.phase == Phase::Completed);
        for (uid, entry) in claims.iter().filter(|(_, e)| e.phase == Phase::Completed) {
            let bytes =
                self.spec_bytes(uid, &entry.prepared)
                    .map_err(|source| StartError::Profile {
                        claim: uid.to_string(),
                        source,
                    })?;
            self.ensure_spec(uid.as_str(), &bytes)?;
        }
        let entries = fs::read_dir(root).map_err(io_err("listing CDI dir", root))?;
        for entry in entries {
            let entry = entry.map_err(io_err("listing CDI dir", root))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let orphan = match kind.spec_id_of_file(&name) {
                Some(COMMON_DEVICE) => !has_common,
                Some(id) => !claims
                    .keys()
                    .any(|uid| uid.as_str() == id && completed(uid)),
                // Our own temp files from an interrupted write.
                None => name.starts_with(&format!(".{}", kind.spec_file_prefix())),
            };
            if orphan {
                info!(file = %name, "removing CDI spec of a claim not in the checkpoint");
                remove_if_exists(&entry.path()).map_err(io_err("removing", &entry.path()))?;
            }
        }
        sync_dir(root).map_err(io_err("syncing", root))?;
        self.sweep_state_dirs(&claims)?;
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
        write_atomic(&path, bytes, SPEC_MODE, Durability::Visible)
            .map_err(io_err("writing CDI spec", &path))
    }

    fn spec_path(&self, id: &str) -> PathBuf {
        self.config
            .cdi_root
            .join(self.config.kind.spec_file_name(id))
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<ClaimUid, Entry<D::Prepared>>> {
        // A panic while holding the lock cannot leave the map half-updated (it is only
        // replaced whole), so a poisoned lock is safe to use.
        self.claims.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn crash(&self, point: CrashPoint) {
        #[cfg(feature = "test-crash-points")]
        if self.config.crash_point == Some(point) {
            warn!(?point, "test crash point reached; aborting");
            std::process::abort();
        }
        let _ = point;
    }

    fn doc_type(&self) -> checkpoint::DocType<'_> {
        checkpoint::DocType {
            api_version: &self.config.checkpoint_api_version,
            kind: &self.config.checkpoint_kind,
        }
    }

    /// With another instance sharing the plugin dir, the checkpoint as it wrote it last:
    /// read again when the file is not what this instance holds. Under the dir's lock.
    fn reload_if_changed(&self) -> Result<(), String> {
        let bytes = fs::read(&self.checkpoint_path)
            .map_err(|e| format!("reading checkpoint {}: {e}", self.checkpoint_path.display()))?;
        let mut claims = self.lock();
        let ours = Checkpoint::new(self.doc_type(), &self.config.node_name, claims.clone());
        if ours.to_bytes() == bytes {
            return Ok(());
        }
        let theirs = Checkpoint::parse(&bytes, self.doc_type(), &self.config.node_name, |p| {
            self.profile.check(p)
        })
        .map_err(|e| {
            format!(
                "checkpoint {} as another instance wrote it: {e}",
                self.checkpoint_path.display()
            )
        })?;
        info!(
            claims = theirs.claims.len(),
            "the checkpoint was written by another instance; using its claims"
        );
        *claims = theirs.claims;
        Ok(())
    }

    /// A claim's error for a checkpoint write that failed.
    fn checkpoint_error(&self, claim: &ClaimRef, e: &io::Error) -> ClaimError {
        io_error(claim, "writing checkpoint", &self.checkpoint_path, e)
    }

    fn write_checkpoint(&self, claims: &BTreeMap<ClaimUid, Entry<D::Prepared>>) -> io::Result<()> {
        let cp = Checkpoint::new(self.doc_type(), &self.config.node_name, claims.clone());
        write_atomic(
            &self.checkpoint_path,
            &cp.to_bytes(),
            CHECKPOINT_MODE,
            Durability::Durable,
        )
    }

    /// The fully qualified CDI ids of `names` (of the profile's devices of a claim), with
    /// the common device first when the profile has one.
    pub fn qualified_ids(&self, names: Vec<String>) -> Vec<String> {
        let common = (!self.profile.common_edits().is_empty()).then(|| COMMON_DEVICE.to_owned());
        common
            .into_iter()
            .chain(names)
            .map(|name| self.config.kind.qualified(&name))
            .collect()
    }

    #[cfg(feature = "classic")]
    /// The prepared claims and their changes, for a classic inventory.
    pub fn prepared(self: &std::sync::Arc<Self>) -> crate::classic_inventory::PreparedClaims {
        let store = self.clone();
        crate::classic_inventory::PreparedClaims::new(
            std::sync::Arc::new(move || store.prepared_claims()),
            self.changed.subscribe(),
        )
    }

    /// The uids of the claims prepared now.
    pub fn prepared_uids(&self) -> std::collections::BTreeSet<ClaimUid> {
        self.lock().keys().cloned().collect()
    }

    /// The slice devices a prepared claim was allocated; none if it is not prepared.
    pub fn allocated_devices(&self, uid: &ClaimUid) -> Vec<String> {
        self.lock()
            .get(uid)
            .map(|e| self.profile.allocated_devices(&e.prepared))
            .unwrap_or_default()
    }

    #[cfg(feature = "classic")]
    /// The prepared claims as a classic inventory lists them.
    pub fn prepared_claims(&self) -> Vec<crate::classic_inventory::PreparedClaim> {
        self.lock()
            .iter()
            .map(|(uid, e)| {
                crate::classic_inventory::PreparedClaim::new(
                    uid.to_string(),
                    e.namespace.clone(),
                    e.name.clone(),
                    self.profile.held_devices(&e.prepared),
                )
            })
            .collect()
    }

    /// Prepares a batch of claims as the profile read them; one result per claim, in
    /// order. One bad claim never fails the others.
    pub fn prepare(&self, requests: &[(ClaimRef, D::Prepared)]) -> Vec<Result<(), ClaimError>> {
        let mut claims = self.lock();
        let mut working = claims.clone();
        let mut results = Vec::with_capacity(requests.len());
        let mut written: Vec<(usize, ClaimRef)> = Vec::new();
        for (i, (claim, wanted)) in requests.iter().enumerate() {
            let uid = &claim.uid;
            let outcome = match plan(&self.profile, &working, claim, wanted.clone()) {
                Err(e) => Err(e),
                Ok(Plan::AlreadyPrepared) => self.ensure_claim_spec(claim, wanted),
                Ok(Plan::Prepare(entry)) => {
                    let path = self.spec_path(uid.as_str());
                    match self.spec_bytes(uid, &entry.prepared).and_then(|bytes| {
                        self.check_host_paths(uid, &entry.prepared).map(|()| bytes)
                    }) {
                        Err(source) => Err(spec_error(claim, source)),
                        Ok(bytes) => {
                            match write_atomic(&path, &bytes, SPEC_MODE, Durability::Visible) {
                                Ok(()) => {
                                    working.insert(uid.clone(), entry);
                                    written.push((i, claim.clone()));
                                    Ok(())
                                }
                                Err(e) => Err(io_error(claim, "writing CDI spec", &path, &e)),
                            }
                        }
                    }
                }
            };
            results.push(outcome);
        }
        if written.is_empty() {
            return results;
        }
        self.crash(CrashPoint::PrepareAfterSpec);
        match self.write_checkpoint(&working) {
            Ok(()) => {
                *claims = working;
                self.crash(CrashPoint::PrepareAfterCheckpoint);
                self.changed.send_modify(|n| *n += 1);
            }
            Err(e) => {
                // Not recorded, so not prepared: take the specs back and fail those claims.
                for (i, claim) in written {
                    if let Err(removal) = remove_if_exists(&self.spec_path(claim.uid.as_str())) {
                        warn!(claim = %claim, error = %removal, "removing the CDI spec of a claim whose checkpoint write failed failed; the next start removes it");
                    }
                    results[i] = Err(self.checkpoint_error(&claim, &e));
                }
            }
        }
        results
    }

    /// Unprepares a batch; one result per claim, in order. An unknown claim succeeds.
    pub fn unprepare(&self, requests: &[ClaimRef]) -> Vec<Result<(), ClaimError>> {
        let mut claims = self.lock();
        let mut working = claims.clone();
        let mut results = Vec::with_capacity(requests.len());
        let mut removed: Vec<(usize, ClaimRef, Entry<D::Prepared>)> = Vec::new();
        for (i, claim) in requests.iter().enumerate() {
            let Some(entry) = working.remove(&claim.uid) else {
                results.push(Ok(()));
                continue;
            };
            let path = self.spec_path(claim.uid.as_str());
            match remove_if_exists(&path) {
                Ok(()) => {
                    removed.push((i, claim.clone(), entry));
                    results.push(Ok(()));
                }
                Err(e) => {
                    working.insert(claim.uid.clone(), entry);
                    results.push(Err(io_error(claim, "removing CDI spec", &path, &e)));
                }
            }
        }
        if removed.is_empty() {
            return results;
        }
        self.crash(CrashPoint::UnprepareAfterSpec);
        match self.write_checkpoint(&working) {
            Ok(()) => {
                *claims = working;
                self.crash(CrashPoint::UnprepareAfterCheckpoint);
                self.changed.send_modify(|n| *n += 1);
            }
            Err(e) => {
                // Still recorded, so still prepared: put the specs back.
                for (i, claim, entry) in removed {
                    let restored = self
                        .spec_bytes(&claim.uid, &entry.prepared)
                        .map_err(|e| e.to_string())
                        .and_then(|bytes| {
                            write_atomic(
                                &self.spec_path(claim.uid.as_str()),
                                &bytes,
                                SPEC_MODE,
                                Durability::Visible,
                            )
                            .map_err(|e| e.to_string())
                        });
                    if let Err(why) = restored {
                        warn!(claim = %claim, error = %why, "putting the CDI spec back after a failed checkpoint write failed; the next start restores it");
                    }
                    results[i] = Err(self.checkpoint_error(&claim, &e));
                }
            }
        }
        results
    }
}

fn io_error(claim: &ClaimRef, action: &'static str, path: &Path, e: &io::Error) -> ClaimError {
    ClaimError::Io {
        claim: claim.to_string(),
        action,
        path: path.display().to_string(),
        error: e.to_string(),
    }
}

fn spec_error(claim: &ClaimRef, source: SpecError) -> ClaimError {
    ClaimError::Cdi {
        claim: claim.to_string(),
        source: Box::new(source),
    }
}

/// Every host file `edits` use (device nodes, bind mount sources) must be there.
fn check_host_paths(device: &str, edits: &ContainerEdits) -> Result<(), SpecError> {
    for (field, path) in edits.host_paths() {
        if let Err(e) = fs::metadata(path) {
            return Err(SpecError::MissingHostPath {
                device: device.to_owned(),
                field,
                path: path.to_owned(),
                error: e.to_string(),
            });
        }
    }
    Ok(())
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
