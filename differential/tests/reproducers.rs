//! Every reproducer under e2e/tests/differential/ (shrunk disagreements, each written up
//! in its header) replayed on the emulator: the checker must find nothing now. A
//! reproducer of a kube-scheduler bug would record the observed behaviour instead; there
//! is none yet.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use fake_dra_differential::{Verdict, judge, oracle, read_reproducer};

fn reproducers() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../e2e/tests/differential");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_reproducer_agrees_on_the_emulator() {
    let files = reproducers();
    assert!(files.len() >= 2, "reproducers: {files:?}");
    let oracles = [oracle::Oracle::Emulator(oracle::Emulator {
        release: (1, 37),
    })];
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let world = read_reproducer(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let (verdict, outcomes) = judge(&oracles, &world).await.unwrap();
        assert!(
            matches!(verdict, Verdict::Agree { scheduled, .. } if scheduled == world.pods.len()),
            "{}: {verdict:?}, {outcomes:?}",
            file.display()
        );
    }
}
