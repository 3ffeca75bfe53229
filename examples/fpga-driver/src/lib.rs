//! The FPGA driver's device profile, a library so that its tests (`tests/`) run it as
//! the binary does.

pub mod config;
pub mod profile;
