//! What containers of a GPU claim see: environment variables only, no device nodes.
//!
//! Each allocated device `k` of the claim (its position in the allocation) is
//! `FAKE_GPU_<k>`:
//!
//! - `FAKE_GPU_<k>=<uuid>` (a partition's own uuid; a share's GPU's),
//! - `FAKE_GPU_<k>_PRODUCT=<productName>`,
//! - `FAKE_GPU_<k>_MEMORY=<memory>`: the GPU's, the partition's, or what the share
//!   consumes as the API wrote it,
//! - `FAKE_GPU_<k>_PARTITION=<profile>` for partitions,
//! - `FAKE_GPU_<k>_SHARE=<shareID>` for shares.
//!
//! The claim device `<uid>` has every device's variables and `FAKE_GPU_COUNT=<n>`; the
//! device `<uid>:<k>` has device `k`'s only, so a container naming one request of a claim
//! sees that request's devices (a structured kubelet injects per allocated device).

use dra_kubelet_plugin::cdi::{ContainerEdits, Device};
use dra_kubelet_plugin::claim::ClaimUid;

/// What a container sees of one allocated device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenDevice {
    pub uuid: String,
    pub product: String,
    pub memory: String,
    /// The partition profile, for partitions.
    pub partition: Option<String>,
    /// The share id, for shares.
    pub share: Option<String>,
}

/// The CDI device of the claim's `k`-th allocated device.
pub fn device_name(uid: &ClaimUid, k: usize) -> String {
    format!("{uid}:{k}")
}

/// The variables of device `k`.
pub fn device_env(k: usize, d: &SeenDevice) -> Vec<String> {
    let mut env = vec![
        format!("FAKE_GPU_{k}={}", d.uuid),
        format!("FAKE_GPU_{k}_PRODUCT={}", d.product),
        format!("FAKE_GPU_{k}_MEMORY={}", d.memory),
    ];
    if let Some(p) = &d.partition {
        env.push(format!("FAKE_GPU_{k}_PARTITION={p}"));
    }
    if let Some(s) = &d.share {
        env.push(format!("FAKE_GPU_{k}_SHARE={s}"));
    }
    env
}

/// The claim's CDI devices: `<uid>` with everything, then `<uid>:<k>` per device.
/// `devices` are (position in the claim, what is seen), ascending; `count` is how many
/// devices the claim has.
pub fn claim_devices(uid: &ClaimUid, devices: &[(usize, SeenDevice)], count: usize) -> Vec<Device> {
    claim_devices_with(uid, devices, count, Vec::new(), |_| Vec::new())
}

/// [`claim_devices`] with more variables: `claim` on `<uid>`, `device(k)` on `<uid>:<k>`
/// (another profile's variables next to these, e.g. the nvidia profile's
/// `NVIDIA_VISIBLE_DEVICES`).
pub fn claim_devices_with(
    uid: &ClaimUid,
    devices: &[(usize, SeenDevice)],
    count: usize,
    claim: Vec<String>,
    device: impl Fn(usize) -> Vec<String>,
) -> Vec<Device> {
    let mut all: Vec<String> = devices
        .iter()
        .flat_map(|(k, d)| device_env(*k, d))
        .collect();
    all.push(format!("FAKE_GPU_COUNT={count}"));
    all.extend(claim);
    std::iter::once(Device::new(
        uid.to_string(),
        ContainerEdits::new().env_entries(all),
    ))
    .chain(devices.iter().map(|(k, d)| {
        let mut env = device_env(*k, d);
        env.extend(device(*k));
        Device::new(device_name(uid, *k), ContainerEdits::new().env_entries(env))
    }))
    .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn seen(uuid: &str, partition: Option<&str>, share: Option<&str>) -> SeenDevice {
        SeenDevice {
            uuid: uuid.into(),
            product: "P".into(),
            memory: "10Gi".into(),
            partition: partition.map(Into::into),
            share: share.map(Into::into),
        }
    }

    #[test]
    fn each_device_has_its_variables_and_the_claim_has_all() {
        let uid = ClaimUid::parse("u").unwrap();
        let devices = claim_devices(
            &uid,
            &[
                (0, seen("GPU-a", None, None)),
                (1, seen("GPU-b", Some("1g.10gb"), None)),
                (2, seen("GPU-c", None, Some("s1"))),
            ],
            3,
        );
        let names: Vec<&str> = devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["u", "u:0", "u:1", "u:2"]);
        assert_eq!(
            devices[2].container_edits.env,
            [
                "FAKE_GPU_1=GPU-b",
                "FAKE_GPU_1_PRODUCT=P",
                "FAKE_GPU_1_MEMORY=10Gi",
                "FAKE_GPU_1_PARTITION=1g.10gb"
            ]
        );
        assert_eq!(
            devices[3].container_edits.env.last().unwrap(),
            "FAKE_GPU_2_SHARE=s1"
        );
        let whole = &devices[0].container_edits.env;
        assert_eq!(whole.last().unwrap(), "FAKE_GPU_COUNT=3");
        let parts: Vec<&String> = devices[1..]
            .iter()
            .flat_map(|d| &d.container_edits.env)
            .collect();
        assert_eq!(whole[..whole.len() - 1].iter().collect::<Vec<_>>(), parts);
    }
}
