//! What only classic DRA (Kubernetes 1.27–1.30) needs of fake-dra on the node, besides the
//! library's `classic` feature (the `v1alpha2` / `v1alpha3` services) and the fake
//! profile's handle reading (`fake::classic`): the NodeAllocationState publisher, the
//! library's classic publisher. A structured-only driver has none of it.

pub mod nas;
