//! Which profile a node runs, with which devices: the inventory file's entry for the node,
//! or the flags ([`crate::inventory::resolve`]), made into the fake or the gpu profile.
//! The node plugin builds one; fleet mode one per node it publishes.

use crate::fake::FakeProfile;
use crate::fake::devices::{Inventory, InventoryError as FakeInventoryError};
use crate::gpu::{GpuError, GpuProfile};
use crate::inventory::{self, Defaults, InventoryError, InventoryFile, NodeDevices};
use dra_kubelet_plugin::profile::{CounterSet, DeviceProfile, SliceDevice};

/// A node's profile.
#[derive(Debug, Clone)]
pub enum NodeProfile {
    /// Fake devices.
    Fake(FakeProfile),
    /// GPU-like devices.
    Gpu(GpuProfile),
}

/// Why a node's profile cannot be built; names the flag or file entry.
#[derive(Debug, thiserror::Error)]
pub enum NodeProfileError {
    #[error(transparent)]
    Inventory(#[from] InventoryError),
    #[error(transparent)]
    Fake(#[from] FakeInventoryError),
    #[error(transparent)]
    Gpu(#[from] GpuError),
}

impl NodeProfile {
    /// The profile of `node` for `driver`.
    pub fn build(
        file: Option<&InventoryFile>,
        node: &str,
        driver: &str,
        defaults: &Defaults,
    ) -> Result<Self, NodeProfileError> {
        Ok(match inventory::resolve(file, node, defaults)? {
            NodeDevices::Fake {
                num_devices,
                models,
            } => Self::Fake(FakeProfile::new(
                Inventory::new(node, num_devices, &models)?,
                driver,
            )),
            NodeDevices::Gpu { groups, catalog } => {
                Self::Gpu(GpuProfile::new(node, driver, &groups, &catalog)?)
            }
        })
    }

    /// `fake` or `gpu`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Fake(_) => "fake",
            Self::Gpu(_) => "gpu",
        }
    }

    /// The devices the node publishes.
    pub fn slice_devices(&self) -> Vec<SliceDevice> {
        match self {
            Self::Fake(p) => p.slice_devices(),
            Self::Gpu(p) => p.slice_devices(),
        }
    }

    /// The counter sets they consume from.
    pub fn counter_sets(&self) -> Vec<CounterSet> {
        match self {
            Self::Fake(p) => p.counter_sets(),
            Self::Gpu(p) => p.counter_sets(),
        }
    }
}
