//! The integration tests of `proto`, one test binary (each file a module): the
//! dependencies link once, not once per file (docs/ci.md).
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod authority;
mod wire;
