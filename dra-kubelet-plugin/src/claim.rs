//! A claim as the kubelet names it, and everything that can go wrong with one claim.
//!
//! The uid is checked once where it enters — the gRPC request, the checkpoint — and is a
//! [`ClaimUid`] from then on: safe as a file name, a CDI device name and an env name part.
//! Every per-claim failure is one [`ClaimError`], whose [`ClaimError::reason`] labels the
//! metrics and whose message goes to the kubelet as the claim's error.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::profile::ProfileError;

/// Longest claim uid accepted. Kubernetes uids are 36-character UUIDs; the bound only
/// keeps file names and env names sane.
pub const MAX_CLAIM_UID_LEN: usize = 128;

/// The uid a claim is known by: 1 to [`MAX_CLAIM_UID_LEN`] of `[A-Za-z0-9._-]`, starting
/// and ending with a letter or digit (the CDI device-name rule, which podman and containerd
/// enforce), without `..`, not `common` (the node-wide CDI device). No `:`: it separates a
/// claim's per-device CDI names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ClaimUid(String);

/// The CDI device every claim's containers get (node-wide edits); never a claim uid.
pub const COMMON_DEVICE: &str = "common";

impl ClaimUid {
    /// Checks `uid`.
    pub fn parse(uid: &str) -> Result<Self, ClaimError> {
        let fail = |reason: String| ClaimError::InvalidUid {
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
        Ok(Self(uid.to_owned()))
    }

    /// The uid.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for ClaimUid {
    type Error = ClaimError;
    fn try_from(uid: String) -> Result<Self, ClaimError> {
        Self::parse(&uid)
    }
}

impl From<ClaimUid> for String {
    fn from(uid: ClaimUid) -> String {
        uid.0
    }
}

impl fmt::Display for ClaimUid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for ClaimUid {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// The claim as the kubelet names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRef {
    /// The key of everything the plugin stores for the claim.
    pub uid: ClaimUid,
    /// The claim's namespace.
    pub namespace: String,
    /// The claim's name.
    pub name: String,
}

impl ClaimRef {
    /// A claim from the kubelet's three strings; the uid is checked here.
    pub fn new(uid: &str, namespace: &str, name: &str) -> Result<Self, ClaimError> {
        Ok(Self {
            uid: ClaimUid::parse(uid)?,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        })
    }
}

/// `namespace/name (uid)`, how errors name a claim.
impl fmt::Display for ClaimRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{} ({})", self.namespace, self.name, self.uid)
    }
}

/// Why one claim could not be prepared or unprepared. The rest of the batch goes on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClaimError {
    /// The uid cannot be used (see [`ClaimUid`]).
    #[error("claim uid {uid:?} is invalid: {reason}")]
    InvalidUid {
        /// The uid (shortened when long).
        uid: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The same uid twice in one call, with different contents.
    #[error(
        "claim uid {0} appears more than once in the request, with different contents; nothing was done for it"
    )]
    Duplicate(String),
    /// The claim could not be read from the API (structured DRA).
    #[error("claim {claim}: {reason}")]
    Read {
        /// The claim, as `namespace/name (uid)`.
        claim: String,
        /// Why.
        reason: String,
    },
    /// The API's claim is another object than the kubelet meant.
    #[error(
        "claim {claim}: the ResourceClaim in the API has uid {found:?}; the kubelet asked for {wanted:?} (deleted and recreated?)"
    )]
    UidMismatch {
        /// The claim, as `namespace/name (uid)`.
        claim: String,
        /// The API's uid.
        found: String,
        /// The kubelet's uid.
        wanted: String,
    },
    /// No `status.allocation`.
    #[error("claim {claim}: not allocated (status.allocation is empty)")]
    NotAllocated {
        /// The claim, as `namespace/name (uid)`.
        claim: String,
    },
    /// Nothing allocated from this driver.
    #[error("claim {claim}: status.allocation.devices.results has no device of driver {driver:?}")]
    NoDevices {
        /// The claim, as `namespace/name (uid)`.
        claim: String,
        /// This driver.
        driver: String,
    },
    /// A device of this driver from another node's pool.
    #[error(
        "claim {claim}: device {device:?} of request {request:?} is allocated from pool {pool:?}; this is node {node:?} (pool {node:?})"
    )]
    WrongPool {
        /// The claim, as `namespace/name (uid)`.
        claim: String,
        /// The request it was allocated for.
        request: String,
        /// The device.
        device: String,
        /// Its pool.
        pool: String,
        /// This node.
        node: String,
    },
    /// What the device profile refused.
    #[error("claim {claim}: {source}")]
    Device {
        /// The claim, as `namespace/name (uid)`.
        claim: String,
        /// The profile's error.
        source: ProfileError,
    },
    /// A device another prepared claim holds.
    #[error(
        "claim {claim}: device {device} is already prepared for claim {holder}; unprepare that claim first"
    )]
    DeviceInUse {
        /// The claim, as `namespace/name (uid)`.
        claim: String,
        /// The device.
        device: String,
        /// The claim holding it.
        holder: String,
    },
    /// The claim is prepared with other devices than it now asks for.
    #[error(
        "claim {claim} is already prepared with devices {prepared:?}; it now asks for {requested:?}; unprepare it first"
    )]
    Changed {
        /// The claim, as `namespace/name (uid)`.
        claim: String,
        /// What the checkpoint holds.
        prepared: Vec<String>,
        /// What the request means.
        requested: Vec<String>,
    },
    /// A `DeviceFault` makes the call fail for this claim.
    #[error("claim {claim}: {message}")]
    Injected {
        /// The claim, as `namespace/name (uid)`.
        claim: String,
        /// The fault.
        fault: String,
        /// Its message.
        message: String,
    },
    /// A file could not be written or removed.
    #[error("claim {claim}: {action} {path}: {error}")]
    Io {
        /// The claim, as `namespace/name (uid)`.
        claim: String,
        /// What was being done.
        action: &'static str,
        /// The file.
        path: String,
        /// The OS error.
        error: String,
    },
}

