//! The gpu profile in the registry: `--gpus`, an inventory entry's `gpus` and the file's
//! `models` (GPU models beyond the built-in catalog).

use clap::{ArgMatches, Args, FromArgMatches};
use futures::future::BoxFuture;
use serde::Deserialize;

use dra_kubelet_plugin::DeviceProfile;
use dra_kubelet_plugin::Plugin;
use dra_kubelet_plugin::device::{CounterSet, SliceDevice};

use super::devices::NodeLayout;
use super::groups::{GpuFlag, GpuGroup};
use super::{Catalog, GpuError, GpuModel, GpuProfile};
use crate::registry::{self, Fields, NodeContext, NodeProfile, ProfileSettings, Registration};

/// The gpu profile's entry in [`crate::PROFILES`].
pub const REGISTRATION: Registration = Registration {
    name: "gpu",
    about: "GPU-like devices: whole, partitioned by counters, or shared by capacity (structured DRA)",
    entry_fields: &["gpus"],
    file_fields: &["models"],
    flags: GpuFlags::augment_args,
    settings,
};

/// The gpu profile's flags.
#[derive(Debug, Clone, clap::Args)]
struct GpuFlags {
    /// The gpu profile's GPUs: MODEL[:COUNT[:SHARING]],... (sharing: exclusive,
    /// partitioned, shared), e.g. A100-80GB:8:partitioned.
    #[arg(long, env = "FAKE_DRA_GPUS", default_value = "")]
    gpus: GpuFlag,
}

/// An inventory entry's gpu fields.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct GpuEntry {
    gpus: Option<Vec<GpuGroup>>,
}

/// The file's gpu fields.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct GpuSection {
    #[serde(default)]
    models: Vec<GpuModel>,
}

fn settings(matches: &ArgMatches, file: &Fields) -> Result<Box<dyn ProfileSettings>, String> {
    let flags = GpuFlags::from_arg_matches(matches).map_err(|e| e.to_string())?;
    let section: GpuSection = registry::decode(file).map_err(|e| format!("models: {e}"))?;
    let catalog = Catalog::with(section.models).map_err(|e| format!("models: {e}"))?;
    Ok(Box::new(GpuSettings {
        groups: flags.gpus.0,
        catalog,
    }))
}

/// `--gpus` and the catalog.
struct GpuSettings {
    groups: Vec<GpuGroup>,
    catalog: Catalog,
}

impl GpuSettings {
    /// The groups against the catalog and the node limits, as a node of them is built.
    fn check_groups(&self, node: &str, groups: &[GpuGroup], field: &str) -> Result<(), String> {
        match NodeLayout::new(node, groups, &self.catalog) {
            Ok(_) => Ok(()),
            Err(GpuError::NoGpus) => Err(format!(
                "{field} lists no GPUs; the gpu profile needs at least one"
            )),
            Err(e) => Err(format!("{field}: {e}")),
        }
    }
}

impl ProfileSettings for GpuSettings {
    fn check_entry(&self, entry: &Fields) -> Result<(), String> {
        let entry: GpuEntry = registry::decode(entry)?;
        match &entry.gpus {
            Some(groups) => self.check_groups("inventory-check", groups, "gpus"),
            None => Ok(()),
        }
    }

    fn build(
        &self,
        node: &str,
        driver: &str,
        entry: Option<&Fields>,
    ) -> Result<Box<dyn NodeProfile>, String> {
        let entry: GpuEntry = entry.map(registry::decode).transpose()?.unwrap_or_default();
        let (groups, field) = match &entry.gpus {
            Some(g) => (g.as_slice(), "gpus"),
            None => (self.groups.as_slice(), "--gpus"),
        };
        self.check_groups(node, groups, field)?;
        let profile =
            GpuProfile::new(node, driver, groups, &self.catalog).map_err(|e| e.to_string())?;
        Ok(Box::new(profile))
    }
}

impl NodeProfile for GpuProfile {
    fn profile_name(&self) -> &'static str {
        REGISTRATION.name
    }

    fn slice_devices(&self) -> Vec<SliceDevice> {
        DeviceProfile::slice_devices(self)
    }

    fn counter_sets(&self) -> Vec<CounterSet> {
        DeviceProfile::counter_sets(self)
    }

    fn run(
        self: Box<Self>,
        plugin: Plugin,
        _node: NodeContext,
        shutdown: BoxFuture<'static, ()>,
    ) -> BoxFuture<'static, Result<(), dra_kubelet_plugin::Error>> {
        tracing::info!(
            profile = REGISTRATION.name,
            gpus = self.layout().gpus.len(),
            devices = DeviceProfile::slice_devices(&*self).len(),
            "inventory"
        );
        Box::pin(plugin.run(*self, shutdown))
    }
}
