//! The rules of `pkg/apis/resource/validation` that changed between releases, and the
//! opaque-parameter rule of every release. Objects are in `v1`'s layout, after the
//! fields of disabled gates were dropped (`super::super::gates`), as upstream validates
//! after `PrepareForCreate`/`PrepareForUpdate`.
//!
//! - Device taint effects: `NoSchedule` and `NoExecute` up to 1.34; `None` from 1.35
//!   (`validDeviceTaintEffects`). Taints per device: 4 up to 1.34, 16 from 1.35
//!   (`DeviceTaintsMaxLength`).
//! - Counters: up to 1.34 a device consumes counters of a counter set of its own slice
//!   ("must reference a counterSet defined in the ResourceSlice sharedCounters"), at most
//!   32 shared counters per slice (`ResourceSliceMaxSharedCounters`) and 32 counters
//!   consumed per device (`ResourceSliceMaxCountersPerDevice`); from 1.35 a slice lists
//!   `sharedCounters` or `devices`, not both, at most 8 counter sets
//!   (`ResourceSliceMaxCounterSets`), 2 consumptions per device
//!   (`ResourceSliceMaxDeviceCounterConsumptionsPerDevice`), and 64 devices when any of
//!   them has taints or consumes counters
//!   (`ResourceSliceMaxDevicesWithTaintsOrConsumesCounters`).
//! - Opaque parameters (`validateRawExtension`): required, a JSON object, at most 10 KiB
//!   on create (`OpaqueParametersMaxLength`); in claims, templates and DeviceClasses. The
//!   refusal of a non-object is worded differently up to 1.33.

use serde_json::Value;

use super::super::error::FieldCause;

const OPAQUE_PARAMETERS_MAX: usize = 10 * 1024;

fn list<'a>(v: Option<&'a Value>, field: &str) -> &'a [Value] {
    v.and_then(|v| v.get(field))
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn map_len(v: &Value, field: &str) -> usize {
    v.get(field)
        .and_then(Value::as_object)
        .map_or(0, |m| m.len())
}

pub(super) fn unsupported(field: String, value: &str, supported: &[&str]) -> FieldCause {
    let supported: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
    FieldCause {
        reason: "FieldValueNotSupported",
        message: format!(
            "Unsupported value: {value:?}: supported values: {}",
            supported.join(", ")
        ),
        field,
    }
}

/// The release-dependent rules of `validateResourceSliceSpec` for `spec` of a slice.
pub fn slice(spec: Option<&Value>, server_version: (u32, u32), causes: &mut Vec<FieldCause>) {
    let Some(spec) = spec else { return };
    let since_1_35 = server_version >= (1, 35);
    let devices = list(Some(spec), "devices");
    let counter_sets = list(Some(spec), "sharedCounters");
    if since_1_35 && spec.get("sharedCounters").is_some() && spec.get("devices").is_some() {
        causes.push(FieldCause::invalid(
            "spec",
            &Value::String(String::new()),
            "only one of `sharedCounters` or `devices` is allowed",
        ));
    }
    let (effects, max_taints): (&[&str], usize) = if since_1_35 {
        (&["NoExecute", "NoSchedule", "None"], 16)
    } else {
        (&["NoExecute", "NoSchedule"], 4)
    };
    for (i, device) in devices.iter().enumerate() {
        let at = format!("spec.devices[{i}]");
        let taints = list(Some(device), "taints");
        for (t, taint) in taints.iter().enumerate() {
            let effect = taint
                .get("effect")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if effect.is_empty() {
                causes.push(FieldCause::required(format!("{at}.taints[{t}].effect"), ""));
            } else if !effects.contains(&effect) {
                causes.push(unsupported(
                    format!("{at}.taints[{t}].effect"),
                    effect,
                    effects,
                ));
            }
        }
        if taints.len() > max_taints {
            causes.push(FieldCause::too_many(
                format!("{at}.taints"),
                taints.len(),
                max_taints,
            ));
        }
        let consumes = list(Some(device), "consumesCounters");
        if since_1_35 {
            if consumes.len() > 2 {
                causes.push(FieldCause::too_many(
                    format!("{at}.consumesCounters"),
                    consumes.len(),
                    2,
                ));
            }
            continue;
        }
        let counters: usize = consumes.iter().map(|c| map_len(c, "counters")).sum();
        if counters > 32 {
            causes.push(FieldCause::invalid(
                &at,
                &Value::from(counters),
                "the total number of counters must not exceed 32",
            ));
        }
        for (c, consumption) in consumes.iter().enumerate() {
            let set_name = consumption
                .get("counterSet")
                .and_then(Value::as_str)
                .unwrap_or_default();
            match counter_sets
                .iter()
                .find(|s| s.get("name").and_then(Value::as_str) == Some(set_name))
            {
                None => causes.push(FieldCause::invalid(
                    format!("{at}.consumesCounters[{c}].counterSet"),
                    &Value::String(set_name.into()),
                    "must reference a counterSet defined in the ResourceSlice sharedCounters",
                )),
                Some(set) => {
                    let defined = set.get("counters").and_then(Value::as_object);
                    for name in consumption
                        .get("counters")
                        .and_then(Value::as_object)
                        .into_iter()
                        .flat_map(|m| m.keys())
                    {
                        if !defined.is_some_and(|d| d.contains_key(name)) {
                            causes.push(FieldCause::invalid(
                                format!("{at}.consumesCounters[{c}].counters"),
                                &Value::String(name.clone()),
                                "must reference a counter defined in the ResourceSlice sharedCounters",
                            ));
                        }
                    }
                }
            }
        }
    }
    if since_1_35 {
        let advanced = devices.iter().any(|d| {
            !list(Some(d), "taints").is_empty() || !list(Some(d), "consumesCounters").is_empty()
        });
        // 128 devices (the limit of every release) is checked with the other rules.
        if advanced && devices.len() > 64 {
            causes.push(FieldCause::too_many("spec.devices", devices.len(), 64));
        }
        if counter_sets.len() > 8 {
            causes.push(FieldCause::too_many(
                "spec.sharedCounters",
                counter_sets.len(),
                8,
            ));
        }
    } else {
        let shared: usize = counter_sets.iter().map(|s| map_len(s, "counters")).sum();
        if shared > 32 {
            causes.push(FieldCause::invalid(
                "spec.sharedCounters",
                &Value::from(shared),
                "the total number of shared counters must not exceed 32",
            ));
        }
    }
}

