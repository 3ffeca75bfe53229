//! What preparing a claim means, without I/O: check the kubelet's request against the
//! node's inventory and the claims already prepared, and describe the result.

use std::collections::BTreeMap;

use fake_dra_crds::handle::{AllocationHandle, HandleError};
use serde::{Deserialize, Serialize};

use crate::cdi::{self, COMMON_DEVICE, CdiKind};
use crate::devices::{ChildDevice, Inventory, children};

/// Longest claim uid we accept. Kubernetes uids are 36-character UUIDs; the bound only
/// keeps file names and env names sane.
pub const MAX_CLAIM_UID_LEN: usize = 128;

/// The claim as the kubelet names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRef {
    /// The claim's uid: the key of everything the plugin stores.
    pub uid: String,
    /// The claim's namespace.
    pub namespace: String,
    /// The claim's name.
    pub name: String,
}

/// Why a claim cannot be prepared. The message goes to the kubelet as the claim's error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrepareError {
    /// The uid could not be used in a file name.
    #[error("claim uid {uid:?} is invalid: {reason}")]
    InvalidUid {
        /// The uid (shortened when long).
        uid: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The handle did not parse.
    #[error("claim {claim}: {source}")]
    Handle {
        /// `namespace/name (uid)`.
        claim: String,
        /// The parser's error.
        source: HandleError,
    },
    /// The handle is for another node.
    #[error("claim {claim}: allocation handle is for node {handle_node:?}, this is node {node:?}")]
    WrongNode {
        /// `namespace/name (uid)`.
        claim: String,
        /// The handle's node.
        handle_node: String,
        /// Ours.
        node: String,
    },
    /// The handle's model is not this node's.
    #[error(
        "claim {claim}: allocation handle asks for model {handle_model:?}, the devices of node {node:?} are {model:?}"
    )]
    WrongModel {
        /// `namespace/name (uid)`.
        claim: String,
        /// The handle's model.
        handle_model: String,
        /// Our node.
        node: String,
        /// Our model.
        model: String,
    },
    /// A device the node does not have.
    #[error("claim {claim}: device {device} is not a device of node {node:?}")]
    UnknownDevice {
        /// `namespace/name (uid)`.
        claim: String,
        /// The device id.
        device: String,
        /// Our node.
        node: String,
    },
    /// A device another prepared claim holds.
    #[error(
        "claim {claim}: device {device} is already prepared for claim {holder}; unprepare that claim first"
    )]
    DeviceInUse {
        /// `namespace/name (uid)`.
        claim: String,
        /// The device id.
        device: String,
        /// `namespace/name (uid)` of the claim holding it.
        holder: String,
    },
    /// The claim is prepared with other devices than the handle now names.
    #[error(
        "claim {claim} is already prepared with devices {prepared:?} (split {prepared_split}); the handle now names {requested:?} (split {requested_split}); unprepare it first"
    )]
    Changed {
        /// `namespace/name (uid)`.
        claim: String,
        /// What the checkpoint has.
        prepared: Vec<String>,
        /// Its split.
        prepared_split: u32,
        /// What the handle has.
        requested: Vec<String>,
        /// Its split.
        requested_split: u32,
    },
}

/// Checks that a claim uid is safe as a file name, a CDI device name and an env name part:
/// 1 to [`MAX_CLAIM_UID_LEN`] of `[A-Za-z0-9._-]`, starting and ending with a letter or
/// digit (the CDI device-name rule, which podman and containerd enforce), not
/// `..`-containing, not `common`. No `:`: it separates a claim's per-parent CDI devices.
pub fn validate_claim_uid(uid: &str) -> Result<(), PrepareError> {
    let fail = |reason: String| PrepareError::InvalidUid {
        uid: shorten(uid),
        reason,
    };
    if uid.is_empty() {
        return Err(fail("must not be empty".into()));
    }
    if uid.len() > MAX_CLAIM_UID_LEN {
        return Err(fail(format!(
            "must be at most {MAX_CLAIM_UID_LEN} characters, got {}",
            uid.len()
        )));
    }
    if let Some(bad) = uid
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(fail(format!(
            "may only contain letters, digits, '.', '_' and '-', found {bad:?}"
        )));
    }
    if !uid.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        return Err(fail("must start with a letter or digit".into()));
    }
    if !uid.ends_with(|c: char| c.is_ascii_alphanumeric()) {
        return Err(fail(
            "must end with a letter or digit (a CDI device name does)".into(),
        ));
    }
    if uid.contains("..") {
        return Err(fail("must not contain \"..\"".into()));
    }
    if uid == COMMON_DEVICE {
        return Err(fail(format!("{COMMON_DEVICE:?} is reserved")));
    }
    Ok(())
}

