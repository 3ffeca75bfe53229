//! The chaos soak on the REAL one-node cluster of `hack/local-cluster.sh` (docs/soak.md):
//! pods with claims come and go while the plugin, the kubelet, kube-apiserver and
//! containerd are killed and restarted and the CDI directory is wiped; every container's
//! env is checked against every other's and against the API, the plugin's process is
//! sampled, and at the end nothing of a claim may be left. The report is printed and
//! written to `target/soak/report.txt`; the test fails on any violation.
//!
//! It runs only when asked: `hack/soak.sh` (which sets `FAKE_DRA_SOAK=1` and the size,
//! seed, ... as `FAKE_DRA_SOAK_*`); otherwise it prints `SKIPPED` and passes, so that
//! `cargo test --workspace` builds it without taking the machine for minutes. Asked for
//! on a machine that cannot run the cluster, it fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::{chaos, real};
#[allow(dead_code)]
use std::sync::Arc;

use real::cluster::RealCluster;

const ENABLE_ENV: &str = "FAKE_DRA_SOAK";

fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

#[test]
fn soak_on_the_real_cluster() {
    if std::env::var(ENABLE_ENV).as_deref() != Ok("1") {
        say(&format!(
            "\n*** SKIPPED: soak::soak_on_the_real_cluster: the chaos soak runs only when asked \
             (hack/soak.sh, or {ENABLE_ENV}=1 with root and the cluster's components). The soak did NOT run ***\n"
        ));
        return;
    }
    let config = chaos::Config::from_env().unwrap_or_else(|e| panic!("soak configuration: {e}"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let mut cluster = rt
        .block_on(RealCluster::start())
        .unwrap_or_else(|why| panic!("{ENABLE_ENV}=1, but the soak cannot run here: {why}"));
    rt.block_on(chaos::prepare(&mut cluster, &config));
    let cluster = Arc::new(cluster);
    let report = rt.block_on(chaos::run(cluster.clone(), config.clone()));
    // Every task of the soak ends with the runtime; the last handle on the cluster is
    // then this one, and dropping it takes the cluster down.
    drop(rt);
    drop(cluster);
    let text = report.render();
    say(&text);
    if let Some(dir) = config.report_file.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    match std::fs::write(&config.report_file, &text) {
        Ok(()) => say(&format!(
            "report written to {}",
            config.report_file.display()
        )),
        Err(e) => say(&format!(
            "cannot write {}: {e}",
            config.report_file.display()
        )),
    }
    assert!(
        report.violations.is_empty(),
        "the soak found {} violations (seed {}; rerun with hack/soak.sh --seed {}); see the report above",
        report.violations.len(),
        report.seed,
        report.seed
    );
    assert!(
        report.ran() >= config.size,
        "{} lifecycles, {} asked for",
        report.ran(),
        config.size
    );
}
