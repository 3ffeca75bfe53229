//! A structured claim's allocation as the plumbing sees it, without I/O: the claim the
//! API returned (version-neutral, see [`crate::claim_reader`]) checked against what the
//! kubelet asked for, narrowed to this driver's devices in this node's pool — the
//! [`DriverAllocation`] a device profile prepares from.

use crate::claim_data::{AllocatedDevice, ClaimRef, ConfigEntry, ConfigSource, DriverAllocation};
use crate::claim_error::ClaimError;
use crate::opaque::{OpaqueConfig, decode_allocation};

/// One `status.allocation.devices.results[]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AllocatedResult {
    /// The request (or `request/subrequest`).
    pub request: String,
    /// `driver`.
    pub driver: String,
    /// `pool`.
    pub pool: String,
    /// The device name in the pool.
    pub device: String,
    /// `adminAccess`.
    pub admin_access: bool,
    /// `shareID`.
    pub share_id: Option<String>,
    /// `consumedCapacity`.
    pub consumed_capacity: std::collections::BTreeMap<String, String>,
}

/// One `status.allocation.devices.config[]` entry with opaque config.
#[derive(Debug, Clone, PartialEq)]
pub struct AllocatedConfig {
    /// Where it came from.
    pub source: ConfigSource,
    /// The requests it applies to; `None` means all.
    pub requests: Option<Vec<String>>,
    /// `opaque.driver`.
    pub driver: String,
    /// `opaque.parameters`.
    pub parameters: serde_json::Value,
}

/// A claim as read from the API: what prepare needs, whichever version it came through.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FetchedClaim {
    /// `metadata.uid`.
    pub uid: String,
    /// The name the pod gives a claim made from its template (the annotation
    /// `resource.kubernetes.io/pod-claim-name`).
    pub pod_claim_name: Option<String>,
    /// `status.allocation.devices`, if allocated.
    pub allocation: Option<FetchedAllocation>,
}

/// `status.allocation.devices`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FetchedAllocation {
    /// `results`, in the API's order.
    pub results: Vec<AllocatedResult>,
    /// `config`, in the API's order.
    pub config: Vec<AllocatedConfig>,
}

/// Checks the claim the API returned (the uid the kubelet meant, allocated, something of
/// `driver`, all of it from `node`'s pool) and keeps what is `driver`'s: its devices and
/// its opaque configs, class configs first (a claim's own settings then win).
pub fn ours(
    driver: &str,
    node: &str,
    claim: &ClaimRef,
    fetched: &FetchedClaim,
) -> Result<DriverAllocation<serde_json::Value>, ClaimError> {
    let who = claim.to_string();
    if fetched.uid != claim.uid.as_str() {
        return Err(ClaimError::UidMismatch {
            claim: who,
            found: fetched.uid.clone(),
            wanted: claim.uid.to_string(),
        });
    }
    let Some(allocation) = &fetched.allocation else {
        return Err(ClaimError::NotAllocated { claim: who });
    };
    let mut devices = Vec::new();
    for r in allocation.results.iter().filter(|r| r.driver == driver) {
        if !is_node_pool(&r.pool, node) {
            return Err(ClaimError::WrongPool {
                claim: who,
                request: r.request.clone(),
                device: r.device.clone(),
                pool: r.pool.clone(),
                node: node.to_owned(),
            });
        }
        let mut device = AllocatedDevice::new(r.request.clone(), r.device.clone());
        device.pool = r.pool.clone();
        device.admin_access = r.admin_access;
        device.share_id = r.share_id.clone();
        device.consumed_capacity = r.consumed_capacity.clone();
        devices.push(device);
    }
    if devices.is_empty() {
        return Err(ClaimError::NoDevices {
            claim: who,
            driver: driver.to_owned(),
        });
    }
    let mut configs: Vec<ConfigEntry<serde_json::Value>> = allocation
        .config
        .iter()
        .enumerate()
        .filter(|(_, c)| c.driver == driver)
        .map(|(index, c)| ConfigEntry {
            source: c.source,
            requests: c.requests.clone(),
            config: c.parameters.clone(),
            index,
        })
        .collect();
    // Stable: each source keeps the API's order.
    configs.sort_by_key(|c| c.source);
    Ok(DriverAllocation::new(devices, configs))
}

