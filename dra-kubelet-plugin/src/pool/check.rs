//! Each device and counter set on its own against the API's limits, before any packing:
//! what no slice could hold is refused, naming the device or set, the field and the limit.

use std::collections::BTreeSet;

use super::{Desired, Limits, MAX_ATTRIBUTES_AND_CAPACITIES, PackError};
use crate::model::SliceDevice;
use crate::quantity::Quantity;

pub(super) fn over(
    what: &'static str,
    name: &str,
    count: usize,
    items: &'static str,
    max: usize,
) -> Result<(), PackError> {
    if count > max {
        return Err(PackError::OverLimit {
            what,
            name: name.to_owned(),
            count,
            items,
            max,
        });
    }
    Ok(())
}

/// Every amount of a device, with its field.
fn device_quantities(d: &SliceDevice) -> Vec<(String, &Quantity)> {
    let mut all = Vec::new();
    for (name, c) in &d.capacity {
        all.push((format!("capacity.{name}.value"), &c.value));
        if let Some(p) = &c.request_policy {
            let field = format!("capacity.{name}.requestPolicy");
            all.extend(p.default.iter().map(|q| (format!("{field}.default"), q)));
            all.extend(
                p.valid_values
                    .iter()
                    .enumerate()
                    .map(|(i, q)| (format!("{field}.validValues[{i}]"), q)),
            );
            if let Some(r) = &p.valid_range {
                all.push((format!("{field}.validRange.min"), &r.min));
                all.extend(r.max.iter().map(|q| (format!("{field}.validRange.max"), q)));
                all.extend(
                    r.step
                        .iter()
                        .map(|q| (format!("{field}.validRange.step"), q)),
                );
            }
        }
    }
    for (i, c) in d.consumes_counters.iter().enumerate() {
        all.extend(
            c.counters
                .iter()
                .map(|(k, q)| (format!("consumesCounters[{i}].counters.{k}.value"), q)),
        );
    }
    all
}

/// Refuses the first amount that is not a quantity.
fn check_quantities(
    what: &'static str,
    name: &str,
    amounts: Vec<(String, &Quantity)>,
) -> Result<(), PackError> {
    for (field, q) in amounts {
        q.check().map_err(|source| PackError::NotAQuantity {
            what,
            name: name.to_owned(),
            field,
            source,
        })?;
    }
    Ok(())
}

/// Checks every device and counter set on its own against `limits`.
pub(super) fn check_items(desired: &Desired, limits: Limits) -> Result<(), PackError> {
    let mut names = BTreeSet::new();
    for d in &desired.devices {
        if !names.insert(d.name.as_str()) {
            return Err(PackError::Duplicate {
                what: "device",
                name: d.name.clone(),
            });
        }
        check_quantities("device", &d.name, device_quantities(d))?;
        let count = d.attributes.len() + d.capacity.len();
        if count > MAX_ATTRIBUTES_AND_CAPACITIES {
            return Err(PackError::TooManyAttributes {
                device: d.name.clone(),
                count,
            });
        }
        over(
            "device",
            &d.name,
            d.consumes_counters.len(),
            "consumesCounters entries",
            limits.consumptions_per_device,
        )?;
        over("device", &d.name, d.taints.len(), "taints", limits.taints)?;
        for c in &d.consumes_counters {
            let Some(set) = desired
                .counter_sets
                .iter()
                .find(|s| s.name == c.counter_set)
            else {
                return Err(PackError::UnknownCounterSet {
                    device: d.name.clone(),
                    set: c.counter_set.clone(),
                });
            };
            over(
                "device",
                &d.name,
                c.counters.len(),
                "counters in one consumesCounters entry",
                limits.counters_per_set,
            )?;
            if let Some(counter) = c.counters.keys().find(|k| !set.counters.contains_key(*k)) {
                return Err(PackError::UnknownCounter {
                    device: d.name.clone(),
                    set: set.name.clone(),
                    counter: counter.clone(),
                });
            }
        }
    }
    let mut sets = BTreeSet::new();
    for s in &desired.counter_sets {
        if !sets.insert(s.name.as_str()) {
            return Err(PackError::Duplicate {
                what: "counter set",
                name: s.name.clone(),
            });
        }
        check_quantities(
            "counter set",
            &s.name,
            s.counters
                .iter()
                .map(|(k, q)| (format!("counters.{k}.value"), q))
                .collect(),
        )?;
        over(
            "counter set",
            &s.name,
            s.counters.len(),
            "counters",
            limits.counters_per_set,
        )?;
        over(
            "counter set",
            &s.name,
            s.counters.len(),
            "counters",
            limits.shared_counters,
        )?;
    }
    Ok(())
}
