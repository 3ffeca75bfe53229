//! Per-node inventory from a file or flags (being written).
