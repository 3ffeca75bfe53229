//! Device work ([`DeviceProfile::DEVICE_WORK`]): preparing a claim in two recorded phases
//! around the driver's own I/O, and rolling back whatever fails or is interrupted.
//!
//! Prepare, for each new claim of a batch:
//! 1. planned as without device work (no device held twice), recorded as **started** in
//!    the checkpoint (one durable write for the batch), its state directory created;
//! 2. [`DeviceProfile::prepare_devices`], under the call's deadline, a panic caught;
//! 3. its CDI spec written (the host files it names checked), recorded as **completed**
//!    (one durable write);
//! 4. anything failed in 2 or 3: [`DeviceProfile::roll_back_devices`], then forgotten
//!    (the state directory goes too). A rollback that fails keeps the claim started: it is
//!    rolled back again before the next call does anything with it, or at the next start.
//!
//! A crash between 1 and 3 leaves the claim started: [`ClaimStore::roll_back_started`]
//! rolls it back before the plugin serves, and the kubelet's retry prepares it afresh.
//!
//! Unprepare: the spec removed, [`DeviceProfile::unprepare_devices`] (or the rollback, for
//! a claim left started), then the claim forgotten. A failure puts the spec back.
//!
//! The claims with work in flight are marked busy: another call for one of them is
//! answered [`ClaimError::Busy`] at once instead of racing it.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use futures::FutureExt;

use super::*;
use crate::checkpoint::Phase;
use crate::claim_data::{ProfileError, shorten_to};
use crate::profile::DeviceWork;

/// The directory in the plugin dir holding one state directory per claim.
pub const STATE_DIR: &str = "claims";

/// Where the state directory of claim `uid` is, in a plugin whose directory is
/// `plugin_dir` ([`crate::Plugin::plugin_dir`]): a profile whose CDI edits mount files made
/// by its device work names them with it.
pub fn claim_state_dir(plugin_dir: &Path, uid: &ClaimUid) -> PathBuf {
    plugin_dir.join(STATE_DIR).join(uid.as_str())
}

/// Longest driver message kept in an error.
const MESSAGE_BYTES: usize = 1024;

/// One claim's device work to do, with what it needs.
pub(super) struct Job<P> {
    pub(super) claim: ClaimRef,
    pub(super) prepared: P,
    /// The claim's phase when the work began: a started claim is rolled back, not
    /// unprepared.
    pub(super) phase: Phase,
}

/// A call's turn: the in-process lock and, shared, the plugin dir's.
struct Turn<'a>(
    #[allow(dead_code)] Option<tokio::sync::MutexGuard<'a, ()>>,
    #[allow(dead_code)] Option<crate::instance::DirLock>,
);

/// Which of the profile's device work to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Prepare,
    /// Unprepare a completed claim; roll back a started one.
    Unprepare,
    RollBack,
}

/// What ran for one claim of a call.
pub(super) type Ran<P> = (Job<P>, Result<(), ClaimError>);

impl<D: DeviceProfile> ClaimStore<D> {
    /// The claim's state directory.
    pub fn state_dir(&self, uid: &ClaimUid) -> PathBuf {
        self.config.plugin_dir.join(STATE_DIR).join(uid.as_str())
    }

    /// Prepares a batch as the profile read it, with its device work if it has any; one
    /// result per claim, in order.
    pub async fn prepare_claims(
        self: &Arc<Self>,
        requests: Vec<(ClaimRef, D::Prepared)>,
    ) -> Vec<Result<(), ClaimError>> {
        let claims = requests.iter().map(|(c, _)| c.to_string()).collect();
        self.on_own_task("prepare", claims, move |store| async move {
            if D::DEVICE_WORK {
                return Ok(store.prepare_with_work(requests).await);
            }
            tokio::task::spawn_blocking(move || store.prepare(&requests)).await
        })
        .await
    }

    /// Unprepares a batch, with the device work if the profile has any; one result per
    /// claim, in order. An unknown claim succeeds.
    pub async fn unprepare_claims(
        self: &Arc<Self>,
        requests: Vec<ClaimRef>,
    ) -> Vec<Result<(), ClaimError>> {
        let claims = requests.iter().map(ToString::to_string).collect();
        self.on_own_task("unprepare", claims, move |store| async move {
            if D::DEVICE_WORK {
                return Ok(store.unprepare_with_work(requests).await);
            }
            tokio::task::spawn_blocking(move || store.unprepare(&requests)).await
        })
        .await
    }

