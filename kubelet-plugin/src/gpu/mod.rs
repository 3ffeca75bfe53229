//! A GPU-like device profile (being written).
