//! The integration tests of `e2e`, one test binary (each file a module): the
//! dependencies link once, not once per file (docs/ci.md).
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod chaos;
mod common;
mod external;
mod fuzz;
mod real;

mod classic;
mod deploy;
mod kubectl;
mod kubectl_everyday;
mod kubelet;
mod kueue;
mod kwok;
mod metrics;
mod real_cluster;
mod soak;
mod structured;
