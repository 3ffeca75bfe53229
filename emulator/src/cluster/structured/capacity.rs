//! Consumable capacity (DRAConsumableCapacity, KEP-5075): what a request takes of a
//! device's capacities under their request policies, and whether it fits beside what the
//! device's other shares take. The rules are upstream's
//! (k8s.io/dynamic-resource-allocation v0.37.2,
//! `structured/internal/incubating/consumable_capacity.go`):
//!
//! - a capacity the request does not name takes the policy's `default`, or all of it;
//! - a named amount below `validRange.min` becomes `min`, one between steps rounds up to
//!   the next `min + n·step`, one among `validValues` rounds up to the next valid value;
//! - the result must then satisfy the policy (not above `max`, on a step, a valid value),
//!   and with the device's other shares stay within its `value`;
//! - a request naming a capacity the device lacks does not match the device.
//!
//! Steps are counted in whole units, or in milli-units when DRAFractionalCapacityRange is
//! on (not on a default 1.37 cluster: `Gate::FractionalCapacityRange`) and `min`, `max`
//! and `step` are whole milli-units.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::{
    CapacityRequestPolicy, CapacityRequestPolicyRange, DeviceCapacity,
};

use crate::quantity::Quantity;

/// What one share takes of each of the device's capacities.
pub(super) type Consumption = BTreeMap<String, Quantity>;

/// Upstream's `errCapacityRequestNotRepresentable`: an error that ends the scheduling
/// attempt instead of skipping the device.
pub(super) const NOT_REPRESENTABLE: &str =
    "capacity request cannot be represented in the device's range arithmetic";

/// What a request with `requests` takes of `capacity` (every capacity of the device),
/// `Ok(None)` when the device cannot serve it at all, `Err` (naming the capacity) when
/// the request cannot be computed with.
pub(super) fn consumption(
    requests: &BTreeMap<String, Quantity>,
    capacity: &BTreeMap<String, DeviceCapacity>,
    fractional: bool,
) -> Result<Option<Consumption>, String> {
    if requests.keys().any(|name| !capacity.contains_key(name)) {
        return Ok(None);
    }
    let mut taken = Consumption::new();
    for (name, cap) in capacity {
        let consumed = consumed(requests.get(name).copied(), cap, fractional)
            .map_err(|e| format!("capacity {name:?}: {e}"))?;
        if consumed.nanos() < 0 {
            return Err(format!("capacity {name:?}: capacity value is negative"));
        }
        taken.insert(name.clone(), consumed);
    }
    let within_policy = taken.iter().all(|(name, consumed)| {
        capacity
            .get(name)
            .is_none_or(|cap| !violates(*consumed, cap.request_policy.as_ref(), fractional))
    });
    Ok(within_policy.then_some(taken))
}

/// Whether `taken` fits the device beside `already` (nano-units per capacity: what its
/// other shares take).
pub(super) fn fits(
    taken: &Consumption,
    already: &BTreeMap<String, i128>,
    capacity: &BTreeMap<String, DeviceCapacity>,
) -> bool {
    taken.iter().all(|(name, q)| {
        let value = capacity.get(name).and_then(|c| parse(&c.value.0));
        let before = already.get(name).copied().unwrap_or(0);
        value.is_some_and(|v| before + q.nanos() <= v.nanos())
    })
}

fn parse(text: &str) -> Option<Quantity> {
    Quantity::parse(text)
}

/// `calculateConsumedCapacity`.
fn consumed(
    requested: Option<Quantity>,
    cap: &DeviceCapacity,
    fractional: bool,
) -> Result<Quantity, String> {
    let policy = cap.request_policy.as_ref();
    let Some(requested) = requested else {
        let default = policy
            .and_then(|p| p.default.as_ref())
            .unwrap_or(&cap.value);
        return parse(&default.0).ok_or_else(|| format!("{:?} is no quantity", default.0));
    };
    let Some(policy) = policy else {
        return Ok(requested);
    };
    if let Some(range) = &policy.valid_range {
        return round_up_range(requested, range, fractional);
    }
    if let Some(values) = &policy.valid_values {
        return Ok(values
            .iter()
            .filter_map(|v| parse(&v.0))
            .find(|v| requested.nanos() <= v.nanos())
            .unwrap_or(requested));
    }
    Ok(requested)
}

