//! The checkpoint: the claims this node has prepared, in a small versioned JSON document
//! in the plugin directory. It survives reboots (unlike `/var/run/cdi`, a tmpfs), so the
//! plugin can restore the CDI specs of running pods, which the kubelet never re-prepares.
//! Each entry is the claim's namespace and name next to what the device profile keeps of
//! it ([`crate::profile::DeviceProfile::Prepared`]), whatever the device.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::claim::ClaimUid;
use crate::profile::ProfileError;

/// The checkpoint's file name in the plugin directory.
pub const FILE_NAME: &str = "checkpoint.json";
/// The `apiVersion` written and accepted.
pub const API_VERSION: &str = "fake.resource.3-shake.com/v1alpha1";
/// The `kind` of the document.
pub const KIND: &str = "KubeletPluginCheckpoint";

/// A prepared claim as the checkpoint keeps it: `namespace`, `name` and the profile's
/// fields, inline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Entry<P> {
    /// The claim's namespace.
    pub namespace: String,
    /// The claim's name.
    pub name: String,
    /// What the device profile keeps, inline.
    #[serde(flatten)]
    pub prepared: P,
}

/// Read by hand because serde's `flatten` would let unknown fields through: the profile's
/// type gets exactly the fields that are not `namespace` and `name`, and refuses what it
/// does not know.
impl<'de, P: DeserializeOwned> Deserialize<'de> for Entry<P> {
    fn deserialize<De: serde::Deserializer<'de>>(deserializer: De) -> Result<Self, De::Error> {
        use serde::de::Error;
        let mut fields = serde_json::Map::<String, serde_json::Value>::deserialize(deserializer)?;
        let mut take = |key: &'static str| match fields.remove(key) {
            Some(serde_json::Value::String(s)) => Ok(s),
            Some(other) => Err(De::Error::custom(format!(
                "{key} must be a string, got {other}"
            ))),
            None => Err(De::Error::missing_field(key)),
        };
        let namespace = take("namespace")?;
        let name = take("name")?;
        let prepared =
            P::deserialize(serde_json::Value::Object(fields)).map_err(De::Error::custom)?;
        Ok(Self {
            namespace,
            name,
            prepared,
        })
    }
}

/// The document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    rename_all = "camelCase",
    deny_unknown_fields,
    bound(deserialize = "P: DeserializeOwned")
)]
pub struct Checkpoint<P> {
    /// [`API_VERSION`].
    pub api_version: String,
    /// [`KIND`].
    pub kind: String,
    /// The node the claims were prepared on; a checkpoint of another node is refused.
    pub node_name: String,
    /// Prepared claims by uid (each uid checked as it is read).
    #[serde(default = "BTreeMap::new")]
    pub claims: BTreeMap<ClaimUid, Entry<P>>,
}

/// Why a checkpoint cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointError {
    /// Not a checkpoint document of a version we know, or an entry past the limits.
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

impl<P: Serialize + DeserializeOwned> Checkpoint<P> {
    /// A checkpoint of `node_name` holding `claims`.
    pub fn new(node_name: &str, claims: BTreeMap<ClaimUid, Entry<P>>) -> Self {
        Self {
            api_version: API_VERSION.to_owned(),
            kind: KIND.to_owned(),
            node_name: node_name.to_owned(),
            claims,
        }
    }

