//! The integration tests of `kubelet-plugin`, one test binary (each file a module): the
//! dependencies link once, not once per file (docs/ci.md).
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

mod counter_profile;
mod faults;
mod fleet;
mod gpu_profile;
mod hardening;
mod hostile;
mod plugin;
mod podman;
mod structured;
mod wire_clients;