fn shorten(s: &str) -> String {
    const MAX: usize = 80;
    if s.len() <= MAX {
        return s.to_owned();
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &s[..end], s.len())
}

/// A claim the plugin has prepared: what the checkpoint stores for it. Only what cannot be
/// recomputed; children and CDI specs are derived.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PreparedClaim {
    /// The claim's namespace.
    pub namespace: String,
    /// The claim's name.
    pub name: String,
    /// The model of its devices.
    pub model: String,
    /// Children per parent.
    pub split: u32,
    /// Parent device ids, in the inventory's spelling.
    pub devices: Vec<String>,
}

impl PreparedClaim {
    /// The devices its containers see.
    pub fn children(&self) -> Vec<ChildDevice> {
        children(&self.devices, self.split)
    }

    /// Its CDI spec.
    pub fn spec(&self, kind: &CdiKind, uid: &str) -> cdi::Spec {
        cdi::claim_spec(kind, uid, &self.model, &self.children())
    }

    /// The ids a classic kubelet gets: the common device and the claim's device.
    pub fn cdi_ids(kind: &CdiKind, uid: &str) -> Vec<String> {
        vec![kind.qualified(COMMON_DEVICE), kind.qualified(uid)]
    }

    /// The ids a structured kubelet gets for the allocated device that is parent `parent`:
    /// the common device and that parent's device, or `None` if the claim has no such
    /// parent.
    pub fn device_cdi_ids(&self, kind: &CdiKind, uid: &str, parent: &str) -> Option<Vec<String>> {
        let k = self.devices.iter().position(|d| d == parent)?;
        Some(vec![
            kind.qualified(COMMON_DEVICE),
            kind.qualified(&cdi::parent_device_name(uid, k)),
        ])
    }
}

/// `namespace/name (uid)`, how errors name a claim.
pub fn describe(uid: &str, namespace: &str, name: &str) -> String {
    format!("{namespace}/{name} ({uid})")
}

/// The outcome of [`plan`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Already prepared exactly so: answer with the same ids, write nothing.
    AlreadyPrepared,
    /// Prepare it: write the spec, record it.
    Prepare(PreparedClaim),
}

/// Decides what preparing `claim` with `handle` means, given the node's inventory and the
/// claims prepared so far (uid → claim).
pub fn plan(
    inventory: &Inventory,
    prepared: &BTreeMap<String, PreparedClaim>,
    claim: &ClaimRef,
    handle: &str,
) -> Result<Plan, PrepareError> {
    validate_claim_uid(&claim.uid)?;
    let who = describe(&claim.uid, &claim.namespace, &claim.name);
    let handle = AllocationHandle::parse(handle).map_err(|source| PrepareError::Handle {
        claim: who.clone(),
        source,
    })?;
    if handle.node_name != inventory.node_name {
        return Err(PrepareError::WrongNode {
            claim: who,
            handle_node: handle.node_name,
            node: inventory.node_name.clone(),
        });
    }
    if handle.model != inventory.model {
        return Err(PrepareError::WrongModel {
            claim: who,
            handle_model: handle.model,
            node: inventory.node_name.clone(),
            model: inventory.model.clone(),
        });
    }
    let mut devices = Vec::with_capacity(handle.devices.len());
    for id in &handle.devices {
        let Some(own) = inventory
            .devices
            .iter()
            .find(|d| d.eq_ignore_ascii_case(id))
        else {
            return Err(PrepareError::UnknownDevice {
                claim: who,
                device: id.clone(),
                node: inventory.node_name.clone(),
            });
        };
        devices.push(own.clone());
    }
    let wanted = PreparedClaim {
        namespace: claim.namespace.clone(),
        name: claim.name.clone(),
        model: handle.model,
        split: handle.split,
        devices,
    };
    plan_prepared(prepared, claim, wanted)
}