/// `validateRawExtension` of the `opaque.parameters` of each entry of `config` (a claim's
/// `spec.devices.config`, a DeviceClass's `spec.config`); the size limit applies when
/// `created`.
pub fn opaque_config(
    config: Option<&Value>,
    path: &str,
    created: bool,
    server_version: (u32, u32),
    causes: &mut Vec<FieldCause>,
) {
    // The wording lost its leading "parameters " in 1.34 (1.32.13 and 1.33.13 say
    // "parameters must be a valid JSON object"; 1.34.4 on say "must be …").
    let not_an_object = if server_version >= (1, 34) {
        "must be a valid JSON object"
    } else {
        "parameters must be a valid JSON object"
    };
    for (i, entry) in config
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let Some(opaque) = entry.get("opaque").filter(|o| !o.is_null()) else {
            continue;
        };
        let field = format!("{path}[{i}].opaque.parameters");
        let omitted = Value::String("<value omitted>".into());
        match opaque.get("parameters") {
            None | Some(Value::Null) => causes.push(FieldCause::required(field, "")),
            Some(p) if created && p.to_string().len() > OPAQUE_PARAMETERS_MAX => {
                causes.push(FieldCause {
                    reason: "FieldValueTooLong",
                    message: format!(
                        "Too long: may not be more than {OPAQUE_PARAMETERS_MAX} bytes"
                    ),
                    field,
                })
            }
            Some(Value::Object(_)) => {}
            Some(_) => causes.push(FieldCause::invalid(field, &omitted, not_an_object)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn messages(spec: Value, version: (u32, u32)) -> Vec<String> {
        let mut causes = Vec::new();
        slice(Some(&spec), version, &mut causes);
        causes
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    fn tainted(n: usize, effect: &str) -> Value {
        let devices: Vec<Value> = (0..n)
            .map(|i| json!({"name": format!("d{i}"), "taints": [{"key": "k", "effect": effect}]}))
            .collect();
        json!({"devices": devices})
    }

    #[test]
    fn the_none_effect_is_valid_from_1_35() {
        assert_eq!(
            messages(tainted(1, "None"), (1, 34)),
            [
                "spec.devices[0].taints[0].effect: Unsupported value: \"None\": supported values: \"NoExecute\", \"NoSchedule\""
            ]
        );
        assert!(messages(tainted(1, "None"), (1, 35)).is_empty());
    }

    #[test]
    fn sixty_five_tainted_devices_are_too_many_from_1_35() {
        assert!(messages(tainted(65, "NoSchedule"), (1, 34)).is_empty());
        assert_eq!(
            messages(tainted(65, "NoSchedule"), (1, 35)),
            ["spec.devices: Too many: 65: must have at most 64 items"]
        );
        assert!(messages(tainted(64, "NoSchedule"), (1, 35)).is_empty());
    }

    #[test]
    fn counter_sets_live_with_their_devices_in_1_34_and_alone_from_1_35() {
        let together = json!({
            "sharedCounters": [{"name": "gpu-0", "counters": {"memory": {"value": "80Gi"}}}],
            "devices": [{"name": "p", "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": "40Gi"}}}]}]
        });
        assert!(messages(together.clone(), (1, 34)).is_empty());
        assert_eq!(
            messages(together, (1, 35)),
            ["spec: Invalid value: \"\": only one of `sharedCounters` or `devices` is allowed"]
        );
        let apart = json!({"devices": [{"name": "p", "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": "40Gi"}}}]}]});
        assert!(messages(apart.clone(), (1, 35)).is_empty());
        assert_eq!(
            messages(apart, (1, 34)),
            [
                "spec.devices[0].consumesCounters[0].counterSet: Invalid value: \"gpu-0\": must reference a counterSet defined in the ResourceSlice sharedCounters"
            ]
        );
    }

    #[test]
    fn opaque_parameters_must_be_a_json_object() {
        let mut causes = Vec::new();
        let config = json!([
            {"opaque": {"driver": "d", "parameters": "split=2"}},
            {"opaque": {"driver": "d", "parameters": {"split": 2}}},
            {"opaque": {"driver": "d"}},
            {"opaque": {"driver": "d", "parameters": {"x": "y".repeat(OPAQUE_PARAMETERS_MAX)}}}
        ]);
        opaque_config(
            Some(&config),
            "spec.devices.config",
            true,
            (1, 34),
            &mut causes,
        );
        let got: Vec<String> = causes
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        assert_eq!(
            got,
            [
                "spec.devices.config[0].opaque.parameters: Invalid value: \"<value omitted>\": must be a valid JSON object",
                "spec.devices.config[2].opaque.parameters: Required value",
                "spec.devices.config[3].opaque.parameters: Too long: may not be more than 10240 bytes",
            ]
        );
        let mut causes = Vec::new();
        opaque_config(
            Some(&config),
            "spec.devices.config",
            true,
            (1, 33),
            &mut causes,
        );
        assert_eq!(
            causes[0].message,
            "Invalid value: \"<value omitted>\": parameters must be a valid JSON object"
        );
    }
}
