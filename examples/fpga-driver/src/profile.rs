//! The FPGA profile: what a node's cards are, what preparing a claim means, what
//! containers see, and the device work of loading a bitstream. [`create_device_nodes`]
//! makes the host's device nodes the CDI specs point at.
//!
//! A node has `cards` FPGA cards, `fpga-0` … in its ResourceSlice, each with the attribute
//! `bitstream` (what is loaded on it). A claim may ask for another bitstream in its opaque
//! config (`fpga.example.com/v1alpha1`, kind `FpgaConfig`). A container given card `i`
//! sees `/dev/fpga<i>` and `FPGA_DEVICE_<k>=fpga<i>` (`k` counting the claim's cards from
//! 0), `FPGA_BITSTREAM=<name>`, the loaded bitstream at `/run/fpga/fpga<i>.bitstream`
//! and, from the node-wide device, `FPGA_NODE_NAME`.
//!
//! Loading is the driver's device work ([`DeviceProfile::prepare_devices`]): each card
//! takes 100–300 ms, and writes `fpga<i>.bitstream` in the claim's state directory. A
//! bitstream named `fail-…` is refused by the claim's last card (a stand-in for a CRC
//! error) after the cards before it were loaded: the library then rolls back, which
//! unloads them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use dra_kubelet_plugin::cdi::{ContainerEdits, Device, DeviceNode, Mount};
use dra_kubelet_plugin::claim::{
    AllocatedDevice, ClaimRef, ClaimUid, ConditionStatus, DeviceCondition, DeviceStatus,
    DriverAllocation,
};
use dra_kubelet_plugin::device::{HealthStatus, SliceDevice, TaintEffect};
use dra_kubelet_plugin::{
    DeviceProfile, DeviceWork, FieldError, OpaqueConfig, ProfileError, claim_state_dir,
};
use futures::StreamExt;
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};

/// The opaque config's `apiVersion`.
pub const CONFIG_API_VERSION: &str = "fpga.example.com/v1alpha1";
/// Longest bitstream name.
const MAX_BITSTREAM_LEN: usize = 63;
/// The numbers of `/dev/null`: the demo's cards do nothing, safely.
const NODE_MAJOR: u32 = 1;
const NODE_MINOR: u32 = 3;

/// Most cards a node may have: a checkpoint naming a card past it is refused.
pub const MAX_CARDS: usize = 64;

/// The cards a node has now, and those gone bad with why: what the config directory says
/// ([`crate::config`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cards {
    /// How many: `fpga-0` … `fpga-<count-1>`.
    pub count: usize,
    /// Bad cards by index, with why.
    pub unhealthy: std::collections::BTreeMap<usize, String>,
}

/// The FPGA cards of one node.
#[derive(Debug, Clone)]
pub struct FpgaProfile {
    /// This node.
    pub node_name: String,
    /// The cards now; a change is announced on it ([`DeviceProfile::changes`]).
    pub cards: tokio::sync::watch::Receiver<Cards>,
    /// The bitstream loaded at start.
    pub bitstream: String,
    /// Where the host's device nodes `fpga<i>` are (the plugin's own directory).
    pub dev_dir: PathBuf,
    /// The plugin's directory, where the claims' state directories are.
    pub plugin_dir: PathBuf,
}

/// Where a card's container sees the bitstream loaded on it.
const BITSTREAM_DIR: &str = "/run/fpga";
/// A bitstream the cards refuse: its name starts with this.
const REFUSED_PREFIX: &str = "fail-";

/// `opaque.parameters`: the bitstream to load.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FpgaConfig {
    /// A bitstream name.
    pub bitstream: String,
}

impl OpaqueConfig for FpgaConfig {
    const TYPE: Option<(&'static str, &'static str)> = Some((CONFIG_API_VERSION, "FpgaConfig"));

    fn validate(&self) -> Result<(), FieldError> {
        check_bitstream(&self.bitstream).map_err(|m| FieldError::new("bitstream", m))
    }
}

fn check_bitstream(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_BITSTREAM_LEN
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} must be 1 to {MAX_BITSTREAM_LEN} letters, digits, '-' and '.'"
        ))
    }
}

/// All the checkpoint keeps of a prepared claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FpgaPrepared {
    /// The cards' indexes, in the allocation's order.
    pub cards: Vec<usize>,
    /// The bitstream the claim runs.
    pub bitstream: String,
}

impl FpgaProfile {
    /// The index of card `fpga-<i>` of this node, if it has it now.
    fn card(&self, name: &str) -> Option<usize> {
        let i: usize = name.strip_prefix("fpga-")?.parse().ok()?;
        (i < self.cards.borrow().count && name == format!("fpga-{i}")).then_some(i)
    }

