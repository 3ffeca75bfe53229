//! What containers of a fake claim see: environment variables only, no device nodes.
//!
//! - the node-wide `common` device: `FAKE_NODE_NAME` and `DRA_RESOURCE_DRIVER_NAME`;
//! - the claim device `<claim uid>`, for a container using the whole claim:
//!   - `FAKE_DEVICE_<i>=<id>` for every device the claim's containers see (children
//!     included, `i` from 0) and `FAKE_DEVICE_MODEL=<model>`, as the original driver set
//!     them. A container with two claims gets both sets; whichever the runtime applies
//!     last wins, so these are only meaningful for a single claim.
//!   - `FAKE_CLAIM_<UID>_DEVICE_<i>` and `FAKE_CLAIM_<UID>_DEVICE_MODEL`, where `<UID>`
//!     is the claim uid upper-cased with every character outside `[A-Z0-9]` turned into
//!     `_`. These never collide between claims, so a container with several claims sees
//!     every device of each.
//!   - `FAKE_CLAIM_<UID>_DEVICE_COUNT`, so a program can iterate without guessing.
//! - one device per **parent** device of the claim, `<claim uid>:<k>` (`k` the parent's
//!   position in the claim): the same variables for that parent's children only, with the
//!   claim-wide numbering `i` and the claim-wide model and count. A structured kubelet
//!   gives a container the CDI ids of the devices of the requests it names
//!   (`claiminfo.go`, `cdiDevicesAsList`), so each allocated device answers with its own
//!   parent's device: a container naming one request of a claim sees that request's
//!   devices and no others; one naming the whole claim sees them all. (The shared
//!   variables repeat with equal values; runtimes keep one per name.)

use super::devices::ChildDevice;
use dra_kubelet_plugin::cdi::{ContainerEdits, Device};
use dra_kubelet_plugin::claim::ClaimUid;

/// The env variable with the node name.
pub const ENV_NODE_NAME: &str = "FAKE_NODE_NAME";
/// The env variable with the driver name.
pub const ENV_DRIVER_NAME: &str = "DRA_RESOURCE_DRIVER_NAME";

/// The node-wide edits.
pub fn common(node_name: &str, driver_name: &str) -> ContainerEdits {
    ContainerEdits::new()
        .env(ENV_NODE_NAME, node_name)
        .env(ENV_DRIVER_NAME, driver_name)
}

