//! The allocation handle: what the controller writes into a claim's
//! `status.allocation.resourceHandles[].data` and the kubelet plugin parses in
//! `NodePrepareResources`.
//!
//! ```json
//! {"apiVersion":"fake.resource.3-shake.com/v1alpha1","devices":["FAKE-…","FAKE-…"],
//!  "kind":"AllocationHandle","model":"fake-x","nodeName":"node-1","split":2}
//! ```
//!
//! - `apiVersion` + `kind` identify the format, as in any Kubernetes object, so a reader
//!   can tell "not ours" from "ours, but a version I don't know". Any change to the
//!   fields means a new `apiVersion`; this reader accepts only
//!   [`SUPPORTED_API_VERSIONS`].
//! - `nodeName`: the node the devices are on; the plugin refuses a handle for another node.
//! - `model`: the model of all the devices (a claim never mixes models).
//! - `split`: children per parent device.
//! - `devices`: the parent device ids, `FAKE-<uuid>`, in the order their children get
//!   `FAKE_DEVICE_<i>` numbers.
//!
//! Unknown fields are rejected: within a version the fields are fixed, so an unknown
//! field means a writer newer than this reader, whose meaning we cannot honour.
//!
//! [`AllocationHandle::to_json`] writes keys in sorted order with no whitespace, so the
//! same allocation always gives the same bytes and rewriting it is a no-op update.

use std::collections::HashSet;

use serde_json::{Map, Value, json};

use crate::params::{MAX_COUNT, MAX_SPLIT, validate_model};
use crate::upstream::v1alpha2::MAX_RESOURCE_HANDLE_DATA_BYTES;

/// The `apiVersion` this crate writes.
pub const API_VERSION: &str = "fake.resource.3-shake.com/v1alpha1";
/// The `kind` of the document.
pub const KIND: &str = "AllocationHandle";
/// Every `apiVersion` [`AllocationHandle::parse`] understands.
pub const SUPPORTED_API_VERSIONS: &[&str] = &[API_VERSION];

/// Largest handle in bytes: what the API server accepts in `resourceHandles[].data`.
pub const MAX_HANDLE_BYTES: usize = MAX_RESOURCE_HANDLE_DATA_BYTES;

/// Longest node name: a DNS subdomain.
pub const MAX_NODE_NAME_LEN: usize = 253;

/// Every device id starts with this.
pub const DEVICE_ID_PREFIX: &str = "FAKE-";

/// Length of a device id: the prefix and a hyphenated UUID.
pub const DEVICE_ID_LEN: usize = DEVICE_ID_PREFIX.len() + 36;

const FIELDS: &[&str] = &[
    "apiVersion",
    "kind",
    "nodeName",
    "model",
    "split",
    "devices",
];

/// Which devices a claim got, on which node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocationHandle {
    /// The node the devices are on.
    pub node_name: String,
    /// The model of every device.
    pub model: String,
    /// Children per parent device, 1..=[`MAX_SPLIT`].
    pub split: u32,
    /// Parent device ids, 1..=[`MAX_COUNT`] of them, distinct.
    pub devices: Vec<String>,
}