    fn node(&self, i: usize) -> DeviceNode {
        let host = self.dev_dir.join(format!("fpga{i}"));
        DeviceNode::new(format!("/dev/fpga{i}"))
            .host_path(host.to_string_lossy())
            .permissions("rw")
    }
}

/// How long card `i` takes to load `bitstream`: 100–300 ms, the same every time.
fn load_time(bitstream: &str, i: usize) -> Duration {
    let spread = bitstream.bytes().fold(i as u64, |h, b| {
        h.wrapping_mul(31).wrapping_add(u64::from(b))
    });
    Duration::from_millis(100 + spread % 201)
}

/// The file holding what card `i` has loaded, in a claim's state directory.
fn loaded_file(state_dir: &Path, i: usize) -> PathBuf {
    state_dir.join(format!("fpga{i}.bitstream"))
}

fn io_error(action: &str, path: &Path, e: std::io::Error) -> ProfileError {
    ProfileError::new("io", format!("{action} {}: {e}", path.display()))
}

/// Unloads the claim's cards: idempotent, whatever part of the load was done.
async fn unload(work: &DeviceWork<'_, FpgaPrepared>) -> Result<(), ProfileError> {
    for &i in &work.prepared.cards {
        let file = loaded_file(work.state_dir, i);
        match tokio::fs::remove_file(&file).await {
            Ok(()) => tracing::info!(claim = %work.claim, card = i, "bitstream unloaded"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error("unloading", &file, e)),
        }
    }
    Ok(())
}

impl DeviceProfile for FpgaProfile {
    type Prepared = FpgaPrepared;
    type Config = FpgaConfig;
    const DEVICE_WORK: bool = true;

    fn cdi_class(&self) -> &str {
        "fpga"
    }

    fn slice_devices(&self) -> Vec<SliceDevice> {
        (0..self.cards.borrow().count)
            .map(|i| {
                SliceDevice::new(format!("fpga-{i}"))
                    .attribute("bitstream", self.bitstream.as_str())
            })
            .collect()
    }

    fn prepare_allocation(
        &self,
        _claim: &ClaimRef,
        allocation: &DriverAllocation<FpgaConfig>,
    ) -> Result<FpgaPrepared, ProfileError> {
        let mut cards = Vec::new();
        for d in &allocation.devices {
            let i = self.card(&d.device).ok_or_else(|| {
                ProfileError::new(
                    "unknown_device",
                    format!("{:?} is not a card of this node", d.device),
                )
            })?;
            cards.push(i);
        }
        // The claim's config wins over its class's: the last one applies.
        let bitstream = allocation
            .configs
            .last()
            .map_or_else(|| self.bitstream.clone(), |c| c.config.bitstream.clone());
        Ok(FpgaPrepared { cards, bitstream })
    }

    async fn prepare_devices(
        &self,
        work: &DeviceWork<'_, FpgaPrepared>,
    ) -> Result<(), ProfileError> {
        let bitstream = &work.prepared.bitstream;
        let last = work.prepared.cards.len().saturating_sub(1);
        for (k, &i) in work.prepared.cards.iter().enumerate() {
            tokio::time::sleep(load_time(bitstream, i)).await;
            if bitstream.starts_with(REFUSED_PREFIX) && k == last {
                return Err(ProfileError::new(
                    "load_failed",
                    format!("card fpga{i} refused bitstream {bitstream:?}: CRC mismatch"),
                ));
            }
            let file = loaded_file(work.state_dir, i);
            tokio::fs::write(&file, format!("{bitstream}\n"))
                .await
                .map_err(|e| io_error("loading", &file, e))?;
            tracing::info!(claim = %work.claim, card = i, %bitstream, "bitstream loaded");
        }
        Ok(())
    }

    async fn unprepare_devices(
        &self,
        work: &DeviceWork<'_, FpgaPrepared>,
    ) -> Result<(), ProfileError> {
        unload(work).await
    }

    async fn roll_back_devices(
        &self,
        work: &DeviceWork<'_, FpgaPrepared>,
    ) -> Result<(), ProfileError> {
        tracing::info!(claim = %work.claim, "rolling back a bitstream load");
        unload(work).await
    }

