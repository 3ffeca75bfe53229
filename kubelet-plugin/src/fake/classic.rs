//! Classic DRA for the fake device: what our controller's allocation handle asks for,
//! checked against the node's inventory, without I/O.

use fake_dra_api::handle::AllocationHandle;

use super::FakePrepared;
use super::devices::Inventory;
use dra_kubelet_plugin::claim::ProfileError;

/// Parses `handle` and checks it names this node, its model and its devices.
pub fn prepare(inventory: &Inventory, handle: &str) -> Result<FakePrepared, ProfileError> {
    let handle = AllocationHandle::parse(handle)
        .map_err(|e| ProfileError::new("bad_handle", e.to_string()))?;
    if handle.node_name != inventory.node_name {
        return Err(ProfileError::new(
            "wrong_node",
            format!(
                "allocation handle is for node {:?}, this is node {:?}",
                handle.node_name, inventory.node_name
            ),
        ));
    }
    if handle.model != inventory.model {
        return Err(ProfileError::new(
            "wrong_model",
            format!(
                "allocation handle asks for model {:?}, the devices of node {:?} are {:?}",
                handle.model, inventory.node_name, inventory.model
            ),
        ));
    }
    let mut devices = Vec::with_capacity(handle.devices.len());
    for id in &handle.devices {
        let Some(own) = inventory
            .devices
            .iter()
            .find(|d| d.eq_ignore_ascii_case(id))
        else {
            return Err(ProfileError::new(
                "unknown_device",
                format!(
                    "device {id} is not a device of node {:?}",
                    inventory.node_name
                ),
            ));
        };
        devices.push(own.clone());
    }
    Ok(FakePrepared {
        model: handle.model,
        split: handle.split,
        devices,
        admin_access: false,
    })
}
