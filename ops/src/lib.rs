//! What fake-dra's binaries share to run as Kubernetes components, whatever the driver:
//! flags and their environment twins ([`flags`]), logging ([`logging`]), graceful
//! shutdown ([`signals`]), the Kubernetes client ([`client`]), accept loops no client can
//! take down ([`conn`]), reading the files users name, bounded ([`files`]), a nesting limit to check YAML
//! against before parsing it ([`yaml`]), the `/healthz` `/readyz` `/metrics` server
//! ([`health`]), and what each binary says it is ([`version`]).
//!
//! [`conn`] and [`health`] are the DRA kubelet plugin library's ([`dra_kubelet_plugin::net`]),
//! which serves its sockets with them; fake-dra's other binaries use the same.

pub use dra_kubelet_plugin::net::{conn, health};

pub mod client;
pub mod files;
pub mod flags;
pub mod logging;
pub mod signals;
pub mod text;
pub mod version;
pub mod yaml;
