//! CDI spec building: pure functions from a claim's devices to the JSON the container
//! runtime reads. No I/O; [`crate::fsutil`] writes the result.
//!
//! Two kinds of spec file, both of kind `k8s.<driver>/fake`:
//!
//! - the **common** spec, device `common`: `FAKE_NODE_NAME` and
//!   `DRA_RESOURCE_DRIVER_NAME`, the same for every claim of the node;
//! - one spec per **claim**, device `<claim uid>`:
//!   - `FAKE_DEVICE_<i>=<id>` for every device the claim's containers see (children
//!     included, `i` from 0) and `FAKE_DEVICE_MODEL=<model>`, as the original driver set
//!     them. A container with two claims gets both sets; whichever the runtime applies
//!     last wins, so these are only meaningful for a single claim.
//!   - `FAKE_CLAIM_<UID>_DEVICE_<i>` and `FAKE_CLAIM_<UID>_DEVICE_MODEL`, where `<UID>`
//!     is the claim uid upper-cased with every character outside `[A-Z0-9]` turned into
//!     `_`. These never collide between claims, so a container with several claims sees
//!     every device of each.
//!   - `FAKE_CLAIM_<UID>_DEVICE_COUNT`, so a program can iterate without guessing.
//! - in the same claim spec, one device per **parent** device of the claim,
//!   `<claim uid>:<k>` (`k` the parent's position in the claim): the same variables for
//!   that parent's children only, with the claim-wide numbering `i` and the claim-wide
//!   model and count. A structured kubelet gives a container the CDI ids of the devices
//!   of the requests it names (`claiminfo.go`, `cdiDevicesAsList`), so each allocated
//!   device answers with its own parent's id: a container naming one request of a claim
//!   sees that request's devices and no others; one naming the whole claim sees them all.
//!   (The shared variables repeat with equal values; runtimes keep one per name.)

use serde::{Deserialize, Serialize};

use crate::devices::ChildDevice;

/// The CDI class of our devices: a single word (the kubelet forbids a dot in the class).
pub const CDI_CLASS: &str = "fake";

/// Name of the device in the common spec. Never a claim uid (see
/// [`crate::claims::validate_claim_uid`]).
pub const COMMON_DEVICE: &str = "common";

/// The oldest CDI version: env edits and device names starting with a letter.
pub const CDI_VERSION_BASE: &str = "0.3.0";
/// The version that allows device names starting with a digit (claim uids often do).
pub const CDI_VERSION_DIGIT_NAMES: &str = "0.5.0";

/// The env variable with the node name.
pub const ENV_NODE_NAME: &str = "FAKE_NODE_NAME";
/// The env variable with the driver name.
pub const ENV_DRIVER_NAME: &str = "DRA_RESOURCE_DRIVER_NAME";

/// The CDI `vendor/class` of a driver: `k8s.<driver>/fake`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CdiKind {
    vendor: String,
}

/// Why a driver name cannot be a CDI vendor.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "--driver-name {0:?} does not make a CDI vendor: k8s.<driver> must be letters, digits, '.', '_' and '-', ending in a letter or digit"
)]
pub struct BadVendor(pub String);

impl CdiKind {
    /// The kind for `driver_name`.
    pub fn for_driver(driver_name: &str) -> Result<Self, BadVendor> {
        let vendor = format!("k8s.{driver_name}");
        let ok = vendor
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
            && vendor.ends_with(|c: char| c.is_ascii_alphanumeric());
        if ok {
            Ok(Self { vendor })
        } else {
            Err(BadVendor(driver_name.to_owned()))
        }
    }

    /// `vendor/class`, as in the spec's `kind` field.
    pub fn kind(&self) -> String {
        format!("{}/{CDI_CLASS}", self.vendor)
    }

    /// The fully qualified id of device `name`: `vendor/class=name`.
    pub fn qualified(&self, name: &str) -> String {
        format!("{}/{CDI_CLASS}={name}", self.vendor)
    }

    /// The file name of the spec with this id, by the CDI convention for transient specs:
    /// `<vendor>-<class>_<id>.json`, `/` in the id replaced by `_`.
    pub fn spec_file_name(&self, id: &str) -> String {
        format!("{}{}.json", self.spec_file_prefix(), id.replace('/', "_"))
    }

