//! The fake profile in the registry: `--num-devices` and `--models`, an inventory entry's
//! `numDevices` and `models`; on a node, the NodeAllocationState for classic DRA.

use clap::{ArgMatches, Args, FromArgMatches};
use futures::future::BoxFuture;
use serde::Deserialize;

use dra_kubelet_plugin::DeviceProfile;
use dra_kubelet_plugin::Plugin;
use dra_kubelet_plugin::device::{CounterSet, SliceDevice};

use super::FakeProfile;
use super::devices::{DEFAULT_NUM_DEVICES, Inventory, MAX_NUM_DEVICES};
use crate::classic::nas;
use crate::registry::{self, Fields, NodeContext, NodeProfile, ProfileSettings, Registration};

/// The fake profile's entry in [`crate::PROFILES`].
pub const REGISTRATION: Registration = Registration {
    name: "fake",
    about: "the fake device: parents split into children, FAKE_DEVICE_<n> (classic and structured DRA)",
    entry_fields: &["numDevices", "models"],
    file_fields: &[],
    flags: FakeFlags::augment_args,
    settings,
};

/// The fake profile's flags.
#[derive(Debug, Clone, clap::Args)]
struct FakeFlags {
    /// The fake profile: parent devices per node.
    #[arg(long, env = "FAKE_DRA_NUM_DEVICES", default_value_t = DEFAULT_NUM_DEVICES)]
    num_devices: usize,
    /// The fake profile: models a node picks its model from, comma-separated.
    #[arg(
        long,
        env = "FAKE_DRA_MODELS",
        value_delimiter = ',',
        default_value = "ULTRA_10,ULTRA_100"
    )]
    models: Vec<String>,
}

/// An inventory entry's fake fields.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FakeEntry {
    num_devices: Option<usize>,
    models: Option<Vec<String>>,
}

fn settings(matches: &ArgMatches, _file: &Fields) -> Result<Box<dyn ProfileSettings>, String> {
    let flags = FakeFlags::from_arg_matches(matches).map_err(|e| e.to_string())?;
    Ok(Box::new(flags))
}

fn check_num_devices(n: usize, field: &str) -> Result<(), String> {
    if !(1..=MAX_NUM_DEVICES).contains(&n) {
        return Err(format!(
            "{field} must be between 1 and {MAX_NUM_DEVICES}, got {n}: a node publishes its devices in one ResourceSlice (or NodeAllocationState) of at most {MAX_NUM_DEVICES}"
        ));
    }
    Ok(())
}

fn check_models(models: &[String], field: &str) -> Result<(), String> {
    if models.is_empty() {
        return Err(format!("{field} must name at least one model"));
    }
    for (k, m) in models.iter().enumerate() {
        fake_dra_api::params::validate_model(m)
            .map_err(|reason| format!("{field}[{k}] {m:?} {reason}"))?;
    }
    Ok(())
}

impl ProfileSettings for FakeFlags {
    fn check_entry(&self, entry: &Fields) -> Result<(), String> {
        let entry: FakeEntry = registry::decode(entry)?;
        if let Some(n) = entry.num_devices {
            check_num_devices(n, "numDevices")?;
        }
        if let Some(models) = &entry.models {
            check_models(models, "models")?;
        }
        Ok(())
    }

    fn build(
        &self,
        node: &str,
        driver: &str,
        entry: Option<&Fields>,
    ) -> Result<Box<dyn NodeProfile>, String> {
        let entry: FakeEntry = entry.map(registry::decode).transpose()?.unwrap_or_default();
        let (num_devices, field) = match entry.num_devices {
            Some(n) => (n, "numDevices"),
            None => (self.num_devices, "--num-devices (FAKE_DRA_NUM_DEVICES)"),
        };
        check_num_devices(num_devices, field)?;
        let (models, field) = match &entry.models {
            Some(m) => (m.as_slice(), "models"),
            None => (self.models.as_slice(), "--models"),
        };
        check_models(models, field)?;
        let inventory = Inventory::new(node, num_devices, models).map_err(|e| e.to_string())?;
        Ok(Box::new(FakeProfile::new(inventory, driver)))
    }
}

impl NodeProfile for FakeProfile {
    fn profile_name(&self) -> &'static str {
        REGISTRATION.name
    }

    fn slice_devices(&self) -> Vec<SliceDevice> {
        DeviceProfile::slice_devices(self)
    }

    fn counter_sets(&self) -> Vec<CounterSet> {
        DeviceProfile::counter_sets(self)
    }

    fn classic(&self) -> bool {
        true
    }

    /// With the node's NodeAllocationState, which classic DRA's controller allocates
    /// from (unused in structured mode).
    fn run(
        self: Box<Self>,
        plugin: Plugin,
        node: NodeContext,
        shutdown: BoxFuture<'static, ()>,
    ) -> BoxFuture<'static, Result<(), dra_kubelet_plugin::Error>> {
        let inventory: &Inventory = self.inventory();
        tracing::info!(
            profile = REGISTRATION.name,
            node = %inventory.node_name,
            model = %inventory.model,
            devices = inventory.devices.len(),
            "inventory"
        );
        let nas = nas::NasInventory::new(
            node.client,
            &node.namespace,
            &node.node_name,
            inventory.to_nas_spec(),
        );
        Box::pin(plugin.classic_inventory(nas).run(*self, shutdown))
    }
}
