//! The integration tests of `emulator`, one test binary (each file a module): the
//! dependencies link once, not once per file (docs/ci.md).
#![allow(clippy::expect_used, clippy::panic, clippy::unwrap_used)]

mod apiserver;
mod apply;
mod hostile;
mod lifeline;
mod runtime;
mod scheduling;
mod structured_emulator;
mod workloads;
