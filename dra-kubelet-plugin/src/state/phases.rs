//! The file steps of device work (see [`super::work`]): each runs under the claims' lock
//! on a blocking thread, records what it did in the checkpoint with one durable write,
//! and marks or releases the claims it hands to the driver.

use super::work::{Job, Ran, internal};
use super::*;

impl<D: DeviceProfile> ClaimStore<D> {
    /// A prepared claim's spec, written again if it was removed or altered under us.
    pub(super) fn ensure_claim_spec(
        &self,
        claim: &ClaimRef,
        prepared: &D::Prepared,
    ) -> Result<(), ClaimError> {
        let path = self.spec_path(claim.uid.as_str());
        let bytes = self
            .spec_bytes(&claim.uid, prepared)
            .map_err(|source| spec_error(claim, source))?;
        if read_regular(&path).ok().flatten().as_deref() == Some(&bytes[..]) {
            return Ok(());
        }
        warn!(file = %path.display(), "CDI spec of a prepared claim was missing or altered; rewriting it");
        write_atomic(&path, &bytes, SPEC_MODE, Durability::Visible)
            .map_err(|e| io_error(claim, "writing CDI spec", &path, &e))
    }

    /// Marks busy and returns the claims among `uids` left started and not busy.
    pub(super) fn take_started(&self, uids: &[ClaimUid]) -> Vec<Job<D::Prepared>> {
        let claims = self.lock();
        let mut busy = self.busy();
        let mut jobs = Vec::new();
        for uid in uids {
            let Some(entry) = claims.get(uid) else {
                continue;
            };
            if entry.phase != Phase::Started || busy.contains(uid) {
                continue;
            }
            busy.insert(uid.clone());
            jobs.push(Job {
                claim: claim_of(uid, entry),
                prepared: entry.prepared.clone(),
                phase: Phase::Started,
            });
        }
        jobs
    }

    /// Step 1: plans each claim, records the new ones as started (one durable write) and
    /// makes their state directories. `None`: nothing to do (already prepared).
    pub(super) fn begin(
        &self,
        requests: &[(ClaimRef, D::Prepared)],
    ) -> Vec<Result<Option<Job<D::Prepared>>, ClaimError>> {
        let mut claims = self.lock();
        let mut busy = self.busy();
        let mut working = claims.clone();
        let mut results = Vec::with_capacity(requests.len());
        let mut started: Vec<usize> = Vec::new();
        for (i, (claim, wanted)) in requests.iter().enumerate() {
            if busy.contains(&claim.uid) {
                results.push(Err(ClaimError::Busy {
                    claim: claim.to_string(),
                }));
                continue;
            }
            let outcome = match plan(&self.profile, &working, claim, wanted.clone()) {
                Err(e) => Err(e),
                Ok(Plan::AlreadyPrepared) => self.ensure_claim_spec(claim, wanted).map(|()| None),
                Ok(Plan::Prepare(mut entry)) => {
                    let dir = self.state_dir(&claim.uid);
                    match create_dir(&dir) {
                        Err(e) => Err(io_error(claim, "creating state directory", &dir, &e)),
                        Ok(()) => {
                            entry.phase = Phase::Started;
                            working.insert(claim.uid.clone(), entry);
                            started.push(i);
                            Ok(Some(Job {
                                claim: claim.clone(),
                                prepared: wanted.clone(),
                                phase: Phase::Started,
                            }))
                        }
                    }
                }
            };
            results.push(outcome);
        }
        if started.is_empty() {
            return results;
        }
        match self.write_checkpoint(&working) {
            Ok(()) => {
                *claims = working;
                for &i in &started {
                    busy.insert(requests[i].0.uid.clone());
                }
            }
            Err(e) => {
                for &i in &started {
                    let claim = &requests[i].0;
                    remove_state_dir(&self.state_dir(&claim.uid), claim);
                    results[i] = Err(self.checkpoint_error(claim, &e));
                }
            }
        }
        results
    }