    /// Runs a `call` on `claims` in its turn on a task of its own, so its outcome is
    /// recorded whether or not the kubelet still waits for it; every claim fails alike if
    /// the turn cannot be had or the task dies.
    async fn on_own_task<F, Fut>(
        self: &Arc<Self>,
        call: &'static str,
        claims: Vec<String>,
        work: F,
    ) -> Vec<Result<(), ClaimError>>
    where
        F: FnOnce(Arc<Self>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<Vec<Result<(), ClaimError>>, tokio::task::JoinError>> + Send,
    {
        let store = self.clone();
        let names = claims.clone();
        let task = tokio::spawn(async move {
            let _turn = match store.turn().await {
                Ok(turn) => turn,
                Err(why) => return Ok(refused(&names, &why)),
            };
            work(store.clone()).await
        });
        match task.await {
            Ok(Ok(results)) => results,
            Ok(Err(e)) | Err(e) => task_failed(&claims, call, &e),
        }
    }

    /// Rolls back every claim the checkpoint holds as started (a crash during its
    /// preparation), before the plugin serves. Those whose rollback fails stay started
    /// and are named in the log; the kubelet's next call for one rolls it back again.
    pub async fn roll_back_started(self: &Arc<Self>) {
        let _turn = match self.turn().await {
            Ok(turn) => turn,
            Err(why) => {
                warn!(error = %why, "cannot look for claims a crash left half prepared");
                return;
            }
        };
        let started: Vec<ClaimUid> = self
            .lock()
            .iter()
            .filter(|(_, e)| e.phase == Phase::Started)
            .map(|(uid, _)| uid.clone())
            .collect();
        if started.is_empty() {
            return;
        }
        info!(
            claims = started.len(),
            "rolling back claims a crash left half prepared"
        );
        let jobs = self.take_started(&started);
        for (job, outcome) in self.roll_back(jobs).await {
            match outcome {
                Ok(()) => info!(claim = %job.claim, "rolled back"),
                Err(e) => {
                    warn!(error = %e, "rollback failed; the claim stays started and is rolled back again on the kubelet's next call for it or at the next start")
                }
            }
        }
    }

    /// One call at a time when the plugin serializes them ([`StoreConfig::serialize`]),
    /// and across instances when another shares the plugin dir ([`StoreConfig::shared`]),
    /// whose claims are then read first.
    async fn turn(self: &Arc<Self>) -> Result<Turn<'_>, String> {
        let serial = match self.config.serialize || self.config.shared {
            true => Some(self.serial.lock().await),
            false => None,
        };
        if !self.config.shared {
            return Ok(Turn(serial, None));
        }
        let store = self.clone();
        let dir = tokio::task::spawn_blocking(move || {
            let lock = crate::instance::lock_dir(&store.config.plugin_dir)
                .map_err(|e| format!("locking {}: {e}", store.config.plugin_dir.display()))?;
            store.reload_if_changed().map(|()| lock)
        })
        .await
        .map_err(|e| format!("locking task failed: {e}"))??;
        Ok(Turn(serial, Some(dir)))
    }

