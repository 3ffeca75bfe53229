//! The per-node kubelet plugin: registration, DRA gRPC, CDI specs, checkpoint. Filled in by the kubelet-plugin issue.