    /// Step 3: writes the specs of claims whose work is done and records them as
    /// completed (one durable write). A claim that fails here is still started and busy,
    /// for its rollback.
    pub(super) fn complete(&self, done: &[ClaimRef]) -> Vec<Result<(), ClaimError>> {
        if done.is_empty() {
            return Vec::new();
        }
        let mut claims = self.lock();
        let mut working = claims.clone();
        let mut results = Vec::with_capacity(done.len());
        let mut written = Vec::new();
        for (i, claim) in done.iter().enumerate() {
            let Some(entry) = working.get_mut(&claim.uid) else {
                results.push(Err(internal("complete")));
                continue;
            };
            let path = self.spec_path(claim.uid.as_str());
            let outcome = self
                .spec_bytes(&claim.uid, &entry.prepared)
                .and_then(|bytes| {
                    self.check_host_paths(&claim.uid, &entry.prepared)
                        .map(|()| bytes)
                })
                .map_err(|source| spec_error(claim, source))
                .and_then(|bytes| {
                    write_atomic(&path, &bytes, SPEC_MODE, Durability::Visible)
                        .map_err(|e| io_error(claim, "writing CDI spec", &path, &e))
                });
            if outcome.is_ok() {
                entry.phase = Phase::Completed;
                written.push(i);
            }
            results.push(outcome);
        }
        if written.is_empty() {
            return results;
        }
        match self.write_checkpoint(&working) {
            Ok(()) => {
                *claims = working;
                let mut busy = self.busy();
                for &i in &written {
                    busy.remove(&done[i].uid);
                }
                self.crash(CrashPoint::PrepareAfterCheckpoint);
                self.changed.send_modify(|n| *n += 1);
            }
            Err(e) => {
                for &i in &written {
                    let claim = &done[i];
                    if let Err(removal) = remove_if_exists(&self.spec_path(claim.uid.as_str())) {
                        warn!(claim = %claim, error = %removal, "removing the CDI spec of a claim whose checkpoint write failed failed; the next start removes it");
                    }
                    results[i] = Err(self.checkpoint_error(claim, &e));
                }
            }
        }
        results
    }

    /// After rollbacks: forgets the claims rolled back (one durable write) and removes
    /// their state directories; the others stay started. All are released.
    pub(super) fn forget_rolled_back(&self, ran: Vec<Ran<D::Prepared>>) -> Vec<Ran<D::Prepared>> {
        let mut claims = self.lock();
        let mut working = claims.clone();
        let mut forgotten = false;
        for (job, outcome) in &ran {
            if outcome.is_ok() {
                forgotten |= working.remove(&job.claim.uid).is_some();
            }
        }
        let written = if forgotten {
            self.write_checkpoint(&working)
        } else {
            Ok(())
        };
        let mut busy = self.busy();
        let ran = ran
            .into_iter()
            .map(|(job, outcome)| {
                busy.remove(&job.claim.uid);
                let outcome = match (&written, outcome) {
                    (Ok(()), Ok(())) => {
                        remove_state_dir(&self.state_dir(&job.claim.uid), &job.claim);
                        Ok(())
                    }
                    (Err(e), Ok(())) => Err(self.checkpoint_error(&job.claim, e)),
                    (_, Err(e)) => Err(e),
                };
                (job, outcome)
            })
            .collect();
        if written.is_ok() {
            *claims = working;
        }
        ran
    }

