//! The end-to-end scenarios on a REAL Kubernetes cluster: the one-node cluster of
//! `hack/local-cluster.sh` (kube-apiserver, kube-scheduler, kubelet, containerd ... built
//! from the Go module proxy by `hack/kube-build.sh`, docs/real-kubernetes.md), with our
//! images packed from the binaries this `cargo test` built and `deploy/structured`
//! applied by `hack/deploy.sh`. One cluster for all scenarios: brought up at the start,
//! taken down at the end, also when a scenario fails. The release is the one
//! `KUBE_MODULE` selects (hack/kube/; hack/real-matrix.sh runs every one): a scenario
//! whose feature gate a default cluster of that release has off records that it does
//! not apply, and a failing scenario is recorded and the next one runs.
//!
//! The same scenarios then run on the emulator at each recorded release, and what it
//! shows is compared with what the real cluster of that release showed
//! (`real/observed/1.<minor>.txt`): every difference must be a documented one
//! (`real::protocol::KNOWN_DIFFERENCES`, docs/emulator.md).
//!
//! Needs root, the Go-built components and the host packages (runc, CNI plugins,
//! busybox-static, iptables, openssl, binutils): without them the real-cluster test prints
//! `SKIPPED: …` and passes, or fails when `FAKE_DRA_REQUIRE_REAL_K8S=1` (CI,
//! `hack/ci-real-k8s.sh`). It also skips when another cluster already runs on this
//! machine (there is room for one), or when `FAKE_DRA_REAL_K8S=0`.
//! `FAKE_DRA_KEEP_REAL_CLUSTER=1` leaves the cluster up afterwards;
//! `FAKE_DRA_RECORD_REAL_CLUSTER=1` rewrites the release's observed file;
//! `FAKE_DRA_REAL_RESULTS=FILE` writes each scenario's outcome there.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::real;
use std::time::Instant;

use fake_dra_emulator::apiserver::gates::FeatureGates;
use real::backend::{Backend, Emulated};
use real::cluster::RealCluster;
use real::protocol::{self, Outcome, Protocol, Release};
use real::{access, features, filters, rules, scenarios, taint_rules};

const REQUIRE_ENV: &str = "FAKE_DRA_REQUIRE_REAL_K8S";
/// `0` turns the real-cluster test off (a SKIPPED line), e.g. for a `cargo test --workspace`
/// that CI follows with hack/ci-real-k8s.sh, which runs it.
const ENABLE_ENV: &str = "FAKE_DRA_REAL_K8S";
/// The node of hack/local-cluster.sh (its NODE_NAME default), also given to the emulator.
const NODE: &str = "fake-dra-node";
/// Where the real run writes each scenario's outcome for hack/real-matrix.sh.
const RESULTS_ENV: &str = "FAKE_DRA_REAL_RESULTS";

/// One cluster at a time, real or emulated: the real one has fixed paths, and both want the
/// two cores (the same turn as the emulator suites' `common::start`).
fn turn() -> tokio::sync::MutexGuard<'static, ()> {
    crate::common::one_at_a_time()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Runs each scenario in its own `block_on`, so a failing one (a panic) is recorded as
/// failed and the run goes on with the next, after [`reset`] put the cluster back.
macro_rules! run_scenarios {
    ($rt:expr, $b:expr, $p:expr, [$($scenario:path),* $(,)?]) => {{
        let mut broken = false;
        $(
            if !broken {
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    $rt.block_on($scenario(&mut *$b, &mut *$p))
                }));
                if let Err(panic) = outcome {
                    $p.failed(&panic_message(&panic));
                    $b.diagnose();
                    let reset = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        $rt.block_on(reset(&mut *$b))
                    }));
                    if let Err(panic) = reset {
                        eprintln!(
                            "the cluster could not be put back after a failed scenario ({}); \
                             the remaining scenarios do not run",
                            panic_message(&panic)
                        );
                        broken = true;
                    }
                }
            }
        )*
        !broken
    }};
}

/// Every scenario, in an order that keeps the disruptive ones last; false when the
/// cluster broke and the rest did not run.
fn all_scenarios<B: Backend>(rt: &tokio::runtime::Runtime, b: &mut B, p: &mut Protocol) -> bool {
    run_scenarios!(
        rt,
        b,
        p,
        [
            scenarios::published_slice,
            access::rbac_equals_the_api_access_table,
            access::slices_of_another_node_are_denied,
            rules::api_rules,
            scenarios::two_pods_get_distinct_devices,
            scenarios::two_containers_share_a_claim,
            scenarios::global_claim_shared_until_its_last_user,
            scenarios::count_4,
            scenarios::count_4_split_2,
            scenarios::deployment_replicas,
            scenarios::model_selector,
            scenarios::over_request_and_freed_devices,
            scenarios::bad_opaque_parameters,
            scenarios::device_class_on_a_missing_attribute,
            scenarios::container_naming_one_request,
            filters::node_filters,
            features::prioritized_list,
            features::match_attribute,
            features::admin_access,
            features::extended_resource,
            features::gpu_profile,
            features::device_taints,
            taint_rules::device_taint_rules,
            taint_rules::taint_rule_api,
            features::device_health,
            features::prepare_fault,
            features::binding_conditions,
            features::device_status,
            features::fleet_mode,
            features::getinfo_fault,
            scenarios::kill_9_of_the_plugin,
            scenarios::kubelet_restart,
            scenarios::nothing_left,
        ]
    )
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic without a message".to_string())
}

