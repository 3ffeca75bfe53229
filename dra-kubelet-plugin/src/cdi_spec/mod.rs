//! CDI specs as the runtime reads them, without I/O: the kind of a driver's devices, the
//! devices and their edits ([`ContainerEdits`]), the spec document, the version rule,
//! file names. What goes into a claim's devices is the device profile's
//! (`DeviceProfile::cdi_devices`); the plugin puts them into one spec file per claim,
//! next to the node-wide `common` device.
//!
//! Two kinds of spec file, both of kind `k8s.<driver>/<class>`:
//!
//! - the **common** spec, device `common`: the profile's node-wide edits, the same for every
//!   claim of the node (none when the profile has no common edits);
//! - one spec per **claim**, named after the claim uid, with the profile's devices for it.

mod edits;

use serde::{Deserialize, Serialize};

pub use edits::{ContainerEdits, Device, DeviceNode, EditError, Hook, Mount};

use crate::claim_data::{COMMON_DEVICE, ClaimUid};

/// The CDI versions a spec may need, oldest first, and what needs each
/// (container-device-interface `specs-go/version.go`): 0.3.0 is the oldest runtimes
/// still read; 0.4.0 added a mount's `type`; 0.5.0 device names starting with a digit
/// (claim uids often do) and a device node's `hostPath`; 0.7.0 `additionalGids`. 0.6.0
/// (annotations, a dot in the class) is never needed: the plugin writes neither.
const V030: &str = "0.3.0";
const V040: &str = "0.4.0";
const V050: &str = "0.5.0";
const V070: &str = "0.7.0";

/// The CDI `vendor/class` of a driver's devices: `k8s.<driver>/<class>`.
///
/// ```
/// use dra_kubelet_plugin::cdi::CdiKind;
///
/// let kind = CdiKind::new("fpga.example.com", "fpga").unwrap();
/// assert_eq!(kind.qualified("claim-uid:fpga-0"), "k8s.fpga.example.com/fpga=claim-uid:fpga-0");
/// assert_eq!(kind.spec_file_name("claim-uid"), "k8s.fpga.example.com-fpga_claim-uid.json");
/// assert!(CdiKind::new("fpga.example.com", "fpga.card").is_err(), "the kubelet forbids a dot");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CdiKind {
    vendor: String,
    class: String,
}

/// Why a driver name and device class make no CDI kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KindError {
    /// The vendor part.
    #[error(
        "driver name {0:?} does not make a CDI vendor: k8s.<driver name> must be letters, digits, '.', '_' and '-', ending in a letter or digit"
    )]
    Vendor(String),
    /// The class part.
    #[error(
        "CDI class {0:?} (DeviceProfile::cdi_class) must be one word of letters, digits, '_' and '-' (the kubelet forbids a dot)"
    )]
    Class(String),
}

impl CdiKind {
    /// The kind of `driver_name`'s devices of `class`.
    pub fn new(driver_name: &str, class: &str) -> Result<Self, KindError> {
        let vendor = format!("k8s.{driver_name}");
        let vendor_ok = vendor
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
            && vendor.ends_with(|c: char| c.is_ascii_alphanumeric());
        if !vendor_ok {
            return Err(KindError::Vendor(driver_name.to_owned()));
        }
        let class_ok = !class.is_empty()
            && class
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'));
        if !class_ok {
            return Err(KindError::Class(class.to_owned()));
        }
        Ok(Self {
            vendor,
            class: class.to_owned(),
        })
    }

    /// `vendor/class`, as in the spec's `kind` field.
    pub fn kind(&self) -> String {
        format!("{}/{}", self.vendor, self.class)
    }

    /// The fully qualified id of device `name`: `vendor/class=name`.
    pub fn qualified(&self, name: &str) -> String {
        format!("{}/{}={name}", self.vendor, self.class)
    }