/// Why a handle was refused. Each message names the problem, for the per-claim error the
/// plugin returns to the kubelet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandleError {
    /// Nothing but whitespace.
    #[error("allocation handle is empty")]
    Empty,
    /// Longer than the API allows; checked before parsing.
    #[error("allocation handle is {size} bytes, more than the {max} allowed")]
    TooLarge {
        /// The input's size in bytes.
        size: usize,
        /// [`MAX_HANDLE_BYTES`].
        max: usize,
    },
    /// Not JSON at all.
    #[error("allocation handle is not JSON: {message} at line {line} column {column}")]
    NotJson {
        /// serde_json's description.
        message: String,
        /// 1-based line of the problem.
        line: usize,
        /// 1-based column of the problem.
        column: usize,
    },
    /// JSON, but not an object.
    #[error("allocation handle must be a JSON object, got {0}")]
    NotAnObject(&'static str),
    /// An object without `apiVersion`: probably not an allocation handle at all.
    #[error("allocation handle has no apiVersion; supported: {}", SUPPORTED_API_VERSIONS.join(", "))]
    MissingVersion,
    /// An `apiVersion` this reader does not know.
    #[error("allocation handle apiVersion {found:?} is not supported; supported: {}", SUPPORTED_API_VERSIONS.join(", "))]
    UnsupportedVersion {
        /// What the document says.
        found: String,
    },
    /// A required field is absent.
    #[error("allocation handle has no {0}")]
    MissingField(&'static str),
    /// A field this version does not have.
    #[error("allocation handle has unknown field {0:?}; known fields: {known}", known = FIELDS.join(", "))]
    UnknownField(String),
    /// A field of the wrong type or with a bad value.
    #[error("allocation handle field {field}: {reason}")]
    InvalidField {
        /// The field's name.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// `devices` is empty: a claim always gets at least one device.
    #[error("allocation handle lists no devices")]
    NoDevices,
    /// More devices than one claim may have.
    #[error("allocation handle lists {count} devices, more than the {max} a claim may have")]
    TooManyDevices {
        /// How many it lists.
        count: usize,
        /// [`MAX_COUNT`].
        max: i32,
    },
    /// The same device twice: it would be prepared twice for one claim.
    #[error("allocation handle lists device {0} more than once")]
    DuplicateDevice(String),
    /// A device id not of the form `FAKE-<uuid>`.
    #[error("allocation handle device id {0:?} is not of the form FAKE-<uuid>")]
    InvalidDeviceId(String),
    /// `split` outside 1..=[`MAX_SPLIT`].
    #[error("allocation handle split must be between 1 and {max}, got {split}")]
    SplitOutOfRange {
        /// What the document says.
        split: i128,
        /// [`MAX_SPLIT`].
        max: i32,
    },
}

impl AllocationHandle {
    /// The handle as the compact JSON document stored in the claim. Does not check the
    /// values; call [`validate`](Self::validate) first for a handle built from input.
    pub fn to_json(&self) -> String {
        // Built as a Value, whose Display cannot fail and whose keys are sorted.
        json!({
            "apiVersion": API_VERSION,
            "kind": KIND,
            "nodeName": self.node_name,
            "model": self.model,
            "split": self.split,
            "devices": self.devices,
        })
        .to_string()
    }

    /// Parses and validates a handle.
    pub fn parse(input: &str) -> Result<Self, HandleError> {
        if input.len() > MAX_HANDLE_BYTES {
            return Err(HandleError::TooLarge {
                size: input.len(),
                max: MAX_HANDLE_BYTES,
            });
        }
        if input.trim().is_empty() {
            return Err(HandleError::Empty);
        }
        let value: Value = serde_json::from_str(input).map_err(|e| HandleError::NotJson {
            message: strip_position(&e),
            line: e.line(),
            column: e.column(),
        })?;
        let mut map = match value {
            Value::Object(map) => map,
            other => return Err(HandleError::NotAnObject(json_type(&other))),
        };

        match map.remove("apiVersion") {
            None => return Err(HandleError::MissingVersion),
            Some(Value::String(v)) if SUPPORTED_API_VERSIONS.contains(&v.as_str()) => {}
            Some(Value::String(found)) => return Err(HandleError::UnsupportedVersion { found }),
            Some(other) => {
                return Err(HandleError::UnsupportedVersion {
                    found: other.to_string(),
                });
            }
        }
        let kind = take_string(&mut map, "kind")?;
        if kind != KIND {
            return Err(HandleError::InvalidField {
                field: "kind",
                reason: format!("must be {KIND:?}, got {kind:?}"),
            });
        }
        let node_name = take_string(&mut map, "nodeName")?;
        let model = take_string(&mut map, "model")?;
        let split = take_split(&mut map)?;
        let devices = take_devices(&mut map)?;
        if let Some(unknown) = map.keys().next() {
            return Err(HandleError::UnknownField(unknown.clone()));
        }

        let handle = Self {
            node_name,
            model,
            split,
            devices,
        };
        handle.validate()?;
        Ok(handle)
    }

    /// Checks the values: what [`parse`](Self::parse) enforces beyond the JSON shape. The
    /// controller calls it before writing a handle.
    pub fn validate(&self) -> Result<(), HandleError> {
        validate_node_name(&self.node_name).map_err(|reason| HandleError::InvalidField {
            field: "nodeName",
            reason,
        })?;
        validate_model(&self.model).map_err(|reason| HandleError::InvalidField {
            field: "model",
            reason,
        })?;
        if !(1..=MAX_SPLIT.unsigned_abs()).contains(&self.split) {
            return Err(HandleError::SplitOutOfRange {
                split: i128::from(self.split),
                max: MAX_SPLIT,
            });
        }
        if self.devices.is_empty() {
            return Err(HandleError::NoDevices);
        }
        if self.devices.len() > MAX_COUNT.unsigned_abs() as usize {
            return Err(HandleError::TooManyDevices {
                count: self.devices.len(),
                max: MAX_COUNT,
            });
        }
        let mut seen = HashSet::with_capacity(self.devices.len());
        for id in &self.devices {
            if !is_valid_device_id(id) {
                return Err(HandleError::InvalidDeviceId(id.clone()));
            }
            if !seen.insert(id.as_str()) {
                return Err(HandleError::DuplicateDevice(id.clone()));
            }
        }
        Ok(())
    }

    /// Devices the containers see: every parent's children.
    pub fn child_count(&self) -> usize {
        self.devices.len() * self.split as usize
    }
}

/// Whether `id` is `FAKE-` followed by a hyphenated UUID (hex digits in either case).
pub fn is_valid_device_id(id: &str) -> bool {
    let Some(uuid) = id.strip_prefix(DEVICE_ID_PREFIX) else {
        return false;
    };
    uuid.len() == 36
        && uuid.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// A node name is a DNS subdomain: 1 to 253 of `[a-z0-9.-]`, alphanumeric at both ends.
fn validate_node_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("must not be empty".to_string());
    }
    if name.len() > MAX_NODE_NAME_LEN {
        return Err(format!(
            "must be at most {MAX_NODE_NAME_LEN} characters, got {}",
            name.len()
        ));
    }
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let starts_and_ends_ok = name.starts_with(ok_char) && name.ends_with(ok_char);
    if !starts_and_ends_ok || !name.chars().all(|c| ok_char(c) || c == '-' || c == '.') {
        return Err(format!(
            "{name:?} is not a DNS subdomain (lowercase letters, digits, '-' and '.')"
        ));
    }
    Ok(())
}

fn take_string(map: &mut Map<String, Value>, field: &'static str) -> Result<String, HandleError> {
    match map.remove(field) {
        None => Err(HandleError::MissingField(field)),
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(wrong_type(field, "a string", &other)),
    }
}

fn take_split(map: &mut Map<String, Value>) -> Result<u32, HandleError> {
    let value = map
        .remove("split")
        .ok_or(HandleError::MissingField("split"))?;
    let out_of_range = |split| HandleError::SplitOutOfRange {
        split,
        max: MAX_SPLIT,
    };
    if let Some(split) = value.as_u64() {
        u32::try_from(split).map_err(|_| out_of_range(i128::from(split)))
    } else if let Some(split) = value.as_i64() {
        Err(out_of_range(i128::from(split)))
    } else {
        Err(wrong_type("split", "a positive integer", &value))
    }
}

fn take_devices(map: &mut Map<String, Value>) -> Result<Vec<String>, HandleError> {
    let items = match map.remove("devices") {
        None => return Err(HandleError::MissingField("devices")),
        Some(Value::Array(items)) => items,
        Some(other) => return Err(wrong_type("devices", "an array of strings", &other)),
    };
    items
        .into_iter()
        .map(|item| match item {
            Value::String(s) => Ok(s),
            other => Err(wrong_type("devices", "an array of strings", &other)),
        })
        .collect()
}

fn wrong_type(field: &'static str, expected: &str, got: &Value) -> HandleError {
    HandleError::InvalidField {
        field,
        reason: format!("must be {expected}, got {}", json_type(got)),
    }
}

fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// serde_json appends " at line L column C" to its messages; we report those separately.
fn strip_position(e: &serde_json::Error) -> String {
    let full = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    full.strip_suffix(&suffix).unwrap_or(&full).to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