    async fn device_status(&self, work: &DeviceWork<'_, FpgaPrepared>) -> Vec<DeviceStatus> {
        let mut statuses = Vec::new();
        for &i in &work.prepared.cards {
            // What the load left on the card, as the device work wrote it.
            let loaded = tokio::fs::read_to_string(loaded_file(work.state_dir, i))
                .await
                .map(|s| s.trim().to_owned());
            let status = match loaded {
                Ok(bitstream) => DeviceStatus::new(format!("fpga-{i}"))
                    .condition(DeviceCondition::new(
                        "Ready",
                        ConditionStatus::True,
                        "BitstreamLoaded",
                        format!("card fpga{i} runs {bitstream}"),
                    ))
                    .data(serde_json::json!({"bitstream": bitstream})),
                Err(e) => DeviceStatus::new(format!("fpga-{i}")).condition(DeviceCondition::new(
                    "Ready",
                    ConditionStatus::Unknown,
                    "NotLoaded",
                    e.to_string(),
                )),
            };
            statuses.push(status);
        }
        statuses
    }

    fn changes(&self) -> BoxStream<'static, ()> {
        let cards = self.cards.clone();
        futures::stream::unfold(cards, |mut cards| async move {
            cards.changed().await.ok().map(|()| ((), cards))
        })
        .boxed()
    }

    fn health(&self, device: &str) -> (HealthStatus, Option<String>) {
        let why = self
            .card(device)
            .and_then(|i| self.cards.borrow().unhealthy.get(&i).cloned());
        match why {
            Some(why) => (HealthStatus::Unhealthy, Some(why)),
            None => (HealthStatus::Healthy, None),
        }
    }

    fn unhealthy_taint(&self) -> Option<TaintEffect> {
        Some(TaintEffect::NoSchedule)
    }

    fn held_devices(&self, prepared: &FpgaPrepared) -> Vec<String> {
        prepared.cards.iter().map(|i| format!("fpga-{i}")).collect()
    }

    fn check(&self, prepared: &FpgaPrepared) -> Result<(), ProfileError> {
        // Against the most a node may have, not the cards now: a card pulled out while
        // held stays prepared across a restart.
        if let Some(i) = prepared.cards.iter().find(|&&i| i >= MAX_CARDS) {
            return Err(ProfileError::new(
                "unknown_device",
                format!("card {i} is past the {MAX_CARDS} cards a node may have"),
            ));
        }
        check_bitstream(&prepared.bitstream).map_err(|m| ProfileError::new("bad_checkpoint", m))
    }

    fn common_edits(&self) -> ContainerEdits {
        ContainerEdits::new().env("FPGA_NODE_NAME", &self.node_name)
    }

    fn cdi_devices(&self, uid: &ClaimUid, prepared: &FpgaPrepared) -> Vec<Device> {
        let state_dir = claim_state_dir(&self.plugin_dir, uid);
        let edits = |cards: &[(usize, usize)]| {
            let mut e = ContainerEdits::new().env("FPGA_BITSTREAM", &prepared.bitstream);
            for &(k, i) in cards {
                e = e
                    .env(&format!("FPGA_DEVICE_{k}"), &format!("fpga{i}"))
                    .device_node(self.node(i))
                    .mount(Mount::bind(
                        loaded_file(&state_dir, i).to_string_lossy(),
                        format!("{BITSTREAM_DIR}/fpga{i}.bitstream"),
                    ));
            }
            e
        };
        let all: Vec<(usize, usize)> = prepared.cards.iter().copied().enumerate().collect();
        std::iter::once(Device::new(uid.to_string(), edits(&all)))
            .chain(
                all.iter()
                    .map(|&(k, i)| Device::new(format!("{uid}:fpga-{i}"), edits(&[(k, i)]))),
            )
            .collect()
    }

    fn claim_cdi_devices(&self, uid: &ClaimUid, _prepared: &FpgaPrepared) -> Vec<String> {
        vec![uid.to_string()]
    }

    fn device_cdi_devices(
        &self,
        uid: &ClaimUid,
        p: &FpgaPrepared,
        device: &AllocatedDevice,
    ) -> Option<Vec<String>> {
        let i = self.card(&device.device)?;
        p.cards
            .contains(&i)
            .then(|| vec![format!("{uid}:fpga-{i}")])
    }
}

