//! The checkpoint: the claims this node has prepared, in a small versioned JSON document
//! in the plugin directory. It survives reboots (unlike `/var/run/cdi`, a tmpfs), so the
//! plugin can restore the CDI specs of running pods, which the kubelet never re-prepares.
//! Each entry is the claim's namespace and name next to what the device profile keeps of
//! it ([`crate::profile::DeviceProfile::Prepared`]), whatever the device.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::claim_data::ClaimUid;
use crate::claim_data::ProfileError;

/// The checkpoint's file name in the plugin directory.
pub const FILE_NAME: &str = "checkpoint.json";

/// The `apiVersion` and `kind` written, and required when read (the driver's, from
/// [`crate::Plugin::checkpoint_type`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DocType<'a> {
    /// `apiVersion`.
    pub api_version: &'a str,
    /// `kind`.
    pub kind: &'a str,
}

/// Where a claim is in its preparation. A driver with device work
/// ([`crate::profile::DeviceProfile::DEVICE_WORK`]) has its claim recorded as started
/// before the work and as completed after it, so a crash in between is found at start and
/// rolled back; a driver without device work only ever records completed claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Phase {
    /// Prepared: its CDI spec is written, its devices are ready.
    #[default]
    #[serde(rename = "PrepareCompleted")]
    Completed,
    /// The device work began and its outcome is not recorded: rolled back before anything
    /// else is done with the claim.
    #[serde(rename = "PrepareStarted")]
    Started,
}

impl Phase {
    fn is_completed(&self) -> bool {
        *self == Self::Completed
    }
}

/// The key of [`Entry::phase`], written only for a started claim (so a checkpoint of
/// completed claims reads as it did before phases existed).
pub const PHASE_KEY: &str = "preparePhase";

/// A prepared claim as the checkpoint keeps it: `namespace`, `name`, its phase and the
/// profile's fields, inline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Entry<P> {
    /// The claim's namespace.
    pub namespace: String,
    /// The claim's name.
    pub name: String,
    /// Started or completed.
    #[serde(rename = "preparePhase", skip_serializing_if = "Phase::is_completed")]
    pub phase: Phase,
    /// What the device profile keeps, inline.
    #[serde(flatten)]
    pub prepared: P,
}

/// Read by hand because serde's `flatten` would let unknown fields through: the profile's
/// type gets exactly the fields that are not `namespace`, `name` and [`PHASE_KEY`], and
/// refuses what it does not know.
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
        let phase = match fields.remove(PHASE_KEY) {
            None => Phase::Completed,
            Some(value) => Phase::deserialize(value)
                .map_err(|e| De::Error::custom(format!("{PHASE_KEY}: {e}")))?,
        };
        let prepared =
            P::deserialize(serde_json::Value::Object(fields)).map_err(De::Error::custom)?;
        Ok(Self {
            namespace,
            name,
            phase,
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
    /// The driver's [`DocType::api_version`].
    pub api_version: String,
    /// The driver's [`DocType::kind`].
    pub kind: String,
    /// The node the claims were prepared on; a checkpoint of another node is refused.
    pub node_name: String,
    /// Prepared claims by uid (each uid checked as it is read).
    #[serde(default = "BTreeMap::new")]
    pub claims: BTreeMap<ClaimUid, Entry<P>>,
}

/// Why a checkpoint cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    /// Not a checkpoint document of a version we know, or an entry past the limits.
    #[error("not a valid checkpoint: {0}")]
    Invalid(String),
    /// Written for another node. What the file says is quoted (escaped); ours is not.
    #[error("checkpoint is for node {found:?}, this is node {node}")]
    OtherNode {
        /// What the file says.
        found: String,
        /// Ours.
        node: String,
    },
}

impl<P: Serialize + DeserializeOwned> Checkpoint<P> {
    /// A checkpoint of `node_name` holding `claims`.
    pub fn new(doc: DocType<'_>, node_name: &str, claims: BTreeMap<ClaimUid, Entry<P>>) -> Self {
        Self {
            api_version: doc.api_version.to_owned(),
            kind: doc.kind.to_owned(),
            node_name: node_name.to_owned(),
            claims,
        }
    }