    async fn prepare_with_work(
        self: &Arc<Self>,
        requests: Vec<(ClaimRef, D::Prepared)>,
    ) -> Vec<Result<(), ClaimError>> {
        let deadline = Instant::now() + self.config.device_work_timeout;
        // A claim left started by a rollback that failed is rolled back first.
        let uids: Vec<ClaimUid> = requests.iter().map(|(c, _)| c.uid.clone()).collect();
        let stale = self.take_started(&uids);
        let mut results: Vec<Option<Result<(), ClaimError>>> = vec![None; requests.len()];
        for (job, outcome) in self.roll_back(stale).await {
            if let Err(e) = outcome {
                for (i, (claim, _)) in requests.iter().enumerate() {
                    if claim.uid == job.claim.uid {
                        results[i] = Some(Err(e.clone()));
                    }
                }
            }
        }
        let pending: Vec<usize> = (0..requests.len())
            .filter(|&i| results[i].is_none())
            .collect();
        let batch: Vec<(ClaimRef, D::Prepared)> =
            pending.iter().map(|&i| requests[i].clone()).collect();
        let begun = self.blocking(move |s| s.begin(&batch)).await;
        let mut jobs = Vec::new();
        for (&i, outcome) in pending.iter().zip(begun) {
            match outcome {
                Ok(Some(job)) => jobs.push((i, job)),
                Ok(None) => results[i] = Some(Ok(())),
                Err(e) => results[i] = Some(Err(e)),
            }
        }
        let ran = self.run_all(jobs, deadline, Step::Prepare).await;
        let (done, mut failed): (Vec<_>, Vec<_>) =
            ran.into_iter().partition(|(_, (_, r))| r.is_ok());
        if !done.is_empty() {
            self.crash(CrashPoint::PrepareAfterDeviceWork);
        }
        let done_claims: Vec<ClaimRef> = done.iter().map(|(_, (j, _))| j.claim.clone()).collect();
        let completed = self.blocking(move |s| s.complete(&done_claims)).await;
        for ((i, (job, _)), outcome) in done.into_iter().zip(completed) {
            match outcome {
                Ok(()) => results[i] = Some(Ok(())),
                Err(e) => failed.push((i, (job, Err(e)))),
            }
        }
        // What failed after its work began is rolled back.
        let mut errors = Vec::new();
        let mut to_roll_back = Vec::new();
        for (i, (job, outcome)) in failed {
            errors.push((i, outcome.err()));
            to_roll_back.push(job);
        }
        for ((i, error), (job, rolled)) in
            errors.into_iter().zip(self.roll_back(to_roll_back).await)
        {
            let after = match rolled {
                Ok(()) => "; rolled back".to_owned(),
                Err(e) => format!(
                    "; rolling back failed too ({e}): it is rolled back again before the claim is prepared"
                ),
            };
            results[i] = Some(Err(with_after(error, &job.claim, after)));
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(internal("prepare"))))
            .collect()
    }

    async fn unprepare_with_work(
        self: &Arc<Self>,
        requests: Vec<ClaimRef>,
    ) -> Vec<Result<(), ClaimError>> {
        let deadline = Instant::now() + self.config.device_work_timeout;
        let batch = requests.clone();
        let begun = self.blocking(move |s| s.begin_unprepare(&batch)).await;
        let mut results: Vec<Option<Result<(), ClaimError>>> = vec![None; requests.len()];
        let mut jobs = Vec::new();
        for (i, outcome) in begun.into_iter().enumerate() {
            match outcome {
                Ok(Some(job)) => jobs.push((i, job)),
                Ok(None) => results[i] = Some(Ok(())),
                Err(e) => results[i] = Some(Err(e)),
            }
        }
        if jobs.iter().any(|(_, j)| j.phase == Phase::Completed) {
            self.crash(CrashPoint::UnprepareAfterSpec);
        }
        let ran = self.run_all(jobs, deadline, Step::Unprepare).await;
        let indexes: Vec<usize> = ran.iter().map(|(i, _)| *i).collect();
        let ran: Vec<Ran<D::Prepared>> = ran.into_iter().map(|(_, r)| r).collect();
        let finished = self.blocking(move |s| s.finish_unprepare(ran)).await;
        for (i, outcome) in indexes.into_iter().zip(finished) {
            results[i] = Some(outcome);
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(internal("unprepare"))))
            .collect()
    }

    /// Runs `step` for each job (one after the other when calls are serialized, else
    /// together), each bounded by `deadline` and a panic caught. A started claim's
    /// unprepare is its rollback.
    async fn run_all(
        self: &Arc<Self>,
        jobs: Vec<(usize, Job<D::Prepared>)>,
        deadline: Instant,
        step: Step,
    ) -> Vec<(usize, Ran<D::Prepared>)> {
        let one = |(i, job): (usize, Job<D::Prepared>)| {
            let dir = self.state_dir(&job.claim.uid);
            async move {
                let ctx = DeviceWork::new(&job.claim, &job.prepared, &dir, deadline);
                let profile = &self.profile;
                let claim = &job.claim;
                let outcome = match step {
                    Step::Prepare => {
                        bounded(
                            "prepare_devices",
                            claim,
                            deadline,
                            profile.prepare_devices(&ctx),
                        )
                        .await
                    }
                    Step::Unprepare if job.phase == Phase::Completed => {
                        bounded(
                            "unprepare_devices",
                            claim,
                            deadline,
                            profile.unprepare_devices(&ctx),
                        )
                        .await
                    }
                    Step::Unprepare | Step::RollBack => {
                        bounded(
                            "roll_back_devices",
                            claim,
                            deadline,
                            profile.roll_back_devices(&ctx),
                        )
                        .await
                    }
                };
                (i, (job, outcome))
            }
        };
        if self.config.serialize {
            let mut out = Vec::with_capacity(jobs.len());
            for job in jobs {
                out.push(one(job).await);
            }
            out
        } else {
            futures::future::join_all(jobs.into_iter().map(one)).await
        }
    }

    /// Rolls back `jobs` (claims marked busy), each under a fresh deadline; forgets those
    /// rolled back, releases the others still started.
    async fn roll_back(self: &Arc<Self>, jobs: Vec<Job<D::Prepared>>) -> Vec<Ran<D::Prepared>> {
        if jobs.is_empty() {
            return Vec::new();
        }
        let deadline = Instant::now() + self.config.device_work_timeout;
        let jobs = jobs.into_iter().map(|mut j| {
            j.phase = Phase::Started;
            (0, j)
        });
        let ran: Vec<Ran<D::Prepared>> = self
            .run_all(jobs.collect(), deadline, Step::RollBack)
            .await
            .into_iter()
            .map(|(_, r)| r)
            .collect();
        self.blocking(move |s| s.forget_rolled_back(ran)).await
    }

    /// Runs blocking file work off the runtime.
    async fn blocking<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&Self) -> T + Send + 'static,
    ) -> T {
        let store = self.clone();
        match tokio::task::spawn_blocking(move || f(&store)).await {
            Ok(t) => t,
            // A panic in our own file code: nothing sensible is left but to stop.
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
}

/// Runs one step of a driver's device work until `deadline`, a panic caught: whatever
/// goes wrong is the claim's error, never the plugin's.
async fn bounded(
    step: &'static str,
    claim: &ClaimRef,
    deadline: Instant,
    work: impl Future<Output = Result<(), ProfileError>>,
) -> Result<(), ClaimError> {
    let fail = |reason: &'static str, message: String| ClaimError::DeviceWork {
        claim: claim.to_string(),
        step,
        reason,
        message: shorten_to(&message, MESSAGE_BYTES),
        after: String::new(),
    };
    let started = Instant::now();
    match tokio::time::timeout_at(deadline.into(), AssertUnwindSafe(work).catch_unwind()).await {
        Ok(Ok(Ok(()))) => Ok(()),
        Ok(Ok(Err(e))) => Err(fail(e.reason, e.message)),
        Ok(Err(panic)) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_owned());
            Err(fail("panic", format!("panicked: {what}")))
        }
        Err(_) => Err(fail(
            "timeout",
            format!(
                "not done by its deadline (gave up after {:.1} s; Plugin::device_work_timeout)",
                started.elapsed().as_secs_f64()
            ),
        )),
    }
}

