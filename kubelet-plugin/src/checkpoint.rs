//! The checkpoint: the claims this node has prepared, in a small versioned JSON document
//! in the plugin directory. It survives reboots (unlike `/var/run/cdi`, a tmpfs), so the
//! plugin can restore the CDI specs of running pods, which the kubelet never re-prepares.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::claims::PreparedClaim;

/// The checkpoint's file name in the plugin directory.
pub const FILE_NAME: &str = "checkpoint.json";
/// The `apiVersion` written and accepted.
pub const API_VERSION: &str = "fake.resource.3-shake.com/v1alpha1";
/// The `kind` of the document.
pub const KIND: &str = "KubeletPluginCheckpoint";

/// The document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Checkpoint {
    /// [`API_VERSION`].
    pub api_version: String,
    /// [`KIND`].
    pub kind: String,
    /// The node the claims were prepared on; a checkpoint of another node is refused.
    pub node_name: String,
    /// Prepared claims by uid.
    #[serde(default)]
    pub claims: BTreeMap<String, PreparedClaim>,
}

/// Why a checkpoint cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointError {
    /// Not a checkpoint document of a version we know.
    #[error("not a valid checkpoint: {0}")]
    Invalid(String),
    /// Written for another node.
    #[error("checkpoint is for node {found:?}, this is node {node:?}")]
    OtherNode {
        /// What the file says.
        found: String,
        /// Ours.
        node: String,
    },
}

impl Checkpoint {
    /// An empty checkpoint for `node_name`.
    pub fn new(node_name: &str, claims: BTreeMap<String, PreparedClaim>) -> Self {
        Self {
            api_version: API_VERSION.to_owned(),
            kind: KIND.to_owned(),
            node_name: node_name.to_owned(),
            claims,
        }
    }

    /// Parses and checks a checkpoint of `node_name`.
    pub fn parse(bytes: &[u8], node_name: &str) -> Result<Self, CheckpointError> {
        let cp: Self =
            serde_json::from_slice(bytes).map_err(|e| CheckpointError::Invalid(e.to_string()))?;
        if cp.api_version != API_VERSION || cp.kind != KIND {
            return Err(CheckpointError::Invalid(format!(
                "apiVersion {:?} kind {:?}, expected {API_VERSION:?} {KIND:?}",
                cp.api_version, cp.kind
            )));
        }
        if cp.node_name != node_name {
            return Err(CheckpointError::OtherNode {
                found: cp.node_name,
                node: node_name.to_owned(),
            });
        }
        // The same limits as on the wire: a hand-edited or damaged entry never makes a
        // spec the kubelet could not have asked for (split 0, 10^5 children …).
        for (uid, claim) in &cp.claims {
            crate::claims::validate_claim_uid(uid)
                .map_err(|e| CheckpointError::Invalid(e.to_string()))?;
            fake_dra_crds::handle::AllocationHandle {
                node_name: cp.node_name.clone(),
                model: claim.model.clone(),
                split: claim.split,
                devices: claim.devices.clone(),
            }
            .validate()
            .map_err(|e| CheckpointError::Invalid(format!("claim {uid}: {e}")))?;
        }
        Ok(cp)
    }

    /// The bytes written to disk.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec_pretty(self).unwrap_or_default();
        bytes.push(b'\n');
        bytes
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_bad_documents() {
        let claim = PreparedClaim {
            namespace: "ns".into(),
            name: "c".into(),
            model: "ULTRA_10".into(),
            split: 2,
            devices: vec!["FAKE-00000000-0000-0000-0000-000000000000".into()],
        };
        let cp = Checkpoint::new("node-1", BTreeMap::from([("u1".to_string(), claim)]));
        assert_eq!(Checkpoint::parse(&cp.to_bytes(), "node-1").unwrap(), cp);
        assert!(matches!(
            Checkpoint::parse(&cp.to_bytes(), "node-2"),
            Err(CheckpointError::OtherNode { .. })
        ));
        let truncated = &cp.to_bytes()[..20];
        assert!(matches!(
            Checkpoint::parse(truncated, "node-1"),
            Err(CheckpointError::Invalid(_))
        ));
        let other = String::from_utf8(cp.to_bytes())
            .unwrap()
            .replace("v1alpha1", "v9");
        assert!(Checkpoint::parse(other.as_bytes(), "node-1").is_err());
        let bad_uid = String::from_utf8(cp.to_bytes())
            .unwrap()
            .replace("\"u1\"", "\"../x\"");
        assert!(Checkpoint::parse(bad_uid.as_bytes(), "node-1").is_err());
    }

    #[test]
    fn entry_values_are_held_to_the_wire_limits() {
        let claim = |split: u32, devices: Vec<String>| PreparedClaim {
            namespace: "ns".into(),
            name: "c".into(),
            model: "ULTRA_10".into(),
            split,
            devices,
        };
        let device = |i: usize| format!("FAKE-00000000-0000-0000-0000-{i:012}");
        let parse = |c: PreparedClaim| {
            let cp = Checkpoint::new("node-1", BTreeMap::from([("u1".to_string(), c)]));
            Checkpoint::parse(&cp.to_bytes(), "node-1")
        };
        assert!(parse(claim(64, vec![device(0)])).is_ok());
        for (bad, why) in [
            (claim(0, vec![device(0)]), "split"),
            (claim(100_000, vec![device(0)]), "split"),
            (claim(1, vec![]), "no devices"),
            (claim(1, (0..129).map(device).collect()), "128"),
            (claim(1, vec![device(0), device(0)]), "more than once"),
            (claim(1, vec!["not-a-device".into()]), "not-a-device"),
        ] {
            match parse(bad) {
                Err(CheckpointError::Invalid(message)) => {
                    assert!(message.starts_with("claim u1: "), "{message}");
                    assert!(message.contains(why), "{why}: {message}");
                }
                other => panic!("{why}: {other:?}"),
            }
        }
    }
}
