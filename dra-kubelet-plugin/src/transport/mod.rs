//! What the plugin serves its sockets and its HTTP port with: accept loops that no client
//! can take down ([`conn`]) and the `/healthz` `/readyz` `/metrics` endpoints
//! ([`health`]).

pub mod conn;
pub mod health;