/// Whether `pool` is one of `node`'s: the node's own, or `<node>/<name>`
/// (`DeviceProfile::device_pool`).
pub(crate) fn is_node_pool(pool: &str, node: &str) -> bool {
    pool.strip_prefix(node)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// What the plugin makes of `claim` (as the API returns it) for `driver` on `node`
/// before asking the profile: the claim checked against what the kubelet asked for
/// (`claim_ref`'s uid), narrowed to this driver's devices in this node's pool, its
/// opaque configs decoded as `C` (class configs first). For a profile's unit tests.
pub fn allocation_of<C: OpaqueConfig>(
    driver: &str,
    node: &str,
    claim_ref: &ClaimRef,
    claim: &k8s_openapi::api::resource::v1::ResourceClaim,
) -> Result<DriverAllocation<C>, ClaimError> {
    let raw = ours(
        driver,
        node,
        claim_ref,
        &crate::claim_reader::from_v1(claim),
    )?;
    decode_allocation(driver, raw).map_err(|source| ClaimError::Device {
        claim: claim_ref.to_string(),
        source,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use serde_json::json;

    use super::*;

    const DRIVER: &str = "fake.resource.3-shake.com";

    fn claim() -> ClaimRef {
        ClaimRef::new("u1", "ns", "c").unwrap()
    }

    fn result(driver: &str, pool: &str, device: &str) -> AllocatedResult {
        AllocatedResult {
            request: "r".into(),
            driver: driver.into(),
            pool: pool.into(),
            device: device.into(),
            ..Default::default()
        }
    }

    fn config(source: ConfigSource, driver: &str, n: i64) -> AllocatedConfig {
        AllocatedConfig {
            source,
            requests: None,
            driver: driver.into(),
            parameters: json!(n),
        }
    }

    #[test]
    fn keeps_this_drivers_devices_and_configs_class_first() {
        let fetched = FetchedClaim {
            uid: "u1".into(),
            pod_claim_name: None,
            allocation: Some(FetchedAllocation {
                results: vec![
                    result(DRIVER, "node-1", "fake-0"),
                    result("gpu.example.com", "elsewhere", "gpu-0"),
                    result(DRIVER, "node-1", "fake-3"),
                ],
                config: vec![
                    config(ConfigSource::FromClaim, DRIVER, 1),
                    config(ConfigSource::FromClass, "gpu.example.com", 2),
                    config(ConfigSource::FromClass, DRIVER, 3),
                    config(ConfigSource::FromClaim, DRIVER, 4),
                ],
            }),
        };
        let got = ours(DRIVER, "node-1", &claim(), &fetched).unwrap();
        let devices: Vec<&str> = got.devices.iter().map(|d| d.device.as_str()).collect();
        assert_eq!(devices, ["fake-0", "fake-3"]);
        let configs: Vec<(usize, serde_json::Value)> = got
            .configs
            .iter()
            .map(|c| (c.index, c.config.clone()))
            .collect();
        assert_eq!(configs, [(2, json!(3)), (0, json!(1)), (3, json!(4))]);
    }

    #[test]
    fn refuses_what_the_kubelet_did_not_mean() {
        let err = |f: FetchedClaim| ours(DRIVER, "node-1", &claim(), &f).unwrap_err();
        let e = err(FetchedClaim {
            uid: "u2".into(),
            ..Default::default()
        });
        assert!(
            e.to_string()
                .contains("has uid \"u2\"; the kubelet asked for \"u1\""),
            "{e}"
        );
        let e = err(FetchedClaim {
            uid: "u1".into(),
            pod_claim_name: None,
            allocation: None,
        });
        assert_eq!(
            e.to_string(),
            "claim ns/c (u1): not allocated (status.allocation is empty)"
        );
        let e = err(FetchedClaim {
            uid: "u1".into(),
            pod_claim_name: None,
            allocation: Some(FetchedAllocation {
                results: vec![result(DRIVER, "node-2", "fake-0")],
                config: vec![],
            }),
        });
        assert!(
            e.to_string()
                .contains("allocated from pool \"node-2\"; this is node \"node-1\""),
            "{e}"
        );
        let e = err(FetchedClaim {
            uid: "u1".into(),
            pod_claim_name: None,
            allocation: Some(FetchedAllocation {
                results: vec![result("other", "node-1", "fake-0")],
                config: vec![],
            }),
        });
        assert!(e.to_string().contains("no device of driver"), "{e}");
        assert_eq!(e.reason(), "no_devices");
    }

    #[test]
    fn a_node_s_pools_are_its_own_and_those_under_its_name() {
        assert!(is_node_pool("node-1", "node-1"));
        assert!(is_node_pool("node-1/nics", "node-1"));
        assert!(!is_node_pool("node-10", "node-1"));
        assert!(!is_node_pool("node-10/nics", "node-1"));
        assert!(!is_node_pool("node", "node-1"));
    }
}