impl ClaimError {
    /// A short label for the metrics, one per kind of failure.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::InvalidUid { .. } => "invalid_uid",
            Self::Duplicate(_) => "duplicate",
            Self::Read { .. } => "read_failed",
            Self::UidMismatch { .. } => "uid_mismatch",
            Self::NotAllocated { .. } => "not_allocated",
            Self::NoDevices { .. } => "no_devices",
            Self::WrongPool { .. } => "wrong_pool",
            Self::Device { source, .. } => source.reason,
            Self::DeviceInUse { .. } => "device_in_use",
            Self::Changed { .. } => "changed",
            Self::Injected { .. } => "injected",
            Self::Io { .. } => "io",
        }
    }
}

/// A value shortened for an error message.
pub fn shorten(s: &str) -> String {
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn uids_are_checked_once_and_kept() {
        let ok = ClaimUid::parse("0b7c1c6e-2f55-4a53-9a1e-0a6a4c3e7c11").unwrap();
        assert_eq!(ok.as_str(), "0b7c1c6e-2f55-4a53-9a1e-0a6a4c3e7c11");
        for (bad, why) in [
            ("", "empty"),
            ("../../etc/passwd", "may only contain"),
            ("a/b", "may only contain"),
            ("has:colon", "found ':'"),
            (".hidden", "start with"),
            ("ends.", "end with"),
            ("ends-", "end with"),
            ("ends_", "end with"),
            ("a..b", "\"..\""),
            ("common", "reserved"),
        ] {
            let err = ClaimUid::parse(bad).unwrap_err();
            assert!(err.to_string().contains(why), "{bad:?}: {err}");
            assert_eq!(err.reason(), "invalid_uid");
        }
        let long = "u".repeat(10_000);
        let err = ClaimUid::parse(&long).unwrap_err().to_string();
        assert!(err.contains("at most 128 characters, got 10000"), "{err}");
        assert!(err.len() < 300, "long values are shortened: {}", err.len());
    }

    #[test]
    fn uids_round_trip_through_serde_and_refuse_bad_ones() {
        let uid: ClaimUid = serde_json::from_str("\"abc-1\"").unwrap();
        assert_eq!(serde_json::to_string(&uid).unwrap(), "\"abc-1\"");
        assert!(serde_json::from_str::<ClaimUid>("\"../x\"").is_err());
    }

    #[test]
    fn a_claim_reads_as_namespace_name_uid() {
        let c = ClaimRef::new("u1", "ns", "c").unwrap();
        assert_eq!(c.to_string(), "ns/c (u1)");
    }
}
