//! The nvidia profile in the registry: `--nvidia-gpus` and an inventory entry's
//! `nvidiaGpus`.

use clap::{ArgMatches, Args, FromArgMatches};
use futures::future::BoxFuture;
use serde::Deserialize;

use dra_kubelet_plugin::DeviceProfile;
use dra_kubelet_plugin::Plugin;
use dra_kubelet_plugin::device::SliceSplit;
use dra_kubelet_plugin::device::{CounterSet, SliceDevice};

use super::groups::{NvidiaFlag, NvidiaGroup};
use super::{NvidiaError, NvidiaProfile};
use crate::registry::{self, Fields, NodeContext, NodeProfile, ProfileSettings, Registration};

/// The flag and the entry field, as errors name them.
const FLAG: &str = "--nvidia-gpus";
const FIELD: &str = "nvidiaGpus";

/// The nvidia profile's entry in [`crate::PROFILES`].
pub const REGISTRATION: Registration = Registration {
    name: "nvidia",
    about: "NVIDIA GPUs as NVIDIA's DRA driver publishes them: whole GPUs and MIG devices drawn from counters (structured DRA)",
    entry_fields: &[FIELD],
    file_fields: &[],
    flags: NvidiaFlags::augment_args,
    settings,
};

/// The nvidia profile's flags.
#[derive(Debug, Clone, clap::Args)]
struct NvidiaFlags {
    /// The nvidia profile's GPUs: MODEL[:COUNT[:mig[=PROFILE/PROFILE...]]],... (models:
    /// A100-40GB, A100-80GB, H100-80GB, L4; mig: publish the MIG devices), e.g.
    /// A100-40GB:8:mig.
    #[arg(long, env = "FAKE_DRA_NVIDIA_GPUS", default_value = "")]
    nvidia_gpus: NvidiaFlag,
}

/// An inventory entry's nvidia fields.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct NvidiaEntry {
    nvidia_gpus: Option<Vec<NvidiaGroup>>,
}

fn settings(matches: &ArgMatches, _file: &Fields) -> Result<Box<dyn ProfileSettings>, String> {
    let flags = NvidiaFlags::from_arg_matches(matches).map_err(|e| e.to_string())?;
    Ok(Box::new(NvidiaSettings {
        groups: flags.nvidia_gpus.0,
    }))
}

/// `--nvidia-gpus`.
struct NvidiaSettings {
    groups: Vec<NvidiaGroup>,
}

/// The profile of `node` with `groups` from `field`, its errors naming the field.
fn build(
    node: &str,
    driver: &str,
    groups: &[NvidiaGroup],
    field: &str,
) -> Result<NvidiaProfile, String> {
    NvidiaProfile::new(node, driver, groups, field).map_err(|e| match e {
        NvidiaError::NoGpus => {
            format!("{field} lists no GPUs; the nvidia profile needs at least one")
        }
        e => e.to_string(),
    })
}

impl ProfileSettings for NvidiaSettings {
    fn check_entry(&self, entry: &Fields) -> Result<(), String> {
        let entry: NvidiaEntry = registry::decode(entry)?;
        match &entry.nvidia_gpus {
            Some(groups) => build("inventory-check", "check", groups, FIELD).map(|_| ()),
            None => Ok(()),
        }
    }

    fn build(
        &self,
        node: &str,
        driver: &str,
        entry: Option<&Fields>,
    ) -> Result<Box<dyn NodeProfile>, String> {
        let entry: NvidiaEntry = entry.map(registry::decode).transpose()?.unwrap_or_default();
        let (groups, field) = match &entry.nvidia_gpus {
            Some(g) => (g.as_slice(), FIELD),
            None => (self.groups.as_slice(), FLAG),
        };
        Ok(Box::new(build(node, driver, groups, field)?))
    }
}

impl NodeProfile for NvidiaProfile {
    fn profile_name(&self) -> &'static str {
        REGISTRATION.name
    }

    fn slice_devices(&self) -> Vec<SliceDevice> {
        DeviceProfile::slice_devices(self)
    }

    fn counter_sets(&self) -> Vec<CounterSet> {
        DeviceProfile::counter_sets(self)
    }

    fn slice_split(&self) -> SliceSplit {
        DeviceProfile::slice_split(self)
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
