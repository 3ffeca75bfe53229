//! The fake device: one [`DeviceProfile`] among others.
//!
//! - [`devices`]: the node's parents (`FAKE-<uuid>`, stable for a node name), its model,
//!   the children a `split` derives;
//! - [`classic`]: what our controller's allocation handle asks for;
//! - [`structured`]: what the scheduler's allocation and `FakeClaimParameters` ask for;
//! - [`env`]: the `FAKE_DEVICE_<n>` variables containers see;
//! - [`registration`]: its flags and inventory fields, in the profile registry.

pub mod classic;
pub mod devices;
pub mod env;
pub mod registration;
pub mod structured;

use fake_dra_api::handle::AllocationHandle;
use serde::{Deserialize, Serialize};

use devices::{ChildDevice, Inventory, children};
use dra_kubelet_plugin::DeviceProfile;
use dra_kubelet_plugin::cdi::{ContainerEdits, Device};
use dra_kubelet_plugin::claim::{AllocatedDevice, ClaimRef, ClaimUid};
use dra_kubelet_plugin::claim::{DriverAllocation, ProfileError};
use dra_kubelet_plugin::device::{Attribute, SliceDevice};

/// The CDI class of fake devices: `k8s.<driver>/fake=<device>`.
pub const CDI_CLASS: &str = "fake";

/// The driver version published as the `driverVersion` attribute.
pub const DRIVER_VERSION: &str = env!("CARGO_PKG_VERSION");

/// A prepared fake claim: all the checkpoint keeps (children and specs are derived).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FakePrepared {
    /// The model of its devices.
    pub model: String,
    /// Children per parent.
    pub split: u32,
    /// Parent device ids, in the inventory's spelling.
    pub devices: Vec<String>,
    /// Allocated with `adminAccess`: the devices stay other claims' too, so this claim
    /// holds none of them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub admin_access: bool,
}

impl FakePrepared {
    /// The devices its containers see.
    pub fn children(&self) -> Vec<ChildDevice> {
        children(&self.devices, self.split)
    }
}

/// Fake devices on one node.
#[derive(Debug, Clone)]
pub struct FakeProfile {
    inventory: Inventory,
    driver_name: String,
}

impl FakeProfile {
    /// The profile of `inventory`'s node, for `driver_name`.
    pub fn new(inventory: Inventory, driver_name: &str) -> Self {
        Self {
            inventory,
            driver_name: driver_name.to_owned(),
        }
    }

    /// The node's devices.
    pub fn inventory(&self) -> &Inventory {
        &self.inventory
    }
}

impl DeviceProfile for FakeProfile {
    type Prepared = FakePrepared;
    type Config = structured::FakeConfig;

    fn cdi_class(&self) -> &str {
        CDI_CLASS
    }

    /// `fake-<i>` with `uuid`, `model`, `index` and `driverVersion`.
    fn slice_devices(&self) -> Vec<SliceDevice> {
        self.inventory
            .devices
            .iter()
            .enumerate()
            .map(|(i, id)| {
                SliceDevice::new(structured::device_name(i))
                    .attribute("uuid", Attribute::String(id.clone()))
                    .attribute("model", Attribute::String(self.inventory.model.clone()))
                    .attribute(
                        "index",
                        Attribute::Int(i64::try_from(i).unwrap_or(i64::MAX)),
                    )
                    .attribute(
                        "driverVersion",
                        Attribute::Version(DRIVER_VERSION.to_owned()),
                    )
            })
            .collect()
    }

    fn prepare_handle(
        &self,
        _claim: &ClaimRef,
        handle: &str,
    ) -> Result<FakePrepared, ProfileError> {
        classic::prepare(&self.inventory, handle)
    }

    fn prepare_allocation(
        &self,
        _claim: &ClaimRef,
        allocation: &DriverAllocation<structured::FakeConfig>,
    ) -> Result<FakePrepared, ProfileError> {
        structured::prepare(&self.inventory, allocation)
    }

    fn held_devices(&self, prepared: &FakePrepared) -> Vec<String> {
        if prepared.admin_access {
            return Vec::new();
        }
        prepared.devices.clone()
    }

    /// `fake-<index>` of each parent.
    fn allocated_devices(&self, prepared: &FakePrepared) -> Vec<String> {
        prepared
            .devices
            .iter()
            .filter_map(|id| {
                self.inventory
                    .devices
                    .iter()
                    .position(|d| d.eq_ignore_ascii_case(id))
            })
            .map(structured::device_name)
            .collect()
    }

    /// The same limits as an allocation handle on the wire.
    fn check(&self, prepared: &FakePrepared) -> Result<(), ProfileError> {
        AllocationHandle {
            node_name: self.inventory.node_name.clone(),
            model: prepared.model.clone(),
            split: prepared.split,
            devices: prepared.devices.clone(),
        }
        .validate()
        .map_err(|e| ProfileError::new("bad_checkpoint", e.to_string()))
    }

    fn common_edits(&self) -> ContainerEdits {
        env::common(&self.inventory.node_name, &self.driver_name)
    }

    fn cdi_devices(&self, uid: &ClaimUid, prepared: &FakePrepared) -> Vec<Device> {
        env::claim_devices(uid, &prepared.model, &prepared.children())
    }

    fn claim_cdi_devices(&self, uid: &ClaimUid, _prepared: &FakePrepared) -> Vec<String> {
        vec![uid.to_string()]
    }

    fn device_cdi_devices(
        &self,
        uid: &ClaimUid,
        prepared: &FakePrepared,
        device: &AllocatedDevice,
    ) -> Option<Vec<String>> {
        let parent =
            structured::device_index(&device.device).and_then(|i| self.inventory.devices.get(i))?;
        let k = prepared.devices.iter().position(|d| d == parent)?;
        Some(vec![env::parent_device_name(uid, k)])
    }
}