    /// The file name of the spec with this id, by the CDI convention for transient specs:
    /// `<vendor>-<class>_<id>.json`, `/` in the id replaced by `_`.
    pub fn spec_file_name(&self, id: &str) -> String {
        format!("{}{}.json", self.spec_file_prefix(), id.replace('/', "_"))
    }

    /// What every spec file of ours starts with, to find them in a shared CDI dir.
    pub fn spec_file_prefix(&self) -> String {
        format!("{}-{}_", self.vendor, self.class)
    }

    /// The spec id of a file name of ours, or `None` for anyone else's file (or a temp
    /// file of ours, which starts with a dot).
    pub fn spec_id_of_file<'a>(&self, file_name: &'a str) -> Option<&'a str> {
        file_name
            .strip_prefix(self.spec_file_prefix().as_str())
            .and_then(|rest| rest.strip_suffix(".json"))
    }
}

/// The length of a Kubernetes object uid (an RFC 4122 UUID).
const KUBERNETES_UID_LEN: usize = 36;
/// The longest name part of a CDI annotation key.
const MAX_ANNOTATION_NAME_LEN: usize = 63;

/// Why classic kubelets cannot hand a driver's CDI ids to the runtime.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "driver name {driver:?} is {len} characters: classic kubelets (1.27–1.30) pass CDI ids as the annotation cdi.k8s.io/<driver>_<claim uid>, whose name part may have at most {MAX_ANNOTATION_NAME_LEN} characters, so with 36-character claim uids the driver name may have at most {max}; use a shorter driver name (or structured DRA, which has no such limit)"
)]
#[non_exhaustive]
pub struct DriverNameTooLongForClassic {
    /// The name.
    pub driver: String,
    /// Its length.
    pub len: usize,
    /// The most it may have.
    pub max: usize,
}

/// Checks the driver name against the CDI annotation key classic kubelets build for every
/// claim (`pkg/kubelet/cm/dra/cdi.go`, `AnnotationKey`: `<driver>_<claim uid>` ≤ 63).
pub fn check_classic_annotation_key(driver: &str) -> Result<(), DriverNameTooLongForClassic> {
    let max = MAX_ANNOTATION_NAME_LEN - 1 - KUBERNETES_UID_LEN;
    if driver.len() > max {
        return Err(DriverNameTooLongForClassic {
            driver: driver.to_owned(),
            len: driver.len(),
            max,
        });
    }
    Ok(())
}

/// A CDI spec document: the fields we use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    /// Lowest version covering what the spec uses.
    pub cdi_version: String,
    /// `vendor/class`.
    pub kind: String,
    /// The devices the spec defines.
    pub devices: Vec<Device>,
}

impl Spec {
    /// The spec as the bytes written to disk: pretty JSON with a final newline. The same
    /// spec always gives the same bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        // Serializing these plain structs cannot fail; fall back to an empty doc anyway.
        let mut bytes = serde_json::to_vec_pretty(self).unwrap_or_default();
        bytes.push(b'\n');
        bytes
    }
}

/// The lowest CDI version that covers what `devices` use.
pub fn min_version(devices: &[Device]) -> &'static str {
    let needs = |d: &Device| {
        let e = &d.container_edits;
        if !e.additional_gids.is_empty() {
            V070
        } else if d.name.starts_with(|c: char| !c.is_ascii_alphabetic())
            || e.device_nodes.iter().any(|n| n.host_path.is_some())
        {
            V050
        } else if e.mounts.iter().any(|m| m.r#type.is_some()) {
            V040
        } else {
            V030
        }
    };
    // The versions compare as strings: one digit each.
    devices.iter().map(needs).max().unwrap_or(V030)
}

fn spec(kind: &CdiKind, devices: Vec<Device>) -> Spec {
    Spec {
        cdi_version: min_version(&devices).to_owned(),
        kind: kind.kind(),
        devices,
    }
}

