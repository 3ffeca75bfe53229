//! What containers of an nvidia claim see: environment variables only. Fake: no device
//! nodes, no driver libraries, no CUDA; a program reading these variables finds the
//! uuids a real node would have given it, and nothing behind them.
//!
//! - `NVIDIA_VISIBLE_DEVICES` and `CUDA_VISIBLE_DEVICES`: the uuids of the devices the
//!   container sees, comma-separated, in the allocation's order: `GPU-<uuid>` for whole
//!   GPUs, `MIG-<uuid>` for MIG devices (both forms CUDA accepts in
//!   `CUDA_VISIBLE_DEVICES`);
//! - the gpu profile's `FAKE_GPU_<k>`, `_PRODUCT`, `_MEMORY` and `_PARTITION` (the MIG
//!   profile), numbered across the claim so they add up however many devices a container
//!   gets ([`crate::gpu::env`]).
//!
//! A container naming a request sees the devices of that request: each allocated
//! device's CDI device lists its request's uuids. A container naming a whole claim of one
//! request sees all of them. (One naming a whole claim of several requests gets several
//! lists; whichever the runtime applies last wins, so it sees one request's.)

/// The variables that list the visible devices.
pub const VISIBLE_DEVICES: [&str; 2] = ["NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"];

/// `NVIDIA_VISIBLE_DEVICES=<uuids>` and `CUDA_VISIBLE_DEVICES=<uuids>`.
pub fn visible_devices(uuids: &[&str]) -> Vec<String> {
    let list = uuids.join(",");
    VISIBLE_DEVICES
        .iter()
        .map(|name| format!("{name}={list}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_variables_list_the_uuids_in_order() {
        assert_eq!(
            visible_devices(&["GPU-a", "MIG-b"]),
            [
                "NVIDIA_VISIBLE_DEVICES=GPU-a,MIG-b",
                "CUDA_VISIBLE_DEVICES=GPU-a,MIG-b"
            ]
        );
    }
}
