//! What the scenarios that drive a cluster a script started for them share (kwok's and
//! Kueue's, run by hack/kwok.sh and hack/kueue.sh): the skip that must show, and the wait
//! that says what it last saw.

use std::time::{Duration, Instant};

/// A scenario that runs only when its script provides the cluster.
pub struct Scenario {
    /// `binary::test`, as the harness names it.
    pub test: &'static str,
    /// What did not run, for the SKIPPED line ("the kwok scenario").
    pub what: &'static str,
    /// The script that runs it.
    pub script: &'static str,
    /// `=1` turns a skip into a failure (the script sets it).
    pub require_env: &'static str,
}

impl Scenario {
    /// A SKIPPED line past the harness's capture, or a failure when the scenario is
    /// required.
    pub fn skip(&self, why: &str) {
        let Scenario {
            test,
            what,
            script,
            require_env,
        } = self;
        if std::env::var(require_env).as_deref() == Ok("1") {
            panic!("{require_env}=1, but {what} cannot run: {why}");
        }
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "\n*** SKIPPED: {test}: {why}. {what} did NOT run: {script} runs it \
             ({require_env}=1 makes this a failure) ***\n"
        );
    }
}

/// Polls `check` every second until it returns `Ok`; past `limit`, fails with what the
/// last try saw (its `Err`). `limit` is a safety net, never an assertion on speed.
pub async fn wait_until<T>(
    what: &str,
    limit: Duration,
    mut check: impl AsyncFnMut() -> Result<T, String>,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        match check().await {
            Ok(v) => return v,
            Err(saw) if Instant::now() >= deadline => {
                panic!(
                    "gave up after {} s waiting for {what}; the last try saw: {saw}",
                    limit.as_secs()
                )
            }
            Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
}
