//! Structured DRA for the fake device: from this driver's allocated devices and opaque
//! configs to the [`FakePrepared`] claim, without I/O.
//!
//! The scheduler allocated devices by name from the node's ResourceSlice (`fake-<index>`);
//! the opaque config carries `FakeClaimParameters` for what the slice cannot express
//! (`split`).

use std::collections::BTreeMap;

use dra_kubelet_plugin::claim::{DriverAllocation, ProfileError};
use dra_kubelet_plugin::{FieldError, OpaqueConfig};
use fake_dra_api::params::{FakeClaimParametersSpec, MAX_COUNT, MAX_SPLIT, ModelSelector};
use serde::Deserialize;

use super::FakePrepared;
use super::devices::Inventory;

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

/// Opaque `FakeClaimParameters`: the CRD's object without metadata (other top-level
/// fields are ignored, as the CRD's `metadata` would be).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct FakeConfig {
    #[serde(default)]
    spec: Option<RawSpec>,
}

/// The `spec` of opaque `FakeClaimParameters`. Wider integer types than the CRD's, so an
/// out-of-range value is reported with its value, not as a type error.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpec {
    count: Option<i64>,
    split: Option<i64>,
    selector: Option<ModelSelector>,
}

/// `fake.resource.3-shake.com/v1alpha1`, `FakeClaimParameters` (a test holds them to the
/// CRD's).
pub const CONFIG_API_VERSION: &str = "fake.resource.3-shake.com/v1alpha1";
/// The kind of the opaque config.
pub const CONFIG_KIND: &str = "FakeClaimParameters";

impl OpaqueConfig for FakeConfig {
    const TYPE: Option<(&'static str, &'static str)> = Some((CONFIG_API_VERSION, CONFIG_KIND));

    /// The CRD's limits, on what was given.
    fn validate(&self) -> Result<(), FieldError> {
        let Some(raw) = &self.spec else {
            return Ok(());
        };
        let in_range = |name: &str, got: Option<i64>, max: i32| match got {
            Some(v) if !(1..=i64::from(max)).contains(&v) => Err(FieldError::new(
                format!("spec.{name}"),
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
        checked
            .validate()
            .map_err(|e| FieldError::new("", e.to_string()))
    }
}

impl FakeConfig {
    /// The fields as given.
    pub fn parameters(&self) -> OpaqueParameters {
        let Some(raw) = &self.spec else {
            return OpaqueParameters::default();
        };
        OpaqueParameters {
            count: raw.count,
            split: raw.split.and_then(|s| u32::try_from(s).ok()),
            model: raw.selector.clone().and_then(|s| s.model),
        }
    }
}

/// What preparing a claim with `allocation` means on `inventory`: our devices mapped back
/// to parent ids, and our opaque configs merged (class config first, then the claim's; a
/// later entry overrides the fields it gives; an entry with `requests` applies only to
/// those requests).
pub fn prepare(
    inventory: &Inventory,
    allocation: &DriverAllocation<FakeConfig>,
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

    let mut splits: BTreeMap<&str, u32> = BTreeMap::new();
    for (&request, &allocated) in &per_request {
        let mut effective = OpaqueParameters::default();
        for p in allocation.configs_for(request).map(FakeConfig::parameters) {
            effective.count = p.count.or(effective.count);
            effective.split = p.split.or(effective.split);
            effective.model = p.model.or(effective.model);
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
