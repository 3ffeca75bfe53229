//! The real-cluster suite's parts (e2e/tests/it/real_cluster.rs): the cluster of
//! hack/local-cluster.sh, the emulator beside it, the scenarios both run, and the record
//! they are compared by.

pub mod access;
pub mod backend;
pub mod cluster;
pub mod features;
pub mod filters;
pub mod protocol;
pub mod resources;
pub mod rules;
pub mod scenarios;
pub mod taint_rules;
