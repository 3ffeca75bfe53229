//! Upstream Kubernetes types that k8s-openapi 0.29 (1.34+) no longer ships or models
//! differently, written here so kube clients can use them: `resource.k8s.io/v1alpha2`
//! (classic DRA), 1.37's DeviceTaintRule, the Pod as every release we support serves it and node
//! selector evaluation. Not fake-dra's API; kept apart so it is not mistaken for it.

pub mod device_taint_rule;
pub mod node_selector;
pub mod pod;
pub mod v1alpha2;