    /// Parses a checkpoint of `node_name`, each entry checked by `check` (the device
    /// profile's limits: a hand-edited or damaged entry never makes a spec the kubelet
    /// could not have asked for).
    pub fn parse(
        bytes: &[u8],
        node_name: &str,
        check: impl Fn(&P) -> Result<(), ProfileError>,
    ) -> Result<Self, CheckpointError> {
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
        for (uid, entry) in &cp.claims {
            check(&entry.prepared)
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
    use crate::fake::devices::Inventory;
    use crate::fake::{FakePrepared, FakeProfile};
    use crate::profile::DeviceProfile;

    fn profile() -> FakeProfile {
        FakeProfile::new(
            Inventory::new("node-1", 8, &["ULTRA_10".to_string()]).unwrap(),
            "drv",
        )
    }

    fn entry(split: u32, devices: Vec<String>) -> Entry<FakePrepared> {
        Entry {
            namespace: "ns".into(),
            name: "c".into(),
            prepared: FakePrepared {
                model: "ULTRA_10".into(),
                split,
                devices,
                admin_access: false,
            },
        }
    }

    fn uid(s: &str) -> ClaimUid {
        ClaimUid::parse(s).unwrap()
    }

    fn parse(bytes: &[u8], node: &str) -> Result<Checkpoint<FakePrepared>, CheckpointError> {
        let p = profile();
        Checkpoint::parse(bytes, node, |e| p.check(e))
    }

    fn device(i: usize) -> String {
        format!("FAKE-00000000-0000-0000-0000-{i:012}")
    }

    #[test]
    fn round_trips_and_refuses_bad_documents() {
        let cp = Checkpoint::new(
            "node-1",
            BTreeMap::from([(uid("u1"), entry(2, vec![device(0)]))]),
        );
        assert_eq!(parse(&cp.to_bytes(), "node-1").unwrap(), cp);
        assert!(matches!(
            parse(&cp.to_bytes(), "node-2"),
            Err(CheckpointError::OtherNode { .. })
        ));
        let truncated = &cp.to_bytes()[..20];
        assert!(matches!(
            parse(truncated, "node-1"),
            Err(CheckpointError::Invalid(_))
        ));
        let other = String::from_utf8(cp.to_bytes())
            .unwrap()
            .replace("v1alpha1", "v9");
        assert!(parse(other.as_bytes(), "node-1").is_err());
        let bad_uid = String::from_utf8(cp.to_bytes())
            .unwrap()
            .replace("\"u1\"", "\"../x\"");
        assert!(parse(bad_uid.as_bytes(), "node-1").is_err());
        let unknown = String::from_utf8(cp.to_bytes())
            .unwrap()
            .replace("\"split\"", "\"splitt\": 1, \"split\"");
        assert!(
            parse(unknown.as_bytes(), "node-1").is_err(),
            "unknown fields are refused"
        );
    }

    #[test]
    fn the_format_is_the_one_earlier_releases_wrote() {
        let written = r#"{"apiVersion":"fake.resource.3-shake.com/v1alpha1","kind":"KubeletPluginCheckpoint","nodeName":"node-1","claims":{"u1":{"namespace":"ns","name":"c","model":"ULTRA_10","split":2,"devices":["FAKE-00000000-0000-0000-0000-000000000000"]}}}"#;
        let cp = parse(written.as_bytes(), "node-1").unwrap();
        assert_eq!(cp.claims[&uid("u1")], entry(2, vec![device(0)]));
    }

    #[test]
    fn entry_values_are_held_to_the_wire_limits() {
        let parse_one = |e: Entry<FakePrepared>| {
            let cp = Checkpoint::new("node-1", BTreeMap::from([(uid("u1"), e)]));
            parse(&cp.to_bytes(), "node-1")
        };
        assert!(parse_one(entry(64, vec![device(0)])).is_ok());
        for (bad, why) in [
            (entry(0, vec![device(0)]), "split"),
            (entry(100_000, vec![device(0)]), "split"),
            (entry(1, vec![]), "no devices"),
            (entry(1, (0..129).map(device).collect()), "128"),
            (entry(1, vec![device(0), device(0)]), "more than once"),
            (entry(1, vec!["not-a-device".into()]), "not-a-device"),
        ] {
            match parse_one(bad) {
                Err(CheckpointError::Invalid(message)) => {
                    assert!(message.starts_with("claim u1: "), "{message}");
                    assert!(message.contains(why), "{why}: {message}");
                }
                other => panic!("{why}: {other:?}"),
            }
        }
    }
}
