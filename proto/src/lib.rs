//! The kubelet's gRPC APIs (plugin registration, DRA node services). Filled in by the kubelet-plugin issue.