/// Why a device profile's CDI devices cannot be written: the runtime would refuse the
/// whole spec, and with it every device in it. [`SpecError::reason`] is the metrics
/// label.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SpecError {
    /// A device named neither the claim uid nor `<uid>:…`: it could meet another claim's.
    #[error(
        "the device profile named a CDI device {device:?} of claim {uid}; names must be the claim uid or start with \"{uid}:\""
    )]
    NotUnderClaim {
        /// The device name.
        device: String,
        /// The claim uid.
        uid: String,
    },
    /// Not a CDI device name.
    #[error(
        "the device profile named a CDI device {0:?}; CDI device names are letters, digits, '-', '_', '.' and ':', ending in a letter or digit"
    )]
    BadName(String),
    /// A device that changes nothing.
    #[error(
        "the device profile gave CDI device {0:?} no edits; runtimes refuse a device that changes nothing"
    )]
    NoEdits(String),
    /// An edit the CDI specification does not allow.
    #[error("CDI device {device:?}: containerEdits.{error}")]
    Edit {
        /// The device name.
        device: String,
        /// The edit and what is wrong with it.
        error: EditError,
    },
    /// A device node or bind mount whose host file is not there (checked on this node
    /// before a new claim's spec is written: the runtime would fail the container, long
    /// after the kubelet was told the claim is ready).
    #[error(
        "CDI device {device:?}: containerEdits.{field} {path:?} cannot be used on this node: {error}"
    )]
    MissingHostPath {
        /// The device name.
        device: String,
        /// The field, e.g. `deviceNodes[0].hostPath` or `mounts[1].hostPath`.
        field: String,
        /// The host path.
        path: String,
        /// The OS error.
        error: String,
    },
    /// An allocated device the profile gives no CDI device for
    /// (`DeviceProfile::device_cdi_devices` said `None`).
    #[error("the device profile has no CDI device for allocated device {0:?}")]
    NoDeviceFor(String),
}

impl SpecError {
    /// A short label for the metrics, one per kind of failure.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::NotUnderClaim { .. } | Self::BadName(_) => "bad_cdi_name",
            Self::NoEdits(_) | Self::Edit { .. } => "bad_cdi_edits",
            Self::MissingHostPath { .. } => "missing_host_path",
            Self::NoDeviceFor(_) => "no_cdi_device",
        }
    }
}

/// The common spec of a node: device `common` with `edits`; `None` when there are none
/// (then no container gets a `common` device).
pub fn common_spec(kind: &CdiKind, edits: ContainerEdits) -> Result<Option<Spec>, SpecError> {
    if edits.is_empty() {
        return Ok(None);
    }
    edits.check().map_err(|error| SpecError::Edit {
        device: COMMON_DEVICE.to_owned(),
        error,
    })?;
    Ok(Some(spec(kind, vec![Device::new(COMMON_DEVICE, edits)])))
}

/// The spec of one claim: the profile's devices for it. A device named neither the claim
/// uid nor `<uid>:…` (it could meet another claim's), or not a CDI device name, is refused:
/// the runtime would reject the whole spec, and with it every claim's devices.
pub fn claim_spec(kind: &CdiKind, uid: &ClaimUid, devices: Vec<Device>) -> Result<Spec, SpecError> {
    let prefix = format!("{uid}:");
    if let Some(stray) = devices
        .iter()
        .find(|d| d.name != uid.as_str() && !d.name.starts_with(&prefix))
    {
        return Err(SpecError::NotUnderClaim {
            device: stray.name.clone(),
            uid: uid.to_string(),
        });
    }
    if let Some(bad) = devices.iter().find(|d| !is_device_name(&d.name)) {
        return Err(SpecError::BadName(bad.name.clone()));
    }
    for d in &devices {
        if d.container_edits.is_empty() {
            return Err(SpecError::NoEdits(d.name.clone()));
        }
        d.container_edits.check().map_err(|error| SpecError::Edit {
            device: d.name.clone(),
            error,
        })?;
    }
    Ok(spec(kind, devices))
}

