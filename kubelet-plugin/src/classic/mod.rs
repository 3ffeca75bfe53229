//! What only classic DRA (Kubernetes 1.27–1.30) needs on the node besides the `v1alpha2`
//! / `v1alpha3` services (`grpc::classic`) and the fake profile's handle reading
//! (`fake::classic`): the NodeAllocationState publisher. A structured-only driver can
//! delete this module.

pub mod nas;
