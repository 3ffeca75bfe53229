//! A claim's allocated devices as the checkpoint keeps them, for profiles whose devices
//! are named in the node's pool (gpu, nvidia): the scheduler chose them, so preparing is
//! reading the allocation and checking it against the node, and a checkpoint read back
//! is checked the same way.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use dra_kubelet_plugin::claim::{DriverAllocation, ProfileError};

/// Longest share id accepted (the API writes a UUID).
const MAX_SHARE_ID_LEN: usize = 64;
/// Longest capacity name (a C identifier of at most 63 characters in the API).
const MAX_CAPACITY_NAME_LEN: usize = 63;

/// One allocated device of a prepared claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PreparedDevice {
    /// The device name in the pool (`gpu-0`, `gpu-0-1g-10gb-3`).
    pub device: String,
    /// The request it was allocated for (without a subrequest), kept only by profiles
    /// whose containers see a request's devices together ([`Requests::Keep`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// The share of a shared device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share_id: Option<String>,
    /// What the share takes, as the API wrote it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub consumed_capacity: BTreeMap<String, String>,
}

/// A prepared claim: all the checkpoint keeps (uuids, products and memory come from the
/// node's devices).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PreparedClaim {
    /// The allocated devices, in the allocation's order.
    pub devices: Vec<PreparedDevice>,
    /// Allocated with `adminAccess`: the devices stay other claims' too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub admin_access: bool,
}

/// The node a claim is checked against.
pub trait NodeDevices {
    /// The node's name, for errors.
    fn node_name(&self) -> &str;
    /// Whether the node publishes a device called `name`.
    fn has_device(&self, name: &str) -> bool;
    /// What the node has, for an error about a device it does not have.
    fn summary(&self) -> String;
}

/// Whether [`PreparedDevice::request`] is kept. A profile that did not keep it must not
/// start to, or a checkpoint it writes would not be read by an older plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requests {
    Keep,
    Drop,
}

/// The allocated devices of a claim, as they are (the plugin has refused any opaque
/// config), checked against `node`. `profile` names the profile in errors.
pub fn from_allocation<C>(
    node: &dyn NodeDevices,
    allocation: &DriverAllocation<C>,
    requests: Requests,
    profile: &str,
) -> Result<PreparedClaim, ProfileError> {
    let admin_access = allocation.devices.iter().all(|d| d.admin_access);
    if !admin_access && allocation.devices.iter().any(|d| d.admin_access) {
        return Err(ProfileError::new(
            "admin_access_mixed",
            format!(
                "the claim mixes requests with and without adminAccess; the {profile} profile prepares a claim either for admin access or not: put them in separate claims"
            ),
        ));
    }
    let devices: Vec<PreparedDevice> = allocation
        .devices
        .iter()
        .map(|d| PreparedDevice {
            device: d.device.clone(),
            request: (requests == Requests::Keep).then(|| d.base_request().to_owned()),
            share_id: d.share_id.clone(),
            consumed_capacity: d.consumed_capacity.clone(),
        })
        .collect();
    check_devices(node, &devices).map_err(|(k, e)| {
        let request = allocation
            .devices
            .get(k)
            .map(|d| format!(" (request {:?})", d.request))
            .unwrap_or_default();
        ProfileError::new(e.reason, format!("{}{request}", e.message))
    })?;
    Ok(PreparedClaim {
        devices,
        admin_access,
    })
}

/// A claim read back from the checkpoint: its devices must still be the node's, so a
/// checkpoint from before an inventory change that removed one is refused, naming it.
pub fn check(node: &dyn NodeDevices, prepared: &PreparedClaim) -> Result<(), ProfileError> {
    if prepared.devices.is_empty() {
        return Err(ProfileError::new(
            "bad_checkpoint",
            "a prepared GPU claim lists no devices",
        ));
    }
    check_devices(node, &prepared.devices)
        .map_err(|(_, e)| ProfileError::new("bad_checkpoint", e.message))
}

/// Each allocated device once, shares and admin access included: what a `DeviceFault`
/// selecting the device reaches.
pub fn allocated_devices(prepared: &PreparedClaim) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for d in &prepared.devices {
        if !names.contains(&d.device) {
            names.push(d.device.clone());
        }
    }
    names
}

/// Checks allocated devices against `node`: known devices, share ids and consumed
/// capacities the API could have written, no device twice unless as distinct shares.
/// The error comes with the position of the device it is about.
fn check_devices(
    node: &dyn NodeDevices,
    devices: &[PreparedDevice],
) -> Result<(), (usize, ProfileError)> {
    let mut seen: BTreeMap<&str, Vec<Option<&str>>> = BTreeMap::new();
    for (k, d) in devices.iter().enumerate() {
        check_device(node, d, seen.entry(d.device.as_str()).or_default()).map_err(|e| (k, e))?;
    }
    Ok(())
}

/// [`check_devices`] of one device; `shares` are the share ids under which the claim
/// already has it (`None`: whole).
fn check_device<'a>(
    node: &dyn NodeDevices,
    d: &'a PreparedDevice,
    shares: &mut Vec<Option<&'a str>>,
) -> Result<(), ProfileError> {
    if !node.has_device(&d.device) {
        return Err(ProfileError::new(
            "unknown_device",
            format!(
                "device {:?} is not a device of node {:?} (it has {})",
                d.device,
                node.node_name(),
                node.summary()
            ),
        ));
    }
    if let Some(id) = &d.share_id
        && (id.is_empty()
            || id.len() > MAX_SHARE_ID_LEN
            || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
    {
        return Err(ProfileError::new(
            "bad_allocation",
            format!(
                "device {:?}: shareID {id:?} must be 1 to {MAX_SHARE_ID_LEN} letters, digits and '-'",
                d.device
            ),
        ));
    }
    for (name, value) in &d.consumed_capacity {
        let bad_name = name.is_empty() || name.len() > MAX_CAPACITY_NAME_LEN;
        if bad_name || value.parse::<dra_kubelet_plugin::Quantity>().is_err() {
            return Err(ProfileError::new(
                "bad_allocation",
                format!(
                    "device {:?}: consumedCapacity {name:?} = {value:?} is not a capacity name (1 to {MAX_CAPACITY_NAME_LEN} characters) with a quantity",
                    d.device
                ),
            ));
        }
    }
    let share = d.share_id.as_deref();
    if !shares.is_empty() && (share.is_none() || shares.contains(&share)) {
        return Err(ProfileError::new(
            "duplicate_device",
            format!(
                "device {:?} is allocated to the claim more than once, not as distinct shares",
                d.device
            ),
        ));
    }
    if shares.contains(&None) {
        return Err(ProfileError::new(
            "duplicate_device",
            format!(
                "device {:?} is allocated to the claim both whole and as a share",
                d.device
            ),
        ));
    }
    shares.push(share);
    Ok(())
}