/// The `<UID>` part of a claim's per-claim variables.
pub fn claim_env_key(claim_uid: &str) -> String {
    claim_uid
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// The CDI device of the `k`-th parent device of a claim.
pub fn parent_device_name(uid: &ClaimUid, k: usize) -> String {
    format!("{uid}:{k}")
}

/// The env of the children `devices` (claim-wide index, child) of a claim with `count`
/// children in all.
fn claim_env(
    key: &str,
    model: &str,
    devices: &[(usize, &ChildDevice)],
    count: usize,
) -> Vec<String> {
    let mut env = Vec::with_capacity(devices.len() * 2 + 3);
    for (i, d) in devices {
        env.push(format!("FAKE_DEVICE_{i}={}", d.id));
    }
    env.push(format!("FAKE_DEVICE_MODEL={model}"));
    for (i, d) in devices {
        env.push(format!("FAKE_CLAIM_{key}_DEVICE_{i}={}", d.id));
    }
    env.push(format!("FAKE_CLAIM_{key}_DEVICE_MODEL={model}"));
    env.push(format!("FAKE_CLAIM_{key}_DEVICE_COUNT={count}"));
    env
}

/// The claim's devices: `<uid>` with every child, then one per parent with that parent's
/// children. `devices` lists the children parent by parent, as
/// [`super::devices::children`] gives them.
pub fn claim_devices(uid: &ClaimUid, model: &str, devices: &[ChildDevice]) -> Vec<Device> {
    let key = claim_env_key(uid.as_str());
    let indexed: Vec<(usize, &ChildDevice)> = devices.iter().enumerate().collect();
    let mut cdi_devices = vec![Device::new(
        uid.to_string(),
        ContainerEdits::new().env_entries(claim_env(&key, model, &indexed, devices.len())),
    )];
    for (k, children) in indexed
        .chunk_by(|a, b| a.1.parent == b.1.parent)
        .enumerate()
    {
        cdi_devices.push(Device::new(
            parent_device_name(uid, k),
            ContainerEdits::new().env_entries(claim_env(&key, model, children, devices.len())),
        ));
    }
    cdi_devices
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use proptest::prelude::*;

    use super::super::devices::{children, parent_id};
    use super::*;

    #[test]
    fn the_common_device_names_node_and_driver() {
        assert_eq!(
            common("node-1", "drv").env,
            vec!["FAKE_NODE_NAME=node-1", "DRA_RESOURCE_DRIVER_NAME=drv"]
        );
    }

    #[test]
    fn claim_env_has_seed_and_per_claim_variables() {
        let parents = vec![parent_id("n", 0), parent_id("n", 1)];
        let kids = children(&parents, 2);
        let uid = ClaimUid::parse("7a-b.c").unwrap();
        let devices = claim_devices(&uid, "ULTRA_10", &kids);
        assert_eq!(devices.len(), 3, "the claim and its two parents");
        assert_eq!(devices[0].name, "7a-b.c");
        let env = &devices[0].container_edits.env;
        assert_eq!(env.len(), 4 + 1 + 4 + 2);
        assert_eq!(env[0], format!("FAKE_DEVICE_0={}", kids[0].id));
        assert_eq!(env[3], format!("FAKE_DEVICE_3={}", kids[3].id));
        assert_eq!(env[4], "FAKE_DEVICE_MODEL=ULTRA_10");
        assert_eq!(env[5], format!("FAKE_CLAIM_7A_B_C_DEVICE_0={}", kids[0].id));
        assert_eq!(env[9], "FAKE_CLAIM_7A_B_C_DEVICE_MODEL=ULTRA_10");
        assert_eq!(env[10], "FAKE_CLAIM_7A_B_C_DEVICE_COUNT=4");
    }

    #[test]
    fn each_parent_has_a_device_with_its_children_numbered_claim_wide() {
        let parents = vec![parent_id("n", 0), parent_id("n", 5), parent_id("n", 2)];
        let kids = children(&parents, 2);
        let uid = ClaimUid::parse("u").unwrap();
        let devices = claim_devices(&uid, "M", &kids);
        let names: Vec<&str> = devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["u", "u:0", "u:1", "u:2"]);
        let second = &devices[2].container_edits.env;
        assert_eq!(
            second,
            &vec![
                format!("FAKE_DEVICE_2={}", kids[2].id),
                format!("FAKE_DEVICE_3={}", kids[3].id),
                "FAKE_DEVICE_MODEL=M".to_string(),
                format!("FAKE_CLAIM_U_DEVICE_2={}", kids[2].id),
                format!("FAKE_CLAIM_U_DEVICE_3={}", kids[3].id),
                "FAKE_CLAIM_U_DEVICE_MODEL=M".to_string(),
                "FAKE_CLAIM_U_DEVICE_COUNT=6".to_string(),
            ]
        );
        // Together the parents' devices set exactly what the whole claim's device sets.
        let mut whole: Vec<&String> = devices[0].container_edits.env.iter().collect();
        let mut parts: Vec<&String> = devices[1..]
            .iter()
            .flat_map(|d| &d.container_edits.env)
            .collect();
        whole.sort();
        parts.sort();
        parts.dedup();
        assert_eq!(whole, parts);
    }

    proptest! {
        #[test]
        fn any_uid_accepted_is_path_and_env_safe(uid in "\\PC{0,200}") {
            if ClaimUid::parse(&uid).is_ok() {
                prop_assert!(!uid.contains('/') && !uid.contains("..") && !uid.contains('\0'));
                prop_assert!(uid.len() <= dra_kubelet_plugin::claim::MAX_CLAIM_UID_LEN);
                let key = claim_env_key(&uid);
                prop_assert!(key.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'));
            }
        }
    }
}
