//! Structured DRA for the fake device: from this driver's allocated devices and opaque
//! configs to the [`FakePrepared`] claim, without I/O.
//!
//! The scheduler allocated devices by name from the node's ResourceSlice (`fake-<index>`);
//! the opaque config carries `FakeClaimParameters` for what the slice cannot express
//! (`split`).

use std::collections::BTreeMap;

use fake_dra_api::params::{
    FakeClaimParameters, FakeClaimParametersSpec, MAX_COUNT, MAX_SPLIT, ModelSelector,
};
use kube::Resource;
use serde::Deserialize;

use super::FakePrepared;
use super::devices::Inventory;
use crate::profile::{DriverAllocation, ProfileError};

/// What every device name of ours starts with; the rest is the parent's index.
pub const DEVICE_NAME_PREFIX: &str = "fake-";

/// The ResourceSlice name of parent device `index`: a DNS label.
pub fn device_name(index: usize) -> String {
    format!("{DEVICE_NAME_PREFIX}{index}")
}

/// The parent index a device name stands for, if it is one of ours in canonical spelling
/// (`fake-0`, not `fake-00`).
pub fn device_index(name: &str) -> Option<usize> {
    let digits = name.strip_prefix(DEVICE_NAME_PREFIX)?;
    let index: usize = digits.parse().ok()?;
    (device_name(index) == name).then_some(index)
}

/// `FakeClaimParameters` fields as given, before defaults: `count` must only be checked
/// when the user wrote it, and a later config overrides only what it gives.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpaqueParameters {
    /// `spec.count`.
    pub count: Option<i64>,
    /// `spec.split`.
    pub split: Option<u32>,
    /// `spec.selector.model`.
    pub model: Option<String>,
}

/// The `spec` of opaque `FakeClaimParameters`. Wider integer types than the CRD's, so an
/// out-of-range value is reported with its value, not as a type error.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpec {
    count: Option<i64>,
    split: Option<i64>,
    selector: Option<ModelSelector>,
}

/// Parses and validates `opaque.parameters`: a `FakeClaimParameters` object of our
/// apiVersion. `field` is the path of `parameters`, for the errors.
pub fn parse_parameters(
    parameters: &serde_json::Value,
    field: &str,
) -> Result<OpaqueParameters, (String, String)> {
    let api_version = FakeClaimParameters::api_version(&());
    let kind = FakeClaimParameters::kind(&());
    let err = |sub: &str, reason: String| (format!("{field}{sub}"), reason);
    let Some(object) = parameters.as_object() else {
        return Err(err(
            "",
            format!(
                "must be a {kind} object ({{\"apiVersion\": \"{api_version}\", \"kind\": \"{kind}\", \"spec\": {{...}}}}), got {}",
                json_type(parameters)
            ),
        ));
    };
    match object.get("apiVersion").and_then(|v| v.as_str()) {
        Some(v) if v == api_version => {}
        other => {
            return Err(err(
                ".apiVersion",
                format!("must be {api_version:?}, got {}", shown(other)),
            ));
        }
    }
    match object.get("kind").and_then(|v| v.as_str()) {
        Some(k) if k == kind => {}
        other => {
            return Err(err(
                ".kind",
                format!("must be {kind:?}, got {}", shown(other)),
            ));
        }
    }
    let spec = match object.get("spec") {
        None | Some(serde_json::Value::Null) => return Ok(OpaqueParameters::default()),
        Some(spec) => spec,
    };
    let raw: RawSpec = serde_json::from_value(spec.clone())
        .map_err(|e| err(".spec", format!("is not a valid {kind} spec: {e}")))?;
    let in_range = |name: &str, got: Option<i64>, max: i32| match got {
        Some(v) if !(1..=i64::from(max)).contains(&v) => Err(err(
            &format!(".spec.{name}"),
            format!("must be between 1 and {max}, got {v}"),
        )),
        _ => Ok(()),
    };
    in_range("count", raw.count, MAX_COUNT)?;
    in_range("split", raw.split, MAX_SPLIT)?;
    // The CRD's own checks (model syntax, and the ranges again), on the CRD's types.
    let checked = FakeClaimParametersSpec {
        count: raw.count.and_then(|c| i32::try_from(c).ok()).unwrap_or(1),
        split: raw.split.and_then(|s| i32::try_from(s).ok()).unwrap_or(1),
        selector: raw.selector.clone(),
    };
    checked.validate().map_err(|e| err("", e.to_string()))?;
    Ok(OpaqueParameters {
        count: raw.count,
        split: raw.split.and_then(|s| u32::try_from(s).ok()),
        model: raw.selector.and_then(|s| s.model),
    })
}

