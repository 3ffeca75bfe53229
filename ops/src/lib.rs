//! What fake-dra's binaries share to run as Kubernetes components, whatever the driver:
//! accept loops no client can take down ([`conn`]) and the `/healthz` `/readyz`
//! `/metrics` server ([`health`]).

pub mod conn;
pub mod health;