/// Makes the host's device nodes `dev_dir/fpga<i>`: character devices with the numbers
/// of `/dev/null`, so a container's `/dev/fpga<i>` is a working (empty) device. An
/// existing node is replaced.
pub fn create_device_nodes(dev_dir: &Path, cards: usize) -> std::io::Result<()> {
    use rustix::fs::{CWD, FileType, Mode, makedev, mknodat};
    std::fs::create_dir_all(dev_dir)?;
    for i in 0..cards {
        let path = dev_dir.join(format!("fpga{i}"));
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let mode = Mode::from_raw_mode(0o666);
        mknodat(
            CWD,
            &path,
            FileType::CharacterDevice,
            mode,
            makedev(NODE_MAJOR, NODE_MINOR),
        )?;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use dra_kubelet_plugin::claim::allocation_of;
    use dra_kubelet_plugin_testing::ClaimBuilder;
    use serde_json::json;

    use super::*;

    fn profile() -> FpgaProfile {
        FpgaProfile {
            node_name: "node-1".into(),
            cards: tokio::sync::watch::Sender::new(Cards {
                count: 2,
                ..Cards::default()
            })
            .subscribe(),
            bitstream: "blank".into(),
            dev_dir: PathBuf::from("/var/lib/kubelet/plugins/fpga.example.com/dev"),
            plugin_dir: PathBuf::from("/var/lib/kubelet/plugins/fpga.example.com"),
        }
    }

    /// What the plugin hands the profile for a claim of `cards` with `config`.
    fn allocation(
        cards: &[&str],
        config: Option<serde_json::Value>,
    ) -> Result<DriverAllocation<FpgaConfig>, String> {
        let mut claim = ClaimBuilder::new("fpga.example.com", "node-1", "ns", "c").uid("u1");
        for card in cards {
            claim = claim.device("r", card);
        }
        if let Some(parameters) = config {
            claim = claim.opaque_config(None, parameters);
        }
        let claim_ref = ClaimRef::new("u1", "ns", "c").unwrap();
        allocation_of("fpga.example.com", "node-1", &claim_ref, &claim.build())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_card_is_its_device_node_and_env() {
        let p = profile();
        let a = allocation(&["fpga-1"], None).unwrap();
        let prepared = p
            .prepare_allocation(&ClaimRef::new("u1", "ns", "c").unwrap(), &a)
            .unwrap();
        assert_eq!(
            prepared,
            FpgaPrepared {
                cards: vec![1],
                bitstream: "blank".into()
            }
        );
        let uid = ClaimUid::parse("u1").unwrap();
        let devices = p.cdi_devices(&uid, &prepared);
        let card = serde_json::to_value(&devices[1]).unwrap();
        assert_eq!(card["name"], "u1:fpga-1");
        assert_eq!(
            card["containerEdits"]["env"],
            json!(["FPGA_BITSTREAM=blank", "FPGA_DEVICE_0=fpga1"])
        );
        assert_eq!(
            card["containerEdits"]["deviceNodes"],
            json!([{"path": "/dev/fpga1", "hostPath": "/var/lib/kubelet/plugins/fpga.example.com/dev/fpga1", "permissions": "rw"}])
        );
        assert_eq!(
            p.device_cdi_devices(&uid, &prepared, &AllocatedDevice::new("fpga", "fpga-1")),
            Some(vec!["u1:fpga-1".to_owned()])
        );
        assert_eq!(
            p.device_cdi_devices(&uid, &prepared, &AllocatedDevice::new("fpga", "fpga-0")),
            None
        );
    }

    #[test]
    fn the_config_chooses_the_bitstream_and_is_checked() {
        let config = |b: &str| {
            Some(json!({"apiVersion": CONFIG_API_VERSION, "kind": "FpgaConfig", "bitstream": b}))
        };
        let a = allocation(&["fpga-0"], config("sha256-ab.bit")).unwrap();
        let prepared = profile()
            .prepare_allocation(&ClaimRef::new("u1", "ns", "c").unwrap(), &a)
            .unwrap();
        assert_eq!(prepared.bitstream, "sha256-ab.bit");
        let err = allocation(&["fpga-0"], config("no/slash")).unwrap_err();
        assert!(
            err.contains("opaque.parameters.bitstream: \"no/slash\" must be"),
            "{err}"
        );
        let err = allocation(
            &["fpga-0"],
            Some(json!({"apiVersion": "v1", "kind": "FpgaConfig"})),
        )
        .unwrap_err();
        assert!(
            err.contains("opaque.parameters.apiVersion: must be \"fpga.example.com/v1alpha1\""),
            "{err}"
        );
    }

    #[test]
    fn device_nodes_have_the_numbers_of_dev_null() {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let dir = tempfile::tempdir().unwrap();
        match create_device_nodes(dir.path(), 2) {
            Ok(()) => {}
            // Without CAP_MKNOD (an unprivileged build) there is nothing to check.
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => return,
            Err(e) => panic!("{e}"),
        }
        let meta = std::fs::metadata(dir.path().join("fpga1")).unwrap();
        assert!(meta.file_type().is_char_device());
        assert_eq!(meta.rdev(), std::fs::metadata("/dev/null").unwrap().rdev());
        create_device_nodes(dir.path(), 2).unwrap();
    }
}