fn json_type(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

fn shown(v: Option<&str>) -> String {
    v.map_or_else(|| "nothing".to_owned(), |s| format!("{s:?}"))
}

/// What preparing a claim with `allocation` means on `inventory`: our devices mapped back
/// to parent ids, and our opaque configs merged (class config first, then the claim's; a
/// later entry overrides the fields it gives; an entry with `requests` applies only to
/// those requests).
pub fn prepare(
    inventory: &Inventory,
    allocation: &DriverAllocation,
) -> Result<FakePrepared, ProfileError> {
    let node = &inventory.node_name;
    let mut parents: Vec<String> = Vec::with_capacity(allocation.devices.len());
    let mut per_request: BTreeMap<&str, usize> = BTreeMap::new();
    for d in &allocation.devices {
        let Some(parent) = device_index(&d.device).and_then(|i| inventory.devices.get(i)) else {
            return Err(ProfileError::new(
                "unknown_device",
                format!(
                    "device {:?} of request {:?} is not a device of node {node:?} (it has fake-0 to fake-{})",
                    d.device,
                    d.request,
                    inventory.devices.len().saturating_sub(1)
                ),
            ));
        };
        if !parents.contains(parent) {
            parents.push(parent.clone());
        }
        *per_request.entry(d.request.as_str()).or_default() += 1;
    }

    let mut parsed = Vec::with_capacity(allocation.configs.len());
    for c in &allocation.configs {
        let field = format!(
            "status.allocation.devices.config[{}].opaque.parameters",
            c.index
        );
        let params = parse_parameters(&c.parameters, &field).map_err(|(field, reason)| {
            ProfileError::new("bad_parameters", format!("{field}: {reason}"))
        })?;
        parsed.push((c, params));
    }

    let mut splits: BTreeMap<&str, u32> = BTreeMap::new();
    for (&request, &allocated) in &per_request {
        let mut effective = OpaqueParameters::default();
        for (config, p) in &parsed {
            if config.applies_to(request) {
                effective.count = p.count.or(effective.count);
                effective.split = p.split.or(effective.split);
                effective.model = p.model.clone().or(effective.model);
            }
        }
        if let Some(count) = effective.count
            && usize::try_from(count).ok() != Some(allocated)
        {
            return Err(ProfileError::new(
                "count_mismatch",
                format!(
                    "FakeClaimParameters spec.count is {count} for request {request:?}, but {allocated} device(s) of this driver are allocated for it; make spec.count match the request's count (or leave it out)"
                ),
            ));
        }
        if let Some(model) = effective.model
            && model != inventory.model
        {
            return Err(ProfileError::new(
                "model_mismatch",
                format!(
                    "FakeClaimParameters spec.selector.model is {model:?} for request {request:?}, but the devices of node {node:?} are {:?}",
                    inventory.model
                ),
            ));
        }
        splits.insert(request, effective.split.unwrap_or(1));
    }
    let mut distinct: Vec<u32> = splits.values().copied().collect();
    distinct.sort_unstable();
    distinct.dedup();
    let split = match distinct.as_slice() {
        [one] => *one,
        _ => {
            return Err(ProfileError::new(
                "split_differs",
                format!(
                    "requests resolve to different spec.split values ({}); this driver prepares all devices of a claim with one split",
                    splits
                        .iter()
                        .map(|(r, s)| format!("{r}={s}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
    };
    let admin_access = allocation.devices.iter().all(|d| d.admin_access);
    if !admin_access && allocation.devices.iter().any(|d| d.admin_access) {
        return Err(ProfileError::new(
            "admin_access_mixed",
            "the claim mixes requests with and without adminAccess; the fake device prepares a claim either for admin access or not: put them in separate claims",
        ));
    }
    Ok(FakePrepared {
        model: inventory.model.clone(),
        split,
        devices: parents,
        admin_access,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
