//! The control-plane emulator that fake-dra is verified against, and `fake-dra-sim`. The
//! driver's end-to-end suites live in the test-only crate `e2e/` (`fake-dra-e2e`).
//!
//! No Kubernetes control plane can be installed on the machines this project is built on,
//! so [`apiserver::ApiServer`] stands in for kube-apiserver: an in-memory server over real
//! HTTP on loopback that follows the Kubernetes API conventions for what it implements and
//! answers everything else with a loud `Status` error. The real binaries and real kube-rs
//! clients talk to it unchanged through the kubeconfig it writes. It installs no driver by
//! itself: a test passes the driver's CRDs ([`apiserver::ApiServerOptions::crds`]), and
//! [`sim::Sim`] applies a driver's rendered deploy directory (`SimConfig::deploy_dir`).

pub mod apiserver;
pub mod binaries;
pub mod cel;
pub mod cluster;
pub mod manifests;
pub mod quantity;
pub mod sim;