/// A range's bounds, parsed.
struct Range {
    min: Quantity,
    max: Option<Quantity>,
    step: Option<Quantity>,
}

impl Range {
    fn of(range: &CapacityRequestPolicyRange) -> Option<Self> {
        Some(Self {
            min: parse(&range.min.0)?,
            max: match &range.max {
                Some(q) => Some(parse(&q.0)?),
                None => None,
            },
            step: match &range.step {
                Some(q) => Some(parse(&q.0)?),
                None => None,
            },
        })
    }

    /// `useMilli`: every bound a whole number of milli-units, the step at least 1m.
    fn counts_milli(&self, fractional: bool) -> bool {
        fractional
            && [Some(self.min), self.max, self.step]
                .into_iter()
                .flatten()
                .all(Quantity::is_exact_milli)
            && self.step.is_none_or(|s| s.milli_value() >= 1)
    }
}

/// `roundUpRange`.
fn round_up_range(
    requested: Quantity,
    range: &CapacityRequestPolicyRange,
    fractional: bool,
) -> Result<Quantity, String> {
    let range = Range::of(range).ok_or("the device's validRange is not made of quantities")?;
    if requested.nanos() < range.min.nanos() {
        return Ok(range.min);
    }
    let Some(step) = range.step else {
        return Ok(requested);
    };
    let (unit, requested_units, step_units, min_units) = if range.counts_milli(fractional) {
        if !requested.is_exact_milli() {
            return Err(format!(
                "{NOT_REPRESENTABLE}: request {requested} is not a representable milli value"
            ));
        }
        (
            1_000_000,
            requested.milli_value(),
            step.milli_value(),
            range.min.milli_value(),
        )
    } else {
        if requested.value() > i128::from(i64::MAX) {
            return Err(format!(
                "{NOT_REPRESENTABLE}: request {requested} exceeds MaxInt64"
            ));
        }
        (
            1_000_000_000,
            requested.value(),
            step.value(),
            range.min.value(),
        )
    };
    if step_units <= 0 {
        return Err(format!("{NOT_REPRESENTABLE}: step {step} is not positive"));
    }
    let added = requested_units - min_units;
    let steps = added / step_units + i128::from(added % step_units != 0);
    let rounded = min_units + step_units * steps;
    if rounded > i128::from(i64::MAX) {
        return Err(format!(
            "{NOT_REPRESENTABLE}: rounding request {requested} up to the next step passes MaxInt64"
        ));
    }
    Ok(Quantity::from_nanos(rounded * unit, step.format()))
}

/// `violatesPolicy`.
fn violates(consumed: Quantity, policy: Option<&CapacityRequestPolicy>, fractional: bool) -> bool {
    let Some(policy) = policy else {
        return false;
    };
    if policy
        .default
        .as_ref()
        .and_then(|d| parse(&d.0))
        .is_some_and(|d| d.nanos() == consumed.nanos())
    {
        return false;
    }
    if let Some(range) = &policy.valid_range {
        let Some(range) = Range::of(range) else {
            return true;
        };
        if range.max.is_some_and(|max| consumed.nanos() > max.nanos()) {
            return true;
        }
        let Some(step) = range.step else {
            return false;
        };
        let (requested, step, min) = if range.counts_milli(fractional) {
            if !consumed.is_exact_milli() {
                return true;
            }
            (
                consumed.milli_value(),
                step.milli_value(),
                range.min.milli_value(),
            )
        } else {
            (consumed.value(), step.value(), range.min.value())
        };
        return step != 0 && (requested - min) % step != 0;
    }
    match &policy.valid_values {
        Some(values) if !values.is_empty() => !values
            .iter()
            .filter_map(|v| parse(&v.0))
            .any(|v| v.nanos() == consumed.nanos()),
        _ => false,
    }
}

/// The consumption as `consumedCapacity` writes it.
pub(super) fn as_written(taken: &Consumption) -> BTreeMap<String, String> {
    taken
        .iter()
        .map(|(name, q)| (name.clone(), q.to_string()))
        .collect()
}