    /// Unprepare, step 1: removes the specs of completed claims and marks the claims
    /// busy. `None`: not prepared, nothing to do.
    pub(super) fn begin_unprepare(
        &self,
        requests: &[ClaimRef],
    ) -> Vec<Result<Option<Job<D::Prepared>>, ClaimError>> {
        let claims = self.lock();
        let mut busy = self.busy();
        let mut taken: BTreeSet<ClaimUid> = BTreeSet::new();
        requests
            .iter()
            .map(|claim| {
                let Some(entry) = claims.get(&claim.uid) else {
                    return Ok(None);
                };
                if taken.contains(&claim.uid) {
                    return Ok(None);
                }
                if busy.contains(&claim.uid) {
                    return Err(ClaimError::Busy {
                        claim: claim.to_string(),
                    });
                }
                if entry.phase == Phase::Completed {
                    let path = self.spec_path(claim.uid.as_str());
                    remove_if_exists(&path)
                        .map_err(|e| io_error(claim, "removing CDI spec", &path, &e))?;
                }
                busy.insert(claim.uid.clone());
                taken.insert(claim.uid.clone());
                Ok(Some(Job {
                    claim: claim_of(&claim.uid, entry),
                    prepared: entry.prepared.clone(),
                    phase: entry.phase,
                }))
            })
            .collect()
    }

    /// Unprepare, last step: forgets the claims whose work succeeded (one durable write),
    /// puts back the specs of those still prepared; releases all.
    pub(super) fn finish_unprepare(
        &self,
        ran: Vec<Ran<D::Prepared>>,
    ) -> Vec<Result<(), ClaimError>> {
        let mut claims = self.lock();
        let mut working = claims.clone();
        for (job, outcome) in &ran {
            if outcome.is_ok() {
                working.remove(&job.claim.uid);
            }
        }
        let written = if working.len() == claims.len() {
            Ok(())
        } else {
            self.write_checkpoint(&working)
        };
        if written.is_ok() {
            *claims = working;
        }
        let mut busy = self.busy();
        let results = ran
            .into_iter()
            .map(|(job, outcome)| {
                busy.remove(&job.claim.uid);
                let outcome = match (&written, outcome) {
                    (Ok(()), Ok(())) => {
                        remove_state_dir(&self.state_dir(&job.claim.uid), &job.claim);
                        return Ok(());
                    }
                    (Err(e), Ok(())) => Err(self.checkpoint_error(&job.claim, e)),
                    (_, Err(e)) => Err(e),
                };
                // Still recorded, so still prepared: its spec goes back.
                if job.phase == Phase::Completed
                    && let Err(why) = self.ensure_claim_spec(&job.claim, &job.prepared)
                {
                    warn!(error = %why, "putting the CDI spec back failed; the next start restores it");
                }
                outcome
            })
            .collect();
        drop(busy);
        if written.is_ok() {
            self.crash(CrashPoint::UnprepareAfterCheckpoint);
            self.changed.send_modify(|n| *n += 1);
        }
        results
    }

    fn busy(&self) -> MutexGuard<'_, BTreeSet<ClaimUid>> {
        self.busy.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Removes the state directories of claims the checkpoint does not hold.
    pub(super) fn sweep_state_dirs(
        &self,
        claims: &BTreeMap<ClaimUid, Entry<D::Prepared>>,
    ) -> Result<(), StartError> {
        let root = self.config.plugin_dir.join(STATE_DIR);
        let entries = match fs::read_dir(&root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_err("listing", &root)(e)),
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if !claims.keys().any(|uid| uid.as_str() == name) {
                info!(dir = %entry.path().display(), "removing the state directory of a claim not in the checkpoint");
                let path = entry.path();
                let removed = if path.is_dir() {
                    fs::remove_dir_all(&path)
                } else {
                    remove_if_exists(&path)
                };
                removed.map_err(io_err("removing", &path))?;
            }
        }
        Ok(())
    }
}

fn claim_of<P>(uid: &ClaimUid, entry: &Entry<P>) -> ClaimRef {
    ClaimRef {
        uid: uid.clone(),
        namespace: entry.namespace.clone(),
        name: entry.name.clone(),
    }
}

fn remove_state_dir(dir: &Path, claim: &ClaimRef) {
    match fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => {
            warn!(claim = %claim, dir = %dir.display(), error = %e, "removing the claim's state directory failed; the next start removes it");
        }
    }
}