/// After a failed scenario: its namespaces, faults and DeviceClasses go, the plugin runs
/// the fake devices again, and nothing stays prepared.
async fn reset<B: Backend>(b: &mut B) {
    eprintln!("    (putting the cluster back after the failed scenario)");
    scenarios::reset(b).await;
}

/// The results as hack/real-matrix.sh reads them (`FAKE_DRA_REAL_RESULTS`): one line per
/// scenario, `<scenario>\t<passed|failed|not applicable>\t<detail>`.
fn write_results(p: &Protocol, differing: &std::collections::BTreeSet<String>) {
    let Ok(path) = std::env::var(RESULTS_ENV) else {
        return;
    };
    let mut text = String::new();
    for (scenario, outcome) in p.results() {
        let (what, detail) = match outcome {
            Outcome::Passed if differing.contains(scenario) => {
                ("failed", "differs from the record".to_string())
            }
            Outcome::Passed => ("passed", String::new()),
            Outcome::Failed(m) => ("failed", m.lines().next().unwrap_or_default().to_string()),
            Outcome::NotApplicable(why) => ("not applicable", why.clone()),
        };
        text.push_str(&format!("{scenario}\t{what}\t{detail}\n"));
    }
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("writing {path}: {e}"));
}

/// Each scenario's outcome, for the test's output.
fn summary(p: &Protocol, differing: &std::collections::BTreeSet<String>) -> (usize, usize, usize) {
    let (mut passed, mut failed, mut not_applicable) = (0, 0, 0);
    for (scenario, outcome) in p.results() {
        match outcome {
            Outcome::Passed if !differing.contains(scenario) => passed += 1,
            Outcome::NotApplicable(_) => not_applicable += 1,
            _ => failed += 1,
        }
    }
    (passed, failed, not_applicable)
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
    let release = cluster.release();
    let up = started.elapsed();
    let mut p = Protocol::new(release.clone());
    let complete = all_scenarios(&rt, &mut cluster, &mut p);
    let version = cluster.layout().get("KUBE_VERSION").to_string();
    let ran = started.elapsed();
    drop(cluster);
    // Reported, never asserted on.
    eprintln!(
        "real-cluster suite ({version}): cluster up and driver deployed after {} s, scenarios done after {} s, cluster down after {} s",
        up.as_secs(),
        ran.as_secs(),
        started.elapsed().as_secs()
    );

    let lines = p.lines();
    let minor = release.minor();
    let compared = release.is_default() && complete;
    let record = std::env::var(protocol::RECORD_ENV).as_deref() == Ok("1");
    let (recorded_version, recorded) = protocol::recorded(minor);
    let differing = if compared && !record {
        protocol::differing_scenarios(&recorded, &lines)
    } else {
        Default::default()
    };
    write_results(&p, &differing);
    let (passed, failed, not_applicable) = summary(&p, &differing);
    eprintln!(
        "real-cluster scenarios on {version}: {passed} passed, {failed} failed, {not_applicable} not applicable"
    );
    let failures: Vec<String> = p
        .results()
        .iter()
        .filter_map(|(s, o)| match o {
            Outcome::Failed(m) => Some(format!("{s}: {m}")),
            _ => None,
        })
        .collect();
    assert!(
        failures.is_empty() && complete,
        "scenarios failed on the real cluster ({version}){}:\n{}",
        if complete {
            ""
        } else {
            " and the cluster broke, so the rest did not run"
        },
        failures.join("\n")
    );
    if !release.is_default() {
        let gates = std::env::var(protocol::FEATURE_GATES_ENV).unwrap_or_default();
        eprintln!(
            "{}={gates}: not a default cluster, so not recorded; compared with the emulator started with the same gates",
            protocol::FEATURE_GATES_ENV,
        );
        match FeatureGates::parse(&gates, release.version) {
            Ok(emulated) => emulator_with_gates(&rt, &release, emulated, &lines),
            Err(why) => eprintln!("NOT COMPARED with the emulator: {why}"),
        }
        return;
    }
    if record {
        protocol::write_recorded(minor, &version, &lines);
        eprintln!("wrote {}", protocol::observed_file(minor).display());
        return;
    }
    let diff = protocol::diff(&recorded, &lines);
    assert!(
        recorded_version == version && diff.is_empty(),
        "the real cluster ({version}) did not behave as recorded in {} ({recorded_version}); \
         if the change is intended, rerun with {}=1 and review the diff:\n{}",
        protocol::observed_file(minor).display(),
        protocol::RECORD_ENV,
        diff.join("\n")
    );
}