/// `error` with what was done about it.
fn with_after(error: Option<ClaimError>, claim: &ClaimRef, after: String) -> ClaimError {
    match error {
        Some(ClaimError::DeviceWork {
            claim,
            step,
            reason,
            message,
            ..
        }) => ClaimError::DeviceWork {
            claim,
            step,
            reason,
            message,
            after,
        },
        Some(other) => ClaimError::DeviceWork {
            claim: claim.to_string(),
            step: "prepare",
            reason: other.reason(),
            message: other.to_string(),
            after,
        },
        None => internal("roll back"),
    }
}

pub(super) fn internal(what: &str) -> ClaimError {
    ClaimError::Read {
        claim: String::new(),
        reason: format!("internal error: a claim of the {what} call was not handled"),
    }
}

/// Every claim of a call fails alike when its turn could not be had.
fn refused(claims: &[String], why: &str) -> Vec<Result<(), ClaimError>> {
    claims
        .iter()
        .map(|claim| {
            Err(ClaimError::Read {
                claim: claim.clone(),
                reason: why.to_owned(),
            })
        })
        .collect()
}

/// Every claim of a call fails alike when its task died.
fn task_failed(
    claims: &[String],
    call: &str,
    e: &tokio::task::JoinError,
) -> Vec<Result<(), ClaimError>> {
    claims
        .iter()
        .map(|claim| {
            Err(ClaimError::Read {
                claim: claim.clone(),
                reason: format!("{call} task failed: {e}"),
            })
        })
        .collect()
}