    /// What every spec file of ours starts with, to find them in a shared CDI dir.
    pub fn spec_file_prefix(&self) -> String {
        format!("{}-{CDI_CLASS}_", self.vendor)
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
    "--driver-name {driver:?} is {len} characters: classic kubelets (1.27–1.30) pass CDI ids as the annotation cdi.k8s.io/<driver>_<claim uid>, whose name part may have at most {MAX_ANNOTATION_NAME_LEN} characters, so with 36-character claim uids the driver name may have at most {max}; use a shorter --driver-name (or structured DRA, which has no such limit)"
)]
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

/// One CDI device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Device {
    /// Unique within the kind.
    pub name: String,
    /// What injecting the device does; never empty.
    pub container_edits: ContainerEdits,
}

/// The container edits we use: environment only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerEdits {
    /// `NAME=value` entries.
    pub env: Vec<String>,
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

/// The lowest CDI version that allows these device names.
pub fn min_version<'a>(device_names: impl IntoIterator<Item = &'a str>) -> &'static str {
    if device_names
        .into_iter()
        .any(|n| n.starts_with(|c: char| c.is_ascii_digit()))
    {
        CDI_VERSION_DIGIT_NAMES
    } else {
        CDI_VERSION_BASE
    }
}

fn spec(kind: &CdiKind, devices: Vec<Device>) -> Spec {
    Spec {
        cdi_version: min_version(devices.iter().map(|d| d.name.as_str())).to_owned(),
        kind: kind.kind(),
        devices,
    }
}

/// The common spec of a node.
pub fn common_spec(kind: &CdiKind, node_name: &str, driver_name: &str) -> Spec {
    spec(
        kind,
        vec![Device {
            name: COMMON_DEVICE.to_owned(),
            container_edits: ContainerEdits {
                env: vec![
                    format!("{ENV_NODE_NAME}={node_name}"),
                    format!("{ENV_DRIVER_NAME}={driver_name}"),
                ],
            },
        }],
    )
}

