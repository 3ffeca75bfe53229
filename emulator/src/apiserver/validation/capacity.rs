//! The request policies of devices' consumable capacities (`validateMultiAllocatableDeviceCapacity`,
//! `validateSingleAllocatableDeviceCapacity` and what they call, k8s.io/kubernetes v1.37.2
//! `pkg/apis/resource/validation/validation.go`). Upstream validates a device's capacity
//! only when it is new or changed; the emulator validates it on every write.

use serde_json::Value;

use crate::apiserver::error::FieldCause;
use crate::quantity::Quantity;

/// `CapacityRequestPolicyDiscreteMaxOptions`.
const VALID_VALUES_MAX: usize = 10;

/// The capacities of device `i`; `fractional`: DRAFractionalCapacityRange is on.
pub fn device_capacities(device: &Value, i: usize, fractional: bool, causes: &mut Vec<FieldCause>) {
    let shared = device
        .get("allowMultipleAllocations")
        .and_then(Value::as_bool)
        == Some(true);
    for (name, capacity) in device
        .get("capacity")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let Some(policy) = capacity.get("requestPolicy").filter(|p| !p.is_null()) else {
            continue;
        };
        let path = format!("spec.devices[{i}].capacity[{name}].requestPolicy");
        if !shared {
            causes.push(FieldCause::forbidden(
                path,
                "allowMultipleAllocations must be true",
            ));
            continue;
        }
        let Some(value) = quantity(capacity.get("value")) else {
            continue;
        };
        request_policy(value, policy, &path, fractional, causes);
    }
}

fn quantity(v: Option<&Value>) -> Option<Quantity> {
    Quantity::parse(v?.as_str()?)
}

fn text(q: Quantity) -> Value {
    Value::String(q.to_string())
}

/// `validateRequestPolicy` and `validateValidRequestValues`.
fn request_policy(
    value: Quantity,
    policy: &Value,
    path: &str,
    fractional: bool,
    causes: &mut Vec<FieldCause>,
) {
    let values: Vec<Quantity> = policy
        .get("validValues")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| quantity(Some(v)))
        .collect();
    let range = policy.get("validRange").filter(|r| !r.is_null());
    let default = quantity(policy.get("default"));
    if !values.is_empty() && range.is_some() {
        causes.push(FieldCause::forbidden(
            path,
            "exactly one policy can be specified, cannot specify \"validValues\" and \"validRange\" at the same time",
        ));
        return;
    }
    let kind = match (values.is_empty(), range.is_some()) {
        (false, _) => "validValues",
        (true, true) => "validRange",
        (true, false) => return,
    };
    let Some(default) = default else {
        causes.push(FieldCause::required(
            format!("{path}.default"),
            format!("required when {kind} is defined"),
        ));
        return;
    };
    let path = format!("{path}.{kind}");
    if !values.is_empty() {
        valid_values(default, value, &values, &path, fractional, causes);
    } else if let Some(range) = range {
        valid_range(default, value, range, &path, fractional, causes);
    }
}

/// `validateRequestPolicyValidValues`.
fn valid_values(
    default: Quantity,
    value: Quantity,
    values: &[Quantity],
    path: &str,
    fractional: bool,
    causes: &mut Vec<FieldCause>,
) {
    for (i, pair) in values.windows(2).enumerate() {
        if pair[0].nanos() > pair[1].nanos() {
            causes.push(FieldCause::invalid(
                format!("{path}[{}]", i + 1),
                &text(pair[1]),
                "values must be sorted in ascending order",
            ));
        }
    }
    let mut found_default = false;
    if values.len() > VALID_VALUES_MAX {
        causes.push(FieldCause::too_many(path, values.len(), VALID_VALUES_MAX));
    } else {
        let mut keys: Vec<String> = Vec::new();
        for (i, option) in values.iter().enumerate() {
            if option.nanos() > value.nanos() {
                causes.push(FieldCause::invalid(
                    format!("{path}[{i}]"),
                    &text(*option),
                    format!("option is larger than capacity value: {value}"),
                ));
            }
            found_default |= option.nanos() == default.nanos();
            // `quantityKeyAsDec` with the gate (here the plain decimal value),
            // `quantityKeyInt` without.
            let key = if fractional {
                decimal(*option)
            } else {
                option.value().to_string()
            };
            if keys.contains(&key) {
                causes.push(FieldCause {
                    reason: "FieldValueDuplicate",
                    field: format!("{path}[{i}]"),
                    message: format!("Duplicate value: {key:?}"),
                });
            } else {
                keys.push(key);
            }
        }
    }
    if !found_default {
        causes.push(FieldCause::invalid(
            path,
            &text(default),
            "default value is not valid according to the requestPolicy",
        ));
    }
}

