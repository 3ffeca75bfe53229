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