/// The CDI rule for device names (container-device-interface `pkg/parser`,
/// `ValidateDeviceName`), with a leading digit allowed as CDI 0.5.0 does.
fn is_device_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const DRIVER: &str = "fake.resource.3-shake.com";

    fn kind() -> CdiKind {
        CdiKind::new(DRIVER, "fake").unwrap()
    }

    fn device(name: &str) -> Device {
        Device::new(name, ContainerEdits::new().env("A", "1"))
    }

    #[test]
    fn names_follow_the_cdi_conventions() {
        let k = kind();
        assert_eq!(k.kind(), "k8s.fake.resource.3-shake.com/fake");
        assert_eq!(k.qualified("abc"), "k8s.fake.resource.3-shake.com/fake=abc");
        assert_eq!(
            k.spec_file_name("abc"),
            "k8s.fake.resource.3-shake.com-fake_abc.json"
        );
        assert_eq!(
            k.spec_id_of_file("k8s.fake.resource.3-shake.com-fake_abc.json"),
            Some("abc")
        );
        assert_eq!(k.spec_id_of_file("nvidia.com-gpu_abc.json"), None);
        assert_eq!(
            k.spec_id_of_file(".k8s.fake.resource.3-shake.com-fake_abc.json.tmp"),
            None
        );
        assert!(CdiKind::new("bad/name", "fake").is_err());
        assert!(CdiKind::new("ends.", "fake").is_err());
        assert_eq!(
            CdiKind::new("d.example", "a.b"),
            Err(KindError::Class("a.b".into()))
        );
    }

    #[test]
    fn version_is_the_lowest_that_covers_what_is_used() {
        let with =
            |name: &str, edits: ContainerEdits| vec![device("common"), Device::new(name, edits)];
        let env = || ContainerEdits::new().env("X", "1");
        assert_eq!(min_version(&[device("common")]), "0.3.0");
        assert_eq!(min_version(&with("0a1b", env())), "0.5.0");
        assert_eq!(
            min_version(&with("a", env().device_node(DeviceNode::new("/dev/x")))),
            "0.3.0",
            "a device node at its host path is 0.3.0"
        );
        assert_eq!(
            min_version(&with(
                "a",
                env().device_node(DeviceNode::new("/dev/x").host_path("/host/x"))
            )),
            "0.5.0"
        );
        assert_eq!(
            min_version(&with("a", env().mount(Mount::bind("/a", "/b")))),
            "0.3.0"
        );
        assert_eq!(
            min_version(&with(
                "a",
                env().mount(Mount::bind("/a", "/b").fs_type("none"))
            )),
            "0.4.0"
        );
        assert_eq!(min_version(&with("a", env().additional_gid(44))), "0.7.0");
        assert_eq!(min_version(&with("0a", env().additional_gid(44))), "0.7.0");
        let s = common_spec(&kind(), env()).unwrap().unwrap();
        assert_eq!(s.cdi_version, "0.3.0");
        assert_eq!(s.devices[0].name, "common");
        assert_eq!(
            common_spec(&kind(), ContainerEdits::new()),
            Ok(None),
            "no edits, no common device"
        );
    }

    #[test]
    fn empty_fields_are_not_written() {
        let s = common_spec(&kind(), ContainerEdits::new().env("X", "1"))
            .unwrap()
            .unwrap();
        let text = String::from_utf8(s.to_bytes()).unwrap();
        assert!(text.contains("\"env\""), "{text}");
        for absent in ["deviceNodes", "mounts", "hooks", "additionalGids"] {
            assert!(!text.contains(absent), "{absent}: {text}");
        }
    }

    #[test]
    fn edits_are_checked_naming_the_field() {
        let uid = ClaimUid::parse("u1").unwrap();
        let one = |edits: ContainerEdits| claim_spec(&kind(), &uid, vec![Device::new("u1", edits)]);
        for (edits, field) in [
            (ContainerEdits::new(), "no edits"),
            (ContainerEdits::new().env("", "1"), "env[0]"),
            (
                ContainerEdits::new().device_node(DeviceNode::new("dev/x")),
                "deviceNodes[0].path",
            ),
            (
                ContainerEdits::new().device_node(DeviceNode::new("/dev/x").host_path("x")),
                "deviceNodes[0].hostPath",
            ),
            (
                ContainerEdits::new().device_node(DeviceNode::new("/dev/x").permissions("rwx")),
                "deviceNodes[0].permissions",
            ),
            (
                ContainerEdits::new().device_node(DeviceNode::new("/dev/x").numbers("z", 1, 3)),
                "deviceNodes[0].type",
            ),
            (
                ContainerEdits::new().mount(Mount::bind("/a", "b")),
                "mounts[0].containerPath",
            ),
            (
                ContainerEdits::new().hook(Hook::new("later", "/bin/true", vec![])),
                "hooks[0].hookName",
            ),
        ] {
            let err = one(edits).unwrap_err();
            assert!(err.to_string().contains(field), "{field}: {err}");
            assert_eq!(err.reason(), "bad_cdi_edits");
        }
        assert!(
            one(ContainerEdits::new().hook(Hook::new("createContainer", "/bin/true", vec![])))
                .is_ok()
        );
    }

    #[test]
    fn a_claim_spec_holds_only_that_claims_names() {
        let uid = ClaimUid::parse("7a-b").unwrap();
        let s = claim_spec(&kind(), &uid, vec![device("7a-b"), device("7a-b:0")]).unwrap();
        assert_eq!(s.cdi_version, "0.5.0");
        assert_eq!(s.to_bytes(), s.to_bytes());
        let back: Spec = serde_json::from_slice(&s.to_bytes()).unwrap();
        assert_eq!(back, s);
        let err = claim_spec(&kind(), &uid, vec![device("other")]).unwrap_err();
        assert!(err.to_string().contains("\"other\""), "{err}");
        assert_eq!(err.reason(), "bad_cdi_name");
        assert!(claim_spec(&kind(), &uid, vec![device("7a-bc")]).is_err());
        for bad in ["7a-b:", "7a-b:x/y", "7a-b:é"] {
            let err = claim_spec(&kind(), &uid, vec![device(bad)]).unwrap_err();
            assert!(
                err.to_string().contains("CDI device names are"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn each_refusal_has_a_metrics_reason_saying_what_failed() {
        let missing = SpecError::MissingHostPath {
            device: "u1:0".into(),
            field: "mounts[0].hostPath".into(),
            path: "/nonexistent".into(),
            error: "No such file or directory (os error 2)".into(),
        };
        assert_eq!(missing.reason(), "missing_host_path");
        assert_eq!(
            missing.to_string(),
            "CDI device \"u1:0\": containerEdits.mounts[0].hostPath \"/nonexistent\" cannot be used on this node: No such file or directory (os error 2)"
        );
        assert_eq!(SpecError::NoDeviceFor("d".into()).reason(), "no_cdi_device");
        assert_eq!(SpecError::NoEdits("u1".into()).reason(), "bad_cdi_edits");
        assert_eq!(SpecError::BadName("u1:".into()).reason(), "bad_cdi_name");
    }

    #[test]
    fn classic_needs_room_for_the_annotation_key() {
        assert_eq!(check_classic_annotation_key(DRIVER), Ok(()));
        assert_eq!(check_classic_annotation_key(&"d".repeat(26)), Ok(()));
        let err = check_classic_annotation_key(&"d".repeat(27)).unwrap_err();
        assert_eq!((err.len, err.max), (27, 26));
        assert!(err.to_string().contains("at most 26"), "{err}");
    }
}
