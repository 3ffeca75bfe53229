//! Everything that can go wrong with one claim: one [`ClaimError`], whose
//! [`ClaimError::reason`] labels the metrics and whose message goes to the kubelet as the
//! claim's error. The rest of the batch goes on.

use crate::cdi_spec::SpecError;
use crate::claim_data::{ProfileError, UidError};

/// Why one claim could not be prepared or unprepared. The rest of the batch goes on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClaimError {
    /// The uid cannot be used (see [`crate::claim_data::ClaimUid`]).
    #[error(transparent)]
    InvalidUid(#[from] UidError),
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
    /// A name that becomes a path (device metadata files) is not what the API allows, so
    /// no file can be named after it.
    #[error(
        "claim {claim}: device metadata: the claim's {field} {value:?} is not a DNS label as the API requires, so it names no metadata file"
    )]
    NotAPathName {
        /// The claim, as `namespace/name (uid)`.
        claim: String,
        /// `namespace`, `name` or `request`.
        field: &'static str,
        /// The name, shortened.
        value: String,
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
        "claim {claim}: device {device:?} of request {request:?} is allocated from pool {pool:?}; this is node {node:?} (pools {node:?} and {node:?}/…)"
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
    /// The fault hook refused the call for this claim (`hook::Refusal`).
    #[error("claim {claim}: {message}")]
    Injected {
        /// The claim, as `namespace/name (uid)`.
        claim: String,
        /// Who refused (`hook::Refusal::by`).
        fault: String,
        /// Its message.
        message: String,
    },
    /// The claim's CDI devices cannot be written as the profile gave them.
    #[error("claim {claim}: {source}")]
    Cdi {
        /// The claim, as `namespace/name (uid)`.
        claim: String,
        /// What is wrong with them (boxed: the other variants are small).
        source: Box<SpecError>,
    },
    /// Another call is preparing or unpreparing the same claim right now.
    #[error(
        "claim {claim}: another call is preparing or unpreparing it right now; nothing was done, ask again"
    )]
    Busy {
        /// The claim, as `namespace/name (uid)`.
        claim: String,
    },
    /// The driver's device work failed, panicked or ran past its deadline.
    #[error("claim {claim}: {step}: {message}{after}")]
    DeviceWork {
        /// The claim, as `namespace/name (uid)`.
        claim: String,
        /// `prepare_devices`, `unprepare_devices` or `roll_back_devices`.
        step: &'static str,
        /// The driver's reason, or `timeout`, `panic`.
        reason: &'static str,
        /// What happened.
        message: String,
        /// What was done about it (the rollback's outcome), or empty.
        after: String,
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
            Self::InvalidUid(_) => "invalid_uid",
            Self::Duplicate(_) => "duplicate",
            Self::Read { .. } => "read_failed",
            Self::NotAPathName { .. } => "not_a_path_name",
            Self::UidMismatch { .. } => "uid_mismatch",
            Self::NotAllocated { .. } => "not_allocated",
            Self::NoDevices { .. } => "no_devices",
            Self::WrongPool { .. } => "wrong_pool",
            Self::Device { source, .. } => source.reason,
            Self::DeviceInUse { .. } => "device_in_use",
            Self::Changed { .. } => "changed",
            Self::Injected { .. } => "injected",
            Self::Cdi { source, .. } => source.reason(),
            Self::Busy { .. } => "busy",
            Self::DeviceWork { reason, .. } => reason,
            Self::Io { .. } => "io",
        }
    }
}