/// The `<UID>` part of a claim's per-claim variables.
pub fn claim_env_key(claim_uid: &str) -> String {
    claim_uid
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// The CDI device of the `k`-th parent device of a claim. `:` never occurs in a claim uid
/// (see [`crate::claims::validate_claim_uid`]), so these names never meet another
/// claim's.
pub fn parent_device_name(claim_uid: &str, k: usize) -> String {
    format!("{claim_uid}:{k}")
}

/// The env of the children `devices` (claim-wide index, child) of a claim with `count`
/// children in all.
fn claim_env(
    key: &str,
    model: &str,
    devices: &[(usize, &ChildDevice)],
    count: usize,
) -> Vec<String> {
    let mut env = Vec::with_capacity(devices.len() * 2 + 3);
    for (i, d) in devices {
        env.push(format!("FAKE_DEVICE_{i}={}", d.id));
    }
    env.push(format!("FAKE_DEVICE_MODEL={model}"));
    for (i, d) in devices {
        env.push(format!("FAKE_CLAIM_{key}_DEVICE_{i}={}", d.id));
    }
    env.push(format!("FAKE_CLAIM_{key}_DEVICE_MODEL={model}"));
    env.push(format!("FAKE_CLAIM_{key}_DEVICE_COUNT={count}"));
    env
}

/// The spec of one claim: device `<claim_uid>` with every child, then one device per
/// parent with that parent's children (see the module docs). `devices` lists the children
/// parent by parent, as [`crate::devices::children`] gives them.
pub fn claim_spec(kind: &CdiKind, claim_uid: &str, model: &str, devices: &[ChildDevice]) -> Spec {
    let key = claim_env_key(claim_uid);
    let indexed: Vec<(usize, &ChildDevice)> = devices.iter().enumerate().collect();
    let mut cdi_devices = vec![Device {
        name: claim_uid.to_owned(),
        container_edits: ContainerEdits {
            env: claim_env(&key, model, &indexed, devices.len()),
        },
    }];
    for (k, children) in indexed
        .chunk_by(|a, b| a.1.parent == b.1.parent)
        .enumerate()
    {
        cdi_devices.push(Device {
            name: parent_device_name(claim_uid, k),
            container_edits: ContainerEdits {
                env: claim_env(&key, model, children, devices.len()),
            },
        });
    }
    spec(kind, cdi_devices)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::devices::{children, parent_id};

    fn kind() -> CdiKind {
        CdiKind::for_driver(fake_dra_crds::DEFAULT_DRIVER_NAME).unwrap()
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
        assert!(CdiKind::for_driver("bad/name").is_err());
        assert!(CdiKind::for_driver("ends.").is_err());
    }

    #[test]
    fn classic_needs_room_for_the_annotation_key() {
        assert_eq!(
            check_classic_annotation_key(fake_dra_crds::DEFAULT_DRIVER_NAME),
            Ok(())
        );
        assert_eq!(check_classic_annotation_key(&"d".repeat(26)), Ok(()));
        let err = check_classic_annotation_key(&"d".repeat(27)).unwrap_err();
        assert_eq!((err.len, err.max), (27, 26));
        assert!(err.to_string().contains("at most 26"), "{err}");
    }

    #[test]
    fn version_is_the_lowest_that_covers_the_names() {
        assert_eq!(min_version(["common"]), "0.3.0");
        assert_eq!(min_version(["common", "0a1b"]), "0.5.0");
        let s = common_spec(&kind(), "node-1", "drv");
        assert_eq!(s.cdi_version, "0.3.0");
        assert_eq!(
            s.devices[0].container_edits.env,
            vec!["FAKE_NODE_NAME=node-1", "DRA_RESOURCE_DRIVER_NAME=drv"]
        );
    }

    #[test]
    fn claim_env_has_seed_and_per_claim_variables() {
        let parents = vec![parent_id("n", 0), parent_id("n", 1)];
        let kids = children(&parents, 2);
        let s = claim_spec(&kind(), "7a-b.c", "ULTRA_10", &kids);
        assert_eq!(s.cdi_version, "0.5.0");
        assert_eq!(s.devices.len(), 3, "the claim and its two parents");
        assert_eq!(s.devices[0].name, "7a-b.c");
        let env = &s.devices[0].container_edits.env;
        assert_eq!(env.len(), 4 + 1 + 4 + 2);
        assert_eq!(env[0], format!("FAKE_DEVICE_0={}", kids[0].id));
        assert_eq!(env[3], format!("FAKE_DEVICE_3={}", kids[3].id));
        assert_eq!(env[4], "FAKE_DEVICE_MODEL=ULTRA_10");
        assert_eq!(env[5], format!("FAKE_CLAIM_7A_B_C_DEVICE_0={}", kids[0].id));
        assert_eq!(env[9], "FAKE_CLAIM_7A_B_C_DEVICE_MODEL=ULTRA_10");
        assert_eq!(env[10], "FAKE_CLAIM_7A_B_C_DEVICE_COUNT=4");
        assert_eq!(s.to_bytes(), s.to_bytes());
        let back: Spec = serde_json::from_slice(&s.to_bytes()).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn each_parent_has_a_device_with_its_children_numbered_claim_wide() {
        let parents = vec![parent_id("n", 0), parent_id("n", 5), parent_id("n", 2)];
        let kids = children(&parents, 2);
        let s = claim_spec(&kind(), "u", "M", &kids);
        let names: Vec<&str> = s.devices.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["u", "u:0", "u:1", "u:2"]);
        let second = &s.devices[2].container_edits.env;
        assert_eq!(
            second,
            &vec![
                format!("FAKE_DEVICE_2={}", kids[2].id),
                format!("FAKE_DEVICE_3={}", kids[3].id),
                "FAKE_DEVICE_MODEL=M".to_string(),
                format!("FAKE_CLAIM_U_DEVICE_2={}", kids[2].id),
                format!("FAKE_CLAIM_U_DEVICE_3={}", kids[3].id),
                "FAKE_CLAIM_U_DEVICE_MODEL=M".to_string(),
                "FAKE_CLAIM_U_DEVICE_COUNT=6".to_string(),
            ]
        );
        // Together the parents' devices set exactly what the whole claim's device sets.
        let mut whole: Vec<&String> = s.devices[0].container_edits.env.iter().collect();
        let mut parts: Vec<&String> = s.devices[1..]
            .iter()
            .flat_map(|d| &d.container_edits.env)
            .collect();
        whole.sort();
        parts.sort();
        parts.dedup();
        assert_eq!(whole, parts);
    }
}
