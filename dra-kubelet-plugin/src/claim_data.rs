//! A claim as the kubelet names it and as the scheduler allocated it, and why a device
//! profile refuses one.
//!
//! The uid is checked once where it enters — the gRPC request, the checkpoint — and is a
//! [`ClaimUid`] from then on: safe as a file name, a CDI device name and an env name part.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Longest claim uid accepted. Kubernetes uids are 36-character UUIDs; the bound only
/// keeps file names and env names sane.
pub const MAX_CLAIM_UID_LEN: usize = 128;

/// The uid a claim is known by: 1 to [`MAX_CLAIM_UID_LEN`] of `[A-Za-z0-9._-]`, starting
/// and ending with a letter or digit (the CDI device-name rule, which podman and containerd
/// enforce), without `..`, not `common` (the node-wide CDI device). No `:`: it separates a
/// claim's per-device CDI names.
///
/// ```
/// use dra_kubelet_plugin::claim::ClaimUid;
///
/// let uid = ClaimUid::parse("0b7c1c6e-2f55-4a53-9a1e-0a6a4c3e7c11").unwrap();
/// assert_eq!(uid.as_str().len(), 36);
/// let err = ClaimUid::parse("../etc").unwrap_err();
/// assert!(err.to_string().contains("may only contain letters, digits"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ClaimUid(String);

/// The CDI device every claim's containers get (node-wide edits); never a claim uid.
pub const COMMON_DEVICE: &str = "common";

/// Why a string is not a [`ClaimUid`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("claim uid {uid:?} is invalid: {reason}")]
#[non_exhaustive]
pub struct UidError {
    /// The uid (shortened when long).
    pub uid: String,
    /// What is wrong with it.
    pub reason: String,
}

impl ClaimUid {
    /// Checks `uid`.
    pub fn parse(uid: &str) -> Result<Self, UidError> {
        let fail = |reason: String| UidError {
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
    type Error = UidError;
    fn try_from(uid: String) -> Result<Self, UidError> {
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
#[non_exhaustive]
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
    pub fn new(uid: &str, namespace: &str, name: &str) -> Result<Self, UidError> {
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

/// A value shortened for an error message.
pub(crate) fn shorten(s: &str) -> String {
    shorten_to(s, 80)
}

/// `s` cut to at most `max` bytes (at a character boundary), saying how long it was.
pub(crate) fn shorten_to(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &s[..end], s.len())
}

/// One `status.allocation.devices.results[]` entry of this driver in this node's pool.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct AllocatedDevice {
    /// The request (or `request/subrequest`) it was allocated for.
    pub request: String,
    /// The device name in the pool (a [`crate::model::SliceDevice::name`]).
    pub device: String,
    /// The pool: the node's name, or `<node>/<name>` for a device the driver put in a
    /// pool of its own (`DeviceProfile::device_pool`); empty when not known.
    pub pool: String,
    /// `adminAccess`: the claim may use a device other claims hold (monitoring); it
    /// holds nothing itself.
    pub admin_access: bool,
    /// `shareID` of a device that allows multiple allocations: which share this is.
    pub share_id: Option<String>,
    /// `consumedCapacity` of such a device: what this share takes.
    pub consumed_capacity: BTreeMap<String, String>,
}

impl AllocatedDevice {
    /// `device` allocated for `request`.
    pub fn new(request: impl Into<String>, device: impl Into<String>) -> Self {
        Self {
            request: request.into(),
            device: device.into(),
            ..Self::default()
        }
    }

    /// With admin access.
    pub fn admin_access(mut self) -> Self {
        self.admin_access = true;
        self
    }

    /// Share `share_id` of a device that allows multiple allocations, taking `consumed`.
    pub fn share(
        mut self,
        share_id: impl Into<String>,
        consumed: BTreeMap<String, String>,
    ) -> Self {
        self.share_id = Some(share_id.into());
        self.consumed_capacity = consumed;
        self
    }

    /// The request name without a `/subrequest` (the prioritized list's choice): what
    /// containers name and what the kubelet matches `request_names` against
    /// (`resourceclaim.BaseRequestRef`).
    pub fn base_request(&self) -> &str {
        self.request.split('/').next().unwrap_or(&self.request)
    }
}

/// Where an opaque config entry came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ConfigSource {
    /// The DeviceClass.
    FromClass,
    /// The claim.
    FromClaim,
}

/// One opaque config entry of this driver, `C` once decoded.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ConfigEntry<C> {
    /// Where it came from; anything but `FromClass` counts as the claim's.
    pub source: ConfigSource,
    /// The requests it applies to; `None` means all.
    pub requests: Option<Vec<String>>,
    /// The decoded `opaque.parameters`.
    pub config: C,
    /// Its index in `status.allocation.devices.config`, for error messages.
    pub index: usize,
}

impl<C> ConfigEntry<C> {
    /// Entry `index` of `status.allocation.devices.config`, from `source`, applying to
    /// every request.
    pub fn new(source: ConfigSource, config: C, index: usize) -> Self {
        Self {
            source,
            requests: None,
            config,
            index,
        }
    }

    /// Applying to `requests` only.
    pub fn requests(mut self, requests: Vec<String>) -> Self {
        self.requests = Some(requests);
        self
    }

    /// Whether it applies to `request` (a `request/subrequest` result is named by its
    /// request too).
    pub fn applies_to(&self, request: &str) -> bool {
        let base = request.split('/').next().unwrap_or(request);
        // A config naming the subrequest applies to it; one naming the request, to all
        // of its subrequests.
        self.requests
            .as_deref()
            .is_none_or(|rs| rs.iter().any(|r| r == request || r == base))
    }

    /// `status.allocation.devices.config[<index>].opaque.parameters`.
    pub fn field(&self) -> String {
        format!(
            "status.allocation.devices.config[{}].opaque.parameters",
            self.index
        )
    }
}

/// What the scheduler allocated a claim from this driver on this node, with the
/// driver's opaque configs decoded as `C`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct DriverAllocation<C> {
    /// This driver's results in this node's pool, in the allocation's order (never empty).
    pub devices: Vec<AllocatedDevice>,
    /// This driver's opaque configs, class configs first (each source in the API's order).
    pub configs: Vec<ConfigEntry<C>>,
}

impl<C> DriverAllocation<C> {
    /// An allocation of `devices` with `configs` (class configs first).
    pub fn new(devices: Vec<AllocatedDevice>, configs: Vec<ConfigEntry<C>>) -> Self {
        Self { devices, configs }
    }

    /// The configs that apply to `request`, in the order they apply: a later one
    /// overrides an earlier one (the claim's over its class's).
    pub fn configs_for<'a>(&'a self, request: &'a str) -> impl Iterator<Item = &'a C> + 'a {
        self.configs
            .iter()
            .filter(move |c| c.applies_to(request))
            .map(|c| &c.config)
    }
}

/// Why a device profile refused a claim: a short label for the metrics and a message for
/// the kubelet (the plugin prefixes the claim).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
#[non_exhaustive]
pub struct ProfileError {
    /// A metrics label, e.g. `bad_parameters`.
    pub reason: &'static str,
    /// What is wrong, naming the field and the limit.
    pub message: String,
}

impl ProfileError {
    /// An error labelled `reason`.
    pub fn new(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
        }
    }
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
