//! The fixed-seed batch CI runs with `cargo test`: 40 worlds through the emulator, each
//! judged by the checker. A disagreement fails the test with its shrunk reproducer in
//! the output (`fake-dra-differential --seed S --worlds 1 --out DIR` writes it).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use fake_dra_differential::{oracle, run_batch};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_batch_of_worlds_agrees_with_the_checker() {
    let oracles = [oracle::Oracle::Emulator(oracle::Emulator {
        release: (1, 37),
    })];
    let report = run_batch(&oracles, 1, 40, 200, None).await.unwrap();
    eprintln!("{}", report.text());
    assert_eq!(report.worlds, 40);
    assert!(report.invalid.is_empty(), "{}", report.text());
    // Both outcomes occur, so the batch tests something on each side.
    assert!(
        report.pods_scheduled > 0 && report.pods_unschedulable > 0,
        "{}",
        report.text()
    );
    let reproducers: Vec<String> = report
        .findings
        .iter()
        .map(|f| fake_dra_differential::reproducer(f).unwrap_or_default())
        .collect();
    assert!(
        report.findings.is_empty(),
        "{}\n{}",
        report.text(),
        reproducers.join("\n")
    );
}

/// The issue's input "128 devices with one counter set shared by all": two device slices
/// (64 each, the limit when devices consume counters) and the counter set's own slice in
/// one pool. The set has 3 slots, each device takes 1: two devices, then not two more,
/// then one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_set_shared_by_128_devices_limits_them_all() {
    use fake_dra_differential::check::PodOutcome;
    use fake_dra_differential::world::{
        ClaimSpec, ClassSpec, DeviceSpec, Mode, NodeSpec, PodSpec, RequestSpec, World,
    };
    let pod = |name: &str, count: u32| PodSpec {
        name: name.into(),
        claims: vec![ClaimSpec {
            requests: vec![RequestSpec {
                name: "r".into(),
                class: "any".into(),
                mode: Mode::Count(count),
                ..Default::default()
            }],
            match_attributes: Vec::new(),
        }],
    };
    let world = World {
        seed: 0,
        tag: String::new(),
        nodes: vec![NodeSpec {
            name: "node-0".into(),
            devices: (0..128)
                .map(|i| DeviceSpec {
                    name: format!("dev-{i}"),
                    consumes: Some(1),
                    ..Default::default()
                })
                .collect(),
            counter: Some(3),
        }],
        classes: vec![ClassSpec {
            name: "any".into(),
            selector: None,
        }],
        pods: vec![pod("pod-0", 2), pod("pod-1", 2), pod("pod-2", 1)],
    };
    let slices: Vec<_> = world
        .objects()
        .into_iter()
        .filter(|o| o["kind"] == "ResourceSlice")
        .collect();
    assert_eq!(slices.len(), 3, "{slices:?}");
    assert!(
        slices
            .iter()
            .all(|s| s["spec"]["pool"]["resourceSliceCount"] == 3)
    );
    let oracles = [oracle::Oracle::Emulator(oracle::Emulator {
        release: (1, 37),
    })];
    let (verdict, outcomes) = fake_dra_differential::judge(&oracles, &world)
        .await
        .unwrap();
    assert!(
        matches!(
            verdict,
            fake_dra_differential::Verdict::Agree {
                scheduled: 2,
                unschedulable: 1,
                ..
            }
        ),
        "{verdict:?}: {outcomes:?}"
    );
    assert!(
        matches!(outcomes[1], PodOutcome::Unschedulable { .. }),
        "{outcomes:?}"
    );
}