    /// Parses a checkpoint of `node_name`, each entry checked by `check` (the device
    /// profile's limits: a hand-edited or damaged entry never makes a spec the kubelet
    /// could not have asked for).
    pub fn parse(
        bytes: &[u8],
        doc: DocType<'_>,
        node_name: &str,
        check: impl Fn(&P) -> Result<(), ProfileError>,
    ) -> Result<Self, CheckpointError> {
        let cp: Self =
            serde_json::from_slice(bytes).map_err(|e| CheckpointError::Invalid(e.to_string()))?;
        if cp.api_version != doc.api_version || cp.kind != doc.kind {
            // The file's values quoted (escaped), the driver's own as they are.
            return Err(CheckpointError::Invalid(format!(
                "apiVersion {:?} kind {:?}, expected {} {}",
                cp.api_version, cp.kind, doc.api_version, doc.kind
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
    use crate::profile::DeviceProfile;
    use crate::testing::{TestPrepared, TestProfile};

    const DOC: DocType<'static> = DocType {
        api_version: "drv.example.com/v1alpha1",
        kind: "KubeletPluginCheckpoint",
    };

    fn entry(start: u32, counters: Vec<String>) -> Entry<TestPrepared> {
        Entry {
            namespace: "ns".into(),
            name: "c".into(),
            phase: Phase::Completed,
            prepared: TestPrepared { counters, start },
        }
    }

    fn uid(s: &str) -> ClaimUid {
        ClaimUid::parse(s).unwrap()
    }

    fn parse(bytes: &[u8], node: &str) -> Result<Checkpoint<TestPrepared>, CheckpointError> {
        let p = TestProfile::new(8);
        Checkpoint::parse(bytes, DOC, node, |e| p.check(e))
    }

    #[test]
    fn round_trips_and_refuses_bad_documents() {
        let cp = Checkpoint::new(
            DOC,
            "node-1",
            BTreeMap::from([(uid("u1"), entry(2, vec!["counter-0".into()]))]),
        );
        assert_eq!(parse(&cp.to_bytes(), "node-1").unwrap(), cp);
        assert_eq!(
            parse(&cp.to_bytes(), "node-2").unwrap_err().to_string(),
            "checkpoint is for node \"node-1\", this is node node-2"
        );
        let odd = Checkpoint::<TestPrepared>::new(DOC, "node-1\n\u{1b}[2J", BTreeMap::new());
        assert_eq!(
            parse(&odd.to_bytes(), "node-2").unwrap_err().to_string(),
            "checkpoint is for node \"node-1\\n\\u{1b}[2J\", this is node node-2",
            "a name from the file is escaped"
        );
        let truncated = &cp.to_bytes()[..20];
        assert!(matches!(
            parse(truncated, "node-1"),
            Err(CheckpointError::Invalid(_))
        ));
        let other = String::from_utf8(cp.to_bytes())
            .unwrap()
            .replace("v1alpha1", "v9");
        let err = parse(other.as_bytes(), "node-1").unwrap_err().to_string();
        assert_eq!(
            err,
            "not a valid checkpoint: apiVersion \"drv.example.com/v9\" kind \"KubeletPluginCheckpoint\", expected drv.example.com/v1alpha1 KubeletPluginCheckpoint"
        );
        let bad_uid = String::from_utf8(cp.to_bytes())
            .unwrap()
            .replace("\"u1\"", "\"../x\"");
        assert!(parse(bad_uid.as_bytes(), "node-1").is_err());
        let unknown = String::from_utf8(cp.to_bytes())
            .unwrap()
            .replace("\"start\"", "\"startt\": 1, \"start\"");
        assert!(
            parse(unknown.as_bytes(), "node-1").is_err(),
            "unknown fields are refused"
        );
    }

    #[test]
    fn entries_are_inline_next_to_namespace_and_name() {
        let written = r#"{"apiVersion":"drv.example.com/v1alpha1","kind":"KubeletPluginCheckpoint","nodeName":"node-1","claims":{"u1":{"namespace":"ns","name":"c","counters":["counter-0"],"start":2}}}"#;
        let cp = parse(written.as_bytes(), "node-1").unwrap();
        assert_eq!(cp.claims[&uid("u1")], entry(2, vec!["counter-0".into()]));
    }

    #[test]
    fn a_started_claim_says_so_and_a_completed_one_reads_as_before_phases() {
        let mut started = entry(1, vec!["counter-0".into()]);
        started.phase = Phase::Started;
        let cp = Checkpoint::new(
            DOC,
            "node-1",
            BTreeMap::from([
                (uid("u1"), started.clone()),
                (uid("u2"), entry(2, vec!["counter-1".into()])),
            ]),
        );
        let text = String::from_utf8(cp.to_bytes()).unwrap();
        assert_eq!(
            text.matches("\"preparePhase\": \"PrepareStarted\"").count(),
            1,
            "{text}"
        );
        assert!(!text.contains("PrepareCompleted"), "{text}");
        let back = parse(text.as_bytes(), "node-1").unwrap();
        assert_eq!(back.claims[&uid("u1")], started);
        assert_eq!(back.claims[&uid("u2")].phase, Phase::Completed);
        let odd = text.replace("PrepareStarted", "Halfway");
        let err = parse(odd.as_bytes(), "node-1").unwrap_err().to_string();
        assert!(
            err.contains("preparePhase: unknown variant `Halfway`"),
            "{err}"
        );
    }

    #[test]
    fn entry_values_are_held_to_the_profiles_limits() {
        let parse_one = |e: Entry<TestPrepared>| {
            let cp = Checkpoint::new(DOC, "node-1", BTreeMap::from([(uid("u1"), e)]));
            parse(&cp.to_bytes(), "node-1")
        };
        assert!(parse_one(entry(7, vec!["counter-0".into()])).is_ok());
        for (bad, why) in [
            (entry(2_000_000, vec!["counter-0".into()]), "start"),
            (entry(1, vec!["counter-99".into()]), "counter-99"),
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