/// Decides what preparing `claim` as `wanted` means given the claims prepared so far:
/// the step classic (from a handle) and structured (from the claim's allocation, see
/// [`crate::structured`]) share, so both get the same idempotency and exclusivity.
pub fn plan_prepared(
    prepared: &BTreeMap<String, PreparedClaim>,
    claim: &ClaimRef,
    wanted: PreparedClaim,
) -> Result<Plan, PrepareError> {
    validate_claim_uid(&claim.uid)?;
    let who = describe(&claim.uid, &claim.namespace, &claim.name);
    if let Some(existing) = prepared.get(&claim.uid) {
        if existing.devices == wanted.devices && existing.split == wanted.split {
            return Ok(Plan::AlreadyPrepared);
        }
        return Err(PrepareError::Changed {
            claim: who,
            prepared: existing.devices.clone(),
            prepared_split: existing.split,
            requested: wanted.devices,
            requested_split: wanted.split,
        });
    }
    for (uid, other) in prepared {
        if let Some(device) = wanted.devices.iter().find(|d| other.devices.contains(d)) {
            return Err(PrepareError::DeviceInUse {
                claim: who,
                device: device.clone(),
                holder: describe(uid, &other.namespace, &other.name),
            });
        }
    }
    Ok(Plan::Prepare(wanted))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use fake_dra_crds::handle::AllocationHandle;
    use proptest::prelude::*;

    use super::*;

    fn inventory() -> Inventory {
        Inventory::new("node-1", 8, &["ULTRA_10".to_string()]).unwrap()
    }

    fn handle(inv: &Inventory, idx: &[usize], split: u32) -> String {
        AllocationHandle {
            node_name: inv.node_name.clone(),
            model: inv.model.clone(),
            split,
            devices: idx.iter().map(|&i| inv.devices[i].clone()).collect(),
        }
        .to_json()
    }

    fn claim(uid: &str) -> ClaimRef {
        ClaimRef {
            uid: uid.into(),
            namespace: "ns".into(),
            name: format!("claim-{uid}"),
        }
    }

    #[test]
    fn uids_are_checked_before_use() {
        for (uid, msg) in [
            ("", "must not be empty"),
            ("../../etc/passwd", "found '/'"),
            ("a/b", "found '/'"),
            ("a\0b", "found '\\0'"),
            ("a..b", "must not contain \"..\""),
            (".hidden", "must start with a letter or digit"),
            ("common", "is reserved"),
        ] {
            let err = validate_claim_uid(uid).unwrap_err().to_string();
            assert!(err.contains(msg), "{uid:?}: {err}");
        }
        let long = "a".repeat(10_000);
        let err = validate_claim_uid(&long).unwrap_err().to_string();
        assert!(err.contains("at most 128 characters, got 10000"), "{err}");
        assert!(err.len() < 300);
        validate_claim_uid("0f8e2d6a-1c1b-4a53-9a1e-0a6a4c3e7c11").unwrap();
    }

    #[test]
    fn prepares_own_devices() {
        let inv = inventory();
        let got = plan(
            &inv,
            &BTreeMap::new(),
            &claim("u1"),
            &handle(&inv, &[0, 1, 2, 3], 2),
        )
        .unwrap();
        let Plan::Prepare(p) = got else {
            panic!("{got:?}")
        };
        assert_eq!(p.devices, inv.devices[..4].to_vec());
        assert_eq!(p.children().len(), 8);
    }

    #[test]
    fn refuses_foreign_and_mismatched_handles() {
        let inv = inventory();
        let other = Inventory::new("node-2", 8, &["ULTRA_10".to_string()]).unwrap();
        let none = BTreeMap::new();
        let err = plan(&inv, &none, &claim("u"), &handle(&other, &[0], 1)).unwrap_err();
        assert!(matches!(err, PrepareError::WrongNode { .. }), "{err}");
        let foreign = AllocationHandle {
            node_name: "node-1".into(),
            model: "ULTRA_10".into(),
            split: 1,
            devices: vec![other.devices[0].clone()],
        }
        .to_json();
        let err = plan(&inv, &none, &claim("u"), &foreign)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&other.devices[0]) && err.contains("not a device of node"),
            "{err}"
        );
        let wrong_model = handle(&inv, &[0], 1).replace("ULTRA_10", "ULTRA_100");
        let err = plan(&inv, &none, &claim("u"), &wrong_model).unwrap_err();
        assert!(matches!(err, PrepareError::WrongModel { .. }), "{err}");
        let err = plan(&inv, &none, &claim("u"), "not json")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("claim ns/claim-u (u): allocation handle is not JSON"),
            "{err}"
        );
    }

    #[test]
    fn same_claim_again_is_a_no_op_and_changes_are_refused() {
        let inv = inventory();
        let Plan::Prepare(p) =
            plan(&inv, &BTreeMap::new(), &claim("u1"), &handle(&inv, &[0], 2)).unwrap()
        else {
            panic!()
        };
        let prepared = BTreeMap::from([("u1".to_string(), p)]);
        assert_eq!(
            plan(&inv, &prepared, &claim("u1"), &handle(&inv, &[0], 2)).unwrap(),
            Plan::AlreadyPrepared
        );
        let err = plan(&inv, &prepared, &claim("u1"), &handle(&inv, &[1], 2)).unwrap_err();
        assert!(matches!(err, PrepareError::Changed { .. }), "{err}");
    }

    #[test]
    fn a_device_serves_one_claim_at_a_time() {
        let inv = inventory();
        let Plan::Prepare(p) = plan(
            &inv,
            &BTreeMap::new(),
            &claim("u1"),
            &handle(&inv, &[0, 1], 1),
        )
        .unwrap() else {
            panic!()
        };
        let prepared = BTreeMap::from([("u1".to_string(), p)]);
        let err = plan(&inv, &prepared, &claim("u2"), &handle(&inv, &[1, 2], 1))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("ns/claim-u2 (u2)") && err.contains("ns/claim-u1 (u1)"),
            "{err}"
        );
    }

    proptest! {
        #[test]
        fn any_uid_accepted_is_path_and_env_safe(uid in "\\PC{0,200}") {
            if validate_claim_uid(&uid).is_ok() {
                prop_assert!(!uid.contains('/') && !uid.contains("..") && !uid.contains('\0'));
                prop_assert!(uid.len() <= MAX_CLAIM_UID_LEN);
                let key = cdi::claim_env_key(&uid);
                prop_assert!(key.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'));
            }
        }

        #[test]
        fn prepared_sets_never_share_a_device(
            claims in proptest::collection::vec((proptest::collection::btree_set(0usize..8, 1..4), 1u32..4), 1..10)
        ) {
            let inv = inventory();
            let mut prepared = BTreeMap::new();
            for (n, (idx, split)) in claims.iter().enumerate() {
                let idx: Vec<usize> = idx.iter().copied().collect();
                let uid = format!("u{n}");
                if let Ok(Plan::Prepare(p)) = plan(&inv, &prepared, &claim(&uid), &handle(&inv, &idx, *split)) {
                    prepared.insert(uid, p);
                }
            }
            let mut seen = std::collections::HashSet::new();
            for p in prepared.values() {
                for d in &p.devices {
                    prop_assert!(seen.insert(d.clone()), "device {} twice", d);
                }
            }
        }
    }
}