/// Every scenario on the emulator at `release` with `gates`, and whether all ran; when
/// one failed, the sim's driver logs are printed before its work directory goes.
fn scenarios_on_the_emulator(
    rt: &tokio::runtime::Runtime,
    release: &Release,
    gates: FeatureGates,
) -> (Protocol, bool) {
    let mut emulated = rt.block_on(Emulated::start(NODE, release, gates));
    let mut p = Protocol::new(release.clone());
    let complete = all_scenarios(rt, &mut emulated, &mut p);
    let failed = p
        .results()
        .iter()
        .any(|(_, o)| matches!(o, Outcome::Failed(_)));
    if failed || !complete {
        eprintln!(
            "a scenario failed on the emulator at {}.{}; its driver logs:\n{}",
            release.version.0,
            release.version.1,
            emulated.log_tails(60)
        );
    }
    rt.block_on(emulated.shutdown());
    (p, complete)
}

/// A gated real run's scenarios (`real`) against the emulator started with the same
/// gates, at the same release: as the recorded comparison, but live.
fn emulator_with_gates(
    rt: &tokio::runtime::Runtime,
    release: &Release,
    gates: FeatureGates,
    real: &[String],
) {
    let spec = gates.spec();
    let (p, complete) = scenarios_on_the_emulator(rt, release, gates);
    let (unexpected, documented) = protocol::compare_with_real(real, &p.lines());
    for d in &documented {
        eprintln!("documented difference: {d}");
    }
    assert!(complete, "the emulator broke; not every scenario ran");
    assert!(
        unexpected.is_empty(),
        "the emulator at Kubernetes {}.{} with --feature-gates {spec} differs from the real cluster with the same gates where no difference is documented:\n{}",
        release.version.0,
        release.version.1,
        unexpected.join("\n")
    );
    eprintln!(
        "the emulator with --feature-gates {spec} behaved as the real cluster with the same gates ({} documented differences)",
        documented.len()
    );
}

/// The scenarios on the emulator at the release of `observed/1.<minor>.txt` (one node
/// named as the real one), compared with what the real cluster of that release showed.
fn emulator_as_recorded(minor: u32) {
    let _turn = turn();
    let (version, real) = protocol::recorded(minor);
    assert!(
        !real.is_empty() && version.starts_with(&format!("v1.{minor}.")),
        "{} holds no protocol of Kubernetes 1.{minor} (version line: {version:?})",
        protocol::observed_file(minor).display(),
    );
    let rt = runtime();
    let release = Release::default_cluster((1, minor));
    let (p, complete) = scenarios_on_the_emulator(&rt, &release, FeatureGates::default());
    let unrecorded = protocol::not_yet_recorded(minor, &real);
    for scenario in &unrecorded {
        eprintln!(
            "NOT COMPARED: scenario {scenario} ran on the emulator at 1.{minor}, but {} has no \
             real run of it yet (hack/real-matrix.sh --record 1.{minor} records one)",
            protocol::observed_file(minor).display()
        );
    }
    let lines = protocol::without_scenarios(p.lines(), &unrecorded);
    let (unexpected, documented) = protocol::compare_with_real(&real, &lines);
    for d in &documented {
        eprintln!("documented difference: {d}");
    }
    assert!(complete, "the emulator broke; not every scenario ran");
    assert!(
        unexpected.is_empty(),
        "the emulator at Kubernetes 1.{minor} differs from the real cluster ({version}) where no \
         difference is documented (fix the emulator, or add the difference to KNOWN_DIFFERENCES in \
         e2e/tests/it/real/protocol.rs and to docs/emulator.md with the upstream behaviour):\n{}",
        unexpected.join("\n")
    );
}

/// One test per recorded release, named after it.
macro_rules! emulator_as_recorded {
    ($($name:ident = $minor:literal),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                emulator_as_recorded($minor);
            }
        )*

        #[test]
        fn every_recorded_release_is_compared_with_the_emulator() {
            assert_eq!(
                protocol::recorded_releases(),
                vec![$($minor),*],
                "each file of {} needs its emulator_as_recorded! entry in e2e/tests/it/real_cluster.rs",
                protocol::observed_dir().display()
            );
        }
    };
}

emulator_as_recorded!(
    the_emulator_behaves_as_the_real_cluster_did_on_1_32 = 32,
    the_emulator_behaves_as_the_real_cluster_did_on_1_33 = 33,
    the_emulator_behaves_as_the_real_cluster_did_on_1_34 = 34,
    the_emulator_behaves_as_the_real_cluster_did_on_1_35 = 35,
    the_emulator_behaves_as_the_real_cluster_did_on_1_36 = 36,
    the_emulator_behaves_as_the_real_cluster_did_on_1_37 = 37,
);
