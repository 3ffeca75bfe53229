//! fake-dra's end-to-end suites live in `tests/`: the seed scenarios of both DRA
//! generations on the emulator (`fake-dra-emulator`), the deploy manifests and the Helm
//! chart, and the same scenarios on a real cluster built here (`real_cluster.rs`). This
//! crate has no code of its own; Cargo needs a target besides the tests.
