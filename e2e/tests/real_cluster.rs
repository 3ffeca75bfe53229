//! The end-to-end scenarios on a REAL Kubernetes cluster: the one-node cluster of
//! `hack/local-cluster.sh` (kube-apiserver, kube-scheduler, kubelet, containerd ... built
//! from the Go module proxy by `hack/kube-build.sh`, docs/real-kubernetes.md), with our
//! images packed from the binaries this `cargo test` built and `deploy/structured`
//! applied by `hack/deploy.sh`. One cluster for all scenarios: brought up at the start,
//! taken down at the end, also when a scenario fails.
//!
//! The same scenarios then run on the emulator, and what it shows is compared with what
//! the real cluster showed (`real/observed.txt`): every difference must be a documented
//! one (`real::protocol::KNOWN_DIFFERENCES`, docs/emulator.md).
//!
//! Needs root, the Go-built components and the host packages (runc, CNI plugins,
//! busybox-static, iptables, openssl, binutils): without them the real-cluster test prints
//! `SKIPPED: …` and passes, or fails when `FAKE_DRA_REQUIRE_REAL_K8S=1` (CI,
//! `hack/ci-real-k8s.sh`). It also skips when another cluster already runs on this
//! machine (there is room for one), or when `FAKE_DRA_REAL_K8S=0`.
//! `FAKE_DRA_KEEP_REAL_CLUSTER=1` leaves the cluster up
//! afterwards; `FAKE_DRA_RECORD_REAL_CLUSTER=1` rewrites `real/observed.txt`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod real;

use std::time::Instant;

use real::backend::{Backend, Emulated};
use real::cluster::RealCluster;
use real::protocol::{self, Protocol};
use real::{access, features, scenarios};

const REQUIRE_ENV: &str = "FAKE_DRA_REQUIRE_REAL_K8S";
/// `0` turns the real-cluster test off (a SKIPPED line), e.g. for a `cargo test --workspace`
/// that CI follows with hack/ci-real-k8s.sh, which runs it.
const ENABLE_ENV: &str = "FAKE_DRA_REAL_K8S";
/// The node of hack/local-cluster.sh (its NODE_NAME default), also given to the emulator.
const NODE: &str = "fake-dra-node";

/// One cluster at a time: the real one has fixed paths, and both want the two cores.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn turn() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Every scenario, in an order that keeps the disruptive ones last.
async fn all_scenarios<B: Backend>(b: &mut B, p: &mut Protocol) {
    scenarios::published_slice(b, p).await;
    access::rbac_equals_the_api_access_table(b, p).await;
    access::slices_of_another_node_are_denied(b, p).await;
    scenarios::two_pods_get_distinct_devices(b, p).await;
    scenarios::two_containers_share_a_claim(b, p).await;
    scenarios::global_claim_shared_until_its_last_user(b, p).await;
    scenarios::count_4(b, p).await;
    scenarios::count_4_split_2(b, p).await;
    scenarios::deployment_replicas(b, p).await;
    scenarios::model_selector(b, p).await;
    scenarios::over_request_and_freed_devices(b, p).await;
    scenarios::bad_opaque_parameters(b, p).await;
    scenarios::device_class_on_a_missing_attribute(b, p).await;
    scenarios::container_naming_one_request(b, p).await;
    features::prioritized_list(b, p).await;
    features::admin_access(b, p).await;
    features::extended_resource(b, p).await;
    features::gpu_profile(b, p).await;
    features::device_taints(b, p).await;
    features::device_health(b, p).await;
    features::prepare_fault(b, p).await;
    features::binding_conditions(b, p).await;
    features::device_status(b, p).await;
    features::fleet_mode(b, p).await;
    features::getinfo_fault(b, p).await;
    scenarios::kill_9_of_the_plugin(b, p).await;
    scenarios::kubelet_restart(b, p).await;
    scenarios::nothing_left(b, p).await;
}

/// A SKIPPED line past the test harness's output capture (a skip must show even though
/// the test passes), or a failure when the suite is required.
fn skip(test: &str, why: &str) {
    if std::env::var(REQUIRE_ENV).as_deref() == Ok("1") {
        panic!("{REQUIRE_ENV}=1, but the real-cluster suite cannot run: {why}");
    }
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "\n*** SKIPPED: real_cluster::{test}: {why}. The real-cluster suite did NOT run \
         ({REQUIRE_ENV}=1 makes this a failure) ***\n"
    );
}

#[test]
fn scenarios_on_the_real_cluster() {
    let _turn = turn();
    let rt = runtime();
    let started = Instant::now();
    if std::env::var(ENABLE_ENV).as_deref() == Ok("0") {
        return skip(
            "scenarios_on_the_real_cluster",
            &format!("turned off by {ENABLE_ENV}=0"),
        );
    }
    let mut cluster = match rt.block_on(RealCluster::start()) {
        Ok(cluster) => cluster,
        Err(why) => return skip("scenarios_on_the_real_cluster", &why),
    };
    assert_eq!(
        cluster.node(),
        NODE,
        "the protocol is recorded for node {NODE}"
    );
    let up = started.elapsed();
    let mut p = Protocol::default();
    rt.block_on(all_scenarios(&mut cluster, &mut p));
    let version = cluster.layout().get("KUBE_VERSION").to_string();
    let ran = started.elapsed();
    drop(cluster);
    // Reported, never asserted on.
    eprintln!(
        "real-cluster suite: cluster up and driver deployed after {} s, scenarios done after {} s, cluster down after {} s",
        up.as_secs(),
        ran.as_secs(),
        started.elapsed().as_secs()
    );

    let lines = p.lines();
    if std::env::var(protocol::RECORD_ENV).as_deref() == Ok("1") {
        protocol::write_recorded(&version, &lines);
        eprintln!("wrote {}", protocol::observed_file().display());
        return;
    }
    let (recorded_version, recorded) = protocol::recorded();
    let diff = protocol::diff(&recorded, &lines);
    assert!(
        recorded_version == version && diff.is_empty(),
        "the real cluster ({version}) did not behave as recorded in {} ({recorded_version}); \
         if the change is intended, rerun with {}=1 and review the diff:\n{}",
        protocol::observed_file().display(),
        protocol::RECORD_ENV,
        diff.join("\n")
    );
}

/// The scenarios on the emulator (one node named as the real one, the same Kubernetes
/// minor version), compared with what the real cluster showed. Runs everywhere.
#[test]
fn the_emulator_behaves_as_the_real_cluster_did() {
    let _turn = turn();
    let (version, real) = protocol::recorded();
    assert!(
        !real.is_empty()
            && version.starts_with(&format!(
                "v{}.{}.",
                protocol::RECORDED_ON.0,
                protocol::RECORDED_ON.1
            )),
        "{} holds no protocol of Kubernetes {:?} (version line: {version:?})",
        protocol::observed_file().display(),
        protocol::RECORDED_ON
    );
    let rt = runtime();
    let lines = rt.block_on(async {
        let mut emulated = Emulated::start(NODE).await;
        let mut p = Protocol::default();
        all_scenarios(&mut emulated, &mut p).await;
        emulated.shutdown().await;
        p.lines()
    });
    let (unexpected, documented) = protocol::compare_with_real(&real, &lines);
    for d in &documented {
        eprintln!("documented difference: {d}");
    }
    assert!(
        unexpected.is_empty(),
        "the emulator differs from the real cluster ({version}) where no difference is documented \
         (fix the emulator, or add the difference to KNOWN_DIFFERENCES in e2e/tests/real/protocol.rs \
         and to docs/emulator.md with the upstream behaviour):\n{}",
        unexpected.join("\n")
    );
}