/// A quantity as a plain decimal number.
fn decimal(q: Quantity) -> String {
    let nanos = q.nanos();
    let sign = if nanos < 0 { "-" } else { "" };
    let (whole, fraction) = (nanos.abs() / 1_000_000_000, nanos.abs() % 1_000_000_000);
    if fraction == 0 {
        return format!("{sign}{whole}");
    }
    let digits = format!("{fraction:09}");
    format!("{sign}{whole}.{}", digits.trim_end_matches('0'))
}

/// `validateRequestPolicyRange`.
fn valid_range(
    default: Quantity,
    value: Quantity,
    range: &Value,
    path: &str,
    fractional: bool,
    causes: &mut Vec<FieldCause>,
) {
    let Some(min) = quantity(range.get("min")) else {
        causes.push(FieldCause::required(
            format!("{path}.min"),
            "required when validRange is defined",
        ));
        return;
    };
    let max = quantity(range.get("max"));
    let step = quantity(range.get("step"));
    let invalid = |causes: &mut Vec<FieldCause>, field: &str, q: Quantity, detail: String| {
        causes.push(FieldCause::invalid(
            format!("{path}.{field}"),
            &text(q),
            detail,
        ));
    };
    if min.nanos() > value.nanos() {
        invalid(
            causes,
            "min",
            min,
            format!("min is larger than capacity value: {value}"),
        );
    }
    if default.nanos() < min.nanos() {
        invalid(
            causes,
            "default",
            default,
            format!("default is less than min: {min}"),
        );
    }
    if let Some(max) = max {
        if min.nanos() > max.nanos() {
            invalid(causes, "max", min, format!("min is larger than max: {max}"));
        }
        if max.nanos() > value.nanos() {
            invalid(
                causes,
                "max",
                max,
                format!("max is larger than capacity value: {value}"),
            );
        }
        if default.nanos() > max.nanos() {
            invalid(
                causes,
                "default",
                default,
                format!("default is more than max: {max}"),
            );
        }
    }
    let fractional_part = |q: Quantity| q.nanos() % 1_000_000_000 != 0;
    let use_milli = fractional
        && ([Some(min), max, step]
            .into_iter()
            .flatten()
            .any(fractional_part)
            || fractional_part(default));
    if use_milli {
        let mut unsafe_value = false;
        for (field, q) in [
            ("default", Some(default)),
            ("min", Some(min)),
            ("max", max),
            ("step", step),
        ] {
            if let Some(q) = q.filter(|q| !q.is_exact_milli()) {
                invalid(
                    causes,
                    field,
                    q,
                    "value cannot be represented as a milli value".into(),
                );
                unsafe_value = true;
            }
        }
        if unsafe_value {
            return;
        }
    }
    let Some(step) = step else {
        return;
    };
    if step.nanos() <= 0 {
        invalid(causes, "step", step, "must be greater than zero".into());
        return;
    }
    if min.nanos() + step.nanos() > value.nanos() {
        let added = Quantity::from_nanos(min.nanos() + step.nanos(), min.format());
        invalid(
            causes,
            "step",
            step,
            format!("one step {added} is larger than capacity value: {value}"),
        );
    }
    if !use_milli {
        let mut unsafe_value = false;
        for (field, q) in [
            ("default", Some(default)),
            ("min", Some(min)),
            ("max", max),
            ("step", Some(step)),
        ] {
            let Some(q) = q else { continue };
            if q.nanos() < 0 {
                invalid(
                    causes,
                    field,
                    q,
                    "must be greater than or equal to 0".into(),
                );
                unsafe_value = true;
            } else if q.nanos() > i128::from(i64::MAX) * 1_000_000_000 {
                invalid(
                    causes,
                    field,
                    q,
                    "must not be larger than 9223372036854775807".into(),
                );
                unsafe_value = true;
            }
        }
        if unsafe_value {
            return;
        }
    }
    // `validateRequestPolicyRangeStep`: default and max lie on a step from min.
    let units = |q: Quantity| {
        if use_milli {
            q.milli_value()
        } else {
            q.value()
        }
    };
    for q in [Some(default), max].into_iter().flatten() {
        if (units(q) - units(min)) % units(step) != 0 {
            invalid(
                causes,
                "step",
                q,
                format!("value is not a multiple of a given step ({step}) from ({min})"),
            );
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn messages(device: Value, fractional: bool) -> Vec<String> {
        let mut causes = Vec::new();
        device_capacities(&device, 0, fractional, &mut causes);
        causes
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    fn shared(policy: Value) -> Value {
        json!({"name": "d", "allowMultipleAllocations": true,
            "capacity": {"memory": {"value": "8Gi", "requestPolicy": policy}}})
    }

    #[test]
    fn a_good_policy_passes() {
        let ok = shared(json!({"default": "1Gi", "validRange": {"min": "1Gi", "step": "512Mi"}}));
        assert_eq!(messages(ok, true), Vec::<String>::new());
        let ok = shared(json!({"default": "1Gi", "validValues": ["1Gi", "2Gi"]}));
        assert_eq!(messages(ok, true), Vec::<String>::new());
        let fractional = json!({"name": "d", "allowMultipleAllocations": true,
            "capacity": {"bw": {"value": "10", "requestPolicy": {"default": "500m",
                "validRange": {"min": "250m", "max": "2", "step": "250m"}}}}});
        assert_eq!(messages(fractional, true), Vec::<String>::new());
    }

    #[test]
    fn bad_policies_are_refused_with_upstreams_messages() {
        let p = "spec.devices[0].capacity[memory].requestPolicy";
        let exclusive = json!({"name": "d", "capacity": {"memory": {"value": "8Gi",
            "requestPolicy": {"default": "1Gi"}}}});
        assert_eq!(
            messages(exclusive, true),
            [format!(
                "{p}: Forbidden: allowMultipleAllocations must be true"
            )]
        );
        assert_eq!(
            messages(shared(json!({"validRange": {"min": "1Gi"}})), true),
            [format!(
                "{p}.default: Required value: required when validRange is defined"
            )]
        );
        assert_eq!(
            messages(
                shared(
                    json!({"default": "1Gi", "validRange": {"min": "1Gi", "step": "3Gi"}, "validValues": ["1Gi"]})
                ),
                true
            ),
            [format!(
                "{p}: Forbidden: exactly one policy can be specified, cannot specify \"validValues\" and \"validRange\" at the same time"
            )]
        );
        assert_eq!(
            messages(
                shared(
                    json!({"default": "1536Mi", "validRange": {"min": "1Gi", "max": "16Gi", "step": "1Gi"}})
                ),
                true
            ),
            [
                format!(
                    "{p}.validRange.max: Invalid value: \"16Gi\": max is larger than capacity value: 8Gi"
                ),
                format!(
                    "{p}.validRange.step: Invalid value: \"1536Mi\": value is not a multiple of a given step (1Gi) from (1Gi)"
                ),
            ]
        );
        assert_eq!(
            messages(
                shared(json!({"default": "3Gi", "validValues": ["2Gi", "1Gi", "9Gi"]})),
                true
            ),
            [
                format!(
                    "{p}.validValues[1]: Invalid value: \"1Gi\": values must be sorted in ascending order"
                ),
                format!(
                    "{p}.validValues[2]: Invalid value: \"9Gi\": option is larger than capacity value: 8Gi"
                ),
                format!(
                    "{p}.validValues: Invalid value: \"3Gi\": default value is not valid according to the requestPolicy"
                ),
            ]
        );
        let micro = json!({"name": "d", "allowMultipleAllocations": true,
            "capacity": {"bw": {"value": "10", "requestPolicy": {"default": "1",
                "validRange": {"min": "1u", "step": "1"}}}}});
        assert_eq!(
            messages(micro, true),
            [
                "spec.devices[0].capacity[bw].requestPolicy.validRange.min: Invalid value: \"1u\": value cannot be represented as a milli value"
            ]
        );
    }
}