/// A request's capacity amounts, parsed; `Err` names one that is no quantity.
pub(super) fn requested(
    requests: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> Result<BTreeMap<String, Quantity>, String> {
    requests
        .into_iter()
        .flatten()
        .map(|(name, q)| {
            parse(&q.0)
                .map(|parsed| (name.clone(), parsed))
                .ok_or_else(|| format!("capacity {name:?}: {:?} is no quantity", q.0))
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn capacity(v: serde_json::Value) -> BTreeMap<String, DeviceCapacity> {
        serde_json::from_value(v).unwrap()
    }

    fn take(
        requests: &[(&str, &str)],
        cap: &BTreeMap<String, DeviceCapacity>,
        fractional: bool,
    ) -> Result<Option<BTreeMap<String, String>>, String> {
        let requests = requests
            .iter()
            .map(|(n, q)| (n.to_string(), Quantity::parse(q).unwrap()))
            .collect();
        Ok(consumption(&requests, cap, fractional)?.map(|c| as_written(&c)))
    }

    fn one(name: &str, value: &str) -> Option<BTreeMap<String, String>> {
        Some([(name.to_string(), value.to_string())].into())
    }

    #[test]
    fn a_range_rounds_up_to_min_and_to_the_next_step() {
        let gpu = capacity(json!({"memory": {"value": "80Gi", "requestPolicy": {
            "default": "10Gi", "validRange": {"min": "1Gi", "step": "1Gi"}}}}));
        assert_eq!(take(&[], &gpu, true).unwrap(), one("memory", "10Gi"));
        assert_eq!(
            take(&[("memory", "100Mi")], &gpu, true).unwrap(),
            one("memory", "1Gi")
        );
        assert_eq!(
            take(&[("memory", "1.5Gi")], &gpu, true).unwrap(),
            one("memory", "2Gi")
        );
        assert_eq!(
            take(&[("memory", "80Gi")], &gpu, true).unwrap(),
            one("memory", "80Gi")
        );
        assert_eq!(
            take(&[("cores", "1")], &gpu, true).unwrap(),
            None,
            "no such capacity"
        );
    }

    #[test]
    fn fractional_ranges_count_milli_units_with_the_gate() {
        let nic = capacity(json!({"bandwidth": {"value": "10", "requestPolicy": {
            "default": "500m", "validRange": {"min": "250m", "max": "2", "step": "250m"}}}}));
        assert_eq!(
            take(&[("bandwidth", "300m")], &nic, true).unwrap(),
            one("bandwidth", "500m")
        );
        assert_eq!(
            take(&[("bandwidth", "1")], &nic, true).unwrap(),
            one("bandwidth", "1")
        );
        // Below the minimum step: the minimum.
        assert_eq!(
            take(&[("bandwidth", "1m")], &nic, true).unwrap(),
            one("bandwidth", "250m")
        );
        assert_eq!(
            take(&[("bandwidth", "3")], &nic, true).unwrap(),
            None,
            "above max"
        );
        let err = take(&[("bandwidth", "300001u")], &nic, true).unwrap_err();
        assert!(err.contains(NOT_REPRESENTABLE), "{err}");
        // Without it whole units: 300m, 250m and the step read as 1 (`Value()` rounds up).
        assert_eq!(
            take(&[("bandwidth", "300m")], &nic, false).unwrap(),
            one("bandwidth", "1")
        );
    }

    #[test]
    fn valid_values_round_up_to_the_next_one() {
        let cap = capacity(json!({"slots": {"value": "8", "requestPolicy": {
            "default": "1", "validValues": ["1", "2", "4"]}}}));
        assert_eq!(
            take(&[("slots", "3")], &cap, true).unwrap(),
            one("slots", "4")
        );
        assert_eq!(take(&[("slots", "5")], &cap, true).unwrap(), None);
    }

    #[test]
    fn shares_fit_within_the_value() {
        let gpu = capacity(json!({"memory": {"value": "80Gi"}}));
        let half = consumption(
            &[("memory".to_string(), Quantity::parse("40Gi").unwrap())].into(),
            &gpu,
            true,
        )
        .unwrap()
        .unwrap();
        let mut already = BTreeMap::new();
        assert!(fits(&half, &already, &gpu));
        already.insert("memory".to_string(), half["memory"].nanos());
        assert!(fits(&half, &already, &gpu));
        already.insert("memory".to_string(), half["memory"].nanos() + 1);
        assert!(!fits(&half, &already, &gpu));
    }
}
